//! The offline sync `kmeta render` (one parent) and `kmeta plan` (every parent) share: the
//! controller's declared child types and its hook client, built once, and for each parent what a
//! sync would write, decided by the functions a sync uses — the desired children validated, the
//! child plan, the write gates of the drift policies, the server-side apply body, the status with
//! kmeta's child conditions and sync record. Nothing here writes.

use std::collections::{BTreeMap, HashMap};

use serde_json::Value;
use serde_json::value::RawValue;

use super::files::{child_options, child_type};
use super::{RenderError, Rendered, Write};
use crate::api::{CompositeController, DriftPolicy};
use crate::hook::trace::{TraceId, in_trace};
use crate::hook::{HookClient, HookOptions, wire};
use crate::object::meta_str;
use crate::ops::metrics::HookKind;
use crate::reconcile::apply::{self, ChildReport};
use crate::reconcile::composite::decide as cdecide;
use crate::reconcile::decide::{self, ChildAction, ChildOp, ChildRecord, ChildType, SyncRecord};

/// The declared child types, as a sync resolves them (kind, scope, update method, list rules,
/// drift policy), by group key (`Kind.group`).
#[derive(Default)]
struct Declared {
    types: HashMap<String, ChildType>,
    keys: Vec<String>,
    options: HashMap<String, dynapply::Options>,
    drift: HashMap<String, DriftPolicy>,
}

/// How the engine reaches the hook: the URL replacing the hook's own, the client the hook
/// client reads through (a Jsonnet hook's ConfigMap, a webhook's Secrets), the Jsonnet worker,
/// and whether the finalize hook is called.
pub(crate) struct HookSetup {
    /// Call this URL instead of the hook's (`webhook.url` or its Service).
    pub hook_url: Option<String>,
    /// What the hook client reads through.
    pub client: kube::Client,
    /// The Jsonnet worker process; `None`: this executable (`kmeta jsonnet-worker`).
    pub jsonnet_worker: Option<crate::hook::jsonnet::WorkerCommand>,
    /// Call the finalize hook (`finalizing: true`).
    pub finalizing: bool,
}

/// One controller's offline sync: built once, used for any number of parents.
pub(crate) struct Engine {
    cc: CompositeController,
    cc_json: Value,
    cc_raw: Box<RawValue>,
    declared: Declared,
    hook: HookClient,
    customize: Option<HookClient>,
    ssa: bool,
    finalizing: bool,
}

impl Engine {
    /// The engine of `cc`: custom child kinds from `crds` (or, failing those, from an object of
    /// that kind in `seen`), the hook as `setup` says.
    pub(crate) async fn new(
        cc: CompositeController,
        crds: &[Value],
        seen: &[Value],
        setup: HookSetup,
    ) -> Result<Engine, RenderError> {
        let declared = declare_children(&cc, crds, seen)?;
        let hook = hook_client(&cc, &setup, HookKind::Sync).await?;
        let customize = match cc.spec.customize_hook() {
            Some(_) => Some(hook_client(&cc, &setup, HookKind::Customize).await?),
            None => None,
        };
        let cc_json = wire::controller_object(serde_json::to_value(&cc).unwrap_or(Value::Null));
        let cc_raw = serde_json::value::to_raw_value(&cc_json)
            .map_err(|e| RenderError::Controller(e.to_string()))?;
        let ssa = apply::strategy_for(cc.metadata.annotations.as_ref(), Default::default())
            .is_ok_and(|s| s == crate::reconcile::ApplyStrategy::ServerSideApply);
        Ok(Engine {
            cc,
            cc_json,
            cc_raw,
            declared,
            hook,
            customize,
            ssa,
            finalizing: setup.finalizing,
        })
    }

    /// The controller.
    pub(crate) fn controller(&self) -> &CompositeController {
        &self.cc
    }

