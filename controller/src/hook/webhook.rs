//! The webhook back end: one keep-alive `reqwest` client per hook, with its URL, CA bundle,
//! credentials and client TLS (from [`super::transport`]), the ETag cache ([`super::etag`]), a
//! response size cap, `Retry-After` and the `traceparent` header.

use std::time::Duration;

use serde_json::Value;

use super::backend::{Answer, Call, HookBackend, RequestBody};
use super::error::HookError;
use super::etag::EtagCache;
use super::redact::redact_secrets;
use super::tls;
use super::transport::{
    Credentials, Security, mask, match_endpoint_config, security, sent_credentials,
    webhook_timeout, webhook_url, without_userinfo,
};
use crate::api::{EndpointConfig, Webhook};

/// A hook answered by an HTTP endpoint.
pub(crate) struct WebhookBackend {
    /// The URL requests go to, parsed once (may carry userinfo: never printed).
    url: reqwest::Url,
    /// The URL as printed, labelled and stored: without userinfo.
    shown_url: String,
    /// Credential values requests carry, masked in response text kmeta copies anywhere.
    sent: Vec<String>,
    http: reqwest::Client,
    /// The `Authorization` header value, if any (never logged).
    authorization: Option<String>,
    /// The bound of one call, from connecting to the last byte of the response.
    timeout: Duration,
    max_response_bytes: usize,
    etag: Option<EtagCache>,
}

impl WebhookBackend {
    /// The client of webhook `w` (the controller's `hook` hook), reading CA bundles and
    /// credentials from Secrets/ConfigMaps once; answers of at most `max_response_bytes`.
    pub async fn connect(
        client: &kube::Client,
        hook: &'static str,
        w: &Webhook,
        endpoint_configs: &[EndpointConfig],
        max_response_bytes: usize,
    ) -> Result<WebhookBackend, HookError> {
        let creds = Credentials { client, hook };
        let cfg = |message: String| creds.invalid(message);
        let url = webhook_url(w).map_err(|e| cfg(e.to_string()))?;
        let shown_url = without_userinfo(&url);
        let parsed =
            reqwest::Url::parse(&url).map_err(|e| cfg(format!("url {shown_url:?}: {e}")))?;
        let timeout = webhook_timeout(w).map_err(|e| cfg(e.to_string()))?;
        let sec = security(w, match_endpoint_config(&parsed, endpoint_configs));
        let http = http_client(&creds, &sec).await?;
        let authorization = creds.authorization(&sec).await?;
        let sent = sent_credentials(&url, authorization.as_deref());
        Ok(WebhookBackend {
            url: parsed,
            shown_url,
            sent,
            http,
            authorization,
            timeout,
            max_response_bytes,
            etag: EtagCache::for_webhook(w),
        })
    }

