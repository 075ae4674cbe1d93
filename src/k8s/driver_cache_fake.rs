//! Test doubles of the CSI driver's cache (docs/design.md §8.1), built to do exactly what the
//! stock driver does: its informer has an AddFunc and a DeleteFunc only. Add stores the raw
//! `spec.volumepath` → `spec.volumeid`; Delete removes the entry of the deleted object's
//! `spec.volumepath`, whichever object still carries it; a change in place (patch, replace)
//! is never seen. [`DriverModel`] is that informer beside the API's objects;
//! [`fake_api`] serves the objects over HTTP to a real `kube::Client`.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use http::{Method, Request, Response, StatusCode};
use kube::api::Api;
use kube::client::Body;
use serde_json::{Value, json};

use super::{CnsVSphereVolumeMigration, CnsVSphereVolumeMigrationSpec, DriverIndex, MANAGED_BY};

/// The API's objects and the driver's cache, kept by Add and Delete events only.
#[derive(Default)]
pub struct DriverModel {
    /// The objects as the API holds them: spec, and whether volmig's label is on it.
    pub objects: BTreeMap<String, (CnsVSphereVolumeMigrationSpec, bool)>,
    /// The driver's cache: raw path → volume ID.
    pub cache: BTreeMap<String, String>,
    /// The events, in order: `ADDED name`, `DELETED name`, `MODIFIED name`.
    pub events: Vec<String>,
    /// volmig's index, kept by the same events (as its watch keeps it), when set.
    pub watch: Option<Arc<DriverIndex>>,
}

impl DriverModel {
    /// A model whose events also reach `index`.
    pub fn watched_by(index: Arc<DriverIndex>) -> Self {
        Self {
            watch: Some(index),
            ..Self::default()
        }
    }

    /// POST: false (409) when the name is taken.
    pub fn create(&mut self, name: &str, spec: &CnsVSphereVolumeMigrationSpec, ours: bool) -> bool {
        if self.objects.contains_key(name) {
            return false;
        }
        self.objects.insert(name.to_owned(), (spec.clone(), ours));
        self.cache
            .insert(spec.volumepath.clone(), spec.volumeid.clone());
        self.events.push(format!("ADDED {name}"));
        if let Some(index) = &self.watch {
            index.upsert(name, spec, ours);
        }
        true
    }

    /// DELETE: false (404) when there is no such object.
    pub fn delete(&mut self, name: &str) -> bool {
        let Some((spec, _)) = self.objects.remove(name) else {
            return false;
        };
        self.cache.remove(&spec.volumepath);
        self.events.push(format!("DELETED {name}"));
        if let Some(index) = &self.watch {
            index.remove(name);
        }
        true
    }

    /// PATCH or PUT of the spec: the API changes, the driver's cache does not.
    pub fn modify(&mut self, name: &str, spec: &CnsVSphereVolumeMigrationSpec) -> bool {
        let Some((have, ours)) = self.objects.get_mut(name) else {
            return false;
        };
        *have = spec.clone();
        let ours = *ours;
        self.events.push(format!("MODIFIED {name}"));
        if let Some(index) = &self.watch {
            index.upsert(name, spec, ours);
        }
        true
    }

    /// Names changed in place: each one a change the driver never saw.
    pub fn modified(&self) -> Vec<&str> {
        self.events
            .iter()
            .filter_map(|e| e.strip_prefix("MODIFIED "))
            .collect()
    }

    /// The object as the API serves it.
    pub fn object(&self, name: &str) -> Option<CnsVSphereVolumeMigration> {
        let (spec, ours) = self.objects.get(name)?;
        let mut object = CnsVSphereVolumeMigration::new(name, spec.clone());
        if *ours {
            object.metadata.labels = Some([(MANAGED_BY.to_owned(), "volmig".to_owned())].into());
        }
        Some(object)
    }
}

