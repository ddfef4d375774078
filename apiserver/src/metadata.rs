//! ObjectMeta validation the API server performs on every write, whatever the kind: object
//! names (DNS subdomain, DNS label, or path segment), label keys and values, ownerReferences and
//! finalizer names. Pure functions over `serde_json::Value`, answering a [`FieldError`].

use crate::error::FieldError;
use crate::registry::ResourceDef;
use serde_json::Value;

const DNS1123_SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
const DNS1123_LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";

fn is_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

fn is_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && s.split('.').all(is_label)
}

/// Validate an object name for a resource (`metadata.name`): a path segment for RBAC objects,
/// a DNS label for namespaces and services, else a DNS subdomain.
pub(crate) fn validate_name(def: &ResourceDef, name: &str) -> Result<(), FieldError> {
    let invalid = |why: &str| {
        Err(FieldError::new(
            "metadata.name",
            format!("Invalid value: \"{name}\": {why}"),
        ))
    };
    if def.group == "rbac.authorization.k8s.io" {
        if name.is_empty()
            || name == "."
            || name == ".."
            || name.contains('/')
            || name.contains('%')
        {
            return invalid("may not be '.' or '..' and may not contain '/' or '%'");
        }
        return Ok(());
    }
    let label_only =
        def.group.is_empty() && matches!(def.plural.as_str(), "namespaces" | "services");
    if label_only {
        if !is_label(name) {
            return invalid(DNS1123_LABEL_MSG);
        }
    } else if !is_subdomain(name) {
        return invalid(DNS1123_SUBDOMAIN_MSG);
    }
    Ok(())
}

/// Validate label keys and values (qualified names / label values).
pub(crate) fn validate_labels(labels: Option<&Value>) -> Result<(), FieldError> {
    let Some(labels) = labels else { return Ok(()) };
    let Some(m) = labels.as_object() else {
        return Err(FieldError::new(
            "metadata.labels",
            "must be a map of strings",
        ));
    };
    let name_ok = |n: &str| {
        !n.is_empty()
            && n.len() <= 63
            && n.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
            && n.bytes().next().is_some_and(|b| b.is_ascii_alphanumeric())
            && n.bytes().last().is_some_and(|b| b.is_ascii_alphanumeric())
    };
    for (k, v) in m {
        let (prefix, name) = match k.split_once('/') {
            Some((p, n)) => (Some(p), n),
            None => (None, k.as_str()),
        };
        if prefix.is_some_and(|p| !is_subdomain(p)) || !name_ok(name) {
            return Err(FieldError::new(
                "metadata.labels",
                format!(
                    "Invalid value: \"{k}\": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"
                ),
            ));
        }
        let Some(val) = v.as_str() else {
            return Err(FieldError::new(
                &format!("metadata.labels[{k}]"),
                "must be a string",
            ));
        };
        if !val.is_empty() && !name_ok(val) {
            return Err(FieldError::new(
                "metadata.labels",
                format!(
                    "Invalid value: \"{val}\": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"
                ),
            ));
        }
    }
    Ok(())
}

