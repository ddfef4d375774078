//! The `process_*` series every Prometheus client library exports (client_golang's process
//! collector names them): CPU seconds, resident and virtual memory, open and maximum file
//! descriptors and the start time, read from `/proc/self` at each scrape. Where there is no
//! `/proc` (not Linux), none is exported, as the Go client does.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

/// Clock ticks per second of `/proc`'s CPU times and start time: the kernel's `USER_HZ`, 100 on
/// every Linux ABI (Prometheus' procfs library uses the same constant).
const USER_HZ: f64 = 100.0;

/// One reading of `/proc/self/stat`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct ProcessStats {
    /// User plus system CPU time, seconds.
    pub cpu_seconds: f64,
    /// Virtual memory size, bytes.
    pub virtual_bytes: f64,
    /// Start time, seconds since the Unix epoch.
    pub start_time_seconds: f64,
}

/// What `/proc/self/stat` and `/proc/stat` tell, or `None` when either does not parse.
///
/// `stat` is `/proc/self/stat`: after the command in parentheses (which may hold spaces and
/// parentheses itself), field 3 is the state; fields 14 and 15 are utime and stime (ticks), 22
/// the start time (ticks after boot) and 23 the virtual size (bytes). `boot` is `/proc/stat`,
/// whose `btime` line is the boot time (epoch seconds).
pub(super) fn parse_stat(stat: &str, boot: &str) -> Option<ProcessStats> {
    let after = &stat[stat.rfind(')')? + 1..];
    // fields[0] is field 3 (state)
    let fields: Vec<&str> = after.split_whitespace().collect();
    let field = |n: usize| -> Option<f64> { fields.get(n - 3)?.parse().ok() };
    let btime: f64 = boot
        .lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()?;
    Some(ProcessStats {
        cpu_seconds: (field(14)? + field(15)?) / USER_HZ,
        virtual_bytes: field(23)?,
        start_time_seconds: btime + field(22)? / USER_HZ,
    })
}

/// The soft limit on open files from `/proc/self/limits` (`None`: unlimited or unreadable).
pub(super) fn parse_max_fds(limits: &str) -> Option<f64> {
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line["Max open files".len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The resident set from `/proc/self/status`'s `VmRSS:` line (kB), in bytes.
pub(super) fn parse_resident(status: &str) -> Option<f64> {
    let kb: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb * 1024.0)
}

/// The `process_*` collector.
#[derive(Debug, Default)]
pub(super) struct ProcessCollector;

/// Writes one gauge.
fn gauge(encoder: &mut DescriptorEncoder, name: &str, help: &str, v: f64) -> std::fmt::Result {
    let g = ConstGauge::new(v);
    g.encode(encoder.encode_descriptor(name, help, None, g.metric_type())?)
}

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> std::fmt::Result {
        let read = |p: &str| std::fs::read_to_string(p).ok();
        let stats = read("/proc/self/stat")
            .zip(read("/proc/stat"))
            .and_then(|(s, b)| parse_stat(&s, &b));
        if let Some(s) = stats {
            let cpu = ConstCounter::new(s.cpu_seconds);
            cpu.encode(encoder.encode_descriptor(
                "process_cpu_seconds",
                "Total user and system CPU time spent in seconds.",
                None,
                cpu.metric_type(),
            )?)?;
            let e = &mut encoder;
            gauge(
                e,
                "process_virtual_memory_bytes",
                "Virtual memory size in bytes.",
                s.virtual_bytes,
            )?;
            gauge(
                e,
                "process_start_time_seconds",
                "Start time of the process since unix epoch in seconds.",
                s.start_time_seconds,
            )?;
        }
        if let Some(rss) = read("/proc/self/status").and_then(|s| parse_resident(&s)) {
            let help = "Resident memory size in bytes.";
            gauge(&mut encoder, "process_resident_memory_bytes", help, rss)?;
        }
        if let Ok(fds) = std::fs::read_dir("/proc/self/fd") {
            let open = fds.count() as f64;
            gauge(
                &mut encoder,
                "process_open_fds",
                "Number of open file descriptors.",
                open,
            )?;
        }
        if let Some(max) = read("/proc/self/limits").and_then(|l| parse_max_fds(&l)) {
            gauge(
                &mut encoder,
                "process_max_fds",
                "Maximum number of open file descriptors.",
                max,
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_read_after_the_command_whatever_it_holds() {
        // a command with a space and a parenthesis, as `comm` may be
        let stat = "4242 (km eta) x) S 1 4242 4242 0 -1 4194560 900 0 0 0 250 50 0 0 20 0 9 0 \
                    12345 104857600 2560 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0";
        let boot = "cpu  1 2 3\nbtime 1700000000\nprocesses 9\n";
        let s = parse_stat(stat, boot).unwrap();
        assert_eq!(s.cpu_seconds, 3.0);
        assert_eq!(s.virtual_bytes, 104_857_600.0);
        assert_eq!(s.start_time_seconds, 1_700_000_123.45);
        assert_eq!(parse_stat("garbage", boot), None);
        assert_eq!(parse_stat(stat, "cpu 1\n"), None);
        let status = "Name:\tkmeta\nVmSize:\t  102400 kB\nVmRSS:\t    2048 kB\n";
        assert_eq!(parse_resident(status), Some(2048.0 * 1024.0));
        assert_eq!(parse_resident("Name: x\n"), None);
    }

    #[test]
    fn max_fds_is_the_soft_limit() {
        let limits = "Limit                     Soft Limit           Hard Limit           Units\n\
                      Max open files            1024                 524288               files\n";
        assert_eq!(parse_max_fds(limits), Some(1024.0));
        let unlimited =
            "Max open files            unlimited            unlimited            files\n";
        assert_eq!(parse_max_fds(unlimited), None);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn this_process_is_described() {
        let mut registry = prometheus_client::registry::Registry::default();
        registry.register_collector(Box::new(ProcessCollector));
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &registry).unwrap();
        for name in [
            "process_cpu_seconds_total ",
            "process_resident_memory_bytes ",
            "process_virtual_memory_bytes ",
            "process_start_time_seconds ",
            "process_open_fds ",
            "process_max_fds ",
        ] {
            assert!(out.lines().any(|l| l.starts_with(name)), "{name}: {out}");
        }
    }
}
