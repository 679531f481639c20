//! Latency (issue 46), measured from the transitions' own offsets, per operation:
//! - `send`: a send's answer, from the send's start;
//! - `first_event`: a stream's first event, from the stream's start;
//! - `terminal`: the lifecycle task's end, from the start of the turn that ended it;
//! - `push`: the push task's terminal delivery, from when cardgate first saw that state on
//!   another channel (or, if it saw it nowhere else, from the start of the task's last send).
//!
//! Pure: [`Samples::of`] reads a cycle's observations (every trial's), and [`Latency::of`]
//! gives nearest-rank p50 and p95 of any number of samples.

use serde::{Deserialize, Serialize};

use super::{Observations, Source, TaskRole, Transition};
use crate::time::Timestamp;

/// The operations latency is measured for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Op {
    Send,
    FirstEvent,
    Terminal,
    Push,
}

impl Op {
    pub const ALL: [Op; 4] = [Op::Send, Op::FirstEvent, Op::Terminal, Op::Push];

    pub fn as_str(self) -> &'static str {
        match self {
            Op::Send => "send",
            Op::FirstEvent => "first_event",
            Op::Terminal => "terminal",
            Op::Push => "push",
        }
    }
}

/// Milliseconds measured per operation.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Samples {
    pub send: Vec<u64>,
    pub first_event: Vec<u64>,
    pub terminal: Vec<u64>,
    pub push: Vec<u64>,
}

impl Samples {
    /// What a cycle measured, over all its trials.
    pub fn of(obs: &Observations) -> Self {
        let mut samples = Self::default();
        samples.add(obs);
        for trial in &obs.trials {
            samples.add(trial);
        }
        samples
    }

    pub fn get(&self, op: Op) -> &[u64] {
        match op {
            Op::Send => &self.send,
            Op::FirstEvent => &self.first_event,
            Op::Terminal => &self.terminal,
            Op::Push => &self.push,
        }
    }

    /// Adds `other`'s samples to these.
    pub fn extend(&mut self, other: &Samples) {
        self.send.extend(&other.send);
        self.first_event.extend(&other.first_event);
        self.terminal.extend(&other.terminal);
        self.push.extend(&other.push);
    }

    fn add(&mut self, obs: &Observations) {
        let firsts = first_per_call(obs);
        self.send.extend(
            firsts
                .iter()
                .filter(|t| t.source == Source::Response)
                .filter_map(|t| t.offset_ms),
        );
        let opened: Vec<u32> = obs
            .streams
            .iter()
            .filter(|s| !s.resubscribe)
            .map(|s| s.call)
            .collect();
        self.first_event.extend(
            firsts
                .iter()
                .filter(|t| t.source == Source::Stream && opened.contains(&t.call))
                .filter_map(|t| t.offset_ms),
        );
        self.terminal.extend(terminal(obs));
        self.push.extend(push(obs));
    }
}

/// Each call's first transition.
fn first_per_call(obs: &Observations) -> Vec<&Transition> {
    let mut seen: Vec<(TaskRole, Source, u32)> = Vec::new();
    let mut firsts = Vec::new();
    for t in &obs.transitions {
        let key = (t.role, t.source, t.call);
        if !seen.contains(&key) {
            seen.push(key);
            firsts.push(t);
        }
    }
    firsts
}

/// When the calls that carried `role`'s sends and streams started, by their transitions'
/// offsets.
fn turn_starts(obs: &Observations, role: TaskRole) -> Vec<Timestamp> {
    obs.transitions
        .iter()
        .filter(|t| t.role == role && matches!(t.source, Source::Response | Source::Stream))
        .filter_map(|t| Some(t.observed_at - chrono::Duration::milliseconds(t.offset_ms? as i64)))
        .collect()
}

fn millis(from: Timestamp, to: Timestamp) -> u64 {
    (to - from).num_milliseconds().max(0) as u64
}

/// The lifecycle task's end, from the start of the turn that ended it.
fn terminal(obs: &Observations) -> Option<u64> {
    let end = obs.transitions.iter().find(|t| {
        t.role == TaskRole::Lifecycle && t.source != Source::Push && t.state.is_terminal()
    })?;
    let started = turn_starts(obs, TaskRole::Lifecycle)
        .into_iter()
        .filter(|s| *s <= end.observed_at)
        .max()?;
    Some(millis(started, end.observed_at))
}

/// The push task's terminal delivery, from when its end was first seen elsewhere, or else
/// from the start of its last send.
fn push(obs: &Observations) -> Option<u64> {
    let of_push = || obs.transitions.iter().filter(|t| t.role == TaskRole::Push);
    let delivered = of_push().find(|t| t.source == Source::Push && t.state.is_terminal())?;
    let seen_elsewhere = of_push()
        .filter(|t| t.source != Source::Push && t.state.is_terminal())
        .map(|t| t.observed_at)
        .min();
    let from = match seen_elsewhere {
        Some(at) => at,
        None => turn_starts(obs, TaskRole::Push)
            .into_iter()
            .filter(|s| *s <= delivered.observed_at)
            .max()?,
    };
    Some(millis(from, delivered.observed_at))
}

/// The median and 95th percentile of some samples, in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Percentiles {
    pub p50_ms: u64,
    pub p95_ms: u64,
}

impl Percentiles {
    /// Nearest-rank percentiles (the smallest sample with at least p % of them at or below
    /// it); `None` without samples.
    pub fn of(samples: &[u64]) -> Option<Self> {
        if samples.is_empty() {
            return None;
        }
        let mut sorted = samples.to_vec();
        sorted.sort_unstable();
        let rank = |p: usize| sorted[(p * sorted.len()).div_ceil(100).max(1) - 1];
        Some(Self {
            p50_ms: rank(50),
            p95_ms: rank(95),
        })
    }
}

/// p50 and p95 per operation (`None` where nothing was measured).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Latency {
    pub send: Option<Percentiles>,
    pub first_event: Option<Percentiles>,
    pub terminal: Option<Percentiles>,
    pub push: Option<Percentiles>,
}

impl Latency {
    pub fn of(samples: &Samples) -> Self {
        Self {
            send: Percentiles::of(&samples.send),
            first_event: Percentiles::of(&samples.first_event),
            terminal: Percentiles::of(&samples.terminal),
            push: Percentiles::of(&samples.push),
        }
    }

    pub fn get(&self, op: Op) -> Option<Percentiles> {
        match op {
            Op::Send => self.send,
            Op::FirstEvent => self.first_event,
            Op::Terminal => self.terminal,
            Op::Push => self.push,
        }
    }
}

#[cfg(test)]
mod tests;
