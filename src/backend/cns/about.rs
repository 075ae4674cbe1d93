//! What vCenter says about itself (`ServiceContent.about`) and the behaviour that depends
//! on it: how a disk is named in a create spec, and whether registration already protects
//! the disk from VM deletion.

use std::fmt;

use super::vim::AboutInfo;

/// A vSphere version reduced to its first three numbers (`7.0.3.0` → `7.0.3`, `6.5` →
/// `6.5.0`), which is how the vSphere CSI driver compares versions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ApiVersion {
    /// First number.
    pub major: u32,
    /// Second number.
    pub minor: u32,
    /// Third number (0 when absent).
    pub patch: u32,
}

impl ApiVersion {
    /// `major.minor.patch`.
    pub const fn new(major: u32, minor: u32, patch: u32) -> Self {
        Self {
            major,
            minor,
            patch,
        }
    }

    /// Parses the first three dot-separated numbers of `raw`; missing ones count as 0,
    /// further ones are ignored. `None` when the first two are not numbers.
    pub fn parse(raw: &str) -> Option<Self> {
        let mut parts = raw.trim().split('.');
        let mut number = |required: bool| -> Option<u32> {
            match parts.next() {
                Some(text) => text.trim().parse().ok(),
                None if required => None,
                None => Some(0),
            }
        };
        let major = number(true)?;
        let minor = number(true)?;
        let patch = number(false)?;
        Some(Self::new(major, minor, patch))
    }
}

impl fmt::Display for ApiVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// The last version whose CNS did not take a `backingDiskUrlPath` (registration goes
/// through `RegisterDisk` from above 6.7.3 up to and including this one).
const LAST_REGISTER_DISK: ApiVersion = ApiVersion::new(7, 0, 0);
/// Versions up to this one have no CNS registration of existing disks through `RegisterDisk`.
const BEFORE_REGISTER_DISK: ApiVersion = ApiVersion::new(6, 7, 3);
/// From this version on, CNS sets `keepAfterDeleteVm` itself when it registers a disk.
const REGISTRATION_PROTECTS: ApiVersion = ApiVersion::new(8, 0, 3);

/// The product and API version of the connected vCenter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VcenterVersion {
    /// `about.fullName`, e.g. `VMware vCenter Server 7.0.3 build-19480866`.
    pub full_name: String,
    /// `about.version`, as sent.
    pub version_text: String,
    /// `about.apiVersion`, as sent.
    pub api_version_text: String,
    /// `about.version`, parsed.
    pub version: Option<ApiVersion>,
    /// `about.apiVersion`, parsed.
    pub api_version: Option<ApiVersion>,
}

impl VcenterVersion {
    /// Reads the version fields of an `AboutInfo`.
    pub(crate) fn from_about(about: &AboutInfo) -> Self {
        Self {
            full_name: about.full_name.clone(),
            version_text: about.version.clone(),
            api_version_text: about.api_version.clone(),
            version: ApiVersion::parse(&about.version),
            api_version: ApiVersion::parse(&about.api_version),
        }
    }

    /// A version from the two strings (tests and tools).
    pub fn from_strings(version: &str, api_version: &str) -> Self {
        Self {
            full_name: String::new(),
            version_text: version.to_owned(),
            api_version_text: api_version.to_owned(),
            version: ApiVersion::parse(version),
            api_version: ApiVersion::parse(api_version),
        }
    }

    /// True when a static registration first registers the vmdk as an FCD
    /// (`RegisterDisk`) and names it by `backingDiskId`: API version above 6.7.3 and at most
    /// 7.0.0, as the vSphere CSI driver does. Unknown versions use `backingDiskUrlPath`.
    pub fn registers_disk_first(&self) -> bool {
        self.api_version
            .is_some_and(|v| v > BEFORE_REGISTER_DISK && v <= LAST_REGISTER_DISK)
    }

