//! Client-side rate limiting of Kubernetes API requests (`--client-go-qps`, `--client-go-burst`).
//!
//! kube has no client-side limiter, so a runaway controller could flood the API server. This
//! module provides client-go's: a token bucket holding up to `burst` tokens, refilled at `qps`
//! tokens per second, where every request takes one token and, when none is left, waits until its
//! token has accrued (the bucket goes into debt, as `golang.org/x/time/rate`'s `Reserve` and
//! client-go's `flowcontrol.NewTokenBucketRateLimiter` do, so waiters are served in arrival order).
//!
//! - `TokenBucket` is the pure decision: `TokenBucket::reserve` takes a token at an explicit
//!   instant and returns how long the caller must wait.
//! - [`RateLimitLayer`] / [`RateLimitService`] is the tower middleware: it reserves a token when
//!   the request is handed to it, waits, then sends the request. A watch is one request, so it
//!   counts once, when it starts. It records `Metrics::rate_limited` for every request that had
//!   to wait and `Metrics::api_request` (verb, HTTP code or `"error"`, time to the response
//!   headers, excluding the limiter's wait) for every request.
//!
//! [`crate::ops::client`] builds the [`kube::Client`]s that go through the layer.
//!
//! `qps <= 0` (or NaN) disables limiting; requests are still counted in the metrics. A `burst` of 0
//! with a positive `qps` is treated as 1 (client-go requires a burst of at least 1).
//!
//! A caller that gives up while waiting (its future dropped) gives its token back
//! (`TokenBucket::cancel`).

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use http::{Method, Request, Response, Uri};
use tokio::time::Instant;
use tower::{Layer, Service};

use crate::ops::metrics::Metrics;

/// Limits of the client-side token bucket.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RateLimit {
    /// Sustained requests per second. Default 5: Metacontroller's `--client-go-qps` default, which
    /// is client-go's `rest.DefaultQPS`. `<= 0` disables limiting.
    pub qps: f64,
    /// Requests that may be sent at once after an idle period. Default 10: Metacontroller's
    /// `--client-go-burst` default, client-go's `rest.DefaultBurst`.
    pub burst: u32,
}

impl Default for RateLimit {
    fn default() -> Self {
        RateLimit {
            qps: 5.0,
            burst: 10,
        }
    }
}

impl RateLimit {
    /// Whether these limits limit anything (`qps > 0`).
    pub fn enabled(&self) -> bool {
        self.qps > 0.0 && self.qps.is_finite()
    }
}

/// A token bucket: the pure decision of how long a request waits.
#[derive(Clone, Debug)]
pub(crate) struct TokenBucket {
    limits: RateLimit,
    /// Tokens available at `last`; negative when reservations are waiting (debt).
    tokens: f64,
    last: Instant,
    /// When the latest reservation may act (for [`TokenBucket::cancel`]).
    last_event: Instant,
}

impl TokenBucket {
    /// A full bucket (`burst` tokens) at `now`.
    pub fn new(limits: RateLimit, now: Instant) -> Self {
        TokenBucket {
            limits,
            tokens: Self::capacity(limits),
            last: now,
            last_event: now,
        }
    }

    fn capacity(limits: RateLimit) -> f64 {
        f64::from(limits.burst.max(1))
    }

    /// Refills the tokens accrued between the last instant seen and `now`.
    fn advance(&mut self, now: Instant) {
        if now > self.last {
            let refill = now.duration_since(self.last).as_secs_f64() * self.limits.qps;
            self.tokens = (self.tokens + refill).min(Self::capacity(self.limits));
            self.last = now;
        }
    }

