//! The rustls client configuration for vCenter: the system roots by default, only the
//! given CA bundle with `--vc-ca-file`, or no verification at all with `--vc-insecure`
//! (an explicit opt-in that logs a warning).

use std::path::Path;
use std::sync::Arc;

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
}

/// Why no TLS configuration could be built.
#[derive(Debug, thiserror::Error)]
pub(crate) enum TlsConfigError {
    /// The CA file is unreadable or holds no certificate.
    #[error("cannot use CA file {path}: {reason}")]
    CaFile { path: String, reason: String },
    /// The system trust store is empty or unreadable.
    #[error("no usable system root certificates: {0}")]
    SystemRoots(String),
    /// rustls rejected the protocol versions (should not happen with ring).
    #[error("TLS setup failed: {0}")]
    Rustls(#[from] rustls::Error),
}

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
                .with_custom_certificate_verifier(Arc::new(NoVerification {
                    algorithms: provider.signature_verification_algorithms,
                }))
                .with_no_client_auth()
        }
        Trust::CaFile(path) => builder
            .with_root_certificates(ca_file_roots(path)?)
            .with_no_client_auth(),
        Trust::Nothing => builder
            .with_root_certificates(RootCertStore::empty())
            .with_no_client_auth(),
        Trust::SystemRoots => builder
            .with_root_certificates(system_roots()?)
            .with_no_client_auth(),
    };
    Ok(config)
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

/// Accepts any server certificate, but still checks that the handshake is signed by the
/// key of the certificate presented (so the connection is at least not trivially broken).
#[derive(Debug)]
struct NoVerification {
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for NoVerification {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
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

    #[test]
    fn insecure_builds_without_roots() {
        let config = client_config(Trust::Insecure, "vc").unwrap();
        assert!(config.alpn_protocols.is_empty());
    }
}
