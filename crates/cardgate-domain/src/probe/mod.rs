//! Probe runs: what the registry observed when it drove a real task through a callee's
//! lifecycle, and the rules that turn those observations into findings, capability results and
//! a verdict (docs/trust-model.md, "A complete probe cycle passes when").
//!
//! Pure: the runner (`service::probe`) collects [`Observations`]; [`checks::evaluate`] judges
//! them; [`outcome::ledger_events`] says what the verdict does to the subject's gate.

pub mod checks;
pub mod events;
pub mod latency;
pub mod outcome;
pub mod rule;
pub mod track;
pub mod trials;

pub use rule::Rule;

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::capability::Capability;
use super::capability::CapabilityOutcome;
use super::demotion::DemotionClass;
use super::time::Timestamp;

/// What the probe says to the callee. Set per callee at registration; defaults are neutral.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProbeScript {
    /// The first message of the lifecycle task.
    #[serde(default = "default_message")]
    pub message: String,
    /// Texts for `input-required` turns, used in order (each follow-up carries both `taskId`
    /// and `contextId`).
    #[serde(default = "default_follow_ups")]
    pub follow_ups: Vec<String>,
    /// The first message of the push task, sent with cardgate's webhook inline, so any task
    /// works, however fast. Default: `message`.
    #[serde(default)]
    pub push_message: Option<String>,
    /// When set, a task started with this text is canceled, and the cancel is checked.
    #[serde(default)]
    pub cancel_message: Option<String>,
}

fn default_message() -> String {
    "cardgate lifecycle probe: please answer this message".into()
}

fn default_follow_ups() -> Vec<String> {
    vec!["cardgate lifecycle probe: here is the input you asked for".into()]
}

impl Default for ProbeScript {
    fn default() -> Self {
        Self {
            message: default_message(),
            follow_ups: default_follow_ups(),
            push_message: None,
            cancel_message: None,
        }
    }
}

/// Whitespace as the API's schema means it (`pattern: \S`, an ECMAScript regex): so a text the
/// schema admits is never refused as empty. ECMAScript's set is narrower than Unicode's
/// (U+0085, for one, is not in it).
fn is_schema_space(c: char) -> bool {
    matches!(
        c,
        '\t' | '\n' | '\u{b}' | '\u{c}' | '\r' | ' ' | '\u{a0}' | '\u{1680}' | '\u{2000}'
            ..='\u{200a}'
                | '\u{2028}'
                | '\u{2029}'
                | '\u{202f}'
                | '\u{205f}'
                | '\u{3000}'
                | '\u{feff}'
    )
}

impl ProbeScript {
    pub const MAX_TEXT: usize = 2000;
    pub const MAX_FOLLOW_UPS: usize = 8;

    pub fn validate(&self) -> Result<(), String> {
        let texts = std::iter::once(&self.message)
            .chain(&self.follow_ups)
            .chain(self.push_message.iter())
            .chain(self.cancel_message.iter());
        for text in texts {
            if text.chars().all(is_schema_space) {
                return Err("probe texts must not be empty".into());
            }
            if text.len() > Self::MAX_TEXT {
                return Err(format!(
                    "probe texts must be at most {} bytes",
                    Self::MAX_TEXT
                ));
            }
        }
        if self.follow_ups.len() > Self::MAX_FOLLOW_UPS {
            return Err(format!("at most {} follow-ups", Self::MAX_FOLLOW_UPS));
        }
        Ok(())
    }

    pub fn push_text(&self) -> &str {
        self.push_message.as_deref().unwrap_or(&self.message)
    }
}

/// A task state as seen on the wire, v1.0 (`TASK_STATE_WORKING`) or v0.x (`working`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TaskState {
    Submitted,
    Working,
    InputRequired,
    AuthRequired,
    Completed,
    Failed,
    Canceled,
    Rejected,
    Unknown,
}

/// How a state was spelled, which fingerprints the protocol version actually spoken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Spelling {
    /// `TASK_STATE_*` (v1.0 ProtoJSON enums).
    V1,
    /// lowercase with dashes (v0.2/v0.3).
    V0,
}

