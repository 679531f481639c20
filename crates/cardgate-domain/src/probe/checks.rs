//! The rules of a probe cycle: observations in, findings, capability results and a verdict out.
//!
//! Codes are stable (callers and dashboards key on them). Levels: spec MUST and registry
//! policy block promotion when they fail; SHOULD is reported only. A rule whose situation the
//! probe could not create is `not-exercised`: never a pass, never a fail.

use std::collections::{BTreeMap, BTreeSet};

use super::events::is_utc_z;
use super::rule::Rule;
use super::{
    AccessBlock, Channel, EndedCancel, EndedResubscribe, EndedSend, ExtendedCard, Finding,
    FindingStatus, Judgement, Level, Observations, PushRun, Source, Spelling, StreamEnd, StreamRun,
    TaskRole, TaskState, Transition, Verdict,
};
use crate::capability::Capability;
use crate::capability::CapabilityOutcome;
use crate::demotion::DemotionClass;
use crate::time::Timestamp;
use crate::version::ProtocolVersion;

/// Judges one probe cycle of a subject at `version` whose interface advertises `advertised`.
pub fn evaluate(
    obs: &Observations,
    version: ProtocolVersion,
    advertised: &BTreeSet<Capability>,
) -> Judgement {
    if let Some(block) = &obs.access.blocked {
        return unexercised(block, version, advertised);
    }
    let lifecycle: Vec<&Transition> = obs
        .transitions
        .iter()
        .filter(|t| t.role == TaskRole::Lifecycle)
        .collect();
    let mut findings = vec![
        auth(obs),
        extended_card(obs),
        task_created(obs),
        full_lifecycle(obs, &lifecycle),
        timestamps(obs),
        terminal_timestamp(obs),
        timestamp_format(obs, version),
        timestamp_order(obs),
        single_terminal(obs),
        nothing_after_terminal(obs),
        terminal_stays(obs),
        terminal_cancel(obs),
        terminal_send(obs),
        resubscription(obs),
        resubscribe_live(obs, advertised),
        ids_consistent(obs),
        get_agrees(obs),
        well_formed(obs),
        wire_version(obs, version),
        input_required(obs, &lifecycle),
        cancel(obs),
        transcript(obs),
    ];

    let mut capabilities = BTreeMap::new();
    for cap in Capability::ALL {
        let (outcome, finding) = if !advertised.contains(&cap) {
            (CapabilityOutcome::NotAdvertised, None)
        } else {
            let finding = match cap {
                Capability::Streaming => streaming(obs),
                Capability::PushNotifications => push(obs.push.as_ref(), obs),
                Capability::StateTransitionHistory => history(obs),
            };
            let outcome = match finding.status {
                FindingStatus::Pass => CapabilityOutcome::Passed,
                FindingStatus::Fail => CapabilityOutcome::Failed {
                    reason: finding.message.as_str().into(),
                },
                FindingStatus::NotExercised => CapabilityOutcome::NotExercised {
                    reason: finding.message.as_str().into(),
                },
            };
            (outcome, Some(finding))
        };
        findings.extend(finding);
        if cap == Capability::PushNotifications && advertised.contains(&cap) {
            findings.extend(obs.push.as_ref().map(push_token));
            findings.extend(obs.push.as_ref().map(|run| push_every_state(run, obs)));
        }
        if !(cap == Capability::StateTransitionHistory
            && !version.is_pre_1_0()
            && outcome == CapabilityOutcome::NotAdvertised)
        {
            capabilities.insert(cap, outcome);
        }
    }

    let verdict = verdict(&findings, obs);
    Judgement {
        findings,
        capabilities,
        verdict,
    }
}

/// The judgement of a cycle that credentials kept from the callee: `PROBE-AUTH` says why
/// (a failure when credentials were refused, not-exercised when none are configured), and
/// every other rule and advertised capability is not-exercised with that reason. Nothing
/// fails, so nothing demotes; nothing passes, so nothing promotes.
fn unexercised(
    block: &AccessBlock,
    version: ProtocolVersion,
    advertised: &BTreeSet<Capability>,
) -> Judgement {
    let reason = block.reason().to_string();
    let auth_status = match block {
        AccessBlock::Missing { .. } => NotExercised,
        AccessBlock::Refused { .. } => Fail,
    };
    let because = format!("not exercised: {reason}");
    let mut findings = vec![finding(Rule::Auth, auth_status, reason.clone())];
    let mut capabilities = BTreeMap::new();
    for rule in Rule::ALL {
        if rule == Rule::Auth {
            continue;
        }
        if let Some(cap) = rule.needs().filter(|cap| !advertised.contains(cap)) {
            if rule.capability().is_some()
                && (cap != Capability::StateTransitionHistory || version.is_pre_1_0())
            {
                capabilities.insert(cap, CapabilityOutcome::NotAdvertised);
            }
            continue;
        }
        if let Some(cap) = rule.capability() {
            capabilities.insert(
                cap,
                CapabilityOutcome::NotExercised {
                    reason: because.as_str().into(),
                },
            );
        }
        findings.push(finding_at(
            rule,
            rule.level_at(version),
            NotExercised,
            because.clone(),
        ));
    }
    let verdict = Verdict {
        passed: false,
        reasons: vec![format!("{}: {reason}", Rule::Auth)],
        triggers: Vec::new(),
        lifecycle: Err(format!("{}: {reason}", Rule::Auth)),
        untimestamped: Vec::new(),
        unexercised: Some(reason),
        extended_card: None,
        rulebook: None,
        trials: None,
    };
    Judgement {
        findings,
        capabilities,
        verdict,
    }
}

/// `PROBE-AUTH` of a cycle that reached the callee: what it presented, if anything.
fn auth(obs: &Observations) -> Finding {
    match &obs.access.presented {
        Some(presented) => finding(
            Rule::Auth,
            Pass,
            format!("{presented}; the agent accepted them"),
        ),
        None => finding(
            Rule::Auth,
            Pass,
            "the card requires no credentials, and the agent answered without",
        ),
    }
}

