//! The hook circuit of one controller: when its hook endpoint is down, one probe sync at the
//! backoff cadence instead of every parent hammering it, and the first answer brings every
//! parent that waited back at once.
//!
//! Without it, each parent backs off on its own (up to 1000 s, client-go's cap): after a long
//! hook outage the parents that failed early are still waiting out long delays when the hook is
//! healthy again, and during the outage every parent keeps calling a hook that is known to be
//! down. Metacontroller has the same per-parent backoff and nothing more.
//!
//! The circuit must never stall a parent Metacontroller would sync, so it opens only on evidence
//! about the endpoint, not about one parent's input ([`Outcome::HookDown`]: no connection, a TLS
//! failure, a timeout, 502/503/504), from at least [`OPEN_AFTER_PARENTS`] distinct parents with
//! no answer from any parent in between. An answer — a 500 included: the hook ran and failed on
//! this parent's input, the commonest hook bug — is that parent's own failure, retried with its
//! own backoff as Metacontroller does, and closes the circuit. While it is open, a parent with a
//! new change (a watch event, not a retry) still runs, as an extra probe, and so does any parent
//! whose own sync has not found the endpoint down: only the retries of parents that failed are
//! held back (three parents whose input makes the hook time out cannot stall the resyncs of the
//! others, whose answers close the circuit).
//!
//! [`Circuit`] is the pure state machine (time passed in, unit-tested here); `core::process`
//! consults it before a sync ([`Circuit::gate`]) and tells it the outcome after
//! ([`Circuit::record`]), then applies the [`Effect`].

use std::collections::HashSet;
use std::hash::Hash;
use std::time::Duration;

use tokio::time::Instant;

use crate::runtime::queue::backoff;

/// Consecutive failures of the hook endpoint (no answer in between, any parent) that open the
/// circuit: 5 (kmeta's).
pub const OPEN_AFTER: u32 = 5;

/// Distinct parents those failures must come from: 3 (kmeta's). One parent whose input makes the
/// hook time out, retried on its own backoff, never opens the circuit for the others; a
/// controller with one or two parents keeps Metacontroller's per-parent backoff.
pub const OPEN_AFTER_PARENTS: usize = 3;

/// The longest wait between two probes of an open circuit: 30 s (kmeta's; the per-parent backoff
/// goes up to 1000 s, too long to notice a recovered hook).
pub const MAX_PROBE_INTERVAL: Duration = Duration::from_secs(30);

/// Parents brought back by a closing circuit are spread over this much time per parent (10 ms),
/// at most [`RECOVERY_SPREAD_MAX`] in all: promptly, without a thundering herd on a hook that
/// just came back.
pub const RECOVERY_SPREAD_PER_PARENT: Duration = Duration::from_millis(10);

/// The longest spread of a recovery: 5 s.
pub const RECOVERY_SPREAD_MAX: Duration = Duration::from_secs(5);

/// What a sync's result says about the hook endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The hook answered (the sync may still have failed: an error status such as 500 on this
    /// parent's input, an unusable body, a child write).
    HookAnswered,
    /// The endpoint is unhealthy: no connection, a TLS failure, a timeout, 502/503/504.
    HookDown,
    /// The result says nothing about the endpoint (the hook was not reached: an API error before
    /// the call, a parent gone).
    Unrelated,
    /// The hook was not reached yet, for a wait that ends by itself (the watch still to show the
    /// sync's last write, a watch not synced yet, the parent changed since read): the key comes
    /// back on its own soon. A probe stays the probe, up to [`PROBE_WAITS`] times in a row.
    NotYet,
}

/// How many times in a row a probe may come back without reaching the hook ([`Outcome::NotYet`])
/// before the probe is handed on: 5 (kmeta's).
pub const PROBE_WAITS: u32 = 5;

/// Whether a key may sync now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gate {
    /// Closed circuit, this key is the probe, it comes with a new change, or its own sync has not
    /// found the endpoint down.
    Run,
    /// Open circuit: the key waits for it to close (or to be chosen as the probe).
    Park,
    /// Open circuit, and this key is the probe but its time has not come (an event brought it
    /// early): the caller schedules it again after this long, or nothing would sync it.
    Early(std::time::Duration),
}

/// What the caller does after [`Circuit::record`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Effect<K> {
    /// Nothing beyond the usual handling of the result.
    None,
    /// The circuit opened (log it once) and the key is parked; probe with `probe` after `after`.
    Opened {
        /// The key to sync as the next probe.
        probe: K,
        /// When.
        after: Duration,
    },
    /// The probe failed: the key is parked; probe again with `probe` after `after`.
    Probe {
        /// The key to sync as the next probe.
        probe: K,
        /// When.
        after: Duration,
    },
    /// The key failed while the circuit was open: it is parked (no backoff of its own).
    Parked,
    /// The circuit closed: bring these keys back (backoff forgotten), spread by
    /// [`recovery_delay`].
    Closed(Vec<K>),
}