impl TaskState {
    /// Parses either spelling; `None` for anything else.
    pub fn parse(raw: &str) -> Option<(Self, Spelling)> {
        let (name, spelling) = match raw.strip_prefix("TASK_STATE_") {
            Some(rest) => (rest.to_ascii_lowercase().replace('_', "-"), Spelling::V1),
            None => (raw.to_string(), Spelling::V0),
        };
        let state = match name.as_str() {
            "submitted" => Self::Submitted,
            "working" => Self::Working,
            "input-required" => Self::InputRequired,
            "auth-required" => Self::AuthRequired,
            "completed" => Self::Completed,
            "failed" => Self::Failed,
            "canceled" => Self::Canceled,
            "rejected" => Self::Rejected,
            "unknown" | "unspecified" => Self::Unknown,
            _ => return None,
        };
        Some((state, spelling))
    }

    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            Self::Completed | Self::Failed | Self::Canceled | Self::Rejected
        )
    }

    pub fn is_interrupted(self) -> bool {
        matches!(self, Self::InputRequired | Self::AuthRequired)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Submitted => "submitted",
            Self::Working => "working",
            Self::InputRequired => "input-required",
            Self::AuthRequired => "auth-required",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Canceled => "canceled",
            Self::Rejected => "rejected",
            Self::Unknown => "unknown",
        }
    }
}

impl fmt::Display for TaskState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where a transition was seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Source {
    /// The response to a send.
    Response,
    /// An event of a streaming send.
    Stream,
    /// A GetTask answer.
    Get,
    /// A push delivery to cardgate's webhook.
    Push,
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Source::Response => "response",
            Source::Stream => "stream",
            Source::Get => "get",
            Source::Push => "push",
        })
    }
}

/// Which task of the probe cycle an observation belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TaskRole {
    Lifecycle,
    Push,
    Cancel,
}

/// One way the probe sees a task. Channels lag each other (a proxy may buffer a stream while
/// GetTask already answers), so the order of arrival is evidence only within one channel
/// (docs/trust-model.md, rule 3); across channels only the agent's own timestamps compare.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Channel {
    /// The answers to successive sends (each send waits for the previous answer).
    Responses,
    /// The events of one streaming call.
    Stream(u32),
    /// The answers of successive GetTask calls.
    Gets,
    /// The deliveries to cardgate's webhook for this run.
    Push,
}

impl fmt::Display for Channel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Channel::Responses => f.write_str("responses"),
            Channel::Stream(call) => write!(f, "stream {call}"),
            Channel::Gets => f.write_str("GetTask answers"),
            Channel::Push => f.write_str("push deliveries"),
        }
    }
}

/// One observed task status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Transition {
    pub role: TaskRole,
    pub source: Source,
    /// Which call produced it (one per send, stream, get or delivery, numbered in order).
    pub call: u32,
    pub state: TaskState,
    /// The state exactly as sent.
    pub raw_state: String,
    pub spelling: Spelling,
    /// `status.timestamp` exactly as sent, if present.
    pub timestamp: Option<String>,
    /// The instant the timestamp names (RFC 3339 with `Z` or a numeric offset); `None` if
    /// absent or not an instant, which counts as missing (docs/trust-model.md, rule 2).
    pub parsed_timestamp: Option<Timestamp>,
    /// `history` length of a Task object (absent on status updates).
    pub history_len: Option<usize>,
    pub task_id: Option<String>,
    pub context_id: Option<String>,
    /// v0.3 `final` flag on status updates.
    pub final_flag: Option<bool>,
    /// When cardgate received it.
    pub observed_at: Timestamp,
    /// Milliseconds from the start of the call that carried it (a send's answer, a stream's
    /// event, a GetTask's answer); `None` for a push delivery, which no call of cardgate's
    /// carries, and on runs from before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offset_ms: Option<u64>,
}

impl Transition {
    pub fn channel(&self) -> Channel {
        match self.source {
            Source::Response => Channel::Responses,
            Source::Stream => Channel::Stream(self.call),
            Source::Get => Channel::Gets,
            Source::Push => Channel::Push,
        }
    }

    /// `submitted (stream)`: how a transition is named in reasons.
    pub fn label(&self) -> String {
        format!("{} ({} {})", self.state, self.source, self.call)
    }
}

