//! The performance goals (docs/performance.md, "Goals"), checked against the results.

use crate::results::{BareClient, Goal, Results, SteadyPass, Summary, Throughput};

/// Ratio to the ideal C ÷ L that throughput must reach where the bare client reaches it.
pub const THROUGHPUT_RATIO: f64 = 0.9;
/// Ratio to the bare client that throughput must reach at every (C, L).
pub const BARE_RATIO: f64 = 0.9;
/// Most API writes per new PV.
pub const WRITES_PER_PV: f64 = 4.0;
/// Most CPU seconds of a 100k steady pass.
pub const PASS_CPU_SECONDS: f64 = 2.0;
/// Most resident bytes per tracked volume.
pub const BYTES_PER_VOLUME: f64 = 1024.0;
/// Most start-up peak RSS (`VmHWM`) as a multiple of the settled RSS.
pub const PEAK_OVER_SETTLED: f64 = 1.5;
/// Most seconds to ready with 100k VolumeMigrations.
pub const READY_SECONDS: f64 = 10.0;

/// Most list calls in a steady pass over `n` volumes: ⌈n/500⌉ + 3.
pub fn max_lists(n: usize) -> usize {
    n.div_ceil(500) + 3
}

fn percent_over(value: f64, limit: f64) -> String {
    if limit > 0.0 {
        format!("{:.0} % over the goal", (value / limit - 1.0) * 100.0)
    } else {
        format!("{value} over the goal")
    }
}

fn goal(figure: String, goal: String, value: String, met: bool, miss: String) -> Goal {
    Goal {
        figure,
        goal,
        value,
        met,
        miss: (!met).then_some(miss),
    }
}

fn steady_goals(s: &SteadyPass, out: &mut Vec<Goal>) {
    let what = format!("steady pass, {}, N = {}", s.mode, s.volumes);
    out.push(goal(
        format!("API writes in a {what}"),
        "0 (lease renewals excluded)".into(),
        format!(
            "{} (max of {} passes; {} lease writes)",
            s.api_writes.max,
            s.api_writes.runs.len(),
            s.lease_writes.max
        ),
        s.api_writes.max == 0.0 && !s.api_writes.runs.is_empty(),
        format!("{} writes", s.api_writes.max),
    ));
    let limit = max_lists(s.volumes) as f64;
    let cns: f64 = s
        .backend_calls
        .iter()
        .filter(|(k, _)| k.starts_with("CnsQuery"))
        .map(|(_, v)| v)
        .sum();
    out.push(goal(
        format!("API list calls in a {what}"),
        format!("≤ ⌈N/500⌉ + 3 = {limit}"),
        format!(
            "{} (max {}; plus {cns} CNS query pages)",
            s.api_lists.median, s.api_lists.max
        ),
        s.api_lists.max <= limit && !s.api_lists.runs.is_empty(),
        percent_over(s.api_lists.max, limit),
    ));
}

/// Goal of throughput against the ideal C ÷ L at one point.
fn ideal_goal(t: &Throughput) -> Goal {
    let want = THROUGHPUT_RATIO * t.ideal_per_second;
    goal(
        format!("Registration throughput, {}", point(t)),
        format!("≥ 0.9 × C ÷ L = {want:.1} volumes/s"),
        format!(
            "{:.1} volumes/s ({:.2} × ideal)",
            t.volumes_per_second.median, t.ratio_to_ideal.median
        ),
        t.ratio_to_ideal.median >= THROUGHPUT_RATIO,
        shortfall(t, want),
    )
}

/// The throughput point a goal is about: `C = 8, L = 50 ms, N = 1000`.
fn point(t: &Throughput) -> String {
    format!(
        "C = {}, L = {} ms, N = {}",
        t.concurrency, t.latency_ms, t.volumes
    )
}

/// How far volmig's median throughput is below `want` volumes/s.
fn shortfall(t: &Throughput, want: f64) -> String {
    format!(
        "{:.0} % below the goal",
        (1.0 - t.volumes_per_second.median / want) * 100.0
    )
}

/// volmig ÷ the bare client run by run: `volmig[i] ÷ bare[i]` for runs measured back to
/// back. `None` when there are no runs, the counts differ or a bare-client figure is not
/// positive (nothing to pair).
pub fn paired_ratios(volmig: &[f64], bare: &[f64]) -> Option<Summary> {
    if volmig.is_empty() || volmig.len() != bare.len() || bare.iter().any(|b| *b <= 0.0) {
        return None;
    }
    let ratios: Vec<f64> = volmig.iter().zip(bare).map(|(v, b)| v / b).collect();
    Some(Summary::of(&ratios))
}

