//! Pure decisions of the CompositeController alone: its finalizer's name, the selector its
//! children must match, and claiming (adopt and release) as Kubernetes' controller ref manager.
//! The decisions it shares with the DecoratorController are in [`crate::reconcile::decide`].

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde_json::Value;

use crate::api::CompositeController;
use crate::object::{ObjectView, describe, is_deleting, meta_str};
use crate::reconcile::decide::{CONTROLLER_UID_LABEL, ChildOwnership, DecideError};
use crate::runtime::selector::{self};

/// The finalizer kmeta puts on parents of CC `cc` that has a finalize hook.
pub fn finalizer_name(cc: &str) -> String {
    format!("metacontroller.io/compositecontroller-{cc}")
}

/// kro's finalizer on its instances, which kmeta puts on the parents of a CompositeController
/// whose children may be label-owned (an instance kro served before keeps it, and kmeta
/// finishes its deletion).
pub const KRO_FINALIZER: &str = "kro.run/finalizer";

/// How the parents of `cc` own their children: by label where an owner reference cannot hold a
/// child when its sync hook is a CEL resource graph (what kmeta makes of a kro
/// ResourceGraphDefinition, whose children kro ties to the instance by label), else by owner
/// reference only, as Metacontroller.
pub fn child_ownership(cc: &CompositeController) -> ChildOwnership {
    match cc.spec.sync_hook().and_then(|h| h.cel.as_ref()) {
        Some(_) => ChildOwnership::LabelsWhereReferencesCannot,
        None => ChildOwnership::OwnerReferences,
    }
}

/// The finalizer of `cc`'s parents: kro's for label-owned children ([`KRO_FINALIZER`]), else
/// Metacontroller's [`finalizer_name`].
pub fn parent_finalizer(cc: &CompositeController, ownership: ChildOwnership) -> String {
    match ownership {
        ChildOwnership::LabelsWhereReferencesCannot => KRO_FINALIZER.to_owned(),
        ChildOwnership::OwnerReferences => {
            finalizer_name(cc.metadata.name.as_deref().unwrap_or_default())
        }
    }
}

/// kro's labels on an instance (kro's instance labeler: `kro.run/owned` and the RGD's name and
/// UID, not `kro.run/kro-version`, which names a kro release), for a CompositeController whose
/// children may be label-owned: the RGD is read from `cc`'s label
/// `kro.run/resource-graph-definition-name` and its owner reference to the RGD, as
/// `kmeta::kro` writes them. None for any other controller.
pub fn instance_labels(
    cc: &CompositeController,
    ownership: ChildOwnership,
) -> std::collections::BTreeMap<String, String> {
    let mut out = std::collections::BTreeMap::new();
    if ownership != ChildOwnership::LabelsWhereReferencesCannot {
        return out;
    }
    out.insert("kro.run/owned".to_owned(), "true".to_owned());
    let name_label = "kro.run/resource-graph-definition-name";
    if let Some(name) = cc.metadata.labels.as_ref().and_then(|l| l.get(name_label)) {
        out.insert(name_label.to_owned(), name.clone());
    }
    let rgd = cc
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|r| r.kind == "ResourceGraphDefinition" && r.api_version.starts_with("kro.run/"));
    if let Some(r) = rgd {
        out.insert(
            "kro.run/resource-graph-definition-id".to_owned(),
            r.uid.clone(),
        );
    }
    out
}

// ---------------------------------------------------------------------------------------------
// selector of a parent

/// The selector children must match: `controller-uid=<uid>` with generateSelector, else the
/// parent's `spec.selector`, which must not be empty.
pub fn parent_selector(
    parent: &Value,
    generate_selector: bool,
) -> Result<LabelSelector, DecideError> {
    let who = || describe(parent);
    if generate_selector {
        return Ok(selector::single(
            CONTROLLER_UID_LABEL,
            meta_str(parent, "uid"),
        ));
    }
    let Some(raw) = parent.pointer("/spec/selector").filter(|v| !v.is_null()) else {
        return Err(DecideError::Selector {
            parent: who(),
            message:
                "spec.selector is required (or set generateSelector on the CompositeController)"
                    .into(),
        });
    };
    let sel = selector::decode(raw, "spec.selector")?;
    if selector::is_empty(&sel) {
        return Err(DecideError::Selector {
            parent: who(),
            message: "spec.selector must have matchLabels or matchExpressions".into(),
        });
    }
    Ok(sel)
}

