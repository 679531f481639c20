//! The refresh decision as a table: what the newest snapshot was, what the fetch brought and
//! the subjects' state in; the fetch status, whether a snapshot is stored, and the events out.

use chrono::{TimeZone, Utc};
use serde_json::json;

use super::*;
use crate::card::signature::SignatureVerdict;
use crate::card::{Assessment, parse_card};
use crate::ids::{CalleeId, SnapshotId};

fn v10() -> ProtocolVersion {
    ProtocolVersion::parse_exact("1.0").unwrap()
}

/// A snapshot of a card offering 1.0, trusted or untrusted for `problem`, with bytes `sha`.
fn snapshot(sha: &str, problem: Option<&str>) -> CardSnapshot {
    let card = parse_card(&json!({
        "name": "x",
        "supportedInterfaces": [{"url": "https://a.example", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}],
    }))
    .unwrap();
    CardSnapshot {
        id: SnapshotId::new(),
        callee_id: CalleeId::new(),
        fetched_at: Utc.timestamp_opt(1_700_000_000, 0).unwrap(),
        url: "https://a.example/.well-known/agent-card.json".into(),
        sha256: sha.into(),
        raw: Vec::new(),
        etag: None,
        last_modified: None,
        assessment: Assessment {
            trusted: problem.is_none(),
            problem: problem.map(str::to_string),
            card: problem.is_none().then_some(card),
            signature: SignatureVerdict::Unsigned,
            uncovered: Vec::new(),
        },
        source: crate::card::SnapshotSource::Public,
        raw_pruned_at: None,
    }
}

/// The subjects of a callee whose card offered 1.0, optionally untrusted since.
fn subjects(untrusted: bool) -> BTreeMap<ProtocolVersion, SubjectState> {
    let at = Utc.timestamp_opt(1_700_000_000, 0).unwrap();
    let appeared = EventBody::VersionAppeared {
        snapshot_id: SnapshotId::new(),
        advertised: Vec::new(),
    };
    let mut state = SubjectState::start(&appeared, at, 1).unwrap();
    if untrusted {
        let lost = EventBody::CardUntrusted {
            snapshot_id: None,
            reason: "unreachable".into(),
        };
        state = state.apply(&lost, at, 2).unwrap();
    }
    BTreeMap::from([(v10(), state)])
}

struct Case {
    name: &'static str,
    latest: Option<CardSnapshot>,
    fetched: Fetched,
    revalidate: Revalidate,
    untrusted_before: bool,
    status: FetchStatus,
    stores: bool,
    events: &'static [&'static str],
}

