//! The write fence of a leader-elected `kmeta run`: below every API write, a check that this
//! instance still holds the Lease.
//!
//! Leader election alone does not stop a leader that was paused (SIGSTOP, a long GC pause, a
//! frozen VM) from writing once it resumes: its in-flight syncs carry on before its election
//! loop has even noticed that the Lease expired, and a standby may already lead. The fence
//! closes by the clock rather than by a notification: each successful renewal opens it until
//! `renewal start + renew deadline` (on the monotonic clock, which keeps running while the
//! process is stopped), so the instant the election loop would declare the Lease lost, every
//! write is already refused, whether or not any task has been scheduled since. Losing the Lease
//! or shutting down closes it at once.
//!
//! `FenceLayer` applies the check to a [`kube::Client`] just before a request is sent (after
//! any rate-limit wait): methods other than GET, HEAD and OPTIONS fail with [`Fenced`] without
//! reaching the API server. Reads and watches go on, so a standby keeps its caches warm. A write
//! retried after a 429/503/504 passes the fence again on every attempt: the fenced client turns
//! kube's own retry (which runs below every added layer) off and retries above the fence
//! (`ops::client::build_fenced`).

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use crate::ops::metrics::Metrics;
use http::{Method, Request};
use tokio::time::Instant;
use tower::{Layer, Service};

/// Whether writes are allowed: open until an instant, or closed. Cloning shares the state.
#[derive(Clone, Debug, Default)]
pub struct Fence {
    /// Writes are allowed before this instant; `None`: closed. Starts closed.
    open_until: Arc<Mutex<Option<Instant>>>,
}

/// The error of a write the fence refused.
#[derive(Debug, thiserror::Error)]
#[error(
    "write refused: this instance does not hold the leader lease (lost, expired or not yet acquired)"
)]
pub struct Fenced;

impl Fence {
    /// A closed fence.
    pub fn new() -> Fence {
        Fence::default()
    }

    fn with<T>(&self, f: impl FnOnce(&mut Option<Instant>) -> T) -> T {
        match self.open_until.lock() {
            Ok(mut g) => f(&mut g),
            Err(p) => f(&mut p.into_inner()),
        }
    }

    /// Allows writes until `until` (a renewal that started at `t` proves the Lease held until
    /// `t + renew deadline` at least; renewals move it forward, never back).
    pub fn open_until(&self, until: Instant) {
        self.with(|o| {
            if o.is_none_or(|cur| until > cur) {
                *o = Some(until);
            }
        });
    }

    /// Refuses every write from now on.
    pub fn close(&self) {
        self.with(|o| *o = None);
    }

    /// Whether a write may be sent at `now`.
    pub fn permits(&self, now: Instant) -> bool {
        self.with(|o| o.is_some_and(|until| now < until))
    }
}

/// Whether a request with `method` changes anything on the server (and so must pass the fence).
pub(crate) fn is_write(method: &Method) -> bool {
    !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

/// What a write must pass just before it is sent: the leader's [`Fence`], or a sharded
/// replica's fence per bucket (`coord::shard::state`).
pub(crate) trait WriteGate: Clone + Send + Sync + 'static {
    /// What the check needs of a write request, taken before the request is handed on.
    type Ticket: Send + 'static;
    /// The ticket of a write request.
    fn ticket<B>(&self, req: &Request<B>) -> Self::Ticket;
    /// Whether the write with `ticket` may be sent at `now`; the error it fails with if not.
    fn admit(&self, ticket: Self::Ticket, now: Instant) -> Result<(), tower::BoxError>;
    /// The `fence` label of `kmeta_fenced_writes_total` for the writes this gate refuses.
    const FENCE: &'static str;
}

impl WriteGate for Fence {
    type Ticket = ();
    const FENCE: &'static str = "leader";

    fn ticket<B>(&self, _req: &Request<B>) {}

    fn admit(&self, (): (), now: Instant) -> Result<(), tower::BoxError> {
        match self.permits(now) {
            true => Ok(()),
            false => Err(Box::new(Fenced)),
        }
    }
}

