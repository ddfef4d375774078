//! Admission policies inside a write: the stored MutatingAdmissionPolicies (right after the
//! in-process mutating functions, before the webhooks' patches) and ValidatingAdmissionPolicies
//! (after the object's validation), with their bindings, params and the object's namespace read
//! from storage. What they decide is [`crate::policy`]'s.

use super::inner::Inner;
use super::request::{Req, WriteOpts};
use crate::error::{ApiError, ApiResult};
use crate::hooks::Operation;
use crate::policy::{self, ParamQuery, Request};
use crate::store::Key;
use crate::webhook::{Attributes, Op};
use serde_json::Value;
use std::sync::Arc;

const GROUP: &str = "admissionregistration.k8s.io";

impl Inner {
    /// The stored objects of an `admissionregistration.k8s.io` resource, by name.
    fn admission_objects(&self, plural: &str) -> Vec<Value> {
        let res: Arc<str> = Arc::from(format!("{GROUP}/{plural}").as_str());
        self.store
            .range(&res, None, None)
            .map(|(_, o)| Arc::unwrap_or_clone(o.value()))
            .collect()
    }

    /// The MutatingAdmissionPolicies bound to this request, applied to `obj`.
    pub(super) fn mutating_policies(
        &self,
        req: &Req,
        opts: &WriteOpts,
        op: Operation,
        obj: &mut Value,
        old: Option<&Value>,
    ) -> ApiResult<()> {
        if req.def.group == GROUP {
            return Ok(());
        }
        let bindings = self.admission_objects("mutatingadmissionpolicybindings");
        if bindings.is_empty() {
            return Ok(());
        }
        let policies = self.admission_objects("mutatingadmissionpolicies");
        let attrs = attributes(req, opts, op, obj);
        let namespace = self.namespace_of(req);
        let r = Request {
            attrs: &attrs,
            namespaced: req.def.namespaced,
            object: None,
            old,
            namespace: namespace.as_ref(),
        };
        let kinds = Self::kinds_for(&req.def, &req.version);
        let params = |q: &ParamQuery| self.params(q);
        policy::mutating::mutate(&policies, &bindings, &params, &r, obj, &kinds)
            .map_err(|f| denied(req, &attrs.name, f.message, "Invalid", 422))
    }

    /// The ValidatingAdmissionPolicies bound to this request, on the object about to be stored
    /// (none on delete, where `old` is the stored one); their warnings are answered.
    pub(super) fn validating_policies(
        &mut self,
        req: &Req,
        opts: &WriteOpts,
        op: Operation,
        obj: Option<&Value>,
        old: Option<&Value>,
    ) -> ApiResult<()> {
        if req.def.group == GROUP {
            return Ok(());
        }
        let bindings = self.admission_objects("validatingadmissionpolicybindings");
        if bindings.is_empty() {
            return Ok(());
        }
        let policies = self.admission_objects("validatingadmissionpolicies");
        let named = obj.or(old).unwrap_or(&Value::Null);
        let attrs = attributes(req, opts, op, named);
        let namespace = self.namespace_of(req);
        let r = Request {
            attrs: &attrs,
            namespaced: req.def.namespaced,
            object: obj,
            old,
            namespace: namespace.as_ref(),
        };
        let params = |q: &ParamQuery| self.params(q);
        let outcome = policy::validating::evaluate(&policies, &bindings, &params, &r);
        self.warnings.extend(outcome.warnings);
        match outcome.deny {
            Some(d) => Err(denied(req, &attrs.name, d.message, &d.reason, d.code)),
            None => Ok(()),
        }
    }

    fn namespace_of(&self, req: &Req) -> Option<Value> {
        let ns = req.ns.as_deref()?;
        let key = Key {
            res: Arc::from("/namespaces"),
            ns: String::new(),
            name: ns.to_string(),
        };
        self.store.get(&key).map(Arc::unwrap_or_clone)
    }

    /// The objects a binding's `paramRef` names (by name, or every one its selector matches).
    fn params(&self, q: &ParamQuery) -> Vec<Value> {
        let (group, version) = q
            .api_version
            .rsplit_once('/')
            .unwrap_or(("", &q.api_version));
        let Some(def) = self.registry.all().iter().find(|d| {
            d.group == group && d.kind == q.kind && d.versions.iter().any(|v| v == version)
        }) else {
            return Vec::new();
        };
        let ns = if def.namespaced {
            q.namespace.as_deref()
        } else {
            None
        };
        if def.namespaced && ns.is_none() {
            return Vec::new();
        }
        self.store
            .range(&def.storage_key(), ns, None)
            .map(|(_, o)| Arc::unwrap_or_clone(o.value()))
            .filter(|o| q.name.as_deref().is_none_or(|n| policy::name_of(o) == n))
            .filter(|o| q.selector.as_ref().is_none_or(|s| s.matches(o)))
            .collect()
    }
}

fn attributes(req: &Req, opts: &WriteOpts, op: Operation, obj: &Value) -> Attributes {
    Attributes {
        op: match op {
            Operation::Create => Op::Create,
            Operation::Update => Op::Update,
            Operation::Delete => Op::Delete,
        },
        group: req.def.group.clone(),
        version: req.version.clone(),
        kind: req.def.kind.clone(),
        resource: req.def.plural.clone(),
        subresource: req.sub.clone().unwrap_or_default(),
        namespace: req.ns.clone(),
        name: policy::name_of(obj).to_string(),
        dry_run: opts.dry_run,
        user: opts.user.clone(),
        field_manager: opts.field_manager.clone(),
    }
}

/// A policy's refusal, as `admission.NewForbidden` words it with the decision's reason and code.
fn denied(req: &Req, name: &str, message: String, reason: &str, code: u16) -> ApiError {
    let full = format!(
        "{} \"{name}\" is forbidden: {message}",
        req.def.group_resource()
    );
    let mut e = ApiError::new(code, reason, full);
    let mut details = serde_json::json!({"name": name, "kind": req.def.plural,
        "causes": [{"message": message}]});
    if !req.def.group.is_empty() {
        details["group"] = serde_json::json!(req.def.group);
    }
    e.details = Some(Box::new(details));
    e
}
