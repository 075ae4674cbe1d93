//! Paged lists that decode only the fields their reader needs: a PV from a real API
//! server carries `managedFields`, annotations, capacity and status that volmig never
//! reads, and decoding 100,000 of them into full `PersistentVolume`s costs more than the
//! rest of a full-sync pass (docs/design.md §6). Unknown fields are skipped without allocating.

use kube::api::ListParams;
use kube::core::Request;
use serde::Deserialize;
use serde::de::DeserializeOwned;

/// One page of a list.
#[derive(Debug, Deserialize)]
pub struct Page<T> {
    /// The page's objects.
    pub items: Vec<T>,
    /// The list's metadata (only `continue` is read).
    #[serde(default)]
    pub metadata: PageMeta,
}

/// `metadata` of a list page.
#[derive(Debug, Default, Deserialize)]
pub struct PageMeta {
    /// The token of the next page (absent or empty on the last page).
    #[serde(default, rename = "continue")]
    pub continue_: Option<String>,
}

/// `metadata` of an item: only the name (not labels, annotations, managedFields, ...).
#[derive(Debug, Default, Deserialize)]
pub struct ItemMeta {
    /// `metadata.name`.
    #[serde(default)]
    pub name: Option<String>,
}

/// A PersistentVolume as far as its in-tree vSphere path goes.
#[derive(Debug, Deserialize)]
pub struct PvPath {
    /// Its metadata (the name).
    #[serde(default)]
    pub metadata: ItemMeta,
    /// Its spec (the vSphere volume source).
    #[serde(default)]
    pub spec: Option<PvSpec>,
}

impl PvPath {
    /// The name and raw `volumePath` of an in-tree vSphere PV; `None` for other PVs.
    pub fn into_in_tree(self) -> Option<(String, String)> {
        let volume = self.spec?.vsphere_volume?;
        Some((self.metadata.name?, volume.volume_path))
    }
}

/// The part of a PV spec volmig reads.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PvSpec {
    /// `spec.vsphereVolume`: set on in-tree vSphere PVs.
    #[serde(default)]
    pub vsphere_volume: Option<VsphereVolume>,
}

/// `spec.vsphereVolume` of a PV.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VsphereVolume {
    /// The raw `volumePath`.
    #[serde(default)]
    pub volume_path: String,
}

/// Lists the collection at `url_path` page by page (`page_size` items, `continue` tokens)
/// and hands every page's items to `each`: one page in memory at a time.
pub async fn for_each_item_page<T, F>(
    client: &kube::Client,
    url_path: &str,
    page_size: u32,
    mut each: F,
) -> kube::Result<()>
where
    T: DeserializeOwned,
    F: FnMut(Vec<T>),
{
    let request = Request::new(url_path);
    let mut params = ListParams::default().limit(page_size);
    loop {
        let http = request.list(&params).map_err(kube::Error::BuildRequest)?;
        let page: Page<T> = client.request(http).await?;
        each(page.items);
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_names_and_the_vsphere_path_are_decoded() {
        let page: Page<PvPath> = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "PersistentVolumeList",
            "metadata": {"resourceVersion": "7", "continue": "abc"},
            "items": [
                {"metadata": {"name": "pv-1", "managedFields": [{"manager": "x"}]},
                 "spec": {"capacity": {"storage": "1Gi"},
                          "vsphereVolume": {"volumePath": "[ds] a.vmdk", "fsType": "ext4"}},
                 "status": {"phase": "Bound"}},
                {"metadata": {"name": "pv-2"}, "spec": {"nfs": {"server": "s", "path": "/p"}}},
                {"metadata": {}, "spec": {"vsphereVolume": {"volumePath": "[ds] b.vmdk"}}}
            ]
        }))
        .unwrap();
        assert_eq!(page.metadata.continue_.as_deref(), Some("abc"));
        let items: Vec<_> = page.items.into_iter().map(PvPath::into_in_tree).collect();
        assert_eq!(
            items,
            vec![
                Some(("pv-1".to_owned(), "[ds] a.vmdk".to_owned())),
                None,
                None
            ]
        );
    }

    #[test]
    fn a_last_page_has_no_token() {
        let page: Page<PvPath> = serde_json::from_value(serde_json::json!({"items": []})).unwrap();
        assert!(page.metadata.continue_.is_none());
        assert!(page.items.is_empty());
    }
}
