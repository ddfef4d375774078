//! The scenarios: the three processes, snapshots of their counters and usage, and the printed
//! figures beside their bounds.

use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use futures::{StreamExt, TryStreamExt};
use kmeta_apiserver::Counters;
use kmeta_tests::procs::{Proc, Usage, bin, free_port, histogram_quantile, http_get};
use kube::api::{DynamicObject, ListParams, Patch, PatchParams, WatchEvent, WatchParams};
use serde_json::{Value, json};

use super::{
    AV, CC, Case, DEADLINE, NS, POLL, Server, Shape, check_as_written, child, create_all, floor,
    hook, in_ns,
};

/// The `kmeta run` process.
struct Controller {
    proc: Proc,
    metrics: u16,
}

impl Controller {
    async fn start(dir: &Path, server: &Server, case: &Case) -> anyhow::Result<Controller> {
        let (metrics, health) = (free_port()?, free_port()?);
        let mut cmd = Command::new(bin("kmeta")?);
        cmd.args(["run", "--kubeconfig"])
            .arg(&server.kubeconfig)
            .arg(format!("--metrics-address=127.0.0.1:{metrics}"))
            .arg(format!("--health-probe-bind-address=127.0.0.1:{health}"))
            .arg(format!("--workers={}", case.workers))
            .arg(format!("--client-go-qps={}", case.qps))
            .args(["--discovery-interval=1s", "--log-level=warn"]);
        let proc = Proc::spawn("kmeta run", cmd, &dir.join("kmeta.log"))?;
        // a profiler can attach to it: `perf record -e cpu-clock -p <pid>`
        println!("    (kmeta run: pid {})", proc.pid());
        let start = Instant::now();
        while http_get(health, "/readyz").await.map(|r| r.0) != Some(200) {
            if start.elapsed() > Duration::from_secs(60) {
                bail!("kmeta run not ready within 60 s (log: {})", dir.display());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(Controller { proc, metrics })
    }

    async fn metrics(&self) -> String {
        http_get(self.metrics, "/metrics")
            .await
            .map(|r| r.1)
            .unwrap_or_default()
    }
}

/// Server, hook and (once started) controller of one case.
struct Rig {
    server: Server,
    hook: Proc,
    hook_port: u16,
    ctrl: Option<Controller>,
}

/// What each process had done at one moment.
struct Snap {
    at: Instant,
    counters: Counters,
    hook_calls: u64,
    ctrl: Usage,
    server: Usage,
    hook: Usage,
}

impl Rig {
    async fn new(dir: &Path, case: &Case) -> anyhow::Result<Rig> {
        let server = Server::start(dir, "server").await?;
        let (hook, hook_port) = hook::spawn(dir, case).await?;
        super::install(&server, case, &format!("http://127.0.0.1:{hook_port}/sync")).await?;
        Ok(Rig {
            server,
            hook,
            hook_port,
            ctrl: None,
        })
    }

    async fn snap(&self) -> anyhow::Result<Snap> {
        Ok(Snap {
            at: Instant::now(),
            counters: self.server.counters().await?,
            hook_calls: hook::calls(self.hook_port).await?,
            ctrl: match &self.ctrl {
                Some(c) => c.proc.usage()?,
                None => Usage::default(),
            },
            server: self.server.proc.usage()?,
            hook: self.hook.usage()?,
        })
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
                   "metadata": {"name": format!("p-{i}"), "namespace": NS}, "spec": {}})
        })
        .collect()
}

/// Waits until every parent reports its M children: one list, then a watch of the parents (a
/// relist only after 410 Gone), so the bench's own load on the server and on its CPU stays small
/// beside the controller's (a list of every parent every half second cost the shared cores
/// several CPU-seconds at 10 000 parents). The bench's own requests, so they can be taken out of
/// the controller's.
async fn wait_converged(server: &Server, case: &Case) -> anyhow::Result<Own> {
    let things = server.api(AV, "Thing", "things");
    let want = json!(case.children);
    let converged = |p: &DynamicObject| p.data.pointer("/status/children") == Some(&want);
    let start = Instant::now();
    let mut own = Own::default();
    loop {
        own.lists += 1;
        let list = things.list(&ListParams::default()).await?;
        let mut done: HashSet<String> = list
            .items
            .iter()
            .filter(|p| converged(p))
            .filter_map(|p| p.metadata.name.clone())
            .collect();
        let mut rv = list.metadata.resource_version.unwrap_or_default();
        'watch: loop {
            if done.len() == case.parents {
                return Ok(own);
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
                    true => done.insert(name),
                    false => done.remove(&name),
                };
                if done.len() == case.parents {
                    return Ok(own);
                }
            }
        }
    }
}

/// The bench's own requests while it waited.
#[derive(Default)]
struct Own {
    lists: u64,
    watches: u64,
}

