//! The webhook client: one keep-alive `reqwest` client per hook, with timeout, service URLs,
//! CA bundles, bearer/basic auth, client TLS, ETag caching and a response size cap.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::Api;
use serde_json::Value;

use crate::api::{
    Authorization, BasicAuth, CaBundle, ClientTls, EndpointConfig, Hook, HookVersion, KeyReference,
    ResponseUnmarshallMode, Webhook,
};
use crate::hook::wire;
use crate::ops::metrics::Metrics;

/// Default hook timeout: 10 s (Metacontroller `webhookTimeout`).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// Default response size cap: 16 MiB (kmeta; Metacontroller has none).
pub const DEFAULT_MAX_RESPONSE_BYTES: usize = 16 * 1024 * 1024;
/// Default ETag cache entry lifetime: 60 s (Metacontroller `etag.cacheTimeoutSeconds` default).
pub const DEFAULT_ETAG_TIMEOUT: Duration = Duration::from_secs(60);
/// Default ETag cache sweep interval: 300 s (Metacontroller `etag.cacheCleanupSeconds` default).
pub const DEFAULT_ETAG_CLEANUP: Duration = Duration::from_secs(300);

/// Transport settings shared by every hook of a controller.
#[derive(Debug, Clone)]
pub struct HookOptions {
    /// Response size cap. Default [`DEFAULT_MAX_RESPONSE_BYTES`] (16 MiB).
    pub max_response_bytes: usize,
}

impl Default for HookOptions {
    fn default() -> Self {
        HookOptions {
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
        }
    }
}

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
}

/// The URL a webhook is called at: `url`, else `{protocol}://{name}.{namespace}:{port}{path}`.
pub fn webhook_url(w: &Webhook) -> Result<String, String> {
    if let Some(url) = w.url.as_deref().filter(|u| !u.is_empty()) {
        return Ok(url.to_owned());
    }
    let Some(svc) = &w.service else {
        return Err("webhook needs url or service".into());
    };
    let protocol = svc.protocol.as_deref().unwrap_or("http");
    let port = svc.port.unwrap_or(80);
    let path = w.path.as_deref().unwrap_or("");
    Ok(format!(
        "{protocol}://{}.{}:{port}{path}",
        svc.name, svc.namespace
    ))
}

/// `(host lowercased, port)` with the scheme's default port filled in.
fn host_port(url: &reqwest::Url) -> (String, u16) {
    (
        url.host_str().unwrap_or_default().to_ascii_lowercase(),
        url.port_or_known_default().unwrap_or(80),
    )
}

/// The endpointConfig whose `host` matches the URL (case-insensitive; a host without a port
/// matches the scheme's default port).
pub fn match_endpoint_config<'a>(
    url: &reqwest::Url,
    configs: &'a [EndpointConfig],
) -> Option<&'a EndpointConfig> {
    let (host, port) = host_port(url);
    let default_port = if url.scheme() == "https" { 443 } else { 80 };
    configs.iter().find(|c| {
        let ch = c.host.to_ascii_lowercase();
        match ch.rsplit_once(':') {
            Some((h, p)) if p.parse::<u16>().is_ok() => h == host && p.parse() == Ok(port),
            _ => ch == host && port == default_port,
        }
    })
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

#[derive(Default)]
struct EtagCache {
    entries: HashMap<String, (String, Vec<u8>, Instant)>,
    last_cleanup: Option<Instant>,
}

/// A configured hook.
pub struct HookClient {
    name: &'static str,
    url: String,
    http: reqwest::Client,
    /// The `Authorization` header value, if any (never logged).
    authorization: Option<String>,
    version: HookVersion,
    mode: ResponseUnmarshallMode,
    max_response_bytes: usize,
    etag: Option<(Duration, Duration, Mutex<EtagCache>)>,
    /// Where request counts, durations and in-flight gauges go, with the controller's name.
    metrics: Option<(Arc<Metrics>, String)>,
}

