//! Timestamps as the registry stores them.
//!
//! Postgres keeps microseconds, so every instant the registry records is truncated to
//! microseconds first; otherwise a value would change on its way through the database and the
//! ledger's hashes (which include `recorded_at`) would stop matching.

use chrono::{DateTime, SecondsFormat, SubsecRound, Utc};

pub type Timestamp = DateTime<Utc>;

/// `t` truncated to the precision the stores keep.
pub fn to_stored_precision(t: Timestamp) -> Timestamp {
    t.trunc_subsecs(6)
}

/// The wall clock at stored precision. Domain code never calls this; services read their
/// [`Clock`] and pass `now` in.
pub fn now() -> Timestamp {
    to_stored_precision(Utc::now())
}

/// Where "now" comes from. Services read it through this, so tests can hold time still.
pub trait Clock: Send + Sync + 'static {
    fn now(&self) -> Timestamp;
}

/// The wall clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        now()
    }
}

/// The one text form used in hashes and JSON: RFC 3339, UTC, microseconds, `Z`.
pub fn format(t: Timestamp) -> String {
    t.to_rfc3339_opts(SecondsFormat::Micros, true)
}
