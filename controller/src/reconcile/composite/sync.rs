//! One sync of one parent, as named steps:
//! `ensure_finalizer → await_own_writes → claim_children → call_customize → call_hook (once per
//! revision with a rolling child type: [`super::revisions`]) → validate_desired →
//! manage_children → update_status → release_finalizer`.
//! Decisions come from [`crate::reconcile::decide`]; this module only reads caches and writes.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde_json::Value;

use super::build::{CompositeState, OwnWrite, Revisions};
use super::decide::{self as cdecide};
use super::parent::ParentRead;
use super::related::{Used, cache_key, call_customize};
use super::revisions;
use super::steps::{call_hook_raw, chosen_hook, parent_alive_cached, parent_alive_uncached};
use crate::hook::wire::SyncResponse;
use crate::object::{
    ObjectView, controller_ref, controller_uid, describe, has_finalizer, is_deleting, meta_str,
};
use crate::ops::events::Reason;
use crate::ops::metrics::ChildOpLabel;
use crate::reconcile::apply::ApplyStrategy;
use crate::reconcile::children::{self, ChildRule, manage_children};
use crate::reconcile::core::{SyncError, Writer, api_err};
use crate::reconcile::decide::{self, FinalizerAction, HookChoice};
use crate::reconcile::status;
use crate::reconcile::unchanged::{Fingerprint, Versions, child_mark};
use crate::runtime::cache::ObjKey;
use crate::runtime::compact::Compact;
use crate::runtime::kapi;
use crate::runtime::selector;

/// Syncs the parent at `key`; returns when to sync it again (if sooner than an event).
pub async fn sync_parent(
    c: &CompositeState,
    key: &ObjKey,
    used: &mut Used,
) -> Result<Option<Duration>, SyncError> {
    let Some((cached, record)) = c.parents.get_detached(&key.namespace, &key.name) else {
        return Ok(None);
    };
    let fin = c.finalizer.clone();
    let (read, finalizing) = match prepare(c, ParentRead::cached(cached, record), &fin).await? {
        Prepared::Sync { read, finalizing } => (read, finalizing),
        Prepared::Done(resync) => return Ok(resync),
    };
    // the steps up to the hook call read the parent's metadata and spec, never its record
    let parent = read.without_record();
    // before any child is read for the hook or written: a ServiceAccount that cannot be located
    // fails the sync here, and kmeta never writes as itself in its place
    let writer = c.writer(parent)?;
    await_own_writes(c, parent, &writer).await?;
    let generate = c.generate_selector();
    let selector = cdecide::parent_selector(parent, generate)?;
    let manage = decide::may_manage_children(parent, finalizing, &fin);
    // adoption in one write where the adopted children are written anyway (dynamic apply)
    let one_write = manage && !finalizing && c.revisions.is_none();
    let one_write = one_write && c.strategy() == ApplyStrategy::DynamicApply;
    let Claimed {
        observed,
        wrote: claim_wrote,
        adopting,
    } = claim_children(c, parent, &selector, &writer, one_write).await?;
    // the customize hook is sent the parent whole (a sync without one makes no copy)
    let related = match c.hooks.customize.is_some() {
        true => call_customize(c, read.whole(), &writer, used).await?,
        false => serde_json::Map::new(),
    };
    let hook_started = std::time::Instant::now();
    let (response, fingerprint) = match &c.revisions {
        // rolling updates, unless the children are left alone anyway (Metacontroller's test)
        Some(rev) if manage => {
            let input = (observed.as_slice(), &related);
            let response = call_revisions(c, rev, &read, &selector, input, finalizing).await?;
            (response, None)
        }
        _ => {
            // a sync that may write nothing: the parent as cached, its children left as claimed
            let may_skip = manage && !finalizing && !claim_wrote && adopting.is_empty();
            let may_skip = may_skip && read.is_cached();
            let answer = (observed.as_slice(), &related);
            match call_sync_hook(c, &read, answer, finalizing, may_skip).await? {
                Called::KnownUnchanged(resync) => return Ok(resync_after(resync)),
                Called::Answered(response, fingerprint) => (response, fingerprint),
            }
        }
    };
    let step = Step {
        writer: &writer,
        selector: &selector,
        finalizer: &fin,
        finalizing,
        hook_took: hook_started.elapsed(),
        related: decide::related_names(&related),
        adopting: &adopting,
    };
    let resync = response.resync_after_seconds;
    // past the hook call: the status compare and the writes read the parent whole
    let parent = read.whole();
    match apply_response(c, parent, observed, response, step).await? {
        Applied::Quiet => c.remember_unchanged(parent, fingerprint, resync),
        Applied::Wrote => c.remember_unchanged(parent, None, resync),
        Applied::ParentGone => return Ok(None),
    }
    Ok(resync_after(resync))
}

