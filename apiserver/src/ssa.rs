//! Server-side apply: field sets (FieldsV1), managedFields bookkeeping, conflicts and the apply
//! merge.
//!
//! Scope: field ownership is tracked per (manager, operation, subresource) at leaf granularity;
//! associative lists use the built-in merge keys or the CRD's `x-kubernetes-list-map-keys`; sets
//! use `x-kubernetes-list-type: set` (and `metadata.finalizers`). Apply conflicts are detected
//! when another manager owns a leaf whose applied value differs from the live one; `force` moves
//! ownership. Fields the applier previously applied and no longer applies are removed when no
//! other manager owns them. Not modelled: type-aware defaulting, granular `atomic`/`granular`
//! struct markers, and conversion of field sets between API versions.

use crate::patch::ListKind;
use serde_json::{Map, Value, json};
use std::collections::BTreeSet;

/// A path element in FieldsV1 notation (`f:name`, `k:{"name":"x"}`, `v:"a"`).
pub(crate) type Path = Vec<String>;
/// A set of owned paths.
pub(crate) type FieldSet = BTreeSet<Path>;

/// Which part of an object a write touches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scope {
    /// The whole object (no status subresource).
    All,
    /// Everything except `status` (main endpoint of a resource with a status subresource).
    NoStatus,
    /// Only `status` (the `/status` subresource).
    StatusOnly,
}

/// Field-set of an object: the leaves (and list items) it sets.
pub(crate) fn field_set(
    obj: &Value,
    scope: Scope,
    kinds: &dyn Fn(&[String]) -> ListKind,
) -> FieldSet {
    let mut out = FieldSet::new();
    let Some(m) = obj.as_object() else {
        return out;
    };
    for (k, v) in m {
        match k.as_str() {
            "apiVersion" | "kind" => continue,
            "status" if scope == Scope::NoStatus => continue,
            "status" => {}
            _ if scope == Scope::StatusOnly => continue,
            "metadata" => {
                if let Some(mm) = v.as_object() {
                    for mk in ["labels", "annotations", "finalizers", "ownerReferences"] {
                        if let Some(mv) = mm.get(mk) {
                            let mut names = vec!["metadata".to_string(), mk.to_string()];
                            let mut pe = vec!["f:metadata".to_string(), format!("f:{mk}")];
                            collect(mv, &mut names, &mut pe, &mut out, kinds);
                        }
                    }
                }
                continue;
            }
            _ => {}
        }
        let mut names = vec![k.clone()];
        let mut pe = vec![format!("f:{k}")];
        collect(v, &mut names, &mut pe, &mut out, kinds);
    }
    out
}

fn key_object(item: &Value, keys: &[String]) -> Value {
    let mut m = Map::new();
    for k in keys {
        if let Some(v) = item.get(k.as_str()) {
            m.insert(k.clone(), v.clone());
        }
    }
    Value::Object(m)
}

fn collect(
    v: &Value,
    names: &mut Vec<String>,
    pe: &mut Path,
    out: &mut FieldSet,
    kinds: &dyn Fn(&[String]) -> ListKind,
) {
    match v {
        Value::Object(m) => {
            if m.is_empty() {
                out.insert(pe.clone());
            }
            for (k, child) in m {
                names.push(k.clone());
                pe.push(format!("f:{k}"));
                collect(child, names, pe, out, kinds);
                pe.pop();
                names.pop();
            }
        }
        Value::Array(items) => match kinds(names) {
            ListKind::Map(keys) if items.iter().all(Value::is_object) => {
                for item in items {
                    pe.push(format!("k:{}", key_object(item, &keys)));
                    out.insert(pe.clone());
                    if let Some(m) = item.as_object() {
                        for (k, child) in m {
                            names.push(k.clone());
                            pe.push(format!("f:{k}"));
                            collect(child, names, pe, out, kinds);
                            pe.pop();
                            names.pop();
                        }
                    }
                    pe.pop();
                }
            }
            ListKind::Set => {
                for item in items {
                    pe.push(format!("v:{item}"));
                    out.insert(pe.clone());
                    pe.pop();
                }
            }
            _ => {
                out.insert(pe.clone());
            }
        },
        _ => {
            out.insert(pe.clone());
        }
    }
}

