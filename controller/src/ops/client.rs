//! Kubernetes clients as kmeta builds them: kmeta's User-Agent on every request, and the
//! client-side rate limit ([`RateLimitLayer`]) outermost, so a request retried by kube's built-in
//! retry policy (429/503/504) takes a single token. The work clients whose writes pass the
//! leader's fence or a shard bucket's check are built in [`crate::coord::client`].

use std::sync::Arc;

use crate::ops::metrics::Metrics;
use crate::ops::ratelimit::{RateLimit, RateLimitLayer};

pub use crate::runtime::kapi::{
    describe as describe_api_error, user_agent, with_identity, with_user_agent,
};

/// A [`kube::Client`] for `config` (with kmeta's User-Agent) whose every request goes through a
/// [`RateLimitLayer`] with `limits` (its own bucket: clients built separately do not share
/// tokens) and is counted in `metrics`.
pub fn build(
    config: kube::Config,
    limits: RateLimit,
    metrics: Arc<Metrics>,
) -> Result<kube::Client, kube::Error> {
    let builder = kube::client::ClientBuilder::try_from(with_user_agent(config))?;
    Ok(builder
        .with_layer(&RateLimitLayer::new(limits, metrics))
        .build())
}

/// A client that sends every request of `base` as the user `username` (`Impersonate-User`),
/// through `base` itself: its credentials, User-Agent, rate limit (the same token bucket, so
/// impersonated writes count against `--qps` as kmeta's own), metrics and, under leader
/// election, its write fence. No `Impersonate-Group` is sent: for a ServiceAccount user the API
/// server adds its groups itself, as kube-apiserver does, so kmeta needs `impersonate` on the
/// ServiceAccount only. Fails only when `username` cannot be a header value.
pub fn impersonating(
    base: &kube::Client,
    username: &str,
) -> Result<kube::Client, http::header::InvalidHeaderValue> {
    let user = http::HeaderValue::from_str(username)?;
    let inner = base.clone();
    let service = tower::service_fn(move |mut request: http::Request<kube::client::Body>| {
        let inner = inner.clone();
        request.headers_mut().insert(
            http::HeaderName::from_static("impersonate-user"),
            user.clone(),
        );
        async move { inner.send(request).await }
    });
    Ok(kube::Client::new(
        service,
        base.default_namespace().to_owned(),
    ))
}