/// `0.93, 0.88, 0.91`: every run's ratio, in the order measured.
fn ratio_runs(ratios: &Summary) -> String {
    ratios
        .runs
        .iter()
        .map(|r| format!("{r:.2}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// volmig against the bare client at every point — judged on the median of the per-run
/// ratios volmig ÷ bare client (each run pairs the two back to back on identical simulator
/// state), not on the ratio of the two medians, so that a drift of the machine that moves
/// both does not move the verdict — and against C ÷ L wherever the bare client itself
/// reaches 0.9 × C ÷ L. The goals put it so for every C: the first goals asked 0.9 × C ÷ L
/// at C = 8 alone, before the bare client showed that the machine (the simulator's own calls
/// beside the delayed create) may not allow it; [`check`] keeps that C = 8 row against
/// C ÷ L where no bare client was measured.
fn bare_goals(t: &Throughput, out: &mut Vec<Goal>) {
    let (Some(bare), Some(ratios)) = (&t.bare, &t.ratio_to_bare) else {
        return;
    };
    let ratio = ratios.median;
    let disturbed = t.pairs.iter().filter(|p| p.disturbed).count();
    out.push(goal(
        format!("Throughput against the bare client, {}", point(t)),
        format!("median of the per-run ratios volmig ÷ bare client ≥ {BARE_RATIO}"),
        format!(
            "{ratio:.2} (runs {}; {:.1} volumes/s against the bare client's {:.1}){}",
            ratio_runs(ratios),
            t.volumes_per_second.median,
            bare.volumes_per_second.median,
            if disturbed > 0 {
                format!(
                    "; {disturbed} of {} runs disturbed by other load",
                    t.pairs.len()
                )
            } else {
                String::new()
            }
        ),
        ratio >= BARE_RATIO,
        format!("{:.0} % below the goal", (1.0 - ratio / BARE_RATIO) * 100.0),
    ));
    if machine_allows_ideal(bare) {
        let mut g = ideal_goal(t);
        g.goal = format!(
            "{} (the bare client reaches {:.2} × ideal)",
            g.goal, bare.ratio_to_ideal.median
        );
        out.push(g);
    }
}

/// The points not judged against C ÷ L because the bare client itself stays below
/// 0.9 × C ÷ L there, for the report to say so.
pub fn beyond_the_machine(r: &Results) -> Vec<String> {
    r.throughput
        .iter()
        .filter_map(|t| {
            let bare = t.bare.as_ref()?;
            (!machine_allows_ideal(bare)).then(|| {
                format!(
                    "{}: the bare client reaches {:.2} × C ÷ L, volmig {:.2}",
                    point(t),
                    bare.ratio_to_ideal.median,
                    t.ratio_to_ideal.median
                )
            })
        })
        .collect()
}

/// True when the bare client itself reaches 0.9 × C ÷ L (so volmig is judged
/// against C ÷ L there too).
fn machine_allows_ideal(bare: &BareClient) -> bool {
    bare.ratio_to_ideal.median >= THROUGHPUT_RATIO
}

/// Every goal, met or not.
pub fn check(r: &Results) -> Vec<Goal> {
    let mut out = Vec::new();
    for t in r
        .throughput
        .iter()
        .filter(|t| t.concurrency == 8 && t.bare.is_none())
    {
        out.push(ideal_goal(t));
    }
    for t in &r.throughput {
        bare_goals(t, &mut out);
    }
    let c = &r.api_cost;
    if !c.writes_per_pv.runs.is_empty() {
        out.push(goal(
            "API writes per new PV".into(),
            format!("≤ {WRITES_PER_PV}"),
            format!(
                "{:.2} ({:.2} of them Events; lease renewals excluded)",
                c.writes_per_pv.median, c.events_per_pv.median
            ),
            c.writes_per_pv.median <= WRITES_PER_PV,
            percent_over(c.writes_per_pv.median, WRITES_PER_PV),
        ));
    }
    for s in &r.steady {
        steady_goals(s, &mut out);
    }
    if let Some(s) = r.steady.iter().find(|s| s.mode == "in-process") {
        out.push(goal(
            format!("CPU of a steady pass, in-process, N = {}", s.volumes),
            format!("≤ {PASS_CPU_SECONDS} s (at N = 100,000)"),
            format!(
                "{:.3} s ({:.3}–{:.3})",
                s.cpu_seconds.median, s.cpu_seconds.min, s.cpu_seconds.max
            ),
            s.cpu_seconds.median <= PASS_CPU_SECONDS,
            percent_over(s.cpu_seconds.median, PASS_CPU_SECONDS),
        ));
    }
    if let Some(t) = r
        .tracked
        .iter()
        .filter(|t| t.volumes > 0)
        .max_by_key(|t| t.volumes)
    {
        out.push(goal(
            format!("RSS per tracked volume, N = {}", t.volumes),
            format!("≤ {BYTES_PER_VOLUME} bytes"),
            format!("{:.0} bytes", t.bytes_per_volume.median),
            t.bytes_per_volume.median <= BYTES_PER_VOLUME,
            percent_over(t.bytes_per_volume.median, BYTES_PER_VOLUME),
        ));
        let peak_ratio = t.peak_kib.median / t.rss_kib.median.max(1.0);
        out.push(goal(
            format!("Start-up peak RSS over settled RSS, N = {}", t.volumes),
            format!("≤ {PEAK_OVER_SETTLED} ×"),
            format!(
                "{peak_ratio:.2} × ({:.1} MiB peak, {:.1} MiB settled)",
                t.peak_kib.median / 1024.0,
                t.rss_kib.median / 1024.0
            ),
            peak_ratio <= PEAK_OVER_SETTLED,
            percent_over(peak_ratio, PEAK_OVER_SETTLED),
        ));
        out.push(goal(
            format!("Start-up to /readyz 200, {} VolumeMigrations", t.volumes),
            format!("≤ {READY_SECONDS} s (at 100,000)"),
            format!(
                "{:.2} s ({:.2}–{:.2})",
                t.ready_seconds.median, t.ready_seconds.min, t.ready_seconds.max
            ),
            t.ready_seconds.median <= READY_SECONDS,
            percent_over(t.ready_seconds.median, READY_SECONDS),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::collections::BTreeMap;

    use crate::results::{BareClient, PairedRun};

    /// A point whose run i measured `volmig[i]` and `bare[i]` volumes/s.
    fn point(c: u16, latency: u64, volmig: &[f64], bare: &[f64]) -> Throughput {
        let ideal = f64::from(c) * 1000.0 / latency as f64;
        let volumes_per_second = Summary::of(volmig);
        Throughput {
            latency_ms: latency,
            concurrency: c,
            volumes: 100,
            seconds: volumes_per_second.map(|v| 100.0 / v),
            ratio_to_ideal: volumes_per_second.map(|v| v / ideal),
            volumes_per_second,
            ideal_per_second: ideal,
            peak_creates_in_flight: f64::from(c),
            api_writes_per_pv: Summary::default(),
            sim_calls_per_pv: Summary::default(),
            backend_call_ms: BTreeMap::new(),
            bare: Some(BareClient {
                volumes_per_second: Summary::of(bare),
                ratio_to_ideal: Summary::of(bare).map(|v| v / ideal),
                ..BareClient::default()
            }),
            ratio_to_bare: paired_ratios(volmig, bare),
            pairs: Vec::new(),
            stage_seconds: BTreeMap::new(),
            slot_seconds_per_registration: 0.0,
            cpu_ms_per_registration: BTreeMap::new(),
        }
    }

    #[test]
    fn bare_client_goals() {
        // The bare client reaches 0.94 × ideal: both rows, both missed.
        let mut out = Vec::new();
        bare_goals(&point(32, 50, &[500.0], &[600.0]), &mut out);
        assert_eq!(out.len(), 2, "{out:?}");
        assert!(out[0].figure.contains("bare client, C = 32, L = 50 ms"));
        assert!(!out[0].met && !out[1].met, "{out:?}");
        assert_eq!(out[0].miss.as_deref(), Some("7 % below the goal"));
        assert!(out[1].goal.contains("576.0"), "{out:?}");
        // It does not reach 0.9 × ideal: only the bare row, met at 0.9 × bare.
        let mut out = Vec::new();
        bare_goals(&point(32, 50, &[360.0], &[400.0]), &mut out);
        assert_eq!(out.len(), 1, "{out:?}");
        assert!(out[0].met, "{out:?}");
        // C = 8 the same way: here the bare client reaches 0.97 × ideal.
        let mut out = Vec::new();
        bare_goals(&point(8, 50, &[150.0], &[155.0]), &mut out);
        assert_eq!(out.len(), 2, "{out:?}");
        assert!(out[0].met && out[1].met, "{out:?}");
        // Not measured: no row.
        let mut p = point(8, 50, &[150.0], &[155.0]);
        p.bare = None;
        let mut out = Vec::new();
        bare_goals(&p, &mut out);
        assert!(out.is_empty());
    }

    #[test]
    fn ratios_pair_run_i_with_run_i() {
        let r = paired_ratios(&[110.0, 90.0, 95.0], &[100.0, 100.0, 100.0]).unwrap();
        assert_eq!(r.runs, vec![1.1, 0.9, 0.95]);
        assert_eq!((r.median, r.min, r.max), (0.95, 0.9, 1.1));
        // Nothing to pair.
        assert!(paired_ratios(&[], &[]).is_none());
        assert!(paired_ratios(&[1.0, 2.0], &[1.0]).is_none());
        assert!(paired_ratios(&[1.0], &[0.0]).is_none());
    }

    #[test]
    fn bare_goal_is_judged_on_the_median_of_paired_ratios() {
        // The machine was fast in run 0 and slow in run 1 for both: every run's ratio is
        // at least 0.896 and the median 0.909 (met), while the medians' ratio 95 ÷ 106
        // = 0.896 would miss.
        let p = point(8, 50, &[110.0, 90.0, 95.0], &[120.0, 99.0, 106.0]);
        let mut out = Vec::new();
        bare_goals(&p, &mut out);
        assert_eq!(out.len(), 1, "{out:?}");
        assert!(out[0].met, "{out:?}");
        assert_eq!(
            out[0].value,
            "0.91 (runs 0.92, 0.91, 0.90; 95.0 volumes/s against the bare client's 106.0)"
        );
        assert!(out[0].goal.contains("≥ 0.9"), "{out:?}");
        // One bad run out of three does not decide it either way; disturbed runs are told.
        let mut p = point(8, 50, &[100.0, 100.0, 70.0], &[110.0, 108.0, 100.0]);
        p.pairs = vec![
            PairedRun::default(),
            PairedRun::default(),
            PairedRun {
                disturbed: true,
                ..PairedRun::default()
            },
        ];
        let mut out = Vec::new();
        bare_goals(&p, &mut out);
        assert!(out[0].met, "{out:?}");
        assert!(
            out[0]
                .value
                .ends_with("; 1 of 3 runs disturbed by other load"),
            "{out:?}"
        );
        // Two runs below 0.9: missed, by how much the median is below 0.9.
        let p = point(8, 50, &[81.0, 100.0, 85.5], &[100.0, 100.0, 100.0]);
        let mut out = Vec::new();
        bare_goals(&p, &mut out);
        assert!(!out[0].met, "{out:?}");
        assert_eq!(out[0].miss.as_deref(), Some("5 % below the goal"));
    }

    #[test]
    fn c_over_l_is_judged_at_c_8_only_where_the_machine_allows_it() {
        let results = |points: Vec<Throughput>| Results {
            date: String::new(),
            scale: "test".into(),
            runs: 1,
            machine: crate::procfs::Machine::read(),
            total_seconds: 0.0,
            throughput: points,
            api_cost: Default::default(),
            steady: Vec::new(),
            tracked: Vec::new(),
            goals: Vec::new(),
            notes: Vec::new(),
        };
        let about_c_over_l =
            |goals: &[Goal]| goals.iter().filter(|g| g.goal.contains("C ÷ L")).count();
        // No bare client measured: the C = 8 row against C ÷ L stays (here missed, 0.75 × ideal).
        let mut alone = point(8, 50, &[120.0], &[125.0]);
        alone.bare = None;
        alone.ratio_to_bare = None;
        let r = results(vec![alone]);
        let goals = check(&r);
        assert_eq!(about_c_over_l(&goals), 1, "{goals:?}");
        assert!(beyond_the_machine(&r).is_empty());
        // The bare client reaches only 0.78 × ideal: judged against it alone, and said so.
        let r = results(vec![point(8, 50, &[120.0], &[125.0])]);
        let goals = check(&r);
        assert_eq!(about_c_over_l(&goals), 0, "{goals:?}");
        assert_eq!(goals.len(), 1, "{goals:?}");
        assert!(goals[0].met, "0.96 of the bare client: {goals:?}");
        let beyond = beyond_the_machine(&r);
        assert_eq!(beyond.len(), 1);
        assert!(
            beyond[0].contains("reaches 0.78 × C ÷ L, volmig 0.75"),
            "{beyond:?}"
        );
    }

    #[test]
    fn list_limit_rounds_up() {
        assert_eq!(max_lists(10_000), 23);
        assert_eq!(max_lists(100_000), 203);
        assert_eq!(max_lists(501), 5);
        assert_eq!(max_lists(0), 3);
    }
}
