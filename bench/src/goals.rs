//! The goals of issue 7, checked against the results.

use crate::results::{Goal, Results, SteadyPass};

/// Ratio to the ideal that throughput at C = 8 must reach.
pub const THROUGHPUT_RATIO: f64 = 0.9;
/// Most API writes per new PV.
pub const WRITES_PER_PV: f64 = 4.0;
/// Most CPU seconds of a 100k steady pass.
pub const PASS_CPU_SECONDS: f64 = 2.0;
/// Most resident bytes per tracked volume.
pub const BYTES_PER_VOLUME: f64 = 1024.0;
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

/// Every goal, met or not.
pub fn check(r: &Results) -> Vec<Goal> {
    let mut out = Vec::new();
    for t in r.throughput.iter().filter(|t| t.concurrency == 8) {
        let want = THROUGHPUT_RATIO * t.ideal_per_second;
        out.push(goal(
            format!(
                "Registration throughput, C = 8, L = {} ms, N = {}",
                t.latency_ms, t.volumes
            ),
            format!("≥ 0.9 × C ÷ L = {want:.1} volumes/s"),
            format!(
                "{:.1} volumes/s ({:.2} × ideal)",
                t.volumes_per_second.median, t.ratio_to_ideal.median
            ),
            t.ratio_to_ideal.median >= THROUGHPUT_RATIO,
            format!(
                "{:.0} % below the goal",
                (1.0 - t.volumes_per_second.median / want) * 100.0
            ),
        ));
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

    #[test]
    fn list_limit_rounds_up() {
        assert_eq!(max_lists(10_000), 23);
        assert_eq!(max_lists(100_000), 203);
        assert_eq!(max_lists(501), 5);
        assert_eq!(max_lists(0), 3);
    }
}
