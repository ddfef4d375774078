//! Events a hook asked kmeta to publish (`events` in a sync or finalize answer, a kmeta
//! extension): which are published, which are reported as invalid, how many are dropped.

use serde_json::Value;

use kmeta_wire::{HookEvent, HookEventType};

/// Events of one answer published at most: 10 (kmeta's; a hook cannot flood the parent's
/// Events, which the spam filter limits per reason as well).
pub const HOOK_EVENTS_PER_SYNC: usize = 10;

/// Longest `reason`: 128 characters (the Events API's limit on `reason` and `action`).
pub const HOOK_EVENT_REASON_MAX: usize = 128;

/// Invalid events described at most in the one `HookEventInvalid` report.
const PROBLEMS_NAMED: usize = 3;

/// What to do with an answer's events.
#[derive(Debug, Default, PartialEq)]
pub struct HookEvents {
    /// Valid events, in the answer's order, at most [`HOOK_EVENTS_PER_SYNC`].
    pub publish: Vec<HookEvent>,
    /// What is wrong with the first invalid ones (`event 2: type must be …`).
    pub problems: Vec<String>,
    /// Invalid events in all.
    pub invalid: usize,
    /// Valid events beyond [`HOOK_EVENTS_PER_SYNC`], not published.
    pub dropped: usize,
}

impl HookEvents {
    /// The `HookEventInvalid` note, when something was invalid or dropped.
    pub fn report(&self) -> Option<String> {
        let mut parts = Vec::new();
        if self.invalid > 0 {
            let more = self.invalid.saturating_sub(self.problems.len());
            let mut s = format!(
                "{} invalid hook event(s) ignored: {}",
                self.invalid,
                self.problems.join("; ")
            );
            if more > 0 {
                s.push_str(&format!("; and {more} more"));
            }
            parts.push(s);
        }
        if self.dropped > 0 {
            parts.push(format!(
                "{} hook event(s) beyond the first {HOOK_EVENTS_PER_SYNC} of one answer ignored",
                self.dropped
            ));
        }
        (!parts.is_empty()).then(|| parts.join("; "))
    }
}

/// Sorts an answer's `events` into published, invalid and dropped.
pub fn hook_events(raw: &[Value]) -> HookEvents {
    let mut out = HookEvents::default();
    for (index, value) in raw.iter().enumerate() {
        match hook_event(value) {
            Ok(e) if out.publish.len() < HOOK_EVENTS_PER_SYNC => out.publish.push(e),
            Ok(_) => out.dropped += 1,
            Err(why) => {
                out.invalid += 1;
                if out.problems.len() < PROBLEMS_NAMED {
                    out.problems.push(format!("event {index}: {why}"));
                }
            }
        }
    }
    out
}

/// Why an event of a hook's answer is not published.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidHookEvent {
    /// Not a JSON object.
    #[error("must be an object with type, reason and message")]
    NotAnObject,
    /// `type` is missing or neither `Normal` nor `Warning`.
    #[error("type must be Normal or Warning, got {}", given(.0.as_deref()))]
    Type(Option<String>),
    /// `reason` is not UpperCamelCase letters and digits of the allowed length.
    #[error(
        "reason must be UpperCamelCase letters and digits, at most {HOOK_EVENT_REASON_MAX} characters, got {0:?}"
    )]
    Reason(String),
    /// `message` is missing or not a string.
    #[error("message must be a string")]
    Message,
}

/// A field's value as a person reads it: quoted, or `none` when absent.
fn given(value: Option<&str>) -> String {
    value.map_or_else(|| "none".to_owned(), |v| format!("{v:?}"))
}

/// One event, checked: an object with `type` Normal or Warning, an UpperCamelCase `reason` of
/// letters and digits (at most [`HOOK_EVENT_REASON_MAX`]), and a string `message`.
fn hook_event(value: &Value) -> Result<HookEvent, InvalidHookEvent> {
    let Some(obj) = value.as_object() else {
        return Err(InvalidHookEvent::NotAnObject);
    };
    let field = |k: &str| obj.get(k).and_then(Value::as_str);
    let type_ = match field("type") {
        Some("Normal") => HookEventType::Normal,
        Some("Warning") => HookEventType::Warning,
        other => return Err(InvalidHookEvent::Type(other.map(str::to_owned))),
    };
    let reason = field("reason").unwrap_or_default();
    let camel = reason.starts_with(|c: char| c.is_ascii_uppercase())
        && reason.chars().all(|c| c.is_ascii_alphanumeric());
    if !camel || reason.len() > HOOK_EVENT_REASON_MAX {
        return Err(InvalidHookEvent::Reason(reason.to_owned()));
    }
    let Some(message) = field("message") else {
        return Err(InvalidHookEvent::Message);
    };
    Ok(HookEvent {
        type_,
        reason: reason.to_owned(),
        message: message.to_owned(),
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn valid_events_are_published_in_order() {
        let raw = [
            json!({"type": "Normal", "reason": "BackupDone", "message": "3 GiB"}),
            json!({"type": "Warning", "reason": "DiskLow", "message": ""}),
        ];
        let e = hook_events(&raw);
        assert_eq!(
            e.publish,
            [
                HookEvent::normal("BackupDone", "3 GiB"),
                HookEvent::warning("DiskLow", "")
            ]
        );
        assert_eq!(e.report(), None);
    }

    #[test]
    fn invalid_events_are_reported_not_fatal() {
        let raw = [
            json!("oops"),
            json!({"type": "Error", "reason": "X", "message": "m"}),
            json!({"type": "Normal", "reason": "not camel", "message": "m"}),
            json!({"type": "Normal", "reason": "Fine", "message": "m"}),
            json!({"type": "Normal", "reason": "NoMessage"}),
            json!({"type": "Normal", "reason": "A".repeat(129), "message": "m"}),
        ];
        let e = hook_events(&raw);
        assert_eq!(e.publish, [HookEvent::normal("Fine", "m")]);
        assert_eq!(e.invalid, 5);
        assert_eq!(e.problems.len(), 3);
        let report = e.report().unwrap();
        assert!(
            report.starts_with("5 invalid hook event(s) ignored: event 0: must be an object"),
            "{report}"
        );
        assert!(
            report.contains("event 1: type must be Normal or Warning, got \"Error\""),
            "{report}"
        );
        assert!(report.ends_with("; and 2 more"), "{report}");
    }

    #[test]
    fn an_answer_publishes_at_most_ten() {
        let raw: Vec<Value> = (0..13)
            .map(|i| json!({"type": "Normal", "reason": format!("Step{i}"), "message": "m"}))
            .collect();
        let e = hook_events(&raw);
        assert_eq!(e.publish.len(), HOOK_EVENTS_PER_SYNC);
        assert_eq!(e.publish[9].reason, "Step9");
        assert_eq!(e.dropped, 3);
        assert_eq!(
            e.report().unwrap(),
            "3 hook event(s) beyond the first 10 of one answer ignored"
        );
    }
}
