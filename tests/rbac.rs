//! Every rule of the chart's RBAC is needed (docs/security.md, "Least privilege"): for each rule of
//! the chart's ClusterRoles and Roles, the real `volmig` runs as the chart's ServiceAccount with
//! that one rule removed, against the API test server (real RBAC, real 403 Status messages) and the
//! vCenter simulator harness, over a small workload that uses every permission of the full identity
//! (a Registered VolumeMigration with a known volume ID, a PV awaiting registration, the CSI
//! driver's cache, Events, the Lease). Per rule the test shows that the missing rule is exercised
//! (the server answered 403 for one of its verbs and resources), that volmig reports it clearly
//! (its log names the forbidden verb and resource) without panicking or crashing, and that no
//! volume ID is lost, changed or registered twice. A control run with the full identity converges
//! with no 403 at all.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "test code: failures should panic"
)]

#[path = "support/e2e.rs"]
mod e2e;
#[path = "support/vcsim.rs"]
mod vcsim;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use e2e::{Cluster, Daemon, RuleId, chart_rbac, chart_rbac_without, chart_rules, phase, volume_id};
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use vcsim::{Vcsim, VcsimOptions};
use volmig::VolumePath;
use volmig::k8s::driver_cache::CnsVSphereVolumeMigration;
use volmig::volume_migration::{FINALIZER, Phase, VolumeMigration, VolumeMigrationSpec};

/// How long one case may run before it is judged (the control run converges in a few
/// seconds; a missing rule is denied within the first requests).
const CASE_TIMEOUT: Duration = Duration::from_secs(30);
/// After the first denial is logged: time for one more full-sync pass (`--full-sync-interval
/// 3s`) to show any harm the denial does (a lost ID, a second create).
const SETTLE: Duration = Duration::from_secs(4);
/// Cases run at once (the machine has 2 cores; each case is a daemon, a simulator and an
/// API server).
const PARALLEL: usize = 3;
/// The daemon's holder ID (also its log file name).
const HOLDER: &str = "rbac";
/// The CNS cluster ID `Daemon::spawn` gives volmig (`--cluster-id`).
const CLUSTER_ID: &str = "e2e-cluster";

/// Rules that volmig never exercises on the API test server, with the reason they are in
/// the chart anyway. Each entry is (apiGroup, resource) of the rule. The test asserts that
/// removing such a rule changes nothing (no 403, the workload converges); when the chart
/// drops the rule, drop the entry too (the test fails on an entry matching no rule).
const UNEXERCISED: &[(&str, &str, &str)] = &[];

/// One rule of the chart, flattened.
#[derive(Debug, Clone)]
struct Rule {
    id: RuleId,
    namespace: Option<String>,
    groups: Vec<String>,
    resources: Vec<String>,
    verbs: Vec<String>,
    names: Vec<String>,
}

impl Rule {
    fn new(id: RuleId, rule: &Value) -> Rule {
        let strings = |key: &str| -> Vec<String> {
            rule[key]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|v| v.as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default()
        };
        let namespace = chart_rbac()
            .iter()
            .find(|o| o["kind"] == id.kind.as_str() && o["metadata"]["name"] == id.role.as_str())
            .and_then(|o| o["metadata"]["namespace"].as_str().map(str::to_owned));
        Rule {
            groups: strings("apiGroups"),
            resources: strings("resources"),
            verbs: strings("verbs"),
            names: strings("resourceNames"),
            namespace,
            id,
        }
    }

    /// `verbs resources.group [names] (namespace)`, for the table.
    fn describe(&self) -> String {
        let group = |g: &String| {
            if g.is_empty() {
                "core".to_owned()
            } else {
                g.clone()
            }
        };
        let mut s = format!(
            "{} {} ({})",
            self.verbs.join(","),
            self.resources.join(","),
            self.groups.iter().map(group).collect::<Vec<_>>().join(",")
        );
        if !self.names.is_empty() {
            let _ = write!(s, " names={}", self.names.join(","));
        }
        if let Some(ns) = &self.namespace {
            let _ = write!(s, " in {ns}");
        }
        s
    }

