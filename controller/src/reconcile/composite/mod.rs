//! The CompositeController kind: a [`CompositeRunner`] owns one [`CompositeState`] (what a sync
//! reads), its work queue and the triggers that feed it — parent, child and related watch events
//! and the resync period — and plugs [`sync::sync_parent`] into the shared
//! [reconcile core](crate::reconcile::core).

mod build;
pub(crate) mod decide;
mod parent;
mod related;
mod revisions;
mod selectors;
mod steps;
pub mod sync;

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::api::CompositeController;
use crate::object::{ObjectView, meta_str};
use crate::reconcile::core::{self, Context, Reconciler, SyncError};
use crate::reconcile::decide::{
    ChildOwnership, label_owned_by, labelled_owner, parent_update_relevant,
};
use crate::reconcile::memory::ChildMemory;
use crate::reconcile::status;
use crate::reconcile::triggers::{self, ParentTest, Parents, Triggers};
use crate::runtime::cache::{Change, ObjKey, Watch, obj_key};
use crate::runtime::compact::Compact;
use crate::runtime::queue::{Cause, Priority, Queue};

pub use build::{BuildError, CompositeState, LocalHooks};
pub use related::Used;
use selectors::ParentSelectors;

/// A running CompositeController: its [`CompositeState`], work queue and triggers.
pub struct CompositeRunner {
    /// What a sync reads.
    pub state: CompositeState,
    /// Work queue of parent keys.
    pub queue: Queue<ObjKey>,
    /// The parents' selectors, filed by label: which parents an orphan's event enqueues.
    selectors: Mutex<ParentSelectors>,
}

impl std::fmt::Debug for CompositeRunner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompositeRunner")
            .field("name", &self.state.name)
            .finish_non_exhaustive()
    }
}

impl CompositeRunner {
    /// Resolves resources, starts (or shares) watches and builds hook clients.
    pub async fn build(
        ctx: Arc<Context>,
        cc: CompositeController,
    ) -> Result<CompositeRunner, BuildError> {
        Ok(CompositeRunner {
            state: CompositeState::build(ctx, cc).await?,
            queue: Queue::default(),
            selectors: Mutex::default(),
        })
    }

    /// Like [`CompositeRunner::build`], with the hooks answered by Rust functions in this
    /// process (no webhook is called).
    pub async fn build_in_process(
        ctx: Arc<Context>,
        cc: CompositeController,
        local: LocalHooks,
    ) -> Result<CompositeRunner, BuildError> {
        Ok(CompositeRunner {
            state: CompositeState::build_in_process(ctx, cc, local).await?,
            queue: Queue::default(),
            selectors: Mutex::default(),
        })
    }

    /// Schedules, at `priority` (low: the controller's start), the parent that controls
    /// `child`, the instance that owns it by label, or every parent whose selector matches an
    /// orphan.
    fn enqueue_for_child(&self, child: &Compact, priority: Priority) {
        if let Some(r) = child.controller() {
            let group = r.api_version.rsplit_once('/').map_or("", |(g, _)| g);
            if r.kind != self.state.parent.api.kind || group != self.state.parent.api.group {
                return;
            }
            let ns = self.scope_of(child);
            if let Some(p) = self.state.parents.get(ns, r.name)
                && meta_str(&p, "uid") == r.uid
            {
                let key = ObjKey::new(ns, r.name);
                self.queue.add_at(key, Some(watched(child)), priority);
            }
            return;
        }
        if self.state.ownership == ChildOwnership::LabelsWhereReferencesCannot
            && let Some((ns, name, _)) = labelled_owner(child)
            && let Some(p) = self.state.parents.get(ns, name)
            && label_owned_by(&p, child)
        {
            // a label-owned child (`decide::label_owned`), by the rule a sync observes it by
            self.queue
                .add_at(ObjKey::new(ns, name), Some(watched(child)), priority);
            return;
        }
        let candidates = self.selectors().candidates(self.scope_of(child), child);
        let generate = self.state.generate_selector();
        for key in candidates {
            if let Some(p) = self.state.parents.get(&key.namespace, &key.name)
                && selectors::selects(&p, generate, child)
            {
                self.queue.add_at(key, Some(watched(child)), priority);
            }
        }
    }

