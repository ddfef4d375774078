//! Admission webhooks around one write, in kube-apiserver's order: mutating webhooks (after the
//! in-process mutating functions), then the object's validation, then validating webhooks.
//!
//! The engine runs under one lock and a webhook is an HTTP call, so a write with matching
//! webhooks runs the engine more than once: a first pass stops where mutating admission starts
//! and keeps what it sees; the mutating webhooks are called on that; a dry-run pass applies their
//! patches and validates, giving the object the validating webhooks see; a last pass stores it.
//! A pass finding the stored object changed since the first starts over (at most
//! [`ATTEMPTS`] times), as kube-apiserver's storage retries an update on a conflict.

use crate::authn::UserInfo;
use crate::engine::{External, Inner, Req, WriteOpts};
use crate::error::{ApiError, ApiResult};
use crate::hooks::Operation;
use crate::state::ServerState;
use crate::store::{Key, Obj};
use crate::webhook::{self, Attributes, Op, Webhook, WebhookError};
use serde_json::Value;
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// How often a write is redone when the stored object changes during its admission.
const ATTEMPTS: usize = 5;

const CONFIG_KINDS: [(&str, &str); 2] = [
    (
        "mutatingwebhookconfigurations",
        "MutatingWebhookConfiguration",
    ),
    (
        "validatingwebhookconfigurations",
        "ValidatingWebhookConfiguration",
    ),
];

/// One write to admit: what the engine is asked, with which options, by whom.
pub(super) struct Write<'a> {
    pub(super) state: &'a Arc<ServerState>,
    pub(super) req: &'a Req,
    pub(super) wopts: &'a WriteOpts,
    pub(super) user: Option<&'a UserInfo>,
}

type Outcome = (ApiResult<Obj>, Vec<String>);

