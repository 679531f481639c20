//! The operator console: sign-in and sessions, read-only pages over a seeded registry, open
//! badges, and (in Debian's Chromium, tests/browser/console.mjs) every page as a person sees
//! it at desktop and phone widths, with accessibility checked by axe-core.

use std::time::Duration;

use cardgate::fake_agent::{Behaviour, FakeAgent, FakeAgentConfig};
use reqwest::StatusCode;
use reqwest::header::{CONTENT_TYPE, COOKIE, LOCATION, SET_COOKIE};
use serde_json::{Value, json};

use crate::probes::{events, probe, register};
use crate::support::{TestDb, TestServer, on_both_backends, repo_path, skip, test_settings};

on_both_backends!(
    signing_in_starts_a_session_that_ends_with_the_key_the_clock_or_sign_out,
    the_console_lists_filters_and_explains_and_changes_nothing,
    badges_are_open_cacheable_and_say_the_state_only,
);

/// A client that follows no redirect, so each 303 can be read.
fn browser() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

/// A form body, as a browser sends it.
fn form(pairs: &[(&str, &str)]) -> String {
    url::form_urlencoded::Serializer::new(String::new())
        .extend_pairs(pairs)
        .finish()
}

/// Creates an API key of `role` through the API; its secret.
async fn key(server: &TestServer, role: &str) -> (String, String) {
    let (status, body) = server
        .post(
            "/v1/keys",
            json!({"name": format!("{role}-console"), "role": role}),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    (
        body["key"].as_str().unwrap().to_string(),
        body["id"].as_str().unwrap().to_string(),
    )
}

/// Signs in through the form; the session cookie (`name=value`).
async fn sign_in(server: &TestServer, key: &str) -> String {
    let response = browser()
        .post(server.url("/ui/sign-in"))
        .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(form(&[("key", key), ("next", "/ui")]))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::SEE_OTHER);
    let cookie = response.headers()[SET_COOKIE].to_str().unwrap().to_string();
    cookie.split(';').next().unwrap().to_string()
}

async fn page(server: &TestServer, cookie: &str, path: &str) -> (StatusCode, String, String) {
    let response = browser()
        .get(server.url(path))
        .header(COOKIE, cookie)
        .send()
        .await
        .unwrap();
    let status = response.status();
    let location = response
        .headers()
        .get(LOCATION)
        .map(|l| l.to_str().unwrap().to_string())
        .unwrap_or_default();
    (status, location, response.text().await.unwrap())
}

