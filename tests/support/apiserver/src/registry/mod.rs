//! The resources the server serves: built-in kinds plus those defined by installed CRDs.

mod builtin;
mod crd;

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;

pub use builtin::{BuiltinColumn, ColumnSource, add_builtin_schemas, builtin_defs};
pub use crd::{defs_from_crd, validate_crd};

/// Where a resource's objects are stored: objects of two served resources that share storage
/// (core and `events.k8s.io` Events) live under one key.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StorageKey {
    /// API group.
    pub group: String,
    /// Plural resource name.
    pub resource: String,
}

/// How the stored form differs from what clients of this resource see.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Conversion {
    /// Only `apiVersion` is rewritten.
    None,
    /// `events.k8s.io/v1` Events stored as core `v1` Events.
    EventsV1,
}

/// A printer column of a CRD (`additionalPrinterColumns`).
#[derive(Debug, Clone, PartialEq)]
pub struct PrinterColumn {
    /// Column header.
    pub name: String,
    /// `string`, `integer`, `number`, `boolean` or `date`.
    pub type_: String,
    /// Optional format.
    pub format: String,
    /// Description.
    pub description: String,
    /// Priority (0 = shown by default).
    pub priority: i64,
    /// JSONPath of the value.
    pub json_path: String,
}

/// One served version of a resource.
#[derive(Debug, Clone)]
pub struct VersionDef {
    /// Version name, e.g. `v1alpha1`.
    pub name: String,
    /// CRD `openAPIV3Schema` for this version (custom resources only).
    pub schema: Option<Arc<Value>>,
    /// CRD printer columns for this version.
    pub columns: Vec<PrinterColumn>,
    /// Whether `/status` is served for this version.
    pub status: bool,
}

/// A served resource (one group, one plural, one or more versions).
#[derive(Debug, Clone)]
pub struct ResourceDef {
    /// API group, "" for core.
    pub group: String,
    /// Served versions, highest priority first.
    pub versions: Vec<VersionDef>,
    /// The version objects are stored in.
    pub storage_version: String,
    /// Plural name (the URL segment).
    pub plural: String,
    /// Singular name.
    pub singular: String,
    /// Kind.
    pub kind: String,
    /// List kind.
    pub list_kind: String,
    /// Namespaced or cluster-scoped.
    pub namespaced: bool,
    /// Short names for kubectl.
    pub short_names: Vec<String>,
    /// Categories (e.g. `all`).
    pub categories: Vec<String>,
    /// Storage key.
    pub storage: StorageKey,
    /// Conversion between stored and served form.
    pub conversion: Conversion,
    /// Built-in extras (schema name, default columns); `None` for custom resources.
    pub builtin: Option<BuiltinInfo>,
}

/// What only built-in resources have.
#[derive(Debug, Clone)]
pub struct BuiltinInfo {
    /// OpenAPI schema name of the kind (e.g. `io.k8s.api.core.v1.PersistentVolume`).
    pub schema_name: String,
    /// Extra table columns between NAME and AGE.
    pub columns: &'static [BuiltinColumn],
    /// Whether PUT without a resourceVersion is allowed.
    pub unconditional_update: bool,
}

impl ResourceDef {
    /// The version definition for `version`, if served.
    pub fn version(&self, version: &str) -> Option<&VersionDef> {
        self.versions.iter().find(|v| v.name == version)
    }

    /// Whether `/status` is served for `version`.
    pub fn has_status(&self, version: &str) -> bool {
        self.version(version).is_some_and(|v| v.status)
    }

    /// `group/version` (or `version` for core).
    pub fn api_version(&self, version: &str) -> String {
        if self.group.is_empty() {
            version.to_string()
        } else {
            format!("{}/{}", self.group, version)
        }
    }

    /// Whether this is a custom resource.
    pub fn is_custom(&self) -> bool {
        self.builtin.is_none()
    }

    /// Whether an update may omit `metadata.resourceVersion`.
    pub fn unconditional_update(&self) -> bool {
        self.builtin
            .as_ref()
            .is_some_and(|b| b.unconditional_update)
    }
}

