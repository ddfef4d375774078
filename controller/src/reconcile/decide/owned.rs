//! What a parent applied to a child, read from the API server's `managedFields` instead of the
//! last-applied annotation (`kmeta.dev/last-applied: omit`, docs/design/ssa-without-last-applied.md):
//! the fields its field manager owns, with their live values. It is the base of the three-way
//! merge that plans the child's next write.

use serde_json::{Map, Value};

use crate::reconcile::apply::union;

/// The fields `manager` owns in a child's `managedFields` entries (`entries`, a list): the union
/// of its `Apply` and `Update` entries on the main resource (its creates and updates, before the
/// first apply moves them into the `Apply` entry). `None` when it owns nothing there.
pub fn owned_fields(entries: &Value, manager: &str) -> Option<Value> {
    entries
        .as_array()?
        .iter()
        .filter(|e| {
            e["manager"] == manager
                && (e["operation"] == "Apply" || e["operation"] == "Update")
                && e.get("subresource")
                    .and_then(Value::as_str)
                    .is_none_or(str::is_empty)
        })
        .map(|e| &e["fieldsV1"])
        .fold(None, |acc, f| {
            Some(union(acc.unwrap_or(Value::Object(Map::new())), f))
        })
}

/// What the parent with field manager `manager` applied to child `live`, by its `managedFields`
/// entries `entries`: the live fields it owns ([`owned_fields`], [`owned_configuration`]) but
/// the owner references, which kmeta adds to the hook's answer (the plan merges the answer
/// without them). `None` when the manager owns nothing.
pub fn applied_configuration(live: &Value, entries: &Value, manager: &str) -> Option<Value> {
    let mut applied = owned_configuration(live, &owned_fields(entries, manager)?);
    if let Some(meta) = applied.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("ownerReferences");
    }
    Some(applied)
}

