//! The plain HTTP side of the SOAP client: one reqwest client, the two endpoint URLs,
//! the request timeout, and turning HTTP answers into bodies or errors.

use std::time::Duration;

use reqwest::header::{CONTENT_TYPE, COOKIE, HeaderMap};
use url::Url;

use crate::backend::{BackendError, ErrorClass};

use super::fault::{self, names};
use super::soap;

/// Name of vCenter's session cookie, shared by `/sdk` and `/vsanHealth`.
pub(crate) const SESSION_COOKIE: &str = "vmware_soap_session";

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
            .timeout(timeout)
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
        let response = request.send().await.map_err(transport)?;
        let status = response.status();
        let headers = response.headers().clone();
        let text = response.text().await.map_err(transport)?;
        if status.is_success() {
            return Ok((headers, text));
        }
        if status.as_u16() == 500
            && let Some(fault) = soap::parse_fault(&text)
        {
            return Err(fault::from_fault(operation, &fault));
        }
        Err(fault::from_status(operation, url.as_str(), status.as_u16()))
    }
}
