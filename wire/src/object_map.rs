//! The object map of `children`, `attachments` and `related`.

use std::fmt;

use serde::de::{MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};

use crate::fields::meta_str;

/// The map key of an object type, Metacontroller's `<Kind>.<apiVersion>`: `Pod.v1`,
/// `StatefulSet.apps/v1`.
pub fn group_key(api_version: &str, kind: &str) -> String {
    format!("{kind}.{api_version}")
}

/// Observed objects of a hook request (`children`, `attachments` or `related`): keyed by
/// [`group_key`], then by object key.
///
/// The object key depends on the hook version. Hook v1 (Metacontroller's "relative" map) uses
/// `name`, or `namespace/name` for a namespaced object seen by a cluster-scoped parent. Hook v2
/// (the "uniform" map) uses `namespace/name` for every namespaced object and `name` for
/// cluster-scoped ones. One type serves both: [`ObjectMap::get`] finds an object whatever the
/// key style.
///
/// Groups and objects keep the order in which they were inserted or decoded, so a map encodes
/// to the same bytes it was decoded from. Equality ignores that order.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(transparent)]
pub struct ObjectMap(Map<String, Value>);

impl ObjectMap {
    /// An empty map.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds an empty group for `group` (a [`group_key`]) unless it is there: Metacontroller
    /// sends one entry per declared child or attachment rule, even when it has no objects.
    pub fn declare(&mut self, group: &str) {
        self.group_mut(group);
    }

    /// Puts `object` under `key` in `group`, adding the group if needed; returns the object it
    /// replaces.
    pub fn insert(&mut self, group: &str, key: String, object: Value) -> Option<Value> {
        self.group_mut(group).insert(key, object)
    }

    fn group_mut(&mut self, group: &str) -> &mut Map<String, Value> {
        let entry = self
            .0
            .entry(group)
            .or_insert_with(|| Value::Object(Map::new()));
        if !entry.is_object() {
            *entry = Value::Object(Map::new());
        }
        match entry {
            Value::Object(m) => m,
            _ => unreachable!("the group was just made an object"),
        }
    }

    /// The objects of `group` (a [`group_key`]) by object key.
    pub fn group(&self, group: &str) -> Option<&Map<String, Value>> {
        self.0.get(group)?.as_object()
    }

    /// Every group with its objects, in map order.
    pub fn groups(&self) -> impl Iterator<Item = (&str, &Map<String, Value>)> {
        self.0
            .iter()
            .filter_map(|(k, v)| Some((k.as_str(), v.as_object()?)))
    }

    /// Objects of `kind` in `api_version`, with their keys, in map order.
    pub fn of_kind<'a>(
        &'a self,
        kind: &str,
        api_version: &str,
    ) -> impl Iterator<Item = (&'a str, &'a Value)> + 'a {
        self.group(&group_key(api_version, kind))
            .into_iter()
            .flat_map(|m| m.iter().map(|(k, v)| (k.as_str(), v)))
    }

    /// The object `name` (in `namespace`, if given) of `kind` in `api_version`, whatever the
    /// hook version's key style (`name` or `namespace/name`).
    pub fn get(
        &self,
        kind: &str,
        api_version: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<&Value> {
        let group = self.group(&group_key(api_version, kind))?;
        if let Some(ns) = namespace.filter(|ns| !ns.is_empty())
            && let Some(o) = group.get(&format!("{ns}/{name}"))
        {
            return Some(o);
        }
        group.get(name).filter(|o| {
            namespace.is_none_or(|ns| ns.is_empty() || meta_str(o, "namespace") == Some(ns))
        })
    }

    /// Number of objects over all groups.
    pub fn len(&self) -> usize {
        self.groups().map(|(_, m)| m.len()).sum()
    }

    /// True when there are no objects (there may be empty groups).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The map as JSON.
    pub fn as_json(&self) -> &Map<String, Value> {
        &self.0
    }
}

