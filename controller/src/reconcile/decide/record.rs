//! The record of a parent's last sync that changed something, for `kmeta trace`: kept in the
//! parent's `status.kmeta.lastSync`, written only with a status write the sync makes anyway or
//! because it wrote children, so a sync that changes nothing writes nothing
//! (`docs/design/sync-record.md`). Bounded: [`MAX_CHILDREN`] entries, [`MAX_FIELDS`] paths each,
//! texts cut at [`MAX_TEXT`] characters.

use std::time::Duration;

use serde_json::{Map, Value, json};

/// The status field kmeta keeps its own record in (the rest of the status is the hook's).
pub const RECORD_FIELD: &str = "kmeta";

/// Child entries kept in one record; the others are counted in `more`.
pub const MAX_CHILDREN: usize = 20;

/// Field paths kept for one updated child; the others are counted.
pub const MAX_FIELDS: usize = 5;

/// Characters kept of one reason or cause.
pub const MAX_TEXT: usize = 200;

/// Earlier records kept in `history`, newest first, besides `lastSync`: 4 (so the last 5 syncs
/// that wrote something are kept, as Flux keeps its last reconciliations).
pub const HISTORY: usize = 4;

/// Child entries kept per record in `history` (the others are counted in `more`): 5.
pub const HISTORY_CHILDREN: usize = 5;

/// What one sync did to one child.
#[derive(Debug, Clone, PartialEq)]
pub enum ChildAction {
    /// Created.
    Created,
    /// Updated: the field paths the write changed.
    Updated {
        /// Paths as `spec.replicas`, `data.x`, list items as `containers[1]`.
        fields: Vec<String>,
    },
    /// Deleted (`not desired` or `recreate`).
    Deleted {
        /// Why.
        why: String,
    },
    /// An update planned but not written (drift policy, a futile update, a contest).
    LeftAlone {
        /// Why.
        why: String,
    },
    /// The write was refused.
    Failed {
        /// The server's answer.
        cause: String,
    },
}

/// One child's entry in a [`SyncRecord`].
#[derive(Debug, Clone, PartialEq)]
pub struct ChildRecord {
    /// The child's kind.
    pub kind: String,
    /// `name`, or `namespace/name` when its namespace is not the parent's.
    pub name: String,
    /// What the sync did.
    pub action: ChildAction,
}

impl ChildRecord {
    /// The entry of `child` of `parent`: its kind, and its name (with its namespace when that is
    /// not the parent's).
    pub fn of(parent: &Value, child: &Value, action: ChildAction) -> ChildRecord {
        // (read in place: `Value::pointer` copies each path segment)
        let meta = crate::object::meta_str;
        let name = match meta(child, "namespace") {
            ns if ns == meta(parent, "namespace") => meta(child, "name").to_owned(),
            ns => format!("{ns}/{}", meta(child, "name")),
        };
        ChildRecord {
            kind: child
                .get("kind")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
            name,
            action,
        }
    }
}

/// What one sync did, for the parent's record.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SyncRecord {
    /// When the sync wrote (RFC 3339).
    pub time: String,
    /// The trace id its hook requests carried.
    pub trace_id: Option<String>,
    /// How long its hook calls took.
    pub hook: Option<Duration>,
    /// The children it wrote or left alone (listed deletions first, then by kind and name,
    /// whatever the order the writes finished in, so that two syncs doing the same read the
    /// same).
    pub children: Vec<ChildRecord>,
    /// The related objects its hook was sent (`Kind namespace/name`).
    pub related: Vec<String>,
    /// The kmeta replica that ran it (`POD_NAME`), when known: with several replicas (the fleet
    /// split between them, or leader election across restarts) it tells which one synced.
    pub replica: Option<String>,
    /// What scheduled the sync (`watch: ConfigMap shop/a`, `resync`, ...), when known.
    pub trigger: Option<String>,
}

