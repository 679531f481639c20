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

/// The operator UI as a person sees it: headless Chromium loads `/docs/`, runs Swagger UI's
/// JavaScript against the served document, and the rendered page lists the operations (not
/// just the HTML shell the server sent). CI installs Debian's `chromium` and makes this
/// mandatory (`CARDGATE_REQUIRE_BROWSER=1`).
#[tokio::test]
async fn the_operator_ui_renders_every_operation_in_a_real_browser() {
    let Some(browser) = crate::support::chromium("the browser check of /docs") else {
        return;
    };
    let db = TestDb::sqlite().await;
    let server = TestServer::start(db.target.clone()).await;
    let profile = tempfile::tempdir().unwrap();
    let out = tokio::process::Command::new(&browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            &format!("--user-data-dir={}", profile.path().display()),
            // Long enough for the bundle to fetch /openapi.json and render; virtual time ends
            // as soon as the page is idle.
            "--virtual-time-budget=20000",
            "--dump-dom",
            &server.url("/docs/"),
        ])
        .kill_on_drop(true)
        .output()
        .await
        .expect("chromium runs");
    let dom = String::from_utf8_lossy(&out.stdout);
    assert!(
        dom.contains("opblock"),
        "Swagger UI rendered no operations:\n{}\n{}",
        &dom[..dom.len().min(2000)],
        String::from_utf8_lossy(&out.stderr)
    );
    // Every operation of the document is on the page, under its path.
    let doc = cardgate::http::openapi();
    for path in doc.paths.paths.keys() {
        assert!(
            dom.contains(&format!("data-path=\"{path}\"")),
            "{path} is not rendered"
        );
    }
    assert!(dom.contains("cardgate"), "the title is rendered");
    server.stop().await;
}
