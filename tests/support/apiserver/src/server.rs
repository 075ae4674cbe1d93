//! Starting and stopping the server: a dedicated thread with its own tokio runtime, so a
//! test may block (e.g. on a `kubectl` subprocess) without starving the server.

use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{Context, bail};
use serde_json::json;
use tokio::sync::{oneshot, watch};

use crate::faults::{FaultState, Faults};
use crate::kubeconfig;
use crate::stats::{Counters, Stats};
use crate::store::Store;

/// Start-up options.
#[derive(Debug, Clone)]
pub struct Options {
    /// Address to listen on (port 0 = a free port). Loopback only unless allowed.
    pub listen: SocketAddr,
    /// Allow a non-loopback listen address.
    pub allow_non_loopback: bool,
    /// Watch events kept for re-watching from an older resourceVersion.
    pub watch_history: usize,
    /// Seed of every random choice (UIDs, generated names, injected faults).
    pub seed: u64,
    /// Interval of BOOKMARK events on idle watches that asked for them.
    pub bookmark_interval: Duration,
    /// Kubernetes version reported by `/version` (major, minor).
    pub kube_version: (u32, u32),
    /// Whether a request without credentials acts as the admin (the default: client-go,
    /// hence kubectl and helm, never sends a token over plain HTTP, so the written admin
    /// kubeconfig reaches the server without one) or as `system:anonymous` in group
    /// `system:unauthenticated`, like a real server.
    pub anonymous_is_admin: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            allow_non_loopback: false,
            watch_history: 20_000,
            seed: 0,
            bookmark_interval: Duration::from_secs(5),
            kube_version: (1, 33),
            anonymous_is_admin: true,
        }
    }
}

/// State shared by every request handler.
#[derive(Debug)]
pub struct Shared {
    pub(crate) store: Mutex<Store>,
    pub(crate) rv_rx: watch::Receiver<u64>,
    pub(crate) drops: watch::Sender<u64>,
    pub(crate) faults: Mutex<FaultState>,
    pub(crate) counters: Mutex<Counters>,
    pub(crate) tokens: Mutex<crate::auth::Tokens>,
    pub(crate) open_watches: std::sync::atomic::AtomicUsize,
    pub(crate) opts: Options,
    pub(crate) addr: SocketAddr,
}

impl Shared {
    pub(crate) fn store(&self) -> MutexGuard<'_, Store> {
        self.store.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn counters(&self) -> MutexGuard<'_, Counters> {
        self.counters.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The token registry. Lock order: the store first, then the tokens.
    pub(crate) fn tokens(&self) -> MutexGuard<'_, crate::auth::Tokens> {
        self.tokens.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn drop_watches(&self) -> usize {
        let open = self.open_watches.load(std::sync::atomic::Ordering::SeqCst);
        self.drops.send_modify(|g| *g += 1);
        open
    }

    pub(crate) fn compact(&self) -> u64 {
        self.store().compact()
    }
}

fn seed_namespaces(store: &mut Store) {
    let sk = crate::registry::StorageKey {
        group: String::new(),
        resource: "namespaces".into(),
    };
    for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
        let uid = store.new_uid();
        let obj = json!({
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": ns, "uid": uid, "creationTimestamp": crate::meta::now_rfc3339(),
                         "labels": {"kubernetes.io/metadata.name": ns}},
            "spec": {"finalizers": ["kubernetes"]},
            "status": {"phase": "Active"},
        });
        store.put(&sk, obj);
    }
}

/// A running server. Dropping it shuts it down.
pub struct TestServer {
    shared: Arc<Shared>,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for TestServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestServer")
            .field("url", &self.url())
            .finish()
    }
}

/// What [`TestServer::count_where`] found.
#[derive(Debug, Clone, Copy)]
pub struct Tally {
    /// Objects the predicate held for.
    pub matching: usize,
    /// When an object of the resource was last stored or removed (None: never).
    pub last_change: Option<std::time::Instant>,
}

