//! Chaos soak: two `kmeta run` replicas under leader election (real processes, so kill -9 and
//! SIGSTOP are real) against an in-process kmeta-apiserver whose faults and admission the bench
//! drives, two controllers — `Web` parents with a Deployment each (dynamic apply; a mutating
//! admission function injects a `sidecar` container on create) and `Conf` parents with 1–3
//! ConfigMaps (server-side apply) — continuous parent edits (some parents deleted and created
//! again), and faults drawn at random from a seeded generator. Invariants are checked as it runs
//! and at the end; every fault and every violation is printed with the seed
//! (docs/design/chaos-soak.md).
//!
//! ```sh
//! cargo build --release -p kmeta -p kmeta-apiserver
//! KMETA_SOAK_SECONDS=1800 cargo bench -p kmeta-tests --bench soak
//! ```
//!
//! `KMETA_SOAK_SECONDS` (120): how long faults are drawn; `KMETA_SOAK_SEED` (from the clock):
//! the generator's seed, to draw the same faults again; `KMETA_SOAK_PARENTS` (300): parents,
//! half of each kind; `KMETA_SOAK_SETTLE_SECONDS` (180): the bound for every parent's children
//! to be as it wants once the faults stop; `KMETA_SOAK_SHARDING=1`: three replicas with
//! `--sharding` (8 buckets), the parents spread over 30 namespaces, every child and parent write
//! checked against the Lease of its namespace's bucket, the process faults hitting a replica
//! drawn at random (kill -9, SIGSTOP, SIGTERM); with it, `KMETA_SOAK_SHARD_WATCH=server` runs
//! them with `--shard-watch=server` (kmeta-apiserver shards their watches). Exits non-zero when
//! a violation was found.

mod checks;
mod faults;
mod hook;
mod replicas;
mod shard;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use kmeta_apiserver::{AuthConfig, Operation, TestServer, UserInfo};
use kmeta_tests::{ar, crd, obj};
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};

use checks::{LeaseCheck, Orphans};
use hook::Hook;
use replicas::{LEASE, Replicas};

const NS: &str = "default";
const GROUP: &str = "soak.kmeta.dev";
const AV: &str = "soak.kmeta.dev/v1";
/// Tags the `Web` parents' app image takes.
const TAGS: &[&str] = &["v1", "v2", "v3", "v4", "v5"];
/// How long a child may stay without its parent before it counts.
const ORPHAN_BOUND: Duration = Duration::from_secs(30);

/// Everything the tasks share.
pub(crate) struct Soak {
    seed: u64,
    start: Instant,
    server: TestServer,
    hook: Arc<Hook>,
    replicas: Arc<Replicas>,
    process_fault: tokio::sync::Mutex<()>,
    violations: std::sync::Mutex<Vec<String>>,
    edits: AtomicU64,
    recreated: AtomicU64,
    stop_edits: AtomicBool,
    lease: tokio::sync::Mutex<LeaseCheck>,
    /// `--sharding` with this many buckets, else leader election.
    buckets: Option<u32>,
}

impl Soak {
    fn say(&self, line: &str) {
        println!("[{:8.1}s] {line}", self.start.elapsed().as_secs_f64());
    }

    fn violation(&self, what: &str) {
        self.say(&format!("VIOLATION (seed {}): {what}", self.seed));
        self.violations
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(what.to_owned());
    }

    fn api(&self, av: &str, kind: &str, plural: &str) -> Api<DynamicObject> {
        self.api_in(NS, av, kind, plural)
    }

    fn api_in(&self, ns: &str, av: &str, kind: &str, plural: &str) -> Api<DynamicObject> {
        Api::namespaced_with(self.server.client(), ns, &ar(av, kind, plural))
    }

    /// The namespace of parent `name` (`w-<k>` or `c-<k>`): `default`, or with sharding one of
    /// 30, by `k`.
    fn parent_ns(&self, name: &str) -> String {
        match self.buckets {
            None => NS.to_owned(),
            Some(_) => shard::namespace(name[2..].parse().unwrap_or(0)),
        }
    }

