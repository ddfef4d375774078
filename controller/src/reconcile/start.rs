//! A controller's start, as its watches' receivers see it: what a watch announces while its
//! first list comes in (every object it holds, as "applied"), and everything its receiver had
//! not taken by the time that list was in, is the start; whatever the watch announces after it is
//! a change someone made. The start schedules at [`Priority::Low`], a change at
//! [`Priority::Normal`], so a person's edit queued during the start of 100 000 parents is handed
//! out next, not after all of them; every parent is still synced once by the start, in the order
//! it was queued (docs/design/queue-priority.md).
//!
//! The end of the start is told by position in the receiver, not by time: once the watch
//! reports its first list complete, the changes already waiting for the receiver are the list's
//! (and a few that came with it); the start ends when the receiver has taken those.

use std::sync::Arc;

use tokio::sync::broadcast::{
    self,
    error::{RecvError, TryRecvError},
};

use crate::runtime::cache::Watch;
use crate::runtime::queue::Priority;

/// Where a receiver is in its watch's start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    /// The first list is not complete yet.
    Listing,
    /// The list is complete; this many changes announced before it was are still to be taken.
    Draining(usize),
    /// The start is over: every change from now on is someone's.
    Running,
}

impl Phase {
    /// The priority of what a change taken in this phase schedules.
    pub(crate) fn priority(self) -> Priority {
        match self {
            Phase::Running => Priority::Normal,
            Phase::Listing | Phase::Draining(_) => Priority::Low,
        }
    }

    /// The watch reported its first list complete with `waiting` changes not taken yet.
    pub(crate) fn synced(self, waiting: usize) -> Phase {
        match self {
            Phase::Listing => Phase::Draining(waiting),
            other => other,
        }
    }

    /// One change was taken.
    pub(crate) fn took(self) -> Phase {
        match self {
            Phase::Draining(n) => Phase::Draining(n.saturating_sub(1)),
            other => other,
        }
    }

    /// The receiver fell behind and lost changes; `waiting` are still to be taken.
    pub(crate) fn lagged(self, waiting: usize) -> Phase {
        match self {
            Phase::Draining(_) => Phase::Draining(waiting),
            other => other,
        }
    }

    /// True when the start has just ended (the changes before the list's end are all taken).
    pub(crate) fn ends(self) -> bool {
        self == Phase::Draining(0)
    }

    /// What a receiver that fell behind in this phase does ([`Lag`]).
    pub(crate) fn on_lag(self) -> Lag {
        match self {
            Phase::Running => Lag::SkipToNow,
            Phase::Listing | Phase::Draining(_) => Lag::AtTheEnd,
        }
    }
}

/// What a receiver does when it fell behind its watch and lost changes. Either way it never
/// pays the loss's cost (every parent refiled, and after the start queued: O(parents)) while
/// still at the oldest change the channel holds: there every change announced meanwhile would
/// be lost again, and the next loss would pay again. At 50 000 parents a start did that 65
/// times in a row, 0.6 s each (a debug build), while the edits written meanwhile kept it there:
/// they reached the hook only with the start's queueing, 20–38 s late.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Lag {
    /// During the start: note the loss, go on taking the changes still held (each costs little:
    /// the receiver catches up), and handle the loss once, when the start ends, before its
    /// queueing (which queues every parent anyway). A change taken meanwhile, someone's edit,
    /// is scheduled at normal priority as it comes.
    AtTheEnd,
    /// After the start: skip to the newest change first, then handle the loss (queue every
    /// parent from the cache, which shows every change announced before the skip).
    SkipToNow,
}

/// How many waiting changes a receiver takes in a row before it lets its runtime's other tasks
/// run: 1 024 (kmeta's; a quarter of a watch's broadcast, `CHANGE_BUFFER`). Awaiting each one,
/// it was handed at most tokio's cooperative budget (128) per turn on a runtime busy with syncs,
/// and a bulk announcement (a sharded range listed) waited for it turn after turn.
const TAKEN_IN_A_ROW: usize = 1024;

