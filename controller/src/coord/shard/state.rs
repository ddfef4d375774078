//! What a sharded replica holds, shared by the bucket Lease loop, the workers and the API
//! client: per bucket a write fence, an epoch, whether work is handed out, and the syncs in
//! flight; the write scope a sync runs in; and the client layers that refuse a write whose
//! bucket this replica does not hold.
//!
//! A sync runs in a [`WriteScope`] (its bucket and the bucket's epoch when it started:
//! [`Shards::begin`]), set as a task-local by the worker. The fence layer
//! ([`crate::coord::fence::FenceLayer`] with this module's [`WriteGate`]), the innermost of the
//! work's client, reads it when its future is first polled, in the task awaiting the request
//! (kube's buffers call the layers in a task of their own, where the task-local is not set, but
//! hand the futures back to the caller), just before the request leaves: the bucket's fence is open and its epoch unchanged, so a
//! sync that started before its bucket was lost (and perhaps regained) sends nothing. A write
//! made outside any sync (an Event retried in the background, a controller's housekeeping) is
//! checked by the namespace in its path instead: that namespace's bucket (the
//! cluster bucket for a cluster-scoped path) must be held. Events are informational and never
//! contend, so they pass whenever this replica holds any bucket.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use http::Request;
use tokio::time::Instant;

use super::{Bucket, ShardHash, ShardKey, bucket_by, bucket_of_parent};
use crate::coord::fence::{Fence, WriteGate};
use crate::ops::metrics::Metrics;
#[cfg(test)]
use crate::runtime::shard_watch::Listed;
use crate::runtime::shard_watch::{HashRange, WatchShards};

/// The error of a write refused by the shard buckets' fences.
#[derive(Debug, thiserror::Error)]
pub enum ShardFenced {
    /// This replica does not hold the write's bucket.
    #[error(
        "write refused: this replica does not hold shard bucket {bucket} (lost, handed over or not yet acquired)"
    )]
    NotHeld {
        /// The bucket (`cluster`, or its number).
        bucket: String,
    },
    /// Under `--shard-key=uid`, a write to a namespaced path made outside any sync: it names
    /// no parent, so no bucket.
    #[error(
        "write refused: under --shard-key=uid a write to {path} made outside any sync names no parent, so no shard bucket"
    )]
    NoParent {
        /// The request's path.
        path: String,
    },
}

/// The bucket a sync writes for and that bucket's epoch when the sync started.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct WriteScope {
    /// The bucket.
    pub bucket: Bucket,
    /// [`Shards::epoch`] of the bucket when the sync started.
    pub epoch: u64,
}

tokio::task_local! {
    static WRITE_SCOPE: WriteScope;
}

/// Runs `fut` with `scope` as the write scope of its requests.
pub(crate) async fn in_scope<F: Future>(scope: WriteScope, fut: F) -> F::Output {
    WRITE_SCOPE.scope(scope, fut).await
}

/// The write scope of the running task, if any.
pub(crate) fn current_scope() -> Option<WriteScope> {
    WRITE_SCOPE.try_with(|s| *s).ok()
}

/// One bucket's state on this replica.
#[derive(Debug, Default)]
struct Slot {
    fence: Fence,
    /// Bumped on every acquisition and every loss or hand-over.
    epoch: AtomicU64,
    /// Work for this bucket is handed out (held and not being handed over).
    active: AtomicBool,
    /// Syncs of this bucket running now.
    in_flight: AtomicUsize,
    /// Held, its work waiting for the sharded watches to list it (`--shard-watch=server`).
    listing: AtomicBool,
    /// A task waits for its watches' lists to start its work.
    awaited: AtomicBool,
    /// Not held, but this replica would take it once its holder's Lease expires (the holder
    /// looks gone): its range is listed meanwhile ([`Shards::foresee`]).
    foreseen: AtomicBool,
    /// Taken over from another replica: when its previous holder let it go, as this replica
    /// saw it, until its work starts here ([`Shards::taken_over`]).
    handoff: Mutex<Option<(Instant, Previous)>>,
}

/// How the previous holder of a bucket this replica takes let it go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Previous {
    /// Its Lease was released (a rebalance, a shutdown, a leader-mode process).
    Released,
    /// Its Lease expired (the holder died, hung or lost the API server).
    Expired,
}

impl Previous {
    /// The `previous` label of `kmeta_shard_handoff_seconds`.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Previous::Released => "released",
            Previous::Expired => "expired",
        }
    }
}