    /// The Lease's holder now.
    async fn holder(&self) -> Option<String> {
        let leases = self.api("coordination.k8s.io/v1", "Lease", "leases");
        let lease = leases.get_opt(LEASE).await.ok().flatten()?;
        lease.data["spec"]["holderIdentity"]
            .as_str()
            .filter(|h| !h.is_empty())
            .map(str::to_owned)
    }
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

fn main() -> anyhow::Result<()> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(soak())
}

/// The secrets no log line may hold: kmeta's bearer token, the hook's password, basic-auth
/// header and bearer token.
struct Secrets {
    kmeta_token: String,
    hook_password: String,
    hook_token: String,
}

impl Secrets {
    fn new(rng: &mut StdRng) -> Secrets {
        let mut s = |p: &str| format!("{p}{:032x}", rng.random::<u128>());
        Secrets {
            kmeta_token: s("soak-kmeta-"),
            hook_password: s("soak-pw-"),
            hook_token: s("soak-hook-"),
        }
    }

    fn basic(&self) -> String {
        use base64::Engine as _;
        let raw = format!("kmeta:{}", self.hook_password);
        base64::engine::general_purpose::STANDARD.encode(raw)
    }

    fn all(&self) -> Vec<(&str, String)> {
        vec![
            ("API bearer token", self.kmeta_token.clone()),
            ("hook password", self.hook_password.clone()),
            ("hook basic-auth header", self.basic()),
            ("hook bearer token", self.hook_token.clone()),
        ]
    }
}

async fn soak() -> anyhow::Result<()> {
    let seconds: u64 = env_num("KMETA_SOAK_SECONDS", 120)?;
    let parents: usize = env_num("KMETA_SOAK_PARENTS", 300)?;
    let settle = Duration::from_secs(env_num("KMETA_SOAK_SETTLE_SECONDS", 180)?);
    let seed: u64 = match std::env::var("KMETA_SOAK_SEED") {
        Ok(_) => env_num("KMETA_SOAK_SEED", 0)?,
        Err(_) => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_nanos() as u64,
    };
    let sharding = std::env::var("KMETA_SOAK_SHARDING").is_ok_and(|v| !v.is_empty() && v != "0");
    let mut rng = StdRng::seed_from_u64(seed);
    let secrets = Secrets::new(&mut rng);
    let dir = std::env::temp_dir().join(format!("kmeta-soak-{seed}"));
    std::fs::create_dir_all(&dir)?;
    let mode = match (sharding, shard::watch_mode().as_str()) {
        (true, "server") => "KMETA_SOAK_SHARDING=1 KMETA_SOAK_SHARD_WATCH=server ",
        (true, _) => "KMETA_SOAK_SHARDING=1 ",
        (false, _) => "",
    };
    println!(
        "soak: seed {seed}, {seconds} s of faults, {parents} parents; replay: {mode}KMETA_SOAK_SEED={seed} \
         KMETA_SOAK_SECONDS={seconds} KMETA_SOAK_PARENTS={parents} cargo bench -p kmeta-tests --bench soak"
    );
    println!("soak: kmeta logs in {}", dir.display());
    let buckets = sharding.then_some(shard::BUCKETS);
    let soak = setup(seed, &secrets, &dir, parents, buckets, &mut rng).await?;
    let result = run(soak.clone(), seconds, settle, &mut rng, &secrets).await;
    soak.replicas.stop_all(Duration::from_secs(10)).await;
    result?;
    // the replicas are gone: every write they made can be decided now
    let mut lease = soak.lease.lock().await;
    let records = soak.server.write_log().since(lease.next_seq);
    for v in lease.feed(records, Duration::ZERO, true) {
        soak.violation(&v);
    }
    let against = match soak.buckets {
        Some(_) => "their bucket's Lease",
        None => "the Lease holder",
    };
    println!(
        "  kmeta writes checked against {against}: {} (of them undecided: 0)",
        lease.writes_checked
    );
    match soak.buckets {
        Some(_) => shard::self_test(&soak, &mut lease).await?,
        None => self_test(&soak, &mut lease).await?,
    }
    drop(lease);
    let violations = soak
        .violations
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .len();
    anyhow::ensure!(
        violations == 0,
        "{violations} violations (seed {seed}; see above)"
    );
    println!("soak: no violation (seed {seed})");
    Ok(())
}

