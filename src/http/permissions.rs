//! Who may call what: bearer API keys with roles, enforced for every `/v1` route from the
//! OpenAPI document itself, plus the per-key rate limit and the query-string bound.
//!
//! Each operation declares its requirement in its `#[utoipa::path]` (`security(("bearer" =
//! ["reader"]))`, or `security(())` for open ones). The table built from the document is the
//! only access rule there is, so the published contract and the enforcement cannot drift, and a
//! route without a declaration is refused (fail closed) and caught by the access-matrix test.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::extract::{ConnectInfo, MatchedPath, Request, State};
use axum::http::{Method, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use subtle::ConstantTimeEq;

use super::error::ApiError;
use crate::domain::apikey::{self, ApiKey, Role};
use crate::domain::ids::ApiKeyId;
use crate::service::Services;

/// The scheme name used in the OpenAPI document.
pub const BEARER: &str = "bearer";

/// What an operation requires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// No key (health, docs, and the push webhook, which checks its own per-probe token).
    Open,
    /// A key with at least this role.
    Role(Role),
}

/// Access per (method, path template), read from the OpenAPI document.
#[derive(Debug, Clone, Default)]
pub struct AccessTable(HashMap<(Method, String), Access>);

impl AccessTable {
    /// Reads every operation's `security`; operations without one are left out (and refused).
    pub fn from_openapi(doc: &utoipa::openapi::OpenApi) -> Result<Self, String> {
        let mut table = HashMap::new();
        for (path, item) in &doc.paths.paths {
            for (method, op) in operations(item) {
                let Some(security) = &op.security else {
                    continue;
                };
                let value = serde_json::to_value(security).map_err(|e| e.to_string())?;
                let first = value
                    .get(0)
                    .and_then(|v| v.as_object())
                    .cloned()
                    .unwrap_or_default();
                let access = match first
                    .get(BEARER)
                    .and_then(|scopes| scopes.get(0))
                    .and_then(|r| r.as_str())
                {
                    None if first.is_empty() => Access::Open,
                    None => return Err(format!("{method} {path}: security names no role")),
                    Some(role) => Access::Role(
                        Role::parse(role)
                            .ok_or_else(|| format!("{method} {path}: unknown role {role}"))?,
                    ),
                };
                table.insert((method, path.clone()), access);
            }
        }
        Ok(Self(table))
    }

    /// Opens the transparency surface to callers without a key.
    pub fn open_transparency(&mut self) {
        for path in PUBLIC_TRANSPARENCY {
            self.0.insert((Method::GET, path.to_string()), Access::Open);
        }
    }

    pub fn get(&self, method: &Method, path: &str) -> Option<Access> {
        let method = if method == Method::HEAD {
            &Method::GET
        } else {
            method
        };
        self.0.get(&(method.clone(), path.to_string())).copied()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&(Method, String), &Access)> {
        self.0.iter()
    }
}

fn operations(
    item: &utoipa::openapi::PathItem,
) -> Vec<(Method, &utoipa::openapi::path::Operation)> {
    [
        (Method::GET, &item.get),
        (Method::POST, &item.post),
        (Method::PUT, &item.put),
        (Method::DELETE, &item.delete),
        (Method::PATCH, &item.patch),
    ]
    .into_iter()
    .filter_map(|(m, op)| op.as_ref().map(|op| (m, op)))
    .collect()
}

/// Who is calling, for handlers that record the actor of a write. Made for every request, so
/// it holds the key itself and formats names only when asked.
#[derive(Clone)]
pub struct Caller {
    pub role: Role,
    key: Option<Arc<ApiKey>>,
}

impl Caller {
    /// How writes by this caller are attributed in the ledger and in reports: `admin-token`
    /// or `key:<name>`.
    pub fn actor(&self) -> String {
        match &self.key {
            None => ADMIN_TOKEN.to_string(),
            Some(key) => format!("key:{}", key.name),
        }
    }

    /// The rate-limit bucket, which also names the caller in the access log.
    pub(crate) fn bucket(&self) -> Bucket {
        match &self.key {
            None => Bucket::AdminToken,
            Some(key) => Bucket::Key(key.id),
        }
    }
}

impl std::fmt::Debug for Caller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Caller")
            .field("actor", &self.actor())
            .field("role", &self.role)
            .finish()
    }
}

const ADMIN_TOKEN: &str = "admin-token";

/// Whose budget a request spends: a key's, the admin token's, or a client address's for one
/// kind of traffic without a key. Plain values: no allocation per request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Bucket {
    AdminToken,
    Key(ApiKeyId),
    Address(&'static str, std::net::IpAddr),
}

