//! The faults, drawn from the seeded generator: processes (kill -9 of the leader or the standby,
//! SIGSTOP of the leader past its Lease; with sharding, kill -9, SIGSTOP past the Lease or
//! SIGTERM of a replica drawn at random), the API server (errors, latency, watch churn and lag)
//! and the hook (errors, outage). Each is printed with the seed when drawn and undone when its
//! time is over.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use kmeta_apiserver::{FaultSpec, TestServer};
use rand::Rng;
use rand::rngs::StdRng;

use super::Soak;

/// What can be drawn, with its weight.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Fault {
    KillLeader,
    KillStandby,
    StopLeader,
    KillReplica,
    StopReplica,
    TermReplica,
    ApiErrors,
    ApiLatency,
    WatchChurn,
    WatchLag,
    HookErrors,
    HookOutage,
}

const WEIGHTS: &[(Fault, u32)] = &[
    (Fault::KillLeader, 2),
    (Fault::KillStandby, 1),
    (Fault::StopLeader, 2),
    (Fault::ApiErrors, 3),
    (Fault::ApiLatency, 2),
    (Fault::WatchChurn, 3),
    (Fault::WatchLag, 2),
    (Fault::HookErrors, 2),
    (Fault::HookOutage, 1),
];

/// With sharding: the process faults hit a replica drawn at random (every replica holds
/// buckets, none is "the leader"); a SIGTERM is a scale-down and, later, up again.
const WEIGHTS_SHARDED: &[(Fault, u32)] = &[
    (Fault::KillReplica, 2),
    (Fault::StopReplica, 2),
    (Fault::TermReplica, 1),
    (Fault::ApiErrors, 3),
    (Fault::ApiLatency, 2),
    (Fault::WatchChurn, 3),
    (Fault::WatchLag, 2),
    (Fault::HookErrors, 2),
    (Fault::HookOutage, 1),
];

/// One drawn fault, everything about it decided up front by the generator.
#[derive(Debug, Clone)]
pub(crate) struct Drawn {
    pub fault: Fault,
    /// How long it lasts (for a kill: how long the replica stays down).
    pub hold: Duration,
    /// Error share, latency in ms, watch-churn kind, the replica (index)… depending on the
    /// fault.
    pub knob: u64,
    pub code: u16,
}

impl Drawn {
    pub(crate) fn describe(&self) -> String {
        let s = self.hold.as_secs_f64();
        match self.fault {
            Fault::KillLeader => format!("kill -9 of the leader, restarted after {s:.1} s"),
            Fault::KillStandby => format!("kill -9 of the standby, restarted after {s:.1} s"),
            Fault::StopLeader => {
                format!("SIGSTOP of the leader for {s:.1} s (Lease 15 s), then SIGCONT")
            }
            Fault::KillReplica => format!(
                "kill -9 of replica #{}, restarted after {s:.1} s",
                self.knob
            ),
            Fault::StopReplica => format!(
                "SIGSTOP of replica #{} for {s:.1} s (bucket Leases 15 s), then SIGCONT",
                self.knob
            ),
            Fault::TermReplica => format!(
                "SIGTERM of replica #{} (scale-down), restarted {s:.1} s later",
                self.knob
            ),
            Fault::ApiErrors => format!(
                "{}% of kmeta's requests answered {} for {s:.1} s",
                self.knob, self.code
            ),
            Fault::ApiLatency => format!("+{} ms on every request for {s:.1} s", self.knob),
            Fault::WatchChurn => format!(
                "watch churn for {s:.1} s: every 2 s {}",
                [
                    "close every watch",
                    "drop every watch (held events lost)",
                    "the next 3 watches 410 Expired"
                ][self.knob as usize % 3]
            ),
            Fault::WatchLag => format!("watch events {} ms late for {s:.1} s", self.knob),
            Fault::HookErrors => format!("{}% of hook calls answered 500 for {s:.1} s", self.knob),
            Fault::HookOutage => format!("hook down (503) for {s:.1} s"),
        }
    }
}

