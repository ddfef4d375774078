//! JSON text to [`Value`] with every object's map built at its final size. serde_json's own
//! `Value` grows each map from empty, entry by entry (its index table and entry list regrow as
//! they fill); here an object's entries are gathered in a scratch list (reused across objects)
//! and the map is then made once with the capacity it needs. The result equals
//! `serde_json::from_str::<Value>`'s, duplicate keys included (the last value wins, in the first
//! key's place), as do the errors (serde_json's own, its recursion limit included).

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

/// Parses one JSON value from `text` (nothing but whitespace after it).
pub(crate) fn parse_value(text: &str) -> Result<Value, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_str(text);
    let mut pool = Vec::new();
    let value = Seed { pool: &mut pool }.deserialize(&mut de)?;
    de.end()?;
    Ok(value)
}

/// Scratch lists of object entries, one per nesting level in use, reused.
type Pool = Vec<Vec<(String, Value)>>;

struct Seed<'p> {
    pool: &'p mut Pool,
}

impl<'de> DeserializeSeed<'de> for Seed<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Seed<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any valid JSON value")
    }

    fn visit_bool<E>(self, b: bool) -> Result<Value, E> {
        Ok(Value::Bool(b))
    }

    fn visit_i64<E>(self, n: i64) -> Result<Value, E> {
        Ok(Value::Number(n.into()))
    }

    fn visit_u64<E>(self, n: u64) -> Result<Value, E> {
        Ok(Value::Number(n.into()))
    }

    fn visit_f64<E>(self, n: f64) -> Result<Value, E> {
        Ok(Number::from_f64(n).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, s: &str) -> Result<Value, E> {
        Ok(Value::String(s.to_owned()))
    }

    fn visit_string<E>(self, s: String) -> Result<Value, E> {
        Ok(Value::String(s))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        while let Some(item) = seq.next_element_seed(Seed {
            pool: &mut *self.pool,
        })? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut entries = self.pool.pop().unwrap_or_default();
        while let Some(key) = map.next_key::<String>()? {
            let value = map.next_value_seed(Seed {
                pool: &mut *self.pool,
            })?;
            entries.push((key, value));
        }
        let mut out = Map::with_capacity(entries.len());
        for (k, v) in entries.drain(..) {
            out.insert(k, v);
        }
        self.pool.push(entries);
        Ok(Value::Object(out))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::parse_value;
    use serde_json::Value;

    #[test]
    fn same_as_serde_json_key_order_duplicates_numbers_and_errors() {
        let texts = [
            r#"{"b":1,"a":{"z":[1,2.5,-3,18446744073709551615,1e300],"y":null},"c":"\u00e9\n"}"#,
            r#"{"k":1,"j":2,"k":3}"#,
            r#"[{"a":{"b":{"c":{}}}},[],"",true,false,null]"#,
            r#"  {"s": "tab\there", "e": {}, "n": -0.0}  "#,
            "42",
            r#"{"a":1,}"#,
            r#"{"a":1} x"#,
            r#"{"a":"#,
            "",
            &format!("{}{}", "[".repeat(200), "]".repeat(200)),
        ];
        for text in texts {
            let ours = parse_value(text).map_err(|e| e.to_string());
            let theirs = serde_json::from_str::<Value>(text).map_err(|e| e.to_string());
            assert_eq!(ours, theirs, "{text}");
            if let (Ok(a), Ok(b)) = (&ours, &theirs) {
                assert_eq!(
                    serde_json::to_string(a).unwrap(),
                    serde_json::to_string(b).unwrap(),
                    "key order of {text}"
                );
            }
        }
    }
}
