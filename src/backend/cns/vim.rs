//! The vim25 (`/sdk`) request and response types volmig uses, for quick-xml serde.
//! Field order follows the WSDL: vCenter validates element order.

use serde::{Deserialize, Serialize};

use super::soap::{LocalizedMethodFault, MoRef};

/// `RetrieveServiceContent` on the `ServiceInstance`.
#[derive(Serialize)]
pub(crate) struct RetrieveServiceContent {
    #[serde(rename = "_this")]
    pub this: MoRef,
}

/// The parts of `ServiceContent` volmig needs.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct ServiceContent {
    #[serde(rename = "rootFolder")]
    pub root_folder: MoRef,
    #[serde(rename = "propertyCollector")]
    pub property_collector: MoRef,
    pub about: AboutInfo,
    #[serde(rename = "sessionManager")]
    pub session_manager: Option<MoRef>,
    #[serde(rename = "virtualDiskManager")]
    pub virtual_disk_manager: Option<MoRef>,
    /// `VcenterVStorageObjectManager` (FCDs), for `RegisterDisk`.
    #[serde(rename = "vStorageObjectManager")]
    pub vstorage_object_manager: Option<MoRef>,
}

/// `AboutInfo`: product and API version.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct AboutInfo {
    #[serde(rename = "fullName", default)]
    pub full_name: String,
    /// Product version, e.g. `8.0.3`.
    #[serde(default)]
    pub version: String,
    /// Build number, e.g. `17137327` (6.7 Update 3l).
    #[serde(default)]
    pub build: String,
    #[serde(rename = "apiVersion", default)]
    pub api_version: String,
    #[serde(rename = "apiType", default)]
    pub api_type: String,
}

/// `SessionManager.Login`.
#[derive(Serialize)]
pub(crate) struct Login<'a> {
    #[serde(rename = "_this")]
    pub this: &'a MoRef,
    #[serde(rename = "userName")]
    pub user_name: &'a str,
    pub password: &'a str,
}

/// `UserSession`, the result of `Login`.
#[derive(Debug, Deserialize)]
pub(crate) struct UserSession {
    #[serde(rename = "userName", default)]
    pub user_name: String,
}

/// `SessionManager.Logout`.
#[derive(Serialize)]
pub(crate) struct Logout<'a> {
    #[serde(rename = "_this")]
    pub this: &'a MoRef,
}

/// `VirtualDiskManager.QueryVirtualDiskUuid`.
#[derive(Serialize)]
pub(crate) struct QueryVirtualDiskUuid<'a> {
    #[serde(rename = "_this")]
    pub this: &'a MoRef,
    pub name: &'a str,
    pub datacenter: &'a MoRef,
}

/// `VcenterVStorageObjectManager.RegisterDisk`: makes an existing vmdk a First Class Disk.
#[derive(Serialize)]
pub(crate) struct RegisterDisk<'a> {
    #[serde(rename = "_this")]
    pub this: &'a MoRef,
    /// The vmdk's datastore URL (`https://host/folder/…?dcPath=…&dsName=…`).
    pub path: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<&'a str>,
}

/// `ID` of vim25 (and VSLM): `<id><id>…</id></id>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct IdXml {
    pub id: String,
}

/// `VStorageObject`, the parts volmig reads.
#[derive(Debug, Deserialize)]
pub(crate) struct VStorageObject {
    pub config: VStorageObjectConfigInfo,
}

/// `VStorageObjectConfigInfo` (a `BaseConfigInfo`), the parts volmig reads.
#[derive(Debug, Deserialize)]
pub(crate) struct VStorageObjectConfigInfo {
    pub id: IdXml,
    /// Set when the FCD survives the deletion of a VM it is attached to.
    #[serde(rename = "keepAfterDeleteVm")]
    pub keep_after_delete_vm: Option<bool>,
    /// When the FCD was created (`xsd:dateTime`).
    #[serde(rename = "createTime")]
    pub create_time: Option<String>,
}

