//! Building desired children.

use serde_json::{Map, Value};

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
    fn builds_metadata_and_fields() {
        let c = child("apps/v1", "Deployment", "web")
            .label("app", "web")
            .labels(&json!({"tier": "front", "n": 1}))
            .annotation("a", "b")
            .spec(json!({"replicas": 1}))
            .field("data", json!({"k": "v"}))
            .build();
        assert_eq!(
            c,
            json!({"apiVersion": "apps/v1", "kind": "Deployment",
                   "metadata": {"name": "web", "labels": {"app": "web", "tier": "front"},
                                "annotations": {"a": "b"}},
                   "spec": {"replicas": 1}, "data": {"k": "v"}})
        );
    }

    #[test]
    fn child_namespace() {
        let c = child("v1", "ConfigMap", "x").namespace("ns").build();
        assert_eq!(c["metadata"], json!({"name": "x", "namespace": "ns"}));
    }

    #[test]
    fn metadata_that_is_not_an_object_is_replaced() {
        let c = child("v1", "ConfigMap", "x")
            .field("metadata", json!(5))
            .label("a", "b")
            .build();
        assert_eq!(c["metadata"], json!({"labels": {"a": "b"}}));
    }
}
