//! `kmeta run`: the in-cluster controller process — client, endpoints, optional leader
//! election, the manager, and a bounded graceful stop.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::cli::args::{LeaderFlags, RunConfig, ShardFlags, ShardWatch};
use kmeta::coord::fence::Fence;
use kmeta::coord::leader::LeaderConfig;
use kmeta::coord::shard::{Bucket, ShardConfig, Shards};
use kmeta::ops::client;
use kmeta::ops::health::{self, HealthError, Probes};
use kmeta::ops::metrics::Metrics;
use kmeta::ops::ratelimit::RateLimit;
use kmeta::reconcile::{ManagerConfig, Wiring};

/// Where the pod's namespace is mounted in a cluster.
const SERVICE_ACCOUNT_NAMESPACE: &str = "/var/run/secrets/kubernetes.io/serviceaccount/namespace";

/// Errors that end `kmeta run`.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// No usable cluster configuration.
    #[error("loading cluster configuration: {0}")]
    Config(String),
    /// The client could not be built.
    #[error("building the API client: {0}")]
    Client(String),
    /// An endpoint could not start.
    #[error(transparent)]
    Endpoint(#[from] HealthError),
    /// The manager failed.
    #[error("manager: {0}")]
    Manager(#[from] kube::Error),
    /// Leader election failed (for example the lease was lost).
    #[error("leader election: {0}")]
    Leader(String),
}

/// Loads the cluster configuration: `--kubeconfig` if given, else the in-cluster service
/// account, else `$KUBECONFIG` / `~/.kube/config` (Metacontroller's order).
pub async fn kube_config(path: Option<&Path>) -> Result<kube::Config, RunError> {
    use kube::config::{KubeConfigOptions, Kubeconfig};
    if let Some(path) = path {
        let text = std::fs::read_to_string(path)
            .map_err(|e| RunError::Config(format!("reading kubeconfig {}: {e}", path.display())))?;
        let kc = Kubeconfig::from_yaml(&text)
            .map_err(|e| RunError::Config(format!("kubeconfig {}: {e}", path.display())))?;
        return kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
            .await
            .map_err(|e| RunError::Config(format!("{}: {e}", path.display())));
    }
    match kube::Config::incluster() {
        Ok(c) => Ok(c),
        Err(_) => kube::Config::infer()
            .await
            .map_err(|e| RunError::Config(e.to_string())),
    }
}

/// The API clients of `kmeta run` besides the Lease loops', each with a token bucket of its own.
struct Clients {
    /// The watches and the writes of children, parents and statuses.
    work: kube::Client,
    /// Reports (Events, conditions): the same fences, a token bucket of their own, as
    /// Metacontroller's event broadcaster has its own clientset.
    reports: kube::Client,
    /// Discovery, as Metacontroller's discovery client: a refresh every --discovery-interval
    /// does not spend the tokens of writes.
    discovery: kube::Client,
}

impl Clients {
    fn build(
        config: &RunConfig,
        kube_config: &kube::Config,
        metrics: &Arc<Metrics>,
        fence: &Fence,
        shards: Option<&Arc<Shards>>,
    ) -> Result<Self, RunError> {
        let discovery = client::build(kube_config.clone(), limits(config), metrics.clone())
            .map_err(|e| RunError::Client(e.to_string()))?;
        Ok(Self {
            work: work_client(config, kube_config, metrics, fence, shards)?,
            reports: work_client(config, kube_config, metrics, fence, shards)?,
            discovery,
        })
    }
}

/// `--client-go-qps` and `--client-go-burst`.
fn limits(config: &RunConfig) -> RateLimit {
    RateLimit {
        qps: config.qps,
        burst: config.burst,
    }
}

/// The manager's settings from `config`, and its wiring (metrics, probes, clients, shards): the
/// one place `kmeta run` builds its [`ManagerConfig`] and [`Wiring`].
fn manager_config(
    config: &RunConfig,
    metrics: &Arc<Metrics>,
    probes: &Probes,
    clients: &Clients,
    shards: Option<&Arc<Shards>>,
) -> Manager {
    let mut wiring = Wiring::default()
        .metrics(metrics.clone())
        .ready(probes.synced.clone())
        .pending_watches(probes.pending_watches.clone())
        .discovery_client(clients.discovery.clone())
        .reports_client(clients.reports.clone());
    wiring.work_scope = shards.cloned().map(|s| s as _);
    let settings = ManagerConfig::default()
        .workers(config.workers)
        .discovery_interval(config.discovery_interval)
        .cache_flush_interval(config.cache_flush_interval)
        .watch_list(config.watch_list)
        .min_resync_after(config.min_resync_after)
        .target_label_selector(config.target_label_selector.clone())
        .events_qps(config.events_qps)
        .events_burst(config.events_burst)
        .apply_strategy(config.apply_strategy)
        .ssa_field_manager(config.ssa_field_manager.clone())
        .default_service_account(config.default_service_account.clone())
        .reporting_instance(std::env::var("POD_NAME").ok())
        .hook(kmeta::hook::HookOptions {
            jsonnet: kmeta::hook::jsonnet::this_binary(),
            ..kmeta::hook::HookOptions::default()
        });
    (settings, wiring)
}

/// A manager's settings and wiring.
type Manager = (ManagerConfig, Wiring);

/// Runs the manager until `stop`, then gives in-flight syncs `bound` to finish.
pub async fn run_manager(
    client: kube::Client,
    (config, wiring): Manager,
    stop: CancellationToken,
    bound: Duration,
) -> Result<(), kube::Error> {
    let work = kmeta::reconcile::manager::run_wired(client, config, wiring, stop.clone());
    tokio::pin!(work);
    tokio::select! {
        r = &mut work => return r,
        _ = stop.cancelled() => {}
    }
    tracing::info!(bound = ?bound, "stopping: waiting for in-flight syncs");
    match tokio::time::timeout(bound, work).await {
        Ok(r) => r,
        Err(_) => {
            tracing::warn!(bound = ?bound, "in-flight syncs did not finish in time; exiting");
            Ok(())
        }
    }
}

/// Logs the flags that were accepted for compatibility but have no effect.
fn warn_ignored(config: &RunConfig) {
    for (flag, value) in &config.ignored {
        tracing::warn!(flag = %format!("--{flag}"), value = %value, "flag accepted for Metacontroller compatibility; it has no effect in kmeta");
    }
}

/// The lease namespace: the flag, else the pod's namespace.
fn lease_namespace(flag: &str) -> Result<String, RunError> {
    if !flag.is_empty() {
        return Ok(flag.to_owned());
    }
    std::fs::read_to_string(SERVICE_ACCOUNT_NAMESPACE)
        .map(|s| s.trim().to_owned())
        .ok()
        .filter(|s| !s.is_empty())
        .ok_or_else(|| {
            RunError::Leader(
                "--leader-election-namespace is required when running outside a cluster".into(),
            )
        })
}

/// Starts the metrics and health endpoints the config enables; they stop when the returned
/// guard is dropped. Readiness fails as soon as `shutdown` is cancelled.
async fn start_endpoints(
    config: &RunConfig,
    metrics: &Arc<Metrics>,
    probes: &Probes,
    shutdown: &CancellationToken,
) -> Result<tokio_util::sync::DropGuard, RunError> {
    let endpoints = CancellationToken::new();
    if let Some(addr) = config.metrics_address {
        let bound = health::serve_metrics(addr, metrics.clone(), endpoints.clone()).await?;
        tracing::info!(address = %bound, "serving /metrics");
    }
    if let Some(addr) = config.health_address {
        let bound = health::serve_health(addr, probes.clone(), endpoints.clone()).await?;
        tracing::info!(address = %bound, "serving /healthz and /readyz");
    }
    let stopping = probes.stopping.clone();
    let shutdown = shutdown.clone();
    tokio::spawn(async move {
        shutdown.cancelled().await;
        stopping.store(true, Ordering::SeqCst);
    });
    Ok(endpoints.drop_guard())
}

/// Where the manager's error waits while a Lease runner ([`kmeta::coord::leader::run_elected`],
/// [`kmeta::coord::shard::run_sharded`]) finishes its own shutdown.
type ManagerFailure = Arc<std::sync::Mutex<Option<kube::Error>>>;

/// [`run_manager`] as the work of a Lease runner: its error kept in `slot`.
async fn run_manager_into(
    slot: ManagerFailure,
    client: kube::Client,
    manager: Manager,
    token: CancellationToken,
    bound: Duration,
) {
    if let Err(e) = run_manager(client, manager, token, bound).await
        && let Ok(mut slot) = slot.lock()
    {
        *slot = Some(e);
    }
}

/// The manager's error kept by [`run_manager_into`], if any.
fn manager_result(failed: &ManagerFailure) -> Result<(), RunError> {
    match failed.lock().ok().and_then(|mut f| f.take()) {
        Some(e) => Err(RunError::Manager(e)),
        None => Ok(()),
    }
}

/// Runs the manager only while holding the Lease; a manager error is returned after the Lease
/// was released, a lost Lease as [`RunError::Leader`].
async fn run_elected_manager(
    lease: (kube::Config, RateLimit, Arc<Metrics>),
    leader: LeaderConfig,
    client: kube::Client,
    manager: Manager,
    shutdown: CancellationToken,
    bound: Duration,
) -> Result<(), RunError> {
    let failed = ManagerFailure::default();
    let slot = failed.clone();
    let (config, limits, metrics) = lease;
    kmeta::coord::leader::run_elected_apart(
        config,
        limits,
        metrics,
        leader,
        shutdown,
        move |token| run_manager_into(slot, client, manager, token, bound),
    )
    .await
    .map_err(|e| RunError::Leader(e.to_string()))?;
    manager_result(&failed)
}

/// Runs the manager on a sharded replica: the bucket Lease loop beside it, every held bucket
/// handed over at shutdown before the manager stops.
async fn run_sharded_manager(
    lease_config: kube::Config,
    cfg: ShardConfig,
    client: kube::Client,
    manager: Manager,
    shutdown: CancellationToken,
    bound: Duration,
) -> Result<(), RunError> {
    let failed = ManagerFailure::default();
    let slot = failed.clone();
    kmeta::coord::shard::run_sharded(lease_config, cfg, shutdown, move |token| {
        run_manager_into(slot, client, manager, token, bound)
    })
    .await
    .map_err(|e| RunError::Leader(e.to_string()))?;
    manager_result(&failed)
}

/// The settings of the bucket Lease loop from the flags.
fn shard_config(
    flags: &ShardFlags,
    namespace: String,
    identity: String,
    shards: Arc<Shards>,
    metrics: Arc<Metrics>,
) -> ShardConfig {
    ShardConfig {
        prefix: flags.prefix.clone(),
        lease_duration: flags.lease_duration,
        renew_deadline: flags.renew_deadline,
        retry_period: flags.retry_period,
        drain_timeout: flags.drain_timeout,
        leader_lease: flags.leader_lease.clone(),
        metrics: Some(metrics),
        ..ShardConfig::new(namespace, identity, shards)
    }
}

/// The identity this instance names in the User-Agent of its requests: under leader election
/// the one it holds the Lease as (`POD_NAME`, else `<hostname>_<random hex>`), else `POD_NAME`
/// when set.
fn instance_identity(elected: bool) -> Option<String> {
    if elected {
        return Some(kmeta::coord::leader::default_identity());
    }
    std::env::var("POD_NAME")
        .ok()
        .map(|p| p.trim().to_owned())
        .filter(|p| !p.is_empty())
}

/// The client the work writes with: under leader election every write passes the fence the
/// election opens and closes, so a leader that lost its Lease sends nothing; under sharding
/// every write passes the fence of its bucket.
fn work_client(
    config: &RunConfig,
    kube_config: &kube::Config,
    metrics: &Arc<Metrics>,
    fence: &Fence,
    shards: Option<&Arc<Shards>>,
) -> Result<kube::Client, RunError> {
    let limits = limits(config);
    let (kc, m) = (kube_config.clone(), metrics.clone());
    match (&config.leader, shards) {
        (Some(_), _) => kmeta::coord::client::build_fenced(kc, limits, m, fence.clone()),
        (None, Some(shards)) => kmeta::coord::client::build_sharded(kc, limits, m, shards.clone()),
        (None, None) => client::build(kc, limits, m),
    }
    .map_err(|e| RunError::Client(e.to_string()))
}

/// What a sharded replica holds: none yet; parents placed by `--shard-key`; with
/// `--shard-watch=server`, by the server's ranges, with sharded watches.
fn shards_of(f: &ShardFlags) -> Arc<Shards> {
    Shards::replica(
        f.buckets,
        f.key,
        f.watch == ShardWatch::Server,
        f.retry_period,
    )
}

/// The Lease election of `--leader-election` from the flags: this instance's `identity` if it
/// has one, the probe's `leading` flag, the write `fence`.
fn leader_config(
    flags: &LeaderFlags,
    namespace: String,
    identity: Option<String>,
    probes: &Probes,
    metrics: &Arc<Metrics>,
    fence: Fence,
) -> LeaderConfig {
    let leader = LeaderConfig {
        namespace,
        name: flags.name.clone(),
        lease_duration: flags.lease_duration,
        renew_deadline: flags.renew_deadline,
        retry_period: flags.retry_period,
        leading: probes.leading.clone(),
        metrics: Some(metrics.clone()),
        fence,
        ..LeaderConfig::default()
    };
    match identity {
        Some(identity) => LeaderConfig { identity, ..leader },
        None => leader,
    }
}

/// `kmeta run` until `shutdown` is cancelled (by SIGTERM/SIGINT in the binary).
pub async fn run(config: RunConfig, shutdown: CancellationToken) -> Result<(), RunError> {
    warn_ignored(&config);
    let lease_namespace = match (&config.leader, &config.sharding) {
        (Some(flags), _) => Some(lease_namespace(&flags.namespace)?),
        (_, Some(flags)) => Some(lease_namespace(&flags.namespace)?),
        _ => None,
    };
    let metrics = Arc::new(Metrics::default());
    // every request names this instance (its leader-election identity) in its User-Agent
    let identity = instance_identity(lease_namespace.is_some());
    let shards = config.sharding.as_ref().map(shards_of);
    let kube_config = kube_config(config.kubeconfig.as_deref()).await?;
    let kube_config = match &identity {
        Some(id) => kmeta::ops::client::with_identity(kube_config, id),
        None => kube_config,
    };
    let fence = Fence::new();
    let clients = Clients::build(&config, &kube_config, &metrics, &fence, shards.as_ref())?;
    let probes = Probes {
        elected: config.leader.is_some(),
        placement: shards.clone().map(|s| s as _),
        ..Probes::default()
    };
    metrics.count_pending(probes.pending_watches.clone());
    let _endpoints = start_endpoints(&config, &metrics, &probes, &shutdown).await?;
    let manager = manager_config(&config, &metrics, &probes, &clients, shards.as_ref());
    tracing::info!(
        version = env!("CARGO_PKG_VERSION"),
        workers = config.workers,
        leader_election = config.leader.is_some(),
        sharding = config.sharding.is_some(),
        "kmeta starting"
    );
    let bound = config.shutdown_timeout;
    if config.serve_kro {
        spawn_serve_kro(&config, &probes, shards.as_ref(), &clients.work, &shutdown);
    }
    match (lease_namespace, &config.sharding, shards, &config.leader) {
        (Some(namespace), Some(flags), Some(shards), _) => {
            let identity = identity.unwrap_or_else(kmeta::coord::leader::default_identity);
            let cfg = shard_config(flags, namespace, identity, shards, metrics.clone());
            // the Lease loop runs on a thread of its own with its own client and no
            // client-side limit: its traffic is bounded by design (a LIST, a GET and one write
            // per held bucket per retry period: 37 requests every 2 s for a lone replica of 32
            // buckets), and at --client-go-qps 5 renewals would queue past their deadline and
            // the buckets be lost (found by the scenario)
            run_sharded_manager(kube_config, cfg, clients.work, manager, shutdown, bound).await
        }
        (Some(namespace), _, _, Some(flags)) => {
            let leader = leader_config(flags, namespace, identity, &probes, &metrics, fence);
            // The election has its own thread and client (own token bucket), so a busy
            // controller cannot starve lease renewals.
            let lease = (kube_config, limits(&config), metrics);
            run_elected_manager(lease, leader, clients.work, manager, shutdown, bound).await
        }
        _ => run_manager(clients.work, manager, shutdown, bound)
            .await
            .map_err(RunError::from),
    }
}

/// `--serve-kro`: serves ResourceGraphDefinitions through `client` while [`serve_kro_gate`]
/// says so, until `shutdown`.
fn spawn_serve_kro(
    config: &RunConfig,
    probes: &Probes,
    shards: Option<&Arc<Shards>>,
    client: &kube::Client,
    shutdown: &CancellationToken,
) {
    let (holds, every) = serve_kro_gate(config, probes, shards);
    let options =
        kmeta::kro::ServeOptions::default().allow_crd_deletion(config.kro_allow_crd_deletion);
    let serving = kmeta::kro::serve_while(client.clone(), options, holds, every, shutdown.clone());
    tokio::spawn(serving);
}

/// `--serve-kro`: when this process serves ResourceGraphDefinitions, and how often that is
/// checked. Under `--leader-election` while it leads, under `--sharding` while it holds the
/// cluster bucket (the RGDs, their CRDs and CompositeControllers are cluster-scoped, so their
/// writes need that bucket), else always; the CompositeControllers made are run by the manager
/// like any other, under the same election or sharding.
fn serve_kro_gate(
    config: &RunConfig,
    probes: &Probes,
    shards: Option<&Arc<Shards>>,
) -> (Box<dyn Fn() -> bool + Send>, Duration) {
    if let (Some(shards), Some(flags)) = (shards, &config.sharding) {
        let shards = shards.clone();
        let holds = move || shards.held().contains(&Bucket::Cluster);
        return (Box::new(holds), flags.retry_period);
    }
    if let Some(flags) = &config.leader {
        let leading = probes.leading.clone();
        return (
            Box::new(move || leading.load(Ordering::Acquire)),
            flags.retry_period,
        );
    }
    (Box::new(|| true), Duration::from_secs(2))
}
