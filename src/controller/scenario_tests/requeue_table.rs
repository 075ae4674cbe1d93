//! What a failed write leads to, at the API: each answer class of the one classification
//! (docs/design.md §4.6), and a timeout, for every write a reconcile makes — the finalizer
//! patch, the status write, the publish into the CSI driver's cache, the recreate of an
//! object deleted while in use and the finalizer removal — through the real reconcile and
//! `error_policy`. Each row asserts the failure's metric label, the counted series and the
//! next step. (The error values alone, without the API: `controller::error`'s table.)

use std::sync::Arc;

use http::{Method, StatusCode};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::{Value, json};

use super::harness::*;
use crate::controller::Action;
use crate::controller::reconcile::error_policy;
use crate::k8s::driver_cache::DriverIndex;
use crate::k8s::migrations::new_migration;
use crate::volume_migration::VolumeMigration;

/// How the scripted API answers the write under test.
#[derive(Debug, Clone, Copy)]
enum Answer {
    /// A `Status` failure with this code and reason.
    Status(u16, &'static str),
    /// No answer: the request timed out.
    Timeout,
}

/// How the reconcile ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    /// It failed: `error_policy` counts the write's label and asks for this.
    Failed(Action),
    /// The answer means the write's goal is met (a create whose object exists, a finalizer
    /// removal on an object already gone): no failure, nothing counted.
    Done(Action),
}

/// The answers and what each leads to for a write that has no answer of its own.
fn rows() -> Vec<(Answer, End)> {
    let retry = End::Failed(Action::requeue(ERROR_REQUEUE));
    let wait = End::Failed(Action::await_change());
    vec![
        (Answer::Status(400, "BadRequest"), wait),
        (Answer::Status(401, "Unauthorized"), retry),
        (Answer::Status(403, "Forbidden"), wait),
        (Answer::Status(404, "NotFound"), retry),
        (Answer::Status(409, "Conflict"), retry),
        (Answer::Status(410, "Gone"), retry),
        (Answer::Status(422, "Invalid"), wait),
        (Answer::Status(429, "TooManyRequests"), retry),
        (Answer::Status(500, "InternalError"), retry),
        (Answer::Status(503, "ServiceUnavailable"), retry),
        (Answer::Timeout, retry),
    ]
}

/// [`rows`] with the answers to `codes` ending `end` instead.
fn rows_where(codes: &[u16], end: End) -> Vec<(Answer, End)> {
    rows()
        .into_iter()
        .map(|(answer, want)| match answer {
            Answer::Status(code, _) if codes.contains(&code) => (answer, end),
            _ => (answer, want),
        })
        .collect()
}

/// The writes a reconcile makes, each from an object whose reconcile makes it first
/// (after the calls [`Write::reach`] answers).
#[derive(Debug, Clone, Copy)]
enum Write {
    /// Created by hand, without volmig's finalizer: the finalizer patch.
    AddFinalizer,
    /// Registered with an out-of-date PV list: the status write.
    Status,
    /// Registered, PV list up to date, not yet in the CSI driver's cache: the create of
    /// the driver's object.
    Publish,
    /// Deleted while a PV still uses the path: the finalizer goes, then the create.
    Recreate,
    /// Deleted, no PV uses the path and nothing to unregister: the finalizer removal.
    RemoveFinalizer,
}

