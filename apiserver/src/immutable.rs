//! The immutable-field rules of built-in kinds on update of the main resource, as kube-apiserver's
//! registry strategies enforce them (`ValidateUpdate`).

use crate::error::FieldError;
use crate::registry::ResourceDef;
use serde_json::{Value, json};

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
        return Err(FieldError::new(
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
pub(crate) fn validate_update(
    def: &ResourceDef,
    old: &Value,
    new: &Value,
) -> Result<(), FieldError> {
    match (def.group.as_str(), def.plural.as_str()) {
        ("apps", "deployments" | "replicasets" | "daemonsets") => {
            immutable(old, new, &["spec", "selector"])
        }
        ("apps", "statefulsets") => statefulset(old, new),
        ("batch", "jobs") => job(old, new),
        ("", "pods") => pod(old, new),
        ("", "configmaps" | "secrets") => {
            immutable_data(old, new)?;
            if def.plural == "secrets" {
                immutable(old, new, &["type"])?;
            }
            Ok(())
        }
        ("", "services") => {
            let ip = at(old, &["spec", "clusterIP"]);
            if !ip.is_null() && ip != at(new, &["spec", "clusterIP"]) {
                return Err(FieldError::new(
                    "spec.clusterIP",
                    "Invalid value: field is immutable",
                ));
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

/// A StatefulSet's selector is immutable, and of its spec only a few fields are updatable.
fn statefulset(old: &Value, new: &Value) -> Result<(), FieldError> {
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
        return Err(FieldError::new(
            "spec",
            "Forbidden: updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', 'updateStrategy', 'revisionHistoryLimit', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden",
        ));
    }
    Ok(())
}

/// A Job's selector, completions and pod template are immutable, except for scheduling
/// directives of suspended jobs.
fn job(old: &Value, new: &Value) -> Result<(), FieldError> {
    immutable(old, new, &["spec", "selector"])?;
    immutable(old, new, &["spec", "completions"])?;
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
        return Err(FieldError::new(
            "spec.template",
            "Invalid value: field is immutable",
        ));
    }
    Ok(())
}

/// Of a Pod's spec only images, activeDeadlineSeconds, tolerations and a few more may change.
fn pod(old: &Value, new: &Value) -> Result<(), FieldError> {
    if mask_images(at(old, &["spec"])) != mask_images(at(new, &["spec"])) {
        return Err(FieldError::new(
            "spec",
            "Forbidden: pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)",
        ));
    }
    Ok(())
}

/// An `immutable` ConfigMap or Secret keeps `immutable`, its data and its type.
fn immutable_data(old: &Value, new: &Value) -> Result<(), FieldError> {
    if at(old, &["immutable"]) != &json!(true) {
        return Ok(());
    }
    if at(new, &["immutable"]) != &json!(true) {
        return Err(FieldError::new(
            "immutable",
            "Forbidden: field is immutable when `immutable` is set",
        ));
    }
    for f in ["data", "binaryData", "type"] {
        if at(old, &[f]) != at(new, &[f]) {
            return Err(FieldError::new(
                f,
                "Forbidden: field is immutable when `immutable` is set",
            ));
        }
    }
    Ok(())
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
