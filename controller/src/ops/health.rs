//! The operational HTTP endpoints: Prometheus `/metrics`, and `/healthz` + `/readyz` probes.
//!
//! Readiness: an instance is ready when the manager's caches are synced (the CompositeController
//! and DecoratorController lists were read and every controller started from it has synced its watches). With leader
//! election, a standby instance (not leading) is also reported ready while its election loop is
//! running: it is healthy and able to take over, and marking it unready would only take it out of
//! Services it does not serve anyway. `/readyz?verbose` lists the individual checks.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::{RawQuery, State};
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::ops::metrics::{self, Metrics};
use crate::runtime::cache::PendingWatches;

/// Errors starting an endpoint.
#[derive(Debug, thiserror::Error)]
pub enum HealthError {
    /// The address could not be bound.
    #[error("binding {what} endpoint on {addr}: {source}")]
    Bind {
        /// Which endpoint.
        what: &'static str,
        /// Address.
        addr: SocketAddr,
        /// Cause.
        source: std::io::Error,
    },
}

/// Process state the probes report.
#[derive(Debug, Clone, Default)]
pub struct Probes {
    /// The manager's caches are synced.
    pub synced: Arc<AtomicBool>,
    /// Leader election: this instance leads.
    pub leading: Arc<AtomicBool>,
    /// Leader election is configured (otherwise `leading` is ignored).
    pub elected: bool,
    /// The process is shutting down (readiness fails at once so traffic drains).
    pub stopping: Arc<AtomicBool>,
    /// The watches that have not finished their first list, named while not synced.
    pub pending_watches: Arc<PendingWatches>,
    /// A passing `/readyz` line a coordination feature adds (under `--sharding`, the buckets
    /// this replica holds), named by `/readyz?verbose`.
    pub placement: Option<Arc<dyn ReadyLine>>,
}

/// A passing line of `/readyz` that describes this replica's share of the work.
pub trait ReadyLine: std::fmt::Debug + Send + Sync {
    /// The line, starting with `[+]`.
    fn ready_line(&self) -> String;
}

/// The result of the readiness checks, a pure function of the flags (no watch named).
#[cfg(test)]
fn readiness(synced: bool, elected: bool, leading: bool, stopping: bool) -> (bool, String) {
    readiness_waiting(synced, elected, leading, stopping, &[])
}

/// The result of the readiness checks, a pure function of the flags, naming the watches still
/// `waiting` for their first list when not synced.
pub(crate) fn readiness_waiting(
    synced: bool,
    elected: bool,
    leading: bool,
    stopping: bool,
    waiting: &[String],
) -> (bool, String) {
    let not_synced = match waiting {
        [] => "caches not synced".to_owned(),
        w => format!("caches not synced; waiting for watches: {}", w.join(", ")),
    };
    let mut lines = Vec::new();
    let mut ok = true;
    let mut check = |name: &str, pass: bool, detail: &str| {
        ok &= pass;
        lines.push(format!("[{}]{name} {detail}", if pass { "+" } else { "-" }));
    };
    check(
        "shutdown",
        !stopping,
        if stopping { "stopping" } else { "ok" },
    );
    if elected && !leading {
        check("leader-election", true, "standby");
        check("informer-sync", true, "not leading");
    } else {
        if elected {
            check("leader-election", true, "leading");
        }
        check(
            "informer-sync",
            synced,
            if synced { "ok" } else { &not_synced },
        );
    }
    let verdict = if ok {
        "readyz check passed"
    } else {
        "readyz check failed"
    };
    lines.push(verdict.to_owned());
    (ok, lines.join("\n") + "\n")
}

fn metrics_router(metrics: Arc<Metrics>) -> Router {
    Router::new()
        .route(
            "/metrics",
            get(
                |State(m): State<Arc<Metrics>>, headers: header::HeaderMap| async move {
                    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
                    let format = metrics::negotiate(accept);
                    (
                        [(header::CONTENT_TYPE, format.content_type())],
                        m.encode_as(format),
                    )
                },
            ),
        )
        .with_state(metrics)
}

async fn readyz(State(p): State<Probes>, RawQuery(q): RawQuery) -> impl IntoResponse {
    let (ok, mut text) = readiness_waiting(
        p.synced.load(Ordering::SeqCst),
        p.elected,
        p.leading.load(Ordering::SeqCst),
        p.stopping.load(Ordering::SeqCst),
        &p.pending_watches.list(),
    );
    if let Some(placement) = &p.placement {
        // before the verdict, the last line
        let at = text.trim_end().rfind('\n').map_or(0, |i| i + 1);
        text.insert_str(at, &(placement.ready_line() + "\n"));
    }
    let code = if ok {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let verbose = q.is_some_and(|q| q.split('&').any(|kv| kv.starts_with("verbose")));
    let body = if verbose || !ok {
        text
    } else {
        "ok".to_owned()
    };
    (code, body)
}

fn health_router(probes: Probes) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/livez", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .with_state(probes)
}

