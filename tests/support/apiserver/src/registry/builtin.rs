//! The built-in resources: names, scopes, schemas (from k8s-openapi) and table columns.

use schemars::JsonSchema;
use serde_json::{Value, json};

use super::{BuiltinInfo, Conversion, ResourceDef, StorageKey, VersionDef};

/// How a built-in table column gets its value.
#[derive(Debug, Clone, Copy)]
pub enum ColumnSource {
    /// A printer-column JSONPath.
    Path(&'static str),
    /// A function of the object.
    Func(fn(&Value) -> Value),
}

/// A default table column of a built-in resource (shown between NAME and AGE).
#[derive(Debug, Clone, Copy)]
pub struct BuiltinColumn {
    /// Header.
    pub name: &'static str,
    /// `string` or `integer`.
    pub type_: &'static str,
    /// Where the value comes from.
    pub source: ColumnSource,
}

const fn col(name: &'static str, path: &'static str) -> BuiltinColumn {
    BuiltinColumn {
        name,
        type_: "string",
        source: ColumnSource::Path(path),
    }
}

const fn func(name: &'static str, type_: &'static str, f: fn(&Value) -> Value) -> BuiltinColumn {
    BuiltinColumn {
        name,
        type_,
        source: ColumnSource::Func(f),
    }
}

fn access_modes(o: &Value) -> Value {
    let modes = o.pointer("/spec/accessModes").and_then(Value::as_array);
    let short: Vec<&str> = modes
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(|m| match m {
            "ReadWriteOnce" => "RWO",
            "ReadOnlyMany" => "ROX",
            "ReadWriteMany" => "RWX",
            "ReadWriteOncePod" => "RWOP",
            other => other,
        })
        .collect();
    Value::String(short.join(","))
}

fn claim(o: &Value) -> Value {
    let ns = o
        .pointer("/spec/claimRef/namespace")
        .and_then(Value::as_str);
    let name = o.pointer("/spec/claimRef/name").and_then(Value::as_str);
    match (ns, name) {
        (Some(ns), Some(n)) => Value::String(format!("{ns}/{n}")),
        (None, Some(n)) => Value::String(n.to_string()),
        _ => Value::String(String::new()),
    }
}

fn data_count(o: &Value) -> Value {
    let n = |p: &str| o.get(p).and_then(Value::as_object).map_or(0, |m| m.len());
    json!(n("data") + n("binaryData"))
}

fn ready_replicas(o: &Value) -> Value {
    let ready = o
        .pointer("/status/readyReplicas")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    let want = o
        .pointer("/spec/replicas")
        .and_then(Value::as_i64)
        .unwrap_or(1);
    Value::String(format!("{ready}/{want}"))
}

fn event_object(o: &Value) -> Value {
    let kind = o
        .pointer("/involvedObject/kind")
        .and_then(Value::as_str)
        .unwrap_or("");
    let name = o
        .pointer("/involvedObject/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    Value::String(format!("{}/{name}", kind.to_lowercase()))
}

const NO_COLUMNS: &[BuiltinColumn] = &[];
const NS_COLUMNS: &[BuiltinColumn] = &[col("STATUS", ".status.phase")];
const PV_COLUMNS: &[BuiltinColumn] = &[
    col("CAPACITY", ".spec.capacity.storage"),
    func("ACCESS MODES", "string", access_modes),
    col("RECLAIM POLICY", ".spec.persistentVolumeReclaimPolicy"),
    col("STATUS", ".status.phase"),
    func("CLAIM", "string", claim),
    col("STORAGECLASS", ".spec.storageClassName"),
];
const PVC_COLUMNS: &[BuiltinColumn] = &[
    col("STATUS", ".status.phase"),
    col("VOLUME", ".spec.volumeName"),
    col("CAPACITY", ".status.capacity.storage"),
    col("STORAGECLASS", ".spec.storageClassName"),
];
const POD_COLUMNS: &[BuiltinColumn] = &[col("STATUS", ".status.phase")];
const EVENT_COLUMNS: &[BuiltinColumn] = &[
    col("TYPE", ".type"),
    col("REASON", ".reason"),
    func("OBJECT", "string", event_object),
    col("MESSAGE", ".message"),
];
const DATA_COLUMNS: &[BuiltinColumn] = &[func("DATA", "integer", data_count)];
const SECRET_COLUMNS: &[BuiltinColumn] =
    &[col("TYPE", ".type"), func("DATA", "integer", data_count)];
const SVC_COLUMNS: &[BuiltinColumn] = &[
    col("TYPE", ".spec.type"),
    col("CLUSTER-IP", ".spec.clusterIP"),
];
const LEASE_COLUMNS: &[BuiltinColumn] = &[col("HOLDER", ".spec.holderIdentity")];
const DEPLOY_COLUMNS: &[BuiltinColumn] = &[func("READY", "string", ready_replicas)];
const SC_COLUMNS: &[BuiltinColumn] = &[
    col("PROVISIONER", ".provisioner"),
    col("RECLAIMPOLICY", ".reclaimPolicy"),
];

struct Spec {
    group: &'static str,
    version: &'static str,
    plural: &'static str,
    kind: &'static str,
    namespaced: bool,
    short: &'static [&'static str],
    status: bool,
    schema_name: String,
    columns: &'static [BuiltinColumn],
}

fn spec<T: JsonSchema>(
    gvp: (&'static str, &'static str, &'static str),
    kind: &'static str,
    namespaced: bool,
    short: &'static [&'static str],
    status: bool,
    columns: &'static [BuiltinColumn],
) -> Spec {
    Spec {
        group: gvp.0,
        version: gvp.1,
        plural: gvp.2,
        kind,
        namespaced,
        short,
        status,
        schema_name: T::schema_name().into_owned(),
        columns,
    }
}

/// Adds the JSON schemas of every built-in kind to `g` (used for OpenAPI and validation).
pub fn add_builtin_schemas(g: &mut schemars::SchemaGenerator) {
    use k8s_openapi::api as a;
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as ext;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
    g.subschema_for::<a::core::v1::Namespace>();
    g.subschema_for::<a::core::v1::PersistentVolume>();
    g.subschema_for::<a::core::v1::PersistentVolumeClaim>();
    g.subschema_for::<a::core::v1::Pod>();
    g.subschema_for::<a::core::v1::Event>();
    g.subschema_for::<a::core::v1::ServiceAccount>();
    g.subschema_for::<a::core::v1::Service>();
    g.subschema_for::<a::core::v1::Secret>();
    g.subschema_for::<a::core::v1::ConfigMap>();
    g.subschema_for::<a::events::v1::Event>();
    g.subschema_for::<a::coordination::v1::Lease>();
    g.subschema_for::<ext::CustomResourceDefinition>();
    g.subschema_for::<a::apps::v1::Deployment>();
    g.subschema_for::<a::rbac::v1::Role>();
    g.subschema_for::<a::rbac::v1::RoleBinding>();
    g.subschema_for::<a::rbac::v1::ClusterRole>();
    g.subschema_for::<a::rbac::v1::ClusterRoleBinding>();
    g.subschema_for::<a::policy::v1::PodDisruptionBudget>();
    g.subschema_for::<a::storage::v1::StorageClass>();
    g.subschema_for::<a::storage::v1::VolumeAttachment>();
    g.subschema_for::<meta::ObjectMeta>();
    g.subschema_for::<meta::Status>();
}

fn specs() -> Vec<Spec> {
    use k8s_openapi::api as a;
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as ext;
    let core = |p| ("", "v1", p);
    vec![
        spec::<a::core::v1::Namespace>(
            core("namespaces"),
            "Namespace",
            false,
            &["ns"],
            true,
            NS_COLUMNS,
        ),
        spec::<a::core::v1::PersistentVolume>(
            core("persistentvolumes"),
            "PersistentVolume",
            false,
            &["pv"],
            true,
            PV_COLUMNS,
        ),
        spec::<a::core::v1::PersistentVolumeClaim>(
            core("persistentvolumeclaims"),
            "PersistentVolumeClaim",
            true,
            &["pvc"],
            true,
            PVC_COLUMNS,
        ),
        spec::<a::core::v1::Pod>(core("pods"), "Pod", true, &["po"], true, POD_COLUMNS),
        spec::<a::core::v1::Event>(core("events"), "Event", true, &["ev"], false, EVENT_COLUMNS),
        spec::<a::core::v1::ServiceAccount>(
            core("serviceaccounts"),
            "ServiceAccount",
            true,
            &["sa"],
            false,
            NO_COLUMNS,
        ),
        spec::<a::core::v1::Service>(
            core("services"),
            "Service",
            true,
            &["svc"],
            true,
            SVC_COLUMNS,
        ),
        spec::<a::core::v1::Secret>(core("secrets"), "Secret", true, &[], false, SECRET_COLUMNS),
        spec::<a::core::v1::ConfigMap>(
            core("configmaps"),
            "ConfigMap",
            true,
            &["cm"],
            false,
            DATA_COLUMNS,
        ),
        spec::<a::events::v1::Event>(
            ("events.k8s.io", "v1", "events"),
            "Event",
            true,
            &["ev"],
            false,
            EVENT_COLUMNS,
        ),
        spec::<a::coordination::v1::Lease>(
            ("coordination.k8s.io", "v1", "leases"),
            "Lease",
            true,
            &[],
            false,
            LEASE_COLUMNS,
        ),
        spec::<ext::CustomResourceDefinition>(
            ("apiextensions.k8s.io", "v1", "customresourcedefinitions"),
            "CustomResourceDefinition",
            false,
            &["crd", "crds"],
            true,
            NO_COLUMNS,
        ),
        spec::<a::apps::v1::Deployment>(
            ("apps", "v1", "deployments"),
            "Deployment",
            true,
            &["deploy"],
            true,
            DEPLOY_COLUMNS,
        ),
        spec::<a::rbac::v1::Role>(
            ("rbac.authorization.k8s.io", "v1", "roles"),
            "Role",
            true,
            &[],
            false,
            NO_COLUMNS,
        ),
        spec::<a::rbac::v1::RoleBinding>(
            ("rbac.authorization.k8s.io", "v1", "rolebindings"),
            "RoleBinding",
            true,
            &[],
            false,
            NO_COLUMNS,
        ),
        spec::<a::rbac::v1::ClusterRole>(
            ("rbac.authorization.k8s.io", "v1", "clusterroles"),
            "ClusterRole",
            false,
            &[],
            false,
            NO_COLUMNS,
        ),
        spec::<a::rbac::v1::ClusterRoleBinding>(
            ("rbac.authorization.k8s.io", "v1", "clusterrolebindings"),
            "ClusterRoleBinding",
            false,
            &[],
            false,
            NO_COLUMNS,
        ),
        spec::<a::policy::v1::PodDisruptionBudget>(
            ("policy", "v1", "poddisruptionbudgets"),
            "PodDisruptionBudget",
            true,
            &["pdb"],
            true,
            NO_COLUMNS,
        ),
        spec::<a::storage::v1::StorageClass>(
            ("storage.k8s.io", "v1", "storageclasses"),
            "StorageClass",
            false,
            &["sc"],
            false,
            SC_COLUMNS,
        ),
        // Cluster-scoped with a status subresource, as kube-apiserver serves it
        // (pkg/registry/storage/volumeattachment/storage/storage.go: the Store and its
        // StatusREST).
        spec::<a::storage::v1::VolumeAttachment>(
            ("storage.k8s.io", "v1", "volumeattachments"),
            "VolumeAttachment",
            false,
            &[],
            true,
            NO_COLUMNS,
        ),
    ]
}

/// The built-in resource definitions.
pub fn builtin_defs() -> Vec<ResourceDef> {
    specs()
        .into_iter()
        .map(|s| {
            let events_v1 = s.group == "events.k8s.io";
            let storage = if events_v1 {
                StorageKey {
                    group: String::new(),
                    resource: "events".into(),
                }
            } else {
                StorageKey {
                    group: s.group.into(),
                    resource: s.plural.into(),
                }
            };
            // CRDs, like custom resources, insist on a resourceVersion for updates.
            let unconditional_update = s.plural != "customresourcedefinitions";
            ResourceDef {
                group: s.group.into(),
                versions: vec![VersionDef {
                    name: s.version.into(),
                    schema: None,
                    columns: Vec::new(),
                    status: s.status,
                }],
                storage_version: s.version.into(),
                plural: s.plural.into(),
                singular: s.kind.to_lowercase(),
                kind: s.kind.into(),
                list_kind: format!("{}List", s.kind),
                namespaced: s.namespaced,
                short_names: s.short.iter().map(|x| x.to_string()).collect(),
                categories: if matches!(s.plural, "services" | "deployments" | "pods") {
                    vec!["all".to_string()]
                } else {
                    Vec::new()
                },
                storage,
                conversion: if events_v1 {
                    Conversion::EventsV1
                } else {
                    Conversion::None
                },
                builtin: Some(BuiltinInfo {
                    schema_name: s.schema_name,
                    columns: s.columns,
                    unconditional_update,
                }),
            }
        })
        .collect()
}