    /// True when CNS registration sets `keepAfterDeleteVm` itself (8.0.3 and later, by
    /// `about.version`, else `about.apiVersion`). Unknown versions are treated as older, so
    /// volmig sets the flag.
    pub fn registration_protects(&self) -> bool {
        self.version
            .or(self.api_version)
            .is_some_and(|v| v >= REGISTRATION_PROTECTS)
    }
}

impl fmt::Display for VcenterVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "version {} (API {})",
            self.version_text, self.api_version_text
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::cns::soap::{Returnval, parse_response};
    use crate::backend::cns::vim::ServiceContent;

    #[test]
    fn versions_parse_to_three_numbers() {
        assert_eq!(ApiVersion::parse("7.0.3.0"), Some(ApiVersion::new(7, 0, 3)));
        assert_eq!(ApiVersion::parse("8.0.3"), Some(ApiVersion::new(8, 0, 3)));
        assert_eq!(ApiVersion::parse("6.5"), Some(ApiVersion::new(6, 5, 0)));
        assert_eq!(ApiVersion::parse(" 7.0 "), Some(ApiVersion::new(7, 0, 0)));
        assert_eq!(ApiVersion::parse("7"), None);
        assert_eq!(ApiVersion::parse(""), None);
        assert_eq!(ApiVersion::parse("seven.0"), None);
        assert!(ApiVersion::new(6, 7, 3) < ApiVersion::new(7, 0, 0));
        assert!(ApiVersion::new(7, 0, 3) < ApiVersion::new(8, 0, 3));
        assert_eq!(ApiVersion::new(7, 0, 3).to_string(), "7.0.3");
    }

    #[test]
    fn register_disk_only_above_673_up_to_700() {
        let api = |v: &str| VcenterVersion::from_strings(v, v).registers_disk_first();
        assert!(!api("6.7.3"));
        assert!(!api("6.7.2"));
        assert!(!api("6.5"));
        assert!(api("7.0.0.0"));
        assert!(api("7.0"));
        assert!(!api("7.0.1.0"));
        assert!(!api("7.0.3.0"));
        assert!(!api("8.0.3.0"));
        assert!(!api("garbage"));
    }

    #[test]
    fn registration_protects_from_803_by_version_then_api_version() {
        let both = |v: &str, api: &str| VcenterVersion::from_strings(v, api);
        assert!(both("8.0.3", "8.0.3.0").registration_protects());
        assert!(both("9.0.0", "9.0.0.0").registration_protects());
        assert!(!both("8.0.2", "8.0.2.0").registration_protects());
        assert!(!both("7.0.3", "7.0.3.0").registration_protects());
        // about.version decides when both are there.
        assert!(!both("8.0.2", "8.0.3.0").registration_protects());
        // Without about.version, the API version decides; unknown means "set it".
        assert!(both("", "8.0.3.0").registration_protects());
        assert!(!both("", "").registration_protects());
    }

    #[test]
    fn the_service_content_fixture_gives_its_versions() {
        let xml = include_str!("fixtures/service_content.xml");
        let content: Returnval<ServiceContent> = parse_response(xml).unwrap();
        let version = VcenterVersion::from_about(&content.returnval.unwrap().about);
        assert_eq!(version.version, Some(ApiVersion::new(6, 5, 0)));
        assert_eq!(version.api_version, Some(ApiVersion::new(6, 5, 0)));
        assert_eq!(version.version_text, "6.5.0");
        assert!(version.full_name.starts_with("VMware vCenter Server 6.5.0"));
        assert!(!version.registers_disk_first());
        assert!(!version.registration_protects());
        let xml = include_str!("fixtures/service_content_803.xml");
        let content: Returnval<ServiceContent> = parse_response(xml).unwrap();
        let version = VcenterVersion::from_about(&content.returnval.unwrap().about);
        assert_eq!(version.to_string(), "version 8.0.3 (API 8.0.3.0)");
        assert!(version.registration_protects());
        assert!(!version.registers_disk_first());
    }
}
