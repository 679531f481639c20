//! The console's pages as templates (maud: Rust expressions, escaped by default, compiled into
//! the binary). Each takes the domain values a handler read and the time to show ages against;
//! none reads anything itself.

use chrono::Duration;
use maud::{DOCTYPE, Markup, PreEscaped, html};

use super::diagram;

mod rulebook;
mod track;
use crate::domain::callee::CalleeFilter;
use crate::domain::capability::CapabilityOutcome;
use crate::domain::card::signature::{KeySource, SignatureVerdict};
use crate::domain::card::{CardSnapshot, SnapshotSource};
use crate::domain::decision::{ConditionStatus, Decision, Dedup, Posture};
use crate::domain::gate::{EffectiveGate, Subject};
use crate::domain::ids::ProbeRunId;
use crate::domain::ledger::{EventBody, EventRecord};
use crate::domain::probe::{FindingStatus, ProbeRun, RunStatus};
use crate::domain::time::{self, Timestamp};
use crate::service::callees::CalleeDetail;
pub(super) use rulebook::rulebook;

/// Who is looking, for the header.
pub(super) struct Viewer<'a> {
    pub name: String,
    pub role: &'a str,
}

/// The frame around every page.
pub(super) fn layout(title: &str, viewer: Option<&Viewer<'_>>, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                meta name="referrer" content="same-origin";
                title { (title) " · cardgate" }
                link rel="stylesheet" href=(super::STYLESHEET);
            }
            body {
                header.top {
                    a.brand href="/ui" { "cardgate" }
                    nav aria-label="Main" {
                        a href="/ui" { "Callees" }
                        a href="/ui/rulebook" { "Rulebook" }
                        a href="/docs/" { "API" }
                    }
                    @if let Some(v) = viewer {
                        span.who { "Signed in as " (v.name) " (" (v.role) ")" }
                        form method="post" action="/ui/sign-out" {
                            button type="submit" { "Sign out" }
                        }
                    }
                }
                main { (body) }
            }
        }
    }
}

/// What a callee is called on the page: the operator's label, else the name its card gives,
/// else its card URL.
pub(super) fn display_name(d: &CalleeDetail) -> String {
    d.callee
        .name
        .clone()
        .or_else(|| {
            d.latest_card
                .as_ref()
                .and_then(|s| s.assessment.card.as_ref())
                .map(|c| c.name.clone())
                .filter(|n| !n.trim().is_empty())
        })
        .unwrap_or_else(|| d.callee.card_url.to_string())
}

/// A gate state as a coloured badge, its words always shown (colour is never the only cue).
fn gate_badge(gate: Option<EffectiveGate>) -> Markup {
    match gate {
        Some(g) => html! { span class={ "badge gate-" (g.as_str()) } { (g.as_str()) } },
        None => html! { span.badge.gate-none { "no subject" } },
    }
}

/// How long ago, in the largest unit that is at least one.
pub(super) fn ago(at: Timestamp, now: Timestamp) -> String {
    let d = now - at;
    if d < Duration::seconds(0) {
        return "just now".into();
    }
    let (n, unit) = if d < Duration::minutes(1) {
        (d.num_seconds(), "s")
    } else if d < Duration::hours(1) {
        (d.num_minutes(), "min")
    } else if d < Duration::days(1) {
        (d.num_hours(), "h")
    } else {
        (d.num_days(), "d")
    };
    format!("{n} {unit} ago")
}

fn when(at: Timestamp, now: Timestamp) -> Markup {
    html! { time datetime=(time::format(at)) title=(time::format(at)) { (ago(at, now)) } }
}

fn verdict(passed: Option<bool>, status: RunStatus) -> Markup {
    match (status, passed) {
        (RunStatus::Finished, Some(true)) => html! { span.badge.st-pass { "passed" } },
        (RunStatus::Finished, _) => html! { span.badge.st-fail { "failed" } },
        (RunStatus::Aborted, _) => html! { span.badge.st-unknown { "aborted" } },
        (other, _) => html! { span.badge.gate-none { (other.as_str()) } },
    }
}