    /// POSTs the body once: the request (with `If-None-Match` when the ETag cache holds the
    /// call's key), then the response checked and cached.
    async fn post(&self, call: Call<'_>) -> Result<Vec<u8>, HookError> {
        let hook = call.hook;
        let mut req = self.request(hook, call.body, call.traceparent)?;
        let cached = self.etag.as_ref().and_then(|e| e.get(call.cache_key));
        if let Some((etag, _)) = &cached {
            req = req.header(http::header::IF_NONE_MATCH, etag);
        }
        let mut resp = req
            .send()
            .await
            .map_err(|e| self.transport_error(hook, e))?;
        let code = resp.status().as_u16();
        if code == 429 {
            return Err(self.too_many_requests(hook, &resp));
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
        let out = self.read_capped(hook, &mut resp).await?;
        if code != 200 {
            let n = out.len().min(512);
            return Err(HookError::Status {
                hook,
                url: self.shown_url.clone(),
                code,
                body: mask(&String::from_utf8_lossy(&out[..n]), &self.sent),
            });
        }
        self.trace_response(hook, &out);
        if let (Some(etag), Some(cache)) = (etag, &self.etag) {
            cache.put(call.cache_key, etag, &out);
        }
        Ok(out)
    }

    /// The POST of `body` as JSON, with the `Authorization` header when configured and the
    /// call's `traceparent` (traced with Secrets redacted).
    fn request(
        &self,
        hook: &'static str,
        body: serde_json::Result<RequestBody>,
        traceparent: Option<String>,
    ) -> Result<reqwest::RequestBuilder, HookError> {
        let payload = body
            .and_then(RequestBody::into_bytes)
            .map_err(|e| HookError::Config {
                hook,
                message: format!("encoding request: {e}"),
            })?;
        if tracing::enabled!(tracing::Level::TRACE) {
            let shown =
                serde_json::from_slice::<Value>(&payload).map(|v| redact_secrets(&v).to_string());
            let shown = mask(&shown.unwrap_or_else(|e| e.to_string()), &self.sent);
            tracing::trace!(hook, url = %self.shown_url, request = %shown, "hook request");
        }
        let mut req = self
            .http
            .post(self.url.clone())
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(payload);
        if let Some(a) = &self.authorization {
            req = req.header(http::header::AUTHORIZATION, a);
        }
        if let Some(tp) = traceparent {
            req = req.header("traceparent", tp);
        }
        Ok(req)
    }

    /// Logs a 200 answer at trace level, Secrets redacted and credentials masked.
    fn trace_response(&self, hook: &'static str, out: &[u8]) {
        if tracing::enabled!(tracing::Level::TRACE) {
            let shown = serde_json::from_slice::<Value>(out)
                .map(|v| mask(&redact_secrets(&v).to_string(), &self.sent))
                .unwrap_or_else(|_| format!("<{} bytes, not JSON>", out.len()));
            tracing::trace!(hook, url = %self.shown_url, response = %shown, "hook response");
        }
    }

    /// A transport failure (connection, TLS, body read) as this hook's error.
    fn transport_error(&self, hook: &'static str, e: reqwest::Error) -> HookError {
        HookError::Transport {
            hook,
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
    fn too_many_requests(&self, hook: &'static str, resp: &reqwest::Response) -> HookError {
        let retry_after = resp
            .headers()
            .get(http::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| parse_retry_after(v, jiff::Timestamp::now()))
            .unwrap_or(Duration::from_secs(1));
        HookError::TooManyRequests {
            hook,
            url: self.shown_url.clone(),
            retry_after,
        }
    }

    /// The whole response body, or an error as soon as it exceeds the size cap. A body delimited
    /// by the end of the connection may end without TLS close_notify (Python's `http.server` over
    /// `ssl` does so), as Go accepts: rustls only hands over whole records, so the body ends at a
    /// record boundary, and a truncated one fails to decode.
    async fn read_capped(
        &self,
        hook: &'static str,
        resp: &mut reqwest::Response,
    ) -> Result<Vec<u8>, HookError> {
        let until_close = close_delimited(resp.headers());
        let mut out = Vec::new();
        loop {
            let chunk = match resp.chunk().await {
                Ok(Some(chunk)) => chunk,
                Ok(None) => break,
                Err(e) if until_close && unclean_tls_eof(&e) => break,
                Err(e) => return Err(self.transport_error(hook, e)),
            };
            if out.len() + chunk.len() > self.max_response_bytes {
                return Err(HookError::TooLarge {
                    hook,
                    url: self.shown_url.clone(),
                    limit: self.max_response_bytes,
                });
            }
            out.extend_from_slice(&chunk);
        }
        Ok(out)
    }
}

impl HookBackend for WebhookBackend {
    fn shown(&self) -> &str {
        &self.shown_url
    }

    fn timeout(&self) -> Option<Duration> {
        Some(self.timeout)
    }

    fn timed_out(&self, hook: &'static str, _after: Duration) -> HookError {
        HookError::Transport {
            hook,
            url: self.shown_url.clone(),
            message: "timed out".to_owned(),
        }
    }

    fn sent(&self) -> &[String] {
        &self.sent
    }

    fn call<'a>(&'a self, call: Call<'a>) -> Answer<'a> {
        Box::pin(self.post(call))
    }
}

/// The keep-alive HTTP client of a webhook: TLS 1.2 or later, with the CA bundle and client
/// certificate `sec` names (read through `creds`).
async fn http_client(
    creds: &Credentials<'_>,
    sec: &Security<'_>,
) -> Result<reqwest::Client, HookError> {
    let mut builder = reqwest::Client::builder()
        .use_rustls_tls()
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
            .map_err(|e| creds.invalid(format!("TLS: {e}")))?;
        builder = builder.use_preconfigured_tls(config);
    }
    builder
        .build()
        .map_err(|e| creds.invalid(format!("http client: {}", error_chain(&e))))
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

/// `e` and its sources, joined by `: `.
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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::hook::{HookClient, HookOptions};
    use crate::ops::metrics::HookKind;

    #[test]
    fn close_delimited_bodies() {
        use http::header::{CONTENT_LENGTH, HeaderValue, TRANSFER_ENCODING};
        let mut h = http::HeaderMap::new();
        assert!(close_delimited(&h));
        h.insert(CONTENT_LENGTH, HeaderValue::from_static("2"));
        assert!(!close_delimited(&h));
        let mut h = http::HeaderMap::new();
        h.insert(TRANSFER_ENCODING, HeaderValue::from_static("gzip, Chunked"));
        assert!(!close_delimited(&h));
        h.insert(TRANSFER_ENCODING, HeaderValue::from_static("gzip"));
        assert!(close_delimited(&h));
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
        assert!(unclean_tls_eof(&eof));
        let reset = Wrapper(Error::from(ErrorKind::ConnectionReset));
        assert!(!unclean_tls_eof(&reset));
        assert!(!unclean_tls_eof(&std::fmt::Error));
    }

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

    /// A webhook that accepts the connection and never answers ends at the hook's timeout as
    /// a transport failure (what the hook circuit counts as an outage).
    #[tokio::test]
    async fn a_silent_endpoint_times_out_as_a_transport_failure() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/sync", listener.local_addr().unwrap());
        let held = tokio::spawn(async move {
            let (_conn, _) = listener.accept().await.unwrap();
            tokio::time::sleep(Duration::from_secs(5)).await;
        });
        let kube = kube::Client::try_from(kube::Config::new("http://127.0.0.1:9".parse().unwrap()))
            .unwrap();
        let hook = crate::api::Hook {
            webhook: Some(crate::api::Webhook {
                url: Some(url.clone()),
                timeout: Some("200ms".to_owned()),
                ..Default::default()
            }),
            ..Default::default()
        };
        let client = HookClient::new(&kube, HookKind::Sync, &hook, &[], &HookOptions::default())
            .await
            .unwrap();
        let err = client.call("k", &serde_json::json!({})).await.unwrap_err();
        assert!(matches!(err, HookError::Transport { .. }), "{err:?}");
        assert_eq!(err.to_string(), format!("sync hook {url}: timed out"));
        held.abort();
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
