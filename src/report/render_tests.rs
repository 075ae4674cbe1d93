use super::*;
use crate::report::model::{
    Advice, DriverCacheSummary, InlineSummary, NO_PHASE, PvCounts, Report, Row, Totals, reason,
};
use crate::report::registrar::{Mode, Registrar};
use crate::volume_migration::Phase;

/// A small RFC 4180 reader: records of fields; quoted fields may hold `,`, `"` (doubled)
/// and line breaks; records end in CRLF (or LF).
pub(crate) fn parse_csv(text: &str) -> Result<Vec<Vec<String>>, String> {
    let mut records = Vec::new();
    let mut record = Vec::new();
    let mut field = String::new();
    let mut chars = text.chars().peekable();
    let mut quoted = false;
    let mut at_field_start = true;
    while let Some(c) = chars.next() {
        if quoted {
            match c {
                '"' if chars.peek() == Some(&'"') => {
                    chars.next();
                    field.push('"');
                }
                '"' => {
                    quoted = false;
                    match chars.peek() {
                        None | Some(',' | '\r' | '\n') => {}
                        Some(other) => return Err(format!("{other:?} after closing quote")),
                    }
                }
                other => field.push(other),
            }
            continue;
        }
        match c {
            '"' if at_field_start => {
                quoted = true;
                at_field_start = false;
            }
            '"' => return Err("quote inside an unquoted field".into()),
            ',' => {
                record.push(std::mem::take(&mut field));
                at_field_start = true;
            }
            '\r' if chars.peek() == Some(&'\n') => {}
            '\n' => {
                record.push(std::mem::take(&mut field));
                records.push(std::mem::take(&mut record));
                at_field_start = true;
            }
            other => {
                field.push(other);
                at_field_start = false;
            }
        }
    }
    if quoted {
        return Err("unterminated quoted field".into());
    }
    if !field.is_empty() || !record.is_empty() {
        record.push(field);
        records.push(record);
    }
    Ok(records)
}

fn row(pv: &str, phase: Option<Phase>, id: Option<&str>, ready: bool) -> Row {
    Row {
        pv: pv.into(),
        volume_path: format!("[ds] {pv}.vmdk"),
        canonical_path: Some(format!("[ds] {pv}.vmdk")),
        path_error: None,
        volume_migration: Some(format!("{pv}-0123abcd")),
        phase,
        volume_id: id.map(Into::into),
        driver_object: Some(ready),
        reason: None,
        message: String::new(),
        ready,
    }
}

fn sample() -> Report {
    let ok = row("pv-ok", Some(Phase::Registered), Some("id-1"), true);
    let mut failed = row("pv-failed", Some(Phase::Failed), None, false);
    failed.reason = Some("DiskNotFound".into());
    failed.message = "disk \"[ds] a,b.vmdk\" not found,\nvCenter said: \"no\"".into();
    let mut bad = row("pv-bad", None, None, false);
    bad.volume_path = " kubevols/x.vmdk".into();
    bad.canonical_path = None;
    bad.volume_migration = None;
    bad.driver_object = None;
    bad.path_error = Some("does not start with a [datastore] part".into());
    bad.reason = Some(reason::INVALID_VOLUME_PATH.into());
    bad.message = "does not start with a [datastore] part".into();
    let rows = vec![bad, failed, ok];
    Report {
        ready: false,
        persistent_volumes: PvCounts {
            total: 5,
            in_tree: 3,
            ignored: 2,
        },
        inline_pod_volumes: InlineSummary {
            count: 0,
            unreadable: None,
        },
        volume_migrations: 2,
        driver_cache: DriverCacheSummary {
            served: Some(true),
            required: true,
            objects: 1,
        },
        not_ready: 2,
        totals: Totals {
            by_phase: [(NO_PHASE, 1), ("Failed", 1), ("Registered", 1)]
                .map(|(k, v)| (k.to_owned(), v))
                .into(),
            by_reason: [("DiskNotFound", 1), ("InvalidVolumePath", 1)]
                .map(|(k, v)| (k.to_owned(), v))
                .into(),
        },
        advice: ["DiskNotFound", "InvalidVolumePath"]
            .map(|r| Advice {
                reason: r.into(),
                count: 1,
                blocking: 1,
                action: crate::report::model::action(r).into(),
            })
            .into(),
        registrar: None,
        rows,
    }
}

