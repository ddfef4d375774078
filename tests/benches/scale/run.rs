//! The scenarios: the three processes, snapshots of their counters and usage, and the printed
//! figures beside their bounds.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use futures::{StreamExt, TryStreamExt};
use kmeta_apiserver::Counters;
use kmeta_tests::procs::{Proc, Usage, bin, free_port, histogram_quantile, http_get};
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, WatchEvent, WatchParams};
use serde_json::{Value, json};

use super::{
    AV, CC, Case, DEADLINE, POLL, Server, Shape, THINGS, check_as_written, child, floor, hook,
    in_ns, shard,
};

/// How long the hook must have had no call for a converge's work to count as done: 2 s (with
/// [`POLL`] at 0.5 s, four polls without a call).
const QUIET: Duration = Duration::from_secs(2);

/// A `kmeta run` process.
pub(crate) struct Controller {
    pub(crate) proc: Proc,
    metrics: u16,
    /// Its health port (`/readyz?verbose` names the shard buckets it holds).
    pub(crate) health: u16,
    /// `kmeta-<i>` (its `POD_NAME`), or `kmeta` when it runs alone.
    pub(crate) name: String,
}

impl Controller {
    /// Replica `replica` of the case's `kmeta run` processes, started with `--sharding` when
    /// the case has more than one; returns once it is ready.
    async fn start(
        dir: &Path,
        server: &Server,
        case: &Case,
        replica: usize,
    ) -> anyhow::Result<Controller> {
        Controller::start_with(dir, server, case, replica, &bin("kmeta")?, &[]).await
    }

