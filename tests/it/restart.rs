//! A restart on the same SQLite file keeps everything.

use cardgate::storage::DatabaseTarget;
use serde_json::json;

use crate::support::TestServer;
use crate::support::cards::CardServer;

#[tokio::test]
async fn restart_on_the_same_sqlite_file_keeps_callees_and_ledger() {
    let dir = tempfile::tempdir().unwrap();
    let target = DatabaseTarget::Sqlite(dir.path().join("nested/dir/cardgate.db"));
    let agents = CardServer::start().await;
    agents.serve_signed_card(
        "/.well-known/agent-card.json",
        &agents.card("A", &["1.0", "0.3"], json!({})),
    );

    let server = TestServer::start(target.clone()).await;
    let created = server.register(&agents.origin()).await;
    let id = created["id"].as_str().unwrap().to_string();
    server.stop().await;

    let server = TestServer::start(target).await;
    let (status, fetched) = server.get(&format!("/v1/callees/{id}")).await;
    assert_eq!(status, 200);
    assert_eq!(fetched, created);
    assert_eq!(fetched["subjects"].as_array().unwrap().len(), 2);
    let (_, ledger) = server.get("/v1/ledger").await;
    assert_eq!(ledger["items"].as_array().unwrap().len(), 2);
    let (_, verify) = server.get("/v1/ledger/verify").await;
    assert_eq!(verify["ok"], true);
    assert_eq!(verify["checked"], 2);
    server.stop().await;
}
