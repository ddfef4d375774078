//! PUT, PATCH (JSON, merge, strategic merge) and server-side apply of the main resource and
//! `/status`.

use super::body::{apply_patch, check_type};
use super::inner::Inner;
use super::object::{meta, meta_str, now_rfc3339};
use super::request::{Req, WriteOpts};
use crate::error::{ApiError, ApiResult};
use crate::hooks::Admission;
use crate::ssa;
use crate::store::Obj;
use serde_json::{Value, json};

impl Inner {
    /// PUT (main resource or `/status`).
    pub(crate) fn update(
        &mut self,
        adm: &Admission,
        req: &Req,
        body: Value,
        opts: &WriteOpts,
    ) -> ApiResult<Obj> {
        let (key, old) = self.stored(req)?;
        let name = &key.name;
        if !body.is_object() {
            return Err(ApiError::bad_request(
                "the request body must be a JSON object",
            ));
        }
        let mut body = body;
        check_type(&mut body, &req.def, &req.api_version())?;
        if let Some(n) = meta_str(&body, "name")
            && n != name
        {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({n}) does not match the name on the URL ({name})"
            )));
        }
        if let Some(rv) = meta_str(&body, "resourceVersion").filter(|s| !s.is_empty())
            && Some(rv) != meta_str(&old, "resourceVersion")
        {
            return Err(ApiError::stale(req.target()));
        }
        self.commit(adm, req, &key, &old, body, opts, None)
    }

    /// PATCH with any supported content type.
    pub(crate) fn patch(
        &mut self,
        adm: &Admission,
        req: &Req,
        content_type: &str,
        body: &[u8],
        opts: &WriteOpts,
    ) -> ApiResult<Obj> {
        let name = req.name.clone().unwrap_or_default();
        let key = req.key(&name);
        let accepted: &[&str] = if req.def.is_builtin() {
            &[
                "application/json-patch+json",
                "application/merge-patch+json",
                "application/strategic-merge-patch+json",
                "application/apply-patch+yaml",
            ]
        } else {
            &[
                "application/json-patch+json",
                "application/merge-patch+json",
                "application/apply-patch+yaml",
            ]
        };
        if !accepted.contains(&content_type) {
            return Err(ApiError::unsupported_media_type(content_type, accepted));
        }
        if content_type == "application/apply-patch+yaml" {
            return self.apply(adm, req, body, opts);
        }
        let patch: Value = serde_json::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?;
        let Some(old) = self.store.get(&key) else {
            return Err(ApiError::not_found(req.target()));
        };
        let base = if req.sub.as_deref() == Some("scale") {
            return self.patch_scale(adm, req, &key, &old, content_type, &patch, opts);
        } else {
            (*Self::present(&old, &req.api_version())).clone()
        };
        let kinds = Self::kinds_for(&req.def, &req.version);
        let new = apply_patch(base, content_type, &patch, &kinds)?;
        if let Some(rv) = meta_str(&new, "resourceVersion")
            && Some(rv) != meta_str(&old, "resourceVersion")
        {
            return Err(ApiError::stale(req.target()));
        }
        self.commit(adm, req, &key, &old, new, opts, None)
    }

    fn apply(
        &mut self,
        adm: &Admission,
        req: &Req,
        body: &[u8],
        opts: &WriteOpts,
    ) -> ApiResult<Obj> {
        if opts.field_manager.is_empty() {
            return Err(ApiError::bad_request(
                "PATCH, fieldManager is required for apply requests",
            ));
        }
        let cfg = parse_apply_config(body)?;
        let name = req.name.clone().unwrap_or_default();
        let key = req.key(&name);
        let Some(old) = self.store.get(&key) else {
            if req.sub.is_some() {
                return Err(ApiError::not_found(req.target()));
            }
            let main = Req {
                sub: None,
                ..req.clone()
            };
            return self.create(adm, &main, cfg, opts, true);
        };
        let api_version = req.api_version();
        let mut check = cfg.clone();
        check_type(&mut check, &req.def, &api_version)?;
        if let Some(n) = meta_str(&cfg, "name")
            && n != name
        {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({n}) does not match the name on the URL ({name})"
            )));
        }
        if let Some(rv) = meta_str(&cfg, "resourceVersion").filter(|s| !s.is_empty())
            && Some(rv) != meta_str(&old, "resourceVersion")
        {
            return Err(ApiError::stale(req.target()));
        }
        let now = now_rfc3339();
        let shape = Self::shape_for(&req.def, &req.version);
        let writer = req.writer(&opts.field_manager, &api_version, &now);
        let live = Self::present(&old, &api_version);
        let merged = ssa::apply(&live, &cfg, &writer, opts.force, &shape)
            .map_err(|conflicts| apply_conflict(req, &name, &conflicts))?;
        let managed = meta(&merged)
            .and_then(|m| m.get("managedFields"))
            .cloned()
            .unwrap_or(json!([]));
        self.commit(adm, req, &key, &old, merged, opts, Some(managed))
    }
}

