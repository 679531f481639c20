//! The scheduler and the work queue: version changes noticed by themselves, republishes that
//! move no gate, callers' reports, backoff, and idempotent sweeps.

use std::time::Duration;

use cardgate::app::App;
use cardgate::fake_agent::{Behaviour, FakeAgent, FakeAgentConfig};
use cardgate::runtime::schedule;
use serde_json::{Value, json};

use crate::probes::{decision, gate, register, wait};
use crate::support::cards::{CardServer, Reply};
use crate::support::{TestDb, TestServer, error_code, on_both_backends, test_settings};

on_both_backends!(
    a_new_version_is_noticed_probed_and_trusted_within_one_refresh,
    reports_with_evidence_demote_and_others_are_refused,
    sweeps_are_idempotent,
    the_reprobe_sweep_queues_the_demoted_and_the_stale_only,
    one_replica_claims_each_sweep_tick,
    an_unreachable_callee_backs_off_and_recovers,
    a_sweep_that_is_off_never_ticks,
);

/// Settings with the scheduler's loop on and a refresh every second.
fn scheduled(db: &TestDb) -> cardgate::app::Settings {
    let mut settings = test_settings(db.target.clone());
    settings.cards.probe_on_change = true;
    settings.schedule.refresh = "*/1 * * * * *".parse().unwrap();
    settings
}

/// Polls `check` every 100 ms for up to 30 s.
async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    eventually_value(what, || {
        let ready = check();
        async move { ready.await.then_some(()) }
    })
    .await
}

/// Polls `check` every 100 ms for up to 30 s, until it yields a value.
async fn eventually_value<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    for _ in 0..300 {
        if let Some(value) = check().await {
            return value;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("timed out waiting for {what}");
}

async fn ledger_kinds(server: &TestServer, callee: &str) -> Vec<String> {
    let (_, page) = server
        .get(&format!("/v1/ledger?callee_id={callee}&limit=200"))
        .await;
    page["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            format!(
                "{} {}",
                e["protocol_version"].as_str().unwrap(),
                e["kind"].as_str().unwrap()
            )
        })
        .collect()
}

async fn last_probe_of(server: &TestServer, callee: &str, version: &str) -> Option<Value> {
    let (_, body) = server.get(&format!("/v1/callees/{callee}")).await;
    body["subjects"]
        .as_array()?
        .iter()
        .find(|s| s["protocol_version"] == version)?
        .get("last_probe")
        .cloned()
        .filter(|p| !p.is_null())
}

