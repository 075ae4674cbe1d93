//! The PNG charts, drawn with plotters' bitmap backend. Text uses a TrueType font from the
//! system (Debian `fonts-dejavu-core`, installed by `make bench`); without one the charts
//! are drawn without text and the caller is told so.

use std::path::Path;
use std::sync::OnceLock;

use anyhow::{Context as _, anyhow};
use plotters::prelude::*;
use plotters::style::FontStyle;

use crate::results::{Results, SteadyPass, Tracked};

/// Fonts tried, in order.
const FONT_FILES: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/truetype/freefont/FreeSans.ttf",
];

/// The font family name the charts use.
const FAMILY: &str = "sans-serif";

const WIDTH: u32 = 1000;
const HEIGHT: u32 = 620;

/// Registers a system font once; returns the file used, or `None` when there is none.
pub fn font() -> Option<&'static str> {
    static FONT: OnceLock<Option<&'static str>> = OnceLock::new();
    *FONT.get_or_init(|| {
        FONT_FILES.iter().copied().find(|file| {
            std::fs::read(file).ok().is_some_and(|bytes| {
                let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
                plotters::style::register_font(FAMILY, FontStyle::Normal, bytes).is_ok()
            })
        })
    })
}

fn err<E: std::fmt::Debug>(what: &'static str) -> impl FnOnce(E) -> anyhow::Error {
    move |e| anyhow!("{what}: {e:?}")
}

const PALETTE: [RGBColor; 4] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
];

/// Draws `throughput.png`: measured volumes/s against C for each L, with the ideal C ÷ L.
/// Without throughput data (`--only` another scenario) there is no chart: an empty log
/// axis would make plotters search for key points forever.
pub fn throughput(r: &Results, path: &Path) -> anyhow::Result<()> {
    if r.throughput.is_empty() {
        return Ok(());
    }
    draw_throughput(r, path, font().is_some())
}