/// How one streaming call ended and what it carried.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamRun {
    pub role: TaskRole,
    pub call: u32,
    /// The response was `text/event-stream`.
    pub event_stream: bool,
    pub content_type: Option<String>,
    pub frames: usize,
    pub malformed_frames: usize,
    /// Frames that arrived after the stream's first terminal state.
    pub events_after_terminal: usize,
    pub end: StreamEnd,
    /// A resubscription to the lifecycle task after it ended, not a streaming send: judged
    /// for terminal discipline, never as the streaming capability.
    #[serde(default)]
    pub resubscribe: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "detail", rename_all = "kebab-case")]
pub enum StreamEnd {
    /// The server closed the stream.
    Closed,
    /// No bytes for the idle timeout.
    Idle,
    /// The probe's deadline passed.
    Deadline,
    TooManyEvents,
    EventTooLarge,
    /// Not a stream at all (plain JSON answer), or a transport error.
    NotAStream,
    Error(String),
}

/// The push probe: a task sent with cardgate's webhook inline in its configuration, the
/// deliveries that webhook received, and a separate registration through the push-config method.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PushRun {
    /// The push probe could not run at all, and why (e.g. no public URL for the webhook).
    pub skipped: Option<String>,
    /// Registration attempts through the push-config method, and the error of the last one if
    /// none succeeded.
    pub attempts: u32,
    pub registration_error: Option<String>,
    /// Registration was not tried to the end, and why (cardgate's own deadline passed).
    #[serde(default)]
    pub registration_skipped: Option<String>,
    pub deliveries: usize,
    /// Deliveries that did not carry cardgate's token where the spec puts it
    /// (`X-A2A-Notification-Token`, or `Authorization: Bearer`).
    pub deliveries_without_token: usize,
    /// Of those, the deliveries that carried it in another header, and the first such header:
    /// the spec allows "or similar", and the run's own webhook URL already authenticates them.
    #[serde(default)]
    pub deliveries_token_elsewhere: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_header: Option<String>,
    /// Deliveries whose body was not an A2A event.
    pub malformed_deliveries: usize,
    pub waited_ms: u64,
    /// The wait for deliveries ended at the cycle's deadline before its budget ran out: what
    /// had not arrived yet was not waited for, which says nothing about the agent.
    #[serde(default)]
    pub wait_cut_short: bool,
}

/// What became of a delivery to a probe run's webhook.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PushReceipt {
    Stored,
    /// The token belongs to no running probe.
    NoRunningProbe,
    /// The run already holds as many deliveries as it may.
    CapReached,
}

/// Everything one probe cycle saw, for [`checks::evaluate`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Observations {
    pub transitions: Vec<Transition>,
    pub streams: Vec<StreamRun>,
    pub push: Option<PushRun>,
    /// The task ids and context ids the sends returned, per role.
    pub tasks: BTreeMap<TaskRole, TaskIds>,
    /// Answers that were errors, malformed, or not A2A, per role, in order.
    pub problems: Vec<(TaskRole, String)>,
    /// A send answered with a Message instead of a Task: there is no lifecycle to test.
    pub message_only: Vec<TaskRole>,
    /// Follow-ups sent on the lifecycle task.
    pub follow_ups_sent: usize,
    /// The call number of each follow-up send, per role: what a task reports from these calls
    /// on is causally after the interrupted state that asked for the follow-up.
    #[serde(default)]
    pub follow_up_calls: Vec<(TaskRole, u32)>,
    /// Follow-ups were needed but the script had none left.
    pub follow_ups_exhausted: bool,
    /// What the transcript left out once its budget was spent (an agent that pads its answers
    /// or a poll that runs to the deadline cannot grow a run's record without bound).
    #[serde(default)]
    pub transcript_omitted: Option<String>,
    /// The cancel scenario's CancelTask call answered with an error.
    pub cancel_error: Option<String>,
    /// Resubscriptions to a task while it was live (an `input-required` turn, the cancel
    /// target), in the order they were opened.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub live_resubscribes: Vec<LiveResubscribe>,
    /// What the agent did with the lifecycle task once it had ended; `None` when it never
    /// ended within the cycle (or the cycle predates the terminal-discipline probe).
    #[serde(default)]
    pub after_end: Option<AfterEnd>,
    /// How the probe authenticated, and whether credentials stopped it.
    #[serde(default, skip_serializing_if = "Access::is_anonymous")]
    pub access: Access,
    /// The authenticated extended card, when the card offers one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extended_card: Option<ExtendedCard>,
    /// The cycle's further trials (2 to k): each the lifecycle task alone, run at the same
    /// time as this one, with what it saw ([`trials`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub trials: Vec<Observations>,
}

