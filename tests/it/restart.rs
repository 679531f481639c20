//! A restart on the same SQLite file keeps everything.

use cardgate::domain::capability::Capability;
use cardgate::domain::ids::{CalleeId, SnapshotId};
use cardgate::domain::ledger::{EventBody, NewEvent};
use cardgate::domain::time;
use cardgate::domain::version::ProtocolVersion;
use cardgate::storage::{DatabaseTarget, PoolSettings, Store};
use serde_json::json;

use crate::support::TestServer;

#[tokio::test]
async fn restart_on_the_same_sqlite_file_keeps_callees_and_ledger() {
    let dir = tempfile::tempdir().unwrap();
    let target = DatabaseTarget::Sqlite(dir.path().join("nested/dir/cardgate.db"));

    let server = TestServer::start(target.clone()).await;
    let (status, created) = server
        .post("/v1/callees", json!({"card_url": "https://agent.example"}))
        .await;
    assert_eq!(status, 201);
    let id: uuid::Uuid = created["id"].as_str().unwrap().parse().unwrap();
    server.stop().await;

    // Between runs, the ledger gains an event (as discovery would write it).
    let store = Store::connect(&target, &PoolSettings::default())
        .await
        .unwrap();
    let event = NewEvent {
        callee_id: CalleeId(id),
        protocol_version: ProtocolVersion::new(1, 0),
        body: EventBody::VersionAppeared {
            snapshot_id: SnapshotId::new(),
            advertised: vec![Capability::Streaming],
        },
        actor: "system".into(),
    };
    store.append(&[event], time::now()).await.unwrap();
    store.close().await;

    let server = TestServer::start(target).await;
    let (status, fetched) = server.get(&format!("/v1/callees/{id}")).await;
    assert_eq!(status, 200);
    assert_eq!(fetched["card_url"], "https://agent.example/");
    assert_eq!(fetched["subjects"][0]["protocol_version"], "1.0");
    assert_eq!(fetched["subjects"][0]["gate_state"], "card-trusted");
    let (_, ledger) = server.get("/v1/ledger").await;
    assert_eq!(ledger["events"].as_array().unwrap().len(), 1);
    let (_, verify) = server.get("/v1/ledger/verify").await;
    assert_eq!(verify["ok"], true);
    server.stop().await;
}