fn signature_words(v: &SignatureVerdict) -> String {
    match v {
        SignatureVerdict::Verified {
            kid,
            alg,
            key_source,
            ..
        } => {
            let source = match key_source {
                KeySource::Pinned => "a pinned key".to_string(),
                KeySource::Jku { url } => format!("the key set at {url}"),
            };
            format!("verified: {alg}, key {kid}, from {source}")
        }
        SignatureVerdict::Unsigned => "unsigned".into(),
        SignatureVerdict::Invalid { reason } => format!("invalid: {reason}"),
        SignatureVerdict::KeyUnavailable { reason } => format!("key unavailable: {reason}"),
        SignatureVerdict::NotChecked { reason } => format!("not checked: {reason}"),
    }
}

fn card_trust(snapshot: Option<&CardSnapshot>) -> Markup {
    match snapshot {
        None => html! { span.muted { "no card yet" } },
        Some(s) if s.assessment.trusted => html! {
            span.badge.st-pass { "trusted" }
            " " span.muted { (signature_words(&s.assessment.signature)) }
        },
        Some(s) => html! {
            span.badge.st-fail { "untrusted" }
            " " span.muted { (s.assessment.problem.as_deref().unwrap_or("not trusted")) }
        },
    }
}

pub(super) fn sign_in(next: &str, problem: Option<&str>) -> Markup {
    layout(
        "Sign in",
        None,
        html! {
            h1 { "Sign in to cardgate" }
            p.muted {
                "Paste an API key (reader or higher). The console keeps a session id in a cookie; "
                "the key itself is never stored in the browser."
            }
            @if let Some(problem) = problem {
                p.notice role="alert" { (problem) }
            }
            form.signin method="post" action="/ui/sign-in" {
                input type="hidden" name="next" value=(next);
                label {
                    "API key"
                    input type="password" name="key" autocomplete="current-password" required
                        autofocus spellcheck="false" maxlength="256";
                }
                div { button.primary type="submit" { "Sign in" } }
            }
        },
    )
}

/// One page of callees: the filter form, the table, and a link to the next page.
pub(super) fn callees(
    viewer: &Viewer<'_>,
    page: &[CalleeDetail],
    filter: &CalleeFilter,
    next: Option<String>,
    now: Timestamp,
) -> Markup {
    let states = [
        EffectiveGate::Untrusted,
        EffectiveGate::CardTrusted,
        EffectiveGate::LifecycleTrusted,
        EffectiveGate::Demoted,
    ];
    layout(
        "Callees",
        Some(viewer),
        html! {
            h1 { "Callees" }
            form.filter method="get" action="/ui" role="search" {
                label {
                    "Name or card URL"
                    input type="search" name="q" value=[filter.text.as_deref()] maxlength="200";
                }
                label {
                    "Gate state"
                    select name="state" {
                        option value="" selected[filter.gate.is_none()] { "any" }
                        @for s in states {
                            option value=(s.as_str()) selected[filter.gate == Some(s)] { (s.as_str()) }
                        }
                    }
                }
                button type="submit" { "Filter" }
            }
            @if page.is_empty() {
                p.muted { "No callee matches." }
            } @else {
                div.scroll tabindex="0" role="region" aria-label="Scrollable table" {
                    table.stack {
                        caption.sr-only { "Registered callees" }
                        thead { tr {
                            th scope="col" { "Name" }
                            th scope="col" { "Card URL" }
                            th scope="col" { "Subjects" }
                            th scope="col" { "Last probe" }
                            th scope="col" { "Card" }
                        } }
                        tbody {
                            @for d in page {
                                (callee_row(d, now))
                            }
                        }
                    }
                }
            }
            @if let Some(next) = next {
                p.pager { a href=(next) rel="next" { "Next page →" } }
            }
        },
    )
}

fn callee_row(d: &CalleeDetail, now: Timestamp) -> Markup {
    let id = d.callee.id.0;
    let newest = d.last_probes.values().max_by_key(|r| r.created_at);
    html! {
        tr data-callee=(id) {
            td data-label="Name" { a href={ "/ui/callees/" (id) } { (display_name(d)) } }
            td.url data-label="Card URL" { (d.callee.card_url.to_string()) }
            td data-label="Subjects" { div.subjects {
                @for s in &d.subjects {
                    a class={ "badge gate-" (s.gate().as_str()) }
                        href={ "/ui/callees/" (id) "/subjects/" (s.protocol_version) } {
                        (s.protocol_version) " " (s.gate().as_str())
                    }
                }
                @if d.subjects.is_empty() { span.muted { "none" } }
            } }
            td data-label="Last probe" {
                @if let Some(run) = newest {
                    a href={ "/ui/probes/" (run.id.0) } { (verdict(run.passed(), run.status())) }
                    " " span.muted { (when(run.finished_at().unwrap_or(run.created_at), now)) }
                } @else {
                    span.muted { "never" }
                }
            }
            td data-label="Card" { (card_trust(d.latest_card.as_ref())) }
        }
    }
}

