//! The chart's RBAC: least privilege, no wildcards, no Secrets (but the one opt-in Secret
//! of `vcenter.csiConfig.secretRef`, by name, in its namespace), Leases namespaced, every
//! rule commented.

use std::collections::{BTreeMap, BTreeSet};

use crate::helm::{
    self, all_features_values, assert_no_wildcards_or_secrets, read_repo_file, render, strings,
};

#[test]
fn rbac_is_least_privilege_and_commented() {
    let rendered = render(&["--values", all_features_values().to_str().expect("utf-8")]);
    let role = rendered.get("ClusterRole", "volmig");
    assert_no_wildcards_or_secrets(&role["rules"], "ClusterRole volmig");
    let mut granted: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for rule in role["rules"].as_array().expect("rules") {
        assert!(rule["resourceNames"].is_null(), "{rule}");
        for group in strings(&rule["apiGroups"]) {
            for resource in strings(&rule["resources"]) {
                granted
                    .entry(format!("{group}/{resource}"))
                    .or_default()
                    .extend(strings(&rule["verbs"]));
            }
        }
    }
    let want = |verbs: &[&str]| {
        verbs
            .iter()
            .map(|v| (*v).to_owned())
            .collect::<BTreeSet<_>>()
    };
    let expected: BTreeMap<String, BTreeSet<String>> = [
        ("/persistentvolumes", want(&["get", "list", "watch"])),
        ("/pods", want(&["get", "list", "watch"])),
        ("storage.k8s.io/volumeattachments", want(&["list", "watch"])),
        (
            "volmig.io/volumemigrations",
            want(&[
                "get", "list", "watch", "create", "patch", "update", "delete",
            ]),
        ),
        (
            "volmig.io/volumemigrations/status",
            want(&["get", "patch", "update"]),
        ),
        (
            "cns.vmware.com/cnsvspherevolumemigrations",
            want(&["get", "list", "watch", "create", "patch", "delete"]),
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    assert_eq!(
        granted, expected,
        "the ClusterRole grants exactly what the daemon needs (Events are not cluster-wide)"
    );

    // Events: volmig's Events are about VolumeMigrations and PersistentVolumes
    // (src/k8s/events.rs), both cluster-scoped, and all written in `events.namespace`
    // (default `default`): a Role there with create and patch (a repeated Event becomes a
    // series), nothing else.
    let crd = volmig::volume_migration::crd_yaml().expect("render the CRD");
    assert!(
        crd.contains("\n  scope: Cluster\n"),
        "VolumeMigrations are cluster-scoped"
    );
    let events = rendered.get("Role", "volmig-events");
    assert_eq!(events["metadata"]["namespace"], "default");
    assert_no_wildcards_or_secrets(&events["rules"], "Role volmig-events");
    let rules = events["rules"].as_array().expect("rules");
    assert_eq!(rules.len(), 1, "{rules:?}");
    assert_eq!(strings(&rules[0]["apiGroups"]), ["events.k8s.io"]);
    assert_eq!(strings(&rules[0]["resources"]), ["events"]);
    assert_eq!(strings(&rules[0]["verbs"]), ["create", "patch"]);
    let events_binding = rendered.get("RoleBinding", "volmig-events");
    assert_eq!(events_binding["metadata"]["namespace"], "default");
    assert_eq!(events_binding["roleRef"]["name"], "volmig-events");
    assert_eq!(events_binding["subjects"][0]["name"], "volmig-controller");
    assert_eq!(events_binding["subjects"][0]["namespace"], helm::NAMESPACE);
    // Besides the events Role, only the driver-syncer Role grants Events: about the driver's
    // syncer Lease, which live in the driver's namespace (checked below).
    for object in rendered.objects.iter().filter(|o| {
        o["kind"] != "Role"
            || (o["metadata"]["name"] != "volmig-events"
                && o["metadata"]["name"] != "volmig-driver-syncer")
    }) {
        assert!(
            !object["rules"].to_string().contains("\"events\""),
            "{} grants Events outside the events Role",
            object["metadata"]["name"]
        );
    }
    // The Role follows `events.namespace`, and so does `--events-namespace`.
    let system = render(&["--set-string", "events.namespace=kube-system"]);
    for kind in ["Role", "RoleBinding"] {
        assert_eq!(
            system.get(kind, "volmig-events")["metadata"]["namespace"],
            "kube-system",
            "{kind} volmig-events follows events.namespace"
        );
    }
    assert!(
        system
            .args()
            .iter()
            .any(|a| a == "--events-namespace=kube-system"),
        "{:?}",
        system.args()
    );

    // Leases: a namespaced Role in the Lease's namespace, nothing cluster-wide.
    let lease_role = rendered.get("Role", "volmig-leader-election");
    assert_eq!(lease_role["metadata"]["namespace"], helm::NAMESPACE);
    assert_no_wildcards_or_secrets(&lease_role["rules"], "Role volmig-leader-election");
    for rule in lease_role["rules"].as_array().expect("rules") {
        assert_eq!(strings(&rule["resources"]), ["leases"], "{rule}");
        assert_eq!(
            strings(&rule["apiGroups"]),
            ["coordination.k8s.io"],
            "{rule}"
        );
        let verbs = strings(&rule["verbs"]);
        if verbs != ["create"] {
            assert_eq!(strings(&rule["resourceNames"]), ["volmig-prod"], "{rule}");
        }
    }
    let binding = rendered.get("RoleBinding", "volmig-leader-election");
    assert_eq!(binding["roleRef"]["kind"], "Role");
    assert_eq!(binding["subjects"][0]["name"], "volmig-controller");
    let cluster_binding = rendered.get("ClusterRoleBinding", "volmig");
    assert_eq!(cluster_binding["subjects"][0]["name"], "volmig-controller");
    assert_eq!(cluster_binding["subjects"][0]["namespace"], helm::NAMESPACE);
    let elsewhere = render(&["--set-string", "leaderElection.leaseNamespace=kube-system"]);
    let moved = elsewhere.get("Role", "volmig-leader-election");
    assert_eq!(moved["metadata"]["namespace"], "kube-system");
    assert_eq!(
        elsewhere.get("RoleBinding", "volmig-leader-election")["subjects"][0]["namespace"],
        helm::NAMESPACE
    );

    // The CSI driver's namespace, by name: its cluster-ID ConfigMap (read at every start,
    // docs/design.md §8.5), its syncer Lease — read, and written by name, since volmig
    // creates only while it holds that Lease itself (§8.7), plus create of Leases (a create
    // is authorized before the object has a name) — its controller Deployment (read only),
    // Events on that Lease; without a syncer Lease, the ConfigMap alone.
    let syncer = rendered.get("Role", "volmig-driver-syncer");
    assert_eq!(syncer["metadata"]["namespace"], "vmware-system-csi");
    assert_no_wildcards_or_secrets(&syncer["rules"], "Role volmig-driver-syncer");
    let rules = syncer["rules"].as_array().expect("rules");
    assert_eq!(rules.len(), 5, "{rules:?}");
    assert_eq!(strings(&rules[0]["apiGroups"]), [""]);
    assert_eq!(strings(&rules[0]["resources"]), ["configmaps"]);
    assert_eq!(
        strings(&rules[0]["resourceNames"]),
        ["vsphere-csi-cluster-id"]
    );
    assert_eq!(strings(&rules[0]["verbs"]), ["get"]);
    assert_eq!(strings(&rules[1]["apiGroups"]), ["coordination.k8s.io"]);
    assert_eq!(strings(&rules[1]["resources"]), ["leases"]);
    assert_eq!(strings(&rules[1]["resourceNames"]), ["vsphere-syncer"]);
    assert_eq!(
        strings(&rules[1]["verbs"]),
        ["get", "list", "watch", "update", "patch"]
    );
    assert_eq!(strings(&rules[2]["resources"]), ["leases"]);
    assert_eq!(strings(&rules[2]["verbs"]), ["create"]);
    assert!(rules[2]["resourceNames"].is_null());
    assert_eq!(strings(&rules[3]["apiGroups"]), ["events.k8s.io"]);
    assert_eq!(strings(&rules[3]["verbs"]), ["create", "patch"]);
    assert_eq!(strings(&rules[4]["apiGroups"]), ["apps"]);
    assert_eq!(strings(&rules[4]["resources"]), ["deployments"]);
    assert_eq!(
        strings(&rules[4]["resourceNames"]),
        ["vsphere-csi-controller"]
    );
    assert_eq!(strings(&rules[4]["verbs"]), ["get", "list", "watch"]);
    // --hold-driver-syncer needs nothing more.
    let hold = render(&["--set", "driver.holdSyncer=true"]);
    assert_eq!(
        hold.get("Role", "volmig-driver-syncer")["rules"],
        syncer["rules"]
    );
    let syncer_binding = rendered.get("RoleBinding", "volmig-driver-syncer");
    assert_eq!(syncer_binding["subjects"][0]["name"], "volmig-controller");
    assert_eq!(syncer_binding["subjects"][0]["namespace"], helm::NAMESPACE);
    let moved = render(&[
        "--set-string",
        "driver.namespace=csi",
        "--set-string",
        "driver.syncerLease=syncer",
    ]);
    let moved_role = moved.get("Role", "volmig-driver-syncer");
    assert_eq!(moved_role["metadata"]["namespace"], "csi");
    assert_eq!(
        strings(&moved_role["rules"][1]["resourceNames"]),
        ["syncer"]
    );
    let off = render(&["--set-string", "driver.syncerLease="]);
    let off_rules = off.get("Role", "volmig-driver-syncer")["rules"].clone();
    assert_eq!(
        off_rules.as_array().map(Vec::len),
        Some(1),
        "without a syncer Lease only the cluster-ID ConfigMap is read: {off_rules}"
    );
    assert_eq!(strings(&off_rules[0]["resources"]), ["configmaps"]);

    let reader = rendered.get("ClusterRole", "volmig-reader");
    assert_no_wildcards_or_secrets(&reader["rules"], "ClusterRole volmig-reader");
    for rule in reader["rules"].as_array().expect("rules") {
        assert_eq!(
            strings(&rule["verbs"]),
            ["get", "list", "watch"],
            "reader writes: {rule}"
        );
    }
    for object in rendered
        .of_kind("ClusterRole")
        .chain(rendered.of_kind("Role"))
    {
        assert!(
            !object.to_string().contains("secrets"),
            "{} mentions secrets",
            object["metadata"]["name"]
        );
    }

    // Every rule in the RBAC templates carries a comment saying why.
    for file in [
        "clusterrole.yaml",
        "role-leader-election.yaml",
        "role-events.yaml",
        "role-driver-syncer.yaml",
        "clusterrole-reader.yaml",
        "role-csi-config-secret.yaml",
    ] {
        let text = read_repo_file(&format!("charts/volmig/templates/{file}"));
        let lines: Vec<&str> = text.lines().collect();
        let mut rules = 0;
        for (i, line) in lines.iter().enumerate() {
            if line.trim_start().starts_with("- apiGroups:") {
                rules += 1;
                let above = lines[..i]
                    .last()
                    .map(|l| l.trim_start())
                    .unwrap_or_default();
                assert!(
                    above.starts_with('#'),
                    "{file}:{}: rule without a comment",
                    i + 1
                );
            }
        }
        assert!(rules > 0, "{file} has no rules");
    }
}

#[test]
fn the_csi_config_secret_is_read_through_one_role_for_that_one_secret() {
    let role_name = "volmig-csi-config-secret";
    for rendered in [
        render(&[]),
        render(&["--values", all_features_values().to_str().expect("utf-8")]),
    ] {
        assert!(
            rendered
                .of_kind("Role")
                .all(|r| r["metadata"]["name"] != role_name),
            "the Secret Role renders only with vcenter.csiConfig.secretRef"
        );
    }
    let rendered = render(&[
        "--set-string",
        "vcenter.csiConfig.secretRef=vmware-system-csi/vsphere-config-secret",
    ]);
    let role = rendered.get("Role", role_name);
    assert_eq!(role["metadata"]["namespace"], "vmware-system-csi");
    let rules = role["rules"].as_array().expect("rules");
    assert_eq!(rules.len(), 1, "{rules:?}");
    assert_eq!(strings(&rules[0]["apiGroups"]), [""]);
    assert_eq!(strings(&rules[0]["resources"]), ["secrets"]);
    assert_eq!(
        strings(&rules[0]["resourceNames"]),
        ["vsphere-config-secret"]
    );
    assert_eq!(strings(&rules[0]["verbs"]), ["get", "list", "watch"]);
    let binding = rendered.get("RoleBinding", role_name);
    assert_eq!(binding["metadata"]["namespace"], "vmware-system-csi");
    assert_eq!(binding["roleRef"]["name"], role_name);
    assert_eq!(
        binding["subjects"][0],
        rendered.get("ClusterRoleBinding", "volmig")["subjects"][0],
        "the daemon's ServiceAccount"
    );
    assert_eq!(binding["subjects"][0]["namespace"], helm::NAMESPACE);
    // Nothing else mentions Secrets: never cluster-wide.
    for object in rendered
        .of_kind("ClusterRole")
        .chain(rendered.of_kind("Role"))
        .filter(|o| o["metadata"]["name"] != role_name)
    {
        assert_no_wildcards_or_secrets(&object["rules"], "another role");
    }
    assert!(
        rendered
            .args()
            .iter()
            .any(|a| a == "--csi-config-secret=vmware-system-csi/vsphere-config-secret")
    );
    assert!(
        !rendered
            .args()
            .iter()
            .any(|a| a.starts_with("--vc-credentials-file")),
        "{:?}",
        rendered.args()
    );
}

#[test]
fn pods_are_read_only_while_inline_pod_volumes_are_watched() {
    let grants_pods = |args: &[&str]| {
        let rendered = render(args);
        let role = rendered.get("ClusterRole", "volmig");
        role["rules"]
            .as_array()
            .expect("rules")
            .iter()
            .any(|rule| strings(&rule["resources"]).contains(&"pods".to_owned()))
    };
    assert!(grants_pods(&[]), "on by default");
    assert!(!grants_pods(&["--set", "inlinePodVolumes=false"]));
}
