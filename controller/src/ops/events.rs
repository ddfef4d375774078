//! Publishing Kubernetes Events so that a transient API failure does not lose one: an Event the
//! API server did not take is sent again in the background, after 1, 2, 4, 8 and 16 s (about
//! 31 s in all), unless the answer says a retry cannot help (a 4xx other than 408, 409 and 429).
//! Given up — after the last retry, on such an answer, or when [`RETRIES_PENDING`] Events
//! already wait — it is logged and counted in `kmeta_events_failed_total`. client-go's recorder
//! retries too (12 tries, 10 s apart); kube's `Recorder` does not.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, Recorder};

use crate::ops::metrics::Metrics;

/// The waits before each retry of an Event: 1 s doubling, five retries.
pub const RETRY_DELAYS: [Duration; 5] = [
    Duration::from_secs(1),
    Duration::from_secs(2),
    Duration::from_secs(4),
    Duration::from_secs(8),
    Duration::from_secs(16),
];

/// At most this many Events wait for a retry at once (a long API outage must not pile up tasks
/// and memory); a failed Event beyond that is given up at once: 256.
pub const RETRIES_PENDING: usize = 256;

/// Whether sending an Event again can succeed after `error`: transport failures, timeouts,
/// conflicts, throttling and server errors can; a 4xx about the Event itself (invalid,
/// forbidden, its namespace gone) cannot.
pub fn retryable(error: &kube::Error) -> bool {
    match error {
        kube::Error::Api(status) => {
            matches!(status.code, 408 | 409 | 429) || status.code >= 500 || status.code == 0
        }
        _ => true,
    }
}

/// Sends Events, retrying those the API server did not take.
#[derive(Clone)]
pub struct EventSender {
    recorder: Recorder,
    metrics: Arc<Metrics>,
    pending: Arc<AtomicUsize>,
}

impl std::fmt::Debug for EventSender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventSender")
            .field("pending", &self.pending.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl EventSender {
    /// A sender through `recorder`, counting what it gives up in `metrics`.
    pub fn new(recorder: Recorder, metrics: Arc<Metrics>) -> Self {
        EventSender {
            recorder,
            metrics,
            pending: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// Events waiting for a retry now.
    pub fn pending(&self) -> usize {
        self.pending.load(Ordering::Relaxed)
    }

    /// Sends `event` about `reference`; on a failure a retry can mend, sends it again in the
    /// background (see the module doc). Never fails.
    pub async fn send(&self, event: Event, reference: ObjectReference) {
        let reason = event.reason.clone();
        let error = match self.recorder.publish(&event, &reference).await {
            Ok(()) => return,
            Err(e) => e,
        };
        if !retryable(&error) || !self.reserve() {
            self.give_up(&reason, &error);
            return;
        }
        tracing::debug!(reason, %error, "publishing event failed; retrying");
        let this = self.clone();
        tokio::spawn(async move {
            this.retry(&event, &reference).await;
            this.pending.fetch_sub(1, Ordering::AcqRel);
        });
    }

    /// Takes a retry slot if one is free.
    fn reserve(&self) -> bool {
        self.pending
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < RETRIES_PENDING).then_some(n + 1)
            })
            .is_ok()
    }

    async fn retry(&self, event: &Event, reference: &ObjectReference) {
        let mut last = None;
        for delay in RETRY_DELAYS {
            tokio::time::sleep(delay).await;
            match self.recorder.publish(event, reference).await {
                Ok(()) => return,
                Err(e) if retryable(&e) => last = Some(e),
                Err(e) => {
                    last = Some(e);
                    break;
                }
            }
        }
        if let Some(e) = last {
            self.give_up(&event.reason, &e);
        }
    }

    fn give_up(&self, reason: &str, error: &kube::Error) {
        self.metrics.event_failed();
        tracing::warn!(reason, %error, "publishing event failed; given up");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(code: u16) -> kube::Error {
        kube::Error::Api(Box::new(kube::core::Status {
            code,
            ..Default::default()
        }))
    }

    #[test]
    fn only_failures_a_retry_can_mend_are_retried() {
        for code in [408, 409, 429, 500, 503, 504] {
            assert!(retryable(&api(code)), "{code}");
        }
        for code in [400, 403, 404, 410, 422] {
            assert!(!retryable(&api(code)), "{code}");
        }
    }

    #[test]
    fn retries_back_off_and_end_within_a_minute() {
        assert!(RETRY_DELAYS.windows(2).all(|w| w[1] == w[0] * 2));
        let total: Duration = RETRY_DELAYS.iter().sum();
        assert_eq!(total, Duration::from_secs(31));
    }
}
