//! Access control: every route × every kind of caller, keys shown once and revocable, the rate
//! limit, the query bound, and writes attributed to the key that made them.

use std::collections::BTreeSet;

use cardgate::domain::apikey::Role;
use cardgate::http::permissions::{Access, AccessTable};
use serde_json::{Value, json};

use crate::support::cards::CardServer;
use crate::support::{
    ADMIN_TOKEN, TestDb, TestServer, client_with, error_code, json_of, on_both_backends,
    test_settings,
};

on_both_backends!(
    every_route_answers_each_kind_of_caller_as_decided,
    a_key_is_shown_once_works_at_once_and_fails_at_once_when_revoked,
    each_key_is_rate_limited_with_retry_after,
    long_query_strings_are_refused,
    writes_are_attributed_to_the_key_that_made_them,
);

/// Every route and the least role it needs, decided here once more on purpose: a route added
/// without a decision (in its `security` or here) fails `the_access_matrix_covers_every_route`.
const MATRIX: &[(&str, &str, Need)] = &[
    ("POST", "/v1/callees", Need::Admin),
    ("GET", "/v1/callees", Need::Reader),
    ("GET", "/v1/callees/{id}", Need::Reader),
    ("POST", "/v1/callees/{id}/refresh", Need::Admin),
    ("PUT", "/v1/callees/{id}/trusted-keys", Need::Admin),
    ("GET", "/v1/callees/{id}/credentials", Need::Admin),
    ("PUT", "/v1/callees/{id}/credentials/{scheme}", Need::Admin),
    (
        "DELETE",
        "/v1/callees/{id}/credentials/{scheme}",
        Need::Admin,
    ),
    ("GET", "/v1/callees/{id}/cards", Need::Reader),
    ("GET", "/v1/callees/{id}/cards/{snapshot_id}", Need::Reader),
    ("POST", "/v1/callees/{id}/probes", Need::Admin),
    ("GET", "/v1/callees/{id}/probes", Need::Reader),
    ("GET", "/v1/probes/{id}", Need::Reader),
    ("POST", "/v1/callees/{id}/reports", Need::Reporter),
    ("GET", "/v1/callees/{id}/reports", Need::Reader),
    ("GET", "/v1/trust", Need::Reader),
    ("GET", "/v1/rulebook", Need::Reader),
    ("POST", "/v1/rulebook/rejudge", Need::Admin),
    ("POST", "/v1/rulebook/what-if", Need::Admin),
    ("GET", "/v1/ledger", Need::Reader),
    ("GET", "/v1/ledger/verify", Need::Reader),
    ("GET", "/v1/ledger/checkpoint", Need::Reader),
    ("GET", "/v1/ledger/checkpoints", Need::Reader),
    ("GET", "/v1/ledger/proof", Need::Reader),
    ("GET", "/v1/ledger/consistency", Need::Reader),
    // Public keys: anyone checking a receipt or a checkpoint needs them.
    ("GET", "/.well-known/jwks.json", Need::Open),
    ("GET", "/v1/events", Need::Reader),
    ("POST", "/v1/subscriptions", Need::Admin),
    ("GET", "/v1/subscriptions", Need::Admin),
    ("GET", "/v1/subscriptions/{id}", Need::Admin),
    ("DELETE", "/v1/subscriptions/{id}", Need::Admin),
    ("POST", "/v1/subscriptions/{id}/rotate-secret", Need::Admin),
    ("POST", "/v1/subscriptions/{id}/pause", Need::Admin),
    (
        "GET",
        "/v1/callees/{id}/subjects/{version}/attestation",
        Need::Reader,
    ),
    ("GET", "/v1/attestations", Need::Reader),
    ("POST", "/v1/subscriptions/{id}/resume", Need::Admin),
    ("POST", "/v1/subscriptions/{id}/test", Need::Admin),
    ("GET", "/v1/subscriptions/{id}/deliveries", Need::Admin),
    (
        "POST",
        "/v1/subscriptions/{id}/deliveries/{delivery_id}/retry",
        Need::Admin,
    ),
    ("GET", "/v1/jobs", Need::Admin),
    ("GET", "/v1/status", Need::Reader),
    ("POST", "/v1/keys", Need::Admin),
    ("GET", "/v1/keys", Need::Admin),
    ("DELETE", "/v1/keys/{id}", Need::Admin),
    // Authenticated by its per-probe token, not by a key.
    ("POST", "/v1/hooks/push/{token}", Need::Open),
    ("GET", "/healthz", Need::Open),
    ("GET", "/readyz", Need::Open),
    // Scrapers carry no key; like /readyz, it spends the address's budget.
    ("GET", "/metrics", Need::Open),
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Need {
    Open,
    Reader,
    Reporter,
    Admin,
}

impl Need {
    fn access(self) -> Access {
        match self {
            Need::Open => Access::Open,
            Need::Reader => Access::Role(Role::Reader),
            Need::Reporter => Access::Role(Role::Reporter),
            Need::Admin => Access::Role(Role::Admin),
        }
    }
}

#[test]
fn the_access_matrix_covers_every_route() {
    let doc = cardgate::http::openapi();
    let table = AccessTable::from_openapi(&doc).unwrap();
    let mut documented = BTreeSet::new();
    for (path, item) in &doc.paths.paths {
        let value = serde_json::to_value(item).unwrap();
        for method in ["get", "post", "put", "delete", "patch"] {
            if value.get(method).is_some() {
                documented.insert((method.to_uppercase(), path.clone()));
            }
        }
    }
    let decided: BTreeSet<(String, String)> = MATRIX
        .iter()
        .map(|(m, p, _)| (m.to_string(), p.to_string()))
        .collect();
    let undecided: Vec<_> = documented.difference(&decided).collect();
    assert!(
        undecided.is_empty(),
        "routes without a decision in the access matrix: {undecided:?}"
    );
    let stale: Vec<_> = decided.difference(&documented).collect();
    assert!(
        stale.is_empty(),
        "matrix rows for routes that do not exist: {stale:?}"
    );
    for (method, path, need) in MATRIX {
        let got = table.get(&method.parse().unwrap(), path);
        assert_eq!(
            got,
            Some(need.access()),
            "{method} {path}: the OpenAPI `security` and the matrix disagree"
        );
    }
    // And the other way round: the table holds nothing the matrix has not decided.
    assert_eq!(table.iter().count(), MATRIX.len());
}

/// Fills a path template with ids that exist (or random ones).
fn concrete(path: &str, ids: &Value) -> String {
    path.replace("{id}", ids["callee"].as_str().unwrap())
        .replace("{snapshot_id}", ids["snapshot"].as_str().unwrap())
        .replace("{token}", "00ff")
        .replace("{version}", "1.0")
        .replace("{scheme}", "bearer")
        .replace("{delivery_id}", ids["snapshot"].as_str().unwrap())
}

async fn every_route_answers_each_kind_of_caller_as_decided(db: TestDb) {
    let agents = CardServer::start().await;
    agents.serve_signed_card(
        "/.well-known/agent-card.json",
        &agents.card("A", &["1.0"], json!({})),
    );
    let server = TestServer::start(db.target.clone()).await;
    let callee = server.register(&agents.origin()).await;
    let ids = json!({"callee": callee["id"], "snapshot": callee["card"]["id"]});

    let mut tokens = Vec::new();
    for role in ["reader", "reporter", "admin", "reader"] {
        let (status, key) = server
            .post(
                "/v1/keys",
                json!({"name": format!("{role}-key"), "role": role}),
            )
            .await;
        assert_eq!(status, 201, "{key}");
        tokens.push((
            key["id"].as_str().unwrap().to_string(),
            key["key"].as_str().unwrap().to_string(),
        ));
    }
    let revoked = tokens.pop().unwrap();
    let (status, _) = json_of(
        server
            .client
            .delete(server.url(&format!("/v1/keys/{}", revoked.0)))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 204);

    let callers: Vec<(&str, Option<&str>, Option<Role>)> = vec![
        ("no key", None, None),
        ("reader", Some(&tokens[0].1), Some(Role::Reader)),
        ("reporter", Some(&tokens[1].1), Some(Role::Reporter)),
        ("admin", Some(&tokens[2].1), Some(Role::Admin)),
        ("revoked", Some(&revoked.1), None),
        ("garbage", Some("cg_not-a-key"), None),
    ];
    for (method, path, need) in MATRIX {
        // Keys are not deleted for real: the admin row would revoke the admin's own key.
        let target = if *path == "/v1/keys/{id}" {
            path.replace("{id}", &uuid::Uuid::now_v7().to_string())
        } else if *path == "/v1/events" {
            // An allowed caller would get an endless stream; a bad filter answers at once,
            // after the access check.
            "/v1/events?types=none-such".to_string()
        } else {
            concrete(path, &ids)
        };
        for (who, token, role) in &callers {
            let client = token.map_or_else(reqwest::Client::new, client_with);
            let mut req = client.request(method.parse().unwrap(), server.url(&target));
            if *method != "GET" && *method != "DELETE" {
                req = req.json(&json!({}));
            }
            let (status, body) = json_of(req.send().await.unwrap()).await;
            let expected = match (need, role) {
                (Need::Open, _) => None,
                (_, None) => Some(401),
                (need, Some(role))
                    if !role.allows(match need {
                        Need::Reader => Role::Reader,
                        Need::Reporter => Role::Reporter,
                        _ => Role::Admin,
                    }) =>
                {
                    Some(403)
                }
                _ => None,
            };
            match expected {
                Some(code) => {
                    assert_eq!(status, code, "{who} {method} {target}: {body}");
                    let message = body["error"]["message"].as_str().unwrap();
                    assert!(
                        !token.is_some_and(|t| message.contains(t)),
                        "the key leaked into an error body"
                    );
                }
                None => assert!(
                    status != 401 && status != 403 && status < 500,
                    "{who} {method} {target}: {status} {body}"
                ),
            }
        }
    }
    // The documentation stays open.
    for path in ["/openapi.json", "/docs/", "/healthz"] {
        assert_eq!(
            reqwest::get(server.url(path)).await.unwrap().status(),
            200,
            "{path}"
        );
    }
    server.stop().await;
}

async fn a_key_is_shown_once_works_at_once_and_fails_at_once_when_revoked(db: TestDb) {
    let server = TestServer::start(db.target.clone()).await;
    let (status, created) = server
        .post("/v1/keys", json!({"name": "dashboard", "role": "reader"}))
        .await;
    assert_eq!(status, 201);
    let key = created["key"].as_str().unwrap().to_string();
    assert!(key.starts_with(created["prefix"].as_str().unwrap()));
    let (_, list) = server.get("/v1/keys").await;
    assert!(
        !list.to_string().contains(&key),
        "the list never shows a key"
    );
    assert_eq!(list["items"][0]["created_by"], "admin-token");

    let reader = client_with(&key);
    assert_eq!(
        reader
            .get(server.url("/v1/ledger"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    let forbidden = reader
        .post(server.url("/v1/keys"))
        .json(&json!({"name": "x", "role": "admin"}))
        .send()
        .await
        .unwrap();
    assert_eq!(forbidden.status(), 403);
    let (status, _) = json_of(
        server
            .client
            .delete(server.url(&format!("/v1/keys/{}", created["id"].as_str().unwrap())))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 204);
    let after = reader.get(server.url("/v1/ledger")).send().await.unwrap();
    assert_eq!(after.status(), 401);
    assert_eq!(after.headers()["www-authenticate"], "Bearer");
    let (_, list) = server.get("/v1/keys").await;
    assert!(list["items"][0]["revoked_at"].is_string());
    let (status, body) = server
        .post("/v1/keys", json!({"name": "", "role": "reader"}))
        .await;
    assert_eq!((status, error_code(&body)), (400, "invalid_request"));
    let (status, body) = server
        .post("/v1/keys", json!({"name": "x", "role": "root"}))
        .await;
    assert_eq!((status, error_code(&body)), (400, "invalid_body"));
    server.stop().await;
}

async fn each_key_is_rate_limited_with_retry_after(db: TestDb) {
    let mut settings = test_settings(db.target.clone());
    // One token per 1,000 s: no pause on a loaded machine refills the bucket mid-test.
    settings.auth = cardgate::http::permissions::AuthSettings {
        rate_per_sec: 0.001,
        burst: 3.0,
        ..Default::default()
    }
    .with_admin_token(ADMIN_TOKEN);
    let server = TestServer::start_with(settings).await;
    let mut statuses = Vec::new();
    for _ in 0..4 {
        statuses.push(
            server
                .client
                .get(server.url("/v1/ledger"))
                .send()
                .await
                .unwrap(),
        );
    }
    let codes: Vec<u16> = statuses.iter().map(|r| r.status().as_u16()).collect();
    assert_eq!(codes, [200, 200, 200, 429]);
    let limited = statuses.pop().unwrap();
    let retry: u64 = limited.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=1000).contains(&retry), "Retry-After {retry}");
    let (_, body) = json_of(limited).await;
    assert_eq!(error_code(&body), "rate_limited");
    // Open routes are not keyed and not limited.
    assert_eq!(
        reqwest::get(server.url("/healthz")).await.unwrap().status(),
        200
    );
    server.stop().await;
}

async fn long_query_strings_are_refused(db: TestDb) {
    let server = TestServer::start(db.target.clone()).await;
    let long = format!("/v1/ledger?after=1&x={}", "a".repeat(5000));
    let (status, body) = server.get(&long).await;
    assert_eq!((status, error_code(&body)), (414, "uri_too_long"));
    server.stop().await;
}

async fn writes_are_attributed_to_the_key_that_made_them(db: TestDb) {
    let agents = CardServer::start().await;
    agents.serve_signed_card(
        "/.well-known/agent-card.json",
        &agents.card("A", &["1.0"], json!({})),
    );
    let server = TestServer::start(db.target.clone()).await;
    let (_, ops) = server
        .post("/v1/keys", json!({"name": "ops", "role": "admin"}))
        .await;
    let (_, rep) = server
        .post("/v1/keys", json!({"name": "caller-x", "role": "reporter"}))
        .await;
    let ops = client_with(ops["key"].as_str().unwrap());
    let (status, callee) = json_of(
        ops.post(server.url("/v1/callees"))
            .json(&json!({"card_url": agents.origin()}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 201);
    let id = callee["id"].as_str().unwrap();
    let report = json!({"protocol_version": "1.0", "trigger": "terminal-without-timestamp", "evidence": {"observed": [{"state": "TASK_STATE_COMPLETED"}]}});
    let (status, report) = json_of(
        client_with(rep["key"].as_str().unwrap())
            .post(server.url(&format!("/v1/callees/{id}/reports")))
            .json(&report)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 201, "{report}");
    assert_eq!(report["reporter"], "key:caller-x");
    let (_, ledger) = server.get(&format!("/v1/ledger?callee_id={id}")).await;
    let actors: Vec<&str> = ledger["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["actor"].as_str().unwrap())
        .collect();
    assert_eq!(actors, ["key:ops", "key:caller-x"]);
    server.stop().await;
}
