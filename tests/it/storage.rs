//! Storage conformance: the same scenarios on SQLite and on Postgres.

use std::sync::Arc;

use cardgate::domain::callee::{Callee, CardUrl};
use cardgate::domain::capability::Capability;
use cardgate::domain::demotion::DemotionClass;
use cardgate::domain::gate::{GateError, GateState, SubjectState};
use cardgate::domain::ids::SubscriptionId;
use cardgate::domain::ids::{CalleeId, ProbeRunId, ReportId, SnapshotId};
use cardgate::domain::job::refresh_job;
use cardgate::domain::ledger::{EventBody, NewEvent};
use cardgate::domain::probe::RunStatus;
use cardgate::domain::time::{self, Timestamp};
use cardgate::domain::version::ProtocolVersion;
use cardgate::domain::webhook::{self, DeliveryStatus, Subscription, SubscriptionStatus};
use cardgate::service::ledger::verify;
use cardgate::service::probe::probe_request;
use cardgate::storage::{AttemptRecord, Claimed, RefreshRecord};
use cardgate::storage::{Store, StoreError};

use crate::support::{TestDb, on_both_backends};

on_both_backends!(
    callees_round_trip_and_page,
    duplicate_card_url_conflicts,
    appending_folds_subject_state_in_the_same_transaction,
    a_refused_event_writes_nothing,
    the_database_refuses_update_and_delete_on_the_ledger,
    tampering_with_a_stored_event_is_detected,
    concurrent_appends_for_one_subject_keep_one_chain,
    the_queue_dedups_claims_expired_leases_first_and_prunes_what_finished,
    probes_commit_with_the_refresh_that_calls_for_them,
    a_worker_that_lost_its_lease_finishes_nothing_and_appends_nothing,
    re_promotion_follows_ledger_order_whatever_the_clocks_say,
    a_subjects_chain_of_deliveries_is_claimed_at_once_and_never_past_a_lease,
    an_appends_deliveries_go_to_its_own_sender_unless_one_is_pending_before_them,
    every_subscriber_reads_an_events_one_stored_body_with_its_own_previous_seq,
);

const V1: ProtocolVersion = ProtocolVersion::new(1, 0);

async fn new_callee(store: &Store, url: &str) -> Callee {
    let callee = Callee {
        id: CalleeId::new(),
        card_url: CardUrl::parse(url).unwrap(),
        name: Some("agent".into()),
        created_at: time::now(),
        trusted_keys: None,
        probe_script: None,
        fetch: Default::default(),
        refresh_generation: 0,
    };
    store
        .insert_callee(&callee, callee.created_at)
        .await
        .unwrap();
    callee
}

fn event(callee: &Callee, body: EventBody) -> NewEvent {
    NewEvent {
        callee_id: callee.id,
        protocol_version: V1,
        body,
        actor: "system".into(),
    }
}

fn appeared() -> EventBody {
    EventBody::VersionAppeared {
        snapshot_id: SnapshotId::new(),
        advertised: vec![Capability::Streaming],
    }
}

fn report() -> EventBody {
    EventBody::ReportReceived {
        report_id: ReportId::new(),
        trigger: "duplicate-terminal".into(),
        reporter: "r".into(),
    }
}

async fn callees_round_trip_and_page(db: TestDb) {
    let store = &db.store;
    let mut ids = Vec::new();
    for n in 0..5 {
        ids.push(
            new_callee(store, &format!("https://agent{n}.example"))
                .await
                .id,
        );
    }
    let one = store.callee(ids[2]).await.unwrap();
    assert_eq!(one.card_url.as_str(), "https://agent2.example/");
    assert_eq!(one.name.as_deref(), Some("agent"));

    let first = store.callees(None, 2).await.unwrap();
    let second = store.callees(Some(first[1].id), 2).await.unwrap();
    let third = store.callees(Some(second[1].id), 2).await.unwrap();
    let paged: Vec<CalleeId> = first
        .iter()
        .chain(&second)
        .chain(&third)
        .map(|c| c.id)
        .collect();
    assert_eq!(paged, ids, "{}: paging walks creation order", db.backend());

    assert!(matches!(
        store.callee(CalleeId::new()).await,
        Err(StoreError::NotFound)
    ));
}

