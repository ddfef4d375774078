//! Patch application: JSON merge patch, JSON patch and strategic merge patch, plus the list-type
//! knowledge (merge keys) shared with server-side apply.

use serde_json::{Map, Value};

/// Errors applying a patch.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PatchError {
    /// The patch body is not valid JSON/YAML of the right shape.
    #[error("invalid patch body: {0}")]
    Body(String),
    /// A JSON patch operation failed (test failed, path missing, ...).
    #[error("json patch failed: {0}")]
    JsonPatch(String),
    /// A strategic merge patch is malformed.
    #[error("strategic merge patch at {path}: {msg}")]
    Strategic {
        /// Field path.
        path: String,
        /// What is wrong.
        msg: String,
    },
}

/// How a list field is merged.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum ListKind {
    /// Associative list keyed by these fields (first is the strategic merge key).
    Map(Vec<String>),
    /// A set of scalars (merged by value).
    Set,
    /// Replaced as a whole.
    Atomic,
}

/// List kinds of the built-in types, from their `patchMergeKey`/`patchStrategy` and
/// `listType`/`listMapKeys` markers. `path` is the field-name path from the object root.
pub(crate) fn builtin_list_kind(path: &[String]) -> ListKind {
    let Some(last) = path.last() else {
        return ListKind::Atomic;
    };
    let parent = if path.len() >= 2 {
        path[path.len() - 2].as_str()
    } else {
        ""
    };
    let m = |keys: &[&str]| ListKind::Map(keys.iter().map(|s| s.to_string()).collect());
    match last.as_str() {
        "containers" | "initContainers" | "ephemeralContainers" => m(&["name"]),
        "ports" => {
            let in_container = matches!(
                parent,
                "containers" | "initContainers" | "ephemeralContainers"
            );
            if in_container {
                m(&["containerPort", "protocol"])
            } else if parent == "spec" {
                m(&["port", "protocol"])
            } else {
                ListKind::Atomic
            }
        }
        "env" => m(&["name"]),
        "volumes" => m(&["name"]),
        "volumeMounts" => m(&["mountPath"]),
        "volumeDevices" => m(&["devicePath"]),
        "imagePullSecrets" => m(&["name"]),
        "hostAliases" => m(&["ip"]),
        "conditions" => m(&["type"]),
        "ownerReferences" if parent == "metadata" => m(&["uid"]),
        "finalizers" if parent == "metadata" => ListKind::Set,
        "topologySpreadConstraints" => m(&["topologyKey", "whenUnsatisfiable"]),
        "resourceClaims" => m(&["name"]),
        "schedulingGates" => m(&["name"]),
        _ => ListKind::Atomic,
    }
}

/// List kinds from a CRD structural schema (`x-kubernetes-list-type`, `x-kubernetes-list-map-keys`).
/// Metadata lists fall back to the built-in knowledge.
pub(crate) fn schema_list_kind(schema: Option<&Value>, path: &[String]) -> ListKind {
    if path.first().is_some_and(|p| p == "metadata") {
        return builtin_list_kind(path);
    }
    let Some(mut cur) = schema else {
        return ListKind::Atomic;
    };
    for p in path {
        let next = cur
            .get("properties")
            .and_then(|props| props.get(p))
            .or_else(|| cur.get("additionalProperties").filter(|a| a.is_object()))
            .or_else(|| {
                // path steps into list items
                cur.get("items")
                    .and_then(|i| i.get("properties"))
                    .and_then(|props| props.get(p))
            });
        match next {
            Some(n) => cur = n,
            None => return ListKind::Atomic,
        }
    }
    match cur.get("x-kubernetes-list-type").and_then(Value::as_str) {
        Some("map") => {
            let keys: Vec<String> = cur
                .get("x-kubernetes-list-map-keys")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(|k| k.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default();
            // a map list without keys is not structural; treat it as atomic
            if keys.is_empty() {
                ListKind::Atomic
            } else {
                ListKind::Map(keys)
            }
        }
        Some("set") => ListKind::Set,
        _ => ListKind::Atomic,
    }
}

/// What a type says about the node at a field-name path (list items are not steps), as
/// server-side apply needs it: the list kind, whether a map or struct is atomic
/// (`x-kubernetes-map-type: atomic`, `+structType=atomic`), and whether the last step is a
/// declared field of a struct rather than a key of a map (`additionalProperties`, or anything
/// under `x-kubernetes-preserve-unknown-fields`).
pub(crate) trait Shape {
    /// How the list at `path` merges.
    fn list(&self, path: &[String]) -> ListKind;
    /// Whether the map or struct at `path` is atomic.
    fn atomic_map(&self, _path: &[String]) -> bool {
        false
    }
    /// Whether the last step of `path` is a declared field (not a map key).
    fn declared(&self, _path: &[String]) -> bool {
        true
    }
    /// Whether the type at `path` is a map, struct or list (so a null there is an empty one).
    fn container(&self, _path: &[String]) -> bool {
        false
    }
}

impl<F: Fn(&[String]) -> ListKind> Shape for F {
    fn list(&self, path: &[String]) -> ListKind {
        self(path)
    }
}

/// The [`Shape`] of a built-in type (`schema: None`) or of a CRD version's structural schema.
pub(crate) struct SchemaShape {
    /// The version's `openAPIV3Schema`, `None` for a built-in type.
    pub(crate) schema: Option<Value>,
}

/// The schema node at a path, if any, and whether its last step is a declared field; `Unknown`
/// under `x-kubernetes-preserve-unknown-fields` (or `additionalProperties: true`).
enum At<'a> {
    Node(&'a Value, bool),
    Unknown,
    Missing,
}

fn schema_at<'a>(schema: &'a Value, path: &[String]) -> At<'a> {
    let mut cur = schema;
    let mut declared = true;
    for p in path {
        let items = cur.get("items");
        let props =
            |v: Option<&'a Value>| v.and_then(|v| v.get("properties")).and_then(|ps| ps.get(p));
        if let Some(n) = props(Some(cur)).or_else(|| props(items)) {
            cur = n;
            declared = true;
        } else if let Some(ap) = cur.get("additionalProperties").filter(|a| a.is_object()) {
            cur = ap;
            declared = false;
        } else if cur.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true))
            || cur.get("additionalProperties") == Some(&Value::Bool(true))
        {
            return At::Unknown;
        } else {
            return At::Missing;
        }
    }
    At::Node(cur, declared)
}

