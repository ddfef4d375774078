//! Label selector matching (`metav1.LabelSelector` semantics).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde_json::Value;

/// An invalid selector.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SelectorError {
    /// Unknown operator.
    #[error("label selector: unknown operator {operator:?} for key {key:?}")]
    Operator {
        /// Key.
        key: String,
        /// Operator as given.
        operator: String,
    },
    /// `In`/`NotIn` without values, or `Exists`/`DoesNotExist` with values.
    #[error("label selector: operator {operator} for key {key:?} {problem}")]
    Values {
        /// Key.
        key: String,
        /// Operator.
        operator: String,
        /// What is wrong.
        problem: &'static str,
    },
    /// The selector did not decode.
    #[error("label selector at {path}: {message}")]
    Decode {
        /// Field path.
        path: String,
        /// Cause.
        message: String,
    },
}

/// True when the selector has neither matchLabels nor matchExpressions.
pub fn is_empty(sel: &LabelSelector) -> bool {
    sel.match_labels.as_ref().is_none_or(BTreeMap::is_empty)
        && sel.match_expressions.as_ref().is_none_or(Vec::is_empty)
}

/// A label every object `sel` matches carries: its first `matchLabels` pair (none when it has
/// only expressions). Indexes look objects up by it; the whole selector is still checked.
pub fn required_label(sel: &LabelSelector) -> Option<(&str, &str)> {
    let (k, v) = sel.match_labels.as_ref()?.iter().next()?;
    Some((k, v))
}

/// Does `labels` satisfy `sel`? An empty selector matches everything.
pub fn matches(
    sel: &LabelSelector,
    labels: &BTreeMap<String, String>,
) -> Result<bool, SelectorError> {
    matches_by(sel, |k| labels.get(k).map(String::as_str))
}

/// Whether the string labels of `obj` (`metadata.labels`; labels that are not strings are not
/// labels) match `sel`, read in place.
pub fn matches_object(
    sel: &LabelSelector,
    obj: &impl crate::object::ObjectView,
) -> Result<bool, SelectorError> {
    matches_by(sel, |k| obj.label(k))
}

/// Whether the labels read by `label` match `sel`.
fn matches_by<'l>(
    sel: &LabelSelector,
    label: impl Fn(&str) -> Option<&'l str>,
) -> Result<bool, SelectorError> {
    if let Some(ml) = &sel.match_labels {
        for (k, v) in ml {
            if label(k) != Some(v.as_str()) {
                return Ok(false);
            }
        }
    }
    for req in sel.match_expressions.iter().flatten() {
        let values = req.values.as_deref().unwrap_or_default();
        let have = label(&req.key);
        let listed = |h: &str| values.iter().any(|v| v == h);
        let need_values = |ok: bool, problem| {
            if ok {
                Ok(())
            } else {
                Err(SelectorError::Values {
                    key: req.key.clone(),
                    operator: req.operator.clone(),
                    problem,
                })
            }
        };
        let ok = match req.operator.as_str() {
            "In" => {
                need_values(!values.is_empty(), "needs values")?;
                have.is_some_and(listed)
            }
            "NotIn" => {
                need_values(!values.is_empty(), "needs values")?;
                have.is_none_or(|h| !listed(h))
            }
            "Exists" => {
                need_values(values.is_empty(), "takes no values")?;
                have.is_some()
            }
            "DoesNotExist" => {
                need_values(values.is_empty(), "takes no values")?;
                have.is_none()
            }
            other => {
                return Err(SelectorError::Operator {
                    key: req.key.clone(),
                    operator: other.to_owned(),
                });
            }
        };
        if !ok {
            return Ok(false);
        }
    }
    Ok(true)
}

