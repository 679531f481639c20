//! A subject's track record on its console page: a strip of its recent runs (oldest first,
//! each a link, its colour never the only cue), the class, the trial counts with the clean
//! rate's lower bound, and latency p50/p95 per operation.

use maud::{Markup, html};

use super::when;
use crate::domain::probe::latency::Op;
use crate::domain::probe::track::TrackRecord;
use crate::domain::probe::{ProbeRun, RunStatus};
use crate::domain::time::Timestamp;

/// One run of the strip: a square saying passed, failed or aborted, in words for readers.
fn cell(run: &ProbeRun, now: Timestamp) -> Markup {
    let (class, word) = match (run.status(), run.passed()) {
        (RunStatus::Finished, Some(true)) => ("st-pass", "passed"),
        (RunStatus::Finished, _) => ("st-fail", "failed"),
        (RunStatus::Aborted, _) => ("st-unknown", "aborted"),
        (other, _) => ("gate-none", other.as_str()),
    };
    let trials = run
        .judgement()
        .and_then(|j| j.verdict.trials.clone())
        .map(|t| format!(", {} of {} trials clean", t.clean, t.count))
        .unwrap_or_default();
    let label = format!("{word}{trials}, {}", super::ago(run.created_at, now));
    html! {
        li { a class={ "run " (class) } href={ "/ui/probes/" (run.id.0) } title=(label) aria-label=(label) {
            (word.chars().next().unwrap_or('?').to_ascii_uppercase())
        } }
    }
}

pub(in crate::http::console) fn record(
    record: Option<&TrackRecord>,
    runs: &[ProbeRun],
    now: Timestamp,
) -> Markup {
    let record = record.copied().unwrap_or_default();
    let latency = record.latency();
    html! {
        h2 { "Track record" }
        @if runs.is_empty() { p.muted { "No probe run yet." } }
        @else {
            ol.strip aria-label="Recent probe runs, oldest first" {
                @for run in runs.iter().rev() { (cell(run, now)) }
            }
        }
        dl.facts data-track-class=(record.class.as_str()) {
            dt { "Class" } dd { span class={ "badge track-" (record.class.as_str()) } { (record.class.as_str()) } }
            dt { "Trials" } dd {
                (record.clean) " of " (record.trials) " clean, in " (record.runs) " runs"
                @if let Some(bound) = record.clean_rate_lower_bound() {
                    " (clean rate at least " (format!("{bound:.2}")) ", 95 % lower bound)"
                }
            }
            @if let Some(at) = record.newest_run_at() { dt { "Newest run" } dd { (when(at, now)) } }
            @if let Some(at) = record.newest_pass_at() { dt { "Newest passing run" } dd { (when(at, now)) } }
            @for op in Op::ALL {
                @if let Some(p) = latency.get(op) {
                    dt { "Latency: " (op.as_str()) } dd { "p50 " (p.p50_ms) " ms, p95 " (p.p95_ms) " ms" }
                }
            }
        }
    }
}