impl std::fmt::Debug for HookClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HookClient")
            .field("name", &self.name)
            .field("url", &self.url)
            .field("version", &self.version)
            .finish_non_exhaustive()
    }
}

async fn read_key(
    client: &kube::Client,
    hook: &'static str,
    secret: bool,
    r: &KeyReference,
    default_key: &str,
) -> Result<Vec<u8>, HookError> {
    let key = r.key.as_deref().unwrap_or(default_key);
    read_named(client, hook, secret, &r.namespace, &r.name, key).await
}

async fn read_named(
    client: &kube::Client,
    hook: &'static str,
    secret: bool,
    namespace: &str,
    name: &str,
    key: &str,
) -> Result<Vec<u8>, HookError> {
    let err = |message: String| HookError::Credentials {
        hook,
        what: if secret { "secret" } else { "configmap" },
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        message,
    };
    if secret {
        let s = Api::<Secret>::namespaced(client.clone(), namespace)
            .get(name)
            .await
            .map_err(|e| err(e.to_string()))?;
        if let Some(v) = s.data.as_ref().and_then(|d| d.get(key)) {
            return Ok(v.0.clone());
        }
        if let Some(v) = s.string_data.as_ref().and_then(|d| d.get(key)) {
            return Ok(v.clone().into_bytes());
        }
    } else {
        let c = Api::<ConfigMap>::namespaced(client.clone(), namespace)
            .get(name)
            .await
            .map_err(|e| err(e.to_string()))?;
        if let Some(v) = c.data.as_ref().and_then(|d| d.get(key)) {
            return Ok(v.clone().into_bytes());
        }
        if let Some(v) = c.binary_data.as_ref().and_then(|d| d.get(key)) {
            return Ok(v.0.clone());
        }
    }
    Err(err(format!("key {key:?} not found")))
}

/// The TLS/auth settings in effect: per-hook fields override the matching endpointConfig entry
/// as a whole (Metacontroller's rule).
struct Security<'a> {
    ca_bundle: Option<&'a CaBundle>,
    client_tls: Option<&'a ClientTls>,
    authorization: Option<&'a Authorization>,
    basic_auth: Option<&'a BasicAuth>,
}

fn security<'a>(w: &'a Webhook, ep: Option<&'a EndpointConfig>) -> Security<'a> {
    let own = w.ca_bundle.is_some()
        || w.client_tls.is_some()
        || w.authorization.is_some()
        || w.basic_auth.is_some();
    match ep {
        Some(ep) if !own => Security {
            ca_bundle: ep.ca_bundle.as_ref(),
            client_tls: ep.client_tls.as_ref(),
            authorization: ep.authorization.as_ref(),
            basic_auth: ep.basic_auth.as_ref(),
        },
        _ => Security {
            ca_bundle: w.ca_bundle.as_ref(),
            client_tls: w.client_tls.as_ref(),
            authorization: w.authorization.as_ref(),
            basic_auth: w.basic_auth.as_ref(),
        },
    }
}

/// Where a hook's CA bundle and credentials are read from, and the hook its errors name.
struct Credentials<'a> {
    client: &'a kube::Client,
    hook: &'static str,
}

