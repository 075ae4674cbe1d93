//! `kube-testserver --listen 127.0.0.1:PORT [--kubeconfig-out FILE]`: serves until SIGTERM or
//! SIGINT, after printing `{"url": ..., "kubeconfig": ...}` on one line.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use kube_testserver::{Options, TestServer};

/// An in-memory Kubernetes API server for tests and demos (loopback only by default).
#[derive(Debug, Parser)]
#[command(name = "kube-testserver", version)]
struct Cli {
    /// Address to listen on; port 0 picks a free port.
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// Allow listening on a non-loopback address.
    #[arg(long)]
    allow_non_loopback: bool,
    /// Write a kubeconfig for the server to this file.
    #[arg(long)]
    kubeconfig_out: Option<PathBuf>,
    /// Watch events kept for re-watching from older resourceVersions.
    #[arg(long, default_value_t = 20_000)]
    watch_history: usize,
    /// Seed of random choices (UIDs, generated names, injected faults).
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Seconds between BOOKMARK events on idle watches that asked for them.
    #[arg(long, default_value_t = 5)]
    bookmark_interval_seconds: u64,
    /// Kubernetes version to report (MAJOR.MINOR); the kubectl dispatcher picks its client by it.
    #[arg(long, default_value = "1.33", value_parser = parse_version)]
    kube_version: (u32, u32),
    /// Treat requests without credentials as `system:anonymous` (like a real server)
    /// instead of the admin (kubectl and helm send no token over plain HTTP).
    #[arg(long)]
    anonymous_is_anonymous: bool,
}

fn parse_version(s: &str) -> Result<(u32, u32), String> {
    let (a, b) = s
        .split_once('.')
        .ok_or_else(|| format!("expected MAJOR.MINOR, got {s:?}"))?;
    let num = |x: &str| x.parse::<u32>().map_err(|e| format!("{s:?}: {e}"));
    Ok((num(a)?, num(b)?))
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let cli = Cli::parse();
    let opts = Options {
        listen: cli.listen,
        allow_non_loopback: cli.allow_non_loopback,
        watch_history: cli.watch_history,
        seed: cli.seed,
        bookmark_interval: Duration::from_secs(cli.bookmark_interval_seconds.max(1)),
        kube_version: cli.kube_version,
        anonymous_is_admin: !cli.anonymous_is_anonymous,
    };
    let server = TestServer::start(opts).await?;
    if let Some(path) = &cli.kubeconfig_out {
        server
            .write_kubeconfig(path)
            .with_context(|| format!("writing the kubeconfig to {}", path.display()))?;
    }
    let line = serde_json::json!({
        "url": server.url(),
        "kubeconfig": cli.kubeconfig_out.as_ref().map(|p| p.display().to_string()),
    });
    println!("{line}");
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("installing the SIGTERM handler")?;
    tokio::select! {
        _ = term.recv() => {}
        r = tokio::signal::ctrl_c() => r.context("waiting for SIGINT")?,
    }
    tracing::info!("shutting down");
    server.shutdown();
    Ok(())
}
