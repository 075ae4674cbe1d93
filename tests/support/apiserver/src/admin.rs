//! `/_testserver/` admin endpoints, so a separate process can drive faults and read counters:
//! `GET|POST /_testserver/faults`, `POST /_testserver/drop-watches`,
//! `POST /_testserver/compact`, `GET /_testserver/stats`, `POST /_testserver/stats/reset`.
//! These requests are not counted in the stats.

use std::sync::Arc;

use axum::body::{Body, to_bytes};
use axum::extract::Request;
use axum::http::{Method, Response};
use serde_json::json;

use crate::error::ApiError;
use crate::faults::{FaultConfig, Faults};
use crate::http::respond::{error, json_value};
use crate::server::Shared;

/// Handles one admin request.
pub async fn handle(
    shared: &Arc<Shared>,
    method: Method,
    what: &str,
    req: Request,
) -> Response<Body> {
    let faults = Faults {
        shared: shared.clone(),
    };
    match (method.as_str(), what) {
        ("GET", "faults") => json_value(200, &json!(faults.config())),
        ("POST", "faults") => {
            let raw = match to_bytes(req.into_body(), 1 << 20).await {
                Ok(b) => b,
                Err(e) => return error(&ApiError::bad_request(format!("reading body: {e}"))),
            };
            match serde_json::from_slice::<FaultConfig>(&raw) {
                Ok(cfg) => {
                    faults.set(cfg);
                    json_value(200, &json!(faults.config()))
                }
                Err(e) => error(&ApiError::bad_request(format!(
                    "invalid fault configuration: {e}"
                ))),
            }
        }
        ("POST", "drop-watches") => json_value(200, &json!({"dropped": faults.drop_watches()})),
        ("POST", "compact") => json_value(
            200,
            &json!({"resourceVersion": faults.compact().to_string()}),
        ),
        ("GET", "stats") => json_value(200, &json!(shared.counters().snapshot())),
        ("POST", "stats/reset") => {
            shared.counters().reset();
            json_value(200, &json!({}))
        }
        _ => error(&ApiError::no_route(&format!("/_testserver/{what}"))),
    }
}
