//! Sizing benchmark: the `kmeta-apiserver` binary, the `kmeta run` binary and a hook run as three
//! separate processes, so the controller's CPU seconds and peak RSS are its own (read from
//! `/proc/<pid>/stat` and `VmHWM`). Each figure is printed beside its analytic bound, and every
//! ratio is measured within one run.
//!
//! ```sh
//! cargo build --release -p kmeta -p kmeta-apiserver     # the binaries it runs
//! cargo bench -p kmeta-tests --bench scale               # modest default: 1000 × 10 ConfigMaps
//! ```
//!
//! Scenarios (`KMETA_SCALE_SCENARIOS`, default `converge,steady,qps,adopt`):
//! - `converge`: N parents each wanting M children; wall time from the first parent created to
//!   every parent's status reporting its M children, API requests of the controller by verb,
//!   hook calls, p50/p99 sync time (kmeta's `kmeta_reconcile_duration_seconds`), CPU and peak
//!   RSS of each process; against the floor: a fresh server process of the same binary getting
//!   the same N × M children created directly by 32 concurrent writers — the objects kmeta
//!   creates ([`Shape::AsWritten`], checked against what the converge stored), and the plain
//!   ones beside them ([`Shape::Plain`]) — measured just before and just after the converge
//!   (docs/design/sizing-bench.md).
//! - `steady` (after each converge, same controller): `resyncPeriodSeconds` set, then two full
//!   resyncs of every parent measured: writes (0 expected), controller CPU per parent per resync;
//!   then with drift: the children under drift policy `Report`, child 0 of every parent edited by
//!   another writer, and two more resyncs measured (writes: 0 expected, since the drift is no news).
//! - `qps`: converge with `--client-go-qps` (every request waits for the client-side bucket):
//!   wall time against requests / QPS and writes / QPS.
//! - `adopt`: N × M orphans (matching labels, no owner) and their N parents created before the
//!   controller starts; wall time from its start to every parent reporting M children, writes,
//!   against the floor.
//!
//! - `coldstart` (not in the default list): the parents converged by one controller, which is
//!   then stopped; then fresh controllers one after the other, alternating `--watch-list=off`
//!   (list then watch) and `--watch-list=auto` (watch-list), `KMETA_SCALE_COLDSTART_ROUNDS` (2)
//!   rounds: the time from the process's spawn to `/readyz` and to its first hook call, its
//!   peak RSS at both, the load average, and the watch-list's ratios to list-then-watch.
//! - `storm` (not in the default list; issue 54 part 4): N parents converged, then a fresh
//!   `kmeta run` over them (every parent queued by its start) and one whose cache flush
//!   (`--cache-flush-interval`) queues every parent again, each while 100 edits by "a person" are spread over the storm:
//!   each edit's time from its write to the first hook call carrying it (p50/p99/max), the
//!   storm's drain time and the distinct parents it synced. `KMETA_SCALE_STORM_BINS`
//!   (`label=path,…`) runs each binary in turn over the same fleet, side by side (see
//!   `storm.rs`); `KMETA_SCALE_CHILDREN=0` is allowed (the edit's wait is the queue's).
//!
//! - `failover` (not in the default list): after the converge of each case with more than one
//!   replica (run for it when `converge` is not asked for), the replica holding the most shard
//!   buckets is killed with SIGKILL and every parent edited (`spec.v`, which the hook copies into
//!   its children): the time until the others hold its buckets (their `/readyz?verbose`) and
//!   until every parent has converged again, its parents and the others' apart.
//!   `KMETA_SCALE_SHARD_LEASE_S` (6) is the replicas' shard Lease in seconds (`15`: kmeta's
//!   defaults, which a loaded machine keeps renewing).
//!
//! Replicas: `KMETA_SCALE_REPLICAS` (comma list, `1`) runs `converge` once per count, with that
//! many `kmeta run` processes, `--sharding` when more than one (the bench waits until they hold
//! every bucket between them before creating parents); the counts of one case are printed side
//! by side, as ratios to the 1-replica run. An entry `NxT` runs N replicas with
//! `TOKIO_WORKER_THREADS=T` each (as a pod limited to T CPUs would; e.g. `1,3x1`). `KMETA_SCALE_NAMESPACES` (1: everything in `default`)
//! spreads the parents, and so their children, round-robin over `0-ns`…`<n-1>-ns`: sharding splits
//! parents by namespace, so one namespace is one replica's work. `KMETA_SCALE_SHARD_WATCH`
//! (`client`) is the replicas' `--shard-watch`; `server` has kmeta-apiserver shard their
//! watches (KEP-5866), so each caches only its own namespaces. `KMETA_SCALE_SHARD_BUCKETS` (32)
//! is their `--shard-buckets` (an entry's `bB` suffix sets it for that entry, e.g. `1x1,3x1b8`):
//! with server-sharded watches, a replica runs one watch per held bucket and sharded resource.
//!
//! Matrix (comma lists): `KMETA_SCALE_PARENTS` (1000), `KMETA_SCALE_KINDS` (`configmap`;
//! `deployment` = a 2-container Deployment, ~2.7 KB as stored), `KMETA_SCALE_LATENCY_MS` (hook
//! latency, 0), `KMETA_SCALE_WORKERS` (5). Single values: `KMETA_SCALE_CHILDREN` (10),
//! `KMETA_SCALE_QPS` (50), `KMETA_SCALE_QPS_PARENTS` (100), `KMETA_SCALE_ADOPT_PARENTS` (1000),
//! `KMETA_SCALE_RESYNC_S` (5), `KMETA_SCALE_REPEAT` (1). How children are written
//! (`KMETA_SCALE_APPLY`, comma list, default `dynamic-apply`): `dynamic-apply`,
//! `server-side-apply` (the CompositeController's `kmeta.dev/apply-strategy`) or
//! `server-side-apply-omit` (and `kmeta.dev/last-applied: omit`: no last-applied annotation,
//! docs/design/ssa-without-last-applied.md). The full matrix (docs/design/sizing-bench.md):
//! `KMETA_SCALE_PARENTS=1000,10000 KMETA_SCALE_KINDS=configmap,deployment
//! KMETA_SCALE_LATENCY_MS=0,5 KMETA_SCALE_WORKERS=5,50`. Prints figures; asserts nothing
//! about time.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use futures::{StreamExt, TryStreamExt};
use kmeta_apiserver::{COUNTERS_PATH, CounterRow, Counters};
use kmeta_tests::procs::{Proc, Usage, bin};
use kmeta_tests::{ar, crd, obj};
use kube::api::{Api, DynamicObject, PostParams};
use serde_json::{Value, json};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const WRITERS: usize = 32;
const GROUP: &str = "bench.kmeta.dev";
const AV: &str = "bench.kmeta.dev/v1";
/// The namespace of every parent and child unless `KMETA_SCALE_NAMESPACES` spreads them.
const NS: &str = "default";
const CC: &str = "bench-cc";
const DEADLINE: Duration = Duration::from_secs(3600);
const POLL: Duration = Duration::from_millis(500);

