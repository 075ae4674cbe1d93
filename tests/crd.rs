//! The checked-in CRD is exactly what `volmig crd` prints (docs/design.md §2.7).

use std::process::Command;

#[test]
fn checked_in_crd_matches_volmig_crd_output() {
    let output = Command::new(env!("CARGO_BIN_EXE_volmig"))
        .arg("crd")
        .output()
        .expect("run volmig crd");
    assert!(output.status.success(), "volmig crd failed: {output:?}");
    let printed = String::from_utf8(output.stdout).expect("utf-8");
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/crds/volumemigrations.yaml");
    let checked_in = std::fs::read_to_string(path).expect("read crds/volumemigrations.yaml");
    assert!(
        printed == checked_in,
        "crds/volumemigrations.yaml is stale: run `make crd` and commit the result"
    );
    for needle in [
        "scope: Cluster",
        "- vmig",
        "status: {}",
        "rule: self == oldSelf",
        "jsonPath: .status.volumeID",
        "name: Attempts",
        "name: Reason",
        "jsonPath: .status.lastError.reason",
    ] {
        assert!(printed.contains(needle), "CRD lacks {needle:?}");
    }
    println!(
        "volmig crd == crds/volumemigrations.yaml ({} bytes)",
        printed.len()
    );
}

#[test]
fn chart_copy_of_the_drivers_crd_matches_volmig_crd_driver() {
    let output = Command::new(env!("CARGO_BIN_EXE_volmig"))
        .args(["crd", "--driver"])
        .output()
        .expect("run volmig crd --driver");
    assert!(
        output.status.success(),
        "volmig crd --driver failed: {output:?}"
    );
    let printed = String::from_utf8(output.stdout).expect("utf-8");
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/charts/volmig/files/cnsvspherevolumemigrations.yaml"
    );
    let checked_in = std::fs::read_to_string(path).expect("read the chart's driver CRD");
    assert!(
        printed == checked_in,
        "charts/volmig/files/cnsvspherevolumemigrations.yaml is stale: run `make crd`"
    );
    for needle in [
        "name: cnsvspherevolumemigrations.cns.vmware.com",
        "group: cns.vmware.com",
        "scope: Cluster",
        "volumepath:",
        "volumeid:",
        "protectvolumefromvmdelete:",
    ] {
        assert!(printed.contains(needle), "driver CRD lacks {needle:?}");
    }
}
