//! Server-side apply of children: the apply itself with its ownership upgrade and conflicts,
//! and the contests of a child two parents want.

use super::*;

/// Under server-side apply, a create refused because another parent holds the child's name
/// (another controller, or another DecoratorController on the same target): see
/// [`held_elsewhere`].
pub(super) async fn contested_create(
    c: &Children<'_>,
    rule: &ChildRule,
    w: &Writing<'_>,
    child: &Value,
    error: &kube::Error,
    out: &mut Collected,
) -> bool {
    if c.strategy != ApplyStrategy::ServerSideApply || !kapi::is_conflict(error) {
        return false;
    }
    let Ok(Some(existing)) = c.holding(rule, child).await else {
        return false;
    };
    held_elsewhere(c, w, child, &existing, out).await
}

/// Under server-side apply, a child to create that the watch already shows held by another
/// parent: the create is not sent (the server would refuse it, on every sync while the contest
/// lasts), and the contest is told as for a refused create ([`held_elsewhere`]). When the watch
/// is behind (the holder let the child go), the parent's next sync creates it.
pub(super) async fn contested_in_cache(
    c: &Children<'_>,
    rule: &ChildRule,
    w: &Writing<'_>,
    child: &Value,
    out: &mut Collected,
) -> bool {
    if c.strategy != ApplyStrategy::ServerSideApply {
        return false;
    }
    let cached = rule
        .informer
        .get(meta_str(child, "namespace"), meta_str(child, "name"));
    let Some(Ok(existing)) = cached.map(|o| o.value()) else {
        return false;
    };
    held_elsewhere(c, w, child, &existing, out).await
}

/// A child `existing` under the name of `child` is held by another parent: the parent is told
/// (`ChildContested` event, when the contest is new, and condition naming the holder), the
/// holder's parent learns it at its next sync, and nothing is written, so the two never take the
/// child back and forth. False when `existing` is not held by another parent.
pub(super) async fn held_elsewhere(
    c: &Children<'_>,
    w: &Writing<'_>,
    child: &Value,
    existing: &Value,
    out: &mut Collected,
) -> bool {
    let Some(holder) = apply::contest_holder(meta_str(w.parent, "uid"), child, existing) else {
        return false;
    };
    let name = describe(child);
    let note = format!(
        "{name} is wanted by another parent too: it is held by {holder} (kmeta does not take a child from another parent; it is left as it is until one of them stops wanting it)"
    );
    c.count(ChildOpLabel::Contested);
    let why = format!("held by {holder}");
    out.did(w.parent, child, decide::ChildAction::LeftAlone { why });
    let report = ChildReport {
        kind: apply::CONTESTED_CONDITION,
        reason: "ChildContested",
        message: format!("{name}: held by {holder}"),
    };
    c.report(
        w.parent,
        (Reason::ChildContested, note),
        report,
        &mut out.reports,
    )
    .await;
    out.contests.push(apply::Contest {
        holder_uid: controller_uid(existing).unwrap_or_default().to_owned(),
        child: name,
        contender: format!("{} {}", c.controller, describe(w.parent)),
    });
    true
}

/// Records this parent's contests (for their holders) and adds the contests of children it
/// holds to its reports, each also told in a `ChildContested` event on it.
pub(super) async fn remember_contests(
    c: &Children<'_>,
    parent: &Value,
    contests: Vec<apply::Contest>,
    reports: &mut Vec<ChildReport>,
) {
    let uid = meta_str(parent, "uid");
    let against = match c.ctx.child_writes.contests.lock() {
        Ok(mut all) => {
            all.set(c.controller, uid, contests);
            all.against(c.controller, uid)
        }
        Err(_) => Vec::new(),
    };
    for r in against {
        let note = format!(
            "{} (kmeta leaves the child to this parent and writes nothing for the other)",
            r.message
        );
        c.report(parent, (Reason::ChildContested, note), r, reports)
            .await;
    }
}

