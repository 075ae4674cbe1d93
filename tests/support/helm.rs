//! Helpers of the Helm chart tests: the real helm 4 binary (fetched once by `make helm`),
//! rendering the chart, and reading objects out of the rendered YAML.

#![allow(dead_code)] // each test crate uses a different subset

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use serde_json::Value;

/// The repository root.
pub const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// Release name and namespace every test renders or installs with.
pub const RELEASE: &str = "volmig";
/// See [`RELEASE`].
pub const NAMESPACE: &str = "volmig";

/// `charts/volmig`.
pub fn chart_dir() -> PathBuf {
    Path::new(ROOT).join("charts/volmig")
}

/// `charts/volmig/ci/all-features-values.yaml`: every optional feature on.
pub fn all_features_values() -> PathBuf {
    chart_dir().join("ci/all-features-values.yaml")
}

/// Reads a file of the repository, with the path in the panic message.
pub fn read_repo_file(relative: &str) -> String {
    let path = Path::new(ROOT).join(relative);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// The helm binary: `$HELM` when set, else the one `make helm` caches outside the source
/// tree (fetched under a file lock the first time, so parallel tests fetch it once).
pub fn helm_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(locate_helm)
}

fn locate_helm() -> PathBuf {
    if let Some(path) = std::env::var_os("HELM").filter(|p| !p.is_empty()) {
        return PathBuf::from(path);
    }
    // The last line: fragments of the Makefile may print notes of their own.
    let printed = make(&["print-helm"]);
    let path = PathBuf::from(printed.lines().last().unwrap_or_default().trim());
    if !path.is_file() {
        let lock_path = Path::new(env!("CARGO_TARGET_TMPDIR")).join("helm-fetch.lock");
        let lock = File::create(&lock_path)
            .unwrap_or_else(|e| panic!("create {}: {e}", lock_path.display()));
        lock.lock()
            .unwrap_or_else(|e| panic!("lock {}: {e}", lock_path.display()));
        // Another test process may have fetched it while we waited; make skips it then.
        make(&["helm"]);
        drop(lock);
    }
    assert!(
        path.is_file(),
        "`make helm` did not produce {}",
        path.display()
    );
    path
}

