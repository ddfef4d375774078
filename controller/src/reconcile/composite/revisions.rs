//! Rolling updates, the executor (Metacontroller's `syncRevisions`): claim the parent's
//! ControllerRevisions, materialise the parent of each revision, call the sync hook once per
//! revision, let [`rollout::roll`] move at most one child, persist the revisions (before any
//! child is touched, and wait until the watch shows the writes, so the next sync reads them) and
//! combine the answers into one hook response for the rest of the sync.

use std::borrow::Borrow;
use std::collections::{BTreeMap, HashMap};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde::Serialize;
use serde_json::{Map, Value, json};

use super::build::{CompositeState, Revisions};
use super::related::cache_key;
use super::steps::{call_hook, parent_alive_uncached};
use crate::api::{ControllerRevision, ControllerRevisionChildren};
use crate::hook::wire::SyncResponse;
use crate::object::{ObjectView, controller_ref, describe, is_deleting, meta_str};
use crate::reconcile::core::{SyncError, api_err};
use crate::reconcile::decide::{self, owner_reference};
use crate::reconcile::last_applied;
use crate::reconcile::rollout::{self, ChildId, RolloutError, RolloutView};
use crate::runtime::kapi;
use crate::runtime::selector;

/// One revision of the parent: its stored ControllerRevision (none yet for a new latest one),
/// the parent as of that revision and the children it claims.
struct ParentRevision {
    name: String,
    parent: Value,
    patch: Value,
    stored: Option<Value>,
    children: Vec<ControllerRevisionChildren>,
}

/// What a rolling sync hands the rest of the sync: the combined hook response (desired children
/// already validated).
pub(super) async fn sync_revisions<O: Borrow<Value> + ObjectView + Serialize + Sync>(
    c: &CompositeState,
    rev: &Revisions,
    parent: &Value,
    selector: &LabelSelector,
    observed: &[O],
    related: &Map<String, Value>,
    finalizing: bool,
) -> Result<SyncResponse, SyncError> {
    rollout::revision_namespace(parent, c.parent.namespaced)?;
    let stored = claim_revisions(c, rev, parent, selector).await?;
    let revisions = parent_revisions(c, parent, &stored)?;
    let responses = call_hooks(c, &revisions, observed, related, finalizing).await?;
    let generate = c.generate_selector();
    let mut desired = Vec::with_capacity(responses.len());
    for (r, response) in revisions.iter().zip(&responses) {
        desired.push(decide::validate_desired(
            &r.parent,
            c.parent.namespaced,
            &c.declared,
            selector,
            generate,
            response.children.clone(),
        )?);
    }
    let mut claims: Vec<_> = revisions.iter().map(|r| r.children.clone()).collect();
    let step = roll(c, rev, observed, &responses, &desired, &mut claims);
    let keep = rollout::keep_revisions(&claims);
    persist(c, rev, parent, &revisions, &claims, &keep).await?;
    combine(&revisions, responses, desired, &claims, &keep, &step)
}

/// The rollout step over the latest revision's answer.
fn roll<O: Borrow<Value>>(
    c: &CompositeState,
    rev: &Revisions,
    observed: &[O],
    responses: &[SyncResponse],
    desired: &[BTreeMap<String, Value>],
    claims: &mut [Vec<ControllerRevisionChildren>],
) -> rollout::Step {
    let observed: HashMap<ChildId, Value> = observed
        .iter()
        .map(|o| (ChildId::of(o.borrow()), o.borrow().clone()))
        .collect();
    let latest_order: Vec<ChildId> = responses
        .first()
        .map(|r| r.children.iter().map(ChildId::of).collect())
        .unwrap_or_default();
    let latest_desired: HashMap<ChildId, Value> = desired
        .first()
        .map(|d| d.values().map(|v| (ChildId::of(v), v.clone())).collect())
        .unwrap_or_default();
    rollout::roll(
        claims,
        RolloutView {
            rules: &rev.rules,
            observed: &observed,
            latest_order: &latest_order,
            latest_desired: &latest_desired,
            last_applied: &|obs, opts| last_applied::for_update(&c.memory.last_applied, obs, opts),
        },
    )
}

