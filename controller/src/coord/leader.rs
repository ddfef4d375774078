//! Leader election on a `coordination.k8s.io/v1` Lease (`--leader-election`).
//!
//! Replicas of `kmeta run` compete for one Lease; only the holder reconciles. The algorithm is
//! client-go's `leaderelection` package with its default timings:
//!
//! - A candidate reads the Lease every retry period (jittered by up to 1.2 × the period, as
//!   client-go's `JitterUntil`). It takes the Lease when none exists (`Action::Create`), when it
//!   has no holder (released), or when the holder's record has not changed for the record's
//!   `leaseDurationSeconds` as measured on **this** instance's monotonic clock from the moment it
//!   first saw that record (`Action::Acquire`). Comparing the record's `renewTime` with the local
//!   wall clock would make failover depend on clock skew between nodes; client-go avoids it the
//!   same way.
//! - Every write carries the `resourceVersion` it was based on, so two candidates racing for the
//!   same Lease cannot both win: the loser gets 409 Conflict and stays a follower.
//! - The leader renews every retry period. If no renewal succeeds within the renew deadline
//!   (counted from the start of the last successful write), or the Lease turns out to be held by
//!   someone else (a conflicting write, then a read showing another holder) or deleted, the work
//!   is cancelled at once and [`run_elected`] returns [`LeaderError::Lost`]; the process should
//!   exit and be restarted, as client-go controllers do. Since `renew deadline < lease duration`,
//!   the old leader has cancelled its work before any other candidate may consider the Lease
//!   expired (the others start counting only when they see the last successful renewal).
//! - On shutdown the leader cancels its work and keeps renewing while the work drains (as
//!   controller-runtime stops leader election only after its runnables), then releases the Lease
//!   (no holder, `leaseDurationSeconds: 1`, as client-go's `ReleaseOnCancel`) so a standby takes
//!   over on its next retry instead of waiting out the lease duration.
//!
//! API: [`run_elected`] runs `work` only while holding the Lease and reports leadership in
//! [`LeaderConfig::leading`] (for `/readyz`). `decide` is the pure decision it applies after each
//! read. The work future is polled inside `run_elected`'s future (not spawned): aborting the task
//! that runs `run_elected` drops the work too, without releasing the Lease.
//!
//! Use a client with its own rate limiter for the election (see [`crate::ops::client::build`]), so
//! a busy controller cannot starve lease renewals.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, PostParams};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::coord::fence::Fence;
use crate::ops::metrics::Metrics;
use crate::runtime::kapi::is_conflict;

/// client-go's `JitterFactor` for the acquire loop: each wait is `retry_period × (1 + U[0, 1.2))`.
pub(crate) const JITTER_FACTOR: f64 = 1.2;

/// Leader election settings.
#[derive(Clone, Debug)]
pub struct LeaderConfig {
    /// Namespace of the Lease. Default `"default"`; `kmeta run` uses `--leader-election-namespace`
    /// or the pod's namespace.
    pub namespace: String,
    /// Name of the Lease. Default `"metacontroller"`, Metacontroller's `--leader-election-id`
    /// default, so a kmeta replaces a Metacontroller deployment without two leaders.
    pub name: String,
    /// This candidate's identity, written as `holderIdentity`. Default: the `POD_NAME` environment
    /// variable, else the hostname followed by `_` and a random suffix (client-go's convention), so
    /// two processes on one host never share an identity.
    pub identity: String,
    /// How long a lease is valid after its holder's last renewal as seen by the others. Default
    /// 15 s (client-go / controller-runtime `LeaseDuration`).
    pub lease_duration: Duration,
    /// How long the leader keeps working without a successful renewal. Default 10 s (client-go /
    /// controller-runtime `RenewDeadline`). Must be less than `lease_duration`.
    pub renew_deadline: Duration,
    /// Interval between attempts to acquire or renew. Default 2 s (client-go / controller-runtime
    /// `RetryPeriod`). `renew_deadline` must exceed 1.2 × this.
    pub retry_period: Duration,
    /// True while this instance holds the Lease and runs the work. Default: a fresh `false` flag.
    pub leading: Arc<AtomicBool>,
    /// Where leadership is reported as `kmeta_leader_election_status{name}`. Default: none.
    pub metrics: Option<Arc<Metrics>>,
    /// The write fence of the work's API client: opened by each acquisition or renewal until
    /// its start plus the renew deadline, closed when the Lease is lost or released. Default: a
    /// fresh fence no client checks.
    pub fence: Fence,
}

