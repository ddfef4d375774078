//! Desired children: each one's type is declared, its namespace and name are allowed, it
//! matches the parent's selector; and their identity ([`child_key`]).

use std::borrow::Borrow;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde_json::{Map, Value};

use crate::api::ChildUpdateMethod;
use crate::hook::wire::group_key;
use crate::object::{ObjectView, describe, meta_str};
use crate::runtime::selector::{self};

use super::{ChildOwnership, DecideError, add_owner_labels};

/// The generated-selector label.
pub const CONTROLLER_UID_LABEL: &str = "controller-uid";

// ---------------------------------------------------------------------------------------------
// desired children

/// What validation needs to know about a declared child type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChildType {
    /// Namespaced or cluster-scoped.
    pub namespaced: bool,
    /// Update method.
    pub method: ChildUpdateMethod,
}

/// Defaults namespaces and checks every desired child: its type is declared; it matches the
/// parent selector (adding `controller-uid` with generateSelector); a namespaced parent only gets
/// children in its own namespace and no cluster-scoped children. Returns the children keyed by
/// [`child_key`] (a later duplicate replaces an earlier one, as Metacontroller).
pub fn validate_desired(
    parent: &Value,
    parent_namespaced: bool,
    declared: &HashMap<String, ChildType>,
    selector: &LabelSelector,
    generate_selector: bool,
    children: Vec<Value>,
) -> Result<BTreeMap<String, Value>, DecideError> {
    let placing = Placing {
        parent_namespaced,
        ownership: ChildOwnership::OwnerReferences,
    };
    validate_desired_owned(
        parent,
        placing,
        declared,
        selector,
        generate_selector,
        children,
    )
}

/// Where a parent's children may be: the parent's scope and how it owns them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placing {
    /// The parent resource is namespaced.
    pub parent_namespaced: bool,
    /// How the parent owns its children.
    pub ownership: ChildOwnership,
}

/// [`validate_desired`] for a controller whose parents own children as `placing.ownership`
/// says: with [`ChildOwnership::LabelsWhereReferencesCannot`], a namespaced parent's child in
/// another namespace, or cluster-scoped, is accepted and gets the parent's instance labels
/// ([`add_owner_labels`]) instead of being refused.
pub fn validate_desired_owned(
    parent: &Value,
    placing: Placing,
    declared: &HashMap<String, ChildType>,
    selector: &LabelSelector,
    generate_selector: bool,
    children: Vec<Value>,
) -> Result<BTreeMap<String, Value>, DecideError> {
    let mut out = BTreeMap::new();
    for mut child in children {
        let av = child
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let kind = child
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let gk = group_key(av, kind);
        let bad = |child: &Value, message: String| DecideError::InvalidChild {
            child: format!("{gk} {}", describe(child)),
            message,
        };
        let Some(t) = declared.get(&gk) else {
            let known: Vec<&str> = declared.keys().map(String::as_str).collect();
            return Err(bad(
                &child,
                format!(
                    "type {gk} is not a declared child resource (declared: {})",
                    known.join(", ")
                ),
            ));
        };
        let ns = meta_str(&child, "namespace").to_owned();
        let Some(m) = child.get_mut("metadata").and_then(Value::as_object_mut) else {
            return Err(bad(&child, "metadata must be an object".into()));
        };
        if let Err(e) = place(m, (&ns, t.namespaced), placing, parent) {
            return Err(bad(&child, e.to_string()));
        }
        if generate_selector {
            add_controller_uid(m, meta_str(parent, "uid"));
        }
        if !selector::matches_object(selector, &child)? {
            return Err(bad(
                &child,
                format!(
                    "labels {:?} don't match parent selector {:?}",
                    selector::labels_of(&child),
                    selector::to_query(selector)
                ),
            ));
        }
        let key = child_key(&child);
        let problem = name_problem(meta_str(&child, "name")).or_else(|| {
            out.contains_key(&key)
                .then(|| "appears more than once in the hook's response".to_owned())
        });
        if let Some(message) = problem {
            return Err(bad(&child, message));
        }
        out.insert(key, child);
    }
    Ok(out)
}

