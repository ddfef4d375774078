//! The reconcile core every controller kind shares: the [`Context`] of a manager (client,
//! settings, discovery, shared watches, events with their spam filter), the [`Reconciler`]
//! interface a kind implements (CompositeController, DecoratorController), its
//! [`Triggers`] (watch handlers and resync ticks feeding the work queue) and [`run`], the bounded
//! workers that take keys from the queue — one sync per key at a time — and turn each result
//! into a requeue, a backoff, an event and a condition.

use std::future::Future;
use std::hash::Hash;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
use serde_json::Value;
use tokio::sync::broadcast;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::coord::scope::WorkScope;
use crate::hook::trace::{TraceId, in_trace};
use crate::object::meta_str;
use crate::ops::events::{Event, EventSender, Reason, Recorder, SpamFilter};
use crate::ops::metrics::ReconcileResult;
use crate::ops::ratelimit::RateLimit;
use crate::reconcile::circuit::{self, Circuit, Effect, Gate, Outcome};
pub use crate::reconcile::config::{
    CHILD_WRITES_IN_FLIGHT_TOTAL, MIN_RESYNC_AFTER, ManagerConfig, WATCH_SYNC_DEADLINE, Wiring,
};
use crate::reconcile::decide;
pub(crate) use crate::reconcile::error::api_err;
pub use crate::reconcile::error::{FailureClass, SyncError};
use crate::reconcile::identity::Identities;
pub use crate::reconcile::identity::Writer;
use crate::runtime::cache::{Change, Form, Informers, ObjKey, Watch};
use crate::runtime::queue::{Cause, Priority, Queue, Tenant};
use crate::runtime::resources::Resources;

/// Shared by every controller of a manager.
pub struct Context {
    /// API client.
    pub client: kube::Client,
    /// Settings.
    pub config: ManagerConfig,
    /// What the manager shares with the process around it.
    pub wiring: Wiring,
    /// Discovered resources.
    pub(crate) resources: Resources,
    /// Shared watches.
    pub(crate) informers: Informers,
    /// Sends Events (with series), retrying those the API server did not take.
    events: Events,
    /// What every child write of the manager shares: the bound on writes in flight and the
    /// contests of server-side apply.
    pub(crate) child_writes: ChildWrites,
    /// Who syncs write and read as: the impersonating clients and what each ServiceAccount
    /// may read ([`crate::reconcile::identity`]).
    pub(crate) identities: Identities,
    /// The API server's OpenAPI v3 documents, for the children's list rules.
    pub(crate) openapi: crate::ops::openapi::OpenApiDocs,
}

/// Events as a manager sends them: its sender (with series and retries) behind the spam filter.
struct Events {
    /// Sends Events (with series), retrying those the API server did not take.
    sender: EventSender,
    /// Event spam filter: one token bucket per (object, reason).
    spam: SpamFilter,
}