    /// Whether a 403 message of the API server denies a request this rule would allow:
    /// `... cannot VERB resource "RESOURCE" in API group "GROUP" ...`.
    fn denies(&self, message: &str) -> bool {
        self.verbs.iter().any(|verb| {
            self.resources.iter().any(|resource| {
                self.groups.iter().any(|group| {
                    message.contains(&format!(
                        "cannot {verb} resource \"{resource}\" in API group \"{group}\""
                    ))
                })
            })
        })
    }

    /// The reason this rule is in the chart although volmig never exercises it.
    fn unexercised(&self) -> Option<&'static str> {
        UNEXERCISED.iter().find_map(|(group, resource, why)| {
            (self.groups.iter().any(|g| g == group) && self.resources.iter().any(|r| r == resource))
                .then_some(*why)
        })
    }
}

/// Whether a binding of the chart gives the role of `id` to volmig's ServiceAccount.
fn bound_to_volmig(id: &RuleId) -> bool {
    chart_rbac().iter().any(|o| {
        matches!(
            o["kind"].as_str(),
            Some("RoleBinding" | "ClusterRoleBinding")
        ) && o["roleRef"]["kind"] == id.kind.as_str()
            && o["roleRef"]["name"] == id.role.as_str()
            && o["subjects"].as_array().is_some_and(|subjects| {
                subjects.iter().any(|s| {
                    s["kind"] == "ServiceAccount"
                        && s["name"] == e2e::CHART_SERVICE_ACCOUNT
                        && s["namespace"] == e2e::CHART_NAMESPACE
                })
            })
    })
}

/// What one run showed.
#[derive(Debug, Default)]
struct Outcome {
    /// What volmig did, for the table.
    behaviour: String,
    /// The server's 403s that deny a verb of the removed rule (message → count).
    denied: BTreeMap<String, u64>,
    /// Every 403 of the run (message → count).
    all_denied: BTreeMap<String, u64>,
    /// Whether the whole workload converged (see [`converged`]).
    converged: bool,
    /// The first line of the daemon's log naming a denial, preferably one of volmig's own
    /// (not kube-runtime's).
    report: Option<String>,
    /// `CnsCreateVolume` calls volmig made.
    creates: usize,
    /// Assertion failures.
    problems: Vec<String>,
}

/// The daemon's log without ANSI colours and JSON/Debug escaping, for substring checks.
fn plain_log(daemon: &Daemon) -> String {
    let raw = daemon.log_text();
    let mut out = String::with_capacity(raw.len());
    let mut chars = raw.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\u{1b}' => {
                for c in chars.by_ref() {
                    if c.is_ascii_alphabetic() {
                        break;
                    }
                }
            }
            '\\' => {}
            c => out.push(c),
        }
    }
    out
}

/// The workload: the vmdk registered before volmig starts and the one volmig registers.
struct Workload {
    pre: String,
    pre_id: String,
    new: String,
}

impl Workload {
    /// As the admin: the driver's CRD; vmdk 1 registered in CNS with a VolumeMigration
    /// that is Registered with that ID and carries volmig's finalizer (as volmig leaves it),
    /// used by PV `pre`; vmdk 2 used by PV `new` and known to nobody yet.
    async fn create(cluster: &Cluster, sim: &Vcsim) -> Workload {
        cluster.install_driver_crd().await;
        let pre = sim.vmdk_path("kubevols", 1);
        let new = sim.vmdk_path("kubevols", 2);
        let file = pre.split_once("] ").unwrap().1;
        let pre_id = sim
            .soap()
            .await
            .create_volume(
                "registered-before-rbac-test",
                &sim.datacenter,
                &sim.datastores[0].name,
                file,
                CLUSTER_ID,
            )
            .await;
        let path = VolumePath::parse(&pre).unwrap();
        let mut vm = VolumeMigration::new(
            &path.object_name(),
            VolumeMigrationSpec {
                volume_path: path.canonical(),
                storage_policy_name: None,
            },
        );
        vm.metadata.finalizers = Some(vec![FINALIZER.to_owned()]);
        let api = cluster.migrations();
        api.create(&PostParams::default(), &vm).await.unwrap();
        api.patch_status(
            &path.object_name(),
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Registered", "volumeID": pre_id}})),
        )
        .await
        .unwrap();
        cluster.create_pv("pre", &pre).await;
        cluster.create_pv("new", &new).await;
        Workload { pre, pre_id, new }
    }
}

