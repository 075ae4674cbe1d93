//! The SOAP client: HTTP transport, `ServiceContent`, `Login`/`Logout`, the session
//! cookie, and the transparent re-login (once) when vCenter says `NotAuthenticated`.

use std::sync::Mutex;
use std::time::Duration;

use reqwest::header::{CONTENT_TYPE, COOKIE, HeaderMap, SET_COOKIE};
use serde::Serialize;
use serde::de::DeserializeOwned;
use url::Url;

use crate::backend::{BackendError, ErrorClass};

use super::Password;
use super::fault::{self, names};
use super::soap::{
    self, CNS_NS, MoRef, NoContent, ResponseError, Returnval, VIM_NS, envelope, method_xml,
};
use super::vim::{Login, Logout, RetrieveServiceContent, ServiceContent, UserSession};

/// Name of vCenter's session cookie, shared by `/sdk` and `/vsanHealth`.
pub(crate) const SESSION_COOKIE: &str = "vmware_soap_session";
/// API version announced before `ServiceContent` is known.
const INITIAL_API_VERSION: &str = "7.0";

/// Which SOAP endpoint of the vCenter a call goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Endpoint {
    /// vim25 at `/sdk`.
    Sdk,
    /// CNS at `/vsanHealth`.
    Cns,
}

/// The plain HTTP side: where to post envelopes and how long to wait.
pub(crate) struct Transport {
    http: reqwest::Client,
    sdk_url: Url,
    cns_url: Url,
    timeout: Duration,
}

impl Transport {
    /// A transport for the vCenter whose SDK URL is `sdk_url`; the CNS endpoint is
    /// `/vsanHealth` on the same host.
    pub fn new(
        sdk_url: Url,
        tls: rustls::ClientConfig,
        timeout: Duration,
    ) -> Result<Self, BackendError> {
        let mut tls = tls;
        tls.alpn_protocols = vec![b"http/1.1".to_vec()];
        let http = reqwest::Client::builder()
            .tls_backend_preconfigured(tls)
            .http1_only()
            .timeout(timeout)
            .connect_timeout(timeout.min(Duration::from_secs(30)))
            .pool_idle_timeout(Duration::from_secs(50))
            .user_agent(concat!("volmig/", env!("CARGO_PKG_VERSION")))
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
        Ok(Self {
            http,
            sdk_url,
            cns_url,
            timeout,
        })
    }

    /// The SDK URL, as named in messages.
    pub fn sdk_url(&self) -> &Url {
        &self.sdk_url
    }

    fn url(&self, endpoint: Endpoint) -> &Url {
        match endpoint {
            Endpoint::Sdk => &self.sdk_url,
            Endpoint::Cns => &self.cns_url,
        }
    }

