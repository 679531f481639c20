//! `/v1/callees/{id}/cards`: the recorded card snapshots, with their raw bytes.

use axum::extract::OriginalUri;
use axum::extract::State;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

use super::ApiState;
use super::closed::{SignatureStatusView, SnapshotKindView};
use super::error::{ApiError, ErrorBody};
use super::extract::page_size;
use super::extract::{Json, Path, Query};
use super::paging::{Paged, next_cursor};
use crate::domain::card::signature::{KeySource, SignatureVerdict};
use crate::domain::card::{CardSnapshot, NormalizedCard};
use crate::domain::ids::{CalleeId, SnapshotId};
use crate::service::callees;

/// How one snapshot was judged.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct SnapshotSummary {
    pub id: Uuid,
    /// `public`, or `extended`: the authenticated extended card, which decisions never read
    /// for callers at large.
    pub kind: SnapshotKindView,
    /// For an extended card: the probe run that fetched it with the callee's credentials.
    pub probe_run_id: Option<Uuid>,
    pub fetched_at: DateTime<Utc>,
    /// Where the card was finally served from.
    pub url: String,
    /// sha256 of the raw bytes.
    pub sha256: String,
    /// Usable for routing: parsed, and verified (or unsigned and admitted by policy).
    pub trusted: bool,
    /// Why it is not trusted.
    pub problem: Option<String>,
    pub signature: SignatureView,
    /// `v1`, `hybrid`, `v03` or `v02`; absent when the card did not parse.
    pub generation: Option<String>,
    /// Every `Major.Minor` the card offers.
    pub versions: Vec<String>,
    /// Card fields the signature does not cover (legacy fields on hybrid cards, unknown fields,
    /// the unprotected `header`, requirements erased as empty), so "signed" never overstates.
    pub uncovered_fields: Vec<String>,
    /// When retention dropped the raw bytes (`sha256` still names them); absent while they
    /// are kept.
    pub raw_pruned_at: Option<DateTime<Utc>>,
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct SignatureView {
    pub status: SignatureStatusView,
    /// Which entry of `signatures` verified.
    pub index: Option<usize>,
    pub kid: Option<String>,
    pub alg: Option<String>,
    /// `pinned` or `jku`.
    pub key_source: Option<String>,
    /// The `jku` the key came from.
    pub jku: Option<String>,
    pub reason: Option<String>,
}