/// The server (with kmeta's token and the sidecar injector), the CRDs, the hook with its
/// Secret, both controllers, the parents and the two replicas.
async fn setup(
    seed: u64,
    secrets: &Secrets,
    dir: &std::path::Path,
    parents: usize,
    buckets: Option<u32>,
    rng: &mut StdRng,
) -> anyhow::Result<Arc<Soak>> {
    let auth = AuthConfig {
        tokens: vec![(
            secrets.kmeta_token.clone(),
            UserInfo::new("kmeta", &["system:masters"]),
        )],
        ..AuthConfig::default()
    };
    let server = TestServer::builder()
        .seed(seed)
        .auth(auth)
        .watch_window(100_000)
        .start()
        .await?;
    server.write_log().enable(2_000_000);
    server
        .admission()
        .mutate("apps/v1", "deployments", |o: &mut Value, op| {
            if op == Operation::Create
                && let Some(cs) = o
                    .pointer_mut("/spec/template/spec/containers")
                    .and_then(Value::as_array_mut)
                && !cs.iter().any(|c| c["name"] == "sidecar")
            {
                cs.push(json!({"name": "sidecar", "image": "registry.example/proxy:1"}));
            }
            Ok(())
        });
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        server.kubeconfig_yaml_for(Some(&secrets.kmeta_token)),
    )?;
    let hook = Arc::new(Hook {
        basic: format!("Basic {}", secrets.basic()),
        bearer: format!("Bearer {}", secrets.hook_token),
        error_rate: std::sync::Mutex::new(0.0),
        outage: AtomicBool::new(false),
        calls: AtomicU64::new(0),
        refused: AtomicU64::new(0),
        unauthorized: AtomicU64::new(0),
    });
    let base = hook::serve(hook.clone()).await?;
    install(&server, secrets, &base).await?;
    let names: &[&str] = match buckets {
        Some(_) => {
            shard::prepare(&server).await?;
            shard::REPLICAS
        }
        None => &["kmeta-a", "kmeta-b"],
    };
    let replicas = Replicas::new(dir, &kubeconfig, names, buckets);
    let soak = Arc::new(Soak {
        seed,
        start: Instant::now(),
        server,
        hook,
        replicas,
        process_fault: tokio::sync::Mutex::new(()),
        violations: std::sync::Mutex::new(Vec::new()),
        edits: AtomicU64::new(0),
        recreated: AtomicU64::new(0),
        stop_edits: AtomicBool::new(false),
        lease: tokio::sync::Mutex::new(LeaseCheck::new(buckets)),
        buckets,
    });
    for i in 0..parents {
        create_parent(&soak, &parent_name(i), rng).await?;
    }
    Ok(soak)
}

fn parent_name(i: usize) -> String {
    match i % 2 {
        0 => format!("w-{}", i / 2),
        _ => format!("c-{}", i / 2),
    }
}

/// The kind of a parent by its name: (apiVersion, kind, plural).
fn parent_kind(name: &str) -> (&'static str, &'static str, &'static str) {
    match name.starts_with("w-") {
        true => (AV, "Web", "webs"),
        false => (AV, "Conf", "confs"),
    }
}

/// A new spec for parent `name`.
fn spec(name: &str, rng: &mut StdRng) -> Value {
    match name.starts_with("w-") {
        true => json!({"tag": TAGS[rng.random_range(0..TAGS.len())],
            "replicas": rng.random_range(1..4)}),
        false => json!({"n": rng.random_range(1..4), "data": format!("d{}", rng.random::<u16>())}),
    }
}

async fn create_parent(soak: &Soak, name: &str, rng: &mut StdRng) -> anyhow::Result<()> {
    let (av, kind, plural) = parent_kind(name);
    let ns = soak.parent_ns(name);
    let p = json!({"apiVersion": av, "kind": kind, "metadata": {"name": name, "namespace": ns},
        "spec": spec(name, rng)});
    soak.api_in(&ns, av, kind, plural)
        .create(&PostParams::default(), &obj(p)?)
        .await?;
    Ok(())
}