/// `PROBE-EXTENDED-CARD`: a SHOULD, since the public card is still judged when the extended
/// one is unusable.
fn extended_card(obs: &Observations) -> Finding {
    const CODE: Rule = Rule::ExtendedCard;
    match &obs.extended_card {
        None => finding(
            CODE,
            NotExercised,
            "the card offers no authenticated extended card",
        ),
        Some(ExtendedCard::Skipped { reason }) => finding(CODE, NotExercised, reason.clone()),
        Some(ExtendedCard::Refused { reason }) => finding(
            CODE,
            Fail,
            format!("{reason}; capabilities were judged as the public card declares them"),
        ),
        Some(ExtendedCard::Used {
            sha256, signature, ..
        }) => finding(
            CODE,
            Pass,
            format!(
                "fetched with the credentials (sha256 {}, signature {signature}); capabilities were judged as it declares them",
                &sha256[..16.min(sha256.len())]
            ),
        ),
    }
}

/// A finding of `rule` at the rule's own level.
fn finding(rule: Rule, status: FindingStatus, message: impl Into<String>) -> Finding {
    finding_at(rule, rule.level(), status, message)
}

fn finding_at(
    rule: Rule,
    level: Level,
    status: FindingStatus,
    message: impl Into<String>,
) -> Finding {
    Finding {
        code: rule,
        level,
        status,
        message: message.into(),
        trigger: None,
    }
}

use FindingStatus::{Fail, NotExercised, Pass};

fn task_created(obs: &Observations) -> Finding {
    const CODE: Rule = Rule::TaskCreated;
    if obs.message_only.contains(&TaskRole::Lifecycle) {
        return finding_at(
            CODE,
            Level::Policy,
            NotExercised,
            "the agent answered the probe with a Message, not a Task: there is no lifecycle to test",
        );
    }
    match obs
        .tasks
        .get(&TaskRole::Lifecycle)
        .and_then(|t| t.task_id.as_ref())
    {
        Some(id) => finding(CODE, Pass, format!("the agent created task {id}")),
        None => {
            let why = problems_of(obs, TaskRole::Lifecycle)
                .first()
                .cloned()
                .unwrap_or_else(|| "no task id was returned".into());
            finding(
                CODE,
                Fail,
                format!("the first message did not create a task: {why}"),
            )
        }
    }
}

/// Consecutive duplicates removed: the sequence of states the task went through.
fn path(transitions: &[&Transition]) -> Vec<TaskState> {
    let mut out: Vec<TaskState> = Vec::new();
    for t in transitions {
        if out.last() != Some(&t.state) {
            out.push(t.state);
        }
    }
    out
}

fn path_text(states: &[TaskState]) -> String {
    if states.is_empty() {
        return "nothing".into();
    }
    states
        .iter()
        .map(|s| s.as_str())
        .collect::<Vec<_>>()
        .join(" → ")
}

fn full_lifecycle(obs: &Observations, lifecycle: &[&Transition]) -> Finding {
    const CODE: Rule = Rule::FullLifecycle;
    // Which states were seen is read from every channel; their order only from within one
    // channel, or from the agent's own timestamps (docs/trust-model.md, rule 3).
    let seen = seen_text(lifecycle);
    let saw = |p: fn(TaskState) -> bool| lifecycle.iter().any(|t| p(t.state));
    // The spec defines no transition graph beyond terminal and interrupted states, and lets an
    // agent skip `submitted`: a caller needs the task seen alive before its end, then ending.
    let before_end = saw(|s| !s.is_terminal());
    let terminal = saw(TaskState::is_terminal);
    // `submitted` again is a step back, unless a follow-up lies between: a new turn may start
    // as a new submission (the spec has no transition graph that rules it out).
    let follow_ups = follow_up_calls(obs, TaskRole::Lifecycle);
    let backwards: Vec<String> = out_of_order(lifecycle)
        .into_iter()
        .filter(|o| o.later.state == TaskState::Submitted && !o.earlier.state.is_terminal())
        .filter(|o| !turn_between(obs, &follow_ups, o.earlier, o.later))
        .map(|o| o.describe())
        .collect();
    match (before_end, terminal) {
        (true, true) if backwards.is_empty() => finding(CODE, Pass, format!("observed {seen}")),
        (true, true) => finding(
            CODE,
            Fail,
            format!(
                "observed {seen}, but `submitted` came after a later live state: {}",
                backwards.join("; ")
            ),
        ),
        _ if obs.message_only.contains(&TaskRole::Lifecycle) => finding(
            CODE,
            NotExercised,
            "the agent answered with a Message, so no task lifecycle was observed",
        ),
        (_, false) if obs.follow_ups_exhausted => finding(
            CODE,
            NotExercised,
            format!(
                "observed {seen}: the task kept asking for input after the probe script's follow-ups ran out"
            ),
        ),
        (false, _) => finding(
            CODE,
            Fail,
            format!("observed {seen}: the task was never seen in a state before its end"),
        ),
        (_, false) => finding(
            CODE,
            Fail,
            format!("observed {seen}: the task never reached a terminal state"),
        ),
    }
}

/// The states each channel saw, in its own order: `stream 1: submitted → working → completed;
/// GetTask answers: completed`.
fn seen_text(transitions: &[&Transition]) -> String {
    let by_channel = by_channel(transitions);
    if by_channel.is_empty() {
        return "nothing".into();
    }
    by_channel
        .iter()
        .map(|(channel, ts)| format!("{channel}: {}", path_text(&path(ts))))
        .collect::<Vec<_>>()
        .join("; ")
}

/// Transitions grouped by the channel that carried them, each group in arrival order.
fn by_channel<'a>(transitions: &[&'a Transition]) -> BTreeMap<Channel, Vec<&'a Transition>> {
    let mut channels: BTreeMap<Channel, Vec<&Transition>> = BTreeMap::new();
    for t in transitions {
        channels.entry(t.channel()).or_default().push(t);
    }
    channels
}

/// Where a task's states go: `submitted` first, terminal last, anything else in between
/// (`working` ⇄ `input-required` loops are allowed).
fn rank(state: TaskState) -> u8 {
    match state {
        TaskState::Submitted => 0,
        s if s.is_terminal() => 2,
        _ => 1,
    }
}

/// Two observations of one task in an order its lifecycle forbids.
struct OutOfOrder<'a> {
    earlier: &'a Transition,
    later: &'a Transition,
    /// The channel both arrived on, or `None` when the agent's timestamps order them.
    channel: Option<Channel>,
}

impl OutOfOrder<'_> {
    fn describe(&self) -> String {
        match self.channel {
            Some(channel) => format!(
                "{} after {} on {channel}",
                self.later.label(),
                self.earlier.label()
            ),
            None => format!(
                "{} stamped {} after {} stamped {}",
                self.later.label(),
                self.later.timestamp.as_deref().unwrap_or_default(),
                self.earlier.label(),
                self.earlier.timestamp.as_deref().unwrap_or_default()
            ),
        }
    }
}

