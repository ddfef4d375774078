//! The parent's status: what to write after a sync, and the `Synced=False` condition of a failed
//! one.

use serde_json::{Map, Value, json};

// ---------------------------------------------------------------------------------------------
// status

/// The status to write: the hook's (or `{}`) with `observedGeneration`.
pub fn desired_status(hook_status: Option<&Value>, generation: Option<i64>) -> Value {
    let mut s = match hook_status {
        Some(Value::Object(m)) => m.clone(),
        _ => Map::new(),
    };
    if let Some(g) = generation {
        s.insert("observedGeneration".into(), json!(g));
    }
    Value::Object(s)
}

/// Whether the live status differs from the desired one (numbers by value, key order ignored).
pub fn status_changed(live: &Value, desired: &Value) -> bool {
    !dynapply::json_eq(live.get("status").unwrap_or(&Value::Null), desired)
}

/// The condition type kmeta sets on a parent whose sync failed.
pub const SYNCED_CONDITION: &str = "Synced";

/// The parent with a `Synced=False` condition (reason `SyncError`, `message`) in its status, or
/// None when the live status already says exactly that. Other conditions and status fields are
/// kept; `lastTransitionTime` (`now`, RFC 3339) changes only when the status flips. The next
/// successful sync writes the hook's status, which drops the condition again.
pub fn with_sync_failure(live: &Value, message: &str, now: &str) -> Option<Value> {
    let mut next = live.clone();
    let root = next.as_object_mut()?;
    let status = root
        .entry("status")
        .or_insert_with(|| Value::Object(Map::new()));
    if !status.is_object() {
        *status = Value::Object(Map::new());
    }
    let status = status.as_object_mut()?;
    let conditions = status
        .entry("conditions")
        .or_insert_with(|| Value::Array(Vec::new()));
    if !conditions.is_array() {
        *conditions = Value::Array(Vec::new());
    }
    let conditions = conditions.as_array_mut()?;
    let existing = conditions
        .iter_mut()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(SYNCED_CONDITION));
    let want = |transition: &str| {
        json!({"type": SYNCED_CONDITION, "status": "False", "reason": "SyncError",
               "message": message, "lastTransitionTime": transition})
    };
    match existing {
        Some(c) => {
            let same = |k: &str, v: &str| c.get(k).and_then(Value::as_str) == Some(v);
            if same("status", "False") && same("reason", "SyncError") && same("message", message) {
                return None;
            }
            let transition = if same("status", "False") {
                c.get("lastTransitionTime")
                    .and_then(Value::as_str)
                    .unwrap_or(now)
                    .to_owned()
            } else {
                now.to_owned()
            };
            *c = want(&transition);
        }
        None => conditions.push(want(now)),
    }
    Some(next)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parent() -> Value {
        json!({"apiVersion": "ctl.example.com/v1", "kind": "Thing",
               "metadata": {"name": "p", "namespace": "ns", "uid": "u1", "generation": 3},
               "spec": {"selector": {"matchLabels": {"app": "p"}}}})
    }

    #[test]
    fn sync_failure_condition_is_written_once_and_keeps_other_status() {
        let live = json!({"metadata": {"name": "p"},
            "status": {"ready": 2, "conditions": [{"type": "Ready", "status": "True"}]}});
        let next = with_sync_failure(&live, "hook timed out", "2026-01-01T00:00:00Z").unwrap();
        assert_eq!(next["status"]["ready"], 2);
        let conds = next["status"]["conditions"].as_array().unwrap();
        assert_eq!(conds.len(), 2);
        assert_eq!(conds[1]["type"], "Synced");
        assert_eq!(conds[1]["status"], "False");
        assert_eq!(conds[1]["message"], "hook timed out");
        // same failure again: nothing to write
        assert!(with_sync_failure(&next, "hook timed out", "2026-01-01T00:01:00Z").is_none());
        // a different message keeps the transition time
        let again = with_sync_failure(&next, "http status 500", "2026-01-01T00:02:00Z").unwrap();
        assert_eq!(
            again["status"]["conditions"][1]["lastTransitionTime"],
            "2026-01-01T00:00:00Z"
        );
        // no status at all, or a non-object status
        let bare = with_sync_failure(&json!({"status": "weird"}), "x", "t").unwrap();
        assert_eq!(bare["status"]["conditions"][0]["reason"], "SyncError");
    }

    #[test]
    fn status_diff() {
        let s = desired_status(Some(&json!({"ready": 1})), Some(3));
        assert_eq!(s, json!({"ready": 1, "observedGeneration": 3}));
        assert_eq!(
            desired_status(None, Some(1)),
            json!({"observedGeneration": 1})
        );
        let mut p = parent();
        assert!(status_changed(&p, &s));
        p["status"] = json!({"observedGeneration": 3.0, "ready": 1});
        assert!(!status_changed(&p, &s));
    }
}
