//! Steps both sync paths take (the plain one in [`super::sync`] and the rolling-update one in
//! [`super::revisions`]): calling the sync or finalize hook, and re-reading the parent (from the
//! cache, or uncached).

use serde::Serialize;
use serde_json::{Map, Value};

use super::build::CompositeState;
use crate::hook::HookClient;
use crate::hook::wire::{self, SyncResponse};
use crate::object::{ObjectView, describe, is_deleting, meta_str};
use crate::reconcile::core::{SyncError, api_err};
use crate::runtime::kapi;

/// Uncached GET: the parent still exists with the same UID and is not being deleted.
pub(super) async fn parent_alive_uncached(
    c: &CompositeState,
    parent: &Value,
) -> Result<bool, SyncError> {
    let api = kapi::api(&c.ctx.client, &c.parent, meta_str(parent, "namespace"));
    let live = kapi::get(&api, meta_str(parent, "name"))
        .await
        .map_err(api_err(format!("re-reading {}", describe(parent))))?;
    Ok(live.is_some_and(|l| meta_str(&l, "uid") == meta_str(parent, "uid") && !is_deleting(&l)))
}

/// The parent is still in the watch cache with the same UID and not being deleted: read after
/// the hook call, so a deletion the watch has seen by then stops the sync's creates without a
/// request (a deletion the watch has not delivered yet leaves children for the garbage
/// collector, through their owner reference).
pub(super) fn parent_alive_cached(c: &CompositeState, parent: &Value) -> bool {
    let (ns, name) = (meta_str(parent, "namespace"), meta_str(parent, "name"));
    c.parents
        .get(ns, name)
        .is_some_and(|p| meta_str(&p, "uid") == meta_str(parent, "uid") && !is_deleting(&p))
}

/// Step: call sync (or finalize) with the parent, observed children and related objects;
/// `cache_key` names the answer in the hook's response cache.
pub(super) async fn call_hook<O: ObjectView + Serialize>(
    c: &CompositeState,
    parent: &Value,
    observed: &[O],
    related: &Map<String, Value>,
    finalizing: bool,
    cache_key: &str,
) -> Result<SyncResponse, SyncError> {
    let hook = chosen_hook(c, finalizing);
    let body = call_hook_raw(c, parent, observed, related, finalizing, cache_key).await?;
    Ok(hook.decode_sync(&body)?)
}

/// The sync hook, or the finalize hook when finalizing and there is one.
pub(super) fn chosen_hook(c: &CompositeState, finalizing: bool) -> &HookClient {
    match (&c.hooks.finalize, finalizing) {
        (Some(f), true) => f,
        _ => &c.hooks.sync,
    }
}

/// [`call_hook`], the answer's bytes not yet decoded; `parent` is anything that encodes as
/// the parent.
pub(super) async fn call_hook_raw<O: ObjectView + Serialize, P: Serialize + ?Sized>(
    c: &CompositeState,
    parent: &P,
    observed: &[O],
    related: &Map<String, Value>,
    finalizing: bool,
    cache_key: &str,
) -> Result<Vec<u8>, SyncError> {
    let hook = chosen_hook(c, finalizing);
    let request = wire::SyncRequestRef {
        controller: &c.cc_raw,
        parent,
        children: wire::object_map_ref(
            hook.version(),
            c.parent.namespaced,
            &c.child_keys,
            observed,
        ),
        related,
        finalizing,
    };
    Ok(hook.call(cache_key, &request).await?)
}
