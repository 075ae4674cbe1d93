//! charts/volmig/README.md: a short intro and a table of every value, generated from the
//! `# --` comments of values.yaml (helm-docs style: value | type | default | description).
//! `make chart-readme` regenerates it (this test with `VOLMIG_WRITE_CHART_README=1`).

use std::path::Path;

use serde_json::Value;

use crate::helm::{ROOT, read_repo_file};

/// The README, relative to the repository root.
const README: &str = "charts/volmig/README.md";

/// Set to regenerate the README instead of comparing it.
const WRITE_ENV: &str = "VOLMIG_WRITE_CHART_README";

/// The README's text above the values table.
const INTRO: &str = "\
# volmig Helm chart

<!-- Generated from values.yaml by `make chart-readme`; edit values.yaml's `# --` comments,
not this file (tests/helm_chart/readme.rs checks that the two agree). -->

volmig registers in-tree vSphere vmdks (the PersistentVolumes of the in-tree
`kubernetes.io/vsphere-volume` plugin) as CNS volumes exactly once and publishes the mapping
as cluster-scoped `VolumeMigration` objects. This chart installs:

- the `VolumeMigration` CustomResourceDefinition (`crds/`);
- the volmig Deployment (leader-elected replicas behind a Lease), its ServiceAccount,
  PodDisruptionBudget and metrics Service;
- the RBAC it needs: a ClusterRole, a Role for its Lease, a Role for the vSphere CSI
  driver's syncer Lease, a Role for Events (namespace `events.namespace`) and a read-only
  `<fullname>-reader` ClusterRole for consumers of the mapping;
- optionally the vCenter credentials Secret, a CA bundle ConfigMap, a ServiceMonitor, a
  PrometheusRule, a Grafana dashboard ConfigMap and a NetworkPolicy.

## Prerequisites

- Kubernetes with the vSphere CSI driver (or at least its namespace and cluster ID);
- helm 3 or 4;
- a vCenter user allowed to register CNS volumes, and its credentials in a Secret (or
  `vcenter.credentials` / `vcenter.csiConfig`);
- the volmig image in your registry: volmig publishes none; build it from the repository's
  `Dockerfile` and push it.

## Install

```sh
helm install volmig charts/volmig --namespace volmig --create-namespace \\
  --set image.repository=registry.example.com/storage/volmig \\
  --set vcenter.url=https://vcenter.example.com/sdk \\
  --set vcenter.credentials.existingSecret=volmig-vcenter
```

Operations, every flag, upgrades, alerts and runbooks: [docs/operations.md](../../docs/operations.md).

## Values

| Key | Type | Default | Description |
|-----|------|---------|-------------|
";

/// A documented value: its key path in values.yaml and its `# --` description.
struct Documented {
    path: Vec<String>,
    description: String,
}

/// The keys of values.yaml that carry a `# --` comment, in file order. A `# --` comment and
/// the `#` lines right after it describe the next key; nesting follows the indentation.
fn documented_keys(yaml: &str) -> Vec<Documented> {
    let mut stack: Vec<(usize, String)> = Vec::new();
    let mut pending: Option<String> = None;
    let mut out = Vec::new();
    for line in yaml.lines() {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        if let Some(rest) = trimmed.strip_prefix("# --") {
            pending = Some(rest.trim().to_owned());
            continue;
        }
        if let Some(rest) = trimmed.strip_prefix('#') {
            if let Some(description) = pending.as_mut() {
                description.push(' ');
                description.push_str(rest.trim());
            }
            continue;
        }
        if trimmed.is_empty() || trimmed.starts_with('-') {
            continue;
        }
        let Some(key) = trimmed
            .split_once(": ")
            .map(|(k, _)| k)
            .or_else(|| trimmed.strip_suffix(':'))
        else {
            continue;
        };
        let key = key.trim_matches('"').to_owned();
        while stack.last().is_some_and(|(i, _)| *i >= indent) {
            stack.pop();
        }
        stack.push((indent, key));
        if let Some(description) = pending.take() {
            out.push(Documented {
                path: stack.iter().map(|(_, k)| k.clone()).collect(),
                description,
            });
        }
    }
    out
}

