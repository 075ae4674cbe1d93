//! HTTP front: routing, request counting, fault injection, body decoding, dispatch to the
//! verbs, and rendering.

pub mod path;
pub mod query;
pub mod respond;

use std::sync::Arc;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{Method, Response, header};
use serde_json::Value;

use crate::auth::{self, UserInfo};
use crate::error::{ApiError, ApiResult};
use crate::faults::Injected;
use crate::ops::{self, Ctx, Written};
use crate::patch::PatchType;
use crate::server::Shared;
use crate::stats::Verb;
use crate::tables::IncludeObject;
use crate::{admin, discovery, openapi, watch};
use path::{ResourcePath, Route, route};
use query::Query;
use respond::negotiate;

const MAX_BODY: usize = 64 * 1024 * 1024;

/// The axum application.
pub fn router(shared: Arc<Shared>) -> Router {
    Router::new().fallback(handle).with_state(shared)
}

fn header_str(req: &Request, name: header::HeaderName) -> &str {
    req.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
}

/// Authenticates a request: the admin token, a minted ServiceAccount token, or anonymous
/// without one; 401 for anything else.
fn authenticate(shared: &Shared, req: &Request) -> ApiResult<UserInfo> {
    let Some(token) = auth::bearer(req.headers())? else {
        return Ok(if shared.opts.anonymous_is_admin {
            UserInfo::admin()
        } else {
            UserInfo::anonymous()
        });
    };
    let store = shared.store();
    let tokens = shared.tokens();
    tokens.lookup(&store, token).ok_or_else(auth::unauthorized)
}

/// Authorizes `a` for `user`; a denial is counted and answered 403.
fn authorize(shared: &Shared, user: &UserInfo, a: &auth::Attributes) -> ApiResult<()> {
    match auth::rbac::authorize(&shared.store(), user, a) {
        auth::rbac::Decision::Allow(_) => Ok(()),
        auth::rbac::Decision::Deny(reason) => {
            let e = a.forbidden(&user.name, &reason);
            shared.counters().forbidden(&user.name, a, &e.message);
            tracing::debug!(user = %user.name, message = %e.message, "forbidden");
            Err(e)
        }
    }
}

async fn handle(State(shared): State<Arc<Shared>>, req: Request) -> Response<Body> {
    let r = route(req.uri().path());
    if let Route::Admin(what) = r {
        return admin::handle(&shared, req.method().clone(), &what, req).await;
    }
    let user = match authenticate(&shared, &req) {
        Ok(u) => u,
        Err(e) => {
            shared.counters().unauthorized();
            return respond::error(&e);
        }
    };
    if !matches!(r, Route::Resource(_)) {
        let a = auth::Attributes::non_resource(req.method().as_str(), req.uri().path());
        if let Err(e) = authorize(&shared, &user, &a) {
            shared.counters().other();
            return respond::error(&e);
        }
    }
    match r {
        Route::Admin(_) => respond::error(&ApiError::internal("admin route after authentication")),
        Route::Resource(rp) => resource(shared, rp, req, user).await,
        Route::OpenApiV2 if header_str(&req, header::ACCEPT).contains("protobuf") => {
            shared.counters().other();
            let (major, minor) = shared.opts.kube_version;
            let doc = crate::openapi_v2::document(
                &shared.store().registry,
                &format!("v{major}.{minor}.0"),
            );
            let mut r = Response::new(Body::from(doc));
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                header::HeaderValue::from_static(
                    "application/com.github.proto-openapi.spec.v2.v1.0+protobuf",
                ),
            );
            r
        }
        other => {
            shared.counters().other();
            meta_endpoint(&shared, other, req.uri().path())
        }
    }
}

fn meta_endpoint(shared: &Shared, r: Route, path: &str) -> Response<Body> {
    let store = shared.store();
    let reg = &store.registry;
    let doc = match r {
        Route::Version => Some(discovery::version(
            shared.opts.kube_version.0,
            shared.opts.kube_version.1,
        )),
        Route::Health => return respond::json_bytes(200, b"ok".to_vec(), &[]),
        Route::Api => Some(discovery::api_versions(&shared.addr.to_string())),
        Route::Apis => Some(discovery::api_group_list(reg)),
        Route::Group(g) => discovery::api_group(reg, &g),
        Route::GroupVersion(g, v) => discovery::resource_list(reg, &g, &v),
        Route::OpenApiIndex => Some(openapi::index(reg)),
        Route::OpenApiDoc(g, v) => openapi::group_version_doc(reg, &g, &v),
        _ => None,
    };
    match doc {
        Some(d) => respond::json_value(200, &d),
        None => respond::error(&ApiError::no_route(path)),
    }
}

