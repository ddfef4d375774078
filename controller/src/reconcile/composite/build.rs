//! Building a [`CompositeState`] from a CompositeController object: resolve the parent and child
//! resources, start (or share) their watches, read list rules from child CRDs, and make the hook
//! clients. The result is everything one sync reads.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::Value;

use crate::api::{CompositeController, Hook};
use crate::hook::client::LocalHook;
use crate::hook::{HookClient, HookError};
use crate::object::meta_str;
use crate::ops::metrics::{ControllerType, HookKind};
use crate::reconcile::children::{
    ChildRule, Children, checked_field_rules, list_rules, schema_atomic_lists,
};
use crate::reconcile::core::{Context, SyncError, Writer};
use crate::reconcile::decide::{ChildOwnership, ChildType};
use crate::reconcile::memory::ChildMemory;
use crate::reconcile::rollout::{self, RollingRule, RollingRules};
use crate::runtime::cache::Informer;
use crate::runtime::resources::{Resolved, ResourceError};
use crate::runtime::selector;

/// Why a controller could not be built.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// The `kmeta.dev/apply-strategy` annotation names no strategy.
    #[error(transparent)]
    ApplyStrategy(crate::reconcile::apply::ApplyAnnotationError),
    /// A resource is not served (yet).
    #[error(transparent)]
    Resource(#[from] ResourceError),
    /// A child type's CRD could not be read for its list markers.
    #[error(transparent)]
    Schema(#[from] crate::reconcile::children::SchemaReadError),
    /// A child type's field rules are refused, or its schema could not be read for them.
    #[error(transparent)]
    FieldRules(#[from] crate::reconcile::children::FieldRulesError),
    /// A hook is misconfigured or its credentials are unreadable.
    #[error(transparent)]
    Hook(#[from] HookError),
    /// The parent resource has no status subresource.
    #[error(
        "parent resource {resource} in {api_version} has no status subresource; kmeta (like Metacontroller) requires one, enable `subresources.status` in the CRD"
    )]
    NoStatusSubresource {
        /// apiVersion.
        api_version: String,
        /// Plural.
        resource: String,
    },
    /// No sync hook.
    #[error("spec.hooks.sync is required")]
    NoSyncHook,
    /// The CompositeController could not be encoded for hook requests.
    #[error("encoding the CompositeController for hook requests: {0}")]
    Encode(#[from] serde_json::Error),
}

/// The hook clients of one CompositeController.
pub struct Hooks {
    /// The sync hook.
    pub sync: HookClient,
    /// The finalize hook, if declared.
    pub finalize: Option<HookClient>,
    /// The customize hook, if declared.
    pub customize: Option<HookClient>,
}

/// Rolling updates of a controller with a `RollingRecreate`/`RollingInPlace` child type: the
/// ControllerRevision resource, its watch and the rolling child types.
pub struct Revisions {
    /// `controllerrevisions.metacontroller.k8s.io`.
    pub resolved: Resolved,
    /// The shared ControllerRevision watch.
    pub informer: Arc<Informer>,
    /// Rolling child types by (group, kind).
    pub rules: RollingRules,
}

/// The ControllerRevision resource kmeta stores revisions as.
const REVISIONS_API_VERSION: &str = "metacontroller.k8s.io/v1alpha1";
const REVISIONS_RESOURCE: &str = "controllerrevisions";

/// Rolling updates, when some child type of `cc` uses a rolling strategy (as Metacontroller, no
/// ControllerRevision is read or written otherwise).
fn resolve_revisions(
    ctx: &Context,
    cc: &CompositeController,
    children: &HashMap<String, ChildRule>,
    splittable: bool,
) -> Result<Option<Revisions>, BuildError> {
    let mut rules = RollingRules::new();
    for rule in cc.spec.child_rules() {
        let Some(strategy) = &rule.update_strategy else {
            continue;
        };
        let method = strategy.method.unwrap_or_default();
        if !rollout::is_rolling(method) {
            continue;
        }
        let r = ctx.resources.get(&rule.api_version, &rule.resource)?;
        let options = children
            .get(&r.group_key())
            .map(|c| c.options.clone())
            .unwrap_or_default();
        let conditions = strategy
            .status_checks
            .as_ref()
            .and_then(|s| s.conditions.clone())
            .unwrap_or_default();
        let key = (r.api.group.clone(), r.api.kind.clone());
        rules.insert(
            key,
            RollingRule {
                method,
                conditions,
                options,
            },
        );
    }
    if rules.is_empty() {
        return Ok(None);
    }
    let resolved = ctx
        .resources
        .get(REVISIONS_API_VERSION, REVISIONS_RESOURCE)?;
    Ok(Some(Revisions {
        informer: ctx.informers.get_or_split(&resolved, splittable),
        resolved,
        rules,
    }))
}

/// Everything one sync of a composite parent reads and the state it keeps between syncs: the
/// resolved parent and children, their watches, the hooks and the caches. It knows nothing of
/// the work queue or the triggers that feed it.
pub struct CompositeState {
    /// Shared context.
    pub ctx: Arc<Context>,
    /// The CompositeController's name.
    pub name: String,
    /// The CompositeController as sent in hook requests (`controller`).
    pub cc_json: Value,
    /// [`CompositeState::cc_json`] encoded once: the sync requests copy it.
    pub cc_raw: Box<serde_json::value::RawValue>,
    /// The CompositeController.
    pub cc: CompositeController,
    /// The parent resource.
    pub parent: Resolved,
    /// Parent watch.
    pub parents: Arc<Informer>,
    /// Child rules by `<Kind>.<apiVersion>`.
    pub children: HashMap<String, ChildRule>,
    /// Declared child types for validation.
    pub declared: HashMap<String, ChildType>,
    /// Declared group keys in spec order.
    pub child_keys: Vec<String>,
    /// Hooks.
    pub hooks: Hooks,
    /// Rolling updates, when a child type uses a rolling strategy.
    pub revisions: Option<Revisions>,
    /// What it remembers between syncs about the children it manages.
    pub memory: ChildMemory,
    /// This controller's last write of each parent (its status, or its finalizer after the
    /// finalize hook), by parent UID, until the watch shows it: a sync of a version older than
    /// the write waits for it. Its watch event requeues the parent as any change does (a hook
    /// sees its own committed status, as in Metacontroller), except a failed sync's condition
    /// write, which must not cut that parent's backoff short.
    pub own_status_writes: Mutex<HashMap<String, OwnStatusWrite>>,
    /// Parents whose failed sync's condition is being written, by UID, with the resourceVersions
    /// of the parent events that arrived meanwhile: the write's own event can come before its
    /// answer, and must not requeue the parent (nor pass an open hook circuit as a change).
    pub failure_writes_in_flight: Mutex<HashMap<String, Vec<String>>>,
    /// Each parent's last sync that wrote nothing, by its fingerprint.
    pub unchanged_syncs: Mutex<crate::reconcile::unchanged::UnchangedSyncs>,
    /// Why every parent is left alone, when `kmeta.dev/paused` is set on this CompositeController (read at
    /// build: the manager restarts the controller when that annotation changes).
    pub controller_pause: Option<String>,
    /// How its parents own their children (by label where an owner reference cannot hold one,
    /// for a CEL resource graph: `reconcile::decide::label_owned`).
    pub ownership: ChildOwnership,
    /// The finalizer it puts on its parents when it has a finalize hook.
    pub finalizer: String,
    /// The labels it puts on its parents with the finalizer (kro's, on an RGD's instances).
    pub instance_labels: std::collections::BTreeMap<String, String>,
}

/// This controller's last write of one parent, until its watch event arrives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnStatusWrite {
    /// The resourceVersion it wrote.
    pub written: String,
    /// The resourceVersions it replaced: the one the sync read, then any this controller wrote
    /// on the way whose event has not arrived yet (a status write before a finalizer removal).
    pub replaced: Vec<String>,
    /// Its watch event requeues the parent: a write the hook sees (not a failed sync's
    /// condition, not kmeta's sync record alone).
    pub requeue: bool,
    /// A sync waited for it: its event, though kmeta's own, brings the parent back.
    pub awaited: bool,
}

/// At most this many replaced versions are kept per parent (a chain of writes whose events are
/// lost stays bounded): 8 (kmeta's).
const OWN_WRITE_CHAIN: usize = 8;

/// What an own write of a parent changed, for what its watch event and later syncs do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OwnWrite {
    /// What the hook sees (its status, the finalizer): the event requeues the parent, and a sync
    /// of an older version waits for it.
    Shown,
    /// A failed sync's condition: no requeue (the parent keeps its backoff); a sync of an
    /// older version waits for it.
    FailureCondition,
    /// kmeta's sync record alone: the hook sees nothing new, so no requeue and no sync waits
    /// for it (Metacontroller makes no such write: no sync of its may be delayed by it).
    RecordOnly,
}

