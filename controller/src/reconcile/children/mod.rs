//! Child management, shared by every controller kind: executes the plan of
//! [`decide::plan_children`] — create, update (dynapply's three-way merge, skipping updates the
//! API server ignored before) and delete — and reports fields the server dropped.

use std::borrow::Borrow;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Instant;

use futures::StreamExt;
use serde_json::Value;

use crate::api::{ChildUpdateMethod, DriftPolicy};
use crate::hook::wire::group_key;
use crate::object::{ObjectView, controller_uid, describe, meta_str};

mod dynamic;
mod gate;
mod report;
mod rules;
mod ssa;

use dynamic::*;
use gate::*;
pub use report::status_with_reports;
use report::*;
pub use rules::*;
use ssa::*;

/// `metadata.<field>` as a string, if it is one.
fn meta<'v>(obj: &'v Value, field: &str) -> Option<&'v str> {
    crate::object::meta(obj, field).and_then(Value::as_str)
}
use crate::ops::events::Reason;
use crate::ops::metrics::ChildOpLabel;
use crate::reconcile::apply::{self, ApplyStrategy, ChildReport, ConflictDecision};
use crate::reconcile::core::{Context, SyncError, Writer};
use crate::reconcile::decide::{self, ChildOp};
use crate::reconcile::expectations::{self, Written};
use crate::reconcile::futile::{self};
use crate::reconcile::last_applied::{self};
use crate::reconcile::memory::ChildMemory;
use crate::runtime::cache::Informer;
use crate::runtime::compact::Compact;
use crate::runtime::kapi;
use crate::runtime::resources::Resolved;

/// A declared child type, resolved and watched.
pub struct ChildRule {
    /// The resolved resource.
    pub resolved: Resolved,
    /// The shared watch (children held compact).
    pub informer: Arc<Informer<Compact>>,
    /// Update method.
    pub method: ChildUpdateMethod,
    /// dynapply options with the list rules of this type.
    pub options: dynapply::Options,
    /// What to do when a child differs from what the hook wants.
    pub drift: DriftPolicy,
    /// This rule's own salt of the marks of settled children ([`next_memo_salt`]): a mark
    /// found under another rule (another controller, or this one before its configuration
    /// changed) never matches.
    pub memo_salt: u64,
}

impl ChildRule {
    /// Whether a child of this rule whose version needed no update may skip the next update
    /// check of the same desired object ([`crate::runtime::compact::Compact::settle`]): dynamic
    /// apply with the last-applied annotation and without field rules (whose reports read the
    /// live child).
    pub fn may_settle(&self, strategy: ApplyStrategy) -> bool {
        strategy == ApplyStrategy::DynamicApply
            && self.options.record
            && self.options.fields.is_empty()
    }
}

/// A salt no other child rule of this process has ([`ChildRule::memo_salt`]).
pub fn next_memo_salt() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// The children of one owner as a controller manages them: the declared types, and the updates
/// the API server ignored before (not to be sent again).
pub struct Children<'a> {
    /// Shared context.
    pub ctx: &'a Context,
    /// The controller's name (metric label).
    pub controller: &'a str,
    /// Child rules by `<Kind>.<apiVersion>`.
    pub rules: &'a HashMap<String, ChildRule>,
    /// What the controller remembers between syncs about the children it manages.
    pub memory: &'a ChildMemory,
    /// How children are written.
    pub strategy: ApplyStrategy,
    /// The identity children are written (and, for an adoption or a contest, read) as: kmeta's
    /// own, or the controller's ServiceAccount.
    pub writer: Writer,
}

