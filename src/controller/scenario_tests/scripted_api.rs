//! The scripted Kubernetes API of the scenario tests: each request the controller makes is
//! answered by the test, in order; `Stored` keeps one object as the API server would.

#![allow(dead_code, reason = "each scenario uses a part of the harness")]

use http::{Method, Request, Response, StatusCode};
use kube::client::Body;
use serde_json::{Value, json};
use tokio::task::JoinHandle;
use tower_test::mock::{Handle, SendResponse};

use super::harness::{EVENTS, HANG_GUARD, INSTANCE};
use crate::volume_migration::VolumeMigration;

/// One request the controller made, waiting for its answer.
pub(super) struct Call {
    pub(super) method: Method,
    pub(super) path: String,
    pub(super) query: String,
    pub(super) body: Value,
    pub(super) respond: SendResponse<Response<Body>>,
}

impl std::fmt::Debug for Call {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {}?{} {}",
            self.method, self.path, self.query, self.body
        )
    }
}

impl Call {
    /// Asserts what the call is.
    pub(super) fn expect(&self, method: Method, path: &str, query: &str) {
        assert_eq!(
            (&self.method, self.path.as_str(), self.query.as_str()),
            (&method, path, query),
            "unexpected call: {self:?}"
        );
    }

    pub(super) fn reply(self, code: StatusCode, body: &Value) {
        let response = Response::builder()
            .status(code)
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(Body::from(serde_json::to_vec(body).unwrap()))
            .unwrap();
        self.respond.send_response(response);
    }

    /// Answers with a `Status` failure, as the API server does.
    pub(super) fn fail(self, code: StatusCode, reason: &str, message: &str) {
        let body = json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {},
            "status": "Failure", "message": message, "reason": reason,
            "code": code.as_u16(),
        });
        self.reply(code, &body);
    }

    /// Answers with no response at all: the request timed out, as the unit table of
    /// `controller::error` represents it (`kube::Error::Service` holding an
    /// `io::ErrorKind::TimedOut`).
    pub(super) fn time_out(self) {
        self.respond.send_error(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "the request deadline passed",
        ));
    }
}

/// The API side of the mock: hands out the controller's requests in order.
pub(super) struct ScriptedApi {
    pub(super) handle: Handle<Request<Body>, Response<Body>>,
}

impl ScriptedApi {
    /// The next request; fails the test when none comes.
    pub(super) async fn next(&mut self) -> Call {
        let (request, respond) = tokio::time::timeout(HANG_GUARD, self.handle.next_request())
            .await
            .expect("the controller made no further call")
            .expect("the client is gone");
        let (parts, body) = request.into_parts();
        let bytes = body.collect_bytes().await.unwrap();
        let body = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).unwrap()
        };
        Call {
            method: parts.method,
            path: parts.uri.path().to_owned(),
            query: parts.uri.query().unwrap_or_default().to_owned(),
            body,
            respond,
        }
    }

    /// Waits for `task` to finish; any call it makes meanwhile is unexpected.
    pub(super) async fn outcome<T>(&mut self, task: JoinHandle<T>) -> T {
        let next = async {
            let call = self.next().await;
            panic!("unexpected call: {call:?}");
        };
        tokio::select! {
            result = task => result.unwrap(),
            () = next => unreachable!(),
        }
    }

    /// Once every client is dropped: asserts that no call is left.
    pub(super) async fn closed(mut self) {
        match tokio::time::timeout(HANG_GUARD, self.handle.next_request()).await {
            Ok(None) => {}
            Ok(Some((request, _))) => panic!(
                "unexpected call after the controller was done: {} {}",
                request.method(),
                request.uri()
            ),
            Err(_) => panic!("a client is still alive (the Context was not dropped)"),
        }
    }
}

/// One VolumeMigration as the API server holds it: merge patches apply like on the real
/// server (`metadata.resourceVersion` in a patch is a precondition, answered 409 when
/// stale; `/status` changes only the status, the main resource everything but the
/// status), and every write bumps the `resourceVersion`.
pub(super) struct Stored {
    pub(super) value: Value,
    pub(super) version: u64,
}