/// Every pair of one task's observations that goes backwards in its lifecycle (a live state
/// after a terminal one, `submitted` after a later state), judged only where order is
/// evidence: arrival within one channel, or the agent's own timestamps across channels.
/// Two terminal observations are not a pair here (see LC-SINGLE-TERMINAL and LC-GET-AGREES).
fn out_of_order<'a>(transitions: &[&'a Transition]) -> Vec<OutOfOrder<'a>> {
    let backwards = |a: &Transition, b: &Transition| {
        rank(b.state) < rank(a.state) || (rank(a.state) == 2 && rank(b.state) == 1)
    };
    let mut found = Vec::new();
    for (channel, ts) in by_channel(transitions) {
        for (i, later) in ts.iter().enumerate() {
            if let Some(earlier) = ts[..i].iter().find(|e| backwards(e, later)) {
                found.push(OutOfOrder {
                    earlier,
                    later,
                    channel: Some(channel),
                });
            }
        }
    }
    for later in transitions {
        let Some(later_at) = later.parsed_timestamp else {
            continue;
        };
        let earlier = transitions.iter().find(|e| {
            e.channel() != later.channel()
                && e.parsed_timestamp.is_some_and(|at| at < later_at)
                && backwards(e, later)
        });
        if let Some(earlier) = earlier {
            found.push(OutOfOrder {
                earlier,
                later,
                channel: None,
            });
        }
    }
    found
}

fn timestamps(obs: &Observations) -> Finding {
    const CODE: Rule = Rule::Timestamps;
    if obs.transitions.is_empty() {
        return finding(CODE, NotExercised, "no transitions were observed");
    }
    let (absent, no_instant) = without_instant(obs.transitions.iter());
    if absent.is_empty() && no_instant.is_empty() {
        finding(
            CODE,
            Pass,
            format!(
                "all {} observed transitions carry a status.timestamp that names an instant",
                obs.transitions.len()
            ),
        )
    } else {
        finding(
            CODE,
            Fail,
            missing_text("transitions", &absent, &no_instant),
        )
    }
}

/// The transitions among `ts` whose timestamp is absent, and those whose timestamp names no
/// instant (no zone, unparseable): both count as missing, and reasons say which was which.
fn without_instant<'a>(ts: impl Iterator<Item = &'a Transition>) -> (Vec<String>, Vec<String>) {
    let (mut absent, mut no_instant) = (Vec::new(), Vec::new());
    for t in ts.filter(|t| t.parsed_timestamp.is_none()) {
        match &t.timestamp {
            None => absent.push(t.label()),
            Some(raw) => no_instant.push(format!("{} `{raw}`", t.label())),
        }
    }
    (absent, no_instant)
}

fn missing_text(what: &str, absent: &[String], no_instant: &[String]) -> String {
    let mut parts = Vec::new();
    if !absent.is_empty() {
        parts.push(format!(
            "{what} without status.timestamp: {}",
            absent.join(", ")
        ));
    }
    if !no_instant.is_empty() {
        parts.push(format!(
            "{what} whose status.timestamp names no instant (no zone, or unparseable): {}",
            no_instant.join(", ")
        ));
    }
    parts.join("; ")
}

fn untimestamped(obs: &Observations) -> Vec<String> {
    obs.transitions
        .iter()
        .filter(|t| t.parsed_timestamp.is_none())
        .map(Transition::label)
        .collect()
}

fn terminal_timestamp(obs: &Observations) -> Finding {
    const CODE: Rule = Rule::TerminalNoTimestamp;
    let terminals: Vec<&Transition> = obs
        .transitions
        .iter()
        .filter(|t| t.state.is_terminal())
        .collect();
    if terminals.is_empty() {
        return finding(CODE, NotExercised, "no terminal state was observed");
    }
    let (absent, no_instant) = without_instant(terminals.into_iter());
    if absent.is_empty() && no_instant.is_empty() {
        finding(
            CODE,
            Pass,
            "every terminal transition carries a status.timestamp that names an instant",
        )
    } else {
        Finding {
            trigger: CODE.trigger(),
            ..finding(
                CODE,
                Fail,
                missing_text("terminal transitions", &absent, &no_instant),
            )
        }
    }
}

/// How timestamps are spelled, apart from whether they name an instant: v1.0 (§5.6.1) makes
/// the `Z` form a MUST; v0.2/v0.3 ask for ISO 8601 UTC, so an offset is reported at SHOULD.
/// A spelling is never taken for an absence (LC-TIMESTAMPS judges that).
fn timestamp_format(obs: &Observations, version: ProtocolVersion) -> Finding {
    const CODE: Rule = Rule::TimestampFormat;
    let level = CODE.level_at(version);
    let rule = if version.is_pre_1_0() {
        format!("A2A {version} asks for ISO 8601 UTC (`Z`)")
    } else {
        format!("A2A {version} requires RFC 3339 UTC with `Z` (§5.6.1)")
    };
    let stamped: Vec<&Transition> = obs
        .transitions
        .iter()
        .filter(|t| t.timestamp.is_some())
        .collect();
    let off: Vec<String> = stamped
        .iter()
        .filter(|t| !t.timestamp.as_deref().is_some_and(is_utc_z))
        .map(|t| {
            format!(
                "{} `{}`",
                t.label(),
                t.timestamp.as_deref().unwrap_or_default()
            )
        })
        .collect();
    match (stamped.is_empty(), off.is_empty()) {
        (true, _) => finding_at(CODE, level, NotExercised, "no timestamps were sent"),
        (false, true) => finding_at(
            CODE,
            level,
            Pass,
            format!(
                "all {} timestamps are spelled RFC 3339 UTC with `Z`",
                stamped.len()
            ),
        ),
        (false, false) => finding_at(
            CODE,
            level,
            Fail,
            format!("{rule}; spelled otherwise: {}", off.join(", ")),
        ),
    }
}

