//! The bucket Lease loop of a sharded replica ([`run_sharded`]).
//!
//! Every retry period (jittered as client-go's), one round:
//! 1. one LIST of the Leases labelled `kmeta.dev/shard-set=<prefix>` (members and buckets);
//!    each record's first sighting feeds the observation clock of [`leader::decide`], so expiry
//!    is measured on this replica's monotonic clock, never from the record's `renewTime`. A
//!    watch of the same Leases sights each record as it is written, between rounds, and starts
//!    a round early at a Lease's expiry or release ([`Loop::sightings`]);
//! 2. this replica's member Lease is created or renewed (the others count it);
//! 3. every held bucket is renewed; a renewal that started at `t` opens the bucket's fence until
//!    `t + renew deadline` ([`Shards::renewed`]); a bucket not renewed by then, or now held by
//!    another, is lost;
//! 4. hand-overs in progress finish once their syncs have drained (or the drain timeout passed):
//!    fence closed, epoch moved, Lease released;
//! 5. [`super::plan`] picks the buckets to take (compare-and-swap on the Lease's
//!    `resourceVersion`: of two replicas racing, one gets 409) and the one to hand over;
//! 6. with server-sharded watches, the buckets of holders that look gone (no member Lease
//!    renewal for two renewals' time) that this replica would take are listed before their
//!    Leases expire ([`super::foresee`]).
//!
//! At shutdown the member Lease is deleted first (the others raise their share), then every
//! bucket is handed over in parallel, then the work is stopped.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, watcher};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::legacy::LegacyGuard;
use super::state::Previous;
use super::{Bucket, BucketView, Shards, Step, plan_awaiting};
use crate::coord::client::LeaseRuntimeError;
use crate::coord::leader::{self, Action, LeaderConfig};
use crate::ops::metrics::Metrics;
use crate::ops::ratelimit::RateLimit;
use crate::runtime::kapi::is_conflict;

/// The label every Lease of a shard set carries, valued with the set's prefix.
pub const SET_LABEL: &str = "kmeta.dev/shard-set";
/// The label telling member Leases (`member`) from bucket Leases (`bucket`).
pub const ROLE_LABEL: &str = "kmeta.dev/shard-role";
/// The annotation of a bucket Lease naming the set's bucket count: replicas configured with
/// another count (which would map a namespace to another bucket) take nothing.
pub const BUCKETS_ANNOTATION: &str = "kmeta.dev/shard-buckets";
/// The annotation of a bucket Lease naming the set's namespace hash (`mixed` or `fnv-1a`,
/// [`super::ShardHash`]; absent: `mixed`, as written before the choice existed): replicas
/// configured with another hash take nothing.
pub const HASH_ANNOTATION: &str = "kmeta.dev/shard-hash";
/// The annotation of a bucket Lease naming what places a parent in a bucket (`namespace` or
/// `uid`, [`super::ShardKey`]; absent: `namespace`, as written before the choice existed):
/// replicas configured with another key take nothing.
pub const KEY_ANNOTATION: &str = "kmeta.dev/shard-key";

/// Settings of a sharded replica.
#[derive(Clone, Debug)]
pub struct ShardConfig {
    /// Namespace of the Leases: `--leader-election-namespace` or the pod's.
    pub namespace: String,
    /// Prefix of the Lease names and value of [`SET_LABEL`]. Default `kmeta-shard`
    /// (`--shard-lease-prefix`).
    pub prefix: String,
    /// This replica's identity (`holderIdentity`): as leader election's (`POD_NAME`, else the
    /// hostname and a random suffix).
    pub identity: String,
    /// Lease duration. Default 15 s, as leader election (`--shard-lease-duration`).
    pub lease_duration: Duration,
    /// Renew deadline. Default 10 s (`--shard-renew-deadline`).
    pub renew_deadline: Duration,
    /// Retry period. Default 2 s (`--shard-retry-period`).
    pub retry_period: Duration,
    /// How long a hand-over waits for its bucket's syncs in flight before it releases anyway
    /// (they are then refused at the fence). Default 10 s, the renew deadline
    /// (`--shard-drain-timeout`).
    pub drain_timeout: Duration,
    /// The buckets this replica holds, shared with the workers and the client.
    pub shards: Arc<Shards>,
    /// The leader-election Lease a leader-mode kmeta or Metacontroller would hold
    /// (`--leader-election-id`). Default `metacontroller`. The set works only while one of its
    /// members holds it (`legacy.rs`).
    pub leader_lease: String,
    /// Where `kmeta_shard_*` series go. Default: none.
    pub metrics: Option<Arc<Metrics>>,
}

/// Errors of the bucket Lease loop.
#[derive(Debug, thiserror::Error)]
pub enum ShardError {
    /// The configuration is unusable.
    #[error("invalid sharding config: {0}")]
    InvalidConfig(String),
    /// The Lease loop's client could not be made from the kubeconfig.
    #[error("building the shard Lease client: {0}")]
    Client(String),
    /// The Lease loop's thread or runtime could not be started.
    #[error("starting the shard Lease loop's thread: {0}")]
    Thread(String),
}

impl ShardConfig {
    /// Settings for `shards` with the documented defaults.
    pub fn new(namespace: String, identity: String, shards: Arc<Shards>) -> ShardConfig {
        ShardConfig {
            namespace,
            prefix: "kmeta-shard".into(),
            identity,
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
            drain_timeout: Duration::from_secs(10),
            shards,
            leader_lease: "metacontroller".into(),
            metrics: None,
        }
    }

    /// The leader-election view of one Lease of the set, for its timings and checks.
    fn lease(&self, name: String) -> LeaderConfig {
        LeaderConfig {
            namespace: self.namespace.clone(),
            name,
            identity: self.identity.clone(),
            lease_duration: self.lease_duration,
            renew_deadline: self.renew_deadline,
            retry_period: self.retry_period,
            ..LeaderConfig::default()
        }
    }

    /// Checks the timings as leader election does, and the bucket count.
    pub fn validate(&self) -> Result<(), ShardError> {
        if !super::valid_bucket_count(self.shards.buckets()) {
            return Err(ShardError::InvalidConfig(format!(
                "--shard-buckets must be a power of two from 1 to 1024, not {}",
                self.shards.buckets()
            )));
        }
        if self.prefix.is_empty() || self.prefix.len() > 40 {
            return Err(ShardError::InvalidConfig(
                "--shard-lease-prefix must have 1 to 40 characters".into(),
            ));
        }
        if self.leader_lease.is_empty() {
            return Err(ShardError::InvalidConfig(
                "--leader-election-id must not be empty: sharded replicas hold it so that no leader-mode process writes beside them".into(),
            ));
        }
        self.lease(self.bucket_lease(Bucket::Cluster))
            .validate()
            .map_err(|e| ShardError::InvalidConfig(e.to_string()))
    }

