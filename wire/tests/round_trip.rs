//! Metacontroller-format JSON under `tests/fixtures/`: decoding each body into its wire type and
//! encoding it again gives the same JSON, field for field and in the same order.

#![allow(clippy::unwrap_used)]

use std::fmt::Debug;
use std::path::Path;

use kmeta_wire::{
    CustomizeRequest, CustomizeResponse, DecoratorSyncRequest, DecoratorSyncResponse, SyncRequest,
    SyncResponse, WireFields,
};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

fn fixture(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Decodes fixture `name` as `T`, checks that it encodes back to the same JSON (same bytes once
/// both are written compactly), that the decoded value survives a second round trip, and that
/// every top-level field is one of `T::FIELDS`.
fn round_trip<T>(name: &str) -> T
where
    T: DeserializeOwned + Serialize + PartialEq + Debug + WireFields,
{
    let text = fixture(name);
    let original: Value = serde_json::from_str(&text).unwrap();
    let decoded: T = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
    let encoded = serde_json::to_value(&decoded).unwrap();
    assert_eq!(encoded, original, "{name}: value differs");
    assert_eq!(
        serde_json::to_string(&decoded).unwrap(),
        serde_json::to_string(&original).unwrap(),
        "{name}: bytes differ"
    );
    let again: T = serde_json::from_value(encoded).unwrap();
    assert_eq!(again, decoded, "{name}: second decode differs");
    for key in original.as_object().unwrap().keys() {
        assert!(T::FIELDS.contains(&key.as_str()), "{name}: {key}");
    }
    decoded
}

/// A request turned into a `Value` by moving its fields (what the controller sends) is exactly
/// its serde encoding, bytes and order included.
fn moves_to_its_encoding<T: Serialize + Clone + Into<Value>>(name: &str, request: &T) {
    let moved: Value = request.clone().into();
    assert_eq!(
        serde_json::to_string(&moved).unwrap(),
        serde_json::to_string(request).unwrap(),
        "{name}: Value::from differs from the serde encoding"
    );
}

#[test]
fn requests_convert_to_values_as_they_encode() {
    for name in [
        "composite-sync-request-v1.json",
        "composite-sync-request-v2.json",
        "composite-finalize-request-v1-cluster-parent.json",
    ] {
        moves_to_its_encoding(name, &round_trip::<SyncRequest>(name));
    }
    for name in [
        "decorator-sync-request-v1.json",
        "decorator-finalize-request-v2.json",
    ] {
        moves_to_its_encoding(name, &round_trip::<DecoratorSyncRequest>(name));
    }
    let name = "customize-request.json";
    moves_to_its_encoding(name, &round_trip::<CustomizeRequest>(name));
}

#[test]
fn composite_requests() {
    let v1: SyncRequest = round_trip("composite-sync-request-v1.json");
    assert_eq!(v1.parent_name(), "hello");
    assert_eq!(v1.parent_namespace(), Some("team-a"));
    assert_eq!(v1.controller["kind"], "CompositeController");
    let pods: Vec<&str> = v1.children.of_kind("Pod", "v1").map(|(k, _)| k).collect();
    assert_eq!(pods, ["hello-0", "hello-1"]);
    assert_eq!(v1.children.group("Service.v1").map(|g| g.len()), Some(0));
    assert!(v1.related.is_empty() && !v1.finalizing);

    let v2: SyncRequest = round_trip("composite-sync-request-v2.json");
    let sts = v2
        .children
        .get("StatefulSet", "apps/v1", Some("prod"), "shop")
        .unwrap();
    assert_eq!(sts["status"]["readyReplicas"], 1);
    assert!(
        v2.related
            .get("ConfigMap", "v1", Some("shared"), "settings")
            .is_some()
    );
    assert!(v2.related.get("Namespace", "v1", None, "shared").is_some());

    let fin: SyncRequest = round_trip("composite-finalize-request-v1-cluster-parent.json");
    assert!(fin.finalizing);
    assert_eq!(fin.parent_namespace(), None);
    assert!(
        fin.children
            .get("ConfigMap", "v1", Some("acme"), "quota")
            .is_some()
    );
    assert!(fin.children.get("Namespace", "v1", None, "acme").is_some());
}

#[test]
fn composite_responses() {
    let full: SyncResponse = round_trip("composite-sync-response.json");
    assert_eq!(full.status.as_ref().unwrap()["replicas"], 2);
    assert_eq!(full.children.len(), 2);
    assert!((full.resync_after_seconds - 2.5).abs() < f64::EPSILON);
    assert!(full.finalized);

    let minimal: SyncResponse = round_trip("composite-sync-response-minimal.json");
    assert_eq!(minimal, SyncResponse::default());

    let go: SyncResponse =
        serde_json::from_str(&fixture("composite-sync-response-go-zero.json")).unwrap();
    assert_eq!(
        go, minimal,
        "Go's zero values mean the same as absent fields"
    );
}

#[test]
fn decorator_requests_and_responses() {
    let v1: DecoratorSyncRequest = round_trip("decorator-sync-request-v1.json");
    assert_eq!(v1.object_name(), "nginx");
    assert!(
        v1.attachments
            .get("Service", "v1", Some("web"), "nginx-0")
            .is_some()
    );
    let v2: DecoratorSyncRequest = round_trip("decorator-finalize-request-v2.json");
    assert!(v2.finalizing);
    assert_eq!(v2.object_namespace(), None);
    assert!(
        v2.attachments
            .get("ConfigMap", "v1", Some("kube-system"), "gpu-1-drivers")
            .is_some()
    );

    let resp: DecoratorSyncResponse = round_trip("decorator-sync-response.json");
    assert_eq!(resp.labels["decorated"].as_deref(), Some("true"));
    assert_eq!(resp.labels["stale"], None);
    assert_eq!(resp.annotations["example.com/old"], None);
    assert_eq!(resp.attachments.len(), 1);
    assert!(resp.finalized);
    let go: DecoratorSyncResponse =
        serde_json::from_str(&fixture("decorator-sync-response-go-zero.json")).unwrap();
    assert_eq!(go, DecoratorSyncResponse::default());
}

#[test]
fn customize() {
    let req: CustomizeRequest = round_trip("customize-request.json");
    assert_eq!(req.parent["spec"]["sourceName"], "settings");
    let resp: CustomizeResponse = round_trip("customize-response.json");
    let [by_name, by_selectors, all] = &resp.related_resources[..] else {
        panic!("three rules expected: {resp:?}");
    };
    assert_eq!(by_name.namespace.as_deref(), Some("source"));
    assert_eq!(by_name.names.as_deref(), Some(&["settings".to_owned()][..]));
    assert!(by_selectors.label_selector.is_some() && by_selectors.namespace_selector.is_some());
    assert_eq!(all.api_version, "apps/v1");
    let go: CustomizeResponse =
        serde_json::from_str(&fixture("customize-response-go-zero.json")).unwrap();
    assert!(go.related_resources.is_empty());
}