/// One response for the rest of the sync: the latest revision's status with the `Updated`
/// condition, the combined desired children, the smallest positive resync, finalized when every
/// revision says so, the events of every revision's answer.
fn combine(
    revisions: &[ParentRevision],
    responses: Vec<SyncResponse>,
    desired: Vec<BTreeMap<String, Value>>,
    claims: &[Vec<ControllerRevisionChildren>],
    keep: &[bool],
    step: &rollout::Step,
) -> Result<SyncResponse, SyncError> {
    let latest_name = revisions.first().map_or("", |r| r.name.as_str());
    let resync = rollout::combined_resync(responses.iter().map(|r| r.resync_after_seconds));
    let finalized = responses.iter().all(|r| r.finalized);
    let events = responses.iter().flat_map(|r| r.events.clone()).collect();
    let latest_status = responses.into_iter().next().and_then(|r| r.status);
    let condition = rollout::updated_condition(step, latest_name);
    let status = rollout::with_condition(latest_status.as_ref(), condition)?;
    let mut desired = desired.into_iter();
    let latest = desired.next().unwrap_or_default();
    let older_desired: Vec<BTreeMap<String, Value>> = desired.collect();
    let older: Vec<(&[ControllerRevisionChildren], &BTreeMap<String, Value>)> = claims
        .iter()
        .zip(keep)
        .skip(1)
        .zip(&older_desired)
        .filter(|((_, kept), _)| **kept)
        .map(|((c, _), d)| (c.as_slice(), d))
        .collect();
    let children = rollout::combine_desired(latest, &older);
    Ok(SyncResponse {
        status: Some(status),
        children: children.into_values().collect(),
        resync_after_seconds: resync,
        finalized,
        events,
    })
}

/// The labels that keep revisions of different parent types apart.
fn type_labels(c: &CompositeState) -> [(&'static str, &str); 2] {
    [
        (rollout::LABEL_API_GROUP, c.parent.api.group.as_str()),
        (rollout::LABEL_RESOURCE, c.parent.api.plural.as_str()),
    ]
}

fn has_type_labels(c: &CompositeState, revision: &Value) -> bool {
    type_labels(c).iter().all(|(k, v)| {
        revision
            .pointer(&format!("/metadata/labels/{}", k.replace('/', "~1")))
            .and_then(Value::as_str)
            == Some(*v)
    })
}

/// Step: the parent's ControllerRevisions: those it controls (with this parent type's labels)
/// plus orphans in its namespace matching its selector and those labels, adopted. Unlike
/// Metacontroller, a controlled revision is never released for a selector mismatch (its
/// labels come from `spec.template`, which need not match `spec.selector`).
async fn claim_revisions(
    c: &CompositeState,
    rev: &Revisions,
    parent: &Value,
    selector: &LabelSelector,
) -> Result<Vec<Value>, SyncError> {
    let uid = meta_str(parent, "uid");
    let ns = meta_str(parent, "namespace");
    let mut claimed: Vec<Value> = rev
        .informer
        .owned_by(uid)
        .into_iter()
        .filter(|r| meta_str(r, "namespace") == ns && has_type_labels(c, r))
        .map(|r| (*r).clone())
        .collect();
    let orphans: Vec<Value> = rev
        .informer
        .orphans(Some(ns))
        .into_iter()
        .filter(|r| has_type_labels(c, r) && !is_deleting(r))
        .filter(|r| selector::matches(selector, &selector::labels_of(r)).unwrap_or(false))
        .map(|r| (*r).clone())
        .collect();
    if orphans.is_empty() || is_deleting(parent) || !parent_alive_uncached(c, parent).await? {
        return Ok(claimed);
    }
    for orphan in orphans {
        let api = kapi::api(&c.ctx.client, &rev.resolved, ns);
        let adopted = kapi::atomic_update(
            &api,
            meta_str(&orphan, "name"),
            meta_str(&orphan, "uid"),
            false,
            |o| {
                let ok = controller_ref(o).is_none()
                    && has_type_labels(c, o)
                    && selector::matches(selector, &selector::labels_of(o)).unwrap_or(false);
                if ok {
                    *o = decide::with_owner(o, parent);
                }
                ok
            },
        )
        .await
        .map_err(api_err(format!("adopting {}", describe(&orphan))))?;
        if let Some(written) = adopted.written() {
            claimed.push(written.clone());
        }
    }
    Ok(claimed)
}

fn field_paths(c: &CompositeState) -> Vec<String> {
    c.cc.spec
        .parent_resource
        .revision_history
        .as_ref()
        .and_then(|h| h.field_paths.clone())
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| {
            rollout::DEFAULT_FIELD_PATHS
                .iter()
                .map(|p| (*p).to_owned())
                .collect()
        })
}

