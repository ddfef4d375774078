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
        self.ctx.config.metrics.child_op(self.controller, op);
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
        let name = match meta_str(child, "namespace") {
            ns if ns == meta_str(parent, "namespace") => meta_str(child, "name").to_owned(),
            ns => format!("{ns}/{}", meta_str(child, "name")),
        };
        self.done.push(decide::ChildRecord {
            kind: child
                .get("kind")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
            name,
            action,
        });
    }
}

/// What managing a parent's children did.
#[derive(Debug, Default)]
pub struct Managed {
    /// Nothing was written and nothing reported.
    pub quiet: bool,
    /// What was done to each child, for the parent's sync record (`decide::SyncRecord`).
    pub done: Vec<decide::ChildRecord>,
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
/// plan was empty and nothing was reported.
pub async fn manage_children<O: Borrow<Value>>(
    c: &Children<'_>,
    parent: &Value,
    (observed, adopting): (&[O], &BTreeSet<String>),
    desired: &BTreeMap<String, Value>,
) -> Result<Managed, SyncError> {
    let fallback = dynapply::Options::default();
    let w = Writing::new(c, parent, observed, desired, adopting);
    let ops = decide::plan_children(
        parent,
        observed,
        desired,
        |gk| c.rules.get(gk).map(|r| r.method).unwrap_or_default(),
        |gk| c.rules.get(gk).map_or(&fallback, |r| &r.options),
        |obs, opts| {
            last_applied::known_or_parsed(&c.memory.last_applied, obs, opts).or_else(|| match opts
                .record
            {
                true => None,
                false => applied_by(c, obs, &w.manager),
            })
        },
    )?;
    let ops = decide::with_adoptions(ops, observed, adopting);
    let mut out = Collected::default();
    if ops.is_empty() {
        let quiet = !report_collected(c, parent, out).await;
        return Ok(Managed {
            quiet,
            done: Vec::new(),
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
        Ok(Managed { quiet: false, done })
    } else {
        Err(SyncError::Children(errors))
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
    let _permit = c.ctx.child_writes.acquire().await.ok();
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
    let res = res.map(|landed| book(c, rule, w, obj, landed, &mut out));
    let e = match res {
        Ok(()) => {
            c.count(op_label);
            tracing::info!(controller = %c.controller, child = %describe(obj), "{verb} child");
            let mut action = done_action(c, rule, w, op);
            if w.adopting.contains(&key) {
                // the orphan's owner reference went with this write
                c.count(ChildOpLabel::Adopt);
                if let decide::ChildAction::Updated { fields } = &mut action {
                    fields.insert(0, "metadata.ownerReferences".to_owned());
                }
            }
            out.did(w.parent, obj, action);
            return (out, None);
        }
        Err(e) => e,
    };
    if op_label == ChildOpLabel::Create && contested_create(c, rule, w, obj, &e, &mut out).await {
        return (out, None);
    }
    let holder = match op_label {
        ChildOpLabel::Create if kapi::is_conflict(&e) => {
            Some(existing_controller(c, rule, obj).await)
        }
        _ => None,
    };
    let parent_uid = meta_str(w.parent, "uid");
    match decide::child_write_failure(op_label.as_str(), kapi::code(&e), holder, parent_uid) {
        decide::WriteFailure::LeftToNextSync => {
            tracing::debug!(controller = %c.controller, child = %describe(obj), error = %e, "{verb} child: left to the next sync");
            (out, None)
        }
        decide::WriteFailure::Failed(why) => {
            // a refusal says first as whom, and what to grant (the API error can be long, and
            // an Event's note is cut at 1000 bytes)
            let cause = match (why, forbidden(c, rule, op_label, &e)) {
                (Some(why), _) => format!("{e}: {why}"),
                (None, Some(hint)) => format!("{hint}: {e}"),
                (None, None) => e.to_string(),
            };
            let message = format!("{verb} {}: {cause}", describe(obj));
            let failed = decide::ChildAction::Failed {
                cause: cause.clone(),
            };
            out.did(w.parent, obj, failed);
            c.count(ChildOpLabel::Error);
            c.ctx
                .event(w.parent, Reason::ChildWriteFailed, message.clone())
                .await;
            (out, Some(message))
        }
    }
}

/// For a write the API server refused (403): the identity it was made as, with the verb and
/// resource to grant it (RBAC's names: `patch` for an update by server-side apply).
fn forbidden(
    c: &Children<'_>,
    rule: &ChildRule,
    op: ChildOpLabel,
    e: &kube::Error,
) -> Option<String> {
    if kapi::code(e) != Some(403) {
        return None;
    }
    let verb = match op {
        ChildOpLabel::Create => "create",
        ChildOpLabel::Delete => "delete",
        _ if c.strategy == ApplyStrategy::ServerSideApply => "patch",
        _ => "update",
    };
    let api = &rule.resolved.api;
    let resource = match api.group.as_str() {
        "" => api.plural.clone(),
        group => format!("{}.{group}", api.plural),
    };
    Some(decide::forbidden_hint(
        verb,
        &resource,
        c.writer.identity.as_ref(),
    ))
}

/// Under server-side apply, a create refused because another parent holds the child's name
/// (another controller, or another DecoratorController on the same target): see
/// [`held_elsewhere`].
async fn contested_create(
    c: &Children<'_>,
    rule: &ChildRule,
    w: &Writing<'_>,
    child: &Value,
    error: &kube::Error,
    out: &mut Collected,
) -> bool {
    if c.strategy != ApplyStrategy::ServerSideApply || !kapi::is_conflict(error) {
        return false;
    }
    let Ok(Some(existing)) = c.holding(rule, child).await else {
        return false;
    };
    held_elsewhere(c, w, child, &existing, out).await
}

/// Under server-side apply, a child to create that the watch already shows held by another
/// parent: the create is not sent (the server would refuse it, on every sync while the contest
/// lasts), and the contest is told as for a refused create ([`held_elsewhere`]). When the watch
/// is behind (the holder let the child go), the parent's next sync creates it.
async fn contested_in_cache(
    c: &Children<'_>,
    rule: &ChildRule,
    w: &Writing<'_>,
    child: &Value,
    out: &mut Collected,
) -> bool {
    if c.strategy != ApplyStrategy::ServerSideApply {
        return false;
    }
    let cached = rule
        .informer
        .get(meta_str(child, "namespace"), meta_str(child, "name"));
    let Some(Ok(existing)) = cached.map(|o| o.value()) else {
        return false;
    };
    held_elsewhere(c, w, child, &existing, out).await
}

/// A child `existing` under the name of `child` is held by another parent: the parent is told
/// (`ChildContested` event, when the contest is new, and condition naming the holder), the
/// holder's parent learns it at its next sync, and nothing is written, so the two never take the
/// child back and forth. False when `existing` is not held by another parent.
async fn held_elsewhere(
    c: &Children<'_>,
    w: &Writing<'_>,
    child: &Value,
    existing: &Value,
    out: &mut Collected,
) -> bool {
    let Some(holder) = apply::contest_holder(meta_str(w.parent, "uid"), child, existing) else {
        return false;
    };
    let name = describe(child);
    let note = format!(
        "{name} is wanted by another parent too: it is held by {holder} (kmeta does not take a child from another parent; it is left as it is until one of them stops wanting it)"
    );
    c.count(ChildOpLabel::Contested);
    let why = format!("held by {holder}");
    out.did(w.parent, child, decide::ChildAction::LeftAlone { why });
    let report = ChildReport {
        kind: apply::CONTESTED_CONDITION,
        reason: "ChildContested",
        message: format!("{name}: held by {holder}"),
    };
    c.report(
        w.parent,
        (Reason::ChildContested, note),
        report,
        &mut out.reports,
    )
    .await;
    out.contests.push(apply::Contest {
        holder_uid: controller_uid(existing).unwrap_or_default().to_owned(),
        child: name,
        contender: format!("{} {}", c.controller, describe(w.parent)),
    });
    true
}

/// Records this parent's contests (for their holders) and adds the contests of children it
/// holds to its reports, each also told in a `ChildContested` event on it.
async fn remember_contests(
    c: &Children<'_>,
    parent: &Value,
    contests: Vec<apply::Contest>,
    reports: &mut Vec<ChildReport>,
) {
    let uid = meta_str(parent, "uid");
    let against = match c.ctx.contests.lock() {
        Ok(mut all) => {
            all.set(c.controller, uid, contests);
            all.against(c.controller, uid)
        }
        Err(_) => Vec::new(),
    };
    for r in against {
        let note = format!(
            "{} (kmeta leaves the child to this parent and writes nothing for the other)",
            r.message
        );
        c.report(parent, (Reason::ChildContested, note), r, reports)
            .await;
    }
}

/// The controller of the object that holds a child's name: `Some(uid)` of its controller
/// (`Some("")` when it has none), `None` when it cannot be read.
async fn existing_controller(c: &Children<'_>, rule: &ChildRule, child: &Value) -> Option<String> {
    let existing = c.holding(rule, child).await.ok()??;
    Some(controller_uid(&existing).unwrap_or_default().to_owned())
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

/// Server-side apply of one child (the desired object, with its owner reference and
/// last-applied annotation): first moves the fields the parent's manager owns through earlier
/// non-apply writes into its apply entry, then applies without force. Fields held by other
/// managers are taken with force under drift policy `Enforce` and named in a `ChildFieldsTaken`
/// event; under `Report` the conflict is reported (`ChildConflict`) and the child left as it is;
/// fields held by another parent's manager are never taken (`ChildContested`). `Ok(None)`: the
/// child was left as it is.
async fn apply_child(
    c: &Children<'_>,
    rule: &ChildRule,
    w: &Writing<'_>,
    merged: &Value,
    out: &mut Collected,
) -> Result<Option<Landed>, kube::Error> {
    let key = decide::child_key(merged);
    let api = c.api_of(rule, merged);
    let Some(want) = w.desired.get(&key) else {
        return Ok(None);
    };
    let observed = w.observed.get(&key).copied();
    let live = observed.unwrap_or(merged);
    let cached = observed.map(|l| meta_str(l, "resourceVersion"));
    // built before any write: a body that cannot be built changes nothing
    let mut body = decide::server_side_apply_request(live, want, &rule.options, w.parent, cached)
        .map_err(|e| kube::Error::Service(Box::new(e)))?;
    let upgraded = match observed {
        Some(live) => upgrade_ownership(c, &api, live, &w.manager).await?,
        None => None,
    };
    // a guarded body is guarded by the version the ownership upgrade wrote
    if let (Some(v), Some(rv)) = (
        upgraded.as_deref(),
        body.pointer_mut("/metadata/resourceVersion"),
    ) {
        *rv = Value::String(v.to_owned());
    }
    let stored = match kapi::apply_as(&api, &body, &w.manager, false).await {
        Ok(stored) => stored,
        Err(e) => {
            let kube::Error::Api(status) = &e else {
                return Err(e);
            };
            let conflicts = apply::conflicts_of(status);
            if status.code != 409 || conflicts.is_empty() {
                return Err(e);
            }
            match resolve_conflicts(c, rule, w, merged, &body, conflicts, out).await? {
                Some(stored) => stored,
                None => return Ok(None),
            }
        }
    };
    // the apply (forced or not) of a child seen before is awaited like any write: the next sync
    // waits for the watch
    let Some(cached) = cached else {
        return Ok(Some(Landed::default()));
    };
    Ok(Some(Landed {
        uid: meta(&stored, "uid").map(str::to_owned),
        resource_version: meta(&stored, "resourceVersion").map(str::to_owned),
        replaced: std::iter::once(cached.to_owned()).chain(upgraded).collect(),
        ..Landed::default()
    }))
}

/// Moves the fields `manager` (or kmeta's legacy managers) own through earlier creates and
/// updates into its apply entry, once per child: the caches keep no `managedFields`, so they
/// are read fresh the first time. When it rewrote exactly the cached version `live`, the
/// resourceVersion it wrote (the apply that follows is based on it: only `managedFields`
/// changed).
async fn upgrade_ownership(
    c: &Children<'_>,
    api: &kube::Api<kube::api::DynamicObject>,
    live: &Value,
    manager: &str,
) -> Result<Option<String>, kube::Error> {
    let uid = meta_str(live, "uid");
    let check = c
        .memory
        .child_reports
        .lock()
        .map(|r| r.needs_upgrade_check(uid, manager))
        .unwrap_or(true);
    if !check {
        return Ok(None);
    }
    let Some(fresh) = kapi::get(api, meta_str(live, "name")).await? else {
        return Ok(None);
    };
    let legacy = [c.ctx.config.ssa_field_manager.as_str(), "kmeta"];
    let mut written = None;
    if let Some(up) = fresh
        .pointer("/metadata/managedFields")
        .and_then(|m| apply::upgraded_managed_fields(m, manager, &legacy))
    {
        let stored = kapi::set_managed_fields(api, &fresh, &up, manager).await?;
        let on_cached = meta_str(&fresh, "resourceVersion") == meta_str(live, "resourceVersion");
        written = on_cached.then(|| meta_str(&stored, "resourceVersion").to_owned());
    }
    if let Ok(mut r) = c.memory.child_reports.lock() {
        r.upgraded(uid, manager);
    }
    Ok(written)
}

/// After an apply refused with conflicts: contests and (under `Report`) conflicts are reported
/// and the child left as it is (`Ok(None)`); otherwise the fields are taken with force and named
/// in a `ChildFieldsTaken` event (`Ok(Some(stored))`).
async fn resolve_conflicts(
    c: &Children<'_>,
    rule: &ChildRule,
    w: &Writing<'_>,
    merged: &Value,
    body: &Value,
    conflicts: Vec<apply::FieldConflict>,
    out: &mut Collected,
) -> Result<Option<Value>, kube::Error> {
    let key = decide::child_key(merged);
    let api = c.api_of(rule, merged);
    let child = describe(merged);
    let controlled = w
        .observed
        .get(&key)
        .and_then(|live| controller_uid(live))
        .is_some_and(|uid| uid == meta_str(w.parent, "uid"));
    match apply::decide_conflicts(
        conflicts,
        &c.ctx.config.ssa_field_manager,
        &w.manager,
        controlled,
        rule.drift,
    ) {
        ConflictDecision::Contested(held) => {
            let fields = apply::describe_conflicts(&held);
            let note = format!(
                "{child} is wanted by another parent too: {fields} (kmeta does not take fields from another parent; the child is left as it is until one of them stops wanting it)"
            );
            let report = ChildReport {
                kind: apply::CONTESTED_CONDITION,
                reason: "ChildContested",
                message: format!("{child}: {fields}"),
            };
            let told = (Reason::ChildContested, note);
            c.report(w.parent, told, report, &mut out.reports).await;
            Ok(None)
        }
        ConflictDecision::Report(taken) => {
            let fields = apply::describe_conflicts(&taken);
            let note = format!(
                "{child} was changed by others: {fields}; drift policy {:?} leaves it as it is",
                rule.drift
            );
            let report = ChildReport {
                kind: apply::DRIFT_CONDITION,
                reason: "ChildConflict",
                message: format!("{child}: {fields}"),
            };
            c.report(
                w.parent,
                (Reason::ChildConflict, note),
                report,
                &mut out.reports,
            )
            .await;
            Ok(None)
        }
        ConflictDecision::Take(taken) => {
            if !taken.is_empty() {
                let note = format!(
                    "applying {child} took {} (the hook's answer is the source of truth)",
                    apply::describe_conflicts(&taken)
                );
                c.count(ChildOpLabel::FieldsTaken);
                c.ctx.event(w.parent, Reason::ChildFieldsTaken, note).await;
            }
            kapi::apply_as(&api, body, &w.manager, true).await.map(Some)
        }
    }
}

/// Whether `obj`'s write only undoes others' changes (drift): the hook's answer for it did not
/// change. Reported in a `ChildDrift` event and condition; true when the write is held back.
async fn drift_reported(
    c: &Children<'_>,
    rule: &ChildRule,
    w: &Writing<'_>,
    obj: &Value,
    out: &mut Collected,
) -> bool {
    let key = decide::child_key(obj);
    let (Some(want), Some(live)) = (w.desired.get(&key), w.observed.get(&key)) else {
        return false;
    };
    let Some(paths) = decide::drift_only(live, want, &rule.options) else {
        return false;
    };
    let child = describe(obj);
    let fields = if paths.is_empty() {
        "fields the hook sets".to_owned()
    } else {
        paths.join(", ")
    };
    let note = format!(
        "{child} differs from what the hook wants at {fields}; drift policy Report leaves it as it is"
    );
    let report = ChildReport {
        kind: apply::DRIFT_CONDITION,
        reason: "Drifted",
        message: format!("{child}: {fields}"),
    };
    let told = (Reason::ChildDrift, note);
    c.report(w.parent, told, report, &mut out.reports).await;
    true
}

/// Whether the API server ignored the same update of `obj`'s version before.
fn futile(c: &Children<'_>, obj: &Value) -> bool {
    c.memory
        .futile_updates
        .lock()
        .is_ok_and(|f| f.is_futile(obj, Instant::now()))
}

/// Passes `op` through its [`decide::write_gate`]: `Some(why)` when the child is left as it is
/// (counted as a skip unless a report says why), `None` when the write is sent.
async fn gate(
    c: &Children<'_>,
    rule: &ChildRule,
    w: &Writing<'_>,
    op: &ChildOp,
    out: &mut Collected,
) -> Option<String> {
    let obj = op_object(op);
    let ssa = c.strategy == ApplyStrategy::ServerSideApply;
    match decide::write_gate(decide::WriteKind::of(op), rule.drift, ssa) {
        decide::WriteGate::Hold(policy) => {
            tracing::debug!(child = %describe(obj), "drift policy {policy:?}: the child is not updated");
            c.count(ChildOpLabel::Skip);
            Some(format!("drift policy {policy:?}"))
        }
        decide::WriteGate::Send {
            unless_drift: true, ..
        } if drift_reported(c, rule, w, obj, out).await => {
            Some(format!("drift policy {:?}", rule.drift))
        }
        decide::WriteGate::Send {
            unless_futile: true,
            ..
        } if futile(c, obj) => {
            tracing::debug!(child = %describe(obj), "update skipped: the API server ignored the same update of this child version");
            c.count(ChildOpLabel::Skip);
            Some("the API server ignored the same update of this version before".to_owned())
        }
        decide::WriteGate::Send { .. } => None,
    }
}

/// The object of a child operation.
fn op_object(op: &ChildOp) -> &Value {
    match op {
        ChildOp::Create(o) | ChildOp::Update(o) | ChildOp::Delete { object: o, .. } => o,
    }
}

/// After a sync's child writes: reports the fields the server dropped, records its contests and
/// keeps its reports (with the contests of children it holds); true when anything was reported.
async fn report_collected(c: &Children<'_>, parent: &Value, mut out: Collected) -> bool {
    for (child, paths) in &out.ignored {
        report_ignored_fields(c, parent, child, paths).await;
    }
    remember_contests(c, parent, out.contests, &mut out.reports).await;
    let reported = !out.ignored.is_empty() || !out.reports.is_empty();
    remember_reports(c, parent, out.reports);
    reported
}

/// Keeps a parent's reports for its status write and sets its share of `kmeta_child_drift`.
fn remember_reports(c: &Children<'_>, parent: &Value, reports: Vec<ChildReport>) {
    let uid = meta_str(parent, "uid");
    c.ctx
        .config
        .metrics
        .child_drift(c.controller, uid, reports.len());
    if let Ok(mut r) = c.memory.child_reports.lock() {
        r.set(uid, reports);
    }
}

/// The hook's status of `parent` with the child conditions of its last child management.
pub fn status_with_reports(
    c: &Children<'_>,
    parent: &Value,
    status: Option<&Value>,
) -> Option<Value> {
    let reports = c
        .memory
        .child_reports
        .lock()
        .map(|r| r.get(meta_str(parent, "uid")))
        .unwrap_or_default();
    let now = crate::reconcile::status::now_to_the_second();
    apply::with_child_conditions(status, parent, &reports, &now)
}

/// After a create or update `sent` that the server stored (as the `(uid, resourceVersion)`
/// version given) with the last-applied annotation text `stored_text`: when that is the text
/// sent, keeps what it records for the stored version, so the child's next update does not parse
/// it.
fn remember_last_applied(
    c: &Children<'_>,
    rule: &ChildRule,
    w: &Writing<'_>,
    sent: &Value,
    (uid, resource_version): (Option<&str>, Option<&str>),
    stored_text: Option<&str>,
) {
    let (Some(uid), Some(rv)) = (uid, resource_version) else {
        return;
    };
    let Some(want) = w.desired.get(&decide::child_key(sent)) else {
        return;
    };
    let sent_text = annotation_text(sent, &rule.options.annotation);
    if sent_text.is_none() || sent_text != stored_text {
        return;
    }
    if let (Ok(last), Ok(mut cache)) = (
        dynapply::recorded_last_applied(want, &rule.options),
        c.memory.last_applied.lock(),
    ) {
        cache.insert_version(uid, rv, last);
    }
}

fn annotation_text<'v>(obj: &'v Value, annotation: &str) -> Option<&'v str> {
    obj.pointer("/metadata/annotations")
        .and_then(|a| a.get(annotation))
        .and_then(Value::as_str)
}

/// After an update: remembers (or forgets) it as futile when the server kept the child as it
/// was, and collects the fields it dropped.
fn remember_ignored(
    c: &Children<'_>,
    sent: &Value,
    stored: &Value,
    ignored: &mut Vec<(String, Vec<String>)>,
) {
    let ignored_paths = futile::ignored_by_server(sent, stored);
    if let Ok(mut futile) = c.memory.futile_updates.lock() {
        match &ignored_paths {
            Some(_) => futile.record(sent, Instant::now()),
            None => futile.forget(sent),
        }
    }
    if let Some(paths) = ignored_paths.filter(|p| !p.is_empty()) {
        ignored.push((describe(sent), paths));
    }
}

/// A child update the API server answered without writing: the fields it dropped or overrode
/// would come back on every sync (the update is remembered and not repeated). Says so in a Warning event on the parent (rate-limited per parent)
/// and in the log, naming the fields.
async fn report_ignored_fields(c: &Children<'_>, parent: &Value, child: &str, paths: &[String]) {
    const SHOWN: usize = 5;
    let mut fields = paths
        .iter()
        .take(SHOWN)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if paths.len() > SHOWN {
        fields.push_str(&format!(" and {} more", paths.len() - SHOWN));
    }
    tracing::warn!(child, fields = %fields, "the API server dropped or overrode fields the hook sets");
    let note = format!(
        "the API server kept {child} unchanged: it drops or overrides {fields}, which the hook sets \
         (undeclared in the child's schema, or reset by admission); kmeta sends this update again \
         only when the child or the hook's answer changes"
    );
    c.ctx.event(parent, Reason::ChildFieldsIgnored, note).await;
}

/// The annotation on a CompositeController or DecoratorController that makes `atomic` in the
/// API server's OpenAPI v3 documents authoritative for its children's lists, as kubectl and
/// server-side apply treat it: `"true"`. Without it such a list whose items carry a conventional
/// merge key is merged by that key, as Metacontroller does (see [`served_rules`]).
pub const SCHEMA_ATOMIC_ANNOTATION: &str = "kmeta.dev/schema-atomic-lists";

/// Whether a controller object's `annotations` carry `kmeta.dev/schema-atomic-lists: "true"`.
pub fn schema_atomic_lists(annotations: Option<&BTreeMap<String, String>>) -> bool {
    annotations
        .and_then(|a| a.get(SCHEMA_ATOMIC_ANNOTATION))
        .is_some_and(|v| v == "true")
}

/// CRD groups always contain a dot; built-in groups have none or end in `.k8s.io`.
fn is_crd_group(group: &str) -> bool {
    group.contains('.') && !group.ends_with(".k8s.io")
}

/// The rules a child kind is merged with when the API server serves its schema (`served`, from
/// [`dynapply::ListRules::from_openapi_v3`]). With `schema_atomic` (the controller's opt-in), or
/// for a custom resource (whose CRD's markers kmeta has always followed), they are the schema's.
/// Otherwise an `atomic` list of the schema does not override the merge-key convention: the
/// rules are kmeta's built-in table of the kind (as before kmeta read OpenAPI documents) plus
/// the schema's maps and sets. A list item another actor added is then kept wherever
/// Metacontroller's convention keeps it (an EndpointSlice's `ports`, keyed by `port`).
pub fn served_rules(
    api_version: &str,
    kind: &str,
    group: &str,
    served: dynapply::ListRules,
    schema_atomic: bool,
) -> dynapply::ListRules {
    if schema_atomic || is_crd_group(group) {
        return served;
    }
    dynapply::ListRules::builtin(api_version, kind).merge(served.without_atomic())
}

/// The list markers of a child type could not be read (see [`list_rules`]).
#[derive(Debug, thiserror::Error)]
#[error("reading the list markers of {resource}: {source}")]
pub struct SchemaReadError {
    /// What was read: the CustomResourceDefinition `<plural>.<group>`, or the OpenAPI v3
    /// document of the child's group-version.
    pub resource: String,
    /// The API error.
    #[source]
    pub source: kube::Error,
}

/// The list rules dynapply merges a child type with: from the API server's OpenAPI v3 document
/// of its group-version (`x-kubernetes-list-type`/`list-map-keys`, the patch merge keys, the
/// preserve-unknown-fields subtrees), for built-in kinds, CRDs and aggregated APIs alike; read
/// once per build, the documents cached ([`crate::ops::openapi`]). A server that does not serve
/// the kind's schema gets the fallback (logged once): kmeta's built-in table of the kind, plus
/// the markers of its CRD's schema. A document or CRD that cannot be read fails the build, to be
/// tried again: merging without its markers would treat its lists and preserve-unknown subtrees
/// wrongly — under server-side apply a pod template's containers would be sent without the live
/// ones, and a sidecar another writer injected would be lost.
///
/// `schema_atomic` is the controller's `kmeta.dev/schema-atomic-lists` opt-in: see
/// [`served_rules`].
pub async fn list_rules(
    ctx: &Context,
    r: &Resolved,
    schema_atomic: bool,
) -> Result<dynapply::ListRules, SchemaReadError> {
    let served = ctx
        .openapi
        .list_rules(
            &ctx.client,
            &ctx.config.metrics,
            ctx.resources.generation(),
            &r.api.api_version,
            &r.api.kind,
        )
        .await
        .map_err(|source| SchemaReadError {
            resource: format!(
                "the OpenAPI v3 document /openapi/v3/{}",
                crate::ops::openapi::group_version_path(&r.api.api_version)
            ),
            source,
        })?;
    match served {
        Ok(rules) => {
            return Ok(served_rules(
                &r.api.api_version,
                &r.api.kind,
                &r.api.group,
                rules,
                schema_atomic,
            ));
        }
        Err(why) => ctx.openapi.log_fallback(&r.watch_key(), &why),
    }
    let builtin = dynapply::ListRules::builtin(&r.api.api_version, &r.api.kind);
    if !is_crd_group(&r.api.group) {
        return Ok(builtin);
    }
    let crds: kube::Api<
        k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
    > = kube::Api::all(ctx.client.clone());
    let resource = format!("{}.{}", r.api.plural, r.api.group);
    let crd = crds
        .get_opt(&resource)
        .await
        .map_err(|source| SchemaReadError {
            resource: format!("the CustomResourceDefinition {resource}"),
            source,
        })?;
    let Some(crd) = crd else {
        return Ok(builtin);
    };
    match serde_json::to_value(crd)
        .map_err(|e| e.to_string())
        .and_then(|v| {
            dynapply::ListRules::from_crd(&v, Some(&r.api.version)).map_err(|e| e.to_string())
        }) {
        Ok(from_schema) => Ok(builtin.merge(from_schema)),
        Err(e) => {
            tracing::warn!(resource = %r.watch_key(), error = %e, "ignoring crd list markers");
            Ok(builtin)
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use dynapply::{ListRule, ListRules};

    /// An EndpointSlice's rules as its schema gives them: `ports` and `endpoints` atomic.
    fn slice_schema() -> ListRules {
        let mut rules = ListRules::new();
        rules.set("ports", ListRule::Atomic);
        rules.set("endpoints", ListRule::Atomic);
        rules.set("endpoints.addresses", ListRule::Set);
        rules
    }

    #[test]
    fn schema_atomic_lists_is_opt_in() {
        assert!(!schema_atomic_lists(None));
        let mut a = BTreeMap::new();
        assert!(!schema_atomic_lists(Some(&a)));
        a.insert(SCHEMA_ATOMIC_ANNOTATION.to_owned(), "yes".to_owned());
        assert!(!schema_atomic_lists(Some(&a)));
        a.insert(SCHEMA_ATOMIC_ANNOTATION.to_owned(), "true".to_owned());
        assert!(schema_atomic_lists(Some(&a)));
    }

    #[test]
    fn atomic_from_the_schema_applies_only_when_opted_in() {
        let av = "discovery.k8s.io/v1";
        let by_default = served_rules(
            av,
            "EndpointSlice",
            "discovery.k8s.io",
            slice_schema(),
            false,
        );
        // the convention decides (`port` keys the ports), sets stay
        assert_eq!(by_default.get("ports"), None);
        assert_eq!(by_default.get("endpoints"), None);
        assert_eq!(by_default.get("endpoints.addresses"), Some(&ListRule::Set));
        assert_eq!(by_default.get("metadata.finalizers"), Some(&ListRule::Set));
        let opted_in = served_rules(
            av,
            "EndpointSlice",
            "discovery.k8s.io",
            slice_schema(),
            true,
        );
        assert_eq!(opted_in.get("ports"), Some(&ListRule::Atomic));
    }

    #[test]
    fn by_default_the_table_keeps_its_rules() {
        // Kubernetes 1.37 marks a ServiceAccount's imagePullSecrets and a RoleBinding's subjects
        // atomic; kmeta merged the first by `name` and replaced the second before it read schemas
        let mut schema = ListRules::new();
        schema.set("imagePullSecrets", ListRule::Atomic);
        schema.set("secrets", ListRule::Map(vec!["name".to_owned()]));
        let sa = served_rules("v1", "ServiceAccount", "", schema.clone(), false);
        assert_eq!(
            sa.get("imagePullSecrets"),
            Some(&ListRule::Map(vec!["name".to_owned()]))
        );
        let sa = served_rules("v1", "ServiceAccount", "", schema, true);
        assert_eq!(sa.get("imagePullSecrets"), Some(&ListRule::Atomic));
        let mut schema = ListRules::new();
        schema.set("subjects", ListRule::Atomic);
        let rb = "rbac.authorization.k8s.io";
        let binding = served_rules(&format!("{rb}/v1"), "RoleBinding", rb, schema, false);
        assert_eq!(binding.get("subjects"), Some(&ListRule::Atomic));
    }

    #[test]
    fn a_custom_resource_keeps_its_schema_atomic_lists() {
        let mut schema = ListRules::new();
        schema.set("spec.hosts", ListRule::Atomic);
        let rules = served_rules("example.com/v1", "Thing", "example.com", schema, false);
        assert_eq!(rules.get("spec.hosts"), Some(&ListRule::Atomic));
    }
}