/// One callee: its facts, subjects, card snapshots and probe runs.
pub(super) fn callee(
    viewer: &Viewer<'_>,
    d: &CalleeDetail,
    snapshots: &[CardSnapshot],
    runs: &[ProbeRun],
    now: Timestamp,
) -> Markup {
    let id = d.callee.id.0;
    let name = &display_name(d);
    layout(
        name,
        Some(viewer),
        html! {
            p.crumbs { a href="/ui" { "Callees" } " / " (name) }
            h1 { (name) }
            dl.facts {
                dt { "Card URL" } dd.mono { (d.callee.card_url.to_string()) }
                dt { "Registered" } dd { (when(d.callee.created_at, now)) }
                dt { "Card" } dd { (card_trust(d.latest_card.as_ref())) }
                dt { "Last fetch" } dd {
                    @match d.callee.fetch.last_at {
                        Some(at) => { (when(at, now)) }
                        None => { "never" }
                    }
                    @if let Some(e) = &d.callee.fetch.error { " · " span.muted { (e) } }
                }
                dt { "Keys pinned" } dd { @if d.callee.trusted_keys.is_some() { "yes" } @else { "no" } }
            }
            h2 { "Subjects" }
            @if d.subjects.is_empty() { p.muted { "No subject: the card offers no version cardgate knows." } }
            @else {
                div.scroll tabindex="0" role="region" aria-label="Scrollable table" { table {
                    thead { tr {
                        th scope="col" { "Version" } th scope="col" { "Gate state" }
                        th scope="col" { "Since" } th scope="col" { "Last probe" }
                    } }
                    tbody { @for s in &d.subjects {
                        tr {
                            td { a href={ "/ui/callees/" (id) "/subjects/" (s.protocol_version) } { (s.protocol_version) } }
                            td { (gate_badge(Some(s.gate()))) @if s.state.withdrawn { " " span.muted { "(withdrawn)" } } }
                            td { (when(s.last_change.at, now)) }
                            td { @match d.last_probes.get(&s.protocol_version) {
                                Some(run) => { a href={ "/ui/probes/" (run.id.0) } { (verdict(run.passed(), run.status())) } }
                                None => { span.muted { "never" } }
                            } }
                        }
                    } }
                } }
            }
            h2 { "Probe runs" }
            (run_table(runs, now))
            h2 { "Card snapshots" }
            @if snapshots.is_empty() { p.muted { "None." } }
            @else {
                div.scroll tabindex="0" role="region" aria-label="Scrollable table" { table {
                    thead { tr {
                        th scope="col" { "Fetched" } th scope="col" { "Card" } th scope="col" { "Trust" } th scope="col" { "sha256" }
                    } }
                    tbody { @for s in snapshots {
                        tr {
                            td { a href={ "/ui/callees/" (id) "/cards/" (s.id.0) } { (when(s.fetched_at, now)) } }
                            td { (s.source.kind()) }
                            td { (card_trust(Some(s))) }
                            td.mono { (s.sha256.get(..16).unwrap_or(&s.sha256)) "…" }
                        }
                    } }
                } }
            }
        },
    )
}

fn run_table(runs: &[ProbeRun], now: Timestamp) -> Markup {
    html! {
        @if runs.is_empty() { p.muted { "None yet." } }
        @else {
            div.scroll tabindex="0" role="region" aria-label="Scrollable table" { table {
                thead { tr {
                    th scope="col" { "Run" } th scope="col" { "Version" } th scope="col" { "Verdict" }
                    th scope="col" { "Wire" } th scope="col" { "Why" }
                } }
                tbody { @for r in runs {
                    tr {
                        td { a href={ "/ui/probes/" (r.id.0) } { (when(r.created_at, now)) } }
                        td { (r.protocol_version) }
                        td { (verdict(r.passed(), r.status())) }
                        td.mono { (r.start().map(|s| s.wire.as_str()).unwrap_or("–")) }
                        td { (r.reason) }
                    }
                } }
            } }
        }
    }
}

