//! `kmeta plan` against a fleet, beside `kmeta run`'s converge of the same fleet, in one run:
//! N parents (`Thing`s) × M ConfigMap children spread over namespaces, a Jsonnet sync hook kept
//! in a ConfigMap. The `kmeta-apiserver`, `kmeta run` and `kmeta plan` binaries run as separate
//! processes (`KMETA_BIN_DIR`, else the release binaries beside this bench).
//!
//! ```sh
//! cargo build --release -p kmeta -p kmeta-apiserver     # the binaries it runs
//! cargo bench -p kmeta-tests --bench plan                 # 1000 × 10 by default
//! ```
//!
//! Measures: the converge (first parent created → every parent's status counting its M
//! children), then with the controller stopped, `kmeta plan` of the fleet under the same hook
//! (exit 0 expected: nothing to write) and under an edited program given with `--hook-objects`
//! (exit 1, every parent changing): wall time, CPU seconds and peak RSS of the plan process
//! (`VmHWM`, sampled every 20 ms). Env: `KMETA_PLAN_PARENTS` (1000), `KMETA_PLAN_CHILDREN` (10),
//! `KMETA_PLAN_NAMESPACES` (10), `KMETA_PLAN_CONCURRENCY` (8); `KMETA_PLAN_PERF=1` runs each plan
//! under `perf record` (its data in the logs' directory). Prints figures; asserts nothing about
//! time.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use futures::{StreamExt, TryStreamExt};
use kmeta_tests::procs::{Proc, Usage, bin, free_port, http_get};
use kmeta_tests::{ar, crd, obj};
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use serde_json::{Value, json};

const AV: &str = "bench.kmeta.dev/v1";
const CC: &str = "plan-bench-cc";
const HOOKS_NS: &str = "default";
const WRITERS: usize = 32;
const DEADLINE: Duration = Duration::from_secs(3600);

fn env_num(name: &str, default: usize) -> anyhow::Result<usize> {
    match std::env::var(name) {
        Ok(v) => v.parse().with_context(|| format!("{name}={v}")),
        Err(_) => Ok(default),
    }
}

/// The sync hook: `children` ConfigMaps per parent with the parent's `spec.v`, and the status
/// counting the observed ones; `extra` adds a key to each child (the edited program).
fn program(children: usize, extra: bool) -> String {
    let data = if extra {
        "{ v: std.toString(v), i: std.toString(i), tier: 'gold' }"
    } else {
        "{ v: std.toString(v), i: std.toString(i) }"
    };
    format!(
        "function(request)\n\
         local p = request.parent;\n\
         local v = std.get(p.spec, 'v', 0);\n\
         local observed = std.get(std.get(request, 'children', {{}}), 'ConfigMap.v1', {{}});\n\
         {{ status: {{ children: std.length(std.objectFields(observed)) }},\n\
           children: [{{ apiVersion: 'v1', kind: 'ConfigMap',\n\
             metadata: {{ name: p.metadata.name + '-' + i }}, data: {data} }}\n\
             for i in std.range(0, {last})] }}\n",
        last = children - 1
    )
}

fn hooks_configmap(children: usize, extra: bool) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "plan-bench-hooks", "namespace": HOOKS_NS},
        "data": {"sync.jsonnet": program(children, extra)}})
}

/// A `kmeta-apiserver` process and a client for it.
struct Server {
    _proc: Proc,
    client: kube::Client,
    kubeconfig: PathBuf,
}

async fn start_server(dir: &Path) -> anyhow::Result<Server> {
    let kubeconfig = dir.join("server.kubeconfig");
    let mut cmd = Command::new(bin("kmeta-apiserver")?);
    cmd.args([
        "--port",
        "0",
        "--watch-window",
        "100000",
        "--kubeconfig-out",
    ])
    .arg(&kubeconfig);
    let mut proc = Proc::spawn("kmeta-apiserver", cmd, &dir.join("server.log"))?;
    let url = proc.first_line(Duration::from_secs(30)).await?;
    let uri: http::Uri = url.parse().with_context(|| format!("server url {url}"))?;
    let client = kube::Client::try_from(kube::Config::new(uri))?;
    Ok(Server {
        _proc: proc,
        client,
        kubeconfig,
    })
}

