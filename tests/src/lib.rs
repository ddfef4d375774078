//! Harness for kmeta's end-to-end scenarios.
//!
//! Every scenario gets an [`Env`]: by default a fresh in-process `kmeta-apiserver` over real
//! HTTP, or — when `KMETA_TEST_KUBECONFIG` names a kubeconfig — a real cluster. Each scenario
//! uses its own namespace and labels its CompositeControllers with a unique `kmeta-test` id so
//! that the controller it runs only picks up its own (several scenarios can share one cluster).
//! Scenarios that need fault injection or admission hooks ask [`Env::server`] and skip on a real
//! cluster.
//!
//! Hooks are real HTTP servers ([`HookServer`]) on 127.0.0.1 inside the test process, so the
//! controller (also in-process) reaches them in both modes.
//!
//! # Writing a scenario
//!
//! [`Scenario`] states the setup scenarios share — the [`Env`], kmeta's CRDs, the scenario's own
//! CRDs (group `<env id>.kmeta.test`), a hook, CompositeControllers ([`Cc`], with Metacontroller's
//! usual spec by default), the running controller, parents — so that the test body holds only
//! what the scenario is about. Every wait has a deadline ([`TIMEOUT`]) and a condition.
//!
//! ```no_run
//! use kmeta_tests::{Cc, Reply, Scenario};
//! use serde_json::json;
//!
//! # async fn scenario() -> anyhow::Result<()> {
//! // a hook that makes one ConfigMap `<parent>-cm` per parent, carrying spec.message
//! let hook = |_: &str, req: &serde_json::Value| {
//!     let name = req["parent"]["metadata"]["name"].as_str().unwrap_or_default();
//!     Reply::Json(json!({"children": [{"apiVersion": "v1", "kind": "ConfigMap",
//!         "metadata": {"name": format!("{name}-cm")},
//!         "data": {"message": req["parent"]["spec"]["message"]}}]}))
//! };
//! let s = Scenario::new("example")
//!     .crd("Thing", "things") // the first CRD is the parent kind
//!     .hook(hook)
//!     .controller(Cc::new("example-cc").webhook(json!({"timeout": "1s"})))
//!     .parent("one", json!({"message": "hello"}))
//!     .start() // ... and the controller runs
//!     .await?;
//! let cm = s.wait_child("one-cm").await?;
//! assert_eq!(cm["data"]["message"], "hello");
//! // a Running scenario is its Env: merge_patch, wait_event, metrics, ...
//! s.merge_patch(&s.parents(), "one", json!({"spec": {"message": "bye"}})).await?;
//! s.wait_child_where("one-cm", "child updated", |c| c["data"]["message"] == "bye").await?;
//! assert!(s.hooks().count("sync") >= 2);
//! s.finish().await
//! # }
//! ```

pub mod messages;
pub mod procs;
pub mod rbac;
pub mod scenario;
pub mod tls;

pub use scenario::{Cc, Dc, HookMode, Running, Scenario};

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context as _, bail};
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use kmeta::ManagerConfig;
use kmeta::ops::metrics::Metrics;
use kmeta_apiserver::TestServer;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// The environment variable that switches scenarios to a real cluster.
pub const KUBECONFIG_ENV: &str = "KMETA_TEST_KUBECONFIG";

/// Default deadline for every wait: generous, since CI machines are slow and shared.
pub const TIMEOUT: Duration = Duration::from_secs(30);

/// One scenario's world: an API server (or cluster), a namespace, and optionally a running
/// controller.
pub struct Env {
    /// Client for the API server or cluster.
    pub client: kube::Client,
    /// The controller's client: the same server, with kmeta's User-Agent (so its writes are
    /// told apart from the test's own in `managedFields`).
    controller_client: kube::Client,
    /// What the controller's client is built from.
    controller_config: kube::Config,
    /// The controller's clients for reports (Events, conditions) and for discovery, when they
    /// are its own ([`Env::limit_controller_requests`]).
    own_clients: Option<(kube::Client, kube::Client)>,
    /// The in-process server (None on a real cluster).
    server: Option<TestServer>,
    /// Unique id of this scenario (lowercase, DNS-safe).
    pub id: String,
    /// The scenario's namespace.
    pub ns: String,
    /// The controller's metrics (shared with the running manager).
    pub metrics: Arc<Metrics>,
    stop: CancellationToken,
    manager: Option<JoinHandle<Result<(), kube::Error>>>,
    /// CompositeControllers running with in-process hooks ([`Env::start_in_process`]).
    in_process: Vec<JoinHandle<Result<(), kmeta::embed::EmbedError>>>,
    cleanup: Vec<(ApiResource, String)>,
    /// The related resources granted to kmeta in [`rbac`] mode.
    rbac_related: rbac::Related,
    /// kmeta holds only what `kmeta rbac` grants, kept in step with the controllers ([`rbac`]).
    rbac: bool,
    /// The in-process server authorizes requests: a 403 kmeta meets under its own identity
    /// fails the scenario.
    authorized: bool,
}

/// Who kmeta is to a scenario's in-process API server (a real cluster: its kubeconfig's user).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Authz {
    /// As `KMETA_TEST_RBAC` says: no authorization, or [`Authz::KmetaRbac`].
    #[default]
    FromEnv,
    /// Authorization on; kmeta is the ServiceAccount `kube-system/kmeta` holding only what
    /// `kmeta rbac` grants ([`rbac`]), whatever `KMETA_TEST_RBAC` says.
    KmetaRbac,
    /// Authorization on; kmeta is the ServiceAccount `kube-system/kmeta` holding the wildcard
    /// ClusterRole `deploy/rbac.yaml` installs (Metacontroller's grant): all but what the
    /// ServiceAccounts it impersonates may not do.
    Wildcard,
}

static SEQ: AtomicU64 = AtomicU64::new(0);

/// [`Env::decided_syncs`] from the metrics.
fn decided_syncs(metrics: &Metrics, controller: &str) -> u64 {
    metrics.reconcile_count(controller, "ok") + metrics.reconcile_count(controller, "error")
}

/// `o` without the fields the API server sets on a write (`uid`, `resourceVersion`,
/// `creationTimestamp`, `managedFields`, `generation`): a body as written, to compare with what
/// was sent.
pub fn as_written(mut o: Value) -> Value {
    if let Some(m) = o["metadata"].as_object_mut() {
        for f in [
            "uid",
            "resourceVersion",
            "creationTimestamp",
            "managedFields",
            "generation",
        ] {
            m.remove(f);
        }
    }
    o
}