/// Where a child whose metadata is `m` (its namespace and whether its type is namespaced) may
/// be, as [`place_in_namespace`] says; a child an owner reference cannot hold is accepted and
/// labelled as the parent's ([`add_owner_labels`]) when `placing` owns such children by label.
fn place(
    m: &mut Map<String, Value>,
    (ns, namespaced): (&str, bool),
    placing: Placing,
    parent: &Value,
) -> Result<(), Misplaced> {
    let parent_ns = meta_str(parent, "namespace");
    match place_in_namespace(m, ns, namespaced, placing.parent_namespaced, parent_ns) {
        Err(e @ (Misplaced::OtherNamespace { .. } | Misplaced::ClusterScoped))
            if placing.ownership == ChildOwnership::LabelsWhereReferencesCannot =>
        {
            if e == Misplaced::ClusterScoped {
                m.remove("namespace");
            }
            add_owner_labels(m, parent);
            Ok(())
        }
        other => other,
    }
}

/// The namespace rules of a child's metadata `m` (its namespace `ns`): a namespaced child of a
/// namespaced parent defaults to, and must stay in, the parent's namespace; a cluster-scoped
/// parent names the namespace of each namespaced child; a namespaced parent owns no
/// cluster-scoped child; a cluster-scoped child carries no namespace.
fn place_in_namespace(
    m: &mut Map<String, Value>,
    ns: &str,
    namespaced: bool,
    parent_namespaced: bool,
    parent_ns: &str,
) -> Result<(), Misplaced> {
    if namespaced {
        if ns.is_empty() {
            if !parent_namespaced {
                return Err(Misplaced::NoNamespace);
            }
            m.insert("namespace".into(), Value::String(parent_ns.to_owned()));
        } else if parent_namespaced && ns != parent_ns {
            return Err(Misplaced::OtherNamespace {
                namespace: ns.to_owned(),
                parent: parent_ns.to_owned(),
            });
        }
    } else if parent_namespaced {
        return Err(Misplaced::ClusterScoped);
    } else if !ns.is_empty() {
        m.remove("namespace");
    }
    Ok(())
}

/// Why a desired child cannot be where it says.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum Misplaced {
    /// A namespaced child of a cluster-scoped parent names no namespace.
    #[error(
        "metadata.namespace is required: the type is namespaced and the parent is cluster-scoped"
    )]
    NoNamespace,
    /// A namespaced parent's child is in another namespace.
    #[error(
        "namespace {namespace:?} differs from the parent's {parent:?}; a namespaced parent may only own children in its namespace"
    )]
    OtherNamespace {
        /// The child's namespace.
        namespace: String,
        /// The parent's.
        parent: String,
    },
    /// A namespaced parent's child is cluster-scoped.
    #[error("a namespaced parent may not own cluster-scoped children")]
    ClusterScoped,
}

/// Adds the generated-selector label `controller-uid=<parent uid>` unless the child sets it.
fn add_controller_uid(m: &mut Map<String, Value>, parent_uid: &str) {
    let labels = m
        .entry("labels")
        .or_insert_with(|| Value::Object(Map::new()));
    if labels.is_null() {
        *labels = Value::Object(Map::new());
    }
    if let Some(l) = labels.as_object_mut() {
        l.entry(CONTROLLER_UID_LABEL)
            .or_insert_with(|| Value::String(parent_uid.to_owned()));
    }
}

/// What is wrong with a child's name for every kind of object: empty, longer than 253
/// characters, `.` or `..`, or containing `/` or `%` (kinds add stricter rules of their own,
/// which the API server reports).
fn name_problem(name: &str) -> Option<String> {
    if name.is_empty() {
        Some("metadata.name is empty".to_owned())
    } else if name.len() > 253 {
        Some(format!(
            "metadata.name is {} characters, at most 253 are allowed",
            name.len()
        ))
    } else if name == "." || name == ".." || name.contains(['/', '%']) {
        Some(format!(
            "metadata.name {name:?} may not be '.' or '..' or contain '/' or '%'"
        ))
    } else {
        None
    }
}

/// Whether applying `desired` (keyed by [`child_key`]) over `observed` creates a child: one
/// desired and not observed. `settled` names further observed children (by key), left out of
/// `observed` unparsed.
pub fn creates_any<O: Borrow<Value>>(
    (observed, settled): (&[O], &BTreeSet<String>),
    desired: &BTreeMap<String, Value>,
) -> bool {
    if desired.len() > observed.len() + settled.len() {
        return true;
    }
    let have: HashSet<String> = observed.iter().map(|o| child_key(o.borrow())).collect();
    desired
        .keys()
        .any(|k| !have.contains(k) && !settled.contains(k))
}