impl Default for LeaderConfig {
    fn default() -> Self {
        LeaderConfig {
            namespace: "default".to_string(),
            name: "metacontroller".to_string(),
            identity: default_identity(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
            leading: Arc::new(AtomicBool::new(false)),
            metrics: None,
            fence: Fence::new(),
        }
    }
}

impl LeaderConfig {
    /// Records whether this instance leads (the flag, and the metric when configured).
    fn set_leading(&self, leading: bool) {
        self.leading.store(leading, Ordering::SeqCst);
        if let Some(m) = &self.metrics {
            m.leader(&self.name, leading);
        }
    }

    /// `namespace/name` of the Lease, for logs.
    fn lease_name(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// Checks the timings the way client-go's `NewLeaderElector` does.
    pub fn validate(&self) -> Result<(), LeaderError> {
        let invalid = |msg: String| Err(LeaderError::InvalidConfig(msg));
        if self.name.is_empty() || self.namespace.is_empty() {
            return invalid("lease name and namespace must not be empty".into());
        }
        if self.identity.is_empty() {
            return invalid("identity must not be empty".into());
        }
        if self.retry_period.is_zero() {
            return invalid("retry period must be positive".into());
        }
        if self.lease_duration <= self.renew_deadline {
            return invalid(format!(
                "lease duration ({:?}) must be greater than the renew deadline ({:?})",
                self.lease_duration, self.renew_deadline
            ));
        }
        if self.renew_deadline.as_secs_f64() <= JITTER_FACTOR * self.retry_period.as_secs_f64() {
            return invalid(format!(
                "renew deadline ({:?}) must be greater than {JITTER_FACTOR} × the retry period ({:?})",
                self.renew_deadline, self.retry_period
            ));
        }
        if self.lease_duration.as_secs() < 1 {
            return invalid(
                "lease duration must be at least 1 s (it is written in seconds)".into(),
            );
        }
        Ok(())
    }
}

/// `POD_NAME`, else `<hostname>_<random hex>`.
pub fn default_identity() -> String {
    if let Ok(pod) = std::env::var("POD_NAME")
        && !pod.trim().is_empty()
    {
        return pod.trim().to_string();
    }
    let host = std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "kmeta".to_string());
    format!("{host}_{:016x}", rand::random::<u64>())
}

/// Errors of leader election.
#[derive(Debug, thiserror::Error)]
pub enum LeaderError {
    /// The configuration is unusable.
    #[error("invalid leader election config: {0}")]
    InvalidConfig(String),
    /// This instance was leading and lost the Lease; its work has been cancelled and has returned.
    #[error("lost lease {namespace}/{name} held by {identity}: {reason}")]
    Lost {
        /// Lease namespace.
        namespace: String,
        /// Lease name.
        name: String,
        /// This instance's identity.
        identity: String,
        /// What happened.
        reason: String,
    },
    /// The election's thread, runtime or client could not be started ([`run_elected_apart`]).
    #[error("starting the leader election's thread: {0}")]
    Thread(String),
}

/// What a candidate does after reading the Lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Action {
    /// No Lease exists: create it with this instance as holder.
    Create,
    /// The Lease has no holder, or its holder let it expire: take it over (a leader transition).
    Acquire,
    /// This instance already holds the Lease: renew it.
    Renew,
    /// Another holder's lease is valid; it expires at `until` unless renewed before.
    Wait {
        /// When the holder's current record expires, on this instance's clock.
        until: Instant,
    },
}

/// The holder of a Lease, `None` when it has none (never taken, or released).
pub fn holder(lease: &Lease) -> Option<&str> {
    lease
        .spec
        .as_ref()
        .and_then(|s| s.holder_identity.as_deref())
        .filter(|h| !h.is_empty())
}