impl Credentials<'_> {
    /// A configuration error of this hook.
    fn invalid(&self, message: String) -> HookError {
        HookError::Config {
            hook: self.hook,
            message,
        }
    }

    /// Adds the CA bundle's certificates (inline, or from a Secret or ConfigMap) as trust roots.
    async fn add_ca_bundle(
        &self,
        mut builder: reqwest::ClientBuilder,
        ca: &CaBundle,
    ) -> Result<reqwest::ClientBuilder, HookError> {
        let (client, name) = (self.client, self.hook);
        let pem = match (&ca.inline, &ca.secret_ref, &ca.config_map_ref) {
            (Some(p), None, None) => p.clone().into_bytes(),
            (None, Some(r), None) => read_key(client, name, true, r, "ca.crt").await?,
            (None, None, Some(r)) => read_key(client, name, false, r, "ca.crt").await?,
            _ => {
                return Err(self.invalid(
                    "caBundle needs exactly one of inline, secretRef, configMapRef".into(),
                ));
            }
        };
        let certs = reqwest::Certificate::from_pem_bundle(&pem)
            .map_err(|e| self.invalid(format!("caBundle: {e}")))?;
        if certs.is_empty() {
            return Err(self.invalid("caBundle holds no certificate".into()));
        }
        for c in certs {
            builder = builder.add_root_certificate(c);
        }
        Ok(builder)
    }

    /// Adds the client certificate and key read from the `clientTLS` Secret as the identity.
    async fn add_client_tls(
        &self,
        builder: reqwest::ClientBuilder,
        tls: &ClientTls,
    ) -> Result<reqwest::ClientBuilder, HookError> {
        let (client, name) = (self.client, self.hook);
        let r = &tls.secret_ref;
        let cert_key = tls.cert_key.as_deref().unwrap_or("tls.crt");
        let key_key = tls.private_key_key.as_deref().unwrap_or("tls.key");
        let mut pem = read_named(client, name, true, &r.namespace, &r.name, cert_key).await?;
        pem.push(b'\n');
        pem.extend(read_named(client, name, true, &r.namespace, &r.name, key_key).await?);
        let id = reqwest::Identity::from_pem(&pem)
            .map_err(|e| self.invalid(format!("clientTLS: {e}")))?;
        Ok(builder.identity(id))
    }

    /// The `Authorization` header value: from `authorization` (a token) or `basicAuth`, never
    /// both.
    async fn authorization(&self, sec: &Security<'_>) -> Result<Option<String>, HookError> {
        let (client, name) = (self.client, self.hook);
        match (sec.authorization, sec.basic_auth) {
            (Some(_), Some(_)) => {
                Err(self.invalid("authorization and basicAuth are exclusive".into()))
            }
            (Some(a), None) => {
                let scheme = a.type_.as_deref().unwrap_or("Bearer");
                if scheme.eq_ignore_ascii_case("basic") {
                    return Err(self
                        .invalid("authorization type Basic is not allowed; use basicAuth".into()));
                }
                let token = read_key(client, name, true, &a.secret_ref, "token").await?;
                let token = String::from_utf8(token)
                    .map_err(|_| self.invalid("token is not utf-8".into()))?;
                Ok(Some(format!("{scheme} {}", token.trim())))
            }
            (None, Some(b)) => {
                let r = &b.secret_ref;
                let uk = b.username_key.as_deref().unwrap_or("username");
                let pk = b.password_key.as_deref().unwrap_or("password");
                let user = read_named(client, name, true, &r.namespace, &r.name, uk).await?;
                let pass = read_named(client, name, true, &r.namespace, &r.name, pk).await?;
                let mut raw = user;
                raw.push(b':');
                raw.extend(pass);
                Ok(Some(format!("Basic {}", base64_encode(&raw))))
            }
            (None, None) => Ok(None),
        }
    }
}

/// The webhook's `timeout` (Go duration), else [`DEFAULT_TIMEOUT`]; the error is a message.
fn webhook_timeout(w: &Webhook) -> Result<Duration, String> {
    match w.timeout.as_deref() {
        Some(t) => crate::duration::parse_go_duration(t).map_err(|e| format!("timeout: {e}")),
        None => Ok(DEFAULT_TIMEOUT),
    }
}

