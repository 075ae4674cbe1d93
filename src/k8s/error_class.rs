//! The one classification of a failed Kubernetes API call (docs/design.md §4.6): every caller
//! that decides how to react to a `kube::Error` asks [`classify`].

use std::fmt;

use crate::requeue::{ERROR_REQUEUE, Requeue};

/// How to react to a failed API call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KubeErrorClass {
    /// A precondition failed (409: resourceVersion, or the name exists): read again, decide
    /// again.
    Conflict,
    /// The object is gone (404; 410 for a version that no longer exists).
    Gone,
    /// Worth retrying as it is: 401 (a rotated ServiceAccount token is read again by the
    /// client), 408, 429, 5xx, timeouts and connection failures.
    Transient,
    /// The same request fails the same way until something else changes: 400, 403
    /// (RBAC), 405, 413, 415, 422 (validation) and other 4xx; a request that cannot be built
    /// or a body that cannot be read.
    Permanent,
}

impl KubeErrorClass {
    /// The lower-case name (logs, tables).
    pub fn as_str(self) -> &'static str {
        match self {
            KubeErrorClass::Conflict => "conflict",
            KubeErrorClass::Gone => "gone",
            KubeErrorClass::Transient => "transient",
            KubeErrorClass::Permanent => "permanent",
        }
    }
}

impl fmt::Display for KubeErrorClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Classifies an HTTP status code of the API server's answer.
pub fn classify_code(code: u16) -> KubeErrorClass {
    match code {
        409 => KubeErrorClass::Conflict,
        404 | 410 => KubeErrorClass::Gone,
        401 | 408 | 429 => KubeErrorClass::Transient,
        400..=499 => KubeErrorClass::Permanent,
        _ => KubeErrorClass::Transient,
    }
}

/// Classifies a client error.
pub fn classify(error: &kube::Error) -> KubeErrorClass {
    match error {
        kube::Error::Api(status) => classify_code(status.code),
        kube::Error::BuildRequest(_) | kube::Error::SerdeError(_) => KubeErrorClass::Permanent,
        _ => KubeErrorClass::Transient,
    }
}

/// What a reconciliation whose Kubernetes call failed with `class` does next: a
/// permanent refusal waits for a change; a conflict, a vanished object or a transient
/// failure runs again after [`ERROR_REQUEUE`] (a conflict reads and decides afresh; a
/// vanished object's next run finds it gone).
pub fn after_kube_error(class: KubeErrorClass) -> Requeue {
    match class {
        KubeErrorClass::Permanent => Requeue::AwaitChange,
        KubeErrorClass::Conflict | KubeErrorClass::Gone | KubeErrorClass::Transient => {
            Requeue::After(ERROR_REQUEUE)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(code: u16) -> kube::Error {
        kube::Error::Api(
            kube::core::Status::failure("test", "Test")
                .with_code(code)
                .boxed(),
        )
    }

    #[test]
    fn every_status_code_has_one_class() {
        use KubeErrorClass::*;
        let table = [
            (400, Permanent),
            (401, Transient),
            (403, Permanent),
            (404, Gone),
            (405, Permanent),
            (408, Transient),
            (409, Conflict),
            (410, Gone),
            (413, Permanent),
            (422, Permanent),
            (429, Transient),
            (500, Transient),
            (502, Transient),
            (503, Transient),
            (504, Transient),
        ];
        for (code, class) in table {
            assert_eq!(classify(&api(code)), class, "HTTP {code}");
            assert_eq!(classify_code(code), class, "HTTP {code}");
        }
    }

    #[test]
    fn client_side_failures_are_transient_unless_the_request_itself_is_wrong() {
        let serde =
            kube::Error::SerdeError(serde_json::from_str::<serde_json::Value>("{").unwrap_err());
        assert_eq!(classify(&serde), KubeErrorClass::Permanent);
        let timeout = kube::Error::Service(Box::new(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "deadline",
        )));
        assert_eq!(classify(&timeout), KubeErrorClass::Transient);
    }
}
