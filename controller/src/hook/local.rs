//! The in-process back end: a hook answered by a Rust function in this process (kmeta used as a
//! library, see [`crate::embed`]) instead of a webhook.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use super::backend::{Answer, BodyForm, Call, HookBackend};
use super::error::HookError;

/// The URL an in-process hook is shown (and labelled in metrics) as.
pub const IN_PROCESS_URL: &str = "in-process";

/// Why an in-process hook function failed: its error's text. It fails the parent's sync with
/// that text ([`HookError::InProcess`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub(crate) struct HookFailure {
    message: String,
}

impl HookFailure {
    /// A failure saying `why`.
    pub fn new(why: impl std::fmt::Display) -> HookFailure {
        HookFailure {
            message: why.to_string(),
        }
    }
}

/// A hook function in this process: it gets the request body a webhook would get and returns
/// the response body, or why it could not.
pub(crate) type LocalHook = Arc<
    dyn Fn(Value) -> std::pin::Pin<Box<dyn Future<Output = Result<Value, HookFailure>> + Send>>
        + Send
        + Sync,
>;

/// A hook answered by a [`LocalHook`] within the hook's timeout.
pub(crate) struct LocalBackend {
    f: LocalHook,
    timeout: Duration,
}

impl LocalBackend {
    /// `f`, bounded by `timeout`.
    pub fn new(f: LocalHook, timeout: Duration) -> LocalBackend {
        LocalBackend { f, timeout }
    }
}

impl HookBackend for LocalBackend {
    fn shown(&self) -> &str {
        IN_PROCESS_URL
    }

    fn timeout(&self) -> Option<Duration> {
        Some(self.timeout)
    }

    fn body_form(&self) -> BodyForm {
        BodyForm::Value
    }

    fn timed_out(&self, hook: &'static str, after: Duration) -> HookError {
        HookError::InProcess {
            hook,
            message: format!("no answer within the hook's timeout ({after:?})"),
        }
    }

    /// Calls the function with the body as a JSON value; its answer as the bytes a webhook
    /// would send.
    fn call<'a>(&'a self, call: Call<'a>) -> Answer<'a> {
        let hook = call.hook;
        let body = call.body.and_then(|b| b.into_value());
        Box::pin(async move {
            let body = body.map_err(|e| HookError::InProcess {
                hook,
                message: format!("encoding the request: {e}"),
            })?;
            let answer = (self.f)(body).await.map_err(|e| HookError::InProcess {
                hook,
                message: e.message,
            })?;
            serde_json::to_vec(&answer).map_err(|e| HookError::Config {
                hook,
                message: format!("encoding the in-process answer: {e}"),
            })
        })
    }
}
