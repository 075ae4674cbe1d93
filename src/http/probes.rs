//! The kubelet's probe listener on `--probe-addr`: `GET /healthz` and `GET /readyz` only.
//!
//! It is apart from `/metrics` so that no client of `--http-addr` can stand between the
//! kubelet and an answer: there, [`super::MAX_CONNECTIONS`] connections held by anyone
//! make the next ones wait, and a liveness probe that waits longer than its timeout
//! restarts the container (a leadership hand-over).
//!
//! Anything on the pod network reaches this port too (unless the chart's NetworkPolicy is
//! on: it admits no pod here, only the node's kubelet), so its bounds are made for
//! probes. The kubelet opens a fresh connection per probe and sends its request at once:
//! a connection carries one request and is then closed, gets
//! [`PROBE_HEADER_READ_TIMEOUT`] to send it and lives [`PROBE_CONNECTION_AGE`] at most.
//! One client address holds at most [`PROBE_MAX_CONNECTIONS_PER_PEER`] connections and
//! all together at most [`PROBE_MAX_CONNECTIONS`]; a connection over either cap is closed
//! at once instead of waiting, so no queue of other clients' connections ever forms in
//! front of a probe. The request-level bounds are those of `/metrics` (body, head size,
//! handler time).

use std::collections::HashMap;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use tokio::net::TcpListener;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

use super::{ConnectionLimits, Health, accept, bind, bounded, healthz, readyz, serve_connection};

/// Most connections open at once on the probe listener; more are closed as they arrive.
/// The kubelet needs two or three (liveness, readiness, startup); the rest bounds what
/// other clients can hold (file descriptors, tasks).
pub const PROBE_MAX_CONNECTIONS: u32 = 256;

/// Most connections one client address holds open at once on the probe listener; more
/// from that address are closed as they arrive. Well above the kubelet's two or three
/// probes in flight, far below [`PROBE_MAX_CONNECTIONS`]: one hostile pod cannot fill it.
pub const PROBE_MAX_CONNECTIONS_PER_PEER: u32 = 8;

/// Time a probe connection gets to send its request head, counted from its opening. The
/// kubelet sends its request in one packet right after connecting.
pub const PROBE_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(2);

/// Longest a probe connection stays open: then it is closed gracefully, and dropped
/// [`PROBE_CLOSE_GRACE`] later.
pub const PROBE_CONNECTION_AGE: Duration = Duration::from_secs(4);

/// Time a probe connection gets to finish its request after a graceful close.
const PROBE_CLOSE_GRACE: Duration = Duration::from_secs(1);

/// The per-connection bounds of the probe listener.
const PROBE_LIMITS: ConnectionLimits = ConnectionLimits {
    header_read_timeout: PROBE_HEADER_READ_TIMEOUT,
    max_age: PROBE_CONNECTION_AGE,
    close_grace: PROBE_CLOSE_GRACE,
    keep_alive: false,
};

/// The probe routes (`/healthz`, `/readyz`), with the body limit and the request timeout.
pub fn probe_router(health: Health) -> Router {
    bounded(
        Router::new()
            .route("/healthz", get(healthz))
            .route("/readyz", get(readyz))
            .with_state(health),
    )
}

/// Binds `addr` and serves the probe routes until `shutdown` completes. Returns the bound
/// address (useful with port 0) and the server task, which ends after `shutdown` once open
/// connections have finished. A bind failure names the address.
pub async fn serve_probes(
    addr: SocketAddr,
    health: Health,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let (listener, bound) = bind(addr, "probe server").await?;
    let task = tokio::spawn(serve_probe_routes(listener, probe_router(health), shutdown));
    tracing::info!(address = %bound, "serving the probes /healthz and /readyz");
    Ok((bound, task))
}

