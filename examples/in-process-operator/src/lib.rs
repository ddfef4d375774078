//! The kube-rs-operator example's job — one `apps/v1` Deployment per `Frontend`, sidecar-safe —
//! written as a kmeta CompositeController whose sync hook is a Rust function in this process.
//!
//! The sync function only says what it wants; kmeta claims and owns the Deployment, merges the
//! wanted one into the live one (an injected sidecar survives), writes the Frontend's status with
//! `observedGeneration`, and sends no write when nothing changed.

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kmeta::api::ChildUpdateMethod;
use kmeta::embed::Composite;
use kmeta_wire::{SyncRequest, SyncResponse};
use kube::{CustomResource, ResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

/// A web frontend: an image, run as a Deployment of `replicas` pods.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, JsonSchema)]
#[kube(
    group = "examples.kmeta.dev",
    version = "v1",
    kind = "Frontend",
    namespaced
)]
#[kube(status = "FrontendStatus")]
pub struct FrontendSpec {
    /// The container image.
    pub image: String,
    /// Pods to run (the Deployment's default, 1, when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
}

/// What the Frontend's status reports: the sync function's field, and the two kmeta writes
/// (declared so the CRD's schema keeps them).
#[derive(Serialize, Deserialize, Clone, Debug, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FrontendStatus {
    /// Ready pods of the Deployment, as last observed.
    pub ready_replicas: i32,
    /// The generation the status describes (written by kmeta).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Synced=False` with the error while syncs fail (written by kmeta).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<Condition>>,
}

/// The label that ties the Deployment's pods to their Frontend.
pub const APP_LABEL: &str = "frontends.examples.kmeta.dev/name";

/// Why a Frontend cannot be synced.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The request's parent is not a Frontend.
    #[error("not a Frontend: {0}")]
    Parent(serde_json::Error),
}

/// The sync hook: the Deployment the Frontend wants, and its status.
pub fn sync(req: SyncRequest) -> Result<SyncResponse, Error> {
    let fe: Frontend = req.parent_as().map_err(Error::Parent)?;
    let name = fe.name_any();
    let mut spec = json!({
        "selector": {"matchLabels": {APP_LABEL: name}},
        "template": {
            "metadata": {"labels": {APP_LABEL: name}},
            "spec": {"containers": [{"name": "web", "image": fe.spec.image}]}
        }
    });
    if let Some(replicas) = fe.spec.replicas {
        spec["replicas"] = json!(replicas);
    }
    let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "labels": {APP_LABEL: name}}, "spec": spec});
    let ready = req
        .children
        .of_kind("Deployment", "apps/v1")
        .filter_map(|(_, d)| d.pointer("/status/readyReplicas").and_then(|r| r.as_i64()))
        .sum::<i64>();
    let status = FrontendStatus {
        ready_replicas: i32::try_from(ready).unwrap_or(i32::MAX),
        ..FrontendStatus::default()
    };
    Ok(SyncResponse::new().child(deployment).status(json!(status)))
}

/// The controller: Frontends are parents, Deployments children updated in place, every
/// Frontend synced again every `resync`.
pub fn controller(client: kube::Client, resync: Duration) -> Composite {
    Composite::builder(client, "frontends")
        .parent::<Frontend>()
        .child::<Deployment>(ChildUpdateMethod::InPlace)
        .resync_period(resync)
        .sync(sync)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(replicas: Option<i32>) -> Result<SyncRequest, serde_json::Error> {
        serde_json::from_value(json!({
            "parent": {"apiVersion": "examples.kmeta.dev/v1", "kind": "Frontend",
                       "metadata": {"name": "shop", "namespace": "default"},
                       "spec": {"image": "shop:1", "replicas": replicas}},
            "children": {"Deployment.apps/v1": {"shop": {"status": {"readyReplicas": 2}}}}
        }))
    }

    #[test]
    fn the_deployment_runs_the_image_and_status_counts_ready_pods() -> anyhow::Result<()> {
        let resp = sync(request(Some(3))?)?;
        let d = &resp.children[0];
        assert_eq!(d["spec"]["replicas"], 3);
        assert_eq!(
            d["spec"]["template"]["spec"]["containers"][0]["image"],
            "shop:1"
        );
        assert_eq!(resp.status, Some(json!({"readyReplicas": 2})));
        Ok(())
    }

    #[test]
    fn unset_replicas_are_left_to_the_server() -> anyhow::Result<()> {
        let resp = sync(request(None)?)?;
        assert!(resp.children[0]["spec"].get("replicas").is_none());
        Ok(())
    }

    #[test]
    fn a_parent_that_is_no_frontend_is_an_error() -> anyhow::Result<()> {
        let req: SyncRequest = serde_json::from_value(json!({"parent": {"spec": {"image": 3}}}))?;
        assert!(matches!(sync(req), Err(Error::Parent(_))));
        Ok(())
    }
}
