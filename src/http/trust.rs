//! `GET /v1/trust`: the caller's question and the registry's answer.

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

use super::ApiState;
use super::conditional::{self, Tagged};
use super::error::{ApiError, ErrorBody};
use super::extract::Query;
use super::trials::TrackRecordView;
use super::views::GateStateView;
use crate::domain::capability::{Capability, CapabilitySet};
use crate::domain::decision::record::RecordAsk;
use crate::domain::decision::{ConditionStatus, Decision, Dedup, Posture};
use crate::domain::ids::CalleeId;
use crate::domain::probe::track::TrackRecord;
use crate::domain::version::ProtocolVersion;
use crate::service::trust;

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct TrustQuery {
    /// The callee asked about (or give `card_url`).
    #[param(format = Uuid)]
    pub callee_id: Option<String>,
    /// The callee's card URL, as registered (normalized the same way; an origin and its
    /// well-known card URLs name one card): instead of `callee_id`.
    pub card_url: Option<String>,
    /// The A2A version the caller implements, exactly `Major.Minor` (e.g. `1.0`).
    #[param(required = true, pattern = r"^[0-9]{1,4}\.[0-9]{1,4}$")]
    pub caller_version: Option<String>,
    /// `timestamp` (default) if the caller deduplicates terminal events by
    /// `status.timestamp`, `none` if not.
    #[param(pattern = "^(timestamp|none)$")]
    pub dedup: Option<String>,
    /// Comma-separated optional capabilities the caller depends on:
    /// `streaming`, `pushNotifications`, `stateTransitionHistory`.
    #[param(
        pattern = "^((streaming|pushNotifications|stateTransitionHistory)(,(streaming|pushNotifications|stateTransitionHistory))*)?$"
    )]
    pub requires: Option<String>,
    /// A ledger seq the caller already knows of (the `ledger_seq` of its own write, perhaps
    /// made through another replica): the answer reflects at least that seq. The replica
    /// catches up first, within one second (503 if it cannot); a seq the ledger does not have
    /// yet is 409.
    #[param(pattern = "^[0-9]{1,18}$")]
    pub min_seq: Option<String>,
    /// `true`: add a `receipt`, the decision signed with the checkpoint that contains its
    /// evidence, to keep and verify offline (`cardgate verify`).
    #[param(pattern = "^(true|false)$")]
    pub receipt: Option<String>,
    /// Ask for a track record: the `track-record` condition is `unknown` until the subject has
    /// this many trials in the window (default 5 when only `min_clean_rate` is given), then
    /// passes when the 95 % lower bound of its clean rate reaches `min_clean_rate`.
    #[param(pattern = "^[0-9]{1,6}$")]
    pub min_trials: Option<String>,
    /// The clean-rate lower bound asked for, between 0 and 1 (default 0.95 when only
    /// `min_trials` is given).
    #[param(pattern = r"^(0(\.[0-9]{1,6})?|1(\.0{1,6})?)$")]
    pub min_clean_rate: Option<String>,
    /// Seconds: the `fresh` condition fails when the subject's newest passing probe run
    /// finished longer ago (a promotion never decays by itself; freshness is the caller's
    /// posture).
    #[param(pattern = "^[0-9]{1,10}$")]
    pub max_age: Option<String>,
}

/// Whom the question is about.
enum Callee {
    Id(CalleeId),
    CardUrl(String),
}

/// A parsed question.
struct Question {
    callee: Callee,
    posture: Posture,
    min_seq: Option<i64>,
    receipt: bool,
    record: RecordAsk,
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct DecisionView {
    pub callee_id: Uuid,
    pub caller_version: String,
    pub dedup: DedupView,
    pub requires: Vec<String>,
    /// True only when every condition passes: then the caller may derive terminal-state,
    /// deduplication and progress semantics from this callee. Otherwise the card is advisory.
    pub authoritative: bool,
    /// The subject's gate state; absent when the callee has no subject for `caller_version`.
    pub gate_state: Option<GateStateView>,
    pub conditions: Vec<ConditionView>,
    pub evidence: EvidenceView,
    /// With `receipt=true`: a compact JWS (EdDSA, `typ` `cardgate-receipt+jws`, `kid` from
    /// `/.well-known/jwks.json`) whose payload is `{"decision", "issued_at", "checkpoint":
    /// {"origin", "tree_size", "root_hash"}}`: this answer without `receipt`, when it was
    /// given, and the tree that contains `evidence.ledger_seq`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub receipt: Option<String>,
}

#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum DedupView {
    Timestamp,
    None,
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ConditionView {
    /// `card-trusted`, `version-match`, `same-origin`, `lifecycle-probe`,
    /// `capability:<name>` or `not-demoted`.
    pub id: String,
    pub status: ConditionStatusView,
    pub reason: String,
}

#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum ConditionStatusView {
    Pass,
    Fail,
    /// Not established either way. Never counts as a pass.
    Unknown,
}

