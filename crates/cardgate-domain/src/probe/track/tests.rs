//! Track records folded from runs built by hand.

use chrono::{Duration, TimeZone, Utc};

use super::*;

fn at(day: i64) -> Timestamp {
    Utc.timestamp_opt(1_800_000_000, 0).unwrap() + Duration::days(day)
}

fn run(day: i64, trials: u32, clean: u32, terminal_ms: &[u64]) -> RunRecord {
    RunRecord {
        finished_at: at(day),
        passed: clean == trials,
        trials,
        clean,
        samples: Samples {
            terminal: terminal_ms.to_vec(),
            ..Samples::default()
        },
    }
}

#[test]
fn it_fits_the_read_model_budget() {
    // Issue 46 allows 64 bytes a subject.
    assert!(std::mem::size_of::<TrackRecord>() <= 52);
    assert!(std::mem::size_of::<Option<TrackRecord>>() <= 52);
}

#[test]
fn a_record_ages_when_its_oldest_run_leaves_the_window() {
    let record = TrackRecord::of(&[run(0, 3, 3, &[]), run(10, 3, 3, &[])], at(-30));
    assert!(!record.aged(at(-30)));
    assert!(!record.aged(at(0)));
    // The window's start passed the oldest run: the record still counts it.
    assert!(record.aged(at(1)));
    assert_eq!(record.trials, 6);
    // Folded again from the same runs, it counts only what is left.
    let again = TrackRecord::of(&[run(0, 3, 3, &[]), run(10, 3, 3, &[])], at(1));
    assert_eq!((again.runs, again.trials), (1, 3));
    assert!(!again.aged(at(1)));
    // A record of nothing never ages.
    assert!(!TrackRecord::default().aged(at(1_000)));
}

#[test]
fn classes_follow_the_window() {
    // Two clean runs of three trials: six trials, no failure.
    let stable = TrackRecord::of(&[run(0, 3, 3, &[]), run(1, 3, 3, &[])], at(-30));
    assert_eq!((stable.runs, stable.trials, stable.clean), (2, 6, 6));
    assert_eq!(stable.class, Class::Stable);
    // Too few trials yet.
    assert_eq!(
        TrackRecord::of(&[run(0, 3, 3, &[])], at(-30)).class,
        Class::New
    );
    // A failure earlier, the newest clean: flaky; the newest failing: failing.
    let flaky = [run(0, 3, 2, &[]), run(1, 3, 3, &[])];
    assert_eq!(TrackRecord::of(&flaky, at(-30)).class, Class::Flaky);
    let failing = [run(0, 3, 3, &[]), run(1, 3, 2, &[])];
    assert_eq!(TrackRecord::of(&failing, at(-30)).class, Class::Failing);
    // The failure fell out of the window.
    let record = TrackRecord::of(
        &[run(0, 3, 2, &[]), run(40, 3, 3, &[]), run(41, 3, 3, &[])],
        at(10),
    );
    assert_eq!((record.runs, record.class), (2, Class::Stable));
    assert_eq!(record.newest_run_at(), Some(at(41)));
    assert_eq!(TrackRecord::of(&[], at(0)), TrackRecord::default());
}

#[test]
fn the_newest_passing_run_is_kept_for_freshness() {
    let record = TrackRecord::of(&[run(3, 3, 3, &[]), run(5, 3, 1, &[])], at(0));
    assert_eq!(record.newest_run_at(), Some(at(5)));
    assert_eq!(record.newest_pass_at(), Some(at(3)));
}

#[test]
fn the_wilson_lower_bound_is_the_known_one() {
    assert_eq!(wilson_lower(0, 0), None);
    // Textbook values: 10 of 10 gives 0.7225, 9 of 10 gives 0.5958, 95 of 100 gives 0.8883.
    let close = |got: Option<f64>, want: f64| (got.unwrap() - want).abs() < 5e-4;
    assert!(close(wilson_lower(10, 10), 0.7225));
    assert!(close(wilson_lower(9, 10), 0.5958));
    assert!(close(wilson_lower(95, 100), 0.8883));
    assert!(close(wilson_lower(0, 5), 0.0));
    let record = TrackRecord::of(&[run(0, 10, 9, &[])], at(0));
    assert!(close(record.clean_rate_lower_bound(), 0.5958));
}

#[test]
fn latency_percentiles_cover_every_run_in_the_window() {
    let runs = [
        run(0, 3, 3, &[100, 110, 120]),
        run(1, 3, 3, &[130, 140, 900]),
        run(-50, 3, 3, &[5]),
    ];
    let latency = TrackRecord::of(&runs, at(-30)).latency();
    assert_eq!(
        latency.terminal,
        Some(Percentiles {
            p50_ms: 120,
            p95_ms: 900
        })
    );
    assert_eq!(latency.send, None);
}
