//! The manager: watches CompositeControllers and DecoratorControllers and runs one controller
//! per object (`CompositeRunner`, `DecoratorRunner`), restarting it when the spec changes
//! and stopping it when the object is deleted; refreshes discovery periodically so a controller
//! whose resources appear later starts without a restart. One generic loop serves both kinds
//! (`ControllerKind`).

use std::collections::HashMap;
use std::fmt::Debug;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use futures::StreamExt;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::api::{CompositeController, DecoratorController};
use crate::hook::jsonnet::SourceWatch;
use crate::ops::events::Reason;
use crate::reconcile::children::FieldRulesError;
use crate::reconcile::composite::{BuildError, CompositeRunner};
use crate::reconcile::core::{Context, ManagerConfig, SyncError, Wiring};
use crate::reconcile::decide;
use crate::reconcile::decorator::{self, DecoratorBuildError, DecoratorRunner};

/// The controller kinds the manager runs.
const KINDS: usize = 2;

/// What the manager needs of a controller kind: its object, how to build and run one controller
/// from it, and what to do when such an object is being deleted.
pub(crate) trait ControllerKind: Send + Sync + 'static {
    /// The controller object (`CompositeController`, `DecoratorController`).
    type Object: kube::Resource<DynamicType = ()>
        + Clone
        + Debug
        + DeserializeOwned
        + Serialize
        + Send
        + Sync
        + 'static;
    /// What a running controller is built from: a change restarts it.
    type Spec: PartialEq + Clone + Send + Sync + 'static;
    /// A running controller.
    type Runner: Send + Sync + 'static;
    /// Why one could not be built.
    type Error: std::fmt::Display + Send;
    /// The kind's name in logs, events and errors.
    const KIND: &'static str;
    /// The object's spec.
    fn spec(obj: &Self::Object) -> &Self::Spec;
    /// Resolves resources, starts watches, builds hooks.
    fn build(
        ctx: Arc<Context>,
        obj: Self::Object,
    ) -> impl Future<Output = Result<Self::Runner, Self::Error>> + Send;
    /// The event reason of a build failure.
    fn failure_reason(e: &Self::Error) -> Reason;
    /// Whether a build failure is a refused `fieldRules` path (the object then carries a
    /// `FieldRulesAccepted=False` condition).
    fn refuses_field_rules(e: &Self::Error) -> bool;
    /// Waits until the runner's watches have listed once.
    fn wait_synced(runner: Arc<Self::Runner>) -> impl Future<Output = ()> + Send;
    /// Runs the runner until `stop`.
    fn run(runner: Arc<Self::Runner>, stop: CancellationToken) -> impl Future<Output = ()> + Send;
    /// Whether a deleted (being-deleted) object needs [`ControllerKind::release`] before it
    /// goes away.
    fn needs_release(_obj: &Self::Object) -> bool {
        false
    }
    /// Whether an object being deleted (and not to be released) still runs its controller until
    /// it is gone (a CompositeController does, as in Metacontroller).
    fn runs_while_deleting(_obj: &Self::Object) -> bool {
        true
    }
    /// The ConfigMaps the object's Jsonnet hooks are read from: a change restarts it.
    fn jsonnet_config_maps(obj: &Self::Object) -> Vec<crate::api::JsonnetConfigMapRef>;
    /// Cleans up after a deleted object (its own finalizer is removed at the end).
    fn release(
        _ctx: Arc<Context>,
        _obj: Self::Object,
    ) -> impl Future<Output = Result<String, SyncError>> + Send {
        async { Ok(String::new()) }
    }
}

impl ControllerKind for CompositeController {
    type Object = CompositeController;
    type Spec = crate::api::CompositeControllerSpec;
    type Runner = CompositeRunner;
    type Error = BuildError;
    const KIND: &'static str = "CompositeController";
    fn spec(obj: &Self::Object) -> &Self::Spec {
        &obj.spec
    }
    async fn build(ctx: Arc<Context>, obj: Self::Object) -> Result<CompositeRunner, BuildError> {
        CompositeRunner::build(ctx, obj).await
    }
    fn failure_reason(e: &BuildError) -> Reason {
        match e {
            BuildError::NoStatusSubresource { .. } => Reason::SyncError,
            _ => Reason::CreateError,
        }
    }
    fn refuses_field_rules(e: &BuildError) -> bool {
        matches!(e, BuildError::FieldRules(FieldRulesError::Refused(_)))
    }
    async fn wait_synced(runner: Arc<CompositeRunner>) {
        runner.wait_watches_synced().await;
    }
    async fn run(runner: Arc<CompositeRunner>, stop: CancellationToken) {
        runner.run(stop).await;
    }
    fn jsonnet_config_maps(obj: &CompositeController) -> Vec<crate::api::JsonnetConfigMapRef> {
        obj.spec.jsonnet_config_maps()
    }
}

