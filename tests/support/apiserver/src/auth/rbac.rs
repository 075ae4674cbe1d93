//! The RBAC authorizer: the stored ClusterRoleBindings, then the RoleBindings of the
//! request's namespace, each granting the rules of its Role or ClusterRole to its subjects
//! (rules, subjects and matching as in `k8s.io/kubernetes/plugin/pkg/auth/authorizer/rbac`),
//! plus the bootstrap policy every cluster has for discovery and self reviews.
//! `system:masters` bypasses it. Aggregated ClusterRoles are not computed.

use std::sync::Arc;

use serde_json::Value;

use super::{AUTHENTICATED, Attributes, MASTERS, UNAUTHENTICATED, UserInfo};
use crate::registry::StorageKey;
use crate::store::Store;

const GROUP: &str = "rbac.authorization.k8s.io";

/// The outcome of an authorization check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Allowed; the reason names the binding (as in SubjectAccessReview status).
    Allow(String),
    /// Denied; the reason lists broken bindings (a missing role), else empty.
    Deny(String),
}

impl Decision {
    /// Whether the request may go on.
    pub fn allowed(&self) -> bool {
        matches!(self, Decision::Allow(_))
    }
}

fn key(resource: &str) -> StorageKey {
    StorageKey {
        group: GROUP.into(),
        resource: resource.into(),
    }
}

fn strs<'a>(v: &'a Value, field: &str) -> Vec<&'a str> {
    v.get(field)
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

fn field<'a>(v: &'a Value, a: &str, b: &str) -> &'a str {
    v.get(a)
        .and_then(|x| x.get(b))
        .and_then(Value::as_str)
        .unwrap_or("")
}

fn star_or(list: &[&str], wanted: &str) -> bool {
    list.iter().any(|x| *x == "*" || *x == wanted)
}

/// Whether one PolicyRule (JSON) allows `a`.
pub fn rule_allows(rule: &Value, a: &Attributes) -> bool {
    if !star_or(&strs(rule, "verbs"), &a.verb) {
        return false;
    }
    if !a.resource_request {
        return strs(rule, "nonResourceURLs").iter().any(|u| {
            *u == "*"
                || *u == a.path
                || (u.ends_with('*') && a.path.starts_with(u.trim_end_matches('*')))
        });
    }
    if !star_or(&strs(rule, "apiGroups"), &a.group) {
        return false;
    }
    let combined = a.combined_resource();
    let resource_ok = strs(rule, "resources").iter().any(|r| {
        *r == "*"
            || *r == combined
            || (!a.subresource.is_empty() && r.strip_prefix("*/") == Some(a.subresource.as_str()))
    });
    if !resource_ok {
        return false;
    }
    let names = strs(rule, "resourceNames");
    names.is_empty() || names.contains(&a.name.as_str())
}

fn describe_subject(subject: &Value, binding_ns: &str) -> String {
    let kind = subject.get("kind").and_then(Value::as_str).unwrap_or("");
    let name = subject.get("name").and_then(Value::as_str).unwrap_or("");
    if kind == "ServiceAccount" {
        let ns = match subject.get("namespace").and_then(Value::as_str) {
            Some(ns) if !ns.is_empty() => ns,
            _ => binding_ns,
        };
        format!("{kind} {:?}", format!("{name}/{ns}"))
    } else {
        format!("{kind} {name:?}")
    }
}

/// The first subject of `binding` that is `user`, if any.
fn subject_for<'a>(binding: &'a Value, binding_ns: &str, user: &UserInfo) -> Option<&'a Value> {
    binding
        .get("subjects")
        .and_then(Value::as_array)?
        .iter()
        .find(|s| {
            let name = s.get("name").and_then(Value::as_str).unwrap_or("");
            match s.get("kind").and_then(Value::as_str).unwrap_or("") {
                "User" => user.name == name,
                "Group" => user.in_group(name),
                "ServiceAccount" => {
                    let ns = match s.get("namespace").and_then(Value::as_str) {
                        Some(ns) if !ns.is_empty() => ns,
                        _ => binding_ns,
                    };
                    !ns.is_empty() && user.name == super::service_account_user(ns, name)
                }
                _ => false,
            }
        })
}