/// What the steps after the hook call need to know of the ones before it.
#[derive(Clone)]
struct Step<'a> {
    /// The identity children are written as.
    writer: &'a Writer,
    /// The selector the children must match.
    selector: &'a LabelSelector,
    /// This controller's finalizer.
    finalizer: &'a str,
    /// The finalize hook is called (not the sync hook).
    finalizing: bool,
    /// How long the hook calls took (for the sync record).
    hook_took: Duration,
    /// The related objects the hook was sent (for the sync record).
    related: Vec<String>,
    /// The orphans this sync adopts with its child writes (keys of observed children).
    adopting: &'a BTreeSet<String>,
}

/// What calling the hook (without rolling revisions) gave.
enum Called {
    /// The hook gave the answer of the parent's last sync, which wrote nothing, for the same
    /// parent and children: this sync would write nothing either
    /// (`docs/design/unchanged-syncs.md`). Its `resyncAfterSeconds`.
    KnownUnchanged(f64),
    /// The decoded answer, and its fingerprint when the sync may be remembered as unchanged.
    Answered(SyncResponse, Option<Fingerprint>),
}

/// Step: calls the sync or finalize hook with the observed children and related objects. With
/// `may_skip` (and not server-side apply, whose writes are the server's to judge), an answer
/// known to write nothing for this parent and these children ends the sync here.
async fn call_sync_hook(
    c: &CompositeState,
    read: &ParentRead,
    (observed, related): (&[Arc<Compact>], &serde_json::Map<String, Value>),
    finalizing: bool,
    may_skip: bool,
) -> Result<Called, SyncError> {
    let parent = read.without_record();
    let key = cache_key(parent);
    let may_skip = may_skip && c.strategy() != ApplyStrategy::ServerSideApply;
    // read while the children are at hand (the answer is hashed in when it comes)
    let versions = may_skip.then(|| Versions::of(parent, observed));
    let encoded = read.encoded();
    let body = call_hook_raw(c, &encoded, observed, related, finalizing, &key).await?;
    let fingerprint = versions.map(|v| Fingerprint::of_answer(&body, v));
    if let Some(resync) = fingerprint.and_then(|f| c.known_unchanged(parent, f)) {
        return Ok(Called::KnownUnchanged(resync));
    }
    let response = chosen_hook(c, finalizing).decode_sync(&body)?;
    Ok(Called::Answered(response, fingerprint))
}

/// Step: kmeta leaves a paused parent alone — no hook call, no child write, no finalizer change
/// — and says so with a `Paused` condition, and an event when the condition is set. Removing the
/// annotation is a change of the parent: its next sync writes the hook's status, without it.
async fn pause(
    c: &CompositeState,
    parent: &Value,
    why: &str,
) -> Result<Option<Duration>, SyncError> {
    let condition = decide::Condition::paused(why);
    if status::report_condition(&c.ctx, &c.parent, parent, condition)
        .await?
        .is_some()
    {
        let note = format!("Paused: {why}; no hook call and no child write until it is removed");
        c.ctx.event(parent, Reason::Paused, note).await;
    }
    Ok(None)
}

/// Step: waits while the watch has not shown this controller's last writes for `parent` — its
/// status, its children (`docs/design/created-children.md`).
async fn await_own_writes(
    c: &CompositeState,
    parent: &Value,
    writer: &Writer,
) -> Result<(), SyncError> {
    if c.status_write_unseen(parent) {
        let what = format!("the status written to {}", describe(parent));
        return Err(SyncError::AwaitingWatch(what));
    }
    children::await_written(&c.child_set(writer.clone()), parent).await
}

/// Step: the rolling-update syncs of [`revisions`], with the parent whole and the observed
/// children decoded.
async fn call_revisions(
    c: &CompositeState,
    rev: &Revisions,
    read: &ParentRead,
    selector: &LabelSelector,
    (observed, related): (&[Arc<Compact>], &serde_json::Map<String, Value>),
    finalizing: bool,
) -> Result<SyncResponse, SyncError> {
    let observed = values_of(observed)?;
    let parent = read.whole();
    revisions::sync_revisions(c, rev, parent, selector, &observed, related, finalizing).await
}