    /// [`Controller::start`] of the `kmeta` binary at `binary`, with `extra` arguments.
    pub(crate) async fn start_with(
        dir: &Path,
        server: &Server,
        case: &Case,
        replica: usize,
        binary: &Path,
        extra: &[String],
    ) -> anyhow::Result<Controller> {
        let (metrics, health) = (free_port()?, free_port()?);
        let mut cmd = Command::new(binary);
        cmd.args(["run", "--kubeconfig"])
            .arg(&server.kubeconfig)
            .arg(format!("--metrics-address=127.0.0.1:{metrics}"))
            .arg(format!("--health-probe-bind-address=127.0.0.1:{health}"))
            .arg(format!("--workers={}", case.workers))
            .arg(format!("--client-go-qps={}", case.qps))
            .arg("--discovery-interval=1s")
            .args(extra);
        // a sharded replica's bucket moves (acquired, handed over, listed) are logged at info
        cmd.arg(match case.replicas {
            1 => "--log-level=warn",
            _ => "--log-level=warn,kmeta::coord=info",
        });
        let name = match case.replicas {
            1 => "kmeta".to_owned(),
            _ => format!("kmeta-{replica}"),
        };
        if let Some(t) = case.threads {
            cmd.env("TOKIO_WORKER_THREADS", t.to_string());
        }
        if case.replicas > 1 {
            cmd.args(shard::flags(case.buckets)).env("POD_NAME", &name);
            cmd.arg(format!("--shard-watch={}", shard::watch_mode()));
        }
        let proc = Proc::spawn("kmeta run", cmd, &dir.join(format!("{name}.log")))?;
        // a profiler can attach to it: `perf record -e cpu-clock -p <pid>`
        println!("    ({name} run: pid {})", proc.pid());
        let start = Instant::now();
        while http_get(health, "/readyz").await.map(|r| r.0) != Some(200) {
            if start.elapsed() > Duration::from_secs(300) {
                bail!("kmeta run not ready within 300 s (log: {})", dir.display());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(Controller {
            proc,
            metrics,
            health,
            name,
        })
    }

    pub(crate) async fn metrics(&self) -> String {
        http_get(self.metrics, "/metrics")
            .await
            .map(|r| r.1)
            .unwrap_or_default()
    }
}

/// Server, hook and (once started) the controller's replicas of one case.
pub(crate) struct Rig {
    pub(crate) server: Server,
    hook: Proc,
    pub(crate) hook_port: u16,
    pub(crate) ctrl: Vec<Controller>,
}

/// What each process had done at one moment.
pub(crate) struct Snap {
    pub(crate) at: Instant,
    pub(crate) counters: Counters,
    pub(crate) hook_calls: u64,
    /// Each live replica's, in the order of [`Rig::ctrl`].
    pub(crate) ctrl: Vec<Usage>,
    server: Usage,
    hook: Usage,
}

impl Snap {
    /// Each replica's CPU seconds since `s0` (of the same replicas; one not running then
    /// counts from 0).
    pub(crate) fn ctrl_cpu(&self, s0: &Snap) -> Vec<f64> {
        self.ctrl
            .iter()
            .enumerate()
            .map(|(i, b)| b.cpu_s - s0.ctrl.get(i).map_or(0.0, |a| a.cpu_s))
            .collect()
    }
}

impl Rig {
    pub(crate) async fn new(dir: &Path, case: &Case) -> anyhow::Result<Rig> {
        let server = Server::start(dir, "server").await?;
        let (hook, hook_port) = hook::spawn(dir, case).await?;
        super::install(&server, case, &format!("http://127.0.0.1:{hook_port}/sync")).await?;
        server.create_namespaces(case).await?;
        Ok(Rig {
            server,
            hook,
            hook_port,
            ctrl: Vec::new(),
        })
    }

    /// Starts the case's replicas; with more than one, returns once they hold every shard
    /// bucket between them.
    pub(crate) async fn start_controllers(
        &mut self,
        dir: &Path,
        case: &Case,
    ) -> anyhow::Result<()> {
        for i in 0..case.replicas {
            let c = Controller::start(dir, &self.server, case, i).await?;
            self.ctrl.push(c);
        }
        if case.replicas > 1 {
            shard::wait_split(&self.ctrl, case).await?;
        }
        Ok(())
    }

    pub(crate) async fn snap(&self) -> anyhow::Result<Snap> {
        Ok(Snap {
            at: Instant::now(),
            counters: self.server.counters().await?,
            hook_calls: hook::calls(self.hook_port).await?,
            ctrl: self
                .ctrl
                .iter()
                .map(|c| c.proc.usage())
                .collect::<anyhow::Result<_>>()?,
            server: self.server.proc.usage()?,
            hook: self.hook.usage()?,
        })
    }

    /// Waits until the hook has had no call for [`QUIET`] (every sync the converge set off,
    /// including those after the parents' status showed their children, has run), then snaps.
    pub(crate) async fn snap_when_quiet(&self) -> anyhow::Result<Snap> {
        let start = Instant::now();
        let (mut calls, mut since) = (hook::calls(self.hook_port).await?, Instant::now());
        while since.elapsed() < QUIET {
            if start.elapsed() > DEADLINE {
                bail!("the hook never went quiet ({calls} calls)");
            }
            tokio::time::sleep(POLL).await;
            let now = hook::calls(self.hook_port).await?;
            if now != calls {
                (calls, since) = (now, Instant::now());
            }
        }
        self.snap().await
    }

    async fn wait_calls(&self, at_least: u64) -> anyhow::Result<()> {
        let start = Instant::now();
        while hook::calls(self.hook_port).await? < at_least {
            if start.elapsed() > DEADLINE {
                bail!("hook calls did not reach {at_least}");
            }
            tokio::time::sleep(POLL).await;
        }
        Ok(())
    }
}

pub(crate) fn parents(case: &Case) -> Vec<Value> {
    (0..case.parents)
        .map(|i| {
            json!({"apiVersion": AV, "kind": "Thing",
                   "metadata": {"name": format!("p-{i}"), "namespace": case.ns_of(i)}, "spec": {}})
        })
        .collect()
}

/// Waits until every parent reports its M children (with `v`: children of the parent's
/// `spec.v`, see the hook): one list, then a watch of the parents (a relist only after 410
/// Gone), so the bench's own load on the server and on its CPU stays small beside the
/// controller's (a list of every parent every half second cost the shared cores several
/// CPU-seconds at 10 000 parents). The bench's own requests, so they can be taken out of the
/// controller's, and when each parent was first seen converged (its last time, if it went back).
pub(crate) async fn wait_converged(
    server: &Server,
    case: &Case,
    v: Option<u64>,
) -> anyhow::Result<(Own, HashMap<String, Instant>)> {
    wait_converged_on(server.api_all(AV, "Thing", "things"), *case, v).await
}

/// [`wait_converged`] with the parents' API given (owned, for a task of its own).
pub(crate) async fn wait_converged_on(
    things: Api<DynamicObject>,
    case: Case,
    v: Option<u64>,
) -> anyhow::Result<(Own, HashMap<String, Instant>)> {
    let (want, want_v) = (json!(case.children), v.map(|v| json!(v)));
    let converged = |p: &DynamicObject| {
        p.data.pointer("/status/children") == Some(&want)
            && (want_v.is_none() || p.data.pointer("/status/v") == want_v.as_ref())
    };
    let start = Instant::now();
    let mut own = Own::default();
    loop {
        own.lists += 1;
        let list = things.list(&ListParams::default()).await?;
        let now = Instant::now();
        let mut done: HashMap<String, Instant> = list
            .items
            .iter()
            .filter(|p| converged(p))
            .filter_map(|p| Some((p.metadata.name.clone()?, now)))
            .collect();
        let mut rv = list.metadata.resource_version.unwrap_or_default();
        'watch: loop {
            if done.len() == case.parents {
                return Ok((own, done));
            }
            if start.elapsed() > DEADLINE {
                bail!("{} of {} parents converged", done.len(), case.parents);
            }
            own.watches += 1;
            let params = WatchParams::default().timeout(60);
            let mut events = things.watch(&params, &rv).await?.boxed();
            while let Some(event) = events.try_next().await? {
                let p = match event {
                    WatchEvent::Added(p) | WatchEvent::Modified(p) | WatchEvent::Deleted(p) => p,
                    WatchEvent::Bookmark(b) => {
                        rv = b.metadata.resource_version;
                        continue;
                    }
                    WatchEvent::Error(e) if e.code == 410 => break 'watch,
                    WatchEvent::Error(e) => bail!("watch of the parents failed: {e:?}"),
                };
                if let Some(v) = &p.metadata.resource_version {
                    rv.clone_from(v);
                }
                let Some(name) = p.metadata.name.clone() else {
                    continue;
                };
                match converged(&p) {
                    true => done.entry(name).or_insert_with(Instant::now),
                    false => {
                        done.remove(&name);
                        continue;
                    }
                };
                if done.len() == case.parents {
                    return Ok((own, done));
                }
            }
        }
    }
}

/// The bench's own requests while it waited.
#[derive(Default)]
pub(crate) struct Own {
    lists: u64,
    watches: u64,
}

impl Own {
    /// Takes them out of `c`.
    pub(crate) fn remove_from(&self, c: &mut Counters) {
        without_own(c, "list", "things", self.lists);
        without_own(c, "watch", "things", self.watches);
    }
}

/// The floors of both shapes, [`Shape::AsWritten`] first.
async fn floors(dir: &Path, case: &Case) -> anyhow::Result<(Duration, Duration)> {
    let written = floor(dir, case, Shape::AsWritten).await?.0;
    let plain = floor(dir, case, Shape::Plain).await?.0;
    Ok((written, plain))
}

/// `wall` against the floor measured just before and just after it: the shared machine's speed
/// drifts by a quarter within minutes (the same floor took 5.7 s and 8.5 s in one run), so the
/// ratio is taken to the mean of the two, and both are printed.
fn against_floor(wall: f64, before: Duration, after: Duration) -> String {
    let (b, a) = (before.as_secs_f64(), after.as_secs_f64());
    let mean = (a + b) / 2.0;
    format!(
        "{:.2}× the floor ({mean:.2} s: {b:.2} s before, {a:.2} s after; {:.2}–{:.2}× of either)",
        wall / mean,
        wall / a.max(b),
        wall / a.min(b)
    )
}

/// Takes `n` successful `verb` requests on `resource` (the bench's own) out of `c`.
pub(crate) fn without_own(c: &mut Counters, verb: &str, resource: &str, n: u64) {
    for ((v, r, code), count) in c.by_key.iter_mut() {
        if v == verb && r == resource && *code < 300 {
            *count = count.saturating_sub(n);
            return;
        }
    }
}

/// The requests on `resource` alone.
fn only(c: &Counters, resource: &str) -> Counters {
    Counters {
        by_key: c
            .by_key
            .iter()
            .filter(|((_, r, _), _)| r == resource)
            .map(|(k, n)| (k.clone(), *n))
            .collect(),
    }
}

pub(crate) fn by_verb(c: &Counters) -> String {
    let mut verbs: BTreeMap<&str, u64> = BTreeMap::new();
    for ((v, _, _), n) in &c.by_key {
        *verbs.entry(v.as_str()).or_default() += n;
    }
    let list: Vec<String> = verbs.iter().map(|(v, n)| format!("{v} {n}")).collect();
    format!("{} requests ({})", c.total(), list.join(", "))
}

/// `total` alone for one replica, else `total (a, b, c)`.
fn each(values: &[f64], total: f64, decimals: usize) -> String {
    match values {
        [_] => format!("{total:.decimals$}"),
        _ => {
            let each: Vec<String> = values.iter().map(|v| format!("{v:.decimals$}")).collect();
            format!("{total:.decimals$} ({})", each.join(", "))
        }
    }
}

fn print_processes(s0: &Snap, s1: &Snap) {
    let cpu = s1.ctrl_cpu(s0);
    let rss: Vec<f64> = s1.ctrl.iter().map(|u| u.hwm_mib).collect();
    let (ctrl, peak) = match cpu.len() {
        1 => ("controller", "controller".to_owned()),
        n => ("controllers (sum, each)", format!("{n} replicas (each)")),
    };
    println!(
        "    CPU seconds: {ctrl} {}, server {:.2}, hook {:.2}; peak RSS MiB: {peak} {}, server {:.0}, hook {:.0}",
        each(&cpu, cpu.iter().sum(), 2),
        s1.server.cpu_s - s0.server.cpu_s,
        s1.hook.cpu_s - s0.hook.cpu_s,
        match rss.len() {
            1 => format!("{:.0}", rss[0]),
            _ => rss
                .iter()
                .map(|r| format!("{r:.0}"))
                .collect::<Vec<_>>()
                .join(", "),
        },
        s1.server.hwm_mib,
        s1.hook.hwm_mib
    );
}

/// Sync time quantiles over every replica's histogram.
async fn print_sync_times(ctrl: &[Controller]) {
    if ctrl.is_empty() {
        return;
    }
    let mut m = String::new();
    for c in ctrl {
        m.push_str(&c.metrics().await);
        m.push('\n');
    }
    let q = |q| {
        histogram_quantile(&m, "kmeta_reconcile_duration_seconds", q)
            .map_or("-".to_owned(), |s| format!("{:.1} ms", s * 1000.0))
    };
    println!(
        "    sync time p50 {}, p99 {} (kmeta_reconcile_duration_seconds, interpolated in its buckets)",
        q(0.5),
        q(0.99)
    );
}

/// Writes, hook calls and the bounds a converge or adoption is held to: a new parent needs two
/// syncs (the first sees no children and reports 0, the second reports M), an adopting one one.
fn print_work(case: &Case, d: &Counters, s0: &Snap, s1: &Snap, syncs_per_parent: usize) {
    let plural = case.kind.plural();
    let calls = s1.hook_calls - s0.hook_calls;
    let min_calls = case.parents * syncs_per_parent;
    println!(
        "    controller: {}{}",
        by_verb(d),
        match only(d, "leases") {
            l if l.total() == 0 => String::new(),
            l => format!("; of them on Leases {}", by_verb(&l)),
        }
    );
    println!(
        "    writes: children {} (bound {} = one per child), parent status {} (bound {min_calls} = one per sync)",
        d.writes_to(plural),
        case.objects(),
        d.writes_to("things/status"),
    );
    let latency_bound = min_calls as f64 * case.latency_ms as f64 / 1000.0 / case.workers as f64;
    println!(
        "    hook calls {calls} (bound {min_calls} = {syncs_per_parent} per parent; bound × latency / workers = {latency_bound:.2} s)"
    );
}

/// What one converge measured, for [`shard::side_by_side`].
pub(crate) struct Run {
    pub(crate) replicas: usize,
    /// `TOKIO_WORKER_THREADS` of each replica, when set.
    pub(crate) threads: Option<usize>,
    /// `--shard-buckets` of the replicas (when more than one).
    pub(crate) buckets: u32,
    /// Each controller's CPU seconds until the hook went quiet.
    pub(crate) cpu_quiet: Vec<f64>,
    /// Converge wall time, seconds.
    pub(crate) wall: f64,
    /// Each replica's CPU seconds during the converge.
    pub(crate) cpu: Vec<f64>,
    /// Each replica's peak RSS, MiB.
    pub(crate) rss: Vec<f64>,
    /// The API server's CPU seconds during the converge.
    pub(crate) server_cpu: f64,
}

/// N parents created with the controller running, until each reports its M children; then,
/// with `failover` and more than one replica, [`shard::failover`].
pub(crate) async fn converge(
    dir: &Path,
    case: &Case,
    resync_s: Option<u64>,
    failover: bool,
) -> anyhow::Result<Run> {
    let before = match case.qps > 0.0 {
        true => None,
        false => Some(floors(dir, case).await?),
    };
    let mut rig = Rig::new(dir, case).await?;
    rig.start_controllers(dir, case).await?;
    let s0 = rig.snap().await?;
    // the two marks bracket the work counted "until quiet": a profiler driven by the bench's
    // output starts and stops at them (docs/performance.md, instructions per replica)
    println!("    (mark: creating the parents)");
    rig.server.create_all(THINGS, parents(case)).await?;
    let (own, _) = wait_converged(&rig.server, case, None).await?;
    let s1 = rig.snap().await?;
    // the syncs the parents' own status writes set off (a hook sees its committed status) may
    // run after every status shows the children: the work is counted until they have run
    let quiet = rig.snap_when_quiet().await?;
    println!("    (mark: quiet)");
    let mut d = s1.counters.since(&s0.counters);
    without_own(&mut d, "create", "things", case.parents as u64);
    own.remove_from(&mut d);
    let wall = (s1.at - s0.at).as_secs_f64();
    match before {
        Some(before) => {
            let after = floors(dir, case).await?;
            check_as_written(&rig.server, case).await?;
            println!(
                "  converge: {wall:.2} s — {} (as kmeta writes them); {} (plain)",
                against_floor(wall, before.0, after.0),
                against_floor(wall, before.1, after.1)
            );
        }
        None => print_qps(case, wall, &d),
    }
    print_work(case, &d, &s0, &s1, 2);
    let kinds = hook::sync_kinds(rig.hook_port).await?;
    println!(
        "    until quiet ({:.2} s after the start; no hook call for {} s): hook calls {}, by (children observed, parent's status.children): {}; controller CPU seconds {:.2}",
        (quiet.at - s0.at).as_secs_f64() - QUIET.as_secs_f64(),
        QUIET.as_secs(),
        quiet.hook_calls - s0.hook_calls,
        kinds.lines().collect::<Vec<_>>().join("; "),
        quiet.ctrl_cpu(&s0).iter().sum::<f64>()
    );
    print_sync_times(&rig.ctrl).await;
    print_processes(&s0, &s1);
    let cpu = s1.ctrl_cpu(&s0);
    println!(
        "    controller CPU per child: {:.0} µs",
        cpu.iter().sum::<f64>() * 1e6 / case.objects() as f64
    );
    print_memory(&rig, case, &s1).await?;
    if failover && case.replicas > 1 {
        shard::failover(&mut rig, case).await?;
    }
    if let Some(r) = resync_s {
        steady(&rig, case, r).await?;
    }
    Ok(Run {
        replicas: case.replicas,
        threads: case.threads,
        buckets: case.buckets,
        wall,
        cpu,
        cpu_quiet: quiet.ctrl_cpu(&s0),
        rss: s1.ctrl.iter().map(|u| u.hwm_mib).collect(),
        server_cpu: s1.server.cpu_s - s0.server.cpu_s,
    })
}

/// The controller's peak RSS against its bound (docs/design/sizing-bench.md): twice the JSON of
/// what it caches (every parent and child as the server serves them, managedFields included)
/// plus a 30 MiB base.
async fn print_memory(rig: &Rig, case: &Case, s1: &Snap) -> anyhow::Result<()> {
    let kind = case.kind;
    let mut bytes = 0usize;
    for api in [
        rig.server.api_all(AV, "Thing", "things"),
        rig.server
            .api_all(kind.api_version(), kind.kind(), kind.plural()),
    ] {
        // in pages, as a client of a large cluster would: a single list of a million objects
        // would have the server build it whole and this process hold it whole
        let mut params = ListParams::default().limit(500);
        loop {
            let page = api.list(&params).await?;
            for item in &page.items {
                bytes += serde_json::to_vec(item)?.len();
            }
            match page.metadata.continue_ {
                Some(c) if !c.is_empty() => params = params.continue_token(&c),
                _ => break,
            }
        }
    }
    let json_mib = bytes as f64 / (1024.0 * 1024.0);
    let bound = 2.0 * json_mib + 30.0;
    // every replica caches every parent and child (watches are not split), so each one is held
    // to the whole bound
    let peak = s1.ctrl.iter().map(|u| u.hwm_mib).fold(0.0, f64::max);
    println!(
        "    memory: controller peak RSS {peak:.0} MiB{}; JSON of the cached parents and children {json_mib:.0} MiB; bound 2 × JSON + 30 MiB = {bound:.0} MiB ({:.2}× of it)",
        match s1.ctrl.len() {
            1 => "",
            _ => " (the largest replica's)",
        },
        peak / bound
    );
    Ok(())
}

/// kmeta's default `--client-go-burst`: that many requests go before the bucket limits.
const BURST: f64 = 10.0;

fn print_qps(case: &Case, wall: f64, d: &Counters) {
    let (requests, writes) = (d.total() as f64, d.writes() as f64);
    let bound = (requests - BURST).max(0.0) / case.qps;
    println!(
        "  converge: {wall:.2} s; bound (requests − burst) / QPS = {bound:.2} s ({:.3}× of it); writes / QPS = {:.2} s ({:.3}× of it)",
        wall / bound,
        writes / case.qps,
        wall / (writes / case.qps)
    );
}

/// The bursts of `arrivals` (sorted, µs) separated by pauses over `gap` µs: (calls, first to
/// last arrival in µs) each.
fn bursts(arrivals: &[u64], gap: u64) -> Vec<(usize, u64)> {
    let mut out: Vec<(usize, u64, u64)> = Vec::new();
    for &t in arrivals {
        match out.last_mut() {
            Some((calls, _, last)) if t.saturating_sub(*last) <= gap => {
                *calls += 1;
                *last = (*last).max(t);
            }
            _ => out.push((1, t, t)),
        }
    }
    out.into_iter()
        .map(|(calls, first, last)| (calls, last.saturating_sub(first)))
        .collect()
}

/// Two full resyncs of every parent with nothing to change.
async fn steady(rig: &Rig, case: &Case, resync_s: u64) -> anyhow::Result<()> {
    let ccs = rig.server.composite_controllers();
    let patch = json!({"spec": {"resyncPeriodSeconds": resync_s}});
    ccs.patch(CC, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    let n = case.parents as u64;
    if rig.ctrl.len() > 1 {
        println!("  steady with {} live replicas", rig.ctrl.len());
    }
    // the first full round after the change (the controller rebuilt, or its first resync)
    rig.wait_calls(hook::calls(rig.hook_port).await? + n)
        .await?;
    let s0 = rig.snap().await?;
    rig.wait_calls(s0.hook_calls + 2 * n).await?;
    let s1 = rig.snap().await?;
    let arrived = hook::arrivals(rig.hook_port, s0.hook_calls).await?;
    let gap = Duration::from_secs(resync_s).as_micros() as u64 / 2;
    let rounds: Vec<String> = bursts(&arrived, gap)
        .iter()
        .map(|(calls, took)| format!("{calls} calls in {:.2} s", *took as f64 / 1e6))
        .collect();
    let d = s1.counters.since(&s0.counters);
    let cpu: f64 = s1.ctrl_cpu(&s0).iter().sum();
    println!(
        "  steady: two resyncs of {} parents (resyncPeriodSeconds {resync_s}) in {:.2} s (bound 2 × {resync_s} s): writes {} (bound 0), hook calls {} (bound {})",
        case.parents,
        (s1.at - s0.at).as_secs_f64(),
        d.writes(),
        s1.hook_calls - s0.hook_calls,
        2 * n
    );
    println!(
        "    each resync (the hook's calls grouped by pauses over half the period; first to last arrival): {}",
        rounds.join(", ")
    );
    println!(
        "    controller CPU {cpu:.2} s = {:.0} µs per parent per resync; controller {}; hook CPU {:.2} s, server CPU {:.2} s",
        cpu * 1e6 / (2 * n) as f64,
        by_verb(&d),
        s1.hook.cpu_s - s0.hook.cpu_s,
        s1.server.cpu_s - s0.server.cpu_s
    );
    steady_with_drift(rig, case).await
}

/// The steady scenario's variant with drift: the children under drift policy `Report`, child 0
/// of every parent edited by another writer (drift kmeta leaves alone and reports), then two
/// full resyncs: each finds the same drift, which is no news, so 0 writes (before the sync
/// record kept children left alone as news, one status write per parent per resync).
async fn steady_with_drift(rig: &Rig, case: &Case) -> anyhow::Result<()> {
    let ccs = rig.server.composite_controllers();
    let mut children = ccs.get(CC).await?.data["spec"]["childResources"].clone();
    for c in children.as_array_mut().into_iter().flatten() {
        c["driftPolicy"] = json!("Report");
    }
    let patch = json!({"spec": {"childResources": children}});
    ccs.patch(CC, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    let n = case.parents as u64;
    // a full round with the new policy (the controller rebuilt), then the edits, then a round
    // that finds them (its record is news: one status write per parent) and one more to be sure
    rig.wait_calls(hook::calls(rig.hook_port).await? + n)
        .await?;
    let edited = Instant::now();
    drift_all(rig, case).await?;
    let calls = hook::calls(rig.hook_port).await?;
    rig.wait_calls(calls + 2 * n).await?;
    let s0 = rig.snap().await?;
    rig.wait_calls(s0.hook_calls + 2 * n).await?;
    let s1 = rig.snap().await?;
    let d = s1.counters.since(&s0.counters);
    println!(
        "  steady with drift: child 0 of each of {} parents edited by another writer (drift policy Report; edits and the round after them took {:.2} s); two resyncs in {:.2} s: writes {} (bound 0), hook calls {}; controller {}",
        case.parents,
        (s0.at - edited).as_secs_f64(),
        (s1.at - s0.at).as_secs_f64(),
        d.writes(),
        s1.hook_calls - s0.hook_calls,
        by_verb(&d)
    );
    Ok(())
}

/// Another writer edits child 0 of every parent in a field the hook sets (a ConfigMap's
/// `data.i`, a Deployment's `spec.replicas`), [`super::WRITERS`] at a time.
async fn drift_all(rig: &Rig, case: &Case) -> anyhow::Result<()> {
    let kind = case.kind;
    let patch = match kind {
        super::Kind::ConfigMap => json!({"data": {"i": "edited"}}),
        super::Kind::Deployment => json!({"spec": {"replicas": 3}}),
    };
    futures::stream::iter(0..case.parents)
        .map(|i| {
            let api = rig.server.api_in(
                &case.ns_of(i),
                kind.api_version(),
                kind.kind(),
                kind.plural(),
            );
            let patch = &patch;
            async move {
                let params = PatchParams {
                    field_manager: Some("another-writer".into()),
                    ..PatchParams::default()
                };
                api.patch(&format!("p-{i}-0"), &params, &Patch::Merge(patch))
                    .await?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(super::WRITERS)
        .try_collect()
        .await
}

/// N × M orphans and their parents exist before the controller starts.
pub(crate) async fn adopt(dir: &Path, case: &Case) -> anyhow::Result<()> {
    let (before, _) = floor(dir, case, Shape::Plain).await?;
    let mut rig = Rig::new(dir, case).await?;
    let created = rig.server.create_all(THINGS, parents(case)).await?;
    let mut orphans = Vec::with_capacity(case.objects());
    for p in &created {
        let meta = |f: &str| p.pointer(&format!("/metadata/{f}")).and_then(Value::as_str);
        let (Some(name), Some(uid), Some(ns)) = (meta("name"), meta("uid"), meta("namespace"))
        else {
            bail!("created parent without name, uid or namespace: {p}");
        };
        for i in 0..case.children {
            let labels = json!({"controller-uid": uid});
            orphans.push(in_ns(child(case.kind, name, i, labels), ns));
        }
    }
    rig.server
        .create_all(case.kind.resource(), orphans)
        .await
        .context("creating orphans")?;
    let s0 = rig.snap().await?;
    rig.start_controllers(dir, case).await?;
    let ready = s0.at.elapsed().as_secs_f64();
    let (own, _) = wait_converged(&rig.server, case, None).await?;
    let s1 = rig.snap().await?;
    let mut d = s1.counters.since(&s0.counters);
    own.remove_from(&mut d);
    let wall = (s1.at - s0.at).as_secs_f64();
    let (after, _) = floor(dir, case, Shape::Plain).await?;
    println!(
        "  adopt {} orphans: {wall:.2} s from the controller's start — {}",
        case.objects(),
        against_floor(wall, before, after)
    );
    println!(
        "    of which {ready:.2} s until /readyz answered 200 (start, discovery, lists; polled every 0.1 s), {:.2} s after",
        wall - ready
    );
    print_work(case, &d, &s0, &s1, 1);
    print_sync_times(&rig.ctrl).await;
    print_processes(&s0, &s1);
    Ok(())
}
