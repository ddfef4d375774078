//! The manager's settings ([`ManagerConfig`], each with its documented default) and what it
//! shares with the process around it ([`Wiring`]).

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use crate::coord::scope::WorkScope;
use crate::hook::HookOptions;
use crate::ops::metrics::Metrics;
use crate::runtime::cache::{PendingWatches, WatchListMode};

/// How long a sync waits for its watches' first list before it is retried instead, by default: 30 s
/// (kmeta's; the parent watch had the same bound before every watch was waited for).
pub const WATCH_SYNC_DEADLINE: Duration = Duration::from_secs(30);

/// The default shortest resync a hook can ask for: none (zero), as Metacontroller — a floor
/// would delay a resync a hook written for it asked for; `--min-resync-after` opts in.
pub const MIN_RESYNC_AFTER: Duration = Duration::ZERO;

/// Default of [`ManagerConfig::child_writes_in_flight`]: 40, the per-sync bound
/// (`CHILD_WRITES_IN_FLIGHT` of the children step, 8) times the default 5 workers.
pub const CHILD_WRITES_IN_FLIGHT_TOTAL: usize = 40;

/// Settings of the manager and every controller it runs: `ManagerConfig::default()` with the
/// setters of the fields to change (as kube-runtime's `controller::Config`), each default named
/// with its origin. What the manager shares with the process around it (the metrics registry,
/// readiness, extra clients, the work scope) is its [`Wiring`], not a setting.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ManagerConfig {
    /// Concurrent syncs per CompositeController or DecoratorController. Default 5 (Metacontroller `--workers`).
    pub workers: usize,
    /// Child writes in flight at once across every sync of the manager. Default
    /// [`CHILD_WRITES_IN_FLIGHT_TOTAL`] (40, kmeta's: 8 per sync × the default 5 workers). Each
    /// write in flight holds a connection to the API server with its buffers: without a bound,
    /// 50 workers held ~475 connections and 20 MiB more than 5 workers at 1000 × 10 children
    /// (`cargo bench -p kmeta-tests --bench scale`), for no faster converge on 2 cores.
    pub child_writes_in_flight: usize,
    /// Discovery refresh period. Default 30 s (Metacontroller `--discovery-interval`).
    pub discovery_interval: Duration,
    /// Every cached parent (and DecoratorController target) is resynced this often, its watch
    /// kept open (None: never). Default 30 min (Metacontroller `--cache-flush-interval`: its
    /// shared informers' resync period; docs/design/own-informers-and-queue.md).
    pub cache_flush_interval: Option<Duration>,
    /// How a watch gets its initial state. Default [`WatchListMode::Auto`]: a watch-list
    /// (`sendInitialEvents`) where the API server offers it, else a list then a watch
    /// (`kmeta run --watch-list`; docs/design/initial-list.md).
    pub watch_list: WatchListMode,
    /// Hook transport settings (16 MiB response cap by default).
    pub hook: HookOptions,
    /// Customize response cache lifetime. Default 20 min (Metacontroller's customize cache TTL).
    pub customize_cache_ttl: Duration,
    /// Event reporter name. Default `metacontroller` (Metacontroller's component name, so event
    /// filters carry over).
    pub reporter: String,
    /// The Events' `reportingInstance` (which replica reported). Default none; `kmeta run` sets
    /// it from `$POD_NAME` (set by the Downward API in `deploy/`).
    pub reporting_instance: Option<String>,
    /// How long a sync waits for its watches' first list before it is retried with backoff
    /// instead. Default [`WATCH_SYNC_DEADLINE`] (30 s).
    pub watch_sync_deadline: Duration,
    /// The shortest resync a hook's `resyncAfterSeconds` can ask for, so a tiny value cannot
    /// turn one parent into a hook-call loop. Default [`MIN_RESYNC_AFTER`] (zero: none, as
    /// Metacontroller; `--min-resync-after` opts in).
    pub min_resync_after: Duration,
    /// How long a sync waits for the watch to show a child write (create, update, delete) an
    /// earlier sync of the same parent made (see `docs/design/created-children.md`); after that
    /// the write is reported (`ChildNotObserved`) and the sync goes on without it. Default
    /// [`CREATE_EXPECTATION_TTL`](crate::reconcile::CREATE_EXPECTATION_TTL) (5 min, Kubernetes'
    /// `ExpectationsTimeout`).
    pub created_children_wait: Duration,
    /// Only CompositeControllers and DecoratorControllers whose labels match this selector are
    /// run (Metacontroller `--target-label-selector`). Default: none, every one.
    pub target_label_selector: Option<String>,
    /// Events per second for one (object, reason) once its burst is spent. Default 1/300 (one
    /// per 5 minutes: Metacontroller `--events-qps`, client-go's event spam filter).
    pub events_qps: f64,
    /// Events one (object, reason) may emit before `events_qps` applies. Default 25
    /// (Metacontroller `--events-burst`).
    pub events_burst: u32,
    /// How children are written, unless a controller's `kmeta.dev/apply-strategy` annotation
    /// says otherwise. Default dynamic apply (Metacontroller `--apply-strategy`).
    pub apply_strategy: crate::reconcile::apply::ApplyStrategy,
    /// Prefix of the per-parent field managers of child writes. Default `metacontroller`
    /// (Metacontroller `--apply-strategy-ssa-field-manager`).
    pub ssa_field_manager: String,
    /// The ServiceAccount (name) every controller that names none in `spec.serviceAccountName`
    /// has its child writes and related reads made as, in the parent's namespace (or the
    /// controller's `spec.serviceAccountNamespace`): impersonation made mandatory, as Flux's
    /// `--default-service-account`. Default none: such controllers write as kmeta's own
    /// identity, as Metacontroller (`docs/design/per-controller-service-account.md`).
    pub default_service_account: Option<String>,
}