/// A decision shown for one posture a caller may take.
pub(super) struct PostureDecision {
    pub label: &'static str,
    pub posture: Posture,
    pub decision: Decision,
}

fn condition_class(s: ConditionStatus) -> &'static str {
    match s {
        ConditionStatus::Pass => "pass",
        ConditionStatus::Fail => "fail",
        ConditionStatus::Unknown => "unknown",
    }
}

/// What the badge is and how to embed it.
pub(super) struct BadgeLink {
    pub path: String,
    pub absolute: String,
}

/// What a subject's page shows.
pub(super) struct SubjectView<'a> {
    pub detail: &'a CalleeDetail,
    pub subject: &'a Subject,
    pub decisions: Vec<PostureDecision>,
    pub badge: BadgeLink,
    /// Its ledger events, newest first.
    pub events: Vec<EventRecord>,
    /// The link to older events, when there are more.
    pub older: Option<String>,
    /// The rulebook version in force.
    pub rulebook: &'a str,
    /// The newest finished run and the rulebook its findings stand judged under.
    pub judged: Option<(ProbeRunId, Option<String>)>,
    /// Its track record, and its recent runs, newest first.
    pub record: Option<crate::domain::probe::track::TrackRecord>,
    pub runs: Vec<ProbeRun>,
}

/// One subject: the decisions callers get now, its badge, and its timeline from the ledger.
pub(super) fn subject(viewer: &Viewer<'_>, view: &SubjectView<'_>, now: Timestamp) -> Markup {
    let SubjectView {
        detail: d,
        subject: s,
        decisions,
        badge,
        events,
        older,
        rulebook,
        judged,
        record,
        runs,
    } = view;
    let id = d.callee.id.0;
    let name = &display_name(d);
    let title = format!("{name} {}", s.protocol_version);
    let markdown = format!(
        "[![cardgate {v}]({src})]({src})",
        v = s.protocol_version,
        src = badge.absolute
    );
    layout(
        &title,
        Some(viewer),
        html! {
            p.crumbs { a href="/ui" { "Callees" } " / " a href={ "/ui/callees/" (id) } { (name) } " / " (s.protocol_version) }
            h1 { (name) " · A2A " (s.protocol_version) " " (gate_badge(Some(s.gate()))) }
            @if let Some(reason) = &s.state.card_untrusted {
                p.notice { "The current card is not trusted: " (reason) }
            }
            p {
                "Judged under rulebook "
                @match judged {
                    Some((run, Some(version))) => {
                        span.mono title=(version) { (short(version)) }
                        @if version == rulebook { " (the " a href="/ui/rulebook" { "rulebook in force" } ")" }
                        @else { " (not the " a href="/ui/rulebook" { "rulebook in force" } ", " span.mono { (short(rulebook)) } ": its evidence is judged again at the next start or on request)" }
                        ", by its newest " a href={ "/ui/probes/" (run.0) } { "probe run" } "."
                    }
                    Some((run, None)) => { "— none: its newest " a href={ "/ui/probes/" (run.0) } { "probe run" } " was judged before rulebooks were versioned." }
                    None => { span.mono { (short(rulebook)) } " when it is first probed: no probe run has finished yet." }
                }
            }
            h2 { "What a caller is told now" }
            @for pd in decisions {
                section.decision aria-label=(pd.label) {
                    h3 {
                        (pd.label)
                        @if pd.decision.authoritative { span.badge.st-pass { "authoritative" } }
                        @else { span.badge.st-unknown { "advisory" } }
                    }
                    p.muted.mono {
                        "GET /v1/trust?callee_id=" (id) "&caller_version=" (pd.posture.caller_version)
                        "&dedup=" (match pd.posture.dedup { Dedup::Timestamp => "timestamp", Dedup::None => "none" })
                        @if !pd.posture.requires.is_empty() {
                            "&requires=" (pd.posture.requires.iter().map(|c| c.as_str()).collect::<Vec<_>>().join(","))
                        }
                    }
                    div.scroll tabindex="0" role="region" aria-label="Scrollable table" { table.stack {
                        thead { tr { th scope="col" { "Condition" } th scope="col" { "Status" } th scope="col" { "Reason" } } }
                        tbody { @for c in &pd.decision.conditions {
                            tr {
                                td.mono data-label="Condition" { (c.id) }
                                td data-label="Status" { span class={ "badge st-" (condition_class(c.status)) } { (condition_class(c.status)) } }
                                td data-label="Reason" { (c.reason) }
                            }
                        } }
                    } }
                }
            }
            (track::record(record.as_ref(), runs, now))
            h2 { "Badge" }
            p { img src=(badge.path) alt={ "cardgate " (s.protocol_version) ": " (s.gate().as_str()) }; }
            label for="badge-markdown" { "Markdown for a README" }
            input.copy id="badge-markdown" type="text" readonly value=(markdown);
            h2 { "Timeline" }
            @if events.is_empty() { p.muted { "No events." } }
            ol.timeline {
                @for e in events { (event_item(id, e, now)) }
            }
            @if let Some(older) = older {
                p.pager { a href=(older) rel="next" { "Older events →" } }
            }
        },
    )
}

