//! How hard cardgate may press one host: when the next request to it may start, and what a
//! host's `Retry-After` asks for. Pure: the remote layer and the store keep the state, with
//! `now` passed in.
//!
//! A host is the address a name resolves to, not the name: one provider serving many agents on
//! many subdomains or ports is one host, and is spared as one.

use std::time::Duration;

use super::time::Timestamp;

/// The longest a host's `Retry-After` is honoured for. A host that asks for more is asked
/// again after this; a typo of a year must not silence an agent for a year.
pub const MAX_BACKOFF: Duration = Duration::from_secs(24 * 3600);

/// The limits on what cardgate sends to one host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostLimits {
    /// Requests in flight to the host at once, from start until the response head (a stream's
    /// open body holds none: a probe holds a stream open while it asks about the same task).
    pub concurrency: u32,
    /// The least time between two request starts to the host.
    pub interval: Duration,
    /// The longest a request waits for its turn (the host's back-off included) before it is
    /// given up as throttled; longer waits are the scheduler's, not a request's.
    pub max_wait: Duration,
}

impl Default for HostLimits {
    /// Two at a time and ten starts a second to one address: a sweep over thousands of one
    /// provider's agents reaches them one after another, and a single probe barely notices.
    fn default() -> Self {
        Self {
            concurrency: 2,
            interval: Duration::from_millis(100),
            max_wait: Duration::from_secs(30),
        }
    }
}

impl HostLimits {
    /// `concurrency` in flight and no spacing: for agents that are all on one address and not
    /// what is being measured (the test suite, benchmarks of the registry itself).
    pub fn loose(concurrency: u32) -> Self {
        Self {
            concurrency,
            interval: Duration::ZERO,
            ..Self::default()
        }
    }
}

/// When a request to a host may start: not before `now`, the host's next free start (the
/// interval after the previous start) or the end of its back-off.
pub fn start_at(
    now: Timestamp,
    next_free: Option<Timestamp>,
    backoff_until: Option<Timestamp>,
) -> Timestamp {
    [Some(now), next_free, backoff_until]
        .into_iter()
        .flatten()
        .max()
        .unwrap_or(now)
}

/// When the `index`th of `count` jobs of one sweep starting at `now` is due, spread evenly over
/// `window`: a sweep over thousands of agents reaches their hosts over its whole interval
/// instead of all at its start.
pub fn spread(now: Timestamp, window: Duration, index: usize, count: usize) -> Timestamp {
    if count == 0 || window.is_zero() {
        return now;
    }
    let offset = window.mul_f64(index as f64 / count as f64);
    super::time::to_stored_precision(now + chrono::Duration::from_std(offset).unwrap_or_default())
}

/// A `Retry-After` value (RFC 9110 §10.2.3): delay-seconds, or an HTTP-date, read at `now`.
/// A date in the past is no wait; anything unreadable is `None`.
pub fn parse_retry_after(value: &str, now: Timestamp) -> Option<Duration> {
    let value = value.trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let at = chrono::DateTime::parse_from_rfc2822(value).ok()?;
    Some(
        (at.with_timezone(&chrono::Utc) - now)
            .to_std()
            .unwrap_or(Duration::ZERO),
    )
}

/// Until when a host that answered `status` with `retry_after` is left alone, at `now`:
/// only `429` and `503` with a readable `Retry-After` ask for that (capped at
/// [`MAX_BACKOFF`]); anything else is the answer it is.
pub fn backoff_until(status: u16, retry_after: Option<&str>, now: Timestamp) -> Option<Timestamp> {
    if !matches!(status, 429 | 503) {
        return None;
    }
    let wait = parse_retry_after(retry_after?, now)?.min(MAX_BACKOFF);
    Some(super::time::to_stored_precision(
        now + chrono::Duration::from_std(wait).ok()?,
    ))
}

#[cfg(test)]
mod tests;
