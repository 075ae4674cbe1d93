//! The rustls client configuration for vCenter: the system roots by default, only the
//! given CA bundle with `--vc-ca-file`, or no verification at all with `--vc-insecure`
//! (an explicit opt-in that logs a warning).
//!
//! Whatever the trust mode, a server certificate (or a certificate of its chain) with an
//! RSA key under [`MIN_RSA_BITS`] is refused with a message saying so: ring would refuse
//! the handshake signature of such a key anyway, but only as an opaque `BadSignature`.
//! Real vCenters serve RSA-2048 chains from their own CA (VMCA). Host names are checked
//! by webpki (`NotValidForName`), except with `--vc-insecure`. A `thumbprint` of the CSI
//! driver's configuration pins the leaf certificate instead ([`tls_thumbprint`]).

use std::path::Path;
use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};

/// How the server certificate is checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Trust<'a> {
    /// The operating system's trust store.
    SystemRoots,
    /// Only the certificates of this PEM file.
    CaFile(&'a Path),
    /// No verification (`--vc-insecure`).
    Insecure,
    /// No trusted certificate at all (plain-http URLs never use TLS).
    Nothing,
    /// Only the certificate with this thumbprint (`AA:BB:...`, SHA-1 as in the driver's
    /// `csi-vsphere.conf`), whatever its issuer and names.
    Thumbprint(&'a str),
}

/// Why no TLS configuration could be built.
#[derive(Debug, thiserror::Error)]
pub(crate) enum TlsConfigError {
    /// The CA file is unreadable or holds no certificate.
    #[error("cannot use CA file {path}: {reason}")]
    CaFile { path: String, reason: String },
    /// The thumbprint is not hex pairs of a SHA-1 (or SHA-256).
    #[error("cannot use the vCenter thumbprint: {0}")]
    Thumbprint(String),
    /// The system trust store is empty or unreadable.
    #[error("no usable system root certificates: {0}")]
    SystemRoots(String),
    /// rustls rejected the protocol versions (should not happen with ring).
    #[error("TLS setup failed: {0}")]
    Rustls(#[from] rustls::Error),
}

#[path = "tls_thumbprint.rs"]
pub(crate) mod tls_thumbprint;

/// The smallest RSA modulus accepted in the server's chain, in bits (NIST SP 800-131A;
/// vCenter's VMCA issues 2048-bit keys).
pub(crate) const MIN_RSA_BITS: usize = 2048;

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Builds the client configuration for `trust`. `server` names the vCenter in the warning
/// that `Trust::Insecure` logs.
pub(crate) fn client_config(
    trust: Trust<'_>,
    server: &str,
) -> Result<ClientConfig, TlsConfigError> {
    let provider = provider();
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()?;
    let config = match trust {
        Trust::Insecure => {
            tracing::warn!(
                vcenter = server,
                "TLS certificate verification of vCenter is DISABLED (--vc-insecure): \
                 the connection can be intercepted; use --vc-ca-file instead"
            );
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(StrongKeys {
                    then: Then::Anything,
                    algorithms: provider.signature_verification_algorithms,
                }))
                .with_no_client_auth()
        }
        Trust::CaFile(path) => builder
            .dangerous()
            .with_custom_certificate_verifier(strong_keys(ca_file_roots(path)?, &provider)?)
            .with_no_client_auth(),
        Trust::Thumbprint(text) => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(StrongKeys {
                then: Then::Pinned(
                    tls_thumbprint::parse(text).map_err(TlsConfigError::Thumbprint)?,
                ),
                algorithms: provider.signature_verification_algorithms,
            }))
            .with_no_client_auth(),
        Trust::Nothing => builder
            .dangerous()
            .with_custom_certificate_verifier(strong_keys(RootCertStore::empty(), &provider)?)
            .with_no_client_auth(),
        Trust::SystemRoots => builder
            .dangerous()
            .with_custom_certificate_verifier(strong_keys(system_roots()?, &provider)?)
            .with_no_client_auth(),
    };
    Ok(config)
}

/// webpki's verification over `roots` (chain, validity, host name), with the key-size
/// check in front.
fn strong_keys(
    roots: RootCertStore,
    provider: &Arc<CryptoProvider>,
) -> Result<Arc<StrongKeys>, TlsConfigError> {
    let roots = Arc::new(roots);
    let webpki = if roots.is_empty() {
        // webpki refuses to be built without roots; `StrongKeys` then rejects every
        // certificate with webpki's error for this case (plain-http URLs never ask).
        None
    } else {
        Some(
            WebPkiServerVerifier::builder_with_provider(roots, provider.clone())
                .build()
                .map_err(|e| TlsConfigError::Rustls(rustls::Error::General(e.to_string())))?,
        )
    };
    Ok(Arc::new(StrongKeys {
        then: Then::Chain(webpki),
        algorithms: provider.signature_verification_algorithms,
    }))
}

