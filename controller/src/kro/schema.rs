//! kro's SimpleSchema (`pkg/simpleschema/`): `spec` fields written as `type | marker=value ...`
//! turned into the instance CRD's OpenAPI schema. Types: `string`, `integer`, `boolean`,
//! `float` (OpenAPI `number`), `object` (any fields), `[]T`, `map[string]T`, nested objects
//! and the RGD's own `types`; markers: `required`, `default`, `description`, `minimum`,
//! `maximum`, `validation`, `immutable`, `enum`, `pattern`, `uniqueItems`, `minLength`,
//! `maxLength`, `minItems`, `maxItems`, `listType`, `listMapKey`. Pure.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use super::KroError;

fn bad(path: &str, message: impl Into<String>) -> KroError {
    KroError::Schema {
        path: path.to_owned(),
        message: message.into(),
    }
}

/// The custom types of `spec.schema.types`, by name, as written.
pub(crate) type Types = BTreeMap<String, Value>;

/// The OpenAPI schema of a SimpleSchema object (`spec.schema.spec`) at `path`.
pub(crate) fn object_schema(spec: &Value, types: &Types, path: &str) -> Result<Value, KroError> {
    let Some(fields) = spec.as_object() else {
        return Err(bad(path, "must be an object of fields"));
    };
    let mut props = Map::new();
    let mut required: Vec<String> = Vec::new();
    let mut child_default = false;
    for (name, field) in fields {
        let at = format!("{path}.{name}");
        let (schema, req) = match field {
            Value::String(s) => field_schema(s, types, &at, 0)?,
            Value::Object(_) => (object_schema(field, types, &at)?, false),
            _ => return Err(bad(&at, "must be a type string or an object of fields")),
        };
        child_default |= schema.get("default").is_some();
        if req {
            required.push(name.clone());
        }
        props.insert(name.clone(), schema);
    }
    required.sort();
    let mut out = json!({"type": "object", "properties": props});
    if !required.is_empty() {
        out["required"] = json!(required);
    } else if child_default {
        out["default"] = json!({});
    }
    Ok(out)
}

/// The schema of one field `type | markers` and whether it is required.
fn field_schema(
    s: &str,
    types: &Types,
    path: &str,
    depth: usize,
) -> Result<(Value, bool), KroError> {
    let (ty, markers) = match s.split_once('|') {
        Some((t, m)) => (t.trim(), Some(m)),
        None => (s.trim(), None),
    };
    let mut schema = type_schema(ty, types, path, depth)?;
    let mut required = false;
    for (key, value) in parse_markers(markers.unwrap_or_default(), path)? {
        required |= apply_marker(&mut schema, &key, &value, path)?;
    }
    Ok((schema, required))
}

fn type_schema(ty: &str, types: &Types, path: &str, depth: usize) -> Result<Value, KroError> {
    if depth > 16 {
        return Err(bad(path, format!("type nesting too deep: {ty:?}")));
    }
    Ok(match ty {
        "string" | "integer" | "boolean" => json!({"type": ty}),
        "float" => json!({"type": "number"}),
        "object" => json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}),
        "" => return Err(bad(path, "empty type")),
        _ => {
            if let Some(elem) = ty.strip_prefix("[]") {
                json!({"type": "array", "items": type_schema(elem.trim(), types, path, depth + 1)?})
            } else if let Some(rest) = ty.strip_prefix("map[") {
                let Some(val) = rest.strip_prefix("string]") else {
                    return Err(bad(path, "map key must be string"));
                };
                let v = type_schema(val.trim(), types, path, depth + 1)?;
                json!({"type": "object", "additionalProperties": v})
            } else if let Some(custom) = types.get(ty) {
                match custom {
                    Value::String(s) => field_schema(s, types, path, depth + 1)?.0,
                    other => object_schema(other, types, path)?,
                }
            } else {
                return Err(bad(path, format!("unknown type {ty:?}")));
            }
        }
    })
}

