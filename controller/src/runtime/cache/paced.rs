//! Bulk announcements paced to the change broadcast's subscribers.
//!
//! A sharded watch announces a whole range at once: each object of a bucket's first list (one
//! `Applied` each) and each object of a range it no longer selects (one `Deleted` each). Sent in
//! one go, 160 000 changes at 100 000 parents × 10 children, they overflow the broadcast
//! ([`CHANGE_BUFFER`]) before any subscriber runs, and a running controller that falls behind
//! queues every parent it has (`reconcile::start`): a takeover made every survivor resync all of
//! its own parents as well. Paced, a bulk announcement sends a chunk, then waits until the
//! subscribers have taken all but half the buffer, so none falls behind while they keep up.
//! The wait is bounded ([`PACE_BUDGET`] per announcement): a subscriber that does not keep up
//! falls behind as before, and is handled as before, never waited for without end.

use std::time::Duration;

use tokio::sync::broadcast;
use tokio::time::Instant;

use super::CHANGE_BUFFER;

/// How many changes a bulk announcement sends between two looks at the broadcast: a quarter of
/// [`CHANGE_BUFFER`] (1 024; kmeta's), so that a chunk sent when half the buffer is waiting
/// still fits.
pub(super) const PACE_CHUNK: usize = CHANGE_BUFFER / 4;

// a chunk sent with room ([`has_room`]) never fills the broadcast
const _: () = assert!(CHANGE_BUFFER / 2 + PACE_CHUNK < CHANGE_BUFFER);

/// How long one bulk announcement waits for its subscribers in all: 5 s (kmeta's: a bucket's
/// list is not held up for longer by a subscriber that stopped taking changes). Past it the rest
/// is sent without waiting.
pub(super) const PACE_BUDGET: Duration = Duration::from_secs(5);

/// How often the broadcast is looked at while waiting: 1 ms, tokio's timer resolution.
const PACE_POLL: Duration = Duration::from_millis(1);

/// Whether the next chunk may be sent with `queued` changes not yet taken by every subscriber:
/// at most half the buffer, so the chunk leaves a quarter of it free.
pub(super) fn has_room(queued: usize) -> bool {
    queued <= CHANGE_BUFFER / 2
}

/// The wait budget left to one bulk announcement.
#[derive(Debug)]
pub(super) struct Pace {
    left: Duration,
}

impl Default for Pace {
    fn default() -> Self {
        Pace { left: PACE_BUDGET }
    }
}

impl Pace {
    /// Returns once `tx`'s subscribers have room for the next chunk ([`has_room`]), or at once
    /// when the budget is spent.
    pub(super) async fn room<M>(&mut self, tx: &broadcast::Sender<M>, what: &str) {
        if has_room(tx.len()) || self.left.is_zero() {
            return;
        }
        let began = Instant::now();
        let deadline = began + self.left;
        while !has_room(tx.len()) && Instant::now() < deadline {
            tokio::time::sleep(PACE_POLL).await;
        }
        self.left = self.left.saturating_sub(began.elapsed());
        if self.left.is_zero() {
            tracing::warn!(watch = %what, budget = ?PACE_BUDGET, "a subscriber did not keep up with a range's changes; sending the rest without waiting");
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_chunk_sent_with_room_never_fills_the_buffer() {
        assert!(has_room(0));
        assert!(has_room(CHANGE_BUFFER / 2));
        assert!(!has_room(CHANGE_BUFFER / 2 + 1));
    }

    #[tokio::test(start_paused = true)]
    async fn a_subscriber_that_takes_nothing_is_waited_for_once_within_the_budget() {
        let (tx, _rx) = broadcast::channel::<u32>(CHANGE_BUFFER);
        for i in 0..3000 {
            tx.send(i).unwrap();
        }
        let mut pace = Pace::default();
        let t0 = tokio::time::Instant::now();
        pace.room(&tx, "v1/things").await;
        let waited = t0.elapsed();
        assert!(waited >= PACE_BUDGET && waited < PACE_BUDGET + Duration::from_secs(1));
        // spent: the next look does not wait
        let t1 = tokio::time::Instant::now();
        pace.room(&tx, "v1/things").await;
        assert_eq!(t1.elapsed(), Duration::ZERO);
    }
}
