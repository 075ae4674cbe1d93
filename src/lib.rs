//! volmig registers every in-tree vSphere vmdk as a CNS volume exactly once and publishes
//! the vmdk → volume-ID mapping in the status of a `VolumeMigration` custom resource.
//!
//! The crate is layered by role (docs/design.md is the contract):
//! - domain: [`volume_path`] (the in-tree path and the names derived from it),
//!   [`path_intern`] (one shared copy of each path), [`compact_text`] (identifiers in 16
//!   bytes), [`volume_migration`] (the custom resource);
//! - [`registrar`]: the one place that registers, behind two seams — [`backend`] (vCenter)
//!   and [`registrar::StatusStore`] (where the mapping is recorded);
//! - [`controller`]: PV watcher and index, reconciler, full sync;
//! - [`k8s`]: Kubernetes adapters (the one status writer, VolumeMigration objects, Events,
//!   clients);
//! - [`syncer_lease`]: who registers now, volmig or the CSI driver's syncer (follow/own);
//! - infrastructure: [`leader`] (Lease election), [`http`] and [`metrics`], [`requeue`],
//!   [`credentials`];
//! - entry points: [`cli`], [`daemon`] (`volmig run`), [`lookup`].

pub mod backend;
pub mod check;
pub mod cli;
pub mod compact_text;
pub mod controller;
pub mod credentials;
pub mod daemon;
pub mod http;
pub mod k8s;
pub mod leader;
pub mod lookup;
pub mod metrics;
pub mod path_intern;
pub mod registrar;
pub mod report;
pub mod requeue;
pub mod syncer_lease;
pub mod vcenter_config;
pub mod volume_migration;
pub mod volume_path;

pub use volume_path::{PathError, VolumePath};

/// An error and its causes on one line (`outer: cause: root cause`), for logs and status
/// messages: each error's own message names only what it adds.
pub fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.ends_with(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    #[derive(Debug, thiserror::Error)]
    #[error("outer on object x")]
    struct Outer(#[source] std::io::Error);

    #[test]
    fn error_chain_prints_each_cause_once() {
        let e = Outer(std::io::Error::other("disk on fire"));
        assert_eq!(super::error_chain(&e), "outer on object x: disk on fire");
    }
}
