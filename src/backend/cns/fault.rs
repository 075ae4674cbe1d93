//! Mapping of SOAP faults, HTTP statuses and transport errors to the backend's error
//! classes. The fault name and the server's message are kept for `status.lastError`.

use std::error::Error as StdError;
use std::time::Duration;

use crate::backend::{BackendError, ErrorClass};

use super::soap::{Fault, printable};

/// Fault names volmig synthesizes itself (no server fault behind them).
pub(crate) mod names {
    /// The request did not finish within the configured timeout.
    pub const TIMEOUT: &str = "Timeout";
    /// TCP connection or TLS handshake failed.
    pub const CONNECTION: &str = "ConnectionFailed";
    /// The server's certificate was rejected.
    pub const TLS: &str = "TlsCertificate";
    /// The server answered with an HTTP status volmig cannot use.
    pub const HTTP: &str = "HttpStatus";
    /// The server's answer was not the expected XML.
    pub const INVALID_RESPONSE: &str = "InvalidResponse";
    /// The server answered with something else than XML (e.g. an HTML login page).
    pub const CONTENT_TYPE: &str = "UnexpectedContentType";
    /// The server's answer was larger than volmig reads.
    pub const TOO_LARGE: &str = "ResponseTooLarge";
    /// The server answered with a redirect, which volmig never follows.
    pub const REDIRECT: &str = "HttpRedirect";
    /// The datastore of a volume path is not in the searched datacenters.
    pub const DATASTORE_NOT_FOUND: &str = "DatastoreNotFound";
    /// A datastore name exists in more than one searched datacenter.
    pub const AMBIGUOUS_DATASTORE: &str = "AmbiguousDatastore";
    /// A configured datacenter does not exist.
    pub const DATACENTER_NOT_FOUND: &str = "DatacenterNotFound";
    /// CNS reported no result for a volume it was asked to delete.
    pub const VOLUME_NOT_FOUND: &str = "NotFound";
    /// A vCenter task did not finish in time.
    pub const TASK_TIMEOUT: &str = "TaskTimeout";
    /// The configuration cannot work (bad URL, unreadable CA file, ...).
    pub const CONFIG: &str = "InvalidConfiguration";
}

/// The error class of a vim/CNS fault type name (see the module docs).
pub(crate) fn classify(fault: &str) -> ErrorClass {
    match fault {
        "NotAuthenticated" | "InvalidLogin" => ErrorClass::NotAuthenticated,
        "FileNotFound" | "NotFound" | "DatastoreNotFound" => ErrorClass::NotFound,
        "NoPermission"
        | "InvalidArgument"
        | "InvalidDatastorePath"
        | "InvalidProperty"
        | "InvalidRequest"
        | "InvalidType"
        | "MethodNotFound"
        | "NotSupported"
        | "NotImplemented"
        | "AmbiguousDatastore"
        | "DatacenterNotFound"
        | "InvalidConfiguration" => ErrorClass::Permanent,
        _ => ErrorClass::Transient,
    }
}

/// A backend error for a server fault.
pub(crate) fn from_fault(operation: &'static str, fault: &Fault) -> BackendError {
    BackendError::new(
        classify(&fault.name),
        operation,
        fault.name.clone(),
        fault.message.clone(),
    )
}

/// A backend error for an unexpected HTTP status.
pub(crate) fn from_status(operation: &'static str, url: &str, status: u16) -> BackendError {
    BackendError::new(
        ErrorClass::Transient,
        operation,
        names::HTTP,
        format!("{url} answered HTTP {status}"),
    )
}

/// A backend error for a 3xx answer: volmig never follows redirects, so the request (a
/// `Login` body with the password, a session cookie) never reaches `location`.
pub(crate) fn redirect(
    operation: &'static str,
    url: &str,
    status: u16,
    location: Option<&str>,
) -> BackendError {
    let target = location.map_or_else(
        || "without a Location".to_owned(),
        |l| format!("to {}", printable(l, 200)),
    );
    BackendError::new(
        ErrorClass::Transient,
        operation,
        names::REDIRECT,
        format!(
            "{url} answered HTTP {status}, a redirect {target}; volmig does not follow \
             redirects (nothing was sent there): set --vc-url to the address vCenter \
             itself answers on"
        ),
    )
}

