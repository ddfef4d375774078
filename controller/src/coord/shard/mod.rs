//! Sharding parents across active `kmeta run` replicas (`--sharding`,
//! `docs/design/sharding.md`).
//!
//! A parent belongs to the bucket of its namespace: the top bits of the namespace's 64-bit
//! FNV-1a hash (the hash KEP-5866's server-side `shardRange` computes) after a finalizing mix
//! ([`bucket_of`]). Without the mix, namespaces named alike (`team-0` … `team-99`) differ only in
//! the low bits of FNV-1a and fall into one or two of 32 equal ranges; mixed, they spread evenly
//! (`docs/design/sharding.md`, "Skew").
//! Cluster-scoped parents (namespace `""`) share one more bucket, [`Bucket::Cluster`]. Each
//! bucket is one `coordination.k8s.io/v1` Lease; every replica holds a member Lease too, so each
//! sees how many replicas are alive and takes its fair share (`plan`). Safety rests on the
//! Leases' compare-and-swap alone: a replica writes for a parent only while its bucket's write
//! fence is open (`state.rs`), and a bucket's fence follows the Lease exactly as the leader's
//! fence follows the leader Lease ([`crate::coord::fence`]).
//!
//! This module holds the pure decisions: the hash, the bucket of a namespace, the rendezvous rank
//! that spreads replicas' preferences, the fair share, and the plan of one round of the bucket
//! Lease loop (`leases.rs`).

pub(crate) mod leases;
pub(crate) mod legacy;
pub(crate) mod state;
mod work;

use std::collections::BTreeSet;
use std::time::Duration;

pub use leases::{
    BUCKETS_ANNOTATION, HASH_ANNOTATION, KEY_ANNOTATION, ROLE_LABEL, SET_LABEL, ShardConfig,
    ShardError, run_sharded,
};
pub use state::{ShardFenced, Shards};

pub(crate) use crate::runtime::shard_watch::fnv1a64;

/// MurmurHash3's 64-bit finalizer: every input bit flips about half of the output bits, so
/// names that differ only at their end land far apart.
pub(crate) fn mix64(mut h: u64) -> u64 {
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^= h >> 33;
    h
}

/// The hash that places a namespace: MurmurHash3's finalizer over its FNV-1a.
pub(crate) fn namespace_hash(namespace: &str) -> u64 {
    mix64(fnv1a64(namespace.as_bytes()))
}

/// Which hash places a namespace in a bucket; every replica of a set must use the same one (the
/// bucket Leases carry it, [`leases::HASH_ANNOTATION`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ShardHash {
    /// MurmurHash3's finalizer over FNV-1a 64: spreads namespaces named alike; buckets are no
    /// `shardRange` ranges, so watches are filtered by the replica (`--shard-watch=client`, the
    /// default).
    #[default]
    Mixed,
    /// Plain FNV-1a 64, KEP-5866's: bucket `b` is exactly the range `[b·2^64/B, (b+1)·2^64/B)`
    /// of the server's `shardRange(object.metadata.namespace, …)`, so the API server can shard
    /// the watches (`--shard-watch=server`); namespaces named alike crowd into few buckets.
    Fnv1a,
}

impl ShardHash {
    /// The hash of `namespace`.
    pub fn of(self, namespace: &str) -> u64 {
        match self {
            ShardHash::Mixed => namespace_hash(namespace),
            ShardHash::Fnv1a => fnv1a64(namespace.as_bytes()),
        }
    }

    /// As the bucket Leases name it: `mixed` or `fnv-1a`.
    pub fn as_str(self) -> &'static str {
        match self {
            ShardHash::Mixed => "mixed",
            ShardHash::Fnv1a => "fnv-1a",
        }
    }
}

