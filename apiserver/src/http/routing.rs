//! The axum entry point: every request is routed to discovery or to a resource verb, after
//! injected latency and faults, and counted.

use super::auth;
use super::discovery;
use super::params::{query_map, verb_of};
use super::response::fault_response;
use super::route::{Route, parse_path};
use super::verbs::resource_request;
use crate::state::ServerState;
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use std::collections::HashMap;
use std::sync::Arc;

/// Serve one request: authenticated and authorized first, then discovery or a resource verb.
pub(super) async fn handle(
    State(state): State<Arc<ServerState>>,
    mut request: Request,
) -> Response {
    let route = parse_path(request.uri().path());
    let q = query_map(request.uri());
    if let Some(denied) = auth::guard(&state, &route, &q, &mut request) {
        if let Route::Resource { plural, sub, .. } = &route {
            let verb = verb_of(request.method(), &route, &q);
            let resource = resource_name(plural, sub.as_deref());
            state
                .counters
                .record(verb, &resource, denied.status().as_u16());
        }
        return denied;
    }
    match route {
        Route::Resource { .. } => serve_resource(&state, route, q, request).await,
        _ => serve_non_resource(&state, &route, request).await,
    }
}

/// `plural`, or `plural/sub` for a subresource, as faults and counters name a resource.
fn resource_name(plural: &str, sub: Option<&str>) -> String {
    match sub {
        Some(s) => format!("{plural}/{s}"),
        None => plural.to_owned(),
    }
}

/// Discovery, OpenAPI, version and health; the OpenAPI documents take injected faults.
async fn serve_non_resource(state: &Arc<ServerState>, route: &Route, request: Request) -> Response {
    if matches!(route, Route::OpenApi)
        && let Some(refused) = openapi_fault(state, user_agent_of(&request)).await
    {
        return refused;
    }
    discovery::serve(state, route, request.headers(), request.uri().path())
}

/// A resource verb: injected latency and faults first, then the answer, counted and logged.
async fn serve_resource(
    state: &Arc<ServerState>,
    route: Route,
    q: HashMap<String, String>,
    request: Request,
) -> Response {
    let Route::Resource {
        group,
        plural,
        sub,
        ns: url_ns,
        name,
        ..
    } = &route
    else {
        // not reached: `handle` sends only resource routes here
        return serve_non_resource(state, &route, request).await;
    };
    let verb = verb_of(request.method(), &route, &q);
    let resource = resource_name(plural, sub.as_deref());
    let user_agent = user_agent_of(&request);
    let (fault, delay) = state.faults.check(verb, &resource, &user_agent);
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    let url_ns = url_ns.clone();
    let logged = Logged::take(state, &url_ns, name, &user_agent);
    let aggregate = state.authn.is_some()
        && group == crate::rbac::RBAC_GROUP
        && plural == "clusterroles"
        && request.method() != http::Method::GET;
    let resp = match fault {
        Some(f) if f.after_commit => {
            // carried out, then the answer is lost: the client sees the error
            let _done = resource_request(state, route, q, request).await;
            fault_response(f.code, f.retry_after_seconds)
        }
        Some(f) => fault_response(f.code, f.retry_after_seconds),
        None => answer(state, route, q, url_ns, request).await,
    };
    if aggregate && resp.status().is_success() {
        auth::aggregate_cluster_roles(state);
    }
    let code = resp.status().as_u16();
    state.counters.record(verb, &resource, code);
    if let Some(l) = logged {
        l.record(state, verb, resource, code);
    }
    resp
}

/// The answer to a resource request no fault took: the authentication APIs (TokenReview,
/// SubjectAccessReview...) or a resource verb; a refusal is remembered as a denial.
async fn answer(
    state: &Arc<ServerState>,
    route: Route,
    q: HashMap<String, String>,
    url_ns: Option<String>,
    request: Request,
) -> Response {
    let answer = match auth::auth_api(state, &route) {
        Some(api) => auth::serve_auth_api(state, api, url_ns, request).await,
        None => resource_request(state, route, q, request).await,
    };
    answer.unwrap_or_else(|e| {
        if e.code == 403 {
            state.record_denial(&e.message);
        }
        e.into_response()
    })
}

