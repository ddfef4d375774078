//! Pure decisions of a sync: claiming, finalizers, hook choice, desired-children validation, the
//! child plan and the status diff. No I/O here; the executor in [`crate::reconcile::composite::sync`] acts on them.

use std::borrow::Borrow;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde_json::{Map, Value, json};

use crate::api::ChildUpdateMethod;
use crate::hook::wire::group_key;
use crate::object::{ObjectView, describe, has_finalizer, is_deleting, meta, meta_str};
use crate::runtime::selector::{self, SelectorError};

/// The generated-selector label.
pub const CONTROLLER_UID_LABEL: &str = "controller-uid";

/// The finalizer kmeta puts on parents of CC `cc` that has a finalize hook.
pub fn finalizer_name(cc: &str) -> String {
    format!("metacontroller.io/compositecontroller-{cc}")
}

/// Errors found while deciding.
#[derive(Debug, thiserror::Error)]
pub enum DecideError {
    /// The parent's selector is missing/empty or invalid.
    #[error("parent {parent}: {message}")]
    Selector {
        /// `namespace/name` of the parent.
        parent: String,
        /// What is wrong.
        message: String,
    },
    /// A desired child breaks a rule; nothing is written.
    #[error("desired child {child}: {message}")]
    InvalidChild {
        /// `Kind.apiVersion namespace/name`.
        child: String,
        /// The rule it breaks.
        message: String,
    },
    /// A label selector failed to evaluate.
    #[error(transparent)]
    BadSelector(#[from] SelectorError),
    /// dynapply refused an object.
    #[error("applying {child}: {source}")]
    Apply {
        /// The child.
        child: String,
        /// Cause.
        source: dynapply::Error,
    },
}

/// The controllerRef a parent puts on its children.
pub fn owner_reference(parent: &Value) -> Value {
    json!({
        "apiVersion": parent.get("apiVersion").cloned().unwrap_or(Value::Null),
        "kind": parent.get("kind").cloned().unwrap_or(Value::Null),
        "name": meta_str(parent, "name"),
        "uid": meta_str(parent, "uid"),
        "controller": true,
        "blockOwnerDeletion": true,
    })
}

// ---------------------------------------------------------------------------------------------
// selector of a parent

/// The selector children must match: `controller-uid=<uid>` with generateSelector, else the
/// parent's `spec.selector`, which must not be empty.
pub fn parent_selector(
    parent: &Value,
    generate_selector: bool,
) -> Result<LabelSelector, DecideError> {
    let who = || describe(parent);
    if generate_selector {
        return Ok(selector::single(
            CONTROLLER_UID_LABEL,
            meta_str(parent, "uid"),
        ));
    }
    let Some(raw) = parent.pointer("/spec/selector").filter(|v| !v.is_null()) else {
        return Err(DecideError::Selector {
            parent: who(),
            message:
                "spec.selector is required (or set generateSelector on the CompositeController)"
                    .into(),
        });
    };
    let sel = selector::decode(raw, "spec.selector")?;
    if selector::is_empty(&sel) {
        return Err(DecideError::Selector {
            parent: who(),
            message: "spec.selector must have matchLabels or matchExpressions".into(),
        });
    }
    Ok(sel)
}

// ---------------------------------------------------------------------------------------------
// claiming

/// What to do with one candidate child.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    /// Already ours and matching: an observed child.
    Owned,
    /// An orphan that matches: add our controllerRef.
    Adopt,
    /// Ours but no longer matching: remove our ownerRef.
    Release,
    /// Controlled by someone else, or not eligible.
    Ignore,
}

/// `ClaimObject` of Kubernetes' controller ref manager.
pub fn claim_child(
    parent_uid: &str,
    parent_deleting: bool,
    matches: bool,
    child: &impl ObjectView,
) -> Claim {
    match child.controller() {
        Some(r) if r.uid == parent_uid => {
            if matches {
                Claim::Owned
            } else if parent_deleting {
                Claim::Ignore
            } else {
                Claim::Release
            }
        }
        Some(_) => Claim::Ignore,
        None if parent_deleting || child.deleting() || !matches => Claim::Ignore,
        None => Claim::Adopt,
    }
}

/// Claims of every candidate (objects owned by the parent plus orphans), as the candidates were
/// given (the cache's shared `Arc`s, or values).
#[derive(Debug, Clone, PartialEq)]
pub struct ClaimPlan<C = Value> {
    /// Observed children.
    pub owned: Vec<C>,
    /// Orphans to adopt (they become observed once adopted).
    pub adopt: Vec<C>,
    /// Children to release.
    pub release: Vec<C>,
}

impl<C> Default for ClaimPlan<C> {
    fn default() -> Self {
        ClaimPlan {
            owned: Vec::new(),
            adopt: Vec::new(),
            release: Vec::new(),
        }
    }
}

/// Decides claims for every candidate. Candidates are moved into the plan as they are (the
/// cache's shared objects: no copy); the ones ignored are dropped.
pub fn claim_children<C: ObjectView>(
    parent: &Value,
    selector: &LabelSelector,
    candidates: impl IntoIterator<Item = C>,
) -> Result<ClaimPlan<C>, DecideError> {
    let uid = meta_str(parent, "uid");
    let deleting = is_deleting(parent);
    let mut plan = ClaimPlan::default();
    for c in candidates {
        let m = selector::matches_object(selector, &c)?;
        match claim_child(uid, deleting, m, &c) {
            Claim::Owned => plan.owned.push(c),
            Claim::Adopt => plan.adopt.push(c),
            Claim::Release => plan.release.push(c),
            Claim::Ignore => {}
        }
    }
    Ok(plan)
}

/// `child` with the parent's controllerRef appended (unless a ref with that UID exists).
pub fn with_owner(child: &Value, parent: &Value) -> Value {
    add_owner(child.clone(), parent)
}

/// [`with_owner`] of a child the caller owns (no copy).
pub fn add_owner(mut out: Value, parent: &Value) -> Value {
    let uid = meta_str(parent, "uid").to_owned();
    if let Some(m) = out.get_mut("metadata").and_then(Value::as_object_mut) {
        let refs = m
            .entry("ownerReferences")
            .or_insert_with(|| Value::Array(Vec::new()));
        if !refs.is_array() {
            *refs = Value::Array(Vec::new());
        }
        if let Some(a) = refs.as_array_mut()
            && !a
                .iter()
                .any(|r| r.get("uid").and_then(Value::as_str) == Some(&uid))
        {
            a.push(owner_reference(parent));
        }
    }
    out
}

