//! A plain kube-rs operator: one `apps/v1` Deployment per `Frontend`, kept up to date by a
//! `kube::runtime::Controller` whose reconcile calls [`kmeta_apply::DynApply::dyn_apply`].
//!
//! The reconcile only says what it wants (one container, the replica count); the three-way apply
//! keeps what others added to the live Deployment (a sidecar a mesh injected, defaults), so the
//! sidecar survives image updates and a resync with nothing new writes nothing.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use kmeta_apply::{DynApply, DynApplyParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use kube::{Api, Client, CustomResource, Resource, ResourceExt};
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
pub struct FrontendSpec {
    /// The container image.
    pub image: String,
    /// Pods to run (the Deployment's default, 1, when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
}

/// The label that ties the Deployment's pods to their Frontend.
pub const APP_LABEL: &str = "frontends.examples.kmeta.dev/name";

/// Why a Frontend cannot be reconciled.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The Frontend has no namespace or name (not one read from the API server).
    #[error("frontend without a namespace or name")]
    Unnamed,
    /// The desired Deployment does not fit the k8s-openapi type.
    #[error("frontend {name}: cannot build its Deployment: {source}")]
    Build {
        /// The Frontend.
        name: String,
        /// serde's error.
        source: serde_json::Error,
    },
    /// Applying the Deployment failed.
    #[error("frontend {name}: {source}")]
    Apply {
        /// The Frontend.
        name: String,
        /// kmeta-apply's error, naming the Deployment.
        source: kmeta_apply::Error,
    },
}

/// The Deployment a Frontend wants: its image as the one container, its replicas, owned by it.
pub fn desired_deployment(fe: &Frontend) -> Result<Deployment, Error> {
    let (Some(ns), Some(owner)) = (fe.namespace(), fe.controller_owner_ref(&())) else {
        return Err(Error::Unnamed);
    };
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
    serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": ns, "labels": {APP_LABEL: name},
                     "ownerReferences": [owner]},
        "spec": spec
    }))
    .map_err(|source| Error::Build { name, source })
}

/// What the reconcile needs: the client, how often to resync, and a count of reconciles (so a
/// test can wait for a resync to have happened).
pub struct Context {
    /// The API client.
    pub client: Client,
    /// Resync period: every Frontend is reconciled again this long after its last reconcile.
    pub resync: Duration,
    /// Reconciles finished (successful or not).
    pub reconciles: AtomicU64,
}

/// One reconcile: apply the desired Deployment; nothing is written when it already is as wanted.
pub async fn reconcile(fe: Arc<Frontend>, ctx: Arc<Context>) -> Result<Action, Error> {
    let _done = Done(&ctx.reconciles);
    let desired = desired_deployment(&fe)?;
    let ns = fe.namespace().ok_or(Error::Unnamed)?;
    let api: Api<Deployment> = Api::namespaced(ctx.client.clone(), &ns);
    let params = DynApplyParams::default().field_manager("kube-rs-operator");
    let out = api
        .dyn_apply(&desired, &params)
        .await
        .map_err(|source| Error::Apply {
            name: fe.name_any(),
            source,
        })?;
    if !out.dropped.is_empty() {
        eprintln!(
            "frontend {}: the API server dropped {:?}",
            fe.name_any(),
            out.dropped
        );
    }
    Ok(Action::requeue(ctx.resync))
}

/// Counts a reconcile when it ends, however it ends.
struct Done<'a>(&'a AtomicU64);

impl Drop for Done<'_> {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// After a failed reconcile: try again in 5 seconds.
pub fn error_policy(fe: Arc<Frontend>, err: &Error, _ctx: Arc<Context>) -> Action {
    eprintln!("frontend {}: {err}", fe.name_any());
    Action::requeue(Duration::from_secs(5))
}

/// Runs the operator until the watches end: Frontends in all namespaces and the Deployments
/// they own.
pub async fn run(ctx: Arc<Context>) {
    let frontends: Api<Frontend> = Api::all(ctx.client.clone());
    let deployments: Api<Deployment> = Api::all(ctx.client.clone());
    Controller::new(frontends, watcher::Config::default())
        .owns(deployments, watcher::Config::default())
        .run(reconcile, error_policy, ctx)
        .for_each(|_| futures::future::ready(()))
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frontend(replicas: Option<i32>) -> Frontend {
        let mut fe = Frontend::new(
            "shop",
            FrontendSpec {
                image: "shop:1".into(),
                replicas,
            },
        );
        fe.metadata.namespace = Some("default".into());
        fe.metadata.uid = Some("u-1".into());
        fe
    }

    #[test]
    fn the_deployment_runs_the_image_and_is_owned_by_the_frontend() -> Result<(), Error> {
        let d = desired_deployment(&frontend(Some(3)))?;
        assert_eq!(d.spec.replicas, Some(3));
        let containers = d
            .spec
            .template
            .spec
            .map(|s| s.containers)
            .unwrap_or_default();
        assert_eq!(containers.len(), 1);
        assert_eq!(containers[0].image.as_deref(), Some("shop:1"));
        let owners = d.metadata.owner_references.unwrap_or_default();
        assert_eq!(
            (owners[0].uid.as_str(), owners[0].controller),
            ("u-1", Some(true))
        );
        Ok(())
    }

    #[test]
    fn unset_replicas_are_left_to_the_server() -> Result<(), Error> {
        assert_eq!(desired_deployment(&frontend(None))?.spec.replicas, None);
        Ok(())
    }

    #[test]
    fn a_frontend_without_a_namespace_is_an_error() {
        let mut fe = frontend(None);
        fe.metadata.namespace = None;
        assert!(matches!(desired_deployment(&fe), Err(Error::Unnamed)));
    }
}
