//! The compact form of a cached child: its JSON text (managedFields dropped), and parsed only
//! what the caches' indexes, claims, selectors, hook request maps and fingerprints read (name,
//! namespace, uid, resourceVersion, labels, the controller owner reference, deletion). A child
//! held this way costs about its JSON size instead of the 6–13× of a decoded `serde_json::Value`
//! (`cargo bench -p kmeta-tests --bench child_bytes`); the hook request copies the text as it
//! is, and a sync parses a child only when it has to decide about it
//! (docs/design/compact-cache.md).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::DynamicObject;
use serde::{Serialize, Serializer};
use serde_json::Value;
use serde_json::value::RawValue;

use crate::object::{ObjectView, OwnerView};
use crate::runtime::resources::Resolved;

/// A cached object as JSON text plus its parsed identity.
#[derive(Debug)]
pub struct Compact {
    text: Box<RawValue>,
    api_version: Box<str>,
    kind: Box<str>,
    name: Box<str>,
    namespace: Box<str>,
    uid: Box<str>,
    resource_version: Box<str>,
    labels: Box<[(Box<str>, Box<str>)]>,
    /// `[apiVersion, kind, name, uid]` of the controller owner reference.
    controller: Option<Box<[Box<str>; 4]>>,
    deleting: bool,
}

/// An object could not be encoded, or its text not parsed.
#[derive(Debug, thiserror::Error)]
#[error("cached object {name}: {source}")]
pub struct CompactError {
    /// `namespace/name` of the object.
    pub name: String,
    /// Cause.
    pub source: serde_json::Error,
}

impl Compact {
    /// A watched object in compact form: `managedFields` dropped (a PUT without them keeps the
    /// server's copy, and kmeta never reads them), `apiVersion`/`kind` defaulting to the watched
    /// resource's. The text is encoded straight from the decoded object.
    pub fn from_watched(mut obj: DynamicObject, r: &Resolved) -> Result<Compact, CompactError> {
        obj.metadata.managed_fields = None;
        let mut types = obj.types.take().unwrap_or_default();
        if types.api_version.is_empty() {
            types.api_version.clone_from(&r.api.api_version);
        }
        if types.kind.is_empty() {
            types.kind.clone_from(&r.api.kind);
        }
        obj.types = Some(types);
        let text = serde_json::value::to_raw_value(&obj).map_err(|source| CompactError {
            name: described(&obj.metadata),
            source,
        })?;
        let types = obj.types.unwrap_or_default();
        Ok(Compact::with_meta(
            text,
            types.api_version,
            types.kind,
            obj.metadata,
        ))
    }

    /// `obj` (as read from the API) in compact form, `managedFields` dropped.
    pub fn from_value(mut obj: Value) -> Result<Compact, CompactError> {
        if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
            m.shift_remove("managedFields");
        }
        let text = serde_json::value::to_raw_value(&obj).map_err(|source| CompactError {
            name: format!("{}/{}", obj.namespace(), obj.name()),
            source,
        })?;
        let owned = |s: &str| -> Box<str> { s.into() };
        let labels = obj
            .get("metadata")
            .and_then(|m| m.get("labels"))
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| Some((owned(k), owned(v.as_str()?))))
                    .collect()
            })
            .unwrap_or_default();
        Ok(Compact {
            api_version: owned(obj.api_version()),
            kind: owned(obj.kind()),
            name: owned(obj.name()),
            namespace: owned(obj.namespace()),
            uid: owned(obj.uid()),
            resource_version: owned(obj.resource_version()),
            labels,
            controller: obj.controller().map(|c| {
                Box::new([
                    owned(c.api_version),
                    owned(c.kind),
                    owned(c.name),
                    owned(c.uid),
                ])
            }),
            deleting: obj.deleting(),
            text,
        })
    }

    fn with_meta(text: Box<RawValue>, api_version: String, kind: String, m: ObjectMeta) -> Self {
        let owned = |s: Option<String>| s.unwrap_or_default().into_boxed_str();
        let controller = m
            .owner_references
            .unwrap_or_default()
            .into_iter()
            .find(|r| r.controller == Some(true))
            .map(|r| {
                Box::new([
                    r.api_version.into_boxed_str(),
                    r.kind.into_boxed_str(),
                    r.name.into_boxed_str(),
                    r.uid.into_boxed_str(),
                ])
            });
        Compact {
            text,
            api_version: api_version.into_boxed_str(),
            kind: kind.into_boxed_str(),
            name: owned(m.name),
            namespace: owned(m.namespace),
            uid: owned(m.uid),
            resource_version: owned(m.resource_version),
            labels: m
                .labels
                .unwrap_or_default()
                .into_iter()
                .map(|(k, v)| (k.into_boxed_str(), v.into_boxed_str()))
                .collect(),
            controller,
            deleting: m.deletion_timestamp.is_some(),
        }
    }

    /// The whole object, parsed from its text.
    pub fn value(&self) -> Result<Value, CompactError> {
        serde_json::from_str(self.text.get()).map_err(|source| CompactError {
            name: format!("{}/{}", self.namespace, self.name),
            source,
        })
    }
}