/// [`sample`] with the registrar read from a live syncer Lease.
fn sample_with_registrar() -> Report {
    let mut report = sample();
    report.registrar = Some(Registrar {
        mode: Mode::Follow,
        lease: Some("vmware-system-csi/vsphere-syncer".into()),
        holder: Some("vsphere-csi-controller-x".into()),
        renew_time: Some("2026-12-07T01:02:03Z".parse().unwrap()),
        lease_duration_seconds: Some(30),
        why: "the CSI driver's syncer vsphere-csi-controller-x (Lease \
              vmware-system-csi/vsphere-syncer, renewed 2026-12-07T01:02:03Z, 30 s) registers \
              in-tree vmdks; volmig adopts its volumes"
            .into(),
    });
    report
}

#[test]
fn table_has_summary_aligned_columns_totals_advice_and_verdict() {
    let out = render(&sample(), Format::Table, RowFilter::All);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[0],
        "PersistentVolumes: 3 in-tree vSphere, 2 other (ignored), 5 in all; VolumeMigrations: 2"
    );
    assert_eq!(
        lines[1],
        "Driver cache: 1 CnsVSphereVolumeMigration objects; publication required"
    );
    let header = lines[3];
    assert!(header.starts_with("PV "), "{header}");
    let phase_col = header.find("PHASE").unwrap();
    let reason_col = header.find("REASON").unwrap();
    let ok = lines.iter().find(|l| l.starts_with("pv-ok ")).unwrap();
    assert_eq!(&ok[phase_col..phase_col + "Registered".len()], "Registered");
    assert_eq!(&ok[reason_col..reason_col + 1], "-");
    let bad = lines.iter().find(|l| l.starts_with("pv-bad ")).unwrap();
    assert_eq!(&bad[phase_col..phase_col + NO_PHASE.len()], NO_PHASE);
    assert!(bad.contains("<invalid>"));
    assert_eq!(
        &bad[reason_col..reason_col + "InvalidVolumePath".len()],
        "InvalidVolumePath"
    );
    assert!(
        out.contains("\nBy phase: <none>=1 Failed=1 Registered=1\n"),
        "{out}"
    );
    assert!(
        out.contains("\nBy reason: DiskNotFound=1 InvalidVolumePath=1\n"),
        "{out}"
    );
    assert!(out.contains("What to do:\n  DiskNotFound (1 PV, 1 blocking): the vmdk is missing"));
    assert!(out.contains("  InvalidVolumePath (1 PV, 1 blocking): the PV's spec"));
    assert_eq!(
        lines.last().copied(),
        Some(
            "NOT READY: 2 of 3 in-tree vSphere PVs are not Registered and published to the vSphere CSI driver"
        )
    );
    assert!(lines.iter().all(|l| !l.ends_with(' ')), "trailing blanks");
}

#[test]
fn table_filter_keeps_totals() {
    let out = render(&sample(), Format::Table, RowFilter::NotReady);
    assert!(!out.contains("\npv-ok "));
    assert!(out.contains("\npv-failed "));
    assert!(out.contains("Registered=1"));
    let mut ready = sample();
    ready.rows.retain(|r| r.ready);
    let out = render(&ready, Format::Table, RowFilter::NotReady);
    assert!(out.contains("No rows that are not ready."));
    ready.rows.clear();
    assert!(render(&ready, Format::Table, RowFilter::All).contains("No in-tree vSphere PVs."));
}

