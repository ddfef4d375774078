//! The hook process: this bench binary started again with `KMETA_SCALE_ROLE=hook`. It answers
//! `POST /sync` after `KMETA_SCALE_HOOK_LATENCY_MS` with M children of the case's kind and
//! `status.children` = the observed ones, and keeps no request. A parent's `spec.v`, once set
//! (the `failover` scenario edits it), goes into its children as the annotation [`V_ANNOTATION`]
//! and into `status.v`, and `status.children` then counts only the observed children carrying
//! it; a parent without one gets exactly what it got before. The hook serves its call count at
//! `GET /stats` and the times its calls arrived at `GET /times?from=K` (microseconds since it
//! started, one per line, from the `K`th call on). For the `storm` scenario it also serves
//! when it started (`GET /epoch`, microseconds since the UNIX epoch), how many distinct parents
//! its calls from the `K`th on named (`GET /distinct?from=K`) and, for each `spec.edit` a parent
//! carried, when the first call carrying it arrived (`GET /edits`: `edit microseconds` lines).

use std::collections::{HashMap, HashSet};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Context as _;
use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use kmeta_tests::procs::{Proc, http_get};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{Case, Kind, child};

const ROLE: &str = "KMETA_SCALE_ROLE";
/// The annotation carrying the parent's `spec.v` into its children.
const V_ANNOTATION: &str = "bench.kmeta.dev/v";

struct Hook {
    kind: Kind,
    children: usize,
    latency: Duration,
    calls: AtomicU64,
    started: Instant,
    /// `started` in microseconds since the UNIX epoch.
    epoch_us: u64,
    /// When each call arrived, in microseconds since `started`, and the parent it named.
    times: Mutex<Vec<u64>>,
    names: Mutex<Vec<String>>,
    /// The first call carrying each `spec.edit`: when it arrived, microseconds since `started`.
    edits: Mutex<HashMap<u64, u64>>,
    /// Calls by (children observed at the parent's `spec.v`, the parent's `status.children`):
    /// which syncs a converge made (a first sync observes none and sees no status, a second
    /// observes all, one after it sees its own status).
    kinds: Mutex<std::collections::BTreeMap<(usize, Option<u64>), u64>>,
}

/// The hook process, its port, for `case`.
pub(crate) async fn spawn(dir: &std::path::Path, case: &Case) -> anyhow::Result<(Proc, u16)> {
    let mut cmd = Command::new(std::env::current_exe()?);
    cmd.env(ROLE, "hook")
        .env("KMETA_SCALE_HOOK_KIND", format!("{:?}", case.kind))
        .env("KMETA_SCALE_HOOK_CHILDREN", case.children.to_string())
        .env("KMETA_SCALE_HOOK_LATENCY_MS", case.latency_ms.to_string());
    let mut proc = Proc::spawn("hook", cmd, &dir.join("hook.log"))?;
    let port = proc.first_line(Duration::from_secs(30)).await?.parse()?;
    Ok((proc, port))
}

/// Sync calls answered so far.
pub(crate) async fn calls(port: u16) -> anyhow::Result<u64> {
    let (_, body) = http_get(port, "/stats")
        .await
        .context("hook /stats unreachable")?;
    Ok(body.trim().parse()?)
}

/// True when this process was started as the hook.
pub(crate) fn is_hook() -> bool {
    std::env::var(ROLE).is_ok_and(|r| r == "hook")
}

/// The hook process's main.
pub(crate) fn main() -> anyhow::Result<()> {
    let kind = match std::env::var("KMETA_SCALE_HOOK_KIND").as_deref() {
        Ok("Deployment") => Kind::Deployment,
        _ => Kind::ConfigMap,
    };
    let hook = Arc::new(Hook {
        kind,
        children: super::env_num("KMETA_SCALE_HOOK_CHILDREN", 10)?,
        latency: Duration::from_millis(super::env_num("KMETA_SCALE_HOOK_LATENCY_MS", 0)?),
        calls: AtomicU64::new(0),
        started: Instant::now(),
        epoch_us: unix_us(SystemTime::now()),
        times: Mutex::new(Vec::new()),
        names: Mutex::new(Vec::new()),
        edits: Mutex::default(),
        kinds: Mutex::default(),
    });
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(serve(hook))
}