/// The hook's `resyncAfterSeconds` as a delay, when positive.
fn resync_after(seconds: f64) -> Option<Duration> {
    (seconds > 0.0)
        .then(|| Duration::try_from_secs_f64(seconds).ok())
        .flatten()
}

/// The observed children decoded whole, for the steps that decide about them.
fn values_of(observed: &[Arc<Compact>]) -> Result<Vec<Value>, SyncError> {
    observed
        .iter()
        .map(|c| c.value().map_err(SyncError::from))
        .collect()
}

/// A sync's observed children as its child management reads them: decoded whole, or
/// *settled* — a cached version that an earlier sync found to need no update for the very
/// desired object this sync wants (`Compact::settle`), left unparsed and unplanned
/// (docs/design/settled-children.md).
#[derive(Default)]
struct Seen {
    /// The decoded children.
    values: Vec<Value>,
    /// Each decoded child's key and cached version, in the order of `values`.
    cached: Vec<(String, Arc<Compact>)>,
    /// The keys of the settled children.
    settled: BTreeSet<String>,
}

impl Seen {
    /// Decodes the observed children but the settled ones (an orphan adopted by this sync's
    /// writes and a child being deleted are always decoded).
    fn split(
        c: &CompositeState,
        observed: Vec<Arc<Compact>>,
        desired: &BTreeMap<String, Value>,
        adopting: &BTreeSet<String>,
    ) -> Result<Seen, SyncError> {
        let mut seen = Seen::default();
        for child in observed {
            let key = decide::child_key_of(child.as_ref());
            let settled = !adopting.contains(&key)
                && !child.deleting()
                && mark_of(c, &key, desired).is_some_and(|m| child.is_settled(m));
            if settled {
                seen.settled.insert(key);
            } else {
                seen.values.push(child.value()?);
                seen.cached.push((key, child));
            }
        }
        Ok(seen)
    }

    /// Settles the decoded children whose update found nothing to change (`unchanged`, keys).
    fn settle(&self, c: &CompositeState, unchanged: &[String], desired: &BTreeMap<String, Value>) {
        for (key, child) in &self.cached {
            if unchanged.contains(key)
                && let Some(mark) = mark_of(c, key, desired)
            {
                child.settle(mark);
            }
        }
    }
}

/// The mark of the desired child `key` under its rule, when that rule may settle children.
fn mark_of(c: &CompositeState, key: &str, desired: &BTreeMap<String, Value>) -> Option<u64> {
    let gk = key.split(' ').next().unwrap_or_default();
    let rule = c.children.get(gk).filter(|r| r.may_settle(c.strategy()))?;
    Some(child_mark(rule.memo_salt, desired.get(key)?))
}

/// The record of this sync, its children to come: now, its trace and trigger, this replica.
fn new_record(c: &CompositeState, hook_took: Duration, related: Vec<String>) -> decide::SyncRecord {
    decide::SyncRecord {
        time: status::now_to_the_second(),
        trace_id: crate::hook::trace::current_trace().map(|t| t.to_string()),
        hook: Some(hook_took),
        children: Vec::new(),
        related,
        replica: c.ctx.config.reporting_instance.clone(),
        trigger: crate::reconcile::core::current_cause(),
    }
}

/// How a sync's answer was applied.
enum Applied {
    /// Nothing written, nothing reported.
    Quiet,
    /// Something was written or reported.
    Wrote,
    /// The parent was deleted while the hook was called: nothing created.
    ParentGone,
}

