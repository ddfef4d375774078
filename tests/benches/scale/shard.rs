//! Sharded replicas: the flags they run with, waiting until they hold every bucket between
//! them, the replica counts of one case side by side, and the `failover` scenario.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::time::{Duration, Instant};

use anyhow::bail;
use futures::{StreamExt, TryStreamExt};
use kmeta::coord::shard::{Bucket, ShardHash, bucket_by};
use kmeta_tests::procs::http_get;
use kube::api::{Patch, PatchParams};
use serde_json::json;

use super::run::{Controller, Rig, Run, Snap, by_verb, wait_converged_on};
use super::{AV, Case, Server, WRITERS};

/// The replicas' shard Lease in seconds: `KMETA_SCALE_SHARD_LEASE_S`, 6 by default (renewed
/// every 0.5 s, written off 4 s after its last renewal: short, so the failover is measured in
/// seconds). `15` gives kmeta's defaults (10 s renew deadline, 2 s retry), which hold on a loaded
/// machine where the short one's renewals can miss.
fn lease_s() -> u64 {
    std::env::var("KMETA_SCALE_SHARD_LEASE_S")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(6)
}

/// The flags of a sharded replica (besides its ports), with `buckets` hash buckets (with the
/// cluster bucket the replicas share one more).
pub(crate) fn flags(buckets: u32) -> Vec<String> {
    let lease = lease_s();
    let renew = format!("{}ms", lease * 2000 / 3);
    let retry = if lease <= 6 { "500ms" } else { "2s" };
    vec![
        "--sharding".to_owned(),
        "--leader-election-namespace=default".to_owned(),
        format!("--shard-lease-duration={lease}s"),
        format!("--shard-renew-deadline={renew}"),
        format!("--shard-retry-period={retry}"),
        format!("--shard-buckets={buckets}"),
    ]
}

/// `KMETA_SCALE_SHARD_WATCH` (`client`, the default, or `server`): the replicas'
/// `--shard-watch`.
pub(crate) fn watch_mode() -> String {
    std::env::var("KMETA_SCALE_SHARD_WATCH").unwrap_or_else(|_| "client".into())
}

/// The bucket of a namespace as the replicas place it (`--shard-watch=server`: plain FNV-1a).
fn bucket_of(namespace: &str, buckets: u32) -> Bucket {
    let hash = match watch_mode().as_str() {
        "server" => ShardHash::Fnv1a,
        _ => ShardHash::Mixed,
    };
    bucket_by(namespace, buckets, hash)
}

/// How long the replicas may take to split or take over the buckets.
const SPLIT_DEADLINE: Duration = Duration::from_secs(120);
const SPLIT_POLL: Duration = Duration::from_millis(100);

/// The buckets a replica names on `/readyz?verbose` (`[+]sharding buckets 0,5,cluster (of 32
/// …)`), `None` when it does not answer.
async fn held(health: u16) -> Option<BTreeSet<String>> {
    let (_, body) = http_get(health, "/readyz?verbose").await?;
    let line = body.lines().find(|l| l.contains("sharding buckets"))?;
    let list = line.split("buckets ").nth(1)?.split(' ').next()?;
    Some(match list {
        "none" => BTreeSet::new(),
        l => l.split(',').map(str::to_owned).collect(),
    })
}

/// What each of these replicas holds, in their order (empty when one does not answer).
async fn held_by(health: &[u16]) -> Vec<BTreeSet<String>> {
    let mut out = Vec::with_capacity(health.len());
    for &h in health {
        out.push(held(h).await.unwrap_or_default());
    }
    out
}

/// Whether `each` holds every bucket exactly once between them, none above its fair share
/// (so none will hand one over).
fn split(each: &[BTreeSet<String>], buckets: u32) -> bool {
    let total = buckets as usize + 1;
    let share = total.div_ceil(each.len().max(1));
    let all: usize = each.iter().map(BTreeSet::len).sum();
    let distinct: BTreeSet<&String> = each.iter().flatten().collect();
    all == total && distinct.len() == total && each.iter().all(|h| h.len() <= share)
}

