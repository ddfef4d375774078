//! Hook bodies as trace logs show them: Secrets' data and URL passwords redacted.

use serde_json::Value;

use super::transport::mask_url_passwords;

/// A copy of a hook body for trace logs, with the values of every Secret's `data` and
/// `stringData` replaced by `<redacted>` — also inside a Secret's annotations that hold the object
/// as JSON (the last-applied configuration of kmeta or kubectl): bodies may carry Secrets
/// (children or related objects), and logs must never contain them — and the password of every
/// URL in a string (the controller object's webhook URLs). The Authorization header is never
/// logged at all.
pub fn redact_secrets(v: &Value) -> Value {
    match v {
        Value::Object(map) => {
            let secret = map.get("kind").and_then(Value::as_str) == Some("Secret");
            let out = map
                .iter()
                .map(|(k, val)| {
                    let redacted = match (secret, k.as_str(), val) {
                        (true, "data" | "stringData", Value::Object(fields)) => Value::Object(
                            fields
                                .keys()
                                .map(|f| (f.clone(), Value::from("<redacted>")))
                                .collect(),
                        ),
                        (true, "metadata", Value::Object(meta)) => redact_annotations(meta),
                        _ => redact_secrets(val),
                    };
                    (k.clone(), redacted)
                })
                .collect();
            Value::Object(out)
        }
        Value::Array(items) => Value::Array(items.iter().map(redact_secrets).collect()),
        Value::String(text) => Value::String(mask_url_passwords(text).into_owned()),
        other => other.clone(),
    }
}

/// A Secret's metadata with every annotation that holds a JSON object (a last-applied
/// configuration) redacted as a body is.
fn redact_annotations(meta: &serde_json::Map<String, Value>) -> Value {
    let mut meta = meta.clone();
    if let Some(Value::Object(annotations)) = meta.get_mut("annotations") {
        for value in annotations.values_mut() {
            let parsed = value
                .as_str()
                .and_then(|s| serde_json::from_str::<Value>(s).ok())
                .filter(Value::is_object);
            if let Some(obj) = parsed {
                *value = Value::from(redact_secrets(&obj).to_string());
            }
        }
    }
    Value::Object(meta)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_redacted_at_any_depth() {
        let body = serde_json::json!({
            "parent": {"kind": "App", "data": {"keep": "me"}},
            "related": {"Secret.v1": {"default/s": {
                "kind": "Secret", "data": {"password": "aHVudGVyMg=="},
                "stringData": {"token": "t0k3n"}, "metadata": {"name": "s"}
            }}}
        });
        let shown = redact_secrets(&body).to_string();
        assert!(!shown.contains("aHVudGVyMg=="), "{shown}");
        assert!(!shown.contains("t0k3n"), "{shown}");
        assert!(shown.contains("\"password\":\"<redacted>\""), "{shown}");
        assert!(
            shown.contains("\"keep\":\"me\""),
            "non-secrets stay: {shown}"
        );
    }

    #[test]
    fn secret_data_inside_last_applied_annotations_is_redacted() {
        let last = serde_json::json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "s"}, "stringData": {"token": "t0k3n-inside"}});
        let body = serde_json::json!({"children": {"Secret.v1": {"s": {
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "s", "annotations": {
                "metacontroller.k8s.io/last-applied-configuration": last.to_string(),
                "kubectl.kubernetes.io/last-applied-configuration": last.to_string(),
                "team": "a"}},
            "data": {"token": "dDBrM24taW5zaWRl"}
        }}}});
        let shown = redact_secrets(&body).to_string();
        assert!(!shown.contains("t0k3n-inside"), "{shown}");
        assert!(!shown.contains("dDBrM24taW5zaWRl"), "{shown}");
        assert!(shown.contains("\"team\":\"a\""), "{shown}");
    }
}