    /// Calls the hook for `parent` as a sync does — the same request types and object maps, a
    /// trace of its own (`traceparent`), the answer decoded as a sync decodes it.
    pub(crate) async fn call(
        &self,
        parent: &Value,
        observed: &Observed,
        related: &Related,
    ) -> Result<wire::SyncResponse, RenderError> {
        let observed = observed.objects.as_slice();
        let namespaced = parent.pointer("/metadata/namespace").is_some();
        let version = self.hook.version();
        // keyed as a sync keys them (`reconcile::related`), with the groups the rules declared
        let related =
            wire::object_map(version, namespaced, &related.groups, related.objects.iter());
        let request = wire::SyncRequestRef {
            controller: &self.cc_raw,
            parent,
            children: wire::object_map_ref(version, namespaced, &self.declared.keys, observed),
            related: &related,
            finalizing: self.finalizing,
        };
        let sync = |e: crate::hook::HookError| RenderError::Sync(e.to_string());
        let key = meta_str(parent, "uid");
        let body = in_trace(TraceId::new(), self.hook.call(key, &request))
            .await
            .map_err(sync)?;
        self.hook.decode_sync(&body).map_err(sync)
    }

    /// The related objects a sync of `parent` sends its hook: the customize hook called as a
    /// sync calls it, each rule applied as a sync applies it (Metacontroller's scopes for v1 and
    /// v2) to the objects `lists` reads. None without a customize hook.
    pub(crate) async fn related(
        &self,
        parent: &Value,
        lists: &RelatedLists,
    ) -> Result<Related, RenderError> {
        let Some(hook) = &self.customize else {
            return Ok(Related::default());
        };
        let sync = |e: crate::hook::HookError| RenderError::Sync(e.to_string());
        let request = wire::customize_request(&self.cc_json, parent);
        let key = meta_str(parent, "uid");
        let rules = in_trace(TraceId::new(), hook.customize(key, &request))
            .await
            .map_err(sync)?;
        let namespaced = parent.pointer("/metadata/namespace").is_some();
        let mut out = Related::default();
        for rule in &rules {
            let listed = lists.list(&rule.api_version, &rule.resource).await?;
            out.groups
                .push(wire::group_key(&rule.api_version, &listed.kind));
            let ns_labels = match rule.namespace_selector {
                Some(_) => lists.namespace_labels().await?,
                None => HashMap::new(),
            };
            let selected = crate::reconcile::related::select_related(
                rule,
                parent,
                namespaced,
                hook.version(),
                listed.namespaced,
                &listed.objects,
                &ns_labels,
            )
            .map_err(|e| RenderError::Sync(e.to_string()))?;
            out.objects.extend(selected);
        }
        Ok(out)
    }

    /// What a sync of `parent` would write, given its `observed` children and the hook's
    /// `response` (see the module docs).
    pub(crate) fn plan(
        &self,
        parent: Value,
        observed: Observed,
        response: wire::SyncResponse,
    ) -> Result<Rendered, RenderError> {
        let sync = |e: decide::DecideError| RenderError::Sync(e.to_string());
        let generate = self.cc.spec.generate_selector.unwrap_or(false);
        let selector = cdecide::parent_selector(&parent, generate).map_err(sync)?;
        let placing = decide::Placing {
            parent_namespaced: parent.pointer("/metadata/namespace").is_some(),
            ownership: cdecide::child_ownership(&self.cc),
        };
        let desired = decide::validate_desired_owned(
            &parent,
            placing,
            &self.declared.types,
            &selector,
            generate,
            response.children,
        )
        .map_err(sync)?;
        let gated = self.child_writes(&parent, &observed, &desired)?;
        let observed = observed.objects;
        let status = self.status(&parent, response.status, &gated);
        let written: std::collections::HashSet<String> = gated
            .writes
            .iter()
            .map(Write::child_key)
            .chain(gated.left_alone.iter().map(|l| l.child.clone()))
            .collect();
        let unchanged = observed
            .iter()
            .map(decide::child_key)
            .filter(|k| !written.contains(k))
            .collect();
        Ok(Rendered {
            parent,
            observed,
            status,
            desired: desired.into_values().collect(),
            writes: gated.writes,
            left_alone: gated.left_alone,
            unchanged,
            events: response.events,
        })
    }