// ---------------------------------------------------------------------------------------------
// claiming

/// What to do with one candidate child.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    /// Already ours and matching: an observed child.
    Owned,
    /// An orphan that matches: add our controllerRef.
    Adopt,
    /// Ours but no longer matching: remove our ownerRef.
    Release,
    /// Controlled by someone else, or not eligible.
    Ignore,
}

/// `ClaimObject` of Kubernetes' controller ref manager.
pub fn claim_child(
    parent_uid: &str,
    parent_deleting: bool,
    matches: bool,
    child: &impl ObjectView,
) -> Claim {
    match child.controller() {
        Some(r) if r.uid == parent_uid => {
            if matches {
                Claim::Owned
            } else if parent_deleting {
                Claim::Ignore
            } else {
                Claim::Release
            }
        }
        Some(_) => Claim::Ignore,
        None if parent_deleting || child.deleting() || !matches => Claim::Ignore,
        None => Claim::Adopt,
    }
}

/// Claims of every candidate (objects owned by the parent plus orphans), as the candidates were
/// given (the cache's shared `Arc`s, or values).
#[derive(Debug, Clone, PartialEq)]
pub struct ClaimPlan<C = Value> {
    /// Observed children.
    pub owned: Vec<C>,
    /// Orphans to adopt (they become observed once adopted).
    pub adopt: Vec<C>,
    /// Children to release.
    pub release: Vec<C>,
}

impl<C> Default for ClaimPlan<C> {
    fn default() -> Self {
        ClaimPlan {
            owned: Vec::new(),
            adopt: Vec::new(),
            release: Vec::new(),
        }
    }
}

