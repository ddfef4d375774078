//! An object encoded whole without being made whole: a cached parent and the text of its
//! detached status field ([`super::DETACHED_STATUS_FIELD`]) serialize to the very JSON of the
//! parent with the field put back ([`super::Form::attach`]), the text copied as it is instead
//! of parsed into a copy of the parent (docs/design/detached-record.md).

use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::DETACHED_STATUS_FIELD;

/// `obj` with `text` as its detached status field, for encoding: serializes exactly as
/// `obj.attach(text)` would ([`super::Form::attach`]: the field where `status` has it, else
/// last in `status`), or as `obj` when there is no text or `status` is not an object (where
/// `attach` keeps `obj` as it is).
#[derive(Debug, Clone, Copy)]
pub struct Attached<'a> {
    /// The object as cached (without the field).
    pub obj: &'a Value,
    /// The field's JSON text, as the store holds it.
    pub text: Option<&'a RawValue>,
}

impl Serialize for Attached<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        // entry by entry, as `Value` encodes a map (one without a `status` map is unchanged)
        let (Some(text), Some(obj)) = (self.text, self.obj.as_object()) else {
            return self.obj.serialize(s);
        };
        let mut map = s.serialize_map(Some(obj.len()))?;
        for (k, v) in obj {
            match v.as_object().filter(|_| k == "status") {
                Some(status) => map.serialize_entry(k, &StatusWith { status, text })?,
                None => map.serialize_entry(k, v)?,
            }
        }
        map.end()
    }
}

/// A `status` map with the detached field's text in it (replacing a field of that name in
/// place, as `Map::insert` does, else last).
struct StatusWith<'a> {
    status: &'a Map<String, Value>,
    text: &'a RawValue,
}

impl Serialize for StatusWith<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let has = self.status.contains_key(DETACHED_STATUS_FIELD);
        let len = self.status.len() + usize::from(!has);
        let mut map = s.serialize_map(Some(len))?;
        for (k, v) in self.status {
            match k == DETACHED_STATUS_FIELD {
                true => map.serialize_entry(k, self.text)?,
                false => map.serialize_entry(k, v)?,
            }
        }
        if !has {
            map.serialize_entry(DETACHED_STATUS_FIELD, self.text)?;
        }
        map.end()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::runtime::cache::Form;
    use serde_json::json;

    /// The parents of the cases: a status with fields before and after where the record was,
    /// an empty status, none, a status that is no object, an object that is no map.
    fn parents() -> Vec<Value> {
        let meta = json!({"name": "p", "namespace": "ns", "uid": "u", "resourceVersion": "7",
            "labels": {"a": "b\"q"}, "annotations": {"x": "é\u{1}"}});
        vec![
            json!({"apiVersion": "v1", "kind": "P", "metadata": meta, "spec": {"n": 1.5, "m": -0.0},
                "status": {"children": 10, "kmeta": {"lastSync": {"time": "t"}}, "z": [1, null]}}),
            json!({"apiVersion": "v1", "metadata": meta, "status": {}, "spec": {}}),
            json!({"apiVersion": "v1", "metadata": meta, "spec": {"big": u64::MAX, "neg": i64::MIN}}),
            json!({"metadata": meta, "status": "odd"}),
            json!({"metadata": meta, "status": null}),
            json!([1, 2]),
        ]
    }

    fn records() -> Vec<Value> {
        vec![
            json!({"lastSync": {"time": "2026-12-07T08:00:00Z", "hook": 0.0012,
                "children": [{"kind": "ConfigMap", "name": "p-0", "action": "unchanged"}],
                "trigger": "resync \"x\" \\ \u{7f}"}, "earlier": [1e300, 2.5e-8, 3, true]}),
            json!(null),
            json!("text"),
        ]
    }

    /// The encoding of a parent and its record's text, byte for byte and as a value, is that of
    /// the parent made whole, for every way the store can hold them.
    #[test]
    fn encodes_as_the_parent_made_whole() {
        for whole in parents() {
            for record in records() {
                let mut cached = whole.clone();
                if let Some(status) = cached.get_mut("status").and_then(Value::as_object_mut) {
                    status.insert(DETACHED_STATUS_FIELD.into(), record.clone());
                }
                let text = cached.detach();
                let made_whole = match &text {
                    Some(t) => cached.attach(t).unwrap_or_else(|| cached.clone()),
                    None => cached.clone(),
                };
                let attached = Attached {
                    obj: &cached,
                    text: text.as_deref(),
                };
                let case = format!("{whole} with {record}");
                assert_eq!(
                    serde_json::to_string(&attached).unwrap(),
                    serde_json::to_string(&made_whole).unwrap(),
                    "{case}"
                );
                assert_eq!(
                    serde_json::to_value(attached).unwrap(),
                    made_whole,
                    "{case}"
                );
            }
        }
    }

    /// Without text, or with a status that is no object, the object is encoded as it is; a
    /// field of the record's name left in the status is replaced in place, as `attach` does.
    #[test]
    fn without_a_place_for_the_text_the_object_is_encoded_as_it_is() {
        let text = serde_json::value::to_raw_value(&json!({"r": 1})).unwrap();
        for obj in [
            json!({"status": "odd", "a": 1}),
            json!({"a": {"b": 2}}),
            json!(3),
        ] {
            let attached = Attached {
                obj: &obj,
                text: Some(&text),
            };
            assert_eq!(serde_json::to_string(&attached).unwrap(), obj.to_string());
        }
        let obj = json!({"status": {"a": 1, "kmeta": 0, "b": 2}});
        let attached = Attached {
            obj: &obj,
            text: Some(&text),
        };
        let made_whole = obj.attach(&text).unwrap();
        assert_eq!(
            serde_json::to_string(&attached).unwrap(),
            serde_json::to_string(&made_whole).unwrap()
        );
        assert_eq!(
            serde_json::to_string(&attached).unwrap(),
            r#"{"status":{"a":1,"kmeta":{"r":1},"b":2}}"#
        );
        let none = Attached {
            obj: &obj,
            text: None,
        };
        assert_eq!(serde_json::to_string(&none).unwrap(), obj.to_string());
    }
}
