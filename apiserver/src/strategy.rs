//! What kube-apiserver's registry strategies do to a written built-in object beyond its schema:
//! the defaults of a Namespace (the `kubernetes.io/metadata.name` label, `status.phase`), and
//! which fields a `/status` write may change.
//!
//! Pure functions on JSON values; the engine calls them on every write. Checked against
//! Kubernetes' `pkg/registry/*/*/strategy.go` (the `PrepareForUpdate` of each status strategy)
//! and `pkg/apis/core/v1/defaults.go` (`SetDefaults_Namespace`, `SetDefaults_NamespaceStatus`).

use serde_json::{Value, json};

/// The label kube-apiserver sets on every Namespace to its name (since Kubernetes 1.21).
pub(crate) const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// Defaulting kube-apiserver applies to a decoded built-in object of `group`/`plural`, on
/// every write (create, update, patch, apply, `/status`): a Namespace with a name gets the
/// `kubernetes.io/metadata.name` label set to it, and an empty or missing `status.phase`
/// becomes `Active`.
pub(crate) fn default_builtin(group: &str, plural: &str, obj: &mut Value) {
    if !(group.is_empty() && plural == "namespaces" && obj.is_object()) {
        return;
    }
    let name = obj
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    if !name.is_empty() {
        if !obj.get("metadata").is_some_and(Value::is_object) {
            obj["metadata"] = json!({});
        }
        let meta = &mut obj["metadata"];
        if !meta.get("labels").is_some_and(Value::is_object) {
            meta["labels"] = json!({});
        }
        meta["labels"][NAMESPACE_NAME_LABEL] = json!(name);
    }
    if !obj.get("status").is_some_and(Value::is_object) {
        obj["status"] = json!({});
    }
    let phase = obj["status"].get("phase").and_then(Value::as_str);
    if phase.is_none_or(str::is_empty) {
        obj["status"]["phase"] = json!("Active");
    }
}

/// Which metadata fields a `/status` write of a kind keeps from the stored object, beyond the
/// identity every update keeps (name, uid, resourceVersion, creation and deletion time, ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StatusMeta {
    /// Every metadata field (custom resources and CRDs: "update is only allowed to set status").
    All,
    /// The listed fields; labels, annotations and the rest come from the request.
    Only(&'static [&'static str]),
}

/// What a `/status` write of a resource keeps of the stored object's metadata: custom resources
/// and CRDs all of it; a Deployment its labels; a Pod its ownerReferences; the other built-ins
/// nothing beyond identity (their status strategies reset only `spec`).
pub(crate) fn status_keeps_meta(group: &str, plural: &str, custom: bool) -> StatusMeta {
    match (group, plural) {
        _ if custom => StatusMeta::All,
        ("apiextensions.k8s.io", "customresourcedefinitions") => StatusMeta::All,
        ("apps", "deployments") => StatusMeta::Only(&["labels"]),
        ("", "pods") => StatusMeta::Only(&["ownerReferences"]),
        _ => StatusMeta::Only(&[]),
    }
}

/// The object a `/status` write stores: the stored object with the request's `status`, and the
/// request's metadata where [`status_keeps_meta`] lets it through. Everything else (`spec`,
/// top-level fields) stays as stored.
pub(crate) fn status_write(keeps: StatusMeta, old: &Value, new: &Value) -> Value {
    let mut merged = old.clone();
    set_or_remove(&mut merged, "status", new.get("status"));
    let StatusMeta::Only(kept) = keeps else {
        return merged;
    };
    let mut meta = new.get("metadata").cloned().unwrap_or_else(|| json!({}));
    for field in kept {
        set_or_remove(&mut meta, field, old.pointer(&format!("/metadata/{field}")));
    }
    merged["metadata"] = meta;
    merged
}

fn set_or_remove(obj: &mut Value, field: &str, v: Option<&Value>) {
    match (v, obj.as_object_mut()) {
        (Some(v), Some(m)) => {
            m.insert(field.to_string(), v.clone());
        }
        (None, Some(m)) => {
            m.remove(field);
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_namespace_gets_its_name_label_and_phase_active() {
        let mut ns = json!({"metadata": {"name": "team-a", "labels": {"x": "1"}}});
        default_builtin("", "namespaces", &mut ns);
        assert_eq!(
            ns,
            json!({"metadata": {"name": "team-a", "labels": {"x": "1", NAMESPACE_NAME_LABEL: "team-a"}},
                   "status": {"phase": "Active"}})
        );
    }

    #[test]
    fn the_name_label_is_reset_and_a_set_phase_kept() {
        let mut ns = json!({"metadata": {"name": "a", "labels": {NAMESPACE_NAME_LABEL: "b"}},
                            "status": {"phase": "Terminating"}});
        default_builtin("", "namespaces", &mut ns);
        assert_eq!(ns["metadata"]["labels"][NAMESPACE_NAME_LABEL], "a");
        assert_eq!(ns["status"]["phase"], "Terminating");
    }

    #[test]
    fn a_nameless_namespace_and_other_kinds_get_no_label() {
        let mut ns = json!({"metadata": {"generateName": "a-"}});
        default_builtin("", "namespaces", &mut ns);
        assert!(ns["metadata"].get("labels").is_none());
        let mut cm = json!({"metadata": {"name": "a"}});
        default_builtin("", "configmaps", &mut cm);
        assert_eq!(cm, json!({"metadata": {"name": "a"}}));
    }

    #[test]
    fn a_builtin_status_write_takes_labels_but_not_spec() {
        let old = json!({"metadata": {"name": "a", "labels": {"l": "1"}}, "spec": {"s": 1}, "status": {}});
        let new = json!({"metadata": {"name": "a", "labels": {"l": "2"}}, "spec": {"s": 2}, "status": {"p": 1}});
        let ns = status_write(status_keeps_meta("", "namespaces", false), &old, &new);
        assert_eq!(
            ns,
            json!({"metadata": {"name": "a", "labels": {"l": "2"}}, "spec": {"s": 1}, "status": {"p": 1}})
        );
        let dep = status_write(status_keeps_meta("apps", "deployments", false), &old, &new);
        assert_eq!(dep["metadata"]["labels"]["l"], "1");
        assert_eq!(dep["status"]["p"], 1);
    }

    #[test]
    fn a_pod_status_write_keeps_owner_references_and_a_custom_resource_all_metadata() {
        let old = json!({"metadata": {"ownerReferences": [{"uid": "u"}], "labels": {"l": "1"}}});
        let new = json!({"metadata": {"labels": {"l": "2"}}, "status": {"phase": "Running"}});
        let pod = status_write(status_keeps_meta("", "pods", false), &old, &new);
        assert_eq!(pod["metadata"]["ownerReferences"][0]["uid"], "u");
        assert_eq!(pod["metadata"]["labels"]["l"], "2");
        let cr = status_write(status_keeps_meta("example.com", "things", true), &old, &new);
        assert_eq!(cr["metadata"], old["metadata"]);
        assert_eq!(cr["status"]["phase"], "Running");
    }
}