async fn duplicate_card_url_conflicts(db: TestDb) {
    new_callee(&db.store, "https://agent.example").await;
    let again = Callee {
        id: CalleeId::new(),
        card_url: CardUrl::parse("https://AGENT.example/").unwrap(),
        name: None,
        created_at: time::now(),
        trusted_keys: None,
        probe_script: None,
        fetch: Default::default(),
        refresh_generation: 0,
    };
    let err = db
        .store
        .insert_callee(&again, again.created_at)
        .await
        .unwrap_err();
    assert!(
        matches!(err, StoreError::Conflict(_)),
        "{}: {err:?}",
        db.backend()
    );
}

async fn appending_folds_subject_state_in_the_same_transaction(db: TestDb) {
    let store = &db.store;
    let callee = new_callee(store, "https://agent.example").await;
    let other = new_callee(store, "https://other.example").await;
    let t0 = time::now();
    let appended = store
        .append(&[event(&callee, appeared())], t0)
        .await
        .unwrap();
    assert_eq!(appended[0].0.seq, 1);
    store
        .append(&[event(&other, appeared())], t0)
        .await
        .unwrap();

    let probe_started = t0 + chrono::Duration::seconds(1);
    let t1 = t0 + chrono::Duration::seconds(2);
    store
        .append(
            &[event(
                &callee,
                EventBody::Promoted {
                    probe_run_id: ProbeRunId::new(),
                    probe_started_at: probe_started,
                    probe_start_seq: Some(1),
                    rulebook: None,
                },
            )],
            t1,
        )
        .await
        .unwrap();

    let subject = store
        .subject(callee.id, V1)
        .await
        .unwrap()
        .expect("subject exists");
    assert_eq!(subject.state.gate, GateState::LifecycleTrusted);
    assert_eq!(subject.last_seq, 3);
    assert_eq!(subject.last_change.seq, 3);
    assert_eq!(subject.last_change.at, t1);
    assert_eq!(
        subject.state.advertised.get(&Capability::Streaming),
        Some(&t0)
    );

    // The cached state equals the ledger folded afresh.
    let events = store.ledger_for_subject(callee.id, V1).await.unwrap();
    let bodies: Vec<(EventBody, Timestamp, i64)> = events
        .iter()
        .map(|e| (e.body().unwrap(), e.recorded_at, e.seq))
        .collect();
    let folded = SubjectState::derive(bodies.iter().map(|(b, t, seq)| (b, *t, *seq)))
        .unwrap()
        .unwrap();
    assert_eq!(folded, subject.state, "{}", db.backend());

    let only_callee = store.ledger(Some(callee.id), 0, 10).await.unwrap();
    assert_eq!(
        only_callee.iter().map(|e| e.seq).collect::<Vec<_>>(),
        [1, 3]
    );
    assert!(verify(store).await.unwrap().ok);
}

async fn a_refused_event_writes_nothing(db: TestDb) {
    let store = &db.store;
    let callee = new_callee(store, "https://agent.example").await;
    // A demotion of a card-trusted subject breaks the gate rules: the whole batch rolls back.
    let demote = EventBody::Demoted {
        class: DemotionClass::Timestamp,
        probe_run_id: None,
        report_id: None,
        reason: "x".into(),
        rulebook: None,
    };
    let err = store
        .append(
            &[event(&callee, appeared()), event(&callee, demote)],
            time::now(),
        )
        .await;
    assert!(
        matches!(err, Err(StoreError::Refused(GateError::DemotionRefused(_)))),
        "{err:?}"
    );
    assert!(
        store.ledger(None, 0, 10).await.unwrap().is_empty(),
        "{}",
        db.backend()
    );
    assert!(store.subject(callee.id, V1).await.unwrap().is_none());
}