impl Default for ManagerConfig {
    fn default() -> Self {
        ManagerConfig {
            workers: 5,
            child_writes_in_flight: CHILD_WRITES_IN_FLIGHT_TOTAL,
            discovery_interval: Duration::from_secs(30),
            cache_flush_interval: Some(Duration::from_secs(30 * 60)),
            watch_list: WatchListMode::Auto,
            hook: HookOptions::default(),
            customize_cache_ttl: Duration::from_secs(20 * 60),
            reporter: "metacontroller".into(),
            reporting_instance: None,
            watch_sync_deadline: WATCH_SYNC_DEADLINE,
            min_resync_after: MIN_RESYNC_AFTER,
            created_children_wait: crate::reconcile::expectations::CREATE_EXPECTATION_TTL,
            target_label_selector: None,
            events_qps: 1.0 / 300.0,
            events_burst: 25,
            apply_strategy: crate::reconcile::apply::ApplyStrategy::default(),
            ssa_field_manager: "metacontroller".into(),
            default_service_account: None,
        }
    }
}

impl ManagerConfig {
    /// Sets [`ManagerConfig::workers`].
    #[must_use]
    pub fn workers(mut self, workers: usize) -> Self {
        self.workers = workers;
        self
    }

    /// Sets [`ManagerConfig::child_writes_in_flight`].
    #[must_use]
    pub fn child_writes_in_flight(mut self, child_writes_in_flight: usize) -> Self {
        self.child_writes_in_flight = child_writes_in_flight;
        self
    }

    /// Sets [`ManagerConfig::discovery_interval`].
    #[must_use]
    pub fn discovery_interval(mut self, discovery_interval: Duration) -> Self {
        self.discovery_interval = discovery_interval;
        self
    }

    /// Sets [`ManagerConfig::cache_flush_interval`].
    #[must_use]
    pub fn cache_flush_interval(mut self, cache_flush_interval: Option<Duration>) -> Self {
        self.cache_flush_interval = cache_flush_interval;
        self
    }

    /// Sets [`ManagerConfig::watch_list`].
    #[must_use]
    pub fn watch_list(mut self, watch_list: WatchListMode) -> Self {
        self.watch_list = watch_list;
        self
    }

    /// Sets [`ManagerConfig::hook`].
    #[must_use]
    pub fn hook(mut self, hook: HookOptions) -> Self {
        self.hook = hook;
        self
    }

    /// Sets [`ManagerConfig::customize_cache_ttl`].
    #[must_use]
    pub fn customize_cache_ttl(mut self, customize_cache_ttl: Duration) -> Self {
        self.customize_cache_ttl = customize_cache_ttl;
        self
    }

    /// Sets [`ManagerConfig::reporter`].
    #[must_use]
    pub fn reporter(mut self, reporter: String) -> Self {
        self.reporter = reporter;
        self
    }

    /// Sets [`ManagerConfig::reporting_instance`].
    #[must_use]
    pub fn reporting_instance(mut self, reporting_instance: Option<String>) -> Self {
        self.reporting_instance = reporting_instance;
        self
    }

    /// Sets [`ManagerConfig::watch_sync_deadline`].
    #[must_use]
    pub fn watch_sync_deadline(mut self, watch_sync_deadline: Duration) -> Self {
        self.watch_sync_deadline = watch_sync_deadline;
        self
    }

    /// Sets [`ManagerConfig::min_resync_after`].
    #[must_use]
    pub fn min_resync_after(mut self, min_resync_after: Duration) -> Self {
        self.min_resync_after = min_resync_after;
        self
    }

    /// Sets [`ManagerConfig::created_children_wait`].
    #[must_use]
    pub fn created_children_wait(mut self, created_children_wait: Duration) -> Self {
        self.created_children_wait = created_children_wait;
        self
    }

    /// Sets [`ManagerConfig::target_label_selector`].
    #[must_use]
    pub fn target_label_selector(mut self, target_label_selector: Option<String>) -> Self {
        self.target_label_selector = target_label_selector;
        self
    }

