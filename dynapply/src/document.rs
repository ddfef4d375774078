//! Reading JSON/YAML documents and rendering YAML (used by the CLI; no IO here).

use crate::error::Error;
use serde_json::Value;

/// Parses one JSON or YAML document into a JSON value. Text whose first non-blank character is
/// `{` or `[` is parsed as JSON (exact numbers, precise errors), anything else as YAML 1.2.
/// `source_name` (e.g. a file name) prefixes error messages.
pub fn parse_document(source_name: &str, text: &str) -> Result<Value, Error> {
    let trimmed = text.trim_start_matches(|c: char| c.is_whitespace() || c == '\u{feff}');
    if trimmed.starts_with('{') || trimmed.starts_with('[') {
        return serde_json::from_str(trimmed).map_err(|e| Error::Parse {
            source_name: source_name.to_owned(),
            message: format!("invalid JSON: {e}"),
        });
    }
    serde_saphyr::from_str::<Value>(text).map_err(|e| Error::Parse {
        source_name: source_name.to_owned(),
        message: format!("invalid YAML: {}", yaml_cause(&e)),
    })
}

/// The parser's message on one line, without its source snippet and its own `error: ` prefix
/// (the CLI already says `error:` once).
fn yaml_cause(e: &serde_saphyr::Error) -> String {
    let text = e.without_snippet().to_string();
    let first = text.lines().next().unwrap_or_default().trim();
    first.strip_prefix("error: ").unwrap_or(first).to_owned()
}

/// Renders a value as block YAML, keys in the value's own order.
pub fn to_yaml(v: &Value) -> Result<String, Error> {
    serde_saphyr::to_string(v).map_err(|e| Error::Render {
        what: "YAML".to_owned(),
        message: e.to_string(),
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn json_and_yaml() {
        assert_eq!(
            parse_document("a", " {\"a\": [1, 2.5]}").unwrap(),
            json!({"a": [1, 2.5]})
        );
        assert_eq!(
            parse_document("b", "a:\n  - 1\n  - x: \"80\"\n    y: 80\n").unwrap(),
            json!({"a": [1, {"x": "80", "y": 80}]})
        );
        let err = parse_document("bad.json", "{\"a\": }")
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("bad.json: invalid JSON"), "{err}");
        let err = parse_document("bad.yaml", "a: [1, 2\nb: c: d")
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("bad.yaml: invalid YAML: "), "{err}");
        assert!(!err.contains('\n'));
        assert_eq!(err.matches("error").count(), 0, "{err}");
    }

    #[test]
    fn yaml_round_trip_keeps_order() {
        let v = json!({"z": 1, "a": {"list": ["x", {"b": true}]}, "s": "multi\nline"});
        let text = to_yaml(&v).unwrap();
        assert!(
            text.find("z:").unwrap() < text.find("a:").unwrap(),
            "{text}"
        );
        assert_eq!(parse_document("t", &text).unwrap(), v);
    }
}
