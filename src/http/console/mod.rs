//! The operator console: read-only HTML pages served by the binary itself, for people. It
//! shows what the API holds (callees, subjects and their ledger timelines, probe runs drawn as
//! sequence diagrams, card snapshots with their diffs) and changes nothing but its own sessions.
//!
//! Signing in takes an API key (reader or higher), checked exactly as the API checks one, and
//! answers with a cookie holding a random session id; the server keeps only hashes
//! (`service::sessions`). Every page works without JavaScript. The badges
//! (`/badge/{callee_id}/{version}.svg`) are open: they say a subject's gate state and nothing
//! more.

mod badge;
mod diagram;
mod pages;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::rejection::{FormRejection, QueryRejection};
use axum::extract::{ConnectInfo, MatchedPath, Path, Query, Request, State};
use axum::http::header::{
    CACHE_CONTROL, CONTENT_TYPE, COOKIE, HOST, HeaderName, HeaderValue, LOCATION, SET_COOKIE,
};
use axum::http::{HeaderMap, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Extension, Form, Router};
use maud::Markup;
use serde::Deserialize;
use uuid::Uuid;

use super::ApiState;
use super::conditional;
use super::error::ApiError;
use super::permissions::{Caller, Guard, Principal, RouteTemplate, check_query};
use crate::domain::apikey;
use crate::domain::callee::CalleeFilter;
use crate::domain::decision::{Dedup, Posture};
use crate::domain::gate::EffectiveGate;
use crate::domain::ids::{CalleeId, ProbeRunId, SnapshotId};
use crate::domain::version::ProtocolVersion;
use crate::service::{callees, ledger, probe, sessions, trust};

/// The stylesheet's path; its bytes are compiled in.
pub(crate) const STYLESHEET: &str = "/ui/console.css";
const CSS: &str = include_str!("console.css");
const COOKIE_NAME: &str = "cardgate_session";
/// Rows per page of callees and of a timeline, as the API's default page.
const PAGE: u32 = 50;
/// Probe runs and snapshots listed on a callee's page (the API pages through the rest).
const RECENT: u32 = 20;

/// The console's routes. Pages need a session; the sign-in form, the stylesheet and the
/// badges do not.
pub(crate) fn router(guard: Arc<Guard>) -> Router<ApiState> {
    let signed_in = Router::new()
        .route("/ui", get(callees_page))
        .route("/ui/callees/{id}", get(callee_page))
        .route("/ui/callees/{id}/subjects/{version}", get(subject_page))
        .route("/ui/callees/{id}/cards/{snapshot}", get(card_page))
        .route("/ui/probes/{id}", get(probe_page))
        .route("/ui/rulebook", get(rulebook_page))
        .route("/ui/sign-out", post(sign_out))
        .route_layer(middleware::from_fn_with_state(
            guard.clone(),
            require_session,
        ));
    Router::new()
        .route("/", get(|| async { Redirect::to("/ui") }))
        .route("/ui/sign-in", get(sign_in_form).post(sign_in))
        .route(STYLESHEET, get(stylesheet))
        .route("/badge/{callee_id}/{file}", get(badge_svg))
        .merge(signed_in)
        .route_layer(middleware::from_fn_with_state(guard.clone(), frame))
        .layer(Extension(guard))
}

/// A console failure, shown as a page with the status it carries.
struct PageError(ApiError);

impl<E: Into<ApiError>> From<E> for PageError {
    fn from(e: E) -> Self {
        Self(e.into())
    }
}

impl PageError {
    fn not_found(what: impl Into<String>) -> Self {
        Self(ApiError::NotFound(what.into()))
    }

    fn invalid(what: impl Into<String>) -> Self {
        Self(ApiError::invalid(what))
    }
}

impl IntoResponse for PageError {
    fn into_response(self) -> Response {
        let status = self.0.status();
        let message = self.0.public_message();
        let mut response = (
            status,
            Html(pages::error(status.as_u16(), &message, None).into_string()),
        )
            .into_response();
        if let ApiError::TooManyRequests { retry_after_secs } = self.0 {
            response.headers_mut().insert(
                axum::http::header::RETRY_AFTER,
                HeaderValue::from(retry_after_secs),
            );
        }
        response
    }
}