fn timestamp_order(obs: &Observations) -> Finding {
    const CODE: Rule = Rule::TimestampOrder;
    let mut compared = 0;
    let mut backwards = Vec::new();
    for role in [TaskRole::Lifecycle, TaskRole::Push, TaskRole::Cancel] {
        // Within one channel only: a stream's events, or successive GetTask answers, must not
        // go back in time; what two channels deliver may interleave in any order.
        for (channel, ts) in by_channel(&of_role(obs, role)) {
            let mut last: Option<(&Transition, Timestamp)> = None;
            for t in ts {
                let Some(at) = t.parsed_timestamp else {
                    continue;
                };
                if let Some((prev, prev_at)) = last {
                    compared += 1;
                    if at < prev_at {
                        backwards.push(format!(
                            "{} after {} on {channel}",
                            t.label(),
                            prev.label()
                        ));
                    }
                }
                last = Some((t, at));
            }
        }
    }
    match (compared, backwards.is_empty()) {
        (0, _) => finding(
            CODE,
            NotExercised,
            "fewer than two timestamps on one channel to compare",
        ),
        (_, true) => finding(
            CODE,
            Pass,
            format!("timestamps never go backwards within a channel ({compared} compared)"),
        ),
        (_, false) => finding(
            CODE,
            Fail,
            format!("timestamps go backwards: {}", backwards.join(", ")),
        ),
    }
}

fn of_role(obs: &Observations, role: TaskRole) -> Vec<&Transition> {
    obs.transitions.iter().filter(|t| t.role == role).collect()
}

/// Transitions grouped by (role, stream call).
fn stream_calls(obs: &Observations) -> BTreeMap<(TaskRole, u32), Vec<&Transition>> {
    let mut calls: BTreeMap<(TaskRole, u32), Vec<&Transition>> = BTreeMap::new();
    for t in obs
        .transitions
        .iter()
        .filter(|t| t.source == Source::Stream)
    {
        calls.entry((t.role, t.call)).or_default().push(t);
    }
    calls
}

