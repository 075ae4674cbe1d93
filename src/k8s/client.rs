//! Kubernetes clients: from `--kubeconfig`, else in-cluster / `KUBECONFIG` /
//! `~/.kube/config`, with a User-Agent that names the replica.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;

use super::deadline::DeadlineLayer;
use crate::backend::cns::DEFAULT_USER_AGENT;

/// Where to find the Kubernetes API and how long a request may take; the command line
/// builds it from `--kubeconfig` and `--kube-request-timeout` (`cli::KubeArgs`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubeConnection {
    /// A kubeconfig file; `None`: in-cluster, else `KUBECONFIG`, else `~/.kube/config`.
    pub kubeconfig: Option<PathBuf>,
    /// How long a request other than a watch may take, reply body included.
    pub request_timeout: Duration,
}

/// The User-Agent of every request a replica makes (Kubernetes and vCenter), naming its
/// lease holder ID so audit logs can tell replicas apart.
pub fn user_agent(holder_id: &str) -> String {
    format!("{DEFAULT_USER_AGENT} ({holder_id})")
}

/// Builds a client from `--kubeconfig`, else in-cluster / `KUBECONFIG` / `~/.kube/config`,
/// whose requests other than watches fail after `--kube-request-timeout`.
pub async fn kube_client(kube: impl Into<KubeConnection>) -> anyhow::Result<kube::Client> {
    kube_client_as(kube, DEFAULT_USER_AGENT).await
}

/// [`kube_client`] with a given User-Agent.
pub async fn kube_client_as(
    kube: impl Into<KubeConnection>,
    agent: &str,
) -> anyhow::Result<kube::Client> {
    let kube: KubeConnection = kube.into();
    let mut config = match kube.kubeconfig.as_deref() {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("reading kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kc, &Default::default())
                .await
                .with_context(|| format!("using kubeconfig {}", path.display()))?
        }
        None => kube::Config::infer().await.context(
            "finding a Kubernetes configuration (in-cluster, KUBECONFIG, ~/.kube/config)",
        )?,
    };
    let agent = ::http::HeaderValue::from_str(agent).context("User-Agent header")?;
    config.headers.push((::http::header::USER_AGENT, agent));
    let builder =
        kube::client::ClientBuilder::try_from(config).context("creating the Kubernetes client")?;
    Ok(builder
        .with_layer(&DeadlineLayer::new(kube.request_timeout))
        .build())
}

/// Lists every object of `api` page by page (`page_size` items, `continue` tokens) and
/// hands each page's items to `each`: one page in memory at a time.
pub async fn for_each_page<K, F>(api: &kube::Api<K>, page_size: u32, each: F) -> kube::Result<()>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    F: FnMut(Vec<K>),
{
    let client = api.clone().into_client();
    super::paged::for_each_item_page(&client, api.resource_url(), page_size, each).await
}