    /// Posts one envelope and returns the response headers and the body of a 200 answer;
    /// SOAP faults and other statuses become errors.
    async fn post(
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
        let transport = |e: reqwest::Error| fault::from_transport(operation, url.as_str(), self.timeout, &e);
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

/// The current session: the cookie value as the server sent it, and a generation counter
/// that tells concurrent re-logins apart.
#[derive(Debug, Default, Clone)]
struct Session {
    cookie: Option<String>,
    generation: u64,
}

/// A logged-in SOAP client for one vCenter.
pub(crate) struct SoapClient {
    transport: Transport,
    content: ServiceContent,
    soap_action: String,
    username: String,
    password: Password,
    session: Mutex<Session>,
    login_gate: tokio::sync::Mutex<()>,
}

impl SoapClient {
    /// Reads the `ServiceContent` (no session needed) and returns a client that is not
    /// logged in yet.
    pub async fn new(
        transport: Transport,
        username: String,
        password: Password,
    ) -> Result<Self, BackendError> {
        let op = "RetrieveServiceContent";
        let xml = serialize(
            op,
            "RetrieveServiceContent",
            VIM_NS,
            &RetrieveServiceContent {
                this: MoRef::new("ServiceInstance", "ServiceInstance"),
            },
        )?;
        let action = format!("{VIM_NS}/{INITIAL_API_VERSION}");
        let (_, body) = transport
            .post(Endpoint::Sdk, op, &action, envelope(&xml, None), None)
            .await?;
        let content: ServiceContent = returnval(op, transport.sdk_url(), &body)?;
        tracing::info!(
            vcenter = %transport.sdk_url(),
            product = %content.about.full_name,
            api_version = %content.about.api_version,
            api_type = %content.about.api_type,
            "connected to vCenter"
        );
        let version = if content.about.api_version.is_empty() {
            INITIAL_API_VERSION
        } else {
            content.about.api_version.as_str()
        };
        let soap_action = format!("{VIM_NS}/{version}");
        Ok(Self {
            transport,
            content,
            soap_action,
            username,
            password,
            session: Mutex::new(Session::default()),
            login_gate: tokio::sync::Mutex::new(()),
        })
    }

    /// The vCenter's `ServiceContent`.
    pub fn content(&self) -> &ServiceContent {
        &self.content
    }

    /// The SDK URL.
    pub fn sdk_url(&self) -> &Url {
        self.transport.sdk_url()
    }

    /// The user volmig logs in as.
    pub fn username(&self) -> &str {
        &self.username
    }

    fn session(&self) -> Session {
        self.session.lock().map(|s| s.clone()).unwrap_or_default()
    }

    fn set_session(&self, cookie: Option<String>) {
        if let Ok(mut session) = self.session.lock() {
            session.cookie = cookie;
            session.generation += 1;
        }
    }

    fn session_manager(&self, operation: &'static str) -> Result<&MoRef, BackendError> {
        self.content.session_manager.as_ref().ok_or_else(|| {
            BackendError::new(
                ErrorClass::Permanent,
                operation,
                "NotSupported",
                format!("{} has no SessionManager", self.sdk_url()),
            )
        })
    }

    /// `SessionManager.Login`. Wrong credentials give a `NotAuthenticated` error naming the
    /// vCenter URL and the user, never the password.
    pub async fn login(&self) -> Result<(), BackendError> {
        let op = "Login";
        let this = self.session_manager(op)?;
        let xml = serialize(
            op,
            "Login",
            VIM_NS,
            &Login {
                this,
                user_name: &self.username,
                password: self.password.expose(),
            },
        )?;
        let context = |mut e: BackendError| {
            e.message = format!(
                "login to {} as user '{}' failed: {}",
                self.sdk_url(),
                self.username,
                e.message
            );
            e
        };
        let (headers, body) = self
            .transport
            .post(Endpoint::Sdk, op, &self.soap_action, envelope(&xml, None), None)
            .await
            .map_err(context)?;
        let user: UserSession = returnval(op, self.sdk_url(), &body).map_err(context)?;
        let cookie = session_cookie(&headers).ok_or_else(|| {
            context(BackendError::new(
                ErrorClass::Transient,
                op,
                names::INVALID_RESPONSE,
                format!("no {SESSION_COOKIE} cookie in the answer"),
            ))
        })?;
        self.set_session(Some(cookie));
        tracing::info!(vcenter = %self.sdk_url(), user = %user.user_name, "logged in to vCenter");
        Ok(())
    }

    /// `SessionManager.Logout`; errors are logged, not returned.
    pub async fn logout(&self) {
        let _gate = self.login_gate.lock().await;
        let Some(cookie) = self.session().cookie else {
            return;
        };
        let result = async {
            let op = "Logout";
            let this = self.session_manager(op)?;
            let xml = serialize(op, "Logout", VIM_NS, &Logout { this })?;
            self.transport
                .post(Endpoint::Sdk, op, &self.soap_action, envelope(&xml, None), Some(&cookie))
                .await
        }
        .await;
        self.set_session(None);
        match result {
            Ok(_) => tracing::info!(vcenter = %self.sdk_url(), "logged out of vCenter"),
            Err(err) => tracing::warn!(vcenter = %self.sdk_url(), error = %err, "logout failed"),
        }
    }

    /// Logs in again unless another task already did since `stale_generation`.
    async fn relogin(&self, stale_generation: u64) -> Result<(), BackendError> {
        let _gate = self.login_gate.lock().await;
        if self.session().generation != stale_generation {
            return Ok(());
        }
        tracing::info!(vcenter = %self.sdk_url(), "vCenter session is not valid any more; logging in again");
        self.login().await
    }

    /// Calls `method` with `body` and parses the response element as `T`. A
    /// `NotAuthenticated` answer triggers one re-login and one retry.
    pub async fn call<B: Serialize, T: DeserializeOwned>(
        &self,
        endpoint: Endpoint,
        operation: &'static str,
        method: &str,
        body: &B,
    ) -> Result<T, BackendError> {
        let namespace = match endpoint {
            Endpoint::Sdk => VIM_NS,
            Endpoint::Cns => CNS_NS,
        };
        let xml = serialize(operation, method, namespace, body)?;
        let mut relogged = false;
        loop {
            let session = self.session();
            let result = self.call_once(endpoint, operation, &xml, session.cookie.as_deref()).await;
            match result {
                Err(err) if err.class == ErrorClass::NotAuthenticated && !relogged => {
                    tracing::debug!(operation, fault = %err.fault, "not authenticated; re-login");
                    self.relogin(session.generation).await?;
                    relogged = true;
                }
                other => return other,
            }
        }
    }

    async fn call_once<T: DeserializeOwned>(
        &self,
        endpoint: Endpoint,
        operation: &'static str,
        xml: &str,
        cookie: Option<&str>,
    ) -> Result<T, BackendError> {
        let header = match endpoint {
            Endpoint::Cns => cookie.map(unquote),
            Endpoint::Sdk => None,
        };
        let (_, body) = self
            .transport
            .post(endpoint, operation, &self.soap_action, envelope(xml, header), cookie)
            .await?;
        parse(operation, self.transport.url(endpoint), &body)
    }
}

fn serialize<B: Serialize>(
    operation: &'static str,
    method: &str,
    namespace: &str,
    body: &B,
) -> Result<String, BackendError> {
    // The serializer error never contains field values, so no credential can leak here.
    method_xml(method, namespace, body).map_err(|e| {
        BackendError::new(
            ErrorClass::Permanent,
            operation,
            "InvalidRequest",
            format!("cannot serialize {method}: {e}"),
        )
    })
}

fn parse<T: DeserializeOwned>(
    operation: &'static str,
    url: &Url,
    body: &str,
) -> Result<T, BackendError> {
    soap::parse_response(body).map_err(|err| match err {
        ResponseError::Fault(f) => fault::from_fault(operation, &f),
        ResponseError::Malformed(detail) => fault::malformed(operation, url.as_str(), &detail),
    })
}

fn returnval<T: DeserializeOwned>(
    operation: &'static str,
    url: &Url,
    body: &str,
) -> Result<T, BackendError> {
    parse::<Returnval<T>>(operation, url, body)?
        .returnval
        .ok_or_else(|| fault::malformed(operation, url.as_str(), "no returnval"))
}

/// Parses a response that has nothing but an optional `returnval`.
pub(crate) type Empty = NoContent;

/// The value of the session cookie among `Set-Cookie` headers, as sent.
fn session_cookie(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(SET_COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .filter_map(|value| value.split(';').next())
        .filter_map(|pair| pair.split_once('='))
        .find(|(name, _)| name.trim() == SESSION_COOKIE)
        .map(|(_, value)| value.trim().to_owned())
        .filter(|value| !value.is_empty())
}

fn unquote(value: &str) -> &str {
    value
        .strip_prefix('"')
        .and_then(|v| v.strip_suffix('"'))
        .unwrap_or(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    #[test]
    fn the_session_cookie_is_found_among_others() {
        let mut headers = HeaderMap::new();
        headers.append(SET_COOKIE, HeaderValue::from_static("other=1; Path=/"));
        headers.append(
            SET_COOKIE,
            HeaderValue::from_static("vmware_soap_session=\"52ab\"; Path=/; HttpOnly; Secure"),
        );
        assert_eq!(session_cookie(&headers).as_deref(), Some("\"52ab\""));
        assert_eq!(unquote("\"52ab\""), "52ab");
        assert_eq!(unquote("52ab"), "52ab");
    }

    #[test]
    fn no_session_cookie_is_none() {
        let mut headers = HeaderMap::new();
        headers.append(SET_COOKIE, HeaderValue::from_static("vmware_soap_session=; Path=/"));
        assert_eq!(session_cookie(&headers), None);
        assert_eq!(session_cookie(&HeaderMap::new()), None);
    }
}