fn event_item(callee: uuid::Uuid, e: &EventRecord, now: Timestamp) -> Markup {
    let body = EventBody::from_parts(&e.kind, e.data.clone()).ok();
    let card = |snapshot: uuid::Uuid| {
        html! { a href={ "/ui/callees/" (callee) "/cards/" (snapshot) } { "card snapshot" } }
    };
    let run = |run: uuid::Uuid| html! { a href={ "/ui/probes/" (run) } { "probe run" } };
    html! {
        li class={ "k-" (e.kind) } data-kind=(e.kind) {
            div.event-head {
                span.event-kind { (e.kind) }
                span.muted { "#" (e.seq) " · " (when(e.recorded_at, now)) " · by " (e.actor) }
            }
            div {
                @match &body {
                    Some(EventBody::VersionAppeared { snapshot_id, advertised }) => {
                        "Offered by the card; advertises "
                        (if advertised.is_empty() { "no optional capability".to_string() }
                         else { advertised.iter().map(|c| c.as_str()).collect::<Vec<_>>().join(", ") })
                        ". " (card(snapshot_id.0))
                    }
                    Some(EventBody::VersionWithdrawn { snapshot_id }) => { "No longer offered. " (card(snapshot_id.0)) }
                    Some(EventBody::CardRepublished { snapshot_id, .. }) => { "The card changed. " (card(snapshot_id.0)) }
                    Some(EventBody::CapabilityAdvertised { capability, snapshot_id }) => {
                        "Now advertises " code { (capability) } ". " (card(snapshot_id.0))
                    }
                    Some(EventBody::CapabilityWithdrawn { capability, snapshot_id }) => {
                        "No longer advertises " code { (capability) } ". " (card(snapshot_id.0))
                    }
                    Some(EventBody::CardUntrusted { snapshot_id, reason }) => {
                        span.trigger { "Card untrusted: " } (reason) " "
                        @if let Some(s) = snapshot_id { (card(s.0)) }
                    }
                    Some(EventBody::CardTrustRestored { snapshot_id }) => { "The card verifies again. " (card(snapshot_id.0)) }
                    Some(EventBody::ProbeFinished { probe_run_id, passed, failed_findings, not_exercised, .. }) => {
                        @if *passed { "The cycle passed. " } @else { "The cycle failed" }
                        @if !failed_findings.is_empty() { ": " span.mono { (failed_findings.join(", ")) } ". " }
                        @else if !*passed { ". " }
                        @if let Some(why) = not_exercised { "Not exercised: " (why) ". " }
                        (run(probe_run_id.0))
                    }
                    Some(EventBody::Promoted { probe_run_id, .. }) => { "Promoted to lifecycle-trusted by a passing " (run(probe_run_id.0)) "." }
                    Some(EventBody::Demoted { class, probe_run_id, report_id, reason, .. }) => {
                        span.trigger data-trigger=(class.as_str()) { "Trigger: " (class.as_str()) } " — " (reason) " "
                        @if let Some(r) = probe_run_id { "Evidence: " (run(r.0)) "." }
                        @if let Some(r) = report_id { "Evidence: report " span.mono { (r.0) } "." }
                    }
                    Some(EventBody::ReportReceived { report_id, trigger, reporter }) => {
                        "A verified report by " (reporter) " of " code { (trigger) } " (report " span.mono { (report_id.0) } ")."
                    }
                    Some(EventBody::Rejudged { probe_run_id, from_rulebook, to_rulebook, passed_now, reasons, .. }) => {
                        "Re-judged from its stored evidence under rulebook " span.mono { (short(to_rulebook)) }
                        " (was " span.mono { (from_rulebook.as_deref().map_or("unversioned", short)) } "): "
                        @if *passed_now { "now passes; a fresh probe is queued, since only a probe promotes. " }
                        @else { "now fails: " (reasons.join("; ")) ". " }
                        (run(probe_run_id.0))
                    }
                    None => { pre tabindex="0" { (e.data.to_string()) } }
                }
            }
        }
    }
}