/// Steps after the hook call: validate the desired children, manage them, write the status,
/// release the finalizer when the finalize hook is done. The observed and desired children are dropped once managed: with many workers, syncs
/// waiting on their status write would otherwise hold them all.
async fn apply_response(
    c: &CompositeState,
    parent: &Value,
    observed: Vec<Arc<Compact>>,
    mut response: SyncResponse,
    step: Step<'_>,
) -> Result<Applied, SyncError> {
    let Step {
        writer,
        selector,
        finalizer: fin,
        finalizing,
        hook_took,
        related,
        adopting,
    } = step;
    let placing = decide::Placing {
        parent_namespaced: c.parent.namespaced,
        ownership: c.ownership,
    };
    let desired = decide::validate_desired_owned(
        parent,
        placing,
        &c.declared,
        selector,
        c.generate_selector(),
        std::mem::take(&mut response.children),
    )?;
    let seen = Seen::split(c, observed, &desired, adopting)?;
    // the answer is accepted: the events it asked for are published whatever the writes do
    c.ctx.hook_events(parent, &response.events).await;
    let mut quiet = true;
    let mut record = new_record(c, hook_took, related);
    if decide::may_manage_children(parent, finalizing, fin) {
        // a parent deleted since the sync began (the hook call takes a while) gets no new
        // children: they would only wait for the garbage collector
        if !finalizing
            && decide::creates_any((&seen.values, &seen.settled), &desired)
            && !parent_alive_cached(c, parent)
        {
            tracing::debug!("parent gone or being deleted: no children created");
            return Ok(Applied::ParentGone);
        }
        let children = c.child_set(writer.clone());
        let observed = (seen.values.as_slice(), adopting, &seen.settled);
        let managed = manage_children(&children, parent, observed, &desired).await?;
        seen.settle(c, &managed.unchanged, &desired);
        quiet = managed.quiet;
        record.children = managed.done;
        c.ctx
            .wiring
            .metrics
            .children(&c.name, meta_str(parent, "uid"), desired.len());
    }
    drop((seen, desired));
    quiet &= !write_status(c, parent, writer, response.status.as_ref(), &record).await?;
    let finalized = (finalizing, response.finalized);
    quiet &= !release_finalizer(c, parent, fin, finalized).await?;
    Ok(if quiet {
        Applied::Quiet
    } else {
        Applied::Wrote
    })
}

/// Where a sync of a parent stands before its children are read.
enum Prepared {
    /// Call the sync hook (or the finalize hook, `finalizing`) for the parent `read`: the
    /// cached version, or the one written when kmeta's finalizer (or kro's labels) was.
    Sync { read: ParentRead, finalizing: bool },
    /// Nothing more to do now (paused, not selected, gone), with the resync asked for.
    Done(Option<Duration>),
}

/// Step: whether `cached` is paused, has the finalizer it needs (`fin`, added or removed here)
/// and which hook, if any, syncs it.
async fn prepare(c: &CompositeState, cached: ParentRead, fin: &str) -> Result<Prepared, SyncError> {
    let view = cached.without_record();
    let selected = c.selected(view)?;
    if (selected || has_finalizer(view, fin))
        && let Some(why) = c.pause_reason(view)
    {
        return pause(c, cached.whole(), &why).await.map(Prepared::Done);
    }
    let written = match ensure_finalizer(c, &cached, fin).await? {
        Finalizer::Kept => None,
        Finalizer::Written(parent) => Some(parent),
        Finalizer::Gone => return Ok(Prepared::Done(None)),
    };
    let parent = written.as_deref().unwrap_or(view);
    let choice = decide::choose_hook(
        c.hooks.finalize.is_some(),
        is_deleting(parent),
        selected,
        has_finalizer(parent, fin),
    );
    let finalizing = match choice {
        HookChoice::Skip => return Ok(Prepared::Done(None)),
        HookChoice::Finalize => true,
        HookChoice::Sync => false,
    };
    let read = written.map_or(cached, ParentRead::written);
    Ok(Prepared::Sync { read, finalizing })
}

/// Step: the hook's `status` of `parent`, with the child conditions of its last child
/// management, `observedGeneration` and kmeta's `record`, written when it changed; the write is
/// remembered so the sync it triggers knows what it shows. True when written.
async fn write_status(
    c: &CompositeState,
    parent: &Value,
    writer: &Writer,
    status: Option<&Value>,
    record: &decide::SyncRecord,
) -> Result<bool, SyncError> {
    let hook_status = children::status_with_reports(&c.child_set(writer.clone()), parent, status);
    let hook_status = decide::with_handled_request(hook_status, parent);
    let (api, status) = (&c.parent, hook_status.as_ref());
    let written = status::update_status(&c.ctx, api, parent, status, Some(record)).await?;
    let wrote = written.is_some();
    // a write of kmeta's record alone shows the hook nothing new: no sync for it, none waits
    let generation = crate::object::meta(parent, "generation").and_then(Value::as_i64);
    let want = decide::desired_status(status, generation);
    let kind = match decide::hook_status_changed(parent, &want) {
        true => OwnWrite::Shown,
        false => OwnWrite::RecordOnly,
    };
    c.remember_status_write(parent, written, kind);
    Ok(wrote)
}

