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

use crate::patch::{ListKind, Shape};
use serde_json::{Map, Value, json};
use std::collections::{BTreeMap, BTreeSet};

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

/// What a node of an object is, for field sets.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Node {
    /// A scalar, a null, or an atomic list, map or struct: owned whole.
    Leaf,
    /// An item of an associative list (a set's values are leaves).
    Item,
    /// A granular map, struct or list; `member` when structured-merge-diff's field set of an
    /// applied object lists it itself: an empty map, or a map key that is not a declared field.
    Container { member: bool },
}

/// Every node of an object (structured-merge-diff's comparison walks them all) and what it is.
/// Only `labels`, `annotations`, `finalizers` and `ownerReferences` of `metadata` count (the
/// rest is the server's); `apiVersion`, `kind` and `metadata` itself are never owned.
fn nodes(obj: &Value, scope: Scope, shape: &dyn Shape) -> BTreeMap<Path, Node> {
    let mut out = BTreeMap::new();
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
                            collect(mv, &mut names, &mut pe, &mut out, shape);
                        }
                    }
                }
                continue;
            }
            _ => {}
        }
        let mut names = vec![k.clone()];
        let mut pe = vec![format!("f:{k}")];
        collect(v, &mut names, &mut pe, &mut out, shape);
    }
    out
}

/// Field set of an applied configuration (structured-merge-diff's `ToFieldSet`): its leaves,
/// list items, empty maps and keys of maps that are not declared fields.
pub(crate) fn field_set(obj: &Value, scope: Scope, shape: &dyn Shape) -> FieldSet {
    nodes(obj, scope, shape)
        .into_iter()
        .filter(|(_, n)| !matches!(n, Node::Container { member: false }))
        .map(|(p, _)| p)
        .collect()
}

/// Every node of an object: what a create from nothing adds.
pub(crate) fn node_set(obj: &Value, scope: Scope, shape: &dyn Shape) -> FieldSet {
    nodes(obj, scope, shape).into_keys().collect()
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
    out: &mut BTreeMap<Path, Node>,
    shape: &dyn Shape,
) {
    match v {
        Value::Object(m) if !shape.atomic_map(names) => {
            let member = m.is_empty() || !shape.declared(names);
            out.insert(pe.clone(), Node::Container { member });
            collect_fields(m, names, pe, out, shape);
        }
        Value::Array(items) => match shape.list(names) {
            ListKind::Map(keys) if items.iter().all(Value::is_object) => {
                let member = !shape.declared(names);
                out.insert(pe.clone(), Node::Container { member });
                for item in items {
                    pe.push(format!("k:{}", key_object(item, &keys)));
                    out.insert(pe.clone(), Node::Item);
                    if let Some(m) = item.as_object() {
                        collect_fields(m, names, pe, out, shape);
                    }
                    pe.pop();
                }
            }
            ListKind::Set => {
                let member = !shape.declared(names);
                out.insert(pe.clone(), Node::Container { member });
                for item in items {
                    pe.push(format!("v:{item}"));
                    out.insert(pe.clone(), Node::Leaf);
                    pe.pop();
                }
            }
            _ => {
                out.insert(pe.clone(), Node::Leaf);
            }
        },
        Value::Null if shape.container(names) => {
            out.insert(pe.clone(), Node::Container { member: true });
        }
        _ => {
            out.insert(pe.clone(), Node::Leaf);
        }
    }
}

fn collect_fields(
    m: &Map<String, Value>,
    names: &mut Vec<String>,
    pe: &mut Path,
    out: &mut BTreeMap<Path, Node>,
    shape: &dyn Shape,
) {
    for (k, child) in m {
        names.push(k.clone());
        pe.push(format!("f:{k}"));
        collect(child, names, pe, out, shape);
        pe.pop();
        names.pop();
    }
}

/// The field names of a path (list items are no steps), as [`Shape`] takes them.
fn names_of(path: &[String]) -> Vec<String> {
    path.iter()
        .filter_map(|e| e.strip_prefix("f:").map(str::to_string))
        .collect()
}