mod coldstart;
mod hook;
mod run;
mod shard;
mod storm;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    ConfigMap,
    Deployment,
}

impl Kind {
    fn parse(s: &str) -> anyhow::Result<Kind> {
        match s {
            "configmap" => Ok(Kind::ConfigMap),
            "deployment" => Ok(Kind::Deployment),
            _ => bail!("KMETA_SCALE_KINDS: unknown kind {s:?} (configmap, deployment)"),
        }
    }
    fn plural(self) -> &'static str {
        match self {
            Kind::ConfigMap => "configmaps",
            Kind::Deployment => "deployments",
        }
    }
    fn api_version(self) -> &'static str {
        match self {
            Kind::ConfigMap => "v1",
            Kind::Deployment => "apps/v1",
        }
    }
    fn kind(self) -> &'static str {
        match self {
            Kind::ConfigMap => "ConfigMap",
            Kind::Deployment => "Deployment",
        }
    }
}

/// How the controller writes children (`KMETA_SCALE_APPLY`).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Apply {
    Dynamic,
    ServerSide,
    /// Server-side apply without the last-applied annotation.
    ServerSideOmit,
}

impl Apply {
    fn parse(s: &str) -> anyhow::Result<Apply> {
        match s {
            "dynamic-apply" => Ok(Apply::Dynamic),
            "server-side-apply" => Ok(Apply::ServerSide),
            "server-side-apply-omit" => Ok(Apply::ServerSideOmit),
            _ => bail!(
                "KMETA_SCALE_APPLY: unknown {s:?} (dynamic-apply, server-side-apply, server-side-apply-omit)"
            ),
        }
    }
    /// The CompositeController's annotations.
    fn annotations(self) -> Value {
        match self {
            Apply::Dynamic => json!({}),
            Apply::ServerSide => json!({"kmeta.dev/apply-strategy": "server-side-apply"}),
            Apply::ServerSideOmit => json!({"kmeta.dev/apply-strategy": "server-side-apply",
                "kmeta.dev/last-applied": "omit"}),
        }
    }
    fn label(self) -> &'static str {
        match self {
            Apply::Dynamic => "dynamic apply",
            Apply::ServerSide => "server-side apply",
            Apply::ServerSideOmit => "server-side apply without last-applied",
        }
    }
}

