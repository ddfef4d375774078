//! How children are written: the apply strategy (dynamic apply, kmeta's three-way merge, or
//! server-side apply), the field manager of each parent, the body of a server-side apply and
//! what an apply conflict means. Pure decisions; `children.rs` executes them.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use serde_json::Value;

/// The annotation on a CompositeController (or DecoratorController) that overrides
/// `--apply-strategy` for it: `dynamic-apply` or `server-side-apply`.
pub const STRATEGY_ANNOTATION: &str = "kmeta.dev/apply-strategy";

/// Kubernetes' limit on a field manager's length.
pub const MAX_FIELD_MANAGER: usize = 128;

/// Hex digits of the parent UID hash in a field manager.
use crate::runtime::compact::UID_HASH_LEN;

/// How children are updated (Metacontroller's `--apply-strategy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ApplyStrategy {
    /// kmeta's three-way merge against the last-applied annotation, written with PUT.
    #[default]
    DynamicApply,
    /// `application/apply-patch+yaml` PATCH of the desired object, one field manager per parent.
    ServerSideApply,
}

impl ApplyStrategy {
    /// The flag and annotation value.
    pub fn as_str(self) -> &'static str {
        match self {
            ApplyStrategy::DynamicApply => "dynamic-apply",
            ApplyStrategy::ServerSideApply => "server-side-apply",
        }
    }
}

impl fmt::Display for ApplyStrategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A name that is no apply strategy.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown apply strategy {0:?} (dynamic-apply or server-side-apply)")]
pub struct UnknownStrategy(pub String);

/// A controller's apply annotations that cannot be followed; nothing is built for it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApplyAnnotationError {
    /// [`STRATEGY_ANNOTATION`] names no strategy.
    #[error("annotation {STRATEGY_ANNOTATION}: {0}")]
    Strategy(UnknownStrategy),
    /// [`LAST_APPLIED_OPTION`] `omit` without server-side apply.
    #[error(
        "annotation {LAST_APPLIED_OPTION}: omit needs {STRATEGY_ANNOTATION}: server-side-apply (dynamic apply merges against the record)"
    )]
    OmitNeedsServerSideApply,
    /// [`LAST_APPLIED_OPTION`] has a value other than `record` or `omit`.
    #[error("annotation {LAST_APPLIED_OPTION}: unknown value {0:?} (record or omit)")]
    UnknownRecord(String),
}

impl FromStr for ApplyStrategy {
    type Err = UnknownStrategy;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "dynamic-apply" => Ok(ApplyStrategy::DynamicApply),
            "server-side-apply" => Ok(ApplyStrategy::ServerSideApply),
            other => Err(UnknownStrategy(other.to_owned())),
        }
    }
}

/// The strategy of one controller: its [`STRATEGY_ANNOTATION`] if set, else `default` (the
/// flag). An unknown annotation value is an error naming the annotation.
pub fn strategy_for(
    annotations: Option<&BTreeMap<String, String>>,
    default: ApplyStrategy,
) -> Result<ApplyStrategy, ApplyAnnotationError> {
    match annotations.and_then(|a| a.get(STRATEGY_ANNOTATION)) {
        None => Ok(default),
        Some(v) => v.parse().map_err(ApplyAnnotationError::Strategy),
    }
}

/// The annotation on a CompositeController (or DecoratorController) applying its children
/// server-side that says whether they carry the last-applied annotation: `record` (the default)
/// or `omit`. See docs/design/ssa-without-last-applied.md.
pub const LAST_APPLIED_OPTION: &str = "kmeta.dev/last-applied";

/// Whether a controller's children carry the last-applied annotation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LastApplied {
    /// Every write records the configuration in the annotation (Metacontroller's dynamic apply).
    #[default]
    Record,
    /// Under server-side apply, no annotation: what the parent applied is read from its field
    /// manager's `managedFields` entries.
    Omit,
}

/// The [`LAST_APPLIED_OPTION`] of one controller applying children with `strategy`: `omit` is
/// only allowed under server-side apply (dynamic apply's update needs the record). An unknown
/// value is an error naming the annotation.
pub fn last_applied_for(
    annotations: Option<&BTreeMap<String, String>>,
    strategy: ApplyStrategy,
) -> Result<LastApplied, ApplyAnnotationError> {
    match annotations
        .and_then(|a| a.get(LAST_APPLIED_OPTION))
        .map(String::as_str)
    {
        None | Some("record") => Ok(LastApplied::Record),
        Some("omit") if strategy == ApplyStrategy::ServerSideApply => Ok(LastApplied::Omit),
        Some("omit") => Err(ApplyAnnotationError::OmitNeedsServerSideApply),
        Some(other) => Err(ApplyAnnotationError::UnknownRecord(other.to_owned())),
    }
}

/// The [`LastApplied`] choice of a controller whose strategy and option were checked at build
/// ([`strategy_for`], [`last_applied_for`]); `Record` when they are not valid.
pub fn last_applied_choice(
    annotations: Option<&BTreeMap<String, String>>,
    default: ApplyStrategy,
) -> LastApplied {
    strategy_for(annotations, default)
        .and_then(|s| last_applied_for(annotations, s))
        .unwrap_or_default()
}

/// Whether the children of one type are written with the last-applied annotation: always under
/// [`LastApplied::Record`]; under [`LastApplied::Omit`] still for a type whose schema has
/// preserve-unknown-fields subtrees (their lists are atomic for the server, so the apply body
/// merges them against the record, which tells an item the hook stopped sending from one
/// another writer added) and for a type under drift policy `Report` updated by recreation (the
/// record tells drift from a changed hook answer before a delete).
pub fn records_last_applied(
    choice: LastApplied,
    rules: &dynapply::ListRules,
    drift: crate::api::DriftPolicy,
    method: crate::api::ChildUpdateMethod,
) -> bool {
    use crate::api::{ChildUpdateMethod as M, DriftPolicy};
    let recreates = matches!(method, M::Recreate | M::RollingRecreate);
    choice == LastApplied::Record
        || !rules.preserve_unknown_subtrees().is_empty()
        || (drift == DriftPolicy::Report && recreates)
}

