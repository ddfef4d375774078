//! The triggers that turn watch events and timers into queued keys, and the set every
//! controller kind shares: relists, the resync period, shard buckets gained and related
//! objects ([`Triggers::for_parents`], [`listen_related`]). A kind supplies only how to list
//! its parents and test one ([`Parents`]); its own watch events (a parent changed, a child's
//! owner) stay with it.
//!
//! Both kinds take the same path on each shared trigger, as Metacontroller's two kinds do (their
//! informer resync and relist both reach `updateParentObject`): a relist and a resync schedule
//! every parent at low priority (a parent already scheduled, for a change or for the retry after
//! its backoff, keeps its schedule, and a resync is not a change, so it does not pass an open
//! hook circuit); a gained shard bucket and a related object's change are changes
//! (`docs/design/metacontroller-contract.md`).

use std::future::Future;
use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::sync::broadcast::{self, error::RecvError};
use tokio::task::JoinSet;

use crate::ops::metrics::Metrics;
use crate::reconcile::core::{Context, Reconciler};
use crate::reconcile::memory::ChildMemory;
use crate::reconcile::related::{self, Used};
use crate::runtime::cache::{Change, Form, Informer};
use crate::runtime::resources::Resolved;

/// How widely the resync after a relist spreads its parents: 2 s (kmeta's), so a relist does not
/// become one burst of hook calls.
pub const RELIST_RESYNC_SPREAD: Duration = Duration::from_secs(2);

/// A controller's `resyncPeriodSeconds` as a period: at least 1 s (Metacontroller raises a
/// shorter one to 1 s); none when unset.
pub fn resync_period(seconds: Option<i32>) -> Option<Duration> {
    seconds.map(|s| Duration::from_secs(u64::from(s.max(1).unsigned_abs())))
}

