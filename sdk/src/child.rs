//! The hook wire types (Metacontroller's JSON, camelCase field names).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Observed objects of a request (`children` or `related`): keyed `<Kind>.<apiVersion>`
/// (`Pod.v1`, `Deployment.apps/v1`), then by object key — the name (hook v1, namespaced
/// parent) or `namespace/name` (hook v2, or a cluster-scoped parent's namespaced objects).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ObjectMap(pub BTreeMap<String, BTreeMap<String, Value>>);

/// The map key of an object type: `Pod.v1`, `Deployment.apps/v1`.
pub fn group_key(kind: &str, api_version: &str) -> String {
    format!("{kind}.{api_version}")
}

impl ObjectMap {
    /// Objects of `kind` in `api_version`, with their keys, in key order.
    pub fn of_kind<'a>(
        &'a self,
        kind: &str,
        api_version: &str,
    ) -> impl Iterator<Item = (&'a str, &'a Value)> + 'a {
        self.0
            .get(&group_key(kind, api_version))
            .into_iter()
            .flat_map(|m| m.iter().map(|(k, v)| (k.as_str(), v)))
    }

    /// The object `name` (in `namespace`, if given) of `kind`/`api_version`, whatever the hook
    /// version's key style (`name` or `namespace/name`).
    pub fn get(
        &self,
        kind: &str,
        api_version: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<&Value> {
        let group = self.0.get(&group_key(kind, api_version))?;
        if let Some(ns) = namespace.filter(|ns| !ns.is_empty())
            && let Some(o) = group.get(&format!("{ns}/{name}"))
        {
            return Some(o);
        }
        group.get(name).filter(|o| {
            namespace.is_none_or(|ns| ns.is_empty() || meta_str(o, "namespace") == Some(ns))
        })
    }

    /// Number of objects over all kinds.
    pub fn len(&self) -> usize {
        self.0.values().map(BTreeMap::len).sum()
    }

    /// True when there are no objects.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn meta_str<'a>(obj: &'a Value, field: &str) -> Option<&'a str> {
    obj.get("metadata")?.get(field)?.as_str()
}

/// A sync (or finalize) hook request. `finalizing` is true when the parent is being deleted
/// and the controller has a finalize hook.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SyncRequest {
    /// The CompositeController object.
    #[serde(default)]
    pub controller: Value,
    /// The parent object.
    pub parent: Value,
    /// Observed children.
    #[serde(default)]
    pub children: ObjectMap,
    /// Related objects selected by the customize hook.
    #[serde(default)]
    pub related: ObjectMap,
    /// The parent is being deleted (finalize hook).
    #[serde(default)]
    pub finalizing: bool,
}

/// A finalize hook request: the same shape as a sync request, with `finalizing: true`.
pub type FinalizeRequest = SyncRequest;

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
}

/// A sync (or finalize) hook response.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SyncResponse {
    /// Replaces the parent's `.status` (omitted: `{}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<Value>,
    /// Every desired child (a child left out is deleted).
    #[serde(default)]
    pub children: Vec<Value>,
    /// Resync the parent after this many seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resync_after_seconds: Option<f64>,
    /// Finalize hook: teardown is complete, the finalizer may be removed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finalized: Option<bool>,
}

/// A finalize hook response: a sync response whose `finalized` says whether teardown is done.
pub type FinalizeResponse = SyncResponse;

impl SyncResponse {
    /// An empty response: no children, no status.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a desired child.
    pub fn child(mut self, child: Value) -> Self {
        self.children.push(child);
        self
    }

    /// Sets the parent's status.
    pub fn status(mut self, status: Value) -> Self {
        self.status = Some(status);
        self
    }

    /// Asks for a resync after `seconds`.
    pub fn resync_after(mut self, seconds: f64) -> Self {
        self.resync_after_seconds = Some(seconds);
        self
    }

    /// Sets `finalized` (finalize hook).
    pub fn finalized(mut self, done: bool) -> Self {
        self.finalized = Some(done);
        self
    }
}

/// A customize hook request.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CustomizeRequest {
    /// The CompositeController object.
    #[serde(default)]
    pub controller: Value,
    /// The parent object.
    pub parent: Value,
}

/// A customize hook response: which related objects the sync hook should see.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CustomizeResponse {
    /// Selection rules.
    #[serde(default)]
    pub related_resources: Vec<RelatedResourceRule>,
}