    fn selectors(&self) -> std::sync::MutexGuard<'_, ParentSelectors> {
        self.selectors
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Where parents of `obj` (a parent itself, or a child) are: `obj`'s namespace for a
    /// namespaced parent resource, else "" — the scope parents are filed in.
    fn scope_of<'o>(&self, obj: &'o impl ObjectView) -> &'o str {
        if self.state.parent.namespaced {
            obj.namespace()
        } else {
            ""
        }
    }

    /// Keeps the filed selectors in step with a parent event.
    fn refile(&self, change: &Change) {
        let generate = self.state.generate_selector();
        match change {
            Change::Applied { old, new } => {
                let old = old.as_deref().map(|o| (self.scope_of(o), o));
                self.selectors()
                    .change(old, self.scope_of(new), new, generate);
            }
            Change::Deleted(old) => self.selectors().remove(self.scope_of(old), old, generate),
        }
    }

    /// Files every cached parent's selector afresh: at the start (a shared parent watch may
    /// have listed before this controller subscribed) and after parent events were lost to lag.
    fn refile_all(&self) {
        let generate = self.state.generate_selector();
        let parents = self.state.parents.list();
        let mut selectors = self.selectors();
        selectors.clear();
        for p in &parents {
            selectors.change(None, self.scope_of(p), p, generate);
        }
    }

    /// A parent changed. During the controller's start (`priority` low) the event of a parent
    /// the list brought schedules nothing: the start queues every cached parent once it is over,
    /// one sync each (as Metacontroller's queue deduplicates the adds of its start). A parent
    /// the watch held already (a change someone made) and every event after the start are
    /// scheduled at normal.
    fn on_parent_change(&self, change: &Change, priority: Priority) {
        self.refile(change);
        match change {
            Change::Applied { old, new } => {
                // this controller's own write requeues the parent like any change (a hook sees
                // its committed status: Metacontroller's `updateParentObject`), but a failed
                // sync's condition does not: that would defeat the parent's backoff
                if old.is_some() && self.state.hold_event(new) {
                    // a failed sync's condition is being written: decided once it is
                    return;
                }
                let mut cause = watched_value(new);
                if old.is_some()
                    && let Some(own) = self.state.own_status_write(new)
                {
                    if own.awaited {
                        // a sync waits for it, whatever `ignoreStatusChanges` says
                        self.queue.add(obj_key(new));
                        return;
                    }
                    if !own.requeue {
                        return;
                    }
                    cause = Cause::OwnStatus;
                }
                let ignore = self
                    .state
                    .cc
                    .spec
                    .parent_resource
                    .ignore_status_changes
                    .unwrap_or(false);
                if ignore
                    && let Some(old) = old
                    && !parent_update_relevant(old, new)
                {
                    return;
                }
                if priority == Priority::Normal || old.is_some() {
                    self.queue
                        .add_at(obj_key(new), Some(cause), Priority::Normal);
                }
            }
            Change::Deleted(old) => {
                let key = obj_key(old);
                self.queue.forget_gone(&key);
                self.state
                    .ctx
                    .wiring
                    .metrics
                    .parent_gone(&self.state.name, meta_str(old, "uid"));
                if let Ok(mut c) = self.state.ctx.child_writes.contests.lock() {
                    c.forget(&self.state.name, meta_str(old, "uid"));
                }
                self.state.memory.forget_owner(meta_str(old, "uid"));
                if let Ok(mut own) = self.state.own_status_writes.lock() {
                    own.remove(meta_str(old, "uid"));
                }
                if let Ok(mut u) = self.state.unchanged_syncs.lock() {
                    u.forget(meta_str(old, "uid"));
                }
            }
        }
    }

    /// A child changed; what it schedules is at `priority` (low: the controller's start).
    fn on_child_change(&self, change: &Change<Compact>, priority: Priority) {
        match change {
            Change::Applied { old, new } => {
                if old
                    .as_ref()
                    .is_some_and(|o| o.resource_version() == new.resource_version())
                {
                    return;
                }
                // a child the watch held already changed: someone's change, even in the start
                let priority = match old {
                    Some(_) => Priority::Normal,
                    None => priority,
                };
                let owner = |o: &Compact| {
                    let labelled = labelled_owner(o).map(|(_, _, uid)| uid.to_owned());
                    (o.controller().map(|c| c.uid.to_owned()), labelled)
                };
                if let Some(o) = old
                    && owner(o) != owner(new)
                {
                    self.enqueue_for_child(o, priority);
                }
                self.state.memory.child_seen(new, false);
                self.enqueue_for_child(new, priority);
            }
            Change::Deleted(old) => {
                self.state.memory.child_seen(old, true);
                self.enqueue_for_child(old, priority);
            }
        }
    }

    /// Every parent, at `priority`: low for the controller's start, normal after changes were
    /// lost (a receiver that fell behind).
    fn enqueue_all(&self, priority: Priority) {
        for p in self.state.parents.list() {
            self.queue
                .add_at(obj_key(&p), Some(Cause::Started), priority);
        }
    }

    /// Waits until the parent watch and every child watch have listed once (the manager's
    /// readiness signal).
    pub async fn wait_watches_synced(&self) {
        for watch in self.watches() {
            watch.wait_synced().await;
        }
    }

    /// Runs the triggers and the workers until `stop` is cancelled; then stops taking work and
    /// returns once the syncs in flight have finished (the caller bounds how long it waits).
    pub async fn run(self: Arc<Self>, stop: CancellationToken) {
        core::run(self, Self::triggers, stop).await;
    }

    /// Parent events, child events, and the resync period, each enqueueing parents. The start
    /// (every parent, once the parent watch has listed) and what the watches' first lists
    /// announce are scheduled at low priority, changes after them at normal
    /// ([`crate::reconcile::start`]).
    fn triggers(self: &Arc<Self>) -> Triggers {
        let period = triggers::resync_period(self.state.cc.spec.resync_period_seconds);
        let mut t = triggers::for_parents(self, period);
        let parents = self.state.parents.subscribe();
        self.refile_all();
        let (on, lag, start) = (self.clone(), self.clone(), self.clone());
        t.watch_from_start(
            self.state.parents.clone(),
            parents,
            move |c, p| on.on_parent_change(c, p),
            move |p| {
                lag.refile_all();
                // during the start, its end queues every parent
                if p == Priority::Normal {
                    lag.enqueue_all(p);
                }
            },
            move || start.enqueue_all(Priority::Low),
        );
        for rule in self.state.children.values() {
            let (on, lag) = (self.clone(), self.clone());
            t.watch_from_start(
                rule.informer.clone(),
                rule.informer.subscribe(),
                move |c, p| on.on_child_change(c, p),
                move |p| lag.enqueue_all(p),
                || {},
            );
        }
        t
    }
}

