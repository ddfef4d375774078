//! HTTP layer: URL parsing, verbs, watch streams, discovery and the axum router.

use crate::discovery;
use crate::engine::{
    DeleteOpts, Deleted, FieldValidation, Inner, ListOpts, ListResult, Propagation, Req, WriteOpts,
};
use crate::error::{ApiError, ApiResult};
use crate::hooks::{Admission, CounterStore, Faults};
use crate::registry::ResourceDef;
use crate::selector::{FieldSelector, LabelSelector};
use crate::store::{EventType, Obj};
use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// Server configuration.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Number of watch events retained for resuming watches; older resourceVersions get 410.
    /// Default 10_000 (the order of what kube-apiserver's watch cache keeps for a busy resource).
    pub watch_window: usize,
    /// Seed for uids, generated names and fault rates. Default 0.
    pub seed: u64,
    /// Interval of BOOKMARK events on watches that allow them. Default 60 s (kube-apiserver
    /// sends bookmarks about once a minute).
    pub bookmark_interval: Duration,
    /// Watch duration when the client gives no `timeoutSeconds`. Default 1800 s (the
    /// `--min-request-timeout` of kube-apiserver, which randomizes between 1x and 2x of it).
    pub default_watch_timeout: Duration,
    /// Namespaces created at start. Default `default`, `kube-system`, `kube-public`,
    /// `kube-node-lease` (what every cluster has).
    pub namespaces: Vec<String>,
    /// Register [`crate::defaults::register`] at start. Default false: objects are stored as
    /// sent, and tests opt in to server-side defaulting.
    pub builtin_defaults: bool,
    /// How long a get or list with `resourceVersion=N` (not older than) waits for a
    /// resourceVersion the server has not reached before it answers 504 with a
    /// `ResourceVersionTooLarge` cause. Default 3 s (the watch cache's `blockTimeout`).
    pub rv_wait: Duration,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            watch_window: 10_000,
            seed: 0,
            bookmark_interval: Duration::from_secs(60),
            default_watch_timeout: Duration::from_secs(1800),
            namespaces: vec![
                "default".into(),
                "kube-system".into(),
                "kube-public".into(),
                "kube-node-lease".into(),
            ],
            builtin_defaults: false,
            rv_wait: Duration::from_secs(3),
        }
    }
}

/// Shared server state: storage, hooks, counters.
pub struct ServerState {
    inner: Mutex<Inner>,
    notify: tokio::sync::watch::Sender<u64>,
    /// Admission functions.
    pub admission: Admission,
    /// Fault injection.
    pub faults: Faults,
    pub(crate) counters: CounterStore,
    /// Configuration.
    pub config: ServerConfig,
    /// `host:port` advertised in discovery (set once the listener is bound).
    pub(crate) address: Mutex<String>,
}

