//! Discovery documents: legacy (`APIVersions`, `APIGroupList`, `APIResourceList`) and
//! aggregated (`APIGroupDiscoveryList`, apidiscovery.k8s.io v2 and v2beta1), chosen by `Accept`.

use super::openapi;
use super::route::Route;
use crate::error::ApiError;
use crate::registry::{ALL_VERBS, Registry, ResourceDef};
use crate::state::ServerState;
use axum::response::{IntoResponse, Response};
use http::{HeaderMap, HeaderValue, StatusCode, header};
use serde_json::{Value, json};
use std::sync::Arc;

/// Aggregated discovery version the client accepts, if any (`v2` preferred over `v2beta1`).
pub(super) fn aggregated_version(headers: &HeaderMap) -> Option<&'static str> {
    let accept = headers.get(header::ACCEPT)?.to_str().ok()?;
    let mut best = None;
    for part in accept.split(',') {
        let p: Vec<&str> = part.split(';').map(str::trim).collect();
        if !p.contains(&"g=apidiscovery.k8s.io") || !p.contains(&"as=APIGroupDiscoveryList") {
            continue;
        }
        if p.contains(&"v=v2") {
            return Some("v2");
        }
        if p.contains(&"v=v2beta1") {
            best = Some("v2beta1");
        }
    }
    best
}

fn respond(body: Value, content_type: &str) -> Response {
    let mut resp = (StatusCode::OK, body.to_string()).into_response();
    if let Ok(v) = HeaderValue::from_str(content_type) {
        resp.headers_mut().insert(header::CONTENT_TYPE, v);
    }
    resp
}

fn gv(group: &str, version: &str) -> String {
    if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    }
}

fn sub_verbs() -> Vec<&'static str> {
    vec!["get", "patch", "update"]
}

/// Legacy `APIResourceList` entries for one group/version.
fn legacy_resources(reg: &Registry, group: &str, version: &str) -> Vec<Value> {
    let mut out = vec![];
    for d in reg
        .all()
        .iter()
        .filter(|d| d.group == group && d.versions.iter().any(|v| v == version))
    {
        let mut r = json!({
            "name": d.plural,
            "singularName": d.singular,
            "namespaced": d.namespaced,
            "kind": d.kind,
            "verbs": ALL_VERBS,
        });
        if !d.short_names.is_empty() {
            r["shortNames"] = json!(d.short_names);
        }
        if !d.categories.is_empty() {
            r["categories"] = json!(d.categories);
        }
        out.push(r);
        if d.status_subresource {
            out.push(
                json!({"name": format!("{}/status", d.plural), "singularName": "",
                "namespaced": d.namespaced, "kind": d.kind, "verbs": sub_verbs()}),
            );
        }
        if d.scale.is_some() {
            out.push(
                json!({"name": format!("{}/scale", d.plural), "singularName": "",
                "namespaced": d.namespaced, "group": "autoscaling", "version": "v1",
                "kind": "Scale", "verbs": sub_verbs()}),
            );
        }
    }
    out
}

fn aggregated_resource(d: &ResourceDef, version: &str) -> Value {
    let mut r = json!({
        "resource": d.plural,
        "responseKind": {"group": d.group, "version": version, "kind": d.kind},
        "scope": if d.namespaced { "Namespaced" } else { "Cluster" },
        "singularResource": d.singular,
        "verbs": ALL_VERBS,
    });
    if !d.short_names.is_empty() {
        r["shortNames"] = json!(d.short_names);
    }
    if !d.categories.is_empty() {
        r["categories"] = json!(d.categories);
    }
    let mut subs = vec![];
    if d.status_subresource {
        subs.push(json!({"subresource": "status",
            "responseKind": {"group": d.group, "version": version, "kind": d.kind},
            "verbs": sub_verbs()}));
    }
    if d.scale.is_some() {
        subs.push(json!({"subresource": "scale",
            "responseKind": {"group": "autoscaling", "version": "v1", "kind": "Scale"},
            "verbs": sub_verbs()}));
    }
    if !subs.is_empty() {
        r["subresources"] = json!(subs);
    }
    r
}

fn aggregated_group(reg: &Registry, group: &str, versions: &[String]) -> Value {
    let vs: Vec<Value> = versions
        .iter()
        .map(|v| {
            let resources: Vec<Value> = reg
                .all()
                .iter()
                .filter(|d| d.group == group && d.versions.iter().any(|x| x == v))
                .map(|d| aggregated_resource(d, v))
                .collect();
            json!({"version": v, "resources": resources, "freshness": "Current"})
        })
        .collect();
    let md = if group.is_empty() {
        json!({"creationTimestamp": null})
    } else {
        json!({"name": group, "creationTimestamp": null})
    };
    json!({"metadata": md, "versions": vs})
}

fn aggregated_list(items: Vec<Value>, v: &str) -> Response {
    respond(
        json!({"kind": "APIGroupDiscoveryList", "apiVersion": format!("apidiscovery.k8s.io/{v}"),
            "metadata": {}, "items": items}),
        &format!("application/json;g=apidiscovery.k8s.io;v={v};as=APIGroupDiscoveryList"),
    )
}

