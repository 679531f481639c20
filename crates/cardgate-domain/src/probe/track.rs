//! A subject's track record (issue 46): what its finished probe runs within a window say, not
//! what its newest one says. Runs, trials and clean trials; the Wilson 95 % lower bound of the
//! clean rate; a class (`new`, `stable`, `flaky`, `failing`); when its newest run, and its
//! newest passing run, finished; latency p50 and p95 per operation over every trial; and when
//! its oldest run leaves the window, after which the record must be folded again.
//!
//! Pure: [`TrackRecord::of`] folds [`RunRecord`]s the store read; [`TrackRecord`] is small and
//! fixed in size, since the read model holds one per subject.

use std::num::NonZeroU32;

use chrono::TimeZone;
use serde::{Deserialize, Serialize};

use super::latency::{Latency, Op, Percentiles, Samples};
use super::{Judgement, Observations};
use crate::time::Timestamp;

/// Fewer trials than this and a subject is `new`: too few to call stable or flaky.
pub const MIN_TRIALS: u32 = 5;
/// The window's default length, in days (`CARDGATE_TRACK_RECORD_DAYS`).
pub const DEFAULT_WINDOW_DAYS: u32 = 30;

/// What one finished run contributes to its subject's record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunRecord {
    pub finished_at: Timestamp,
    pub passed: bool,
    pub trials: u32,
    pub clean: u32,
    /// Its latency samples, milliseconds per operation.
    pub samples: Samples,
}

/// What a finished run keeps for the record: its trials and latency samples. A run that
/// credentials kept from the agent ran no trial.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Contribution {
    pub trials: u32,
    pub clean: u32,
    pub samples: Samples,
}

impl Contribution {
    pub fn of(judgement: &Judgement, observations: &Observations) -> Self {
        if judgement.verdict.unexercised.is_some() {
            return Self::default();
        }
        let tally = judgement.verdict.tally();
        Self {
            trials: tally.count,
            clean: tally.clean,
            samples: Samples::of(observations),
        }
    }
}

impl RunRecord {
    /// The record of a run finished at `finished_at`; one from before contributions were
    /// kept counts as one trial, clean if it passed.
    pub fn new(finished_at: Timestamp, passed: bool, kept: Option<Contribution>) -> Self {
        let kept = kept.unwrap_or(Contribution {
            trials: 1,
            clean: u32::from(passed),
            samples: Samples::default(),
        });
        Self {
            finished_at,
            passed,
            trials: kept.trials,
            clean: kept.clean,
            samples: kept.samples,
        }
    }
}

/// How a subject's runs have gone.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Class {
    /// Fewer than [`MIN_TRIALS`] trials in the window, the newest run passing.
    #[default]
    New,
    /// No trial failed in the window.
    Stable,
    /// Some trials failed, not the newest run.
    Flaky,
    /// The newest run failed.
    Failing,
}

impl Class {
    pub const ALL: [Class; 4] = [Class::New, Class::Stable, Class::Flaky, Class::Failing];

    pub fn as_str(self) -> &'static str {
        match self {
            Class::New => "new",
            Class::Stable => "stable",
            Class::Flaky => "flaky",
            Class::Failing => "failing",
        }
    }
}

/// A subject's record over the window, in 52 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TrackRecord {
    pub runs: u16,
    pub trials: u16,
    pub clean: u16,
    pub class: Class,
    /// When the newest run, and the newest passing run, finished (Unix seconds).
    newest: Option<NonZeroU32>,
    newest_pass: Option<NonZeroU32>,
    /// When the oldest run counted finished (Unix seconds): the record holds until it leaves
    /// the window.
    oldest: Option<NonZeroU32>,
    /// p50 and p95 per [`Op`], in milliseconds; `u32::MAX` where nothing was measured.
    latency: [[u32; 2]; 4],
}

fn secs(at: Timestamp) -> Option<NonZeroU32> {
    NonZeroU32::new(u32::try_from(at.timestamp()).unwrap_or(u32::MAX))
}

fn instant(secs: Option<NonZeroU32>) -> Option<Timestamp> {
    chrono::Utc
        .timestamp_opt(i64::from(secs?.get()), 0)
        .single()
}