impl std::fmt::Display for Bucket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::AdminToken => f.write_str(ADMIN_TOKEN),
            Self::Key(id) => write!(f, "{id}"),
            Self::Address(kind, ip) => write!(f, "{kind}:{ip}"),
        }
    }
}

/// Access control settings.
#[derive(Clone)]
pub struct AuthSettings {
    /// sha256 of `CARDGATE_ADMIN_TOKEN`: a bootstrap admin credential that is never stored.
    pub admin_token_hash: Option<String>,
    pub rate_per_sec: f64,
    pub burst: f64,
    /// Per client address: failed authentications (bad keys, webhook deliveries for no running
    /// probe) and `/readyz` requests. Past it, 429 before any lookup.
    pub anonymous_per_sec: f64,
    pub anonymous_burst: f64,
    pub max_query_bytes: usize,
    /// The transparency surface ([`PUBLIC_TRANSPARENCY`]) answers without a key.
    pub public_transparency: bool,
    /// How long an operator console sign-in lasts.
    pub console_session: std::time::Duration,
    /// The console's session cookie is `Secure` (cardgate is reached over HTTPS).
    pub secure_cookies: bool,
}

impl std::fmt::Debug for AuthSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuthSettings")
            .field(
                "admin_token",
                &self.admin_token_hash.as_ref().map(|_| "****"),
            )
            .field("rate_per_sec", &self.rate_per_sec)
            .field("burst", &self.burst)
            .field("anonymous_per_sec", &self.anonymous_per_sec)
            .field("anonymous_burst", &self.anonymous_burst)
            .field("max_query_bytes", &self.max_query_bytes)
            .field("console_session", &self.console_session)
            .field("secure_cookies", &self.secure_cookies)
            .finish()
    }
}

impl Default for AuthSettings {
    fn default() -> Self {
        Self {
            admin_token_hash: None,
            rate_per_sec: 20.0,
            burst: 100.0,
            anonymous_per_sec: 10.0,
            anonymous_burst: 50.0,
            max_query_bytes: 2048,
            public_transparency: false,
            console_session: std::time::Duration::from_secs(8 * 3600),
            secure_cookies: false,
        }
    }
}

impl AuthSettings {
    pub fn with_admin_token(mut self, token: &str) -> Self {
        self.admin_token_hash = Some(apikey::hash(token));
        self
    }
}

/// A token bucket per caller.
#[derive(Debug, Default)]
pub struct RateLimiter {
    buckets: Mutex<HashMap<Bucket, (f64, Instant)>>,
}

/// Buckets kept before idle ones are dropped: per-address buckets must not let a caller with
/// many addresses grow the map without bound.
const MAX_BUCKETS: usize = 10_000;

impl RateLimiter {
    /// Takes a token; `Err(seconds)` until the next one when the bucket is empty.
    fn take(&self, key: Bucket, per_sec: f64, burst: f64) -> Result<(), u64> {
        self.spend(key, per_sec, burst, 1.0)
    }

    /// Like [`take`](Self::take), without spending: whether a token is there.
    fn check(&self, key: Bucket, per_sec: f64, burst: f64) -> Result<(), u64> {
        self.spend(key, per_sec, burst, 0.0)
    }

    fn spend(&self, key: Bucket, per_sec: f64, burst: f64, cost: f64) -> Result<(), u64> {
        let now = Instant::now();
        let mut buckets = self
            .buckets
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if buckets.len() >= MAX_BUCKETS && !buckets.contains_key(&key) {
            // A bucket untouched for a minute has refilled at any rate cardgate is run with.
            buckets.retain(|_, (_, last)| now.duration_since(*last).as_secs() < 60);
        }
        let (tokens, last) = buckets.entry(key).or_insert((burst, now));
        *tokens = (*tokens + now.duration_since(*last).as_secs_f64() * per_sec).min(burst);
        *last = now;
        if *tokens >= 1.0 {
            *tokens -= cost;
            Ok(())
        } else {
            Err(((1.0 - *tokens) / per_sec).ceil().max(1.0) as u64)
        }
    }
}

/// What `CARDGATE_PUBLIC_TRANSPARENCY=on` opens to everyone (the key set is always open): what
/// anyone needs to check checkpoints, proofs and attestations without an account.
pub const PUBLIC_TRANSPARENCY: [&str; 6] = [
    "/v1/attestations",
    "/v1/ledger/checkpoint",
    "/v1/ledger/checkpoints",
    "/v1/ledger/proof",
    "/v1/ledger/consistency",
    "/v1/callees/{id}/subjects/{version}/attestation",
];