async fn signing_in_starts_a_session_that_ends_with_the_key_the_clock_or_sign_out(db: TestDb) {
    let mut settings = test_settings(db.target.clone());
    settings.auth.console_session = Duration::from_secs(2);
    let server = TestServer::start_with(settings).await;
    let client = browser();

    // The root leads to the console, and the console to the sign-in form (and back).
    let root = client.get(server.url("/")).send().await.unwrap();
    assert_eq!(root.status(), StatusCode::SEE_OTHER);
    assert_eq!(root.headers()[LOCATION], "/ui");
    let (status, location, _) = page(&server, "", "/ui/callees/x?y=1").await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert_eq!(location, "/ui/sign-in?next=%2Fui%2Fcallees%2Fx%3Fy%3D1");
    let shown = client.get(server.url("/ui/sign-in")).send().await.unwrap();
    assert_eq!(shown.status(), 200);
    assert!(
        shown.headers()[CONTENT_TYPE]
            .to_str()
            .unwrap()
            .starts_with("text/html")
    );
    assert!(shown.text().await.unwrap().contains("name=\"key\""));

    // A wrong key: the form again, 401, no cookie.
    let refused = client
        .post(server.url("/ui/sign-in"))
        .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(form(&[("key", "cg_not-a-key")]))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), StatusCode::UNAUTHORIZED);
    assert!(refused.headers().get(SET_COOKIE).is_none());
    assert!(refused.text().await.unwrap().contains("not valid"));
    // Not a form at all: 400, as a page.
    let garbled = client
        .post(server.url("/ui/sign-in"))
        .header(CONTENT_TYPE, "application/json")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(garbled.status(), StatusCode::BAD_REQUEST);

    // A reader key signs in; the cookie holds a session id, never the key, and the server
    // keeps neither in the clear.
    let (reader, reader_id) = key(&server, "reader").await;
    let response = client
        .post(server.url("/ui/sign-in"))
        .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(form(&[
            ("key", reader.as_str()),
            ("next", "https://evil.example/"),
        ]))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::SEE_OTHER);
    assert_eq!(
        response.headers()[LOCATION],
        "/ui",
        "an outside `next` is not followed"
    );
    let set = response.headers()[SET_COOKIE].to_str().unwrap().to_string();
    for attribute in ["HttpOnly", "SameSite=Strict", "Path=/", "Max-Age=2"] {
        assert!(set.contains(attribute), "{set}");
    }
    assert!(!set.contains("Secure"), "plain HTTP: {set}");
    assert!(!set.contains(&reader));
    let cookie = set.split(';').next().unwrap().to_string();
    let session_id = cookie.split_once('=').unwrap().1.to_string();
    let clear = db
        .raw(&format!(
            "update console_sessions set key_hash = key_hash where id_hash = '{session_id}' \
             or key_hash = '{reader}' or id_hash like '%{reader}%'"
        ))
        .await
        .unwrap();
    assert_eq!(
        clear, 0,
        "no session row holds the id or the key in the clear"
    );
    assert_eq!(
        db.raw("update console_sessions set key_hash = key_hash")
            .await
            .unwrap(),
        1
    );

    let (status, _, html) = page(&server, &cookie, "/ui").await;
    assert_eq!(status, 200);
    assert!(
        html.contains("Signed in as key:reader-console (reader)"),
        "{html}"
    );

    // Revoking the key ends its sessions at their next request.
    let revoked = server
        .client
        .delete(server.url(&format!("/v1/keys/{reader_id}")))
        .send()
        .await
        .unwrap();
    assert!(revoked.status().is_success(), "{}", revoked.status());
    let (status, location, _) = page(&server, &cookie, "/ui").await;
    assert_eq!(
        (status, location.as_str()),
        (StatusCode::SEE_OTHER, "/ui/sign-in?next=%2Fui")
    );

    // A session lasts its time and no longer.
    let (other, _) = key(&server, "admin").await;
    let cookie = sign_in(&server, &other).await;
    assert_eq!(page(&server, &cookie, "/ui").await.0, 200);
    tokio::time::sleep(Duration::from_millis(2_200)).await;
    assert_eq!(page(&server, &cookie, "/ui").await.0, StatusCode::SEE_OTHER);

    // Signing out ends the session and clears the cookie.
    let cookie = sign_in(&server, &other).await;
    let out = client
        .post(server.url("/ui/sign-out"))
        .header(COOKIE, &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(out.status(), StatusCode::SEE_OTHER);
    assert!(
        out.headers()[SET_COOKIE]
            .to_str()
            .unwrap()
            .contains("Max-Age=0")
    );
    assert_eq!(page(&server, &cookie, "/ui").await.0, StatusCode::SEE_OTHER);
    // Sign-in and the expired sessions it swept are all that is left.
    server.stop().await;
}

/// Ids of a registry with one callee in each state a console user looks for.
struct Seeded {
    _agents: Vec<FakeAgent>,
    promoted: String,
    demoted: String,
    demoting_run: String,
    untrusted: String,
    untrusted_snapshot: String,
}

