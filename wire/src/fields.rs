//! What the wire types share: their field lists and the serde helpers for Metacontroller's
//! zero-value semantics.

use serde::{Deserialize, Deserializer};
use serde_json::Value;

/// The JSON field names of a wire type, in encoding order.
///
/// Metacontroller's strict `responseUnMarshallMode` rejects a response with a field its type
/// does not have; a strict decoder compares the top-level keys of a body with this list.
pub trait WireFields {
    /// Every field name the type encodes and decodes.
    const FIELDS: &'static [&'static str];
}

/// Deserializes `null` (and, with `#[serde(default)]`, absence) as the type's default: Go's
/// decoder leaves a field at its zero value for `null`.
pub(crate) fn null_as_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// `resyncAfterSeconds` is left out when zero (no resync requested).
#[allow(clippy::trivially_copy_pass_by_ref)] // serde's skip_serializing_if passes a reference
pub(crate) fn is_zero(v: &f64) -> bool {
    *v == 0.0
}

/// `finalized` is left out when false.
#[allow(clippy::trivially_copy_pass_by_ref)] // serde's skip_serializing_if passes a reference
pub(crate) fn is_false(v: &bool) -> bool {
    !*v
}

/// A JSON object of `fields` in the given order (a request's fields, moved, not copied).
pub(crate) fn object<const N: usize>(fields: [(&str, Value); N]) -> Value {
    Value::Object(fields.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
}

/// `metadata.<field>` of an object, as a string.
pub(crate) fn meta_str<'a>(obj: &'a Value, field: &str) -> Option<&'a str> {
    obj.get("metadata")?.get(field)?.as_str()
}
