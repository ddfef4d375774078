//! W3C Trace Context for hook requests: one trace per sync, so the requests one sync makes (its
//! customize, sync or finalize calls, a rolling update's calls per revision) share a trace id
//! that a hook's own logs can be matched by, and that kmeta's log lines for the sync carry
//! (`trace_id` on the `sync` span). Every request gets a `traceparent` header
//! (`00-<trace id>-<parent id>-00`) with a fresh parent id; the flags say not sampled, as kmeta
//! records no spans itself.

use std::future::Future;

use rand::RngCore as _;

tokio::task_local! {
    static SYNC_TRACE: TraceId;
}

/// A trace id: 16 random bytes, never all zero (the W3C invalid value).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceId([u8; 16]);

impl TraceId {
    /// A new random trace id.
    pub fn new() -> Self {
        let mut id = [0u8; 16];
        rand::rng().fill_bytes(&mut id);
        if id == [0; 16] {
            id[15] = 1;
        }
        TraceId(id)
    }
}

impl Default for TraceId {
    fn default() -> Self {
        Self::new()
    }
}

/// As written in `traceparent`: 32 lower-case hex digits.
impl std::fmt::Display for TraceId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

/// Runs `work` (one sync) in trace `trace`: the hook requests it makes carry it.
pub async fn in_trace<F: Future>(trace: TraceId, work: F) -> F::Output {
    SYNC_TRACE.scope(trace, work).await
}

/// The current sync's trace id; None outside a sync.
pub fn current_trace() -> Option<TraceId> {
    SYNC_TRACE.try_with(|t| *t).ok()
}

/// The `traceparent` header of a hook request made now: the current sync's trace with a fresh
/// parent id; None outside a sync.
pub fn traceparent() -> Option<String> {
    let trace = current_trace()?;
    let mut parent = rand::rng().next_u64();
    if parent == 0 {
        parent = 1;
    }
    Some(format!("00-{trace}-{parent:016x}-00"))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// `00-` + 32 hex + `-` + 16 hex + `-00`, the trace id shared within a sync.
    #[tokio::test]
    async fn requests_of_one_sync_share_its_trace_id() {
        assert_eq!(traceparent(), None, "outside a sync");
        let trace = TraceId::new();
        let (a, b) = in_trace(trace, async {
            (traceparent().unwrap(), traceparent().unwrap())
        })
        .await;
        for tp in [&a, &b] {
            let parts: Vec<&str> = tp.split('-').collect();
            assert_eq!(parts.len(), 4, "{tp}");
            assert_eq!((parts[0], parts[3]), ("00", "00"));
            assert_eq!(parts[1], trace.to_string());
            assert_eq!(parts[1].len(), 32);
            assert_eq!(parts[2].len(), 16);
            assert!(parts[1..3].iter().all(|p| {
                p.chars()
                    .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
            }));
        }
        assert_ne!(a, b, "each request its own parent id");
        assert_ne!(TraceId::new(), trace);
    }
}