/// `PropertyCollector.RetrievePropertiesEx`.
#[derive(Serialize)]
pub(crate) struct RetrievePropertiesEx<'a> {
    #[serde(rename = "_this")]
    pub this: &'a MoRef,
    #[serde(rename = "specSet")]
    pub spec_set: PropertyFilterSpec,
    pub options: RetrieveOptions,
}

/// `PropertyCollector.ContinueRetrievePropertiesEx`.
#[derive(Serialize)]
pub(crate) struct ContinueRetrievePropertiesEx<'a> {
    #[serde(rename = "_this")]
    pub this: &'a MoRef,
    pub token: &'a str,
}

/// `PropertyFilterSpec`.
#[derive(Serialize)]
pub(crate) struct PropertyFilterSpec {
    #[serde(rename = "propSet")]
    pub prop_set: Vec<PropertySpec>,
    #[serde(rename = "objectSet")]
    pub object_set: Vec<ObjectSpec>,
}

/// `PropertySpec`: which properties of one type to return.
#[derive(Serialize)]
pub(crate) struct PropertySpec {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub all: bool,
    #[serde(rename = "pathSet")]
    pub path_set: Vec<&'static str>,
}

/// `ObjectSpec`: where the traversal starts.
#[derive(Serialize)]
pub(crate) struct ObjectSpec {
    pub obj: MoRef,
    pub skip: bool,
    #[serde(rename = "selectSet", skip_serializing_if = "Vec::is_empty")]
    pub select_set: Vec<TraversalSpec>,
}

/// `TraversalSpec` (always written with its `xsi:type`).
#[derive(Serialize)]
pub(crate) struct TraversalSpec {
    #[serde(rename = "@xsi:type")]
    pub xsi_type: &'static str,
    pub name: &'static str,
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub path: &'static str,
    pub skip: bool,
    #[serde(rename = "selectSet", skip_serializing_if = "Vec::is_empty")]
    pub select_set: Vec<SelectionSpec>,
}

impl TraversalSpec {
    /// A traversal named `name` from objects of `kind` along the property `path`, then on
    /// to the named selection specs.
    pub fn new(
        name: &'static str,
        kind: &'static str,
        path: &'static str,
        then: &[&'static str],
    ) -> Self {
        Self {
            xsi_type: "TraversalSpec",
            name,
            kind,
            path,
            skip: false,
            select_set: then.iter().map(|name| SelectionSpec { name }).collect(),
        }
    }
}

/// `SelectionSpec`: a reference to a named traversal.
#[derive(Serialize)]
pub(crate) struct SelectionSpec {
    pub name: &'static str,
}

/// `RetrieveOptions`.
#[derive(Serialize)]
pub(crate) struct RetrieveOptions {
    #[serde(rename = "maxObjects", skip_serializing_if = "Option::is_none")]
    pub max_objects: Option<u32>,
}

/// `RetrieveResult`, generic over the property value type.
#[derive(Debug, Deserialize)]
pub(crate) struct RetrieveResult<V> {
    pub token: Option<String>,
    #[serde(default = "Vec::new")]
    pub objects: Vec<ObjectContent<V>>,
}

/// `ObjectContent`: one object and the requested properties.
#[derive(Debug, Deserialize)]
pub(crate) struct ObjectContent<V> {
    pub obj: MoRef,
    #[serde(rename = "propSet", default = "Vec::new")]
    pub prop_set: Vec<DynamicProperty<V>>,
}

/// `DynamicProperty`: one property value.
#[derive(Debug, Deserialize)]
pub(crate) struct DynamicProperty<V> {
    pub name: String,
    pub val: V,
}

/// A property value that is a string or an array of references (inventory properties).
#[derive(Debug, Default, Deserialize)]
pub(crate) struct SimpleValue {
    #[serde(rename = "$text", default)]
    pub text: Option<String>,
    #[serde(rename = "ManagedObjectReference", default)]
    pub refs: Vec<MoRef>,
}

/// `TaskInfo`, the parts volmig reads; `R` is the type of `result`.
#[derive(Debug, Deserialize)]
pub(crate) struct TaskInfo<R> {
    #[serde(default)]
    pub state: String,
    pub error: Option<LocalizedMethodFault>,
    pub result: Option<R>,
}