/// Takes a JSON object map as it is; groups that are not objects are skipped by the accessors.
impl From<Map<String, Value>> for ObjectMap {
    fn from(m: Map<String, Value>) -> Self {
        Self(m)
    }
}

impl From<ObjectMap> for Map<String, Value> {
    fn from(m: ObjectMap) -> Self {
        m.0
    }
}

impl From<ObjectMap> for Value {
    fn from(m: ObjectMap) -> Self {
        Value::Object(m.0)
    }
}

/// Decoding checks the shape: every group must be an object of objects keyed by string.
impl<'de> Deserialize<'de> for ObjectMap {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Groups;
        impl<'de> Visitor<'de> for Groups {
            type Value = ObjectMap;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a map of `<Kind>.<apiVersion>` to objects by key")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<ObjectMap, A::Error> {
                let mut out = Map::new();
                while let Some((group, objects)) =
                    access.next_entry::<String, Map<String, Value>>()?
                {
                    out.insert(group, Value::Object(objects));
                }
                Ok(ObjectMap(out))
            }
        }
        d.deserialize_map(Groups)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn group_key_is_kind_dot_api_version() {
        assert_eq!(group_key("v1", "Pod"), "Pod.v1");
        assert_eq!(group_key("apps/v1", "StatefulSet"), "StatefulSet.apps/v1");
    }

    #[test]
    fn insertion_order_survives_encoding() {
        let mut m = ObjectMap::new();
        m.declare("Service.v1");
        m.insert("Pod.v1", "b".into(), json!({"metadata": {"name": "b"}}));
        m.insert("Pod.v1", "a".into(), json!({"metadata": {"name": "a"}}));
        m.declare("Pod.v1");
        let text = serde_json::to_string(&m).unwrap();
        assert_eq!(
            text,
            r#"{"Service.v1":{},"Pod.v1":{"b":{"metadata":{"name":"b"}},"a":{"metadata":{"name":"a"}}}}"#
        );
        let back: ObjectMap = serde_json::from_str(&text).unwrap();
        assert_eq!(serde_json::to_string(&back).unwrap(), text);
        assert_eq!(back.len(), 2);
        assert_eq!(
            back.groups().map(|(g, _)| g).collect::<Vec<_>>(),
            ["Service.v1", "Pod.v1"]
        );
    }

    #[test]
    fn get_finds_both_key_styles() {
        let pod = json!({"metadata": {"name": "w", "namespace": "ns"}});
        let v1: ObjectMap = serde_json::from_value(json!({"Pod.v1": {"w": pod}})).unwrap();
        let v2: ObjectMap = serde_json::from_value(json!({"Pod.v1": {"ns/w": pod}})).unwrap();
        for m in [&v1, &v2] {
            assert_eq!(m.get("Pod", "v1", Some("ns"), "w"), Some(&pod));
            assert_eq!(m.get("Pod", "v1", Some("other"), "w"), None);
            assert_eq!(m.of_kind("Pod", "v1").count(), 1);
            assert_eq!(m.of_kind("Service", "v1").count(), 0);
        }
        assert_eq!(v1.get("Pod", "v1", None, "w"), Some(&pod));
    }

    #[test]
    fn shape_is_checked_and_non_object_groups_are_skipped() {
        assert!(
            serde_json::from_value::<ObjectMap>(json!({"Pod.v1": [1]}))
                .unwrap_err()
                .to_string()
                .contains("invalid type")
        );
        assert!(serde_json::from_value::<ObjectMap>(json!([])).is_err());
        let m = ObjectMap::from(
            json!({"Pod.v1": 5, "Svc.v1": {}})
                .as_object()
                .unwrap()
                .clone(),
        );
        assert_eq!(m.groups().count(), 1);
        assert!(m.is_empty());
    }

    #[test]
    fn equality_ignores_order() {
        let a: ObjectMap = serde_json::from_str(r#"{"A.v1": {}, "B.v1": {}}"#).unwrap();
        let b: ObjectMap = serde_json::from_str(r#"{"B.v1": {}, "A.v1": {}}"#).unwrap();
        assert_eq!(a, b);
    }
}