async fn the_database_refuses_update_and_delete_on_the_ledger(db: TestDb) {
    let callee = new_callee(&db.store, "https://agent.example").await;
    db.store
        .append(&[event(&callee, appeared())], time::now())
        .await
        .unwrap();
    for sql in [
        "update ledger set actor = 'forger' where seq = 1",
        "delete from ledger where seq = 1",
        "delete from ledger",
    ] {
        let err = db.raw(sql).await.expect_err(sql);
        assert!(
            err.to_string().contains("append-only"),
            "{}: {sql}: {err}",
            db.backend()
        );
    }
    if db.backend() == "postgres" {
        let err = db.raw("truncate ledger cascade").await.unwrap_err();
        assert!(err.to_string().contains("append-only"), "{err}");
    }
    let events = db.store.ledger(None, 0, 10).await.unwrap();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].actor, "system");
}

async fn tampering_with_a_stored_event_is_detected(db: TestDb) {
    let store = &db.store;
    let callee = new_callee(store, "https://agent.example").await;
    store
        .append(&[event(&callee, appeared())], time::now())
        .await
        .unwrap();
    for _ in 0..3 {
        store
            .append(&[event(&callee, report())], time::now())
            .await
            .unwrap();
    }
    assert!(verify(store).await.unwrap().ok);

    // Someone with database access switches the trigger off and rewrites event 3.
    let tamper = match db.backend() {
        "postgres" => vec![
            "alter table ledger disable trigger ledger_no_update_or_delete",
            "update ledger set data = replace(data, 'duplicate-terminal', 'nothing') where seq = 3",
        ],
        _ => vec![
            "drop trigger ledger_no_update",
            "update ledger set data = replace(data, 'duplicate-terminal', 'nothing') where seq = 3",
        ],
    };
    for sql in tamper {
        db.raw(sql).await.unwrap();
    }
    let report = verify(store).await.unwrap();
    assert!(!report.ok, "{}", db.backend());
    assert_eq!(report.checked, 2);
    let broken = report.first_broken.expect("a broken link");
    assert_eq!(broken.seq, 3);
    assert!(
        broken
            .reason
            .contains("does not match the event's contents"),
        "{}",
        broken.reason
    );
}

async fn concurrent_appends_for_one_subject_keep_one_chain(db: TestDb) {
    let store = Arc::new(db.store.clone());
    let callee = new_callee(&store, "https://agent.example").await;
    store
        .append(&[event(&callee, appeared())], time::now())
        .await
        .unwrap();

    const WRITERS: usize = 24;
    let tasks: Vec<_> = (0..WRITERS)
        .map(|_| {
            let store = store.clone();
            let ev = event(&callee, report());
            tokio::spawn(async move { store.append(&[ev], time::now()).await })
        })
        .collect();
    for task in tasks {
        task.await.unwrap().unwrap();
    }

    let report = verify(&store).await.unwrap();
    assert!(report.ok, "{}: {report:?}", db.backend());
    assert_eq!(report.checked, WRITERS as u64 + 1);
    let subject = store.subject(callee.id, V1).await.unwrap().unwrap();
    assert_eq!(subject.last_seq, WRITERS as i64 + 1);
    assert_eq!(subject.last_hash, report.head_hash);
}