/// What became of the authenticated extended card a card offers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "kebab-case")]
pub enum ExtendedCard {
    /// Not asked for: no credentials were presented, or the binding cannot carry the call.
    Skipped { reason: String },
    /// Asked for, and not usable: an error answer, a card that does not parse or whose
    /// signature does not verify. Capabilities are judged as the public card declares them.
    Refused { reason: String },
    /// Fetched and trusted: capabilities are judged as it declares them.
    Used {
        /// Of its JSON as answered.
        sha256: String,
        /// Its signature verdict, in words.
        signature: String,
        /// The card as answered: stored with the run, a snapshot of its own.
        card: Value,
    },
}

/// How a cycle authenticated to the callee (scheme names only, never a secret).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Access {
    /// What was presented: which schemes, for which of the card's requirements.
    pub presented: Option<String>,
    /// Why the cycle could not exercise the callee, when credentials stopped it.
    pub blocked: Option<AccessBlock>,
}

impl Access {
    pub fn is_anonymous(&self) -> bool {
        self.presented.is_none() && self.blocked.is_none()
    }
}

/// Credentials stopped the cycle: a 401 or 403 is never lifecycle evidence
/// (docs/trust-model.md, "Gate states").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum AccessBlock {
    /// The card requires credentials that are not configured; nothing was sent.
    Missing { reason: String },
    /// The agent, or the authorization server, refused the credentials presented.
    Refused { reason: String },
}

impl AccessBlock {
    pub fn reason(&self) -> &str {
        match self {
            AccessBlock::Missing { reason } | AccessBlock::Refused { reason } => reason,
        }
    }
}

/// The terminal-discipline probe (docs/trust-model.md, rule 3: a terminal state must stay
/// terminal): CancelTask on the ended lifecycle task, a GetTask after it, and, where the card
/// offers streaming, a resubscription. What these show of the task is among the lifecycle
/// transitions, from call [`AfterEnd::from_call`] on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AfterEnd {
    /// The first call made after the task was seen ended: what the task reports from this
    /// call on is causally after its terminal state, whichever channel carries it.
    pub from_call: u32,
    pub cancel: EndedCancel,
    /// A message sent to the ended task (`None` on runs from before this was probed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub send: Option<EndedSend>,
    pub resubscribe: EndedResubscribe,
}

/// How a message to the ended task was answered (A2A v1.0 §3.1.1: refused with
/// `UnsupportedOperationError`; a task that has ended cannot restart).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum EndedSend {
    /// Refused with the binding's form of `UnsupportedOperationError` (JSON-RPC -32004;
    /// gRPC and HTTP+JSON with the reason `UNSUPPORTED_OPERATION`).
    Unsupported { code: i64, message: String },
    /// Refused, in another shape.
    Refused { code: i64, message: String },
    /// Accepted by the ended task itself: answered with it (its state is among the
    /// transitions, at `call`).
    Answered { call: u32 },
    /// Accepted, and answered with something else (`what`: a new task, a bare message): the
    /// ended task did not move, but the message was not refused.
    Elsewhere { call: u32, what: String },
    /// No usable answer.
    NoAnswer { error: String },
}

/// A resubscription to a task that had not ended (A2A v1.0 §3.1.6: the current task first,
/// then its updates until it ends).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LiveResubscribe {
    pub role: TaskRole,
    /// The state the task was last seen in when the resubscription was opened.
    pub state: TaskState,
    pub outcome: LiveOutcome,
}

/// How a resubscription to a live task went.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum LiveOutcome {
    /// Refused with an error (a live task must not be refused).
    Refused { code: i64, message: String },
    /// Opened as a stream: its record is the resubscription [`StreamRun`] with this call.
    Streamed {
        call: u32,
        /// The first event was a Task object, as the spec asks.
        first_is_task: bool,
    },
    /// No usable answer.
    NoAnswer { error: String },
}