impl Write<'_> {
    /// Runs the write `f` with webhook admission; its result and its `Warning` texts.
    pub(super) async fn run<F>(&self, f: F) -> Outcome
    where
        F: Fn(&mut Inner, &WriteOpts) -> ApiResult<Obj>,
    {
        let hooks = self.webhooks(&[Op::Create, Op::Update]);
        if hooks.is_empty() {
            return self.state.write_warn(|i| f(i, self.wopts));
        }
        for _ in 0..ATTEMPTS {
            if let Some(done) = self.attempt(&hooks, &f).await {
                return done;
            }
        }
        let conflict = ApiError::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} {:?}: the object kept changing during admission",
                self.req.def.group_resource(),
                self.req.name.as_deref().unwrap_or_default()
            ),
        );
        (Err(conflict), Vec::new())
    }

    /// The webhooks of every stored configuration whose rules may cover this request (a
    /// configuration that cannot be read is skipped, as kube-apiserver refuses it on create).
    fn webhooks(&self, ops: &[Op]) -> Vec<Webhook> {
        // as kube-apiserver, no webhook sees the admission configurations themselves
        if self.req.def.group == "admissionregistration.k8s.io" {
            return Vec::new();
        }
        let inner = self.state.lock();
        let mut hooks = Vec::new();
        for (plural, kind) in CONFIG_KINDS {
            let res: Arc<str> =
                Arc::from(format!("admissionregistration.k8s.io/{plural}").as_str());
            for (_, obj) in inner.store.range(&res, None, None) {
                match webhook::parse_configuration(kind, &obj.value()) {
                    Ok(ws) => hooks.extend(ws),
                    Err(e) => tracing::warn!("{e}"),
                }
            }
        }
        let namespaced = self.req.def.namespaced;
        let sub = self.req.sub.clone().unwrap_or_default();
        hooks.retain(|w| {
            ops.iter()
                .any(|op| w.rule_matches(&self.attributes(*op, "", &sub), namespaced))
        });
        webhook::ordered(hooks)
    }

    /// The validating webhooks of a DELETE, called with the stored object as `oldObject` (no
    /// `object`) before the engine deletes; their warnings. A missing object is left to the
    /// engine's 404.
    pub(super) async fn admit_delete(&self) -> ApiResult<Vec<String>> {
        let hooks: Vec<Webhook> = self
            .webhooks(&[Op::Delete])
            .into_iter()
            .filter(|w| !w.mutating)
            .collect();
        if hooks.is_empty() {
            return Ok(Vec::new());
        }
        let Ok(old) = self.state.lock().get(self.req) else {
            return Ok(Vec::new());
        };
        let name = self.req.name.clone().unwrap_or_default();
        let sub = self.req.sub.clone().unwrap_or_default();
        let attrs = self.attributes(Op::Delete, &name, &sub);
        let ns_labels = self.namespace_labels(&old);
        let mut calls = Calls {
            attrs: &attrs,
            ns_labels: ns_labels.as_ref(),
            namespaced: self.req.def.namespaced,
            warnings: Vec::new(),
        };
        for w in &hooks {
            if calls.admits_delete(w, &old)? {
                calls.call(w, None, Some(&old)).await?;
            }
        }
        Ok(calls.warnings)
    }

    fn attributes(&self, op: Op, name: &str, sub: &str) -> Attributes {
        Attributes {
            op,
            group: self.req.def.group.clone(),
            version: self.req.version.clone(),
            kind: self.req.def.kind.clone(),
            resource: self.req.def.plural.clone(),
            subresource: sub.to_string(),
            namespace: self.req.ns.clone(),
            name: name.to_string(),
            dry_run: self.wopts.dry_run,
            user: self.user.map(|u| (u.name.clone(), u.groups.clone())),
            field_manager: self.wopts.field_manager.clone(),
        }
    }

    /// One try: `None` when the stored object changed under it.
    async fn attempt<F>(&self, hooks: &[Webhook], f: &F) -> Option<Outcome>
    where
        F: Fn(&mut Inner, &WriteOpts) -> ApiResult<Obj>,
    {
        let first = Arc::new(External {
            capture: true,
            ..Default::default()
        });
        let (out, warnings) = self.pass(f, first.clone(), false);
        let seen = first.seen.lock().unwrap_or_else(|e| e.into_inner()).take();
        let Some(seen) = seen else {
            // stopped before admission (or never reached it): that is the answer
            return Some((out, warnings));
        };
        let op = match seen.op {
            Operation::Create => Op::Create,
            _ => Op::Update,
        };
        let name = seen
            .object
            .pointer("/metadata/name")
            .and_then(Value::as_str);
        let sub = self.req.sub.clone().unwrap_or_default();
        let attrs = self.attributes(op, name.unwrap_or_default(), &sub);
        let ns_labels = self.namespace_labels(&seen.object);
        let mut calls = Calls {
            attrs: &attrs,
            ns_labels: ns_labels.as_ref(),
            namespaced: self.req.def.namespaced,
            warnings: Vec::new(),
        };
        let mutating: Vec<&Webhook> = hooks.iter().filter(|w| w.mutating).collect();
        let patches = match calls
            .mutate(&mutating, seen.object.clone(), seen.old.as_ref())
            .await
        {
            Ok(p) => p,
            Err(e) => return Some((Err(e), calls.warnings)),
        };
        let external = || later_pass(&first, seen.old.as_ref(), &patches);
        let validating: Vec<&Webhook> = hooks.iter().filter(|w| !w.mutating).collect();
        if calls.any_match(&validating, &seen.object, seen.old.as_ref()) {
            let checked = self
                .validated(f, external(), &mut calls, &validating, seen.old.as_ref())
                .await;
            match checked {
                Ok(()) => {}
                Err(None) => return None,
                Err(Some(e)) => return Some((Err(e), calls.warnings)),
            }
        }
        let ext = external();
        let (out, mut warnings) = self.pass(f, ext.clone(), self.wopts.dry_run);
        if ext.stale.load(Ordering::SeqCst) {
            return None;
        }
        warnings.extend(calls.warnings);
        Some((out, warnings))
    }

    /// The dry-run pass and the validating webhooks on its result: `Err(None)` when the
    /// stored object changed since the first pass, `Err(Some(_))` when refused.
    async fn validated<F>(
        &self,
        f: &F,
        ext: Arc<External>,
        calls: &mut Calls<'_>,
        hooks: &[&Webhook],
        old: Option<&Value>,
    ) -> Result<(), Option<ApiError>>
    where
        F: Fn(&mut Inner, &WriteOpts) -> ApiResult<Obj>,
    {
        let (out, _) = self.pass(f, ext.clone(), true);
        if ext.stale.load(Ordering::SeqCst) {
            return Err(None);
        }
        let object = out.map_err(Some)?;
        calls.validate(hooks, &object, old).await.map_err(Some)
    }

    fn pass<F>(&self, f: &F, ext: Arc<External>, dry_run: bool) -> Outcome
    where
        F: Fn(&mut Inner, &WriteOpts) -> ApiResult<Obj>,
    {
        let mut opts = self.wopts.clone();
        opts.external = Some(ext);
        opts.dry_run = dry_run;
        self.state.write_warn(|i| f(i, &opts))
    }

    /// The labels `namespaceSelector` is matched against: the object's namespace's, a
    /// Namespace's own, none for other cluster-scoped objects.
    fn namespace_labels(&self, object: &Value) -> Option<Value> {
        if self.req.def.group.is_empty() && self.req.def.plural == "namespaces" {
            return Some(webhook::labels_of(object));
        }
        let ns = self.req.ns.as_deref()?;
        let inner = self.state.lock();
        let key = Key {
            res: Arc::from("/namespaces"),
            ns: String::new(),
            name: ns.to_string(),
        };
        Some(
            inner
                .store
                .get(&key)
                .map(|n| webhook::labels_of(&n))
                .unwrap_or_else(|| Value::Object(Default::default())),
        )
    }
}