#[test]
fn what_a_fetch_means() {
    use FetchStatus::{Failed, Fetched as New, Unchanged, Untrusted};
    let card = |sha, problem| Fetched::Card(Box::new(snapshot(sha, problem)));
    let cases = vec![
        Case {
            name: "unreachable: every live subject's card trust is lost",
            latest: Some(snapshot("a", None)),
            fetched: Fetched::Failed("connection refused".into()),
            revalidate: Revalidate::IfChanged,
            untrusted_before: false,
            status: Failed,
            stores: false,
            events: &["card-untrusted"],
        },
        Case {
            name: "unreachable again: already untrusted, nothing new",
            latest: Some(snapshot("a", None)),
            fetched: Fetched::Failed("connection refused".into()),
            revalidate: Revalidate::IfChanged,
            untrusted_before: true,
            status: Failed,
            stores: false,
            events: &[],
        },
        Case {
            name: "304 on a trusted card: unchanged",
            latest: Some(snapshot("a", None)),
            fetched: Fetched::NotModified,
            revalidate: Revalidate::IfChanged,
            untrusted_before: false,
            status: Unchanged,
            stores: false,
            events: &[],
        },
        Case {
            name: "304 on a trusted card after a failed fetch: trust returns",
            latest: Some(snapshot("a", None)),
            fetched: Fetched::NotModified,
            revalidate: Revalidate::IfChanged,
            untrusted_before: true,
            status: Unchanged,
            stores: false,
            events: &["card-trust-restored"],
        },
        Case {
            name: "304 on an untrusted card: untrusted for the reason it had",
            latest: Some(snapshot("a", Some("bad signature"))),
            fetched: Fetched::NotModified,
            revalidate: Revalidate::IfChanged,
            untrusted_before: true,
            status: Untrusted,
            stores: false,
            events: &[],
        },
        Case {
            name: "the same trusted bytes: unchanged, nothing stored",
            latest: Some(snapshot("a", None)),
            fetched: card("a", None),
            revalidate: Revalidate::IfChanged,
            untrusted_before: false,
            status: Unchanged,
            stores: false,
            events: &[],
        },
        Case {
            name: "the same bytes judged afresh (keys changed): stored again",
            latest: Some(snapshot("a", None)),
            fetched: card("a", None),
            revalidate: Revalidate::Always,
            untrusted_before: false,
            status: New,
            stores: true,
            events: &[],
        },
        Case {
            name: "new trusted bytes offering the same version: stored, no event",
            latest: Some(snapshot("a", None)),
            fetched: card("b", None),
            revalidate: Revalidate::IfChanged,
            untrusted_before: false,
            status: New,
            stores: true,
            events: &[],
        },
        Case {
            // No trusted card to compare with: the version counts as republished.
            name: "new trusted bytes after an untrusted card: stored, trust returns",
            latest: Some(snapshot("a", Some("bad signature"))),
            fetched: card("b", None),
            revalidate: Revalidate::IfChanged,
            untrusted_before: true,
            status: New,
            stores: true,
            events: &["card-trust-restored", "card-republished"],
        },
        Case {
            name: "untrusted bytes: stored, card trust lost",
            latest: Some(snapshot("a", None)),
            fetched: card("b", Some("bad signature")),
            revalidate: Revalidate::IfChanged,
            untrusted_before: false,
            status: Untrusted,
            stores: true,
            events: &["card-untrusted"],
        },
        Case {
            name: "the same untrusted bytes, judged the same: nothing stored",
            latest: Some(snapshot("b", Some("bad signature"))),
            fetched: card("b", Some("bad signature")),
            revalidate: Revalidate::IfChanged,
            untrusted_before: true,
            status: Untrusted,
            stores: false,
            events: &[],
        },
        Case {
            name: "the same untrusted bytes, judged differently: stored",
            latest: Some(snapshot("b", Some("bad signature"))),
            fetched: card("b", Some("the key set could not be fetched")),
            revalidate: Revalidate::IfChanged,
            untrusted_before: true,
            status: Untrusted,
            stores: true,
            events: &[],
        },
        Case {
            name: "a first card: stored, its version appears",
            latest: None,
            fetched: card("a", None),
            revalidate: Revalidate::IfChanged,
            untrusted_before: false,
            status: New,
            stores: true,
            events: &["version-appeared"],
        },
    ];
    for case in cases {
        let subjects = match &case.latest {
            Some(_) => subjects(case.untrusted_before),
            None => BTreeMap::new(),
        };
        let decided = decide(
            &case.fetched,
            case.latest.as_ref(),
            case.revalidate,
            &subjects,
        );
        let kinds: Vec<&str> = decided.events.iter().map(|(_, e)| e.kind()).collect();
        assert_eq!(decided.status, case.status, "{}: status", case.name);
        assert_eq!(
            decided.snapshot.is_some(),
            case.stores,
            "{}: stored",
            case.name
        );
        assert_eq!(kinds, case.events, "{}: events", case.name);
        assert_eq!(
            decided.error.is_some(),
            matches!(case.status, FetchStatus::Failed | FetchStatus::Untrusted),
            "{}: error",
            case.name
        );
    }
}

#[test]
fn a_failed_fetch_says_why() {
    let fetched = Fetched::Failed("connection refused".into());
    let decided = decide(&fetched, None, Revalidate::IfChanged, &subjects(false));
    assert_eq!(
        decided.error.as_deref(),
        Some("the card could not be fetched: connection refused")
    );
}

#[test]
fn a_deferred_fetch_changes_nothing_about_trust() {
    let until = chrono::Utc::now() + chrono::Duration::seconds(90);
    let fetched = Fetched::Deferred {
        reason: "the host asked to wait".into(),
        until,
    };
    for untrusted in [false, true] {
        let decided = decide(&fetched, None, Revalidate::IfChanged, &subjects(untrusted));
        assert_eq!(decided.status, FetchStatus::Deferred);
        assert!(decided.events.is_empty(), "no event: {:?}", decided.events);
        assert!(decided.snapshot.is_none());
        assert_eq!(decided.retry_at, Some(until));
    }
}