/// What every child write of a manager shares.
pub(crate) struct ChildWrites {
    /// Permits for child writes in flight ([`ManagerConfig::child_writes_in_flight`]).
    pub(crate) permits: tokio::sync::Semaphore,
    /// Children wanted by one parent and held by another, across controllers (server-side
    /// apply's `ChildContested` on both parents).
    pub(crate) contests: Mutex<crate::reconcile::apply::Contests>,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Context {
    /// The client discovery runs with: its own when the configuration gives one.
    pub fn discovery_client(&self) -> &kube::Client {
        self.wiring
            .discovery_client
            .as_ref()
            .unwrap_or(&self.client)
    }

    /// The client failures are reported with (Events, and the `Synced=False` and `Paused`
    /// conditions): its own when the wiring gives one ([`Wiring::reports_client`]).
    pub fn report_client(&self) -> &kube::Client {
        self.wiring.reports_client.as_ref().unwrap_or(&self.client)
    }

    /// A context for `client` with `config` and a fresh [`Wiring`].
    pub fn new(client: kube::Client, config: ManagerConfig) -> Arc<Context> {
        Context::wired(client, config, Wiring::default())
    }

    /// A context for `client` with `config`, shared with the process around it by `wiring`.
    pub fn wired(client: kube::Client, config: ManagerConfig, wiring: Wiring) -> Arc<Context> {
        let recorder = Recorder::new(
            wiring
                .reports_client
                .clone()
                .unwrap_or_else(|| client.clone()),
            config.reporter.clone(),
            config.reporting_instance.clone(),
        );
        let child_writes = tokio::sync::Semaphore::new(config.child_writes_in_flight.max(1));
        let events = EventSender::new(recorder, wiring.metrics.clone());
        let spam = SpamFilter::new(RateLimit {
            qps: config.events_qps,
            burst: config.events_burst,
        });
        let identities = Identities::new(client.clone(), config.default_service_account.clone());
        Arc::new(Context {
            identities,
            informers: Informers::new(client.clone(), wiring.pending_watches.clone())
                .with_watch_list(config.watch_list)
                .with_split(wiring.work_scope.as_ref().and_then(|s| s.watch_split())),
            resources: Resources::default(),
            client,
            config,
            wiring,
            events: Events {
                sender: events,
                spam,
            },
            child_writes: ChildWrites {
                permits: child_writes,
                contests: Mutex::default(),
            },
            openapi: crate::ops::openapi::OpenApiDocs::default(),
        })
    }

    /// Whether an event with `reason` about `obj` passes the spam filter (`events_qps` /
    /// `events_burst` per object and reason: [`SpamFilter`]).
    fn event_allowed(&self, obj: &Value, reason: &str) -> bool {
        let object = match meta_str(obj, "uid") {
            "" => format!("{}/{}", meta_str(obj, "namespace"), meta_str(obj, "name")),
            uid => uid.to_owned(),
        };
        self.events
            .spam
            .allow(&object, reason, tokio::time::Instant::now())
    }

    /// Publishes an event about `obj`, unless the spam filter drops it (counted in the
    /// dropped-events metric); one the API server did not take is retried in the background and,
    /// when given up, logged and counted ([`crate::ops::events`]). Never fatal.
    pub async fn event(&self, obj: &Value, reason: Reason, note: String) {
        self.publish(obj, reason.is_warning(), reason.as_str(), note)
            .await;
    }

    /// Publishes the events a hook's answer asked for on `obj` (`events`, a kmeta extension):
    /// the valid ones, at most [`decide::HOOK_EVENTS_PER_SYNC`], through the same spam filter and
    /// series as kmeta's own; one `HookEventInvalid` Warning names what was invalid or dropped.
    pub(crate) async fn hook_events(&self, obj: &Value, raw: &[Value]) {
        if raw.is_empty() {
            return;
        }
        let events = decide::hook_events(raw);
        for e in &events.publish {
            let warning = e.type_ == kmeta_wire::HookEventType::Warning;
            self.publish(obj, warning, &e.reason, e.message.clone())
                .await;
        }
        if let Some(note) = events.report() {
            tracing::warn!(%note, "hook events ignored");
            self.event(obj, Reason::HookEventInvalid, note).await;
        }
    }

    async fn publish(&self, obj: &Value, warning: bool, reason: &str, note: String) {
        if !self.event_allowed(obj, reason) {
            self.wiring.metrics.event_dropped();
            tracing::debug!(reason, "event dropped by the spam filter");
            return;
        }
        let reference = ObjectReference {
            api_version: obj
                .get("apiVersion")
                .and_then(Value::as_str)
                .map(str::to_owned),
            kind: obj.get("kind").and_then(Value::as_str).map(str::to_owned),
            name: Some(meta_str(obj, "name").to_owned()),
            namespace: Some(meta_str(obj, "namespace").to_owned()).filter(|s| !s.is_empty()),
            uid: Some(meta_str(obj, "uid").to_owned()).filter(|s| !s.is_empty()),
            ..Default::default()
        };
        let mut note = note;
        if note.len() > 1000 {
            let mut cut = 1000;
            while !note.is_char_boundary(cut) {
                cut -= 1;
            }
            note.truncate(cut);
        }
        let ev = Event {
            warning,
            reason: reason.to_owned(),
            note,
        };
        self.events.sender.send(ev, reference).await;
    }
}

/// The key of an object in a controller's work queue: what the queue dedups on and how a sync's
/// log span names the object.
pub trait QueueKey: Clone + Eq + Hash + Tenant + Send + Sync + 'static {
    /// The object as logged: `namespace/name`, or `name` when cluster-scoped.
    fn log_name(&self) -> String;
}

