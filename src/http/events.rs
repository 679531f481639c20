//! `GET /v1/events`: the ledger as Server-Sent Events, resumable with `Last-Event-ID`.

use std::collections::{BTreeSet, HashMap};
use std::convert::Infallible;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::Extension;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures::{Stream, StreamExt};
use serde::Deserialize;
use utoipa::IntoParams;
use uuid::Uuid;

use super::ApiState;
use super::error::{ApiError, ErrorBody};
use super::extract::Query;
use super::ledger::EventView;
use super::permissions::Caller;
use crate::domain::ids::CalleeId;
use crate::domain::ledger::EventBody;
use crate::service::events::{self, EventFilter};

/// Open streams one key may hold at once.
pub(crate) const MAX_STREAMS_PER_KEY: usize = 8;
/// A comment line this often keeps proxies from closing an idle stream.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct EventsQuery {
    /// Only events about this callee.
    pub callee_id: Option<Uuid>,
    /// Comma-separated ledger kinds (`demoted,promoted`, …); all when absent.
    pub types: Option<String>,
    /// Start after this seq (default 0: replay the whole ledger first). A `Last-Event-ID`
    /// header, as a reconnecting client sends, takes precedence.
    #[param(minimum = 0)]
    pub after: Option<i64>,
}

/// Open streams per key.
#[derive(Debug, Default)]
pub struct StreamSlots {
    open: Mutex<HashMap<String, usize>>,
}

/// One open stream; the count drops with it.
struct Slot {
    slots: Arc<StreamSlots>,
    key: String,
}

impl StreamSlots {
    fn take(self: &Arc<Self>, key: &str) -> Option<Slot> {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        let count = open.entry(key.to_string()).or_default();
        if *count >= MAX_STREAMS_PER_KEY {
            return None;
        }
        *count += 1;
        Some(Slot {
            slots: self.clone(),
            key: key.to_string(),
        })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut open = self
            .slots
            .open
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = open.get_mut(&self.key) {
            *count -= 1;
            if *count == 0 {
                open.remove(&self.key);
            }
        }
    }
}

fn parse_kinds(types: Option<&str>) -> Result<Option<BTreeSet<String>>, ApiError> {
    let Some(types) = types else { return Ok(None) };
    types
        .split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(|t| {
            if EventBody::KINDS.contains(&t) {
                Ok(t.to_string())
            } else {
                Err(ApiError::invalid(format!(
                    "types: `{t}` is not an event kind (one of {})",
                    EventBody::KINDS.join(", ")
                )))
            }
        })
        .collect::<Result<BTreeSet<_>, _>>()
        .map(Some)
}

/// Where to resume: the `Last-Event-ID` header, else `after`, else the start.
fn resume_after(headers: &HeaderMap, after: Option<i64>) -> Result<i64, ApiError> {
    let from_header = headers
        .get("last-event-id")
        .map(|v| {
            v.to_str()
                .ok()
                .and_then(|s| s.trim().parse::<i64>().ok())
                .ok_or_else(|| ApiError::invalid("Last-Event-ID must be a ledger seq"))
        })
        .transpose()?;
    let after = from_header.or(after).unwrap_or(0);
    if after < 0 {
        return Err(ApiError::invalid("after must not be negative"));
    }
    Ok(after)
}

/// The ledger, live: every event after `after` (or `Last-Event-ID`) as it is appended.
///
/// Each event is sent as `id: <seq>`, `event: <kind>`, `data: <the event as GET /v1/ledger
/// shows it>`; a `promoted` or `demoted` one also carries `attestation`, the signed in-toto
/// attestation kept for it (as `GET /v1/attestations` lists it), once it is kept. Past events are replayed from the ledger first, so a client that reconnects with
/// the last id it saw gets every later event exactly once. A comment line every 15 s keeps the
/// connection open. At most 8 streams per key.
#[utoipa::path(get, path = "/v1/events", tag = "ledger",
    security(("bearer" = ["reader"])),
    params(
        EventsQuery,
        ("Last-Event-ID" = Option<i64>, Header,
            description = "The seq of the last event received: resume right after it"),
    ),
    responses(
        (status = 401, description = "No valid API key", body = ErrorBody),
        (status = 403, description = "The key's role is not enough", body = ErrorBody),
        (status = 200, description = "The event stream", content_type = "text/event-stream",
            body = EventView),
        (status = 400, description = "Bad parameters", body = ErrorBody),
        (status = 429, description = "This key already holds 8 open streams", body = ErrorBody),
    ))]
pub(crate) async fn stream_events(
    State(app): State<ApiState>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    Query(q): Query<EventsQuery>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    let filter = EventFilter {
        callee: q.callee_id.map(CalleeId),
        kinds: parse_kinds(q.types.as_deref())?,
    };
    let after = resume_after(&headers, q.after)?;
    let slot = app
        .streams
        .take(&caller.actor())
        .ok_or(ApiError::TooManyRequests {
            retry_after_secs: 1,
        })?;
    let stopping = app.stopping.clone();
    let services = app.services.clone();
    let events = events::follow(app.services.clone(), filter, after)
        .then(move |item| {
            let services = services.clone();
            async move {
                let attestation = match &item {
                    Ok(event) => events::attestation_of(&services, event).await,
                    Err(_) => None,
                };
                (item, attestation)
            }
        })
        .map(move |(item, attestation)| {
            // The slot is held as long as the stream is.
            let _open = &slot;
            Ok(match item {
                Ok(event) => {
                    let id = event.seq.to_string();
                    let kind = event.kind.clone();
                    let mut data = serde_json::to_value(EventView::from(event)).unwrap_or_default();
                    if let Some(envelope) = attestation {
                        data["attestation"] = envelope;
                    }
                    Event::default()
                        .id(id)
                        .event(kind)
                        .json_data(data)
                        .unwrap_or_else(|_| Event::default().comment("unencodable event"))
                }
                Err(e) => {
                    tracing::warn!(error = %e, "an event stream failed");
                    Event::default()
                        .event("error")
                        .data("the stream failed; reconnect with Last-Event-ID")
                }
            })
        })
        // Shutdown ends every stream, so that draining connections completes.
        .take_until(async move { stopping.cancelled().await });
    Ok(Sse::new(events).keep_alive(KeepAlive::new().interval(KEEP_ALIVE)))
}