struct State<K> {
    failures: u32,
    /// The keys whose sync found the endpoint down since the last answer: only they are held
    /// back while the circuit is open.
    down_keys: HashSet<K>,
    open: bool,
    /// The key chosen as the next probe, and when it may run.
    probe: Option<K>,
    probe_at: Option<Instant>,
    /// [`Outcome::NotYet`] results of the current probe in a row.
    probe_waits: u32,
    parked: HashSet<K>,
}

/// The circuit of one controller's hooks.
pub struct Circuit<K> {
    state: std::sync::Mutex<State<K>>,
}

impl<K: Clone + Eq + Hash> Default for Circuit<K> {
    fn default() -> Self {
        Circuit {
            state: std::sync::Mutex::new(State {
                failures: 0,
                down_keys: HashSet::new(),
                open: false,
                probe: None,
                probe_at: None,
                probe_waits: 0,
                parked: HashSet::new(),
            }),
        }
    }
}

/// The wait before the next probe after `failures` consecutive failures: the queue's backoff for
/// as many failures (so one failing parent is called no more often than without the circuit), at
/// most [`MAX_PROBE_INTERVAL`].
pub fn probe_interval(failures: u32) -> Duration {
    backoff(failures).min(MAX_PROBE_INTERVAL)
}

/// The delay of the `i`-th parent brought back by a closing circuit.
pub fn recovery_delay(i: usize) -> Duration {
    let n = u32::try_from(i).unwrap_or(u32::MAX);
    RECOVERY_SPREAD_PER_PARENT
        .saturating_mul(n)
        .min(RECOVERY_SPREAD_MAX)
}

impl<K: Clone + Eq + Hash> Circuit<K> {
    fn with<T>(&self, f: impl FnOnce(&mut State<K>) -> T) -> T {
        match self.state.lock() {
            Ok(mut s) => f(&mut s),
            Err(p) => f(&mut p.into_inner()),
        }
    }

    /// Whether `key` may sync at `now`: always while closed, when it comes with a new change
    /// (`changed`: a watch event brought it, not a retry), or when its own sync has not found the
    /// endpoint down (a resync of a parent whose hook answers is never held back by others'
    /// failures, and its answer closes the circuit); otherwise, while open, only the chosen probe
    /// once its time has come (or any key, when no probe is chosen and the time has come); the
    /// probe arriving before its time is told how long is left.
    pub fn gate(&self, key: &K, changed: bool, now: Instant) -> Gate {
        self.with(|s| {
            if !s.open || changed || !s.down_keys.contains(key) {
                return Gate::Run;
            }
            let due = s.probe_at.is_none_or(|at| now >= at);
            let is_probe = s.probe.as_ref().is_none_or(|p| p == key);
            if let (Some(at), false, true) = (s.probe_at, due, s.probe.as_ref() == Some(key)) {
                return Gate::Early(at - now);
            }
            if due && is_probe {
                s.probe = Some(key.clone());
                s.probe_at = None;
                s.parked.remove(key);
                Gate::Run
            } else {
                s.parked.insert(key.clone());
                Gate::Park
            }
        })
    }