/// The field manager of one parent's child writes: `<prefix>/<controller>/<hash of parent uid>`,
/// cut to Kubernetes' 128 characters by shortening the controller name (the hash, which tells
/// parents apart, is always whole).
pub fn field_manager(prefix: &str, controller: &str, parent_uid: &str) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let digest = ring::digest::digest(&ring::digest::SHA256, parent_uid.as_bytes());
    // the first UID_HASH_LEN hex digits, written in place (a String per byte before)
    let hash: String = digest
        .as_ref()
        .iter()
        .flat_map(|b| [b >> 4, b & 0x0f])
        .take(UID_HASH_LEN)
        .map(|nibble| char::from(HEX[usize::from(nibble)]))
        .collect();
    let room = MAX_FIELD_MANAGER.saturating_sub(prefix.len() + hash.len() + 2);
    let controller: String = controller.chars().take(room).collect();
    let full = format!("{prefix}/{controller}/{hash}");
    full.chars().take(MAX_FIELD_MANAGER).collect()
}

/// The body of a server-side apply of a child: the desired object as prepared for writing
/// (with its owner reference and last-applied annotation), without anything the server owns
/// (`status`, `resourceVersion`, `uid`, `managedFields`, timestamps, generation).
pub fn apply_body(prepared: &Value) -> Value {
    let mut body = prepared.clone();
    if let Some(root) = body.as_object_mut() {
        root.remove("status");
        if let Some(meta) = root.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.retain(|k, _| {
                matches!(
                    k.as_str(),
                    "name"
                        | "namespace"
                        | "generateName"
                        | "labels"
                        | "annotations"
                        | "ownerReferences"
                        | "finalizers"
                )
            });
        }
    }
    body
}

/// `body` guarded by `live_version`, the resourceVersion of the live object it was merged from,
/// when it carries subtrees merged from that object (`merged_from_live`: the child's schema has
/// preserve-unknown-fields subtrees, which the body replaces by dynapply's merge, lists whole).
/// An apply with a resourceVersion is refused with 409 Conflict when the object changed since:
/// otherwise an item another writer added after the cached version (an injected sidecar) would be
/// overwritten by a list built without it. A body made of the desired fields alone needs no
/// guard: the server merges it.
pub fn guarded(mut body: Value, live_version: Option<&str>, merged_from_live: bool) -> Value {
    let rv = live_version
        .filter(|_| merged_from_live)
        .filter(|rv| !rv.is_empty());
    if let (Some(rv), Some(meta)) = (rv, body.get_mut("metadata").and_then(Value::as_object_mut)) {
        meta.insert("resourceVersion".into(), Value::String(rv.to_owned()));
    }
    body
}

/// One field an apply would take from another manager (a `FieldManagerConflict` cause).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldConflict {
    /// The field path, as the API server renders it (`.data.color`).
    pub field: String,
    /// The manager that owns it now.
    pub manager: String,
}

/// The conflicts of a 409 answer to an apply (its `FieldManagerConflict` causes); empty when the
/// 409 is not an apply conflict.
pub fn conflicts_of(status: &kube::core::Status) -> Vec<FieldConflict> {
    let Some(details) = &status.details else {
        return Vec::new();
    };
    details
        .causes
        .iter()
        .filter(|c| c.reason == "FieldManagerConflict")
        .map(|c| FieldConflict {
            field: c.field.clone(),
            manager: manager_of(&c.message),
        })
        .collect()
}

/// The manager named in a cause message `conflict with "<manager>" using <version>` (or the
/// message itself when it is not worded so).
fn manager_of(message: &str) -> String {
    message
        .split_once('"')
        .and_then(|(_, rest)| rest.split_once('"'))
        .map_or_else(|| message.to_owned(), |(m, _)| m.to_owned())
}

/// What to do about an apply's conflicts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConflictDecision {
    /// Another parent's manager (same prefix, another parent) holds fields of a child this
    /// parent does not control: two parents want it. kmeta does not force, so the two never take
    /// the fields back and forth.
    Contested(Vec<FieldConflict>),
    /// Other managers (a person, another tool, or the parent that controlled the child before
    /// this one adopted it) hold fields the hook sets, and the drift policy is not `Enforce`:
    /// report them and leave the child as it is.
    Report(Vec<FieldConflict>),
    /// As `Report`, under drift policy `Enforce`: force, and name them.
    Take(Vec<FieldConflict>),
}

/// Classifies the conflicts of an apply by `mine` (a manager under `prefix`); `controlled`:
/// whether the child's controller reference is this parent (then another parent's manager is a
/// leftover of an earlier owner, not a contender); `drift`: the child's drift policy (fields of
/// others are taken only under `Enforce`).
pub fn decide_conflicts(
    conflicts: Vec<FieldConflict>,
    prefix: &str,
    mine: &str,
    controlled: bool,
    drift: crate::api::DriftPolicy,
) -> ConflictDecision {
    let others: Vec<FieldConflict> = conflicts
        .into_iter()
        .filter(|c| c.manager != mine)
        .collect();
    let kmeta_prefix = format!("{prefix}/");
    let contested: Vec<FieldConflict> = others
        .iter()
        .filter(|c| c.manager.starts_with(&kmeta_prefix))
        .cloned()
        .collect();
    match (contested.is_empty() || controlled, drift) {
        (false, _) => ConflictDecision::Contested(contested),
        (true, crate::api::DriftPolicy::Enforce) => ConflictDecision::Take(others),
        (true, _) => ConflictDecision::Report(others),
    }
}