/// What the fake API server saw and holds.
#[derive(Default)]
pub struct FakeState {
    /// The objects and the driver's cache.
    pub model: DriverModel,
    /// Every request: method and path.
    pub calls: Vec<(Method, String)>,
}

const OBJECTS: &str = "/apis/cns.vmware.com/v1alpha1/cnsvspherevolumemigrations";

fn status(code: StatusCode, reason: &str) -> (StatusCode, Value) {
    let body = json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": reason, "reason": reason, "code": code.as_u16(),
    });
    (code, body)
}

fn to_value(object: Option<CnsVSphereVolumeMigration>) -> (StatusCode, Value) {
    match object.map(serde_json::to_value) {
        Some(Ok(value)) => (StatusCode::OK, value),
        Some(Err(e)) => status(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
        None => status(StatusCode::NOT_FOUND, "NotFound"),
    }
}

impl FakeState {
    fn serve(&mut self, method: &Method, path: &str, body: &[u8]) -> (StatusCode, Value) {
        self.calls.push((method.clone(), path.to_owned()));
        let Some(rest) = path.strip_prefix(OBJECTS) else {
            return status(StatusCode::NOT_FOUND, "NotFound");
        };
        let name = rest.trim_start_matches('/');
        let object: Option<CnsVSphereVolumeMigration> = serde_json::from_slice(body).ok();
        match (method.clone(), name, object) {
            (Method::POST, "", Some(object)) => {
                let name = object.metadata.name.clone().unwrap_or_default();
                if self
                    .model
                    .create(&name, &object.spec, super::is_ours(&object))
                {
                    let (_, value) = to_value(self.model.object(&name));
                    (StatusCode::CREATED, value)
                } else {
                    status(StatusCode::CONFLICT, "AlreadyExists")
                }
            }
            (Method::GET, name, _) if !name.is_empty() => to_value(self.model.object(name)),
            (Method::DELETE, name, _) if !name.is_empty() => {
                let gone = self.model.object(name);
                if self.model.delete(name) {
                    to_value(gone)
                } else {
                    status(StatusCode::NOT_FOUND, "NotFound")
                }
            }
            (Method::PATCH | Method::PUT, name, _) if !name.is_empty() => {
                let patch: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
                let Some(mut spec) = self.model.object(name).map(|o| o.spec) else {
                    return status(StatusCode::NOT_FOUND, "NotFound");
                };
                if let Ok(new) = serde_json::from_value(patch["spec"].clone()) {
                    spec = new;
                }
                self.model.modify(name, &spec);
                to_value(self.model.object(name))
            }
            _ => status(StatusCode::METHOD_NOT_ALLOWED, "MethodNotAllowed"),
        }
    }

    /// The calls that change an object in place.
    pub fn in_place_writes(&self) -> Vec<&(Method, String)> {
        self.calls
            .iter()
            .filter(|(m, _)| *m == Method::PATCH || *m == Method::PUT)
            .collect()
    }
}

/// A `kube::Client` API over a fake API server holding `model`'s objects.
pub fn fake_api(model: DriverModel) -> (Api<CnsVSphereVolumeMigration>, Arc<Mutex<FakeState>>) {
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let state = Arc::new(Mutex::new(FakeState {
        model,
        calls: Vec::new(),
    }));
    let served = Arc::clone(&state);
    tokio::spawn(async move {
        while let Some((request, send)) = handle.next_request().await {
            let (parts, body) = request.into_parts();
            let body = body.collect_bytes().await.unwrap_or_default();
            let (code, value) = served
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .serve(&parts.method, parts.uri.path(), &body);
            let response = Response::builder()
                .status(code)
                .header(http::header::CONTENT_TYPE, "application/json")
                .body(Body::from(serde_json::to_vec(&value).unwrap_or_default()));
            if let Ok(response) = response {
                send.send_response(response);
            }
        }
    });
    (Api::all(kube::Client::new(service, "default")), state)
}
