//! Probe runs: requesting one, and reading what it observed.

use std::collections::BTreeMap;

use axum::Extension;
use axum::extract::OriginalUri;
use axum::extract::State;
use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

use super::ApiState;
use super::closed::{
    CapabilityStatusView, DemotionClassView, FindingStatusView, LevelView, RuleCode, RunStatusView,
    SourceView, TaskRoleView, TaskStateView,
};
use super::error::{ApiError, ErrorBody};
use super::extract::page_size;
use super::extract::{Json, Path, Query};
use super::ledger::EventView;
use super::paging::{Paged, next_cursor};
use super::permissions::Caller;
use super::trials::{LatencyView, TrialsView};
use crate::domain::binding::Binding;
use crate::domain::capability::CapabilityOutcome;
use crate::domain::ids::{CalleeId, ProbeRunId};
use crate::domain::probe::latency::{Latency, Samples};
use crate::domain::probe::{Finding, ProbeRun, Transition};
use crate::domain::version::ProtocolVersion;
use crate::service::{ledger, probe};

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ProbeRequest {
    /// The subject's `Major.Minor`; when absent, the newest version the callee's card offers.
    #[schema(example = "1.0", pattern = r"^[0-9]{1,4}\.[0-9]{1,4}$")]
    pub protocol_version: Option<String>,
    /// Probe the interface over this binding instead of the one cardgate prefers; the
    /// newest card must offer it for the version.
    pub binding: Option<BindingName>,
}

/// A binding as cards name it (read in any case).
#[derive(Debug, Clone, Copy, Deserialize, ToSchema)]
#[serde(try_from = "String")]
pub enum BindingName {
    #[serde(rename = "JSONRPC")]
    JsonRpc,
    #[serde(rename = "HTTP+JSON")]
    HttpJson,
    #[serde(rename = "GRPC")]
    Grpc,
}

impl TryFrom<String> for BindingName {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        Ok(match s.parse::<Binding>()? {
            Binding::JsonRpc => Self::JsonRpc,
            Binding::HttpJson => Self::HttpJson,
            Binding::Grpc => Self::Grpc,
        })
    }
}

impl From<BindingName> for Binding {
    fn from(name: BindingName) -> Self {
        match name {
            BindingName::JsonRpc => Binding::JsonRpc,
            BindingName::HttpJson => Binding::HttpJson,
            BindingName::Grpc => Binding::Grpc,
        }
    }
}

/// A probe run, without its evidence.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ProbeRunSummary {
    pub id: Uuid,
    pub callee_id: Uuid,
    pub protocol_version: String,
    pub status: RunStatusView,
    pub reason: String,
    pub requested_by: String,
    pub created_at: DateTime<Utc>,
    pub started_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
    pub interface_url: Option<String>,
    /// `json-rpc-v1`, `json-rpc-v03`, `rest-v1` or `grpc-v1`.
    pub wire: Option<String>,
    /// The binding the requester asked for; absent when cardgate chose (JSON-RPC first).
    pub binding: Option<String>,
    /// Whether the cycle passed (finished runs only).
    pub passed: Option<bool>,
    pub error: Option<String>,
}

