//! Reading probe runs back: one, a callee's page, and the newest facts, starts and rulebooks
//! the read model, the scheduler and re-judging need.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::rows::{FactsRow, RunRow};
use crate::domain::decision::ProbeFacts;
use crate::domain::ids::{CalleeId, ProbeRunId};
use crate::domain::probe::ProbeRun;
use crate::domain::time::Timestamp;
use crate::domain::version::ProtocolVersion;
use crate::storage::{Db, Store, StoreError, dispatch};

impl Store {
    pub async fn probe_run(&self, id: ProbeRunId) -> Result<ProbeRun, StoreError> {
        let row: RunRow = dispatch!(self, |pool| {
            sqlx::query_as(concat!(
                "select ",
                run_columns!(),
                " from probe_runs where id = $1"
            ))
            .bind(id.0)
            .fetch_one(pool)
            .await
        })?;
        row.try_into()
    }

    /// A callee's runs, newest first, without the heavy evidence.
    pub async fn probe_runs(
        &self,
        callee_id: CalleeId,
        before: Option<ProbeRunId>,
        limit: u32,
    ) -> Result<Vec<ProbeRun>, StoreError> {
        let before = before.map_or(Uuid::max(), |id| id.0);
        let rows: Vec<RunRow> = dispatch!(self, |pool| {
            sqlx::query_as(concat!(
                "select ",
                run_summary_columns!(),
                " from probe_runs where callee_id = $1 and id < $2 order by id desc limit $3"
            ))
            .bind(callee_id.0)
            .bind(before)
            .bind(i64::from(limit))
            .fetch_all(pool)
            .await
        })?;
        rows.into_iter().map(TryInto::try_into).collect()
    }

    /// The subject's newest finished run (what decisions read).
    pub async fn latest_finished_probe(
        &self,
        callee_id: CalleeId,
        version: ProtocolVersion,
    ) -> Result<Option<ProbeRun>, StoreError> {
        let row: Option<RunRow> = dispatch!(self, |pool| {
            sqlx::query_as(concat!(
                "select ",
                run_summary_columns!(),
                " from probe_runs where callee_id = $1 and protocol_version = $2 and status = 'finished' \
                 order by start_seq desc nulls last, started_at desc limit 1"
            ))
            .bind(callee_id.0)
            .bind(version.to_string())
            .fetch_optional(pool)
            .await
        })?;
        row.map(TryInto::try_into).transpose()
    }

    /// What decisions read of the newest finished run of every subject of the callees with an
    /// id in `from..=to` (ordered as [`latest_finished_probe`](Self::latest_finished_probe)
    /// orders them): one page of the read model's bulk load. The newest runs are chosen on
    /// their ids alone, then only their compact facts are read.
    pub async fn newest_probe_facts(
        &self,
        from: CalleeId,
        to: CalleeId,
    ) -> Result<Vec<(CalleeId, ProtocolVersion, ProbeFacts)>, StoreError> {
        let rows: Vec<FactsRow> = dispatch!(self, |pool| {
            sqlx::query_as(
                "select id, callee_id, protocol_version, started_at, start_seq, \
                 coalesce(facts, judgement) as facts from probe_runs where id in \
                 (select id from (select id, row_number() over (partition by callee_id, protocol_version \
                  order by start_seq desc nulls last, started_at desc) as newest \
                  from probe_runs where callee_id between $1 and $2 and status = 'finished') as r \
                  where newest = 1)",
            )
            .bind(from.0)
            .bind(to.0)
            .fetch_all(pool)
            .await
        })?;
        rows.into_iter().map(TryInto::try_into).collect()
    }

    /// The newest finished run of every subject of the callees with an id in `from..=to`, and
    /// the rulebook its own verdict names (`None` before rulebooks were versioned): read out of
    /// the judgement by the database, so that re-judging a page parses no judgement it skips.
    pub async fn newest_run_rulebooks(
        &self,
        from: CalleeId,
        to: CalleeId,
    ) -> Result<Vec<(CalleeId, ProtocolVersion, ProbeRunId, Option<String>)>, StoreError> {
        // Chosen as `newest_probe_facts` chooses them.
        macro_rules! newest {
            ($pool:expr, $rulebook:literal) => {
                sqlx::query_as(concat!(
                    "select callee_id, protocol_version, id, ",
                    $rulebook,
                    " from probe_runs where id in \
                     (select id from (select id, row_number() over (partition by callee_id, \
                      protocol_version order by start_seq desc nulls last, started_at desc) \
                      as newest from probe_runs where callee_id between $1 and $2 \
                      and status = 'finished') as r where newest = 1)"
                ))
                .bind(from.0)
                .bind(to.0)
                .fetch_all($pool)
                .await?
            };
        }
        type Row = (Uuid, String, Uuid, Option<String>);
        let rows: Vec<Row> = match &self.db {
            Db::Postgres(pool) => newest!(pool, "judgement::jsonb -> 'verdict' ->> 'rulebook'"),
            Db::Sqlite(pool) => newest!(pool, "json_extract(judgement, '$.verdict.rulebook')"),
        };
        rows.into_iter()
            .map(|(callee, version, run, rulebook)| {
                let version =
                    ProtocolVersion::parse_exact(&version).map_err(StoreError::corrupt)?;
                Ok((CalleeId(callee), version, ProbeRunId(run), rulebook))
            })
            .collect()
    }

    /// The subject's newest run of any status.
    pub async fn latest_probe(
        &self,
        callee_id: CalleeId,
        version: ProtocolVersion,
    ) -> Result<Option<ProbeRun>, StoreError> {
        let row: Option<RunRow> = dispatch!(self, |pool| {
            sqlx::query_as(concat!(
                "select ",
                run_summary_columns!(),
                " from probe_runs where callee_id = $1 and protocol_version = $2 order by id desc limit 1"
            ))
            .bind(callee_id.0)
            .bind(version.to_string())
            .fetch_optional(pool)
            .await
        })?;
        row.map(TryInto::try_into).transpose()
    }

    /// For every subject of the callees with an id in `from..=to` that was ever probed: when
    /// its newest probe run started (or was requested, if it has not started). One query for
    /// the range: what the re-probe sweep reads a page at a time.
    pub async fn newest_probe_starts(
        &self,
        from: CalleeId,
        to: CalleeId,
    ) -> Result<Vec<(CalleeId, ProtocolVersion, Timestamp)>, StoreError> {
        let rows: Vec<(Uuid, String, DateTime<Utc>)> = dispatch!(self, |pool| {
            sqlx::query_as(
                "select callee_id, protocol_version, coalesce(started_at, created_at) from \
                 (select callee_id, protocol_version, started_at, created_at, row_number() over \
                 (partition by callee_id, protocol_version order by id desc) as newest \
                 from probe_runs where callee_id between $1 and $2) as r where newest = 1",
            )
            .bind(from.0)
            .bind(to.0)
            .fetch_all(pool)
            .await
        })?;
        rows.into_iter()
            .map(|(callee, version, at)| {
                let version =
                    ProtocolVersion::parse_exact(&version).map_err(StoreError::corrupt)?;
                Ok((CalleeId(callee), version, at))
            })
            .collect()
    }
}