async fn the_queue_dedups_claims_expired_leases_first_and_prunes_what_finished(db: TestDb) {
    let store = &db.store;
    let t0 = time::now();
    let secs = |n: i64| t0 + chrono::Duration::seconds(n);
    let (a, b, c) = (
        new_callee(store, "https://a.example/card.json").await,
        new_callee(store, "https://b.example/card.json").await,
        new_callee(store, "https://c.example/card.json").await,
    );

    // A batch skips what is already active, in the batch or before it.
    assert!(
        store
            .enqueue(&refresh_job(a.id, "first", t0))
            .await
            .unwrap()
    );
    let batch = [
        refresh_job(a.id, "again", t0),
        refresh_job(b.id, "sweep", secs(1)),
        refresh_job(b.id, "twice in one batch", secs(1)),
        refresh_job(c.id, "sweep", secs(2)),
    ];
    assert_eq!(store.enqueue_many(&batch).await.unwrap(), 2);
    assert_eq!(store.queue_stats(secs(10)).await.unwrap().queued, 3);

    // Oldest due first; nothing runs before its time.
    let lease = secs(60);
    let first = store
        .claim_job("w1", lease, secs(10))
        .await
        .unwrap()
        .unwrap();
    assert_eq!((first.callee_id, first.reason.as_str()), (a.id, "first"));
    let second = store
        .claim_job("w1", lease, secs(10))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(second.callee_id, b.id);

    // w1 dies holding `second`: once its lease expires, it is taken before the queue.
    assert!(
        store
            .finish_job(first.id, "w1", None, secs(11))
            .await
            .unwrap()
    );
    let retaken = store
        .claim_job("w2", secs(200), secs(61))
        .await
        .unwrap()
        .unwrap();
    assert_eq!((retaken.id, retaken.attempts), (second.id, 2));
    assert!(
        !store
            .finish_job(second.id, "w1", None, secs(62))
            .await
            .unwrap(),
        "the dead worker no longer holds it"
    );
    assert!(
        store
            .finish_job(second.id, "w2", Some("boom"), secs(62))
            .await
            .unwrap()
    );
    let third = store
        .claim_job("w2", secs(200), secs(63))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(third.callee_id, c.id);
    assert!(
        store
            .claim_job("w2", secs(200), secs(63))
            .await
            .unwrap()
            .is_none()
    );

    // Pruning removes finished jobs older than the cutoff, never a running one; a finished
    // refresh no longer blocks a new one.
    assert_eq!(
        store.prune_jobs(secs(12), 100).await.unwrap(),
        1,
        "only the first"
    );
    assert!(matches!(
        store.job(first.id).await,
        Err(StoreError::NotFound)
    ));
    assert_eq!(
        store.prune_jobs(secs(1000), 100).await.unwrap(),
        1,
        "the failed one"
    );
    assert_eq!(store.job(third.id).await.unwrap().callee_id, c.id);
    assert!(
        store
            .enqueue(&refresh_job(a.id, "later", secs(70)))
            .await
            .unwrap()
    );
}

async fn probes_commit_with_the_refresh_that_calls_for_them(db: TestDb) {
    let store = &db.store;
    let callee = new_callee(store, "https://a.example/card.json").await;
    let now = time::now();
    let fetch = cardgate::domain::callee::FetchState::default();
    let key = cardgate::domain::job::probe_key(callee.id, V1);
    let record = |generation, probes| RefreshRecord {
        callee_id: callee.id,
        generation,
        snapshot: None,
        fetch: &fetch,
        events: &[],
        job: None,
        probes,
    };

    // A refresh that lost the race to another one writes nothing, its probe included.
    let lost = [probe_request(
        callee.id,
        V1,
        "version-appeared",
        "scheduler",
        now,
    )];
    assert!(matches!(
        store.record_refresh(&record(7, &lost), now).await,
        Err(StoreError::Conflict(_))
    ));
    assert!(store.active_job(&key).await.unwrap().is_none());
    assert!(
        store
            .probe_runs(callee.id, None, 10)
            .await
            .unwrap()
            .is_empty()
    );

    // The winner's probe is queued with it.
    let won = [probe_request(
        callee.id,
        V1,
        "version-appeared",
        "scheduler",
        now,
    )];
    store.record_refresh(&record(0, &won), now).await.unwrap();
    let job = store.active_job(&key).await.unwrap().unwrap();
    assert_eq!(job.probe_run_id, Some(won[0].0.id));

    // A later refresh that calls for the same probe finds it queued: no second job, no
    // orphaned run.
    let again = [probe_request(
        callee.id,
        V1,
        "capability-advertised",
        "scheduler",
        now,
    )];
    store.record_refresh(&record(1, &again), now).await.unwrap();
    assert_eq!(store.active_job(&key).await.unwrap().unwrap().id, job.id);
    let runs = store.probe_runs(callee.id, None, 10).await.unwrap();
    assert_eq!(runs.iter().map(|r| r.id).collect::<Vec<_>>(), [won[0].0.id]);
}

