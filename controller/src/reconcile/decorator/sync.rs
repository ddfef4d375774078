//! One sync of one target, as named steps:
//! `ensure_finalizer → await_written → observe_attachments → call_customize → call_hook →
//! desired_attachments → manage_children → decorate_target` (labels, annotations, status,
//! finalizer).
//! Decisions come from [`super::decide`] and [`crate::reconcile::decide`]; this module only
//! reads caches and writes.

use std::time::Duration;

use serde_json::{Map, Value};

use super::build::{DecoratorState, TargetRule};
use super::decide::{self as ddecide, TargetChanges};
use crate::hook::wire::{self, DecoratorSyncResponse};
use crate::object::{ObjectView, describe, has_finalizer, is_deleting, meta_str};
use crate::ops::events::Reason;
use crate::reconcile::children::{await_written, manage_children};
use crate::reconcile::core::{SyncError, api_err};
use crate::reconcile::decide::{self, FinalizerAction, HookChoice};
use crate::reconcile::related::{Used, cache_key, call_customize};
use crate::reconcile::status;
use crate::runtime::kapi;

/// Syncs the target `name` in `namespace` of `rule`; returns when to sync it again.
pub async fn sync_target(
    d: &DecoratorState,
    rule: &TargetRule,
    (namespace, name): (&str, &str),
    used: &mut Used,
) -> Result<Option<Duration>, SyncError> {
    let Some(cached) = rule.informer.get_whole(namespace, name) else {
        return Ok(None);
    };
    let fin = &d.finalizer;
    let selected = rule.selector.matches(&cached)?;
    if !selected && !has_finalizer(&cached, fin) {
        return Ok(None);
    }
    if let Some(why) = d.pause_reason(&cached) {
        // no condition: a target's status belongs to its own controller (a Deployment's)
        let note =
            format!("Paused: {why}; no hook call and no attachment write until it is removed");
        d.ctx.event(&cached, Reason::Paused, note).await;
        return Ok(None);
    }
    let Some(target) = ensure_finalizer(d, rule, (*cached).clone()).await? else {
        return Ok(None);
    };
    let choice = decide::choose_hook(
        d.hooks.finalize.is_some(),
        is_deleting(&target),
        selected,
        has_finalizer(&target, fin),
    );
    let finalizing = match choice {
        HookChoice::Skip => return Ok(None),
        HookChoice::Finalize => true,
        HookChoice::Sync => false,
    };
    // before any attachment is read for the hook or written: a ServiceAccount that cannot be
    // located fails the sync here, and kmeta never writes as itself in its place
    let writer = d.writer(&target)?;
    await_written(&d.child_set(writer.clone()), &target).await?;
    let observed = observe_attachments(d, &target)?;
    let related = call_customize(&d.related_source(rule, &writer), &target, used).await?;
    let response = call_hook(d, rule, &target, (&observed, related), finalizing).await?;
    let desired = ddecide::desired_attachments(
        &target,
        rule.resolved.namespaced,
        &d.declared,
        &d.name,
        response.attachments.clone(),
    )?;
    d.ctx.hook_events(&target, &response.events).await;
    if decide::may_manage_children(&target, finalizing, fin) {
        let none = std::collections::BTreeSet::new();
        let observed = (observed.as_slice(), &none, &none);
        manage_children(&d.child_set(writer), &target, observed, &desired).await?;
        d.ctx
            .wiring
            .metrics
            .children(&d.name, meta_str(&target, "uid"), desired.len());
    }
    let remove =
        decide::finalizer_after_hook(finalizing, response.finalized, has_finalizer(&target, fin))
            == FinalizerAction::Remove;
    decorate_target(d, rule, &target, &response, remove.then_some(fin.as_str())).await?;
    Ok((response.resync_after_seconds > 0.0)
        .then(|| Duration::try_from_secs_f64(response.resync_after_seconds).ok())
        .flatten())
}

