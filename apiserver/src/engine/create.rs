//! POST: naming (`generateName`), identity, namespace checks, admission, CRD installation and
//! the creator's managedFields.

use super::body::{
    admission_error, admit_schema, check_type, external_mutation, fold_string_data, mutated,
    validate_object_meta,
};
use super::gc::{CRD_CLEANUP, NS_FINALIZER};
use super::inner::Inner;
use super::object::{deleting, finalizers, meta_mut, meta_str, now_rfc3339, set_finalizers};
use super::request::{Req, WriteOpts};
use crate::error::{ApiError, ApiResult, Target};
use crate::hooks::{Admission, Operation};
use crate::metadata::validate_name;
use crate::registry::{self, ResourceDef};
use crate::ssa::{self, Writer};
use crate::store::{Key, Obj};
use serde_json::{Value, json};
use std::collections::VecDeque;
use std::sync::Arc;

impl Inner {
    fn ensure_namespace(&self, req: &Req) -> ApiResult<()> {
        let Some(ns) = req.ns.as_deref() else {
            return Ok(());
        };
        let key = Key {
            res: Arc::from("/namespaces"),
            ns: String::new(),
            name: ns.to_string(),
        };
        match self.store.get(&key) {
            None => Err(ApiError::not_found(Target {
                group: "",
                plural: "namespaces",
                name: ns,
            })),
            Some(n) if deleting(&n) => Err(ApiError::forbidden(format!(
                "{} \"{}\" is forbidden: unable to create new content in namespace {ns} because it is being terminated",
                req.def.group_resource(),
                req.name.as_deref().unwrap_or("")
            ))),
            Some(_) => Ok(()),
        }
    }

    /// POST.
    pub(crate) fn create(
        &mut self,
        adm: &Admission,
        req: &Req,
        body: Value,
        opts: &WriteOpts,
        apply: bool,
    ) -> ApiResult<Obj> {
        if req.sub.is_some() {
            return Err(ApiError::method_not_allowed("create on a subresource"));
        }
        let mut obj = body;
        if !obj.is_object() {
            return Err(ApiError::bad_request(
                "the request body must be a JSON object",
            ));
        }
        let api_version = req.api_version();
        check_type(&mut obj, &req.def, &api_version)?;
        let now = now_rfc3339();
        strip_system_metadata(&mut obj);
        let applied = apply.then(|| obj.clone());
        let name = self.object_name(req, &mut obj)?;
        let uid = self.uid();
        let (name, uid) = pinned_identity(opts, name, uid);
        let req = Req {
            name: Some(name.clone()),
            ..req.clone()
        };
        set_namespace(&req, &mut obj)?;
        set_identity(&req, &mut obj, &name, &uid, &now);
        self.admit_create(adm, &req, opts, &mut obj)?;
        let crd_def = if is_crd(&req) {
            Some(self.accept_crd(&req, &mut obj, &now)?)
        } else {
            None
        };
        let writer = Writer {
            manager: &opts.field_manager,
            api_version: &api_version,
            subresource: "",
            scope: req.scope(),
            now: &now,
        };
        crate::metadata::drop_empty_fields(&mut obj);
        record_creator(&req, &writer, applied.as_ref(), &mut obj);
        let key = req.key(&name);
        if self.store.contains(&key) {
            return Err(ApiError::already_exists(req.target()));
        }
        self.ensure_namespace(&req)?;
        if opts.dry_run {
            return Ok(Arc::new(obj));
        }
        let obj = crate::convert::to_storage(&req.def.group, &req.def.plural, obj);
        let stored = self.store.put(key.clone(), obj);
        if let Some(def) = crd_def {
            self.registry.install(def);
        }
        let mut work = VecDeque::new();
        self.check_orphaned(&key, &mut work);
        self.settle(work);
        Ok(Self::present(&stored, &api_version))
    }

