//! Building responses: JSON objects and lists, `Warning` headers, metadata-only and `Table`
//! views, injected faults, streams.

use crate::engine::{Inner, ListResult, Req};
use crate::error::ApiError;
use crate::store::Packed;
use axum::body::Body;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::{HeaderMap, HeaderValue, StatusCode, header};
use serde_json::{Value, json};
use std::convert::Infallible;

pub(super) fn json_response(code: StatusCode, body: Vec<u8>) -> Response {
    let mut resp = (code, body).into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

/// Adds a `Warning: 299 - "text"` header per warning (RFC 7234 warn-code 299, as kube-apiserver).
pub(super) fn warned(mut response: Response, warnings: &[String]) -> Response {
    for w in warnings {
        let text = format!("299 - {}", serde_json::Value::String(w.clone()));
        if let Ok(v) = HeaderValue::from_str(&text) {
            response.headers_mut().append(header::WARNING, v);
        }
    }
    response
}

pub(super) fn obj_response(code: StatusCode, obj: &Value) -> Response {
    json_response(code, serde_json::to_vec(obj).unwrap_or_default())
}

pub(super) fn fault_response(code: u16, retry_after: u64) -> Response {
    let e = match code {
        429 => ApiError::too_many_requests(retry_after),
        409 => ApiError::new(
            409,
            "Conflict",
            "Operation cannot be fulfilled: the object has been modified; please apply your changes to the latest version and try again (injected fault)",
        ),
        500 => ApiError::internal("injected fault"),
        503 => {
            let mut e = ApiError::service_unavailable(
                "the server is currently unable to handle the request (injected fault)",
            );
            e.retry_after = Some(retry_after);
            e
        }
        410 => ApiError::gone("too old resource version (injected fault)"),
        c => ApiError::new(c, "InternalError", "injected fault"),
    };
    e.into_response()
}

/// Serialize a list without cloning items into one big `Value`.
pub(super) fn list_body(kind: &str, api_version: &str, res: ListResult) -> Vec<u8> {
    list_body_of(kind, api_version, res, |o, out| write_value(o, out))
}

/// The same for a list of stored objects: each one's stored text when it is in the list's
/// version (nothing decoded), else decoded and converted.
pub(super) fn list_body_stored(kind: &str, api_version: &str, res: ListResult<Packed>) -> Vec<u8> {
    list_body_of(kind, api_version, res, |p, out| {
        if p.head().get("apiVersion").and_then(Value::as_str) == Some(api_version) {
            out.extend_from_slice(p.json());
        } else {
            write_value(&Inner::present(&p.value(), api_version), out);
        }
    })
}

/// One item's JSON (`null` for the impossible failure to serialise a `Value`).
fn write_value(o: &Value, out: &mut Vec<u8>) {
    if serde_json::to_writer(&mut *out, o).is_err() {
        out.extend_from_slice(b"null");
    }
}

/// A list's body, each item written by `write`.
fn list_body_of<T>(
    kind: &str,
    api_version: &str,
    res: ListResult<T>,
    write: impl Fn(&T, &mut Vec<u8>),
) -> Vec<u8> {
    let mut md = json!({"resourceVersion": res.rv.to_string()});
    if let Some(c) = &res.continue_token {
        md["continue"] = json!(c);
    }
    if let Some(r) = res.remaining {
        md["remainingItemCount"] = json!(r);
    }
    if let Some(s) = &res.shard {
        md["shardInfo"] = json!({"selector": s});
    }
    let mut out = Vec::with_capacity(64 + res.items.len() * 512);
    out.extend_from_slice(
        format!(
            "{{\"kind\":{},\"apiVersion\":{},\"metadata\":{},\"items\":[",
            json!(kind),
            json!(api_version),
            md
        )
        .as_bytes(),
    );
    for (i, item) in res.items.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write(item, &mut out);
    }
    out.extend_from_slice(b"]}");
    out
}

/// Whether the first media type of the `Accept` header asks for the view `as=<what>`.
fn accepts_as(headers: &HeaderMap, what: &str) -> bool {
    headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .and_then(|a| a.split(',').next())
        .is_some_and(|first| first.contains(&format!("as={what}")))
}

pub(super) fn wants_metadata(headers: &HeaderMap) -> bool {
    accepts_as(headers, "PartialObjectMetadata")
}

/// `PartialObjectMetadata` view of an object (metadata-only requests).
pub(super) fn partial(obj: &Value) -> Value {
    json!({
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": obj.get("metadata").cloned().unwrap_or(json!({})),
    })
}

pub(super) fn wants_table(headers: &HeaderMap) -> bool {
    accepts_as(headers, "Table")
}

/// The server-side `Table` kubectl asks for (see [`super::table`]).
pub(super) fn table(req: &Req, items: &[&Value], metadata: Value) -> Value {
    super::table::render(
        &req.def,
        &req.version,
        items,
        metadata,
        jiff::Timestamp::now(),
    )
}

pub(super) fn stream_response<S>(s: S) -> Response
where
    S: futures::Stream<Item = Result<Bytes, Infallible>> + Send + 'static,
{
    let mut resp = Response::new(Body::from_stream(s));
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn list_body_is_valid_json() {
        let res = ListResult {
            items: vec![Arc::new(json!({"a": 1}))],
            rv: 7,
            continue_token: Some("x".into()),
            remaining: Some(3),
            shard: None,
        };
        let v: Value =
            serde_json::from_slice(&list_body("ConfigMapList", "v1", res)).unwrap_or_default();
        assert_eq!(v["metadata"]["resourceVersion"], "7");
        assert_eq!(v["metadata"]["remainingItemCount"], 3);
        assert_eq!(v["items"][0]["a"], 1);
    }

    #[test]
    fn a_stored_list_is_written_as_the_decoded_one() {
        let objs = [
            json!({"apiVersion": "v1", "kind": "ConfigMap", "a": {"z": 1, "b": [2]}}),
            json!({"kind": "ConfigMap", "apiVersion": "v1", "metadata": {"name": "x"}}),
        ];
        let list = |items| ListResult {
            items,
            rv: 3,
            continue_token: None,
            remaining: None,
            shard: None,
        };
        let decoded = list_body(
            "ConfigMapList",
            "v1",
            list(objs.iter().cloned().map(Arc::new).collect()),
        );
        let stored = list_body_stored(
            "ConfigMapList",
            "v1",
            ListResult {
                items: objs
                    .iter()
                    .map(|o| Packed::pack(&Arc::new(o.clone()), false))
                    .collect(),
                rv: 3,
                continue_token: None,
                remaining: None,
                shard: None,
            },
        );
        assert_eq!(stored, decoded);
    }
}