/// A probe run with everything it observed.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ProbeRunView {
    #[serde(flatten)]
    pub summary: ProbeRunSummary,
    pub verdict: Option<VerdictView>,
    /// Every task status trial 1 (the whole cycle) observed, in order.
    pub transitions: Vec<TransitionView>,
    /// Latency per operation over every trial.
    pub latency: LatencyView,
    /// Per capability: `passed`, `failed`, `not-advertised` or `not-exercised`, with a reason.
    pub capabilities: BTreeMap<String, CapabilityView>,
    pub findings: Vec<FindingView>,
    /// The ledger events this run appended.
    pub ledger_events: Vec<EventView>,
    /// Every request and response body and SSE frame, as exchanged; empty once retention
    /// pruned them (`transcript_pruned_at`).
    #[schema(value_type = Vec<Object>)]
    pub exchanges: serde_json::Value,
    /// When retention dropped this run's exchanges: it was past its subject's newest runs
    /// and no promotion or demotion cites it. Its verdict, findings and transitions stay.
    pub transcript_pruned_at: Option<DateTime<Utc>>,
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct VerdictView {
    pub passed: bool,
    /// What kept the cycle from passing.
    pub reasons: Vec<String>,
    /// Demotion triggers observed (`timestamp`, `history`, `push`, `terminal`, `policy`) and
    /// why.
    pub triggers: Vec<TriggerView>,
    /// The rulebook version it was judged under (`GET /v1/rulebook`); absent on runs from
    /// before rulebooks were versioned.
    pub rulebook: Option<String>,
    pub trials: TrialsView,
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct TriggerView {
    pub class: DemotionClassView,
    pub reason: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct TransitionView {
    pub task: TaskRoleView,
    pub source: SourceView,
    pub call: u32,
    pub state: TaskStateView,
    /// The state exactly as sent.
    pub raw_state: String,
    /// `status.timestamp` exactly as sent.
    pub timestamp: Option<String>,
    /// Whether the timestamp is RFC 3339 UTC.
    pub timestamp_valid: bool,
    pub history_len: Option<usize>,
    pub task_id: Option<String>,
    pub context_id: Option<String>,
    pub observed_at: DateTime<Utc>,
    /// Milliseconds from the start of the call that carried it (absent on push deliveries).
    pub offset_ms: Option<u64>,
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct CapabilityView {
    pub status: CapabilityStatusView,
    pub reason: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct FindingView {
    pub code: RuleCode,
    pub level: LevelView,
    pub status: FindingStatusView,
    pub message: String,
    /// The demotion class a failure triggers.
    pub trigger: Option<DemotionClassView>,
    /// What the rule enforces: the A2A spec section and ACTS requirement, or "registry
    /// policy" where cardgate asks for more than the spec.
    pub source: &'static str,
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ProbeRunPage {
    /// Newest first.
    pub items: Vec<ProbeRunSummary>,
    /// Pass as `after` for the next page (older runs); absent on the last page.
    pub next: Option<Uuid>,
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct ProbeQuery {
    /// Page size, 1 to 200 (default 50).
    #[param(minimum = 1, maximum = 200)]
    pub limit: Option<u32>,
    /// Cursor: the `next` of the previous page.
    pub after: Option<Uuid>,
}

impl From<&ProbeRun> for ProbeRunSummary {
    fn from(r: &ProbeRun) -> Self {
        Self {
            id: r.id.0,
            callee_id: r.callee_id.0,
            protocol_version: r.protocol_version.to_string(),
            status: (&r.status()).into(),
            reason: r.reason.clone(),
            requested_by: r.requested_by.clone(),
            created_at: r.created_at,
            started_at: r.start().map(|s| s.at),
            finished_at: r.finished_at(),
            interface_url: r.start().map(|s| s.interface_url.clone()),
            wire: r.start().map(|s| s.wire.clone()),
            binding: r.binding.map(|b| b.as_str().to_string()),
            passed: r.passed(),
            error: r.abort_reason().map(str::to_string),
        }
    }
}

impl From<&Transition> for TransitionView {
    fn from(t: &Transition) -> Self {
        Self {
            task: (&t.role).into(),
            source: (&t.source).into(),
            call: t.call,
            state: (&t.state).into(),
            raw_state: t.raw_state.clone(),
            timestamp: t.timestamp.clone(),
            timestamp_valid: t.parsed_timestamp.is_some(),
            history_len: t.history_len,
            task_id: t.task_id.clone(),
            context_id: t.context_id.clone(),
            observed_at: t.observed_at,
            offset_ms: t.offset_ms,
        }
    }
}

impl From<&Finding> for FindingView {
    fn from(f: &Finding) -> Self {
        Self {
            code: (&f.code).into(),
            level: (&f.level).into(),
            status: (&f.status).into(),
            message: f.message.clone(),
            trigger: f.trigger.as_ref().map(Into::into),
            source: f.code.source(),
        }
    }
}

impl From<&CapabilityOutcome> for CapabilityView {
    fn from(c: &CapabilityOutcome) -> Self {
        let reason = match c {
            CapabilityOutcome::Failed { reason } | CapabilityOutcome::NotExercised { reason } => {
                Some(reason.to_string())
            }
            CapabilityOutcome::Passed | CapabilityOutcome::NotAdvertised => None,
        };
        Self {
            status: c.into(),
            reason,
        }
    }
}

/// Queue a probe cycle of one subject. One probe per subject runs at a time.
#[utoipa::path(post, path = "/v1/callees/{id}/probes", tag = "probes",
    security(("bearer" = ["admin"])), request_body = ProbeRequest,
    params(("id" = Uuid, Path, description = "Callee id")),
    responses(
        (status = 401, description = "No valid API key", body = ErrorBody),
        (status = 403, description = "The key's role is not enough", body = ErrorBody),
        (status = 202, description = "Queued; poll GET /v1/probes/{id}", body = ProbeRunSummary),
        (status = 400, description = "Malformed body", body = ErrorBody),
        (status = 404, description = "No such callee", body = ErrorBody),
        (status = 409, description = "A probe of this subject is queued or running (named), its card is untrusted or offers no version, or it offers no interface over the binding asked for", body = ErrorBody),
    ))]
pub(crate) async fn create_probe(
    State(app): State<ApiState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<Uuid>,
    Json(body): Json<ProbeRequest>,
) -> Result<(StatusCode, Json<ProbeRunSummary>), ApiError> {
    let version = body
        .protocol_version
        .map(|v| {
            ProtocolVersion::parse_exact(&v)
                .map_err(|e| ApiError::invalid(format!("protocol_version: {e}")))
        })
        .transpose()?;
    let run = probe::request(
        &app.services,
        CalleeId(id),
        version,
        body.binding.map(Binding::from),
        "operator",
        &caller.actor(),
        app.services.now(),
    )
    .await?;
    Ok((StatusCode::ACCEPTED, Json((&run).into())))
}

/// A callee's probe runs, newest first.
#[utoipa::path(get, path = "/v1/callees/{id}/probes", tag = "probes",
    security(("bearer" = ["reader"])),
    params(("id" = Uuid, Path, description = "Callee id"), ProbeQuery),
    responses(
        (status = 401, description = "No valid API key", body = ErrorBody),
        (status = 403, description = "The key's role is not enough", body = ErrorBody),
        (status = 200, description = "Probe runs", body = ProbeRunPage),
        (status = 400, description = "Bad parameters", body = ErrorBody),
        (status = 404, description = "No such callee", body = ErrorBody),
    ))]
pub(crate) async fn list_probes(
    State(app): State<ApiState>,
    Path(id): Path<Uuid>,
    OriginalUri(uri): OriginalUri,
    Query(q): Query<ProbeQuery>,
) -> Result<Paged<ProbeRunPage>, ApiError> {
    let callee_id = CalleeId(id);
    let limit = page_size(q.limit)?;
    let runs = probe::page(
        &app.services.store,
        callee_id,
        q.after.map(ProbeRunId),
        limit,
    )
    .await?;
    let next = next_cursor(&runs, limit, |r| r.id.0);
    let page = ProbeRunPage {
        items: runs.iter().map(Into::into).collect(),
        next,
    };
    Ok(Paged::new(&uri, page, next))
}

/// One probe run: status, transitions, capability results, findings, verdict, the ledger
/// events it caused, and every exchange.
#[utoipa::path(get, path = "/v1/probes/{id}", tag = "probes",
    security(("bearer" = ["reader"])),
    params(("id" = Uuid, Path, description = "Probe run id")),
    responses(
        (status = 401, description = "No valid API key", body = ErrorBody),
        (status = 403, description = "The key's role is not enough", body = ErrorBody),
        (status = 200, description = "The probe run", body = ProbeRunView),
        (status = 400, description = "Malformed id", body = ErrorBody),
        (status = 404, description = "No such probe run", body = ErrorBody),
    ))]
