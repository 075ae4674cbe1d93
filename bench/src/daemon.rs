//! The real `volmig run` as a child process: start, `/readyz`, `/metrics`, CPU and memory
//! from `/proc`, SIGTERM.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, Command};

use crate::procfs::{CpuSnapshot, Memory};

/// Where `volmig run` finds vCenter.
pub enum VCenter<'a> {
    /// The simulator.
    Sim(&'a crate::sim::Sim),
    /// An address nobody listens on: every vCenter call fails with "connection refused",
    /// so the daemon only does its Kubernetes work.
    Unreachable,
}

/// A running `volmig run`.
pub struct Daemon {
    child: Child,
    /// Its PID.
    pub pid: u32,
    /// Address of `/metrics` and `/readyz`.
    pub http: String,
    /// When the process was started.
    pub started: Instant,
    log: PathBuf,
}

/// A free loopback port (bound, then released).
pub fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .context("finding a free port")?
        .port())
}

impl Daemon {
    /// Starts `bin run` against `kubeconfig` and `vcenter` with `flags` (`--flag value`
    /// pairs) added to the fixed ones; logs go to `dir/NAME.log`.
    pub fn spawn(
        bin: &Path,
        dir: &Path,
        name: &str,
        kubeconfig: &Path,
        vcenter: VCenter<'_>,
        flags: &[(&str, String)],
    ) -> anyhow::Result<Daemon> {
        let credentials = dir.join(format!("{name}.credentials"));
        let (url, ca, user, password) = match vcenter {
            VCenter::Sim(sim) => (
                sim.url.clone(),
                Some(sim.ca_file.clone()),
                sim.username.clone(),
                sim.password.clone(),
            ),
            VCenter::Unreachable => (
                format!("https://127.0.0.1:{}/sdk", free_port()?),
                None,
                "user".into(),
                "pass".into(),
            ),
        };
        std::fs::write(
            &credentials,
            format!("username: {user}\npassword: {password}\n"),
        )
        .context("writing the vCenter credentials file")?;
        let http = format!("127.0.0.1:{}", free_port()?);
        let log = dir.join(format!("{name}.log"));
        let log_file =
            std::fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let mut cmd = Command::new(bin);
        cmd.arg("run")
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .arg("--vc-url")
            .arg(&url)
            .arg("--vc-credentials-file")
            .arg(&credentials)
            .args(["--cluster-id", "bench-cluster"])
            .args(["--http-addr", &http])
            // The kubelet's probes have no part in a benchmark: any free port.
            .args(["--probe-addr", "127.0.0.1:0"])
            .args(["--lease-holder-id", name]);
        if let Some(ca) = ca {
            cmd.arg("--vc-ca-file").arg(ca);
        }
        for (flag, value) in flags {
            cmd.arg(flag).arg(value);
        }
        let started = Instant::now();
        let child = cmd
            .env("VOLMIG_LOG", "info,kube_runtime=warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log_file)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let pid = child.id().context("volmig exited at once")?;
        Ok(Daemon {
            child,
            pid,
            http,
            started,
            log,
        })
    }

    /// GET `path` of the daemon's HTTP endpoint: (status, body).
    pub async fn get(&self, path: &str) -> Option<(u16, String)> {
        let mut stream = tokio::net::TcpStream::connect(&self.http).await.ok()?;
        let request = format!("GET {path} HTTP/1.0\r\nHost: {}\r\n\r\n", self.http);
        stream.write_all(request.as_bytes()).await.ok()?;
        let mut response = String::new();
        stream.read_to_string(&mut response).await.ok()?;
        let (head, body) = response.split_once("\r\n\r\n")?;
        let status = head.split_whitespace().nth(1)?.parse().ok()?;
        Some((status, body.to_owned()))
    }

    /// Polls `/readyz` every `every` until 200; returns the time since process start.
    pub async fn wait_ready(
        &mut self,
        every: Duration,
        limit: Duration,
    ) -> anyhow::Result<Duration> {
        loop {
            if let Some((200, _)) = self.get("/readyz").await {
                return Ok(self.started.elapsed());
            }
            self.check_alive()?;
            if self.started.elapsed() > limit {
                bail!("volmig not ready after {limit:?}; {}", self.log_tail());
            }
            tokio::time::sleep(every).await;
        }
    }

    /// Fails with the log tail when the process has exited.
    pub fn check_alive(&mut self) -> anyhow::Result<()> {
        if let Ok(Some(status)) = self.child.try_wait() {
            bail!("volmig exited ({status}); {}", self.log_tail());
        }
        Ok(())
    }

    /// The sum of every sample of metric family `name` whose labels contain `labels`
    /// (e.g. `result="ok"`); `None` when `/metrics` cannot be read.
    pub async fn metric(&self, name: &str, labels: &str) -> Option<f64> {
        let (_, body) = self.get("/metrics").await?;
        Some(metric_sum(&body, name, labels))
    }

    /// Waits until `metric(name, labels) >= target`, polling every `every`.
    pub async fn wait_metric(
        &mut self,
        name: &str,
        labels: &str,
        target: f64,
        every: Duration,
        limit: Duration,
    ) -> anyhow::Result<f64> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(v) = self.metric(name, labels).await
                && v >= target
            {
                return Ok(v);
            }
            self.check_alive()?;
            if Instant::now() > deadline {
                bail!(
                    "{name}{{{labels}}} did not reach {target} within {limit:?}; {}",
                    self.log_tail()
                );
            }
            tokio::time::sleep(every).await;
        }
    }

    /// CPU time of every thread now.
    pub fn cpu(&self) -> anyhow::Result<CpuSnapshot> {
        CpuSnapshot::read(self.pid).context("reading the daemon's CPU time")
    }

    /// Resident memory now.
    pub fn memory(&self) -> anyhow::Result<Memory> {
        crate::procfs::memory(self.pid).context("reading the daemon's memory")
    }

    /// Waits until the daemon used less than `max_share` of one core over a whole
    /// `window` (at most `limit`); returns how long that took.
    pub async fn wait_quiet(
        &mut self,
        window: Duration,
        max_share: f64,
        limit: Duration,
    ) -> anyhow::Result<Duration> {
        let started = Instant::now();
        let mut before = self.cpu()?;
        loop {
            tokio::time::sleep(window).await;
            self.check_alive()?;
            let now = self.cpu()?;
            let share = before.total_until(&now) as f64 / window.as_nanos() as f64;
            if share <= max_share || started.elapsed() > limit {
                return Ok(started.elapsed());
            }
            before = now;
        }
    }

    /// SIGTERM, then wait (SIGKILL after `grace`).
    pub async fn stop(mut self, grace: Duration) {
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &self.pid.to_string()])
            .status();
        if tokio::time::timeout(grace, self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.kill().await;
        }
    }

    /// The last lines of the daemon's log, for error messages.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().rev().take(30).collect();
        let tail: Vec<&str> = lines.into_iter().rev().collect();
        format!("last lines of {}:\n{}", self.log.display(), tail.join("\n"))
    }
}

