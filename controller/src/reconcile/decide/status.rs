//! The parent's status: what to write after a sync, the `Synced=False` condition of a failed
//! one, the `Paused` condition of a parent kmeta leaves alone.

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

/// The annotation whose new value asks kmeta to sync the parent now, past its backoff and an open
/// hook circuit (like any change of the parent); kmeta's, as Flux's `requestedAt`.
pub const RECONCILE_REQUESTED_AT: &str = "kmeta.dev/reconcile-requested-at";

/// The status field that reports the last [`RECONCILE_REQUESTED_AT`] value a sync handled.
pub const LAST_HANDLED_RECONCILE_AT: &str = "lastHandledReconcileAt";

/// The parent's reconcile request, when it carries one.
pub fn reconcile_request(parent: &Value) -> Option<&str> {
    crate::object::meta(parent, "annotations")?
        .get(RECONCILE_REQUESTED_AT)?
        .as_str()
}

/// The status a sync writes with [`LAST_HANDLED_RECONCILE_AT`] set to the parent's request, when
/// it carries one (else `status` unchanged: no request, no field).
pub fn with_handled_request(status: Option<Value>, parent: &Value) -> Option<Value> {
    let Some(request) = reconcile_request(parent) else {
        return status;
    };
    let mut s = match status {
        Some(Value::Object(m)) => m,
        _ => Map::new(),
    };
    s.insert(LAST_HANDLED_RECONCILE_AT.into(), json!(request));
    Some(Value::Object(s))
}

/// Sets [`LAST_HANDLED_RECONCILE_AT`] to `handled` — the request of the version the sync read,
/// not of `live`, which may carry a newer request that sync never saw — in the status of `live`
/// (a condition write); true when that changed it.
pub fn mark_handled_request(live: &mut Value, handled: Option<&str>) -> bool {
    let Some(request) = handled else {
        return false;
    };
    match status_of(live) {
        Some(s) if s.get(LAST_HANDLED_RECONCILE_AT).and_then(Value::as_str) != Some(request) => {
            s.insert(LAST_HANDLED_RECONCILE_AT.into(), json!(request));
            true
        }
        _ => false,
    }
}

/// The `status` object of `obj`, created (or replacing a `status` that is not an object); None
/// when `obj` is not an object.
fn status_of(obj: &mut Value) -> Option<&mut Map<String, Value>> {
    let status = obj
        .as_object_mut()?
        .entry("status")
        .or_insert_with(|| Value::Object(Map::new()));
    if !status.is_object() {
        *status = Value::Object(Map::new());
    }
    status.as_object_mut()
}

/// The condition type kmeta sets on a parent whose sync failed.
pub const SYNCED_CONDITION: &str = "Synced";

/// The condition type kmeta sets on a parent it leaves alone because of `kmeta.dev/paused`.
pub const PAUSED_CONDITION: &str = "Paused";

/// A condition kmeta sets on a parent's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Condition<'a> {
    /// `type`.
    pub type_: &'a str,
    /// `status`: `True` or `False`.
    pub status: &'a str,
    /// `reason`, UpperCamelCase.
    pub reason: &'a str,
    /// `message`, for people.
    pub message: &'a str,
}

impl<'a> Condition<'a> {
    /// `Synced=False` (reason `SyncError`): the sync failed with `message`.
    pub fn sync_failure(message: &'a str) -> Self {
        Condition {
            type_: SYNCED_CONDITION,
            status: "False",
            reason: "SyncError",
            message,
        }
    }

    /// `Paused=True` (reason `Paused`): kmeta leaves the parent alone, `message` says why.
    pub fn paused(message: &'a str) -> Self {
        Condition {
            type_: PAUSED_CONDITION,
            status: "True",
            reason: "Paused",
            message,
        }
    }
}

