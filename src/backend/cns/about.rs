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
/// through `RegisterDisk` from 6.7 Update 3l up to and including this one).
const LAST_REGISTER_DISK: ApiVersion = ApiVersion::new(7, 0, 0);
/// The API version of every 6.7 Update 3 (3a … 3l and later patches alike): only its build
/// tells whether it registers through `RegisterDisk`.
const API_6_7_U3: ApiVersion = ApiVersion::new(6, 7, 3);
/// `about.build` of vCenter 6.7 Update 3l, the first 6.7.3 the driver registers through
/// `RegisterDisk` on (its `VSphere67u3lBuildInfo`; builds only grow).
const BUILD_6_7_U3L: u64 = 17_137_327;
/// From this version on, CNS sets `keepAfterDeleteVm` itself when it registers a disk.
const REGISTRATION_PROTECTS: ApiVersion = ApiVersion::new(8, 0, 3);
/// vSphere 7.0 Update 1: from it on, CNS refuses to register a disk that already backs a
/// volume (`CnsAlreadyRegisteredFault`, carrying that volume's ID).
const REFUSES_RE_REGISTRATION: ApiVersion = ApiVersion::new(7, 0, 1);

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
    /// `about.build`, as sent (e.g. `17137327`).
    pub build_text: String,
    /// `about.build` as a number; `None` when it is not one (the driver's `strconv.Atoi`:
    /// digits with an optional sign, no spaces).
    pub build: Option<u64>,
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
            build_text: about.build.clone(),
            build: parse_build(&about.build),
        }
    }

    /// A version from the two strings (tests and tools), without a build.
    pub fn from_strings(version: &str, api_version: &str) -> Self {
        Self {
            full_name: String::new(),
            version_text: version.to_owned(),
            api_version_text: api_version.to_owned(),
            version: ApiVersion::parse(version),
            api_version: ApiVersion::parse(api_version),
            build_text: String::new(),
            build: None,
        }
    }

    /// The same version with `about.build` set to `build` (tests and tools).
    #[must_use]
    pub fn with_build(mut self, build: &str) -> Self {
        self.build_text = build.to_owned();
        self.build = parse_build(build);
        self
    }

    /// True when a static registration first registers the vmdk as an FCD
    /// (`RegisterDisk`) and names it by `backingDiskId`, as the vSphere CSI driver's
    /// `UseVslmAPIs` decides it (kubernetes-sigs/vsphere-csi-driver,
    /// pkg/csi/service/common/common_controller_helper.go:191-213 at bf80902, called from
    /// pkg/apis/migration/migration.go:539-556): `about.apiVersion` above 6.7.3 and at most
    /// 7.0.0, or exactly 6.7.3 with `about.build` at least 17137327 (6.7 Update 3l).
    /// `about.version` plays no part. An unknown API version, and a 6.7.3 whose build is
    /// missing, not a number or older, use `backingDiskUrlPath`. (On an older 6.7.3 build the
    /// driver refuses to register at all; volmig still registers by path.)
    pub fn registers_disk_first(&self) -> bool {
        self.api_version.is_some_and(|v| {
            (v > API_6_7_U3 && v <= LAST_REGISTER_DISK)
                || (v == API_6_7_U3 && self.build.is_some_and(|b| b >= BUILD_6_7_U3L))
        })
    }

    /// True when CNS registration sets `keepAfterDeleteVm` itself (8.0.3 and later, by
    /// `about.version`, else `about.apiVersion`). Unknown versions are treated as older, so
    /// volmig sets the flag.
    pub fn registration_protects(&self) -> bool {
        self.version
            .or(self.api_version)
            .is_some_and(|v| v >= REGISTRATION_PROTECTS)
    }

    /// True when CNS answers a create of a disk that already backs a volume with
    /// `CnsAlreadyRegisteredFault` instead of a second volume: vSphere 7.0 Update 1 (7.0.1)
    /// and later, by `about.version`, else `about.apiVersion`. Unknown versions are treated
    /// as older, so the look-up by backing disk runs (docs/design.md §4.3).
    pub fn refuses_re_registration(&self) -> bool {
        self.version
            .or(self.api_version)
            .is_some_and(|v| v >= REFUSES_RE_REGISTRATION)
    }
}

