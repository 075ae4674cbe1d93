//! Leader election as the daemon uses it: the Lease campaign (or a single-replica stand-in),
//! the gate every backend call passes, the leader metric, and the "became leader" signal.

use std::sync::Arc;

use anyhow::Context as _;
use futures::stream;
use tokio::sync::watch;
use tracing::{Instrument, info, info_span};

use crate::cli::RunArgs;
use crate::leader::{LeaderConfig, Leadership};
use crate::metrics::Metrics;
use crate::registrar::LeaderGate;

/// This replica's leadership, as the rest of the daemon needs it.
pub struct Leader {
    /// The campaign (released at shutdown).
    pub leadership: Leadership,
    /// Gate of every backend call: the watch value and the Lease deadline.
    pub gate: LeaderGate,
    /// True while this replica leads.
    pub watch: watch::Receiver<bool>,
}

/// Starts leader election (or always leads with `--leader-election=false`).
pub async fn start(
    args: &RunArgs,
    client: &kube::Client,
    holder_id: &str,
    metrics: &Metrics,
) -> anyhow::Result<Leader> {
    let leadership = if args.leader_election {
        Leadership::start(
            client.clone(),
            LeaderConfig {
                namespace: args.lease_namespace.clone(),
                lease_name: args.lease_name.clone(),
                holder_id: holder_id.to_owned(),
                lease_duration: args.lease_duration,
            },
        )
        .await
        .context("starting leader election")?
    } else {
        Leadership::always_leader()
    };
    let watch = leadership.watch();
    spawn_leader_metric(watch.clone(), metrics.clone());
    let handle = leadership.handle();
    let gate = LeaderGate::new(watch.clone()).with_check(Arc::new(move || handle.is_leader()));
    Ok(Leader {
        leadership,
        gate,
        watch,
    })
}

fn spawn_leader_metric(mut leader: watch::Receiver<bool>, metrics: Metrics) {
    tokio::spawn(
        async move {
            loop {
                let is_leader = *leader.borrow_and_update();
                metrics.set_leader(is_leader);
                info!(leader = is_leader, "leadership");
                if leader.changed().await.is_err() {
                    return;
                }
            }
        }
        .instrument(info_span!("leader_metric")),
    );
}

/// A stream that yields once each time `leader` turns true (including at start).
pub fn gained(leader: watch::Receiver<bool>) -> impl futures::Stream<Item = ()> + Send {
    stream::unfold((leader, false), |(mut rx, mut was)| async move {
        loop {
            let now = *rx.borrow_and_update();
            if now && !was {
                return Some(((), (rx, true)));
            }
            was = now;
            rx.changed().await.ok()?;
        }
    })
}
