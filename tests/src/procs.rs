//! Helpers for benchmarks that run the API server, the controller and a hook as separate
//! processes: spawning them, reading each one's CPU time and peak RSS from `/proc`, a plain
//! HTTP/1.0 GET for their endpoints, and Prometheus histogram quantiles.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context as _, bail};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A child process, killed when dropped.
pub struct Proc {
    /// What it is (for messages).
    pub name: String,
    child: Child,
}

impl Proc {
    /// Spawns `cmd` with stdout piped (see [`Proc::first_line`]) and stderr to `log`.
    pub fn spawn(name: &str, mut cmd: Command, log: &Path) -> anyhow::Result<Proc> {
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(log)?)
            .spawn()
            .with_context(|| format!("spawning {name}"))?;
        Ok(Proc {
            name: name.to_owned(),
            child,
        })
    }

    /// Process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The first line the process prints (a URL or a port), read on a blocking thread with
    /// a deadline.
    pub async fn first_line(&mut self, deadline: Duration) -> anyhow::Result<String> {
        let Some(mut out) = self.child.stdout.take() else {
            bail!("{}: stdout already taken", self.name);
        };
        let read = tokio::task::spawn_blocking(move || {
            use std::io::Read;
            let mut line = Vec::new();
            let mut byte = [0u8; 1];
            while out.read(&mut byte).ok() == Some(1) && byte[0] != b'\n' {
                line.push(byte[0]);
            }
            String::from_utf8_lossy(&line).trim().to_owned()
        });
        let line = tokio::time::timeout(deadline, read)
            .await
            .with_context(|| format!("{} printed nothing", self.name))??;
        if line.is_empty() {
            bail!("{} exited before printing its address", self.name);
        }
        Ok(line)
    }

    /// CPU seconds and peak RSS so far.
    pub fn usage(&self) -> anyhow::Result<Usage> {
        Usage::of(self.pid())
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// CPU time (user + system) and peak resident set (`VmHWM`) of a process.
#[derive(Debug, Clone, Copy, Default)]
pub struct Usage {
    /// User + system CPU seconds.
    pub cpu_s: f64,
    /// Peak RSS in MiB.
    pub hwm_mib: f64,
}

impl Usage {
    /// Reads `/proc/<pid>/stat` and `/proc/<pid>/status`.
    pub fn of(pid: u32) -> anyhow::Result<Usage> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
        Ok(Usage {
            cpu_s: cpu_ticks(&stat)? as f64 / clock_ticks(),
            hwm_mib: vm_hwm_kib(&std::fs::read_to_string(format!("/proc/{pid}/status"))?)? / 1024.0,
        })
    }
}

/// utime + stime (fields 14 and 15) of a `/proc/<pid>/stat` line; the command name (field 2)
/// may hold spaces and parentheses, so fields are counted after its last `)`.
pub fn cpu_ticks(stat: &str) -> anyhow::Result<u64> {
    let rest = stat
        .rsplit_once(')')
        .map(|(_, r)| r)
        .context("/proc stat without ')'")?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let field = |i: usize| -> anyhow::Result<u64> {
        f.get(i)
            .context("/proc stat too short")?
            .parse()
            .context("/proc stat field")
    };
    // after ")" the first field is field 3 (state): utime is field 14, stime 15
    Ok(field(11)? + field(12)?)
}

/// `VmHWM` in KiB from a `/proc/<pid>/status` text.
pub fn vm_hwm_kib(status: &str) -> anyhow::Result<f64> {
    status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|n| n.parse().ok())
        .context("no VmHWM in /proc status")
}

fn clock_ticks() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(100.0)
}

/// The directory of the release binaries `kmeta` and `kmeta-apiserver`: `$KMETA_BIN_DIR`, else
/// the profile directory the running bench binary lives under (`target/release/deps/..`).
pub fn bin(name: &str) -> anyhow::Result<PathBuf> {
    let dir = match std::env::var_os("KMETA_BIN_DIR") {
        Some(d) => PathBuf::from(d),
        None => std::env::current_exe()?
            .parent()
            .and_then(Path::parent)
            .context("bench binary has no profile directory")?
            .to_path_buf(),
    };
    let path = dir.join(name);
    if !path.exists() {
        bail!(
            "{} not found: build it first (`cargo build --release -p kmeta -p kmeta-apiserver`) or set KMETA_BIN_DIR",
            path.display()
        );
    }
    Ok(path)
}