async fn bind(what: &'static str, addr: SocketAddr) -> Result<TcpListener, HealthError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| HealthError::Bind { what, addr, source })
}

fn spawn(what: &'static str, listener: TcpListener, app: Router, stop: CancellationToken) {
    tokio::spawn(async move {
        let served = axum::serve(listener, app)
            .with_graceful_shutdown(async move { stop.cancelled().await })
            .await;
        if let Err(e) = served {
            tracing::error!(endpoint = what, error = %e, "endpoint stopped");
        }
    });
}

/// Binds and serves `/metrics` until `stop`; returns the bound address (port 0 resolves).
pub async fn serve_metrics(
    addr: SocketAddr,
    metrics: Arc<Metrics>,
    stop: CancellationToken,
) -> Result<SocketAddr, HealthError> {
    let listener = bind("metrics", addr).await?;
    let local = listener.local_addr().unwrap_or(addr);
    spawn("metrics", listener, metrics_router(metrics), stop);
    Ok(local)
}

/// Binds and serves `/healthz`, `/livez` and `/readyz` until `stop`; returns the bound address.
pub async fn serve_health(
    addr: SocketAddr,
    probes: Probes,
    stop: CancellationToken,
) -> Result<SocketAddr, HealthError> {
    let listener = bind("health", addr).await?;
    let local = listener.local_addr().unwrap_or(addr);
    spawn("health", listener, health_router(probes), stop);
    Ok(local)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readiness_without_election_follows_cache_sync() {
        assert!(!readiness(false, false, false, false).0);
        let (ok, text) = readiness(true, false, false, false);
        assert!(ok);
        assert!(text.contains("[+]informer-sync ok"), "{text}");
        assert!(!text.contains("leader-election"), "{text}");
    }

    #[test]
    fn standby_is_ready_leader_needs_synced_caches() {
        assert!(readiness(false, true, false, false).0, "standby");
        assert!(!readiness(false, true, true, false).0, "leader, not synced");
        assert!(readiness(true, true, true, false).0, "leader, synced");
    }

    #[test]
    fn not_ready_names_the_waiting_watches() {
        let waiting = ["apps/v1/deployments".to_owned(), "v1/configmaps".to_owned()];
        let (ok, text) = readiness_waiting(false, false, false, false, &waiting);
        assert!(!ok);
        assert!(
            text.contains(
                "[-]informer-sync caches not synced; waiting for watches: apps/v1/deployments, v1/configmaps"
            ),
            "{text}"
        );
        let (ok, text) = readiness_waiting(true, false, false, false, &waiting);
        assert!(ok && text.contains("[+]informer-sync ok"), "{text}");
    }

    #[tokio::test]
    #[allow(clippy::unwrap_used)]
    async fn metrics_are_served_in_the_format_the_scraper_asks_for() {
        let m = Arc::new(Metrics::new());
        m.event_dropped();
        let stop = CancellationToken::new();
        let addr = serve_metrics(SocketAddr::from(([127, 0, 0, 1], 0)), m, stop.clone())
            .await
            .unwrap();
        let scrape = |accept: Option<&'static str>| async move {
            let mut req = reqwest::Client::new().get(format!("http://{addr}/metrics"));
            if let Some(a) = accept {
                req = req.header(header::ACCEPT, a);
            }
            let resp = req.send().await.unwrap();
            let ct = resp.headers()[header::CONTENT_TYPE]
                .to_str()
                .unwrap()
                .to_owned();
            (ct, resp.text().await.unwrap())
        };
        let prometheus = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;\
                          version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        let (ct, body) = scrape(Some(prometheus)).await;
        assert_eq!(
            ct,
            "application/openmetrics-text; version=1.0.0; charset=utf-8"
        );
        assert!(body.ends_with("# EOF\n"), "{body}");
        assert!(
            body.contains("# TYPE kmeta_events_dropped counter\n"),
            "{body}"
        );
        for accept in [Some("text/plain;version=0.0.4"), None, Some("*/*")] {
            let (ct, body) = scrape(accept).await;
            assert_eq!(ct, "text/plain; version=0.0.4; charset=utf-8", "{accept:?}");
            assert!(!body.contains("# EOF"), "{body}");
            assert!(
                body.contains("# TYPE kmeta_events_dropped_total counter\n"),
                "{body}"
            );
            assert!(body.contains("\nkmeta_events_dropped_total 1\n"), "{body}");
        }
        stop.cancel();
    }

    #[test]
    fn stopping_is_never_ready() {
        let (ok, text) = readiness(true, false, false, true);
        assert!(!ok);
        assert!(text.contains("[-]shutdown stopping"), "{text}");
    }
}