fn parse_elem(e: &str) -> Option<(char, Value)> {
    let (tag, rest) = e.split_at_checked(2)?;
    match tag {
        "f:" => Some(('f', Value::String(rest.to_string()))),
        "k:" => serde_json::from_str(rest).ok().map(|v| ('k', v)),
        "v:" => serde_json::from_str(rest).ok().map(|v| ('v', v)),
        _ => None,
    }
}

fn item_matches(item: &Value, key: &Value) -> bool {
    key.as_object()
        .is_some_and(|km| km.iter().all(|(k, v)| item.get(k) == Some(v)))
}

/// The value at a path, if present.
pub(crate) fn get_at<'a>(obj: &'a Value, path: &[String]) -> Option<&'a Value> {
    let mut cur = obj;
    for e in path {
        let (tag, v) = parse_elem(e)?;
        cur = match tag {
            'f' => cur.get(v.as_str()?)?,
            'k' => cur.as_array()?.iter().find(|i| item_matches(i, &v))?,
            'v' => cur.as_array()?.iter().find(|i| **i == v)?,
            _ => return None,
        };
    }
    Some(cur)
}

/// Remove the node at a path (map key, list item or set value). Returns whether it existed.
pub(crate) fn remove_at(obj: &mut Value, path: &[String]) -> bool {
    let Some((last, parent_path)) = path.split_last() else {
        return false;
    };
    let mut cur = obj;
    for e in parent_path {
        let Some((tag, v)) = parse_elem(e) else {
            return false;
        };
        let next = match tag {
            'f' => v.as_str().and_then(|k| cur.get_mut(k)),
            'k' => cur
                .as_array_mut()
                .and_then(|a| a.iter_mut().find(|i| item_matches(i, &v))),
            'v' => cur
                .as_array_mut()
                .and_then(|a| a.iter_mut().find(|i| **i == v)),
            _ => None,
        };
        match next {
            Some(n) => cur = n,
            None => return false,
        }
    }
    let Some((tag, v)) = parse_elem(last) else {
        return false;
    };
    match tag {
        'f' => match (cur.as_object_mut(), v.as_str()) {
            (Some(m), Some(k)) => m.remove(k).is_some(),
            _ => false,
        },
        'k' | 'v' => match cur.as_array_mut() {
            Some(a) => {
                let before = a.len();
                if tag == 'k' {
                    a.retain(|i| !item_matches(i, &v));
                } else {
                    a.retain(|i| *i != v);
                }
                a.len() != before
            }
            None => false,
        },
        _ => false,
    }
}

/// Encode a field set as a FieldsV1 object.
pub(crate) fn to_fields_v1(set: &FieldSet) -> Value {
    let mut root = Map::new();
    for path in set {
        let mut cur = &mut root;
        for (i, e) in path.iter().enumerate() {
            let entry = cur
                .entry(e.clone())
                .or_insert_with(|| Value::Object(Map::new()));
            let Value::Object(m) = entry else { break };
            cur = m;
            if i == path.len() - 1 && e.starts_with("k:") {
                cur.insert(".".into(), json!({}));
            }
        }
    }
    Value::Object(root)
}

/// Decode a FieldsV1 object into a field set.
pub(crate) fn from_fields_v1(v: &Value) -> FieldSet {
    fn walk(v: &Value, pe: &mut Path, out: &mut FieldSet) {
        let Some(m) = v.as_object() else { return };
        if m.is_empty() && !pe.is_empty() {
            out.insert(pe.clone());
            return;
        }
        for (k, child) in m {
            if k == "." {
                out.insert(pe.clone());
                continue;
            }
            pe.push(k.clone());
            walk(child, pe, out);
            pe.pop();
        }
    }
    let mut out = FieldSet::new();
    walk(v, &mut vec![], &mut out);
    out
}