/// What places a parent in a bucket (`--shard-key`); every replica of a set must use the same
/// (the bucket Leases carry it, [`leases::KEY_ANNOTATION`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum ShardKey {
    /// The parent's namespace: a namespace's parents, children and orphans stay with one
    /// replica, cluster-scoped parents share the cluster bucket; one huge namespace is one
    /// replica's work.
    #[default]
    Namespace,
    /// The parent's uid: a namespace's parents spread over every bucket (the escape from one
    /// huge namespace); watches are the replica's to filter (`--shard-watch=client` only), and
    /// replicas may race for an orphan two parents select.
    Uid,
}

impl ShardKey {
    /// As the bucket Leases name it: `namespace` or `uid`.
    pub fn as_str(self) -> &'static str {
        match self {
            ShardKey::Namespace => "namespace",
            ShardKey::Uid => "uid",
        }
    }
}

/// The bucket of a parent in `namespace` with `uid`, placed by `key`: by namespace as
/// [`bucket_by`]; by uid, the hash bucket of the uid (`None` without one: a parent not seen
/// yet, whose replica is not known).
pub fn bucket_of_parent(
    key: ShardKey,
    namespace: &str,
    uid: Option<&str>,
    buckets: u32,
    hash: ShardHash,
) -> Option<Bucket> {
    match key {
        ShardKey::Namespace => Some(bucket_by(namespace, buckets, hash)),
        ShardKey::Uid => uid
            .filter(|u| !u.is_empty())
            .map(|u| bucket_by(u, buckets, hash)),
    }
}

/// A shard bucket: a hash range of namespaces, or the bucket of cluster-scoped parents.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Bucket {
    /// Namespaces whose hash falls in the `n`-th of the `B` equal ranges.
    Hash(u32),
    /// Cluster-scoped parents (their children may be in any namespace).
    Cluster,
}

impl std::fmt::Display for Bucket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Bucket::Hash(n) => write!(f, "{n}"),
            Bucket::Cluster => f.write_str("cluster"),
        }
    }
}

impl Bucket {
    /// The position of this bucket among `buckets + 1` slots (the cluster bucket last).
    pub(crate) fn index(self, buckets: u32) -> usize {
        match self {
            Bucket::Hash(n) => n as usize,
            Bucket::Cluster => buckets as usize,
        }
    }

    /// Every bucket of a set of `buckets` hash buckets, the cluster bucket last.
    pub fn all(buckets: u32) -> impl Iterator<Item = Bucket> {
        (0..buckets)
            .map(Bucket::Hash)
            .chain(std::iter::once(Bucket::Cluster))
    }

    /// The `[start, end)` range of the namespace hash ([`ShardHash`]) a hash bucket covers
    /// (`end` `None`: up to 2^64); `None` for the cluster bucket.
    pub fn range(self, buckets: u32) -> Option<(u64, Option<u64>)> {
        let Bucket::Hash(n) = self else { return None };
        let width = 1u128 << (64 - buckets.trailing_zeros());
        let start = u128::from(n) * width;
        let end = start + width;
        Some((start as u64, u64::try_from(end).ok()))
    }
}

/// Whether `buckets` is a usable bucket count: a power of two from 1 to 1024.
pub fn valid_bucket_count(buckets: u32) -> bool {
    buckets.is_power_of_two() && buckets <= 1024
}

/// The bucket of a parent in `namespace` (`""`: cluster-scoped) among `buckets` hash buckets
/// (a power of two): the top `log2(buckets)` bits of the namespace's [`ShardHash::Mixed`] hash.
pub fn bucket_of(namespace: &str, buckets: u32) -> Bucket {
    bucket_by(namespace, buckets, ShardHash::Mixed)
}

/// The bucket of a parent in `namespace` under `hash`: the top `log2(buckets)` bits of
/// [`ShardHash::of`] (so a hash bucket is exactly its [`Bucket::range`]).
pub fn bucket_by(namespace: &str, buckets: u32, hash: ShardHash) -> Bucket {
    if namespace.is_empty() {
        return Bucket::Cluster;
    }
    let bits = buckets.trailing_zeros();
    if bits == 0 {
        return Bucket::Hash(0);
    }
    Bucket::Hash((hash.of(namespace) >> (64 - bits)) as u32)
}

