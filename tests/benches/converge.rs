//! Controller benchmark: how fast kmeta converges N parents × M children on kmeta-apiserver,
//! and how many writes a full no-op resync makes, side by side with the floor — the same client
//! creating the same objects directly.
//!
//! `cargo bench -p kmeta-tests --bench converge` (env `KMETA_BENCH_PARENTS`, default 1000;
//! `KMETA_BENCH_CHILDREN`, default 10; `KMETA_BENCH_WORKERS`, default 5 = Metacontroller's).
//! Prints figures; asserts nothing about time.

use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use kmeta::ManagerConfig;
use kmeta_tests::*;
use serde_json::{Value, json};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const CONCURRENCY: usize = 32;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}

async fn create_all(env: &Env, plural: &str, objects: Vec<Value>) -> anyhow::Result<Duration> {
    let start = Instant::now();
    futures::stream::iter(objects)
        .map(|o| {
            let client = env.client.clone();
            let plural = plural.to_owned();
            async move {
                let av = o["apiVersion"].as_str().unwrap_or_default().to_owned();
                let kind = o["kind"].as_str().unwrap_or_default().to_owned();
                let ns = o["metadata"]["namespace"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                let api: kube::Api<kube::api::DynamicObject> =
                    kube::Api::namespaced_with(client, &ns, &ar(&av, &kind, &plural));
                api.create(&Default::default(), &obj(o)?).await?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(CONCURRENCY)
        .try_collect::<Vec<_>>()
        .await?;
    Ok(start.elapsed())
}

/// The floor: the same client creating `objects` ConfigMaps directly.
async fn floor(objects: usize) -> anyhow::Result<Duration> {
    let floor_env = Env::new("floor").await?;
    let ns = floor_env.ns.clone();
    let direct: Vec<Value> = (0..objects)
        .map(|i| {
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": format!("cm-{i}"), "namespace": ns},
                   "data": {"i": i.to_string()}})
        })
        .collect();
    let floor = create_all(&floor_env, "configmaps", direct).await?;
    floor_env.finish().await?;
    println!(
        "  floor: create {} ConfigMaps directly ({CONCURRENCY} concurrent): {:.2} s ({:.0}/s)",
        objects,
        floor.as_secs_f64(),
        objects as f64 / floor.as_secs_f64()
    );
    Ok(floor)
}

/// The hook: `children` ConfigMaps per parent; status.children counts the observed ones.
fn hook(children: usize) -> impl Fn(&str, &Value) -> Reply + Send + Sync + 'static {
    move |_, req| {
        let name = req["parent"]["metadata"]["name"]
            .as_str()
            .unwrap_or_default();
        let observed = observed_configmaps(req);
        let cms: Vec<Value> = (0..children)
            .map(|i| {
                json!({"apiVersion": "v1", "kind": "ConfigMap",
                       "metadata": {"name": format!("{name}-{i}")},
                       "data": {"i": i.to_string()}})
            })
            .collect();
        Reply::Json(json!({"status": {"children": observed}, "children": cms}))
    }
}

/// A full resync with nothing to change: counts the controller's writes.
async fn resync(env: &Running, parents: usize) -> anyhow::Result<()> {
    let things = env.parents();
    let server = env.server().map(|s| s.counters());
    let before = env.syncs("bench-cc");
    let start = Instant::now();
    futures::stream::iter(0..parents)
        .map(|i| {
            let things = things.clone();
            async move {
                let patch = json!({"metadata": {"annotations": {"resync": "1"}}});
                things
                    .patch(
                        &format!("p-{i}"),
                        &Default::default(),
                        &kube::api::Patch::Merge(&patch),
                    )
                    .await?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(CONCURRENCY)
        .try_collect::<Vec<_>>()
        .await?;
    eventually(
        "a resync of every parent",
        Duration::from_secs(600),
        || async { Ok((env.syncs("bench-cc") >= before + parents as u64).then_some(())) },
    )
    .await?;
    let resync = start.elapsed();
    if let (Some(s), Some(before)) = (env.server(), server) {
        let d = s.counters().since(&before);
        println!(
            "  kmeta: no-op resync of {parents} parents: {:.2} s; writes to children: {}, to parent status: {}",
            resync.as_secs_f64(),
            d.writes_to("configmaps"),
            d.writes_to("things/status"),
        );
    }
    Ok(())
}

#[tokio::main(flavor = "multi_thread")]
async fn main() -> anyhow::Result<()> {
    let parents = env_usize("KMETA_BENCH_PARENTS", 1000);
    let children = env_usize("KMETA_BENCH_CHILDREN", 10);
    let workers = env_usize("KMETA_BENCH_WORKERS", 5);
    println!("converge: {parents} parents × {children} ConfigMap children, {workers} workers");

    let floor = floor(parents * children).await?;

    let env = Scenario::new("converge")
        .crd("Thing", "things")
        .hook(hook(children))
        .controller(Cc::new("bench-cc"))
        .config(ManagerConfig::default().workers(workers))
        .start()
        .await?;
    // keep no request bodies: over thousands of syncs they, not kmeta, fill the memory
    env.hooks().set_recording(false);
    let (av, ns) = (env.av.clone(), env.ns.clone());
    let objects: Vec<Value> = (0..parents)
        .map(|i| {
            json!({"apiVersion": av, "kind": "Thing",
                   "metadata": {"name": format!("p-{i}"), "namespace": ns}, "spec": {}})
        })
        .collect();
    let start = Instant::now();
    create_all(&env, "things", objects).await?;
    let things = env.parents();
    let want = json!(children);
    eventually(
        "every parent reports all its children",
        Duration::from_secs(600),
        || async {
            let list = things.list(&Default::default()).await?;
            let done = list
                .items
                .iter()
                .filter(|p| p.data.pointer("/status/children") == Some(&want))
                .count();
            Ok((done == parents).then_some(()))
        },
    )
    .await?;
    let converge = start.elapsed();
    let syncs = env.syncs("bench-cc");
    println!(
        "  kmeta: converge {} parents / {} children: {:.2} s ({:.0} children/s) — {:.2}× the floor; {} syncs, {} hook calls",
        parents,
        parents * children,
        converge.as_secs_f64(),
        (parents * children) as f64 / converge.as_secs_f64(),
        converge.as_secs_f64() / floor.as_secs_f64(),
        syncs,
        env.hooks().count("sync"),
    );

    resync(&env, parents).await?;
    if let Some(rss) = peak_rss_mib() {
        println!(
            "  peak RSS of the whole process (server with every object and its watch window, controller, hook not recording): {rss:.0} MiB"
        );
    }
    env.finish().await
}
