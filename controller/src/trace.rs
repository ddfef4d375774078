//! A parent as kmeta sees it, as a library: [`trace_parent`] and [`trace_controller`] read it
//! through the API server into a [`ParentTrace`] (or rows of [`SyncState`]), which
//! [`render_text`] and [`render_list`] print. The `kmeta trace` command is a thin shell over it.
//!
//! `kmeta trace`: one parent as kmeta sees it — its sync state (the `Synced`, `Paused` and child
//! conditions kmeta writes, `observedGeneration`, the last reconcile request handled), its
//! CompositeController, the tree of its children (kind, name, age, ready state, the field
//! managers holding them) and the recent Events about it; or, given a CompositeController, all of
//! its parents with the ones not synced first. Everything is read through the API server: whoever
//! may read the parent, its children and its Events may trace it.

use std::collections::HashMap;

use kube::api::{Api, DynamicObject, ListParams};
use kube::discovery::{ApiResource, Discovery, Scope};
use serde::Serialize;
use serde_json::Value;

use crate::object::condition;
use crate::reconcile::decide::{
    LAST_HANDLED_RECONCILE_AT, PAUSED_CONDITION, RECORD_FIELD, SYNCED_CONDITION,
};
use crate::steer::{SteerError, Target};

/// Events about the parent shown at most: the 10 latest.
const EVENTS_SHOWN: usize = 10;

/// Where a parent's sync stands, from what kmeta wrote on it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "state", content = "message", rename_all = "camelCase")]
pub enum SyncState {
    /// The last sync succeeded for the current generation.
    Synced,
    /// kmeta leaves it alone (`kmeta.dev/paused`).
    Paused(String),
    /// The last sync failed: the `Synced=False` message.
    Failed(String),
    /// The spec changed since the last successful sync (`generation` > `observedGeneration`), or
    /// it was never synced.
    Pending(String),
}

impl SyncState {
    /// Not synced: listed first.
    fn rank(&self) -> u8 {
        match self {
            SyncState::Failed(_) => 0,
            SyncState::Pending(_) => 1,
            SyncState::Paused(_) => 2,
            SyncState::Synced => 3,
        }
    }

    fn label(&self) -> &'static str {
        match self {
            SyncState::Synced => "Synced",
            SyncState::Paused(_) => "Paused",
            SyncState::Failed(_) => "Failed",
            SyncState::Pending(_) => "Pending",
        }
    }
}

fn text(v: Option<&Value>) -> String {
    v.and_then(Value::as_str).unwrap_or_default().to_owned()
}

/// The sync state of `parent`, from its status.
fn sync_state(parent: &Value) -> SyncState {
    if let Some(c) = condition(parent, PAUSED_CONDITION).filter(|c| c["status"] == "True") {
        return SyncState::Paused(text(c.get("message")));
    }
    if let Some(c) = condition(parent, SYNCED_CONDITION).filter(|c| c["status"] == "False") {
        return SyncState::Failed(text(c.get("message")));
    }
    let generation = parent
        .pointer("/metadata/generation")
        .and_then(Value::as_i64);
    let observed = parent
        .pointer("/status/observedGeneration")
        .and_then(Value::as_i64);
    match (generation, observed) {
        (Some(g), Some(o)) if o >= g => SyncState::Synced,
        (Some(g), Some(o)) => SyncState::Pending(format!("generation {g}, last synced {o}")),
        (_, None) => SyncState::Pending("no sync has written its status yet".into()),
        (None, Some(_)) => SyncState::Synced,
    }
}

/// Whether a child is ready, where its kind says: a `Ready` or `Available` condition, or ready
/// replicas against desired ones. None when the kind has no such notion (a ConfigMap).
fn ready(obj: &Value) -> Option<bool> {
    for t in ["Ready", "Available"] {
        if let Some(c) = condition(obj, t) {
            return Some(c["status"] == "True");
        }
    }
    let want = obj.pointer("/spec/replicas").and_then(Value::as_i64)?;
    let have = obj
        .pointer("/status/readyReplicas")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    Some(have >= want)
}