    /// Takes one token at `now` and returns how long the caller must wait before sending (zero
    /// when a token was available, or when limiting is disabled). Instants earlier than the last
    /// one seen are treated as the last one.
    pub fn reserve(&mut self, now: Instant) -> Duration {
        if !self.limits.enabled() {
            return Duration::ZERO;
        }
        self.advance(now);
        self.tokens -= 1.0;
        let wait = if self.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-self.tokens / self.limits.qps)
        };
        self.last_event = self.last_event.max(now + wait);
        wait
    }

    /// Takes one token at `now` if one is available, without waiting or going into debt
    /// (`x/time/rate`'s `Allow`); `false` leaves the bucket as it was. Always `true` when
    /// limiting is disabled.
    pub fn allow(&mut self, now: Instant) -> bool {
        if !self.limits.enabled() {
            return true;
        }
        self.advance(now);
        if self.tokens < 1.0 {
            return false;
        }
        self.tokens -= 1.0;
        self.last_event = self.last_event.max(now);
        true
    }

    /// Gives back the token of a reservation that was due at `act_at` and is abandoned at `now`
    /// (its caller gave up while waiting), as `x/time/rate`'s `Reservation.CancelAt`: only the
    /// part of the token that later reservations have not already been scheduled against comes
    /// back. Nothing happens when `act_at` has passed.
    pub fn cancel(&mut self, act_at: Instant, now: Instant) {
        if !self.limits.enabled() || act_at <= now {
            return;
        }
        let qps = self.limits.qps;
        let reserved_after = self
            .last_event
            .saturating_duration_since(act_at)
            .as_secs_f64()
            * qps;
        let restore = 1.0 - reserved_after;
        if restore <= 0.0 {
            return;
        }
        self.advance(now);
        self.tokens = (self.tokens + restore).min(Self::capacity(self.limits));
        if act_at == self.last_event {
            let previous = act_at.checked_sub(Duration::from_secs_f64(1.0 / qps));
            if let Some(previous) = previous.filter(|p| *p >= now) {
                self.last_event = previous;
            }
        }
    }
}

/// The Kubernetes verb of a request, from its method and path: `get`, `list`, `watch`, `create`,
/// `update`, `patch`, `delete` or `deletecollection` (non-resource paths such as `/version` are
/// `get`; other methods are the method in lower case).
pub(crate) fn verb(method: &Method, uri: &Uri) -> &'static str {
    let named = names_object(uri.path());
    match *method {
        Method::GET | Method::HEAD => {
            let watch = uri
                .query()
                .is_some_and(|q| q.split('&').any(|kv| kv == "watch=true" || kv == "watch=1"));
            if watch {
                "watch"
            } else if named {
                "get"
            } else {
                "list"
            }
        }
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE => {
            if named {
                "delete"
            } else {
                "deletecollection"
            }
        }
        Method::OPTIONS => "options",
        _ => "other",
    }
}

/// Whether an API path names one object (as the API server's request-info parser decides):
/// `/api/v1/namespaces/ns/pods/p`, `/apis/g/v/things/t/status`, `/api/v1/namespaces/ns`. Paths
/// that are not resource paths (`/version`, `/apis`) count as named (a `get`).
fn names_object(path: &str) -> bool {
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    let rest = match parts.first() {
        Some(&"api") if parts.len() >= 2 => &parts[2..],
        Some(&"apis") if parts.len() >= 3 => &parts[3..],
        _ => return true,
    };
    // namespaces/{ns}/{resource}... except the namespace's own subresources
    let rest = match rest {
        ["namespaces", _ns, sub, ..] if *sub != "status" && *sub != "finalize" => &rest[2..],
        _ => rest,
    };
    match rest.len() {
        // discovery document of a group version
        0 => true,
        1 => false,
        _ => true,
    }
}

/// The tower layer that rate-limits and measures requests; see the module docs.
#[derive(Clone, Debug)]
pub struct RateLimitLayer {
    bucket: Option<Arc<Mutex<TokenBucket>>>,
    metrics: Arc<Metrics>,
}

impl RateLimitLayer {
    /// A layer with a fresh, full bucket (none when `limits` disable limiting).
    pub fn new(limits: RateLimit, metrics: Arc<Metrics>) -> Self {
        let bucket = limits
            .enabled()
            .then(|| Arc::new(Mutex::new(TokenBucket::new(limits, Instant::now()))));
        RateLimitLayer { bucket, metrics }
    }
}

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimitService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RateLimitService {
            inner,
            bucket: self.bucket.clone(),
            metrics: self.metrics.clone(),
        }
    }
}

/// The service made by [`RateLimitLayer`].
#[derive(Clone, Debug)]
pub struct RateLimitService<S> {
    inner: S,
    bucket: Option<Arc<Mutex<TokenBucket>>>,
    metrics: Arc<Metrics>,
}

/// Locks a bucket; a poisoned lock only means another request panicked while holding it, and
/// the bucket is still a valid pair of numbers.
fn lock(bucket: &Mutex<TokenBucket>) -> std::sync::MutexGuard<'_, TokenBucket> {
    bucket.lock().unwrap_or_else(|e| e.into_inner())
}

