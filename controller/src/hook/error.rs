//! Why configuring or calling a hook failed.

use std::time::Duration;

use crate::hook::wire;
use crate::ops::metrics::WorkerKill;

/// Errors configuring or calling a hook.
#[derive(Debug, thiserror::Error)]
pub enum HookError {
    /// The hook spec is unusable.
    #[error("{hook} hook config: {message}")]
    Config {
        /// Hook name.
        hook: &'static str,
        /// What is wrong.
        message: String,
    },
    /// A Secret/ConfigMap with credentials could not be read.
    #[error("{hook} hook: reading {what} {namespace}/{name}: {message}")]
    Credentials {
        /// Hook.
        hook: &'static str,
        /// `secret` or `configmap`.
        what: &'static str,
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
        /// Cause.
        message: String,
    },
    /// Connecting, sending or receiving failed (including the timeout).
    #[error("{hook} hook {url}: {message}")]
    Transport {
        /// Hook.
        hook: &'static str,
        /// URL.
        url: String,
        /// Cause.
        message: String,
    },
    /// The hook answered with a non-200 status.
    #[error("{hook} hook {url}: http status {code}: {body}")]
    Status {
        /// Hook.
        hook: &'static str,
        /// URL.
        url: String,
        /// HTTP status.
        code: u16,
        /// The first 512 bytes of the body.
        body: String,
    },
    /// 429 Too Many Requests: requeue after the delay.
    #[error("{hook} hook {url}: too many requests, retry after {retry_after:?}")]
    TooManyRequests {
        /// Hook.
        hook: &'static str,
        /// URL.
        url: String,
        /// From `Retry-After` (default 1 s when absent or unparsable).
        retry_after: Duration,
    },
    /// The body exceeded the cap.
    #[error("{hook} hook {url}: response larger than {limit} bytes")]
    TooLarge {
        /// Hook.
        hook: &'static str,
        /// URL.
        url: String,
        /// The cap.
        limit: usize,
    },
    /// The body did not decode.
    #[error(transparent)]
    Wire(#[from] wire::WireError),
    /// A Jsonnet hook's program failed on this parent's request (an error, a limit, its
    /// timeout). Like [`HookError::InProcess`], this parent's failure, not an outage.
    #[error("{hook} hook ({source_name}): {message}")]
    Jsonnet {
        /// Hook.
        hook: &'static str,
        /// Where the program came from (`jsonnet:inline`, `jsonnet:configmap/ns/name/key`).
        source_name: String,
        /// What failed.
        message: String,
        /// The worker process the failure killed (its timeout or memory limit), if any.
        killed: Option<WorkerKill>,
    },
    /// A CEL hook's graph failed on this parent's request (an expression, its timeout): the
    /// resource, field path and expression named. This parent's failure, not an outage.
    #[error("{hook} hook ({source_name}): {message}")]
    Cel {
        /// Hook.
        hook: &'static str,
        /// `cel:resourceGraph`.
        source_name: String,
        /// What failed, where.
        message: String,
    },
    /// An in-process hook function returned an error or did not answer within the hook's
    /// timeout. A failure of this parent's sync, not an outage of a hook service: retried with
    /// the parent's backoff, never parking other parents behind the hook circuit.
    #[error("{hook} hook (in-process): {message}")]
    InProcess {
        /// Hook.
        hook: &'static str,
        /// The function's error, or the timeout.
        message: String,
    },
}

impl HookError {
    /// The Jsonnet worker this failure killed, if any (counted in the metrics once, by the
    /// client, whatever the back end).
    pub(crate) fn worker_kill(&self) -> Option<WorkerKill> {
        match self {
            HookError::Jsonnet { killed, .. } => *killed,
            _ => None,
        }
    }
}