/// The field managers holding fields of `obj` (from `managedFields`), each once, in order.
fn managers(obj: &Value) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for m in obj
        .pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let name = text(m.get("manager"));
        if !name.is_empty() && !out.contains(&name) {
            out.push(name);
        }
    }
    out
}

/// `obj`'s age at `now` (RFC 3339 creationTimestamp): `45s`, `12m`, `3h`, `2d`.
fn age(obj: &Value, now: jiff::Timestamp) -> String {
    let Some(created) = obj
        .pointer("/metadata/creationTimestamp")
        .and_then(Value::as_str)
        .and_then(|t| t.parse::<jiff::Timestamp>().ok())
    else {
        return "?".into();
    };
    age_between(created, now)
}

/// The time from `then` to `now`: `45s`, `12m`, `3h`, `2d`.
fn age_between(then: jiff::Timestamp, now: jiff::Timestamp) -> String {
    let secs = now.as_second().saturating_sub(then.as_second()).max(0);
    match secs {
        s if s < 120 => format!("{s}s"),
        s if s < 2 * 3600 => format!("{}m", s / 60),
        s if s < 2 * 86_400 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86_400),
    }
}

/// One child as traced.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ChildView {
    /// `Kind`.
    pub kind: String,
    /// `namespace/name` or `name`.
    pub name: String,
    /// Its age.
    pub age: String,
    /// Ready, where the kind says.
    pub ready: Option<bool>,
    /// The field managers holding it.
    pub managers: Vec<String>,
    /// The rolling update's ControllerRevision that claims it, where the parent has revisions.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
}

/// One Event about the parent.
#[derive(Debug, Clone, Serialize)]
pub struct EventView {
    /// When it last happened.
    pub time: String,
    /// Normal or Warning.
    #[serde(rename = "type")]
    pub type_: String,
    /// Its reason.
    pub reason: String,
    /// Its note.
    pub note: String,
    /// How many times (its series' count, else 1).
    pub count: i64,
}

/// One parent traced.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ParentTrace {
    /// `resource/name in namespace`.
    pub parent: String,
    /// Its CompositeController(s).
    pub controllers: Vec<String>,
    /// Where its sync stands.
    pub sync: SyncState,
    /// The last `kmeta.dev/reconcile-requested-at` value a sync handled.
    pub last_handled_reconcile_at: Option<String>,
    /// Its conditions (kmeta's and the hook's): `Type=Status: message`.
    pub conditions: Vec<String>,
    /// kmeta's record of its last sync that changed something (`status.kmeta.lastSync`): when,
    /// the hook's time, the trace id, and what was done to each child.
    pub last_change: Option<Value>,
    /// kmeta's records of the syncs before the last change that wrote something
    /// (`status.kmeta.history`), newest first, at most 4.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub history: Vec<Value>,
    /// Print every record of `history` (`--history`), not only the last that wrote children.
    #[serde(skip)]
    pub show_history: bool,
    /// The related objects its hook was sent at the last change (`Kind namespace/name`), when
    /// asked for (`--related`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub related: Option<Vec<String>>,
    /// Its children.
    pub children: Vec<ChildView>,
    /// The latest Events about it, oldest first.
    pub events: Vec<EventView>,
}

fn conditions_of(obj: &Value) -> Vec<String> {
    obj.pointer("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|c| {
            let mut s = format!("{}={}", text(c.get("type")), text(c.get("status")));
            let m = text(c.get("message"));
            if !m.is_empty() {
                s.push_str(": ");
                s.push_str(&m);
            }
            s
        })
        .collect()
}