async fn a_worker_that_lost_its_lease_finishes_nothing_and_appends_nothing(db: TestDb) {
    let store = &db.store;
    let t0 = time::now();
    let secs = |n: i64| t0 + chrono::Duration::seconds(n);
    let callee = callee_with_subject(store, "https://fenced.example/card.json", secs(0)).await;
    let (run, job) = probe_request(callee.id, V1, "test", "admin", secs(0));
    store.request_probe(&run, &job).await.unwrap();
    let claimed = store
        .claim_job("w1", secs(30), secs(1))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(claimed.id, job.id);
    store
        .start_probe_run(run.id, "https://fenced.example/a2a", "json-rpc-v1", secs(1))
        .await
        .unwrap();
    // w1 stalls past its lease; w2 takes the job over.
    let retaken = store
        .claim_job("w2", secs(200), secs(31))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(retaken.id, job.id);

    let evidence = PassingEvidence::new();
    let finished = || evidence.finished();
    let promote = |_: &SubjectState| {
        vec![EventBody::Promoted {
            probe_run_id: run.id,
            probe_started_at: secs(1),
            probe_start_seq: Some(1),
            rulebook: None,
        }]
    };
    let head = store.ledger(Some(callee.id), 0, 100).await.unwrap().len();
    let stale = store
        .finish_probe_run(run.id, Some((job.id, "w1")), finished(), promote, || {
            secs(32)
        })
        .await;
    match stale {
        Err(StoreError::Conflict(why)) => assert!(why.contains("no longer leased to w1"), "{why}"),
        other => panic!("a stale worker finished its run: {other:?}"),
    }
    assert_eq!(
        store.ledger(Some(callee.id), 0, 100).await.unwrap().len(),
        head,
        "nothing appended"
    );
    assert_eq!(
        store.probe_run(run.id).await.unwrap().status(),
        RunStatus::Running
    );

    // A run that is no longer running cannot finish, even for the lease holder.
    store
        .abort_probe_run(run.id, "cut short", secs(33))
        .await
        .unwrap();
    match store
        .finish_probe_run(run.id, Some((job.id, "w2")), finished(), promote, || {
            secs(34)
        })
        .await
    {
        Err(StoreError::Conflict(why)) => assert!(why.contains("not running"), "{why}"),
        other => panic!("an aborted run finished: {other:?}"),
    }
    assert_eq!(
        store.ledger(Some(callee.id), 0, 100).await.unwrap().len(),
        head
    );
}

async fn re_promotion_follows_ledger_order_whatever_the_clocks_say(db: TestDb) {
    use cardgate::domain::gate::ProbeStart;
    use cardgate::domain::probe::outcome::ledger_events;

    let store = &db.store;
    let t0 = time::now();
    let secs = |n: i64| t0 + chrono::Duration::seconds(n);
    let callee = callee_with_subject(store, "https://skewed.example/card.json", secs(0)).await;
    store
        .append(
            &[event(
                &callee,
                EventBody::Promoted {
                    probe_run_id: ProbeRunId::new(),
                    probe_started_at: secs(0),
                    probe_start_seq: Some(1),
                    rulebook: None,
                },
            )],
            secs(1),
        )
        .await
        .unwrap();
    let evidence = PassingEvidence::new();
    // Runs one passing probe whose worker's clock reads `worker_clock` at its start; `between`
    // is appended after it started and before it finishes. Returns the kinds it appended.
    let probe_around = |worker_clock: i64, between: Option<(EventBody, i64)>| {
        let evidence = &evidence;
        let callee = &callee;
        async move {
            let (run, job) = probe_request(callee.id, V1, "test", "admin", secs(0));
            store.request_probe(&run, &job).await.unwrap();
            let claimed = store
                .claim_job("w", secs(10_000), secs(0))
                .await
                .unwrap()
                .unwrap();
            let head = store
                .start_probe_run(
                    run.id,
                    "https://skewed.example/a2a",
                    "json-rpc-v1",
                    secs(worker_clock),
                )
                .await
                .unwrap();
            if let Some((body, clock)) = between {
                store
                    .append(&[event(callee, body)], secs(clock))
                    .await
                    .unwrap();
            }
            let start = ProbeStart {
                head_seq: Some(head),
                at: secs(worker_clock),
            };
            let appended = store
                .finish_probe_run(
                    run.id,
                    Some((claimed.id, "w")),
                    evidence.finished(),
                    |state| ledger_events(state, run.id, &start, &evidence.judgement),
                    || secs(worker_clock + 1),
                )
                .await
                .unwrap();
            appended
                .iter()
                .map(|(e, _)| e.kind.clone())
                .collect::<Vec<_>>()
        }
    };
    let demotion = EventBody::Demoted {
        class: DemotionClass::Terminal,
        probe_run_id: None,
        report_id: Some(ReportId::new()),
        reason: "a report".into(),
        rulebook: None,
    };
    // The worker's clock runs an hour ahead of the process that demotes: by the clocks the
    // probe started after the demotion, in ledger order it started before. No re-promotion.
    assert_eq!(
        probe_around(3600, Some((demotion, 10))).await,
        ["probe-finished"]
    );
    // The worker's clock runs an hour behind: by the clocks it started before the demotion,
    // in ledger order after. It re-promotes.
    assert_eq!(
        probe_around(-3600, None).await,
        ["probe-finished", "promoted"]
    );
    let subject = store.subject(callee.id, V1).await.unwrap().unwrap();
    assert_eq!(subject.state.gate, GateState::LifecycleTrusted);
}

