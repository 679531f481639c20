//! Callers' violation reports, recorded with the ledger events they cause.

use chrono::{DateTime, Utc};

use uuid::Uuid;

use super::changes::{Changed, RecordChange};
use super::ledger::AppendEvents;
use super::lock::LockLedger;
use super::{BeginWrite, Store, StoreError, dispatch};
use crate::domain::demotion::DemotionClass;
use crate::domain::gate::Subject;
use crate::domain::gate::SubjectState;
use crate::domain::ids::{CalleeId, ReportId};
use crate::domain::ledger::{EventRecord, NewEvent};
use crate::domain::report::{self, Report, ReportOutcome, Trigger};
use crate::domain::time::Timestamp;
use crate::domain::version::ProtocolVersion;

#[derive(sqlx::FromRow)]
struct ReportRow {
    id: Uuid,
    callee_id: Uuid,
    protocol_version: String,
    trigger: String,
    class: String,
    evidence: String,
    finding: String,
    reporter: String,
    outcome: String,
    created_at: DateTime<Utc>,
}

impl TryFrom<ReportRow> for Report {
    type Error = StoreError;
    fn try_from(r: ReportRow) -> Result<Self, StoreError> {
        Ok(Report {
            id: r.id.into(),
            callee_id: r.callee_id.into(),
            protocol_version: ProtocolVersion::parse_exact(&r.protocol_version)
                .map_err(StoreError::corrupt)?,
            trigger: Trigger::parse(&r.trigger)
                .ok_or_else(|| StoreError::corrupt(format!("report trigger {:?}", r.trigger)))?,
            class: DemotionClass::parse(&r.class)
                .ok_or_else(|| StoreError::corrupt(format!("report class {:?}", r.class)))?,
            evidence: serde_json::from_str(&r.evidence).map_err(StoreError::corrupt)?,
            finding: r.finding,
            reporter: r.reporter,
            outcome: ReportOutcome::parse(&r.outcome)
                .ok_or_else(|| StoreError::corrupt(format!("report outcome {:?}", r.outcome)))?,
            created_at: r.created_at,
        })
    }
}

impl Store {
    /// Records a checked report with the events the domain's report policy derives from the
    /// subject's state as of this transaction (under the ledger lock, so no other write moves
    /// the gate in between). The stored report carries the policy's outcome.
    pub async fn record_report(
        &self,
        report: &Report,
        now: Timestamp,
    ) -> Result<(Report, Vec<(EventRecord, Subject)>), StoreError> {
        dispatch!(self, |pool| {
            let mut tx = pool.begin_write().await?;
            tx.lock_ledger().await?;
            let state: Option<(String,)> = sqlx::query_as(
                "select state from subjects where callee_id = $1 and protocol_version = $2",
            )
            .bind(report.callee_id.0)
            .bind(report.protocol_version.to_string())
            .fetch_optional(&mut *tx)
            .await?;
            let state: SubjectState = serde_json::from_str(&state.ok_or(StoreError::NotFound)?.0)
                .map_err(StoreError::corrupt)?;
            let (bodies, outcome) = report::consequences(report, &state);
            let events: Vec<NewEvent> = bodies
                .into_iter()
                .map(|body| NewEvent {
                    callee_id: report.callee_id,
                    protocol_version: report.protocol_version,
                    body,
                    actor: report.reporter.clone(),
                })
                .collect();
            let stored = Report {
                outcome,
                ..report.clone()
            };
            sqlx::query(
                "insert into reports (id, callee_id, protocol_version, trigger, class, evidence, finding, \
                 reporter, outcome, created_at) values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
            )
            .bind(stored.id.0)
            .bind(stored.callee_id.0)
            .bind(stored.protocol_version.to_string())
            .bind(stored.trigger.as_str())
            .bind(stored.class.as_str())
            .bind(stored.evidence.to_string())
            .bind(&stored.finding)
            .bind(&stored.reporter)
            .bind(stored.outcome.as_str())
            .bind(stored.created_at)
            .execute(&mut *tx)
            .await?;
            let (appended, leased) = tx
                .append_events(&events, now, self.lessee(now).as_ref())
                .await?;
            if !appended.is_empty() {
                tx.record_change(Changed::Callee(stored.callee_id), now)
                    .await?;
            }
            self.commit_handing_off(tx, leased).await?;
            Ok((stored, appended))
        })
    }

    /// A callee's reports, newest first.
    pub async fn reports(
        &self,
        callee_id: CalleeId,
        before: Option<ReportId>,
        limit: u32,
    ) -> Result<Vec<Report>, StoreError> {
        let before = before.map_or(Uuid::max(), |id| id.0);
        let rows: Vec<ReportRow> = dispatch!(self, |pool| {
            sqlx::query_as(
                "select id, callee_id, protocol_version, trigger, class, evidence, finding, reporter, outcome, \
                 created_at from reports where callee_id = $1 and id < $2 order by id desc limit $3",
            )
            .bind(callee_id.0)
            .bind(before)
            .bind(i64::from(limit))
            .fetch_all(pool)
            .await
        })?;
        rows.into_iter().map(TryInto::try_into).collect()
    }
}
