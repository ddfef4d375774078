//! The triggers that turn watch events and timers into queued keys, and the set every
//! controller kind shares: relists, the resync period, parents gained by this process's
//! [`WorkScope`](crate::coord::scope::WorkScope) and related objects ([`for_parents`], [`listen_related`]). A kind supplies only how to list
//! its parents and test one ([`Parents`]); its own watch events (a parent changed, a child's
//! owner) stay with it.
//!
//! Both kinds take the same path on each shared trigger, as Metacontroller's two kinds do (their
//! informer resync and relist both reach `updateParentObject`): a relist and a resync schedule
//! every parent at low priority (a parent already scheduled, for a change or for the retry after
//! its backoff, keeps its schedule, and a resync is not a change, so it does not pass an open
//! hook circuit); parents gained by the work scope and a related object's change are changes,
//! the gained ones at low priority like the controller's start (every parent at once;
//! `docs/design/metacontroller-contract.md`, `docs/design/queue-priority.md`). The cache flush
//! (`--cache-flush-interval`) is Metacontroller's informer resync: every cached parent synced
//! again from the cache, the watches kept open, at low priority and counted as a change like the
//! start ([`flush_one`]); a child's or related object's watch schedules nothing for it
//! (Metacontroller drops an update that keeps the resourceVersion: `onChildUpdate`).

use std::hash::Hash;
use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::sync::broadcast;

pub use crate::coord::scope::ParentTest;
use crate::reconcile::core::Reconciler;
pub use crate::reconcile::core::Triggers;
use crate::reconcile::memory::ChildMemory;
use crate::reconcile::related::{self, Used};
use crate::runtime::cache::{Change, Watch};
use crate::runtime::queue::{Cause, Priority, Queue, Tenant};
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
    /// The watches of the parents themselves (a DecoratorController: of its targets), whose
    /// relist resyncs every parent.
    fn parent_watches(&self) -> Vec<Arc<dyn Watch>>;
}

/// Every parent `mine` accepts, scheduled as a change at `priority`.
fn enqueue_where<R: Parents>(r: &R, mine: ParentTest<'_>, cause: &Cause, priority: Priority) {
    for key in r.parents_where(mine) {
        r.queue().add_at(key, Some(cause.clone()), priority);
    }
}

/// What the cache flush (`--cache-flush-interval`) schedules for one cached parent: a sync now,
/// at [`Priority::Low`] (a person's edit made meanwhile is handed out before the flush's keys),
/// counted as a change like the controller's start, so it runs past an open hook circuit and
/// cuts a backoff short, as Metacontroller's informer resync (`OnUpdate(obj, obj)` into
/// `updateParentObject`, a plain `queue.Add`) syncs every parent whatever its last sync did.
pub fn flush_one<K: Clone + Eq + Hash + Tenant>(queue: &Queue<K>, key: K) {
    queue.add_at(key, Some(Cause::Flush), Priority::Low);
}

/// The cache flush: every cached parent, once ([`flush_one`]).
fn flush_all<R: Parents>(r: &R) {
    for key in r.parents_where(&|_, _| true) {
        flush_one(r.queue(), key);
    }
}

/// Every parent, scheduled as a resync (low priority) after `delay` of each.
fn resync_all<R: Parents>(r: &R, cause: &Cause, mut delay: impl FnMut() -> Duration) {
    for key in r.parents_where(&|_, _| true) {
        r.queue().resync_because(key, delay(), cause.clone());
    }
}

/// After a relist of a watch the controller reads (its watch expired, 410 Gone): every
/// parent as a resync spread over up to [`RELIST_RESYNC_SPREAD`], so state lost to a missed
/// event (a child deleted unseen) converges within one interval, as Metacontroller's informer
/// resync does, without one burst of hook calls.
fn resync_after_relist<R: Parents>(r: &R) {
    use rand::Rng as _;
    let mut rng = rand::rng();
    let spread = RELIST_RESYNC_SPREAD.as_millis() as u64;
    resync_all(r, &Cause::Relist, || {
        Duration::from_millis(rng.random_range(0..=spread))
    });
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
            let reads = |_: &str, uid: &str| uids.contains(uid);
            enqueue_where(r.as_ref(), &reads, &Cause::Related, Priority::Normal);
        }
    }
}