/// Refuses weak RSA keys whatever the trust mode, then lets `then` decide. The handshake
/// is always checked to be signed by the key of the certificate presented.
#[derive(Debug)]
struct StrongKeys {
    then: Then,
    algorithms: WebPkiSupportedAlgorithms,
}

/// What decides trust once the key sizes passed.
#[derive(Debug)]
enum Then {
    /// webpki over the roots (chain, validity, host name); without roots every
    /// certificate is refused as `UnknownIssuer`, as webpki would.
    Chain(Option<Arc<WebPkiServerVerifier>>),
    /// Only the leaf with this thumbprint ([`tls_thumbprint`]), whatever its issuer and names.
    Pinned(Vec<u8>),
    /// Any certificate (`--vc-insecure`).
    Anything,
}

impl ServerCertVerifier for StrongKeys {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        check_key_sizes(end_entity, intermediates)?;
        match &self.then {
            Then::Chain(Some(webpki)) => webpki.verify_server_cert(
                end_entity,
                intermediates,
                server_name,
                ocsp_response,
                now,
            ),
            Then::Chain(None) => Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::UnknownIssuer,
            )),
            Then::Pinned(expected) => tls_thumbprint::verify(expected, end_entity),
            Then::Anything => Ok(ServerCertVerified::assertion()),
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// Why a certificate of the chain is refused although it may be validly signed.
#[derive(Debug)]
struct WeakKey {
    which: &'static str,
    bits: usize,
}

impl std::fmt::Display for WeakKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the {} has a {}-bit RSA key; volmig requires at least {MIN_RSA_BITS} bits \
             (vCenter's VMCA issues 2048-bit keys: replace the certificate)",
            self.which, self.bits
        )
    }
}

impl std::error::Error for WeakKey {}

/// Refuses RSA keys under [`MIN_RSA_BITS`] in the end-entity certificate and the
/// intermediates the server sent.
fn check_key_sizes(
    end_entity: &CertificateDer<'_>,
    intermediates: &[CertificateDer<'_>],
) -> Result<(), rustls::Error> {
    let chain = std::iter::once(("server certificate", end_entity)).chain(
        intermediates
            .iter()
            .map(|c| ("intermediate CA certificate", c)),
    );
    for (which, cert) in chain {
        if let Some(bits) = der::rsa_modulus_bits(cert.as_ref())
            && bits < MIN_RSA_BITS
        {
            return Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::Other(rustls::OtherError(Arc::new(WeakKey {
                    which,
                    bits,
                }))),
            ));
        }
    }
    Ok(())
}

/// Just enough DER to find the RSA modulus of an X.509 certificate; anything unexpected
/// gives `None` (webpki then judges the certificate as usual).
mod der {
    /// `rsaEncryption`, 1.2.840.113549.1.1.1.
    const RSA_ENCRYPTION: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x01];

    /// One TLV: (tag, content, rest).
    fn next(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
        let (&tag, rest) = input.split_first()?;
        let (&first, rest) = rest.split_first()?;
        let (len, rest) = if first < 0x80 {
            (usize::from(first), rest)
        } else {
            let n = usize::from(first & 0x7f);
            if n == 0 || n > 4 || rest.len() < n {
                return None;
            }
            let len = rest[..n]
                .iter()
                .fold(0usize, |acc, b| (acc << 8) | usize::from(*b));
            (len, &rest[n..])
        };
        if rest.len() < len {
            return None;
        }
        Some((tag, &rest[..len], &rest[len..]))
    }

    fn expect(input: &[u8], tag: u8) -> Option<(&[u8], &[u8])> {
        let (t, content, rest) = next(input)?;
        (t == tag).then_some((content, rest))
    }

    const SEQUENCE: u8 = 0x30;
    const INTEGER: u8 = 0x02;
    const BIT_STRING: u8 = 0x03;
    const OID: u8 = 0x06;
    const VERSION: u8 = 0xa0;

    /// The bit length of the RSA modulus of `cert`, `None` for other key types or
    /// unparsable input.
    pub(super) fn rsa_modulus_bits(cert: &[u8]) -> Option<usize> {
        let (certificate, _) = expect(cert, SEQUENCE)?;
        let (mut tbs, _) = expect(certificate, SEQUENCE)?;
        if let Some((VERSION, _, rest)) = next(tbs) {
            tbs = rest;
        }
        let (_serial, tbs) = expect(tbs, INTEGER)?;
        let (_signature, tbs) = expect(tbs, SEQUENCE)?;
        let (_issuer, tbs) = expect(tbs, SEQUENCE)?;
        let (_validity, tbs) = expect(tbs, SEQUENCE)?;
        let (_subject, tbs) = expect(tbs, SEQUENCE)?;
        let (spki, _) = expect(tbs, SEQUENCE)?;
        let (algorithm, spki) = expect(spki, SEQUENCE)?;
        let (oid, _) = expect(algorithm, OID)?;
        if oid != RSA_ENCRYPTION {
            return None;
        }
        let (key, _) = expect(spki, BIT_STRING)?;
        let (_unused_bits, key) = key.split_first()?;
        let (rsa_key, _) = expect(key, SEQUENCE)?;
        let (modulus, _) = expect(rsa_key, INTEGER)?;
        let first = modulus.iter().position(|b| *b != 0)?;
        let significant = &modulus[first..];
        let leading = significant.first()?.leading_zeros() as usize;
        Some(significant.len() * 8 - leading)
    }
}

