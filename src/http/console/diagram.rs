//! A probe run as a picture: a sequence diagram of every observed transition, one lane per
//! channel (the answers to sends, each stream, the GetTask answers, the push deliveries), time
//! down the page, the state and the agent's timestamp on each arrow, and the transitions that
//! broke a rule marked where they occur.
//!
//! Which transitions are marked follows from the run's failed findings: a failed rule of a
//! demotion class marks the transitions that class is about (docs/trust-model.md). The marks
//! explain a verdict; they never make one.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use maud::{Markup, html};

use crate::domain::demotion::DemotionClass;
use crate::domain::probe::{Channel, Finding, FindingStatus, TaskRole, Transition};
use crate::domain::time::Timestamp;

/// What is wrong with one transition, in words.
pub(super) type Marks = Vec<String>;

/// The marks of each transition (same order as `transitions`).
pub(super) fn marks(transitions: &[Transition], findings: &[Finding]) -> Vec<Marks> {
    let mut failed: BTreeMap<DemotionClass, Vec<&str>> = BTreeMap::new();
    for f in findings {
        if let (FindingStatus::Fail, Some(class)) = (&f.status, f.trigger) {
            failed.entry(class).or_default().push(f.code.code());
        }
    }
    let codes = |class: DemotionClass| failed.get(&class).map(|c| c.join(", "));
    // What was seen last on each (task, channel): arrival order is evidence within a channel
    // only (docs/trust-model.md, rule 3).
    let mut terminal_seen: BTreeSet<(TaskRole, Channel)> = BTreeSet::new();
    let mut last: HashMap<(TaskRole, Channel), &Transition> = HashMap::new();
    transitions
        .iter()
        .map(|t| {
            let key = (t.role, t.channel());
            let mut marks = Marks::new();
            if let Some(codes) = codes(DemotionClass::Timestamp)
                && t.state.is_terminal()
                && t.parsed_timestamp.is_none()
            {
                marks.push(format!(
                    "terminal state without a valid timestamp ({codes})"
                ));
            }
            if let Some(codes) = codes(DemotionClass::Terminal)
                && terminal_seen.contains(&key)
            {
                marks.push(format!("after a terminal state on this channel ({codes})"));
            }
            if let Some(codes) = codes(DemotionClass::History)
                && let Some(prev) = last.get(&key)
                && let (Some(before), Some(now)) = (prev.history_len, t.history_len)
                && prev.state != t.state
                && now <= before
            {
                marks.push(format!(
                    "history did not grow across a state change: {before} → {now} ({codes})"
                ));
            }
            if t.state.is_terminal() {
                terminal_seen.insert(key);
            }
            last.insert(key, t);
            marks
        })
        .collect()
}

/// A lane's heading.
fn lane_name(channel: Channel) -> String {
    match channel {
        Channel::Responses => "send answers".into(),
        Channel::Stream(call) => format!("stream (call {call})"),
        Channel::Gets => "GetTask".into(),
        Channel::Push => "push".into(),
    }
}

fn lane_id(channel: Channel) -> String {
    match channel {
        Channel::Responses => "responses".into(),
        Channel::Stream(call) => format!("stream-{call}"),
        Channel::Gets => "get".into(),
        Channel::Push => "push".into(),
    }
}

const AGENT_X: f64 = 70.0;
const FIRST_LANE_X: f64 = 250.0;
const LANE_GAP: f64 = 200.0;
const HEAD_H: f64 = 56.0;
const ROW_H: f64 = 46.0;

/// `+1.234 s` after `start`.
fn offset(at: Timestamp, start: Timestamp) -> String {
    let ms = (at - start).num_milliseconds().max(0);
    if ms < 1000 {
        format!("+{ms} ms")
    } else {
        format!("+{:.2} s", ms as f64 / 1000.0)
    }
}

