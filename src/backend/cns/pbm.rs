//! Storage policies by name through vCenter's policy endpoint (PBM, `/pbm/sdk`):
//! `PbmRetrieveServiceContent` for the profile manager, then `PbmQueryProfile` (storage
//! requirement profiles) and `PbmRetrieveContent` for their names. Name → profile ID is
//! cached; a name that is not cached reads the policies again.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::backend::{BackendError, ErrorClass};

use super::session::SoapClient;
use super::soap::{MoRef, Returnval};
use super::transport::Endpoint;

/// Fault name of a policy name that vCenter does not know.
pub(crate) const POLICY_NOT_FOUND: &str = "StoragePolicyNotFound";

/// `PbmRetrieveServiceContent` on the `PbmServiceInstance`.
#[derive(Serialize)]
pub(crate) struct PbmRetrieveServiceContent {
    #[serde(rename = "_this")]
    pub this: MoRef,
}

/// `PbmServiceInstanceContent`, the part volmig reads.
#[derive(Debug, Deserialize)]
pub(crate) struct PbmServiceInstanceContent {
    #[serde(rename = "profileManager")]
    pub profile_manager: MoRef,
}

/// `PbmProfileResourceType`.
#[derive(Serialize)]
pub(crate) struct PbmProfileResourceType {
    #[serde(rename = "resourceType")]
    pub resource_type: &'static str,
}

/// `PbmProfileProfileManager.PbmQueryProfile`.
#[derive(Serialize)]
pub(crate) struct PbmQueryProfile<'a> {
    #[serde(rename = "_this")]
    pub this: &'a MoRef,
    #[serde(rename = "resourceType")]
    pub resource_type: PbmProfileResourceType,
    #[serde(rename = "profileCategory")]
    pub profile_category: &'static str,
}

/// `PbmProfileId`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct PbmProfileId {
    #[serde(rename = "uniqueId")]
    pub unique_id: String,
}

/// `PbmProfileProfileManager.PbmRetrieveContent`.
#[derive(Serialize)]
pub(crate) struct PbmRetrieveContent<'a> {
    #[serde(rename = "_this")]
    pub this: &'a MoRef,
    #[serde(rename = "profileIds")]
    pub profile_ids: &'a [PbmProfileId],
}

/// `PbmProfile` (any subtype), the parts volmig reads.
#[derive(Debug, Deserialize)]
pub(crate) struct PbmProfile {
    #[serde(rename = "profileId")]
    pub profile_id: PbmProfileId,
    #[serde(default)]
    pub name: String,
}

/// A response whose `returnval` is an array.
#[derive(Debug, Deserialize)]
pub(crate) struct Returnvals<T> {
    #[serde(default = "Vec::new")]
    pub returnval: Vec<T>,
}

/// Policy name → profile ID, cached per backend.
#[derive(Default)]
pub(crate) struct PolicyCache {
    manager: std::sync::Mutex<Option<MoRef>>,
    ids: std::sync::Mutex<HashMap<String, String>>,
    refresh_gate: tokio::sync::Mutex<()>,
}

impl PolicyCache {
    fn cached(&self, name: &str) -> Option<String> {
        self.ids.lock().ok().and_then(|ids| ids.get(name).cloned())
    }

    /// The profile ID of the storage policy `name`. A name vCenter does not know is an
    /// error of class [`ErrorClass::Permanent`] that lists the known policies.
    pub async fn profile_id(
        &self,
        client: &SoapClient,
        operation: &'static str,
        name: &str,
    ) -> Result<String, BackendError> {
        if let Some(id) = self.cached(name) {
            return Ok(id);
        }
        let _gate = self.refresh_gate.lock().await;
        if let Some(id) = self.cached(name) {
            return Ok(id);
        }
        let profiles = self.read_profiles(client, operation).await?;
        let known: Vec<String> = profiles.iter().map(|p| p.name.clone()).collect();
        if let Ok(mut ids) = self.ids.lock() {
            *ids = profiles
                .into_iter()
                .map(|p| (p.name, p.profile_id.unique_id))
                .collect();
        }
        self.cached(name)
            .ok_or_else(|| not_found(operation, name, &known))
    }

    async fn manager(
        &self,
        client: &SoapClient,
        operation: &'static str,
    ) -> Result<MoRef, BackendError> {
        if let Some(manager) = self.manager.lock().ok().and_then(|m| m.clone()) {
            return Ok(manager);
        }
        let request = PbmRetrieveServiceContent {
            this: MoRef::new("PbmServiceInstance", "ServiceInstance"),
        };
        let response: Returnval<PbmServiceInstanceContent> = client
            .call(
                Endpoint::Pbm,
                operation,
                "PbmRetrieveServiceContent",
                &request,
            )
            .await?;
        let manager = response
            .returnval
            .map(|content| content.profile_manager)
            .ok_or_else(|| {
                super::fault::malformed(
                    operation,
                    client.sdk_url().as_str(),
                    "PBM service content without a profile manager",
                )
            })?;
        if let Ok(mut cached) = self.manager.lock() {
            *cached = Some(manager.clone());
        }
        Ok(manager)
    }