/// The ETag cache (entry lifetime, sweep interval, entries) when the webhook enables it.
fn etag_cache(w: &Webhook) -> Option<(Duration, Duration, Mutex<EtagCache>)> {
    w.etag
        .as_ref()
        .filter(|e| e.enabled == Some(true))
        .map(|e| {
            let secs = |v: Option<i32>, d: Duration| {
                v.filter(|s| *s > 0)
                    .map_or(d, |s| Duration::from_secs(u64::from(s.unsigned_abs())))
            };
            (
                secs(e.cache_timeout_seconds, DEFAULT_ETAG_TIMEOUT),
                secs(e.cache_cleanup_seconds, DEFAULT_ETAG_CLEANUP),
                Mutex::new(EtagCache::default()),
            )
        })
}

impl HookClient {
    /// Builds the client for `hook` (named `name`: sync, finalize, customize), reading CA bundles
    /// and credentials from Secrets/ConfigMaps once.
    pub async fn new(
        client: &kube::Client,
        name: &'static str,
        hook: &Hook,
        endpoint_configs: &[EndpointConfig],
        opts: &HookOptions,
    ) -> Result<HookClient, HookError> {
        let creds = Credentials { client, hook: name };
        let cfg = |message: String| creds.invalid(message);
        let w = hook
            .webhook
            .as_ref()
            .ok_or_else(|| cfg("webhook is required".into()))?;
        let url = webhook_url(w).map_err(cfg)?;
        let parsed = reqwest::Url::parse(&url).map_err(|e| cfg(format!("url {url:?}: {e}")))?;
        let timeout = webhook_timeout(w).map_err(cfg)?;
        let sec = security(w, match_endpoint_config(&parsed, endpoint_configs));
        let mut builder = reqwest::Client::builder()
            .use_rustls_tls()
            .timeout(timeout)
            .pool_idle_timeout(Duration::from_secs(90))
            .min_tls_version(reqwest::tls::Version::TLS_1_2);
        if let Some(ca) = sec.ca_bundle {
            builder = creds.add_ca_bundle(builder, ca).await?;
        }
        if let Some(tls) = sec.client_tls {
            builder = creds.add_client_tls(builder, tls).await?;
        }
        let authorization = creds.authorization(&sec).await?;
        let http = builder
            .build()
            .map_err(|e| cfg(format!("http client: {e}")))?;
        Ok(HookClient {
            name,
            url,
            http,
            authorization,
            version: hook.version.unwrap_or_default(),
            mode: wire::response_mode(hook),
            max_response_bytes: opts.max_response_bytes,
            etag: etag_cache(w),
            metrics: None,
        })
    }

    /// Records this hook's requests in `metrics` under `controller`.
    pub fn with_metrics(mut self, metrics: Arc<Metrics>, controller: &str) -> HookClient {
        self.metrics = Some((metrics, controller.to_owned()));
        self
    }

    /// The hook's wire version.
    pub fn version(&self) -> HookVersion {
        self.version
    }

    fn cached(&self, key: &str) -> Option<(String, Vec<u8>)> {
        let (ttl, cleanup, cache) = self.etag.as_ref()?;
        let mut c = cache.lock().ok()?;
        let now = Instant::now();
        if c.last_cleanup
            .is_none_or(|t| now.duration_since(t) >= *cleanup)
        {
            c.entries
                .retain(|_, (_, _, at)| now.duration_since(*at) < *ttl);
            c.last_cleanup = Some(now);
        }
        c.entries
            .get(key)
            .filter(|(_, _, at)| now.duration_since(*at) < *ttl)
            .map(|(e, b, _)| (e.clone(), b.clone()))
    }

    fn store(&self, key: &str, etag: String, body: &[u8]) {
        if let Some((_, _, cache)) = &self.etag
            && let Ok(mut c) = cache.lock()
        {
            c.entries
                .insert(key.to_owned(), (etag, body.to_vec(), Instant::now()));
        }
    }