/// One cell of the matrix.
#[derive(Clone, Copy, Debug)]
struct Case {
    parents: usize,
    children: usize,
    kind: Kind,
    latency_ms: u64,
    workers: usize,
    qps: f64,
    apply: Apply,
    /// `kmeta run` processes; `--sharding` when more than one.
    replicas: usize,
    /// `TOKIO_WORKER_THREADS` of each `kmeta run` process (`None`: tokio's default, the cores
    /// the process may use).
    threads: Option<usize>,
    /// `--shard-buckets` of the replicas when sharded.
    buckets: u32,
    /// Namespaces the parents are spread over (1: [`NS`]).
    namespaces: usize,
}

impl Case {
    /// The namespace of parent `i` (and of its children).
    fn ns_of(&self, i: usize) -> String {
        match self.namespaces {
            0 | 1 => NS.to_owned(),
            // named so that plain FNV-1a spreads them too (`--shard-watch=server`: `ns-0` …
            // `ns-99` would crowd into 2 of 32 buckets)
            n => format!("{}-ns", i % n),
        }
    }
    /// Every namespace the case uses.
    fn all_ns(&self) -> Vec<String> {
        (0..self.namespaces.max(1)).map(|i| self.ns_of(i)).collect()
    }
    fn objects(&self) -> usize {
        self.parents * self.children
    }
    fn label(&self) -> String {
        let qps = if self.qps > 0.0 {
            format!(", --client-go-qps {}", self.qps)
        } else {
            String::new()
        };
        let spread = match self.namespaces {
            0 | 1 => String::new(),
            n => format!(" in {n} namespaces"),
        };
        let mut replicas = match self.replicas {
            1 => String::new(),
            n => format!(
                ", {n} replicas (--sharding --shard-watch={})",
                shard::watch_mode()
            ),
        };
        if self.replicas > 1 {
            replicas.push_str(&format!(", {} buckets", self.buckets));
        }
        if let Some(t) = self.threads {
            replicas.push_str(&format!(", TOKIO_WORKER_THREADS={t}"));
        }
        format!(
            "{} parents × {} {}s{spread}, hook latency {} ms, {} workers{qps}{replicas}, {}",
            self.parents,
            self.children,
            self.kind.kind(),
            self.latency_ms,
            self.workers,
            self.apply.label()
        )
    }
}

fn env_list(name: &str, default: &str) -> Vec<String> {
    std::env::var(name)
        .unwrap_or_else(|_| default.to_owned())
        .split(',')
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .collect()
}

fn env_num<T: std::str::FromStr>(name: &str, default: T) -> anyhow::Result<T> {
    match std::env::var(name) {
        Ok(v) => v
            .parse()
            .ok()
            .with_context(|| format!("{name}: not a number: {v:?}")),
        Err(_) => Ok(default),
    }
}

/// One entry of `KMETA_SCALE_REPLICAS`.
#[derive(Clone, Copy)]
struct Replicas {
    count: usize,
    /// `TOKIO_WORKER_THREADS` of each.
    threads: Option<usize>,
    /// `--shard-buckets`.
    buckets: u32,
}