impl SyncRecord {
    /// The record as kept in the status, bounded.
    pub fn to_value(&self) -> Value {
        let mut m = Map::new();
        m.insert("time".into(), json!(self.time));
        if let Some(t) = &self.trace_id {
            m.insert("traceID".into(), json!(t));
        }
        if let Some(d) = self.hook {
            m.insert("hookMillis".into(), json!(d.as_millis()));
        }
        if let Some(r) = &self.replica {
            m.insert("replica".into(), json!(r));
        }
        if let Some(t) = &self.trigger {
            m.insert("trigger".into(), json!(cut(t)));
        }
        m.insert("children".into(), Value::Array(self.listed()));
        if self.children.len() > MAX_CHILDREN {
            m.insert("more".into(), json!(self.children.len() - MAX_CHILDREN));
        }
        if !self.related.is_empty() {
            let kept: Vec<&String> = self.related.iter().take(MAX_CHILDREN).collect();
            m.insert("related".into(), json!(kept));
        }
        if self.related.len() > MAX_CHILDREN {
            m.insert(
                "moreRelated".into(),
                json!(self.related.len() - MAX_CHILDREN),
            );
        }
        Value::Object(m)
    }

    /// The child entries as the record lists them: deletions first (a sync deletes before it
    /// creates and updates), then by kind and name, at most [`MAX_CHILDREN`].
    fn listed(&self) -> Vec<Value> {
        let mut sorted: Vec<&ChildRecord> = self.children.iter().collect();
        let deleted_first = |c: &ChildRecord| !matches!(c.action, ChildAction::Deleted { .. });
        sorted.sort_by(|a, b| {
            (deleted_first(a), &a.kind, &a.name).cmp(&(deleted_first(b), &b.kind, &b.name))
        });
        sorted
            .into_iter()
            .take(MAX_CHILDREN)
            .map(child_value)
            .collect()
    }

    /// Whether this sync did something to its children that `kept` (the live record's
    /// `lastSync`) does not already say: a write or a refused write, or children left alone
    /// other than those `kept` lists as left alone, or for other reasons. The same children
    /// still left alone for the same reasons are no news: the record's time and hook timing
    /// alone never make a write.
    pub fn is_news(&self, kept: Option<&Value>) -> bool {
        let wrote = self
            .children
            .iter()
            .any(|c| !matches!(c.action, ChildAction::LeftAlone { .. }));
        if wrote {
            return true;
        }
        let Some(kept) = kept else {
            return !self.children.is_empty();
        };
        let listed = self.listed();
        let kept_children = kept.get("children").and_then(Value::as_array);
        let kept_more = kept.get("more").and_then(Value::as_u64).unwrap_or(0);
        let more = self.children.len().saturating_sub(MAX_CHILDREN) as u64;
        if more > 0 {
            // cut: the listing must be the same, and so must the count of the others
            return kept_children != Some(&listed) || kept_more != more;
        }
        let mut left: Vec<&Value> = kept_children
            .into_iter()
            .flatten()
            .filter(|c| c["action"] == "LeftAlone")
            .collect();
        // a record written before the listing was sorted lists its children as written
        left.sort_by(|a, b| {
            (a["kind"].as_str(), a["name"].as_str()).cmp(&(b["kind"].as_str(), b["name"].as_str()))
        });
        !left.iter().copied().eq(listed.iter())
    }
}

/// The related objects of a hook request's `related` map, as `Kind namespace/name`.
pub fn related_names(related: &Map<String, Value>) -> Vec<String> {
    related
        .values()
        .filter_map(Value::as_object)
        .flat_map(|group| group.values())
        .map(crate::object::describe)
        .collect()
}

fn child_value(c: &ChildRecord) -> Value {
    let (action, detail) = match &c.action {
        ChildAction::Created => ("Created", None),
        ChildAction::Updated { fields } => {
            let mut kept: Vec<String> = fields.iter().take(MAX_FIELDS).cloned().collect();
            if fields.len() > MAX_FIELDS {
                kept.push(format!("and {} more", fields.len() - MAX_FIELDS));
            }
            ("Updated", Some(("fields", json!(kept))))
        }
        ChildAction::Deleted { why } => ("Deleted", Some(("reason", json!(cut(why))))),
        ChildAction::LeftAlone { why } => ("LeftAlone", Some(("reason", json!(cut(why))))),
        ChildAction::Failed { cause } => ("Failed", Some(("reason", json!(cut(cause))))),
    };
    let mut m = Map::new();
    m.insert("kind".into(), json!(c.kind));
    m.insert("name".into(), json!(c.name));
    m.insert("action".into(), json!(action));
    if let Some((k, v)) = detail {
        m.insert(k.into(), v);
    }
    Value::Object(m)
}

fn cut(text: &str) -> String {
    match text.char_indices().nth(MAX_TEXT) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_owned(),
    }
}