fn event_view(e: &Value) -> EventView {
    let time = [
        "/series/lastObservedTime",
        "/eventTime",
        "/metadata/creationTimestamp",
    ]
    .iter()
    .find_map(|p| e.pointer(p).and_then(Value::as_str))
    .unwrap_or_default()
    .to_owned();
    EventView {
        time,
        type_: text(e.get("type")),
        reason: text(e.get("reason")),
        note: text(e.get("note")),
        count: e
            .pointer("/series/count")
            .and_then(Value::as_i64)
            .unwrap_or(1),
    }
}

/// The trace as text; `color` on a terminal only.
pub fn render_text(t: &ParentTrace, color: bool) -> String {
    let paint = |code: &str, s: &str| {
        if color {
            format!("\x1b[{code}m{s}\x1b[0m")
        } else {
            s.to_owned()
        }
    };
    let state = match &t.sync {
        SyncState::Synced => paint("32", "Synced"),
        SyncState::Paused(m) => format!("{}: {m}", paint("33", "Paused")),
        SyncState::Failed(m) => format!("{}: {m}", paint("31", "Failed")),
        SyncState::Pending(m) => format!("{}: {m}", paint("33", "Pending")),
    };
    let mut out = format!(
        "{}\n  controller: {}\n  sync: {state}\n",
        t.parent,
        t.controllers.join(", ")
    );
    if let Some(at) = &t.last_handled_reconcile_at {
        out.push_str(&format!("  last reconcile request handled: {at}\n"));
    }
    for c in &t.conditions {
        out.push_str(&format!("  condition {c}\n"));
    }
    out.push_str(&changes_text(t, jiff::Timestamp::now()));
    out.push_str(&format!("  children ({}):\n", t.children.len()));
    for c in &t.children {
        let ready = match c.ready {
            Some(true) => paint("32", "ready"),
            Some(false) => paint("31", "not ready"),
            None => "-".into(),
        };
        let revision = c
            .revision
            .as_ref()
            .map(|r| format!("  revision {r}"))
            .unwrap_or_default();
        out.push_str(&format!(
            "    {} {}  age {}  {ready}  managers: {}{revision}\n",
            c.kind,
            c.name,
            c.age,
            c.managers.join(", ")
        ));
    }
    if let Some(related) = &t.related {
        out.push_str(&format!(
            "  related at the last change ({}):\n",
            related.len()
        ));
        for r in related {
            out.push_str(&format!("    {r}\n"));
        }
    }
    out.push_str(&format!("  events ({} latest):\n", t.events.len()));
    for e in &t.events {
        let type_ = if e.type_ == "Warning" {
            paint("31", &e.type_)
        } else {
            e.type_.clone()
        };
        let times = if e.count > 1 {
            format!(" (x{})", e.count)
        } else {
            String::new()
        };
        out.push_str(&format!(
            "    {} {type_} {}{times}: {}\n",
            e.time, e.reason, e.note
        ));
    }
    out
}

/// `t` with the related objects of its last change (`--related`), as recorded.
pub fn with_related(mut t: ParentTrace) -> ParentTrace {
    let recorded = t
        .last_change
        .as_ref()
        .and_then(|c| c.get("related"))
        .and_then(Value::as_array)
        .map(|r| r.iter().map(|n| text(Some(n))).collect())
        .unwrap_or_default();
    t.related = Some(recorded);
    t
}

/// `t` printing every earlier record it keeps (`--history`).
pub fn with_history(mut t: ParentTrace) -> ParentTrace {
    t.show_history = true;
    t
}

/// Whether a record wrote (or left alone) children, not the status only.
fn touched_children(r: &Value) -> bool {
    r.get("children")
        .and_then(Value::as_array)
        .is_some_and(|c| !c.is_empty())
}

/// The last change, then either every earlier record (`show_history`) or, when the last change
/// wrote the status only, the last one that wrote children: a status-only sync never hides it.
fn changes_text(t: &ParentTrace, now: jiff::Timestamp) -> String {
    let Some(last) = &t.last_change else {
        return String::new();
    };
    let mut out = last_change_text(last, now, "last change");
    if t.show_history {
        for r in &t.history {
            out.push_str(&last_change_text(r, now, "earlier change"));
        }
    } else if !touched_children(last)
        && let Some(r) = t.history.iter().find(|r| touched_children(r))
    {
        out.push_str(&last_change_text(r, now, "last change to children"));
    }
    out
}

