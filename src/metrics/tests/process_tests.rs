//! The process_* metrics read from /proc at scrape time.

use super::*;
use crate::metrics::process;

#[test]
fn process_metrics_are_read_at_scrape_time() {
    let m = Metrics::new();
    let text = m.encode_prometheus_text();
    for (name, kind) in [
        ("process_cpu_seconds_total", "counter"),
        ("process_resident_memory_bytes", "gauge"),
        ("process_virtual_memory_bytes", "gauge"),
        ("process_open_fds", "gauge"),
        ("process_max_fds", "gauge"),
        ("process_start_time_seconds", "gauge"),
    ] {
        assert!(
            text.contains(&format!("# TYPE {name} {kind}\n")),
            "{name}: {text}"
        );
        let value = must(&text, name);
        // A fresh test process may not have used a full clock tick of CPU yet.
        let floor_ok = if name == "process_cpu_seconds_total" {
            value >= 0.0
        } else {
            value > 0.0
        };
        assert!(floor_ok, "{name} = {value}: {text}");
    }
    let om = m.encode();
    assert!(om.contains("# TYPE process_cpu_seconds counter\n"), "{om}");
    assert!(sample(&om, "process_cpu_seconds_total").is_some(), "{om}");

    // Start time: within a day of now (the test process started moments ago).
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs_f64();
    let start = must(&text, "process_start_time_seconds");
    assert!(
        start <= now + 1.0 && now - start < 86_400.0,
        "{start} vs {now}"
    );
    // RSS: more than 1 MiB, less than the machine.
    let rss = must(&text, "process_resident_memory_bytes");
    assert!((1_048_576.0..1e12).contains(&rss), "{rss}");

    // Evaluated at scrape time: opening files moves the FD count of the next scrape.
    let files: Vec<std::fs::File> = (0..16)
        .map(|_| std::fs::File::open("/proc/self/stat").expect("open"))
        .collect();
    let more = must(&m.encode_prometheus_text(), "process_open_fds");
    drop(files);
    let fewer = must(&m.encode_prometheus_text(), "process_open_fds");
    assert!(
        more >= fewer + 16.0,
        "16 more files open: {more} vs {fewer} after closing"
    );
}

#[test]
fn proc_parsers_read_the_kernel_formats() {
    use process::{parse_boot_time, parse_max_open_files, parse_stat, parse_status_rss};
    // A command name with blanks and parentheses; fields 14/15 utime/stime, 22 starttime,
    // 23 vsize.
    let stat = "4242 (my (odd) cmd) S 1 4242 4242 0 -1 4194560 500 0 0 0 \
                250 50 0 0 20 0 9 0 123456 987654321 2048 18446744073709551615 1 1 0 0 0 0 0";
    let parsed = parse_stat(stat).expect("parses");
    assert_eq!(parsed.cpu_ticks, 300);
    assert_eq!(parsed.start_ticks, 123_456);
    assert_eq!(parsed.virtual_bytes, 987_654_321);
    assert_eq!(parse_stat("4242 (truncated) S 1 2"), None);
    assert_eq!(parse_stat("no parenthesis"), None);

    let status = "Name:\tvolmig\nVmPeak:\t  9000 kB\nVmRSS:\t    2048 kB\nThreads:\t9\n";
    assert_eq!(parse_status_rss(status), Some(2_097_152));
    assert_eq!(parse_status_rss("Name:\tkthread\n"), None);
    assert_eq!(parse_status_rss("VmRSS:\t12 MB\n"), None, "unknown unit");

    assert_eq!(
        parse_boot_time("cpu  1 2 3\nintr 5\nbtime 1700000000\nprocesses 9\n"),
        Some(1_700_000_000)
    );
    assert_eq!(parse_boot_time("cpu 1\n"), None);

    let limits = "Limit                     Soft Limit           Hard Limit           Units     \n\
                  Max cpu time              unlimited            unlimited            seconds   \n\
                  Max open files            1024                 1048576              files     \n";
    assert_eq!(parse_max_open_files(limits), Some(1024));
    let unlimited = "Max open files            unlimited            unlimited            files\n";
    assert_eq!(parse_max_open_files(unlimited), None);
}

#[cfg(target_os = "linux")]
#[test]
fn process_stats_of_this_process() {
    let stats = process::ProcessStats::read();
    let own_start = stats.start_time_seconds.expect("start time");
    let cpu = stats.cpu_seconds.expect("cpu");
    assert!(cpu >= 0.0);
    // Burn some CPU: the counter moves.
    let mut x = 0u64;
    let started = std::time::Instant::now();
    while started.elapsed() < Duration::from_millis(300) {
        x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
    }
    let later = process::ProcessStats::read();
    assert!(
        later.cpu_seconds.expect("cpu") > cpu,
        "CPU time did not grow"
    );
    assert_eq!(
        later.start_time_seconds,
        Some(own_start),
        "start time is fixed"
    );
    assert!(later.open_fds.expect("fds") >= 3.0);
    assert!(
        later
            .max_fds
            .is_none_or(|m| m >= later.open_fds.unwrap_or(0.0))
    );
}
