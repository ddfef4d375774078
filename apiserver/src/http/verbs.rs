//! One handler per verb of a resource request: get, list (or watch), create, update, patch,
//! delete and deletecollection. Each parses what it needs, calls the engine under the state lock
//! and renders the answer.

use super::admit::Write;
use super::params::{
    decode_body, delete_opts, get_rv, list_opts, media_type, parse_json, write_opts,
};
use super::response::{
    json_response, list_body, list_body_stored, obj_response, partial, table, wants_metadata,
    wants_table, warned,
};
use super::route::Route;
use super::watch::{check_list_options, watch};
use crate::engine::{Deleted, Inner, ListResult, Req, WriteOpts};
use crate::error::{ApiError, ApiResult};
use crate::state::ServerState;
use axum::extract::Request;
use axum::response::Response;
use bytes::Bytes;
use http::{HeaderMap, Method, StatusCode};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::Arc;

/// Everything a verb handler works with.
struct Call<'a> {
    state: &'a Arc<ServerState>,
    req: Req,
    q: HashMap<String, String>,
    headers: HeaderMap,
    body: Bytes,
    wopts: WriteOpts,
    user: Option<crate::authn::UserInfo>,
}

impl Call<'_> {
    fn is_scale(&self) -> bool {
        self.req.sub.as_deref() == Some("scale")
    }

    fn list_kind(&self) -> String {
        format!("{}List", self.req.def.kind)
    }

    fn api_version(&self) -> String {
        self.req.def.api_version(&self.req.version)
    }
}

/// Serve a request for a resource route.
pub(super) async fn resource_request(
    state: &Arc<ServerState>,
    route: Route,
    q: HashMap<String, String>,
    request: Request,
) -> ApiResult<Response> {
    let req = resolve(state, route, request.method(), request.uri().path())?;
    let user = request
        .extensions()
        .get::<crate::authn::UserInfo>()
        .cloned();
    let method = request.method().clone();
    let headers = request.headers().clone();
    let body = axum::body::to_bytes(request.into_body(), 64 * 1024 * 1024)
        .await
        .map_err(|e| ApiError::bad_request(format!("reading request body: {e}")))?;
    let body = decode_body(&method, &media_type(&headers, "application/json"), body)?;
    let mut wopts = write_opts(&q, &headers)?;
    wopts.user = user.as_ref().map(|u| (u.name.clone(), u.groups.clone()));
    if matches!(method, Method::POST | Method::PUT | Method::PATCH) {
        wopts.check = super::auth::write_check(state, user.as_ref(), &req);
    }
    let call = Call {
        state,
        req,
        q,
        headers,
        body,
        wopts,
        user,
    };
    match method {
        Method::GET if call.req.name.is_some() => get(call).await,
        Method::GET => list(call).await,
        Method::POST => create(&call).await,
        Method::PUT => update(&call).await,
        Method::PATCH => patch(&call).await,
        Method::DELETE if call.req.name.is_none() => delete_collection(&call),
        Method::DELETE => delete(&call).await,
        _ => Err(ApiError::method_not_allowed(method.as_str())),
    }
}

/// The served resource a route names, or 404 when it names none (unknown resource, namespace
/// on a cluster-scoped resource or missing on a namespaced item, unknown subresource).
fn resolve(state: &ServerState, route: Route, method: &Method, path: &str) -> ApiResult<Req> {
    let Route::Resource {
        group,
        version,
        ns,
        plural,
        name,
        sub,
    } = route
    else {
        return Err(ApiError::path_not_found(path));
    };
    let Some(def) = state.lookup(&group, &version, &plural) else {
        return Err(ApiError::path_not_found(path));
    };
    if def.namespaced != ns.is_some()
        && !(def.namespaced && name.is_none() && method == Method::GET)
    {
        return Err(ApiError::path_not_found(path));
    }
    if let Some(s) = &sub {
        let ok = (s == "status" && def.status_subresource) || (s == "scale" && def.scale.is_some());
        if !ok || name.is_none() {
            return Err(ApiError::path_not_found(path));
        }
    }
    Ok(Req {
        def,
        version,
        ns,
        name,
        sub,
    })
}

