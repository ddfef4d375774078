//! kmeta's own CRDs (`kmeta crds`, deploy/crds/) against its API types, under the structural-
//! schema rules a real API server applies to every write: an object with every field the schema
//! describes set decodes into the Rust type and encodes back to the same object, and what the
//! Rust types write is neither pruned nor rejected. A field the schema did not describe would be
//! silently dropped by a real cluster.
#![allow(clippy::unwrap_used)]

use kmeta::api::{CompositeController, DecoratorController};
use kmeta_apiserver::schema::Schema;
use serde_json::{Map, Value, json};

/// A value for every field a schema node describes.
fn sample(s: &Value) -> Value {
    if let Some(e) = s
        .get("enum")
        .and_then(Value::as_array)
        .and_then(|e| e.first())
    {
        return e.clone();
    }
    if s.get("x-kubernetes-int-or-string") == Some(&json!(true)) {
        return json!(1);
    }
    match s.get("type").and_then(Value::as_str) {
        Some("object") => {
            let mut m = Map::new();
            if let Some(props) = s.get("properties").and_then(Value::as_object) {
                for (k, p) in props {
                    m.insert(k.clone(), sample(p));
                }
            }
            if let Some(ap) = s.get("additionalProperties").filter(|a| a.is_object()) {
                m.insert("key".into(), sample(ap));
            }
            Value::Object(m)
        }
        Some("array") => json!([sample(s.get("items").unwrap_or(&json!({})))]),
        Some("string") => json!("x"),
        Some("integer") => json!(1),
        Some("number") => json!(1.5),
        Some("boolean") => json!(true),
        _ => json!({"free": 1}),
    }
}

fn schema_of(crd: &Value) -> &Value {
    &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
}

/// `round_trip`: decode into the Rust type and encode again.
fn check(crd: Value, round_trip: impl Fn(Value) -> Value) {
    let name = crd["metadata"]["name"].as_str().unwrap().to_string();
    let raw = schema_of(&crd);
    let schema = Schema::compile(raw).unwrap();
    let mut full = json!({
        "apiVersion": "metacontroller.k8s.io/v1alpha1",
        "kind": crd["spec"]["names"]["kind"],
        "metadata": {"name": "x"},
        "spec": sample(&raw["properties"]["spec"]),
    });
    if raw["properties"].get("status").is_some() {
        full["status"] = sample(&raw["properties"]["status"]);
    }
    fn leaves(v: &Value) -> usize {
        match v {
            Value::Object(m) => m.values().map(leaves).sum(),
            Value::Array(a) => a.iter().map(leaves).sum(),
            _ => 1,
        }
    }
    assert!(
        leaves(&full["spec"]) > 40,
        "{name}: sample too shallow: {full}"
    );
    // every field the schema describes is a field of the Rust type
    let written = round_trip(full.clone());
    assert_eq!(
        written["spec"], full["spec"],
        "{name}: the Rust type drops schema fields"
    );
    // what the Rust type writes survives pruning and validation
    let mut pruned = written.clone();
    let dropped = schema.prune(&mut pruned);
    assert!(dropped.is_empty(), "{name}: pruning drops {dropped:?}");
    let errs = schema.validate(&pruned, None);
    assert!(errs.is_empty(), "{name}: {errs:?}");
}

#[test]
fn composite_controller_schema_describes_every_field() {
    let crd =
        serde_json::to_value(<CompositeController as kube::CustomResourceExt>::crd()).unwrap();
    check(crd, |v| {
        serde_json::to_value(serde_json::from_value::<CompositeController>(v).unwrap()).unwrap()
    });
}

#[test]
fn decorator_controller_schema_describes_every_field() {
    let crd =
        serde_json::to_value(<DecoratorController as kube::CustomResourceExt>::crd()).unwrap();
    check(crd, |v| {
        serde_json::to_value(serde_json::from_value::<DecoratorController>(v).unwrap()).unwrap()
    });
}

#[test]
fn controller_revision_schema_describes_every_field() {
    let crd = serde_json::to_value(kmeta::api::crds::controller_revision_crd().unwrap()).unwrap();
    let schema = Schema::compile(schema_of(&crd)).unwrap();
    let rev = kmeta::api::ControllerRevision {
        api_version: "metacontroller.k8s.io/v1alpha1".into(),
        kind: "ControllerRevision".into(),
        metadata: Default::default(),
        parent_patch: json!({"spec": {"template": {"a": 1}}}),
        children: vec![kmeta::api::ControllerRevisionChildren {
            api_group: "apps".into(),
            kind: "Deployment".into(),
            names: vec!["a".into()],
        }],
    };
    let written = serde_json::to_value(&rev).unwrap();
    let mut pruned = written.clone();
    assert_eq!(schema.prune(&mut pruned), Vec::<String>::new());
    assert_eq!(pruned, written);
    assert!(schema.validate(&pruned, None).is_empty());
}
