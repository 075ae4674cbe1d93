//! Virtual storage lifecycle management (VSLM, `/vslm/sdk`): the `keepAfterDeleteVm`
//! control flag of a First Class Disk. A CNS block volume ID is its FCD ID. Also kept here:
//! which volumes this backend's own registration just protected (vCenter 8.0.3+).
//!
//! The VSLM service content (`RetrieveContent` on the `VslmServiceInstance`) names the
//! `VslmVStorageObjectManager`; calls carry the vim25 session as cookie and as the
//! `vcSessionCookie` SOAP header, which is what vCenter's VSLM service reads.

use std::collections::VecDeque;
use std::sync::{Mutex, PoisonError};

use serde::{Deserialize, Serialize};

use crate::backend::{BackendError, VolumeId};

use super::session::SoapClient;
use super::soap::{MoRef, Returnval};
use super::transport::Endpoint;
use super::vim::{IdXml, VStorageObject};

/// The control flag that keeps an FCD when a VM it is attached to is deleted.
pub(crate) const KEEP_AFTER_DELETE_VM: &str = "keepAfterDeleteVm";

/// How many of its own new registrations a backend remembers as protected by their create
/// until asked to protect them (the registrar asks right after the create; a volume
/// forgotten is registered again by its ID instead, which is idempotent).
const REMEMBERED_REGISTRATIONS: usize = 1024;

/// `RetrieveContent` on the `VslmServiceInstance`.
#[derive(Serialize)]
pub(crate) struct RetrieveContent {
    #[serde(rename = "_this")]
    pub this: MoRef,
}

/// `VslmServiceInstanceContent`, the part volmig reads.
#[derive(Debug, Deserialize)]
pub(crate) struct VslmServiceInstanceContent {
    #[serde(rename = "vStorageObjectManager")]
    pub vstorage_object_manager: MoRef,
}

/// `VslmVStorageObjectManager.VslmSetVStorageObjectControlFlags`.
#[derive(Serialize)]
pub(crate) struct VslmSetVStorageObjectControlFlags<'a> {
    #[serde(rename = "_this")]
    pub this: &'a MoRef,
    pub id: IdXml,
    #[serde(rename = "controlFlags")]
    pub control_flags: Vec<&'static str>,
}

/// `VslmVStorageObjectManager.VslmRetrieveVStorageObject`.
#[derive(Serialize)]
pub(crate) struct VslmRetrieveVStorageObject<'a> {
    #[serde(rename = "_this")]
    pub this: &'a MoRef,
    pub id: IdXml,
}

/// The VSLM object manager, read once, and the volumes this backend's own registration
/// protected.
#[derive(Default)]
pub(crate) struct Vslm {
    manager: tokio::sync::OnceCell<MoRef>,
    /// Volumes this backend created on vCenter 8.0.3+ (whose create set
    /// `keepAfterDeleteVm`) and has not been asked to protect yet, oldest first.
    registered: Mutex<VecDeque<VolumeId>>,
}

impl Vslm {
    /// Notes that this backend's own `CnsCreateVolume` just created `id` on vCenter 8.0.3+,
    /// which sets `keepAfterDeleteVm` on the new FCD.
    pub fn note_registered(&self, id: &VolumeId) {
        let mut registered = self
            .registered
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if registered.len() >= REMEMBERED_REGISTRATIONS {
            registered.pop_front();
        }
        registered.push_back(id.clone());
    }

    /// True, once, for a volume noted by [`Self::note_registered`].
    pub fn take_registered(&self, id: &VolumeId) -> bool {
        let mut registered = self
            .registered
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let found = registered.iter().position(|noted| noted == id);
        found.and_then(|n| registered.remove(n)).is_some()
    }

    async fn manager(
        &self,
        client: &SoapClient,
        operation: &'static str,
    ) -> Result<&MoRef, BackendError> {
        self.manager
            .get_or_try_init(|| async {
                let request = RetrieveContent {
                    this: MoRef::new("VslmServiceInstance", "ServiceInstance"),
                };
                let response: Returnval<VslmServiceInstanceContent> = client
                    .call(Endpoint::Vslm, operation, "RetrieveContent", &request)
                    .await?;
                response
                    .returnval
                    .map(|content| content.vstorage_object_manager)
                    .ok_or_else(|| {
                        super::fault::malformed(
                            operation,
                            client.sdk_url().as_str(),
                            "VSLM service content without a vStorageObjectManager",
                        )
                    })
            })
            .await
    }