/// Open routes that reach the database, limited per client address.
pub const READINESS: &str = "/readyz";
pub const WEBHOOK: &str = "/v1/hooks/";
pub const METRICS: &str = "/metrics";
pub const OPEN_BUT_COSTLY: [&str; 3] = [READINESS, WEBHOOK, METRICS];

/// Everything the authorization middleware needs.
pub struct Guard {
    pub table: AccessTable,
    pub settings: AuthSettings,
    pub limiter: RateLimiter,
    pub services: Services,
    /// Where refusals for rate are counted.
    pub metrics: crate::metrics::Metrics,
}

impl Guard {
    /// Spends one request of the caller's per-key budget.
    pub(crate) fn admit(&self, caller: &Caller) -> Result<(), ApiError> {
        self.limiter
            .take(
                caller.bucket(),
                self.settings.rate_per_sec,
                self.settings.burst,
            )
            .map_err(|retry_after_secs| {
                self.metrics.rate_limited("key");
                ApiError::TooManyRequests { retry_after_secs }
            })
    }

    /// Who a key's hash names: the bootstrap admin token, or a live key.
    pub(crate) fn caller_by_hash(&self, presented: &str) -> Option<Caller> {
        self.admin_caller(presented)
            .or_else(|| self.key_caller(presented))
    }

    fn admin_caller(&self, presented: &str) -> Option<Caller> {
        let admin = self.settings.admin_token_hash.as_ref()?;
        bool::from(admin.as_bytes().ct_eq(presented.as_bytes())).then_some(Caller {
            role: Role::Admin,
            key: None,
        })
    }

    fn key_caller(&self, presented: &str) -> Option<Caller> {
        let key = self.services.view.live_key(presented)?;
        // The lookup was by hash; compare again in constant time anyway.
        bool::from(key.key_hash.as_bytes().ct_eq(presented.as_bytes())).then(|| Caller {
            role: key.role,
            key: Some(key),
        })
    }

    /// The failed-authentication budget of a client address (for the console's sign-in form,
    /// which checks keys as the API does).
    pub(crate) fn failed_auth_budget(&self, ip: Option<std::net::IpAddr>) -> AuthBudget<'_> {
        AuthBudget(Anonymous { guard: self, ip })
    }
}

/// One client address's budget of failed authentications.
pub(crate) struct AuthBudget<'a>(Anonymous<'a>);

impl AuthBudget<'_> {
    /// Refuses when the address has failed too often, without spending.
    pub(crate) fn check(&self) -> Result<(), ApiError> {
        self.0.check(FAILED_AUTH)
    }

    /// Spends one failure.
    pub(crate) fn spend(&self) {
        let _ = self.0.spend(FAILED_AUTH);
    }
}

/// The route template a response answered (for the access log and metrics).
#[derive(Debug, Clone)]
pub struct RouteTemplate(pub String);

/// Who a response answered: a key's id, `admin-token`, or absent (anonymous).
#[derive(Debug, Clone, Copy)]
pub struct Principal(pub Bucket);

/// The middleware (a route layer, so the matched path template is known). Every response,
/// refused or not, carries its [`RouteTemplate`], and its [`Principal`] once authenticated.
pub async fn authorize(State(guard): State<Arc<Guard>>, req: Request, next: Next) -> Response {
    let path = req
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_string())
        .unwrap_or_default();
    let mut response = guarded(&guard, &path, req, next)
        .await
        .unwrap_or_else(IntoResponse::into_response);
    response.extensions_mut().insert(RouteTemplate(path));
    response
}

async fn guarded(
    guard: &Guard,
    path: &str,
    mut req: Request,
    next: Next,
) -> Result<Response, ApiError> {
    check_query(&req, guard.settings.max_query_bytes)?;
    let path = path.to_string();
    let access = guard.table.get(req.method(), &path).ok_or_else(|| {
        ApiError::Internal(anyhow::anyhow!(
            "{} {path} has no access rule in the OpenAPI document",
            req.method()
        ))
    })?;
    let client = Anonymous {
        guard,
        ip: req
            .extensions()
            .get::<ConnectInfo<SocketAddr>>()
            .map(|c| c.0.ip()),
    };
    let Access::Role(required) = access else {
        return open_route(&client, &path, req, next).await;
    };
    let bearer = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    // An address that keeps presenting bad keys is refused (429) until its budget refills.
    let failed_before = || client.check(FAILED_AUTH);
    let caller = match authenticate(guard, bearer, failed_before).await {
        Ok(caller) => caller,
        Err(e) => {
            let _ = client.spend(FAILED_AUTH);
            return Err(e);
        }
    };
    if !caller.role.allows(required) {
        return Err(ApiError::Forbidden(format!(
            "this operation needs the {required} role; `{}` is a {} key",
            caller.actor(),
            caller.role
        )));
    }
    guard.admit(&caller)?;
    let principal = Principal(caller.bucket());
    req.extensions_mut().insert(caller);
    let mut response = next.run(req).await;
    response.extensions_mut().insert(principal);
    Ok(response)
}