/// The record of a write that replaced `based_on` with `written`, following `earlier` (this
/// controller's previous write of the parent, if its event has not arrived).
pub fn next_own_write(
    earlier: Option<OwnStatusWrite>,
    based_on: &str,
    written: String,
    kind: OwnWrite,
) -> OwnStatusWrite {
    let mut replaced = match earlier {
        Some(e) => {
            let mut r = e.replaced;
            // a version the hook sees once shown needs no wait for a record written after it
            if kind != OwnWrite::RecordOnly {
                r.push(e.written);
            }
            r
        }
        None => Vec::new(),
    };
    if kind != OwnWrite::RecordOnly && !replaced.iter().any(|r| r == based_on) {
        replaced.push(based_on.to_owned());
    }
    if replaced.len() > OWN_WRITE_CHAIN {
        replaced.drain(..replaced.len() - OWN_WRITE_CHAIN);
    }
    OwnStatusWrite {
        written,
        replaced,
        requeue: kind == OwnWrite::Shown,
        awaited: false,
    }
}

impl std::fmt::Debug for CompositeState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompositeState")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// The resolved parent resource, which must have a status subresource.
fn resolve_parent(ctx: &Context, cc: &CompositeController) -> Result<Resolved, BuildError> {
    let pr = &cc.spec.parent_resource;
    let parent = ctx.resources.get(&pr.api_version, &pr.resource)?;
    if !parent.has_status {
        return Err(BuildError::NoStatusSubresource {
            api_version: pr.api_version.clone(),
            resource: pr.resource.clone(),
        });
    }
    Ok(parent)
}