    /// Step: the child writes a sync would send, deletes first, each passed through its drift
    /// policy's gate as the child executor passes it.
    fn child_writes(
        &self,
        parent: &Value,
        observed: &Observed,
        desired: &BTreeMap<String, Value>,
    ) -> Result<Gated, RenderError> {
        let ops = self.planned_ops(parent, observed, desired)?;
        let by_key: HashMap<String, &Value> = observed
            .objects
            .iter()
            .map(|o| (decide::child_key(o), o))
            .collect();
        let mut gated = Gated::default();
        let planned: std::collections::HashSet<String> = ops
            .iter()
            .map(|op| decide::child_key(op_object(op)))
            .collect();
        for op in ops {
            let key = decide::child_key(op_object(&op));
            let pair = (by_key.get(&key).copied(), desired.get(&key));
            self.gate_one(parent, op, pair, &mut gated)?;
        }
        gated
            .left_alone
            .extend(self.left_to_others(&by_key, desired, &planned));
        for left in &gated.left_alone {
            let why = left.why.clone();
            let entry = ChildRecord::of(parent, &left.object, ChildAction::LeftAlone { why });
            gated.records.push(entry);
        }
        Ok(gated)
    }

    /// Children the plan leaves as they are although they differ from the answer, at fields
    /// their type's field rules leave to others only (as the child executor records them).
    fn left_to_others(
        &self,
        by_key: &HashMap<String, &Value>,
        desired: &BTreeMap<String, Value>,
        planned: &std::collections::HashSet<String>,
    ) -> Vec<LeftAlone> {
        let mut out = Vec::new();
        for (key, want) in desired {
            let gk = key.split(' ').next().unwrap_or_default();
            let (Some(live), Some(opts)) = (by_key.get(key), self.declared.options.get(gk)) else {
                continue;
            };
            if planned.contains(key) || opts.fields.is_empty() {
                continue;
            }
            let names = dynapply::left_alone(&opts.fields, live, want);
            if !names.is_empty() {
                out.push(LeftAlone {
                    child: key.clone(),
                    why: format!("field rules: {}", names.join(", ")),
                    object: (*live).clone(),
                });
            }
        }
        out
    }

    /// The child operations a sync plans, deletes first: the last-applied state read as the
    /// child executor reads it (the annotation when recorded, else kmeta's field manager's
    /// entries).
    fn planned_ops(
        &self,
        parent: &Value,
        observed: &Observed,
        desired: &BTreeMap<String, Value>,
    ) -> Result<Vec<ChildOp>, RenderError> {
        let fallback = dynapply::Options::default();
        let options = |k: &str| self.declared.options.get(k).unwrap_or(&fallback);
        let manager = self.field_manager(parent);
        let known = |obs: &Value, opts: &dynapply::Options| {
            let key = decide::child_key(obs);
            let entries = observed.owned.get(&key).filter(|_| !opts.record)?;
            let value = decide::applied_configuration(obs, entries, &manager)?;
            Some(decide::KnownLast {
                value: std::sync::Arc::new(value),
                recorded: false,
            })
        };
        let types = &self.declared.types;
        let method = |k: &str| types.get(k).map(|t| t.method).unwrap_or_default();
        let ops = decide::plan_children(parent, &observed.objects, desired, method, options, known)
            .map_err(|e| RenderError::Sync(e.to_string()))?;
        let (first, then) = decide::write_phases(ops);
        Ok(first.into_iter().chain(then).collect())
    }

