//! Kubernetes adapters: the one status writer ([`status`]), VolumeMigration objects
//! ([`migrations`]), Events ([`events`]) and clients ([`client`]).

pub mod client;
pub mod events;
pub mod migrations;
pub mod status;
