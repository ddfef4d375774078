//! DecoratorController sync and finalize hooks.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::fields::{WireFields, is_false, is_zero, meta_str, null_as_default, object};
use crate::object_map::ObjectMap;

/// A DecoratorController sync (or finalize) hook request: Metacontroller's
/// `{controller, object, attachments, related, finalizing}`, every field always sent.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DecoratorSyncRequest {
    /// The DecoratorController object.
    #[serde(default)]
    pub controller: Value,
    /// The decorated object (the decorator's parent).
    pub object: Value,
    /// Observed attachments, one group per declared attachment resource.
    #[serde(default, deserialize_with = "null_as_default")]
    pub attachments: ObjectMap,
    /// Related objects selected by the customize hook's rules.
    #[serde(default, deserialize_with = "null_as_default")]
    pub related: ObjectMap,
    /// True when the finalize hook is called: the object is being deleted or stopped matching
    /// the decorator's selectors.
    #[serde(default, deserialize_with = "null_as_default")]
    pub finalizing: bool,
}

/// A decorator finalize hook request: a sync request with `finalizing: true`.
pub type DecoratorFinalizeRequest = DecoratorSyncRequest;

impl WireFields for DecoratorSyncRequest {
    const FIELDS: &'static [&'static str] = &[
        "controller",
        "object",
        "attachments",
        "related",
        "finalizing",
    ];
}

impl DecoratorSyncRequest {
    /// The decorated object's `metadata.name` ("" when absent).
    pub fn object_name(&self) -> &str {
        meta_str(&self.object, "name").unwrap_or_default()
    }

    /// The decorated object's `metadata.namespace` (None when cluster-scoped).
    pub fn object_namespace(&self) -> Option<&str> {
        meta_str(&self.object, "namespace").filter(|s| !s.is_empty())
    }
}

/// The request as JSON, the same as its serde encoding, built by moving each field.
impl From<DecoratorSyncRequest> for Value {
    fn from(r: DecoratorSyncRequest) -> Self {
        object([
            ("controller", r.controller),
            ("object", r.object),
            ("attachments", r.attachments.into()),
            ("related", r.related.into()),
            ("finalizing", Value::Bool(r.finalizing)),
        ])
    }
}

/// A DecoratorController sync (or finalize) hook response: Metacontroller's
/// `{labels, annotations, status, attachments, resyncAfterSeconds, finalized}`.
///
/// Encoding leaves out empty `labels`/`annotations`, an absent `status`, a zero
/// `resyncAfterSeconds` and a false `finalized`; `attachments` is always sent.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DecoratorSyncResponse {
    /// Labels to set on the object; a `null` value (None) removes the label.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub labels: BTreeMap<String, Option<String>>,
    /// Annotations to set on the object; a `null` value (None) removes the annotation.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub annotations: BTreeMap<String, Option<String>>,
    /// Replaces the object's `.status`; None (`null` or absent) leaves it unchanged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<Value>,
    /// Every desired attachment; an observed attachment left out is deleted.
    #[serde(default, deserialize_with = "null_as_default")]
    pub attachments: Vec<Value>,
    /// Sync the object again after this many seconds, when positive.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "is_zero"
    )]
    pub resync_after_seconds: f64,
    /// Finalize hook: cleanup is complete, the finalizer may be removed.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "is_false"
    )]
    pub finalized: bool,
    /// Events to publish on the object (a kmeta extension; Metacontroller ignores it): each a
    /// [`HookEvent`](crate::HookEvent) as JSON. Kept as values so that one malformed event is
    /// reported alone instead of failing the response.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub events: Vec<Value>,
}

/// A decorator finalize hook response.
pub type DecoratorFinalizeResponse = DecoratorSyncResponse;

impl WireFields for DecoratorSyncResponse {
    const FIELDS: &'static [&'static str] = &[
        "labels",
        "annotations",
        "status",
        "attachments",
        "resyncAfterSeconds",
        "finalized",
        "events",
    ];
}

impl DecoratorSyncResponse {
    /// An empty response: no attachments, nothing changed on the object.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets a label on the object.
    #[must_use]
    pub fn label(mut self, key: &str, value: &str) -> Self {
        self.labels.insert(key.to_owned(), Some(value.to_owned()));
        self
    }

    /// Removes a label from the object.
    #[must_use]
    pub fn remove_label(mut self, key: &str) -> Self {
        self.labels.insert(key.to_owned(), None);
        self
    }

    /// Sets an annotation on the object.
    #[must_use]
    pub fn annotation(mut self, key: &str, value: &str) -> Self {
        self.annotations
            .insert(key.to_owned(), Some(value.to_owned()));
        self
    }

    /// Asks kmeta to publish an Event on the object.
    #[must_use]
    pub fn event(mut self, event: crate::HookEvent) -> Self {
        self.events.push(event.to_value());
        self
    }

    /// Removes an annotation from the object.
    #[must_use]
    pub fn remove_annotation(mut self, key: &str) -> Self {
        self.annotations.insert(key.to_owned(), None);
        self
    }

    /// Sets the object's status.
    #[must_use]
    pub fn status(mut self, status: Value) -> Self {
        self.status = Some(status);
        self
    }

    /// Adds a desired attachment.
    #[must_use]
    pub fn attachment(mut self, attachment: Value) -> Self {
        self.attachments.push(attachment);
        self
    }

    /// Asks for a resync after `seconds`.
    #[must_use]
    pub fn resync_after(mut self, seconds: f64) -> Self {
        self.resync_after_seconds = seconds;
        self
    }

    /// Sets `finalized` (finalize hook).
    #[must_use]
    pub fn finalized(mut self, done: bool) -> Self {
        self.finalized = done;
        self
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn request_encodes_every_field_in_order() {
        let req = DecoratorSyncRequest {
            object: json!({"metadata": {"name": "o", "namespace": "n"}}),
            ..DecoratorSyncRequest::default()
        };
        assert_eq!(req.object_name(), "o");
        assert_eq!(req.object_namespace(), Some("n"));
        let v = Value::from(req);
        let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(keys, DecoratorSyncRequest::FIELDS);
    }

    #[test]
    fn response_builders_and_null_values() {
        let r = DecoratorSyncResponse::new()
            .label("a", "1")
            .remove_label("b")
            .annotation("c", "2")
            .remove_annotation("d")
            .status(json!({"ok": true}))
            .attachment(json!({"kind": "ConfigMap"}))
            .resync_after(3.0)
            .finalized(true)
            .event(crate::HookEvent::warning("Odd", "an odd target"));
        let v = serde_json::to_value(&r).unwrap();
        let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(keys, DecoratorSyncResponse::FIELDS);
        assert_eq!(v["labels"], json!({"a": "1", "b": null}));
        assert_eq!(
            serde_json::from_value::<DecoratorSyncResponse>(v).unwrap(),
            r
        );
        let empty: DecoratorSyncResponse = serde_json::from_str(
            r#"{"labels":null,"annotations":null,"status":null,"attachments":null}"#,
        )
        .unwrap();
        assert_eq!(empty, DecoratorSyncResponse::default());
        assert_eq!(
            serde_json::to_string(&empty).unwrap(),
            r#"{"attachments":[]}"#
        );
    }
}