/// `want` (the status to write: the hook's, with kmeta's fields) with kmeta's record: this
/// sync's when it has news — wrote children, or left children alone that the live record does
/// not list as left alone for the same reasons ([`SyncRecord::is_news`]), or changed the status
/// itself — else the record `live` carries, so a sync that changes nothing leaves the status as
/// it is.
pub fn with_sync_record(mut want: Value, live: &Value, record: &SyncRecord) -> Value {
    let kept = live
        .get("status")
        .and_then(|s| s.get(RECORD_FIELD))
        .cloned();
    let Some(w) = want.as_object_mut() else {
        return want;
    };
    w.remove(RECORD_FIELD);
    let status_changed = !without_record_eq(live.get("status"), w);
    let last = kept.as_ref().and_then(|k| k.get("lastSync"));
    let next = if status_changed || record.is_news(last) {
        let mut r = match kept {
            Some(Value::Object(m)) => m,
            _ => Map::new(),
        };
        let earlier = r.remove("lastSync");
        let history = with_earlier(r.remove("history"), earlier);
        r.insert("lastSync".into(), record.to_value());
        if !history.is_empty() {
            r.insert("history".into(), Value::Array(history));
        }
        Some(Value::Object(r))
    } else {
        kept
    };
    if let Some(r) = next {
        w.insert(RECORD_FIELD.into(), r);
    }
    want
}

/// The `history` after a new record: `earlier` (the `lastSync` it replaces, its children cut to
/// [`HISTORY_CHILDREN`] and its related objects dropped) first, then the kept history, at most
/// [`HISTORY`] records.
fn with_earlier(history: Option<Value>, earlier: Option<Value>) -> Vec<Value> {
    let mut out: Vec<Value> = earlier.map(shortened).into_iter().collect();
    if let Some(Value::Array(kept)) = history {
        out.extend(kept);
    }
    out.truncate(HISTORY);
    out
}

/// A record as `history` keeps it: at most [`HISTORY_CHILDREN`] children (the others counted
/// in `more`), no related objects.
fn shortened(mut record: Value) -> Value {
    let Some(m) = record.as_object_mut() else {
        return record;
    };
    m.remove("related");
    m.remove("moreRelated");
    let over = m
        .get("children")
        .and_then(Value::as_array)
        .map_or(0, |c| c.len().saturating_sub(HISTORY_CHILDREN));
    if over > 0 {
        if let Some(Value::Array(c)) = m.get_mut("children") {
            c.truncate(HISTORY_CHILDREN);
        }
        let more = m.get("more").and_then(Value::as_u64).unwrap_or(0) + over as u64;
        m.insert("more".into(), json!(more));
    }
    record
}

/// Whether the status to write, `want` (the hook's, with `observedGeneration`, without kmeta's
/// record), differs from the live parent's, its record aside: a write that changes the record
/// only shows the hook nothing new, so it need not requeue the parent.
pub fn hook_status_changed(live: &Value, want: &Value) -> bool {
    let mut want = want.clone();
    let Some(w) = want.as_object_mut() else {
        return true;
    };
    w.remove(RECORD_FIELD);
    !without_record_eq(live.get("status"), w)
}

/// Whether the live status, without kmeta's record, equals `want` (which has none).
fn without_record_eq(live: Option<&Value>, want: &Map<String, Value>) -> bool {
    let Some(Value::Object(live)) = live else {
        return want.is_empty() && live.is_none_or(Value::is_null);
    };
    live.len() - usize::from(live.contains_key(RECORD_FIELD)) == want.len()
        && want
            .iter()
            .all(|(k, v)| live.get(k).is_some_and(|l| dynapply::json_eq(l, v)))
}

/// The field paths where `after` differs from `before` (an update's merged object against the
/// live one), in document order, at most `limit` of them plus how many more there are; server
/// fields (`metadata.resourceVersion`, `managedFields`, `generation`, `status`) and annotations
/// named in `ignore` are not compared.
pub fn changed_paths(before: &Value, after: &Value, ignore: &[&str]) -> Vec<String> {
    let mut out = Vec::new();
    diff("", (before, after), (ignore, false), &mut out);
    out
}

/// As [`changed_paths`] for a server-side apply body: only the fields `applied` sets (the
/// fields it leaves out belong to other managers or are left as they are).
pub fn applied_paths(live: &Value, applied: &Value, ignore: &[&str]) -> Vec<String> {
    let mut out = Vec::new();
    diff("", (live, applied), (ignore, true), &mut out);
    out
}