impl Children<'_> {
    /// Counts one child operation `op` of this controller (`kmeta_child_operations_total`).
    fn count(&self, op: ChildOpLabel) {
        self.ctx.wiring.metrics.child_op(self.controller, op);
    }

    /// The API of `obj`'s resource (`rule`) in its namespace, as this controller writes.
    fn api_of(&self, rule: &ChildRule, obj: &Value) -> kube::Api<kube::api::DynamicObject> {
        kapi::api(
            &self.writer.client,
            &rule.resolved,
            meta_str(obj, "namespace"),
        )
    }

    /// The object that holds `child`'s name now, read fresh (`None`: there is none).
    async fn holding(&self, rule: &ChildRule, child: &Value) -> Result<Option<Value>, kube::Error> {
        kapi::get(&self.api_of(rule, child), meta_str(child, "name")).await
    }

    /// Whether `parent`'s last child management made the same report: a child still drifted,
    /// in conflict or contested as it was is no news, and gets no Event again (its condition
    /// stays, with the time it began). A report that is new, or changed, is told.
    fn reported_before(&self, parent: &Value, report: &ChildReport) -> bool {
        self.memory
            .child_reports
            .lock()
            .is_ok_and(|r| r.contains(meta_str(parent, "uid"), report))
    }

    /// Adds `report` to `reports` and, unless it was made before ([`Self::reported_before`]),
    /// publishes `note` as a `reason` Event on `parent`.
    async fn report(
        &self,
        parent: &Value,
        (reason, note): (Reason, String),
        report: ChildReport,
        reports: &mut Vec<ChildReport>,
    ) {
        if !self.reported_before(parent, &report) {
            self.ctx.event(parent, reason, note).await;
        }
        reports.push(report);
    }
}

/// What a sync's child writes found besides their results: fields the server dropped, and
/// children left as they are (drift, conflicts, contests).
#[derive(Default)]
struct Collected {
    ignored: Vec<(String, Vec<String>)>,
    reports: Vec<ChildReport>,
    contests: Vec<apply::Contest>,
    /// What was done to each child, for the parent's sync record.
    done: Vec<decide::ChildRecord>,
}

impl Collected {
    /// Adds what another write found.
    fn extend(&mut self, other: Collected) {
        self.ignored.extend(other.ignored);
        self.reports.extend(other.reports);
        self.contests.extend(other.contests);
        self.done.extend(other.done);
    }

    /// Records what was done to `child` of `parent`.
    fn did(&mut self, parent: &Value, child: &Value, action: decide::ChildAction) {
        self.done
            .push(decide::ChildRecord::of(parent, child, action));
    }
}

/// What managing a parent's children did.
#[derive(Debug, Default)]
pub struct Managed {
    /// Nothing was written and nothing reported.
    pub quiet: bool,
    /// What was done to each child, for the parent's sync record (`decide::SyncRecord`).
    pub done: Vec<decide::ChildRecord>,
    /// The observed children (keys) whose update found nothing to change.
    pub unchanged: Vec<String>,
}

/// What one sync writes children as: its parent, the parent's field manager, the desired
/// children and the observed ones by key.
struct Writing<'a> {
    parent: &'a Value,
    manager: String,
    desired: &'a BTreeMap<String, Value>,
    observed: BTreeMap<String, &'a Value>,
    /// Observed orphans adopted by this sync's writes (`decide::with_adoptions`).
    adopting: &'a BTreeSet<String>,
}

impl<'a> Writing<'a> {
    fn new<O: Borrow<Value>>(
        c: &Children<'_>,
        parent: &'a Value,
        observed: &'a [O],
        desired: &'a BTreeMap<String, Value>,
        adopting: &'a BTreeSet<String>,
    ) -> Self {
        Writing {
            adopting,
            parent,
            manager: apply::field_manager(
                &c.ctx.config.ssa_field_manager,
                c.controller,
                meta_str(parent, "uid"),
            ),
            desired,
            observed: observed
                .iter()
                .map(|o| (decide::child_key(o.borrow()), o.borrow()))
                .collect(),
        }
    }
}

/// Step: create, update and delete children per the plan; Conflict/NotFound/AlreadyExists are
/// left to the next sync, other failures are collected and reported together. Quiet when the
/// plan was empty and nothing was reported. `settled` names observed children left out of
/// `observed` because their version needs no update for their desired object.
pub async fn manage_children<O: Borrow<Value>>(
    c: &Children<'_>,
    parent: &Value,
    (observed, adopting, settled): (&[O], &BTreeSet<String>, &BTreeSet<String>),
    desired: &BTreeMap<String, Value>,
) -> Result<Managed, SyncError> {
    let fallback = dynapply::Options::default();
    let w = Writing::new(c, parent, observed, desired, adopting);
    let decide::Plan { ops, unchanged } = decide::plan_children_settled(
        parent,
        (observed, settled),
        desired,
        |gk| c.rules.get(gk).map(|r| r.method).unwrap_or_default(),
        |gk| c.rules.get(gk).map_or(&fallback, |r| &r.options),
        |obs, opts| {
            last_applied::for_update(&c.memory.last_applied, obs, opts).or_else(|| {
                match opts.record {
                    true => None,
                    false => applied_by(c, obs, &w.manager),
                }
            })
        },
    )?;
    let unchanged = unchanged.into_iter().map(str::to_owned).collect();
    let ops = decide::with_adoptions(ops, observed, adopting);
    let mut out = Collected::default();
    left_to_others(c, &w, &ops, &mut out);
    if ops.is_empty() {
        let done = std::mem::take(&mut out.done);
        let quiet = !report_collected(c, parent, out).await;
        return Ok(Managed {
            quiet,
            done,
            unchanged,
        });
    }
    let mut errors = Vec::new();
    let (first, then) = decide::write_phases(ops);
    for phase in [first, then] {
        let written: Vec<(Collected, Option<String>)> =
            futures::stream::iter(phase.into_iter().map(|op| write_child(c, &w, op)))
                .buffered(CHILD_WRITES_IN_FLIGHT)
                .collect()
                .await;
        for (found, error) in written {
            out.extend(found);
            errors.extend(error);
        }
    }
    let done = std::mem::take(&mut out.done);
    report_collected(c, parent, out).await;
    if errors.is_empty() {
        Ok(Managed {
            quiet: false,
            done,
            unchanged,
        })
    } else {
        Err(SyncError::Children(errors))
    }
}