/// The declared child types: rules by group key, types for validation, keys in spec order.
type ChildTypes = (
    HashMap<String, ChildRule>,
    HashMap<String, ChildType>,
    Vec<String>,
);

/// `splittable`: the parent is namespaced, so its children and orphans are in its namespace, and
/// their watches may be split by namespace ([`crate::runtime::cache::Informers::get_split`]).
async fn resolve_children(
    ctx: &Context,
    cc: &CompositeController,
    record: crate::reconcile::apply::LastApplied,
    splittable: bool,
) -> Result<ChildTypes, BuildError> {
    let mut children = HashMap::new();
    let mut declared = HashMap::new();
    let mut child_keys = Vec::new();
    let schema_atomic = schema_atomic_lists(cc.metadata.annotations.as_ref());
    for rule in cc.spec.child_rules() {
        let r = ctx.resources.get(&rule.api_version, &rule.resource)?;
        let method = rule
            .update_strategy
            .as_ref()
            .and_then(|s| s.method)
            .unwrap_or_default();
        let key = r.group_key();
        let namespaced = r.namespaced;
        declared.insert(key.clone(), ChildType { namespaced, method });
        let rules = list_rules(ctx, &r, schema_atomic).await?;
        let fields =
            checked_field_rules(ctx, &r, rule.field_rules.as_deref().unwrap_or_default()).await?;
        let drift = rule.drift_policy.unwrap_or_default();
        let options = dynapply::Options {
            record: crate::reconcile::apply::records_last_applied(record, &rules, drift, method),
            rules,
            fields,
            ..dynapply::Options::default()
        };
        child_keys.push(key.clone());
        let informer = ctx.informers.get_or_split(&r, splittable);
        children.insert(
            key,
            ChildRule {
                informer,
                resolved: r,
                method,
                options,
                drift,
                memo_salt: crate::reconcile::children::next_memo_salt(),
            },
        );
    }
    Ok((children, declared, child_keys))
}

async fn hook_client(
    ctx: &Context,
    cc: &CompositeController,
    name: &str,
    which: HookKind,
    hook: &Hook,
) -> Result<HookClient, HookError> {
    let eps = cc.spec.endpoint_configs.as_deref().unwrap_or_default();
    let client = HookClient::new(&ctx.client, which, hook, eps, &ctx.config.hook).await?;
    let metrics = ctx.wiring.metrics.clone();
    Ok(client.with_metrics(metrics, ControllerType::Composite, name))
}