/// Step: removes the finalizer `fin` once the finalize hook said it is done (`finalized`: while
/// `finalizing`, the hook's `finalized`). True when removed.
async fn release_finalizer(
    c: &CompositeState,
    parent: &Value,
    fin: &str,
    (finalizing, finalized): (bool, bool),
) -> Result<bool, SyncError> {
    let action = decide::finalizer_after_hook(finalizing, finalized, has_finalizer(parent, fin));
    if action != FinalizerAction::Remove {
        return Ok(false);
    }
    let removed = status::set_finalizer(&c.ctx, &c.parent, parent, fin, false).await?;
    // waited for like the status: a sync of the version before it would call the finalize hook
    // once more, for a parent the server may have deleted already
    let rv = removed.map(|p| meta_str(&p, "resourceVersion").to_owned());
    c.remember_status_write(parent, rv, OwnWrite::Shown);
    Ok(true)
}

/// What [`ensure_finalizer`] did.
enum Finalizer {
    /// Nothing to write: the parent as read.
    Kept,
    /// Written: the version the write returned.
    Written(Arc<Value>),
    /// The parent is gone.
    Gone,
}

impl Finalizer {
    fn after_write(written: Option<Value>) -> Finalizer {
        written.map_or(Finalizer::Gone, |p| Finalizer::Written(Arc::new(p)))
    }
}

/// Step: add our finalizer when a finalize hook exists, remove it when none does (a write sends
/// the parent whole).
async fn ensure_finalizer(
    c: &CompositeState,
    read: &ParentRead,
    fin: &str,
) -> Result<Finalizer, SyncError> {
    let parent = read.without_record();
    let add = match decide::finalizer_before_hook(
        c.hooks.finalize.is_some(),
        is_deleting(parent),
        has_finalizer(parent, fin),
    ) {
        // kro's labels go with the finalizer, and come back if someone removes them
        FinalizerAction::Keep | FinalizerAction::Add
            if !is_deleting(parent) && decide::labels_missing(parent, &c.instance_labels) =>
        {
            let labels = &c.instance_labels;
            let whole = read.whole();
            let written =
                status::add_finalizer_and_labels(&c.ctx, &c.parent, whole, fin, labels).await?;
            return Ok(Finalizer::after_write(written));
        }
        FinalizerAction::Keep => return Ok(Finalizer::Kept),
        FinalizerAction::Add => true,
        FinalizerAction::Remove => false,
    };
    let written = status::set_finalizer(&c.ctx, &c.parent, read.whole(), fin, add).await?;
    Ok(Finalizer::after_write(written))
}

/// What claiming a parent's children found.
struct Claimed {
    /// The observed children: owned matching ones and adopted orphans.
    observed: Vec<Arc<Compact>>,
    /// An adoption or release was written.
    wrote: bool,
    /// Orphans adopted in memory only (their owner reference added, not written): the child
    /// writes after the hook call write it (`decide::with_adoptions`).
    adopting: BTreeSet<String>,
}

/// Step: observed children = owned matching children + adopted orphans; non-matching owned
/// children are released. With `one_write`, an orphan is adopted in memory and written with the
/// sync's child writes (one request instead of two); otherwise at once, as Metacontroller does.
async fn claim_children(
    c: &CompositeState,
    parent: &Value,
    selector: &LabelSelector,
    writer: &Writer,
    one_write: bool,
) -> Result<Claimed, SyncError> {
    let uid = meta_str(parent, "uid");
    let ns = c.parent.namespaced.then(|| meta_str(parent, "namespace"));
    let mut claimed = Claimed {
        observed: Vec::new(),
        wrote: false,
        adopting: BTreeSet::new(),
    };
    let mut parent_checked = false;
    for key in &c.child_keys {
        let Some(rule) = c.children.get(key) else {
            continue;
        };
        // only orphans carrying a label the selector requires can match
        let orphans = match selector::required_label(selector) {
            Some((k, v)) => rule.informer.orphans_labelled(ns, k, v),
            None => rule.informer.orphans(ns),
        };
        let candidates = rule
            .informer
            .owned_by(uid)
            .into_iter()
            .chain(orphans)
            .filter(|child| ns.is_none_or(|n| n == child.namespace()));
        let plan = cdecide::claim_children(parent, selector, candidates)?;
        claimed.observed.extend(plan.owned);
        claimed.wrote |= !plan.release.is_empty() || (!one_write && !plan.adopt.is_empty());
        if !plan.adopt.is_empty() && !parent_checked {
            if !parent_alive_uncached(c, parent).await? {
                return Ok(claimed);
            }
            parent_checked = true;
        }
        for orphan in plan.adopt {
            let orphan = orphan.value()?;
            let adopted = if one_write {
                claimed.adopting.insert(decide::child_key(&orphan));
                Some(decide::with_owner(&orphan, parent))
            } else {
                adopt(c, (rule, writer), parent, selector, orphan).await?
            };
            if let Some(adopted) = adopted {
                claimed
                    .observed
                    .push(Arc::new(Compact::from_value(adopted)?));
            }
        }
        for child in plan.release {
            release(c, (rule, writer), uid, selector, child.value()?).await?;
        }
        claimed.observed.extend(label_owned(c, rule, parent));
    }
    Ok(claimed)
}