/// `live` cut to the field set `fields` (a FieldsV1 tree: `f:<field>`, `k:<key object>` for an
/// item of a keyed list, `v:<value>` for an item of a set, `i:<index>`, `.` for the node
/// itself): what the field set's manager last applied, as the server holds it now. A field
/// owned whole (an empty set: a scalar, an atomic list or map) is kept whole.
pub fn owned_configuration(live: &Value, fields: &Value) -> Value {
    let Some(set) = fields.as_object().filter(|s| s.keys().any(|k| k != ".")) else {
        return match (fields.as_object(), live) {
            // only the node: an empty map or list
            (Some(s), Value::Object(_)) if !s.is_empty() => Value::Object(Map::new()),
            (Some(s), Value::Array(_)) if !s.is_empty() => Value::Array(Vec::new()),
            _ => live.clone(),
        };
    };
    match live {
        Value::Object(m) => Value::Object(
            set.iter()
                .filter_map(|(k, sub)| {
                    let name = k.strip_prefix("f:")?;
                    Some((name.to_owned(), owned_configuration(m.get(name)?, sub)))
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(
            items
                .iter()
                .enumerate()
                .filter_map(|(i, item)| {
                    let sub = set.iter().find(|(k, _)| item_matches(k, i, item))?.1;
                    Some(owned_configuration(item, sub))
                })
                .collect(),
        ),
        scalar => scalar.clone(),
    }
}

/// Whether list item `item` (at `index`) is the one path element `key` names.
fn item_matches(key: &str, index: usize, item: &Value) -> bool {
    if let Some(k) = key.strip_prefix("k:") {
        let Ok(Value::Object(wanted)) = serde_json::from_str::<Value>(k) else {
            return false;
        };
        return wanted
            .iter()
            .all(|(f, v)| item.get(f).is_some_and(|have| dynapply::json_eq(have, v)));
    }
    if let Some(v) = key.strip_prefix("v:") {
        return serde_json::from_str::<Value>(v).is_ok_and(|v| dynapply::json_eq(&v, item));
    }
    key.strip_prefix("i:")
        .and_then(|i| i.parse::<usize>().ok())
        .is_some_and(|i| i == index)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_managers_apply_and_update_entries_make_its_fields() {
        let mine = "metacontroller/cc/aaaa";
        let entries = json!([
            {"manager": mine, "operation": "Update", "fieldsV1": {"f:data": {"f:a": {}}}},
            {"manager": mine, "operation": "Apply", "fieldsV1": {"f:data": {"f:b": {}}}},
            {"manager": mine, "operation": "Update", "subresource": "status",
             "fieldsV1": {"f:status": {}}},
            {"manager": "kubectl-edit", "operation": "Update", "fieldsV1": {"f:data": {"f:c": {}}}},
        ]);
        assert_eq!(
            owned_fields(&entries, mine),
            Some(json!({"f:data": {"f:a": {}, "f:b": {}}}))
        );
        assert_eq!(owned_fields(&entries, "metacontroller/cc/bbbb"), None);
        assert_eq!(owned_fields(&json!(null), mine), None);
    }

    #[test]
    fn what_was_applied_leaves_out_the_owner_reference() {
        let mine = "metacontroller/cc/aaaa";
        let live = json!({"metadata": {"name": "c", "labels": {"a": "1"},
            "ownerReferences": [{"uid": "p1"}]}, "data": {"k": "v", "theirs": "t"}});
        let entries = json!([{"manager": mine, "operation": "Apply", "fieldsV1": {
            "f:metadata": {"f:labels": {"f:a": {}}, "f:ownerReferences": {"k:{\"uid\":\"p1\"}": {}}},
            "f:data": {"f:k": {}}}}]);
        assert_eq!(
            applied_configuration(&live, &entries, mine),
            Some(json!({"metadata": {"labels": {"a": "1"}}, "data": {"k": "v"}}))
        );
        assert_eq!(applied_configuration(&live, &entries, "other"), None);
    }

    #[test]
    fn live_cut_to_the_owned_fields() {
        let live = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "w", "uid": "u", "labels": {"app": "w", "theirs": "x"},
                "ownerReferences": [{"uid": "p1", "kind": "Thing"}, {"uid": "p2", "kind": "Other"}]},
            "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "w"}},
                "template": {"spec": {"containers": [
                    {"name": "app", "image": "a:1", "env": [{"name": "X", "value": "1"}]},
                    {"name": "proxy", "image": "envoy"}]}}},
            "data": {"cmd": ["run", "fast"]}, "finalizers": ["x", "y"],
            "status": {"ready": 1}});
        let fields = json!({
            "f:metadata": {"f:labels": {".": {}, "f:app": {}},
                "f:ownerReferences": {".": {}, "k:{\"uid\":\"p1\"}": {}}},
            "f:spec": {"f:selector": {}, "f:template": {"f:spec": {"f:containers": {
                "k:{\"name\":\"app\"}": {".": {}, "f:name": {}, "f:image": {}, "f:env": {}}}}}},
            "f:data": {"f:cmd": {}}, "f:finalizers": {"v:\"y\"": {}},
            "f:gone": {}});
        assert_eq!(
            owned_configuration(&live, &fields),
            json!({"metadata": {"labels": {"app": "w"},
                    "ownerReferences": [{"uid": "p1", "kind": "Thing"}]},
                "spec": {"selector": {"matchLabels": {"app": "w"}},
                    "template": {"spec": {"containers": [
                        {"name": "app", "image": "a:1", "env": [{"name": "X", "value": "1"}]}]}}},
                "data": {"cmd": ["run", "fast"]}, "finalizers": ["y"]})
        );
        // the node alone: an empty map or list; an index names its item
        assert_eq!(
            owned_configuration(&json!({"a": {"x": 1}}), &json!({"f:a": {".": {}}})),
            json!({"a": {}})
        );
        assert_eq!(
            owned_configuration(&json!([1, 2]), &json!({"i:1": {}})),
            json!([2])
        );
    }
}
