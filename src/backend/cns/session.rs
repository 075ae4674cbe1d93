//! The SOAP client on top of the transport: `ServiceContent`, `Login`/`Logout`, the session
//! cookie, and the transparent re-login (once) when vCenter says `NotAuthenticated`.

use std::sync::Mutex;

use reqwest::header::{HeaderMap, SET_COOKIE};
use serde::Serialize;
use serde::de::DeserializeOwned;
use url::Url;

use crate::backend::INVALID_LOGIN_FAULT as INVALID_LOGIN;
use crate::backend::{BackendError, ErrorClass};
use crate::credentials::Password;

use super::fault::{self, names};
use super::soap::{self, MoRef, ResponseError, Returnval, VIM_NS, envelope, method_xml};
use super::transport::{Endpoint, SESSION_COOKIE, Transport};
use super::vim::{Login, Logout, RetrieveServiceContent, ServiceContent, UserSession};

/// API version announced before `ServiceContent` is known.
const INITIAL_API_VERSION: &str = "7.0";

/// The current session: the cookie value as the server sent it, a generation counter
/// that tells concurrent re-logins apart, and the error of the last login attempt when it
/// failed (shared with every caller that waited for that attempt).
#[derive(Debug, Default, Clone)]
struct Session {
    cookie: Option<String>,
    generation: u64,
    failed_login: Option<BackendError>,
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
            session.failed_login = None;
        }
    }

    /// Records a failed login: a new generation without a cookie, so callers that waited
    /// for this attempt get its error instead of logging in again themselves.
    fn set_failed_login(&self, err: &BackendError) {
        if let Ok(mut session) = self.session.lock() {
            session.cookie = None;
            session.generation += 1;
            session.failed_login = Some(err.clone());
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

    /// `SessionManager.Login`. Wrong credentials give a `NotAuthenticated` error with fault
    /// `InvalidLogin` naming the vCenter URL and the user, never the password. Callers
    /// above ([`crate::backend::on_demand`]) turn it into a backed-off, permanent error.
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
            if e.class == ErrorClass::NotAuthenticated && e.fault != INVALID_LOGIN {
                // NotAuthenticated in answer to Login itself: the credentials were refused.
                e.message = format!("{} ({})", e.message, e.fault);
                e.fault = INVALID_LOGIN.to_owned();
            }
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
            .post(
                Endpoint::Sdk,
                op,
                &self.soap_action,
                envelope(&xml, None),
                None,
            )
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
                .post(
                    Endpoint::Sdk,
                    op,
                    &self.soap_action,
                    envelope(&xml, None),
                    Some(&cookie),
                )
                .await
        }
        .await;
        self.set_session(None);
        match result {
            Ok(_) => tracing::info!(vcenter = %self.sdk_url(), "logged out of vCenter"),
            Err(err) => tracing::warn!(vcenter = %self.sdk_url(), error = %err, "logout failed"),
        }
    }

    /// Logs in again unless another task already tried since `stale_generation`; then its
    /// outcome is shared: one login attempt for all the callers that found the session
    /// expired at the same time, whether it succeeds or fails.
    async fn relogin(&self, stale_generation: u64) -> Result<(), BackendError> {
        let _gate = self.login_gate.lock().await;
        let session = self.session();
        if session.generation != stale_generation {
            return match session.failed_login {
                Some(err) => Err(err),
                None => Ok(()),
            };
        }
        tracing::info!(vcenter = %self.sdk_url(), "vCenter session is not valid any more; logging in again");
        let result = self.login().await;
        if let Err(err) = &result {
            self.set_failed_login(err);
        }
        result
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
        self.call_checked(endpoint, operation, method, body, &|| Ok(()))
            .await
    }

    /// [`Self::call`], asking `before_send` right before each time the request is written:
    /// the first send and the one after a re-login (which can take seconds). A create's
    /// fence is asked there, so no create leaves after leadership or the registrar mode
    /// was lost meanwhile (docs/design.md §4.9).
    pub async fn call_checked<B: Serialize, T: DeserializeOwned>(
        &self,
        endpoint: Endpoint,
        operation: &'static str,
        method: &str,
        body: &B,
        before_send: &(dyn Fn() -> Result<(), BackendError> + Send + Sync),
    ) -> Result<T, BackendError> {
        let namespace = endpoint.namespace();
        let xml = serialize(operation, method, namespace, body)?;
        let mut relogged = false;
        loop {
            let session = self.session();
            if let Some(err) = session.failed_login.filter(|e| e.fault == INVALID_LOGIN) {
                // The credentials were refused: no call (and no login) until a new client
                // with current credentials replaces this one, or `logout` resets it.
                return Err(err);
            }
            before_send()?;
            let result = self
                .call_once(endpoint, operation, &xml, session.cookie.as_deref())
                .await;
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
        let header = cookie.filter(|_| endpoint.session_header()).map(unquote);
        let (_, body) = self
            .transport
            .post(
                endpoint,
                operation,
                &endpoint.soap_action(&self.soap_action),
                envelope(xml, header),
                cookie,
            )
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
        headers.append(
            SET_COOKIE,
            HeaderValue::from_static("vmware_soap_session=; Path=/"),
        );
        assert_eq!(session_cookie(&headers), None);
        assert_eq!(session_cookie(&HeaderMap::new()), None);
    }
}