/// `KMETA_SCALE_REPLICAS`: each entry `N` (replicas, tokio's default worker threads), `NxT`
/// (N replicas of T worker threads each, `TOKIO_WORKER_THREADS`), either with a `bB` suffix for
/// B shard buckets (`3x1b8`; default `KMETA_SCALE_SHARD_BUCKETS`, 32).
fn replica_counts() -> anyhow::Result<Vec<Replicas>> {
    let default_buckets: u32 = env_num("KMETA_SCALE_SHARD_BUCKETS", 32)?;
    env_list("KMETA_SCALE_REPLICAS", "1")
        .iter()
        .map(|v| {
            let parse = |s: &str| {
                s.parse::<usize>().ok().filter(|n| *n > 0).with_context(|| {
                    format!("KMETA_SCALE_REPLICAS: {v:?}: want N, NxT, NbB or NxTbB (≥ 1)")
                })
            };
            let (rest, buckets) = match v.split_once('b') {
                Some((r, b)) => (r, u32::try_from(parse(b)?)?),
                None => (v.as_str(), default_buckets),
            };
            let (count, threads) = match rest.split_once('x') {
                Some((n, t)) => (parse(n)?, Some(parse(t)?)),
                None => (parse(rest)?, None),
            };
            Ok(Replicas {
                count,
                threads,
                buckets,
            })
        })
        .collect()
}

fn env_nums<T: std::str::FromStr>(name: &str, default: &str) -> anyhow::Result<Vec<T>> {
    env_list(name, default)
        .iter()
        .map(|v| {
            v.parse()
                .ok()
                .with_context(|| format!("{name}: not a number: {v:?}"))
        })
        .collect()
}

/// A `kmeta-apiserver` process and a client for it.
struct Server {
    proc: Proc,
    client: kube::Client,
    kubeconfig: PathBuf,
}

impl Server {
    async fn start(dir: &Path, tag: &str) -> anyhow::Result<Server> {
        let kubeconfig = dir.join(format!("{tag}.kubeconfig"));
        let mut cmd = Command::new(bin("kmeta-apiserver")?);
        cmd.args([
            "--port",
            "0",
            "--watch-window",
            "100000",
            "--kubeconfig-out",
        ])
        .arg(&kubeconfig);
        let mut proc = Proc::spawn("kmeta-apiserver", cmd, &dir.join(format!("{tag}.log")))?;
        let url = proc.first_line(Duration::from_secs(30)).await?;
        let uri: http::Uri = url.parse().with_context(|| format!("server url {url}"))?;
        let client = kube::Client::try_from(kube::Config::new(uri))?;
        Ok(Server {
            proc,
            client,
            kubeconfig,
        })
    }

    /// The server's request counters, read over HTTP from its process.
    async fn counters(&self) -> anyhow::Result<Counters> {
        let req = http::Request::get(COUNTERS_PATH).body(Vec::new())?;
        let rows: Vec<CounterRow> = serde_json::from_str(&self.client.request_text(req).await?)?;
        Ok(Counters::from_rows(rows))
    }

    /// The resource in namespace `ns`.
    fn api_in(&self, ns: &str, av: &str, kind: &str, plural: &str) -> Api<DynamicObject> {
        Api::namespaced_with(self.client.clone(), ns, &ar(av, kind, plural))
    }

    /// The CompositeControllers (cluster-scoped).
    fn composite_controllers(&self) -> Api<DynamicObject> {
        self.api_all(
            "metacontroller.k8s.io/v1alpha1",
            "CompositeController",
            "compositecontrollers",
        )
    }

    /// The resource in every namespace (lists and watches).
    fn api_all(&self, av: &str, kind: &str, plural: &str) -> Api<DynamicObject> {
        Api::all_with(self.client.clone(), &ar(av, kind, plural))
    }

    /// Creates the case's namespaces other than [`NS`].
    async fn create_namespaces(&self, case: &Case) -> anyhow::Result<()> {
        let api = self.api_all("v1", "Namespace", "namespaces");
        for ns in case.all_ns().into_iter().filter(|n| n != NS) {
            let o = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
            api.create(&PostParams::default(), &obj(o)?).await?;
        }
        Ok(())
    }

