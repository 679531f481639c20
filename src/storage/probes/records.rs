//! The finished runs a track record folds (domain::probe::track): each run's finish, verdict
//! and kept contribution, read by the window's index without touching its evidence.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::domain::ids::CalleeId;
use crate::domain::probe::track::{Contribution, RunRecord};
use crate::domain::time::Timestamp;
use crate::domain::version::ProtocolVersion;
use crate::storage::{Store, StoreError, dispatch};

type RecordRow = (Uuid, String, DateTime<Utc>, Option<bool>, Option<String>);

fn record_of(
    (callee, version, finished_at, passed, kept): RecordRow,
) -> Result<(CalleeId, ProtocolVersion, RunRecord), StoreError> {
    let version = ProtocolVersion::parse_exact(&version).map_err(StoreError::corrupt)?;
    let kept: Option<Contribution> = kept
        .map(|text| serde_json::from_str(&text))
        .transpose()
        .map_err(StoreError::corrupt)?;
    let record = RunRecord::new(finished_at, passed.unwrap_or(false), kept);
    Ok((CalleeId(callee), version, record))
}

impl Store {
    /// The finished runs, since `since`, of every subject of the callees with an id in
    /// `from..=to`: what the read model's bulk load folds a page at a time.
    pub async fn run_records_between(
        &self,
        from: CalleeId,
        to: CalleeId,
        since: Timestamp,
    ) -> Result<Vec<(CalleeId, ProtocolVersion, RunRecord)>, StoreError> {
        let rows: Vec<RecordRow> = dispatch!(self, |pool| {
            sqlx::query_as(
                "select callee_id, protocol_version, finished_at, passed, record from probe_runs \
                 where callee_id between $1 and $2 and status = 'finished' and finished_at >= $3",
            )
            .bind(from.0)
            .bind(to.0)
            .bind(since)
            .fetch_all(pool)
            .await
        })?;
        rows.into_iter().map(record_of).collect()
    }
}
