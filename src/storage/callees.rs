//! Callees and their subjects.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::changes::{Changed, RecordChange};
use super::{BeginWrite, Db, Store, StoreError, dispatch, touched};
use crate::domain::callee::{Callee, CalleeFilter, CardUrl, FetchState, FetchStatus};
use crate::domain::gate::{EffectiveGate, Subject, SubjectChange};

use crate::domain::ids::CalleeId;
use crate::domain::time::Timestamp;
use crate::domain::version::ProtocolVersion;

#[derive(sqlx::FromRow)]
struct CalleeRow {
    id: Uuid,
    card_url: String,
    name: Option<String>,
    created_at: DateTime<Utc>,
    trusted_keys: Option<String>,
    probe_script: Option<String>,
    last_fetch_at: Option<DateTime<Utc>>,
    last_fetch_status: Option<String>,
    last_fetch_error: Option<String>,
    fetch_failures: i32,
    next_fetch_at: Option<DateTime<Utc>>,
    refresh_generation: i64,
}

impl TryFrom<CalleeRow> for Callee {
    type Error = StoreError;
    fn try_from(row: CalleeRow) -> Result<Self, StoreError> {
        let trusted_keys = row
            .trusted_keys
            .map(|text| serde_json::from_str(&text).map_err(StoreError::corrupt))
            .transpose()?;
        Ok(Callee {
            id: row.id.into(),
            card_url: CardUrl::parse(&row.card_url).map_err(StoreError::corrupt)?,
            name: row.name,
            created_at: row.created_at,
            trusted_keys,
            probe_script: row
                .probe_script
                .map(|text| serde_json::from_str(&text).map_err(StoreError::corrupt))
                .transpose()?,
            fetch: FetchState {
                last_at: row.last_fetch_at,
                status: row
                    .last_fetch_status
                    .as_deref()
                    .and_then(FetchStatus::parse),
                error: row.last_fetch_error,
                failures: row.fetch_failures,
                next_at: row.next_fetch_at,
            },
            refresh_generation: row.refresh_generation,
        })
    }
}

#[derive(sqlx::FromRow)]
pub(super) struct SubjectRow {
    callee_id: Uuid,
    protocol_version: String,
    state: String,
    last_seq: i64,
    last_hash: String,
    last_change_seq: i64,
    last_change_at: DateTime<Utc>,
    created_at: DateTime<Utc>,
}

impl TryFrom<SubjectRow> for Subject {
    type Error = StoreError;
    fn try_from(row: SubjectRow) -> Result<Self, StoreError> {
        Ok(Subject {
            callee_id: row.callee_id.into(),
            protocol_version: ProtocolVersion::parse_exact(&row.protocol_version)
                .map_err(StoreError::corrupt)?,
            state: serde_json::from_str(&row.state).map_err(StoreError::corrupt)?,
            last_seq: row.last_seq,
            last_hash: row.last_hash,
            last_change: SubjectChange {
                seq: row.last_change_seq,
                at: row.last_change_at,
            },
            created_at: row.created_at,
        })
    }
}

/// Column lists as macros, so `concat!` can build each query as one `&'static str` literal.
macro_rules! callee_columns {
    () => {
        "id, card_url, name, created_at, trusted_keys, probe_script, last_fetch_at, last_fetch_status, \
         fetch_failures, next_fetch_at, refresh_generation, \
         last_fetch_error"
    };
}

macro_rules! subject_columns {
    () => {
        "callee_id, protocol_version, state, last_seq, last_hash, last_change_seq, \
         last_change_at, created_at"
    };
}
pub(super) use subject_columns;

impl Store {
    /// Inserts a new callee; `Conflict` when its card URL is already registered.
    pub async fn insert_callee(&self, callee: &Callee, now: Timestamp) -> Result<(), StoreError> {
        dispatch!(self, |pool| {
            let mut tx = pool.begin_write().await?;
            insert_callee_query(callee).execute(&mut *tx).await?;
            tx.record_change(Changed::Callee(callee.id), now).await?;
            tx.commit().await?;
            Ok(())
        })
    }

    pub async fn callee_exists(&self, id: CalleeId) -> Result<bool, StoreError> {
        let found: Option<(Uuid,)> = dispatch!(self, |pool| {
            sqlx::query_as("select id from callees where id = $1")
                .bind(id.0)
                .fetch_optional(pool)
                .await
        })?;
        Ok(found.is_some())
    }

    /// Whether a callee with this card URL exists.
    pub async fn card_url_taken(&self, card_url: &CardUrl) -> Result<bool, StoreError> {
        Ok(self.callee_by_card_url(card_url).await?.is_some())
    }

