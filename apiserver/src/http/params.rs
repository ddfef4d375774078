//! Query parameters and request bodies turned into engine options: the verb, the field
//! manager, list and delete options, and bodies in JSON, YAML or protobuf.

use super::route::Route;
use crate::engine::{DeleteOpts, FieldValidation, ListOpts, Propagation, WriteOpts};
use crate::error::{ApiError, ApiResult};
use crate::registry::ResourceDef;
use crate::selector::{FieldSelector, LabelSelector};
use crate::shard::ShardSelector;
use bytes::Bytes;
use http::{HeaderMap, Method, header};
use serde_json::{Value, json};
use std::collections::HashMap;

pub(super) fn query_map(uri: &http::Uri) -> HashMap<String, String> {
    axum::extract::Query::<Vec<(String, String)>>::try_from_uri(uri)
        .map(|q| q.0.into_iter().collect())
        .unwrap_or_default()
}

fn field_manager(q: &HashMap<String, String>, headers: &HeaderMap) -> String {
    if let Some(m) = q.get("fieldManager").filter(|m| !m.is_empty()) {
        return m.clone();
    }
    headers
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .and_then(|ua| ua.split('/').next())
        .filter(|s| !s.is_empty())
        .unwrap_or("unknown")
        .to_string()
}

pub(super) fn verb_of(method: &Method, route: &Route, q: &HashMap<String, String>) -> &'static str {
    let item = matches!(route, Route::Resource { name: Some(_), .. });
    match *method {
        Method::GET if item => "get",
        Method::GET if q.get("watch").is_some_and(|w| w == "true" || w == "1") => "watch",
        Method::GET => "list",
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE if item => "delete",
        Method::DELETE => "deletecollection",
        _ => "unknown",
    }
}

pub(super) fn parse_json(body: &[u8]) -> ApiResult<Value> {
    serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("error decoding request body as JSON: {e}")))
}

/// The `shardSelector` of a list or watch (KEP-5866) when the server serves it (`served`);
/// otherwise the parameter is ignored as an unknown one, as by a server without the feature
/// (no filtering, and so no `shardInfo` echo).
///
/// An empty value is no selector (kube-apiserver parses it only when non-empty); a malformed
/// one is a 400 `invalid shard selector: ...`. kube-apiserver's alpha words the refusal so but
/// returns it from the registry as a plain error, which its handler turns into a 500; the KEP
/// does not name a status, and this server answers 400 as for a malformed label selector,
/// which is what the client got wrong.
fn shard_selector(q: &HashMap<String, String>, served: bool) -> ApiResult<Option<ShardSelector>> {
    match q.get("shardSelector") {
        Some(text) if served && !text.is_empty() => ShardSelector::parse(text)
            .map(Some)
            .map_err(|e| ApiError::bad_request(format!("invalid shard selector: {e}"))),
        _ => Ok(None),
    }
}

/// List options of the query; `shards` whether `shardSelector` is served.
pub(super) fn list_opts(
    q: &HashMap<String, String>,
    def: &ResourceDef,
    shards: bool,
) -> ApiResult<ListOpts> {
    let label = LabelSelector::parse(q.get("labelSelector").map(String::as_str).unwrap_or(""))
        .map_err(|e| ApiError::bad_request(format!("labelSelector: {e}")))?;
    let field = FieldSelector::parse(q.get("fieldSelector").map(String::as_str).unwrap_or(""))
        .map_err(|e| ApiError::bad_request(format!("fieldSelector: {e}")))?;
    let field = def.stored_selector(field);
    let limit = match q.get("limit") {
        Some(l) => l
            .parse::<i64>()
            .map_err(|_| ApiError::bad_request(format!("limit: invalid value {l:?}")))?
            .max(0) as usize,
        None => 0,
    };
    Ok(ListOpts {
        label,
        field,
        shard: shard_selector(q, shards)?,
        limit,
        continue_token: q.get("continue").filter(|c| !c.is_empty()).cloned(),
        resource_version: q.get("resourceVersion").filter(|c| !c.is_empty()).cloned(),
        resource_version_match: q
            .get("resourceVersionMatch")
            .filter(|c| !c.is_empty())
            .cloned(),
    })
}

