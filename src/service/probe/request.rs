//! Requesting a probe: the queued run and the job that will carry it out, refused at once when
//! there is nothing the callee offers to probe.

use super::interface::choose_interface;
use super::push::new_token;
use crate::domain::binding::Binding;
use crate::domain::ids::{CalleeId, ProbeRunId};
use crate::domain::job::{self, Job};
use crate::domain::probe::{ProbeRun, RunState};
use crate::domain::time::Timestamp;
use crate::domain::version::ProtocolVersion;
use crate::service::require_callee;
use crate::service::{Missing, Queued, ServiceError, Services};
use crate::storage::{Store, StoreError};

/// Queues a probe of a subject. `version`: required when the callee offers several;
/// `binding`: probe the interface over that binding instead of the preferred one.
#[allow(clippy::too_many_arguments)]
pub async fn request(
    services: &Services,
    callee_id: CalleeId,
    version: Option<ProtocolVersion>,
    binding: Option<Binding>,
    reason: &str,
    actor: &str,
    now: Timestamp,
) -> Result<ProbeRun, ServiceError> {
    let store = &services.store;
    require_callee(store, callee_id).await?;
    let subjects = store.subjects(callee_id).await?;
    let live: Vec<_> = subjects.iter().filter(|s| !s.state.withdrawn).collect();
    let subject = match version {
        Some(v) => subjects
            .iter()
            .find(|s| s.protocol_version == v)
            .ok_or_else(|| {
                ServiceError::NotFound(Missing::Subject {
                    callee: callee_id,
                    version: v,
                    offered: live.iter().map(|s| s.protocol_version).collect(),
                })
            })?,
        // Unnamed: the newest version the card offers, the one a new caller would speak.
        None => live
            .iter()
            .max_by_key(|s| s.protocol_version)
            .copied()
            .ok_or_else(|| {
                ServiceError::Conflict("the card offers no protocol version to probe".into())
            })?,
    };
    if subject.state.withdrawn {
        return Err(ServiceError::Conflict(format!(
            "the card no longer offers {}",
            subject.protocol_version
        )));
    }
    if let Some(reason) = &subject.state.card_untrusted {
        return Err(ServiceError::Conflict(format!(
            "the callee's card is untrusted ({reason}); refresh it first"
        )));
    }
    let version = subject.protocol_version;
    if let Some(wanted) = binding {
        // Refused now rather than queued to fail: the newest card must offer it.
        let card = store
            .latest_snapshot(callee_id)
            .await?
            .filter(|s| s.assessment.trusted)
            .and_then(|s| s.assessment.card);
        if let Some(card) = card {
            choose_interface(&card, version, Some(wanted)).map_err(ServiceError::Conflict)?;
        }
    }
    let (mut run, job) = probe_request(callee_id, version, reason, actor, now);
    run.binding = binding;
    let run = enqueue(store, run, job).await?;
    services.committed(Queued::Jobs).await;
    Ok(run)
}

/// Creates the queued run and its job; `Conflict` naming the active run if there is one.
pub async fn enqueue_probe(
    store: &Store,
    callee_id: CalleeId,
    version: ProtocolVersion,
    reason: &str,
    actor: &str,
    now: Timestamp,
) -> Result<ProbeRun, ServiceError> {
    let (run, job) = probe_request(callee_id, version, reason, actor, now);
    enqueue(store, run, job).await
}

/// As [`enqueue_probe`], with the job due at `run_after` rather than now (a sweep spreads its
/// probes over its interval).
pub async fn enqueue_probe_after(
    store: &Store,
    callee_id: CalleeId,
    version: ProtocolVersion,
    reason: &str,
    now: Timestamp,
    run_after: Timestamp,
) -> Result<ProbeRun, ServiceError> {
    let (run, mut job) = probe_request(callee_id, version, reason, "scheduler", now);
    job.run_after = run_after;
    enqueue(store, run, job).await
}

async fn enqueue(store: &Store, run: ProbeRun, job: Job) -> Result<ProbeRun, ServiceError> {
    let version = run.protocol_version;
    match store.request_probe(&run, &job).await {
        Ok(()) => Ok(run),
        Err(StoreError::Conflict(_)) => {
            let active = store
                .active_job(&job.dedup_key)
                .await?
                .and_then(|j| j.probe_run_id);
            Err(ServiceError::Conflict(match active {
                Some(id) => format!("probe run {id} is already queued or running for {version}"),
                None => format!("a probe is already queued or running for {version}"),
            }))
        }
        Err(e) => Err(e.into()),
    }
}

/// A queued probe run of the subject and the job that will carry it out.
pub fn probe_request(
    callee_id: CalleeId,
    version: ProtocolVersion,
    reason: &str,
    actor: &str,
    now: Timestamp,
) -> (ProbeRun, Job) {
    let run = queued_run(callee_id, version, reason, actor, now);
    let job = job::probe_job(callee_id, version, run.id, reason, now);
    (run, job)
}

pub(super) fn queued_run(
    callee_id: CalleeId,
    version: ProtocolVersion,
    reason: &str,
    actor: &str,
    now: Timestamp,
) -> ProbeRun {
    ProbeRun {
        id: ProbeRunId::new(),
        callee_id,
        protocol_version: version,
        reason: reason.to_string(),
        requested_by: actor.to_string(),
        created_at: now,
        push_token: new_token(),
        binding: None,
        state: RunState::Queued,
        ledger_seqs: Vec::new(),
    }
}
