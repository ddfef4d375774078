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
