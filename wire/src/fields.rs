//! What the wire types share: their field lists and the serde helpers for Metacontroller's
//! zero-value semantics.

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};

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

/// The JSON value of a wire type. The wire types hold only strings, numbers, booleans and JSON
/// values under string keys, for which `serde_json::to_value` has no failure case; the fallback
/// exists only so that the conversion needs no panic path.
pub(crate) fn to_json<T: Serialize>(v: &T) -> Value {
    serde_json::to_value(v).unwrap_or_else(|_| Value::Object(Map::new()))
}

/// `metadata.<field>` of an object, as a string.
pub(crate) fn meta_str<'a>(obj: &'a Value, field: &str) -> Option<&'a str> {
    obj.get("metadata")?.get(field)?.as_str()
}