async fn get(call: Call<'_>) -> ApiResult<Response> {
    let Call {
        state,
        req,
        q,
        headers,
        ..
    } = &call;
    if let Some(rv) = get_rv(q)? {
        state.reach_rv(rv).await?;
    }
    let obj = state.lock().get(req)?;
    if wants_metadata(headers) && !call.is_scale() {
        return Ok(obj_response(StatusCode::OK, &partial(&obj)));
    }
    if call.is_scale() {
        let scale = Inner::to_scale(req, &obj)?;
        return Ok(obj_response(StatusCode::OK, &scale));
    }
    if wants_table(headers) {
        let rv = obj
            .pointer("/metadata/resourceVersion")
            .cloned()
            .unwrap_or(Value::Null);
        return Ok(obj_response(
            StatusCode::OK,
            &table(req, &[&obj], json!({"resourceVersion": rv})),
        ));
    }
    Ok(obj_response(StatusCode::OK, &obj))
}

async fn list(call: Call<'_>) -> ApiResult<Response> {
    let lopts = list_opts(&call.q, &call.req.def, call.state.shard_selector_served())?;
    let meta_only = wants_metadata(&call.headers);
    if call.q.get("watch").is_some_and(|w| w == "true" || w == "1") {
        // a watch-list not older than a resourceVersion the server has not reached waits for
        // it, as its initial state would be older (504 after `rv_wait`, as kube-apiserver)
        if call.q.get("sendInitialEvents").is_some_and(|b| b == "true")
            && let Some(rv) = lopts.not_older_than()
        {
            call.state.reach_rv(rv).await?;
        }
        return watch(call.state, call.req, &call.q, lopts, meta_only);
    }
    check_list_options(&call.q)?;
    if let Some(rv) = lopts.not_older_than() {
        call.state.reach_rv(rv).await?;
    }
    if !meta_only && !wants_table(&call.headers) {
        // the items' stored texts are copied under the lock and written out after it
        let res = call.state.lock().list_stored(&call.req, &lopts)?;
        return Ok(json_response(
            StatusCode::OK,
            list_body_stored(&call.list_kind(), &call.api_version(), res),
        ));
    }
    let res = call.state.lock().list(&call.req, &lopts)?;
    if wants_table(&call.headers) {
        let mut md = json!({"resourceVersion": res.rv.to_string()});
        if let Some(c) = &res.continue_token {
            md["continue"] = json!(c);
        }
        let items: Vec<&Value> = res.items.iter().map(|o| &**o).collect();
        return Ok(obj_response(StatusCode::OK, &table(&call.req, &items, md)));
    }
    if meta_only {
        // kube-apiserver builds the PartialObjectMetadataList from the list's resourceVersion,
        // continue and remainingItemCount alone: the items are sharded, shardInfo is dropped
        // (`asPartialObjectMetadataList`); tables likewise
        let res = ListResult {
            items: res.items.iter().map(|o| Arc::new(partial(o))).collect(),
            shard: None,
            ..res
        };
        return Ok(json_response(
            StatusCode::OK,
            list_body("PartialObjectMetadataList", "meta.k8s.io/v1", res),
        ));
    }
    Ok(json_response(
        StatusCode::OK,
        list_body(&call.list_kind(), &call.api_version(), res),
    ))
}

impl Call<'_> {
    fn admitted(&self) -> Write<'_> {
        Write {
            state: self.state,
            req: &self.req,
            wopts: &self.wopts,
            user: self.user.as_ref(),
        }
    }
}

async fn create(call: &Call<'_>) -> ApiResult<Response> {
    if call.req.name.is_some() {
        return Err(ApiError::method_not_allowed("POST on an object"));
    }
    let v = parse_json(&call.body)?;
    let (state, req) = (call.state, &call.req);
    let (obj, warnings) = call
        .admitted()
        .run(|i, o| i.create(&state.admission, req, v.clone(), o, false))
        .await;
    answer(
        state,
        obj.map(|o| obj_response(StatusCode::CREATED, &o)),
        &warnings,
    )
}

