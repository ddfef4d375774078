//! The child plan: which writes bring the observed children to the desired ones, and in which
//! order.

use std::borrow::Borrow;
use std::collections::BTreeMap;

use serde_json::Value;

use crate::api::ChildUpdateMethod;
use crate::object::is_deleting;

use super::{DecideError, add_owner, child_key, owner_reference_holds};

// ---------------------------------------------------------------------------------------------
// the child plan

/// One write to make to a child.
#[derive(Debug, Clone, PartialEq)]
pub enum ChildOp {
    /// POST this object.
    Create(Value),
    /// PUT this merged object (carries the live resourceVersion).
    Update(Value),
    /// DELETE with a UID precondition and Background propagation.
    Delete {
        /// The observed object being deleted.
        object: Value,
        /// Why: `not desired` or `recreate`.
        reason: &'static str,
    },
}

/// Plans child writes: deletes of observed children no longer desired (first), then creates of
/// missing ones and updates per update method. Children being deleted are never touched.
/// `options` gives the dynapply options (list rules) for a child type; `last_applied` the
/// last-applied configuration of an observed child when it is known for that child version
/// (otherwise dynapply parses the annotation).
pub fn plan_children<'o, O: Borrow<Value>>(
    parent: &Value,
    observed: &[O],
    desired: &BTreeMap<String, Value>,
    method: impl Fn(&str) -> ChildUpdateMethod,
    options: impl Fn(&str) -> &'o dynapply::Options,
    last_applied: impl Fn(&Value, &dynapply::Options) -> Option<KnownLast>,
) -> Result<Vec<ChildOp>, DecideError> {
    let none = std::collections::BTreeSet::new();
    let plan = plan_children_settled(
        parent,
        (observed, &none),
        desired,
        method,
        options,
        last_applied,
    )?;
    Ok(plan.ops)
}

/// A child plan, and the desired children found to need no update.
#[derive(Debug, Default, PartialEq)]
pub struct Plan<'d> {
    /// The writes, in [`plan_children`]'s order.
    pub ops: Vec<ChildOp>,
    /// The keys of the observed children dynapply's update left unchanged (not those whose
    /// change the update method holds back): the caller may settle those versions
    /// ([`crate::runtime::compact::Compact::settle`]).
    pub unchanged: Vec<&'d str>,
}

/// [`plan_children`] where `settled` names observed children left out of `observed` (not parsed)
/// because their version is known to need no update for their desired object: they are planned
/// as unchanged, never created. The plan also names the children found unchanged.
pub fn plan_children_settled<'o, 'd, O: Borrow<Value>>(
    parent: &Value,
    (observed, settled): (&[O], &std::collections::BTreeSet<String>),
    desired: &'d BTreeMap<String, Value>,
    method: impl Fn(&str) -> ChildUpdateMethod,
    options: impl Fn(&str) -> &'o dynapply::Options,
    last_applied: impl Fn(&Value, &dynapply::Options) -> Option<KnownLast>,
) -> Result<Plan<'d>, DecideError> {
    let observed: BTreeMap<String, &Value> = observed
        .iter()
        .map(|o| (child_key(o.borrow()), o.borrow()))
        .collect();
    let mut ops = Vec::new();
    let mut unchanged = Vec::new();
    for (key, obs) in &observed {
        if !desired.contains_key(key) && !is_deleting(obs) {
            ops.push(ChildOp::Delete {
                object: (*obs).clone(),
                reason: "not desired",
            });
        }
    }
    for (key, want) in desired {
        if settled.contains(key) {
            continue;
        }
        let gk = key.split(' ').next().unwrap_or_default();
        let opts = options(gk);
        let err = |source| DecideError::Apply {
            child: key.clone(),
            source,
        };
        match observed.get(key) {
            None => {
                let created = dynapply::prepare_create(want, opts).map_err(err)?;
                ops.push(ChildOp::Create(owned(created, parent)));
            }
            Some(obs) if is_deleting(obs) => {}
            Some(obs) => match update(obs, last_applied(obs, opts), want, opts).map_err(err)? {
                dynapply::Outcome::Unchanged => unchanged.push(key.as_str()),
                dynapply::Outcome::Changed(merged) => match method(gk) {
                    ChildUpdateMethod::OnDelete => {}
                    ChildUpdateMethod::Recreate | ChildUpdateMethod::RollingRecreate => {
                        ops.push(ChildOp::Delete {
                            object: (*obs).clone(),
                            reason: "recreate",
                        });
                    }
                    ChildUpdateMethod::InPlace | ChildUpdateMethod::RollingInPlace => {
                        ops.push(ChildOp::Update(merged));
                    }
                },
            },
        }
    }
    Ok(Plan { ops, unchanged })
}

