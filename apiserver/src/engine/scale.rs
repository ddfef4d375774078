//! The `/scale` subresource: an `autoscaling/v1` Scale rendered from the replicas paths of the
//! resource, written back through the main resource.

use super::body::apply_patch;
use super::inner::Inner;
use super::object::{meta, meta_str};
use super::request::{Req, WriteOpts};
use crate::error::{ApiError, ApiResult};
use crate::hooks::Admission;
use crate::patch;
use crate::store::{Key, Obj};
use serde_json::{Map, Value, json};
use std::sync::Arc;

fn value_at_path<'a>(v: &'a Value, path: &str) -> Option<&'a Value> {
    let mut cur = v;
    for p in path.trim_start_matches('.').split('.') {
        cur = cur.get(p)?;
    }
    Some(cur)
}

fn set_at_path(v: &mut Value, path: &str, val: Value) {
    let parts: Vec<&str> = path.trim_start_matches('.').split('.').collect();
    let mut cur = v;
    for (i, p) in parts.iter().enumerate() {
        if !cur.is_object() {
            *cur = json!({});
        }
        if i == parts.len() - 1 {
            cur[*p] = val;
            return;
        }
        if cur.get(*p).is_none() {
            cur[*p] = json!({});
        }
        cur = &mut cur[*p];
    }
}

impl Inner {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn patch_scale(
        &mut self,
        adm: &Admission,
        req: &Req,
        key: &Key,
        old: &Obj,
        content_type: &str,
        patch: &Value,
        opts: &WriteOpts,
    ) -> ApiResult<Obj> {
        let scale = Self::to_scale(req, old)?;
        let patched = apply_patch(
            (*scale).clone(),
            content_type,
            patch,
            &patch::builtin_list_kind,
        )?;
        self.write_scale(adm, req, key, old, patched, opts)
    }

    /// Render the `/scale` subresource of an object.
    pub(crate) fn to_scale(req: &Req, obj: &Obj) -> ApiResult<Obj> {
        let Some(spec) = &req.def.scale else {
            return Err(ApiError::path_not_found("scale"));
        };
        let m = meta(obj).cloned().unwrap_or_default();
        let mut md = Map::new();
        for k in [
            "name",
            "namespace",
            "uid",
            "resourceVersion",
            "creationTimestamp",
        ] {
            if let Some(v) = m.get(k) {
                md.insert(k.into(), v.clone());
            }
        }
        let mut status = json!({
            "replicas": value_at_path(obj, &spec.status_replicas_path).cloned().unwrap_or(json!(0)),
        });
        if let Some(p) = &spec.label_selector_path
            && let Some(sel) = value_at_path(obj, p)
        {
            status["selector"] = sel.clone();
        }
        Ok(Arc::new(json!({
            "kind": "Scale",
            "apiVersion": "autoscaling/v1",
            "metadata": md,
            "spec": {"replicas": value_at_path(obj, &spec.spec_replicas_path).cloned().unwrap_or(json!(0))},
            "status": status,
        })))
    }

    /// PUT `/scale` (also used by PATCH `/scale`).
    fn write_scale(
        &mut self,
        adm: &Admission,
        req: &Req,
        key: &Key,
        old: &Obj,
        scale: Value,
        opts: &WriteOpts,
    ) -> ApiResult<Obj> {
        let Some(spec) = req.def.scale.clone() else {
            return Err(ApiError::path_not_found("scale"));
        };
        if let Some(rv) = meta_str(&scale, "resourceVersion").filter(|s| !s.is_empty())
            && Some(rv) != meta_str(old, "resourceVersion")
        {
            return Err(ApiError::stale(req.target()));
        }
        let replicas = scale
            .get("spec")
            .and_then(|s| s.get("replicas"))
            .cloned()
            .unwrap_or(json!(0));
        let mut new = (**old).clone();
        set_at_path(&mut new, &spec.spec_replicas_path, replicas);
        let main = Req {
            sub: None,
            ..req.clone()
        };
        let res = self.commit(adm, &main, key, old, new, opts, None)?;
        Self::to_scale(req, &res)
    }

    /// PUT `/scale`.
    pub(crate) fn update_scale(
        &mut self,
        adm: &Admission,
        req: &Req,
        body: Value,
        opts: &WriteOpts,
    ) -> ApiResult<Obj> {
        let (key, old) = self.stored(req)?;
        self.write_scale(adm, req, &key, &old, body, opts)
    }
}
