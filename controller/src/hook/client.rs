//! The webhook client: one keep-alive `reqwest` client per hook, with its timeout, URL, CA
//! bundle, credentials and client TLS (from [`super::transport`]), the ETag cache
//! ([`super::etag`]), a response size cap, `Retry-After` and metrics.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::Value;

use super::error::HookError;
use super::etag::EtagCache;
use super::tls;
use super::transport::{
    Credentials, mask, mask_url_passwords, match_endpoint_config, security, sent_credentials,
    webhook_timeout, webhook_url, without_userinfo,
};
use crate::api::{EndpointConfig, Hook, HookVersion, ResponseUnmarshallMode};
use crate::hook::jsonnet::{self, JsonnetOptions};
use crate::hook::wire;
use crate::ops::metrics::{ControllerType, HookKind, HookTarget, Metrics};

/// The URL an in-process hook is shown (and labelled in metrics) as.
pub const IN_PROCESS_URL: &str = "in-process";

/// Default response size cap: 16 MiB (kmeta; Metacontroller has none).
pub const DEFAULT_MAX_RESPONSE_BYTES: usize = 16 * 1024 * 1024;

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

/// Parses `Retry-After`: delay seconds or an HTTP date.
pub fn parse_retry_after(value: &str, now: jiff::Timestamp) -> Option<Duration> {
    let v = value.trim();
    if let Ok(secs) = v.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at = jiff::fmt::rfc2822::parse(v).ok()?.timestamp();
    let d = at.duration_since(now);
    Some(Duration::try_from(d).unwrap_or(Duration::ZERO))
}

/// A hook answered by a Rust function in this process instead of a webhook (kmeta used as a
/// library, see [`crate::embed`]): it gets the request body a webhook would get and returns the
/// response body; an `Err` fails the parent's sync with that text ([`HookError::InProcess`]).
pub type LocalHook = Arc<
    dyn Fn(Value) -> std::pin::Pin<Box<dyn Future<Output = Result<Value, String>> + Send>>
        + Send
        + Sync,
>;

/// A configured hook.
pub struct HookClient {
    kind: HookKind,
    /// The URL requests go to, parsed once (may carry userinfo: never printed; `None` for an
    /// in-process hook, which sends no request).
    url: Option<reqwest::Url>,
    /// The URL as printed, labelled and stored: without userinfo.
    shown_url: String,
    /// Credential values requests carry, masked in response text kmeta copies anywhere.
    sent: Vec<String>,
    http: reqwest::Client,
    /// The `Authorization` header value, if any (never logged).
    authorization: Option<String>,
    version: HookVersion,
    mode: ResponseUnmarshallMode,
    max_response_bytes: usize,
    etag: Option<EtagCache>,
    /// Where request counts, durations and in-flight gauges go, with the controller's type
    /// (`controller_type` label) and name.
    metrics: Option<(Arc<Metrics>, ControllerType, String)>,
    /// Set for an in-process hook: called instead of the webhook, within this timeout.
    local: Option<(LocalHook, Duration)>,
    /// Set for a Jsonnet hook: evaluated instead of calling a webhook.
    jsonnet: Option<Arc<jsonnet::Runner>>,
}

impl std::fmt::Debug for HookClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HookClient")
            .field("name", &self.name())
            .field("url", &self.shown_url)
            .field("version", &self.version)
            .finish_non_exhaustive()
    }
}

