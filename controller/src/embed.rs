//! Layer 5, kmeta as a library: run a CompositeController whose hooks are Rust functions in
//! this process instead of webhooks — the same reconcile core (claim, adopt, release, child
//! updates through dynapply, finalize, status with `observedGeneration`, events, metrics) as
//! `kmeta run`, without a CompositeController object in the cluster or a hook server.
//!
//! The hook functions take and return the hook protocol's types ([`kmeta_wire`], re-exported by
//! the `kmeta-hook` SDK), so a hook written for the SDK's webhook server runs in-process
//! unchanged. A typed parent is one call away ([`kmeta_wire::SyncRequest::parent_as`]); the raw
//! JSON bodies are available too ([`Composite::hook_json`]).
//!
//! ```
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use k8s_openapi::api::core::v1::ConfigMap;
//! use kmeta::api::ChildUpdateMethod;
//! use kmeta::embed::Composite;
//! use kmeta_wire::{SyncRequest, SyncResponse};
//! use serde_json::json;
//!
//! # let server = kmeta_apiserver::TestServer::start().await?;
//! # let client = server.client();
//! // one ConfigMap per parent; parents are `greetings.example.com/v1` objects
//! let controller = Composite::builder(client, "greetings")
//!     .parent_resource("example.com/v1", "greetings")
//!     .child::<ConfigMap>(ChildUpdateMethod::InPlace)
//!     .sync(|req: SyncRequest| -> Result<SyncResponse, String> {
//!         let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
//!                         "metadata": {"name": req.parent_name()},
//!                         "data": {"text": req.parent_field("/spec/text")}});
//!         Ok(SyncResponse::new().child(cm))
//!     });
//! let stop = kmeta::embed::CancellationToken::new();
//! # stop.cancel();
//! controller.run(stop).await?; // until `stop` is cancelled
//! # Ok(())
//! # }
//! ```

use std::fmt::Display;
use std::sync::Arc;
use std::time::Duration;

use kmeta_wire::{CustomizeRequest, CustomizeResponse, SyncRequest, SyncResponse};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
/// The token [`Composite::run`] stops on (tokio-util's), re-exported so a user needs no
/// dependency of their own to make one.
pub use tokio_util::sync::CancellationToken;

use crate::api::{
    ChildUpdateMethod, CompositeController, CompositeControllerChildResourceRule,
    CompositeControllerChildUpdateStrategy, CompositeControllerParentResourceRule,
    CompositeControllerSpec,
};
use crate::hook::local::{HookFailure, LocalHook};
use crate::reconcile::composite::{BuildError, CompositeRunner, LocalHooks};
use crate::reconcile::core::Context;
use crate::reconcile::{ManagerConfig, Wiring};

/// Why an in-process controller cannot run.
#[derive(Debug, thiserror::Error)]
pub enum EmbedError {
    /// No parent resource was named.
    #[error(
        "in-process controller {name}: no parent resource (call .parent::<K>() or .parent_resource(…))"
    )]
    NoParent {
        /// The controller's name.
        name: String,
    },
    /// No sync function was given.
    #[error("in-process controller {name}: no sync function (call .sync(…))")]
    NoSync {
        /// The controller's name.
        name: String,
    },
    /// The controller cannot be built: a parent resource without a status subresource, or a
    /// hook declaration that cannot be used.
    #[error("in-process controller {name}: {message}")]
    Build {
        /// The controller's name.
        name: String,
        /// What is wrong.
        message: String,
    },
}

/// A CompositeController run in this process with Rust hook functions: a builder, then
/// [`Composite::run`]. See the [module documentation](self).
pub struct Composite {
    client: kube::Client,
    name: String,
    spec: CompositeControllerSpec,
    has_parent: bool,
    sync: Option<LocalHook>,
    finalize: Option<LocalHook>,
    customize: Option<LocalHook>,
    config: ManagerConfig,
    wiring: Wiring,
    schema_atomic_lists: bool,
}

