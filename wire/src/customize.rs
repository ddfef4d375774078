//! The customize hook (CompositeController and DecoratorController alike).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::fields::{WireFields, null_as_default, object};

/// A customize hook request: `{controller, parent}`. A DecoratorController's target object is
/// sent as `parent` too.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CustomizeRequest {
    /// The CompositeController or DecoratorController object.
    #[serde(default)]
    pub controller: Value,
    /// The parent (or decorated) object.
    pub parent: Value,
}

impl WireFields for CustomizeRequest {
    const FIELDS: &'static [&'static str] = &["controller", "parent"];
}

/// The request as JSON, the same as its serde encoding, built by moving each field.
impl From<CustomizeRequest> for Value {
    fn from(r: CustomizeRequest) -> Self {
        object([("controller", r.controller), ("parent", r.parent)])
    }
}

/// A customize hook response: which related objects the sync hook sees.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CustomizeResponse {
    /// Selection rules; `null` or absent: none.
    #[serde(default, deserialize_with = "null_as_default")]
    pub related_resources: Vec<RelatedResourceRule>,
}

impl WireFields for CustomizeResponse {
    const FIELDS: &'static [&'static str] = &["relatedResources"];
}

/// One related-resource rule, Metacontroller's `RelatedResourceRule`: objects of `resource` in
/// `apiVersion`, chosen by `labelSelector` (and, for namespaced kinds, `namespaceSelector`) or by
/// `names`, in `namespace`.
///
/// For a namespaced resource, an empty `namespace` means the parent's namespace for a namespaced
/// parent whose customize hook is v1, and every namespace otherwise (cluster-scoped resources are
/// read from the whole cluster). `names` cannot be combined with either selector, nor `namespace`
/// with `namespaceSelector`; a namespaced parent needs hook v2 for `namespaceSelector`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RelatedResourceRule {
    /// `v1`, `apps/v1`.
    pub api_version: String,
    /// Plural resource name (`configmaps`).
    pub resource: String,
    /// A Kubernetes label selector (`{"matchLabels": {..}, "matchExpressions": [..]}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<Value>,
    /// A label selector over Namespace objects: related objects in matching namespaces.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<Value>,
    /// The one namespace to look in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Exact object names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub names: Option<Vec<String>>,
}

impl WireFields for RelatedResourceRule {
    const FIELDS: &'static [&'static str] = &[
        "apiVersion",
        "resource",
        "labelSelector",
        "namespaceSelector",
        "namespace",
        "names",
    ];
}

impl RelatedResourceRule {
    /// A rule for `resource` in `api_version`.
    pub fn new(api_version: &str, resource: &str) -> Self {
        Self {
            api_version: api_version.to_owned(),
            resource: resource.to_owned(),
            ..Self::default()
        }
    }

    /// Objects carrying all these labels (`labelSelector.matchLabels`).
    #[must_use]
    pub fn match_labels(mut self, labels: Value) -> Self {
        self.label_selector = Some(serde_json::json!({ "matchLabels": labels }));
        self
    }

    /// Objects matching this label selector.
    #[must_use]
    pub fn label_selector(mut self, selector: Value) -> Self {
        self.label_selector = Some(selector);
        self
    }

    /// Objects in namespaces matching this label selector.
    #[must_use]
    pub fn namespace_selector(mut self, selector: Value) -> Self {
        self.namespace_selector = Some(selector);
        self
    }

    /// Objects in this namespace.
    #[must_use]
    pub fn namespace(mut self, ns: &str) -> Self {
        self.namespace = Some(ns.to_owned());
        self
    }

    /// Objects with these names.
    #[must_use]
    pub fn names<I: IntoIterator<Item = S>, S: Into<String>>(mut self, names: I) -> Self {
        self.names = Some(names.into_iter().map(Into::into).collect());
        self
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn rule_builders_encode_every_field_in_order() {
        let r = RelatedResourceRule::new("v1", "configmaps")
            .match_labels(json!({"a": "b"}))
            .namespace_selector(json!({"matchLabels": {"team": "t"}}))
            .namespace("ns")
            .names(["x"]);
        let v = serde_json::to_value(&r).unwrap();
        let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(keys, RelatedResourceRule::FIELDS);
        assert_eq!(
            serde_json::to_string(&RelatedResourceRule::new("v1", "secrets")).unwrap(),
            r#"{"apiVersion":"v1","resource":"secrets"}"#
        );
        let r = RelatedResourceRule::new("v1", "pods").label_selector(json!({}));
        assert_eq!(r.label_selector, Some(json!({})));
    }

    #[test]
    fn customize_request_and_response() {
        let v = Value::from(CustomizeRequest {
            controller: json!({"kind": "CompositeController"}),
            parent: json!({"kind": "P"}),
        });
        let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(keys, CustomizeRequest::FIELDS);
        let r: CustomizeResponse = serde_json::from_str(r#"{"relatedResources":null}"#).unwrap();
        assert!(r.related_resources.is_empty());
        assert!(serde_json::from_str::<RelatedResourceRule>(r#"{"resource":"x"}"#).is_err());
    }
}