/// The buckets this replica holds. Cloning the `Arc` shares it.
#[derive(Debug)]
pub struct Shards {
    buckets: u32,
    hash: ShardHash,
    key: ShardKey,
    /// Under `--shard-watch=server`, the selection of the sharded watches.
    watch: Option<Arc<WatchShards>>,
    slots: Vec<Slot>,
    /// Bumped whenever this replica gains a bucket: controllers enqueue that bucket's parents.
    gained: tokio::sync::watch::Sender<u64>,
    /// Live replicas as last counted (for metrics and `/readyz`).
    members: AtomicUsize,
    /// Why this replica takes no bucket (a leader-mode process holds the leader Lease).
    blocked: Mutex<Option<String>>,
    /// Where hand-over times go (`kmeta_shard_handoff_seconds`), once set.
    metrics: OnceLock<Arc<Metrics>>,
}

/// Ends a sync's claim on its bucket when dropped (see [`Shards::begin`]).
#[derive(Debug)]
pub(crate) struct InFlight<'a> {
    shards: &'a Shards,
    scope: WriteScope,
}

impl InFlight<'_> {
    /// The scope the sync runs in.
    pub(crate) fn scope(&self) -> WriteScope {
        self.scope
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        let slot = self.shards.slot(self.scope.bucket);
        slot.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Shards {
    /// A replica holding none of `buckets` hash buckets (a power of two) nor the cluster bucket.
    pub fn new(buckets: u32) -> Arc<Shards> {
        Shards::with_hash(buckets, ShardHash::Mixed, None)
    }

    /// A replica holding no bucket, placing namespaces by `hash`; with `watch`, its sharded
    /// watches list only the buckets it holds, and a gained bucket's work starts once they have.
    pub(crate) fn with_hash(
        buckets: u32,
        hash: ShardHash,
        watch: Option<Arc<WatchShards>>,
    ) -> Arc<Shards> {
        Shards::keyed(buckets, hash, ShardKey::Namespace, watch)
    }

    /// A replica of `kmeta run --sharding` holding no bucket yet, parents placed by `key`
    /// (`--shard-key`). With `server_side_watch` (`--shard-watch=server`), namespaces are
    /// placed by plain FNV-1a, the hash the API server's ranges use, and the replica's watches
    /// list only the buckets it holds, merging a watch's streams once the buckets held have
    /// not changed for five of the Lease loop's `retry_period`s; else by the mixed hash, and
    /// every watch lists everything.
    pub fn replica(
        buckets: u32,
        key: ShardKey,
        server_side_watch: bool,
        retry_period: std::time::Duration,
    ) -> Arc<Shards> {
        if server_side_watch {
            let settle = retry_period * crate::runtime::shard_watch::SETTLE_RETRY_PERIODS;
            let watch = Some(Arc::new(WatchShards::settling_after(settle)));
            Shards::keyed(buckets, ShardHash::Fnv1a, key, watch)
        } else {
            Shards::keyed(buckets, ShardHash::Mixed, key, None)
        }
    }

    /// As [`Shards::with_hash`], parents placed by `key` (`--shard-key`).
    pub(crate) fn keyed(
        buckets: u32,
        hash: ShardHash,
        key: ShardKey,
        watch: Option<Arc<WatchShards>>,
    ) -> Arc<Shards> {
        let slots = (0..=buckets).map(|_| Slot::default()).collect();
        let (gained, _) = tokio::sync::watch::channel(0);
        Arc::new(Shards {
            buckets,
            hash,
            key,
            watch,
            slots,
            gained,
            members: AtomicUsize::new(0),
            blocked: Mutex::new(None),
            metrics: OnceLock::new(),
        })
    }

    /// Reports hand-over times to `metrics` (the first call counts).
    pub(crate) fn report_to(&self, metrics: Arc<Metrics>) {
        let _ = self.metrics.set(metrics);
    }

    /// The number of hash buckets (the cluster bucket comes on top).
    pub fn buckets(&self) -> u32 {
        self.buckets
    }

    fn slot(&self, b: Bucket) -> &Slot {
        &self.slots[b.index(self.buckets).min(self.slots.len() - 1)]
    }

    /// The namespace hash.
    pub fn hash(&self) -> ShardHash {
        self.hash
    }

    /// The selection of the sharded watches, under `--shard-watch=server`.
    pub(crate) fn watch(&self) -> Option<&Arc<WatchShards>> {
        self.watch.as_ref()
    }

    /// What places a parent in a bucket.
    pub fn key(&self) -> ShardKey {
        self.key
    }

    /// The bucket of the namespace `namespace` (of a parent there, under `--shard-key=namespace`;
    /// of a write to a path there made outside any sync).
    pub fn bucket_of(&self, namespace: &str) -> Bucket {
        bucket_by(namespace, self.buckets, self.hash)
    }

    /// The bucket of a parent in `namespace` with `uid` ([`bucket_of_parent`]).
    pub fn bucket_of_parent(&self, namespace: &str, uid: Option<&str>) -> Option<Bucket> {
        bucket_of_parent(self.key, namespace, uid, self.buckets, self.hash)
    }

    /// Whether this replica works on the parent in `namespace` with `uid` now.
    pub(crate) fn works_on(&self, namespace: &str, uid: Option<&str>) -> bool {
        self.bucket_of_parent(namespace, uid)
            .is_some_and(|b| self.active(b))
    }

    /// Whether work of `b` is handed out on this replica.
    pub(crate) fn active(&self, b: Bucket) -> bool {
        self.slot(b).active.load(Ordering::Acquire)
    }

    /// The buckets whose work this replica does, in order.
    pub fn held(&self) -> Vec<Bucket> {
        Bucket::all(self.buckets)
            .filter(|b| self.active(*b))
            .collect()
    }

    /// Starts a sync (or a write) for the parent in `namespace` with `uid`: `None` when its
    /// bucket is not this replica's work (the key is dropped; under `--shard-key=uid`, also a
    /// parent whose uid is not known), else the claim the sync holds while it runs.
    pub(crate) fn begin(&self, namespace: &str, uid: Option<&str>) -> Option<InFlight<'_>> {
        let bucket = self.bucket_of_parent(namespace, uid)?;
        let slot = self.slot(bucket);
        slot.in_flight.fetch_add(1, Ordering::AcqRel);
        // checked after counting, so a hand-over that deactivated the bucket first either sees
        // this sync in flight or this sync sees the bucket inactive
        if !slot.active.load(Ordering::Acquire) {
            slot.in_flight.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        let epoch = slot.epoch.load(Ordering::Acquire);
        Some(InFlight {
            shards: self,
            scope: WriteScope { bucket, epoch },
        })
    }

    /// Syncs of `b` running now.
    pub(crate) fn in_flight(&self, b: Bucket) -> usize {
        self.slot(b).in_flight.load(Ordering::Acquire)
    }

    /// `b` was acquired (or renewed) by a write that started at `started`: writes pass until
    /// `started + renew deadline`. On a gain (not a renewal) the epoch moves and work starts.
    /// With sharded watches, a gained hash bucket's work waits until they have listed it
    /// ([`Shards::publish_watches`]).
    pub(crate) fn renewed(&self, b: Bucket, until: Instant, gained: bool) {
        let slot = self.slot(b);
        slot.fence.open_until(until);
        if gained {
            slot.epoch.fetch_add(1, Ordering::AcqRel);
            if self.watch.is_some() && b != Bucket::Cluster {
                slot.awaited.store(false, Ordering::Release);
                slot.listing.store(true, Ordering::Release);
            } else {
                self.start_work(b);
            }
        }
    }

    /// `b`, about to be acquired, was let go by its previous holder at `since` (as this
    /// replica saw it): the time until its work starts here is a hand-over's.
    pub(crate) fn taken_over(&self, b: Bucket, since: Instant, previous: Previous) {
        *lock(&self.slot(b).handoff) = Some((since, previous));
    }

    /// `b`'s work is handed out from now on; a hand-over ends here.
    fn start_work(&self, b: Bucket) {
        let slot = self.slot(b);
        slot.active.store(true, Ordering::Release);
        self.gained.send_modify(|n| *n += 1);
        if let Some((since, previous)) = lock(&slot.handoff).take() {
            let seconds = since.elapsed().as_secs_f64();
            tracing::info!(bucket = %b, previous = previous.as_str(), seconds, "took a shard bucket over");
            if let Some(m) = self.metrics.get() {
                m.shard_handoff_seconds(previous.as_str(), seconds);
            }
        }
    }

    /// Stops handing out `b`'s work (the first step of a hand-over); its fence stays open.
    pub(crate) fn deactivate(&self, b: Bucket) {
        let slot = self.slot(b);
        slot.active.store(false, Ordering::Release);
        slot.listing.store(false, Ordering::Release);
    }

    /// `b` is no longer held: no work, no write, and syncs that started before see a new epoch.
    pub(crate) fn give_up(&self, b: Bucket) {
        let slot = self.slot(b);
        slot.active.store(false, Ordering::Release);
        slot.listing.store(false, Ordering::Release);
        slot.fence.close();
        slot.epoch.fetch_add(1, Ordering::AcqRel);
        lock(&slot.handoff).take();
    }

    /// The held buckets whose work waits for the sharded watches to list them.
    pub fn listing(&self) -> Vec<Bucket> {
        Bucket::all(self.buckets)
            .filter(|b| self.slot(*b).listing.load(Ordering::Acquire))
            .collect()
    }

    /// The buckets this replica would take once their holders' Leases expire (their holders
    /// look gone, [`super::foresee`]); the others are no longer foreseen. Returns whether that
    /// changed.
    pub(crate) fn foresee(&self, buckets: &[Bucket]) -> bool {
        let mut changed = false;
        for b in Bucket::all(self.buckets) {
            let now = buckets.contains(&b);
            changed |= self.slot(b).foreseen.swap(now, Ordering::AcqRel) != now;
        }
        changed
    }

    /// The buckets foreseen ([`Shards::foresee`]).
    pub(crate) fn foreseen(&self) -> Vec<Bucket> {
        Bucket::all(self.buckets)
            .filter(|b| self.slot(*b).foreseen.load(Ordering::Acquire))
            .collect()
    }

    /// Under `--shard-watch=server`, after a round of the Lease loop: selects the ranges of the
    /// held buckets, and of the foreseen ones, for the sharded watches (each watch lists a
    /// range gained and drops a range lost, the others untouched), and starts each newly
    /// gained bucket's work once they have listed it (at once for a bucket foreseen and
    /// listed before its Lease was taken).
    pub(crate) fn publish_watches(self: &Arc<Self>) {
        let Some(watch) = &self.watch else { return };
        let wanted: Vec<Bucket> = Bucket::all(self.buckets)
            .filter(|b| *b != Bucket::Cluster)
            .filter(|b| {
                let slot = self.slot(*b);
                slot.active.load(Ordering::Acquire)
                    || slot.listing.load(Ordering::Acquire)
                    || slot.foreseen.load(Ordering::Acquire)
            })
            .collect();
        watch.select(self.ranges(&wanted));
        self.activate_when_listed(watch);
    }

    fn ranges(&self, buckets: &[Bucket]) -> Vec<HashRange> {
        buckets
            .iter()
            .filter_map(|b| b.range(self.buckets))
            .map(|(start, end)| HashRange {
                start,
                end: end.map_or(1u128 << 64, u128::from),
            })
            .collect()
    }

    /// For every bucket whose work waits for its lists (and no task awaits them yet): starts its
    /// work once every sharded watch has listed its range, if it is still held in the same
    /// epoch. Each bucket on its own, so one gained later does not hold up the others.
    fn activate_when_listed(self: &Arc<Self>, watch: &Arc<WatchShards>) {
        for b in Bucket::all(self.buckets) {
            let slot = self.slot(b);
            if !slot.listing.load(Ordering::Acquire) || slot.awaited.swap(true, Ordering::AcqRel) {
                continue;
            }
            let Some(range) = self.ranges(&[b]).pop() else {
                continue;
            };
            let epoch = slot.epoch.load(Ordering::Acquire);
            let (shards, watch) = (self.clone(), watch.clone());
            tokio::spawn(async move {
                if watch.wait_listed(range).await {
                    shards.activate(b, epoch);
                }
            });
        }
    }

    /// `b`'s watches have listed: its work starts, if it is still held in `epoch`.
    fn activate(&self, b: Bucket, epoch: u64) {
        let slot = self.slot(b);
        if slot.epoch.load(Ordering::Acquire) != epoch
            || !slot.listing.swap(false, Ordering::AcqRel)
        {
            return;
        }
        tracing::info!(bucket = %b, "shard bucket's watches listed; its work starts");
        self.start_work(b);
    }

    /// Records how many replicas are alive.
    pub(crate) fn set_members(&self, n: usize) {
        self.members.store(n, Ordering::Release);
    }

    /// Why this replica takes no bucket now, if it takes none on purpose.
    pub fn blocked(&self) -> Option<String> {
        lock(&self.blocked).clone()
    }

    pub(crate) fn set_blocked(&self, why: Option<String>) {
        *lock(&self.blocked) = why;
    }

    /// Live replicas as last counted (0 before the first round).
    pub fn members(&self) -> usize {
        self.members.load(Ordering::Acquire)
    }

    /// Each bucket's epoch while its work is handed out (`u64::MAX` while not): what
    /// [`Shards::gained_since`] compares with.
    pub(crate) fn work_epochs(&self) -> Vec<u64> {
        self.slots
            .iter()
            .map(|s| match s.active.load(Ordering::Acquire) {
                true => s.epoch.load(Ordering::Acquire),
                false => u64::MAX,
            })
            .collect()
    }

    /// The buckets whose work started since `seen` ([`Shards::work_epochs`]) was taken, which is
    /// brought up to date.
    pub(crate) fn gained_since(&self, seen: &mut Vec<u64>) -> Vec<Bucket> {
        let now = self.work_epochs();
        let gained = Bucket::all(self.buckets)
            .filter(|b| {
                let i = b.index(self.buckets);
                now[i] != u64::MAX && seen.get(i) != Some(&now[i])
            })
            .collect();
        *seen = now;
        gained
    }

    /// A receiver that changes whenever this replica gains a bucket.
    pub(crate) fn subscribe_gains(&self) -> tokio::sync::watch::Receiver<u64> {
        self.gained.subscribe()
    }

    /// Whether a write in `scope` (or, without one, to `path`) may be sent at `now`.
    pub(crate) fn permits(
        &self,
        scope: Option<WriteScope>,
        path: &str,
        now: Instant,
    ) -> Result<(), ShardFenced> {
        let bucket = match scope {
            Some(s) => {
                let slot = self.slot(s.bucket);
                if slot.fence.permits(now) && slot.epoch.load(Ordering::Acquire) == s.epoch {
                    return Ok(());
                }
                s.bucket
            }
            None => {
                let (namespace, resource) = path_target(path);
                if resource == "events" && self.slots.iter().any(|s| s.fence.permits(now)) {
                    return Ok(());
                }
                // by uid, a namespace's objects belong to every bucket: a write there must
                // name its parent (run in its scope)
                if self.key == ShardKey::Uid && !namespace.is_empty() {
                    return Err(ShardFenced::NoParent {
                        path: path.to_owned(),
                    });
                }
                let b = self.bucket_of(namespace);
                if self.slot(b).fence.permits(now) {
                    return Ok(());
                }
                b
            }
        };
        Err(ShardFenced::NotHeld {
            bucket: bucket.to_string(),
        })
    }
}

/// The data behind `m`, whether or not a holder panicked.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The namespace (`""` when none) and resource a request path addresses.
fn path_target(path: &str) -> (&str, &str) {
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    let after_version = match parts.first() {
        Some(&"api") => 2,
        Some(&"apis") => 3,
        _ => return ("", ""),
    };
    let rest = parts.get(after_version..).unwrap_or_default();
    match rest {
        ["namespaces", ns, resource, ..] => (ns, resource),
        [resource, ..] => ("", resource),
        [] => ("", ""),
    }
}

/// The innermost check of a sharded replica's work client ([`crate::coord::fence::FenceLayer`]
/// with this gate): refuses a write whose bucket this replica does not hold
/// ([`Shards::permits`]), by the write scope of the task awaiting the request, else its path.
/// [`WriteGate::admit`] runs when the fence's future is first polled, which is in the task that
/// awaits the request (kube's buffers call the layers in a task of their own, but hand their
/// futures back to be polled by the caller), so the task-local scope is there.
impl WriteGate for Arc<Shards> {
    type Ticket = String;
    const FENCE: &'static str = "shard";

    fn ticket<B>(&self, req: &Request<B>) -> Self::Ticket {
        req.uri().path().to_owned()
    }

    fn admit(&self, path: Self::Ticket, now: Instant) -> Result<(), tower::BoxError> {
        self.permits(current_scope(), &path, now)
            .map_err(Into::into)
    }
}

/// The `/readyz` line of a sharded replica: always passing (a replica holding no bucket is a
/// warm spare), naming the buckets it holds.
impl crate::ops::health::ReadyLine for Shards {
    fn ready_line(&self) -> String {
        let held: Vec<String> = self.held().iter().map(ToString::to_string).collect();
        let held = match held.as_slice() {
            [] => "none".to_owned(),
            h => h.join(","),
        };
        let blocked = self
            .blocked()
            .map(|why| format!("; taking none: {why}"))
            .unwrap_or_default();
        let listing: Vec<String> = self.listing().iter().map(ToString::to_string).collect();
        let listing = match listing.as_slice() {
            [] => String::new(),
            l => format!("; listing {}", l.join(",")),
        };
        let watches = match self.watch().map(|w| w.whole()) {
            None => "",
            Some(whole) if whole.is_empty() => "; watches sharded by the server",
            Some(whole) => &format!(
                "; watches sharded by the server but {} (watched whole)",
                whole.join(", ")
            ),
        };
        format!(
            "[+]sharding buckets {held} (of {} and cluster; {} members{listing}{watches}{blocked})",
            self.buckets(),
            self.members()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coord::scope::WorkScope;
    use std::time::Duration;

    #[test]
    fn paths_name_their_namespace_and_resource() {
        assert_eq!(
            path_target("/api/v1/namespaces/a/configmaps/x"),
            ("a", "configmaps")
        );
        assert_eq!(path_target("/api/v1/namespaces/a/events"), ("a", "events"));
        assert_eq!(
            path_target("/apis/apps/v1/namespaces/b/deployments"),
            ("b", "deployments")
        );
        assert_eq!(
            path_target("/apis/example.com/v1/things/x/status"),
            ("", "things")
        );
        assert_eq!(path_target("/api/v1/namespaces/a"), ("", "namespaces"));
        assert_eq!(path_target("/version"), ("", ""));
    }

    #[test]
    fn a_scoped_write_passes_only_while_its_bucket_is_held_in_the_same_epoch() {
        let shards = Shards::new(8);
        let now = Instant::now();
        let ns = "team-a";
        let b = shards.bucket_of(ns);
        assert!(shards.begin(ns, None).is_none(), "not held: no work");
        shards.renewed(b, now + Duration::from_secs(10), true);
        let claim = shards.begin(ns, None).expect("held");
        let scope = claim.scope();
        assert_eq!(shards.in_flight(b), 1);
        assert!(
            shards
                .permits(Some(scope), "/api/v1/namespaces/x/configmaps", now)
                .is_ok()
        );
        // the fence closes by the clock, whatever the loop did
        assert!(
            shards
                .permits(Some(scope), "", now + Duration::from_secs(10))
                .is_err()
        );
        // lost and gained again: a sync of the earlier epoch stays refused
        shards.give_up(b);
        shards.renewed(b, now + Duration::from_secs(10), true);
        assert!(shards.permits(Some(scope), "", now).is_err());
        drop(claim);
        assert_eq!(shards.in_flight(b), 0);
        let again = shards.begin(ns, None).expect("held again");
        assert!(shards.permits(Some(again.scope()), "", now).is_ok());
    }

    #[test]
    fn an_unscoped_write_needs_the_bucket_of_its_namespace() {
        let shards = Shards::new(8);
        let now = Instant::now();
        let held = shards.bucket_of("team-a");
        shards.renewed(held, now + Duration::from_secs(10), true);
        let other = (0..100)
            .map(|i| format!("ns-{i}"))
            .find(|ns| shards.bucket_of(ns) != held)
            .expect("some namespace elsewhere");
        assert!(
            shards
                .permits(None, "/api/v1/namespaces/team-a/configmaps", now)
                .is_ok()
        );
        let path = format!("/api/v1/namespaces/{other}/configmaps");
        assert!(shards.permits(None, &path, now).is_err());
        // a cluster-scoped write needs the cluster bucket
        assert!(shards.permits(None, "/apis/x.io/v1/things/t", now).is_err());
        // Events pass while any bucket is held
        let events = format!("/apis/events.k8s.io/v1/namespaces/{other}/events");
        assert!(shards.permits(None, &events, now).is_ok());
        shards.give_up(held);
        assert!(shards.permits(None, &events, now).is_err());
    }

    #[test]
    fn by_uid_one_namespaces_parents_spread_and_every_write_names_its_parent() {
        let shards = Shards::keyed(8, ShardHash::Mixed, ShardKey::Uid, None);
        let now = Instant::now();
        let until = now + Duration::from_secs(10);
        let uids: Vec<String> = (0..64).map(|i| format!("8c1f-{i:04}-uid")).collect();
        let buckets: std::collections::BTreeSet<Bucket> = uids
            .iter()
            .filter_map(|u| shards.bucket_of_parent("big", Some(u)))
            .collect();
        assert!(buckets.len() >= 6, "one namespace's parents in {buckets:?}");
        assert!(!buckets.contains(&Bucket::Cluster));
        let mine = shards
            .bucket_of_parent("big", Some(&uids[0]))
            .expect("a uid");
        shards.renewed(mine, until, true);
        let other = uids
            .iter()
            .find(|u| shards.bucket_of_parent("big", Some(u)) != Some(mine))
            .expect("a parent elsewhere");
        assert!(shards.works_on("big", Some(&uids[0])));
        assert!(!shards.works_on("big", Some(other)));
        assert!(shards.begin("big", Some(other)).is_none());
        assert!(shards.begin("big", None).is_none(), "no uid, no replica");
        let claim = shards.begin("big", Some(&uids[0])).expect("held");
        assert!(
            shards
                .permits(
                    Some(claim.scope()),
                    "/api/v1/namespaces/big/configmaps",
                    now
                )
                .is_ok()
        );
        // outside a sync a namespaced write names no parent: refused, Events aside
        assert!(
            shards
                .permits(None, "/api/v1/namespaces/big/configmaps", now)
                .is_err()
        );
        assert!(
            shards
                .permits(None, "/apis/events.k8s.io/v1/namespaces/big/events", now)
                .is_ok()
        );
        // cluster-scoped writes (a controller's finalizer) still need the cluster bucket
        assert!(shards.permits(None, "/apis/x.io/v1/things/t", now).is_err());
        shards.renewed(Bucket::Cluster, until, true);
        assert!(shards.permits(None, "/apis/x.io/v1/things/t", now).is_ok());
    }

    #[test]
    fn a_deactivated_bucket_hands_out_no_more_work_but_its_syncs_may_finish() {
        let shards = Shards::new(1);
        let now = Instant::now();
        let b = shards.bucket_of("x");
        shards.renewed(b, now + Duration::from_secs(10), true);
        let claim = shards.begin("x", None).expect("held");
        shards.deactivate(b);
        assert!(shards.begin("x", None).is_none());
        assert!(shards.permits(Some(claim.scope()), "", now).is_ok());
        assert_eq!(shards.held(), Vec::<Bucket>::new());
    }

    #[test]
    fn gains_name_the_buckets_whose_work_started_since_last_asked() {
        let shards = Shards::new(4);
        let until = Instant::now() + Duration::from_secs(60);
        shards.renewed(Bucket::Hash(1), until, true);
        let mut seen = shards.work_epochs();
        shards.renewed(Bucket::Hash(2), until, true);
        shards.renewed(Bucket::Hash(1), until, false); // a renewal is no gain
        assert_eq!(shards.gained_since(&mut seen), vec![Bucket::Hash(2)]);
        assert_eq!(shards.gained_since(&mut seen), Vec::<Bucket>::new());
        // lost and gained again between two looks: gained
        shards.give_up(Bucket::Hash(1));
        shards.renewed(Bucket::Hash(1), until, true);
        assert_eq!(shards.gained_since(&mut seen), vec![Bucket::Hash(1)]);
    }

    /// The value of the series `name` (with its labels) in `metrics`' text, if present.
    fn series(metrics: &Metrics, name: &str) -> Option<f64> {
        metrics.encode().lines().find_map(|l| {
            let value = l.strip_prefix(name)?.strip_prefix(' ')?;
            value.parse().ok()
        })
    }

    #[test]
    fn a_hand_over_is_timed_from_the_previous_holder_to_the_start_of_work() {
        let shards = Shards::new(4);
        let metrics = Arc::new(Metrics::new());
        shards.report_to(metrics.clone());
        let now = Instant::now();
        let until = now + Duration::from_secs(60);
        let three_s_ago = now
            .checked_sub(Duration::from_secs(3))
            .expect("the clock is past 3 s");
        // a bucket nobody held before: no hand-over
        shards.renewed(Bucket::Hash(0), until, true);
        // released 3 s ago, taken now
        shards.taken_over(Bucket::Hash(1), three_s_ago, Previous::Released);
        shards.renewed(Bucket::Hash(1), until, true);
        // taken after an expiry, lost before its work started, then gained anew: no hand-over
        let b = Bucket::Hash(2);
        let watch = Arc::new(WatchShards::default());
        let listing = Shards::with_hash(4, ShardHash::Fnv1a, Some(watch));
        listing.report_to(metrics.clone());
        listing.taken_over(b, three_s_ago, Previous::Expired);
        listing.renewed(b, until, true);
        listing.give_up(b);
        listing.renewed(b, until, true);
        listing.activate(b, listing.slot(b).epoch.load(Ordering::Acquire));
        assert!(listing.active(b));

        let count = |previous: &str| {
            series(
                &metrics,
                &format!("kmeta_shard_handoff_seconds_count{{previous=\"{previous}\"}}"),
            )
        };
        assert_eq!(count("released"), Some(1.0));
        assert_eq!(count("expired"), None);
        let sum = series(
            &metrics,
            "kmeta_shard_handoff_seconds_sum{previous=\"released\"}",
        )
        .expect("a sum");
        assert!((3.0..60.0).contains(&sum), "{sum}");
    }

    /// Shards of 8 buckets under one sharded watch, and the sender of what that watch listed.
    fn server_sharded() -> (
        Arc<WatchShards>,
        tokio::sync::watch::Sender<Listed>,
        Arc<Shards>,
    ) {
        let watch = Arc::new(WatchShards::default());
        let (listed, rx) = tokio::sync::watch::channel(Listed::default());
        watch.register(rx);
        let shards = Shards::with_hash(8, ShardHash::Fnv1a, Some(watch.clone()));
        (watch, listed, shards)
    }

    /// With server-sharded watches a gained bucket is selected at once, its work starts only
    /// once every sharded watch has listed that selection, and a lost bucket leaves the
    /// selection at once.
    #[tokio::test]
    #[allow(clippy::unwrap_used)]
    async fn a_gained_bucket_works_once_its_watches_listed_and_a_lost_one_leaves_late() {
        let (watch, listed, shards) = server_sharded();
        let mut gains = shards.subscribe_gains();
        let ns = "team-a";
        let b = shards.bucket_of(ns);
        assert_eq!(b, super::super::bucket_by(ns, 8, ShardHash::Fnv1a));
        let until = Instant::now() + Duration::from_secs(60);
        shards.renewed(b, until, true);
        assert_eq!(shards.listing(), vec![b]);
        assert!(
            shards.begin(ns, None).is_none(),
            "no work before the watches listed"
        );
        assert!(
            !WorkScope::works_on(&*shards, ns, None),
            "taken, still listing: what its list announces queues nothing"
        );
        shards.publish_watches();
        let sel = watch.selection();
        let (start, end) = b.range(8).unwrap();
        assert_eq!(sel.ranges.len(), 1);
        assert_eq!(sel.ranges[0].start, start);
        assert_eq!(sel.ranges[0].end, end.map_or(1u128 << 64, u128::from));
        // the cluster bucket needs no sharded watch: it works at once
        shards.renewed(Bucket::Cluster, until, true);
        assert!(shards.held().contains(&Bucket::Cluster));
        tokio::task::yield_now().await;
        assert!(!shards.held().contains(&b));
        listed.send_modify(|l| {
            l.ranges.insert(sel.ranges[0]);
        });
        let at = *gains.borrow_and_update();
        tokio::time::timeout(Duration::from_secs(5), gains.wait_for(|g| *g > at))
            .await
            .unwrap()
            .unwrap();
        assert!(shards.held().contains(&b) && shards.listing().is_empty());
        assert!(shards.begin(ns, None).is_some());
        // lost: its range leaves the selection, and the sharded watches are told
        let mut told = watch.subscribe();
        told.borrow_and_update();
        shards.give_up(b);
        shards.publish_watches();
        assert!(watch.selection().ranges.is_empty());
        assert!(told.has_changed().unwrap());
    }

    /// A foreseen bucket is selected (listed) before it is held, gives no work, and when it is
    /// taken its work starts on the lists already made; no longer foreseen and not taken, it
    /// leaves the selection.
    #[tokio::test]
    #[allow(clippy::unwrap_used)]
    async fn a_foreseen_bucket_is_listed_before_it_is_taken_and_works_when_taken() {
        let (watch, listed, shards) = server_sharded();
        let mut gains = shards.subscribe_gains();
        let ns = "team-a";
        let b = shards.bucket_of(ns);
        let other = (0..)
            .map(|i| format!("team-{i}"))
            .find(|o| shards.bucket_of(o) != b)
            .unwrap();
        let other = other.as_str();
        let c = shards.bucket_of(other);
        assert!(shards.foresee(&[b, c]));
        assert!(!shards.foresee(&[b, c]), "unchanged");
        shards.publish_watches();
        let range = |b: Bucket| shards.ranges(&[b]).pop().unwrap();
        assert_eq!(watch.selection().ranges.len(), 2);
        assert!(shards.begin(ns, None).is_none(), "foreseen is not held");
        assert!(shards.held().is_empty());
        // what its list announces queues nothing (the triggers ask the scope)
        let works_on = |ns: &str| WorkScope::works_on(&*shards, ns, Some("uid"));
        assert!(!works_on(ns), "foreseen: not this replica's work");
        // listed while foreseen, then taken: its work starts without another list
        listed.send_modify(|l| {
            l.ranges.insert(range(b));
        });
        let at = *gains.borrow_and_update();
        shards.renewed(b, Instant::now() + Duration::from_secs(60), true);
        shards.foresee(&[]);
        shards.publish_watches();
        tokio::time::timeout(Duration::from_secs(5), gains.wait_for(|g| *g > at))
            .await
            .unwrap()
            .unwrap();
        assert!(shards.begin(ns, None).is_some());
        assert!(works_on(ns), "its work started: triggers queue its parents");
        // c, taken by another replica, leaves the selection
        assert_eq!(watch.selection().ranges, vec![range(b)]);
        assert_eq!(shards.foreseen(), Vec::<Bucket>::new());
        assert!(shards.begin(other, None).is_none());
    }
}