/// A registered callee whose v1.0 subject appeared at `at`.
async fn callee_with_subject(store: &Store, url: &str, at: Timestamp) -> Callee {
    let callee = new_callee(store, url).await;
    store
        .append(&[event(&callee, appeared())], at)
        .await
        .unwrap();
    callee
}

/// What a passing cycle stores: the verdict, with empty observations and transcript.
struct PassingEvidence {
    judgement: cardgate::domain::probe::Judgement,
    observations: cardgate::domain::probe::Observations,
    transcript: serde_json::Value,
    contribution: cardgate::domain::probe::track::Contribution,
}

impl PassingEvidence {
    fn new() -> Self {
        Self {
            contribution: cardgate::domain::probe::track::Contribution::of(
                &passing_judgement(),
                &Default::default(),
            ),
            judgement: passing_judgement(),
            observations: Default::default(),
            transcript: serde_json::Value::Array(Vec::new()),
        }
    }

    fn finished(&self) -> cardgate::storage::FinishedRun<'_> {
        cardgate::storage::FinishedRun {
            judgement: &self.judgement,
            observations: &self.observations,
            contribution: &self.contribution,
            transcript: &self.transcript,
            actor: "probe",
            extended_card: None,
        }
    }
}

/// A probe verdict that passed, with nothing else in it.
fn passing_judgement() -> cardgate::domain::probe::Judgement {
    use cardgate::domain::probe::{Judgement, Verdict};
    Judgement {
        findings: Vec::new(),
        capabilities: Default::default(),
        verdict: Verdict {
            passed: true,
            reasons: Vec::new(),
            triggers: Vec::new(),
            lifecycle: Ok(()),
            untimestamped: Vec::new(),
            unexercised: None,
            extended_card: None,
            rulebook: None,
            trials: None,
        },
    }
}

fn subscription() -> Subscription {
    Subscription {
        id: SubscriptionId::new(),
        url: "http://127.0.0.1:9/hook".into(),
        callee_id: None,
        events: None,
        description: None,
        secret: webhook::new_secret(),
        previous_secret: None,
        previous_until: None,
        status: SubscriptionStatus::Active,
        created_at: time::now(),
        failing_since: None,
    }
}

fn republished() -> EventBody {
    EventBody::CardRepublished {
        snapshot_id: SnapshotId::new(),
        sha256: "00".repeat(32),
    }
}