/// What the answer was computed from.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct EvidenceView {
    pub card_snapshot_id: Option<Uuid>,
    pub probe_run_id: Option<Uuid>,
    /// The subject's newest ledger event at the time of the answer.
    pub ledger_seq: Option<i64>,
    pub ledger_hash: Option<String>,
    /// The rulebook in force (`GET /v1/rulebook`): the rules the evidence is judged under.
    /// Stored evidence is judged again under it when the service starts under a new one.
    pub rulebook: String,
    /// The subject's track record over the window; absent when the callee has no subject for
    /// `caller_version`.
    pub track_record: Option<TrackRecordView>,
}

/// Parses the query into the callee and the caller's posture, with a precise error for each
/// malformed part.
fn parse(q: TrustQuery) -> Result<Question, ApiError> {
    let missing = |name: &str| ApiError::invalid(format!("query parameter `{name}` is required"));
    let callee = match (q.callee_id, q.card_url) {
        (Some(id), None) => Uuid::parse_str(&id)
            .map(|id| Callee::Id(CalleeId(id)))
            .map_err(|_| ApiError::invalid(format!("callee_id `{id}` is not a UUID")))?,
        (None, Some(url)) => Callee::CardUrl(url),
        (Some(_), Some(_)) => {
            return Err(ApiError::invalid(
                "give `callee_id` or `card_url`, not both",
            ));
        }
        (None, None) => return Err(missing("callee_id` (or `card_url")),
    };
    let caller_version = q.caller_version.ok_or_else(|| missing("caller_version"))?;
    let caller_version = ProtocolVersion::parse_exact(&caller_version)
        .map_err(|e| ApiError::invalid(format!("caller_version: {e}")))?;
    let dedup = match q.dedup.as_deref() {
        None | Some("timestamp") => Dedup::Timestamp,
        Some("none") => Dedup::None,
        Some(other) => {
            return Err(ApiError::invalid(format!(
                "dedup must be `timestamp` or `none`, not `{other}`"
            )));
        }
    };
    let requires = q
        .requires
        .as_deref()
        .map(|list| {
            list.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(|s| {
                    s.parse::<Capability>()
                        .map_err(|e| ApiError::invalid(format!("requires: {e}")))
                })
                .collect::<Result<CapabilitySet, _>>()
        })
        .transpose()?
        .unwrap_or_default();
    let min_seq = q
        .min_seq
        .map(|seq| {
            seq.parse::<i64>().ok().filter(|n| *n >= 0).ok_or_else(|| {
                ApiError::invalid(format!("min_seq `{seq}` is not a ledger seq (0 or more)"))
            })
        })
        .transpose()?;
    let receipt = match q.receipt.as_deref() {
        None | Some("false") => false,
        Some("true") => true,
        Some(other) => {
            return Err(ApiError::invalid(format!(
                "receipt must be `true` or `false`, not `{other}`"
            )));
        }
    };
    let number = |name: &str, text: Option<String>| {
        text.map(|t| {
            t.parse::<u64>()
                .map_err(|_| ApiError::invalid(format!("{name} `{t}` is not a whole number")))
        })
        .transpose()
    };
    let min_clean_rate = q
        .min_clean_rate
        .map(|t| {
            t.parse::<f64>()
                .ok()
                .filter(|r| (0.0..=1.0).contains(r))
                .ok_or_else(|| {
                    ApiError::invalid(format!("min_clean_rate `{t}` is not a number from 0 to 1"))
                })
        })
        .transpose()?;
    let record = RecordAsk {
        min_trials: number("min_trials", q.min_trials)?
            .map(|n| u32::try_from(n).unwrap_or(u32::MAX)),
        min_clean_rate,
        max_age: number("max_age", q.max_age)?.map(std::time::Duration::from_secs),
    };
    Ok(Question {
        record,
        callee,
        posture: Posture {
            caller_version,
            dedup,
            requires,
        },
        min_seq,
        receipt,
    })
}