/// `key=value` markers as kro splits them: spaces separate, except inside double quotes or
/// brackets; a quoted value is unquoted.
pub(crate) fn parse_markers(s: &str, path: &str) -> Result<Vec<(String, String)>, KroError> {
    let (mut out, mut buf, mut key): (Vec<(String, String)>, String, Option<String>) =
        (Vec::new(), String::new(), None);
    let (mut quoted, mut depth, mut escaped) = (false, 0i32, false);
    for c in s.chars() {
        match c {
            '=' if key.is_none() && !quoted && depth == 0 => {
                key = Some(buf.trim().to_owned());
                buf.clear();
            }
            '"' if !escaped => {
                quoted = !quoted;
                buf.push(c);
            }
            '\\' if quoted && !escaped => {
                escaped = true;
                buf.push(c);
                continue;
            }
            '{' | '[' if !quoted => {
                depth += 1;
                buf.push(c);
            }
            '}' | ']' if !quoted => {
                depth -= 1;
                buf.push(c);
            }
            c if c.is_whitespace() && !quoted && depth == 0 => {
                if let Some(k) = key.take() {
                    out.push((k, unquote(&buf)));
                    buf.clear();
                }
            }
            c => buf.push(c),
        }
        escaped = false;
    }
    if quoted || depth != 0 {
        return Err(bad(path, "unclosed quote or bracket in markers"));
    }
    match key {
        Some(k) => out.push((k, unquote(&buf))),
        None if !buf.trim().is_empty() => {
            return Err(bad(
                path,
                format!("marker {:?} without a value", buf.trim()),
            ));
        }
        None => {}
    }
    Ok(out)
}

fn unquote(v: &str) -> String {
    let v = v.trim();
    match v.strip_prefix('"').and_then(|x| x.strip_suffix('"')) {
        Some(inner) => inner.replace("\\\"", "\"").replace("\\\\", "\\"),
        None => v.to_owned(),
    }
}

/// Applies one marker to `schema`; `true` when it makes the field required.
fn apply_marker(schema: &mut Value, key: &str, value: &str, path: &str) -> Result<bool, KroError> {
    let ty = schema["type"].as_str().unwrap_or_default().to_owned();
    let num = |v: &str| {
        v.parse::<f64>()
            .map_err(|_| bad(path, format!("{key}: {v:?} is not a number")))
    };
    let int = |v: &str| {
        v.parse::<i64>()
            .map_err(|_| bad(path, format!("{key}: {v:?} is not an integer")))
    };
    let boolean = |v: &str| {
        v.parse::<bool>()
            .map_err(|_| bad(path, format!("{key}: {v:?} is not a boolean")))
    };
    match key {
        "required" => return boolean(value),
        "default" => schema["default"] = default_value(&ty, value, path)?,
        "description" => schema["description"] = json!(value),
        "minimum" | "maximum" => schema[key] = json!(num(value)?),
        "minLength" | "maxLength" | "minItems" | "maxItems" => schema[key] = json!(int(value)?),
        "pattern" => schema["pattern"] = json!(value),
        "validation" => push_rule(schema, value, "validation failed"),
        "immutable" => {
            if boolean(value)? {
                push_rule(schema, "self == oldSelf", "field is immutable");
            }
        }
        "enum" => {
            let items: Result<Vec<Value>, KroError> = value
                .split(',')
                .map(|v| default_value(&ty, v.trim(), path))
                .collect();
            schema["enum"] = Value::Array(items?);
        }
        "uniqueItems" => {
            if boolean(value)? {
                schema["x-kubernetes-list-type"] = json!("set");
            }
        }
        "listType" => schema["x-kubernetes-list-type"] = json!(value),
        "listMapKey" => {
            let keys = schema.as_object_mut().map(|m| {
                m.entry("x-kubernetes-list-map-keys")
                    .or_insert_with(|| json!([]))
            });
            if let Some(Value::Array(k)) = keys {
                k.push(json!(value));
            }
        }
        other => return Err(bad(path, format!("unknown marker {other:?}"))),
    }
    Ok(false)
}