/// The triggers every kind shares, for the parents of `r`: the first list of the parents
/// enqueues none (the kind's start does), every later list of a parent watch resyncs every
/// parent ([`RELIST_RESYNC_SPREAD`]; a child watch's relist announces the children deleted or
/// changed meanwhile, which queue their parents, and nothing more: Metacontroller's child
/// handler drops an update that keeps the resourceVersion, and before 2026-12-07 a relist of
/// the parent and the child watches together synced a parent twice), `resync_period` (the controller's
/// `resyncPeriodSeconds`) resyncs every parent, the cache flush
/// ([`crate::ManagerConfig::cache_flush_interval`]) queues every parent ([`flush_one`]), and with
/// a work scope the parents it gains are enqueued and its share counted
/// ([`crate::coord::scope::WorkScope::report_share`]).
pub fn for_parents<R: Parents>(r: &Arc<R>, resync_period: Option<Duration>) -> Triggers {
    let mut t = Triggers::default();
    for inf in r.parent_watches() {
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
        t.every(period, move || {
            resync_all(r.as_ref(), &Cause::Resync, || Duration::ZERO)
        });
    }
    if let Some(every) = r.context().config.cache_flush_interval {
        let r = r.clone();
        t.every(every, move || flush_all(r.as_ref()));
    }
    if let Some(scope) = r.context().wiring.work_scope.clone() {
        let gains = r.clone();
        // every parent gained at once is this replica's start on them: low, as the start's
        let enqueue = move |gained: ParentTest<'_>| {
            enqueue_where(gains.as_ref(), gained, &Cause::Gained, Priority::Low);
        };
        t.spawn(scope.clone().follow_gains(Box::new(enqueue)));
        let count = r.clone();
        let count = move |mine: ParentTest<'_>| count.count_where(mine);
        let metrics = r.context().wiring.metrics.clone();
        t.spawn(scope.report_share(metrics, r.name(), Box::new(count)));
    }
    t
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// The flush queues a parent now, after the changes made meanwhile, as a change (it passes
    /// an open circuit and cuts a backoff short), once however often it is scheduled.
    #[tokio::test(start_paused = true)]
    async fn a_flush_is_a_low_change_that_cuts_a_backoff_short() {
        let q: Queue<&str> = Queue::default();
        // a parent failing for a while: its retry is minutes away
        for _ in 0..16 {
            q.add_rate_limited("failing");
            assert_eq!(q.next().await, Some("failing"));
            q.done(&"failing");
        }
        let _ = q.take_changed(&"failing");
        let _ = q.take_cause(&"failing");
        for key in ["failing", "quiet", "failing"] {
            flush_one(&q, key);
        }
        q.add_because("edited", Cause::Watched("Thing ns/edited".into()));
        assert_eq!(q.next().await, Some("edited"), "a person's edit first");
        let mut flushed = vec![q.next().await.unwrap(), q.next().await.unwrap()];
        flushed.sort_unstable();
        assert_eq!(flushed, ["failing", "quiet"], "each once, now");
        for key in flushed {
            assert!(q.take_changed(&key), "{key}: a flush is a change");
            assert_eq!(q.take_cause(&key).map(|c| c.0), Some(Cause::Flush));
            q.done(&key);
        }
    }

    #[test]
    fn the_resync_period_is_at_least_a_second_as_in_metacontroller() {
        assert_eq!(resync_period(None), None);
        assert_eq!(resync_period(Some(0)), Some(Duration::from_secs(1)));
        assert_eq!(resync_period(Some(-5)), Some(Duration::from_secs(1)));
        assert_eq!(resync_period(Some(30)), Some(Duration::from_secs(30)));
    }
}
