//! Streaming watches: synthetic ADDED events for the initial state, then the changes from the
//! history, one JSON object per line; 410 Gone as an ERROR event for a resourceVersion that
//! left the history; bookmarks; `timeoutSeconds`; ended by "drop watches" and shutdown.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{HeaderValue, Response, header};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::convert::to_served;
use crate::error::ApiError;
use crate::http::query::Query;
use crate::http::respond::Shape;
use crate::ops::{Ctx, served_selectors};
use crate::selectors::{FieldSelector, LabelSelector};
use crate::server::Shared;
use crate::store::{EventType, HistEvent, TooOld};
use crate::tables::{Columns, IncludeObject, partial_metadata};

const BATCH: usize = 500;

/// Starts a watch and returns the streaming response.
pub fn serve(shared: Arc<Shared>, ctx: Ctx, q: Query, shape: Shape) -> Response<Body> {
    let (tx, rx) = mpsc::channel::<Bytes>(64);
    let (labels, fields) = served_selectors(&ctx, &q);
    let cols = (shape == Shape::Table).then(|| Columns::for_resource(&ctx.def, &ctx.version));
    let w = Watcher {
        include: IncludeObject::parse(q.include_object.as_deref()),
        ctx,
        labels,
        fields,
        shape,
        cols,
        headers_sent: false,
        tx,
    };
    // Registered before anything else so that a drop right after this request is seen.
    shared.open_watches.fetch_add(1, Ordering::SeqCst);
    let guard = OpenGuard(shared.clone());
    let mut drops = shared.drops.subscribe();
    drops.borrow_and_update();
    tokio::spawn(w.run(shared, q, drops, guard));
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|b| (Ok::<Bytes, Infallible>(b), rx))
    });
    let mut r = Response::new(Body::from_stream(stream));
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

struct OpenGuard(Arc<Shared>);

impl Drop for OpenGuard {
    fn drop(&mut self) {
        self.0.open_watches.fetch_sub(1, Ordering::SeqCst);
    }
}

struct Watcher {
    ctx: Ctx,
    labels: LabelSelector,
    fields: FieldSelector,
    shape: Shape,
    include: IncludeObject,
    cols: Option<Columns>,
    headers_sent: bool,
    tx: mpsc::Sender<Bytes>,
}

enum Sent {
    Ok,
    Closed,
}

impl Watcher {
    fn selected(&self, obj: &Value) -> bool {
        if self.ctx.def.namespaced
            && let Some(ns) = &self.ctx.namespace
            && crate::meta::namespace(obj) != ns
        {
            return false;
        }
        self.labels.matches(obj) && self.fields.matches(obj)
    }

    async fn send_line(&self, v: &Value) -> Sent {
        let mut bytes = serde_json::to_vec(v).unwrap_or_default();
        bytes.push(b'\n');
        match self.tx.send(Bytes::from(bytes)).await {
            Ok(()) => Sent::Ok,
            Err(_) => Sent::Closed,
        }
    }

    async fn send_object(&mut self, kind: EventType, obj: &Value) -> Sent {
        let served = to_served(&self.ctx.def, &self.ctx.version, obj);
        let object = match (self.shape, &self.cols) {
            (Shape::Table, Some(cols)) => {
                let rv = served
                    .pointer("/metadata/resourceVersion")
                    .cloned()
                    .unwrap_or(Value::Null);
                let t = cols.table(
                    std::iter::once(&*served),
                    json!({"resourceVersion": rv}),
                    self.include,
                    !self.headers_sent,
                );
                self.headers_sent = true;
                t
            }
            (Shape::Partial, _) => partial_metadata(&served),
            _ => served.into_owned(),
        };
        self.send_line(&json!({"type": kind.as_str(), "object": object}))
            .await
    }