/// The validity the record grants its holder: its `leaseDurationSeconds`, else the configured
/// lease duration.
fn record_duration(lease: &Lease, cfg: &LeaderConfig) -> Duration {
    lease
        .spec
        .as_ref()
        .and_then(|s| s.lease_duration_seconds)
        .and_then(|s| u64::try_from(s).ok())
        .filter(|s| *s > 0)
        .map_or(cfg.lease_duration, Duration::from_secs)
}

/// The decision of the candidate `cfg.identity` after reading `lease` at `now`. `observed_at`
/// is when this instance first saw the lease's current record (holder, times, duration,
/// transitions): the holder's renewals change the record, so an unchanged record older than its
/// duration means the holder is gone.
pub(crate) fn decide(
    lease: Option<&Lease>,
    observed_at: Instant,
    now: Instant,
    cfg: &LeaderConfig,
) -> Action {
    let Some(lease) = lease else {
        return Action::Create;
    };
    match holder(lease) {
        None => Action::Acquire,
        Some(h) if h == cfg.identity => Action::Renew,
        Some(_) => {
            let until = observed_at + record_duration(lease, cfg);
            if now >= until {
                Action::Acquire
            } else {
                Action::Wait { until }
            }
        }
    }
}

fn now_micro() -> MicroTime {
    MicroTime(jiff::Timestamp::now())
}

fn duration_secs(d: Duration) -> i32 {
    i32::try_from(d.as_secs()).unwrap_or(i32::MAX)
}

/// The spec this instance writes when it takes or renews `old` (None: creating).
pub(crate) fn held_spec(old: Option<&LeaseSpec>, action: Action, cfg: &LeaderConfig) -> LeaseSpec {
    let now = now_micro();
    let mut spec = old.cloned().unwrap_or_default();
    match action {
        Action::Create => {
            spec.acquire_time = Some(now.clone());
            spec.lease_transitions = Some(0);
        }
        // decide() acquires only a lease held by no one or by another
        Action::Acquire => {
            spec.acquire_time = Some(now.clone());
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0).saturating_add(1));
        }
        _ => {
            if spec.acquire_time.is_none() {
                spec.acquire_time = Some(now.clone());
            }
        }
    }
    spec.holder_identity = Some(cfg.identity.clone());
    spec.lease_duration_seconds = Some(duration_secs(cfg.lease_duration));
    spec.renew_time = Some(now);
    spec
}

/// The spec of a released lease: no holder, valid for 1 s, transitions kept.
pub(crate) fn released_spec(old: Option<&LeaseSpec>) -> LeaseSpec {
    let now = now_micro();
    let mut spec = old.cloned().unwrap_or_default();
    spec.holder_identity = None;
    spec.lease_duration_seconds = Some(1);
    spec.acquire_time = Some(now.clone());
    spec.renew_time = Some(now);
    spec
}

/// The outcome of one renewal attempt.
enum Renewal {
    Renewed,
    /// A write conflicted; the next attempt reads the lease again.
    Conflict,
    Lost(String),
}

/// The state of one candidate.
struct Elector {
    api: Api<Lease>,
    cfg: LeaderConfig,
    /// The record last seen and when it was first seen.
    observed: Option<(Option<LeaseSpec>, Instant)>,
    /// The lease as last written by this instance while leading (its resourceVersion is the base
    /// of the next renewal); `None` after a conflict.
    held: Option<Lease>,
}

impl Elector {
    /// Records `lease` as seen at `now`; returns when its current record was first seen.
    fn observe(&mut self, lease: Option<&Lease>, now: Instant) -> Instant {
        let record = lease.and_then(|l| l.spec.clone());
        match &self.observed {
            Some((seen, at)) if *seen == record => *at,
            _ => {
                self.observed = Some((record, now));
                now
            }
        }
    }

    fn new_lease(&self, spec: LeaseSpec) -> Lease {
        let mut lease = Lease::default();
        lease.metadata.name = Some(self.cfg.name.clone());
        lease.metadata.namespace = Some(self.cfg.namespace.clone());
        lease.spec = Some(spec);
        lease
    }