    /// Creates `objects` of `(av, kind, plural)`, each in its own `metadata.namespace`, with
    /// [`WRITERS`] concurrent writers; the created objects, in order.
    async fn create_all(
        &self,
        (av, kind, plural): (&str, &str, &str),
        objects: Vec<Value>,
    ) -> anyhow::Result<Vec<Value>> {
        futures::stream::iter(objects)
            .map(|o| async move {
                let ns = o
                    .pointer("/metadata/namespace")
                    .and_then(Value::as_str)
                    .unwrap_or(NS);
                let api = self.api_in(ns, av, kind, plural);
                let created = api.create(&PostParams::default(), &obj(o)?).await?;
                anyhow::Ok(serde_json::to_value(created)?)
            })
            .buffered(WRITERS)
            .try_collect()
            .await
    }

    /// Creates these objects, given as JSON text (a million `Value`s would not fit beside two
    /// servers), keeping nothing of the answers.
    async fn create_texts(
        &self,
        (av, kind, plural): (&str, &str, &str),
        objects: Vec<Box<[u8]>>,
    ) -> anyhow::Result<()> {
        futures::stream::iter(objects)
            .map(|text| async move {
                let o: DynamicObject = serde_json::from_slice(&text)?;
                let ns = o.metadata.namespace.as_deref().unwrap_or(NS);
                let api = self.api_in(ns, av, kind, plural);
                api.create(&PostParams::default(), &o).await?;
                anyhow::Ok(())
            })
            .buffered(WRITERS)
            .try_collect()
            .await
    }
}

/// The parents' resource, for [`Server::create_all`].
const THINGS: (&str, &str, &str) = (AV, "Thing", "things");

impl Kind {
    /// The children's resource, for [`Server::create_all`].
    fn resource(self) -> (&'static str, &'static str, &'static str) {
        (self.api_version(), self.kind(), self.plural())
    }
}

/// A Deployment with 2 containers of 6 env vars each.
fn deployment(name: &str, labels: &Value) -> Value {
    let cs: Vec<Value> = (0..2)
        .map(|c| {
            json!({"name": format!("c{c}"), "image": format!("registry.example/app-{c}:1.2.3"),
                "ports": [{"containerPort": 8080 + c, "protocol": "TCP"}],
                "env": (0..6).map(|e| json!({"name": format!("VAR_{e}"), "value": format!("value-{e}")}))
                    .collect::<Vec<_>>(),
                "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}})
        })
        .collect();
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "labels": labels},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": cs}}}})
}

/// Child `i` of parent `parent`, as the hook desires it (plus `labels`).
fn child(kind: Kind, parent: &str, i: usize, labels: Value) -> Value {
    let name = format!("{parent}-{i}");
    match kind {
        Kind::ConfigMap => json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "labels": labels}, "data": {"i": i.to_string()}}),
        Kind::Deployment => deployment(&name, &labels),
    }
}

fn in_ns(mut o: Value, ns: &str) -> Value {
    o["metadata"]["namespace"] = json!(ns);
    o
}

/// What a floor creates.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Shape {
    /// The objects kmeta creates: the hook's children with the namespace and `controller-uid`
    /// label kmeta adds (generateSelector), its last-applied annotation (none under
    /// `server-side-apply-omit`) and a controller
    /// reference to their parent (the N parents are created first, untimed). The converge is
    /// checked to have written exactly these ([`check_as_written`]).
    AsWritten,
    /// The hook's children as it answers them (no annotation, no owner), in one namespace:
    /// smaller objects, what rounds before the floors were compared with.
    Plain,
}

/// The floor: a fresh server process gets the case's N × M children created directly by
/// [`WRITERS`] concurrent writers; the time and the server's usage after.
async fn floor(dir: &Path, case: &Case, shape: Shape) -> anyhow::Result<(Duration, Usage)> {
    let server = Server::start(dir, "floor").await?;
    let kind = case.kind;
    let text = |v: &Value| anyhow::Ok(serde_json::to_vec(v)?.into_boxed_slice());
    let objects: Vec<Box<[u8]>> = match shape {
        Shape::Plain => (0..case.objects())
            .map(|i| text(&in_ns(child(kind, "floor", i, json!({})), NS)))
            .collect::<Result<_, _>>()?,
        Shape::AsWritten => {
            create_crds(&server, vec![parent_crd()]).await?;
            server.create_namespaces(case).await?;
            let parents = server.create_all(THINGS, run::parents(case)).await?;
            let mut out = Vec::with_capacity(case.objects());
            for p in &parents {
                for i in 0..case.children {
                    out.push(text(&as_written(case, p, i)?)?);
                }
            }
            out
        }
    };
    let before = server.proc.usage()?;
    let start = Instant::now();
    server.create_texts(kind.resource(), objects).await?;
    let took = start.elapsed();
    let after = server.proc.usage()?;
    println!(
        "  floor ({}): {} {}s created directly ({WRITERS} writers, fresh server): {:.2} s ({:.0}/s), server CPU {:.1} s",
        match shape {
            Shape::AsWritten => "as kmeta writes them",
            Shape::Plain => "plain",
        },
        case.objects(),
        kind.kind(),
        took.as_secs_f64(),
        case.objects() as f64 / took.as_secs_f64(),
        after.cpu_s - before.cpu_s
    );
    Ok((took, after))
}

