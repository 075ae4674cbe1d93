//! volmig registers every in-tree vSphere vmdk as a CNS volume exactly once and publishes
//! the vmdk → volume-ID mapping in the status of a `VolumeMigration` custom resource.
//!
//! The crate is organised by concept: [`volume_path`] (the in-tree path and the names
//! derived from it), [`api`] (the custom resource), [`backend`] (vCenter behind one trait),
//! and [`registrar`] (the one place that registers).

pub mod api;
pub mod backend;
pub mod cli;
pub mod credentials;
pub mod daemon;
pub mod events;
pub mod full_sync;
pub mod http;
pub mod leader;
pub mod lookup;
pub mod metrics;
pub mod migrations;
pub mod pv_index;
pub mod pv_watcher;
pub mod reconcile;
pub mod registrar;
pub mod report;
pub mod status;
pub mod vcenter_config;
pub mod volume_path;

pub use volume_path::{PathError, VolumePath};
