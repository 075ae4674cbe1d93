//! `make demo` (README.md, "Quick start"): the demo script prints the mapping table and the
//! simulator's own count with no duplicates. `make test` builds the binaries it runs.

#![allow(clippy::expect_used, reason = "test code: failures should panic")]

use std::process::Command;

#[test]
fn demo_prints_the_table_and_no_duplicates() {
    let root = env!("CARGO_MANIFEST_DIR");
    let output = Command::new("bash")
        .arg(format!("{root}/scripts/demo.sh"))
        .env_remove("DEMO_KEEP")
        .output()
        .expect("run scripts/demo.sh");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "demo failed:\n{stdout}\n{stderr}");
    let table_header = stdout
        .lines()
        .find(|l| l.starts_with("NAME "))
        .unwrap_or_else(|| panic!("no table in:\n{stdout}"));
    for column in ["PATH", "VOLUME-ID", "PHASE", "PV", "ATTEMPTS", "AGE"] {
        assert!(
            table_header.contains(column),
            "column {column} missing: {table_header}"
        );
    }
    let registered = stdout
        .lines()
        .filter(|l| l.contains(" Registered "))
        .count();
    assert_eq!(registered, 2, "two vmdks registered:\n{stdout}");
    assert!(
        stdout.contains("pv-a,pv-b"),
        "the shared vmdk lists both PVs:\n{stdout}"
    );
    assert!(
        stdout
            .lines()
            .any(|l| l.contains(" Failed ") && l.contains("does-not-exist"))
    );
    assert!(
        stdout.contains("CNS volumes: 2 for 2 vmdks, duplicates: 0"),
        "simulator count missing:\n{stdout}"
    );
    assert!(
        stdout.contains("InvalidVolumePath"),
        "malformed PV event missing:\n{stdout}"
    );
    let driver_rows: Vec<&str> = stdout
        .lines()
        .skip_while(|l| !l.starts_with("NAME") || !l.contains("VOLUMEPATH"))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .collect();
    assert_eq!(
        driver_rows.len(),
        3,
        "one driver cache object per raw spelling: disk-0001 (pv-a, and pv-b's other \
         spelling) and disk-0002:\n{stdout}"
    );
    assert!(
        driver_rows
            .iter()
            .any(|r| r.contains("kubevols//disk-0001.vmdk")),
        "pv-b's own spelling is cached too:\n{stdout}"
    );
    for row in &driver_rows {
        assert!(
            row.contains("disk-000") && row.trim_end().ends_with("true"),
            "a published, protected mapping: {row}"
        );
    }
    let check: Vec<&str> = stdout
        .lines()
        .skip_while(|l| !l.starts_with("== preflight: volmig check"))
        .skip(1)
        .collect();
    assert!(
        check
            .iter()
            .any(|l| l.starts_with("all ") && l.contains("checks passed")),
        "volmig check ran last and passed:\n{stdout}"
    );
    assert!(
        check.iter().all(|l| !l.contains('✗')),
        "volmig check printed no ✗:\n{stdout}"
    );
    println!(
        "make demo: table with 2 Registered + 1 Failed, CNS volumes: 2 for 2 vmdks, duplicates: 0, 3 driver cache objects, volmig check all ✓"
    );
}