/// `child` without owner references to `parent_uid`.
pub fn without_owner(child: &Value, parent_uid: &str) -> Value {
    let mut out = child.clone();
    if let Some(a) = out
        .pointer_mut("/metadata/ownerReferences")
        .and_then(Value::as_array_mut)
    {
        a.retain(|r| r.get("uid").and_then(Value::as_str) != Some(parent_uid));
    }
    out
}

// ---------------------------------------------------------------------------------------------
// finalizer and hook choice

/// What to do with our finalizer before calling a hook.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinalizerAction {
    /// Add it (finalize hook, parent alive, not yet present).
    Add,
    /// Remove it (no finalize hook, present).
    Remove,
    /// Leave it.
    Keep,
}

/// Before the hook: add when a finalize hook exists and the parent is alive; remove when there
/// is no finalize hook.
pub fn finalizer_before_hook(
    has_finalize_hook: bool,
    deleting: bool,
    present: bool,
) -> FinalizerAction {
    match (has_finalize_hook, deleting, present) {
        (true, false, false) => FinalizerAction::Add,
        (false, _, true) => FinalizerAction::Remove,
        _ => FinalizerAction::Keep,
    }
}

/// After the hook: remove when the finalize hook said `finalized` and the finalizer is present.
pub fn finalizer_after_hook(finalizing: bool, finalized: bool, present: bool) -> FinalizerAction {
    if finalizing && finalized && present {
        FinalizerAction::Remove
    } else {
        FinalizerAction::Keep
    }
}

/// Which hook a sync calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HookChoice {
    /// The sync hook.
    Sync,
    /// The finalize hook (parent being deleted, or no longer selected, with our finalizer).
    Finalize,
    /// Nothing to do for this parent.
    Skip,
}

/// Metacontroller's rule (`syncParentObject`, `shouldCallFinalizeHook` in
/// `pkg/controller/composite`): a parent that is neither selected nor carries our finalizer is
/// skipped; otherwise the finalize hook is called when one exists and the parent is being
/// deleted or no longer matches the labelSelector, else the sync hook — for a parent being
/// deleted too, to report its status (its children are then left alone:
/// [`may_manage_children`]).
pub fn choose_hook(
    has_finalize_hook: bool,
    deleting: bool,
    selected: bool,
    has_our_finalizer: bool,
) -> HookChoice {
    if !selected && !has_our_finalizer {
        HookChoice::Skip
    } else if has_finalize_hook && (deleting || !selected) {
        HookChoice::Finalize
    } else {
        HookChoice::Sync
    }
}

/// Children may be managed while the parent is alive, or while it is being finalized by our
/// finalize hook (no foreground/orphan GC finalizer).
pub fn may_manage_children(parent: &Value, finalizing: bool, our_finalizer: &str) -> bool {
    if !is_deleting(parent) {
        return true;
    }
    finalizing
        && has_finalizer(parent, our_finalizer)
        && !has_finalizer(parent, "foregroundDeletion")
        && !has_finalizer(parent, "orphan")
}

/// With `ignoreStatusChanges`, a parent update is relevant only when generation, labels or
/// annotations differ, or the parent is being deleted (any update then, as Metacontroller's
/// `updateParentObject`: a status-only change during finalization still syncs).
pub fn parent_update_relevant(old: &Value, new: &Value) -> bool {
    is_deleting(new)
        || ["generation", "labels", "annotations"]
            .iter()
            .any(|f| meta(old, f) != meta(new, f))
}

// ---------------------------------------------------------------------------------------------
// desired children

/// What validation needs to know about a declared child type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChildType {
    /// Namespaced or cluster-scoped.
    pub namespaced: bool,
    /// Update method.
    pub method: ChildUpdateMethod,
}

/// Defaults namespaces and checks every desired child: its type is declared; it matches the
/// parent selector (adding `controller-uid` with generateSelector); a namespaced parent only gets
/// children in its own namespace and no cluster-scoped children. Returns the children keyed by
/// [`child_key`] (a later duplicate replaces an earlier one, as Metacontroller).
pub fn validate_desired(
    parent: &Value,
    parent_namespaced: bool,
    declared: &HashMap<String, ChildType>,
    selector: &LabelSelector,
    generate_selector: bool,
    children: Vec<Value>,
) -> Result<BTreeMap<String, Value>, DecideError> {
    let parent_ns = meta_str(parent, "namespace");
    let mut out = BTreeMap::new();
    for mut child in children {
        let av = child
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let kind = child
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let gk = group_key(av, kind);
        let bad = |child: &Value, message: String| DecideError::InvalidChild {
            child: format!("{gk} {}", describe(child)),
            message,
        };
        let Some(t) = declared.get(&gk) else {
            let known: Vec<&str> = declared.keys().map(String::as_str).collect();
            return Err(bad(
                &child,
                format!(
                    "type {gk} is not a declared child resource (declared: {})",
                    known.join(", ")
                ),
            ));
        };
        let ns = meta_str(&child, "namespace").to_owned();
        let Some(m) = child.get_mut("metadata").and_then(Value::as_object_mut) else {
            return Err(bad(&child, "metadata must be an object".into()));
        };
        if let Err(message) = place_in_namespace(m, &ns, t.namespaced, parent_namespaced, parent_ns)
        {
            return Err(bad(&child, message));
        }
        if generate_selector {
            add_controller_uid(m, meta_str(parent, "uid"));
        }
        if !selector::matches_object(selector, &child)? {
            return Err(bad(
                &child,
                format!(
                    "labels {:?} don't match parent selector {:?}",
                    selector::labels_of(&child),
                    selector::to_query(selector)
                ),
            ));
        }
        let key = child_key(&child);
        let problem = name_problem(meta_str(&child, "name")).or_else(|| {
            out.contains_key(&key)
                .then(|| "appears more than once in the hook's response".to_owned())
        });
        if let Some(message) = problem {
            return Err(bad(&child, message));
        }
        out.insert(key, child);
    }
    Ok(out)
}

/// The namespace rules of a child's metadata `m` (its namespace `ns`): a namespaced child of a
/// namespaced parent defaults to, and must stay in, the parent's namespace; a cluster-scoped
/// parent names the namespace of each namespaced child; a namespaced parent owns no
/// cluster-scoped child; a cluster-scoped child carries no namespace.
fn place_in_namespace(
    m: &mut Map<String, Value>,
    ns: &str,
    namespaced: bool,
    parent_namespaced: bool,
    parent_ns: &str,
) -> Result<(), String> {
    if namespaced {
        if ns.is_empty() {
            if !parent_namespaced {
                return Err("metadata.namespace is required: the type is namespaced and the parent is cluster-scoped".into());
            }
            m.insert("namespace".into(), Value::String(parent_ns.to_owned()));
        } else if parent_namespaced && ns != parent_ns {
            return Err(format!(
                "namespace {ns:?} differs from the parent's {parent_ns:?}; a namespaced parent may only own children in its namespace"
            ));
        }
    } else if parent_namespaced {
        return Err("a namespaced parent may not own cluster-scoped children".into());
    } else if !ns.is_empty() {
        m.remove("namespace");
    }
    Ok(())
}

