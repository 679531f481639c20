//! Attestations: a subject's trust verdict as a signed in-toto statement
//! ([`crate::domain::attestation`]), made from the store as it stands: the card snapshot the
//! verdict rests on, the newest finished probe run and its findings with the rulebook that
//! judged them, the decisions for the standard postures under the rulebook in force, the ledger event of the subject's last gate change, and a checkpoint
//! signed now that includes it. One is kept for every promotion and demotion.

use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};

use super::trust::decide_from_store;
use super::{Missing, ServiceError, Services, require_callee};
use crate::domain::attestation::AttestationRecord;
use crate::domain::attestation::{Digest, Envelope, ResourceDescriptor, Statement};
use crate::domain::decision::{Dedup, Posture};
use crate::domain::gate::{GateState, Subject};
use crate::domain::ids::CalleeId;
use crate::domain::jcs;
use crate::domain::ledger::EventRecord;
use crate::domain::version::ProtocolVersion;

/// The subject's verdict now, signed, resting on the ledger event of its last gate change.
pub(crate) async fn attest(
    services: &Services,
    callee: CalleeId,
    version: ProtocolVersion,
) -> Result<Envelope, ServiceError> {
    attest_at(services, callee, version, None).await
}

/// Attests each promotion and demotion among `appended` (just committed) and keeps the
/// attestations. A failure is logged, never the caller's: the verdict stands in the ledger,
/// and `GET …/attestation` makes one on request.
///
/// The webhook sender is woken first, and again as each attestation is kept: the deliveries
/// that need none go out while attestations are made (signing one reads the store a dozen
/// times), and a promotion's or demotion's first attempt waits in the claim until its
/// attestation is there.
pub(crate) async fn record(services: &Services, appended: &[(EventRecord, Subject)]) {
    services.wake_deliveries();
    for (event, _) in appended
        .iter()
        .filter(|(e, _)| matches!(e.kind.as_str(), "promoted" | "demoted"))
    {
        if let Err(e) = record_one(services, event).await {
            tracing::warn!(seq = event.seq, error = %e, "attesting a {} event", event.kind);
        }
        services.wake_deliveries();
    }
}

async fn record_one(services: &Services, event: &EventRecord) -> Result<(), ServiceError> {
    let version = ProtocolVersion::parse_exact(&event.protocol_version)
        .map_err(|e| ServiceError::Internal(e.into()))?;
    let envelope = attest_at(services, event.callee_id, version, Some(event.seq)).await?;
    let record = AttestationRecord {
        id: uuid::Uuid::now_v7(),
        callee_id: event.callee_id,
        protocol_version: version,
        seq: event.seq,
        kind: event.kind.clone(),
        envelope,
        created_at: services.now(),
    };
    Ok(services.store.insert_attestation(&record).await?)
}

/// Kept attestations after ledger seq `after`, of one callee or of all.
pub(crate) async fn page(
    services: &Services,
    callee: Option<CalleeId>,
    after: i64,
    limit: u32,
) -> Result<Vec<AttestationRecord>, ServiceError> {
    if let Some(callee) = callee {
        require_callee(&services.store, callee).await?;
    }
    Ok(services.store.attestations(callee, after, limit).await?)
}

