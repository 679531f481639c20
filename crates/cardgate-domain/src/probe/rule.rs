//! The rules a probe cycle checks, one variant each: its stable code (callers and dashboards
//! key on it), the level it is reported at, the demotion class its failure can trigger and
//! whether the verdict needs it to pass. The README's table is generated from here and a test
//! keeps the two equal.

use serde::{Deserialize, Serialize};

use super::Level;
use crate::capability::Capability;
use crate::demotion::DemotionClass;
use crate::version::ProtocolVersion;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Rule {
    #[serde(rename = "PROBE-AUTH")]
    Auth,
    #[serde(rename = "PROBE-EXTENDED-CARD")]
    ExtendedCard,
    #[serde(rename = "LC-TASK-CREATED")]
    TaskCreated,
    #[serde(rename = "LC-FULL-LIFECYCLE")]
    FullLifecycle,
    #[serde(rename = "LC-TIMESTAMPS")]
    Timestamps,
    #[serde(rename = "LC-TERMINAL-NO-TIMESTAMP")]
    TerminalNoTimestamp,
    #[serde(rename = "LC-TIMESTAMP-FORMAT")]
    TimestampFormat,
    #[serde(rename = "LC-TIMESTAMP-ORDER")]
    TimestampOrder,
    #[serde(rename = "LC-SINGLE-TERMINAL")]
    SingleTerminal,
    #[serde(rename = "LC-NOTHING-AFTER-TERMINAL")]
    NothingAfterTerminal,
    #[serde(rename = "LC-TERMINAL-STAYS")]
    TerminalStays,
    #[serde(rename = "LC-TERMINAL-CANCEL")]
    TerminalCancel,
    #[serde(rename = "LC-TERMINAL-SEND")]
    TerminalSend,
    #[serde(rename = "LC-RESUBSCRIBE")]
    Resubscribe,
    #[serde(rename = "LC-RESUBSCRIBE-LIVE")]
    ResubscribeLive,
    #[serde(rename = "LC-IDS-CONSISTENT")]
    IdsConsistent,
    #[serde(rename = "LC-GET-AGREES")]
    GetAgrees,
    #[serde(rename = "LC-WELL-FORMED")]
    WellFormed,
    #[serde(rename = "LC-WIRE-VERSION")]
    WireVersion,
    #[serde(rename = "LC-INPUT-REQUIRED")]
    InputRequired,
    #[serde(rename = "LC-CANCEL")]
    Cancel,
    #[serde(rename = "PROBE-TRANSCRIPT")]
    Transcript,
    #[serde(rename = "CAP-STREAMING")]
    Streaming,
    #[serde(rename = "CAP-PUSH")]
    Push,
    #[serde(rename = "PUSH-TOKEN")]
    PushToken,
    #[serde(rename = "PUSH-EVERY-STATE")]
    PushEveryState,
    #[serde(rename = "CAP-HISTORY")]
    History,
}

impl Rule {
    /// Every rule, in the order a cycle reports them (capabilities last).
    pub const ALL: [Rule; 27] = [
        Rule::Auth,
        Rule::ExtendedCard,
        Rule::TaskCreated,
        Rule::FullLifecycle,
        Rule::Timestamps,
        Rule::TerminalNoTimestamp,
        Rule::TimestampFormat,
        Rule::TimestampOrder,
        Rule::SingleTerminal,
        Rule::NothingAfterTerminal,
        Rule::TerminalStays,
        Rule::TerminalCancel,
        Rule::TerminalSend,
        Rule::Resubscribe,
        Rule::ResubscribeLive,
        Rule::IdsConsistent,
        Rule::GetAgrees,
        Rule::WellFormed,
        Rule::WireVersion,
        Rule::InputRequired,
        Rule::Cancel,
        Rule::Transcript,
        Rule::Streaming,
        Rule::Push,
        Rule::PushToken,
        Rule::PushEveryState,
        Rule::History,
    ];