    /// The name of the Lease of `b`.
    pub fn bucket_lease(&self, b: Bucket) -> String {
        format!("{}-{b}", self.prefix)
    }

    /// The name of this replica's member Lease: the identity made a valid object name.
    pub fn member_lease(&self) -> String {
        let clean: String = self
            .identity
            .to_ascii_lowercase()
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .collect();
        let clean = clean.trim_matches('-');
        let short: String = clean.chars().take(40).collect();
        let hash = super::fnv1a64(self.identity.as_bytes());
        format!("{}-member-{short}-{:08x}", self.prefix, hash as u32)
    }
}

/// A bucket this replica holds.
#[derive(Debug)]
struct Held {
    /// The Lease as this replica last wrote it (base of the next renewal); `None` after a
    /// conflict: the next round's list is the base.
    lease: Option<Lease>,
    /// When the last successful renewal started.
    renewed_at: Instant,
    /// A hand-over started then: no work is handed out; released once drained.
    handing_over: Option<(Instant, HandoffReason)>,
}

/// Why a bucket changed hands, a metric label.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum HandoffReason {
    Rebalance,
    Shutdown,
    Lost,
    /// A leader-mode process holds the leader Lease.
    Blocked,
}

impl HandoffReason {
    fn as_str(self) -> &'static str {
        match self {
            HandoffReason::Rebalance => "rebalance",
            HandoffReason::Shutdown => "shutdown",
            HandoffReason::Lost => "lost",
            HandoffReason::Blocked => "blocked",
        }
    }
}

/// The earliest expiry among the Leases another holds, as one round decided them (and, with
/// server-sharded watches, the earliest moment a member would look gone).
#[derive(Default)]
struct Expiry(Option<Instant>);

impl Expiry {
    fn note(&mut self, action: Action) {
        if let Action::Wait { until } = action {
            self.0 = Some(self.0.map_or(until, |e| e.min(until)));
        }
    }
}

/// How long the loop waits before its next round: the jittered retry period, or less when a
/// Lease another holds expires sooner (`next_expiry`, on this replica's clock). Polled only
/// every retry period, a killed replica's buckets would wait up to 2.2 retry periods (4.4 s at
/// kmeta's default) past their expiry; so the round starts at the expiry, which is when
/// [`leader::decide`] would first say `Acquire` (a record renewed meanwhile just waits again).
fn until_next_round(jittered: Duration, next_expiry: Option<Instant>, now: Instant) -> Duration {
    match next_expiry {
        Some(at) => jittered.min(at.saturating_duration_since(now)),
        None => jittered,
    }
}

/// When a round should start for a Lease just sighted, as [`leader::decide`] judged it: at its
/// expiry when another holds it, at once when it is free (released, expired or deleted: a
/// bucket to take, or a member gone whose share the others take up), never for this replica's
/// own.
fn next_round_for(action: Action, now: Instant) -> Option<Instant> {
    match action {
        Action::Wait { until } => Some(until),
        Action::Acquire | Action::Create => Some(now),
        Action::Renew => None,
    }
}

/// How long ago, by this machine's clock, a record says it was renewed (or acquired): how late a
/// sighting is, give or take the clocks' skew between the replicas (a debug log's figure only).
fn written_ago(record: Option<&LeaseSpec>) -> Option<i64> {
    let r = record?;
    let at = r.renew_time.as_ref().or(r.acquire_time.as_ref())?;
    let ago = jiff::Timestamp::now().duration_since(at.0);
    i64::try_from(ago.as_millis()).ok()
}

/// Whether a held bucket can be renewed from `base`, its Lease as last written or listed:
/// the Lease to renew, or why the bucket is lost.
fn renewal(base: Option<Lease>, identity: &str) -> Result<Lease, String> {
    match base {
        None => Err("its Lease was deleted".to_owned()),
        Some(l) if leader::holder(&l) != Some(identity) => Err(format!(
            "its Lease is now held by {}",
            leader::holder(&l).unwrap_or("nobody")
        )),
        Some(lease) => Ok(lease),
    }
}

/// The loop's state.
struct Loop {
    api: Api<Lease>,
    cfg: ShardConfig,
    /// Every Lease record seen (by name) and when it was first seen.
    observed: HashMap<String, (Option<LeaseSpec>, Instant)>,
    held: BTreeMap<Bucket, Held>,
    /// The member Lease as last written.
    member: Option<Lease>,
    /// A bucket count mismatch last reported (logged once per change).
    mismatch: Option<String>,
    /// The guard on the leader-election Lease.
    legacy: LegacyGuard,
    /// Every identity seen holding a member Lease of the set (live or expired) within
    /// [`KNOWN_FOR`], and when it was last seen so.
    known: HashMap<String, Instant>,
    /// The earliest moment a Lease held by another, as last listed, expires on this replica's
    /// clock: the next round starts then if that is sooner than a retry period away.
    next_expiry: Option<Instant>,
    /// The replicas whose member Lease was seen changing within [`Loop::quiet_after`] (this
    /// one included), as the last round found them.
    fresh: BTreeSet<String>,
}

/// How long a replica seen holding a member Lease is remembered as one of the set: a killed
/// member's member Lease expires while its leader Lease may still be held (they were renewed
/// moments apart); an hour is many lease durations and bounds the memory of rolled pods.
const KNOWN_FOR: Duration = Duration::from_secs(3600);

/// Runs `work` on a sharded replica: the bucket Lease loop beside it, on a thread and runtime
/// of its own with a client of its own made from `config` (no client-side rate limit), until
/// `shutdown`; then the member Lease is deleted, every bucket handed over (its syncs drained
/// first, bounded by the drain timeout), and the work's token cancelled; returns when the work
/// has returned.
///
/// The loop's own thread keeps its renewals on time however busy the work's runtime is: a
/// tokio task is never pre-empted, so a renewal timer due while the work's threads run
/// thousands of ready syncs waits behind them, and a bucket not renewed within the renew
/// deadline is lost (`docs/design/lease-threads.md`).
pub async fn run_sharded<F, Fut>(
    config: kube::Config,
    cfg: ShardConfig,
    shutdown: CancellationToken,
    work: F,
) -> Result<(), ShardError>
where
    F: FnOnce(CancellationToken) -> Fut,
    Fut: Future<Output = ()>,
{
    cfg.validate()?;
    if let Some(m) = &cfg.metrics {
        cfg.shards.report_to(m.clone());
    }
    let stop = CancellationToken::new();
    let mut done = Loop::start(config, cfg, stop.clone()).await?;
    let token = CancellationToken::new();
    let work = work(token.clone());
    tokio::pin!(work);
    let mut returned = tokio::select! {
        biased;
        () = shutdown.cancelled() => false,
        () = &mut work => true,
        _ = &mut done => {
            // the loop's thread ended by itself (a panic): every fence closes by the clock;
            // the process must stop rather than run on without buckets
            token.cancel();
            work.await;
            return Err(ShardError::Thread("the Lease loop's thread ended".into()));
        }
    };
    stop.cancel();
    // the loop hands every bucket over while the work drains its syncs, then ends
    let mut handed_over = false;
    if !returned {
        tokio::select! {
            _ = &mut done => handed_over = true,
            () = &mut work => returned = true,
        }
    }
    if !handed_over {
        let _ = done.await;
    }
    token.cancel();
    if !returned {
        work.await;
    }
    Ok(())
}