    /// Records how `key`'s sync (run at `now`) went.
    pub fn record(&self, key: &K, outcome: Outcome, now: Instant) -> Effect<K> {
        self.with(|s| match outcome {
            Outcome::HookAnswered => {
                s.failures = 0;
                s.down_keys.clear();
                if !s.open {
                    return Effect::None;
                }
                s.open = false;
                s.probe = None;
                s.probe_at = None;
                let mut back: Vec<K> = s.parked.drain().filter(|k| k != key).collect();
                back.shrink_to_fit();
                Effect::Closed(back)
            }
            Outcome::HookDown if s.open && s.probe.as_ref() != Some(key) => {
                // a sync that started before it opened, came with a new change or had not
                // failed yet: it waits for the circuit to close, and does not stretch the probe
                // cadence
                s.down_keys.insert(key.clone());
                s.parked.insert(key.clone());
                Effect::Parked
            }
            Outcome::HookDown => {
                s.failures = s.failures.saturating_add(1);
                s.down_keys.insert(key.clone());
                if s.failures < OPEN_AFTER || s.down_keys.len() < OPEN_AFTER_PARENTS {
                    return Effect::None;
                }
                let after = probe_interval(s.failures);
                if !s.open {
                    s.probe_waits = 0;
                    s.open = true;
                    s.probe = Some(key.clone());
                    s.probe_at = Some(now + after);
                    Effect::Opened {
                        probe: key.clone(),
                        after,
                    }
                } else {
                    // the probe (any other key is parked above)
                    s.probe_waits = 0;
                    s.probe_at = Some(now + after);
                    Effect::Probe {
                        probe: key.clone(),
                        after,
                    }
                }
            }
            Outcome::NotYet | Outcome::Unrelated => {
                if !(s.open && s.probe.as_ref() == Some(key)) {
                    return Effect::None;
                }
                if outcome == Outcome::NotYet && s.probe_waits + 1 < PROBE_WAITS {
                    // it comes back by itself, and may run at once then
                    s.probe_waits += 1;
                    return Effect::None;
                }
                s.probe_waits = 0;
                // a probe that did not reach the hook (its parent gone, or waiting for the watch
                // to show its last write) hands the probe on to a parked parent, at the probe
                // cadence: handing it on at once made every hand-off an immediate probe, and
                // left nobody scheduled to probe when no event came
                let after = probe_interval(s.failures);
                let next = s.parked.iter().find(|k| *k != key).cloned();
                if next.is_some() {
                    s.parked.insert(key.clone());
                }
                let next = next.unwrap_or_else(|| key.clone());
                s.probe = Some(next.clone());
                s.probe_at = Some(now + after);
                Effect::Probe { probe: next, after }
            }
        })
    }