/// Adds the generated-selector label `controller-uid=<parent uid>` unless the child sets it.
fn add_controller_uid(m: &mut Map<String, Value>, parent_uid: &str) {
    let labels = m
        .entry("labels")
        .or_insert_with(|| Value::Object(Map::new()));
    if labels.is_null() {
        *labels = Value::Object(Map::new());
    }
    if let Some(l) = labels.as_object_mut() {
        l.entry(CONTROLLER_UID_LABEL)
            .or_insert_with(|| Value::String(parent_uid.to_owned()));
    }
}

/// What is wrong with a child's name for every kind of object: empty, longer than 253
/// characters, `.` or `..`, or containing `/` or `%` (kinds add stricter rules of their own,
/// which the API server reports).
fn name_problem(name: &str) -> Option<String> {
    if name.is_empty() {
        Some("metadata.name is empty".to_owned())
    } else if name.len() > 253 {
        Some(format!(
            "metadata.name is {} characters, at most 253 are allowed",
            name.len()
        ))
    } else if name == "." || name == ".." || name.contains(['/', '%']) {
        Some(format!(
            "metadata.name {name:?} may not be '.' or '..' or contain '/' or '%'"
        ))
    } else {
        None
    }
}

/// Whether applying `desired` (keyed by [`child_key`]) over `observed` creates a child: one
/// desired and not observed.
pub fn creates_any<O: Borrow<Value>>(observed: &[O], desired: &BTreeMap<String, Value>) -> bool {
    if desired.len() > observed.len() {
        return true;
    }
    let have: HashSet<String> = observed.iter().map(|o| child_key(o.borrow())).collect();
    desired.keys().any(|k| !have.contains(k))
}

/// Identity of a child: `Kind.apiVersion namespace/name` (the type part is [`group_key`]).
pub fn child_key(obj: &Value) -> String {
    let field = |f: &str| obj.get(f).and_then(Value::as_str).unwrap_or_default();
    let (av, kind) = (field("apiVersion"), field("kind"));
    let (ns, name) = (meta_str(obj, "namespace"), meta_str(obj, "name"));
    let mut key = String::with_capacity(kind.len() + av.len() + ns.len() + name.len() + 3);
    for part in [kind, ".", av, " ", ns, "/", name] {
        key.push_str(part);
    }
    key
}

// ---------------------------------------------------------------------------------------------
// the child plan

/// One write to make to a child.
#[derive(Debug, Clone, PartialEq)]
pub enum ChildOp {
    /// POST this object.
    Create(Value),
    /// PUT this merged object (carries the live resourceVersion).
    Update(Value),
    /// DELETE with a UID precondition and Background propagation.
    Delete {
        /// The observed object being deleted.
        object: Value,
        /// Why: `not desired` or `recreate`.
        reason: &'static str,
    },
}

/// Plans child writes: deletes of observed children no longer desired (first), then creates of
/// missing ones and updates per update method. Children being deleted are never touched.
/// `options` gives the dynapply options (list rules) for a child type; `last_applied` the
/// last-applied configuration of an observed child when it is known for that child version
/// (otherwise dynapply parses the annotation).
pub fn plan_children<'o, O: Borrow<Value>>(
    parent: &Value,
    observed: &[O],
    desired: &BTreeMap<String, Value>,
    method: impl Fn(&str) -> ChildUpdateMethod,
    options: impl Fn(&str) -> &'o dynapply::Options,
    last_applied: impl Fn(&Value, &dynapply::Options) -> Option<KnownLast>,
) -> Result<Vec<ChildOp>, DecideError> {
    let observed: BTreeMap<String, &Value> = observed
        .iter()
        .map(|o| (child_key(o.borrow()), o.borrow()))
        .collect();
    let mut ops = Vec::new();
    for (key, obs) in &observed {
        if !desired.contains_key(key) && !is_deleting(obs) {
            ops.push(ChildOp::Delete {
                object: (*obs).clone(),
                reason: "not desired",
            });
        }
    }
    for (key, want) in desired {
        let gk = key.split(' ').next().unwrap_or_default();
        let opts = options(gk);
        let err = |source| DecideError::Apply {
            child: key.clone(),
            source,
        };
        match observed.get(key) {
            None => {
                let created = dynapply::prepare_create(want, opts).map_err(err)?;
                ops.push(ChildOp::Create(add_owner(created, parent)));
            }
            Some(obs) if is_deleting(obs) => {}
            Some(obs) => match update(obs, last_applied(obs, opts), want, opts).map_err(err)? {
                dynapply::Outcome::Unchanged => {}
                dynapply::Outcome::Changed(merged) => match method(gk) {
                    ChildUpdateMethod::OnDelete => {}
                    ChildUpdateMethod::Recreate | ChildUpdateMethod::RollingRecreate => {
                        ops.push(ChildOp::Delete {
                            object: (*obs).clone(),
                            reason: "recreate",
                        });
                    }
                    ChildUpdateMethod::InPlace | ChildUpdateMethod::RollingInPlace => {
                        ops.push(ChildOp::Update(merged));
                    }
                },
            },
        }
    }
    Ok(ops)
}

/// The plan's writes in two phases: first the deletes of children no longer desired, then the
/// creates, updates and deletes for recreation (each phase's writes may run at once).
pub fn write_phases(ops: Vec<ChildOp>) -> (Vec<ChildOp>, Vec<ChildOp>) {
    ops.into_iter().partition(|op| {
        matches!(
            op,
            ChildOp::Delete {
                reason: "not desired",
                ..
            }
        )
    })
}

/// A child's last-applied configuration known for its observed version: `recorded` when the
/// annotation holds the canonical encoding of `value` — kmeta wrote that version, or parsed it
/// back and [`dynapply::is_recorded`] recognised it — so an update compares the answer with it
/// instead of encoding the answer ([`dynapply::apply_update_recorded`]); else parsed from an
/// annotation written in another form.
#[derive(Clone, Debug)]
pub struct KnownLast {
    /// The configuration.
    pub value: std::sync::Arc<Value>,
    /// Whether the annotation of this very version is dynapply's encoding of it.
    pub recorded: bool,
}