impl Shape for SchemaShape {
    fn list(&self, path: &[String]) -> ListKind {
        match &self.schema {
            None => builtin_list_kind(path),
            Some(s) => schema_list_kind(Some(s), path),
        }
    }

    fn atomic_map(&self, path: &[String]) -> bool {
        if path.first().is_some_and(|p| p == "metadata") {
            return false;
        }
        match &self.schema {
            // LabelSelector is `+structType=atomic`, a Service's selector `+mapType=atomic`
            None => {
                let n = path.len();
                let last = path.last().map(String::as_str);
                matches!(
                    last,
                    Some("labelSelector" | "namespaceSelector" | "podSelector")
                ) || (last == Some("selector") && n >= 2 && path[n - 2] == "spec")
            }
            Some(s) => matches!(schema_at(s, path), At::Node(n, _)
                if n.get("x-kubernetes-map-type").and_then(Value::as_str) == Some("atomic")),
        }
    }

    fn container(&self, path: &[String]) -> bool {
        if path.first().is_some_and(|p| p == "metadata") {
            return path.len() == 2;
        }
        match &self.schema {
            None => false,
            Some(s) => matches!(schema_at(s, path), At::Node(n, _)
                if matches!(n.get("type").and_then(Value::as_str), Some("object" | "array"))),
        }
    }

    fn declared(&self, path: &[String]) -> bool {
        if path.first().is_some_and(|p| p == "metadata") {
            return !(path.len() == 3 && matches!(path[1].as_str(), "labels" | "annotations"));
        }
        match &self.schema {
            None => true,
            Some(s) => match schema_at(s, path) {
                At::Node(_, declared) => declared,
                At::Unknown => false,
                At::Missing => true,
            },
        }
    }
}

/// RFC 7386 JSON merge patch.
pub(crate) fn merge_patch(target: &mut Value, patch: &Value) {
    json_patch::merge(target, patch);
}

/// RFC 6902 JSON patch.
pub(crate) fn json_patch(target: &mut Value, patch: &Value) -> Result<(), PatchError> {
    let p: json_patch::Patch =
        serde_json::from_value(patch.clone()).map_err(|e| PatchError::Body(e.to_string()))?;
    json_patch::patch(target, &p).map_err(|e| PatchError::JsonPatch(e.to_string()))
}

fn path_str(path: &[String]) -> String {
    if path.is_empty() {
        ".".into()
    } else {
        path.join(".")
    }
}

fn strip_directives(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, _)| !k.starts_with('$'))
                .map(|(k, v)| (k.clone(), strip_directives(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(strip_directives).collect()),
        other => other.clone(),
    }
}

fn key_matches(item: &Value, probe: &Value, keys: &[String]) -> bool {
    keys.iter()
        .filter(|k| probe.get(k.as_str()).is_some())
        .all(|k| item.get(k.as_str()) == probe.get(k.as_str()))
        && keys.iter().any(|k| probe.get(k.as_str()).is_some())
}