fn legacy_group(group: &str, versions: &[String]) -> Value {
    let vs: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": gv(group, v), "version": v}))
        .collect();
    json!({
        "name": group,
        "versions": vs,
        "preferredVersion": vs.first().cloned().unwrap_or(json!({})),
    })
}

/// Serve a non-resource route.
pub(super) fn serve(
    state: &Arc<ServerState>,
    route: &Route,
    headers: &HeaderMap,
    path: &str,
) -> Response {
    let reg = state.registry_snapshot();
    let agg = aggregated_version(headers);
    match route {
        Route::Version => respond(version(), "application/json"),
        Route::Health => (StatusCode::OK, "ok").into_response(),
        Route::Api => {
            let address = state.address.lock().map(|a| a.clone()).unwrap_or_default();
            core_api(&reg, agg, &address)
        }
        Route::Apis => api_groups(&reg, agg),
        Route::Group(g) => api_group(&reg, g).unwrap_or_else(|| not_found(path)),
        Route::GroupVersion(g, v) => resource_list(&reg, g, v).unwrap_or_else(|| not_found(path)),
        Route::OpenApi => openapi_document(&reg, path).unwrap_or_else(|| not_found(path)),
        Route::NotFound | Route::Resource { .. } => not_found(path),
    }
}

fn not_found(path: &str) -> Response {
    ApiError::path_not_found(path).into_response()
}

/// `GET /version`: the Kubernetes version this server answers as.
fn version() -> Value {
    json!({
        "major": "1", "minor": "32", "gitVersion": "v1.32.0-kmeta",
        "gitCommit": "0000000000000000000000000000000000000000", "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z", "goVersion": "go1.23.0", "compiler": "gc",
        "platform": "linux/amd64"
    })
}

/// `GET /api`: the core group, aggregated (`agg` names the discovery version) or legacy.
fn core_api(reg: &Registry, agg: Option<&str>, address: &str) -> Response {
    match agg {
        Some(v) => aggregated_list(vec![aggregated_group(reg, "", &["v1".to_string()])], v),
        None => respond(
            json!({"kind": "APIVersions", "versions": ["v1"],
                "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": address}]}),
            "application/json",
        ),
    }
}

/// `GET /apis`: every named group, aggregated or legacy.
fn api_groups(reg: &Registry, agg: Option<&str>) -> Response {
    let groups = reg.groups();
    match agg {
        Some(v) => aggregated_list(
            groups
                .iter()
                .map(|(g, vs)| aggregated_group(reg, g, vs))
                .collect(),
            v,
        ),
        None => respond(
            json!({"kind": "APIGroupList", "apiVersion": "v1",
                "groups": groups.iter().map(|(g, vs)| legacy_group(g, vs)).collect::<Vec<_>>()}),
            "application/json",
        ),
    }
}

/// `GET /apis/<group>`: the group's `APIGroup`; `None` for a group not served.
fn api_group(reg: &Registry, group: &str) -> Option<Response> {
    let (name, vs) = reg.groups().into_iter().find(|(name, _)| name == group)?;
    let mut v = legacy_group(&name, &vs);
    v["kind"] = json!("APIGroup");
    v["apiVersion"] = json!("v1");
    Some(respond(v, "application/json"))
}

/// `GET /api/v1`, `/apis/<group>/<version>`: the `APIResourceList`; `None` when not served.
fn resource_list(reg: &Registry, group: &str, version: &str) -> Option<Response> {
    if !reg.serves_group_version(group, version) {
        return None;
    }
    Some(respond(
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv(group, version),
            "resources": legacy_resources(reg, group, version)}),
        "application/json",
    ))
}

/// `GET /openapi/v3` (the index) and `/openapi/v3/api[s/<group>]/<version>`; `None` for a path
/// naming no served group version.
fn openapi_document(reg: &Registry, path: &str) -> Option<Response> {
    let rest = path.trim_start_matches("/openapi/");
    if rest == "v3" || rest == "v3/" {
        return Some(respond(openapi::root(reg), "application/json"));
    }
    let gvp = rest.strip_prefix("v3/")?;
    let segs: Vec<&str> = gvp.split('/').collect();
    let doc = match segs.as_slice() {
        ["api", v] => openapi::group_version(reg, "", v),
        ["apis", g, v] => openapi::group_version(reg, g, v),
        _ => None,
    }?;
    Some(respond(doc, "application/json"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_negotiation() {
        let mut h = HeaderMap::new();
        h.insert(header::ACCEPT, HeaderValue::from_static("application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json"));
        assert_eq!(aggregated_version(&h), Some("v2"));
        h.insert(header::ACCEPT, HeaderValue::from_static("application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json"));
        assert_eq!(aggregated_version(&h), Some("v2beta1"));
        h.insert(
            header::ACCEPT,
            HeaderValue::from_static("application/json, */*"),
        );
        assert_eq!(aggregated_version(&h), None);
    }
}
