//! Why a sync failed ([`SyncError`]) and what class of failure that is ([`FailureClass`]): the
//! core decides from the class alone whether to wait, retry after the hook's delay, count the
//! hook as down, or report and back off.

use std::time::Duration;

use crate::hook::HookError;
use crate::reconcile::decide::{DecideError, IdentityError};
use crate::reconcile::rollout::RolloutError;
use crate::runtime::resources::ResourceError;
use crate::runtime::selector::SelectorError;

/// Why a sync failed. Nothing about the children changes when the hook failed.
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    /// A decision failed (selector, invalid desired child, apply input).
    #[error(transparent)]
    Decide(#[from] DecideError),
    /// A label selector is invalid.
    #[error(transparent)]
    Selector(#[from] SelectorError),
    /// A rolling update cannot be decided (revision history, stored revision, hook status).
    #[error(transparent)]
    Rollout(#[from] RolloutError),
    /// The hook failed, timed out or answered something unusable.
    #[error(transparent)]
    Hook(#[from] HookError),
    /// An API call failed.
    #[error("{action}: {}", crate::runtime::kapi::describe(.source))]
    Api {
        /// What was being done.
        action: String,
        /// Cause.
        source: kube::Error,
    },
    /// Some child writes failed (the others were made).
    #[error("managing children: {}", .0.join("; "))]
    Children(Vec<String>),
    /// A related resource watch has not listed yet (requeued without an event).
    #[error("related watch {0} not synced yet")]
    RelatedNotSynced(String),
    /// A watch the sync reads (parent or child) has not finished its first list within
    /// `watch_sync_deadline`: the sync is retried rather than run on a partial cache.
    #[error("watch {0} not synced yet")]
    WatchNotSynced(String),
    /// The object changed since the sync read it (a write based on that read got 409 Conflict):
    /// the write is abandoned, never redone on a re-read, and the sync retried on the newer
    /// version (requeued without an event).
    #[error("{0} changed since it was read; syncing again")]
    Stale(String),
    /// Writes an earlier sync of this object made (children created, updated or deleted, its own
    /// status) are not in the watch caches yet: the sync waits for them rather than tell the
    /// hook a created child does not exist or write over a version already replaced (requeued
    /// without an event; their watch events bring the object back sooner). See
    /// [`crate::reconcile::expectations`].
    #[error("waiting for the watch to show {0}")]
    AwaitingWatch(String),
    /// A cached object could not be encoded or parsed.
    #[error(transparent)]
    Cached(#[from] crate::runtime::compact::CompactError),
    /// A related-resource rule is invalid or unresolvable.
    #[error("customize: {0}")]
    Related(String),
    /// A resource is unknown.
    #[error(transparent)]
    Resource(#[from] ResourceError),
    /// No identity can be chosen for the object's writes (a ServiceAccount is asked for but
    /// cannot be located): nothing is written for it.
    #[error(transparent)]
    Identity(#[from] IdentityError),
    /// Part of the work is other replicas' (theirs to do; this process tries again later).
    #[error("{0}")]
    LeftToOtherReplicas(String),
}

/// What class of failure a [`SyncError`] is, which decides how the core goes on: the only
/// thing the core reads of a sync's error besides its text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureClass {
    /// Not a failure: a wait that ends by itself (a watch still to list or to show an earlier
    /// write, the object changed since read). Retried on the waits' short ladder without an
    /// event (`result="retry"`), and says nothing about the hook.
    Wait,
    /// The hook asked to be called again after this long (429 with `Retry-After`).
    HookRetryAfter(Duration),
    /// The hook endpoint could not be reached or a gateway said it is unavailable (no
    /// connection, TLS, a timeout, 502/503/504): evidence for the hook circuit that it is down.
    HookDown,
    /// The hook answered, but failed on this parent's input (any other status, an unusable
    /// answer): this parent's own failure, as in Metacontroller.
    HookFault,
    /// Anything else (an API call refused, an invalid answer, no identity): reported in an
    /// event and the `Synced` condition, retried with backoff.
    Failed,
}

impl SyncError {
    /// The class of this failure ([`FailureClass`]).
    pub fn class(&self) -> FailureClass {
        match self {
            SyncError::AwaitingWatch(_)
            | SyncError::RelatedNotSynced(_)
            | SyncError::WatchNotSynced(_)
            | SyncError::Stale(_) => FailureClass::Wait,
            SyncError::Hook(HookError::TooManyRequests { retry_after, .. }) => {
                FailureClass::HookRetryAfter(*retry_after)
            }
            SyncError::Hook(HookError::Transport { .. }) => FailureClass::HookDown,
            SyncError::Hook(HookError::Status { code, .. }) if endpoint_down(*code) => {
                FailureClass::HookDown
            }
            SyncError::Hook(_) => FailureClass::HookFault,
            _ => FailureClass::Failed,
        }
    }
}

/// HTTP statuses that say the hook endpoint, not the parent's input, is the problem: a gateway
/// or load balancer with no healthy backend (502 Bad Gateway, 504 Gateway Timeout) or a server
/// refusing all work (503 Service Unavailable).
fn endpoint_down(code: u16) -> bool {
    matches!(code, 502..=504)
}

pub(crate) fn api_err(action: impl Into<String>) -> impl FnOnce(kube::Error) -> SyncError {
    let action = action.into();
    move |source| SyncError::Api { action, source }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hook_status(code: u16) -> SyncError {
        SyncError::Hook(HookError::Status {
            hook: "sync",
            url: "http://hook".into(),
            code,
            body: "boom".into(),
        })
    }

    #[test]
    fn each_failure_has_one_class() {
        for code in [502, 503, 504] {
            assert_eq!(hook_status(code).class(), FailureClass::HookDown, "{code}");
        }
        for code in [400, 404, 500] {
            assert_eq!(hook_status(code).class(), FailureClass::HookFault, "{code}");
        }
        let wait = SyncError::AwaitingWatch("a child".into());
        assert_eq!(wait.class(), FailureClass::Wait);
        assert_eq!(SyncError::Stale("p".into()).class(), FailureClass::Wait);
        let later = SyncError::Hook(HookError::TooManyRequests {
            hook: "sync",
            url: "http://hook".into(),
            retry_after: Duration::from_secs(7),
        });
        assert_eq!(
            later.class(),
            FailureClass::HookRetryAfter(Duration::from_secs(7))
        );
        let refused = SyncError::Children(vec!["creating ConfigMap a: forbidden".into()]);
        assert_eq!(refused.class(), FailureClass::Failed);
    }
}