/// Every binding's role rules that apply to `a`, in the order kube-apiserver visits them.
fn visit(store: &Store, user: &UserInfo, a: &Attributes) -> Decision {
    let mut errors: Vec<String> = Vec::new();
    let not_found = |kind: &str, name: &str| {
        format!("{}.{GROUP} {name:?} not found", kind.to_ascii_lowercase())
    };
    let bindings: Vec<(&str, Arc<Value>)> = store
        .range(&key("clusterrolebindings"), None, None)
        .map(|(_, b)| ("", b.clone()))
        .chain(
            (!a.namespace.is_empty())
                .then(|| {
                    store
                        .range(&key("rolebindings"), Some(a.namespace.as_str()), None)
                        .map(|(_, b)| (a.namespace.as_str(), b.clone()))
                        .collect::<Vec<_>>()
                })
                .into_iter()
                .flatten(),
        )
        .collect();
    for (ns, binding) in bindings {
        let Some(subject) = subject_for(&binding, ns, user) else {
            continue;
        };
        let ref_kind = field(&binding, "roleRef", "kind");
        let ref_name = field(&binding, "roleRef", "name");
        let role = match ref_kind {
            "ClusterRole" => store.get(&key("clusterroles"), "", ref_name),
            "Role" if !ns.is_empty() => store.get(&key("roles"), ns, ref_name),
            _ => None,
        };
        let Some(role) = role else {
            errors.push(not_found(ref_kind, ref_name));
            continue;
        };
        // A RoleBinding grants resources of its namespace only, never non-resource URLs.
        if !ns.is_empty() && !a.resource_request {
            continue;
        }
        let rules = role.get("rules").and_then(Value::as_array);
        if rules.into_iter().flatten().any(|r| rule_allows(r, a)) {
            let binding_name = crate::meta::name(&binding);
            let source = if ns.is_empty() {
                format!("ClusterRoleBinding {binding_name:?}")
            } else {
                format!("RoleBinding {:?}", format!("{binding_name}/{ns}"))
            };
            return Decision::Allow(format!(
                "RBAC: allowed by {source} of {ref_kind} {ref_name:?} to {}",
                describe_subject(subject, ns)
            ));
        }
    }
    let mut seen = std::collections::HashSet::new();
    errors.retain(|e| seen.insert(e.clone()));
    let reason = match errors.len() {
        0 => String::new(),
        1 => format!("RBAC: {}", errors[0]),
        _ => format!("RBAC: [{}]", errors.join(", ")),
    };
    Decision::Deny(reason)
}

/// The bootstrap policy: `system:discovery` and `system:basic-user` for authenticated users,
/// `system:public-info-viewer` for everybody.
fn bootstrap_allows(user: &UserInfo, a: &Attributes) -> bool {
    let public = ["/healthz", "/livez", "/readyz", "/version", "/version/"];
    if !a.resource_request {
        if a.verb != "get" {
            return false;
        }
        let path = a.path.as_str();
        let info = public.contains(&path)
            || ["/healthz/", "/livez/", "/readyz/"]
                .iter()
                .any(|p| path.starts_with(p));
        if info && (user.in_group(AUTHENTICATED) || user.in_group(UNAUTHENTICATED)) {
            return true;
        }
        let discovery = matches!(path, "/api" | "/apis" | "/openapi")
            || ["/api/", "/apis/", "/openapi/"]
                .iter()
                .any(|p| path.starts_with(p));
        return discovery && user.in_group(AUTHENTICATED);
    }
    user.in_group(AUTHENTICATED)
        && a.verb == "create"
        && a.subresource.is_empty()
        && matches!(
            (a.group.as_str(), a.resource.as_str()),
            (
                "authorization.k8s.io",
                "selfsubjectaccessreviews" | "selfsubjectrulesreviews"
            ) | ("authentication.k8s.io", "selfsubjectreviews")
        )
}

