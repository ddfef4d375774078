//! Accessors of the `metadata` of stored JSON objects (finalizers, deletion state) and the clock.

use serde_json::{Map, Value, json};

/// Current time as RFC3339 with second precision (`2026-11-22T20:00:00Z`).
pub(super) fn now_rfc3339() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

pub(super) fn meta(v: &Value) -> Option<&Map<String, Value>> {
    v.get("metadata").and_then(Value::as_object)
}

pub(super) fn meta_mut(v: &mut Value) -> &mut Map<String, Value> {
    if !v.get("metadata").is_some_and(Value::is_object) {
        v["metadata"] = json!({});
    }
    match v.get_mut("metadata").and_then(Value::as_object_mut) {
        Some(m) => m,
        None => unreachable_meta(),
    }
}

fn unreachable_meta() -> ! {
    // invariant: `meta_mut` stores an object under "metadata" right before reading it back
    unreachable!("metadata was just set to an object")
}

pub(super) fn meta_str<'a>(v: &'a Value, k: &str) -> Option<&'a str> {
    meta(v)?.get(k)?.as_str()
}

/// The strings of a JSON array (other items skipped; not an array: none).
fn string_list(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

pub(super) fn finalizers(v: &Value) -> Vec<String> {
    string_list(meta(v).and_then(|m| m.get("finalizers")))
}

pub(super) fn set_finalizers(v: &mut Value, f: &[String]) {
    let m = meta_mut(v);
    if f.is_empty() {
        m.remove("finalizers");
    } else {
        m.insert("finalizers".into(), json!(f));
    }
}

pub(super) fn deleting(v: &Value) -> bool {
    meta(v).is_some_and(|m| m.get("deletionTimestamp").is_some_and(|t| !t.is_null()))
}

pub(super) fn ns_spec_finalizers(v: &Value) -> Vec<String> {
    string_list(v.get("spec").and_then(|s| s.get("finalizers")))
}