/// One related-resource rule: objects of `resource` in `apiVersion`, selected by label
/// selector and/or names, in `namespace` (empty: the parent's namespace for a namespaced
/// parent, all namespaces for a cluster-scoped one).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RelatedResourceRule {
    /// `v1`, `apps/v1`.
    pub api_version: String,
    /// Plural resource name (`configmaps`).
    pub resource: String,
    /// A label selector (`{"matchLabels": {...}}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<Value>,
    /// Namespace to look in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Object names.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub names: Vec<String>,
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

    /// Objects carrying all these labels.
    pub fn match_labels(mut self, labels: Value) -> Self {
        self.label_selector = Some(serde_json::json!({ "matchLabels": labels }));
        self
    }

    /// Objects in this namespace.
    pub fn namespace(mut self, ns: &str) -> Self {
        self.namespace = Some(ns.to_owned());
        self
    }

    /// Objects with these names.
    pub fn names<I: IntoIterator<Item = S>, S: Into<String>>(mut self, names: I) -> Self {
        self.names = names.into_iter().map(Into::into).collect();
        self
    }
}

/// Starts building a desired child.
pub fn child(api_version: &str, kind: &str, name: &str) -> ChildBuilder {
    let mut meta = Map::new();
    meta.insert("name".into(), Value::String(name.to_owned()));
    let mut obj = Map::new();
    obj.insert("apiVersion".into(), Value::String(api_version.to_owned()));
    obj.insert("kind".into(), Value::String(kind.to_owned()));
    obj.insert("metadata".into(), Value::Object(meta));
    ChildBuilder { obj }
}

/// A desired child under construction (see [`child`]).
#[derive(Debug, Clone)]
pub struct ChildBuilder {
    obj: Map<String, Value>,
}

impl ChildBuilder {
    fn meta(&mut self) -> &mut Map<String, Value> {
        let meta = self
            .obj
            .entry("metadata")
            .or_insert_with(|| Value::Object(Map::new()));
        if !meta.is_object() {
            *meta = Value::Object(Map::new());
        }
        match meta {
            Value::Object(m) => m,
            _ => unreachable!("metadata was just made an object"),
        }
    }

    fn meta_map(&mut self, field: &str, key: &str, value: &str) {
        let m = self
            .meta()
            .entry(field)
            .or_insert_with(|| Value::Object(Map::new()));
        if let Some(m) = m.as_object_mut() {
            m.insert(key.to_owned(), Value::String(value.to_owned()));
        }
    }

    /// Sets `metadata.namespace` (usually not needed: children default to the parent's).
    pub fn namespace(mut self, ns: &str) -> Self {
        self.meta()
            .insert("namespace".into(), Value::String(ns.to_owned()));
        self
    }

    /// Adds a label.
    pub fn label(mut self, key: &str, value: &str) -> Self {
        self.meta_map("labels", key, value);
        self
    }

    /// Adds every label of a JSON object (non-string values are skipped).
    pub fn labels(mut self, labels: &Value) -> Self {
        for (k, v) in labels.as_object().into_iter().flatten() {
            if let Some(v) = v.as_str() {
                self.meta_map("labels", k, v);
            }
        }
        self
    }

    /// Adds an annotation.
    pub fn annotation(mut self, key: &str, value: &str) -> Self {
        self.meta_map("annotations", key, value);
        self
    }

    /// Sets `spec`.
    pub fn spec(self, spec: Value) -> Self {
        self.field("spec", spec)
    }

    /// Sets any top-level field (`data`, `stringData`, ...).
    pub fn field(mut self, key: &str, value: Value) -> Self {
        self.obj.insert(key.to_owned(), value);
        self
    }

    /// The child object.
    pub fn build(self) -> Value {
        Value::Object(self.obj)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn v1_sync_request_from_metacontroller_json() {
        let body = json!({
            "controller": {"apiVersion": "metacontroller.k8s.io/v1alpha1",
                           "kind": "CompositeController", "metadata": {"name": "hello-cc"},
                           "spec": {"parentResource": {"apiVersion": "example.com/v1",
                                                       "resource": "hellos"}}},
            "parent": {"apiVersion": "example.com/v1", "kind": "Hello",
                       "metadata": {"name": "world", "namespace": "default", "uid": "u1"},
                       "spec": {"who": "World"}},
            "children": {
                "Pod.v1": {"world": {"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": "world", "namespace": "default"},
                    "status": {"phase": "Running"}}},
                "Service.v1": {}
            },
            "related": {},
            "finalizing": false
        });
        let req: SyncRequest = serde_json::from_value(body).expect("decodes");
        assert_eq!(req.parent_name(), "world");
        assert_eq!(req.parent_namespace(), Some("default"));
        assert_eq!(req.parent_field("/spec/who"), Some(&json!("World")));
        let pods: Vec<_> = req.children.of_kind("Pod", "v1").collect();
        assert_eq!(pods.len(), 1);
        assert_eq!(pods[0].0, "world");
        assert_eq!(req.children.of_kind("Service", "v1").count(), 0);
        assert!(
            req.children
                .get("Pod", "v1", Some("default"), "world")
                .is_some()
        );
        assert!(
            req.children
                .get("Pod", "v1", Some("other"), "world")
                .is_none()
        );
        assert_eq!(req.children.len(), 1);
        assert!(!req.finalizing);
    }