/// Children the plan (`ops`) leaves as they are although they differ from the hook's answer,
/// at fields their type's field rules leave to others only: recorded `LeftAlone`, naming the
/// rules (the sync record, `kmeta trace`). Not a write, not a skip, not drift: not counted in
/// `kmeta_child_operations_total`.
fn left_to_others(c: &Children<'_>, w: &Writing<'_>, ops: &[ChildOp], out: &mut Collected) {
    let planned: BTreeSet<String> = ops
        .iter()
        .map(|op| decide::child_key(op_object(op)))
        .collect();
    for (key, want) in w.desired {
        let gk = key.split(' ').next().unwrap_or_default();
        let (Some(live), Some(rule)) = (w.observed.get(key), c.rules.get(gk)) else {
            continue;
        };
        if planned.contains(key) || rule.options.fields.is_empty() {
            continue;
        }
        let names = dynapply::left_alone(&rule.options.fields, live, want);
        if !names.is_empty() {
            let why = format!("field rules: {}", names.join(", "));
            out.did(w.parent, live, decide::ChildAction::LeftAlone { why });
        }
    }
}

/// What the parent whose field manager is `manager` applied to `observed`, a child without the
/// last-applied annotation of a type written without it ([`dynapply::Options::record`] off; a
/// type written with it merges such a child without a base, removing nothing): its live fields
/// that manager owns, read from the `managedFields`
/// entries the cache keeps for the child ([`Compact::parent_entries`]). `None` (nothing is
/// known to be applied, so the merge removes nothing) when the manager owns nothing there or
/// the cache holds another version of the child.
///
/// [`Compact::parent_entries`]: crate::runtime::compact::Compact::parent_entries
fn applied_by(c: &Children<'_>, observed: &Value, manager: &str) -> Option<decide::KnownLast> {
    let field = |f: &str| observed.get(f).and_then(Value::as_str).unwrap_or_default();
    let rule = c
        .rules
        .get(&group_key(field("apiVersion"), field("kind")))?;
    let cached = rule
        .informer
        .get(meta_str(observed, "namespace"), meta_str(observed, "name"))?;
    let same = cached.uid() == meta_str(observed, "uid")
        && cached.resource_version() == meta_str(observed, "resourceVersion");
    let entries = cached.parent_entries().filter(|_| same)?;
    Some(decide::KnownLast {
        value: Arc::new(decide::applied_configuration(observed, &entries, manager)?),
        recorded: false,
    })
}