/// Whether some object in `body` (at any depth: a hook request's parent, children, related
/// objects) has the uid `uid` and shows `patch`, a JSON merge patch: every field it sets has that
/// value, every field it nulls is absent.
pub fn shows_patch(body: &Value, uid: &str, patch: &Value) -> bool {
    fn applied(obj: &Value, patch: &Value) -> bool {
        match patch {
            Value::Object(p) => p.iter().all(|(k, pv)| match (obj.get(k), pv) {
                (None | Some(Value::Null), Value::Null) => true,
                (Some(ov), pv) if !pv.is_null() => applied(ov, pv),
                _ => false,
            }),
            other => obj == other,
        }
    }
    match body {
        Value::Object(m) => {
            (body.pointer("/metadata/uid").and_then(Value::as_str) == Some(uid)
                && applied(body, patch))
                || m.values().any(|v| shows_patch(v, uid, patch))
        }
        Value::Array(items) => items.iter().any(|v| shows_patch(v, uid, patch)),
        _ => false,
    }
}

fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("KMETA_TEST_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_test_writer()
        .try_init();
}

/// `KMETA_TEST_WATCH_LAG_MS`: every watch event of the in-process API server trails its write by
/// that many milliseconds (a lagging watch cache), for running the scenarios against it.
pub const WATCH_LAG_ENV: &str = "KMETA_TEST_WATCH_LAG_MS";

/// The watch lag `KMETA_TEST_WATCH_LAG_MS` asks for (`None`: unset or 0).
pub fn watch_lag() -> anyhow::Result<Option<Duration>> {
    millis_env(WATCH_LAG_ENV)
}

/// `KMETA_TEST_API_LATENCY_MS`: every request to the in-process API server is answered that many
/// milliseconds late (a slow or distant API server), for running the scenarios against it.
pub const API_LATENCY_ENV: &str = "KMETA_TEST_API_LATENCY_MS";

/// The latency `KMETA_TEST_API_LATENCY_MS` asks for (`None`: unset or 0).
pub fn api_latency() -> anyhow::Result<Option<Duration>> {
    millis_env(API_LATENCY_ENV)
}

/// `KMETA_TEST_WRITE_FAULT_PCT`: that percentage of the controller's writes (by its User-Agent,
/// `kmeta/…`; the tests' own requests are spared) fail with 500, for running the scenarios
/// against a flaky API server.
pub const WRITE_FAULT_ENV: &str = "KMETA_TEST_WRITE_FAULT_PCT";

/// `KMETA_TEST_READ_FAULT_PCT`: that percentage of the controller's reads (get, list, watch)
/// fail with 500, as [`WRITE_FAULT_ENV`] does for writes.
pub const READ_FAULT_ENV: &str = "KMETA_TEST_READ_FAULT_PCT";

/// The fraction of requests the percentage variable `var` fails (`None`: unset or 0).
pub fn fault_rate(var: &str) -> anyhow::Result<Option<f64>> {
    let Some(pct) = number_env::<f64>(var, "a percentage")? else {
        return Ok(None);
    };
    anyhow::ensure!(
        (0.0..=100.0).contains(&pct),
        "{var}={pct}: not between 0 and 100"
    );
    Ok((pct > 0.0).then_some(pct / 100.0))
}

/// `KMETA_TEST_HOOK_FAULT_PCT`: that percentage of the requests reaching a [`HookServer`] (or one
/// of its in-process responders) are answered 500 before the handler runs - not recorded, not
/// counted, the handler never sees them, as when a proxy in front of the hook or the hook's own
/// runtime fails; for running the scenarios against a flaky hook.
pub const HOOK_FAULT_ENV: &str = "KMETA_TEST_HOOK_FAULT_PCT";

/// Whether the suite runs with requests failed or watches churned (`KMETA_TEST_READ_FAULT_PCT`,
/// `KMETA_TEST_WRITE_FAULT_PCT`, `KMETA_TEST_HOOK_FAULT_PCT`, `KMETA_TEST_WATCH_CHURN_MS`): exact
/// request counts then include retries, re-watches and relists, and a scenario checks them only
/// without.
pub fn requests_disturbed() -> anyhow::Result<bool> {
    Ok(fault_rate(READ_FAULT_ENV)?.is_some()
        || fault_rate(WRITE_FAULT_ENV)?.is_some()
        || fault_rate(HOOK_FAULT_ENV)?.is_some()
        || watch_churn()?.is_some())
}

/// Injects the controller-request faults [`READ_FAULT_ENV`] and [`WRITE_FAULT_ENV`] ask for
/// (selected by kmeta's User-Agent: the tests' own requests are spared).
fn fail_controller_requests(server: &TestServer) -> anyhow::Result<()> {
    let verbs: [(&str, &[&str]); 2] = [
        (READ_FAULT_ENV, &["get", "list", "watch"]),
        (WRITE_FAULT_ENV, &["create", "update", "patch", "delete"]),
    ];
    for (var, verbs) in verbs {
        let Some(rate) = fault_rate(var)? else {
            continue;
        };
        for verb in verbs {
            server.faults().inject(
                kmeta_apiserver::FaultSpec::error(500)
                    .verb(verb)
                    .user_agent("kmeta/")
                    .rate(rate),
            );
        }
    }
    Ok(())
}

/// `KMETA_TEST_WATCH_CHURN_MS`: every that many milliseconds the in-process API server drops its
/// retained watch events (as etcd compaction does) and closes every watch stream, so each watcher
/// resumes into 410 Expired and lists again; for running the scenarios against watch churn.
pub const WATCH_CHURN_ENV: &str = "KMETA_TEST_WATCH_CHURN_MS";

/// The churn period `KMETA_TEST_WATCH_CHURN_MS` asks for (`None`: unset or 0).
pub fn watch_churn() -> anyhow::Result<Option<Duration>> {
    millis_env(WATCH_CHURN_ENV)
}

fn millis_env(var: &str) -> anyhow::Result<Option<Duration>> {
    let ms = number_env::<u64>(var, "a number of milliseconds")?;
    Ok(ms.filter(|ms| *ms > 0).map(Duration::from_millis))
}

/// The number variable `var` holds (`what` it should be, for the error), `None` when unset.
fn number_env<T: std::str::FromStr>(var: &str, what: &str) -> anyhow::Result<Option<T>>
where
    T::Err: std::error::Error + Send + Sync + 'static,
{
    match std::env::var(var) {
        Ok(text) => {
            let n = text
                .trim()
                .parse()
                .with_context(|| format!("{var}={text:?}: not {what}"))?;
            Ok(Some(n))
        }
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(e) => Err(anyhow::anyhow!("{var}: {e}")),
    }
}

