//! The DecoratorController kind: a [`DecoratorRunner`] owns one [`DecoratorState`] (what a sync
//! reads), its work queue of targets and the triggers that feed it — target, attachment and
//! related watch events, relists and the resync period — and plugs [`sync::sync_target`] into the
//! shared [reconcile core](crate::reconcile::core). [`release`] frees the targets of a deleted
//! DecoratorController.

mod build;
pub mod decide;
mod release;
mod sync;

use std::sync::{Arc, Weak};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use crate::api::DecoratorController;
use crate::object::{ObjectView, meta_str};
use crate::reconcile::composite::RELIST_RESYNC_SPREAD;
use crate::reconcile::core::{
    self, Context, ParentTest, QueueKey, Reconciler, SyncError, Triggers,
};
use crate::reconcile::decide as shared;
use crate::reconcile::related::{self, Used};
use crate::runtime::cache::{Change, Watch};
use crate::runtime::compact::Compact;
use crate::runtime::queue::{Queue, Tenant};
use crate::runtime::resources::Resolved;

pub use build::{DecoratorBuildError, DecoratorState};
pub use release::{ensure_release_finalizer, needs_release, release_targets};

/// A target in the work queue: which of the decorator's resources, and the object's namespace
/// ("" when cluster-scoped) and name.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TargetKey {
    /// Index into [`DecoratorState::targets`].
    pub resource: usize,
    /// Namespace ("" when cluster-scoped).
    pub namespace: String,
    /// Name.
    pub name: String,
}

impl QueueKey for TargetKey {
    fn log_name(&self) -> String {
        if self.namespace.is_empty() {
            self.name.clone()
        } else {
            format!("{}/{}", self.namespace, self.name)
        }
    }
}

impl Tenant for TargetKey {
    fn tenant(&self) -> &str {
        &self.namespace
    }
}

fn target_key(resource: usize, obj: &Value) -> TargetKey {
    TargetKey {
        resource,
        namespace: meta_str(obj, "namespace").to_owned(),
        name: meta_str(obj, "name").to_owned(),
    }
}

/// A running DecoratorController: its [`DecoratorState`], work queue and triggers.
pub struct DecoratorRunner {
    /// What a sync reads.
    pub state: DecoratorState,
    /// Work queue of targets.
    pub queue: Queue<TargetKey>,
}

impl std::fmt::Debug for DecoratorRunner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DecoratorRunner")
            .field("name", &self.state.name)
            .finish_non_exhaustive()
    }
}

impl DecoratorRunner {
    /// Resolves resources, starts (or shares) watches, builds hook clients, and puts the
    /// release finalizer on the DecoratorController when it has a finalize hook.
    pub async fn build(
        ctx: Arc<Context>,
        dc: DecoratorController,
    ) -> Result<DecoratorRunner, DecoratorBuildError> {
        let d = DecoratorState::build(ctx, dc).await?;
        if d.hooks.finalize.is_some() {
            ensure_release_finalizer(&d.ctx, &d.dc).await?;
        }
        Ok(DecoratorRunner {
            state: d,
            queue: Queue::default(),
        })
    }

    /// Enqueues `obj` of target resource `resource` when it is a target.
    fn enqueue_if_target(&self, resource: usize, obj: &Value) {
        if let Some(rule) = self.state.targets.get(resource)
            && decide::is_target(&rule.selector, obj, &self.state.finalizer)
        {
            self.queue.add(target_key(resource, obj));
        }
    }

    fn on_target_change(&self, resource: usize, change: &Change) {
        match change {
            Change::Applied { old, new } => {
                let ignore = self
                    .state
                    .targets
                    .get(resource)
                    .is_some_and(|r| r.ignore_status_changes);
                if ignore
                    && let Some(old) = old
                    && !shared::parent_update_relevant(old, new)
                {
                    return;
                }
                self.enqueue_if_target(resource, new);
            }
            Change::Deleted(old) => {
                self.queue.forget(&target_key(resource, old));
                self.state.memory.forget_owner(meta_str(old, "uid"));
                if let Ok(mut c) = self.state.ctx.contests.lock() {
                    c.forget(&self.state.name, meta_str(old, "uid"));
                }
                self.state
                    .ctx
                    .config
                    .metrics
                    .parent_gone(&self.state.name, meta_str(old, "uid"));
            }
        }
    }