/// Server-side apply of one child (the desired object, with its owner reference and
/// last-applied annotation): first moves the fields the parent's manager owns through earlier
/// non-apply writes into its apply entry, then applies without force. Fields held by other
/// managers are taken with force under drift policy `Enforce` and named in a `ChildFieldsTaken`
/// event; under `Report` the conflict is reported (`ChildConflict`) and the child left as it is;
/// fields held by another parent's manager are never taken (`ChildContested`). `Ok(None)`: the
/// child was left as it is.
pub(super) async fn apply_child(
    c: &Children<'_>,
    rule: &ChildRule,
    w: &Writing<'_>,
    merged: &Value,
    out: &mut Collected,
) -> Result<Option<Landed>, kube::Error> {
    let key = decide::child_key(merged);
    let api = c.api_of(rule, merged);
    let Some(want) = w.desired.get(&key) else {
        return Ok(None);
    };
    let observed = w.observed.get(&key).copied();
    let live = observed.unwrap_or(merged);
    let cached = observed.map(|l| meta_str(l, "resourceVersion"));
    // built before any write: a body that cannot be built changes nothing
    let mut body = decide::server_side_apply_request(live, want, &rule.options, w.parent, cached)
        .map_err(|e| kube::Error::Service(Box::new(e)))?;
    let upgraded = match observed {
        Some(live) => upgrade_ownership(c, &api, live, &w.manager, &rule.options.fields).await?,
        None => None,
    };
    // a guarded body is guarded by the version the ownership upgrade wrote
    if let (Some(v), Some(rv)) = (
        upgraded.as_deref(),
        body.pointer_mut("/metadata/resourceVersion"),
    ) {
        *rv = Value::String(v.to_owned());
    }
    let stored = match kapi::apply_as(&api, &body, &w.manager, false).await {
        Ok(stored) => stored,
        Err(e) => {
            let kube::Error::Api(status) = &e else {
                return Err(e);
            };
            let conflicts = apply::conflicts_of(status);
            if status.code != 409 || conflicts.is_empty() {
                return Err(e);
            }
            match resolve_conflicts(c, rule, w, merged, &body, conflicts, out).await? {
                Some(stored) => stored,
                None => return Ok(None),
            }
        }
    };
    // the apply (forced or not) of a child seen before is awaited like any write: the next sync
    // waits for the watch
    let Some(cached) = cached else {
        return Ok(Some(Landed::default()));
    };
    Ok(Some(Landed {
        uid: meta(&stored, "uid").map(str::to_owned),
        resource_version: meta(&stored, "resourceVersion").map(str::to_owned),
        replaced: std::iter::once(cached.to_owned()).chain(upgraded).collect(),
        ..Landed::default()
    }))
}

/// Moves the fields `manager` (or kmeta's legacy managers) own through earlier creates and
/// updates into its apply entry, once per child: the caches keep no `managedFields`, so they
/// are read fresh the first time. With field rules (`fields`), before every apply: the ruled
/// fields those managers still own move to [`apply::HANDOFF_MANAGER`], so the apply that
/// leaves them out does not remove them. When it rewrote exactly the cached version `live`,
/// the resourceVersion it wrote (the apply that follows is based on it: only `managedFields`
/// changed).
pub(super) async fn upgrade_ownership(
    c: &Children<'_>,
    api: &kube::Api<kube::api::DynamicObject>,
    live: &Value,
    manager: &str,
    fields: &[dynapply::FieldRule],
) -> Result<Option<String>, kube::Error> {
    let uid = meta_str(live, "uid");
    let check = c
        .memory
        .child_reports
        .lock()
        .map(|r| r.needs_upgrade_check(uid, manager))
        .unwrap_or(true);
    if !check && fields.is_empty() {
        return Ok(None);
    }
    let Some(fresh) = kapi::get(api, meta_str(live, "name")).await? else {
        return Ok(None);
    };
    let legacy = [c.ctx.config.ssa_field_manager.as_str(), "kmeta"];
    let mut written = None;
    if let Some(up) = fresh
        .pointer("/metadata/managedFields")
        .and_then(|m| owned_after_upgrade(m, manager, &legacy, fields))
    {
        let stored = kapi::set_managed_fields(api, &fresh, &up, manager).await?;
        let on_cached = meta_str(&fresh, "resourceVersion") == meta_str(live, "resourceVersion");
        written = on_cached.then(|| meta_str(&stored, "resourceVersion").to_owned());
    }
    if let Ok(mut r) = c.memory.child_reports.lock() {
        r.upgraded(uid, manager);
    }
    Ok(written)
}

