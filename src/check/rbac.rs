//! The RBAC check of `volmig check` (docs/operations.md, "Preflight: `volmig check`"):
//! every permission the daemon uses, as the chart grants them (charts/volmig/templates/
//! clusterrole.yaml and role-*.yaml), asked of the API server for the daemon's
//! ServiceAccount ([`super::subject`]) with one access review each. Pure: [`super::probe`]
//! asks, [`rbac_checks`] decides.

use super::model::Check;
use super::subject::Subject;

pub use super::subject::RBAC;

/// One permission: a verb on a resource, cluster-wide or in a namespace, optionally on one
/// named object, and the chart role that grants it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Permission {
    /// API group (`""` for the core group).
    pub group: &'static str,
    /// Resource, e.g. `persistentvolumes`.
    pub resource: &'static str,
    /// Subresource, e.g. `status` (`""`: none).
    pub subresource: &'static str,
    /// The verb.
    pub verb: &'static str,
    /// Namespace (`None`: cluster-wide).
    pub namespace: Option<String>,
    /// Object name (`None`: any).
    pub name: Option<String>,
    /// The chart role granting it, e.g. `ClusterRole volmig`.
    pub role: &'static str,
}

impl Permission {
    /// `verb resource[/sub][/name] [in namespace]`.
    pub fn describe(&self) -> String {
        let mut resource = self.resource.to_owned();
        if !self.group.is_empty() {
            resource = format!("{resource}.{}", self.group);
        }
        if !self.subresource.is_empty() {
            resource = format!("{resource}/{}", self.subresource);
        }
        if let Some(name) = &self.name {
            resource = format!("{resource} named {name}");
        }
        match &self.namespace {
            Some(ns) => format!("{} {resource} in namespace {ns}", self.verb),
            None => format!("{} {resource} (cluster-wide)", self.verb),
        }
    }

    /// The RBAC rule that grants it, in the chart's YAML flow style.
    pub fn rule(&self) -> String {
        let resource = if self.subresource.is_empty() {
            self.resource.to_owned()
        } else {
            format!("{}/{}", self.resource, self.subresource)
        };
        let names = self
            .name
            .as_ref()
            .map(|n| format!(", resourceNames: [{n:?}]"))
            .unwrap_or_default();
        format!(
            "{{apiGroups: [{:?}], resources: [{resource:?}]{names}, verbs: [{:?}]}}",
            self.group, self.verb
        )
    }
}

/// Where the daemon's namespaced objects live (`--lease-namespace`, `--lease-name`,
/// `--driver-namespace`, `--driver-syncer-lease`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scope {
    /// Namespace of volmig's leader-election Lease.
    pub lease_namespace: String,
    /// Name of that Lease.
    pub lease_name: String,
    /// Whether leader election is on (the chart grants the Lease only then).
    pub leader_election: bool,
    /// The CSI driver's namespace.
    pub driver_namespace: String,
    /// The driver syncer's Lease (empty: not followed).
    pub syncer_lease: String,
    /// The driver's controller Deployment (empty: not looked at).
    pub driver_deployment: String,
    /// `--hold-driver-syncer`: volmig writes the syncer's Lease.
    pub hold_driver_syncer: bool,
    /// `--inline-pod-volumes`: volmig reads pods cluster-wide.
    pub inline_pod_volumes: bool,
    /// `--events-namespace`: where Events about cluster-scoped objects land (the chart's
    /// role-events.yaml).
    pub events_namespace: String,
}

