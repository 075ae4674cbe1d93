//! Authentication (bearer tokens) and authorization (RBAC), like kube-apiserver:
//!
//! - the admin token of the written kubeconfig is user `admin` in group `system:masters`
//!   (full access);
//! - `POST /api/v1/namespaces/{ns}/serviceaccounts/{name}/token` (TokenRequest, what
//!   `kubectl create token` calls) mints a token for `system:serviceaccount:{ns}:{name}`,
//!   valid until it expires or the ServiceAccount is deleted;
//! - a request without a token is `system:anonymous` (group `system:unauthenticated`); an
//!   unknown, expired or revoked token is 401 `Unauthorized`;
//! - every request of a user outside `system:masters` is authorized by the stored Roles,
//!   ClusterRoles, RoleBindings and ClusterRoleBindings plus the built-in discovery and
//!   self-review rules ([`rbac`]); a denial is 403 with the API server's message.

pub mod rbac;
pub mod review;

use std::collections::HashMap;

use axum::http::HeaderMap;
use base64::Engine;
use serde_json::{Value, json};

use crate::error::ApiError;
use crate::http::path::ResourcePath;
use crate::registry::StorageKey;
use crate::store::Store;

/// The bearer token of the kubeconfig the server writes.
pub const ADMIN_TOKEN: &str = "kube-testserver-token";
/// The user name of [`ADMIN_TOKEN`].
pub const ADMIN_USER: &str = "admin";
/// The group that bypasses authorization.
pub const MASTERS: &str = "system:masters";
/// Every authenticated user is in this group.
pub const AUTHENTICATED: &str = "system:authenticated";
/// The group of requests without credentials.
pub const UNAUTHENTICATED: &str = "system:unauthenticated";
/// The user of requests without credentials.
pub const ANONYMOUS: &str = "system:anonymous";
/// Default lifetime of a minted token (TokenRequest's default `expirationSeconds`).
pub const DEFAULT_TOKEN_SECONDS: i64 = 3600;
/// Shortest lifetime TokenRequest accepts.
pub const MIN_TOKEN_SECONDS: i64 = 600;
/// The audience of minted tokens when the request names none.
pub const DEFAULT_AUDIENCE: &str = "https://kubernetes.default.svc.cluster.local";

/// Who a request comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserInfo {
    /// User name, e.g. `system:serviceaccount:volmig:volmig`.
    pub name: String,
    /// Groups.
    pub groups: Vec<String>,
}

impl UserInfo {
    /// The admin user of the written kubeconfig.
    pub fn admin() -> Self {
        UserInfo {
            name: ADMIN_USER.into(),
            groups: vec![MASTERS.into(), AUTHENTICATED.into()],
        }
    }

    /// The anonymous user.
    pub fn anonymous() -> Self {
        UserInfo {
            name: ANONYMOUS.into(),
            groups: vec![UNAUTHENTICATED.into()],
        }
    }

    /// The user of a ServiceAccount.
    pub fn service_account(namespace: &str, name: &str) -> Self {
        UserInfo {
            name: service_account_user(namespace, name),
            groups: vec![
                "system:serviceaccounts".into(),
                format!("system:serviceaccounts:{namespace}"),
                AUTHENTICATED.into(),
            ],
        }
    }

    /// Whether the user is in `group`.
    pub fn in_group(&self, group: &str) -> bool {
        self.groups.iter().any(|g| g == group)
    }
}

/// `system:serviceaccount:{namespace}:{name}`.
pub fn service_account_user(namespace: &str, name: &str) -> String {
    format!("system:serviceaccount:{namespace}:{name}")
}

/// What a token stands for.
#[derive(Debug, Clone)]
enum Entry {
    /// A fixed identity (the admin token, tokens added by tests).
    Static(UserInfo),
    /// A ServiceAccount token: valid while that ServiceAccount (same UID) exists and until
    /// it expires.
    ServiceAccount {
        namespace: String,
        name: String,
        uid: String,
        expires: jiff::Timestamp,
    },
}

/// The token registry.
#[derive(Debug)]
pub struct Tokens {
    by_token: HashMap<String, Entry>,
}

