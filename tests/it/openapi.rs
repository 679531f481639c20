//! The committed OpenAPI document matches the code, and the UI is served from the binary.

use crate::support::{TestDb, TestServer, repo_path};

#[test]
fn committed_openapi_matches_the_code() {
    let generated = cardgate::http::openapi()
        .to_pretty_json()
        .expect("spec serializes")
        + "\n";
    let path = repo_path("openapi/openapi.json");
    if std::env::var_os("UPDATE_OPENAPI").is_some() {
        std::fs::write(&path, &generated).expect("write openapi/openapi.json");
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "openapi/openapi.json is stale: run `UPDATE_OPENAPI=1 cargo test openapi` and commit it"
    );
}

#[tokio::test]
async fn served_document_and_swagger_ui_work_offline() {
    let db = TestDb::sqlite().await;
    let server = TestServer::start(db.target.clone()).await;
    let (status, served) = server.get("/openapi.json").await;
    assert_eq!(status, 200);
    let expected: serde_json::Value =
        serde_json::from_str(&cardgate::http::openapi().to_json().unwrap()).unwrap();
    assert_eq!(served, expected);

    let page = server
        .client
        .get(server.url("/docs/"))
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    let html = page.text().await.unwrap();
    assert!(html.contains("swagger-ui"), "{html}");
    // The UI's assets come from the binary, not a CDN.
    let js = server
        .client
        .get(server.url("/docs/swagger-ui-bundle.js"))
        .send()
        .await
        .unwrap();
    assert_eq!(js.status(), 200);
    assert!(js.bytes().await.unwrap().len() > 100_000);
    let init = server
        .client
        .get(server.url("/docs/swagger-initializer.js"))
        .send()
        .await
        .unwrap();
    assert!(init.text().await.unwrap().contains("/openapi.json"));
    server.stop().await;
}