/// `about.build` as the driver reads it (`strconv.Atoi`): an optional `+`, then digits.
/// A negative build cannot reach any threshold, so it counts as no number.
fn parse_build(raw: &str) -> Option<u64> {
    raw.parse().ok()
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
    fn on_673_register_disk_needs_the_6_7_u3l_build() {
        let at = |build: &str| {
            VcenterVersion::from_strings("6.7.0", "6.7.3")
                .with_build(build)
                .registers_disk_first()
        };
        assert!(!at("17137326"), "6.7 Update 3k and older");
        assert!(at("17137327"), "6.7 Update 3l");
        assert!(at("+17137327"), "strconv.Atoi takes a sign");
        assert!(at("19300125"));
        // Missing or not a number: the driver registers by backingDiskUrlPath.
        assert!(!VcenterVersion::from_strings("6.7.0", "6.7.3").registers_disk_first());
        for bad in [
            "",
            "garbage",
            " 17137327",
            "17137327 ",
            "-17137327",
            "build-17137327",
        ] {
            assert!(!at(bad), "{bad:?}");
        }
        // The build only matters on exactly 6.7.3.
        let other = |api: &str, build: &str| {
            VcenterVersion::from_strings("", api)
                .with_build(build)
                .registers_disk_first()
        };
        assert!(!other("6.7.2", "17137327"));
        assert!(!other("6.5", "99999999"));
        assert!(!other("7.0.3.0", "99999999"));
        assert!(other("7.0.0.0", ""));
        assert!(other("7.0.0.0", "1"));
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
    fn re_registration_is_refused_from_7_0_update_1() {
        let both = |v: &str, api: &str| VcenterVersion::from_strings(v, api);
        assert!(both("7.0.1", "7.0.1.0").refuses_re_registration());
        assert!(both("7.0.3", "7.0.3.0").refuses_re_registration());
        assert!(both("8.0.3", "8.0.3.0").refuses_re_registration());
        assert!(!both("7.0.0", "7.0.0.0").refuses_re_registration());
        assert!(!both("6.7.0", "6.7.3").refuses_re_registration());
        assert!(!both("6.5.0", "6.5").refuses_re_registration());
        // about.version decides when both are there; unknown counts as older.
        assert!(!both("7.0.0", "7.0.1.0").refuses_re_registration());
        assert!(both("", "7.0.1.0").refuses_re_registration());
        assert!(!both("", "").refuses_re_registration());
        assert!(!both("garbage", "garbage").refuses_re_registration());
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
        assert_eq!(version.build_text, "5973321");
        assert_eq!(version.build, Some(5_973_321));
        assert!(!version.registers_disk_first());
        assert!(!version.registration_protects());
        let xml = include_str!("fixtures/service_content_673u3l.xml");
        let content: Returnval<ServiceContent> = parse_response(xml).unwrap();
        let version = VcenterVersion::from_about(&content.returnval.unwrap().about);
        assert_eq!(version.api_version, Some(ApiVersion::new(6, 7, 3)));
        assert_eq!(version.build, Some(17_137_327));
        assert!(version.registers_disk_first(), "6.7 Update 3l: {version:?}");
        assert!(!version.registration_protects());
        let xml = include_str!("fixtures/service_content_803.xml");
        let content: Returnval<ServiceContent> = parse_response(xml).unwrap();
        let version = VcenterVersion::from_about(&content.returnval.unwrap().about);
        assert_eq!(version.to_string(), "version 8.0.3 (API 8.0.3.0)");
        assert!(version.registration_protects());
        assert!(!version.registers_disk_first());
    }
}