impl Loop {
    /// Starts the loop on a thread of its own, with a current-thread runtime and a client made
    /// from `config` on it; the receiver completes once the loop has stopped (after `stop`) and
    /// handed every bucket over.
    async fn start(
        config: kube::Config,
        cfg: ShardConfig,
        stop: CancellationToken,
    ) -> Result<tokio::sync::oneshot::Receiver<()>, ShardError> {
        let work_runtime = tokio::runtime::Handle::current();
        let (ready_tx, ready) = tokio::sync::oneshot::channel();
        let (done_tx, done) = tokio::sync::oneshot::channel::<()>();
        std::thread::Builder::new()
            .name("kmeta-shard-leases".into())
            .spawn(move || {
                let (runtime, state) = match Loop::on_this_thread(config, cfg) {
                    Ok(started) => started,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                let _ = ready_tx.send(Ok(()));
                runtime.block_on(state.run(stop, work_runtime));
                let _ = done_tx.send(());
            })
            .map_err(|e| ShardError::Thread(e.to_string()))?;
        match ready.await {
            Ok(Ok(())) => Ok(done),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(ShardError::Thread("the Lease loop's thread ended".into())),
        }
    }

    /// The loop's runtime and state, its client made on that runtime (its buffer task runs
    /// there).
    fn on_this_thread(
        config: kube::Config,
        cfg: ShardConfig,
    ) -> Result<(tokio::runtime::Runtime, Loop), ShardError> {
        let unlimited = RateLimit { qps: 0.0, burst: 0 };
        let metrics = cfg.metrics.clone().unwrap_or_default();
        let (runtime, client) = crate::coord::client::lease_runtime(config, unlimited, metrics)
            .map_err(|e| match e {
                LeaseRuntimeError::Client(e) => ShardError::Client(e.to_string()),
                e @ LeaseRuntimeError::Runtime(_) => ShardError::Thread(e.to_string()),
            })?;
        let state = Loop {
            legacy: LegacyGuard::new(cfg.lease(cfg.leader_lease.clone())),
            api: Api::namespaced(client, &cfg.namespace),
            cfg,
            observed: HashMap::new(),
            held: BTreeMap::new(),
            member: None,
            mismatch: None,
            known: HashMap::new(),
            next_expiry: None,
            fresh: BTreeSet::new(),
        };
        Ok((runtime, state))
    }

    /// The loop on its own thread until `stop`, then the shutdown's hand-overs. Each round's
    /// watch selection runs in the context of `work_runtime` (the tasks awaiting a gained
    /// bucket's lists belong to the work).
    async fn run(mut self, stop: CancellationToken, work_runtime: tokio::runtime::Handle) {
        let mut sightings = self.sightings();
        loop {
            let now = Instant::now();
            let mut next_round = now
                + until_next_round(
                    leader::jittered(self.cfg.retry_period),
                    // taken: a round that lists nothing (a failed list) waits a whole period
                    self.next_expiry.take(),
                    now,
                );
            loop {
                tokio::select! {
                    biased;
                    () = stop.cancelled() => {
                        self.shut_down().await;
                        return;
                    }
                    () = tokio::time::sleep_until(next_round) => break,
                    Some(event) = sightings.next() => {
                        if let Some(at) = self.sighted(event, Instant::now()) {
                            next_round = next_round.min(at);
                        }
                    }
                }
            }
            let started = Instant::now();
            self.round(false).await;
            tracing::debug!(took = ?started.elapsed(), "a shard Lease round");
            let _work = work_runtime.enter();
            self.cfg.shards.publish_watches();
        }
    }

    /// The set's Leases as a watch streams them: each record is sighted when written rather
    /// than at the next round's list, which was up to a jittered retry period later (2.2 × the
    /// period, 4.4 s at kmeta's default), and expiry is timed from the first sighting. The
    /// rounds' lists still decide; a watch that fails only loses the promptness (retried with
    /// kube's default backoff, logged).
    fn sightings(&self) -> futures::stream::BoxStream<'static, watcher::Event<Lease>> {
        let selector = format!("{SET_LABEL}={}", self.cfg.prefix);
        let mut failing = false;
        watcher(self.api.clone(), watcher::Config::default().labels(&selector))
            .default_backoff()
            .filter_map(move |event| {
                let event = match event {
                    Ok(event) => {
                        failing = false;
                        Some(event)
                    }
                    Err(e) => {
                        if !std::mem::replace(&mut failing, true) {
                            tracing::warn!(error = %e, "watching the shard Leases failed; the rounds' lists go on, retrying");
                        }
                        None
                    }
                };
                std::future::ready(event)
            })
            .boxed()
    }

    /// Records a Lease the watch sighted at `now`; returns when a round should start for it
    /// ([`next_round_for`]).
    fn sighted(&mut self, event: watcher::Event<Lease>, now: Instant) -> Option<Instant> {
        let (lease, gone) = match event {
            watcher::Event::Apply(l) | watcher::Event::InitApply(l) => (l, false),
            watcher::Event::Delete(l) => (l, true),
            watcher::Event::Init | watcher::Event::InitDone => return None,
        };
        let name = lease.metadata.name.clone()?;
        let lease = (!gone).then_some(lease);
        let seen = self.observe(&name, lease.as_ref(), now);
        let action = leader::decide(lease.as_ref(), seen, now, &self.cfg.lease(name));
        next_round_for(action, now)
    }

    fn bucket_cfg(&self, b: Bucket) -> LeaderConfig {
        self.cfg.lease(self.cfg.bucket_lease(b))
    }

    /// Records `lease`'s record as seen at `now`; returns when it was first seen.
    fn observe(&mut self, name: &str, lease: Option<&Lease>, now: Instant) -> Instant {
        let record = lease.and_then(|l| l.spec.clone());
        match self.observed.get(name) {
            Some((seen, at)) if *seen == record => *at,
            _ => {
                tracing::debug!(lease = %name, holder = ?record.as_ref().and_then(|r| r.holder_identity.as_deref()), written_ms_ago = ?written_ago(record.as_ref()), "a shard Lease record first seen");
                self.observed.insert(name.to_owned(), (record, now));
                now
            }
        }
    }

