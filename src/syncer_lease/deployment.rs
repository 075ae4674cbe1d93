//! What the driver's controller Deployment says about its syncer (docs/design.md §8.2).
//!
//! The driver's syncer leads through its Lease only with `--leader-election` (off by default,
//! `cmd/syncer/main.go`; the stock manifest turns it on). Without it every replica of the
//! `vsphere-syncer` container registers on a miss and no Lease exists at all, so a running
//! controller Deployment whose syncer has leader election off counts as a live syncer:
//! volmig follows, and cannot hold it off. With it, a Deployment that wants replicas means a
//! syncer leads again soon even while its Lease has lapsed (a rollout: the leader's pod exits
//! on SIGTERM without releasing the Lease, `cmd/syncer/main.go:139-150` @ bf80902), so volmig
//! never takes that Lease while such a Deployment stands.

use k8s_openapi::api::apps::v1::Deployment;

/// The container of the driver's controller Deployment that runs the syncer.
pub const SYNCER_CONTAINER: &str = "vsphere-syncer";

/// The driver's controller Deployment as volmig judges it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DriverPresence {
    /// No such Deployment, or one without a `vsphere-syncer` container: no syncer runs.
    Absent,
    /// Its syncer runs without leader election on an available replica: it registers
    /// without any Lease (what to say about it).
    Unelected(String),
    /// Its syncer leads through the Lease; `replicas` is the larger of the replicas wanted
    /// and the pods that exist (0: scaled down).
    Elected {
        /// The Deployment's name.
        name: String,
        /// `max(spec.replicas, status.replicas)`.
        replicas: i32,
    },
}

/// Judges the Deployment as read (`None`: it does not exist).
pub fn presence(deployment: Option<&Deployment>) -> DriverPresence {
    let Some(deployment) = deployment else {
        return DriverPresence::Absent;
    };
    if syncer_container(deployment).is_none() {
        return DriverPresence::Absent;
    }
    if let Some(unelected) = syncer_without_election(deployment) {
        return DriverPresence::Unelected(unelected);
    }
    // With election, or without it and no available replica yet (scaled down, or starting:
    // judged like an elected one, which registers again once a replica runs).
    let wanted = deployment.spec.replicas.unwrap_or(1);
    let existing = deployment
        .status
        .as_ref()
        .and_then(|s| s.replicas)
        .unwrap_or(0);
    DriverPresence::Elected {
        name: deployment.metadata.name.clone().unwrap_or_default(),
        replicas: wanted.max(existing),
    }
}

fn syncer_container(deployment: &Deployment) -> Option<&k8s_openapi::api::core::v1::Container> {
    deployment
        .spec
        .template
        .spec
        .as_ref()?
        .containers
        .iter()
        .find(|c| c.name == SYNCER_CONTAINER)
}

/// When `deployment` runs the syncer without leader election (at least one available
/// replica), says so for the log and `volmig report`; else `None`.
pub fn syncer_without_election(deployment: &Deployment) -> Option<String> {
    let name = deployment.metadata.name.as_deref().unwrap_or("?");
    let container = syncer_container(deployment)?;
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
    fn presence_says_whether_a_syncer_runs_or_will_run_again() {
        assert_eq!(presence(None), DriverPresence::Absent);
        let stock = deployment(&["--leader-election"], 3);
        assert_eq!(
            presence(Some(&stock)),
            DriverPresence::Elected {
                name: "vsphere-csi-controller".into(),
                replicas: 1
            },
            "spec.replicas defaults to 1"
        );
        let mut scaled = stock.clone();
        scaled.spec.replicas = Some(0);
        assert_eq!(
            presence(Some(&scaled)),
            DriverPresence::Elected {
                name: "vsphere-csi-controller".into(),
                replicas: 0
            }
        );
        if let Some(status) = scaled.status.as_mut() {
            status.replicas = Some(2);
        }
        assert!(
            matches!(
                presence(Some(&scaled)),
                DriverPresence::Elected { replicas: 2, .. }
            ),
            "pods still terminating count"
        );
        assert!(matches!(
            presence(Some(&deployment(&[], 2))),
            DriverPresence::Unelected(_)
        ));
        let mut without = deployment(&["--leader-election"], 2);
        if let Some(spec) = without.spec.template.spec.as_mut() {
            spec.containers.retain(|c| c.name != SYNCER_CONTAINER);
        }
        assert_eq!(presence(Some(&without)), DriverPresence::Absent);
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