    /// The callee registered with this (normalized) card URL, if any.
    pub async fn callee_by_card_url(
        &self,
        card_url: &CardUrl,
    ) -> Result<Option<CalleeId>, StoreError> {
        let found: Option<(Uuid,)> = dispatch!(self, |pool| {
            sqlx::query_as("select id from callees where card_url = $1")
                .bind(card_url.as_str())
                .fetch_optional(pool)
                .await
        })?;
        Ok(found.map(|(id,)| CalleeId(id)))
    }

    /// The card URL (normalized, as stored) of every callee with an id in `from..=to`.
    pub async fn card_urls_between(
        &self,
        from: CalleeId,
        to: CalleeId,
    ) -> Result<Vec<(CalleeId, String)>, StoreError> {
        let rows: Vec<(Uuid, String)> = dispatch!(self, |pool| {
            sqlx::query_as("select id, card_url from callees where id between $1 and $2")
                .bind(from.0)
                .bind(to.0)
                .fetch_all(pool)
                .await
        })?;
        Ok(rows
            .into_iter()
            .map(|(id, url)| (CalleeId(id), url))
            .collect())
    }

    /// Callees whose card is due on the refresh schedule (never fetched, or out of backoff),
    /// oldest first, at most `limit`.
    pub async fn due_for_refresh(
        &self,
        now: DateTime<Utc>,
        limit: u32,
    ) -> Result<Vec<CalleeId>, StoreError> {
        let rows: Vec<(Uuid,)> = dispatch!(self, |pool| {
            sqlx::query_as(
                "select id from callees where next_fetch_at is null or next_fetch_at <= $1 \
                 order by coalesce(last_fetch_at, created_at) limit $2",
            )
            .bind(now)
            .bind(i64::from(limit))
            .fetch_all(pool)
            .await
        })?;
        Ok(rows.into_iter().map(|(id,)| CalleeId(id)).collect())
    }

    /// Every callee id, in creation order (for sweeps over all subjects).
    pub async fn callee_ids(
        &self,
        after: Option<CalleeId>,
        limit: u32,
    ) -> Result<Vec<CalleeId>, StoreError> {
        let after = after.map_or(Uuid::nil(), |id| id.0);
        let rows: Vec<(Uuid,)> = dispatch!(self, |pool| {
            sqlx::query_as("select id from callees where id > $1 order by id limit $2")
                .bind(after)
                .bind(i64::from(limit))
                .fetch_all(pool)
                .await
        })?;
        Ok(rows.into_iter().map(|(id,)| CalleeId(id)).collect())
    }

    /// Replaces (or clears) the callee's pinned JWKS.
    pub async fn set_trusted_keys(
        &self,
        callee_id: CalleeId,
        jwks: Option<&serde_json::Value>,
    ) -> Result<(), StoreError> {
        let text = jwks.map(serde_json::Value::to_string);
        let done = dispatch!(self, |pool| {
            sqlx::query("update callees set trusted_keys = $2 where id = $1")
                .bind(callee_id.0)
                .bind(text)
                .execute(pool)
                .await
                .map(|r| r.rows_affected())
        })?;
        touched(done)
    }

    pub async fn callee(&self, id: CalleeId) -> Result<Callee, StoreError> {
        let row: CalleeRow = dispatch!(self, |pool| {
            sqlx::query_as(concat!(
                "select ",
                callee_columns!(),
                " from callees where id = $1"
            ))
            .bind(id.0)
            .fetch_one(pool)
            .await
        })?;
        row.try_into()
    }

    /// Callees in creation order, after the cursor `after`.
    pub async fn callees(
        &self,
        after: Option<CalleeId>,
        limit: u32,
    ) -> Result<Vec<Callee>, StoreError> {
        let select = concat!(
            "select ",
            callee_columns!(),
            " from callees where id > $1 order by id limit $2"
        );
        let rows: Vec<CalleeRow> = self.page_after(select, after.map(|id| id.0), limit).await?;
        rows.into_iter().map(TryInto::try_into).collect()
    }