    /// Sets [`ManagerConfig::events_qps`].
    #[must_use]
    pub fn events_qps(mut self, events_qps: f64) -> Self {
        self.events_qps = events_qps;
        self
    }

    /// Sets [`ManagerConfig::events_burst`].
    #[must_use]
    pub fn events_burst(mut self, events_burst: u32) -> Self {
        self.events_burst = events_burst;
        self
    }

    /// Sets [`ManagerConfig::apply_strategy`].
    #[must_use]
    pub fn apply_strategy(
        mut self,
        apply_strategy: crate::reconcile::apply::ApplyStrategy,
    ) -> Self {
        self.apply_strategy = apply_strategy;
        self
    }

    /// Sets [`ManagerConfig::ssa_field_manager`].
    #[must_use]
    pub fn ssa_field_manager(mut self, ssa_field_manager: String) -> Self {
        self.ssa_field_manager = ssa_field_manager;
        self
    }

    /// Sets [`ManagerConfig::default_service_account`].
    #[must_use]
    pub fn default_service_account(mut self, default_service_account: Option<String>) -> Self {
        self.default_service_account = default_service_account;
        self
    }
}

/// What a manager shares with the process around it: where its metrics go, the readiness it
/// reports, the watches `/readyz` names, the clients of their own some requests get, and which
/// parents are this process's work. `Wiring::default()` (each part fresh, kmeta's own client for
/// every request, every parent this process's work) is what a library user needs; `kmeta run`
/// wires in its endpoints, its clients and, when replicas split the fleet, its share of it.
#[derive(Clone, Default)]
#[non_exhaustive]
pub struct Wiring {
    /// Prometheus registry shared with the `/metrics` endpoint. Default: a fresh registry.
    pub metrics: Arc<Metrics>,
    /// Set once every running controller's watches have synced (the `/readyz` signal).
    /// Default: a fresh flag, false.
    pub ready: Arc<AtomicBool>,
    /// The watches that have not finished their first list (what `/readyz` names while not
    /// ready). Default: a fresh, empty set.
    pub pending_watches: Arc<PendingWatches>,
    /// The client discovery runs with. Default: none, the manager's client. `kmeta run` gives
    /// discovery a client of its own (its own token bucket, as Metacontroller's discovery
    /// client has), so periodic discovery does not spend the tokens of child and status writes.
    pub discovery_client: Option<kube::Client>,
    /// The client failures are reported with: Events, and the `Synced=False` (and `Paused`)
    /// conditions kmeta adds. Default: none, the manager's client. `kmeta run` gives reports a
    /// client of their own (its own token bucket at `--client-go-qps` and `--client-go-burst`,
    /// as Metacontroller's event broadcaster has its own clientset, `pkg/events/events.go`), so
    /// the reports of failing parents never spend the tokens a healthy parent's child and status
    /// writes wait for (Metacontroller writes no condition at all).
    pub reports_client: Option<kube::Client>,
    /// Which parents are this process's work, and the write scope each sync runs in. Default
    /// none: every parent is this process's work. `kmeta run` sets the share of the fleet this
    /// replica holds when the fleet is split between replicas ([`WorkScope`]).
    pub work_scope: Option<Arc<dyn WorkScope>>,
}

impl std::fmt::Debug for Wiring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let own = |c: &Option<kube::Client>| match c {
            Some(_) => "own client",
            None => "the manager's client",
        };
        f.debug_struct("Wiring")
            .field("discovery_client", &own(&self.discovery_client))
            .field("reports_client", &own(&self.reports_client))
            .field("work_scope", &self.work_scope)
            .finish_non_exhaustive()
    }
}

impl Wiring {
    /// Sets [`Wiring::metrics`].
    #[must_use]
    pub fn metrics(mut self, metrics: Arc<Metrics>) -> Self {
        self.metrics = metrics;
        self
    }

    /// Sets [`Wiring::ready`].
    #[must_use]
    pub fn ready(mut self, ready: Arc<AtomicBool>) -> Self {
        self.ready = ready;
        self
    }

    /// Sets [`Wiring::pending_watches`].
    #[must_use]
    pub fn pending_watches(mut self, pending_watches: Arc<PendingWatches>) -> Self {
        self.pending_watches = pending_watches;
        self
    }

    /// Sets [`Wiring::discovery_client`].
    #[must_use]
    pub fn discovery_client(mut self, client: kube::Client) -> Self {
        self.discovery_client = Some(client);
        self
    }

    /// Sets [`Wiring::reports_client`].
    #[must_use]
    pub fn reports_client(mut self, client: kube::Client) -> Self {
        self.reports_client = Some(client);
        self
    }

    /// Sets [`Wiring::work_scope`].
    #[must_use]
    pub fn work_scope(mut self, scope: Arc<dyn WorkScope>) -> Self {
        self.work_scope = Some(scope);
        self
    }
}