impl QueueKey for ObjKey {
    fn log_name(&self) -> String {
        self.to_string()
    }
}

/// What a controller kind plugs into the shared loop: how to sync one key and how to report a
/// failure on the object concerned. Triggers (which watch events enqueue which keys) stay with
/// the kind; the workers, the backoff and the failure reporting are the core's.
pub trait Reconciler: Send + Sync + 'static {
    /// The key of a queued object (one resource: [`ObjKey`]; several: the resource too).
    type Key: QueueKey;
    /// The controller's name: a metric label and a log field.
    fn name(&self) -> &str;
    /// The manager's context.
    fn context(&self) -> &Arc<Context>;
    /// The work queue of object keys.
    fn queue(&self) -> &Queue<Self::Key>;
    /// The object a key names, from the cache (`None` when it is gone).
    fn cached(&self, key: &Self::Key) -> Option<Arc<Value>>;
    /// The watches a sync reads (the parent's and every child's): a sync runs only once each
    /// has finished its first list, as client-go's `WaitForCacheSync` before workers start.
    fn watches(&self) -> Vec<Arc<dyn Watch>>;
    /// One sync of the object at `key`; returns when to sync it again (if sooner than an event).
    fn sync(
        self: &Arc<Self>,
        key: &Self::Key,
    ) -> impl Future<Output = Result<Option<Duration>, SyncError>> + Send;
    /// Records a failed sync on the object (a `Synced=False` condition), only when it differs.
    fn report_failure(
        &self,
        obj: &Value,
        message: &str,
    ) -> impl Future<Output = Result<(), SyncError>> + Send;
}

/// The tasks that turn watch events and timers into queued keys; aborted when the controller
/// stops.
#[derive(Default)]
pub struct Triggers {
    tasks: JoinSet<()>,
}

impl Triggers {
    /// Calls `on_change` for every change `rx` (subscribed to `watch` before its first list)
    /// receives and `on_lag` when changes were missed (the handler fell behind): the handlers
    /// get the priority of what they schedule, [`Priority::Low`] for the changes of the
    /// controller's start (the list) and [`Priority::Normal`] after it; `on_started` runs once
    /// the start is over ([`crate::reconcile::start`]).
    pub fn watch_from_start<T: Form>(
        &mut self,
        watch: Arc<dyn Watch>,
        rx: broadcast::Receiver<Change<T>>,
        on_change: impl Fn(&Change<T>, Priority) + Send + 'static,
        on_lag: impl Fn(Priority) + Send + 'static,
        on_started: impl FnOnce() + Send + 'static,
    ) {
        let follow = crate::reconcile::start::follow(watch, rx, on_change, on_lag, on_started);
        self.tasks.spawn(follow);
    }

    /// Calls `tick` every `period`, the first time one period from now.
    pub fn every(&mut self, period: Duration, tick: impl Fn() + Send + 'static) {
        self.tasks.spawn(async move {
            let mut interval = tokio::time::interval(period);
            interval.tick().await;
            loop {
                interval.tick().await;
                tick();
            }
        });
    }

    /// Runs `task` until the controller stops.
    pub fn spawn(&mut self, task: impl Future<Output = ()> + Send + 'static) {
        self.tasks.spawn(task);
    }

    async fn stop(mut self) {
        self.tasks.abort_all();
        while self.tasks.join_next().await.is_some() {}
    }
}