/// A reservation being waited for; gives its token back if dropped before the wait is over.
struct Pending {
    bucket: Arc<Mutex<TokenBucket>>,
    act_at: Instant,
    done: bool,
}

impl Drop for Pending {
    fn drop(&mut self) {
        if !self.done {
            lock(&self.bucket).cancel(self.act_at, Instant::now());
        }
    }
}

impl<S> RateLimitService<S> {
    /// Takes a token now: how long to wait, and the reservation to finish (none without a wait).
    fn reserve(&self) -> (Duration, Option<Pending>) {
        let Some(bucket) = &self.bucket else {
            return (Duration::ZERO, None);
        };
        let now = Instant::now();
        let wait = lock(bucket).reserve(now);
        let pending = (!wait.is_zero()).then(|| Pending {
            bucket: bucket.clone(),
            act_at: now + wait,
            done: false,
        });
        (wait, pending)
    }
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for RateLimitService<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqBody>) -> Self::Future {
        let verb = verb(req.method(), req.uri());
        let (wait, pending) = self.reserve();
        // kube's stack (hyper client, retry, auth) does nothing until its future is polled, so
        // the request is only sent after the wait below
        let fut = self.inner.call(req);
        let metrics = self.metrics.clone();
        Box::pin(async move {
            if let Some(mut pending) = pending {
                tokio::time::sleep_until(pending.act_at).await;
                pending.done = true;
                metrics.rate_limited(wait);
            }
            let start = Instant::now();
            let res = fut.await;
            let status = res.as_ref().ok().map(Response::status);
            let code = status.as_ref().map_or("error", http::StatusCode::as_str);
            metrics.api_request(verb, code, start.elapsed());
            res
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn allow_takes_a_free_token_or_nothing() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(RateLimit { qps: 5.0, burst: 2 }, t0);
        assert!(b.allow(t0));
        assert!(b.allow(t0));
        assert!(!b.allow(t0), "burst spent");
        assert!(
            !b.allow(t0 + ms(199)),
            "a refused call takes nothing, but no token yet"
        );
        assert!(b.allow(t0 + ms(200)), "one token after 1/qps");
        assert_eq!(
            b.reserve(t0 + ms(200)),
            ms(200),
            "no debt was left by refusals"
        );
        let mut off = TokenBucket::new(RateLimit { qps: 0.0, burst: 1 }, t0);
        assert!((0..10).all(|_| off.allow(t0)));
    }

    #[test]
    fn full_bucket_serves_burst_then_spaces_requests_at_qps() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(RateLimit { qps: 5.0, burst: 2 }, t0);
        assert_eq!(b.reserve(t0), Duration::ZERO);
        assert_eq!(b.reserve(t0), Duration::ZERO);
        // the third waits for one token (200 ms at 5 qps), the fourth for two
        assert_eq!(b.reserve(t0), ms(200));
        assert_eq!(b.reserve(t0), ms(400));
    }

    #[test]
    fn tokens_refill_over_time_up_to_burst() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(
            RateLimit {
                qps: 10.0,
                burst: 3,
            },
            t0,
        );
        for _ in 0..3 {
            assert_eq!(b.reserve(t0), Duration::ZERO);
        }
        // 100 ms later exactly one token is back
        assert_eq!(b.reserve(t0 + ms(100)), Duration::ZERO);
        assert_eq!(b.reserve(t0 + ms(100)), ms(100));
        // after a long idle period the bucket holds `burst` tokens, not more
        let later = t0 + Duration::from_secs(60);
        for _ in 0..3 {
            assert_eq!(b.reserve(later), Duration::ZERO);
        }
        assert_eq!(b.reserve(later), ms(100));
    }

    #[test]
    fn debt_is_paid_back_before_new_requests_pass() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(RateLimit { qps: 1.0, burst: 1 }, t0);
        assert_eq!(b.reserve(t0), Duration::ZERO);
        assert_eq!(b.reserve(t0), Duration::from_secs(1));
        assert_eq!(b.reserve(t0), Duration::from_secs(2));
        // 1.5 s later: two tokens owed were for t0+1 s and t0+2 s, so the next is at t0+3 s
        assert_eq!(b.reserve(t0 + ms(1500)), ms(1500));
    }

    #[test]
    fn earlier_instants_do_not_refill() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(RateLimit { qps: 1.0, burst: 1 }, t0 + ms(500));
        assert_eq!(b.reserve(t0 + ms(500)), Duration::ZERO);
        assert_eq!(b.reserve(t0), Duration::from_secs(1));
    }

    #[test]
    fn zero_or_negative_qps_disables_and_zero_burst_means_one() {
        let t0 = Instant::now();
        for qps in [0.0, -1.0, f64::NAN] {
            let mut b = TokenBucket::new(RateLimit { qps, burst: 0 }, t0);
            for _ in 0..100 {
                assert_eq!(b.reserve(t0), Duration::ZERO);
            }
        }
        let mut b = TokenBucket::new(RateLimit { qps: 2.0, burst: 0 }, t0);
        assert_eq!(b.reserve(t0), Duration::ZERO);
        assert_eq!(b.reserve(t0), ms(500));
    }

    #[test]
    fn cancelled_reservation_gives_its_token_back() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(RateLimit { qps: 1.0, burst: 1 }, t0);
        assert_eq!(b.reserve(t0), Duration::ZERO);
        assert_eq!(b.reserve(t0), Duration::from_secs(1));
        // the last reservation (due t0+1 s) is abandoned: the next one takes its place
        b.cancel(t0 + Duration::from_secs(1), t0);
        assert_eq!(b.reserve(t0), Duration::from_secs(1));
    }

    #[test]
    fn cancel_restores_only_what_later_reservations_left() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(RateLimit { qps: 1.0, burst: 1 }, t0);
        assert_eq!(b.reserve(t0), Duration::ZERO);
        assert_eq!(b.reserve(t0), Duration::from_secs(1));
        assert_eq!(b.reserve(t0), Duration::from_secs(2));
        // the middle one is abandoned; the third is already scheduled after it, so nothing comes
        // back and the next still queues behind the third
        b.cancel(t0 + Duration::from_secs(1), t0);
        assert_eq!(b.reserve(t0), Duration::from_secs(3));
        // a reservation whose time has passed is not cancelled
        b.cancel(t0 + Duration::from_secs(1), t0 + Duration::from_secs(2));
        assert_eq!(
            b.reserve(t0 + Duration::from_secs(2)),
            Duration::from_secs(2)
        );
    }

    #[test]
    fn verbs_from_method_and_path() {
        let cases = [
            ("GET", "/api/v1/namespaces/ns/pods/p", "get"),
            ("GET", "/api/v1/namespaces/ns/pods", "list"),
            ("GET", "/api/v1/pods", "list"),
            (
                "GET",
                "/api/v1/namespaces/ns/pods?watch=true&resourceVersion=1",
                "watch",
            ),
            (
                "GET",
                "/apis/apps/v1/deployments?labelSelector=a%3Db&watch=true",
                "watch",
            ),
            (
                "GET",
                "/apis/apps/v1/namespaces/ns/deployments/d/scale",
                "get",
            ),
            ("GET", "/api/v1/namespaces", "list"),
            ("GET", "/api/v1/namespaces/ns", "get"),
            ("GET", "/api/v1/namespaces/ns/status", "get"),
            ("GET", "/apis/example.com/v1/widgets/w", "get"),
            ("GET", "/version", "get"),
            ("GET", "/apis/apps/v1", "get"),
            ("POST", "/api/v1/namespaces/ns/configmaps", "create"),
            ("PUT", "/api/v1/namespaces/ns/configmaps/c", "update"),
            ("PUT", "/apis/g/v1/namespaces/ns/things/t/status", "update"),
            ("PATCH", "/api/v1/namespaces/ns/configmaps/c", "patch"),
            ("DELETE", "/api/v1/namespaces/ns/configmaps/c", "delete"),
            (
                "DELETE",
                "/api/v1/namespaces/ns/configmaps",
                "deletecollection",
            ),
            ("DELETE", "/api/v1/namespaces/ns", "delete"),
        ];
        for (method, uri, want) in cases {
            let m: Method = method.parse().expect("method");
            let u: Uri = uri.parse().expect("uri");
            assert_eq!(verb(&m, &u), want, "{method} {uri}");
        }
    }

    fn count_line(text: &str, prefix: &str) -> Option<u64> {
        text.lines()
            .find(|l| l.starts_with(prefix))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
    }

    /// Sends `req` through `svc` once it is ready.
    async fn send<S>(svc: &mut S, req: Request<String>) -> S::Response
    where
        S: Service<Request<String>>,
        S::Error: std::fmt::Debug,
    {
        use tower::ServiceExt as _;
        svc.ready()
            .await
            .expect("ready")
            .call(req)
            .await
            .expect("call")
    }

    #[tokio::test(start_paused = true)]
    async fn service_waits_for_tokens_and_records_metrics() {
        let metrics = Arc::new(Metrics::new());
        let layer = RateLimitLayer::new(RateLimit { qps: 1.0, burst: 2 }, metrics.clone());
        let inner = tower::service_fn(|req: Request<String>| async move {
            let code = if req.method() == Method::DELETE {
                404
            } else {
                200
            };
            Response::builder()
                .status(code)
                .body(String::new())
                .map_err(|e| e.to_string())
        });
        let mut svc = layer.layer(inner);
        let start = Instant::now();
        for i in 0..4 {
            let req = Request::get(format!("/api/v1/namespaces/ns/configmaps/c{i}"))
                .body(String::new())
                .expect("request");
            send(&mut svc, req).await;
        }
        let req = Request::delete("/api/v1/namespaces/ns/configmaps/c")
            .body(String::new())
            .expect("request");
        send(&mut svc, req).await;
        // two passed at once, three waited one second each (paused clock: exact)
        assert_eq!(start.elapsed(), Duration::from_secs(3));
        let text = metrics.encode();
        assert_eq!(
            count_line(&text, "kmeta_client_rate_limiter_wait_seconds_count"),
            Some(3),
            "{text}"
        );
        assert_eq!(
            count_line(&text, "kmeta_api_requests_total{verb=\"get\",code=\"200\"}"),
            Some(4),
            "{text}"
        );
        assert_eq!(
            count_line(
                &text,
                "kmeta_api_requests_total{verb=\"delete\",code=\"404\"}"
            ),
            Some(1),
            "{text}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn request_dropped_while_waiting_returns_its_token() {
        use tower::ServiceExt as _;

        let metrics = Arc::new(Metrics::new());
        let layer = RateLimitLayer::new(RateLimit { qps: 1.0, burst: 1 }, metrics.clone());
        let inner = tower::service_fn(|_req: Request<String>| async move {
            Ok::<_, std::convert::Infallible>(Response::new(String::new()))
        });
        let mut svc = layer.layer(inner);
        let req = || {
            Request::get("/api/v1/namespaces/ns/configmaps")
                .body(String::new())
                .expect("request")
        };
        let start = Instant::now();
        send(&mut svc, req()).await;
        // reserves the next token (due in 1 s), then gives up
        let abandoned = svc.ready().await.expect("ready").call(req());
        drop(abandoned);
        send(&mut svc, req()).await;
        assert_eq!(start.elapsed(), Duration::from_secs(1));
        let text = metrics.encode();
        assert_eq!(
            count_line(&text, "kmeta_client_rate_limiter_wait_seconds_count"),
            Some(1),
            "{text}"
        );
        assert_eq!(
            count_line(
                &text,
                "kmeta_api_requests_total{verb=\"list\",code=\"200\"}"
            ),
            Some(2),
            "{text}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn disabled_limit_never_waits_but_still_counts() {
        let metrics = Arc::new(Metrics::new());
        let layer = RateLimitLayer::new(RateLimit { qps: 0.0, burst: 1 }, metrics.clone());
        let inner = tower::service_fn(|_req: Request<String>| async move {
            Ok::<_, std::convert::Infallible>(Response::new(String::new()))
        });
        let mut svc = layer.layer(inner);
        let start = Instant::now();
        for _ in 0..20 {
            let req = Request::post("/api/v1/namespaces/ns/configmaps")
                .body(String::new())
                .expect("request");
            send(&mut svc, req).await;
        }
        assert_eq!(start.elapsed(), Duration::ZERO);
        let text = metrics.encode();
        assert_eq!(
            count_line(&text, "kmeta_client_rate_limiter_wait_seconds_count"),
            Some(0),
            "{text}"
        );
        assert_eq!(
            count_line(
                &text,
                "kmeta_api_requests_total{verb=\"create\",code=\"200\"}"
            ),
            Some(20),
            "{text}"
        );
    }
}
