use std::convert::Infallible;

use http_body_util::{BodyExt as _, StreamBody};
use tower::ServiceExt as _;

use super::*;

type Frames =
    StreamBody<futures::stream::BoxStream<'static, Result<http_body::Frame<Bytes>, Infallible>>>;

/// A body that sends `first`, then nothing until `rest_after` has passed, then `rest`.
fn slow_body(first: &'static str, rest_after: Duration, rest: &'static str) -> Frames {
    use futures::StreamExt as _;
    let head = futures::stream::once(async move { Ok(http_body::Frame::data(Bytes::from(first))) });
    let tail = futures::stream::once(async move {
        tokio::time::sleep(rest_after).await;
        Ok(http_body::Frame::data(Bytes::from(rest)))
    });
    StreamBody::new(head.chain(tail).boxed())
}

/// A server that answers after `headers_after` with a body whose second half takes
/// `rest_after` more.
fn server(
    headers_after: Duration,
    rest_after: Duration,
) -> impl Service<
    Request<()>,
    Response = Response<Frames>,
    Error = Infallible,
    Future = impl Future<Output = Result<Response<Frames>, Infallible>> + Send + 'static,
> + Clone {
    tower::service_fn(move |_req: Request<()>| async move {
        tokio::time::sleep(headers_after).await;
        Ok::<_, Infallible>(Response::new(slow_body("{\"a\":", rest_after, "1}")))
    })
}

fn get(uri: &str) -> Request<()> {
    Request::get(uri).body(()).unwrap()
}

async fn exchange<S>(service: S, request: Request<()>) -> Result<String, BoxError>
where
    S: Service<Request<()>, Response = Response<DeadlinedBody<Frames>>, Error = BoxError>,
{
    let response = service.oneshot(request).await?;
    let body = response.into_body().collect().await?.to_bytes();
    Ok(String::from_utf8(body.to_vec()).unwrap())
}

fn timed_out(error: &BoxError) -> &RequestTimedOut {
    error
        .downcast_ref::<RequestTimedOut>()
        .unwrap_or_else(|| panic!("not a timeout: {error}"))
}

#[tokio::test(start_paused = true)]
async fn a_reply_in_time_passes_unchanged() {
    let svc = DeadlineLayer::new(Duration::from_secs(70))
        .layer(server(Duration::from_secs(30), Duration::from_secs(30)));
    let body = exchange(svc, get("/apis/x/v1/things/a")).await.unwrap();
    assert_eq!(body, "{\"a\":1}");
}

#[tokio::test(start_paused = true)]
async fn headers_that_never_come_fail_at_the_deadline() {
    let svc = DeadlineLayer::new(Duration::from_secs(70))
        .layer(server(Duration::from_secs(3600), Duration::ZERO));
    let started = Instant::now();
    let request = Request::patch("/apis/x/v1/things/a/status")
        .body(())
        .unwrap();
    let error = exchange(svc, request).await.unwrap_err();
    assert_eq!(started.elapsed(), Duration::from_secs(70));
    let e = timed_out(&error);
    assert_eq!(e.what, "PATCH /apis/x/v1/things/a/status");
    assert_eq!(e.limit, Duration::from_secs(70));
    assert!(
        error.to_string().contains("--kube-request-timeout"),
        "{error}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_body_that_stalls_fails_at_the_same_deadline() {
    // Headers after 50 s, then half the body; the rest would take an hour.
    let svc = DeadlineLayer::new(Duration::from_secs(70))
        .layer(server(Duration::from_secs(50), Duration::from_secs(3600)));
    let started = Instant::now();
    let error = exchange(svc, get("/api/v1/persistentvolumes?limit=500"))
        .await
        .unwrap_err();
    assert_eq!(
        started.elapsed(),
        Duration::from_secs(70),
        "one deadline for headers and body"
    );
    assert_eq!(timed_out(&error).what, "GET /api/v1/persistentvolumes");
}

#[tokio::test(start_paused = true)]
async fn watches_have_no_deadline() {
    for query in [
        "watch=true",
        "watch=1&resourceVersion=5",
        "labelSelector=a&watch=true",
    ] {
        let svc = DeadlineLayer::new(Duration::from_secs(70))
            .layer(server(Duration::from_secs(200), Duration::from_secs(200)));
        let started = Instant::now();
        let body = exchange(svc, get(&format!("/api/v1/persistentvolumes?{query}")))
            .await
            .unwrap_or_else(|e| panic!("{query}: {e}"));
        assert_eq!(body, "{\"a\":1}");
        assert_eq!(started.elapsed(), Duration::from_secs(400), "{query}");
    }
}

#[test]
fn only_a_true_watch_parameter_makes_a_watch() {
    assert!(is_watch(Some("watch=true")));
    assert!(is_watch(Some("a=b&watch=1")));
    for query in [
        None,
        Some(""),
        Some("watch=false"),
        Some("watch=0"),
        Some("allowWatchBookmarks=true"),
        Some("nowatch=true"),
        Some("watch"),
    ] {
        assert!(!is_watch(query), "{query:?}");
    }
}