impl KnownLast {
    /// dynapply's update of `obs` (the version this configuration is known for) to `want`.
    pub fn apply_update(
        &self,
        obs: &Value,
        want: &Value,
        opts: &dynapply::Options,
    ) -> Result<dynapply::Outcome, dynapply::Error> {
        match self.recorded {
            true => dynapply::apply_update_recorded(obs, &self.value, want, opts),
            false => dynapply::apply_update_with(obs, Some(&self.value), want, opts),
        }
    }
}

/// dynapply's update of `obs`, with its last-applied configuration when known.
fn update(
    obs: &Value,
    last: Option<KnownLast>,
    want: &Value,
    opts: &dynapply::Options,
) -> Result<dynapply::Outcome, dynapply::Error> {
    match last {
        Some(last) => last.apply_update(obs, want, opts),
        None => dynapply::apply_update(obs, want, opts),
    }
}

/// Under drift policy `Report` (dynamic apply): `Some(paths)` when the hook's answer for a child
/// is the one last applied, so a difference between `live` and `desired` was made by others
/// (the drifted fields, see [`crate::reconcile::apply::drifted_paths`]); `None` when the hook's
/// answer changed (its change is written) or the last-applied record cannot be read.
pub fn drift_only(live: &Value, desired: &Value, opts: &dynapply::Options) -> Option<Vec<String>> {
    let prepared = dynapply::prepare_create(desired, opts).ok()?;
    let last = dynapply::get_last_applied(live, opts).ok()??;
    let want = dynapply::get_last_applied(&prepared, opts).ok()??;
    dynapply::json_eq(&last, &want).then(|| crate::reconcile::apply::drifted_paths(&prepared, live))
}

// ---------------------------------------------------------------------------------------------
// status

/// The status to write: the hook's (or `{}`) with `observedGeneration`.
pub fn desired_status(hook_status: Option<&Value>, generation: Option<i64>) -> Value {
    let mut s = match hook_status {
        Some(Value::Object(m)) => m.clone(),
        _ => Map::new(),
    };
    if let Some(g) = generation {
        s.insert("observedGeneration".into(), json!(g));
    }
    Value::Object(s)
}

/// Whether the live status differs from the desired one (numbers by value, key order ignored).
pub fn status_changed(live: &Value, desired: &Value) -> bool {
    !dynapply::json_eq(live.get("status").unwrap_or(&Value::Null), desired)
}

/// The condition type kmeta sets on a parent whose sync failed.
pub const SYNCED_CONDITION: &str = "Synced";

/// The parent with a `Synced=False` condition (reason `SyncError`, `message`) in its status, or
/// None when the live status already says exactly that. Other conditions and status fields are
/// kept; `lastTransitionTime` (`now`, RFC 3339) changes only when the status flips. The next
/// successful sync writes the hook's status, which drops the condition again.
pub fn with_sync_failure(live: &Value, message: &str, now: &str) -> Option<Value> {
    let mut next = live.clone();
    let root = next.as_object_mut()?;
    let status = root
        .entry("status")
        .or_insert_with(|| Value::Object(Map::new()));
    if !status.is_object() {
        *status = Value::Object(Map::new());
    }
    let status = status.as_object_mut()?;
    let conditions = status
        .entry("conditions")
        .or_insert_with(|| Value::Array(Vec::new()));
    if !conditions.is_array() {
        *conditions = Value::Array(Vec::new());
    }
    let conditions = conditions.as_array_mut()?;
    let existing = conditions
        .iter_mut()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(SYNCED_CONDITION));
    let want = |transition: &str| {
        json!({"type": SYNCED_CONDITION, "status": "False", "reason": "SyncError",
               "message": message, "lastTransitionTime": transition})
    };
    match existing {
        Some(c) => {
            let same = |k: &str, v: &str| c.get(k).and_then(Value::as_str) == Some(v);
            if same("status", "False") && same("reason", "SyncError") && same("message", message) {
                return None;
            }
            let transition = if same("status", "False") {
                c.get("lastTransitionTime")
                    .and_then(Value::as_str)
                    .unwrap_or(now)
                    .to_owned()
            } else {
                now.to_owned()
            };
            *c = want(&transition);
        }
        None => conditions.push(want(now)),
    }
    Some(next)
}

/// After an update of a child: when the API server answered with the resourceVersion the child
/// was sent with, it changed nothing, so whatever the sent object has that the stored one does not
/// was dropped or overridden by the server (fields the child's schema does not declare, values an
/// admission webhook resets). Returns those field paths (`spec.extra`, `spec.ports[1]`); `None`
/// when the server did write. The merge will send them again on every sync.
pub fn ignored_by_server(sent: &Value, stored: &Value) -> Option<Vec<String>> {
    let rv = |o: &Value| o.pointer("/metadata/resourceVersion").cloned();
    if rv(sent).is_none() || rv(sent) != rv(stored) {
        return None;
    }
    let mut paths = Vec::new();
    if let (Some(sent), Some(stored)) = (sent.as_object(), stored.as_object()) {
        for (k, v) in sent {
            // server-owned: status has its own endpoint, metadata's system fields are not ours
            if k == "status" || k == "apiVersion" || k == "kind" {
                continue;
            }
            if k == "metadata" {
                for f in ["labels", "annotations", "finalizers", "ownerReferences"] {
                    let (a, b) = (v.get(f), stored.get("metadata").and_then(|m| m.get(f)));
                    if let Some(a) = a {
                        differences(a, b, &format!("metadata.{f}"), &mut paths);
                    }
                }
                continue;
            }
            differences(v, stored.get(k), k, &mut paths);
        }
    }
    Some(paths)
}

/// Child updates the API server answered without writing (see [`ignored_by_server`]), so the same
/// update of the same child version is not sent again on every sync: keyed by the child's uid,
/// with its resourceVersion and a digest of the object that was sent. Any change to the child
/// (a new resourceVersion) or to what kmeta would send (a new digest) sends it again, and so does
/// the passing of [`FutileUpdates::TTL`] (the server's answer may change without the child
/// changing: a CRD that now declares the field, a webhook removed).
#[derive(Debug, Default)]
pub struct FutileUpdates {
    seen: HashMap<String, (String, u64, Instant)>,
}

impl FutileUpdates {
    /// Entries kept at most; past it the memory is dropped (the cost: one more futile PUT each).
    pub const CAPACITY: usize = 10_000;
    /// How long a futile update is not repeated: 10 minutes (one PUT per child per 10 minutes
    /// instead of one per sync; kmeta's choice, Metacontroller has no such memory).
    pub const TTL: Duration = Duration::from_secs(600);

