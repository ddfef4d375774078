//! 1000 StatefulSets through service-per-pod's sync hook (a Service per Pod, three Pods each),
//! written in Jsonnet, side by side in one run: the hook evaluated by kmeta (its worker
//! processes), then the same file behind a jsonnetd-like webhook server
//! (`controller/benches/support/jsonnetd.py`: the Python package `jsonnet`, C++ Jsonnet, a fresh
//! evaluation per request as jsonnetd does). Reports the time from the first StatefulSet created to
//! the last Service, and the hook calls.
//!
//! `KMETA_JSONNET_PYTHONPATH=DIR cargo bench -p kmeta-tests --bench jsonnet_converge` (env
//! `KMETA_BENCH_PARENTS`, default 1000; `KMETA_BENCH_WORKERS`, default 5). Without the `jsonnet`
//! package the webhook half is skipped. Prints figures; asserts nothing about time.

use std::io::BufRead as _;
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use kmeta::ManagerConfig;
use kmeta_tests::*;
use serde_json::{Value, json};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const CONCURRENCY: usize = 32;
const REPLICAS: usize = 3;

/// service-per-pod's sync hook, the program `controller/benches/jsonnet_hook.rs` measures too.
const SYNC: &str = include_str!("../../controller/benches/support/service_per_pod.jsonnet");

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The jsonnetd-like server for `SYNC` and its URL; `None` without the `jsonnet` package.
fn jsonnetd() -> anyhow::Result<Option<(std::process::Child, String)>> {
    let file = std::env::temp_dir().join(format!("kmeta-converge-{}.jsonnet", std::process::id()));
    std::fs::write(&file, SYNC)?;
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../controller/benches/support/jsonnetd.py"
    );
    let mut cmd = std::process::Command::new("python3");
    cmd.arg(script)
        .arg(&file)
        .stdout(std::process::Stdio::piped());
    if let Some(dir) = std::env::var_os("KMETA_JSONNET_PYTHONPATH") {
        cmd.env("PYTHONPATH", dir);
    }
    let mut child = cmd.spawn()?;
    let mut line = String::new();
    if let Some(out) = child.stdout.take() {
        std::io::BufReader::new(out).read_line(&mut line)?;
    }
    match line.trim().parse::<u16>() {
        Ok(port) => Ok(Some((child, format!("http://127.0.0.1:{port}/hook")))),
        Err(_) => {
            let _ = child.kill();
            let _ = child.wait();
            Ok(None)
        }
    }
}

/// Converges `n` StatefulSets with the hook given as `hooks` (a merge patch of the
/// DecoratorController's spec) reached at `url`; the time to the last Service.
async fn converge(
    name: &str,
    n: usize,
    workers: usize,
    url: &str,
    hooks: Value,
) -> anyhow::Result<Duration> {
    let mut s = Scenario::new(name).prepare().await?;
    let dc = Dc::new("service-per-pod")
        .sync_url(url)
        .resources(json!([{"apiVersion": "apps/v1", "resource": "statefulsets",
            "annotationSelector": {"matchExpressions": [
                {"key": "service-per-pod-label", "operator": "Exists"}]}}]))
        .attachments(json!([{"apiVersion": "v1", "resource": "services"}]))
        .patch(hooks);
    s.decorator(dc).await?;
    s.start_controller_with(ManagerConfig::default().workers(workers));
    let ns = s.ns.clone();
    let client = s.client.clone();
    let started = Instant::now();
    futures::stream::iter(0..n)
        .map(|i| {
            let api: kube::Api<kube::api::DynamicObject> = kube::Api::namespaced_with(
                client.clone(),
                &ns,
                &ar("apps/v1", "StatefulSet", "statefulsets"),
            );
            let sts = json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
                "metadata": {"name": format!("web-{i}"), "namespace": ns, "annotations": {
                    "service-per-pod-label": "pod-name",
                    "service-per-pod-ports": "80:8080,443:8443"}},
                "spec": {"replicas": REPLICAS, "serviceName": "web",
                    "selector": {"matchLabels": {"app": "web"}},
                    "template": {"metadata": {"labels": {"app": "web"}},
                        "spec": {"containers": [{"name": "web", "image": "nginx"}]}}}});
            async move {
                api.create(&Default::default(), &obj(sts)?).await?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(CONCURRENCY)
        .try_collect::<Vec<_>>()
        .await?;
    let services = s.api("v1", "Service", "services", Some(&ns));
    eventually(
        "a Service per Pod of every StatefulSet",
        Duration::from_secs(1800),
        || async {
            let list = services.list(&Default::default()).await?;
            Ok((list.items.len() >= n * REPLICAS).then_some(()))
        },
    )
    .await?;
    let took = started.elapsed();
    s.finish().await?;
    Ok(took)
}

#[tokio::main(flavor = "multi_thread")]
async fn main() -> anyhow::Result<()> {
    let n = env_usize("KMETA_BENCH_PARENTS", 1000);
    let workers = env_usize("KMETA_BENCH_WORKERS", 5);
    println!(
        "jsonnet_converge: {n} StatefulSets × {REPLICAS} Services, service-per-pod's sync hook in Jsonnet, {workers} workers"
    );
    let inline = json!({"hooks": {"sync": {"webhook": null, "jsonnet": {"source": SYNC}}}});
    let kmeta = converge(
        "jsonnet-conv-kmeta",
        n,
        workers,
        "http://127.0.0.1:9/none",
        inline,
    )
    .await?;
    println!("  evaluated by kmeta:      {:.2} s", kmeta.as_secs_f64());
    match jsonnetd()? {
        Some((mut server, url)) => {
            let webhook = converge("jsonnet-conv-webhook", n, workers, &url, json!({})).await;
            let _ = server.kill();
            let _ = server.wait();
            let webhook = webhook?;
            println!(
                "  jsonnetd-like webhook:   {:.2} s ({:.1}× kmeta's time)",
                webhook.as_secs_f64(),
                webhook.as_secs_f64() / kmeta.as_secs_f64()
            );
        }
        None => println!("  jsonnetd-like webhook: skipped (the `jsonnet` package is missing)"),
    }
    Ok(())
}
