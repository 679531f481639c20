//! How a probe run's trials went and the latency it measured, as the API gives them (issue 46):
//! the same shapes as `cardgate probe --json`.

use serde::Serialize;
use utoipa::ToSchema;

use crate::domain::probe::Judgement;
use crate::domain::probe::latency::{Latency, Percentiles};
use crate::domain::probe::trials::Tally;

/// A cycle's trials: the first is the whole cycle, the others the lifecycle task alone, all
/// started together; the cycle passes only if every one does.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct TrialsView {
    pub count: u32,
    /// Trials whose own verdict passed.
    pub clean: u32,
    /// The trials that did not pass, numbered from 1.
    pub failed: Vec<u32>,
}

impl From<&Judgement> for TrialsView {
    fn from(j: &Judgement) -> Self {
        let tally = j
            .verdict
            .trials
            .clone()
            .unwrap_or_else(|| Tally::single(j.verdict.passed));
        Self {
            count: tally.count,
            clean: tally.clean,
            failed: tally.failed,
        }
    }
}

/// The median and 95th percentile, in milliseconds (nearest rank).
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct PercentilesView {
    pub p50_ms: u64,
    pub p95_ms: u64,
}

impl From<Percentiles> for PercentilesView {
    fn from(p: Percentiles) -> Self {
        Self {
            p50_ms: p.p50_ms,
            p95_ms: p.p95_ms,
        }
    }
}

/// Latency per operation, measured from the transitions' own offsets; `null` where nothing
/// was measured.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct LatencyView {
    /// A send's answer, from the send's start.
    pub send: Option<PercentilesView>,
    /// A stream's first event, from the stream's start.
    pub first_event: Option<PercentilesView>,
    /// The lifecycle task's end, from the start of the turn that ended it.
    pub terminal: Option<PercentilesView>,
    /// The push task's terminal delivery, from when its end was first seen elsewhere (else
    /// from its last send's start).
    pub push: Option<PercentilesView>,
}

impl From<Latency> for LatencyView {
    fn from(l: Latency) -> Self {
        Self {
            send: l.send.map(Into::into),
            first_event: l.first_event.map(Into::into),
            terminal: l.terminal.map(Into::into),
            push: l.push.map(Into::into),
        }
    }
}