/// Waits until `health`'s replicas hold the buckets as [`split`] says; when they did.
async fn wait_held(health: &[u16], buckets: u32, what: &str) -> anyhow::Result<Instant> {
    let start = Instant::now();
    loop {
        let each = held_by(health).await;
        if split(&each, buckets) {
            return Ok(Instant::now());
        }
        if start.elapsed() > SPLIT_DEADLINE {
            bail!("{what}: buckets not split within {SPLIT_DEADLINE:?}: {each:?}");
        }
        tokio::time::sleep(SPLIT_POLL).await;
    }
}

/// How many of the case's parents fall in `buckets`.
fn parents_in(case: &Case, buckets: &BTreeSet<String>) -> usize {
    (0..case.parents)
        .filter(|&i| buckets.contains(&bucket_of(&case.ns_of(i), case.buckets).to_string()))
        .count()
}

/// Waits until the replicas hold every bucket between them, each its share, and prints the
/// split: buckets and the case's parents in them, per replica.
pub(crate) async fn wait_split(ctrl: &[Controller], case: &Case) -> anyhow::Result<()> {
    let health: Vec<u16> = ctrl.iter().map(|c| c.health).collect();
    let start = Instant::now();
    wait_held(&health, case.buckets, "start").await?;
    let counts: Vec<String> = held_by(&health)
        .await
        .iter()
        .zip(ctrl)
        .map(|(h, c)| format!("{} {} ({} parents)", c.name, h.len(), parents_in(case, h)))
        .collect();
    println!(
        "    buckets split after {:.1} s: {} (of {} and cluster)",
        start.elapsed().as_secs_f64(),
        counts.join(", "),
        case.buckets
    );
    if watch_mode() == "server" {
        wait_merged(ctrl).await?;
        println!(
            "    sharded watches down to one stream each after {:.1} s",
            start.elapsed().as_secs_f64()
        );
    }
    Ok(())
}

/// With server-sharded watches: waits until every replica runs each sharded watch over one
/// stream (`kmeta_watch_streams{mode="sharded"}` 1), which kmeta reaches once the split has held
/// still (five `--shard-retry-period`s, `SETTLE_RETRY_PERIODS`), so the converge measures the replicas as they run between
/// membership changes, not the one relist of each replica's share that merging costs.
async fn wait_merged(ctrl: &[Controller]) -> anyhow::Result<()> {
    let start = Instant::now();
    loop {
        let mut merged = true;
        for c in ctrl {
            let text = c.metrics().await;
            let streams: Vec<&str> = text
                .lines()
                .filter(|l| l.starts_with("kmeta_watch_streams{") && l.contains("mode=\"sharded\""))
                .collect();
            merged &= !streams.is_empty() && streams.iter().all(|l| l.ends_with(" 1"));
        }
        if merged {
            return Ok(());
        }
        if start.elapsed() > SPLIT_DEADLINE {
            bail!("sharded watches not merged into one stream each within {SPLIT_DEADLINE:?}");
        }
        tokio::time::sleep(SPLIT_POLL).await;
    }
}