/// The children of `rule`'s type `parent` owns by label (`decide::label_owned`): those carrying
/// its UID where an owner reference of it could not hold them, in any namespace. Observed as
/// they are: never adopted, never released (none for a controller owning by reference only).
fn label_owned(c: &CompositeState, rule: &ChildRule, parent: &Value) -> Vec<Arc<Compact>> {
    if c.ownership != decide::ChildOwnership::LabelsWhereReferencesCannot {
        return Vec::new();
    }
    let uid = meta_str(parent, "uid");
    rule.informer
        .orphans_labelled(None, decide::INSTANCE_ID_LABEL, uid)
        .into_iter()
        .filter(|child| decide::label_owned_by(parent, child.as_ref()))
        .collect()
}

/// Adopts an orphan that still matches the selector (re-checked on the live object); returns it
/// when it is now controlled by `parent`.
async fn adopt(
    c: &CompositeState,
    (rule, writer): (&ChildRule, &Writer),
    parent: &Value,
    selector: &LabelSelector,
    orphan: Value,
) -> Result<Option<Value>, SyncError> {
    let api = kapi::api(
        &writer.client,
        &rule.resolved,
        meta_str(&orphan, "namespace"),
    );
    let (name, uid) = (orphan.name().to_owned(), orphan.uid().to_owned());
    let what = describe(&orphan);
    // the first attempt writes the cached copy (409 when stale, then read fresh)
    let adopted = kapi::atomic_update_from(&api, Some(orphan), &name, &uid, false, |o| {
        let still_orphan = controller_ref(o).is_none();
        let matches = selector::matches(selector, &selector::labels_of(o)).unwrap_or(false);
        if still_orphan && matches {
            *o = decide::with_owner(o, parent);
            true
        } else {
            false
        }
    })
    .await
    .map_err(api_err(format!("adopting {what}")))?;
    if adopted.written().is_some() {
        c.ctx.wiring.metrics.child_op(&c.name, ChildOpLabel::Adopt);
    }
    let uid = meta_str(parent, "uid");
    Ok(adopted.object().filter(|a| controller_uid(a) == Some(uid)))
}

/// Releases a child controlled by the parent with `uid` that no longer matches the selector
/// (re-checked on the live object).
async fn release(
    c: &CompositeState,
    (rule, writer): (&ChildRule, &Writer),
    uid: &str,
    selector: &LabelSelector,
    child: Value,
) -> Result<(), SyncError> {
    let api = kapi::api(
        &writer.client,
        &rule.resolved,
        meta_str(&child, "namespace"),
    );
    let (name, child_uid) = (child.name().to_owned(), child.uid().to_owned());
    let what = describe(&child);
    // the first attempt writes the cached copy (409 when stale, then read fresh)
    let released = kapi::atomic_update_from(&api, Some(child), &name, &child_uid, false, |o| {
        let ours = controller_uid(o) == Some(uid);
        let matches = selector::matches(selector, &selector::labels_of(o)).unwrap_or(true);
        if ours && !matches {
            *o = decide::without_owner(o, uid);
            true
        } else {
            false
        }
    })
    .await
    .map_err(api_err(format!("releasing {what}")))?;
    if released.written().is_some() {
        c.ctx
            .wiring
            .metrics
            .child_op(&c.name, ChildOpLabel::Release);
    }
    Ok(())
}
