//! Pure decisions of a rolling update (`RollingRecreate`, `RollingInPlace`), after
//! Metacontroller's `composite/controller_revision.go` and `rolling_update.go`: a parent's
//! revisions (the fields `revisionHistory.fieldPaths` name, stored as ControllerRevisions), which
//! revision claims which child, which child moves to the latest revision next (at most one per
//! sync, and only when every rolling child already there is observed, up to date and passes its
//! status checks), the parent's `Updated` condition and which revisions to prune. No I/O here;
//! [`crate::reconcile::composite`] reads the caches, calls the hooks and writes.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;

use serde_json::{Map, Value, json};

use crate::api::{ChildUpdateMethod, ControllerRevisionChildren, StatusConditionCheck};
use crate::object::meta_str;

/// The parent condition a rollout reports.
pub const UPDATED_CONDITION: &str = "Updated";
/// Revision label: the parent resource's API group.
pub const LABEL_API_GROUP: &str = "metacontroller.k8s.io/apiGroup";
/// Revision label: the parent resource's plural name.
pub const LABEL_RESOURCE: &str = "metacontroller.k8s.io/resource";
/// `revisionHistory.fieldPaths` when none are given.
pub const DEFAULT_FIELD_PATHS: &[&str] = &["spec"];
/// The longest object name Kubernetes accepts.
const MAX_NAME: usize = 253;
/// Hex digits of a SHA-1.
const HASH_LEN: usize = 40;

/// What makes a rollout impossible to decide.
#[derive(Debug, thiserror::Error)]
pub enum RolloutError {
    /// A field path crosses something that is not an object.
    #[error("revisionHistory.fieldPaths: {path:?} crosses a field that is not an object ({side})")]
    FieldPath {
        /// The dot path.
        path: String,
        /// Where: `in the parent` or `in ControllerRevision <name>`.
        side: String,
    },
    /// A stored ControllerRevision does not decode.
    #[error("ControllerRevision {name}: {message}")]
    Revision {
        /// Its name.
        name: String,
        /// What is wrong.
        message: String,
    },
    /// ControllerRevisions are namespaced: a cluster-scoped parent has nowhere to keep them.
    #[error(
        "{parent}: rolling updates (RollingRecreate, RollingInPlace) need a namespaced parent, ControllerRevisions live in the parent's namespace; use Recreate or InPlace"
    )]
    ClusterScopedParent {
        /// The parent.
        parent: String,
    },
    /// The hook's status cannot take the `Updated` condition.
    #[error("status from the sync hook: {0}")]
    Status(String),
}

/// A child as revisions name it: API group (no version), kind, name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ChildId {
    /// API group, `""` for core.
    pub group: String,
    /// Kind.
    pub kind: String,
    /// Name.
    pub name: String,
}

impl ChildId {
    /// The identity of `obj` (its `apiVersion`'s group, `kind`, `metadata.name`).
    pub fn of(obj: &Value) -> ChildId {
        let av = obj
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or_default();
        ChildId {
            group: av.rsplit_once('/').map_or("", |(g, _)| g).to_owned(),
            kind: obj
                .get("kind")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
            name: meta_str(obj, "name").to_owned(),
        }
    }
}

/// The rollout settings of one child type (group, kind) that uses a rolling strategy.
#[derive(Debug, Clone)]
pub struct RollingRule {
    /// `RollingRecreate` or `RollingInPlace`.
    pub method: ChildUpdateMethod,
    /// `updateStrategy.statusChecks.conditions`.
    pub conditions: Vec<StatusConditionCheck>,
    /// dynapply options of the type (to tell whether a child is up to date).
    pub options: dynapply::Options,
}

/// Whether `method` is a rolling one.
pub fn is_rolling(method: ChildUpdateMethod) -> bool {
    matches!(
        method,
        ChildUpdateMethod::RollingRecreate | ChildUpdateMethod::RollingInPlace
    )
}

/// Rolling rules by (group, kind).
pub type RollingRules = HashMap<(String, String), RollingRule>;

fn rule<'a>(rules: &'a RollingRules, group: &str, kind: &str) -> Option<&'a RollingRule> {
    rules.get(&(group.to_owned(), kind.to_owned()))
}