/// A [`tower::Layer`] refusing the writes its [`WriteGate`] does not admit (a [`Fence`]: while
/// it is closed), counting each refusal in `kmeta_fenced_writes_total`.
#[derive(Clone, Debug)]
pub(crate) struct FenceLayer<G = Fence> {
    gate: G,
    metrics: Arc<Metrics>,
}

impl<G> FenceLayer<G> {
    /// A layer checking `gate`, counting refusals in `metrics`.
    pub fn new(gate: G, metrics: Arc<Metrics>) -> FenceLayer<G> {
        FenceLayer { gate, metrics }
    }
}

impl<S, G: Clone> Layer<S> for FenceLayer<G> {
    type Service = FenceService<S, G>;

    fn layer(&self, inner: S) -> Self::Service {
        FenceService {
            inner,
            gate: self.gate.clone(),
            metrics: self.metrics.clone(),
        }
    }
}

/// The service made by [`FenceLayer`].
#[derive(Clone, Debug)]
pub(crate) struct FenceService<S, G = Fence> {
    inner: S,
    gate: G,
    metrics: Arc<Metrics>,
}

impl<S, G, ReqBody> Service<Request<ReqBody>> for FenceService<S, G>
where
    S: Service<Request<ReqBody>>,
    S::Error: From<tower::BoxError>,
    S::Future: Send + 'static,
    G: WriteGate,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqBody>) -> Self::Future {
        let ticket = is_write(req.method()).then(|| self.gate.ticket(&req));
        // kube's inner stack sends nothing until this future is polled, so the check below is
        // the last moment before the request leaves
        let fut = self.inner.call(req);
        let (gate, metrics) = (self.gate.clone(), self.metrics.clone());
        Box::pin(async move {
            if let Some(ticket) = ticket
                && let Err(e) = gate.admit(ticket, Instant::now())
            {
                metrics.fenced_write(G::FENCE);
                return Err(S::Error::from(e));
            }
            fut.await
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn starts_closed_opens_until_a_deadline_and_closes() {
        let f = Fence::new();
        let t = Instant::now();
        assert!(!f.permits(t), "closed until a lease is held");
        f.open_until(t + Duration::from_secs(10));
        assert!(f.permits(t));
        assert!(f.permits(t + Duration::from_millis(9_999)));
        assert!(
            !f.permits(t + Duration::from_secs(10)),
            "closed at the deadline, whether or not the election loop has run"
        );
        // a late answer to an older renewal never shortens the window
        f.open_until(t + Duration::from_secs(5));
        assert!(f.permits(t + Duration::from_secs(7)));
        f.close();
        assert!(!f.permits(t));
        let shared = f.clone();
        shared.open_until(t + Duration::from_secs(1));
        assert!(f.permits(t), "clones share one state");
    }

    #[tokio::test]
    async fn a_refused_write_is_counted_and_never_reaches_the_server() {
        use tower::ServiceExt;
        let metrics = Arc::new(Metrics::new());
        let sent = Arc::new(Mutex::new(0));
        let counter = sent.clone();
        let server = tower::service_fn(move |_req: Request<()>| {
            let counter = counter.clone();
            async move {
                *counter.lock().unwrap() += 1;
                Ok::<_, tower::BoxError>(())
            }
        });
        let svc = FenceLayer::new(Fence::new(), metrics.clone()).layer(server);
        let write = Request::post("/api/v1/namespaces/a/configmaps").body(());
        let read = Request::get("/api/v1/namespaces/a/configmaps").body(());
        assert!(svc.clone().oneshot(write.unwrap()).await.is_err());
        assert!(svc.oneshot(read.unwrap()).await.is_ok());
        assert_eq!(*sent.lock().unwrap(), 1, "only the read was sent");
        let text = metrics.encode();
        assert!(
            text.contains("kmeta_fenced_writes_total{fence=\"leader\"} 1"),
            "{text}"
        );
    }

    #[test]
    fn only_reads_pass_a_closed_fence() {
        for m in [Method::GET, Method::HEAD, Method::OPTIONS] {
            assert!(!is_write(&m), "{m}");
        }
        for m in [Method::POST, Method::PUT, Method::PATCH, Method::DELETE] {
            assert!(is_write(&m), "{m}");
        }
    }
}