/// Authorizes `a` for `user`.
pub fn authorize(store: &Store, user: &UserInfo, a: &Attributes) -> Decision {
    if user.in_group(MASTERS) {
        return Decision::Allow(String::new());
    }
    if bootstrap_allows(user, a) {
        return Decision::Allow("RBAC: allowed by the bootstrap policy".into());
    }
    visit(store, user, a)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn attrs(
        verb: &str,
        group: &str,
        resource: &str,
        sub: &str,
        ns: &str,
        name: &str,
    ) -> Attributes {
        Attributes {
            verb: verb.into(),
            resource_request: true,
            group: group.into(),
            version: "v1".into(),
            resource: resource.into(),
            subresource: sub.into(),
            namespace: ns.into(),
            name: name.into(),
            path: String::new(),
        }
    }

    #[test]
    fn rules_match_like_kubernetes() {
        let rule = json!({"apiGroups": ["volmig.io"], "resources": ["volumemigrations"], "verbs": ["get", "list"]});
        assert!(rule_allows(
            &rule,
            &attrs("get", "volmig.io", "volumemigrations", "", "", "a")
        ));
        assert!(!rule_allows(
            &rule,
            &attrs("watch", "volmig.io", "volumemigrations", "", "", "")
        ));
        assert!(!rule_allows(
            &rule,
            &attrs("get", "volmig.io", "volumemigrations", "status", "", "a")
        ));
        assert!(!rule_allows(
            &rule,
            &attrs("get", "", "volumemigrations", "", "", "a")
        ));
        let star = json!({"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]});
        assert!(rule_allows(
            &star,
            &attrs("patch", "x", "y", "status", "ns", "n")
        ));
        let sub = json!({"apiGroups": [""], "resources": ["*/status"], "verbs": ["update"]});
        assert!(rule_allows(
            &sub,
            &attrs("update", "", "pods", "status", "", "p")
        ));
        assert!(!rule_allows(
            &sub,
            &attrs("update", "", "pods", "", "", "p")
        ));
        let named = json!({"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": ["volmig"], "verbs": ["get"]});
        assert!(rule_allows(
            &named,
            &attrs("get", "coordination.k8s.io", "leases", "", "ns", "volmig")
        ));
        assert!(!rule_allows(
            &named,
            &attrs("get", "coordination.k8s.io", "leases", "", "ns", "other")
        ));
        assert!(!rule_allows(
            &named,
            &attrs("get", "coordination.k8s.io", "leases", "", "ns", "")
        ));
        let urls = json!({"nonResourceURLs": ["/metrics", "/logs/*"], "verbs": ["get"]});
        assert!(rule_allows(
            &urls,
            &Attributes::non_resource("GET", "/logs/a/b")
        ));
        assert!(rule_allows(
            &urls,
            &Attributes::non_resource("GET", "/metrics")
        ));
        assert!(!rule_allows(
            &urls,
            &Attributes::non_resource("GET", "/metricsx")
        ));
        assert!(!rule_allows(
            &urls,
            &attrs("get", "", "metrics", "", "", "")
        ));
    }

    #[test]
    fn bootstrap_policy_separates_anonymous_and_authenticated() {
        let anon = UserInfo::anonymous();
        let sa = UserInfo::service_account("ns", "sa");
        let get = |p| Attributes::non_resource("GET", p);
        assert!(bootstrap_allows(&anon, &get("/version")));
        assert!(!bootstrap_allows(&anon, &get("/api")));
        assert!(bootstrap_allows(&sa, &get("/apis/apps/v1")));
        assert!(bootstrap_allows(&sa, &get("/openapi/v3")));
        assert!(!bootstrap_allows(&sa, &get("/metrics")));
        assert!(bootstrap_allows(
            &sa,
            &attrs(
                "create",
                "authorization.k8s.io",
                "selfsubjectaccessreviews",
                "",
                "",
                ""
            )
        ));
    }
}