/// One record of a sync that changed something, as text lines headed `title`.
fn last_change_text(r: &Value, now: jiff::Timestamp, title: &str) -> String {
    let time = text(r.get("time"));
    let ago = time
        .parse::<jiff::Timestamp>()
        .map(|t| format!(" ({} ago)", age_between(t, now)))
        .unwrap_or_default();
    let mut out = format!("  {title}: {time}{ago}");
    if let Some(ms) = r.get("hookMillis").and_then(Value::as_u64) {
        out.push_str(&format!(", hook {ms}ms"));
    }
    if let Some(t) = r.get("traceID").and_then(Value::as_str) {
        out.push_str(&format!(", trace {t}"));
    }
    if let Some(by) = r.get("replica").and_then(Value::as_str) {
        out.push_str(&format!(", by {by}"));
    }
    out.push('\n');
    if let Some(why) = r.get("trigger").and_then(Value::as_str) {
        out.push_str(&format!("    triggered by {why}\n"));
    }
    let children = r.get("children").and_then(Value::as_array);
    if children.is_none_or(Vec::is_empty) {
        out.push_str("    the status only\n");
    }
    for c in children.into_iter().flatten() {
        let detail = match (c.get("fields").and_then(Value::as_array), c.get("reason")) {
            (Some(f), _) if !f.is_empty() => {
                let f: Vec<String> = f.iter().map(|p| text(Some(p))).collect();
                format!(": {}", f.join(", "))
            }
            (_, Some(why)) => format!(" ({})", text(Some(why))),
            _ => String::new(),
        };
        out.push_str(&format!(
            "    {} {} {}{detail}\n",
            text(c.get("action")),
            text(c.get("kind")),
            text(c.get("name"))
        ));
    }
    if let Some(n) = r.get("more").and_then(Value::as_u64) {
        out.push_str(&format!("    and {n} more children\n"));
    }
    out
}

/// Parents of a controller as a table, not synced first.
pub fn render_list(rows: &[(String, SyncState)]) -> String {
    let mut rows: Vec<&(String, SyncState)> = rows.iter().collect();
    rows.sort_by(|a, b| a.1.rank().cmp(&b.1.rank()).then(a.0.cmp(&b.0)));
    let mut out = String::from("PARENT\tSYNC\tMESSAGE\n");
    for (name, state) in rows {
        let message = match state {
            SyncState::Synced => String::new(),
            SyncState::Paused(m) | SyncState::Failed(m) | SyncState::Pending(m) => m.clone(),
        };
        out.push_str(&format!("{name}\t{}\t{message}\n", state.label()));
    }
    out
}

fn api_err(action: String) -> impl FnOnce(kube::Error) -> SteerError {
    move |source| SteerError::Api { action, source }
}

fn find(discovery: &Discovery, api_version: &str, plural: &str) -> Option<(ApiResource, bool)> {
    discovery.groups().find_map(|g| {
        g.recommended_resources()
            .into_iter()
            .find(|(r, _)| r.api_version == api_version && r.plural == plural)
            .or_else(|| {
                g.versioned_resources(api_version.rsplit_once('/').map_or(api_version, |(_, v)| v))
                    .into_iter()
                    .find(|(r, _)| r.api_version == api_version && r.plural == plural)
            })
            .map(|(r, caps)| (r, caps.scope == Scope::Namespaced))
    })
}

async fn list(api: &Api<DynamicObject>, what: &str) -> Result<Vec<Value>, SteerError> {
    let items = api
        .list(&ListParams::default())
        .await
        .map_err(api_err(format!("listing {what}")))?;
    Ok(items
        .items
        .into_iter()
        .filter_map(|o| serde_json::to_value(o).ok())
        .collect())
}

