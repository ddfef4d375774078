//! The two controllers' sync hook, in the bench process (it is never killed): `POST /web` answers
//! one Deployment per `Web` parent (checks HTTP basic auth), `POST /conf` answers `spec.n`
//! ConfigMaps per `Conf` parent (checks a bearer token). A share of the calls can be failed with
//! 500 and the whole hook taken down (503) at runtime; what the hook wants is a pure function of
//! the parent ([`desired_web`], [`desired_conf`]) the end check compares the cluster with.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};

/// The hook's credentials and its runtime faults.
pub(crate) struct Hook {
    /// `Basic …` header value the `/web` calls must carry.
    pub basic: String,
    /// `Bearer …` header value the `/conf` calls must carry.
    pub bearer: String,
    /// Share of calls answered 500 before the handler.
    pub error_rate: Mutex<f64>,
    /// While set, every call is answered 503.
    pub outage: AtomicBool,
    pub calls: AtomicU64,
    pub refused: AtomicU64,
    /// Calls with wrong or missing credentials (a bug: kmeta must send them every time).
    pub unauthorized: AtomicU64,
}

/// Serves `hook` on 127.0.0.1; its base URL.
pub(crate) async fn serve(hook: Arc<Hook>) -> anyhow::Result<String> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}", listener.local_addr()?);
    let app = axum::Router::new()
        .route("/web", post(web))
        .route("/conf", post(conf))
        .with_state(hook);
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok(base)
}

/// Whether the call gets through: credentials, outage, error share.
fn admit(hook: &Hook, headers: &HeaderMap, want: &str) -> Result<(), (StatusCode, &'static str)> {
    hook.calls.fetch_add(1, Ordering::Relaxed);
    let got = headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    if got != Some(want) {
        hook.unauthorized.fetch_add(1, Ordering::Relaxed);
        return Err((StatusCode::UNAUTHORIZED, "bad credentials"));
    }
    if hook.outage.load(Ordering::Relaxed) {
        hook.refused.fetch_add(1, Ordering::Relaxed);
        return Err((StatusCode::SERVICE_UNAVAILABLE, "hook down"));
    }
    let rate = *hook.error_rate.lock().unwrap_or_else(|e| e.into_inner());
    if rate > 0.0 && rand::random_bool(rate.min(1.0)) {
        hook.refused.fetch_add(1, Ordering::Relaxed);
        return Err((StatusCode::INTERNAL_SERVER_ERROR, "hook error"));
    }
    Ok(())
}

async fn web(State(hook): State<Arc<Hook>>, headers: HeaderMap, body: String) -> Response {
    if let Err(r) = admit(&hook, &headers, &hook.basic) {
        return r.into_response();
    }
    answer(&body, desired_web)
}

async fn conf(State(hook): State<Arc<Hook>>, headers: HeaderMap, body: String) -> Response {
    if let Err(r) = admit(&hook, &headers, &hook.bearer) {
        return r.into_response();
    }
    answer(&body, desired_conf)
}

fn answer(body: &str, desired: fn(&Value) -> Vec<Value>) -> Response {
    let req: Value = match serde_json::from_str(body) {
        Ok(v) => v,
        Err(e) => return (StatusCode::BAD_REQUEST, e.to_string()).into_response(),
    };
    let children = desired(&req["parent"]);
    let observed: usize = req["children"].as_object().map_or(0, |m| {
        m.values()
            .filter_map(Value::as_object)
            .map(|o| o.len())
            .sum()
    });
    axum::Json(json!({"status": {"observedChildren": observed}, "children": children}))
        .into_response()
}

fn name_of(parent: &Value) -> &str {
    parent["metadata"]["name"].as_str().unwrap_or_default()
}

/// The Deployment a `Web` parent wants: its name, `spec.tag` as the app's image tag,
/// `spec.replicas`.
pub(crate) fn desired_web(parent: &Value) -> Vec<Value> {
    let name = name_of(parent);
    let tag = parent["spec"]["tag"].as_str().unwrap_or("v0");
    let replicas = parent["spec"]["replicas"].as_i64().unwrap_or(1);
    vec![json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "labels": {"soak": "web"}},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "app",
                    "image": format!("registry.example/app:{tag}")}]}}}})]
}

/// The ConfigMaps a `Conf` parent wants: `<name>-<k>` for k < `spec.n`, each with `spec.data`.
pub(crate) fn desired_conf(parent: &Value) -> Vec<Value> {
    let name = name_of(parent);
    let n = parent["spec"]["n"].as_u64().unwrap_or(1);
    let data = parent["spec"]["data"].as_str().unwrap_or_default();
    (0..n)
        .map(|k| {
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": format!("{name}-{k}"), "labels": {"soak": "conf"}},
                "data": {"value": data, "k": k.to_string()}})
        })
        .collect()
}