#[test]
fn table_driver_cache_lines() {
    let mut report = sample();
    report.driver_cache = DriverCacheSummary {
        served: None,
        required: false,
        objects: 0,
    };
    let out = render(&report, Format::Table, RowFilter::All);
    assert!(out.contains(
        "Driver cache: not checked (--require-driver-cache=off); publication not required"
    ));
    report.driver_cache.served = Some(false);
    let out = render(&report, Format::Table, RowFilter::All);
    assert!(out.contains("CRD cnsvspherevolumemigrations.cns.vmware.com not served"));
    assert!(out.contains("are not Registered\n"), "{out}");
}

#[test]
fn verdicts() {
    let mut report = sample();
    report.ready = true;
    report.not_ready = 0;
    assert_eq!(
        verdict(&report),
        "READY: all 3 in-tree vSphere PVs are Registered and published to the vSphere CSI driver"
    );
    report.driver_cache.required = false;
    assert_eq!(
        verdict(&report),
        "READY: all 3 in-tree vSphere PVs are Registered"
    );
    report.inline_pod_volumes.count = 2;
    assert_eq!(
        verdict(&report),
        "READY: all 3 in-tree vSphere PVs and 2 inline pod volumes are Registered"
    );
    report.ready = false;
    report.not_ready = 1;
    assert_eq!(
        verdict(&report),
        "NOT READY: 1 of 3 in-tree vSphere PVs and 2 inline pod volumes are not Registered"
    );
}

#[test]
fn table_says_how_many_inline_pod_volumes_there_are_or_why_not() {
    let mut report = sample();
    let out = render(&report, Format::Table, RowFilter::All);
    assert!(!out.contains("Inline pod volumes"), "none, no line: {out}");
    report.inline_pod_volumes.count = 2;
    let out = render(&report, Format::Table, RowFilter::All);
    assert!(out.contains("\nInline pod volumes: 2\n"), "{out}");
    report.inline_pod_volumes.count = 0;
    report.inline_pod_volumes.unreadable = Some("listing Pods: forbidden (HTTP 403)".into());
    let out = render(&report, Format::Table, RowFilter::All);
    assert!(
        out.contains("\nInline pod volumes: not checked (listing Pods: forbidden (HTTP 403))\n"),
        "{out}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&render(&report, Format::Json, RowFilter::All)).unwrap();
    assert_eq!(
        json["inlinePodVolumes"],
        serde_json::json!({"count": 0, "unreadable": "listing Pods: forbidden (HTTP 403)"})
    );
}

#[test]
fn json_parses_and_has_the_documented_fields() {
    let out = render(&sample(), Format::Json, RowFilter::All);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["ready"], false);
    assert_eq!(v["notReady"], 2);
    assert_eq!(v["persistentVolumes"]["inTree"], 3);
    assert_eq!(v["persistentVolumes"]["ignored"], 2);
    assert_eq!(v["driverCache"]["served"], true);
    assert_eq!(v["totals"]["byPhase"]["<none>"], 1);
    assert_eq!(v["totals"]["byReason"]["DiskNotFound"], 1);
    assert_eq!(v["advice"][0]["reason"], "DiskNotFound");
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 3);
    assert_eq!(rows[0]["pv"], "pv-bad");
    assert_eq!(rows[0]["canonicalPath"], serde_json::Value::Null);
    assert_eq!(rows[0]["driverObject"], serde_json::Value::Null);
    assert_eq!(rows[0]["phase"], serde_json::Value::Null);
    assert_eq!(rows[1]["message"], sample().rows[1].message);
    assert_eq!(rows[2]["phase"], "Registered");
    assert_eq!(rows[2]["volumeID"], "id-1");
    assert_eq!(rows[2]["driverObject"], true);
    assert_eq!(rows[2]["ready"], true);

    let filtered = render(&sample(), Format::Json, RowFilter::NotReady);
    let v: serde_json::Value = serde_json::from_str(&filtered).unwrap();
    assert_eq!(v["rows"].as_array().unwrap().len(), 2);
    assert_eq!(v["totals"]["byPhase"]["Registered"], 1);
}

