//! Kubernetes clients as kmeta builds them: kmeta's User-Agent on every request, the client-side
//! rate limit ([`RateLimitLayer`]) outermost, so a request retried by kube's built-in retry policy
//! (429/503/504) takes a single token, and for the work's client under leader election the write
//! [`crate::ops::fence`] innermost.

use std::sync::Arc;

use crate::ops::fence::{Fence, FenceLayer};
use crate::ops::metrics::Metrics;
use crate::ops::ratelimit::{RateLimit, RateLimitLayer};

pub use crate::runtime::kapi::{user_agent, with_user_agent};

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

/// As [`build`], with every write checked against `fence` once its rate-limit wait is over
/// (the fence is the innermost of kmeta's layers, so a write that waited for a token while the
/// Lease was lost is still refused), and at every attempt: kube's built-in retry of 429/503/504
/// sits below any layer added to its client, where a retry sent after a backoff (during which a
/// paused leader lost its Lease) would not pass the fence again, so it is turned off here and
/// the same policy runs above the fence instead (found by the chaos soak).
pub fn build_fenced(
    mut config: kube::Config,
    limits: RateLimit,
    metrics: Arc<Metrics>,
    fence: Fence,
) -> Result<kube::Client, kube::Error> {
    config.default_retry = false;
    let builder = kube::client::ClientBuilder::try_from(with_user_agent(config))?;
    let retry = kube::client::retry::RetryPolicy::server_retry();
    Ok(builder
        .with_layer(&FenceLayer::new(fence))
        .with_layer(&tower::buffer::BufferLayer::new(1024))
        .with_layer(&tower::retry::RetryLayer::new(retry))
        .with_layer(&RateLimitLayer::new(limits, metrics))
        .build())
}