impl ControllerKind for DecoratorController {
    type Object = DecoratorController;
    type Spec = crate::api::DecoratorControllerSpec;
    type Runner = DecoratorRunner;
    type Error = DecoratorBuildError;
    const KIND: &'static str = "DecoratorController";
    fn spec(obj: &Self::Object) -> &Self::Spec {
        &obj.spec
    }
    async fn build(
        ctx: Arc<Context>,
        obj: Self::Object,
    ) -> Result<DecoratorRunner, DecoratorBuildError> {
        DecoratorRunner::build(ctx, obj).await
    }
    fn failure_reason(_: &DecoratorBuildError) -> Reason {
        Reason::CreateError
    }
    fn refuses_field_rules(e: &DecoratorBuildError) -> bool {
        matches!(
            e,
            DecoratorBuildError::FieldRules(FieldRulesError::Refused(_))
        )
    }
    async fn wait_synced(runner: Arc<DecoratorRunner>) {
        runner.wait_watches_synced().await;
    }
    async fn run(runner: Arc<DecoratorRunner>, stop: CancellationToken) {
        runner.run(stop).await;
    }
    fn jsonnet_config_maps(obj: &DecoratorController) -> Vec<crate::api::JsonnetConfigMapRef> {
        obj.spec.jsonnet_config_maps()
    }
    fn needs_release(obj: &DecoratorController) -> bool {
        decorator::needs_release(obj)
    }
    /// Not with a finalize hook: it would put finalizers on targets that no release removes.
    fn runs_while_deleting(obj: &DecoratorController) -> bool {
        obj.spec.hooks.as_ref().is_none_or(|h| h.finalize.is_none())
    }
    async fn release(ctx: Arc<Context>, obj: DecoratorController) -> Result<String, SyncError> {
        decorator::release_targets(&ctx, &obj)
            .await
            .map(|n| format!("Released {n} target(s) of the deleted DecoratorController"))
    }
}

struct Running<S> {
    spec: S,
    /// The controller object's annotations read when its controller is built —
    /// `kmeta.dev/paused`, `kmeta.dev/apply-strategy`, `kmeta.dev/last-applied` and
    /// `kmeta.dev/schema-atomic-lists` — as they were: a change restarts the controller, whose syncs then follow it (pause or resume
    /// every object, switch strategy, re-read the children's list rules).
    switches: Switches,
    stop: CancellationToken,
    /// Cancelled once the controller's task has returned (no sync in flight any more).
    finished: CancellationToken,
    /// This entry releases a deleted object instead of running a controller.
    releasing: bool,
}

/// The annotations of a controller object its controller reads when built.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Switches {
    /// `kmeta.dev/paused: "true"`.
    paused: bool,
    /// `kmeta.dev/apply-strategy`, as written.
    apply_strategy: Option<String>,
    /// `kmeta.dev/last-applied`, as written.
    last_applied: Option<String>,
    /// `kmeta.dev/schema-atomic-lists: "true"`.
    schema_atomic_lists: bool,
}

fn switches_of(obj: &impl Resource) -> Switches {
    let annotations = obj.meta().annotations.as_ref();
    Switches {
        paused: decide::paused(annotations),
        apply_strategy: annotations
            .and_then(|a| a.get(crate::reconcile::STRATEGY_ANNOTATION))
            .cloned(),
        last_applied: annotations
            .and_then(|a| a.get(crate::reconcile::apply::LAST_APPLIED_OPTION))
            .cloned(),
        schema_atomic_lists: crate::reconcile::children::schema_atomic_lists(annotations),
    }
}

fn obj_value<T: Serialize>(obj: &T) -> Value {
    serde_json::to_value(obj).unwrap_or(Value::Null)
}