/// The verdict signed; it rests on ledger event `seq`, or on the subject's last gate change.
async fn attest_at(
    services: &Services,
    callee: CalleeId,
    version: ProtocolVersion,
    seq: Option<i64>,
) -> Result<Envelope, ServiceError> {
    let store = &services.store;
    let Some(subject) = store.subject(callee, version).await? else {
        require_callee(store, callee).await?;
        let offered = store
            .subjects(callee)
            .await?
            .into_iter()
            .map(|s| s.protocol_version)
            .collect();
        return Err(ServiceError::NotFound(Missing::Subject {
            callee,
            version,
            offered,
        }));
    };
    let snapshot = store
        .latest_snapshot(callee)
        .await?
        .ok_or_else(|| ServiceError::Internal(anyhow::anyhow!("a subject without a card")))?;
    let mut subjects = vec![ResourceDescriptor {
        name: snapshot.url.clone(),
        // The hash stored with the snapshot, of the raw bytes as fetched.
        digest: Digest {
            sha256: snapshot.sha256.clone(),
        },
    }];
    let run = match store.latest_finished_probe(callee, version).await? {
        Some(summary) => Some(store.probe_run(summary.id).await?),
        None => None,
    };
    let mut probe = Value::Null;
    let mut findings = Vec::new();
    if let Some(run) = &run {
        if let Some(evidence) = run.evidence() {
            // JCS bytes: anyone who reads the transcript from the API can recompute it.
            let canonical = jcs::canonicalize(&evidence.transcript)
                .map_err(|e| ServiceError::Internal(e.into()))?;
            subjects.push(ResourceDescriptor {
                name: format!("urn:cardgate:probe-run:{}:transcript", run.id),
                digest: Digest {
                    sha256: hex::encode(Sha256::digest(&canonical)),
                },
            });
        }
        let start = run.start();
        let judged_under = super::standing::standing(store, callee, version)
            .await?
            .and_then(|(id, rulebook)| (id == run.id).then_some(rulebook).flatten());
        probe = json!({
            "id": run.id,
            "rulebook": judged_under,
            "binding": run.binding.map(|b| b.as_str()),
            "wire": start.map(|s| s.wire.as_str()),
            "started_at": start.map(|s| crate::domain::time::format(s.at)),
            "finished_at": run.finished_at().map(crate::domain::time::format),
            "passed": run.passed(),
        });
        if let Some(judgement) = run.judgement() {
            findings = judgement
                .findings
                .iter()
                .map(|f| json!({"code": f.code, "level": f.level, "status": f.status}))
                .collect();
        }
    }
    let mut decisions = Vec::new();
    for dedup in [Dedup::Timestamp, Dedup::None] {
        let posture = Posture {
            caller_version: version,
            dedup,
            requires: Default::default(),
        };
        let decision = decide_from_store(store, callee, &posture).await?;
        decisions.push(json!({
            "posture": {"caller_version": version.to_string(), "dedup": dedup},
            "authoritative": decision.authoritative,
            "conditions": decision.conditions,
        }));
    }
    let change = seq.unwrap_or(subject.last_change.seq);
    let event = super::ledger::events_at(store, callee, &[change])
        .await?
        .into_iter()
        .next()
        .ok_or_else(|| {
            ServiceError::Internal(anyhow::anyhow!("seq {change} is not in the ledger"))
        })?;
    let now = services.now();
    let checkpoint = services.transparency.checkpoint(store, now).await?;
    let trigger = match &subject.state.gate {
        GateState::Demoted { classes, .. } => {
            Value::from(classes.iter().map(|c| c.as_str()).collect::<Vec<_>>())
        }
        _ => Value::Null,
    };
    let predicate = json!({
        "registry": services.transparency.origin(),
        "issued_at": crate::domain::time::format(now),
        "callee_id": callee,
        "protocol_version": version.to_string(),
        "rulebook": services.probe.rulebook.version(),
        "gate_state": subject.gate().as_str(),
        "demotion_classes": trigger,
        "decisions": decisions,
        "probe_run": probe,
        "findings": findings,
        "ledger": {"seq": event.seq, "hash": event.hash, "kind": event.kind},
        "checkpoint": {
            "origin": services.transparency.origin(),
            "tree_size": checkpoint.tree_size,
            "root_hash": base64::Engine::encode(&base64::engine::general_purpose::STANDARD, checkpoint.root_hash),
        },
        "checkpoint_note": checkpoint.note,
    });
    Statement::verdict(subjects, predicate)
        .sign(services.transparency.ring())
        .map_err(|e| ServiceError::Internal(e.into()))
}
