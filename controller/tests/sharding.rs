//! `kmeta run --sharding`: three replicas split the parents of a CompositeController between
//! them, against kmeta-apiserver over real HTTP, through scale-up, kill -9, SIGSTOP longer than
//! the Lease, a graceful scale-down and a rolling restart. Every write the API server answered
//! is checked against the bucket Leases' timeline from its write log: a replica writes for a
//! parent only while it is the last to have written the Lease of the parent's bucket.

use std::collections::{BTreeMap, BTreeSet};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::bail;
use kmeta::coord::shard::{ShardHash, bucket_by, bucket_of};
use kmeta_apiserver::{TestServer, WriteRecord};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::discovery::ApiResource;
use serde_json::{Value, json};

const KMETA: &str = env!("CARGO_BIN_EXE_kmeta");

/// At most [`SIDE_BY_SIDE`] scenarios run at once: each runs up to three kmeta processes on
/// short Lease timings. A replica idles at a few percent of a core (a Lease round every 300 ms):
/// all eight side by side took 43 s of CPU in 64 s of wall clock on the 2-core machine, and a
/// scenario waiting for a turn holds one of libtest's threads.
static TURNS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(SIDE_BY_SIDE);
/// How many scenarios of this file run side by side.
const SIDE_BY_SIDE: usize = 8;
use crate::run::identity_of;
use crate::support;
use support::wait_for;

/// Waits for a turn among the [`SIDE_BY_SIDE`] scenarios (the semaphore is never closed).
async fn turn() -> anyhow::Result<tokio::sync::SemaphorePermit<'static>> {
    Ok(TURNS.acquire().await?)
}

const BUCKETS: u32 = 8;
const NAMESPACES: usize = 24;
const PER_NAMESPACE: usize = 3;
/// Short timings: a Lease of 3 s, renewed every 0.3 s, written off after 2 s without renewal.
const TIMINGS: [&str; 3] = [
    "--shard-lease-duration=3s",
    "--shard-renew-deadline=2s",
    "--shard-retry-period=300ms",
];
/// The API rate of every process: ten times `kmeta run`'s default (5 per second, burst 10, as
/// Metacontroller's), which held a step's 72 parents (a child and a status write each) to about
/// 30 s of syncs. The rate limiter is still in the path; the Lease timings, not the rate, are
/// what these scenarios are about.
const RATE: [&str; 2] = ["--client-go-qps=50", "--client-go-burst=100"];
/// How long convergence may take after a step: a Lease duration, a list, the syncs.
/// `--shard-lease-duration` of [`TIMINGS`], seconds.
const LEASE_DURATION_S: f64 = 3.0;
const CONVERGE: Duration = Duration::from_secs(60);

/// A `kmeta run --sharding` process; killed if the test ends first.
struct Replica {
    name: String,
    child: Child,
    health: u16,
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

fn start(
    kubeconfig: &std::path::Path,
    dir: &std::path::Path,
    name: &str,
) -> anyhow::Result<Replica> {
    start_with(kubeconfig, dir, name, &["--metrics-address=0".into()])
}

fn start_with(
    kubeconfig: &std::path::Path,
    dir: &std::path::Path,
    name: &str,
    extra: &[String],
) -> anyhow::Result<Replica> {
    let health = free_port()?;
    let child = Command::new(KMETA)
        .args(["run", "--kubeconfig"])
        .arg(kubeconfig)
        .args(["--sharding", "--leader-election-namespace=default"])
        .arg(format!("--shard-buckets={BUCKETS}"))
        .args(TIMINGS)
        .args(RATE)
        .arg(format!("--health-probe-bind-address=127.0.0.1:{health}"))
        .args(extra)
        .env("POD_NAME", name)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join(format!("{name}.log")))?)
        .spawn()?;
    Ok(Replica {
        name: name.to_owned(),
        child,
        health,
    })
}

/// The buckets a replica says it holds on `/readyz?verbose`.
async fn held(r: &Replica) -> Option<BTreeSet<String>> {
    let url = format!("http://127.0.0.1:{}/readyz?verbose", r.health);
    let text = reqwest::get(&url).await.ok()?.text().await.ok()?;
    let line = text.lines().find(|l| l.contains("sharding buckets"))?;
    let list = line.split("buckets ").nth(1)?.split(' ').next()?;
    Some(match list {
        "none" => BTreeSet::new(),
        l => l.split(',').map(str::to_owned).collect(),
    })
}

/// Waits until the live replicas between them hold every bucket exactly once, each at least
/// one.
async fn wait_balanced(replicas: &[&Replica]) -> anyhow::Result<()> {
    let deadline = Instant::now() + CONVERGE;
    loop {
        let mut all = Vec::new();
        let mut each = true;
        for r in replicas {
            let h = held(r).await.unwrap_or_default();
            each &= !h.is_empty();
            all.extend(h);
        }
        let distinct: BTreeSet<&String> = all.iter().collect();
        if each && all.len() == BUCKETS as usize + 1 && distinct.len() == all.len() {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!(
                "buckets not split between {} replicas: {all:?}",
                replicas.len()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A kmeta controller resource (`compositecontrollers` or `decoratorcontrollers`).
fn metacontroller_resource(plural: &str) -> ApiResource {
    let kind = match plural {
        "decoratorcontrollers" => "DecoratorController",
        _ => "CompositeController",
    };
    ApiResource {
        group: "metacontroller.k8s.io".into(),
        version: "v1alpha1".into(),
        api_version: "metacontroller.k8s.io/v1alpha1".into(),
        kind: kind.into(),
        plural: plural.into(),
    }
}

fn notes_resource() -> ApiResource {
    example_resource("Note", "notes")
}

/// A resource `kind`/`plural` of the tests' group, `shard.example.com/v1`.
fn example_resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: "shard.example.com".into(),
        version: "v1".into(),
        api_version: "shard.example.com/v1".into(),
        kind: kind.into(),
        plural: plural.into(),
    }
}

/// Installs the schemaless CRD of `resource` (of [`example_resource`]; `scope`: `Namespaced` or
/// `Cluster`) with a status subresource, waits until it is served, and returns its API over
/// every namespace.
async fn install_crd(
    client: &kube::Client,
    resource: &ApiResource,
    scope: &str,
) -> anyhow::Result<Api<DynamicObject>> {
    let (kind, plural) = (&resource.kind, &resource.plural);
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.{}", resource.group)},
        "spec": {"group": resource.group, "scope": scope,
                 "names": {"kind": kind, "plural": plural, "singular": kind.to_lowercase()},
                 "versions": [{"name": resource.version, "served": true, "storage": true,
                               "subresources": {"status": {}},
                               "schema": {"openAPIV3Schema": {"type": "object",
                                          "x-kubernetes-preserve-unknown-fields": true}}}]}
    });
    let crds = ApiResource::erase::<
        k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
    >(&());
    Api::<DynamicObject>::all_with(client.clone(), &crds)
        .create(&PostParams::default(), &serde_json::from_value(crd)?)
        .await?;
    let api: Api<DynamicObject> = Api::all_with(client.clone(), resource);
    wait_for(&format!("the {kind} resource to be served"), || async {
        api.list(&Default::default()).await.is_ok()
    })
    .await?;
    Ok(api)
}