impl HookClient {
    /// Builds the client for `hook` (the controller's `kind` hook), reading CA bundles and
    /// credentials from Secrets/ConfigMaps once.
    pub async fn new(
        client: &kube::Client,
        kind: HookKind,
        hook: &Hook,
        endpoint_configs: &[EndpointConfig],
        opts: &HookOptions,
    ) -> Result<HookClient, HookError> {
        jsonnet::check_kind(kind.as_str(), hook).map_err(|message| HookError::Config {
            hook: kind.as_str(),
            message,
        })?;
        if let Some(j) = &hook.jsonnet {
            return Self::jsonnet(client, kind, hook, j, opts).await;
        }
        let creds = Credentials {
            client,
            hook: kind.as_str(),
        };
        let cfg = |message: String| creds.invalid(message);
        let w = hook
            .webhook
            .as_ref()
            .ok_or_else(|| cfg("webhook is required".into()))?;
        let url = webhook_url(w).map_err(cfg)?;
        let shown_url = without_userinfo(&url);
        let parsed =
            reqwest::Url::parse(&url).map_err(|e| cfg(format!("url {shown_url:?}: {e}")))?;
        let timeout = webhook_timeout(w).map_err(cfg)?;
        let sec = security(w, match_endpoint_config(&parsed, endpoint_configs));
        let mut builder = reqwest::Client::builder()
            .use_rustls_tls()
            .timeout(timeout)
            .pool_idle_timeout(Duration::from_secs(90))
            .min_tls_version(reqwest::tls::Version::TLS_1_2);
        let roots = match sec.ca_bundle {
            Some(ca) => Some(creds.ca_bundle(ca).await?),
            None => None,
        };
        let identity = match sec.client_tls {
            Some(tls) => Some(creds.client_identity(tls).await?),
            None => None,
        };
        if roots.is_some() || identity.is_some() {
            let config = tls::client_config(roots.as_deref(), identity)
                .map_err(|e| cfg(format!("TLS: {e}")))?;
            builder = builder.use_preconfigured_tls(config);
        }
        let authorization = creds.authorization(&sec).await?;
        let http = builder
            .build()
            .map_err(|e| cfg(format!("http client: {}", error_chain(&e))))?;
        let sent = sent_credentials(&url, authorization.as_deref());
        Ok(HookClient {
            kind,
            url: Some(parsed),
            shown_url,
            sent,
            http,
            authorization,
            version: hook.version.unwrap_or_default(),
            mode: wire::response_mode(hook),
            max_response_bytes: opts.max_response_bytes,
            etag: EtagCache::for_webhook(w),
            metrics: None,
            local: None,
            jsonnet: None,
        })
    }

    /// A Jsonnet hook: its program read (from its ConfigMap, if it names one) and
    /// syntax-checked now, evaluated by the worker processes `opts.jsonnet` describes.
    async fn jsonnet(
        client: &kube::Client,
        kind: HookKind,
        hook: &Hook,
        j: &crate::api::JsonnetHook,
        opts: &HookOptions,
    ) -> Result<HookClient, HookError> {
        let cfg = |message: String| HookError::Config {
            hook: kind.as_str(),
            message: format!("jsonnet: {message}"),
        };
        let program = jsonnet::compile(client, j)
            .await
            .map_err(|e| cfg(e.to_string()))?;
        let runner = jsonnet::Runner::new(program, &opts.jsonnet, opts.max_response_bytes)
            .map_err(|e| cfg(e.to_string()))?;
        let http = reqwest::Client::builder()
            .build()
            .map_err(|e| cfg(format!("http client: {}", error_chain(&e))))?;
        Ok(HookClient {
            kind,
            url: None,
            shown_url: runner.shown().to_owned(),
            sent: Vec::new(),
            http,
            authorization: None,
            version: hook.version.unwrap_or_default(),
            mode: wire::response_mode(hook),
            max_response_bytes: opts.max_response_bytes,
            etag: None,
            metrics: None,
            local: None,
            jsonnet: Some(Arc::new(runner)),
        })
    }

    /// A hook answered by `f` in this process (the controller's `kind` hook), with
    /// the wire version and response decoding `hook` declares (its webhook, if any, is not
    /// called, its `timeout` bounds the function). Requests and responses are the webhook's JSON
    /// bodies, decoded the same way, cached nowhere and counted in the metrics as a webhook's
    /// (url label `in-process`).
    pub fn in_process(kind: HookKind, hook: &Hook, f: LocalHook) -> Result<HookClient, HookError> {
        let cfg = |message: String| HookError::Config {
            hook: kind.as_str(),
            message,
        };
        let timeout = webhook_timeout(&hook.webhook.clone().unwrap_or_default()).map_err(cfg)?;
        let http = reqwest::Client::builder()
            .build()
            .map_err(|e| cfg(format!("http client: {}", error_chain(&e))))?;
        Ok(HookClient {
            kind,
            url: None,
            shown_url: IN_PROCESS_URL.to_owned(),
            sent: Vec::new(),
            http,
            authorization: None,
            version: hook.version.unwrap_or_default(),
            mode: wire::response_mode(hook),
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
            etag: None,
            metrics: None,
            local: Some((f, timeout)),
            jsonnet: None,
        })
    }

