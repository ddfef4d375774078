//! `coldstart`: a converged fleet, then fresh `kmeta run` processes one after the other against
//! the same `kmeta-apiserver`, alternating `--watch-list=off` (list then watch) and
//! `--watch-list=auto` (a watch-list: kmeta-apiserver offers it), each measured from its spawn
//! to `/readyz` answering 200 and to its first hook call, with its peak RSS (`VmHWM`) at both.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::bail;
use kmeta_tests::procs::{Proc, Usage, bin, free_port, http_get};

use super::run::{self, Rig};
use super::{Case, DEADLINE, THINGS, env_num, hook};

/// How often readiness and the hook's call count are polled: 20 ms.
const TICK: Duration = Duration::from_millis(20);

/// What one start measured.
struct Start {
    mode: &'static str,
    ready: Duration,
    first_sync: Duration,
    rss_ready: f64,
    rss_first_sync: f64,
    /// CPU seconds until `/readyz`: the controller's, and kmeta-apiserver's over the same time.
    cpu_ready: f64,
    server_cpu_ready: f64,
    load: String,
    requests: String,
}

/// The machine's 1-minute load average (`/proc/loadavg`).
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "?".into())
}

/// Converges the case with one controller, stops it, then runs `KMETA_SCALE_COLDSTART_ROUNDS`
/// (2) rounds of the two modes and prints them side by side.
pub(crate) async fn coldstart(dir: &Path, case: &Case) -> anyhow::Result<()> {
    let mut rig = Rig::new(dir, case).await?;
    rig.start_controllers(dir, case).await?;
    rig.server.create_all(THINGS, run::parents(case)).await?;
    run::wait_converged(&rig.server, case, None).await?;
    rig.snap_when_quiet().await?;
    rig.ctrl.clear();
    println!(
        "  converged {} objects; cold starts (load average beside each):",
        case.objects()
    );
    let mut starts = Vec::new();
    for round in 1..=env_num("KMETA_SCALE_COLDSTART_ROUNDS", 2)? {
        for mode in ["off", "auto"] {
            let s = start(dir, &rig, case, mode).await?;
            println!(
                "    round {round}, --watch-list={mode}: /readyz {:.2} s, first sync {:.2} s; peak RSS {:.0} MiB at /readyz, {:.0} MiB at the first sync; CPU until /readyz: controller {:.2} s, kmeta-apiserver {:.2} s; load {}; controller requests until /readyz: {}",
                s.ready.as_secs_f64(),
                s.first_sync.as_secs_f64(),
                s.rss_ready,
                s.rss_first_sync,
                s.cpu_ready,
                s.server_cpu_ready,
                s.load,
                s.requests
            );
            starts.push(s);
        }
    }
    side_by_side(&starts);
    Ok(())
}

/// Ratios of the watch-list starts to the list-then-watch ones, by mean.
fn side_by_side(starts: &[Start]) {
    let mean = |mode: &str, f: &dyn Fn(&Start) -> f64| {
        let v: Vec<f64> = starts.iter().filter(|s| s.mode == mode).map(f).collect();
        v.iter().sum::<f64>() / v.len().max(1) as f64
    };
    let ratio = |f: &dyn Fn(&Start) -> f64| mean("auto", f) / mean("off", f);
    println!(
        "  watch-list against list-then-watch (means): /readyz {:.2}×, first sync {:.2}×, peak RSS at /readyz {:.2}×, at the first sync {:.2}×; CPU until /readyz: controller {:.2}×, kmeta-apiserver {:.2}×",
        ratio(&|s| s.ready.as_secs_f64()),
        ratio(&|s| s.first_sync.as_secs_f64()),
        ratio(&|s| s.rss_ready),
        ratio(&|s| s.rss_first_sync),
        ratio(&|s| s.cpu_ready),
        ratio(&|s| s.server_cpu_ready)
    );
}

/// One `kmeta run --watch-list=<mode>` from its spawn to its first hook call; killed after.
async fn start(dir: &Path, rig: &Rig, case: &Case, mode: &'static str) -> anyhow::Result<Start> {
    let load = load_average();
    let before = rig.server.counters().await?;
    let calls = hook::calls(rig.hook_port).await?;
    let server0 = rig.server.proc.usage()?;
    let health = free_port()?;
    let mut cmd = Command::new(bin("kmeta")?);
    cmd.args(["run", "--kubeconfig"])
        .arg(&rig.server.kubeconfig)
        .arg("--metrics-address=0")
        .arg(format!("--health-probe-bind-address=127.0.0.1:{health}"))
        .arg(format!("--workers={}", case.workers))
        .arg(format!("--client-go-qps={}", case.qps))
        .arg(format!("--watch-list={mode}"))
        .args(["--discovery-interval=1s", "--log-level=warn"]);
    let t0 = Instant::now();
    let proc = Proc::spawn("kmeta run", cmd, &dir.join(format!("coldstart-{mode}.log")))?;
    while http_get(health, "/readyz").await.map(|r| r.0) != Some(200) {
        deadline(t0, "/readyz")?;
        tokio::time::sleep(TICK).await;
    }
    let ready = t0.elapsed();
    let at_ready: Usage = proc.usage()?;
    let server_cpu_ready = rig.server.proc.usage()?.cpu_s - server0.cpu_s;
    let d = rig.server.counters().await?.since(&before);
    while hook::calls(rig.hook_port).await? <= calls {
        deadline(t0, "a first sync")?;
        tokio::time::sleep(TICK).await;
    }
    let first_sync = t0.elapsed();
    let at_sync = proc.usage()?;
    drop(proc);
    Ok(Start {
        mode,
        ready,
        first_sync,
        rss_ready: at_ready.hwm_mib,
        rss_first_sync: at_sync.hwm_mib,
        cpu_ready: at_ready.cpu_s,
        server_cpu_ready,
        load,
        requests: run::by_verb(&d),
    })
}

fn deadline(t0: Instant, what: &str) -> anyhow::Result<()> {
    if t0.elapsed() > DEADLINE {
        bail!("no {what} within {} s", DEADLINE.as_secs());
    }
    Ok(())
}