fn single_terminal(obs: &Observations) -> Finding {
    const CODE: Rule = Rule::SingleTerminal;
    let mut terminal_calls = Vec::new();
    let mut duplicates = Vec::new();
    for ((role, call), transitions) in stream_calls(obs) {
        let terminals: Vec<&&Transition> = transitions
            .iter()
            .filter(|t| t.state.is_terminal())
            .collect();
        if terminals.len() > 1 {
            duplicates.push(format!(
                "stream {call} ({role:?}) sent {} terminal states: {}",
                terminals.len(),
                terminals
                    .iter()
                    .map(|t| t.raw_state.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        if !terminals.is_empty() {
            terminal_calls.push(call);
        }
    }
    if !duplicates.is_empty() {
        return Finding {
            trigger: CODE.trigger(),
            ..finding(CODE, Fail, duplicates.join("; "))
        };
    }
    if terminal_calls.is_empty() {
        let any_terminal = obs.transitions.iter().any(|t| t.state.is_terminal());
        return if any_terminal {
            finding(
                CODE,
                Pass,
                "one terminal state per task (observed without streaming)",
            )
        } else {
            finding(CODE, NotExercised, "no terminal state was observed")
        };
    }
    finding(CODE, Pass, "each stream carried exactly one terminal state")
}

fn nothing_after_terminal(obs: &Observations) -> Finding {
    const CODE: Rule = Rule::NothingAfterTerminal;
    let mut violations = Vec::new();
    for stream in &obs.streams {
        if stream.events_after_terminal > 0 {
            violations.push(format!(
                "stream {} sent {} event(s) after its terminal state",
                stream.call, stream.events_after_terminal
            ));
        }
    }
    // A task that reported a terminal state must not report a live one after it: on the same
    // channel, or stamped later by the agent itself.
    for role in [TaskRole::Lifecycle, TaskRole::Push, TaskRole::Cancel] {
        let transitions = of_role(obs, role);
        violations.extend(
            out_of_order(&transitions)
                .into_iter()
                .filter(|o| o.earlier.state.is_terminal())
                .map(|o| o.describe()),
        );
    }
    if !violations.is_empty() {
        return Finding {
            trigger: CODE.trigger(),
            ..finding(CODE, Fail, violations.join("; "))
        };
    }
    if obs.transitions.iter().any(|t| t.state.is_terminal()) {
        finding(CODE, Pass, "nothing followed a terminal state")
    } else {
        finding(CODE, NotExercised, "no terminal state was observed")
    }
}

fn ids_consistent(obs: &Observations) -> Finding {
    const CODE: Rule = Rule::IdsConsistent;
    let mut mismatches = Vec::new();
    let mut checked = 0;
    for (role, ids) in &obs.tasks {
        for t in obs.transitions.iter().filter(|t| t.role == *role) {
            checked += 1;
            if let (Some(expected), Some(got)) = (&ids.task_id, &t.task_id)
                && expected != got
            {
                mismatches.push(format!("{} has taskId {got}, not {expected}", t.label()));
            }
            if let (Some(expected), Some(got)) = (&ids.context_id, &t.context_id)
                && expected != got
            {
                mismatches.push(format!("{} has contextId {got}, not {expected}", t.label()));
            }
        }
    }
    match (checked, mismatches.is_empty()) {
        (0, _) => finding(CODE, NotExercised, "no task was created"),
        (_, true) => finding(
            CODE,
            Pass,
            format!("taskId and contextId agree across all {checked} observations"),
        ),
        (_, false) => finding(CODE, Fail, mismatches.join("; ")),
    }
}

fn get_agrees(obs: &Observations) -> Finding {
    const CODE: Rule = Rule::GetAgrees;
    // GetTask may answer ahead of a lagging stream, or behind it; what it must never do is
    // name another terminal state than the one the task reported elsewhere.
    let mut compared = 0;
    let mut disagreements = Vec::new();
    for role in [TaskRole::Lifecycle, TaskRole::Push, TaskRole::Cancel] {
        let terminals: Vec<&Transition> = obs
            .transitions
            .iter()
            .filter(|t| t.role == role && t.state.is_terminal())
            .collect();
        let Some(reported) = terminals.iter().find(|t| t.source != Source::Get) else {
            continue;
        };
        for get in terminals.iter().filter(|t| t.source == Source::Get) {
            compared += 1;
            if get.state != reported.state {
                disagreements.push(format!(
                    "GetTask said {} while the task reported {}",
                    get.label(),
                    reported.label()
                ));
            }
        }
        // A GetTask asked after an answer or a stream had shown the end must show it too: one
        // that still answers a live state never shows the end to a polling caller (A2A#373).
        // Observations are kept in arrival order, and a GetTask is awaited before anything
        // else is read, so one recorded after the end was asked after it. Push deliveries
        // arrive on their own schedule and order nothing here.
        let end = obs.transitions.iter().position(|t| {
            t.role == role
                && t.state.is_terminal()
                && matches!(t.source, Source::Response | Source::Stream)
        });
        let behind = end.into_iter().flat_map(|end| {
            obs.transitions[end..]
                .iter()
                .filter(|t| t.role == role && t.source == Source::Get && !t.state.is_terminal())
        });
        for get in behind {
            compared += 1;
            disagreements.push(format!(
                "GetTask said {}, asked after the task reported {}",
                get.label(),
                reported.label()
            ));
        }
    }
    match (compared, disagreements.is_empty()) {
        (0, _) => finding(
            CODE,
            NotExercised,
            "no GetTask answer and reported state were both terminal",
        ),
        (_, true) => finding(
            CODE,
            Pass,
            "GetTask named the same terminal state the task reported",
        ),
        (_, false) => finding(CODE, Fail, disagreements.join("; ")),
    }
}

fn problems_of(obs: &Observations, role: TaskRole) -> Vec<String> {
    obs.problems
        .iter()
        .filter(|(r, _)| *r == role)
        .map(|(_, p)| p.clone())
        .collect()
}

fn well_formed(obs: &Observations) -> Finding {
    const CODE: Rule = Rule::WellFormed;
    let mut problems: Vec<String> = obs
        .problems
        .iter()
        .map(|(role, p)| format!("{role:?}: {p}"))
        .collect();
    for s in &obs.streams {
        if s.malformed_frames > 0 {
            problems.push(format!(
                "stream {} had {} malformed frame(s)",
                s.call, s.malformed_frames
            ));
        }
    }
    if problems.is_empty() {
        finding(CODE, Pass, "every answer and event was well-formed A2A")
    } else {
        finding(CODE, Fail, problems.join("; "))
    }
}

fn wire_version(obs: &Observations, version: ProtocolVersion) -> Finding {
    const CODE: Rule = Rule::WireVersion;
    let expected = if version.is_pre_1_0() {
        Spelling::V0
    } else {
        Spelling::V1
    };
    let wrong: BTreeSet<&str> = obs
        .transitions
        .iter()
        .filter(|t| t.spelling != expected)
        .map(|t| t.raw_state.as_str())
        .collect();
    match (obs.transitions.is_empty(), wrong.is_empty()) {
        (true, _) => finding(CODE, NotExercised, "no states were observed"),
        (false, true) => finding(
            CODE,
            Pass,
            format!("states are spelled as A2A {version} spells them"),
        ),
        (false, false) => finding(
            CODE,
            Fail,
            format!(
                "A2A {version} states spelled another version's way: {}",
                wrong.into_iter().collect::<Vec<_>>().join(", ")
            ),
        ),
    }
}

fn input_required(obs: &Observations, lifecycle: &[&Transition]) -> Finding {
    const CODE: Rule = Rule::InputRequired;
    if !lifecycle
        .iter()
        .any(|t| t.state == TaskState::InputRequired)
    {
        return finding(CODE, NotExercised, "the task never asked for input");
    }
    // The follow-up was sent after the probe saw input-required, so anything the task reports
    // from the follow-up's call on is causally later, whichever channel carries it.
    let first_follow_up = obs
        .follow_up_calls
        .iter()
        .filter(|(role, _)| *role == TaskRole::Lifecycle)
        .map(|(_, call)| *call)
        .min();
    let resumed = first_follow_up.is_some_and(|from| {
        lifecycle
            .iter()
            .any(|t| t.call >= from && (t.state == TaskState::Working || t.state.is_terminal()))
    });
    if resumed {
        finding(
            CODE,
            Pass,
            format!(
                "a follow-up with taskId and contextId resumed the task ({} sent)",
                obs.follow_ups_sent
            ),
        )
    } else if obs.follow_ups_exhausted || first_follow_up.is_none() {
        finding(
            CODE,
            NotExercised,
            "the task asked for more input than the probe script provides",
        )
    } else {
        finding(
            CODE,
            Fail,
            "the task stayed in input-required after a follow-up",
        )
    }
}

fn cancel(obs: &Observations) -> Finding {
    const CODE: Rule = Rule::Cancel;
    if !obs.tasks.contains_key(&TaskRole::Cancel) {
        return finding(
            CODE,
            NotExercised,
            "the probe script has no cancel scenario",
        );
    }
    if let Some(err) = &obs.cancel_error {
        return finding(CODE, Fail, format!("CancelTask failed: {err}"));
    }
    let states: Vec<TaskState> = obs
        .transitions
        .iter()
        .filter(|t| t.role == TaskRole::Cancel)
        .map(|t| t.state)
        .collect();
    match states.last() {
        Some(TaskState::Canceled) => finding(CODE, Pass, "CancelTask moved the task to canceled"),
        Some(s) if s.is_terminal() => finding(
            CODE,
            NotExercised,
            format!("the task was already {s} when canceled"),
        ),
        Some(s) => finding(CODE, Fail, format!("after CancelTask the task is {s}")),
        None => finding(
            CODE,
            NotExercised,
            "no state of the cancel task was observed",
        ),
    }
}

fn transcript(obs: &Observations) -> Finding {
    const CODE: Rule = Rule::Transcript;
    // Reported, never blocking: the transitions were all judged; only the stored record of
    // the exchanges was cut to its budget.
    match &obs.transcript_omitted {
        None => finding(CODE, Pass, "every exchange is in the transcript"),
        Some(what) => finding(CODE, Fail, format!("the transcript was truncated: {what}")),
    }
}

fn streaming(obs: &Observations) -> Finding {
    const CODE: Rule = Rule::Streaming;
    let streams: Vec<_> = obs
        .streams
        .iter()
        .filter(|s| s.role == TaskRole::Lifecycle && !s.resubscribe)
        .collect();
    let Some(last) = streams.last() else {
        return finding(CODE, NotExercised, "no streaming call was made");
    };
    if let Some(why) = unusable_stream(&streams) {
        return finding(CODE, Fail, why);
    }
    let calls = stream_calls(obs);
    let events: usize = streams
        .iter()
        .map(|s| {
            calls
                .get(&(TaskRole::Lifecycle, s.call))
                .map_or(0, Vec::len)
        })
        .sum();
    if events == 0 {
        return finding(CODE, Fail, "the streams carried no task status events");
    }
    let last_states = calls
        .get(&(TaskRole::Lifecycle, last.call))
        .cloned()
        .unwrap_or_default();
    let ended_terminal = last_states.last().is_some_and(|t| t.state.is_terminal());
    match (&last.end, ended_terminal) {
        (StreamEnd::Closed, true) => finding(
            CODE,
            Pass,
            format!(
                "{events} status events arrived as events, and the stream closed at the terminal state"
            ),
        ),
        (end, true) => finding(
            CODE,
            Fail,
            format!("the stream did not close after the terminal state (ended by {end:?})"),
        ),
        (end, false) => finding(
            CODE,
            Fail,
            format!("the stream ended ({end:?}) before a terminal state"),
        ),
    }
}

/// Why the lifecycle streams cannot count as streaming at all: one was not an event stream,
/// or one sent malformed frames.
fn unusable_stream(streams: &[&StreamRun]) -> Option<String> {
    if let Some(plain) = streams.iter().find(|s| !s.event_stream) {
        return Some(format!(
            "streaming is advertised, but stream {} answered with {} instead of text/event-stream",
            plain.call,
            plain.content_type.as_deref().unwrap_or("no content type")
        ));
    }
    streams
        .iter()
        .find(|s| s.malformed_frames > 0)
        .map(|bad| format!("stream {} sent malformed frames", bad.call))
}

fn push(run: Option<&PushRun>, obs: &Observations) -> Finding {
    const CODE: Rule = Rule::Push;
    let Some(run) = run else {
        return finding(CODE, NotExercised, "the push probe did not run");
    };
    if let Some(why) = &run.skipped {
        return finding(CODE, NotExercised, why.clone());
    }
    if let Some(failed) = push_failure(run) {
        return failed;
    }
    push_delivery(run, obs)
}

/// A push probe that failed outright: registration refused after the retry budget (the `push`
/// trigger), or deliveries that were not A2A events. Where the token travelled is PUSH-TOKEN's:
/// deliveries reach the run's own URL, which already says they are for cardgate.
fn push_failure(run: &PushRun) -> Option<Finding> {
    const CODE: Rule = Rule::Push;
    if let Some(err) = &run.registration_error {
        return Some(Finding {
            trigger: CODE.trigger(),
            ..finding(
                CODE,
                Fail,
                format!(
                    "webhook registration through the push-config method failed after {} attempt(s): {err}",
                    run.attempts
                ),
            )
        });
    }
    if run.malformed_deliveries > 0 {
        return Some(finding(
            CODE,
            Fail,
            format!(
                "{} deliveries were not A2A events",
                run.malformed_deliveries
            ),
        ));
    }
    None
}

/// A push probe judged by what its webhook received: the push task's terminal state, or not.
fn push_delivery(run: &PushRun, obs: &Observations) -> Finding {
    const CODE: Rule = Rule::Push;
    let push_task = of_role(obs, TaskRole::Push);
    let terminal_delivered = push_task
        .iter()
        .any(|t| t.source == Source::Push && t.state.is_terminal());
    if let Some(why) = run
        .registration_skipped
        .as_ref()
        .filter(|_| terminal_delivered)
    {
        return finding(
            CODE,
            NotExercised,
            format!(
                "the inline webhook received the terminal state, but registration through the push-config method was not checked: {why}"
            ),
        );
    }
    if terminal_delivered {
        return finding(
            CODE,
            Pass,
            format!(
                "the inline webhook received {} deliveries, the terminal state included; registration through the push-config method succeeded",
                run.deliveries
            ),
        );
    }
    if !push_task.iter().any(|t| t.state.is_terminal()) {
        return finding(
            CODE,
            NotExercised,
            format!(
                "the push task never reached a terminal state ({} deliveries); give the probe script a push_message the agent completes",
                run.deliveries
            ),
        );
    }
    // A wait cardgate cut short, or one in which nothing arrived at all (the webhook may be
    // unreachable from the agent), says nothing about whether the agent delivers.
    if run.wait_cut_short {
        return finding(
            CODE,
            NotExercised,
            format!(
                "the probe cycle's deadline ended the wait for the terminal delivery after {} ms ({} deliveries): not waited for, so not judged",
                run.waited_ms, run.deliveries
            ),
        );
    }
    if run.deliveries == 0 {
        return finding(
            CODE,
            NotExercised,
            format!(
                "nothing reached the webhook in {} ms: the agent may not reach cardgate's public URL, so delivery is not judged",
                run.waited_ms
            ),
        );
    }
    finding(
        CODE,
        Fail,
        format!(
            "the push task finished and {} deliveries arrived, but its terminal state was not delivered within {} ms of quiet",
            run.deliveries, run.waited_ms
        ),
    )
}

fn history(obs: &Observations) -> Finding {
    const CODE: Rule = Rule::History;
    // Every snapshot that carries the history counts: a send's answer, stream Task events,
    // push deliveries of the task, GetTask answers. Two snapshots are compared only where
    // their order is known (within one channel, by lifecycle position, or across a
    // follow-up) and a state change lies between them: a task that finishes in a millisecond
    // is judged, and a channel that lags is never taken for a frozen history.
    let mut compared = 0;
    let mut stalls = Vec::new();
    for role in [TaskRole::Lifecycle, TaskRole::Push] {
        let snapshots: Vec<&Transition> = obs
            .transitions
            .iter()
            .filter(|t| t.role == role && t.history_len.is_some() && before_end(obs, t))
            .collect();
        let follow_ups = follow_up_calls(obs, role);
        for (j, later) in snapshots.iter().enumerate() {
            let mut stalled = None;
            for (i, earlier) in snapshots.iter().enumerate() {
                if i == j || !precedes_across_change(obs, &follow_ups, earlier, later, i < j) {
                    continue;
                }
                compared += 1;
                let (was, is) = (earlier.history_len, later.history_len);
                if is <= was && stalled.is_none() {
                    stalled = Some(format!(
                        "history stayed at {} → {} from {} to {}",
                        was.unwrap_or_default(),
                        is.unwrap_or_default(),
                        earlier.label(),
                        later.label()
                    ));
                }
            }
            stalls.extend(stalled);
        }
    }
    match (compared, stalls.is_empty()) {
        (0, _) => finding(
            CODE,
            NotExercised,
            "no two history-bearing snapshots of one task were known to straddle a state change",
        ),
        (_, true) => finding(
            CODE,
            Pass,
            format!(
                "history grew across all {compared} ordered snapshot pairs that straddle a state change"
            ),
        ),
        (_, false) => Finding {
            trigger: CODE.trigger(),
            ..finding(CODE, Fail, stalls.join("; "))
        },
    }
}

/// Whether `t` was reported before the terminal-discipline probe began: what a cancel of an
/// ended task shows is judged by LC-TERMINAL-STAYS, not as history.
fn before_end(obs: &Observations, t: &Transition) -> bool {
    t.role != TaskRole::Lifecycle
        || obs
            .after_end
            .as_ref()
            .is_none_or(|end| t.call < end.from_call)
}

/// The calls that sent a follow-up on the task of `role`.
fn follow_up_calls(obs: &Observations, role: TaskRole) -> Vec<u32> {
    obs.follow_up_calls
        .iter()
        .filter(|(r, _)| *r == role)
        .map(|(_, call)| *call)
        .collect()
}

/// Whether a follow-up was sent between `a` and `b`. Calls are numbered in the order they were
/// made, and a send's answer, a GetTask answer or a streaming send read to its end all arrived
/// before the next call was made; push deliveries, and a resubscription left open while the
/// probe moved its task on, arrive on their own schedule and order nothing by call.
fn turn_between(obs: &Observations, follow_ups: &[u32], a: &Transition, b: &Transition) -> bool {
    let call_ordered = |t: &Transition| {
        t.source != Source::Push
            && !(t.source == Source::Stream
                && obs.live_resubscribes.iter().any(|l| {
                    matches!(l.outcome, super::LiveOutcome::Streamed { call, .. } if call == t.call)
                }))
    };
    call_ordered(a) && call_ordered(b) && follow_ups.iter().any(|fu| a.call < *fu && *fu <= b.call)
}

/// Whether snapshot `a` is known to precede `b` with a state change between them
/// (`a_arrived_first`: `a` arrived before `b`, which orders them only within one channel).
fn precedes_across_change(
    obs: &Observations,
    follow_ups: &[u32],
    a: &Transition,
    b: &Transition,
    a_arrived_first: bool,
) -> bool {
    // What a call reported before a follow-up precedes what any call from the follow-up on
    // reports.
    let follow_up_between = |a: &Transition, b: &Transition| turn_between(obs, follow_ups, a, b);
    if a.channel() == b.channel() {
        if !a_arrived_first {
            return false;
        }
        // A send's answer in another state between two GetTask answers shows a change too.
        let response_between = a.source == Source::Get
            && obs.transitions.iter().any(|t| {
                t.role == a.role
                    && t.source == Source::Response
                    && a.call < t.call
                    && t.call < b.call
                    && t.state != a.state
            });
        return a.state != b.state || follow_up_between(a, b) || response_between;
    }
    // Across channels, arrival order says nothing; lifecycle position and turns do.
    rank(a.state) < rank(b.state) || follow_up_between(a, b)
}

/// LC-TERMINAL-STAYS: a task that has ended stays in the state it ended in. What the task
/// reported from the first call after it was seen ended (a cancel's answer, a GetTask, a
/// resubscription) must name that same terminal state.
fn terminal_stays(obs: &Observations) -> Finding {
    const CODE: Rule = Rule::TerminalStays;
    if let Some(moved) = cancel_undone(obs) {
        return Finding {
            trigger: CODE.trigger(),
            ..finding(CODE, Fail, moved)
        };
    }
    let Some(end) = &obs.after_end else {
        return finding(
            CODE,
            NotExercised,
            "the lifecycle task was not seen to end, so whether its end holds was not probed",
        );
    };
    let lifecycle = of_role(obs, TaskRole::Lifecycle);
    let Some(ended) = lifecycle
        .iter()
        .filter(|t| t.call < end.from_call && t.state.is_terminal())
        .max_by_key(|t| t.call)
    else {
        return finding(
            CODE,
            NotExercised,
            "no terminal state was observed before the probe of its end",
        );
    };
    let after: Vec<&&Transition> = lifecycle
        .iter()
        .filter(|t| t.call >= end.from_call)
        .collect();
    let moved: Vec<String> = after
        .iter()
        .filter(|t| t.state != ended.state)
        .map(|t| t.label())
        .collect();
    if !moved.is_empty() {
        return Finding {
            trigger: CODE.trigger(),
            ..finding(
                CODE,
                Fail,
                format!(
                    "the task ended {} ({}), then showed {}{}",
                    ended.state,
                    ended.label(),
                    moved.join(", "),
                    match (&end.cancel, &end.send) {
                        (EndedCancel::Answered { call }, _) => {
                            format!(": CancelTask (call {call}) was accepted on a finished task")
                        }
                        (_, Some(EndedSend::Answered { call })) => {
                            format!(": a message (call {call}) re-opened the finished task")
                        }
                        _ => String::new(),
                    }
                ),
            )
        };
    }
    if after.is_empty() {
        return finding(
            CODE,
            NotExercised,
            format!(
                "the task ended {}, and nothing after it showed the task again",
                ended.state
            ),
        );
    }
    finding(
        CODE,
        Pass,
        format!(
            "the task ended {} and stayed {} in all {} later observations (CancelTask, GetTask{})",
            ended.state,
            ended.state,
            after.len(),
            if matches!(end.resubscribe, EndedResubscribe::Streamed { .. }) {
                ", resubscription"
            } else {
                ""
            }
        ),
    )
}

/// A cancel answered with a terminal state that did not hold: what the task reported from a
/// later call (a GetTask made after the answer came back) is another state. The answer said
/// the task had ended; a task that ended and moved again breaks rule 3, whatever the cancel
/// was for. A cancel answered with a live state that the agent then ignores is LC-CANCEL's.
fn cancel_undone(obs: &Observations) -> Option<String> {
    let task = of_role(obs, TaskRole::Cancel);
    let ended = task
        .iter()
        .filter(|t| t.state.is_terminal() && t.source == Source::Response)
        .min_by_key(|t| t.call)?;
    let moved: Vec<String> = task
        .iter()
        .filter(|t| t.call > ended.call && t.state != ended.state)
        .map(|t| t.label())
        .collect();
    (!moved.is_empty()).then(|| {
        format!(
            "CancelTask answered {} ({}), but the task then showed {}: the cancel was reported and not applied",
            ended.state,
            ended.label(),
            moved.join(", ")
        )
    })
}

/// LC-TERMINAL-CANCEL: CancelTask on a task that has ended is refused with
/// `TaskNotCancelableError` (§3.1.5). Another refusal, or an accepted cancel that left the
/// state alone, is reported at SHOULD: a moved state is LC-TERMINAL-STAYS's to fail.
fn terminal_cancel(obs: &Observations) -> Finding {
    const CODE: Rule = Rule::TerminalCancel;
    let Some(end) = &obs.after_end else {
        return finding(
            CODE,
            NotExercised,
            "the lifecycle task was not seen to end, so no cancel of it was tried",
        );
    };
    match &end.cancel {
        EndedCancel::NotCancelable { code, message } => finding(
            CODE,
            Pass,
            format!(
                "CancelTask on the ended task was refused as not cancelable ({code}: {message})"
            ),
        ),
        EndedCancel::Refused { code, message } => finding(
            CODE,
            Fail,
            format!(
                "CancelTask on the ended task was refused, but not as TaskNotCancelableError: {code}: {message}"
            ),
        ),
        EndedCancel::Answered { call } => finding(
            CODE,
            Fail,
            format!(
                "CancelTask on the ended task was accepted (call {call} answered with the task) instead of refused with TaskNotCancelableError"
            ),
        ),
        EndedCancel::NoAnswer { error } => finding(
            CODE,
            Fail,
            format!("CancelTask on the ended task got no usable answer: {error}"),
        ),
    }
}

/// LC-RESUBSCRIBE: a resubscription to the ended task is refused, or sends the final task
/// once and closes. Two terminal events, or one after the other, fail LC-SINGLE-TERMINAL and
/// LC-NOTHING-AFTER-TERMINAL (and demote); the rest is reported here at SHOULD.
fn resubscription(obs: &Observations) -> Finding {
    const CODE: Rule = Rule::Resubscribe;
    let Some(end) = &obs.after_end else {
        return finding(
            CODE,
            NotExercised,
            "the lifecycle task was not seen to end, so no resubscription was tried",
        );
    };
    match &end.resubscribe {
        EndedResubscribe::NotTried { reason } => finding(CODE, NotExercised, reason.clone()),
        EndedResubscribe::Refused { code, message } => finding(
            CODE,
            Pass,
            format!("resubscribing to the ended task was refused ({code}: {message})"),
        ),
        EndedResubscribe::NoAnswer { error } => finding(
            CODE,
            Fail,
            format!("resubscribing to the ended task got no usable answer: {error}"),
        ),
        EndedResubscribe::Streamed { call } => {
            let events = obs
                .transitions
                .iter()
                .filter(|t| t.source == Source::Stream && t.call == *call)
                .count();
            let run = obs.streams.iter().find(|s| s.call == *call);
            match run.map(|r| &r.end) {
                _ if events == 0 => finding(
                    CODE,
                    Fail,
                    format!("the resubscription (stream {call}) carried no task"),
                ),
                Some(StreamEnd::Closed) => finding(
                    CODE,
                    Pass,
                    format!("the resubscription (stream {call}) sent the final task and closed"),
                ),
                end => finding(
                    CODE,
                    Fail,
                    format!(
                        "the resubscription (stream {call}) did not close after the final task (ended by {end:?})"
                    ),
                ),
            }
        }
    }
}

/// LC-TERMINAL-SEND: a message to a task that has ended is refused with
/// `UnsupportedOperationError` (§3.1.1; ACTS CORE-SEND-002). An accepted one is a finished task
/// that took more work (the seed's silent re-fire): class `terminal`. A refusal in another
/// shape keeps the task ended, and is reported at SHOULD.
fn terminal_send(obs: &Observations) -> Finding {
    const CODE: Rule = Rule::TerminalSend;
    let Some(send) = obs.after_end.as_ref().and_then(|end| end.send.as_ref()) else {
        return finding(
            CODE,
            NotExercised,
            "the lifecycle task was not seen to end, so no message was sent to it",
        );
    };
    match send {
        EndedSend::Unsupported { code, message } => finding(
            CODE,
            Pass,
            format!(
                "a message to the ended task was refused as an unsupported operation ({code}: {message})"
            ),
        ),
        EndedSend::Refused { code, message } => finding_at(
            CODE,
            Level::Should,
            Fail,
            format!(
                "a message to the ended task was refused, but not as UnsupportedOperationError: {code}: {message}"
            ),
        ),
        EndedSend::Answered { call } => Finding {
            trigger: CODE.trigger(),
            ..finding(
                CODE,
                Fail,
                format!(
                    "a message to the ended task was accepted (call {call}) instead of refused with UnsupportedOperationError: a finished task took more work"
                ),
            )
        },
        EndedSend::Elsewhere { call, what } => finding(
            CODE,
            Fail,
            format!(
                "a message to the ended task was accepted (call {call}) and answered with {what} instead of refused with UnsupportedOperationError: the end held, but a caller's retry runs again"
            ),
        ),
        EndedSend::NoAnswer { error } => finding_at(
            CODE,
            Level::Should,
            Fail,
            format!("a message to the ended task got no usable answer: {error}"),
        ),
    }
}

/// Blocking: a failed MUST or policy rule (a failed capability included), and a lifecycle or
/// timestamps rule that did not pass. A capability the probe could not exercise blocks nothing
/// (docs/trust-model.md, rule 4): decisions answer `unknown` to the callers that require it.
fn verdict(findings: &[Finding], obs: &Observations) -> Verdict {
    let mut reasons = Vec::new();
    for f in findings {
        let blocking = matches!(f.level, Level::Must | Level::Policy) && f.status == Fail;
        let required = f.code.required() && f.status != Pass;
        if blocking || required {
            reasons.push(format!("{}: {}", f.code, f.message));
        }
    }
    let mut triggers: Vec<(DemotionClass, String)> = Vec::new();
    for f in findings.iter().filter(|f| f.status == Fail) {
        if let Some(class) = f.trigger
            && !triggers.iter().any(|(c, _)| *c == class)
        {
            triggers.push((class, format!("{}: {}", f.code, f.message)));
        }
    }
    let lifecycle = Rule::LIFECYCLE
        .iter()
        .filter_map(|rule| findings.iter().find(|f| f.code == *rule))
        .find(|f| f.status == Fail || (f.code.required() && f.status != Pass))
        .map_or(Ok(()), |f| Err(format!("{}: {}", f.code, f.message)));
    Verdict {
        passed: reasons.is_empty(),
        reasons,
        triggers,
        lifecycle,
        untimestamped: untimestamped(obs),
        unexercised: None,
        extended_card: match &obs.extended_card {
            Some(ExtendedCard::Used { sha256, .. }) => Some(sha256.clone()),
            _ => None,
        },
        rulebook: None,
        trials: None,
    }
}

mod live;
mod push_advice;

use live::resubscribe_live;
use push_advice::{push_every_state, push_token};

#[cfg(test)]
mod tests;