    /// Calls the in-process function with `body`; its answer as the bytes a webhook would send.
    async fn call_local(
        &self,
        (f, timeout): &(LocalHook, Duration),
        body: Value,
    ) -> Result<Vec<u8>, HookError> {
        let answer =
            tokio::time::timeout(*timeout, f(body))
                .await
                .map_err(|_| HookError::InProcess {
                    hook: self.name(),
                    message: format!("no answer within the hook's timeout ({timeout:?})"),
                })?;
        let answer = answer.map_err(|message| HookError::InProcess {
            hook: self.name(),
            message,
        })?;
        serde_json::to_vec(&answer).map_err(|e| HookError::Config {
            hook: self.name(),
            message: format!("encoding the in-process answer: {e}"),
        })
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

    /// POSTs `body` and returns the response body of a 200 (or the cached body on 304/412 when
    /// `If-None-Match` was sent). `cache_key` identifies the root object for the ETag cache.
    pub async fn call<B: Serialize + ?Sized>(
        &self,
        cache_key: &str,
        body: &B,
    ) -> Result<Vec<u8>, HookError> {
        let Some((metrics, controller_type, controller)) = &self.metrics else {
            return self.call_unobserved(cache_key, body).await;
        };
        let target = HookTarget {
            controller_type: *controller_type,
            controller,
            hook: self.kind,
            url: &self.shown_url,
        };
        let _in_flight = metrics.hook_in_flight(&target);
        let started = Instant::now();
        let result = self.call_unobserved(cache_key, body).await;
        let code = match &result {
            Ok(_) | Err(HookError::TooLarge { .. } | HookError::Wire(_)) => "200".to_owned(),
            Err(HookError::Status { code, .. }) => code.to_string(),
            Err(HookError::TooManyRequests { .. }) => "429".to_owned(),
            Err(_) => "error".to_owned(),
        };
        metrics.hook_request(&target, "POST", &code, started.elapsed());
        result
    }

    /// POSTs `body` once, without metrics: the request (with `If-None-Match` when the ETag cache
    /// holds `cache_key`), then the response checked and cached.
    async fn call_unobserved<B: Serialize + ?Sized>(
        &self,
        cache_key: &str,
        body: &B,
    ) -> Result<Vec<u8>, HookError> {
        if let Some(j) = &self.jsonnet {
            let request = serde_json::to_string(body).map_err(|e| HookError::Jsonnet {
                hook: self.name(),
                source_name: j.shown().to_owned(),
                message: format!("encoding the request: {e}"),
            })?;
            let answer = j.call(request).await;
            if let (Err(e), Some((metrics, _, _))) = (&answer, &self.metrics) {
                use crate::ops::metrics::WorkerKill;
                match e {
                    jsonnet::PoolError::Timeout(_) => {
                        metrics.jsonnet_worker_killed(WorkerKill::Timeout)
                    }
                    jsonnet::PoolError::Memory { .. } => {
                        metrics.jsonnet_worker_killed(WorkerKill::Memory)
                    }
                    _ => {}
                }
            }
            return answer.map_err(|e| HookError::Jsonnet {
                hook: self.name(),
                source_name: j.shown().to_owned(),
                message: e.to_string(),
            });
        }
        if let Some(f) = &self.local {
            let body = serde_json::to_value(body).map_err(|e| HookError::InProcess {
                hook: self.name(),
                message: format!("encoding the request: {e}"),
            })?;
            return self.call_local(f, body).await;
        }
        let mut req = self.request(body)?;
        let cached = self.etag.as_ref().and_then(|e| e.get(cache_key));
        if let Some((etag, _)) = &cached {
            req = req.header(http::header::IF_NONE_MATCH, etag);
        }
        let mut resp = req.send().await.map_err(|e| self.transport_error(e))?;
        let code = resp.status().as_u16();
        if code == 429 {
            return Err(self.too_many_requests(&resp));
        }
        if let Some((_, body)) = cached
            && (code == 304 || code == 412)
        {
            return Ok(body);
        }
        let etag = resp
            .headers()
            .get(http::header::ETAG)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let out = self.read_capped(&mut resp).await?;
        if code != 200 {
            let n = out.len().min(512);
            return Err(HookError::Status {
                hook: self.name(),
                url: self.shown_url.clone(),
                code,
                body: mask(&String::from_utf8_lossy(&out[..n]), &self.sent),
            });
        }
        if tracing::enabled!(tracing::Level::TRACE) {
            let shown = serde_json::from_slice::<Value>(&out)
                .map(|v| mask(&redact_secrets(&v).to_string(), &self.sent))
                .unwrap_or_else(|_| format!("<{} bytes, not JSON>", out.len()));
            tracing::trace!(hook = self.name(), url = %self.shown_url, response = %shown, "hook response");
        }
        if let (Some(etag), Some(cache)) = (etag, &self.etag) {
            cache.put(cache_key, etag, &out);
        }
        Ok(out)
    }

    /// The POST of `body` as JSON (encoded straight from what it borrows), with the
    /// `Authorization` header when configured (traced with Secrets redacted).
    fn request<B: Serialize + ?Sized>(
        &self,
        body: &B,
    ) -> Result<reqwest::RequestBuilder, HookError> {
        let payload = serde_json::to_vec(body).map_err(|e| HookError::Config {
            hook: self.name(),
            message: format!("encoding request: {e}"),
        })?;
        if tracing::enabled!(tracing::Level::TRACE) {
            let shown = serde_json::to_value(body).map(|v| redact_secrets(&v).to_string());
            let shown = mask(&shown.unwrap_or_else(|e| e.to_string()), &self.sent);
            tracing::trace!(hook = self.name(), url = %self.shown_url, request = %shown, "hook request");
        }
        let Some(url) = &self.url else {
            return Err(HookError::Config {
                hook: self.name(),
                message: "an in-process hook sends no request".to_owned(),
            });
        };
        let mut req = self
            .http
            .post(url.clone())
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(payload);
        if let Some(a) = &self.authorization {
            req = req.header(http::header::AUTHORIZATION, a);
        }
        if let Some(tp) = super::trace::traceparent() {
            req = req.header("traceparent", tp);
        }
        Ok(req)
    }

    /// A transport failure (timeout, connection, body read) as this hook's error.
    fn transport_error(&self, e: reqwest::Error) -> HookError {
        HookError::Transport {
            hook: self.name(),
            url: self.shown_url.clone(),
            message: if e.is_timeout() {
                "timed out".to_owned()
            } else if let Some(hint) = tls::handshake_hint(&error_chain(&e)) {
                format!("TLS handshake: {}: {hint}", error_chain(&e.without_url()))
            } else if e.is_connect() {
                // the URL is already in the message; say plainly that nothing answered
                format!("cannot connect: {}", error_chain(&e.without_url()))
            } else {
                error_chain(&e.without_url())
            },
        }
    }

    /// A 429 answer as an error, with its `Retry-After` (default 1 s).
    fn too_many_requests(&self, resp: &reqwest::Response) -> HookError {
        let retry_after = resp
            .headers()
            .get(http::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| parse_retry_after(v, jiff::Timestamp::now()))
            .unwrap_or(Duration::from_secs(1));
        HookError::TooManyRequests {
            hook: self.name(),
            url: self.shown_url.clone(),
            retry_after,
        }
    }

    /// The whole response body, or an error as soon as it exceeds the size cap. A body delimited
    /// by the end of the connection may end without TLS close_notify (Python's `http.server` over
    /// `ssl` does so), as Go accepts: rustls only hands over whole records, so the body ends at a
    /// record boundary, and a truncated one fails to decode.
    async fn read_capped(&self, resp: &mut reqwest::Response) -> Result<Vec<u8>, HookError> {
        let until_close = close_delimited(resp.headers());
        let mut out = Vec::new();
        loop {
            let chunk = match resp.chunk().await {
                Ok(Some(chunk)) => chunk,
                Ok(None) => break,
                Err(e) if until_close && unclean_tls_eof(&e) => break,
                Err(e) => return Err(self.transport_error(e)),
            };
            if out.len() + chunk.len() > self.max_response_bytes {
                return Err(HookError::TooLarge {
                    hook: self.name(),
                    url: self.shown_url.clone(),
                    limit: self.max_response_bytes,
                });
            }
            out.extend_from_slice(&chunk);
        }
        Ok(out)
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
        let m = |message: String| mask(&message, &self.sent);
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

/// True when a response body ends with the connection (RFC 9112 §6.3: no Content-Length and no
/// chunked Transfer-Encoding), as in an HTTP/1.0 answer without Content-Length.
fn close_delimited(headers: &http::HeaderMap) -> bool {
    let chunked = headers
        .get_all(http::header::TRANSFER_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .next_back()
        .is_some_and(|last| last.trim().eq_ignore_ascii_case("chunked"));
    !chunked && !headers.contains_key(http::header::CONTENT_LENGTH)
}

/// True when `e` comes from a TLS connection the peer closed without close_notify (rustls reports
/// it as an `UnexpectedEof` I/O error once every whole record has been read).
fn unclean_tls_eof(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause = Some(e);
    while let Some(c) = cause {
        if let Some(io) = c.downcast_ref::<std::io::Error>() {
            return io.kind() == std::io::ErrorKind::UnexpectedEof;
        }
        cause = c.source();
    }
    false
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(inner) = src {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        src = inner.source();
    }
    s
}

/// A copy of a hook body for trace logs, with the values of every Secret's `data` and
/// `stringData` replaced by `<redacted>` — also inside a Secret's annotations that hold the object
/// as JSON (the last-applied configuration of kmeta or kubectl): bodies may carry Secrets
/// (children or related objects), and logs must never contain them — and the password of every
/// URL in a string (the controller object's webhook URLs). The Authorization header is never
/// logged at all.
pub fn redact_secrets(v: &Value) -> Value {
    match v {
        Value::Object(map) => {
            let secret = map.get("kind").and_then(Value::as_str) == Some("Secret");
            let out = map
                .iter()
                .map(|(k, val)| {
                    let redacted = match (secret, k.as_str(), val) {
                        (true, "data" | "stringData", Value::Object(fields)) => Value::Object(
                            fields
                                .keys()
                                .map(|f| (f.clone(), Value::from("<redacted>")))
                                .collect(),
                        ),
                        (true, "metadata", Value::Object(meta)) => redact_annotations(meta),
                        _ => redact_secrets(val),
                    };
                    (k.clone(), redacted)
                })
                .collect();
            Value::Object(out)
        }
        Value::Array(items) => Value::Array(items.iter().map(redact_secrets).collect()),
        Value::String(text) => Value::String(mask_url_passwords(text).into_owned()),
        other => other.clone(),
    }
}

/// A Secret's metadata with every annotation that holds a JSON object (a last-applied
/// configuration) redacted as a body is.
fn redact_annotations(meta: &serde_json::Map<String, Value>) -> Value {
    let mut meta = meta.clone();
    if let Some(Value::Object(annotations)) = meta.get_mut("annotations") {
        for value in annotations.values_mut() {
            let parsed = value
                .as_str()
                .and_then(|s| serde_json::from_str::<Value>(s).ok())
                .filter(Value::is_object);
            if let Some(obj) = parsed {
                *value = Value::from(redact_secrets(&obj).to_string());
            }
        }
    }
    Value::Object(meta)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    #[test]
    fn close_delimited_bodies() {
        use http::header::{CONTENT_LENGTH, HeaderValue, TRANSFER_ENCODING};
        let mut h = http::HeaderMap::new();
        assert!(super::close_delimited(&h));
        h.insert(CONTENT_LENGTH, HeaderValue::from_static("2"));
        assert!(!super::close_delimited(&h));
        let mut h = http::HeaderMap::new();
        h.insert(TRANSFER_ENCODING, HeaderValue::from_static("gzip, Chunked"));
        assert!(!super::close_delimited(&h));
        h.insert(TRANSFER_ENCODING, HeaderValue::from_static("gzip"));
        assert!(super::close_delimited(&h));
    }

    #[derive(Debug)]
    struct Wrapper(std::io::Error);
    impl std::fmt::Display for Wrapper {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("body error")
        }
    }
    impl std::error::Error for Wrapper {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn unclean_tls_eof_is_found_in_the_chain() {
        use std::io::{Error, ErrorKind};
        let eof = Wrapper(Error::new(ErrorKind::UnexpectedEof, "no close_notify"));
        assert!(super::unclean_tls_eof(&eof));
        let reset = Wrapper(Error::from(ErrorKind::ConnectionReset));
        assert!(!super::unclean_tls_eof(&reset));
        assert!(!super::unclean_tls_eof(&std::fmt::Error));
    }

    #[test]
    fn secrets_are_redacted_at_any_depth() {
        let body = serde_json::json!({
            "parent": {"kind": "App", "data": {"keep": "me"}},
            "related": {"Secret.v1": {"default/s": {
                "kind": "Secret", "data": {"password": "aHVudGVyMg=="},
                "stringData": {"token": "t0k3n"}, "metadata": {"name": "s"}
            }}}
        });
        let shown = redact_secrets(&body).to_string();
        assert!(!shown.contains("aHVudGVyMg=="), "{shown}");
        assert!(!shown.contains("t0k3n"), "{shown}");
        assert!(shown.contains("\"password\":\"<redacted>\""), "{shown}");
        assert!(
            shown.contains("\"keep\":\"me\""),
            "non-secrets stay: {shown}"
        );
    }

    #[test]
    fn secret_data_inside_last_applied_annotations_is_redacted() {
        let last = serde_json::json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "s"}, "stringData": {"token": "t0k3n-inside"}});
        let body = serde_json::json!({"children": {"Secret.v1": {"s": {
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "s", "annotations": {
                "metacontroller.k8s.io/last-applied-configuration": last.to_string(),
                "kubectl.kubernetes.io/last-applied-configuration": last.to_string(),
                "team": "a"}},
            "data": {"token": "dDBrM24taW5zaWRl"}
        }}}});
        let shown = redact_secrets(&body).to_string();
        assert!(!shown.contains("t0k3n-inside"), "{shown}");
        assert!(!shown.contains("dDBrM24taW5zaWRl"), "{shown}");
        assert!(shown.contains("\"team\":\"a\""), "{shown}");
    }

