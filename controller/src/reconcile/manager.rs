//! The manager: watches CompositeControllers and runs one [`ParentController`] per CC,
//! restarting it when the spec changes and stopping it when the CC is deleted; refreshes
//! discovery periodically so a CC whose parent CRD appears later starts without a restart.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use futures::StreamExt;
use kube::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::api::{CompositeController, CompositeControllerSpec};
use crate::reconcile::composite::{BuildError, ParentController};
use crate::reconcile::core::{Context, ManagerConfig};

struct Running {
    spec: CompositeControllerSpec,
    stop: CancellationToken,
}

fn cc_value(cc: &CompositeController) -> Value {
    serde_json::to_value(cc).unwrap_or(Value::Null)
}

/// Readiness: the CompositeController list has been read once and every controller started from
/// it has synced its watches (or failed to build, which is reported on the CC instead).
#[derive(Debug, Default)]
struct Readiness {
    listed: AtomicBool,
    pending: AtomicUsize,
}

impl Readiness {
    fn update(&self, flag: &AtomicBool) {
        if self.listed.load(Ordering::SeqCst) && self.pending.load(Ordering::SeqCst) == 0 {
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

/// Runs one CC until `stop`: builds its controller (retrying every discovery interval while
/// resources are missing or the parent lacks a status subresource), then runs it.
async fn run_cc(
    ctx: Arc<Context>,
    cc: CompositeController,
    stop: CancellationToken,
    pending: Option<PendingGuard>,
) {
    let mut pending = pending;
    let name = cc.metadata.name.clone().unwrap_or_default();
    let obj = cc_value(&cc);
    let mut last_error = String::new();
    loop {
        match ParentController::build(ctx.clone(), cc.clone()).await {
            Ok(pc) => {
                let pc = Arc::new(pc);
                if let Some(guard) = pending.take() {
                    let waiting = pc.clone();
                    tokio::spawn(async move {
                        waiting.wait_watches_synced().await;
                        drop(guard);
                    });
                }
                tracing::info!(controller = %name, "started");
                ctx.event(
                    &obj,
                    false,
                    "Started",
                    format!("Started controller: {name}"),
                )
                .await;
                pc.run(stop.clone()).await;
                tracing::info!(controller = %name, "stopped");
                ctx.event(
                    &obj,
                    false,
                    "Stopped",
                    format!("Stopped controller: {name}"),
                )
                .await;
                return;
            }
            Err(e) => {
                pending = None;
                let msg = e.to_string();
                if msg != last_error {
                    tracing::warn!(controller = %name, error = %msg, "cannot start controller; retrying");
                    let reason = match e {
                        BuildError::NoStatusSubresource { .. } => "SyncError",
                        _ => "CreateError",
                    };
                    ctx.event(
                        &obj,
                        true,
                        reason,
                        format!("Cannot start controller: {msg}"),
                    )
                    .await;
                    last_error = msg;
                }
            }
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(ctx.config.discovery_interval) => {
                if let Err(e) = ctx.resources.refresh(&ctx.client).await {
                    tracing::warn!(error = %e, "discovery refresh failed");
                }
            }
        }
    }
}

/// Runs the manager until `stop` is cancelled.
pub async fn run(
    client: kube::Client,
    config: ManagerConfig,
    stop: CancellationToken,
) -> Result<(), kube::Error> {
    let ctx = Context::new(client.clone(), config);
    if let Err(e) = ctx.resources.refresh(&client).await {
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
                if let Err(e) = ctx.resources.refresh(&ctx.client).await {
                    tracing::warn!(error = %e, "discovery refresh failed");
                }
            }
        });
    }
    let api: Api<CompositeController> = Api::all(client);
    let mut wc = watcher::Config::default();
    if let Some(sel) = &ctx.config.target_label_selector {
        wc = wc.labels(sel);
    }
    let mut stream = watcher::watcher(api, wc).default_backoff().boxed();
    let readiness = Arc::new(Readiness::default());
    let mut tasks = tokio::task::JoinSet::new();
    let mut running: HashMap<String, Running> = HashMap::new();
    let mut listed: Vec<CompositeController> = Vec::new();
    loop {
        let ev = tokio::select! {
            _ = stop.cancelled() => break,
            ev = stream.next() => ev,
        };
        let Some(ev) = ev else { break };
        while tasks.try_join_next().is_some() {}
        match ev {
            Ok(Event::Apply(cc)) => upsert(&ctx, &mut tasks, &mut running, cc, None),
            Ok(Event::Delete(cc)) => {
                if let Some(r) = running.remove(&cc.metadata.name.clone().unwrap_or_default()) {
                    r.stop.cancel();
                }
            }
            Ok(Event::Init) => listed.clear(),
            Ok(Event::InitApply(cc)) => listed.push(cc),
            Ok(Event::InitDone) => {
                let names: Vec<String> = listed
                    .iter()
                    .filter_map(|c| c.metadata.name.clone())
                    .collect();
                running.retain(|n, r| {
                    let keep = names.contains(n);
                    if !keep {
                        r.stop.cancel();
                    }
                    keep
                });
                let first = !readiness.listed.load(Ordering::SeqCst);
                for cc in std::mem::take(&mut listed) {
                    let guard = first.then(|| PendingGuard::new(&readiness, &ctx.config.ready));
                    upsert(&ctx, &mut tasks, &mut running, cc, guard);
                }
                readiness.listed.store(true, Ordering::SeqCst);
                readiness.update(&ctx.config.ready);
            }
            Err(e) => tracing::warn!(error = %e, "compositecontroller watch error"),
        }
    }
    for r in running.values() {
        r.stop.cancel();
    }
    ctx.config.ready.store(false, Ordering::SeqCst);
    while tasks.join_next().await.is_some() {}
    Ok(())
}

fn upsert(
    ctx: &Arc<Context>,
    tasks: &mut tokio::task::JoinSet<()>,
    running: &mut HashMap<String, Running>,
    cc: CompositeController,
    pending: Option<PendingGuard>,
) {
    let name = cc.metadata.name.clone().unwrap_or_default();
    if running.get(&name).is_some_and(|r| r.spec == cc.spec) {
        return;
    }
    if let Some(old) = running.remove(&name) {
        old.stop.cancel();
    }
    let stop = CancellationToken::new();
    running.insert(
        name,
        Running {
            spec: cc.spec.clone(),
            stop: stop.clone(),
        },
    );
    tasks.spawn(run_cc(ctx.clone(), cc, stop, pending));
}
