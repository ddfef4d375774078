//! The `storm` scenario (issue 54, part 4: changes first during a relist storm): N parents
//! converged by one `kmeta run`, which is then stopped; then, for each binary of
//! `KMETA_SCALE_STORM_BINS` in turn, over the same converged fleet:
//!
//! - **restart**: a fresh `kmeta run` process starts, so every parent is queued at once (its
//!   start); from its `/readyz` on, `KMETA_SCALE_STORM_EDITS` (100) edits by "a person" (a
//!   merge patch of `spec.edit` on a random parent, a different parent each) are spread over the
//!   storm; each edit's latency is the time from the server's answer to the patch to the first
//!   hook call carrying that `spec.edit` (the hook records it, see `hook.rs`);
//! - **flush** (unless `KMETA_SCALE_STORM_RELIST=0`): the same with a process started with
//!   `--cache-flush-interval` just past its start-up storm, so every parent is queued again by
//!   the flush once the start has drained (since 2026-12-07 a resync from the cache, the watches
//!   kept open; a binary from before lists every watch again instead); the edits are spread over
//!   that.
//!
//! For each storm: how long it took to drain (from `/readyz`, or from the flush's first hook
//! call, to the storm's last hook call), its hook calls and how many distinct parents they named
//! (every parent: no start-up sync skipped), and the edits' latency p50/p99/max over the edits
//! written before the storm drained. The binaries run one after the other on the same server
//! and hook, so the figures of one run are side by side (`label=path` entries, e.g.
//! `main=/tmp/kmeta-main,storm=target/release/kmeta`; default: the bench's own `kmeta`).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context as _, bail};
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::json;

use super::run::{Controller, Rig, by_verb, parents, wait_converged};
use super::{AV, Case, DEADLINE, POLL, THINGS, env_list, env_num, hook};
use kmeta_apiserver::Counters;
use kmeta_tests::ar;
use kmeta_tests::procs::bin;

/// How long after its last edit every edit must have reached the hook.
const EDITS_SEEN: Duration = Duration::from_secs(180);

/// One binary under test.
struct Binary {
    label: String,
    path: PathBuf,
}

/// `KMETA_SCALE_STORM_BINS`: `label=path` entries (default: `kmeta=` the bench's `kmeta`).
fn binaries() -> anyhow::Result<Vec<Binary>> {
    let entries = env_list("KMETA_SCALE_STORM_BINS", "");
    if entries.is_empty() {
        return Ok(vec![Binary {
            label: "kmeta".into(),
            path: bin("kmeta")?,
        }]);
    }
    entries
        .iter()
        .map(|e| {
            let (label, path) = e
                .split_once('=')
                .with_context(|| format!("KMETA_SCALE_STORM_BINS: {e:?}: want label=path"))?;
            let path = PathBuf::from(path);
            if !path.exists() {
                bail!(
                    "KMETA_SCALE_STORM_BINS: {label}: {} not found",
                    path.display()
                );
            }
            Ok(Binary {
                label: label.to_owned(),
                path,
            })
        })
        .collect()
}

/// One edit by "a person": which, when its patch was answered (µs since the UNIX epoch) and
/// how long the patch took.
struct Edit {
    id: u64,
    written_us: u64,
    patch: Duration,
}

/// What one storm measured.
struct Storm {
    label: String,
    kind: &'static str,
    /// From the process's start to `/readyz` (restart only).
    ready: Option<Duration>,
    drain: Duration,
    calls: u64,
    distinct: usize,
    /// Latencies of the edits written before the storm drained, sorted, each with when it was
    /// written after the storm began; edits no hook call carried count as `None` (last).
    within: Vec<(Option<Duration>, Duration)>,
    /// Edits written after the storm had drained.
    after: usize,
    patch_p99: Duration,
    cpu_s: f64,
    /// The API requests during the storm (the edits' patches included) and the parent status
    /// writes among them.
    requests: String,
    status_writes: u64,
}