impl Write {
    /// The `volmig_reconcile_failures_total` label of its failure.
    fn label(self) -> &'static str {
        match self {
            Write::AddFinalizer => "add_finalizer",
            Write::Status => "write_status",
            Write::Publish => "publish",
            Write::Recreate => "recreate",
            Write::RemoveFinalizer => "remove_finalizer",
        }
    }

    /// The fixture and the object.
    fn setup(self) -> (Fixture, VolumeMigration) {
        let name = path(PATH_A).object_name();
        let registered = |pvs: &[&str]| {
            Some(json!({
                "phase": "Registered",
                "volumeID": "vol-a",
                "persistentVolumes": pvs,
                "protectedFromVMDelete": true,
            }))
        };
        let deleted = |mut vm: VolumeMigration| {
            vm.metadata.deletion_timestamp = Some(Time(jiff::Timestamp::now()));
            vm
        };
        let used = [("pv-a", PATH_A)];
        match self {
            Write::AddFinalizer => (fixture(&used), migration(&name, PATH_A, false, None)),
            Write::Status => (
                fixture(&used),
                migration(&name, PATH_A, true, registered(&["pv-old"])),
            ),
            Write::Publish => (
                fixture_publishing(&used, Arc::new(DriverIndex::default())),
                migration(&name, PATH_A, true, registered(&["pv-a"])),
            ),
            Write::Recreate => (
                fixture(&used),
                deleted(migration(&name, PATH_A, true, registered(&["pv-a"]))),
            ),
            Write::RemoveFinalizer => (fixture(&[]), deleted(migration(&name, PATH_A, true, None))),
        }
    }

    /// Answers the calls before the write; returns the write, asserted.
    async fn reach(self, f: &mut Fixture, stored: &mut Stored) -> Call {
        let name = path(PATH_A).object_name();
        let call = f.api.next().await;
        match self {
            Write::AddFinalizer | Write::RemoveFinalizer => {
                call.expect(Method::PATCH, &object_url(&name), FIELD_MANAGER_QUERY);
                call
            }
            Write::Status => {
                call.expect(Method::PATCH, &status_url(&name), FIELD_MANAGER_QUERY);
                call
            }
            Write::Publish => {
                call.expect(Method::POST, DRIVER_OBJECTS, FIELD_MANAGER_QUERY);
                assert_eq!(call.body["metadata"]["name"], "vol-a", "{call:?}");
                call
            }
            Write::Recreate => {
                call.expect(Method::PATCH, &object_url(&name), FIELD_MANAGER_QUERY);
                assert_eq!(call.body["metadata"]["finalizers"], json!([]), "{call:?}");
                stored.patch(call, false);
                let call = f.api.next().await;
                call.expect(Method::POST, MIGRATIONS, FIELD_MANAGER_QUERY);
                assert_eq!(call.body["spec"]["volumePath"], PATH_A, "{call:?}");
                call
            }
        }
    }

    /// Answers what a create does after a 409 (it reads the object of that name; here it
    /// exists as the create wanted it). `posted` is the body of the create.
    async fn after_conflict(self, f: &mut Fixture, posted: &Value) {
        match self {
            Write::AddFinalizer | Write::Status | Write::RemoveFinalizer => {}
            Write::Publish => {
                let call = f.api.next().await;
                call.expect(Method::GET, &format!("{DRIVER_OBJECTS}/vol-a"), "");
                call.reply(StatusCode::OK, posted);
            }
            Write::Recreate => {
                let call = f.api.next().await;
                call.expect(Method::GET, &object_url(&path(PATH_A).object_name()), "");
                let existing = serde_json::to_value(new_migration(&path(PATH_A))).unwrap();
                call.reply(StatusCode::OK, &existing);
            }
        }
    }
}

/// Runs every row against `write`: answers it so, then asserts how the reconcile ends and
/// what `volmig_reconcile_failures_total` counted.
async fn table(write: Write, rows: Vec<(Answer, End)>) {
    let label = write.label();
    for (answer, want) in rows {
        let (mut f, vm) = write.setup();
        if matches!(write, Write::Publish) {
            live_volume(&f.backend, PATH_A, "vol-a").await;
        }
        let mut stored = Stored::new(&vm);
        let task = f.reconcile(&vm);
        let call = write.reach(&mut f, &mut stored).await;
        let posted = call.body.clone();
        match answer {
            Answer::Status(code, reason) => {
                call.fail(StatusCode::from_u16(code).unwrap(), reason, "scripted");
            }
            Answer::Timeout => call.time_out(),
        }
        if matches!(answer, Answer::Status(409, _)) {
            write.after_conflict(&mut f, &posted).await;
        }
        let end = match f.api.outcome(task).await {
            Ok(action) => End::Done(action),
            Err(error) => {
                assert_eq!(error.metric_label(), label, "{answer:?}: {error:?}");
                if matches!(answer, Answer::Timeout) {
                    let chain = crate::error_chain(&error);
                    assert!(chain.contains("the request deadline passed"), "{chain}");
                }
                End::Failed(error_policy(
                    Arc::new(vm.clone()),
                    &error,
                    Arc::clone(&f.ctx),
                ))
            }
        };
        assert_eq!(end, want, "{label} answered {answer:?}");
        let (_, metrics) = f.finish().await;
        let counted = if matches!(want, End::Failed(_)) {
            "1"
        } else {
            "0"
        };
        assert_eq!(
            reconcile_failures(&metrics, label),
            counted,
            "{label} answered {answer:?}"
        );
    }
}

#[tokio::test]
async fn a_failed_finalizer_patch_requeues_by_its_class() {
    table(Write::AddFinalizer, rows()).await;
}

#[tokio::test]
async fn a_failed_status_write_requeues_by_its_class() {
    table(Write::Status, rows()).await;
}

#[tokio::test]
async fn a_failed_publish_requeues_by_its_class() {
    // A 409 on a create is an object of that name already there: read, recorded, done.
    let done = End::Done(Action::await_change());
    table(Write::Publish, rows_where(&[409], done)).await;
}

#[tokio::test]
async fn a_failed_recreate_requeues_by_its_class() {
    // A 409 on a create is an object of that name already there; it tracks the path, so
    // the object is back: done.
    let done = End::Done(Action::await_change());
    table(Write::Recreate, rows_where(&[409], done)).await;
}

#[tokio::test]
async fn a_failed_finalizer_removal_requeues_by_its_class() {
    // A 404 or 410 on the removal is the object already gone: the finalizer went with it.
    let done = End::Done(Action::await_change());
    table(Write::RemoveFinalizer, rows_where(&[404, 410], done)).await;
}
