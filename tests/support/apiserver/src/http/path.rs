//! URL paths → what they address.

/// A parsed request path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// `/version`.
    Version,
    /// `/healthz`, `/readyz`, `/livez`.
    Health,
    /// `/api`.
    Api,
    /// `/apis`.
    Apis,
    /// `/apis/<group>`.
    Group(String),
    /// `/api/v1` or `/apis/<g>/<v>`.
    GroupVersion(String, String),
    /// `/openapi/v3`.
    OpenApiIndex,
    /// `/openapi/v2` (protobuf only).
    OpenApiV2,
    /// `/openapi/v3/api/v1`, `/openapi/v3/apis/<g>/<v>`.
    OpenApiDoc(String, String),
    /// `/_testserver/...`.
    Admin(String),
    /// A resource request.
    Resource(ResourcePath),
    /// Anything else.
    Unknown,
}

/// The parts of a resource path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourcePath {
    /// Group.
    pub group: String,
    /// Version.
    pub version: String,
    /// Namespace, when the path has `/namespaces/<ns>/`.
    pub namespace: Option<String>,
    /// Plural.
    pub plural: String,
    /// Object name.
    pub name: Option<String>,
    /// Subresource.
    pub subresource: Option<String>,
    /// Deprecated `/watch/` path prefix.
    pub legacy_watch: bool,
}

fn decode_segment(s: &str) -> String {
    super::query::pairs(&format!("x={}", s.replace('+', "%2B")))
        .pop()
        .map(|(_, v)| v)
        .unwrap_or_default()
}

/// Parses a request path.
pub fn route(path: &str) -> Route {
    let segs: Vec<String> = path
        .split('/')
        .filter(|s| !s.is_empty())
        .map(decode_segment)
        .collect();
    let s: Vec<&str> = segs.iter().map(String::as_str).collect();
    match s.as_slice() {
        ["version"] => Route::Version,
        ["healthz" | "readyz" | "livez", ..] => Route::Health,
        ["api"] => Route::Api,
        ["apis"] => Route::Apis,
        ["apis", g] => Route::Group((*g).to_string()),
        ["api", v] => Route::GroupVersion(String::new(), (*v).to_string()),
        ["apis", g, v] => Route::GroupVersion((*g).to_string(), (*v).to_string()),
        ["openapi", "v3"] => Route::OpenApiIndex,
        ["openapi", "v2"] | ["swagger-2.0.0.pb-v1"] => Route::OpenApiV2,
        ["openapi", "v3", "api", v] => Route::OpenApiDoc(String::new(), (*v).to_string()),
        ["openapi", "v3", "apis", g, v] => Route::OpenApiDoc((*g).to_string(), (*v).to_string()),
        ["_testserver", rest @ ..] => Route::Admin(rest.join("/")),
        ["api", v, rest @ ..] => resource(String::new(), v, rest),
        ["apis", g, v, rest @ ..] => resource((*g).to_string(), v, rest),
        _ => Route::Unknown,
    }
}

fn resource(group: String, version: &str, rest: &[&str]) -> Route {
    let (legacy_watch, rest) = match rest {
        ["watch", tail @ ..] if !tail.is_empty() => (true, tail),
        _ => (false, rest),
    };
    let namespace_sub = group.is_empty()
        && rest.len() == 3
        && rest[0] == "namespaces"
        && matches!(rest[2], "status" | "finalize");
    let (namespace, tail) = if rest.len() >= 3 && rest[0] == "namespaces" && !namespace_sub {
        (Some(rest[1].to_string()), &rest[2..])
    } else {
        (None, rest)
    };
    if tail.is_empty() || tail.len() > 3 {
        return Route::Unknown;
    }
    Route::Resource(ResourcePath {
        group,
        version: version.to_string(),
        namespace,
        plural: tail[0].to_string(),
        name: tail.get(1).map(|x| (*x).to_string()),
        subresource: tail.get(2).map(|x| (*x).to_string()),
        legacy_watch,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn res(path: &str) -> ResourcePath {
        match route(path) {
            Route::Resource(r) => r,
            other => panic!("{path}: {other:?}"),
        }
    }

    #[test]
    fn resource_paths() {
        let r = res("/api/v1/persistentvolumes/pv1/status");
        assert_eq!(
            (
                r.plural.as_str(),
                r.name.as_deref(),
                r.subresource.as_deref()
            ),
            ("persistentvolumes", Some("pv1"), Some("status"))
        );
        let r = res("/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/volmig");
        assert_eq!(r.namespace.as_deref(), Some("kube-system"));
        assert_eq!(r.name.as_deref(), Some("volmig"));
        let r = res("/api/v1/namespaces/foo");
        assert_eq!(
            (r.plural.as_str(), r.name.as_deref(), r.namespace),
            ("namespaces", Some("foo"), None)
        );
        let r = res("/api/v1/namespaces/foo/status");
        assert_eq!(
            (r.plural.as_str(), r.subresource.as_deref()),
            ("namespaces", Some("status"))
        );
        let r = res("/api/v1/namespaces/foo/secrets");
        assert_eq!(
            (r.plural.as_str(), r.namespace.as_deref(), r.name),
            ("secrets", Some("foo"), None)
        );
        let r = res("/api/v1/watch/namespaces/foo/events");
        assert!(r.legacy_watch);
        let r = res("/apis/volmig.io/v1alpha1/volumemigrations/a%20b");
        assert_eq!(r.name.as_deref(), Some("a b"));
        assert_eq!(route("/apis/volmig.io"), Route::Group("volmig.io".into()));
        assert_eq!(
            route("/openapi/v3/apis/apps/v1"),
            Route::OpenApiDoc("apps".into(), "v1".into())
        );
        assert_eq!(route("/nope"), Route::Unknown);
    }
}