    /// One acquire attempt: read, decide, write. `Ok(true)` when this instance now holds the lease.
    async fn try_acquire(&mut self) -> Result<bool, kube::Error> {
        let current = self.api.get_opt(&self.cfg.name).await?;
        let now = Instant::now();
        let observed_at = self.observe(current.as_ref(), now);
        let action = decide(current.as_ref(), observed_at, now, &self.cfg);
        let pp = PostParams::default();
        let written = match (action, current) {
            (Action::Wait { .. }, _) => return Ok(false),
            (Action::Create, _) | (_, None) => {
                let lease = self.new_lease(held_spec(None, Action::Create, &self.cfg));
                self.api.create(&pp, &lease).await
            }
            (action, Some(mut lease)) => {
                lease.spec = Some(held_spec(lease.spec.as_ref(), action, &self.cfg));
                self.api.replace(&self.cfg.name, &pp, &lease).await
            }
        };
        match written {
            Ok(lease) => {
                self.observe(Some(&lease), Instant::now());
                self.held = Some(lease);
                Ok(true)
            }
            // another candidate wrote first (409 on create means it exists now)
            Err(e) if is_conflict(&e) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// One renewal attempt while leading.
    async fn renew(&mut self) -> Result<Renewal, kube::Error> {
        let base = match self.held.take() {
            Some(lease) => lease,
            None => match self.api.get_opt(&self.cfg.name).await? {
                Some(lease) => lease,
                None => return Ok(Renewal::Lost("the lease was deleted".into())),
            },
        };
        match holder(&base) {
            Some(h) if h == self.cfg.identity => {}
            Some(other) => return Ok(Renewal::Lost(format!("the lease is now held by {other}"))),
            None => {
                return Ok(Renewal::Lost(
                    "the lease was released by someone else".into(),
                ));
            }
        }
        let mut lease = base;
        lease.spec = Some(held_spec(lease.spec.as_ref(), Action::Renew, &self.cfg));
        match self
            .api
            .replace(&self.cfg.name, &PostParams::default(), &lease)
            .await
        {
            Ok(lease) => {
                self.observe(Some(&lease), Instant::now());
                self.held = Some(lease);
                Ok(Renewal::Renewed)
            }
            Err(e) if is_conflict(&e) => Ok(Renewal::Conflict),
            Err(e) => Err(e),
        }
    }

    /// [`Elector::release`], bounded by `limit` (the API server may be unreachable at shutdown).
    async fn release_within(&mut self, limit: Duration) {
        if tokio::time::timeout(limit, self.release()).await.is_err() {
            tracing::warn!(
                lease = %self.cfg.lease_name(),
                "releasing the leader lease timed out; standbys take over when it expires"
            );
        }
    }

    /// Gives the lease up if this instance still holds it (reading it first unless this
    /// instance wrote it last).
    async fn release(&mut self) {
        let base = match self.held.take() {
            Some(lease) => Some(lease),
            None => self.api.get_opt(&self.cfg.name).await.ok().flatten(),
        };
        let Some(mut lease) = base else { return };
        if holder(&lease) != Some(self.cfg.identity.as_str()) {
            return;
        }
        lease.spec = Some(released_spec(lease.spec.as_ref()));
        match self
            .api
            .replace(&self.cfg.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => tracing::info!(
                lease = %self.cfg.lease_name(),
                identity = %self.cfg.identity,
                "released the leader lease"
            ),
            Err(e) => tracing::warn!(
                lease = %self.cfg.lease_name(),
                error = %e,
                "could not release the leader lease; standbys take over when it expires"
            ),
        }
    }

    fn lost(&self, reason: String) -> LeaderError {
        LeaderError::Lost {
            namespace: self.cfg.namespace.clone(),
            name: self.cfg.name.clone(),
            identity: self.cfg.identity.clone(),
            reason,
        }
    }
}

pub(crate) fn jittered(period: Duration) -> Duration {
    period.mul_f64(1.0 + rand::random::<f64>() * JITTER_FACTOR)
}

/// How the leading phase ended.
enum End {
    /// The work returned (after shutdown, or by itself).
    WorkReturned,
    Lost(String),
}

/// Runs `work` while this instance holds the Lease named by `cfg`.
///
/// Waits to acquire the Lease (returning `Ok(())` if `shutdown` is cancelled first), then calls
/// `work` with a token of its own and renews the Lease while the work runs.
/// - `shutdown` cancelled: cancels the work's token and keeps renewing the Lease until the work
///   returns (so in-flight syncs finish before a standby can start), then releases the Lease and
///   returns `Ok(())`. If the Lease is lost while draining, returns [`LeaderError::Lost`] after the
///   work returns.
/// - The work returns by itself: releases the Lease, returns `Ok(())`.
/// - The Lease is lost (not renewed within the renew deadline, or taken by another holder):
///   cancels the work's token at once, awaits the work, returns [`LeaderError::Lost`] without
///   touching the Lease.
///
/// `cfg.leading` is true while the work runs as leader; it turns false as soon as shutdown
/// starts or the Lease is lost, before the work has returned.
pub async fn run_elected<F, Fut>(
    client: kube::Client,
    cfg: LeaderConfig,
    shutdown: CancellationToken,
    work: F,
) -> Result<(), LeaderError>
where
    F: FnOnce(CancellationToken) -> Fut,
    Fut: Future<Output = ()>,
{
    cfg.validate()?;
    cfg.set_leading(false);
    let lease_name = cfg.lease_name();
    let mut elector = Elector {
        api: Api::namespaced(client, &cfg.namespace),
        cfg: cfg.clone(),
        observed: None,
        held: None,
    };
    let phase = Phase {
        cfg: &cfg,
        lease_name: &lease_name,
        shutdown: &shutdown,
    };

    let Some(acquired_at) = phase.acquire(&mut elector).await else {
        return Ok(());
    };

    // leader; the wording of the client-go Metacontroller v4.17.2 ships (v0.36,
    // `leaderelection.go`), which its `leader-election` example greps for
    cfg.fence.open_until(acquired_at + cfg.renew_deadline);
    tracing::info!(lock = %lease_name, identity = %cfg.identity, "Successfully acquired lease");
    cfg.set_leading(true);
    let work_token = CancellationToken::new();
    let work_fut = work(work_token.clone());
    tokio::pin!(work_fut);
    let end = phase
        .lead(&mut elector, &work_token, work_fut.as_mut(), acquired_at)
        .await;

    cfg.fence.close();
    cfg.set_leading(false);
    work_token.cancel();
    match end {
        End::WorkReturned => {
            elector.release_within(cfg.renew_deadline).await;
            Ok(())
        }
        End::Lost(reason) => {
            // the work is dropped here, not drained: every in-flight sync stops at once, and the
            // closed fence refuses any write a task outside it might still attempt
            tracing::error!(lease = %lease_name, %reason, "lost the leader lease: stopping work");
            Err(elector.lost(reason))
        }
    }
}

/// [`run_elected`] with the election on a thread of its own: a current-thread runtime there,
/// and a client made there from `config` (limited by `limits`). `work` runs on the calling
/// runtime (spawned; aborted when the Lease is lost, as [`run_elected`] drops its work).
///
/// A tokio task is never pre-empted: with the election a task of the work's runtime, a renewal
/// due while the work's threads run thousands of ready syncs waits behind them, and a Lease not
/// renewed within the renew deadline is lost (the process stops). client-go's elector is a
/// goroutine the Go scheduler pre-empts; the thread is kmeta's equivalent
/// (`docs/design/lease-threads.md`).
pub async fn run_elected_apart<F, Fut>(
    config: kube::Config,
    limits: crate::ops::ratelimit::RateLimit,
    metrics: Arc<Metrics>,
    cfg: LeaderConfig,
    shutdown: CancellationToken,
    work: F,
) -> Result<(), LeaderError>
where
    F: FnOnce(CancellationToken) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let work_runtime = tokio::runtime::Handle::current();
    let panicked = Arc::new(std::sync::Mutex::new(None));
    let slot = panicked.clone();
    let on_work_runtime = move |token: CancellationToken| {
        let task = tokio_util::task::AbortOnDropHandle::new(work_runtime.spawn(work(token)));
        async move {
            if let Err(e) = task.await
                && e.is_panic()
                && let Ok(mut slot) = slot.lock()
            {
                *slot = Some(e.into_panic());
            }
        }
    };
    let (ended_tx, ended) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("kmeta-leader-election".into())
        .spawn(move || {
            let ran = elect_on_this_thread(config, limits, metrics, |client| {
                run_elected(client, cfg, shutdown, on_work_runtime)
            });
            let _ = ended_tx.send(ran);
        })
        .map_err(|e| LeaderError::Thread(e.to_string()))?;
    let elected = ended
        .await
        .unwrap_or_else(|_| Err(LeaderError::Thread("the election's thread ended".into())));
    // a panic of the work reaches the caller as it did with the work in its own task, after
    // the election released the Lease
    if let Some(p) = panicked.lock().ok().and_then(|mut p| p.take()) {
        std::panic::resume_unwind(p);
    }
    elected
}

/// Runs the election `run` makes from a client on a current-thread runtime of this thread,
/// the client made on that runtime (its buffer task runs there).
fn elect_on_this_thread<R, Fut>(
    config: kube::Config,
    limits: crate::ops::ratelimit::RateLimit,
    metrics: Arc<Metrics>,
    run: R,
) -> Result<(), LeaderError>
where
    R: FnOnce(kube::Client) -> Fut,
    Fut: Future<Output = Result<(), LeaderError>>,
{
    let (runtime, client) = crate::coord::client::lease_runtime(config, limits, metrics)
        .map_err(|e| LeaderError::Thread(e.to_string()))?;
    runtime.block_on(run(client))
}

/// What the follower and leader phases of [`run_elected`] share.
struct Phase<'a> {
    cfg: &'a LeaderConfig,
    /// `namespace/name` of the Lease, for logs.
    lease_name: &'a str,
    shutdown: &'a CancellationToken,
}

