//! Callers' violation reports: checking that the evidence really shows the violation before a
//! report may demote anything (docs/trust-model.md, "Demotion triggers").

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::demotion::DemotionClass;
use super::gate::{GateState, SubjectState};
use super::ids::{CalleeId, ReportId};
use super::ledger::EventBody;
use super::probe::TaskState;
use super::probe::events::{Event, classify, parse_timestamp};
use super::time::Timestamp;
use super::version::ProtocolVersion;

/// What a caller says it observed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Trigger {
    TerminalWithoutTimestamp,
    HistoryNotIncremented,
    PushRegistrationFailed,
    DuplicateTerminal,
}

impl Trigger {
    pub fn class(self) -> DemotionClass {
        match self {
            Trigger::TerminalWithoutTimestamp => DemotionClass::Timestamp,
            Trigger::HistoryNotIncremented => DemotionClass::History,
            Trigger::PushRegistrationFailed => DemotionClass::Push,
            Trigger::DuplicateTerminal => DemotionClass::Terminal,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Trigger::TerminalWithoutTimestamp => "terminal-without-timestamp",
            Trigger::HistoryNotIncremented => "history-not-incremented",
            Trigger::PushRegistrationFailed => "push-registration-failed",
            Trigger::DuplicateTerminal => "duplicate-terminal",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        [
            Self::TerminalWithoutTimestamp,
            Self::HistoryNotIncremented,
            Self::PushRegistrationFailed,
            Self::DuplicateTerminal,
        ]
        .into_iter()
        .find(|t| t.as_str() == s)
    }
}

/// The registry's own rule for how many failed registrations make a spent retry budget.
pub const MIN_PUSH_ATTEMPTS: usize = 2;

/// Checks `evidence` for `trigger`. `Ok` says what it shows; `Err` says why it does not.
///
/// Evidence shapes: for the status triggers, `{"observed": [...]}` with A2A objects in the order
/// seen (tasks, status updates in v1.0 or v0.3 shape, or bare `TaskStatus` objects); for
/// `push-registration-failed`, `{"attempts": [{"http_status": 500}, {"jsonrpc_error": {...}}]}`.
pub fn check(trigger: Trigger, evidence: &Value) -> Result<String, String> {
    match trigger {
        Trigger::PushRegistrationFailed => push_failed(evidence),
        _ => {
            let observed = observed(evidence)?;
            match trigger {
                Trigger::TerminalWithoutTimestamp => terminal_without_timestamp(&observed),
                Trigger::DuplicateTerminal => duplicate_terminal(&observed),
                Trigger::HistoryNotIncremented => history_not_incremented(&observed),
                Trigger::PushRegistrationFailed => unreachable!("handled above"),
            }
        }
    }
}

/// One observed event, read leniently.
struct Seen {
    index: usize,
    task_id: Option<String>,
    /// `None` for an event without a status (an artifact update, a message): it changes no
    /// state, but after a terminal state it is still an event after the end.
    state: Option<TaskState>,
    /// The state as sent, or the kind of a status-less event.
    raw_state: String,
    timestamp: Option<String>,
    history_len: Option<usize>,
}

impl Seen {
    /// An event of task `id` that carries no status, named by its kind.
    fn status_less(index: usize, id: &str, kind: &str) -> Self {
        Self {
            index,
            task_id: Some(id.to_string()),
            state: None,
            raw_state: kind.to_string(),
            timestamp: None,
            history_len: None,
        }
    }