/// GET `path` from `127.0.0.1:port` over HTTP/1.0: the status code and body.
pub async fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .ok()?;
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").as_bytes())
        .await
        .ok()?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await.ok()?;
    let text = String::from_utf8_lossy(&buf);
    let (head, body) = text.split_once("\r\n\r\n")?;
    let code = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((code, body.to_owned()))
}

/// A free port on 127.0.0.1.
pub fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// The `q` quantile (0..1) of Prometheus histogram `name` summed over every label set, by
/// linear interpolation inside the bucket (as PromQL's `histogram_quantile`); `None` without
/// observations.
pub fn histogram_quantile(metrics: &str, name: &str, q: f64) -> Option<f64> {
    let mut buckets: Vec<(f64, f64)> = Vec::new();
    let prefix = format!("{name}_bucket{{");
    for line in metrics.lines().filter(|l| l.starts_with(&prefix)) {
        let le = line.split("le=\"").nth(1)?.split('"').next()?;
        let le: f64 = if le == "+Inf" {
            f64::INFINITY
        } else {
            le.parse().ok()?
        };
        let n: f64 = line.rsplit(' ').next()?.parse().ok()?;
        match buckets.iter_mut().find(|(b, _)| *b == le) {
            Some(b) => b.1 += n,
            None => buckets.push((le, n)),
        }
    }
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    quantile_of_buckets(&buckets, q)
}

/// Quantile of cumulative buckets `(upper bound, count)` sorted by bound.
pub fn quantile_of_buckets(buckets: &[(f64, f64)], q: f64) -> Option<f64> {
    let total = buckets.last()?.1;
    if total <= 0.0 {
        return None;
    }
    let rank = q * total;
    let (mut lower, mut below) = (0.0, 0.0);
    for &(le, n) in buckets {
        if n >= rank {
            if le.is_infinite() {
                return Some(lower);
            }
            let inside = n - below;
            let frac = if inside > 0.0 {
                (rank - below) / inside
            } else {
                1.0
            };
            return Some(lower + (le - lower) * frac);
        }
        (lower, below) = (le, n);
    }
    Some(lower)
}

/// Sum of the counter (or gauge) `name` over every label set.
pub fn metric_sum(metrics: &str, name: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|r| r.starts_with('{') || r.starts_with(' '))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn cpu_ticks_after_the_command_name() {
        let stat = "42 (a) b (c)) S 1 42 42 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 9 0 1 1 1";
        assert_eq!(cpu_ticks(stat).unwrap(), 300);
        assert!(cpu_ticks("42 (x").is_err());
    }

    #[test]
    fn hwm_from_status() {
        let status = "Name:\tkmeta\nVmPeak:\t  9000 kB\nVmHWM:\t  2048 kB\n";
        assert_eq!(vm_hwm_kib(status).unwrap(), 2048.0);
        assert!(vm_hwm_kib("Name:\tx\n").is_err());
    }

    #[test]
    fn quantiles_interpolate_inside_buckets_over_label_sets() {
        let m = "# HELP x\nd_bucket{c=\"a\",le=\"0.1\"} 5\nd_bucket{c=\"a\",le=\"1\"} 10\n\
                 d_bucket{c=\"a\",le=\"+Inf\"} 10\nd_bucket{c=\"b\",le=\"0.1\"} 5\n\
                 d_bucket{c=\"b\",le=\"1\"} 10\nd_bucket{c=\"b\",le=\"+Inf\"} 10\n";
        assert!((histogram_quantile(m, "d", 0.5).unwrap() - 0.1).abs() < 1e-9);
        assert!((histogram_quantile(m, "d", 0.75).unwrap() - 0.55).abs() < 1e-9);
        assert_eq!(histogram_quantile("", "d", 0.5), None);
    }

    #[test]
    fn sums_only_the_named_series() {
        let m = "k_total{a=\"1\"} 2\nk_total{a=\"2\"} 3\nk_total_other 7\nk_total 1\n";
        assert_eq!(metric_sum(m, "k_total"), 6.0);
    }
}