/// Runs `triggers` and `config.workers` workers over the reconciler's queue until `stop` is
/// cancelled; then stops taking work and returns once the syncs in flight have finished (the
/// caller bounds how long it waits).
pub async fn run<R: Reconciler>(
    reconciler: Arc<R>,
    triggers: impl FnOnce(&Arc<R>) -> Triggers,
    stop: CancellationToken,
) {
    admit_own_work(&reconciler);
    let triggers = triggers(&reconciler);
    let mut workers = JoinSet::new();
    let circuit: Arc<Circuit<R::Key>> = Arc::default();
    let reports = TaskTracker::new();
    for _ in 0..reconciler.context().config.workers.max(1) {
        let r = reconciler.clone();
        let circuit = circuit.clone();
        let reports = reports.clone();
        workers.spawn(async move {
            while let Some((key, waited)) = r.queue().next_timed().await {
                let metrics = &r.context().wiring.metrics;
                metrics.queue_wait(r.name(), waited);
                match process_owned(&r, &circuit, &key).await {
                    // the key is handed out again once its failure is reported
                    Some(failure) => drop(reports.spawn(report_then_done(r.clone(), key, failure))),
                    None => r.queue().done(&key),
                }
                metrics.queue_depth(r.name(), r.queue().len());
            }
        });
    }
    stop.cancelled().await;
    reconciler.queue().shutdown();
    triggers.stop().await;
    while workers.join_next().await.is_some() {}
    reports.close();
    reports.wait().await;
    reconciler
        .context()
        .wiring
        .metrics
        .controller_stopped(reconciler.name());
}

/// With a work scope, has the queue of `r` take only the keys this process works on now
/// ([`WorkScope::works_on`]): no trigger, retry or resync queues a parent another process
/// syncs (a worker would only drop it), and one whose share this process gains later is
/// queued by the gain ([`WorkScope::follow_gains`]). Set before the triggers start.
fn admit_own_work<R: Reconciler>(r: &Arc<R>) {
    let Some(scope) = r.context().wiring.work_scope.clone() else {
        return;
    };
    let weak = Arc::downgrade(r);
    r.queue().admit_only(Box::new(move |key: &R::Key| {
        let parent = weak
            .upgrade()
            .and_then(|r| placing_parent(r.as_ref(), scope.as_ref(), key));
        let uid = parent.as_deref().map(|p| meta_str(p, "uid"));
        scope.works_on(key.tenant(), uid)
    }));
}

/// The cached parent of `key`, when `scope` places parents by uid (a parent not cached has no
/// place yet: its watch event enqueues it again).
fn placing_parent<R: Reconciler>(r: &R, scope: &dyn WorkScope, key: &R::Key) -> Option<Arc<Value>> {
    if scope.by_uid() { r.cached(key) } else { None }
}

/// One sync of one key when it is this process's work: always without a work scope; with one
/// only while the scope gives the key to this process, in the write scope it names (a key that
/// is another replica's work is dropped: its holder syncs it).
async fn process_owned<R: Reconciler>(
    r: &Arc<R>,
    circuit: &Circuit<R::Key>,
    key: &R::Key,
) -> Option<FailureReport> {
    let Some(scope) = &r.context().wiring.work_scope else {
        return process(r, circuit, key).await;
    };
    let parent = placing_parent(r.as_ref(), scope.as_ref(), key);
    let uid = parent.as_deref().map(|p| meta_str(p, "uid"));
    let mut failure = None;
    let sync = async { failure = process(r, circuit, key).await };
    match scope.claim(key.tenant(), uid, Box::pin(sync)) {
        Some(sync) => sync.await,
        None => {
            r.context().wiring.metrics.shard_key_dropped(r.name());
            r.queue().forget(key);
        }
    }
    failure
}

/// A failed sync's report, made after the sync by a task of its own (see [`report_then_done`]).
struct FailureReport {
    /// The version the sync read (the failure is reported on it).
    object: Arc<Value>,
    /// The failure.
    message: String,
    /// The sync's span, so the report's log lines carry its controller, object and trace id.
    span: tracing::Span,
}

