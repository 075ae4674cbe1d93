//! `volmig check`: a read-only preflight in the style of `cmctl check` (docs/operations.md,
//! "Preflight: `volmig check`"). It takes the flags and environment of `volmig run`
//! (docs/design.md §3.1) and checks, one line each: vCenter TLS, login, version and create
//! path (docs/design.md §8.5), CNS, the datastores of the in-tree PVs, the cluster ID
//! against the vSphere CSI driver's, the driver's CRD and syncer Lease (docs/design.md
//! §8.7), and the RBAC the daemon's ServiceAccount needs. Nothing is written anywhere.
//!
//! - [`model`]: the lines and their table / JSON rendering; pure.
//! - [`vcenter`], [`cluster`], [`subject`], [`rbac`]: each check's decision from what was
//!   read; pure.
//! - [`probe`]: the calls.

pub mod cluster;
pub mod model;
pub mod probe;
pub mod rbac;
pub mod subject;
pub mod vcenter;

/// The daemon's cluster-ID decision and ConfigMap read (docs/design.md §8.5): the check
/// decides exactly as `volmig run` does.
use crate::daemon::cluster_id;

use crate::cli::{CheckArgs, RunArgs};
use crate::report::Format;
use crate::report::registrar::{decide as decide_registrar, with_deployment, with_hold_flag};

pub use model::{Check, CheckReport};

/// Exit code: no check failed.
pub const EXIT_OK: u8 = 0;
/// Exit code: at least one check failed.
pub const EXIT_FAILED: u8 = 1;
/// Exit code: wrong arguments (e.g. `-o csv`).
pub const EXIT_ERROR: u8 = 2;

/// Name of the line that says the Kubernetes API cannot be reached.
pub const KUBERNETES: &str = "Kubernetes API";

/// Runs every check with `check_args` (the flags of `volmig run` and whose RBAC to check).
pub async fn run(check_args: &CheckArgs) -> CheckReport {
    let args = &check_args.run;
    let mut checks = Vec::new();
    // One request first: when the API server cannot be reached, one line says so and no
    // Kubernetes check runs (each would fail for the same reason).
    let client = match crate::daemon::kube_client(&args.kube).await {
        Ok(client) => match probe::reachable(&client).await {
            Ok(()) => Ok(client),
            Err(e) => Err(format!("cannot reach the API server: {e}")),
        },
        Err(e) => Err(format!("no client: {e:#}")),
    };
    let pvs = match &client {
        Ok(client) => Some(
            probe::pv_datastores(client)
                .await
                .map_err(|e| crate::error_chain(&e)),
        ),
        Err(_) => None,
    };
    // `--csi-config-secret` is read through the API, once, as the daemon reads it.
    let flags = match &client {
        Ok(client) => crate::daemon::vcenter_flags(client, args, None)
            .await
            .map_err(|e| crate::vcenter_config::SettingsError(format!("{e:#}"))),
        Err(_) => Ok(crate::vcenter_config::VcenterFlags::from(args)),
    };
    let settings = flags.and_then(crate::vcenter_config::resolve);
    match &settings {
        Ok(settings) => checks.extend(vcenter_checks(args, settings, &pvs).await),
        Err(e) => {
            checks.push(Check::fail(
                vcenter::TLS,
                format!("vCenter configuration: {e}"),
                "set --vc-url (VOLMIG_VC_URL) or --csi-config (VOLMIG_CSI_CONFIG)",
            ));
            for name in [
                vcenter::LOGIN,
                vcenter::VERSION,
                vcenter::CNS,
                vcenter::DATASTORES,
            ] {
                checks.push(vcenter::not_checked(name, "the vCenter configuration"));
            }
        }
    }
    let client = match client {
        Ok(client) => client,
        Err(e) => {
            checks.push(Check::fail(
                KUBERNETES,
                e,
                "set --kubeconfig (VOLMIG_KUBECONFIG) or run in the pod; the cluster ID, \
                 driver and RBAC lines need the API server",
            ));
            return CheckReport::new(checks);
        }
    };
    let configured = match &settings {
        Ok(settings) => settings.cluster_id.clone(),
        Err(_) => None,
    };
    let namespace = &args.driver.driver_namespace;
    let driver_id = cluster_id::read_driver_cluster_id(&client, namespace).await;
    checks.push(cluster::cluster_id_check(
        configured.as_ref(),
        &driver_id,
        namespace,
    ));
    checks.push(cluster::driver_crd_check(
        &probe::driver_crd_served(&client).await,
    ));
    let syncer = args.driver.syncer_lease();
    let lease = crate::report::fetch::read_syncer_lease(client.clone(), &syncer).await;
    let presence = crate::report::fetch::read_driver_presence(client.clone(), &syncer).await;
    checks.push(cluster::syncer_check(&with_hold_flag(
        with_deployment(
            decide_registrar(&syncer, &lease, jiff::Timestamp::now()),
            presence,
        ),
        args.hold_driver_syncer,
    )));
    let scope = rbac::Scope {
        lease_namespace: args.lease_namespace.clone(),
        lease_name: args.lease_name.clone(),
        leader_election: args.leader_election,
        driver_namespace: namespace.clone(),
        syncer_lease: args.driver.driver_syncer_lease.clone(),
        driver_deployment: args.driver.driver_deployment.clone(),
        hold_driver_syncer: args.hold_driver_syncer,
        inline_pod_volumes: args.inline_pod_volumes,
        events_namespace: args.events_namespace.clone(),
    };
    let caller = probe::caller(&client).await;
    let subject = subject::decide(check_args.service_account.as_ref(), caller.as_deref());
    checks.extend(subject::caller_warning(&subject));
    let reviews = probe::review(&client, &subject, rbac::required(&scope)).await;
    checks.extend(rbac::rbac_checks(&subject, &reviews));
    CheckReport::new(checks)
}

