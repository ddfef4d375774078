//! The condition a CompositeController or DecoratorController carries while one of its
//! `fieldRules` is refused (docs/design/field-handoff.md).

use serde_json::{Value, json};

/// The condition type on a controller object: `False` while a field rule's path is refused.
pub const FIELD_RULES_CONDITION: &str = "FieldRulesAccepted";

/// The reason of a `FieldRulesAccepted=False` condition.
pub const FIELD_PATH_REFUSED: &str = "FieldPathRefused";

/// The `status.conditions` a controller object should carry after a build, given its `status`:
/// with `refused` (the message naming the path), a `FieldRulesAccepted=False` condition saying
/// it (its `lastTransitionTime` kept while it stays `False`); without, no such condition. `None`
/// when the status already says so: nothing to write (a controller that starts writes nothing).
pub fn field_rules_conditions(
    status: Option<&Value>,
    refused: Option<&str>,
    now: &str,
) -> Option<Value> {
    let existing: Vec<Value> = status
        .and_then(|s| s.get("conditions"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let ours = existing.iter().find(|c| c["type"] == FIELD_RULES_CONDITION);
    let mut out: Vec<Value> = existing
        .iter()
        .filter(|c| c["type"] != FIELD_RULES_CONDITION)
        .cloned()
        .collect();
    match (refused, ours) {
        (None, None) => return None,
        (None, Some(_)) => {}
        (Some(message), ours) => {
            if ours.is_some_and(|c| c["status"] == "False" && c["message"] == message) {
                return None;
            }
            let since = ours
                .filter(|c| c["status"] == "False")
                .and_then(|c| c["lastTransitionTime"].as_str())
                .unwrap_or(now);
            out.push(json!({"type": FIELD_RULES_CONDITION, "status": "False",
                "reason": FIELD_PATH_REFUSED, "message": message, "lastTransitionTime": since}));
        }
    }
    Some(Value::Array(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_while_refused_removed_once_accepted_written_only_on_change() {
        let refused = "fieldRules of apps/v1 deployments: field path `spec.replica`: …";
        let set = field_rules_conditions(None, Some(refused), "T1");
        let set = set.unwrap_or_default();
        assert_eq!(set[0]["type"], FIELD_RULES_CONDITION);
        assert_eq!(set[0]["status"], "False");
        assert_eq!(set[0]["message"], refused);
        let status = json!({"conditions": set});
        // the same refusal again: nothing to write
        assert_eq!(
            field_rules_conditions(Some(&status), Some(refused), "T2"),
            None
        );
        // another path refused: the message changes, the time stays
        let other = field_rules_conditions(Some(&status), Some("other"), "T2").unwrap_or_default();
        assert_eq!(other[0]["lastTransitionTime"], "T1");
        // accepted: the condition goes, other conditions stay
        let mixed = json!({"conditions": [{"type": "Other", "status": "True"}, set[0]]});
        assert_eq!(
            field_rules_conditions(Some(&mixed), None, "T3"),
            Some(json!([{"type": "Other", "status": "True"}]))
        );
        assert_eq!(field_rules_conditions(Some(&json!({})), None, "T3"), None);
    }
}