/// `field (manager), …`, at most 5 named, for events and conditions.
pub fn describe_conflicts(conflicts: &[FieldConflict]) -> String {
    const SHOWN: usize = 5;
    let mut by_manager: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for c in conflicts.iter().take(SHOWN) {
        by_manager.entry(&c.manager).or_default().push(&c.field);
    }
    let mut out = by_manager
        .iter()
        .map(|(m, fs)| format!("{} from {m:?}", fs.join(", ")))
        .collect::<Vec<_>>()
        .join("; ");
    if conflicts.len() > SHOWN {
        out.push_str(&format!(" and {} more", conflicts.len() - SHOWN));
    }
    out
}

/// The client-side → server-side upgrade of a child's `managedFields` (what kubectl does for
/// `apply --server-side` after client-side apply): the fields that `manager` or one of the
/// `legacy` managers own through non-apply writes (`Update`: POSTs and PUTs under dynamic apply,
/// by this parent's manager, or by kmeta or Metacontroller under their User-Agent names) move
/// into `manager`'s `Apply` entry, so a later apply that no longer sets one of them removes it.
/// `None` when there is nothing to move.
pub fn upgraded_managed_fields(managed: &Value, manager: &str, legacy: &[&str]) -> Option<Value> {
    let entries = managed.as_array()?;
    let is_update = |e: &Value| {
        (e["manager"] == manager || legacy.iter().any(|l| e["manager"] == *l))
            && e["operation"] == "Update"
            && e.get("subresource")
                .and_then(Value::as_str)
                .unwrap_or("")
                .is_empty()
    };
    let moved = entries
        .iter()
        .filter(|e| is_update(e))
        .fold(None, |acc, e| {
            Some(union(
                acc.unwrap_or(Value::Object(Default::default())),
                &e["fieldsV1"],
            ))
        })?;
    let mut out: Vec<Value> = entries.iter().filter(|e| !is_update(e)).cloned().collect();
    let apply = out.iter_mut().find(|e| {
        e["manager"] == manager
            && e["operation"] == "Apply"
            && e.get("subresource")
                .and_then(Value::as_str)
                .unwrap_or("")
                .is_empty()
    });
    match apply {
        Some(e) => e["fieldsV1"] = union(e["fieldsV1"].take(), &moved),
        None => {
            let template = entries.iter().find(|e| is_update(e))?;
            let mut e = template.clone();
            e["manager"] = Value::String(manager.to_owned());
            e["operation"] = Value::String("Apply".into());
            e["fieldsV1"] = moved;
            out.push(e);
        }
    }
    Some(Value::Array(out))
}

/// The field manager that holds the fields a parent's manager hands off under server-side
/// apply (`fieldRules`), so that leaving them out of its applies does not delete them; the
/// owner's next write of a field takes it from this manager (docs/design/field-handoff.md).
pub const HANDOFF_MANAGER: &str = "kmeta-handoff";

/// `managed` (an object's `managedFields`) with the fields `paths` name moved out of the
/// entries of `manager` and the `legacy` managers into an `Update` entry of
/// [`HANDOFF_MANAGER`]: Kubernetes' safe transfer of ownership, so that the next apply, which
/// leaves them out, releases them without the server removing or resetting them. `None` when
/// those managers own none of them.
pub fn handed_over_managed_fields(
    managed: &Value,
    manager: &str,
    legacy: &[&str],
    paths: &[dynapply::FieldPath],
) -> Option<Value> {
    let entries = managed.as_array()?;
    let ours = |e: &Value| {
        (e["manager"] == manager || legacy.iter().any(|l| e["manager"] == *l))
            && e.get("subresource")
                .and_then(Value::as_str)
                .unwrap_or("")
                .is_empty()
    };
    let mut moved = Value::Object(Default::default());
    let mut template = None;
    let mut out = Vec::with_capacity(entries.len() + 1);
    for e in entries {
        let mut e = e.clone();
        if ours(&e) {
            for path in paths {
                if take_fields(&mut e["fieldsV1"], path.segments(), &mut moved) {
                    template.get_or_insert_with(|| e.clone());
                }
            }
        }
        out.push(e);
    }
    let template = template?;
    let existing = out.iter_mut().find(|e| {
        e["manager"] == HANDOFF_MANAGER
            && e["operation"] == "Update"
            && e["apiVersion"] == template["apiVersion"]
    });
    match existing {
        Some(e) => e["fieldsV1"] = union(e["fieldsV1"].take(), &moved),
        None => {
            let mut e = template;
            e["manager"] = Value::String(HANDOFF_MANAGER.to_owned());
            e["operation"] = Value::String("Update".into());
            e["fieldsV1"] = moved;
            out.push(e);
        }
    }
    Some(Value::Array(out))
}

/// Moves the FieldsV1 subtrees `segs` names from `tree` into `into` (at the same place);
/// maps left empty by the move are removed. True when something moved.
fn take_fields(tree: &mut Value, segs: &[dynapply::FieldSeg], into: &mut Value) -> bool {
    let (Some((first, rest)), Some(map)) = (segs.split_first(), tree.as_object_mut()) else {
        return false;
    };
    let keys: Vec<String> = map
        .keys()
        .filter(|k| fields_v1_key_matches(k, first))
        .cloned()
        .collect();
    let mut any = false;
    for k in keys {
        let mut taken = Value::Object(Default::default());
        let moved = match rest {
            [] => map.shift_remove(&k).map(|sub| taken = sub).is_some(),
            _ => {
                let (moved, emptied) = match map.get_mut(&k) {
                    Some(sub) => {
                        let moved = take_fields(sub, rest, &mut taken);
                        // `.` alone (or nothing) left: the item or map holds nothing of ours
                        let emptied = sub.as_object().is_some_and(|m| m.keys().all(|k| k == "."));
                        (moved, moved && emptied)
                    }
                    None => (false, false),
                };
                if emptied {
                    map.shift_remove(&k);
                }
                moved
            }
        };
        if moved && let Some(into) = into.as_object_mut() {
            let was = into
                .shift_remove(&k)
                .unwrap_or(Value::Object(Default::default()));
            into.insert(k, union(was, &taken));
            any = true;
        }
    }
    any
}

