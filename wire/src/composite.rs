//! CompositeController sync and finalize hooks.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::fields::{WireFields, is_false, is_zero, meta_str, null_as_default, object};
use crate::object_map::ObjectMap;

/// A CompositeController sync (or finalize) hook request: Metacontroller's
/// `{controller, parent, children, related, finalizing}`, every field always sent.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SyncRequest {
    /// The CompositeController object.
    #[serde(default)]
    pub controller: Value,
    /// The parent object.
    pub parent: Value,
    /// Observed children, one group per declared child resource.
    #[serde(default, deserialize_with = "null_as_default")]
    pub children: ObjectMap,
    /// Related objects selected by the customize hook's rules.
    #[serde(default, deserialize_with = "null_as_default")]
    pub related: ObjectMap,
    /// True when the parent is being deleted and the finalize hook is called.
    #[serde(default, deserialize_with = "null_as_default")]
    pub finalizing: bool,
}

/// A finalize hook request: the same shape as a sync request, with `finalizing: true`.
pub type FinalizeRequest = SyncRequest;

impl WireFields for SyncRequest {
    const FIELDS: &'static [&'static str] =
        &["controller", "parent", "children", "related", "finalizing"];
}

impl SyncRequest {
    /// The parent's `metadata.name` ("" when absent).
    pub fn parent_name(&self) -> &str {
        meta_str(&self.parent, "name").unwrap_or_default()
    }

    /// The parent's `metadata.namespace` (None for a cluster-scoped parent).
    pub fn parent_namespace(&self) -> Option<&str> {
        meta_str(&self.parent, "namespace").filter(|s| !s.is_empty())
    }

    /// A field of the parent by JSON pointer (`/spec/image`).
    pub fn parent_field(&self, pointer: &str) -> Option<&Value> {
        self.parent.pointer(pointer)
    }

    /// The parent as a Rust type: a `#[derive(CustomResource)]` type, a k8s-openapi type, or
    /// any serde type of the fields you read. The error names the field that does not fit.
    ///
    /// ```
    /// use kmeta_wire::SyncRequest;
    /// use serde_json::json;
    ///
    /// #[derive(serde::Deserialize)]
    /// struct App { spec: AppSpec }
    /// #[derive(serde::Deserialize)]
    /// struct AppSpec { image: String, replicas: Option<i32> }
    ///
    /// let req: SyncRequest = serde_json::from_value(json!({
    ///     "parent": {"metadata": {"name": "web"}, "spec": {"image": "web:1"}}
    /// }))?;
    /// let app: App = req.parent_as()?;
    /// assert_eq!((app.spec.image.as_str(), app.spec.replicas), ("web:1", None));
    /// # Ok::<(), serde_json::Error>(())
    /// ```
    pub fn parent_as<T: serde::de::DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        T::deserialize(&self.parent)
    }
}

/// The request as JSON, the same as its serde encoding, built by moving each field (no copy of
/// the parent or the children).
impl From<SyncRequest> for Value {
    fn from(r: SyncRequest) -> Self {
        object([
            ("controller", r.controller),
            ("parent", r.parent),
            ("children", r.children.into()),
            ("related", r.related.into()),
            ("finalizing", Value::Bool(r.finalizing)),
        ])
    }
}

/// A CompositeController sync (or finalize) hook response: Metacontroller's
/// `{status, children, resyncAfterSeconds, finalized}`.
///
/// Encoding leaves out an absent `status`, a zero `resyncAfterSeconds` and a false `finalized`
/// (each means the same as Metacontroller's zero value); `children` is always sent.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SyncResponse {
    /// Replaces the parent's `.status` (None, from `null` or an absent field: `{}` is written).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<Value>,
    /// Every desired child; an observed child left out is deleted. `null` or absent: none.
    #[serde(default, deserialize_with = "null_as_default")]
    pub children: Vec<Value>,
    /// Sync the parent again after this many seconds, when positive.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "is_zero"
    )]
    pub resync_after_seconds: f64,
    /// Finalize hook: teardown is complete, the finalizer may be removed.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "is_false"
    )]
    pub finalized: bool,
    /// Events to publish on the parent (a kmeta extension; Metacontroller ignores it): each a
    /// [`HookEvent`](crate::HookEvent) as JSON. Kept as values so that one malformed event is
    /// reported alone instead of failing the response.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub events: Vec<Value>,
}

/// A finalize hook response: a sync response whose `finalized` says whether teardown is done.
pub type FinalizeResponse = SyncResponse;

impl WireFields for SyncResponse {
    const FIELDS: &'static [&'static str] = &[
        "status",
        "children",
        "resyncAfterSeconds",
        "finalized",
        "events",
    ];
}

impl SyncResponse {
    /// An empty response: no children, no status.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a desired child.
    #[must_use]
    pub fn child(mut self, child: Value) -> Self {
        self.children.push(child);
        self
    }

    /// Sets the parent's status.
    #[must_use]
    pub fn status(mut self, status: Value) -> Self {
        self.status = Some(status);
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

    /// Asks kmeta to publish an Event on the parent.
    #[must_use]
    pub fn event(mut self, event: crate::HookEvent) -> Self {
        self.events.push(event.to_value());
        self
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn request_accessors() {
        let req: SyncRequest = serde_json::from_value(json!({
            "parent": {"metadata": {"name": "p", "namespace": "d"}, "spec": {"image": "x"}}
        }))
        .unwrap();
        assert_eq!(req.parent_name(), "p");
        assert_eq!(req.parent_namespace(), Some("d"));
        assert_eq!(req.parent_field("/spec/image"), Some(&json!("x")));
        assert!(req.children.is_empty() && req.related.is_empty() && !req.finalizing);
    }

    #[test]
    fn request_encodes_every_field_in_order() {
        let text = serde_json::to_string(&SyncRequest::default()).unwrap();
        assert_eq!(
            text,
            r#"{"controller":null,"parent":null,"children":{},"related":{},"finalizing":false}"#
        );
        let v = Value::from(SyncRequest::default());
        let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(keys, SyncRequest::FIELDS);
    }

    #[test]
    fn go_zero_values_decode() {
        let r: SyncResponse = serde_json::from_str(
            r#"{"status":null,"children":null,"resyncAfterSeconds":null,"finalized":null}"#,
        )
        .unwrap();
        assert_eq!(r, SyncResponse::default());
        let r: SyncResponse = serde_json::from_str(
            r#"{"status":null,"children":[],"resyncAfterSeconds":0,"finalized":false}"#,
        )
        .unwrap();
        assert_eq!(serde_json::to_string(&r).unwrap(), r#"{"children":[]}"#);
    }

    #[test]
    fn builders_and_field_list() {
        let r = SyncResponse::new()
            .status(json!({}))
            .child(json!({"kind": "Pod"}))
            .resync_after(1.5)
            .finalized(true)
            .event(crate::HookEvent::normal("Synced", "one child"));
        let v = serde_json::to_value(&r).unwrap();
        let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(keys, SyncResponse::FIELDS);
        assert_eq!(v["resyncAfterSeconds"], json!(1.5));
    }
}
