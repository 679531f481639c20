//! A scriptable fake A2A agent for tests, benchmarks and demos (`cargo run --example
//! fake-agent`). It serves a signed card and speaks v1.0 and v0.3 JSON-RPC, or v1.0 gRPC
//! ([`FakeAgentConfig::grpc`]), with streaming and push, and can be switched, at run time, into
//! the broken behaviours the registry exists to catch. Not used by the service itself.
//!
//! What the first text part says steers a task: `need-input` asks for more input, `fail` ends
//! it `failed`, `slow` (sent without blocking) keeps it `working` for a while, so that it can
//! be canceled; anything else completes at once. [`FakeAgentConfig::bearer`] puts it behind a
//! bearer token.

mod behaviour;
mod grpc;

pub use behaviour::Behaviour;
pub use grpc::GrpcAgent;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use futures::StreamExt;
use josekit::jwk::Jwk;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::domain::card::signature::sign_card;
use crate::domain::probe::TaskState;
use crate::domain::time;

/// How long a task whose text says `slow` stays `working` before it finishes, when sent
/// without blocking: long enough that a CancelTask sent right after always finds it live
/// (the cancel scenario), as the Python SDK agent's `slow` does.
const SLOW_TASK: Duration = Duration::from_secs(2);

/// How long `SlowAnswers` holds each call.
pub const SLOW_ANSWER: Duration = Duration::from_secs(120);

/// How many times `PushFlood` sends each delivery.
pub const FLOOD: usize = 50;

/// What the agent offers.
#[derive(Debug, Clone)]
pub struct FakeAgentConfig {
    /// `1.0` and/or `0.3` (a card with only `0.3` is served in the v0.3 shape).
    pub versions: Vec<&'static str>,
    pub streaming: bool,
    pub push: bool,
    /// Advertised on v0.3 cards only.
    pub state_transition_history: bool,
    /// Sign the card (ES256, jku on the agent's origin).
    pub sign: bool,
    /// Delay between states of a task running in the background; none by default, like the
    /// SDK samples, which finish a task in milliseconds.
    pub step_delay: Duration,
    /// The origin the card names, when the agent sits behind a proxy (default: its own).
    pub public_origin: Option<String>,
    /// Bytes of padding in the `metadata` of every Task it answers with (a hostile agent's
    /// huge bodies); 0 for none.
    pub padding: usize,
    /// The `tenant` of every v1.0 interface, if any.
    pub tenant: Option<String>,
    /// Offer v1.0 over gRPC only (`GRPC` interface on the agent's origin, served on the same
    /// port as the card) instead of JSON-RPC.
    pub grpc: bool,
    /// Require `Authorization: Bearer <token>` on every A2A call, HTTP and gRPC alike (401,
    /// `UNAUTHENTICATED`); the card declares the scheme as `bearer`. The card stays public.
    pub bearer: Option<String>,
    /// The card says it has an authenticated extended card (`extendedAgentCard`), and
    /// GetExtendedAgentCard answers one, signed like the public card, that also advertises
    /// streaming (which the public card may not).
    pub extended_card: bool,
}

impl Default for FakeAgentConfig {
    fn default() -> Self {
        Self {
            versions: vec!["1.0"],
            streaming: true,
            push: true,
            state_transition_history: false,
            sign: true,
            step_delay: Duration::ZERO,
            public_origin: None,
            padding: 0,
            tenant: None,
            grpc: false,
            bearer: None,
            extended_card: false,
        }
    }
}

struct Task {
    id: String,
    /// How many tasks the agent had created before this one.
    ordinal: usize,
    context_id: String,
    state: &'static str,
    timestamp: Option<String>,
    history: Vec<Value>,
    artifacts: Vec<Value>,
}

struct Push {
    url: String,
    token: String,
    v1: bool,
}

struct Shared {
    behaviour: Mutex<Behaviour>,
    /// With a text here, the behaviour applies only to turns whose message contains it; every
    /// other call is conformant (an agent that passes its probes and fails in the field).
    fault_on: Mutex<Option<String>>,
    tasks: Mutex<HashMap<String, Task>>,
    pushes: Mutex<HashMap<String, Push>>,
    /// Open resubscriptions per live task (and whether each speaks v1.0): each gets every
    /// update until the task ends, then its stream closes.
    watchers: Mutex<HashMap<String, Vec<Watcher>>>,
    card: Mutex<Value>,
    jwks: Value,
    key: Jwk,
    origin: String,
    config: FakeAgentConfig,
    http: reqwest::Client,
}

/// An open resubscription: where its events go, and whether it speaks v1.0.
type Watcher = (mpsc::Sender<StreamItem>, bool);

/// A running fake agent.
pub struct FakeAgent {
    pub addr: SocketAddr,
    shared: Arc<Shared>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

/// One step of a turn.
#[derive(Clone)]
enum Update {
    Status {
        state: &'static str,
        timestamp: bool,
        message: Option<&'static str>,
    },
    Artifact(String),
}

impl Update {
    fn is_terminal(&self) -> bool {
        matches!(self, Update::Status { state, .. } if is_terminal(state))
    }
}

impl FakeAgent {
    pub async fn start(config: FakeAgentConfig, behaviour: Behaviour) -> std::io::Result<Self> {
        Self::start_on("127.0.0.1:0", config, behaviour).await
    }