/// How much replica `identity` wants `bucket`: rendezvous hashing, so each replica prefers a
/// different order and they do not all reach for the same free bucket.
pub(crate) fn rank(identity: &str, bucket: Bucket) -> u64 {
    fnv1a64(format!("{identity}\u{0}{bucket}").as_bytes())
}

/// The fair share of `total` buckets among `members` live replicas (at least 1): rounded up,
/// so every bucket finds a holder.
pub(crate) fn share(total: usize, members: usize) -> usize {
    total.div_ceil(members.max(1))
}

/// What one replica knows of one bucket Lease in a round.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct BucketView {
    /// The bucket.
    pub bucket: Bucket,
    /// Who holds it; `None` when nobody (never taken, released, or expired as this replica
    /// measures it).
    pub holder: Option<String>,
    /// How long it has had no holder as this replica measures it (zero when held).
    pub free_for: Duration,
}

/// One step of a round of the bucket Lease loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// Take this free bucket.
    Acquire(Bucket),
    /// Hand this held bucket over (this replica holds more than its share).
    Release(Bucket),
}

/// The steps replica `me` takes in one round, given `members` live replicas (itself included)
/// and the `views` of every bucket:
/// - below its share, it takes free buckets in its rank order up to the share;
/// - above it, it hands over one bucket, its lowest-ranked, per round (this bounds the relists
///   a scale-up causes);
/// - a bucket free for at least `orphaned_after` (a lease duration) is taken whatever the share:
///   liveness first, balance later.
pub(crate) fn plan(
    me: &str,
    members: usize,
    views: &[BucketView],
    orphaned_after: Duration,
) -> Vec<Step> {
    let fair = share(views.len(), members);
    let mine: Vec<Bucket> = views
        .iter()
        .filter(|v| v.holder.as_deref() == Some(me))
        .map(|v| v.bucket)
        .collect();
    let mut free: Vec<&BucketView> = views.iter().filter(|v| v.holder.is_none()).collect();
    free.sort_by_key(|v| std::cmp::Reverse(rank(me, v.bucket)));
    let mut steps = Vec::new();
    let mut held = mine.len();
    for v in free {
        if held < fair || v.free_for >= orphaned_after {
            steps.push(Step::Acquire(v.bucket));
            held += 1;
        }
    }
    if steps.is_empty() && mine.len() > fair {
        let lowest = mine.iter().min_by_key(|b| rank(me, **b));
        if let Some(b) = lowest {
            steps.push(Step::Release(*b));
        }
    }
    steps
}

/// [`plan`] for a replica waiting for `pending` buckets, foreseen and still held by a replica
/// that looks gone: counted as its own, they keep it from taking other free buckets in their
/// place (the gone replica's Leases expire one by one; taking what expired first would take
/// another survivor's foreseen buckets and leave this one's to be listed after the take). Hands
/// nothing over while any is pending (the count is not what it holds).
pub(crate) fn plan_awaiting(
    me: &str,
    members: usize,
    views: &[BucketView],
    pending: &[Bucket],
    orphaned_after: Duration,
) -> Vec<Step> {
    if pending.is_empty() {
        return plan(me, members, views, orphaned_after);
    }
    let counted: Vec<BucketView> = views
        .iter()
        .map(|v| match pending.contains(&v.bucket) {
            true => BucketView {
                holder: Some(me.to_owned()),
                free_for: Duration::ZERO,
                ..v.clone()
            },
            false => v.clone(),
        })
        .collect();
    plan(me, members, &counted, orphaned_after)
        .into_iter()
        .filter(|step| matches!(step, Step::Acquire(_)))
        .collect()
}