impl ServerState {
    /// Build state with the built-in resources and the configured namespaces.
    pub fn new(config: ServerConfig) -> Arc<Self> {
        let mut inner = Inner::new(config.watch_window, config.seed);
        let adm = Admission::default();
        if let Some(def) = inner.registry.lookup("", "v1", "namespaces").cloned() {
            let req = Req {
                def,
                version: "v1".into(),
                ns: None,
                name: None,
                sub: None,
            };
            let opts = WriteOpts {
                field_manager: "kube-apiserver".into(),
                ..Default::default()
            };
            for ns in &config.namespaces {
                if let Err(e) =
                    inner.create(&adm, &req, json!({"metadata": {"name": ns}}), &opts, false)
                {
                    tracing::warn!("creating namespace {ns}: {e}");
                }
            }
        }
        let rv = inner.store.rv();
        if config.builtin_defaults {
            crate::defaults::register(&adm);
        }
        Arc::new(ServerState {
            inner: Mutex::new(inner),
            notify: tokio::sync::watch::channel(rv).0,
            admission: adm,
            faults: Faults::new(config.seed),
            counters: CounterStore::default(),
            config,
            address: Mutex::new("127.0.0.1:0".into()),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Run a mutation under the lock and wake watchers.
    fn write<T>(&self, f: impl FnOnce(&mut Inner) -> T) -> T {
        let mut g = self.lock();
        let before = g.store.rv();
        let out = f(&mut g);
        let after = g.store.rv();
        drop(g);
        if after != before {
            self.notify.send_replace(after);
        }
        out
    }

    /// [`Self::write`], also returning the `Warning` texts the write produced.
    fn write_warn<T>(&self, f: impl FnOnce(&mut Inner) -> T) -> (T, Vec<String>) {
        self.write(|i| {
            i.warnings.clear();
            let out = f(i);
            (out, std::mem::take(&mut i.warnings))
        })
    }

    /// Snapshot of request counters.
    pub fn counters(&self) -> crate::hooks::Counters {
        self.counters.snapshot()
    }

    /// Reset request counters.
    pub fn reset_counters(&self) {
        self.counters.reset()
    }

    /// Current global resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.lock().store.rv()
    }

    /// Wait (at most `config.rv_wait`) until the global resourceVersion reaches `rv`, like the
    /// watch cache's `waitUntilFreshAndBlock`; 504 `ResourceVersionTooLarge` if it does not.
    pub(crate) async fn reach_rv(&self, rv: u64) -> ApiResult<()> {
        let mut seen = self.notify.subscribe();
        let waited =
            tokio::time::timeout(self.config.rv_wait, seen.wait_for(|cur| *cur >= rv)).await;
        let current = self.resource_version();
        if matches!(waited, Ok(Ok(_))) || current >= rv {
            Ok(())
        } else {
            Err(ApiError::resource_version_too_large(
                rv,
                current,
                crate::engine::RV_TOO_LARGE_RETRY_SECONDS,
            ))
        }
    }

    /// Drop all retained watch events: watches resuming from any earlier resourceVersion get 410.
    pub fn compact(&self) {
        self.lock().store.compact_all();
    }

    /// Number of stored objects.
    pub fn object_count(&self) -> usize {
        self.lock().store.len()
    }

    pub(crate) fn registry_snapshot(&self) -> crate::registry::Registry {
        self.lock().registry.clone()
    }
}

/// The axum router serving the API for a state. Usable in-process:
/// `kube::Client::new(router(state), "default")`.
pub fn router(state: Arc<ServerState>) -> Router {
    Router::new().fallback(handle).with_state(state)
}

/// Parsed request path.
#[derive(Debug, Clone, PartialEq)]
pub enum Route {
    /// `/version`
    Version,
    /// `/healthz`, `/readyz`, `/livez`
    Health,
    /// `/api`
    Api,
    /// `/apis`
    Apis,
    /// `/apis/{group}`
    Group(String),
    /// `/api/v1`, `/apis/{group}/{version}`
    GroupVersion(String, String),
    /// `/openapi/...`
    OpenApi,
    /// A resource request.
    Resource {
        /// Group.
        group: String,
        /// Version.
        version: String,
        /// Namespace from the URL.
        ns: Option<String>,
        /// Plural.
        plural: String,
        /// Name.
        name: Option<String>,
        /// Subresource.
        sub: Option<String>,
    },
    /// Unknown.
    NotFound,
}

/// Parse a URL path into a route.
pub fn parse_path(path: &str) -> Route {
    let segs: Vec<&str> = path
        .trim_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    let (group, version, rest) = match segs.as_slice() {
        ["version"] => return Route::Version,
        ["healthz" | "readyz" | "livez", ..] => return Route::Health,
        ["openapi", ..] => return Route::OpenApi,
        ["api"] => return Route::Api,
        ["apis"] => return Route::Apis,
        ["apis", g] => return Route::Group(g.to_string()),
        ["api", v, rest @ ..] => ("", *v, rest),
        ["apis", g, v, rest @ ..] => (*g, *v, rest),
        _ => return Route::NotFound,
    };
    let s = |x: &&str| x.to_string();
    let r = |ns: Option<&&str>, plural: &&str, name: Option<&&str>, sub: Option<&&str>| {
        Route::Resource {
            group: group.to_string(),
            version: version.to_string(),
            ns: ns.map(s),
            plural: plural.to_string(),
            name: name.map(s),
            sub: sub.map(s),
        }
    };
    match rest {
        [] => Route::GroupVersion(group.to_string(), version.to_string()),
        ["namespaces", ns, plural, tail @ ..]
            if !(group.is_empty() && matches!(*plural, "status" | "finalize")) =>
        {
            match tail {
                [] => r(Some(ns), plural, None, None),
                [name] => r(Some(ns), plural, Some(name), None),
                [name, sub] => r(Some(ns), plural, Some(name), Some(sub)),
                _ => Route::NotFound,
            }
        }
        [plural] => r(None, plural, None, None),
        [plural, name] => r(None, plural, Some(name), None),
        [plural, name, sub] => r(None, plural, Some(name), Some(sub)),
        _ => Route::NotFound,
    }
}

fn json_response(code: StatusCode, body: Vec<u8>) -> Response {
    let mut resp = (code, body).into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

/// Adds a `Warning: 299 - "text"` header per warning (RFC 7234 warn-code 299, as kube-apiserver).
fn warned(mut response: Response, warnings: &[String]) -> Response {
    for w in warnings {
        let text = format!("299 - {}", serde_json::Value::String(w.clone()));
        if let Ok(v) = HeaderValue::from_str(&text) {
            response.headers_mut().append(header::WARNING, v);
        }
    }
    response
}

fn obj_response(code: StatusCode, obj: &Value) -> Response {
    json_response(code, serde_json::to_vec(obj).unwrap_or_default())
}

fn query_map(uri: &http::Uri) -> HashMap<String, String> {
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

fn verb_of(method: &Method, route: &Route, q: &HashMap<String, String>) -> &'static str {
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

async fn handle(State(state): State<Arc<ServerState>>, request: Request) -> Response {
    let route = parse_path(request.uri().path());
    let q = query_map(request.uri());
    let Route::Resource { plural, sub, .. } = &route else {
        return discovery::serve(&state, &route, request.headers(), request.uri().path());
    };
    let verb = verb_of(request.method(), &route, &q);
    let resource = match sub {
        Some(s) => format!("{plural}/{s}"),
        None => plural.clone(),
    };
    let (fault, delay) = state.faults.check(verb, &resource);
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    let resp = match fault {
        Some(f) => fault_response(f.code, f.retry_after_seconds),
        None => match resource_request(&state, route, q, request).await {
            Ok(r) => r,
            Err(e) => e.into_response(),
        },
    };
    state
        .counters
        .record(verb, &resource, resp.status().as_u16());
    resp
}

fn fault_response(code: u16, retry_after: u64) -> Response {
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

async fn resource_request(
    state: &Arc<ServerState>,
    route: Route,
    q: HashMap<String, String>,
    request: Request,
) -> ApiResult<Response> {
    let Route::Resource {
        group,
        version,
        ns,
        plural,
        name,
        sub,
    } = route
    else {
        return Err(ApiError::path_not_found(request.uri().path()));
    };
    let def = {
        let g = state.lock();
        g.registry.lookup(&group, &version, &plural).cloned()
    };
    let Some(def) = def else {
        return Err(ApiError::path_not_found(request.uri().path()));
    };
    if def.namespaced != ns.is_some()
        && !(def.namespaced && name.is_none() && request.method() == Method::GET)
    {
        return Err(ApiError::path_not_found(request.uri().path()));
    }
    if let Some(s) = &sub {
        let ok = (s == "status" && def.status_subresource) || (s == "scale" && def.scale.is_some());
        if !ok || name.is_none() {
            return Err(ApiError::path_not_found(request.uri().path()));
        }
    }
    let req = Req {
        def,
        version,
        ns,
        name,
        sub,
    };
    let method = request.method().clone();
    let headers = request.headers().clone();
    let body = axum::body::to_bytes(request.into_body(), 64 * 1024 * 1024)
        .await
        .map_err(|e| ApiError::bad_request(format!("reading request body: {e}")))?;
    let body_ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/json")
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_string();
    let body = if matches!(method, Method::POST | Method::PUT) {
        match body_ct.as_str() {
            "application/json" | "" => body,
            "application/yaml" => {
                let text = std::str::from_utf8(&body).map_err(|e| {
                    ApiError::bad_request(format!("request body is not UTF-8: {e}"))
                })?;
                let v: Value = serde_saphyr::from_str(text)
                    .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))?;
                Bytes::from(serde_json::to_vec(&v).unwrap_or_default())
            }
            "application/vnd.kubernetes.protobuf" => {
                let v = crate::proto::decode(&body).map_err(|e| {
                    let mut err = ApiError::unsupported_media_type(
                        &body_ct,
                        &["application/json", "application/yaml"],
                    );
                    err.message = format!("{}: {e}", err.message);
                    err
                })?;
                Bytes::from(serde_json::to_vec(&v).unwrap_or_default())
            }
            other => {
                return Err(ApiError::unsupported_media_type(
                    other,
                    &[
                        "application/json",
                        "application/yaml",
                        "application/vnd.kubernetes.protobuf",
                    ],
                ));
            }
        }
    } else {
        body
    };
    let wopts = WriteOpts {
        field_manager: field_manager(&q, &headers),
        dry_run: q.get("dryRun").is_some_and(|d| d == "All"),
        force: q.get("force").is_some_and(|f| f == "true"),
        field_validation: FieldValidation::parse(q.get("fieldValidation").map(String::as_str))?,
    };
    let api_version = req.def.api_version(&req.version);
    let is_scale = req.sub.as_deref() == Some("scale");
    match method {
        Method::GET if req.name.is_some() => {
            if let Some(rv) = get_rv(&q)? {
                state.reach_rv(rv).await?;
            }
            let obj = state.lock().get(&req)?;
            if wants_metadata(&headers) && !is_scale {
                return Ok(obj_response(StatusCode::OK, &partial(&obj)));
            }
            if is_scale {
                let scale = Inner::to_scale(&req, &obj)?;
                return Ok(obj_response(StatusCode::OK, &scale));
            }
            if wants_table(&headers) {
                let rv = obj
                    .pointer("/metadata/resourceVersion")
                    .cloned()
                    .unwrap_or(Value::Null);
                return Ok(obj_response(
                    StatusCode::OK,
                    &table(&req, &[&obj], json!({"resourceVersion": rv})),
                ));
            }
            Ok(obj_response(StatusCode::OK, &obj))
        }
        Method::GET => {
            let lopts = list_opts(&q, &req.def)?;
            let meta_only = wants_metadata(&headers);
            if q.get("watch").is_some_and(|w| w == "true" || w == "1") {
                return watch(state, req, &q, lopts, meta_only);
            }
            if let Some(rv) = lopts.not_older_than() {
                state.reach_rv(rv).await?;
            }
            let res = state.lock().list(&req, &lopts)?;
            if wants_table(&headers) {
                let mut md = json!({"resourceVersion": res.rv.to_string()});
                if let Some(c) = &res.continue_token {
                    md["continue"] = json!(c);
                }
                let items: Vec<&Value> = res.items.iter().map(|o| &**o).collect();
                return Ok(obj_response(StatusCode::OK, &table(&req, &items, md)));
            }
            if meta_only {
                let res = ListResult {
                    items: res.items.iter().map(|o| Arc::new(partial(o))).collect(),
                    ..res
                };
                return Ok(json_response(
                    StatusCode::OK,
                    list_body("PartialObjectMetadataList", "meta.k8s.io/v1", res),
                ));
            }
            Ok(json_response(
                StatusCode::OK,
                list_body(&format!("{}List", req.def.kind), &api_version, res),
            ))
        }
        Method::POST => {
            if req.name.is_some() {
                return Err(ApiError::method_not_allowed("POST on an object"));
            }
            let v = parse_json(&body)?;
            let (obj, warnings) =
                state.write_warn(|i| i.create(&state.admission, &req, v, &wopts, false));
            Ok(warned(obj_response(StatusCode::CREATED, &*obj?), &warnings))
        }
        Method::PUT => {
            if req.name.is_none() {
                return Err(ApiError::method_not_allowed("PUT on a collection"));
            }
            let v = parse_json(&body)?;
            let (obj, warnings) = if is_scale {
                state.write_warn(|i| i.update_scale(&state.admission, &req, v, &wopts))
            } else {
                state.write_warn(|i| i.update(&state.admission, &req, v, &wopts))
            };
            Ok(warned(obj_response(StatusCode::OK, &*obj?), &warnings))
        }
        Method::PATCH => {
            if req.name.is_none() {
                return Err(ApiError::method_not_allowed("PATCH on a collection"));
            }
            let ct = headers
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_string();
            let existed = state.lock().get(&req).is_ok();
            let (obj, warnings) =
                state.write_warn(|i| i.patch(&state.admission, &req, &ct, &body, &wopts));
            let code = if existed || is_scale {
                StatusCode::OK
            } else {
                StatusCode::CREATED
            };
            Ok(warned(obj_response(code, &*obj?), &warnings))
        }
        Method::DELETE => {
            let dopts = delete_opts(&q, &body)?;
            if req.name.is_none() {
                let lopts = list_opts(&q, &req.def)?;
                let items =
                    state.write(|i| i.delete_collection(&state.admission, &req, &lopts, &dopts))?;
                let rv = state.resource_version();
                return Ok(json_response(
                    StatusCode::OK,
                    list_body(
                        &format!("{}List", req.def.kind),
                        &api_version,
                        ListResult {
                            items,
                            rv,
                            continue_token: None,
                            remaining: None,
                        },
                    ),
                ));
            }
            let out = state.write(|i| i.delete(&state.admission, &req, &dopts))?;
            Ok(match out {
                Deleted::Pending(o) => obj_response(StatusCode::OK, &o),
                Deleted::Gone(o) => {
                    if !req.def.is_builtin() || req.def.plural == "pods" {
                        obj_response(StatusCode::OK, &o)
                    } else {
                        let mut details = json!({
                            "name": req.name,
                            "kind": req.def.plural,
                            "uid": o.get("metadata").and_then(|m| m.get("uid")),
                        });
                        if !req.def.group.is_empty() {
                            details["group"] = json!(req.def.group);
                        }
                        obj_response(
                            StatusCode::OK,
                            &json!({"kind": "Status", "apiVersion": "v1", "metadata": {},
                                "status": "Success", "details": details}),
                        )
                    }
                }
            })
        }
        _ => Err(ApiError::method_not_allowed(method.as_str())),
    }
}

fn parse_json(body: &[u8]) -> ApiResult<Value> {
    serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("error decoding request body as JSON: {e}")))
}

fn list_opts(q: &HashMap<String, String>, def: &ResourceDef) -> ApiResult<ListOpts> {
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
fn get_rv(q: &HashMap<String, String>) -> ApiResult<Option<u64>> {
    match q.get("resourceVersion").map(String::as_str) {
        None | Some("") | Some("0") => Ok(None),
        Some(r) => r
            .parse::<u64>()
            .map(Some)
            .map_err(|_| ApiError::bad_request(format!("invalid resource version: {r:?}"))),
    }
}

fn delete_opts(q: &HashMap<String, String>, body: &[u8]) -> ApiResult<DeleteOpts> {
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
    })
}