type Page = Result<Html<String>, PageError>;

fn page(markup: Markup) -> Page {
    Ok(Html(markup.into_string()))
}

/// What every console response carries: its route for the access log and metrics (a bounded
/// label, never the raw path), the API's bound on query strings, and headers that keep the
/// pages from being framed, sniffed or made to load anything from elsewhere.
async fn frame(State(guard): State<Arc<Guard>>, req: Request, next: Next) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_string())
        .unwrap_or_default();
    let mut response = match check_query(&req, guard.settings.max_query_bytes) {
        Err(e) => PageError(e).into_response(),
        Ok(()) => next.run(req).await,
    };
    let headers = response.headers_mut();
    headers.insert(
        HeaderName::from_static("x-content-type-options"),
        HeaderValue::from_static("nosniff"),
    );
    if !route.starts_with("/badge/") {
        headers.insert(
            HeaderName::from_static("content-security-policy"),
            HeaderValue::from_static(
                "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; \
                 frame-ancestors 'none'; base-uri 'none'",
            ),
        );
    }
    response.extensions_mut().insert(RouteTemplate(route));
    response
}

/// The session cookie's value, if the request carries one.
fn session_cookie(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|pair| pair.trim().strip_prefix(COOKIE_NAME)?.strip_prefix('='))
}

/// Lets a request with a live session through, as the key that signed in (revoked keys end
/// their sessions here); sends anyone else to the sign-in form, to come back afterwards.
async fn require_session(
    State(guard): State<Arc<Guard>>,
    mut req: Request,
    next: Next,
) -> Response {
    let services = &guard.services;
    let key_hash = match session_cookie(req.headers()) {
        Some(id) => match sessions::key_of(&services.store, id, services.now()).await {
            Ok(found) => found,
            Err(e) => return PageError::from(e).into_response(),
        },
        None => None,
    };
    let Some(caller) = key_hash.and_then(|hash| guard.caller_by_hash(&hash)) else {
        let back = req
            .uri()
            .path_and_query()
            .map_or("/ui", |p| p.as_str())
            .to_string();
        let to = format!("/ui/sign-in?{}", encoded(&[("next", &back)]));
        return Redirect::to(&to).into_response();
    };
    if let Err(e) = guard.admit(&caller) {
        return PageError(e).into_response();
    }
    let principal = Principal(caller.bucket());
    req.extensions_mut().insert(caller);
    let mut response = next.run(req).await;
    response.extensions_mut().insert(principal);
    response
}

/// A query string of `pairs`, form-encoded.
fn encoded(pairs: &[(&str, &str)]) -> String {
    url::form_urlencoded::Serializer::new(String::new())
        .extend_pairs(pairs)
        .finish()
}

fn viewer(caller: &Caller) -> pages::Viewer<'_> {
    pages::Viewer {
        name: caller.actor(),
        role: caller.role.as_str(),
    }
}

/// Where to go after signing in: a console page of this origin, never anywhere else.
fn safe_next(next: Option<&str>) -> &str {
    match next {
        Some(n)
            if (n == "/ui" || n.starts_with("/ui/") || n.starts_with("/ui?"))
                && !n.contains('\\')
                && !n.contains("//") =>
        {
            n
        }
        _ => "/ui",
    }
}

#[derive(Deserialize)]
struct SignInQuery {
    next: Option<String>,
}

async fn sign_in_form(query: Result<Query<SignInQuery>, QueryRejection>) -> Page {
    let next = query.ok().and_then(|Query(q)| q.next);
    page(pages::sign_in(safe_next(next.as_deref()), None))
}

#[derive(Deserialize)]
struct SignInForm {
    key: String,
    next: Option<String>,
}