async fn hook_clients(
    ctx: &Context,
    cc: &CompositeController,
    name: &str,
) -> Result<Hooks, BuildError> {
    let spec = &cc.spec;
    let sync = match spec.sync_hook() {
        Some(h) => hook_client(ctx, cc, name, HookKind::Sync, h).await?,
        None => return Err(BuildError::NoSyncHook),
    };
    // a CEL resource graph deletes its label-owned children when its parent is deleted: its
    // sync hook answers the finalize requests too when no finalize hook is declared
    let graph = spec.sync_hook().filter(|h| h.cel.is_some());
    let finalize = match spec.finalize_hook().or(graph) {
        Some(h) => Some(hook_client(ctx, cc, name, HookKind::Finalize, h).await?),
        None => None,
    };
    let customize = match spec.customize_hook() {
        Some(h) => Some(hook_client(ctx, cc, name, HookKind::Customize, h).await?),
        None => None,
    };
    Ok(Hooks {
        sync,
        finalize,
        customize,
    })
}

/// The Rust functions that answer a CompositeController's hooks in this process, instead of its
/// webhooks (kmeta used as a library).
#[derive(Clone)]
pub struct LocalHooks {
    /// The sync hook.
    pub sync: LocalHook,
    /// The finalize hook, if any.
    pub finalize: Option<LocalHook>,
    /// The customize hook, if any.
    pub customize: Option<LocalHook>,
}

/// In-process hook clients: each with the version and decoding the spec declares for that hook
/// (the defaults when it declares none), counted in the metrics under `name`.
fn local_hook_clients(
    ctx: &Context,
    cc: &CompositeController,
    name: &str,
    local: LocalHooks,
) -> Result<Hooks, BuildError> {
    let spec = &cc.spec;
    let client = |which: HookKind, declared: Option<&Hook>, f: LocalHook| {
        let default = Hook::default();
        HookClient::in_process(which, declared.unwrap_or(&default), f)
            .map(|c| c.with_metrics(ctx.wiring.metrics.clone(), ControllerType::Composite, name))
    };
    Ok(Hooks {
        sync: client(HookKind::Sync, spec.sync_hook(), local.sync)?,
        finalize: match local.finalize {
            Some(f) => Some(client(HookKind::Finalize, spec.finalize_hook(), f)?),
            None => None,
        },
        customize: match local.customize {
            Some(f) => Some(client(HookKind::Customize, spec.customize_hook(), f)?),
            None => None,
        },
    })
}

impl CompositeState {
    /// `spec.generateSelector` (default false): children are selected by their
    /// `controller-uid` label instead of the parent's `spec.selector`.
    pub fn generate_selector(&self) -> bool {
        self.cc.spec.generate_selector.unwrap_or(false)
    }

    /// Resolves resources, starts (or shares) watches and builds hook clients.
    pub async fn build(
        ctx: Arc<Context>,
        cc: CompositeController,
    ) -> Result<CompositeState, BuildError> {
        let name = cc.metadata.name.clone().unwrap_or_default();
        let hooks = hook_clients(&ctx, &cc, &name).await?;
        Self::build_with(ctx, cc, hooks).await
    }

    /// Like [`CompositeState::build`], with the hooks answered by Rust functions in this process.
    pub async fn build_in_process(
        ctx: Arc<Context>,
        cc: CompositeController,
        local: LocalHooks,
    ) -> Result<CompositeState, BuildError> {
        let name = cc.metadata.name.clone().unwrap_or_default();
        let hooks = local_hook_clients(&ctx, &cc, &name, local)?;
        Self::build_with(ctx, cc, hooks).await
    }