/// What a controller kind tells the shared triggers about its parents (a DecoratorController's
/// targets).
pub trait Parents: Reconciler {
    /// The keys of the cached parents this controller reconciles (a DecoratorController: the
    /// objects its selector makes targets) that `mine` accepts.
    fn parents_where(&self, mine: ParentTest<'_>) -> Vec<Self::Key>;
    /// How many such parents `mine` accepts, counted in place.
    fn count_where(&self, mine: ParentTest<'_>) -> usize;
    /// What the controller remembers of its parents' syncs (the customize hook's answers name
    /// the related resources each parent reads).
    fn memory(&self) -> &ChildMemory;
}

/// Every parent `mine` accepts, scheduled as a change.
fn enqueue_where<R: Parents>(r: &R, mine: ParentTest<'_>) {
    for key in r.parents_where(mine) {
        r.queue().add(key);
    }
}

/// Every parent, scheduled as a resync (low priority) after `delay` of each.
fn resync_all<R: Parents>(r: &R, mut delay: impl FnMut() -> Duration) {
    for key in r.parents_where(&|_, _| true) {
        r.queue().resync_after(key, delay());
    }
}

/// After a relist of a watch the controller reads (410 Gone, `--cache-flush-interval`): every
/// parent as a resync spread over up to [`RELIST_RESYNC_SPREAD`], so state lost to a missed
/// event (a child deleted unseen) converges within one interval, as Metacontroller's informer
/// resync does, without one burst of hook calls.
fn resync_after_relist<R: Parents>(r: &R) {
    use rand::Rng as _;
    let mut rng = rand::rng();
    let spread = RELIST_RESYNC_SPREAD.as_millis() as u64;
    resync_all(r, || Duration::from_millis(rng.random_range(0..=spread)));
}

/// Listens to the related watches a sync of `r` subscribed to first, for as long as `r` exists:
/// a change of a related resource schedules the parents whose cached customize answers read it.
pub fn listen_related<R: Parents>(r: &Arc<R>, used: Used) {
    for (resolved, rx) in used.subscribed {
        let weak: Weak<R> = Arc::downgrade(r);
        tokio::spawn(listen(weak, resolved, rx));
    }
}

async fn listen<R: Parents>(
    weak: Weak<R>,
    resolved: Resolved,
    mut rx: broadcast::Receiver<Change>,
) {
    while rx.recv().await.is_ok() || !rx.is_empty() {
        let Some(r) = weak.upgrade() else { break };
        let uids = related::parents_reading(&r.memory().customize_cache, &resolved);
        if !uids.is_empty() {
            enqueue_where(r.as_ref(), &|_, uid| uids.contains(uid));
        }
    }
}

/// The tasks that turn watch events and timers into queued keys; aborted when the controller
/// stops.
#[derive(Default)]
pub struct Triggers {
    tasks: JoinSet<()>,
}

impl Triggers {
    /// The triggers every kind shares, for the parents of `r`: the first list of the parents
    /// enqueues none (the kind's start does), every later list of any watch `r` reads resyncs
    /// every parent ([`RELIST_RESYNC_SPREAD`]), `resync_period` (the controller's
    /// `resyncPeriodSeconds`) resyncs every parent, and under `--sharding` the parents of gained
    /// buckets are enqueued and `kmeta_shard_parents` counted.
    pub fn for_parents<R: Parents>(r: &Arc<R>, resync_period: Option<Duration>) -> Triggers {
        let mut t = Triggers::default();
        for inf in r.watches() {
            let r = r.clone();
            let mut lists = inf.lists();
            t.spawn(async move {
                // the first list is the start, which enqueues every parent already
                if lists.wait_for(|n| *n >= 1).await.is_err() {
                    return;
                }
                lists.borrow_and_update();
                while lists.changed().await.is_ok() {
                    resync_after_relist(r.as_ref());
                }
            });
        }
        if let Some(period) = resync_period {
            let r = r.clone();
            t.every(period, move || resync_all(r.as_ref(), || Duration::ZERO));
        }
        let ctx = r.context().clone();
        let gains = r.clone();
        t.on_shard_gains(&ctx, move |gained| enqueue_where(gains.as_ref(), gained));
        let count = r.clone();
        t.count_shard_parents(&ctx, r.name(), move |mine| count.count_where(mine));
        t
    }

    /// Calls `on_change` for every change `informer` broadcasts from now on, and `on_lag` when
    /// changes were missed (the handler fell behind): the owner then enqueues everything.
    pub fn watch<T: Form>(
        &mut self,
        informer: &Informer<T>,
        on_change: impl Fn(&Change<T>) + Send + 'static,
        on_lag: impl Fn() + Send + 'static,
    ) {
        self.watch_receiver(informer.subscribe(), on_change, on_lag);
    }

    /// As [`Triggers::watch`], for a receiver subscribed earlier (no change since is lost).
    pub fn watch_receiver<T: Form>(
        &mut self,
        mut rx: broadcast::Receiver<Change<T>>,
        on_change: impl Fn(&Change<T>) + Send + 'static,
        on_lag: impl Fn() + Send + 'static,
    ) {
        self.tasks.spawn(async move {
            loop {
                match rx.recv().await {
                    Ok(c) => on_change(&c),
                    Err(RecvError::Lagged(_)) => on_lag(),
                    Err(RecvError::Closed) => break,
                }
            }
        });
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

    /// Under `--sharding`, sets `kmeta_shard_parents{controller}` now and every
    /// [`SHARD_COUNT_PERIOD`] to what `count` answers for a test of a parent: true where this
    /// replica works on the parent's bucket. The series goes with the controller.
    pub fn count_shard_parents(
        &mut self,
        ctx: &Context,
        controller: &str,
        count: impl Fn(ParentTest<'_>) -> usize + Send + 'static,
    ) {
        let Some(shards) = ctx.config.shards.clone() else {
            return;
        };
        let series = ShardParentsSeries {
            metrics: ctx.config.metrics.clone(),
            controller: controller.to_owned(),
        };
        // the series lives in the ticking closure: dropped with it when the controller stops
        let tick = move || {
            let n = count(&|ns: &str, uid: &str| shards.works_on(ns, Some(uid)));
            series.metrics.shard_parents(&series.controller, n);
        };
        tick();
        self.every(SHARD_COUNT_PERIOD, tick);
    }

    /// Under `--sharding`, whenever this replica gains shard buckets (their parents are now
    /// this replica's work; keys of other buckets are dropped by the workers), calls `enqueue`
    /// with a test of a parent: true for the parents of the buckets gained.
    pub fn on_shard_gains(
        &mut self,
        ctx: &Context,
        enqueue: impl Fn(ParentTest<'_>) + Send + 'static,
    ) {
        let Some(shards) = ctx.config.shards.clone() else {
            return;
        };
        let mut gains = shards.subscribe_gains();
        gains.borrow_and_update();
        let mut seen = shards.work_epochs();
        self.tasks.spawn(async move {
            while gains.changed().await.is_ok() {
                gains.borrow_and_update();
                let gained = shards.gained_since(&mut seen);
                if !gained.is_empty() {
                    enqueue(&|ns: &str, uid: &str| {
                        shards
                            .bucket_of_parent(ns, Some(uid))
                            .is_some_and(|b| gained.contains(&b))
                    });
                }
            }
        });
    }

    /// Runs `task` until the controller stops.
    pub fn spawn(&mut self, task: impl Future<Output = ()> + Send + 'static) {
        self.tasks.spawn(task);
    }

    pub(crate) async fn stop(mut self) {
        self.tasks.abort_all();
        while self.tasks.join_next().await.is_some() {}
    }
}

/// How often `kmeta_shard_parents` is counted: 5 s (kmeta's, as `kmeta_watch_objects`).
const SHARD_COUNT_PERIOD: Duration = Duration::from_secs(5);

/// A controller's `kmeta_shard_parents` series, removed when its counting closure is dropped
/// (the controller stopped).
struct ShardParentsSeries {
    metrics: Arc<Metrics>,
    controller: String,
}

impl Drop for ShardParentsSeries {
    fn drop(&mut self) {
        self.metrics.forget_shard_parents(&self.controller);
    }
}

/// A test of a parent (or a DecoratorController's target) by its namespace and uid: whether it
/// belongs to the shard buckets in question.
pub type ParentTest<'a> = &'a dyn Fn(&str, &str) -> bool;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_resync_period_is_at_least_a_second_as_in_metacontroller() {
        assert_eq!(resync_period(None), None);
        assert_eq!(resync_period(Some(0)), Some(Duration::from_secs(1)));
        assert_eq!(resync_period(Some(-5)), Some(Duration::from_secs(1)));
        assert_eq!(resync_period(Some(30)), Some(Duration::from_secs(30)));
    }
}
