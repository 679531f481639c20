//! Lenient reading of what agents send: tasks, status and artifact updates and messages, in
//! v1.0 (`{"statusUpdate":…}`, `TASK_STATE_*`) and v0.x (`"kind":"status-update"`, lowercase)
//! shapes, from responses, SSE frames and push bodies alike. Anything else is reported, never a
//! panic: a malformed event is a finding.

use chrono::{DateTime, Utc};
use serde_json::Value;

use super::{Source, Spelling, TaskRole, TaskState, Transition};
use crate::time::Timestamp;

/// A task status as sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    pub raw_state: String,
    pub state: Option<(TaskState, Spelling)>,
    pub timestamp: Option<String>,
}

/// One A2A object, classified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    Task {
        id: Option<String>,
        context_id: Option<String>,
        status: Option<Status>,
        history_len: Option<usize>,
    },
    StatusUpdate {
        task_id: Option<String>,
        context_id: Option<String>,
        status: Option<Status>,
        final_flag: Option<bool>,
    },
    ArtifactUpdate {
        task_id: Option<String>,
        context_id: Option<String>,
    },
    Message {
        task_id: Option<String>,
        context_id: Option<String>,
    },
}

impl Event {
    pub fn task_id(&self) -> Option<&str> {
        match self {
            Event::Task { id, .. } => id.as_deref(),
            Event::StatusUpdate { task_id, .. }
            | Event::ArtifactUpdate { task_id, .. }
            | Event::Message { task_id, .. } => task_id.as_deref(),
        }
    }

    pub fn context_id(&self) -> Option<&str> {
        match self {
            Event::Task { context_id, .. }
            | Event::StatusUpdate { context_id, .. }
            | Event::ArtifactUpdate { context_id, .. }
            | Event::Message { context_id, .. } => context_id.as_deref(),
        }
    }

    /// The observed transition this event carries, if it carries a readable status.
    pub fn transition(
        &self,
        role: TaskRole,
        source: Source,
        call: u32,
        observed_at: Timestamp,
    ) -> Option<Transition> {
        let (status, history_len, final_flag) = match self {
            Event::Task {
                status,
                history_len,
                ..
            } => (status.as_ref()?, *history_len, None),
            Event::StatusUpdate {
                status, final_flag, ..
            } => (status.as_ref()?, None, *final_flag),
            _ => return None,
        };
        let (state, spelling) = status.state?;
        Some(Transition {
            role,
            source,
            call,
            state,
            raw_state: status.raw_state.clone(),
            spelling,
            timestamp: status.timestamp.clone(),
            parsed_timestamp: status.timestamp.as_deref().and_then(parse_timestamp),
            history_len,
            task_id: self.task_id().map(str::to_string),
            context_id: self.context_id().map(str::to_string),
            final_flag,
            observed_at,
            offset_ms: None,
        })
    }
}

/// Classifies one JSON value (a JSON-RPC `result`, an SSE `data`, a push body).
pub fn classify(value: &Value) -> Result<Event, String> {
    let obj = value
        .as_object()
        .ok_or_else(|| format!("expected a JSON object, got {}", kind_of(value)))?;
    // v1.0 StreamResponse / SendMessageResponse: a oneof wrapper.
    for (key, kind) in [
        ("task", "task"),
        ("statusUpdate", "status-update"),
        ("artifactUpdate", "artifact-update"),
        ("message", "message"),
    ] {
        if obj.len() == 1
            && let Some(inner) = obj.get(key)
        {
            return typed(inner, kind);
        }
    }
    if let Some(kind) = obj.get("kind").and_then(Value::as_str) {
        return typed(value, kind);
    }
    let has = |k: &str| obj.contains_key(k);
    if has("status") && has("id") {
        typed(value, "task")
    } else if has("status") && has("taskId") {
        typed(value, "status-update")
    } else if has("artifact") && has("taskId") {
        typed(value, "artifact-update")
    } else if has("messageId") && has("role") {
        typed(value, "message")
    } else {
        let keys: Vec<&str> = obj.keys().map(String::as_str).take(8).collect();
        Err(format!(
            "not an A2A task, message or event (keys: {})",
            keys.join(", ")
        ))
    }
}

fn typed(value: &Value, kind: &str) -> Result<Event, String> {
    let obj = value
        .as_object()
        .ok_or_else(|| format!("{kind} is not an object"))?;
    let text = |k: &str| obj.get(k).and_then(Value::as_str).map(str::to_string);
    match kind {
        "task" => Ok(Event::Task {
            id: text("id"),
            context_id: text("contextId"),
            status: status(obj.get("status"))?,
            history_len: obj.get("history").and_then(Value::as_array).map(Vec::len),
        }),
        "status-update" => Ok(Event::StatusUpdate {
            task_id: text("taskId"),
            context_id: text("contextId"),
            status: status(obj.get("status"))?,
            final_flag: obj.get("final").and_then(Value::as_bool),
        }),
        "artifact-update" => Ok(Event::ArtifactUpdate {
            task_id: text("taskId"),
            context_id: text("contextId"),
        }),
        "message" => Ok(Event::Message {
            task_id: text("taskId"),
            context_id: text("contextId"),
        }),
        other => Err(format!("unknown event kind `{other}`")),
    }
}

fn status(value: Option<&Value>) -> Result<Option<Status>, String> {
    let Some(value) = value.filter(|v| !v.is_null()) else {
        return Ok(None);
    };
    let obj = value.as_object().ok_or("status is not an object")?;
    let raw_state = match obj.get("state") {
        Some(Value::String(s)) => s.clone(),
        Some(other) => return Err(format!("status.state is not a string: {other}")),
        None => return Err("status has no state".into()),
    };
    let timestamp = match obj.get("timestamp") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(other) => Some(other.to_string()),
    };
    Ok(Some(Status {
        state: TaskState::parse(&raw_state),
        raw_state,
        timestamp,
    }))
}

/// The instant a `status.timestamp` names: RFC 3339 with `Z` or a numeric offset
/// (docs/trust-model.md, rule 2). One without a zone, or unparseable, names none and counts as
/// missing; how an instant is spelled is judged apart ([`is_utc_z`]).
pub fn parse_timestamp(raw: &str) -> Option<Timestamp> {
    DateTime::parse_from_rfc3339(raw)
        .ok()
        .map(|t| t.with_timezone(&Utc))
}

/// Whether a timestamp is spelled as A2A v1.0 §5.6.1 requires: `YYYY-MM-DDTHH:MM:SS`, an
/// optional fraction, and `Z` (no offset, not even `+00:00`; no lowercase, no space). The TCK
/// checks the same shape.
pub fn is_utc_z(raw: &str) -> bool {
    let b = raw.as_bytes();
    let digits = |range: std::ops::Range<usize>| b[range].iter().all(u8::is_ascii_digit);
    if b.len() < 20 || !raw.is_ascii() {
        return false;
    }
    let shape = digits(0..4)
        && b[4] == b'-'
        && digits(5..7)
        && b[7] == b'-'
        && digits(8..10)
        && b[10] == b'T'
        && digits(11..13)
        && b[13] == b':'
        && digits(14..16)
        && b[16] == b':'
        && digits(17..19);
    let tail = &raw[19..];
    let zone = match tail.strip_prefix('.') {
        Some(fraction) => fraction
            .strip_suffix('Z')
            .is_some_and(|d| !d.is_empty() && d.bytes().all(|c| c.is_ascii_digit())),
        None => tail == "Z",
    };
    shape && zone && parse_timestamp(raw).is_some()
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests;
