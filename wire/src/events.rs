//! Events a hook asks kmeta to publish on the object it synced: `events` in a sync or finalize
//! response, a kmeta extension that Metacontroller ignores (a hook written for kmeta still runs
//! there, without its Events).
//!
//! The response carries them as plain JSON values, so that one malformed event is reported on its
//! own (kmeta publishes a `HookEventInvalid` Warning) instead of failing the whole response.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// An Event's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum HookEventType {
    /// Something expected happened.
    Normal,
    /// Something a person may need to act on.
    Warning,
}

/// One Event to publish: `{"type": "Normal"|"Warning", "reason": "UpperCamelCase", "message": …}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HookEvent {
    /// Normal or Warning.
    #[serde(rename = "type")]
    pub type_: HookEventType,
    /// Why, in UpperCamelCase (`BackupFailed`): at most 128 characters, letters and digits.
    pub reason: String,
    /// What happened, for people (kmeta cuts it to 1000 bytes).
    pub message: String,
}

impl HookEvent {
    /// A Normal event.
    pub fn normal(reason: impl Into<String>, message: impl Into<String>) -> Self {
        HookEvent {
            type_: HookEventType::Normal,
            reason: reason.into(),
            message: message.into(),
        }
    }

    /// A Warning event.
    pub fn warning(reason: impl Into<String>, message: impl Into<String>) -> Self {
        HookEvent {
            type_: HookEventType::Warning,
            reason: reason.into(),
            message: message.into(),
        }
    }

    /// As it travels in a response's `events`.
    pub fn to_value(&self) -> Value {
        serde_json::json!({
            "type": self.type_,
            "reason": self.reason,
            "message": self.message,
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn an_event_travels_as_type_reason_message() {
        let e = HookEvent::warning("BackupFailed", "disk full");
        let v = e.to_value();
        assert_eq!(
            v,
            serde_json::json!({"type": "Warning", "reason": "BackupFailed", "message": "disk full"})
        );
        assert_eq!(serde_json::from_value::<HookEvent>(v).unwrap(), e);
    }
}