/// The hook calls per parent (`namespace/name`).
type Calls = Arc<Mutex<BTreeMap<String, usize>>>;

/// A hook copying the parent's `spec.v` into its one ConfigMap child and its status.
async fn hook() -> anyhow::Result<String> {
    hook_counting(Calls::default()).await
}

/// [`hook`], counting its calls per parent in `calls`.
async fn hook_counting(calls: Calls) -> anyhow::Result<String> {
    use axum::Json;
    let app = axum::Router::new().route(
        "/sync",
        axum::routing::post(move |Json(req): Json<Value>| async move {
            let parent = &req["parent"];
            let name = parent["metadata"]["name"]
                .as_str()
                .unwrap_or("x")
                .to_owned();
            let ns = parent["metadata"]["namespace"].as_str().unwrap_or("");
            if let Ok(mut calls) = calls.lock() {
                *calls.entry(format!("{ns}/{name}")).or_default() += 1;
            }
            let v = parent["spec"]["v"].as_i64().unwrap_or(0).to_string();
            Json(json!({
                "status": {"v": v},
                "children": [{"apiVersion": "v1", "kind": "ConfigMap",
                              "metadata": {"name": name}, "data": {"v": v}}]
            }))
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/sync", listener.local_addr()?);
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(url)
}

/// The Note CRD, the CompositeController, the namespaces and the parents (`spec.v` = 0). Every
/// Note is namespaced; the cluster bucket is held and counted all the same.
/// A kubeconfig for `server` in a new temporary directory (kept while it lives), and kmeta's
/// CRDs installed.
async fn kubeconfig_and_crds(
    server: &TestServer,
) -> anyhow::Result<(tempfile::TempDir, std::path::PathBuf)> {
    let dir = tempfile::tempdir()?;
    let kubeconfig = dir.path().join("kubeconfig");
    server.write_kubeconfig(&kubeconfig)?;
    kmeta::manifest::install_crds(&server.client()).await?;
    Ok((dir, kubeconfig))
}

/// The CompositeController of Notes with one ConfigMap child each, synced by the hook at `url`.
fn notes_controller(url: &str) -> Value {
    json!({
        "apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "CompositeController",
        "metadata": {"name": "notes"},
        "spec": {"generateSelector": true,
                 "parentResource": {"apiVersion": "shard.example.com/v1", "resource": "notes"},
                 "childResources": [{"apiVersion": "v1", "resource": "configmaps",
                                     "updateStrategy": {"method": "InPlace"}}],
                 "hooks": {"sync": {"webhook": {"url": url}}}}
    })
}

async fn set_up(server: &TestServer, url: &str) -> anyhow::Result<Api<DynamicObject>> {
    set_up_with(server, "compositecontrollers", notes_controller(url)).await
}

/// The Note CRD, `controller` (a `kind` of metacontroller.k8s.io, by its plural), the
/// namespaces and the Notes.
async fn set_up_with(
    server: &TestServer,
    plural: &str,
    controller: Value,
) -> anyhow::Result<Api<DynamicObject>> {
    set_up_in(server, plural, controller, team).await
}

/// The namespaces of most scenarios: `team-0` … `team-23`.
fn team(n: usize) -> String {
    format!("team-{n}")
}

/// As [`set_up_with`], the namespaces named by `names`.
async fn set_up_in(
    server: &TestServer,
    plural: &str,
    controller: Value,
    names: fn(usize) -> String,
) -> anyhow::Result<Api<DynamicObject>> {
    let client = server.client();
    let pp = PostParams::default();
    let notes = install_crd(&client, &notes_resource(), "Namespaced").await?;
    Api::<DynamicObject>::all_with(client.clone(), &metacontroller_resource(plural))
        .create(&pp, &serde_json::from_value(controller)?)
        .await?;
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let mut created = BTreeSet::new();
    for n in 0..NAMESPACES {
        if created.insert(names(n)) {
            let ns =
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": names(n)}});
            namespaces.create(&pp, &serde_json::from_value(ns)?).await?;
        }
        let in_ns: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), &names(n), &notes_resource());
        for p in 0..PER_NAMESPACE {
            let note = json!({"apiVersion": "shard.example.com/v1", "kind": "Note",
                "metadata": {"name": note_name(n, p)}, "spec": {"v": 0}});
            in_ns.create(&pp, &serde_json::from_value(note)?).await?;
        }
    }
    Ok(notes)
}

/// The name of the `p`-th Note of the `n`-th group (one name per group, so groups may share a
/// namespace).
fn note_name(n: usize, p: usize) -> String {
    format!("n{n}-{p}")
}

/// Sets every parent's `spec.v` to `v`.
async fn edit_all(server: &TestServer, v: i64) -> anyhow::Result<()> {
    edit_all_in(server, v, team).await
}

/// Sets every parent's `spec.v` to `v`, in the namespaces named by `names`.
async fn edit_all_in(
    server: &TestServer,
    v: i64,
    names: fn(usize) -> String,
) -> anyhow::Result<()> {
    for n in 0..NAMESPACES {
        let api: Api<DynamicObject> =
            Api::namespaced_with(server.client(), &names(n), &notes_resource());
        for p in 0..PER_NAMESPACE {
            let patch = Patch::Merge(json!({"spec": {"v": v}}));
            api.patch(&note_name(n, p), &PatchParams::default(), &patch)
                .await?;
        }
    }
    Ok(())
}

/// Waits until every parent's child and status carry `v`.
async fn converged(
    server: &TestServer,
    notes: &Api<DynamicObject>,
    v: i64,
    step: &str,
) -> anyhow::Result<()> {
    let cms: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::all(server.client());
    let want = v.to_string();
    let deadline = Instant::now() + CONVERGE;
    loop {
        let children = cms.list(&Default::default()).await?;
        let good_children = children
            .items
            .iter()
            .filter(|c| c.data.as_ref().and_then(|d| d.get("v")) == Some(&want))
            .count();
        let parents = notes.list(&Default::default()).await?;
        let good_parents = parents
            .items
            .iter()
            .filter(|p| p.data["status"]["v"].as_str() == Some(want.as_str()))
            .count();
        let all = NAMESPACES * PER_NAMESPACE;
        if good_children == all && good_parents == all {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!(
                "{step}: {good_children}/{all} children and {good_parents}/{all} parents at v={v}"
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Every successful write of a parent's child or status, checked against the successful writes
/// of its bucket's Lease (their writer holds the Lease after them, or released it: a release
/// is not told apart, which can only hide a violation, never invent one). A write whose change
/// lies in `(rv_before, rv_after]` is fine when its writer wrote the Lease last before it, or
/// wrote it concurrently with it. Namespaces are placed in buckets by `hash`, as the replicas
/// place them. Returns the violations and the number of writes checked.
fn check_ownership(log: &[WriteRecord], hash: ShardHash) -> (Vec<String>, usize) {
    check_ownership_by(log, |w| {
        let ns = w.namespace.as_deref()?;
        Some(bucket_by(ns, BUCKETS, hash).to_string())
    })
}

/// As [`check_ownership`], each write placed in a bucket by `place` (`None`: not checked).
fn check_ownership_by(
    log: &[WriteRecord],
    place: impl Fn(&WriteRecord) -> Option<String>,
) -> (Vec<String>, usize) {
    let mut leases: BTreeMap<String, Vec<&WriteRecord>> = BTreeMap::new();
    for r in log {
        let Some(name) = r.name.as_deref() else {
            continue;
        };
        if r.resource == "leases"
            && r.code < 300
            && name.starts_with("kmeta-shard-")
            && !name.contains("-member-")
        {
            leases
                .entry(name.trim_start_matches("kmeta-shard-").to_owned())
                .or_default()
                .push(r);
        }
    }
    let mut violations = Vec::new();
    let mut checked = 0;
    for w in log {
        let owned = matches!(
            w.resource.as_str(),
            "configmaps" | "notes/status" | "notes" | "boards/status"
        );
        let (Some(who), Some(ns)) = (identity_of(&w.user_agent), w.namespace.as_deref()) else {
            continue;
        };
        if !owned || w.code >= 300 {
            continue;
        }
        let Some(bucket) = place(w) else {
            continue;
        };
        checked += 1;
        let writes = leases.get(&bucket).map(Vec::as_slice).unwrap_or_default();
        let before: Vec<&&WriteRecord> = writes
            .iter()
            .filter(|l| l.rv_after <= w.rv_before)
            .collect();
        let last = before
            .iter()
            .filter(|l| !before.iter().any(|m| m.rv_before >= l.rv_after));
        let concurrent = writes
            .iter()
            .filter(|l| l.rv_after > w.rv_before && l.rv_before < w.rv_after);
        let mut holders: BTreeSet<&str> = last
            .chain(concurrent.collect::<Vec<_>>().iter())
            .filter_map(|l| identity_of(&l.user_agent))
            .collect();
        if before.is_empty() {
            holders.insert("");
        }
        if !holders.contains(who) {
            violations.push(format!(
                "{} {} {ns}/{} by {who} (rv {}..{}) while bucket {bucket} was held by {holders:?}",
                w.verb,
                w.resource,
                w.name.as_deref().unwrap_or("(create)"),
                w.rv_before,
                w.rv_after
            ));
        }
    }
    (violations, checked)
}

fn signal(r: &Replica, sig: &str) -> anyhow::Result<()> {
    let status = Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(r.child.id().to_string())
        .status()?;
    anyhow::ensure!(status.success(), "kill -{sig} {}", r.name);
    Ok(())
}

/// After the steps: the parents' sync records name more than one replica, the children were
/// written by at least three, and every write lies where its writer held the parent's bucket.
async fn check_writes_and_records(
    server: &TestServer,
    notes: &Api<DynamicObject>,
) -> anyhow::Result<()> {
    // each parent's sync record names the replica that last changed it: more than one
    let replicas: BTreeSet<String> = notes
        .list(&Default::default())
        .await?
        .items
        .iter()
        .filter_map(|p| {
            p.data["status"]["kmeta"]["lastSync"]["replica"]
                .as_str()
                .map(str::to_owned)
        })
        .collect();
    assert!(replicas.len() >= 2, "sync records name {replicas:?}");
    let log = server.write_log().since(0);
    let (violations, checked) = check_ownership(&log, ShardHash::Mixed);
    assert!(
        checked > 2 * NAMESPACES * PER_NAMESPACE,
        "only {checked} writes checked"
    );
    let writers: BTreeSet<&str> = log
        .iter()
        .filter(|w| w.resource == "configmaps")
        .filter_map(|w| identity_of(&w.user_agent))
        .collect();
    assert!(writers.len() >= 3, "children written by {writers:?} only");
    if !violations.is_empty() {
        bail!(
            "{} of {checked} writes outside their replica's bucket:\n{}",
            violations.len(),
            violations.join("\n")
        );
    }
    Ok(())
}

/// Creates the bucket Leases, released, for a set placing parents by `hash` and `key` (`namespace`
/// or `uid`), so that every acquisition is an update the write log names (a create names its
/// object only in its body) and the ownership check sees every Lease a replica took: without
/// them, a replica's first writes could come before its first named Lease write.
async fn released_bucket_leases(
    server: &TestServer,
    hash: ShardHash,
    key: &str,
) -> anyhow::Result<()> {
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(server.client(), "default");
    for b in kmeta::coord::shard::Bucket::all(BUCKETS) {
        let lease = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": format!("kmeta-shard-{b}"),
                         "labels": {"kmeta.dev/shard-set": "kmeta-shard", "kmeta.dev/shard-role": "bucket"},
                         "annotations": {"kmeta.dev/shard-buckets": BUCKETS.to_string(),
                                         "kmeta.dev/shard-hash": hash.as_str(),
                                         "kmeta.dev/shard-key": key}},
            "spec": {"leaseDurationSeconds": 1}});
        leases
            .create(&PostParams::default(), &serde_json::from_value(lease)?)
            .await?;
    }
    Ok(())
}

#[tokio::test]
async fn three_replicas_split_the_parents_and_no_parent_is_written_by_two() -> anyhow::Result<()> {
    let _turn = turn().await?;
    let server = TestServer::start().await?;
    server.write_log().enable(1_000_000);
    let (dir, kubeconfig) = kubeconfig_and_crds(&server).await?;
    let notes = set_up(&server, &hook().await?).await?;
    released_bucket_leases(&server, ShardHash::Mixed, "namespace").await?;
    let step = |s: &str| eprintln!("sharding: {s} at {:?}", Instant::now());

    // one replica takes every bucket
    let a = start(&kubeconfig, dir.path(), "kmeta-a")?;
    converged(&server, &notes, 0, "one replica").await?;
    wait_balanced(&[&a]).await?;

    // scale to three: the buckets are split, every change still lands
    step("scale 1 → 3");
    let b = start(&kubeconfig, dir.path(), "kmeta-b")?;
    let mut c = start(&kubeconfig, dir.path(), "kmeta-c")?;
    wait_balanced(&[&a, &b, &c]).await?;
    edit_all(&server, 1).await?;
    converged(&server, &notes, 1, "three replicas").await?;

    // kill -9 of one: the others take its buckets once its Leases expire
    step("kill -9 c");
    c.child.kill()?;
    c.child.wait()?;
    edit_all(&server, 2).await?;
    converged(&server, &notes, 2, "after kill -9").await?;
    wait_balanced(&[&a, &b]).await?;

    // a replica stopped until the others took its buckets (its Leases expired): resumed, it
    // writes nothing for them (its fences closed by the clock) and takes its share again
    step("restart c, then SIGSTOP b");
    let c = start(&kubeconfig, dir.path(), "kmeta-c2")?;
    wait_balanced(&[&a, &b, &c]).await?;
    signal(&b, "STOP")?;
    edit_all(&server, 3).await?;
    converged(&server, &notes, 3, "b stopped").await?;
    wait_balanced(&[&a, &c]).await?;
    signal(&b, "CONT")?;
    edit_all(&server, 4).await?;
    converged(&server, &notes, 4, "b resumed").await?;
    wait_balanced(&[&a, &b, &c]).await?;

    // graceful scale-down: SIGTERM hands c's buckets over
    step("SIGTERM c");
    signal(&c, "TERM")?;
    edit_all(&server, 5).await?;
    converged(&server, &notes, 5, "after scale-down").await?;
    wait_balanced(&[&a, &b]).await?;

    // rolling restart, as a Deployment rolls its pods: one replica at a time is replaced by a
    // new one (SIGTERM hands its buckets over), every change landing throughout
    step("rolling restart");
    let a2 = start(&kubeconfig, dir.path(), "kmeta-a2")?;
    signal(&a, "TERM")?;
    edit_all(&server, 6).await?;
    wait_balanced(&[&a2, &b]).await?;
    let b2 = start(&kubeconfig, dir.path(), "kmeta-b2")?;
    signal(&b, "TERM")?;
    edit_all(&server, 7).await?;
    wait_balanced(&[&a2, &b2]).await?;
    converged(&server, &notes, 7, "after a rolling restart").await?;
    // and once the new replicas split the buckets, a change lands on both (the step above may
    // have been synced by a2 alone: b's buckets passed to it before b2 took its share)
    edit_all(&server, 8).await?;
    converged(&server, &notes, 8, "after a rolling restart, split").await?;

    check_writes_and_records(&server, &notes).await?;
    drop((a, b, c, a2, b2));
    server.shutdown().await;
    Ok(())
}

/// A leader-elected kmeta (as Metacontroller would) holds the leader Lease: a sharded replica
/// started beside it takes no bucket and writes nothing; once the leader stops (and releases
/// the Lease), the sharded replica takes the Lease and every bucket and syncs every change.
#[tokio::test]
async fn a_sharded_replica_works_only_once_no_leader_mode_process_holds_the_leader_lease()
-> anyhow::Result<()> {
    let _turn = turn().await?;
    let server = TestServer::start().await?;
    let (dir, kubeconfig) = kubeconfig_and_crds(&server).await?;
    let notes = set_up(&server, &hook().await?).await?;
    let leader = Replica {
        name: "leader".into(),
        child: Command::new(KMETA)
            .args(["run", "--kubeconfig"])
            .arg(&kubeconfig)
            .args(["--leader-election", "--leader-election-namespace=default"])
            .args(RATE)
            .args(["--metrics-address=0", "--health-probe-bind-address=0"])
            .env("POD_NAME", "leader")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.path().join("leader.log"))?)
            .spawn()?,
        health: 0,
    };
    converged(&server, &notes, 0, "leader mode").await?;
    let sharded = start(&kubeconfig, dir.path(), "kmeta-a")?;
    let url = format!("http://127.0.0.1:{}/readyz?verbose", sharded.health);
    wait_for(
        "the sharded replica to say the leader blocks it",
        || async {
            let text = async { reqwest::get(&url).await.ok()?.text().await.ok() }.await;
            text.is_some_and(|t| {
                t.contains("buckets none") && t.contains("leader, outside this shard set")
            })
        },
    )
    .await?;
    let before = server.write_log().since(0).len();
    server.write_log().enable(100_000);
    edit_all(&server, 1).await?;
    converged(
        &server,
        &notes,
        1,
        "leader mode beside a blocked sharded replica",
    )
    .await?;
    let by_sharded = server
        .write_log()
        .since(0)
        .iter()
        .filter(|w| identity_of(&w.user_agent) == Some("kmeta-a") && w.resource != "leases")
        .count();
    assert_eq!(
        by_sharded, 0,
        "the blocked replica wrote ({before} records before)"
    );
    signal(&leader, "TERM")?;
    edit_all(&server, 2).await?;
    if let Err(e) = converged(&server, &notes, 2, "after the leader stopped").await {
        for log in ["leader.log", "kmeta-a.log"] {
            let text = std::fs::read_to_string(dir.path().join(log)).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(30).collect();
            eprintln!(
                "--- {log}\n{}",
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            );
        }
        return Err(e);
    }
    wait_balanced(&[&sharded]).await?;
    drop((leader, sharded));
    server.shutdown().await;
    Ok(())
}

