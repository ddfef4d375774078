//! Benchmark: create N ConfigMaps (default 10,000), list them, update them, with W watchers
//! (default 100) open; reports requests/s per phase, watch event delivery and peak RSS (VmHWM).
//!
//! Run: `cargo bench -p kmeta-apiserver --bench apiserver_bench`
//! Env: `KMETA_BENCH_N` (objects), `KMETA_BENCH_WATCHERS`, `KMETA_BENCH_CONCURRENCY` (default 32),
//! `KMETA_BENCH_TYPED=1` (watchers decode typed events in-process instead of counting lines),
//! `KMETA_BENCH_ADMISSION=1` (afterwards, N/10 creates each: in a plain namespace, through a
//! mutating webhook served in this process, and under a ValidatingAdmissionPolicy).
#![allow(clippy::unwrap_used, clippy::too_many_lines)]

use futures::{AsyncBufReadExt, StreamExt, TryStreamExt, stream};
use k8s_openapi::api::core::v1::ConfigMap;
use kmeta_apiserver::TestServer;
use kube::api::{Api, ListParams, PostParams, WatchEvent, WatchParams};
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn vm_hwm_kib() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    s.lines()
        .find(|l| l.starts_with("VmHWM:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

fn cm(i: usize) -> ConfigMap {
    serde_json::from_value(json!({
        "metadata": {"name": format!("cm-{i:05}"), "labels": {"bench": "true", "shard": (i % 10).to_string()}},
        "data": {"index": i.to_string(), "payload": "x".repeat(128)}
    }))
    .unwrap()
}

fn report(phase: &str, requests: usize, elapsed: Duration) {
    println!(
        "{phase:<28} {requests:>7} requests in {:>8.3}s = {:>9.0} req/s",
        elapsed.as_secs_f64(),
        requests as f64 / elapsed.as_secs_f64()
    );
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    // `cargo test --benches` passes --bench-less flags; only run when invoked by `cargo bench`
    // or directly.
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let n = env("KMETA_BENCH_N", 10_000);
    let watchers = env("KMETA_BENCH_WATCHERS", 100);
    let conc = env("KMETA_BENCH_CONCURRENCY", 32);
    let server = TestServer::builder()
        .watch_window(4 * n)
        .start()
        .await
        .unwrap();
    let client = server.client();
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    println!("kmeta-apiserver bench: {n} ConfigMaps, {watchers} watchers, concurrency {conc}");

    let received = Arc::new(AtomicU64::new(0));
    let start_rv = server.state().resource_version().to_string();
    let mut watch_tasks = vec![];
    // Watchers either decode typed events (KMETA_BENCH_TYPED=1, measures client + server) or count
    // raw event lines (default, measures the server's delivery).
    let typed = std::env::var("KMETA_BENCH_TYPED").is_ok_and(|v| v == "1");
    for _ in 0..watchers {
        let api = api.clone();
        let client = client.clone();
        let received = received.clone();
        let rv = start_rv.clone();
        watch_tasks.push(tokio::spawn(async move {
            if typed {
                let wp = WatchParams::default().timeout(290);
                let mut s = api.watch(&wp, &rv).await.unwrap().boxed();
                while let Ok(Some(ev)) = s.try_next().await {
                    if matches!(ev, WatchEvent::Added(_) | WatchEvent::Modified(_)) {
                        received.fetch_add(1, Ordering::Relaxed);
                    }
                }
            } else {
                let req = http::Request::get(format!(
                    "/api/v1/namespaces/default/configmaps?watch=true&timeoutSeconds=290&resourceVersion={rv}"
                ))
                .body(vec![])
                .unwrap();
                let mut lines = client.request_stream(req).await.unwrap().lines();
                while let Some(Ok(_)) = lines.next().await {
                    received.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }

    let t = Instant::now();
    stream::iter(0..n)
        .for_each_concurrent(conc, |i| {
            let api = api.clone();
            async move {
                api.create(&PostParams::default(), &cm(i)).await.unwrap();
            }
        })
        .await;
    report("create", n, t.elapsed());

    let t = Instant::now();
    let lists = 10;
    for _ in 0..lists {
        let l = api.list(&ListParams::default()).await.unwrap();
        assert_eq!(l.items.len(), n);
    }
    report("list (full, x10)", lists, t.elapsed());

    let t = Instant::now();
    let mut pages = 0;
    let mut lp = ListParams::default().limit(500);
    loop {
        let l = api.list(&lp).await.unwrap();
        pages += 1;
        match l.metadata.continue_ {
            Some(c) if !c.is_empty() => lp = lp.continue_token(&c),
            _ => break,
        }
    }
    report("list (pages of 500)", pages, t.elapsed());

    let t = Instant::now();
    let sel = 20;
    for i in 0..sel {
        let l = api
            .list(&ListParams::default().labels(&format!("shard={}", i % 10)))
            .await
            .unwrap();
        assert_eq!(l.items.len(), n / 10);
    }
    report("list (labelSelector)", sel, t.elapsed());

    let t = Instant::now();
    stream::iter(0..n)
        .for_each_concurrent(conc, |i| {
            let api = api.clone();
            async move {
                let mut c = cm(i);
                c.data
                    .as_mut()
                    .unwrap()
                    .insert("updated".into(), "yes".into());
                api.replace(&format!("cm-{i:05}"), &PostParams::default(), &c)
                    .await
                    .unwrap();
            }
        })
        .await;
    report("update (PUT)", n, t.elapsed());

    let expected = (2 * n * watchers) as u64;
    let t = Instant::now();
    let deadline = Instant::now() + Duration::from_secs(300);
    while received.load(Ordering::Relaxed) < expected && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let got = received.load(Ordering::Relaxed);
    println!(
        "watch delivery: {got}/{expected} events to {watchers} watchers ({:.3}s after last write)",
        t.elapsed().as_secs_f64()
    );
    if std::env::var("KMETA_BENCH_ADMISSION").is_ok_and(|v| v == "1") {
        admission_phases(&server, (n / 10).max(1), conc).await;
    }
    let c = server.counters();
    println!("total requests: {} (writes {})", c.total(), c.writes());
    match vm_hwm_kib() {
        Some(k) => println!("peak RSS (VmHWM): {:.1} MiB", k as f64 / 1024.0),
        None => println!("peak RSS: unavailable (/proc/self/status)"),
    }
    for t in watch_tasks {
        t.abort();
    }
    server.shutdown().await;
}

/// Creates `n` ConfigMaps in a fresh namespace, `conc` at a time; reports them as `phase`.
async fn creates_in(server: &TestServer, ns: &str, n: usize, conc: usize, phase: &str) {
    let client = server.client();
    let nss: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let ns_obj = serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap();
    nss.create(&PostParams::default(), &ns_obj).await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(client, ns);
    let t = Instant::now();
    stream::iter(0..n)
        .for_each_concurrent(conc, |i| {
            let api = api.clone();
            async move {
                api.create(&PostParams::default(), &cm(i)).await.unwrap();
            }
        })
        .await;
    report(phase, n, t.elapsed());
}

/// The cost of admission: creates with no admission, through a mutating webhook (an axum server
/// in this process adding a label by JSON patch), and under a ValidatingAdmissionPolicy.
async fn admission_phases(server: &TestServer, n: usize, conc: usize) {
    use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
    creates_in(server, "bench-plain", n, conc, "create, no admission").await;
    let app = axum::Router::new().route(
        "/",
        axum::routing::post(|axum::Json(r): axum::Json<serde_json::Value>| async move {
            let patch = base64::Engine::encode(
                &base64::engine::general_purpose::STANDARD,
                br#"[{"op":"add","path":"/metadata/labels/admitted","value":"yes"}]"#,
            );
            axum::Json(
                json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                "response": {"uid": r["request"]["uid"], "allowed": true,
                    "patchType": "JSONPatch", "patch": patch}}),
            )
        }),
    );
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/", l.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(l, app).await.unwrap() });
    let only = |ns: &str| json!({"matchLabels": {"kubernetes.io/metadata.name": ns}});
    let rules = json!([{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
        "resources": ["configmaps"]}]);
    let objects = [
        (
            "MutatingWebhookConfiguration",
            "mutatingwebhookconfigurations",
            json!({
            "metadata": {"name": "bench"}, "webhooks": [{"name": "bench.example.com",
                "clientConfig": {"url": url}, "rules": rules, "namespaceSelector": only("bench-webhook"),
                "sideEffects": "None", "admissionReviewVersions": ["v1"]}]}),
        ),
        (
            "ValidatingAdmissionPolicy",
            "validatingadmissionpolicies",
            json!({
            "metadata": {"name": "bench"}, "spec": {"matchConstraints": {"resourceRules": rules,
                "namespaceSelector": only("bench-policy")},
                "validations": [{"expression": "size(object.data) < 10"}]}}),
        ),
        (
            "ValidatingAdmissionPolicyBinding",
            "validatingadmissionpolicybindings",
            json!({
            "metadata": {"name": "bench"}, "spec": {"policyName": "bench", "validationActions": ["Deny"]}}),
        ),
    ];
    for (kind, plural, mut obj) in objects {
        let gvk = GroupVersionKind::gvk("admissionregistration.k8s.io", "v1", kind);
        let api: Api<DynamicObject> = Api::all_with(
            server.client(),
            &ApiResource::from_gvk_with_plural(&gvk, plural),
        );
        obj["apiVersion"] = json!("admissionregistration.k8s.io/v1");
        obj["kind"] = json!(kind);
        api.create(
            &PostParams::default(),
            &serde_json::from_value(obj).unwrap(),
        )
        .await
        .unwrap();
    }
    creates_in(server, "bench-webhook", n, conc, "create, mutating webhook").await;
    creates_in(server, "bench-policy", n, conc, "create, admission policy").await;
}