/// One snapshot in full.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct SnapshotView {
    #[serde(flatten)]
    pub summary: SnapshotSummary,
    pub etag: Option<String>,
    pub last_modified: Option<String>,
    /// The normalized view of the card, when it parsed.
    pub card: Option<CardView>,
    /// The bytes exactly as served, when they are UTF-8 (cards are JSON, so normally yes);
    /// absent once retention pruned them (`raw_pruned_at`).
    pub raw_text: Option<String>,
    /// The bytes exactly as served, base64; empty once retention pruned them.
    pub raw_base64: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct CardView {
    pub name: String,
    pub description: Option<String>,
    pub agent_version: Option<String>,
    pub interfaces: Vec<InterfaceView>,
    pub capabilities: CapabilitiesView,
    pub skills: Vec<SkillView>,
    pub default_input_modes: Vec<String>,
    pub default_output_modes: Vec<String>,
    /// Top-level fields outside the card generation's model.
    pub legacy_fields: Vec<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct InterfaceView {
    pub url: String,
    pub protocol_binding: String,
    pub protocol_version: String,
    pub tenant: Option<String>,
    /// Same scheme, host and port as the card's URL.
    pub same_origin: bool,
    /// Capabilities the card advertises for this interface's version.
    pub advertised: Vec<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct CapabilitiesView {
    pub streaming: bool,
    pub push_notifications: bool,
    /// As declared; only meaningful for v0.2/v0.3 interfaces.
    pub state_transition_history: bool,
    pub extended_agent_card: bool,
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct SkillView {
    pub id: String,
    pub name: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct SnapshotPage {
    /// Newest first.
    pub items: Vec<SnapshotSummary>,
    /// Pass as `after` for the next page (older snapshots); absent on the last page.
    pub next: Option<Uuid>,
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct SnapshotQuery {
    /// Page size, 1 to 200 (default 50).
    #[param(minimum = 1, maximum = 200)]
    pub limit: Option<u32>,
    /// Cursor: the `next` of the previous page.
    pub after: Option<Uuid>,
}

impl From<&SignatureVerdict> for SignatureView {
    fn from(v: &SignatureVerdict) -> Self {
        let mut view = SignatureView {
            status: v.into(),
            index: None,
            kid: None,
            alg: None,
            key_source: None,
            jku: None,
            reason: None,
        };
        match v {
            SignatureVerdict::Verified {
                index,
                kid,
                alg,
                key_source,
            } => {
                view.index = Some(*index);
                view.kid = Some(kid.clone());
                view.alg = Some(alg.clone());
                match key_source {
                    KeySource::Pinned => view.key_source = Some("pinned".into()),
                    KeySource::Jku { url } => {
                        view.key_source = Some("jku".into());
                        view.jku = Some(url.clone());
                    }
                }
            }
            SignatureVerdict::Unsigned => {}
            SignatureVerdict::Invalid { reason }
            | SignatureVerdict::KeyUnavailable { reason }
            | SignatureVerdict::NotChecked { reason } => view.reason = Some(reason.clone()),
        }
        view
    }
}

impl From<&CardSnapshot> for SnapshotSummary {
    fn from(s: &CardSnapshot) -> Self {
        let a = &s.assessment;
        Self {
            id: s.id.0,
            kind: (&s.source).into(),
            probe_run_id: s.source.probe_run_id().map(|run| run.0),
            fetched_at: s.fetched_at,
            url: s.url.clone(),
            sha256: s.sha256.clone(),
            trusted: a.trusted,
            problem: a.problem.clone(),
            signature: (&a.signature).into(),
            generation: a.card.as_ref().map(|c| {
                serde_json::to_value(c.generation)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default()
            }),
            versions: a
                .card
                .as_ref()
                .map(|c| c.versions().iter().map(ToString::to_string).collect())
                .unwrap_or_default(),
            uncovered_fields: a.uncovered.clone(),
            raw_pruned_at: s.raw_pruned_at,
        }
    }
}

fn card_view(card: &NormalizedCard, card_url: &str) -> CardView {
    let base = url::Url::parse(card_url).ok();
    CardView {
        name: card.name.clone(),
        description: card.description.clone(),
        agent_version: card.agent_version.clone(),
        interfaces: card
            .interfaces
            .iter()
            .map(|i| InterfaceView {
                url: i.url.clone(),
                protocol_binding: i.binding.clone(),
                protocol_version: i.version.to_string(),
                tenant: i.tenant.clone(),
                same_origin: base.as_ref().is_some_and(|b| i.same_origin_as(b)),
                advertised: card
                    .advertised_for(i.version)
                    .iter()
                    .map(ToString::to_string)
                    .collect(),
            })
            .collect(),
        capabilities: CapabilitiesView {
            streaming: card.capabilities.streaming,
            push_notifications: card.capabilities.push_notifications,
            state_transition_history: card.capabilities.state_transition_history,
            extended_agent_card: card.capabilities.extended_agent_card,
        },
        skills: card
            .skills
            .iter()
            .map(|s| SkillView {
                id: s.id.clone(),
                name: s.name.clone(),
            })
            .collect(),
        default_input_modes: card.default_input_modes.clone(),
        default_output_modes: card.default_output_modes.clone(),
        legacy_fields: card.legacy_fields.clone(),
    }
}

/// The callee's card snapshots, newest first.
#[utoipa::path(get, path = "/v1/callees/{id}/cards", tag = "callees",
    security(("bearer" = ["reader"])),
    params(("id" = Uuid, Path, description = "Callee id"), SnapshotQuery),
    responses(
        (status = 401, description = "No valid API key", body = ErrorBody),
        (status = 403, description = "The key's role is not enough", body = ErrorBody),
        (status = 200, description = "Snapshots, newest first", body = SnapshotPage),
        (status = 400, description = "Bad parameters", body = ErrorBody),
        (status = 404, description = "No such callee", body = ErrorBody),
    ))]
pub(crate) async fn list_cards(
    State(app): State<ApiState>,
    Path(id): Path<Uuid>,
    OriginalUri(uri): OriginalUri,
    Query(q): Query<SnapshotQuery>,
) -> Result<Paged<SnapshotPage>, ApiError> {
    let callee_id = CalleeId(id);
    let limit = page_size(q.limit)?;
    let snapshots = callees::snapshots(
        &app.services.store,
        callee_id,
        q.after.map(SnapshotId),
        limit,
    )
    .await?;
    let next = next_cursor(&snapshots, limit, |s| s.id.0);
    let page = SnapshotPage {
        items: snapshots.iter().map(Into::into).collect(),
        next,
    };
    Ok(Paged::new(&uri, page, next))
}

/// One snapshot with its raw card.
#[utoipa::path(get, path = "/v1/callees/{id}/cards/{snapshot_id}", tag = "callees",
    security(("bearer" = ["reader"])),
    params(("id" = Uuid, Path, description = "Callee id"), ("snapshot_id" = Uuid, Path, description = "Snapshot id")),
    responses(
        (status = 401, description = "No valid API key", body = ErrorBody),
        (status = 403, description = "The key's role is not enough", body = ErrorBody),
        (status = 200, description = "The snapshot", body = SnapshotView),
        (status = 400, description = "Malformed id", body = ErrorBody),
        (status = 404, description = "No such callee or snapshot", body = ErrorBody),
    ))]
pub(crate) async fn get_card(
    State(app): State<ApiState>,
    Path((id, snapshot_id)): Path<(Uuid, Uuid)>,
) -> Result<Json<SnapshotView>, ApiError> {
    let snapshot =
        callees::snapshot(&app.services.store, CalleeId(id), SnapshotId(snapshot_id)).await?;
    Ok(Json(SnapshotView {
        summary: (&snapshot).into(),
        etag: snapshot.etag.clone(),
        last_modified: snapshot.last_modified.clone(),
        card: snapshot
            .assessment
            .card
            .as_ref()
            .map(|c| card_view(c, &snapshot.url)),
        raw_text: snapshot
            .raw_pruned_at
            .is_none()
            .then(|| String::from_utf8(snapshot.raw.clone()).ok())
            .flatten(),
        raw_base64: STANDARD.encode(&snapshot.raw),
    }))
}