fn push_rule(schema: &mut Value, rule: &str, message: &str) {
    let rules = schema.as_object_mut().map(|m| {
        m.entry("x-kubernetes-validations")
            .or_insert_with(|| json!([]))
    });
    if let Some(Value::Array(r)) = rules {
        r.push(json!({"rule": rule, "message": message}));
    }
}

/// A default (or enum value) for a field of type `ty`, as kro reads it: a string as written,
/// a number or boolean parsed, anything else as JSON.
fn default_value(ty: &str, v: &str, path: &str) -> Result<Value, KroError> {
    let wrong = || bad(path, format!("default {v:?} is not a valid {ty}"));
    Ok(match ty {
        "string" => json!(v),
        "integer" => json!(v.parse::<i64>().map_err(|_| wrong())?),
        "number" => json!(v.parse::<f64>().map_err(|_| wrong())?),
        "boolean" => json!(v.parse::<bool>().map_err(|_| wrong())?),
        _ => serde_json::from_str(v).map_err(|_| wrong())?,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn kro_defaults_example_becomes_its_schema() {
        // examples/kubernetes/defaults/rg.yaml
        let spec = json!({
            "name": "string",
            "elements": "[]string | default=[\"a\",\"b\",\"c\",\"d\"]",
            "required": "integer | required=true",
            "element": "string | default=\"e\"",
            "enabled": "boolean | default=true",
            "number": "integer | default=100",
            "config": {"field": "string", "field2": "integer | default=200", "field3": "integer | default=2002"},
        });
        let s = object_schema(&spec, &Types::new(), "spec").unwrap();
        assert_eq!(s["required"], json!(["required"]));
        assert!(
            s.get("default").is_none(),
            "required fields: no default object"
        );
        assert_eq!(
            s["properties"]["elements"],
            json!({"type": "array", "items": {"type": "string"}, "default": ["a", "b", "c", "d"]})
        );
        assert_eq!(s["properties"]["element"]["default"], "e");
        assert_eq!(s["properties"]["enabled"]["default"], true);
        assert_eq!(s["properties"]["config"]["default"], json!({}));
        assert_eq!(
            s["properties"]["config"]["properties"]["field2"],
            json!({"type": "integer", "default": 200})
        );
    }

    #[test]
    fn markers_split_as_kro_splits_them() {
        let m = parse_markers(r#" description="a b \"c\"" enum=x,y minimum=1"#, "p").unwrap();
        assert_eq!(
            m,
            [
                ("description".to_owned(), "a b \"c\"".to_owned()),
                ("enum".to_owned(), "x,y".to_owned()),
                ("minimum".to_owned(), "1".to_owned()),
            ]
        );
        assert!(parse_markers("oops", "p").is_err());
        let e = object_schema(
            &json!({"x": "integer | default=abc"}),
            &Types::new(),
            "spec",
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "spec.x: default \"abc\" is not a valid integer"
        );
    }

    #[test]
    fn custom_types_maps_and_objects() {
        let types: Types = [(
            "Server".to_owned(),
            json!({"host": "string", "port": "integer | default=80"}),
        )]
        .into();
        let s = object_schema(
            &json!({"servers": "[]Server", "tags": "map[string]string", "extra": "object", "ratio": "float | minimum=0.5"}),
            &types,
            "spec",
        )
        .unwrap();
        assert_eq!(
            s["properties"]["servers"]["items"]["properties"]["port"]["default"],
            80
        );
        assert_eq!(
            s["properties"]["tags"]["additionalProperties"],
            json!({"type": "string"})
        );
        assert_eq!(
            s["properties"]["extra"]["x-kubernetes-preserve-unknown-fields"],
            true
        );
        assert_eq!(
            s["properties"]["ratio"],
            json!({"type": "number", "minimum": 0.5})
        );
        assert!(object_schema(&json!({"x": "Nope"}), &types, "spec").is_err());
    }
}
