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
use std::sync::Arc;

/// Serve one request.
pub(super) async fn handle(
    State(state): State<Arc<ServerState>>,
    mut request: Request,
) -> Response {
    let route = parse_path(request.uri().path());
    let q = query_map(request.uri());
    if let Some(denied) = auth::guard(&state, &route, &q, &mut request) {
        if let Route::Resource { plural, sub, .. } = &route {
            let resource = match sub {
                Some(s) => format!("{plural}/{s}"),
                None => plural.clone(),
            };
            let verb = verb_of(request.method(), &route, &q);
            state
                .counters
                .record(verb, &resource, denied.status().as_u16());
        }
        return denied;
    }
    let Route::Resource {
        group,
        plural,
        sub,
        ns: url_ns,
        ..
    } = &route
    else {
        if matches!(route, Route::OpenApi)
            && let Some(refused) = openapi_fault(&state, user_agent_of(&request)).await
        {
            return refused;
        }
        return discovery::serve(&state, &route, request.headers(), request.uri().path());
    };
    let verb = verb_of(request.method(), &route, &q);
    let resource = match sub {
        Some(s) => format!("{plural}/{s}"),
        None => plural.clone(),
    };
    let user_agent = request
        .headers()
        .get(axum::http::header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let (fault, delay) = state.faults.check(verb, &resource, user_agent);
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    let url_ns = url_ns.clone();
    let aggregate = state.authn.is_some()
        && group == crate::rbac::RBAC_GROUP
        && plural == "clusterroles"
        && request.method() != http::Method::GET;
    let resp = match fault {
        Some(f) if f.after_commit => {
            // carried out, then the answer is lost: the client sees the error
            let _done = resource_request(&state, route, q, request).await;
            fault_response(f.code, f.retry_after_seconds)
        }
        Some(f) => fault_response(f.code, f.retry_after_seconds),
        None => {
            let answer = match auth::auth_api(&state, &route) {
                Some(api) => auth::serve_auth_api(&state, api, url_ns, request).await,
                None => resource_request(&state, route, q, request).await,
            };
            answer.unwrap_or_else(|e| {
                if e.code == 403 {
                    state.record_denial(&e.message);
                }
                e.into_response()
            })
        }
    };
    if aggregate && resp.status().is_success() {
        auth::aggregate_cluster_roles(&state);
    }
    state
        .counters
        .record(verb, &resource, resp.status().as_u16());
    resp
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
