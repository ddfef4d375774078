//! CEL evaluation as a kro graph's sync uses it: the expressions of kro's `webapp` and
//! `cel-functions` examples compiled once, evaluated in one [`Scope`] holding an instance and a
//! Deployment, one expression at a time: time per evaluation, p50 and p99 over many rounds; the
//! same for the example's expressions using kro's own libraries, in a kro scope; then the cost
//! of building each scope itself (once per sync).
//!
//! `cargo bench -p kmeta-cel --bench cel_eval`. Prints figures; asserts nothing.

use std::time::{Duration, Instant};

use kmeta_cel::{Bindings, Expression, Scope};
use serde_json::json;

const EXPRESSIONS: &[&str] = &[
    "schema.spec.name",
    "schema.spec.replicas",
    "schema.spec.service.enabled",
    "deployment.metadata.name",
    "deployment.spec.replicas == deployment.status.availableReplicas",
    "deployment.status.conditions",
    "deployment.status.availableReplicas * 10",
    "schema.metadata.name + '-job'",
    "string(schema.spec.port)",
    "schema.spec.fullDNSName.split('.')[0]",
    "size(schema.spec.fullDNSName.split('.')) > 2 ? schema.spec.fullDNSName.split('.').slice(0, 3).join('.') : schema.spec.fullDNSName",
    "deployment.status.conditions.exists(c, c.type == 'Available' && c.status == 'True')",
];

const ROUNDS: usize = 2000;

fn bindings() -> Bindings {
    Bindings::default()
        .with(
            "schema",
            json!({
            "apiVersion": "kro.run/v1alpha1", "kind": "WebApp",
            "metadata": {"name": "shop", "namespace": "default", "uid": "6c1a"},
            "spec": {"name": "shop", "replicas": 3, "port": 8080, "image": "nginx",
                "service": {"enabled": true}, "fullDNSName": "a.b.c.d.example.com"}}),
        )
        .with(
            "deployment",
            json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "shop", "namespace": "default", "labels": {"app": "shop"}},
            "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "shop"}},
                "template": {"spec": {"containers": [{"name": "web", "image": "nginx",
                    "ports": [{"containerPort": 8080}]}]}}},
            "status": {"availableReplicas": 3, "conditions": [
                {"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable"},
                {"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable"}]}}),
        )
}

fn percentiles(mut d: Vec<Duration>) -> (Duration, Duration) {
    d.sort();
    let at = |q: f64| d[((d.len() as f64 - 1.0) * q).round() as usize];
    (at(0.5), at(0.99))
}

/// The expressions of kro's `cel-functions` example that use kro's own libraries (and
/// `base64`, `quantity`, `sum` beside them), evaluated in a [`Scope::kro`].
const KRO_EXPRESSIONS: &[&str] = &[
    "random.seededString(10, schema.metadata.uid)",
    "string([100, 200, 300].sum())",
    "json.unmarshal('{\"exampleJSONKey\": \"exampleJSONValue\"}').exampleJSONKey",
    "json.marshal({\"name\": schema.spec.name})",
    "quantity(\"500Mi\").isLessThan(quantity(\"1Gi\")) ? \"small\" : \"large\"",
    "base64.encode(hash.fnv64a(schema.spec.name))",
    "base64.encode(hash.sha256(schema.spec.name))",
];

/// Each of `sources` evaluated in `scope`, [`ROUNDS`] times after 100 to warm up: p50, p99.
fn time_evaluations(sources: &[&str], scope: &Scope) -> (Duration, Duration) {
    let compiled: Vec<Expression> = sources
        .iter()
        .map(|e| Expression::compile(e).unwrap_or_else(|err| panic!("{e}: {err}")))
        .collect();
    let mut all = Vec::with_capacity(ROUNDS * compiled.len());
    for round in 0..ROUNDS + 100 {
        for e in &compiled {
            let started = Instant::now();
            let out = e.evaluate_in(scope);
            let took = started.elapsed();
            if let Err(err) = out {
                panic!("{}: {err}", e.source());
            }
            if round >= 100 {
                all.push(took);
            }
        }
    }
    percentiles(all)
}

/// A scope built by `build` [`ROUNDS`] times: p50, p99.
fn time_scopes(build: impl Fn() -> Scope) -> (Duration, Duration) {
    let mut scopes = Vec::with_capacity(ROUNDS);
    for _ in 0..ROUNDS {
        let started = Instant::now();
        let s = build();
        scopes.push(started.elapsed());
        drop(s);
    }
    percentiles(scopes)
}

fn main() {
    let b = bindings();
    let (p50, p99) = time_evaluations(EXPRESSIONS, &Scope::new(&b));
    println!(
        "cel_eval: {} expressions x {ROUNDS} rounds, one evaluation each: p50 {p50:?}, p99 {p99:?}",
        EXPRESSIONS.len()
    );
    let (p50, p99) = time_evaluations(KRO_EXPRESSIONS, &Scope::kro(&b));
    println!(
        "cel_eval: {} expressions of kro's libraries x {ROUNDS} rounds: p50 {p50:?}, p99 {p99:?}",
        KRO_EXPRESSIONS.len()
    );
    let (p50, p99) = time_scopes(|| Scope::new(&b));
    println!(
        "cel_eval: a scope of an instance and a Deployment (once per sync): p50 {p50:?}, p99 {p99:?}"
    );
    let (p50, p99) = time_scopes(|| Scope::kro(&b));
    println!("cel_eval: the same scope with kro's libraries: p50 {p50:?}, p99 {p99:?}");
}