async fn serve(hook: Arc<Hook>) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    println!("{}", listener.local_addr()?.port());
    let app = axum::Router::new()
        .route("/sync", post(sync))
        .route("/stats", get(stats))
        .route("/times", get(times))
        .route("/kinds", get(kinds))
        .route("/epoch", get(epoch))
        .route("/distinct", get(distinct))
        .route("/edits", get(edits))
        .with_state(hook);
    axum::serve(listener, app).await?;
    Ok(())
}

async fn stats(State(hook): State<Arc<Hook>>) -> String {
    hook.calls.load(Ordering::Relaxed).to_string()
}

async fn kinds(State(hook): State<Arc<Hook>>) -> String {
    let kinds = hook.kinds.lock().unwrap_or_else(|e| e.into_inner());
    kinds
        .iter()
        .map(|((observed, status), n)| {
            let status = status.map_or("-".to_owned(), |s| s.to_string());
            format!("{observed} {status} {n}")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The hook's calls by kind since it started: `observed status count` lines (see `Hook::kinds`).
pub(crate) async fn sync_kinds(port: u16) -> anyhow::Result<String> {
    let (_, body) = http_get(port, "/kinds")
        .await
        .context("hook /kinds unreachable")?;
    Ok(body)
}

async fn times(State(hook): State<Arc<Hook>>, Query(q): Query<HashMap<String, usize>>) -> String {
    let from = q.get("from").copied().unwrap_or(0);
    let times = hook.times.lock().unwrap_or_else(|e| e.into_inner());
    let lines: Vec<String> = times.iter().skip(from).map(u64::to_string).collect();
    lines.join("\n")
}

/// Microseconds since the UNIX epoch at `t`.
pub(crate) fn unix_us(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

async fn epoch(State(hook): State<Arc<Hook>>) -> String {
    hook.epoch_us.to_string()
}

async fn distinct(
    State(hook): State<Arc<Hook>>,
    Query(q): Query<HashMap<String, usize>>,
) -> String {
    let from = q.get("from").copied().unwrap_or(0);
    let names = hook.names.lock().unwrap_or_else(|e| e.into_inner());
    let seen: HashSet<&str> = names.iter().skip(from).map(String::as_str).collect();
    seen.len().to_string()
}

async fn edits(State(hook): State<Arc<Hook>>) -> String {
    let edits = hook.edits.lock().unwrap_or_else(|e| e.into_inner());
    let lines: Vec<String> = edits.iter().map(|(e, at)| format!("{e} {at}")).collect();
    lines.join("\n")
}

/// When the hook started, microseconds since the UNIX epoch.
pub(crate) async fn epoch_us(port: u16) -> anyhow::Result<u64> {
    let (_, body) = http_get(port, "/epoch")
        .await
        .context("hook /epoch unreachable")?;
    Ok(body.trim().parse()?)
}

/// How many distinct parents the calls from the `from`th on named.
pub(crate) async fn distinct_parents(port: u16, from: u64) -> anyhow::Result<usize> {
    let (_, body) = http_get(port, &format!("/distinct?from={from}"))
        .await
        .context("hook /distinct unreachable")?;
    Ok(body.trim().parse()?)
}

/// For each `spec.edit` a call carried, when the first such call arrived (µs since the hook
/// started).
pub(crate) async fn edit_arrivals(port: u16) -> anyhow::Result<HashMap<u64, u64>> {
    let (_, body) = http_get(port, "/edits")
        .await
        .context("hook /edits unreachable")?;
    body.lines()
        .map(|l| {
            let (e, at) = l.split_once(' ').context("hook /edits: not `edit µs`")?;
            anyhow::Ok((e.parse()?, at.parse()?))
        })
        .collect()
}

/// The arrival times (µs since the hook started) of its calls from the `from`th on.
pub(crate) async fn arrivals(port: u16, from: u64) -> anyhow::Result<Vec<u64>> {
    let (_, body) = http_get(port, &format!("/times?from={from}"))
        .await
        .context("hook /times unreachable")?;
    body.lines()
        .map(|l| l.parse().context("hook /times: not a number"))
        .collect()
}

/// What the hook reads of a request: the parent's name and how many children of each kind were
/// observed. Everything else is skipped unparsed, as a hook that reads little would, so the
/// hook's CPU on the shared cores stays small beside the controller's (decoding each request
/// into a `serde_json::Value` cost ~100 µs per call at 10 children, as much as kmeta's own work).
#[derive(Deserialize)]
struct Request {
    parent: Parent,
    #[serde(default)]
    children: HashMap<String, HashMap<String, Observed>>,
}

#[derive(Deserialize)]
struct Parent {
    metadata: Metadata,
    #[serde(default)]
    spec: Spec,
    #[serde(default)]
    status: ParentStatus,
}

#[derive(Deserialize, Default)]
struct ParentStatus {
    children: Option<u64>,
}

#[derive(Deserialize)]
struct Metadata {
    name: String,
}

#[derive(Deserialize, Default)]
struct Spec {
    v: Option<u64>,
    /// Set by the `storm` scenario's edits: which edit the parent carries.
    edit: Option<u64>,
}

/// An observed child: only its [`V_ANNOTATION`] is read, the rest is skipped as
/// [`serde::de::IgnoredAny`] would.
#[derive(Deserialize)]
struct Observed {
    #[serde(default)]
    metadata: ObservedMeta,
}

#[derive(Deserialize, Default)]
struct ObservedMeta {
    #[serde(default)]
    annotations: ObservedAnnotations,
}

#[derive(Deserialize, Default)]
struct ObservedAnnotations {
    /// [`V_ANNOTATION`] (serde's rename takes a literal only).
    #[serde(rename = "bench.kmeta.dev/v")]
    v: Option<String>,
}

async fn sync(State(hook): State<Arc<Hook>>, body: Bytes) -> Response {
    let req: Request = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => return (StatusCode::BAD_REQUEST, e.to_string()).into_response(),
    };
    if !hook.latency.is_zero() {
        tokio::time::sleep(hook.latency).await;
    }
    hook.calls.fetch_add(1, Ordering::Relaxed);
    let at = u64::try_from(hook.started.elapsed().as_micros()).unwrap_or(u64::MAX);
    hook.times
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(at);
    let parent = &req.parent.metadata.name;
    hook.names
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(parent.clone());
    if let Some(edit) = req.parent.spec.edit {
        let mut edits = hook.edits.lock().unwrap_or_else(|e| e.into_inner());
        edits.entry(edit).or_insert(at);
    }
    let key = format!("{}.{}", hook.kind.kind(), hook.kind.api_version());
    let v = req.parent.spec.v.map(|v| v.to_string());
    let observed = req.children.get(&key).map_or(0, |c| {
        c.values().filter(|o| o.metadata.annotations.v == v).count()
    });
    *hook
        .kinds
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .entry((observed, req.parent.status.children))
        .or_default() += 1;
    let children: Vec<Value> = (0..hook.children)
        .map(|i| {
            let mut c = child(hook.kind, parent, i, json!({}));
            if let Some(v) = &v {
                c["metadata"]["annotations"] = json!({V_ANNOTATION: v});
            }
            c
        })
        .collect();
    let mut status = json!({"children": observed});
    if let Some(v) = req.parent.spec.v {
        status["v"] = json!(v);
    }
    axum::Json(json!({"status": status, "children": children})).into_response()
}