mod claims;
pub use claims::*;

// ---------------------------------------------------------------------------------------------
// revision identity

/// The namespace a parent's revisions live in: its own (a cluster-scoped parent has none, and
/// Metacontroller's create of a revision without a namespace fails on every sync).
pub fn revision_namespace(parent: &Value, parent_namespaced: bool) -> Result<&str, RolloutError> {
    match meta_str(parent, "namespace") {
        ns if parent_namespaced && !ns.is_empty() => Ok(ns),
        _ => Err(RolloutError::ClusterScopedParent {
            parent: crate::object::describe(parent),
        }),
    }
}

/// The fields `field_paths` (dot paths) name in `parent`, as a partial object (`makePatch`).
pub fn make_patch(parent: &Value, field_paths: &[String]) -> Result<Value, RolloutError> {
    let mut patch = Value::Object(Map::new());
    for path in field_paths {
        let parts: Vec<&str> = path.split('.').collect();
        if let Some(value) = nested(parent, &parts, path, "in the parent")? {
            set_nested(&mut patch, &parts, value.clone(), path, "in the patch")?;
        }
    }
    Ok(patch)
}

/// `parent` with the fields of a revision's `patch` written over it at `field_paths`
/// (`applyPatch`: a path the patch lacks keeps the parent's value).
pub fn apply_patch(
    parent: &Value,
    patch: &Value,
    field_paths: &[String],
    revision: &str,
) -> Result<Value, RolloutError> {
    let mut out = parent.clone();
    let side = format!("in ControllerRevision {revision}");
    for path in field_paths {
        let parts: Vec<&str> = path.split('.').collect();
        if let Some(value) = nested(patch, &parts, path, &side)? {
            set_nested(&mut out, &parts, value.clone(), path, "in the parent")?;
        }
    }
    Ok(out)
}

fn nested<'a>(
    v: &'a Value,
    parts: &[&str],
    path: &str,
    side: &str,
) -> Result<Option<&'a Value>, RolloutError> {
    let mut at = v;
    for part in parts {
        match at {
            Value::Object(m) => match m.get(*part) {
                Some(next) => at = next,
                None => return Ok(None),
            },
            _ => {
                return Err(RolloutError::FieldPath {
                    path: path.to_owned(),
                    side: side.to_owned(),
                });
            }
        }
    }
    Ok(Some(at))
}

fn set_nested(
    v: &mut Value,
    parts: &[&str],
    value: Value,
    path: &str,
    side: &str,
) -> Result<(), RolloutError> {
    let bad = || RolloutError::FieldPath {
        path: path.to_owned(),
        side: side.to_owned(),
    };
    let Some((last, init)) = parts.split_last() else {
        return Ok(());
    };
    let mut at = v;
    for part in init {
        let m = at.as_object_mut().ok_or_else(bad)?;
        at = m
            .entry((*part).to_owned())
            .or_insert_with(|| Value::Object(Map::new()));
    }
    at.as_object_mut()
        .ok_or_else(bad)?
        .insert((*last).to_owned(), value);
    Ok(())
}

/// The name of the revision of `patch` for the parent with `parent_uid`:
/// `<resource>.<group or "core">-<sha1(uid + patch as Go's encoding/json writes it)>`, the prefix
/// cut so the name stays within 253 characters (Metacontroller's `controllerRevisionName`, so
/// both name the same revision alike).
pub fn revision_name(resource: &str, group: &str, parent_uid: &str, patch: &Value) -> String {
    let group = if group.is_empty() { "core" } else { group };
    let mut prefix = format!("{resource}.{group}");
    let max = MAX_NAME - HASH_LEN - 1;
    if prefix.len() > max {
        let mut cut = max;
        while !prefix.is_char_boundary(cut) {
            cut -= 1;
        }
        prefix.truncate(cut);
    }
    let mut data = parent_uid.as_bytes().to_vec();
    data.extend_from_slice(kmeta_wire::go_json::to_string(patch).as_bytes());
    let digest = ring::digest::digest(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY, &data);
    let mut hash = String::with_capacity(HASH_LEN);
    for b in digest.as_ref() {
        let _ = write!(hash, "{b:02x}");
    }
    format!("{prefix}-{hash}")
}