    /// Enqueues the target that controls `child`, if it is one of ours.
    fn enqueue_for_attachment(&self, child: &Compact) {
        let Some(r) = child.controller() else {
            return;
        };
        let field = |f: &str| match f {
            "name" => r.name,
            "uid" => r.uid,
            _ => "",
        };
        let group = r.api_version.rsplit_once('/').map_or("", |(g, _)| g);
        for (i, rule) in self.state.targets.iter().enumerate() {
            if rule.resolved.api.kind != r.kind || rule.resolved.api.group != group {
                continue;
            }
            let ns = if rule.resolved.namespaced {
                child.namespace()
            } else {
                ""
            };
            if let Some(t) = rule.informer.get(ns, field("name"))
                && meta_str(&t, "uid") == field("uid")
            {
                self.enqueue_if_target(i, &t);
            }
        }
    }

    fn on_attachment_change(&self, change: &Change<Compact>) {
        match change {
            Change::Applied { old, new } => {
                if old
                    .as_ref()
                    .is_some_and(|o| o.resource_version() == new.resource_version())
                {
                    return;
                }
                let owner = |o: &Compact| o.controller().map(|c| c.uid.to_owned());
                if let Some(o) = old
                    && owner(o) != owner(new)
                {
                    self.enqueue_for_attachment(o);
                }
                self.state.memory.child_seen(new, false);
                self.enqueue_for_attachment(new);
            }
            Change::Deleted(old) => {
                self.state.memory.child_seen(old, true);
                self.enqueue_for_attachment(old);
            }
        }
    }

    fn enqueue_all(&self) {
        self.enqueue_where(&|_, _| true);
    }

    /// Whether `t`, cached by `rule`, is a target that `mine` accepts.
    fn accepts(&self, rule: &build::TargetRule, t: &Value, mine: ParentTest<'_>) -> bool {
        mine(meta_str(t, "namespace"), meta_str(t, "uid"))
            && decide::is_target(&rule.selector, t, &self.state.finalizer)
    }

    /// The cached targets (with their target resource's index) `mine` accepts.
    fn targets_where(&self, mine: ParentTest<'_>) -> Vec<(usize, Arc<Value>)> {
        let mut targets = Vec::new();
        for (i, rule) in self.state.targets.iter().enumerate() {
            for t in rule.informer.list() {
                if self.accepts(rule, &t, mine) {
                    targets.push((i, t));
                }
            }
        }
        targets
    }

    /// How many targets `mine` accepts, counted in place.
    fn count_where(&self, mine: ParentTest<'_>) -> usize {
        let rules = self.state.targets.iter();
        rules
            .map(|rule| rule.informer.count(|t| self.accepts(rule, t, mine)))
            .sum()
    }

    /// Every target `mine` accepts.
    fn enqueue_where(&self, mine: ParentTest<'_>) {
        for (i, t) in self.targets_where(mine) {
            self.queue.add(target_key(i, &t));
        }
    }

    /// After a relist: every target, spread over up to [`RELIST_RESYNC_SPREAD`] (as composite).
    fn enqueue_all_jittered(&self) {
        use rand::Rng as _;
        let mut rng = rand::rng();
        let spread = RELIST_RESYNC_SPREAD.as_millis() as u64;
        for (i, t) in self.targets_where(&|_, _| true) {
            let delay = Duration::from_millis(rng.random_range(0..=spread));
            self.queue.add_after(target_key(i, &t), delay);
        }
    }

    /// A related object changed: enqueue the targets whose cached customize rules read its
    /// resource.
    fn on_related_change(&self, r: &Resolved) {
        let uids = related::parents_reading(&self.state.memory.customize_cache, r);
        if uids.is_empty() {
            return;
        }
        for (i, rule) in self.state.targets.iter().enumerate() {
            for t in rule.informer.list() {
                if uids.contains(meta_str(&t, "uid")) {
                    self.enqueue_if_target(i, &t);
                }
            }
        }
    }

    /// Listens to the related watches a sync subscribed to first, for as long as this
    /// controller exists.
    fn listen_related(self: &Arc<Self>, used: Used) {
        for (resolved, rx) in used.subscribed {
            let weak: Weak<DecoratorRunner> = Arc::downgrade(self);
            tokio::spawn(listen(weak, resolved, rx));
        }
    }

