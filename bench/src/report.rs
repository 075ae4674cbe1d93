//! `bench/report.md`: the results as tables a person reads.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::results::{Results, Summary};

/// `median (min–max)` with `d` decimals.
pub fn fmt(s: &Summary, d: usize) -> String {
    if s.runs.len() <= 1 || (s.min == s.max) {
        format!("{:.d$}", s.median)
    } else {
        format!("{:.d$} ({:.d$}–{:.d$})", s.median, s.min, s.max)
    }
}

fn counts(map: &BTreeMap<String, f64>, d: usize) -> String {
    if map.is_empty() {
        return "—".into();
    }
    map.iter()
        .map(|(k, v)| format!("{k}: {v:.d$}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn mib(kib: f64) -> f64 {
    kib / 1024.0
}

/// Stages of `volmig_registration_stage_seconds`, in the order a registration meets them.
const STAGES: [(&str, &str); 7] = [
    ("path_lock_wait", "path lock wait"),
    ("status_read", "status read"),
    ("backend_slot_wait", "backend slot wait"),
    ("vcenter_call", "vCenter calls"),
    ("status_write_ahead", "write-ahead"),
    ("status_write_result", "result write"),
    ("other", "other"),
];

/// Every run of every point: volmig beside the bare client's run it is paired with, and
/// what the rest of the machine did meanwhile.
fn pairs_table(o: &mut String, r: &Results) {
    if r.throughput.iter().all(|t| t.pairs.is_empty()) {
        return;
    }
    let _ = writeln!(
        o,
        "\nRun by run (\"other load\": mean cores busy with processes outside the \
         measurement, such as another build, during each timed window; \"steal\": cores \
         the hypervisor took; a pair with more than a quarter of a core of both together is \
         measured again while the quiet budget lasts, and kept as \"disturbed\" after):\n\n\
         | L (ms) | C | run | first | volmig volumes/s | bare volumes/s | volmig ÷ bare | \
         other load volmig / bare | steal volmig / bare | attempts |\n\
         |---|---|---|---|---|---|---|---|---|---|"
    );
    for t in &r.throughput {
        for (i, p) in t.pairs.iter().enumerate() {
            let _ = writeln!(
                o,
                "| {} | {} | {i} | {} | {:.1} | {:.1} | {:.3} | {:.2} / {:.2} | {:.2} / {:.2} | \
                 {}{} |",
                t.latency_ms,
                t.concurrency,
                p.first,
                p.volmig_per_second,
                p.bare_per_second,
                p.ratio,
                p.volmig_load.other_cores,
                p.bare_load.other_cores,
                p.volmig_load.steal_cores,
                p.bare_load.steal_cores,
                p.attempts,
                if p.disturbed { ", **disturbed**" } else { "" },
            );
        }
    }
}

/// volmig against the bare client, and where each registration's time goes.
fn bare_section(o: &mut String, r: &Results) {
    if r.throughput.iter().all(|t| t.bare.is_none()) {
        return;
    }
    let _ = writeln!(o, "\n### volmig against the bare client\n");
    let _ = writeln!(
        o,
        "Every run of volmig is paired with a run of the bare client right before or after \
         it (alternating: volmig first in runs 0, 2, …), each on a fresh simulator started \
         the same way (same N, L, no CNS volume yet). The bare client — C workers in the \
         benchmark process sharing volmig's own CNS backend, gated as volmig gates it (C \
         slots, the same requests per second) — makes only the backend calls the registrar \
         makes for a new vmdk (`disk_uuid`, `find_volumes`, `create_volume`, \
         `protect_from_vm_delete`); no Kubernetes. Its clock runs from the first call to \
         the end of the last registration; afterwards every vmdk is checked to have exactly \
         one CNS volume. It is the limit of this machine. \"volmig ÷ bare\" is the median \
         (min–max) of the per-run ratios, which the goal is judged on.\n"
    );
    let _ = writeln!(
        o,
        "| L (ms) | C | vmdks | volmig volumes/s | bare client volumes/s | volmig ÷ bare | bare \
         ÷ ideal | bare peak creates in flight | bare SOAP calls/PV |\n\
         |---|---|---|---|---|---|---|---|---|"
    );
    for t in &r.throughput {
        let Some(b) = &t.bare else { continue };
        let _ = writeln!(
            o,
            "| {} | {} | {} | {} | {} | {} | {} | {:.0} | {} |",
            t.latency_ms,
            t.concurrency,
            t.volumes,
            fmt(&t.volumes_per_second, 1),
            fmt(&b.volumes_per_second, 1),
            t.ratio_to_bare.as_ref().map_or("—".into(), |v| fmt(v, 2)),
            fmt(&b.ratio_to_ideal, 2),
            b.peak_creates_in_flight,
            fmt(&b.sim_calls_per_pv, 2),
        );
    }
    pairs_table(o, r);
    let _ = writeln!(
        o,
        "\nMean backend call duration of the bare client (ms):\n\n| L (ms) | C | calls |\n\
         |---|---|---|"
    );
    for t in &r.throughput {
        let Some(b) = &t.bare else { continue };
        let _ = writeln!(
            o,
            "| {} | {} | {} |",
            t.latency_ms,
            t.concurrency,
            counts(&b.backend_call_ms, 1)
        );
    }
    let _ = writeln!(o, "\n### Where each registration's time goes\n");
    let _ = writeln!(
        o,
        "Mean ms per registration inside volmig's registrar, by stage, from volmig's own \
         `volmig_registration_stage_seconds` (read from `/metrics` at the end of each run; \
         median of runs); the stages add up to the time in the registrar (\"in registrar\"). \
         A backend slot is held by each vCenter call and, for the create, also by the \
         write-ahead: \"slot held\" = vCenter calls + write-ahead is what caps throughput at \
         C ÷ slot held. \"wall × C ÷ N\" is the run's wall time per registration times C, \
         the slot time each registration had; the difference to \"slot held\" is slot time \
         left idle (no registration was ready for the slot: Kubernetes side, controller \
         queue, start and end of the run).\n"
    );
    let mut head = String::from("| L (ms) | C | wall × C ÷ N |");
    let mut rule = String::from("|---|---|---|");
    for (_, title) in STAGES {
        let _ = write!(head, " {title} |");
        rule.push_str("---|");
    }
    head.push_str(" in registrar | slot held | slot idle |");
    rule.push_str("---|---|---|");
    let _ = writeln!(o, "{head}\n{rule}");
    for t in &r.throughput {
        if t.stage_seconds.is_empty() {
            continue;
        }
        let ms = |stage: &str| t.stage_seconds.get(stage).copied().unwrap_or(0.0) * 1000.0;
        let wall = t.slot_seconds_per_registration * 1000.0;
        let mut row = format!("| {} | {} | {wall:.1} |", t.latency_ms, t.concurrency);
        for (stage, _) in STAGES {
            let _ = write!(row, " {:.1} |", ms(stage));
        }
        let total: f64 = STAGES.iter().map(|(s, _)| ms(s)).sum();
        let held = ms("vcenter_call") + ms("status_write_ahead");
        let _ = write!(
            row,
            " {total:.1} | {held:.1} | {:.1} |",
            (wall - held).max(0.0)
        );
        let _ = writeln!(o, "{row}");
    }
    let _ = writeln!(
        o,
        "\nCPU per registration over the timed window, ms, by process (all of them share \
         the machine's {} cores; \"cores busy\" = total CPU ÷ wall time):\n\n\
         | L (ms) | C | volmig run | cores busy | bare-client run | cores busy |\n\
         |---|---|---|---|---|---|",
        r.machine.cores
    );
    for t in &r.throughput {
        let busy = |cpu: &BTreeMap<String, f64>, per_second: f64| {
            cpu.values().sum::<f64>() * per_second / 1000.0
        };
        let (bare_cpu, bare_busy) = t.bare.as_ref().map_or(("—".into(), 0.0), |b| {
            (
                counts(&b.cpu_ms_per_registration, 1),
                busy(&b.cpu_ms_per_registration, b.volumes_per_second.median),
            )
        });
        let _ = writeln!(
            o,
            "| {} | {} | {} | {:.2} | {bare_cpu} | {bare_busy:.2} |",
            t.latency_ms,
            t.concurrency,
            counts(&t.cpu_ms_per_registration, 1),
            busy(&t.cpu_ms_per_registration, t.volumes_per_second.median),
        );
    }
}

/// Renders the whole report.
pub fn render(r: &Results) -> String {
    let mut o = String::new();
    let m = &r.machine;
    let _ = writeln!(o, "# volmig benchmark report\n");
    let _ = writeln!(
        o,
        "Measured {} on {} cores ({}), {} MiB of memory, Linux {}; {}. Scale `{}`: every \
         figure is the median of {} runs with (min–max). The whole benchmark took {:.0} s. \
         Written by `make bench` (`bench/`); the numbers are in `results.json`.\n",
        r.date,
        m.cores,
        m.cpu,
        m.memory_mib,
        m.kernel,
        if m.rustc.is_empty() {
            "release build"
        } else {
            &m.rustc
        },
        r.scale,
        r.runs,
        r.total_seconds
    );

    let _ = writeln!(o, "## Goals\n");
    let _ = writeln!(o, "| Figure | Goal | volmig | Met |\n|---|---|---|---|");
    for g in &r.goals {
        let met = match (&g.met, &g.miss) {
            (true, _) => "yes".to_string(),
            (false, Some(miss)) => format!("**no** ({miss})"),
            (false, None) => "**no**".to_string(),
        };
        let _ = writeln!(o, "| {} | {} | {} | {met} |", g.figure, g.goal, g.value);
    }

    let _ = writeln!(o, "\n## Registration throughput\n");
    let _ = writeln!(
        o,
        "Fresh simulator (`CnsCreateVolume` delayed by L), fresh API server and `volmig run \
         --max-concurrent-registrations C --vc-requests-per-second 10000` per run; the clock \
         runs from the first PV create to the status write of the last registration (read from \
         the API server's store). C = 1 is the serial \
         baseline (the anchor's one-at-a-time registration).\n"
    );
    let _ = writeln!(
        o,
        "| L (ms) | C | vmdks | seconds | volumes/s | ideal C÷L | ratio | peak creates in \
         flight | API writes/PV | SOAP calls/PV |\n|---|---|---|---|---|---|---|---|---|---|"
    );
    for t in &r.throughput {
        let _ = writeln!(
            o,
            "| {} | {} | {} | {} | {} | {:.1} | {} | {:.0} | {} | {} |",
            t.latency_ms,
            t.concurrency,
            t.volumes,
            fmt(&t.seconds, 2),
            fmt(&t.volumes_per_second, 1),
            t.ideal_per_second,
            fmt(&t.ratio_to_ideal, 2),
            t.peak_creates_in_flight,
            fmt(&t.api_writes_per_pv, 2),
            fmt(&t.sim_calls_per_pv, 2),
        );
    }
    let _ = writeln!(
        o,
        "\nMean backend call duration as volmig timed it (ms; each call holds one of the C \
         slots):\n"
    );
    let _ = writeln!(o, "| L (ms) | C | calls |\n|---|---|---|");
    for t in &r.throughput {
        let _ = writeln!(
            o,
            "| {} | {} | {} |",
            t.latency_ms,
            t.concurrency,
            counts(&t.backend_call_ms, 1)
        );
    }
    bare_section(&mut o, r);
    let _ = writeln!(o, "\n![throughput vs concurrency](throughput.png)\n");

    let c = &r.api_cost;
    let _ = writeln!(o, "## API cost per new PV\n");
    let _ = writeln!(
        o,
        "From {} ({} PVs per run), counted at the API test server and at the simulator \
         from the first PV create until the writes stopped. The benchmark's own PV creates \
         are not counted.\n",
        c.source, c.volumes
    );
    let _ = writeln!(o, "| | per PV |\n|---|---|");
    let _ = writeln!(
        o,
        "| API writes (Events included, leases excluded) | {} |",
        fmt(&c.writes_per_pv, 2)
    );
    let _ = writeln!(
        o,
        "| API writes without Events | {} |",
        fmt(&c.writes_per_pv_without_events, 2)
    );
    let _ = writeln!(o, "| Event creates | {} |", fmt(&c.events_per_pv, 2));
    let _ = writeln!(
        o,
        "| writes by request | {} |",
        counts(&c.writes_by_request, 2)
    );
    let _ = writeln!(
        o,
        "| reads by request | {} |",
        counts(&c.reads_by_request, 2)
    );
    let _ = writeln!(
        o,
        "| SOAP calls by method | {} |",
        counts(&c.sim_calls_by_method, 2)
    );
    let _ = writeln!(
        o,
        "\nLease renewals (leader election, independent of PVs): {} writes per run of {} s.\n",
        fmt(&c.lease_writes_per_run, 0),
        fmt(&c.run_seconds, 1)
    );

    let _ = writeln!(o, "## Steady-state full sync\n");
    let _ = writeln!(
        o,
        "| mode | N | wall s | CPU s (volmig) | CPU s (API server) | API lists | API writes | \
         lease writes | backend calls | repairs |\n|---|---|---|---|---|---|---|---|---|---|"
    );
    for s in &r.steady {
        let server = if s.server_cpu_seconds.runs.is_empty() {
            "—".to_string()
        } else {
            fmt(&s.server_cpu_seconds, 3)
        };
        let _ = writeln!(
            o,
            "| {} | {} | {} | {} | {server} | {} ({}) | {} | {} | {} | {} |",
            s.mode,
            s.volumes,
            fmt(&s.wall_seconds, 3),
            fmt(&s.cpu_seconds, 3),
            fmt(&s.api_lists, 0),
            counts(&s.api_lists_by_resource, 0),
            fmt(&s.api_writes, 0),
            fmt(&s.lease_writes, 0),
            counts(&s.backend_calls, 0),
            fmt(&s.repairs, 0),
        );
    }
    let _ = writeln!(o);
    for s in &r.steady {
        let _ = writeln!(o, "- **{}**: {}.", s.mode, s.what);
        if let Some(rss) = s.rss_kib_after {
            let _ = writeln!(
                o,
                "  Resident memory of that daemon after the passes: {:.1} MiB.",
                mib(rss)
            );
        }
        if let Some(secs) = s.setup_register_seconds {
            let _ = writeln!(
                o,
                "  Setting it up, a first daemon registered the {} volumes in {secs:.1} s \
                 ({:.0} volumes/s at C = 32, no injected latency; mean backend calls in ms: \
                 {}).",
                s.volumes,
                s.volumes as f64 / secs,
                counts(&s.setup_backend_call_ms, 1)
            );
        }
    }

    let _ = writeln!(o, "\n## Memory and start-up\n");
    let _ = writeln!(
        o,
        "`volmig run --leader-election false` over N in-tree PVs, each with its Registered \
         VolumeMigration and the CSI driver's cache object (created directly in the API test \
         server, the driver's CRD installed), vCenter unreachable so that only the Kubernetes \
         side runs: PV index, VolumeMigration cache, driver-cache index, one reconcile of \
         every object (nothing to write) and a full sync that stops at the CNS listing. \
         Ready = process start → `/readyz` 200; memory = `VmRSS` once the daemon used < 2 % \
         of a core for a whole second; bytes per volume = (RSS − idle RSS) ÷ N.\n"
    );
    let _ = writeln!(
        o,
        "| N | ready s | RSS MiB | anon RSS MiB | peak MiB | bytes/volume | settle s | API \
         writes |\n|---|---|---|---|---|---|---|---|"
    );
    for t in &r.tracked {
        let _ = writeln!(
            o,
            "| {} | {} | {} | {} | {} | {} | {} | {} |",
            t.volumes,
            fmt(&t.ready_seconds, 3),
            fmt(&t.rss_kib.map(mib), 1),
            fmt(&t.rss_anon_kib.map(mib), 1),
            fmt(&t.peak_kib.map(mib), 1),
            if t.volumes == 0 {
                "(idle)".into()
            } else {
                fmt(&t.bytes_per_volume, 0)
            },
            fmt(&t.settle_seconds, 1),
            fmt(&t.api_writes, 0),
        );
    }
    let _ = writeln!(o, "\n![memory vs volumes](memory.png)\n");

    o.push_str(&crate::sizing::section());

    let _ = writeln!(o, "## Notes\n");
    for n in &r.notes {
        let _ = writeln!(o, "- {n}");
    }
    let missed: Vec<_> = r.goals.iter().filter(|g| !g.met).collect();
    if missed.is_empty() {
        let _ = writeln!(o, "- Every goal was met.");
    } else {
        let _ = writeln!(
            o,
            "- Missed: {}. Where the time or memory goes is described in \
             `docs/performance.md`.",
            missed
                .iter()
                .map(|g| format!(
                    "{} ({}; {})",
                    g.figure,
                    g.value,
                    g.miss.clone().unwrap_or_default()
                ))
                .collect::<Vec<_>>()
                .join("; ")
        );
    }
    o
}