/// What a pass after the first carries: the mutating webhooks' patches, the stored object's
/// resourceVersion the first pass saw, and the name and uid it drew.
fn later_pass(
    first: &External,
    old: Option<&Value>,
    patches: &[json_patch::Patch],
) -> Arc<External> {
    Arc::new(External {
        patches: patches.to_vec(),
        old_rv: old
            .and_then(|o| o.pointer("/metadata/resourceVersion"))
            .and_then(Value::as_str)
            .map(str::to_string),
        identity: std::sync::Mutex::new(
            first
                .identity
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
        ),
        ..Default::default()
    })
}

/// The calls of one attempt and the warnings their answers carried.
struct Calls<'a> {
    attrs: &'a Attributes,
    ns_labels: Option<&'a Value>,
    namespaced: bool,
    warnings: Vec<String>,
}

impl Calls<'_> {
    fn matches(&self, w: &Webhook, object: &Value, old: Option<&Value>) -> bool {
        w.rule_matches(self.attrs, self.namespaced)
            && w.selectors_match(Some(object), old, self.ns_labels)
    }

    /// Whether a DELETE review goes to `w` (selectors and conditions on the stored object).
    fn admits_delete(&self, w: &Webhook, old: &Value) -> ApiResult<bool> {
        if !(w.rule_matches(self.attrs, self.namespaced)
            && w.selectors_match(None, Some(old), self.ns_labels))
        {
            return Ok(false);
        }
        match w.conditions_hold(self.attrs, None, Some(old)) {
            Ok(held) => Ok(held),
            Err(_) if w.ignore_failure => Ok(false),
            Err(e) => Err(call_failed(&e)),
        }
    }

    /// [`Calls::matches`], then the webhook's `matchConditions`: `Ok(false)` skips it; a
    /// condition that cannot be evaluated refuses the request under `failurePolicy: Fail`.
    fn admits(&self, w: &Webhook, object: &Value, old: Option<&Value>) -> ApiResult<bool> {
        if !self.matches(w, object, old) {
            return Ok(false);
        }
        match w.conditions_hold(self.attrs, Some(object), old) {
            Ok(held) => Ok(held),
            Err(_) if w.ignore_failure => Ok(false),
            Err(e) => Err(call_failed(&e)),
        }
    }

    fn any_match(&self, hooks: &[&Webhook], object: &Value, old: Option<&Value>) -> bool {
        hooks.iter().any(|w| self.matches(w, object, old))
    }

    /// Calls the matching mutating webhooks in order on `object`, each on the result of the one
    /// before, then once more those with `reinvocationPolicy: IfNeeded` that a later webhook's
    /// change followed; the patches, in order.
    async fn mutate(
        &mut self,
        hooks: &[&Webhook],
        mut object: Value,
        old: Option<&Value>,
    ) -> ApiResult<Vec<json_patch::Patch>> {
        let mut patches = Vec::new();
        // per call: the webhook and the number of patches when it answered
        let mut called: Vec<(&Webhook, usize)> = Vec::new();
        for w in hooks {
            if !self.admits(w, &object, old)? {
                continue;
            }
            if let Some(p) = self.call(w, Some(&object), old).await? {
                apply(w, &mut object, &p)?;
                patches.push(p);
            }
            called.push((w, patches.len()));
        }
        let again: Vec<&Webhook> = called
            .iter()
            .filter(|(w, n)| w.reinvoke && *n < patches.len())
            .map(|(w, _)| *w)
            .collect();
        for w in again {
            if let Some(p) = self.call(w, Some(&object), old).await? {
                apply(w, &mut object, &p)?;
                patches.push(p);
            }
        }
        Ok(patches)
    }

    /// Calls the matching validating webhooks on the object about to be stored.
    async fn validate(
        &mut self,
        hooks: &[&Webhook],
        object: &Value,
        old: Option<&Value>,
    ) -> ApiResult<()> {
        for w in hooks {
            if self.admits(w, object, old)? {
                self.call(w, Some(object), old).await?;
            }
        }
        Ok(())
    }

    /// One call: the patch of an allowing answer; a denial, or a failed call under
    /// `failurePolicy: Fail`, as the request's error.
    async fn call(
        &mut self,
        w: &Webhook,
        object: Option<&Value>,
        old: Option<&Value>,
    ) -> ApiResult<Option<json_patch::Patch>> {
        if self.attrs.dry_run && !w.dry_run_safe {
            return Err(ApiError::bad_request(format!(
                "admission webhook {:?} does not support dry run",
                w.name
            )));
        }
        let uid = crate::webhook::call::review_uid();
        let review = webhook::review_request(self.attrs, &uid, object, old);
        let answer = match webhook::call::post(w, &review).await {
            Ok(body) => webhook::read_response(&w.name, w.mutating, &uid, &body),
            Err(e) => Err(e),
        };
        match answer {
            Ok(v) if v.allowed => {
                self.warnings.extend(v.warnings);
                Ok(v.patch)
            }
            Ok(v) => {
                self.warnings.extend(v.warnings);
                Err(webhook::denial(&w.name, v.status.as_ref()))
            }
            Err(e) if w.ignore_failure => {
                tracing::warn!("{e} (failurePolicy Ignore)");
                Ok(None)
            }
            Err(e) => Err(call_failed(&e)),
        }
    }
}

fn apply(w: &Webhook, object: &mut Value, p: &json_patch::Patch) -> ApiResult<()> {
    json_patch::patch(object, p).map_err(|e| {
        call_failed(&WebhookError::Call {
            webhook: w.name.clone(),
            reason: format!("the JSON patch does not apply: {e}"),
        })
    })
}

fn call_failed(e: &WebhookError) -> ApiError {
    ApiError::new(
        500,
        "InternalError",
        format!("Internal error occurred: {e}"),
    )
}