/// Reports a failed sync (a `SyncError` event and the `Synced=False` condition, through the
/// reports' own client) in the work scope of its key, then lets the queue hand the key out again.
/// The worker that ran the sync has moved on: the reports of many failing parents, waiting for
/// their client's tokens, never hold the workers a healthy parent's change waits for, and a
/// key's next sync still never overlaps its report (Metacontroller records events
/// asynchronously too, `pkg/events/events.go`).
async fn report_then_done<R: Reconciler>(r: Arc<R>, key: R::Key, failure: FailureReport) {
    use tracing::Instrument as _;
    let FailureReport {
        object,
        message,
        span,
    } = failure;
    let report = async {
        let note = format!("Sync error: {message}");
        r.context().event(&object, Reason::SyncError, note).await;
        if let Err(err) = r.report_failure(&object, &message).await {
            tracing::warn!(error = %err, "writing the SyncError condition failed");
        }
    };
    let report = report.instrument(span);
    match &r.context().wiring.work_scope {
        None => report.await,
        Some(scope) => {
            let uid = Some(meta_str(&object, "uid"));
            // no longer this replica's work: its new holder reports its own failures
            if let Some(claimed) = scope.claim(key.tenant(), uid, Box::pin(report)) {
                claimed.await;
            }
        }
    }
    r.queue().done(&key);
}

tokio::task_local! {
    /// Why the sync running in this task was scheduled ([`current_cause`]).
    static CAUSE: Option<String>;
}

/// Why the sync running in this task was scheduled (`watch: ConfigMap shop/a`, `resync`, `and
/// 2 more` when more causes came before it ran), for its sync record; `None` outside a sync or
/// when no cause was noted (a wait, a requeue after kmeta's own status write).
pub fn current_cause() -> Option<String> {
    CAUSE.try_with(Clone::clone).ok().flatten()
}

/// Gives `key` back the cause of a sync that wrote nothing and runs again (a wait, a hook's
/// `Retry-After`): the record of the sync that does write names what brought it.
fn keep_cause<R: Reconciler>(r: &R, key: &R::Key, cause: Option<(Cause, u32)>) {
    if let Some(cause) = cause {
        r.queue().keep_cause(key.clone(), cause);
    }
}

/// The text of a queue's cause for the record.
fn cause_text(cause: Option<(Cause, u32)>) -> Option<String> {
    cause.map(|(c, more)| match more {
        0 => c.to_string(),
        n => format!("{c} (and {n} more)"),
    })
}

/// One sync of one key, in a `sync` span carrying the controller, the object and the trace id
/// its hook requests carry in `traceparent` (events inside it do not repeat them).
async fn process<R: Reconciler>(
    r: &Arc<R>,
    circuit: &Circuit<R::Key>,
    key: &R::Key,
) -> Option<FailureReport> {
    use tracing::Instrument as _;
    let trace = TraceId::new();
    let span = tracing::info_span!("sync", controller = %r.name(), parent = %key.log_name(), trace_id = %trace);
    let failure = in_trace(trace, process_in_span(r, circuit, key))
        .instrument(span.clone())
        .await;
    failure.map(|(object, message)| FailureReport {
        object,
        message,
        span,
    })
}

