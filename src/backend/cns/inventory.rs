//! Datacenter and datastore resolution: one property-collector pass over the inventory
//! (folders, datacenters at any depth, their datastores), cached and refreshed when a
//! datastore name is not found.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, RwLock};

use crate::backend::{BackendError, ErrorClass};

use super::fault::names;
use super::session::SoapClient;
use super::soap::{MoRef, Returnval};
use super::transport::Endpoint;
use super::vim::{
    ContinueRetrievePropertiesEx, ObjectSpec, PropertyFilterSpec, PropertySpec, RetrieveOptions,
    RetrievePropertiesEx, RetrieveResult, SimpleValue, TraversalSpec,
};

const OP: &str = "RetrievePropertiesEx";

/// Where a datastore lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DatastoreLocation {
    /// The datastore.
    pub datastore: MoRef,
    /// Its datacenter.
    pub datacenter: MoRef,
    /// The datacenter's inventory path without leading `/`, e.g. `F0/DC1`.
    pub datacenter_path: String,
}

/// One datacenter found in the inventory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Datacenter {
    pub moref: MoRef,
    pub name: String,
    pub path: String,
    pub datastores: Vec<(String, MoRef)>,
}

/// A snapshot of the datastores in the searched datacenters, by name.
#[derive(Debug, Default)]
struct Snapshot {
    by_name: HashMap<String, Vec<DatastoreLocation>>,
    generation: u64,
}

/// The cached datastore → datacenter mapping.
pub(crate) struct Inventory {
    filters: Vec<DatacenterFilter>,
    snapshot: RwLock<Arc<Snapshot>>,
    refresh_gate: tokio::sync::Mutex<()>,
}

impl Inventory {
    /// An empty cache for the datacenters `filters` (names or inventory paths; empty means
    /// all datacenters).
    pub fn new(filters: &[String]) -> Self {
        Self {
            filters: normalize_filters(filters),
            snapshot: RwLock::new(Arc::new(Snapshot::default())),
            refresh_gate: tokio::sync::Mutex::new(()),
        }
    }

    fn current(&self) -> Arc<Snapshot> {
        self.snapshot
            .read()
            .map(|s| Arc::clone(&s))
            .unwrap_or_default()
    }

    /// Reads the inventory now. With `strict`, a configured datacenter that does not exist
    /// is an error (used at start-up); otherwise it is logged.
    pub async fn refresh(&self, client: &SoapClient, strict: bool) -> Result<(), BackendError> {
        let datacenters = fetch_datacenters(client).await?;
        let unmatched = unmatched_filters(&datacenters, &self.filters);
        if !unmatched.is_empty() {
            let known: Vec<&str> = datacenters.iter().map(|dc| dc.path.as_str()).collect();
            let message = format!(
                "datacenter(s) {} not found in {}; known datacenters: {}",
                unmatched.join(", "),
                client.sdk_url(),
                known.join(", ")
            );
            if strict {
                return Err(BackendError::new(
                    ErrorClass::Permanent,
                    OP,
                    names::DATACENTER_NOT_FOUND,
                    message,
                ));
            }
            tracing::warn!("{message}");
        }
        let by_name = index(&datacenters, &self.filters);
        let generation = self.current().generation + 1;
        tracing::debug!(
            datacenters = datacenters.len(),
            datastores = by_name.len(),
            generation,
            "vCenter inventory read"
        );
        if let Ok(mut snapshot) = self.snapshot.write() {
            *snapshot = Arc::new(Snapshot {
                by_name,
                generation,
            });
        }
        Ok(())
    }

    /// Forgets the cache, e.g. after vCenter said a cached reference is gone.
    pub fn invalidate(&self) {
        if let Ok(mut snapshot) = self.snapshot.write() {
            let generation = snapshot.generation + 1;
            *snapshot = Arc::new(Snapshot {
                by_name: HashMap::new(),
                generation,
            });
        }
    }

    /// The location of the datastore named `name`; reads the inventory again (once, shared
    /// by concurrent callers) when the name is not cached.
    pub async fn resolve(
        &self,
        client: &SoapClient,
        name: &str,
        operation: &'static str,
    ) -> Result<DatastoreLocation, BackendError> {
        let seen = self.current();
        if let Some(found) = lookup(&seen, name, operation) {
            return found;
        }
        {
            let _gate = self.refresh_gate.lock().await;
            // Another caller may have refreshed while we waited.
            if self.current().generation == seen.generation {
                self.refresh(client, false).await?;
            }
        }
        lookup(&self.current(), name, operation).unwrap_or_else(|| {
            let scope = if self.filters.is_empty() {
                "any datacenter".to_owned()
            } else {
                let list: Vec<String> = self.filters.iter().map(ToString::to_string).collect();
                format!("datacenter(s) {}", list.join(", "))
            };
            Err(BackendError::new(
                ErrorClass::NotFound,
                operation,
                names::DATASTORE_NOT_FOUND,
                format!(
                    "datastore '{name}' not found in {scope} of {}",
                    client.sdk_url()
                ),
            ))
        })
    }
}