impl Phase<'_> {
    /// Follower: retries until this instance holds the Lease and returns when the successful
    /// attempt started; `None` when shutdown came first.
    async fn acquire(&self, elector: &mut Elector) -> Option<Instant> {
        let (cfg, lease_name, shutdown) = (self.cfg, self.lease_name, self.shutdown);
        tracing::info!(lock = %lease_name, identity = %cfg.identity, "Attempting to acquire leader lease...");
        loop {
            let started = Instant::now();
            let attempt = tokio::select! {
                biased;
                () = shutdown.cancelled() => {
                    // an attempt cut short may have written the lease without us seeing the answer
                    elector.release_within(cfg.retry_period).await;
                    return None;
                }
                r = tokio::time::timeout(cfg.renew_deadline, elector.try_acquire()) => r,
            };
            match attempt {
                Ok(Ok(true)) => return Some(started),
                Ok(Ok(false)) => {}
                Ok(Err(e)) => {
                    tracing::warn!(lease = %lease_name, error = %e, "leader lease attempt failed");
                }
                Err(_) => tracing::warn!(lease = %lease_name, "leader lease attempt timed out"),
            }
            tokio::select! {
                biased;
                () = shutdown.cancelled() => return None,
                () = tokio::time::sleep(jittered(cfg.retry_period)) => {}
            }
        }
    }

    /// Leader: renews the Lease until the work returns or the Lease is lost. On shutdown it
    /// cancels `work_token` and keeps renewing while the work drains, so no standby starts
    /// before this instance's last write is done.
    async fn lead<Fut: Future<Output = ()>>(
        &self,
        elector: &mut Elector,
        work_token: &CancellationToken,
        mut work_fut: Pin<&mut Fut>,
        acquired_at: Instant,
    ) -> End {
        let (cfg, lease_name, shutdown) = (self.cfg, self.lease_name, self.shutdown);
        let mut last_renewed = acquired_at;
        let mut next_attempt = acquired_at + cfg.retry_period;
        let mut draining = false;
        loop {
            let deadline = last_renewed + cfg.renew_deadline;
            let wake = next_attempt.min(deadline);
            let el = &mut *elector;
            let attempt = async move {
                tokio::time::sleep_until(wake).await;
                let started = Instant::now();
                (started, tokio::time::timeout_at(deadline, el.renew()).await)
            };
            tokio::select! {
                biased;
                () = shutdown.cancelled(), if !draining => {
                    tracing::info!(lease = %lease_name, "shutting down: stopping work, then releasing the lease");
                    draining = true;
                    cfg.set_leading(false);
                    work_token.cancel();
                }
                () = &mut work_fut => return End::WorkReturned,
                (started, result) = attempt => {
                    match result {
                        Ok(Ok(Renewal::Renewed)) => {
                            last_renewed = started;
                            cfg.fence.open_until(started + cfg.renew_deadline);
                        }
                        Ok(Ok(Renewal::Lost(reason))) => return End::Lost(reason),
                        Ok(Ok(Renewal::Conflict)) => {
                            tracing::debug!(lease = %lease_name, "leader lease renewal conflicted; re-reading");
                        }
                        Ok(Err(e)) => {
                            tracing::warn!(lease = %lease_name, error = %e, "leader lease renewal failed");
                        }
                        Err(_) => {}
                    }
                    if Instant::now() >= last_renewed + cfg.renew_deadline {
                        return End::Lost(format!(
                            "not renewed within the renew deadline ({:?})",
                            cfg.renew_deadline
                        ));
                    }
                    next_attempt = started + cfg.retry_period;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(me: &str) -> LeaderConfig {
        LeaderConfig {
            identity: me.to_string(),
            ..LeaderConfig::default()
        }
    }

    fn lease(holder: Option<&str>, duration: Option<i32>) -> Lease {
        let mut l = Lease::default();
        l.metadata.name = Some("metacontroller".into());
        l.metadata.resource_version = Some("7".into());
        l.spec = Some(LeaseSpec {
            holder_identity: holder.map(str::to_string),
            lease_duration_seconds: duration,
            lease_transitions: Some(3),
            ..LeaseSpec::default()
        });
        l
    }

    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    #[test]
    fn defaults_are_client_go_and_metacontroller() {
        let c = LeaderConfig::default();
        assert_eq!(c.name, "metacontroller");
        assert_eq!(c.lease_duration, secs(15));
        assert_eq!(c.renew_deadline, secs(10));
        assert_eq!(c.retry_period, secs(2));
        assert!(!c.identity.is_empty());
        assert!(!c.leading.load(Ordering::SeqCst));
        c.validate().expect("defaults are valid");
    }

    #[test]
    fn validation_rejects_inconsistent_timings() {
        let mut c = cfg("me");
        c.renew_deadline = secs(15);
        assert!(c.validate().is_err());
        let mut c = cfg("me");
        c.retry_period = Duration::from_millis(8500);
        assert!(c.validate().is_err());
        let mut c = cfg("me");
        c.retry_period = Duration::ZERO;
        assert!(c.validate().is_err());
        let mut c = cfg("");
        c.identity.clear();
        assert!(c.validate().is_err());
        let c = LeaderConfig {
            lease_duration: secs(2),
            renew_deadline: Duration::from_millis(1500),
            retry_period: Duration::from_millis(200),
            ..cfg("me")
        };
        c.validate().expect("test timings are valid");
    }

    #[test]
    fn missing_lease_is_created() {
        let t = Instant::now();
        assert_eq!(decide(None, t, t, &cfg("me")), Action::Create);
    }

    #[test]
    fn free_lease_is_acquired_at_once() {
        let t = Instant::now();
        let c = cfg("me");
        assert_eq!(
            decide(Some(&lease(None, Some(15))), t, t, &c),
            Action::Acquire
        );
        assert_eq!(
            decide(Some(&lease(Some(""), Some(1))), t, t, &c),
            Action::Acquire
        );
    }

    #[test]
    fn own_lease_is_renewed_even_when_expired() {
        let t = Instant::now();
        let c = cfg("me");
        let l = lease(Some("me"), Some(15));
        assert_eq!(decide(Some(&l), t, t, &c), Action::Renew);
        assert_eq!(decide(Some(&l), t, t + secs(60), &c), Action::Renew);
    }

    #[test]
    fn others_lease_is_respected_until_unchanged_for_its_duration() {
        let t = Instant::now();
        let c = cfg("me");
        let l = lease(Some("other"), Some(15));
        assert_eq!(
            decide(Some(&l), t, t + secs(14), &c),
            Action::Wait {
                until: t + secs(15)
            }
        );
        assert_eq!(decide(Some(&l), t, t + secs(15), &c), Action::Acquire);
        // the record's duration wins over ours
        let short = lease(Some("other"), Some(2));
        assert_eq!(decide(Some(&short), t, t + secs(2), &c), Action::Acquire);
        // without one, ours applies
        let none = lease(Some("other"), None);
        assert_eq!(
            decide(Some(&none), t, t + secs(3), &c),
            Action::Wait {
                until: t + secs(15)
            }
        );
    }

    #[test]
    fn taking_over_counts_a_transition_and_renewing_does_not() {
        let c = cfg("me");
        let other = lease(Some("other"), Some(15));
        let s = held_spec(other.spec.as_ref(), Action::Acquire, &c);
        assert_eq!(s.holder_identity.as_deref(), Some("me"));
        assert_eq!(s.lease_transitions, Some(4));
        assert_eq!(s.lease_duration_seconds, Some(15));
        assert!(s.acquire_time.is_some() && s.renew_time.is_some());

        let mine = LeaseSpec {
            acquire_time: Some(MicroTime(jiff::Timestamp::UNIX_EPOCH)),
            ..s.clone()
        };
        let r = held_spec(Some(&mine), Action::Renew, &c);
        assert_eq!(r.lease_transitions, Some(4));
        assert_eq!(r.acquire_time, mine.acquire_time);
        assert_ne!(r.renew_time, mine.acquire_time);

        let created = held_spec(None, Action::Create, &c);
        assert_eq!(created.lease_transitions, Some(0));
        assert_eq!(created.holder_identity.as_deref(), Some("me"));
    }

    #[test]
    fn release_clears_the_holder_and_shortens_the_lease() {
        let mine = lease(Some("me"), Some(15));
        let r = released_spec(mine.spec.as_ref());
        assert_eq!(r.holder_identity, None);
        assert_eq!(r.lease_duration_seconds, Some(1));
        assert_eq!(r.lease_transitions, Some(3));
        let mut l = mine.clone();
        l.spec = Some(r);
        assert_eq!(holder(&l), None);
    }

    #[test]
    fn identity_prefers_pod_name_shape() {
        // POD_NAME is not set in tests (it would be read here); the fallback is host_suffix
        if std::env::var("POD_NAME").is_err() {
            let a = default_identity();
            let b = default_identity();
            assert!(a.contains('_'), "{a}");
            assert_ne!(a, b, "two processes on one host must not share an identity");
        }
    }

    /// The work's runtime blocked for three renew deadlines (its only thread busy, as a
    /// saturated runtime's timers are late): the election, on its own thread, keeps the Lease
    /// and the write fence open, and at shutdown releases the Lease.
    #[cfg(feature = "embedded-apiserver")]
    #[test]
    fn a_blocked_work_runtime_keeps_the_leader_lease() -> anyhow::Result<()> {
        let (server_runtime, server) = crate::coord::server_apart()?;
        let renew_deadline = Duration::from_millis(1000);
        let cfg = LeaderConfig {
            lease_duration: Duration::from_millis(1500),
            renew_deadline,
            retry_period: Duration::from_millis(100),
            ..cfg("leader")
        };
        let (leading, fence) = (cfg.leading.clone(), cfg.fence.clone());
        let shutdown = CancellationToken::new();
        let stop = shutdown.clone();
        let work_runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let unlimited = crate::ops::ratelimit::RateLimit { qps: 0.0, burst: 0 };
        let elected = work_runtime.block_on(run_elected_apart(
            kube::Config::new(server.url().parse()?),
            unlimited,
            Arc::new(Metrics::default()),
            cfg,
            shutdown,
            move |token| async move {
                assert!(leading.load(Ordering::SeqCst), "the work runs as leader");
                // the runtime's only thread busy: no timer of this runtime fires
                std::thread::sleep(renew_deadline * 3);
                assert!(leading.load(Ordering::SeqCst), "still leading");
                assert!(fence.permits(Instant::now()), "the fence stayed open");
                stop.cancel();
                token.cancelled().await;
            },
        ));
        assert!(elected.is_ok(), "{elected:?}");
        let url = server.url().parse()?;
        let lease = server_runtime.block_on(async {
            let client = kube::Client::try_from(kube::Config::new(url))?;
            Api::<Lease>::namespaced(client, "default")
                .get("metacontroller")
                .await
        })?;
        assert_eq!(holder(&lease), None, "released at shutdown");
        server_runtime.block_on(server.shutdown());
        Ok(())
    }
}