    /// Sets `keepAfterDeleteVm` on the FCD `id`.
    pub async fn keep_after_delete_vm(
        &self,
        client: &SoapClient,
        operation: &'static str,
        id: &VolumeId,
    ) -> Result<(), BackendError> {
        let manager = self.manager(client, operation).await?;
        let request = VslmSetVStorageObjectControlFlags {
            this: manager,
            id: IdXml { id: id.0.clone() },
            control_flags: vec![KEEP_AFTER_DELETE_VM],
        };
        let _: Returnval<String> = client
            .call(
                Endpoint::Vslm,
                operation,
                "VslmSetVStorageObjectControlFlags",
                &request,
            )
            .await?;
        Ok(())
    }

    /// Sets `keepAfterDeleteVm` on the FCD `id`, then reads it back: whether it is set now
    /// (a server may answer the set and not keep it).
    pub async fn keep_and_verify(
        &self,
        client: &SoapClient,
        operation: &'static str,
        id: &VolumeId,
    ) -> Result<bool, BackendError> {
        self.keep_after_delete_vm(client, operation, id).await?;
        self.keeps_after_delete_vm(client, operation, id).await
    }

    /// Whether the FCD `id` carries `keepAfterDeleteVm`.
    pub async fn keeps_after_delete_vm(
        &self,
        client: &SoapClient,
        operation: &'static str,
        id: &VolumeId,
    ) -> Result<bool, BackendError> {
        let object = self.retrieve(client, operation, id).await?;
        Ok(object.config.keep_after_delete_vm.unwrap_or(false))
    }

    /// When the FCD `id` was created; `None` when the server does not say. A time that
    /// does not parse is a malformed response.
    pub async fn create_time(
        &self,
        client: &SoapClient,
        operation: &'static str,
        id: &VolumeId,
    ) -> Result<Option<jiff::Timestamp>, BackendError> {
        let object = self.retrieve(client, operation, id).await?;
        object
            .config
            .create_time
            .map(|t| {
                parse_date_time(&t).ok_or_else(|| {
                    super::fault::malformed(
                        operation,
                        client.sdk_url().as_str(),
                        &format!("createTime {t:?} of FCD {id} is not an xsd:dateTime"),
                    )
                })
            })
            .transpose()
    }

    async fn retrieve(
        &self,
        client: &SoapClient,
        operation: &'static str,
        id: &VolumeId,
    ) -> Result<VStorageObject, BackendError> {
        let manager = self.manager(client, operation).await?;
        let request = VslmRetrieveVStorageObject {
            this: manager,
            id: IdXml { id: id.0.clone() },
        };
        let response: Returnval<VStorageObject> = client
            .call(
                Endpoint::Vslm,
                operation,
                "VslmRetrieveVStorageObject",
                &request,
            )
            .await?;
        response.returnval.ok_or_else(|| {
            super::fault::malformed(operation, client.sdk_url().as_str(), "no VStorageObject")
        })
    }
}