/// The first 12 hex digits of a rulebook version, as the console shows it.
fn short(version: &str) -> &str {
    version.get(..12).unwrap_or(version)
}

/// One probe run: the diagram, the verdict and findings, then the exchanges, collapsed.
pub(super) fn probe_run(
    viewer: &Viewer<'_>,
    run: &ProbeRun,
    callee_name: &str,
    events: &[EventRecord],
    now: Timestamp,
) -> Markup {
    let callee = run.callee_id.0;
    let judgement = run.judgement();
    let evidence = run.evidence();
    let transitions = evidence
        .map(|e| e.observations.transitions.as_slice())
        .unwrap_or_default();
    let findings = judgement.map(|j| j.findings.as_slice()).unwrap_or_default();
    let exchanges = evidence.and_then(|e| e.transcript.as_array());
    layout(
        "Probe run",
        Some(viewer),
        html! {
            p.crumbs {
                a href="/ui" { "Callees" } " / " a href={ "/ui/callees/" (callee) } { (callee_name) } " / "
                a href={ "/ui/callees/" (callee) "/subjects/" (run.protocol_version) } { (run.protocol_version) }
                " / probe run"
            }
            h1 { "Probe run " (verdict(run.passed(), run.status())) }
            dl.facts {
                dt { "Run" } dd.mono { (run.id.0) }
                dt { "Requested" } dd { (when(run.created_at, now)) " by " (run.requested_by) " (" (run.reason) ")" }
                @if let Some(start) = run.start() {
                    dt { "Interface" } dd.mono { (start.interface_url) " · " (start.wire) }
                    dt { "Started" } dd { (time::format(start.at)) }
                }
                @if let Some(at) = run.finished_at() { dt { "Finished" } dd { (time::format(at)) } }
                @if let Some(why) = run.abort_reason() { dt { "Aborted" } dd { (why) } }
                @if let Some(j) = judgement {
                    dt { "Rulebook" }
                    dd {
                        @match &j.verdict.rulebook {
                            Some(version) => { span.mono title=(version) { (short(version)) } " (the rules and policy this verdict was judged under; the " a href="/ui/rulebook" { "rulebook in force" } ")" }
                            None => { "judged before rulebooks were versioned" }
                        }
                    }
                }
                @if let Some(at) = evidence.and_then(|e| e.transcript_pruned_at) {
                    dt { "Transcript" } dd { "pruned " (when(at, now)) ": past this subject's newest runs, and cited by no promotion or demotion. The verdict, findings and transitions stay." }
                }
            }
            @if let Some(j) = judgement {
                @if !j.verdict.triggers.is_empty() {
                    h2 { "Demotion triggers" }
                    ul { @for (class, reason) in &j.verdict.triggers {
                        li { span.trigger data-trigger=(class.as_str()) { (class.as_str()) } " — " (reason) }
                    } }
                }
                @if !j.verdict.reasons.is_empty() {
                    h2 { "Why it did not pass" }
                    ul { @for r in &j.verdict.reasons { li { (r) } } }
                }
            }
            h2 { "Transitions" }
            @if transitions.is_empty() { p.muted { "No transition was observed." } }
            @else {
                p.muted { "Time runs down; each arrow is one task status as a channel delivered it. Marked arrows broke a rule (hover for which)." }
                div.diagram.scroll tabindex="0" role="region" aria-label="Sequence diagram" { (diagram::render(transitions, findings)) }
                details {
                    summary { "The same transitions as a table" }
                    div.scroll tabindex="0" role="region" aria-label="Scrollable table" { table {
                        thead { tr {
                            th scope="col" { "Received" } th scope="col" { "Channel" } th scope="col" { "State" }
                            th scope="col" { "Timestamp" } th scope="col" { "History" } th scope="col" { "Marked" }
                        } }
                        tbody {
                            @let marks = diagram::marks(transitions, findings);
                            @for (t, m) in transitions.iter().zip(&marks) {
                                tr {
                                    td.mono { (time::format(t.observed_at)) }
                                    td { (t.channel().to_string()) }
                                    td.mono { (t.raw_state) }
                                    td.mono { (t.timestamp.as_deref().unwrap_or("none")) }
                                    td { (t.history_len.map(|n| n.to_string()).unwrap_or_default()) }
                                    td { (m.join("; ")) }
                                }
                            }
                        }
                    } }
                }
            }
            @if let Some(j) = judgement {
                h2 { "Capabilities" }
                div.scroll tabindex="0" role="region" aria-label="Scrollable table" { table {
                    thead { tr { th scope="col" { "Capability" } th scope="col" { "Outcome" } th scope="col" { "Reason" } } }
                    tbody { @for (cap, outcome) in &j.capabilities {
                        @let (word, class, reason) = match outcome {
                            CapabilityOutcome::Passed => ("passed", "pass", None),
                            CapabilityOutcome::Failed { reason } => ("failed", "fail", Some(&**reason)),
                            CapabilityOutcome::NotAdvertised => ("not advertised", "unknown", None),
                            CapabilityOutcome::NotExercised { reason } => ("not exercised", "not-exercised", Some(&**reason)),
                        };
                        tr {
                            td.mono { (cap) }
                            td { span class={ "badge st-" (class) } { (word) } }
                            td { (reason.unwrap_or("")) }
                        }
                    } }
                } }
                h2 { "Findings" }
                div.scroll tabindex="0" role="region" aria-label="Scrollable table" { table.stack {
                    thead { tr {
                        th scope="col" { "Rule" } th scope="col" { "Level" } th scope="col" { "Status" } th scope="col" { "Evidence" }
                    } }
                    tbody { @for f in &j.findings {
                        @let (word, class) = match f.status {
                            FindingStatus::Pass => ("pass", "pass"),
                            FindingStatus::Fail => ("fail", "fail"),
                            FindingStatus::NotExercised => ("not exercised", "not-exercised"),
                        };
                        tr data-rule=(f.code.code()) {
                            td.mono data-label="Rule" { (f.code.code()) }
                            td data-label="Level" { (f.level.as_str()) }
                            td data-label="Status" { span class={ "badge st-" (class) } { (word) } }
                            td data-label="Evidence" { (f.message) @if let Some(t) = f.trigger { " " span.trigger { "(" (t.as_str()) ")" } } }
                        }
                    } }
                } }
            }
            @if !events.is_empty() {
                h2 { "Ledger events" }
                ol.timeline { @for e in events { (event_item(callee, e, now)) } }
            }
            h2 { "Exchanges" }
            @match exchanges {
                Some(list) if !list.is_empty() => {
                    p.muted { (list.len()) " exchanges, as stored (secrets redacted before storing)." }
                    @for x in list { (exchange(x)) }
                }
                _ => { p.muted { "None stored." } }
            }
        },
    )
}