/// The labels of a new revision: the parent's `spec.template.metadata.labels` (or
/// `controller-uid=<uid>` with generateSelector), plus the parent resource's group and plural.
pub fn revision_labels(
    parent: &Value,
    generate_selector: bool,
    group: &str,
    resource: &str,
) -> Map<String, Value> {
    let mut labels = Map::new();
    if generate_selector {
        labels.insert(
            crate::reconcile::decide::CONTROLLER_UID_LABEL.to_owned(),
            json!(meta_str(parent, "uid")),
        );
    } else if let Some(m) = parent
        .pointer("/spec/template/metadata/labels")
        .and_then(Value::as_object)
    {
        labels.extend(
            m.iter()
                .filter(|(_, v)| v.is_string())
                .map(|(k, v)| (k.clone(), v.clone())),
        );
    }
    labels.insert(LABEL_API_GROUP.to_owned(), json!(group));
    labels.insert(LABEL_RESOURCE.to_owned(), json!(resource));
    labels
}

// ---------------------------------------------------------------------------------------------
// the Updated condition, pruning, combining

/// The `Updated` condition a step reports (Metacontroller's text; no `lastTransitionTime`).
pub fn updated_condition(step: &Step, latest_revision: &str) -> Value {
    let (status, reason, message) = match step {
        Step::Waiting(why) => ("False", "RolloutWaiting", why.clone()),
        Step::Progressing { kind, name } => (
            "False",
            "RolloutProgressing",
            format!("updating {kind} {name}"),
        ),
        Step::OnLatest => (
            "True",
            "OnLatestRevision",
            format!("latest ControllerRevision: {latest_revision}"),
        ),
    };
    json!({"type": UPDATED_CONDITION, "status": status, "reason": reason, "message": message})
}

/// The hook's status (`{}` when null) with `condition` replacing the condition of its type, or
/// appended (`SetCondition`).
pub fn with_condition(status: Option<&Value>, condition: Value) -> Result<Value, RolloutError> {
    let mut status = match status {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(m)) => m.clone(),
        Some(other) => {
            return Err(RolloutError::Status(format!(
                "status must be an object to carry the {UPDATED_CONDITION} condition, got {other}"
            )));
        }
    };
    let conditions = status
        .entry("conditions")
        .or_insert_with(|| Value::Array(Vec::new()));
    let Some(list) = conditions.as_array_mut() else {
        return Err(RolloutError::Status(format!(
            "status.conditions must be a list to carry the {UPDATED_CONDITION} condition"
        )));
    };
    let ty = condition.get("type").cloned();
    match list
        .iter_mut()
        .find(|c| c.is_object() && c.get("type") == ty.as_ref())
    {
        Some(existing) => *existing = condition,
        None => list.push(condition),
    }
    Ok(Value::Object(status))
}

/// Which revisions to keep: the latest (index 0) always, the others while they claim a child.
pub fn keep_revisions(revisions: &[Vec<ControllerRevisionChildren>]) -> Vec<bool> {
    revisions
        .iter()
        .enumerate()
        .map(|(i, claims)| i == 0 || claims.iter().any(|c| !c.names.is_empty()))
        .collect()
}

/// The smallest positive `resyncAfterSeconds` of all revisions (0: none).
pub fn combined_resync(values: impl IntoIterator<Item = f64>) -> f64 {
    values
        .into_iter()
        .filter(|v| *v > 0.0)
        .fold(0.0, |acc, v| if acc == 0.0 || v < acc { v } else { acc })
}