/// Step, before a sync of `owner` reads its children: `Err(SyncError::AwaitingWatch)` while
/// child writes its earlier syncs made are not in the watch caches yet (see
/// [`crate::reconcile::expectations`]). A write never seen within
/// [`ManagerConfig::created_children_wait`](crate::ManagerConfig::created_children_wait) is given
/// up on, in a `ChildNotObserved` warning event, the log and
/// `kmeta_child_operations_total{op="not_observed"}`.
pub async fn await_written(c: &Children<'_>, owner: &Value) -> Result<(), SyncError> {
    let awaited = {
        let Ok(mut expected) = c.memory.expected_writes.lock() else {
            return Ok(());
        };
        expected.settle(meta_str(owner, "uid"), Instant::now(), |x| {
            let Some(informer) = c.rules.get(&x.group_kind).map(|r| &r.informer) else {
                return false;
            };
            let cached = informer.get(&x.namespace, &x.name);
            let version = cached.as_ref().map(|o| (o.uid(), o.resource_version()));
            expectations::shown(x, version)
                || expectations::settled_by_relist(x, informer.listed_from())
        })
    };
    for x in &awaited.expired {
        let child = written_name(x);
        tracing::warn!(controller = %c.controller, %child, "the watch never showed a child write; syncing without it");
        let note = format!(
            "kmeta wrote {child} {:?} ago but its watch never showed the write; syncing without waiting for it any longer",
            c.ctx.config.created_children_wait
        );
        c.count(ChildOpLabel::NotObserved);
        c.ctx.event(owner, Reason::ChildNotObserved, note).await;
    }
    match awaited.unseen.as_slice() {
        [] => Ok(()),
        [one] => Err(SyncError::AwaitingWatch(written_name(one))),
        [first, rest @ ..] => Err(SyncError::AwaitingWatch(format!(
            "{} and {} more child writes",
            written_name(first),
            rest.len()
        ))),
    }
}

/// `<Kind>.<apiVersion> namespace/name` of a recorded write.
fn written_name(x: &Written) -> String {
    if x.namespace.is_empty() {
        format!("{} {}", x.group_kind, x.name)
    } else {
        format!("{} {}/{}", x.group_kind, x.namespace, x.name)
    }
}

/// After the API server stored a write of the child `sent` as `(uid, resourceVersion)`: the
/// owner's next sync waits until the watch shows it. An update or delete `replaced` the cached
/// version it was based on, then any kmeta wrote on the way (empty: a create); one the server
/// made without a new version (it changed nothing) is not recorded, as no event will come.
fn expect_written(
    c: &Children<'_>,
    w: &Writing<'_>,
    sent: &Value,
    stored: (Option<&str>, Option<&str>),
    replaced: &[&str],
) {
    let (Some(uid), stored_rv) = stored else {
        return;
    };
    if replaced
        .iter()
        .any(|rv| rv.is_empty() || stored_rv == Some(*rv))
    {
        return;
    }
    let replaced = replaced.iter().map(|rv| (*rv).to_owned()).collect();
    let field = |f: &str| sent.get(f).and_then(Value::as_str).unwrap_or_default();
    let write = Written {
        group_kind: group_key(field("apiVersion"), field("kind")),
        namespace: meta_str(sent, "namespace").to_owned(),
        name: meta_str(sent, "name").to_owned(),
        uid: uid.to_owned(),
        replaced,
        written_at: Instant::now(),
        deadline: Instant::now() + c.ctx.config.created_children_wait,
    };
    if let Ok(mut expected) = c.memory.expected_writes.lock() {
        expected.expect(meta_str(w.parent, "uid"), write);
    }
}

/// Child writes of one sync in flight at once: 8 (kmeta's; Metacontroller writes a parent's
/// children one after another). The deletes of children no longer desired go first, then the
/// creates and updates; the results are taken in the plan's order.
pub const CHILD_WRITES_IN_FLIGHT: usize = 8;

/// One planned child write: what it found to report, and the failure to report, if any.
async fn write_child(
    c: &Children<'_>,
    w: &Writing<'_>,
    op: ChildOp,
) -> (Collected, Option<String>) {
    let mut out = Collected::default();
    // bounded across the manager (a closed semaphore never happens: it is never closed)
    let _permit = c.ctx.child_writes.permits.acquire().await.ok();
    let op = &op;
    let obj = op_object(op);
    let key = decide::child_key(obj);
    let gk = key.split(' ').next().unwrap_or_default();
    let Some(rule) = c.rules.get(gk) else {
        return (
            out,
            Some(format!("{}: undeclared type {gk}", describe(obj))),
        );
    };
    if let ChildOp::Create(o) = op
        && contested_in_cache(c, rule, w, o, &mut out).await
    {
        return (out, None);
    }
    if let Some(why) = gate(c, rule, w, op, &mut out).await {
        out.did(w.parent, obj, decide::ChildAction::LeftAlone { why });
        return (out, None);
    }
    let Some((verb, op_label, res)) = execute(c, rule, w, op, &mut out).await else {
        return (out, None);
    };
    let failure = match res {
        Ok(landed) => {
            book(c, rule, w, obj, landed, &mut out);
            done(c, rule, w, op, verb, op_label, &mut out);
            None
        }
        Err(e) => failed(c, rule, w, obj, (verb, op_label), e, &mut out).await,
    };
    (out, failure)
}