/// Sets `spec.v` of every parent, [`WRITERS`] at a time.
async fn edit_all(server: &Server, case: &Case, v: u64) -> anyhow::Result<()> {
    let patch = json!({"spec": {"v": v}});
    futures::stream::iter(0..case.parents)
        .map(|i| {
            let api = server.api_in(&case.ns_of(i), AV, "Thing", "things");
            let patch = &patch;
            async move {
                api.patch(
                    &format!("p-{i}"),
                    &PatchParams::default(),
                    &Patch::Merge(patch),
                )
                .await?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(WRITERS)
        .try_collect()
        .await
}

/// Seconds from `t0` to the earliest and latest of `times` (`-` when empty).
fn span(t0: Instant, times: impl Iterator<Item = Instant>) -> String {
    let secs: Vec<f64> = times.map(|t| (t - t0).as_secs_f64()).collect();
    let min = secs.iter().copied().fold(f64::INFINITY, f64::min);
    let max = secs.iter().copied().fold(0.0, f64::max);
    match secs.is_empty() {
        true => "-".to_owned(),
        false => format!("{min:.2}–{max:.2} s"),
    }
}

/// Sets `spec.v` of every parent to `v` and waits until each has converged with it: when the
/// edits were sent, and when each parent converged.
async fn edit_and_wait(
    server: &Server,
    case: &Case,
    v: u64,
) -> anyhow::Result<(Instant, HashMap<String, Instant>)> {
    // the parents' watch in a task of its own, so decoding the edits' answers does not delay
    // the times it takes
    let things = server.api_all(AV, "Thing", "things");
    let case_ = *case;
    let converged = tokio::spawn(async move { wait_converged_on(things, case_, Some(v)).await });
    edit_all(server, case, v).await?;
    let edited = Instant::now();
    Ok((edited, converged.await??.1))
}

/// The scenario's baseline: every parent edited with every replica alive.
async fn edit_alive(rig: &Rig, case: &Case) -> anyhow::Result<()> {
    let s0 = rig.snap().await?;
    let (edited, at) = edit_and_wait(&rig.server, case, 1).await?;
    let s1 = rig.snap().await?;
    let done = at.values().copied().max().unwrap_or(s1.at);
    println!(
        "  failover, first the same edit with all {} replicas alive: every parent edited (spec.v = 1, sent within {:.2} s), converged again after {:.2} s",
        rig.ctrl.len(),
        (edited - s0.at).as_secs_f64(),
        (done - s0.at).as_secs_f64()
    );
    print_usage(rig, &s0, &s1, "replicas'");
    Ok(())
}

/// With the case's replicas converged: every parent edited with all of them alive (the
/// baseline), then SIGKILL to the one holding the most buckets, every parent edited again, and
/// the time until every parent has converged again (children carrying the new `spec.v`), split
/// into the time until the others hold its buckets and the rest. Then, with two or more left,
/// a [`quiet_failover`].
pub(crate) async fn failover(rig: &mut Rig, case: &Case) -> anyhow::Result<()> {
    edit_alive(rig, case).await?;
    let (victim, lost) = fullest(rig, "failover").await?;
    let theirs: HashSet<String> = (0..case.parents)
        .filter(|&i| lost.contains(&bucket_of(&case.ns_of(i), case.buckets).to_string()))
        .map(|i| format!("p-{i}"))
        .collect();
    let (name, s0, t0, health) = kill(rig, victim).await?;
    // a task of its own: polled beside the edits and the parents' watch in one task, the
    // replicas' `/readyz` was read 8–15 s late under the storm (a probe beside the bench got
    // every answer within 0.14 s)
    let buckets = case.buckets;
    let taken = tokio::spawn(async move { wait_held(&health, buckets, "failover").await });
    let (edited, at) = edit_and_wait(&rig.server, case, 2).await?;
    let taken = taken.await??;
    let s1 = rig.snap().await?;
    let done = at.values().copied().max().unwrap_or(t0);
    let secs = |t: Instant| t.saturating_duration_since(t0).as_secs_f64();
    println!(
        "  failover: SIGKILL to {name} (held {} of {} buckets, {} of {} parents), then every parent edited (spec.v = 2, sent within {:.2} s)",
        lost.len(),
        case.buckets + 1,
        theirs.len(),
        case.parents,
        secs(edited)
    );
    println!(
        "    every parent converged again {:.2} s after the kill = {:.2} s until the others held its buckets (/readyz; Lease {} s) + {:.2} s",
        secs(done),
        secs(taken),
        lease_s(),
        secs(done) - secs(taken)
    );
    let (mine, others): (Vec<_>, Vec<_>) = at.iter().partition(|(p, _)| theirs.contains(*p));
    println!(
        "    converged after the kill: the killed replica's parents {}, the others' {}",
        span(t0, mine.into_iter().map(|(_, t)| *t)),
        span(t0, others.into_iter().map(|(_, t)| *t))
    );
    print_usage(rig, &s0, &s1, "survivors'");
    if rig.ctrl.len() >= 2 {
        quiet_failover(rig, case).await?;
    }
    Ok(())
}

/// The replica holding the most buckets (its index in `rig.ctrl`) and its buckets.
async fn fullest(rig: &Rig, what: &str) -> anyhow::Result<(usize, BTreeSet<String>)> {
    let health: Vec<u16> = rig.ctrl.iter().map(|c| c.health).collect();
    let each = held_by(&health).await;
    match each.into_iter().enumerate().max_by_key(|(_, h)| h.len()) {
        Some(fullest) => Ok(fullest),
        None => bail!("{what}: no replicas"),
    }
}

/// SIGKILL to replica `victim` (then reaped): its name, a snap just before, when it was killed,
/// and the survivors' health ports.
async fn kill(rig: &mut Rig, victim: usize) -> anyhow::Result<(String, Snap, Instant, Vec<u16>)> {
    let dead = rig.ctrl.remove(victim);
    let name = dead.name.clone();
    let s0 = rig.snap().await?;
    let t0 = Instant::now();
    drop(dead);
    let health = rig.ctrl.iter().map(|c| c.health).collect();
    Ok((name, s0, t0, health))
}

/// With the survivors quiet: SIGKILL to the one holding the most buckets, nothing edited, and
/// the hook calls until the hook is quiet again. A takeover should sync the taken buckets'
/// parents once each and no other: a survivor whose triggers fell behind the taken ranges'
/// lists resynced every parent it had as well.
async fn quiet_failover(rig: &mut Rig, case: &Case) -> anyhow::Result<()> {
    rig.snap_when_quiet().await?;
    let (victim, lost) = fullest(rig, "quiet failover").await?;
    let taken = parents_in(case, &lost);
    let (name, s0, t0, health) = kill(rig, victim).await?;
    let held_at = wait_held(&health, case.buckets, "quiet failover").await?;
    let s1 = rig.snap_when_quiet().await?;
    println!(
        "  quiet failover: SIGKILL to {name} (held {} buckets, {taken} of {} parents), nothing edited: the others held its buckets {:.2} s after the kill",
        lost.len(),
        case.parents,
        held_at.saturating_duration_since(t0).as_secs_f64()
    );
    println!(
        "    until quiet: hook calls {} (the taken buckets' parents {taken}, the survivors' own {})",
        s1.hook_calls - s0.hook_calls,
        case.parents - taken
    );
    print_usage(rig, &s0, &s1, "survivors'");
    Ok(())
}

fn print_usage(rig: &Rig, s0: &Snap, s1: &Snap, whose: &str) {
    let d = s1.counters.since(&s0.counters);
    let cpu = s1.ctrl_cpu(s0);
    let each: Vec<String> = rig
        .ctrl
        .iter()
        .zip(&cpu)
        .map(|(c, s)| format!("{} {s:.2}", c.name))
        .collect();
    println!(
        "    {whose} CPU seconds {:.2} ({}); {} (the bench's edits included); hook calls {}",
        cpu.iter().sum::<f64>(),
        each.join(", "),
        by_verb(&d),
        s1.hook_calls - s0.hook_calls
    );
}

/// The converges of one case with each replica count, side by side, as ratios to the
/// 1-replica run (the first, when none ran alone).
pub(crate) fn side_by_side(runs: &[Run]) {
    if runs.len() < 2 {
        return;
    }
    let base = runs.iter().find(|r| r.replicas == 1).unwrap_or(&runs[0]);
    let threads = |r: &Run| {
        let t = r.threads.map_or(String::new(), |t| format!("×{t} threads"));
        match r.replicas {
            1 => t,
            _ => format!("{t}, {} buckets", r.buckets),
        }
    };
    let (base_cpu, base_rss) = (
        base.cpu.iter().sum::<f64>(),
        base.rss.iter().copied().fold(0.0, f64::max),
    );
    let base_quiet: f64 = base.cpu_quiet.iter().sum();
    println!(
        "  side by side (ratio to {} replica{}{}):",
        base.replicas,
        if base.replicas == 1 { "" } else { "s" },
        threads(base)
    );
    println!(
        "    replicas | converge s | controller CPU s, sum | CPU s, each | CPU s until quiet, sum | peak RSS MiB, each (largest ÷ base) | server CPU s"
    );
    for r in runs {
        let cpu: f64 = r.cpu.iter().sum();
        let rss = r.rss.iter().copied().fold(0.0, f64::max);
        let list = |v: &[f64], d: usize| {
            v.iter()
                .map(|x| format!("{x:.d$}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let quiet: f64 = r.cpu_quiet.iter().sum();
        println!(
            "    {}{} | {:.2} ({:.2}×) | {cpu:.2} ({:.2}×) | {} | {quiet:.2} ({:.2}×) | {} ({:.2}×) | {:.2}",
            r.replicas,
            threads(r),
            r.wall,
            r.wall / base.wall,
            cpu / base_cpu,
            list(&r.cpu, 2),
            quiet / base_quiet,
            list(&r.rss, 0),
            rss / base_rss,
            r.server_cpu
        );
    }
}