impl Default for Tokens {
    fn default() -> Self {
        let mut by_token = HashMap::new();
        by_token.insert(ADMIN_TOKEN.to_string(), Entry::Static(UserInfo::admin()));
        Tokens { by_token }
    }
}

fn sa_key() -> StorageKey {
    StorageKey {
        group: String::new(),
        resource: "serviceaccounts".into(),
    }
}

/// A minted ServiceAccount token.
#[derive(Debug, Clone)]
pub struct Minted {
    /// The bearer token.
    pub token: String,
    /// When it stops being accepted.
    pub expires: jiff::Timestamp,
    /// Its audiences.
    pub audiences: Vec<String>,
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

impl Tokens {
    /// Adds a token with a fixed identity.
    pub fn add_static(&mut self, token: &str, user: UserInfo) {
        self.by_token.insert(token.to_string(), Entry::Static(user));
    }

    /// Mints a token for the ServiceAccount `namespace/name`, which must exist in `store`.
    /// The token is JWT-shaped (header, claims, random signature) like the real ones, but
    /// only this server's registry makes it valid.
    pub fn mint(
        &mut self,
        store: &Store,
        namespace: &str,
        name: &str,
        seconds: i64,
        audiences: Vec<String>,
    ) -> Result<Minted, ApiError> {
        let sa = store.get(&sa_key(), namespace, name).ok_or_else(|| {
            ApiError::not_found(crate::error::Target {
                resource: "serviceaccounts",
                group: "",
                name,
            })
        })?;
        let uid = crate::meta::get_str(sa, "uid").to_string();
        let now = jiff::Timestamp::now();
        let expires = now
            .checked_add(jiff::SignedDuration::from_secs(seconds))
            .map_err(|e| ApiError::bad_request(format!("expirationSeconds {seconds}: {e}")))?;
        let audiences = if audiences.is_empty() {
            vec![DEFAULT_AUDIENCE.to_string()]
        } else {
            audiences
        };
        let header = json!({"alg": "RS256", "kid": "kube-testserver"});
        let claims = json!({
            "aud": audiences,
            "exp": expires.as_second(),
            "iat": now.as_second(),
            "nbf": now.as_second(),
            "iss": DEFAULT_AUDIENCE,
            "sub": service_account_user(namespace, name),
            "kubernetes.io": {
                "namespace": namespace,
                "serviceaccount": {"name": name, "uid": uid},
            },
        });
        let signature: [u8; 32] = rand::random();
        let token = format!(
            "{}.{}.{}",
            b64(header.to_string().as_bytes()),
            b64(claims.to_string().as_bytes()),
            b64(&signature)
        );
        self.by_token.insert(
            token.clone(),
            Entry::ServiceAccount {
                namespace: namespace.to_string(),
                name: name.to_string(),
                uid,
                expires,
            },
        );
        Ok(Minted {
            token,
            expires,
            audiences,
        })
    }

    /// The identity of `token`, if it is valid now.
    pub fn lookup(&self, store: &Store, token: &str) -> Option<UserInfo> {
        match self.by_token.get(token)? {
            Entry::Static(u) => Some(u.clone()),
            Entry::ServiceAccount {
                namespace,
                name,
                uid,
                expires,
            } => {
                if jiff::Timestamp::now() >= *expires {
                    return None;
                }
                let sa = store.get(&sa_key(), namespace, name)?;
                (crate::meta::get_str(sa, "uid") == uid)
                    .then(|| UserInfo::service_account(namespace, name))
            }
        }
    }
}

/// 401 Unauthorized, as kube-apiserver answers a bad token.
pub fn unauthorized() -> ApiError {
    ApiError {
        code: 401,
        reason: "Unauthorized",
        message: "Unauthorized".into(),
        details: None,
        retry_after: None,
    }
}

/// The bearer token of a request: `Ok(None)` without an `Authorization` header, `Err` for
/// a header that is not a usable bearer token.
pub fn bearer(headers: &HeaderMap) -> Result<Option<&str>, ApiError> {
    let Some(v) = headers.get(axum::http::header::AUTHORIZATION) else {
        return Ok(None);
    };
    let v = v.to_str().map_err(|_| unauthorized())?;
    let (scheme, token) = v.split_once(' ').ok_or_else(unauthorized)?;
    let token = token.trim();
    if !scheme.eq_ignore_ascii_case("bearer") || token.is_empty() {
        return Err(unauthorized());
    }
    Ok(Some(token))
}

/// What an authorizer decides on: the attributes of one request, as kube-apiserver's
/// RequestInfo resolves them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attributes {
    /// `get`, `list`, `watch`, `create`, … (resource requests) or the lower-case HTTP
    /// method (non-resource requests).
    pub verb: String,
    /// Resource request or not.
    pub resource_request: bool,
    /// API group ("" for core).
    pub group: String,
    /// API version.
    pub version: String,
    /// Plural resource.
    pub resource: String,
    /// Subresource ("" for none).
    pub subresource: String,
    /// Namespace ("" for cluster scope).
    pub namespace: String,
    /// Object name ("" for collections and creates).
    pub name: String,
    /// URL path (non-resource requests).
    pub path: String,
}

