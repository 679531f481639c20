//! Unit tests of `cardgate_domain::politeness`.

use super::*;
use chrono::{TimeZone, Utc};

fn t(s: i64) -> Timestamp {
    Utc.timestamp_opt(1_700_000_000 + s, 0).unwrap()
}

#[test]
fn a_start_waits_for_the_latest_of_now_the_interval_and_the_backoff() {
    assert_eq!(start_at(t(10), None, None), t(10));
    assert_eq!(start_at(t(10), Some(t(5)), None), t(10));
    assert_eq!(start_at(t(10), Some(t(12)), None), t(12));
    assert_eq!(start_at(t(10), Some(t(12)), Some(t(30))), t(30));
    assert_eq!(start_at(t(10), None, Some(t(3))), t(10));
}

#[test]
fn only_429_and_503_with_a_readable_retry_after_back_off() {
    assert_eq!(backoff_until(429, Some("7"), t(0)), Some(t(7)));
    assert_eq!(backoff_until(503, Some(" 2 "), t(0)), Some(t(2)));
    // An HTTP-date, read at now.
    let date = "Tue, 14 Nov 2023 22:14:20 GMT";
    assert_eq!(backoff_until(429, Some(date), t(0)), Some(t(60)));
    assert_eq!(backoff_until(429, None, t(0)), None);
    assert_eq!(backoff_until(429, Some("soon"), t(0)), None);
    assert_eq!(backoff_until(500, Some("7"), t(0)), None);
    assert_eq!(backoff_until(200, Some("7"), t(0)), None);
    // A date already past asks for nothing longer than now.
    assert_eq!(
        backoff_until(503, Some("Mon, 01 Jan 2001 00:00:00 GMT"), t(0)),
        Some(t(0))
    );
}

#[test]
fn retry_after_reads_seconds_and_dates() {
    let now = chrono::DateTime::parse_from_rfc3339("2026-12-05T10:00:00Z")
        .unwrap()
        .with_timezone(&chrono::Utc);
    assert_eq!(
        parse_retry_after(" 120 ", now),
        Some(Duration::from_secs(120))
    );
    assert_eq!(
        parse_retry_after("Sat, 05 Dec 2026 10:01:30 GMT", now),
        Some(Duration::from_secs(90))
    );
    assert_eq!(
        parse_retry_after("Sat, 05 Dec 2026 09:00:00 GMT", now),
        Some(Duration::ZERO)
    );
    assert_eq!(parse_retry_after("soon", now), None);
    assert_eq!(parse_retry_after("-5", now), None);
}

#[test]
fn a_sweep_spreads_its_jobs_over_its_window() {
    let minute = Duration::from_secs(60);
    let starts: Vec<i64> = (0..4)
        .map(|i| (spread(t(0), minute, i, 4) - t(0)).num_seconds())
        .collect();
    assert_eq!(starts, [0, 15, 30, 45]);
    assert_eq!(spread(t(0), Duration::ZERO, 3, 4), t(0));
    assert_eq!(spread(t(0), minute, 0, 0), t(0));
}

#[test]
fn a_backoff_is_capped_at_a_day() {
    let year = (365 * 24 * 3600).to_string();
    assert_eq!(
        backoff_until(429, Some(&year), t(0)),
        Some(t(0) + chrono::Duration::from_std(MAX_BACKOFF).unwrap())
    );
}