/// Checks the key as the API would and starts a session. A refused key spends the address's
/// failed-authentication budget, as a refused bearer key does.
async fn sign_in(
    Extension(guard): Extension<Arc<Guard>>,
    peer: Option<Extension<ConnectInfo<SocketAddr>>>,
    headers: HeaderMap,
    form: Result<Form<SignInForm>, FormRejection>,
) -> Response {
    let refused = |status: StatusCode, next: &str, problem: &str| {
        (
            status,
            Html(pages::sign_in(next, Some(problem)).into_string()),
        )
            .into_response()
    };
    let Ok(Form(form)) = form else {
        return refused(
            StatusCode::BAD_REQUEST,
            "/ui",
            "The form was not understood: send `key` (and optionally `next`) as a form.",
        );
    };
    let next = safe_next(form.next.as_deref()).to_string();
    let budget = guard.failed_auth_budget(peer.map(|Extension(ConnectInfo(a))| a.ip()));
    if let Err(e) = budget.check() {
        return PageError(e).into_response();
    }
    let key = form.key.trim();
    let presented = apikey::hash(key);
    let caller = (!key.is_empty() && key.len() <= 256)
        .then(|| guard.caller_by_hash(&presented))
        .flatten();
    if caller.is_none() {
        budget.spend();
        return refused(
            StatusCode::UNAUTHORIZED,
            &next,
            "That key is not valid (unknown or revoked).",
        );
    }
    let services = &guard.services;
    let ttl = guard.settings.console_session;
    let id = match sessions::open(&services.store, &presented, services.now(), ttl).await {
        Ok(id) => id,
        Err(e) => return PageError::from(e).into_response(),
    };
    let secure = guard.settings.secure_cookies
        || headers
            .get("x-forwarded-proto")
            .is_some_and(|p| p.as_bytes().eq_ignore_ascii_case(b"https"));
    let cookie = format!(
        "{COOKIE_NAME}={}; Path=/; HttpOnly; SameSite=Strict; Max-Age={}{}",
        id.0,
        ttl.as_secs(),
        if secure { "; Secure" } else { "" }
    );
    see_other(&next, &cookie)
}

/// 303 to `to`, setting `cookie`.
fn see_other(to: &str, cookie: &str) -> Response {
    let mut response = StatusCode::SEE_OTHER.into_response();
    let headers = response.headers_mut();
    if let (Ok(to), Ok(cookie)) = (HeaderValue::from_str(to), HeaderValue::from_str(cookie)) {
        headers.insert(LOCATION, to);
        headers.insert(SET_COOKIE, cookie);
    }
    response
}

async fn sign_out(Extension(guard): Extension<Arc<Guard>>, headers: HeaderMap) -> Response {
    if let Some(id) = session_cookie(&headers)
        && let Err(e) = sessions::close(&guard.services.store, id).await
    {
        return PageError::from(e).into_response();
    }
    see_other(
        "/ui/sign-in",
        &format!("{COOKIE_NAME}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0"),
    )
}

async fn stylesheet() -> Response {
    (
        [
            (CONTENT_TYPE, "text/css; charset=utf-8"),
            (CACHE_CONTROL, "public, max-age=300"),
        ],
        CSS,
    )
        .into_response()
}

fn uuid_of(text: &str, what: &str) -> Result<Uuid, PageError> {
    Uuid::parse_str(text).map_err(|_| PageError::not_found(format!("no such {what}")))
}

fn version_of(text: &str) -> Result<ProtocolVersion, PageError> {
    ProtocolVersion::parse_exact(text).map_err(|_| PageError::not_found("no such subject"))
}

#[derive(Deserialize)]
struct CalleesQuery {
    q: Option<String>,
    state: Option<String>,
    after: Option<String>,
}

fn filter_of(q: &CalleesQuery) -> Result<CalleeFilter, PageError> {
    let text = q.q.as_deref().map(str::trim).filter(|t| !t.is_empty());
    if text.is_some_and(|t| t.chars().count() > 200) {
        return Err(PageError::invalid("search for at most 200 characters"));
    }
    let gate = match q.state.as_deref().unwrap_or("") {
        "" => None,
        s => Some(
            [
                EffectiveGate::Untrusted,
                EffectiveGate::CardTrusted,
                EffectiveGate::LifecycleTrusted,
                EffectiveGate::Demoted,
            ]
            .into_iter()
            .find(|g| g.as_str() == s)
            .ok_or_else(|| PageError::invalid(format!("`{s}` is not a gate state")))?,
        ),
    };
    Ok(CalleeFilter {
        text: text.map(str::to_string),
        gate,
    })
}

