//! One controller two ways: kro's `webapp` graph (a Deployment, a Service reading it, an
//! Ingress left out, the instance's status from the Deployment's) as a CEL hook, and the same
//! controller written as a Jsonnet hook (`benches/support/webapp.jsonnet`) evaluated by kmeta's
//! worker process; each answering the same sync requests one at a time, as a sync calls it
//! (CEL on a blocking thread, Jsonnet through its worker's pipe): p50 and p99 per sync.
//!
//! `cargo bench -p kmeta --bench cel_hook`. Prints figures; asserts nothing.

use std::time::{Duration, Instant};

use kmeta::hook::jsonnet::{Pool, Sources, WorkerCommand};
use kmeta::kro::CompiledGraph;
use serde_json::{Value, json};

const JSONNET: &str = include_str!("support/webapp.jsonnet");
const CALLS: usize = 500;

fn graph() -> Value {
    json!({
        "schema": {"apiVersion": "v1alpha1", "kind": "WebApp",
            "spec": {"name": "string", "image": "string | default=nginx", "port": "integer | default=8080",
                     "replicas": "integer | default=1", "service": {"enabled": "boolean | default=true"},
                     "ingress": {"enabled": "boolean | default=false"}},
            "status": {"availableReplicas": "${deployment.status.availableReplicas}",
                       "deploymentConditions": "${deployment.status.conditions}"}},
        "resources": [
            {"id": "deployment",
             "readyWhen": ["${deployment.spec.replicas == deployment.status.availableReplicas}"],
             "template": {"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "${schema.spec.name}", "labels": {"app.kubernetes.io/name": "${schema.spec.name}"}},
                "spec": {"replicas": "${schema.spec.replicas}",
                    "selector": {"matchLabels": {"app": "${schema.spec.name}"}},
                    "template": {"metadata": {"labels": {"app": "${schema.spec.name}"}},
                        "spec": {"containers": [{"name": "webapp", "image": "${schema.spec.image}",
                            "ports": [{"containerPort": "${schema.spec.port}"}]}]}}}}},
            {"id": "service", "includeWhen": ["${schema.spec.service.enabled}"],
             "template": {"apiVersion": "v1", "kind": "Service",
                "metadata": {"name": "${deployment.metadata.name}"},
                "spec": {"selector": {"app": "${schema.spec.name}"},
                    "ports": [{"name": "http", "port": 80, "targetPort": "${schema.spec.port}"}]}}},
            {"id": "ingress", "includeWhen": ["${schema.spec.ingress.enabled}"],
             "template": {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
                "metadata": {"name": "${service.metadata.name}"}}},
        ]
    })
}

/// A sync request of instance `i` with its Deployment observed and available.
fn request(i: usize) -> Value {
    let name = format!("web-{i}");
    json!({
        "controller": {"metadata": {"name": "webapp"}},
        "parent": {"apiVersion": "kro.run/v1alpha1", "kind": "WebApp",
            "metadata": {"name": name, "namespace": "default", "uid": format!("u{i}"), "generation": 1},
            "spec": {"name": name, "image": "nginx", "port": 8080, "replicas": 2,
                     "service": {"enabled": true}, "ingress": {"enabled": false}}},
        "children": {"Deployment.apps/v1": {name.clone(): {
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": "default", "labels": {"kro.run/node-id": "deployment"}},
            "spec": {"replicas": 2},
            "status": {"availableReplicas": 2, "conditions": [{"type": "Available", "status": "True"}]}}},
            "Service.v1": {}},
        "related": {},
        "finalizing": false
    })
}

fn percentiles(mut d: Vec<Duration>) -> (Duration, Duration) {
    d.sort();
    let at = |q: f64| d[((d.len() as f64 - 1.0) * q).round() as usize];
    (at(0.5), at(0.99))
}

async fn cel_calls() -> Vec<Duration> {
    let g = CompiledGraph::compile(&graph()).unwrap_or_else(|e| panic!("the graph: {e}"));
    let mut out = Vec::with_capacity(CALLS);
    for i in 0..CALLS + 20 {
        let (g, req) = (g.clone(), request(i));
        let started = Instant::now();
        let answer = tokio::task::spawn_blocking(move || {
            g.answer("sync", &req, "2026-12-06T00:00:00Z")
                .map(|v| v.to_string())
        })
        .await;
        let took = started.elapsed();
        match answer {
            Ok(Ok(text)) if text.contains("\"Service\"") => {}
            other => panic!("the CEL hook's answer: {other:?}"),
        }
        if i >= 20 {
            out.push(took);
        }
    }
    out
}

async fn jsonnet_calls(pool: &Pool) -> Vec<Duration> {
    let sources = Sources::inline(JSONNET);
    let digest = sources.digest();
    let mut out = Vec::with_capacity(CALLS);
    for i in 0..CALLS + 20 {
        let req = request(i).to_string();
        let started = Instant::now();
        let answer = pool
            .evaluate(&digest, &sources, req, Duration::from_secs(10), 1 << 24)
            .await;
        let took = started.elapsed();
        match answer {
            Ok(text) if text.contains("\"Service\"") => {}
            other => panic!("the Jsonnet hook's answer: {other:?}"),
        }
        if i >= 20 {
            out.push(took);
        }
    }
    out
}

#[tokio::main]
async fn main() {
    let (p50, p99) = percentiles(cel_calls().await);
    println!("cel_hook: kro webapp graph as a CEL hook, one sync: p50 {p50:?}, p99 {p99:?}");
    let worker = WorkerCommand {
        program: env!("CARGO_BIN_EXE_kmeta").into(),
        args: vec!["jsonnet-worker".into()],
    };
    let pool = Pool::shared(&worker, 1, 1 << 30);
    let (p50, p99) = percentiles(jsonnet_calls(&pool).await);
    println!("cel_hook: the same controller as a Jsonnet hook, one sync: p50 {p50:?}, p99 {p99:?}");
}