/// kmeta's CRDs, the parents' CRDs, the hook's Secret and both CompositeControllers.
async fn install(server: &TestServer, secrets: &Secrets, base: &str) -> anyhow::Result<()> {
    let client = server.client();
    kmeta::manifest::install_crds(&client).await?;
    let crds = Api::<DynamicObject>::all_with(
        client.clone(),
        &ar(
            "apiextensions.k8s.io/v1",
            "CustomResourceDefinition",
            "customresourcedefinitions",
        ),
    );
    for (kind, plural) in [("Web", "webs"), ("Conf", "confs")] {
        crds.create(
            &PostParams::default(),
            &obj(crd(GROUP, kind, plural, true))?,
        )
        .await?;
    }
    let secret = json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "hook-credentials", "namespace": NS},
        "stringData": {"username": "kmeta", "password": secrets.hook_password,
            "token": secrets.hook_token}});
    Api::<DynamicObject>::namespaced_with(client.clone(), NS, &ar("v1", "Secret", "secrets"))
        .create(&PostParams::default(), &obj(secret)?)
        .await?;
    let ccs = Api::<DynamicObject>::all_with(
        client,
        &ar(
            "metacontroller.k8s.io/v1alpha1",
            "CompositeController",
            "compositecontrollers",
        ),
    );
    let web = json!({"apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "CompositeController",
        "metadata": {"name": "soak-web"},
        "spec": {"parentResource": {"apiVersion": AV, "resource": "webs"},
            "childResources": [{"apiVersion": "apps/v1", "resource": "deployments",
                "updateStrategy": {"method": "InPlace"}}],
            "hooks": {"sync": {"webhook": {"url": format!("{base}/web"), "timeout": "5s",
                "basicAuth": {"secretRef": {"name": "hook-credentials", "namespace": NS}}}}},
            "generateSelector": true}});
    let conf = json!({"apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "CompositeController",
        "metadata": {"name": "soak-conf",
            "annotations": {"kmeta.dev/apply-strategy": "server-side-apply"}},
        "spec": {"parentResource": {"apiVersion": AV, "resource": "confs"},
            "childResources": [{"apiVersion": "v1", "resource": "configmaps",
                "updateStrategy": {"method": "InPlace"}}],
            "hooks": {"sync": {"webhook": {"url": format!("{base}/conf"), "timeout": "5s",
                "authorization": {"secretRef": {"name": "hook-credentials", "namespace": NS,
                    "key": "token"}}}}},
            "generateSelector": true}});
    for cc in [web, conf] {
        ccs.create(&PostParams::default(), &obj(cc)?).await?;
    }
    Ok(())
}