impl std::fmt::Debug for Composite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Composite")
            .field("name", &self.name)
            .field("spec", &self.spec)
            .finish_non_exhaustive()
    }
}

impl Composite {
    /// A controller named `name` (its finalizer is `metacontroller.io/compositecontroller-<name>`,
    /// its metrics carry the name) using `client`.
    pub fn builder(client: kube::Client, name: &str) -> Composite {
        Composite {
            client,
            name: name.to_owned(),
            spec: CompositeControllerSpec {
                parent_resource: parent_rule("", ""),
                child_resources: None,
                hooks: None,
                endpoint_configs: None,
                resync_period_seconds: None,
                generate_selector: Some(true),
                service_account_name: None,
                service_account_namespace: None,
            },
            has_parent: false,
            sync: None,
            finalize: None,
            customize: None,
            config: ManagerConfig::default(),
            wiring: Wiring::default(),
            schema_atomic_lists: false,
        }
    }

    /// Whether an `atomic` list in the API server's OpenAPI v3 schema of a child kind replaces
    /// the live list even when its items carry a conventional merge key (what a
    /// CompositeController's `kmeta.dev/schema-atomic-lists: "true"` annotation asks for; see
    /// `docs/operating.md`). Default: off — such a list is merged by the convention, as
    /// Metacontroller does, so items other actors added are kept.
    pub fn schema_atomic_lists(mut self, on: bool) -> Composite {
        self.schema_atomic_lists = on;
        self
    }

    /// Starts from a whole CompositeController spec (parent label selector, resync period,
    /// rolling update checks, hook versions, …) as a CompositeController object would carry it.
    /// Its webhooks are never called: the functions given to this builder answer instead.
    pub fn spec(mut self, spec: CompositeControllerSpec) -> Composite {
        self.has_parent = !spec.parent_resource.resource.is_empty();
        self.spec = spec;
        self
    }

    /// The parent resource: the Rust type's `apiVersion` and plural (a `#[derive(CustomResource)]`
    /// type or a k8s-openapi type). Its resource must have a status subresource.
    pub fn parent<K: kube::Resource<DynamicType = ()>>(self) -> Composite {
        self.parent_resource(&K::api_version(&()), &K::plural(&()))
    }

    /// The parent resource by `apiVersion` and plural resource name.
    pub fn parent_resource(mut self, api_version: &str, resource: &str) -> Composite {
        self.spec.parent_resource = parent_rule(api_version, resource);
        self.has_parent = true;
        self
    }

    /// A child resource of the Rust type `K`, updated by `method`.
    pub fn child<K: kube::Resource<DynamicType = ()>>(
        self,
        method: ChildUpdateMethod,
    ) -> Composite {
        self.child_resource(&K::api_version(&()), &K::plural(&()), method)
    }

    /// A child resource by `apiVersion` and plural resource name, updated by `method`.
    pub fn child_resource(
        mut self,
        api_version: &str,
        resource: &str,
        method: ChildUpdateMethod,
    ) -> Composite {
        self.spec.child_resources.get_or_insert_with(Vec::new).push(
            CompositeControllerChildResourceRule {
                api_version: api_version.to_owned(),
                resource: resource.to_owned(),
                update_strategy: Some(CompositeControllerChildUpdateStrategy {
                    method: Some(method),
                    status_checks: None,
                }),
                drift_policy: None,
                field_rules: None,
            },
        );
        self
    }

    /// `generateSelector`: select children by a label kmeta puts on them with the parent's uid
    /// (`controller-uid`), or, when false, by the parent's own `spec.selector` as a
    /// CompositeController does by default. Default here: true, so a parent type needs no
    /// selector. A [`Composite::spec`] given later replaces it.
    pub fn generate_selector(mut self, on: bool) -> Composite {
        self.spec.generate_selector = Some(on);
        self
    }

    /// Every parent is synced again this often (`resyncPeriodSeconds`, whole seconds, at
    /// least 1).
    pub fn resync_period(mut self, period: Duration) -> Composite {
        let secs = i32::try_from(period.as_secs().max(1)).unwrap_or(i32::MAX);
        self.spec.resync_period_seconds = Some(secs);
        self
    }