/// Compacts the server's watch history and closes its watches every `period` while the server
/// lives.
fn churn_watches(server: &TestServer, period: Duration) {
    let state = Arc::downgrade(server.state());
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(period);
        tick.tick().await;
        loop {
            tick.tick().await;
            let Some(state) = state.upgrade() else { return };
            state.compact();
            state.faults.close_watches();
        }
    });
}

impl Env {
    /// Starts a fresh in-process API server, or connects to the cluster named by
    /// `KMETA_TEST_KUBECONFIG`, and creates the scenario's namespace.
    pub async fn new(name: &str) -> anyhow::Result<Env> {
        Self::with_server(name, TestServer::builder()).await
    }

    /// Like [`Env::new`], with a customised in-process server (ignored on a real cluster).
    pub async fn with_server(
        name: &str,
        builder: kmeta_apiserver::TestServerBuilder,
    ) -> anyhow::Result<Env> {
        Self::with_authz(name, builder, Authz::FromEnv).await
    }

    /// Like [`Env::with_server`], with kmeta authorized as `authz` says by the in-process
    /// server (ignored on a real cluster).
    pub async fn with_authz(
        name: &str,
        builder: kmeta_apiserver::TestServerBuilder,
        authz: Authz,
    ) -> anyhow::Result<Env> {
        let rbac = match authz {
            Authz::FromEnv => rbac::rbac_mode(),
            Authz::KmetaRbac => true,
            Authz::Wildcard => false,
        };
        let authorized = rbac || authz == Authz::Wildcard;
        init_tracing();
        let seq = SEQ.fetch_add(1, Ordering::SeqCst);
        let rand = uuid::Uuid::new_v4().simple().to_string();
        let id = format!("{}-{seq}-{}", name, &rand[..6]);
        let (client, controller_config, server) = match std::env::var_os(KUBECONFIG_ENV) {
            Some(path) => {
                let kc = kube::config::Kubeconfig::read_from(&path)
                    .with_context(|| format!("reading {KUBECONFIG_ENV}={path:?}"))?;
                let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?;
                (kube::Client::try_from(cfg.clone())?, cfg, None)
            }
            None => {
                let builder = if authorized {
                    builder.rbac(true)
                } else {
                    builder
                };
                let server = builder.start().await.context("starting kmeta-apiserver")?;
                if let Some(lag) = watch_lag()? {
                    server.faults().delay_watch_events(None, lag);
                }
                if let Some(latency) = api_latency()? {
                    server.faults().add_latency(None, None, latency);
                }
                fail_controller_requests(&server)?;
                if let Some(period) = watch_churn()? {
                    churn_watches(&server, period);
                }
                let mut cfg = kube::Config::new(server.url().parse()?);
                if authorized {
                    let token = rbac::service_account(&server, authz == Authz::Wildcard).await?;
                    cfg.auth_info.token = Some(token.into());
                }
                (server.client(), cfg, Some(server))
            }
        };
        let real = server.is_none();
        let controller_client = kube::Client::try_from(kmeta::ops::client::with_user_agent(
            controller_config.clone(),
        ))?;
        let ns = format!("t-{id}");
        let namespaces: Api<DynamicObject> =
            Api::all_with(client.clone(), &ar("v1", "Namespace", "namespaces"));
        namespaces
            .create(
                &PostParams::default(),
                &obj(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}))?,
            )
            .await
            .with_context(|| format!("creating namespace {ns}"))?;
        Ok(Env {
            client,
            controller_client,
            controller_config,
            own_clients: None,
            server,
            id,
            ns: ns.clone(),
            metrics: Arc::new(Metrics::default()),
            stop: CancellationToken::new(),
            manager: None,
            in_process: Vec::new(),
            cleanup: vec![(ar("v1", "Namespace", "namespaces"), ns)],
            rbac_related: rbac::Related::default(),
            rbac: rbac && !real,
            authorized: authorized && !real,
        })
    }

    /// The in-process server, for fault injection and admission hooks; None on a real cluster
    /// (the caller skips what needs it).
    pub fn server(&self) -> Option<&TestServer> {
        self.server.as_ref()
    }

    /// True when running against a real cluster.
    pub fn real_cluster(&self) -> bool {
        self.server.is_none()
    }

    /// The label every CompositeController of this scenario carries.
    pub fn cc_labels(&self) -> Value {
        json!({ "kmeta-test": self.id })
    }

    /// Starts the controller with default settings.
    pub fn start_controller(&mut self) {
        self.start_controller_with(ManagerConfig::default());
    }

    /// Starts the controller (only this scenario's CompositeControllers).
    pub fn start_controller_with(&mut self, config: ManagerConfig) {
        let config = self.scenario_config(config);
        let wiring = self.scenario_wiring();
        let client = self.controller_client.clone();
        let stop = self.stop.clone();
        if self.rbac {
            self.rbac_related
                .set_default_service_account(config.default_service_account.clone());
            // the role as `kmeta rbac` makes it for the controllers created so far, then kept
            // in step with those created later
            let admin = self.client.clone();
            let keep = stop.clone();
            let related = self.rbac_related.clone();
            self.manager = Some(tokio::spawn(async move {
                if let Err(e) = rbac::sync_role(&admin, None, &related).await {
                    eprintln!("{}: {e:#}", rbac::RBAC_ENV);
                }
                let _keeper = rbac::keep_role(admin, related, keep);
                kmeta::reconcile::manager::run_wired(client, config, wiring, stop).await
            }));
            return;
        }
        self.manager = Some(tokio::spawn(kmeta::reconcile::manager::run_wired(
            client, config, wiring, stop,
        )));
    }

    /// Has the controller make its requests as `kmeta run` does with `limits`
    /// (`--client-go-qps`, `--client-go-burst`): a client-side token bucket for its work, one of
    /// their own for its reports (Events, conditions) and one for discovery. Call before the
    /// controller starts.
    pub fn limit_controller_requests(
        &mut self,
        limits: kmeta::ops::ratelimit::RateLimit,
    ) -> anyhow::Result<()> {
        let build = || {
            kmeta::ops::client::build(self.controller_config.clone(), limits, self.metrics.clone())
        };
        self.controller_client = build()?;
        self.own_clients = Some((build()?, build()?));
        Ok(())
    }

    /// `config` as this scenario runs it: only its CompositeControllers (those labelled with its
    /// id, unless `config` selects its own), its metrics, discovery at least every second.
    fn scenario_config(&self, mut config: ManagerConfig) -> ManagerConfig {
        if config.target_label_selector.is_none() {
            config.target_label_selector = Some(format!("kmeta-test={}", self.id));
        }
        config.discovery_interval = config.discovery_interval.min(Duration::from_secs(1));
        if config.hook.jsonnet.worker.is_none() {
            config.hook.jsonnet.worker = jsonnet_worker();
        }
        config
    }

    /// What the controller shares with this scenario: its metrics registry, and the clients of
    /// their own [`Env::limit_controller_requests`] made.
    fn scenario_wiring(&self) -> kmeta::Wiring {
        let wiring = kmeta::Wiring::default().metrics(self.metrics.clone());
        match &self.own_clients {
            Some((reports, discovery)) => wiring
                .reports_client(reports.clone())
                .discovery_client(discovery.clone()),
            None => wiring,
        }
    }

    /// Runs a CompositeController with in-process hooks (kmeta as a library) with `config` as
    /// the scenario runs it, until [`Env::stop_controller`] or the end of the scenario.
    pub fn start_in_process(&mut self, composite: kmeta::embed::Composite, config: ManagerConfig) {
        let composite = composite
            .config(self.scenario_config(config))
            .wiring(self.scenario_wiring());
        self.in_process
            .push(tokio::spawn(composite.run(self.stop.clone())));
    }

    /// Stops the controller (and the in-process ones) and waits (bounded) for them to finish
    /// their syncs in flight.
    pub async fn stop_controller(&mut self) -> anyhow::Result<()> {
        self.stop.cancel();
        if let Some(m) = self.manager.take() {
            tokio::time::timeout(TIMEOUT, m)
                .await
                .context("controller did not stop in time")???;
        }
        for c in std::mem::take(&mut self.in_process) {
            tokio::time::timeout(TIMEOUT, c)
                .await
                .context("in-process controller did not stop in time")???;
        }
        self.stop = CancellationToken::new();
        Ok(())
    }

    /// A dynamic API for `plural` of `api_version`/`kind` in `ns` (None: cluster-scoped or all).
    pub fn api(
        &self,
        api_version: &str,
        kind: &str,
        plural: &str,
        ns: Option<&str>,
    ) -> Api<DynamicObject> {
        let r = ar(api_version, kind, plural);
        match ns {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, &r),
            None => Api::all_with(self.client.clone(), &r),
        }
    }

    /// Creates `object` (its kind's plural given), remembering cluster-scoped ones for cleanup.
    pub async fn create(&mut self, plural: &str, object: Value) -> anyhow::Result<Value> {
        let (av, kind, ns, name) = ident(&object)?;
        if self.rbac && matches!(plural, "compositecontrollers" | "decoratorcontrollers") {
            // as an operator applies `kmeta rbac`'s role with the controller, before kmeta sees it
            rbac::sync_role(&self.client, Some(&object), &self.rbac_related).await?;
        }
        if plural == "resourcegraphdefinitions" {
            self.grant_rgd(&object).await?;
        }
        let api = self.api(&av, &kind, plural, ns.as_deref());
        let created = api
            .create(&PostParams::default(), &obj(object)?)
            .await
            .with_context(|| format!("creating {kind} {name}"))?;
        if ns.is_none() {
            self.cleanup.push((ar(&av, &kind, plural), name));
        }
        Ok(serde_json::to_value(created)?)
    }

    /// The client kmeta serves ResourceGraphDefinitions with (`kmeta::kro::serve`): the
    /// test's, or in [`rbac`] mode kmeta's ServiceAccount's, after granting it what
    /// `kmeta rbac -f <the RGDs>` grants for serving them.
    pub async fn kro_client(&self) -> anyhow::Result<kube::Client> {
        self.kro_client_with(false).await
    }

    /// As [`Env::kro_client`], for `kmeta run --kro-allow-crd-deletion` when `delete_crds`
    /// (granted as `kmeta rbac --kro-allow-crd-deletion` grants).
    pub async fn kro_client_with(&self, delete_crds: bool) -> anyhow::Result<kube::Client> {
        if self.rbac {
            self.rbac_related
                .serve_kro(&self.client, delete_crds)
                .await?;
            return Ok(self.controller_client.clone());
        }
        Ok(self.client.clone())
    }

    /// In [`rbac`] mode, grants kmeta what the CompositeController it makes of the
    /// ResourceGraphDefinition `rgd` needs, as an operator applies `kmeta rbac -f <the RGD>`'s
    /// role with it ([`Env::create`] does it for an RGD it creates; call it before an edit
    /// that changes the RGD's kinds).
    pub async fn grant_rgd(&self, rgd: &Value) -> anyhow::Result<()> {
        if self.rbac {
            self.rbac_related.add_rgd(&self.client, rgd).await?;
        }
        Ok(())
    }

    /// The client a CompositeController run in-process uses: the test's, or in [`rbac`] mode
    /// kmeta's ServiceAccount's, after granting it what `kmeta rbac` would for `cc` (the
    /// CompositeController object it would have been).
    pub async fn in_process_client(&self, cc: &Value) -> anyhow::Result<kube::Client> {
        if self.rbac {
            self.rbac_related.add_in_process(&self.client, cc).await?;
            return Ok(self.controller_client.clone());
        }
        Ok(self.client.clone())
    }

    /// In [`rbac`] mode, what grants kmeta the related resources a hook answer selects (for
    /// [`HookServer::before_related`]); `None` otherwise.
    pub fn related_granter(&self) -> Option<rbac::RelatedGrant> {
        self.rbac
            .then(|| self.rbac_related.granter(self.client.clone()))
    }

    /// Creates a CRD and waits until it is Established and served.
    pub async fn create_crd(&mut self, crd: Value) -> anyhow::Result<()> {
        let name = crd
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        self.create("customresourcedefinitions", crd).await?;
        let api = self.api(
            "apiextensions.k8s.io/v1",
            "CustomResourceDefinition",
            "customresourcedefinitions",
            None,
        );
        eventually(&format!("CRD {name} Established"), TIMEOUT, || async {
            let crd = serde_json::to_value(api.get(&name).await?)?;
            let established = crd
                .pointer("/status/conditions")
                .and_then(Value::as_array)
                .is_some_and(|c| {
                    c.iter().any(|c| {
                        c.get("type") == Some(&json!("Established"))
                            && c.get("status") == Some(&json!("True"))
                    })
                });
            Ok(established.then_some(()))
        })
        .await
    }

    /// Reads an object; None when it does not exist.
    pub async fn get(&self, api: &Api<DynamicObject>, name: &str) -> anyhow::Result<Option<Value>> {
        Ok(api
            .get_opt(name)
            .await?
            .map(serde_json::to_value)
            .transpose()?)
    }

    /// JSON-merge-patches an object.
    pub async fn merge_patch(
        &self,
        api: &Api<DynamicObject>,
        name: &str,
        patch: Value,
    ) -> anyhow::Result<Value> {
        let o = api
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .with_context(|| format!("patching {name}"))?;
        Ok(serde_json::to_value(o)?)
    }

    /// Waits until `name` exists in `api` and `ok` holds for it, and returns it; `what` names
    /// the condition in the timeout error.
    pub async fn wait_for(
        &self,
        api: &Api<DynamicObject>,
        name: &str,
        what: &str,
        ok: impl Fn(&Value) -> bool,
    ) -> anyhow::Result<Value> {
        eventually(what, TIMEOUT, || async {
            Ok(self.get(api, name).await?.filter(|o| ok(o)))
        })
        .await
    }

    /// Waits until `name` no longer exists in `api`.
    pub async fn wait_gone(
        &self,
        api: &Api<DynamicObject>,
        name: &str,
        what: &str,
    ) -> anyhow::Result<()> {
        eventually(what, TIMEOUT, || async {
            Ok(self.get(api, name).await?.is_none().then_some(()))
        })
        .await
    }

    /// JSON-merge-patches `name` and waits until `controller` finished a sync after the patch
    /// (a way to make it sync again: patch an annotation). A sync in flight when the patch landed
    /// may be the one waited for; a scenario with a hook server waits for the sync whose hook
    /// call showed the patch instead (`Running::patch_and_sync`).
    pub async fn patch_and_sync(
        &self,
        controller: &str,
        api: &Api<DynamicObject>,
        name: &str,
        patch: Value,
    ) -> anyhow::Result<Value> {
        let syncs = self.syncs(controller);
        let patched = self.merge_patch(api, name, patch).await?;
        self.wait_syncs(controller, syncs).await?;
        Ok(patched)
    }

    /// Syncs of `controller` that got past waiting and decided (results `ok` and `error`; not
    /// `retry`, a sync waiting for the watch to show an earlier write).
    pub fn decided_syncs(&self, controller: &str) -> u64 {
        decided_syncs(&self.metrics, controller)
    }

    /// Finished syncs of `controller` (success + failure + retry).
    pub fn syncs(&self, controller: &str) -> u64 {
        ["ok", "error", "retry"]
            .iter()
            .map(|r| self.metrics.reconcile_count(controller, r))
            .sum()
    }

    /// Waits until `controller` finished more than `after` syncs.
    pub async fn wait_syncs(&self, controller: &str, after: u64) -> anyhow::Result<u64> {
        eventually(
            &format!("a sync of {controller} after #{after}"),
            TIMEOUT,
            || async {
                let n = self.syncs(controller);
                Ok((n > after).then_some(n))
            },
        )
        .await
    }

    /// Waits until `controller` decided more than `after` syncs ([`Env::decided_syncs`]).
    pub async fn wait_decided_syncs(&self, controller: &str, after: u64) -> anyhow::Result<u64> {
        eventually(
            &format!("a decided sync of {controller} after #{after}"),
            TIMEOUT,
            || async {
                let n = self.decided_syncs(controller);
                Ok((n > after).then_some(n))
            },
        )
        .await
    }

    /// Waits for an events.k8s.io/v1 Event in `ns` (None: any namespace) that `matches`, and
    /// returns it.
    pub async fn wait_event(
        &self,
        what: &str,
        ns: Option<&str>,
        matches: impl Fn(&Value) -> bool,
    ) -> anyhow::Result<Value> {
        let events = self.api("events.k8s.io/v1", "Event", "events", ns);
        eventually(what, TIMEOUT, || async {
            let list = events.list(&Default::default()).await?;
            Ok(list
                .items
                .into_iter()
                .filter_map(|e| serde_json::to_value(e).ok())
                .find(|e| matches(e)))
        })
        .await
    }

    /// Stops the controller and deletes what the scenario created (namespace, cluster-scoped
    /// objects). Call at the end of every scenario; on a real cluster it keeps it clean.
    pub async fn finish(mut self) -> anyhow::Result<()> {
        self.stop_controller().await?;
        // the messages kmeta left for people carry no Rust debug formatting
        if self.server.is_some() {
            let found = messages::scan(&self.client).await?;
            anyhow::ensure!(
                found.is_empty(),
                "{}: messages with Rust debug formatting:\n{}",
                self.id,
                found.join("\n")
            );
        }
        for (r, name) in self.cleanup.iter().rev() {
            let api: Api<DynamicObject> = Api::all_with(self.client.clone(), r);
            let _ = api.delete(name, &DeleteParams::background()).await;
        }
        if let Some(s) = self.server.take() {
            s.shutdown().await;
        }
        Ok(())
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        self.stop.cancel();
        if self.authorized
            && let Some(server) = &self.server
        {
            let report = rbac::report(&self.id, server);
            for line in &report {
                eprintln!("{line}");
            }
            // each is a right kmeta needs that `kmeta rbac` does not grant: the scenario fails
            assert!(
                report.is_empty() || std::thread::panicking(),
                "{}: kmeta met {} 403s under the ClusterRole `kmeta rbac` generates:\n{}",
                rbac::RBAC_ENV,
                report.len(),
                report.join("\n")
            );
        }
    }
}