/// `child` as `parent` owns it: with the parent's owner reference, unless no owner reference
/// can hold it (a label-owned child, [`super::label_owned`], carries the parent's labels
/// instead; a controller that does not own children by label never gets such a child past
/// [`super::validate_desired`]).
pub fn owned(child: Value, parent: &Value) -> Value {
    if owner_reference_holds(parent, &child) {
        add_owner(child, parent)
    } else {
        child
    }
}

/// The plan's writes in two phases: first the deletes of children no longer desired, then the
/// creates, updates and deletes for recreation (each phase's writes may run at once).
pub fn write_phases(ops: Vec<ChildOp>) -> (Vec<ChildOp>, Vec<ChildOp>) {
    ops.into_iter().partition(|op| {
        matches!(
            op,
            ChildOp::Delete {
                reason: "not desired",
                ..
            }
        )
    })
}

/// Adoption in one write: `ops` with an update of each observed child in `adopting` (an orphan
/// this sync adopts, observed with the parent's owner reference added in memory, not yet written)
/// that the plan does not write otherwise, so its owner reference is written. A planned update
/// of such a child writes the owner reference with the hook's change; a planned delete deletes
/// the orphan (Metacontroller adopts it, then deletes it).
pub fn with_adoptions<O: Borrow<Value>>(
    mut ops: Vec<ChildOp>,
    observed: &[O],
    adopting: &std::collections::BTreeSet<String>,
) -> Vec<ChildOp> {
    if adopting.is_empty() {
        return ops;
    }
    let planned: std::collections::BTreeSet<String> = ops
        .iter()
        .map(|op| match op {
            ChildOp::Create(o) | ChildOp::Update(o) | ChildOp::Delete { object: o, .. } => {
                child_key(o)
            }
        })
        .collect();
    for o in observed.iter().map(Borrow::borrow) {
        let key = child_key(o);
        if adopting.contains(&key) && !planned.contains(&key) {
            ops.push(ChildOp::Update(o.clone()));
        }
    }
    ops
}

/// A child's last-applied configuration known for its observed version: `recorded` when the
/// annotation holds the canonical encoding of `value` — kmeta wrote that version, or parsed it
/// back and [`dynapply::is_recorded`] recognised it — so an update compares the answer with it
/// instead of encoding the answer ([`dynapply::apply_update_recorded`]); else parsed from an
/// annotation written in another form.
#[derive(Clone, Debug)]
pub struct KnownLast {
    /// The configuration.
    pub value: std::sync::Arc<Value>,
    /// Whether the annotation of this very version is dynapply's encoding of it.
    pub recorded: bool,
}

impl KnownLast {
    /// dynapply's update of `obs` (the version this configuration is known for) to `want`.
    pub fn apply_update(
        &self,
        obs: &Value,
        want: &Value,
        opts: &dynapply::Options,
    ) -> Result<dynapply::Outcome, dynapply::Error> {
        match self.recorded {
            true => dynapply::apply_update_recorded(obs, &self.value, want, opts),
            false => dynapply::apply_update_with(obs, Some(&self.value), want, opts),
        }
    }
}

/// dynapply's update of `obs`, with its last-applied configuration when known.
fn update(
    obs: &Value,
    last: Option<KnownLast>,
    want: &Value,
    opts: &dynapply::Options,
) -> Result<dynapply::Outcome, dynapply::Error> {
    match last {
        Some(last) => last.apply_update(obs, want, opts),
        None => dynapply::apply_update(obs, want, opts),
    }
}