    /// Callees in creation order after the cursor `after` that match `filter`: a case-blind
    /// substring of the name or card URL, and a subject whose effective gate is the one asked
    /// for (`untrusted` is a subject whose callee's card is not trusted now).
    pub async fn find_callees(
        &self,
        filter: &CalleeFilter,
        after: Option<CalleeId>,
        limit: u32,
    ) -> Result<Vec<Callee>, StoreError> {
        // Only the JSON accessor differs by dialect.
        macro_rules! select {
            ($untrusted:literal) => {
                concat!(
                    "select ",
                    callee_columns!(),
                    " from callees c where c.id > $1 \
                     and ($2 = '' or lower(coalesce(c.name, '')) like $2 escape '\\' \
                          or lower(c.card_url) like $2 escape '\\') \
                     and ($3 = '' or exists (select 1 from subjects s where s.callee_id = c.id \
                          and case when ",
                    $untrusted,
                    " is not null then 'untrusted' else s.gate_state end = $3)) \
                     order by c.id limit $4"
                )
            };
        }
        let pattern = filter
            .text
            .as_deref()
            .map(|t| format!("%{}%", like_escaped(&t.to_lowercase())))
            .unwrap_or_default();
        let gate = filter.gate.map(EffectiveGate::as_str).unwrap_or_default();
        let after = after.map_or(Uuid::nil(), |id| id.0);
        macro_rules! fetch {
            ($pool:expr, $sql:expr) => {
                sqlx::query_as($sql)
                    .bind(after)
                    .bind(&pattern)
                    .bind(gate)
                    .bind(i64::from(limit))
                    .fetch_all($pool)
                    .await?
            };
        }
        let rows: Vec<CalleeRow> = match &self.db {
            Db::Postgres(pool) => fetch!(pool, select!("(s.state::jsonb ->> 'card_untrusted')")),
            Db::Sqlite(pool) => fetch!(pool, select!("json_extract(s.state, '$.card_untrusted')")),
        };
        rows.into_iter().map(TryInto::try_into).collect()
    }

    /// The callee's subjects, by version.
    pub async fn subjects(&self, callee_id: CalleeId) -> Result<Vec<Subject>, StoreError> {
        let rows: Vec<SubjectRow> = dispatch!(self, |pool| {
            sqlx::query_as(concat!(
                "select ",
                subject_columns!(),
                " from subjects where callee_id = $1 order by protocol_version"
            ))
            .bind(callee_id.0)
            .fetch_all(pool)
            .await
        })?;
        rows.into_iter().map(TryInto::try_into).collect()
    }

    /// The subjects of every callee with an id in `from..=to`.
    pub async fn subjects_between(
        &self,
        from: CalleeId,
        to: CalleeId,
    ) -> Result<Vec<Subject>, StoreError> {
        let rows: Vec<SubjectRow> = dispatch!(self, |pool| {
            sqlx::query_as(concat!(
                "select ",
                subject_columns!(),
                " from subjects where callee_id between $1 and $2"
            ))
            .bind(from.0)
            .bind(to.0)
            .fetch_all(pool)
            .await
        })?;
        rows.into_iter().map(TryInto::try_into).collect()
    }

    pub async fn subject(
        &self,
        callee_id: CalleeId,
        version: ProtocolVersion,
    ) -> Result<Option<Subject>, StoreError> {
        let row: Option<SubjectRow> = dispatch!(self, |pool| {
            sqlx::query_as(concat!(
                "select ",
                subject_columns!(),
                " from subjects where callee_id = $1 and protocol_version = $2"
            ))
            .bind(callee_id.0)
            .bind(version.to_string())
            .fetch_optional(pool)
            .await
        })?;
        row.map(TryInto::try_into).transpose()
    }
}

/// `text` with LIKE's wildcards and its escape character taken literally.
fn like_escaped(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '%' | '_' | '\\') {
            escaped.push('\\');
        }
        escaped.push(c);
    }
    escaped
}

/// The insert shared by plain and transactional registration.
pub(super) fn insert_callee_query<DB>(
    callee: &Callee,
) -> sqlx::query::Query<'static, DB, <DB as sqlx::Database>::Arguments>
where
    DB: sqlx::Database,
    Uuid: for<'q> sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    String: for<'q> sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    Option<String>: for<'q> sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    DateTime<Utc>: for<'q> sqlx::Encode<'q, DB> + sqlx::Type<DB>,
{
    sqlx::query(
        "insert into callees (id, card_url, name, created_at, trusted_keys, probe_script) \
         values ($1, $2, $3, $4, $5, $6)",
    )
    .bind(callee.id.0)
    .bind(callee.card_url.as_str().to_string())
    .bind(callee.name.clone())
    .bind(callee.created_at)
    .bind(
        callee
            .trusted_keys
            .as_ref()
            .map(serde_json::Value::to_string),
    )
    .bind(
        callee
            .probe_script
            .as_ref()
            .map(|s| serde_json::to_string(s).expect("scripts serialize")),
    )
}