/// TLS, login, version, CNS and datastores.
async fn vcenter_checks(
    args: &RunArgs,
    settings: &crate::vcenter_config::VcenterSettings,
    pvs: &Option<Result<probe::PvDatastores, String>>,
) -> Vec<Check> {
    let url = settings.url.as_str();
    let trust = probe::trust(settings);
    let credentials = settings.credentials.load();
    let (username, password) = match &credentials {
        Ok(c) => (c.username.clone(), c.password.clone()),
        Err(_) => (String::new(), crate::credentials::Password::new("")),
    };
    let connected = probe::connect(
        settings,
        username.clone(),
        password,
        args.vc_request_timeout,
    )
    .await;
    let (mut checks, usable) = vcenter::connect_checks(
        url,
        &username,
        &trust,
        connected.as_ref().map(|b| b.version()),
    );
    if let Some(tls) = checks.first_mut() {
        *tls = vcenter::with_config_warnings(tls.clone(), &settings.warnings);
    }
    if let Err(e) = &credentials
        && let Some(login) = checks.iter_mut().find(|c| c.name == vcenter::LOGIN)
    {
        *login = Check::fail(
            vcenter::LOGIN,
            format!(
                "credentials unreadable ({}): {e}",
                settings.credentials.describe()
            ),
            "check the credentials Secret (--vc-credentials-file, or user and password of \
             csi-vsphere.conf)",
        );
    }
    let backend = match connected {
        Ok(backend) if usable => backend,
        _ => {
            checks.push(vcenter::not_checked(vcenter::CNS, "vCenter connect"));
            checks.push(vcenter::not_checked(vcenter::DATASTORES, "vCenter connect"));
            return checks;
        }
    };
    checks.push(vcenter::cns_check(
        probe::query_cns(&backend).await.as_ref().map(|n| *n),
    ));
    checks.push(match pvs {
        None => vcenter::not_checked(vcenter::DATASTORES, "the Kubernetes API"),
        Some(Ok(found)) => vcenter::datastores_check(
            &probe::resolve_datastores(&backend, found).await,
            found.pvs,
            found.invalid,
        ),
        Some(Err(e)) => Check::fail(
            vcenter::DATASTORES,
            format!("cannot list PVs: {e}"),
            "grant list on persistentvolumes (the chart's ClusterRole)",
        ),
    });
    backend.logout().await;
    checks
}

/// The report as `format` asks (`table` or `json`) and the exit code; `csv` is refused.
pub fn render(report: &CheckReport, format: Format) -> Result<(String, u8), String> {
    let code = if report.ok { EXIT_OK } else { EXIT_FAILED };
    match format {
        Format::Table => Ok((report.table(), code)),
        Format::Json => Ok((report.json(), code)),
        Format::Csv => Err("volmig check prints -o table or -o json".to_owned()),
    }
}
