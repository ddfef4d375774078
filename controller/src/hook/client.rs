//! The hook client: a hook's back end ([`super::backend`]: a webhook, a Rust function, a
//! Jsonnet program) with what every call of any back end gets once — the request's trace
//! context, the timeout, the request metrics and Jsonnet worker kills — and the decoding of its
//! answers with the hook's version and `responseUnmarshallMode`.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use serde::Serialize;
use serde_json::Value;

use super::backend::{Call, HookBackend, RequestBody};
use super::error::HookError;
use super::local::LocalBackend;
pub(crate) use super::local::LocalHook;
use super::registry;
use super::transport::{mask, webhook_timeout};
use crate::api::{EndpointConfig, Hook, HookVersion, ResponseUnmarshallMode};
use crate::hook::jsonnet::JsonnetOptions;
use crate::hook::wire;
use crate::ops::metrics::{ControllerType, HookKind, HookTarget, Metrics};

/// Default response size cap: 16 MiB (kmeta; Metacontroller has none).
pub const DEFAULT_MAX_RESPONSE_BYTES: usize = 16 * 1024 * 1024;

/// The largest buffer a request body is begun in (a larger body grows it): one large request
/// does not make every later one take as much.
const MAX_SIZE_HINT: usize = 1024 * 1024;

/// Transport settings shared by every hook of a controller.
#[derive(Debug, Clone)]
pub struct HookOptions {
    /// Response size cap. Default [`DEFAULT_MAX_RESPONSE_BYTES`] (16 MiB); also the largest
    /// answer of a Jsonnet hook.
    pub max_response_bytes: usize,
    /// How Jsonnet hooks are evaluated (their worker processes and limits).
    pub jsonnet: JsonnetOptions,
}

impl Default for HookOptions {
    fn default() -> Self {
        HookOptions {
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
            jsonnet: JsonnetOptions::default(),
        }
    }
}

/// A configured hook.
pub struct HookClient {
    kind: HookKind,
    /// What answers the hook's requests.
    backend: Box<dyn HookBackend>,
    version: HookVersion,
    mode: ResponseUnmarshallMode,
    /// Where request counts, durations and in-flight gauges go, with the controller's type
    /// (`controller_type` label) and name.
    metrics: Option<(Arc<Metrics>, ControllerType, String)>,
    /// The length of the last request body encoded as text: the next one is written into a
    /// buffer a little larger (requests of one hook are alike), not grown from nothing.
    last_len: AtomicUsize,
}

impl std::fmt::Debug for HookClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HookClient")
            .field("name", &self.name())
            .field("url", &self.backend.shown())
            .field("version", &self.version)
            .finish_non_exhaustive()
    }
}

impl HookClient {
    /// Builds the client for `hook` (the controller's `kind` hook) with the back end it
    /// declares ([`registry::for_hook`]), reading CA bundles, credentials and programs from
    /// Secrets/ConfigMaps once.
    pub async fn new(
        client: &kube::Client,
        kind: HookKind,
        hook: &Hook,
        endpoint_configs: &[EndpointConfig],
        opts: &HookOptions,
    ) -> Result<HookClient, HookError> {
        let backend =
            registry::for_hook(client, kind.as_str(), hook, endpoint_configs, opts).await?;
        Ok(HookClient::with_backend(kind, hook, backend))
    }

    /// A hook answered by `f` in this process (the controller's `kind` hook), with
    /// the wire version and response decoding `hook` declares (its webhook, if any, is not
    /// called, its `timeout` bounds the function). Requests and responses are the webhook's JSON
    /// bodies, decoded the same way, cached nowhere and counted in the metrics as a webhook's
    /// (url label `in-process`).
    pub fn in_process(kind: HookKind, hook: &Hook, f: LocalHook) -> Result<HookClient, HookError> {
        let timeout = webhook_timeout(&hook.webhook.clone().unwrap_or_default()).map_err(|e| {
            HookError::Config {
                hook: kind.as_str(),
                message: e.to_string(),
            }
        })?;
        let backend = Box::new(LocalBackend::new(f, timeout));
        Ok(HookClient::with_backend(kind, hook, backend))
    }

    /// The client of `backend`, decoding answers as `hook` declares.
    fn with_backend(kind: HookKind, hook: &Hook, backend: Box<dyn HookBackend>) -> HookClient {
        HookClient {
            kind,
            backend,
            version: hook.version.unwrap_or_default(),
            mode: wire::response_mode(hook),
            metrics: None,
            last_len: AtomicUsize::new(0),
        }
    }

