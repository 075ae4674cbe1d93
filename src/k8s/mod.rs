//! Kubernetes adapters: the one status writer ([`status`]), VolumeMigration objects
//! ([`migrations`]), the CSI driver's cache objects ([`driver_cache`]), Events
//! ([`events`]), pods' inline vSphere volumes ([`inline_volumes`]) and clients
//! ([`client`], with the request [`deadline`]); every failed call
//! is classified by [`error_class::classify`].

pub mod client;
pub mod deadline;
pub mod driver_cache;
pub mod error_class;
pub mod events;
pub mod inline_volumes;
pub mod migrations;
pub mod paged;
pub mod status;