/// The next change of `rx`: at once while changes wait (at most [`TAKEN_IN_A_ROW`] in a row,
/// counted in `in_a_row`), else awaited.
async fn next<M: Clone>(
    rx: &mut broadcast::Receiver<M>,
    in_a_row: &mut usize,
) -> Result<M, RecvError> {
    if *in_a_row < TAKEN_IN_A_ROW {
        match rx.try_recv() {
            Ok(m) => {
                *in_a_row += 1;
                return Ok(m);
            }
            Err(TryRecvError::Lagged(n)) => {
                *in_a_row += 1;
                return Err(RecvError::Lagged(n));
            }
            Err(TryRecvError::Empty | TryRecvError::Closed) => {}
        }
    } else {
        tokio::task::yield_now().await;
    }
    *in_a_row = 0;
    rx.recv().await
}

/// Follows `rx`, the receiver of `watch`'s changes subscribed before its first list: every
/// change goes to `on_change` and every loss to `on_lag`, with the priority of what they schedule
/// ([`Phase::priority`]); `on_started` runs once, when the start ends (before any change after
/// it). Returns when the watch stops.
pub(crate) async fn follow<M: Clone>(
    watch: Arc<dyn Watch>,
    mut rx: broadcast::Receiver<M>,
    on_change: impl Fn(&M, Priority),
    on_lag: impl Fn(Priority),
    on_started: impl FnOnce(),
) {
    let mut phase = Phase::Listing;
    let mut on_started = Some(on_started);
    // changes lost during the start, handled when it ends
    let mut lost = 0u64;
    let mut in_a_row = 0usize;
    let began = std::time::Instant::now();
    loop {
        if phase == Phase::Listing && watch.is_synced() {
            phase = phase.synced(rx.len());
        }
        if phase.ends() {
            phase = Phase::Running;
            if lost > 0 {
                on_lag(Priority::Low);
            }
            tracing::debug!(watch = %watch.watch_key(), lost, after = ?began.elapsed(), "start over: every parent queued");
            if let Some(f) = on_started.take() {
                f();
            }
        }
        let got = match phase {
            Phase::Listing => tokio::select! {
                biased;
                got = rx.recv() => Some(got),
                () = watch.wait_synced() => None,
            },
            _ => Some(next(&mut rx, &mut in_a_row).await),
        };
        match got {
            None => {}
            Some(Ok(m)) => {
                on_change(&m, phase.priority());
                phase = phase.took();
            }
            Some(Err(RecvError::Lagged(n))) => match phase.on_lag() {
                Lag::AtTheEnd => {
                    lost = lost.saturating_add(n);
                    phase = phase.lagged(rx.len());
                }
                Lag::SkipToNow => {
                    tracing::warn!(watch = %watch.watch_key(), lost = n, "fell behind the watch's changes; queueing every parent");
                    rx = rx.resubscribe();
                    on_lag(Priority::Normal);
                }
            },
            Some(Err(RecvError::Closed)) => break,
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::sync::Mutex;
    use tokio::sync::watch;

    #[test]
    fn the_start_ends_once_the_changes_before_the_list_end_are_taken() {
        let p = Phase::Listing;
        assert_eq!(p.priority(), Priority::Low);
        let p = p.took().synced(2);
        assert_eq!(p, Phase::Draining(2));
        assert_eq!(p.priority(), Priority::Low);
        let p = p.took();
        assert!(!p.ends());
        let p = p.took();
        assert!(p.ends());
        assert_eq!(Phase::Running.priority(), Priority::Normal);
        assert_eq!(Phase::Running.synced(5).took(), Phase::Running);
        assert_eq!(Phase::Draining(9).lagged(3), Phase::Draining(3));
        assert_eq!(Phase::Listing.lagged(3), Phase::Listing);
        assert!(Phase::Listing.synced(0).ends(), "nothing was waiting");
    }

    struct Fake(watch::Sender<bool>);

    impl Watch for Fake {
        fn watch_key(&self) -> String {
            "v1/things".into()
        }
        fn is_synced(&self) -> bool {
            *self.0.borrow()
        }
        fn lists(&self) -> watch::Receiver<u64> {
            watch::channel(0).1
        }
        fn wait_synced(&self) -> futures::future::BoxFuture<'_, ()> {
            let mut rx = self.0.subscribe();
            Box::pin(async move {
                let _ = rx.wait_for(|s| *s).await;
            })
        }
    }

    #[tokio::test]
    async fn changes_listed_are_the_start_and_one_after_it_is_a_change() {
        let (synced, _) = watch::channel(false);
        let fake = Arc::new(Fake(synced));
        let (tx, rx) = broadcast::channel::<u32>(16);
        let seen: Arc<Mutex<Vec<String>>> = Arc::default();
        let (on_change, on_started) = (seen.clone(), seen.clone());
        // the list: three objects, then the watch is synced, then someone's edit
        for i in 0..3 {
            tx.send(i).unwrap();
        }
        fake.0.send_replace(true);
        tx.send(3).unwrap();
        let task = tokio::spawn(follow(
            fake.clone(),
            rx,
            move |m, p| on_change.lock().unwrap().push(format!("{m} {p:?}")),
            |_| {},
            move || on_started.lock().unwrap().push("started".into()),
        ));
        drop(tx);
        task.await.unwrap();
        let seen = seen.lock().unwrap().clone();
        // the edit sent before the receiver looked counts with the start (it is low, not lost);
        // one sent after the start ended is a change
        assert_eq!(seen, ["0 Low", "1 Low", "2 Low", "3 Low", "started"]);
    }

    #[tokio::test]
    async fn a_change_after_the_start_is_normal_and_a_start_with_nothing_waiting_ends_at_once() {
        let (synced, _) = watch::channel(false);
        let fake = Arc::new(Fake(synced));
        let (tx, rx) = broadcast::channel::<u32>(16);
        let seen: Arc<Mutex<Vec<String>>> = Arc::default();
        let (on_change, on_started) = (seen.clone(), seen.clone());
        let task = tokio::spawn(follow(
            fake.clone(),
            rx,
            move |m, p| on_change.lock().unwrap().push(format!("{m} {p:?}")),
            |_| {},
            move || on_started.lock().unwrap().push("started".into()),
        ));
        tx.send(0).unwrap();
        fake.0.send_replace(true);
        let started = async {
            while seen.lock().unwrap().len() < 2 {
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            }
        };
        tokio::time::timeout(std::time::Duration::from_secs(10), started)
            .await
            .expect("the start ended");
        tx.send(1).unwrap();
        drop(tx);
        task.await.unwrap();
        let seen = seen.lock().unwrap().clone();
        assert_eq!(seen, ["0 Low", "started", "1 Normal"]);
    }

    /// On a current-thread runtime beside a task that is always ready: awaiting each change,
    /// the receiver would take 128 per turn (tokio's budget) and 2 048 would take 16 turns.
    #[tokio::test]
    async fn waiting_changes_are_taken_a_thousand_in_a_turn() {
        let (synced, _) = watch::channel(true);
        let fake = Arc::new(Fake(synced));
        let (tx, rx) = broadcast::channel::<u32>(4096);
        for i in 0..2048 {
            tx.send(i).unwrap();
        }
        let taken = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = taken.clone();
        let task = tokio::spawn(follow(
            fake,
            rx,
            move |_, _| {
                counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            },
            |_| {},
            || {},
        ));
        let busy = tokio::spawn(async move {
            let mut turns = 0;
            while taken.load(std::sync::atomic::Ordering::Relaxed) < 2048 && turns < 1000 {
                turns += 1;
                tokio::task::yield_now().await;
            }
            turns
        });
        let turns = busy.await.unwrap();
        drop(tx);
        task.await.unwrap();
        assert!(turns <= 4, "the other task ran {turns} turns meanwhile");
    }

    #[test]
    fn a_loss_is_handled_at_the_starts_end_or_after_skipping_to_now() {
        assert_eq!(Phase::Listing.on_lag(), Lag::AtTheEnd);
        assert_eq!(Phase::Draining(7).on_lag(), Lag::AtTheEnd);
        assert_eq!(Phase::Running.on_lag(), Lag::SkipToNow);
    }

    /// Changes keep coming while a loss is handled (here: one per loss handled, as edits and
    /// status writes do while every parent is refiled and queued): the receiver handles the
    /// loss once and takes every change after it, instead of losing them one by one.
    #[tokio::test]
    async fn a_loss_after_the_start_is_handled_once_while_changes_keep_coming() {
        let (synced, _) = watch::channel(true);
        let fake = Arc::new(Fake(synced));
        let (tx, rx) = broadcast::channel::<u32>(2);
        let tx = Arc::new(Mutex::new(Some(tx)));
        let seen: Arc<Mutex<Vec<String>>> = Arc::default();
        let (on_change, on_lag, on_started) = (seen.clone(), seen.clone(), tx.clone());
        let sender = tx.clone();
        let task = tokio::spawn(follow(
            fake,
            rx,
            move |m, p| {
                on_change.lock().unwrap().push(format!("{m} {p:?}"));
                if *m == 100 {
                    // the last change: the watch stops
                    sender.lock().unwrap().take();
                }
            },
            move |p| {
                let mut seen = on_lag.lock().unwrap();
                seen.push(format!("lost {p:?}"));
                if seen.len() < 50 {
                    // a change announced while the loss is handled
                    if let Some(tx) = tx.lock().unwrap().as_ref() {
                        tx.send(100).unwrap();
                    }
                }
            },
            move || {
                // the start is over; then a burst the receiver cannot hold
                if let Some(tx) = on_started.lock().unwrap().as_ref() {
                    for i in 0..5 {
                        tx.send(i).unwrap();
                    }
                }
            },
        ));
        tokio::time::timeout(std::time::Duration::from_secs(10), task)
            .await
            .expect("the receiver stops")
            .unwrap();
        let seen = seen.lock().unwrap().clone();
        assert_eq!(seen, ["lost Normal", "100 Normal"]);
    }

    /// A loss during the start is handled once, at its end, and the changes still held are
    /// taken (someone's edit among them keeps its own scheduling).
    #[tokio::test]
    async fn a_loss_during_the_start_is_handled_at_its_end() {
        let (synced, _) = watch::channel(true);
        let fake = Arc::new(Fake(synced));
        let (tx, rx) = broadcast::channel::<u32>(4);
        for i in 0..10 {
            tx.send(i).unwrap();
        }
        let seen: Arc<Mutex<Vec<String>>> = Arc::default();
        let (on_change, on_lag, on_started) = (seen.clone(), seen.clone(), seen.clone());
        drop(tx);
        follow(
            fake,
            rx,
            move |m, p| on_change.lock().unwrap().push(format!("{m} {p:?}")),
            move |p| on_lag.lock().unwrap().push(format!("lost {p:?}")),
            move || on_started.lock().unwrap().push("started".into()),
        )
        .await;
        let seen = seen.lock().unwrap().clone();
        assert_eq!(
            seen,
            ["6 Low", "7 Low", "8 Low", "9 Low", "lost Low", "started"]
        );
    }

    #[tokio::test]
    async fn a_loss_during_the_start_is_the_start_too() {
        let (synced, _) = watch::channel(true);
        let fake = Arc::new(Fake(synced));
        let (tx, rx) = broadcast::channel::<u32>(2);
        for i in 0..5 {
            tx.send(i).unwrap();
        }
        let lags: Arc<Mutex<Vec<Priority>>> = Arc::default();
        let on_lag = lags.clone();
        drop(tx);
        follow(
            fake,
            rx,
            |_, _| {},
            move |p| on_lag.lock().unwrap().push(p),
            || {},
        )
        .await;
        assert_eq!(*lags.lock().unwrap(), [Priority::Low]);
    }
}
