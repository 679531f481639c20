//! Unit tests of `cardgate_domain::webhook`.

use super::*;

/// The example of the Standard Webhooks specification (its README's "Signature scheme").
#[test]
fn signs_the_specifications_example() {
    let signed = signature(
        &["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"],
        "msg_p5jXN8AQM9LWM0D4loKWxJek",
        1614265330,
        br#"{"test": 2432232314}"#,
    );
    assert_eq!(signed, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
}

#[test]
fn chains_keep_the_order_within_a_key_and_never_mix_keys() {
    let keys = [
        ("s1", "a"),
        ("s1", "b"),
        ("s2", "a"),
        ("s1", "a"),
        ("s1", "b"),
    ];
    assert_eq!(chains(keys), vec![vec![0, 3], vec![1, 4], vec![2]]);
    assert!(chains(Vec::<u8>::new()).is_empty());
}

#[test]
fn an_attestation_goes_into_the_data_of_the_body_as_inserting_it_would() {
    let payload = r#"{"type":"t","data":{"event":{"seq":3},"previous_seq":null}}"#;
    let envelope = json!({"x": {"y": [1, 2]}});
    let body = with_attestation(payload, &envelope.to_string()).unwrap();
    let mut inserted: Value = serde_json::from_str(payload).unwrap();
    inserted["data"]
        .as_object_mut()
        .unwrap()
        .insert("attestation".into(), envelope);
    assert_eq!(body, inserted.to_string());
    assert!(with_attestation("not json", "{}").is_none());
    assert!(with_attestation(r#"{"data":1}"#, "{}").is_none());
}

#[test]
fn an_events_payload_renders_each_subscriptions_body_exactly() {
    use crate::ledger::{EventBody, GENESIS_HASH, NewEvent};
    use crate::version::ProtocolVersion;
    let (callee_id, protocol_version) = (CalleeId::new(), ProtocolVersion::new(1, 0));
    let now = Timestamp::from_timestamp(1_700_000_000, 5_000).unwrap();
    let appeared = NewEvent {
        callee_id,
        protocol_version,
        body: EventBody::VersionAppeared {
            snapshot_id: crate::ids::SnapshotId::new(),
            advertised: Vec::new(),
        },
        actor: "system".into(),
    };
    let first = EventRecord::seal(&appeared, 6, GENESIS_HASH, now);
    let created = Subject::after(None, &appeared, &first).unwrap();
    let event = NewEvent {
        callee_id,
        protocol_version,
        body: EventBody::CardUntrusted {
            snapshot_id: None,
            // What a hostile card could put in a reason must not shift the splice.
            reason: r#"bad "previous_seq":null}}"#.into(),
        },
        actor: "system".into(),
    };
    let record = EventRecord::seal(&event, 7, &first.hash, now);
    let subject = Subject::after(Some(&created), &event, &record).unwrap();
    let kind = EventType::CardUntrusted;
    let rendered = EventPayload::new(kind, &record, &subject);
    for previous in [None, Some(0), Some(6), Some(i64::MAX)] {
        assert_eq!(
            rendered.render(previous),
            payload(kind, &record, &subject, previous).to_string()
        );
    }
}

#[test]
fn a_delivery_follows_only_what_succeeded_before_it() {
    assert!(may_follow(None, &[]));
    assert!(may_follow(Some(7), &[3, 7]));
    // Its predecessor failed, was not claimed here, or has not gone yet.
    assert!(!may_follow(Some(7), &[3]));
    assert!(!may_follow(Some(7), &[]));
}

#[test]
fn a_rotation_signs_with_both_secrets() {
    let (a, b) = (new_secret(), new_secret());
    assert!(a.starts_with("whsec_") && a.len() == "whsec_".len() + 44);
    let both = signature(&[&a, &b], "id", 1, b"{}");
    let parts: Vec<&str> = both.split(' ').collect();
    assert_eq!(parts.len(), 2);
    assert_eq!(parts[0], signature(&[&a], "id", 1, b"{}"));
    assert_eq!(parts[1], signature(&[&b], "id", 1, b"{}"));
}

#[test]
fn backoff_doubles_to_the_cap_with_bounded_jitter() {
    let p = RetryPolicy::default();
    assert_eq!(p.backoff(1, 1.0), Duration::from_secs(5));
    assert_eq!(p.backoff(2, 1.0), Duration::from_secs(10));
    assert_eq!(p.backoff(11, 1.0), Duration::from_secs(3600));
    assert_eq!(p.backoff(500, 1.0), Duration::from_secs(3600));
    assert_eq!(p.backoff(1, 9.0), Duration::from_secs(6));
    assert_eq!(p.backoff(1, 0.0), Duration::from_secs(4));
}

#[test]
fn retry_after_is_honoured_within_bounds() {
    let p = RetryPolicy::default();
    assert_eq!(
        p.wait(1, 1.0, Some(Duration::from_secs(30))),
        Duration::from_secs(30)
    );
    assert_eq!(p.wait(1, 1.0, Some(Duration::ZERO)), Duration::from_secs(1));
    assert_eq!(p.wait(1, 1.0, Some(Duration::from_secs(86_400))), p.max);
    assert_eq!(p.wait(2, 1.0, None), Duration::from_secs(10));
}

#[test]
fn a_receiver_failing_past_the_threshold_is_failing() {
    let now = chrono::Utc::now();
    let day = Duration::from_secs(86_400);
    assert_eq!(Health::at(None, now, day), Health::Healthy);
    let hour_ago = now - chrono::Duration::hours(1);
    assert_eq!(
        Health::at(Some(hour_ago), now, day),
        Health::Erring { since: hour_ago }
    );
    let two_days_ago = now - chrono::Duration::days(2);
    assert!(matches!(
        Health::at(Some(two_days_ago), now, day),
        Health::Failing { .. }
    ));
}

#[test]
fn a_delivery_follows_the_newest_event_its_subscription_asks_for_since_it_began() {
    let callee = CalleeId::new();
    let sub = |events: Option<Vec<EventType>>| Subscription {
        id: SubscriptionId::new(),
        url: "https://hooks.example/x".into(),
        callee_id: None,
        events: events.map(|e| e.into_iter().collect()),
        description: None,
        secret: new_secret(),
        previous_secret: None,
        previous_until: None,
        status: SubscriptionStatus::Active,
        created_at: chrono::DateTime::from_timestamp(1_780_000_000, 0).unwrap(),
        failing_since: None,
    };
    let heads = std::collections::BTreeMap::from([
        (EventType::SubjectCreated, 3),
        (EventType::ProbeFinished, 9),
        (EventType::SubjectPromoted, 10),
        (EventType::CardRepublished, 12),
    ]);
    // Everything: the newest announced.
    assert_eq!(previous_seq(&sub(None), callee, 0, &heads), Some(12));
    // Only demotions and promotions: the promotion.
    let trust = sub(Some(vec![
        EventType::SubjectPromoted,
        EventType::SubjectDemoted,
    ]));
    assert_eq!(previous_seq(&trust, callee, 0, &heads), Some(10));
    // Created after the promotion: nothing it asks for came since.
    assert_eq!(previous_seq(&trust, callee, 10, &heads), None);
    // Another callee's subscription is never asked.
    let other = Subscription {
        callee_id: Some(CalleeId::new()),
        ..sub(None)
    };
    assert_eq!(previous_seq(&other, callee, 0, &heads), None);
    assert_eq!(
        previous_seq(&sub(None), callee, 0, &Default::default()),
        None
    );
}

#[test]
fn news_of_a_failing_receiver_goes_to_registry_wide_subscriptions_and_those_naming_it() {
    let now = chrono::DateTime::from_timestamp(1_780_000_000, 0).unwrap();
    let sub = |callee: Option<CalleeId>, events: Option<Vec<EventType>>| Subscription {
        id: SubscriptionId::new(),
        url: "https://hooks.example/x?token=secret".into(),
        callee_id: callee,
        events: events.map(|e| e.into_iter().collect()),
        description: Some("ops".into()),
        secret: new_secret(),
        previous_secret: None,
        previous_until: None,
        status: SubscriptionStatus::Active,
        created_at: now,
        failing_since: Some(now),
    };
    let kind = EventType::SubscriptionFailing;
    assert!(sub(None, None).wants_news(kind));
    assert!(!sub(Some(CalleeId::new()), None).wants_news(kind));
    assert!(sub(Some(CalleeId::new()), Some(vec![kind])).wants_news(kind));
    assert!(!sub(None, Some(vec![EventType::SubjectDemoted])).wants_news(kind));
    let failing = sub(None, None);
    let body = failing_payload(&failing, now);
    assert_eq!(body["type"], "subscription.failing");
    assert_eq!(body["data"]["subscription"]["id"], failing.id.to_string());
    assert!(
        !body.to_string().contains("secret"),
        "never its URL: {body}"
    );
}

#[test]
fn kinds_map_to_types_and_back() {
    for t in EventType::ALL {
        assert_eq!(EventType::parse(t.as_str()), Some(t));
    }
    assert_eq!(
        EventType::of_kind("demoted"),
        Some(EventType::SubjectDemoted)
    );
    assert_eq!(EventType::of_kind("report-received"), None);
}