/// The parent with `condition` in its status, or None when the live status already says exactly
/// that. Other conditions and status fields are kept; `lastTransitionTime` (`now`, RFC 3339)
/// changes only when the condition's status flips.
pub fn with_condition(live: &Value, condition: Condition<'_>, now: &str) -> Option<Value> {
    let mut next = live.clone();
    let status = status_of(&mut next)?;
    let conditions = status
        .entry("conditions")
        .or_insert_with(|| Value::Array(Vec::new()));
    if !conditions.is_array() {
        *conditions = Value::Array(Vec::new());
    }
    let conditions = conditions.as_array_mut()?;
    let existing = conditions
        .iter_mut()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(condition.type_));
    let want = |transition: &str| {
        json!({"type": condition.type_, "status": condition.status, "reason": condition.reason,
               "message": condition.message, "lastTransitionTime": transition})
    };
    match existing {
        Some(c) => {
            let same = |k: &str, v: &str| c.get(k).and_then(Value::as_str) == Some(v);
            if same("status", condition.status)
                && same("reason", condition.reason)
                && same("message", condition.message)
            {
                return None;
            }
            let transition = if same("status", condition.status) {
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
    use crate::reconcile::decide::fixtures::parent;
    use serde_json::json;

    #[test]
    fn sync_failure_condition_is_written_once_and_keeps_other_status() {
        let live = json!({"metadata": {"name": "p"},
            "status": {"ready": 2, "conditions": [{"type": "Ready", "status": "True"}]}});
        let next = with_condition(
            &live,
            Condition::sync_failure("hook timed out"),
            "2026-01-01T00:00:00Z",
        )
        .unwrap();
        assert_eq!(next["status"]["ready"], 2);
        let conds = next["status"]["conditions"].as_array().unwrap();
        assert_eq!(conds.len(), 2);
        assert_eq!(conds[1]["type"], "Synced");
        assert_eq!(conds[1]["status"], "False");
        assert_eq!(conds[1]["message"], "hook timed out");
        // same failure again: nothing to write
        assert!(
            with_condition(
                &next,
                Condition::sync_failure("hook timed out"),
                "2026-01-01T00:01:00Z"
            )
            .is_none()
        );
        // a different message keeps the transition time
        let again = with_condition(
            &next,
            Condition::sync_failure("http status 500"),
            "2026-01-01T00:02:00Z",
        )
        .unwrap();
        assert_eq!(
            again["status"]["conditions"][1]["lastTransitionTime"],
            "2026-01-01T00:00:00Z"
        );
        // no status at all, or a non-object status
        let bare = with_condition(
            &json!({"status": "weird"}),
            Condition::sync_failure("x"),
            "t",
        )
        .unwrap();
        assert_eq!(bare["status"]["conditions"][0]["reason"], "SyncError");
    }

    #[test]
    fn a_paused_condition_is_set_once_beside_the_others() {
        let live = json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}});
        let why = "kmeta.dev/paused is \"true\" on the parent";
        let next = with_condition(&live, Condition::paused(why), "t0").unwrap();
        let conds = next["status"]["conditions"].as_array().unwrap();
        assert_eq!(conds.len(), 2);
        assert_eq!(conds[1]["type"], "Paused");
        assert_eq!(conds[1]["status"], "True");
        assert_eq!(conds[1]["reason"], "Paused");
        assert!(with_condition(&next, Condition::paused(why), "t1").is_none());
    }

    #[test]
    fn a_reconcile_request_is_reported_as_handled() {
        let mut p = parent();
        assert_eq!(with_handled_request(None, &p), None, "no request, no field");
        p["metadata"]["annotations"] = json!({RECONCILE_REQUESTED_AT: "2026-11-27T08:00:00Z"});
        assert_eq!(
            with_handled_request(Some(json!({"ready": 1})), &p),
            Some(json!({"ready": 1, "lastHandledReconcileAt": "2026-11-27T08:00:00Z"}))
        );
        let mut live = p.clone();
        let read = reconcile_request(&p);
        assert!(mark_handled_request(&mut live, read));
        assert_eq!(
            live["status"]["lastHandledReconcileAt"],
            "2026-11-27T08:00:00Z"
        );
        assert!(!mark_handled_request(&mut live, read), "already handled");
        // a newer request on live, which the failed sync did not read, is not reported handled
        let mut newer = p.clone();
        newer["metadata"]["annotations"][RECONCILE_REQUESTED_AT] = json!("later");
        assert!(mark_handled_request(&mut newer, read));
        assert_eq!(
            newer["status"]["lastHandledReconcileAt"],
            "2026-11-27T08:00:00Z"
        );
        assert!(!mark_handled_request(
            &mut live,
            reconcile_request(&json!({}))
        ));
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