/// The scenario for `case` (children per parent as `KMETA_SCALE_CHILDREN` says; 0 is allowed:
/// the edit's latency is the queue's, not the child writes').
pub(crate) async fn storm(dir: &Path, case: &Case) -> anyhow::Result<()> {
    let bins = binaries()?;
    let edits: u64 = env_num("KMETA_SCALE_STORM_EDITS", 100)?;
    let relist = env_num("KMETA_SCALE_STORM_RELIST", 1)? != 0;
    let mut rig = Rig::new(dir, case).await?;
    let first = Controller::start_with(dir, &rig.server, case, 0, &bins[0].path, &[]).await?;
    rig.ctrl.push(first);
    let start = Instant::now();
    rig.server.create_all(THINGS, parents(case)).await?;
    wait_converged(&rig.server, case, None).await?;
    let converge = start.elapsed();
    rig.snap_when_quiet().await?;
    rig.ctrl.clear();
    println!(
        "  storm: {} parents converged by {} in {:.1} s; each binary restarted over them",
        case.parents,
        bins[0].label,
        converge.as_secs_f64()
    );
    // the edits are spread over most of a storm: about one sync per parent, half a converge
    let mut spread = converge.mul_f64(0.5 * 0.7);
    let mut next_id = 1;
    let mut storms = Vec::new();
    for b in &bins {
        let s = restart(dir, &mut rig, case, b, (next_id, edits), spread).await?;
        next_id += edits;
        print_storm(&s);
        storms.push(s);
    }
    if relist {
        let shortest = storms.iter().map(|s| s.drain).min().unwrap_or(spread);
        spread = shortest.mul_f64(0.7);
        let longest = storms
            .iter()
            .map(|s| s.ready.unwrap_or_default() + s.drain)
            .max()
            .unwrap_or_default();
        for b in &bins {
            let s = relisted(dir, &mut rig, case, b, (next_id, edits), spread, longest).await?;
            next_id += edits;
            print_storm(&s);
            storms.push(s);
        }
    }
    side_by_side(&storms);
    Ok(())
}

/// A fresh process of `b` over the converged fleet; `ids` = (first edit id, edits).
async fn restart(
    dir: &Path,
    rig: &mut Rig,
    case: &Case,
    b: &Binary,
    ids: (u64, u64),
    spread: Duration,
) -> anyhow::Result<Storm> {
    let calls0 = hook::calls(rig.hook_port).await?;
    let counters0 = rig.server.counters().await?;
    let spawned = Instant::now();
    let c = Controller::start_with(dir, &rig.server, case, 0, &b.path, &[]).await?;
    let cpu0 = c.proc.usage()?.cpu_s;
    let ready = spawned.elapsed();
    let ready_us = hook::unix_us(SystemTime::now());
    rig.ctrl.push(c);
    let storm = measure(rig, case, ids, spread, calls0, ready_us).await;
    finish(rig, b, ("restart", Some(ready)), (cpu0, counters0), storm).await
}

