//! The `kmeta run` replicas — two under leader election, or three with `--sharding` — as
//! processes the faults kill (-9), stop (SIGSTOP), continue and terminate (SIGTERM); a
//! supervisor restarts a replica that exited or was killed once its restart delay is over. Each
//! incarnation logs to its own file.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use kmeta_tests::procs::{bin, free_port};
use tokio::sync::Mutex;

/// The Lease the replicas elect a leader with (`--leader-election-id`), in `default`.
pub(crate) const LEASE: &str = "kmeta";
/// The bucket Leases' name prefix with `--sharding` (`--shard-lease-prefix`, kmeta's default).
pub(crate) const SHARD_PREFIX: &str = "kmeta-shard";

pub(crate) struct Replica {
    pub name: String,
    child: Option<Child>,
    incarnation: u32,
    /// Not restarted before this.
    down_until: Option<Instant>,
    /// Stopped by SIGSTOP (not restarted, not killed by the supervisor).
    pub stopped: bool,
}

pub(crate) struct Replicas {
    pub all: Mutex<Vec<Replica>>,
    dir: PathBuf,
    kubeconfig: PathBuf,
    /// `--sharding` with this many buckets, else leader election.
    buckets: Option<u32>,
}

impl Replicas {
    pub(crate) fn new(
        dir: &Path,
        kubeconfig: &Path,
        names: &[&str],
        buckets: Option<u32>,
    ) -> Arc<Replicas> {
        let all = names
            .iter()
            .map(|n| Replica {
                name: (*n).to_owned(),
                child: None,
                incarnation: 0,
                down_until: None,
                stopped: false,
            })
            .collect();
        Arc::new(Replicas {
            all: Mutex::new(all),
            dir: dir.to_owned(),
            kubeconfig: kubeconfig.to_owned(),
            buckets,
        })
    }

    /// Every log file written so far.
    pub(crate) fn logs(&self) -> Vec<PathBuf> {
        std::fs::read_dir(&self.dir)
            .map(|d| {
                d.filter_map(Result::ok)
                    .map(|e| e.path())
                    .filter(|p| p.extension().is_some_and(|x| x == "log"))
                    .collect()
            })
            .unwrap_or_default()
    }

