//! The DecoratorController kind: a [`DecoratorRunner`] owns one [`DecoratorState`] (what a sync
//! reads), its work queue of targets and the triggers that feed it — target, attachment and
//! related watch events, relists and the resync period — and plugs [`sync::sync_target`] into the
//! shared [reconcile core](crate::reconcile::core). [`release`] frees the targets of a deleted
//! DecoratorController.

mod build;
pub mod decide;
mod release;
mod sync;

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::api::DecoratorController;
use crate::object::{ObjectView, meta_str};
use crate::reconcile::core::{self, Context, QueueKey, Reconciler, SyncError};
use crate::reconcile::decide as shared;
use crate::reconcile::memory::ChildMemory;
use crate::reconcile::related::Used;
use crate::reconcile::triggers::{self, ParentTest, Parents, Triggers};
use crate::runtime::cache::{Change, Watch};
use crate::runtime::compact::Compact;
use crate::runtime::queue::{Priority, Queue, Tenant};

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

    /// Enqueues `obj` of target resource `resource` when it is a target, at `priority` (low:
    /// the controller's start).
    fn enqueue_if_target(&self, resource: usize, obj: &Value, priority: Priority) {
        if let Some(rule) = self.state.targets.get(resource)
            && decide::is_target(&rule.selector, obj, &self.state.finalizer)
        {
            self.queue.add_at(target_key(resource, obj), None, priority);
        }
    }

    /// A target changed. During its watch's start (`priority` low) the event of a target the
    /// list brought schedules nothing: the start queues every cached target once it is over, one
    /// sync each. A target the watch held already and every event after the start: normal.
    fn on_target_change(&self, resource: usize, change: &Change, priority: Priority) {
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
                if priority == Priority::Normal || old.is_some() {
                    self.enqueue_if_target(resource, new, Priority::Normal);
                }
            }
            Change::Deleted(old) => {
                self.queue.forget_gone(&target_key(resource, old));
                self.state.memory.forget_owner(meta_str(old, "uid"));
                if let Ok(mut c) = self.state.ctx.child_writes.contests.lock() {
                    c.forget(&self.state.name, meta_str(old, "uid"));
                }
                self.state
                    .ctx
                    .wiring
                    .metrics
                    .parent_gone(&self.state.name, meta_str(old, "uid"));
            }
        }
    }

    /// Enqueues the target that controls `child`, if it is one of ours, at `priority`.
    fn enqueue_for_attachment(&self, child: &Compact, priority: Priority) {
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
                self.enqueue_if_target(i, &t, priority);
            }
        }
    }

    fn on_attachment_change(&self, change: &Change<Compact>, priority: Priority) {
        match change {
            Change::Applied { old, new } => {
                if old
                    .as_ref()
                    .is_some_and(|o| o.resource_version() == new.resource_version())
                {
                    return;
                }
                // an attachment the watch held already changed: someone's change, even in the
                // start
                let priority = match old {
                    Some(_) => Priority::Normal,
                    None => priority,
                };
                let owner = |o: &Compact| o.controller().map(|c| c.uid.to_owned());
                if let Some(o) = old
                    && owner(o) != owner(new)
                {
                    self.enqueue_for_attachment(o, priority);
                }
                self.state.memory.child_seen(new, false);
                self.enqueue_for_attachment(new, priority);
            }
            Change::Deleted(old) => {
                self.state.memory.child_seen(old, true);
                self.enqueue_for_attachment(old, priority);
            }
        }
    }

    /// Every target, at `priority` (low: the controller's start).
    fn enqueue_all(&self, priority: Priority) {
        for key in self.parents_where(&|_, _| true) {
            self.queue.add_at(key, None, priority);
        }
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

    /// Waits until every target and attachment watch has listed once (readiness).
    pub async fn wait_watches_synced(&self) {
        for watch in self.watches() {
            watch.wait_synced().await;
        }
    }

    /// Runs the triggers and the workers until `stop` is cancelled; then stops taking work and
    /// returns once the syncs in flight have finished.
    pub async fn run(self: Arc<Self>, stop: CancellationToken) {
        core::run(self, Self::triggers, stop).await;
    }

    /// Target events, attachment events, relists and the resync period, each enqueueing
    /// targets. The start (every target, once its watch has listed) and what the watches' first
    /// lists announce are scheduled at low priority, changes after them at normal
    /// ([`crate::reconcile::start`]).
    fn triggers(self: &Arc<Self>) -> Triggers {
        let period = triggers::resync_period(self.state.dc.spec.resync_period_seconds);
        let mut t = triggers::for_parents(self, period);
        for (i, rule) in self.state.targets.iter().enumerate() {
            let rx = rule.informer.subscribe();
            let (on, lag) = (self.clone(), self.clone());
            let (start, informer) = (self.clone(), rule.informer.clone());
            t.watch_from_start(
                rule.informer.clone(),
                rx,
                move |c, p| on.on_target_change(i, c, p),
                move |p| {
                    // during the start, its end queues every target
                    if p == Priority::Normal {
                        lag.enqueue_all(p);
                    }
                },
                move || {
                    for obj in informer.list() {
                        start.enqueue_if_target(i, &obj, Priority::Low);
                    }
                },
            );
        }
        for rule in self.state.attachments.values() {
            let (on, lag) = (self.clone(), self.clone());
            t.watch_from_start(
                rule.informer.clone(),
                rule.informer.subscribe(),
                move |c, p| on.on_attachment_change(c, p),
                move |p| lag.enqueue_all(p),
                || {},
            );
        }
        t
    }
}

impl Parents for DecoratorRunner {
    fn parents_where(&self, mine: ParentTest<'_>) -> Vec<TargetKey> {
        let targets = self.targets_where(mine).into_iter();
        targets.map(|(i, t)| target_key(i, &t)).collect()
    }

    fn count_where(&self, mine: ParentTest<'_>) -> usize {
        let rules = self.state.targets.iter();
        rules
            .map(|rule| rule.informer.count(|t| self.accepts(rule, t, mine)))
            .sum()
    }

    fn memory(&self) -> &ChildMemory {
        &self.state.memory
    }

    fn parent_watches(&self) -> Vec<Arc<dyn Watch>> {
        let targets = self.state.targets.iter();
        targets
            .map(|t| t.informer.clone() as Arc<dyn Watch>)
            .collect()
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
        triggers::listen_related(self, used);
        result
    }

    /// Nothing beyond the core's `SyncError` event and metric: a target is not this
    /// controller's object, so no condition is written to its status (as Metacontroller).
    async fn report_failure(&self, _target: &Value, _message: &str) -> Result<(), SyncError> {
        Ok(())
    }
}
