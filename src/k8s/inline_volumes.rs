//! Pods that name a vmdk inline (`spec.volumes[].vsphereVolume`, no PV): the CSI driver's
//! syncer registers them on a cache miss like PVs (`podAdded`, docs/design.md §8.8), so
//! volmig counts them as users of their path (docs/design.md §8.9). Each inline volume is
//! one user in the [`crate::controller::PvIndex`], under a key no PV name can take.

use k8s_openapi::api::core::v1::Pod;
use serde::Deserialize;

use crate::k8s::paged::{VsphereVolume, for_each_item_page};

/// The start of every inline-volume user key: `pod/<namespace>/<pod>/<volume>`. PV names
/// are DNS subdomains and never contain `/`, so these keys never meet a PV name.
pub const POD_USER_PREFIX: &str = "pod/";

/// True for the user key of an inline pod volume (false for a PV name).
pub fn is_pod_user(name: &str) -> bool {
    name.starts_with(POD_USER_PREFIX)
}

/// The user key of volume `volume` of pod `namespace/pod`.
pub fn pod_user_key(namespace: &str, pod: &str, volume: &str) -> String {
    format!("{POD_USER_PREFIX}{namespace}/{pod}/{volume}")
}

/// One inline vSphere volume of a pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InlineVolume {
    /// Its user key ([`pod_user_key`]).
    pub key: String,
    /// The raw `volumePath`, as the pod spells it (the driver looks it up verbatim).
    pub raw: String,
}

/// The inline vSphere volumes of `pod` (none for a pod without a name).
pub fn inline_volumes(pod: &Pod) -> Vec<InlineVolume> {
    let (Some(name), Some(spec)) = (pod.metadata.name.as_deref(), pod.spec.as_ref()) else {
        return Vec::new();
    };
    let sources = spec.volumes.iter().flatten().filter_map(|v| {
        let source = v.vsphere_volume.as_ref()?;
        Some((v.name.as_str(), source.volume_path.as_str()))
    });
    collect(pod.metadata.namespace.as_deref(), name, sources)
}

/// The inline volumes of pod `name` in `namespace` (`default` when unset) from its
/// (volume name, raw `volumePath`) pairs.
fn collect<'a>(
    namespace: Option<&str>,
    name: &str,
    sources: impl Iterator<Item = (&'a str, &'a str)>,
) -> Vec<InlineVolume> {
    let namespace = namespace.unwrap_or("default");
    sources
        .map(|(volume, raw)| InlineVolume {
            key: pod_user_key(namespace, name, volume),
            raw: raw.to_owned(),
        })
        .collect()
}

/// Creation time of `pod` in seconds since the epoch (0 when unknown).
pub fn pod_created(pod: &Pod) -> i64 {
    pod.metadata
        .creation_timestamp
        .as_ref()
        .map_or(0, |t| t.0.as_second())
}

/// A pod as far as its inline vSphere volumes go, for paged lists (full sync): names and
/// paths only, not the rest of a pod (docs/design.md §6).
#[derive(Debug, Default, Deserialize)]
pub struct PodVolumes {
    /// Name and namespace.
    #[serde(default)]
    pub metadata: PodMeta,
    /// The volumes.
    #[serde(default)]
    pub spec: Option<PodVolumesSpec>,
}

/// `metadata` of a listed pod.
#[derive(Debug, Default, Deserialize)]
pub struct PodMeta {
    /// `metadata.name`.
    #[serde(default)]
    pub name: Option<String>,
    /// `metadata.namespace`.
    #[serde(default)]
    pub namespace: Option<String>,
}

/// `spec` of a listed pod: only its volumes.
#[derive(Debug, Default, Deserialize)]
pub struct PodVolumesSpec {
    /// `spec.volumes`.
    #[serde(default)]
    pub volumes: Vec<ListedVolume>,
}

/// One entry of `spec.volumes`.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListedVolume {
    /// The volume's name in the pod.
    #[serde(default)]
    pub name: String,
    /// Set for an inline vSphere volume.
    #[serde(default)]
    pub vsphere_volume: Option<VsphereVolume>,
}

impl PodVolumes {
    /// The inline vSphere volumes of the listed pod.
    pub fn into_inline(self) -> Vec<InlineVolume> {
        let (Some(name), Some(spec)) = (self.metadata.name.as_deref(), &self.spec) else {
            return Vec::new();
        };
        let sources = spec.volumes.iter().filter_map(|v| {
            let source = v.vsphere_volume.as_ref()?;
            Some((v.name.as_str(), source.volume_path.as_str()))
        });
        collect(self.metadata.namespace.as_deref(), name, sources)
    }
}

/// Lists every pod page by page (`page_size` pods, only their names and volumes decoded)
/// and hands each inline vSphere volume to `each`.
pub async fn for_each_inline_volume(
    client: &kube::Client,
    page_size: u32,
    mut each: impl FnMut(InlineVolume),
) -> kube::Result<()> {
    let url = <Pod as kube::Resource>::url_path(&(), None);
    for_each_item_page(client, &url, page_size, |pods: Vec<PodVolumes>| {
        pods.into_iter()
            .flat_map(PodVolumes::into_inline)
            .for_each(&mut each);
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod() -> serde_json::Value {
        serde_json::json!({
            "metadata": {"name": "web-0", "namespace": "shop"},
            "spec": {
                "containers": [{"name": "c", "image": "i"}],
                "volumes": [
                    {"name": "data", "vsphereVolume": {"volumePath": "[ds] k/a.vmdk", "fsType": "ext4"}},
                    {"name": "cfg", "configMap": {"name": "x"}},
                    {"name": "logs", "vsphereVolume": {"volumePath": "[/DC/datastore/ds] k//b.vmdk"}}
                ]
            }
        })
    }

    #[test]
    fn only_vsphere_volumes_become_users_with_their_raw_spelling() {
        let typed: Pod = serde_json::from_value(pod()).unwrap();
        let listed: PodVolumes = serde_json::from_value(pod()).unwrap();
        let want = vec![
            InlineVolume {
                key: "pod/shop/web-0/data".into(),
                raw: "[ds] k/a.vmdk".into(),
            },
            InlineVolume {
                key: "pod/shop/web-0/logs".into(),
                raw: "[/DC/datastore/ds] k//b.vmdk".into(),
            },
        ];
        assert_eq!(inline_volumes(&typed), want);
        assert_eq!(listed.into_inline(), want, "the paged decode agrees");
    }

    #[test]
    fn pod_keys_never_look_like_pv_names() {
        assert!(is_pod_user(&pod_user_key("ns", "p", "v")));
        assert!(!is_pod_user("pvc-0123"));
        assert!(!is_pod_user("pod-a"), "a PV may be named pod-a");
    }

    #[test]
    fn a_pod_without_volumes_or_name_has_none() {
        let bare: Pod =
            serde_json::from_value(serde_json::json!({"metadata": {"name": "p"}})).unwrap();
        assert!(inline_volumes(&bare).is_empty());
        let nameless: PodVolumes = serde_json::from_value(serde_json::json!({"spec": {"volumes": [
            {"name": "d", "vsphereVolume": {"volumePath": "[ds] a.vmdk"}}]}}))
        .unwrap();
        assert!(nameless.into_inline().is_empty());
    }
}