    fn is_terminal(&self) -> bool {
        self.state.is_some_and(TaskState::is_terminal)
    }
}

const MAX_OBSERVED: usize = 200;

fn observed(evidence: &Value) -> Result<Vec<Seen>, String> {
    let list = evidence
        .get("observed")
        .and_then(Value::as_array)
        .ok_or("evidence must be an object with an `observed` array of A2A status objects, in the order seen")?;
    if list.is_empty() || list.len() > MAX_OBSERVED {
        return Err(format!(
            "evidence.observed must hold 1 to {MAX_OBSERVED} objects"
        ));
    }
    list.iter()
        .enumerate()
        .map(|(index, item)| {
            // A bare TaskStatus is read as a status update of an unnamed task.
            let wrapped;
            let value = if item.get("state").is_some() && item.get("status").is_none() {
                wrapped = serde_json::json!({ "kind": "status-update", "status": item });
                &wrapped
            } else {
                item
            };
            let event = classify(value).map_err(|e| format!("evidence.observed[{index}]: {e}"))?;
            let (status, history_len) = match &event {
                Event::Task {
                    status,
                    history_len,
                    ..
                } => (status.clone(), *history_len),
                Event::StatusUpdate { status, .. } => (status.clone(), None),
                Event::ArtifactUpdate {
                    task_id: Some(id), ..
                } => {
                    return Ok(Seen::status_less(index, id, "artifact-update"));
                }
                Event::Message {
                    task_id: Some(id), ..
                } => {
                    return Ok(Seen::status_less(index, id, "message"));
                }
                _ => return Err(format!("evidence.observed[{index}] carries no task status")),
            };
            let status =
                status.ok_or_else(|| format!("evidence.observed[{index}] has no status"))?;
            let (state, _) = status.state.ok_or_else(|| {
                format!(
                    "evidence.observed[{index}]: `{}` is not a task state",
                    status.raw_state
                )
            })?;
            Ok(Seen {
                index,
                task_id: event.task_id().map(str::to_string),
                state: Some(state),
                raw_state: status.raw_state,
                timestamp: status.timestamp,
                history_len,
            })
        })
        .collect()
}

fn terminal_without_timestamp(seen: &[Seen]) -> Result<String, String> {
    // A timestamp that names no instant (no zone, unparseable) counts as missing
    // (docs/trust-model.md, rule 2); an offset such as `+00:00` names one and does not.
    let without =
        |s: &&Seen| s.is_terminal() && s.timestamp.as_deref().and_then(parse_timestamp).is_none();
    match seen.iter().find(without) {
        Some(s) => Ok(match &s.timestamp {
            None => format!(
                "observed[{}] is the terminal state {} without status.timestamp",
                s.index, s.raw_state
            ),
            Some(raw) => format!(
                "observed[{}] is the terminal state {} with a status.timestamp that names no instant (`{raw}`)",
                s.index, s.raw_state
            ),
        }),
        None => Err("no terminal status in the evidence lacks status.timestamp".into()),
    }
}

fn duplicate_terminal(seen: &[Seen]) -> Result<String, String> {
    // Per task: a second terminal status, or any event after a terminal one (as the probes'
    // LC-NOTHING-AFTER-TERMINAL reads a stream).
    for (i, first) in seen.iter().enumerate().filter(|(_, s)| s.is_terminal()) {
        if let Some(later) = seen[i + 1..].iter().find(|s| s.task_id == first.task_id) {
            let what = match later.state {
                Some(state) if state.is_terminal() => "a second terminal status",
                Some(_) => "a status after the terminal one",
                None => "an event after the terminal one",
            };
            return Ok(format!(
                "observed[{}] ({}) follows the terminal observed[{}] ({}) of the same task: {what}",
                later.index, later.raw_state, first.index, first.raw_state
            ));
        }
    }
    Err("the evidence shows no second terminal status and nothing after a terminal one".into())
}

fn history_not_incremented(seen: &[Seen]) -> Result<String, String> {
    let tasks: Vec<&Seen> = seen.iter().filter(|s| s.history_len.is_some()).collect();
    if tasks.len() < 2 {
        return Err(
            "history evidence needs at least two Task objects with `history`, in the order seen"
                .into(),
        );
    }
    for pair in tasks.windows(2) {
        let (a, b) = (pair[0], pair[1]);
        // Statuses seen between the two reads show whether the task moved in between.
        let moved = a.state != b.state
            || seen[a.index + 1..b.index]
                .iter()
                .any(|s| s.state.is_some() && s.state != a.state);
        if a.task_id == b.task_id && moved && b.history_len <= a.history_len {
            return Ok(format!(
                "history stayed at {} → {} from observed[{}] ({}) to observed[{}] ({}) across a state change",
                a.history_len.unwrap_or(0),
                b.history_len.unwrap_or(0),
                a.index,
                a.raw_state,
                b.index,
                b.raw_state
            ));
        }
    }
    Err(
        "history grows (or the task did not change state) between every pair of Task objects"
            .into(),
    )
}

fn push_failed(evidence: &Value) -> Result<String, String> {
    let attempts = evidence
        .get("attempts")
        .and_then(Value::as_array)
        .ok_or("evidence must be an object with an `attempts` array of registration outcomes")?;
    if attempts.len() < MIN_PUSH_ATTEMPTS || attempts.len() > MAX_OBSERVED {
        return Err(format!(
            "a spent retry budget needs at least {MIN_PUSH_ATTEMPTS} registration attempts (got {})",
            attempts.len()
        ));
    }
    for (i, attempt) in attempts.iter().enumerate() {
        let status = attempt.get("http_status").and_then(Value::as_u64);
        let rpc_error = attempt
            .get("jsonrpc_error")
            .is_some_and(|e| e.get("code").is_some());
        match (status, rpc_error) {
            (_, true) => {}
            (Some(s), false) if !(200..300).contains(&s) => {}
            (Some(s), false) => {
                return Err(format!(
                    "attempts[{i}] succeeded (HTTP {s}) without a JSON-RPC error"
                ));
            }
            (None, false) => {
                return Err(format!(
                    "attempts[{i}] has neither `http_status` nor `jsonrpc_error`"
                ));
            }
        }
    }
    Ok(format!(
        "all {} registration attempts failed (non-2xx or JSON-RPC error)",
        attempts.len()
    ))
}

/// A caller's report, as recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    pub id: ReportId,
    pub callee_id: CalleeId,
    pub protocol_version: ProtocolVersion,
    pub trigger: Trigger,
    pub class: DemotionClass,
    pub evidence: Value,
    /// What the evidence check established.
    pub finding: String,
    pub reporter: String,
    pub outcome: ReportOutcome,
    pub created_at: Timestamp,
}