/// Orders Kubernetes versions by priority: GA > beta > alpha, higher numbers first,
/// non-matching names last in lexical order.
pub fn version_priority(a: &str, b: &str) -> Ordering {
    fn parse(v: &str) -> Option<(u8, u64, u64)> {
        let rest = v.strip_prefix('v')?;
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        let major: u64 = digits.parse().ok()?;
        let tail = &rest[digits.len()..];
        if tail.is_empty() {
            return Some((3, major, 0));
        }
        for (prefix, rank) in [("beta", 2u8), ("alpha", 1u8)] {
            if let Some(n) = tail.strip_prefix(prefix) {
                return Some((rank, major, n.parse().ok()?));
            }
        }
        None
    }
    match (parse(a), parse(b)) {
        (Some(x), Some(y)) => y.cmp(&x),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => a.cmp(b),
    }
}

/// All served resources, keyed by (group, plural).
#[derive(Debug, Clone, Default)]
pub struct Registry {
    defs: BTreeMap<(String, String), Arc<ResourceDef>>,
}

impl Registry {
    /// A registry with the built-in resources.
    pub fn with_builtins() -> Self {
        let mut r = Registry::default();
        for d in builtin_defs() {
            r.insert(d);
        }
        r
    }

    /// Adds or replaces a resource.
    pub fn insert(&mut self, def: ResourceDef) {
        self.defs
            .insert((def.group.clone(), def.plural.clone()), Arc::new(def));
    }

    /// Removes a resource.
    pub fn remove(&mut self, group: &str, plural: &str) -> Option<Arc<ResourceDef>> {
        self.defs.remove(&(group.to_string(), plural.to_string()))
    }

    /// Looks a resource up by group, version and plural.
    pub fn lookup(&self, group: &str, version: &str, plural: &str) -> Option<Arc<ResourceDef>> {
        self.defs
            .get(&(group.to_string(), plural.to_string()))
            .filter(|d| d.version(version).is_some())
            .cloned()
    }

    /// Looks a resource up by group and plural.
    pub fn get(&self, group: &str, plural: &str) -> Option<Arc<ResourceDef>> {
        self.defs
            .get(&(group.to_string(), plural.to_string()))
            .cloned()
    }

    /// Every resource.
    pub fn all(&self) -> impl Iterator<Item = &Arc<ResourceDef>> {
        self.defs.values()
    }

    /// Resources served in `group`/`version`.
    pub fn in_group_version<'a>(
        &'a self,
        group: &'a str,
        version: &'a str,
    ) -> impl Iterator<Item = &'a Arc<ResourceDef>> + 'a {
        self.defs
            .values()
            .filter(move |d| d.group == group && d.version(version).is_some())
    }

    /// Groups (except core) with their versions, highest priority first.
    pub fn groups(&self) -> BTreeMap<String, Vec<String>> {
        let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for d in self.defs.values().filter(|d| !d.group.is_empty()) {
            let entry = out.entry(d.group.clone()).or_default();
            for v in &d.versions {
                if !entry.contains(&v.name) {
                    entry.push(v.name.clone());
                }
            }
        }
        for versions in out.values_mut() {
            versions.sort_by(|a, b| version_priority(a, b));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_priority_orders_like_kubernetes() {
        let mut v = vec!["v1alpha1", "v2", "foo", "v1beta2", "v1", "v1beta1", "v10"];
        v.sort_by(|a, b| version_priority(a, b));
        assert_eq!(
            v,
            vec!["v10", "v2", "v1", "v1beta2", "v1beta1", "v1alpha1", "foo"]
        );
    }

    #[test]
    fn builtins_include_required_kinds() {
        let r = Registry::with_builtins();
        for (g, v, p) in [
            ("", "v1", "persistentvolumes"),
            ("", "v1", "namespaces"),
            ("", "v1", "events"),
            ("events.k8s.io", "v1", "events"),
            ("coordination.k8s.io", "v1", "leases"),
            ("apiextensions.k8s.io", "v1", "customresourcedefinitions"),
            ("apps", "v1", "deployments"),
            ("rbac.authorization.k8s.io", "v1", "clusterroles"),
            ("policy", "v1", "poddisruptionbudgets"),
        ] {
            assert!(r.lookup(g, v, p).is_some(), "{g}/{v}/{p} missing");
        }
        let ev = r.lookup("events.k8s.io", "v1", "events").expect("events");
        assert_eq!(
            ev.storage,
            StorageKey {
                group: String::new(),
                resource: "events".into()
            }
        );
    }
}