/// The CompositeController resource (kmeta's CRD).
fn composite_controllers() -> ApiResource {
    kmeta_resource("CompositeController", "compositecontrollers")
}

fn kmeta_resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: crate::api::GROUP.into(),
        version: crate::api::VERSION.into(),
        api_version: format!("{}/{}", crate::api::GROUP, crate::api::VERSION),
        kind: kind.into(),
        plural: plural.into(),
    }
}

/// Whether DecoratorController `dc` decorates `resource` (one of its `resources` rules names
/// its apiVersion and plural).
fn decorates(dc: &Value, resource: &ApiResource) -> bool {
    dc.pointer("/spec/resources")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|r| {
            r.get("apiVersion").and_then(Value::as_str) == Some(resource.api_version.as_str())
                && r.get("resource").and_then(Value::as_str) == Some(resource.plural.as_str())
        })
}

/// The object rules of a controller: a CompositeController's `childResources`, a
/// DecoratorController's `attachments`.
fn child_rules(controller: &Value) -> impl Iterator<Item = &Value> {
    ["/spec/childResources", "/spec/attachments"]
        .into_iter()
        .filter_map(|p| controller.pointer(p).and_then(Value::as_array))
        .flatten()
}

/// Which ControllerRevision (of a rolling update) claims each child of the parent with `uid`:
/// `(kind, name)` → revision name; empty where the server has no ControllerRevisions.
async fn revisions_of(
    client: &kube::Client,
    discovery: &Discovery,
    target: &Target,
    uid: &str,
) -> Result<HashMap<(String, String), String>, SteerError> {
    let mut out = HashMap::new();
    let (Some((r, _)), Some(ns)) = (
        find(
            discovery,
            "metacontroller.k8s.io/v1alpha1",
            "controllerrevisions",
        ),
        &target.namespace,
    ) else {
        return Ok(out);
    };
    let api = Api::namespaced_with(client.clone(), ns, &r);
    for rev in list(&api, "ControllerRevisions").await? {
        if crate::object::controller_uid(&rev) != Some(uid) {
            continue;
        }
        let name = text(rev.pointer("/metadata/name"));
        for group in rev
            .get("children")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let kind = text(group.get("kind"));
            for child in group
                .get("names")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                out.insert((kind.clone(), text(Some(child))), name.clone());
            }
        }
    }
    Ok(out)
}

/// The CompositeControllers whose parent resource is `parent_resource`.
async fn controllers_of(
    client: &kube::Client,
    discovery: &Discovery,
    parent_resource: &ApiResource,
) -> Result<Vec<Value>, SteerError> {
    let ccs = composite_controllers();
    let all = list(&Api::all_with(client.clone(), &ccs), "CompositeControllers").await?;
    let mut found: Vec<Value> = all
        .into_iter()
        .filter(|cc| {
            cc.pointer("/spec/parentResource/apiVersion")
                .and_then(Value::as_str)
                == Some(parent_resource.api_version.as_str())
                && cc
                    .pointer("/spec/parentResource/resource")
                    .and_then(Value::as_str)
                    == Some(parent_resource.plural.as_str())
        })
        .collect();
    let dcs = kmeta_resource("DecoratorController", "decoratorcontrollers");
    // a server without the DecoratorController CRD has none to list
    if find(discovery, &dcs.api_version, &dcs.plural).is_some() {
        let all = list(&Api::all_with(client.clone(), &dcs), "DecoratorControllers").await?;
        found.extend(all.into_iter().filter(|dc| decorates(dc, parent_resource)));
    }
    Ok(found)
}