async fn update(call: &Call<'_>) -> ApiResult<Response> {
    if call.req.name.is_none() {
        return Err(ApiError::method_not_allowed("PUT on a collection"));
    }
    let v = parse_json(&call.body)?;
    let (state, req) = (call.state, &call.req);
    let write = call.admitted();
    let (obj, warnings) = if call.is_scale() {
        write
            .run(|i, o| i.update_scale(&state.admission, req, v.clone(), o))
            .await
    } else {
        write
            .run(|i, o| i.update(&state.admission, req, v.clone(), o))
            .await
    };
    answer(
        state,
        obj.map(|o| obj_response(StatusCode::OK, &o)),
        &warnings,
    )
}

/// A write's answer with its `Warning` headers, also when it failed (kube-apiserver sends the
/// warnings of admission with a refusal too); an error without warnings is left to the router
/// (which remembers a 403 as a denial).
fn answer(
    state: &ServerState,
    result: ApiResult<Response>,
    warnings: &[String],
) -> ApiResult<Response> {
    use axum::response::IntoResponse as _;
    match result {
        Ok(r) => Ok(warned(r, warnings)),
        Err(e) if warnings.is_empty() => Err(e),
        Err(e) => {
            if e.code == 403 {
                state.record_denial(&e.message);
            }
            Ok(warned(e.into_response(), warnings))
        }
    }
}

async fn patch(call: &Call<'_>) -> ApiResult<Response> {
    if call.req.name.is_none() {
        return Err(ApiError::method_not_allowed("PATCH on a collection"));
    }
    let ct = media_type(&call.headers, "");
    let (state, req) = (call.state, &call.req);
    let existed = state.lock().get(req).is_ok();
    let (obj, warnings) = call
        .admitted()
        .run(|i, o| i.patch(&state.admission, req, &ct, &call.body, o))
        .await;
    // a patch that created the object (apply) answers 201
    let code = if existed || call.is_scale() {
        StatusCode::OK
    } else {
        StatusCode::CREATED
    };
    answer(state, obj.map(|o| obj_response(code, &o)), &warnings)
}

fn delete_collection(call: &Call<'_>) -> ApiResult<Response> {
    let dopts = delete_opts(&call.q, &call.body)?;
    let lopts = list_opts(&call.q, &call.req.def, call.state.shard_selector_served())?;
    let (state, req) = (call.state, &call.req);
    let items = state.write(|i| i.delete_collection(&state.admission, req, &lopts, &dopts))?;
    let rv = state.resource_version();
    let res = ListResult {
        items,
        rv,
        continue_token: None,
        remaining: None,
        shard: None,
    };
    Ok(json_response(
        StatusCode::OK,
        list_body(&call.list_kind(), &call.api_version(), res),
    ))
}

async fn delete(call: &Call<'_>) -> ApiResult<Response> {
    let mut dopts = delete_opts(&call.q, &call.body)?;
    dopts.user = call.wopts.user.clone();
    let (state, req) = (call.state, &call.req);
    let mut wopts = call.wopts.clone();
    wopts.dry_run = dopts.dry_run;
    let write = Write {
        state,
        req,
        wopts: &wopts,
        user: call.user.as_ref(),
    };
    let warnings = write.admit_delete().await?;
    let out = match state.write(|i| i.delete(&state.admission, req, &dopts)) {
        Ok(out) => out,
        Err(e) => return answer(state, Err(e), &warnings),
    };
    let obj = match out {
        Deleted::Pending(o) => o,
        Deleted::Gone(o) => match removed_status(req, &o) {
            Some(status) => return Ok(warned(obj_response(StatusCode::OK, &status), &warnings)),
            None => o,
        },
    };
    Ok(warned(obj_response(StatusCode::OK, &obj), &warnings))
}

/// What a DELETE that removed the object answers instead of the object: a `Success` Status
/// naming it for built-in kinds other than pods (as kube-apiserver's registries); `None` for
/// custom resources and pods, which answer with the object.
fn removed_status(req: &Req, obj: &Value) -> Option<Value> {
    if !req.def.is_builtin() || req.def.plural == "pods" {
        return None;
    }
    let mut details = json!({
        "name": req.name,
        "kind": req.def.plural,
        "uid": obj.get("metadata").and_then(|m| m.get("uid")),
    });
    if !req.def.group.is_empty() {
        details["group"] = json!(req.def.group);
    }
    Some(json!({"kind": "Status", "apiVersion": "v1", "metadata": {},
        "status": "Success", "details": details}))
}