/// A backend error for an answer that is not XML (e.g. a proxy's or SSO portal's HTML
/// login page).
pub(crate) fn content_type(
    operation: &'static str,
    url: &str,
    status: u16,
    content_type: &str,
) -> BackendError {
    BackendError::new(
        ErrorClass::Transient,
        operation,
        names::CONTENT_TYPE,
        format!(
            "{url} answered HTTP {status} with content type {}, not a SOAP (XML) answer; \
             is a proxy or login page in front of vCenter?",
            printable(content_type, 100)
        ),
    )
}

/// A backend error for an unparsable answer.
pub(crate) fn malformed(operation: &'static str, url: &str, detail: &str) -> BackendError {
    BackendError::new(
        ErrorClass::Transient,
        operation,
        names::INVALID_RESPONSE,
        format!("unexpected answer from {url}: {detail}"),
    )
}

/// A backend error for a transport failure (connect, TLS, timeout, I/O). The message
/// carries the whole error chain; reqwest errors never contain credentials because volmig
/// never puts any in URLs.
pub(crate) fn from_transport(
    operation: &'static str,
    url: &str,
    timeout: Duration,
    err: &reqwest::Error,
) -> BackendError {
    let chain = error_chain(err);
    let (fault, message) = if err.is_timeout() {
        (
            names::TIMEOUT,
            format!(
                "request to {url} timed out after {timeout:?} (--vc-request-timeout; the \
                 whole answer must arrive within it)"
            ),
        )
    } else if let Some(tls) = certificate_error(err) {
        (
            names::TLS,
            format!(
                "TLS certificate of {url} rejected: {}",
                describe_certificate_error(tls)
            ),
        )
    } else if err.is_connect() {
        (
            names::CONNECTION,
            format!("cannot connect to {url}: {chain}"),
        )
    } else {
        (
            names::CONNECTION,
            format!("request to {url} failed: {chain}"),
        )
    };
    BackendError::new(ErrorClass::Transient, operation, fault, message)
}

