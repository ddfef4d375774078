//! The shared tail of every update (PUT, patch, apply, `/status`, `/scale`): identity from the
//! stored object, subresource rules, admission, validation, generation, managedFields, no-op
//! detection and finalizer-driven removal.

use super::body::{
    admission_error, admit_schema, external_mutation, fold_string_data, mutated,
    validate_object_meta,
};
use super::gc::Work;
use super::inner::Inner;
use super::object::{deleting, finalizers, meta, meta_mut, now_rfc3339, ns_spec_finalizers};
use super::request::{Req, WriteOpts};
use crate::error::{ApiError, ApiResult};
use crate::hooks::{Admission, Operation};
use crate::immutable::validate_update;
use crate::registry::{self, ResourceDef};
use crate::ssa::{self, Writer};
use crate::store::{Key, Obj};
use serde_json::{Value, json};
use std::collections::VecDeque;
use std::sync::Arc;

/// Whether two objects are equal in every top-level field `skip` does not name (both must be
/// objects; anything else compares whole). Compares in place: no copy of either.
fn eq_except(a: &Value, b: &Value, skip: impl Fn(&str) -> bool) -> bool {
    let (Some(a), Some(b)) = (a.as_object(), b.as_object()) else {
        return a == b;
    };
    let kept = |m: &serde_json::Map<String, Value>| m.keys().filter(|k| !skip(k)).count();
    kept(a) == kept(b)
        && a.iter()
            .filter(|(k, _)| !skip(k))
            .all(|(k, v)| b.get(k) == Some(v))
}

/// Whether the spec (everything but metadata, and status with a status subresource) is the
/// same, for generation decisions.
fn same_spec(old: &Value, new: &Value, has_status_sub: bool) -> bool {
    eq_except(old, new, |k| {
        k == "metadata" || (has_status_sub && k == "status")
    })
}

/// Whether an update changes nothing: equal apart from `metadata.resourceVersion` and the
/// `time` of managedFields entries (ownership changes are real changes; timestamps of
/// unchanged entries are not).
fn same_but_volatile(old: &Value, new: &Value) -> bool {
    let null = Value::Null;
    let (om, nm) = (
        old.get("metadata").unwrap_or(&null),
        new.get("metadata").unwrap_or(&null),
    );
    eq_except(old, new, |k| k == "metadata")
        && eq_except(om, nm, |k| k == "resourceVersion" || k == "managedFields")
        && same_entries(om.get("managedFields"), nm.get("managedFields"))
}

/// managedFields lists equal entry by entry, each apart from its `time`.
fn same_entries(a: Option<&Value>, b: Option<&Value>) -> bool {
    match (a, b) {
        (Some(Value::Array(a)), Some(Value::Array(b))) => {
            a.len() == b.len()
                && a.iter()
                    .zip(b)
                    .all(|(x, y)| eq_except(x, y, |k| k == "time"))
        }
        (a, b) => a == b,
    }
}