    /// One round (see the module doc). `stopping`: take nothing.
    async fn round(&mut self, stopping: bool) {
        let started = Instant::now();
        let selector = format!("{SET_LABEL}={}", self.cfg.prefix);
        let listed = match self
            .api
            .list(&ListParams::default().labels(&selector))
            .await
        {
            Ok(list) => list.items,
            Err(e) => {
                tracing::warn!(error = %e, "listing shard Leases failed; retrying");
                self.expire_unrenewed(Instant::now());
                return;
            }
        };
        let by_name: HashMap<String, Lease> = listed
            .into_iter()
            .filter_map(|l| Some((l.metadata.name.clone()?, l)))
            .collect();
        if !stopping {
            self.keep_member(by_name.get(&self.cfg.member_lease()))
                .await;
        }
        self.renew_held(&by_name).await;
        self.finish_handovers(&by_name).await;
        let (members, views) = self.views(&by_name, started);
        self.cfg.shards.set_members(members.len());
        if let Some(m) = &self.cfg.metrics {
            m.shard_members(members.len());
        }
        if stopping || self.bucket_count_mismatch(&by_name) || self.blocked().await {
            self.cfg.shards.foresee(&[]);
            return;
        }
        let mut takes = Vec::new();
        for step in plan_awaiting(
            &self.cfg.identity,
            members.len(),
            &views,
            &self.pending(&views),
            self.cfg.lease_duration,
        ) {
            match step {
                Step::Acquire(b) => takes.push(b),
                Step::Release(b) => self.hand_over(b, HandoffReason::Rebalance),
            }
        }
        self.acquire_all(&takes, &by_name).await;
        self.foresee_takeovers(&views);
    }

    /// The buckets foreseen by the last round that a replica looking gone still holds.
    fn pending(&self, views: &[BucketView]) -> Vec<Bucket> {
        let foreseen = self.cfg.shards.foreseen();
        views
            .iter()
            .filter(|v| foreseen.contains(&v.bucket))
            .filter(|v| v.holder.as_ref().is_some_and(|h| !self.fresh.contains(h)))
            .map(|v| v.bucket)
            .collect()
    }

    /// How long a member Lease seen unchanged makes its holder look gone: a renewal missed by a
    /// whole retry period (a member renews every jittered retry period, at most 2.2 of them,
    /// and its round takes a moment: 3.2 periods, 6.4 s at the default), and never more than
    /// the renew deadline, by which a holder alive but cut off gives its buckets up itself. The
    /// watch sights a renewal when it is written (tens of milliseconds, 1.2 s at most, under
    /// the edit storm of 100 000 parents), so a live member looks gone only if its rounds stall;
    /// a false alarm costs a list that is dropped, and sooner lists are the takeover's lead.
    fn quiet_after(&self) -> Duration {
        self.cfg
            .retry_period
            .mul_f64(2.0 + leader::JITTER_FACTOR)
            .min(self.cfg.renew_deadline)
    }

    /// Under `--shard-watch=server`: the buckets held by replicas that look gone that this
    /// replica would take once their Leases expire are listed meanwhile, so their work starts
    /// when they are taken rather than after their lists ([`super::foresee`]). A holder that
    /// renews again, or a bucket another takes first, is no longer foreseen: its range is
    /// dropped.
    fn foresee_takeovers(&mut self, views: &[BucketView]) {
        if self.cfg.shards.watch().is_none() {
            return;
        }
        let foreseen = super::foresee(
            &self.cfg.identity,
            &self.fresh,
            views,
            self.cfg.lease_duration,
        );
        if self.cfg.shards.foresee(&foreseen) && !foreseen.is_empty() {
            let gone: BTreeSet<&str> = views
                .iter()
                .filter_map(|v| v.holder.as_deref())
                .filter(|h| !self.fresh.contains(*h))
                .collect();
            tracing::info!(?gone, buckets = ?foreseen, quiet_for = ?self.quiet_after(), "shard holders look gone; listing the buckets this replica would take from them");
        }
    }

    /// Whether a process outside the set holds the leader Lease: then every held bucket is
    /// handed over and none taken (logged when it changes, named on `/readyz`). A holder that
    /// held a member Lease of the set (live or expired) is of the set: a killed member's
    /// leader Lease is waited out, not taken for a leader-mode process's.
    async fn blocked(&mut self) -> bool {
        let mut of_set: BTreeSet<String> = self.known.keys().cloned().collect();
        of_set.insert(self.cfg.identity.clone());
        let blocked = match self.legacy.check(&self.api, &of_set).await {
            Some(verdict) => verdict,
            None => self.cfg.shards.blocked(),
        };
        if blocked != self.cfg.shards.blocked() {
            match &blocked {
                Some(why) => {
                    tracing::warn!(reason = %why, "not sharding: a leader-mode process may write for every parent; handing every bucket over")
                }
                None => tracing::info!("the leader Lease is held by this shard set: sharding"),
            }
            self.cfg.shards.set_blocked(blocked.clone());
        }
        if blocked.is_none() {
            return false;
        }
        let held: Vec<Bucket> = self.held.keys().copied().collect();
        for b in held {
            self.hand_over(b, HandoffReason::Blocked);
        }
        true
    }

    /// Creates or renews this replica's member Lease (a failure only delays the others'
    /// count of it).
    async fn keep_member(&mut self, listed: Option<&Lease>) {
        let name = self.cfg.member_lease();
        let cfg = self.cfg.lease(name.clone());
        let base = self.member.take().or_else(|| listed.cloned());
        let written = match base {
            None => {
                let lease = self.new_lease(
                    &name,
                    "member",
                    leader::held_spec(None, Action::Create, &cfg),
                );
                self.api.create(&PostParams::default(), &lease).await
            }
            Some(mut lease) => {
                lease.spec = Some(leader::held_spec(lease.spec.as_ref(), Action::Renew, &cfg));
                self.api
                    .replace(&name, &PostParams::default(), &lease)
                    .await
            }
        };
        match written {
            Ok(lease) => self.member = Some(lease),
            Err(e) if is_conflict(&e) => {}
            Err(e) => tracing::warn!(lease = %name, error = %e, "renewing the member Lease failed"),
        }
    }

    fn new_lease(&self, name: &str, role: &str, spec: LeaseSpec) -> Lease {
        let mut lease = Lease::default();
        lease.metadata.name = Some(name.to_owned());
        lease.metadata.namespace = Some(self.cfg.namespace.clone());
        lease.metadata.labels = Some(
            [
                (SET_LABEL.to_owned(), self.cfg.prefix.clone()),
                (ROLE_LABEL.to_owned(), role.to_owned()),
            ]
            .into(),
        );
        if role == "bucket" {
            lease.metadata.annotations = Some(self.set_annotations().into_iter().collect());
        }
        lease.spec = Some(spec);
        lease
    }

