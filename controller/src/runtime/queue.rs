//! The work queue of one controller: deduplicated keys with due times, never handing out a key
//! that is being worked on, with per-key exponential backoff (client-go's rate limiter shape),
//! fair across tenants (namespaces) and serving changes before periodic resyncs.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::hash::Hash;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

/// First backoff delay: 5 ms (client-go `DefaultTypedControllerRateLimiter`).
pub const BACKOFF_BASE: Duration = Duration::from_millis(5);
/// Backoff cap: 1000 s (client-go).
pub const BACKOFF_MAX: Duration = Duration::from_secs(1000);

/// The longest retry of a sync that waits for its watches ([`Queue::add_waiting`]): 30 s
/// (kmeta's; the awaited event, a relist or the expectation timeout end a wait sooner).
pub const WAIT_RETRY_MAX: Duration = Duration::from_secs(30);

/// The delay after `failures` consecutive failures: `5ms * 2^(failures-1)`, capped at 1000 s.
pub fn backoff(failures: u32) -> Duration {
    let exp = failures.saturating_sub(1).min(30);
    BACKOFF_BASE
        .checked_mul(1u32 << exp)
        .unwrap_or(BACKOFF_MAX)
        .min(BACKOFF_MAX)
}

/// How urgent a scheduled key is. A change made by someone (an event) is [`Priority::Normal`];
/// a periodic resync (resync period, `resyncAfterSeconds`, a relist, the cache flush) is [`Priority::Low`] and is
/// handed out only when no normal key is ready (or after [`LOW_PRIORITY_EVERY`] normal keys in a
/// row, so resyncs are delayed, never starved).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Priority {
    /// A resync: never advances a key already scheduled, served after normal keys.
    Low,
    /// A change, a retry.
    Normal,
}

/// Under a steady stream of normal keys, one low-priority key is handed out after this many
/// normal ones in a row.
pub const LOW_PRIORITY_EVERY: u32 = 8;

/// Why a key was scheduled, kept until it is handed out, for the sync record (`kmeta trace
/// --history`): the first cause since the key was last handed out, and how many more came. A
/// cause at [`Priority::Normal`] (a change, a retry) is told before one that came only at
/// [`Priority::Low`] (a resync, a relist, the start): the change is what brought the key early.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Cause {
    /// A watch event: this object (`Kind namespace/name`) was created, changed or deleted.
    Watched(std::sync::Arc<str>),
    /// A related object the customize hook selected changed.
    Related,
    /// The resync period (`resyncPeriodSeconds`, `resyncAfterSeconds`).
    Resync,
    /// A watch listed again (410 Gone): every parent is resynced.
    Relist,
    /// The cache flush (`--cache-flush-interval`, Metacontroller's informer resync period): every
    /// cached parent is synced again, its watch kept open.
    Flush,
    /// The retry after a failed sync.
    Retry,
    /// The controller started, or its CompositeController (hooks included) changed.
    Started,
    /// This replica took the parent over (sharding).
    Gained,
    /// kmeta's own status write showed the hook something new (Metacontroller requeues the
    /// parent after it too).
    OwnStatus,
}

impl std::fmt::Display for Cause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Cause::Watched(what) => write!(f, "watch: {what}"),
            Cause::Related => f.write_str("a related object changed"),
            Cause::Resync => f.write_str("resync"),
            Cause::Relist => f.write_str("relist"),
            Cause::Flush => f.write_str("cache flush"),
            Cause::Retry => f.write_str("retry after a failure"),
            Cause::Started => f.write_str("controller started or changed"),
            Cause::Gained => f.write_str("taken over by this replica"),
            Cause::OwnStatus => f.write_str("its status, written by the sync before"),
        }
    }
}

/// The tenant a key belongs to: keys are handed out round-robin across tenants, so one tenant's
/// burst cannot starve another's keys.
pub trait Tenant {
    /// The tenant (for an object key, its namespace).
    fn tenant(&self) -> &str;
}

impl Tenant for (String, String) {
    fn tenant(&self) -> &str {
        &self.0
    }
}

impl Tenant for &str {
    fn tenant(&self) -> &str {
        ""
    }
}

impl Tenant for u32 {
    fn tenant(&self) -> &str {
        ""
    }
}

/// When a key is due and how urgent it is; `generation` tells the current entry of the key in
/// the timer and ready structures from outdated ones (skipped when met).
#[derive(Clone, Copy, Debug)]
struct Due {
    at: Instant,
    priority: Priority,
    generation: u64,
}

/// The backoff of a failing key: its consecutive counted failures and when the retry they
/// scheduled is due.
#[derive(Clone, Copy, Debug)]
struct Backoff {
    failures: u32,
    retry_at: Instant,
}

/// Ready keys of one priority, one FIFO per tenant, tenants served round-robin.
struct Ready<K> {
    per_tenant: HashMap<String, VecDeque<(K, u64)>>,
    turn: VecDeque<String>,
}

