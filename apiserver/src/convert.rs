//! Conversion between resources that share one storage.
//!
//! kube-apiserver stores `events.k8s.io/v1` Events in the same storage as core `v1` Events (the
//! storage version is core `v1`): an Event written through either API is read through both, with
//! the same name, uid and resourceVersion. The two versions name some fields differently; this
//! module converts between them and maps the `events.k8s.io` field-selector labels to the core
//! fields they select.

use serde_json::{Map, Value};

/// `events.k8s.io/v1` field name → core `v1` field name, for the fields that differ. Every
/// other field (`metadata`, `action`, `reason`, `type`, `eventTime`, `series`, `related`,
/// `reportingInstance`) has the same name in both.
const EVENT_FIELDS: &[(&str, &str)] = &[
    ("regarding", "involvedObject"),
    ("note", "message"),
    ("reportingController", "reportingComponent"),
    ("deprecatedSource", "source"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
    ("deprecatedCount", "count"),
];

/// `events.k8s.io/v1` field-selector label → the core Event field it selects (the label
/// conversions kube-apiserver registers for events.k8s.io/v1).
const EVENT_FIELD_LABELS: &[(&str, &str)] = &[
    ("regarding.kind", "involvedObject.kind"),
    ("regarding.namespace", "involvedObject.namespace"),
    ("regarding.name", "involvedObject.name"),
    ("regarding.uid", "involvedObject.uid"),
    ("regarding.apiVersion", "involvedObject.apiVersion"),
    (
        "regarding.resourceVersion",
        "involvedObject.resourceVersion",
    ),
    ("regarding.fieldPath", "involvedObject.fieldPath"),
    ("reportingController", "reportingComponent"),
];

const EVENTS_V1: &str = "events.k8s.io/v1";

/// Whether `(group, plural)` is stored in another resource's storage, and which: the storage
/// key (`group/plural`) to use instead of its own.
pub(crate) fn shared_storage(group: &str, plural: &str) -> Option<&'static str> {
    match (group, plural) {
        ("events.k8s.io", "events") => Some("/events"),
        _ => None,
    }
}

/// The field an object of `(group, plural)` is selected by for the field-selector label `label`,
/// in the stored form. `None`: the label is the field path itself.
pub(crate) fn stored_field(group: &str, plural: &str, label: &str) -> Option<&'static str> {
    match (group, plural) {
        ("events.k8s.io", "events") => EVENT_FIELD_LABELS
            .iter()
            .find(|(l, _)| *l == label)
            .map(|(_, f)| *f),
        _ => None,
    }
}

/// Converts a request body of `(group, plural)` to the form it is stored in. Objects of
/// resources with their own storage are returned unchanged.
pub(crate) fn to_storage(group: &str, plural: &str, obj: Value) -> Value {
    match (group, plural) {
        ("events.k8s.io", "events") => rename(obj, "v1", |k| {
            EVENT_FIELDS.iter().find(|(e, _)| *e == k).map(|(_, c)| *c)
        }),
        _ => obj,
    }
}

/// Converts a stored object to `api_version`, when the stored object is of a kind served
/// under another group (core Events, the only stored form, read as `events.k8s.io/v1`).
/// `None`: no conversion applies (the caller only rewrites `apiVersion`).
pub(crate) fn present(obj: &Value, api_version: &str) -> Option<Value> {
    let core_event = obj.get("kind").and_then(Value::as_str) == Some("Event")
        && obj.get("apiVersion").and_then(Value::as_str) == Some("v1");
    (core_event && api_version == EVENTS_V1).then(|| {
        rename(obj.clone(), EVENTS_V1, |k| {
            EVENT_FIELDS.iter().find(|(_, c)| *c == k).map(|(e, _)| *e)
        })
    })
}

