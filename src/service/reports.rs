//! Callers' violation reports: check the evidence, record the report and its reporter, and
//! demote a `lifecycle-trusted` subject (a `card-trusted` one is recorded without a gate move).

use serde_json::Value;

use super::ServiceError;
use super::callees::not_found;
use crate::domain::gate::GateState;
use crate::domain::ids::{CalleeId, ReportId};
use crate::domain::ledger::EventBody;
use crate::domain::report::{self, Trigger};
use crate::domain::time::Timestamp;
use crate::domain::version::ProtocolVersion;
use crate::storage::{Report, Store, StoreError};

pub const MAX_EVIDENCE_BYTES: usize = 32 * 1024;

/// Checks and records a report.
pub async fn submit(
    store: &Store,
    callee_id: CalleeId,
    version: ProtocolVersion,
    trigger: Trigger,
    evidence: Value,
    reporter: &str,
    now: Timestamp,
) -> Result<Report, ServiceError> {
    store
        .callee(callee_id)
        .await
        .map_err(|e| not_found(e, callee_id))?;
    if store.subject(callee_id, version).await?.is_none() {
        return Err(ServiceError::NotFound(format!(
            "callee {callee_id} has no subject {version}"
        )));
    }
    if evidence.to_string().len() > MAX_EVIDENCE_BYTES {
        return Err(ServiceError::Invalid(format!(
            "evidence is larger than {MAX_EVIDENCE_BYTES} bytes"
        )));
    }
    let finding = report::check(trigger, &evidence).map_err(|why| {
        ServiceError::Invalid(format!(
            "the evidence does not show {}: {why}",
            trigger.as_str()
        ))
    })?;
    let class = trigger.class();
    let draft = Report {
        id: ReportId::new(),
        callee_id,
        protocol_version: version,
        trigger: trigger.as_str().to_string(),
        class: class.as_str().to_string(),
        evidence,
        finding: finding.clone(),
        reporter: reporter.to_string(),
        outcome: String::new(),
        created_at: now,
    };
    let (report_id, trigger_text, who) = (draft.id, draft.trigger.clone(), draft.reporter.clone());
    let (stored, _) = store
        .record_report(
            &draft,
            |state| {
                let mut events = vec![EventBody::ReportReceived {
                    report_id,
                    trigger: trigger_text,
                    reporter: who,
                }];
                // Only a lifecycle-trusted subject is demoted; a demoted one gains the class if new.
                let applies = match state.gate {
                    GateState::LifecycleTrusted => true,
                    GateState::Demoted => !state.demotion_classes.contains(&class),
                    GateState::CardTrusted => false,
                };
                if applies {
                    events.push(EventBody::Demoted {
                        class,
                        probe_run_id: None,
                        report_id: Some(report_id),
                        reason: finding,
                    });
                }
                events
            },
            now,
        )
        .await
        .map_err(|e| match e {
            StoreError::NotFound => {
                ServiceError::NotFound(format!("callee {callee_id} has no subject {version}"))
            }
            other => other.into(),
        })?;
    Ok(stored)
}