fn exchange(x: &serde_json::Value) -> Markup {
    let field = |k: &str| x.get(k).and_then(|v| v.as_str()).unwrap_or("");
    let status = x
        .get("status")
        .and_then(|v| v.as_u64())
        .map(|s| s.to_string())
        .or_else(|| {
            x.get("error")
                .and_then(|e| e.as_str())
                .map(|_| "error".to_string())
        })
        .unwrap_or_else(|| "–".into());
    let pretty = serde_json::to_string_pretty(x).unwrap_or_default();
    html! {
        details.exchange {
            summary {
                span.mono { "#" (x.get("call").and_then(|v| v.as_u64()).unwrap_or(0)) " " (field("step")) " · "
                (field("method")) " " (field("url")) " → " (status) }
            }
            pre tabindex="0" { (pretty) }
        }
    }
}

/// Most lines of a card shown or compared: a card is small, but everything fetched is hostile.
const MAX_CARD_LINES: usize = 4_000;

/// The card's bytes for people: pretty JSON when it parses, else the text as served.
fn card_text(s: &CardSnapshot) -> String {
    let text = match serde_json::from_slice::<serde_json::Value>(&s.raw) {
        Ok(v) => serde_json::to_string_pretty(&v).unwrap_or_default(),
        Err(_) => String::from_utf8_lossy(&s.raw).into_owned(),
    };
    let mut lines: Vec<&str> = text.lines().take(MAX_CARD_LINES + 1).collect();
    if lines.len() > MAX_CARD_LINES {
        lines.truncate(MAX_CARD_LINES);
        lines.push("… (cut)");
    }
    let mut text = lines.join("\n");
    text.push('\n');
    text
}

