//! The standard `process_*` metrics (CPU time, memory, file descriptors, start time), read
//! from `/proc/self` at scrape time by a [`Collector`]. Linux only: elsewhere the collector
//! is not registered.
//!
//! Each value is read on its own; one that cannot be read (a hardened `/proc`, an exotic
//! kernel) is left out of the scrape instead of failing it.

use std::fmt;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Unit;

/// Clock ticks per second of the `utime`, `stime` and `starttime` fields of
/// `/proc/<pid>/stat`. The kernel reports them in `USER_HZ`, which is 100 on every Linux
/// architecture (it is part of the user-space ABI, independent of the kernel's `HZ`).
const USER_HZ: f64 = 100.0;

/// One scrape's worth of process statistics; `None` where a source could not be read.
#[derive(Debug, Default, Clone, PartialEq)]
pub(super) struct ProcessStats {
    /// User plus system CPU time, seconds.
    pub(super) cpu_seconds: Option<f64>,
    /// Resident set size, bytes.
    pub(super) resident_bytes: Option<f64>,
    /// Virtual memory size, bytes.
    pub(super) virtual_bytes: Option<f64>,
    /// Open file descriptors.
    pub(super) open_fds: Option<f64>,
    /// The soft limit on open file descriptors.
    pub(super) max_fds: Option<f64>,
    /// Start time of the process, seconds since the Unix epoch.
    pub(super) start_time_seconds: Option<f64>,
}

/// The fields of `/proc/<pid>/stat` volmig uses.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Stat {
    /// `utime + stime`, clock ticks.
    pub(super) cpu_ticks: u64,
    /// `starttime`: clock ticks after boot.
    pub(super) start_ticks: u64,
    /// `vsize`, bytes.
    pub(super) virtual_bytes: u64,
}

/// Parses `/proc/<pid>/stat`. The second field (the command name, in parentheses) may
/// itself contain blanks and parentheses, so fields are counted after its last `)`.
pub(super) fn parse_stat(text: &str) -> Option<Stat> {
    let (_, after_comm) = text.rsplit_once(')')?;
    // Field 3 (`state`) is the first one after the command name.
    let fields: Vec<&str> = after_comm.split_whitespace().collect();
    let field = |n: usize| -> Option<u64> { fields.get(n.checked_sub(3)?)?.parse().ok() };
    Some(Stat {
        cpu_ticks: field(14)?.checked_add(field(15)?)?,
        start_ticks: field(22)?,
        virtual_bytes: field(23)?,
    })
}

/// The `VmRSS` line of `/proc/<pid>/status`, in bytes.
pub(super) fn parse_status_rss(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("VmRSS:"))?;
    let mut parts = line["VmRSS:".len()..].split_whitespace();
    let value: u64 = parts.next()?.parse().ok()?;
    match parts.next() {
        Some("kB") => value.checked_mul(1024),
        _ => None,
    }
}

/// The `btime` line of `/proc/stat`: boot time, seconds since the Unix epoch.
pub(super) fn parse_boot_time(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
}

/// The soft limit of the `Max open files` line of `/proc/<pid>/limits`; `None` when
/// unlimited.
pub(super) fn parse_max_open_files(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("Max open files"))?;
    line["Max open files".len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

impl ProcessStats {
    /// Reads the statistics of the current process from `/proc`.
    pub(super) fn read() -> Self {
        let read = |path: &str| std::fs::read_to_string(path).ok();
        let stat = read("/proc/self/stat").as_deref().and_then(parse_stat);
        let boot = read("/proc/stat").as_deref().and_then(parse_boot_time);
        let open_fds = std::fs::read_dir("/proc/self/fd")
            .ok()
            .map(|entries| entries.count() as f64);
        ProcessStats {
            cpu_seconds: stat.map(|s| s.cpu_ticks as f64 / USER_HZ),
            resident_bytes: read("/proc/self/status")
                .as_deref()
                .and_then(parse_status_rss)
                .map(|b| b as f64),
            virtual_bytes: stat.map(|s| s.virtual_bytes as f64),
            open_fds,
            max_fds: read("/proc/self/limits")
                .as_deref()
                .and_then(parse_max_open_files)
                .map(|n| n as f64),
            start_time_seconds: stat
                .zip(boot)
                .map(|(s, boot)| boot as f64 + s.start_ticks as f64 / USER_HZ),
        }
    }
}

/// Encodes the process metrics of one scrape.
#[derive(Debug, Default)]
pub(super) struct ProcessCollector;

fn gauge(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    unit: Option<&Unit>,
    value: Option<f64>,
) -> fmt::Result {
    let Some(value) = value else { return Ok(()) };
    let metric = ConstGauge::new(value);
    metric.encode(encoder.encode_descriptor(name, help, unit, metric.metric_type())?)
}

impl ProcessCollector {
    pub(super) fn encode_stats(
        stats: &ProcessStats,
        mut encoder: DescriptorEncoder,
    ) -> fmt::Result {
        if let Some(cpu) = stats.cpu_seconds {
            let metric = ConstCounter::new(cpu);
            metric.encode(encoder.encode_descriptor(
                "process_cpu",
                "Total user and system CPU time spent.",
                Some(&Unit::Seconds),
                metric.metric_type(),
            )?)?;
        }
        gauge(
            &mut encoder,
            "process_resident_memory",
            "Resident memory size.",
            Some(&Unit::Bytes),
            stats.resident_bytes,
        )?;
        gauge(
            &mut encoder,
            "process_virtual_memory",
            "Virtual memory size.",
            Some(&Unit::Bytes),
            stats.virtual_bytes,
        )?;
        gauge(
            &mut encoder,
            "process_open_fds",
            "Number of open file descriptors.",
            None,
            stats.open_fds,
        )?;
        gauge(
            &mut encoder,
            "process_max_fds",
            "Maximum number of open file descriptors (soft limit).",
            None,
            stats.max_fds,
        )?;
        gauge(
            &mut encoder,
            "process_start_time",
            "Start time of the process since the Unix epoch.",
            Some(&Unit::Seconds),
            stats.start_time_seconds,
        )
    }
}

impl Collector for ProcessCollector {
    fn encode(&self, encoder: DescriptorEncoder) -> fmt::Result {
        Self::encode_stats(&ProcessStats::read(), encoder)
    }
}