/// The `metadata.name` an exact-match field selector requires, if any.
fn field_selector_name(raw_query: Option<&str>) -> Option<String> {
    let raw = raw_query?;
    let (_, selector) = crate::http::query::pairs(raw)
        .into_iter()
        .find(|(k, _)| k == "fieldSelector")?;
    selector.split(',').find_map(|term| {
        let term = term.trim();
        let value = term
            .strip_prefix("metadata.name==")
            .or_else(|| term.strip_prefix("metadata.name="))?;
        (!value.is_empty() && crate::meta::is_path_segment_name(value)).then(|| value.to_string())
    })
}

impl Attributes {
    /// The attributes of a resource request with authorization verb `verb`.
    pub fn resource(rp: &ResourcePath, verb: &str, raw_query: Option<&str>) -> Self {
        let mut name = rp.name.clone().unwrap_or_default();
        // `/api/v1/namespaces/{name}` is in namespace {name}, like kube-apiserver has it.
        let mut namespace = rp.namespace.clone().unwrap_or_default();
        if rp.group.is_empty() && rp.plural == "namespaces" && rp.namespace.is_none() {
            namespace = name.clone();
        }
        if name.is_empty()
            && (verb == "list" || verb == "watch")
            && let Some(n) = field_selector_name(raw_query)
        {
            name = n;
        }
        Attributes {
            verb: verb.to_string(),
            resource_request: true,
            group: rp.group.clone(),
            version: rp.version.clone(),
            resource: rp.plural.clone(),
            subresource: rp.subresource.clone().unwrap_or_default(),
            namespace,
            name,
            path: String::new(),
        }
    }

    /// The attributes of a non-resource request.
    pub fn non_resource(method: &str, path: &str) -> Self {
        Attributes {
            verb: method.to_ascii_lowercase(),
            resource_request: false,
            group: String::new(),
            version: String::new(),
            resource: String::new(),
            subresource: String::new(),
            namespace: String::new(),
            name: String::new(),
            path: path.to_string(),
        }
    }

    /// `resource` or `resource/subresource`.
    pub fn combined_resource(&self) -> String {
        if self.subresource.is_empty() {
            self.resource.clone()
        } else {
            format!("{}/{}", self.resource, self.subresource)
        }
    }

    /// The text after `is forbidden: ` in kube-apiserver's denial.
    pub fn forbidden_message(&self, user: &str) -> String {
        if !self.resource_request {
            return format!("User {user:?} cannot {} path {:?}", self.verb, self.path);
        }
        let resource = self.combined_resource();
        if self.namespace.is_empty() {
            format!(
                "User {user:?} cannot {} resource {resource:?} in API group {:?} at the cluster scope",
                self.verb, self.group
            )
        } else {
            format!(
                "User {user:?} cannot {} resource {resource:?} in API group {:?} in the namespace {:?}",
                self.verb, self.group, self.namespace
            )
        }
    }