impl<K> Default for Ready<K> {
    fn default() -> Self {
        Ready {
            per_tenant: HashMap::new(),
            turn: VecDeque::new(),
        }
    }
}

impl<K: Tenant> Ready<K> {
    fn push(&mut self, key: K, generation: u64) {
        let tenant = key.tenant();
        match self.per_tenant.get_mut(tenant) {
            Some(q) => q.push_back((key, generation)),
            None => {
                let tenant = tenant.to_owned();
                self.turn.push_back(tenant.clone());
                self.per_tenant
                    .insert(tenant, VecDeque::from([(key, generation)]));
            }
        }
    }

    /// The next entry, from the tenant whose turn it is (then at the back of the line).
    fn pop(&mut self) -> Option<(K, u64)> {
        let tenant = self.turn.pop_front()?;
        let q = self.per_tenant.get_mut(&tenant)?;
        let entry = q.pop_front();
        if q.is_empty() {
            self.per_tenant.remove(&tenant);
        } else {
            self.turn.push_back(tenant);
        }
        entry
    }

    fn is_empty(&self) -> bool {
        self.turn.is_empty()
    }
}

struct State<K> {
    due: HashMap<K, Due>,
    /// Keys due later, by due time (entries may be outdated: checked against `due`).
    timers: BTreeMap<(Instant, u64), K>,
    normal: Ready<K>,
    low: Ready<K>,
    /// Normal keys handed out in a row while low ones were waiting.
    normal_streak: u32,
    /// Keys handed out and not done yet, with when they were handed out.
    running: HashMap<K, Instant>,
    /// Keys that became due while running: made ready again by [`Queue::done`].
    parked: HashSet<K>,
    failures: HashMap<K, Backoff>,
    /// Keys scheduled by a change ([`Queue::add`]) since they were last handed out.
    changed: HashSet<K>,
    /// Why each key was scheduled since it was last handed out: the first cause, how many more
    /// came, and the priority the first came at ([`Queue::take_cause`]).
    causes: HashMap<K, (Cause, u32, Priority)>,
    /// Consecutive waits of a key ([`Queue::add_waiting`]), kept apart from its failures.
    waits: HashMap<K, u32>,
    next_generation: u64,
    shutdown: bool,
}

impl<K: Clone + Eq + Hash + Tenant> State<K> {
    /// Notes why `key` was scheduled at `priority`: the first cause stays, later ones are
    /// counted, except that the first at normal priority takes the place of one at low priority
    /// (a person's edit is told, not the relist that happened to come before it).
    fn note_cause(&mut self, key: &K, cause: Cause, priority: Priority) {
        match self.causes.get_mut(key) {
            Some((first, more, was)) => {
                *more = more.saturating_add(1);
                if *was < priority {
                    *first = cause;
                    *was = priority;
                }
            }
            None => {
                self.causes.insert(key.clone(), (cause, 0, priority));
            }
        }
    }

    /// Schedules `key`; returns whether a worker should look again.
    fn schedule(&mut self, key: K, at: Instant, priority: Priority, now: Instant) -> bool {
        let current = self.due.get(&key).copied();
        let next = match (current, priority) {
            // a resync never delays a key scheduled already, nor moves a ready change; a retry
            // scheduled later (a backoff) comes at the resync instead, as Metacontroller's
            // informer resync adds a key in backoff (the failure count stays: only a success
            // clears it)
            (Some(cur), Priority::Low) if cur.at <= at => return false,
            (Some(_), Priority::Low) => (at, Priority::Low),
            (Some(cur), Priority::Normal) if cur.at <= at && cur.priority == Priority::Normal => {
                return false;
            }
            (Some(cur), Priority::Normal) => (at.min(cur.at), Priority::Normal),
            (None, p) => (at, p),
        };
        self.next_generation += 1;
        let d = Due {
            at: next.0,
            priority: next.1,
            generation: self.next_generation,
        };
        self.due.insert(key.clone(), d);
        if self.running.contains_key(&key) {
            // handed out again after done(); its due time still counts
            self.timers.insert((d.at, d.generation), key.clone());
            self.parked.insert(key);
            return false;
        }
        if d.at <= now {
            self.ready(d.priority).push(key, d.generation);
        } else {
            self.timers.insert((d.at, d.generation), key);
        }
        true
    }

    fn ready(&mut self, p: Priority) -> &mut Ready<K> {
        match p {
            Priority::Normal => &mut self.normal,
            Priority::Low => &mut self.low,
        }
    }

    fn is_current(&self, key: &K, generation: u64) -> bool {
        self.due
            .get(key)
            .is_some_and(|d| d.generation == generation)
    }

    /// Moves the keys due by `now` from the timers to the ready lines.
    fn fire_timers(&mut self, now: Instant) {
        while let Some(entry) = self.timers.first_entry() {
            if entry.key().0 > now {
                break;
            }
            let ((_, generation), key) = entry.remove_entry();
            if !self.is_current(&key, generation) || self.running.contains_key(&key) {
                continue;
            }
            if let Some(d) = self.due.get(&key).copied() {
                self.ready(d.priority).push(key, generation);
            }
        }
    }

