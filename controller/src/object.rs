//! Accessors of an object held as JSON: `metadata` fields, the controller owner reference, a
//! human description. Shared by every layer; nothing here decides or does I/O.

use serde_json::Value;

/// `metadata.<field>`, if present.
pub fn meta<'a>(obj: &'a Value, field: &str) -> Option<&'a Value> {
    obj.get("metadata").and_then(|m| m.get(field))
}

/// `metadata.<field>` as a string ("" when absent).
pub fn meta_str<'a>(obj: &'a Value, field: &str) -> &'a str {
    meta(obj, field).and_then(Value::as_str).unwrap_or_default()
}

/// True when `metadata.deletionTimestamp` is set.
pub fn is_deleting(obj: &Value) -> bool {
    meta(obj, "deletionTimestamp").is_some_and(|v| !v.is_null())
}

/// True when `metadata.finalizers` contains `name`.
pub fn has_finalizer(obj: &Value, name: &str) -> bool {
    meta(obj, "finalizers")
        .and_then(Value::as_array)
        .is_some_and(|f| f.iter().any(|v| v.as_str() == Some(name)))
}

/// The controller owner reference (`controller: true`), if any.
pub fn controller_ref(obj: &Value) -> Option<&Value> {
    meta(obj, "ownerReferences")
        .and_then(Value::as_array)?
        .iter()
        .find(|r| r.get("controller").and_then(Value::as_bool) == Some(true))
}

/// The UID in the controller owner reference, if any.
pub fn controller_uid(obj: &Value) -> Option<&str> {
    controller_ref(obj)?.get("uid")?.as_str()
}

/// A human name for an object: `Kind namespace/name` or `Kind name`.
pub fn describe(obj: &Value) -> String {
    let kind = obj.get("kind").and_then(Value::as_str).unwrap_or("object");
    match meta_str(obj, "namespace") {
        "" => format!("{kind} {}", meta_str(obj, "name")),
        ns => format!("{kind} {ns}/{}", meta_str(obj, "name")),
    }
}

/// What claims, indexes, selectors, hook request maps and fingerprints read of an object, from
/// either form the caches hold it in: a decoded JSON value, or the compact form of cached
/// children (`runtime::compact::Compact`, its identity parsed and its body kept as JSON text).
pub trait ObjectView {
    /// `apiVersion` ("" when absent).
    fn api_version(&self) -> &str;
    /// `kind` ("" when absent).
    fn kind(&self) -> &str;
    /// `metadata.name` ("" when absent).
    fn name(&self) -> &str;
    /// `metadata.namespace` ("" when absent or cluster-scoped).
    fn namespace(&self) -> &str;
    /// `metadata.uid` ("" when absent).
    fn uid(&self) -> &str;
    /// `metadata.resourceVersion` ("" when absent).
    fn resource_version(&self) -> &str;
    /// The string label `key` (labels that are not strings are not labels).
    fn label(&self, key: &str) -> Option<&str>;
    /// Every string label, as (key, value).
    fn labels(&self) -> Vec<(&str, &str)>;
    /// The controller owner reference (`controller: true`), if any.
    fn controller(&self) -> Option<OwnerView<'_>>;
    /// True when `metadata.deletionTimestamp` is set.
    fn deleting(&self) -> bool;
}

/// The fields of an owner reference kmeta reads ("" when absent).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OwnerView<'a> {
    /// `apiVersion`.
    pub api_version: &'a str,
    /// `kind`.
    pub kind: &'a str,
    /// `name`.
    pub name: &'a str,
    /// `uid`.
    pub uid: &'a str,
}

impl<'a> OwnerView<'a> {
    /// The fields of the owner reference `r`.
    pub fn of(r: &'a Value) -> OwnerView<'a> {
        let s = |k: &str| r.get(k).and_then(Value::as_str).unwrap_or_default();
        OwnerView {
            api_version: s("apiVersion"),
            kind: s("kind"),
            name: s("name"),
            uid: s("uid"),
        }
    }
}

impl ObjectView for Value {
    fn api_version(&self) -> &str {
        self.get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or_default()
    }
    fn kind(&self) -> &str {
        self.get("kind").and_then(Value::as_str).unwrap_or_default()
    }
    fn name(&self) -> &str {
        meta_str(self, "name")
    }
    fn namespace(&self) -> &str {
        meta_str(self, "namespace")
    }
    fn uid(&self) -> &str {
        meta_str(self, "uid")
    }
    fn resource_version(&self) -> &str {
        meta_str(self, "resourceVersion")
    }
    fn label(&self, key: &str) -> Option<&str> {
        meta(self, "labels")?.get(key)?.as_str()
    }
    fn labels(&self) -> Vec<(&str, &str)> {
        meta(self, "labels")
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| Some((k.as_str(), v.as_str()?)))
                    .collect()
            })
            .unwrap_or_default()
    }
    fn controller(&self) -> Option<OwnerView<'_>> {
        controller_ref(self).map(OwnerView::of)
    }
    fn deleting(&self) -> bool {
        is_deleting(self)
    }
}

impl<T: ObjectView + ?Sized> ObjectView for &T {
    fn api_version(&self) -> &str {
        (**self).api_version()
    }
    fn kind(&self) -> &str {
        (**self).kind()
    }
    fn name(&self) -> &str {
        (**self).name()
    }
    fn namespace(&self) -> &str {
        (**self).namespace()
    }
    fn uid(&self) -> &str {
        (**self).uid()
    }
    fn resource_version(&self) -> &str {
        (**self).resource_version()
    }
    fn label(&self, key: &str) -> Option<&str> {
        (**self).label(key)
    }
    fn labels(&self) -> Vec<(&str, &str)> {
        (**self).labels()
    }
    fn controller(&self) -> Option<OwnerView<'_>> {
        (**self).controller()
    }
    fn deleting(&self) -> bool {
        (**self).deleting()
    }
}

impl<T: ObjectView + ?Sized> ObjectView for std::sync::Arc<T> {
    fn api_version(&self) -> &str {
        (**self).api_version()
    }
    fn kind(&self) -> &str {
        (**self).kind()
    }
    fn name(&self) -> &str {
        (**self).name()
    }
    fn namespace(&self) -> &str {
        (**self).namespace()
    }
    fn uid(&self) -> &str {
        (**self).uid()
    }
    fn resource_version(&self) -> &str {
        (**self).resource_version()
    }
    fn label(&self, key: &str) -> Option<&str> {
        (**self).label(key)
    }
    fn labels(&self) -> Vec<(&str, &str)> {
        (**self).labels()
    }
    fn controller(&self) -> Option<OwnerView<'_>> {
        (**self).controller()
    }
    fn deleting(&self) -> bool {
        (**self).deleting()
    }
}

/// The condition of `type_` in `obj`'s `status.conditions`, if any.
pub fn condition<'v>(obj: &'v Value, type_: &str) -> Option<&'v Value> {
    obj.pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(type_))
}