    /// One planned operation through its gate: held back (left alone, with its report) or
    /// written (with its record entry; an update under server-side apply as its apply).
    fn gate_one(
        &self,
        parent: &Value,
        op: ChildOp,
        (live, want): (Option<&Value>, Option<&Value>),
        gated: &mut Gated,
    ) -> Result<(), RenderError> {
        let key = decide::child_key(op_object(&op));
        let group_kind = key.split(' ').next().unwrap_or_default();
        let drift = self
            .declared
            .drift
            .get(group_kind)
            .copied()
            .unwrap_or_default();
        let fallback = dynapply::Options::default();
        let options = self.declared.options.get(group_kind).unwrap_or(&fallback);
        if let Some((why, report)) = gate(&op, drift, self.ssa, (live, want), options) {
            let object = op_object(&op).clone();
            gated.left_alone.push(LeftAlone {
                child: key,
                why,
                object,
            });
            gated.reports.extend(report);
            return Ok(());
        }
        let action = done_action(&op, live, self.ssa, options);
        gated
            .records
            .push(ChildRecord::of(parent, op_object(&op), action));
        let write = match op {
            ChildOp::Update(merged) if self.ssa => {
                self.apply_write(parent, (live, want), &merged)?
            }
            op => Write::from(op),
        };
        gated.writes.push(write);
        Ok(())
    }

    /// Step: the status a sync would write — the hook's, with kmeta's child conditions,
    /// `lastHandledReconcileAt`, `observedGeneration` and kmeta's sync record (carried over
    /// when this sync has no news, so a parent in sync shows no status change).
    fn status(&self, parent: &Value, hook_status: Option<Value>, gated: &Gated) -> Value {
        let now = crate::reconcile::status::now_to_the_second();
        let with_reports =
            apply::with_child_conditions(hook_status.as_ref(), parent, &gated.reports, &now);
        let with_request = decide::with_handled_request(with_reports, parent);
        let generation = parent
            .pointer("/metadata/generation")
            .and_then(Value::as_i64);
        let want = decide::desired_status(with_request.as_ref(), generation);
        let record = SyncRecord {
            time: now,
            children: gated.records.clone(),
            ..SyncRecord::default()
        };
        decide::with_sync_record(want, parent, &record)
    }

    /// Under server-side apply, the apply kmeta sends instead of the update of `merged`: its
    /// body built as a sync builds it, and the parent's field manager.
    fn apply_write(
        &self,
        parent: &Value,
        (live, want): (Option<&Value>, Option<&Value>),
        merged: &Value,
    ) -> Result<Write, RenderError> {
        let key = decide::child_key(merged);
        let live = live.unwrap_or(merged);
        let want = want.unwrap_or(merged);
        let group_kind = key.split(' ').next().unwrap_or_default();
        let fallback = dynapply::Options::default();
        let opts = self.declared.options.get(group_kind).unwrap_or(&fallback);
        // as the sync: the observed version (an empty one guards nothing)
        let version = Some(meta_str(live, "resourceVersion"));
        let body = decide::server_side_apply_request(live, want, opts, parent, version)
            .map_err(|e| RenderError::Sync(format!("{key}: {e}")))?;
        Ok(Write::Apply {
            body,
            field_manager: self.field_manager(parent),
        })
    }

    /// The field manager kmeta writes `parent`'s children as (its default prefix).
    fn field_manager(&self, parent: &Value) -> String {
        let name = self.cc.metadata.name.as_deref().unwrap_or_default();
        let prefix = crate::ManagerConfig::default().ssa_field_manager;
        apply::field_manager(&prefix, name, meta_str(parent, "uid"))
    }
}

/// Observed children as a sync sees them: in the form kmeta's watch caches keep (no
/// `managedFields`), with the entries of kmeta's per-parent field managers kept apart for a child
/// without the last-applied annotation (what server-side apply without it reads).
#[derive(Debug, Clone, Default)]
pub(crate) struct Observed {
    /// The children, as cached.
    pub(crate) objects: Vec<Value>,
    /// kmeta's field managers' `managedFields` entries, by child key.
    owned: HashMap<String, Value>,
}