/// Faults for `seconds`, edits meanwhile, checks every 5 s; then the faults stop and every
/// parent's children must be as it wants within `settle`.
async fn run(
    soak: Arc<Soak>,
    seconds: u64,
    settle: Duration,
    rng: &mut StdRng,
    secrets: &Secrets,
) -> anyhow::Result<()> {
    let mut edit_rng = StdRng::seed_from_u64(rng.random());
    let editor = tokio::spawn(edit(soak.clone(), edit_rng.random()));
    let mut lease = soak.lease.lock().await;
    let mut orphans = Orphans::default();
    let mut drawn: BTreeMap<String, u64> = BTreeMap::new();
    let end = Instant::now() + Duration::from_secs(seconds);
    let mut next_fault = Instant::now() + Duration::from_secs(20);
    let mut next_check = Instant::now();
    let mut faults = Vec::new();
    let mut n = 0u64;
    while Instant::now() < end {
        for note in soak.replicas.supervise().await? {
            soak.say(&note);
        }
        if Instant::now() >= next_fault {
            n += 1;
            let d = faults::draw(rng, soak.buckets.is_some());
            soak.say(&format!(
                "fault #{n} (seed {}): {}",
                soak.seed,
                d.describe()
            ));
            *drawn.entry(format!("{:?}", d.fault)).or_default() += 1;
            faults.push(tokio::spawn(faults::apply(soak.clone(), d)));
            next_fault = Instant::now() + Duration::from_millis(rng.random_range(2_000..10_000));
        }
        if Instant::now() >= next_check {
            check(&soak, &mut lease, &mut orphans, secrets, false).await?;
            next_check = Instant::now() + Duration::from_secs(5);
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    soak.say("faults stop: waiting for the drawn ones to end");
    for f in faults {
        f.await??;
    }
    soak.server.faults().clear();
    soak.replicas.heal().await?;
    soak.stop_edits.store(true, Ordering::SeqCst);
    editor.await??;
    let settled = settle_phase(&soak, settle, &mut lease, &mut orphans, secrets).await?;
    summary(&soak, &drawn, &lease, settled);
    Ok(())
}

/// Until every parent's children are as it wants (or `bound` passes): the time it took.
async fn settle_phase(
    soak: &Soak,
    bound: Duration,
    lease: &mut LeaseCheck,
    orphans: &mut Orphans,
    secrets: &Secrets,
) -> anyhow::Result<Option<Duration>> {
    let start = Instant::now();
    soak.say(&format!(
        "edits stop: every parent's children within {} s",
        bound.as_secs()
    ));
    loop {
        for note in soak.replicas.supervise().await? {
            soak.say(&note);
        }
        let last = start.elapsed() >= bound;
        let done = check(soak, lease, orphans, secrets, last).await?;
        if done {
            return Ok(Some(start.elapsed()));
        }
        if last {
            return Ok(None);
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// One look: Lease check of the new log records, children without parent, sidecars,
/// credentials; with `last`, whatever still differs from what the parents want is a violation.
/// Whether everything is as the parents want.
async fn check(
    soak: &Soak,
    lease: &mut LeaseCheck,
    orphans: &mut Orphans,
    secrets: &Secrets,
    last: bool,
) -> anyhow::Result<bool> {
    let records = soak.server.write_log().since(lease.next_seq);
    for v in lease.feed(records, Duration::from_secs(5), last) {
        soak.violation(&v);
    }
    let list = |av: &'static str, kind: &'static str, plural: &'static str| async move {
        let items = Api::<DynamicObject>::all_with(soak.server.client(), &ar(av, kind, plural))
            .list(&ListParams::default())
            .await?
            .items;
        items
            .into_iter()
            .map(serde_json::to_value)
            .collect::<Result<Vec<Value>, _>>()
            .map_err(anyhow::Error::from)
    };
    // children first: a child listed before its parent was created is not taken for an orphan
    let deps = list("apps/v1", "Deployment", "deployments").await?;
    let cms = list("v1", "ConfigMap", "configmaps").await?;
    let webs = list(AV, "Web", "webs").await?;
    let confs = list(AV, "Conf", "confs").await?;
    let look = checks::look(&webs, &confs, &deps, &cms);
    for v in orphans.update(&look.orphans, ORPHAN_BOUND) {
        soak.violation(&v);
    }
    for v in &look.sidecar_lost {
        soak.violation(&format!("sidecar lost: {v}"));
    }
    for v in checks::credentials_in(&soak.replicas.logs(), &secrets.all()) {
        soak.violation(&format!("credential in a log line: {v}"));
    }
    if soak.hook.unauthorized.swap(0, Ordering::Relaxed) > 0 {
        soak.violation("hook called without its credentials");
    }
    if last {
        for v in checks::untriggered(&webs)
            .into_iter()
            .chain(checks::untriggered(&confs))
        {
            soak.violation(&format!(
                "a sync record of a write without its trigger: {v}"
            ));
        }
        for v in &look.unconverged {
            soak.violation(&format!("not as its parent wants after the bound: {v}"));
        }
        if !look.orphans.is_empty() {
            soak.violation(&format!(
                "children without parent at the end: {:?}",
                look.orphans
            ));
        }
    }
    Ok(look.unconverged.is_empty() && look.orphans.is_empty())
}

/// Edits a random parent every 100 ms; one edit in 20 deletes the parent and creates it again.
async fn edit(soak: Arc<Soak>, seed: u64) -> anyhow::Result<()> {
    let mut rng = StdRng::seed_from_u64(seed);
    let parents = Api::<DynamicObject>::all_with(soak.server.client(), &ar(AV, "Web", "webs"))
        .list(&ListParams::default())
        .await?
        .items
        .len()
        * 2;
    while !soak.stop_edits.load(Ordering::SeqCst) {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let name = parent_name(rng.random_range(0..parents.max(1)));
        let (av, kind, plural) = parent_kind(&name);
        let api = soak.api_in(&soak.parent_ns(&name), av, kind, plural);
        if rng.random_range(0..20) == 0 {
            // the server collects the children of the deleted parent at once
            let _ = api.delete(&name, &DeleteParams::default()).await;
            match create_parent(&soak, &name, &mut rng).await {
                Ok(()) => soak.recreated.fetch_add(1, Ordering::Relaxed),
                Err(e) => {
                    soak.say(&format!("  (creating {name} again failed: {e})"));
                    continue;
                }
            };
            continue;
        }
        let patch = json!({"spec": spec(&name, &mut rng)});
        match api
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => soak.edits.fetch_add(1, Ordering::Relaxed),
            Err(e) => {
                soak.say(&format!("  (edit of {name} failed: {e})"));
                continue;
            }
        };
    }
    Ok(())
}

fn summary(
    soak: &Soak,
    drawn: &BTreeMap<String, u64>,
    lease: &LeaseCheck,
    settled: Option<Duration>,
) {
    let violations = soak
        .violations
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .len();
    let counters = soak.server.counters();
    println!("soak summary (seed {}):", soak.seed);
    println!("  faults drawn: {drawn:?}");
    println!(
        "  parent edits {}, parents deleted and created again {}",
        soak.edits.load(Ordering::Relaxed),
        soak.recreated.load(Ordering::Relaxed)
    );
    println!(
        "  hook calls {} (refused by injected faults {}); API requests {}, writes {}",
        soak.hook.calls.load(Ordering::Relaxed),
        soak.hook.refused.load(Ordering::Relaxed),
        counters.total(),
        counters.writes()
    );
    match soak.buckets {
        Some(b) => println!(
            "  kmeta child and parent writes checked against their bucket's Lease ({b} buckets): \
             {} (other kmeta writes, not checked: {}); bucket Lease hand-overs: {}",
            lease.writes_checked, lease.writes_unscoped, lease.handovers
        ),
        None => println!(
            "  kmeta writes checked against the Lease holder: {}",
            lease.writes_checked
        ),
    }
    match settled {
        Some(d) => println!(
            "  converged {:.1} s after the faults stopped",
            d.as_secs_f64()
        ),
        None => println!("  NOT converged within the bound"),
    }
    println!("  violations: {violations}");
}

/// The Lease check can fail: a write naming an instance that never held the Lease, made after
/// the replicas stopped, must be the one violation it reports.
async fn self_test(soak: &Soak, lease: &mut LeaseCheck) -> anyhow::Result<()> {
    let mut config = kube::Config::new(soak.server.url().parse()?);
    config.auth_info.token = soak.server.admin_token().map(|t| t.to_owned().into());
    config.headers.push((
        http::header::USER_AGENT,
        http::HeaderValue::from_static("kmeta/self-test (kmeta-intruder)"),
    ));
    let cms = Api::<DynamicObject>::namespaced_with(
        kube::Client::try_from(config)?,
        NS,
        &ar("v1", "ConfigMap", "configmaps"),
    );
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "intruder"}});
    cms.create(&PostParams::default(), &obj(cm)?).await?;
    let records = soak.server.write_log().since(lease.next_seq);
    let found = lease.feed(records, Duration::ZERO, true);
    anyhow::ensure!(
        found.len() == 1 && found[0].contains("kmeta-intruder"),
        "the Lease check's self-test: a write by an instance that never held the Lease gave {found:?}"
    );
    println!(
        "  self-test: the Lease check reports a write by a non-holder: {}",
        found[0]
    );
    Ok(())
}