    /// The settings `kmeta run` takes from flags (workers, event limits, …).
    pub fn config(mut self, config: ManagerConfig) -> Composite {
        self.config = config;
        self
    }

    /// What the controller shares with the process around it (its metrics registry, readiness,
    /// clients of their own): see [`Wiring`].
    pub fn wiring(mut self, wiring: Wiring) -> Composite {
        self.wiring = wiring;
        self
    }

    /// The sync hook: a function from the request to the response, or an error: then no child
    /// changes, the parent gets a `SyncError` event and a `Synced=False` condition with the
    /// error's text, and its sync is retried with backoff. The hook's `timeout` (10 s unless
    /// the spec's sync webhook says otherwise) bounds the function.
    pub fn sync<F, E>(self, f: F) -> Composite
    where
        F: Fn(SyncRequest) -> Result<SyncResponse, E> + Send + Sync + 'static,
        E: Display,
    {
        self.sync_async(move |req| std::future::ready(f(req).map_err(HookFailure::new)))
    }

    /// Like [`Composite::sync`], for an async function.
    pub fn sync_async<F, Fut, E>(mut self, f: F) -> Composite
    where
        F: Fn(SyncRequest) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<SyncResponse, E>> + Send + 'static,
        E: Display,
    {
        self.sync = Some(typed(f));
        self
    }

    /// The finalize hook (called instead of sync while a parent is being deleted; the parent
    /// carries kmeta's finalizer until it answers `finalized: true`).
    pub fn finalize<F, E>(self, f: F) -> Composite
    where
        F: Fn(SyncRequest) -> Result<SyncResponse, E> + Send + Sync + 'static,
        E: Display,
    {
        self.finalize_async(move |req| std::future::ready(f(req).map_err(HookFailure::new)))
    }

    /// Like [`Composite::finalize`], for an async function (a cleanup that calls another
    /// service, say).
    pub fn finalize_async<F, Fut, E>(mut self, f: F) -> Composite
    where
        F: Fn(SyncRequest) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<SyncResponse, E>> + Send + 'static,
        E: Display,
    {
        self.finalize = Some(typed(f));
        self
    }

    /// The customize hook (selects related objects for each parent).
    pub fn customize<F, E>(self, f: F) -> Composite
    where
        F: Fn(CustomizeRequest) -> Result<CustomizeResponse, E> + Send + Sync + 'static,
        E: Display,
    {
        self.customize_async(move |req| std::future::ready(f(req).map_err(HookFailure::new)))
    }

    /// Like [`Composite::customize`], for an async function.
    pub fn customize_async<F, Fut, E>(mut self, f: F) -> Composite
    where
        F: Fn(CustomizeRequest) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<CustomizeResponse, E>> + Send + 'static,
        E: Display,
    {
        self.customize = Some(typed(f));
        self
    }

    /// A hook (`sync`, `finalize` or `customize`; another name is ignored) as a function on the
    /// raw JSON bodies, exactly what a webhook receives and answers. An error fails the
    /// parent's sync with its text, as with [`Composite::sync`].
    pub fn hook_json<F, Fut, E>(mut self, hook: &str, f: F) -> Composite
    where
        F: Fn(Value) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Value, E>> + Send + 'static,
        E: Display,
    {
        let f = Arc::new(f);
        let local: LocalHook = Arc::new(move |body| {
            let answer = f(body);
            Box::pin(async move { answer.await.map_err(HookFailure::new) })
        });
        match hook {
            "sync" => self.sync = Some(local),
            "finalize" => self.finalize = Some(local),
            "customize" => self.customize = Some(local),
            _ => {}
        }
        self
    }