/// Parses an `xsd:dateTime` as vCenter writes it (`2024-05-01T10:00:00.123Z`, or with an
/// offset); one without a zone is taken as UTC.
fn parse_date_time(text: &str) -> Option<jiff::Timestamp> {
    let text = text.trim();
    text.parse::<jiff::Timestamp>().ok().or_else(|| {
        text.parse::<jiff::civil::DateTime>()
            .ok()
            .and_then(|dt| dt.to_zoned(jiff::tz::TimeZone::UTC).ok())
            .map(|z| z.timestamp())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::ErrorClass;
    use crate::backend::cns::fault::from_fault;
    use crate::backend::cns::soap::{ResponseError, method_xml, parse_response};

    #[test]
    fn requests_follow_the_wsdl() {
        let manager = MoRef::new("VslmVStorageObjectManager", "VStorageObjectManager");
        let xml = method_xml(
            "VslmSetVStorageObjectControlFlags",
            "urn:vslm",
            &VslmSetVStorageObjectControlFlags {
                this: &manager,
                id: IdXml {
                    id: "f9b4c1e2-0000-4a4a-9e9e-000000000001".into(),
                },
                control_flags: vec![KEEP_AFTER_DELETE_VM],
            },
        )
        .unwrap();
        assert_eq!(
            xml,
            "<VslmSetVStorageObjectControlFlags xmlns=\"urn:vslm\"><_this \
             type=\"VslmVStorageObjectManager\">VStorageObjectManager</_this><id><id>\
             f9b4c1e2-0000-4a4a-9e9e-000000000001</id></id><controlFlags>keepAfterDeleteVm\
             </controlFlags></VslmSetVStorageObjectControlFlags>"
        );
        let xml = method_xml(
            "RetrieveContent",
            "urn:vslm",
            &RetrieveContent {
                this: MoRef::new("VslmServiceInstance", "ServiceInstance"),
            },
        )
        .unwrap();
        assert_eq!(
            xml,
            "<RetrieveContent xmlns=\"urn:vslm\"><_this type=\"VslmServiceInstance\">\
             ServiceInstance</_this></RetrieveContent>"
        );
    }

    #[test]
    fn service_content_and_objects_parse() {
        let xml = include_str!("fixtures/vslm_service_content.xml");
        let content: Returnval<VslmServiceInstanceContent> = parse_response(xml).unwrap();
        assert_eq!(
            content.returnval.unwrap().vstorage_object_manager,
            MoRef::new("VslmVStorageObjectManager", "VStorageObjectManager")
        );
        let xml = include_str!("fixtures/vslm_retrieve_object.xml");
        let object: Returnval<VStorageObject> = parse_response(xml).unwrap();
        let config = object.returnval.unwrap().config;
        assert_eq!(config.id.id, "f9b4c1e2-0000-4a4a-9e9e-000000000001");
        assert_eq!(config.keep_after_delete_vm, Some(true));
        assert_eq!(
            config.create_time.as_deref().and_then(parse_date_time),
            Some("2024-06-01T12:00:00Z".parse().unwrap())
        );
        let xml = include_str!("fixtures/vslm_set_flags.xml");
        let empty: Returnval<String> = parse_response(xml).unwrap();
        assert!(empty.returnval.is_none());
    }

    #[test]
    fn own_registrations_are_remembered_once_and_boundedly() {
        let vslm = Vslm::default();
        let id = |n: usize| VolumeId(format!("vol-{n}"));
        vslm.note_registered(&id(1));
        assert!(!vslm.take_registered(&id(2)), "never noted");
        assert!(vslm.take_registered(&id(1)));
        assert!(!vslm.take_registered(&id(1)), "answered once");
        for n in 0..=REMEMBERED_REGISTRATIONS {
            vslm.note_registered(&id(n));
        }
        assert!(!vslm.take_registered(&id(0)), "the oldest is forgotten");
        assert!(vslm.take_registered(&id(REMEMBERED_REGISTRATIONS)));
    }

    #[test]
    fn create_times_parse_as_vcenter_writes_them() {
        let utc: jiff::Timestamp = "2024-06-01T12:00:00Z".parse().unwrap();
        assert_eq!(parse_date_time("2024-06-01T12:00:00Z"), Some(utc));
        assert_eq!(parse_date_time(" 2024-06-01T12:00:00.000Z "), Some(utc));
        assert_eq!(parse_date_time("2024-06-01T14:00:00+02:00"), Some(utc));
        assert_eq!(parse_date_time("2024-06-01T12:00:00"), Some(utc));
        assert_eq!(parse_date_time("yesterday"), None);
        assert_eq!(parse_date_time(""), None);
    }

    #[test]
    fn an_unknown_object_is_not_found() {
        let xml = include_str!("fixtures/vslm_fault_not_found.xml");
        let Err(ResponseError::Fault(fault)) = parse_response::<Returnval<String>>(xml) else {
            panic!("expected a fault");
        };
        let err = from_fault("VslmSetVStorageObjectControlFlags", &fault);
        assert_eq!(err.class, ErrorClass::NotFound, "{err}");
        assert_eq!(err.fault, "NotFound");
    }
}