/// The desired children of a rolling sync (keyed like [`crate::reconcile::decide::child_key`]):
/// the latest revision's, with each child an older revision still claims replaced by that
/// revision's version of it (only when both want it: a child the latest revision drops is
/// deleted).
pub fn combine_desired(
    latest: BTreeMap<String, Value>,
    older: &[(&[ControllerRevisionChildren], &BTreeMap<String, Value>)],
) -> BTreeMap<String, Value> {
    let mut out = latest;
    let index = |m: &BTreeMap<String, Value>| -> HashMap<ChildId, String> {
        m.iter().map(|(k, v)| (ChildId::of(v), k.clone())).collect()
    };
    for (claims, desired) in older {
        let theirs = index(desired);
        let ours = index(&out);
        for group in *claims {
            for name in &group.names {
                let id = ChildId {
                    group: group.api_group.clone(),
                    kind: group.kind.clone(),
                    name: name.clone(),
                };
                let (Some(our_key), Some(their_key)) = (ours.get(&id), theirs.get(&id)) else {
                    continue;
                };
                if let Some(child) = desired.get(their_key) {
                    out.remove(our_key);
                    out.insert(their_key.clone(), child.clone());
                }
            }
        }
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn id(name: &str) -> ChildId {
        ChildId {
            group: "example.com".into(),
            kind: "Cat".into(),
            name: name.into(),
        }
    }

    fn claims(names: &[&str]) -> Vec<ControllerRevisionChildren> {
        if names.is_empty() {
            return Vec::new();
        }
        vec![ControllerRevisionChildren {
            api_group: "example.com".into(),
            kind: "Cat".into(),
            names: names.iter().map(|n| (*n).to_owned()).collect(),
        }]
    }

    fn cat(name: &str, color: &str) -> Value {
        json!({"apiVersion": "example.com/v1", "kind": "Cat",
               "metadata": {"name": name, "namespace": "ns"}, "spec": {"color": color}})
    }

    /// An observed cat as the API server holds it after a create of `cat(name, color)`.
    fn observed(name: &str, color: &str, generation: i64) -> Value {
        let mut o =
            dynapply::prepare_create(&cat(name, color), &dynapply::Options::default()).unwrap();
        o["metadata"]["generation"] = json!(generation);
        o
    }

    fn with_status(mut o: Value, observed_generation: i64, ready: &str) -> Value {
        o["status"] = json!({"observedGeneration": observed_generation,
                             "conditions": [{"type": "Ready", "status": ready}]});
        o
    }

    fn rules(method: ChildUpdateMethod) -> RollingRules {
        let check = StatusConditionCheck {
            type_: "Ready".into(),
            status: Some("True".into()),
            reason: None,
        };
        RollingRules::from([(
            ("example.com".to_owned(), "Cat".to_owned()),
            RollingRule {
                method,
                conditions: vec![check],
                options: dynapply::Options::default(),
            },
        )])
    }

    struct World {
        rules: RollingRules,
        observed: HashMap<ChildId, Value>,
        order: Vec<ChildId>,
        desired: HashMap<ChildId, Value>,
    }

    impl World {
        /// Two cats, both wanted `color` by the latest revision.
        fn new(method: ChildUpdateMethod, color: &str) -> World {
            let order = vec![id("c-0"), id("c-1")];
            let desired = order
                .iter()
                .map(|i| (i.clone(), cat(&i.name, color)))
                .collect();
            World {
                rules: rules(method),
                observed: HashMap::new(),
                order,
                desired,
            }
        }
        fn observe(&mut self, o: Value) {
            self.observed.insert(ChildId::of(&o), o);
        }
        fn view(&self) -> RolloutView<'_> {
            RolloutView {
                rules: &self.rules,
                observed: &self.observed,
                latest_order: &self.order,
                latest_desired: &self.desired,
                last_applied: &|_, _| None,
            }
        }
    }

    #[test]
    fn up_to_date_consults_the_known_last_applied_and_answers_the_same() {
        let opts = dynapply::Options::default();
        let first = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c"}, "data": {"a": "1", "b": "2"}});
        let live = dynapply::prepare_create(&first, &opts).unwrap();
        let known = std::sync::Arc::new(dynapply::recorded_last_applied(&first, &opts).unwrap());
        let asked = std::sync::atomic::AtomicUsize::new(0);
        // what kmeta recorded by writing `live`: the recorded path
        let lookup = |_: &Value, _: &dynapply::Options| {
            asked.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Some(crate::reconcile::decide::KnownLast {
                value: known.clone(),
                recorded: true,
            })
        };
        let smaller = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c"}, "data": {"a": "1"}});
        for want in [&first, &smaller] {
            assert_eq!(
                up_to_date(&live, want, &opts, &lookup),
                up_to_date(&live, want, &opts, &|_, _| None),
                "{want}"
            );
        }
        assert!(up_to_date(&live, &first, &opts, &|_, _| None));
        assert!(!up_to_date(&live, &smaller, &opts, &|_, _| None));
        assert_eq!(asked.load(std::sync::atomic::Ordering::SeqCst), 2);
    }

    #[test]
    fn revision_name_is_metacontrollers_sha1_of_uid_and_go_json() {
        // sha1("uid-1" + `{"spec":{"a":1}}`), computed with sha1sum
        let want = "things.example.com-7e2336ed18726c7c0512cdaf694929359b3e75c4";
        let patch = json!({"spec": {"a": 1}});
        assert_eq!(
            revision_name("things", "example.com", "uid-1", &patch),
            want
        );
        // stable: key order and a re-decoded copy do not change it
        let a = json!({"spec": {"b": "x", "a": [1, 2]}, "meta": {"z": true, "y": null}});
        let b: Value =
            serde_json::from_str(r#"{"meta":{"y":null,"z":true},"spec":{"a":[1,2],"b":"x"}}"#)
                .unwrap();
        assert_eq!(
            revision_name("things", "example.com", "u", &a),
            revision_name("things", "example.com", "u", &b)
        );
        assert_ne!(
            revision_name("things", "example.com", "u", &a),
            revision_name("things", "example.com", "v", &a),
            "the parent UID is part of the hash"
        );
        assert!(revision_name("pods", "", "u", &a).starts_with("pods.core-"));
        let long = revision_name(&"r".repeat(300), "example.com", "u", &a);
        assert_eq!(long.len(), 253);
    }

    #[test]
    fn patches_take_and_restore_the_field_paths() {
        let parent = json!({"metadata": {"name": "p"}, "spec": {"replicas": 2, "template": {"x": 1}},
                            "status": {"ready": 1}});
        let paths = vec!["spec.template".to_owned(), "spec.missing".to_owned()];
        let patch = make_patch(&parent, &paths).unwrap();
        assert_eq!(patch, json!({"spec": {"template": {"x": 1}}}));
        let now = json!({"metadata": {"name": "p"}, "spec": {"replicas": 3, "template": {"x": 2}}});
        let old = apply_patch(&now, &patch, &paths, "r").unwrap();
        assert_eq!(
            old,
            json!({"metadata": {"name": "p"}, "spec": {"replicas": 3, "template": {"x": 1}}})
        );
        let err = make_patch(&json!({"spec": "text"}), &["spec.a".to_owned()]).unwrap_err();
        assert!(err.to_string().contains("\"spec.a\""), "{err}");
    }

    #[test]
    fn unclaimed_children_go_to_the_latest_revision_at_once() {
        let w = World::new(ChildUpdateMethod::RollingInPlace, "black");
        let mut revs = vec![claims(&[])];
        let step = roll(&mut revs, w.view());
        assert_eq!(step, Step::OnLatest);
        assert_eq!(revs[0], claims(&["c-0", "c-1"]));
    }

    #[test]
    fn one_child_moves_per_sync_and_waits_for_the_status_check() {
        let mut w = World::new(ChildUpdateMethod::RollingInPlace, "white");
        w.observe(with_status(observed("c-0", "black", 1), 1, "True"));
        w.observe(with_status(observed("c-1", "black", 1), 1, "True"));
        let mut revs = vec![claims(&[]), claims(&["c-0", "c-1"])];
        // nothing on latest yet: the first child moves
        let step = roll(&mut revs, w.view());
        assert_eq!(
            step,
            Step::Progressing {
                kind: "Cat".into(),
                name: "c-0".into()
            }
        );
        assert_eq!(revs, vec![claims(&["c-0"]), claims(&["c-1"])]);
        // c-0 not updated yet: wait
        let step = roll(&mut revs, w.view());
        assert_eq!(
            step,
            Step::Waiting("child Cat c-0 is not updated yet".into())
        );
        assert_eq!(revs, vec![claims(&["c-0"]), claims(&["c-1"])]);
        // updated (generation 2) but its controller has not observed it
        let updated = dynapply::apply_update(
            &w.observed[&id("c-0")],
            &cat("c-0", "white"),
            &dynapply::Options::default(),
        )
        .unwrap();
        let dynapply::Outcome::Changed(mut updated) = updated else {
            panic!("an update")
        };
        updated["metadata"]["generation"] = json!(2);
        w.observe(updated.clone());
        let step = roll(&mut revs, w.view());
        assert_eq!(
            step,
            Step::Waiting(
                "child Cat c-0 with RollingInPlace update strategy hasn't observed latest spec"
                    .into()
            )
        );
        // observed, but not Ready
        w.observe(with_status(updated.clone(), 2, "False"));
        let step = roll(&mut revs, w.view());
        assert_eq!(
            step,
            Step::Waiting(
                "child Cat c-0 failed status check: \"Ready\" condition status is \"False\" (want \"True\")"
                    .into()
            )
        );
        assert_eq!(revs, vec![claims(&["c-0"]), claims(&["c-1"])]);
        // Ready: the next child moves, the old revision is left with none
        w.observe(with_status(updated, 2, "True"));
        let step = roll(&mut revs, w.view());
        assert_eq!(
            step,
            Step::Progressing {
                kind: "Cat".into(),
                name: "c-1".into()
            }
        );
        assert_eq!(revs, vec![claims(&["c-0", "c-1"]), claims(&[])]);
        assert_eq!(keep_revisions(&revs), vec![true, false]);
    }

    #[test]
    fn rolling_recreate_ignores_observed_generation_and_needs_the_child_observed() {
        let mut w = World::new(ChildUpdateMethod::RollingRecreate, "white");
        // c-0 was deleted for its recreate and is not back yet
        w.observe(with_status(observed("c-1", "black", 1), 1, "True"));
        let mut revs = vec![claims(&["c-0"]), claims(&["c-1"])];
        assert_eq!(
            roll(&mut revs, w.view()),
            Step::Waiting("missing child Cat c-0".into())
        );
        // recreated at generation 5 with a stale observedGeneration: RollingRecreate does not care
        w.observe(with_status(observed("c-0", "white", 5), 1, "True"));
        assert_eq!(
            roll(&mut revs, w.view()),
            Step::Progressing {
                kind: "Cat".into(),
                name: "c-1".into()
            }
        );
    }

    #[test]
    fn a_child_already_as_the_latest_revision_wants_it_moves_without_a_step() {
        let mut w = World::new(ChildUpdateMethod::RollingInPlace, "white");
        w.observe(with_status(observed("c-0", "white", 1), 1, "True"));
        w.observe(with_status(observed("c-1", "black", 1), 1, "True"));
        let mut revs = vec![claims(&[]), claims(&["c-0", "c-1"])];
        let step = roll(&mut revs, w.view());
        // c-0 moved for free, then c-1 is the one step of this sync
        assert_eq!(
            step,
            Step::Progressing {
                kind: "Cat".into(),
                name: "c-1".into()
            }
        );
        assert_eq!(revs, vec![claims(&["c-0", "c-1"]), claims(&[])]);
    }

    #[test]
    fn claims_drop_undesired_children_other_kinds_and_duplicates() {
        let w = World::new(ChildUpdateMethod::RollingInPlace, "white");
        let mut dog = claims(&["d"]);
        dog[0].kind = "Dog".into();
        let mut older = claims(&["c-0", "gone"]);
        older.extend(dog);
        let mut revs = vec![claims(&["c-0"]), older, claims(&["c-1"]), claims(&["c-1"])];
        let claimed = sync_claims(&mut revs, &w.rules, &w.desired);
        assert_eq!(
            revs,
            vec![claims(&["c-0"]), claims(&[]), claims(&["c-1"]), claims(&[])]
        );
        assert_eq!(claimed.get(&id("c-0")), Some(&0));
        assert_eq!(claimed.get(&id("c-1")), Some(&2));
        assert_eq!(keep_revisions(&revs), vec![true, false, true, false]);
    }

    #[test]
    fn status_checks_name_the_missing_or_wrong_condition() {
        let check = |status: Option<&str>, reason: Option<&str>| StatusConditionCheck {
            type_: "Ready".into(),
            status: status.map(str::to_owned),
            reason: reason.map(str::to_owned),
        };
        let child = json!({"status": {"conditions": [{"type": "Ready", "status": "True", "reason": "Fed"}]}});
        assert_eq!(
            status_check(&[check(Some("True"), Some("Fed"))], &child),
            Ok(())
        );
        assert_eq!(status_check(&[], &json!({})), Ok(()));
        assert_eq!(
            status_check(&[check(None, None)], &json!({"status": {}})).map_err(|e| e.to_string()),
            Err("required condition type missing: \"Ready\"".into())
        );
        assert_eq!(
            status_check(&[check(None, Some("Hungry"))], &child).map_err(|e| e.to_string()),
            Err("\"Ready\" condition reason is \"Fed\" (want \"Hungry\")".into())
        );
    }

    #[test]
    fn the_updated_condition_says_where_the_rollout_is() {
        let c = |s: &Step| updated_condition(s, "things.example.com-abc");
        assert_eq!(
            c(&Step::OnLatest),
            json!({"type": "Updated", "status": "True", "reason": "OnLatestRevision",
                   "message": "latest ControllerRevision: things.example.com-abc"})
        );
        let moving = Step::Progressing {
            kind: "Cat".into(),
            name: "c-1".into(),
        };
        assert_eq!(c(&moving)["reason"], "RolloutProgressing");
        assert_eq!(c(&moving)["message"], "updating Cat c-1");
        assert_eq!(c(&moving)["status"], "False");
        let waiting = c(&Step::Waiting("why".into()));
        assert_eq!(
            (&waiting["reason"], &waiting["message"]),
            (&json!("RolloutWaiting"), &json!("why"))
        );

        // a null status gets one; an existing Updated condition is replaced, others kept
        let s = with_condition(None, c(&Step::OnLatest)).unwrap();
        assert_eq!(s["conditions"].as_array().unwrap().len(), 1);
        let hook = json!({"ready": 1, "conditions": [{"type": "Other", "status": "True"},
                                                     {"type": "Updated", "status": "True"}]});
        let s = with_condition(Some(&hook), c(&moving)).unwrap();
        assert_eq!(s["ready"], 1);
        assert_eq!(s["conditions"][0]["type"], "Other");
        assert_eq!(s["conditions"][1]["reason"], "RolloutProgressing");
        assert!(with_condition(Some(&json!({"conditions": 1})), c(&moving)).is_err());
    }

    #[test]
    fn older_revisions_keep_their_version_of_the_children_they_claim() {
        let key = |n: &str| format!("Cat.example.com/v1 ns/{n}");
        let latest: BTreeMap<String, Value> = ["c-0", "c-1", "c-2"]
            .iter()
            .map(|n| (key(n), cat(n, "white")))
            .collect();
        let old: BTreeMap<String, Value> = ["c-1", "c-3"]
            .iter()
            .map(|n| (key(n), cat(n, "black")))
            .collect();
        let old_claims = claims(&["c-1", "c-3"]);
        let out = combine_desired(latest, &[(&old_claims, &old)]);
        assert_eq!(out.len(), 3, "c-3 is not wanted by the latest revision");
        assert_eq!(out[&key("c-0")]["spec"]["color"], "white");
        assert_eq!(out[&key("c-1")]["spec"]["color"], "black");
        assert_eq!(out[&key("c-2")]["spec"]["color"], "white");
    }

    #[test]
    fn revisions_live_in_the_parents_namespace() {
        let p = json!({"kind": "CatSet", "metadata": {"name": "cs", "namespace": "ns"}});
        assert_eq!(revision_namespace(&p, true).unwrap(), "ns");
        let c = json!({"kind": "CatSet", "metadata": {"name": "cs"}});
        let err = revision_namespace(&c, false).unwrap_err().to_string();
        assert!(err.starts_with("CatSet cs: rolling updates"), "{err}");
    }

    #[test]
    fn resync_is_the_smallest_positive() {
        assert_eq!(combined_resync([0.0, 5.0, 2.0, -1.0]), 2.0);
        assert_eq!(combined_resync([0.0]), 0.0);
    }
}