    /// The CompositeController this builder describes, and its hook functions.
    fn controller(&mut self) -> Result<(CompositeController, LocalHooks), EmbedError> {
        let name = self.name.clone();
        if !self.has_parent {
            return Err(EmbedError::NoParent { name });
        }
        let Some(sync) = self.sync.clone() else {
            return Err(EmbedError::NoSync { name });
        };
        let hooks = self.spec.hooks.get_or_insert_with(Default::default);
        // the core runs a hook only when it is declared; the functions answer for the webhooks
        hooks.sync.get_or_insert_with(Default::default);
        let mut cc = CompositeController::new(&name, self.spec.clone());
        cc.status = None;
        if self.schema_atomic_lists {
            cc.metadata.annotations = Some(
                [(
                    crate::reconcile::children::SCHEMA_ATOMIC_ANNOTATION.to_owned(),
                    "true".to_owned(),
                )]
                .into(),
            );
        }
        let local = LocalHooks {
            sync,
            finalize: self.finalize.clone(),
            customize: self.customize.clone(),
        };
        Ok((cc, local))
    }

    /// Runs the controller until `stop` is cancelled. While its parent or child resources are
    /// not served yet (a CRD installed later) it logs that and tries again every discovery
    /// interval; once running it returns after `stop`, when the syncs in flight have finished.
    ///
    /// # Errors
    /// [`EmbedError`]: no parent or sync function, or a controller that can never be built (a
    /// parent resource without a status subresource).
    pub async fn run(mut self, stop: CancellationToken) -> Result<(), EmbedError> {
        let (cc, local) = self.controller()?;
        let ctx = Context::wired(
            self.client.clone(),
            self.config.clone(),
            self.wiring.clone(),
        );
        tokio::spawn(refresh_discovery(ctx.clone(), stop.clone()));
        loop {
            if let Err(e) = ctx.resources.refresh(ctx.discovery_client()).await {
                tracing::warn!(controller = %self.name, error = %e, "discovery failed");
            }
            match CompositeRunner::build_in_process(ctx.clone(), cc.clone(), local.clone()).await {
                Ok(pc) => {
                    tracing::info!(controller = %self.name, "started (in-process hooks)");
                    Arc::new(pc).run(stop).await;
                    return Ok(());
                }
                Err(BuildError::Resource(e)) => {
                    tracing::warn!(controller = %self.name, error = %e, "waiting for resources");
                }
                Err(e) => {
                    return Err(EmbedError::Build {
                        name: self.name,
                        message: e.to_string(),
                    });
                }
            }
            tokio::select! {
                _ = stop.cancelled() => return Ok(()),
                _ = tokio::time::sleep(ctx.config.discovery_interval) => {}
            }
        }
    }
}

fn parent_rule(api_version: &str, resource: &str) -> CompositeControllerParentResourceRule {
    CompositeControllerParentResourceRule {
        api_version: api_version.to_owned(),
        resource: resource.to_owned(),
        label_selector: None,
        revision_history: None,
        ignore_status_changes: None,
    }
}

/// Refreshes discovery every interval until `stop` (related resources of a customize hook may
/// appear after the start).
async fn refresh_discovery(ctx: Arc<Context>, stop: CancellationToken) {
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(ctx.config.discovery_interval) => {}
        }
        if let Err(e) = ctx.resources.refresh(ctx.discovery_client()).await {
            tracing::warn!(error = %e, "discovery refresh failed");
        }
    }
}