/// Readiness: every kind's controller list has been read once and every controller started from
/// it has synced its watches (or failed to build, which is reported on its object instead).
#[derive(Debug)]
struct Readiness {
    unlisted: AtomicUsize,
    pending: AtomicUsize,
}

impl Readiness {
    fn new() -> Readiness {
        Readiness {
            unlisted: AtomicUsize::new(KINDS),
            pending: AtomicUsize::new(0),
        }
    }

    fn update(&self, flag: &AtomicBool) {
        if self.unlisted.load(Ordering::SeqCst) == 0 && self.pending.load(Ordering::SeqCst) == 0 {
            flag.store(true, Ordering::SeqCst);
        }
    }
}

/// Counts one initial controller as not yet synced until dropped.
struct PendingGuard {
    readiness: Arc<Readiness>,
    flag: Arc<AtomicBool>,
}

impl PendingGuard {
    fn new(readiness: &Arc<Readiness>, flag: &Arc<AtomicBool>) -> PendingGuard {
        readiness.pending.fetch_add(1, Ordering::SeqCst);
        PendingGuard {
            readiness: readiness.clone(),
            flag: flag.clone(),
        }
    }
}

impl Drop for PendingGuard {
    fn drop(&mut self) {
        self.readiness.pending.fetch_sub(1, Ordering::SeqCst);
        self.readiness.update(&self.flag);
    }
}

/// Runs one controller object until `stop`: builds its controller (retrying with
/// [`retry_delay`] while resources are missing or the object is unusable, with a Warning event on the
/// object whenever the reason changes), then runs it. Cancels `finished` when it returns.
async fn run_one<K: ControllerKind>(
    ctx: Arc<Context>,
    obj: K::Object,
    stop: CancellationToken,
    pending: Option<PendingGuard>,
    finished: CancellationToken,
) {
    let _finished = finished.drop_guard();
    let mut pending = pending;
    let name = obj.meta().name.clone().unwrap_or_default();
    let value = with_type::<K>(obj_value(&obj));
    let mut last_error = String::new();
    let mut failures = 0u32;
    loop {
        // watched from before the build reads them: an edit after it restarts the controller
        let mut sources = SourceWatch::start(&ctx.client, &K::jsonnet_config_maps(&obj)).await;
        match K::build(ctx.clone(), obj.clone()).await {
            Ok(runner) => {
                failures = 0;
                let runner = Arc::new(runner);
                if let Some(guard) = pending.take() {
                    let waiting = runner.clone();
                    tokio::spawn(async move {
                        K::wait_synced(waiting).await;
                        drop(guard);
                    });
                }
                field_rules_condition::<K>(&ctx, &value, None).await;
                tracing::info!(kind = K::KIND, controller = %name, "started");
                let started = format!("Started controller: {name}");
                ctx.event(&value, Reason::Started, started).await;
                let run_stop = stop.child_token();
                let run = K::run(runner, run_stop.clone());
                tokio::pin!(run);
                let changed = tokio::select! {
                    () = &mut run => false,
                    () = sources.changed() => true,
                };
                if changed {
                    // every parent is synced again by the rebuilt controller's first list
                    run_stop.cancel();
                    run.await;
                    tracing::info!(kind = K::KIND, controller = %name, "a Jsonnet hook's ConfigMap changed; restarting");
                    let note = format!(
                        "Stopped controller: {name} (a Jsonnet hook's ConfigMap changed; restarting)"
                    );
                    ctx.event(&value, Reason::Stopped, note).await;
                    last_error.clear();
                    continue;
                }
                tracing::info!(kind = K::KIND, controller = %name, "stopped");
                let stopped = format!("Stopped controller: {name}");
                ctx.event(&value, Reason::Stopped, stopped).await;
                return;
            }
            Err(e) => {
                pending = None;
                failures = failures.saturating_add(1);
                let msg = e.to_string();
                if msg != last_error {
                    let (reason, refuses) = (K::failure_reason(&e), K::refuses_field_rules(&e));
                    report_start_failure::<K>(&ctx, &value, (reason, refuses), &msg).await;
                    last_error = msg;
                }
            }
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            () = sources.changed() => {}
            _ = tokio::time::sleep(retry_delay(failures, ctx.config.discovery_interval)) => {
                if let Err(e) = ctx.resources.refresh(ctx.discovery_client()).await {
                    tracing::warn!(error = %e, "discovery refresh failed");
                }
            }
        }
    }
}