    /// Records this hook's requests in `metrics` under `controller` of kind `controller_type`.
    pub fn with_metrics(
        mut self,
        metrics: Arc<Metrics>,
        controller_type: ControllerType,
        controller: &str,
    ) -> HookClient {
        self.metrics = Some((metrics, controller_type, controller.to_owned()));
        self
    }

    /// The hook's name: `sync`, `finalize` or `customize`.
    fn name(&self) -> &'static str {
        self.kind.as_str()
    }

    /// The hook's wire version.
    pub fn version(&self) -> HookVersion {
        self.version
    }

    /// Sends `body` to the back end and returns its answer: a webhook's 200 response body (or
    /// the cached body on 304/412 when `If-None-Match` was sent; `cache_key` identifies the root
    /// object for the ETag cache), a function's or a program's answer as the same bytes.
    pub async fn call<B: Serialize + ?Sized>(
        &self,
        cache_key: &str,
        body: &B,
    ) -> Result<Vec<u8>, HookError> {
        let last = self.last_len.load(Ordering::Relaxed);
        let hint = (last + last / 8).min(MAX_SIZE_HINT);
        let body = RequestBody::encode(body, self.backend.body_form(), hint);
        if let Ok(b) = &body {
            self.last_len.store(b.text_len(), Ordering::Relaxed);
        }
        let call = Call {
            hook: self.name(),
            cache_key,
            body,
            traceparent: super::trace::traceparent(),
        };
        let Some((metrics, controller_type, controller)) = &self.metrics else {
            return self.bounded(call).await;
        };
        let target = HookTarget {
            controller_type: *controller_type,
            controller,
            hook: self.kind,
            url: self.backend.shown(),
        };
        let _in_flight = metrics.hook_in_flight(&target);
        let started = Instant::now();
        let result = self.bounded(call).await;
        if let Some(kill) = result.as_ref().err().and_then(HookError::worker_kill) {
            metrics.jsonnet_worker_killed(kill);
        }
        metrics.hook_request(&target, "POST", &status_label(&result), started.elapsed());
        result
    }

    /// The back end's answer to `call`, within the back end's timeout.
    async fn bounded(&self, call: Call<'_>) -> Result<Vec<u8>, HookError> {
        let Some(timeout) = self.backend.timeout() else {
            return self.backend.call(call).await;
        };
        let hook = call.hook;
        match tokio::time::timeout(timeout, self.backend.call(call)).await {
            Ok(answer) => answer,
            Err(_) => Err(self.backend.timed_out(hook, timeout)),
        }
    }

    /// Decodes and checks a sync/finalize response body (as [`HookClient::call`] returned it).
    pub fn decode_sync(&self, body: &[u8]) -> Result<wire::SyncResponse, HookError> {
        wire::decode_sync_response(body, self.mode, self.name()).map_err(|e| self.masked(e))
    }

    /// Calls a DecoratorController sync/finalize hook and decodes the response.
    pub async fn decorator_sync<B: Serialize + ?Sized>(
        &self,
        cache_key: &str,
        request: &B,
    ) -> Result<wire::DecoratorSyncResponse, HookError> {
        let body = self.call(cache_key, request).await?;
        wire::decode_decorator_response(&body, self.mode, self.name()).map_err(|e| self.masked(e))
    }

    /// Calls a customize hook and decodes the response.
    pub async fn customize(
        &self,
        cache_key: &str,
        request: &Value,
    ) -> Result<Vec<wire::RelatedResourceRule>, HookError> {
        let body = self.call(cache_key, request).await?;
        wire::decode_customize_response(&body, self.mode).map_err(|e| self.masked(e))
    }

    /// A decoding error whose message quotes the response, with every credential kmeta sent
    /// masked (a hook may echo its `Authorization` header).
    fn masked(&self, e: wire::WireError) -> HookError {
        let m = |message: String| mask(&message, self.backend.sent());
        HookError::Wire(match e {
            wire::WireError::Decode {
                hook,
                mode,
                message,
            } => wire::WireError::Decode {
                hook,
                mode,
                message: m(message),
            },
            wire::WireError::Child {
                hook,
                index,
                message,
            } => wire::WireError::Child {
                hook,
                index,
                message: m(message),
            },
            wire::WireError::Attachment {
                hook,
                index,
                message,
            } => wire::WireError::Attachment {
                hook,
                index,
                message: m(message),
            },
        })
    }
}

