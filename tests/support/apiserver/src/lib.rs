//! `kube-testserver`: an in-memory Kubernetes API server for tests and demos, faithful to the
//! API semantics operators and `kubectl` rely on (discovery, OpenAPI v3, CRUD with
//! resourceVersions and conflicts, patches and server-side apply, selectors, pagination,
//! watches with a bounded history and 410 Gone, finalizers, CRD schema validation, Tables),
//! plus fault injection and exact request counters for tests.
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! let server = kube_testserver::TestServer::start(kube_testserver::Options::default()).await?;
//! server.write_kubeconfig(std::path::Path::new("/tmp/kubeconfig"))?;
//! server.faults().drop_watches();
//! println!("{} writes so far", server.stats().writes);
//! # Ok(()) }
//! ```

mod admin;
pub mod admission;
pub mod auth;
pub mod convert;
pub mod discovery;
pub mod error;
pub mod faults;
pub mod http;
pub mod kubeconfig;
pub mod managed;
pub mod meta;
pub mod openapi;
pub mod openapi_v2;
pub mod ops;
pub mod patch;
pub mod protobuf;
pub mod registry;
pub mod schema;
pub mod selectors;
mod server;
pub mod stats;
pub mod store;
pub mod tables;
mod watch;

pub use auth::UserInfo;
pub use faults::{FailureRates, FaultConfig, Faults};
pub use server::{Options, Tally, TestServer};
pub use stats::{ForbiddenCount, RequestCount, Stats, Verb};
