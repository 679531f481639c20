//! Re-judging a subject's newest finished run from its stored observations under the current
//! rulebook: what changes, and the ledger events that say so. Nothing is probed, nothing is
//! rewritten, and nothing is promoted: a subject whose evidence now passes gets a fresh probe,
//! which alone can promote it.

use std::collections::BTreeSet;

use super::Rulebook;
use crate::capability::CapabilityOutcome;
use crate::demotion::DemotionClass;
use crate::gate::{GateState, SubjectState};
use crate::ledger::EventBody;
use crate::probe::{Judgement, ProbeRun};

/// What judging a run again changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejudgement {
    pub passed_before: bool,
    pub passed_now: bool,
    /// What blocks the verdict now (empty when it passes).
    pub reasons: Vec<String>,
    /// The demotion it causes, on a `lifecycle-trusted` subject.
    pub demotes: Option<DemotionClass>,
    /// Its evidence passes now where it did not: only a fresh probe may promote it.
    pub reprobe: bool,
    /// The events to append, in order: `rejudged`, then the demotion if any.
    pub events: Vec<EventBody>,
}

/// Where a run's verdict stands: the rulebook it was last judged under (its own, or a
/// re-judgement's) and whether it passed there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Standing {
    pub rulebook: Option<String>,
    pub passed: bool,
}

/// Judges `run` (the subject's newest finished run, with its evidence) again under `book`.
/// `last` is the newest re-judgement of this run already in the ledger, if any (its
/// `to_rulebook` and `passed_now`). `None` when the run already stands under `book`, holds no
/// observations (it predates them), or its outcome does not change.
pub fn rejudge(
    state: &SubjectState,
    run: &ProbeRun,
    last: Option<Standing>,
    book: &Rulebook,
) -> Option<Rejudgement> {
    let judged = run.judgement()?;
    let standing = last.unwrap_or_else(|| Standing {
        rulebook: judged.verdict.rulebook.clone(),
        passed: judged.verdict.passed,
    });
    if standing.rulebook.as_deref() == Some(book.version()) {
        return None;
    }
    let observations = &run.evidence()?.observations;
    let now = book.judge(observations, run.protocol_version, &advertised(judged));
    let classes = |j: &Judgement| -> BTreeSet<DemotionClass> {
        j.verdict.triggers.iter().map(|(class, _)| *class).collect()
    };
    let same_triggers =
        standing.rulebook != judged.verdict.rulebook || classes(&now) == classes(judged);
    if now.verdict.passed == standing.passed && same_triggers {
        return None;
    }
    let passed_before = standing.passed;
    let passed_now = now.verdict.passed;
    let from = standing
        .rulebook
        .clone()
        .unwrap_or_else(|| "unversioned".into());
    let mut events = vec![EventBody::Rejudged {
        probe_run_id: run.id,
        from_rulebook: standing.rulebook,
        to_rulebook: book.version().to_string(),
        passed_before,
        passed_now,
        reasons: now.verdict.reasons.clone(),
    }];
    // A trusted subject whose evidence now fails is demoted: by the class a finding fires,
    // else (a rule that now blocks without a trigger of its own) as `policy`.
    let demotes = (state.gate == GateState::LifecycleTrusted && !passed_now).then(|| {
        now.verdict
            .triggers
            .first()
            .map_or(DemotionClass::Policy, |(class, _)| *class)
    });
    if let Some(class) = demotes {
        let why = now
            .verdict
            .triggers
            .first()
            .map(|(_, reason)| reason.as_str())
            .or(now.verdict.reasons.first().map(String::as_str))
            .unwrap_or("the verdict no longer passes");
        events.push(EventBody::Demoted {
            class,
            probe_run_id: Some(run.id),
            report_id: None,
            reason: format!(
                "re-judged from stored evidence under rulebook {} (was {from}): {why}",
                book.version()
            ),
            rulebook: Some(book.version().to_string()),
        });
    }
    Some(Rejudgement {
        passed_before,
        passed_now,
        reasons: now.verdict.reasons,
        demotes,
        reprobe: passed_now && !passed_before,
        events,
    })
}

/// The capabilities the run's interface advertised: every one its judgement gave an outcome
/// other than not-advertised.
fn advertised(judgement: &Judgement) -> BTreeSet<crate::capability::Capability> {
    judgement
        .capabilities
        .iter()
        .filter(|(_, outcome)| **outcome != CapabilityOutcome::NotAdvertised)
        .map(|(cap, _)| *cap)
        .collect()
}

#[cfg(test)]
mod tests;