/// Draws the next fault (from the sharded table with `sharded`).
pub(crate) fn draw(rng: &mut StdRng, sharded: bool) -> Drawn {
    let weights = if sharded { WEIGHTS_SHARDED } else { WEIGHTS };
    let total: u32 = weights.iter().map(|w| w.1).sum();
    let mut pick = rng.random_range(0..total);
    let mut fault = Fault::ApiErrors;
    for (f, w) in weights {
        if pick < *w {
            fault = *f;
            break;
        }
        pick -= w;
    }
    let hold = match fault {
        Fault::StopLeader | Fault::StopReplica => {
            Duration::from_millis(rng.random_range(17_000..25_000))
        }
        Fault::KillLeader | Fault::KillStandby | Fault::KillReplica => {
            Duration::from_millis(rng.random_range(0..8_000))
        }
        Fault::TermReplica => Duration::from_millis(rng.random_range(5_000..40_000)),
        _ => Duration::from_millis(rng.random_range(3_000..20_000)),
    };
    let knob = match fault {
        Fault::ApiErrors => rng.random_range(5..40),
        Fault::ApiLatency => rng.random_range(20..500),
        Fault::WatchLag => rng.random_range(100..3000),
        Fault::HookErrors => rng.random_range(10..80),
        // the watch-churn kind, or which of the (three with sharding) replicas
        _ => rng.random_range(0..3),
    };
    let code = [500, 503, 429, 409][rng.random_range(0..4)];
    Drawn {
        fault,
        hold,
        knob,
        code,
    }
}

/// Carries `d` out and undoes it when its time is over.
pub(crate) async fn apply(soak: Arc<Soak>, d: Drawn) -> anyhow::Result<()> {
    let server: &TestServer = &soak.server;
    match d.fault {
        Fault::KillLeader
        | Fault::KillStandby
        | Fault::StopLeader
        | Fault::KillReplica
        | Fault::StopReplica
        | Fault::TermReplica => process(&soak, &d).await?,
        Fault::ApiErrors => {
            let spec = FaultSpec::error(d.code)
                .rate(d.knob as f64 / 100.0)
                .user_agent("kmeta/");
            let id = server.faults().inject(spec);
            tokio::time::sleep(d.hold).await;
            server.faults().remove(id);
        }
        Fault::ApiLatency => {
            let id = server
                .faults()
                .add_latency(None, None, Duration::from_millis(d.knob));
            tokio::time::sleep(d.hold).await;
            server.faults().remove(id);
        }
        Fault::WatchLag => {
            let id = server
                .faults()
                .delay_watch_events(None, Duration::from_millis(d.knob));
            tokio::time::sleep(d.hold).await;
            server.faults().remove(id);
        }
        Fault::WatchChurn => {
            let end = tokio::time::Instant::now() + d.hold;
            while tokio::time::Instant::now() < end {
                match d.knob % 3 {
                    0 => server.faults().close_watches(),
                    1 => server.faults().drop_watches(),
                    _ => server.faults().expire_next_watches(3),
                }
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
        }
        Fault::HookErrors => {
            *soak
                .hook
                .error_rate
                .lock()
                .unwrap_or_else(|e| e.into_inner()) = d.knob as f64 / 100.0;
            tokio::time::sleep(d.hold).await;
            *soak
                .hook
                .error_rate
                .lock()
                .unwrap_or_else(|e| e.into_inner()) = 0.0;
        }
        Fault::HookOutage => {
            soak.hook.outage.store(true, Ordering::Relaxed);
            tokio::time::sleep(d.hold).await;
            soak.hook.outage.store(false, Ordering::Relaxed);
        }
    }
    Ok(())
}

/// The process faults, one at a time (they take the replicas' lock in turn).
async fn process(soak: &Soak, d: &Drawn) -> anyhow::Result<()> {
    let _one = soak.process_fault.lock().await;
    let names: Vec<String> = soak
        .replicas
        .all
        .lock()
        .await
        .iter()
        .map(|r| r.name.clone())
        .collect();
    let target = match d.fault {
        Fault::KillReplica | Fault::StopReplica | Fault::TermReplica => {
            names.get(d.knob as usize % names.len().max(1)).cloned()
        }
        _ => {
            let leader = soak.holder().await.filter(|h| names.contains(h));
            match d.fault {
                Fault::KillStandby => names.iter().find(|n| Some(*n) != leader.as_ref()).cloned(),
                _ => leader,
            }
        }
    };
    let Some(target) = target else {
        soak.say(&format!("  ({:?}: no leader now, skipped)", d.fault));
        return Ok(());
    };
    let done = match d.fault {
        Fault::StopLeader | Fault::StopReplica => {
            let stopped = soak.replicas.pause(&target, true).await?;
            if stopped {
                soak.say(&format!("  SIGSTOP {target}"));
                tokio::time::sleep(d.hold).await;
                soak.replicas.pause(&target, false).await?;
                soak.say(&format!("  SIGCONT {target}"));
            }
            stopped
        }
        Fault::TermReplica => {
            let termed = soak.replicas.term(&target, d.hold).await?;
            if termed {
                soak.say(&format!("  SIGTERM {target}"));
            }
            termed
        }
        _ => {
            let killed = soak.replicas.kill9(&target, d.hold).await?;
            if killed {
                soak.say(&format!("  kill -9 {target}"));
            }
            killed
        }
    };
    if !done {
        soak.say(&format!("  ({:?}: {target} not running, skipped)", d.fault));
    }
    Ok(())
}