/// Every permission the daemon needs with `scope`, in the chart's order.
pub fn required(scope: &Scope) -> Vec<Permission> {
    const CLUSTER_ROLE: &str = "ClusterRole <release>";
    let mut all = Vec::new();
    let mut add = |group,
                   resource,
                   subresource,
                   verbs: &[&'static str],
                   namespace: Option<&str>,
                   name: Option<&str>,
                   role| {
        for verb in verbs {
            all.push(Permission {
                group,
                resource,
                subresource,
                verb,
                namespace: namespace.map(str::to_owned),
                name: name.map(str::to_owned),
                role,
            });
        }
    };
    let read = &["get", "list", "watch"][..];
    add("", "persistentvolumes", "", read, None, None, CLUSTER_ROLE);
    if scope.inline_pod_volumes {
        add("", "pods", "", read, None, None, CLUSTER_ROLE);
    }
    // CSI users: the driver's VolumeAttachments keep a migrated volume in use (design §5).
    add(
        "storage.k8s.io",
        "volumeattachments",
        "",
        &["list", "watch"],
        None,
        None,
        CLUSTER_ROLE,
    );
    add(
        "volmig.io",
        "volumemigrations",
        "",
        &[
            "get", "list", "watch", "create", "patch", "update", "delete",
        ],
        None,
        None,
        CLUSTER_ROLE,
    );
    add(
        "volmig.io",
        "volumemigrations",
        "status",
        &["get", "patch", "update"],
        None,
        None,
        CLUSTER_ROLE,
    );
    add(
        "cns.vmware.com",
        "cnsvspherevolumemigrations",
        "",
        &["get", "list", "watch", "create", "patch", "delete"],
        None,
        None,
        CLUSTER_ROLE,
    );
    if scope.leader_election {
        let ns = Some(scope.lease_namespace.as_str());
        const LEADER: &str = "Role <release>-leader-election";
        add(
            "coordination.k8s.io",
            "leases",
            "",
            &["create"],
            ns,
            None,
            LEADER,
        );
        add(
            "coordination.k8s.io",
            "leases",
            "",
            &["get", "list", "watch", "patch"],
            ns,
            Some(scope.lease_name.as_str()),
            LEADER,
        );
    }
    let driver_ns = Some(scope.driver_namespace.as_str());
    const SYNCER: &str = "Role <release>-driver-syncer";
    add(
        "",
        "configmaps",
        "",
        &["get"],
        driver_ns,
        Some(super::cluster_id::CONFIG_MAP),
        SYNCER,
    );
    if !scope.syncer_lease.is_empty() {
        add(
            "coordination.k8s.io",
            "leases",
            "",
            read,
            driver_ns,
            Some(scope.syncer_lease.as_str()),
            SYNCER,
        );
        // volmig registers only while it holds this Lease itself (docs/design.md §8.2),
        // with or without --hold-driver-syncer.
        add(
            "coordination.k8s.io",
            "leases",
            "",
            &["update", "patch"],
            driver_ns,
            Some(scope.syncer_lease.as_str()),
            SYNCER,
        );
        add(
            "coordination.k8s.io",
            "leases",
            "",
            &["create"],
            driver_ns,
            None,
            SYNCER,
        );
        add(
            "events.k8s.io",
            "events",
            "",
            &["create", "patch"],
            driver_ns,
            None,
            SYNCER,
        );
        if !scope.driver_deployment.is_empty() {
            add(
                "apps",
                "deployments",
                "",
                read,
                driver_ns,
                Some(scope.driver_deployment.as_str()),
                SYNCER,
            );
        }
    }
    add(
        "events.k8s.io",
        "events",
        "",
        &["create", "patch"],
        Some(scope.events_namespace.as_str()),
        None,
        "Role <release>-events",
    );
    all
}

/// The RBAC lines from each permission's review of `subject`: `Ok(true)` allowed,
/// `Ok(false)` denied, `Err` the review failed. One ✓ line when all are allowed; one ✗
/// line when every review failed (the reviews, not the rights, are the problem); else one
/// ✗ line per missing permission with the rule to add.
pub fn rbac_checks(
    subject: &Subject,
    results: &[(Permission, Result<bool, String>)],
) -> Vec<Check> {
    let failed: Vec<&String> = results
        .iter()
        .filter_map(|(_, r)| r.as_ref().err())
        .collect();
    if let Some(first) = failed.first()
        && failed.len() == results.len()
    {
        return vec![Check::fail(
            RBAC,
            format!(
                "cannot review the rights of {} ({} permissions): {first}",
                subject.describe(),
                results.len()
            ),
            subject.review_fix(),
        )];
    }
    let mut lines = Vec::new();
    for (permission, result) in results {
        match result {
            Ok(true) => {}
            Ok(false) => lines.push(Check::fail(
                RBAC,
                format!("cannot {}", permission.describe()),
                format!(
                    "add the rule {} to {}{}",
                    permission.rule(),
                    permission.role,
                    permission
                        .namespace
                        .as_ref()
                        .map(|ns| format!(" in namespace {ns}"))
                        .unwrap_or_default()
                ),
            )),
            Err(message) => lines.push(Check::fail(
                RBAC,
                format!("cannot review {}: {message}", permission.describe()),
                subject.review_fix(),
            )),
        }
    }
    if lines.is_empty() {
        lines.push(Check::pass(
            RBAC,
            format!(
                "all {} permissions the daemon needs are granted to {}",
                results.len(),
                subject.describe()
            ),
        ));
    }
    lines
}

#[cfg(test)]
#[path = "rbac_tests.rs"]
mod tests;