impl Inventory {
    /// Every location of the datastore named `name` in the searched datacenters, in the
    /// order the datacenters were configured (inventory order when none were), so a
    /// registration can try them one after the other. Reads the inventory again when the
    /// name is not cached; a name found nowhere is an error of class
    /// [`ErrorClass::NotFound`].
    pub async fn resolve_all(
        &self,
        client: &SoapClient,
        name: &str,
        operation: &'static str,
    ) -> Result<Vec<DatastoreLocation>, BackendError> {
        let cached = |inventory: &Self| {
            inventory
                .current()
                .by_name
                .get(name)
                .filter(|found| !found.is_empty())
                .map(|found| inventory.in_configured_order(found))
        };
        if let Some(found) = cached(self) {
            return Ok(found);
        }
        match self.resolve(client, name, operation).await {
            Ok(one) => Ok(vec![one]),
            Err(err) if err.fault == names::AMBIGUOUS_DATASTORE => cached(self).ok_or(err),
            Err(err) => Err(err),
        }
    }

    fn in_configured_order(&self, found: &[DatastoreLocation]) -> Vec<DatastoreLocation> {
        let rank = |location: &DatastoreLocation| {
            let dc_name = location
                .datacenter_path
                .rsplit('/')
                .next()
                .unwrap_or(&location.datacenter_path);
            self.filters
                .iter()
                .position(|f| {
                    if f.by_path {
                        location.datacenter_path == f.text
                    } else {
                        dc_name == f.text
                    }
                })
                .unwrap_or(usize::MAX)
        };
        let mut ordered = found.to_vec();
        ordered.sort_by_key(rank);
        ordered
    }
}

fn lookup(
    snapshot: &Snapshot,
    name: &str,
    operation: &'static str,
) -> Option<Result<DatastoreLocation, BackendError>> {
    let found = snapshot.by_name.get(name)?;
    match found.as_slice() {
        [] => None,
        [one] => Some(Ok(one.clone())),
        many => {
            let dcs: Vec<&str> = many.iter().map(|l| l.datacenter_path.as_str()).collect();
            Some(Err(BackendError::new(
                ErrorClass::Permanent,
                operation,
                names::AMBIGUOUS_DATASTORE,
                format!(
                    "datastore '{name}' exists in several datacenters ({}); restrict the search \
                     with --datacenters",
                    dcs.join(", ")
                ),
            )))
        }
    }
}

/// One configured datacenter: an inventory path (when it contains `/`, e.g. `/F0/DC1`)
/// or a bare name (`DC1`, matching that datacenter in any folder).
#[derive(Debug, Clone, PartialEq, Eq)]
struct DatacenterFilter {
    /// The path without leading/trailing `/`, or the name.
    text: String,
    by_path: bool,
}

impl DatacenterFilter {
    fn matches(&self, dc: &Datacenter) -> bool {
        if self.by_path {
            dc.path == self.text
        } else {
            dc.name == self.text
        }
    }
}

impl std::fmt::Display for DatacenterFilter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.by_path {
            write!(f, "/{}", self.text)
        } else {
            f.write_str(&self.text)
        }
    }
}

/// Configured datacenters, blanks dropped.
fn normalize_filters(filters: &[String]) -> Vec<DatacenterFilter> {
    filters
        .iter()
        .map(|raw| DatacenterFilter {
            text: raw.trim().trim_matches('/').to_owned(),
            by_path: raw.contains('/'),
        })
        .filter(|f| !f.text.is_empty())
        .collect()
}

/// The configured datacenters that match no datacenter of the inventory.
fn unmatched_filters(datacenters: &[Datacenter], filters: &[DatacenterFilter]) -> Vec<String> {
    filters
        .iter()
        .filter(|f| !datacenters.iter().any(|dc| f.matches(dc)))
        .map(ToString::to_string)
        .collect()
}

