//! `--csi-config-secret`: the vSphere CSI driver's `csi-vsphere.conf` read from its own
//! Secret through the Kubernetes API instead of a mounted file, and watched, so a rotated
//! password is used at the next vCenter login without a restart (docs/design.md §8.5).
//! The chart grants `get, list, watch` on that one Secret only (a namespaced Role with
//! `resourceNames`). The Secret's content is never logged.

use std::sync::{Arc, PoisonError, RwLock};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::watch_object;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

/// The driver's own Secret, used when the flag is given without a value.
pub const DEFAULT_SECRET: &str = "vmware-system-csi/vsphere-config-secret";

/// The key of the Secret that holds the configuration (as the driver mounts it).
pub const KEY: &str = "csi-vsphere.conf";

/// `NAMESPACE/NAME` of a Secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretRef {
    /// The namespace.
    pub namespace: String,
    /// The Secret's name.
    pub name: String,
}

impl std::fmt::Display for SecretRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// Parses `NAMESPACE/NAME` (the value of `--csi-config-secret`).
pub fn parse_ref(value: &str) -> Result<SecretRef, String> {
    match value.split_once('/') {
        Some((namespace, name))
            if !namespace.is_empty() && !name.is_empty() && !name.contains('/') =>
        {
            Ok(SecretRef {
                namespace: namespace.to_owned(),
                name: name.to_owned(),
            })
        }
        _ => Err(format!(
            "expected NAMESPACE/NAME of a Secret (e.g. {DEFAULT_SECRET}), got {value:?}"
        )),
    }
}

/// The latest `csi-vsphere.conf` of the Secret, shared by the watcher (which writes it)
/// and the credentials source (which reads it at each login). Its `Debug` shows the
/// Secret's name only.
#[derive(Clone)]
pub struct SecretConf {
    secret: SecretRef,
    text: Arc<RwLock<Option<String>>>,
}

impl std::fmt::Debug for SecretConf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SecretConf({})", self.secret)
    }
}

impl PartialEq for SecretConf {
    fn eq(&self, other: &Self) -> bool {
        self.secret == other.secret && Arc::ptr_eq(&self.text, &other.text)
    }
}

impl Eq for SecretConf {}

impl SecretConf {
    /// A store for `secret` holding `text` (for tests and the first read).
    pub fn new(secret: SecretRef, text: Option<String>) -> Self {
        Self {
            secret,
            text: Arc::new(RwLock::new(text)),
        }
    }

    /// Which Secret.
    pub fn secret(&self) -> &SecretRef {
        &self.secret
    }

    /// The configuration as last seen, if the Secret had the key.
    pub fn text(&self) -> Option<String> {
        self.text
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Replaces the configuration (the watcher, on every change of the Secret).
    pub fn set(&self, text: Option<String>) {
        *self.text.write().unwrap_or_else(PoisonError::into_inner) = text;
    }

    /// For messages: `Secret NAMESPACE/NAME key csi-vsphere.conf`.
    pub fn describe(&self) -> String {
        format!("Secret {} key {KEY}", self.secret)
    }
}

/// The configuration of a Secret object, if it has the key and it is UTF-8.
pub fn conf_of(secret: &Secret) -> Option<String> {
    let bytes = secret.data.as_ref()?.get(KEY)?;
    String::from_utf8(bytes.0.clone()).ok()
}

/// Reads `secret` once: its `csi-vsphere.conf` as a store (an error if it cannot be read or
/// lacks the key). `volmig check` and `--dry-run --once` read it so; the daemon watches it
/// ([`start`]).
pub async fn read(client: &kube::Client, secret: &SecretRef) -> anyhow::Result<SecretConf> {
    let api: Api<Secret> = Api::namespaced(client.clone(), &secret.namespace);
    let object = api
        .get(&secret.name)
        .await
        .map_err(|e| anyhow::anyhow!("cannot read --csi-config-secret {secret}: {e}"))?;
    let text = conf_of(&object)
        .ok_or_else(|| anyhow::anyhow!("--csi-config-secret {secret} has no key {KEY}"))?;
    Ok(SecretConf::new(secret.clone(), Some(text)))
}

/// Reads the Secret once ([`read`]: a start-up error if it cannot be read or lacks the
/// key) and keeps the returned store current with a watch of that one Secret, until
/// `shutdown`.
pub async fn start(
    client: &kube::Client,
    secret: &SecretRef,
    shutdown: CancellationToken,
) -> anyhow::Result<SecretConf> {
    let conf = read(client, secret).await?;
    let api: Api<Secret> = Api::namespaced(client.clone(), &secret.namespace);
    let store = conf.clone();
    let name = secret.name.clone();
    tokio::spawn(async move {
        let mut events = std::pin::pin!(watch_object(api, &name).default_backoff());
        loop {
            let event = tokio::select! {
                () = shutdown.cancelled() => return,
                event = events.next() => event,
            };
            match event {
                None => return,
                Some(Ok(Some(s))) => {
                    let next = conf_of(&s);
                    if next.is_none() {
                        warn!(secret = %store.secret(), "CSI config Secret has no key {KEY}");
                    } else if next != store.text() {
                        info!(secret = %store.secret(), "CSI config Secret changed; used at the next vCenter login");
                    }
                    store.set(next);
                }
                Some(Ok(None)) => {
                    warn!(secret = %store.secret(), "CSI config Secret deleted; vCenter logins will fail until it is back");
                    store.set(None);
                }
                Some(Err(e)) => {
                    warn!(secret = %store.secret(), error = %e, "watching the CSI config Secret")
                }
            }
        }
    });
    Ok(conf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_are_namespace_slash_name() {
        let r = parse_ref(DEFAULT_SECRET).unwrap();
        assert_eq!(r.namespace, "vmware-system-csi");
        assert_eq!(r.name, "vsphere-config-secret");
        assert_eq!(r.to_string(), DEFAULT_SECRET);
        for bad in ["", "name", "/name", "ns/", "a/b/c"] {
            assert!(parse_ref(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_store_never_shows_its_content() {
        let conf = SecretConf::new(
            parse_ref("ns/s").unwrap(),
            Some("password = hunter2".into()),
        );
        assert!(!format!("{conf:?}").contains("hunter2"));
        assert_eq!(conf.text().as_deref(), Some("password = hunter2"));
        conf.clone().set(None);
        assert_eq!(conf.text(), None, "clones share the content");
    }
}
