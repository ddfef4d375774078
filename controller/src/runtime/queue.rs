//! The work queue of one controller: deduplicated keys with due times, never handing out a key
//! that is being worked on, with per-key exponential backoff (client-go's rate limiter shape).

use std::collections::{HashMap, HashSet};
use std::hash::Hash;
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

/// First backoff delay: 5 ms (client-go `DefaultTypedControllerRateLimiter`).
pub const BACKOFF_BASE: Duration = Duration::from_millis(5);
/// Backoff cap: 1000 s (client-go).
pub const BACKOFF_MAX: Duration = Duration::from_secs(1000);

/// The delay after `failures` consecutive failures: `5ms * 2^(failures-1)`, capped at 1000 s.
pub fn backoff(failures: u32) -> Duration {
    let exp = failures.saturating_sub(1).min(30);
    BACKOFF_BASE
        .checked_mul(1u32 << exp)
        .unwrap_or(BACKOFF_MAX)
        .min(BACKOFF_MAX)
}

struct State<K> {
    due: HashMap<K, Instant>,
    running: HashSet<K>,
    failures: HashMap<K, u32>,
    shutdown: bool,
}

/// A deduplicating delay queue.
pub struct Queue<K> {
    state: Mutex<State<K>>,
    notify: Notify,
}

impl<K: Clone + Eq + Hash> Default for Queue<K> {
    fn default() -> Self {
        Queue {
            state: Mutex::new(State {
                due: HashMap::new(),
                running: HashSet::new(),
                failures: HashMap::new(),
                shutdown: false,
            }),
            notify: Notify::new(),
        }
    }
}

impl<K: Clone + Eq + Hash> Queue<K> {
    fn with<T>(&self, f: impl FnOnce(&mut State<K>) -> T) -> T {
        match self.state.lock() {
            Ok(mut s) => f(&mut s),
            Err(p) => f(&mut p.into_inner()),
        }
    }

    /// Schedules `key` now.
    pub fn add(&self, key: K) {
        self.add_after(key, Duration::ZERO);
    }

    /// Schedules `key` after `delay` (an earlier schedule wins).
    pub fn add_after(&self, key: K, delay: Duration) {
        let at = Instant::now() + delay;
        self.with(|s| {
            let e = s.due.entry(key).or_insert(at);
            if at < *e {
                *e = at;
            }
        });
        self.notify.notify_waiters();
        self.notify.notify_one();
    }

    /// Records a failure of `key` and schedules it after the backoff.
    pub fn add_rate_limited(&self, key: K) -> Duration {
        let d = self.with(|s| {
            let n = s.failures.entry(key.clone()).or_insert(0);
            *n += 1;
            backoff(*n)
        });
        self.add_after(key, d);
        d
    }

    /// Clears the failure count of `key`.
    pub fn forget(&self, key: &K) {
        self.with(|s| s.failures.remove(key));
    }

    /// Marks `key` as no longer running.
    pub fn done(&self, key: &K) {
        self.with(|s| s.running.remove(key));
        self.notify.notify_waiters();
        self.notify.notify_one();
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
                let mut earliest: Option<Instant> = None;
                let mut ready: Option<(K, Instant)> = None;
                for (k, at) in &s.due {
                    if s.running.contains(k) {
                        continue;
                    }
                    if *at <= now {
                        if ready.as_ref().is_none_or(|(_, r)| at < r) {
                            ready = Some((k.clone(), *at));
                        }
                    } else if earliest.is_none_or(|e| *at < e) {
                        earliest = Some(*at);
                    }
                }
                match ready {
                    Some((k, at)) => {
                        s.due.remove(&k);
                        s.running.insert(k.clone());
                        Ok((k, now.saturating_duration_since(at)))
                    }
                    None => Err(earliest),
                }
            });
            match pick {
                Ok(k) => return Some(k),
                Err(None) if self.with(|s| s.shutdown) => return None,
                Err(None) => notified.await,
                Err(Some(at)) => {
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

    #[tokio::test]
    async fn dedups_and_never_hands_out_a_running_key() {
        let q: Queue<&str> = Queue::default();
        q.add("a");
        q.add("a");
        assert_eq!(q.len(), 1);
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
}