impl Inner {
    /// Shared tail of update/patch/apply: identity, subresource rules, admission, managedFields,
    /// generation, no-op detection, finalizer-driven deletion.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn commit(
        &mut self,
        adm: &Admission,
        req: &Req,
        key: &Key,
        old: &Obj,
        mut new: Value,
        opts: &WriteOpts,
        applied: Option<Value>,
    ) -> ApiResult<Obj> {
        let api_version = req.api_version();
        // every comparison below is between the request's version of the stored object and the
        // result; `new` is converted back to the stored form only when it is stored
        let old = &Self::present(old, &api_version);
        let name = key.name.clone();
        let now = now_rfc3339();
        let client_managed = keep_identity(req, &name, old, &mut new)?;
        let mut new = subresource_view(req, old, new);
        check_no_new_finalizers(req, &name, old, &new)?;
        let crd_def = self.admit_update(adm, req, &name, old, opts, &mut new)?;
        bump_generation(req, old, &mut new);
        crate::metadata::drop_empty_fields(&mut new);
        let writer = req.writer(&opts.field_manager, &api_version, &now);
        record_managed_fields(req, &writer, old, applied, client_managed, &mut new);
        if same_but_volatile(old, &new) {
            return Ok(Self::present(old, &api_version));
        }
        if opts.dry_run {
            return Ok(Arc::new(new));
        }
        let result = self.store_update(req, key, old, new, crd_def);
        Ok(Self::present(&result, &api_version))
    }

    /// Decoding, admission and validation of the updated object (hooks for `plural` see
    /// main-resource writes, `/status` writes only hooks for `plural/status`, as webhooks);
    /// returns the new definition when a CRD is updated.
    fn admit_update(
        &mut self,
        adm: &Admission,
        req: &Req,
        name: &str,
        old: &Value,
        opts: &WriteOpts,
        new: &mut Value,
    ) -> ApiResult<Option<ResourceDef>> {
        let adm_resource = match req.sub.as_deref() {
            Some("status") => format!("{}/status", req.def.plural),
            _ => req.def.plural.clone(),
        };
        let schema = self.decode_body(req, opts.field_validation, new)?;
        adm.run(
            &req.def.group,
            &req.version,
            &adm_resource,
            new,
            Operation::Update,
        )
        .map_err(|e| admission_error(e, req, name))?;
        self.mutating_policies(req, opts, Operation::Update, new, Some(old))?;
        external_mutation(req, opts, Operation::Update, new, Some(old))?;
        crate::strategy::default_builtin(&req.def.group, &req.def.plural, new);
        fold_string_data(&req.def, new);
        validate_object_meta(&req.def, name, new)?;
        if req.sub.is_none()
            && let Err(e) = validate_update(&req.def, old, new)
        {
            return Err(ApiError::invalid(
                &req.def.kind,
                &req.def.group,
                name,
                &e.field,
                &e.message,
            ));
        }
        if let Some(s) = &schema {
            let mutated = mutated(adm, req, &adm_resource, opts);
            let warnings = admit_schema(s, &req.def, name, new, Some(old), mutated)?;
            self.warnings.extend(warnings);
        }
        if let Some(check) = &opts.check {
            (check.0)(&self.store, &self.registry, new, Some(old))?;
        }
        self.validating_policies(req, opts, Operation::Update, Some(new), Some(old))?;
        // the namespace spec finalizer list cannot be edited through the main endpoint
        if req.def.group.is_empty() && req.def.plural == "namespaces" {
            copy_or_remove(old, new, "spec");
        }
        let is_crd = req.def.group == "apiextensions.k8s.io"
            && req.def.plural == "customresourcedefinitions";
        if !is_crd || req.sub.is_some() {
            return Ok(None);
        }
        registry::crd_to_def(new).map(Some).map_err(|e| {
            ApiError::invalid(&req.def.kind, &req.def.group, name, "spec", &e.to_string())
        })
    }

    /// Store the result (or remove it, when it is being deleted and its last finalizer is gone)
    /// and settle the consequences; returns the stored (or removed) object.
    fn store_update(
        &mut self,
        req: &Req,
        key: &Key,
        old: &Obj,
        new: Value,
        crd_def: Option<ResourceDef>,
    ) -> Obj {
        let mut work = VecDeque::new();
        let new = crate::convert::to_storage(&req.def.group, &req.def.plural, new);
        let result = if deleting(&new) && finalizers(&new).is_empty() && !self.ns_blocked(key, &new)
        {
            let gone = self.store.remove(key, Some(new));
            if let Some(g) = &gone {
                work.push_back(Work::Removed(key.clone(), g.clone()));
            }
            gone.unwrap_or_else(|| old.clone())
        } else {
            let stored = self.store.put(key.clone(), new);
            if let Some(def) = crd_def
                && !deleting(&stored)
            {
                self.registry.install(def);
            }
            if deleting(&stored) {
                work.push_back(Work::Check(key.clone()));
            }
            self.check_orphaned(key, &mut work);
            stored
        };
        self.settle(work);
        result
    }

    fn ns_blocked(&self, key: &Key, obj: &Value) -> bool {
        &*key.res == "/namespaces" && !ns_spec_finalizers(obj).is_empty()
    }
}

/// Set `field` of `new` to `old`'s, or remove it when `old` has none.
fn copy_or_remove(old: &Value, new: &mut Value, field: &str) {
    match old.get(field) {
        Some(s) => new[field] = s.clone(),
        None => {
            if let Some(m) = new.as_object_mut() {
                m.remove(field);
            }
        }
    }
}

/// The result must be an object with object metadata; it gets the request's `apiVersion` and
/// `kind`, and its identity and system metadata from the stored object. Returns the
/// managedFields the client sent.
fn keep_identity(req: &Req, name: &str, old: &Value, new: &mut Value) -> ApiResult<Option<Value>> {
    if !new.is_object() || new.get("metadata").is_some_and(|m| !m.is_object()) {
        return Err(ApiError::invalid(
            &req.def.kind,
            &req.def.group,
            name,
            "",
            "the result of the request is not a JSON object with object metadata",
        ));
    }
    new["apiVersion"] = json!(req.api_version());
    new["kind"] = json!(req.def.kind);
    let client_managed = meta(new).and_then(|m| m.get("managedFields")).cloned();
    let om = meta(old).cloned().unwrap_or_default();
    let m = meta_mut(new);
    for k in [
        "name",
        "namespace",
        "uid",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "generation",
        "resourceVersion",
    ] {
        match om.get(k) {
            Some(v) => {
                m.insert(k.into(), v.clone());
            }
            None => {
                m.remove(k);
            }
        }
    }
    Ok(client_managed)
}