/// `managed` after [`apply::upgraded_managed_fields`] and then
/// [`apply::handed_over_managed_fields`] of the `fields` rules' paths; `None` when neither
/// changes anything.
fn owned_after_upgrade(
    managed: &Value,
    manager: &str,
    legacy: &[&str],
    fields: &[dynapply::FieldRule],
) -> Option<Value> {
    let upgraded = apply::upgraded_managed_fields(managed, manager, legacy);
    let paths: Vec<dynapply::FieldPath> = fields.iter().map(|r| r.path.clone()).collect();
    let base = upgraded.as_ref().unwrap_or(managed);
    match apply::handed_over_managed_fields(base, manager, legacy, &paths) {
        Some(handed) => Some(handed),
        None => upgraded,
    }
}

/// After an apply refused with conflicts: contests and (under `Report`) conflicts are reported
/// and the child left as it is (`Ok(None)`); otherwise the fields are taken with force and named
/// in a `ChildFieldsTaken` event (`Ok(Some(stored))`).
pub(super) async fn resolve_conflicts(
    c: &Children<'_>,
    rule: &ChildRule,
    w: &Writing<'_>,
    merged: &Value,
    body: &Value,
    conflicts: Vec<apply::FieldConflict>,
    out: &mut Collected,
) -> Result<Option<Value>, kube::Error> {
    let key = decide::child_key(merged);
    let api = c.api_of(rule, merged);
    let child = describe(merged);
    let controlled = w
        .observed
        .get(&key)
        .and_then(|live| controller_uid(live))
        .is_some_and(|uid| uid == meta_str(w.parent, "uid"));
    match apply::decide_conflicts(
        conflicts,
        &c.ctx.config.ssa_field_manager,
        &w.manager,
        controlled,
        rule.drift,
    ) {
        ConflictDecision::Contested(held) => {
            let fields = apply::describe_conflicts(&held);
            let note = format!(
                "{child} is wanted by another parent too: {fields} (kmeta does not take fields from another parent; the child is left as it is until one of them stops wanting it)"
            );
            let report = ChildReport {
                kind: apply::CONTESTED_CONDITION,
                reason: "ChildContested",
                message: format!("{child}: {fields}"),
            };
            let told = (Reason::ChildContested, note);
            c.report(w.parent, told, report, &mut out.reports).await;
            Ok(None)
        }
        ConflictDecision::Report(taken) => {
            let fields = apply::describe_conflicts(&taken);
            let note = format!(
                "{child} was changed by others: {fields}; drift policy {:?} leaves it as it is",
                rule.drift
            );
            let report = ChildReport {
                kind: apply::DRIFT_CONDITION,
                reason: "ChildConflict",
                message: format!("{child}: {fields}"),
            };
            c.report(
                w.parent,
                (Reason::ChildConflict, note),
                report,
                &mut out.reports,
            )
            .await;
            Ok(None)
        }
        ConflictDecision::Take(taken) => {
            if !taken.is_empty() {
                let note = format!(
                    "applying {child} took {} (the hook's answer is the source of truth)",
                    apply::describe_conflicts(&taken)
                );
                c.count(ChildOpLabel::FieldsTaken);
                c.ctx.event(w.parent, Reason::ChildFieldsTaken, note).await;
            }
            kapi::apply_as(&api, body, &w.manager, true).await.map(Some)
        }
    }
}