/// Serialize a list without cloning items into one big `Value`.
pub fn list_body(kind: &str, api_version: &str, res: ListResult) -> Vec<u8> {
    let mut md = json!({"resourceVersion": res.rv.to_string()});
    if let Some(c) = &res.continue_token {
        md["continue"] = json!(c);
    }
    if let Some(r) = res.remaining {
        md["remainingItemCount"] = json!(r);
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
        if serde_json::to_writer(&mut out, &**item).is_err() {
            out.extend_from_slice(b"null");
        }
    }
    out.extend_from_slice(b"]}");
    out
}

fn wants_metadata(headers: &HeaderMap) -> bool {
    headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| {
            a.split(',')
                .next()
                .is_some_and(|first| first.contains("as=PartialObjectMetadata"))
        })
}

/// `PartialObjectMetadata` view of an object (metadata-only requests).
fn partial(obj: &Value) -> Value {
    json!({
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": obj.get("metadata").cloned().unwrap_or(json!({})),
    })
}

fn wants_table(headers: &HeaderMap) -> bool {
    headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| {
            a.split(',')
                .next()
                .is_some_and(|first| first.contains("as=Table"))
        })
}

/// The server-side `Table` kubectl asks for (see [`crate::table`]).
fn table(req: &Req, items: &[&Value], metadata: Value) -> Value {
    crate::table::render(
        &req.def,
        &req.version,
        items,
        metadata,
        jiff::Timestamp::now(),
    )
}