/// The value at `path` in the parsed values.
fn lookup<'a>(values: &'a Value, path: &[String]) -> &'a Value {
    path.iter().fold(values, |v, k| &v[k.as_str()])
}

/// helm-docs' type name of a value.
fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "string",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_i64() || n.is_u64() => "int",
        Value::Number(_) => "float",
        Value::String(_) => "string",
        Value::Array(_) => "list",
        Value::Object(_) => "object",
    }
}

/// Key paths of every leaf of `value` (empty lists and maps are leaves).
fn leaf_paths(value: &Value, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    match value {
        Value::Object(map) if !map.is_empty() => {
            for (key, child) in map {
                prefix.push(key.clone());
                leaf_paths(child, prefix, out);
                prefix.pop();
            }
        }
        _ => out.push(prefix.clone()),
    }
}

/// The README for `values_yaml`; panics naming every value no `# --` comment documents
/// (itself or a map around it).
pub fn render_readme(values_yaml: &str) -> String {
    let values: Value = serde_saphyr::from_str(values_yaml)
        .unwrap_or_else(|e| panic!("values.yaml does not parse: {e}"));
    let documented = documented_keys(values_yaml);
    let mut leaves = Vec::new();
    leaf_paths(&values, &mut Vec::new(), &mut leaves);
    let undocumented: Vec<String> = leaves
        .iter()
        .filter(|leaf| !documented.iter().any(|d| leaf.starts_with(&d.path)))
        .map(|leaf| leaf.join("."))
        .collect();
    assert!(
        undocumented.is_empty(),
        "values.yaml values without a `# --` comment: {undocumented:?}"
    );
    let mut out = INTRO.to_owned();
    for Documented { path, description } in &documented {
        let value = lookup(&values, path);
        let default =
            serde_json::to_string(value).unwrap_or_else(|e| panic!("{}: {e}", path.join(".")));
        out.push_str(&format!(
            "| {} | {} | `{}` | {} |\n",
            path.join("."),
            type_name(value),
            default.replace('|', "\\|"),
            description.replace('|', "\\|"),
        ));
    }
    out
}

#[test]
fn chart_readme_is_generated_from_values_yaml() {
    let expected = render_readme(&read_repo_file("charts/volmig/values.yaml"));
    let path = Path::new(ROOT).join(README);
    if std::env::var_os(WRITE_ENV).is_some() {
        std::fs::write(&path, &expected).expect("write the chart README");
        return;
    }
    let actual = std::fs::read_to_string(&path).unwrap_or_default();
    if actual != expected {
        let diff: Vec<String> = diff_lines(&actual, &expected);
        panic!(
            "{README} is not what values.yaml's `# --` comments generate: run `make \
             chart-readme`.\n{}",
            diff.join("\n")
        );
    }
}

/// The lines only in `actual` (`-`) and only in `expected` (`+`).
fn diff_lines(actual: &str, expected: &str) -> Vec<String> {
    let removed = actual
        .lines()
        .filter(|l| !expected.lines().any(|e| e == *l))
        .map(|l| format!("-{l}"));
    let added = expected
        .lines()
        .filter(|l| !actual.lines().any(|a| a == *l))
        .map(|l| format!("+{l}"));
    removed.chain(added).collect()
}

#[test]
fn the_generator_reads_nesting_and_continuation_lines() {
    let yaml = "\
# -- Top.
# More.
top: 1
group:
  # -- A list.
  list: [a, b]
  inner:
    # -- Deep.
    deep: 0.5
# -- Whole map.
map:
  k: \"v|w\"
";
    let readme = render_readme(yaml);
    let table = readme.strip_prefix(INTRO).expect("the intro first");
    assert_eq!(
        table,
        "| top | int | `1` | Top. More. |\n\
         | group.list | list | `[\"a\",\"b\"]` | A list. |\n\
         | group.inner.deep | float | `0.5` | Deep. |\n\
         | map | object | `{\"k\":\"v\\|w\"}` | Whole map. |\n"
    );
}
