//! The SDK's protocol types as a hook author uses them: Metacontroller's JSON decodes into them
//! and the builders encode what Metacontroller expects. (These tests lived beside the SDK's own
//! type definitions before the types moved to `kmeta-wire`; they are unchanged.)

use kmeta_hook::{
    CustomizeRequest, CustomizeResponse, FinalizeRequest, FinalizeResponse, RelatedResourceRule,
    SyncRequest, SyncResponse, child,
};
use serde_json::json;

#[test]
fn v1_sync_request_from_metacontroller_json() {
    let body = json!({
        "controller": {"apiVersion": "metacontroller.k8s.io/v1alpha1",
                       "kind": "CompositeController", "metadata": {"name": "hello-cc"},
                       "spec": {"parentResource": {"apiVersion": "example.com/v1",
                                                   "resource": "hellos"}}},
        "parent": {"apiVersion": "example.com/v1", "kind": "Hello",
                   "metadata": {"name": "world", "namespace": "default", "uid": "u1"},
                   "spec": {"who": "World"}},
        "children": {
            "Pod.v1": {"world": {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "world", "namespace": "default"},
                "status": {"phase": "Running"}}},
            "Service.v1": {}
        },
        "related": {},
        "finalizing": false
    });
    let req: SyncRequest = serde_json::from_value(body).expect("decodes");
    assert_eq!(req.parent_name(), "world");
    assert_eq!(req.parent_namespace(), Some("default"));
    assert_eq!(req.parent_field("/spec/who"), Some(&json!("World")));
    let pods: Vec<_> = req.children.of_kind("Pod", "v1").collect();
    assert_eq!(pods.len(), 1);
    assert_eq!(pods[0].0, "world");
    assert_eq!(req.children.of_kind("Service", "v1").count(), 0);
    assert!(
        req.children
            .get("Pod", "v1", Some("default"), "world")
            .is_some()
    );
    assert!(
        req.children
            .get("Pod", "v1", Some("other"), "world")
            .is_none()
    );
    assert_eq!(req.children.len(), 1);
    assert!(!req.finalizing);
}

#[test]
fn v2_keys_and_finalize_request() {
    let body = json!({
        "controller": {},
        "parent": {"apiVersion": "example.com/v1", "kind": "Cluster",
                   "metadata": {"name": "c", "deletionTimestamp": "2026-01-01T00:00:00Z"}},
        "children": {"Deployment.apps/v1": {
            "ns1/web": {"apiVersion": "apps/v1", "kind": "Deployment",
                        "metadata": {"name": "web", "namespace": "ns1"}}}},
        "related": {"ConfigMap.v1": {"ns1/cfg": {"apiVersion": "v1", "kind": "ConfigMap",
                        "metadata": {"name": "cfg", "namespace": "ns1"}}}},
        "finalizing": true
    });
    let req: FinalizeRequest = serde_json::from_value(body).expect("decodes");
    assert!(req.finalizing);
    assert_eq!(req.parent_namespace(), None);
    assert!(
        req.children
            .get("Deployment", "apps/v1", Some("ns1"), "web")
            .is_some()
    );
    assert!(
        req.related
            .get("ConfigMap", "v1", Some("ns1"), "cfg")
            .is_some()
    );
}

#[test]
fn minimal_request_defaults() {
    let req: SyncRequest =
        serde_json::from_value(json!({"parent": {"metadata": {"name": "p"}}})).expect("ok");
    assert!(req.children.is_empty());
    assert!(req.related.is_empty());
    assert!(!req.finalizing);
}

#[test]
fn sync_response_serializes_like_metacontroller_expects() {
    let resp = SyncResponse::new()
        .status(json!({"replicas": 1}))
        .child(
            child("apps/v1", "Deployment", "web")
                .label("app", "web")
                .labels(&json!({"tier": "front", "n": 1}))
                .annotation("a", "b")
                .spec(json!({"replicas": 1}))
                .build(),
        )
        .resync_after(5.0);
    assert_eq!(
        serde_json::to_value(&resp).expect("serializes"),
        json!({
            "status": {"replicas": 1},
            "children": [{"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "web", "labels": {"app": "web", "tier": "front"},
                             "annotations": {"a": "b"}},
                "spec": {"replicas": 1}}],
            "resyncAfterSeconds": 5.0
        })
    );
    let fin = FinalizeResponse::new().finalized(true);
    assert_eq!(
        serde_json::to_value(&fin).expect("serializes"),
        json!({"children": [], "finalized": true})
    );
}

#[test]
fn customize_round_trip() {
    let req: CustomizeRequest = serde_json::from_value(json!({
        "controller": {"metadata": {"name": "cc"}},
        "parent": {"metadata": {"name": "p"}}
    }))
    .expect("decodes");
    assert_eq!(req.parent["metadata"]["name"], "p");
    let resp = CustomizeResponse {
        related_resources: vec![
            RelatedResourceRule::new("v1", "configmaps")
                .match_labels(json!({"propagate": "true"}))
                .namespace("source"),
            RelatedResourceRule::new("v1", "secrets").names(["a", "b"]),
        ],
    };
    assert_eq!(
        serde_json::to_value(&resp).expect("serializes"),
        json!({"relatedResources": [
            {"apiVersion": "v1", "resource": "configmaps",
             "labelSelector": {"matchLabels": {"propagate": "true"}}, "namespace": "source"},
            {"apiVersion": "v1", "resource": "secrets", "names": ["a", "b"]}
        ]})
    );
}
