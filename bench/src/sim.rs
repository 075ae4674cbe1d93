//! The vCenter simulator (`tests/support/vcsim/`, built by `make vcsim`) as a child process,
//! with the two admin calls the benchmark needs: SOAP call counters and their reset.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, bail};
use serde::Deserialize;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};

/// How to start the simulator.
#[derive(Debug, Clone, Default)]
pub struct SimOptions {
    /// vmdk files `disk-0001.vmdk`.. created in folder `kubevols` of `LocalDS_0`.
    pub vmdks: usize,
    /// Delay of every `CnsCreateVolume` in milliseconds (0 = none).
    pub create_delay_ms: u64,
}

/// SOAP call counters of the simulator (`GET /debug/stats`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SimStats {
    /// Calls per SOAP method.
    #[serde(default)]
    pub calls: BTreeMap<String, u64>,
    /// Most calls of a method in progress at once.
    #[serde(default)]
    pub max_in_flight: BTreeMap<String, u64>,
}

#[derive(Debug, Deserialize)]
struct StartLine {
    url: String,
    cert: String,
    admin: String,
    datastores: Vec<StartDatastore>,
}

#[derive(Debug, Deserialize)]
struct StartDatastore {
    name: String,
}

/// A running simulator; killed when dropped.
pub struct Sim {
    /// SDK URL (`https://127.0.0.1:PORT/sdk`).
    pub url: String,
    /// The CA certificate to trust.
    pub ca_file: PathBuf,
    /// Name of the datastore holding the vmdks.
    pub datastore: String,
    /// Login user name.
    pub username: String,
    /// Login password.
    pub password: String,
    admin: String,
    http: reqwest::Client,
    child: Child,
    _stdin: Option<ChildStdin>,
    _dir: tempfile::TempDir,
}

impl Sim {
    /// Starts the harness binary `bin` and waits for its start line.
    pub async fn start(bin: &Path, opts: &SimOptions) -> anyhow::Result<Sim> {
        let dir = tempfile::Builder::new()
            .prefix("volmig-bench-vcsim-")
            .tempdir()
            .context("creating the simulator's temp dir")?;
        let log = std::fs::File::create(dir.path().join("harness.log"))
            .context("creating the simulator log")?;
        let mut cmd = Command::new(bin);
        cmd.arg("-exit-on-stdin-eof")
            .arg(format!("-vmdks={}", opts.vmdks))
            .arg("-folders=kubevols")
            .arg(format!(
                "-datastore-dir={}",
                dir.path().join("ds").display()
            ))
            .arg(format!("-cert-out={}", dir.path().join("ca.pem").display()));
        if opts.create_delay_ms > 0 {
            cmd.arg(format!("-delay=CnsCreateVolume={}", opts.create_delay_ms));
        }
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting the simulator {}", bin.display()))?;
        let stdout = child.stdout.take().context("simulator stdout")?;
        let mut line = String::new();
        let mut reader = BufReader::new(stdout);
        let read = reader.read_line(&mut line);
        match tokio::time::timeout(Duration::from_secs(300), read).await {
            Ok(Ok(n)) if n > 0 => {}
            other => {
                let log =
                    std::fs::read_to_string(dir.path().join("harness.log")).unwrap_or_default();
                bail!("the simulator did not start ({other:?}); its log:\n{log}");
            }
        }
        let start: StartLine = serde_json::from_str(&line)
            .with_context(|| format!("parsing the simulator start line {line:?}"))?;
        let ca_file = PathBuf::from(&start.cert);
        let http = https_client(&ca_file)?;
        Ok(Sim {
            url: start.url,
            ca_file,
            datastore: start
                .datastores
                .first()
                .map(|d| d.name.clone())
                .context("the simulator reported no datastore")?,
            username: "user".into(),
            password: "pass".into(),
            admin: start.admin,
            http,
            _stdin: child.stdin.take(),
            child,
            _dir: dir,
        })
    }

    /// The SOAP call counters.
    pub async fn stats(&self) -> anyhow::Result<SimStats> {
        let resp = self
            .http
            .get(format!("{}/stats", self.admin))
            .send()
            .await
            .context("GET simulator stats")?;
        let text = resp.text().await.context("reading simulator stats")?;
        serde_json::from_str(&text).with_context(|| format!("parsing simulator stats {text:?}"))
    }

    /// Clears the SOAP call counters.
    pub async fn reset_stats(&self) -> anyhow::Result<()> {
        let resp = self
            .http
            .post(format!("{}/stats/reset", self.admin))
            .send()
            .await
            .context("POST simulator stats/reset")?;
        if resp.status().as_u16() != 204 {
            bail!("simulator stats/reset answered {}", resp.status());
        }
        Ok(())
    }

    /// The simulator's process ID (`None` once it exited).
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// Stops the simulator.
    pub async fn stop(mut self) {
        let _ = self.child.kill().await;
    }
}

/// A reqwest client trusting only the CA in `ca_file`.
fn https_client(ca_file: &Path) -> anyhow::Result<reqwest::Client> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;

    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca_file)
        .with_context(|| format!("reading {}", ca_file.display()))?
    {
        roots
            .add(cert.with_context(|| format!("parsing {}", ca_file.display()))?)
            .with_context(|| format!("trusting {}", ca_file.display()))?;
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .context("TLS protocol versions")?
    .with_root_certificates(roots)
    .with_no_client_auth();
    reqwest::Client::builder()
        .tls_backend_preconfigured(config)
        .timeout(Duration::from_secs(60))
        .build()
        .context("building the admin HTTP client")
}