/// Under drift policy `Report` (dynamic apply): `Some(paths)` when the hook's answer for a child
/// is the one last applied, so a difference between `live` and `desired` was made by others
/// (the drifted fields, see [`crate::reconcile::apply::drifted_paths`]); `None` when the hook's
/// answer changed (its change is written) or the last-applied record cannot be read. Fields the
/// child type's field rules leave to others are not drift.
pub fn drift_only(live: &Value, desired: &Value, opts: &dynapply::Options) -> Option<Vec<String>> {
    let prepared = dynapply::prepare_create(desired, opts).ok()?;
    let last = dynapply::get_last_applied(live, opts).ok()??;
    let want = dynapply::get_last_applied(&prepared, opts).ok()??;
    if !dynapply::json_eq(&last, &want) {
        return None;
    }
    let meant = dynapply::without_withheld(&opts.fields, live, &prepared);
    Some(crate::reconcile::apply::drifted_paths(&meant, live))
}

/// The body of a server-side apply of child `desired` of `parent` onto `live` (as a sync sends
/// it, and `kmeta render` shows it): dynapply's apply body with the owner reference, without
/// what the server owns, guarded by `live_version` when a subtree was merged from live
/// ([`crate::reconcile::apply::guarded`]).
pub fn server_side_apply_request(
    live: &Value,
    desired: &Value,
    opts: &dynapply::Options,
    parent: &Value,
    live_version: Option<&str>,
) -> Result<Value, dynapply::Error> {
    use crate::reconcile::apply;
    let subtrees = opts.rules.preserve_unknown_subtrees();
    let prepared = dynapply::server_side_apply_body(live, desired, opts, subtrees)?;
    let prepared = owned(prepared, parent);
    Ok(apply::guarded(
        apply::apply_body(&prepared),
        live_version,
        !subtrees.is_empty(),
    ))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::reconcile::decide::fixtures::{child, parent};

    use serde_json::json;

    use crate::api::ChildUpdateMethod;
    use crate::object::{controller_ref, meta_str};
    use crate::reconcile::decide::with_owner;

    #[test]
    fn an_orphan_adopted_in_one_write_is_written_once() {
        let p = parent();
        // observed as written by kmeta before (the last-applied annotation) and adopted now
        // (the owner reference added in memory); `kept` is owned already
        let opts = dynapply::Options::default();
        let want = |name: &str| with_owner(&child(name, json!({}), None), &p);
        let live = |name: &str| dynapply::prepare_create(&want(name), &opts).unwrap();
        let mut changed_want = want("changed");
        changed_want["data"] = json!({"k": "v"});
        let observed = [live("same"), live("changed"), live("dropped"), live("kept")];
        let ops = plan(
            &observed,
            vec![want("same"), changed_want, want("kept")],
            ChildUpdateMethod::InPlace,
        );
        assert_eq!(ops.len(), 2, "a delete and an update: {ops:?}");
        let adopting = ["same", "changed", "dropped"]
            .iter()
            .map(|n| child_key(&child(n, json!({}), None)))
            .collect();
        let ops = with_adoptions(ops, &observed, &adopting);
        let by_name = |op: &ChildOp| match op {
            ChildOp::Create(o) | ChildOp::Update(o) | ChildOp::Delete { object: o, .. } => {
                meta_str(o, "name").to_owned()
            }
        };
        let names: Vec<String> = ops.iter().map(by_name).collect();
        assert_eq!(names, ["dropped", "changed", "same"], "{ops:?}");
        assert!(
            matches!(&ops[0], ChildOp::Delete { .. }),
            "not desired: deleted"
        );
        let ChildOp::Update(changed) = &ops[1] else {
            panic!("{ops:?}")
        };
        assert_eq!(
            changed["data"]["k"], "v",
            "the hook's change and the adoption, one write"
        );
        assert!(controller_ref(changed).is_some());
        let ChildOp::Update(same) = &ops[2] else {
            panic!("{ops:?}")
        };
        assert!(
            controller_ref(same).is_some(),
            "an unchanged orphan: its owner reference"
        );
        // nothing adopted: the plan as it was
        let plain = plan(&observed, vec![], ChildUpdateMethod::InPlace);
        assert_eq!(
            with_adoptions(plain.clone(), &observed, &Default::default()),
            plain
        );
    }

    /// A settled child (observed, known unchanged, not parsed) is neither created nor updated;
    /// the others are planned as without it, and the unchanged ones are named.
    #[test]
    fn settled_children_are_left_as_they_are_and_unchanged_ones_named() {
        let p = parent();
        let opts = dynapply::Options::default();
        let want = |name: &str, v: &str| child(name, json!({"k": v}), None);
        let live = |name: &str| dynapply::prepare_create(&want(name, "1"), &opts).unwrap();
        let observed = [live("same"), live("changed"), live("dropped")];
        let desired: BTreeMap<String, Value> = [
            want("same", "1"),
            want("changed", "2"),
            want("settled", "1"),
        ]
        .into_iter()
        .map(|d| (child_key(&d), d))
        .collect();
        let settled = [child_key(&want("settled", "1"))].into_iter().collect();
        let m = |_: &str| ChildUpdateMethod::InPlace;
        let plan = plan_children_settled(
            &p,
            (&observed, &settled),
            &desired,
            m,
            |_| &opts,
            |_, _| None,
        )
        .unwrap();
        let names: Vec<&str> = plan
            .ops
            .iter()
            .map(|op| meta_str(op_obj(op), "name"))
            .collect();
        assert_eq!(names, ["dropped", "changed"], "{:?}", plan.ops);
        assert_eq!(plan.unchanged, [child_key(&want("same", "1")).as_str()]);
        // without the settled set the child would be created
        let all = plan_children(&p, &observed, &desired, m, |_| &opts, |_, _| None).unwrap();
        assert!(matches!(all.last(), Some(ChildOp::Create(o)) if meta_str(o, "name") == "settled"));
        // a change held back by the update method is not unchanged
        let held = plan_children_settled(
            &p,
            (&observed, &settled),
            &desired,
            |_| ChildUpdateMethod::OnDelete,
            |_| &opts,
            |_, _| None,
        )
        .unwrap();
        assert_eq!(held.unchanged, plan.unchanged);
        assert_eq!(held.ops.len(), 1, "only the delete: {:?}", held.ops);
    }

    fn op_obj(op: &ChildOp) -> &Value {
        match op {
            ChildOp::Create(o) | ChildOp::Update(o) | ChildOp::Delete { object: o, .. } => o,
        }
    }

    fn plan(observed: &[Value], desired: Vec<Value>, m: ChildUpdateMethod) -> Vec<ChildOp> {
        let p = parent();
        let desired = desired.into_iter().map(|d| (child_key(&d), d)).collect();
        let opts = dynapply::Options::default();
        plan_children(&p, observed, &desired, |_| m, |_| &opts, |_, _| None).unwrap()
    }

    #[test]
    fn fields_left_to_others_are_not_drift() {
        let rule = |path: &str| dynapply::FieldRule {
            name: path.to_owned(),
            path: dynapply::FieldPath::parse(path).unwrap(),
            mode: dynapply::FieldMode::HandOff,
        };
        let mut opts = dynapply::Options::default();
        let want = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "d", "namespace": "ns"}, "spec": {"replicas": 3, "paused": false}});
        let mut live = dynapply::prepare_create(&want, &opts).unwrap();
        live["spec"] = json!({"replicas": 7, "paused": true});
        assert_eq!(
            drift_only(&live, &want, &opts),
            Some(vec![".spec.paused".to_owned(), ".spec.replicas".to_owned()])
        );
        opts.fields = vec![rule("spec.replicas")];
        assert_eq!(
            drift_only(&live, &want, &opts),
            Some(vec![".spec.paused".to_owned()])
        );
    }

    #[test]
    fn plan_uses_a_known_last_applied_instead_of_the_annotation() {
        let opts = dynapply::Options::default();
        let first = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "namespace": "ns"}, "data": {"a": "1", "b": "2"}});
        let mut live = dynapply::prepare_create(&first, &opts).unwrap();
        live["metadata"]["uid"] = json!("u1");
        live["metadata"]["resourceVersion"] = json!("3");
        let want = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "namespace": "ns"}, "data": {"a": "1"}});
        let desired = BTreeMap::from([(child_key(&want), want.clone())]);
        let data_of = |known: Option<Value>| {
            let ops = plan_children(
                &parent(),
                std::slice::from_ref(&live),
                &desired,
                |_| ChildUpdateMethod::InPlace,
                |_| &opts,
                |_, _| {
                    known.clone().map(|v| KnownLast {
                        value: std::sync::Arc::new(v),
                        recorded: false,
                    })
                },
            )
            .unwrap();
            match ops.as_slice() {
                [ChildOp::Update(o)] => o["data"].clone(),
                other => panic!("one update expected: {other:?}"),
            }
        };
        // parsed from the annotation: `b` was applied and is no longer wanted, so it goes
        assert_eq!(data_of(None), json!({"a": "1"}));
        // the known last-applied is used as is: one that never had `b` leaves it alone
        assert_eq!(
            data_of(Some(json!({"data": {"a": "1"}}))),
            json!({"a": "1", "b": "2"})
        );
    }

    #[test]
    fn plan_creates_with_annotation_and_owner() {
        let ops = plan(
            &[],
            vec![child("a", json!({"app": "p"}), None)],
            ChildUpdateMethod::OnDelete,
        );
        let [ChildOp::Create(obj)] = ops.as_slice() else {
            panic!("{ops:?}")
        };
        assert!(obj["metadata"]["annotations"][dynapply::LAST_APPLIED_ANNOTATION].is_string());
        assert_eq!(controller_ref(obj).unwrap()["uid"], "u1");
    }

    #[test]
    fn a_child_no_owner_reference_can_hold_is_created_without_one() {
        let mut other = child("a", json!({}), None);
        other["metadata"]["namespace"] = json!("tenant");
        let ops = plan(&[], vec![other], ChildUpdateMethod::InPlace);
        let [ChildOp::Create(obj)] = ops.as_slice() else {
            panic!("{ops:?}")
        };
        assert!(obj["metadata"].get("ownerReferences").is_none(), "{obj}");
        assert!(obj["metadata"]["annotations"][dynapply::LAST_APPLIED_ANNOTATION].is_string());
    }

    /// A type written without the record (`kmeta.dev/last-applied: omit`): created without the
    /// annotation; with the base read from `managedFields` a steady child is unchanged and a
    /// field the hook stops setting makes an update without it.
    #[test]
    fn plan_without_the_record_uses_the_base_it_is_given() {
        let p = parent();
        let opts = dynapply::Options {
            record: false,
            ..dynapply::Options::default()
        };
        let mut want = child("a", json!({"app": "p"}), None);
        want["data"] = json!({"k": "v", "old": "o"});
        let desired = |w: &Value| BTreeMap::from([(child_key(w), w.clone())]);
        let run = |observed: &[Value], w: &Value, base: Option<Value>| {
            plan_children(
                &p,
                observed,
                &desired(w),
                |_| ChildUpdateMethod::InPlace,
                |_| &opts,
                |_, _| {
                    base.clone().map(|v| KnownLast {
                        value: std::sync::Arc::new(v),
                        recorded: false,
                    })
                },
            )
            .unwrap()
        };
        let created = run(&[], &want, None);
        let [ChildOp::Create(created)] = created.as_slice() else {
            panic!("one create: {created:?}")
        };
        assert!(
            created["metadata"].get("annotations").is_none(),
            "{created}"
        );
        let live = created.clone();
        let applied = dynapply::recorded_last_applied(&want, &opts).unwrap();
        assert!(run(std::slice::from_ref(&live), &want, Some(applied.clone())).is_empty());
        let mut less = want.clone();
        less["data"] = json!({"k": "v"});
        let ops = run(std::slice::from_ref(&live), &less, Some(applied));
        let [ChildOp::Update(o)] = ops.as_slice() else {
            panic!("{ops:?}")
        };
        assert_eq!(o["data"], json!({"k": "v"}));
        assert!(o["metadata"].get("annotations").is_none(), "{o}");
        // no base: nothing is known to be applied, nothing removed
        assert!(run(std::slice::from_ref(&live), &less, None).is_empty());
    }

    #[test]
    fn plan_updates_per_method_and_skips_unchanged() {
        let want = child("a", json!({"app": "p"}), None);
        let created = dynapply::prepare_create(&want, &dynapply::Options::default()).unwrap();
        let live = with_owner(&created, &parent());
        assert!(
            plan(
                std::slice::from_ref(&live),
                vec![want.clone()],
                ChildUpdateMethod::InPlace
            )
            .is_empty()
        );
        let mut changed = want.clone();
        changed["data"] = json!({"k": "v"});
        for (m, expect) in [
            (ChildUpdateMethod::OnDelete, 0),
            (ChildUpdateMethod::InPlace, 1),
            (ChildUpdateMethod::Recreate, 1),
        ] {
            let ops = plan(std::slice::from_ref(&live), vec![changed.clone()], m);
            assert_eq!(ops.len(), expect, "{m:?}");
            match (m, ops.first()) {
                (ChildUpdateMethod::InPlace, Some(ChildOp::Update(o))) => {
                    assert_eq!(o["data"]["k"], "v");
                    assert_eq!(controller_ref(o).unwrap()["uid"], "u1");
                }
                (ChildUpdateMethod::Recreate, Some(ChildOp::Delete { reason, .. })) => {
                    assert_eq!(*reason, "recreate")
                }
                (ChildUpdateMethod::OnDelete, None) => {}
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn plan_deletes_undesired_first_and_never_touches_dying() {
        let mut dying = child("d", json!({}), Some("u1"));
        dying["metadata"]["deletionTimestamp"] = json!("t");
        let gone = child("g", json!({}), Some("u1"));
        let ops = plan(
            &[dying.clone(), gone],
            vec![child("n", json!({"app": "p"}), None), {
                let mut d = dying.clone();
                d["data"] = json!({"x": "1"});
                d
            }],
            ChildUpdateMethod::InPlace,
        );
        assert_eq!(ops.len(), 2, "{ops:?}");
        assert!(
            matches!(&ops[0], ChildOp::Delete { object, reason: "not desired" } if meta_str(object, "name") == "g")
        );
        assert!(matches!(&ops[1], ChildOp::Create(o) if meta_str(o, "name") == "n"));
    }

    /// Deletes of children no longer desired are one phase, written before everything else —
    /// recreation deletes, creates and updates — in the plan's order.
    #[test]
    fn write_phases_put_deletes_of_undesired_children_first() {
        let name = |op: &ChildOp| match op {
            ChildOp::Create(o) | ChildOp::Update(o) | ChildOp::Delete { object: o, .. } => {
                meta_str(o, "name").to_owned()
            }
        };
        let ops = vec![
            ChildOp::Create(child("c1", json!({}), None)),
            ChildOp::Delete {
                object: child("r", json!({}), Some("u1")),
                reason: "recreate",
            },
            ChildOp::Delete {
                object: child("g1", json!({}), Some("u1")),
                reason: "not desired",
            },
            ChildOp::Update(child("u", json!({}), Some("u1"))),
            ChildOp::Delete {
                object: child("g2", json!({}), Some("u1")),
                reason: "not desired",
            },
        ];
        let (first, then) = write_phases(ops);
        assert_eq!(first.iter().map(name).collect::<Vec<_>>(), ["g1", "g2"]);
        assert_eq!(then.iter().map(name).collect::<Vec<_>>(), ["c1", "r", "u"]);
    }
}
