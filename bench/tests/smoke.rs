//! Smoke run of `volmig-bench` at tiny sizes (one run per figure): the real `volmig`
//! binary, the vCenter simulator and the API test server, every scenario, into a temp
//! directory. Checks that the three kinds of output exist and parse, and that the figures
//! that do not depend on timing hold (no writes in a steady pass, every volume counted).
//! Speed is not asserted here: that is what `make bench` measures.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "test code: failures should panic"
)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

/// `make -s vcsim` under the lock the other test crates use (make rebuilds only when stale).
fn vcsim_binary() -> PathBuf {
    let root = workspace();
    let target = root.join("target");
    std::fs::create_dir_all(target.join("vcsim")).expect("target/vcsim");
    let lock = std::fs::File::create(target.join("vcsim/.build.lock")).expect("lock file");
    lock.lock().expect("lock");
    let out = Command::new("make")
        .args(["-s", "vcsim"])
        .arg(format!("TARGET_DIR={}", target.display()))
        .current_dir(&root)
        .output()
        .expect("run make vcsim");
    drop(lock);
    assert!(
        out.status.success(),
        "make vcsim failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    target.join("vcsim/vcsim-harness")
}

fn png_size(path: &Path) -> (u32, u32, bool) {
    let img = image::open(path)
        .unwrap_or_else(|e| panic!("{} is not a PNG: {e}", path.display()))
        .to_rgb8();
    let drawn = img.pixels().any(|p| p.0 != [255, 255, 255]);
    (img.width(), img.height(), drawn)
}

/// `out/results.json`, parsed.
fn results(out: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).expect("results.json"))
        .expect("results.json parses")
}

/// `volmig-bench --scale=smoke` writing into `dir/out`, with `extra` arguments.
fn smoke_command(dir: &Path, vcsim: &Path, extra: &[&str]) -> Command {
    // volmig's main.rs, built by cargo with this test (see bench/Cargo.toml).
    let volmig = PathBuf::from(env!("CARGO_BIN_EXE_volmig-bench-daemon"));
    let mut command = Command::new(env!("CARGO_BIN_EXE_volmig-bench"));
    command
        .arg("--scale=smoke")
        .arg("--out")
        .arg(dir.join("out"))
        .arg("--logs")
        .arg(dir.join("logs"))
        .arg("--volmig")
        .arg(&volmig)
        .arg("--vcsim")
        .arg(vcsim)
        .args(extra)
        .env_remove("BENCH_SCALE");
    command
}

