//! The plan of one `volmig run --dry-run` pass: every action the daemon would take, in four
//! groups (register, repair, publish, unregister), and how `--dry-run --once` prints it
//! (`-o table|json|csv`, the conventions of `volmig report`) and exits: 0 when nothing
//! would be done, 1 when something would. Pure: the pass that fills it is
//! `daemon::dry_run`, the same one `volmig_dry_run_actions` counts.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use crate::report::render::write_csv_record;
use crate::report::{Format, Rendered};

/// What kind of change an action is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Group {
    /// A path would be registered: a VolumeMigration created for a new PV, a registration
    /// started, retried or made again.
    Register,
    /// What volmig records would be corrected: status PV lists, finalizers, volume IDs,
    /// duplicates, protection from VM deletion, Warning Events, a VolumeMigration whose PVs
    /// are gone deleted (`--on-pv-delete=keep`).
    Repair,
    /// The vSphere CSI driver's cache (`CnsVSphereVolumeMigration` objects) would change.
    Publish,
    /// A CNS volume would be unregistered (its vmdk stays).
    Unregister,
    /// Noticed, nothing done: an orphaned volmig volume kept (no `--gc-orphans`).
    Note,
}

impl Group {
    /// Every group, in the order the plan is printed.
    pub const ALL: [Group; 5] = [
        Group::Register,
        Group::Repair,
        Group::Publish,
        Group::Unregister,
        Group::Note,
    ];

    /// The label printed in the table's first column and in CSV and JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            Group::Register => "register",
            Group::Repair => "repair",
            Group::Publish => "publish",
            Group::Unregister => "unregister",
            Group::Note => "note",
        }
    }

    /// Whether actions of this group change anything (all but [`Group::Note`]).
    pub fn is_change(self) -> bool {
        self != Group::Note
    }
}

/// One thing the daemon would do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Action {
    /// The kind of change.
    pub group: Group,
    /// The part of the daemon that would act: `pv_watcher`, `reconcile`, `full_sync`,
    /// `publish` (the `source` label of `volmig_dry_run_actions`).
    pub source: &'static str,
    /// What it would do (the `action` label of `volmig_dry_run_actions`).
    pub action: &'static str,
    /// What it acts on: a VolumeMigration, a driver object, a PV or a CNS volume ID.
    pub object: String,
    /// The canonical volume path, when the action is about one.
    pub path: Option<String>,
    /// Detail for a human; empty when there is none.
    pub detail: String,
}

impl Action {
    /// An action without detail.
    pub fn new(
        group: Group,
        source: &'static str,
        action: &'static str,
        object: impl Into<String>,
        path: Option<String>,
    ) -> Action {
        Action {
            group,
            source,
            action,
            object: object.into(),
            path,
            detail: String::new(),
        }
    }

    /// The same action with `detail`.
    pub fn with_detail(self, detail: impl Into<String>) -> Action {
        Action {
            detail: detail.into(),
            ..self
        }
    }
}

/// What the pass read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Inputs {
    /// In-tree vSphere PVs (valid paths or not).
    pub persistent_volumes: usize,
    /// Distinct valid volume paths of those PVs.
    pub paths: usize,
    /// VolumeMigrations.
    pub volume_migrations: usize,
    /// CNS volumes of the vCenter.
    pub cns_volumes: usize,
    /// Whether volmig publishes to the CSI driver's cache (its CRD is served and
    /// `--publish-driver-cache` is not `off`).
    pub publish: bool,
}

/// Everything one pass would do.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// What the pass read.
    pub read: Inputs,
    /// The actions, in the order the pass decided them.
    pub actions: Vec<Action>,
}

/// Counts by `(source, action)`: the samples of `volmig_dry_run_actions`.
pub type Counts = BTreeMap<(&'static str, &'static str), usize>;

impl Plan {
    /// Adds an action.
    pub fn add(&mut self, action: Action) {
        self.actions.push(action);
    }

    /// Counts by `(source, action)`, notes included.
    pub fn counts(&self) -> Counts {
        let mut counts = Counts::new();
        for a in &self.actions {
            *counts.entry((a.source, a.action)).or_default() += 1;
        }
        counts
    }

    /// Actions by group (groups without actions left out).
    pub fn totals(&self) -> BTreeMap<Group, usize> {
        let mut totals = BTreeMap::new();
        for a in &self.actions {
            *totals.entry(a.group).or_default() += 1;
        }
        totals
    }

    /// Number of actions that change something (notes excluded).
    pub fn changes(&self) -> usize {
        self.actions.iter().filter(|a| a.group.is_change()).count()
    }

    /// True when the daemon would change nothing: every in-tree PV is Registered (and
    /// published, when volmig publishes) and every record is right.
    pub fn nothing_to_do(&self) -> bool {
        self.changes() == 0
    }

    /// The actions grouped in [`Group::ALL`] order, each group in decision order.
    fn grouped(&self) -> Vec<&Action> {
        let mut sorted: Vec<&Action> = self.actions.iter().collect();
        sorted.sort_by_key(|a| a.group);
        sorted
    }
}