    /// The line to serve next: normal first, low after [`LOW_PRIORITY_EVERY`] normal in a row.
    fn pick_line(&mut self) -> Option<Priority> {
        let low_waiting = !self.low.is_empty();
        let low_turn = low_waiting && self.normal_streak >= LOW_PRIORITY_EVERY;
        if !self.normal.is_empty() && !low_turn {
            self.normal_streak = if low_waiting {
                self.normal_streak + 1
            } else {
                0
            };
            return Some(Priority::Normal);
        }
        self.normal_streak = 0;
        low_waiting.then_some(Priority::Low)
    }

    /// The next ready key (marked running) and when it was due, or the earliest timer.
    fn take(&mut self, now: Instant) -> Result<(K, Instant), Option<Instant>> {
        self.fire_timers(now);
        while let Some(line) = self.pick_line() {
            let Some((key, generation)) = self.ready(line).pop() else {
                continue;
            };
            if !self.is_current(&key, generation) {
                continue;
            }
            if self.running.contains_key(&key) {
                self.parked.insert(key);
                continue;
            }
            let Some(d) = self.due.remove(&key) else {
                continue;
            };
            self.running.insert(key.clone(), now);
            return Ok((key, d.at));
        }
        Err(self.timers.first_key_value().map(|((at, _), _)| *at))
    }

    /// Records a failure of `key` at `now`; returns how long until its retry. A failure counts
    /// (the delay doubles) unless the attempt that failed was handed out before the retry the
    /// last counted failure scheduled - brought early by an event: its retry stays when it was.
    /// Otherwise every event during a backoff would double it again without waiting it out, and
    /// a parent whose children change often would reach the 1000 s cap within seconds
    /// (kubernetes/kubernetes#132805: client-go's rate limiter counts every attempt).
    fn fail(&mut self, key: &K, now: Instant) -> Duration {
        let started = self.running.get(key).copied();
        if let Some(b) = self.failures.get_mut(key) {
            if started.is_some_and(|at| at < b.retry_at) {
                return b.retry_at.saturating_duration_since(now);
            }
            b.failures = b.failures.saturating_add(1);
            let d = backoff(b.failures);
            b.retry_at = now + d;
            return d;
        }
        let d = backoff(1);
        let first = Backoff {
            failures: 1,
            retry_at: now + d,
        };
        self.failures.insert(key.clone(), first);
        d
    }

    /// `key` finished: if it became due meanwhile, it is ready (or timed) again.
    fn finish(&mut self, key: &K, now: Instant) -> bool {
        self.running.remove(key);
        if !self.parked.remove(key) {
            return false;
        }
        let Some(d) = self.due.get(key).copied() else {
            return false;
        };
        if d.at <= now {
            self.ready(d.priority).push(key.clone(), d.generation);
        } else {
            self.timers.insert((d.at, d.generation), key.clone());
        }
        true
    }
}

/// A deduplicating delay queue: a key is scheduled at most once (the earlier schedule wins), never
/// handed out while it runs, handed out round-robin across tenants (namespaces) and normal
/// priority before low. Scheduling and handing out cost O(log n) in the number of keys.
pub struct Queue<K> {
    state: Mutex<State<K>>,
    notify: Notify,
    /// Which keys any schedule takes ([`Queue::admit_only`]); every key when unset.
    admit: OnceLock<Admit<K>>,
}

/// A test of the keys a queue schedules ([`Queue::admit_only`]).
pub type Admit<K> = Box<dyn Fn(&K) -> bool + Send + Sync>;

impl<K: Clone + Eq + Hash + Tenant> Default for Queue<K> {
    fn default() -> Self {
        Queue {
            state: Mutex::new(State {
                due: HashMap::new(),
                timers: BTreeMap::new(),
                normal: Ready::default(),
                low: Ready::default(),
                normal_streak: 0,
                running: HashMap::new(),
                parked: HashSet::new(),
                failures: HashMap::new(),
                changed: HashSet::new(),
                causes: HashMap::new(),
                waits: HashMap::new(),
                next_generation: 0,
                shutdown: false,
            }),
            notify: Notify::new(),
            admit: OnceLock::new(),
        }
    }
}

impl<K: Clone + Eq + Hash + Tenant> Queue<K> {
    fn with<T>(&self, f: impl FnOnce(&mut State<K>) -> T) -> T {
        match self.state.lock() {
            Ok(mut s) => f(&mut s),
            Err(p) => f(&mut p.into_inner()),
        }
    }

    /// From now on every schedule of a key `admit` refuses is ignored, whatever scheduled it (a
    /// trigger, a retry, a resync): the keys another process works on (`--sharding`), which a
    /// worker would only drop. Set once; a second call is ignored and returns false.
    pub fn admit_only(&self, admit: Admit<K>) -> bool {
        self.admit.set(admit).is_ok()
    }