/// Sums the samples of `name` (exact family name, no suffix) whose label text contains
/// `labels` in a Prometheus text exposition.
pub fn metric_sum(body: &str, name: &str, labels: &str) -> f64 {
    body.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let rest = l.strip_prefix(name)?;
            let (label_text, value) = match rest.strip_prefix('{') {
                Some(r) => {
                    let (inside, after) = r.split_once('}')?;
                    (inside, after)
                }
                None if rest.starts_with(' ') => ("", rest),
                None => return None,
            };
            if !label_text.contains(labels) {
                return None;
            }
            value.split_whitespace().next()?.parse::<f64>().ok()
        })
        .sum()
}

/// The samples of `name` keyed by the value of label `label` (samples without it are
/// skipped), e.g. `volmig_backend_requests_total` by `operation`.
pub fn metric_by_label(body: &str, name: &str, label: &str) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    let key = format!("{label}=\"");
    for line in body.lines().filter(|l| !l.starts_with('#')) {
        let Some(rest) = line.strip_prefix(name).and_then(|r| r.strip_prefix('{')) else {
            continue;
        };
        let Some((labels, value)) = rest.split_once('}') else {
            continue;
        };
        let Some(start) = labels.find(&key) else {
            continue;
        };
        let after = &labels[start + key.len()..];
        let Some((label_value, _)) = after.split_once('"') else {
            continue;
        };
        if let Some(v) = value
            .split_whitespace()
            .next()
            .and_then(|v| v.parse::<f64>().ok())
        {
            *out.entry(label_value.to_owned()).or_default() += v;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{metric_by_label, metric_sum};

    #[test]
    fn sums_matching_samples_only() {
        let body = "# TYPE x counter\nx_total{result=\"ok\"} 3\nx_total{result=\"error\"} 2\n\
                    x_total_more{result=\"ok\"} 100\ny 7\n";
        assert_eq!(metric_sum(body, "x_total", "result=\"ok\""), 3.0);
        assert_eq!(metric_sum(body, "x_total", ""), 5.0);
        assert_eq!(metric_sum(body, "y", ""), 7.0);
        assert_eq!(metric_sum(body, "z", ""), 0.0);
        let by = metric_by_label(body, "x_total", "result");
        assert_eq!(by.get("ok"), Some(&3.0));
        assert_eq!(by.get("error"), Some(&2.0));
        assert_eq!(by.len(), 2);
    }
}
