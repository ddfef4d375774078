//! Label-owned children (kmeta, for the CompositeControllers kmeta makes of kro's
//! ResourceGraphDefinitions only): how a parent owns a child an owner reference cannot hold —
//! a cluster-scoped child of a namespaced parent, or a child in another namespace than its
//! parent's. Such a child is tied to its parent by kro's instance labels, the parent's UID
//! first; it is observed by that label (never adopted: a child carrying another parent's UID is
//! not this parent's), written as any child (dynapply, last-applied), deleted with a UID
//! precondition when no longer desired, and deleted by the parent's finalizer when the parent
//! is deleted. Every other child keeps its owner reference. Design: `docs/design/cel-hooks.md`.

use serde_json::{Map, Value, json};

use crate::object::{ObjectView, meta_str};

/// The label carrying the UID of the instance (parent) a child was made for (kro's).
pub const INSTANCE_ID_LABEL: &str = "kro.run/instance-id";
/// The label carrying the instance's name (kro's).
pub const INSTANCE_NAME_LABEL: &str = "kro.run/instance-name";
/// The label carrying the instance's namespace, for a namespaced instance (kro's).
pub const INSTANCE_NAMESPACE_LABEL: &str = "kro.run/instance-namespace";

/// How a controller's parents own their children.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ChildOwnership {
    /// By owner reference only, as Metacontroller: a child an owner reference cannot hold is
    /// refused.
    #[default]
    OwnerReferences,
    /// By owner reference where one can hold the child, else by kro's instance labels
    /// ([`owner_reference_holds`]).
    LabelsWhereReferencesCannot,
}

/// Whether an owner reference of `parent` can hold `child`: the parent is cluster-scoped, or
/// the child is in the parent's namespace (Kubernetes' garbage collector refuses a namespaced
/// owner of a cluster-scoped object, and an owner in another namespace).
pub fn owner_reference_holds(parent: &Value, child: &Value) -> bool {
    let parent_ns = meta_str(parent, "namespace");
    parent_ns.is_empty() || parent_ns == meta_str(child, "namespace")
}

/// Puts kro's instance labels of `parent` in a child's metadata `m`: its UID, name and (for a
/// namespaced parent) namespace, replacing what the child said: these labels are what ties the
/// child to this parent.
pub fn add_owner_labels(m: &mut Map<String, Value>, parent: &Value) {
    let labels = m.entry("labels").or_insert_with(|| json!({}));
    if !labels.is_object() {
        *labels = json!({});
    }
    if let Some(l) = labels.as_object_mut() {
        l.insert(INSTANCE_ID_LABEL.into(), json!(meta_str(parent, "uid")));
        l.insert(INSTANCE_NAME_LABEL.into(), json!(meta_str(parent, "name")));
        let ns = meta_str(parent, "namespace");
        if !ns.is_empty() {
            l.insert(INSTANCE_NAMESPACE_LABEL.into(), json!(ns));
        }
    }
}

/// Whether `child` is a label-owned child of `parent` (a namespaced instance): it carries the
/// parent's UID in [`INSTANCE_ID_LABEL`] and no controller owner reference. That is a child
/// where an owner reference of the parent could not hold it, or one kro made in the parent's
/// namespace (kro owns by labels only): a team moving a live instance from kro to kmeta has
/// its children taken over, updated in place, and from the next write owned by reference
/// ([`super::plan::owned`]). A child carrying another UID is never this parent's.
pub fn label_owned_by(parent: &Value, child: &impl ObjectView) -> bool {
    let uid = meta_str(parent, "uid");
    !uid.is_empty()
        && child.label(INSTANCE_ID_LABEL) == Some(uid)
        && child.controller().is_none()
        && !meta_str(parent, "namespace").is_empty()
}

/// The parent a label-owned `child` names: (namespace, name, uid), from its instance labels.
/// `None` when it carries no instance UID or name.
pub fn labelled_owner(child: &impl ObjectView) -> Option<(&str, &str, &str)> {
    let uid = child.label(INSTANCE_ID_LABEL).filter(|u| !u.is_empty())?;
    let name = child.label(INSTANCE_NAME_LABEL).filter(|n| !n.is_empty())?;
    let ns = child.label(INSTANCE_NAMESPACE_LABEL).unwrap_or_default();
    Some((ns, name, uid))
}

