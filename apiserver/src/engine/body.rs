//! What a request body becomes before it is stored: `apiVersion`/`kind` checks, patches, pruning
//! and defaulting per `fieldValidation`, Secret `stringData`, and the errors of admission, schema
//! and metadata validation as API errors.

use super::inner::Inner;
use super::request::{FieldValidation, Req, Seen, WriteOpts};
use crate::error::{ApiError, ApiResult};
use crate::hooks::{Admission, AdmissionError, Operation};
use crate::patch::{self, ListKind};
use crate::registry::ResourceDef;
use crate::schema::Schema;
use serde_json::{Value, json};
use std::sync::Arc;

/// Check (and default) `apiVersion`/`kind` of a request body.
pub(super) fn check_type(obj: &mut Value, def: &ResourceDef, api_version: &str) -> ApiResult<()> {
    match obj.get("apiVersion").and_then(Value::as_str) {
        None | Some("") => obj["apiVersion"] = json!(api_version),
        Some(v) if v == api_version => {}
        Some(v) => {
            return Err(ApiError::bad_request(format!(
                "the API version in the data ({v}) does not match the expected API version ({api_version})"
            )));
        }
    }
    match obj.get("kind").and_then(Value::as_str) {
        None | Some("") => obj["kind"] = json!(def.kind),
        Some(k) if k == def.kind => {}
        Some(k) => {
            return Err(ApiError::bad_request(format!(
                "the kind in the data ({k}) does not match the expected kind ({})",
                def.kind
            )));
        }
    }
    Ok(())
}

/// Apply a non-apply patch to a base object.
pub(super) fn apply_patch(
    mut base: Value,
    content_type: &str,
    patch: &Value,
    kinds: &dyn Fn(&[String]) -> ListKind,
) -> ApiResult<Value> {
    match content_type {
        "application/merge-patch+json" => {
            if !patch.is_object() {
                return Err(ApiError::bad_request("merge patch must be a JSON object"));
            }
            patch::merge_patch(&mut base, patch);
            Ok(base)
        }
        "application/json-patch+json" => {
            patch::json_patch(&mut base, patch)
                .map_err(|e| ApiError::new(422, "Invalid", e.to_string()))?;
            Ok(base)
        }
        "application/strategic-merge-patch+json" => {
            if !patch.is_object() {
                return Err(ApiError::bad_request(
                    "strategic merge patch must be a JSON object",
                ));
            }
            patch::strategic_merge(&base, patch, kinds)
                .map_err(|e| ApiError::bad_request(e.to_string()))
        }
        other => Err(ApiError::unsupported_media_type(other, &[])),
    }
}

/// Fold a Secret's write-only `stringData` into `data` (base64), as the real server does.
pub(super) fn fold_string_data(def: &ResourceDef, obj: &mut Value) {
    if !(def.group.is_empty() && def.plural == "secrets") {
        return;
    }
    let Some(sd) = obj.as_object_mut().and_then(|m| m.remove("stringData")) else {
        return;
    };
    if let Some(m) = sd.as_object() {
        if !obj.get("data").is_some_and(Value::is_object) {
            obj["data"] = json!({});
        }
        for (k, v) in m {
            let s = v.as_str().unwrap_or_default();
            obj["data"][k] = json!(crate::proto::base64(s.as_bytes()));
        }
    }
}

/// Labels and the rest of `metadata` of an object about to be stored: 422 Invalid naming the field.
pub(super) fn validate_object_meta(def: &ResourceDef, name: &str, obj: &Value) -> ApiResult<()> {
    crate::metadata::validate_object_meta(obj)
        .map_err(|e| ApiError::invalid(&def.kind, &def.group, name, &e.field, &e.message))
}

/// After admission, what the real server does to a custom resource before storing it: prune and
/// default again when a mutating hook may have changed the object (`mutated`), then validate the
/// whole object and run its CEL rules, ratcheting against `old` on update. Returns the warnings
/// of ratcheted rules.
pub(super) fn admit_schema(
    schema: &Schema,
    def: &ResourceDef,
    name: &str,
    obj: &mut Value,
    old: Option<&Value>,
    mutated: bool,
) -> ApiResult<Vec<String>> {
    if mutated {
        schema.coerce(obj);
    }
    let (errs, warnings) = schema.validate_with_rules(obj, old);
    if errs.is_empty() {
        Ok(warnings)
    } else {
        Err(crate::schema::invalid_error(
            &def.kind, &def.group, name, &errs,
        ))
    }
}