/// After a write the API server took: counted, logged and recorded in the parent's sync record
/// (an adoption names the owner reference it wrote).
fn done(
    c: &Children<'_>,
    rule: &ChildRule,
    w: &Writing<'_>,
    op: &ChildOp,
    verb: &str,
    op_label: ChildOpLabel,
    out: &mut Collected,
) {
    let obj = op_object(op);
    c.count(op_label);
    tracing::info!(controller = %c.controller, child = %describe(obj), "{verb} child");
    let mut action = done_action(c, rule, w, op);
    if w.adopting.contains(&decide::child_key(obj)) {
        // the orphan's owner reference went with this write
        c.count(ChildOpLabel::Adopt);
        if let decide::ChildAction::Updated { fields } = &mut action {
            fields.insert(0, "metadata.ownerReferences".to_owned());
        }
    }
    out.did(w.parent, obj, action);
}

/// After a write the API server refused with `e`: a contest, a failure left to the next sync,
/// or a failure reported (`ChildWriteFailed`, counted, recorded) and returned.
async fn failed(
    c: &Children<'_>,
    rule: &ChildRule,
    w: &Writing<'_>,
    obj: &Value,
    (verb, op_label): (&str, ChildOpLabel),
    e: kube::Error,
    out: &mut Collected,
) -> Option<String> {
    if op_label == ChildOpLabel::Create && contested_create(c, rule, w, obj, &e, out).await {
        return None;
    }
    let holder = match op_label {
        ChildOpLabel::Create if kapi::is_conflict(&e) => {
            Some(existing_controller(c, rule, obj, w.parent).await)
        }
        _ => None,
    };
    let parent_uid = meta_str(w.parent, "uid");
    let why = match decide::child_write_failure(
        op_label.as_str(),
        kapi::code(&e),
        holder,
        parent_uid,
    ) {
        decide::WriteFailure::LeftToNextSync => {
            tracing::debug!(controller = %c.controller, child = %describe(obj), error = %e, "{verb} child: left to the next sync");
            return None;
        }
        decide::WriteFailure::Failed(why) => why,
    };
    // a refusal says first as whom, and what to grant (the API error can be long, and an
    // Event's note is cut at 1000 bytes)
    let shown = kapi::describe(&e);
    let cause = match (why, forbidden(c, rule, op_label, &e)) {
        (Some(why), _) => format!("{shown}: {why}"),
        (None, Some(hint)) => format!("{hint}: {shown}"),
        (None, None) => shown,
    };
    let message = format!("{verb} {}: {cause}", describe(obj));
    out.did(w.parent, obj, decide::ChildAction::Failed { cause });
    c.count(ChildOpLabel::Error);
    c.ctx
        .event(w.parent, Reason::ChildWriteFailed, message.clone())
        .await;
    Some(message)
}

/// The owner of the object that holds a child's name: `Some(uid)` of its controller, or for a
/// child of `parent` owned by label, of the instance its label names (`Some("")` when it has
/// none), `None` when it cannot be read.
async fn existing_controller(
    c: &Children<'_>,
    rule: &ChildRule,
    child: &Value,
    parent: &Value,
) -> Option<String> {
    let existing = c.holding(rule, child).await.ok()??;
    let by_label = !decide::owner_reference_holds(parent, child);
    Some(decide::holder_uid(&existing, by_label).to_owned())
}