    pub fn code(self) -> &'static str {
        match self {
            Rule::Auth => "PROBE-AUTH",
            Rule::ExtendedCard => "PROBE-EXTENDED-CARD",
            Rule::TaskCreated => "LC-TASK-CREATED",
            Rule::FullLifecycle => "LC-FULL-LIFECYCLE",
            Rule::Timestamps => "LC-TIMESTAMPS",
            Rule::TerminalNoTimestamp => "LC-TERMINAL-NO-TIMESTAMP",
            Rule::TimestampFormat => "LC-TIMESTAMP-FORMAT",
            Rule::TimestampOrder => "LC-TIMESTAMP-ORDER",
            Rule::SingleTerminal => "LC-SINGLE-TERMINAL",
            Rule::NothingAfterTerminal => "LC-NOTHING-AFTER-TERMINAL",
            Rule::TerminalStays => "LC-TERMINAL-STAYS",
            Rule::TerminalCancel => "LC-TERMINAL-CANCEL",
            Rule::TerminalSend => "LC-TERMINAL-SEND",
            Rule::Resubscribe => "LC-RESUBSCRIBE",
            Rule::ResubscribeLive => "LC-RESUBSCRIBE-LIVE",
            Rule::IdsConsistent => "LC-IDS-CONSISTENT",
            Rule::GetAgrees => "LC-GET-AGREES",
            Rule::WellFormed => "LC-WELL-FORMED",
            Rule::WireVersion => "LC-WIRE-VERSION",
            Rule::InputRequired => "LC-INPUT-REQUIRED",
            Rule::Cancel => "LC-CANCEL",
            Rule::Transcript => "PROBE-TRANSCRIPT",
            Rule::Streaming => "CAP-STREAMING",
            Rule::Push => "CAP-PUSH",
            Rule::PushToken => "PUSH-TOKEN",
            Rule::PushEveryState => "PUSH-EVERY-STATE",
            Rule::History => "CAP-HISTORY",
        }
    }

    /// The level the rule is reported at for a subject at `version`: its [`Rule::level`],
    /// except `LC-TIMESTAMP-FORMAT`, a SHOULD before v1.0 (v0.2/v0.3 only ask for ISO 8601
    /// UTC; v1.0 makes the `Z` form a MUST).
    pub fn level_at(self, version: ProtocolVersion) -> Level {
        match self {
            Rule::TimestampFormat if version.is_pre_1_0() => Level::Should,
            _ => self.level(),
        }
    }

    /// The level the rule is reported at on v1.0 (`LC-TASK-CREATED` is reported at policy
    /// when the agent answers with a Message: there is no task to require).
    pub fn level(self) -> Level {
        match self {
            Rule::TaskCreated
            | Rule::TimestampFormat
            | Rule::SingleTerminal
            | Rule::NothingAfterTerminal
            | Rule::TerminalStays
            | Rule::TerminalSend
            | Rule::ResubscribeLive
            | Rule::IdsConsistent
            | Rule::GetAgrees
            | Rule::WellFormed
            | Rule::InputRequired => Level::Must,
            Rule::ExtendedCard
            | Rule::TerminalCancel
            | Rule::Resubscribe
            | Rule::WireVersion
            | Rule::Cancel
            | Rule::Transcript
            | Rule::PushToken
            | Rule::PushEveryState => Level::Should,
            Rule::Auth
            | Rule::FullLifecycle
            | Rule::Timestamps
            | Rule::TerminalNoTimestamp
            | Rule::TimestampOrder
            | Rule::Streaming
            | Rule::Push
            | Rule::History => Level::Policy,
        }
    }

    /// The demotion class a failure of this rule can trigger (for `CAP-PUSH`, only a
    /// registration refused after the retry budget does).
    pub fn trigger(self) -> Option<DemotionClass> {
        match self {
            Rule::TerminalNoTimestamp => Some(DemotionClass::Timestamp),
            Rule::SingleTerminal
            | Rule::NothingAfterTerminal
            | Rule::TerminalStays
            | Rule::TerminalSend => Some(DemotionClass::Terminal),
            Rule::Push => Some(DemotionClass::Push),
            Rule::History => Some(DemotionClass::History),
            _ => None,
        }
    }

    /// What the rule checks, in a line.
    pub fn summary(self) -> &'static str {
        match self {
            Rule::Auth => {
                "the probe presents the credentials the card requires, and the agent accepts them"
            }
            Rule::ExtendedCard => {
                "an offered authenticated extended card is fetched with the credentials and verifies"
            }
            Rule::TaskCreated => "the first message creates a task",
            Rule::FullLifecycle => "the task is seen alive, then ends",
            Rule::Timestamps => "every transition carries a `status.timestamp` naming an instant",
            Rule::TerminalNoTimestamp => "every terminal transition carries one",
            Rule::TimestampFormat => "timestamps are spelled RFC 3339 UTC with `Z`",
            Rule::TimestampOrder => "timestamps never go backwards within a channel",
            Rule::SingleTerminal => "one terminal state per task and stream",
            Rule::NothingAfterTerminal => "nothing follows a terminal state",
            Rule::TerminalStays => {
                "an ended task stays ended (cancel, send, get, resubscribe), a canceled one too"
            }
            Rule::TerminalCancel => "cancelling an ended task is refused as not cancelable",
            Rule::TerminalSend => {
                "a message to an ended task is refused as an unsupported operation"
            }
            Rule::Resubscribe => {
                "resubscribing to an ended task is refused, or replays its end and closes"
            }
            Rule::ResubscribeLive => {
                "resubscribing to a live task sends it as it is, then its next transitions to the end"
            }
            Rule::IdsConsistent => "task and context ids agree across channels",
            Rule::GetAgrees => "GetTask agrees with the terminal state the other channels reported",
            Rule::WellFormed => "every answer and event is a well-formed A2A object",
            Rule::WireVersion => "states are spelled as the subject's version spells them",
            Rule::InputRequired => "a follow-up with the task's ids resumes an input-required task",
            Rule::Cancel => "CancelTask on a live task cancels it",
            Rule::Transcript => "the stored transcript is whole (not cut to its budget)",
            Rule::Streaming => {
                "the advertised stream carries the lifecycle and closes after its end"
            }
            Rule::Push => "the advertised push notifications register and arrive",
            Rule::PushToken => "deliveries carry the caller's token in `X-A2A-Notification-Token`",
            Rule::PushEveryState => "every state change is delivered, not the terminal state only",
            Rule::History => "the advertised history grows as the task moves",
        }
    }

    /// What the rule enforces: the A2A v1.0 section and the ACTS requirement (conformance suite
    /// of a2aproject/A2A, `tests/acts`, with its level), or, where cardgate asks for more than
    /// the spec, "registry policy" and why. Findings, the README's table and the API carry it.
    pub fn source(self) -> &'static str {
        match self {
            Rule::Auth => "registry policy: the probe needs access (A2A v1.0 §7.4)",
            Rule::ExtendedCard => "A2A v1.0 §3.1.11, §8.4.3 (verify: SHOULD); ACTS CARD-EXT-001",
            Rule::TaskCreated => {
                "registry policy: a Task, not a Message (MAY, §3.1.1); taskId MUST (§3.4.2)"
            }
            Rule::FullLifecycle => "registry policy: a task seen alive, then ended; no spec graph",
            Rule::Timestamps => {
                "registry policy: `status.timestamp` is optional (A2A v1.0 §4.1.2); dedup needs it"
            }
            Rule::TerminalNoTimestamp => {
                "registry policy: optional in the spec; cf. ACTS DM-SERIAL-001 (MUST)"
            }
            Rule::TimestampFormat => "A2A v1.0 §5.6.1 (UTC, `Z`: MUST); ACTS DM-SERIAL-001 (MUST)",
            Rule::TimestampOrder => "registry policy: the spec orders events (§3.5.2), not times",
            Rule::SingleTerminal => "A2A v1.0 §3.1.2, §4.1.3; ACTS STREAM-SSE-001 (MUST)",
            Rule::NothingAfterTerminal => "A2A v1.0 §3.1.2, §3.1.6; ACTS STREAM-SUB-002 (MUST)",
            Rule::TerminalStays => {
                "A2A v1.0 §3.1.1, §3.1.5, §3.1.6; ACTS CORE-SEND-002, CORE-CANCEL-002 (MUST)"
            }
            Rule::TerminalCancel => "A2A v1.0 §3.1.5; ACTS CORE-CANCEL-002, CORE-ERR-003 (MUST)",
            Rule::TerminalSend => "A2A v1.0 §3.1.1; ACTS CORE-SEND-002, CORE-ERR-004 (MUST)",
            Rule::Resubscribe => "A2A v1.0 §3.1.6, §9.4.6; ACTS STREAM-SUB-003 (MUST)",
            Rule::ResubscribeLive => {
                "A2A v1.0 §3.1.6; ACTS STREAM-SSE-004 (MUST), STREAM-SUB-001 (SHOULD)"
            }
            Rule::IdsConsistent => "A2A v1.0 §3.4.2, §3.4.3; ACTS CORE-MULTI-005 (MUST)",
            Rule::GetAgrees => "A2A v1.0 §3.1.3; ACTS CORE-GET-001 (MUST)",
            Rule::WellFormed => "A2A v1.0 §5.5, §5.7; ACTS JSONRPC-ENV-001, DM-FMT-001 (MUST)",
            Rule::WireVersion => "A2A v1.0 §5.5, §3.6.2; ACTS DM-FMT-002 (MUST)",
            Rule::InputRequired => "A2A v1.0 §3.4.3; ACTS CORE-MULTI-001 (MUST)",
            Rule::Cancel => "A2A v1.0 §3.1.5 (success not guaranteed); ACTS CORE-CANCEL-001 (MUST)",
            Rule::Transcript => "registry policy: cardgate's own evidence is whole",
            Rule::Streaming => "A2A v1.0 §3.1.2; ACTS STREAM-SSE-001, STREAM-SUB-002 (MUST)",
            Rule::Push => {
                "A2A v1.0 §3.1.7, §4.3.3; ACTS PUSH-CFG-001 (MAY); the terminal push: registry policy"
            }
            Rule::PushToken => {
                "registry policy: the token's header is named only in A2A v0.3 §9.5 (\"or similar\")"
            }
            Rule::PushEveryState => "A2A v1.0 §4.3.3; ACTS PUSH-DELIV-002 (MAY)",
            Rule::History => {
                "registry policy: v0.3 `stateTransitionHistory` (no behaviour defined)"
            }
        }
    }

    /// The capability this rule judges (the capability's own result follows its finding).
    pub fn capability(self) -> Option<Capability> {
        match self {
            Rule::Streaming => Some(Capability::Streaming),
            Rule::Push => Some(Capability::PushNotifications),
            Rule::History => Some(Capability::StateTransitionHistory),
            _ => None,
        }
    }

    /// The capability the card must advertise for this rule to be judged at all: the
    /// capability rules' own, and push notifications for the interop findings about deliveries.
    pub fn needs(self) -> Option<Capability> {
        match self {
            Rule::PushToken | Rule::PushEveryState => Some(Capability::PushNotifications),
            _ => self.capability(),
        }
    }

    /// Whether the verdict needs the rule to pass: not-exercised blocks promotion as a failure
    /// does (a cycle that never saw the lifecycle, or its timestamps, proved nothing).
    pub fn required(self) -> bool {
        matches!(self, Rule::FullLifecycle | Rule::Timestamps)
    }

    /// The rules whose failure says the lifecycle itself is broken (the decision's
    /// `lifecycle-probe` condition), in the order the first one found is reported.
    pub const LIFECYCLE: [Rule; 4] = [
        Rule::FullLifecycle,
        Rule::SingleTerminal,
        Rule::NothingAfterTerminal,
        Rule::TerminalStays,
    ];

    /// The README's table of rules: code, level, what a failure demotes.
    pub fn markdown_table() -> String {
        let mut out = String::from(
            "| code | checks that | level | a failure demotes | source |\n|---|---|---|---|---|\n",
        );
        for rule in Rule::ALL {
            let v03 = ProtocolVersion::new(0, 3);
            let level = match (rule.level(), rule.level_at(v03)) {
                (v1, v03) if v1 == v03 => v1.as_str().to_string(),
                (v1, v03) => format!("{} (v0.x: {})", v1.as_str(), v03.as_str()),
            };
            let required = if rule.required() { ", must pass" } else { "" };
            let demotes = rule.trigger().map_or("—", DemotionClass::as_str);
            out.push_str(&format!(
                "| `{}` | {} | {level}{required} | {demotes} | {} |\n",
                rule.code(),
                rule.summary(),
                rule.source()
            ));
        }
        out
    }
}

impl std::fmt::Display for Rule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.code())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_through_serde_and_are_unique() {
        let mut seen = std::collections::BTreeSet::new();
        for rule in Rule::ALL {
            let json = serde_json::to_value(rule).unwrap();
            assert_eq!(json, rule.code());
            assert_eq!(serde_json::from_value::<Rule>(json).unwrap(), rule);
            assert!(seen.insert(rule.code()), "{rule} twice");
        }
    }
}