/// structured-merge-diff's `EnsureNamedFieldsAreMembers`: a set with every declared field that
/// holds a member of it (not map keys, not list items).
fn with_named_fields(set: &FieldSet, shape: &dyn Shape) -> FieldSet {
    let mut out = set.clone();
    for p in set {
        for n in 1..p.len() {
            let prefix = &p[..n];
            if prefix.last().is_some_and(|e| e.starts_with("f:"))
                && shape.declared(&names_of(prefix))
            {
                out.insert(prefix.to_vec());
            }
        }
    }
    out
}

/// What a write changed, as structured-merge-diff's comparison of the old and new object says:
/// nodes added, removed, and leaves whose value changed.
struct Comparison {
    added: FieldSet,
    removed: FieldSet,
    modified: FieldSet,
}

/// A null, `{}` or `[]`.
fn is_empty(v: Option<&Value>) -> bool {
    v.is_some_and(|v| {
        v.is_null()
            || v.as_object().is_some_and(Map::is_empty)
            || v.as_array().is_some_and(Vec::is_empty)
    })
}

fn compare(old: &Value, new: &Value, scope: Scope, shape: &dyn Shape) -> Comparison {
    let before = nodes(old, scope, shape);
    let after = nodes(new, scope, shape);
    let added = after
        .keys()
        .filter(|p| !before.contains_key(*p))
        .cloned()
        .collect();
    let removed = before
        .keys()
        .filter(|p| !after.contains_key(*p))
        .cloned()
        .collect();
    let modified = after
        .iter()
        .filter(|(p, n)| {
            before.get(*p).is_some_and(|b| {
                let (o, v) = (get_at(old, p), get_at(new, p));
                // empty or null on both sides: compared as a leaf (null is not `{}`)
                if is_empty(o) && is_empty(v) {
                    return o != v;
                }
                // a null takes the form of the other side: null against a map is an empty map
                let null_container = (o.is_some_and(Value::is_null)
                    && matches!(n, Node::Container { .. }))
                    || (v.is_some_and(Value::is_null) && matches!(b, Node::Container { .. }));
                (**n == Node::Leaf || *b == Node::Leaf) && !null_container && o != v
            })
        })
        .map(|(p, _)| p.clone())
        .collect();
    Comparison {
        added,
        removed,
        modified,
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

/// Encode a field set as a FieldsV1 object: a member with members under it gets a `.` key.
pub(crate) fn to_fields_v1(set: &FieldSet) -> Value {
    let paths: Vec<&[String]> = set.iter().map(Vec::as_slice).collect();
    Value::Object(fields_v1_node(&paths))
}

/// The FieldsV1 node holding `paths` (the sorted suffixes below it; an empty one ends here:
/// `"."` marks a node that is a field of the set and has fields below it). Each map is made
/// with the capacity it needs: the server keeps every one of them.
fn fields_v1_node(paths: &[&[String]]) -> Map<String, Value> {
    let (ends_here, below) = match paths.split_first() {
        Some(([], rest)) => (true, rest),
        _ => (false, paths),
    };
    // sorted: the paths under one element are next to each other
    let groups = below.chunk_by(|a, b| a.first() == b.first());
    let fields = groups.clone().count();
    // a leaf ({}) allocates nothing
    let mut node = Map::with_capacity(fields + usize::from(ends_here && fields > 0));
    for group in groups {
        let Some(key) = group.first().and_then(|p| p.first()) else {
            continue;
        };
        let suffixes: Vec<&[String]> = group
            .iter()
            .map(|p| p.get(1..).unwrap_or_default())
            .collect();
        node.insert(key.clone(), Value::Object(fields_v1_node(&suffixes)));
    }
    if ends_here && !node.is_empty() {
        node.insert(".".into(), json!({}));
    }
    node
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
                // built field by field: `json!` would copy the rendered fields once more
                let text = |s: &String| Value::String(s.clone());
                let mut v = Map::with_capacity(7);
                v.insert("manager".into(), text(&e.manager));
                v.insert("operation".into(), text(&e.operation));
                v.insert("apiVersion".into(), text(&e.api_version));
                v.insert("time".into(), text(&e.time));
                v.insert("fieldsType".into(), Value::String("FieldsV1".into()));
                v.insert("fieldsV1".into(), to_fields_v1(&e.fields));
                if !e.subresource.is_empty() {
                    v.insert("subresource".into(), text(&e.subresource));
                }
                Value::Object(v)
            })
            .collect(),
    )
}