    async fn send_bookmark(&self, rv: u64, initial_end: bool) -> Sent {
        if self.shape == Shape::Table {
            return Sent::Ok;
        }
        let (kind, api_version) = match self.shape {
            Shape::Partial => (
                "PartialObjectMetadata".to_string(),
                "meta.k8s.io/v1".to_string(),
            ),
            _ => (
                self.ctx.def.kind.clone(),
                self.ctx.def.api_version(&self.ctx.version),
            ),
        };
        let mut meta = json!({"resourceVersion": rv.to_string()});
        if initial_end {
            meta["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        let obj = json!({"kind": kind, "apiVersion": api_version, "metadata": meta});
        self.send_line(&json!({"type": "BOOKMARK", "object": obj}))
            .await
    }

    async fn send_gone(&self, rv: u64, too_old: TooOld) {
        let e = ApiError::gone(format!(
            "too old resource version: {rv} ({})",
            too_old.floor
        ));
        let _ = self
            .send_line(&json!({"type": "ERROR", "object": e.status()}))
            .await;
    }

    async fn deliver(&mut self, ev: &HistEvent) -> Sent {
        let now = self.selected(&ev.obj);
        let before = ev.prev.as_ref().is_some_and(|p| self.selected(p));
        let kind = match ev.kind {
            EventType::Added if now => EventType::Added,
            EventType::Modified if now && before => EventType::Modified,
            EventType::Modified if now => EventType::Added,
            EventType::Modified if before => EventType::Deleted,
            EventType::Deleted if before || now => EventType::Deleted,
            _ => return Sent::Ok,
        };
        self.send_object(kind, &ev.obj).await
    }

    async fn run(
        mut self,
        shared: Arc<Shared>,
        q: Query,
        mut drops: tokio::sync::watch::Receiver<u64>,
        _guard: OpenGuard,
    ) {
        let mut changes = shared.rv_rx.clone();
        changes.borrow_and_update();
        let requested = match q.resource_version.as_deref() {
            None | Some("0") => None,
            Some(s) => match s.parse::<u64>() {
                Ok(rv) => Some(rv),
                Err(_) => {
                    let e = ApiError::bad_request(format!("invalid resource version {s:?}"));
                    let _ = self
                        .send_line(&json!({"type": "ERROR", "object": e.status()}))
                        .await;
                    return;
                }
            },
        };
        let start = {
            let store = shared.store();
            let current = store.rv();
            if let Some(rv) = requested
                && let Err(too_old) = store.history.check(rv)
            {
                Err((rv, too_old))
            } else {
                let snapshot = requested.is_none() || q.send_initial_events;
                let initial: Vec<Arc<Value>> = if snapshot {
                    let ns = if self.ctx.def.namespaced {
                        self.ctx.namespace.as_deref()
                    } else {
                        None
                    };
                    store
                        .range(self.ctx.sk(), ns, None)
                        .map(|(_, o)| o.clone())
                        .filter(|o| self.selected(o))
                        .collect()
                } else {
                    Vec::new()
                };
                Ok((
                    initial,
                    if snapshot {
                        current
                    } else {
                        requested.unwrap_or(current)
                    },
                ))
            }
        };
        let (initial, mut last) = match start {
            Ok(s) => s,
            Err((rv, too_old)) => {
                self.send_gone(rv, too_old).await;
                return;
            }
        };
        for obj in &initial {
            if let Sent::Closed = self.send_object(EventType::Added, obj).await {
                return;
            }
        }
        drop(initial);
        if q.send_initial_events
            && q.bookmarks
            && let Sent::Closed = self.send_bookmark(last, true).await
        {
            return;
        }
        let deadline = q
            .timeout_seconds
            .map(|s| Instant::now() + Duration::from_secs(s));
        let idle = shared.opts.bookmark_interval;
        loop {
            // A drop wins over pending events: nothing committed after it is delivered.
            if drops.has_changed().unwrap_or(true) {
                return;
            }
            changes.borrow_and_update();
            let batch = {
                let store = shared.store();
                store.history.since(last, self.ctx.sk(), BATCH, true)
            };
            let (events, scanned) = match batch {
                Ok(b) => b,
                Err(too_old) => {
                    self.send_gone(last, too_old).await;
                    return;
                }
            };
            let progressed = scanned > last;
            last = scanned;
            for ev in &events {
                if let Sent::Closed = self.deliver(ev).await {
                    return;
                }
            }
            if progressed {
                continue;
            }
            let until_deadline = async {
                match deadline {
                    Some(d) => tokio::time::sleep_until(d).await,
                    None => std::future::pending::<()>().await,
                }
            };
            tokio::select! {
                biased;
                _ = drops.changed() => return,
                r = changes.changed() => if r.is_err() { return },
                () = until_deadline => {
                    if q.bookmarks {
                        let _ = self.send_bookmark(last, false).await;
                    }
                    return;
                }
                () = tokio::time::sleep(idle), if q.bookmarks => {
                    if let Sent::Closed = self.send_bookmark(last, false).await {
                        return;
                    }
                }
                () = self.tx.closed() => return,
            }
        }
    }
}
