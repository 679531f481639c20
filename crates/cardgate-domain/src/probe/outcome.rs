//! What a finished probe cycle does to the subject's gate (docs/trust-model.md): a passing cycle
//! promotes `card-trusted`, and re-promotes `demoted` only if it started after the demotion in
//! ledger order;
//! a demotion trigger demotes a `lifecycle-trusted` subject. Everything is recorded either way.

use super::Judgement;
use crate::gate::{GateState, ProbeStart, SubjectState};
use crate::ids::ProbeRunId;
use crate::ledger::EventBody;

/// The ledger events a finished run appends, in order.
pub fn ledger_events(
    state: &SubjectState,
    run: ProbeRunId,
    start: &ProbeStart,
    judgement: &Judgement,
) -> Vec<EventBody> {
    let failed: Vec<String> = judgement
        .findings
        .iter()
        .filter(|f| f.status == super::FindingStatus::Fail)
        .map(|f| f.code.to_string())
        .collect();
    let mut events = vec![EventBody::ProbeFinished {
        probe_run_id: run,
        started_at: start.at,
        start_seq: start.head_seq,
        passed: judgement.verdict.passed,
        failed_findings: failed,
        not_exercised: judgement.verdict.unexercised.clone(),
        rulebook: judgement.verdict.rulebook.clone(),
    }];
    let promotable = match state.gate {
        GateState::CardTrusted => true,
        GateState::Demoted { .. } => state.fresh_for_repromotion(start),
        GateState::LifecycleTrusted => false,
    };
    if judgement.verdict.passed && promotable {
        events.push(EventBody::Promoted {
            probe_run_id: run,
            probe_started_at: start.at,
            probe_start_seq: start.head_seq,
            rulebook: judgement.verdict.rulebook.clone(),
        });
    }
    if state.gate != GateState::CardTrusted {
        for (class, reason) in &judgement.verdict.triggers {
            let known = state.gate.demoted_for(*class);
            if !known {
                events.push(EventBody::Demoted {
                    class: *class,
                    probe_run_id: Some(run),
                    report_id: None,
                    reason: reason.clone(),
                    rulebook: judgement.verdict.rulebook.clone(),
                });
            }
        }
    }
    events
}

#[cfg(test)]
mod tests;