/// Whether the FieldsV1 key `key` (`f:<field>`, `k:<json of the key fields>`) is the step
/// `seg` of a field path.
fn fields_v1_key_matches(key: &str, seg: &dynapply::FieldSeg) -> bool {
    match seg {
        dynapply::FieldSeg::Field(name) => key.strip_prefix("f:") == Some(name.as_str()),
        dynapply::FieldSeg::Select(wanted) => key
            .strip_prefix("k:")
            .and_then(|json| serde_json::from_str::<Value>(json).ok())
            .is_some_and(|item| {
                wanted.iter().all(|(k, v)| match item.get(k) {
                    Some(Value::String(s)) => s == v,
                    Some(other @ (Value::Number(_) | Value::Bool(_))) => {
                        serde_json::from_str::<Value>(v).is_ok_and(|w| w == *other)
                    }
                    _ => false,
                })
            }),
    }
}

/// The union of two FieldsV1 trees.
pub(crate) fn union(mut a: Value, b: &Value) -> Value {
    if let (Some(am), Some(bm)) = (a.as_object_mut(), b.as_object()) {
        for (k, bv) in bm {
            let merged = union(
                am.remove(k).unwrap_or(Value::Object(Default::default())),
                bv,
            );
            am.insert(k.clone(), merged);
        }
        return a;
    }
    if a.is_object() { a } else { b.clone() }
}

/// The fields of `desired` whose value in `live` differs (rendered `.data.color`; lists compared
/// whole), sorted. Fields only `live` has are not drift: others may add fields.
pub fn drifted_paths(desired: &Value, live: &Value) -> Vec<String> {
    fn walk(d: &Value, l: Option<&Value>, path: &mut String, out: &mut Vec<String>) {
        match (d, l) {
            (Value::Object(dm), Some(Value::Object(lm))) => {
                for (k, dv) in dm {
                    let len = path.len();
                    path.push('.');
                    path.push_str(k);
                    walk(dv, lm.get(k), path, out);
                    path.truncate(len);
                }
            }
            (Value::Null, None) => {}
            (d, Some(l)) if dynapply::json_eq(d, l) => {}
            _ => out.push(path.clone()),
        }
    }
    let mut out = Vec::new();
    let Some(dm) = desired.as_object() else {
        return out;
    };
    for (k, dv) in dm {
        if matches!(k.as_str(), "apiVersion" | "kind" | "status") {
            continue;
        }
        if k == "metadata" {
            for mk in ["labels", "annotations"] {
                if let Some(v) = dv.get(mk) {
                    let mut path = format!(".metadata.{mk}");
                    walk(
                        v,
                        live.pointer(&format!("/metadata/{mk}")),
                        &mut path,
                        &mut out,
                    );
                }
            }
            continue;
        }
        let mut path = format!(".{k}");
        walk(dv, live.get(k), &mut path, &mut out);
    }
    out.sort();
    out
}

/// A condition kmeta sets on a parent about its children: `ChildDrift` (drift or a conflict
/// left as it is) or `ChildContested`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct ChildReport {
    /// Condition type.
    pub kind: &'static str,
    /// Condition reason.
    pub reason: &'static str,
    /// Condition message.
    pub message: String,
}

/// `ChildDrift`: a child differs from what the hook wants and was left as it is.
pub const DRIFT_CONDITION: &str = "ChildDrift";
/// `ChildContested`: another parent's manager holds fields of a child.
pub const CONTESTED_CONDITION: &str = "ChildContested";

/// The reports of each parent's last sync (by parent UID), kept between its child management
/// and its status write.
#[derive(Debug, Default)]
pub struct ChildReports {
    by_parent: std::collections::HashMap<String, Vec<ChildReport>>,
    /// Children (by UID) whose ownership was already moved to the manager named (the caches
    /// keep no `managedFields`, so this is checked on a fresh read once per child and manager).
    upgraded: std::collections::HashMap<String, String>,
}

/// At most this many children are remembered as upgraded (then the memory starts over: each
/// child costs one more read at its next apply): 100 000.
const UPGRADED_MAX: usize = 100_000;

impl ChildReports {
    /// Whether the ownership of child `uid` still has to be checked for `manager`.
    pub fn needs_upgrade_check(&self, uid: &str, manager: &str) -> bool {
        self.upgraded.get(uid).is_none_or(|m| m != manager)
    }

    /// Records that child `uid`'s ownership belongs to `manager`'s apply entry.
    pub fn upgraded(&mut self, uid: &str, manager: &str) {
        if self.upgraded.len() >= UPGRADED_MAX {
            self.upgraded.clear();
        }
        self.upgraded.insert(uid.to_owned(), manager.to_owned());
    }

    /// Replaces the reports of a parent (none: forgets it).
    pub fn set(&mut self, parent_uid: &str, mut reports: Vec<ChildReport>) {
        reports.sort();
        if reports.is_empty() {
            self.by_parent.remove(parent_uid);
        } else {
            self.by_parent.insert(parent_uid.to_owned(), reports);
        }
    }