/// kmeta's CRDs, the parents' CRD, the namespaces, the hook's ConfigMap and the controller.
async fn install(server: &Server, children: usize, namespaces: usize) -> anyhow::Result<()> {
    let crds = Api::<DynamicObject>::all_with(
        server.client.clone(),
        &ar(
            "apiextensions.k8s.io/v1",
            "CustomResourceDefinition",
            "customresourcedefinitions",
        ),
    );
    let mut all: Vec<Value> = kmeta::api::crds::all()?
        .into_iter()
        .map(serde_json::to_value)
        .collect::<Result<_, _>>()?;
    all.push(crd("bench.kmeta.dev", "Thing", "things", true));
    for c in all {
        crds.create(&PostParams::default(), &obj(c)?).await?;
    }
    let nss =
        Api::<DynamicObject>::all_with(server.client.clone(), &ar("v1", "Namespace", "namespaces"));
    for i in 0..namespaces {
        let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": format!("ns-{i}")}});
        nss.create(&PostParams::default(), &obj(ns)?).await?;
    }
    let cms = Api::<DynamicObject>::namespaced_with(
        server.client.clone(),
        HOOKS_NS,
        &ar("v1", "ConfigMap", "configmaps"),
    );
    cms.create(
        &PostParams::default(),
        &obj(hooks_configmap(children, false))?,
    )
    .await?;
    let cc = json!({"apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "CompositeController",
        "metadata": {"name": CC},
        "spec": {"parentResource": {"apiVersion": AV, "resource": "things"},
            "childResources": [{"apiVersion": "v1", "resource": "configmaps",
                "updateStrategy": {"method": "InPlace"}}],
            "hooks": {"sync": {"jsonnet": {"configMapRef":
                {"namespace": HOOKS_NS, "name": "plan-bench-hooks", "key": "sync.jsonnet"}}}},
            "generateSelector": true}});
    let ccs = Api::<DynamicObject>::all_with(
        server.client.clone(),
        &ar(
            "metacontroller.k8s.io/v1alpha1",
            "CompositeController",
            "compositecontrollers",
        ),
    );
    ccs.create(&PostParams::default(), &obj(cc)?).await?;
    Ok(())
}