/// The parent's revisions, the latest first (stored, or new), then every other stored revision
/// with its parent patch written over the current parent.
fn parent_revisions(
    c: &CompositeState,
    parent: &Value,
    stored: &[Value],
) -> Result<Vec<ParentRevision>, SyncError> {
    let paths = field_paths(c);
    let latest_patch = rollout::make_patch(parent, &paths)?;
    let latest_name = rollout::revision_name(
        &c.parent.api.plural,
        &c.parent.api.group,
        meta_str(parent, "uid"),
        &latest_patch,
    );
    let mut latest = ParentRevision {
        name: latest_name,
        parent: parent.clone(),
        patch: latest_patch,
        stored: None,
        children: Vec::new(),
    };
    let mut older = Vec::new();
    for value in stored {
        let name = meta_str(value, "name").to_owned();
        let r: ControllerRevision =
            serde_json::from_value(value.clone()).map_err(|e| RolloutError::Revision {
                name: name.clone(),
                message: e.to_string(),
            })?;
        if latest.stored.is_none() && dynapply::json_eq(&r.parent_patch, &latest.patch) {
            latest.name = name;
            latest.stored = Some(value.clone());
            latest.children = r.children;
            continue;
        }
        older.push(ParentRevision {
            parent: rollout::apply_patch(parent, &r.parent_patch, &paths, &name)?,
            name,
            patch: r.parent_patch,
            stored: Some(value.clone()),
            children: r.children,
        });
    }
    older.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(std::iter::once(latest).chain(older).collect())
}

/// The sync (or finalize) hook, once per revision, concurrently; any failure fails the sync.
async fn call_hooks<O: ObjectView + Serialize + Sync>(
    c: &CompositeState,
    revisions: &[ParentRevision],
    observed: &[O],
    related: &Map<String, Value>,
    finalizing: bool,
) -> Result<Vec<SyncResponse>, SyncError> {
    let calls = revisions.iter().enumerate().map(|(i, r)| {
        // an older revision's answer is cached apart from the latest's
        let key = match i {
            0 => cache_key(&r.parent),
            _ => format!("{}@{}", cache_key(&r.parent), r.name),
        };
        async move { call_hook(c, &r.parent, observed, related, finalizing, &key).await }
    });
    futures::future::try_join_all(calls).await
}

/// A write of this sync that the revision watch must show before the sync goes on.
enum Seen {
    /// Present, at another resourceVersion than before the write (`None`: created).
    Written(Option<String>),
    /// Deleted (gone, or replaced by an object with another UID).
    Gone(String),
}

