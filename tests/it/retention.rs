//! Retention (issue 30): transcripts of finished runs past their subject's newest are pruned,
//! except every run the ledger cites as evidence (a promotion or a demotion it caused); a
//! pruned run keeps its verdict, findings and transitions and says when its transcript went.
//! Card snapshots past their callee's newest lose their raw bytes the same way, except every
//! snapshot the ledger cites as the card a subject started from or whose trust changed.

use cardgate::app::App;
use cardgate::fake_agent::{Behaviour, FakeAgent, FakeAgentConfig};
use serde_json::{Value, json};

use crate::probes::{probe, register};
use crate::support::{TestDb, TestServer, on_both_backends, test_settings};

on_both_backends!(
    pruning_keeps_every_transcript_the_ledger_cites,
    pruning_keeps_every_snapshot_the_ledger_cites,
);

/// The ledger events a run appended, by kind.
fn kinds(run: &Value) -> Vec<&str> {
    run["ledger_events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect()
}

async fn pruning_keeps_every_transcript_the_ledger_cites(db: TestDb) {
    let agent = FakeAgent::start(FakeAgentConfig::default(), Behaviour::Conformant)
        .await
        .unwrap();
    let server = TestServer::start(db.target.clone()).await;
    let callee = register(&server, &agent.origin(), json!({})).await;
    // Promoted (cited), passed, passed, demoted (cited), passed, passed: six runs.
    let mut runs = Vec::new();
    for behaviour in [
        Behaviour::Conformant,
        Behaviour::Conformant,
        Behaviour::Conformant,
        Behaviour::NoTerminalTimestamp,
        Behaviour::NoTerminalTimestamp,
        Behaviour::NoTerminalTimestamp,
    ] {
        agent.set_behaviour(behaviour);
        let run = probe(&server, &callee, "1.0").await;
        assert_eq!(run["status"], "finished", "{run:#}");
        runs.push(run["id"].as_str().unwrap().to_string());
    }
    let get = |id: &str| {
        let path = format!("/v1/probes/{id}");
        let server = &server;
        async move { server.get(&path).await.1 }
    };
    let before: Vec<Value> = futures::future::join_all(runs.iter().map(|id| get(id))).await;
    assert!(
        kinds(&before[0]).contains(&"promoted"),
        "{:?}",
        kinds(&before[0])
    );
    assert!(
        kinds(&before[3]).contains(&"demoted"),
        "{:?}",
        kinds(&before[3])
    );
    for run in &before {
        assert!(!run["exchanges"].as_array().unwrap().is_empty());
        assert_eq!(run["transcript_pruned_at"], Value::Null);
    }

    // Keep the newest two per subject; one pass (as each refresh sweep makes).
    let app = App::build(test_settings(db.target.clone())).await.unwrap();
    let pruned = cardgate::service::retention::prune(&app.services, 2, 1_000)
        .await
        .unwrap();
    assert_eq!((pruned.examined, pruned.dropped), (4, 2), "{pruned:?}");
    // Nothing is left to prune: a second pass finds the cited runs and drops nothing.
    let again = cardgate::service::retention::prune(&app.services, 2, 1_000)
        .await
        .unwrap();
    assert_eq!((again.examined, again.dropped), (2, 0), "{again:?}");

    let after: Vec<Value> = futures::future::join_all(runs.iter().map(|id| get(id))).await;
    // Cited (the promotion, the demotion) or among the newest two: kept whole.
    for i in [0, 3, 4, 5] {
        assert_eq!(after[i], before[i], "run {i} is untouched");
    }
    // The rest lost their exchanges and nothing else.
    for i in [1, 2] {
        let (was, is) = (&before[i], &after[i]);
        assert_eq!(is["exchanges"], json!([]), "run {i}");
        assert!(is["transcript_pruned_at"].is_string(), "run {i}: {is:#}");
        for kept in [
            "verdict",
            "findings",
            "transitions",
            "ledger_events",
            "capabilities",
        ] {
            assert_eq!(is[kept], was[kept], "run {i}: {kept}");
        }
    }
    // The ledger itself is whole and verifies.
    let (status, verified) = server.get("/v1/ledger/verify").await;
    assert_eq!(status, 200, "{verified}");
    assert_eq!(verified["ok"], true, "{verified:#}");
    server.stop().await;
}

async fn pruning_keeps_every_snapshot_the_ledger_cites(db: TestDb) {
    let agent = FakeAgent::start(FakeAgentConfig::default(), Behaviour::Conformant)
        .await
        .unwrap();
    let server = TestServer::start(db.target.clone()).await;
    // The registration's snapshot starts the subject (`version-appeared` cites it). Four
    // changed cards follow (descriptions, interfaces moved to a tenant), each cited by a
    // `card-republished` at most, which moves no gate.
    let callee = register(&server, &agent.origin(), json!({})).await;
    for change in 0..4 {
        match change {
            1 => agent.republish_interfaces("t1"),
            _ => agent.republish(&format!("description {change}")),
        }
        let (status, body) = server
            .post(&format!("/v1/callees/{callee}/refresh"), json!({}))
            .await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["status"], "fetched", "{body:#}");
        let kinds: Vec<&str> = body["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["kind"].as_str().unwrap())
            .collect();
        // Cited, if at all, by an event that moves no gate.
        assert!(kinds.iter().all(|k| *k == "card-republished"), "{body:#}");
    }
    let (_, page) = server.get(&format!("/v1/callees/{callee}/cards")).await;
    // Newest first: the registration's is last.
    let ids: Vec<String> = page["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(ids.len(), 5, "{page:#}");
    let get = |id: &str| {
        let path = format!("/v1/callees/{callee}/cards/{id}");
        let server = &server;
        async move { server.get(&path).await.1 }
    };
    let before: Vec<Value> = futures::future::join_all(ids.iter().map(|id| get(id))).await;
    for snapshot in &before {
        assert!(snapshot["raw_text"].is_string(), "{snapshot:#}");
        assert_eq!(snapshot["raw_pruned_at"], Value::Null);
    }

    // Keep the newest two per callee; one pass (as each refresh sweep makes).
    let app = App::build(test_settings(db.target.clone())).await.unwrap();
    let pruned = cardgate::service::retention::prune_snapshots(&app.services, 2, 1_000)
        .await
        .unwrap();
    assert_eq!((pruned.examined, pruned.dropped), (3, 2), "{pruned:?}");
    let again = cardgate::service::retention::prune_snapshots(&app.services, 2, 1_000)
        .await
        .unwrap();
    assert_eq!((again.examined, again.dropped), (1, 0), "{again:?}");

    let after: Vec<Value> = futures::future::join_all(ids.iter().map(|id| get(id))).await;
    // The newest two, and the registration's (cited): whole.
    for i in [0, 1, 4] {
        assert_eq!(after[i], before[i], "snapshot {i} is untouched");
    }
    // The republished ones in between lost their bytes and nothing else.
    for i in [2, 3] {
        let (was, is) = (&before[i], &after[i]);
        assert!(is["raw_pruned_at"].is_string(), "snapshot {i}: {is:#}");
        assert_eq!(is["raw_text"], Value::Null, "snapshot {i}");
        assert_eq!(is["raw_base64"], "", "snapshot {i}");
        // The card parsed from them goes too.
        assert_eq!(is["card"], Value::Null, "snapshot {i}");
        assert!(was["card"].is_object(), "snapshot {i}");
        for kept in [
            "sha256",
            "fetched_at",
            "url",
            "trusted",
            "problem",
            "signature",
        ] {
            assert_eq!(is[kept], was[kept], "snapshot {i}: {kept}");
        }
    }
    // The listing says so too, and the ledger is whole.
    let (_, page) = server.get(&format!("/v1/callees/{callee}/cards")).await;
    let listed: Vec<bool> = page["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["raw_pruned_at"].is_string())
        .collect();
    assert_eq!(listed, vec![false, false, true, true, false]);
    let (status, verified) = server.get("/v1/ledger/verify").await;
    assert_eq!(status, 200, "{verified}");
    assert_eq!(verified["ok"], true, "{verified:#}");
    // A refresh after pruning still compares against the newest snapshot: unchanged.
    let (status, body) = server
        .post(&format!("/v1/callees/{callee}/refresh"), json!({}))
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["status"], "unchanged", "{body:#}");
    server.stop().await;
}