    /// Schedules `key` now, for a change someone made (a watch event): remembered until the key
    /// is handed out and [`Queue::take_changed`] asks.
    pub fn add(&self, key: K) {
        self.add_at(key, None, Priority::Normal);
    }

    /// [`Queue::add`], saying why ([`Queue::take_cause`]).
    pub fn add_because(&self, key: K, cause: Cause) {
        self.add_at(key, Some(cause), Priority::Normal);
    }

    /// [`Queue::add`] at `priority`, saying why when `cause` is given. At [`Priority::Low`] it
    /// is the controller's start (every parent at once, a watch's first list): still a change
    /// ([`Queue::take_changed`]), handed out in the order it was scheduled, but after the
    /// changes made since (a person's edit queued during the start of 100 000 parents is handed
    /// out next, not after all of them; docs/design/queue-priority.md). A key due already keeps its
    /// place and priority; one due later comes now.
    pub fn add_at(&self, key: K, cause: Option<Cause>, priority: Priority) {
        self.schedule_by(key, priority, |s, key, _| {
            s.changed.insert(key.clone());
            if let Some(cause) = cause {
                s.note_cause(key, cause, priority);
            }
            Duration::ZERO
        });
    }

    /// Why `key` was scheduled since it was last handed out: the first cause noted and how many
    /// more came; `None` when none was noted (a wait, a requeue of kmeta's own write). A worker
    /// asks once per key it was handed.
    pub fn take_cause(&self, key: &K) -> Option<(Cause, u32)> {
        self.with(|s| s.causes.remove(key).map(|(cause, more, _)| (cause, more)))
    }

    /// Gives `key` back a cause [`Queue::take_cause`] told, for a sync that runs again without
    /// having acted on it: it stays the first, the causes noted since counted after it.
    pub fn keep_cause(&self, key: K, (cause, more): (Cause, u32)) {
        self.with(|s| {
            let since = s
                .causes
                .remove(&key)
                .map_or(0, |(_, n, _)| n.saturating_add(1));
            let more = more.saturating_add(since);
            s.causes.insert(key, (cause, more, Priority::Normal));
        });
    }

    /// Marks `key` as brought by a change again without scheduling it (the change has not
    /// reached the hook yet; its retry is scheduled as usual).
    pub fn keep_changed(&self, key: K) {
        self.with(|s| s.changed.insert(key));
    }

    /// Whether `key` was scheduled by a change ([`Queue::add`]) since this was last asked, rather
    /// than only by a retry, a backoff or a resync. A worker asks once per key it was handed.
    pub fn take_changed(&self, key: &K) -> bool {
        self.with(|s| s.changed.remove(key))
    }

    /// Schedules `key` after `delay` (an earlier schedule wins).
    pub fn add_after(&self, key: K, delay: Duration) {
        self.schedule_by(key, Priority::Normal, |_, _, _| delay);
    }

    /// Schedules a resync of `key` after `delay` at low priority, unless it is scheduled as early
    /// already; a later retry (a backoff) comes at the resync instead. A resync is not a change
    /// ([`Queue::take_changed`]).
    pub fn resync_after(&self, key: K, delay: Duration) {
        self.resync_because(key, delay, Cause::Resync);
    }

    /// [`Queue::resync_after`], saying why (a resync or a relist).
    pub fn resync_because(&self, key: K, delay: Duration, cause: Cause) {
        self.schedule_by(key, Priority::Low, |s, key, _| {
            s.note_cause(key, cause, Priority::Low);
            delay
        });
    }

    /// Schedules `key` after the delay `delay_of` decides (from the state, the key and now), in
    /// the same critical section; returns that delay. A key [`Queue::admit_only`] refuses is
    /// not scheduled (zero returned), the test run outside the queue's lock.
    fn schedule_by(
        &self,
        key: K,
        priority: Priority,
        delay_of: impl FnOnce(&mut State<K>, &K, Instant) -> Duration,
    ) -> Duration {
        if self.admit.get().is_some_and(|admit| !admit(&key)) {
            return Duration::ZERO;
        }
        let now = Instant::now();
        let (delay, wake) = self.with(|s| {
            let delay = delay_of(s, &key, now);
            (delay, s.schedule(key, now + delay, priority, now))
        });
        if wake {
            self.notify.notify_one();
        }
        delay
    }

    /// Records a failure of `key` and schedules it after the backoff (see [`State::fail`]: an
    /// attempt an event brought early neither grows the backoff nor moves its retry).
    pub fn add_rate_limited(&self, key: K) -> Duration {
        self.schedule_by(key, Priority::Normal, |s, key, now| {
            s.note_cause(key, Cause::Retry, Priority::Normal);
            s.fail(key, now)
        })
    }