/// Subresource rules: a `/status` write changes the status of the stored object and, for most
/// built-ins, its metadata ([`crate::strategy::status_write`]); a write of the main resource
/// of a kind with a status subresource keeps the stored status.
fn subresource_view(req: &Req, old: &Value, new: Value) -> Value {
    match (req.sub.as_deref(), req.def.status_subresource) {
        (Some("status"), _) => {
            let custom = !req.def.is_builtin();
            let keeps = crate::strategy::status_keeps_meta(&req.def.group, &req.def.plural, custom);
            crate::strategy::status_write(keeps, old, &new)
        }
        (_, true) => {
            let mut new = new;
            copy_or_remove(old, &mut new, "status");
            new
        }
        _ => new,
    }
}

/// No finalizer may be added to an object being deleted (422).
fn check_no_new_finalizers(req: &Req, name: &str, old: &Value, new: &Value) -> ApiResult<()> {
    if !deleting(old) {
        return Ok(());
    }
    let of = finalizers(old);
    match finalizers(new).iter().find(|f| !of.contains(f)) {
        Some(added) => Err(ApiError::invalid(
            &req.def.kind,
            &req.def.group,
            name,
            "metadata.finalizers",
            &format!(
                "Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers []string{{\"{added}\"}}"
            ),
        )),
        None => Ok(()),
    }
}

/// `metadata.generation` goes up by one when anything but metadata (and status, with a status
/// subresource) changed.
fn bump_generation(req: &Req, old: &Value, new: &mut Value) {
    if same_spec(old, new, req.def.status_subresource) {
        return;
    }
    let g = meta(old)
        .and_then(|m| m.get("generation"))
        .and_then(Value::as_i64)
        .unwrap_or(0);
    meta_mut(new).insert("generation".into(), json!(g + 1));
}

/// managedFields of the result: an apply's computed entries; the client's own list when it
/// replaced it explicitly (an empty list removes it); otherwise the stored entries with this
/// update recorded.
fn record_managed_fields(
    req: &Req,
    writer: &Writer<'_>,
    old: &Value,
    applied: Option<Value>,
    client_managed: Option<Value>,
    new: &mut Value,
) {
    let old_managed = meta(old).and_then(|m| m.get("managedFields"));
    let rendered = match (applied, client_managed) {
        (Some(mf), _) => {
            meta_mut(new).insert("managedFields".into(), mf);
            return;
        }
        (None, Some(cm)) if Some(&cm) != old_managed => cm,
        _ => {
            let shape = Inner::shape_for(&req.def, &req.version);
            let mut entries = ssa::parse_managed(old);
            ssa::record_update(&mut entries, Some(old), new, writer, &shape);
            ssa::render_managed(&entries)
        }
    };
    let m = meta_mut(new);
    if rendered.as_array().is_some_and(|a| a.is_empty()) {
        m.remove("managedFields");
    } else {
        m.insert("managedFields".into(), rendered);
    }
}

#[cfg(test)]
mod tests {
    use super::{same_but_volatile, same_spec};
    use serde_json::json;

    fn obj(rv: &str, time: &str, data: &str) -> serde_json::Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "a", "resourceVersion": rv,
                            "managedFields": [{"manager": "m", "time": time, "operation": "Update"}]},
               "data": {"k": data}})
    }

    #[test]
    fn an_update_changing_only_the_version_and_entry_times_is_a_no_op() {
        assert!(same_but_volatile(
            &obj("1", "t1", "x"),
            &obj("2", "t2", "x")
        ));
        assert!(!same_but_volatile(
            &obj("1", "t1", "x"),
            &obj("1", "t1", "y")
        ));
        let mut owned = obj("1", "t1", "x");
        owned["metadata"]["managedFields"][0]["manager"] = json!("other");
        assert!(!same_but_volatile(&obj("1", "t1", "x"), &owned));
        let mut labelled = obj("1", "t1", "x");
        labelled["metadata"]["labels"] = json!({"a": "b"});
        assert!(!same_but_volatile(&obj("1", "t1", "x"), &labelled));
        let mut without_version = obj("1", "t1", "x");
        without_version["metadata"]
            .as_object_mut()
            .map(|m| m.remove("resourceVersion"));
        assert!(same_but_volatile(&obj("1", "t1", "x"), &without_version));
        let mut extra = obj("1", "t1", "x");
        extra["binaryData"] = json!({});
        assert!(!same_but_volatile(&obj("1", "t1", "x"), &extra));
    }

    #[test]
    fn the_spec_leaves_out_metadata_and_status_under_a_status_subresource() {
        let a = json!({"metadata": {"name": "a"}, "spec": {"n": 1}, "status": {"s": 1}});
        let relabelled =
            json!({"metadata": {"name": "a", "labels": {}}, "spec": {"n": 1}, "status": {"s": 1}});
        let status = json!({"metadata": {"name": "a"}, "spec": {"n": 1}, "status": {"s": 2}});
        let spec = json!({"metadata": {"name": "a"}, "spec": {"n": 2}, "status": {"s": 1}});
        assert!(same_spec(&a, &relabelled, true));
        assert!(same_spec(&a, &status, true));
        assert!(!same_spec(&a, &status, false));
        assert!(!same_spec(&a, &spec, true));
    }
}