    /// Whether the circuit is open.
    #[cfg(test)]
    pub fn is_open(&self) -> bool {
        self.with(|s| s.open)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn down_n(c: &Circuit<u32>, keys: std::ops::Range<u32>, now: Instant) -> Vec<Effect<u32>> {
        keys.map(|k| {
            assert_eq!(c.gate(&k, false, now), Gate::Run);
            c.record(&k, Outcome::HookDown, now)
        })
        .collect()
    }

    /// `key`'s own sync finds the endpoint down while the circuit is open (it came with a
    /// change): from now on its retries are held back.
    fn fail_while_open(c: &Circuit<u32>, key: u32, now: Instant) {
        assert_eq!(c.gate(&key, true, now), Gate::Run);
        assert_eq!(c.record(&key, Outcome::HookDown, now), Effect::Parked);
    }

    #[test]
    fn opens_after_consecutive_failures_and_parks_everyone_but_the_probe() {
        let c: Circuit<u32> = Circuit::default();
        let t = Instant::now();
        let effects = down_n(&c, 0..OPEN_AFTER, t);
        assert!(effects[..4].iter().all(|e| *e == Effect::None));
        assert_eq!(
            effects[4],
            Effect::Opened {
                probe: 4,
                after: backoff(OPEN_AFTER)
            }
        );
        assert!(c.is_open());
        for k in [7, 8] {
            fail_while_open(&c, k, t);
        }
        // before the probe time no parent that failed runs, not even the probe, which is told
        // when to come back (nothing else would sync it)
        assert_eq!(c.gate(&7, false, t), Gate::Park);
        assert_eq!(c.gate(&4, false, t), Gate::Early(backoff(OPEN_AFTER)));
        // at the probe time only the probe runs
        let later = t + backoff(OPEN_AFTER);
        assert_eq!(c.gate(&8, false, later), Gate::Park);
        assert_eq!(c.gate(&4, false, later), Gate::Run);
    }

    #[test]
    fn one_or_two_parents_failing_never_open_it() {
        let c: Circuit<u32> = Circuit::default();
        let t = Instant::now();
        for _ in 0..50 {
            for k in [1, 2] {
                assert_eq!(c.gate(&k, false, t), Gate::Run);
                assert_eq!(c.record(&k, Outcome::HookDown, t), Effect::None);
            }
        }
        assert!(!c.is_open(), "their own backoff, as Metacontroller");
        assert_eq!(c.gate(&3, false, t), Gate::Run);
        assert!(
            matches!(c.record(&3, Outcome::HookDown, t), Effect::Opened { .. }),
            "a third parent failing the same way is evidence about the endpoint"
        );
    }

    #[test]
    fn an_error_answer_is_an_answer() {
        // a 500 on one parent's input between endpoint failures of others keeps it closed
        let c: Circuit<u32> = Circuit::default();
        let t = Instant::now();
        for round in 0..20 {
            down_n(&c, 0..OPEN_AFTER - 1, t);
            assert_eq!(
                c.record(&(100 + round), Outcome::HookAnswered, t),
                Effect::None
            );
        }
        assert!(!c.is_open());
    }

    #[test]
    fn only_the_probe_sets_the_probe_cadence() {
        let c: Circuit<u32> = Circuit::default();
        let t = Instant::now();
        down_n(&c, 0..OPEN_AFTER, t);
        // many parents with new changes fail while it is open
        for k in 10..40 {
            assert_eq!(c.gate(&k, true, t), Gate::Run);
            assert_eq!(c.record(&k, Outcome::HookDown, t), Effect::Parked);
        }
        let t2 = t + backoff(OPEN_AFTER);
        assert_eq!(c.gate(&4, false, t2), Gate::Run);
        assert_eq!(
            c.record(&4, Outcome::HookDown, t2),
            Effect::Probe {
                probe: 4,
                after: probe_interval(OPEN_AFTER + 1)
            },
            "the next probe as if they had not failed"
        );
    }

    #[test]
    fn a_parent_with_a_new_change_runs_while_it_is_open() {
        let c: Circuit<u32> = Circuit::default();
        let t = Instant::now();
        down_n(&c, 0..OPEN_AFTER, t);
        fail_while_open(&c, 7, t);
        assert_eq!(c.gate(&7, false, t), Gate::Park, "a retry waits");
        assert_eq!(c.gate(&8, true, t), Gate::Run, "a change goes through");
        assert_eq!(
            c.record(&8, Outcome::HookDown, t),
            Effect::Parked,
            "and fails like a parked parent, with no backoff of its own"
        );
        assert_eq!(c.gate(&9, true, t), Gate::Run);
        match c.record(&9, Outcome::HookAnswered, t) {
            Effect::Closed(mut keys) => {
                keys.sort_unstable();
                assert_eq!(keys, vec![7, 8], "its answer brings the others back");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_parent_whose_own_sync_never_found_it_down_runs_while_it_is_open() {
        // three parents whose input makes the hook time out open it; a healthy parent's resync
        // (no change) is not held back by them, and its answer closes the circuit
        let c: Circuit<u32> = Circuit::default();
        let t = Instant::now();
        for k in [1, 2, 3, 1, 2] {
            assert_eq!(c.gate(&k, false, t), Gate::Run);
            c.record(&k, Outcome::HookDown, t);
        }
        assert!(c.is_open());
        assert_eq!(
            c.gate(&1, false, t),
            Gate::Park,
            "a failed parent's retry waits"
        );
        assert_eq!(
            c.gate(&9, false, t),
            Gate::Run,
            "the healthy parent's resync"
        );
        match c.record(&9, Outcome::HookAnswered, t) {
            Effect::Closed(keys) => assert_eq!(keys, vec![1], "and comes back"),
            other => panic!("{other:?}"),
        }
        assert!(!c.is_open());
    }

    #[test]
    fn a_success_in_between_keeps_it_closed() {
        let c: Circuit<u32> = Circuit::default();
        let t = Instant::now();
        down_n(&c, 0..OPEN_AFTER - 1, t);
        assert_eq!(c.record(&9, Outcome::HookAnswered, t), Effect::None);
        assert!(
            down_n(&c, 0..OPEN_AFTER - 1, t)
                .iter()
                .all(|e| *e == Effect::None)
        );
        assert!(!c.is_open());
        // unrelated failures neither open nor reset it
        assert_eq!(c.record(&1, Outcome::Unrelated, t), Effect::None);
        assert!(matches!(
            c.record(&2, Outcome::HookDown, t),
            Effect::Opened { .. }
        ));
    }

    #[test]
    fn failed_probes_back_off_up_to_the_cap() {
        let c: Circuit<u32> = Circuit::default();
        let mut t = Instant::now();
        down_n(&c, 0..OPEN_AFTER, t);
        let mut last = backoff(OPEN_AFTER);
        for _ in 0..30 {
            t += last;
            assert_eq!(c.gate(&4, false, t), Gate::Run);
            match c.record(&4, Outcome::HookDown, t) {
                Effect::Probe { probe, after } => {
                    assert_eq!(probe, 4);
                    assert!(after >= last && after <= MAX_PROBE_INTERVAL);
                    last = after;
                }
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(last, MAX_PROBE_INTERVAL);
    }

    #[test]
    fn the_first_success_closes_it_and_brings_every_parked_key_back() {
        let c: Circuit<u32> = Circuit::default();
        let t = Instant::now();
        down_n(&c, 0..OPEN_AFTER, t);
        for k in 10..20 {
            fail_while_open(&c, k, t);
            assert_eq!(c.gate(&k, false, t), Gate::Park);
        }
        let t2 = t + backoff(OPEN_AFTER);
        assert_eq!(c.gate(&4, false, t2), Gate::Run);
        match c.record(&4, Outcome::HookAnswered, t2) {
            Effect::Closed(mut keys) => {
                keys.sort_unstable();
                assert_eq!(keys, (10..20).collect::<Vec<_>>());
            }
            other => panic!("{other:?}"),
        }
        assert!(!c.is_open());
        assert_eq!(c.gate(&11, false, t2), Gate::Run);
    }

    #[test]
    fn a_probe_that_did_not_reach_the_hook_hands_the_probe_on_at_the_cadence() {
        let c: Circuit<u32> = Circuit::default();
        let t0 = Instant::now();
        let t = t0 + backoff(OPEN_AFTER);
        down_n(&c, 0..OPEN_AFTER, t0);
        fail_while_open(&c, 6, t0);
        assert_eq!(c.gate(&6, false, t0), Gate::Park);
        assert_eq!(c.gate(&4, false, t), Gate::Run);
        let after = probe_interval(OPEN_AFTER);
        assert_eq!(
            c.record(&4, Outcome::Unrelated, t),
            Effect::Probe { probe: 6, after },
            "a parked parent is scheduled to probe next"
        );
        assert_eq!(
            c.gate(&6, false, t),
            Gate::Early(after),
            "not before its time"
        );
        assert_eq!(
            c.gate(&4, false, t + after),
            Gate::Park,
            "the old probe waits now"
        );
        assert_eq!(c.gate(&6, false, t + after), Gate::Run);
        assert_eq!(
            c.record(&6, Outcome::HookAnswered, t + after),
            Effect::Closed(vec![4]),
            "the old probe comes back with the rest"
        );
    }

    #[test]
    fn a_probe_waiting_for_its_watch_stays_the_probe_a_few_times() {
        let c: Circuit<u32> = Circuit::default();
        let t0 = Instant::now();
        let t = t0 + backoff(OPEN_AFTER);
        down_n(&c, 0..OPEN_AFTER, t0);
        fail_while_open(&c, 6, t0);
        assert_eq!(c.gate(&6, false, t0), Gate::Park);
        for _ in 1..PROBE_WAITS {
            assert_eq!(c.gate(&4, false, t), Gate::Run, "back by itself, at once");
            assert_eq!(c.record(&4, Outcome::NotYet, t), Effect::None);
        }
        assert_eq!(c.gate(&4, false, t), Gate::Run);
        assert_eq!(
            c.record(&4, Outcome::NotYet, t),
            Effect::Probe {
                probe: 6,
                after: probe_interval(OPEN_AFTER)
            },
            "then handed on"
        );
    }

    #[test]
    fn a_probe_with_nobody_parked_stays_the_probe() {
        let c: Circuit<u32> = Circuit::default();
        let t0 = Instant::now();
        let t = t0 + backoff(OPEN_AFTER);
        down_n(&c, 0..OPEN_AFTER, t0);
        assert_eq!(c.gate(&4, false, t), Gate::Run);
        let after = probe_interval(OPEN_AFTER);
        assert_eq!(
            c.record(&4, Outcome::Unrelated, t),
            Effect::Probe { probe: 4, after }
        );
        fail_while_open(&c, 7, t);
        assert_eq!(
            c.gate(&7, false, t + after),
            Gate::Park,
            "another parent does not jump in"
        );
        assert_eq!(c.gate(&4, false, t + after), Gate::Run);
    }

    #[test]
    fn a_sync_in_flight_when_it_opened_is_parked_on_failure() {
        let c: Circuit<u32> = Circuit::default();
        let t = Instant::now();
        assert_eq!(c.gate(&99, false, t), Gate::Run); // started while closed
        down_n(&c, 0..OPEN_AFTER, t);
        assert_eq!(c.record(&99, Outcome::HookDown, t), Effect::Parked);
        // the probe is still 4, and 99 comes back when the circuit closes
        let t2 = t + backoff(OPEN_AFTER);
        assert_eq!(c.gate(&4, false, t2), Gate::Run);
        assert_eq!(
            c.record(&4, Outcome::HookAnswered, t2),
            Effect::Closed(vec![99])
        );
    }

    #[test]
    fn recovery_is_spread_and_bounded() {
        assert_eq!(recovery_delay(0), Duration::ZERO);
        assert_eq!(recovery_delay(3), Duration::from_millis(30));
        assert_eq!(recovery_delay(100_000), RECOVERY_SPREAD_MAX);
    }
}