async fn a_new_version_is_noticed_probed_and_trusted_within_one_refresh(db: TestDb) {
    let agent = FakeAgent::start(FakeAgentConfig::default(), Behaviour::Conformant)
        .await
        .unwrap();
    let server = TestServer::start_with(scheduled(&db)).await;
    let callee = register(&server, &agent.origin(), json!({})).await;

    // Registration queued the 1.0 probe by itself.
    eventually("the registration probe", || async {
        last_probe_of(&server, &callee, "1.0")
            .await
            .is_some_and(|p| p["status"] == "finished")
    })
    .await;
    assert_eq!(gate(&server, &callee, "1.0").await, "lifecycle-trusted");
    let before = decision(&server, &callee, "caller_version=1.1").await;
    assert_eq!(before["authoritative"], false);
    assert_eq!(
        before["conditions"][1]["status"], "fail",
        "version-match: {before:#}"
    );

    // The card starts offering 1.1: the next refresh notices, the new subject starts
    // card-trusted, its probe is queued at once and promotes it.
    agent.set_versions(vec!["1.0", "1.1"]);
    eventually("the 1.1 probe", || async {
        last_probe_of(&server, &callee, "1.1")
            .await
            .is_some_and(|p| p["status"] == "finished")
    })
    .await;
    let kinds = ledger_kinds(&server, &callee).await;
    let appeared: Vec<&String> = kinds
        .iter()
        .filter(|k| *k == "1.1 version-appeared")
        .collect();
    assert_eq!(appeared.len(), 1, "{kinds:?}");
    let at = kinds
        .iter()
        .position(|k| k == "1.1 version-appeared")
        .unwrap();
    assert_eq!(
        kinds[at + 1..]
            .iter()
            .filter(|k| k.starts_with("1.1 "))
            .collect::<Vec<_>>(),
        ["1.1 probe-finished", "1.1 promoted"]
    );
    assert_eq!(gate(&server, &callee, "1.1").await, "lifecycle-trusted");
    let after = decision(&server, &callee, "caller_version=1.1&requires=streaming").await;
    assert_eq!(after["authoritative"], true, "{after:#}");

    // The queue shows the work done, and the scheduler's loop is visibly alive.
    let (_, jobs) = server.get("/v1/jobs?limit=200").await;
    let done: Vec<(&str, &str)> = jobs["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| (j["kind"].as_str().unwrap(), j["status"].as_str().unwrap()))
        .collect();
    assert!(
        done.contains(&("refresh", "done")) && done.contains(&("probe", "done")),
        "{done:?}"
    );
    let (_, status) = server.get("/v1/status").await;
    assert!(
        status["scheduler"]["refresh"]["last_tick_at"].is_string(),
        "{status:#}"
    );
    let (_, ready) = server.get("/readyz").await;
    assert!(ready["scheduler_last_tick_at"].is_string(), "{ready:#}");

    // A republish that moves the demoted subject's interfaces does not lift it.
    let report = json!({"protocol_version": "1.1", "trigger": "terminal-without-timestamp",
                        "evidence": {"observed": [{"state": "TASK_STATE_COMPLETED"}]}});
    let (status, body) = server
        .post(&format!("/v1/callees/{callee}/reports"), report)
        .await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(gate(&server, &callee, "1.1").await, "demoted");
    agent.republish_interfaces("tenant-2");
    eventually("the republish", || async {
        ledger_kinds(&server, &callee)
            .await
            .contains(&"1.1 card-republished".to_string())
    })
    .await;
    assert_eq!(gate(&server, &callee, "1.1").await, "demoted");
    assert_eq!(gate(&server, &callee, "1.0").await, "lifecycle-trusted");
    server.stop().await;
}

async fn reports_with_evidence_demote_and_others_are_refused(db: TestDb) {
    let agent = FakeAgent::start(FakeAgentConfig::default(), Behaviour::Conformant)
        .await
        .unwrap();
    let server = TestServer::start(db.target.clone()).await;
    let callee = register(&server, &agent.origin(), json!({})).await;
    let url = format!("/v1/callees/{callee}/reports");
    let duplicate = json!({"observed": [
        {"statusUpdate": {"taskId": "t", "contextId": "c", "status": {"state": "TASK_STATE_COMPLETED", "timestamp": "2026-12-02T10:00:00Z"}}},
        {"statusUpdate": {"taskId": "t", "contextId": "c", "status": {"state": "TASK_STATE_COMPLETED", "timestamp": "2026-12-02T10:00:01Z"}}}
    ]});

    // On a card-trusted subject a valid report is recorded without a gate move.
    let (status, recorded) = server.post(&url, json!({"protocol_version": "1.0", "trigger": "duplicate-terminal", "evidence": duplicate})).await;
    assert_eq!(status, 201, "{recorded}");
    assert_eq!(recorded["outcome"], "recorded");
    assert_eq!(recorded["class"], "terminal");
    assert_eq!(gate(&server, &callee, "1.0").await, "card-trusted");

    // Promote it with a real probe, then the same report demotes.
    let (_, run) = server
        .post(&format!("/v1/callees/{callee}/probes"), json!({}))
        .await;
    wait(&server, run["id"].as_str().unwrap()).await;
    assert_eq!(gate(&server, &callee, "1.0").await, "lifecycle-trusted");
    let (status, demoting) = server.post(&url, json!({"protocol_version": "1.0", "trigger": "duplicate-terminal", "evidence": duplicate})).await;
    assert_eq!(status, 201);
    assert_eq!(demoting["outcome"], "demoted");
    assert_eq!(demoting["reporter"], "admin-token");
    assert_eq!(gate(&server, &callee, "1.0").await, "demoted");
    let kinds = ledger_kinds(&server, &callee).await;
    assert_eq!(
        &kinds[kinds.len() - 2..],
        ["1.0 report-received", "1.0 demoted"]
    );

    // Evidence that does not show the violation is refused, with the reason, and not stored.
    let refused = [
        (
            json!({"protocol_version": "1.0", "trigger": "terminal-without-timestamp", "evidence": {"observed": [{"state": "TASK_STATE_COMPLETED", "timestamp": "2026-12-02T10:00:00Z"}]}}),
            "lacks status.timestamp",
        ),
        (
            json!({"protocol_version": "1.0", "trigger": "push-registration-failed", "evidence": {"attempts": [{"http_status": 500}]}}),
            "at least 2",
        ),
        (
            json!({"protocol_version": "1.0", "trigger": "history-not-incremented", "evidence": {}}),
            "`observed` array",
        ),
    ];
    for (body, reason) in refused {
        let (status, answer) = server.post(&url, body).await;
        assert_eq!(
            (status, error_code(&answer)),
            (400, "invalid_request"),
            "{answer}"
        );
        assert!(
            answer["error"]["message"]
                .as_str()
                .unwrap()
                .contains(reason),
            "{answer}"
        );
    }
    let (status, answer) = server
        .post(
            &url,
            json!({"protocol_version": "1.0", "trigger": "vibes", "evidence": {}}),
        )
        .await;
    assert_eq!((status, error_code(&answer)), (400, "invalid_body"));
    let (status, _) = server.post(&url, json!({"protocol_version": "2.0", "trigger": "duplicate-terminal", "evidence": duplicate})).await;
    assert_eq!(status, 404);

    let (_, list) = server.get(&url).await;
    let outcomes: Vec<&str> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(outcomes, ["demoted", "recorded"]);
    server.stop().await;
}

async fn sweeps_are_idempotent(db: TestDb) {
    let agents = CardServer::start().await;
    for n in 0..3 {
        agents.serve_signed_card(
            &format!("/a{n}.json"),
            &agents.card("A", &["1.0"], json!({})),
        );
    }
    let server = TestServer::start(db.target.clone()).await;
    for n in 0..3 {
        server.register(&agents.url(&format!("/a{n}.json"))).await;
    }
    server.stop().await;

    // A second app on the same database that never serves: its worker does not run, so what
    // the sweeps enqueue stays queued. Its re-probe sweep runs daily.
    let mut settings = test_settings(db.target.clone());
    settings.schedule.reprobe = schedule::Schedule::Cron("0 0 3 * * *".into());
    let app = App::build(settings).await.unwrap();
    let (services, sweeps) = (&app.services, &app.settings().schedule);
    assert_eq!(schedule::refresh_sweep(services, sweeps).await.unwrap(), 3);
    assert_eq!(
        schedule::refresh_sweep(services, sweeps).await.unwrap(),
        0,
        "already queued"
    );
    // Never-probed subjects are due for a probe; once queued, not again.
    let swept_at = chrono::Utc::now();
    assert_eq!(schedule::reprobe_sweep(services, sweeps).await.unwrap(), 3);
    assert_eq!(schedule::reprobe_sweep(services, sweeps).await.unwrap(), 0);
    // Spread over most of the time until the next sweep (80 % of it): the first due at once,
    // the others a third and two thirds of the way.
    let window = sweeps.reprobe.until_next(swept_at).unwrap().mul_f64(0.8);
    let mut due: Vec<_> = services
        .store
        .jobs(Some(cardgate::domain::job::JobStatus::Queued), None, 100)
        .await
        .unwrap()
        .into_iter()
        .filter(|j| j.kind == cardgate::domain::job::JobKind::Probe)
        .map(|j| (j.run_after - swept_at).to_std().unwrap_or_default())
        .collect();
    due.sort();
    assert_eq!(due.len(), 3);
    let second = Duration::from_secs(1);
    for (i, at) in due.iter().enumerate() {
        let expected = window.mul_f64(i as f64 / 3.0);
        assert!(
            at.abs_diff(expected) < second,
            "probe {i} due {at:?} after the sweep, expected {expected:?}"
        );
    }
    let stats = app
        .services
        .store
        .queue_stats(app.services.now())
        .await
        .unwrap();
    assert_eq!(stats.queued, 6);
}

async fn an_unreachable_callee_backs_off_and_recovers(db: TestDb) {
    let agent = CardServer::start().await;
    let card = agent.serve_signed_card(
        "/.well-known/agent-card.json",
        &agent.card("A", &["1.0"], json!({})),
    );
    let mut settings = scheduled(&db);
    settings.cards.probe_on_change = false;
    settings.cards.backoff = cardgate::domain::callee::Backoff {
        base: Duration::from_secs(1),
        cap: Duration::from_secs(8),
    };
    let server = TestServer::start_with(settings).await;
    let callee = server.register(&agent.origin()).await["id"]
        .as_str()
        .unwrap()
        .to_string();

    agent.set("/.well-known/agent-card.json", Reply::Status(503));
    // A sweep runs every second; each failure puts the next fetch further off (1, 2, 4 s, at
    // most 8), computed from the time of the failed fetch: checked on the record itself, not
    // by counting fetches against the wall clock.
    let detail = eventually_value("three failed fetches", || async {
        let (_, d) = server.get(&format!("/v1/callees/{callee}")).await;
        (d["last_fetch"]["failures"].as_i64() >= Some(3)).then_some(d)
    })
    .await;
    assert_eq!(detail["last_fetch"]["status"], "failed");
    let failures = detail["last_fetch"]["failures"].as_i64().unwrap();
    let at =
        chrono::DateTime::parse_from_rfc3339(detail["last_fetch"]["at"].as_str().unwrap()).unwrap();
    let next =
        chrono::DateTime::parse_from_rfc3339(detail["last_fetch"]["next_at"].as_str().unwrap())
            .unwrap();
    let expected = (1i64 << (failures - 1)).min(8);
    assert_eq!((next - at).num_seconds(), expected, "{detail:#}");
    assert_eq!(detail["subjects"][0]["gate_state"], "untrusted");
    let kinds = ledger_kinds(&server, &callee).await;
    assert_eq!(
        kinds
            .iter()
            .filter(|k| k.ends_with("card-untrusted"))
            .count(),
        1,
        "recorded once, not spammed: {kinds:?}"
    );

    // It comes back: the next due refresh restores trust and resets the failures.
    agent.set_json("/.well-known/agent-card.json", &card);
    eventually("recovery", || async {
        let (_, d) = server.get(&format!("/v1/callees/{callee}")).await;
        d["last_fetch"]["failures"] == 0 && d["subjects"][0]["gate_state"] == "card-trusted"
    })
    .await;
    assert!(
        ledger_kinds(&server, &callee)
            .await
            .contains(&"1.0 card-trust-restored".to_string())
    );
    server.stop().await;
}

/// `off` turns one sweep off and leaves the others running: the re-probe sweep ticks every
/// second while the refresh sweep, off, never does (and a registered callee is never
/// refreshed by it).
async fn a_sweep_that_is_off_never_ticks(db: TestDb) {
    let agent = FakeAgent::start(FakeAgentConfig::default(), Behaviour::Conformant)
        .await
        .unwrap();
    let mut settings = test_settings(db.target.clone());
    settings.schedule.refresh = schedule::Schedule::Off;
    settings.schedule.reprobe = "*/1 * * * * *".parse().unwrap();
    let server = TestServer::start_with(settings).await;
    let callee = register(&server, &agent.origin(), json!({})).await;
    let (first, _) = eventually_value("a re-probe tick", || reprobe_tick(&server)).await;
    let (_, status) = eventually_value("a second re-probe tick", || async {
        reprobe_tick(&server)
            .await
            .filter(|(tick, _)| *tick != first)
    })
    .await;
    assert_eq!(
        status["scheduler"]["refresh"]["schedule"], "off",
        "{status:#}"
    );
    assert_eq!(
        status["scheduler"]["refresh"]["last_tick_at"],
        Value::Null,
        "{status:#}"
    );
    let (_, jobs) = server.get("/v1/jobs?limit=200").await;
    let refreshes: Vec<&Value> = jobs["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|j| j["kind"] == "refresh" && j["callee_id"] == callee.as_str())
        .collect();
    assert!(refreshes.is_empty(), "{refreshes:#?}");
    server.stop().await;
}

/// The re-probe sweep's last tick in `/v1/status`, with the whole status.
async fn reprobe_tick(server: &TestServer) -> Option<(String, Value)> {
    let (_, status) = server.get("/v1/status").await;
    let tick = status["scheduler"]["reprobe"]["last_tick_at"]
        .as_str()?
        .to_string();
    Some((tick, status))
}

/// The re-probe sweep, read a page at a time: a demoted subject is due at once, a freshly
/// probed one only once its probe is older than `stale_after`, and a subject with a probe
/// already queued is not queued twice.
async fn the_reprobe_sweep_queues_the_demoted_and_the_stale_only(db: TestDb) {
    let server = TestServer::start(db.target.clone()).await;
    let fresh = FakeAgent::start(FakeAgentConfig::default(), Behaviour::Conformant)
        .await
        .unwrap();
    let falling = FakeAgent::start(FakeAgentConfig::default(), Behaviour::Conformant)
        .await
        .unwrap();
    let promoted = register(&server, &fresh.origin(), json!({})).await;
    let demoted = register(&server, &falling.origin(), json!({})).await;
    crate::probes::probe(&server, &promoted, "1.0").await;
    crate::probes::probe(&server, &demoted, "1.0").await;
    falling.set_behaviour(Behaviour::NoTerminalTimestamp);
    crate::probes::probe(&server, &demoted, "1.0").await;
    assert_eq!(gate(&server, &demoted, "1.0").await, "demoted");
    server.stop().await;

    // Apps that never serve: what a sweep queues stays queued.
    let reasons = |app: &App, callee: &str| {
        let store = app.services.store.clone();
        let callee = cardgate::domain::ids::CalleeId(callee.parse().unwrap());
        async move {
            cardgate::service::probe::page(&store, callee, None, 10)
                .await
                .unwrap()
                .into_iter()
                .map(|r| r.reason)
                .collect::<Vec<_>>()
        }
    };
    let mut settings = test_settings(db.target.clone());
    settings.schedule.stale_after = Duration::from_secs(86_400);
    let app = App::build(settings).await.unwrap();
    let (services, sweeps) = (&app.services, &app.settings().schedule);
    assert_eq!(schedule::reprobe_sweep(services, sweeps).await.unwrap(), 1);
    assert_eq!(reasons(&app, &demoted).await[0], "schedule: demoted");
    assert_ne!(reasons(&app, &promoted).await[0], "schedule: stale");

    let mut settings = test_settings(db.target.clone());
    settings.schedule.stale_after = Duration::ZERO;
    let app = App::build(settings).await.unwrap();
    let (services, sweeps) = (&app.services, &app.settings().schedule);
    assert_eq!(
        schedule::reprobe_sweep(services, sweeps).await.unwrap(),
        1,
        "the fresh one is stale now; the demoted one is already queued"
    );
    assert_eq!(reasons(&app, &promoted).await[0], "schedule: stale");
}

/// Replicas' schedulers fire on the same tick; the first to claim a sweep runs it, the other
/// leaves it. Each sweep is claimed on its own.
async fn one_replica_claims_each_sweep_tick(db: TestDb) {
    let first = App::build(test_settings(db.target.clone())).await.unwrap();
    let second = App::build(test_settings(db.target.clone())).await.unwrap();
    // A tick is a whole second: start early in one, so these claims share it.
    let into_second = u64::from(chrono::Utc::now().timestamp_subsec_millis());
    if into_second > 300 {
        tokio::time::sleep(Duration::from_millis(1_020 - into_second)).await;
    }
    assert!(schedule::claim(&first.services, "reprobe").await.unwrap());
    assert!(!schedule::claim(&second.services, "reprobe").await.unwrap());
    assert!(!schedule::claim(&first.services, "reprobe").await.unwrap());
    assert!(schedule::claim(&second.services, "refresh").await.unwrap());
    // The next tick (a later whole second) is claimed again.
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    assert!(schedule::claim(&second.services, "reprobe").await.unwrap());
    assert!(!schedule::claim(&first.services, "reprobe").await.unwrap());
}
