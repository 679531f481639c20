//! Probe runs as stored: their rows, how a run's state is read back from them, and the column
//! lists the queries share (macros, so that each query's text stays one literal).

use chrono::{DateTime, Utc};
use serde_json::Value;
use uuid::Uuid;

use crate::domain::decision::{JudgementFacts, ProbeFacts};
use crate::domain::gate::ProbeStart;
use crate::domain::ids::CalleeId;
use crate::domain::probe::{
    Judgement, Observations, ProbeRun, RunEvidence, RunStart, RunState, RunStatus,
};
use crate::domain::version::ProtocolVersion;
use crate::storage::StoreError;

#[derive(sqlx::FromRow)]
pub(super) struct RunRow {
    pub(super) id: Uuid,
    pub(super) callee_id: Uuid,
    pub(super) protocol_version: String,
    pub(super) status: String,
    pub(super) reason: String,
    pub(super) requested_by: String,
    pub(super) created_at: DateTime<Utc>,
    pub(super) started_at: Option<DateTime<Utc>>,
    pub(super) finished_at: Option<DateTime<Utc>>,
    pub(super) interface_url: Option<String>,
    pub(super) wire: Option<String>,
    pub(super) push_token: String,
    pub(super) binding: Option<String>,
    pub(super) passed: Option<bool>,
    pub(super) judgement: Option<String>,
    pub(super) observations: Option<String>,
    pub(super) transcript: Option<String>,
    pub(super) error: Option<String>,
    pub(super) ledger_seqs: Option<String>,
    pub(super) start_seq: Option<i64>,
    pub(super) transcript_pruned_at: Option<DateTime<Utc>>,
}

pub(super) fn json<T: serde::de::DeserializeOwned>(
    text: Option<String>,
) -> Result<Option<T>, StoreError> {
    text.map(|t| serde_json::from_str(&t).map_err(StoreError::corrupt))
        .transpose()
}

impl TryFrom<RunRow> for ProbeRun {
    type Error = StoreError;
    fn try_from(r: RunRow) -> Result<Self, StoreError> {
        let state = run_state(&r)?;
        Ok(ProbeRun {
            id: r.id.into(),
            callee_id: r.callee_id.into(),
            protocol_version: ProtocolVersion::parse_exact(&r.protocol_version)
                .map_err(StoreError::corrupt)?,
            reason: r.reason,
            requested_by: r.requested_by,
            created_at: r.created_at,
            push_token: r.push_token,
            binding: r
                .binding
                .as_deref()
                .map(str::parse)
                .transpose()
                .map_err(StoreError::corrupt)?,
            state,
            ledger_seqs: json::<Vec<i64>>(r.ledger_seqs)?.unwrap_or_default(),
        })
    }
}

/// The run's state from its columns; a row whose columns do not fit its status is corrupt.
pub(super) fn run_state(r: &RunRow) -> Result<RunState, StoreError> {
    let status = RunStatus::parse(&r.status)
        .ok_or_else(|| StoreError::corrupt(format!("run status {}", r.status)))?;
    let missing =
        |what: &str| StoreError::corrupt(format!("a {} run without its {what}", r.status));
    let start = match (&r.started_at, &r.interface_url, &r.wire) {
        (Some(at), Some(url), Some(wire)) => Some(RunStart {
            at: *at,
            interface_url: url.clone(),
            wire: wire.clone(),
            seq: r.start_seq,
        }),
        _ => None,
    };
    Ok(match status {
        RunStatus::Queued => RunState::Queued,
        RunStatus::Running => RunState::Running(start.ok_or_else(|| missing("start"))?),
        RunStatus::Finished => {
            let evidence = match (
                json::<Observations>(r.observations.clone())?,
                json::<Value>(r.transcript.clone())?,
            ) {
                (Some(observations), Some(transcript)) => Some(Box::new(RunEvidence {
                    observations,
                    transcript,
                    transcript_pruned_at: None,
                })),
                // Retention took the exchanges; what was observed stays.
                (Some(observations), None) if r.transcript_pruned_at.is_some() => {
                    Some(Box::new(RunEvidence {
                        observations,
                        transcript: Value::Array(Vec::new()),
                        transcript_pruned_at: r.transcript_pruned_at,
                    }))
                }
                _ => None,
            };
            let judgement =
                json::<Judgement>(r.judgement.clone())?.ok_or_else(|| missing("judgement"))?;
            // `passed` is stored beside the judgement for queries; the two must agree.
            if r.passed != Some(judgement.verdict.passed) {
                return Err(StoreError::corrupt(
                    "a finished run whose passed and verdict disagree",
                ));
            }
            RunState::Finished {
                start: start.ok_or_else(|| missing("start"))?,
                finished_at: r.finished_at.ok_or_else(|| missing("end"))?,
                judgement: Box::new(judgement),
                evidence,
            }
        }
        RunStatus::Aborted => RunState::Aborted {
            start,
            finished_at: r.finished_at.ok_or_else(|| missing("end"))?,
            reason: r.error.clone().unwrap_or_default(),
        },
    })
}

/// A finished run as decisions read it.
#[derive(sqlx::FromRow)]
pub(super) struct FactsRow {
    pub(super) id: Uuid,
    pub(super) callee_id: Uuid,
    pub(super) protocol_version: String,
    pub(super) started_at: Option<DateTime<Utc>>,
    pub(super) start_seq: Option<i64>,
    pub(super) facts: Option<String>,
}

impl TryFrom<FactsRow> for (CalleeId, ProtocolVersion, ProbeFacts) {
    type Error = StoreError;
    fn try_from(r: FactsRow) -> Result<Self, StoreError> {
        let corrupt = |what: &str| StoreError::corrupt(format!("finished run {} {what}", r.id));
        let facts: JudgementFacts = serde_json::from_str(
            r.facts
                .as_deref()
                .ok_or_else(|| corrupt("has no judgement"))?,
        )
        .map_err(StoreError::corrupt)?;
        let start = ProbeStart {
            head_seq: r.start_seq,
            at: r.started_at.ok_or_else(|| corrupt("has no start"))?,
        };
        let version =
            ProtocolVersion::parse_exact(&r.protocol_version).map_err(StoreError::corrupt)?;
        Ok((
            r.callee_id.into(),
            version,
            facts.of_run(r.id.into(), start),
        ))
    }
}

macro_rules! run_columns {
    () => {
        "id, callee_id, protocol_version, status, reason, requested_by, created_at, started_at, \
         finished_at, interface_url, wire, push_token, binding, passed, judgement, observations, \
         transcript, error, ledger_seqs, start_seq, transcript_pruned_at"
    };
}

/// Listing columns: the heavy evidence (observations, transcript) is left out.
macro_rules! run_summary_columns {
    () => {
        "id, callee_id, protocol_version, status, reason, requested_by, created_at, started_at, \
         finished_at, interface_url, wire, push_token, binding, passed, judgement, \
         null as observations, null as transcript, error, ledger_seqs, start_seq, \
         transcript_pruned_at"
    };
}