/// Refuses a query string over `max` bytes before anything reads it (the API's routes and the
/// console's alike).
pub(crate) fn check_query(req: &Request, max: usize) -> Result<(), ApiError> {
    if req.uri().query().is_some_and(|q| q.len() > max) {
        return Err(ApiError::UriTooLong(format!(
            "the query string is longer than {max} bytes"
        )));
    }
    Ok(())
}

/// The per-address budget of traffic without a key: failed authentications, and the open
/// routes that reach the database.
const FAILED_AUTH: &str = "failed-auth";
const OPEN: &str = "open";

/// One client address's anonymous budgets. Without a peer address (in-process calls) there
/// is nothing to limit.
struct Anonymous<'a> {
    guard: &'a Guard,
    ip: Option<std::net::IpAddr>,
}

impl Anonymous<'_> {
    /// Spends one request of the `kind` budget; `TooManyRequests` when it is spent.
    fn spend(&self, kind: &'static str) -> Result<(), ApiError> {
        self.limit(kind, true)
    }

    /// Refuses when the `kind` budget is spent, without spending it.
    fn check(&self, kind: &'static str) -> Result<(), ApiError> {
        self.limit(kind, false)
    }

    fn limit(&self, kind: &'static str, spend: bool) -> Result<(), ApiError> {
        let Some(ip) = self.ip else { return Ok(()) };
        let key = Bucket::Address(kind, ip);
        let settings = &self.guard.settings;
        let (rate, burst) = (settings.anonymous_per_sec, settings.anonymous_burst);
        let result = if spend {
            self.guard.limiter.take(key, rate, burst)
        } else {
            self.guard.limiter.check(key, rate, burst)
        };
        result.map_err(|retry_after_secs| {
            self.guard.metrics.rate_limited("anonymous");
            ApiError::TooManyRequests { retry_after_secs }
        })
    }
}

/// A route without a key: readiness spends the address's open budget; a webhook delivery
/// spends its failed-auth budget only when refused.
async fn open_route(
    client: &Anonymous<'_>,
    path: &str,
    req: Request,
    next: Next,
) -> Result<Response, ApiError> {
    // The transparency surface, when public, reaches the database too.
    if path.starts_with(READINESS)
        || path.starts_with(METRICS)
        || PUBLIC_TRANSPARENCY.contains(&path)
    {
        client.spend(OPEN)?;
    } else if path.starts_with(WEBHOOK) {
        // Like keys: deliveries with a live token never spend the address's budget (many
        // agents may share one egress address); refused ones do, checked before the lookup.
        client.check(FAILED_AUTH)?;
        let response = next.run(req).await;
        if response.status() == axum::http::StatusCode::NOT_FOUND {
            let _ = client.spend(FAILED_AUTH);
        }
        return Ok(response);
    }
    Ok(next.run(req).await)
}

async fn authenticate(
    guard: &Guard,
    authorization: Option<&str>,
    failed_before: impl FnOnce() -> Result<(), ApiError>,
) -> Result<Caller, ApiError> {
    let unauthorized = || {
        ApiError::Unauthorized("a valid API key is required: `Authorization: Bearer <key>`".into())
    };
    let token = authorization
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        })
        .map(str::trim)
        .filter(|t| !t.is_empty() && t.len() <= 256)
        .ok_or_else(unauthorized)?;
    let presented = apikey::hash(token);
    if let Some(caller) = guard.caller_by_hash(&presented) {
        return Ok(caller);
    }
    // Keys are looked up in memory, so a live key is never refused for its address's failures
    // (callers behind one NAT share an address); a bad one past the budget is 429, not 401.
    failed_before()?;
    Err(ApiError::Unauthorized(
        "the API key is not valid (unknown or revoked)".into(),
    ))
}

/// The path as logged: webhook tokens are credentials and never reach a log line.
pub fn loggable_path(path: &str) -> String {
    match path.strip_prefix("/v1/hooks/push/") {
        Some(_) => "/v1/hooks/push/{token}".to_string(),
        None => path.to_string(),
    }
}