#[test]
fn smoke_run_writes_results_report_and_charts() {
    let vcsim = vcsim_binary();
    let dir = tempfile::tempdir().expect("temp dir");
    let out = dir.path().join("out");
    let status = smoke_command(dir.path(), &vcsim, &[])
        .status()
        .expect("run volmig-bench");
    assert!(
        status.success(),
        "volmig-bench --scale=smoke failed: {status}"
    );

    let json = results(&out);
    assert_eq!(json["scale"], "smoke");
    assert!(json["machine"]["cores"].as_u64().unwrap() >= 1);
    let throughput = json["throughput"].as_array().expect("throughput rows");
    assert_eq!(throughput.len(), 2, "L = 50 ms × C ∈ {{1, 8}}");
    for t in throughput {
        assert!(t["volumes_per_second"]["median"].as_f64().unwrap() > 0.0);
        assert!(t["ideal_per_second"].as_f64().unwrap() > 0.0);
        // The bare client ran at the same point and made a registration's vCenter calls.
        let bare = &t["bare"];
        assert!(
            bare["volumes_per_second"]["median"].as_f64().unwrap() > 0.0,
            "{t}"
        );
        assert_eq!(bare["sim_calls_by_method"]["CnsCreateVolume"], 1.0, "{t}");
        assert_eq!(
            bare["sim_calls_by_method"]["QueryVirtualDiskUuid"], 1.0,
            "{t}"
        );
        // Run i of volmig paired with run i of the bare client; the goal uses the median.
        assert!(t["ratio_to_bare"]["median"].as_f64().unwrap() > 0.0, "{t}");
        let pairs = t["pairs"].as_array().expect("paired runs");
        assert_eq!(pairs.len(), 1, "{t}");
        assert_eq!(pairs[0]["first"], "volmig", "{t}");
        assert!(pairs[0]["ratio"].as_f64().unwrap() > 0.0, "{t}");
        // Where the time goes, from volmig's own histogram: every stage, the create's L
        // in the vCenter calls.
        for stage in [
            "path_lock_wait",
            "backend_slot_wait",
            "vcenter_call",
            "status_read",
            "status_write_ahead",
            "status_write_result",
            "other",
        ] {
            assert!(t["stage_seconds"][stage].is_f64(), "no stage {stage}: {t}");
        }
        assert!(
            t["stage_seconds"]["vcenter_call"].as_f64().unwrap() >= 0.05,
            "{t}"
        );
    }
    // Every registration writes at least its VolumeMigration and its status.
    assert!(
        json["api_cost"]["writes_per_pv"]["median"]
            .as_f64()
            .unwrap()
            >= 2.0
    );
    let steady = json["steady"].as_array().expect("steady rows");
    let modes: Vec<&str> = steady.iter().map(|s| s["mode"].as_str().unwrap()).collect();
    assert_eq!(modes, ["end-to-end", "in-process"]);
    for s in steady {
        assert_eq!(
            s["api_writes"]["max"], 0.0,
            "a steady pass writes nothing: {s}"
        );
        assert_eq!(s["repairs"]["max"], 0.0, "nothing to repair: {s}");
        assert!(s["api_lists"]["median"].as_f64().unwrap() >= 1.0);
    }
    // 600 in-process volumes span two pages of PVs.
    assert_eq!(
        steady[1]["api_lists_by_resource"]["list persistentvolumes"],
        2.0
    );
    let tracked = json["tracked"].as_array().expect("tracked rows");
    let sizes: Vec<u64> = tracked
        .iter()
        .map(|t| t["volumes"].as_u64().unwrap())
        .collect();
    assert_eq!(sizes, [0, 200, 600]);
    for t in tracked {
        assert!(t["rss_kib"]["median"].as_f64().unwrap() > 0.0);
        assert!(t["ready_seconds"]["median"].as_f64().unwrap() > 0.0);
    }
    let goals = json["goals"].as_array().expect("goals");
    assert!(goals.len() >= 8, "{goals:?}");
    let bare_goals = goals
        .iter()
        .filter(|g| {
            g["figure"]
                .as_str()
                .unwrap()
                .starts_with("Throughput against the bare client")
        })
        .count();
    assert_eq!(bare_goals, 2, "one bare-client goal per point: {goals:?}");

    let report = std::fs::read_to_string(out.join("report.md")).expect("report.md");
    for heading in [
        "## Goals",
        "## Registration throughput",
        "## API cost per new PV",
        "## Steady-state full sync",
        "## Memory and start-up",
        "### volmig against the bare client",
        "### Where each registration's time goes",
        // The paired runs, one row each, with the other load on the machine.
        "\nRun by run (",
        "| 50 | 8 | 0 | volmig | ",
        "(throughput.png)",
        "(memory.png)",
    ] {
        assert!(report.contains(heading), "report.md lacks {heading:?}");
    }
    for chart in ["throughput.png", "memory.png"] {
        let (w, h, drawn) = png_size(&out.join(chart));
        assert_eq!((w, h), (1000, 620), "{chart}");
        assert!(drawn, "{chart} is blank");
    }
}

/// Each scenario alone (`--only`) finishes and writes its own part of the results, with no chart
/// drawn from another scenario's missing data (`--only tracked` once spun forever in the throughput
/// chart's empty log axis). Not a speed check: the limit only turns a hang into a failure instead
/// of a stuck test run.
#[test]
fn each_scenario_alone_finishes_and_writes_only_its_part() {
    const HANG: Duration = Duration::from_secs(300);
    let vcsim = vcsim_binary();
    // The scenario, the result rows it writes (tracked includes the in-process steady
    // pass) and the charts it draws (the memory chart also shows the end-to-end steady
    // daemon's RSS).
    for (scenario, parts, charts) in [
        ("throughput", &["throughput"][..], &["throughput.png"][..]),
        ("steady", &["steady"], &["memory.png"]),
        ("tracked", &["tracked", "steady"], &["memory.png"]),
    ] {
        let dir = tempfile::tempdir().expect("temp dir");
        let out = dir.path().join("out");
        let mut child = smoke_command(dir.path(), &vcsim, &["--only", scenario])
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("run volmig-bench");
        let started = Instant::now();
        let status = loop {
            if let Some(status) = child.try_wait().expect("wait for volmig-bench") {
                break status;
            }
            if started.elapsed() > HANG {
                let _ = child.kill();
                let _ = child.wait();
                panic!("volmig-bench --only {scenario} did not finish within {HANG:?}");
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        assert!(status.success(), "volmig-bench --only {scenario}: {status}");
        let json = results(&out);
        for part in ["throughput", "steady", "tracked"] {
            let rows = json[part].as_array().map_or(0, Vec::len);
            assert_eq!(
                rows > 0,
                parts.contains(&part),
                "--only {scenario}: {rows} {part} rows"
            );
        }
        for png in ["throughput.png", "memory.png"] {
            assert_eq!(
                out.join(png).exists(),
                charts.contains(&png),
                "--only {scenario}: {png}"
            );
        }
        assert!(
            std::fs::read_to_string(out.join("report.md"))
                .expect("report.md")
                .contains("## Goals"),
            "--only {scenario}: report.md has no goals"
        );
    }
}