/// The accept loop of the probe listener: accepts every connection at once and serves it
/// when both caps allow, else closes it. After `shutdown`, stops accepting, closes the
/// open connections gracefully and returns once all are gone.
async fn serve_probe_routes(
    listener: TcpListener,
    app: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    let open = Arc::new(Semaphore::new(PROBE_MAX_CONNECTIONS as usize));
    let peers = Peers::default();
    let closing = CancellationToken::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            () = &mut shutdown => break,
            accepted = accept(&listener) => match accepted {
                Some(accepted) => accepted,
                None => continue,
            },
        };
        let Some(slot) = take_slot(&open, &peers, peer.ip()) else {
            tracing::debug!(peer = %peer, "probe listener: connection over a cap, closed");
            drop(stream);
            continue;
        };
        tokio::spawn(serve_connection(
            stream,
            app.clone(),
            closing.clone(),
            PROBE_LIMITS,
            slot,
        ));
    }
    drop(listener);
    closing.cancel();
    // Every open connection holds a permit until it is gone.
    let _all_closed = open.acquire_many(PROBE_MAX_CONNECTIONS).await;
}

/// A place under both caps for a connection from `ip`, held until dropped; `None` when
/// either cap is reached.
fn take_slot(
    open: &Arc<Semaphore>,
    peers: &Peers,
    ip: IpAddr,
) -> Option<(OwnedSemaphorePermit, PeerSlot)> {
    let permit = Arc::clone(open).try_acquire_owned().ok()?;
    let peer = peers.take(ip)?;
    Some((permit, peer))
}

/// Open connections per client address (an IPv4-mapped IPv6 address counts as its IPv4
/// address). Holds only addresses with open connections, so at most
/// [`PROBE_MAX_CONNECTIONS`] entries.
#[derive(Debug, Clone, Default)]
struct Peers(Arc<Mutex<HashMap<IpAddr, u32>>>);

impl Peers {
    /// One more connection for `ip`, unless it has [`PROBE_MAX_CONNECTIONS_PER_PEER`].
    fn take(&self, ip: IpAddr) -> Option<PeerSlot> {
        let ip = ip.to_canonical();
        let mut open = self.lock();
        let count = open.entry(ip).or_insert(0);
        if *count >= PROBE_MAX_CONNECTIONS_PER_PEER {
            return None;
        }
        *count += 1;
        Some(PeerSlot {
            peers: self.clone(),
            ip,
        })
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<IpAddr, u32>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// One open connection of a client address; dropping it frees its place.
#[derive(Debug)]
struct PeerSlot {
    peers: Peers,
    ip: IpAddr,
}

impl Drop for PeerSlot {
    fn drop(&mut self) {
        let mut open = self.peers.lock();
        if let Some(count) = open.get_mut(&self.ip) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                open.remove(&self.ip);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peer_gets_its_cap_and_its_places_back() {
        let peers = Peers::default();
        let a: IpAddr = "10.0.0.1".parse().expect("address");
        let mapped: IpAddr = "::ffff:10.0.0.1".parse().expect("address");
        let b: IpAddr = "10.0.0.2".parse().expect("address");
        let mut held: Vec<PeerSlot> = (0..PROBE_MAX_CONNECTIONS_PER_PEER)
            .map(|_| peers.take(a).expect("under the cap"))
            .collect();
        assert!(peers.take(a).is_none(), "over the cap");
        assert!(peers.take(mapped).is_none(), "the same peer over IPv6");
        let other = peers.take(b).expect("another peer has its own cap");
        held.pop();
        let again = peers.take(mapped).expect("a freed place is taken again");
        drop((held, again, other));
        assert!(peers.lock().is_empty(), "no entry without open connections");
    }

    #[test]
    fn the_total_cap_holds_whatever_the_peers() {
        let open = Arc::new(Semaphore::new(PROBE_MAX_CONNECTIONS as usize));
        let peers = Peers::default();
        let held: Vec<_> = (0..PROBE_MAX_CONNECTIONS)
            .map(|i| {
                let ip = IpAddr::from(std::net::Ipv4Addr::from(0x0a00_0000 + i));
                take_slot(&open, &peers, ip).expect("under the total cap")
            })
            .collect();
        let fresh: IpAddr = "192.0.2.1".parse().expect("address");
        assert!(
            take_slot(&open, &peers, fresh).is_none(),
            "over the total cap"
        );
        drop(held);
        assert!(take_slot(&open, &peers, fresh).is_some());
    }
}