pub(super) fn admission_error(e: AdmissionError, req: &Req, name: &str) -> ApiError {
    if e.code == 422 {
        let mut err = ApiError::invalid(&req.def.kind, &req.def.group, name, "", &e.message);
        err.message = format!(
            "admission webhook denied the request: {} \"{name}\" is invalid: {}",
            req.def.kind, e.message
        );
        err
    } else {
        ApiError::new(
            e.code,
            match e.code {
                403 => "Forbidden",
                409 => "Conflict",
                400 => "BadRequest",
                _ => "InternalError",
            },
            format!("admission webhook denied the request: {}", e.message),
        )
    }
}

impl Inner {
    /// What decoding a written object does before admission: a custom resource is pruned and
    /// defaulted by its version's schema, a built-in kind loses the fields its typed API does not
    /// declare; the dropped fields are answered per `fieldValidation` (a 400 worded as
    /// kube-apiserver's strict decoding error, a warning per field, or nothing). Returns the
    /// schema, which validates the object after admission.
    pub(super) fn decode_body(
        &mut self,
        req: &Req,
        validation: FieldValidation,
        obj: &mut Value,
    ) -> ApiResult<Option<Arc<Schema>>> {
        let schema = req.def.structural_schema(&req.version);
        let unknown = match &schema {
            Some(s) => s.prune(obj),
            None if req.def.is_builtin() => {
                crate::typed::prune_unknown(&req.def.group, &req.def.kind, obj)
            }
            None => Vec::new(),
        };
        self.unknown_fields(req, validation, &unknown)?;
        if let Some(s) = &schema {
            s.default(obj);
        }
        crate::strategy::default_builtin(&req.def.group, &req.def.plural, obj);
        Ok(schema)
    }

    fn unknown_fields(
        &mut self,
        req: &Req,
        validation: FieldValidation,
        unknown: &[String],
    ) -> ApiResult<()> {
        if unknown.is_empty() {
            return Ok(());
        }
        let each = unknown.iter().map(|f| format!("unknown field {f:?}"));
        match validation {
            FieldValidation::Ignore => Ok(()),
            FieldValidation::Warn => {
                self.warnings.extend(each);
                Ok(())
            }
            FieldValidation::Strict => {
                let kind = &req.def.kind;
                Err(ApiError::bad_request(format!(
                    "{kind} in version {:?} cannot be handled as a {kind}: strict decoding error: {}",
                    req.version,
                    each.collect::<Vec<_>>().join(", ")
                )))
            }
        }
    }
}

/// Webhook admission's seam, right after the in-process mutating functions: the webhooks'
/// patches applied (a built-in kind loses the fields its type does not declare again), or,
/// in the capturing pass, what admission sees kept and the write stopped. An update whose stored
/// object changed since the capturing pass stops too (`stale`), to be redone from the start.
pub(super) fn external_mutation(
    req: &Req,
    opts: &WriteOpts,
    op: Operation,
    obj: &mut Value,
    old: Option<&Value>,
) -> ApiResult<()> {
    let Some(ext) = &opts.external else {
        return Ok(());
    };
    let old_rv = old.and_then(|o| o.pointer("/metadata/resourceVersion"));
    if let (Some(want), Some(have)) = (&ext.old_rv, old_rv)
        && have.as_str() != Some(want.as_str())
    {
        ext.stale.store(true, std::sync::atomic::Ordering::SeqCst);
        return Err(ApiError::new(
            409,
            "Conflict",
            "the object changed during admission",
        ));
    }
    if ext.capture {
        let seen = Seen {
            op,
            object: obj.clone(),
            old: old.cloned(),
        };
        *ext.seen.lock().unwrap_or_else(|e| e.into_inner()) = Some(seen);
        return Err(ApiError::new(500, "InternalError", "admission captured"));
    }
    for p in &ext.patches {
        json_patch::patch(obj, p).map_err(|e| {
            ApiError::new(
                500,
                "InternalError",
                format!("Internal error occurred: JSON patch of an admission webhook: {e}"),
            )
        })?;
    }
    if !ext.patches.is_empty() && req.def.is_builtin() {
        crate::typed::prune_unknown(&req.def.group, &req.def.kind, obj);
    }
    Ok(())
}

/// Whether a write's object may have changed after decoding: an in-process mutating function or
/// a webhook's patch.
pub(super) fn mutated(adm: &Admission, req: &Req, resource: &str, opts: &WriteOpts) -> bool {
    adm.mutates(&req.def.group, &req.version, resource)
        || opts
            .external
            .as_ref()
            .is_some_and(|e| !e.patches.is_empty())
}
