//! Releasing the targets of a deleted DecoratorController (beyond Metacontroller, its issue
//! #1062): a DecoratorController with a finalize hook carries kmeta's
//! [`RELEASE_FINALIZER`](super::decide::RELEASE_FINALIZER); once it is being deleted, kmeta
//! removes the targets' finalizer `metacontroller.io/decoratorcontroller-<name>` from every
//! object of its resources, then its own finalizer, so neither the targets nor the
//! DecoratorController are left stuck. See docs/design/decorator.md.

use std::sync::Arc;

use kube::api::ListParams;
use serde_json::Value;

use super::build::DecoratorBuildError;
use super::decide::{RELEASE_FINALIZER, finalizer_name};
use crate::api::{DecoratorController, GROUP, VERSION};
use crate::coord::scope::WorkScope;
use crate::object::{describe, has_finalizer, meta_str};
use crate::reconcile::core::{Context, SyncError, api_err};
use crate::reconcile::status;
use crate::runtime::kapi;
use crate::runtime::resources::Resolved;

fn dc_resource(ctx: &Context) -> Result<Resolved, crate::runtime::resources::ResourceError> {
    ctx.resources
        .get(&format!("{GROUP}/{VERSION}"), "decoratorcontrollers")
}

fn dc_value(dc: &DecoratorController) -> Value {
    let mut v = serde_json::to_value(dc).unwrap_or(Value::Null);
    if let Some(m) = v.as_object_mut() {
        m.insert("apiVersion".into(), format!("{GROUP}/{VERSION}").into());
        m.insert("kind".into(), "DecoratorController".into());
    }
    v
}

/// Adds [`RELEASE_FINALIZER`] to a live DecoratorController that lacks it.
pub async fn ensure_release_finalizer(
    ctx: &Context,
    dc: &DecoratorController,
) -> Result<(), DecoratorBuildError> {
    let obj = dc_value(dc);
    if has_finalizer(&obj, RELEASE_FINALIZER) || dc.metadata.deletion_timestamp.is_some() {
        return Ok(());
    }
    let failed = |message: String| DecoratorBuildError::Finalizer {
        finalizer: RELEASE_FINALIZER,
        message,
    };
    let resolved = dc_resource(ctx)?;
    status::set_finalizer(ctx, &resolved, &obj, RELEASE_FINALIZER, true)
        .await
        .map_err(|e| failed(e.to_string()))?;
    Ok(())
}

/// Whether a DecoratorController is being deleted and still holds [`RELEASE_FINALIZER`]: its
/// targets must be released.
pub fn needs_release(dc: &DecoratorController) -> bool {
    dc.metadata.deletion_timestamp.is_some()
        && dc
            .metadata
            .finalizers
            .iter()
            .flatten()
            .any(|f| f == RELEASE_FINALIZER)
}

/// Removes the DecoratorController's finalizer from every object of its resources that carries
/// it (an uncached list: nothing added just before the controller stopped is missed), then
/// [`RELEASE_FINALIZER`] from the DecoratorController. Returns how many targets were released.
pub async fn release_targets(ctx: &Context, dc: &DecoratorController) -> Result<usize, SyncError> {
    let name = dc.metadata.name.clone().unwrap_or_default();
    let fin = finalizer_name(&name);
    let mut released = 0;
    // with a work scope each replica releases the targets that are its work, each write in its
    // target's write scope; the replica holding cluster-wide work removes the controller's
    // finalizer once no target carries it
    let scope = ctx.wiring.work_scope.as_ref();
    let mut others = 0;
    for rule in &dc.spec.resources {
        let resolved = ctx.resources.get(&rule.api_version, &rule.resource)?;
        let all = kapi::api(&ctx.client, &resolved, "")
            .list(&ListParams::default())
            .await
            .map_err(api_err(format!("listing {}", resolved.watch_key())))?;
        for obj in all.items {
            let obj = serde_json::to_value(obj).unwrap_or(Value::Null);
            if !has_finalizer(&obj, &fin) {
                continue;
            }
            if !release_one(ctx, scope, &resolved, &obj, &fin).await? {
                others += 1;
                continue;
            }
            tracing::info!(controller = %name, target = %describe(&obj), "released target");
            released += 1;
        }
    }
    if others > 0 || scope.is_some_and(|s| !s.owns_cluster_work()) {
        return Err(SyncError::LeftToOtherReplicas(format!(
            "released {released} target(s); {others} left to the replicas whose work they are, and the controller's finalizer to the replica holding cluster-wide work"
        )));
    }
    let resolved = dc_resource(ctx)?;
    status::set_finalizer(ctx, &resolved, &dc_value(dc), RELEASE_FINALIZER, false).await?;
    Ok(released)
}

/// Removes `fin` from the target `obj`, in its write scope when `scope` makes it this process's
/// work. Returns false (nothing written) when it is another replica's.
async fn release_one(
    ctx: &Context,
    scope: Option<&Arc<dyn WorkScope>>,
    resolved: &Resolved,
    obj: &Value,
    fin: &str,
) -> Result<bool, SyncError> {
    let Some(scope) = scope else {
        status::set_finalizer(ctx, resolved, obj, fin, false).await?;
        return Ok(true);
    };
    let (ns, uid) = (meta_str(obj, "namespace"), meta_str(obj, "uid"));
    let mut result = Ok(());
    let release = async {
        result = status::set_finalizer(ctx, resolved, obj, fin, false)
            .await
            .map(drop);
    };
    match scope.claim(ns, Some(uid), Box::pin(release)) {
        Some(claimed) => claimed.await,
        None => return Ok(false),
    }
    result.map(|()| true)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn dc(finalizers: Value, deleting: bool) -> DecoratorController {
        let mut v = json!({"apiVersion": "metacontroller.k8s.io/v1alpha1",
            "kind": "DecoratorController", "metadata": {"name": "d", "finalizers": finalizers},
            "spec": {"resources": []}});
        if deleting {
            v["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        }
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn release_only_a_deleted_decorator_holding_our_finalizer() {
        assert!(needs_release(&dc(json!([RELEASE_FINALIZER]), true)));
        assert!(!needs_release(&dc(json!([RELEASE_FINALIZER]), false)));
        assert!(!needs_release(&dc(json!(["other"]), true)));
        assert!(!needs_release(&dc(Value::Null, true)));
    }
}