    /// Schedules `key` again after a sync that waited for something that ends by itself (a
    /// watch to show a write, a watch to list): after `5 ms · 2^(n-1)` for its `n`-th wait in a
    /// row, at most [`WAIT_RETRY_MAX`]. Waits are not failures: they leave the failure count,
    /// and so the backoff of the key's next failure, as they are — a failing parent that waited
    /// for its own condition write is retried as soon as one that did not (and as in
    /// Metacontroller, which has no such waits). The event awaited usually brings it back sooner.
    pub fn add_waiting(&self, key: K) -> Duration {
        self.schedule_by(key, Priority::Normal, |s, key, _| {
            let n = s.waits.entry(key.clone()).or_default();
            *n = n.saturating_add(1);
            backoff(*n).min(WAIT_RETRY_MAX)
        })
    }

    /// A sync of `key` ended in something other than a wait: its waits start over.
    pub fn waited_out(&self, key: &K) {
        self.with(|s| s.waits.remove(key));
    }

    /// Clears the failure count of `key`.
    pub fn forget(&self, key: &K) {
        self.with(|s| {
            s.failures.remove(key);
            s.waits.remove(key);
        });
    }

    /// `key`'s object is gone (deleted): everything kept for it is dropped, its failure count,
    /// waits, and the causes and change noted for its next hand-out (a key still scheduled is
    /// handed out once more, and its sync finds the object gone).
    pub fn forget_gone(&self, key: &K) {
        self.with(|s| {
            s.failures.remove(key);
            s.waits.remove(key);
            s.causes.remove(key);
            s.changed.remove(key);
        });
    }

    /// Marks `key` as no longer running.
    pub fn done(&self, key: &K) {
        let now = Instant::now();
        if self.with(|s| s.finish(key, now)) {
            self.notify.notify_one();
        }
    }

    /// Stops handing out keys; `next` returns `None`.
    pub fn shutdown(&self) {
        self.with(|s| s.shutdown = true);
        self.notify.notify_waiters();
        self.notify.notify_one();
    }

    /// Number of scheduled keys (including delayed ones).
    pub fn len(&self) -> usize {
        self.with(|s| s.due.len())
    }

    /// True when no key is scheduled.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Waits for the next due key that is not running and marks it running.
    #[cfg(test)]
    pub async fn next(&self) -> Option<K> {
        self.next_timed().await.map(|(k, _)| k)
    }