/// Reports a failed start of the controller object `value` (`msg`: the error as text, with the
/// kind's event reason for it and whether it refuses the field rules): a warning in the log, a
/// Warning event, and the field rules condition.
async fn report_start_failure<K: ControllerKind>(
    ctx: &Context,
    value: &Value,
    (reason, refuses): (Reason, bool),
    msg: &str,
) {
    let name = crate::object::meta_str(value, "name");
    tracing::warn!(kind = K::KIND, controller = %name, error = %msg, "cannot start controller; retrying");
    let note = format!("Cannot start controller: {msg}");
    ctx.event(value, reason, note).await;
    let refused = refuses.then_some(msg);
    field_rules_condition::<K>(ctx, value, refused).await;
}

/// Sets or clears the `FieldRulesAccepted=False` condition of the controller object `value`
/// (`refused`: the message naming the refused path), when its status says otherwise: a merge
/// patch of its `status`. A failure is logged (the `CreateError` event names the path too).
async fn field_rules_condition<K: ControllerKind>(
    ctx: &Context,
    value: &Value,
    refused: Option<&str>,
) {
    let now = crate::reconcile::status::now_to_the_second();
    let Some(conditions) = decide::field_rules_conditions(value.get("status"), refused, &now)
    else {
        return;
    };
    let name = crate::object::meta_str(value, "name");
    let api: Api<K::Object> = Api::all(ctx.client.clone());
    let patch = serde_json::json!({"status": {"conditions": conditions}});
    let params = kube::api::PatchParams::default();
    if let Err(e) = api
        .patch_status(name, &params, &kube::api::Patch::Merge(&patch))
        .await
    {
        tracing::warn!(kind = K::KIND, controller = %name, error = %e, "writing the FieldRulesAccepted condition");
    }
}

/// The object as JSON with its apiVersion and kind (events need both).
fn with_type<K: ControllerKind>(mut v: Value) -> Value {
    if let Some(m) = v.as_object_mut() {
        let av = format!("{}/{}", crate::api::GROUP, crate::api::VERSION);
        m.insert("apiVersion".into(), Value::String(av));
        m.insert("kind".into(), Value::String(K::KIND.into()));
    }
    v
}

/// The first wait before a failed start or release is tried again: half a second, doubled
/// after each failure up to the discovery interval (30 s by default, Metacontroller's
/// `--discovery-interval`). Most such failures pass within seconds (a CRD being established, a
/// shard bucket not yet acquired, another replica's release); Metacontroller requeues a
/// controller object that failed to sync with a rate-limited backoff too, not after a fixed
/// interval.
const FIRST_RETRY: std::time::Duration = std::time::Duration::from_millis(500);

/// How long to wait after the `failures`-th failure in a row (1 for the first) before trying
/// again: [`FIRST_RETRY`] doubled per earlier failure, at most `cap`.
fn retry_delay(failures: u32, cap: std::time::Duration) -> std::time::Duration {
    let doublings = failures.saturating_sub(1).min(16);
    FIRST_RETRY.saturating_mul(1 << doublings).min(cap)
}

/// Releases what a deleted controller object holds ([`ControllerKind::release`]) once its
/// controller has stopped (`stopped`), retrying with [`retry_delay`] until it succeeds or
/// `stop`; a failure is a Warning event on the object.
async fn release_one<K: ControllerKind>(
    ctx: Arc<Context>,
    obj: K::Object,
    stopped: CancellationToken,
    stop: CancellationToken,
) {
    tokio::select! {
        _ = stop.cancelled() => return,
        _ = stopped.cancelled() => {}
    }
    let name = obj.meta().name.clone().unwrap_or_default();
    let value = with_type::<K>(obj_value(&obj));
    let mut failures = 0u32;
    loop {
        match K::release(ctx.clone(), obj.clone()).await {
            Ok(note) => {
                tracing::info!(kind = K::KIND, controller = %name, "{note}");
                ctx.event(&value, Reason::Released, note).await;
                return;
            }
            Err(e) => {
                failures = failures.saturating_add(1);
                tracing::warn!(kind = K::KIND, controller = %name, error = %e, "releasing after deletion failed; retrying");
                let note = format!("Cannot release after deletion: {e}");
                ctx.event(&value, Reason::ReleaseError, note).await;
            }
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(retry_delay(failures, ctx.config.discovery_interval)) => {}
        }
    }
}