/// One card snapshot: its trust, the card, and what changed since the one before.
pub(super) fn card(
    viewer: &Viewer<'_>,
    callee_name: &str,
    s: &CardSnapshot,
    previous: Option<&CardSnapshot>,
    now: Timestamp,
) -> Markup {
    let callee = s.callee_id.0;
    let text = card_text(s);
    layout(
        "Card snapshot",
        Some(viewer),
        html! {
            p.crumbs { a href="/ui" { "Callees" } " / " a href={ "/ui/callees/" (callee) } { (callee_name) } " / card snapshot" }
            h1 { "Card snapshot" }
            dl.facts {
                dt { "Card" } dd {
                    @match s.source {
                        SnapshotSource::Public => { "the public card" }
                        SnapshotSource::Extended { probe_run_id } => {
                            "the authenticated extended card, fetched with the callee's credentials by "
                            a href={ "/ui/probes/" (probe_run_id.0) } { "a probe run" }
                        }
                    }
                }
                dt { "Fetched" } dd { (time::format(s.fetched_at)) " (" (ago(s.fetched_at, now)) ")" }
                dt { "From" } dd.mono { (s.url) }
                dt { "sha256" } dd.mono { (s.sha256) }
                dt { "Trust" } dd { (card_trust(Some(s))) }
                dt { "Signature" } dd data-signature { (signature_words(&s.assessment.signature)) }
                @if !s.assessment.uncovered.is_empty() {
                    dt { "Not covered by the signature" } dd.mono { (s.assessment.uncovered.join(", ")) }
                }
                @if let Some(card) = &s.assessment.card {
                    dt { "Versions" } dd { (card.versions().iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")) }
                }
            }
            h2 { "Changes since the previous snapshot of this card" }
            @match previous {
                None => { p.muted { "This is the first snapshot." } }
                Some(p) => {
                    p.muted {
                        "Compared with " a href={ "/ui/callees/" (callee) "/cards/" (p.id.0) } { "the snapshot of " (time::format(p.fetched_at)) } "."
                    }
                    (diff(&card_text(p), &text))
                }
            }
            h2 { "The card as served" }
            pre.card tabindex="0" { (text) }
        },
    )
}

/// A unified line diff, additions and removals marked in words as well as colour.
fn diff(old: &str, new: &str) -> Markup {
    let diff = similar::TextDiff::from_lines(old, new);
    if diff.ratio() >= 1.0 {
        return html! { p.muted { "No change in the card's JSON (the bytes differ only in layout)." } };
    }
    let unified = diff.unified_diff().context_radius(3).to_string();
    html! {
        pre.diff tabindex="0" aria-label="Line diff: lines starting with + were added, - removed" {
            @for line in unified.lines() {
                @if line.starts_with('+') { span.diff-add { (line) } }
                @else if line.starts_with('-') { span.diff-del { (line) } }
                @else { (line) (PreEscaped("\n")) }
            }
        }
    }
}

/// A page that says what went wrong, with the status the response carries.
pub(super) fn error(status: u16, message: &str, viewer: Option<&Viewer<'_>>) -> Markup {
    layout(
        "Error",
        viewer,
        html! {
            h1 { (status) }
            p.notice role="alert" { (message) }
            p { a href="/ui" { "Back to the callees" } }
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_use_the_largest_whole_unit() {
        let now = chrono::DateTime::from_timestamp(1_780_000_000, 0).unwrap();
        assert_eq!(ago(now - Duration::seconds(5), now), "5 s ago");
        assert_eq!(ago(now - Duration::minutes(90), now), "1 h ago");
        assert_eq!(ago(now - Duration::days(3), now), "3 d ago");
        assert_eq!(ago(now + Duration::seconds(3), now), "just now");
    }

    #[test]
    fn a_diff_marks_added_and_removed_lines_and_escapes_them() {
        let html = diff("{\n  \"a\": 1\n}\n", "{\n  \"a\": \"<b>\"\n}\n").into_string();
        assert!(
            html.contains("<span class=\"diff-del\">-  &quot;a&quot;: 1</span>"),
            "{html}"
        );
        assert!(!html.contains("No newline"), "{html}");
        assert!(html.contains("&lt;b&gt;"), "{html}");
        assert!(diff("x\n", "x\n").into_string().contains("No change"));
    }
}
