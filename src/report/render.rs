//! Prints a [`Report`] as an aligned table, one JSON document or CSV (RFC 4180). Pure:
//! renders into a `String`.

use std::fmt::Write as _;

use super::model::{Report, Row, phase_label};

/// `-o`: the output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Format {
    /// Aligned columns with a summary (the registrar among it), totals and what to do.
    #[default]
    Table,
    /// One JSON object: summary, registrar, totals, advice and rows.
    Json,
    /// One header line and one line per in-tree PV (RFC 4180 quoting); rows only, no
    /// summary and no registrar.
    Csv,
}

/// Which rows to print (totals and the verdict always cover every row).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RowFilter {
    /// Every in-tree PV.
    #[default]
    All,
    /// Only rows that are not ready.
    NotReady,
}

impl RowFilter {
    fn keeps(self, row: &Row) -> bool {
        match self {
            RowFilter::All => true,
            RowFilter::NotReady => !row.ready,
        }
    }
}

/// Renders `report` in `format`.
pub fn render(report: &Report, format: Format, filter: RowFilter) -> String {
    match format {
        Format::Table => table(report, filter),
        Format::Json => json(report, filter),
        Format::Csv => csv(report, filter),
    }
}

/// The one-line verdict, e.g. `READY: all 3 in-tree vSphere PVs are Registered`; inline
/// pod volumes are named when there are any.
pub fn verdict(report: &Report) -> String {
    let pvs = report.persistent_volumes.in_tree;
    let inline = report.inline_pod_volumes.count;
    let counted = if inline == 0 {
        format!("{pvs} in-tree vSphere PVs")
    } else {
        format!("{pvs} in-tree vSphere PVs and {inline} inline pod volumes")
    };
    let what = if report.driver_cache.required {
        "Registered and published to the vSphere CSI driver"
    } else {
        "Registered"
    };
    if report.ready {
        format!("READY: all {counted} are {what}")
    } else {
        format!(
            "NOT READY: {} of {counted} are not {what}",
            report.not_ready
        )
    }
}

const TABLE_HEADERS: [&str; 8] = [
    "PV",
    "VOLUME-PATH",
    "CANONICAL-PATH",
    "PHASE",
    "VOLUME-ID",
    "DRIVER-OBJECT",
    "REASON",
    "MESSAGE",
];

fn driver_cell(value: Option<bool>) -> &'static str {
    match value {
        Some(true) => "yes",
        Some(false) => "no",
        None => "-",
    }
}

fn table_cells(row: &Row) -> [&str; 8] {
    [
        &row.pv,
        &row.volume_path,
        row.canonical_path.as_deref().unwrap_or("<invalid>"),
        phase_label(row.phase),
        row.volume_id.as_deref().unwrap_or("-"),
        driver_cell(row.driver_object),
        row.reason.as_deref().unwrap_or("-"),
        &row.message,
    ]
}

fn table(report: &Report, filter: RowFilter) -> String {
    let mut out = String::new();
    let pvs = report.persistent_volumes;
    let _ = writeln!(
        out,
        "PersistentVolumes: {} in-tree vSphere, {} other (ignored), {} in all; \
         VolumeMigrations: {}",
        pvs.in_tree, pvs.ignored, pvs.total, report.volume_migrations
    );
    let inline = &report.inline_pod_volumes;
    match &inline.unreadable {
        None if inline.count == 0 => {}
        None => {
            let _ = writeln!(out, "Inline pod volumes: {}", inline.count);
        }
        Some(why) => {
            let _ = writeln!(out, "Inline pod volumes: not checked ({why})");
        }
    }
    let cache = report.driver_cache;
    let served = match cache.served {
        None => "not checked (--require-driver-cache=off)".to_owned(),
        Some(false) => "CRD cnsvspherevolumemigrations.cns.vmware.com not served".to_owned(),
        Some(true) => format!("{} CnsVSphereVolumeMigration objects", cache.objects),
    };
    let required = if cache.required {
        "required"
    } else {
        "not required"
    };
    let _ = writeln!(out, "Driver cache: {served}; publication {required}");
    if let Some(registrar) = &report.registrar {
        let _ = writeln!(out, "{}", registrar.line());
    }
    out.push('\n');

    let rows: Vec<[&str; 8]> = report
        .rows
        .iter()
        .filter(|r| filter.keeps(r))
        .map(table_cells)
        .collect();
    if rows.is_empty() {
        let _ = writeln!(
            out,
            "{}",
            match filter {
                RowFilter::All => "No in-tree vSphere PVs.",
                RowFilter::NotReady => "No rows that are not ready.",
            }
        );
    } else {
        let mut widths = TABLE_HEADERS.map(|h| h.chars().count());
        for cells in &rows {
            for (width, cell) in widths.iter_mut().zip(cells) {
                *width = (*width).max(cell.chars().count());
            }
        }
        write_table_line(&mut out, &TABLE_HEADERS, &widths);
        for cells in &rows {
            write_table_line(&mut out, cells, &widths);
        }
    }

    out.push('\n');
    let _ = writeln!(out, "{}", totals_line("By phase", &report.totals.by_phase));
    let _ = writeln!(
        out,
        "{}",
        totals_line("By reason", &report.totals.by_reason)
    );
    if !report.advice.is_empty() {
        out.push('\n');
        let _ = writeln!(out, "What to do:");
        for advice in &report.advice {
            let _ = writeln!(
                out,
                "  {} ({} PV{}, {} blocking): {}",
                advice.reason,
                advice.count,
                if advice.count == 1 { "" } else { "s" },
                advice.blocking,
                advice.action
            );
        }
    }
    out.push('\n');
    let _ = writeln!(out, "{}", verdict(report));
    out
}

