use chrono::{TimeZone, Utc};

use super::*;
use crate::ids::{CalleeId, ProbeRunId, SnapshotId};
use crate::probe::checks::evaluate;
use crate::probe::{Observations, RunEvidence, RunStart, RunState};
use crate::version::ProtocolVersion;

fn subject(gate: GateState) -> SubjectState {
    let appeared = EventBody::VersionAppeared {
        snapshot_id: SnapshotId::new(),
        advertised: Vec::new(),
    };
    let at = Utc.timestamp_opt(1_700_000_000, 0).unwrap();
    let mut s = SubjectState::start(&appeared, at, 1).unwrap();
    s.gate = gate;
    s
}

/// A finished run whose stored verdict said `passed` (under no versioned rulebook), over
/// observations in which nothing happened: judged again, they fail under any rulebook.
fn run(passed: bool, evidence: bool) -> ProbeRun {
    let v1 = ProtocolVersion::new(1, 0);
    let mut judgement = evaluate(&Observations::default(), v1, &Default::default());
    judgement.verdict.passed = passed;
    judgement.verdict.reasons.clear();
    judgement.verdict.triggers.clear();
    let at = Utc.timestamp_opt(1_700_000_000, 0).unwrap();
    ProbeRun {
        id: ProbeRunId::new(),
        callee_id: CalleeId::new(),
        protocol_version: v1,
        reason: "test".into(),
        requested_by: "system".into(),
        created_at: at,
        push_token: "t".into(),
        binding: None,
        state: RunState::Finished {
            start: RunStart {
                at,
                interface_url: "http://agent.example/a2a".into(),
                wire: "json-rpc-v1".into(),
                seq: Some(1),
            },
            finished_at: at,
            judgement: Box::new(judgement),
            evidence: evidence.then(|| {
                Box::new(RunEvidence {
                    observations: Observations::default(),
                    transcript: serde_json::Value::Null,
                    transcript_pruned_at: None,
                })
            }),
        },
        ledger_seqs: Vec::new(),
    }
}

#[test]
fn a_trusted_subject_whose_evidence_now_fails_is_demoted_citing_both_rulebooks() {
    let book = Rulebook::trust_model();
    let run = run(true, true);
    let r = rejudge(&subject(GateState::LifecycleTrusted), &run, None, &book).unwrap();
    assert!(r.passed_before && !r.passed_now && !r.reprobe);
    assert_eq!(r.events.len(), 2, "{:#?}", r.events);
    let EventBody::Rejudged {
        probe_run_id,
        from_rulebook,
        to_rulebook,
        ..
    } = &r.events[0]
    else {
        panic!("{:?}", r.events[0]);
    };
    assert_eq!((*probe_run_id, from_rulebook), (run.id, &None));
    assert_eq!(to_rulebook, book.version());
    let EventBody::Demoted {
        reason, rulebook, ..
    } = &r.events[1]
    else {
        panic!("{:?}", r.events[1]);
    };
    assert!(
        reason.contains(book.version()) && reason.contains("was unversioned"),
        "{reason}"
    );
    assert_eq!(rulebook.as_deref(), Some(book.version()));
}

#[test]
fn an_untrusted_subject_is_only_rejudged_and_nothing_is_judged_twice() {
    let book = Rulebook::trust_model();
    let card_trusted = rejudge(
        &subject(GateState::CardTrusted),
        &run(true, true),
        None,
        &book,
    );
    let r = card_trusted.unwrap();
    assert_eq!((r.events.len(), r.demotes), (1, None));
    // Already re-judged under this rulebook: nothing to do.
    let under_book = Standing {
        rulebook: Some(book.version().into()),
        passed: false,
    };
    let trusted = subject(GateState::LifecycleTrusted);
    assert!(rejudge(&trusted, &run(true, true), Some(under_book), &book).is_none());
    // Re-judged as failing under another rulebook, and failing still: no change to record.
    let failing_elsewhere = Standing {
        rulebook: Some("another".into()),
        passed: false,
    };
    assert!(rejudge(&trusted, &run(true, true), Some(failing_elsewhere), &book).is_none());
    // A run whose evidence is gone cannot be judged again.
    assert!(rejudge(&trusted, &run(true, false), None, &book).is_none());
}
