use super::*;

fn scope() -> Scope {
    Scope {
        lease_namespace: "kube-system".to_owned(),
        lease_name: "volmig".to_owned(),
        leader_election: true,
        driver_namespace: "vmware-system-csi".to_owned(),
        syncer_lease: "vsphere-syncer".to_owned(),
        driver_deployment: "vsphere-csi-controller".to_owned(),
        hold_driver_syncer: false,
        inline_pod_volumes: true,
        events_namespace: "default".to_owned(),
    }
}

fn subject() -> Subject {
    Subject::ServiceAccount {
        account: crate::cli::ServiceAccountRef {
            namespace: "volmig".to_owned(),
            name: "volmig".to_owned(),
        },
        as_caller: false,
    }
}

#[test]
fn the_list_covers_the_charts_rules() {
    let all = required(&scope());
    let has = |resource: &str, sub: &str, verb: &str, ns: Option<&str>, name: Option<&str>| {
        all.iter().any(|p| {
            p.resource == resource
                && p.subresource == sub
                && p.verb == verb
                && p.namespace.as_deref() == ns
                && p.name.as_deref() == name
        })
    };
    assert!(has("persistentvolumes", "", "watch", None, None));
    assert!(has("pods", "", "list", None, None));
    let without_pods = required(&Scope {
        inline_pod_volumes: false,
        ..scope()
    });
    assert!(without_pods.iter().all(|p| p.resource != "pods"));
    assert!(has("volumeattachments", "", "watch", None, None));
    assert!(has("volumemigrations", "", "delete", None, None));
    assert!(has("volumemigrations", "status", "update", None, None));
    assert!(has("cnsvspherevolumemigrations", "", "create", None, None));
    assert!(has("leases", "", "create", Some("kube-system"), None));
    assert!(has(
        "leases",
        "",
        "patch",
        Some("kube-system"),
        Some("volmig")
    ));
    assert!(has(
        "leases",
        "",
        "watch",
        Some("vmware-system-csi"),
        Some("vsphere-syncer")
    ));
    assert!(has(
        "configmaps",
        "",
        "get",
        Some("vmware-system-csi"),
        Some("vsphere-csi-cluster-id")
    ));
    assert!(has("events", "", "patch", Some("default"), None));
    assert!(has(
        "deployments",
        "",
        "watch",
        Some("vmware-system-csi"),
        Some("vsphere-csi-controller")
    ));
    assert!(has("events", "", "create", Some("vmware-system-csi"), None));
    // volmig writes the syncer's Lease only by name, and creates it unnamed.
    assert!(has(
        "leases",
        "",
        "update",
        Some("vmware-system-csi"),
        Some("vsphere-syncer")
    ));
    assert!(has("leases", "", "create", Some("vmware-system-csi"), None));
    assert!(!all.iter().any(|p| p.resource == "leases"
        && p.namespace.as_deref() == Some("vmware-system-csi")
        && p.verb == "delete"));
    assert_eq!(
        all.len(),
        3 + 3 + 2 + 7 + 3 + 6 + 1 + 4 + 1 + 3 + 2 + 3 + 2 + 3
    );
}

#[test]
fn holding_the_syncer_lease_needs_to_write_it() {
    // Every mode: volmig creates only while it holds the Lease.
    let all = required(&scope());
    let writes = |verb: &str, name: Option<&str>| {
        all.iter().any(|p| {
            p.resource == "leases"
                && p.verb == verb
                && p.namespace.as_deref() == Some("vmware-system-csi")
                && p.name.as_deref() == name
        })
    };
    assert!(writes("update", Some("vsphere-syncer")));
    assert!(writes("create", None));
}

#[test]
fn no_leader_election_and_no_syncer_lease_need_no_lease_permissions() {
    let mut scope = scope();
    scope.leader_election = false;
    scope.syncer_lease.clear();
    assert!(required(&scope).iter().all(|p| p.resource != "leases"));
}

#[test]
fn one_line_per_missing_permission_naming_the_rule() {
    let all = required(&scope());
    let results: Vec<_> = all
        .iter()
        .map(|p| {
            (
                p.clone(),
                Ok(!(p.resource == "volumemigrations"
                    && p.subresource == "status"
                    && p.verb != "get")),
            )
        })
        .collect();
    let lines = rbac_checks(&subject(), &results);
    assert_eq!(lines.len(), 2);
    assert!(lines.iter().all(|c| !c.ok));
    assert_eq!(
        lines[0].detail,
        "cannot patch volumemigrations.volmig.io/status (cluster-wide)"
    );
    assert_eq!(
        lines[0].fix,
        "add the rule {apiGroups: [\"volmig.io\"], resources: [\"volumemigrations/status\"], verbs: [\"patch\"]} to ClusterRole <release>"
    );
}

#[test]
fn all_granted_is_one_passing_line_and_a_failed_review_fails() {
    let all = required(&scope());
    let granted: Vec<_> = all.iter().map(|p| (p.clone(), Ok(true))).collect();
    let lines = rbac_checks(&subject(), &granted);
    assert_eq!(lines.len(), 1);
    assert!(lines[0].ok);
    assert!(
        lines[0]
            .detail
            .ends_with("granted to system:serviceaccount:volmig:volmig"),
        "{}",
        lines[0].detail
    );
    let mut one_failed = granted.clone();
    one_failed[0].1 = Err("timeout".to_owned());
    let failed = rbac_checks(&subject(), &one_failed);
    assert_eq!(failed.len(), 1);
    assert!(!failed[0].ok);
    assert!(failed[0].detail.contains("timeout"), "{}", failed[0].detail);
}

#[test]
fn every_review_failing_is_one_line_not_one_per_permission() {
    let all = required(&scope());
    assert!(all.len() > 30);
    let results: Vec<_> = all
        .iter()
        .map(|p| {
            (
                p.clone(),
                Err("subjectaccessreviews is forbidden".to_owned()),
            )
        })
        .collect();
    let lines = rbac_checks(&subject(), &results);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(!lines[0].ok);
    assert!(
        lines[0]
            .detail
            .contains("system:serviceaccount:volmig:volmig")
    );
    assert!(
        lines[0].fix.contains("subjectaccessreviews"),
        "{}",
        lines[0].fix
    );
}

#[test]
fn events_are_granted_in_the_events_namespace() {
    let scope = Scope {
        events_namespace: "kube-system".to_owned(),
        ..scope()
    };
    let all = required(&scope);
    let events: Vec<_> = all
        .iter()
        .filter(|p| p.resource == "events" && p.role == "Role <release>-events")
        .collect();
    assert_eq!(events.len(), 2);
    assert!(
        events
            .iter()
            .all(|p| p.namespace.as_deref() == Some("kube-system"))
    );
}

#[test]
fn a_named_namespaced_permission_says_where() {
    let all = required(&scope());
    let cm = all.iter().find(|p| p.resource == "configmaps").unwrap();
    assert_eq!(
        cm.describe(),
        "get configmaps named vsphere-csi-cluster-id in namespace vmware-system-csi"
    );
    assert_eq!(
        cm.rule(),
        "{apiGroups: [\"\"], resources: [\"configmaps\"], resourceNames: [\"vsphere-csi-cluster-id\"], verbs: [\"get\"]}"
    );
}