    async fn read_profiles(
        &self,
        client: &SoapClient,
        operation: &'static str,
    ) -> Result<Vec<PbmProfile>, BackendError> {
        let manager = self.manager(client, operation).await?;
        let query = PbmQueryProfile {
            this: &manager,
            resource_type: PbmProfileResourceType {
                resource_type: "STORAGE",
            },
            profile_category: "REQUIREMENT",
        };
        let ids: Returnvals<PbmProfileId> = client
            .call(Endpoint::Pbm, operation, "PbmQueryProfile", &query)
            .await?;
        if ids.returnval.is_empty() {
            return Ok(Vec::new());
        }
        let request = PbmRetrieveContent {
            this: &manager,
            profile_ids: &ids.returnval,
        };
        let profiles: Returnvals<PbmProfile> = client
            .call(Endpoint::Pbm, operation, "PbmRetrieveContent", &request)
            .await?;
        Ok(profiles.returnval)
    }
}

/// The error for an unknown policy name.
pub(crate) fn not_found(operation: &'static str, name: &str, known: &[String]) -> BackendError {
    let known = if known.is_empty() {
        "none".to_owned()
    } else {
        known.join(", ")
    };
    BackendError::new(
        ErrorClass::Permanent,
        operation,
        POLICY_NOT_FOUND,
        format!("storage policy '{name}' does not exist in vCenter (known policies: {known})"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::cns::soap::{method_xml, parse_response};

    #[test]
    fn requests_follow_the_wsdl() {
        let manager = MoRef::new("PbmProfileProfileManager", "ProfileManager");
        let xml = method_xml(
            "PbmQueryProfile",
            "urn:pbm",
            &PbmQueryProfile {
                this: &manager,
                resource_type: PbmProfileResourceType {
                    resource_type: "STORAGE",
                },
                profile_category: "REQUIREMENT",
            },
        )
        .unwrap();
        assert_eq!(
            xml,
            "<PbmQueryProfile xmlns=\"urn:pbm\"><_this type=\"PbmProfileProfileManager\">\
             ProfileManager</_this><resourceType><resourceType>STORAGE</resourceType>\
             </resourceType><profileCategory>REQUIREMENT</profileCategory></PbmQueryProfile>"
        );
        let ids = [
            PbmProfileId {
                unique_id: "a-1".into(),
            },
            PbmProfileId {
                unique_id: "b-2".into(),
            },
        ];
        let xml = method_xml(
            "PbmRetrieveContent",
            "urn:pbm",
            &PbmRetrieveContent {
                this: &manager,
                profile_ids: &ids,
            },
        )
        .unwrap();
        assert!(
            xml.ends_with(
                "</_this><profileIds><uniqueId>a-1</uniqueId></profileIds><profileIds>\
                 <uniqueId>b-2</uniqueId></profileIds></PbmRetrieveContent>"
            ),
            "{xml}"
        );
        let xml = method_xml(
            "PbmRetrieveServiceContent",
            "urn:pbm",
            &PbmRetrieveServiceContent {
                this: MoRef::new("PbmServiceInstance", "ServiceInstance"),
            },
        )
        .unwrap();
        assert_eq!(
            xml,
            "<PbmRetrieveServiceContent xmlns=\"urn:pbm\"><_this type=\"PbmServiceInstance\">\
             ServiceInstance</_this></PbmRetrieveServiceContent>"
        );
    }

    #[test]
    fn the_service_content_names_the_profile_manager() {
        let xml = include_str!("fixtures/pbm_service_content.xml");
        let parsed: Returnval<PbmServiceInstanceContent> = parse_response(xml).unwrap();
        assert_eq!(
            parsed.returnval.unwrap().profile_manager,
            MoRef::new("PbmProfileProfileManager", "ProfileManager")
        );
    }

    #[test]
    fn profile_ids_and_profiles_parse() {
        let xml = include_str!("fixtures/pbm_query_profile.xml");
        let ids: Returnvals<PbmProfileId> = parse_response(xml).unwrap();
        let ids: Vec<&str> = ids.returnval.iter().map(|i| i.unique_id.as_str()).collect();
        assert_eq!(
            ids,
            [
                "aa6d5a82-1c88-45da-85d3-3d74b91a5bad",
                "4d5f673c-536f-11e6-beb8-9e71128cae77"
            ]
        );
        let xml = include_str!("fixtures/pbm_retrieve_content.xml");
        let profiles: Returnvals<PbmProfile> = parse_response(xml).unwrap();
        let pairs: Vec<(&str, &str)> = profiles
            .returnval
            .iter()
            .map(|p| (p.name.as_str(), p.profile_id.unique_id.as_str()))
            .collect();
        assert_eq!(
            pairs,
            [
                (
                    "vSAN Default Storage Policy",
                    "aa6d5a82-1c88-45da-85d3-3d74b91a5bad"
                ),
                ("gold", "4d5f673c-536f-11e6-beb8-9e71128cae77")
            ]
        );
    }

    #[test]
    fn an_unknown_name_is_permanent_and_lists_the_known_ones() {
        let err = not_found(
            "CnsCreateVolume",
            "platinum",
            &["gold".into(), "silver".into()],
        );
        assert_eq!(err.class, ErrorClass::Permanent);
        assert_eq!(err.fault, POLICY_NOT_FOUND);
        assert!(err.message.contains("'platinum'"), "{err}");
        assert!(err.message.contains("gold, silver"), "{err}");
        let err = not_found("CnsCreateVolume", "x", &[]);
        assert!(err.message.contains("known policies: none"), "{err}");
    }
}