/// Apply a strategic merge patch. `kinds` tells how lists at a field path merge; for strategic
/// merge only the first map key (the `patchMergeKey`) is used.
pub(crate) fn strategic_merge(
    original: &Value,
    patch: &Value,
    kinds: &dyn Fn(&[String]) -> ListKind,
) -> Result<Value, PatchError> {
    let mut path = vec![];
    match smp_value(Some(original), patch, &mut path, kinds)? {
        Some(v) => Ok(v),
        None => Ok(Value::Object(Map::new())),
    }
}

fn smp_value(
    orig: Option<&Value>,
    patch: &Value,
    path: &mut Vec<String>,
    kinds: &dyn Fn(&[String]) -> ListKind,
) -> Result<Option<Value>, PatchError> {
    match patch {
        Value::Object(pm) => {
            match pm.get("$patch").and_then(Value::as_str) {
                Some("replace") => return Ok(Some(strip_directives(patch))),
                Some("delete") => return Ok(None),
                Some(other) => {
                    return Err(PatchError::Strategic {
                        path: path_str(path),
                        msg: format!("unknown patch type {other:?}"),
                    });
                }
                None => {}
            }
            let mut out = match orig {
                Some(Value::Object(om)) => om.clone(),
                _ => Map::new(),
            };
            for (k, pv) in pm {
                if k.starts_with('$') {
                    continue;
                }
                path.push(k.clone());
                if pv.is_null() {
                    out.remove(k);
                } else {
                    let merged = smp_field(out.get(k), pv, path, kinds)?;
                    match merged {
                        Some(v) => {
                            out.insert(k.clone(), v);
                        }
                        None => {
                            out.remove(k);
                        }
                    }
                }
                path.pop();
            }
            // $deleteFromPrimitiveList/<field>
            for (k, pv) in pm {
                if let Some(field) = k.strip_prefix("$deleteFromPrimitiveList/") {
                    let del = pv.as_array().cloned().unwrap_or_default();
                    if let Some(Value::Array(items)) = out.get_mut(field) {
                        items.retain(|i| !del.contains(i));
                    }
                }
            }
            // $setElementOrder/<field>
            for (k, pv) in pm {
                if let Some(field) = k.strip_prefix("$setElementOrder/") {
                    path.push(field.to_string());
                    let kind = kinds(path);
                    path.pop();
                    let order = pv.as_array().cloned().unwrap_or_default();
                    if let Some(Value::Array(items)) = out.get_mut(field) {
                        set_element_order(items, &order, &kind);
                    }
                }
            }
            // $retainKeys
            if let Some(Value::Array(keep)) = pm.get("$retainKeys") {
                out.retain(|k, _| keep.iter().any(|x| x.as_str() == Some(k)));
            }
            Ok(Some(Value::Object(out)))
        }
        other => Ok(Some(other.clone())),
    }
}

/// Reorder list items as `$setElementOrder` lists them (map lists by their first key); items it
/// does not list keep their order after those it does.
fn set_element_order(items: &mut Vec<Value>, order: &[Value], kind: &ListKind) {
    let mut rest = std::mem::take(items);
    let mut sorted = vec![];
    for o in order {
        let pos = match kind {
            ListKind::Map(keys) => rest.iter().position(|i| key_matches(i, o, &keys[..1])),
            _ => rest.iter().position(|i| i == o),
        };
        if let Some(p) = pos {
            sorted.push(rest.remove(p));
        }
    }
    sorted.extend(rest);
    *items = sorted;
}