const SERVER_FIELDS: [&str; 5] = [
    "metadata.resourceVersion",
    "metadata.managedFields",
    "metadata.generation",
    "metadata.creationTimestamp",
    "status",
];

/// Walks `after` against `before`; `set_only`: keys missing from `after` are not changes.
fn diff(
    path: &str,
    (before, after): (&Value, &Value),
    (ignore, set_only): (&[&str], bool),
    out: &mut Vec<String>,
) {
    if SERVER_FIELDS.contains(&path) || out.len() > MAX_FIELDS * 4 {
        return;
    }
    if let Some(name) = path.strip_prefix("metadata.annotations.")
        && ignore.contains(&name)
    {
        return;
    }
    match (before, after) {
        (Value::Object(b), Value::Object(a)) => {
            for (k, av) in a {
                let p = join(path, k);
                match b.get(k) {
                    Some(bv) => diff(&p, (bv, av), (ignore, set_only), out),
                    None => push(&p, ignore, out),
                }
            }
            if !set_only {
                for k in b.keys().filter(|k| !a.contains_key(*k)) {
                    push(&join(path, k), ignore, out);
                }
            }
        }
        (Value::Array(b), Value::Array(a)) if b.len() == a.len() => {
            for (i, (bv, av)) in b.iter().zip(a).enumerate() {
                diff(&format!("{path}[{i}]"), (bv, av), (ignore, set_only), out);
            }
        }
        _ if dynapply::json_eq(before, after) => {}
        _ => push(path, ignore, out),
    }
}