/// How CancelTask on the ended task was answered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum EndedCancel {
    /// Refused with the binding's form of `TaskNotCancelableError` (JSON-RPC -32002; gRPC
    /// and HTTP+JSON with the reason `TASK_NOT_CANCELABLE`).
    NotCancelable { code: i64, message: String },
    /// Refused, in another shape.
    Refused { code: i64, message: String },
    /// Accepted: answered with the task (its state is among the transitions, at `call`).
    Answered { call: u32 },
    /// No usable answer.
    NoAnswer { error: String },
}

/// How a resubscription to the ended task went.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum EndedResubscribe {
    /// Not tried, and why (no streaming on the card, the deadline, the binding).
    NotTried { reason: String },
    /// Refused with an error: what the spec asks for a task that has ended.
    Refused { code: i64, message: String },
    /// Opened as a stream: its record is the resubscription [`StreamRun`] with this call.
    Streamed { call: u32 },
    /// No usable answer.
    NoAnswer { error: String },
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskIds {
    pub task_id: Option<String>,
    pub context_id: Option<String>,
}

/// How strongly a rule is required.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Level {
    /// A2A spec MUST.
    Must,
    /// A2A spec SHOULD: reported, never blocks promotion.
    Should,
    /// Registry policy (docs/trust-model.md), blocking like a MUST.
    Policy,
}

impl Level {
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Must => "must",
            Level::Should => "should",
            Level::Policy => "policy",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FindingStatus {
    Pass,
    Fail,
    /// The probe could not drive the callee into the situation the rule is about.
    NotExercised,
}

/// One checked rule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Finding {
    /// The rule, serialized as its stable code, e.g. `LC-TERMINAL-NO-TIMESTAMP`.
    pub code: Rule,
    pub level: Level,
    pub status: FindingStatus,
    pub message: String,
    /// The demotion class this failure triggers, if any.
    pub trigger: Option<DemotionClass>,
}

/// The probe cycle's result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Verdict {
    /// A complete cycle passed: the subject may be promoted.
    pub passed: bool,
    /// Why not, one line per blocking finding.
    pub reasons: Vec<String>,
    /// Demotion triggers the cycle observed, with the finding that fired each.
    pub triggers: Vec<(DemotionClass, String)>,
    /// For decisions: `Ok` when the full lifecycle was observed, else what was wrong.
    pub lifecycle: Result<(), String>,
    /// Transitions without a usable `status.timestamp`, labelled.
    pub untimestamped: Vec<String>,
    /// Credentials kept the cycle from exercising the callee: why. Decisions then know
    /// nothing of its lifecycle (`unknown`), which is not a failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unexercised: Option<String>,
    /// The sha256 of the authenticated extended card whose capabilities were judged, when
    /// one was (decisions name it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extended_card: Option<String>,
    /// The rulebook version the verdict was judged under (`None` on runs from before
    /// rulebooks were versioned).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rulebook: Option<String>,
    /// How the cycle's trials went (`None`: one trial, judged before trials existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trials: Option<trials::Tally>,
}

impl Verdict {
    /// How the cycle's trials went; a verdict judged before trials existed counts as one.
    pub fn tally(&self) -> trials::Tally {
        self.trials
            .clone()
            .unwrap_or_else(|| trials::Tally::single(self.passed))
    }
}

/// Findings, capability results and verdict of one cycle.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Judgement {
    pub findings: Vec<Finding>,
    pub capabilities: BTreeMap<Capability, CapabilityOutcome>,
    pub verdict: Verdict,
}

/// Where a probe run is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RunStatus {
    Queued,
    Running,
    Finished,
    /// Cut short (shutdown, crash); never promotes.
    Aborted,
}

impl RunStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Queued => "queued",
            Self::Running => "running",
            Self::Finished => "finished",
            Self::Aborted => "aborted",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        [Self::Queued, Self::Running, Self::Finished, Self::Aborted]
            .into_iter()
            .find(|v| v.as_str() == s)
    }
}