/// The buckets held by replicas that look gone that replica `me` may take once their Leases
/// expire, so its sharded watches can list them meanwhile (a warm takeover,
/// docs/design/sharding.md): with every bucket whose holder is not in `fresh` (the replicas whose
/// member Lease was renewed lately, `me` included) counted free, those [`plan`] has `me` take,
/// and those it has no fresh replica take (every replica then lists them: whoever loses a race
/// for its picks takes them in the next round).
pub(crate) fn foresee(
    me: &str,
    fresh: &BTreeSet<String>,
    views: &[BucketView],
    orphaned_after: Duration,
) -> Vec<Bucket> {
    let gone = |v: &BucketView| v.holder.as_ref().is_some_and(|h| !fresh.contains(h));
    let left: Vec<Bucket> = views.iter().filter(|v| gone(v)).map(|v| v.bucket).collect();
    if left.is_empty() {
        return Vec::new();
    }
    let freed: Vec<BucketView> = views
        .iter()
        .map(|v| match gone(v) {
            true => BucketView {
                holder: None,
                free_for: Duration::ZERO,
                ..v.clone()
            },
            false => v.clone(),
        })
        .collect();
    let mut survivors: BTreeSet<&str> = fresh.iter().map(String::as_str).collect();
    survivors.insert(me);
    let picks = |who: &str| -> Vec<Bucket> {
        plan(who, survivors.len(), &freed, orphaned_after)
            .into_iter()
            .filter_map(|step| match step {
                Step::Acquire(b) if left.contains(&b) => Some(b),
                _ => None,
            })
            .collect()
    };
    let mine = picks(me);
    let picked: BTreeSet<Bucket> = survivors.iter().flat_map(|who| picks(who)).collect();
    let unpicked = left.iter().filter(|b| !picked.contains(b)).copied();
    mine.iter().copied().chain(unpicked).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn a_namespace_falls_in_the_range_of_its_bucket() {
        for hash in [ShardHash::Mixed, ShardHash::Fnv1a] {
            for buckets in [1u32, 2, 8, 32, 1024] {
                for i in 0..200 {
                    let ns = format!("team-{i}x{}", i * 7919);
                    let b = bucket_by(&ns, buckets, hash);
                    let Some((start, end)) = b.range(buckets) else {
                        panic!("{ns}: a hash bucket has a range")
                    };
                    let h = hash.of(&ns);
                    assert!(
                        h >= start && end.is_none_or(|e| h < e),
                        "{ns} {b} {buckets} {hash:?}"
                    );
                }
            }
        }
        assert_eq!(ShardHash::Mixed.of("team-a"), namespace_hash("team-a"));
        assert_eq!(ShardHash::Fnv1a.of("team-a"), fnv1a64(b"team-a"));
        assert_eq!(
            bucket_of("team-a", 32),
            bucket_by("team-a", 32, ShardHash::Mixed)
        );
        assert_eq!(bucket_of("", 32), Bucket::Cluster);
        assert_eq!(Bucket::Cluster.range(32), None);
        assert_eq!(Bucket::Hash(0).range(1), Some((0, None)));
        assert_eq!(
            Bucket::Hash(7).range(8),
            Some((0xe000_0000_0000_0000, None))
        );
        assert_eq!(
            Bucket::Hash(0).range(8),
            Some((0, Some(0x2000_0000_0000_0000)))
        );
    }

    /// FNV-1a's top bits alone mix the last bytes of a name weakly: `team-0` … `team-99` fall
    /// into 2 of 32 equal ranges of the raw hash. Mixed, they spread over (nearly) all of them,
    /// and 8 000 sequential names fill 8 buckets evenly.
    #[test]
    fn namespaces_named_alike_spread_over_the_buckets() {
        let raw: BTreeSet<u64> = (0..100)
            .map(|i| fnv1a64(format!("team-{i}").as_bytes()) >> 59)
            .collect();
        assert!(raw.len() <= 3, "the raw hash's top bits: {raw:?}");
        let mixed: BTreeSet<Bucket> = (0..100)
            .map(|i| bucket_of(&format!("team-{i}"), 32))
            .collect();
        assert!(mixed.len() >= 28, "{} of 32 buckets", mixed.len());
        let mut counts = [0usize; 8];
        for i in 0..8000 {
            if let Bucket::Hash(b) = bucket_of(&format!("ns-{i}"), 8) {
                counts[b as usize] += 1;
            }
        }
        assert!(counts.iter().all(|c| (880..1120).contains(c)), "{counts:?}");
    }

    #[test]
    fn bucket_counts_are_powers_of_two_up_to_1024() {
        assert!(valid_bucket_count(1) && valid_bucket_count(32) && valid_bucket_count(1024));
        assert!(!valid_bucket_count(0) && !valid_bucket_count(3) && !valid_bucket_count(2048));
    }

    fn views(holders: &[Option<&str>]) -> Vec<BucketView> {
        let n = holders.len() as u32 - 1;
        Bucket::all(n)
            .zip(holders)
            .map(|(bucket, h)| BucketView {
                bucket,
                holder: h.map(str::to_owned),
                free_for: Duration::ZERO,
            })
            .collect()
    }

    #[test]
    fn a_lone_replica_takes_every_bucket() {
        let v = views(&[None; 9]);
        let steps = plan("a", 1, &v, Duration::from_secs(15));
        assert_eq!(steps.len(), 9);
        assert!(steps.iter().all(|s| matches!(s, Step::Acquire(_))));
    }

    #[test]
    fn a_newcomer_takes_its_share_and_the_others_hand_over_one_per_round() {
        // 9 buckets, all held by a; b joins: share is 5 for two members
        let v = views(&[Some("a"); 9]);
        assert_eq!(plan("b", 2, &v, Duration::from_secs(15)), vec![]);
        let a = plan("a", 2, &v, Duration::from_secs(15));
        assert!(matches!(a.as_slice(), [Step::Release(_)]), "{a:?}");
        // the released bucket is free: b, below its share, takes it at once
        let Step::Release(released) = a[0] else {
            unreachable!()
        };
        let mut v2 = v.clone();
        v2[released.index(8)].holder = None;
        assert_eq!(
            plan("b", 2, &v2, Duration::from_secs(15)),
            vec![Step::Acquire(released)]
        );
        // a, still above its share, does not take it back but hands over the next
        let again = plan("a", 2, &v2, Duration::from_secs(15));
        assert!(
            matches!(again.as_slice(), [Step::Release(b)] if *b != released),
            "{again:?}"
        );
        // at its share, a replica neither takes nor gives
        let mut even = views(&[Some("a"); 9]);
        for v in even.iter_mut().take(4) {
            v.holder = Some("b".into());
        }
        assert_eq!(plan("a", 2, &even, Duration::from_secs(15)), vec![]);
        assert_eq!(plan("b", 2, &even, Duration::from_secs(15)), vec![]);
    }

    #[test]
    fn a_bucket_free_for_a_lease_duration_is_taken_above_the_share() {
        let mut v = views(&[Some("a"), Some("a"), Some("b"), None]);
        assert_eq!(plan("a", 2, &v, Duration::from_secs(15)), vec![]);
        v[3].free_for = Duration::from_secs(15);
        assert_eq!(
            plan("a", 2, &v, Duration::from_secs(15)),
            vec![Step::Acquire(Bucket::Cluster)]
        );
    }

    #[test]
    fn replicas_rank_buckets_differently() {
        let order = |me: &str| {
            let mut b: Vec<Bucket> = Bucket::all(32).collect();
            b.sort_by_key(|x| rank(me, *x));
            b
        };
        assert_ne!(order("kmeta-0"), order("kmeta-1"));
        assert_eq!(order("kmeta-0"), order("kmeta-0"));
    }

    fn view(b: u32, holder: Option<&str>) -> BucketView {
        BucketView {
            bucket: Bucket::Hash(b),
            holder: holder.map(str::to_owned),
            free_for: Duration::ZERO,
        }
    }

    /// Of the buckets a replica that looks gone holds, each survivor foresees those it would
    /// take in the round their Leases expire and those no survivor would, so together they
    /// foresee every one; nothing while every holder is fresh.
    #[test]
    fn survivors_foresee_the_buckets_of_a_replica_that_looks_gone() {
        let holders = ["a", "b", "c"];
        let views: Vec<BucketView> = (0..12)
            .map(|b| view(b, Some(holders[b as usize % 3])))
            .collect();
        let long = Duration::from_secs(15);
        let all: BTreeSet<String> = holders.iter().map(|h| h.to_string()).collect();
        assert!(foresee("a", &all, &views, long).is_empty());
        let fresh: BTreeSet<String> = ["a", "b"].iter().map(|h| h.to_string()).collect();
        let by_a = foresee("a", &fresh, &views, long);
        let by_b = foresee("b", &fresh, &views, long);
        let of_c: BTreeSet<Bucket> = views
            .iter()
            .filter(|v| v.holder.as_deref() == Some("c"))
            .map(|v| v.bucket)
            .collect();
        let covered: BTreeSet<Bucket> = by_a.iter().chain(&by_b).copied().collect();
        assert_eq!(covered, of_c, "a: {by_a:?}, b: {by_b:?}");
        // first what plan has each take once c's Leases have expired
        let expired: Vec<BucketView> = views
            .iter()
            .map(|v| match v.holder.as_deref() {
                Some("c") => BucketView {
                    holder: None,
                    ..v.clone()
                },
                _ => v.clone(),
            })
            .collect();
        let planned: Vec<Bucket> = plan("a", 2, &expired, long)
            .into_iter()
            .filter_map(|s| match s {
                Step::Acquire(b) => Some(b),
                Step::Release(_) => None,
            })
            .collect();
        assert_eq!(by_a[..planned.len()], planned[..]);
        // a replica whose member Lease is gone entirely is foreseen the same way
        let only_a: BTreeSet<String> = ["a".to_string()].into();
        assert_eq!(foresee("a", &only_a, &views, long).len(), 8);
    }

    /// The gone replica's Leases expire one by one: a survivor awaiting its foreseen buckets
    /// takes those that expired and no other free bucket in place of those still held.
    #[test]
    #[allow(clippy::unwrap_used)]
    fn a_survivor_awaiting_its_foreseen_buckets_takes_no_other_in_their_place() {
        let long = Duration::from_secs(15);
        let holders = ["a", "b", "c"];
        let views: Vec<BucketView> = (0..12)
            .map(|b| view(b, Some(holders[b as usize % 3])))
            .collect();
        let fresh: BTreeSet<String> = ["a", "b"].iter().map(|h| h.to_string()).collect();
        let mine = foresee("a", &fresh, &views, long);
        let (first, rest) = (mine[0], mine[1]);
        // only the lowest of c's other buckets, and `first`, have expired
        let other = views
            .iter()
            .map(|v| v.bucket)
            .find(|b| views[b.index(32)].holder.as_deref() == Some("c") && !mine.contains(b))
            .unwrap();
        let now: Vec<BucketView> = views
            .iter()
            .map(|v| match v.bucket == first || v.bucket == other {
                true => view(v.bucket.index(32) as u32, None),
                false => v.clone(),
            })
            .collect();
        let takes = |steps: Vec<Step>| -> Vec<Bucket> {
            steps
                .into_iter()
                .filter_map(|s| match s {
                    Step::Acquire(b) => Some(b),
                    Step::Release(_) => None,
                })
                .collect()
        };
        // without awaiting, it takes the other expired bucket too
        assert_eq!(takes(plan("a", 2, &now, long)).len(), 2);
        assert_eq!(
            takes(plan_awaiting("a", 2, &now, &[rest], long)),
            vec![first]
        );
        // nothing pending: plan itself
        assert_eq!(
            plan_awaiting("a", 2, &now, &[], long),
            plan("a", 2, &now, long)
        );
    }

    #[test]
    fn shares_cover_every_bucket() {
        assert_eq!(share(33, 1), 33);
        assert_eq!(share(33, 3), 11);
        assert_eq!(share(33, 2), 17);
        assert_eq!(share(9, 0), 9);
    }
}