/// Child `i` of `parent` as kmeta creates it (see [`Shape::AsWritten`]).
fn as_written(case: &Case, parent: &Value, i: usize) -> anyhow::Result<Value> {
    let kind = case.kind;
    let meta = |f: &str| {
        parent
            .pointer(&format!("/metadata/{f}"))
            .and_then(Value::as_str)
            .with_context(|| format!("parent without metadata.{f}: {parent}"))
    };
    let (name, uid, ns) = (meta("name")?, meta("uid")?, meta("namespace")?);
    let desired = in_ns(child(kind, name, i, json!({"controller-uid": uid})), ns);
    let opts = dynapply::Options {
        record: case.apply != Apply::ServerSideOmit,
        ..dynapply::Options::default()
    };
    let mut out = dynapply::prepare_create(&desired, &opts)?;
    out["metadata"]["ownerReferences"] = json!([{"apiVersion": AV, "kind": "Thing", "name": name,
        "uid": uid, "controller": true, "blockOwnerDeletion": true}]);
    Ok(out)
}

/// Fails unless the first parent's first child, as the converge stored it, is what
/// [`as_written`] builds (apart from the fields the server sets): the floor of
/// [`Shape::AsWritten`] creates the same objects as kmeta.
async fn check_as_written(server: &Server, case: &Case) -> anyhow::Result<()> {
    let kind = case.kind;
    let ns = case.ns_of(0);
    let parent = server.api_in(&ns, AV, "Thing", "things").get("p-0").await?;
    let parent = serde_json::to_value(parent)?;
    let stored = server
        .api_in(&ns, kind.api_version(), kind.kind(), kind.plural())
        .get("p-0-0")
        .await?;
    let strip = |mut v: Value| {
        if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
            for f in [
                "uid",
                "resourceVersion",
                "creationTimestamp",
                "managedFields",
                "generation",
            ] {
                m.remove(f);
            }
        }
        if let Some(o) = v.as_object_mut() {
            o.remove("status");
        }
        v
    };
    let stored = strip(serde_json::to_value(stored)?);
    let built = strip(as_written(case, &parent, 0)?);
    if stored != built {
        bail!("the floor's objects are not what kmeta wrote:\n  kmeta: {stored}\n  floor: {built}");
    }
    Ok(())
}

/// Creates these CRDs on `server` (the in-memory server serves a CRD as soon as it is created).
async fn create_crds(server: &Server, all: Vec<Value>) -> anyhow::Result<()> {
    let crds = Api::<DynamicObject>::all_with(
        server.client.clone(),
        &ar(
            "apiextensions.k8s.io/v1",
            "CustomResourceDefinition",
            "customresourcedefinitions",
        ),
    );
    for c in all {
        crds.create(&PostParams::default(), &obj(c)?).await?;
    }
    Ok(())
}

/// The parents' CRD (`Thing`).
fn parent_crd() -> Value {
    crd(GROUP, "Thing", "things", true)
}

/// Installs kmeta's CRDs, the parent CRD and the CompositeController.
async fn install(server: &Server, case: &Case, hook_url: &str) -> anyhow::Result<()> {
    let mut all: Vec<Value> = kmeta::api::crds::all()?
        .into_iter()
        .map(serde_json::to_value)
        .collect::<Result<_, _>>()?;
    all.push(parent_crd());
    create_crds(server, all).await?;
    // the in-memory server serves a CRD as soon as it is created
    let ccs = server.composite_controllers();
    let cc = json!({"apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "CompositeController",
        "metadata": {"name": CC, "annotations": case.apply.annotations()},
        "spec": {"parentResource": {"apiVersion": AV, "resource": "things"},
            "childResources": [{"apiVersion": case.kind.api_version(),
                "resource": case.kind.plural(), "updateStrategy": {"method": "InPlace"}}],
            "hooks": {"sync": {"webhook": {"url": hook_url}}},
            "generateSelector": true}});
    ccs.create(&PostParams::default(), &obj(cc)?).await?;
    Ok(())
}

