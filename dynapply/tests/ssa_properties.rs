//! Property tests of the server-side apply hybrid ([`dynapply::server_side_apply_body`]): outside
//! the preserve-unknown-fields subtrees the body is the desired object; inside them it is the
//! three-way merge, so items other writers added to lists there survive.

#![allow(clippy::unwrap_used)]

use dynapply::{Options, json_eq, prepare_create, server_side_apply_body};
use proptest::prelude::*;
use serde_json::{Map, Value, json};

const KEYS: &[&str] = &["a", "b", "c", "spec", "containers", "env", "labels"];
const NAMES: &[&str] = &["app", "x", "y", "z"];

fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        any::<bool>().prop_map(Value::Bool),
        (-2i64..90).prop_map(Value::from),
        prop::sample::select(NAMES).prop_map(Value::from),
    ]
}

fn tree() -> impl Strategy<Value = Value> {
    leaf().prop_recursive(3, 32, 4, |inner| {
        prop_oneof![
            prop::collection::vec((prop::sample::select(KEYS), inner.clone()), 0..4).prop_map(
                |entries| {
                    let mut m = Map::new();
                    for (k, v) in entries {
                        m.insert(k.to_owned(), v);
                    }
                    Value::Object(m)
                }
            ),
            prop::collection::vec(inner, 0..3).prop_map(Value::Array),
        ]
    })
}

/// A child object: apiVersion, kind, name, and a `spec` and `other` of random content.
fn child() -> impl Strategy<Value = Value> {
    (tree(), tree()).prop_map(|(spec, other)| {
        json!({"apiVersion": "x/v1", "kind": "W", "metadata": {"name": "w"},
               "spec": spec, "other": other})
    })
}

/// Named list items with distinct names (a list a convention merges by `name`).
fn named_items() -> impl Strategy<Value = Vec<Value>> {
    prop::collection::btree_map(prop::sample::select(NAMES), tree(), 0..4).prop_map(|m| {
        m.into_iter()
            .map(|(n, v)| json!({"name": n, "v": v}))
            .collect()
    })
}

fn without(v: &Value, key: &str) -> Value {
    let mut v = v.clone();
    if let Some(m) = v.as_object_mut() {
        m.remove(key);
    }
    v
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// With no subtrees the body is exactly what a create would send.
    #[test]
    fn no_subtrees_is_the_desired_object(live in child(), desired in child()) {
        let opts = Options::default();
        let body = server_side_apply_body(&live, &desired, &opts, &[]).unwrap();
        prop_assert_eq!(body, prepare_create(&desired, &opts).unwrap());
    }

    /// Outside the subtrees the body is the desired object, whatever the live one holds.
    #[test]
    fn outside_the_subtrees_the_body_is_desired(live in child(), desired in child()) {
        let opts = Options::default();
        let body = server_side_apply_body(&live, &desired, &opts, &[vec!["spec".to_owned()]]).unwrap();
        let prepared = prepare_create(&desired, &opts).unwrap();
        prop_assert!(json_eq(&without(&body, "spec"), &without(&prepared, "spec")));
    }

    /// When nobody else changed the child, the body is the desired object even inside the
    /// subtrees (the merge of an untouched child is the desired object).
    #[test]
    fn an_untouched_child_gives_the_desired_object(desired in child(), root in any::<bool>()) {
        let opts = Options::default();
        let live = prepare_create(&desired, &opts).unwrap();
        let path = if root { vec![] } else { vec!["spec".to_owned()] };
        let body = server_side_apply_body(&live, &desired, &opts, &[path]).unwrap();
        prop_assert!(json_eq(&body, &live), "{} vs {}", body, live);
    }

    /// Items another writer appended to a list in a subtree survive next to the desired items,
    /// which arrive as desired.
    #[test]
    fn foreign_items_in_a_subtree_survive(
        old in named_items(), new in named_items(), foreign in tree(), root in any::<bool>()
    ) {
        let opts = Options::default();
        let obj = |items: &[Value]| json!({"apiVersion": "x/v1", "kind": "W",
            "metadata": {"name": "w"}, "spec": {"containers": items}});
        let mut live = prepare_create(&obj(&old), &opts).unwrap();
        let theirs = json!({"name": "injected", "v": foreign});
        live["spec"]["containers"].as_array_mut().unwrap().push(theirs.clone());
        let path = if root { vec![] } else { vec!["spec".to_owned()] };
        let body = server_side_apply_body(&live, &obj(&new), &opts, &[path]).unwrap();
        let got = body["spec"]["containers"].as_array().unwrap();
        prop_assert!(got.iter().any(|i| json_eq(i, &theirs)), "foreign item lost: {}", body);
        for want in &new {
            prop_assert!(got.iter().any(|i| json_eq(i, want)), "{} missing in {}", want, body);
        }
        for gone in old.iter().filter(|o| !new.iter().any(|n| n["name"] == o["name"])) {
            prop_assert!(!got.iter().any(|i| i["name"] == gone["name"]), "{} kept in {}", gone, body);
        }
    }
}