impl Own {
    /// Takes them out of `c`.
    fn remove_from(&self, c: &mut Counters) {
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
fn without_own(c: &mut Counters, verb: &str, resource: &str, n: u64) {
    for ((v, r, code), count) in c.by_key.iter_mut() {
        if v == verb && r == resource && *code < 300 {
            *count = count.saturating_sub(n);
            return;
        }
    }
}

fn by_verb(c: &Counters) -> String {
    let mut verbs: BTreeMap<&str, u64> = BTreeMap::new();
    for ((v, _, _), n) in &c.by_key {
        *verbs.entry(v.as_str()).or_default() += n;
    }
    let list: Vec<String> = verbs.iter().map(|(v, n)| format!("{v} {n}")).collect();
    format!("{} requests ({})", c.total(), list.join(", "))
}

fn print_processes(s0: &Snap, s1: &Snap) {
    println!(
        "    CPU seconds: controller {:.2}, server {:.2}, hook {:.2}; peak RSS MiB: controller {:.0}, server {:.0}, hook {:.0}",
        s1.ctrl.cpu_s - s0.ctrl.cpu_s,
        s1.server.cpu_s - s0.server.cpu_s,
        s1.hook.cpu_s - s0.hook.cpu_s,
        s1.ctrl.hwm_mib,
        s1.server.hwm_mib,
        s1.hook.hwm_mib
    );
}

async fn print_sync_times(ctrl: Option<&Controller>) {
    let Some(ctrl) = ctrl else { return };
    let m = ctrl.metrics().await;
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
    println!("    controller: {}", by_verb(d));
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

/// N parents created with the controller running, until each reports its M children.
pub(crate) async fn converge(dir: &Path, case: &Case, resync_s: Option<u64>) -> anyhow::Result<()> {
    let before = match case.qps > 0.0 {
        true => None,
        false => Some(floors(dir, case).await?),
    };
    let mut rig = Rig::new(dir, case).await?;
    rig.ctrl = Some(Controller::start(dir, &rig.server, case).await?);
    let s0 = rig.snap().await?;
    let things = rig.server.api(AV, "Thing", "things");
    create_all(&things, parents(case)).await?;
    let own = wait_converged(&rig.server, case).await?;
    let s1 = rig.snap().await?;
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
    print_sync_times(rig.ctrl.as_ref()).await;
    print_processes(&s0, &s1);
    let ctrl_cpu = s1.ctrl.cpu_s - s0.ctrl.cpu_s;
    println!(
        "    controller CPU per child: {:.0} µs",
        ctrl_cpu * 1e6 / case.objects() as f64
    );
    print_memory(&rig, case, &s1).await?;
    if let Some(r) = resync_s {
        steady(&rig, case, r).await?;
    }
    Ok(())
}

/// The controller's peak RSS against its bound (docs/design/sizing-bench.md): twice the JSON of
/// what it caches (every parent and child as the server serves them, managedFields included)
/// plus a 30 MiB base.
async fn print_memory(rig: &Rig, case: &Case, s1: &Snap) -> anyhow::Result<()> {
    let kind = case.kind;
    let mut bytes = 0usize;
    for api in [
        rig.server.api(AV, "Thing", "things"),
        rig.server
            .api(kind.api_version(), kind.kind(), kind.plural()),
    ] {
        for item in api.list(&ListParams::default()).await?.items {
            bytes += serde_json::to_vec(&item)?.len();
        }
    }
    let json_mib = bytes as f64 / (1024.0 * 1024.0);
    let bound = 2.0 * json_mib + 30.0;
    println!(
        "    memory: controller peak RSS {:.0} MiB; JSON of the cached parents and children {json_mib:.0} MiB; bound 2 × JSON + 30 MiB = {bound:.0} MiB ({:.2}× of it)",
        s1.ctrl.hwm_mib,
        s1.ctrl.hwm_mib / bound
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
    let ccs = kube::Api::<kube::api::DynamicObject>::all_with(
        rig.server.client.clone(),
        &kmeta_tests::ar(
            "metacontroller.k8s.io/v1alpha1",
            "CompositeController",
            "compositecontrollers",
        ),
    );
    let patch = json!({"spec": {"resyncPeriodSeconds": resync_s}});
    ccs.patch(CC, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    let n = case.parents as u64;
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
    let cpu = s1.ctrl.cpu_s - s0.ctrl.cpu_s;
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
    Ok(())
}

/// N × M orphans and their parents exist before the controller starts.
pub(crate) async fn adopt(dir: &Path, case: &Case) -> anyhow::Result<()> {
    let (before, _) = floor(dir, case, Shape::Plain).await?;
    let mut rig = Rig::new(dir, case).await?;
    let things = rig.server.api(AV, "Thing", "things");
    let created = create_all(&things, parents(case)).await?;
    let mut orphans = Vec::with_capacity(case.objects());
    for p in &created {
        let name = p.pointer("/metadata/name").and_then(Value::as_str);
        let uid = p.pointer("/metadata/uid").and_then(Value::as_str);
        let (Some(name), Some(uid)) = (name, uid) else {
            bail!("created parent without name or uid: {p}");
        };
        for i in 0..case.children {
            orphans.push(in_ns(child(
                case.kind,
                name,
                i,
                json!({"controller-uid": uid}),
            )));
        }
    }
    let kind = case.kind;
    create_all(
        &rig.server
            .api(kind.api_version(), kind.kind(), kind.plural()),
        orphans,
    )
    .await
    .context("creating orphans")?;
    let s0 = rig.snap().await?;
    rig.ctrl = Some(Controller::start(dir, &rig.server, case).await?);
    let own = wait_converged(&rig.server, case).await?;
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
    print_work(case, &d, &s0, &s1, 1);
    print_sync_times(rig.ctrl.as_ref()).await;
    print_processes(&s0, &s1);
    Ok(())
}
