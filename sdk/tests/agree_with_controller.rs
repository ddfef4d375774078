//! The SDK and the controller agree on the hook wire format: requests built the way the
//! controller builds them (its object maps, its request bodies, serialized as it sends them)
//! decode in the SDK with every field intact, and responses the SDK encodes pass the
//! controller's strict (and loose) decoder with every field intact.

#![allow(clippy::unwrap_used)]

use kmeta::api::{HookVersion, ResponseUnmarshallMode};
use kmeta::hook::wire;
use kmeta_hook::{
    CustomizeRequest, CustomizeResponse, RelatedResourceRule, SyncRequest, SyncResponse, child,
    group_key,
};
use serde_json::{Value, json};

fn cc() -> Value {
    json!({"apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "CompositeController",
           "metadata": {"name": "agree"},
           "spec": {"parentResource": {"apiVersion": "example.com/v1", "resource": "things"}}})
}

fn object(api_version: &str, kind: &str, ns: Option<&str>, name: &str) -> Value {
    let mut o = json!({"apiVersion": api_version, "kind": kind,
                       "metadata": {"name": name, "uid": format!("uid-{name}")},
                       "status": {"seen": true}});
    if let Some(ns) = ns {
        o["metadata"]["namespace"] = json!(ns);
    }
    o
}

/// One request per hook version and parent scope, as `sync.rs` builds it, sent as `hook.rs`
/// sends it (`serde_json::to_vec` of the body).
fn controller_request(
    version: HookVersion,
    parent_namespaced: bool,
    finalizing: bool,
) -> (Value, Vec<Value>, Vec<Value>, Vec<u8>) {
    let parent = if parent_namespaced {
        object("example.com/v1", "Thing", Some("team"), "t")
    } else {
        object("example.com/v1", "Thing", None, "t")
    };
    let children = vec![
        object("apps/v1", "Deployment", Some("team"), "web"),
        object("v1", "Service", Some("team"), "web"),
        object("apps/v1", "Deployment", Some("team"), "api"),
    ];
    let related = vec![
        object("v1", "ConfigMap", Some("team"), "settings"),
        object("v1", "Namespace", None, "team"),
    ];
    let declared = [
        group_key("apps/v1", "Deployment"),
        group_key("v1", "Service"),
        group_key("v1", "Secret"),
    ];
    let related_groups = [group_key("v1", "ConfigMap"), group_key("v1", "Namespace")];
    let children_map = wire::object_map(version, parent_namespaced, &declared, children.iter());
    let related_map = wire::object_map(version, parent_namespaced, &related_groups, related.iter());
    let body = wire::sync_request(&cc(), &parent, children_map, related_map, finalizing);
    (
        parent,
        children,
        related,
        serde_json::to_vec(&body).unwrap(),
    )
}

fn check_objects(map: &kmeta_hook::ObjectMap, objects: &[Value]) {
    assert_eq!(map.len(), objects.len());
    for o in objects {
        let meta = &o["metadata"];
        let (av, kind) = (
            o["apiVersion"].as_str().unwrap(),
            o["kind"].as_str().unwrap(),
        );
        let got = map.get(
            kind,
            av,
            meta["namespace"].as_str(),
            meta["name"].as_str().unwrap(),
        );
        assert_eq!(got, Some(o), "{kind} {meta}");
    }
}

#[test]
fn sync_requests_decode_in_the_sdk_with_every_field() {
    for version in [HookVersion::V1, HookVersion::V2] {
        for parent_namespaced in [true, false] {
            for finalizing in [false, true] {
                let (parent, children, related, bytes) =
                    controller_request(version, parent_namespaced, finalizing);
                let req: SyncRequest = serde_json::from_slice(&bytes).unwrap();
                assert_eq!(req.controller, cc());
                assert_eq!(req.parent, parent);
                assert_eq!(req.finalizing, finalizing);
                check_objects(&req.children, &children);
                check_objects(&req.related, &related);
                let groups: Vec<&str> = req.children.groups().map(|(g, _)| g).collect();
                assert_eq!(groups, ["Deployment.apps/v1", "Service.v1", "Secret.v1"]);
                assert_eq!(req.children.of_kind("Deployment", "apps/v1").count(), 2);
                assert_eq!(req.children.of_kind("Secret", "v1").count(), 0);
                assert_eq!(
                    serde_json::to_vec(&req).unwrap(),
                    bytes,
                    "the SDK re-encodes the controller's request byte for byte"
                );
            }
        }
    }
}