/// What one executed child operation was (verb, metric label) and how it ended.
type Executed = (&'static str, ChildOpLabel, Result<Landed, kube::Error>);

/// A child write the API server took, with what its bookkeeping needs ([`book`]).
#[derive(Debug, Default)]
struct Landed {
    /// The uid and resourceVersion the object was stored with (`None`: not known).
    uid: Option<String>,
    resource_version: Option<String>,
    /// The versions it replaced: a stored version among them means the server changed nothing.
    replaced: Vec<String>,
    /// After a create or replace: the last-applied annotation text the server stored.
    last_applied: Option<Option<String>>,
    /// After a replace: the object stored, to find the fields the server dropped.
    object: Option<Value>,
}

impl Landed {
    /// A create whose answer's metadata is `stored`.
    fn created(stored: kapi::Stored, rule: &ChildRule) -> Landed {
        let m = stored.metadata;
        let text = m
            .annotations
            .as_ref()
            .and_then(|a| a.get(&rule.options.annotation));
        Landed {
            last_applied: Some(text.and_then(Value::as_str).map(str::to_owned)),
            uid: m.uid,
            resource_version: m.resource_version,
            ..Landed::default()
        }
    }

    /// A replace of version `replaced` stored as `stored`.
    fn replaced(stored: Value, rule: &ChildRule, replaced: String) -> Landed {
        Landed {
            uid: meta(&stored, "uid").map(str::to_owned),
            resource_version: meta(&stored, "resourceVersion").map(str::to_owned),
            replaced: vec![replaced],
            last_applied: Some(
                annotation_text(&stored, &rule.options.annotation).map(str::to_owned),
            ),
            object: Some(stored),
        }
    }
}

/// The bookkeeping of a write the API server took, once for every kind of write: the fields a
/// replace lost, the wait for the watch to show it, and the last-applied state it recorded.
fn book(
    c: &Children<'_>,
    rule: &ChildRule,
    w: &Writing<'_>,
    sent: &Value,
    stored: Landed,
    out: &mut Collected,
) {
    if let Some(object) = &stored.object {
        remember_ignored(c, sent, object, &mut out.ignored);
    }
    let version = (stored.uid.as_deref(), stored.resource_version.as_deref());
    let replaced: Vec<&str> = stored.replaced.iter().map(String::as_str).collect();
    expect_written(c, w, sent, version, &replaced);
    if let Some(text) = &stored.last_applied {
        remember_last_applied(c, rule, w, sent, version, text.as_deref());
    }
}

/// Sends one child operation that passed its [`gate`]; `None` when an apply left the child as
/// it is (reported in `out`).
async fn execute(
    c: &Children<'_>,
    rule: &ChildRule,
    w: &Writing<'_>,
    op: &ChildOp,
    out: &mut Collected,
) -> Option<Executed> {
    let api = c.api_of(rule, op_object(op));
    Some(match op {
        ChildOp::Create(o) => {
            let res = kapi::create_as(&api, o, &w.manager).await;
            (
                "creating",
                ChildOpLabel::Create,
                res.map(|s| Landed::created(s, rule)),
            )
        }
        ChildOp::Update(o) if c.strategy == ApplyStrategy::ServerSideApply => {
            match apply_child(c, rule, w, o, out).await {
                Ok(None) => return None,
                res => (
                    "applying",
                    ChildOpLabel::Update,
                    res.map(Option::unwrap_or_default),
                ),
            }
        }
        ChildOp::Update(o) => {
            let replaced = meta_str(o, "resourceVersion").to_owned();
            let res = kapi::replace_as(&api, o, &w.manager).await;
            (
                "updating",
                ChildOpLabel::Update,
                res.map(|s| Landed::replaced(s, rule, replaced)),
            )
        }
        ChildOp::Delete { object, .. } => {
            let deleted = Landed {
                uid: meta(object, "uid").map(str::to_owned),
                replaced: vec![meta_str(object, "resourceVersion").to_owned()],
                ..Landed::default()
            };
            (
                "deleting",
                ChildOpLabel::Delete,
                kapi::delete(&api, object).await.map(|()| deleted),
            )
        }
    })
}

/// What a successful write did, for the parent's sync record: an update names the paths it
/// changed (against the observed child; under server-side apply, the applied fields only).
fn done_action(
    c: &Children<'_>,
    rule: &ChildRule,
    w: &Writing<'_>,
    op: &ChildOp,
) -> decide::ChildAction {
    match op {
        ChildOp::Create(_) => decide::ChildAction::Created,
        ChildOp::Delete { reason, .. } => decide::ChildAction::Deleted {
            why: (*reason).to_owned(),
        },
        ChildOp::Update(o) => {
            let live = w.observed.get(&decide::child_key(o)).copied();
            let ignore = [rule.options.annotation.as_str()];
            let fields = match live {
                Some(live) if c.strategy == ApplyStrategy::ServerSideApply => {
                    decide::applied_paths(live, o, &ignore)
                }
                Some(live) => decide::changed_paths(live, o, &ignore),
                None => Vec::new(),
            };
            decide::ChildAction::Updated { fields }
        }
    }
}

/// The object of a child operation.
fn op_object(op: &ChildOp) -> &Value {
    match op {
        ChildOp::Create(o) | ChildOp::Update(o) | ChildOp::Delete { object: o, .. } => o,
    }
}