/// The one-line verdict, e.g. `NOTHING TO DO: ...` or `WOULD ACT: 3 actions (register 2, repair 1)`.
pub fn verdict(plan: &Plan) -> String {
    let published = if plan.read.publish {
        " and published to the vSphere CSI driver"
    } else {
        ""
    };
    if plan.nothing_to_do() {
        return format!(
            "NOTHING TO DO: all {} in-tree vSphere PVs are Registered{published}",
            plan.read.persistent_volumes
        );
    }
    let n = plan.changes();
    let parts: Vec<String> = plan
        .totals()
        .into_iter()
        .filter(|(g, _)| g.is_change())
        .map(|(g, count)| format!("{} {count}", g.as_str()))
        .collect();
    format!(
        "WOULD ACT: {n} action{} ({})",
        if n == 1 { "" } else { "s" },
        parts.join(", ")
    )
}

/// What `volmig run --dry-run --once` prints and how it exits (the contract of
/// `volmig report`: [`Rendered::exit_code`] is 0 when nothing would be done, else 1; with
/// JSON and CSV the verdict goes to stderr).
pub fn render(plan: &Plan, format: Format) -> Rendered {
    Rendered {
        stdout: match format {
            Format::Table => table(plan),
            Format::Json => json(plan),
            Format::Csv => csv(plan),
        },
        stderr: (format != Format::Table).then(|| verdict(plan)),
        ready: plan.nothing_to_do(),
    }
}

const TABLE_HEADERS: [&str; 5] = ["WOULD", "ACTION", "OBJECT", "PATH", "DETAIL"];

fn cells(a: &Action) -> [String; 5] {
    [
        a.group.as_str().to_owned(),
        format!("{}/{}", a.source, a.action),
        a.object.clone(),
        a.path.clone().unwrap_or_else(|| "-".to_owned()),
        a.detail.clone(),
    ]
}

fn table(plan: &Plan) -> String {
    let mut out = String::new();
    let read = plan.read;
    let _ = writeln!(
        out,
        "Dry run, one pass: {} in-tree vSphere PVs ({} paths), {} VolumeMigrations, {} CNS \
         volumes; publication to the CSI driver {}",
        read.persistent_volumes,
        read.paths,
        read.volume_migrations,
        read.cns_volumes,
        if read.publish { "on" } else { "off" }
    );
    out.push('\n');
    let rows: Vec<[String; 5]> = plan.grouped().into_iter().map(cells).collect();
    if rows.is_empty() {
        let _ = writeln!(out, "No actions.");
    } else {
        let mut widths = TABLE_HEADERS.map(|h| h.chars().count());
        for row in &rows {
            for (width, cell) in widths.iter_mut().zip(row) {
                *width = (*width).max(cell.chars().count());
            }
        }
        write_line(&mut out, &TABLE_HEADERS.map(str::to_owned), &widths);
        for row in &rows {
            write_line(&mut out, row, &widths);
        }
    }
    out.push('\n');
    let _ = writeln!(out, "{}", verdict(plan));
    out
}

fn write_line(out: &mut String, cells: &[String; 5], widths: &[usize; 5]) {
    for (i, (cell, width)) in cells.iter().zip(widths).enumerate() {
        out.push_str(cell);
        if i + 1 < cells.len() {
            let pad = width - cell.chars().count() + 3;
            out.extend(std::iter::repeat_n(' ', pad));
        }
    }
    // no trailing blanks when the detail is empty
    let trimmed = out.trim_end_matches(' ').len();
    out.truncate(trimmed);
    out.push('\n');
}

/// The JSON document: `{nothingToDo, read, totals, actions}`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Document<'a> {
    nothing_to_do: bool,
    read: Inputs,
    totals: BTreeMap<&'static str, usize>,
    actions: Vec<&'a Action>,
}

fn json(plan: &Plan) -> String {
    let document = Document {
        nothing_to_do: plan.nothing_to_do(),
        read: plan.read,
        totals: plan
            .totals()
            .into_iter()
            .map(|(g, n)| (g.as_str(), n))
            .collect(),
        actions: plan.grouped(),
    };
    // Strings, numbers, booleans and maps with string keys only: cannot fail.
    let mut text = serde_json::to_string_pretty(&document).unwrap_or_default();
    text.push('\n');
    text
}

/// The CSV columns, in order.
pub const CSV_HEADERS: [&str; 6] = ["group", "source", "action", "object", "path", "detail"];

fn csv(plan: &Plan) -> String {
    let mut out = String::new();
    write_csv_record(&mut out, CSV_HEADERS);
    for a in plan.grouped() {
        write_csv_record(
            &mut out,
            [
                a.group.as_str(),
                a.source,
                a.action,
                &a.object,
                a.path.as_deref().unwrap_or_default(),
                &a.detail,
            ],
        );
    }
    out
}

#[cfg(test)]
#[path = "dry_run_plan_tests.rs"]
mod tests;
