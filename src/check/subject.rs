//! Whose rights the RBAC lines of `volmig check` review (docs/operations.md, "Preflight:
//! `volmig check`"): the daemon's ServiceAccount, not whoever runs the check. Pure:
//! [`super::probe`] asks the API server who the caller is and reviews, this decides how.

use crate::cli::ServiceAccountRef;

use super::model::Check;

/// Name of the RBAC lines.
pub const RBAC: &str = "RBAC";

/// The identity the RBAC lines are about, and how it is reviewed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Subject {
    /// The daemon's ServiceAccount. `as_caller`: the check runs as it (in the pod), so a
    /// SelfSubjectAccessReview answers for it and needs no right; else one
    /// SubjectAccessReview per permission (the caller needs `create` on
    /// subjectaccessreviews).
    ServiceAccount {
        /// The ServiceAccount.
        account: ServiceAccountRef,
        /// True when the caller is that ServiceAccount.
        as_caller: bool,
    },
    /// No ServiceAccount named and the caller is none: the caller's own rights (its user
    /// name when the API server said it).
    Caller(Option<String>),
}

impl Subject {
    /// Who, in the words of a line: `system:serviceaccount:NS:NAME` or the caller.
    pub fn describe(&self) -> String {
        match self {
            Subject::ServiceAccount { account, .. } => account.username(),
            Subject::Caller(Some(user)) => format!("the caller {user}"),
            Subject::Caller(None) => "the caller".to_owned(),
        }
    }

    /// The fix when the reviews themselves fail.
    pub fn review_fix(&self) -> String {
        match self {
            Subject::ServiceAccount {
                as_caller: false, ..
            } => "the caller needs `create` on subjectaccessreviews.authorization.k8s.io \
                  (e.g. cluster-admin); or run the check as the ServiceAccount, in the pod: \
                  kubectl exec deploy/volmig -n <namespace> -- volmig check"
                .to_owned(),
            _ => "check that the API server answers SelfSubjectAccessReviews \
                  (authorization.k8s.io/v1)"
                .to_owned(),
        }
    }
}

/// The subject: `named` (`--service-account`) when given, else the caller's own
/// ServiceAccount when the caller is one (`caller` is the user name the API server
/// answered to a SelfSubjectReview), else the caller.
pub fn decide(named: Option<&ServiceAccountRef>, caller: Option<&str>) -> Subject {
    match named {
        Some(account) => Subject::ServiceAccount {
            as_caller: caller == Some(account.username().as_str()),
            account: account.clone(),
        },
        None => match caller.and_then(service_account_of) {
            Some(account) => Subject::ServiceAccount {
                account,
                as_caller: true,
            },
            None => Subject::Caller(caller.map(str::to_owned)),
        },
    }
}

/// The ServiceAccount a user name `system:serviceaccount:NS:NAME` stands for.
fn service_account_of(user: &str) -> Option<ServiceAccountRef> {
    let rest = user.strip_prefix("system:serviceaccount:")?;
    let (namespace, name) = rest.split_once(':')?;
    (!namespace.is_empty() && !name.is_empty() && !name.contains(':')).then(|| ServiceAccountRef {
        namespace: namespace.to_owned(),
        name: name.to_owned(),
    })
}

/// The warning line when the caller's own rights stand in for the daemon's.
pub fn caller_warning(subject: &Subject) -> Option<Check> {
    match subject {
        Subject::Caller(_) => Some(Check::warn(
            RBAC,
            format!(
                "reviewed the rights of {}, not of volmig's ServiceAccount",
                subject.describe()
            ),
            "name the daemon's ServiceAccount: --service-account NAMESPACE/NAME \
             (VOLMIG_SERVICE_ACCOUNT; the chart's pod sets it)",
        )),
        Subject::ServiceAccount { .. } => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sa(namespace: &str, name: &str) -> ServiceAccountRef {
        ServiceAccountRef {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        }
    }

    #[test]
    fn a_named_service_account_is_reviewed_by_name_unless_the_caller_is_it() {
        let named = sa("volmig", "volmig");
        assert_eq!(
            decide(Some(&named), Some("admin")),
            Subject::ServiceAccount {
                account: named.clone(),
                as_caller: false
            }
        );
        assert_eq!(
            decide(Some(&named), None),
            Subject::ServiceAccount {
                account: named.clone(),
                as_caller: false
            }
        );
        assert_eq!(
            decide(Some(&named), Some("system:serviceaccount:volmig:volmig")),
            Subject::ServiceAccount {
                account: named,
                as_caller: true
            }
        );
    }

    #[test]
    fn without_a_name_a_service_account_caller_is_the_subject_and_a_person_is_warned() {
        assert_eq!(
            decide(None, Some("system:serviceaccount:ops:volmig-x")),
            Subject::ServiceAccount {
                account: sa("ops", "volmig-x"),
                as_caller: true
            }
        );
        let person = decide(None, Some("alice"));
        assert_eq!(person, Subject::Caller(Some("alice".to_owned())));
        let warning = caller_warning(&person).unwrap();
        assert!(warning.ok && warning.warning);
        assert!(warning.detail.contains("alice"), "{}", warning.detail);
        assert!(warning.fix.contains("--service-account"), "{}", warning.fix);
        assert_eq!(
            decide(None, Some("system:serviceaccount:bad")),
            Subject::Caller(Some("system:serviceaccount:bad".to_owned()))
        );
    }

    #[test]
    fn a_failed_subject_access_review_points_at_the_callers_right_or_the_pod() {
        let subject = decide(Some(&sa("volmig", "volmig")), Some("bob"));
        assert!(subject.review_fix().contains("subjectaccessreviews"));
        assert!(subject.review_fix().contains("kubectl exec deploy/volmig"));
    }
}