/// A process of `b` whose cache flush (`--cache-flush-interval`) comes once its start-up storm
/// (at most `start` long) has drained: the flush's storm is measured.
async fn relisted(
    dir: &Path,
    rig: &mut Rig,
    case: &Case,
    b: &Binary,
    ids: (u64, u64),
    spread: Duration,
    start: Duration,
) -> anyhow::Result<Storm> {
    // past the start and its quiet, short of a second flush during the first one's storm
    let flush = (start * 2 + Duration::from_secs(10)).as_secs();
    let args = [format!("--cache-flush-interval={flush}s")];
    let c = Controller::start_with(dir, &rig.server, case, 0, &b.path, &args).await?;
    rig.ctrl.push(c);
    let quiet = rig.snap_when_quiet().await?;
    let calls0 = quiet.hook_calls;
    let counters0 = quiet.counters;
    let deadline = Instant::now() + Duration::from_secs(flush) + DEADLINE;
    while hook::calls(rig.hook_port).await? == calls0 {
        if Instant::now() > deadline {
            bail!("no flush within {flush} s");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let epoch = hook::epoch_us(rig.hook_port).await?;
    let first = hook::arrivals(rig.hook_port, calls0).await?;
    let began_us = epoch + first.first().copied().unwrap_or_default();
    let cpu0 = rig.ctrl[0].proc.usage()?.cpu_s;
    let storm = measure(rig, case, ids, spread, calls0, began_us).await;
    finish(rig, b, ("flush", None), (cpu0, counters0), storm).await
}

/// The end of a storm of `kind` (`ready`: the restart's time to `/readyz`) measured from
/// `cpu0` (the controller's CPU seconds) and `counters0` (the server's): the controller is
/// stopped, and the storm's figures for `b` are what it spent and the server counted since.
async fn finish(
    rig: &mut Rig,
    b: &Binary,
    (kind, ready): (&'static str, Option<Duration>),
    (cpu0, counters0): (f64, Counters),
    storm: anyhow::Result<Measured>,
) -> anyhow::Result<Storm> {
    let cpu = rig.ctrl[0].proc.usage()?.cpu_s - cpu0;
    rig.ctrl.clear();
    let (drain, calls, distinct, within, after, patch_p99) = storm?;
    let d = rig.server.counters().await?.since(&counters0);
    Ok(Storm {
        requests: by_verb(&d),
        status_writes: d.writes_to("things/status"),
        label: b.label.clone(),
        kind,
        ready,
        drain,
        calls,
        distinct,
        within,
        after,
        patch_p99,
        cpu_s: cpu,
    })
}

type Measured = (
    Duration,
    u64,
    usize,
    Vec<(Option<Duration>, Duration)>,
    usize,
    Duration,
);

/// The edits spread over `spread` from now, while the storm that began at `began_us` (µs since
/// the UNIX epoch) drains: it has drained once every parent had a hook call from the
/// `calls0`th on and the hook went quiet.
async fn measure(
    rig: &Rig,
    case: &Case,
    ids: (u64, u64),
    spread: Duration,
    calls0: u64,
    began_us: u64,
) -> anyhow::Result<Measured> {
    let editor = tokio::spawn(edit(rig.server.client.clone(), *case, ids, spread));
    let start = Instant::now();
    while hook::distinct_parents(rig.hook_port, calls0).await? < case.parents {
        if start.elapsed() > DEADLINE {
            bail!("the storm never reached every parent");
        }
        tokio::time::sleep(POLL).await;
    }
    let edits = editor.await??;
    // an edit a watch does not show yet (one listing again) reaches the hook after the storm
    let seen_all = async {
        loop {
            let seen = hook::edit_arrivals(rig.hook_port).await?;
            if edits.iter().all(|e| seen.contains_key(&e.id)) {
                return anyhow::Ok(());
            }
            tokio::time::sleep(POLL).await;
        }
    };
    match tokio::time::timeout(EDITS_SEEN, seen_all).await {
        Ok(r) => r?,
        Err(_) => println!(
            "    (not every edit reached the hook within {} s)",
            EDITS_SEEN.as_secs()
        ),
    }
    let quiet = rig.snap_when_quiet().await?;
    let epoch = hook::epoch_us(rig.hook_port).await?;
    let arrivals = hook::arrivals(rig.hook_port, calls0).await?;
    let last_us = epoch + arrivals.last().copied().unwrap_or_default();
    let drain = Duration::from_micros(last_us.saturating_sub(began_us));
    // the storm's own end: its last call that was not an edit's
    let seen = hook::edit_arrivals(rig.hook_port).await?;
    let (mut within, mut after) = (Vec::new(), 0);
    for e in &edits {
        let latency = seen
            .get(&e.id)
            .map(|at| Duration::from_micros((epoch + at).saturating_sub(e.written_us)));
        if e.written_us <= last_us {
            let at = Duration::from_micros(e.written_us.saturating_sub(began_us));
            within.push((latency, at));
        } else {
            after += 1;
        }
    }
    within.sort_by_key(|(l, _)| l.unwrap_or(Duration::MAX));
    let mut patches: Vec<Duration> = edits.iter().map(|e| e.patch).collect();
    patches.sort();
    let distinct = hook::distinct_parents(rig.hook_port, calls0).await?;
    Ok((
        drain,
        quiet.hook_calls - calls0,
        distinct,
        within,
        after,
        quantile(&patches, 0.99),
    ))
}

/// `ids.1` edits with ids from `ids.0`, one every `spread / ids.1`, each of a different random
/// parent: a merge patch of `spec.edit`.
async fn edit(
    client: kube::Client,
    case: Case,
    (first, n): (u64, u64),
    spread: Duration,
) -> anyhow::Result<Vec<Edit>> {
    let picks = {
        let mut rng = rand::rng();
        let n = usize::try_from(n)?.min(case.parents);
        rand::seq::index::sample(&mut rng, case.parents, n).into_vec()
    };
    let start = tokio::time::Instant::now();
    let step = spread / u32::try_from(picks.len().max(1))?;
    let mut out = Vec::new();
    for (k, (i, id)) in picks.into_iter().zip(first..).enumerate() {
        tokio::time::sleep_until(start + step * u32::try_from(k)?).await;
        let ns = case.ns_of(i);
        let api: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), &ns, &ar(AV, "Thing", "things"));
        let patch = Patch::Merge(json!({"spec": {"edit": id}}));
        let sent = Instant::now();
        api.patch(&format!("p-{i}"), &PatchParams::default(), &patch)
            .await?;
        out.push(Edit {
            id,
            written_us: hook::unix_us(SystemTime::now()),
            patch: sent.elapsed(),
        });
    }
    Ok(out)
}

/// The `q` quantile of sorted `xs` (nearest rank).
fn quantile(xs: &[Duration], q: f64) -> Duration {
    if xs.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((q * xs.len() as f64).ceil() as usize).clamp(1, xs.len());
    xs[rank - 1]
}

/// The latencies' p50, p99 and max, `-` for an edit no hook call carried.
fn latencies(within: &[(Option<Duration>, Duration)]) -> (String, String, String) {
    let at = |q: f64| {
        if within.is_empty() {
            return "-".to_owned();
        }
        let rank = ((q * within.len() as f64).ceil() as usize).clamp(1, within.len());
        match within[rank - 1].0 {
            Some(d) => format!("{:.0} ms", d.as_secs_f64() * 1000.0),
            None => "never".to_owned(),
        }
    };
    (at(0.5), at(0.99), at(1.0))
}

fn print_storm(s: &Storm) {
    let (p50, p99, max) = latencies(&s.within);
    let ready = s.ready.map_or(String::new(), |r| {
        format!("ready in {:.1} s, ", r.as_secs_f64())
    });
    println!(
        "  {} {}: {ready}drained in {:.1} s; hook calls {}, distinct parents synced {}; controller CPU {:.1} s",
        s.label,
        s.kind,
        s.drain.as_secs_f64(),
        s.calls,
        s.distinct,
        s.cpu_s
    );
    println!(
        "    API requests {}, of them parent status writes {}",
        s.requests, s.status_writes
    );
    println!(
        "    edits during the storm {} (after it {}): write → hook call p50 {p50}, p99 {p99}, max {max}; the patches' own p99 {:.0} ms",
        s.within.len(),
        s.after,
        s.patch_p99.as_secs_f64() * 1000.0
    );
    let slowest: Vec<String> = s
        .within
        .iter()
        .rev()
        .take(3)
        .map(|(l, at)| {
            let l = l.map_or("never".to_owned(), |l| {
                format!("{:.0} ms", l.as_secs_f64() * 1e3)
            });
            format!("{l} (written {:.1} s into the storm)", at.as_secs_f64())
        })
        .collect();
    println!("    slowest edits: {}", slowest.join(", "));
}

fn side_by_side(storms: &[Storm]) {
    println!(
        "  side by side (storm, binary: drain s, edit p50 / p99 / max, edits in storm, distinct parents):"
    );
    for s in storms {
        let (p50, p99, max) = latencies(&s.within);
        println!(
            "    {:<7} {:<10} {:>7.1} s   {p50} / {p99} / {max}   {}   {}",
            s.kind,
            s.label,
            s.drain.as_secs_f64(),
            s.within.len(),
            s.distinct
        );
    }
}