fn event_line(ty: &str, obj: &Value) -> Bytes {
    let mut s = Vec::with_capacity(256);
    s.extend_from_slice(b"{\"type\":\"");
    s.extend_from_slice(ty.as_bytes());
    s.extend_from_slice(b"\",\"object\":");
    if serde_json::to_writer(&mut s, obj).is_err() {
        s.extend_from_slice(b"null");
    }
    s.extend_from_slice(b"}\n");
    Bytes::from(s)
}

fn event_line_raw(ty: &str, obj_json: &[u8]) -> Bytes {
    let mut s = Vec::with_capacity(obj_json.len() + 32);
    s.extend_from_slice(b"{\"type\":\"");
    s.extend_from_slice(ty.as_bytes());
    s.extend_from_slice(b"\",\"object\":");
    s.extend_from_slice(obj_json);
    s.extend_from_slice(b"}\n");
    Bytes::from(s)
}

fn bookmark(kind: &str, api_version: &str, rv: u64, initial_end: bool) -> Bytes {
    let mut md = json!({"resourceVersion": rv.to_string()});
    if initial_end {
        md["annotations"] = json!({"k8s.io/initial-events-end": "true"});
    }
    event_line(
        "BOOKMARK",
        &json!({"kind": kind, "apiVersion": api_version, "metadata": md}),
    )
}