fn resolve(shared: &Shared, rp: &ResourcePath) -> ApiResult<Ctx> {
    let store = shared.store();
    let def = store
        .registry
        .lookup(&rp.group, &rp.version, &rp.plural)
        .ok_or_else(|| ApiError::no_route(&format!("{}/{}/{}", rp.group, rp.version, rp.plural)))?;
    if !def.namespaced && rp.namespace.is_some() {
        return Err(ApiError::no_route(&rp.plural));
    }
    if def.namespaced && rp.namespace.is_none() && rp.name.is_some() {
        return Err(ApiError::no_route(&rp.plural));
    }
    if let Some(sub) = &rp.subresource
        && !(sub == "status" && def.has_status(&rp.version))
    {
        return Err(ApiError::no_route(&format!("{}/{sub}", rp.plural)));
    }
    Ok(Ctx {
        def,
        version: rp.version.clone(),
        namespace: rp.namespace.clone(),
        name: rp.name.clone(),
        subresource: rp.subresource.clone(),
    })
}

fn verb_of(method: &Method, has_name: bool, watch: bool) -> ApiResult<Verb> {
    Ok(match (method.as_str(), has_name) {
        ("GET", true) => Verb::Get,
        ("GET", false) if watch => Verb::Watch,
        ("GET", false) => Verb::List,
        ("POST", false) => Verb::Create,
        ("PUT", true) => Verb::Update,
        ("PATCH", true) => Verb::Patch,
        ("DELETE", true) => Verb::Delete,
        ("DELETE", false) => Verb::DeleteCollection,
        (m, _) => {
            return Err(ApiError::method_not_allowed(format!(
                "the server does not allow this method on the requested resource ({m})"
            )));
        }
    })
}

fn parse_body(ct: &str, raw: &[u8]) -> ApiResult<Value> {
    if ct.contains("protobuf") {
        return crate::protobuf::decode(raw);
    }
    if ct.contains("cbor") {
        return Err(ApiError::unsupported_media_type(ct));
    }
    match serde_json::from_slice::<Value>(raw) {
        Ok(v) => Ok(v),
        Err(json_err) => {
            if ct.contains("yaml") {
                let text = std::str::from_utf8(raw)
                    .map_err(|e| ApiError::bad_request(format!("body is not UTF-8: {e}")))?;
                serde_saphyr::from_str::<Value>(text)
                    .map_err(|e| ApiError::bad_request(format!("error decoding YAML body: {e}")))
            } else {
                Err(ApiError::bad_request(format!(
                    "error decoding JSON body: {json_err}"
                )))
            }
        }
    }
}

async fn resource(
    shared: Arc<Shared>,
    rp: ResourcePath,
    req: Request,
    user: UserInfo,
) -> Response<Body> {
    match resource_inner(shared, rp, req, user).await {
        Ok(r) => r,
        Err(e) => respond::error(&e),
    }
}

/// The special endpoints that are not stored resources.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Special {
    TokenRequest,
    AccessReview,
    SubjectAccessReview,
    SelfSubjectReview,
}

fn special(rp: &ResourcePath) -> Option<Special> {
    match (
        rp.group.as_str(),
        rp.plural.as_str(),
        rp.subresource.as_deref(),
    ) {
        ("", "serviceaccounts", Some("token")) if rp.namespace.is_some() => {
            Some(Special::TokenRequest)
        }
        ("authorization.k8s.io", "selfsubjectaccessreviews", None) if rp.version == "v1" => {
            Some(Special::AccessReview)
        }
        ("authorization.k8s.io", "subjectaccessreviews", None) if rp.version == "v1" => {
            Some(Special::SubjectAccessReview)
        }
        ("authentication.k8s.io", "selfsubjectreviews", None) if rp.version == "v1" => {
            Some(Special::SelfSubjectReview)
        }
        _ => None,
    }
}

fn authz_verb(verb: Verb, legacy_watch: bool) -> &'static str {
    match verb {
        _ if legacy_watch => "watch",
        Verb::Get => "get",
        Verb::List => "list",
        Verb::Watch => "watch",
        Verb::Create => "create",
        Verb::Update => "update",
        Verb::Patch => "patch",
        Verb::Delete => "delete",
        Verb::DeleteCollection => "deletecollection",
    }
}

async fn special_request(
    shared: Arc<Shared>,
    rp: ResourcePath,
    req: Request,
    user: UserInfo,
    which: Special,
) -> ApiResult<Response<Body>> {
    let agent = header_str(&req, header::USER_AGENT).to_string();
    let q = Query::parse(req.uri().query())?;
    shared.counters().api(
        Verb::Create,
        &rp.group,
        &rp.plural,
        rp.subresource.as_deref(),
        q.dry_run,
        &agent,
    );
    authorize(
        &shared,
        &user,
        &auth::Attributes::resource(&rp, "create", req.uri().query()),
    )?;
    let name_ok = match which {
        Special::TokenRequest => rp.name.is_some(),
        Special::AccessReview | Special::SubjectAccessReview | Special::SelfSubjectReview => {
            rp.name.is_none() && rp.namespace.is_none()
        }
    };
    if req.method() != Method::POST || !name_ok {
        return Err(ApiError::method_not_allowed(format!(
            "the server does not allow this method on the requested resource ({})",
            req.method()
        )));
    }
    let ct = header_str(&req, header::CONTENT_TYPE).to_string();
    let raw: Bytes = axum::body::to_bytes(req.into_body(), MAX_BODY)
        .await
        .map_err(|e| ApiError::bad_request(format!("reading the request body: {e}")))?;
    let body = if raw.is_empty() {
        Value::Object(Default::default())
    } else {
        parse_body(&ct, &raw)?
    };
    let out = match which {
        Special::TokenRequest => auth::review::token_request(
            &shared,
            rp.namespace.as_deref().unwrap_or(""),
            rp.name.as_deref().unwrap_or(""),
            &body,
        )?,
        Special::AccessReview => auth::review::self_subject_access_review(&shared, &user, &body)?,
        Special::SubjectAccessReview => auth::review::subject_access_review(&shared, &body)?,
        Special::SelfSubjectReview => auth::review::self_subject_review(&user),
    };
    Ok(respond::json_value(201, &out))
}

