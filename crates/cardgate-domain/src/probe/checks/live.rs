//! LC-RESUBSCRIBE-LIVE: what a caller whose stream dropped gets when it resubscribes to a task
//! that has not ended (A2A v1.0 §3.1.6).

use std::collections::BTreeSet;

use super::{Fail, NotExercised, Pass, finding, finding_at, of_role};
use crate::capability::Capability;
use crate::probe::rule::Rule;
use crate::probe::{
    Finding, Level, LiveOutcome, LiveResubscribe, Observations, Source, StreamEnd, TaskRole,
    Transition,
};

/// LC-RESUBSCRIBE-LIVE: a resubscription to a task that has not ended sends the task as it is,
/// then its next transitions until it ends, then closes (§3.1.6; ACTS STREAM-SUB). A
/// resubscription that shows an interrupted task and closes is reported at SHOULD: the spec
/// also lets a stream close at an interrupted state (§11.7). A wait cardgate cut short judges
/// nothing.
pub(super) fn resubscribe_live(obs: &Observations, advertised: &BTreeSet<Capability>) -> Finding {
    const CODE: Rule = Rule::ResubscribeLive;
    if !advertised.contains(&Capability::Streaming) {
        return finding(
            CODE,
            NotExercised,
            "the card does not offer streaming, so there is nothing to resubscribe to",
        );
    }
    if obs.live_resubscribes.is_empty() {
        return finding(
            CODE,
            NotExercised,
            "the probe held no live task to resubscribe to (no input-required turn, no cancel scenario)",
        );
    }
    let judged: Vec<Finding> = obs
        .live_resubscribes
        .iter()
        .map(|live| live_resubscription(obs, live))
        .collect();
    let worst = |level: Level| judged.iter().find(|f| f.status == Fail && f.level == level);
    if let Some(failed) = worst(Level::Must).or_else(|| worst(Level::Should)) {
        return failed.clone();
    }
    if let Some(open) = judged.iter().find(|f| f.status == NotExercised) {
        return open.clone();
    }
    let what: Vec<String> = obs
        .live_resubscribes
        .iter()
        .map(|l| format!("{} ({})", l.state, task_role(l.role)))
        .collect();
    finding(
        CODE,
        Pass,
        format!(
            "resubscribing to the live task sent it, then its transitions to the end, and closed: {}",
            what.join(", ")
        ),
    )
}

fn task_role(role: TaskRole) -> &'static str {
    match role {
        TaskRole::Lifecycle => "lifecycle task",
        TaskRole::Push => "push task",
        TaskRole::Cancel => "cancel task",
    }
}

/// One live resubscription, judged.
fn live_resubscription(obs: &Observations, live: &LiveResubscribe) -> Finding {
    const CODE: Rule = Rule::ResubscribeLive;
    let task = format!("the {} {}", live.state, task_role(live.role));
    let (call, first_is_task) = match &live.outcome {
        LiveOutcome::Refused { code, message } => {
            return finding(
                CODE,
                Fail,
                format!("resubscribing to {task} was refused: {code}: {message}"),
            );
        }
        LiveOutcome::NoAnswer { error } => {
            return finding(
                CODE,
                Fail,
                format!("resubscribing to {task} got no usable answer: {error}"),
            );
        }
        LiveOutcome::Streamed {
            call,
            first_is_task,
        } => (*call, *first_is_task),
    };
    let states: Vec<&Transition> = obs
        .transitions
        .iter()
        .filter(|t| t.source == Source::Stream && t.call == call)
        .collect();
    if !first_is_task || states.is_empty() {
        return finding(
            CODE,
            Fail,
            format!("the resubscription to {task} (stream {call}) did not start with the task"),
        );
    }
    let end = obs
        .streams
        .iter()
        .find(|s| s.call == call)
        .map_or(StreamEnd::Closed, |s| s.end.clone());
    let ended = states.iter().any(|t| t.state.is_terminal());
    let ended_elsewhere = of_role(obs, live.role)
        .iter()
        .any(|t| t.state.is_terminal());
    match (&end, ended) {
        (StreamEnd::Closed, true) => finding(
            CODE,
            Pass,
            format!(
                "the resubscription to {task} (stream {call}) carried {} states to the end and closed",
                states.len()
            ),
        ),
        (StreamEnd::Deadline, _) => finding(
            CODE,
            NotExercised,
            format!(
                "the probe cycle's deadline ended the resubscription to {task} (stream {call}) before the task ended: not waited for, so not judged"
            ),
        ),
        (_, true) => finding(
            CODE,
            Fail,
            format!(
                "the resubscription to {task} (stream {call}) did not close after the task ended (ended by {end:?})"
            ),
        ),
        (StreamEnd::Closed, false) if states.iter().all(|t| t.state.is_interrupted()) => {
            finding_at(
                CODE,
                Level::Should,
                Fail,
                format!(
                    "the resubscription to {task} (stream {call}) closed after the task's snapshot and carried none of its later transitions; the spec lets a stream close at an interrupted state (§11.7), but a caller recovering a dropped stream waits in vain"
                ),
            )
        }
        (_, false) if !ended_elsewhere => finding(
            CODE,
            NotExercised,
            format!(
                "the task was not seen to end, so whether the resubscription to {task} (stream {call}) carries it to its end was not judged"
            ),
        ),
        (end, false) => finding(
            CODE,
            Fail,
            format!(
                "the task ended, but the resubscription to {task} (stream {call}) did not carry its end (ended by {end:?})"
            ),
        ),
    }
}