/// One sync; returns the failure to report on the version it read, if it failed.
async fn process_in_span<R: Reconciler>(
    r: &Arc<R>,
    circuit: &Circuit<R::Key>,
    key: &R::Key,
) -> Option<(Arc<Value>, String)> {
    let metrics = &r.context().wiring.metrics;
    let changed = r.queue().take_changed(key);
    match circuit.gate(key, changed, tokio::time::Instant::now()) {
        Gate::Run => {}
        Gate::Park => {
            tracing::debug!("hook circuit open: waiting for it to close");
            metrics.reconcile(r.name(), ReconcileResult::Parked, Duration::ZERO);
            return None;
        }
        Gate::Early(left) => {
            // an event brought the probe before its time: back at its time
            r.queue().add_after(key.clone(), left);
            metrics.reconcile(r.name(), ReconcileResult::Parked, Duration::ZERO);
            return None;
        }
    }
    let deadline = r.context().config.watch_sync_deadline;
    let synced = wait_for_watches(&r.watches(), deadline).await;
    // the version this sync reads: a failure is reported on it, not on a newer one cached while
    // the hook ran, whose reconcile request this sync never saw (it would be marked handled)
    let read = r.cached(key);
    let started = Instant::now();
    let cause = r.queue().take_cause(key);
    let result = match synced {
        Ok(()) => CAUSE.scope(cause_text(cause.clone()), r.sync(key)).await,
        Err(e) => Err(e),
    };
    metrics.reconcile(r.name(), reconcile_result(&result), started.elapsed());
    let outcome = match r.cached(key) {
        Some(_) => hook_outcome(&result),
        None => Outcome::Unrelated,
    };
    let parked = apply_circuit(r, circuit.record(key, outcome, tokio::time::Instant::now()));
    if outcome != Outcome::NotYet {
        r.queue().waited_out(key);
    }
    if changed && outcome == Outcome::NotYet {
        // the change has not reached the hook yet: its retry still runs past an open circuit
        r.queue().keep_changed(key.clone());
    }
    let class = result.as_ref().err().map(SyncError::class);
    match (result, class) {
        (Ok(after), _) => {
            r.queue().forget(key);
            let min = r.context().config.min_resync_after;
            if let Some(d) = after.map(|d| resync_delay(d, min)) {
                r.queue().resync_after(key.clone(), d);
            }
        }
        (Err(_), Some(FailureClass::HookRetryAfter(retry_after))) => {
            tracing::info!(?retry_after, "hook asked to retry later");
            r.queue().add_after(key.clone(), retry_after);
            // the sync that writes tells what brought it, not the wait
            keep_cause(r.as_ref(), key, cause);
        }
        (Err(e), Some(FailureClass::Wait)) => {
            // not a failure: the sync runs again on the waits' own short ladder
            tracing::debug!(reason = %e, "waiting; syncing again");
            r.queue().add_waiting(key.clone());
            keep_cause(r.as_ref(), key, cause);
        }
        (Err(e), _) => {
            // a parked key waits for the circuit instead of a backoff of its own
            let delay = (!parked).then(|| r.queue().add_rate_limited(key.clone()));
            tracing::warn!(error = %e, ?delay, "sync failed");
            return read.map(|obj| (obj, e.to_string()));
        }
    }
    None
}

/// What a sync's result says about the hook endpoint: only a failure to reach it (no connection,
/// TLS, a timeout) or a gateway's answer that it is unavailable (502, 503, 504) is evidence the
/// endpoint is down. Any other answer, a 500 included, is the hook failing on this parent's
/// input: that parent's own failure, as in Metacontroller.
fn hook_outcome(result: &Result<Option<Duration>, SyncError>) -> Outcome {
    match result.as_ref().map_err(SyncError::class) {
        Err(FailureClass::HookDown) => Outcome::HookDown,
        Err(FailureClass::HookFault | FailureClass::HookRetryAfter(_)) | Ok(_) => {
            Outcome::HookAnswered
        }
        Err(FailureClass::Wait) => Outcome::NotYet,
        Err(FailureClass::Failed) => Outcome::Unrelated,
    }
}