    use super::*;

    #[tokio::test]
    async fn nothing_listening_is_reported_plainly_once() {
        // a port that was free a moment ago: nothing answers there
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let url = format!("http://127.0.0.1:{port}/sync");
        let kube = kube::Client::try_from(kube::Config::new("http://127.0.0.1:9".parse().unwrap()))
            .unwrap();
        let hook = crate::api::Hook {
            webhook: Some(crate::api::Webhook {
                url: Some(url.clone()),
                ..Default::default()
            }),
            ..Default::default()
        };
        let client = HookClient::new(&kube, HookKind::Sync, &hook, &[], &HookOptions::default())
            .await
            .unwrap();
        let err = client
            .call("k", &serde_json::json!({}))
            .await
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with(&format!("sync hook {url}: cannot connect: ")),
            "{err}"
        );
        assert_eq!(err.matches(&url).count(), 1, "the url once: {err}");
    }

    #[test]
    fn retry_after_forms() {
        let now: jiff::Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        assert_eq!(parse_retry_after("7", now), Some(Duration::from_secs(7)));
        assert_eq!(
            parse_retry_after("Thu, 01 Jan 2026 00:00:30 GMT", now),
            Some(Duration::from_secs(30))
        );
        assert_eq!(parse_retry_after("garbage", now), None);
    }
}
