//! What a caller may ask of a subject's record beyond its gate (issue 46): enough clean trials
//! (`min_trials`, `min_clean_rate`: the `track-record` condition) and a recent passing run
//! (`max_age`: the `fresh` condition). A promotion never decays by itself: freshness is the
//! caller's posture, asked for per question.
//!
//! Pure: [`apply`] adds the asked-for conditions to a decision, given the record and `now`.

use std::time::Duration;

use super::{Condition, ConditionStatus, Decision, cond};
use crate::probe::track::{MIN_TRIALS, TrackRecord};
use crate::time::Timestamp;

/// The clean-rate lower bound asked for when a caller names only `min_trials`.
pub const DEFAULT_MIN_CLEAN_RATE: f64 = 0.95;

/// What the caller asks of the record; empty asks nothing.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RecordAsk {
    pub min_trials: Option<u32>,
    /// Between 0 and 1.
    pub min_clean_rate: Option<f64>,
    pub max_age: Option<Duration>,
}

/// A [`RecordAsk`] as a cache key: the clean rate in millionths, the age in seconds.
pub type AskKey = (Option<u32>, Option<u32>, Option<u64>);

impl RecordAsk {
    pub fn key(&self) -> AskKey {
        (
            self.min_trials,
            self.min_clean_rate
                .map(|r| (r * 1_000_000.0).round() as u32),
            self.max_age.map(|a| a.as_secs()),
        )
    }
}

/// Until when an answer to `ask` about `record`, given at `now`, stands while the record does:
/// a passing `fresh` condition fails once the newest passing run is `max_age` old; nothing
/// else the ask adds changes with time alone.
pub fn valid_until(
    record: Option<&TrackRecord>,
    ask: &RecordAsk,
    now: Timestamp,
) -> Option<Timestamp> {
    let max_age = chrono::Duration::from_std(ask.max_age?).ok()?;
    let expires = record?.newest_pass_at()? + max_age;
    (expires >= now).then_some(expires + chrono::Duration::seconds(1))
}

/// The decision with the conditions `ask` names, each judged on `record` at `now`; it stays
/// authoritative only if they pass too. A subject without a record has no trials and no
/// passing run.
pub fn apply(
    mut decision: Decision,
    record: Option<&TrackRecord>,
    ask: &RecordAsk,
    now: Timestamp,
) -> Decision {
    let record = record.copied().unwrap_or_default();
    let mut added = Vec::new();
    if ask.min_trials.is_some() || ask.min_clean_rate.is_some() {
        added.push(track_record(&record, ask));
    }
    if let Some(max_age) = ask.max_age {
        added.push(fresh(&record, max_age, now));
    }
    decision.authoritative &= added.iter().all(|c| c.status == ConditionStatus::Pass);
    decision.conditions.extend(added);
    decision
}

fn track_record(record: &TrackRecord, ask: &RecordAsk) -> Condition {
    const ID: &str = "track-record";
    let needed = ask.min_trials.unwrap_or(MIN_TRIALS).max(1);
    let rate = ask.min_clean_rate.unwrap_or(DEFAULT_MIN_CLEAN_RATE);
    let (clean, trials) = (record.clean, record.trials);
    if u32::from(trials) < needed {
        return cond(
            ID,
            ConditionStatus::Unknown,
            format!("{trials} trial(s) in the window, fewer than the {needed} asked for"),
        );
    }
    let lower = record.clean_rate_lower_bound().unwrap_or(0.0);
    let (status, than) = if lower >= rate {
        (ConditionStatus::Pass, "at least")
    } else {
        (ConditionStatus::Fail, "below")
    };
    cond(
        ID,
        status,
        format!(
            "{clean} of {trials} trials clean: the 95 % lower bound of the clean rate, {lower:.3}, \
             is {than} the {rate} asked for"
        ),
    )
}

fn fresh(record: &TrackRecord, max_age: Duration, now: Timestamp) -> Condition {
    const ID: &str = "fresh";
    let Some(at) = record.newest_pass_at() else {
        return cond(
            ID,
            ConditionStatus::Fail,
            "no passing probe run in the track record's window",
        );
    };
    let age = (now - at).to_std().unwrap_or_default();
    let (status, than) = if age <= max_age {
        (ConditionStatus::Pass, "within")
    } else {
        (ConditionStatus::Fail, "longer ago than")
    };
    // The reason names the moment, not the age: it stands as long as the status does.
    cond(
        ID,
        status,
        format!(
            "the newest passing probe run finished at {}, {than} the {} s asked for",
            crate::time::format(at),
            max_age.as_secs()
        ),
    )
}

#[cfg(test)]
mod tests;
