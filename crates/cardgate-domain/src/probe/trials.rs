//! Trials (issue 46): one task is an anecdote. A cycle runs `k` lifecycle tasks at once: the
//! first is the whole cycle (its push, cancel and after-end probes too), the others are the
//! lifecycle task alone, started together with it so that faults which show only when tasks
//! overlap can show. Each trial is judged by the same rules; the cycle passes only if every
//! trial passes, and each finding says in how many trials it failed.
//!
//! Pure: [`merge`] folds the trials' judgements into the cycle's.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{Finding, FindingStatus, Judgement};
use crate::capability::CapabilityOutcome;

/// How a cycle's trials went.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tally {
    /// Trials run.
    pub count: u32,
    /// Trials whose own verdict passed.
    pub clean: u32,
    /// The trials that did not pass, numbered from 1 (trial 1 is the whole cycle).
    pub failed: Vec<u32>,
}

impl Tally {
    /// The tally of a verdict judged before trials existed, or of one trial alone.
    pub fn single(passed: bool) -> Self {
        Self {
            count: 1,
            clean: u32::from(passed),
            failed: if passed { Vec::new() } else { vec![1] },
        }
    }
}

/// Folds the judgements of a cycle's trials (trial 1 first) into the cycle's judgement: a
/// finding fails if it failed in any trial and says in how many, the verdict passes only if
/// every trial's did, its reasons and demotion triggers are every trial's, and its tally
/// counts the clean trials. Trial 1's judgement stands alone when it is the only one.
pub fn merge(trials: Vec<Judgement>) -> Judgement {
    let count = trials.len() as u32;
    let failed: Vec<u32> = (1..=count)
        .zip(&trials)
        .filter(|(_, j)| !j.verdict.passed)
        .map(|(n, _)| n)
        .collect();
    let tally = Tally {
        count,
        clean: count - failed.len() as u32,
        failed,
    };
    let mut trials = trials.into_iter();
    let Some(mut cycle) = trials.next() else {
        return Judgement {
            findings: Vec::new(),
            capabilities: BTreeMap::new(),
            verdict: super::Verdict {
                passed: false,
                reasons: vec!["no trial ran".into()],
                triggers: Vec::new(),
                lifecycle: Err("no trial ran".into()),
                untimestamped: Vec::new(),
                unexercised: None,
                extended_card: None,
                rulebook: None,
                trials: Some(tally),
            },
        };
    };
    let others: Vec<Judgement> = trials.collect();
    if !others.is_empty() {
        for finding in &mut cycle.findings {
            fold_finding(finding, &others, count);
        }
        fold_capabilities(&mut cycle, &others);
        fold_verdict(&mut cycle, &others);
    }
    cycle.verdict.passed = tally.failed.is_empty();
    cycle.verdict.trials = Some(tally);
    cycle
}

/// A finding across trials: failed if any trial failed it (its message says which), else
/// passed if any trial passed it, else not exercised.
fn fold_finding(finding: &mut Finding, others: &[Judgement], count: u32) {
    let same = |j: &Judgement| j.findings.iter().find(|f| f.code == finding.code).cloned();
    let mut failures: Vec<(u32, Finding)> = Vec::new();
    if finding.status == FindingStatus::Fail {
        failures.push((1, finding.clone()));
    }
    let mut passed = finding.status == FindingStatus::Pass;
    for (n, other) in (2..).zip(others) {
        match same(other) {
            Some(f) if f.status == FindingStatus::Fail => failures.push((n, f)),
            Some(f) if f.status == FindingStatus::Pass => passed = true,
            _ => {}
        }
    }
    if let Some((first, failure)) = failures.first() {
        let trials: Vec<String> = failures.iter().map(|(n, _)| n.to_string()).collect();
        finding.status = FindingStatus::Fail;
        finding.trigger = finding.trigger.or(failure.trigger);
        finding.message = format!(
            "failed in {} of {count} trials ({}); trial {first}: {}",
            failures.len(),
            trials.join(", "),
            failure.message
        );
    } else if passed {
        finding.status = FindingStatus::Pass;
    }
}

/// A capability that failed in any trial failed.
fn fold_capabilities(cycle: &mut Judgement, others: &[Judgement]) {
    for (cap, outcome) in &mut cycle.capabilities {
        if matches!(outcome, CapabilityOutcome::Failed { .. }) {
            continue;
        }
        let failed = (2..)
            .zip(others)
            .find_map(|(n, j)| match j.capabilities.get(cap) {
                Some(CapabilityOutcome::Failed { reason }) => Some(format!("trial {n}: {reason}")),
                _ => None,
            });
        if let Some(reason) = failed {
            *outcome = CapabilityOutcome::Failed {
                reason: reason.into(),
            };
        }
    }
}

/// Every trial's reasons, triggers (one per class) and untimestamped transitions, each named
/// by its trial.
fn fold_verdict(cycle: &mut Judgement, others: &[Judgement]) {
    let verdict = &mut cycle.verdict;
    for (n, other) in (2..).zip(others) {
        let theirs = &other.verdict;
        verdict
            .reasons
            .extend(theirs.reasons.iter().map(|r| format!("trial {n}: {r}")));
        for (class, reason) in &theirs.triggers {
            if !verdict.triggers.iter().any(|(c, _)| c == class) {
                verdict
                    .triggers
                    .push((*class, format!("trial {n}: {reason}")));
            }
        }
        verdict.untimestamped.extend(
            theirs
                .untimestamped
                .iter()
                .map(|t| format!("trial {n}: {t}")),
        );
        if verdict.lifecycle.is_ok()
            && let Err(why) = &theirs.lifecycle
        {
            verdict.lifecycle = Err(format!("trial {n}: {why}"));
        }
    }
}