    /// POSTs `body` and returns the response body of a 200 (or the cached body on 304/412 when
    /// `If-None-Match` was sent). `cache_key` identifies the root object for the ETag cache.
    pub async fn call(&self, cache_key: &str, body: &Value) -> Result<Vec<u8>, HookError> {
        let Some((metrics, controller)) = &self.metrics else {
            return self.call_unobserved(cache_key, body).await;
        };
        let _in_flight = metrics.hook_in_flight(controller, self.name, &self.url);
        let started = Instant::now();
        let result = self.call_unobserved(cache_key, body).await;
        let code = match &result {
            Ok(_) | Err(HookError::TooLarge { .. } | HookError::Wire(_)) => "200".to_owned(),
            Err(HookError::Status { code, .. }) => code.to_string(),
            Err(HookError::TooManyRequests { .. }) => "429".to_owned(),
            Err(_) => "error".to_owned(),
        };
        metrics.hook_request(
            controller,
            self.name,
            &self.url,
            "POST",
            &code,
            started.elapsed(),
        );
        result
    }

    /// POSTs `body` once, without metrics: the request (with `If-None-Match` when the ETag cache
    /// holds `cache_key`), then the response checked and cached.
    async fn call_unobserved(&self, cache_key: &str, body: &Value) -> Result<Vec<u8>, HookError> {
        let mut req = self.request(body)?;
        let cached = self.cached(cache_key);
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
                hook: self.name,
                url: self.url.clone(),
                code,
                body: String::from_utf8_lossy(&out[..n]).into_owned(),
            });
        }
        if tracing::enabled!(tracing::Level::TRACE) {
            let shown = serde_json::from_slice::<Value>(&out)
                .map(|v| redact_secrets(&v).to_string())
                .unwrap_or_else(|_| format!("<{} bytes, not JSON>", out.len()));
            tracing::trace!(hook = self.name, url = %self.url, response = %shown, "hook response");
        }
        if let Some(etag) = etag {
            self.store(cache_key, etag, &out);
        }
        Ok(out)
    }

    /// The POST of `body` as JSON, with the `Authorization` header when configured (traced with
    /// Secrets redacted).
    fn request(&self, body: &Value) -> Result<reqwest::RequestBuilder, HookError> {
        let payload = serde_json::to_vec(body).map_err(|e| HookError::Config {
            hook: self.name,
            message: format!("encoding request: {e}"),
        })?;
        if tracing::enabled!(tracing::Level::TRACE) {
            tracing::trace!(hook = self.name, url = %self.url, request = %redact_secrets(body), "hook request");
        }
        let mut req = self
            .http
            .post(&self.url)
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(payload);
        if let Some(a) = &self.authorization {
            req = req.header(http::header::AUTHORIZATION, a);
        }
        Ok(req)
    }

    /// A transport failure (timeout, connection, body read) as this hook's error.
    fn transport_error(&self, e: reqwest::Error) -> HookError {
        HookError::Transport {
            hook: self.name,
            url: self.url.clone(),
            message: if e.is_timeout() {
                "timed out".to_owned()
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
            hook: self.name,
            url: self.url.clone(),
            retry_after,
        }
    }

    /// The whole response body, or an error as soon as it exceeds the size cap.
    async fn read_capped(&self, resp: &mut reqwest::Response) -> Result<Vec<u8>, HookError> {
        let mut out = Vec::new();
        while let Some(chunk) = resp.chunk().await.map_err(|e| self.transport_error(e))? {
            if out.len() + chunk.len() > self.max_response_bytes {
                return Err(HookError::TooLarge {
                    hook: self.name,
                    url: self.url.clone(),
                    limit: self.max_response_bytes,
                });
            }
            out.extend_from_slice(&chunk);
        }
        Ok(out)
    }

    /// Calls a sync/finalize hook and decodes the response.
    pub async fn sync(
        &self,
        cache_key: &str,
        request: &Value,
    ) -> Result<wire::SyncResponse, HookError> {
        let body = self.call(cache_key, request).await?;
        Ok(wire::decode_sync_response(&body, self.mode, self.name)?)
    }

    /// Calls a customize hook and decodes the response.
    pub async fn customize(
        &self,
        cache_key: &str,
        request: &Value,
    ) -> Result<Vec<wire::RelatedResourceRule>, HookError> {
        let body = self.call(cache_key, request).await?;
        Ok(wire::decode_customize_response(&body, self.mode)?)
    }
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

/// Standard base64 with padding (for the basic auth header).
pub fn base64_encode(input: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(input)
}

/// A copy of a hook body for trace logs, with the values of every Secret's `data` and
/// `stringData` replaced by `<redacted>`: bodies may carry Secrets (children or related objects),
/// and logs must never contain them. The Authorization header is never logged at all.
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
                        _ => redact_secrets(val),
                    };
                    (k.clone(), redacted)
                })
                .collect();
            Value::Object(out)
        }
        Value::Array(items) => Value::Array(items.iter().map(redact_secrets).collect()),
        other => other.clone(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
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

    use super::*;
    use crate::api::ServiceReference;

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
        let client = HookClient::new(&kube, "sync", &hook, &[], &HookOptions::default())
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
    fn urls() {
        let w = Webhook {
            url: Some("http://x/sync".into()),
            ..Default::default()
        };
        assert_eq!(webhook_url(&w).unwrap(), "http://x/sync");
        let w = Webhook {
            service: Some(ServiceReference {
                name: "hook".into(),
                namespace: "ns".into(),
                port: None,
                protocol: None,
            }),
            path: Some("/sync".into()),
            ..Default::default()
        };
        assert_eq!(webhook_url(&w).unwrap(), "http://hook.ns:80/sync");
        assert!(webhook_url(&Webhook::default()).is_err());
    }

    #[test]
    fn endpoint_config_matching() {
        let ep = |h: &str| EndpointConfig {
            host: h.into(),
            ca_bundle: None,
            client_tls: None,
            authorization: None,
            basic_auth: None,
        };
        let configs = [ep("other"), ep("Hook.NS"), ep("x:8443")];
        let u = reqwest::Url::parse("https://hook.ns/sync").unwrap();
        assert_eq!(match_endpoint_config(&u, &configs).unwrap().host, "Hook.NS");
        let u = reqwest::Url::parse("https://hook.ns:443/sync").unwrap();
        assert_eq!(match_endpoint_config(&u, &configs).unwrap().host, "Hook.NS");
        let u = reqwest::Url::parse("https://hook.ns:8443/sync").unwrap();
        assert!(match_endpoint_config(&u, &configs).is_none());
        let u = reqwest::Url::parse("https://x:8443/").unwrap();
        assert_eq!(match_endpoint_config(&u, &configs).unwrap().host, "x:8443");
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

    #[test]
    fn base64() {
        assert_eq!(base64_encode(b"user:pass"), "dXNlcjpwYXNz");
        assert_eq!(base64_encode(b"a"), "YQ==");
        assert_eq!(base64_encode(b"ab"), "YWI=");
        assert_eq!(base64_encode(b""), "");
    }

    #[test]
    fn per_hook_security_overrides_endpoint_entry() {
        let ep = EndpointConfig {
            host: "h".into(),
            ca_bundle: Some(CaBundle {
                inline: Some("x".into()),
                ..Default::default()
            }),
            client_tls: None,
            authorization: None,
            basic_auth: None,
        };
        let w = Webhook::default();
        assert!(security(&w, Some(&ep)).ca_bundle.is_some());
        let w = Webhook {
            basic_auth: Some(BasicAuth {
                secret_ref: crate::api::SecretReference {
                    name: "s".into(),
                    namespace: "n".into(),
                },
                username_key: None,
                password_key: None,
            }),
            ..Default::default()
        };
        let s = security(&w, Some(&ep));
        assert!(s.ca_bundle.is_none() && s.basic_auth.is_some());
    }
}
