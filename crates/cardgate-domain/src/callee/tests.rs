//! Unit tests of `cardgate_domain::callee`.

use super::*;

#[test]
fn card_urls_are_normalized() {
    let table = [
        ("https://Agent.Example", "https://agent.example/"),
        ("https://agent.example:443/", "https://agent.example/"),
        (
            "http://127.0.0.1:8080/.well-known/agent-card.json#x",
            "http://127.0.0.1:8080/.well-known/agent-card.json",
        ),
        (
            "  https://agent.example/.well-known/agent.json ",
            "https://agent.example/.well-known/agent.json",
        ),
    ];
    for (input, expected) in table {
        assert_eq!(CardUrl::parse(input).unwrap().as_str(), expected, "{input}");
    }
}

#[test]
fn an_origin_and_its_well_known_card_urls_are_one_card() {
    let of = |u: &str| CardUrl::parse(u).unwrap().equivalents();
    assert_eq!(
        of("http://127.0.0.1:8080"),
        [
            "http://127.0.0.1:8080/.well-known/agent-card.json",
            "http://127.0.0.1:8080/.well-known/agent.json"
        ]
    );
    assert_eq!(
        of("https://a.example/.well-known/agent-card.json"),
        [
            "https://a.example/",
            "https://a.example/.well-known/agent.json"
        ]
    );
    assert!(of("https://a.example/cards/one.json").is_empty());
    assert!(of("https://a.example/?tenant=x").is_empty());
}

#[test]
fn a_deferred_fetch_neither_counts_nor_forgives_failures() {
    let b = Backoff::default();
    let now = chrono::Utc::now();
    let failed = FetchState::default().after(FetchStatus::Failed, Some("503".into()), &b, now);
    let until = now + chrono::Duration::seconds(120);
    let deferred = failed.deferred(Some("wait".into()), until, now);
    assert_eq!(deferred.failures, 1);
    assert_eq!(deferred.next_at, Some(until));
    assert_eq!(deferred.status, Some(FetchStatus::Deferred));
    let clean = FetchState::default().deferred(None, until, now);
    assert_eq!((clean.failures, clean.next_at), (0, Some(until)));
}

#[test]
fn backoff_doubles_per_failure_up_to_the_cap() {
    let b = Backoff {
        base: std::time::Duration::from_secs(10),
        cap: std::time::Duration::from_secs(100),
    };
    let secs: Vec<i64> = (1..=6).map(|n| b.delay(n).num_seconds()).collect();
    assert_eq!(secs, [10, 20, 40, 80, 100, 100]);
    assert_eq!(b.delay(i32::MAX).num_seconds(), 100);

    let now = chrono::Utc::now();
    let failed = FetchState::default().after(FetchStatus::Failed, Some("503".into()), &b, now);
    assert_eq!(
        (failed.failures, failed.next_at),
        (1, Some(now + chrono::Duration::seconds(10)))
    );
    let again = failed.after(FetchStatus::Failed, None, &b, now);
    assert_eq!(again.next_at, Some(now + chrono::Duration::seconds(20)));
    let recovered = again.after(FetchStatus::Unchanged, None, &b, now);
    assert_eq!((recovered.failures, recovered.next_at), (0, None));

    // An untrusted card backs off the same way; a trusted one ends it.
    let untrusted = recovered.after(FetchStatus::Untrusted, Some("bad".into()), &b, now);
    let still = untrusted.after(FetchStatus::Untrusted, Some("bad".into()), &b, now);
    assert_eq!(
        (still.failures, still.next_at),
        (2, Some(now + chrono::Duration::seconds(20)))
    );
    let fixed = still.after(FetchStatus::Fetched, None, &b, now);
    assert_eq!((fixed.failures, fixed.next_at), (0, None));
}

#[test]
fn bad_card_urls_say_why() {
    assert!(matches!(
        CardUrl::parse("agent.example"),
        Err(CardUrlError::Invalid(_))
    ));
    assert!(matches!(
        CardUrl::parse("ftp://agent.example"),
        Err(CardUrlError::Scheme(_))
    ));
    assert!(matches!(
        CardUrl::parse("file:///etc/passwd"),
        Err(CardUrlError::Scheme(_))
    ));
    assert!(matches!(
        CardUrl::parse("https://u:p@agent.example"),
        Err(CardUrlError::Credentials)
    ));
    let long = format!("https://agent.example/{}", "a".repeat(3000));
    assert!(matches!(
        CardUrl::parse(&long),
        Err(CardUrlError::TooLong { .. })
    ));
}