#[test]
fn object_keys_follow_the_hook_version() {
    let keys = |version, parent_namespaced| {
        let (_, _, _, bytes) = controller_request(version, parent_namespaced, false);
        let req: SyncRequest = serde_json::from_slice(&bytes).unwrap();
        let mut keys: Vec<String> = req
            .children
            .of_kind("Deployment", "apps/v1")
            .map(|(k, _)| k.to_owned())
            .collect();
        keys.extend(
            req.related
                .of_kind("Namespace", "v1")
                .map(|(k, _)| k.to_owned()),
        );
        keys
    };
    assert_eq!(keys(HookVersion::V1, true), ["web", "api", "team"]);
    assert_eq!(
        keys(HookVersion::V1, false),
        ["team/web", "team/api", "team"]
    );
    assert_eq!(
        keys(HookVersion::V2, true),
        ["team/web", "team/api", "team"]
    );
    assert_eq!(
        keys(HookVersion::V2, false),
        ["team/web", "team/api", "team"]
    );
}

#[test]
fn customize_request_decodes_in_the_sdk() {
    let parent = object("example.com/v1", "Thing", Some("team"), "t");
    let bytes = serde_json::to_vec(&wire::customize_request(&cc(), &parent)).unwrap();
    let req: CustomizeRequest = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(req.controller, cc());
    assert_eq!(req.parent, parent);
    assert_eq!(serde_json::to_vec(&req).unwrap(), bytes);
}

fn sdk_response() -> SyncResponse {
    SyncResponse::new()
        .status(json!({"ready": 2, "conditions": [{"type": "Ready", "status": "True"}]}))
        .child(
            child("apps/v1", "Deployment", "web")
                .namespace("team")
                .label("app", "web")
                .annotation("note", "x")
                .spec(json!({"replicas": 2}))
                .build(),
        )
        .child(
            child("v1", "Service", "web")
                .field("spec", json!({"ports": [{"port": 80}]}))
                .build(),
        )
        .resync_after(7.5)
        .finalized(true)
}

#[test]
fn sdk_sync_response_passes_the_strict_decoder_intact() {
    let resp = sdk_response();
    let bytes = serde_json::to_vec(&resp).unwrap();
    for mode in [
        ResponseUnmarshallMode::Strict,
        ResponseUnmarshallMode::Loose,
    ] {
        for hook in ["sync", "finalize"] {
            let decoded = wire::decode_sync_response(&bytes, mode, hook).unwrap();
            assert_eq!(decoded, resp, "{mode:?} {hook}");
        }
    }
    let empty = serde_json::to_vec(&SyncResponse::new()).unwrap();
    let decoded =
        wire::decode_sync_response(&empty, ResponseUnmarshallMode::Strict, "sync").unwrap();
    assert_eq!(decoded, SyncResponse::new());
}

#[test]
fn sdk_customize_response_passes_the_strict_decoder_intact() {
    let resp = CustomizeResponse {
        related_resources: vec![
            RelatedResourceRule::new("v1", "configmaps")
                .match_labels(json!({"propagate": "true"}))
                .namespace_selector(json!({"matchLabels": {"team": "a"}})),
            RelatedResourceRule::new("v1", "secrets")
                .namespace("source")
                .names(["a", "b"]),
            RelatedResourceRule::new("apps/v1", "deployments").label_selector(json!({})),
        ],
    };
    let bytes = serde_json::to_vec(&resp).unwrap();
    for mode in [
        ResponseUnmarshallMode::Strict,
        ResponseUnmarshallMode::Loose,
    ] {
        let rules = wire::decode_customize_response(&bytes, mode).unwrap();
        assert_eq!(rules, resp.related_resources, "{mode:?}");
    }
}