    fn key(obj: &Value) -> Option<(String, String, u64)> {
        use std::hash::{Hash as _, Hasher as _};
        let uid = obj.pointer("/metadata/uid")?.as_str()?;
        let rv = obj.pointer("/metadata/resourceVersion")?.as_str()?;
        let mut h = std::collections::hash_map::DefaultHasher::new();
        obj.to_string().hash(&mut h);
        Some((uid.to_owned(), rv.to_owned(), h.finish()))
    }

    /// Whether sending `obj` (an update) at `now` is known to change nothing.
    pub fn is_futile(&self, obj: &Value, now: Instant) -> bool {
        Self::key(obj).is_some_and(|(uid, rv, digest)| {
            self.seen.get(&uid).is_some_and(|(r, d, at)| {
                *r == rv && *d == digest && now.saturating_duration_since(*at) < Self::TTL
            })
        })
    }

    /// Records that sending `obj` at `now` changed nothing.
    pub fn record(&mut self, obj: &Value, now: Instant) {
        if let Some((uid, rv, digest)) = Self::key(obj) {
            if self.seen.len() >= Self::CAPACITY {
                self.seen.clear();
            }
            self.seen.insert(uid, (rv, digest, now));
        }
    }

    /// Forgets a child (it was written, or deleted).
    pub fn forget(&mut self, obj: &Value) {
        if let Some(uid) = obj.pointer("/metadata/uid").and_then(Value::as_str) {
            self.seen.remove(uid);
        }
    }
}

/// Paths under `path` where `sent` has something `stored` does not (recursing into objects, and
/// into lists of the same length item by item).
fn differences(sent: &Value, stored: Option<&Value>, path: &str, out: &mut Vec<String>) {
    match (sent, stored) {
        (_, None) => out.push(path.to_owned()),
        (Value::Object(a), Some(Value::Object(b))) => {
            for (k, v) in a {
                differences(v, b.get(k), &format!("{path}.{k}"), out);
            }
        }
        (Value::Array(a), Some(Value::Array(b))) if a.len() == b.len() => {
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                differences(x, Some(y), &format!("{path}[{i}]"), out);
            }
        }
        (a, Some(b)) if !dynapply::json_eq(a, b) => out.push(path.to_owned()),
        _ => {}
    }
}

// ---------------------------------------------------------------------------------------------
// child write failures

/// What a failed child write means for the sync.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteFailure {
    /// Resolved by itself: the next watch event brings the newer or missing object and its
    /// parent is synced again (an update's Conflict, a NotFound on update or delete, a create
    /// whose name is already held by a child of this parent that the cache has not seen yet).
    LeftToNextSync,
    /// Needs someone to act: reported on the parent (event, condition), retried with backoff.
    /// The explanation, when there is more to say than the API error.
    Failed(Option<String>),
}