/// Render a path for conflict messages: `.spec.replicas`, `.spec.containers[name="app"].image`.
pub(crate) fn display_path(path: &[String]) -> String {
    let mut s = String::new();
    for e in path {
        match parse_elem(e) {
            Some(('f', v)) => {
                s.push('.');
                s.push_str(v.as_str().unwrap_or_default());
            }
            Some(('k', v)) => {
                let parts: Vec<String> = v
                    .as_object()
                    .map(|m| m.iter().map(|(k, v)| format!("{k}={v}")).collect())
                    .unwrap_or_default();
                s.push_str(&format!("[{}]", parts.join(",")));
            }
            Some((_, v)) => s.push_str(&format!("[={v}]")),
            None => s.push_str(e),
        }
    }
    s
}

/// One managedFields entry.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Entry {
    /// Field manager name.
    pub(crate) manager: String,
    /// `Apply` or `Update`.
    pub(crate) operation: String,
    /// API version of the write.
    pub(crate) api_version: String,
    /// RFC3339 time of the last write.
    pub(crate) time: String,
    /// Subresource ("" or "status").
    pub(crate) subresource: String,
    /// Owned fields.
    pub(crate) fields: FieldSet,
}

/// Parse `metadata.managedFields`.
pub(crate) fn parse_managed(obj: &Value) -> Vec<Entry> {
    obj.get("metadata")
        .and_then(|m| m.get("managedFields"))
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .map(|e| {
                    let s = |k: &str| e.get(k).and_then(Value::as_str).unwrap_or("").to_string();
                    Entry {
                        manager: s("manager"),
                        operation: s("operation"),
                        api_version: s("apiVersion"),
                        time: s("time"),
                        subresource: s("subresource"),
                        fields: e.get("fieldsV1").map(from_fields_v1).unwrap_or_default(),
                    }
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Render entries as `metadata.managedFields` (entries owning nothing are dropped).
pub(crate) fn render_managed(entries: &[Entry]) -> Value {
    Value::Array(
        entries
            .iter()
            .filter(|e| !e.fields.is_empty())
            .map(|e| {
                let mut v = json!({
                    "manager": e.manager,
                    "operation": e.operation,
                    "apiVersion": e.api_version,
                    "time": e.time,
                    "fieldsType": "FieldsV1",
                    "fieldsV1": to_fields_v1(&e.fields),
                });
                if !e.subresource.is_empty() {
                    v["subresource"] = json!(e.subresource);
                }
                v
            })
            .collect(),
    )
}

fn is_leaf(v: Option<&Value>) -> bool {
    match v {
        Some(Value::Object(m)) => m.is_empty(),
        Some(_) => true,
        None => true,
    }
}

/// Record a non-apply write (create/update/patch) by `manager`.
pub(crate) fn record_update(
    entries: &mut Vec<Entry>,
    old: Option<&Value>,
    new: &Value,
    who: &Writer<'_>,
    kinds: &dyn Fn(&[String]) -> ListKind,
) {
    let new_set = field_set(new, who.scope, kinds);
    let old_set = old
        .map(|o| field_set(o, who.scope, kinds))
        .unwrap_or_default();
    let mut changed = FieldSet::new();
    for p in &new_set {
        let nv = get_at(new, p);
        let ov = old.and_then(|o| get_at(o, p));
        if ov.is_none() || (is_leaf(nv) && nv != ov) {
            changed.insert(p.clone());
        }
    }
    let removed: FieldSet = old_set.difference(&new_set).cloned().collect();
    if changed.is_empty() && removed.is_empty() {
        return;
    }
    for e in entries.iter_mut() {
        if e.manager == who.manager && e.operation == "Update" && e.subresource == who.subresource {
            continue;
        }
        e.fields
            .retain(|p| !changed.contains(p) && !removed.contains(p));
    }
    let pos = entries.iter().position(|e| {
        e.manager == who.manager && e.operation == "Update" && e.subresource == who.subresource
    });
    let entry = match pos {
        Some(i) => &mut entries[i],
        None => {
            entries.push(Entry {
                manager: who.manager.to_string(),
                operation: "Update".into(),
                api_version: who.api_version.to_string(),
                time: who.now.to_string(),
                subresource: who.subresource.to_string(),
                fields: FieldSet::new(),
            });
            let last = entries.len() - 1;
            &mut entries[last]
        }
    };
    entry.fields.extend(changed);
    entry.fields.retain(|p| !removed.contains(p));
    entry.time = who.now.to_string();
    entry.api_version = who.api_version.to_string();
}

/// Who is writing.
#[derive(Debug, Clone)]
pub(crate) struct Writer<'a> {
    /// Field manager.
    pub(crate) manager: &'a str,
    /// API version of the request.
    pub(crate) api_version: &'a str,
    /// Subresource ("" or "status").
    pub(crate) subresource: &'a str,
    /// Part of the object this write may touch.
    pub(crate) scope: Scope,
    /// Timestamp for the entry.
    pub(crate) now: &'a str,
}

/// A field owned by another manager whose value the apply would change.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Conflict {
    /// The other manager.
    pub(crate) manager: String,
    /// Its API version.
    pub(crate) api_version: String,
    /// Its operation (`Apply` or `Update`).
    pub(crate) operation: String,
    /// Its subresource ("" or "status").
    pub(crate) subresource: String,
    /// The field, rendered like `.spec.replicas`.
    pub(crate) field: String,
}

impl Conflict {
    /// The other manager as kube-apiserver names it in a conflict (its `printManager`, over
    /// the manager identifier, which never holds a time and holds the API version of updates
    /// only): `"name"`, `"name" with subresource "status"`, then ` using v1` for an update.
    pub(crate) fn printed_manager(&self) -> String {
        let mut out = format!("{:?}", self.manager);
        if !self.subresource.is_empty() {
            out.push_str(&format!(" with subresource {:?}", self.subresource));
        }
        if self.operation == "Update" {
            out.push_str(&format!(" using {}", self.api_version));
        }
        out
    }
}

fn merge_apply(
    live: &mut Value,
    cfg: &Value,
    names: &mut Vec<String>,
    kinds: &dyn Fn(&[String]) -> ListKind,
) {
    match (live, cfg) {
        (Value::Object(lm), Value::Object(cm)) => {
            for (k, cv) in cm {
                names.push(k.clone());
                match lm.get_mut(k) {
                    Some(lv) => merge_apply(lv, cv, names, kinds),
                    None => {
                        lm.insert(k.clone(), cv.clone());
                    }
                }
                names.pop();
            }
        }
        (Value::Array(la), Value::Array(ca)) => match kinds(names) {
            ListKind::Map(keys) if ca.iter().all(Value::is_object) => {
                for ci in ca {
                    let kobj = key_object(ci, &keys);
                    match la.iter_mut().find(|li| item_matches(li, &kobj)) {
                        Some(li) => merge_apply(li, ci, names, kinds),
                        None => la.push(ci.clone()),
                    }
                }
            }
            ListKind::Set => {
                for ci in ca {
                    if !la.contains(ci) {
                        la.push(ci.clone());
                    }
                }
            }
            _ => *la = ca.clone(),
        },
        (l, c) => *l = c.clone(),
    }
}

/// Apply `config` (the applied object) onto `live` for `who`. Returns the merged object with its
/// new managedFields, or the conflicts when `force` is false.
pub(crate) fn apply(
    live: &Value,
    config: &Value,
    who: &Writer<'_>,
    force: bool,
    kinds: &dyn Fn(&[String]) -> ListKind,
) -> Result<Value, Vec<Conflict>> {
    let mut entries = parse_managed(live);
    let new_set = field_set(config, who.scope, kinds);
    let mine = |e: &Entry| {
        e.manager == who.manager && e.operation == "Apply" && e.subresource == who.subresource
    };
    let (conflicts, conflict_paths) = find_conflicts(live, config, &entries, &new_set, &mine);
    if !conflicts.is_empty() && !force {
        return Err(conflicts);
    }
    for e in entries.iter_mut().filter(|e| !mine(e)) {
        e.fields.retain(|p| !conflict_paths.contains(p));
    }
    let old_mine: FieldSet = entries
        .iter()
        .find(|e| mine(e))
        .map(|e| e.fields.clone())
        .unwrap_or_default();
    let mut merged = live.clone();
    merge_apply(
        &mut merged,
        &applicable(config, who.scope),
        &mut vec![],
        kinds,
    );
    // remove what this manager applied before and no longer applies, unless others own it
    let others: FieldSet = entries
        .iter()
        .filter(|e| !mine(e))
        .flat_map(|e| e.fields.iter().cloned())
        .collect();
    remove_dropped(&mut merged, &old_mine, &new_set, &others);
    let entry = Entry {
        manager: who.manager.to_string(),
        operation: "Apply".into(),
        api_version: who.api_version.to_string(),
        time: who.now.to_string(),
        subresource: who.subresource.to_string(),
        fields: new_set,
    };
    // keep the entry's position so an unchanged re-apply renders identically
    match entries.iter().position(mine) {
        Some(i) => entries[i] = entry,
        None => entries.push(entry),
    }
    if let Some(md) = merged.get_mut("metadata").and_then(Value::as_object_mut) {
        md.insert("managedFields".into(), render_managed(&entries));
    }
    Ok(merged)
}

/// Leaves of the configuration that other managers own with a different live value: the
/// conflicts, and their paths.
fn find_conflicts(
    live: &Value,
    config: &Value,
    entries: &[Entry],
    new_set: &FieldSet,
    mine: &dyn Fn(&Entry) -> bool,
) -> (Vec<Conflict>, FieldSet) {
    let mut conflicts = vec![];
    let mut conflict_paths = FieldSet::new();
    for e in entries.iter().filter(|e| !mine(e)) {
        for p in new_set.intersection(&e.fields) {
            let cv = get_at(config, p);
            if !is_leaf(cv) || p.last().is_some_and(|l| l.starts_with("k:")) {
                continue;
            }
            if cv != get_at(live, p) {
                conflict_paths.insert(p.clone());
                conflicts.push(Conflict {
                    manager: e.manager.clone(),
                    api_version: e.api_version.clone(),
                    operation: e.operation.clone(),
                    subresource: e.subresource.clone(),
                    field: display_path(p),
                });
            }
        }
    }
    (conflicts, conflict_paths)
}

/// The part of an applied configuration merged into the live object: no `apiVersion`/`kind`,
/// only the parts of the object the write's scope allows, and of `metadata` only labels,
/// annotations, finalizers and ownerReferences.
fn applicable(config: &Value, scope: Scope) -> Value {
    let mut cfg = config.clone();
    if let Some(m) = cfg.as_object_mut() {
        m.remove("apiVersion");
        m.remove("kind");
        match scope {
            Scope::NoStatus => {
                m.remove("status");
            }
            Scope::StatusOnly => m.retain(|k, _| k == "status" || k == "metadata"),
            Scope::All => {}
        }
        if let Some(md) = m.get_mut("metadata").and_then(Value::as_object_mut) {
            md.retain(|k, _| {
                matches!(
                    k.as_str(),
                    "labels" | "annotations" | "finalizers" | "ownerReferences"
                )
            });
            if scope == Scope::StatusOnly {
                md.clear();
            }
        }
    }
    cfg
}

/// Remove the fields this manager applied before (`old_mine`) and no longer applies, unless
/// other managers own them.
fn remove_dropped(merged: &mut Value, old_mine: &FieldSet, new_set: &FieldSet, others: &FieldSet) {
    let mut dropped: Vec<&Path> = old_mine
        .iter()
        .filter(|p| !new_set.contains(*p) && !others.contains(*p))
        .collect();
    // a list item that goes goes whole: its fields are not removed first, or the item would no
    // longer match its key (`k:{"port":80}` once `port` is gone) and stay behind as `{}`
    let items: Vec<&Path> = dropped
        .iter()
        .copied()
        .filter(|p| p.last().is_some_and(|l| l.starts_with("k:")))
        .collect();
    dropped.retain(|p| {
        !items
            .iter()
            .any(|item| item.len() < p.len() && p.starts_with(item))
    });
    // remove deepest first so item removal after field removal is harmless
    dropped.sort_by_key(|p| std::cmp::Reverse(p.len()));
    for p in dropped {
        // an item still holding fields owned by others stays
        if p.last().is_some_and(|l| l.starts_with("k:"))
            && others.iter().any(|o| o.len() > p.len() && o.starts_with(p))
        {
            continue;
        }
        remove_at(merged, p);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::patch::builtin_list_kind;

    fn w<'a>(m: &'a str) -> Writer<'a> {
        Writer {
            manager: m,
            api_version: "apps/v1",
            subresource: "",
            scope: Scope::NoStatus,
            now: "2026-01-01T00:00:00Z",
        }
    }

    #[test]
    fn fields_v1_roundtrip() {
        let o = json!({"metadata": {"labels": {"a": "1"}, "finalizers": ["x"]},
            "spec": {"replicas": 1, "template": {"spec": {"containers": [{"name": "app", "image": "i"}]}}}});
        let s = field_set(&o, Scope::NoStatus, &builtin_list_kind);
        let v1 = to_fields_v1(&s);
        assert_eq!(
            v1["f:spec"]["f:template"]["f:spec"]["f:containers"]["k:{\"name\":\"app\"}"]["f:image"],
            json!({})
        );
        assert_eq!(v1["f:metadata"]["f:finalizers"]["v:\"x\""], json!({}));
        assert_eq!(from_fields_v1(&v1), s);
    }

    #[test]
    fn apply_conflict_and_force() {
        let live = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}, "spec": {"replicas": 1}});
        let live = apply(&live, &live.clone(), &w("a"), false, &builtin_list_kind).unwrap();
        let cfg = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}, "spec": {"replicas": 3}});
        let err = apply(&live, &cfg, &w("b"), false, &builtin_list_kind).unwrap_err();
        assert_eq!(err[0].manager, "a");
        assert_eq!(err[0].field, ".spec.replicas");
        // same value is no conflict (shared ownership)
        let same = apply(&live, &live.clone(), &w("b"), false, &builtin_list_kind).unwrap();
        assert_eq!(parse_managed(&same).len(), 2);
        let forced = apply(&live, &cfg, &w("b"), true, &builtin_list_kind).unwrap();
        assert_eq!(forced["spec"]["replicas"], 3);
        let m = parse_managed(&forced);
        assert_eq!(m.len(), 1);
        assert_eq!(m[0].manager, "b");
    }

    #[test]
    fn apply_removes_dropped_fields_and_keeps_others() {
        let base = json!({"metadata": {"name": "d", "labels": {"a": "1", "b": "2"}}});
        let live = apply(
            &json!({"metadata": {"name": "d"}}),
            &base,
            &w("x"),
            false,
            &builtin_list_kind,
        )
        .unwrap();
        // another writer adds a label through an update
        let mut other = live.clone();
        other["metadata"]["labels"]["c"] = json!("3");
        let mut entries = parse_managed(&live);
        record_update(
            &mut entries,
            Some(&live),
            &other,
            &w("kubectl-edit"),
            &builtin_list_kind,
        );
        other["metadata"]["managedFields"] = render_managed(&entries);
        let next = apply(
            &other,
            &json!({"metadata": {"name": "d", "labels": {"a": "1"}}}),
            &w("x"),
            false,
            &builtin_list_kind,
        )
        .unwrap();
        assert_eq!(next["metadata"]["labels"], json!({"a": "1", "c": "3"}));
    }

    #[test]
    fn an_item_no_longer_applied_goes_whole() {
        let cfg = |port: i64| json!({"metadata": {"name": "s"}, "spec": {"ports": [{"name": "web", "port": port}]}});
        let first = apply(
            &json!({"metadata": {"name": "s"}}),
            &cfg(80),
            &w("a"),
            false,
            &builtin_list_kind,
        )
        .unwrap();
        let next = apply(&first, &cfg(8080), &w("a"), false, &builtin_list_kind).unwrap();
        assert_eq!(
            next["spec"]["ports"],
            json!([{"name": "web", "port": 8080}])
        );
    }

    #[test]
    fn apply_merges_lists_by_key() {
        let live = json!({"metadata": {"name": "d"}, "spec": {"template": {"spec": {"containers": [
            {"name": "app", "image": "a:1"}, {"name": "sidecar", "image": "s"}]}}}});
        let cfg = json!({"metadata": {"name": "d"}, "spec": {"template": {"spec": {"containers": [
            {"name": "app", "image": "a:2"}]}}}});
        let r = apply(&live, &cfg, &w("x"), false, &builtin_list_kind).unwrap();
        let cs = &r["spec"]["template"]["spec"]["containers"];
        assert_eq!(cs[0]["image"], "a:2");
        assert_eq!(cs[1]["name"], "sidecar");
    }
}
