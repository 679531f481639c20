//! `/v1/jobs` and `/v1/status`: what the queue holds and whether the scheduler is alive.

use axum::extract::OriginalUri;
use axum::extract::State;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

use super::ApiState;
use super::closed::{JobKindView, JobStateView};
use super::error::{ApiError, ErrorBody};
use super::extract::page_size;
use super::extract::{Json, Query};
use super::paging::{Paged, next_cursor};
use crate::domain::ids::JobId;
use crate::domain::job::{Job, JobStatus};
use crate::runtime::schedule::Tick;
use crate::service;

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct JobView {
    pub id: Uuid,
    pub kind: JobKindView,
    pub callee_id: Uuid,
    pub protocol_version: Option<String>,
    pub reason: String,
    pub status: JobStateView,
    pub attempts: i32,
    /// When it runs next (queued) or ran (otherwise).
    pub run_after: DateTime<Utc>,
    /// The process holding it, and until when.
    pub lease_owner: Option<String>,
    pub lease_until: Option<DateTime<Utc>>,
    pub last_error: Option<String>,
    pub probe_run_id: Option<Uuid>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl From<Job> for JobView {
    fn from(j: Job) -> Self {
        Self {
            id: j.id.0,
            kind: (&j.kind).into(),
            callee_id: j.callee_id.0,
            protocol_version: j.protocol_version.map(|v| v.to_string()),
            reason: j.reason,
            status: (&j.status).into(),
            attempts: j.attempts,
            run_after: j.run_after,
            lease_owner: j.lease_owner,
            lease_until: j.lease_until,
            last_error: j.last_error,
            probe_run_id: j.probe_run_id.map(|r| r.0),
            created_at: j.created_at,
            updated_at: j.updated_at,
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct JobPage {
    /// Newest first.
    pub items: Vec<JobView>,
    /// Pass as `after` for the next page (older jobs); absent on the last page.
    pub next: Option<Uuid>,
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct JobQuery {
    #[param(inline)]
    pub status: Option<JobStatusView>,
    /// Page size, 1 to 200 (default 50).
    #[param(minimum = 1, maximum = 200)]
    pub limit: Option<u32>,
    /// Cursor: the `next` of the previous page.
    pub after: Option<Uuid>,
}

/// Only jobs in this state.
#[derive(Debug, Clone, Copy, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum JobStatusView {
    Queued,
    Running,
    Done,
    Failed,
}

impl From<JobStatusView> for JobStatus {
    fn from(s: JobStatusView) -> Self {
        match s {
            JobStatusView::Queued => JobStatus::Queued,
            JobStatusView::Running => JobStatus::Running,
            JobStatusView::Done => JobStatus::Done,
            JobStatusView::Failed => JobStatus::Failed,
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct StatusView {
    /// This process's name in job leases.
    pub instance: String,
    /// `postgres` or `sqlite`.
    pub database: String,
    pub scheduler: SchedulerView,
    pub queue: QueueView,
    pub read_model: ReadModelView,
}

/// What this process answers decisions and key checks from, and how far it has caught up.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ReadModelView {
    pub callees: usize,
    pub subjects: usize,
    /// Live API keys.
    pub keys: usize,
    /// The last change-feed row applied.
    pub change_seq: i64,
    /// The ledger seq everything applied reflects: what `min_seq` is compared with.
    pub ledger_seq: i64,
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct SchedulerView {
    pub refresh: SweepView,
    pub reprobe: SweepView,
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct SweepView {
    /// The cron expression (6 fields, seconds first), or `off`.
    pub schedule: String,
    /// This process's last tick (absent until the first one).
    pub last_tick_at: Option<DateTime<Utc>>,
    pub last_enqueued: Option<usize>,
    pub last_error: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct QueueView {
    pub queued: i64,
    pub running: i64,
    pub failed: i64,
    /// How long the oldest due job has waited for a worker, in seconds (0 when none waits).
    pub lag_seconds: f64,
}

fn sweep(schedule: &str, tick: Option<Tick>) -> SweepView {
    SweepView {
        schedule: schedule.to_string(),
        last_tick_at: tick.as_ref().map(|t| t.at),
        last_enqueued: tick.as_ref().map(|t| t.enqueued),
        last_error: tick.and_then(|t| t.error),
    }
}

/// Jobs of the work queue, newest first.
#[utoipa::path(get, path = "/v1/jobs", tag = "operations",
    security(("bearer" = ["admin"])), params(JobQuery),
    responses(
        (status = 401, description = "No valid API key", body = ErrorBody),
        (status = 403, description = "The key's role is not enough", body = ErrorBody),
        (status = 200, description = "Jobs", body = JobPage),
        (status = 400, description = "Bad parameters", body = ErrorBody),
    ))]
pub(crate) async fn list_jobs(
    State(app): State<ApiState>,
    OriginalUri(uri): OriginalUri,
    Query(q): Query<JobQuery>,
) -> Result<Paged<JobPage>, ApiError> {
    let limit = page_size(q.limit)?;
    let status = q.status.map(JobStatus::from);
    let jobs =
        service::status::jobs(&app.services.store, status, q.after.map(JobId), limit).await?;
    let next = next_cursor(&jobs, limit, |j| j.id.0);
    let page = JobPage {
        items: jobs.into_iter().map(Into::into).collect(),
        next,
    };
    Ok(Paged::new(&uri, page, next))
}

/// The scheduler's last ticks in this process and the queue's lag.
#[utoipa::path(get, path = "/v1/status", tag = "operations",
    security(("bearer" = ["reader"])),
    responses(
        (status = 401, description = "No valid API key", body = ErrorBody),
        (status = 403, description = "The key's role is not enough", body = ErrorBody),(status = 200, description = "Status", body = StatusView)))]
pub(crate) async fn get_status(State(app): State<ApiState>) -> Result<Json<StatusView>, ApiError> {
    Ok(Json(status(&app).await?))
}

pub(crate) async fn status(app: &ApiState) -> Result<StatusView, ApiError> {
    let now = app.services.now();
    let stats = service::status::queue(&app.services.store, now).await?;
    Ok(StatusView {
        instance: app.instance.clone(),
        database: service::status::backend(&app.services.store).to_string(),
        scheduler: SchedulerView {
            refresh: sweep(&app.schedule.refresh.to_string(), app.ticks.last_refresh()),
            reprobe: sweep(&app.schedule.reprobe.to_string(), app.ticks.last_reprobe()),
        },
        queue: QueueView {
            queued: stats.queued,
            running: stats.running,
            failed: stats.failed,
            lag_seconds: stats
                .oldest_due
                .map_or(0.0, |t| (now - t).num_milliseconds().max(0) as f64 / 1000.0),
        },
        read_model: {
            let model = app.services.view.stats();
            ReadModelView {
                callees: model.callees,
                subjects: model.subjects,
                keys: model.live_keys,
                change_seq: model.applied.change_seq,
                ledger_seq: model.applied.ledger_seq,
            }
        },
    })
}