    /// The 403 of a denied request (`reason` is the authorizer's, e.g. a missing role).
    pub fn forbidden(&self, user: &str, reason: &str) -> ApiError {
        let mut msg = self.forbidden_message(user);
        if !reason.is_empty() {
            msg = format!("{msg}: {reason}");
        }
        let qualified = if !self.resource_request {
            String::new()
        } else if self.group.is_empty() {
            self.resource.clone()
        } else {
            format!("{}.{}", self.resource, self.group)
        };
        let message = if qualified.is_empty() {
            format!("forbidden: {msg}")
        } else if self.name.is_empty() {
            format!("{qualified} is forbidden: {msg}")
        } else {
            format!("{qualified} {:?} is forbidden: {msg}", self.name)
        };
        let mut e = ApiError::forbidden(message);
        e.details = Some(json!({
            "name": self.name,
            "group": self.group,
            "kind": self.resource,
        }));
        if let Some(Value::Object(d)) = e.details.as_mut() {
            if self.name.is_empty() {
                d.remove("name");
            }
            if self.group.is_empty() {
                d.remove("group");
            }
            if self.resource.is_empty() {
                d.remove("kind");
            }
        }
        e
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rp(path: &str) -> ResourcePath {
        match crate::http::path::route(path) {
            crate::http::path::Route::Resource(r) => r,
            other => panic!("{path}: {other:?}"),
        }
    }

    #[test]
    fn messages_match_kube_apiserver() {
        let a = Attributes::resource(&rp("/api/v1/persistentvolumes"), "list", None);
        assert_eq!(
            a.forbidden("system:serviceaccount:volmig:volmig", "")
                .message,
            "persistentvolumes is forbidden: User \"system:serviceaccount:volmig:volmig\" cannot list resource \"persistentvolumes\" in API group \"\" at the cluster scope"
        );
        let a = Attributes::resource(
            &rp("/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/volmig"),
            "get",
            None,
        );
        assert_eq!(
            a.forbidden("u", "").message,
            "leases.coordination.k8s.io \"volmig\" is forbidden: User \"u\" cannot get resource \"leases\" in API group \"coordination.k8s.io\" in the namespace \"kube-system\""
        );
        let a = Attributes::resource(
            &rp("/apis/volmig.io/v1alpha1/volumemigrations/x/status"),
            "patch",
            None,
        );
        let e = a.forbidden(
            "u",
            "RBAC: clusterrole.rbac.authorization.k8s.io \"r\" not found",
        );
        assert_eq!(
            e.message,
            "volumemigrations.volmig.io \"x\" is forbidden: User \"u\" cannot patch resource \"volumemigrations/status\" in API group \"volmig.io\" at the cluster scope: RBAC: clusterrole.rbac.authorization.k8s.io \"r\" not found"
        );
        assert_eq!(e.status()["details"]["kind"], "volumemigrations");
        let a = Attributes::non_resource("GET", "/apis");
        assert_eq!(
            a.forbidden("system:anonymous", "").message,
            "forbidden: User \"system:anonymous\" cannot get path \"/apis\""
        );
    }

    #[test]
    fn attributes_follow_request_info() {
        let a = Attributes::resource(&rp("/api/v1/namespaces/foo"), "get", None);
        assert_eq!((a.namespace.as_str(), a.name.as_str()), ("foo", "foo"));
        let a = Attributes::resource(
            &rp("/apis/coordination.k8s.io/v1/namespaces/ns/leases"),
            "watch",
            Some("watch=true&fieldSelector=metadata.name%3Dvolmig"),
        );
        assert_eq!(a.name, "volmig");
        let a = Attributes::resource(
            &rp("/apis/coordination.k8s.io/v1/namespaces/ns/leases"),
            "list",
            Some("fieldSelector=metadata.name!%3Dvolmig"),
        );
        assert_eq!(a.name, "");
    }

    #[test]
    fn bearer_header_parsing() {
        let mut h = HeaderMap::new();
        assert_eq!(bearer(&h).ok(), Some(None));
        h.insert(
            axum::http::header::AUTHORIZATION,
            axum::http::HeaderValue::from_static("Bearer abc"),
        );
        assert_eq!(bearer(&h).ok(), Some(Some("abc")));
        h.insert(
            axum::http::header::AUTHORIZATION,
            axum::http::HeaderValue::from_static("Basic abc"),
        );
        assert!(bearer(&h).is_err());
    }
}