/// `resourceVersion` of a GET: `None` for unset or `"0"` (any state; this server's is the
/// current one), `Some(n)` for "not older than n".
pub(super) fn get_rv(q: &HashMap<String, String>) -> ApiResult<Option<u64>> {
    match q.get("resourceVersion").map(String::as_str) {
        None | Some("") | Some("0") => Ok(None),
        Some(r) => r
            .parse::<u64>()
            .map(Some)
            .map_err(|_| ApiError::bad_request(format!("invalid resource version: {r:?}"))),
    }
}

pub(super) fn delete_opts(q: &HashMap<String, String>, body: &[u8]) -> ApiResult<DeleteOpts> {
    let b: Value = if body.iter().all(u8::is_ascii_whitespace) {
        json!({})
    } else {
        parse_json(body)?
    };
    let prop = b
        .get("propagationPolicy")
        .and_then(Value::as_str)
        .map(str::to_string)
        .or_else(|| q.get("propagationPolicy").cloned())
        .or_else(|| {
            match b
                .get("orphanDependents")
                .and_then(Value::as_bool)
                .or_else(|| q.get("orphanDependents").map(|v| v == "true"))
            {
                Some(true) => Some("Orphan".into()),
                Some(false) => Some("Background".into()),
                None => None,
            }
        });
    let propagation = match prop.as_deref() {
        None => None,
        Some("Background") => Some(Propagation::Background),
        Some("Foreground") => Some(Propagation::Foreground),
        Some("Orphan") => Some(Propagation::Orphan),
        Some(other) => {
            return Err(ApiError::new(
                422,
                "Invalid",
                format!(
                    "propagationPolicy: Unsupported value: \"{other}\": supported values: \"Foreground\", \"Background\", \"Orphan\""
                ),
            ));
        }
    };
    let pre = b.get("preconditions");
    let dry = b
        .get("dryRun")
        .and_then(Value::as_array)
        .is_some_and(|a| a.iter().any(|x| x == "All"))
        || q.get("dryRun").is_some_and(|d| d == "All");
    Ok(DeleteOpts {
        propagation,
        uid: pre
            .and_then(|p| p.get("uid"))
            .and_then(Value::as_str)
            .map(str::to_string),
        resource_version: pre
            .and_then(|p| p.get("resourceVersion"))
            .and_then(Value::as_str)
            .map(str::to_string),
        dry_run: dry,
        user: None,
    })
}

/// The media type of the `Content-Type` header without parameters (`default` without one).
pub(super) fn media_type(headers: &HeaderMap, default: &str) -> String {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or(default)
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_string()
}

/// The JSON of a POST or PUT body sent as JSON, YAML or protobuf (other methods' bodies pass
/// unchanged): 415 for other media types.
pub(super) fn decode_body(method: &Method, media_type: &str, body: Bytes) -> ApiResult<Bytes> {
    if !matches!(*method, Method::POST | Method::PUT) {
        return Ok(body);
    }
    match media_type {
        "application/json" | "" => Ok(body),
        "application/yaml" => {
            let text = std::str::from_utf8(&body)
                .map_err(|e| ApiError::bad_request(format!("request body is not UTF-8: {e}")))?;
            let v: Value = serde_saphyr::from_str(text)
                .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))?;
            Ok(Bytes::from(serde_json::to_vec(&v).unwrap_or_default()))
        }
        "application/vnd.kubernetes.protobuf" => {
            let v = crate::proto::decode(&body).map_err(|e| {
                let mut err = ApiError::unsupported_media_type(
                    media_type,
                    &["application/json", "application/yaml"],
                );
                err.message = format!("{}: {e}", err.message);
                err
            })?;
            Ok(Bytes::from(serde_json::to_vec(&v).unwrap_or_default()))
        }
        other => Err(ApiError::unsupported_media_type(
            other,
            &[
                "application/json",
                "application/yaml",
                "application/vnd.kubernetes.protobuf",
            ],
        )),
    }
}

/// Options of writes: `fieldManager` (or the User-Agent), `dryRun`, `force`, `fieldValidation`.
pub(super) fn write_opts(q: &HashMap<String, String>, headers: &HeaderMap) -> ApiResult<WriteOpts> {
    Ok(WriteOpts {
        field_manager: field_manager(q, headers),
        dry_run: q.get("dryRun").is_some_and(|d| d == "All"),
        force: q.get("force").is_some_and(|f| f == "true"),
        field_validation: FieldValidation::parse(q.get("fieldValidation").map(String::as_str))?,
        check: None,
        external: None,
        user: None,
    })
}
