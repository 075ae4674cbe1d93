//! A driver syncer that runs without leader election (docs/design.md §8.2).
//!
//! The driver's syncer leads through its Lease only with `--leader-election` (off by default,
//! `cmd/syncer/main.go`; the stock manifest turns it on). Without it every replica of the
//! `vsphere-syncer` container registers on a miss and no Lease exists at all, so a running
//! controller Deployment whose syncer has leader election off counts as a live syncer:
//! volmig follows, and cannot hold it off.

use k8s_openapi::api::apps::v1::Deployment;

/// The container of the driver's controller Deployment that runs the syncer.
pub const SYNCER_CONTAINER: &str = "vsphere-syncer";

/// When `deployment` runs the syncer without leader election (at least one available
/// replica), says so for the log and `volmig report`; else `None`.
pub fn syncer_without_election(deployment: &Deployment) -> Option<String> {
    let name = deployment.metadata.name.as_deref().unwrap_or("?");
    let container = deployment
        .spec
        .template
        .spec
        .as_ref()?
        .containers
        .iter()
        .find(|c| c.name == SYNCER_CONTAINER)?;
    let args = container.args.iter().flatten().map(String::as_str);
    if leader_election_on(args) {
        return None;
    }
    let available = deployment
        .status
        .as_ref()
        .and_then(|s| s.available_replicas)
        .unwrap_or(0);
    (available > 0).then(|| {
        format!(
            "deployment/{name} (its {SYNCER_CONTAINER} container runs without --leader-election, \
             so it registers without any Lease)"
        )
    })
}

/// Whether the syncer's flags turn leader election on: Go's flag package takes
/// `--leader-election`, `-leader-election`, and `=true`/`=false` forms (`=1`, `=t`, ...).
fn leader_election_on<'a>(args: impl Iterator<Item = &'a str>) -> bool {
    let mut on = false;
    for arg in args {
        let Some(flag) = arg.strip_prefix("--").or_else(|| arg.strip_prefix('-')) else {
            continue;
        };
        match flag.split_once('=') {
            None if flag == "leader-election" => on = true,
            Some(("leader-election", value)) => {
                on = matches!(value, "1" | "t" | "T" | "true" | "TRUE" | "True");
            }
            _ => {}
        }
    }
    on
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deployment(args: &[&str], available: i32) -> Deployment {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "vsphere-csi-controller"},
            "spec": {
                "selector": {},
                "template": {"spec": {"containers": [
                    {"name": "csi-attacher"},
                    {"name": SYNCER_CONTAINER, "args": args},
                ]}}
            },
            "status": {"availableReplicas": available}
        }))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn the_stock_manifest_elects_a_leader() {
        let stock = [
            "--leader-election",
            "--leader-election-lease-duration=30s",
            "--fss-name=internal-feature-states.csi.vsphere.vmware.com",
        ];
        assert_eq!(syncer_without_election(&deployment(&stock, 3)), None);
        assert_eq!(
            syncer_without_election(&deployment(&["-leader-election=true"], 1)),
            None
        );
    }

    #[test]
    fn a_running_syncer_without_election_is_live() {
        for args in [
            &[][..],
            &["--leader-election=false"][..],
            &["--leader-election", "--leader-election=false"][..],
            &["--leader-election-lease-duration=30s"][..],
        ] {
            let found = syncer_without_election(&deployment(args, 2));
            assert!(
                found
                    .as_deref()
                    .is_some_and(|d| d.contains("deployment/vsphere-csi-controller")),
                "{args:?}: {found:?}"
            );
        }
    }

    #[test]
    fn a_deployment_with_no_available_replica_or_no_syncer_registers_nothing() {
        assert_eq!(syncer_without_election(&deployment(&[], 0)), None);
        let mut without = deployment(&[], 2);
        if let Some(spec) = without.spec.template.spec.as_mut() {
            spec.containers.retain(|c| c.name != SYNCER_CONTAINER);
        }
        assert_eq!(syncer_without_election(&without), None);
    }
}
