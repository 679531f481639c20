//! The rulebook (issue 45): every verdict names the rules that judged it; an operator's policy
//! can make a rule block, never unblock one the trust model requires; when the rules change,
//! stored evidence is judged again at start (nothing is probed for it), the what-if shows the
//! same moves beforehand and writes nothing, the ledger says why, and nothing is promoted
//! without a fresh probe.

use std::sync::Arc;
use std::time::Duration;

use cardgate::app::Settings;
use cardgate::domain::rulebook::Rulebook;
use cardgate::fake_agent::{Behaviour, FakeAgent, FakeAgentConfig};
use serde_json::{Value, json};

use crate::probes::{decision, events, finding, gate, probe, register};
use crate::support::{ADMIN_TOKEN, TestDb, TestServer, on_both_backends, test_settings};

/// Makes a SHOULD finding (where the push token travels) block promotion.
const POLICY: &str = "[rules.\"PUSH-TOKEN\"]\nblocks = true\n";

fn settings(db: &TestDb, policy: Option<&str>) -> Settings {
    let mut settings = test_settings(db.target.clone());
    if let Some(policy) = policy {
        let policy = cardgate::service::policy::parse(policy).unwrap();
        settings.probe.rulebook = Arc::new(Rulebook::new(policy));
    }
    settings
}

async fn post_toml(server: &TestServer, path: &str, body: &str) -> (u16, Value) {
    let response = crate::support::client_with(ADMIN_TOKEN)
        .post(server.url(path))
        .header("content-type", "text/plain")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    crate::support::json_of(response).await
}