    #[test]
    fn v2_keys_and_finalize_request() {
        let body = json!({
            "controller": {},
            "parent": {"apiVersion": "example.com/v1", "kind": "Cluster",
                       "metadata": {"name": "c", "deletionTimestamp": "2026-01-01T00:00:00Z"}},
            "children": {"Deployment.apps/v1": {
                "ns1/web": {"apiVersion": "apps/v1", "kind": "Deployment",
                            "metadata": {"name": "web", "namespace": "ns1"}}}},
            "related": {"ConfigMap.v1": {"ns1/cfg": {"apiVersion": "v1", "kind": "ConfigMap",
                            "metadata": {"name": "cfg", "namespace": "ns1"}}}},
            "finalizing": true
        });
        let req: FinalizeRequest = serde_json::from_value(body).expect("decodes");
        assert!(req.finalizing);
        assert_eq!(req.parent_namespace(), None);
        assert!(
            req.children
                .get("Deployment", "apps/v1", Some("ns1"), "web")
                .is_some()
        );
        assert!(
            req.related
                .get("ConfigMap", "v1", Some("ns1"), "cfg")
                .is_some()
        );
    }

    #[test]
    fn minimal_request_defaults() {
        let req: SyncRequest =
            serde_json::from_value(json!({"parent": {"metadata": {"name": "p"}}})).expect("ok");
        assert!(req.children.is_empty());
        assert!(req.related.is_empty());
        assert!(!req.finalizing);
    }

    #[test]
    fn sync_response_serializes_like_metacontroller_expects() {
        let resp = SyncResponse::new()
            .status(json!({"replicas": 1}))
            .child(
                child("apps/v1", "Deployment", "web")
                    .label("app", "web")
                    .labels(&json!({"tier": "front", "n": 1}))
                    .annotation("a", "b")
                    .spec(json!({"replicas": 1}))
                    .build(),
            )
            .resync_after(5.0);
        assert_eq!(
            serde_json::to_value(&resp).expect("serializes"),
            json!({
                "status": {"replicas": 1},
                "children": [{"apiVersion": "apps/v1", "kind": "Deployment",
                    "metadata": {"name": "web", "labels": {"app": "web", "tier": "front"},
                                 "annotations": {"a": "b"}},
                    "spec": {"replicas": 1}}],
                "resyncAfterSeconds": 5.0
            })
        );
        let fin = FinalizeResponse::new().finalized(true);
        assert_eq!(
            serde_json::to_value(&fin).expect("serializes"),
            json!({"children": [], "finalized": true})
        );
    }

    #[test]
    fn customize_round_trip() {
        let req: CustomizeRequest = serde_json::from_value(json!({
            "controller": {"metadata": {"name": "cc"}},
            "parent": {"metadata": {"name": "p"}}
        }))
        .expect("decodes");
        assert_eq!(req.parent["metadata"]["name"], "p");
        let resp = CustomizeResponse {
            related_resources: vec![
                RelatedResourceRule::new("v1", "configmaps")
                    .match_labels(json!({"propagate": "true"}))
                    .namespace("source"),
                RelatedResourceRule::new("v1", "secrets").names(["a", "b"]),
            ],
        };
        assert_eq!(
            serde_json::to_value(&resp).expect("serializes"),
            json!({"relatedResources": [
                {"apiVersion": "v1", "resource": "configmaps",
                 "labelSelector": {"matchLabels": {"propagate": "true"}}, "namespace": "source"},
                {"apiVersion": "v1", "resource": "secrets", "names": ["a", "b"]}
            ]})
        );
    }

    #[test]
    fn child_namespace() {
        let c = child("v1", "ConfigMap", "x").namespace("ns").build();
        assert_eq!(c["metadata"], json!({"name": "x", "namespace": "ns"}));
    }
}
