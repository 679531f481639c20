//! Counts of what the registry holds, for metrics: subjects by gate state, jobs by kind and
//! status, probe runs by outcome. Three grouped scans, read when scraped.

use super::{Store, StoreError, dispatch};

/// What [`Store::counts`] reads.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counts {
    /// (gate state, subjects).
    pub subjects: Vec<(String, i64)>,
    /// (job kind, status, jobs).
    pub jobs: Vec<(String, String, i64)>,
    /// (run status, passed, runs).
    pub probe_runs: Vec<(String, Option<bool>, i64)>,
}

impl Store {
    pub async fn counts(&self) -> Result<Counts, StoreError> {
        let subjects: Vec<(String, i64)> = dispatch!(self, |pool| {
            sqlx::query_as("select gate_state, count(*) from subjects group by gate_state")
                .fetch_all(pool)
                .await
        })?;
        let jobs: Vec<(String, String, i64)> = dispatch!(self, |pool| {
            sqlx::query_as("select kind, status, count(*) from jobs group by kind, status")
                .fetch_all(pool)
                .await
        })?;
        let probe_runs: Vec<(String, Option<bool>, i64)> = dispatch!(self, |pool| {
            sqlx::query_as(
                "select status, passed, count(*) from probe_runs group by status, passed",
            )
            .fetch_all(pool)
            .await
        })?;
        Ok(Counts {
            subjects,
            jobs,
            probe_runs,
        })
    }
}