impl Observed {
    /// `read` (as the API server returned them) in the cache's form.
    pub(crate) fn from_read(read: Vec<Value>) -> Observed {
        let mut out = Observed::default();
        for v in read {
            let (object, entries) = as_cached(v);
            if let Some(e) = entries {
                out.owned.insert(decide::child_key(&object), e);
            }
            out.objects.push(object);
        }
        out
    }
}

/// `obj` in the form kmeta's watch caches keep it (`managedFields` dropped), and the entries of
/// kmeta's per-parent field managers when it carries no last-applied annotation.
pub(crate) fn as_cached(mut obj: Value) -> (Value, Option<Value>) {
    let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) else {
        return (obj, None);
    };
    let annotated = m
        .get("annotations")
        .and_then(|a| a.get(dynapply::LAST_APPLIED_ANNOTATION))
        .is_some();
    let entries = match m.shift_remove("managedFields") {
        Some(Value::Array(managed)) => crate::runtime::compact::owned_entries(&managed, annotated),
        _ => None,
    };
    (obj, entries)
}

/// The related objects of one parent as its sync hook is sent them.
#[derive(Debug, Clone, Default)]
pub(crate) struct Related {
    /// The objects.
    pub objects: Vec<Value>,
    /// The groups (`Kind.apiVersion`) the customize hook's rules name, sent even when empty.
    pub groups: Vec<String>,
}

/// One related resource as listed: its kind, scope and objects.
pub(crate) struct Listed {
    kind: String,
    namespaced: bool,
    objects: Vec<std::sync::Arc<Value>>,
}

/// The objects of related resources, read from a cluster once per resource and kept for every
/// parent planned after (a plan reads each related resource once, not once per parent).
pub(crate) struct RelatedLists {
    client: kube::Client,
    crds: Vec<Value>,
    lists: tokio::sync::Mutex<HashMap<(String, String), std::sync::Arc<Listed>>>,
    namespaces: tokio::sync::OnceCell<HashMap<String, BTreeMap<String, String>>>,
}

impl RelatedLists {
    /// Reads through `client`; custom kinds from `crds`.
    pub(crate) fn new(client: kube::Client, crds: Vec<Value>) -> RelatedLists {
        RelatedLists {
            client,
            crds,
            lists: tokio::sync::Mutex::new(HashMap::new()),
            namespaces: tokio::sync::OnceCell::new(),
        }
    }

    async fn list(
        &self,
        api_version: &str,
        plural: &str,
    ) -> Result<std::sync::Arc<Listed>, RenderError> {
        let key = (api_version.to_owned(), plural.to_owned());
        let mut lists = self.lists.lock().await;
        if let Some(l) = lists.get(&key) {
            return Ok(l.clone());
        }
        let (kind, namespaced) = child_type(api_version, plural, &self.crds, &[])?;
        let what = super::live::Listing {
            api_version,
            kind: &kind,
            plural,
            namespace: None,
        };
        let objects = super::live::list_all(&self.client, &what)
            .await
            .map_err(|e| RenderError::Sync(format!("listing related {plural}: {e}")))?
            .into_iter()
            .map(std::sync::Arc::new)
            .collect();
        let listed = std::sync::Arc::new(Listed {
            kind,
            namespaced,
            objects,
        });
        lists.insert(key, listed.clone());
        Ok(listed)
    }

    async fn namespace_labels(
        &self,
    ) -> Result<HashMap<String, BTreeMap<String, String>>, RenderError> {
        let labels = self
            .namespaces
            .get_or_try_init(|| async {
                let listed = self.list("v1", "namespaces").await?;
                Ok::<_, RenderError>(
                    listed
                        .objects
                        .iter()
                        .map(|n| {
                            (
                                meta_str(n, "name").to_owned(),
                                crate::runtime::selector::labels_of(n),
                            )
                        })
                        .collect(),
                )
            })
            .await?;
        Ok(labels.clone())
    }
}