/// Record a non-apply write (create/update/patch) by `manager`, as kube-apiserver's field
/// manager does: the nodes it added and the leaves it changed become its own and nobody else's,
/// the nodes it removed nobody's.
pub(crate) fn record_update(
    entries: &mut Vec<Entry>,
    old: Option<&Value>,
    new: &Value,
    who: &Writer<'_>,
    shape: &dyn Shape,
) {
    let empty = json!({});
    let cmp = compare(old.unwrap_or(&empty), new, who.scope, shape);
    let changed: FieldSet = cmp.added.union(&cmp.modified).cloned().collect();
    if changed.is_empty() && cmp.removed.is_empty() {
        return;
    }
    let is_me = |e: &Entry| {
        e.manager == who.manager && e.operation == "Update" && e.subresource == who.subresource
    };
    for e in entries.iter_mut() {
        e.fields.retain(|p| !cmp.removed.contains(p));
        if !is_me(e) {
            e.fields.retain(|p| !changed.contains(p));
        }
    }
    if changed.is_empty() {
        return;
    }
    let entry = match entries.iter().position(is_me) {
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

fn merge_apply(live: &mut Value, cfg: &Value, names: &mut Vec<String>, shape: &dyn Shape) {
    // an applied null against a granular map or list with items keeps them (null takes the
    // other side's form: an empty one); against anything else it replaces it
    let granular_items = match &*live {
        Value::Object(m) => !m.is_empty() && !shape.atomic_map(names),
        Value::Array(a) => !a.is_empty() && shape.list(names) != ListKind::Atomic,
        _ => false,
    };
    if cfg.is_null() && granular_items {
        return;
    }
    match (live, cfg) {
        (Value::Object(lm), Value::Object(cm)) if !shape.atomic_map(names) => {
            for (k, cv) in cm {
                names.push(k.clone());
                match lm.get_mut(k) {
                    Some(lv) => merge_apply(lv, cv, names, shape),
                    None => {
                        lm.insert(k.clone(), cv.clone());
                    }
                }
                names.pop();
            }
        }
        (Value::Array(la), Value::Array(ca)) => match shape.list(names) {
            ListKind::Map(keys)
                if ca.iter().all(Value::is_object) && la.iter().all(Value::is_object) =>
            {
                let ids = |l: &[Value]| l.iter().map(|i| key_object(i, &keys)).collect::<Vec<_>>();
                let order = merge_order(&ids(la), &ids(ca));
                let mut out = Vec::with_capacity(order.len());
                for (l, c) in order {
                    let mut item = l.map_or(Value::Null, |l| la[l].clone());
                    match c {
                        Some(c) if l.is_some() => merge_apply(&mut item, &ca[c], names, shape),
                        Some(c) => item = ca[c].clone(),
                        None => {}
                    }
                    out.push(item);
                }
                *la = out;
            }
            ListKind::Set => {
                let order = merge_order(la, ca);
                *la = order
                    .into_iter()
                    .filter_map(|(l, c)| {
                        c.map(|c| ca[c].clone())
                            .or_else(|| l.map(|l| la[l].clone()))
                    })
                    .collect();
            }
            _ => *la = ca.clone(),
        },
        (l, c) => *l = c.clone(),
    }
}

/// The order of a merged associative list or set, as kube-apiserver 1.32's structured-merge-diff
/// (v4.2.1 on) builds it from the live items' identities (`live`) and the applied ones
/// (`config`): each entry is the live index and the config index of one item. The applied items
/// keep their order; a live item the configuration also has moves to where the configuration
/// puts it; a live item it does not have stays where it was relative to its neighbours.
fn merge_order(live: &[Value], config: &[Value]) -> Vec<(Option<usize>, Option<usize>)> {
    let in_config = |v: &Value| config.iter().position(|c| c == v);
    let in_live = |v: &Value| live.iter().position(|l| l == v);
    // the items both have, in the configuration's order
    let mut shared = config.iter().filter(|c| in_live(c).is_some());
    let mut next_shared = shared.next();
    let mut merged: Vec<&Value> = vec![];
    let mut out = Vec::with_capacity(live.len().max(config.len()));
    let (mut l, mut r) = (0, 0);
    while l < live.len() || r < config.len() {
        if l < live.len() && r < config.len() {
            if live[l] == config[r] {
                merged.push(&config[r]);
                out.push((Some(l), Some(r)));
                l += 1;
                r += 1;
                next_shared = shared.next();
                continue;
            }
            // a shared item the configuration puts later: taken when the configuration gets there
            if in_config(&live[l]).is_some() && next_shared.is_some_and(|n| *n != live[l]) {
                l += 1;
                continue;
            }
        }
        if l < live.len() {
            if in_config(&live[l]).is_none() {
                out.push((Some(l), None));
                l += 1;
                continue;
            }
            if merged.contains(&&live[l]) {
                l += 1;
            }
        }
        if r < config.len() {
            merged.push(&config[r]);
            out.push((in_live(&config[r]), Some(r)));
            if next_shared.is_some_and(|n| *n == config[r]) {
                next_shared = shared.next();
            }
            r += 1;
        }
    }
    out
}

/// Apply `config` (the applied object) onto `live` for `who`, as structured-merge-diff's
/// `Updater.Apply` does: merge, prune what this manager applied before and nobody owns now,
/// then compare with the live object: another manager's field that the result adds or changes
/// is a conflict (taken over with `force`), a removed one is nobody's. Returns the merged object
/// with its new managedFields, or the conflicts.
pub(crate) fn apply(
    live: &Value,
    config: &Value,
    who: &Writer<'_>,
    force: bool,
    shape: &dyn Shape,
) -> Result<Value, Vec<Conflict>> {
    let mut entries = parse_managed(live);
    let new_set = field_set(config, who.scope, shape);
    let mine = |e: &Entry| {
        e.manager == who.manager && e.operation == "Apply" && e.subresource == who.subresource
    };
    let mut merged = live.clone();
    merge_apply(
        &mut merged,
        &applicable(config, who.scope),
        &mut vec![],
        shape,
    );
    if let Some(last) = entries.iter().find(|e| mine(e)) {
        // the applier's own set, before kube-apiserver strips it, holds `metadata.name`: that
        // keeps `metadata` from being pruned
        let mut owned = new_set.clone();
        owned.insert(vec!["f:metadata".to_string(), "f:name".to_string()]);
        for e in entries.iter().filter(|e| !mine(e)) {
            owned.extend(e.fields.iter().cloned());
        }
        prune(&mut merged, &last.fields, &owned, who.scope, shape);
    }
    let cmp = compare(live, &merged, who.scope, shape);
    let changed: FieldSet = cmp.added.union(&cmp.modified).cloned().collect();
    let conflicts = find_conflicts(&entries, &changed, &mine);
    if !conflicts.is_empty() && !force {
        return Err(conflicts);
    }
    for e in entries.iter_mut().filter(|e| !mine(e)) {
        e.fields
            .retain(|p| !changed.contains(p) && !cmp.removed.contains(p));
    }
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
    crate::metadata::drop_empty_fields(&mut merged);
    if let Some(md) = merged.get_mut("metadata").and_then(Value::as_object_mut) {
        md.insert("managedFields".into(), render_managed(&entries));
    }
    Ok(merged)
}

/// Fields of other managers that the apply adds or changes.
fn find_conflicts(
    entries: &[Entry],
    changed: &FieldSet,
    mine: &dyn Fn(&Entry) -> bool,
) -> Vec<Conflict> {
    let mut conflicts = vec![];
    for e in entries.iter().filter(|e| !mine(e)) {
        for p in changed.intersection(&e.fields) {
            conflicts.push(Conflict {
                manager: e.manager.clone(),
                api_version: e.api_version.clone(),
                operation: e.operation.clone(),
                subresource: e.subresource.clone(),
                field: display_path(p),
            });
        }
    }
    conflicts
}

/// Remove what this manager applied last time (`last`) that nobody owns now (`owned`: the other
/// managers' fields and this apply's), as structured-merge-diff's `prune` does it: remove all of
/// `last` (with the declared fields holding it), put back what is owned, then put back what was
/// not in `last` after all. A removed node goes with everything under it; a map or list the
/// removal walks through and leaves empty becomes null.
fn prune(merged: &mut Value, last: &FieldSet, owned: &FieldSet, scope: Scope, shape: &dyn Shape) {
    // the library sees all of `metadata`: its name keeps it from being dropped
    let fields = |v: &Value| {
        let mut set = field_set(v, scope, shape);
        if v.pointer("/metadata/name").is_some() {
            set.insert(vec!["f:metadata".to_string(), "f:name".to_string()]);
        }
        with_named_fields(&set, shape)
    };
    let last = with_named_fields(last, shape);
    let owned = with_named_fields(owned, shape);
    let in_merged = fields(merged);
    let without_last = remove_items(merged, &last, shape);
    let keep: FieldSet = fields(&without_last).union(&owned).cloned().collect();
    let unowned: FieldSet = in_merged.difference(&keep).cloned().collect();
    let owned_back = remove_items(merged, &unowned, shape);
    let in_owned_back = fields(&owned_back);
    let dropped: FieldSet = in_merged
        .iter()
        .filter(|p| !in_owned_back.contains(*p) && last.contains(*p))
        .cloned()
        .collect();
    if !dropped.is_empty() {
        *merged = remove_items(merged, &dropped, shape);
    }
}

/// `v` without the nodes of `set` (structured-merge-diff's `RemoveItems`): a map or list holding
/// a removed node is rebuilt, and becomes null if nothing is left in it.
fn remove_items(v: &Value, set: &FieldSet, shape: &dyn Shape) -> Value {
    fn under(set: &FieldSet, path: &Path) -> bool {
        set.range(path.clone()..)
            .take_while(|p| p.starts_with(path))
            .any(|p| p.len() > path.len())
    }
    fn walk(
        v: &Value,
        set: &FieldSet,
        names: &mut Vec<String>,
        path: &mut Path,
        shape: &dyn Shape,
    ) -> Value {
        let atomic = shape.atomic_map(names);
        let kind = shape.list(names);
        let mut child = |c: &Value, step: String, name: Option<&String>| -> Option<Value> {
            path.push(step);
            if let Some(n) = name {
                names.push(n.clone());
            }
            let out = if set.contains(path) {
                None
            } else if under(set, path) {
                Some(walk(c, set, names, path, shape))
            } else {
                Some(c.clone())
            };
            if name.is_some() {
                names.pop();
            }
            path.pop();
            out
        };
        let out = match v {
            Value::Object(m) if !atomic => {
                let kept: Map<String, Value> = m
                    .iter()
                    .filter_map(|(k, c)| {
                        child(c, format!("f:{k}"), Some(k)).map(|c| (k.clone(), c))
                    })
                    .collect();
                (!kept.is_empty()).then_some(Value::Object(kept))
            }
            Value::Array(items) => {
                let step = |item: &Value| match &kind {
                    ListKind::Map(keys) => Some(format!("k:{}", key_object(item, keys))),
                    ListKind::Set => Some(format!("v:{item}")),
                    ListKind::Atomic => None,
                };
                let steps: Vec<Option<String>> = items.iter().map(step).collect();
                if steps.iter().any(Option::is_none) {
                    return v.clone();
                }
                let kept: Vec<Value> = items
                    .iter()
                    .zip(steps)
                    .filter_map(|(item, s)| child(item, s.unwrap_or_default(), None))
                    .collect();
                (!kept.is_empty()).then_some(Value::Array(kept))
            }
            other => Some(other.clone()),
        };
        out.unwrap_or(Value::Null)
    }
    if set.is_empty() {
        return v.clone();
    }
    walk(v, set, &mut vec![], &mut vec![], shape)
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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::patch::builtin_list_kind;

    #[test]
    fn fields_v1_marks_a_field_with_fields_below_it_and_keeps_the_sorted_order() {
        let path = |p: &str| p.split('/').map(str::to_string).collect::<Path>();
        let set: FieldSet = [
            "f:data/f:a",
            "f:data/f:b",
            "f:metadata/f:labels",
            "f:metadata/f:labels/f:app",
            "f:metadata/f:ownerReferences/k:{\"uid\":\"u\"}",
            "f:metadata/f:ownerReferences/k:{\"uid\":\"u\"}/f:name",
        ]
        .into_iter()
        .map(path)
        .collect();
        let v1 = to_fields_v1(&set);
        assert_eq!(
            v1,
            json!({"f:data": {"f:a": {}, "f:b": {}},
                   "f:metadata": {"f:labels": {"f:app": {}, ".": {}},
                                  "f:ownerReferences": {"k:{\"uid\":\"u\"}": {"f:name": {}, ".": {}}}}})
        );
        let text = serde_json::to_string(&v1).unwrap();
        assert!(
            text.starts_with(
                r#"{"f:data":{"f:a":{},"f:b":{}},"f:metadata":{"f:labels":{"f:app":{},".":{}}"#
            ),
            "{text}"
        );
        assert_eq!(from_fields_v1(&v1), set);
        assert_eq!(to_fields_v1(&FieldSet::new()), json!({}));
    }

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

    /// structured-merge-diff's own cases for the merge order of sets (typed/merge_test.go,
    /// v4.2.1 on): live, applied, merged.
    #[test]
    fn merge_order_of_sets_is_structured_merge_diffs() {
        let cases: &[(&str, &str, &str)] = &[
            ("ab", "ba", "ba"),
            ("abc", "def", "abcdef"),
            ("abc", "cdef", "abcdef"),
            ("abcgf", "cdef", "abcgdef"),
            ("abc", "defxyz", "abcdefxyz"),
            ("cdef", "ace", "acdef"),
            ("abcxyz", "def", "abcxyzdef"),
            ("abcxyz", "defxyz", "abcdefxyz"),
            ("cagf", "cfag", "cfag"),
            ("abcd", "defa", "bcdefa"),
            ("cdefghij", "2h3e4kl", "cdfg2hij3e4kl"),
            ("abcdefghij", "1b2h3e4kl", "a1bcdfg2hij3e4kl"),
        ];
        let list = |s: &str| Value::Array(s.chars().map(|c| json!(c.to_string())).collect());
        let shape = |_: &[String]| ListKind::Set;
        for (live, cfg, want) in cases {
            let mut l = list(live);
            merge_apply(&mut l, &list(cfg), &mut vec![], &shape);
            assert_eq!(l, list(want), "{live} + {cfg}");
        }
    }

    #[test]
    fn merge_order_of_associative_lists_is_structured_merge_diffs() {
        let item = |k: &str, id: i64| json!({"key": k, "id": id});
        let shape = |_: &[String]| ListKind::Map(vec!["key".into()]);
        let mut live = json!([item("a", 1), item("b", 2), item("c", 3)]);
        merge_apply(
            &mut live,
            &json!([item("c", 3), item("a", 1)]),
            &mut vec![],
            &shape,
        );
        assert_eq!(live, json!([item("b", 2), item("c", 3), item("a", 1)]));
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
