//! Scheduled sweeps claimed across replicas: one row per sweep, holding when it last ran.

use super::{Store, StoreError, dispatch};
use crate::domain::time::Timestamp;

impl Store {
    /// Claims sweep `name`: `true` when it last ran before `not_since` (or never), and it is
    /// recorded as run at `now`; `false` when another replica claimed it since. One
    /// statement, so two replicas on the same tick cannot both win.
    pub async fn claim_sweep(
        &self,
        name: &str,
        now: Timestamp,
        not_since: Timestamp,
    ) -> Result<bool, StoreError> {
        let claimed: Option<(String,)> = dispatch!(self, |pool| {
            sqlx::query_as(
                "insert into sweeps (name, ran_at) values ($1, $2) on conflict (name) do update \
                 set ran_at = excluded.ran_at where sweeps.ran_at < $3 returning name",
            )
            .bind(name)
            .bind(now)
            .bind(not_since)
            .fetch_optional(pool)
            .await
        })?;
        Ok(claimed.is_some())
    }
}