/// The OpenAPI documents take faults and latency as `get` on the pseudo-resource `openapi`, so a
/// test can refuse kmeta's read of its children's list rules: the fault's answer, if any.
async fn openapi_fault(state: &ServerState, user_agent: String) -> Option<Response> {
    let (fault, delay) = state.faults.check("get", "openapi", &user_agent);
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    fault.map(|f| fault_response(f.code, f.retry_after_seconds))
}

fn user_agent_of(request: &Request) -> String {
    request
        .headers()
        .get(axum::http::header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned()
}

/// What the write log keeps of a request, taken before the request is consumed (only while the
/// log is on).
struct Logged {
    namespace: Option<String>,
    name: Option<String>,
    user_agent: String,
    rv_before: u64,
}

impl Logged {
    fn take(
        state: &ServerState,
        ns: &Option<String>,
        name: &Option<String>,
        user_agent: &str,
    ) -> Option<Logged> {
        state.write_log.enabled().then(|| Logged {
            namespace: ns.clone(),
            name: name.clone(),
            user_agent: user_agent.to_owned(),
            rv_before: state.resource_version(),
        })
    }

    fn record(self, state: &ServerState, verb: &str, resource: String, code: u16) {
        state.write_log.record(crate::hooks::WriteRecord {
            seq: 0,
            at: std::time::UNIX_EPOCH,
            verb: verb.to_owned(),
            resource,
            namespace: self.namespace,
            name: self.name,
            user_agent: self.user_agent,
            code,
            rv_before: self.rv_before,
            rv_after: state.resource_version(),
        });
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use crate::test_server::TestServer;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::{Api, DeleteParams, PostParams};

    #[tokio::test]
    async fn the_write_log_keeps_who_wrote_what_where_in_the_order_of_changes() {
        let server = TestServer::start().await.unwrap();
        let mut config = kube::Config::new(server.url().parse().unwrap());
        config.headers.push((
            http::header::USER_AGENT,
            http::HeaderValue::from_static("writer/1 (a)"),
        ));
        let client = kube::Client::try_from(config).unwrap();
        let cms: Api<ConfigMap> = Api::default_namespaced(client);
        let mut cm = ConfigMap::default();
        cm.metadata.name = Some("before".into());
        cms.create(&PostParams::default(), &cm).await.unwrap();
        assert!(server.write_log().since(0).is_empty(), "off by default");

        server.write_log().enable(100);
        cm.metadata.name = Some("x".into());
        let created = cms.create(&PostParams::default(), &cm).await.unwrap();
        cms.get("x").await.unwrap();
        cms.create(&PostParams::default(), &cm).await.unwrap_err();
        cms.delete("x", &DeleteParams::default()).await.unwrap();

        let log = server.write_log().since(0);
        let rows: Vec<_> = log
            .iter()
            .map(|r| (r.verb.as_str(), r.name.as_deref(), r.code))
            .collect();
        assert_eq!(
            rows,
            [
                ("create", None, 201),
                ("create", None, 409),
                ("delete", Some("x"), 200)
            ],
            "writes only, reads left out"
        );
        for r in &log {
            assert_eq!(r.user_agent, "writer/1 (a)");
            assert_eq!(r.resource, "configmaps");
            assert_eq!(r.namespace.as_deref(), Some("default"));
        }
        // the create's change lies in its (rv_before, rv_after]; the refused one changed nothing
        let rv: u64 = created.metadata.resource_version.unwrap().parse().unwrap();
        assert!(
            log[0].rv_before < rv && rv <= log[0].rv_after,
            "{:?}",
            log[0]
        );
        assert_eq!(log[1].rv_before, log[1].rv_after);
        assert!(log[2].rv_after > log[2].rv_before);
        assert_eq!(server.write_log().since(2).len(), 1);
    }
}