/// A child the sync would leave as it is, though its answer differs from the child.
#[derive(Debug, Clone, PartialEq)]
pub struct LeftAlone {
    /// The child (`Kind.apiVersion namespace/name`).
    pub child: String,
    /// Why (`drift policy Ignore`, `drift policy Report`).
    pub why: String,
    /// The write held back (the object it would have sent).
    pub object: Value,
}

/// The child writes of one sync, after the gates.
#[derive(Default)]
struct Gated {
    writes: Vec<Write>,
    left_alone: Vec<LeftAlone>,
    records: Vec<ChildRecord>,
    reports: Vec<ChildReport>,
}

/// The object of a child operation.
fn op_object(op: &ChildOp) -> &Value {
    match op {
        ChildOp::Create(o) | ChildOp::Update(o) | ChildOp::Delete { object: o, .. } => o,
    }
}

/// The child executor's gate ([`decide::write_gate`]), offline: `Some` (why, and the
/// condition report) when the write is held back. What only a running controller remembers —
/// an update the API server ignored before, a child another parent holds — is not known here.
fn gate(
    op: &ChildOp,
    drift: DriftPolicy,
    ssa: bool,
    (live, want): (Option<&Value>, Option<&Value>),
    options: &dynapply::Options,
) -> Option<(String, Option<ChildReport>)> {
    match decide::write_gate(decide::WriteKind::of(op), drift, ssa) {
        decide::WriteGate::Hold(policy) => Some((format!("drift policy {policy:?}"), None)),
        decide::WriteGate::Send {
            unless_drift: true, ..
        } => {
            let paths = decide::drift_only(live?, want?, options)?;
            let child = crate::object::describe(op_object(op));
            let fields = if paths.is_empty() {
                "fields the hook sets".to_owned()
            } else {
                paths.join(", ")
            };
            let report = ChildReport {
                kind: apply::DRIFT_CONDITION,
                reason: "Drifted",
                message: format!("{child}: {fields}"),
            };
            Some((format!("drift policy {drift:?}"), Some(report)))
        }
        decide::WriteGate::Send { .. } => None,
    }
}

/// What a write does, for the sync record (as the child executor records it).
fn done_action(
    op: &ChildOp,
    live: Option<&Value>,
    ssa: bool,
    options: &dynapply::Options,
) -> ChildAction {
    match op {
        ChildOp::Create(_) => ChildAction::Created,
        ChildOp::Delete { reason, .. } => ChildAction::Deleted {
            why: (*reason).to_owned(),
        },
        ChildOp::Update(o) => {
            let ignore = [options.annotation.as_str()];
            let fields = match live {
                Some(live) if ssa => decide::applied_paths(live, o, &ignore),
                Some(live) => decide::changed_paths(live, o, &ignore),
                None => Vec::new(),
            };
            ChildAction::Updated { fields }
        }
    }
}

/// Step: the child types the controller declares.
fn declare_children(
    cc: &CompositeController,
    crds: &[Value],
    seen: &[Value],
) -> Result<Declared, RenderError> {
    let mut d = Declared::default();
    let annotations = cc.metadata.annotations.as_ref();
    let choice = apply::last_applied_choice(annotations, Default::default());
    for rule in cc.spec.child_rules() {
        let (kind, namespaced) = child_type(&rule.api_version, &rule.resource, crds, seen)?;
        let key = wire::group_key(&rule.api_version, &kind);
        let method = rule
            .update_strategy
            .as_ref()
            .and_then(|s| s.method)
            .unwrap_or_default();
        d.types
            .insert(key.clone(), ChildType { namespaced, method });
        let mut options = child_options(&rule.api_version, &kind, crds);
        let spec_fields = rule.field_rules.as_deref().unwrap_or_default();
        options.fields =
            crate::reconcile::children::field_rules(spec_fields, None, &rule.api_version, &kind)
                .map_err(|e| RenderError::Controller(format!("{key}: {e}")))?;
        let drift = rule.drift_policy.unwrap_or_default();
        options.record = apply::records_last_applied(choice, &options.rules, drift, method);
        d.options.insert(key.clone(), options);
        d.drift.insert(key.clone(), drift);
        d.keys.push(key);
    }
    Ok(d)
}