pub(super) fn merge(target: &mut Value, patch: &Value) {
    let Value::Object(fields) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = json!({});
    }
    let Value::Object(target) = target else {
        unreachable!()
    };
    for (key, value) in fields {
        if value.is_null() {
            target.remove(key);
        } else {
            merge(target.entry(key.clone()).or_insert(Value::Null), value);
        }
    }
}

impl Stored {
    pub(super) fn new(vm: &VolumeMigration) -> Self {
        let value = serde_json::to_value(vm).unwrap();
        let version = value["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        Self { value, version }
    }

    pub(super) fn version(&self) -> String {
        self.version.to_string()
    }

    pub(super) fn object(&self) -> VolumeMigration {
        serde_json::from_value(self.value.clone()).unwrap()
    }

    /// Answers a GET.
    pub(super) fn get(&self, call: Call) {
        call.reply(StatusCode::OK, &self.value);
    }

    /// Answers a merge patch of the object (`status == false`) or of `/status`.
    pub(super) fn patch(&mut self, call: Call, status: bool) {
        let precondition = call.body["metadata"]["resourceVersion"].as_str();
        if precondition.is_some_and(|v| v != self.version()) {
            call.fail(
                StatusCode::CONFLICT,
                "Conflict",
                "the object has been modified; please apply your changes to the latest version",
            );
            return;
        }
        if status {
            merge(&mut self.value["status"], &call.body["status"]);
        } else {
            let mut metadata = call.body["metadata"].clone();
            if let Some(m) = metadata.as_object_mut() {
                m.remove("resourceVersion");
            }
            merge(&mut self.value["metadata"], &metadata);
        }
        self.version += 1;
        self.value["metadata"]["resourceVersion"] = json!(self.version());
        call.reply(StatusCode::OK, &self.value);
    }
}

/// The body with every timestamp (`registeredTime`, `lastTransitionTime`, `lastError.time`)
/// removed, after checking that each one is an RFC 3339 time (nulls stay).
pub(super) fn without_times(value: &Value) -> Value {
    match value {
        Value::Object(fields) => Value::Object(
            fields
                .iter()
                .filter(|(key, value)| {
                    // A null clears the field: it stays in the comparison.
                    let is_time = matches!(
                        key.as_str(),
                        "registeredTime" | "lastTransitionTime" | "time"
                    ) && !value.is_null();
                    if is_time {
                        let text = value.as_str().unwrap_or_default();
                        assert!(
                            text.parse::<jiff::Timestamp>().is_ok(),
                            "{key} is not a time: {value}"
                        );
                    }
                    !is_time
                })
                .map(|(key, value)| (key.clone(), without_times(value)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(without_times).collect()),
        other => other.clone(),
    }
}

/// The `Registered` and `Ready` conditions of a status patch, timestamps removed.
pub(super) fn conditions(status: &str, reason: &str, message: &str) -> Value {
    json!([
        {"type": "Registered", "status": status, "reason": reason, "message": message},
        {"type": "Ready", "status": status, "reason": reason, "message": message},
    ])
}

/// Asserts an Event POST and answers it; returns its note.
pub(super) fn expect_event(
    call: Call,
    kind: &str,
    name: &str,
    type_: &str,
    reason: &str,
) -> String {
    call.expect(Method::POST, EVENTS, "");
    let event = &call.body;
    assert_eq!(event["regarding"]["kind"], kind, "{call:?}");
    assert_eq!(event["regarding"]["name"], name, "{call:?}");
    assert_eq!(event["type"], type_, "{call:?}");
    assert_eq!(event["reason"], reason, "{call:?}");
    assert_eq!(event["reportingController"], "volmig", "{call:?}");
    assert_eq!(event["reportingInstance"], INSTANCE, "{call:?}");
    let note = event["note"].as_str().unwrap_or_default().to_owned();
    let echo = call.body.clone();
    call.reply(StatusCode::CREATED, &echo);
    note
}