/// Step: add our finalizer when a finalize hook exists, remove it when none does (the target
/// as written, `None` when it is gone).
async fn ensure_finalizer(
    d: &DecoratorState,
    rule: &TargetRule,
    target: Value,
) -> Result<Option<Value>, SyncError> {
    let fin = &d.finalizer;
    match decide::finalizer_before_hook(
        d.hooks.finalize.is_some(),
        is_deleting(&target),
        has_finalizer(&target, fin),
    ) {
        FinalizerAction::Keep => Ok(Some(target)),
        FinalizerAction::Add => {
            status::set_finalizer(&d.ctx, &rule.resolved, &target, fin, true).await
        }
        FinalizerAction::Remove => {
            status::set_finalizer(&d.ctx, &rule.resolved, &target, fin, false).await
        }
    }
}

/// Step: the observed attachments, from the caches: objects of the attachment types in the
/// target's namespace (every namespace for a cluster-scoped target) that the target controls
/// and that carry this DecoratorController's annotation. No adoption: a decorator has no
/// selector for children.
fn observe_attachments(d: &DecoratorState, target: &Value) -> Result<Vec<Value>, SyncError> {
    let uid = meta_str(target, "uid");
    let ns = ddecide::attachment_namespace(target);
    let mut observed = Vec::new();
    for key in &d.attachment_keys {
        let Some(rule) = d.attachments.get(key) else {
            continue;
        };
        for a in rule.informer.owned_by(uid) {
            if ns.is_some_and(|n| n != a.namespace()) {
                continue;
            }
            let a = a.value()?;
            if ddecide::is_attachment(&a, uid, &d.name) {
                observed.push(a);
            }
        }
    }
    Ok(observed)
}

/// Step: call sync (or finalize) with the target, its observed attachments and the related
/// objects.
async fn call_hook(
    d: &DecoratorState,
    rule: &TargetRule,
    target: &Value,
    (observed, related): (&[Value], Map<String, Value>),
    finalizing: bool,
) -> Result<DecoratorSyncResponse, SyncError> {
    let hook = match (&d.hooks.finalize, finalizing) {
        (Some(f), true) => f,
        _ => &d.hooks.sync,
    };
    let request = wire::DecoratorRequestRef {
        controller: &d.dc_json,
        object: target,
        attachments: wire::object_map_ref(
            hook.version(),
            rule.resolved.namespaced,
            &d.attachment_keys,
            observed.iter(),
        ),
        related: &related,
        finalizing,
    };
    Ok(hook.decorator_sync(&cache_key(target), &request).await?)
}

/// Step: the hook's labels, annotations and status on the target, and our finalizer removed
/// when the finalize hook is done. The status goes through `/status` when the resource has
/// that subresource. Nothing is written when the target already is as asked (checked on the
/// cached copy first, then on the live object each write reads).
async fn decorate_target(
    d: &DecoratorState,
    rule: &TargetRule,
    target: &Value,
    response: &DecoratorSyncResponse,
    remove_finalizer: Option<&str>,
) -> Result<(), SyncError> {
    let status = response.status.as_ref();
    let api = kapi::api(&d.ctx.client, &rule.resolved, meta_str(target, "namespace"));
    let (name, uid) = (meta_str(target, "name"), meta_str(target, "uid"));
    let action = || format!("updating {}", describe(target));
    if rule.resolved.has_status && ddecide::replace_status(&mut target.clone(), status) {
        kapi::atomic_update(&api, name, uid, true, |live| {
            ddecide::replace_status(live, status)
        })
        .await
        .map_err(api_err(format!("updating status of {}", describe(target))))?;
    }
    let changes = TargetChanges {
        labels: &response.labels,
        annotations: &response.annotations,
        status: status.filter(|_| !rule.resolved.has_status),
        remove_finalizer,
    };
    if ddecide::decorate(&mut target.clone(), changes) {
        kapi::atomic_update(&api, name, uid, false, |live| {
            ddecide::decorate(live, changes)
        })
        .await
        .map_err(api_err(action()))?;
    }
    Ok(())
}
