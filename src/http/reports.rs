//! `/v1/callees/{id}/reports`: callers report lifecycle violations with their evidence.

use axum::Extension;
use axum::extract::OriginalUri;
use axum::extract::State;
use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

use super::ApiState;
use super::closed::{DemotionClassView, ReportOutcomeView};
use super::error::{ApiError, ErrorBody};
use super::extract::page_size;
use super::extract::{Json, Path, Query};
use super::paging::{Paged, next_cursor};
use super::permissions::Caller;
use crate::domain::ids::{CalleeId, ReportId};
use crate::domain::report::Report;
use crate::domain::report::Trigger;
use crate::domain::version::ProtocolVersion;
use crate::service::reports;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct CreateReport {
    #[schema(example = "1.0", pattern = r"^[0-9]{1,4}\.[0-9]{1,4}$")]
    pub protocol_version: String,
    pub trigger: TriggerView,
    /// For the status triggers: `{"observed": [A2A task / status-update / TaskStatus objects, in
    /// the order seen]}`; for `duplicate-terminal`, an artifact-update or message of the task
    /// after its terminal status shows the violation too (an event after the end). For `push-registration-failed`: `{"attempts": [{"http_status": 500},
    /// {"jsonrpc_error": {"code": -32603, "message": "…"}}]}`.
    #[serde(deserialize_with = "super::extract::object")]
    pub evidence: EvidenceBody,
}

/// What the caller observed: status objects for the status triggers, registration outcomes for
/// `push-registration-failed`.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct EvidenceBody {
    /// A2A task, status-update (v1.0 or v0.3 shape) or bare `TaskStatus` objects, in the order
    /// seen; artifact-update and message objects count as events of their task.
    #[schema(value_type = Option<Vec<Object>>, min_items = 1, max_items = 200)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observed: Option<Vec<serde_json::Value>>,
    /// One object per registration attempt: `{"http_status": 500}` or
    /// `{"jsonrpc_error": {"code": -32603, "message": "…"}}`.
    #[schema(value_type = Option<Vec<Object>>, min_items = 1, max_items = 200)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attempts: Option<Vec<serde_json::Value>>,
}

#[derive(Debug, Clone, Copy, Deserialize, Serialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum TriggerView {
    TerminalWithoutTimestamp,
    HistoryNotIncremented,
    PushRegistrationFailed,
    DuplicateTerminal,
}

impl From<TriggerView> for Trigger {
    fn from(t: TriggerView) -> Self {
        match t {
            TriggerView::TerminalWithoutTimestamp => Trigger::TerminalWithoutTimestamp,
            TriggerView::HistoryNotIncremented => Trigger::HistoryNotIncremented,
            TriggerView::PushRegistrationFailed => Trigger::PushRegistrationFailed,
            TriggerView::DuplicateTerminal => Trigger::DuplicateTerminal,
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ReportView {
    pub id: Uuid,
    pub callee_id: Uuid,
    pub protocol_version: String,
    pub trigger: String,
    pub class: DemotionClassView,
    #[schema(value_type = Object)]
    pub evidence: serde_json::Value,
    /// What the evidence check established.
    pub finding: String,
    pub reporter: String,
    pub outcome: ReportOutcomeView,
    pub created_at: DateTime<Utc>,
    /// In the answer to a submission that moved the gate: the seq of the ledger event it
    /// appended. Pass it as `min_seq` to `GET /v1/trust` to read the effect back from any
    /// replica. Absent in listings.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ledger_seq: Option<i64>,
}

impl From<Report> for ReportView {
    fn from(r: Report) -> Self {
        Self {
            id: r.id.0,
            callee_id: r.callee_id.0,
            protocol_version: r.protocol_version.to_string(),
            trigger: r.trigger.as_str().to_string(),
            class: (&r.class).into(),
            evidence: r.evidence,
            finding: r.finding,
            reporter: r.reporter,
            outcome: (&r.outcome).into(),
            created_at: r.created_at,
            ledger_seq: None,
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ReportPage {
    /// Newest first.
    pub items: Vec<ReportView>,
    /// Pass as `after` for the next page (older reports); absent on the last page.
    pub next: Option<Uuid>,
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct ReportQuery {
    /// Page size, 1 to 200 (default 50).
    #[param(minimum = 1, maximum = 200)]
    pub limit: Option<u32>,
    /// Cursor: the `next` of the previous page.
    pub after: Option<Uuid>,
}

/// Report a lifecycle violation with its evidence.
///
/// The evidence is checked; if it shows the violation the report is recorded with its reporter
/// and a `lifecycle-trusted` subject is demoted (a `card-trusted` one is recorded without a
/// gate move). Evidence that does not show the violation is refused with the reason.
#[utoipa::path(post, path = "/v1/callees/{id}/reports", tag = "reports",
    security(("bearer" = ["reporter"])), request_body = CreateReport,
    params(("id" = Uuid, Path, description = "Callee id")),
    responses(
        (status = 401, description = "No valid API key", body = ErrorBody),
        (status = 403, description = "The key's role is not enough", body = ErrorBody),
        (status = 201, description = "Recorded", body = ReportView),
        (status = 400, description = "Malformed report, or evidence that does not show the violation", body = ErrorBody),
        (status = 404, description = "No such callee or subject", body = ErrorBody),
    ))]
pub(crate) async fn create_report(
    State(app): State<ApiState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<Uuid>,
    Json(body): Json<CreateReport>,
) -> Result<(StatusCode, Json<ReportView>), ApiError> {
    let version = ProtocolVersion::parse_exact(&body.protocol_version)
        .map_err(|e| ApiError::invalid(format!("protocol_version: {e}")))?;
    let evidence =
        serde_json::to_value(&body.evidence).map_err(|e| ApiError::Internal(e.into()))?;
    let (report, ledger_seq) = reports::submit(
        &app.services,
        CalleeId(id),
        version,
        body.trigger.into(),
        evidence,
        &caller.actor(),
        app.services.now(),
    )
    .await?;
    let view = ReportView {
        ledger_seq,
        ..report.into()
    };
    Ok((StatusCode::CREATED, Json(view)))
}

/// A callee's reports, newest first.
#[utoipa::path(get, path = "/v1/callees/{id}/reports", tag = "reports",
    security(("bearer" = ["reader"])),
    params(("id" = Uuid, Path, description = "Callee id"), ReportQuery),
    responses(
        (status = 401, description = "No valid API key", body = ErrorBody),
        (status = 403, description = "The key's role is not enough", body = ErrorBody),
        (status = 200, description = "Reports", body = ReportPage),
        (status = 400, description = "Bad parameters", body = ErrorBody),
        (status = 404, description = "No such callee", body = ErrorBody),
    ))]
pub(crate) async fn list_reports(
    State(app): State<ApiState>,
    Path(id): Path<Uuid>,
    OriginalUri(uri): OriginalUri,
    Query(q): Query<ReportQuery>,
) -> Result<Paged<ReportPage>, ApiError> {
    let callee_id = CalleeId(id);
    let limit = page_size(q.limit)?;
    let reports =
        reports::page(&app.services.store, callee_id, q.after.map(ReportId), limit).await?;
    let next = next_cursor(&reports, limit, |r| r.id.0);
    let page = ReportPage {
        items: reports.into_iter().map(Into::into).collect(),
        next,
    };
    Ok(Paged::new(&uri, page, next))
}