/// Renames the top-level fields of `obj` by `map` and sets `apiVersion`. A renamed field
/// replaces a field that already had the new name (the request named both spellings; the one
/// of the request's version wins).
fn rename(obj: Value, api_version: &str, map: impl Fn(&str) -> Option<&'static str>) -> Value {
    let Value::Object(fields) = obj else {
        return obj;
    };
    let mut kept = Map::with_capacity(fields.len());
    let mut renamed = Vec::new();
    for (k, v) in fields {
        match map(&k) {
            Some(to) => renamed.push((to, v)),
            None => {
                kept.insert(k, v);
            }
        }
    }
    for (to, v) in renamed {
        kept.insert(to.to_owned(), v);
    }
    kept.insert(
        "apiVersion".to_owned(),
        Value::String(api_version.to_owned()),
    );
    Value::Object(kept)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn events_v1() -> Value {
        json!({
            "apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": {"name": "e1", "namespace": "ns"},
            "eventTime": "2026-11-23T10:00:00.000000Z",
            "reportingController": "kmeta", "reportingInstance": "kmeta-0",
            "action": "Sync", "reason": "SyncError", "type": "Warning", "note": "hook failed",
            "regarding": {"kind": "Widget", "name": "w", "namespace": "ns", "uid": "u1"},
            "related": {"kind": "ConfigMap", "name": "c"},
            "series": {"count": 2, "lastObservedTime": "2026-11-23T10:05:00.000000Z"},
            "deprecatedSource": {"component": "kmeta"},
            "deprecatedFirstTimestamp": "2026-11-23T10:00:00Z",
            "deprecatedLastTimestamp": "2026-11-23T10:05:00Z",
            "deprecatedCount": 3,
        })
    }

    #[test]
    fn events_v1_is_stored_as_core_and_reads_back_unchanged() {
        let stored = to_storage("events.k8s.io", "events", events_v1());
        assert_eq!(stored["apiVersion"], "v1");
        assert_eq!(stored["involvedObject"]["name"], "w");
        assert_eq!(stored["message"], "hook failed");
        assert_eq!(stored["reportingComponent"], "kmeta");
        assert_eq!(stored["source"]["component"], "kmeta");
        assert_eq!(stored["firstTimestamp"], "2026-11-23T10:00:00Z");
        assert_eq!(stored["lastTimestamp"], "2026-11-23T10:05:00Z");
        assert_eq!(stored["count"], 3);
        assert_eq!(stored["series"]["count"], 2);
        assert_eq!(stored["reportingInstance"], "kmeta-0");
        for gone in [
            "regarding",
            "note",
            "reportingController",
            "deprecatedCount",
        ] {
            assert!(stored.get(gone).is_none(), "{gone} left in the stored form");
        }
        let back = present(&stored, "events.k8s.io/v1").unwrap();
        assert_eq!(back, events_v1());
        assert!(
            present(&stored, "v1").is_none(),
            "stored form is already core v1"
        );
    }

    #[test]
    fn core_events_read_through_events_v1() {
        let core = json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "e"},
            "involvedObject": {"kind": "Pod", "name": "p"}, "message": "m", "reason": "R"});
        let v = present(&core, "events.k8s.io/v1").unwrap();
        assert_eq!(
            v,
            json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "e"},
                "regarding": {"kind": "Pod", "name": "p"}, "note": "m", "reason": "R"})
        );
    }

    #[test]
    fn other_kinds_and_resources_are_untouched() {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "message": "x"});
        assert!(present(&cm, "events.k8s.io/v1").is_none());
        assert_eq!(to_storage("", "configmaps", cm.clone()), cm);
        let crd_event = json!({"apiVersion": "example.com/v1", "kind": "Event"});
        assert!(present(&crd_event, "example.com/v2").is_none());
        assert_eq!(shared_storage("", "events"), None);
        assert_eq!(shared_storage("events.k8s.io", "events"), Some("/events"));
    }

    #[test]
    fn field_labels() {
        assert_eq!(
            stored_field("events.k8s.io", "events", "regarding.name"),
            Some("involvedObject.name")
        );
        assert_eq!(
            stored_field("events.k8s.io", "events", "reportingController"),
            Some("reportingComponent")
        );
        assert_eq!(stored_field("events.k8s.io", "events", "reason"), None);
        assert_eq!(stored_field("", "events", "involvedObject.name"), None);
    }
}