/// The sender's claim: a subject's pending deliveries come in one batch, each naming the one
/// it must follow; one behind a delivery leased elsewhere is not claimed, and a delivery given
/// back unattempted is claimable again, its attempts untouched.
async fn a_subjects_chain_of_deliveries_is_claimed_at_once_and_never_past_a_lease(db: TestDb) {
    let store = &db.store;
    let backend = db.backend();
    store.insert_subscription(&subscription()).await.unwrap();
    let (one, other) = (
        new_callee(store, "https://one.example").await,
        new_callee(store, "https://other.example").await,
    );
    let t0 = time::now();
    let mut seqs = Vec::new();
    for body in [appeared(), republished(), republished()] {
        let appended = store.append(&[event(&one, body)], t0).await.unwrap();
        seqs.push(appended[0].0.seq);
    }
    store
        .append(&[event(&other, appeared())], t0)
        .await
        .unwrap();
    let now = time::now();

    // Owner a takes only the first of `one`'s chain; b then gets `other`'s news, and nothing
    // of `one`: the rest of its chain is behind a delivery leased elsewhere.
    let first = claim(store, "a", now, 1).await;
    assert_eq!(first.len(), 1, "{backend}");
    assert_eq!((first[0].delivery.seq, first[0].waits_for), (seqs[0], None));
    let b = claim(store, "b", now, 100).await;
    let b_seqs: Vec<i64> = b.iter().map(|c| c.delivery.seq).collect();
    assert_eq!(b_seqs.len(), 1, "{backend}: {b_seqs:?}");
    assert!(!seqs.contains(&b_seqs[0]), "{backend}: {b_seqs:?}");

    // Given back unattempted, the head comes again with its whole chain, each naming the one
    // before it.
    store
        .finish_attempts("a", &[], &[first[0].delivery.id])
        .await
        .unwrap();
    let chain = claim(store, "c", now, 100).await;
    let got: Vec<(i64, Option<i64>, i32)> = chain
        .iter()
        .map(|c| (c.delivery.seq, c.waits_for, c.delivery.attempts))
        .collect();
    assert_eq!(
        got,
        vec![
            (seqs[0], None, 0),
            (seqs[1], Some(seqs[0]), 0),
            (seqs[2], Some(seqs[1]), 0)
        ],
        "{backend}"
    );
    assert!(chain.iter().all(|c| c.subject == chain[0].subject));

    // The head delivered, the rest given back: the next claim starts at the second.
    let delivered = delivered_at(chain[0].subscription.id, now);
    let rest: Vec<_> = chain[1..].iter().map(|c| c.delivery.id).collect();
    store
        .finish_attempts("c", &[(chain[0].delivery.id, delivered)], &rest)
        .await
        .unwrap();
    let next = claim(store, "d", now, 100).await;
    let got: Vec<(i64, Option<i64>)> = next.iter().map(|c| (c.delivery.seq, c.waits_for)).collect();
    assert_eq!(
        got,
        vec![(seqs[1], None), (seqs[2], Some(seqs[1]))],
        "{backend}"
    );
}

/// The sender's claim at `now`, as it makes it: a five-minute hold-back, a two-second wait for
/// attestations, a 20 s lease.
async fn claim(store: &Store, owner: &str, now: Timestamp, limit: u32) -> Vec<Claimed> {
    store
        .claim_deliveries(
            owner,
            now,
            now - chrono::Duration::minutes(5),
            now - chrono::Duration::seconds(2),
            now + chrono::Duration::seconds(20),
            limit,
        )
        .await
        .unwrap()
}

fn delivered_at(subscription: SubscriptionId, now: Timestamp) -> AttemptRecord {
    AttemptRecord {
        payload: None,
        subscription,
        attempted_at: now,
        status: DeliveryStatus::Delivered,
        next_attempt_at: now,
        status_code: Some(204),
        error: None,
        finished_at: Some(now),
    }
}