/// Whether everything the full identity does has happened: `new` Registered, both
/// mappings in the driver's cache, a `Registered` Event, a `RegistrarModeChanged` Event on
/// the driver syncer's Lease, the Lease held by the daemon.
async fn converged(cluster: &Cluster, work: &Workload) -> bool {
    let registered = cluster
        .migration(&work.new)
        .await
        .is_some_and(|vm| phase(&vm) == Some(Phase::Registered));
    let driver: Api<CnsVSphereVolumeMigration> = Api::all(cluster.client.clone());
    let published = driver
        .list(&ListParams::default())
        .await
        .map(|l| {
            let paths: Vec<String> = l.items.into_iter().map(|o| o.spec.volumepath).collect();
            paths.contains(&work.pre) && paths.contains(&work.new)
        })
        .unwrap_or(false);
    let event = !cluster.events("Registered").await.is_empty()
        && !cluster.events("RegistrarModeChanged").await.is_empty();
    let leases: Api<Lease> = Api::namespaced(cluster.client.clone(), "kube-system");
    let held = leases
        .get_opt("volmig")
        .await
        .ok()
        .flatten()
        .and_then(|l| l.spec?.holder_identity)
        .is_some_and(|h| h == HOLDER);
    registered && published && event && held
}

/// One daemon run with `removed` missing from the identity (`None`: the full identity).
async fn run_case(removed: Option<Rule>) -> Outcome {
    let identity = match &removed {
        Some(rule) => chart_rbac_without(&rule.id),
        None => chart_rbac(),
    };
    let (sim, cluster) = tokio::join!(
        Vcsim::start(VcsimOptions::default().vmdks(2)),
        Cluster::start_test_server_with_identity(&identity)
    );
    let work = Workload::create(&cluster, &sim).await;
    let mut daemon = Daemon::spawn(&cluster, &sim, HOLDER, &[]);
    let mut out = Outcome::default();
    let started = Instant::now();
    let mut denial_logged: Option<Instant> = None;
    let mut exited = None;
    loop {
        if let Some(status) = daemon.exit_status() {
            exited = Some(status);
            break;
        }
        if let Some(at) = denial_logged {
            if at.elapsed() >= SETTLE {
                break;
            }
        } else if let Some(rule) = &removed {
            let log = plain_log(&daemon);
            let denied: Vec<String> = cluster
                .forbidden()
                .into_keys()
                .filter(|m| rule.denies(m))
                .collect();
            if denied.iter().any(|m| log.contains(m.as_str())) {
                denial_logged = Some(Instant::now());
            }
        }
        if denial_logged.is_none() && converged(&cluster, &work).await {
            out.converged = true;
            break;
        }
        if started.elapsed() >= CASE_TIMEOUT {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    if !out.converged && exited.is_none() {
        out.converged = converged(&cluster, &work).await;
    }
    let ready = matches!(daemon.get("/readyz").await, Some((200, _)));
    let status = match exited {
        Some(status) => status,
        None => daemon.terminate(Duration::from_secs(30)).await,
    };
    let log = plain_log(&daemon);
    let new_registered = cluster
        .migration(&work.new)
        .await
        .is_some_and(|vm| phase(&vm) == Some(Phase::Registered));

    // How it ended, for the table and the crash checks.
    let last_error = log
        .lines()
        .rev()
        .find(|l| l.contains("volmig run failed"))
        .map(|l| l.trim().to_owned());
    out.behaviour = match (exited, &last_error) {
        (Some(s), Some(line)) => format!("exits ({s}) at start-up: {line}"),
        (Some(s), None) => format!("exits ({s}) without an error line"),
        (None, _) if out.converged => "converges: ready, registers, publishes".to_owned(),
        (None, _) if ready => format!(
            "ready, stays up; the new vmdk {}",
            if new_registered {
                "is registered"
            } else {
                "is not registered"
            }
        ),
        (None, _) => "stays up, never ready (/readyz 503)".to_owned(),
    };
    if log.contains("panicked") {
        out.problems.push("the daemon panicked".to_owned());
    }
    match exited {
        // Exiting on its own is fine with a clear error and a failure code, not a signal.
        Some(s) if s.code().is_none() => out.problems.push(format!("killed by a signal: {s}")),
        Some(s) if s.success() => out.problems.push("exited 0 on its own".to_owned()),
        Some(_) if last_error.is_none() => {
            out.problems
                .push("exited without `volmig run failed`".to_owned());
        }
        Some(_) => {}
        None if !status.success() => out.problems.push(format!("SIGTERM exit: {status}")),
        None => {}
    }

    // No ID lost or changed, none registered twice.
    match cluster.migration(&work.pre).await {
        Some(vm) if volume_id(&vm).as_deref() == Some(work.pre_id.as_str()) => {}
        other => out.problems.push(format!(
            "the pre-registered ID {} is gone or changed: {:?}",
            work.pre_id,
            other.and_then(|vm| vm.status)
        )),
    }
    let duplicates = sim.duplicates().await;
    if !duplicates.is_empty() {
        out.problems
            .push(format!("duplicate CNS volumes: {duplicates:?}"));
    }
    // The harness records every CnsCreateVolume it receives, failed ones too: volmig may
    // send one, for the new vmdk; the pre-registered vmdk keeps exactly the test's volume.
    let volmig_creates: Vec<String> = sim
        .creates()
        .await
        .into_iter()
        .filter(|c| c.user_agent != vcsim::SUPPORT_USER_AGENT)
        .map(|c| c.backing_disk_url_path)
        .collect();
    out.creates = volmig_creates.len();
    if volmig_creates.len() > 1 {
        out.problems.push(format!(
            "volmig sent {} creates: {volmig_creates:?}",
            volmig_creates.len()
        ));
    }
    let pre_ids: Vec<String> = sim
        .volumes_for(&work.pre)
        .await
        .into_iter()
        .map(|v| v.id)
        .collect();
    if pre_ids != [work.pre_id.clone()] {
        out.problems.push(format!(
            "the pre-registered vmdk's CNS volumes are {pre_ids:?}, not [{}]",
            work.pre_id
        ));
    }
    let new_ids: Vec<String> = sim
        .volumes_for(&work.new)
        .await
        .into_iter()
        .map(|v| v.id)
        .collect();
    let new_id = cluster
        .migration(&work.new)
        .await
        .as_ref()
        .and_then(volume_id);
    if let Some(id) = new_id
        && new_ids != [id.clone()]
    {
        out.problems.push(format!(
            "the new vmdk's published ID {id} is not its one CNS volume {new_ids:?}"
        ));
    }

    // Exercised, and reported clearly.
    out.all_denied = cluster.forbidden();
    match &removed {
        None => {
            if !out.all_denied.is_empty() {
                out.problems
                    .push(format!("403s with the full identity: {:?}", out.all_denied));
            }
            if !out.converged {
                out.problems.push(
                    "the workload did not converge with the full identity (nothing to compare)"
                        .to_owned(),
                );
            }
        }
        Some(rule) => {
            out.denied = out
                .all_denied
                .iter()
                .filter(|(m, _)| rule.denies(m))
                .map(|(m, n)| (m.clone(), *n))
                .collect();
            let naming: Vec<&str> = log
                .lines()
                .filter(|l| out.denied.keys().any(|m| l.contains(m.as_str())))
                .collect();
            out.report = naming
                .iter()
                .find(|l| !l.contains(" kube_runtime::"))
                .or(naming.first())
                .map(|l| {
                    // Up to the first denial (the rest repeats it as Debug output).
                    let end = out
                        .denied
                        .keys()
                        .filter_map(|m| l.find(m.as_str()).map(|i| i + m.len()))
                        .min()
                        .unwrap_or(l.len());
                    l[..end].to_owned()
                });
            match rule.unexercised() {
                Some(_) => {
                    if !out.denied.is_empty() || !out.converged {
                        out.problems.push(format!(
                            "listed in UNEXERCISED but removing it matters (403s {:?}, \
                             converged {}): remove it from the list",
                            out.denied, out.converged
                        ));
                    }
                }
                None => {
                    if out.denied.is_empty() {
                        out.problems.push(format!(
                            "no 403 for this rule{}: unnecessary?",
                            if out.converged {
                                " and the workload converged without it"
                            } else {
                                ""
                            }
                        ));
                    } else if out.report.is_none() {
                        out.problems.push(
                            "the log does not name the forbidden verb and resource".to_owned(),
                        );
                    }
                    if out.converged {
                        out.problems.push(
                            "the workload converged without the rule: it is not needed".to_owned(),
                        );
                    }
                }
            }
        }
    }
    if !out.problems.is_empty() {
        eprintln!(
            "--- {}: last lines of the daemon log ---",
            removed
                .as_ref()
                .map_or("full identity".to_owned(), |r| r.id.to_string())
        );
        for line in log
            .lines()
            .rev()
            .take(25)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
        {
            eprintln!("{line}");
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_chart_rule_is_needed_and_its_absence_is_reported_clearly() {
    let rules: Vec<Rule> = chart_rules()
        .into_iter()
        .map(|(id, rule)| Rule::new(id, &rule))
        .collect();
    assert!(rules.len() >= 8, "the chart's rules: {rules:?}");
    for (group, resource, _) in UNEXERCISED {
        assert!(
            rules.iter().any(|r| r.groups.iter().any(|g| g == group)
                && r.resources.iter().any(|x| x == resource)),
            "UNEXERCISED names {group}/{resource}, which no chart rule grants any more: drop it"
        );
    }
    let (ours, others): (Vec<Rule>, Vec<Rule>) =
        rules.into_iter().partition(|r| bound_to_volmig(&r.id));
    // The reader ClusterRole is for the mapping's consumers (`rbac.readers`), never bound to
    // volmig itself: removing its rule cannot change what volmig may do.
    for rule in &others {
        assert!(
            rule.id.role.ends_with("-reader"),
            "{} ({}) is bound to nobody and is not the reader role",
            rule.id,
            rule.describe()
        );
    }

    let mut cases: Vec<Option<Rule>> = vec![None];
    cases.extend(ours.iter().cloned().map(Some));
    let results: Vec<(Option<Rule>, Outcome)> = futures::stream::iter(cases)
        .map(|case| async move {
            let task = tokio::spawn(run_case(case.clone()));
            let outcome = task.await.unwrap_or_else(|e| Outcome {
                behaviour: "the test case panicked".to_owned(),
                problems: vec![format!("case panicked: {e}")],
                ..Outcome::default()
            });
            (case, outcome)
        })
        .buffer_unordered(PARALLEL)
        .collect()
        .await;

    let mut table = String::from("rule | what volmig does | volmig's creates | 403s of the rule\n");
    let mut failures = Vec::new();
    let mut sorted = results;
    sorted.sort_by_key(|(c, _)| {
        c.as_ref()
            .map(|r| (r.id.kind.clone(), r.id.role.clone(), r.id.index))
    });
    for (case, out) in &sorted {
        let name = case.as_ref().map_or("(none removed)".to_owned(), |r| {
            format!("{}: {}", r.id, r.describe())
        });
        let denied = if out.denied.is_empty() {
            "0".to_owned()
        } else {
            out.denied
                .iter()
                .map(|(m, n)| format!("{n}x {m}"))
                .collect::<Vec<_>>()
                .join("; ")
        };
        let _ = writeln!(
            table,
            "{name} | {} | {} | {denied}",
            out.behaviour, out.creates
        );
        if let Some(report) = &out.report {
            let _ = writeln!(table, "    volmig logs: {report}");
        }
        if let Some(why) = case.as_ref().and_then(Rule::unexercised) {
            let _ = writeln!(table, "    not exercised by volmig: {why}");
        }
        for p in &out.problems {
            failures.push(format!("{name}: {p}"));
        }
    }
    for rule in &others {
        let _ = writeln!(
            table,
            "{}: {} | not volmig's (consumers' read-only role) | not run | -",
            rule.id,
            rule.describe()
        );
    }
    println!("{table}");
    assert!(failures.is_empty(), "{table}\n{}", failures.join("\n"));
}