fn ca_file_roots(path: &Path) -> Result<RootCertStore, TlsConfigError> {
    let fail = |reason: String| TlsConfigError::CaFile {
        path: path.display().to_string(),
        reason,
    };
    let mut roots = RootCertStore::empty();
    let certs = CertificateDer::pem_file_iter(path).map_err(|e| fail(e.to_string()))?;
    for cert in certs {
        let cert = cert.map_err(|e| fail(e.to_string()))?;
        roots.add(cert).map_err(|e| fail(e.to_string()))?;
    }
    if roots.is_empty() {
        return Err(fail("no PEM certificate in the file".to_owned()));
    }
    Ok(roots)
}

fn system_roots() -> Result<RootCertStore, TlsConfigError> {
    let loaded = rustls_native_certs::load_native_certs();
    for err in &loaded.errors {
        tracing::debug!(error = %err, "skipping unreadable system root certificate");
    }
    let mut roots = RootCertStore::empty();
    let (added, ignored) = roots.add_parsable_certificates(loaded.certs);
    if ignored > 0 {
        tracing::debug!(ignored, "ignored unparsable system root certificates");
    }
    if added == 0 {
        let detail = loaded.errors.first().map_or_else(
            || "the trust store is empty".to_owned(),
            ToString::to_string,
        );
        return Err(TlsConfigError::SystemRoots(detail));
    }
    Ok(roots)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_ca_file_is_a_clear_error() {
        let err = client_config(Trust::CaFile(Path::new("/nonexistent/ca.pem")), "vc").unwrap_err();
        assert!(err.to_string().contains("/nonexistent/ca.pem"), "{err}");
    }

    #[test]
    fn a_ca_file_without_certificates_is_rejected() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("empty.pem");
        std::fs::write(&path, "not a certificate\n").unwrap();
        let err = client_config(Trust::CaFile(&path), "vc").unwrap_err();
        assert!(err.to_string().contains("no PEM certificate"), "{err}");
    }

    /// Self-signed test certificates made with `openssl req -x509 -newkey ...`.
    const RSA_1024: &str = "-----BEGIN CERTIFICATE-----\nMIICGDCCAYGgAwIBAgIUIPEWqr9TCVJrDDOFeICjMjs47XswDQYJKoZIhvcNAQEL\nBQAwHjEcMBoGA1UEAwwTdm9sbWlnLXRlc3QtcnNhMTAyNDAeFw0yNjEyMDIyMzU2\nMjRaFw0zNjExMjkyMzU2MjRaMB4xHDAaBgNVBAMME3ZvbG1pZy10ZXN0LXJzYTEw\nMjQwgZ8wDQYJKoZIhvcNAQEBBQADgY0AMIGJAoGBAMaNGejOv4kWe52c+xF6qXVF\n700xePqtf77Y5Pok6XEPt06ZgDpXhFTNE+ihot1Ch0zOZThRWxLkangGUZ9v73I7\nc6+aPOpf8eJzjehCn+goEtu6CGcl95+O5TJJ9xKbWgwseHBYDAgRDhUKKxC5cjaS\nAqrcyCGxz907hFd11eLdAgMBAAGjUzBRMB0GA1UdDgQWBBSL8LVBcBmnULSThoG+\n2P24nVLVbjAfBgNVHSMEGDAWgBSL8LVBcBmnULSThoG+2P24nVLVbjAPBgNVHRMB\nAf8EBTADAQH/MA0GCSqGSIb3DQEBCwUAA4GBAJjlLolhOGy51xvXKiClAKKtuJUE\n7XWZS+R9pyFtvlX/8FC5L3GbahmgsN8vqOoBlTSyr4h+p6BZ0WVc6m6edYsm4GK3\nR2AM7Vkn+w89q8Bcc6XW74HW19WvBf424qz/w/L3YVfACx7QkQwDkDoO7SatUUr2\nrgnJ23bhwU/RAomX\n-----END CERTIFICATE-----";
    const RSA_2048: &str = "-----BEGIN CERTIFICATE-----\nMIIDHTCCAgWgAwIBAgIULhcG7oD5HzQq8T5tNSIbmqIu6QEwDQYJKoZIhvcNAQEL\nBQAwHjEcMBoGA1UEAwwTdm9sbWlnLXRlc3QtcnNhMjA0ODAeFw0yNjEyMDIyMzU2\nMjVaFw0zNjExMjkyMzU2MjVaMB4xHDAaBgNVBAMME3ZvbG1pZy10ZXN0LXJzYTIw\nNDgwggEiMA0GCSqGSIb3DQEBAQUAA4IBDwAwggEKAoIBAQC4Qq4kiBh41lqsQM+B\n5lpiPS3/XY7+BS88YH/9m4h+0Xi/THWqubPtEHBtLweq4lItTlzKulqu95ZtqTCD\nArDu+lMRjGykTpLMV5kAvc4rFvpwoETqg4NtEf90rbl9gERhoGQGPi8TNp+X1NFh\nLn3gubIddXPGMqvVRVNlQAa/jEi0Av/3UVZKrpbtOFx/1Qw8006wIULfY1m9+oEe\nGnAVaEW7ctBeiGF8YD7wooeWsq0S+zKdVO0xRiVJCjKqIkORoTlbklRI7xVbnXA1\nl7pZPMDnUXBngJSUxIK35roAMosBRTSh42/aA0gyT998WO1/VI6JZhHKX+bRDVep\nX0iHAgMBAAGjUzBRMB0GA1UdDgQWBBTjzv70ap8gNkha7qXfm7LqOHq8ZjAfBgNV\nHSMEGDAWgBTjzv70ap8gNkha7qXfm7LqOHq8ZjAPBgNVHRMBAf8EBTADAQH/MA0G\nCSqGSIb3DQEBCwUAA4IBAQCwjOiiaOPmcka+yOeZzsIw7BymBXFfXo8UMLY1BI8T\nKxISqAEn/+PDOjWDqCzpalB+NXLih7p8UaaOzOv6RluMjxgPjOS8Gp1Q2kMNQJbW\nII+IaY1tfgpGxxyDjGHf3fYRaRnWF35h2ULpKdY26xoNEvNa9b4HUNIF3IUJjGuM\nnawFVGlbfiCRJC1OwTGj8oTOP+PWN3pyGXWap5ahgcLJ/4q9wW6axvntrY6pnsXw\nTDiiBeN0bz4W/31ion4VF6m6eqVT/5Y1Z/VVl0qAVVxrKQMewyVqOnHk37oJTX/B\nb2SpgeES8T4taLwT3CGmYRIMGY3q348KxydxZhUb3QkJ\n-----END CERTIFICATE-----";
    const EC_P256: &str = "-----BEGIN CERTIFICATE-----\nMIIBiDCCAS2gAwIBAgIUHPIesMIiRSmQ9g9eXe5/8SrbK1QwCgYIKoZIzj0EAwIw\nGTEXMBUGA1UEAwwOdm9sbWlnLXRlc3QtZWMwHhcNMjYxMjAyMjM1NjI1WhcNMzYx\nMTI5MjM1NjI1WjAZMRcwFQYDVQQDDA52b2xtaWctdGVzdC1lYzBZMBMGByqGSM49\nAgEGCCqGSM49AwEHA0IABGQuulF8XSE+hPrL0UJhaqnoaOUsFt8Y8ZFUZJJEsouV\nIvY6zE6jS9nwUViWLhdiZLqvuKLJHf4eThlPkbPlJumjUzBRMB0GA1UdDgQWBBT0\nKC+jivCdAZ/PWirUloQLg4uWNjAfBgNVHSMEGDAWgBT0KC+jivCdAZ/PWirUloQL\ng4uWNjAPBgNVHRMBAf8EBTADAQH/MAoGCCqGSM49BAMCA0kAMEYCIQDJ1OssbN8+\nJNajnmujr6SD2wpbFAeD0qsirjKRFQtOkgIhAM0NR37tyu57RErXEQQyOpMG4UAg\nkM/u6R9f/cZ8CVr4\n-----END CERTIFICATE-----";

    fn der(pem: &str) -> CertificateDer<'static> {
        CertificateDer::from_pem_slice(pem.as_bytes()).unwrap()
    }

    #[test]
    fn rsa_modulus_sizes_are_read_from_the_certificate() {
        assert_eq!(der::rsa_modulus_bits(der(RSA_1024).as_ref()), Some(1024));
        assert_eq!(der::rsa_modulus_bits(der(RSA_2048).as_ref()), Some(2048));
        assert_eq!(der::rsa_modulus_bits(der(EC_P256).as_ref()), None);
        assert_eq!(der::rsa_modulus_bits(b"\x30\x82\xff\xff garbage"), None);
        assert_eq!(der::rsa_modulus_bits(&[]), None);
    }

    #[test]
    fn weak_rsa_keys_are_refused_with_a_clear_message() {
        let message = |err: rustls::Error| match err {
            rustls::Error::InvalidCertificate(rustls::CertificateError::Other(other)) => {
                other.to_string()
            }
            other => panic!("not a certificate error: {other:?}"),
        };
        let text = message(check_key_sizes(&der(RSA_1024), &[]).unwrap_err());
        assert!(
            text.contains("server certificate has a 1024-bit RSA key"),
            "{text}"
        );
        assert!(text.contains("at least 2048 bits"), "{text}");
        let text = message(check_key_sizes(&der(RSA_2048), &[der(RSA_1024)]).unwrap_err());
        assert!(text.contains("intermediate CA certificate"), "{text}");
        check_key_sizes(&der(RSA_2048), &[der(EC_P256)]).unwrap();
        // --vc-insecure refuses weak keys too.
        let insecure = StrongKeys {
            then: Then::Anything,
            algorithms: provider().signature_verification_algorithms,
        };
        let name = ServerName::try_from("vc").unwrap();
        assert!(
            insecure
                .verify_server_cert(&der(RSA_1024), &[], &name, &[], UnixTime::now())
                .is_err()
        );
    }

    #[test]
    fn a_thumbprint_pins_the_leaf_and_a_mismatch_names_both() {
        let pinned = StrongKeys {
            then: Then::Pinned(tls_thumbprint::parse(RSA_2048_SHA1).unwrap()),
            algorithms: provider().signature_verification_algorithms,
        };
        let name = ServerName::try_from("any-name").unwrap();
        pinned
            .verify_server_cert(&der(RSA_2048), &[], &name, &[], UnixTime::now())
            .unwrap();
        let err = pinned
            .verify_server_cert(&der(EC_P256), &[], &name, &[], UnixTime::now())
            .unwrap_err()
            .to_string();
        assert!(err.contains(&format!("expected {RSA_2048_SHA1}")), "{err}");
        assert!(err.contains("presented "), "{err}");
        // SHA-256 thumbprints pin too.
        let sha256 = StrongKeys {
            then: Then::Pinned(tls_thumbprint::parse("6F:55:97:E3:15:D8:3E:44:A6:D0:F3:4D:D9:D6:49:13:25:D1:5C:32:64:AE:EC:1C:0B:2D:C1:D5:7E:1E:25:3E").unwrap()),
            algorithms: provider().signature_verification_algorithms,
        };
        sha256
            .verify_server_cert(&der(RSA_2048), &[], &name, &[], UnixTime::now())
            .unwrap();
        client_config(Trust::Thumbprint(RSA_2048_SHA1), "vc").unwrap();
        let err = client_config(Trust::Thumbprint("AA:BB"), "vc").unwrap_err();
        assert!(err.to_string().contains("thumbprint"), "{err}");
    }

    /// `openssl x509 -noout -fingerprint -sha1` of [`RSA_2048`].
    const RSA_2048_SHA1: &str = "AF:F2:33:3D:9E:FA:D0:66:6B:50:F5:96:29:89:79:5E:4F:87:B9:14";

    #[test]
    fn insecure_builds_without_roots() {
        let config = client_config(Trust::Insecure, "vc").unwrap();
        assert!(config.alpn_protocols.is_empty());
    }
}