/// [`child_key`] of an object read through its identity (a cached child's, unparsed).
pub fn child_key_of(obj: &impl ObjectView) -> String {
    let (av, kind) = (obj.api_version(), obj.kind());
    let (ns, name) = (obj.namespace(), obj.name());
    let mut key = String::with_capacity(kind.len() + av.len() + ns.len() + name.len() + 3);
    for part in [kind, ".", av, " ", ns, "/", name] {
        key.push_str(part);
    }
    key
}

/// Identity of a child: `Kind.apiVersion namespace/name` (the type part is [`group_key`]).
pub fn child_key(obj: &Value) -> String {
    let field = |f: &str| obj.get(f).and_then(Value::as_str).unwrap_or_default();
    let (av, kind) = (field("apiVersion"), field("kind"));
    let (ns, name) = (meta_str(obj, "namespace"), meta_str(obj, "name"));
    let mut key = String::with_capacity(kind.len() + av.len() + ns.len() + name.len() + 3);
    for part in [kind, ".", av, " ", ns, "/", name] {
        key.push_str(part);
    }
    key
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::reconcile::decide::fixtures::{child, parent};
    use crate::reconcile::decide::{INSTANCE_ID_LABEL, INSTANCE_NAMESPACE_LABEL};
    use serde_json::json;

    fn declared(namespaced: bool, method: ChildUpdateMethod) -> HashMap<String, ChildType> {
        HashMap::from([("ConfigMap.v1".to_owned(), ChildType { namespaced, method })])
    }

    #[test]
    fn validation_defaults_namespace_and_checks_rules() {
        let p = parent();
        let sel = selector::decode(&p["spec"]["selector"], "spec.selector").unwrap();
        let d = declared(true, ChildUpdateMethod::InPlace);
        let mut c = child("a", json!({"app": "p"}), None);
        c["metadata"].as_object_mut().unwrap().remove("namespace");
        let out = validate_desired(&p, true, &d, &sel, false, vec![c]).unwrap();
        assert_eq!(out["ConfigMap.v1 ns/a"]["metadata"]["namespace"], "ns");

        let e = validate_desired(
            &p,
            true,
            &d,
            &sel,
            false,
            vec![child("a", json!({"app": "x"}), None)],
        )
        .unwrap_err();
        assert!(e.to_string().contains("don't match parent selector"), "{e}");

        let mut other = child("a", json!({"app": "p"}), None);
        other["metadata"]["namespace"] = json!("elsewhere");
        let e = validate_desired(&p, true, &d, &sel, false, vec![other]).unwrap_err();
        assert!(e.to_string().contains("differs from the parent's"), "{e}");

        let mut svc = child("a", json!({"app": "p"}), None);
        svc["kind"] = json!("Service");
        let e = validate_desired(&p, true, &d, &sel, false, vec![svc]).unwrap_err();
        assert!(
            e.to_string()
                .contains("Service.v1 is not a declared child resource"),
            "{e}"
        );

        let cluster = declared(false, ChildUpdateMethod::InPlace);
        let e = validate_desired(
            &p,
            true,
            &cluster,
            &sel,
            false,
            vec![child("a", json!({"app": "p"}), None)],
        )
        .unwrap_err();
        assert!(e.to_string().contains("cluster-scoped"), "{e}");
    }

    #[test]
    fn label_ownership_accepts_what_an_owner_reference_cannot_hold_and_labels_it() {
        let p = parent();
        let sel = selector::single(CONTROLLER_UID_LABEL, "u1");
        let placing = Placing {
            parent_namespaced: true,
            ownership: ChildOwnership::LabelsWhereReferencesCannot,
        };
        let mut other = child("a", json!({}), None);
        other["metadata"]["namespace"] = json!("tenant");
        let d = declared(true, ChildUpdateMethod::InPlace);
        let out = validate_desired_owned(&p, placing, &d, &sel, true, vec![other]).unwrap();
        let labels = &out["ConfigMap.v1 tenant/a"]["metadata"]["labels"];
        assert_eq!(labels[INSTANCE_ID_LABEL], "u1");
        assert_eq!(labels[INSTANCE_NAMESPACE_LABEL], "ns");
        // in the parent's namespace: an owner reference holds it, no label is added
        let out = validate_desired_owned(
            &p,
            placing,
            &d,
            &sel,
            true,
            vec![child("b", json!({}), None)],
        );
        let labels = &out.unwrap()["ConfigMap.v1 ns/b"]["metadata"]["labels"];
        assert!(labels.get(INSTANCE_ID_LABEL).is_none(), "{labels}");
        // cluster-scoped: its namespace dropped, labelled
        let cluster = declared(false, ChildUpdateMethod::InPlace);
        let out = validate_desired_owned(
            &p,
            placing,
            &cluster,
            &sel,
            true,
            vec![child("c", json!({}), None)],
        );
        let c = &out.unwrap()["ConfigMap.v1 /c"];
        assert_eq!(c["metadata"]["labels"][INSTANCE_ID_LABEL], "u1");
        assert!(c["metadata"].get("namespace").is_none());
        // a namespaced child of a cluster-scoped parent still needs a namespace
        let mut no_ns = child("d", json!({}), None);
        no_ns["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("namespace");
        let placing = Placing {
            parent_namespaced: false,
            ..placing
        };
        let e = validate_desired_owned(&p, placing, &d, &sel, true, vec![no_ns]).unwrap_err();
        assert!(
            e.to_string().contains("metadata.namespace is required"),
            "{e}"
        );
    }

    #[test]
    fn generate_selector_adds_label() {
        let p = parent();
        let sel = selector::single(CONTROLLER_UID_LABEL, "u1");
        let d = declared(true, ChildUpdateMethod::InPlace);
        let out = validate_desired(
            &p,
            true,
            &d,
            &sel,
            true,
            vec![child("a", Value::Null, None)],
        )
        .unwrap();
        assert_eq!(
            out["ConfigMap.v1 ns/a"]["metadata"]["labels"]["controller-uid"],
            "u1"
        );
    }

    #[test]
    fn duplicate_and_unusable_child_names_fail_before_any_write() {
        let p = json!({"metadata": {"namespace": "ns", "name": "p", "uid": "u"}});
        let d = HashMap::from([(
            "ConfigMap.v1".to_owned(),
            ChildType {
                namespaced: true,
                method: ChildUpdateMethod::default(),
            },
        )]);
        let sel = LabelSelector::default();
        let cm = |name: &str| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}});
        let e = validate_desired(&p, true, &d, &sel, false, vec![cm("a"), cm("b"), cm("a")])
            .unwrap_err()
            .to_string();
        assert!(e.contains("more than once") && e.contains("ns/a"), "{e}");
        for bad in ["a/b", "..", "50%"] {
            let e = validate_desired(&p, true, &d, &sel, false, vec![cm(bad)]).unwrap_err();
            assert!(e.to_string().contains("metadata.name"), "{bad}: {e}");
        }
        let long = "x".repeat(254);
        assert!(validate_desired(&p, true, &d, &sel, false, vec![cm(&long)]).is_err());
        // names other kinds allow (RBAC's `system:` names) are left to the API server
        assert!(validate_desired(&p, true, &d, &sel, false, vec![cm("system:web")]).is_ok());
    }

    #[test]
    fn creates_any_is_a_desired_child_not_observed() {
        let cm = |name: &str| {
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": name, "namespace": "ns"}})
        };
        let desired: BTreeMap<String, Value> = [cm("a"), cm("b")]
            .into_iter()
            .map(|c| (child_key(&c), c))
            .collect();
        let none = BTreeSet::new();
        assert!(!creates_any(
            (&[cm("a"), cm("b"), cm("c")], &none),
            &desired
        ));
        assert!(creates_any((&[cm("a")], &none), &desired));
        assert!(!creates_any::<Value>((&[], &none), &BTreeMap::new()));
        // a settled child is observed, unparsed
        let settled = [child_key(&cm("b"))].into_iter().collect();
        assert!(!creates_any((&[cm("a")], &settled), &desired));
        assert_eq!(child_key_of(&cm("b")), child_key(&cm("b")));
    }
}