fn smp_field(
    orig: Option<&Value>,
    pv: &Value,
    path: &mut Vec<String>,
    kinds: &dyn Fn(&[String]) -> ListKind,
) -> Result<Option<Value>, PatchError> {
    match pv {
        Value::Object(_) => smp_value(orig.filter(|o| o.is_object()), pv, path, kinds),
        Value::Array(patch_items) => {
            let kind = kinds(path);
            let orig_items = orig.and_then(Value::as_array);
            match kind {
                ListKind::Atomic => Ok(Some(strip_directives(pv))),
                ListKind::Set => {
                    let mut out = orig_items.cloned().unwrap_or_default();
                    for i in patch_items {
                        if !out.contains(i) {
                            out.push(i.clone());
                        }
                    }
                    Ok(Some(Value::Array(out)))
                }
                ListKind::Map(keys) => {
                    let key = &keys[..1];
                    // `$patch: replace` as a list element replaces the whole list
                    if patch_items.iter().any(|i| {
                        i.get("$patch").and_then(Value::as_str) == Some("replace")
                            && key.iter().all(|k| i.get(k.as_str()).is_none())
                    }) {
                        let items = patch_items
                            .iter()
                            .filter(|i| i.get("$patch").is_none())
                            .map(strip_directives)
                            .collect();
                        return Ok(Some(Value::Array(items)));
                    }
                    let mut out = orig_items.cloned().unwrap_or_default();
                    for (idx, pi) in patch_items.iter().enumerate() {
                        if !pi.is_object() {
                            return Err(PatchError::Strategic {
                                path: format!("{}[{idx}]", path_str(path)),
                                msg: format!(
                                    "expected an object in a list merged by key {}",
                                    key[0]
                                ),
                            });
                        }
                        if key.iter().all(|k| pi.get(k.as_str()).is_none()) {
                            return Err(PatchError::Strategic {
                                path: format!("{}[{idx}]", path_str(path)),
                                msg: format!("map does not contain declared merge key: {}", key[0]),
                            });
                        }
                        let pos = out.iter().position(|o| key_matches(o, pi, key));
                        let is_delete = pi.get("$patch").and_then(Value::as_str) == Some("delete");
                        match (pos, is_delete) {
                            (Some(p), true) => {
                                out.remove(p);
                            }
                            (None, true) => {}
                            (Some(p), false) => {
                                if let Some(v) = smp_value(Some(&out[p]), pi, path, kinds)? {
                                    out[p] = v;
                                }
                            }
                            (None, false) => {
                                if let Some(v) = smp_value(None, pi, path, kinds)? {
                                    out.push(v);
                                }
                            }
                        }
                    }
                    Ok(Some(Value::Array(out)))
                }
            }
        }
        other => Ok(Some(other.clone())),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn smp(o: Value, p: Value) -> Value {
        strategic_merge(&o, &p, &builtin_list_kind).unwrap()
    }

    #[test]
    fn containers_merge_by_name() {
        let o = json!({"spec": {"containers": [
            {"name": "app", "image": "a:1"}, {"name": "sidecar", "image": "s:1"}]}});
        let r = smp(
            o,
            json!({"spec": {"containers": [{"name": "app", "image": "a:2"}]}}),
        );
        assert_eq!(
            r,
            json!({"spec": {"containers": [
                {"name": "app", "image": "a:2"}, {"name": "sidecar", "image": "s:1"}]}})
        );
    }

    #[test]
    fn delete_directive_and_null() {
        let o = json!({"metadata": {"labels": {"a": "1", "b": "2"}},
            "spec": {"containers": [{"name": "app"}, {"name": "x"}]}});
        let r = smp(
            o,
            json!({"metadata": {"labels": {"a": null}},
                "spec": {"containers": [{"name": "x", "$patch": "delete"}]}}),
        );
        assert_eq!(
            r,
            json!({"metadata": {"labels": {"b": "2"}}, "spec": {"containers": [{"name": "app"}]}})
        );
    }

    #[test]
    fn replace_directive_and_retain_keys() {
        let o = json!({"spec": {"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}}}});
        let r = smp(
            o.clone(),
            json!({"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate"}}}),
        );
        assert_eq!(r, json!({"spec": {"strategy": {"type": "Recreate"}}}));
        let r = smp(o, json!({"spec": {"$patch": "replace", "paused": true}}));
        assert_eq!(r, json!({"spec": {"paused": true}}));
    }

    #[test]
    fn primitive_list_directives_and_order() {
        let o = json!({"metadata": {"finalizers": ["a", "b"]},
            "spec": {"containers": [{"name": "a"}, {"name": "b"}]}});
        let r = smp(
            o,
            json!({"metadata": {"finalizers": ["c"], "$deleteFromPrimitiveList/finalizers": ["a"]},
                "spec": {"$setElementOrder/containers": [{"name": "b"}, {"name": "a"}]}}),
        );
        assert_eq!(
            r,
            json!({"metadata": {"finalizers": ["b", "c"]},
                "spec": {"containers": [{"name": "b"}, {"name": "a"}]}})
        );
    }

    #[test]
    fn container_ports_key_and_missing_key_error() {
        let o = json!({"spec": {"containers": [{"name": "a", "ports": [{"containerPort": 80}]}]}});
        let r = smp(
            o.clone(),
            json!({"spec": {"containers": [{"name": "a", "ports": [{"containerPort": 80, "name": "http"}]}]}}),
        );
        assert_eq!(
            r["spec"]["containers"][0]["ports"],
            json!([{"containerPort": 80, "name": "http"}])
        );
        let e = strategic_merge(
            &o,
            &json!({"spec": {"containers": [{"image": "x"}]}}),
            &builtin_list_kind,
        );
        assert!(e.is_err());
    }

    #[test]
    fn schema_kinds() {
        let s = json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
            "items": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["id"],
                "items": {"type": "object", "properties": {"tags": {"type": "array", "x-kubernetes-list-type": "set"}}}}}}}});
        let p = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            schema_list_kind(Some(&s), &p(&["spec", "items"])),
            ListKind::Map(vec!["id".into()])
        );
        assert_eq!(
            schema_list_kind(Some(&s), &p(&["spec", "items", "tags"])),
            ListKind::Set
        );
        assert_eq!(
            schema_list_kind(Some(&s), &p(&["spec", "other"])),
            ListKind::Atomic
        );
    }
}