    /// Renews every held bucket, all at once (a round lasts one answer, however many it
    /// holds); a bucket now held by another, deleted, or not renewed within the renew deadline
    /// is lost.
    async fn renew_held(&mut self, listed: &HashMap<String, Lease>) {
        let identity = self.cfg.identity.clone();
        let mut renewals = Vec::new();
        let mut lost = Vec::new();
        for (b, held) in &mut self.held {
            let name = self.cfg.bucket_lease(*b);
            let base = held.lease.take().or_else(|| listed.get(&name).cloned());
            match renewal(base, &identity) {
                Ok(mut lease) => {
                    let cfg = self.cfg.lease(name.clone());
                    lease.spec = Some(leader::held_spec(lease.spec.as_ref(), Action::Renew, &cfg));
                    renewals.push((*b, name, lease));
                }
                Err(reason) => lost.push((*b, reason)),
            }
        }
        let api = &self.api;
        let answers =
            futures::future::join_all(renewals.into_iter().map(|(b, name, lease)| async move {
                let started = Instant::now();
                let written = api.replace(&name, &PostParams::default(), &lease).await;
                (b, name, started, written)
            }))
            .await;
        for (b, name, started, written) in answers {
            if let Some(m) = &self.cfg.metrics {
                m.shard_renewal_seconds(started.elapsed().as_secs_f64());
            }
            self.renewal_answered(b, &name, started, written);
        }
        for (b, reason) in lost {
            self.lose(b, &reason);
        }
        self.expire_unrenewed(Instant::now());
    }

    /// Records the answer to the renewal of `b` sent at `started`: a renewal opens the bucket's
    /// fence until `started` + the renew deadline; a conflict or an error leaves it to the next
    /// round (the deadline decides).
    fn renewal_answered(
        &mut self,
        b: Bucket,
        name: &str,
        started: Instant,
        written: Result<Lease, kube::Error>,
    ) {
        let Some(held) = self.held.get_mut(&b) else {
            return;
        };
        match written {
            Ok(written) => {
                held.lease = Some(written);
                held.renewed_at = started;
                self.cfg
                    .shards
                    .renewed(b, started + self.cfg.renew_deadline, false);
            }
            Err(e) if is_conflict(&e) => {}
            Err(e) => tracing::warn!(lease = %name, error = %e, "renewing a bucket Lease failed"),
        }
    }

    /// Gives up every held bucket whose last renewal is older than the renew deadline (its
    /// fence closed by the clock already).
    fn expire_unrenewed(&mut self, now: Instant) {
        let late: Vec<Bucket> = self
            .held
            .iter()
            .filter(|(_, h)| now >= h.renewed_at + self.cfg.renew_deadline)
            .map(|(b, _)| *b)
            .collect();
        for b in late {
            self.lose(b, "no renewal succeeded within the renew deadline");
        }
    }

    fn lose(&mut self, b: Bucket, reason: &str) {
        self.held.remove(&b);
        self.cfg.shards.give_up(b);
        self.count_handoff(b, HandoffReason::Lost, false);
        tracing::error!(bucket = %b, %reason, "lost a shard bucket: its parents' writes stop at once");
    }

    fn count_handoff(&self, b: Bucket, reason: HandoffReason, held: bool) {
        if let Some(m) = &self.cfg.metrics {
            m.shard_bucket(&b.to_string(), held);
            if !held {
                m.shard_handoff(reason.as_str());
            }
        }
    }

    /// Starts handing `b` over: no more work for it; released once drained.
    fn hand_over(&mut self, b: Bucket, reason: HandoffReason) {
        if let Some(h) = self.held.get_mut(&b)
            && h.handing_over.is_none()
        {
            self.cfg.shards.deactivate(b);
            h.handing_over = Some((Instant::now(), reason));
            tracing::info!(bucket = %b, reason = reason.as_str(), "handing a shard bucket over");
        }
    }

    /// Releases every bucket being handed over whose syncs have drained (or whose drain
    /// timeout passed): fence closed and epoch moved first, then the Lease released.
    async fn finish_handovers(&mut self, listed: &HashMap<String, Lease>) {
        let now = Instant::now();
        let ready: Vec<(Bucket, HandoffReason)> = self
            .held
            .iter()
            .filter_map(|(b, h)| {
                let (since, reason) = h.handing_over?;
                let drained = self.cfg.shards.in_flight(*b) == 0;
                (drained || now >= since + self.cfg.drain_timeout).then_some((*b, reason))
            })
            .collect();
        for (b, reason) in ready {
            let Some(held) = self.held.remove(&b) else {
                continue;
            };
            self.cfg.shards.give_up(b);
            self.count_handoff(b, reason, false);
            let name = self.cfg.bucket_lease(b);
            let Some(mut lease) = held.lease.or_else(|| listed.get(&name).cloned()) else {
                continue;
            };
            lease.spec = Some(leader::released_spec(lease.spec.as_ref()));
            match self
                .api
                .replace(&name, &PostParams::default(), &lease)
                .await
            {
                Ok(_) => {
                    tracing::info!(bucket = %b, reason = reason.as_str(), "released a shard bucket")
                }
                Err(e) => {
                    tracing::warn!(bucket = %b, error = %e, "releasing a shard bucket failed; it expires instead")
                }
            }
        }
    }

    /// The live members and what this replica knows of each bucket at `now`.
    fn views(
        &mut self,
        listed: &HashMap<String, Lease>,
        now: Instant,
    ) -> (BTreeSet<String>, Vec<BucketView>) {
        let mut expiry = Expiry::default();
        let mut members = self.members(listed, now, &mut expiry);
        // this replica, whose member Lease may not be written yet
        members.insert(self.cfg.identity.clone());
        self.known
            .retain(|_, seen| now.saturating_duration_since(*seen) < KNOWN_FOR);
        let mut views = Vec::new();
        for b in Bucket::all(self.cfg.shards.buckets()) {
            let name = self.cfg.bucket_lease(b);
            let lease = listed.get(&name);
            let seen = self.observe(&name, lease, now);
            let cfg = self.cfg.lease(name);
            let action = leader::decide(lease, seen, now, &cfg);
            expiry.note(action);
            let (holder, free_for) = match action {
                Action::Renew => (Some(cfg.identity.clone()), Duration::ZERO),
                Action::Wait { .. } => (
                    lease.and_then(leader::holder).map(str::to_owned),
                    Duration::ZERO,
                ),
                // released or never taken: free since first seen so; expired: since it expired
                Action::Create | Action::Acquire => {
                    let since = match lease.and_then(leader::holder) {
                        Some(_) => seen + self.cfg.lease_duration,
                        None => seen,
                    };
                    (None, now.saturating_duration_since(since))
                }
            };
            // a bucket this replica still holds (or hands over) is its own whatever the list says
            let holder = match self.held.contains_key(&b) {
                true => Some(cfg.identity.clone()),
                false => holder.filter(|h| *h != cfg.identity),
            };
            views.push(BucketView {
                bucket: b,
                holder,
                free_for,
            });
        }
        self.next_expiry = expiry.0;
        (members, views)
    }

