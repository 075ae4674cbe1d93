//! The plain HTTP side of the SOAP client: one reqwest client, the two endpoint URLs,
//! the request timeout, and turning HTTP answers into bodies or errors.
//!
//! A vCenter (or whatever answers in its place) is not trusted to behave: redirects are
//! never followed (a `Location` elsewhere would get the `Login` password or the session
//! cookie), bodies are read up to [`MAX_RESPONSE_BYTES`] only, non-XML content types and
//! malformed or absurdly nested XML are refused before any decoding, and the request
//! timeout covers the whole exchange, body included (reqwest's total timeout).

use std::time::Duration;

use reqwest::header::{CONTENT_TYPE, COOKIE, HeaderMap, LOCATION};
use url::Url;

use crate::backend::{BackendError, ErrorClass};

use super::fault::{self, names};
use super::soap;

/// Name of vCenter's session cookie, shared by `/sdk` and `/vsanHealth`.
pub(crate) const SESSION_COOKIE: &str = "vmware_soap_session";

/// The largest response body volmig reads. The biggest answers are `CnsQueryVolume`
/// pages of 500 volumes: about 1 KiB per volume as the simulator answers
/// (`fixtures/query_volume.xml`), and a real vCenter adds per volume the storage policy,
/// capacity, health and the CSI driver's entity metadata (PV, PVC and pod entries with
/// their labels), so a generous 8 KiB per volume is 4 MiB a page. 32 MiB is eight times
/// that: far above any real page or inventory answer, and a bounded amount of memory per
/// request (volmig runs a handful of requests at a time). Anything larger is refused.
pub(crate) const MAX_RESPONSE_BYTES: usize = 32 << 20;

// The bound holds a generous 500-volume page (8 KiB a volume) eight times, and stays a
// bounded amount of memory.
const _: () = assert!(MAX_RESPONSE_BYTES >= 8 * 500 * 8 * 1024 && MAX_RESPONSE_BYTES <= 64 << 20);

/// Which SOAP endpoint of the vCenter a call goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Endpoint {
    /// vim25 at `/sdk`.
    Sdk,
    /// CNS at `/vsanHealth`.
    Cns,
    /// Storage policies (PBM) at `/pbm/sdk`.
    Pbm,
    /// Virtual storage lifecycle management (VSLM) at `/vslm/sdk`.
    Vslm,
}

impl Endpoint {
    /// The XML namespace of this endpoint's request elements.
    pub(crate) fn namespace(self) -> &'static str {
        match self {
            Endpoint::Sdk => soap::VIM_NS,
            Endpoint::Cns => soap::CNS_NS,
            Endpoint::Pbm => "urn:pbm",
            Endpoint::Vslm => "urn:vslm",
        }
    }

    /// True for the endpoints beside `/sdk` that read the session from the
    /// `vcSessionCookie` SOAP header (the cookie is sent too).
    pub(crate) fn session_header(self) -> bool {
        !matches!(self, Endpoint::Sdk)
    }

    /// The `SOAPAction` of a call: `/sdk` and `/vsanHealth` get the vim25 action of the
    /// connected vCenter; PBM and VSLM get their namespace with an empty version, which
    /// vCenter answers with its default version (as govmomi's service clients send it).
    pub(crate) fn soap_action(self, vim_action: &str) -> std::borrow::Cow<'_, str> {
        match self {
            Endpoint::Sdk | Endpoint::Cns => std::borrow::Cow::Borrowed(vim_action),
            Endpoint::Pbm | Endpoint::Vslm => {
                std::borrow::Cow::Owned(format!("{}/", self.namespace()))
            }
        }
    }
}

/// The plain HTTP side: where to post envelopes and how long to wait.
pub(crate) struct Transport {
    http: reqwest::Client,
    sdk_url: Url,
    cns_url: Url,
    pbm_url: Url,
    vslm_url: Url,
    timeout: Duration,
}

impl Transport {
    /// A transport for the vCenter whose SDK URL is `sdk_url`; the CNS endpoint is
    /// `/vsanHealth` on the same host.
    pub fn new(
        sdk_url: Url,
        tls: rustls::ClientConfig,
        timeout: Duration,
        user_agent: &str,
    ) -> Result<Self, BackendError> {
        let mut tls = tls;
        tls.alpn_protocols = vec![b"http/1.1".to_vec()];
        let http = reqwest::Client::builder()
            .tls_backend_preconfigured(tls)
            .http1_only()
            // Total timeout: connect, headers and the whole body (a server that sends a
            // byte every few seconds is cut off at `timeout`, too).
            .timeout(timeout)
            // Never follow redirects: a 307 would re-send the Login body (the password)
            // and a cookie to wherever `Location` points. 3xx answers become errors.
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(timeout.min(Duration::from_secs(30)))
            .pool_idle_timeout(Duration::from_secs(50))
            .user_agent(user_agent)
            .build()
            .map_err(|e| {
                BackendError::new(
                    ErrorClass::Permanent,
                    "Connect",
                    names::CONFIG,
                    format!("cannot build the HTTP client: {}", fault::error_chain(&e)),
                )
            })?;
        let mut cns_url = sdk_url.clone();
        cns_url.set_path("/vsanHealth");
        cns_url.set_query(None);
        let mut pbm_url = cns_url.clone();
        pbm_url.set_path("/pbm/sdk");
        let mut vslm_url = cns_url.clone();
        vslm_url.set_path("/vslm/sdk");
        Ok(Self {
            http,
            sdk_url,
            cns_url,
            pbm_url,
            vslm_url,
            timeout,
        })
    }