    /// The reports of a parent's last sync.
    pub fn get(&self, parent_uid: &str) -> Vec<ChildReport> {
        self.by_parent.get(parent_uid).cloned().unwrap_or_default()
    }

    /// Whether the last reports of the parent with `parent_uid` include `report`.
    pub fn contains(&self, parent_uid: &str, report: &ChildReport) -> bool {
        self.by_parent
            .get(parent_uid)
            .is_some_and(|r| r.binary_search(report).is_ok())
    }
}

/// The annotation naming the DecoratorController that made an attachment (Metacontroller's).
const DECORATOR_ANNOTATION: &str = "metacontroller.k8s.io/decorator-controller";

/// Who holds a child that a parent wants but could not create (its name is taken), when the
/// holder is another parent: another object is its controller, or its controller is this
/// parent but another DecoratorController made it (two decorators attaching one child to one
/// target). `None` when the child is this parent's own (a cache lag) or has no controller (it
/// is adopted or reported as it always was).
pub fn contest_holder(parent_uid: &str, desired: &Value, existing: &Value) -> Option<String> {
    let owner = crate::object::controller_ref(existing)?;
    let uid = owner.get("uid").and_then(Value::as_str).unwrap_or_default();
    let text = |v: &Value, f: &str| {
        v.get(f)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let maker = |obj: &Value| {
        crate::object::meta(obj, "annotations")
            .and_then(|a| a.get(DECORATOR_ANNOTATION))
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    let holder = format!("{} {}", text(owner, "kind"), text(owner, "name"));
    if uid.is_empty() {
        None
    } else if uid != parent_uid {
        Some(holder)
    } else {
        match (maker(desired), maker(existing)) {
            (Some(mine), Some(theirs)) if mine != theirs => Some(format!(
                "{holder} (attached by DecoratorController {theirs})"
            )),
            _ => None,
        }
    }
}

/// One child a parent (the contender) wants and another parent holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Contest {
    /// The UID of the holder's parent (the child's controller).
    pub holder_uid: String,
    /// The contested child (`Kind namespace/name`).
    pub child: String,
    /// The contender's controller and parent, for the holder's condition.
    pub contender: String,
}

/// The contests of every controller's parents in this process (by contender controller and
/// parent UID, replaced at each of its syncs), so that the holder's parent learns at its next
/// sync that a child of its own is contested too.
#[derive(Debug, Default)]
pub struct Contests {
    by_contender: std::collections::HashMap<(String, String), Vec<Contest>>,
    /// Contenders deleted: a sync of theirs that ends after the deletion records nothing.
    gone: std::collections::HashSet<(String, String)>,
}

/// At most this many contending parents are remembered (then the memory starts over and each
/// is remembered again at its next sync): 100 000.
const CONTESTS_MAX: usize = 100_000;

impl Contests {
    /// Replaces the contests of `controller`'s parent `uid` (none: forgets it).
    pub fn set(&mut self, controller: &str, uid: &str, contests: Vec<Contest>) {
        let key = (controller.to_owned(), uid.to_owned());
        if contests.is_empty() || self.gone.contains(&key) {
            self.by_contender.remove(&key);
            return;
        }
        if self.by_contender.len() >= CONTESTS_MAX {
            self.by_contender.clear();
        }
        self.by_contender.insert(key, contests);
    }

    /// Forgets the contests of `controller`'s parent `uid`, deleted, for good: a sync of it still
    /// in flight when it was deleted records nothing when it ends (UIDs are never reused).
    pub fn forget(&mut self, controller: &str, uid: &str) {
        let key = (controller.to_owned(), uid.to_owned());
        self.by_contender.remove(&key);
        if self.gone.len() >= CONTESTS_MAX {
            self.gone.clear();
        }
        self.gone.insert(key);
    }

    /// The `ChildContested` reports of the holder `controller`'s parent `uid`: children it
    /// holds that other parents want (its own contests as a contender are not among them).
    pub fn against(&self, controller: &str, uid: &str) -> Vec<ChildReport> {
        let mut out: Vec<ChildReport> = self
            .by_contender
            .iter()
            .filter(|((ctl, contender), _)| !(ctl == controller && contender == uid))
            .flat_map(|(_, cs)| cs.iter().filter(|c| c.holder_uid == uid))
            .map(|c| ChildReport {
                kind: CONTESTED_CONDITION,
                reason: "ChildContested",
                message: format!("{}: wanted by {} too", c.child, c.contender),
            })
            .collect();
        out.sort();
        out.dedup();
        out
    }
}

/// The hook's status with kmeta's child conditions added (one per type, messages sorted and
/// joined, so the order the reports came in changes nothing;
/// `lastTransitionTime` kept from the live parent while the condition stays). `None` stays
/// `None` when there is nothing to add; a hook status whose `conditions` is not a list is left
/// as it is.
pub fn with_child_conditions(
    status: Option<&Value>,
    live_parent: &Value,
    reports: &[ChildReport],
    now: &str,
) -> Option<Value> {
    if reports.is_empty() {
        return status.cloned();
    }
    let mut out = match status {
        Some(Value::Object(m)) => m.clone(),
        _ => serde_json::Map::new(),
    };
    let list = out
        .entry("conditions")
        .or_insert_with(|| Value::Array(Vec::new()));
    let Some(list) = list.as_array_mut() else {
        return Some(Value::Object(out));
    };
    let mut by_type: BTreeMap<&str, (&str, Vec<&str>)> = BTreeMap::new();
    for r in reports {
        let e = by_type.entry(r.kind).or_insert((r.reason, Vec::new()));
        e.1.push(&r.message);
    }
    for (kind, (reason, mut messages)) in by_type {
        // the writes run side by side: their reports come in any order, the message must not
        messages.sort_unstable();
        messages.dedup();
        let since = live_parent
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .and_then(|cs| {
                cs.iter()
                    .find(|c| c["type"] == kind && c["status"] == "True")
            })
            .and_then(|c| c["lastTransitionTime"].as_str())
            .unwrap_or(now);
        list.retain(|c| c["type"] != kind);
        list.push(
            serde_json::json!({"type": kind, "status": "True", "reason": reason,
            "message": messages.join("; "), "lastTransitionTime": since}),
        );
    }
    Some(Value::Object(out))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::runtime::compact::is_parent_manager;
    use serde_json::json;

    #[test]
    fn handed_over_fields_move_to_the_handoff_manager() {
        let app = r#"k:{"name":"app"}"#;
        let managed = json!([
            {"manager": "mc/p/1", "operation": "Update", "apiVersion": "apps/v1", "fieldsType": "FieldsV1",
             "fieldsV1": {"f:spec": {"f:replicas": {}, "f:template": {"f:spec": {"f:containers": {
                app: {".": {}, "f:image": {}, "f:resources": {"f:requests": {"f:cpu": {}}}}}}}}}},
            {"manager": "hpa", "operation": "Update", "apiVersion": "apps/v1", "fieldsType": "FieldsV1",
             "fieldsV1": {"f:metadata": {"f:annotations": {"f:x": {}}}}}
        ]);
        let paths: Vec<dynapply::FieldPath> = [
            "spec.replicas",
            "spec.template.spec.containers[name=app].resources",
        ]
        .iter()
        .map(|p| dynapply::FieldPath::parse(p).unwrap())
        .collect();
        let out = handed_over_managed_fields(&managed, "mc/p/1", &[], &paths).unwrap();
        assert_eq!(
            out[0]["fieldsV1"],
            json!({"f:spec": {"f:template": {"f:spec": {"f:containers": {
                app: {".": {}, "f:image": {}}}}}}})
        );
        assert_eq!(out[1], managed[1]);
        assert_eq!(out[2]["manager"], HANDOFF_MANAGER);
        assert_eq!(out[2]["operation"], "Update");
        assert_eq!(
            out[2]["fieldsV1"],
            json!({"f:spec": {"f:replicas": {}, "f:template": {"f:spec": {"f:containers": {
                app: {"f:resources": {"f:requests": {"f:cpu": {}}}}}}}}})
        );
        // nothing of ours left to move: nothing to write
        assert!(handed_over_managed_fields(&out, "mc/p/1", &[], &paths).is_none());
    }

    #[test]
    fn strategy_from_annotation_or_flag() {
        let mut a = BTreeMap::new();
        assert_eq!(
            strategy_for(None, ApplyStrategy::ServerSideApply),
            Ok(ApplyStrategy::ServerSideApply)
        );
        a.insert(STRATEGY_ANNOTATION.to_owned(), "dynamic-apply".to_owned());
        assert_eq!(
            strategy_for(Some(&a), ApplyStrategy::ServerSideApply),
            Ok(ApplyStrategy::DynamicApply)
        );
        a.insert(STRATEGY_ANNOTATION.to_owned(), "merge".to_owned());
        let e = strategy_for(Some(&a), ApplyStrategy::DynamicApply)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(STRATEGY_ANNOTATION) && e.contains("merge"),
            "{e}"
        );
    }

    #[test]
    fn omitting_the_record_needs_server_side_apply() {
        let with = |v: &str| BTreeMap::from([(LAST_APPLIED_OPTION.to_owned(), v.to_owned())]);
        let ssa = ApplyStrategy::ServerSideApply;
        assert_eq!(last_applied_for(None, ssa), Ok(LastApplied::Record));
        assert_eq!(
            last_applied_for(Some(&with("record")), ApplyStrategy::DynamicApply),
            Ok(LastApplied::Record)
        );
        assert_eq!(
            last_applied_for(Some(&with("omit")), ssa),
            Ok(LastApplied::Omit)
        );
        let e = last_applied_for(Some(&with("omit")), ApplyStrategy::DynamicApply)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(LAST_APPLIED_OPTION) && e.contains("server-side-apply"),
            "{e}"
        );
        let e = last_applied_for(Some(&with("none")), ssa)
            .unwrap_err()
            .to_string();
        assert!(e.contains("\"none\""), "{e}");
    }

    #[test]
    fn the_record_stays_where_a_type_needs_it() {
        use crate::api::{ChildUpdateMethod as M, DriftPolicy as D};
        let plain = dynapply::ListRules::new();
        let schema = json!({"type": "object", "properties": {"spec": {"type": "object",
            "x-kubernetes-preserve-unknown-fields": true}}});
        let open = dynapply::ListRules::from_openapi_schema(&schema);
        assert!(!open.preserve_unknown_subtrees().is_empty());
        let omit = LastApplied::Omit;
        assert!(records_last_applied(
            LastApplied::Record,
            &plain,
            D::Enforce,
            M::InPlace
        ));
        assert!(!records_last_applied(omit, &plain, D::Enforce, M::InPlace));
        assert!(!records_last_applied(omit, &plain, D::Report, M::InPlace));
        assert!(!records_last_applied(omit, &plain, D::Enforce, M::Recreate));
        assert!(records_last_applied(omit, &open, D::Enforce, M::InPlace));
        assert!(records_last_applied(
            omit,
            &plain,
            D::Report,
            M::RollingRecreate
        ));
    }

    #[test]
    fn field_manager_per_parent_within_the_limit() {
        let a = field_manager("metacontroller", "apps-cc", "uid-a");
        let b = field_manager("metacontroller", "apps-cc", "uid-b");
        assert_ne!(a, b);
        assert!(a.starts_with("metacontroller/apps-cc/"), "{a}");
        assert_eq!(a.len(), "metacontroller/apps-cc/".len() + UID_HASH_LEN);
        // the first hex digits of the uid's SHA-256: a parent's field manager never changes
        assert_eq!(a, "metacontroller/apps-cc/c1b41cff14");
        assert_eq!(a, field_manager("metacontroller", "apps-cc", "uid-a"));
        let long = field_manager("p", &"c".repeat(300), "uid-a");
        assert_eq!(long.len(), MAX_FIELD_MANAGER);
        assert!(long.ends_with(&a[a.len() - UID_HASH_LEN..]), "{long}");
        for m in [&a, &b, &long] {
            assert!(is_parent_manager(m), "{m}");
        }
        for other in [
            "kubectl-edit",
            "metacontroller",
            "a/0123456789",
            "a/b/012345678z",
            "a/b/c",
        ] {
            assert!(!is_parent_manager(other), "{other}");
        }
    }

    #[test]
    fn apply_body_keeps_desired_drops_server_fields() {
        let prepared = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "x", "namespace": "n", "resourceVersion": "5", "uid": "u",
                "managedFields": [], "labels": {"a": "b"}, "creationTimestamp": "t"},
            "data": {"k": "v"}, "status": {"s": 1}});
        assert_eq!(
            apply_body(&prepared),
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "x", "namespace": "n", "labels": {"a": "b"}},
                "data": {"k": "v"}})
        );
    }

    #[test]
    fn an_apply_merged_from_live_carries_the_live_resource_version() {
        let body = json!({"metadata": {"name": "x"}, "spec": {"a": 1}});
        assert_eq!(
            guarded(body.clone(), Some("7"), true),
            json!({"metadata": {"name": "x", "resourceVersion": "7"}, "spec": {"a": 1}})
        );
        assert_eq!(
            guarded(body.clone(), Some("7"), false),
            body,
            "nothing merged"
        );
        assert_eq!(
            guarded(body.clone(), None, true),
            body,
            "a child not yet observed"
        );
    }

    fn conflict(field: &str, manager: &str) -> FieldConflict {
        FieldConflict {
            field: field.into(),
            manager: manager.into(),
        }
    }

    #[test]
    fn conflicts_with_another_parent_are_contested_others_taken() {
        use crate::api::DriftPolicy;
        let mine = "metacontroller/cc/aaaa";
        let d = decide_conflicts(
            vec![
                conflict(".data.a", "kubectl-edit"),
                conflict(".data.b", mine),
            ],
            "metacontroller",
            mine,
            false,
            DriftPolicy::Enforce,
        );
        assert_eq!(
            d,
            ConflictDecision::Take(vec![conflict(".data.a", "kubectl-edit")])
        );
        let both = vec![
            conflict(".data.a", "kubectl-edit"),
            conflict(".data.b", "metacontroller/cc/bbbb"),
        ];
        let enforce = DriftPolicy::Enforce;
        let d = decide_conflicts(both.clone(), "metacontroller", mine, false, enforce);
        assert_eq!(
            d,
            ConflictDecision::Contested(vec![conflict(".data.b", "metacontroller/cc/bbbb")])
        );
        // an earlier owner's leftover fields on a child this parent controls are taken
        let d = decide_conflicts(both.clone(), "metacontroller", mine, true, enforce);
        assert_eq!(d, ConflictDecision::Take(both.clone()));
        // under Report (or Ignore) the same fields are reported, never taken
        for drift in [DriftPolicy::Report, DriftPolicy::Ignore] {
            let d = decide_conflicts(both.clone(), "metacontroller", mine, true, drift);
            assert_eq!(d, ConflictDecision::Report(both.clone()));
        }
    }

    #[test]
    fn update_ownership_moves_into_the_apply_entry() {
        let mine = "metacontroller/cc/aaaa";
        let managed = json!([
            {"manager": mine, "operation": "Update", "apiVersion": "v1", "fieldsType": "FieldsV1",
             "fieldsV1": {"f:data": {"f:a": {}}}},
            {"manager": "kubectl-edit", "operation": "Update", "fieldsV1": {"f:data": {"f:b": {}}}},
            {"manager": mine, "operation": "Apply", "fieldsV1": {"f:data": {"f:c": {}}}},
            {"manager": mine, "operation": "Update", "subresource": "status",
             "fieldsV1": {"f:status": {}}},
        ]);
        let up = upgraded_managed_fields(&managed, mine, &[]).unwrap();
        assert_eq!(
            up,
            json!([
                {"manager": "kubectl-edit", "operation": "Update", "fieldsV1": {"f:data": {"f:b": {}}}},
                {"manager": mine, "operation": "Apply", "fieldsV1": {"f:data": {"f:a": {}, "f:c": {}}}},
                {"manager": mine, "operation": "Update", "subresource": "status",
                 "fieldsV1": {"f:status": {}}},
            ])
        );
        assert_eq!(
            upgraded_managed_fields(&up, mine, &[]),
            None,
            "nothing left to move"
        );
        let only_update = json!([{"manager": mine, "operation": "Update", "apiVersion": "v1",
            "fieldsV1": {"f:data": {"f:a": {}}}}]);
        assert_eq!(
            upgraded_managed_fields(&only_update, mine, &[]).unwrap(),
            json!([{"manager": mine, "operation": "Apply", "apiVersion": "v1",
                "fieldsV1": {"f:data": {"f:a": {}}}}])
        );
        // Metacontroller's dynamic apply (manager from its User-Agent) is taken over too
        let legacy = json!([{"manager": "metacontroller", "operation": "Update",
            "fieldsV1": {"f:data": {"f:a": {}}}}]);
        assert_eq!(
            upgraded_managed_fields(&legacy, mine, &["metacontroller", "kmeta"]).unwrap(),
            json!([{"manager": mine, "operation": "Apply", "fieldsV1": {"f:data": {"f:a": {}}}}])
        );
        assert_eq!(upgraded_managed_fields(&legacy, mine, &["kmeta"]), None);
    }

    #[test]
    fn drift_is_what_desired_sets_differently() {
        let desired = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "x", "labels": {"a": "1"}},
            "data": {"k": "v", "n": 1, "l": [1, 2]}});
        let live = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "x", "uid": "u", "labels": {"a": "2", "b": "x"}},
            "data": {"k": "v", "n": 1.0, "l": [2, 1], "extra": "e"}});
        assert_eq!(
            drifted_paths(&desired, &live),
            vec![".data.l", ".metadata.labels.a"]
        );
        assert!(drifted_paths(&desired, &desired).is_empty());
        let gone = json!({"metadata": {"name": "x"}});
        assert_eq!(
            drifted_paths(&desired, &gone),
            vec![".data", ".metadata.labels"]
        );
    }

    #[test]
    fn child_conditions_join_the_hook_status_and_keep_their_time() {
        let report = |m: &str| ChildReport {
            kind: DRIFT_CONDITION,
            reason: "Drifted",
            message: m.into(),
        };
        let hook = json!({"ready": 1, "conditions": [{"type": "Ready", "status": "True"}]});
        let s = with_child_conditions(Some(&hook), &json!({}), &[report("a"), report("b")], "t1")
            .unwrap();
        assert_eq!(
            s["conditions"],
            json!([{"type": "Ready", "status": "True"},
                {"type": "ChildDrift", "status": "True", "reason": "Drifted", "message": "a; b",
                 "lastTransitionTime": "t1"}])
        );
        let live = json!({"status": s});
        let again = with_child_conditions(Some(&hook), &live, &[report("a"), report("b")], "t2");
        assert_eq!(
            again.as_ref(),
            Some(&live["status"]),
            "stable while it stays"
        );
        let swapped = with_child_conditions(Some(&hook), &live, &[report("b"), report("a")], "t3");
        assert_eq!(swapped.as_ref(), Some(&live["status"]), "in any order");
        assert_eq!(
            with_child_conditions(Some(&hook), &live, &[], "t2"),
            Some(hook.clone())
        );
        assert_eq!(with_child_conditions(None, &live, &[], "t2"), None);
    }

    #[test]
    fn a_child_held_by_another_parent_or_decorator_is_contested() {
        let owned_by = |uid: &str, dc: Option<&str>| {
            let mut o = json!({"metadata": {"ownerReferences": [{"kind": "Thing", "name": "first",
                "uid": uid, "controller": true}]}});
            if let Some(dc) = dc {
                o["metadata"]["annotations"] = json!({DECORATOR_ANNOTATION: dc});
            }
            o
        };
        let plain = json!({"metadata": {}});
        assert_eq!(
            contest_holder("p2", &plain, &owned_by("p1", None)).as_deref(),
            Some("Thing first")
        );
        assert_eq!(contest_holder("p1", &plain, &owned_by("p1", None)), None);
        assert_eq!(contest_holder("p1", &plain, &plain), None);
        let mine = owned_by("t", Some("dc-b"));
        assert_eq!(
            contest_holder("t", &mine, &owned_by("t", Some("dc-a"))).as_deref(),
            Some("Thing first (attached by DecoratorController dc-a)")
        );
        assert_eq!(
            contest_holder("t", &mine, &owned_by("t", Some("dc-b"))),
            None
        );
    }

    #[test]
    fn contests_reach_the_holder_until_the_contender_stops() {
        let mut c = Contests::default();
        let contest = Contest {
            holder_uid: "h".into(),
            child: "ConfigMap ns/shared".into(),
            contender: "cc second".into(),
        };
        c.set("cc", "c", vec![contest]);
        let reports = c.against("cc", "h");
        assert_eq!(reports.len(), 1);
        assert_eq!(reports[0].kind, CONTESTED_CONDITION);
        assert_eq!(
            reports[0].message,
            "ConfigMap ns/shared: wanted by cc second too"
        );
        assert!(c.against("cc", "c").is_empty(), "not the contender's own");
        assert!(c.against("other", "x").is_empty());
        c.set("cc", "c", Vec::new());
        assert!(c.against("cc", "h").is_empty());
    }

    #[test]
    fn a_deleted_contenders_sync_that_ends_late_records_nothing() {
        let mut c = Contests::default();
        let contest = Contest {
            holder_uid: "h".into(),
            child: "ConfigMap ns/shared".into(),
            contender: "cc second".into(),
        };
        c.set("cc", "c", vec![contest.clone()]);
        c.forget("cc", "c");
        assert!(c.against("cc", "h").is_empty());
        // its sync in flight at the deletion ends now
        c.set("cc", "c", vec![contest.clone()]);
        assert!(
            c.against("cc", "h").is_empty(),
            "a deleted contender stays gone"
        );
        c.set("cc", "other", vec![contest]);
        assert_eq!(c.against("cc", "h").len(), 1, "others are remembered");
    }

    #[test]
    fn conflict_causes_are_parsed() {
        let status: kube::core::Status = serde_json::from_value(json!({
            "status": "Failure", "code": 409, "reason": "Conflict",
            "message": "Apply failed with 1 conflict: conflict with \"kubectl-edit\" using v1: .data.color",
            "details": {"causes": [{"reason": "FieldManagerConflict",
                "message": "conflict with \"kubectl-edit\" using v1", "field": ".data.color"}]}
        }))
        .unwrap();
        assert_eq!(
            conflicts_of(&status),
            vec![conflict(".data.color", "kubectl-edit")]
        );
        assert_eq!(
            describe_conflicts(&conflicts_of(&status)),
            ".data.color from \"kubectl-edit\""
        );
    }
}