fn watch(
    state: &Arc<ServerState>,
    req: Req,
    q: &HashMap<String, String>,
    lopts: ListOpts,
    meta_only: bool,
) -> ApiResult<Response> {
    lopts
        .field
        .check(|f| req.def.supports_field(f))
        .map_err(|e| ApiError::bad_request(format!("fieldSelector: {e}")))?;
    let bookmarks = q.get("allowWatchBookmarks").is_some_and(|b| b == "true");
    let send_initial = q.get("sendInitialEvents").map(|b| b == "true");
    let timeout =
        match q.get("timeoutSeconds") {
            Some(t) => Duration::from_secs(t.parse::<u64>().map_err(|_| {
                ApiError::bad_request(format!("timeoutSeconds: invalid value {t:?}"))
            })?),
            None => state.config.default_watch_timeout,
        };
    let rv = lopts.resource_version.clone().filter(|r| r != "0");
    if send_initial == Some(true) && !bookmarks {
        return Err(ApiError::new(
            422,
            "Invalid",
            "allowWatchBookmarks: Required value: allowWatchBookmarks must be set to true when sendInitialEvents is set",
        ));
    }
    let api_version = req.def.api_version(&req.version);
    let kind = req.def.kind.clone();
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(256);
    let (initial, start) = {
        let g = state.lock();
        match &rv {
            Some(r) if send_initial != Some(true) => {
                let n = r.parse::<u64>().map_err(|_| {
                    ApiError::bad_request(format!("resourceVersion: invalid value {r:?}"))
                })?;
                let expired = state.faults.take_watch_expiry() || n < g.store.compacted();
                if expired {
                    let status = ApiError::gone(format!(
                        "too old resource version: {n} ({})",
                        g.store.compacted().max(n + 1)
                    ))
                    .to_status();
                    let line = event_line("ERROR", &status);
                    return Ok(stream_response(futures::stream::once(async move {
                        Ok::<_, Infallible>(line)
                    })));
                }
                (vec![], n)
            }
            _ => {
                if send_initial == Some(false) {
                    (vec![], g.store.rv())
                } else {
                    let mut all = ListOpts {
                        label: lopts.label.clone(),
                        field: lopts.field.clone(),
                        ..Default::default()
                    };
                    all.limit = 0;
                    let res = g.list(&req, &all)?;
                    (res.items, res.rv)
                }
            }
        }
    };
    let mut notify = state.notify.subscribe();
    let mut close = state.faults.close_signal();
    close.mark_unchanged();
    let st = state.clone();
    let res = req.def.storage_key();
    let ns = req.ns.clone();
    let bookmark_every = state.config.bookmark_interval.max(Duration::from_millis(1));
    tokio::spawn(async move {
        let render = |o: &Value| if meta_only { partial(o) } else { o.clone() };
        for o in &initial {
            if tx.send(event_line("ADDED", &render(o))).await.is_err() {
                return;
            }
        }
        if send_initial == Some(true)
            && bookmarks
            && tx
                .send(bookmark(&kind, &api_version, start, true))
                .await
                .is_err()
        {
            return;
        }
        let far = Duration::from_secs(365 * 24 * 3600);
        let deadline = tokio::time::Instant::now() + timeout.min(far);
        let mut tick =
            tokio::time::interval_at(tokio::time::Instant::now() + bookmark_every, bookmark_every);
        let mut last = start;
        let matches = |o: &Value| lopts.label.matches(o) && lopts.field.matches(o);
        loop {
            let evs = st.lock().store.events_since(last);
            match evs {
                Err(compacted) => {
                    let status =
                        ApiError::gone(format!("too old resource version: {last} ({compacted})"))
                            .to_status();
                    let _ = tx.send(event_line("ERROR", &status)).await;
                    return;
                }
                Ok(evs) => {
                    for e in evs {
                        last = e.rv;
                        if e.key.res != res || ns.as_ref().is_some_and(|n| *n != e.key.ns) {
                            continue;
                        }
                        let cur = matches(&e.obj);
                        let prev = e.prev.as_ref().map(|p| matches(p)).unwrap_or(false);
                        let ty = match e.ty {
                            EventType::Added if cur => "ADDED",
                            EventType::Modified if cur && prev => "MODIFIED",
                            EventType::Modified if cur => "ADDED",
                            EventType::Modified if prev => "DELETED",
                            EventType::Deleted if prev || cur => "DELETED",
                            _ => continue,
                        };
                        let same_version = e.obj.get("apiVersion").and_then(Value::as_str)
                            == Some(api_version.as_str());
                        let line = if meta_only {
                            event_line(ty, &partial(&e.obj))
                        } else if same_version {
                            event_line_raw(ty, e.obj_json())
                        } else {
                            let obj: Obj = Inner::present(&e.obj, &api_version);
                            event_line(ty, &obj)
                        };
                        if tx.send(line).await.is_err() {
                            return;
                        }
                    }
                }
            }
            tokio::select! {
                r = notify.changed() => { if r.is_err() { return; } }
                _ = tokio::time::sleep_until(deadline) => {
                    if bookmarks {
                        let _ = tx.send(bookmark(&kind, &api_version, last, false)).await;
                    }
                    return;
                }
                _ = close.changed() => return,
                _ = tick.tick(), if bookmarks => {
                    if tx.send(bookmark(&kind, &api_version, last, false)).await.is_err() {
                        return;
                    }
                }
                _ = tx.closed() => return,
            }
        }
    });
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|b| (Ok::<_, Infallible>(b), rx))
    });
    Ok(stream_response(stream))
}

