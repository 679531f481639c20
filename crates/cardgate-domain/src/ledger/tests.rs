//! Unit tests of `cardgate_domain::ledger`.

use super::*;
use chrono::{TimeZone, Utc};

fn event(n: u32) -> NewEvent {
    NewEvent {
        callee_id: CalleeId::new(),
        protocol_version: ProtocolVersion::new(1, 0),
        body: EventBody::ReportReceived {
            report_id: ReportId::new(),
            trigger: format!("t{n}"),
            reporter: "tester".into(),
        },
        actor: "system".into(),
    }
}

fn chain(len: u32) -> Vec<EventRecord> {
    let at = Utc.timestamp_opt(1_700_000_000, 123_456_789).unwrap();
    let mut prev = GENESIS_HASH.to_string();
    (1..=len)
        .map(|n| {
            let record = EventRecord::seal(&event(n), n.into(), &prev, at);
            prev = record.hash.clone();
            record
        })
        .collect()
}

fn verify(events: &[EventRecord]) -> Result<u64, BrokenLink> {
    let mut v = ChainVerifier::default();
    for e in events {
        v.check(e)?;
    }
    Ok(v.checked())
}

#[test]
fn an_intact_chain_verifies() {
    assert_eq!(verify(&chain(5)), Ok(5));
}

#[test]
fn sealing_truncates_to_microseconds_so_stores_round_trip() {
    let record = &chain(1)[0];
    assert_eq!(record.recorded_at.timestamp_subsec_nanos(), 123_456_000);
    assert_eq!(record.compute_hash().unwrap(), record.hash);
}

#[test]
fn every_kind_of_edit_breaks_the_chain_at_the_edited_event() {
    type Edit = fn(&mut EventRecord);
    let edits: [(&str, Edit); 8] = [
        ("data", |e| e.data["trigger"] = "edited".into()),
        ("kind", |e| e.kind = "promoted".into()),
        ("actor", |e| e.actor = "someone else".into()),
        ("version", |e| e.protocol_version = "0.3".into()),
        ("callee", |e| e.callee_id = CalleeId::new()),
        ("time", |e| {
            e.recorded_at += chrono::Duration::microseconds(1)
        }),
        ("prev_hash", |e| e.prev_hash = GENESIS_HASH.into()),
        ("seq", |e| e.seq = 9),
    ];
    for (name, edit) in edits {
        let mut events = chain(4);
        edit(&mut events[2]);
        let broken = verify(&events).expect_err(name);
        assert_eq!(broken.seq, events[2].seq, "{name}: {}", broken.reason);
    }
}

#[test]
fn rehashing_an_edited_event_is_caught_by_its_successor() {
    let mut events = chain(4);
    events[1].actor = "forger".into();
    events[1].hash = events[1].compute_hash().unwrap();
    let broken = verify(&events).unwrap_err();
    assert_eq!(broken.seq, 3);
    assert!(broken.reason.contains("prev_hash"), "{}", broken.reason);
}

#[test]
fn a_deleted_event_is_a_gap() {
    let mut events = chain(4);
    events.remove(1);
    let broken = verify(&events).unwrap_err();
    assert_eq!(broken.seq, 3);
    assert!(broken.reason.contains("expected sequence number 2"));
}

#[test]
fn bodies_round_trip_through_kind_and_data() {
    let body = event(1).body;
    assert_eq!(
        EventBody::from_parts(body.kind(), body.data()).unwrap(),
        body
    );
}