impl Parents for CompositeRunner {
    fn parents_where(&self, mine: ParentTest<'_>) -> Vec<ObjKey> {
        let parents = self.state.parents.list().into_iter();
        parents
            .filter(|p| mine(p.namespace(), p.uid()))
            .map(|p| obj_key(&p))
            .collect()
    }

    fn count_where(&self, mine: ParentTest<'_>) -> usize {
        self.state.parents.count(|p| mine(p.namespace(), p.uid()))
    }

    fn memory(&self) -> &ChildMemory {
        &self.state.memory
    }

    fn parent_watches(&self) -> Vec<Arc<dyn Watch>> {
        vec![self.state.parents.clone()]
    }
}

impl Reconciler for CompositeRunner {
    type Key = ObjKey;

    fn name(&self) -> &str {
        &self.state.name
    }

    fn context(&self) -> &Arc<Context> {
        &self.state.ctx
    }

    fn queue(&self) -> &Queue<ObjKey> {
        &self.queue
    }

    fn cached(&self, key: &ObjKey) -> Option<Arc<Value>> {
        self.state.parents.get(&key.namespace, &key.name)
    }

    fn watches(&self) -> Vec<Arc<dyn Watch>> {
        let parents: Arc<dyn Watch> = self.state.parents.clone();
        std::iter::once(parents)
            .chain(
                self.state
                    .children
                    .values()
                    .map(|rule| rule.informer.clone() as Arc<dyn Watch>),
            )
            .chain(
                self.state
                    .revisions
                    .iter()
                    .map(|r| r.informer.clone() as Arc<dyn Watch>),
            )
            .collect()
    }

    async fn sync(self: &Arc<Self>, key: &ObjKey) -> Result<Option<Duration>, SyncError> {
        let mut used = Used::default();
        let result = sync::sync_parent(&self.state, key, &mut used).await;
        triggers::listen_related(self, used);
        result
    }

    async fn report_failure(&self, parent: &Value, message: &str) -> Result<(), SyncError> {
        // the condition is written into the status as read, kmeta's sync record included
        let whole = self.state.parents.attached(parent);
        let parent = whole.as_ref().unwrap_or(parent);
        let uid = meta_str(parent, "uid");
        self.state.begin_failure_write(uid);
        let result =
            status::report_failure(&self.state.ctx, &self.state.parent, parent, message).await;
        let written = result.as_ref().ok().cloned().flatten();
        // remembered before the held events are released: one arriving in between is then
        // recognised as this write
        self.state.remember_status_write(
            parent,
            written.clone(),
            build::OwnWrite::FailureCondition,
        );
        if self.state.end_failure_write(uid, written.as_deref()) {
            self.queue.add(obj_key(parent));
        }
        result.map(|_| ())
    }
}

/// The cause of a sync a watch event on `child` brings.
fn watched(child: &Compact) -> Cause {
    let what = match child.namespace() {
        "" => format!("{} {}", child.kind(), child.name()),
        ns => format!("{} {ns}/{}", child.kind(), child.name()),
    };
    Cause::Watched(what.into())
}

/// The cause of a sync a watch event on the parent `obj` brings.
fn watched_value(obj: &Value) -> Cause {
    Cause::Watched(crate::object::describe(obj).into())
}