/// Writes `objects` as one YAML stream (JSON documents) to `dir/name`, for the file arguments of
/// `kmeta render` and friends; returns its path.
pub fn manifest_file(
    dir: &std::path::Path,
    name: &str,
    objects: &[&Value],
) -> anyhow::Result<std::path::PathBuf> {
    let path = dir.join(name);
    let docs: Vec<String> = objects
        .iter()
        .map(serde_json::to_string)
        .collect::<Result<_, _>>()?;
    std::fs::write(&path, docs.join("\n---\n"))?;
    Ok(path)
}

/// The Jsonnet worker for the scenarios' controller: `KMETA_JSONNET_WORKER`, else this
/// package's `kmeta-jsonnet-worker` binary, which cargo builds beside the test binaries
/// (`target/<profile>/`, the parent of the test binary's `deps/`).
pub fn jsonnet_worker() -> Option<kmeta::hook::jsonnet::WorkerCommand> {
    let program = match std::env::var_os("KMETA_JSONNET_WORKER") {
        Some(p) => std::path::PathBuf::from(p),
        None => {
            let exe = std::env::current_exe().ok()?;
            let dir = exe.parent()?;
            let dir = if dir.ends_with("deps") {
                dir.parent()?
            } else {
                dir
            };
            dir.join("kmeta-jsonnet-worker")
        }
    };
    Some(kmeta::hook::jsonnet::WorkerCommand {
        program,
        args: Vec::new(),
    })
}