fn draw_throughput(r: &Results, path: &Path, text: bool) -> anyhow::Result<()> {
    let root = BitMapBackend::new(path, (WIDTH, HEIGHT)).into_drawing_area();
    root.fill(&WHITE).map_err(err("fill"))?;
    let mut latencies: Vec<u64> = r.throughput.iter().map(|t| t.latency_ms).collect();
    latencies.sort_unstable();
    latencies.dedup();
    let mut concurrencies: Vec<u16> = r.throughput.iter().map(|t| t.concurrency).collect();
    concurrencies.sort_unstable();
    concurrencies.dedup();
    // Concurrencies are categories, equally spaced: x = their index.
    let index = |c: u16| concurrencies.iter().position(|x| *x == c).unwrap_or(0) as f64;
    let x_max = concurrencies.len() as f64 - 0.5;
    let y_max = r
        .throughput
        .iter()
        .map(|t| {
            let bare = t.bare.as_ref().map_or(0.0, |b| b.volumes_per_second.max);
            t.ideal_per_second.max(t.volumes_per_second.max).max(bare)
        })
        .fold(10.0, f64::max)
        * 2.0;
    let y_min = r
        .throughput
        .iter()
        .map(|t| {
            let bare = t
                .bare
                .as_ref()
                .map_or(f64::INFINITY, |b| b.volumes_per_second.min);
            t.volumes_per_second.min.min(t.ideal_per_second).min(bare)
        })
        .fold(f64::INFINITY, f64::min)
        .max(0.01)
        * 0.5;
    let mut builder = ChartBuilder::on(&root);
    builder
        .margin(20)
        .x_label_area_size(if text { 55 } else { 10 })
        .y_label_area_size(if text { 80 } else { 10 });
    if text {
        builder.caption(
            "Registration throughput vs concurrency (volmig, bare client, ideal C ÷ L)",
            (FAMILY, 26),
        );
    }
    let mut chart = builder
        .build_cartesian_2d(-0.5f64..x_max, (y_min..y_max).log_scale())
        .map_err(err("chart"))?;
    let label_c = |x: &f64| {
        let i = x.round();
        match concurrencies.get(i.max(0.0) as usize) {
            Some(c) if (x - i).abs() < 1e-6 && i >= 0.0 => format!("C = {c}"),
            _ => String::new(),
        }
    };
    let mut mesh = chart.configure_mesh();
    if text {
        mesh.x_desc("concurrency C (--max-concurrent-registrations)")
            .y_desc("registered volumes per second, log scale")
            .axis_desc_style((FAMILY, 18))
            .label_style((FAMILY, 16))
            .x_labels(4 * concurrencies.len() + 1)
            .x_label_formatter(&label_c)
            .y_label_formatter(&|y| format!("{y}"));
    } else {
        mesh.x_labels(0).y_labels(0);
    }
    mesh.draw().map_err(err("mesh"))?;
    for (i, latency) in latencies.iter().enumerate() {
        let color = PALETTE[i % PALETTE.len()];
        let mut points: Vec<_> = r
            .throughput
            .iter()
            .filter(|t| t.latency_ms == *latency)
            .collect();
        points.sort_by_key(|t| t.concurrency);
        let x = index;
        let measured = chart
            .draw_series(LineSeries::new(
                points
                    .iter()
                    .map(|t| (x(t.concurrency), t.volumes_per_second.median)),
                color.stroke_width(3),
            ))
            .map_err(err("series"))?;
        if text {
            measured
                .label(format!("volmig, L = {latency} ms"))
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 24, y)], color.stroke_width(3))
                });
        }
        chart
            .draw_series(points.iter().map(|t| {
                Circle::new(
                    (x(t.concurrency), t.volumes_per_second.median),
                    5,
                    color.filled(),
                )
            }))
            .map_err(err("points"))?;
        chart
            .draw_series(points.iter().map(|t| {
                ErrorBar::new_vertical(
                    x(t.concurrency),
                    t.volumes_per_second.min,
                    t.volumes_per_second.median,
                    t.volumes_per_second.max,
                    color.stroke_width(2),
                    12,
                )
            }))
            .map_err(err("error bars"))?;
        let bare: Vec<(f64, f64)> = points
            .iter()
            .filter_map(|t| {
                let b = t.bare.as_ref()?;
                Some((x(t.concurrency), b.volumes_per_second.median))
            })
            .collect();
        if !bare.is_empty() {
            let line = chart
                .draw_series(LineSeries::new(bare.clone(), color.stroke_width(1)))
                .map_err(err("bare client"))?;
            if text {
                line.label(format!("bare client, L = {latency} ms"))
                    .legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 24, y)], color.stroke_width(1))
                    });
            }
            chart
                .draw_series(
                    bare.iter()
                        .map(|p| Cross::new(*p, 6, color.stroke_width(2))),
                )
                .map_err(err("bare client points"))?;
        }
        let ideal = chart
            .draw_series(DashedLineSeries::new(
                points
                    .iter()
                    .map(|t| (x(t.concurrency), t.ideal_per_second)),
                10,
                6,
                color.stroke_width(2),
            ))
            .map_err(err("ideal"))?;
        if text {
            ideal
                .label(format!("ideal C ÷ L, L = {latency} ms"))
                .legend(move |(x, y)| {
                    plotters::element::DashedPathElement::new(
                        vec![(x, y), (x + 24, y)],
                        5,
                        3,
                        color.stroke_width(2),
                    )
                });
        }
    }
    if text {
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .label_font((FAMILY, 16))
            .background_style(WHITE.mix(0.9))
            .border_style(BLACK)
            .draw()
            .map_err(err("legend"))?;
    }
    root.present()
        .with_context(|| format!("writing {}", path.display()))
}

/// Draws `memory.png`: resident memory against tracked volumes, with the goal line
/// (idle + 1 KiB per volume).
///
/// Without memory data (neither `tracked` nor an end-to-end steady daemon's RSS, e.g.
/// `--only throughput`) there is no chart rather than empty axes.
pub fn memory(r: &Results, path: &Path) -> anyhow::Result<()> {
    if !has_memory_data(r) {
        return Ok(());
    }
    draw_memory(r, path, font().is_some())
}

fn has_memory_data(r: &Results) -> bool {
    !r.tracked.is_empty() || r.steady.iter().any(|s| s.rss_kib_after.is_some())
}