/// Sets `labels` in an object's metadata `m`; whether one changed.
pub fn set_labels(
    m: &mut Map<String, Value>,
    labels: &std::collections::BTreeMap<String, String>,
) -> bool {
    if labels.is_empty() {
        return false;
    }
    let have = m
        .entry("labels")
        .or_insert_with(|| Value::Object(Map::new()));
    if !have.is_object() {
        *have = Value::Object(Map::new());
    }
    let Some(have) = have.as_object_mut() else {
        return false;
    };
    let mut changed = false;
    for (k, v) in labels {
        if have.get(k).and_then(Value::as_str) != Some(v) {
            have.insert(k.clone(), Value::String(v.clone()));
            changed = true;
        }
    }
    changed
}

/// Who owns `existing`, an object holding a child's name: its controller's UID, else, when the
/// child would be owned by label (`by_label`), the instance UID its label carries; `""` when
/// neither.
pub fn holder_uid(existing: &Value, by_label: bool) -> &str {
    match crate::object::controller_uid(existing) {
        Some(uid) => uid,
        None if by_label => existing
            .pointer("/metadata/labels")
            .and_then(|l| l.get(INSTANCE_ID_LABEL))
            .and_then(Value::as_str)
            .unwrap_or_default(),
        None => "",
    }
}

/// Whether `obj` lacks one of `labels` (or holds another value).
pub fn labels_missing(obj: &Value, labels: &std::collections::BTreeMap<String, String>) -> bool {
    labels.iter().any(|(k, v)| {
        obj.pointer("/metadata/labels")
            .and_then(|l| l.get(k))
            .and_then(Value::as_str)
            != Some(v)
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::reconcile::decide::fixtures::{child, parent};

    fn labelled(ns: &str, uid: &str) -> Value {
        let mut c = child("a", json!({}), None);
        c["metadata"]["namespace"] = json!(ns);
        add_owner_labels(c["metadata"].as_object_mut().unwrap(), &parent());
        c["metadata"]["labels"][INSTANCE_ID_LABEL] = json!(uid);
        c
    }

    #[test]
    fn an_owner_reference_holds_only_children_in_the_parents_namespace() {
        let p = parent();
        assert!(owner_reference_holds(&p, &child("a", json!({}), None)));
        let mut other = child("a", json!({}), None);
        other["metadata"]["namespace"] = json!("tenant");
        assert!(!owner_reference_holds(&p, &other));
        other["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("namespace");
        assert!(!owner_reference_holds(&p, &other), "cluster-scoped");
        let mut cluster = p.clone();
        cluster["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("namespace");
        assert!(owner_reference_holds(&cluster, &other));
    }

    #[test]
    fn the_labels_name_the_parent_and_replace_what_the_child_said() {
        let mut c = child("a", json!({INSTANCE_ID_LABEL: "forged", "app": "x"}), None);
        add_owner_labels(c["metadata"].as_object_mut().unwrap(), &parent());
        assert_eq!(
            c["metadata"]["labels"],
            json!({"app": "x", INSTANCE_ID_LABEL: "u1", INSTANCE_NAME_LABEL: "p",
                INSTANCE_NAMESPACE_LABEL: "ns"})
        );
        assert_eq!(labelled_owner(&c), Some(("ns", "p", "u1")));
        assert_eq!(labelled_owner(&child("b", json!({}), None)), None);
    }

    #[test]
    fn the_holder_of_a_label_owned_name_is_the_instance_its_label_names() {
        let theirs = labelled("tenant", "u2");
        assert_eq!(holder_uid(&theirs, true), "u2");
        assert_eq!(
            holder_uid(&theirs, false),
            "",
            "by reference: no controller"
        );
        let mut controlled = theirs.clone();
        controlled["metadata"]["ownerReferences"] = json!([{"apiVersion": "x/v1", "kind": "X", "name": "o", "uid": "u9", "controller": true}]);
        assert_eq!(holder_uid(&controlled, true), "u9");
    }

    #[test]
    fn only_an_uncontrolled_child_carrying_this_parents_uid_is_label_owned() {
        let p = parent();
        assert!(label_owned_by(&p, &labelled("tenant", "u1")));
        assert!(label_owned_by(&p, &labelled("", "u1")), "cluster-scoped");
        assert!(!label_owned_by(&p, &labelled("tenant", "u2")), "another's");
        assert!(
            label_owned_by(&p, &labelled("ns", "u1")),
            "made by kro in the parent's namespace: taken over"
        );
        let mut controlled = labelled("tenant", "u1");
        controlled["metadata"]["ownerReferences"] = json!([{"apiVersion": "x/v1", "kind": "X", "name": "o", "uid": "u9", "controller": true}]);
        assert!(!label_owned_by(&p, &controlled), "controlled by another");
        let mut cluster = p.clone();
        cluster["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("namespace");
        assert!(!label_owned_by(&cluster, &labelled("tenant", "u1")));
    }
}