/// Runs `make -s <targets>` in the repository root and returns its stdout.
fn make(targets: &[&str]) -> String {
    let output = Command::new("make")
        .args(["-s", "--no-print-directory", "-C", ROOT])
        .args(targets)
        .output()
        .unwrap_or_else(|e| panic!("run make {targets:?}: {e}"));
    assert!(
        output.status.success(),
        "make {targets:?} failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// A helm command with its state directories inside the test target dir and, unless the
/// caller sets one, a KUBECONFIG that points nowhere (no test ever reaches a real cluster
/// by accident).
pub fn helm() -> Command {
    let home = Path::new(env!("CARGO_TARGET_TMPDIR")).join("helm-home");
    let mut cmd = Command::new(helm_bin());
    cmd.env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_DATA_HOME", home.join("data"))
        .env("KUBECONFIG", home.join("no-cluster-kubeconfig"))
        .env_remove("HELM_NAMESPACE")
        .env_remove("HELM_KUBECONTEXT");
    cmd
}

/// Runs a command, returning its output; panics only when it cannot be started.
pub fn run(cmd: &mut Command) -> Output {
    cmd.output().unwrap_or_else(|e| panic!("run {cmd:?}: {e}"))
}

/// stdout and stderr of a finished command, for messages.
pub fn describe(output: &Output) -> String {
    format!(
        "{}\n--- stdout ---\n{}\n--- stderr ---\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// The chart rendered by `helm template`.
#[derive(Debug)]
pub struct Rendered {
    /// The YAML helm printed.
    pub text: String,
    /// Every object in it, as JSON values.
    pub objects: Vec<Value>,
}

/// The image repository every test renders and installs with: the chart's default
/// (`volmig`, no registry) is refused, as a production `helm install` would pull nothing.
pub const TEST_IMAGE_REPOSITORY: &str = "registry.example/volmig";
/// The vCenter URL every test renders with unless it turns `vcenter.csiConfig` on: without
/// one (or the driver's config) the chart refuses to render.
pub const TEST_VCENTER_URL: &str = "https://vcenter.example/sdk";

/// The values given before a test's own, as `--values <file>` so that every value file
/// and `--set` of the test overrides them: [`TEST_IMAGE_REPOSITORY`], and
/// [`TEST_VCENTER_URL`] unless `extra` turns `vcenter.csiConfig` on.
pub fn base_values(extra: &[&str]) -> Vec<String> {
    let csi = extra.contains(&"vcenter.csiConfig.enabled=true");
    let (name, doc) = if csi {
        (
            "helm-base-values-csi.yaml",
            serde_json::json!({"image": {"repository": TEST_IMAGE_REPOSITORY}}),
        )
    } else {
        (
            "helm-base-values.yaml",
            serde_json::json!({
                "image": {"repository": TEST_IMAGE_REPOSITORY},
                "vcenter": {"url": TEST_VCENTER_URL},
            }),
        )
    };
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let path = dir.join(name);
    // Written whole under a unique name, then renamed: parallel tests never read half a file.
    let partial = dir.join(format!(
        "{name}.{}.{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    std::fs::write(&partial, doc.to_string())
        .unwrap_or_else(|e| panic!("write {}: {e}", partial.display()));
    std::fs::rename(&partial, &path)
        .unwrap_or_else(|e| panic!("rename to {}: {e}", path.display()));
    vec!["--values".to_owned(), path.to_string_lossy().into_owned()]
}

/// `helm template volmig charts/volmig -n volmig <base values> <extra>`; `Err` holds
/// helm's stderr.
pub fn template(extra: &[&str]) -> Result<Rendered, String> {
    template_without_base(
        &[
            base_values(extra).iter().map(String::as_str).collect(),
            extra.to_vec(),
        ]
        .concat(),
    )
}

/// `helm template volmig charts/volmig -n volmig <extra>`, with the chart's own defaults
/// only; `Err` holds helm's stderr.
pub fn template_without_base(extra: &[&str]) -> Result<Rendered, String> {
    let output = run(helm()
        .args(["template", RELEASE])
        .arg(chart_dir())
        .args(["--namespace", NAMESPACE])
        .args(extra));
    if !output.status.success() {
        return Err(String::from_utf8_lossy(&output.stderr).into_owned());
    }
    let text = String::from_utf8(output.stdout).unwrap_or_else(|e| panic!("helm output: {e}"));
    Ok(Rendered {
        objects: parse_yaml_documents(&text),
        text,
    })
}

/// Like [`template`], panicking with helm's message when rendering fails.
pub fn render(extra: &[&str]) -> Rendered {
    template(extra).unwrap_or_else(|e| panic!("helm template {extra:?} failed:\n{e}"))
}

/// The NOTES helm prints after an install with `extra` (on top of [`base_values`]),
/// rendered client-side (`helm install --dry-run=client`): no cluster is contacted.
pub fn notes(extra: &[&str]) -> String {
    let output = run(helm()
        .args(["install", RELEASE])
        .arg(chart_dir())
        .args(["--namespace", NAMESPACE, "--dry-run=client"])
        .args(base_values(extra))
        .args(extra));
    assert!(
        output.status.success(),
        "helm install --dry-run=client {extra:?}: {}",
        describe(&output)
    );
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    text.split_once("\nNOTES:\n")
        .unwrap_or_else(|| panic!("no NOTES in {text}"))
        .1
        .to_owned()
}

/// Parses a multi-document YAML stream, skipping empty documents.
pub fn parse_yaml_documents(text: &str) -> Vec<Value> {
    serde_saphyr::from_multiple::<Value>(text)
        .unwrap_or_else(|e| panic!("rendered YAML does not parse: {e}\n{text}"))
}

impl Rendered {
    /// The objects of one kind.
    pub fn of_kind<'a>(&'a self, kind: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
        self.objects.iter().filter(move |o| o["kind"] == kind)
    }

    /// The one object of `kind` named `name`.
    pub fn get(&self, kind: &str, name: &str) -> &Value {
        let mut found = self
            .objects
            .iter()
            .filter(|o| o["kind"] == kind && o["metadata"]["name"] == name);
        let object = found
            .next()
            .unwrap_or_else(|| panic!("no {kind} {name} among {:?}", self.kind_names()));
        assert!(found.next().is_none(), "two {kind} objects named {name}");
        object
    }

    /// `Kind/name` of every object, sorted.
    pub fn kind_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .objects
            .iter()
            .map(|o| {
                let name = o["metadata"]["name"].as_str().unwrap_or("?");
                format!("{}/{name}", o["kind"].as_str().unwrap_or("?"))
            })
            .collect();
        names.sort();
        names
    }

    /// The single Deployment.
    pub fn deployment(&self) -> &Value {
        let all: Vec<&Value> = self.of_kind("Deployment").collect();
        assert_eq!(all.len(), 1, "expected one Deployment, got {}", all.len());
        all[0]
    }

    /// The arguments of the volmig container.
    pub fn args(&self) -> Vec<String> {
        container_args(self.deployment())
    }
}

/// The `volmig` container of a Deployment.
pub fn volmig_container(deployment: &Value) -> &Value {
    let containers = deployment["spec"]["template"]["spec"]["containers"]
        .as_array()
        .unwrap_or_else(|| panic!("Deployment has no containers: {deployment}"));
    containers
        .iter()
        .find(|c| c["name"] == "volmig")
        .unwrap_or_else(|| panic!("no container named volmig: {deployment}"))
}

/// The command line the `volmig` container runs with, written as flags: its args, then
/// each `VOLMIG_*` variable of its env that `volmig run` reads, as the flag it stands for
/// (`--name=value`; a switch set to `true` as `--name`, to `false` left out). clap reads a
/// flag and its variable alike, so both spellings configure the daemon the same way; the
/// chart renders settings as variables so that `volmig check` in the pod reads them too.
pub fn container_args(deployment: &Value) -> Vec<String> {
    let container = volmig_container(deployment);
    let mut args = strings(&container["args"]);
    args.extend(run_env_as_flags(&container["env"]));
    args
}

/// The `VOLMIG_*` variables of `env` (a container's env list) that `volmig run` declares,
/// in order, as flags; variables with `valueFrom`, or that `run` does not read, are skipped.
pub fn run_env_as_flags(env: &Value) -> Vec<String> {
    use clap::CommandFactory as _;
    let cli = volmig::cli::Cli::command();
    let run = cli
        .find_subcommand("run")
        .unwrap_or_else(|| panic!("volmig has no run subcommand"));
    let mut flags = Vec::new();
    for var in env.as_array().map(Vec::as_slice).unwrap_or_default() {
        let (Some(name), Some(value)) = (var["name"].as_str(), var["value"].as_str()) else {
            continue;
        };
        let Some(arg) = run
            .get_arguments()
            .find(|a| a.get_env().is_some_and(|e| e == name))
        else {
            continue;
        };
        let long = arg
            .get_long()
            .unwrap_or_else(|| panic!("{name} belongs to a flag without a long name"));
        if matches!(arg.get_action(), clap::ArgAction::SetTrue) {
            if value == "true" {
                flags.push(format!("--{long}"));
            }
        } else {
            flags.push(format!("--{long}={value}"));
        }
    }
    flags
}

/// A JSON array of strings as a vector (an absent value is empty).
pub fn strings(value: &Value) -> Vec<String> {
    match value {
        Value::Null => Vec::new(),
        Value::Array(items) => items
            .iter()
            .map(|v| {
                v.as_str()
                    .unwrap_or_else(|| panic!("{v} is not a string in {value}"))
                    .to_owned()
            })
            .collect(),
        other => panic!("{other} is not an array"),
    }
}

/// Asserts the restricted Pod Security Standard settings the chart promises, on a
/// Deployment as rendered or as stored by an API server.
pub fn assert_restricted_security(deployment: &Value) {
    let pod = &deployment["spec"]["template"]["spec"];
    let container = volmig_container(deployment);
    let psc = &pod["securityContext"];
    let sc = &container["securityContext"];
    assert_eq!(psc["runAsNonRoot"], true, "pod runAsNonRoot: {psc}");
    assert!(
        psc["runAsUser"].as_i64().is_some_and(|uid| uid > 0),
        "pod runAsUser must be a non-root UID: {psc}"
    );
    assert_eq!(sc["runAsNonRoot"], true, "container runAsNonRoot: {sc}");
    assert_eq!(
        sc["readOnlyRootFilesystem"], true,
        "readOnlyRootFilesystem: {sc}"
    );
    assert_eq!(
        sc["allowPrivilegeEscalation"], false,
        "allowPrivilegeEscalation: {sc}"
    );
    assert_eq!(
        sc["capabilities"]["drop"],
        serde_json::json!(["ALL"]),
        "capabilities: {sc}"
    );
    assert!(
        sc["capabilities"]["add"].is_null(),
        "no capability may be added: {sc}"
    );
    assert_eq!(
        sc["privileged"],
        Value::Null,
        "privileged must stay unset: {sc}"
    );
    for seccomp in [&psc["seccompProfile"], &sc["seccompProfile"]] {
        assert_eq!(
            seccomp["type"], "RuntimeDefault",
            "seccompProfile: {seccomp}"
        );
    }
    assert!(
        pod["hostNetwork"].is_null() && pod["hostPID"].is_null(),
        "host namespaces: {pod}"
    );
}

/// Asserts the probes: liveness on /healthz and readiness on /readyz, on the named
/// container port `http`.
pub fn assert_probes(deployment: &Value) {
    let container = volmig_container(deployment);
    for (probe, path) in [("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")] {
        let get = &container[probe]["httpGet"];
        assert_eq!(get["path"], path, "{probe}: {container}");
        // The probes' own listener (--probe-addr), not the metrics port.
        assert_eq!(get["port"], "probes", "{probe} port: {container}");
    }
    let ports = container["ports"].as_array().cloned().unwrap_or_default();
    assert!(
        ports.iter().any(|p| p["name"] == "probes"),
        "the probes' port `probes` is not declared: {ports:?}"
    );
}

/// Asserts that RBAC rules use no wildcard and never reach Secrets.
pub fn assert_no_wildcards_or_secrets(rules: &Value, what: &str) {
    let rules = rules
        .as_array()
        .unwrap_or_else(|| panic!("{what} has no rules"));
    assert!(!rules.is_empty(), "{what} has no rules");
    for rule in rules {
        for field in [
            "apiGroups",
            "resources",
            "verbs",
            "resourceNames",
            "nonResourceURLs",
        ] {
            for item in strings(&rule[field]) {
                assert!(
                    !item.contains('*'),
                    "{what}: wildcard {item:?} in {field} of {rule}"
                );
            }
        }
        assert!(
            rule["nonResourceURLs"].is_null(),
            "{what}: nonResourceURLs in {rule}"
        );
        let resources = strings(&rule["resources"]);
        assert!(
            !resources
                .iter()
                .any(|r| r == "secrets" || r.starts_with("secrets/")),
            "{what} grants access to Secrets: {rule}"
        );
    }
}

/// A Kubernetes API test server with a kubeconfig for kubectl and helm.
pub struct Cluster {
    /// The in-process API server.
    pub server: kube_testserver::TestServer,
    dir: tempfile::TempDir,
}

impl Cluster {
    /// Starts a fresh server and writes its kubeconfig.
    pub async fn start() -> Cluster {
        let server = kube_testserver::TestServer::start(kube_testserver::Options::default())
            .await
            .unwrap_or_else(|e| panic!("start the API test server: {e:#}"));
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
        server
            .write_kubeconfig(&dir.path().join("kubeconfig"))
            .unwrap_or_else(|e| panic!("write the kubeconfig: {e}"));
        Cluster { server, dir }
    }

    /// The kubeconfig file.
    pub fn kubeconfig(&self) -> PathBuf {
        self.dir.path().join("kubeconfig")
    }

    /// The real kubectl, pointed at this server.
    pub fn kubectl(&self) -> Command {
        let mut cmd = Command::new("/usr/bin/kubectl");
        cmd.env("KUBECONFIG", self.kubeconfig())
            .env("HOME", self.dir.path())
            .env_remove("KUBECTL_EXTERNAL_DIFF");
        cmd
    }

    /// helm, pointed at this server.
    pub fn helm(&self) -> Command {
        let mut cmd = helm();
        cmd.env("KUBECONFIG", self.kubeconfig());
        cmd
    }

    /// Runs kubectl with `args` (and `stdin`), asserting success; returns stdout.
    pub fn kubectl_ok(&self, args: &[&str], stdin: Option<&str>) -> String {
        let output = with_stdin(self.kubectl().args(args), stdin);
        assert!(
            output.status.success(),
            "kubectl {args:?}: {}",
            describe(&output)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// `kubectl get <what> -o json`; `None` when the object does not exist.
    pub fn get_json(&self, what: &[&str]) -> Option<Value> {
        let output = run(self.kubectl().arg("get").args(what).args(["-o", "json"]));
        if !output.status.success() {
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert!(
                stderr.contains("NotFound"),
                "kubectl get {what:?}: {}",
                describe(&output)
            );
            return None;
        }
        Some(
            serde_json::from_slice(&output.stdout)
                .unwrap_or_else(|e| panic!("kubectl get {what:?} -o json: {e}")),
        )
    }
}

/// Runs `cmd`, feeding `stdin` when given.
pub fn with_stdin(cmd: &mut Command, stdin: Option<&str>) -> Output {
    use std::io::Write as _;
    use std::process::Stdio;
    let Some(input) = stdin else {
        return run(cmd);
    };
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {cmd:?}: {e}"));
    let mut pipe = child
        .stdin
        .take()
        .unwrap_or_else(|| panic!("stdin of {cmd:?}"));
    let input = input.to_owned();
    // Write from another thread so a child that answers before reading all input cannot
    // deadlock us.
    let writer = std::thread::spawn(move || pipe.write_all(input.as_bytes()));
    let output = child
        .wait_with_output()
        .unwrap_or_else(|e| panic!("wait {cmd:?}: {e}"));
    writer
        .join()
        .unwrap_or_else(|_| panic!("stdin writer of {cmd:?} panicked"))
        .unwrap_or_else(|e| panic!("write stdin of {cmd:?}: {e}"));
    output
}

/// A minimal ServiceMonitor CRD (the Prometheus Operator's kind), so that the chart's
/// optional ServiceMonitor has a kind to be checked against.
pub const SERVICE_MONITOR_CRD: &str = r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: servicemonitors.monitoring.coreos.com
spec:
  group: monitoring.coreos.com
  scope: Namespaced
  names:
    kind: ServiceMonitor
    listKind: ServiceMonitorList
    plural: servicemonitors
    singular: servicemonitor
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          type: object
          required: [spec]
          properties:
            spec:
              type: object
              required: [selector, endpoints]
              properties:
                selector:
                  type: object
                  x-kubernetes-preserve-unknown-fields: true
                namespaceSelector:
                  type: object
                  x-kubernetes-preserve-unknown-fields: true
                endpoints:
                  type: array
                  items:
                    type: object
                    properties:
                      port: {type: string}
                      path: {type: string}
                      interval: {type: string, pattern: '^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$'}
                      scrapeTimeout: {type: string, pattern: '^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$'}
"#;