fn described(m: &ObjectMeta) -> String {
    format!(
        "{}/{}",
        m.namespace.as_deref().unwrap_or_default(),
        m.name.as_deref().unwrap_or_default()
    )
}

/// Encodes as the object's JSON text, unchanged.
impl Serialize for Compact {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.text.serialize(s)
    }
}

impl ObjectView for Compact {
    fn api_version(&self) -> &str {
        &self.api_version
    }
    fn kind(&self) -> &str {
        &self.kind
    }
    fn name(&self) -> &str {
        &self.name
    }
    fn namespace(&self) -> &str {
        &self.namespace
    }
    fn uid(&self) -> &str {
        &self.uid
    }
    fn resource_version(&self) -> &str {
        &self.resource_version
    }
    fn label(&self, key: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| &**k == key)
            .map(|(_, v)| &**v)
    }
    fn controller(&self) -> Option<OwnerView<'_>> {
        self.controller
            .as_deref()
            .map(|[av, kind, name, uid]| OwnerView {
                api_version: av,
                kind,
                name,
                uid,
            })
    }
    fn deleting(&self) -> bool {
        self.deleting
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn configmaps() -> Resolved {
        Resolved {
            api: kube::api::ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&()),
            namespaced: true,
            has_status: false,
        }
    }

    fn wire() -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "namespace": "ns", "uid": "u-a", "resourceVersion": "7",
                "labels": {"app": "x", "tier": "web"},
                "deletionTimestamp": "2026-01-01T00:00:00Z",
                "ownerReferences": [
                    {"apiVersion": "v1", "kind": "Secret", "name": "s", "uid": "u-s"},
                    {"apiVersion": "ctl.example/v1", "kind": "Parent", "name": "p", "uid": "u-p",
                     "controller": true, "blockOwnerDeletion": true}],
                "managedFields": [{"manager": "m", "operation": "Update", "apiVersion": "v1",
                    "fieldsType": "FieldsV1", "fieldsV1": {"f:data": {}}}]},
            "data": {"k": "v"}, "immutable": false})
    }

    /// Both ways in give the same text (without managedFields, keys in the server's order)
    /// and the same view as the decoded value.
    #[test]
    fn watched_and_read_objects_keep_the_json_and_read_like_the_value() {
        let watched =
            Compact::from_watched(serde_json::from_value(wire()).unwrap(), &configmaps()).unwrap();
        let read = Compact::from_value(wire()).unwrap();
        let mut want = wire();
        want["metadata"]
            .as_object_mut()
            .unwrap()
            .shift_remove("managedFields");
        for c in [&watched, &read] {
            assert_eq!(c.value().unwrap(), want);
            let keys: Vec<String> = c
                .value()
                .unwrap()
                .as_object()
                .unwrap()
                .keys()
                .cloned()
                .collect();
            assert_eq!(
                keys,
                ["apiVersion", "kind", "metadata", "data", "immutable"]
            );
            assert_eq!(serde_json::to_value(c).unwrap(), want);
            assert_eq!(c.api_version(), want.api_version());
            assert_eq!(c.kind(), want.kind());
            assert_eq!(c.name(), "a");
            assert_eq!(c.namespace(), "ns");
            assert_eq!(c.uid(), "u-a");
            assert_eq!(c.resource_version(), "7");
            assert_eq!(c.label("app"), Some("x"));
            assert_eq!(c.label("tier"), want.label("tier"));
            assert_eq!(c.label("none"), None);
            assert_eq!(c.controller(), want.controller());
            assert_eq!(c.controller().unwrap().uid, "u-p");
            assert!(c.deleting());
        }
    }

    #[test]
    fn a_watch_event_without_types_gets_the_resources() {
        let bare = json!({"metadata": {"name": "b"}, "data": {}});
        let c =
            Compact::from_watched(serde_json::from_value(bare).unwrap(), &configmaps()).unwrap();
        let v = c.value().unwrap();
        assert_eq!(v["apiVersion"], "v1");
        assert_eq!(v["kind"], "ConfigMap");
        assert_eq!(c.kind(), "ConfigMap");
        assert_eq!(c.controller(), None);
        assert!(!c.deleting());
        assert_eq!(c.namespace(), "");
    }

    /// A map holding compact children encodes byte for byte as one holding their values.
    #[test]
    fn encodes_inside_a_map_as_the_value_does() {
        let c = Compact::from_value(wire()).unwrap();
        let v = c.value().unwrap();
        let mut m = std::collections::BTreeMap::new();
        m.insert("a", &c);
        let raw = serde_json::to_string(&m).unwrap();
        assert_eq!(raw, serde_json::to_string(&json!({"a": v})).unwrap());
    }
}
