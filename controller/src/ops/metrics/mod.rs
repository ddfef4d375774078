//! Prometheus metrics, served at `/metrics` on `--metrics-address`.
//!
//! Two groups:
//! - Metacontroller's hook series, same names and labels so dashboards carry over:
//!   `metacontroller_<hook>_requests_total{controller_name,controller_type,url,code,method}`,
//!   `metacontroller_<hook>_request_duration_histogram_seconds{controller_name,controller_type,url,method}`
//!   and `metacontroller_<hook>_in_flight_requests{controller_name,controller_type,url}` for
//!   `<hook>` in `sync`, `finalize`, `customize`.
//! - kmeta's own series: reconciles, work queue, child operations, children per controller and API
//!   requests.
//!
//! Every label is low-cardinality: controller names, hook urls, verbs, codes and outcomes, never
//! object names. A per-parent breakdown is kept internally only to sum children per controller.
//!
//! This module is the series registry; `exposition.rs` chooses and writes the `/metrics` format
//! (OpenMetrics 1.0.0 or Prometheus text 0.0.4), re-exported here.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::runtime::cache::PendingWatches;

mod exposition;
mod process;

pub(crate) use exposition::{Format, negotiate, text_004};

/// A hook kind: the `<hook>` of the `metacontroller_<hook>_*` series.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum HookKind {
    /// `sync`
    Sync,
    /// `finalize`
    Finalize,
    /// `customize`
    Customize,
}

impl HookKind {
    /// The name in the series' names (and in hook errors): `sync`, `finalize`, `customize`.
    pub fn as_str(self) -> &'static str {
        match self {
            HookKind::Sync => "sync",
            HookKind::Finalize => "finalize",
            HookKind::Customize => "customize",
        }
    }
}

/// A controller kind: the `controller_type` label of the hook series, as Metacontroller writes
/// it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum ControllerType {
    /// `CompositeController`
    Composite,
    /// `DecoratorController`
    Decorator,
}

impl ControllerType {
    /// The label value: `CompositeController` or `DecoratorController`.
    pub fn as_str(self) -> &'static str {
        match self {
            ControllerType::Composite => "CompositeController",
            ControllerType::Decorator => "DecoratorController",
        }
    }
}

/// The hook a request went to: the labels the three hook series share (with `code` and
/// `method`, which vary per request).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HookTarget<'a> {
    /// The kind of the controller whose hook it is.
    pub controller_type: ControllerType,
    /// The controller's name.
    pub controller: &'a str,
    /// Which of its hooks.
    pub hook: HookKind,
    /// The hook's url as shown (`in-process` for an in-process hook).
    pub url: &'a str,
}

/// How one parent sync ended: the `result` label of `kmeta_reconcile_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum ReconcileResult {
    /// `ok`: the sync finished.
    Ok,
    /// `error`: the sync failed and is retried with backoff.
    Error,
    /// `retry`: the sync waits (for the watch to show an earlier write, or a hook that answered
    /// 429) and runs again.
    Retry,
    /// `parked`: not run while the hook circuit is open.
    Parked,
}

impl ReconcileResult {
    /// The label value: `ok`, `error`, `retry` or `parked`.
    pub fn as_str(self) -> &'static str {
        match self {
            ReconcileResult::Ok => "ok",
            ReconcileResult::Error => "error",
            ReconcileResult::Retry => "retry",
            ReconcileResult::Parked => "parked",
        }
    }
}

/// A child operation: the `op` label of `kmeta_child_operations_total` (see the metrics table in
/// `docs/operating.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum ChildOpLabel {
    /// `create`
    Create,
    /// `update`
    Update,
    /// `delete`
    Delete,
    /// `adopt`
    Adopt,
    /// `release`
    Release,
    /// `skip`: an update the API server ignored before, not sent again.
    Skip,
    /// `error`: a child write that failed and was reported.
    Error,
    /// `contested`: under server-side apply, a child another parent holds, not written.
    Contested,
    /// `fields_taken`: under server-side apply with drift policy `Enforce`, an apply that took
    /// fields other managers held.
    FieldsTaken,
    /// `not_observed`: a child write the watch never showed.
    NotObserved,
}

impl ChildOpLabel {
    /// The label value, as listed on each variant.
    pub fn as_str(self) -> &'static str {
        match self {
            ChildOpLabel::Create => "create",
            ChildOpLabel::Update => "update",
            ChildOpLabel::Delete => "delete",
            ChildOpLabel::Adopt => "adopt",
            ChildOpLabel::Release => "release",
            ChildOpLabel::Skip => "skip",
            ChildOpLabel::Error => "error",
            ChildOpLabel::Contested => "contested",
            ChildOpLabel::FieldsTaken => "fields_taken",
            ChildOpLabel::NotObserved => "not_observed",
        }
    }
}