fn stream_response<S>(s: S) -> Response
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

    #[test]
    fn paths() {
        assert_eq!(
            parse_path("/api/v1/namespaces"),
            Route::Resource {
                group: "".into(),
                version: "v1".into(),
                ns: None,
                plural: "namespaces".into(),
                name: None,
                sub: None
            }
        );
        assert_eq!(
            parse_path("/api/v1/namespaces/foo/status"),
            Route::Resource {
                group: "".into(),
                version: "v1".into(),
                ns: None,
                plural: "namespaces".into(),
                name: Some("foo".into()),
                sub: Some("status".into())
            }
        );
        assert_eq!(
            parse_path("/api/v1/namespaces/foo/configmaps/x"),
            Route::Resource {
                group: "".into(),
                version: "v1".into(),
                ns: Some("foo".into()),
                plural: "configmaps".into(),
                name: Some("x".into()),
                sub: None
            }
        );
        assert_eq!(
            parse_path("/apis/apps/v1/namespaces/a/deployments/d/scale"),
            Route::Resource {
                group: "apps".into(),
                version: "v1".into(),
                ns: Some("a".into()),
                plural: "deployments".into(),
                name: Some("d".into()),
                sub: Some("scale".into())
            }
        );
        assert_eq!(
            parse_path("/apis/apps/v1"),
            Route::GroupVersion("apps".into(), "v1".into())
        );
        assert_eq!(parse_path("/apis/apps"), Route::Group("apps".into()));
        assert_eq!(
            parse_path("/apis/rbac.authorization.k8s.io/v1/clusterroles/system:x"),
            Route::Resource {
                group: "rbac.authorization.k8s.io".into(),
                version: "v1".into(),
                ns: None,
                plural: "clusterroles".into(),
                name: Some("system:x".into()),
                sub: None
            }
        );
        assert_eq!(parse_path("/nope"), Route::NotFound);
    }

    #[test]
    fn list_body_is_valid_json() {
        let res = ListResult {
            items: vec![Arc::new(json!({"a": 1}))],
            rv: 7,
            continue_token: Some("x".into()),
            remaining: Some(3),
        };
        let v: Value =
            serde_json::from_slice(&list_body("ConfigMapList", "v1", res)).unwrap_or_default();
        assert_eq!(v["metadata"]["resourceVersion"], "7");
        assert_eq!(v["metadata"]["remainingItemCount"], 3);
        assert_eq!(v["items"][0]["a"], 1);
    }
}