pub(crate) async fn get_probe(
    State(app): State<ApiState>,
    Path(id): Path<Uuid>,
) -> Result<Json<ProbeRunView>, ApiError> {
    let run = probe::get(&app.services, ProbeRunId(id)).await?;
    let ledger_events: Vec<EventView> =
        ledger::events_at(&app.services.store, run.callee_id, &run.ledger_seqs)
            .await?
            .into_iter()
            .map(EventView::from)
            .collect();
    let judgement = run.judgement();
    let evidence = run.evidence();
    Ok(Json(ProbeRunView {
        summary: (&run).into(),
        verdict: judgement.map(|j| VerdictView {
            passed: j.verdict.passed,
            reasons: j.verdict.reasons.clone(),
            triggers: j
                .verdict
                .triggers
                .iter()
                .map(|(c, r)| TriggerView {
                    class: c.into(),
                    reason: r.clone(),
                })
                .collect(),
            rulebook: j.verdict.rulebook.clone(),
            trials: j.into(),
        }),
        latency: Latency::of(
            &evidence
                .map(|e| Samples::of(&e.observations))
                .unwrap_or_default(),
        )
        .into(),
        transitions: evidence
            .iter()
            .flat_map(|e| e.observations.transitions.iter().map(Into::into))
            .collect(),
        capabilities: judgement
            .map(|j| {
                j.capabilities
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.into()))
                    .collect()
            })
            .unwrap_or_default(),
        findings: judgement
            .map(|j| j.findings.iter().map(Into::into).collect())
            .unwrap_or_default(),
        ledger_events,
        exchanges: evidence
            .map(|e| e.transcript.clone())
            .unwrap_or(serde_json::Value::Array(Vec::new())),
        transcript_pruned_at: evidence.and_then(|e| e.transcript_pruned_at),
    }))
}
