//! The vSphere CSI driver's CRD the chart installs with `driverCache.installCrd=true`: it
//! carries `helm.sh/resource-policy: keep`, so `helm uninstall` never deletes it (deleting
//! it would delete every CnsVSphereVolumeMigration of the driver, cluster-wide).

use serde_json::Value;

use crate::helm::{
    self, Cluster, NAMESPACE, RELEASE, chart_dir, describe, read_repo_file, render, run,
};

/// The driver's CRD.
const DRIVER_CRD: &str = "cnsvspherevolumemigrations.cns.vmware.com";
/// The chart's copy of it, as `volmig crd --driver` prints it.
const DRIVER_CRD_FILE: &str = "charts/volmig/files/cnsvspherevolumemigrations.yaml";
const INSTALL_CRD: [&str; 2] = ["--set", "driverCache.installCrd=true"];

/// One object of the driver, as the driver (or volmig) writes it.
const DRIVER_OBJECT: &str = r#"apiVersion: cns.vmware.com/v1alpha1
kind: CnsVSphereVolumeMigration
metadata:
  name: 6b1d0f0e-3a0c-4c8e-9d2c-0f7e0e6f1a11
spec:
  volumepath: "[LocalDS_0] kubevols/disk-0001.vmdk"
  volumeid: 6b1d0f0e-3a0c-4c8e-9d2c-0f7e0e6f1a11
  protectvolumefromvmdelete: true
"#;

fn keep_policy(crd: &Value) -> &Value {
    &crd["metadata"]["annotations"]["helm.sh/resource-policy"]
}

#[test]
fn the_rendered_driver_crd_is_the_generated_one_with_the_keep_policy() {
    assert!(
        render(&[])
            .of_kind("CustomResourceDefinition")
            .next()
            .is_none(),
        "off by default: the driver owns its CRD"
    );
    let rendered = render(&INSTALL_CRD);
    let crd = rendered.get("CustomResourceDefinition", DRIVER_CRD);
    assert_eq!(keep_policy(crd), "keep", "{}", crd["metadata"]);

    // Apart from that annotation it is the generated file, which stays the driver's
    // definition (no Helm annotation in it).
    let file: Value = serde_saphyr::from_str(&read_repo_file(DRIVER_CRD_FILE))
        .unwrap_or_else(|e| panic!("{DRIVER_CRD_FILE} parses: {e}"));
    assert!(
        file["metadata"]["annotations"].is_null(),
        "{DRIVER_CRD_FILE} must stay the driver's CRD: {}",
        file["metadata"]
    );
    let mut without = crd.clone();
    let metadata = without["metadata"]
        .as_object_mut()
        .unwrap_or_else(|| panic!("metadata of {crd}"));
    metadata.remove("annotations");
    assert_eq!(
        without, file,
        "the rendered driver CRD differs from {DRIVER_CRD_FILE} beyond the keep policy"
    );
}

#[tokio::test]
async fn helm_uninstall_keeps_the_driver_crd_and_its_objects() {
    let cluster = Cluster::start().await;
    // The CSI driver's namespace (the chart reads its syncer's Lease there).
    cluster.kubectl_ok(&["create", "namespace", "vmware-system-csi"], None);
    let install = run(cluster
        .helm()
        .args(["install", RELEASE])
        .arg(chart_dir())
        .args(["--namespace", NAMESPACE, "--create-namespace"])
        .args(helm::base_values(&[]))
        .args(INSTALL_CRD));
    assert!(
        install.status.success(),
        "helm install: {}",
        describe(&install)
    );

    assert!(
        cluster.get_json(&["crd", DRIVER_CRD]).is_some(),
        "helm install stored the driver's CRD"
    );
    assert!(
        cluster
            .get_json(&["deployment", "volmig", "-n", NAMESPACE])
            .is_some()
    );
    cluster.kubectl_ok(&["apply", "-f", "-"], Some(DRIVER_OBJECT));
    let object = [
        "cnsvspherevolumemigrations",
        "6b1d0f0e-3a0c-4c8e-9d2c-0f7e0e6f1a11",
    ];
    assert!(cluster.get_json(&object).is_some());

    let uninstall = run(cluster.helm().args(["uninstall", RELEASE, "-n", NAMESPACE]));
    let text = describe(&uninstall);
    assert!(uninstall.status.success(), "helm uninstall: {text}");
    assert!(
        cluster
            .get_json(&["deployment", "volmig", "-n", NAMESPACE])
            .is_none(),
        "the release itself is gone"
    );
    let crd = cluster
        .get_json(&["crd", DRIVER_CRD])
        .unwrap_or_else(|| panic!("helm uninstall deleted the driver's CRD: {text}"));
    assert_eq!(keep_policy(&crd), "keep", "{}", crd["metadata"]);
    let kept = cluster
        .get_json(&object)
        .unwrap_or_else(|| panic!("the driver's object is gone after helm uninstall: {text}"));
    assert_eq!(kept["spec"]["volumeid"], object[1]);
}