/// Classifies a failed child write: `op` is `create`, `update` or `delete`, `code` the HTTP
/// status, `holder` (creates answered 409 only) the controller UID of the object that holds the
/// name (`Some("")` when it has no controller, `None` when unknown), `parent_uid` this parent's.
pub fn child_write_failure(
    op: &str,
    code: Option<u16>,
    holder: Option<Option<String>>,
    parent_uid: &str,
) -> WriteFailure {
    match (op, code) {
        ("create", Some(409)) => match holder.flatten() {
            Some(uid) if uid == parent_uid => WriteFailure::LeftToNextSync,
            Some(uid) if uid.is_empty() => WriteFailure::Failed(Some(
                "the name is held by an object no controller owns (it is adopted only if it matches the parent's selector)".into(),
            )),
            Some(_) => WriteFailure::Failed(Some(
                "the name is held by an object another controller owns".into(),
            )),
            None => WriteFailure::LeftToNextSync,
        },
        ("create", Some(404)) => WriteFailure::Failed(Some(
            "the namespace does not exist".into(),
        )),
        ("update", Some(409)) | ("update" | "delete", Some(404)) => WriteFailure::LeftToNextSync,
        _ => WriteFailure::Failed(None),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {

    #[test]
    fn futile_updates_are_remembered_per_child_version_and_content() {
        let sent = json!({"metadata": {"uid": "u1", "resourceVersion": "7"}, "spec": {"x": 1}});
        let t0 = Instant::now();
        let mut f = FutileUpdates::default();
        assert!(!f.is_futile(&sent, t0));
        f.record(&sent, t0);
        assert!(f.is_futile(&sent, t0 + Duration::from_secs(1)));
        assert!(
            !f.is_futile(&sent, t0 + FutileUpdates::TTL),
            "tried again after the TTL"
        );
        let mut newer = sent.clone();
        newer["metadata"]["resourceVersion"] = json!("8");
        assert!(!f.is_futile(&newer, t0), "the child changed");
        let mut other = sent.clone();
        other["spec"]["x"] = json!(2);
        assert!(!f.is_futile(&other, t0), "kmeta would send something else");
        f.forget(&sent);
        assert!(!f.is_futile(&sent, t0));
        let no_uid = json!({"metadata": {"resourceVersion": "7"}});
        f.record(&no_uid, t0);
        assert!(!f.is_futile(&no_uid, t0));
    }

    #[test]
    fn fields_the_server_ignored_on_a_no_op_update() {
        let sent = json!({"apiVersion": "example.com/v1", "kind": "Gadget",
            "metadata": {"name": "g", "resourceVersion": "7", "labels": {"a": "1"}},
            "spec": {"known": "x", "extra": {"deep": 1}, "ports": [{"port": 80, "name": "web"}],
                     "count": 1},
            "status": {"whatever": true}});
        let stored = json!({"apiVersion": "example.com/v1", "kind": "Gadget",
            "metadata": {"name": "g", "resourceVersion": "7", "labels": {"a": "1"},
                         "uid": "u", "managedFields": []},
            "spec": {"known": "x", "ports": [{"port": 80}], "count": 1.0, "defaulted": 3}});
        assert_eq!(
            ignored_by_server(&sent, &stored),
            Some(vec![
                "spec.extra".to_owned(),
                "spec.ports[0].name".to_owned()
            ])
        );
        let mut written = stored.clone();
        written["metadata"]["resourceVersion"] = json!("8");
        assert_eq!(ignored_by_server(&sent, &written), None, "the server wrote");
        assert_eq!(
            ignored_by_server(&stored, &stored),
            Some(vec![]),
            "nothing ignored"
        );
    }
    use super::*;
    use crate::object::controller_ref;

    #[test]
    fn sync_failure_condition_is_written_once_and_keeps_other_status() {
        let live = json!({"metadata": {"name": "p"},
            "status": {"ready": 2, "conditions": [{"type": "Ready", "status": "True"}]}});
        let next = with_sync_failure(&live, "hook timed out", "2026-01-01T00:00:00Z").unwrap();
        assert_eq!(next["status"]["ready"], 2);
        let conds = next["status"]["conditions"].as_array().unwrap();
        assert_eq!(conds.len(), 2);
        assert_eq!(conds[1]["type"], "Synced");
        assert_eq!(conds[1]["status"], "False");
        assert_eq!(conds[1]["message"], "hook timed out");
        // same failure again: nothing to write
        assert!(with_sync_failure(&next, "hook timed out", "2026-01-01T00:01:00Z").is_none());
        // a different message keeps the transition time
        let again = with_sync_failure(&next, "http status 500", "2026-01-01T00:02:00Z").unwrap();
        assert_eq!(
            again["status"]["conditions"][1]["lastTransitionTime"],
            "2026-01-01T00:00:00Z"
        );
        // no status at all, or a non-object status
        let bare = with_sync_failure(&json!({"status": "weird"}), "x", "t").unwrap();
        assert_eq!(bare["status"]["conditions"][0]["reason"], "SyncError");
    }

    fn parent() -> Value {
        json!({"apiVersion": "ctl.example.com/v1", "kind": "Thing",
               "metadata": {"name": "p", "namespace": "ns", "uid": "u1", "generation": 3},
               "spec": {"selector": {"matchLabels": {"app": "p"}}}})
    }

    fn child(name: &str, labels: Value, owner: Option<&str>) -> Value {
        let mut c = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "ns", "labels": labels}});
        if let Some(uid) = owner {
            c["metadata"]["ownerReferences"] = json!([{"apiVersion": "x/v1", "kind": "X", "name": "o",
                "uid": uid, "controller": true}]);
        }
        c
    }

    fn declared(namespaced: bool, method: ChildUpdateMethod) -> HashMap<String, ChildType> {
        HashMap::from([("ConfigMap.v1".to_owned(), ChildType { namespaced, method })])
    }

    #[test]
    fn selector_rules() {
        let p = parent();
        assert!(parent_selector(&p, false).is_ok());
        let mut q = p.clone();
        q["spec"]["selector"] = json!({});
        let e = parent_selector(&q, false).unwrap_err().to_string();
        assert!(e.contains("matchLabels or matchExpressions"), "{e}");
        q["spec"].as_object_mut().unwrap().remove("selector");
        assert!(
            parent_selector(&q, false)
                .unwrap_err()
                .to_string()
                .contains("spec.selector is required")
        );
        let g = parent_selector(&q, true).unwrap();
        assert_eq!(selector::to_query(&g), "controller-uid=u1");
    }

    #[test]
    fn claim_table() {
        let ours = child("a", json!({}), Some("u1"));
        let theirs = child("b", json!({}), Some("u2"));
        let orphan = child("c", json!({}), None);
        assert_eq!(claim_child("u1", false, true, &ours), Claim::Owned);
        assert_eq!(claim_child("u1", false, false, &ours), Claim::Release);
        assert_eq!(claim_child("u1", true, false, &ours), Claim::Ignore);
        assert_eq!(claim_child("u1", false, true, &theirs), Claim::Ignore);
        assert_eq!(claim_child("u1", false, true, &orphan), Claim::Adopt);
        assert_eq!(claim_child("u1", false, false, &orphan), Claim::Ignore);
        assert_eq!(claim_child("u1", true, true, &orphan), Claim::Ignore);
        let mut dying = orphan.clone();
        dying["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        assert_eq!(claim_child("u1", false, true, &dying), Claim::Ignore);
    }

    #[test]
    fn claim_children_splits() {
        let p = parent();
        let sel = parent_selector(&p, false).unwrap();
        let plan = claim_children(
            &p,
            &sel,
            vec![
                child("a", json!({"app": "p"}), Some("u1")),
                child("b", json!({"app": "q"}), Some("u1")),
                child("c", json!({"app": "p"}), None),
                child("d", json!({"app": "p"}), Some("zz")),
            ],
        )
        .unwrap();
        let names = |v: &[Value]| {
            v.iter()
                .map(|o| meta_str(o, "name").to_owned())
                .collect::<Vec<_>>()
        };
        assert_eq!(names(&plan.owned), ["a"]);
        assert_eq!(names(&plan.release), ["b"]);
        assert_eq!(names(&plan.adopt), ["c"]);
    }

    #[test]
    fn owner_refs_added_once_and_removed() {
        let p = parent();
        let c = with_owner(&child("a", json!({}), None), &p);
        let c2 = with_owner(&c, &p);
        assert_eq!(
            c2["metadata"]["ownerReferences"].as_array().unwrap().len(),
            1
        );
        assert_eq!(
            c2["metadata"]["ownerReferences"][0]["blockOwnerDeletion"],
            json!(true)
        );
        assert_eq!(controller_ref(&c2).unwrap()["uid"], "u1");
        let r = without_owner(&c2, "u1");
        assert!(controller_ref(&r).is_none());
    }

    #[test]
    fn finalizer_decisions() {
        use FinalizerAction::*;
        assert_eq!(finalizer_before_hook(true, false, false), Add);
        assert_eq!(finalizer_before_hook(true, false, true), Keep);
        assert_eq!(finalizer_before_hook(true, true, false), Keep);
        assert_eq!(finalizer_before_hook(false, false, true), Remove);
        assert_eq!(finalizer_before_hook(false, true, false), Keep);
        assert_eq!(finalizer_after_hook(true, true, true), Remove);
        assert_eq!(finalizer_after_hook(true, false, true), Keep);
        assert_eq!(finalizer_after_hook(false, true, true), Keep);
    }

    #[test]
    fn hook_choice() {
        assert_eq!(choose_hook(false, false, true, false), HookChoice::Sync);
        // deleting without a finalize hook: synced for its status (children left alone)
        assert_eq!(choose_hook(false, true, true, false), HookChoice::Sync);
        assert_eq!(choose_hook(false, false, false, false), HookChoice::Skip);
        assert_eq!(choose_hook(false, true, false, false), HookChoice::Skip);
        assert_eq!(choose_hook(true, true, true, true), HookChoice::Finalize);
        assert_eq!(choose_hook(true, false, false, true), HookChoice::Finalize);
        // our finalizer removed, another one keeps the parent: Metacontroller calls finalize
        // again on each change
        assert_eq!(choose_hook(true, true, true, false), HookChoice::Finalize);
        assert_eq!(choose_hook(true, true, false, false), HookChoice::Skip);
        assert_eq!(choose_hook(true, false, true, true), HookChoice::Sync);
    }

    #[test]
    fn manage_children_while_deleting_only_when_finalizing() {
        let f = finalizer_name("cc");
        let mut p = parent();
        assert!(may_manage_children(&p, false, &f));
        p["metadata"]["deletionTimestamp"] = json!("t");
        assert!(!may_manage_children(&p, true, &f));
        p["metadata"]["finalizers"] = json!([f]);
        assert!(may_manage_children(&p, true, &f));
        p["metadata"]["finalizers"] = json!([f, "foregroundDeletion"]);
        assert!(!may_manage_children(&p, true, &f));
    }

    #[test]
    fn status_only_updates_are_irrelevant() {
        let a = parent();
        let mut b = a.clone();
        b["status"] = json!({"x": 1});
        b["metadata"]["resourceVersion"] = json!("9");
        assert!(!parent_update_relevant(&a, &b));
        b["metadata"]["labels"] = json!({"l": "1"});
        assert!(parent_update_relevant(&a, &b));
        // while it is deleted, a status-only change is relevant too (Metacontroller)
        let mut deleting = a.clone();
        deleting["metadata"]["deletionTimestamp"] = json!("2026-11-27T00:00:00Z");
        let mut later = deleting.clone();
        later["status"] = json!({"x": 2});
        assert!(parent_update_relevant(&deleting, &later));
    }

    #[test]
    fn validation_defaults_namespace_and_checks_rules() {
        let p = parent();
        let sel = parent_selector(&p, false).unwrap();
        let d = declared(true, ChildUpdateMethod::InPlace);
        let mut c = child("a", json!({"app": "p"}), None);
        c["metadata"].as_object_mut().unwrap().remove("namespace");
        let out = validate_desired(&p, true, &d, &sel, false, vec![c]).unwrap();
        assert_eq!(out["ConfigMap.v1 ns/a"]["metadata"]["namespace"], "ns");

        let e = validate_desired(
            &p,
            true,
            &d,
            &sel,
            false,
            vec![child("a", json!({"app": "x"}), None)],
        )
        .unwrap_err();
        assert!(e.to_string().contains("don't match parent selector"), "{e}");

        let mut other = child("a", json!({"app": "p"}), None);
        other["metadata"]["namespace"] = json!("elsewhere");
        let e = validate_desired(&p, true, &d, &sel, false, vec![other]).unwrap_err();
        assert!(e.to_string().contains("differs from the parent's"), "{e}");

        let mut svc = child("a", json!({"app": "p"}), None);
        svc["kind"] = json!("Service");
        let e = validate_desired(&p, true, &d, &sel, false, vec![svc]).unwrap_err();
        assert!(
            e.to_string()
                .contains("Service.v1 is not a declared child resource"),
            "{e}"
        );

        let cluster = declared(false, ChildUpdateMethod::InPlace);
        let e = validate_desired(
            &p,
            true,
            &cluster,
            &sel,
            false,
            vec![child("a", json!({"app": "p"}), None)],
        )
        .unwrap_err();
        assert!(e.to_string().contains("cluster-scoped"), "{e}");
    }

    #[test]
    fn generate_selector_adds_label() {
        let p = parent();
        let sel = parent_selector(&p, true).unwrap();
        let d = declared(true, ChildUpdateMethod::InPlace);
        let out = validate_desired(
            &p,
            true,
            &d,
            &sel,
            true,
            vec![child("a", Value::Null, None)],
        )
        .unwrap();
        assert_eq!(
            out["ConfigMap.v1 ns/a"]["metadata"]["labels"]["controller-uid"],
            "u1"
        );
    }

    fn plan(observed: &[Value], desired: Vec<Value>, m: ChildUpdateMethod) -> Vec<ChildOp> {
        let p = parent();
        let desired = desired.into_iter().map(|d| (child_key(&d), d)).collect();
        let opts = dynapply::Options::default();
        plan_children(&p, observed, &desired, |_| m, |_| &opts, |_, _| None).unwrap()
    }

    #[test]
    fn plan_uses_a_known_last_applied_instead_of_the_annotation() {
        let opts = dynapply::Options::default();
        let first = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "namespace": "ns"}, "data": {"a": "1", "b": "2"}});
        let mut live = dynapply::prepare_create(&first, &opts).unwrap();
        live["metadata"]["uid"] = json!("u1");
        live["metadata"]["resourceVersion"] = json!("3");
        let want = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "namespace": "ns"}, "data": {"a": "1"}});
        let desired = BTreeMap::from([(child_key(&want), want.clone())]);
        let data_of = |known: Option<Value>| {
            let ops = plan_children(
                &parent(),
                std::slice::from_ref(&live),
                &desired,
                |_| ChildUpdateMethod::InPlace,
                |_| &opts,
                |_, _| {
                    known.clone().map(|v| KnownLast {
                        value: std::sync::Arc::new(v),
                        recorded: false,
                    })
                },
            )
            .unwrap();
            match ops.as_slice() {
                [ChildOp::Update(o)] => o["data"].clone(),
                other => panic!("one update expected: {other:?}"),
            }
        };
        // parsed from the annotation: `b` was applied and is no longer wanted, so it goes
        assert_eq!(data_of(None), json!({"a": "1"}));
        // the known last-applied is used as is: one that never had `b` leaves it alone
        assert_eq!(
            data_of(Some(json!({"data": {"a": "1"}}))),
            json!({"a": "1", "b": "2"})
        );
    }

    #[test]
    fn plan_creates_with_annotation_and_owner() {
        let ops = plan(
            &[],
            vec![child("a", json!({"app": "p"}), None)],
            ChildUpdateMethod::OnDelete,
        );
        let [ChildOp::Create(obj)] = ops.as_slice() else {
            panic!("{ops:?}")
        };
        assert!(obj["metadata"]["annotations"][dynapply::LAST_APPLIED_ANNOTATION].is_string());
        assert_eq!(controller_ref(obj).unwrap()["uid"], "u1");
    }

    #[test]
    fn plan_updates_per_method_and_skips_unchanged() {
        let want = child("a", json!({"app": "p"}), None);
        let created = dynapply::prepare_create(&want, &dynapply::Options::default()).unwrap();
        let live = with_owner(&created, &parent());
        assert!(
            plan(
                std::slice::from_ref(&live),
                vec![want.clone()],
                ChildUpdateMethod::InPlace
            )
            .is_empty()
        );
        let mut changed = want.clone();
        changed["data"] = json!({"k": "v"});
        for (m, expect) in [
            (ChildUpdateMethod::OnDelete, 0),
            (ChildUpdateMethod::InPlace, 1),
            (ChildUpdateMethod::Recreate, 1),
        ] {
            let ops = plan(std::slice::from_ref(&live), vec![changed.clone()], m);
            assert_eq!(ops.len(), expect, "{m:?}");
            match (m, ops.first()) {
                (ChildUpdateMethod::InPlace, Some(ChildOp::Update(o))) => {
                    assert_eq!(o["data"]["k"], "v");
                    assert_eq!(controller_ref(o).unwrap()["uid"], "u1");
                }
                (ChildUpdateMethod::Recreate, Some(ChildOp::Delete { reason, .. })) => {
                    assert_eq!(*reason, "recreate")
                }
                (ChildUpdateMethod::OnDelete, None) => {}
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn plan_deletes_undesired_first_and_never_touches_dying() {
        let mut dying = child("d", json!({}), Some("u1"));
        dying["metadata"]["deletionTimestamp"] = json!("t");
        let gone = child("g", json!({}), Some("u1"));
        let ops = plan(
            &[dying.clone(), gone],
            vec![child("n", json!({"app": "p"}), None), {
                let mut d = dying.clone();
                d["data"] = json!({"x": "1"});
                d
            }],
            ChildUpdateMethod::InPlace,
        );
        assert_eq!(ops.len(), 2, "{ops:?}");
        assert!(
            matches!(&ops[0], ChildOp::Delete { object, reason: "not desired" } if meta_str(object, "name") == "g")
        );
        assert!(matches!(&ops[1], ChildOp::Create(o) if meta_str(o, "name") == "n"));
    }

    /// Deletes of children no longer desired are one phase, written before everything else —
    /// recreation deletes, creates and updates — in the plan's order.
    #[test]
    fn write_phases_put_deletes_of_undesired_children_first() {
        let name = |op: &ChildOp| match op {
            ChildOp::Create(o) | ChildOp::Update(o) | ChildOp::Delete { object: o, .. } => {
                meta_str(o, "name").to_owned()
            }
        };
        let ops = vec![
            ChildOp::Create(child("c1", json!({}), None)),
            ChildOp::Delete {
                object: child("r", json!({}), Some("u1")),
                reason: "recreate",
            },
            ChildOp::Delete {
                object: child("g1", json!({}), Some("u1")),
                reason: "not desired",
            },
            ChildOp::Update(child("u", json!({}), Some("u1"))),
            ChildOp::Delete {
                object: child("g2", json!({}), Some("u1")),
                reason: "not desired",
            },
        ];
        let (first, then) = write_phases(ops);
        assert_eq!(first.iter().map(name).collect::<Vec<_>>(), ["g1", "g2"]);
        assert_eq!(then.iter().map(name).collect::<Vec<_>>(), ["c1", "r", "u"]);
    }

    #[test]
    fn status_diff() {
        let s = desired_status(Some(&json!({"ready": 1})), Some(3));
        assert_eq!(s, json!({"ready": 1, "observedGeneration": 3}));
        assert_eq!(
            desired_status(None, Some(1)),
            json!({"observedGeneration": 1})
        );
        let mut p = parent();
        assert!(status_changed(&p, &s));
        p["status"] = json!({"observedGeneration": 3.0, "ready": 1});
        assert!(!status_changed(&p, &s));
    }

    #[test]
    fn child_write_failures_that_need_a_person_are_failures() {
        use WriteFailure::*;
        let ours = Some(Some("p1".to_owned()));
        assert_eq!(
            child_write_failure("create", Some(409), ours, "p1"),
            LeftToNextSync
        );
        assert!(matches!(
            child_write_failure("create", Some(409), Some(Some("other".into())), "p1"),
            Failed(Some(_))
        ));
        assert!(matches!(
            child_write_failure("create", Some(409), Some(Some(String::new())), "p1"),
            Failed(Some(_))
        ));
        assert_eq!(
            child_write_failure("create", Some(409), None, "p1"),
            LeftToNextSync
        );
        assert!(matches!(
            child_write_failure("create", Some(404), None, "p1"),
            Failed(Some(_))
        ));
        assert_eq!(
            child_write_failure("update", Some(409), None, "p1"),
            LeftToNextSync
        );
        assert_eq!(
            child_write_failure("update", Some(404), None, "p1"),
            LeftToNextSync
        );
        assert_eq!(
            child_write_failure("delete", Some(404), None, "p1"),
            LeftToNextSync
        );
        assert_eq!(
            child_write_failure("create", Some(422), None, "p1"),
            Failed(None)
        );
        assert_eq!(
            child_write_failure("update", Some(403), None, "p1"),
            Failed(None)
        );
    }

    #[test]
    fn duplicate_and_unusable_child_names_fail_before_any_write() {
        let p = json!({"metadata": {"namespace": "ns", "name": "p", "uid": "u"}});
        let d = HashMap::from([(
            "ConfigMap.v1".to_owned(),
            ChildType {
                namespaced: true,
                method: ChildUpdateMethod::default(),
            },
        )]);
        let sel = LabelSelector::default();
        let cm = |name: &str| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}});
        let e = validate_desired(&p, true, &d, &sel, false, vec![cm("a"), cm("b"), cm("a")])
            .unwrap_err()
            .to_string();
        assert!(e.contains("more than once") && e.contains("ns/a"), "{e}");
        for bad in ["a/b", "..", "50%"] {
            let e = validate_desired(&p, true, &d, &sel, false, vec![cm(bad)]).unwrap_err();
            assert!(e.to_string().contains("metadata.name"), "{bad}: {e}");
        }
        let long = "x".repeat(254);
        assert!(validate_desired(&p, true, &d, &sel, false, vec![cm(&long)]).is_err());
        // names other kinds allow (RBAC's `system:` names) are left to the API server
        assert!(validate_desired(&p, true, &d, &sel, false, vec![cm("system:web")]).is_ok());
    }

    #[test]
    fn creates_any_is_a_desired_child_not_observed() {
        let cm = |name: &str| {
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": name, "namespace": "ns"}})
        };
        let desired: BTreeMap<String, Value> = [cm("a"), cm("b")]
            .into_iter()
            .map(|c| (child_key(&c), c))
            .collect();
        assert!(!creates_any(&[cm("a"), cm("b"), cm("c")], &desired));
        assert!(creates_any(&[cm("a")], &desired));
        assert!(!creates_any::<Value>(&[], &BTreeMap::new()));
    }
}