/// One probe run: what was asked, and where it stands.
#[derive(Debug, Clone, PartialEq)]
pub struct ProbeRun {
    pub id: super::ids::ProbeRunId,
    pub callee_id: super::ids::CalleeId,
    pub protocol_version: super::version::ProtocolVersion,
    pub reason: String,
    pub requested_by: String,
    pub created_at: Timestamp,
    pub push_token: String,
    /// The binding the requester asked for; `None`: cardgate's preferred one on the card.
    pub binding: Option<super::binding::Binding>,
    pub state: RunState,
    /// The ledger events the run caused.
    pub ledger_seqs: Vec<i64>,
}

/// Where a run stands; each state carries what exists in it and nothing more.
#[derive(Debug, Clone, PartialEq)]
pub enum RunState {
    Queued,
    Running(RunStart),
    Finished {
        start: RunStart,
        finished_at: Timestamp,
        judgement: Box<Judgement>,
        /// What the cycle observed and exchanged; left out of listings, which stay light.
        evidence: Option<Box<RunEvidence>>,
    },
    /// Cut short (shutdown, crash, a failed job) or refused before it started; never promotes.
    Aborted {
        /// Present when the cycle had started.
        start: Option<RunStart>,
        finished_at: Timestamp,
        reason: String,
    },
}

/// How a run started: when, against which interface, and the ledger head it saw.
#[derive(Debug, Clone, PartialEq)]
pub struct RunStart {
    pub at: Timestamp,
    pub interface_url: String,
    pub wire: String,
    /// The ledger head seq when the run started (see [`crate::gate::ProbeStart`]);
    /// `None` on runs from before seqs were kept.
    pub seq: Option<i64>,
}

/// A finished run's full evidence.
#[derive(Debug, Clone, PartialEq)]
pub struct RunEvidence {
    pub observations: Observations,
    /// The exchanges as stored (redacted); empty once retention pruned them.
    pub transcript: Value,
    /// When retention pruned the transcript (the observations and the verdict stay).
    pub transcript_pruned_at: Option<Timestamp>,
}

impl ProbeRun {
    pub fn status(&self) -> RunStatus {
        match self.state {
            RunState::Queued => RunStatus::Queued,
            RunState::Running(_) => RunStatus::Running,
            RunState::Finished { .. } => RunStatus::Finished,
            RunState::Aborted { .. } => RunStatus::Aborted,
        }
    }

    pub fn start(&self) -> Option<&RunStart> {
        match &self.state {
            RunState::Queued => None,
            RunState::Running(start) | RunState::Finished { start, .. } => Some(start),
            RunState::Aborted { start, .. } => start.as_ref(),
        }
    }

    pub fn finished_at(&self) -> Option<Timestamp> {
        match &self.state {
            RunState::Finished { finished_at, .. } | RunState::Aborted { finished_at, .. } => {
                Some(*finished_at)
            }
            _ => None,
        }
    }

    pub fn judgement(&self) -> Option<&Judgement> {
        match &self.state {
            RunState::Finished { judgement, .. } => Some(judgement),
            _ => None,
        }
    }

    /// Whether a finished run passed; `None` until it finished, and for an aborted run.
    pub fn passed(&self) -> Option<bool> {
        self.judgement().map(|j| j.verdict.passed)
    }

    pub fn evidence(&self) -> Option<&RunEvidence> {
        match &self.state {
            RunState::Finished { evidence, .. } => evidence.as_deref(),
            _ => None,
        }
    }

    /// Why an aborted run stopped.
    pub fn abort_reason(&self) -> Option<&str> {
        match &self.state {
            RunState::Aborted { reason, .. } => Some(reason),
            _ => None,
        }
    }
}

/// A delivery to the push webhook.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PushDelivery {
    pub received_at: Timestamp,
    pub headers: Value,
    pub body: Vec<u8>,
}

#[cfg(test)]
mod script_tests {
    use super::ProbeScript;

    #[test]
    fn a_text_is_empty_as_the_schema_says_and_no_otherwise() {
        let with = |message: &str| ProbeScript {
            message: message.into(),
            ..ProbeScript::default()
        };
        for empty in ["", " ", "\t\n", "\u{a0}\u{3000}", "\u{feff}"] {
            assert!(with(empty).validate().is_err(), "{empty:?}");
        }
        // Not whitespace to the schema's `\S` (ECMAScript), so not empty here either.
        for text in ["\u{85}", "ñ", " x "] {
            assert!(with(text).validate().is_ok(), "{text:?}");
        }
    }
}