/// The configuration of an apply request: a YAML (or JSON) object with `apiVersion` and `kind`.
fn parse_apply_config(body: &[u8]) -> ApiResult<Value> {
    let text = std::str::from_utf8(body)
        .map_err(|e| ApiError::bad_request(format!("apply body is not UTF-8: {e}")))?;
    let cfg: Value = serde_saphyr::from_str(text)
        .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))?;
    if !cfg.is_object() {
        return Err(ApiError::bad_request("apply body must be an object"));
    }
    for f in ["apiVersion", "kind"] {
        if cfg.get(f).and_then(Value::as_str).is_none_or(str::is_empty) {
            return Err(ApiError::bad_request(format!(
                "invalid object: {f} must be set in an applied configuration"
            )));
        }
    }
    Ok(cfg)
}

/// The message of an apply conflict, worded as kube-apiserver's (`getConflictMessage` in
/// k8s.io/apiserver's fieldmanager/internal/conflict.go): one conflict on one line, several
/// grouped by manager (sorted), one `- <field>` line each.
fn conflict_message(conflicts: &[ssa::Conflict]) -> String {
    if let [c] = conflicts {
        return format!(
            "Apply failed with 1 conflict: conflict with {}: {}",
            c.printed_manager(),
            c.field
        );
    }
    let mut by_manager: std::collections::BTreeMap<String, Vec<&str>> = Default::default();
    for c in conflicts {
        by_manager
            .entry(c.printed_manager())
            .or_default()
            .push(&c.field);
    }
    let lines: Vec<String> = by_manager
        .iter()
        .flat_map(|(m, fields)| {
            std::iter::once(format!("conflicts with {m}:"))
                .chain(fields.iter().map(|f| format!("- {f}")))
        })
        .collect();
    format!(
        "Apply failed with {} conflicts: {}",
        conflicts.len(),
        lines.join("\n")
    )
}

/// 409 of an apply that would change fields other managers own, worded as kube-apiserver's
/// ([`conflict_message`], causes `FieldManagerConflict` naming each field and manager).
fn apply_conflict(req: &Req, name: &str, conflicts: &[ssa::Conflict]) -> ApiError {
    let mut e = ApiError::conflict(req.target(), "");
    e.message = conflict_message(conflicts);
    e.details = Some(Box::new(json!({
        "name": name, "group": req.def.group, "kind": req.def.plural,
        "causes": conflicts.iter().map(|c| json!({
            "reason": "FieldManagerConflict",
            "message": format!("conflict with {}", c.printed_manager()),
            "field": c.field,
        })).collect::<Vec<_>>(),
    })));
    e
}

#[cfg(test)]
mod conflict_tests {
    use super::*;

    fn conflict(manager: &str, operation: &str, subresource: &str, field: &str) -> ssa::Conflict {
        ssa::Conflict {
            manager: manager.into(),
            api_version: "v1".into(),
            operation: operation.into(),
            subresource: subresource.into(),
            field: field.into(),
        }
    }

    #[test]
    fn conflicts_are_worded_as_kube_apiserver_words_them() {
        let one = [conflict("editor", "Update", "", ".data.d")];
        assert_eq!(
            conflict_message(&one),
            r#"Apply failed with 1 conflict: conflict with "editor" using v1: .data.d"#
        );
        let many = [
            conflict("zed", "Apply", "", ".data.a"),
            conflict("ctl", "Update", "status", ".status.x"),
            conflict("zed", "Apply", "", ".data.b"),
        ];
        assert_eq!(
            conflict_message(&many),
            "Apply failed with 3 conflicts: conflicts with \"ctl\" with subresource \"status\" using v1:\n- .status.x\nconflicts with \"zed\":\n- .data.a\n- .data.b"
        );
    }
}