    /// Waits until every target and attachment watch has listed once (readiness).
    pub async fn wait_watches_synced(&self) {
        for watch in self.watches() {
            watch.wait_synced().await;
        }
    }

    /// Runs the triggers and the workers until `stop` is cancelled; then stops taking work and
    /// returns once the syncs in flight have finished.
    pub async fn run(self: Arc<Self>, stop: CancellationToken) {
        let triggers = self.triggers();
        core::run(self, triggers, stop).await;
    }

    /// Target events, attachment events, relists and the resync period, each enqueueing
    /// targets.
    fn triggers(self: &Arc<Self>) -> Triggers {
        let mut t = Triggers::default();
        for (i, rule) in self.state.targets.iter().enumerate() {
            let rx = rule.informer.subscribe();
            let (start, informer) = (self.clone(), rule.informer.clone());
            t.spawn(async move {
                informer.wait_synced().await;
                for obj in informer.list() {
                    start.enqueue_if_target(i, &obj);
                }
            });
            let (on, lag) = (self.clone(), self.clone());
            t.watch_receiver(
                rx,
                move |c| on.on_target_change(i, c),
                move || lag.enqueue_all(),
            );
        }
        for rule in self.state.attachments.values() {
            let (on, lag) = (self.clone(), self.clone());
            t.watch(
                &rule.informer,
                move |c| on.on_attachment_change(c),
                move || lag.enqueue_all(),
            );
        }
        for inf in self.watches() {
            let dr = self.clone();
            let mut lists = inf.lists();
            t.spawn(async move {
                if lists.wait_for(|n| *n >= 1).await.is_err() {
                    return;
                }
                lists.borrow_and_update();
                while lists.changed().await.is_ok() {
                    dr.enqueue_all_jittered();
                }
            });
        }
        let dr = self.clone();
        t.on_shard_gains(&self.state.ctx, move |gained| dr.enqueue_where(gained));
        let dr = self.clone();
        t.count_shard_parents(&self.state.ctx, &self.state.name, move |mine| {
            dr.count_where(mine)
        });
        if let Some(secs) = self.state.dc.spec.resync_period_seconds {
            let period = Duration::from_secs(u64::from(secs.max(1).unsigned_abs()));
            let dr = self.clone();
            t.every(period, move || dr.enqueue_all());
        }
        t
    }
}

async fn listen(
    weak: Weak<DecoratorRunner>,
    resolved: Resolved,
    mut rx: broadcast::Receiver<Change>,
) {
    while rx.recv().await.is_ok() || !rx.is_empty() {
        let Some(dr) = weak.upgrade() else { break };
        dr.on_related_change(&resolved);
    }
}

impl Reconciler for DecoratorRunner {
    type Key = TargetKey;

    fn name(&self) -> &str {
        &self.state.name
    }

    fn context(&self) -> &Arc<Context> {
        &self.state.ctx
    }

    fn queue(&self) -> &Queue<TargetKey> {
        &self.queue
    }

    fn cached(&self, key: &TargetKey) -> Option<Arc<Value>> {
        self.state
            .targets
            .get(key.resource)?
            .informer
            .get(&key.namespace, &key.name)
    }

    fn watches(&self) -> Vec<Arc<dyn Watch>> {
        self.state
            .targets
            .iter()
            .map(|t| t.informer.clone() as Arc<dyn Watch>)
            .chain(
                self.state
                    .attachments
                    .values()
                    .map(|a| a.informer.clone() as Arc<dyn Watch>),
            )
            .collect()
    }

    async fn sync(self: &Arc<Self>, key: &TargetKey) -> Result<Option<Duration>, SyncError> {
        let Some(rule) = self.state.targets.get(key.resource) else {
            return Ok(None);
        };
        let mut used = Used::default();
        let target = (key.namespace.as_str(), key.name.as_str());
        let result = sync::sync_target(&self.state, rule, target, &mut used).await;
        self.listen_related(used);
        result
    }

    /// Nothing beyond the core's `SyncError` event and metric: a target is not this
    /// controller's object, so no condition is written to its status (as Metacontroller).
    async fn report_failure(&self, _target: &Value, _message: &str) -> Result<(), SyncError> {
        Ok(())
    }
}
