//! A Jsonnet hook evaluated by kmeta (its worker processes, as a sync calls it) side by side with
//! the same hook behind a jsonnetd-like server (`benches/support/jsonnetd.py`: the Python package
//! `jsonnet`, C++ Jsonnet, evaluating the file per request as jsonnetd does): time per call,
//! p50 and p99, over the same requests, one call at a time; then the memory of one worker
//! holding 100 program versions (100 controllers' programs).
//!
//! `cargo bench -p kmeta --bench jsonnet_hook` (`KMETA_JSONNET_PYTHONPATH=DIR` where the
//! `jsonnet` package is, else that half is skipped). Prints figures; asserts nothing.

use std::io::BufRead as _;
use std::time::{Duration, Instant};

use kmeta::hook::jsonnet::{Pool, Sources, WorkerCommand};

/// service-per-pod's sync hook (a Service per StatefulSet Pod), written for the benches.
const SYNC: &str = include_str!("support/service_per_pod.jsonnet");

const CALLS: usize = 500;

fn request(i: usize) -> String {
    serde_json::json!({
        "controller": {"metadata": {"name": "service-per-pod"}},
        "object": {"apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": format!("web-{i}"), "namespace": "default",
                "annotations": {"service-per-pod-label": "pod-name",
                                "service-per-pod-ports": "80:8080,443:8443"}},
            "spec": {"replicas": 3, "serviceName": "web",
                "template": {"spec": {"containers": [{"name": "web", "image": "nginx"}]}}}},
        "attachments": {"Service.v1": {}},
        "finalizing": false
    })
    .to_string()
}

fn percentiles(mut d: Vec<Duration>) -> (Duration, Duration) {
    d.sort();
    let at = |q: f64| d[((d.len() as f64 - 1.0) * q).round() as usize];
    (at(0.5), at(0.99))
}

async fn kmeta_calls(pool: &Pool) -> Vec<Duration> {
    let sources = Sources::inline(SYNC);
    let digest = sources.digest();
    let mut out = Vec::with_capacity(CALLS);
    for i in 0..CALLS + 20 {
        let started = Instant::now();
        let answer = pool
            .evaluate(
                &digest,
                &sources,
                request(i),
                Duration::from_secs(10),
                1 << 24,
            )
            .await;
        if let Err(e) = answer {
            panic!("kmeta's evaluation failed: {e}");
        }
        if i >= 20 {
            out.push(started.elapsed());
        }
    }
    out
}

async fn jsonnetd_calls() -> Option<Vec<Duration>> {
    let dir = tempfile_dir();
    let file = dir.join("hook.jsonnet");
    std::fs::write(&file, SYNC).ok()?;
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/benches/support/jsonnetd.py");
    let mut cmd = std::process::Command::new("python3");
    cmd.arg(script)
        .arg(&file)
        .stdout(std::process::Stdio::piped());
    if let Some(dir) = std::env::var_os("KMETA_JSONNET_PYTHONPATH") {
        cmd.env("PYTHONPATH", dir);
    }
    let mut child = cmd.spawn().ok()?;
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take()?)
        .read_line(&mut line)
        .ok()?;
    let Ok(port) = line.trim().parse::<u16>() else {
        println!("jsonnetd-like server: not started (the `jsonnet` package is missing?); skipped");
        let _ = child.kill();
        return None;
    };
    let url = format!("http://127.0.0.1:{port}/hook");
    let http = reqwest::Client::new();
    let mut out = Vec::with_capacity(CALLS);
    for i in 0..CALLS + 20 {
        let started = Instant::now();
        let resp = http.post(&url).body(request(i)).send().await.ok()?;
        let ok = resp.status().is_success();
        let _ = resp.bytes().await.ok()?;
        assert!(ok, "the jsonnetd-like server failed");
        if i >= 20 {
            out.push(started.elapsed());
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    Some(out)
}

fn tempfile_dir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("kmeta-jsonnet-bench-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    dir
}

/// One worker's resident memory after it loaded `n` program versions.
async fn memory_with_programs(pool: &Pool, n: usize) -> u64 {
    for i in 0..n {
        let sources = Sources::inline(&format!("local controller = {i};\n{SYNC}"));
        let digest = sources.digest();
        let answer = pool
            .evaluate(
                &digest,
                &sources,
                request(i),
                Duration::from_secs(10),
                1 << 24,
            )
            .await;
        if let Err(e) = answer {
            panic!("kmeta's evaluation failed: {e}");
        }
    }
    pool.idle_workers().1
}

#[tokio::main]
async fn main() {
    let worker = WorkerCommand {
        program: env!("CARGO_BIN_EXE_kmeta").into(),
        args: vec!["jsonnet-worker".into()],
    };
    let pool = Pool::shared(&worker, 1, 1 << 30);
    let kmeta = kmeta_calls(&pool).await;
    let (k50, k99) = percentiles(kmeta);
    println!("service-per-pod sync hook, {CALLS} calls one at a time:");
    println!("  kmeta (worker process):  p50 {k50:>10.2?}  p99 {k99:>10.2?}");
    if let Some(server) = jsonnetd_calls().await {
        let (s50, s99) = percentiles(server);
        println!("  jsonnetd-like webhook:   p50 {s50:>10.2?}  p99 {s99:>10.2?}");
        println!(
            "  ratio (webhook / kmeta): p50 {:.1}x  p99 {:.1}x",
            s50.as_secs_f64() / k50.as_secs_f64(),
            s99.as_secs_f64() / k99.as_secs_f64()
        );
    }
    let one = Pool::shared(&worker, 1, 1 << 31);
    let base = memory_with_programs(&one, 1).await;
    let hundred = memory_with_programs(&one, 100).await;
    println!(
        "one worker's resident memory: {:.1} MiB with 1 program, {:.1} MiB with 100",
        base as f64 / 1048576.0,
        hundred as f64 / 1048576.0
    );
}