/// Step: revision writes, before any child is touched (Metacontroller's order: deletes of
/// revisions that claim no child, then updates and creates); every write is UID-guarded or
/// resourceVersion-checked. Returns once the watch shows every write.
async fn persist(
    c: &CompositeState,
    rev: &Revisions,
    parent: &Value,
    revisions: &[ParentRevision],
    claims: &[Vec<ControllerRevisionChildren>],
    keep: &[bool],
) -> Result<(), SyncError> {
    let ns = meta_str(parent, "namespace");
    let api = kapi::api(&c.ctx.client, &rev.resolved, ns);
    let changes = rev.informer.subscribe();
    let mut expect: Vec<(String, Seen)> = Vec::new();
    for (r, _) in revisions.iter().zip(keep).filter(|(_, kept)| !**kept) {
        let Some(stored) = &r.stored else { continue };
        match kapi::delete(&api, stored).await {
            Ok(()) => {}
            Err(e) if kapi::is_not_found(&e) => {}
            Err(e) => return Err(api_err(format!("deleting {}", describe(stored)))(e)),
        }
        tracing::info!(revision = %r.name, "deleted ControllerRevision");
        let uid = meta_str(stored, "uid").to_owned();
        expect.push((r.name.clone(), Seen::Gone(uid)));
    }
    for ((r, _), claims) in revisions
        .iter()
        .zip(keep)
        .zip(claims)
        .filter(|((_, k), _)| **k)
    {
        let (written, before) = match &r.stored {
            Some(_) if r.children == *claims => continue,
            Some(stored) => {
                let mut next = stored.clone();
                next["children"] = json!(claims);
                let action = format!("updating {}", describe(stored));
                let w = kapi::replace(&api, &next).await.map_err(api_err(action))?;
                (w, Some(meta_str(stored, "resourceVersion").to_owned()))
            }
            None => {
                let new = new_revision(c, parent, r, claims);
                let action = format!("creating ControllerRevision {}", r.name);
                (
                    kapi::create(&api, &new).await.map_err(api_err(action))?,
                    None,
                )
            }
        };
        tracing::info!(revision = %r.name, version = %meta_str(&written, "resourceVersion"), "wrote ControllerRevision");
        expect.push((r.name.clone(), Seen::Written(before)));
    }
    wait_seen(c, rev, ns, &expect, changes).await
}

/// A new ControllerRevision for `r`, controlled by the parent, labelled as Metacontroller does.
fn new_revision(
    c: &CompositeState,
    parent: &Value,
    r: &ParentRevision,
    claims: &[ControllerRevisionChildren],
) -> Value {
    let generate = c.generate_selector();
    let labels =
        rollout::revision_labels(parent, generate, &c.parent.api.group, &c.parent.api.plural);
    json!({
        "apiVersion": "metacontroller.k8s.io/v1alpha1",
        "kind": "ControllerRevision",
        "metadata": {
            "name": r.name,
            "namespace": meta_str(parent, "namespace"),
            "labels": labels,
            "ownerReferences": [owner_reference(parent)],
        },
        "parentPatch": r.patch,
        "children": claims,
    })
}

/// Waits until the revision watch shows every write of this sync, so the next sync of the
/// parent reads the claims just written, never older ones (which would hand a moved child back
/// to its old revision). Not within `watch_sync_deadline`: a quiet retry (the writes are made;
/// no child was touched).
async fn wait_seen(
    c: &CompositeState,
    rev: &Revisions,
    ns: &str,
    expect: &[(String, Seen)],
    mut changes: tokio::sync::broadcast::Receiver<crate::runtime::cache::Change>,
) -> Result<(), SyncError> {
    let until = tokio::time::Instant::now() + c.ctx.config.watch_sync_deadline;
    loop {
        let all_seen = expect.iter().all(|(name, seen)| {
            let cached = rev.informer.get(ns, name);
            match seen {
                Seen::Written(before) => cached
                    .is_some_and(|o| before.as_deref() != Some(meta_str(&o, "resourceVersion"))),
                Seen::Gone(uid) => cached.is_none_or(|o| meta_str(&o, "uid") != uid),
            }
        });
        if all_seen {
            return Ok(());
        }
        match tokio::time::timeout_at(until, changes.recv()).await {
            Ok(Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_))) => {}
            Ok(Err(_)) | Err(_) => {
                return Err(SyncError::WatchNotSynced(format!(
                    "{} (this sync's ControllerRevision writes not seen yet)",
                    rev.informer.watch_key()
                )));
            }
        }
    }
}