    /// The SDK URL, as named in messages.
    pub fn sdk_url(&self) -> &Url {
        &self.sdk_url
    }

    pub(crate) fn url(&self, endpoint: Endpoint) -> &Url {
        match endpoint {
            Endpoint::Sdk => &self.sdk_url,
            Endpoint::Cns => &self.cns_url,
            Endpoint::Pbm => &self.pbm_url,
            Endpoint::Vslm => &self.vslm_url,
        }
    }

    /// Posts one envelope and returns the response headers and the body of a 200 answer;
    /// SOAP faults and other statuses become errors.
    pub(crate) async fn post(
        &self,
        endpoint: Endpoint,
        operation: &'static str,
        soap_action: &str,
        body: String,
        cookie: Option<&str>,
    ) -> Result<(HeaderMap, String), BackendError> {
        let url = self.url(endpoint);
        let mut request = self
            .http
            .post(url.clone())
            .header(CONTENT_TYPE, "text/xml; charset=utf-8")
            .header("SOAPAction", soap_action)
            .body(body);
        if let Some(cookie) = cookie {
            request = request.header(COOKIE, format!("{SESSION_COOKIE}={cookie}"));
        }
        let transport =
            |e: reqwest::Error| fault::from_transport(operation, url.as_str(), self.timeout, &e);
        let mut response = request.send().await.map_err(transport)?;
        let status = response.status();
        let headers = response.headers().clone();
        if status.is_redirection() {
            return Err(fault::redirect(
                operation,
                url.as_str(),
                status.as_u16(),
                headers.get(LOCATION).and_then(|l| l.to_str().ok()),
            ));
        }
        // No Content-Type is tolerated (the XML check decides); any other type than XML
        // on a 200 is refused unread. Other statuses keep their HTTP status error.
        let content_type = headers.get(CONTENT_TYPE).and_then(|v| v.to_str().ok());
        let xml = content_type.is_none_or(is_xml_content_type);
        if status.is_success()
            && let Some(content_type) = content_type.filter(|_| !xml)
        {
            return Err(fault::content_type(
                operation,
                url.as_str(),
                status.as_u16(),
                content_type,
            ));
        }
        let text = read_body(&mut response, operation, url.as_str(), &transport).await?;
        if status.is_success() {
            // Well-formed and not absurdly nested before serde decodes anything.
            soap::check_xml(&text)
                .map_err(|detail| fault::malformed(operation, url.as_str(), &detail))?;
            return Ok((headers, text));
        }
        if status.as_u16() == 500
            && xml
            && soap::check_xml(&text).is_ok()
            && let Some(fault) = soap::parse_fault(&text)
        {
            return Err(fault::from_fault(operation, &fault));
        }
        Err(fault::from_status(operation, url.as_str(), status.as_u16()))
    }
}

/// True for the content types a SOAP answer comes with: `text/xml` (SOAP 1.1, what
/// vCenter sends), `application/soap+xml` (SOAP 1.2) and `application/xml`.
fn is_xml_content_type(content_type: &str) -> bool {
    let mime = content_type
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    matches!(
        mime.as_str(),
        "text/xml" | "application/xml" | "application/soap+xml"
    )
}

/// A backend error for a body over [`MAX_RESPONSE_BYTES`].
fn too_large(operation: &'static str, url: &str, declared: Option<u64>) -> BackendError {
    let limit = MAX_RESPONSE_BYTES;
    let size = declared.map_or_else(
        || format!("more than {limit} bytes (stopped reading there)"),
        |n| format!("{n} bytes (Content-Length; not read)"),
    );
    BackendError::new(
        ErrorClass::Transient,
        operation,
        names::TOO_LARGE,
        format!("answer from {url} is too large: {size}; volmig reads at most {limit} bytes"),
    )
}

/// Reads the body, at most [`MAX_RESPONSE_BYTES`]: a larger `Content-Length` is refused
/// before reading, a longer stream is cut off as soon as it passes the bound.
async fn read_body(
    response: &mut reqwest::Response,
    operation: &'static str,
    url: &str,
    transport: &impl Fn(reqwest::Error) -> BackendError,
) -> Result<String, BackendError> {
    if let Some(length) = response.content_length()
        && length > MAX_RESPONSE_BYTES as u64
    {
        return Err(too_large(operation, url, Some(length)));
    }
    let capacity = response.content_length().map_or(0, |l| {
        usize::try_from(l).unwrap_or(0).min(MAX_RESPONSE_BYTES)
    });
    let mut body: Vec<u8> = Vec::with_capacity(capacity);
    while let Some(chunk) = response.chunk().await.map_err(transport)? {
        if body.len() + chunk.len() > MAX_RESPONSE_BYTES {
            return Err(too_large(operation, url, None));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(match String::from_utf8(body) {
        Ok(text) => text,
        Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_xml_content_types_are_soap() {
        for ok in [
            "text/xml",
            "text/xml; charset=utf-8",
            "TEXT/XML;charset=UTF-8",
            "application/soap+xml; charset=utf-8",
            "application/xml",
        ] {
            assert!(is_xml_content_type(ok), "{ok}");
        }
        for bad in [
            "text/html",
            "text/html; charset=utf-8",
            "application/json",
            "",
            "text/xmlx",
        ] {
            assert!(!is_xml_content_type(bad), "{bad}");
        }
    }
}