    /// The holders of the live member Leases in `listed` at `now`; notes each one's expiry in
    /// `expiry` and sets [`Loop::fresh`] (this replica included).
    fn members(
        &mut self,
        listed: &HashMap<String, Lease>,
        now: Instant,
        expiry: &mut Expiry,
    ) -> BTreeSet<String> {
        let mut members = BTreeSet::new();
        let mut fresh = BTreeSet::from([self.cfg.identity.clone()]);
        let quiet_after = self.quiet_after();
        for (name, lease) in listed {
            let member = lease
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(ROLE_LABEL))
                .map(String::as_str)
                == Some("member");
            if !member {
                continue;
            }
            let seen = self.observe(name, Some(lease), now);
            if let Some(h) = leader::holder(lease) {
                self.known.insert(h.to_owned(), now);
            }
            let cfg = self.cfg.lease(name.clone());
            let action = leader::decide(Some(lease), seen, now, &cfg);
            expiry.note(action);
            if matches!(action, Action::Renew | Action::Wait { .. })
                && let Some(h) = leader::holder(lease)
            {
                members.insert(h.to_owned());
                if now.saturating_duration_since(seen) < quiet_after {
                    fresh.insert(h.to_owned());
                    // with sharded watches, a round when it would look gone (to foresee)
                    if action != Action::Renew && self.cfg.shards.watch().is_some() {
                        expiry.note(Action::Wait {
                            until: seen + quiet_after,
                        });
                    }
                }
            }
        }
        self.fresh = fresh;
        members
    }

    /// What every bucket Lease says of the set: its bucket count, hash and key.
    fn set_annotations(&self) -> [(String, String); 3] {
        let shards = &self.cfg.shards;
        [
            (BUCKETS_ANNOTATION.to_owned(), shards.buckets().to_string()),
            (
                HASH_ANNOTATION.to_owned(),
                shards.hash().as_str().to_owned(),
            ),
            (KEY_ANNOTATION.to_owned(), shards.key().as_str().to_owned()),
        ]
    }

    /// Whether a live bucket Lease names another bucket count, hash or key (then nothing is
    /// taken: the two would place a parent in different buckets).
    fn bucket_count_mismatch(&mut self, listed: &HashMap<String, Lease>) -> bool {
        let mine = self.set_annotations();
        let other = listed.values().find_map(|l| {
            let a = l.metadata.annotations.as_ref()?;
            // Leases written before the hash and the key were chosen name neither
            a.get(BUCKETS_ANNOTATION)?;
            let theirs = |name: &str| {
                let default = match name {
                    HASH_ANNOTATION => "mixed",
                    _ => "namespace",
                };
                a.get(name).map_or(default, String::as_str)
            };
            let differs = mine.iter().any(|(name, value)| theirs(name) != value);
            (differs && leader::holder(l).is_some()).then(|| {
                format!(
                    "{} says {} buckets, hash {}, key {}",
                    l.metadata.name.as_deref().unwrap_or(""),
                    theirs(BUCKETS_ANNOTATION),
                    theirs(HASH_ANNOTATION),
                    theirs(KEY_ANNOTATION)
                )
            })
        });
        if other != self.mismatch {
            if let Some(o) = &other {
                let [(_, buckets), (_, hash), (_, key)] = &mine;
                tracing::error!(%buckets, %hash, %key, lease = %o, "another replica of this shard set uses another --shard-buckets, --shard-watch (hash) or --shard-key; taking no bucket until they agree");
            }
            self.mismatch = other.clone();
        }
        other.is_some()
    }

    /// When and how `current`, the Lease of a bucket this replica is about to take, was let
    /// go: its record as first seen here (a release, or the last renewal before it expired).
    /// `None` for a Lease never written (no hand-over: nobody held it).
    fn handed_from(&self, name: &str, current: Option<&Lease>) -> Option<(Instant, Previous)> {
        let current = current?;
        let (_, seen) = self.observed.get(name)?;
        let previous = match leader::holder(current) {
            Some(_) => Previous::Expired,
            None => Previous::Released,
        };
        Some((*seen, previous))
    }

    /// Tries to take every bucket of `takes`, all at once (created when it has no Lease yet):
    /// taking over a killed replica's buckets lasts one answer, however many it held.
    async fn acquire_all(&mut self, takes: &[Bucket], listed: &HashMap<String, Lease>) {
        let writes: Vec<_> = takes
            .iter()
            .map(|b| {
                let name = self.cfg.bucket_lease(*b);
                let current = listed.get(&name);
                let handed_from = self.handed_from(&name, current);
                let lease = self.acquisition(*b, &name, current);
                (*b, name, handed_from, current.is_none(), lease)
            })
            .collect();
        let api = &self.api;
        let answers = futures::future::join_all(writes.into_iter().map(
            |(b, name, handed_from, create, lease)| async move {
                let started = Instant::now();
                let written = match create {
                    true => api.create(&PostParams::default(), &lease).await,
                    false => api.replace(&name, &PostParams::default(), &lease).await,
                };
                (b, name, handed_from, started, written)
            },
        ))
        .await;
        let mut raced = false;
        for (b, name, handed_from, started, written) in answers {
            match written {
                Ok(lease) => self.acquired(b, &name, handed_from, started, lease),
                Err(e) if is_conflict(&e) => raced = true,
                Err(e) => tracing::warn!(lease = %name, error = %e, "taking a shard bucket failed"),
            }
        }
        if raced {
            // another replica took it first: the next round, a quarter period away, takes
            // what is left (at a retry period, a killed replica's last buckets waited up to
            // 4.4 s more for the loser of a race)
            let soon = Instant::now() + self.cfg.retry_period / 4;
            self.next_expiry = Some(self.next_expiry.map_or(soon, |e| e.min(soon)));
        }
    }

    /// The Lease that takes `b` from `current` (a new one when it has none yet).
    fn acquisition(&self, b: Bucket, name: &str, current: Option<&Lease>) -> Lease {
        let cfg = self.bucket_cfg(b);
        match current {
            None => self.new_lease(
                name,
                "bucket",
                leader::held_spec(None, Action::Create, &cfg),
            ),
            Some(l) => {
                let mut lease = l.clone();
                lease.spec = Some(leader::held_spec(
                    lease.spec.as_ref(),
                    Action::Acquire,
                    &cfg,
                ));
                let annotations = lease.metadata.annotations.get_or_insert_default();
                annotations.extend(self.set_annotations());
                lease
            }
        }
    }

    /// `b` was taken with `lease` by a write sent at `started`: its fence opens.
    fn acquired(
        &mut self,
        b: Bucket,
        name: &str,
        handed_from: Option<(Instant, Previous)>,
        started: Instant,
        lease: Lease,
    ) {
        if let Some((since, previous)) = handed_from {
            self.cfg.shards.taken_over(b, since, previous);
        }
        self.observe(name, Some(&lease), Instant::now());
        self.held.insert(
            b,
            Held {
                lease: Some(lease),
                renewed_at: started,
                handing_over: None,
            },
        );
        self.cfg
            .shards
            .renewed(b, started + self.cfg.renew_deadline, true);
        self.count_handoff(b, HandoffReason::Rebalance, true);
        tracing::info!(bucket = %b, identity = %self.cfg.identity, "acquired a shard bucket");
    }

    /// Shutdown: the member Lease deleted (the others raise their share), then every bucket
    /// handed over, renewing the ones still draining, bounded by the drain timeout plus a
    /// renew deadline.
    async fn shut_down(&mut self) {
        let name = self.cfg.member_lease();
        if let Err(e) = self.api.delete(&name, &DeleteParams::default()).await {
            tracing::debug!(lease = %name, error = %e, "deleting the member Lease failed; it expires");
        }
        let buckets: Vec<Bucket> = self.held.keys().copied().collect();
        for b in buckets {
            self.hand_over(b, HandoffReason::Shutdown);
        }
        let bound = Instant::now() + self.cfg.drain_timeout + self.cfg.renew_deadline;
        while !self.held.is_empty() && Instant::now() < bound {
            self.round(true).await;
            if !self.held.is_empty() {
                tokio::time::sleep(Duration::from_millis(50).min(self.cfg.retry_period)).await;
            }
        }
        for b in Bucket::all(self.cfg.shards.buckets()) {
            self.cfg.shards.give_up(b);
        }
        self.legacy.release(&self.api).await;
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;

    fn lease_held_by(holder: Option<&str>) -> Lease {
        Lease {
            spec: Some(LeaseSpec {
                holder_identity: holder.map(str::to_owned),
                ..LeaseSpec::default()
            }),
            ..Lease::default()
        }
    }

    #[test]
    fn a_held_bucket_is_renewed_only_while_its_lease_names_this_replica() {
        assert!(renewal(Some(lease_held_by(Some("me"))), "me").is_ok());
        let taken = renewal(Some(lease_held_by(Some("other"))), "me").unwrap_err();
        assert!(taken.contains("held by other"), "{taken}");
        let released = renewal(Some(lease_held_by(None)), "me").unwrap_err();
        assert!(released.contains("held by nobody"), "{released}");
        let deleted = renewal(None, "me").unwrap_err();
        assert!(deleted.contains("deleted"), "{deleted}");
    }

    #[test]
    fn a_round_starts_when_a_lease_held_by_another_expires_if_that_is_sooner() {
        let now = Instant::now();
        let period = Duration::from_secs(3);
        let mut expiry = Expiry::default();
        expiry.note(Action::Renew);
        expiry.note(Action::Acquire);
        assert_eq!(until_next_round(period, expiry.0, now), period);
        for secs in [5, 1, 2] {
            expiry.note(Action::Wait {
                until: now + Duration::from_secs(secs),
            });
        }
        assert_eq!(
            until_next_round(period, expiry.0, now),
            Duration::from_secs(1)
        );
        // later than the period: the period; passed meanwhile: at once
        let later = Some(now + Duration::from_secs(9));
        assert_eq!(until_next_round(period, later, now), period);
        let passed = Some(now);
        let after = now + Duration::from_millis(1);
        assert_eq!(until_next_round(period, passed, after), Duration::ZERO);
    }

    #[test]
    fn a_sighted_lease_starts_a_round_at_its_expiry_or_at_once_when_free() {
        let now = Instant::now();
        let until = now + Duration::from_secs(15);
        assert_eq!(next_round_for(Action::Wait { until }, now), Some(until));
        assert_eq!(next_round_for(Action::Acquire, now), Some(now));
        assert_eq!(next_round_for(Action::Create, now), Some(now));
        assert_eq!(next_round_for(Action::Renew, now), None);
    }

    /// A record the watch sighted expires a Lease duration after that sighting: the round's
    /// list, returning the same record later, does not restart its clock; a renewal does.
    #[test]
    fn a_lease_sighted_by_the_watch_expires_from_that_sighting() -> anyhow::Result<()> {
        let cfg = ShardConfig::new("default".into(), "me".into(), Shards::new(2));
        let (_runtime, mut state) =
            Loop::on_this_thread(kube::Config::new("http://127.0.0.1:9".parse()?), cfg)?;
        let duration = state.cfg.lease_duration;
        let mut lease = lease_held_by(Some("other"));
        lease.metadata.name = Some(state.cfg.bucket_lease(Bucket::Hash(0)));
        let sighted = Instant::now();
        let at = state.sighted(watcher::Event::Apply(lease.clone()), sighted);
        assert_eq!(at, Some(sighted + duration));
        // the round lists the same record 3 s later: still expires from the sighting
        let listed: HashMap<String, Lease> =
            [(lease.metadata.name.clone().unwrap(), lease.clone())].into();
        let (_, views) = state.views(&listed, sighted + Duration::from_secs(3));
        assert_eq!(views[0].holder.as_deref(), Some("other"));
        assert_eq!(state.next_expiry, Some(sighted + duration));
        let (_, views) = state.views(&listed, sighted + duration);
        assert_eq!(
            views[0].holder, None,
            "expired a duration after the sighting"
        );
        // a renewal sighted later restarts the clock; released, a round starts at once
        lease.spec.as_mut().unwrap().renew_time = Some(MicroTime(jiff::Timestamp::now()));
        let later = sighted + Duration::from_secs(4);
        let at = state.sighted(watcher::Event::Apply(lease.clone()), later);
        assert_eq!(at, Some(later + duration));
        lease.spec.as_mut().unwrap().holder_identity = None;
        let at = state.sighted(watcher::Event::Apply(lease.clone()), later);
        assert_eq!(at, Some(later));
        assert_eq!(state.sighted(watcher::Event::InitDone, later), None);
        Ok(())
    }

    /// A member whose Lease was last seen changing 3.2 retry periods ago looks gone (a renewal
    /// missed by a whole period: 6.4 s at the defaults, not the 8.8 s of two renewals), never
    /// later than the renew deadline; until then it is fresh.
    #[test]
    fn a_member_looks_gone_after_a_renewal_missed_by_a_whole_retry_period() -> anyhow::Result<()> {
        let cfg = ShardConfig::new("default".into(), "me".into(), Shards::new(2));
        let (_runtime, mut state) =
            Loop::on_this_thread(kube::Config::new("http://127.0.0.1:9".parse()?), cfg)?;
        assert_eq!(state.quiet_after(), Duration::from_millis(6400));
        let mut lease = lease_held_by(Some("other"));
        let name = "kmeta-shard-member-other".to_owned();
        lease.metadata.name = Some(name.clone());
        lease.metadata.labels = Some([(ROLE_LABEL.to_owned(), "member".to_owned())].into());
        let sighted = Instant::now();
        state.sighted(watcher::Event::Apply(lease.clone()), sighted);
        let listed: HashMap<String, Lease> = [(name, lease)].into();
        let fresh_at = |state: &mut Loop, after: Duration| {
            let mut expiry = Expiry::default();
            let members = state.members(&listed, sighted + after, &mut expiry);
            assert!(members.contains("other"), "a member while its Lease lasts");
            state.fresh.contains("other")
        };
        assert!(fresh_at(&mut state, Duration::from_millis(6300)));
        assert!(!fresh_at(&mut state, Duration::from_millis(6400)));
        // a short renew deadline bounds it
        state.cfg.renew_deadline = Duration::from_secs(5);
        assert_eq!(state.quiet_after(), Duration::from_secs(5));
        assert!(!fresh_at(&mut state, Duration::from_millis(5000)));
        Ok(())
    }

    /// The work's runtime blocked for three renew deadlines (its only thread busy, as a
    /// saturated runtime's timers are late): the Lease loop, on its own thread, keeps every
    /// bucket, and at shutdown releases them all.
    #[cfg(feature = "embedded-apiserver")]
    #[test]
    fn a_blocked_work_runtime_loses_no_bucket() -> anyhow::Result<()> {
        let (server_runtime, server) = crate::coord::server_apart()?;
        let config = kube::Config::new(server.url().parse()?);
        let shards = Shards::new(2);
        let metrics = Arc::new(Metrics::default());
        let renew_deadline = Duration::from_millis(1000);
        let cfg = ShardConfig {
            lease_duration: Duration::from_millis(1500),
            renew_deadline,
            retry_period: Duration::from_millis(100),
            drain_timeout: Duration::from_millis(500),
            metrics: Some(metrics.clone()),
            ..ShardConfig::new("default".into(), "replica-a".into(), shards.clone())
        };
        let every = Bucket::all(2).count();
        let shutdown = CancellationToken::new();
        let stop = shutdown.clone();
        let work_runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let held_after_block = work_runtime.block_on(run_sharded(config, cfg, shutdown, |token| {
            let shards = shards.clone();
            async move {
                let deadline = Instant::now() + Duration::from_secs(20);
                while shards.held().len() < every && Instant::now() < deadline {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                assert_eq!(shards.held().len(), every, "took every bucket within 20 s");
                // the runtime's only thread busy: no timer of this runtime fires
                std::thread::sleep(renew_deadline * 3);
                assert_eq!(shards.held().len(), every, "kept every bucket");
                // and renewed it in time: the cluster bucket's fence never closed
                let write = shards.permits(None, "/api/v1/nodes", Instant::now());
                assert!(write.is_ok(), "the fence closed: {write:?}");
                stop.cancel();
                token.cancelled().await;
            }
        }));
        held_after_block?;
        let text = metrics.encode();
        assert!(
            !text.contains("reason=\"lost\""),
            "a bucket was lost:\n{text}"
        );
        assert!(
            shards.held().is_empty(),
            "every bucket given up at shutdown"
        );
        let url = server.url().parse()?;
        let released = server_runtime.block_on(async {
            let client = kube::Client::try_from(kube::Config::new(url))?;
            let leases: Api<Lease> = Api::namespaced(client, "default");
            let selector = format!("{ROLE_LABEL}=bucket");
            leases.list(&ListParams::default().labels(&selector)).await
        })?;
        assert_eq!(released.items.len(), every);
        for l in released.items {
            assert_eq!(leader::holder(&l), None, "{:?} released", l.metadata.name);
        }
        server_runtime.block_on(server.shutdown());
        Ok(())
    }

    /// A Lease named `name` held by `killed` for 1 s, renewed now; with `role`, of the set.
    #[cfg(feature = "embedded-apiserver")]
    fn held_by_killed(name: &str, role: Option<&str>) -> Lease {
        let mut lease = Lease::default();
        lease.metadata.name = Some(name.to_owned());
        if let Some(role) = role {
            lease.metadata.labels = Some(
                [
                    (SET_LABEL.to_owned(), "kmeta-shard".to_owned()),
                    (ROLE_LABEL.to_owned(), role.to_owned()),
                ]
                .into(),
            );
        }
        lease.spec = Some(LeaseSpec {
            holder_identity: Some("killed".into()),
            lease_duration_seconds: Some(1),
            renew_time: Some(MicroTime(jiff::Timestamp::now())),
            ..LeaseSpec::default()
        });
        lease
    }

    /// A killed member held the leader Lease: its member Lease expires (here, on purpose) while
    /// its leader Lease is still renewed for a while. The survivor must wait the leader Lease
    /// out, not take the member for a leader-mode process and hand every bucket over.
    #[cfg(feature = "embedded-apiserver")]
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_killed_member_holding_the_leader_lease_blocks_nothing() -> anyhow::Result<()> {
        let server = kmeta_apiserver::TestServer::start().await?;
        let url: http::Uri = server.url().parse()?;
        let leases: Api<Lease> = Api::namespaced(
            kube::Client::try_from(kube::Config::new(url.clone()))?,
            "default",
        );
        let shards = Shards::new(2);
        let metrics = Arc::new(Metrics::default());
        let cfg = ShardConfig {
            lease_duration: Duration::from_secs(2),
            renew_deadline: Duration::from_millis(1200),
            retry_period: Duration::from_millis(100),
            drain_timeout: Duration::from_millis(500),
            metrics: Some(metrics.clone()),
            ..ShardConfig::new("default".into(), "survivor".into(), shards.clone())
        };
        let pp = PostParams::default();
        leases
            .create(
                &pp,
                &held_by_killed("kmeta-shard-member-killed", Some("member")),
            )
            .await?;
        let mut leader_lease = leases
            .create(&pp, &held_by_killed("metacontroller", None))
            .await?;
        let shutdown = CancellationToken::new();
        let replica = tokio::spawn(run_sharded(
            kube::Config::new(url),
            cfg,
            shutdown.clone(),
            |token| async move { token.cancelled().await },
        ));
        // the leader Lease renewed for 2.5 s more; its member Lease expires after 1 s
        let renewed_until = Instant::now() + Duration::from_millis(2500);
        while Instant::now() < renewed_until {
            tokio::time::sleep(Duration::from_millis(200)).await;
            if let Some(spec) = leader_lease.spec.as_mut() {
                spec.renew_time = Some(MicroTime(jiff::Timestamp::now()));
            }
            leader_lease = leases.replace("metacontroller", &pp, &leader_lease).await?;
        }
        let every = Bucket::all(2).count();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let taken = leases.get("metacontroller").await?;
            if leader::holder(&taken) == Some("survivor") && shards.held().len() == every {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "took neither the leader Lease nor every bucket"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let text = metrics.encode();
        assert!(
            !text.contains("reason=\"blocked\""),
            "buckets were handed over as if a leader-mode process held the leader Lease:\n{text}"
        );
        shutdown.cancel();
        replica.await??;
        server.shutdown().await;
        Ok(())
    }
}
