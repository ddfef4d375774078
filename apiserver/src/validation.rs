//! Object validation the real API server performs regardless of schema: ownerReferences,
//! finalizer names, and the immutable-field rules of built-in kinds on update.

use crate::registry::ResourceDef;
use serde_json::{Value, json};

/// A validation failure: field path and message (`Invalid value: ...`, `Forbidden: ...`).
#[derive(Debug, Clone, PartialEq)]
pub struct FieldError {
    /// Field path, e.g. `spec.selector`.
    pub field: String,
    /// Message, starting with the error type like the real server's.
    pub message: String,
}

fn err(field: &str, message: impl Into<String>) -> FieldError {
    FieldError {
        field: field.to_string(),
        message: message.into(),
    }
}

/// Validate `metadata.ownerReferences` and `metadata.finalizers`.
pub fn validate_metadata(obj: &Value) -> Result<(), FieldError> {
    let md = obj.get("metadata");
    if let Some(refs) = md.and_then(|m| m.get("ownerReferences")) {
        let Some(refs) = refs.as_array() else {
            return Err(err(
                "metadata.ownerReferences",
                "Invalid value: must be a list",
            ));
        };
        let mut controllers = 0;
        for (i, r) in refs.iter().enumerate() {
            for f in ["apiVersion", "kind", "name", "uid"] {
                if r.get(f).and_then(Value::as_str).is_none_or(str::is_empty) {
                    return Err(err(
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
            return Err(err(
                "metadata.ownerReferences",
                "Invalid value: Only one reference can have Controller set to true",
            ));
        }
    }
    if let Some(fins) = md.and_then(|m| m.get("finalizers")) {
        let Some(fins) = fins.as_array() else {
            return Err(err(
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
                return Err(err(
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

fn at<'a>(v: &'a Value, path: &[&str]) -> &'a Value {
    static NULL: Value = Value::Null;
    let mut cur = v;
    for p in path {
        match cur.get(*p) {
            Some(n) => cur = n,
            None => return &NULL,
        }
    }
    cur
}

fn immutable(old: &Value, new: &Value, path: &[&str]) -> Result<(), FieldError> {
    let (o, n) = (at(old, path), at(new, path));
    if o != n {
        return Err(err(
            &path.join("."),
            format!("Invalid value: {n}: field is immutable"),
        ));
    }
    Ok(())
}

fn without(v: &Value, keys: &[&str]) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, _)| !keys.contains(&k.as_str()))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        ),
        other => other.clone(),
    }
}

fn mask_images(spec: &Value) -> Value {
    let mut s = without(
        spec,
        &[
            "activeDeadlineSeconds",
            "tolerations",
            "terminationGracePeriodSeconds",
            "schedulingGates",
        ],
    );
    for list in ["containers", "initContainers"] {
        if let Some(Value::Array(cs)) = s.get_mut(list) {
            for c in cs.iter_mut() {
                if let Some(m) = c.as_object_mut() {
                    m.insert("image".into(), json!(""));
                }
            }
        }
    }
    s
}

/// Immutable-field rules of built-in kinds for an update of the main resource.
pub fn validate_update(def: &ResourceDef, old: &Value, new: &Value) -> Result<(), FieldError> {
    match (def.group.as_str(), def.plural.as_str()) {
        ("apps", "deployments" | "replicasets" | "daemonsets") => {
            immutable(old, new, &["spec", "selector"])
        }
        ("apps", "statefulsets") => {
            immutable(old, new, &["spec", "selector"])?;
            let updatable = [
                "replicas",
                "ordinals",
                "template",
                "updateStrategy",
                "persistentVolumeClaimRetentionPolicy",
                "minReadySeconds",
                "revisionHistoryLimit",
            ];
            if without(at(old, &["spec"]), &updatable) != without(at(new, &["spec"]), &updatable) {
                return Err(err(
                    "spec",
                    "Forbidden: updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', 'updateStrategy', 'revisionHistoryLimit', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden",
                ));
            }
            Ok(())
        }
        ("batch", "jobs") => {
            immutable(old, new, &["spec", "selector"])?;
            immutable(old, new, &["spec", "completions"])?;
            // the pod template is immutable except for scheduling directives of suspended jobs
            let strip = |v: &Value| {
                let mut t = at(v, &["spec", "template"]).clone();
                if let Some(m) = t.get_mut("metadata").and_then(Value::as_object_mut) {
                    m.remove("labels");
                    m.remove("annotations");
                }
                if let Some(m) = t.get_mut("spec").and_then(Value::as_object_mut) {
                    for k in ["nodeSelector", "tolerations", "affinity", "schedulingGates"] {
                        m.remove(k);
                    }
                }
                t
            };
            if strip(old) != strip(new) {
                return Err(err("spec.template", "Invalid value: field is immutable"));
            }
            Ok(())
        }
        ("", "pods") => {
            if mask_images(at(old, &["spec"])) != mask_images(at(new, &["spec"])) {
                return Err(err(
                    "spec",
                    "Forbidden: pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)",
                ));
            }
            Ok(())
        }
        ("", "configmaps" | "secrets") => {
            if at(old, &["immutable"]) == &json!(true) {
                if at(new, &["immutable"]) != &json!(true) {
                    return Err(err(
                        "immutable",
                        "Forbidden: field is immutable when `immutable` is set",
                    ));
                }
                for f in ["data", "binaryData", "type"] {
                    if at(old, &[f]) != at(new, &[f]) {
                        return Err(err(
                            f,
                            "Forbidden: field is immutable when `immutable` is set",
                        ));
                    }
                }
            }
            if def.plural == "secrets" {
                immutable(old, new, &["type"])?;
            }
            Ok(())
        }
        ("", "services") => {
            let ip = at(old, &["spec", "clusterIP"]);
            if !ip.is_null() && ip != at(new, &["spec", "clusterIP"]) {
                return Err(err("spec.clusterIP", "Invalid value: field is immutable"));
            }
            Ok(())
        }
        ("apiextensions.k8s.io", "customresourcedefinitions") => {
            immutable(old, new, &["spec", "scope"])?;
            immutable(old, new, &["spec", "group"])?;
            immutable(old, new, &["spec", "names", "plural"])
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::registry::Registry;

    fn def(g: &str, p: &str) -> ResourceDef {
        Registry::with_builtins()
            .lookup(g, "v1", p)
            .unwrap()
            .clone()
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

    #[test]
    fn immutable_fields() {
        let d = def("apps", "deployments");
        let a = json!({"spec": {"selector": {"matchLabels": {"a": "1"}}, "replicas": 1}});
        let mut b = a.clone();
        b["spec"]["replicas"] = json!(2);
        assert!(validate_update(&d, &a, &b).is_ok());
        b["spec"]["selector"]["matchLabels"]["a"] = json!("2");
        assert_eq!(
            validate_update(&d, &a, &b).unwrap_err().field,
            "spec.selector"
        );
        let p = def("", "pods");
        let pa = json!({"spec": {"containers": [{"name": "c", "image": "a"}]}});
        let mut pb = pa.clone();
        pb["spec"]["containers"][0]["image"] = json!("b");
        assert!(validate_update(&p, &pa, &pb).is_ok());
        pb["spec"]["containers"][0]["env"] = json!([]);
        assert!(validate_update(&p, &pa, &pb).is_err());
        let c = def("", "configmaps");
        let ca = json!({"immutable": true, "data": {"a": "1"}});
        let cb = json!({"immutable": true, "data": {"a": "2"}});
        assert!(validate_update(&c, &ca, &cb).is_err());
        let s = def("apps", "statefulsets");
        let sa = json!({"spec": {"serviceName": "x", "replicas": 1}});
        let mut sb = sa.clone();
        sb["spec"]["replicas"] = json!(3);
        assert!(validate_update(&s, &sa, &sb).is_ok());
        sb["spec"]["serviceName"] = json!("y");
        assert!(validate_update(&s, &sa, &sb).is_err());
    }
}
