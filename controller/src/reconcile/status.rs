//! Writes to the object a controller reconciles, shared by every controller kind: its
//! finalizer, its status (the hook's status plus `observedGeneration`) and the `Synced=False`
//! condition after a failure. Every write is UID-guarded and resourceVersion-checked.

use serde_json::Value;

use crate::object::{describe, meta_str};
use crate::reconcile::core::{Context, SyncError, api_err};
use crate::reconcile::decide;
use crate::runtime::kapi;
use crate::runtime::resources::Resolved;

/// Adds (`add`) or removes the finalizer `fin`; returns the object as written, `None` when it is
/// gone.
pub async fn set_finalizer(
    ctx: &Context,
    resource: &Resolved,
    parent: &Value,
    fin: &str,
    add: bool,
) -> Result<Option<Value>, SyncError> {
    let api = kapi::api(&ctx.client, resource, meta_str(parent, "namespace"));
    let name = meta_str(parent, "name");
    kapi::atomic_update(&api, name, meta_str(parent, "uid"), false, |o| {
        let Some(m) = o.get_mut("metadata").and_then(Value::as_object_mut) else {
            return false;
        };
        let list = m
            .entry("finalizers")
            .or_insert_with(|| Value::Array(Vec::new()));
        if !list.is_array() {
            *list = Value::Array(Vec::new());
        }
        let Some(a) = list.as_array_mut() else {
            return false;
        };
        let present = a.iter().any(|v| v.as_str() == Some(fin));
        match (add, present) {
            (true, false) => a.push(Value::String(fin.to_owned())),
            (false, true) => a.retain(|v| v.as_str() != Some(fin)),
            _ => return false,
        }
        true
    })
    .await
    .map_err(api_err(format!(
        "updating finalizer {fin} on {}",
        describe(parent)
    )))
}

fn resource_version(obj: &Value) -> String {
    meta_str(obj, "resourceVersion").to_owned()
}

/// Writes the hook's status plus `observedGeneration` to `/status`, only when it differs;
/// returns the resourceVersion written, if any (so the owner can tell its own write's watch
/// event from a change made by others).
pub async fn update_status(
    ctx: &Context,
    resource: &Resolved,
    parent: &Value,
    status: Option<&Value>,
) -> Result<Option<String>, SyncError> {
    let generation = parent
        .pointer("/metadata/generation")
        .and_then(Value::as_i64);
    let want = decide::desired_status(status, generation);
    if !decide::status_changed(parent, &want) {
        return Ok(None);
    }
    let api = kapi::api(&ctx.client, resource, meta_str(parent, "namespace"));
    let mut next = parent.clone();
    if let Some(m) = next.as_object_mut() {
        m.insert("status".into(), want.clone());
    }
    let action = || format!("updating status of {}", describe(parent));
    match kapi::replace_status(&api, &next).await {
        Ok(written) => Ok(Some(resource_version(&written))),
        Err(e) if kapi::is_not_found(&e) => Ok(None),
        Err(e) if kapi::is_conflict(&e) => kapi::atomic_update(
            &api,
            meta_str(parent, "name"),
            meta_str(parent, "uid"),
            true,
            |live| {
                if !decide::status_changed(live, &want) {
                    return false;
                }
                if let Some(m) = live.as_object_mut() {
                    m.insert("status".into(), want.clone());
                }
                true
            },
        )
        .await
        .map(|written| written.as_ref().map(resource_version))
        .map_err(api_err(action())),
        Err(e) => Err(api_err(action())(e)),
    }
}

/// After a failed sync: a `Synced=False` condition on the parent's status (only when it
/// differs from what is there; UID-guarded, resourceVersion-checked).
pub async fn report_failure(
    ctx: &Context,
    resource: &Resolved,
    parent: &Value,
    message: &str,
) -> Result<Option<String>, SyncError> {
    let api = kapi::api(&ctx.client, resource, meta_str(parent, "namespace"));
    let now = jiff::Timestamp::now()
        .round(jiff::Unit::Second)
        .unwrap_or_else(|_| jiff::Timestamp::now())
        .to_string();
    kapi::atomic_update(
        &api,
        meta_str(parent, "name"),
        meta_str(parent, "uid"),
        true,
        |live| match decide::with_sync_failure(live, message, &now) {
            Some(next) => {
                *live = next;
                true
            }
            None => false,
        },
    )
    .await
    .map(|written| written.as_ref().map(resource_version))
    .map_err(api_err(format!(
        "reporting failure on {}",
        describe(parent)
    )))
}