/// The diagram as inline SVG (styled by the console's stylesheet, so it follows light and
/// dark), with a title and description for screen readers.
pub(super) fn render(transitions: &[Transition], findings: &[Finding]) -> Markup {
    let marks = marks(transitions, findings);
    let lanes: BTreeSet<Channel> = transitions.iter().map(Transition::channel).collect();
    let lanes: Vec<Channel> = lanes.into_iter().collect();
    let x_of = |c: Channel| {
        let i = lanes.iter().position(|l| *l == c).unwrap_or(0);
        FIRST_LANE_X + LANE_GAP * i as f64
    };
    // Time runs down the page: rows in the order cardgate received them.
    let mut order: Vec<usize> = (0..transitions.len()).collect();
    order.sort_by_key(|&i| (transitions[i].observed_at, i));
    let start = order.first().map(|&i| transitions[i].observed_at);
    let width = FIRST_LANE_X + LANE_GAP * lanes.len().max(1) as f64 - 40.0;
    let height = HEAD_H + ROW_H * (transitions.len() as f64 + 0.5);
    let violations = marks.iter().filter(|m| !m.is_empty()).count();
    html! {
        svg.seq xmlns="http://www.w3.org/2000/svg" role="img" aria-labelledby="seq-title seq-desc"
            viewBox={ "0 0 " (width) " " (height) } width=(width) height=(height) {
            title id="seq-title" { "Observed task transitions by channel" }
            desc id="seq-desc" {
                (transitions.len()) " transitions on " (lanes.len()) " channels; "
                (violations) " marked as violations."
            }
            defs {
                marker id="head" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7"
                    markerHeight="7" orient="auto-start-reverse" { path d="M0,0 L10,5 L0,10 z" {} }
                marker id="head-bad" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7"
                    markerHeight="7" orient="auto-start-reverse" { path d="M0,0 L10,5 L0,10 z" {} }
            }
            g.agent {
                rect.headbox x=(AGENT_X - 50.0) y="8" width="100" height="28" rx="4" {}
                text.head x=(AGENT_X) y="27" text-anchor="middle" { "agent" }
                line.life x1=(AGENT_X) y1="36" x2=(AGENT_X) y2=(height) {}
            }
            @for lane in &lanes {
                g.lane data-channel=(lane_id(*lane)) {
                    rect.headbox x=(x_of(*lane) - 80.0) y="8" width="160" height="28" rx="4" {}
                    text.head x=(x_of(*lane)) y="27" text-anchor="middle" { (lane_name(*lane)) }
                    line.life x1=(x_of(*lane)) y1="36" x2=(x_of(*lane)) y2=(height) {}
                }
            }
            @for (row, &i) in order.iter().enumerate() {
                @let t = &transitions[i];
                @let y = HEAD_H + ROW_H * row as f64 + 14.0;
                @let x = x_of(t.channel());
                @let bad = !marks[i].is_empty();
                g.arrow.violation[bad] data-state=(t.state.as_str()) data-channel=(lane_id(t.channel())) {
                    @if bad { title { (marks[i].join("; ")) } }
                    @if let Some(start) = start {
                        text.time x="4" y=(y + 4.0) { (offset(t.observed_at, start)) }
                    }
                    line.msg x1=(AGENT_X) y1=(y) x2=(x - 4.0) y2=(y)
                        marker-end=(if bad { "url(#head-bad)" } else { "url(#head)" }) {}
                    text x=(AGENT_X + 12.0) y=(y - 5.0) {
                        @if bad { "⚠ " }
                        (t.raw_state)
                        @if t.role != TaskRole::Lifecycle {
                            " [" (format!("{:?}", t.role).to_lowercase()) " task]"
                        }
                    }
                    text.sub x=(AGENT_X + 12.0) y=(y + 14.0) {
                        @match (&t.timestamp, t.parsed_timestamp) {
                            (Some(_), Some(at)) => { (crate::domain::time::format(at)) }
                            (Some(raw), None) => { "not an instant: " (raw) }
                            (None, _) => { "no timestamp" }
                        }
                        @if let Some(n) = t.history_len { " · history " (n) }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
