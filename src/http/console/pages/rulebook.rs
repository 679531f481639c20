//! The rulebook page: every rule in force, what it checks, its level, whether a failure blocks
//! promotion and by what (the trust model or the operator's policy), the class it demotes
//! with, and the spec section it enforces, under the version every verdict names.

use maud::{Markup, html};

use super::{Viewer, layout};
use crate::domain::probe::Level;
use crate::domain::rulebook::{BlocksBy, RuleEntry, Rulebook};

fn level_badge(level: Level) -> Markup {
    let class = match level {
        Level::Must | Level::Policy => "st-fail",
        Level::Should => "st-unknown",
    };
    html! { span class={ "badge " (class) } { (level.as_str()) } }
}

fn blocks(rule: &RuleEntry) -> Markup {
    match rule.blocks_by {
        Some(BlocksBy::TrustModel) => html! { "yes, by the trust model" },
        Some(BlocksBy::Policy) => html! { strong { "yes, by the operator's policy" } },
        None => html! { span.muted { "no: reported only" } },
    }
}

pub(in crate::http::console) fn rulebook(viewer: &Viewer<'_>, book: &Rulebook) -> Markup {
    let rules = book.rules();
    let by_policy = rules
        .iter()
        .filter(|r| r.blocks_by == Some(BlocksBy::Policy))
        .count();
    let blocking = rules.iter().filter(|r| r.blocks).count();
    layout(
        "Rulebook",
        Some(viewer),
        html! {
            h1 { "Rulebook" }
            dl.facts {
                dt { "Version" } dd.mono { (book.version()) }
                dt { "Rules" } dd { (rules.len()) ", of which " (blocking) " block promotion (" (by_policy) " by the operator's policy)" }
            }
            p {
                "Every probe run's verdict, and every probe-finished, promoted and demoted event, names the version it was judged under. "
                "When the rules or the policy change, so does the version, and each subject's newest run is judged again from its stored evidence: "
                "a trusted subject whose evidence now fails is demoted; one whose evidence now passes is probed afresh, since only a probe promotes. "
                "The same as JSON: " a href="/v1/rulebook" { "GET /v1/rulebook" } "."
            }
            div.scroll tabindex="0" role="region" aria-label="Scrollable table" { table.stack {
                thead { tr {
                    th scope="col" { "Rule" } th scope="col" { "Checks" } th scope="col" { "Level" }
                    th scope="col" { "Blocks promotion" } th scope="col" { "Demotes as" } th scope="col" { "Source" }
                } }
                tbody { @for rule in rules {
                    tr id=(rule.code.code()) {
                        td.mono data-label="Rule" { (rule.code.code()) }
                        td data-label="Checks" { (rule.code.summary()) }
                        td data-label="Level" {
                            (level_badge(rule.level))
                            @if let Some(v0) = rule.level_v0 { " " span.muted { "(v0.x: " (v0.as_str()) ")" } }
                        }
                        td data-label="Blocks promotion" { (blocks(rule)) }
                        td data-label="Demotes as" {
                            @match rule.class { Some(c) => span.trigger data-trigger=(c.as_str()) { (c.as_str()) }, None => span.muted { "—" } }
                        }
                        td data-label="Source" { (rule.source) }
                    }
                } }
            } }
        },
    )
}
