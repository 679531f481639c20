//! Kept attestations: one per promotion and demotion, listed by ledger seq.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::{Store, StoreError, dispatch};
use crate::domain::attestation::AttestationRecord;
use crate::domain::ids::CalleeId;
use crate::domain::version::ProtocolVersion;

#[derive(sqlx::FromRow)]
struct AttestationRow {
    id: Uuid,
    callee_id: Uuid,
    protocol_version: String,
    seq: i64,
    kind: String,
    envelope: String,
    created_at: DateTime<Utc>,
}

impl TryFrom<AttestationRow> for AttestationRecord {
    type Error = StoreError;
    fn try_from(r: AttestationRow) -> Result<Self, StoreError> {
        Ok(Self {
            id: r.id,
            callee_id: r.callee_id.into(),
            protocol_version: ProtocolVersion::parse_exact(&r.protocol_version)
                .map_err(StoreError::corrupt)?,
            seq: r.seq,
            kind: r.kind,
            envelope: serde_json::from_str(&r.envelope).map_err(StoreError::corrupt)?,
            created_at: r.created_at,
        })
    }
}

impl Store {
    /// Keeps an attestation; a second one for the same event is ignored.
    pub async fn insert_attestation(&self, a: &AttestationRecord) -> Result<(), StoreError> {
        let envelope = serde_json::to_string(&a.envelope).map_err(StoreError::corrupt)?;
        dispatch!(self, |pool| {
            sqlx::query(
                "insert into attestations (id, callee_id, protocol_version, seq, kind, envelope, \
                 created_at) values ($1, $2, $3, $4, $5, $6, $7) on conflict (seq) do nothing",
            )
            .bind(a.id)
            .bind(a.callee_id.0)
            .bind(a.protocol_version.to_string())
            .bind(a.seq)
            .bind(&a.kind)
            .bind(&envelope)
            .bind(a.created_at)
            .execute(pool)
            .await
            .map(drop)
        })?;
        Ok(())
    }

    /// Attestations of events after `after`, of one callee or of all, in ledger order.
    pub async fn attestations(
        &self,
        callee: Option<CalleeId>,
        after: i64,
        limit: u32,
    ) -> Result<Vec<AttestationRecord>, StoreError> {
        let rows: Vec<AttestationRow> = dispatch!(self, |pool| {
            sqlx::query_as(
                "select id, callee_id, protocol_version, seq, kind, envelope, created_at \
                 from attestations where seq > $1 and ($2 is null or callee_id = $2) \
                 order by seq limit $3",
            )
            .bind(after)
            .bind(callee.map(|c| c.0))
            .bind(i64::from(limit))
            .fetch_all(pool)
            .await
        })?;
        rows.into_iter().map(TryInto::try_into).collect()
    }

    /// The attestations of the events at `seqs` (those that have one).
    pub async fn attestations_at(
        &self,
        seqs: &[i64],
    ) -> Result<Vec<AttestationRecord>, StoreError> {
        if seqs.is_empty() {
            return Ok(Vec::new());
        }
        let rows: Vec<AttestationRow> = dispatch!(self, |pool| {
            let mut select = sqlx::QueryBuilder::new(
                "select id, callee_id, protocol_version, seq, kind, envelope, created_at \
                 from attestations where seq in (",
            );
            let mut list = select.separated(", ");
            for seq in seqs {
                list.push_bind(*seq);
            }
            select.push(")");
            select.build_query_as().fetch_all(pool).await
        })?;
        rows.into_iter().map(TryInto::try_into).collect()
    }
}