/// Acts on what the circuit decided; returns whether the key is parked (no backoff of its own).
fn apply_circuit<R: Reconciler>(r: &Arc<R>, effect: Effect<R::Key>) -> bool {
    match effect {
        Effect::None => false,
        Effect::Parked => true,
        Effect::Opened { probe, after } => {
            tracing::warn!(
                failures = circuit::OPEN_AFTER,
                probe_after = ?after,
                "hook circuit open: the hook keeps failing; one probe sync at a time until it answers"
            );
            r.context().wiring.metrics.hook_circuit(r.name(), true);
            r.queue().add_after(probe, after);
            true
        }
        Effect::Probe { probe, after } => {
            r.queue().add_after(probe, after);
            true
        }
        Effect::Closed(keys) => {
            tracing::info!(
                parents = keys.len(),
                "hook circuit closed: the hook answers again; syncing the parents that waited"
            );
            r.context().wiring.metrics.hook_circuit(r.name(), false);
            for (i, key) in keys.into_iter().enumerate() {
                r.queue().forget(&key);
                r.queue().add_after(key, circuit::recovery_delay(i));
            }
            false
        }
    }
}

/// Waits until every watch has finished its first list; `Err` is [`SyncError::WatchNotSynced`]
/// naming the first one that has not within `deadline`. A relist (410 Gone) never unsyncs a watch: its cache keeps
/// the old objects until the new list replaces them, so no sync sees an emptied cache.
pub async fn wait_for_watches(
    watches: &[Arc<dyn Watch>],
    deadline: Duration,
) -> Result<(), SyncError> {
    let until = tokio::time::Instant::now() + deadline;
    for w in watches {
        if w.is_synced() {
            continue;
        }
        if tokio::time::timeout_at(until, w.wait_synced())
            .await
            .is_err()
        {
            return Err(SyncError::WatchNotSynced(w.watch_key()));
        }
    }
    Ok(())
}

/// When to resync after a hook asked for `requested`: never sooner than `min`.
pub fn resync_delay(requested: Duration, min: Duration) -> Duration {
    requested.max(min)
}

/// The `result` label of a sync in `kmeta_reconcile_*` metrics.
fn reconcile_result(result: &Result<Option<Duration>, SyncError>) -> ReconcileResult {
    match result.as_ref().map_err(SyncError::class) {
        Ok(_) => ReconcileResult::Ok,
        Err(FailureClass::HookRetryAfter(_) | FailureClass::Wait) => ReconcileResult::Retry,
        Err(_) => ReconcileResult::Error,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hook::HookError;

    fn hook_status(code: u16) -> Result<Option<Duration>, SyncError> {
        Err(SyncError::Hook(HookError::Status {
            hook: "sync",
            url: "http://hook".into(),
            code,
            body: "boom".into(),
        }))
    }

    #[test]
    fn only_endpoint_failures_are_evidence_the_hook_is_down() {
        for code in [502, 503, 504] {
            assert_eq!(
                hook_outcome(&hook_status(code)),
                Outcome::HookDown,
                "{code}"
            );
        }
        for code in [500, 501, 400, 404, 422] {
            assert_eq!(
                hook_outcome(&hook_status(code)),
                Outcome::HookAnswered,
                "{code}"
            );
        }
        let refused = Err(SyncError::Hook(HookError::Transport {
            hook: "sync",
            url: "http://hook".into(),
            message: "cannot connect".into(),
        }));
        assert_eq!(hook_outcome(&refused), Outcome::HookDown);
        let in_process = Err(SyncError::Hook(HookError::InProcess {
            hook: "sync",
            message: "panicked".into(),
        }));
        assert_eq!(hook_outcome(&in_process), Outcome::HookAnswered);
        assert_eq!(hook_outcome(&Ok(None)), Outcome::HookAnswered);
        let wait = Err(SyncError::AwaitingWatch("a child".into()));
        assert_eq!(hook_outcome(&wait), Outcome::NotYet);
    }

    #[test]
    fn resync_after_has_a_floor() {
        let ms = Duration::from_millis;
        let floor = Duration::from_secs(1);
        assert_eq!(resync_delay(ms(1), floor), floor);
        assert_eq!(resync_delay(ms(5000), floor), ms(5000));
        assert_eq!(
            resync_delay(ms(1), MIN_RESYNC_AFTER),
            ms(1),
            "none by default"
        );
        assert_eq!(resync_delay(ms(1), Duration::ZERO), ms(1));
    }
}