async fn callees_page(
    State(app): State<ApiState>,
    Extension(caller): Extension<Caller>,
    query: Result<Query<CalleesQuery>, QueryRejection>,
) -> Page {
    let Query(q) = query.map_err(|e| PageError::invalid(e.body_text()))?;
    let filter = filter_of(&q)?;
    let after = match q.after.as_deref().filter(|a| !a.is_empty()) {
        Some(a) => {
            Some(CalleeId(Uuid::parse_str(a).map_err(|_| {
                PageError::invalid("`after` is not a callee id")
            })?))
        }
        None => None,
    };
    let services = &app.services;
    let found = callees::search(&services.store, &filter, after, PAGE).await?;
    let next = (found.len() == PAGE as usize)
        .then(|| found.last())
        .flatten()
        .map(|last| {
            let after = last.callee.id.0.to_string();
            let pairs = [
                ("q", filter.text.as_deref()),
                ("state", filter.gate.map(EffectiveGate::as_str)),
                ("after", Some(after.as_str())),
            ];
            let present: Vec<(&str, &str)> = pairs
                .iter()
                .filter_map(|(k, v)| Some((*k, (*v)?)))
                .collect();
            format!("/ui?{}", encoded(&present))
        });
    page(pages::callees(
        &viewer(&caller),
        &found,
        &filter,
        next,
        services.now(),
    ))
}