/// Prometheus' default histogram buckets (client_golang `DefBuckets`), which Metacontroller's hook
/// duration histograms use.
const DEFAULT_BUCKETS: [f64; 11] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HookLabels {
    controller_name: String,
    controller_type: String,
    url: String,
    code: String,
    method: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HookDurationLabels {
    controller_name: String,
    controller_type: String,
    url: String,
    method: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HookFlightLabels {
    controller_name: String,
    controller_type: String,
    url: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ControllerLabels {
    controller: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    controller: String,
    result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OpLabels {
    controller: String,
    op: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ApiLabels {
    verb: String,
    code: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OpenApiLabels {
    document: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LeaseLabels {
    name: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BucketLabels {
    bucket: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WatchLabels {
    /// `apiVersion/plural`.
    resource: String,
    /// `sharded` (only this replica's shard buckets, listed by the server) or `whole`.
    mode: &'static str,
}

impl WatchLabels {
    /// The labels of a watch of `resource`, sharded or whole.
    fn of(resource: &str, sharded: bool) -> Self {
        WatchLabels {
            resource: resource.into(),
            mode: if sharded { "sharded" } else { "whole" },
        }
    }
}

/// The series of `--sharding`.
struct ShardSeries {
    buckets: Family<BucketLabels, Gauge>,
    members: Gauge,
    handoffs: Family<HandoffLabels, Counter>,
    handoff_seconds: HistogramFamily<PreviousLabels>,
    renewal_seconds: Histogram,
    parents: Family<ControllerLabels, Gauge>,
    dropped: Family<ControllerLabels, Counter>,
}

impl Default for ShardSeries {
    fn default() -> Self {
        ShardSeries {
            buckets: Family::default(),
            members: Gauge::default(),
            handoffs: Family::default(),
            handoff_seconds: Family::new_with_constructor(handoff_histogram),
            renewal_seconds: renewal_histogram(),
            parents: Family::default(),
            dropped: Family::default(),
        }
    }
}

/// 50 ms … 102 s: a hand-over within a Lease loop round, up to an expiry after a long
/// `--shard-lease-duration` plus a large range's list.
fn handoff_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.05, 2.0, 12))
}

/// 5 ms … 20 s: a Lease write answered at once, up to one later than the default 10 s renew
/// deadline.
fn renewal_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.005, 2.0, 13))
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PreviousLabels {
    /// How the previous holder let the bucket go: `released` or `expired`.
    previous: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FenceLabels {
    /// `leader` or `shard`.
    fence: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HandoffLabels {
    reason: String,
}

/// Why a Jsonnet worker was killed (the `reason` label).
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub(crate) enum WorkerKill {
    /// The evaluation outran the hook's timeout.
    Timeout,
    /// The worker's memory passed the limit.
    Memory,
}

impl WorkerKill {
    fn as_str(self) -> &'static str {
        match self {
            WorkerKill::Timeout => "timeout",
            WorkerKill::Memory => "memory",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KillLabels {
    reason: String,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

fn default_histogram() -> Histogram {
    Histogram::new(DEFAULT_BUCKETS)
}

/// Buckets for work-queue waits: 1 ms to ~16 s.
fn wait_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 15))
}

/// A count per parent uid and their running sum, so a gauge summed over a controller's parents
/// costs O(1) per sync instead of a walk over every parent (quadratic at 10 000 parents). A
/// count of 0 forgets the parent.
#[derive(Default)]
struct ParentCounts {
    by_uid: HashMap<String, usize>,
    total: usize,
}

impl ParentCounts {
    fn set(&mut self, parent_uid: &str, count: usize) {
        let old = if count == 0 {
            self.by_uid.remove(parent_uid)
        } else if let Some(slot) = self.by_uid.get_mut(parent_uid) {
            Some(std::mem::replace(slot, count))
        } else {
            self.by_uid.insert(parent_uid.to_owned(), count)
        };
        self.total = self.total - old.unwrap_or(0) + count;
    }

    fn clear(&mut self) {
        self.by_uid.clear();
        self.total = 0;
    }

    fn is_empty(&self) -> bool {
        self.by_uid.is_empty()
    }
}

/// Applies `f` to `controller`'s counts and sets its gauge to their sum (the controller's entry
/// is dropped once it has no parent left).
fn update_sum(
    by_controller: &Mutex<HashMap<String, ParentCounts>>,
    gauge: &Family<ControllerLabels, Gauge>,
    controller: &str,
    f: impl FnOnce(&mut ParentCounts),
) {
    let total = {
        let mut all = by_controller
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let per_parent = all.entry(controller.to_owned()).or_default();
        f(per_parent);
        let total = per_parent.total;
        if per_parent.is_empty() {
            all.remove(controller);
        }
        total
    };
    gauge
        .get_or_create(&ControllerLabels {
            controller: controller.into(),
        })
        .set(i64::try_from(total).unwrap_or(i64::MAX));
}

/// `kmeta_child_drift`, summed over each controller's parents.
#[derive(Default)]
struct DriftSeries {
    gauge: Family<ControllerLabels, Gauge>,
    /// controller → parent uid → drifted children left as they are.
    by_parent: Mutex<HashMap<String, ParentCounts>>,
}

impl DriftSeries {
    fn register(&self, registry: &mut Registry) {
        registry.register(
            "kmeta_child_drift",
            "children that differ from what the hook wants and were left as they are (drift policy Report, or a conflict not taken), per controller",
            self.gauge.clone(),
        );
    }
}

/// The series of one hook kind (`sync`, `finalize` or `customize`).
struct HookSeries {
    requests: Family<HookLabels, Counter>,
    duration: HistogramFamily<HookDurationLabels>,
    in_flight: Family<HookFlightLabels, Gauge>,
}

impl HookSeries {
    fn new() -> Self {
        HookSeries {
            requests: Family::default(),
            duration: Family::new_with_constructor(default_histogram),
            in_flight: Family::default(),
        }
    }

    fn register(&self, registry: &mut Registry, hook: HookKind) {
        let hook = hook.as_str();
        registry.register(
            format!("metacontroller_{hook}_requests"),
            format!("{hook} hook requests by controller, url, HTTP code and method"),
            self.requests.clone(),
        );
        registry.register(
            format!("metacontroller_{hook}_request_duration_histogram_seconds"),
            format!("{hook} hook request latency in seconds"),
            self.duration.clone(),
        );
        registry.register(
            format!("metacontroller_{hook}_in_flight_requests"),
            format!("{hook} hook requests currently in flight"),
            self.in_flight.clone(),
        );
    }
}

/// All of kmeta's metrics and the registry that encodes them. Share it in an `Arc`.
pub struct Metrics {
    registry: Registry,
    sync: HookSeries,
    finalize: HookSeries,
    customize: HookSeries,
    reconcile_total: Family<ResultLabels, Counter>,
    reconcile_duration: HistogramFamily<ControllerLabels>,
    queue_depth: Family<ControllerLabels, Gauge>,
    queue_wait: HistogramFamily<ControllerLabels>,
    child_ops: Family<OpLabels, Counter>,
    children: Family<ControllerLabels, Gauge>,
    /// controller → parent uid → children count, summed into `children`.
    children_by_parent: Mutex<HashMap<String, ParentCounts>>,
    drift: DriftSeries,
    api_requests: Family<ApiLabels, Counter>,
    api_duration: HistogramFamily<ApiLabels>,
    rate_limit_wait: Histogram,
    events_dropped: Counter,
    events_failed: Counter,
    leader: Family<LeaseLabels, Gauge>,
    shard: ShardSeries,
    fenced_writes: Family<FenceLabels, Counter>,
    watch_objects: Family<WatchLabels, Gauge>,
    watch_streams: Family<WatchLabels, Gauge>,
    jsonnet_kills: Family<KillLabels, Counter>,
    openapi_fetches: Family<OpenApiLabels, Counter>,
    circuit_open: Family<ControllerLabels, Gauge>,
    /// The watches `/readyz` waits for, counted at each scrape once [`Metrics::count_pending`]
    /// is called.
    pending_watches: Arc<OnceLock<Arc<PendingWatches>>>,
}

/// `kmeta_watches_pending`: watches waiting for their first list, counted at each scrape.
#[derive(Debug)]
struct PendingCollector(Arc<OnceLock<Arc<PendingWatches>>>);

impl Collector for PendingCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> std::fmt::Result {
        let Some(pending) = self.0.get() else {
            return Ok(());
        };
        let g = ConstGauge::new(i64::try_from(pending.list().len()).unwrap_or(i64::MAX));
        g.encode(encoder.encode_descriptor(
            "kmeta_watches_pending",
            "watches waiting for their first list (/readyz?verbose names them); the syncs that need them wait",
            None,
            g.metric_type(),
        )?)
    }
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

/// Decrements a hook's in-flight gauge when dropped.
#[must_use = "the request counts as in flight until the guard is dropped"]
pub(crate) struct InFlightGuard {
    gauge: Gauge,
}

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        self.gauge.dec();
    }
}

impl std::fmt::Debug for InFlightGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InFlightGuard").finish_non_exhaustive()
    }
}

impl Metrics {
    /// Registers the series of the controllers' work: hook calls, syncs, work queues, children,
    /// drift, leader election, Jsonnet workers and OpenAPI reads.
    fn register_reconcile_series(&mut self) {
        let r = &mut self.registry;
        self.sync.register(r, HookKind::Sync);
        self.finalize.register(r, HookKind::Finalize);
        self.customize.register(r, HookKind::Customize);
        r.register(
            "kmeta_reconcile",
            "parent syncs by controller and result (ok|error)",
            self.reconcile_total.clone(),
        );
        r.register(
            "kmeta_reconcile_duration_seconds",
            "duration of one parent sync",
            self.reconcile_duration.clone(),
        );
        r.register(
            "kmeta_workqueue_depth",
            "parents waiting in a controller's work queue",
            self.queue_depth.clone(),
        );
        r.register(
            "kmeta_workqueue_wait_seconds",
            "time a parent waited in the queue before its sync started",
            self.queue_wait.clone(),
        );
        r.register(
            "kmeta_child_operations",
            "child writes by controller and operation (create|update|delete|adopt|release)",
            self.child_ops.clone(),
        );
        r.register(
            "kmeta_children",
            "children observed for the parents of a controller at their last sync",
            self.children.clone(),
        );
        self.drift.register(r);
        r.register(
            "kmeta_hook_circuit_open",
            "1 while the controller's hook circuit is open (its hook endpoint down: one probe sync at a time, the failed parents' retries held back), else 0",
            self.circuit_open.clone(),
        );
        r.register(
            "kmeta_leader_election_status",
            "1 while this instance holds the leader Lease of this name, else 0",
            self.leader.clone(),
        );
        r.register(
            "kmeta_jsonnet_worker_kills",
            "Jsonnet worker processes killed, by reason (timeout|memory)",
            self.jsonnet_kills.clone(),
        );
        r.register(
            "kmeta_openapi_fetches",
            "OpenAPI v3 documents read from the API server for list rules, by document (index|group_version)",
            self.openapi_fetches.clone(),
        );
    }

    /// Registers the series of the process's API client: requests, rate limiter, Events.
    fn register_client_series(&mut self) {
        self.registry.register(
            "kmeta_api_requests",
            "Kubernetes API requests by verb and HTTP code",
            self.api_requests.clone(),
        );
        self.registry.register(
            "kmeta_api_request_duration_seconds",
            "Kubernetes API request latency by verb and HTTP code",
            self.api_duration.clone(),
        );
        self.registry.register(
            "kmeta_client_rate_limiter_wait_seconds",
            "time API requests waited for the client-side rate limiter",
            self.rate_limit_wait.clone(),
        );
        self.registry.register(
            "kmeta_events_dropped",
            "Kubernetes Events not sent because of the events rate limit",
            self.events_dropped.clone(),
        );
        self.registry.register(
            "kmeta_events_failed",
            "Kubernetes Events given up after the API server did not take them (retried first when a retry could help)",
            self.events_failed.clone(),
        );
    }

    /// Registers the series of a sharded replica (`--sharding`).
    fn register_shard_series(&mut self) {
        let r = &mut self.registry;
        r.register(
            "kmeta_shard_buckets",
            "1 for each shard bucket this replica holds (--sharding), 0 once given up",
            self.shard.buckets.clone(),
        );
        r.register(
            "kmeta_shard_members",
            "live replicas of this shard set, as this replica counts them",
            self.shard.members.clone(),
        );
        r.register(
            "kmeta_watch_objects",
            "objects held by this process's watches of each resource, by mode: sharded (listed by the API server for the shard buckets held, --shard-watch=server) or whole",
            self.watch_objects.clone(),
        );
        r.register(
            "kmeta_watch_streams",
            "list-and-watch streams this process runs for each resource, by mode (a sharded watch runs one per group of shard buckets gained together until they are merged into one)",
            self.watch_streams.clone(),
        );
        r.register(
            "kmeta_shard_handoffs",
            "shard buckets this replica gave up, by reason (rebalance|shutdown|lost|blocked)",
            self.shard.handoffs.clone(),
        );
        r.register(
            "kmeta_shard_handoff_seconds",
            "for a shard bucket this replica took over from another, the seconds from the previous holder's last Lease record it saw (its release, or its last renewal before the Lease expired) to the start of its work here (after the acquisition and, with --shard-watch=server, the bucket's lists), by how the previous holder let it go (released|expired)",
            self.shard.handoff_seconds.clone(),
        );
        r.register(
            "kmeta_shard_renewal_seconds",
            "seconds from sending a renewal of a held shard bucket's Lease to the API server's answer (a bucket not renewed within --shard-renew-deadline is lost)",
            self.shard.renewal_seconds.clone(),
        );
        r.register(
            "kmeta_shard_parents",
            "parents (of a DecoratorController: targets) of each controller in the shard buckets this replica works on, counted every 5 s (--sharding)",
            self.shard.parents.clone(),
        );
        r.register(
            "kmeta_shard_keys_dropped",
            "queued parents a worker dropped because they were not this replica's work (--sharding; their bucket's holder syncs them): a few when a bucket moves, steady growth means a trigger queues other replicas' parents",
            self.shard.dropped.clone(),
        );
        r.register(
            "kmeta_fenced_writes",
            "writes refused before they were sent because this process did not hold the Lease they need, by fence: leader (--leader-election) or shard (--sharding)",
            self.fenced_writes.clone(),
        );
    }

    /// A fresh registry with every series registered.
    pub fn new() -> Self {
        let mut m = Metrics {
            registry: Registry::default(),
            sync: HookSeries::new(),
            finalize: HookSeries::new(),
            customize: HookSeries::new(),
            reconcile_total: Family::default(),
            reconcile_duration: Family::new_with_constructor(default_histogram),
            queue_depth: Family::default(),
            queue_wait: Family::new_with_constructor(wait_histogram),
            child_ops: Family::default(),
            children: Family::default(),
            children_by_parent: Mutex::new(HashMap::new()),
            drift: DriftSeries::default(),
            api_requests: Family::default(),
            api_duration: Family::new_with_constructor(default_histogram),
            rate_limit_wait: wait_histogram(),
            events_dropped: Counter::default(),
            events_failed: Counter::default(),
            leader: Family::default(),
            shard: ShardSeries::default(),
            fenced_writes: Family::default(),
            watch_objects: Family::default(),
            watch_streams: Family::default(),
            jsonnet_kills: Family::default(),
            openapi_fetches: Family::default(),
            pending_watches: Arc::default(),
            circuit_open: Family::default(),
        };
        m.register_reconcile_series();
        m.register_client_series();
        m.register_shard_series();
        m.registry
            .register_collector(Box::new(process::ProcessCollector));
        m.registry
            .register_collector(Box::new(PendingCollector(m.pending_watches.clone())));
        m
    }

    /// Exports `kmeta_watches_pending`, the number of `pending` watches (those `/readyz` waits
    /// for) at each scrape; the first call wins.
    pub fn count_pending(&self, pending: Arc<PendingWatches>) {
        let _ = self.pending_watches.set(pending);
    }

    fn hook(&self, hook: HookKind) -> &HookSeries {
        match hook {
            HookKind::Sync => &self.sync,
            HookKind::Finalize => &self.finalize,
            HookKind::Customize => &self.customize,
        }
    }

    /// One finished request to the hook `target`: `code` is the HTTP status (`"200"`) or
    /// `"error"` when no response arrived, `method` the HTTP method.
    pub(crate) fn hook_request(
        &self,
        target: &HookTarget<'_>,
        method: &str,
        code: &str,
        elapsed: Duration,
    ) {
        let s = self.hook(target.hook);
        s.requests
            .get_or_create(&HookLabels {
                controller_name: target.controller.into(),
                controller_type: target.controller_type.as_str().into(),
                url: target.url.into(),
                code: code.into(),
                method: method.into(),
            })
            .inc();
        s.duration
            .get_or_create(&HookDurationLabels {
                controller_name: target.controller.into(),
                controller_type: target.controller_type.as_str().into(),
                url: target.url.into(),
                method: method.into(),
            })
            .observe(elapsed.as_secs_f64());
    }

    /// The hook circuit of `controller` opened (`true`) or closed.
    pub(crate) fn hook_circuit(&self, controller: &str, open: bool) {
        self.circuit_open
            .get_or_create(&ControllerLabels {
                controller: controller.into(),
            })
            .set(i64::from(open));
    }

    /// Counts a request to the hook `target` as in flight until the returned guard is dropped.
    pub(crate) fn hook_in_flight(&self, target: &HookTarget<'_>) -> InFlightGuard {
        let gauge = self
            .hook(target.hook)
            .in_flight
            .get_or_create(&HookFlightLabels {
                controller_name: target.controller.into(),
                controller_type: target.controller_type.as_str().into(),
                url: target.url.into(),
            })
            .clone();
        gauge.inc();
        InFlightGuard { gauge }
    }

    /// One parent sync finished with `result`.
    pub(crate) fn reconcile(&self, controller: &str, result: ReconcileResult, elapsed: Duration) {
        self.reconcile_total
            .get_or_create(&ResultLabels {
                controller: controller.into(),
                result: result.as_str().into(),
            })
            .inc();
        self.reconcile_duration
            .get_or_create(&ControllerLabels {
                controller: controller.into(),
            })
            .observe(elapsed.as_secs_f64());
        // the circuit's series exists (0) from a controller's first sync on
        let _ = self.circuit_open.get_or_create(&ControllerLabels {
            controller: controller.into(),
        });
    }

    /// How many syncs of `controller` finished with `result`, a label value
    /// ([`ReconcileResult::as_str`]).
    // for tests
    #[doc(hidden)]
    pub fn reconcile_count(&self, controller: &str, result: &str) -> u64 {
        self.reconcile_total
            .get_or_create(&ResultLabels {
                controller: controller.into(),
                result: result.into(),
            })
            .get()
    }

    /// The current length of a controller's work queue.
    pub(crate) fn queue_depth(&self, controller: &str, depth: usize) {
        self.queue_depth
            .get_or_create(&ControllerLabels {
                controller: controller.into(),
            })
            .set(i64::try_from(depth).unwrap_or(i64::MAX));
    }

    /// How long a parent waited in the queue before its sync started.
    pub(crate) fn queue_wait(&self, controller: &str, wait: Duration) {
        self.queue_wait
            .get_or_create(&ControllerLabels {
                controller: controller.into(),
            })
            .observe(wait.as_secs_f64());
    }

    /// One child operation `op`.
    pub(crate) fn child_op(&self, controller: &str, op: ChildOpLabel) {
        self.child_ops
            .get_or_create(&OpLabels {
                controller: controller.into(),
                op: op.as_str().into(),
            })
            .inc();
    }

    /// How many child operations `op`, a label value ([`ChildOpLabel::as_str`]), of `controller`
    /// were counted.
    // for tests
    #[doc(hidden)]
    pub fn child_op_count(&self, controller: &str, op: &str) -> u64 {
        self.child_ops
            .get_or_create(&OpLabels {
                controller: controller.into(),
                op: op.into(),
            })
            .get()
    }

    /// The number of children one parent has after its sync. The `kmeta_children` gauge is the
    /// sum over the controller's parents; the parent uid is never a label.
    pub(crate) fn children(&self, controller: &str, parent_uid: &str, count: usize) {
        self.update_children(controller, |m| m.set(parent_uid, count));
    }

    /// A parent is gone (deleted): drop its children from the controller's sum.
    pub(crate) fn parent_gone(&self, controller: &str, parent_uid: &str) {
        self.update_children(controller, |m| m.set(parent_uid, 0));
        self.update_drift(controller, |m| m.set(parent_uid, 0));
    }

    /// The number of one parent's children left drifted at its last sync. The
    /// `kmeta_child_drift` gauge is the sum over the controller's parents.
    pub(crate) fn child_drift(&self, controller: &str, parent_uid: &str, count: usize) {
        self.update_drift(controller, |m| m.set(parent_uid, count));
    }

    /// The `kmeta_child_drift` value of `controller`.
    // for tests
    #[doc(hidden)]
    pub fn child_drift_total(&self, controller: &str) -> i64 {
        self.drift
            .gauge
            .get_or_create(&ControllerLabels {
                controller: controller.into(),
            })
            .get()
    }

    fn update_drift(&self, controller: &str, f: impl FnOnce(&mut ParentCounts)) {
        update_sum(&self.drift.by_parent, &self.drift.gauge, controller, f);
    }

    /// A controller stopped: forget its children sum.
    pub(crate) fn controller_stopped(&self, controller: &str) {
        self.update_children(controller, ParentCounts::clear);
        self.update_drift(controller, ParentCounts::clear);
        self.queue_depth(controller, 0);
        self.hook_circuit(controller, false);
    }

    fn update_children(&self, controller: &str, f: impl FnOnce(&mut ParentCounts)) {
        update_sum(&self.children_by_parent, &self.children, controller, f);
    }

    /// One Kubernetes API request: `verb` is the Kubernetes verb (`get`, `list`, `watch`, `create`,
    /// `update`, `patch`, `delete`, ...), `code` the HTTP status or `"error"`.
    pub(crate) fn api_request(&self, verb: &str, code: &str, elapsed: Duration) {
        let labels = ApiLabels {
            verb: verb.into(),
            code: code.into(),
        };
        self.api_requests.get_or_create(&labels).inc();
        self.api_duration
            .get_or_create(&labels)
            .observe(elapsed.as_secs_f64());
    }

    /// An API request waited `wait` for the client-side rate limiter.
    pub(crate) fn rate_limited(&self, wait: Duration) {
        self.rate_limit_wait.observe(wait.as_secs_f64());
    }

    /// An OpenAPI v3 document was read from the API server: `document` is `index` (`/openapi/v3`)
    /// or `group_version`.
    pub(crate) fn openapi_fetch(&self, document: &'static str) {
        self.openapi_fetches
            .get_or_create(&OpenApiLabels { document })
            .inc();
    }

    /// OpenAPI v3 documents read so far, of either kind.
    // for tests
    #[doc(hidden)]
    pub fn openapi_fetches(&self) -> u64 {
        ["index", "group_version"]
            .into_iter()
            .map(|document| {
                self.openapi_fetches
                    .get_or_create(&OpenApiLabels { document })
                    .get()
            })
            .sum()
    }

    /// An Event was dropped by the events rate limit.
    pub(crate) fn event_dropped(&self) {
        self.events_dropped.inc();
    }

    /// An Event was given up: the API server did not take it (`crate::ops::events`).
    pub(crate) fn event_failed(&self) {
        self.events_failed.inc();
    }

    /// Events given up so far.
    // for tests
    #[doc(hidden)]
    pub fn events_failed(&self) -> u64 {
        self.events_failed.get()
    }

    /// Whether this instance holds the leader Lease `lease`.
    pub(crate) fn leader(&self, lease: &str, leading: bool) {
        self.leader
            .get_or_create(&LeaseLabels { name: lease.into() })
            .set(i64::from(leading));
    }

    /// Whether this replica holds shard bucket `bucket`.
    pub(crate) fn shard_bucket(&self, bucket: &str, held: bool) {
        self.shard
            .buckets
            .get_or_create(&BucketLabels {
                bucket: bucket.into(),
            })
            .set(i64::from(held));
    }

    /// The objects a watch of `resource` holds, sharded or whole.
    pub(crate) fn watch_objects(&self, resource: &str, sharded: bool, objects: usize) {
        self.watch_objects
            .get_or_create(&WatchLabels::of(resource, sharded))
            .set(i64::try_from(objects).unwrap_or(i64::MAX));
    }

    /// The list-and-watch streams a watch of `resource` runs.
    pub(crate) fn watch_streams(&self, resource: &str, sharded: bool, streams: usize) {
        self.watch_streams
            .get_or_create(&WatchLabels::of(resource, sharded))
            .set(i64::try_from(streams).unwrap_or(i64::MAX));
    }

    /// A watch of `resource` stopped: its `kmeta_watch_objects` and `kmeta_watch_streams`
    /// series go.
    pub(crate) fn forget_watch(&self, resource: &str, sharded: bool) {
        let labels = WatchLabels::of(resource, sharded);
        self.watch_objects.remove(&labels);
        self.watch_streams.remove(&labels);
    }

    /// Live replicas of the shard set.
    pub(crate) fn shard_members(&self, members: usize) {
        self.shard
            .members
            .set(i64::try_from(members).unwrap_or(i64::MAX));
    }

    /// A shard bucket was given up for `reason`.
    pub(crate) fn shard_handoff(&self, reason: &str) {
        self.shard
            .handoffs
            .get_or_create(&HandoffLabels {
                reason: reason.into(),
            })
            .inc();
    }

    /// A shard bucket taken over from another replica, whose previous holder let it go
    /// (`released` or `expired`) `seconds` before its work started here.
    pub(crate) fn shard_handoff_seconds(&self, previous: &'static str, seconds: f64) {
        self.shard
            .handoff_seconds
            .get_or_create(&PreviousLabels { previous })
            .observe(seconds);
    }

    /// A renewal of a held shard bucket's Lease answered after `seconds`.
    pub(crate) fn shard_renewal_seconds(&self, seconds: f64) {
        self.shard.renewal_seconds.observe(seconds);
    }

    /// A queued parent of `controller` dropped by a worker: not this replica's work.
    pub(crate) fn shard_key_dropped(&self, controller: &str) {
        self.shard
            .dropped
            .get_or_create(&ControllerLabels {
                controller: controller.into(),
            })
            .inc();
    }

    /// The parents of `controller` in the shard buckets this replica works on (its
    /// `kmeta_shard_keys_dropped` series shows from then on, 0 until a key is dropped).
    pub(crate) fn shard_parents(&self, controller: &str, parents: usize) {
        let labels = ControllerLabels {
            controller: controller.into(),
        };
        self.shard
            .parents
            .get_or_create(&labels)
            .set(i64::try_from(parents).unwrap_or(i64::MAX));
        drop(self.shard.dropped.get_or_create(&labels));
    }

    /// `controller` stopped: its `kmeta_shard_parents` and `kmeta_shard_keys_dropped` series go.
    pub(crate) fn forget_shard_parents(&self, controller: &str) {
        let labels = ControllerLabels {
            controller: controller.into(),
        };
        self.shard.parents.remove(&labels);
        self.shard.dropped.remove(&labels);
    }

    /// A write was refused by the `fence` (`leader` or `shard`) before it was sent.
    pub(crate) fn fenced_write(&self, fence: &'static str) {
        self.fenced_writes
            .get_or_create(&FenceLabels { fence })
            .inc();
    }

    /// A Jsonnet worker was killed while evaluating a hook.
    pub(crate) fn jsonnet_worker_killed(&self, why: WorkerKill) {
        self.jsonnet_kills
            .get_or_create(&KillLabels {
                reason: why.as_str().to_owned(),
            })
            .inc();
    }

    /// The OpenMetrics text exposition of every series.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // writing into a String cannot fail
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }

    /// Every series in `format`.
    pub(crate) fn encode_as(&self, format: Format) -> String {
        match format {
            Format::OpenMetrics => self.encode(),
            Format::Text => text_004(&self.encode()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line<'a>(text: &'a str, prefix: &str) -> Option<&'a str> {
        text.lines().find(|l| l.starts_with(prefix))
    }

    #[test]
    fn hook_series_use_metacontroller_names_and_labels() {
        let m = Metrics::new();
        let target = HookTarget {
            controller_type: ControllerType::Composite,
            controller: "cc1",
            hook: HookKind::Sync,
            url: "http://hook/sync",
        };
        m.hook_request(&target, "POST", "200", Duration::from_millis(3));
        let decorator = HookTarget {
            controller_type: ControllerType::Decorator,
            controller: "dc1",
            hook: HookKind::Customize,
            url: "http://hook/customize",
        };
        m.hook_request(&decorator, "POST", "error", Duration::from_millis(3));
        let text = m.encode();
        let want = "metacontroller_sync_requests_total{controller_name=\"cc1\",controller_type=\"CompositeController\",url=\"http://hook/sync\",code=\"200\",method=\"POST\"} 1";
        assert!(text.contains(want), "{text}");
        let want = "metacontroller_customize_requests_total{controller_name=\"dc1\",controller_type=\"DecoratorController\",url=\"http://hook/customize\",code=\"error\",method=\"POST\"} 1";
        assert!(text.contains(want), "{text}");
        assert!(
            line(
                &text,
                "metacontroller_sync_request_duration_histogram_seconds_count{controller_name=\"cc1\""
            )
            .is_some_and(|l| l.ends_with(" 1")),
            "{text}"
        );
        assert!(!text.contains("metacontroller_finalize_requests_total{"));
    }

    #[test]
    fn label_values_are_the_documented_ones() {
        use ChildOpLabel::*;
        let hooks = [HookKind::Sync, HookKind::Finalize, HookKind::Customize].map(HookKind::as_str);
        assert_eq!(hooks, ["sync", "finalize", "customize"]);
        let types =
            [ControllerType::Composite, ControllerType::Decorator].map(ControllerType::as_str);
        assert_eq!(types, ["CompositeController", "DecoratorController"]);
        let results = [
            ReconcileResult::Ok,
            ReconcileResult::Error,
            ReconcileResult::Retry,
            ReconcileResult::Parked,
        ]
        .map(ReconcileResult::as_str);
        assert_eq!(results, ["ok", "error", "retry", "parked"]);
        let ops = [
            Create,
            Update,
            Delete,
            Adopt,
            Release,
            Skip,
            Error,
            Contested,
            FieldsTaken,
            NotObserved,
        ]
        .map(ChildOpLabel::as_str);
        assert_eq!(
            ops,
            [
                "create",
                "update",
                "delete",
                "adopt",
                "release",
                "skip",
                "error",
                "contested",
                "fields_taken",
                "not_observed"
            ]
        );
    }

    #[test]
    fn in_flight_guard_decrements_on_drop() {
        let m = Metrics::new();
        let prefix = "metacontroller_customize_in_flight_requests{controller_name=\"cc\"";
        let target = HookTarget {
            controller_type: ControllerType::Composite,
            controller: "cc",
            hook: HookKind::Customize,
            url: "u",
        };
        let g1 = m.hook_in_flight(&target);
        let g2 = m.hook_in_flight(&target);
        assert!(line(&m.encode(), prefix).is_some_and(|l| l.ends_with(" 2")));
        drop(g1);
        drop(g2);
        assert!(line(&m.encode(), prefix).is_some_and(|l| l.ends_with(" 0")));
    }

    #[test]
    fn a_forgotten_watch_loses_its_series() {
        let m = Metrics::new();
        m.watch_objects("v1/configmaps", true, 7);
        m.watch_streams("v1/configmaps", true, 3);
        m.watch_objects("v1/secrets", false, 2);
        let series = "kmeta_watch_objects{resource=\"v1/configmaps\",mode=\"sharded\"} 7";
        assert!(m.encode().contains(series), "{}", m.encode());
        m.forget_watch("v1/configmaps", true);
        let text = m.encode();
        assert!(!text.contains("v1/configmaps"), "{text}");
        assert!(text.contains("v1/secrets"), "{text}");
    }

    #[test]
    fn shard_parents_are_counted_per_controller_until_it_stops() {
        let m = Metrics::new();
        m.shard_parents("cc", 12);
        m.shard_parents("dc", 3);
        m.shard_parents("cc", 10);
        let text = m.encode();
        assert!(
            text.contains("kmeta_shard_parents{controller=\"cc\"} 10"),
            "{text}"
        );
        assert!(
            text.contains("kmeta_shard_keys_dropped_total{controller=\"dc\"} 0"),
            "{text}"
        );
        m.shard_key_dropped("cc");
        m.shard_key_dropped("cc");
        let text = m.encode();
        assert!(
            text.contains("kmeta_shard_keys_dropped_total{controller=\"cc\"} 2"),
            "{text}"
        );
        m.forget_shard_parents("cc");
        let text = m.encode();
        assert!(!text.contains("controller=\"cc\""), "{text}");
        assert!(
            text.contains("kmeta_shard_parents{controller=\"dc\"} 3"),
            "{text}"
        );
    }

    #[test]
    fn children_gauge_sums_parents_without_naming_them() {
        let m = Metrics::new();
        m.children("cc", "uid-a", 3);
        m.children("cc", "uid-b", 4);
        m.children("cc", "uid-a", 1);
        let text = m.encode();
        assert!(
            text.contains("kmeta_children{controller=\"cc\"} 5"),
            "{text}"
        );
        assert!(!text.contains("uid-a"));
        m.parent_gone("cc", "uid-b");
        assert!(m.encode().contains("kmeta_children{controller=\"cc\"} 1"));
        m.controller_stopped("cc");
        assert!(m.encode().contains("kmeta_children{controller=\"cc\"} 0"));
    }

    #[test]
    fn reconcile_queue_and_api_series() {
        let m = Metrics::new();
        m.reconcile("cc", ReconcileResult::Ok, Duration::from_millis(2));
        m.reconcile("cc", ReconcileResult::Error, Duration::from_millis(2));
        m.reconcile("cc", ReconcileResult::Ok, Duration::from_millis(2));
        m.queue_depth("cc", 7);
        m.queue_wait("cc", Duration::from_millis(5));
        m.child_op("cc", ChildOpLabel::Create);
        m.api_request("patch", "409", Duration::from_millis(1));
        m.event_dropped();
        m.event_failed();
        let text = m.encode();
        for want in [
            "kmeta_reconcile_total{controller=\"cc\",result=\"ok\"} 2",
            "kmeta_reconcile_total{controller=\"cc\",result=\"error\"} 1",
            "kmeta_workqueue_depth{controller=\"cc\"} 7",
            "kmeta_child_operations_total{controller=\"cc\",op=\"create\"} 1",
            "kmeta_api_requests_total{verb=\"patch\",code=\"409\"} 1",
            "kmeta_events_dropped_total 1",
            "kmeta_events_failed_total 1",
        ] {
            assert!(text.contains(want), "missing {want} in\n{text}");
        }
        assert!(text.ends_with("# EOF\n"));
    }

    #[test]
    fn both_formats_carry_the_same_samples() {
        let m = Metrics::new();
        let target = HookTarget {
            controller_type: ControllerType::Composite,
            controller: "cc1",
            hook: HookKind::Sync,
            url: "http://h/s",
        };
        m.hook_request(&target, "POST", "200", Duration::from_millis(3));
        m.queue_depth("cc1", 2);
        let om = m.encode_as(Format::OpenMetrics);
        let text = m.encode_as(Format::Text);
        assert!(om.ends_with("# EOF\n") && !text.contains("# EOF"), "{text}");
        assert!(text.contains("# TYPE metacontroller_sync_requests_total counter\n"));
        assert!(text.contains("# TYPE kmeta_workqueue_depth gauge\n"));
        assert!(
            text.contains(
                "# TYPE metacontroller_sync_request_duration_histogram_seconds histogram\n"
            )
        );
        let samples = |t: &str| -> Vec<String> {
            // the process' figures are read anew at each encoding
            t.lines()
                .filter(|l| !l.starts_with('#') && !l.starts_with("process_"))
                .map(str::to_owned)
                .collect()
        };
        assert_eq!(samples(&om), samples(&text));
    }
}