fn write_table_line(out: &mut String, cells: &[&str; 8], widths: &[usize; 8]) {
    let last = cells.len() - 1;
    for (i, (cell, width)) in cells.iter().zip(widths).enumerate() {
        if i == last {
            out.push_str(cell);
        } else {
            out.push_str(cell);
            let pad = width - cell.chars().count() + 3;
            out.extend(std::iter::repeat_n(' ', pad));
        }
    }
    // no trailing blanks when the message is empty
    let trimmed = out.trim_end_matches(' ').len();
    out.truncate(trimmed);
    out.push('\n');
}

fn totals_line(title: &str, counts: &std::collections::BTreeMap<String, usize>) -> String {
    if counts.is_empty() {
        return format!("{title}: -");
    }
    let parts: Vec<String> = counts.iter().map(|(k, v)| format!("{k}={v}")).collect();
    format!("{title}: {}", parts.join(" "))
}

fn json(report: &Report, filter: RowFilter) -> String {
    let mut value = match serde_json::to_value(report) {
        Ok(value) => value,
        // Report holds only strings, numbers, booleans, maps with string keys: cannot fail.
        Err(e) => serde_json::json!({"error": e.to_string()}),
    };
    if filter == RowFilter::NotReady
        && let Some(rows) = value.get_mut("rows").and_then(|r| r.as_array_mut())
    {
        rows.retain(|r| r.get("ready") == Some(&serde_json::Value::Bool(false)));
    }
    let mut text = serde_json::to_string_pretty(&value).unwrap_or_default();
    text.push('\n');
    text
}

/// The CSV columns, in order.
pub const CSV_HEADERS: [&str; 10] = [
    "pv",
    "volume_path",
    "canonical_path",
    "path_error",
    "phase",
    "volume_id",
    "driver_object",
    "reason",
    "message",
    "ready",
];

fn csv(report: &Report, filter: RowFilter) -> String {
    let mut out = String::new();
    write_csv_record(&mut out, CSV_HEADERS.iter().copied());
    for row in report.rows.iter().filter(|r| filter.keeps(r)) {
        let driver = match row.driver_object {
            Some(true) => "true",
            Some(false) => "false",
            None => "",
        };
        let phase = row.phase.map_or("", |p| p.as_str());
        write_csv_record(
            &mut out,
            [
                row.pv.as_str(),
                &row.volume_path,
                row.canonical_path.as_deref().unwrap_or_default(),
                row.path_error.as_deref().unwrap_or_default(),
                phase,
                row.volume_id.as_deref().unwrap_or_default(),
                driver,
                row.reason.as_deref().unwrap_or_default(),
                &row.message,
                if row.ready { "true" } else { "false" },
            ],
        );
    }
    out
}

/// Appends one CSV record (RFC 4180 quoting, CRLF line end).
pub(crate) fn write_csv_record<'a>(out: &mut String, fields: impl IntoIterator<Item = &'a str>) {
    for (i, field) in fields.into_iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        if field.contains([',', '"', '\n', '\r']) || field.starts_with(' ') || field.ends_with(' ')
        {
            out.push('"');
            out.push_str(&field.replace('"', "\"\""));
            out.push('"');
        } else {
            out.push_str(field);
        }
    }
    out.push_str("\r\n");
}

#[cfg(test)]
#[path = "render_tests.rs"]
mod tests;