    pub async fn start_on(
        addr: &str,
        config: FakeAgentConfig,
        behaviour: Behaviour,
    ) -> std::io::Result<Self> {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let pair = josekit::jws::ES256
            .generate_key_pair()
            .map_err(std::io::Error::other)?;
        let mut private = pair.to_jwk_private_key();
        private.set_key_id("fake-agent-key");
        let mut public = pair.to_jwk_public_key();
        public.set_key_id("fake-agent-key");
        let origin = config
            .public_origin
            .clone()
            .unwrap_or_else(|| format!("http://{addr}"));
        let card = build_card(&origin, &config, &private, None);
        let shared = Arc::new(Shared {
            behaviour: Mutex::new(behaviour),
            fault_on: Mutex::new(None),
            tasks: Mutex::new(HashMap::new()),
            pushes: Mutex::new(HashMap::new()),
            watchers: Mutex::new(HashMap::new()),
            card: Mutex::new(card),
            jwks: json!({"keys": [Value::Object(public.as_ref().clone())]}),
            key: private,
            origin,
            config,
            http: reqwest::Client::new(),
        });
        let router = Router::new()
            .route("/.well-known/agent-card.json", get(card_handler))
            .route("/.well-known/jwks.json", get(jwks_handler))
            .route("/a2a/v1", post(v1_handler))
            .route("/a2a/v03", post(v03_handler))
            .with_state(shared.clone())
            // gRPC on the same port (HTTP/2 with prior knowledge), as one origin.
            .merge(grpc::router(shared.clone()));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(async move {
            // No Nagle delay: HTTP/2 writes headers, data and trailers separately, and a
            // delayed ACK would hold each gRPC answer back by tens of milliseconds.
            let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
                let _ = tcp.set_nodelay(true);
            });
            let _ = axum::serve(listener, router)
                .with_graceful_shutdown(async {
                    let _ = stopped.await;
                })
                .await;
        });
        Ok(Self {
            addr,
            shared,
            stop: Some(stop),
        })
    }

    /// The agent's gRPC service (the one it serves on its own port), to serve elsewhere too.
    pub fn grpc_service(
        &self,
    ) -> crate::remote::grpc_transport::proto::a2a_service_server::A2aServiceServer<GrpcAgent> {
        grpc::service(self.shared.clone())
    }

    pub fn origin(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Switches behaviour for every later request.
    pub fn set_behaviour(&self, behaviour: Behaviour) {
        *lock(&self.shared.behaviour) = behaviour;
    }

    /// Applies the behaviour only to turns whose message text contains `text` (`None`: to
    /// every call): probes, which never send it, see a conformant agent; a caller who does
    /// sees the fault.
    pub fn set_fault_on(&self, text: Option<String>) {
        *lock(&self.shared.fault_on) = text;
    }

    /// The card as served.
    pub fn card(&self) -> Value {
        lock(&self.shared.card).clone()
    }

    /// Serves a card offering `versions` instead (a new protocol version, or one withdrawn).
    pub fn set_versions(&self, versions: Vec<&'static str>) {
        let mut config = self.shared.config.clone();
        config.versions = versions;
        *lock(&self.shared.card) = build_card(&self.shared.origin, &config, &self.shared.key, None);
    }

    /// Republishes the card with another description (same versions and capabilities):
    /// nothing a subject depends on moves.
    pub fn republish(&self, description: &str) {
        self.rebuild(description, |_| {});
    }

    /// Republishes the card with `tenant` on every interface: a change the subjects depend on
    /// (callers address the agent through it), while the agent answers as before.
    pub fn republish_interfaces(&self, tenant: &str) {
        let tenant = tenant.to_string();
        self.rebuild("interfaces moved to a tenant", |c| c.tenant = Some(tenant));
    }

    /// Republishes the card advertising push notifications, or not (the agent's behaviour
    /// does not change: it always honours a webhook it is given).
    pub fn advertise_push(&self, push: bool) {
        self.rebuild("push advertised anew", |c| c.push = push);
    }

    fn rebuild(&self, description: &str, change: impl FnOnce(&mut FakeAgentConfig)) {
        let versions = lock(&self.shared.card)["supportedInterfaces"]
            .as_array()
            .map(|list| {
                list.iter()
                    .filter_map(|i| i["protocolVersion"].as_str())
                    .map(|v| {
                        if v.starts_with("0.") {
                            "0.3"
                        } else if v == "1.1" {
                            "1.1"
                        } else {
                            "1.0"
                        }
                    })
                    .collect()
            })
            .unwrap_or_else(|| self.shared.config.versions.clone());
        let mut config = self.shared.config.clone();
        config.versions = versions;
        change(&mut config);
        *lock(&self.shared.card) = build_card(
            &self.shared.origin,
            &config,
            &self.shared.key,
            Some(description),
        );
    }

    pub fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

impl Drop for FakeAgent {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The card authenticated callers see (it also advertises streaming), or `None` when the
/// agent offers none.
fn extended_card(s: &Shared, sign: bool) -> Option<Value> {
    s.config.extended_card.then(|| {
        let extended = FakeAgentConfig {
            streaming: true,
            sign,
            ..s.config.clone()
        };
        let description = "cardgate's scriptable fake agent, as authenticated callers see it";
        build_card(&s.origin, &extended, &s.key, Some(description))
    })
}

/// `card` signed with the agent's key, found through its `jku`.
fn signed(origin: &str, key: &Jwk, card: &Value) -> Value {
    let jku = format!("{origin}/.well-known/jwks.json");
    sign_card(card, key, "ES256", "fake-agent-key", Some(&jku)).unwrap_or_else(|_| card.clone())
}

fn build_card(
    origin: &str,
    config: &FakeAgentConfig,
    key: &Jwk,
    description: Option<&str>,
) -> Value {
    let description = description.unwrap_or("cardgate's scriptable fake agent");
    let only_v03 = config.versions.iter().all(|v| v.starts_with("0."));
    let mut caps = json!({"streaming": config.streaming, "pushNotifications": config.push});
    if config.extended_card && !only_v03 {
        caps["extendedAgentCard"] = true.into();
    }
    let card = if only_v03 {
        if config.state_transition_history {
            caps["stateTransitionHistory"] = true.into();
        }
        json!({
            "name": "Fake Agent", "description": description, "version": "1.0.0",
            "url": format!("{origin}/a2a/v03"), "preferredTransport": "JSONRPC", "protocolVersion": "0.3.0",
            "capabilities": caps, "defaultInputModes": ["text/plain"], "defaultOutputModes": ["text/plain"],
            "skills": [{"id": "echo", "name": "Echo", "description": "echoes", "tags": ["test"]}]
        })
    } else {
        let interfaces: Vec<Value> = config
            .versions
            .iter()
            .map(|v| {
                let path = if v.starts_with("0.") { "/a2a/v03" } else { "/a2a/v1" };
                let mut interface = if config.grpc && !v.starts_with("0.") {
                    json!({"url": origin, "protocolBinding": "GRPC", "protocolVersion": v})
                } else {
                    json!({"url": format!("{origin}{path}"), "protocolBinding": "JSONRPC", "protocolVersion": v})
                };
                if let Some(tenant) = &config.tenant {
                    interface["tenant"] = tenant.as_str().into();
                }
                interface
            })
            .collect();
        json!({
            "name": "Fake Agent", "description": description, "version": "1.0.0",
            "supportedInterfaces": interfaces, "capabilities": caps,
            "defaultInputModes": ["text/plain"], "defaultOutputModes": ["text/plain"],
            "skills": [{"id": "echo", "name": "Echo", "description": "echoes", "tags": ["test"]}]
        })
    };
    let mut card = card;
    if config.extended_card && only_v03 {
        card["supportsAuthenticatedExtendedCard"] = true.into();
    }
    if config.bearer.is_some() {
        if only_v03 {
            card["securitySchemes"] = json!({"bearer": {"type": "http", "scheme": "bearer"}});
            card["security"] = json!([{"bearer": []}]);
        } else {
            card["securitySchemes"] =
                json!({"bearer": {"httpAuthSecurityScheme": {"scheme": "Bearer"}}});
            card["securityRequirements"] = json!([{"schemes": {"bearer": {"list": []}}}]);
        }
    }
    if !config.sign {
        return card;
    }
    signed(origin, key, &card)
}

async fn card_handler(State(s): State<Arc<Shared>>) -> Json<Value> {
    Json(lock(&s.card).clone())
}

async fn jwks_handler(State(s): State<Arc<Shared>>) -> Json<Value> {
    Json(s.jwks.clone())
}

async fn v1_handler(
    State(s): State<Arc<Shared>>,
    headers: HeaderMap,
    Json(req): Json<Value>,
) -> Response {
    if let Some(refused) = unauthorized(&s, &headers) {
        return refused;
    }
    // v1.x interfaces; a missing header means 0.3 (A2A v1.0 §3.6.2).
    if !headers
        .get("a2a-version")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("1."))
    {
        return rpc_error(&req, -32009, "A2A-Version 1.x is required");
    }
    dispatch(s, req, true).await
}

async fn v03_handler(
    State(s): State<Arc<Shared>>,
    headers: HeaderMap,
    Json(req): Json<Value>,
) -> Response {
    if let Some(refused) = unauthorized(&s, &headers) {
        return refused;
    }
    dispatch(s, req, false).await
}

/// Whether a call lacks the bearer token the agent requires: its 401 if so.
fn unauthorized(s: &Shared, headers: &HeaderMap) -> Option<Response> {
    let token = s.config.bearer.as_deref()?;
    let presented = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    if presented == Some(token) {
        return None;
    }
    let body = Json(json!({"error": {"code": 401, "message": "a valid bearer token is required"}}));
    Some((StatusCode::UNAUTHORIZED, body).into_response())
}

fn rpc_error(req: &Value, code: i64, message: &str) -> Response {
    Json(json!({"jsonrpc": "2.0", "id": req["id"], "error": {"code": code, "message": message}}))
        .into_response()
}

fn rpc_result(req: &Value, result: Value) -> Response {
    Json(json!({"jsonrpc": "2.0", "id": req["id"], "result": result})).into_response()
}

/// What the agent answers a call with, whichever binding carried it.
enum Reply {
    Result(Value),
    Error(i64, &'static str),
    /// The push store fails (HTTP 500; gRPC `INTERNAL`).
    Unavailable,
    /// A stream of results.
    Events(mpsc::Receiver<StreamItem>),
}

/// One item of a stream.
enum StreamItem {
    Event(Value),
    /// Bytes that are not JSON (SSE only).
    Malformed,
}

/// Answers one JSON-RPC request.
async fn dispatch(s: Arc<Shared>, req: Value, v1: bool) -> Response {
    let method = req["method"].as_str().unwrap_or_default();
    match call(s, method, &req["params"], v1).await {
        Reply::Result(result) => rpc_result(&req, result),
        Reply::Error(code, message) => rpc_error(&req, code, message),
        Reply::Unavailable => {
            (StatusCode::INTERNAL_SERVER_ERROR, "push store unavailable").into_response()
        }
        Reply::Events(rx) => sse(rx, req["id"].clone()),
    }
}

/// The behaviour for a call: the configured one, unless `fault_on` names a text this call's
/// message does not carry.
fn behaviour_for(s: &Shared, params: &Value) -> Behaviour {
    let behaviour = *lock(&s.behaviour);
    let Some(trigger) = lock(&s.fault_on).clone() else {
        return behaviour;
    };
    let carries = params["message"]["parts"].as_array().is_some_and(|parts| {
        parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .any(|t| t.contains(&trigger))
    });
    if carries {
        behaviour
    } else {
        Behaviour::Conformant
    }
}

/// Answers one call: `method` by its v1.0 name (`v1`) or its v0.3 one.
///
/// Long on purpose: one arm per A2A method (both wire versions' names side by side), so the
/// test double's whole surface reads in one place.
async fn call(s: Arc<Shared>, method: &str, params: &Value, v1: bool) -> Reply {
    let behaviour = behaviour_for(&s, params);
    if behaviour == Behaviour::SlowAnswers {
        tokio::time::sleep(SLOW_ANSWER).await;
    }
    match (method, v1) {
        ("GetExtendedAgentCard", true) | ("agent/getAuthenticatedExtendedCard", false) => {
            match extended_card(&s, s.config.sign) {
                Some(card) => Reply::Result(card),
                None => Reply::Error(-32007, "Extended agent card not configured"),
            }
        }
        ("SendMessage", true) | ("message/send", false) => {
            let non_blocking = if v1 {
                params["configuration"]["returnImmediately"].as_bool() == Some(true)
            } else {
                params["configuration"]["blocking"].as_bool() == Some(false)
            };
            let (task_id, updates) = match begin_turn(&s, &params["message"], v1, behaviour) {
                Ok(turn) => turn,
                Err((code, msg)) => return Reply::Error(code, msg),
            };
            register_inline(&s, &task_id, params, v1);
            if non_blocking {
                // A new task answers `submitted`; a follow-up answers `working` at once.
                let follow_up = !params["message"]["taskId"].is_null();
                let mut rest = updates.into_iter();
                if follow_up && let Some(u) = rest.next() {
                    advance(&s, &task_id, &u, behaviour);
                }
                let rest: Vec<Update> = rest.collect();
                let (s2, id2) = (s.clone(), task_id.clone());
                let delay = if params["message"]["parts"][0]["text"]
                    .as_str()
                    .is_some_and(|t| t.contains("slow"))
                {
                    SLOW_TASK.max(s.config.step_delay)
                } else {
                    s.config.step_delay
                };
                tokio::spawn(async move {
                    for u in rest {
                        tokio::time::sleep(delay).await;
                        advance(&s2, &id2, &u, behaviour);
                        notify(&s2, &id2, &u, behaviour).await;
                    }
                });
            } else {
                for u in &updates {
                    advance(&s, &task_id, u, behaviour);
                    notify(&s, &task_id, u, behaviour).await;
                }
            }
            let task = task_json(&s, &task_id, v1, behaviour);
            Reply::Result(if v1 { json!({"task": task}) } else { task })
        }
        ("SendStreamingMessage", true) | ("message/stream", false) => {
            if behaviour == Behaviour::StreamingPlainJson {
                let (task_id, updates) = match begin_turn(&s, &params["message"], v1, behaviour) {
                    Ok(turn) => turn,
                    Err((code, msg)) => return Reply::Error(code, msg),
                };
                for u in &updates {
                    apply(&s, &task_id, u, behaviour);
                }
                let task = task_json(&s, &task_id, v1, behaviour);
                return Reply::Result(if v1 { json!({"task": task}) } else { task });
            }
            match events(s, params, v1, behaviour) {
                Ok(rx) => Reply::Events(rx),
                Err((code, msg)) => Reply::Error(code, msg),
            }
        }
        ("GetTask", true) | ("tasks/get", false) => {
            let id = params["id"].as_str().unwrap_or_default();
            if !lock(&s.tasks).contains_key(id) {
                return Reply::Error(-32001, "Task not found");
            }
            let mut task = task_json(&s, id, v1, behaviour);
            let state = task["status"]["state"].as_str().unwrap_or_default();
            if behaviour == Behaviour::GetNeverEnds
                && TaskState::parse(state).is_some_and(|(st, _)| st.is_terminal())
            {
                task["status"]["state"] = if v1 {
                    v1_state("working")
                } else {
                    "working".into()
                }
                .into();
            }
            Reply::Result(task)
        }
        ("CancelTask", true) | ("tasks/cancel", false) => {
            let id = params["id"].as_str().unwrap_or_default().to_string();
            let cancel = Update::Status {
                state: "canceled",
                timestamp: true,
                message: None,
            };
            {
                let tasks = lock(&s.tasks);
                match tasks.get(&id) {
                    None => return Reply::Error(-32001, "Task not found"),
                    Some(t)
                        if is_terminal(t.state) && behaviour != Behaviour::CancelFlipsTerminal =>
                    {
                        return Reply::Error(-32002, "Task cannot be canceled");
                    }
                    Some(_) => {}
                }
            }
            if behaviour == Behaviour::CancelFlipsTerminal {
                reopen(&s, &id);
            }
            if behaviour == Behaviour::CancelNotApplied {
                // Answered as if canceled; the task itself goes on.
                let mut task = task_json(&s, &id, v1, behaviour);
                task["status"] = status_json("canceled", Some(&stamp(behaviour)), v1);
                return Reply::Result(task);
            }
            advance(&s, &id, &cancel, behaviour);
            Reply::Result(task_json(&s, &id, v1, behaviour))
        }
        ("SubscribeToTask", true) | ("tasks/resubscribe", false) => {
            resubscribe(&s, params, v1, behaviour)
        }
        ("CreateTaskPushNotificationConfig", true)
        | ("tasks/pushNotificationConfig/set", false) => {
            if !s.config.push {
                return Reply::Error(-32003, "Push notifications are not supported");
            }
            if behaviour == Behaviour::PushRegistration500 {
                return Reply::Unavailable;
            }
            let task_id = params["taskId"].as_str().unwrap_or_default().to_string();
            let config = if v1 {
                params.clone()
            } else {
                params["pushNotificationConfig"].clone()
            };
            let push = Push {
                url: config["url"].as_str().unwrap_or_default().to_string(),
                token: config["token"].as_str().unwrap_or_default().to_string(),
                v1,
            };
            lock(&s.pushes).insert(task_id, push);
            Reply::Result(params.clone())
        }
        _ => Reply::Error(-32601, "Method not found"),
    }
}

/// Registers the webhook a send carries in its configuration (v1.0
/// `taskPushNotificationConfig`, v0.3 `pushNotificationConfig`), as the SDKs do.
fn register_inline(s: &Shared, task_id: &str, params: &Value, v1: bool) {
    let config = &params["configuration"][if v1 {
        "taskPushNotificationConfig"
    } else {
        "pushNotificationConfig"
    }];
    if !s.config.push || !config.is_object() {
        return;
    }
    let push = Push {
        url: config["url"].as_str().unwrap_or_default().to_string(),
        token: config["token"].as_str().unwrap_or_default().to_string(),
        v1,
    };
    lock(&s.pushes).insert(task_id.to_string(), push);
}

/// Starts a turn: a new task (submitted) or a follow-up on an interrupted one. Returns the
/// task id and the updates to play.
///
/// Long on purpose: each behaviour switch of the test double shapes the turn here, one after
/// another, so what a switch does is found in one place.
fn begin_turn(
    s: &Shared,
    message: &Value,
    v1: bool,
    behaviour: Behaviour,
) -> Result<(String, Vec<Update>), (i64, &'static str)> {
    let text = message["parts"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let mut tasks = lock(&s.tasks);
    let mut updates = Vec::new();
    let task_id = match message["taskId"].as_str() {
        Some(id) if behaviour != Behaviour::FollowUpNewTask => {
            let task = tasks.get_mut(id).ok_or((-32001, "Task not found"))?;
            if is_terminal(task.state) {
                if behaviour != Behaviour::SendReopensTerminal {
                    return Err((-32004, "Task is in a terminal state"));
                }
                task.state = "working";
            }
            task.history.push(message.clone());
            id.to_string()
        }
        _ => {
            let id = uuid::Uuid::new_v4().to_string();
            let context_id = message["contextId"]
                .as_str()
                .map_or_else(|| uuid::Uuid::new_v4().to_string(), str::to_string);
            let ordinal = tasks.len();
            tasks.insert(
                id.clone(),
                Task {
                    id: id.clone(),
                    ordinal,
                    context_id,
                    state: if behaviour == Behaviour::OpensAtWorking {
                        "working"
                    } else {
                        "submitted"
                    },
                    timestamp: Some(stamp(behaviour)),
                    history: vec![message.clone()],
                    artifacts: Vec::new(),
                },
            );
            id
        }
    };
    let _ = v1;
    // Decided as the turn begins: whether this task drops its terminal timestamp.
    let drops_timestamp = match behaviour {
        Behaviour::NoTerminalTimestamp => true,
        Behaviour::ThirdNoTerminalTimestamp => tasks[&task_id].ordinal % 3 == 2,
        Behaviour::OverlapNoTerminalTimestamp => tasks
            .values()
            .any(|t| t.id != task_id && matches!(t.state, "submitted" | "working")),
        _ => false,
    };
    let working = Update::Status {
        state: "working",
        timestamp: true,
        message: None,
    };
    updates.push(working.clone());
    if behaviour == Behaviour::WorkingTwice {
        updates.push(working);
    }
    if behaviour == Behaviour::NeverFinishes {
        return Ok((task_id, updates));
    }
    if text.contains("need-input") {
        updates.push(Update::Status {
            state: "input-required",
            timestamp: true,
            message: Some("more input, please"),
        });
    } else {
        updates.push(Update::Artifact(format!("echo: {text}")));
        updates.push(Update::Status {
            state: if text.contains("fail") {
                "failed"
            } else {
                "completed"
            },
            timestamp: !drops_timestamp,
            message: None,
        });
    }
    Ok((task_id, updates))
}

fn is_terminal(state: &str) -> bool {
    matches!(state, "completed" | "failed" | "canceled" | "rejected")
}

/// Lets a finished task move again (`CancelFlipsTerminal`): `apply` leaves terminal tasks be.
fn reopen(s: &Shared, task_id: &str) {
    if let Some(task) = lock(&s.tasks).get_mut(task_id) {
        task.state = "working";
    }
}

/// SubscribeToTask / tasks/resubscribe. On a finished task a v1.0 agent answers
/// `UnsupportedOperationError` (§3.1.6); the v0.3 side sends the task once and closes, the
/// other answer the rules accept. A live task gets its current state, then every update until
/// it ends, then the stream closes.
fn resubscribe(s: &Shared, params: &Value, v1: bool, behaviour: Behaviour) -> Reply {
    let id = params["id"].as_str().unwrap_or_default();
    // Held while the snapshot is taken and the stream joins, so no update falls between.
    let mut watchers = lock(&s.watchers);
    let state = match lock(&s.tasks).get(id) {
        None => return Reply::Error(-32001, "Task not found"),
        Some(t) => t.state,
    };
    let replays = behaviour == Behaviour::ResubscribeReplaysEnd;
    if v1 && is_terminal(state) && !replays {
        return Reply::Error(-32004, "Task is in a terminal state");
    }
    let live = !is_terminal(state);
    if live && behaviour == Behaviour::ResubscribeLiveNotFound {
        return Reply::Error(-32001, "Task not found");
    }
    let task = task_json(s, id, v1, behaviour);
    let mut items = vec![if v1 { json!({"task": task}) } else { task }];
    if replays && is_terminal(state) {
        let end = Update::Status {
            state,
            timestamp: true,
            message: None,
        };
        items.push(event_json(s, id, &end, v1));
    }
    let (tx, rx) = mpsc::channel::<StreamItem>(64);
    for item in items {
        let _ = tx.try_send(StreamItem::Event(item));
    }
    if live && behaviour != Behaviour::ResubscribeLiveClosesEarly {
        watchers.entry(id.to_string()).or_default().push((tx, v1));
    }
    Reply::Events(rx)
}

/// Applies an update to the stored task and sends it to the task's open resubscriptions;
/// once the task has ended, they close.
fn advance(s: &Shared, task_id: &str, update: &Update, behaviour: Behaviour) {
    apply(s, task_id, update, behaviour);
    let ended = lock(&s.tasks)
        .get(task_id)
        .is_some_and(|t| is_terminal(t.state));
    let events = [false, true].map(|v1| event_json(s, task_id, update, v1));
    let mut watchers = lock(&s.watchers);
    if let Some(list) = watchers.get_mut(task_id) {
        for (tx, v1) in list.iter() {
            let _ = tx.try_send(StreamItem::Event(events[usize::from(*v1)].clone()));
        }
        if ended {
            watchers.remove(task_id);
        }
    }
}

/// `event` without the status timestamp it carries (`StreamNoTimestamp`).
fn strip_timestamp(event: &mut Value) {
    for path in ["/statusUpdate/status", "/task/status", "/status"] {
        if let Some(status) = event.pointer_mut(path).and_then(Value::as_object_mut) {
            status.remove("timestamp");
        }
    }
}

/// Applies an update to the stored task.
fn apply(s: &Shared, task_id: &str, update: &Update, behaviour: Behaviour) {
    let mut tasks = lock(&s.tasks);
    let Some(task) = tasks.get_mut(task_id) else {
        return;
    };
    match update {
        Update::Status {
            state,
            timestamp,
            message,
        } => {
            if is_terminal(task.state) {
                return;
            }
            task.state = state;
            task.timestamp = timestamp.then(|| stamp(behaviour));
            // Every status change leaves an agent message in the history, so its length grows
            // with each transition (what stateTransitionHistory promises).
            let text = message.unwrap_or(state);
            task.history.push(json!({"role": "agent", "text": text}));
        }
        Update::Artifact(text) => task
            .artifacts
            .push(json!({"artifactId": uuid::Uuid::new_v4().to_string(), "text": text})),
    }
}

/// Now, as this agent spells it: RFC 3339 UTC with `Z`, or with `+00:00` when it is switched
/// to `OffsetTimestamps`.
fn stamp(behaviour: Behaviour) -> String {
    let z = time::format(time::now());
    if behaviour == Behaviour::OffsetTimestamps {
        format!("{}+00:00", z.trim_end_matches('Z'))
    } else {
        z
    }
}

fn v1_state(state: &str) -> String {
    format!(
        "TASK_STATE_{}",
        state.to_ascii_uppercase().replace('-', "_")
    )
}

fn message_json(m: &Value, v1: bool, task: &Task) -> Value {
    let text = m["parts"][0]["text"]
        .as_str()
        .or(m["text"].as_str())
        .unwrap_or_default();
    let role = m["role"].as_str().unwrap_or("agent");
    let agent = role == "agent" || role == "ROLE_AGENT";
    if v1 {
        json!({"messageId": uuid::Uuid::new_v4().to_string(), "role": if agent { "ROLE_AGENT" } else { "ROLE_USER" },
               "parts": [{"text": text}], "taskId": task.id, "contextId": task.context_id})
    } else {
        json!({"kind": "message", "messageId": uuid::Uuid::new_v4().to_string(), "role": if agent { "agent" } else { "user" },
               "parts": [{"kind": "text", "text": text}], "taskId": task.id, "contextId": task.context_id})
    }
}

fn status_json(state: &str, timestamp: Option<&String>, v1: bool) -> Value {
    let mut status = json!({"state": if v1 { v1_state(state) } else { state.to_string() }});
    if let Some(ts) = timestamp {
        status["timestamp"] = ts.clone().into();
    }
    status
}

fn task_json(s: &Shared, task_id: &str, v1: bool, behaviour: Behaviour) -> Value {
    let tasks = lock(&s.tasks);
    let Some(task) = tasks.get(task_id) else {
        return Value::Null;
    };
    let history: Vec<Value> = if behaviour == Behaviour::StuckHistory {
        task.history
            .iter()
            .take(1)
            .map(|m| message_json(m, v1, task))
            .collect()
    } else {
        task.history
            .iter()
            .map(|m| message_json(m, v1, task))
            .collect()
    };
    let artifacts: Vec<Value> = task
        .artifacts
        .iter()
        .map(|a| if v1 { json!({"artifactId": a["artifactId"], "parts": [{"text": a["text"]}]}) } else { json!({"artifactId": a["artifactId"], "parts": [{"kind": "text", "text": a["text"]}]}) })
        .collect();
    let mut out = json!({
        "id": task.id, "contextId": task.context_id,
        "status": status_json(task.state, task.timestamp.as_ref(), v1),
        "history": history, "artifacts": artifacts,
    });
    if !v1 {
        out["kind"] = "task".into();
    }
    if behaviour == Behaviour::UnknownFields {
        out["vendorTrace"] = json!({"span": "7f3a", "sampled": true});
        out["status"]["vendorNote"] = "not an A2A field".into();
    }
    if s.config.padding > 0 {
        out["metadata"] = json!({ "padding": "x".repeat(s.config.padding) });
    }
    out
}

/// The stream event for an update, in the wire's shape.
fn event_json(s: &Shared, task_id: &str, update: &Update, v1: bool) -> Value {
    let tasks = lock(&s.tasks);
    let Some(task) = tasks.get(task_id) else {
        return Value::Null;
    };
    let mut event = match update {
        Update::Status {
            state, timestamp, ..
        } => {
            let ts = if *timestamp {
                task.timestamp
                    .clone()
                    .or_else(|| Some(stamp(*lock(&s.behaviour))))
            } else {
                None
            };
            let status = status_json(state, ts.as_ref(), v1);
            if v1 {
                json!({"statusUpdate": {"taskId": task.id, "contextId": task.context_id, "status": status}})
            } else {
                json!({"kind": "status-update", "taskId": task.id, "contextId": task.context_id, "status": status, "final": is_terminal(state) || *state == "input-required"})
            }
        }
        Update::Artifact(text) => {
            let artifact = if v1 {
                json!({"artifactId": uuid::Uuid::new_v4().to_string(), "parts": [{"text": text}]})
            } else {
                json!({"artifactId": uuid::Uuid::new_v4().to_string(), "parts": [{"kind": "text", "text": text}]})
            };
            if v1 {
                json!({"artifactUpdate": {"taskId": task.id, "contextId": task.context_id, "artifact": artifact, "lastChunk": true}})
            } else {
                json!({"kind": "artifact-update", "taskId": task.id, "contextId": task.context_id, "artifact": artifact, "lastChunk": true})
            }
        }
    };
    if *lock(&s.behaviour) == Behaviour::UnknownFields
        && let Some(inner) = event
            .as_object_mut()
            .and_then(|o| o.values_mut().find(|v| v.is_object()))
    {
        inner["vendorTrace"] = json!({"span": "7f3a"});
    }
    event
}

/// Delivers an update to the task's registered webhook, if any, as `behaviour` has it.
async fn notify(s: &Arc<Shared>, task_id: &str, update: &Update, behaviour: Behaviour) {
    let target = lock(&s.pushes)
        .get(task_id)
        .map(|p| (p.url.clone(), p.token.clone(), p.v1));
    let Some((url, token, v1)) = target else {
        return;
    };
    let skipped = match behaviour {
        Behaviour::PushNoTerminal => update.is_terminal(),
        Behaviour::PushTerminalOnly => !update.is_terminal(),
        _ => false,
    };
    if skipped {
        return;
    }
    let body = if v1 {
        event_json(s, task_id, update, true)
    } else {
        task_json(s, task_id, false, behaviour)
    };
    let copies = if behaviour == Behaviour::PushFlood {
        FLOOD
    } else {
        1
    };
    let header = if behaviour == Behaviour::TokenInOwnHeader {
        "X-Push-Token"
    } else {
        "X-A2A-Notification-Token"
    };
    let post = |body: &Value| {
        s.http
            .post(&url)
            .header(header, &token)
            .json(body)
            .timeout(Duration::from_secs(5))
    };
    if behaviour == Behaviour::PushOutOfOrder {
        // Live states are held back, and the last one goes out after the end.
        if update.is_terminal() {
            let _ = post(&body).send().await;
            let working = Update::Status {
                state: "working",
                timestamp: true,
                message: None,
            };
            let held = if v1 {
                event_json(s, task_id, &working, true)
            } else {
                let mut task = task_json(s, task_id, false, behaviour);
                task["status"]["state"] = "working".into();
                task
            };
            let _ = post(&held).send().await;
        }
        return;
    }
    for _ in 0..copies {
        let _ = post(&body).send().await;
    }
}

/// Plays a streamed turn: the task (when new), then each update as it is applied.
fn events(
    s: Arc<Shared>,
    params: &Value,
    v1: bool,
    behaviour: Behaviour,
) -> Result<mpsc::Receiver<StreamItem>, (i64, &'static str)> {
    let (task_id, mut updates) = begin_turn(&s, &params["message"], v1, behaviour)?;
    register_inline(&s, &task_id, params, v1);
    let is_new = params["message"]["taskId"].is_null();
    match behaviour {
        Behaviour::TwoTerminalEvents => {
            if let Some(last) = updates.last().cloned() {
                updates.push(last);
            }
        }
        Behaviour::EventAfterTerminal => updates.push(Update::Artifact("late".into())),
        _ => {}
    }
    let (tx, rx) = mpsc::channel::<StreamItem>(16);
    tokio::spawn(async move {
        if is_new {
            let task = task_json(&s, &task_id, v1, behaviour);
            let mut task = if v1 { json!({"task": task}) } else { task };
            if behaviour == Behaviour::StreamNoTimestamp {
                strip_timestamp(&mut task);
            }
            let _ = tx.send(StreamItem::Event(task)).await;
        }
        for (i, u) in updates.iter().enumerate() {
            tokio::time::sleep(s.config.step_delay).await;
            advance(&s, &task_id, u, behaviour);
            let mut event = event_json(&s, &task_id, u, v1);
            notify(&s, &task_id, u, behaviour).await;
            if behaviour == Behaviour::StreamCutBeforeEnd && u.is_terminal() {
                return;
            }
            if behaviour == Behaviour::StreamNoTimestamp {
                strip_timestamp(&mut event);
            }
            if tx.send(StreamItem::Event(event)).await.is_err() {
                return;
            }
            if behaviour == Behaviour::MalformedSse && i == 0 {
                let _ = tx.send(StreamItem::Malformed).await;
            }
        }
        match behaviour {
            // Hold the stream open until the client gives up.
            Behaviour::NeverFinishes => tokio::time::sleep(Duration::from_secs(300)).await,
            Behaviour::EndlessStream => {
                let working = Update::Status {
                    state: "working",
                    timestamp: true,
                    message: None,
                };
                while tx
                    .send(StreamItem::Event(event_json(&s, &task_id, &working, v1)))
                    .await
                    .is_ok()
                {}
            }
            _ => {}
        }
    });
    Ok(rx)
}

/// A stream as Server-Sent Events of JSON-RPC responses.
fn sse(rx: mpsc::Receiver<StreamItem>, id: Value) -> Response {
    let frames = tokio_stream_from(rx).map(move |item| {
        Ok::<_, std::io::Error>(match item {
            StreamItem::Event(result) => format!(
                "data: {}\n\n",
                json!({"jsonrpc": "2.0", "id": id, "result": result})
            ),
            StreamItem::Malformed => "data: {this is not json\n\n".to_string(),
        })
    });
    (
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        Body::from_stream(frames),
    )
        .into_response()
}

fn tokio_stream_from<T>(mut rx: mpsc::Receiver<T>) -> impl futures::Stream<Item = T> {
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
}