/// A typed hook function as a [`LocalHook`] on the JSON bodies.
fn typed<Req, Resp, F, Fut, E>(f: F) -> LocalHook
where
    Req: DeserializeOwned,
    Resp: Serialize,
    F: Fn(Req) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Resp, E>> + Send + 'static,
    E: Display,
{
    let f = Arc::new(f);
    Arc::new(move |body: Value| {
        let decoded = serde_json::from_value::<Req>(body);
        let answer = decoded.map(|req| f(req));
        Box::pin(async move {
            let answer =
                answer.map_err(|e| HookFailure::new(format!("decoding the hook request: {e}")))?;
            let response = answer.await.map_err(HookFailure::new)?;
            serde_json::to_value(response)
                .map_err(|e| HookFailure::new(format!("encoding the hook response: {e}")))
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client() -> Option<kube::Client> {
        let config = kube::Config::new("http://127.0.0.1:1".parse().ok()?);
        kube::Client::try_from(config).ok()
    }

    #[tokio::test]
    async fn typed_functions_see_the_request_and_answer_json() -> Result<(), HookFailure> {
        let hook = typed(|req: SyncRequest| async move {
            Ok::<_, String>(SyncResponse::new().status(serde_json::json!({"n": req.parent_name()})))
        });
        let request = serde_json::json!({"parent": {"metadata": {"name": "p"}}});
        let answer = hook(request).await?;
        assert_eq!(answer["status"]["n"], "p");
        let failing = typed(|_: SyncRequest| async { Err::<SyncResponse, _>("no luck") });
        assert_eq!(
            failing(serde_json::json!({"parent": {}})).await,
            Err(HookFailure::new("no luck"))
        );
        let undecodable = hook(serde_json::json!({"parent": {}, "finalizing": "yes"})).await;
        assert!(undecodable.is_err_and(|e| e.to_string().contains("decoding the hook request")));
        Ok(())
    }

    #[tokio::test]
    async fn a_controller_needs_a_parent_and_a_sync_function() {
        let Some(client) = client() else {
            panic!("a client for an unused address");
        };
        let stop = CancellationToken::new();
        let no_parent = Composite::builder(client.clone(), "x")
            .sync(|_| Ok::<_, String>(SyncResponse::new()))
            .run(stop.clone())
            .await;
        assert!(matches!(no_parent, Err(EmbedError::NoParent { .. })));
        let no_sync = Composite::builder(client, "x")
            .parent_resource("example.com/v1", "things")
            .run(stop)
            .await;
        assert!(matches!(no_sync, Err(EmbedError::NoSync { .. })));
    }

    #[tokio::test]
    async fn the_builder_describes_a_composite_controller() -> Result<(), EmbedError> {
        let Some(client) = client() else {
            panic!("a client for an unused address");
        };
        let (cc, local) = Composite::builder(client, "web")
            .parent_resource("example.com/v1", "webs")
            .child::<k8s_openapi::api::apps::v1::Deployment>(ChildUpdateMethod::InPlace)
            .resync_period(Duration::from_millis(10))
            .sync(|_| Ok::<_, String>(SyncResponse::new()))
            .controller()?;
        assert_eq!(cc.metadata.name.as_deref(), Some("web"));
        assert_eq!(cc.spec.parent_resource.resource, "webs");
        let child = &cc.spec.child_resources.unwrap_or_default()[0];
        assert_eq!(
            (child.api_version.as_str(), child.resource.as_str()),
            ("apps/v1", "deployments")
        );
        assert_eq!(cc.spec.resync_period_seconds, Some(1));
        assert_eq!(cc.spec.generate_selector, Some(true));
        assert!(cc.spec.hooks.is_some_and(|h| h.sync.is_some()));
        assert!(local.finalize.is_none() && local.customize.is_none());
        Ok(())
    }

    #[tokio::test]
    async fn async_finalize_and_customize_functions_answer_their_hooks()
    -> Result<(), Box<dyn std::error::Error>> {
        let Some(client) = client() else {
            panic!("a client for an unused address");
        };
        let (_, local) = Composite::builder(client, "db")
            .parent_resource("example.com/v1", "databases")
            .sync(|_| Ok::<_, String>(SyncResponse::new()))
            .finalize_async(|req: SyncRequest| async move {
                let done = req.finalizing;
                Ok::<_, String>(SyncResponse::new().finalized(done))
            })
            .customize_async(|_: CustomizeRequest| async {
                Ok::<_, String>(CustomizeResponse::default())
            })
            .controller()?;
        let finalize = local.finalize.ok_or("no finalize function")?;
        let answer = finalize(serde_json::json!({"parent": {}, "finalizing": true})).await?;
        assert_eq!(answer["finalized"], true);
        let customize = local.customize.ok_or("no customize function")?;
        let answer = customize(serde_json::json!({"parent": {}})).await?;
        assert!(answer.is_object(), "{answer}");
        Ok(())
    }
}
