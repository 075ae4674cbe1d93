//! A deadline on every Kubernetes request that is not a watch (`--kube-request-timeout`).
//!
//! kube-client sets no read timeout (a watch may stay quiet for minutes), so without this
//! a request whose reply never comes (a half-open connection after an API server
//! failover, a stalled proxy) waits forever. The registrar makes its write-ahead while it
//! holds a backend slot and the path's lock: one such hang would hold both for good, and
//! `--max-concurrent-registrations` of them would stop every registration. With the
//! deadline the request fails as unavailable, the registrar lets go of both and retries
//! from a fresh read (a write that was committed after all is found there).
//!
//! The deadline covers the whole exchange: the reply's headers and its body. Watches
//! (`?watch=true`) are exempt; kube-runtime's watcher restarts them itself.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use tokio::time::{Instant, Sleep};
use tower::{BoxError, Layer, Service};

/// The default of `--kube-request-timeout`: above the API server's own limit for a
/// request (60 s), so the server answers first whenever it can.
pub const DEFAULT_KUBE_REQUEST_TIMEOUT: Duration = Duration::from_secs(70);

/// A Kubernetes request that got no complete reply in time.
#[derive(Debug, thiserror::Error)]
#[error(
    "Kubernetes request {what} got no complete reply within {limit:?} (--kube-request-timeout)"
)]
pub struct RequestTimedOut {
    /// Method and path of the request.
    pub what: String,
    /// The deadline it had.
    pub limit: Duration,
}

/// Adds [`Deadlined`] to a client's service stack.
#[derive(Debug, Clone, Copy)]
pub struct DeadlineLayer {
    limit: Duration,
}

impl DeadlineLayer {
    /// Requests other than watches must be answered completely within `limit`.
    pub fn new(limit: Duration) -> Self {
        Self { limit }
    }
}

impl<S> Layer<S> for DeadlineLayer {
    type Service = Deadlined<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Deadlined {
            inner,
            limit: self.limit,
        }
    }
}

/// The service of [`DeadlineLayer`].
#[derive(Debug, Clone)]
pub struct Deadlined<S> {
    inner: S,
    limit: Duration,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for Deadlined<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
    ResBody: http_body::Body<Data = Bytes> + Unpin + Send + 'static,
    ResBody::Error: Into<BoxError>,
{
    type Response = Response<DeadlinedBody<ResBody>>;
    type Error = BoxError;
    type Future = BoxFuture<Result<Self::Response, BoxError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        let limit = (!is_watch(request.uri().query())).then_some(self.limit);
        let what = format!("{} {}", request.method(), request.uri().path());
        let reply = self.inner.call(request);
        Box::pin(async move {
            let Some(limit) = limit else {
                let response = reply.await.map_err(Into::into)?;
                return Ok(response.map(|body| DeadlinedBody::new(body, None)));
            };
            let deadline = Instant::now() + limit;
            match tokio::time::timeout_at(deadline, reply).await {
                Ok(response) => {
                    let response = response.map_err(Into::into)?;
                    let expiry = Expiry {
                        sleep: Box::pin(tokio::time::sleep_until(deadline)),
                        what,
                        limit,
                    };
                    Ok(response.map(|body| DeadlinedBody::new(body, Some(expiry))))
                }
                Err(_) => Err(RequestTimedOut { what, limit }.into()),
            }
        })
    }
}

/// True for a watch request (`watch=true` or `watch=1` in the query).
fn is_watch(query: Option<&str>) -> bool {
    query.is_some_and(|q| {
        q.split('&')
            .filter_map(|pair| pair.split_once('='))
            .any(|(key, value)| key == "watch" && (value == "true" || value == "1"))
    })
}

/// When a reply's body must have ended.
#[derive(Debug)]
struct Expiry {
    sleep: Pin<Box<Sleep>>,
    what: String,
    limit: Duration,
}

/// A reply body that fails with [`RequestTimedOut`] if it has not ended by the deadline.
#[derive(Debug)]
pub struct DeadlinedBody<B> {
    inner: B,
    expiry: Option<Expiry>,
}

impl<B> DeadlinedBody<B> {
    fn new(inner: B, expiry: Option<Expiry>) -> Self {
        Self { inner, expiry }
    }
}

impl<B> http_body::Body for DeadlinedBody<B>
where
    B: http_body::Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        if let Poll::Ready(frame) = Pin::new(&mut this.inner).poll_frame(cx) {
            return Poll::Ready(frame.map(|f| f.map_err(Into::into)));
        }
        let expired = this
            .expiry
            .as_mut()
            .is_some_and(|expiry| expiry.sleep.as_mut().poll(cx).is_ready());
        match this.expiry.take_if(|_| expired) {
            Some(Expiry { what, limit, .. }) => {
                Poll::Ready(Some(Err(RequestTimedOut { what, limit }.into())))
            }
            None => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
#[path = "deadline_tests.rs"]
mod tests;