/// Validate `metadata.ownerReferences` and `metadata.finalizers`.
pub(crate) fn validate_metadata(obj: &Value) -> Result<(), FieldError> {
    let md = obj.get("metadata");
    if let Some(refs) = md.and_then(|m| m.get("ownerReferences")) {
        let Some(refs) = refs.as_array() else {
            return Err(FieldError::new(
                "metadata.ownerReferences",
                "Invalid value: must be a list",
            ));
        };
        let mut controllers = 0;
        for (i, r) in refs.iter().enumerate() {
            for f in ["apiVersion", "kind", "name", "uid"] {
                if r.get(f).and_then(Value::as_str).is_none_or(str::is_empty) {
                    return Err(FieldError::new(
                        &format!("metadata.ownerReferences[{i}].{f}"),
                        format!("Invalid value: \"\": {f} must not be empty"),
                    ));
                }
            }
            if r.get("controller").and_then(Value::as_bool) == Some(true) {
                controllers += 1;
            }
        }
        if controllers > 1 {
            return Err(FieldError::new(
                "metadata.ownerReferences",
                "Invalid value: Only one reference can have Controller set to true",
            ));
        }
    }
    if let Some(fins) = md.and_then(|m| m.get("finalizers")) {
        let Some(fins) = fins.as_array() else {
            return Err(FieldError::new(
                "metadata.finalizers",
                "Invalid value: must be a list of strings",
            ));
        };
        for (i, f) in fins.iter().enumerate() {
            let ok = f.as_str().is_some_and(|s| {
                !s.is_empty()
                    && s.len() <= 316
                    && s.bytes().all(|b| {
                        b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'/')
                    })
                    && s.matches('/').count() <= 1
            });
            if !ok {
                return Err(FieldError::new(
                    &format!("metadata.finalizers[{i}]"),
                    format!(
                        "Invalid value: {f}: name part must consist of alphanumeric characters, '-', '_' or '.'"
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// Everything checked in `metadata` of an object about to be stored: labels, then
/// ownerReferences and finalizers.
pub(crate) fn validate_object_meta(obj: &Value) -> Result<(), FieldError> {
    validate_labels(obj.get("metadata").and_then(|m| m.get("labels")))?;
    validate_metadata(obj)
}

/// What ObjectMeta's round trip through its Go type leaves out (`omitempty`): a null or empty
/// `labels`, `annotations`, `finalizers` or `ownerReferences`, as every stored object shows.
pub(crate) fn drop_empty_fields(obj: &mut Value) {
    if let Some(md) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        md.retain(|k, v| {
            !(matches!(
                k.as_str(),
                "labels" | "annotations" | "finalizers" | "ownerReferences"
            ) && (v.is_null()
                || v.as_object().is_some_and(serde_json::Map::is_empty)
                || v.as_array().is_some_and(Vec::is_empty)))
        });
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::registry::Registry;
    use serde_json::json;

    #[test]
    fn labels() {
        assert!(
            validate_labels(Some(
                &json!({"app": "web", "example.com/x": "", "a_b.c-d": "v.1"})
            ))
            .is_ok()
        );
        assert!(validate_labels(Some(&json!({"bad key": "v"}))).is_err());
        assert!(validate_labels(Some(&json!({"k": "-v"}))).is_err());
        assert!(validate_labels(Some(&json!({"k": 1}))).is_err());
        assert!(validate_labels(Some(&json!({"Bad_Prefix/k": "v"}))).is_err());
    }

    #[test]
    fn names() {
        let r = Registry::with_builtins();
        let cm = r.lookup("", "v1", "configmaps").unwrap();
        assert!(validate_name(cm, "a.b-c").is_ok());
        assert!(validate_name(cm, "A").is_err());
        let ns = r.lookup("", "v1", "namespaces").unwrap();
        assert!(validate_name(ns, "a.b").is_err());
        let role = r
            .lookup("rbac.authorization.k8s.io", "v1", "clusterroles")
            .unwrap();
        assert!(validate_name(role, "system:foo").is_ok());
    }

    #[test]
    fn owner_refs_and_finalizers() {
        let ok = json!({"metadata": {"ownerReferences": [
            {"apiVersion": "v1", "kind": "A", "name": "a", "uid": "1", "controller": true},
            {"apiVersion": "v1", "kind": "B", "name": "b", "uid": "2"}], "finalizers": ["example.com/x", "orphan"]}});
        assert!(validate_metadata(&ok).is_ok());
        let two = json!({"metadata": {"ownerReferences": [
            {"apiVersion": "v1", "kind": "A", "name": "a", "uid": "1", "controller": true},
            {"apiVersion": "v1", "kind": "B", "name": "b", "uid": "2", "controller": true}]}});
        assert!(
            validate_metadata(&two)
                .unwrap_err()
                .message
                .contains("Only one reference")
        );
        let no_uid = json!({"metadata": {"ownerReferences": [{"apiVersion": "v1", "kind": "A", "name": "a"}]}});
        assert_eq!(
            validate_metadata(&no_uid).unwrap_err().field,
            "metadata.ownerReferences[0].uid"
        );
        assert!(
            validate_metadata(&json!({"metadata": {"finalizers": ["bad finalizer"]}})).is_err()
        );
    }
}
