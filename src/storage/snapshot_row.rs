//! A card snapshot as a row of `card_snapshots`: its columns, and the insert shared by
//! registration, refreshes and finished probe runs (which keep the extended card they
//! fetched).

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::StoreError;
use crate::domain::card::{Assessment, CardSnapshot, SnapshotSource};

#[derive(sqlx::FromRow)]
pub(super) struct SnapshotRow {
    id: Uuid,
    callee_id: Uuid,
    fetched_at: DateTime<Utc>,
    url: String,
    sha256: String,
    raw: Vec<u8>,
    etag: Option<String>,
    last_modified: Option<String>,
    assessment: String,
    kind: String,
    probe_run_id: Option<Uuid>,
    raw_pruned_at: Option<DateTime<Utc>>,
}

impl TryFrom<SnapshotRow> for CardSnapshot {
    type Error = StoreError;
    fn try_from(row: SnapshotRow) -> Result<Self, StoreError> {
        Ok(CardSnapshot {
            id: row.id.into(),
            callee_id: row.callee_id.into(),
            fetched_at: row.fetched_at,
            url: row.url,
            sha256: row.sha256,
            raw: row.raw,
            etag: row.etag,
            last_modified: row.last_modified,
            assessment: serde_json::from_str::<Assessment>(&row.assessment)
                .map_err(StoreError::corrupt)?,
            source: match (row.kind.as_str(), row.probe_run_id) {
                ("public", _) => SnapshotSource::Public,
                ("extended", Some(run)) => SnapshotSource::Extended {
                    probe_run_id: run.into(),
                },
                (kind, _) => return Err(StoreError::corrupt(format!("snapshot kind {kind}"))),
            },
            raw_pruned_at: row.raw_pruned_at,
        })
    }
}

macro_rules! snapshot_columns {
    () => {
        "id, callee_id, fetched_at, url, sha256, raw, etag, last_modified, assessment, kind, \
         probe_run_id, raw_pruned_at"
    };
}

/// The columns of a listing: everything but the raw bytes, which can be large.
macro_rules! snapshot_summary_columns {
    () => {
        "id, callee_id, fetched_at, url, sha256, substr(raw, 1, 0) as raw, etag, last_modified, \
         assessment, kind, probe_run_id, raw_pruned_at"
    };
}

pub(super) fn insert_snapshot_query<DB>(
    s: &CardSnapshot,
) -> sqlx::query::Query<'static, DB, <DB as sqlx::Database>::Arguments>
where
    DB: sqlx::Database,
    Uuid: for<'q> sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    String: for<'q> sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    Option<String>: for<'q> sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    Option<Uuid>: for<'q> sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    Vec<u8>: for<'q> sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    bool: for<'q> sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    DateTime<Utc>: for<'q> sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    Option<DateTime<Utc>>: for<'q> sqlx::Encode<'q, DB> + sqlx::Type<DB>,
{
    sqlx::query(concat!(
        "insert into card_snapshots (",
        snapshot_columns!(),
        ", trusted) values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)"
    ))
    .bind(s.id.0)
    .bind(s.callee_id.0)
    .bind(s.fetched_at)
    .bind(s.url.clone())
    .bind(s.sha256.clone())
    .bind(s.raw.clone())
    .bind(s.etag.clone())
    .bind(s.last_modified.clone())
    .bind(serde_json::to_string(&s.assessment).expect("assessments serialize"))
    .bind(s.source.kind().to_string())
    .bind(s.source.probe_run_id().map(|run| run.0))
    .bind(s.raw_pruned_at)
    .bind(s.assessment.trusted)
}

pub(super) use {snapshot_columns, snapshot_summary_columns};