/// The callee's ledger events of `kind`, in order.
async fn ledger(server: &TestServer, callee: &str, kind: &str) -> Vec<Value> {
    let (status, page) = server
        .get(&format!("/v1/ledger?callee_id={callee}&limit=200"))
        .await;
    assert_eq!(status, 200, "{page}");
    page["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == kind)
        .cloned()
        .collect()
}

/// Waits (the re-judgement at start runs in the background) until the callee has `n` events
/// of `kind`.
async fn until(server: &TestServer, callee: &str, kind: &str, n: usize) -> Vec<Value> {
    for _ in 0..200 {
        let found = ledger(server, callee, kind).await;
        if found.len() >= n {
            return found;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{callee}: fewer than {n} `{kind}` events after 10 s");
}

on_both_backends!(a_policy_moves_subjects_from_stored_evidence_as_the_what_if_said,);

async fn a_policy_moves_subjects_from_stored_evidence_as_the_what_if_said(db: TestDb) {
    // Conformant, but its push token travels in a header of its own: a SHOULD finding.
    let agent = FakeAgent::start(FakeAgentConfig::default(), Behaviour::TokenInOwnHeader)
        .await
        .unwrap();
    let server = TestServer::start_with(settings(&db, None)).await;
    let (_, book) = server.get("/v1/rulebook").await;
    let plain = book["version"].as_str().unwrap().to_string();
    let callee = register(&server, &agent.origin(), json!({})).await;
    let run = probe(&server, &callee, "1.0").await;
    let run_id = run["id"].as_str().unwrap().to_string();
    assert_eq!(events(&run), ["probe-finished", "promoted"], "{run:#}");
    assert_eq!(finding(&run, "PUSH-TOKEN")["status"], "fail");
    // The verdict and its events name the rulebook.
    assert_eq!(run["verdict"]["rulebook"], plain.as_str());
    for e in run["ledger_events"].as_array().unwrap() {
        assert_eq!(e["data"]["rulebook"], plain.as_str(), "{e:#}");
    }

    let answer = decision(&server, &callee, "caller_version=1.0").await;
    assert_eq!(answer["evidence"]["rulebook"], plain.as_str(), "{answer:#}");

    // Before anything changes: what would the policy do?
    let (status, what_if) = post_toml(&server, "/v1/rulebook/what-if", POLICY).await;
    assert_eq!(status, 200, "{what_if:#}");
    assert_eq!(what_if["applied"], false);
    let moves = what_if["moves"].as_array().unwrap();
    assert_eq!(moves.len(), 1, "{what_if:#}");
    assert_eq!(moves[0]["callee_id"], callee.as_str());
    assert_eq!(moves[0]["probe_run_id"], run_id.as_str());
    assert_eq!(moves[0]["demotes"], "policy");
    assert_eq!(moves[0]["passed_now"], false);
    assert!(
        moves[0]["card_url"]
            .as_str()
            .unwrap()
            .starts_with(&agent.origin())
    );
    let policy_version = what_if["version"].as_str().unwrap().to_string();
    assert_ne!(policy_version, plain);
    // A what-if writes nothing, and one that unblocks what the trust model requires is refused.
    assert_eq!(gate(&server, &callee, "1.0").await, "lifecycle-trusted");
    let (status, refused) = post_toml(
        &server,
        "/v1/rulebook/what-if",
        "[rules.\"LC-TIMESTAMPS\"]\nblocks = false\n",
    )
    .await;
    assert_eq!(status, 400, "{refused:#}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("cannot be unblocked"),
        "{refused:#}"
    );
    let (status, empty) = post_toml(&server, "/v1/rulebook/what-if", " \n").await;
    assert_eq!(
        (status, &empty["error"]["code"]),
        (400, &json!("invalid_policy"))
    );
    server.stop().await;

    // The same plan from the command line, where `serve` runs: it writes nothing either.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("policy.toml");
    std::fs::write(&file, POLICY).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_cardgate"))
        .args(["rejudge", "--dry-run", "--policy"])
        .arg(&file)
        .env("DATABASE_URL", db.url())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("1 subject(s) would move"), "{stdout}");
    assert!(
        stdout.contains(&callee) && stdout.contains(&run_id),
        "{stdout}"
    );
    assert!(stdout.contains("demoted (policy)"), "{stdout}");

    // Restart under the policy, as two replicas on the one database: the subject moves as
    // the what-if said, once, without a probe.
    let (server, replica) = tokio::join!(
        TestServer::start_with(settings(&db, Some(POLICY))),
        TestServer::start_with(settings(&db, Some(POLICY)))
    );
    let (_, book) = server.get("/v1/rulebook").await;
    assert_eq!(book["version"], policy_version.as_str());
    let token = book["rules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["code"] == "PUSH-TOKEN")
        .unwrap();
    assert_eq!(
        (&token["blocks"], &token["blocks_by"]),
        (&json!(true), &json!("policy"))
    );
    let rejudged = until(&server, &callee, "rejudged", 1).await;
    let data = &rejudged[0]["data"];
    assert_eq!(data["probe_run_id"], run_id.as_str());
    assert_eq!(data["from_rulebook"], plain.as_str());
    assert_eq!(data["to_rulebook"], policy_version.as_str());
    assert_eq!(
        (&data["passed_before"], &data["passed_now"]),
        (&json!(true), &json!(false))
    );
    let demoted = until(&server, &callee, "demoted", 1).await;
    let demotion = &demoted[0]["data"];
    assert_eq!(demotion["class"], "policy");
    assert_eq!(demotion["probe_run_id"], run_id.as_str());
    let reason = demotion["reason"].as_str().unwrap();
    assert!(
        reason.contains(&plain) && reason.contains(&policy_version),
        "{reason}"
    );
    assert!(reason.contains("PUSH-TOKEN"), "{reason}");
    assert_eq!(gate(&server, &callee, "1.0").await, "demoted");
    let (_, runs) = server.get(&format!("/v1/callees/{callee}/probes")).await;
    assert_eq!(
        runs["items"].as_array().unwrap().len(),
        1,
        "nothing was probed"
    );
    replica.stop().await;
    assert_eq!(ledger(&server, &callee, "rejudged").await.len(), 1);
    assert_eq!(ledger(&server, &callee, "demoted").await.len(), 1);
    server.stop().await;

    // Restart under the same policy: nothing is judged twice.
    let server = TestServer::start_with(settings(&db, Some(POLICY))).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(ledger(&server, &callee, "rejudged").await.len(), 1);
    server.stop().await;

    // Without the policy, the evidence passes again: a fresh probe is queued, and only that
    // probe promotes.
    let server = TestServer::start_with(settings(&db, None)).await;
    let rejudged = until(&server, &callee, "rejudged", 2).await;
    assert_eq!(rejudged[1]["data"]["passed_now"], true);
    let promoted = until(&server, &callee, "promoted", 2).await;
    assert!(promoted[1]["seq"].as_i64() > rejudged[1]["seq"].as_i64());
    assert_ne!(
        promoted[1]["data"]["probe_run_id"],
        run_id.as_str(),
        "promoted by the fresh probe, never by the re-judgement"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cardgate_policy_check_validates_a_file_without_the_service() {
    let dir = tempfile::tempdir().unwrap();
    let check = |text: &str| {
        let file = dir.path().join("policy.toml");
        std::fs::write(&file, text).unwrap();
        std::process::Command::new(env!("CARGO_BIN_EXE_cardgate"))
            .args(["policy", "check"])
            .arg(&file)
            .output()
            .unwrap()
    };
    let ok = check(POLICY);
    let stdout = String::from_utf8_lossy(&ok.stdout);
    assert_eq!(ok.status.code(), Some(0), "{stdout}");
    assert!(stdout.contains("blocks by policy: PUSH-TOKEN"), "{stdout}");
    assert!(
        stdout.contains(Rulebook::new(cardgate::service::policy::parse(POLICY).unwrap()).version())
    );
    let refused = check("[rules.\"LC-TIMESTAMPS\"]\nblocks = false\n");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("LC-TIMESTAMPS cannot be unblocked"),
        "{stderr}"
    );
}