fn saturating(n: u32) -> u16 {
    u16::try_from(n).unwrap_or(u16::MAX)
}

const NONE: u32 = u32::MAX;

/// No run: nothing measured.
impl Default for TrackRecord {
    fn default() -> Self {
        Self {
            runs: 0,
            trials: 0,
            clean: 0,
            class: Class::New,
            newest: None,
            newest_pass: None,
            oldest: None,
            latency: [[NONE; 2]; 4],
        }
    }
}

impl TrackRecord {
    /// The record of `runs` (any order) finished at or after `since`.
    pub fn of(runs: &[RunRecord], since: Timestamp) -> Self {
        // A run that ran no trial (credentials kept it from the agent) says nothing.
        let mut within: Vec<&RunRecord> = runs
            .iter()
            .filter(|r| r.finished_at >= since && r.trials > 0)
            .collect();
        within.sort_by_key(|r| r.finished_at);
        let trials: u32 = within.iter().map(|r| r.trials).sum();
        let clean: u32 = within.iter().map(|r| r.clean.min(r.trials)).sum();
        let newest = within.last();
        // A failing newest run says more than a short record does.
        let class = if newest.is_some_and(|r| !r.passed) {
            Class::Failing
        } else if trials < MIN_TRIALS {
            Class::New
        } else if clean < trials {
            Class::Flaky
        } else {
            Class::Stable
        };
        let mut samples = Samples::default();
        for run in &within {
            samples.extend(&run.samples);
        }
        let measured = Latency::of(&samples);
        let mut latency = [[NONE; 2]; 4];
        for (slot, op) in latency.iter_mut().zip(Op::ALL) {
            if let Some(p) = measured.get(op) {
                let ms = |v: u64| u32::try_from(v).unwrap_or(NONE - 1);
                *slot = [ms(p.p50_ms), ms(p.p95_ms)];
            }
        }
        Self {
            runs: saturating(within.len() as u32),
            trials: saturating(trials),
            clean: saturating(clean),
            class,
            newest: newest.and_then(|r| secs(r.finished_at)),
            newest_pass: within
                .iter()
                .rev()
                .find(|r| r.passed)
                .and_then(|r| secs(r.finished_at)),
            oldest: within.first().and_then(|r| secs(r.finished_at)),
            latency,
        }
    }

    /// The Wilson score interval's lower bound (95 %) of the clean rate; `None` without trials.
    pub fn clean_rate_lower_bound(&self) -> Option<f64> {
        wilson_lower(u32::from(self.clean), u32::from(self.trials))
    }

    pub fn newest_run_at(&self) -> Option<Timestamp> {
        instant(self.newest)
    }

    pub fn newest_pass_at(&self) -> Option<Timestamp> {
        instant(self.newest_pass)
    }

    /// Whether a run this record counts finished before `since`, the window's start now: then
    /// it no longer says what the window holds, and must be folded again from the runs. A
    /// record is folded when its subject changes; a subject left alone ages through this.
    pub fn aged(&self, since: Timestamp) -> bool {
        instant(self.oldest).is_some_and(|oldest| oldest < since)
    }

    pub fn latency(&self) -> Latency {
        let at = |i: usize| {
            let [p50, p95] = self.latency[i];
            (p50 != NONE).then_some(Percentiles {
                p50_ms: u64::from(p50),
                p95_ms: u64::from(p95),
            })
        };
        Latency {
            send: at(0),
            first_event: at(1),
            terminal: at(2),
            push: at(3),
        }
    }
}

/// The lower bound of the Wilson score interval at 95 % (z = 1.96) for `clean` of `n`.
pub fn wilson_lower(clean: u32, n: u32) -> Option<f64> {
    if n == 0 {
        return None;
    }
    let (n, p) = (f64::from(n), f64::from(clean.min(n)) / f64::from(n));
    let z = 1.96_f64;
    let z2 = z * z;
    let centre = p + z2 / (2.0 * n);
    let spread = z * (p * (1.0 - p) / n + z2 / (4.0 * n * n)).sqrt();
    Some(((centre - spread) / (1.0 + z2 / n)).max(0.0))
}

#[cfg(test)]
mod tests;