/// `kmeta run` against the server; returns once it is ready.
async fn start_controller(dir: &Path, server: &Server) -> anyhow::Result<Proc> {
    let health = free_port()?;
    let mut cmd = Command::new(bin("kmeta")?);
    cmd.args(["run", "--kubeconfig"])
        .arg(&server.kubeconfig)
        .arg(format!("--metrics-address=127.0.0.1:{}", free_port()?))
        .arg(format!("--health-probe-bind-address=127.0.0.1:{health}"))
        .args(["--workers=5", "--client-go-qps=0", "--log-level=warn"]);
    let proc = Proc::spawn("kmeta run", cmd, &dir.join("run.log"))?;
    let start = Instant::now();
    while http_get(health, "/readyz").await.map(|r| r.0) != Some(200) {
        if start.elapsed() > Duration::from_secs(60) {
            bail!("kmeta run not ready within 60 s (log: {})", dir.display());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(proc)
}

/// Creates the parents, round-robin over the namespaces, with [`WRITERS`] writers.
async fn create_parents(server: &Server, parents: usize, namespaces: usize) -> anyhow::Result<()> {
    futures::stream::iter(0..parents)
        .map(|i| async move {
            let ns = format!("ns-{}", i % namespaces);
            let api = Api::<DynamicObject>::namespaced_with(
                server.client.clone(),
                &ns,
                &ar(AV, "Thing", "things"),
            );
            let p = json!({"apiVersion": AV, "kind": "Thing",
                "metadata": {"name": format!("p{i}")}, "spec": {"v": 1}});
            api.create(&PostParams::default(), &obj(p)?).await?;
            anyhow::Ok(())
        })
        .buffer_unordered(WRITERS)
        .try_collect::<Vec<()>>()
        .await?;
    Ok(())
}

/// Waits until every parent's status counts its `children`.
async fn wait_converged(server: &Server, parents: usize, children: usize) -> anyhow::Result<()> {
    let api = Api::<DynamicObject>::all_with(server.client.clone(), &ar(AV, "Thing", "things"));
    let start = Instant::now();
    loop {
        let list = api.list(&ListParams::default()).await?;
        let done = list
            .items
            .iter()
            .filter(|p| {
                p.data.pointer("/status/children").and_then(Value::as_u64) == Some(children as u64)
            })
            .count();
        if done == parents {
            return Ok(());
        }
        if start.elapsed() > DEADLINE {
            bail!("{done} of {parents} parents converged after {DEADLINE:?}");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// What one `kmeta plan` run measured.
struct Planned {
    wall: Duration,
    usage: Usage,
    code: Option<i32>,
    summary: Value,
}

/// Runs `kmeta plan` with `extra` arguments; its peak RSS sampled every 20 ms.
async fn plan(
    dir: &Path,
    server: &Server,
    extra: &[&str],
    concurrency: usize,
) -> anyhow::Result<Planned> {
    let out = dir.join("plan.json");
    // `KMETA_PLAN_PERF=1`: under `perf record` (a flat profile in the logs' directory)
    let mut cmd = match std::env::var_os("KMETA_PLAN_PERF") {
        Some(_) => {
            let mut c = tokio::process::Command::new("perf");
            let data = dir.join(format!("perf-{}.data", extra.len()));
            c.args(["record", "-F", "999", "-o"])
                .arg(data)
                .arg("--")
                .arg(bin("kmeta")?);
            c
        }
        None => tokio::process::Command::new(bin("kmeta")?),
    };
    cmd.args([
        "plan",
        &format!("compositecontroller/{CC}"),
        "-o",
        "json",
        "--kubeconfig",
    ])
    .arg(&server.kubeconfig)
    .arg(format!("--concurrency={concurrency}"))
    .args(extra)
    .stdout(std::fs::File::create(&out)?)
    .stderr(std::fs::File::create(dir.join("plan.log"))?);
    let start = Instant::now();
    let mut child = cmd.spawn()?;
    let pid = child.id().context("kmeta plan has no pid")?;
    let mut usage = Usage::default();
    let status = loop {
        if let Ok(u) = Usage::of(pid) {
            usage = u;
        }
        tokio::select! {
            s = child.wait() => break s?,
            () = tokio::time::sleep(Duration::from_millis(20)) => {}
        }
    };
    let wall = start.elapsed();
    let text = std::fs::read_to_string(&out)?;
    let summary: Value =
        serde_json::from_str(&text).with_context(|| format!("plan output: {text:.200}"))?;
    Ok(Planned {
        wall,
        usage,
        code: status.code(),
        summary,
    })
}

fn report(what: &str, p: &Planned, converge: Duration) {
    println!(
        "  plan ({what}): {:.2} s ({:.2}× the converge), exit {:?}, {} parents, {} would change, \
         CPU {:.2} s, peak RSS {:.0} MiB (sampled)",
        p.wall.as_secs_f64(),
        p.wall.as_secs_f64() / converge.as_secs_f64(),
        p.code,
        p.summary["parents"],
        p.summary["changed"],
        p.usage.cpu_s,
        p.usage.hwm_mib,
    );
}

async fn bench() -> anyhow::Result<()> {
    let parents = env_num("KMETA_PLAN_PARENTS", 1000)?;
    let children = env_num("KMETA_PLAN_CHILDREN", 10)?;
    let namespaces = env_num("KMETA_PLAN_NAMESPACES", 10)?;
    let concurrency = env_num("KMETA_PLAN_CONCURRENCY", 8)?;
    let dir = std::env::temp_dir().join(format!("kmeta-plan-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    println!(
        "plan bench: {parents} parents × {children} ConfigMaps in {namespaces} namespaces, Jsonnet hook; logs in {}",
        dir.display()
    );
    let server = start_server(&dir).await?;
    install(&server, children, namespaces).await?;
    let controller = start_controller(&dir, &server).await?;
    let start = Instant::now();
    create_parents(&server, parents, namespaces).await?;
    wait_converged(&server, parents, children).await?;
    let converge = start.elapsed();
    let run_usage = controller.usage()?;
    drop(controller);
    println!(
        "  kmeta run converge: {:.2} s (CPU {:.2} s, peak RSS {:.0} MiB)",
        converge.as_secs_f64(),
        run_usage.cpu_s,
        run_usage.hwm_mib
    );
    let same = plan(&dir, &server, &[], concurrency).await?;
    report("same hook", &same, converge);
    let edited = dir.join("hooks-v2.yaml");
    std::fs::write(
        &edited,
        serde_json::to_string(&hooks_configmap(children, true))?,
    )?;
    let edited_arg = edited.to_string_lossy().into_owned();
    let changed = plan(&dir, &server, &["--hook-objects", &edited_arg], concurrency).await?;
    report("edited Jsonnet", &changed, converge);
    Ok(())
}

fn main() -> anyhow::Result<()> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(bench())
}
