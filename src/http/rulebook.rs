//! `/v1/rulebook`: the rules in force, each with its level, class, whether it blocks and by
//! what, and its source, with the rulebook version every verdict names.

use axum::Extension;
use axum::body::Bytes;
use axum::extract::State;
use serde::Serialize;
use utoipa::ToSchema;

use super::ApiState;
use super::closed::{BlocksByView, DemotionClassView, LevelView, RuleCode};
use super::error::{ApiError, ErrorBody};
use super::extract::Json;
use super::permissions::Caller;
use crate::domain::rulebook::{RuleEntry, Rulebook};
use crate::service;

/// The rulebook: the trust model's rules under the operator's policy.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct RulebookView {
    /// The SHA-256 (hex) of the canonical rule table: what every verdict, probe-finished,
    /// promoted and demoted event names as `rulebook`.
    pub version: String,
    pub rules: Vec<RuleView>,
}

/// One rule as the rulebook states it.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct RuleView {
    pub code: RuleCode,
    /// Its level on v1.0 subjects.
    pub level: LevelView,
    /// Its level on v0.x subjects, where it differs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub level_v0: Option<LevelView>,
    /// The demotion class a failure fires (`policy` for a rule that blocks only by policy).
    pub class: Option<DemotionClassView>,
    /// Whether a failure blocks promotion.
    pub blocks: bool,
    pub blocks_by: Option<BlocksByView>,
    /// The A2A spec section and ACTS requirement it enforces, or "registry policy".
    pub source: &'static str,
}

impl From<&RuleEntry> for RuleView {
    fn from(r: &RuleEntry) -> Self {
        Self {
            code: (&r.code).into(),
            level: (&r.level).into(),
            level_v0: r.level_v0.as_ref().map(Into::into),
            class: r.class.as_ref().map(Into::into),
            blocks: r.blocks,
            blocks_by: r.blocks_by.as_ref().map(Into::into),
            source: r.source,
        }
    }
}

impl From<&Rulebook> for RulebookView {
    fn from(book: &Rulebook) -> Self {
        Self {
            version: book.version().to_string(),
            rules: book.rules().iter().map(Into::into).collect(),
        }
    }
}

/// The rules in force and the rulebook version.
#[utoipa::path(get, path = "/v1/rulebook", tag = "probes",
    security(("bearer" = ["reader"])),
    responses(
        (status = 401, description = "No valid API key", body = ErrorBody),
        (status = 403, description = "The key's role is not enough", body = ErrorBody),
        (status = 200, description = "The rulebook", body = RulebookView)))]
pub(crate) async fn get_rulebook(
    State(app): State<ApiState>,
) -> Result<Json<RulebookView>, ApiError> {
    Ok(Json(app.services.probe.rulebook.as_ref().into()))
}

/// Subjects whose outcome changes under a rulebook, and what happens to each.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct RejudgeView {
    /// The rulebook the subjects were (or would be) judged under.
    pub version: String,
    /// Whether anything was written (`false` for a what-if).
    pub applied: bool,
    pub moves: Vec<MoveView>,
}

/// One subject whose newest finished run gets another outcome.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct MoveView {
    pub callee_id: uuid::Uuid,
    pub card_url: String,
    pub protocol_version: String,
    /// The run judged again, from its stored observations.
    pub probe_run_id: uuid::Uuid,
    /// The rulebook it was judged under before (absent: before rulebooks were versioned).
    pub from_rulebook: Option<String>,
    pub passed_before: bool,
    pub passed_now: bool,
    /// What blocks it now, one line per rule.
    pub reasons: Vec<String>,
    /// The demotion a `lifecycle-trusted` subject gets.
    pub demotes: Option<DemotionClassView>,
    /// Its evidence passes now: a fresh probe is queued (only a probe promotes).
    pub reprobe: bool,
}

impl From<&service::rulebook::Move> for MoveView {
    fn from(m: &service::rulebook::Move) -> Self {
        let r = &m.rejudgement;
        Self {
            callee_id: m.callee_id.0,
            card_url: m.card_url.clone(),
            protocol_version: m.protocol_version.to_string(),
            probe_run_id: m.probe_run_id.0,
            from_rulebook: m.from_rulebook.clone(),
            passed_before: r.passed_before,
            passed_now: r.passed_now,
            reasons: r.reasons.clone(),
            demotes: r.demotes.as_ref().map(Into::into),
            reprobe: r.reprobe,
        }
    }
}

fn rejudge_view(book: &Rulebook, applied: bool, moves: &[service::rulebook::Move]) -> RejudgeView {
    RejudgeView {
        version: book.version().to_string(),
        applied,
        moves: moves.iter().map(Into::into).collect(),
    }
}

/// Judges every subject's newest finished run again, from its stored observations, under the
/// rulebook in force: a trusted subject whose evidence now fails is demoted, one whose
/// evidence now passes gets a fresh probe; each changed outcome appends a `rejudged` event.
#[utoipa::path(post, path = "/v1/rulebook/rejudge", tag = "probes",
    security(("bearer" = ["admin"])),
    responses(
        (status = 401, description = "No valid API key", body = ErrorBody),
        (status = 403, description = "The key's role is not enough", body = ErrorBody),
        (status = 200, description = "What moved", body = RejudgeView)))]
pub(crate) async fn rejudge(
    State(app): State<ApiState>,
    Extension(caller): Extension<Caller>,
) -> Result<Json<RejudgeView>, ApiError> {
    let book = app.services.probe.rulebook.clone();
    let actor = caller.actor();
    let moves =
        service::rulebook::apply(&app.services.store, &book, &actor, app.services.now()).await?;
    Ok(Json(rejudge_view(&book, true, &moves)))
}

/// Which subjects a policy would move, judged from stored evidence under the trust model's
/// rules and this policy. Nothing is written.
#[utoipa::path(post, path = "/v1/rulebook/what-if", tag = "probes",
    security(("bearer" = ["admin"])),
    request_body(content = String, content_type = "text/plain",
        description = "A policy file (TOML), as `CARDGATE_POLICY_FILE` names it; an empty policy is `[rules]`"),
    responses(
        (status = 401, description = "No valid API key", body = ErrorBody),
        (status = 403, description = "The key's role is not enough", body = ErrorBody),
        (status = 400, description = "The policy does not parse, or unblocks what the trust model requires", body = ErrorBody),
        (status = 200, description = "What would move", body = RejudgeView)))]
pub(crate) async fn what_if(
    State(app): State<ApiState>,
    body: Bytes,
) -> Result<Json<RejudgeView>, ApiError> {
    let invalid = |message: String| ApiError::bad_request("invalid_policy", message);
    let text = std::str::from_utf8(&body)
        .map_err(|_| invalid("the policy must be UTF-8 text (TOML)".into()))?;
    if text.trim().is_empty() {
        return Err(invalid(
            "the body must be a policy file (TOML); an empty policy is `[rules]`".into(),
        ));
    }
    let policy = service::policy::parse(text).map_err(|e| invalid(format!("the policy: {e:#}")))?;
    let book = Rulebook::new(policy);
    let moves = service::rulebook::plan(&app.services.store, &book).await?;
    Ok(Json(rejudge_view(&book, false, &moves)))
}