/// As `wait_for`, with the bound of a whole step ([`CONVERGE`]).
async fn wait_long<F, Fut>(what: &str, mut cond: F) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + CONVERGE;
    while !cond().await {
        if Instant::now() > deadline {
            bail!("timed out after {CONVERGE:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    Ok(())
}

/// A DecoratorController with a finalize hook puts its finalizer on every Note (the targets);
/// deleted, its targets are released by the replicas holding their buckets, and its own
/// finalizer removed by the holder of the cluster bucket, every write by the right replica.
#[tokio::test]
async fn two_replicas_release_a_deleted_decorators_targets_bucket_by_bucket() -> anyhow::Result<()>
{
    use axum::Json;
    let _turn = turn().await?;
    let server = TestServer::start().await?;
    server.write_log().enable(1_000_000);
    let (dir, kubeconfig) = kubeconfig_and_crds(&server).await?;
    released_bucket_leases(&server, ShardHash::Mixed, "namespace").await?;
    // sync attaches nothing; finalize never finishes, so the targets keep the finalizer
    let app = axum::Router::new()
        .route(
            "/sync",
            axum::routing::post(|| async { Json(json!({"attachments": []})) }),
        )
        .route(
            "/finalize",
            axum::routing::post(|| async { Json(json!({"attachments": [], "finalized": false})) }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}", listener.local_addr()?);
    tokio::spawn(async move { axum::serve(listener, app).await });
    let dc = json!({
        "apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "DecoratorController",
        "metadata": {"name": "dec"},
        "spec": {"resources": [{"apiVersion": "shard.example.com/v1", "resource": "notes"}],
                 "hooks": {"sync": {"webhook": {"url": format!("{base}/sync")}},
                           "finalize": {"webhook": {"url": format!("{base}/finalize")}}}}
    });
    let notes = set_up_with(&server, "decoratorcontrollers", dc).await?;
    let a = start(&kubeconfig, dir.path(), "kmeta-a")?;
    let b = start(&kubeconfig, dir.path(), "kmeta-b")?;
    wait_balanced(&[&a, &b]).await?;
    let fin = "metacontroller.io/decoratorcontroller-dec";
    let with_finalizer = || async {
        let list = notes
            .list(&Default::default())
            .await
            .map(|l| l.items)
            .unwrap_or_default();
        list.iter()
            .filter(|n| n.metadata.finalizers.iter().flatten().any(|f| f == fin))
            .count()
    };
    let all = NAMESPACES * PER_NAMESPACE;
    wait_long("every target to carry the finalizer", || async {
        with_finalizer().await == all
    })
    .await?;
    let dcs: Api<DynamicObject> = Api::all_with(
        server.client(),
        &metacontroller_resource("decoratorcontrollers"),
    );
    dcs.delete("dec", &Default::default()).await?;
    wait_long("every target released", || async {
        with_finalizer().await == 0
    })
    .await?;
    wait_long("the DecoratorController gone", || async {
        matches!(dcs.get_opt("dec").await, Ok(None))
    })
    .await?;
    let log = server.write_log().since(0);
    let releasers: BTreeSet<&str> = log
        .iter()
        .filter(|w| w.resource == "notes" && w.verb != "create" && w.code < 300)
        .filter_map(|w| identity_of(&w.user_agent))
        .collect();
    assert_eq!(releasers.len(), 2, "targets written by {releasers:?}");
    let (violations, checked) = check_ownership(&log, ShardHash::Mixed);
    assert!(checked >= 2 * all, "only {checked} writes checked");
    anyhow::ensure!(violations.is_empty(), "{}", violations.join("\n"));
    drop((a, b));
    server.shutdown().await;
    Ok(())
}

/// A replica that cannot read the leader Lease for a while (every GET of a Lease answered 500)
/// keeps its buckets: no news is not a leader-mode process (found by the sharded chaos soak,
/// where each such error handed every bucket over).
#[tokio::test]
async fn a_failed_read_of_the_leader_lease_hands_no_bucket_over() -> anyhow::Result<()> {
    let _turn = turn().await?;
    let server = TestServer::start().await?;
    let (dir, kubeconfig) = kubeconfig_and_crds(&server).await?;
    set_up(&server, &hook().await?).await?;
    let a = start(&kubeconfig, dir.path(), "kmeta-a")?;
    wait_balanced(&[&a]).await?;
    let fault = server.faults().inject(
        kmeta_apiserver::FaultSpec::error(500)
            .verb("get")
            .resource("leases")
            .user_agent("kmeta/"),
    );
    // ten Lease rounds (retry period 300 ms) with every read of the leader Lease failing, and
    // at least ten samples of what the replica holds (each an HTTP request: slower under load)
    let started = Instant::now();
    let mut samples = 0;
    while samples < 10 || started.elapsed() < Duration::from_secs(3) {
        anyhow::ensure!(
            started.elapsed() < CONVERGE,
            "only {samples} samples in {CONVERGE:?}"
        );
        let held = held(&a).await.unwrap_or_default();
        assert_eq!(
            held.len(),
            BUCKETS as usize + 1,
            "buckets given up: {held:?}"
        );
        samples += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    server.faults().remove(fault);
    drop(a);
    server.shutdown().await;
    Ok(())
}

/// Namespaces named so that plain FNV-1a (KEP-5866's `shardRange` hash) spreads them over the
/// buckets: `0-team` … `23-team` fill 7 of 8 (`team-0` … `team-23` would fill 2).
fn spread(n: usize) -> String {
    format!("{n}-team")
}

/// `kmeta_watch_objects{resource,mode}` on a replica's metrics endpoint.
async fn watch_objects(metrics: u16, resource: &str, mode: &str) -> Option<usize> {
    gauge(
        metrics,
        &format!("kmeta_watch_objects{{resource=\"{resource}\",mode=\"{mode}\"}}"),
    )
    .await
}

/// `kmeta_watch_streams{resource,mode="sharded"}` on a replica's metrics endpoint.
async fn watch_streams(metrics: u16, resource: &str) -> Option<usize> {
    gauge(
        metrics,
        &format!("kmeta_watch_streams{{resource=\"{resource}\",mode=\"sharded\"}}"),
    )
    .await
}

/// The value of `series` (name and labels, as exposed) on a replica's metrics endpoint.
async fn value(metrics: u16, series: &str) -> Option<f64> {
    let url = format!("http://127.0.0.1:{metrics}/metrics");
    let text = reqwest::get(&url).await.ok()?.text().await.ok()?;
    let want = format!("{series} ");
    text.lines()
        .find_map(|l| l.strip_prefix(want.as_str()))
        .and_then(|v| v.trim().parse().ok())
}

/// The value of the gauge `series` (name and labels, as exposed) on a replica's metrics endpoint.
async fn gauge(metrics: u16, series: &str) -> Option<usize> {
    let v = value(metrics, series).await?;
    (v >= 0.0 && v.fract() == 0.0).then_some(v as usize)
}

/// How many `resource` objects (listed from the server) lie in namespaces whose bucket, under
/// plain FNV-1a, is among `held`.
async fn objects_in_buckets(
    server: &TestServer,
    resource: &ApiResource,
    held: &BTreeSet<String>,
) -> anyhow::Result<usize> {
    let all: Api<DynamicObject> = Api::all_with(server.client(), resource);
    Ok(all
        .list(&Default::default())
        .await?
        .items
        .iter()
        .filter(|o| {
            let ns = o.metadata.namespace.as_deref().unwrap_or("");
            held.contains(&bucket_by(ns, BUCKETS, ShardHash::Fnv1a).to_string())
        })
        .count())
}

/// Waits until each replica's sharded watches of Notes and ConfigMaps hold exactly the objects
/// of the namespaces its buckets cover (the API server sent it no other), each over one stream
/// (`kmeta_watch_streams`: the streams of buckets gained apart were merged once the split held
/// still), and its `kmeta_shard_parents` counts exactly those Notes.
async fn wait_split(
    server: &TestServer,
    replicas: &[(&Replica, u16)],
    step: &str,
) -> anyhow::Result<()> {
    let cms = ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&());
    let deadline = Instant::now() + CONVERGE;
    loop {
        let mut seen = Vec::new();
        for (r, metrics) in replicas {
            let held = held(r).await.unwrap_or_default();
            let want_notes = objects_in_buckets(server, &notes_resource(), &held).await?;
            let want_cms = objects_in_buckets(server, &cms, &held).await?;
            let notes = watch_objects(*metrics, "shard.example.com/v1/notes", "sharded").await;
            let cm = watch_objects(*metrics, "v1/configmaps", "sharded").await;
            let parents = gauge(*metrics, "kmeta_shard_parents{controller=\"notes\"}").await;
            let streams = (
                watch_streams(*metrics, "shard.example.com/v1/notes").await,
                watch_streams(*metrics, "v1/configmaps").await,
            );
            seen.push((
                r.name.clone(),
                held,
                (notes, want_notes),
                (cm, want_cms),
                parents,
                streams,
            ));
        }
        if seen.iter().all(|(_, _, (n, wn), (c, wc), p, streams)| {
            *n == Some(*wn) && *c == Some(*wc) && *p == Some(*wn) && *streams == (Some(1), Some(1))
        }) {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!(
                "{step}: (replica, buckets, (notes held, wanted), (configmaps held, wanted), kmeta_shard_parents, (streams of notes, of configmaps)): {seen:?}"
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Three replicas `kmeta-a`, `kmeta-b`, `kmeta-c` run with `flag`, each with its metrics port.
fn start_three(
    kubeconfig: &std::path::Path,
    dir: &std::path::Path,
    flag: &str,
) -> anyhow::Result<Vec<(Replica, u16)>> {
    let mut replicas = Vec::new();
    for name in ["kmeta-a", "kmeta-b", "kmeta-c"] {
        let metrics = free_port()?;
        let extra = [
            flag.to_owned(),
            format!("--metrics-address=127.0.0.1:{metrics}"),
        ];
        replicas.push((start_with(kubeconfig, dir, name, &extra)?, metrics));
    }
    Ok(replicas)
}

/// `--shard-watch=server`: each replica lists and watches only the namespaces of its buckets
/// (KEP-5866 `shardSelector`, served by kmeta-apiserver), so its caches hold its share alone;
/// after kill -9 of one, the survivors take its buckets, list them, and sync its parents; every
/// write lies where its writer held the parent's bucket.
#[tokio::test]
async fn server_sharded_watches_hold_only_each_replicas_buckets() -> anyhow::Result<()> {
    let _turn = turn().await?;
    let server = TestServer::start().await?;
    server.write_log().enable(1_000_000);
    let (dir, kubeconfig) = kubeconfig_and_crds(&server).await?;
    released_bucket_leases(&server, ShardHash::Fnv1a, "namespace").await?;
    let cc = notes_controller(&hook().await?);
    let notes = set_up_in(&server, "compositecontrollers", cc, spread).await?;
    let mut replicas = start_three(&kubeconfig, dir.path(), "--shard-watch=server")?;
    let all: Vec<&Replica> = replicas.iter().map(|(r, _)| r).collect();
    wait_balanced(&all).await?;
    converged(&server, &notes, 0, "three replicas, sharded watches").await?;
    for (r, _) in &replicas {
        let url = format!("http://127.0.0.1:{}/readyz?verbose", r.health);
        let text = reqwest::get(&url).await?.text().await?;
        assert!(
            text.contains("watches sharded by the server)") && !text.contains("watched whole"),
            "{}: {text}",
            r.name
        );
    }
    let each: Vec<(&Replica, u16)> = replicas.iter().map(|(r, m)| (r, *m)).collect();
    wait_split(&server, &each, "three replicas").await?;

    // kill -9 of one: the survivors take its buckets, list them, and sync its parents
    let (mut c, _) = replicas
        .pop()
        .ok_or_else(|| anyhow::anyhow!("three replicas"))?;
    let c_buckets = held(&c).await.unwrap_or_default();
    c.child.kill()?;
    c.child.wait()?;
    edit_all_in(&server, 1, spread).await?;
    converged(&server, &notes, 1, "after kill -9, sharded watches").await?;
    let survivors: Vec<&Replica> = replicas.iter().map(|(r, _)| r).collect();
    wait_balanced(&survivors).await?;
    let each: Vec<(&Replica, u16)> = replicas.iter().map(|(r, m)| (r, *m)).collect();
    wait_split(&server, &each, "two replicas").await?;
    // each of its buckets was taken over once its Lease expired, timed from its last renewal
    // the taker saw to the bucket's work starting there: never less than the Lease duration
    let (mut count, mut sum) = (0.0, 0.0);
    for (_, metrics) in &replicas {
        let series = |s: &str| format!("kmeta_shard_handoff_seconds_{s}{{previous=\"expired\"}}");
        count += value(*metrics, &series("count")).await.unwrap_or(0.0);
        sum += value(*metrics, &series("sum")).await.unwrap_or(0.0);
    }
    assert_eq!(
        count,
        c_buckets.len() as f64,
        "hand-overs after expiry of {c_buckets:?}"
    );
    assert!(
        (count * LEASE_DURATION_S..count * CONVERGE.as_secs_f64()).contains(&sum),
        "{count} hand-overs after expiry took {sum} s in all"
    );

    let (violations, checked) = check_ownership(&server.write_log().since(0), ShardHash::Fnv1a);
    assert!(
        checked > 2 * NAMESPACES * PER_NAMESPACE,
        "only {checked} writes checked"
    );
    assert!(violations.is_empty(), "{}", violations.join("\n"));
    drop((replicas, c));
    server.shutdown().await;
    Ok(())
}

/// Every Note in one namespace.
fn solo(_: usize) -> String {
    "solo".to_owned()
}

/// Each Note's bucket under `--shard-key=uid` (the mixed hash of its uid), by (namespace, name).
async fn buckets_by_uid(
    notes: &Api<DynamicObject>,
) -> anyhow::Result<BTreeMap<(String, String), String>> {
    Ok(notes
        .list(&Default::default())
        .await?
        .items
        .iter()
        .filter_map(|n| {
            let uid = n.metadata.uid.as_deref()?;
            let key = (n.metadata.namespace.clone()?, n.metadata.name.clone()?);
            Some((key, bucket_by(uid, BUCKETS, ShardHash::Mixed).to_string()))
        })
        .collect())
}

/// Waits until every replica works on some of the Notes and its `kmeta_shard_parents` counts
/// exactly the Notes whose uid falls in its buckets.
async fn wait_spread_by_uid(
    notes: &Api<DynamicObject>,
    replicas: &[(Replica, u16)],
    step: &str,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + CONVERGE;
    loop {
        let by_uid = buckets_by_uid(notes).await?;
        let mut seen = Vec::new();
        for (r, metrics) in replicas {
            let held = held(r).await.unwrap_or_default();
            let want = by_uid.values().filter(|b| held.contains(*b)).count();
            let counted = gauge(*metrics, "kmeta_shard_parents{controller=\"notes\"}").await;
            seen.push((r.name.clone(), held, want, counted));
        }
        if seen
            .iter()
            .all(|(_, _, want, counted)| *want > 0 && *counted == Some(*want))
        {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("{step}: (replica, buckets, parents there, kmeta_shard_parents): {seen:?}");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// `--shard-key=uid`: every parent in one namespace (by namespace, one replica's work), three
/// replicas each work on the parents whose uid falls in their buckets; after kill -9 of one the
/// survivors take its parents; every update of a child and every status write lies where its
/// writer held the bucket of the parent's uid (a create names its object only in its body, so
/// creates are not placed).
#[tokio::test]
async fn by_uid_one_namespaces_parents_spread_over_the_replicas() -> anyhow::Result<()> {
    let _turn = turn().await?;
    let server = TestServer::start().await?;
    server.write_log().enable(1_000_000);
    let (dir, kubeconfig) = kubeconfig_and_crds(&server).await?;
    released_bucket_leases(&server, ShardHash::Mixed, "uid").await?;
    let cc = notes_controller(&hook().await?);
    let notes = set_up_in(&server, "compositecontrollers", cc, solo).await?;
    let mut replicas = start_three(&kubeconfig, dir.path(), "--shard-key=uid")?;
    let all: Vec<&Replica> = replicas.iter().map(|(r, _)| r).collect();
    wait_balanced(&all).await?;
    converged(&server, &notes, 0, "three replicas by uid").await?;
    wait_spread_by_uid(&notes, &replicas, "three replicas by uid").await?;

    let (mut c, _) = replicas
        .pop()
        .ok_or_else(|| anyhow::anyhow!("three replicas"))?;
    c.child.kill()?;
    c.child.wait()?;
    edit_all_in(&server, 1, solo).await?;
    converged(&server, &notes, 1, "by uid, after kill -9").await?;
    let survivors: Vec<&Replica> = replicas.iter().map(|(r, _)| r).collect();
    wait_balanced(&survivors).await?;
    wait_spread_by_uid(&notes, &replicas, "two replicas by uid").await?;

    let by_uid = buckets_by_uid(&notes).await?;
    let (violations, checked) = check_ownership_by(&server.write_log().since(0), |w| {
        let key = (w.namespace.clone()?, w.name.clone()?);
        by_uid.get(&key).cloned()
    });
    assert!(
        checked > 2 * NAMESPACES * PER_NAMESPACE,
        "only {checked} writes checked"
    );
    assert!(violations.is_empty(), "{}", violations.join("\n"));
    drop((replicas, c));
    server.shutdown().await;
    Ok(())
}

/// A hook for cluster-scoped Boards: one ConfigMap child in each namespace `team-0` …
/// `team-<NAMESPACES-1>`, carrying the parent's `spec.v`.
async fn board_hook() -> anyhow::Result<String> {
    use axum::Json;
    let app = axum::Router::new().route(
        "/sync",
        axum::routing::post(|Json(req): Json<Value>| async move {
            let parent = &req["parent"];
            let name = parent["metadata"]["name"]
                .as_str()
                .unwrap_or("x")
                .to_owned();
            let v = parent["spec"]["v"].as_i64().unwrap_or(0).to_string();
            let children: Vec<Value> = (0..NAMESPACES)
                .map(|n| {
                    json!({"apiVersion": "v1", "kind": "ConfigMap",
                           "metadata": {"name": name, "namespace": team(n)}, "data": {"v": v}})
                })
                .collect();
            Json(json!({"status": {"v": v}, "children": children}))
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/sync", listener.local_addr()?);
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(url)
}

/// The cluster-scoped Board CRD, the namespaces `team-*` and the CompositeController of Boards
/// with [`board_hook`]; the Boards' API.
async fn set_up_boards(server: &TestServer) -> anyhow::Result<Api<DynamicObject>> {
    let client = server.client();
    let pp = PostParams::default();
    let boards = install_crd(&client, &example_resource("Board", "boards"), "Cluster").await?;
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    for n in 0..NAMESPACES {
        let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": team(n)}});
        namespaces.create(&pp, &serde_json::from_value(ns)?).await?;
    }
    let cc = json!({
        "apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "CompositeController",
        "metadata": {"name": "boards"},
        "spec": {"generateSelector": true,
                 "parentResource": {"apiVersion": "shard.example.com/v1", "resource": "boards"},
                 "childResources": [{"apiVersion": "v1", "resource": "configmaps",
                                     "updateStrategy": {"method": "InPlace"}}],
                 "hooks": {"sync": {"webhook": {"url": board_hook().await?}}}}
    });
    Api::<DynamicObject>::all_with(
        client.clone(),
        &metacontroller_resource("compositecontrollers"),
    )
    .create(&pp, &serde_json::from_value(cc)?)
    .await?;
    Ok(boards)
}

/// A cluster-scoped parent's children lie in namespaces of every bucket: its sync runs on the
/// holder of the cluster bucket, whose writes of them pass that bucket's fence whichever
/// namespaces' buckets it holds (they are checked in the sync's scope, not by their paths), and
/// every one of them lies where its writer held the cluster bucket.
#[tokio::test]
async fn a_cluster_scoped_parents_children_everywhere_are_written_by_the_cluster_buckets_holder()
-> anyhow::Result<()> {
    let _turn = turn().await?;
    let server = TestServer::start().await?;
    server.write_log().enable(1_000_000);
    let (dir, kubeconfig) = kubeconfig_and_crds(&server).await?;
    released_bucket_leases(&server, ShardHash::Mixed, "namespace").await?;
    let boards = set_up_boards(&server).await?;
    let (client, pp) = (server.client(), PostParams::default());
    let a = start(&kubeconfig, dir.path(), "kmeta-a")?;
    let b = start(&kubeconfig, dir.path(), "kmeta-b")?;
    let c = start(&kubeconfig, dir.path(), "kmeta-c")?;
    wait_balanced(&[&a, &b, &c]).await?;
    for i in 0..2 {
        let board = json!({"apiVersion": "shard.example.com/v1", "kind": "Board",
            "metadata": {"name": format!("board-{i}")}, "spec": {"v": 7}});
        boards.create(&pp, &serde_json::from_value(board)?).await?;
    }
    // every child in every namespace, and both parents' status
    let cms: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::all(client.clone());
    let want = 2 * NAMESPACES;
    wait_long("every Board's children in every namespace", || async {
        let children = cms
            .list(&Default::default())
            .await
            .map(|l| l.items)
            .unwrap_or_default();
        let good = children
            .iter()
            .filter(|c| c.data.as_ref().and_then(|d| d.get("v")).map(String::as_str) == Some("7"))
            .count();
        let synced = boards
            .list(&Default::default())
            .await
            .map(|l| {
                l.items
                    .iter()
                    .filter(|b| b.data["status"]["v"] == "7")
                    .count()
            })
            .unwrap_or_default();
        good == want && synced == 2
    })
    .await?;
    let log = server.write_log().since(0);
    let (violations, checked) = check_ownership_by(&log, |w| {
        let board = w.name.as_deref().is_none_or(|n| n.starts_with("board-"));
        (board && matches!(w.resource.as_str(), "configmaps" | "boards/status"))
            .then(|| "cluster".to_owned())
    });
    assert!(checked >= want, "only {checked} writes checked");
    assert!(violations.is_empty(), "{}", violations.join("\n"));
    drop((a, b, c));
    server.shutdown().await;
    Ok(())
}

/// `--shard-watch=server` against an API server that does not serve `shardSelector` (it ignores
/// the parameter and echoes nothing): the replica watches each resource whole, says so, and
/// syncs every parent of its buckets all the same.
#[tokio::test]
async fn without_a_served_shard_selector_the_watches_are_whole_and_work_goes_on()
-> anyhow::Result<()> {
    let _turn = turn().await?;
    let server = TestServer::builder().shard_selector(false).start().await?;
    let (dir, kubeconfig) = kubeconfig_and_crds(&server).await?;
    let notes = set_up(&server, &hook().await?).await?;
    let metrics = free_port()?;
    let extra = [
        "--shard-watch=server".to_owned(),
        format!("--metrics-address=127.0.0.1:{metrics}"),
    ];
    let a = start_with(&kubeconfig, dir.path(), "kmeta-a", &extra)?;
    wait_balanced(&[&a]).await?;
    converged(&server, &notes, 0, "one replica, selector not served").await?;
    let url = format!("http://127.0.0.1:{}/readyz?verbose", a.health);
    let text = reqwest::get(&url).await?.text().await?;
    assert!(text.contains("(watched whole)"), "{text}");
    let all = NAMESPACES * PER_NAMESPACE;
    wait_long("the whole Note watch to hold every Note", || async {
        watch_objects(metrics, "shard.example.com/v1/notes", "whole").await == Some(all)
    })
    .await?;
    edit_all(&server, 1).await?;
    converged(&server, &notes, 1, "one replica, selector not served").await?;
    drop(a);
    server.shutdown().await;
    Ok(())
}

#[test]
fn the_ownership_check_finds_a_write_by_a_replica_that_lost_its_bucket() -> anyhow::Result<()> {
    let ns = "team-1";
    let bucket = bucket_of(ns, BUCKETS).to_string();
    let rec =
        |seq: u64, resource: &str, name: Option<&str>, ns: Option<&str>, who: &str, rv: u64| {
            WriteRecord {
                seq,
                at: std::time::SystemTime::now(),
                verb: "update".into(),
                resource: resource.into(),
                namespace: ns.map(str::to_owned),
                name: name.map(str::to_owned),
                user_agent: format!("kmeta/0.1.0 ({who})"),
                code: 200,
                rv_before: rv,
                rv_after: rv + 1,
            }
        };
    let lease = format!("kmeta-shard-{bucket}");
    let log = vec![
        rec(0, "leases", Some(&lease), Some("default"), "a", 1),
        rec(1, "configmaps", Some("n0"), Some(ns), "a", 3),
        rec(2, "leases", Some(&lease), Some("default"), "b", 5),
        rec(3, "configmaps", Some("n0"), Some(ns), "b", 7),
        rec(4, "configmaps", Some("n0"), Some(ns), "a", 9),
    ];
    let (violations, checked) = check_ownership(&log, ShardHash::Mixed);
    assert_eq!(checked, 3);
    assert_eq!(violations.len(), 1, "{violations:?}");
    assert!(violations[0].contains("by a"), "{violations:?}");
    Ok(())
}

/// `kmeta run --sharding --serve-kro`, two replicas: RGDs are served by the replica holding
/// the cluster bucket only (their CRD, CompositeController and status are cluster-scoped, so
/// their writes need it), and the CompositeController made is run by the sharded manager: every
/// Memo of eight namespaces gets its ConfigMap.
#[tokio::test]
async fn rgds_are_served_by_the_replica_holding_the_cluster_bucket() -> anyhow::Result<()> {
    let _turn = turn().await?;
    let server = TestServer::start().await?;
    server.write_log().enable(100_000);
    let (dir, kubeconfig) = kubeconfig_and_crds(&server).await?;
    let extra = [
        "--serve-kro".to_owned(),
        "--discovery-interval=1s".to_owned(),
        "--metrics-address=0".to_owned(),
    ];
    let a = start_with(&kubeconfig, dir.path(), "kmeta-a", &extra)?;
    let b = start_with(&kubeconfig, dir.path(), "kmeta-b", &extra)?;
    wait_balanced(&[&a, &b]).await?;
    let client = server.client();
    let memos = crate::run::apply_memo_rgd(&client).await?;
    let pp = PostParams::default();
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let memo_resource = ApiResource {
        group: "kro.run".into(),
        version: "v1alpha1".into(),
        api_version: "kro.run/v1alpha1".into(),
        kind: "Memo".into(),
        plural: "memos".into(),
    };
    drop(memos);
    for ns in (0..8).map(team) {
        let obj = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
        namespaces
            .create(&pp, &serde_json::from_value(obj)?)
            .await?;
        let memo = json!({"apiVersion": "kro.run/v1alpha1", "kind": "Memo",
            "metadata": {"name": "m", "namespace": ns}, "spec": {"text": ns}});
        Api::<DynamicObject>::namespaced_with(client.clone(), &ns, &memo_resource)
            .create(&pp, &serde_json::from_value(memo)?)
            .await?;
    }
    wait_long("every Memo's ConfigMap", || async {
        let cms: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::all(client.clone());
        let list = cms
            .list(&Default::default())
            .await
            .map(|l| l.items)
            .unwrap_or_default();
        (0..8).map(team).all(|ns| {
            list.iter().any(|c| {
                c.metadata.namespace.as_deref() == Some(&ns)
                    && c.metadata.name.as_deref() == Some("m-memo")
            })
        })
    })
    .await?;
    // who held the cluster bucket: the writers of its Lease (normally one replica throughout;
    // on this shared machine a Lease may move when a replica is starved)
    let cluster: BTreeSet<String> = server
        .write_log()
        .since(0)
        .iter()
        .filter(|w| w.resource == "leases" && w.code < 300)
        .filter(|w| w.name.as_deref() == Some("kmeta-shard-cluster"))
        .filter_map(|w| identity_of(&w.user_agent).map(str::to_owned))
        .collect();
    let writers = crate::run::rgd_writers(&server);
    assert!(
        !writers.is_empty() && writers.is_subset(&cluster),
        "RGDs served by {writers:?}, the cluster bucket held by {cluster:?}"
    );
    drop((a, b));
    server.shutdown().await;
    Ok(())
}

/// With `resyncPeriodSeconds`, each parent is resynced by the replica whose bucket holds it and
/// queued on no other: while the buckets stay put, no worker drops a key
/// (`kmeta_shard_keys_dropped_total`). Before 2026-12-08 every resync queued every cached parent
/// on every replica, and the workers dropped the others' (about half the keys here, each second).
#[tokio::test]
async fn a_resync_queues_each_parent_on_its_holder_alone() -> anyhow::Result<()> {
    let _turn = turn().await?;
    let server = TestServer::start().await?;
    let (dir, kubeconfig) = kubeconfig_and_crds(&server).await?;
    released_bucket_leases(&server, ShardHash::Mixed, "namespace").await?;
    let calls = Calls::default();
    let mut cc = notes_controller(&hook_counting(calls.clone()).await?);
    cc["spec"]["resyncPeriodSeconds"] = json!(1);
    let notes = set_up_with(&server, "compositecontrollers", cc).await?;
    let mut replicas = Vec::new();
    for name in ["kmeta-a", "kmeta-b"] {
        let metrics = free_port()?;
        let extra = [format!("--metrics-address=127.0.0.1:{metrics}")];
        replicas.push((start_with(&kubeconfig, dir.path(), name, &extra)?, metrics));
    }
    let all: Vec<&Replica> = replicas.iter().map(|(r, _)| r).collect();
    wait_balanced(&all).await?;
    converged(&server, &notes, 0, "two replicas").await?;
    // the fair split (5 and 4 of 9 buckets), then one more resync of every parent, so no key
    // queued before the last hand-over is still waiting
    let share = (BUCKETS as usize + 1).div_ceil(2);
    wait_for("the fair split of the buckets", || async {
        let mut each = Vec::new();
        for r in &all {
            each.push(held(r).await.map_or(usize::MAX, |h| h.len()));
        }
        each.iter().all(|&n| n <= share)
    })
    .await?;
    let count = |calls: &Calls| calls.lock().map(|c| c.clone()).unwrap_or_default();
    let resynced = |since: BTreeMap<String, usize>, times: usize| {
        let calls = calls.clone();
        move || {
            let now = count(&calls);
            let every = now.len() == NAMESPACES * PER_NAMESPACE
                && now
                    .iter()
                    .all(|(p, n)| *n >= since.get(p).copied().unwrap_or(0) + times);
            async move { every }
        }
    };
    wait_for("a resync of every parent", resynced(count(&calls), 1)).await?;
    // shown from the controller's first count of its parents (every 5 s), 0 until a drop
    let series = "kmeta_shard_keys_dropped_total{controller=\"notes\"}";
    for (r, metrics) in &replicas {
        wait_long(&format!("{series} on {}", r.name), || async {
            value(*metrics, series).await.is_some()
        })
        .await?;
    }
    let dropped = |metrics: u16| async move { value(metrics, series).await };
    let mut before = Vec::new();
    for (r, metrics) in &replicas {
        before.push((held(r).await, dropped(*metrics).await));
    }
    wait_for("three resyncs of every parent", resynced(count(&calls), 3)).await?;
    for ((r, metrics), (held_before, dropped_before)) in replicas.iter().zip(before) {
        let held_after = held(r).await;
        assert_eq!(
            held_after, held_before,
            "{}: buckets moved meanwhile",
            r.name
        );
        let dropped_after = dropped(*metrics).await;
        assert_eq!(
            dropped_after, dropped_before,
            "{}: keys of other replicas' parents queued and dropped during three resyncs",
            r.name
        );
    }
    drop(replicas);
    server.shutdown().await;
    Ok(())
}