fn draw_memory(r: &Results, path: &Path, text: bool) -> anyhow::Result<()> {
    let root = BitMapBackend::new(path, (WIDTH, HEIGHT)).into_drawing_area();
    root.fill(&WHITE).map_err(err("fill"))?;
    let rows: Vec<&Tracked> = r.tracked.iter().filter(|t| t.volumes > 0).collect();
    let idle_mib = r
        .tracked
        .iter()
        .find(|t| t.volumes == 0)
        .map_or(0.0, |t| t.rss_kib.median / 1024.0);
    let e2e: Vec<&SteadyPass> = r
        .steady
        .iter()
        .filter(|s| s.rss_kib_after.is_some())
        .collect();
    let sizes = || {
        rows.iter()
            .map(|t| t.volumes)
            .chain(e2e.iter().map(|s| s.volumes))
    };
    let n_min = sizes().min().unwrap_or(1).max(1) as f64;
    let n_max = sizes().max().unwrap_or(10).max(10) as f64;
    let goal = |n: f64| idle_mib + n / 1024.0;
    let y_max = rows
        .iter()
        .map(|t| t.rss_kib.max / 1024.0)
        .chain(
            e2e.iter()
                .filter_map(|s| s.rss_kib_after.map(|k| k / 1024.0)),
        )
        .fold(goal(n_max), f64::max)
        * 1.15;
    let x_range = (n_min / 2.0)..(n_max * 2.0);
    let mut builder = ChartBuilder::on(&root);
    builder
        .margin(20)
        .x_label_area_size(if text { 55 } else { 10 })
        .y_label_area_size(if text { 80 } else { 10 });
    if text {
        builder.caption("Resident memory of volmig vs tracked volumes", (FAMILY, 26));
    }
    let mut chart = builder
        .build_cartesian_2d(x_range.clone().log_scale(), 0f64..y_max)
        .map_err(err("chart"))?;
    let mut mesh = chart.configure_mesh();
    if text {
        mesh.x_desc("tracked volumes (PV + Registered VolumeMigration), log scale")
            .y_desc("RSS (MiB)")
            .axis_desc_style((FAMILY, 18))
            .label_style((FAMILY, 16))
            .x_label_formatter(&|x| format!("{x:.0}"))
            .y_label_formatter(&|y| format!("{y:.0}"));
    } else {
        mesh.x_labels(0).y_labels(0);
    }
    mesh.draw().map_err(err("mesh"))?;
    let color = PALETTE[0];
    let measured = chart
        .draw_series(LineSeries::new(
            rows.iter()
                .map(|t| (t.volumes as f64, t.rss_kib.median / 1024.0)),
            color.stroke_width(3),
        ))
        .map_err(err("series"))?;
    if text {
        measured
            .label("measured RSS (median, min–max)")
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 24, y)], color.stroke_width(3))
            });
    }
    chart
        .draw_series(rows.iter().map(|t| {
            Circle::new(
                (t.volumes as f64, t.rss_kib.median / 1024.0),
                5,
                color.filled(),
            )
        }))
        .map_err(err("points"))?;
    chart
        .draw_series(rows.iter().map(|t| {
            ErrorBar::new_vertical(
                t.volumes as f64,
                t.rss_kib.min / 1024.0,
                t.rss_kib.median / 1024.0,
                t.rss_kib.max / 1024.0,
                color.stroke_width(2),
                12,
            )
        }))
        .map_err(err("error bars"))?;
    let goal_color = PALETTE[1];
    let steps = 60;
    let curve: Vec<(f64, f64)> = (0..=steps)
        .map(|i| {
            let n = x_range.start * (x_range.end / x_range.start).powf(i as f64 / steps as f64);
            (n, goal(n))
        })
        .collect();
    let goal_series = chart
        .draw_series(DashedLineSeries::new(
            curve,
            10,
            6,
            goal_color.stroke_width(2),
        ))
        .map_err(err("goal"))?;
    if text {
        goal_series
            .label(format!("goal: idle ({idle_mib:.1} MiB) + 1 KiB per volume"))
            .legend(move |(x, y)| {
                plotters::element::DashedPathElement::new(
                    vec![(x, y), (x + 24, y)],
                    5,
                    3,
                    goal_color.stroke_width(2),
                )
            });
    }
    let e2e_color = PALETTE[2];
    let marker = chart
        .draw_series(e2e.iter().filter_map(|s| {
            s.rss_kib_after
                .map(|k| TriangleMarker::new((s.volumes as f64, k / 1024.0), 8, e2e_color.filled()))
        }))
        .map_err(err("end-to-end"))?;
    if text && !e2e.is_empty() {
        marker
            .label("leader after steady passes, end to end with the simulator")
            .legend(move |(x, y)| TriangleMarker::new((x + 12, y), 7, e2e_color.filled()));
    }
    if text {
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .label_font((FAMILY, 16))
            .background_style(WHITE.mix(0.9))
            .border_style(BLACK)
            .draw()
            .map_err(err("legend"))?;
    }
    root.present()
        .with_context(|| format!("writing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::procfs::Machine;
    use crate::results::{ApiCost, Summary, Throughput};

    fn sample() -> Results {
        let point = |latency_ms: u64, concurrency: u16, v: f64| Throughput {
            latency_ms,
            concurrency,
            volumes: 100,
            seconds: Summary::of(&[100.0 / v]),
            volumes_per_second: Summary::of(&[v * 0.9, v, v * 1.1]),
            ideal_per_second: f64::from(concurrency) * 1000.0 / latency_ms as f64,
            ratio_to_ideal: Summary::of(&[0.9]),
            peak_creates_in_flight: f64::from(concurrency),
            api_writes_per_pv: Summary::of(&[6.0]),
            sim_calls_per_pv: Summary::of(&[4.0]),
            backend_call_ms: Default::default(),
            bare: None,
            ratio_to_bare: None,
            pairs: Vec::new(),
            stage_seconds: Default::default(),
            slot_seconds_per_registration: 0.0,
            cpu_ms_per_registration: Default::default(),
        };
        let tracked = |volumes: usize, mib: f64| Tracked {
            volumes,
            rss_kib: Summary::of(&[mib * 1024.0, mib * 1100.0]),
            ..Tracked::default()
        };
        Results {
            date: "2026-01-01T00:00:00Z".into(),
            scale: "test".into(),
            runs: 3,
            machine: Machine::read(),
            total_seconds: 1.0,
            throughput: vec![
                point(50, 1, 15.0),
                point(50, 8, 120.0),
                point(200, 1, 4.5),
                point(200, 8, 38.0),
            ],
            api_cost: ApiCost::default(),
            steady: vec![SteadyPass {
                volumes: 2_000,
                rss_kib_after: Some(40_000.0),
                ..SteadyPass::default()
            }],
            tracked: vec![
                tracked(0, 20.0),
                tracked(1_000, 25.0),
                tracked(10_000, 60.0),
            ],
            goals: Vec::new(),
            notes: Vec::new(),
        }
    }

    #[test]
    fn no_chart_is_drawn_without_its_data() {
        let dir = tempfile::tempdir().unwrap();
        let mut r = sample();
        r.throughput.clear();
        r.tracked.clear();
        r.steady.clear();
        let (t, m) = (dir.path().join("t.png"), dir.path().join("m.png"));
        throughput(&r, &t).unwrap();
        memory(&r, &m).unwrap();
        assert!(!t.exists() && !m.exists());
        // An end-to-end steady daemon's RSS alone is memory data (`--only steady`).
        r.steady = sample().steady;
        memory(&r, &m).unwrap();
        assert!(m.exists() && !t.exists());
    }

    #[test]
    fn charts_draw_with_and_without_text() {
        let dir = tempfile::tempdir().unwrap();
        let r = sample();
        for text in [true, false] {
            if text && font().is_none() {
                continue;
            }
            let t = dir.path().join(format!("t-{text}.png"));
            let m = dir.path().join(format!("m-{text}.png"));
            draw_throughput(&r, &t, text).unwrap();
            draw_memory(&r, &m, text).unwrap();
            for file in [t, m] {
                let bytes = std::fs::read(&file).unwrap();
                assert!(
                    bytes.starts_with(b"\x89PNG\r\n\x1a\n"),
                    "{}",
                    file.display()
                );
            }
        }
    }
}