impl TestServer {
    /// Starts a server on its own thread and runtime.
    pub async fn start(opts: Options) -> anyhow::Result<TestServer> {
        if !opts.listen.ip().is_loopback() && !opts.allow_non_loopback {
            bail!(
                "refusing to listen on non-loopback address {} (pass --allow-non-loopback to override)",
                opts.listen
            );
        }
        let listener =
            TcpListener::bind(opts.listen).with_context(|| format!("binding {}", opts.listen))?;
        listener
            .set_nonblocking(true)
            .context("setting the listener non-blocking")?;
        let addr = listener.local_addr().context("reading the bound address")?;
        let (rv_tx, rv_rx) = watch::channel(0u64);
        let (drops, _) = watch::channel(0u64);
        let mut store = Store::new(opts.watch_history, opts.seed, rv_tx);
        seed_namespaces(&mut store);
        let shared = Arc::new(Shared {
            store: Mutex::new(store),
            rv_rx,
            drops,
            faults: Mutex::new(FaultState::new(opts.seed)),
            counters: Mutex::new(Counters::default()),
            tokens: Mutex::new(crate::auth::Tokens::default()),
            open_watches: std::sync::atomic::AtomicUsize::new(0),
            opts,
            addr,
        });
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("kube-testserver")
            .enable_all()
            .build()
            .context("building the server runtime")?;
        let (stop, stopped) = oneshot::channel::<()>();
        let app = crate::http::router(shared.clone());
        let thread = std::thread::Builder::new()
            .name("kube-testserver".into())
            .spawn(move || {
                runtime.block_on(async move {
                    let listener = match tokio::net::TcpListener::from_std(listener) {
                        Ok(l) => l,
                        Err(e) => {
                            tracing::error!(error = %e, "cannot use the listener");
                            return;
                        }
                    };
                    let (began, begun) = oneshot::channel::<()>();
                    let served = axum::serve(listener, app).with_graceful_shutdown(async move {
                        let _ = stopped.await;
                        let _ = began.send(());
                    });
                    // Graceful shutdown waits for open connections; give them a moment only.
                    let deadline = async move {
                        let _ = begun.await;
                        tokio::time::sleep(Duration::from_secs(2)).await;
                    };
                    tokio::select! {
                        r = served.into_future() => {
                            if let Err(e) = r {
                                tracing::error!(error = %e, "server failed");
                            }
                        }
                        () = deadline => {}
                    }
                });
                runtime.shutdown_timeout(Duration::from_secs(2));
            })
            .context("spawning the server thread")?;
        tracing::info!(%addr, "kube-testserver listening");
        Ok(TestServer {
            shared,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.shared.addr)
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.shared.addr
    }

    /// A kubeconfig (YAML) for this server.
    pub fn kubeconfig_yaml(&self) -> String {
        kubeconfig::render(&self.url())
    }

    /// A kubeconfig (YAML) for this server that authenticates with `token`.
    pub fn kubeconfig_yaml_with_token(&self, token: &str) -> String {
        kubeconfig::render_with_token(&self.url(), token)
    }

    /// Mints a token for the existing ServiceAccount `namespace/name`, valid for `seconds`
    /// (like a TokenRequest; fails when the ServiceAccount does not exist).
    pub fn create_token(
        &self,
        namespace: &str,
        name: &str,
        seconds: i64,
    ) -> anyhow::Result<String> {
        let store = self.shared.store();
        let mut tokens = self.shared.tokens();
        tokens
            .mint(&store, namespace, name, seconds, Vec::new())
            .map(|m| m.token)
            .map_err(|e| anyhow::anyhow!("minting a token for {namespace}/{name}: {e}"))
    }

    /// Accepts `token` as `user` from now on (for tests of User and Group subjects).
    pub fn add_token(&self, token: &str, user: crate::auth::UserInfo) {
        self.shared.tokens().add_static(token, user);
    }

    /// Writes the kubeconfig to `path`.
    pub fn write_kubeconfig(&self, path: &Path) -> std::io::Result<()> {
        std::fs::write(path, self.kubeconfig_yaml())
    }

    /// The fault-injection handle.
    pub fn faults(&self) -> Faults {
        Faults {
            shared: self.shared.clone(),
        }
    }

    /// A snapshot of the request counters.
    pub fn stats(&self) -> Stats {
        self.shared.counters().snapshot()
    }

    /// Resets the request counters.
    pub fn reset_stats(&self) {
        self.shared.counters().reset();
    }

    /// Number of watches currently streaming.
    pub fn open_watches(&self) -> usize {
        self.shared
            .open_watches
            .load(std::sync::atomic::Ordering::SeqCst)
    }

    /// How many stored objects of `group`/`resource` (every namespace) `matches` holds
    /// for, and when an object of the resource last changed, both as of one moment, in
    /// process without a request: for a benchmark that must not load the system it
    /// measures to learn that it is done, nor stop its clock at the look instead of at
    /// the write that finished the work. The store lock is held only to take the objects
    /// (shared, not copied); `matches` runs after it is released, so requests are not
    /// held up while it looks at thousands of objects.
    pub fn count_where(
        &self,
        group: &str,
        resource: &str,
        matches: impl Fn(&serde_json::Value) -> bool,
    ) -> Tally {
        let key = crate::registry::StorageKey {
            group: group.to_owned(),
            resource: resource.to_owned(),
        };
        let (objects, last_change) = {
            let store = self.shared.store();
            let objects: Vec<Arc<serde_json::Value>> = store
                .range(&key, None, None)
                .map(|(_, object)| Arc::clone(object))
                .collect();
            (objects, store.changed_at(&key))
        };
        Tally {
            matching: objects.iter().filter(|object| matches(object)).count(),
            last_change,
        }
    }

    /// The current resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.shared.store().rv()
    }

    /// Stops the server and waits for its thread.
    pub fn shutdown(mut self) {
        self.stop_now();
    }

    fn stop_now(&mut self) {
        self.shared.drop_watches();
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.stop_now();
    }
}