/// The children of the parent with `uid` (objects of its controllers' child resources whose
/// controller reference is the parent; for a CEL resource graph's parent, also those it owns
/// by label, in any namespace: `reconcile::decide::label_owned`).
async fn children_of(
    client: &kube::Client,
    discovery: &Discovery,
    controllers: &[Value],
    target: &Target,
    uid: &str,
) -> Result<Vec<ChildView>, SteerError> {
    let now = jiff::Timestamp::now();
    let revisions = revisions_of(client, discovery, target, uid).await?;
    let rules = controllers.iter().flat_map(child_rules);
    let by_label = controllers
        .iter()
        .any(|cc| cc.pointer("/spec/hooks/sync/cel").is_some());
    let parent = serde_json::json!({"metadata": {"uid": uid, "namespace": target.namespace}});
    let mut children = Vec::new();
    for rule in rules {
        let (av, plural) = (text(rule.get("apiVersion")), text(rule.get("resource")));
        let Some((r, namespaced)) = find(discovery, &av, &plural) else {
            continue;
        };
        let api: Api<DynamicObject> = match (&target.namespace, namespaced && !by_label) {
            (Some(ns), true) => Api::namespaced_with(client.clone(), ns, &r),
            _ => Api::all_with(client.clone(), &r),
        };
        for child in list(&api, &format!("{av}/{plural}")).await? {
            let owned = child
                .pointer("/metadata/ownerReferences")
                .and_then(Value::as_array)
                .is_some_and(|refs| {
                    refs.iter()
                        .any(|o| o["uid"] == uid && o["controller"] == true)
                });
            let labelled = by_label && crate::reconcile::decide::label_owned_by(&parent, &child);
            if !owned && !labelled {
                continue;
            }
            let ns = text(child.pointer("/metadata/namespace"));
            let name = text(child.pointer("/metadata/name"));
            let kind = text(child.get("kind"));
            let revision = revisions.get(&(kind.clone(), name.clone())).cloned();
            children.push(ChildView {
                revision,
                kind,
                name: if ns.is_empty() {
                    name
                } else {
                    format!("{ns}/{name}")
                },
                age: age(&child, now),
                ready: ready(&child),
                managers: managers(&child),
            });
        }
    }
    Ok(children)
}

/// The latest Events regarding the object with `uid`, oldest first.
async fn events_of(
    client: &kube::Client,
    target: &Target,
    uid: &str,
) -> Result<Vec<EventView>, SteerError> {
    let events_api = ApiResource {
        group: "events.k8s.io".into(),
        version: "v1".into(),
        api_version: "events.k8s.io/v1".into(),
        kind: "Event".into(),
        plural: "events".into(),
    };
    let api: Api<DynamicObject> = match &target.namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &events_api),
        None => Api::all_with(client.clone(), &events_api),
    };
    let mut events: Vec<EventView> = list(&api, "Events")
        .await?
        .iter()
        .filter(|e| e.pointer("/regarding/uid").and_then(Value::as_str) == Some(uid))
        .map(event_view)
        .collect();
    events.sort_by(|a, b| a.time.cmp(&b.time));
    let skip = events.len().saturating_sub(EVENTS_SHOWN);
    Ok(events.split_off(skip))
}

/// Traces the parent `target` names.
pub async fn trace_parent(
    client: &kube::Client,
    discovery: &Discovery,
    target: &Target,
) -> Result<ParentTrace, SteerError> {
    let parent = target
        .api(client)
        .get(&target.name)
        .await
        .map_err(api_err(format!("reading {}", target.display())))?;
    let parent = serde_json::to_value(parent).unwrap_or(Value::Null);
    let uid = text(parent.pointer("/metadata/uid"));
    let controllers = controllers_of(client, discovery, &target.resource).await?;
    Ok(ParentTrace {
        parent: target.display(),
        controllers: controllers
            .iter()
            .map(|c| text(c.pointer("/metadata/name")))
            .collect(),
        sync: sync_state(&parent),
        last_handled_reconcile_at: parent
            .pointer(&format!("/status/{LAST_HANDLED_RECONCILE_AT}"))
            .and_then(Value::as_str)
            .map(str::to_owned),
        conditions: conditions_of(&parent),
        last_change: parent
            .pointer(&format!("/status/{RECORD_FIELD}/lastSync"))
            .cloned(),
        history: parent
            .pointer(&format!("/status/{RECORD_FIELD}/history"))
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default(),
        show_history: false,
        related: None,
        children: children_of(client, discovery, &controllers, target, &uid).await?,
        events: events_of(client, target, &uid).await?,
    })
}