    fn spawn(&self, r: &mut Replica) -> anyhow::Result<()> {
        r.incarnation += 1;
        let log = self.dir.join(format!("{}-{}.log", r.name, r.incarnation));
        let (metrics, health) = (free_port()?, free_port()?);
        let mode = match self.buckets {
            // the bucket Leases at kmeta's default timings (15 s, renew deadline 10 s, retry 2 s)
            Some(b) => vec![
                "--sharding".to_owned(),
                format!("--shard-buckets={b}"),
                format!("--shard-watch={}", super::shard::watch_mode()),
            ],
            None => vec![
                "--leader-election".to_owned(),
                format!("--leader-election-id={LEASE}"),
            ],
        };
        let child = Command::new(bin("kmeta")?)
            .args(["run", "--kubeconfig"])
            .arg(&self.kubeconfig)
            .args(mode)
            .args([
                "--leader-election-namespace=default",
                &format!("--metrics-address=127.0.0.1:{metrics}"),
                &format!("--health-probe-bind-address=127.0.0.1:{health}"),
                "--discovery-interval=2s",
                // Metacontroller's default 5 QPS cannot keep up with 10 edits a second: the
                // backlog, not a fault, would decide whether the end check passes
                "--client-go-qps=50",
                "--client-go-burst=100",
            ])
            .env("POD_NAME", &r.name)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log)?)
            .spawn()
            .with_context(|| format!("spawning kmeta run as {}", r.name))?;
        r.child = Some(child);
        r.down_until = None;
        r.stopped = false;
        Ok(())
    }

    /// Restarts whatever exited or was killed and is due; returns what it noticed.
    pub(crate) async fn supervise(&self) -> anyhow::Result<Vec<String>> {
        let mut notes = Vec::new();
        let mut all = self.all.lock().await;
        for r in all.iter_mut() {
            if let Some(c) = r.child.as_mut()
                && let Some(status) = c.try_wait()?
            {
                notes.push(format!("{} exited on its own ({status})", r.name));
                r.child = None;
            }
            if r.child.is_none() && r.down_until.is_none_or(|t| Instant::now() >= t) {
                self.spawn(r)?;
                notes.push(format!(
                    "{} started (incarnation {})",
                    r.name, r.incarnation
                ));
            }
        }
        Ok(notes)
    }

    /// kill -9 of `name`; restarted after `down`.
    pub(crate) async fn kill9(&self, name: &str, down: Duration) -> anyhow::Result<bool> {
        let mut all = self.all.lock().await;
        let Some(r) = all.iter_mut().find(|r| r.name == name) else {
            return Ok(false);
        };
        let Some(mut c) = r.child.take() else {
            return Ok(false);
        };
        if r.stopped {
            signal(c.id(), "CONT")?;
        }
        c.kill()?;
        c.wait()?;
        r.stopped = false;
        r.down_until = Some(Instant::now() + down);
        Ok(true)
    }

    /// SIGTERM of `name` (a graceful scale-down: it hands its work over and exits); the
    /// supervisor restarts it once it exited and `down` passed. False when it is not running.
    pub(crate) async fn term(&self, name: &str, down: Duration) -> anyhow::Result<bool> {
        let mut all = self.all.lock().await;
        let Some(r) = all.iter_mut().find(|r| r.name == name) else {
            return Ok(false);
        };
        let Some(c) = r.child.as_ref() else {
            return Ok(false);
        };
        if r.stopped {
            signal(c.id(), "CONT")?;
            r.stopped = false;
        }
        signal(c.id(), "TERM")?;
        r.down_until = Some(Instant::now() + down);
        Ok(true)
    }

    /// SIGSTOP (`stop`) or SIGCONT of `name`; false when it is not running.
    pub(crate) async fn pause(&self, name: &str, stop: bool) -> anyhow::Result<bool> {
        let mut all = self.all.lock().await;
        let Some(r) = all.iter_mut().find(|r| r.name == name) else {
            return Ok(false);
        };
        let Some(c) = r.child.as_ref() else {
            return Ok(false);
        };
        if r.stopped == stop {
            return Ok(false);
        }
        signal(c.id(), if stop { "STOP" } else { "CONT" })?;
        r.stopped = stop;
        Ok(true)
    }

    /// Continues every stopped replica and lets the supervisor restart the rest at once.
    pub(crate) async fn heal(&self) -> anyhow::Result<()> {
        let names: Vec<String> = self
            .all
            .lock()
            .await
            .iter()
            .map(|r| r.name.clone())
            .collect();
        for n in names {
            self.pause(&n, false).await?;
        }
        for r in self.all.lock().await.iter_mut() {
            r.down_until = None;
        }
        Ok(())
    }

    /// SIGTERM to every replica, then kill what is left after `grace`.
    pub(crate) async fn stop_all(&self, grace: Duration) {
        let mut all = self.all.lock().await;
        for r in all.iter_mut() {
            if let Some(c) = r.child.as_ref() {
                let _ = signal(c.id(), "CONT");
                let _ = signal(c.id(), "TERM");
            }
        }
        let deadline = Instant::now() + grace;
        for r in all.iter_mut() {
            if let Some(mut c) = r.child.take() {
                while Instant::now() < deadline && matches!(c.try_wait(), Ok(None)) {
                    std::thread::sleep(Duration::from_millis(50));
                }
                let _ = c.kill();
                let _ = c.wait();
            }
            r.down_until = Some(Instant::now() + Duration::from_secs(3600));
        }
    }
}

impl Drop for Replicas {
    fn drop(&mut self) {
        for r in self.all.get_mut().iter_mut() {
            if let Some(mut c) = r.child.take() {
                let _ = signal(c.id(), "CONT");
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }
}

fn signal(pid: u32, sig: &str) -> anyhow::Result<()> {
    let status = Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .status()?;
    anyhow::ensure!(status.success(), "kill -{sig} {pid}: {status}");
    Ok(())
}
