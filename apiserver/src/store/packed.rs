//! A stored object held as its JSON text: an object decoded into a `serde_json::Value` (with
//! `preserve_order`) takes about eight times its text (8.8 KB of heap for a 1.1 KB ConfigMap
//! with its managedFields), so the table keeps the text and decodes on read.
//! docs/design/apiserver-packed-objects.md says why and what it costs.

use bytes::Bytes;
use serde::Deserialize;
use serde_json::Value;
use std::sync::Arc;

/// One stored object's JSON text (immutable, cheap to clone), and for the few resources read on
/// every request (see [`keeps_decoded`]) its decoded form too.
#[derive(Debug, Clone)]
pub(crate) struct Packed {
    text: Bytes,
    kept: Option<Arc<Value>>,
}

impl PartialEq for Packed {
    fn eq(&self, other: &Self) -> bool {
        self.text == other.text
    }
}

/// Whether objects of the resource `res` (`group/plural`) are kept decoded beside their text:
/// the ones the server reads on every request (RBAC for authorization, admission
/// configurations and policies, namespaces for their labels, CRDs), few in any cluster, where
/// decoding on each read would cost more than the memory saved.
pub(crate) fn keeps_decoded(res: &str) -> bool {
    let group = res.split_once('/').map_or("", |(g, _)| g);
    matches!(
        group,
        "rbac.authorization.k8s.io" | "admissionregistration.k8s.io" | "apiextensions.k8s.io"
    ) || res == "/namespaces"
}

impl Packed {
    /// The stored form of `v`, kept decoded too when `keep` (serialising a `Value` cannot
    /// fail: its keys are strings).
    pub(crate) fn pack(v: &Arc<Value>, keep: bool) -> Packed {
        Packed {
            text: Bytes::from(serde_json::to_vec(&**v).unwrap_or_default()),
            kept: keep.then(|| v.clone()),
        }
    }

    /// The object, decoded. The text was written by [`Packed::pack`] from a `Value`, so it
    /// always decodes; `Null` stands for the impossible failure rather than a panic.
    pub(crate) fn value(&self) -> Arc<Value> {
        match &self.kept {
            Some(v) => v.clone(),
            None => Arc::new(serde_json::from_slice(&self.text).unwrap_or(Value::Null)),
        }
    }

    /// The text, as served.
    pub(crate) fn json(&self) -> &Bytes {
        &self.text
    }

    /// The object's head ([`head_of`]), read without decoding the rest (an object of an
    /// unexpected shape is decoded whole).
    pub(crate) fn head(&self) -> Value {
        match serde_json::from_slice::<HeadOf>(&self.text) {
            Ok(h) => h.into_value(),
            Err(_) => head_of(&self.value()),
        }
    }

    /// The uid and the owners' uids, read without decoding the rest (an object whose metadata
    /// has an unexpected shape is decoded whole and read as a `Value`).
    pub(crate) fn ids(&self) -> Ids {
        match serde_json::from_slice::<IdsOf>(&self.text) {
            Ok(o) => Ids {
                uid: o.metadata.uid,
                owners: o
                    .metadata
                    .owner_references
                    .into_iter()
                    .flatten()
                    .filter_map(|r| r.uid)
                    .collect(),
            },
            Err(_) => {
                let v = self.value();
                Ids {
                    uid: super::uid_of(&v).map(str::to_string),
                    owners: super::owner_uids(&v),
                }
            }
        }
    }
}

/// The metadata fields a watch's selectors read: label selectors the labels, shard selectors
/// the uid or namespace, the field selectors every resource serves its name and namespace.
const HEAD_METADATA: [&str; 4] = ["name", "namespace", "uid", "labels"];

/// An object's head: its apiVersion and kind and the metadata fields of [`HEAD_METADATA`], what
/// a watch tests on every event (selectors, the version served), small enough for the event
/// window to hold decoded.
pub(crate) fn head_of(v: &Value) -> Value {
    let mut out = serde_json::Map::new();
    for f in ["apiVersion", "kind"] {
        if let Some(x) = v.get(f) {
            out.insert(f.into(), x.clone());
        }
    }
    if let Some(m) = v.get("metadata").and_then(Value::as_object) {
        let meta = HEAD_METADATA
            .iter()
            .filter_map(|f| Some(((*f).to_owned(), m.get(*f)?.clone())))
            .collect();
        out.insert("metadata".into(), Value::Object(meta));
    }
    Value::Object(out)
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct HeadOf {
    #[serde(default)]
    api_version: Option<Value>,
    #[serde(default)]
    kind: Option<Value>,
    #[serde(default)]
    metadata: Option<HeadMeta>,
}

#[derive(Deserialize)]
struct HeadMeta {
    #[serde(default)]
    name: Option<Value>,
    #[serde(default)]
    namespace: Option<Value>,
    #[serde(default)]
    uid: Option<Value>,
    #[serde(default)]
    labels: Option<Value>,
}

impl HeadOf {
    /// The head as [`head_of`] builds it (same keys, same order).
    fn into_value(self) -> Value {
        let mut out = serde_json::Map::new();
        let put = |m: &mut serde_json::Map<String, Value>, k: &str, v: Option<Value>| {
            if let Some(v) = v {
                m.insert(k.to_owned(), v);
            }
        };
        put(&mut out, "apiVersion", self.api_version);
        put(&mut out, "kind", self.kind);
        if let Some(m) = self.metadata {
            let mut meta = serde_json::Map::new();
            put(&mut meta, "name", m.name);
            put(&mut meta, "namespace", m.namespace);
            put(&mut meta, "uid", m.uid);
            put(&mut meta, "labels", m.labels);
            out.insert("metadata".into(), Value::Object(meta));
        }
        Value::Object(out)
    }
}

/// What the store's indexes need of an object.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Ids {
    /// `metadata.uid`.
    pub(crate) uid: Option<String>,
    /// `metadata.ownerReferences[*].uid`.
    pub(crate) owners: Vec<String>,
}

