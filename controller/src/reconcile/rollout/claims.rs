//! Rolling updates: which revision claims which child, and when the next child may move to the
//! latest revision (Metacontroller's `ready_to_continue` and `childStatusCheck`).

use super::*;

/// Which revision (index into the list, 0 = latest) claims each child.
pub type ClaimMap = HashMap<ChildId, usize>;

pub(super) fn add_child(claims: &mut Vec<ControllerRevisionChildren>, id: &ChildId) {
    let at = match claims
        .iter()
        .position(|c| c.api_group == id.group && c.kind == id.kind)
    {
        Some(i) => i,
        None => {
            claims.push(ControllerRevisionChildren {
                api_group: id.group.clone(),
                kind: id.kind.clone(),
                names: Vec::new(),
            });
            claims.len() - 1
        }
    };
    if let Some(group) = claims.get_mut(at)
        && !group.names.contains(&id.name)
    {
        group.names.push(id.name.clone());
    }
}

pub(super) fn remove_child(claims: &mut Vec<ControllerRevisionChildren>, id: &ChildId) {
    for group in claims
        .iter_mut()
        .filter(|c| c.api_group == id.group && c.kind == id.kind)
    {
        group.names.retain(|n| n != &id.name);
    }
    claims.retain(|c| !c.names.is_empty());
}

/// Drops claims of kinds that no longer roll, of children the latest revision no longer wants
/// (they are deleted now) and duplicates (the latest revision, first, wins; then list order).
/// Unlike Metacontroller, which keeps the unfiltered names in the stored revision, the claims
/// kept are the ones written back, so a revision whose children are gone can be pruned.
pub fn sync_claims(
    revisions: &mut [Vec<ControllerRevisionChildren>],
    rules: &RollingRules,
    latest_desired: &HashMap<ChildId, Value>,
) -> ClaimMap {
    let mut claimed = ClaimMap::new();
    for (i, claims) in revisions.iter_mut().enumerate() {
        for group in claims.iter_mut() {
            if rule(rules, &group.api_group, &group.kind).is_none() {
                group.names.clear();
                continue;
            }
            group.names.retain(|name| {
                let id = ChildId {
                    group: group.api_group.clone(),
                    kind: group.kind.clone(),
                    name: name.clone(),
                };
                if !latest_desired.contains_key(&id) || claimed.contains_key(&id) {
                    return false;
                }
                claimed.insert(id, i);
                true
            });
        }
        claims.retain(|c| !c.names.is_empty());
    }
    claimed
}

/// What the rollout step found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// A child must become ready before the next one moves (why).
    Waiting(String),
    /// This child moved to the latest revision in this sync.
    Progressing {
        /// Its kind.
        kind: String,
        /// Its name.
        name: String,
    },
    /// Every rolling child is on the latest revision.
    OnLatest,
}

/// The last-applied configuration of an observed child at its version, when known (see
/// `reconcile::last_applied`); `None`: dynapply parses the child's annotation.
pub type KnownLastApplied<'a> =
    &'a (dyn Fn(&Value, &dynapply::Options) -> Option<crate::reconcile::decide::KnownLast> + Sync);

/// What a rollout step reads: the rolling rules, the observed children and the latest revision's
/// desired children in the hook's response order.
#[derive(Clone, Copy)]
pub struct RolloutView<'a> {
    /// Rolling child types.
    pub rules: &'a RollingRules,
    /// Observed children.
    pub observed: &'a HashMap<ChildId, Value>,
    /// The latest revision's desired children, in response order.
    pub latest_order: &'a [ChildId],
    /// The latest revision's desired children.
    pub latest_desired: &'a HashMap<ChildId, Value>,
    /// The last-applied configurations known per child version.
    pub last_applied: KnownLastApplied<'a>,
}

impl std::fmt::Debug for RolloutView<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RolloutView")
            .field("rules", self.rules)
            .field("observed", self.observed)
            .field("latest_order", &self.latest_order)
            .field("latest_desired", self.latest_desired)
            .finish_non_exhaustive()
    }
}

/// Whether an update of `observed` to `desired` would change nothing (with the child's known
/// last-applied configuration, else its annotation parsed).
pub(super) fn up_to_date(
    observed: &Value,
    desired: &Value,
    opts: &dynapply::Options,
    last_applied: KnownLastApplied<'_>,
) -> bool {
    let outcome = match last_applied(observed, opts) {
        Some(last) => last.apply_update(observed, desired, opts),
        None => dynapply::apply_update(observed, desired, opts),
    };
    matches!(outcome, Ok(dynapply::Outcome::Unchanged))
}

/// The rollout of one sync (`syncRollingUpdate`): reconciles the claims, gives the latest
/// revision every unclaimed desired child and every child whose update would be a no-op, then
/// moves at most one more child — the first in response order not on the latest revision — if
/// [`ready_to_continue`] holds. `revisions[0]` is the latest revision's claims.
pub fn roll(revisions: &mut [Vec<ControllerRevisionChildren>], view: RolloutView<'_>) -> Step {
    let mut claimed = sync_claims(revisions, view.rules, view.latest_desired);
    for id in view.latest_order {
        let Some(r) = rule(view.rules, &id.group, &id.kind) else {
            continue;
        };
        let move_now = match claimed.get(id) {
            None => true,
            Some(0) => false,
            Some(_) => match (view.observed.get(id), view.latest_desired.get(id)) {
                (Some(obs), Some(want)) => up_to_date(obs, want, &r.options, view.last_applied),
                _ => false,
            },
        };
        if move_now {
            move_to_latest(revisions, &mut claimed, id);
        }
    }
    for id in view.latest_order {
        if rule(view.rules, &id.group, &id.kind).is_none() || claimed.get(id) == Some(&0) {
            continue;
        }
        let latest = revisions.first().map(Vec::as_slice).unwrap_or_default();
        if let Err(why) = ready_to_continue(latest, view) {
            return Step::Waiting(why.to_string());
        }
        move_to_latest(revisions, &mut claimed, id);
        return Step::Progressing {
            kind: id.kind.clone(),
            name: id.name.clone(),
        };
    }
    Step::OnLatest
}