fn push(path: &str, ignore: &[&str], out: &mut Vec<String>) {
    let ignored = path
        .strip_prefix("metadata.annotations.")
        .is_some_and(|name| ignore.contains(&name));
    if !ignored && !SERVER_FIELDS.contains(&path) {
        out.push(path.to_owned());
    }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn record(children: Vec<ChildRecord>) -> SyncRecord {
        SyncRecord {
            time: "2026-11-27T10:00:00Z".into(),
            trace_id: Some("ab".into()),
            hook: Some(Duration::from_millis(12)),
            children,
            related: Vec::new(),
            replica: None,
            trigger: None,
        }
    }

    fn created(name: &str) -> ChildRecord {
        ChildRecord {
            kind: "ConfigMap".into(),
            name: name.into(),
            action: ChildAction::Created,
        }
    }

    #[test]
    fn a_sync_that_changes_nothing_keeps_the_status_as_it_is() {
        let live = json!({"status": {"ready": 1, "kmeta": {"lastSync": {"time": "earlier"}}}});
        let want = with_sync_record(json!({"ready": 1}), &live, &record(vec![]));
        assert_eq!(want, live["status"], "the old record is kept: no write");
        // no record yet, nothing changed: none is added (no write either)
        let live = json!({"status": {"ready": 1}});
        let want = with_sync_record(json!({"ready": 1}), &live, &record(vec![]));
        assert_eq!(want, json!({"ready": 1}));
    }

    #[test]
    fn a_sync_that_writes_a_child_or_the_status_records_itself() {
        let live = json!({"status": {"ready": 1, "kmeta": {"lastSync": {"time": "earlier"}}}});
        let want = with_sync_record(json!({"ready": 1}), &live, &record(vec![created("a")]));
        assert_eq!(want["kmeta"]["lastSync"]["time"], "2026-11-27T10:00:00Z");
        assert_eq!(want["kmeta"]["lastSync"]["hookMillis"], 12);
        assert_eq!(
            want["kmeta"]["lastSync"]["children"],
            json!([{"kind": "ConfigMap", "name": "a", "action": "Created"}])
        );
        let want = with_sync_record(json!({"ready": 2}), &live, &record(vec![]));
        assert_eq!(want["kmeta"]["lastSync"]["children"], json!([]));
        assert_eq!(want["ready"], 2);
        // a hook that returns kmeta's field (copied from the parent) does not write it
        let want = with_sync_record(
            json!({"ready": 1, "kmeta": {"lastSync": {"time": "forged"}}}),
            &live,
            &record(vec![]),
        );
        assert_eq!(want, live["status"]);
    }

    fn left_alone(name: &str, why: &str) -> ChildRecord {
        ChildRecord {
            kind: "ConfigMap".into(),
            name: name.into(),
            action: ChildAction::LeftAlone { why: why.into() },
        }
    }

    /// The status after a sync with `children`, from the live `status`.
    fn after(status: &Value, children: Vec<ChildRecord>) -> Value {
        let live = json!({ "status": status });
        let mut want = status.clone();
        if let Some(w) = want.as_object_mut() {
            w.remove(RECORD_FIELD);
        }
        let mut r = record(children);
        // every sync has its own time and hook timing: neither is news
        r.time = format!("later than {}", status["kmeta"]["lastSync"]["time"]);
        r.hook = Some(Duration::from_millis(status.to_string().len() as u64));
        with_sync_record(want, &live, &r)
    }

    #[test]
    fn the_same_children_left_alone_for_the_same_reasons_is_no_news() {
        let first = after(
            &json!({"ready": 1}),
            vec![left_alone("a", "drift policy Report")],
        );
        assert_eq!(
            first["kmeta"]["lastSync"]["children"],
            json!([{"kind": "ConfigMap", "name": "a", "action": "LeftAlone", "reason": "drift policy Report"}]),
            "the first time, it is news"
        );
        let again = after(&first, vec![left_alone("a", "drift policy Report")]);
        assert_eq!(again, first, "the record is carried over: no write");
        // in another order (the writes run side by side)
        let two = vec![left_alone("b", "x"), left_alone("a", "y")];
        let second = after(&first, two);
        assert_ne!(second, first, "a new child left alone and a new reason");
        let swapped = after(&second, vec![left_alone("a", "y"), left_alone("b", "x")]);
        assert_eq!(swapped, second, "the order of the writes is no news");
        // a reason that changed, a child no longer left alone, a write: news
        let why = after(&second, vec![left_alone("a", "z"), left_alone("b", "x")]);
        assert_ne!(why, second);
        let fewer = after(&second, vec![left_alone("b", "x")]);
        assert_ne!(fewer, second);
        let wrote = after(
            &second,
            vec![left_alone("a", "y"), left_alone("b", "x"), created("c")],
        );
        assert_ne!(wrote, second);
        // after a sync that wrote one child and left another alone, leaving the same one alone
        // is still no news: the record of the write stays
        let still = after(&wrote, vec![left_alone("b", "x"), left_alone("a", "y")]);
        assert_eq!(still, wrote);
    }

    #[test]
    fn a_cut_listing_is_compared_whole() {
        let many = |why: &str| -> Vec<ChildRecord> {
            (0..25)
                .map(|i| left_alone(&format!("c{i:02}"), why))
                .collect()
        };
        let first = after(&json!({}), many("r"));
        assert_eq!(first["kmeta"]["lastSync"]["more"], 5);
        assert_eq!(after(&first, many("r")), first);
        let mut one_more = many("r");
        one_more.push(left_alone("c99", "r"));
        assert_ne!(
            after(&first, one_more),
            first,
            "the count of the others changed"
        );
        assert_ne!(after(&first, many("s")), first);
    }

    #[test]
    fn related_objects_are_named_by_kind_and_namespace() {
        let related = json!({
            "ConfigMap.v1": {"ns/a": {"kind": "ConfigMap", "metadata": {"name": "a", "namespace": "ns"}}},
            "Namespace.v1": {"n": {"kind": "Namespace", "metadata": {"name": "n"}}},
            "Secret.v1": {}
        });
        let names = related_names(related.as_object().unwrap());
        assert_eq!(names, ["ConfigMap ns/a", "Namespace n"]);
        let r = SyncRecord {
            related: names,
            ..record(vec![])
        };
        assert_eq!(r.to_value().get("replica"), None, "unknown: not written");
        let by = SyncRecord {
            replica: Some("kmeta-1".into()),
            trigger: None,
            ..record(vec![])
        };
        assert_eq!(by.to_value()["replica"], "kmeta-1");
        assert_eq!(
            r.to_value()["related"],
            json!(["ConfigMap ns/a", "Namespace n"])
        );
        assert!(
            record(vec![]).to_value().get("related").is_none(),
            "none: no field"
        );
    }

    #[test]
    fn a_write_of_the_record_alone_is_no_change_of_the_hooks_status() {
        let live = json!({"status": {"ready": 1, "kmeta": {"lastSync": {"time": "earlier"}}}});
        assert!(!hook_status_changed(&live, &json!({"ready": 1})));
        assert!(hook_status_changed(&live, &json!({"ready": 2})));
        assert!(hook_status_changed(&json!({}), &json!({"ready": 1})));
        assert!(!hook_status_changed(&json!({}), &json!({})));
    }

    #[test]
    fn the_record_is_bounded() {
        let many: Vec<ChildRecord> = (0..30).map(|i| created(&format!("c{i}"))).collect();
        let v = record(many).to_value();
        assert_eq!(v["children"].as_array().unwrap().len(), MAX_CHILDREN);
        assert_eq!(v["more"], 10);
        let updated = ChildRecord {
            kind: "Pod".into(),
            name: "p".into(),
            action: ChildAction::Updated {
                fields: (0..8).map(|i| format!("f{i}")).collect(),
            },
        };
        let failed = ChildRecord {
            kind: "Pod".into(),
            name: "q".into(),
            action: ChildAction::Failed {
                cause: "x".repeat(500),
            },
        };
        let v = record(vec![updated, failed]).to_value();
        assert_eq!(
            v["children"][0]["fields"],
            json!(["f0", "f1", "f2", "f3", "f4", "and 3 more"])
        );
        let cause = v["children"][1]["reason"].as_str().unwrap();
        assert_eq!(cause.chars().count(), MAX_TEXT + 1, "cut, with an ellipsis");
    }

    #[test]
    fn changed_paths_name_the_fields_an_update_changes() {
        let before = json!({
            "metadata": {"name": "a", "resourceVersion": "5", "labels": {"x": "1"},
                "annotations": {"kmeta.dev/last-applied": "old", "keep": "k"}},
            "spec": {"replicas": 1, "template": {"containers": [{"name": "app", "image": "v1"}, {"name": "sidecar"}]}},
            "status": {"ready": 0}
        });
        let after = json!({
            "metadata": {"name": "a", "resourceVersion": "5", "labels": {"x": "2"},
                "annotations": {"kmeta.dev/last-applied": "new", "keep": "k"}},
            "spec": {"replicas": 1.0, "template": {"containers": [{"name": "app", "image": "v2"}, {"name": "sidecar"}]},
                "paused": true},
            "status": {"ready": 1}
        });
        assert_eq!(
            changed_paths(&before, &after, &["kmeta.dev/last-applied"]),
            [
                "metadata.labels.x",
                "spec.template.containers[0].image",
                "spec.paused"
            ]
        );
        assert!(changed_paths(&before, &before, &[]).is_empty());
        // an apply body names only its own fields: the live labels it leaves out are no change
        let applied = json!({"metadata": {"name": "a"}, "spec": {"replicas": 2}});
        assert_eq!(applied_paths(&before, &applied, &[]), ["spec.replicas"]);
        let all = changed_paths(&before, &applied, &[]);
        assert!(all.contains(&"metadata.labels".to_owned()), "{all:?}");
    }

    #[test]
    fn a_new_record_moves_the_last_one_into_a_bounded_history() {
        let status = |v: Value| json!({"status": v});
        let mut live = status(json!({}));
        for i in 0..7 {
            let mut r = record(
                (0..8)
                    .map(|n| ChildRecord {
                        kind: "ConfigMap".into(),
                        name: format!("c{n}"),
                        action: ChildAction::Created,
                    })
                    .collect(),
            );
            r.time = format!("t{i}");
            r.trigger = Some("resync".into());
            r.related = vec!["Secret n/s".into()];
            let want = with_sync_record(json!({"i": i}), &live, &r);
            live = status(want);
        }
        let kmeta = &live["status"]["kmeta"];
        assert_eq!(kmeta["lastSync"]["time"], "t6");
        assert_eq!(kmeta["lastSync"]["trigger"], "resync");
        let history = kmeta["history"].as_array().unwrap();
        let times: Vec<&str> = history
            .iter()
            .map(|h| h["time"].as_str().unwrap())
            .collect();
        assert_eq!(
            times,
            ["t5", "t4", "t3", "t2"],
            "newest first, {HISTORY} kept"
        );
        assert_eq!(
            history[0]["children"].as_array().unwrap().len(),
            HISTORY_CHILDREN
        );
        assert_eq!(history[0]["more"], 3);
        assert!(history[0].get("related").is_none());
    }
}