#[derive(Deserialize)]
struct IdsOf {
    #[serde(default)]
    metadata: IdsMeta,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct IdsMeta {
    #[serde(default)]
    uid: Option<String>,
    #[serde(default)]
    owner_references: Option<Vec<OwnerOf>>,
}

#[derive(Deserialize)]
struct OwnerOf {
    #[serde(default)]
    uid: Option<String>,
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pk(v: Value) -> Arc<Value> {
        Arc::new(v)
    }

    #[test]
    fn control_resources_are_kept_decoded_and_the_rest_as_text() {
        for res in [
            "rbac.authorization.k8s.io/roles",
            "admissionregistration.k8s.io/validatingadmissionpolicies",
            "apiextensions.k8s.io/customresourcedefinitions",
            "/namespaces",
        ] {
            assert!(keeps_decoded(res), "{res}");
        }
        for res in [
            "/configmaps",
            "apps/deployments",
            "example.com/things",
            "/namespacesx",
        ] {
            assert!(!keeps_decoded(res), "{res}");
        }
        let v = pk(json!({"a": 1}));
        assert!(Arc::ptr_eq(&Packed::pack(&v, true).value(), &v));
        let text = Packed::pack(&v, false);
        assert!(!Arc::ptr_eq(&text.value(), &v));
        assert_eq!(text.value(), v);
    }

    #[test]
    fn packs_and_decodes_the_same_object_in_its_order() {
        let v = json!({"kind": "ConfigMap", "apiVersion": "v1", "metadata": {"name": "a"},
            "data": {"z": "1", "a": "2"}});
        let p = Packed::pack(&Arc::new(v.clone()), false);
        assert_eq!(*p.value(), v);
        assert_eq!(
            std::str::from_utf8(p.json()).unwrap(),
            r#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a"},"data":{"z":"1","a":"2"}}"#
        );
    }

    #[test]
    fn the_head_read_from_the_text_is_the_head_of_the_object() {
        for v in [
            json!({"kind": "ConfigMap", "apiVersion": "v1", "metadata": {"uid": "u", "name": "a",
                "labels": {"x": "1"}, "annotations": {"big": "..."}, "managedFields": [{}]},
                "data": {"k": "v"}}),
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "n"}}),
            json!({"kind": "Odd", "metadata": "not an object"}),
            json!({"spec": {}}),
        ] {
            let p = Packed::pack(&pk(v.clone()), false);
            assert_eq!(p.head(), head_of(&v), "{v}");
        }
        let h = head_of(
            &json!({"kind": "K", "apiVersion": "v", "metadata": {"labels": {"a": "b"},
            "namespace": "ns", "annotations": {}, "uid": "u", "name": "n"}, "spec": {}}),
        );
        assert_eq!(
            h,
            json!({"apiVersion": "v", "kind": "K", "metadata": {"name": "n",
            "namespace": "ns", "uid": "u", "labels": {"a": "b"}}})
        );
    }

    #[test]
    fn ids_read_uid_and_owner_uids_only() {
        let p = Packed::pack(
            &pk(json!({"metadata": {"uid": "u", "ownerReferences": [
            {"uid": "a", "name": "x"}, {"name": "no-uid"}, {"uid": "b"}]}, "spec": {"uid": "not-this"}})),
            false,
        );
        assert_eq!(
            p.ids(),
            Ids {
                uid: Some("u".into()),
                owners: vec!["a".into(), "b".into()]
            }
        );
        assert_eq!(
            Packed::pack(&pk(json!({"spec": {}})), false).ids(),
            Ids::default()
        );
        assert_eq!(
            Packed::pack(&pk(json!({"metadata": {"ownerReferences": null}})), false).ids(),
            Ids::default()
        );
        // a shape the typed read refuses falls back to reading the whole object
        let odd = Packed::pack(
            &pk(
                json!({"metadata": {"uid": "u", "ownerReferences": [7, {"uid": 1}, {"uid": "c"}]}}),
            ),
            false,
        );
        assert_eq!(
            odd.ids(),
            Ids {
                uid: Some("u".into()),
                owners: vec!["c".into()]
            }
        );
    }
}