/// Runs the manager until `stop` is cancelled: one watch loop per controller kind.
pub async fn run(
    client: kube::Client,
    config: ManagerConfig,
    stop: CancellationToken,
) -> Result<(), kube::Error> {
    run_wired(client, config, Wiring::default(), stop).await
}

/// As [`run`], sharing `wiring` (metrics, readiness, extra clients, the work scope) with the
/// process around the manager.
pub async fn run_wired(
    client: kube::Client,
    config: ManagerConfig,
    wiring: Wiring,
    stop: CancellationToken,
) -> Result<(), kube::Error> {
    let ctx = Context::wired(client.clone(), config, wiring);
    if let Err(e) = ctx.resources.refresh(ctx.discovery_client()).await {
        tracing::warn!(error = %e, "initial discovery failed; retrying in the background");
    }
    {
        let ctx = ctx.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(ctx.config.discovery_interval) => {}
                }
                if let Err(e) = ctx.resources.refresh(ctx.discovery_client()).await {
                    tracing::warn!(error = %e, "discovery refresh failed");
                }
            }
        });
    }
    tokio::spawn(count_watched(ctx.clone(), stop.clone()));
    let readiness = Arc::new(Readiness::new());
    tokio::join!(
        watch_kind::<CompositeController>(&ctx, &readiness, &stop),
        watch_kind::<DecoratorController>(&ctx, &readiness, &stop),
    );
    ctx.wiring.ready.store(false, Ordering::SeqCst);
    Ok(())
}

/// Every [`WATCH_COUNT_PERIOD`], sets `kmeta_watch_objects` and `kmeta_watch_streams` from the
/// watches; a watch that stopped (its controller deleted, its resource gone) loses its series.
async fn count_watched(ctx: Arc<Context>, stop: CancellationToken) {
    let mut shown = std::collections::HashSet::new();
    loop {
        let mut now = std::collections::HashSet::new();
        for w in ctx.informers.sizes() {
            let metrics = &ctx.wiring.metrics;
            metrics.watch_objects(&w.resource, w.sharded, w.objects);
            metrics.watch_streams(&w.resource, w.sharded, w.streams);
            now.insert((w.resource, w.sharded));
        }
        for (resource, sharded) in shown.difference(&now) {
            ctx.wiring.metrics.forget_watch(resource, *sharded);
        }
        shown = now;
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(WATCH_COUNT_PERIOD) => {}
        }
    }
}

/// How often `kmeta_watch_objects` is brought up to date: 5 s (kmeta's; a scrape is usually
/// every 15 s or more).
const WATCH_COUNT_PERIOD: std::time::Duration = std::time::Duration::from_secs(5);

/// The running controllers of one kind, by object name, and the tasks running them.
struct Controllers<K: ControllerKind> {
    ctx: Arc<Context>,
    tasks: tokio::task::JoinSet<()>,
    running: HashMap<String, Running<K::Spec>>,
    stop: CancellationToken,
}

/// Watches the controller objects of kind `K` (those matching the target label selector) and
/// keeps one controller running per object until `stop`.
async fn watch_kind<K: ControllerKind>(
    ctx: &Arc<Context>,
    readiness: &Arc<Readiness>,
    stop: &CancellationToken,
) {
    let api: Api<K::Object> = Api::all(ctx.client.clone());
    let mut wc = watcher::Config::default();
    if let Some(sel) = &ctx.config.target_label_selector {
        wc = wc.labels(sel);
    }
    let mut stream = watcher::watcher(api, wc).default_backoff().boxed();
    let mut c = Controllers::<K> {
        ctx: ctx.clone(),
        tasks: tokio::task::JoinSet::new(),
        running: HashMap::new(),
        stop: stop.clone(),
    };
    let mut listed: Vec<K::Object> = Vec::new();
    let mut first = true;
    loop {
        let ev = tokio::select! {
            _ = stop.cancelled() => break,
            ev = stream.next() => ev,
        };
        let Some(ev) = ev else { break };
        while c.tasks.try_join_next().is_some() {}
        match ev {
            Ok(Event::Apply(obj)) => c.upsert(obj, None),
            Ok(Event::Delete(obj)) => c.remove(&obj.meta().name.clone().unwrap_or_default()),
            Ok(Event::Init) => listed.clear(),
            Ok(Event::InitApply(obj)) => listed.push(obj),
            Ok(Event::InitDone) => {
                c.replace(std::mem::take(&mut listed), first.then_some(readiness));
                if std::mem::take(&mut first) {
                    readiness.unlisted.fetch_sub(1, Ordering::SeqCst);
                }
                readiness.update(&ctx.wiring.ready);
            }
            Err(e) => tracing::warn!(kind = K::KIND, error = %e, "controller watch error"),
        }
    }
    for r in c.running.values() {
        r.stop.cancel();
    }
    while c.tasks.join_next().await.is_some() {}
}