/// The handoff: what an append queues goes to this process's sender, leased to it, once the
/// append commits (no claim), chained within the append; a delivery behind one still pending
/// from before is left to be claimed in its turn.
async fn an_appends_deliveries_go_to_its_own_sender_unless_one_is_pending_before_them(db: TestDb) {
    let store = &db.store;
    let backend = db.backend();
    let sub = subscription();
    store.insert_subscription(&sub).await.unwrap();
    let mut handed = store
        .hand_deliveries_to("me", std::time::Duration::from_secs(20))
        .expect("the first sender takes the handoff");
    assert!(
        store
            .hand_deliveries_to("another", std::time::Duration::from_secs(20))
            .is_none()
    );
    let one = new_callee(store, "https://one.example").await;
    let now = time::now();

    let first = store.append(&[event(&one, appeared())], now).await.unwrap()[0]
        .0
        .seq;
    let batch = handed.try_recv().expect("handed over after the commit");
    let got: Vec<(i64, Option<i64>)> = batch
        .iter()
        .map(|c| (c.delivery.seq, c.waits_for))
        .collect();
    assert_eq!(got, vec![(first, None)], "{backend}");
    assert_eq!(batch[0].subscription.id, sub.id);
    // Leased to this process: nobody claims it.
    let claimed = claim(store, "other", now, 100).await;
    assert!(claimed.is_empty(), "{backend}: {}", claimed.len());

    // Two more about the same subject while the first is pending: not handed over, and not
    // claimable until it is done.
    let later = store
        .append(
            &[event(&one, republished()), event(&one, republished())],
            now,
        )
        .await
        .unwrap();
    assert!(
        handed.try_recv().is_err(),
        "{backend}: a chain behind a pending delivery"
    );
    assert!(claim(store, "other", now, 100).await.is_empty());
    store
        .finish_attempts(
            "me",
            &[(batch[0].delivery.id, delivered_at(sub.id, now))],
            &[],
        )
        .await
        .unwrap();
    let claimed = claim(store, "other", now, 100).await;
    let got: Vec<(i64, Option<i64>)> = claimed
        .iter()
        .map(|c| (c.delivery.seq, c.waits_for))
        .collect();
    assert_eq!(
        got,
        vec![
            (later[0].0.seq, None),
            (later[1].0.seq, Some(later[0].0.seq))
        ],
        "{backend}"
    );

    // A new subject's events appended together are handed over as one chain.
    let two = new_callee(store, "https://two.example").await;
    let both = store
        .append(&[event(&two, appeared()), event(&two, republished())], now)
        .await
        .unwrap();
    let batch = handed.try_recv().expect("handed over");
    let got: Vec<(i64, Option<i64>)> = batch
        .iter()
        .map(|c| (c.delivery.seq, c.waits_for))
        .collect();
    assert_eq!(
        got,
        vec![(both[0].0.seq, None), (both[1].0.seq, Some(both[0].0.seq))],
        "{backend}"
    );
}

/// An event's body is stored once for all its subscribers: each delivery, listed or claimed,
/// reads it back as exactly the body the domain makes, with its own `previous_seq`; deleting
/// a subscription deletes its deliveries and no one else's.
async fn every_subscriber_reads_an_events_one_stored_body_with_its_own_previous_seq(db: TestDb) {
    let store = &db.store;
    let backend = db.backend();
    let (a, b) = (subscription(), subscription());
    store.insert_subscription(&a).await.unwrap();
    store.insert_subscription(&b).await.unwrap();
    let one = new_callee(store, "https://one.example").await;
    let now = time::now();
    let appended = store
        .append(&[event(&one, appeared()), event(&one, republished())], now)
        .await
        .unwrap();
    // What the domain makes of each event, for the subscription's previous delivery.
    let expected = |index: usize, previous: Option<i64>| {
        let (record, subject) = &appended[index];
        let kind = webhook::EventType::of_kind(&record.kind).unwrap();
        webhook::payload(kind, record, subject, previous).to_string()
    };
    let first = appended[0].0.seq;
    let want = vec![expected(1, Some(first)), expected(0, None)];
    for sub in [&a, &b] {
        let listed: Vec<String> = store
            .deliveries(sub.id, None, 10)
            .await
            .unwrap()
            .into_iter()
            .map(|d| d.payload)
            .collect();
        assert_eq!(listed, want, "{backend}: listed");
    }
    let mut claimed: Vec<(i64, String)> = claim(store, "me", now, 100)
        .await
        .into_iter()
        .map(|c| (c.delivery.seq, c.delivery.payload))
        .collect();
    claimed.sort();
    assert_eq!(claimed.len(), 4, "{backend}");
    for (seq, body) in claimed {
        let index = usize::from(seq != first);
        let previous = (index == 1).then_some(first);
        assert_eq!(body, expected(index, previous), "{backend}: claimed");
    }

    store.delete_subscription(a.id).await.unwrap();
    assert!(store.deliveries(a.id, None, 10).await.unwrap().is_empty());
    assert_eq!(store.deliveries(b.id, None, 10).await.unwrap().len(), 2);
}