fn view(
    callee_id: CalleeId,
    posture: &Posture,
    d: Decision,
    rulebook: &str,
    record: Option<&TrackRecord>,
) -> DecisionView {
    DecisionView {
        callee_id: callee_id.0,
        caller_version: posture.caller_version.to_string(),
        dedup: match posture.dedup {
            Dedup::Timestamp => DedupView::Timestamp,
            Dedup::None => DedupView::None,
        },
        requires: posture.requires.iter().map(|c| c.to_string()).collect(),
        authoritative: d.authoritative,
        gate_state: d.gate_state.map(Into::into),
        conditions: d
            .conditions
            .into_iter()
            .map(|c| ConditionView {
                id: c.id,
                status: match c.status {
                    ConditionStatus::Pass => ConditionStatusView::Pass,
                    ConditionStatus::Fail => ConditionStatusView::Fail,
                    ConditionStatus::Unknown => ConditionStatusView::Unknown,
                },
                reason: c.reason,
            })
            .collect(),
        evidence: EvidenceView {
            card_snapshot_id: d.evidence.card_snapshot_id.map(|id| id.0),
            probe_run_id: d.evidence.probe_run_id.map(|id| id.0),
            ledger_seq: d.evidence.ledger_seq,
            ledger_hash: d.evidence.ledger_hash,
            rulebook: rulebook.to_string(),
            track_record: record.map(Into::into),
        },
        receipt: None,
    }
}

/// May this caller derive lifecycle semantics from this callee?
///
/// Answers with every condition and its evidence. `authoritative` is true only when all pass.
#[utoipa::path(get, path = "/v1/trust", tag = "trust",
    security(("bearer" = ["reader"])),
    params(
        TrustQuery,
        ("If-None-Match" = Option<String>, Header,
            description = "The `ETag` of a decision already held: 304 while it still stands"),
    ),
    responses(
        (status = 401, description = "No valid API key", body = ErrorBody),
        (status = 403, description = "The key's role is not enough", body = ErrorBody),
        (status = 200, description = "The decision", body = DecisionView, headers(
            ("ETag" = String, description = "A strong tag of this decision: send it back in \
                `If-None-Match` to revalidate"),
            ("Cache-Control" = String, description = "`no-cache`: revalidate before each use"),
        )),
        (status = 304, description = "The decision is still the one `If-None-Match` names", headers(
            ("ETag" = String, description = "The decision's tag"),
            ("Cache-Control" = String, description = "`no-cache`"),
        )),
        (status = 400, description = "Missing or malformed parameter", body = ErrorBody),
        (status = 404, description = "No such callee (or none with that card URL)", body = ErrorBody),
        (status = 409, description = "`min_seq` is ahead of the ledger: no write has answered \
            that seq", body = ErrorBody),
        (status = 503, description = "This replica could not catch up with `min_seq` within a \
            second (or the request timed out); retry after the Retry-After header's seconds",
            body = ErrorBody),
    ))]
pub(crate) async fn get_trust(
    State(app): State<ApiState>,
    headers: HeaderMap,
    Query(q): Query<TrustQuery>,
) -> Result<Response, ApiError> {
    let Question {
        callee,
        posture,
        min_seq,
        receipt,
        record,
    } = parse(q)?;
    let services = &app.services;
    let callee_id = match callee {
        Callee::Id(id) => id,
        // From memory, like the decision: a caller that knows only the URL reads no database.
        Callee::CardUrl(url) => trust::callee_by_card_url(&services.view, &url, min_seq)
            .await?
            .ok_or_else(|| {
                ApiError::NotFound(format!("no callee is registered with card URL {url}"))
            })?,
    };
    if receipt {
        // Boxed: its signing state would otherwise make every decision's future larger.
        return Box::pin(with_receipt(
            &app, &headers, callee_id, posture, record, min_seq,
        ))
        .await;
    }
    // Rendered once per change of the callee, not once per request: callers ask before every
    // task, so the answer is usually the one rendered for the previous caller.
    let answer = trust::answer(
        &services.view,
        &app.answers,
        (callee_id, &posture, &record),
        (min_seq, services.now()),
        |decision, track| {
            let rulebook = services.probe.rulebook.version();
            Tagged::json(&view(callee_id, &posture, decision, rulebook, track))
        },
    )
    .await??;
    Ok(conditional::respond_tagged(
        &headers,
        "application/json",
        "no-cache",
        answer,
    ))
}

/// The decision with its signed receipt: evaluated afresh, since the receipt names the
/// checkpoint of the moment.
async fn with_receipt(
    app: &ApiState,
    headers: &HeaderMap,
    callee_id: CalleeId,
    posture: Posture,
    ask: RecordAsk,
    min_seq: Option<i64>,
) -> Result<Response, ApiError> {
    let services = &app.services;
    let (decision, track) = trust::evaluate(
        &services.view,
        (callee_id, &posture, &ask),
        (min_seq, services.now()),
    )
    .await?;
    let mut answer = view(
        callee_id,
        &posture,
        decision,
        services.probe.rulebook.version(),
        track.as_ref(),
    );
    let signed = serde_json::to_value(&answer).map_err(|e| ApiError::Internal(e.into()))?;
    let jws = services
        .transparency
        .receipt(&services.store, &services.view, signed, services.now())
        .await?;
    answer.receipt = Some(jws);
    conditional::respond(headers, &answer)
}
