//! What the benchmark reads from `/proc`: CPU time per thread (nanoseconds, from
//! `schedstat`), resident memory, and the machine's description.

use std::collections::HashMap;
use std::path::Path;

use serde::Serialize;

/// CPU time of every thread of one process at one moment.
#[derive(Debug, Clone, Default)]
pub struct CpuSnapshot {
    /// Thread ID → (thread name, nanoseconds on CPU so far).
    tasks: HashMap<u32, (String, u64)>,
}

/// Clock ticks per second of `/proc/*/stat` (Linux fixes USER_HZ at 100).
const TICKS_PER_SECOND: u64 = 100;

fn task_cpu_ns(task_dir: &Path) -> Option<u64> {
    if let Ok(text) = std::fs::read_to_string(task_dir.join("schedstat"))
        && let Some(ns) = text.split_whitespace().next().and_then(|f| f.parse().ok())
    {
        return Some(ns);
    }
    // Without schedstat: utime + stime in ticks (fields 14 and 15, after the `(comm)`).
    let stat = std::fs::read_to_string(task_dir.join("stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) * (1_000_000_000 / TICKS_PER_SECOND))
}

impl CpuSnapshot {
    /// Reads every thread of `pid` (threads that end while reading are skipped).
    pub fn read(pid: u32) -> std::io::Result<CpuSnapshot> {
        let mut tasks = HashMap::new();
        for entry in std::fs::read_dir(format!("/proc/{pid}/task"))? {
            let Ok(entry) = entry else { continue };
            let Some(tid) = entry.file_name().to_str().and_then(|s| s.parse().ok()) else {
                continue;
            };
            let dir = entry.path();
            let comm = std::fs::read_to_string(dir.join("comm"))
                .map(|c| c.trim().to_owned())
                .unwrap_or_default();
            if let Some(ns) = task_cpu_ns(&dir) {
                tasks.insert(tid, (comm, ns));
            }
        }
        Ok(CpuSnapshot { tasks })
    }

    /// CPU nanoseconds used between `self` (earlier) and `later` by threads whose name
    /// passes `keep`. Threads that ended in between lose their last slice; new threads
    /// count in full.
    pub fn used_until(&self, later: &CpuSnapshot, keep: impl Fn(&str) -> bool) -> u64 {
        later
            .tasks
            .iter()
            .filter(|(_, (comm, _))| keep(comm))
            .map(|(tid, (_, now))| {
                let before = self.tasks.get(tid).map_or(0, |(_, ns)| *ns);
                now.saturating_sub(before)
            })
            .sum()
    }

    /// CPU nanoseconds of all threads between `self` and `later`.
    pub fn total_until(&self, later: &CpuSnapshot) -> u64 {
        self.used_until(later, |_| true)
    }
}

/// CPU time of the whole machine at one moment, from the `cpu` line of `/proc/stat`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MachineCpu {
    /// Nanoseconds any core spent running something (user, nice, system, irq, softirq).
    pub busy_ns: u64,
    /// Nanoseconds the hypervisor ran something else while a core of this machine wanted
    /// to run (`steal`).
    pub steal_ns: u64,
}

impl MachineCpu {
    /// Reads `/proc/stat` (`None` when it cannot be read or parsed).
    pub fn read() -> Option<MachineCpu> {
        MachineCpu::parse(&std::fs::read_to_string("/proc/stat").ok()?)
    }

    /// Parses the text of `/proc/stat`.
    pub fn parse(stat: &str) -> Option<MachineCpu> {
        let line = stat.lines().find(|l| l.starts_with("cpu "))?;
        let ticks: Vec<u64> = line
            .split_whitespace()
            .skip(1)
            .map(str::parse)
            .collect::<Result<_, _>>()
            .ok()?;
        let tick = |i: usize| ticks.get(i).copied().unwrap_or(0);
        let ns = 1_000_000_000 / TICKS_PER_SECOND;
        // user nice system idle iowait irq softirq steal (guest is inside user).
        Some(MachineCpu {
            busy_ns: (tick(0) + tick(1) + tick(2) + tick(5) + tick(6)) * ns,
            steal_ns: tick(7) * ns,
        })
    }
}

/// Memory of one process, in KiB, from `/proc/PID/status`.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Memory {
    /// Resident set size (`VmRSS`).
    pub rss_kib: u64,
    /// Anonymous resident memory (`RssAnon`): the heap and stacks.
    pub rss_anon_kib: u64,
    /// Peak resident set size (`VmHWM`).
    pub peak_kib: u64,
}

/// Reads the memory of `pid`.
pub fn memory(pid: u32) -> std::io::Result<Memory> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let field = |name: &str| -> u64 {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    };
    Ok(Memory {
        rss_kib: field("VmRSS:"),
        rss_anon_kib: field("RssAnon:"),
        peak_kib: field("VmHWM:"),
    })
}

/// The machine the numbers come from.
#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    /// CPU model (`/proc/cpuinfo`).
    pub cpu: String,
    /// Logical cores available to the process.
    pub cores: usize,
    /// Physical memory in MiB.
    pub memory_mib: u64,
    /// Kernel release.
    pub kernel: String,
    /// `rustc --version` of the toolchain that built the benchmark, when known.
    pub rustc: String,
}

impl Machine {
    /// Reads the description of this machine.
    pub fn read() -> Machine {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu = cpuinfo
            .lines()
            .find_map(|l| l.strip_prefix("model name"))
            .map(|v| v.trim_start_matches([' ', '\t', ':']).trim().to_owned())
            .unwrap_or_else(|| "unknown".into());
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let memory_mib = meminfo
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map_or(0, |kib| kib / 1024);
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|s| s.trim().to_owned())
            .unwrap_or_default();
        let rustc = std::process::Command::new("rustc")
            .arg("--version")
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
            .unwrap_or_default();
        Machine {
            cpu,
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            memory_mib,
            kernel,
            rustc,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_process_has_cpu_and_memory() {
        let before = CpuSnapshot::read(std::process::id()).unwrap();
        let mut x = 0u64;
        for i in 0..20_000_000u64 {
            x = x.wrapping_add(i * i);
        }
        std::hint::black_box(x);
        let after = CpuSnapshot::read(std::process::id()).unwrap();
        assert!(before.total_until(&after) > 0);
        let mem = memory(std::process::id()).unwrap();
        assert!(mem.rss_kib > 0 && mem.peak_kib >= mem.rss_kib);
        let m = Machine::read();
        assert!(m.cores >= 1 && m.memory_mib > 0);
    }

    #[test]
    fn machine_cpu_from_proc_stat() {
        let stat = "cpu  100 20 30 4000 5 6 7 8 0 0\ncpu0 50 10 15 2000 2 3 3 4 0 0\n";
        let m = MachineCpu::parse(stat).unwrap();
        assert_eq!(m.busy_ns, (100 + 20 + 30 + 6 + 7) * 10_000_000);
        assert_eq!(m.steal_ns, 8 * 10_000_000);
        assert_eq!(MachineCpu::parse("intr 1 2 3\n"), None);
        assert!(MachineCpu::read().is_some_and(|m| m.busy_ns > 0));
    }
}
