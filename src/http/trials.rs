//! How a probe run's trials went, the latency it measured, and a subject's track record, as
//! the API gives them (issue 46): the same shapes as `cardgate probe --json`.

use chrono::{DateTime, Utc};
use serde::Serialize;
use utoipa::ToSchema;

use crate::domain::probe::Judgement;
use crate::domain::probe::latency::{Latency, Percentiles};
use crate::domain::probe::track::{Class, TrackRecord};

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
        let tally = j.verdict.tally();
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

/// A subject's track record over the window (`CARDGATE_TRACK_RECORD_DAYS`), as of its last
/// change.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct TrackRecordView {
    /// Finished probe runs in the window that ran trials.
    pub runs: u16,
    pub trials: u16,
    /// Trials whose own verdict passed.
    pub clean: u16,
    /// The Wilson score interval's 95 % lower bound of the clean rate; absent without trials.
    pub clean_rate_lower_bound: Option<f64>,
    /// `new` (fewer than 5 trials), `stable` (no failure in the window), `flaky` (some
    /// failures), or `failing` (the newest run failed).
    pub class: TrackClassView,
    /// When the newest run, and the newest passing run, finished.
    pub newest_run_at: Option<DateTime<Utc>>,
    pub newest_pass_at: Option<DateTime<Utc>>,
    pub latency: LatencyView,
}

#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum TrackClassView {
    New,
    Stable,
    Flaky,
    Failing,
}

impl From<&TrackRecord> for TrackRecordView {
    fn from(r: &TrackRecord) -> Self {
        Self {
            runs: r.runs,
            trials: r.trials,
            clean: r.clean,
            // Three decimals: the bound is an estimate, and a stable answer tags stably.
            clean_rate_lower_bound: r
                .clean_rate_lower_bound()
                .map(|b| (b * 1000.0).floor() / 1000.0),
            class: match r.class {
                Class::New => TrackClassView::New,
                Class::Stable => TrackClassView::Stable,
                Class::Flaky => TrackClassView::Flaky,
                Class::Failing => TrackClassView::Failing,
            },
            newest_run_at: r.newest_run_at(),
            newest_pass_at: r.newest_pass_at(),
            latency: r.latency().into(),
        }
    }
}