/// An [`ApiResource`] from apiVersion, kind and plural.
pub fn ar(api_version: &str, kind: &str, plural: &str) -> ApiResource {
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

/// A JSON value as a dynamic object.
pub fn obj(v: Value) -> anyhow::Result<DynamicObject> {
    Ok(serde_json::from_value(v)?)
}

fn ident(o: &Value) -> anyhow::Result<(String, String, Option<String>, String)> {
    let s = |p: &str| o.pointer(p).and_then(Value::as_str).map(str::to_owned);
    let (Some(av), Some(kind)) = (s("/apiVersion"), s("/kind")) else {
        bail!("object without apiVersion/kind: {o}");
    };
    let name = s("/metadata/name").unwrap_or_default();
    Ok((av, kind, s("/metadata/namespace"), name))
}

/// Polls `check` every 25 ms until it yields `Some`, or fails after `timeout` naming `what` and
/// the last error seen.
pub async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<Option<T>>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    let mut last = String::from("condition never held");
    loop {
        match check().await {
            Ok(Some(v)) => return Ok(v),
            Ok(None) => {}
            Err(e) => last = format!("{e:#}"),
        }
        if tokio::time::Instant::now() >= deadline {
            bail!("timed out after {timeout:?} waiting for {what}: {last}");
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Waits until `done` holds (polled like [`eventually`], deadline [`TIMEOUT`]).
pub async fn until(what: &str, done: impl Fn() -> bool) -> anyhow::Result<()> {
    eventually(what, TIMEOUT, || async { Ok(done().then_some(())) }).await
}

/// The condition of type `kind` in `obj`'s `status.conditions`, if set.
pub fn condition<'a>(obj: &'a Value, kind: &str) -> Option<&'a Value> {
    obj["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
}

/// How many ConfigMap children a sync request carries (`children["ConfigMap.v1"]`).
pub fn observed_configmaps(req: &Value) -> usize {
    req["children"]["ConfigMap.v1"]
        .as_object()
        .map_or(0, |m| m.len())
}

/// A namespaced CRD `group`/v1 `kind` with a status subresource and a free-form spec.
pub fn crd(group: &str, kind: &str, plural: &str, namespaced: bool) -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.{group}")},
        "spec": {
            "group": group,
            "scope": if namespaced { "Namespaced" } else { "Cluster" },
            "names": {"kind": kind, "plural": plural, "singular": kind.to_lowercase(),
                      "listKind": format!("{kind}List")},
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object",
                    "x-kubernetes-preserve-unknown-fields": true}}
            }]
        }
    })
}

