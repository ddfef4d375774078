//! [`Shards`] as the reconcile core's [`WorkScope`]: a key is this replica's work while its
//! bucket is held, each sync runs in its bucket's write scope, gained buckets enqueue their
//! parents, and `kmeta_shard_parents` counts this replica's share.

use std::sync::Arc;
use std::time::Duration;

use crate::coord::scope::{Count, Enqueue, ScopedFuture, WorkScope};
use crate::coord::shard::state::{Shards, in_scope};
use crate::coord::shard::{Bucket, ShardKey};
use crate::ops::metrics::Metrics;
use crate::runtime::shard_watch::WatchShards;

/// How often `kmeta_shard_parents` is counted: 5 s (kmeta's, as `kmeta_watch_objects`).
const SHARD_COUNT_PERIOD: Duration = Duration::from_secs(5);

impl WorkScope for Shards {
    fn by_uid(&self) -> bool {
        self.key() == ShardKey::Uid
    }

    fn claim<'a>(
        &'a self,
        namespace: &str,
        uid: Option<&str>,
        sync: ScopedFuture<'a>,
    ) -> Option<ScopedFuture<'a>> {
        let claim = self.begin(namespace, uid)?;
        Some(Box::pin(async move {
            in_scope(claim.scope(), sync).await;
            drop(claim);
        }))
    }

    fn works_on(&self, namespace: &str, uid: Option<&str>) -> bool {
        Shards::works_on(self, namespace, uid)
    }

    fn watch_split(&self) -> Option<Arc<WatchShards>> {
        self.watch().cloned()
    }

    fn owns_cluster_work(&self) -> bool {
        self.active(Bucket::Cluster)
    }

    fn follow_gains(self: Arc<Self>, enqueue: Enqueue) -> ScopedFuture<'static> {
        let mut gains = self.subscribe_gains();
        gains.borrow_and_update();
        let mut seen = self.work_epochs();
        let shards = self;
        Box::pin(async move {
            while gains.changed().await.is_ok() {
                gains.borrow_and_update();
                let gained = shards.gained_since(&mut seen);
                if !gained.is_empty() {
                    enqueue(&|ns: &str, uid: &str| {
                        shards
                            .bucket_of_parent(ns, Some(uid))
                            .is_some_and(|b| gained.contains(&b))
                    });
                }
            }
        })
    }

    fn report_share(
        self: Arc<Self>,
        metrics: Arc<Metrics>,
        controller: &str,
        count: Count,
    ) -> ScopedFuture<'static> {
        let series = ShardParentsSeries {
            metrics,
            controller: controller.to_owned(),
        };
        let shards = self;
        Box::pin(async move {
            let mut interval = tokio::time::interval(SHARD_COUNT_PERIOD);
            loop {
                interval.tick().await;
                let n = count(&|ns: &str, uid: &str| shards.works_on(ns, Some(uid)));
                series.metrics.shard_parents(&series.controller, n);
            }
        })
    }
}

/// A controller's `kmeta_shard_parents` series, removed when its counting task is dropped (the
/// controller stopped).
struct ShardParentsSeries {
    metrics: Arc<Metrics>,
    controller: String,
}

impl Drop for ShardParentsSeries {
    fn drop(&mut self) {
        self.metrics.forget_shard_parents(&self.controller);
    }
}
