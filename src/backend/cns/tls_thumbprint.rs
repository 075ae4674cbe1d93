//! Pinning vCenter's certificate by its thumbprint, as the vSphere CSI driver does with
//! `thumbprint` of `csi-vsphere.conf`'s `[VirtualCenter]` section (docs/design.md §8.5):
//! the SHA-1 of the server certificate's DER bytes, written as colon-separated hex pairs
//! (`AA:BB:...`, what `openssl x509 -fingerprint -sha1` prints). A 32-byte value is taken
//! as a SHA-256 thumbprint. The pinned leaf certificate is trusted instead of a CA chain
//! (self-signed vCenters); a mismatch is refused naming both thumbprints.

use std::sync::Arc;

use rustls::client::danger::ServerCertVerified;
use rustls::pki_types::CertificateDer;
use sha2::{Digest, Sha256};

/// Parses `AA:BB:...` (any case; colons optional): 20 bytes (SHA-1) or 32 (SHA-256).
pub(crate) fn parse(text: &str) -> Result<Vec<u8>, String> {
    let hex_digits: String = text.trim().chars().filter(|c| *c != ':').collect();
    let bytes = hex::decode(&hex_digits)
        .map_err(|_| format!("thumbprint {text:?} is not hex pairs such as AA:BB:..."))?;
    match bytes.len() {
        20 | 32 => Ok(bytes),
        n => Err(format!(
            "thumbprint {text:?} has {n} bytes; a SHA-1 thumbprint has 20 (SHA-256: 32)"
        )),
    }
}

/// `AA:BB:...`.
pub(crate) fn format(bytes: &[u8]) -> String {
    bytes
        .iter()
        .map(|b| format!("{b:02X}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// The thumbprint of `cert` with the algorithm of `like` (its length).
fn thumbprint_of(cert: &[u8], like: &[u8]) -> Vec<u8> {
    if like.len() == 32 {
        Sha256::digest(cert).to_vec()
    } else {
        sha1(cert).to_vec()
    }
}

/// A certificate whose thumbprint is not the configured one. Its `Debug` is its message:
/// rustls shows `CertificateError::Other` with `Debug`.
struct Mismatch {
    expected: String,
    actual: String,
}

impl std::fmt::Debug for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "server certificate thumbprint mismatch: expected {} (thumbprint of csi-vsphere.conf), the server presented {}",
            self.expected, self.actual
        )
    }
}

impl std::error::Error for Mismatch {}

/// Trusts `end_entity` only if its thumbprint is `expected` (the key sizes were checked
/// before); a mismatch names both thumbprints.
pub(crate) fn verify(
    expected: &[u8],
    end_entity: &CertificateDer<'_>,
) -> Result<ServerCertVerified, rustls::Error> {
    let actual = thumbprint_of(end_entity.as_ref(), expected);
    if actual == expected {
        return Ok(ServerCertVerified::assertion());
    }
    Err(rustls::Error::InvalidCertificate(
        rustls::CertificateError::Other(rustls::OtherError(Arc::new(Mismatch {
            expected: format(expected),
            actual: format(&actual),
        }))),
    ))
}

/// SHA-1, only for thumbprints (the driver's `csi-vsphere.conf` format), from the ring
/// crate rustls already uses.
fn sha1(data: &[u8]) -> [u8; 20] {
    let digest = ring::digest::digest(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY, data);
    let mut out = [0; 20];
    out.copy_from_slice(digest.as_ref());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha1_matches_the_standard_vectors() {
        assert_eq!(
            hex::encode(sha1(b"abc")),
            "a9993e364706816aba3e25717850c26c9cd0d89d"
        );
        assert_eq!(
            hex::encode(sha1(b"")),
            "da39a3ee5e6b4b0d3255bfef95601890afd80709"
        );
        assert_eq!(
            hex::encode(sha1(
                b"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"
            )),
            "84983e441c3bd26ebaae4aa1f95129e5e54670f1"
        );
    }

    #[test]
    fn thumbprints_are_hex_pairs_of_twenty_or_thirty_two_bytes() {
        let t = "AF:F2:33:3D:9E:FA:D0:66:6B:50:F5:96:29:89:79:5E:4F:87:B9:14";
        assert_eq!(format(&parse(t).unwrap()), t);
        assert_eq!(parse(&t.to_lowercase().replace(':', "")).unwrap().len(), 20);
        assert!(parse("AA:BB").unwrap_err().contains("has 2 bytes"));
        assert!(parse("ZZ").unwrap_err().contains("not hex"));
    }
}
