//! A cycle's trials and latency as `cardgate probe` reports them (issue 46): in `--json`,
//! `trials` (`{"count", "clean", "failed"}`) and `latency` (per operation, `p50_ms` and
//! `p95_ms`); in JUnit, one case per trial; in the text report, a line each.

use serde_json::{Value, json};

use super::junit;
use crate::domain::probe::latency::{Latency, Op, Samples};
use crate::domain::probe::{Judgement, Observations};
use crate::domain::version::ProtocolVersion;

pub(super) fn trials_json(judgement: &Judgement) -> Value {
    let tally = judgement.verdict.tally();
    json!({"count": tally.count, "clean": tally.clean, "failed": tally.failed})
}

pub(super) fn latency_json(observations: &Observations) -> Value {
    let latency = Latency::of(&Samples::of(observations));
    Op::ALL
        .iter()
        .map(|op| (op.as_str().to_string(), json!(latency.get(*op))))
        .collect::<serde_json::Map<_, _>>()
        .into()
}

/// Why trial `n` did not pass: the verdict's reasons that name it (trial 1's are unnamed).
fn reasons_of(judgement: &Judgement, n: u32) -> Vec<&str> {
    let prefix = format!("trial {n}: ");
    judgement
        .verdict
        .reasons
        .iter()
        .filter_map(|r| match n {
            1 => (!r.starts_with("trial ")).then_some(r.as_str()),
            _ => r.strip_prefix(&prefix),
        })
        .collect()
}

/// One JUnit case per trial: failed, with its reasons, when it did not pass.
pub(super) fn trial_cases(version: ProtocolVersion, judgement: &Judgement) -> Vec<junit::Case> {
    let tally = judgement.verdict.tally();
    (1..=tally.count)
        .map(|n| junit::Case {
            classname: format!("cardgate.probe.{version}.trials"),
            name: format!("trial {n} of {}", tally.count),
            outcome: if tally.failed.contains(&n) {
                junit::Outcome::Failed {
                    message: reasons_of(judgement, n).join("; "),
                }
            } else {
                junit::Outcome::Passed
            },
        })
        .collect()
}

/// The text report's lines: how the trials went, and the latency measured.
pub(super) fn print(judgement: &Judgement, observations: &Observations) {
    let tally = judgement.verdict.tally();
    let failed = if tally.failed.is_empty() {
        String::new()
    } else {
        let list: Vec<String> = tally.failed.iter().map(u32::to_string).collect();
        format!("; failed: {}", list.join(", "))
    };
    println!("  trials: {} of {} clean{failed}", tally.clean, tally.count);
    let latency = Latency::of(&Samples::of(observations));
    let measured: Vec<String> = Op::ALL
        .iter()
        .filter_map(|op| {
            let p = latency.get(*op)?;
            Some(format!(
                "{} p50 {} ms, p95 {} ms",
                op.as_str(),
                p.p50_ms,
                p.p95_ms
            ))
        })
        .collect();
    if !measured.is_empty() {
        println!("  latency: {}", measured.join("; "));
    }
}