/// The labels of a JSON object (`metadata.labels`; non-string values are ignored).
pub fn labels_of(obj: &Value) -> BTreeMap<String, String> {
    use crate::object::ObjectView as _;
    obj.labels()
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

/// Decodes a selector found at `path` in some object.
pub fn decode(v: &Value, path: &str) -> Result<LabelSelector, SelectorError> {
    serde_json::from_value(v.clone()).map_err(|e| SelectorError::Decode {
        path: path.to_owned(),
        message: e.to_string(),
    })
}

/// A selector matching exactly `key=value`.
pub fn single(key: &str, value: &str) -> LabelSelector {
    LabelSelector {
        match_labels: Some(BTreeMap::from([(key.to_owned(), value.to_owned())])),
        match_expressions: None,
    }
}

/// The selector in the API's string form (`a=b,c in (d,e),!f`), for list/watch requests.
pub fn to_query(sel: &LabelSelector) -> String {
    let mut parts = Vec::new();
    for (k, v) in sel.match_labels.iter().flatten() {
        parts.push(format!("{k}={v}"));
    }
    for req in sel.match_expressions.iter().flatten() {
        let vals = req.values.as_deref().unwrap_or_default().join(",");
        match req.operator.as_str() {
            "In" => parts.push(format!("{} in ({vals})", req.key)),
            "NotIn" => parts.push(format!("{} notin ({vals})", req.key)),
            "Exists" => parts.push(req.key.clone()),
            _ => parts.push(format!("!{}", req.key)),
        }
    }
    parts.join(",")
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn sel(v: Value) -> LabelSelector {
        decode(&v, "spec.selector").unwrap()
    }

    #[test]
    fn a_required_label_is_one_every_match_carries() {
        let both = sel(json!({"matchLabels": {"tier": "db", "app": "x"}}));
        let (k, v) = required_label(&both).unwrap();
        let mut labels = BTreeMap::from([("app".to_owned(), "x".to_owned())]);
        labels.insert("tier".into(), "db".into());
        assert!(matches(&both, &labels).unwrap());
        labels.remove(k);
        assert!(
            !matches(&both, &labels).unwrap(),
            "{k}={v} was not required"
        );
        let exprs = sel(json!({"matchExpressions": [{"key": "app", "operator": "Exists"}]}));
        assert_eq!(required_label(&exprs), None);
        assert_eq!(required_label(&sel(json!({"matchLabels": {}}))), None);
    }
    fn labels(v: Value) -> BTreeMap<String, String> {
        labels_of(&json!({"metadata": {"labels": v}}))
    }

    #[test]
    fn matching_in_place_agrees_with_matching_the_label_map() {
        let selectors = [
            json!({"matchLabels": {"app": "web"}}),
            json!({"matchExpressions": [{"key": "tier", "operator": "In", "values": ["a", "b"]}]}),
            json!({"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["a"]}]}),
            json!({"matchExpressions": [{"key": "legacy", "operator": "Exists"}]}),
            json!({"matchExpressions": [{"key": "legacy", "operator": "DoesNotExist"}]}),
            json!({}),
        ];
        let objects = [
            json!({"metadata": {"labels": {"app": "web", "tier": "a"}}}),
            json!({"metadata": {"labels": {"app": "db", "tier": "c", "legacy": "1"}}}),
            json!({"metadata": {"labels": {"app": 7, "legacy": null}}}),
            json!({"metadata": {"labels": null}}),
            json!({"metadata": {}}),
            json!({}),
        ];
        for s in selectors.map(sel) {
            for o in &objects {
                assert_eq!(
                    matches_object(&s, o).unwrap(),
                    matches(&s, &labels_of(o)).unwrap(),
                    "{s:?} on {o}"
                );
            }
        }
    }

    #[test]
    fn match_labels_and_expressions() {
        let s = sel(json!({"matchLabels": {"app": "web"},
            "matchExpressions": [{"key": "tier", "operator": "In", "values": ["a", "b"]},
                                 {"key": "legacy", "operator": "DoesNotExist"}]}));
        assert!(matches(&s, &labels(json!({"app": "web", "tier": "a"}))).unwrap());
        assert!(!matches(&s, &labels(json!({"app": "web", "tier": "c"}))).unwrap());
        assert!(
            !matches(
                &s,
                &labels(json!({"app": "web", "tier": "a", "legacy": "1"}))
            )
            .unwrap()
        );
        assert!(!matches(&s, &labels(json!({"tier": "a"}))).unwrap());
    }

    #[test]
    fn not_in_and_exists() {
        let s = sel(
            json!({"matchExpressions": [{"key": "x", "operator": "NotIn", "values": ["1"]},
                                                 {"key": "y", "operator": "Exists"}]}),
        );
        assert!(matches(&s, &labels(json!({"y": ""}))).unwrap());
        assert!(!matches(&s, &labels(json!({"x": "1", "y": ""}))).unwrap());
        assert!(!matches(&s, &labels(json!({"x": "2"}))).unwrap());
    }

    #[test]
    fn empty_matches_everything_and_is_detected() {
        let s = sel(json!({}));
        assert!(is_empty(&s));
        assert!(matches(&s, &labels(json!({"a": "b"}))).unwrap());
        assert!(is_empty(&sel(json!({"matchLabels": {}}))));
    }

    #[test]
    fn bad_operator_is_an_error() {
        let s = sel(json!({"matchExpressions": [{"key": "x", "operator": "Like"}]}));
        let e = matches(&s, &BTreeMap::new()).unwrap_err();
        assert!(e.to_string().contains("unknown operator \"Like\""), "{e}");
        let s = sel(json!({"matchExpressions": [{"key": "x", "operator": "In"}]}));
        assert!(matches(&s, &BTreeMap::new()).is_err());
    }

    #[test]
    fn query_string() {
        let s = sel(json!({"matchLabels": {"a": "b"},
            "matchExpressions": [{"key": "t", "operator": "In", "values": ["x", "y"]},
                                 {"key": "n", "operator": "DoesNotExist"}]}));
        assert_eq!(to_query(&s), "a=b,t in (x,y),!n");
    }
}