/// The parents of CompositeController `name`, each with its sync state.
pub async fn trace_controller(
    client: &kube::Client,
    discovery: &Discovery,
    name: &str,
) -> Result<Vec<(String, SyncState)>, SteerError> {
    let ccs = composite_controllers();
    let cc = Api::<DynamicObject>::all_with(client.clone(), &ccs)
        .get(name)
        .await
        .map_err(api_err(format!("reading CompositeController {name}")))?;
    let cc = serde_json::to_value(cc).unwrap_or(Value::Null);
    let (av, plural) = (
        text(cc.pointer("/spec/parentResource/apiVersion")),
        text(cc.pointer("/spec/parentResource/resource")),
    );
    let Some((r, _)) = find(discovery, &av, &plural) else {
        return Err(SteerError::UnknownResource {
            resource: format!("{av}/{plural}"),
        });
    };
    let parents = list(&Api::all_with(client.clone(), &r), &plural).await?;
    Ok(parents
        .iter()
        .map(|p| {
            let ns = text(p.pointer("/metadata/namespace"));
            let name = text(p.pointer("/metadata/name"));
            let shown = if ns.is_empty() {
                name
            } else {
                format!("{ns}/{name}")
            };
            (shown, sync_state(p))
        })
        .collect())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_sync_state_is_read_from_kmetas_conditions_and_generations() {
        let mut p = json!({"metadata": {"generation": 2}, "status": {"observedGeneration": 2}});
        assert_eq!(sync_state(&p), SyncState::Synced);
        p["metadata"]["generation"] = json!(3);
        assert_eq!(
            sync_state(&p),
            SyncState::Pending("generation 3, last synced 2".into())
        );
        p["status"]["conditions"] =
            json!([{"type": "Synced", "status": "False", "message": "hook down"}]);
        assert_eq!(sync_state(&p), SyncState::Failed("hook down".into()));
        p["status"]["conditions"] = json!([{"type": "Paused", "status": "True", "message": "m"}]);
        assert_eq!(sync_state(&p), SyncState::Paused("m".into()));
        assert!(matches!(
            sync_state(&json!({"metadata": {"generation": 1}})),
            SyncState::Pending(_)
        ));
    }

    #[test]
    fn ready_managers_and_age() {
        let d = json!({"metadata": {"creationTimestamp": "2026-11-27T08:00:00Z",
                          "managedFields": [{"manager": "kmeta"}, {"manager": "istio"}, {"manager": "kmeta"}]},
                       "spec": {"replicas": 2}, "status": {"readyReplicas": 1}});
        assert_eq!(ready(&d), Some(false));
        assert_eq!(ready(&json!({"kind": "ConfigMap"})), None);
        assert_eq!(
            ready(&json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}})),
            Some(true)
        );
        assert_eq!(managers(&d), ["kmeta", "istio"]);
        let now: jiff::Timestamp = "2026-11-27T10:30:00Z".parse().unwrap();
        assert_eq!(age(&d, now), "2h");
    }

    #[test]
    fn a_list_puts_the_parents_not_synced_first() {
        let rows = vec![
            ("a".to_owned(), SyncState::Synced),
            ("b".to_owned(), SyncState::Failed("hook down".into())),
            ("c".to_owned(), SyncState::Paused("m".into())),
            ("d".to_owned(), SyncState::Pending("p".into())),
        ];
        let text = render_list(&rows);
        let order: Vec<&str> = text
            .lines()
            .skip(1)
            .map(|l| l.split('\t').next().unwrap())
            .collect();
        assert_eq!(order, ["b", "d", "c", "a"]);
        assert!(text.contains("b\tFailed\thook down"));
    }
}