#[test]
fn csv_parses_back_to_the_rows() {
    let report = sample();
    let out = render(&report, Format::Csv, RowFilter::All);
    assert!(out.ends_with("\r\n"));
    let records = parse_csv(&out).unwrap();
    assert_eq!(records[0], CSV_HEADERS.map(String::from));
    assert_eq!(records.len(), 1 + report.rows.len());
    for (record, row) in records[1..].iter().zip(&report.rows) {
        assert_eq!(record.len(), CSV_HEADERS.len());
        assert_eq!(record[0], row.pv);
        assert_eq!(record[1], row.volume_path, "leading blank kept");
        assert_eq!(record[2], row.canonical_path.clone().unwrap_or_default());
        assert_eq!(record[3], row.path_error.clone().unwrap_or_default());
        assert_eq!(record[4], row.phase.map_or("", |p| p.as_str()));
        assert_eq!(record[5], row.volume_id.clone().unwrap_or_default());
        let driver = row.driver_object.map_or(String::new(), |b| b.to_string());
        assert_eq!(record[6], driver);
        assert_eq!(record[7], row.reason.clone().unwrap_or_default());
        assert_eq!(
            record[8], row.message,
            "commas, quotes and newlines survive"
        );
        assert_eq!(record[9], row.ready.to_string());
    }
    let filtered = parse_csv(&render(&report, Format::Csv, RowFilter::NotReady)).unwrap();
    assert_eq!(filtered.len(), 3);
}

#[test]
fn the_csv_reader_rejects_broken_input() {
    assert!(parse_csv("a,\"b").is_err());
    assert!(parse_csv("a,b\"c\r\n").is_err());
    assert!(parse_csv("\"a\"b\r\n").is_err());
    assert_eq!(
        parse_csv("a,\"b,\"\"c\"\"\r\nd\"\r\n").unwrap(),
        vec![vec!["a".to_owned(), "b,\"c\"\r\nd".to_owned()]]
    );
}

#[test]
fn table_names_the_registrar_under_the_summary() {
    let out = render(&sample_with_registrar(), Format::Table, RowFilter::All);
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[1].starts_with("Driver cache: "), "{out}");
    assert_eq!(
        lines[2],
        "Registrar: follow — the CSI driver's syncer vsphere-csi-controller-x (Lease \
         vmware-system-csi/vsphere-syncer, renewed 2026-12-07T01:02:03Z, 30 s) registers \
         in-tree vmdks; volmig adopts its volumes"
    );
    assert_eq!(lines[3], "");
    assert!(lines[4].starts_with("PV "), "{out}");
    assert_eq!(out.matches("Registrar:").count(), 1);
    // the verdict is the rows' only
    assert!(
        out.ends_with(&format!("\n{}\n", verdict(&sample()))),
        "{out}"
    );

    let out = render(&sample(), Format::Table, RowFilter::All);
    assert!(!out.contains("Registrar:"), "not read, not shown: {out}");
}

#[test]
fn json_has_the_registrar_object() {
    let out = render(&sample_with_registrar(), Format::Json, RowFilter::NotReady);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        v["registrar"],
        serde_json::json!({
            "mode": "follow",
            "lease": "vmware-system-csi/vsphere-syncer",
            "holder": "vsphere-csi-controller-x",
            "renewTime": "2026-12-07T01:02:03Z",
            "leaseDurationSeconds": 30,
            "why": sample_with_registrar().registrar.unwrap().why,
        })
    );
    assert_eq!(v["ready"], false, "the verdict is unchanged");
    let v: serde_json::Value =
        serde_json::from_str(&render(&sample(), Format::Json, RowFilter::All)).unwrap();
    assert_eq!(v.get("registrar"), None);
}

#[test]
fn csv_stays_rows_only_with_a_registrar() {
    let report = sample_with_registrar();
    let out = render(&report, Format::Csv, RowFilter::All);
    assert_eq!(out, render(&sample(), Format::Csv, RowFilter::All));
    assert_eq!(parse_csv(&out).unwrap().len(), 1 + report.rows.len());
}
