//! How render's result is printed: the desired children and status as YAML, or per child the
//! write as a unified diff, every object with its keys in one order (so a diff shows what
//! changes, never a key that only moved).

use std::collections::HashMap;

use serde_json::{Map, Value, json};

use super::{Rendered, Write};
use crate::reconcile::decide;

/// `v` with every object's keys sorted: files, hooks and the API server each order keys their own
/// way, and a diff must show only what changes.
pub(crate) fn canonical(v: &Value) -> Value {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            let sorted: Map<String, Value> = keys
                .into_iter()
                .map(|k| (k.clone(), canonical(&m[k])))
                .collect();
            Value::Object(sorted)
        }
        Value::Array(items) => Value::Array(items.iter().map(canonical).collect()),
        other => other.clone(),
    }
}

/// The YAML of `v`, or its JSON when YAML cannot be written.
fn yaml(v: &Value) -> String {
    let v = canonical(v);
    serde_saphyr::to_string(&v).unwrap_or_else(|_| v.to_string())
}

/// The desired children and the status as YAML documents.
pub fn as_yaml(r: &Rendered) -> String {
    let mut out = String::new();
    for child in &r.desired {
        out.push_str("---\n");
        out.push_str(&yaml(child));
    }
    out.push_str("---\n");
    out.push_str(&yaml(&json!({"status": r.status})));
    if !r.events.is_empty() {
        out.push_str("---\n");
        out.push_str(&yaml(&json!({"events": r.events})));
    }
    out
}

/// What one write is, the child it writes, and the child before and after it, as YAML.
fn write_texts(
    w: &Write,
    by_key: &HashMap<String, &Value>,
) -> (&'static str, String, String, String) {
    let before_of = |key: &str| by_key.get(key).map(|o| yaml(o)).unwrap_or_default();
    match w {
        Write::Create(v) => ("create", decide::child_key(v), String::new(), yaml(v)),
        Write::Update(v) => {
            let key = decide::child_key(v);
            let before = before_of(&key);
            ("update", key, before, yaml(v))
        }
        Write::Apply { body, .. } => {
            let key = decide::child_key(body);
            let before = before_of(&key);
            ("server-side apply", key, before, yaml(body))
        }
        Write::Delete { object, reason } => {
            let what = if *reason == "recreate" {
                "delete (to recreate)"
            } else {
                "delete"
            };
            (what, decide::child_key(object), yaml(object), String::new())
        }
    }
}

/// A unified diff of `before` and `after`, headed with their names.
fn unified(before: &str, after: &str, (old, new): (&str, &str)) -> String {
    similar::TextDiff::from_lines(before, after)
        .unified_diff()
        .header(old, new)
        .to_string()
}

/// Per child, the write kmeta would make, as a unified diff against the observed object (empty
/// for a create or a delete), then the children whose write is held back and those left as
/// they are, then the status when it changes. Keys are compared in one order: a diff shows
/// only what changes.
pub fn as_diff(r: &Rendered) -> String {
    let by_key: HashMap<String, &Value> = r
        .observed
        .iter()
        .map(|o| (decide::child_key(o), o))
        .collect();
    let mut out = String::new();
    for w in &r.writes {
        let (what, key, before, after) = write_texts(w, &by_key);
        out.push_str(&format!("# {what} {key}\n"));
        let names = (format!("observed {key}"), format!("written {key}"));
        out.push_str(&unified(&before, &after, (&names.0, &names.1)));
    }
    for left in &r.left_alone {
        out.push_str(&format!("# left alone {}: {}\n", left.child, left.why));
    }
    for key in &r.unchanged {
        out.push_str(&format!("# no write {key}\n"));
    }
    if r.status_changes() {
        let before = yaml(&json!({"status": r.parent.get("status")}));
        let after = yaml(&json!({"status": r.status}));
        out.push_str("# update status\n");
        out.push_str(&unified(
            &before,
            &after,
            ("observed status", "written status"),
        ));
    } else {
        out.push_str("# no write status\n");
    }
    out
}