/// Decides claims for every candidate. Candidates are moved into the plan as they are (the
/// cache's shared objects: no copy); the ones ignored are dropped.
pub fn claim_children<C: ObjectView>(
    parent: &Value,
    selector: &LabelSelector,
    candidates: impl IntoIterator<Item = C>,
) -> Result<ClaimPlan<C>, DecideError> {
    let uid = meta_str(parent, "uid");
    let deleting = is_deleting(parent);
    let mut plan = ClaimPlan::default();
    for c in candidates {
        let m = selector::matches_object(selector, &c)?;
        match claim_child(uid, deleting, m, &c) {
            Claim::Owned => plan.owned.push(c),
            Claim::Adopt => plan.adopt.push(c),
            Claim::Release => plan.release.push(c),
            Claim::Ignore => {}
        }
    }
    Ok(plan)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::reconcile::decide::fixtures::{child, parent};
    use serde_json::json;

    use crate::runtime::selector;

    #[test]
    fn selector_rules() {
        let p = parent();
        assert!(parent_selector(&p, false).is_ok());
        let mut q = p.clone();
        q["spec"]["selector"] = json!({});
        let e = parent_selector(&q, false).unwrap_err().to_string();
        assert!(e.contains("matchLabels or matchExpressions"), "{e}");
        q["spec"].as_object_mut().unwrap().remove("selector");
        assert!(
            parent_selector(&q, false)
                .unwrap_err()
                .to_string()
                .contains("spec.selector is required")
        );
        let g = parent_selector(&q, true).unwrap();
        assert_eq!(selector::to_query(&g), "controller-uid=u1");
    }

    #[test]
    fn a_cel_resource_graph_owns_by_label_with_kros_finalizer_and_others_as_metacontroller() {
        let cc = |hooks: serde_json::Value| -> CompositeController {
            serde_json::from_value(json!({"apiVersion": "metacontroller.k8s.io/v1alpha1",
                "kind": "CompositeController", "metadata": {"name": "cc"},
                "spec": {"parentResource": {"apiVersion": "x/v1", "resource": "xs"},
                    "hooks": hooks}}))
            .unwrap()
        };
        let webhook = cc(json!({"sync": {"webhook": {"url": "http://h"}}}));
        assert_eq!(child_ownership(&webhook), ChildOwnership::OwnerReferences);
        assert_eq!(
            parent_finalizer(&webhook, child_ownership(&webhook)),
            "metacontroller.io/compositecontroller-cc"
        );
        let graph = cc(json!({"sync": {"cel": {"resourceGraph": {"resources": []}}}}));
        assert_eq!(
            child_ownership(&graph),
            ChildOwnership::LabelsWhereReferencesCannot
        );
        assert_eq!(
            parent_finalizer(&graph, child_ownership(&graph)),
            KRO_FINALIZER
        );
    }

    #[test]
    fn an_rgds_instance_gets_kros_labels_naming_the_rgd() {
        let cc: CompositeController = serde_json::from_value(json!({
            "apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "CompositeController",
            "metadata": {"name": "web", "labels": {"kro.run/resource-graph-definition-name": "web"},
                "ownerReferences": [{"apiVersion": "kro.run/v1alpha1",
                    "kind": "ResourceGraphDefinition", "name": "web", "uid": "r1"}]},
            "spec": {"parentResource": {"apiVersion": "x/v1", "resource": "xs"},
                "hooks": {"sync": {"cel": {"resourceGraph": {}}}}}}))
        .unwrap();
        let labels = instance_labels(&cc, ChildOwnership::LabelsWhereReferencesCannot);
        let want = json!({"kro.run/owned": "true", "kro.run/resource-graph-definition-name": "web",
            "kro.run/resource-graph-definition-id": "r1"});
        assert_eq!(serde_json::to_value(&labels).unwrap(), want);
        assert!(instance_labels(&cc, ChildOwnership::OwnerReferences).is_empty());
        let mut meta = serde_json::Map::new();
        use crate::reconcile::decide::{labels_missing, set_labels};
        let mut parent = json!({"metadata": {}});
        assert!(labels_missing(&parent, &labels));
        assert!(set_labels(&mut meta, &labels));
        assert_eq!(meta["labels"], want);
        assert!(!set_labels(&mut meta, &labels), "set already");
        parent["metadata"] = serde_json::Value::Object(meta);
        assert!(!labels_missing(&parent, &labels));
    }

    #[test]
    fn claim_table() {
        let ours = child("a", json!({}), Some("u1"));
        let theirs = child("b", json!({}), Some("u2"));
        let orphan = child("c", json!({}), None);
        assert_eq!(claim_child("u1", false, true, &ours), Claim::Owned);
        assert_eq!(claim_child("u1", false, false, &ours), Claim::Release);
        assert_eq!(claim_child("u1", true, false, &ours), Claim::Ignore);
        assert_eq!(claim_child("u1", false, true, &theirs), Claim::Ignore);
        assert_eq!(claim_child("u1", false, true, &orphan), Claim::Adopt);
        assert_eq!(claim_child("u1", false, false, &orphan), Claim::Ignore);
        assert_eq!(claim_child("u1", true, true, &orphan), Claim::Ignore);
        let mut dying = orphan.clone();
        dying["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        assert_eq!(claim_child("u1", false, true, &dying), Claim::Ignore);
    }

    #[test]
    fn claim_children_splits() {
        let p = parent();
        let sel = parent_selector(&p, false).unwrap();
        let plan = claim_children(
            &p,
            &sel,
            vec![
                child("a", json!({"app": "p"}), Some("u1")),
                child("b", json!({"app": "q"}), Some("u1")),
                child("c", json!({"app": "p"}), None),
                child("d", json!({"app": "p"}), Some("zz")),
            ],
        )
        .unwrap();
        let names = |v: &[Value]| {
            v.iter()
                .map(|o| meta_str(o, "name").to_owned())
                .collect::<Vec<_>>()
        };
        assert_eq!(names(&plan.owned), ["a"]);
        assert_eq!(names(&plan.release), ["b"]);
        assert_eq!(names(&plan.adopt), ["c"]);
    }
}