    /// Waits for the next due key that is not running and marks it running,
    /// also returning how long the key waited past its due time.
    pub async fn next_timed(&self) -> Option<(K, Duration)> {
        loop {
            let notified = self.notify.notified();
            let now = Instant::now();
            let pick = self.with(|s| {
                if s.shutdown {
                    return Err(None);
                }
                s.take(now).map_err(Some)
            });
            match pick {
                Ok((key, at)) => {
                    // another worker may have work too: pass the wake-up on
                    self.notify.notify_one();
                    return Some((key, now.saturating_duration_since(at)));
                }
                Err(None) => return None,
                Err(Some(None)) => notified.await,
                Err(Some(Some(at))) => {
                    tokio::select! {
                        _ = notified => {}
                        _ = tokio::time::sleep_until(at) => {}
                    }
                }
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn backoff_grows_and_caps() {
        assert_eq!(backoff(1), Duration::from_millis(5));
        assert_eq!(backoff(2), Duration::from_millis(10));
        assert_eq!(backoff(11), Duration::from_millis(5120));
        assert_eq!(backoff(40), BACKOFF_MAX);
    }

    #[tokio::test(start_paused = true)]
    async fn waits_do_not_grow_the_backoff_of_the_next_failure() {
        let q: Queue<&str> = Queue::default();
        q.add("a");
        assert_eq!(q.next().await, Some("a"));
        assert_eq!(q.add_rate_limited("a"), backoff(1), "a failure");
        q.done(&"a");
        for n in 1..=6 {
            assert_eq!(q.next().await, Some("a"));
            assert_eq!(q.add_waiting("a"), backoff(n), "its own ladder");
            q.done(&"a");
        }
        assert_eq!(q.next().await, Some("a"));
        q.waited_out(&"a");
        assert_eq!(
            q.add_rate_limited("a"),
            backoff(2),
            "the second failure, not the eighth"
        );
        q.done(&"a");
        assert_eq!(q.next().await, Some("a"));
        assert_eq!(q.add_waiting("a"), backoff(1), "waits started over");
        assert_eq!(
            backoff(40).min(WAIT_RETRY_MAX),
            WAIT_RETRY_MAX,
            "and are capped"
        );
    }

    /// Once a queue admits only some keys, no way of scheduling queues another: a change, a
    /// resync, a retry, a delay, a wait; the admitted keys are scheduled as before.
    #[tokio::test(start_paused = true)]
    async fn a_key_the_queue_does_not_admit_is_scheduled_by_nothing() {
        let q: Queue<&str> = Queue::default();
        assert!(q.admit_only(Box::new(|k: &&str| k.starts_with("mine"))));
        assert!(!q.admit_only(Box::new(|_: &&str| true)), "set once");
        q.add("other-a");
        q.add_at("other-b", Some(Cause::Started), Priority::Low);
        q.resync_because("other-c", Duration::ZERO, Cause::Resync);
        q.add_after("other-d", Duration::ZERO);
        assert_eq!(q.add_rate_limited("other-e"), Duration::ZERO);
        assert_eq!(q.add_waiting("other-f"), Duration::ZERO);
        assert_eq!(q.len(), 0, "none of the others' keys");
        assert!(!q.take_changed(&"other-a"), "nor their marks");
        assert!(q.take_cause(&"other-b").is_none());
        q.add("mine-a");
        q.resync_after("mine-b", Duration::ZERO);
        assert_eq!(q.len(), 2);
        assert_eq!(q.next().await, Some("mine-a"));
        assert_eq!(q.next().await, Some("mine-b"));
    }

    #[tokio::test]
    async fn a_change_is_told_from_a_retry_once_per_hand_out() {
        let q: Queue<&str> = Queue::default();
        q.add("a");
        q.add_after("b", Duration::ZERO);
        let mut got = vec![q.next().await.unwrap(), q.next().await.unwrap()];
        got.sort_unstable();
        assert_eq!(got, ["a", "b"]);
        assert!(q.take_changed(&"a"), "added by a change");
        assert!(!q.take_changed(&"a"), "told once");
        assert!(!q.take_changed(&"b"), "a retry is not a change");
        // a change arriving while the key runs is told at its next hand-out
        q.add("a");
        q.done(&"a");
        assert_eq!(q.next().await, Some("a"));
        assert!(q.take_changed(&"a"));
    }

    #[tokio::test]
    async fn the_first_cause_of_a_hand_out_is_told_with_the_count_of_the_others() {
        let q: Queue<&str> = Queue::default();
        q.add_because("a", Cause::Watched("ConfigMap n/a".into()));
        q.resync_because("a", Duration::ZERO, Cause::Relist);
        q.add_because("a", Cause::Related);
        assert_eq!(q.next().await, Some("a"));
        assert_eq!(
            q.take_cause(&"a"),
            Some((Cause::Watched("ConfigMap n/a".into()), 2))
        );
        assert_eq!(q.take_cause(&"a"), None, "told once");
        assert_eq!(q.add_rate_limited("a"), backoff(1));
        q.done(&"a");
        assert_eq!(q.next().await, Some("a"));
        assert_eq!(q.take_cause(&"a"), Some((Cause::Retry, 0)));
        // a sync that waited gives its cause back: it stays first
        q.resync_because("a", Duration::ZERO, Cause::Resync);
        q.keep_cause("a", (Cause::Retry, 0));
        assert_eq!(q.take_cause(&"a"), Some((Cause::Retry, 1)));
        // a relist came first, then someone's edit: the edit is told, the relist counted
        q.resync_because("a", Duration::ZERO, Cause::Relist);
        q.add_because("a", Cause::Watched("ConfigMap n/a".into()));
        q.resync_because("a", Duration::ZERO, Cause::Resync);
        assert_eq!(
            q.take_cause(&"a"),
            Some((Cause::Watched("ConfigMap n/a".into()), 2))
        );
        assert_eq!(
            Cause::Watched("Thing n/p".into()).to_string(),
            "watch: Thing n/p"
        );
    }

    #[test]
    fn a_gone_key_keeps_no_cause_change_or_failure() {
        let q: Queue<&str> = Queue::default();
        q.add_because("a", Cause::Watched("Thing n/a".into()));
        assert_eq!(q.add_rate_limited("b"), backoff(1));
        q.forget_gone(&"a");
        q.forget_gone(&"b");
        assert_eq!(q.take_cause(&"a"), None);
        assert!(!q.take_changed(&"a"));
        assert_eq!(
            q.add_rate_limited("b"),
            backoff(1),
            "the count started again"
        );
    }

    #[tokio::test]
    async fn dedups_and_never_hands_out_a_running_key() {
        let q: Queue<&str> = Queue::default();
        assert!(q.is_empty());
        q.add("a");
        q.add("a");
        assert_eq!(q.len(), 1);
        assert!(!q.is_empty());
        let k = q.next().await.unwrap();
        assert_eq!(k, "a");
        q.add("a"); // re-added while running
        let got = tokio::time::timeout(Duration::from_millis(50), q.next()).await;
        assert!(got.is_err(), "running key handed out twice");
        q.done(&"a");
        let k = tokio::time::timeout(Duration::from_secs(5), q.next())
            .await
            .unwrap();
        assert_eq!(k, Some("a"));
    }

    #[tokio::test(start_paused = true)]
    async fn delayed_keys_wait_their_turn() {
        let q: Arc<Queue<u32>> = Arc::default();
        q.add_after(1, Duration::from_secs(10));
        q.add_after(2, Duration::from_secs(1));
        assert_eq!(q.next().await, Some(2));
        assert_eq!(q.next().await, Some(1));
        q.shutdown();
        assert_eq!(q.next().await, None);
    }

    #[tokio::test(start_paused = true)]
    async fn earlier_schedule_wins() {
        let q: Queue<u32> = Queue::default();
        q.add_after(1, Duration::from_secs(100));
        q.add_after(1, Duration::from_secs(1));
        let start = Instant::now();
        assert_eq!(q.next().await, Some(1));
        assert!(start.elapsed() < Duration::from_secs(2));
    }

    fn key(ns: &str, name: &str) -> (String, String) {
        (ns.to_owned(), name.to_owned())
    }

    /// Takes `n` keys (each done at once), in the order handed out.
    async fn take(q: &Queue<(String, String)>, n: usize) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for _ in 0..n {
            let k = q.next().await.unwrap();
            q.done(&k);
            out.push(k);
        }
        out
    }

    #[tokio::test]
    async fn a_burst_in_one_namespace_does_not_starve_another() {
        let q: Queue<(String, String)> = Queue::default();
        for i in 0..1000 {
            q.add(key("busy", &format!("p{i}")));
        }
        q.add(key("quiet", "p"));
        let first = take(&q, 2).await;
        assert!(first.contains(&key("quiet", "p")), "{first:?}");
        // within one namespace, first come first served
        let rest = take(&q, 999).await;
        let busy: Vec<_> = first
            .iter()
            .chain(&rest)
            .filter(|k| k.0 == "busy")
            .collect();
        assert_eq!(busy[0].1, "p0");
        assert_eq!(busy[998].1, "p998");
        assert_eq!(q.len(), 0);
    }

    #[tokio::test]
    async fn changes_before_resyncs_and_resyncs_are_never_starved() {
        let q: Queue<(String, String)> = Queue::default();
        for i in 0..3 {
            q.resync_after(key("ns", &format!("resync{i}")), Duration::ZERO);
        }
        for i in 0..20 {
            q.add(key("ns", &format!("change{i}")));
        }
        let order = take(&q, 23).await;
        let pos = |name: &str| order.iter().position(|k| k.1 == name).unwrap();
        assert!(
            order[..LOW_PRIORITY_EVERY as usize]
                .iter()
                .all(|k| k.1.starts_with("change"))
        );
        assert_eq!(pos("resync0"), LOW_PRIORITY_EVERY as usize, "{order:?}");
        assert!(
            pos("resync1") < pos("change19"),
            "a steady stream of changes starved resyncs"
        );
    }

    /// 100 000 parents in 1 000 namespaces scheduled by a start (low), five of them running.
    fn started(q: &Queue<(String, String)>) {
        for i in 0..100_000 {
            let k = key(&format!("ns{}", i % 1000), &format!("p{i}"));
            q.add_at(k, Some(Cause::Started), Priority::Low);
        }
    }

    #[tokio::test]
    async fn an_edit_during_a_start_of_100_000_parents_is_handed_out_next() {
        let q: Queue<(String, String)> = Queue::default();
        started(&q);
        let mut running = Vec::new();
        for _ in 0..5 {
            running.push(q.next().await.unwrap());
        }
        // a person edits a parent whose start-up sync is still queued, and one already synced
        let queued = key("ns999", "p99999");
        q.add_because(queued.clone(), Cause::Watched("Thing ns999/p99999".into()));
        assert_eq!(q.next().await, Some(queued.clone()), "the edit comes next");
        assert!(q.take_changed(&queued));
        assert_eq!(
            q.take_cause(&queued),
            Some((Cause::Watched("Thing ns999/p99999".into()), 1)),
            "one sync for both: the edit told, the start's counted"
        );
        let synced = running[0].clone();
        q.done(&synced);
        q.add_because(synced.clone(), Cause::Related);
        assert_eq!(q.next().await, Some(synced.clone()), "next again");
        q.done(&synced);
        q.done(&queued);
        for k in &running[1..] {
            q.done(k);
        }
        // every other parent's start-up sync still comes, each once, as a change
        let mut rest = std::collections::HashSet::new();
        while !q.is_empty() {
            let k = q.next().await.unwrap();
            assert!(q.take_changed(&k), "a start is a change");
            q.done(&k);
            assert!(rest.insert(k), "handed out twice");
        }
        assert_eq!(rest.len() + running.len() + 1, 100_000);
    }

    #[tokio::test]
    async fn under_a_stream_of_changes_an_edit_waits_for_at_most_one_start_up_sync() {
        let q: Queue<(String, String)> = Queue::default();
        started(&q);
        for i in 0..LOW_PRIORITY_EVERY {
            q.add(key("busy", &format!("c{i}")));
        }
        let order = take(&q, LOW_PRIORITY_EVERY as usize).await;
        assert!(order.iter().all(|k| k.0 == "busy"), "changes first");
        q.add(key("ns5", "edited"));
        // the low line's turn has come (8 changes in a row): one start-up sync, then the edit
        let next = take(&q, 2).await;
        assert_ne!(next[0].0, "busy");
        assert_eq!(next[1], key("ns5", "edited"), "{next:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_start_keeps_a_key_scheduled_already_where_it_is() {
        let q: Queue<&str> = Queue::default();
        q.add_after("a", Duration::from_secs(5));
        q.add("b");
        q.add_at("a", Some(Cause::Started), Priority::Low);
        q.add_at("b", Some(Cause::Started), Priority::Low);
        assert_eq!(q.len(), 2);
        assert_eq!(q.next().await, Some("b"), "b stays a normal change");
        assert_eq!(q.take_cause(&"b"), Some((Cause::Started, 0)));
        let start = Instant::now();
        assert_eq!(
            q.next().await,
            Some("a"),
            "a comes at once: a start is a change"
        );
        assert!(start.elapsed() < Duration::from_secs(1));
        assert!(q.take_changed(&"a"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_resync_advances_a_backoff_as_metacontroller_but_is_no_change() {
        let q: Queue<(String, String)> = Queue::default();
        let k = key("ns", "failing");
        let d = (0..12)
            .map(|_| q.add_rate_limited(k.clone()))
            .last()
            .unwrap();
        assert_eq!(d, backoff(12));
        assert!(d >= Duration::from_secs(5), "{d:?}");
        q.resync_after(k.clone(), Duration::ZERO);
        let start = Instant::now();
        assert_eq!(q.next().await, Some(k.clone()));
        assert!(
            start.elapsed() < Duration::from_secs(1),
            "the resync waited for the backoff"
        );
        assert!(!q.take_changed(&k), "a resync is not a change");
        q.done(&k);
        // a resync later than what is scheduled moves nothing
        q.add_after(k.clone(), Duration::from_millis(10));
        q.resync_after(k.clone(), Duration::from_secs(100));
        let start = Instant::now();
        assert_eq!(q.next().await, Some(k.clone()));
        assert!(start.elapsed() < Duration::from_secs(1));
        q.done(&k);
        // a change does advance it
        q.add_after(k.clone(), Duration::from_secs(100));
        q.add(k.clone());
        let start = Instant::now();
        assert_eq!(q.next().await, Some(k));
        assert!(start.elapsed() < Duration::from_secs(1));
    }

    fn state() -> State<&'static str> {
        Queue::default().state.into_inner().unwrap()
    }

    /// Hands `key` out at `at` (due then), as a worker would.
    fn attempt(s: &mut State<&'static str>, key: &'static str, at: Instant) {
        s.schedule(key, at, Priority::Normal, at);
        assert_eq!(s.take(at).map(|(k, _)| k), Ok(key));
    }

    #[test]
    fn an_attempt_an_event_brought_early_neither_grows_the_backoff_nor_moves_its_retry() {
        let mut s = state();
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        attempt(&mut s, "p", t0);
        assert_eq!(s.fail(&"p", t0), backoff(1));
        s.finish(&"p", t0);
        // a child's event brings the parent 1 ms into its 5 ms backoff; it fails again
        attempt(&mut s, "p", t0 + ms(1));
        assert_eq!(s.fail(&"p", t0 + ms(2)), ms(3), "the retry stays at 5 ms");
        s.finish(&"p", t0 + ms(2));
        // the retry itself fails: now the backoff doubles
        attempt(&mut s, "p", t0 + ms(5));
        assert_eq!(s.fail(&"p", t0 + ms(5)), backoff(2));
        assert_eq!(s.failures[&"p"].failures, 2);
    }

    #[test]
    fn events_every_millisecond_for_a_second_grow_the_backoff_with_time_not_with_attempts() {
        let mut s = state();
        let t0 = Instant::now();
        for i in 0..1000 {
            let at = t0 + Duration::from_millis(i);
            attempt(&mut s, "p", at);
            s.fail(&"p", at);
            s.finish(&"p", at);
        }
        // counted failures at 0, 5, 15, 35, 75, 155, 315, 635 ms: the backoff is where a key
        // failing on its own would be after a second, not at the cap (1000 counted failures)
        let b = s.failures[&"p"];
        assert_eq!(b.failures, 8, "{b:?}");
        assert_eq!(b.retry_at, t0 + Duration::from_millis(635) + backoff(8));
    }

    #[tokio::test(start_paused = true)]
    async fn a_key_scheduled_while_running_is_handed_out_after_done_and_its_due_time() {
        let q: Queue<u32> = Queue::default();
        q.add(1);
        assert_eq!(q.next().await, Some(1));
        q.add_after(1, Duration::from_secs(5));
        let started = Instant::now();
        tokio::time::advance(Duration::from_secs(6)).await;
        let got = tokio::time::timeout(Duration::from_secs(60), q.next()).await;
        assert!(got.is_err(), "handed out while running");
        q.done(&1);
        assert_eq!(q.next().await, Some(1));
        assert!(started.elapsed() >= Duration::from_secs(5));
        q.done(&1);
        q.add_after(1, Duration::from_secs(1));
        assert_eq!(q.len(), 1);
    }
}