fn main() -> anyhow::Result<()> {
    if hook::is_hook() {
        return hook::main();
    }
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(bench())
}

/// The matrix's cells for one scenario, `parents` overriding the parent counts when given.
fn cases(parents: Option<usize>, qps: f64) -> anyhow::Result<Vec<Case>> {
    let children = env_num("KMETA_SCALE_CHILDREN", 10)?;
    let counts = match parents {
        Some(p) => vec![p],
        None => env_nums("KMETA_SCALE_PARENTS", "1000")?,
    };
    let (latencies, workers) = match parents {
        Some(_) => (vec![0], vec![5]),
        None => (
            env_nums("KMETA_SCALE_LATENCY_MS", "0")?,
            env_nums("KMETA_SCALE_WORKERS", "5")?,
        ),
    };
    let applies = env_list("KMETA_SCALE_APPLY", "dynamic-apply")
        .iter()
        .map(|a| Apply::parse(a))
        .collect::<anyhow::Result<Vec<Apply>>>()?;
    let namespaces = env_num("KMETA_SCALE_NAMESPACES", 1)?;
    let mut out = Vec::new();
    for kind in env_list("KMETA_SCALE_KINDS", "configmap") {
        let kind = Kind::parse(&kind)?;
        for &parents in &counts {
            for &latency_ms in &latencies {
                for &workers in &workers {
                    for &apply in &applies {
                        out.push(Case {
                            parents,
                            children,
                            kind,
                            latency_ms,
                            workers,
                            qps,
                            apply,
                            replicas: 1,
                            threads: None,
                            buckets: 32,
                            namespaces,
                        });
                    }
                }
            }
        }
    }
    Ok(out)
}

async fn bench() -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!("kmeta-scale-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let scenarios = env_list("KMETA_SCALE_SCENARIOS", "converge,steady,qps,adopt");
    let has = |s: &str| scenarios.iter().any(|x| x == s);
    let resync = match has("steady") {
        true => Some(env_num("KMETA_SCALE_RESYNC_S", 5)?),
        false => None,
    };
    let replicas = replica_counts()?;
    let failover = has("failover");
    println!("scale: processes' logs in {}", dir.display());
    for round in 1..=env_num("KMETA_SCALE_REPEAT", 1)? {
        println!("round {round}");
        if has("converge") || failover {
            for case in cases(None, 0.0)? {
                let mut runs = Vec::new();
                for r in &replicas {
                    if !has("converge") && r.count < 2 {
                        continue;
                    }
                    let case = Case {
                        replicas: r.count,
                        threads: r.threads,
                        buckets: r.buckets,
                        ..case
                    };
                    println!("{}", case.label());
                    runs.push(run::converge(&dir, &case, resync, failover).await?);
                }
                shard::side_by_side(&runs);
            }
        }
        if has("qps") {
            let parents = env_num("KMETA_SCALE_QPS_PARENTS", 100)?;
            for case in cases(Some(parents), env_num("KMETA_SCALE_QPS", 50.0)?)? {
                println!("{}", case.label());
                run::converge(&dir, &case, None, false).await?;
            }
        }
        if has("coldstart") {
            for case in cases(None, 0.0)? {
                println!("cold start: {}", case.label());
                coldstart::coldstart(&dir, &case).await?;
            }
        }
        if has("storm") {
            for case in cases(None, 0.0)? {
                println!("storm: {}", case.label());
                storm::storm(&dir, &case).await?;
            }
        }
        if has("adopt") {
            for case in cases(Some(env_num("KMETA_SCALE_ADOPT_PARENTS", 1000)?), 0.0)? {
                println!("adoption: {}", case.label());
                run::adopt(&dir, &case).await?;
            }
        }
    }
    Ok(())
}