impl<K: ControllerKind> Controllers<K> {
    /// After a (re)list: stops controllers whose object is gone, starts or restarts the others
    /// (counted as pending for readiness on the first list).
    fn replace(&mut self, listed: Vec<K::Object>, readiness: Option<&Arc<Readiness>>) {
        let names: Vec<String> = listed
            .iter()
            .filter_map(|o| o.meta().name.clone())
            .collect();
        self.running.retain(|n, r| {
            let keep = names.contains(n);
            if !keep {
                r.stop.cancel();
            }
            keep
        });
        for obj in listed {
            let guard = readiness.map(|r| PendingGuard::new(r, &self.ctx.wiring.ready));
            self.upsert(obj, guard);
        }
    }

    fn remove(&mut self, name: &str) {
        if let Some(r) = self.running.remove(name) {
            r.stop.cancel();
        }
    }

    /// Starts the controller of `obj`, restarts it when its spec changed, or — once the object
    /// is being deleted and needs it — stops it and releases what it holds.
    fn upsert(&mut self, obj: K::Object, pending: Option<PendingGuard>) {
        let name = obj.meta().name.clone().unwrap_or_default();
        let releasing = K::needs_release(&obj);
        // released once: never run again, whatever still holds the object
        if let Some(r) = self.running.get(&name)
            && (r.releasing
                || (!releasing && r.spec == *K::spec(&obj) && r.switches == switches_of(&obj)))
        {
            return;
        }
        let deleting = obj.meta().deletion_timestamp.is_some();
        if deleting && !releasing && !K::runs_while_deleting(&obj) {
            self.remove(&name);
            return;
        }
        let stopped = match self.running.remove(&name) {
            Some(old) => {
                old.stop.cancel();
                old.finished
            }
            None => cancelled(),
        };
        let stop = self.stop.child_token();
        let finished = CancellationToken::new();
        self.running.insert(
            name,
            Running {
                spec: K::spec(&obj).clone(),
                switches: switches_of(&obj),
                stop: stop.clone(),
                finished: finished.clone(),
                releasing,
            },
        );
        let ctx = self.ctx.clone();
        if releasing {
            // a release runs no controller: nothing to wait for
            finished.cancel();
            self.tasks.spawn(release_one::<K>(ctx, obj, stopped, stop));
        } else {
            self.tasks
                .spawn(run_one::<K>(ctx, obj, stop, pending, finished));
        }
    }
}

/// A token already cancelled (nothing to wait for).
fn cancelled() -> CancellationToken {
    let t = CancellationToken::new();
    t.cancel();
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn retries_start_at_half_a_second_and_double_up_to_the_discovery_interval() {
        let cap = Duration::from_secs(30);
        let waits: Vec<u64> = (1..=9)
            .map(|n| retry_delay(n, cap).as_millis() as u64)
            .collect();
        assert_eq!(
            waits,
            [
                500, 1_000, 2_000, 4_000, 8_000, 16_000, 30_000, 30_000, 30_000
            ]
        );
        // a shorter interval (`kmeta dev`'s 2 s) caps sooner; many failures never overflow
        assert_eq!(
            retry_delay(3, Duration::from_secs(2)),
            Duration::from_secs(2)
        );
        assert_eq!(retry_delay(u32::MAX, cap), cap);
        assert_eq!(retry_delay(0, cap), FIRST_RETRY);
    }
}
