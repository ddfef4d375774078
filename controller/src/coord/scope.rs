//! The one seam between the reconcile core and the way replicas split the work: a
//! [`WorkScope`] says whether a key is this process's work, runs a sync of it in the write scope
//! its writes are checked in, and supplies the tasks that follow the share of the work as it
//! changes. Without one (a single replica, or leader election, whose fence sits in the client)
//! every key is this process's work. [`crate::coord::shard::Shards`] is the implementation under
//! `--sharding`.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use crate::ops::metrics::Metrics;
use crate::runtime::shard_watch::WatchShards;

/// A test of a parent (or a DecoratorController's target) by its namespace and uid: whether it
/// belongs to the share of the work in question.
pub type ParentTest<'a> = &'a dyn Fn(&str, &str) -> bool;

/// A future a scope hands to the caller to run (a sync in its write scope, or a task that
/// follows the share of the work).
pub type ScopedFuture<'a> = Pin<Box<dyn Future<Output = ()> + Send + 'a>>;

/// Schedules the parents a [`ParentTest`] accepts (the parents just gained).
pub type Enqueue = Box<dyn Fn(ParentTest<'_>) + Send + Sync>;

/// Counts the parents a [`ParentTest`] accepts (the parents this process works on).
pub type Count = Box<dyn Fn(ParentTest<'_>) -> usize + Send + Sync>;

/// How this process's share of the work is decided, asked by the reconcile core for every key.
pub trait WorkScope: Send + Sync + std::fmt::Debug + 'static {
    /// Whether the share depends on a parent's uid (else only its namespace is read, and the
    /// core need not look the parent up).
    fn by_uid(&self) -> bool;

    /// `sync` wrapped to run as this process's work on the parent in `namespace` with `uid`
    /// (its writes checked in the scope of the share it belongs to, for as long as it runs), or
    /// `None` when the parent is another replica's work now (`sync` is then dropped unrun).
    fn claim<'a>(
        &'a self,
        namespace: &str,
        uid: Option<&str>,
        sync: ScopedFuture<'a>,
    ) -> Option<ScopedFuture<'a>>;

    /// Whether the parent in `namespace` with `uid` is this process's work now. A trigger queues
    /// no other: its holder syncs it, and a share gained later queues its parents itself
    /// ([`WorkScope::follow_gains`], at low priority, as a start). Without this, the list of a
    /// range about to be taken announced each of its parents and children as new, queuing its
    /// parents at normal priority ahead of the edits that followed (docs/design/sharding.md).
    fn works_on(&self, namespace: &str, uid: Option<&str>) -> bool;

    /// The selection that splits this process's watches by namespace hash, when the API server
    /// lists and watches only the namespaces of its share (KEP-5866); `None`: whole watches.
    fn watch_split(&self) -> Option<Arc<WatchShards>>;

    /// Whether cluster-wide work (what no namespace places, such as a DecoratorController's own
    /// finalizer) is this process's now.
    fn owns_cluster_work(&self) -> bool;

    /// A task that, whenever this process gains parents, calls `enqueue` with a test of the
    /// parents gained; it runs until dropped.
    fn follow_gains(self: Arc<Self>, enqueue: Enqueue) -> ScopedFuture<'static>;

    /// A task that reports to `metrics`, now and periodically, how many of `controller`'s
    /// parents are this process's work (`count` answers for a test), and removes the series when
    /// dropped.
    fn report_share(
        self: Arc<Self>,
        metrics: Arc<Metrics>,
        controller: &str,
        count: Count,
    ) -> ScopedFuture<'static>;
}