/// A registry with a promoted, a demoted (its terminal timestamps dropped) and an untrusted
/// (its card no longer verifies against the keys pinned for it) callee.
async fn seed(server: &TestServer) -> Seeded {
    let config = FakeAgentConfig {
        sign: true,
        ..FakeAgentConfig::default()
    };
    let good = FakeAgent::start(config.clone(), Behaviour::Conformant)
        .await
        .unwrap();
    let bad = FakeAgent::start(config.clone(), Behaviour::Conformant)
        .await
        .unwrap();
    let odd = FakeAgent::start(config, Behaviour::Conformant)
        .await
        .unwrap();
    let named = |origin: String, name: &'static str| async move {
        let (status, body) = server
            .post("/v1/callees", json!({"card_url": origin, "name": name}))
            .await;
        assert_eq!(status, 201, "{body}");
        body["id"].as_str().unwrap().to_string()
    };
    let promoted = named(good.origin(), "travel-planner").await;
    assert_eq!(
        events(&probe(server, &promoted, "1.0").await),
        ["probe-finished", "promoted"]
    );
    let demoted = named(bad.origin(), "invoice-reader").await;
    assert_eq!(
        events(&probe(server, &demoted, "1.0").await),
        ["probe-finished", "promoted"]
    );
    bad.set_behaviour(Behaviour::NoTerminalTimestamp);
    let run = probe(server, &demoted, "1.0").await;
    assert_eq!(events(&run), ["probe-finished", "demoted"]);
    let untrusted = named(odd.origin(), "weather-desk").await;
    // RFC 8037's example Ed25519 key: not the key the agent signs with.
    let (status, body) = server
        .put(
            &format!("/v1/callees/{untrusted}/trusted-keys"),
            json!({"trusted_keys": {"keys": [{"kty": "OKP", "crv": "Ed25519", "kid": "elsewhere",
                "x": "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}]}}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["status"], "untrusted", "{body}");
    let (_, cards) = server.get(&format!("/v1/callees/{untrusted}/cards")).await;
    assert!(cards["items"].as_array().unwrap().len() >= 2, "{cards}");
    Seeded {
        _agents: vec![good, bad, odd],
        promoted,
        demoted,
        demoting_run: run["id"].as_str().unwrap().to_string(),
        untrusted,
        untrusted_snapshot: cards["items"][0]["id"].as_str().unwrap().to_string(),
    }
}

/// What a subject page says a caller with the posture `label` is told.
fn told<'a>(html: &'a str, label: &str) -> &'a str {
    let section = &html[html.find(&format!("aria-label=\"{label}\"")).expect(label)..];
    let at = section.find("class=\"badge st-").unwrap();
    let rest = &section[at..];
    let text = &rest[rest.find('>').unwrap() + 1..];
    &text[..text.find('<').unwrap()]
}

/// Everything a registry holds that a console request might touch, read through the API.
async fn state(server: &TestServer) -> Value {
    let (_, status) = server.get("/v1/status").await;
    let (_, ledger) = server.get("/v1/ledger?limit=200").await;
    let (_, callees) = server.get("/v1/callees?limit=200").await;
    let (_, keys) = server.get("/v1/keys").await;
    json!({"counts": status["counts"], "queue": status["queue"], "ledger": ledger,
           "callees": callees, "keys": keys})
}

async fn the_console_lists_filters_and_explains_and_changes_nothing(db: TestDb) {
    let server = TestServer::start(db.target.clone()).await;
    let seeded = seed(&server).await;
    let (reader, _) = key(&server, "reader").await;
    let cookie = sign_in(&server, &reader).await;

    let before = state(&server).await;
    // The list: every callee, each subject's gate as a badge with its words.
    let (status, _, html) = page(&server, &cookie, "/ui").await;
    assert_eq!(status, 200);
    for (id, badge) in [
        (&seeded.promoted, "1.0 lifecycle-trusted"),
        (&seeded.demoted, "1.0 demoted"),
        (&seeded.untrusted, "1.0 untrusted"),
    ] {
        assert!(html.contains(&format!("data-callee=\"{id}\"")), "{id}");
        assert!(html.contains(badge), "{badge}");
    }
    // Filtering by gate state, and searching by URL.
    for (state, only) in [
        ("demoted", &seeded.demoted),
        ("untrusted", &seeded.untrusted),
        ("lifecycle-trusted", &seeded.promoted),
    ] {
        let (_, _, html) = page(&server, &cookie, &format!("/ui?state={state}")).await;
        assert_eq!(html.matches("data-callee=").count(), 1, "{state}");
        assert!(html.contains(&format!("data-callee=\"{only}\"")), "{state}");
    }
    let (_, body) = server
        .get(&format!("/v1/callees/{}", seeded.untrusted))
        .await;
    let url = body["card_url"].as_str().unwrap();
    let port = url::Url::parse(url).unwrap().port().unwrap().to_string();
    let (_, _, html) = page(&server, &cookie, &format!("/ui?q={port}")).await;
    assert_eq!(html.matches("data-callee=").count(), 1);
    assert!(html.contains(&seeded.untrusted));
    // LIKE's wildcards are searched for literally.
    let (_, _, html) = page(&server, &cookie, "/ui?q=%25").await;
    assert_eq!(html.matches("data-callee=").count(), 0);
    let (status, _, html) = page(&server, &cookie, "/ui?state=bogus").await;
    assert_eq!(status, 400);
    assert!(html.contains("not a gate state"));

    // A subject: its demotion with trigger and evidence, the decisions, the badge.
    let subject = format!("/ui/callees/{}/subjects/1.0", seeded.demoted);
    let (status, _, html) = page(&server, &cookie, &subject).await;
    assert_eq!(status, 200);
    assert!(html.contains("data-trigger=\"timestamp\""), "{html}");
    assert!(html.contains(&format!("/ui/probes/{}", seeded.demoting_run)));
    // A timestamp demotion binds callers who deduplicate by timestamp, not the others.
    assert_eq!(
        told(&html, "Deduplicating terminal events by timestamp"),
        "advisory"
    );
    assert_eq!(told(&html, "Not deduplicating"), "authoritative");
    assert!(html.contains(&format!("/badge/{}/1.0.svg", seeded.demoted)));
    // The promoted one is authoritative for a caller who deduplicates by timestamp.
    let (_, _, html) = page(
        &server,
        &cookie,
        &format!("/ui/callees/{}/subjects/1.0", seeded.promoted),
    )
    .await;
    assert_eq!(
        told(&html, "Deduplicating terminal events by timestamp"),
        "authoritative"
    );

    // Each subject says which rulebook judged it; the rulebook page lists every rule.
    let (_, book) = server.get("/v1/rulebook").await;
    let version = book["version"].as_str().unwrap();
    assert!(
        html.contains(&format!(
            "Judged under rulebook <span class=\"mono\" title=\"{version}\">{}",
            &version[..12]
        )),
        "{html}"
    );
    // Its track record: one cycle of three clean trials is too few to call, and the strip
    // links the run.
    assert!(html.contains("data-track-class=\"new\""), "{html}");
    assert!(html.contains("3 of 3 clean, in 1 runs"), "{html}");
    let strip = &html[html.find("<ol class=\"strip\"").unwrap()..];
    let strip = &strip[..strip.find("</ol>").unwrap()];
    assert_eq!(strip.matches("href=\"/ui/probes/").count(), 1, "{strip}");
    assert!(strip.contains("class=\"run st-pass\""), "{strip}");
    let (status, _, html) = page(&server, &cookie, "/ui/rulebook").await;
    assert_eq!(status, 200);
    assert!(html.contains(version), "{html}");
    for rule in book["rules"].as_array().unwrap() {
        let code = rule["code"].as_str().unwrap();
        assert!(html.contains(&format!("<tr id=\"{code}\">")), "{code}");
    }
    let row = &html[html.find("<tr id=\"LC-TIMESTAMPS\">").unwrap()..];
    let row = &row[..row.find("</tr>").unwrap()];
    assert!(row.contains("yes, by the trust model"), "{row}");
    let row = &html[html.find("<tr id=\"LC-CANCEL\">").unwrap()..];
    let row = &row[..row.find("</tr>").unwrap()];
    assert!(row.contains("no: reported only"), "{row}");

    // The probe run: the diagram, its marks and the findings.
    let (status, _, html) = page(
        &server,
        &cookie,
        &format!("/ui/probes/{}", seeded.demoting_run),
    )
    .await;
    assert_eq!(status, 200);
    assert!(html.contains("<svg class=\"seq\""));
    assert!(html.contains("class=\"arrow violation\""));
    assert!(html.contains("LC-TERMINAL-NO-TIMESTAMP"));
    // The card snapshot: its verdict and the comparison with the one before.
    let card = format!(
        "/ui/callees/{}/cards/{}",
        seeded.untrusted, seeded.untrusted_snapshot
    );
    let (status, _, html) = page(&server, &cookie, &card).await;
    assert_eq!(status, 200);
    assert!(html.contains("Compared with"), "{html}");
    let (status, _, _) = page(&server, &cookie, &format!("/ui/callees/{}", seeded.demoted)).await;
    assert_eq!(status, 200);

    // Unknown things are 404 pages, not errors.
    for missing in [
        "/ui/callees/not-a-uuid".to_string(),
        format!("/ui/callees/{}", uuid::Uuid::new_v4()),
        format!("/ui/callees/{}/subjects/9.9", seeded.demoted),
        format!("/ui/probes/{}", uuid::Uuid::new_v4()),
        format!(
            "/ui/callees/{}/cards/{}",
            seeded.demoted,
            uuid::Uuid::new_v4()
        ),
    ] {
        let (status, _, html) = page(&server, &cookie, &missing).await;
        assert_eq!(status, 404, "{missing}");
        assert!(html.contains("<!DOCTYPE html>"), "{missing}");
    }

    // No console route changes state: every page read again, and every other method tried
    // on each, leave the registry as it was.
    let paths = [
        "/ui".to_string(),
        format!("/ui/callees/{}", seeded.demoted),
        subject.clone(),
        format!("/ui/probes/{}", seeded.demoting_run),
        card.clone(),
        "/ui/rulebook".to_string(),
    ];
    for path in &paths {
        assert_eq!(page(&server, &cookie, path).await.0, 200, "{path}");
        for method in [
            reqwest::Method::POST,
            reqwest::Method::PUT,
            reqwest::Method::DELETE,
            reqwest::Method::PATCH,
        ] {
            let response = browser()
                .request(method.clone(), server.url(path))
                .header(COOKIE, &cookie)
                .send()
                .await
                .unwrap();
            assert_eq!(response.status(), 405, "{method} {path}");
        }
    }
    assert_eq!(
        state(&server).await,
        before,
        "a console request changed the registry"
    );
    // Pages carry headers that keep them from loading or being framed elsewhere.
    let response = browser()
        .get(server.url("/ui"))
        .header(COOKIE, &cookie)
        .send()
        .await
        .unwrap();
    let csp = response.headers()["content-security-policy"]
        .to_str()
        .unwrap();
    assert!(csp.contains("default-src 'none'") && csp.contains("frame-ancestors 'none'"));
    server.stop().await;
}

async fn badges_are_open_cacheable_and_say_the_state_only(db: TestDb) {
    let server = TestServer::start(db.target.clone()).await;
    let agent = FakeAgent::start(FakeAgentConfig::default(), Behaviour::Conformant)
        .await
        .unwrap();
    let callee = register(&server, &agent.origin(), json!({})).await;
    let client = browser();
    let url = server.url(&format!("/badge/{callee}/1.0.svg"));
    let first = client.get(&url).send().await.unwrap();
    assert_eq!(first.status(), 200);
    assert_eq!(first.headers()[CONTENT_TYPE], "image/svg+xml");
    assert!(
        first.headers()["cache-control"]
            .to_str()
            .unwrap()
            .starts_with("public")
    );
    let etag = first.headers()["etag"].clone();
    let svg = first.text().await.unwrap();
    assert!(
        svg.contains(">card-trusted<") && svg.starts_with("<svg"),
        "{svg}"
    );
    assert!(!svg.contains(&agent.origin()), "a badge names no detail");
    let again = client
        .get(&url)
        .header("if-none-match", etag.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 304);

    // Promotion changes the badge, and its tag.
    assert_eq!(
        events(&probe(&server, &callee, "1.0").await),
        ["probe-finished", "promoted"]
    );
    let promoted = client
        .get(&url)
        .header("if-none-match", etag)
        .send()
        .await
        .unwrap();
    assert_eq!(promoted.status(), 200);
    assert!(
        promoted
            .text()
            .await
            .unwrap()
            .contains(">lifecycle-trusted<")
    );

    for missing in [
        format!("/badge/{callee}/1.0.png"),
        format!("/badge/{callee}/9.9.svg"),
        format!("/badge/{}/1.0.svg", uuid::Uuid::new_v4()),
        "/badge/nope/1.0.svg".to_string(),
    ] {
        let response = client.get(server.url(&missing)).send().await.unwrap();
        assert_eq!(response.status(), 404, "{missing}");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"]["code"], "not_found", "{missing}");
    }
    server.stop().await;
}

/// The console in a real browser: tests/browser/console.mjs drives Debian's Chromium with
/// playwright-core (no browser download) through every page, at 1280 and 360 px and in the
/// dark scheme, with
/// JavaScript off, reading the DOM for what each must show and running axe-core in each. The
/// screenshots land in `CARDGATE_CONSOLE_SHOTS` (default: a temporary directory).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_console_page_shows_what_it_must_in_a_real_browser() {
    let Some(chromium) = crate::support::chromium("the console's browser checks") else {
        return;
    };
    let script_dir = repo_path("tests/browser");
    if !script_dir.join("node_modules/playwright-core").exists() {
        skip(
            "the console's browser checks",
            "tests/browser has no node_modules (npm ci there)",
            "CARDGATE_REQUIRE_BROWSER",
        );
        return;
    }
    let db = TestDb::sqlite().await;
    let server = TestServer::start(db.target.clone()).await;
    let seeded = seed(&server).await;
    let (reader, _) = key(&server, "reader").await;
    let shots_dir = tempfile::tempdir().unwrap();
    let shots = std::env::var_os("CARDGATE_CONSOLE_SHOTS")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| shots_dir.path().to_path_buf());
    let node = std::env::var_os("CARDGATE_TEST_NODE").unwrap_or_else(|| "node".into());
    let out = tokio::process::Command::new(node)
        .arg(script_dir.join("console.mjs"))
        .current_dir(&script_dir)
        .env("CONSOLE_BASE", server.url(""))
        .env("CONSOLE_KEY", &reader)
        .env(
            "CONSOLE_SEED",
            json!({
                "demoted": seeded.demoted,
                "demoting_run": seeded.demoting_run,
                "untrusted": seeded.untrusted,
                "untrusted_snapshot": seeded.untrusted_snapshot,
            })
            .to_string(),
        )
        .env("CONSOLE_SHOTS", &shots)
        .env("CHROMIUM", &chromium)
        .kill_on_drop(true)
        .output()
        .await
        .expect("node runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let report: Value = serde_json::from_str(&stdout).unwrap_or_else(|_| {
        panic!(
            "no report from the browser checks:\n{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    assert_eq!(report["failures"], json!([]), "{report:#}");
    assert!(out.status.success(), "{report:#}");
    // Desktop, phone and dark, every page, and the accessibility check of each.
    assert_eq!(
        report["screenshots"].as_array().unwrap().len(),
        18,
        "{report:#}"
    );
    assert_eq!(report["axe"].as_object().unwrap().len(), 21, "{report:#}");
    for shot in report["screenshots"].as_array().unwrap() {
        let bytes = std::fs::metadata(shot.as_str().unwrap()).unwrap().len();
        assert!(bytes > 10_000, "{shot} is {bytes} bytes: nothing rendered?");
    }
    server.stop().await;
}