/// The `(name, image)` of each container of `obj`'s embedded pod template
/// (`spec.template.spec.containers`), in order.
pub fn containers(obj: &Value) -> Vec<(String, String)> {
    obj.pointer("/spec/template/spec/containers")
        .and_then(Value::as_array)
        .map(|cs| {
            cs.iter()
                .map(|c| {
                    (
                        c["name"].as_str().unwrap_or_default().to_owned(),
                        c["image"].as_str().unwrap_or_default().to_owned(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// What a hook handler answers.
#[derive(Debug, Clone)]
pub enum Reply {
    /// 200 with this JSON body.
    Json(Value),
    /// This status with this raw body.
    Raw(u16, String),
    /// Wait, then answer.
    Delay(Duration, Box<Reply>),
    /// Answer with these extra response headers.
    Headers(Vec<(String, String)>, Box<Reply>),
}

type Handler = dyn Fn(&str, &Value) -> Reply + Send + Sync;

struct HookState {
    handler: Arc<Handler>,
    /// The share of requests failed before the handler ([`HOOK_FAULT_ENV`]).
    fault: Mutex<Option<f64>>,
    /// Requests failed that way.
    faults: AtomicUsize,
    /// `(hook, body, calls recorded before it)` of each request failed that way, while recording.
    faulted: Mutex<Vec<(String, Value, usize)>>,
    /// `(hook, body, stamp)` of every request, the stamp from [`HookServer::stamp_calls`].
    calls: Mutex<Vec<(String, Value, Option<u64>)>>,
    /// Computes each request's stamp from its body when set.
    stamp: Mutex<Option<Stamp>>,
    headers: Mutex<Vec<(String, axum::http::HeaderMap)>>,
    tls_failures: AtomicUsize,
    /// Whether bodies and headers are kept ([`HookServer::set_recording`]).
    recording: AtomicBool,
    /// Called with the related resources an answer selects before it is sent
    /// ([`HookServer::before_related`]).
    before_related: Mutex<Option<rbac::RelatedGrant>>,
    /// Requests received per hook path, recorded or not.
    counts: Mutex<HashMap<String, usize>>,
}

impl HookState {
    /// Keeps a request failed by [`HOOK_FAULT_ENV`] (where it came among the recorded ones)
    /// while recording.
    fn record_fault(&self, hook: &str, body: &Value) {
        if !self.recording.load(Ordering::SeqCst) {
            return;
        }
        let Ok(calls) = self.calls.lock() else { return };
        if let Ok(mut f) = self.faulted.lock() {
            f.push((hook.to_owned(), body.clone(), calls.len()));
        }
    }

    /// Whether this request is one [`HOOK_FAULT_ENV`] fails (counted when it is).
    fn faulted(&self) -> bool {
        let rate = self.fault.lock().ok().and_then(|f| *f);
        let hit = rate.is_some_and(rand::random_bool);
        if hit {
            self.faults.fetch_add(1, Ordering::SeqCst);
        }
        hit
    }

    /// Keeps a request's body (with its stamp) while recording.
    fn record(&self, hook: &str, body: &Value) {
        if !self.recording.load(Ordering::SeqCst) {
            return;
        }
        let stamp = self
            .stamp
            .lock()
            .ok()
            .and_then(|s| s.as_ref().and_then(|f| f(body)));
        if let Ok(mut c) = self.calls.lock() {
            c.push((hook.to_owned(), body.clone(), stamp));
        }
    }
}

/// What [`HookServer::stamp_calls`] records with each request.
type Stamp = Arc<dyn Fn(&Value) -> Option<u64> + Send + Sync>;

/// A webhook server on 127.0.0.1: every POST to `/<hook>` is recorded and answered by the
/// handler, which gets the path (`sync`, `finalize`, `customize`, ...) and the request body.
pub struct HookServer {
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    state: Arc<HookState>,
    task: JoinHandle<()>,
}

impl HookServer {
    /// Starts the server.
    pub async fn start(
        handler: impl Fn(&str, &Value) -> Reply + Send + Sync + 'static,
    ) -> anyhow::Result<HookServer> {
        let (state, app, listener) = Self::bind(handler).await?;
        let addr = listener.local_addr()?;
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(HookServer {
            base: format!("http://{addr}"),
            state,
            task,
        })
    }

    /// Starts the server on HTTPS with `tls` (see [`tls::Pki::server_config`]); connections
    /// whose handshake fails are dropped and counted in [`HookServer::tls_failures`].
    pub async fn start_tls(
        handler: impl Fn(&str, &Value) -> Reply + Send + Sync + 'static,
        tls: Arc<rustls::ServerConfig>,
    ) -> anyhow::Result<HookServer> {
        let (state, app, listener) = Self::bind(handler).await?;
        let addr = listener.local_addr()?;
        let acceptor = tokio_rustls::TlsAcceptor::from(tls);
        let failures = state.clone();
        let task = tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let acceptor = acceptor.clone();
                let app = app.clone();
                let failures = failures.clone();
                tokio::spawn(async move {
                    let Ok(stream) = acceptor.accept(tcp).await else {
                        failures.tls_failures.fetch_add(1, Ordering::SeqCst);
                        return;
                    };
                    let service = hyper_util::service::TowerToHyperService::new(app);
                    let _ = hyper_util::server::conn::auto::Builder::new(
                        hyper_util::rt::TokioExecutor::new(),
                    )
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .await;
                });
            }
        });
        Ok(HookServer {
            base: format!("https://{addr}"),
            state,
            task,
        })
    }

    /// The recording state, its router and a listener on a free port of 127.0.0.1.
    async fn bind(
        handler: impl Fn(&str, &Value) -> Reply + Send + Sync + 'static,
    ) -> anyhow::Result<(Arc<HookState>, axum::Router, tokio::net::TcpListener)> {
        let state = Arc::new(HookState {
            handler: Arc::new(handler),
            fault: Mutex::new(fault_rate(HOOK_FAULT_ENV)?),
            faults: AtomicUsize::new(0),
            faulted: Mutex::new(Vec::new()),
            calls: Mutex::new(Vec::new()),
            stamp: Mutex::new(None),
            headers: Mutex::new(Vec::new()),
            tls_failures: AtomicUsize::new(0),
            recording: AtomicBool::new(true),
            counts: Mutex::new(HashMap::new()),
            before_related: Mutex::new(None),
        });
        let app = axum::Router::new()
            .route("/{hook}", axum::routing::post(serve))
            .with_state(state.clone());
        let listener = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
        Ok((state, app, listener))
    }

    /// Calls `grant` with the `(apiVersion, resource)` pairs of the `relatedResources` of every
    /// answer that has them, and waits for it, before the answer is sent ([`rbac`]: the related
    /// resources a customize hook selects are granted as `kmeta rbac --related` would).
    pub fn before_related(&self, grant: rbac::RelatedGrant) {
        if let Ok(mut g) = self.state.before_related.lock() {
            *g = Some(grant);
        }
    }

    /// Answers that fraction (0.0..=1.0) of later requests 500 before the handler runs, as
    /// [`HOOK_FAULT_ENV`] does from the start (0: none).
    pub fn fail_requests(&self, rate: f64) {
        if let Ok(mut fault) = self.state.fault.lock() {
            *fault = (rate > 0.0).then_some(rate.min(1.0));
        }
    }

    /// Requests answered 500 before the handler ran ([`HOOK_FAULT_ENV`]), at every hook path.
    pub fn faults(&self) -> usize {
        self.state.faults.load(Ordering::SeqCst)
    }

    /// TLS handshakes that failed (HTTPS servers only).
    pub fn tls_failures(&self) -> usize {
        self.state.tls_failures.load(Ordering::SeqCst)
    }

    /// The URL of hook path `hook`.
    pub fn url(&self, hook: &str) -> String {
        format!("{}/{hook}", self.base)
    }

    /// `hook` answered in this process, without HTTP (for in-process hooks): each request is
    /// recorded as one received over HTTP and answered by the handler; a `Reply::Json` is the
    /// answer, `Reply::Raw` with 200 and a JSON body too, any other `Reply::Raw` is an error
    /// with its status and text, delays are slept and headers dropped.
    pub fn responder(
        &self,
        hook: &str,
    ) -> impl Fn(Value) -> std::pin::Pin<Box<dyn Future<Output = Result<Value, String>> + Send>>
    + Send
    + Sync
    + 'static {
        let state = self.state.clone();
        let hook = hook.to_owned();
        move |body: Value| {
            if state.faulted() {
                state.record_fault(&hook, &body);
                return Box::pin(answer_in_process(Reply::Raw(
                    500,
                    "injected hook fault".to_owned(),
                )));
            }
            if let Ok(mut n) = state.counts.lock() {
                *n.entry(hook.clone()).or_default() += 1;
            }
            state.record(&hook, &body);
            let reply = (state.handler)(&hook, &body);
            let grant = state.before_related.lock().ok().and_then(|g| g.clone());
            let related = match (&grant, &reply) {
                (Some(_), Reply::Json(answer)) => rbac::related_in(answer),
                _ => Vec::new(),
            };
            Box::pin(async move {
                if let Some(grant) = grant
                    && !related.is_empty()
                {
                    grant(related).await;
                }
                answer_in_process(reply).await
            })
        }
    }

    /// Requests received so far at `hook`.
    pub fn calls(&self, hook: &str) -> Vec<Value> {
        self.state
            .calls
            .lock()
            .map(|c| {
                c.iter()
                    .filter(|(h, _, _)| h == hook)
                    .map(|(_, b, _)| b.clone())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Every request received at `hook` in order of arrival, those failed before the handler by
    /// [`HOOK_FAULT_ENV`] included (which [`HookServer::calls`] leaves out).
    pub fn requests(&self, hook: &str) -> Vec<Value> {
        let (Ok(calls), Ok(faulted)) = (self.state.calls.lock(), self.state.faulted.lock()) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        let mut faults = faulted.iter().peekable();
        for (i, (h, body, _)) in calls.iter().enumerate() {
            while let Some((fh, fb, _)) = faults.next_if(|(_, _, at)| *at <= i) {
                if fh == hook {
                    out.push(fb.clone());
                }
            }
            if h == hook {
                out.push(body.clone());
            }
        }
        out.extend(
            faults
                .filter(|(h, _, _)| h == hook)
                .map(|(_, b, _)| b.clone()),
        );
        out
    }

    /// Records with every later request `stamp(body)`, computed as it arrives (for instance the
    /// syncs its controller had finished then: see [`HookServer::stamped_since`]).
    pub fn stamp_calls(&self, stamp: impl Fn(&Value) -> Option<u64> + Send + Sync + 'static) {
        if let Ok(mut s) = self.state.stamp.lock() {
            *s = Some(Arc::new(stamp));
        }
    }

    /// Requests recorded so far, at every hook path.
    pub fn recorded(&self) -> usize {
        self.state.calls.lock().map(|c| c.len()).unwrap_or_default()
    }

    /// The body and stamp of every request recorded after the first `from`.
    pub fn stamped_since(&self, from: usize) -> Vec<(Value, Option<u64>)> {
        self.state
            .calls
            .lock()
            .map(|c| {
                c.iter()
                    .skip(from)
                    .map(|(_, b, s)| (b.clone(), *s))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The value of request header `name` of every request received at `hook`.
    pub fn header(&self, hook: &str, name: &str) -> Vec<Option<String>> {
        self.state
            .headers
            .lock()
            .map(|c| {
                c.iter()
                    .filter(|(h, _)| h == hook)
                    .map(|(_, m)| m.get(name).and_then(|v| v.to_str().ok()).map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The `Authorization` header of every request received at `hook`.
    pub fn authorizations(&self, hook: &str) -> Vec<Option<String>> {
        self.header(hook, "authorization")
    }

    /// Number of requests received at `hook` (counted also while not recording).
    pub fn count(&self, hook: &str) -> usize {
        self.state
            .counts
            .lock()
            .map(|c| c.get(hook).copied().unwrap_or(0))
            .unwrap_or_default()
    }

    /// Stops (`false`) or resumes keeping request bodies and headers; requests are still
    /// counted. For benchmarks: over thousands of syncs the recorded bodies, not the
    /// controller, are most of the process's memory.
    pub fn set_recording(&self, on: bool) {
        self.state.recording.store(on, Ordering::SeqCst);
    }
}

impl Drop for HookServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve(
    State(state): State<Arc<HookState>>,
    Path(hook): Path<String>,
    headers: axum::http::HeaderMap,
    body: Bytes,
) -> Response {
    let faulted = state.faulted();
    let recording = state.recording.load(Ordering::SeqCst);
    if let Ok(mut h) = state.headers.lock()
        && recording
        && !faulted
    {
        h.push((hook.clone(), headers));
    }
    let body: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => {
            return (StatusCode::BAD_REQUEST, format!("bad request body: {e}")).into_response();
        }
    };
    if faulted {
        state.record_fault(&hook, &body);
        return (StatusCode::INTERNAL_SERVER_ERROR, "injected hook fault").into_response();
    }
    if let Ok(mut n) = state.counts.lock() {
        *n.entry(hook.clone()).or_default() += 1;
    }
    state.record(&hook, &body);
    let mut reply = (state.handler)(&hook, &body);
    let grant = state.before_related.lock().ok().and_then(|g| g.clone());
    if let (Some(grant), Reply::Json(answer)) = (grant, &reply) {
        let related = rbac::related_in(answer);
        if !related.is_empty() {
            grant(related).await;
        }
    }
    let mut extra = Vec::new();
    let mut response = loop {
        match reply {
            Reply::Json(v) => break axum::Json(v).into_response(),
            Reply::Raw(code, text) => {
                let code = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
                break (code, text).into_response();
            }
            Reply::Delay(d, next) => {
                tokio::time::sleep(d).await;
                reply = *next;
            }
            Reply::Headers(h, next) => {
                extra.extend(h);
                reply = *next;
            }
        }
    };
    for (k, v) in extra {
        if let (Ok(k), Ok(v)) = (
            axum::http::HeaderName::try_from(k),
            axum::http::HeaderValue::try_from(v),
        ) {
            response.headers_mut().insert(k, v);
        }
    }
    response
}

/// What an in-process hook answers for `reply` (see [`HookServer::responder`]).
async fn answer_in_process(mut reply: Reply) -> Result<Value, String> {
    loop {
        match reply {
            Reply::Json(v) => return Ok(v),
            Reply::Raw(200, text) => {
                return serde_json::from_str(&text).map_err(|e| format!("not JSON: {e}"));
            }
            Reply::Raw(code, text) => return Err(format!("http status {code}: {text}")),
            Reply::Delay(d, next) => {
                tokio::time::sleep(d).await;
                reply = *next;
            }
            Reply::Headers(_, next) => reply = *next,
        }
    }
}

/// A CompositeController named `name` for scenario `env`.
pub fn composite_controller(env: &Env, name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "metacontroller.k8s.io/v1alpha1",
        "kind": "CompositeController",
        "metadata": {"name": name, "labels": env.cc_labels()},
        "spec": spec,
    })
}

/// Installs kmeta's own CRDs (CompositeController, DecoratorController, ControllerRevision) when
/// they are not served yet.
pub async fn install_kmeta_crds(env: &mut Env) -> anyhow::Result<()> {
    let api = env.api(
        "apiextensions.k8s.io/v1",
        "CustomResourceDefinition",
        "customresourcedefinitions",
        None,
    );
    for crd in kmeta::api::crds::all()? {
        let crd = serde_json::to_value(crd)?;
        let name = crd
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        if api.get_opt(&name).await?.is_some() {
            continue;
        }
        // kmeta's CRDs stay installed (on a real cluster other scenarios use them)
        api.create(&PostParams::default(), &obj(crd)?).await?;
        eventually(&format!("CRD {name} Established"), TIMEOUT, || async {
            let crd = serde_json::to_value(api.get(&name).await?)?;
            Ok(crd
                .pointer("/status/conditions")
                .and_then(Value::as_array)
                .is_some_and(|c| {
                    c.iter()
                        .any(|c| c.get("type") == Some(&json!("Established")))
                })
                .then_some(()))
        })
        .await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_failed_request_is_a_request_but_not_a_call() -> anyhow::Result<()> {
        let hooks = HookServer::start(|_, req| Reply::Json(req.clone())).await?;
        let client = reqwest::Client::new();
        let post = |n: u32| client.post(hooks.url("sync")).json(&json!({"n": n})).send();
        hooks.fail_requests(1.0);
        assert_eq!(post(1).await?.status(), 500);
        hooks.fail_requests(0.0);
        assert_eq!(post(2).await?.status(), 200);
        hooks.fail_requests(1.0);
        assert_eq!(post(3).await?.status(), 500);
        let n = |bodies: Vec<Value>| bodies.iter().map(|b| b["n"].clone()).collect::<Vec<_>>();
        assert_eq!(n(hooks.calls("sync")), [json!(2)]);
        assert_eq!(n(hooks.requests("sync")), [json!(1), json!(2), json!(3)]);
        assert_eq!((hooks.count("sync"), hooks.faults()), (1, 2));
        Ok(())
    }
}
