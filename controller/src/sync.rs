//! One sync of one parent, as named steps:
//! `ensure_finalizer → claim_children → call_customize → call_hook → validate_desired →
//! manage_children → update_status → release_finalizer`.
//! Decisions come from [`crate::decide`]; this module only reads caches and writes.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use serde_json::{Map, Value};

use crate::api::HookVersion;
use crate::cache::{Informer, ObjKey};
use crate::controller::ParentController;
use crate::decide::{
    self, ChildOp, DecideError, FinalizerAction, HookChoice, finalizer_name, has_finalizer,
    is_deleting, meta_str,
};
use crate::hook::HookError;
use crate::kapi;
use crate::resources::{Resolved, ResourceError};
use crate::selector::{self, SelectorError};
use crate::wire::{self, RelatedResourceRule, SyncResponse};

/// Why a sync failed. Nothing about the children changes when the hook failed.
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    /// A decision failed (selector, invalid desired child, apply input).
    #[error(transparent)]
    Decide(#[from] DecideError),
    /// A label selector is invalid.
    #[error(transparent)]
    Selector(#[from] SelectorError),
    /// The hook failed, timed out or answered something unusable.
    #[error(transparent)]
    Hook(#[from] HookError),
    /// An API call failed.
    #[error("{action}: {source}")]
    Api {
        /// What was being done.
        action: String,
        /// Cause.
        source: kube::Error,
    },
    /// Some child writes failed (the others were made).
    #[error("managing children: {}", .0.join("; "))]
    Children(Vec<String>),
    /// A related resource watch has not listed yet (requeued without an event).
    #[error("related watch {0} not synced yet")]
    RelatedNotSynced(String),
    /// A related-resource rule is invalid or unresolvable.
    #[error("customize: {0}")]
    Related(String),
    /// A resource is unknown.
    #[error(transparent)]
    Resource(#[from] ResourceError),
}

fn api_err(action: impl Into<String>) -> impl FnOnce(kube::Error) -> SyncError {
    let action = action.into();
    move |source| SyncError::Api { action, source }
}

/// Syncs the parent at `key`; returns when to sync it again (if sooner than an event).
pub async fn sync_parent(
    pc: &Arc<ParentController>,
    key: &ObjKey,
) -> Result<Option<Duration>, SyncError> {
    let Some(cached) = pc.parents.get(&key.0, &key.1) else {
        return Ok(None);
    };
    let fin = finalizer_name(&pc.name);
    let selected = pc.selected(&cached)?;
    let Some(parent) = ensure_finalizer(pc, (*cached).clone(), &fin).await? else {
        return Ok(None);
    };
    let choice = decide::choose_hook(
        pc.finalize_hook.is_some(),
        is_deleting(&parent),
        selected,
        has_finalizer(&parent, &fin),
    );
    let finalizing = match choice {
        HookChoice::Skip => return Ok(None),
        HookChoice::Finalize => true,
        HookChoice::Sync => false,
    };
    let generate = pc.cc.spec.generate_selector.unwrap_or(false);
    let selector = decide::parent_selector(&parent, generate)?;
    let observed = claim_children(pc, &parent, &selector).await?;
    let related = call_customize(pc, &parent).await?;
    let response = call_hook(pc, &parent, &observed, &related, finalizing).await?;
    let desired = decide::validate_desired(
        &parent,
        pc.parent.namespaced,
        &pc.declared,
        &selector,
        generate,
        response.children.clone(),
    )?;
    if decide::may_manage_children(&parent, finalizing, &fin) {
        manage_children(pc, &parent, &observed, &desired).await?;
        pc.ctx
            .config
            .metrics
            .children(&pc.name, meta_str(&parent, "uid"), desired.len());
    }
    update_status(pc, &parent, response.status.as_ref()).await?;
    if decide::finalizer_after_hook(finalizing, response.finalized, has_finalizer(&parent, &fin))
        == FinalizerAction::Remove
    {
        set_finalizer(pc, &parent, &fin, false).await?;
    }
    Ok((response.resync_after_seconds > 0.0)
        .then(|| Duration::try_from_secs_f64(response.resync_after_seconds).ok())
        .flatten())
}

async fn set_finalizer(
    pc: &ParentController,
    parent: &Value,
    fin: &str,
    add: bool,
) -> Result<Option<Value>, SyncError> {
    let api = kapi::api(&pc.ctx.client, &pc.parent, meta_str(parent, "namespace"));
    let name = meta_str(parent, "name");
    kapi::atomic_update(&api, name, meta_str(parent, "uid"), false, |o| {
        let Some(m) = o.get_mut("metadata").and_then(Value::as_object_mut) else {
            return false;
        };
        let list = m
            .entry("finalizers")
            .or_insert_with(|| Value::Array(Vec::new()));
        if !list.is_array() {
            *list = Value::Array(Vec::new());
        }
        let Some(a) = list.as_array_mut() else {
            return false;
        };
        let present = a.iter().any(|v| v.as_str() == Some(fin));
        match (add, present) {
            (true, false) => a.push(Value::String(fin.to_owned())),
            (false, true) => a.retain(|v| v.as_str() != Some(fin)),
            _ => return false,
        }
        true
    })
    .await
    .map_err(api_err(format!(
        "updating finalizer {fin} on {}",
        decide::describe(parent)
    )))
}

/// Step: add our finalizer when a finalize hook exists, remove it when none does.
async fn ensure_finalizer(
    pc: &ParentController,
    parent: Value,
    fin: &str,
) -> Result<Option<Value>, SyncError> {
    match decide::finalizer_before_hook(
        pc.finalize_hook.is_some(),
        is_deleting(&parent),
        has_finalizer(&parent, fin),
    ) {
        FinalizerAction::Keep => Ok(Some(parent)),
        FinalizerAction::Add => set_finalizer(pc, &parent, fin, true).await,
        FinalizerAction::Remove => set_finalizer(pc, &parent, fin, false).await,
    }
}

/// Step: observed children = owned matching children + adopted orphans; non-matching owned
/// children are released.
async fn claim_children(
    pc: &ParentController,
    parent: &Value,
    selector: &k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector,
) -> Result<Vec<Value>, SyncError> {
    let uid = meta_str(parent, "uid").to_owned();
    let ns = pc.parent.namespaced.then(|| meta_str(parent, "namespace"));
    let mut observed = Vec::new();
    let mut parent_checked = false;
    for key in &pc.child_keys {
        let Some(rule) = pc.children.get(key) else {
            continue;
        };
        let candidates = rule
            .informer
            .owned_by(&uid)
            .into_iter()
            .chain(rule.informer.orphans(ns))
            .filter(|c| ns.is_none_or(|n| n == meta_str(c, "namespace")))
            .map(|c| (*c).clone());
        let plan = decide::claim_children(parent, selector, candidates)?;
        observed.extend(plan.owned);
        if !plan.adopt.is_empty() && !parent_checked {
            if !parent_alive_uncached(pc, parent).await? {
                return Ok(observed);
            }
            parent_checked = true;
        }
        for orphan in plan.adopt {
            let api = kapi::api(
                &pc.ctx.client,
                &rule.resolved,
                meta_str(&orphan, "namespace"),
            );
            let adopted = kapi::atomic_update(
                &api,
                meta_str(&orphan, "name"),
                meta_str(&orphan, "uid"),
                false,
                |o| {
                    let still_orphan = decide::controller_ref(o).is_none();
                    let matches =
                        selector::matches(selector, &selector::labels_of(o)).unwrap_or(false);
                    if still_orphan && matches {
                        *o = decide::with_owner(o, parent);
                        true
                    } else {
                        false
                    }
                },
            )
            .await
            .map_err(api_err(format!("adopting {}", decide::describe(&orphan))))?;
            pc.ctx.config.metrics.child_op(&pc.name, "adopt");
            if let Some(a) = adopted
                && decide::controller_ref(&a)
                    .and_then(|r| r.get("uid"))
                    .and_then(Value::as_str)
                    == Some(&uid)
            {
                observed.push(a);
            }
        }
        for child in plan.release {
            let api = kapi::api(
                &pc.ctx.client,
                &rule.resolved,
                meta_str(&child, "namespace"),
            );
            kapi::atomic_update(
                &api,
                meta_str(&child, "name"),
                meta_str(&child, "uid"),
                false,
                |o| {
                    let ours = decide::controller_ref(o)
                        .and_then(|r| r.get("uid"))
                        .and_then(Value::as_str)
                        == Some(&uid);
                    let matches =
                        selector::matches(selector, &selector::labels_of(o)).unwrap_or(true);
                    if ours && !matches {
                        *o = decide::without_owner(o, &uid);
                        true
                    } else {
                        false
                    }
                },
            )
            .await
            .map_err(api_err(format!("releasing {}", decide::describe(&child))))?;
            pc.ctx.config.metrics.child_op(&pc.name, "release");
        }
    }
    Ok(observed)
}

/// Uncached GET: the parent still exists with the same UID and is not being deleted.
async fn parent_alive_uncached(pc: &ParentController, parent: &Value) -> Result<bool, SyncError> {
    let api = kapi::api(&pc.ctx.client, &pc.parent, meta_str(parent, "namespace"));
    let live = kapi::get(&api, meta_str(parent, "name"))
        .await
        .map_err(api_err(format!("re-reading {}", decide::describe(parent))))?;
    Ok(live.is_some_and(|l| meta_str(&l, "uid") == meta_str(parent, "uid") && !is_deleting(&l)))
}

/// Step: related objects chosen by the customize hook (cached per parent UID + generation).
async fn call_customize(
    pc: &Arc<ParentController>,
    parent: &Value,
) -> Result<Map<String, Value>, SyncError> {
    let Some(hook) = &pc.customize_hook else {
        return Ok(Map::new());
    };
    let uid = meta_str(parent, "uid").to_owned();
    let generation = parent
        .pointer("/metadata/generation")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    let ttl = pc.ctx.config.customize_cache_ttl;
    let cached = pc.customize_cache.lock().ok().and_then(|c| {
        c.get(&uid)
            .filter(|(g, _, at)| *g == generation && at.elapsed() < ttl)
            .map(|(_, r, _)| r.clone())
    });
    let rules = match cached {
        Some(r) => r,
        None => {
            let req = wire::customize_request(&pc.cc_json, parent);
            let rules = hook.customize(&cache_key(parent), &req).await?;
            if let Ok(mut c) = pc.customize_cache.lock() {
                c.insert(uid, (generation, rules.clone(), Instant::now()));
            }
            rules
        }
    };
    let version = hook_version(pc);
    let mut objects = Vec::new();
    let mut groups = Vec::new();
    for rule in &rules {
        let r = pc.ctx.resources.get(&rule.api_version, &rule.resource)?;
        groups.push(r.group_key());
        let inf = related_informer(pc, &r)?;
        let ns_labels = if rule.namespace_selector.is_some() {
            let nsr = pc.ctx.resources.get("v1", "namespaces")?;
            let nsi = related_informer(pc, &nsr)?;
            nsi.list()
                .iter()
                .map(|n| (meta_str(n, "name").to_owned(), selector::labels_of(n)))
                .collect()
        } else {
            HashMap::new()
        };
        let selected = select_related(
            rule,
            parent,
            pc.parent.namespaced,
            version,
            r.namespaced,
            &inf.list(),
            &ns_labels,
        )
        .map_err(SyncError::Related)?;
        objects.extend(selected);
    }
    Ok(wire::object_map(
        version,
        pc.parent.namespaced,
        &groups,
        objects.iter(),
    ))
}

fn hook_version(pc: &ParentController) -> HookVersion {
    pc.sync_hook.version()
}

/// The shared watch for a related resource; the first use subscribes this controller to its
/// changes. Fails with [`SyncError::RelatedNotSynced`] until the first list completed.
fn related_informer(pc: &Arc<ParentController>, r: &Resolved) -> Result<Arc<Informer>, SyncError> {
    let key = r.watch_key();
    let inf = {
        let mut map = pc
            .related
            .lock()
            .map_err(|_| SyncError::Related("related watch table poisoned".into()))?;
        if let Some(i) = map.get(&key) {
            i.clone()
        } else {
            let i = pc.ctx.informers.get(r);
            let mut rx = i.subscribe();
            let weak: Weak<ParentController> = Arc::downgrade(pc);
            let resolved = r.clone();
            tokio::spawn(async move {
                while rx.recv().await.is_ok() || !rx.is_empty() {
                    let Some(pc) = weak.upgrade() else { break };
                    pc.on_related_change(&resolved);
                }
            });
            map.insert(key.clone(), i.clone());
            i
        }
    };
    if inf.is_synced() {
        Ok(inf)
    } else {
        Err(SyncError::RelatedNotSynced(key))
    }
}

/// Applies one related-resource rule to the cached objects of its resource (Metacontroller's
/// rule combinations and namespace visibility for v1/v2).
pub fn select_related(
    rule: &RelatedResourceRule,
    parent: &Value,
    parent_namespaced: bool,
    version: HookVersion,
    related_namespaced: bool,
    candidates: &[Arc<Value>],
    namespace_labels: &HashMap<String, BTreeMap<String, String>>,
) -> Result<Vec<Value>, String> {
    let what = format!("relatedResources {}/{}", rule.api_version, rule.resource);
    let names = rule.names.as_deref().filter(|n| !n.is_empty());
    let ns_rule = rule.namespace.as_deref().filter(|n| !n.is_empty());
    if names.is_some() && (rule.label_selector.is_some() || rule.namespace_selector.is_some()) {
        return Err(format!(
            "{what}: names cannot be combined with labelSelector or namespaceSelector"
        ));
    }
    if ns_rule.is_some() && rule.namespace_selector.is_some() {
        return Err(format!(
            "{what}: namespace cannot be combined with namespaceSelector"
        ));
    }
    if rule.namespace_selector.is_some() && !related_namespaced {
        return Err(format!(
            "{what}: namespaceSelector needs a namespaced resource"
        ));
    }
    let parent_ns = meta_str(parent, "namespace");
    if parent_namespaced && version == HookVersion::V1 {
        if rule.namespace_selector.is_some() {
            return Err(format!(
                "{what}: namespaceSelector with a namespaced parent needs hook version v2"
            ));
        }
        if let Some(n) = ns_rule
            && n != parent_ns
        {
            return Err(format!(
                "{what}: a namespaced parent with hook v1 can only read namespace {parent_ns:?}, not {n:?}"
            ));
        }
        if !related_namespaced {
            return Ok(Vec::new());
        }
    }
    let ns_sel = match &rule.namespace_selector {
        Some(v) => {
            Some(selector::decode(v, "namespaceSelector").map_err(|e| format!("{what}: {e}"))?)
        }
        None => None,
    };
    let label_sel = match &rule.label_selector {
        Some(v) => Some(selector::decode(v, "labelSelector").map_err(|e| format!("{what}: {e}"))?),
        None => None,
    };
    let mut out = Vec::new();
    for obj in candidates {
        let ons = meta_str(obj, "namespace");
        let ns_ok = if !related_namespaced {
            true
        } else if let Some(n) = ns_rule {
            ons == n
        } else if let Some(sel) = &ns_sel {
            let empty = BTreeMap::new();
            selector::matches(sel, namespace_labels.get(ons).unwrap_or(&empty))
                .map_err(|e| format!("{what}: {e}"))?
        } else if parent_namespaced {
            ons == parent_ns
        } else {
            true
        };
        if !ns_ok {
            continue;
        }
        let ok = match (names, &label_sel) {
            (Some(n), _) => n.iter().any(|x| x == meta_str(obj, "name")),
            (None, Some(sel)) => selector::matches(sel, &selector::labels_of(obj))
                .map_err(|e| format!("{what}: {e}"))?,
            (None, None) => true,
        };
        if ok {
            out.push((**obj).clone());
        }
    }
    Ok(out)
}

fn cache_key(parent: &Value) -> String {
    format!(
        "{}/{}/{}",
        parent
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or_default(),
        meta_str(parent, "namespace"),
        meta_str(parent, "name")
    )
}

/// Step: call sync (or finalize) with the parent, observed children and related objects.
async fn call_hook(
    pc: &ParentController,
    parent: &Value,
    observed: &[Value],
    related: &Map<String, Value>,
    finalizing: bool,
) -> Result<SyncResponse, SyncError> {
    let hook = match (&pc.finalize_hook, finalizing) {
        (Some(f), true) => f,
        _ => &pc.sync_hook,
    };
    let children = wire::object_map(
        hook.version(),
        pc.parent.namespaced,
        &pc.child_keys,
        observed.iter(),
    );
    let request = wire::sync_request(&pc.cc_json, parent, children, related.clone(), finalizing);
    Ok(hook.sync(&cache_key(parent), &request).await?)
}

/// Step: create, update and delete children per the plan; Conflict/NotFound/AlreadyExists are
/// left to the next sync, other failures are collected and reported together.
async fn manage_children(
    pc: &ParentController,
    parent: &Value,
    observed: &[Value],
    desired: &BTreeMap<String, Value>,
) -> Result<(), SyncError> {
    let ops = decide::plan_children(
        parent,
        observed,
        desired,
        |gk| pc.children.get(gk).map(|r| r.method).unwrap_or_default(),
        |gk| {
            pc.children
                .get(gk)
                .map(|r| r.options.clone())
                .unwrap_or_default()
        },
    )?;
    let mut errors = Vec::new();
    let mut ignored = Vec::new();
    for op in ops {
        let obj = match &op {
            ChildOp::Create(o) | ChildOp::Update(o) | ChildOp::Delete { object: o, .. } => o,
        };
        let gk = decide::child_key(obj)
            .split(' ')
            .next()
            .unwrap_or_default()
            .to_owned();
        let Some(rule) = pc.children.get(&gk) else {
            errors.push(format!("{}: undeclared type {gk}", decide::describe(obj)));
            continue;
        };
        let api = kapi::api(&pc.ctx.client, &rule.resolved, meta_str(obj, "namespace"));
        let (verb, op_label, res) = match &op {
            ChildOp::Create(o) => (
                "creating",
                "create",
                kapi::create(&api, o).await.map(|_| ()),
            ),
            ChildOp::Update(o)
                if pc
                    .futile_updates
                    .lock()
                    .is_ok_and(|f| f.is_futile(o, std::time::Instant::now())) =>
            {
                tracing::debug!(child = %decide::describe(o), "update skipped: the API server ignored the same update of this child version");
                pc.ctx.config.metrics.child_op(&pc.name, "skip");
                continue;
            }
            ChildOp::Update(o) => (
                "updating",
                "update",
                kapi::replace(&api, o).await.map(|stored| {
                    let ignored_paths = decide::ignored_by_server(o, &stored);
                    if let Ok(mut futile) = pc.futile_updates.lock() {
                        match &ignored_paths {
                            Some(_) => futile.record(o, std::time::Instant::now()),
                            None => futile.forget(o),
                        }
                    }
                    if let Some(paths) = ignored_paths.filter(|p| !p.is_empty()) {
                        ignored.push((decide::describe(o), paths));
                    }
                }),
            ),
            ChildOp::Delete { object, .. } => {
                ("deleting", "delete", kapi::delete(&api, object).await)
            }
        };
        match res {
            Ok(()) => {
                pc.ctx.config.metrics.child_op(&pc.name, op_label);
                tracing::info!(controller = %pc.name, child = %decide::describe(obj), "{verb} child")
            }
            Err(e) if kapi::is_conflict(&e) || kapi::is_not_found(&e) => {
                tracing::debug!(controller = %pc.name, child = %decide::describe(obj), error = %e, "{verb} child: left to the next sync");
            }
            Err(e) => errors.push(format!("{verb} {}: {e}", decide::describe(obj))),
        }
    }
    for (child, paths) in ignored {
        report_ignored_fields(pc, parent, &child, &paths).await;
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(SyncError::Children(errors))
    }
}

/// A child update the API server answered without writing: the fields it dropped or overrode
/// would come back on every sync (the update is remembered and not repeated). Says so in a Warning event on the parent (rate-limited per parent)
/// and in the log, naming the fields.
async fn report_ignored_fields(
    pc: &ParentController,
    parent: &Value,
    child: &str,
    paths: &[String],
) {
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
    pc.ctx.event(parent, true, "ChildFieldsIgnored", note).await;
}

/// Step: write the hook's status plus `observedGeneration` to `/status`, only when it differs.
async fn update_status(
    pc: &ParentController,
    parent: &Value,
    status: Option<&Value>,
) -> Result<(), SyncError> {
    let generation = parent
        .pointer("/metadata/generation")
        .and_then(Value::as_i64);
    let want = decide::desired_status(status, generation);
    if !decide::status_changed(parent, &want) {
        return Ok(());
    }
    let api = kapi::api(&pc.ctx.client, &pc.parent, meta_str(parent, "namespace"));
    let mut next = parent.clone();
    if let Some(m) = next.as_object_mut() {
        m.insert("status".into(), want.clone());
    }
    let action = || format!("updating status of {}", decide::describe(parent));
    match kapi::replace_status(&api, &next).await {
        Ok(_) => Ok(()),
        Err(e) if kapi::is_not_found(&e) => Ok(()),
        Err(e) if kapi::is_conflict(&e) => kapi::atomic_update(
            &api,
            meta_str(parent, "name"),
            meta_str(parent, "uid"),
            true,
            |live| {
                if !decide::status_changed(live, &want) {
                    return false;
                }
                if let Some(m) = live.as_object_mut() {
                    m.insert("status".into(), want.clone());
                }
                true
            },
        )
        .await
        .map(|_| ())
        .map_err(api_err(action())),
        Err(e) => Err(api_err(action())(e)),
    }
}

/// After a failed sync: a `Synced=False` condition on the parent's status (only when it
/// differs from what is there; UID-guarded, resourceVersion-checked).
pub async fn report_failure(
    pc: &ParentController,
    parent: &Value,
    message: &str,
) -> Result<(), SyncError> {
    let api = kapi::api(&pc.ctx.client, &pc.parent, meta_str(parent, "namespace"));
    let now = jiff::Timestamp::now()
        .round(jiff::Unit::Second)
        .unwrap_or_else(|_| jiff::Timestamp::now())
        .to_string();
    kapi::atomic_update(
        &api,
        meta_str(parent, "name"),
        meta_str(parent, "uid"),
        true,
        |live| match decide::with_sync_failure(live, message, &now) {
            Some(next) => {
                *live = next;
                true
            }
            None => false,
        },
    )
    .await
    .map(|_| ())
    .map_err(api_err(format!(
        "reporting failure on {}",
        decide::describe(parent)
    )))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cm(ns: &str, name: &str, labels: Value) -> Arc<Value> {
        Arc::new(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"namespace": ns, "name": name, "labels": labels}}))
    }

    fn rule(v: Value) -> RelatedResourceRule {
        let mut base = json!({"apiVersion": "v1", "resource": "configmaps"});
        base.as_object_mut()
            .unwrap()
            .extend(v.as_object().unwrap().clone());
        serde_json::from_value(base).unwrap()
    }

    fn names(v: &[Value]) -> Vec<String> {
        v.iter()
            .map(|o| format!("{}/{}", meta_str(o, "namespace"), meta_str(o, "name")))
            .collect()
    }

    #[test]
    fn related_selection_by_labels_names_and_namespace() {
        let parent = json!({"metadata": {"namespace": "a", "name": "p"}});
        let objs = [
            cm("a", "x", json!({"k": "1"})),
            cm("a", "y", json!({})),
            cm("b", "z", json!({"k": "1"})),
        ];
        let none = HashMap::new();
        let r = rule(json!({"labelSelector": {"matchLabels": {"k": "1"}}}));
        let got = select_related(&r, &parent, true, HookVersion::V1, true, &objs, &none).unwrap();
        assert_eq!(names(&got), ["a/x"]);
        let r = rule(json!({"names": ["y", "z"]}));
        let got = select_related(&r, &parent, true, HookVersion::V1, true, &objs, &none).unwrap();
        assert_eq!(names(&got), ["a/y"]);
        // v2 may read other namespaces
        let r = rule(json!({"namespace": "b", "names": ["z"]}));
        assert!(select_related(&r, &parent, true, HookVersion::V1, true, &objs, &none).is_err());
        let got = select_related(&r, &parent, true, HookVersion::V2, true, &objs, &none).unwrap();
        assert_eq!(names(&got), ["b/z"]);
        // cluster-scoped parent sees every namespace
        let got = select_related(
            &rule(json!({"labelSelector": {"matchLabels": {"k": "1"}}})),
            &json!({"metadata": {"name": "c"}}),
            false,
            HookVersion::V1,
            true,
            &objs,
            &none,
        )
        .unwrap();
        assert_eq!(names(&got), ["a/x", "b/z"]);
    }

    #[test]
    fn related_namespace_selector_and_invalid_combinations() {
        let parent = json!({"metadata": {"namespace": "a", "name": "p"}});
        let objs = [cm("a", "x", json!({})), cm("b", "z", json!({}))];
        let ns = HashMap::from([(
            "b".to_owned(),
            BTreeMap::from([("team".to_owned(), "t".to_owned())]),
        )]);
        let r = rule(json!({"namespaceSelector": {"matchLabels": {"team": "t"}}}));
        assert!(
            select_related(&r, &parent, true, HookVersion::V1, true, &objs, &ns)
                .unwrap_err()
                .contains("needs hook version v2")
        );
        let got = select_related(&r, &parent, true, HookVersion::V2, true, &objs, &ns).unwrap();
        assert_eq!(names(&got), ["b/z"]);
        let bad = rule(json!({"names": ["x"], "labelSelector": {}}));
        assert!(select_related(&bad, &parent, true, HookVersion::V2, true, &objs, &ns).is_err());
        let bad = rule(json!({"namespace": "a", "namespaceSelector": {}}));
        assert!(select_related(&bad, &parent, true, HookVersion::V2, true, &objs, &ns).is_err());
    }
}