/// `err` and all its sources, joined with `: `, without repeating identical parts.
pub(crate) fn error_chain(err: &(dyn StdError + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut current: Option<&(dyn StdError + 'static)> = Some(err);
    while let Some(e) = current {
        let text = e.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        current = e.source();
    }
    parts.join(": ")
}

/// The rustls error and a hint for the operator.
fn describe_certificate_error(err: &rustls::Error) -> String {
    use rustls::CertificateError as C;
    let hint = match err {
        rustls::Error::InvalidCertificate(
            C::NotValidForName | C::NotValidForNameContext { .. },
        ) => {
            " (the certificate was issued for another host name: use the name in vCenter's \
             certificate in --vc-url)"
        }
        rustls::Error::InvalidCertificate(C::UnknownIssuer) => {
            " (not signed by a trusted CA: give vCenter's CA, e.g. its VMCA root, with \
             --vc-ca-file)"
        }
        _ => "",
    };
    match err {
        // rustls shows a custom verifier's error with `Debug`; its `Display` is the message.
        rustls::Error::InvalidCertificate(C::Other(other)) => {
            format!("invalid peer certificate: {other}{hint}")
        }
        _ => format!("{err}{hint}"),
    }
}

#[cfg(test)]
fn is_certificate_error(err: &(dyn StdError + 'static)) -> bool {
    certificate_error(err).is_some()
}

/// The rustls certificate error somewhere in `err`'s chain.
fn certificate_error<'e>(err: &'e (dyn StdError + 'static)) -> Option<&'e rustls::Error> {
    let mut current: Option<&(dyn StdError + 'static)> = Some(err);
    while let Some(e) = current {
        if let Some(tls) = e.downcast_ref::<rustls::Error>() {
            return matches!(
                tls,
                rustls::Error::InvalidCertificate(_) | rustls::Error::NoCertificatesPresented
            )
            .then_some(tls);
        }
        // `io::Error::source` skips the error it wraps: step into it explicitly.
        current = match e
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
        {
            Some(inner) => Some(inner as &(dyn StdError + 'static)),
            None => e.source(),
        };
    }
    None
}

/// Prefixes the error's message with the object it is about.
pub(crate) fn about(mut err: BackendError, object: &str) -> BackendError {
    if !err.message.contains(object) {
        err.message = format!("{object}: {}", err.message);
    }
    err
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::cns::soap::{FaultData, parse_fault};

    fn fault(name: &str) -> Fault {
        Fault::from_data(
            FaultData {
                kind: Some(name.to_owned()),
                ..FaultData::default()
            },
            Some("server says no"),
        )
    }

    #[test]
    fn faults_map_to_the_documented_classes() {
        let cases = [
            ("NotAuthenticated", ErrorClass::NotAuthenticated),
            ("InvalidLogin", ErrorClass::NotAuthenticated),
            ("FileNotFound", ErrorClass::NotFound),
            ("NotFound", ErrorClass::NotFound),
            ("NoPermission", ErrorClass::Permanent),
            ("InvalidArgument", ErrorClass::Permanent),
            ("CnsFault", ErrorClass::Transient),
            ("SystemError", ErrorClass::Transient),
            ("ServerFaultCode", ErrorClass::Transient),
            ("SomethingNew", ErrorClass::Transient),
        ];
        for (name, class) in cases {
            let err = from_fault("CnsCreateVolume", &fault(name));
            assert_eq!(err.class, class, "{name}");
            assert_eq!(err.fault, name);
            assert_eq!(err.operation, "CnsCreateVolume");
            assert_eq!(err.message, "server says no");
        }
    }

    #[test]
    fn a_parsed_fault_keeps_name_and_message_for_last_error() {
        let xml = r#"<soapenv:Envelope xmlns:soapenv="http://schemas.xmlsoap.org/soap/envelope/" xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"><soapenv:Body><soapenv:Fault><faultcode>ServerFaultCode</faultcode><faultstring>File [LocalDS_0] a.vmdk was not found</faultstring><detail><FileNotFoundFault xmlns="urn:vim25" xsi:type="FileNotFound"><file>[LocalDS_0] a.vmdk</file></FileNotFoundFault></detail></soapenv:Fault></soapenv:Body></soapenv:Envelope>"#;
        let err = from_fault("QueryVirtualDiskUuid", &parse_fault(xml).unwrap());
        assert_eq!(err.class, ErrorClass::NotFound);
        assert_eq!(err.fault, "FileNotFound");
        assert_eq!(
            err.to_string(),
            "QueryVirtualDiskUuid failed (FileNotFound): File [LocalDS_0] a.vmdk was not found"
        );
    }

    #[test]
    fn status_and_malformed_answers_are_transient() {
        let err = from_status("CnsQueryVolume", "https://vc/vsanHealth", 503);
        assert_eq!(err.class, ErrorClass::Transient);
        assert!(err.message.contains("HTTP 503"), "{err}");
        let err = malformed("Login", "https://vc/sdk", "missing field");
        assert_eq!(err.class, ErrorClass::Transient);
        assert_eq!(err.fault, names::INVALID_RESPONSE);
    }

    #[test]
    fn synthesized_names_have_sensible_classes() {
        assert_eq!(classify(names::DATASTORE_NOT_FOUND), ErrorClass::NotFound);
        assert_eq!(classify(names::VOLUME_NOT_FOUND), ErrorClass::NotFound);
        assert_eq!(classify(names::AMBIGUOUS_DATASTORE), ErrorClass::Permanent);
        assert_eq!(classify(names::TIMEOUT), ErrorClass::Transient);
        assert_eq!(classify(names::TASK_TIMEOUT), ErrorClass::Transient);
    }

    #[test]
    fn certificate_errors_are_found_inside_io_errors() {
        let tls = rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer);
        let io = std::io::Error::new(std::io::ErrorKind::InvalidData, tls);
        let io = std::io::Error::other(io);
        assert!(is_certificate_error(&io));
        let other = std::io::Error::new(std::io::ErrorKind::InvalidData, "reset");
        assert!(!is_certificate_error(&other));
        let handshake = rustls::Error::HandshakeNotComplete;
        assert!(!is_certificate_error(&handshake));
    }

    #[test]
    fn about_prefixes_the_object() {
        let err = about(
            BackendError::new(ErrorClass::NotFound, "x", "NotFound", "gone"),
            "volume 42",
        );
        assert_eq!(err.message, "volume 42: gone");
        let err = about(err, "volume 42");
        assert_eq!(err.message, "volume 42: gone", "no second prefix");
    }
}