    /// Resolves resources and starts (or shares) watches, with the hook clients given.
    async fn build_with(
        ctx: Arc<Context>,
        cc: CompositeController,
        hooks: Hooks,
    ) -> Result<CompositeState, BuildError> {
        let name = cc.metadata.name.clone().unwrap_or_default();
        let strategy = crate::reconcile::apply::strategy_for(
            cc.metadata.annotations.as_ref(),
            ctx.config.apply_strategy,
        )
        .map_err(BuildError::ApplyStrategy)?;
        let record =
            crate::reconcile::apply::last_applied_for(cc.metadata.annotations.as_ref(), strategy)
                .map_err(BuildError::ApplyStrategy)?;
        let parent = resolve_parent(&ctx, &cc)?;
        let splittable = parent.namespaced;
        let ownership = super::decide::child_ownership(&cc);
        // a label-owned child lies outside its parent's namespace: its kinds are watched
        // whole, never split by namespace
        let children_split = splittable && ownership == ChildOwnership::OwnerReferences;
        let (children, declared, child_keys) =
            resolve_children(&ctx, &cc, record, children_split).await?;
        let revisions = resolve_revisions(&ctx, &cc, &children, splittable)?;
        let cc_json =
            crate::hook::wire::controller_object(serde_json::to_value(&cc).unwrap_or(Value::Null));
        let cc_raw = serde_json::value::to_raw_value(&cc_json)?;
        let controller_pause = crate::reconcile::decide::controller_pause(
            "CompositeController",
            &name,
            cc.metadata.annotations.as_ref(),
        );
        Ok(CompositeState {
            finalizer: super::decide::parent_finalizer(&cc, ownership),
            instance_labels: super::decide::instance_labels(&cc, ownership),
            ownership,
            controller_pause,
            parents: ctx.informers.get_split(&parent),
            ctx,
            name,
            cc_json,
            cc_raw,
            cc,
            parent,
            children,
            declared,
            child_keys,
            hooks,
            revisions,
            memory: ChildMemory::default(),
            own_status_writes: Mutex::new(HashMap::new()),
            failure_writes_in_flight: Mutex::new(HashMap::new()),
            unchanged_syncs: Mutex::default(),
        })
    }