/// What a checked report did to its subject.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReportOutcome {
    /// The subject was demoted, or gained the report's class while demoted.
    Demoted,
    /// Recorded without a gate move (a `card-trusted` subject, or a class it already carries).
    Recorded,
}

impl ReportOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Demoted => "demoted",
            Self::Recorded => "recorded",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        [Self::Demoted, Self::Recorded]
            .into_iter()
            .find(|o| o.as_str() == s)
    }
}

/// The report demotion policy: the events a checked `report` appends for a subject in
/// `state`, and its outcome. Every report is recorded in the ledger; only a
/// `lifecycle-trusted` subject is demoted, and a demoted one gains the class if it is new
/// (docs/trust-model.md, "Demotion triggers").
pub fn consequences(report: &Report, state: &SubjectState) -> (Vec<EventBody>, ReportOutcome) {
    let mut events = vec![EventBody::ReportReceived {
        report_id: report.id,
        trigger: report.trigger.as_str().to_string(),
        reporter: report.reporter.clone(),
    }];
    let demotes = match &state.gate {
        GateState::LifecycleTrusted => true,
        GateState::Demoted { classes, .. } => !classes.contains(&report.class),
        GateState::CardTrusted => false,
    };
    if !demotes {
        return (events, ReportOutcome::Recorded);
    }
    events.push(EventBody::Demoted {
        class: report.class,
        probe_run_id: None,
        report_id: Some(report.id),
        reason: report.finding.clone(),
        rulebook: None,
    });
    (events, ReportOutcome::Demoted)
}

#[cfg(test)]
mod tests;