/// The datastores of the selected datacenters (all when `filters` is empty), by name.
fn index(
    datacenters: &[Datacenter],
    filters: &[DatacenterFilter],
) -> HashMap<String, Vec<DatastoreLocation>> {
    let mut by_name: HashMap<String, Vec<DatastoreLocation>> = HashMap::new();
    let selected = |dc: &&Datacenter| filters.is_empty() || filters.iter().any(|f| f.matches(dc));
    for dc in datacenters.iter().filter(selected) {
        for (name, datastore) in &dc.datastores {
            by_name
                .entry(name.clone())
                .or_default()
                .push(DatastoreLocation {
                    datastore: datastore.clone(),
                    datacenter: dc.moref.clone(),
                    datacenter_path: dc.path.clone(),
                });
        }
    }
    by_name
}

fn inventory_spec(root: &MoRef) -> PropertyFilterSpec {
    PropertyFilterSpec {
        prop_set: vec![
            PropertySpec {
                kind: "Folder",
                all: false,
                path_set: vec!["name", "childEntity"],
            },
            PropertySpec {
                kind: "Datacenter",
                all: false,
                path_set: vec!["name", "datastore"],
            },
            PropertySpec {
                kind: "Datastore",
                all: false,
                path_set: vec!["name"],
            },
        ],
        object_set: vec![ObjectSpec {
            obj: root.clone(),
            skip: false,
            select_set: vec![
                TraversalSpec::new(
                    "folders",
                    "Folder",
                    "childEntity",
                    &["folders", "datastores"],
                ),
                TraversalSpec::new("datastores", "Datacenter", "datastore", &[]),
            ],
        }],
    }
}

/// All datacenters below the root folder (inside folders too) with their datastores.
pub(crate) async fn fetch_datacenters(
    client: &SoapClient,
) -> Result<Vec<Datacenter>, BackendError> {
    let content = client.content();
    let collector = &content.property_collector;
    let mut objects = Vec::new();
    let first: Returnval<RetrieveResult<SimpleValue>> = client
        .call(
            Endpoint::Sdk,
            OP,
            "RetrievePropertiesEx",
            &RetrievePropertiesEx {
                this: collector,
                spec_set: inventory_spec(&content.root_folder),
                options: RetrieveOptions { max_objects: None },
            },
        )
        .await?;
    let mut page = first.returnval;
    while let Some(result) = page {
        objects.extend(result.objects);
        page = match result.token {
            Some(token) => {
                let next: Returnval<RetrieveResult<SimpleValue>> = client
                    .call(
                        Endpoint::Sdk,
                        OP,
                        "ContinueRetrievePropertiesEx",
                        &ContinueRetrievePropertiesEx {
                            this: collector,
                            token: &token,
                        },
                    )
                    .await?;
                next.returnval
            }
            None => None,
        };
    }
    Ok(build_tree(&content.root_folder, objects))
}

#[derive(Default)]
struct Props {
    name: Option<String>,
    refs: Vec<MoRef>,
}

/// Walks the folder tree from `root` and collects datacenters with their paths.
fn build_tree(
    root: &MoRef,
    objects: Vec<super::vim::ObjectContent<SimpleValue>>,
) -> Vec<Datacenter> {
    let mut props: HashMap<MoRef, Props> = HashMap::new();
    for object in objects {
        let entry = props.entry(object.obj).or_default();
        for prop in object.prop_set {
            match prop.name.as_str() {
                "name" => entry.name = prop.val.text,
                "childEntity" | "datastore" => entry.refs = prop.val.refs,
                _ => {}
            }
        }
    }
    let name_of = |r: &MoRef| props.get(r).and_then(|p| p.name.clone());
    let mut datacenters = Vec::new();
    let mut visited = HashSet::new();
    let mut stack: Vec<(MoRef, Vec<String>)> = vec![(root.clone(), Vec::new())];
    while let Some((folder, path)) = stack.pop() {
        if !visited.insert(folder.clone()) {
            continue;
        }
        let Some(children) = props.get(&folder).map(|p| p.refs.clone()) else {
            continue;
        };
        for child in children.into_iter().rev() {
            let Some(name) = name_of(&child) else {
                continue;
            };
            let mut child_path = path.clone();
            child_path.push(name.clone());
            match child.kind.as_str() {
                "Folder" => stack.push((child, child_path)),
                "Datacenter" => {
                    let datastores = props
                        .get(&child)
                        .map(|p| p.refs.clone())
                        .unwrap_or_default()
                        .into_iter()
                        .filter_map(|ds| name_of(&ds).map(|n| (n, ds)))
                        .collect();
                    datacenters.push(Datacenter {
                        moref: child,
                        name,
                        path: child_path.join("/"),
                        datastores,
                    });
                }
                _ => {}
            }
        }
    }
    datacenters
}

#[cfg(test)]
#[path = "inventory_tests.rs"]
mod tests;