    /// The children as the shared child management sees them.
    pub fn child_set(&self, writer: Writer) -> Children<'_> {
        Children {
            writer,
            ctx: &self.ctx,
            controller: &self.name,
            rules: &self.children,
            memory: &self.memory,
            strategy: self.strategy(),
        }
    }

    /// How children are written: the controller's `kmeta.dev/apply-strategy`, else the
    /// manager's.
    pub fn strategy(&self) -> crate::reconcile::apply::ApplyStrategy {
        crate::reconcile::apply::strategy_for(
            self.cc.metadata.annotations.as_ref(),
            self.ctx.config.apply_strategy,
        )
        .unwrap_or(self.ctx.config.apply_strategy)
    }

    /// The identity the children of `parent` are written as (kmeta's own, or the ServiceAccount
    /// `spec.serviceAccountName` or `--default-service-account` names), and its client.
    pub fn writer(&self, parent: &Value) -> Result<Writer, SyncError> {
        let spec = &self.cc.spec;
        let sa = crate::reconcile::decide::ServiceAccountSpec {
            name: spec.service_account_name.as_deref(),
            namespace: spec.service_account_namespace.as_deref(),
        };
        Ok(self.ctx.identities.writer_for(sa, parent)?)
    }

    /// The `resyncAfterSeconds` of the parent's last sync that wrote nothing, when it had this
    /// fingerprint: this sync would write nothing either.
    pub fn known_unchanged(
        &self,
        parent: &Value,
        fingerprint: crate::reconcile::unchanged::Fingerprint,
    ) -> Option<f64> {
        self.unchanged_syncs
            .lock()
            .ok()?
            .resync_after(meta_str(parent, "uid"), fingerprint)
    }

    /// After a sync of `parent`: remembers its fingerprint when it wrote nothing (`Some`),
    /// forgets the parent's entry otherwise.
    pub fn remember_unchanged(
        &self,
        parent: &Value,
        fingerprint: Option<crate::reconcile::unchanged::Fingerprint>,
        resync_after: f64,
    ) {
        if let Ok(mut u) = self.unchanged_syncs.lock() {
            match fingerprint {
                Some(f) => u.remember(meta_str(parent, "uid"), f, resync_after),
                None => u.forget(meta_str(parent, "uid")),
            }
        }
    }

    /// Remembers that this controller wrote `parent` (the version the sync read) at
    /// resourceVersion `rv` (its status, or its finalizer); `kind`: what its watch event and
    /// later syncs do about it ([`OwnWrite`]).
    pub fn remember_status_write(&self, parent: &Value, rv: Option<String>, kind: OwnWrite) {
        let based_on = meta_str(parent, "resourceVersion");
        let Some(rv) = rv.filter(|rv| rv != based_on) else {
            return;
        };
        if let Ok(mut own) = self.own_status_writes.lock() {
            let uid = meta_str(parent, "uid");
            let earlier = own.remove(uid);
            let write = next_own_write(earlier, based_on, rv, kind);
            own.insert(uid.to_owned(), write);
        }
    }

    /// A failed sync's condition is about to be written to the parent with `uid`: its events are
    /// held until [`CompositeState::end_failure_write`].
    pub fn begin_failure_write(&self, uid: &str) {
        if let Ok(mut w) = self.failure_writes_in_flight.lock() {
            w.insert(uid.to_owned(), Vec::new());
        }
    }

    /// Whether this event of `parent` is held, a failure condition being written to it.
    pub fn hold_event(&self, parent: &Value) -> bool {
        let Ok(mut w) = self.failure_writes_in_flight.lock() else {
            return false;
        };
        match w.get_mut(meta_str(parent, "uid")) {
            Some(held) => {
                held.push(meta_str(parent, "resourceVersion").to_owned());
                true
            }
            None => false,
        }
    }

    /// The failure condition's write of the parent with `uid` ended (`written`: the version it
    /// stored, remembered already); whether an event held meanwhile was someone else's change, to
    /// be synced. A held event of the write itself is its watch event: its record is forgotten as
    /// [`CompositeState::own_status_write`] forgets it.
    pub fn end_failure_write(&self, uid: &str, written: Option<&str>) -> bool {
        let held = match self.failure_writes_in_flight.lock() {
            Ok(mut w) => w.remove(uid).unwrap_or_default(),
            Err(_) => return false,
        };
        let mut others = false;
        for rv in &held {
            if Some(rv.as_str()) == written {
                self.seen_own_write(uid, rv);
            } else {
                others = true;
            }
        }
        others
    }

    /// Whether `cached` is still the version this controller's last status write of it replaced:
    /// the watch has not shown that write yet (any other version is newer; see
    /// [`crate::reconcile::expectations::shown`]). The write is then marked awaited.
    pub fn status_write_unseen(&self, cached: &Value) -> bool {
        let Ok(mut own) = self.own_status_writes.lock() else {
            return false;
        };
        let Some(write) = own.get_mut(meta_str(cached, "uid")) else {
            return false;
        };
        let rv = meta_str(cached, "resourceVersion");
        let unseen = write.replaced.iter().any(|r| r == rv);
        write.awaited |= unseen;
        unseen
    }

    /// Whether this version of a parent is this controller's own last write (forgotten once
    /// seen): its record.
    pub fn own_status_write(&self, parent: &Value) -> Option<OwnStatusWrite> {
        self.seen_own_write(meta_str(parent, "uid"), meta_str(parent, "resourceVersion"))
    }

    /// The record of this controller's last write of the parent with `uid`, forgotten, when the
    /// watch showed it at version `rv`.
    fn seen_own_write(&self, uid: &str, rv: &str) -> Option<OwnStatusWrite> {
        let Ok(mut own) = self.own_status_writes.lock() else {
            return None;
        };
        if own.get(uid).is_none_or(|w| w.written != rv) {
            return None;
        }
        own.remove(uid)
    }

    /// Why kmeta leaves `parent` alone, when `kmeta.dev/paused` is set on it or on this
    /// CompositeController.
    pub fn pause_reason(&self, parent: &Value) -> Option<String> {
        crate::reconcile::decide::pause_reason(parent, self.controller_pause.as_deref())
    }

    /// Is this parent selected by `parentResource.labelSelector`?
    pub fn selected(&self, parent: &Value) -> Result<bool, SyncError> {
        match &self.cc.spec.parent_resource.label_selector {
            None => Ok(true),
            Some(sel) => Ok(selector::matches(sel, &selector::labels_of(parent))?),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_of_the_sync_record_alone_neither_requeues_nor_is_waited_for() {
        let shown = next_own_write(None, "5", "6".into(), OwnWrite::Shown);
        assert!(shown.requeue);
        assert_eq!(shown.replaced, ["5"], "a sync of version 5 waits for it");
        let failure = next_own_write(None, "5", "6".into(), OwnWrite::FailureCondition);
        assert!(!failure.requeue);
        assert_eq!(failure.replaced, ["5"], "waited for, without a requeue");
        let record = next_own_write(None, "5", "6".into(), OwnWrite::RecordOnly);
        assert!(!record.requeue);
        assert!(record.replaced.is_empty(), "no sync waits for it");
        // after a shown write whose event has not arrived, the version before it is still
        // waited for; the shown version itself needs no wait for the record
        let chained = next_own_write(Some(shown), "6", "7".into(), OwnWrite::RecordOnly);
        assert_eq!(chained.replaced, ["5"]);
    }
}