    /// The name of the object to create: from the body, else the URL (apply-create), else
    /// `generateName` plus a random suffix; validated, and equal to the URL's.
    fn object_name(&mut self, req: &Req, obj: &mut Value) -> ApiResult<String> {
        if meta_str(obj, "name").is_none_or(str::is_empty)
            && let Some(n) = &req.name
        {
            meta_mut(obj).insert("name".into(), json!(n));
        }
        let name = match meta_str(obj, "name").filter(|n| !n.is_empty()) {
            Some(n) => n.to_string(),
            None => match meta_str(obj, "generateName").filter(|n| !n.is_empty()) {
                Some(prefix) => {
                    let prefix = prefix.to_string();
                    format!("{prefix}{}", self.name_suffix())
                }
                None => {
                    return Err(ApiError::invalid(
                        &req.def.kind,
                        &req.def.group,
                        "",
                        "metadata.name",
                        "Required value: name or generateName is required",
                    ));
                }
            },
        };
        if let Err(e) = validate_name(&req.def, &name) {
            return Err(ApiError::invalid(
                &req.def.kind,
                &req.def.group,
                &name,
                &e.field,
                &e.message,
            ));
        }
        if let Some(u) = &req.name
            && *u != name
        {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({name}) does not match the name on the URL ({u})"
            )));
        }
        Ok(name)
    }

    /// Decoding, admission and validation of the new object (pruning and defaulting by schema,
    /// admission hooks, Secret `stringData`, metadata, the schema after admission).
    fn admit_create(
        &mut self,
        adm: &Admission,
        req: &Req,
        opts: &WriteOpts,
        obj: &mut Value,
    ) -> ApiResult<()> {
        let name = req.name.as_deref().unwrap_or("");
        let schema = self.decode_body(req, opts.field_validation, obj)?;
        adm.run(
            &req.def.group,
            &req.version,
            &req.def.plural,
            obj,
            Operation::Create,
        )
        .map_err(|e| admission_error(e, req, name))?;
        self.mutating_policies(req, opts, Operation::Create, obj, None)?;
        external_mutation(req, opts, Operation::Create, obj, None)?;
        crate::strategy::default_builtin(&req.def.group, &req.def.plural, obj);
        fold_string_data(&req.def, obj);
        validate_object_meta(&req.def, name, obj)?;
        if let Some(s) = &schema {
            let mutated = mutated(adm, req, &req.def.plural, opts);
            let warnings = admit_schema(s, &req.def, name, obj, None, mutated)?;
            self.warnings.extend(warnings);
        }
        if let Some(check) = &opts.check {
            (check.0)(&self.store, &self.registry, obj, None)?;
        }
        self.validating_policies(req, opts, Operation::Create, Some(obj), None)
    }

    /// A new CRD: its resource definition (422 when invalid or when another CRD serves the
    /// plural), the cleanup finalizer and the accepted status.
    fn accept_crd(&self, req: &Req, obj: &mut Value, now: &str) -> ApiResult<ResourceDef> {
        let name = req.name.as_deref().unwrap_or("");
        let def = registry::crd_to_def(obj).map_err(|e| {
            ApiError::invalid(&req.def.kind, &req.def.group, name, "spec", &e.to_string())
        })?;
        if let Some(existing) = self.registry.lookup_group_resource(&def.group, &def.plural)
            && existing.crd.as_deref() != Some(name)
        {
            return Err(ApiError::invalid(
                &req.def.kind,
                &req.def.group,
                name,
                "spec.names.plural",
                &format!("Invalid value: \"{}\": is already served", def.plural),
            ));
        }
        let mut f = finalizers(obj);
        if !f.iter().any(|x| x == CRD_CLEANUP) {
            f.push(CRD_CLEANUP.into());
        }
        set_finalizers(obj, &f);
        let storage = def.versions.first().cloned().unwrap_or_default();
        let storage = crd_storage_version(obj).unwrap_or(storage);
        obj["status"] = registry::crd_accepted_status(obj, now, &storage);
        Ok(def)
    }
}

/// The name and uid of the object: those of the first pass of a write with webhook admission
/// (which drew them; a generated name or a uid differs at every draw), else the ones drawn now.
fn pinned_identity(opts: &WriteOpts, name: String, uid: String) -> (String, String) {
    let Some(ext) = &opts.external else {
        return (name, uid);
    };
    let mut pinned = ext.identity.lock().unwrap_or_else(|e| e.into_inner());
    pinned.get_or_insert((name, uid)).clone()
}

/// Metadata only the server sets is dropped from a create body.
fn strip_system_metadata(obj: &mut Value) {
    let m = meta_mut(obj);
    m.remove("resourceVersion");
    m.remove("deletionTimestamp");
    m.remove("deletionGracePeriodSeconds");
    m.remove("selfLink");
    m.remove("managedFields");
}

/// The namespace comes from the URL (400 when the body names another); cluster-scoped objects
/// have none.
fn set_namespace(req: &Req, obj: &mut Value) -> ApiResult<()> {
    if req.def.namespaced {
        let url_ns = req.ns.clone().unwrap_or_default();
        match meta_str(obj, "namespace") {
            Some(n) if !n.is_empty() && n != url_ns => {
                return Err(ApiError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ));
            }
            _ => {}
        }
        meta_mut(obj).insert("namespace".into(), json!(url_ns));
    } else {
        meta_mut(obj).remove("namespace");
    }
    Ok(())
}

/// Name, uid, creation time and generation 1; no status when a status subresource exists; a
/// new namespace gets the `kubernetes` finalizer and phase Active.
fn set_identity(req: &Req, obj: &mut Value, name: &str, uid: &str, now: &str) {
    let m = meta_mut(obj);
    m.insert("name".into(), json!(name));
    m.insert("uid".into(), json!(uid));
    m.insert("creationTimestamp".into(), json!(now));
    m.insert("generation".into(), json!(1));
    if req.def.status_subresource
        && let Some(m) = obj.as_object_mut()
    {
        m.remove("status");
    }
    if req.def.group.is_empty() && req.def.plural == "namespaces" {
        obj["spec"] = json!({"finalizers": [NS_FINALIZER]});
        obj["status"] = json!({"phase": "Active"});
    }
}

fn is_crd(req: &Req) -> bool {
    req.def.group == "apiextensions.k8s.io" && req.def.plural == "customresourcedefinitions"
}

/// The creator's managedFields entry: an applier owns the fields of its configuration, not what
/// defaulting or admission added; a plain create's manager owns the whole object it created.
fn record_creator(req: &Req, writer: &Writer<'_>, applied: Option<&Value>, obj: &mut Value) {
    let shape = Inner::shape_for(&req.def, &req.version);
    let set = match applied {
        Some(cfg) => ssa::field_set(cfg, writer.scope, &shape),
        None => ssa::node_set(obj, writer.scope, &shape),
    };
    if set.is_empty() {
        return;
    }
    let entry = ssa::Entry {
        manager: writer.manager.to_string(),
        operation: if applied.is_some() { "Apply" } else { "Update" }.into(),
        api_version: writer.api_version.to_string(),
        time: writer.now.to_string(),
        subresource: String::new(),
        fields: set,
    };
    meta_mut(obj).insert("managedFields".into(), ssa::render_managed(&[entry]));
}

fn crd_storage_version(crd: &Value) -> Option<String> {
    crd.get("spec")?
        .get("versions")?
        .as_array()?
        .iter()
        .find(|v| v.get("storage").and_then(Value::as_bool) == Some(true))?
        .get("name")?
        .as_str()
        .map(str::to_string)
}