async fn resource_inner(
    shared: Arc<Shared>,
    rp: ResourcePath,
    req: Request,
    user: UserInfo,
) -> ApiResult<Response<Body>> {
    if let Some(which) = special(&rp) {
        return special_request(shared, rp, req, user, which).await;
    }
    let mut q = Query::parse(req.uri().query())?;
    q.user_agent = header_str(&req, header::USER_AGENT).to_string();
    let watch = q.watch || rp.legacy_watch;
    let verb = verb_of(req.method(), rp.name.is_some(), watch)?;
    let agent = header_str(&req, header::USER_AGENT).to_string();
    shared.counters().api(
        verb,
        &rp.group,
        &rp.plural,
        rp.subresource.as_deref(),
        q.dry_run,
        &agent,
    );
    authorize(
        &shared,
        &user,
        &auth::Attributes::resource(&rp, authz_verb(verb, rp.legacy_watch), req.uri().query()),
    )?;
    let ctx = resolve(&shared, &rp)?;
    let (latency, fate) = {
        let mut f = shared.faults.lock().unwrap_or_else(|p| p.into_inner());
        f.decide(verb.is_write(), &rp.plural)
    };
    if !latency.is_zero() {
        tokio::time::sleep(latency).await;
    }
    match fate {
        Injected::Fail500 => {
            shared.counters().injected();
            return Err(ApiError::internal("injected failure (kube-testserver)"));
        }
        Injected::Fail429(s) => {
            shared.counters().injected();
            return Err(ApiError::too_many_requests(s));
        }
        _ => {}
    }
    let shape = negotiate(header_str(&req, header::ACCEPT));
    let include = IncludeObject::parse(q.include_object.as_deref());
    let ct = header_str(&req, header::CONTENT_TYPE).to_string();
    if verb == Verb::Watch {
        return Ok(watch::serve(shared, ctx, q, shape));
    }
    if verb == Verb::Get {
        let obj = ops::get(&shared.store(), &ctx)?;
        let served = crate::convert::to_served(&ctx.def, &ctx.version, &obj);
        return Ok(respond::object(&ctx, shape, include, &served, 200, &[]));
    }
    if verb == Verb::List {
        let l = ops::list(&shared.store(), &ctx, &q)?;
        return Ok(respond::list(&ctx, shape, include, &l));
    }
    let raw: Bytes = axum::body::to_bytes(req.into_body(), MAX_BODY)
        .await
        .map_err(|e| ApiError::bad_request(format!("reading the request body: {e}")))?;
    let written: Written = {
        let mut store = shared.store();
        match verb {
            Verb::Create => {
                if ctx.is_status() {
                    return Err(ApiError::method_not_allowed(
                        "create is not allowed on /status",
                    ));
                }
                ops::create(&mut store, &ctx, &q, parse_body(&ct, &raw)?)?
            }
            Verb::Update => ops::update(&mut store, &ctx, &q, parse_body(&ct, &raw)?)?,
            Verb::Patch => ops::patch(
                &mut store,
                &ctx,
                &q,
                PatchType::from_content_type(&ct)?,
                &raw,
            )?,
            Verb::Delete => {
                let opts = if raw.is_empty() {
                    None
                } else {
                    Some(parse_body(&ct, &raw)?)
                };
                ops::delete(&mut store, &ctx, &q, opts.as_ref())?
            }
            Verb::Get | Verb::List | Verb::Watch => {
                return Err(ApiError::internal("read verb reached the write path"));
            }
            Verb::DeleteCollection => {
                let list = ops::delete_collection(&mut store, &ctx, &q)?;
                drop(store);
                return Ok(respond::json_value(200, &list));
            }
        }
    };
    let held = {
        let mut f = shared.faults.lock().unwrap_or_else(|p| p.into_inner());
        f.hold_reply(&raw)
    };
    if let Some(hold) = held {
        tokio::time::sleep(hold).await;
    }
    if fate == Injected::Fail500AfterCommit && !q.dry_run {
        shared.counters().injected();
        return Err(ApiError::internal(
            "injected failure after commit (kube-testserver)",
        ));
    }
    Ok(respond::object(
        &ctx,
        shape,
        include,
        &written.obj,
        written.code,
        &written.warnings,
    ))
}
