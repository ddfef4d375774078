//! Memory per cached child: Deployment-shaped children (~1 KB and ~3.3 KB of JSON as the API
//! server returns them, managedFields included) created on kmeta-apiserver, listed, and held
//! the way the controller's cache holds them (`cache`: [`kmeta::Compact`], the JSON text
//! without managedFields plus the identity claims and indexes read, parsed), side by side with
//! the earlier forms: the whole object kept as decoded (`decoded`) and the decoded value without
//! managedFields (`value`, `kmeta::cached_value`: what parents and related objects are still held
//! as). `nothing` holds no child (an empty `Arc` each): the baseline the method itself shows (the
//! `Vec` of handles and the empty `Arc`s, ~40 B per child); `text` (run alone with
//! `KMETA_CHILD_BYTES_RUN=text,1,1`) only the compact JSON text.
//!
//! `cargo bench -p kmeta-tests --bench child_bytes` (env `KMETA_BENCH_CHILDREN`, default
//! 10 000). Each form is measured in a fresh process: the heap bytes requested and not freed
//! while decoding and holding every child (allocator overhead not included). Prints figures;
//! asserts nothing.

use std::alloc::System;
use std::sync::Arc;

use kmeta::{Compact, Resolved, Watched, cached_value};
use kube::api::{Api, ApiResource, DynamicObject, ListParams, PostParams};
use serde_json::{Value, json};
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};

/// The system allocator, counting the bytes requested (what a child holds does not depend on
/// the allocator; its overhead is not counted).
#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A Deployment with `containers` containers of `env` env vars each.
fn deployment(name: &str, containers: usize, env: usize) -> Value {
    let cs: Vec<Value> = (0..containers)
        .map(|c| {
            json!({"name": format!("c{c}"), "image": format!("registry.example/app-{c}:1.2.3"),
                "ports": [{"containerPort": 8080 + c, "protocol": "TCP"}],
                "env": (0..env).map(|e| json!({"name": format!("VAR_{e}"), "value": format!("value-{e}")}))
                    .collect::<Vec<_>>(),
                "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}})
        })
        .collect();
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "labels": {"app": name, "tier": "web"}},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": cs}}}})
}

/// Holds every listed child in `form` and returns the resident growth per child.
fn hold(items: &[Vec<u8>], form: &str, r: &Resolved) -> f64 {
    type Held = Arc<dyn std::any::Any + Send + Sync>;
    let n = items.len() as f64;
    let region = Region::new(GLOBAL);
    let held: Vec<Held> = items
        .iter()
        .filter_map(|bytes| {
            let o: Watched = serde_json::from_slice(bytes).ok()?;
            let held: Held = match form {
                "cache" => Arc::new(Compact::from_watched(o, r).ok()?),
                "value" => Arc::new(cached_value(o, r)?),
                "text" => Arc::new(cached_value(o, r)?.to_string().into_boxed_str()),
                "nothing" => Arc::new(()),
                _ => Arc::new(serde_json::from_slice::<serde_json::Value>(bytes).ok()?),
            };
            Some(held)
        })
        .collect();
    let c = region.change();
    // stats_alloc already counts a realloc's growth in `bytes_allocated` (and a shrink in
    // `bytes_deallocated`); `bytes_reallocated` is the same delta again, not to be added
    let net = c.bytes_allocated as f64 - c.bytes_deallocated as f64;
    let per = net / n;
    drop(held);
    per
}

async fn measure(form: &str, containers: usize, env: usize) -> anyhow::Result<()> {
    let n = env_usize("KMETA_BENCH_CHILDREN", 10_000);
    let server = kmeta_apiserver::TestServer::start().await?;
    let ar = ApiResource::erase::<k8s_openapi::api::apps::v1::Deployment>(&());
    let api: Api<DynamicObject> = Api::namespaced_with(server.client(), "default", &ar);
    let pp = PostParams {
        field_manager: Some("bench".into()),
        ..PostParams::default()
    };
    for i in 0..n {
        let d: DynamicObject =
            serde_json::from_value(deployment(&format!("d-{i}"), containers, env))?;
        api.create(&pp, &d).await?;
    }
    let listed = api.list(&ListParams::default()).await?;
    let items: Vec<Vec<u8>> = listed
        .items
        .iter()
        .map(serde_json::to_vec)
        .collect::<Result<_, _>>()?;
    drop(listed);
    let wire = items.iter().map(Vec::len).sum::<usize>() as f64 / n as f64;
    let managed = items
        .iter()
        .filter_map(|b| serde_json::from_slice::<Value>(b).ok())
        .filter_map(|v| {
            v.pointer("/metadata/managedFields")
                .map(|m| m.to_string().len())
        })
        .sum::<usize>() as f64
        / n as f64;
    let r = Resolved {
        api: ar,
        namespaced: true,
        has_status: true,
    };
    let text = items
        .iter()
        .filter_map(|b| serde_json::from_slice::<Watched>(b).ok())
        .filter_map(|o| cached_value(o, &r))
        .map(|v| v.to_string().len())
        .sum::<usize>() as f64
        / n as f64;
    let per = hold(&items, form, &r);
    println!(
        "  {containers}×{env} Deployment: {wire:.0} B of JSON ({managed:.0} B managedFields, {text:.0} B without); {form}: {per:.0} B per child ({:.1}× the JSON, {:.1}× without managedFields)",
        per / wire,
        per / text
    );
    Ok(())
}

#[tokio::main(flavor = "multi_thread")]
async fn main() -> anyhow::Result<()> {
    if let Ok(spec) = std::env::var("KMETA_CHILD_BYTES_RUN") {
        let parts: Vec<&str> = spec.split(',').collect();
        if let [form, c, e] = parts[..] {
            return measure(form, c.parse()?, e.parse()?).await;
        }
        anyhow::bail!("KMETA_CHILD_BYTES_RUN={spec}: expected FORM,CONTAINERS,ENV");
    }
    println!(
        "child_bytes: {} children per shape; heap bytes held per child",
        env_usize("KMETA_BENCH_CHILDREN", 10_000)
    );
    let me = std::env::current_exe()?;
    for (c, e) in [(1, 1), (2, 6)] {
        for form in ["nothing", "decoded", "value", "cache"] {
            let status = std::process::Command::new(&me)
                .env("KMETA_CHILD_BYTES_RUN", format!("{form},{c},{e}"))
                .status()?;
            anyhow::ensure!(status.success(), "{form} {c}×{e} failed: {status}");
        }
    }
    Ok(())
}