async fn callee_page(
    State(app): State<ApiState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Page {
    let id = CalleeId(uuid_of(&id, "callee")?);
    let services = &app.services;
    let detail = callees::get(services, id).await?;
    let snapshots = callees::snapshots(&services.store, id, None, RECENT).await?;
    let runs = probe::page(&services.store, id, None, RECENT).await?;
    page(pages::callee(
        &viewer(&caller),
        &detail,
        &snapshots,
        &runs,
        services.now(),
    ))
}

#[derive(Deserialize)]
struct TimelineQuery {
    before: Option<i64>,
}

/// The postures a subject's page answers for: with and without timestamp deduplication, and
/// relying on every capability the card advertises.
fn postures(
    version: ProtocolVersion,
    advertised: &[crate::domain::capability::Capability],
) -> Vec<(&'static str, Posture)> {
    let plain = |dedup| Posture {
        caller_version: version,
        dedup,
        requires: Default::default(),
    };
    let mut all = vec![
        (
            "Deduplicating terminal events by timestamp",
            plain(Dedup::Timestamp),
        ),
        ("Not deduplicating", plain(Dedup::None)),
    ];
    if !advertised.is_empty() {
        all.push((
            "Relying on every advertised capability",
            Posture {
                requires: advertised.iter().copied().collect(),
                ..plain(Dedup::Timestamp)
            },
        ));
    }
    all
}

async fn subject_page(
    State(app): State<ApiState>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    Path((id, version)): Path<(String, String)>,
    query: Result<Query<TimelineQuery>, QueryRejection>,
) -> Page {
    let id = CalleeId(uuid_of(&id, "callee")?);
    let version = version_of(&version)?;
    let Query(q) = query.map_err(|e| PageError::invalid(e.body_text()))?;
    let services = &app.services;
    let detail = callees::get(services, id).await?;
    let subject = detail
        .subjects
        .iter()
        .find(|s| s.protocol_version == version)
        .ok_or_else(|| PageError::not_found("no such subject"))?;
    let advertised: Vec<_> = subject.state.advertised.keys().copied().collect();
    let mut decisions = Vec::new();
    for (label, posture) in postures(version, &advertised) {
        let decision = trust::decide(&services.view, id, &posture, None).await?;
        decisions.push(pages::PostureDecision {
            label,
            posture,
            decision,
        });
    }
    let events = ledger::timeline(&services.store, id, version, q.before, PAGE).await?;
    let older = (events.len() == PAGE as usize)
        .then(|| events.last())
        .flatten()
        .map(|e| format!("/ui/callees/{}/subjects/{version}?before={}", id.0, e.seq));
    let path = format!("/badge/{}/{version}.svg", id.0);
    let base = match &services.probe.public_url {
        Some(url) => url.as_str().trim_end_matches('/').to_string(),
        None => headers
            .get(HOST)
            .and_then(|h| h.to_str().ok())
            .map_or_else(String::new, |h| format!("http://{h}")),
    };
    let badge = pages::BadgeLink {
        absolute: format!("{base}{path}"),
        path,
    };
    let judged = crate::service::standing::standing(&services.store, id, version).await?;
    let runs: Vec<_> = probe::page(&services.store, id, None, RECENT)
        .await?
        .into_iter()
        .filter(|r| r.protocol_version == version)
        .collect();
    let record = services.view.track_record(id, version);
    let view = pages::SubjectView {
        detail: &detail,
        subject,
        decisions,
        badge,
        events,
        older,
        rulebook: services.probe.rulebook.version(),
        judged,
        record,
        runs,
    };
    page(pages::subject(&viewer(&caller), &view, services.now()))
}

async fn probe_page(
    State(app): State<ApiState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Page {
    let id = ProbeRunId(uuid_of(&id, "probe run")?);
    let services = &app.services;
    let run = probe::get(services, id).await?;
    let detail = callees::get(services, run.callee_id).await?;
    let events = ledger::events_at(&services.store, run.callee_id, &run.ledger_seqs).await?;
    page(pages::probe_run(
        &viewer(&caller),
        &run,
        &pages::display_name(&detail),
        &events,
        services.now(),
    ))
}

async fn rulebook_page(State(app): State<ApiState>, Extension(caller): Extension<Caller>) -> Page {
    page(pages::rulebook(
        &viewer(&caller),
        &app.services.probe.rulebook,
    ))
}

async fn card_page(
    State(app): State<ApiState>,
    Extension(caller): Extension<Caller>,
    Path((id, snapshot)): Path<(String, String)>,
) -> Page {
    let id = CalleeId(uuid_of(&id, "callee")?);
    let snapshot = SnapshotId(uuid_of(&snapshot, "card snapshot")?);
    let services = &app.services;
    let detail = callees::get(services, id).await?;
    let current = callees::snapshot(&services.store, id, snapshot).await?;
    let previous = callees::previous_snapshot(&services.store, &current).await?;
    page(pages::card(
        &viewer(&caller),
        &pages::display_name(&detail),
        &current,
        previous.as_ref(),
        services.now(),
    ))
}

/// `GET /badge/{callee_id}/{version}.svg`: open and cacheable, answered from memory.
async fn badge_svg(
    State(app): State<ApiState>,
    headers: HeaderMap,
    Path((callee, file)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let missing = || ApiError::NotFound("no such badge: /badge/{callee_id}/{version}.svg".into());
    let version = file.strip_suffix(".svg").ok_or_else(missing)?;
    let id = Uuid::parse_str(&callee).map_err(|_| missing())?;
    let version = ProtocolVersion::parse_exact(version).map_err(|_| missing())?;
    let posture = Posture {
        caller_version: version,
        dedup: Dedup::Timestamp,
        requires: Default::default(),
    };
    crate::service::trust::loaded(&app.services.view)?;
    let gate = app
        .services
        .view
        .decide(CalleeId(id), &posture)
        .and_then(|d| d.gate_state)
        .ok_or_else(missing)?;
    let svg = badge::render(&version.to_string(), gate);
    Ok(conditional::respond_bytes(
        &headers,
        "image/svg+xml",
        "public, max-age=60",
        svg.into_bytes(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn after_signing_in_only_console_pages_of_this_origin_are_followed() {
        assert_eq!(safe_next(Some("/ui/callees/x?y=1")), "/ui/callees/x?y=1");
        assert_eq!(safe_next(Some("/ui?state=demoted")), "/ui?state=demoted");
        for hostile in [
            "https://evil.example/ui",
            "//evil.example/ui",
            "/ui//evil.example",
            "/ui\\@evil.example",
            "/uievil",
            "/v1/keys",
        ] {
            assert_eq!(safe_next(Some(hostile)), "/ui", "{hostile}");
        }
        assert_eq!(safe_next(None), "/ui");
    }

    #[test]
    fn the_session_cookie_is_found_among_others() {
        let mut headers = HeaderMap::new();
        headers.insert(
            COOKIE,
            HeaderValue::from_static("a=1; cardgate_session=abc; b=2"),
        );
        assert_eq!(session_cookie(&headers), Some("abc"));
        headers.insert(COOKIE, HeaderValue::from_static("cardgate_sessionx=abc"));
        assert_eq!(session_cookie(&headers), None);
    }
}