/// Step: the hook client a sync would use (`hook_url` replacing its URL), reading through
/// `setup.client`.
async fn hook_client(
    cc: &CompositeController,
    setup: &HookSetup,
    kind: HookKind,
) -> Result<HookClient, RenderError> {
    let err = |e: String| RenderError::Controller(e);
    let (spec, kind) = match kind {
        HookKind::Customize => (cc.spec.customize_hook(), kind),
        _ if setup.finalizing => (cc.spec.finalize_hook(), HookKind::Finalize),
        _ => (cc.spec.sync_hook(), HookKind::Sync),
    };
    let mut spec = spec.cloned().ok_or_else(|| {
        err(format!(
            "the CompositeController has no {} hook",
            kind.as_str()
        ))
    })?;
    let replaced = (kind != HookKind::Customize)
        .then_some(setup.hook_url.as_ref())
        .flatten();
    if let (Some(url), Some(w)) = (replaced, spec.webhook.as_mut()) {
        w.url = Some(url.clone());
        w.service = None;
        w.path = None;
    }
    let endpoints = cc.spec.endpoint_configs.clone().unwrap_or_default();
    let options = HookOptions {
        jsonnet: match &setup.jsonnet_worker {
            Some(w) => crate::hook::jsonnet::JsonnetOptions {
                worker: Some(w.clone()),
                ..Default::default()
            },
            None => crate::hook::jsonnet::this_binary(),
        },
        ..HookOptions::default()
    };
    HookClient::new(&setup.client, kind, &spec, &endpoints, &options)
        .await
        .map_err(|e| err(e.to_string()))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deployment(replicas: i64) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "d", "namespace": "n", "resourceVersion": "7"},
            "spec": {"replicas": replicas}})
    }

    #[test]
    fn drift_policies_hold_writes_as_the_executor_does() {
        let opts = dynapply::Options::default();
        let op = ChildOp::Update(deployment(3));
        let held = gate(&op, DriftPolicy::Ignore, false, (None, None), &opts);
        assert_eq!(held.unwrap().0, "drift policy Ignore");
        assert!(gate(&op, DriftPolicy::Enforce, false, (None, None), &opts).is_none());
        let create = ChildOp::Create(deployment(3));
        assert!(
            gate(&create, DriftPolicy::Ignore, false, (None, None), &opts).is_none(),
            "a create is always sent"
        );
    }

    #[test]
    fn an_update_records_the_paths_it_changes() {
        let opts = dynapply::Options::default();
        let live = deployment(1);
        let action = done_action(&ChildOp::Update(deployment(3)), Some(&live), false, &opts);
        assert_eq!(
            action,
            ChildAction::Updated {
                fields: vec!["spec.replicas".into()]
            }
        );
    }

    #[test]
    fn children_left_to_others_are_named_with_their_rules() {
        let mut options = child_options("apps/v1", "Deployment", &[]);
        let rule = crate::api::FieldRule {
            path: "spec.replicas".into(),
            mode: None,
            name: Some("hpa".into()),
        };
        options.fields =
            crate::reconcile::children::field_rules(&[rule], None, "apps/v1", "Deployment")
                .unwrap();
        let want = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "ns"}, "spec": {"replicas": 3}});
        let mut live = want.clone();
        live["spec"]["replicas"] = json!(7);
        let names = dynapply::left_alone(&options.fields, &live, &want);
        assert_eq!(names, ["hpa"]);
    }
}
