//! Retention (service::retention): the runs whose transcripts may go, and dropping them.

use std::collections::BTreeSet;

use uuid::Uuid;

use super::rows::json;
use crate::domain::ids::ProbeRunId;
use crate::domain::retention::{Candidate, EVIDENCE_KINDS};
use crate::domain::time::Timestamp;
use crate::storage::{BeginWrite, Store, StoreError, dispatch};

impl Store {
    /// Finished runs past the newest `keep` of their subject that still hold a transcript,
    /// oldest first after the cursor `after`, at most `limit`, with the ledger events each
    /// appended.
    pub async fn runs_past_retention(
        &self,
        keep: u32,
        after: Option<ProbeRunId>,
        limit: u32,
    ) -> Result<Vec<Candidate>, StoreError> {
        let rows: Vec<(Uuid, Option<String>)> = dispatch!(self, |pool| {
            sqlx::query_as(
                "select id, ledger_seqs from (select id, ledger_seqs, \
                 transcript is not null as held, row_number() over \
                 (partition by callee_id, protocol_version order by id desc) as n \
                 from probe_runs where status = 'finished') ranked \
                 where n > $1 and held and id > $3 order by id limit $2",
            )
            .bind(i64::from(keep))
            .bind(i64::from(limit))
            .bind(after.map_or(Uuid::nil(), |id| id.0))
            .fetch_all(pool)
            .await
        })?;
        rows.into_iter()
            .map(|(id, seqs)| {
                Ok(Candidate {
                    run: id.into(),
                    ledger_seqs: json::<Vec<i64>>(seqs)?.unwrap_or_default(),
                })
            })
            .collect()
    }

    /// The seqs of the events in `from..=to` that cite a run as evidence (promotions and
    /// demotions).
    pub async fn evidence_seqs(&self, from: i64, to: i64) -> Result<BTreeSet<i64>, StoreError> {
        let rows: Vec<(i64,)> = dispatch!(self, |pool| {
            sqlx::query_as(
                "select seq from ledger where seq between $1 and $2 and kind in ($3, $4)",
            )
            .bind(from)
            .bind(to)
            .bind(EVIDENCE_KINDS[0])
            .bind(EVIDENCE_KINDS[1])
            .fetch_all(pool)
            .await
        })?;
        Ok(rows.into_iter().map(|(seq,)| seq).collect())
    }

    /// Drops these runs' transcripts (and the raw bytes of the extended cards they fetched),
    /// recording when; returns how many transcripts were dropped.
    pub async fn prune_transcripts(
        &self,
        runs: &[ProbeRunId],
        now: Timestamp,
    ) -> Result<u64, StoreError> {
        dispatch!(self, |pool| {
            let mut tx = pool.begin_write().await?;
            let mut pruned = 0;
            for run in runs {
                pruned += sqlx::query(
                    "update probe_runs set transcript = null, transcript_pruned_at = $2 \
                     where id = $1 and transcript is not null",
                )
                .bind(run.0)
                .bind(now)
                .execute(&mut *tx)
                .await?
                .rows_affected();
                // The extended card it fetched goes with it.
                sqlx::query(
                    "update card_snapshots set raw = $3, raw_pruned_at = $2 \
                     where probe_run_id = $1 and kind = 'extended' and raw_pruned_at is null",
                )
                .bind(run.0)
                .bind(now)
                .bind(Vec::<u8>::new())
                .execute(&mut *tx)
                .await?;
            }
            tx.commit().await?;
            Ok(pruned)
        })
    }
}