pub(super) fn move_to_latest(
    revisions: &mut [Vec<ControllerRevisionChildren>],
    claimed: &mut ClaimMap,
    id: &ChildId,
) {
    for claims in revisions.iter_mut().skip(1) {
        remove_child(claims, id);
    }
    if let Some(latest) = revisions.first_mut() {
        add_child(latest, id);
    }
    claimed.insert(id.clone(), 0);
}

/// `shouldContinueRolling`: every rolling child the latest revision claims is observed, up to
/// date with the latest desired state, (RollingInPlace) has `status.observedGeneration` ≥
/// `metadata.generation` when it reports one, and passes its type's status checks. `Err` says
/// which child is not and why.
pub fn ready_to_continue(
    latest: &[ControllerRevisionChildren],
    view: RolloutView<'_>,
) -> Result<(), NotReady> {
    for group in latest {
        let Some(r) = rule(view.rules, &group.api_group, &group.kind) else {
            continue;
        };
        for name in &group.names {
            let id = ChildId {
                group: group.api_group.clone(),
                kind: group.kind.clone(),
                name: name.clone(),
            };
            let which = || (group.kind.clone(), name.clone());
            let Some(child) = view.observed.get(&id) else {
                let (kind, name) = which();
                return Err(NotReady::Missing { kind, name });
            };
            let updated = view
                .latest_desired
                .get(&id)
                .is_some_and(|want| up_to_date(child, want, &r.options, view.last_applied));
            if !updated {
                let (kind, name) = which();
                return Err(NotReady::NotUpdated { kind, name });
            }
            if r.method == ChildUpdateMethod::RollingInPlace && !observed_latest_generation(child) {
                let (kind, name) = which();
                return Err(NotReady::OldGeneration { kind, name });
            }
            status_check(&r.conditions, child).map_err(|why| {
                let (kind, name) = which();
                let why = Box::new(why);
                NotReady::StatusCheck { kind, name, why }
            })?;
        }
    }
    Ok(())
}

/// `status.observedGeneration` ≥ `metadata.generation`, or no (positive) observedGeneration at
/// all: not every controller reports one.
pub(super) fn observed_latest_generation(child: &Value) -> bool {
    let observed = child
        .pointer("/status/observedGeneration")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    let generation = child
        .pointer("/metadata/generation")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    observed <= 0 || observed >= generation
}

/// Why a rolling update does not move on to the next child yet (Metacontroller's wording).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotReady {
    /// A child of the latest revision is not observed.
    #[error("missing child {kind} {name}")]
    Missing {
        /// The child's kind.
        kind: String,
        /// The child's name.
        name: String,
    },
    /// A child of the latest revision is not up to date with its desired state yet.
    #[error("child {kind} {name} is not updated yet")]
    NotUpdated {
        /// The child's kind.
        kind: String,
        /// The child's name.
        name: String,
    },
    /// A `RollingInPlace` child has not observed its latest generation.
    #[error("child {kind} {name} with RollingInPlace update strategy hasn't observed latest spec")]
    OldGeneration {
        /// The child's kind.
        kind: String,
        /// The child's name.
        name: String,
    },
    /// A child fails its type's `childStatusCheck`.
    #[error("child {kind} {name} failed status check: {why}")]
    StatusCheck {
        /// The child's kind.
        kind: String,
        /// The child's name.
        name: String,
        /// Which check fails.
        why: Box<ConditionMismatch>,
    },
}

/// How a child's `status.conditions` fail a `childStatusCheck`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConditionMismatch {
    /// No condition of the checked type.
    #[error("required condition type missing: {type_:?}")]
    Missing {
        /// The condition type.
        type_: String,
    },
    /// The condition's `status` or `reason` (`field`) is not the one wanted.
    #[error("{type_:?} condition {field} is {found:?} (want {want:?})")]
    Differs {
        /// The condition type.
        type_: String,
        /// `status` or `reason`.
        field: &'static str,
        /// What the child has.
        found: String,
        /// What the check wants.
        want: String,
    },
}

/// `childStatusCheck`: every condition check holds on the child's `status.conditions`.
pub fn status_check(
    checks: &[StatusConditionCheck],
    child: &Value,
) -> Result<(), ConditionMismatch> {
    for check in checks {
        let found = child
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .and_then(|cs| {
                cs.iter()
                    .find(|c| c.get("type").and_then(Value::as_str) == Some(check.type_.as_str()))
            });
        let Some(cond) = found else {
            let type_ = check.type_.clone();
            return Err(ConditionMismatch::Missing { type_ });
        };
        for (field, want) in [("status", &check.status), ("reason", &check.reason)] {
            let found = cond.get(field).and_then(Value::as_str).unwrap_or_default();
            if let Some(want) = want
                && found != want
            {
                return Err(ConditionMismatch::Differs {
                    type_: check.type_.clone(),
                    field,
                    found: found.to_owned(),
                    want: want.clone(),
                });
            }
        }
    }
    Ok(())
}