/// The `code` label of a hook request's outcome: the HTTP status a webhook answered (`200` for
/// an answer kmeta refused to decode), `error` when there was none.
fn status_label(result: &Result<Vec<u8>, HookError>) -> String {
    match result {
        Ok(_) | Err(HookError::TooLarge { .. } | HookError::Wire(_)) => "200".to_owned(),
        Err(HookError::Status { code, .. }) => code.to_string(),
        Err(HookError::TooManyRequests { .. }) => "429".to_owned(),
        Err(_) => "error".to_owned(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::sync::Mutex;
    use std::time::Duration;

    use super::*;
    use crate::hook::backend::{Answer, BodyForm};
    use crate::ops::metrics::WorkerKill;

    /// A back end that answers after `delay`, or fails as a killed Jsonnet worker, and keeps
    /// the `traceparent` and body it was given.
    struct Fake {
        delay: Duration,
        kill: bool,
        seen: Mutex<Option<(Option<String>, String)>>,
    }

    impl HookBackend for Fake {
        fn shown(&self) -> &str {
            "fake:backend"
        }
        fn timeout(&self) -> Option<Duration> {
            Some(Duration::from_millis(50))
        }
        fn timed_out(&self, hook: &'static str, after: Duration) -> HookError {
            HookError::InProcess {
                hook,
                message: format!("late after {after:?}"),
            }
        }
        fn call<'a>(&'a self, call: Call<'a>) -> Answer<'a> {
            let body = call.body.and_then(RequestBody::into_text).unwrap();
            *self.seen.lock().unwrap() = Some((call.traceparent, body));
            Box::pin(async move {
                tokio::time::sleep(self.delay).await;
                if self.kill {
                    return Err(HookError::Jsonnet {
                        hook: "sync",
                        source_name: "fake".into(),
                        message: "killed".into(),
                        killed: Some(WorkerKill::Memory),
                    });
                }
                Ok(b"{}".to_vec())
            })
        }
    }

    fn client(delay: Duration, kill: bool) -> HookClient {
        let fake = Fake {
            delay,
            kill,
            seen: Mutex::new(None),
        };
        assert_eq!(fake.body_form(), BodyForm::Text);
        HookClient::with_backend(HookKind::Sync, &Hook::default(), Box::new(fake))
    }

    #[tokio::test]
    async fn the_client_bounds_traces_and_counts_any_back_end() {
        let metrics = Arc::new(Metrics::new());
        let quick = client(Duration::ZERO, false).with_metrics(
            metrics.clone(),
            ControllerType::Composite,
            "c",
        );
        let trace = crate::hook::trace::TraceId::new();
        let body = serde_json::json!({"a": 1});
        let answer = crate::hook::trace::in_trace(trace, quick.call("k", &body)).await;
        assert_eq!(answer.unwrap(), b"{}");
        let late = client(Duration::from_secs(5), false);
        let err = late.call("k", &body).await.unwrap_err();
        assert_eq!(err.to_string(), "sync hook (in-process): late after 50ms");
        let killed = client(Duration::ZERO, true).with_metrics(
            metrics.clone(),
            ControllerType::Composite,
            "c",
        );
        assert!(killed.call("k", &body).await.is_err());
        let text = metrics.encode();
        let kills = text
            .lines()
            .find(|l| l.starts_with("kmeta_jsonnet_worker_kills") && l.contains("memory"));
        assert!(kills.is_some_and(|l| l.ends_with(" 1")), "{text}");
        assert!(text.contains("fake:backend"), "the url label: {text}");
    }

    #[tokio::test]
    async fn the_back_end_gets_the_body_and_the_trace_of_the_sync() {
        let fake = Arc::new(Fake {
            delay: Duration::ZERO,
            kill: false,
            seen: Mutex::new(None),
        });
        struct Shared(Arc<Fake>);
        impl HookBackend for Shared {
            fn shown(&self) -> &str {
                self.0.shown()
            }
            fn timeout(&self) -> Option<Duration> {
                self.0.timeout()
            }
            fn timed_out(&self, hook: &'static str, after: Duration) -> HookError {
                self.0.timed_out(hook, after)
            }
            fn call<'a>(&'a self, call: Call<'a>) -> Answer<'a> {
                self.0.call(call)
            }
        }
        let hook = HookClient::with_backend(
            HookKind::Sync,
            &Hook::default(),
            Box::new(Shared(fake.clone())),
        );
        let trace = crate::hook::trace::TraceId::new();
        let body = serde_json::json!({"a": 1});
        crate::hook::trace::in_trace(trace, hook.call("k", &body))
            .await
            .unwrap();
        let (traceparent, sent) = fake.seen.lock().unwrap().clone().unwrap();
        assert!(traceparent.unwrap().contains(&trace.to_string()));
        assert_eq!(sent, r#"{"a":1}"#);
        hook.call("k", &body).await.unwrap();
        let (outside, _) = fake.seen.lock().unwrap().clone().unwrap();
        assert_eq!(outside, None, "no trace outside a sync");
    }
}
