//! Agents that require credentials: the official SDK agents behind a front that enforces a
//! bearer token, an API key, OAuth 2.0 client credentials (a real OpenID Connect provider,
//! `oidc-provider`, issues and introspects the tokens) or mutual TLS, their cards declaring
//! the scheme. Each is promoted (or judged as its wire behaviour deserves) with the right
//! credentials, `not-exercised` and never demoted without them, `PROBE-AUTH` when they are
//! refused; no secret appears in any output.

use std::time::Duration;

use cardgate::service::probe::ProbeSettings;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::probes::{condition, decision, events, finding, gate, probe, register};
use crate::support::agents::{Sdk, SdkAgent, start_oidc};
use crate::support::auth_front::{AuthFront, Guard};
use crate::support::tls::TlsFront;
use crate::support::{TestDb, TestServer, on_both_backends, test_settings};

on_both_backends!(
    credentials_are_stored_sealed_and_presented_over_json_rpc_and_grpc,
    the_extended_card_is_fetched_with_the_credentials_verified_and_judged_by,
);

// Distinctive values, so that a search of every output for them means something.
const TOKEN: &str = "cgtest-bearer-3b8e1f0c9d27a6";
const WRONG_TOKEN: &str = "cgtest-wrong-bearer-000111";
const API_KEY: &str = "cgtest-apikey-91c4de5a7b22";
const CLIENT_ID: &str = "cardgate-prober";
const CLIENT_SECRET: &str = "cgtest-client-secret-5e2f7a19";
const INTROSPECTOR: (&str, &str) = ("agent-front", "cgtest-introspector-secret-44");

/// The `--security` argument of the SDK agents: one scheme, required alone, with `scopes`.
fn security(name: &str, scheme: Value, scopes: &[&str]) -> String {
    json!({
        "securitySchemes": {name: scheme},
        "securityRequirements": [{"schemes": {name: {"list": scopes}}}],
    })
    .to_string()
}

fn bearer_scheme() -> String {
    security(
        "bearer",
        json!({"httpAuthSecurityScheme": {"scheme": "Bearer"}}),
        &[],
    )
}

/// The SDK's agent behind an authenticating front; the front's origin is the card's.
async fn behind(sdk: Sdk, guard: Guard, security: &str) -> Option<(SdkAgent, AuthFront)> {
    behind_with(sdk, guard, security, &[]).await
}

/// [`behind`], with more arguments for the agent.
async fn behind_with(
    sdk: Sdk,
    guard: Guard,
    security: &str,
    more: &[&str],
) -> Option<(SdkAgent, AuthFront)> {
    let front = AuthFront::start(guard).await;
    let args = [&["--security", security][..], more].concat();
    let agent = SdkAgent::start_with(sdk, Some(&front.origin()), &args).await?;
    front.forward_to(&agent.origin);
    Some((agent, front))
}

/// Registers `card_url` with the bearer token for its `bearer` scheme; the callee's id.
async fn register_with_token(server: &TestServer, card_url: &str) -> String {
    let (status, body) = server
        .post(
            "/v1/callees",
            json!({
                "card_url": card_url,
                "credentials": {"bearer": {"kind": "bearer", "token": TOKEN}},
            }),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    body["id"].as_str().unwrap().to_string()
}

/// Sets a credential through the API; the answer.
async fn put_credential(
    server: &TestServer,
    callee: &str,
    scheme: &str,
    body: Value,
) -> (u16, Value) {
    server
        .put(&format!("/v1/callees/{callee}/credentials/{scheme}"), body)
        .await
}

/// Sets a credential that fits its scheme; what the listing says of it.
async fn set(server: &TestServer, callee: &str, scheme: &str, body: Value) -> Value {
    let (status, set) = put_credential(server, callee, scheme, body).await;
    assert_eq!(status, 200, "{set}");
    set
}

/// `PROBE-AUTH` of a run: its status and message.
fn auth(run: &Value) -> (&str, &str) {
    let found = finding(run, "PROBE-AUTH");
    (
        found["status"].as_str().unwrap(),
        found["message"].as_str().unwrap(),
    )
}

fn fingerprint(secret: &str) -> String {
    format!(
        "sha256:{}",
        &hex::encode(Sha256::digest(secret.as_bytes()))[..16]
    )
}

/// Every answer a reader or admin can get about `callee`, as text.
async fn everything_shown(server: &TestServer, callee: &str) -> String {
    let mut out = String::new();
    let (_, runs) = server
        .get(&format!("/v1/callees/{callee}/probes?limit=100"))
        .await;
    for run in runs["items"].as_array().into_iter().flatten() {
        let (_, full) = server
            .get(&format!("/v1/probes/{}", run["id"].as_str().unwrap()))
            .await;
        out.push_str(&full.to_string());
    }
    for path in [
        format!("/v1/callees/{callee}"),
        format!("/v1/callees/{callee}/probes?limit=100"),
        format!("/v1/callees/{callee}/credentials"),
        format!("/v1/callees/{callee}/cards"),
        format!("/v1/ledger?callee_id={callee}"),
        format!("/v1/trust?callee_id={callee}&caller_version=1.0"),
    ] {
        let (status, body) = server.get(&path).await;
        assert_eq!(status, 200, "{path}: {body}");
        out.push_str(&body.to_string());
    }
    let metrics = server
        .client
        .get(server.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    out.push_str(&metrics);
    out
}

/// Bearer, through the service: not exercised without credentials (nothing sent, nothing
/// demoted), promoted with the right token, `PROBE-AUTH` failed (and still not demoted)
/// with a wrong one, and the token in no answer and nowhere in the database file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bearer_agent_is_judged_only_with_its_token_and_never_demoted_for_a_401() {
    let Some((_agent, front)) =
        behind(Sdk::Js, Guard::Bearer(TOKEN.into()), &bearer_scheme()).await
    else {
        return;
    };
    let db = TestDb::sqlite().await;
    let server = TestServer::start(db.target.clone()).await;
    let callee = register(&server, &front.origin(), json!({})).await;

    // No credentials: nothing is sent, nothing is judged.
    let run = probe(&server, &callee, "1.0").await;
    let (outcome, message) = auth(&run);
    assert_eq!(outcome, "not-exercised", "{run:#}");
    assert!(
        message.contains("`bearer`") && message.contains("no credentials are configured"),
        "{message}"
    );
    for code in ["LC-TASK-CREATED", "LC-FULL-LIFECYCLE", "LC-TIMESTAMPS"] {
        assert_eq!(finding(&run, code)["status"], "not-exercised", "{code}");
    }
    assert_eq!(run["capabilities"]["streaming"]["status"], "not-exercised");
    assert_eq!(events(&run), ["probe-finished"]);
    assert_eq!(front.counts(), (0, 0), "nothing reached the agent");
    let strict = decision(&server, &callee, "caller_version=1.0").await;
    let lifecycle = condition(&strict, "lifecycle-probe");
    assert_eq!(lifecycle["status"], "unknown", "{strict:#}");
    assert!(
        lifecycle["reason"]
            .as_str()
            .unwrap()
            .contains("no credentials")
    );

    // A kind that does not fit the scheme, or a scheme the card does not declare: 422.
    let (status, body) = put_credential(
        &server,
        &callee,
        "bearer",
        json!({"kind": "api-key", "value": API_KEY}),
    )
    .await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["error"]["code"], "credential_mismatch");
    let said = body["error"]["message"].as_str().unwrap();
    assert!(
        said.contains("http bearer") && said.contains("api-key"),
        "{said}"
    );
    let (status, body) = put_credential(
        &server,
        &callee,
        "nope",
        json!({"kind": "bearer", "token": TOKEN}),
    )
    .await;
    assert_eq!(status, 422, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("`bearer`")
    );

    // The right token: judged, and promoted.
    let listed = set(
        &server,
        &callee,
        "bearer",
        json!({"kind": "bearer", "token": TOKEN}),
    )
    .await;
    assert_eq!(listed["kind"], "bearer");
    assert_eq!(listed["fingerprint"], fingerprint(TOKEN));
    assert_eq!(listed["set_by"], "admin-token");
    let run = probe(&server, &callee, "1.0").await;
    assert_eq!(auth(&run).0, "pass", "{run:#}");
    assert!(auth(&run).1.contains("presented `bearer`"));
    assert_eq!(run["verdict"]["passed"], true, "{:#}", run["verdict"]);
    assert_eq!(events(&run), ["probe-finished", "promoted"]);
    assert_eq!(gate(&server, &callee, "1.0").await, "lifecycle-trusted");
    let (accepted, _) = front.counts();
    assert!(accepted > 0);

    // A wrong token: PROBE-AUTH fails with the agent's words; the promotion stands, but the
    // newest cycle knows nothing of the lifecycle, so callers are advised.
    set(
        &server,
        &callee,
        "bearer",
        json!({"kind": "bearer", "token": WRONG_TOKEN}),
    )
    .await;
    let run = probe(&server, &callee, "1.0").await;
    let (outcome, message) = auth(&run);
    assert_eq!(outcome, "fail", "{run:#}");
    assert!(
        message.contains("HTTP 401") && message.contains("invalid bearer token"),
        "{message}"
    );
    assert_eq!(
        finding(&run, "LC-FULL-LIFECYCLE")["status"],
        "not-exercised"
    );
    assert_eq!(events(&run), ["probe-finished"], "a 401 never demotes");
    let finished = &run["ledger_events"][0]["data"];
    assert!(
        finished["not_exercised"]
            .as_str()
            .unwrap()
            .contains("HTTP 401"),
        "{finished:#}"
    );
    assert_eq!(gate(&server, &callee, "1.0").await, "lifecycle-trusted");
    let strict = decision(&server, &callee, "caller_version=1.0").await;
    assert_eq!(strict["authoritative"], false);
    assert_eq!(condition(&strict, "lifecycle-probe")["status"], "unknown");
    // One refused call per trial (they start together), then nothing more was sent.
    let (_, refused) = front.counts();
    assert_eq!(refused, ProbeSettings::default().trials as usize);

    // Listed without the secret; removed; removed again is 404.
    let (_, list) = server
        .get(&format!("/v1/callees/{callee}/credentials"))
        .await;
    assert_eq!(list["credentials"][0]["scheme"], "bearer");
    assert_eq!(
        list["credentials"][0]["fingerprint"],
        fingerprint(WRONG_TOKEN)
    );
    let shown = everything_shown(&server, &callee).await;
    for secret in [TOKEN, WRONG_TOKEN] {
        assert!(!shown.contains(secret), "{secret} shown");
    }
    let gone = server
        .client
        .delete(server.url(&format!("/v1/callees/{callee}/credentials/bearer")))
        .send()
        .await
        .unwrap();
    assert_eq!(gone.status(), 204);
    let again = server
        .client
        .delete(server.url(&format!("/v1/callees/{callee}/credentials/bearer")))
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 404);
    server.stop().await;

    // At rest: sealed, so the database file holds neither token in any form.
    let DatabaseFile(bytes) = DatabaseFile::read(&db);
    for secret in [TOKEN, WRONG_TOKEN] {
        assert!(
            !bytes.windows(secret.len()).any(|w| w == secret.as_bytes()),
            "{secret} is in the database file"
        );
    }
}

/// The bytes of an SQLite test database (with its write-ahead log).
struct DatabaseFile(Vec<u8>);

impl DatabaseFile {
    fn read(db: &TestDb) -> Self {
        let cardgate::storage::DatabaseTarget::Sqlite(path) = &db.target else {
            panic!("an SQLite database");
        };
        let mut bytes = std::fs::read(path).unwrap();
        let wal = path.with_extension("db-wal");
        bytes.extend(std::fs::read(wal).unwrap_or_default());
        Self(bytes)
    }
}

/// An API key in a header, given at registration: the Python SDK's agent is judged as its wire
/// behaviour deserves (its `submitted` state has no timestamp), exactly as when anonymous.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_key_given_at_registration_lets_the_python_agent_be_judged_on_its_wire() {
    let scheme = security(
        "key",
        json!({"apiKeySecurityScheme": {"location": "header", "name": "X-API-Key"}}),
        &[],
    );
    let guard = Guard::ApiKey {
        name: "x-api-key".into(),
        value: API_KEY.into(),
    };
    let Some((_agent, front)) = behind(Sdk::Python, guard, &scheme).await else {
        return;
    };
    let db = TestDb::sqlite().await;
    let server = TestServer::start(db.target.clone()).await;
    let (status, body) = server
        .post(
            "/v1/callees",
            json!({
                "card_url": front.origin(),
                "credentials": {"key": {"kind": "api-key", "value": API_KEY}},
            }),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    assert!(!body.to_string().contains(API_KEY));
    let callee = body["id"].as_str().unwrap().to_string();
    for version in ["1.0", "0.3"] {
        let run = probe(&server, &callee, version).await;
        assert_eq!(auth(&run).0, "pass", "{run:#}");
        assert_eq!(finding(&run, "LC-FULL-LIFECYCLE")["status"], "pass");
        let timestamps = finding(&run, "LC-TIMESTAMPS");
        assert_eq!(timestamps["status"], "fail", "{version}");
        assert!(
            timestamps["message"]
                .as_str()
                .unwrap()
                .contains("submitted")
        );
        assert_eq!(run["capabilities"]["pushNotifications"]["status"], "passed");
        let relaxed = decision(
            &server,
            &callee,
            &format!("caller_version={version}&dedup=none"),
        )
        .await;
        assert_eq!(relaxed["authoritative"], true, "{relaxed:#}");
    }
    // A registration whose credential does not fit stores nothing.
    let (status, body) = server
        .post(
            "/v1/callees",
            json!({
                "card_url": format!("{}/.well-known/agent-card.json", front.origin()),
                "credentials": {"key": {"kind": "bearer", "token": TOKEN}},
            }),
        )
        .await;
    assert_eq!(status, 422, "{body}");
    let (_, page) = server.get("/v1/callees").await;
    assert_eq!(page["items"].as_array().unwrap().len(), 1);
    assert!(!everything_shown(&server, &callee).await.contains(API_KEY));
    server.stop().await;
}

/// A running OpenID Connect provider for the OAuth tests, with the prober's client and the
/// front's introspection client registered.
async fn provider(ttl_secs: u32) -> Option<SdkAgent> {
    let ttl = ttl_secs.to_string();
    start_oidc(&[
        "--client-id",
        CLIENT_ID,
        "--client-secret",
        CLIENT_SECRET,
        "--scope",
        "a2a.invoke",
        "--token-ttl",
        &ttl,
        "--introspector-id",
        INTROSPECTOR.0,
        "--introspector-secret",
        INTROSPECTOR.1,
    ])
    .await
}

/// The token and introspection endpoints of a provider, from its discovery document.
async fn endpoints(issuer: &str) -> (String, String) {
    let doc: Value = reqwest::get(format!("{issuer}/.well-known/openid-configuration"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    (
        doc["token_endpoint"].as_str().unwrap().to_string(),
        doc["introspection_endpoint"].as_str().unwrap().to_string(),
    )
}

fn introspecting(introspection_url: String) -> Guard {
    Guard::OAuth {
        introspection_url,
        client_id: INTROSPECTOR.0.into(),
        client_secret: INTROSPECTOR.1.into(),
    }
}

/// OAuth 2.0 client credentials, through the service: the token comes from the scheme's token
/// URL, is cached across cycles, is fetched again once after the front stops accepting it,
/// and a client the authorization server refuses is `PROBE-AUTH` with its error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oauth_client_credentials_are_fetched_cached_renewed_once_and_refusals_are_reported() {
    let Some(issuer) = provider(300).await else {
        return;
    };
    let (token_url, introspection_url) = endpoints(&issuer.origin).await;
    let scheme = security(
        "oauth",
        json!({"oauth2SecurityScheme": {"flows": {"clientCredentials": {
            "tokenUrl": token_url, "scopes": {"a2a.invoke": "invoke the agent"}}}}}),
        &["a2a.invoke"],
    );
    let Some((_agent, front)) = behind(Sdk::Js, introspecting(introspection_url), &scheme).await
    else {
        return;
    };
    let db = TestDb::sqlite().await;
    let server = TestServer::start(db.target.clone()).await;
    let callee = register(&server, &front.origin(), json!({})).await;
    let client = json!({"kind": "oauth2-client-credentials", "client_id": CLIENT_ID, "client_secret": CLIENT_SECRET});
    let listed = set(&server, &callee, "oauth", client).await;
    assert_eq!(listed["fingerprint"], fingerprint(CLIENT_SECRET));

    let run = probe(&server, &callee, "1.0").await;
    assert_eq!(auth(&run).0, "pass", "{run:#}");
    assert_eq!(
        events(&run),
        ["probe-finished", "promoted"],
        "{:#}",
        run["verdict"]
    );
    let (_, refused_before) = front.counts();
    assert_eq!(refused_before, 0);

    // Every token so far is refused from now on: the next cycle's first call gets a 401, a
    // new token is fetched once, and the cycle goes on with it.
    front.revoke_tokens();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let run = probe(&server, &callee, "0.3").await;
    assert_eq!(auth(&run).0, "pass", "{run:#}");
    assert_eq!(run["verdict"]["passed"], true, "{:#}", run["verdict"]);
    let (_, refused) = front.counts();
    assert_eq!(
        refused,
        ProbeSettings::default().trials as usize,
        "one 401 per trial (they start together), then a fresh token"
    );

    // A secret the provider refuses.
    let wrong = json!({"kind": "oauth2-client-credentials", "client_id": CLIENT_ID, "client_secret": "cgtest-not-the-secret"});
    set(&server, &callee, "oauth", wrong).await;
    let run = probe(&server, &callee, "1.0").await;
    let (outcome, message) = auth(&run);
    assert_eq!(outcome, "fail", "{run:#}");
    assert!(
        message.contains("token endpoint") && message.contains("invalid_client"),
        "{message}"
    );
    assert_eq!(events(&run), ["probe-finished"]);
    assert_eq!(gate(&server, &callee, "1.0").await, "lifecycle-trusted");

    // A token URL the outbound policy refuses (a private address; only loopback is allowed
    // here) is never asked.
    let private = json!({"kind": "oauth2-client-credentials", "client_id": CLIENT_ID,
        "client_secret": CLIENT_SECRET, "token_url": "http://10.255.255.1/token"});
    set(&server, &callee, "oauth", private).await;
    let run = probe(&server, &callee, "1.0").await;
    let (outcome, message) = auth(&run);
    assert_eq!(outcome, "fail", "{run:#}");
    assert!(
        message.contains("10.255.255.1") && message.contains("does not connect to"),
        "{message}"
    );
    let shown = everything_shown(&server, &callee).await;
    assert!(!shown.contains(CLIENT_SECRET) && !shown.contains("cgtest-not-the-secret"));
    server.stop().await;
}

/// `cardgate probe --credentials`: OpenID Connect, the token endpoint found through the
/// scheme's discovery document; without the file the agent is not exercised (exit 1).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cardgate_probe_presents_openid_connect_credentials_from_a_file() {
    let Some(issuer) = provider(300).await else {
        return;
    };
    let (_, introspection_url) = endpoints(&issuer.origin).await;
    let scheme = security(
        "oidc",
        json!({"openIdConnectSecurityScheme": {
            "openIdConnectUrl": format!("{}/.well-known/openid-configuration", issuer.origin)}}),
        &["a2a.invoke"],
    );
    let Some((_agent, front)) = behind(Sdk::Js, introspecting(introspection_url), &scheme).await
    else {
        return;
    };
    let origin = front.origin();
    let out = crate::cli::cardgate_probe(&[&origin, "--json", "--version", "1.0"]).await;
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(1), "{report:#}");
    let subject = &report["subjects"][0];
    assert_eq!(subject["would_promote"], false);
    let found = subject["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["code"] == "PROBE-AUTH")
        .unwrap();
    assert_eq!(found["status"], "not-exercised", "{subject:#}");

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("credentials.json");
    std::fs::write(
        &file,
        json!({"oidc": {"kind": "oauth2-client-credentials", "client_id": CLIENT_ID, "client_secret": CLIENT_SECRET}})
            .to_string(),
    )
    .unwrap();
    let file = file.display().to_string();
    let out = crate::cli::cardgate_probe(&[&origin, "--json", "--credentials", &file]).await;
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(!report.contains(CLIENT_SECRET) && !stderr.contains(CLIENT_SECRET));
    let report: Value = serde_json::from_str(&report).unwrap();
    for subject in report["subjects"].as_array().unwrap() {
        assert_eq!(subject["would_promote"], true, "{subject:#}");
    }
}

/// The SDK's agent behind a mutual-TLS front (its card declaring the scheme): connections with
/// a client certificate from the test CA reach it, the others only its public card. Also the
/// fronts (kept alive) and the certificates.
struct MutualTls {
    _agent: SdkAgent,
    tls: TlsFront,
    _fronts: (AuthFront, AuthFront),
    identity: crate::support::tls::ClientIdentity,
}

async fn behind_mutual_tls(sdk: Sdk) -> Option<MutualTls> {
    let mut tls = TlsFront::bind_mutual().await;
    let scheme = security("mtls", json!({"mtlsSecurityScheme": {}}), &[]);
    let agent = SdkAgent::start_with(sdk, Some(&tls.origin), &["--security", &scheme]).await?;
    let (card_only, authenticated) = (
        AuthFront::start(Guard::Nobody).await,
        AuthFront::start(Guard::Anyone).await,
    );
    card_only.forward_to(&agent.origin);
    authenticated.forward_to(&agent.origin);
    tls.forward_split(authenticated.addr, card_only.addr);
    let identity = tls.client.take().unwrap();
    Some(MutualTls {
        _agent: agent,
        tls,
        _fronts: (card_only, authenticated),
        identity,
    })
}

/// `cardgate probe <origin> --json --version 1.0 --credentials <file>`, trusting `ca_pem`.
async fn probe_with_file(origin: &str, file: &str, ca_pem: &str) -> std::process::Output {
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, ca_pem).unwrap();
    let ca = ca.display().to_string();
    let args = [origin, "--json", "--version", "1.0", "--credentials", file];
    crate::cli::cardgate_probe_with(&args, &[("CARDGATE_OUTBOUND_CA_FILE", &ca)]).await
}

/// Mutual TLS: the JS SDK's agent behind a TLS front that wants a client certificate from a
/// test CA (its card stays public). Through the service: not exercised without one, refused
/// with a certificate from another CA, promoted with its own; and `cardgate probe` alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls_is_presented_through_the_service_and_the_cli() {
    // Bound whole: the agent and fronts live as long as it does.
    let Some(mtls) = behind_mutual_tls(Sdk::Js).await else {
        return;
    };
    let (tls, identity) = (&mtls.tls, &mtls.identity);

    let db = TestDb::sqlite().await;
    let mut settings = test_settings(db.target.clone());
    settings.outbound.extra_roots_pem = tls.ca_pem.clone().into_bytes();
    let server = TestServer::start_with(settings).await;
    let callee = register(&server, &tls.origin, json!({})).await;
    let run = probe(&server, &callee, "1.0").await;
    assert_eq!(auth(&run).0, "not-exercised", "{run:#}");

    let stranger = json!({"kind": "mtls",
        "certificate_pem": identity.stranger_certificate_pem,
        "private_key_pem": identity.stranger_private_key_pem});
    set(&server, &callee, "mtls", stranger).await;
    let run = probe(&server, &callee, "1.0").await;
    assert_eq!(auth(&run).0, "fail", "{run:#}");
    assert_eq!(events(&run), ["probe-finished"]);

    let own = json!({"kind": "mtls",
        "certificate_pem": identity.certificate_pem,
        "private_key_pem": identity.private_key_pem});
    set(&server, &callee, "mtls", own.clone()).await;
    let run = probe(&server, &callee, "1.0").await;
    assert_eq!(auth(&run).0, "pass", "{run:#}");
    assert_eq!(
        events(&run),
        ["probe-finished", "promoted"],
        "{:#}",
        run["verdict"]
    );
    let key_body = identity.private_key_pem.lines().nth(1).unwrap().to_string();
    assert!(!everything_shown(&server, &callee).await.contains(&key_body));
    server.stop().await;

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("credentials.json");
    std::fs::write(&file, json!({ "mtls": own }).to_string()).unwrap();
    let out = probe_with_file(&tls.origin, &file.display().to_string(), &tls.ca_pem).await;
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A credential that is not one: 400 before anything is stored, with the field named and the
/// value never echoed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_credentials_are_refused_without_echoing_them() {
    let Some((_agent, front)) =
        behind(Sdk::Js, Guard::Bearer(TOKEN.into()), &bearer_scheme()).await
    else {
        return;
    };
    let db = TestDb::sqlite().await;
    let server = TestServer::start(db.target.clone()).await;
    let callee = register(&server, &front.origin(), json!({})).await;
    for (body, field) in [
        (json!({"kind": "bearer", "token": "cgtest\nline"}), "token"),
        (json!({"kind": "bearer"}), "token"),
        (json!({"kind": "telepathy", "token": TOKEN}), "kind"),
        (
            json!({"kind": "mtls", "certificate_pem": "cgtest-not-pem", "private_key_pem": "x"}),
            "certificate_pem",
        ),
    ] {
        let (status, answer) = put_credential(&server, &callee, "bearer", body.clone()).await;
        assert_eq!(status, 400, "{body}: {answer}");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(message.contains(field), "{body}: {message}");
        assert!(!message.contains("cgtest"), "{message}");
    }
    let (_, list) = server
        .get(&format!("/v1/callees/{callee}/credentials"))
        .await;
    assert_eq!(list["credentials"], json!([]));
    server.stop().await;
}

/// Two replicas share one database and one secrets key file: a credential set through one is
/// opened by whichever runs the probe, and still after `cardgate secrets-key rotate` re-seals
/// it under a new key while both run. Then every output is searched for the token: both
/// replicas' logs at debug level, every answer, the metrics, and every row of every table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_share_the_key_file_and_no_secret_reaches_any_output() {
    use crate::replicas::{Replica, spawn_replica_logging};
    let Some(db) = TestDb::postgres().await else {
        return;
    };
    let cardgate::storage::DatabaseTarget::Postgres(url) = db.target.clone() else {
        unreachable!()
    };
    let Some((_agent, front)) =
        behind(Sdk::Js, Guard::Bearer(TOKEN.into()), &bearer_scheme()).await
    else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let log = |name: &str| dir.path().join(name).display().to_string();
    // Deliveries go to replica A, into the shared database, whichever replica probes.
    let hooks = crate::support::proxy::LaggingProxy::start(Duration::ZERO).await;
    let public_url = format!("{}/", hooks.origin());
    let everything = "debug,sqlx=warn,hyper=warn,h2=warn,tower=warn";
    let a = spawn_replica_logging(&url, &public_url, &log("a.log"), everything).await;
    hooks.forward_to(&a.base);
    let b = spawn_replica_logging(&url, &public_url, &log("b.log"), everything).await;
    let admin = crate::support::client_with(crate::support::ADMIN_TOKEN);
    let registered: Value = admin
        .post(format!("{}/v1/callees", a.base))
        .json(&json!({
            "card_url": front.origin(),
            "credentials": {"bearer": {"kind": "bearer", "token": TOKEN}},
        }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let callee = registered["id"].as_str().expect("registered").to_string();

    let probed = |base: &str, version: &str| {
        let (base, version, admin, callee) = (
            base.to_string(),
            version.to_string(),
            admin.clone(),
            callee.clone(),
        );
        async move {
            // Registration queued probes of its own: wait until this one can be queued.
            let mut queued = None;
            for _ in 0..600 {
                let answer = admin
                    .post(format!("{base}/v1/callees/{callee}/probes"))
                    .json(&json!({"protocol_version": version}))
                    .send()
                    .await
                    .unwrap();
                if answer.status() == 202 {
                    queued = Some(answer.json::<Value>().await.unwrap());
                    break;
                }
                assert_eq!(answer.status(), 409, "{}", answer.text().await.unwrap());
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            let run = queued.expect("a probe is queued");
            let id = run["id"].as_str().expect("queued").to_string();
            for _ in 0..600 {
                let run = crate::replicas::get(format!("{base}/v1/probes/{id}")).await;
                if matches!(run["status"].as_str(), Some("finished" | "aborted")) {
                    return run;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            panic!("probe {id} did not finish");
        }
    };
    let run = probed(&b.base, "1.0").await;
    assert_eq!(run["verdict"]["passed"], true, "{run:#}");

    let key_file = crate::support::postgres_secrets_file(
        url::Url::parse(&url)
            .unwrap()
            .path()
            .trim_start_matches('/'),
    );
    let before = std::fs::read_to_string(&key_file).unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&key_file).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "the key file is private");
    }
    let rotated = tokio::process::Command::new(env!("CARGO_BIN_EXE_cardgate"))
        .args(["secrets-key", "rotate"])
        .env("DATABASE_URL", &url)
        .env("CARDGATE_SECRETS_KEY_FILE", &key_file)
        .output()
        .await
        .unwrap();
    let said = String::from_utf8_lossy(&rotated.stdout);
    assert!(
        rotated.status.success(),
        "{}",
        String::from_utf8_lossy(&rotated.stderr)
    );
    assert!(said.contains("1 credential(s) re-sealed"), "{said}");
    assert_ne!(std::fs::read_to_string(&key_file).unwrap(), before);
    // Both replicas hold the old key in memory; each reads the file again when it meets the
    // new one.
    for (base, version) in [(&a.base, "0.3"), (&b.base, "1.0")] {
        let run = probed(base, version).await;
        assert_eq!(run["verdict"]["passed"], true, "{base} {version}: {run:#}");
    }

    // The search.
    let mut shown = String::new();
    for base in [&a.base, &b.base] {
        for path in [
            format!("/v1/callees/{callee}"),
            format!("/v1/callees/{callee}/probes?limit=100"),
            format!("/v1/callees/{callee}/credentials"),
            format!("/v1/ledger?callee_id={callee}"),
            format!("/v1/trust?callee_id={callee}&caller_version=1.0"),
            "/v1/status".to_string(),
        ] {
            shown.push_str(
                &crate::replicas::get(format!("{base}{path}"))
                    .await
                    .to_string(),
            );
        }
        let runs =
            crate::replicas::get(format!("{base}/v1/callees/{callee}/probes?limit=100")).await;
        for run in runs["items"].as_array().unwrap() {
            let id = run["id"].as_str().unwrap();
            shown.push_str(
                &crate::replicas::get(format!("{base}/v1/probes/{id}"))
                    .await
                    .to_string(),
            );
        }
        shown.push_str(
            &admin
                .get(format!("{base}/metrics"))
                .send()
                .await
                .unwrap()
                .text()
                .await
                .unwrap(),
        );
    }
    assert!(
        shown.contains("presented `bearer`"),
        "the runs are there to search"
    );
    assert!(!shown.contains(TOKEN), "the token is in an answer");
    drop::<[Replica; 2]>([a, b]);
    for name in ["a.log", "b.log"] {
        let text = std::fs::read_to_string(log(name)).unwrap();
        assert!(text.contains("probe"), "{name} logged the probes");
        assert!(!text.contains(TOKEN), "the token is in {name}");
    }
    let pool = sqlx::PgPool::connect(&url).await.unwrap();
    let tables: Vec<(String,)> = sqlx::query_as(
        "select table_name::text from information_schema.tables where table_schema = 'public'",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert!(tables.iter().any(|(t,)| t == "callee_credentials"));
    for (table,) in tables {
        let rows: Vec<(String,)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "select t::text from \"{table}\" t"
        )))
        .fetch_all(&pool)
        .await
        .unwrap();
        for (row,) in rows {
            assert!(!row.contains(TOKEN), "the token is in table {table}");
        }
    }
}

/// On either backend: credentials are stored, listed, replaced and removed; the fake agent
/// requiring a bearer token is probed over v0.3 JSON-RPC and v1.0 gRPC (the token as
/// metadata), not exercised without the token and refused (`UNAUTHENTICATED`) with a wrong
/// one, never demoted.
async fn credentials_are_stored_sealed_and_presented_over_json_rpc_and_grpc(db: TestDb) {
    use cardgate::fake_agent::{Behaviour, FakeAgent, FakeAgentConfig};
    let server = TestServer::start(db.target.clone()).await;
    for (grpc, versions, version) in [(false, vec!["0.3"], "0.3"), (true, vec!["1.0"], "1.0")] {
        let agent = FakeAgent::start(
            FakeAgentConfig {
                versions,
                grpc,
                bearer: Some(TOKEN.into()),
                ..FakeAgentConfig::default()
            },
            Behaviour::Conformant,
        )
        .await
        .unwrap();
        let context = format!("grpc: {grpc}");
        let callee = register(&server, &agent.origin(), json!({})).await;
        let run = probe(&server, &callee, version).await;
        assert_eq!(auth(&run).0, "not-exercised", "{context}");

        let wrong = json!({"kind": "bearer", "token": WRONG_TOKEN});
        set(&server, &callee, "bearer", wrong).await;
        let run = probe(&server, &callee, version).await;
        let (outcome, message) = auth(&run);
        assert_eq!(outcome, "fail", "{context}: {run:#}");
        let said = message;
        let expected = if grpc { "UNAUTHENTICATED" } else { "HTTP 401" };
        assert!(said.contains(expected), "{context}: {said}");
        assert_eq!(events(&run), ["probe-finished"], "{context}");

        let right = json!({"kind": "bearer", "token": TOKEN});
        set(&server, &callee, "bearer", right).await;
        let run = probe(&server, &callee, version).await;
        assert_eq!(auth(&run).0, "pass", "{context}: {run:#}");
        assert_eq!(run["wire"], if grpc { "grpc-v1" } else { "json-rpc-v03" });
        assert_eq!(
            events(&run),
            ["probe-finished", "promoted"],
            "{context}: {:#}",
            run["verdict"]
        );

        let (_, list) = server
            .get(&format!("/v1/callees/{callee}/credentials"))
            .await;
        assert_eq!(list["credentials"].as_array().unwrap().len(), 1);
        assert_eq!(list["credentials"][0]["fingerprint"], fingerprint(TOKEN));
        let stored = db
            .store
            .credentials(cardgate::domain::ids::CalleeId(callee.parse().unwrap()));
        let stored = stored.await.unwrap();
        assert!(stored[0].sealed.starts_with("v1."), "sealed");
        assert!(!stored[0].sealed.contains(TOKEN));
        assert!(!everything_shown(&server, &callee).await.contains(TOKEN));
    }
    server.stop().await;
}

/// The Python SDK's agent behind each kind of front, probed by `cardgate probe --credentials`:
/// judged exactly as anonymous (its `submitted` state has no timestamp, so it would not be
/// promoted), the credentials accepted every time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cardgate_probe_presents_every_kind_to_the_python_sdk_agent() {
    let Some(issuer) = provider(300).await else {
        return;
    };
    let (token_url, introspection_url) = endpoints(&issuer.origin).await;
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, value: Value| {
        let path = dir.path().join(name);
        std::fs::write(&path, value.to_string()).unwrap();
        path.display().to_string()
    };

    // Bearer, API key and OAuth behind the authenticating front.
    let kinds = [
        (
            Guard::Bearer(TOKEN.into()),
            bearer_scheme(),
            json!({"bearer": {"kind": "bearer", "token": TOKEN}}),
        ),
        (
            Guard::ApiKey {
                name: "x-api-key".into(),
                value: API_KEY.into(),
            },
            security(
                "key",
                json!({"apiKeySecurityScheme": {"location": "header", "name": "X-API-Key"}}),
                &[],
            ),
            json!({"key": {"kind": "api-key", "value": API_KEY}}),
        ),
        (
            introspecting(introspection_url),
            security(
                "oauth",
                json!({"oauth2SecurityScheme": {"flows": {"clientCredentials": {
                    "tokenUrl": token_url, "scopes": {"a2a.invoke": "invoke"}}}}}),
                &["a2a.invoke"],
            ),
            json!({"oauth": {"kind": "oauth2-client-credentials", "client_id": CLIENT_ID, "client_secret": CLIENT_SECRET}}),
        ),
    ];
    for (i, (guard, scheme, credentials)) in kinds.into_iter().enumerate() {
        let Some((_agent, front)) = behind(Sdk::Python, guard, &scheme).await else {
            return;
        };
        let file = write(&format!("kind-{i}.json"), credentials);
        let origin = front.origin();
        let out = crate::cli::cardgate_probe(&[
            &origin,
            "--json",
            "--version",
            "1.0",
            "--credentials",
            &file,
        ])
        .await;
        python_judged_on_its_wire(&out, &format!("kind {i}"));
    }

    // Mutual TLS.
    let Some(mtls) = behind_mutual_tls(Sdk::Python).await else {
        return;
    };
    let (tls, identity) = (&mtls.tls, &mtls.identity);
    let file = write(
        "mtls.json",
        json!({"mtls": {"kind": "mtls", "certificate_pem": identity.certificate_pem,
            "private_key_pem": identity.private_key_pem}}),
    );
    let out = probe_with_file(&tls.origin, &file, &tls.ca_pem).await;
    python_judged_on_its_wire(&out, "mtls");
}

/// A `cardgate probe` report of the Python SDK's agent with its credentials accepted.
fn python_judged_on_its_wire(out: &std::process::Output, context: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{context}: {stderr}");
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let subject = &report["subjects"][0];
    let found = subject["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["code"] == "PROBE-AUTH")
        .unwrap();
    assert_eq!(found["status"], "pass", "{context}: {subject:#}");
    assert_eq!(
        subject["capabilities"]["streaming"]["status"], "passed",
        "{context}"
    );
    assert_eq!(
        subject["capabilities"]["pushNotifications"]["status"], "passed",
        "{context}"
    );
    let untimestamped = subject["verdict"]["untimestamped"].to_string();
    assert!(
        untimestamped.contains("submitted"),
        "{context}: {subject:#}"
    );
    for secret in [TOKEN, API_KEY, CLIENT_SECRET] {
        assert!(!stderr.contains(secret) && !report.to_string().contains(secret));
    }
}

/// The authenticated extended card: the fake agent's public card advertises no streaming and
/// says it has an extended card, behind a bearer token. With the token, the probe fetches the
/// extended card (v1.0 `GetExtendedAgentCard`, v0.3 `agent/getAuthenticatedExtendedCard`),
/// verifies its signature, and judges streaming, which only the extended card declares;
/// a decision that requires streaming names the card it was judged by.
async fn the_extended_card_is_fetched_with_the_credentials_verified_and_judged_by(db: TestDb) {
    use cardgate::fake_agent::{Behaviour, FakeAgent, FakeAgentConfig};
    let server = TestServer::start(db.target.clone()).await;
    for version in ["1.0", "0.3"] {
        let agent = FakeAgent::start(
            FakeAgentConfig {
                versions: vec![if version == "1.0" { "1.0" } else { "0.3" }],
                streaming: false,
                bearer: Some(TOKEN.into()),
                extended_card: true,
                ..FakeAgentConfig::default()
            },
            Behaviour::Conformant,
        )
        .await
        .unwrap();
        let callee = register(&server, &agent.origin(), json!({})).await;
        // Without the token nothing is fetched, the extended card included.
        let run = probe(&server, &callee, version).await;
        assert_eq!(
            finding(&run, "PROBE-EXTENDED-CARD")["status"],
            "not-exercised"
        );

        set(
            &server,
            &callee,
            "bearer",
            json!({"kind": "bearer", "token": TOKEN}),
        )
        .await;
        let run = probe(&server, &callee, version).await;
        let extended = finding(&run, "PROBE-EXTENDED-CARD");
        assert_eq!(extended["status"], "pass", "{version}: {run:#}");
        assert!(
            extended["message"].as_str().unwrap().contains("verified"),
            "{extended:#}"
        );
        assert_eq!(
            run["capabilities"]["streaming"]["status"], "passed",
            "{version}: {:#}",
            run["capabilities"]
        );
        assert_eq!(finding(&run, "CAP-STREAMING")["status"], "pass");
        assert_eq!(
            events(&run),
            ["probe-finished", "promoted"],
            "{:#}",
            run["verdict"]
        );
        let answer = decision(
            &server,
            &callee,
            &format!("caller_version={version}&requires=streaming"),
        )
        .await;
        let streaming = condition(&answer, "capability:streaming");
        assert_eq!(streaming["status"], "pass", "{answer:#}");
        // The extended card is a snapshot of its own, tied to the run; the public card is
        // still the callee's card.
        let (_, cards) = server.get(&format!("/v1/callees/{callee}/cards")).await;
        let extended: Vec<&Value> = cards["items"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["kind"] == "extended")
            .collect();
        assert_eq!(extended.len(), 1, "{cards:#}");
        assert_eq!(extended[0]["probe_run_id"], run["id"], "{cards:#}");
        assert!(extended[0]["trusted"].as_bool().unwrap(), "{cards:#}");
        let (_, snapshot) = server
            .get(&format!(
                "/v1/callees/{callee}/cards/{}",
                extended[0]["id"].as_str().unwrap()
            ))
            .await;
        assert_eq!(
            snapshot["card"]["capabilities"]["streaming"], true,
            "{snapshot:#}"
        );
        assert!(
            snapshot["raw_text"]
                .as_str()
                .unwrap()
                .contains("as authenticated callers see it"),
            "{snapshot:#}"
        );
        let (_, detail) = server.get(&format!("/v1/callees/{callee}")).await;
        assert_eq!(detail["card"]["kind"], "public", "{detail:#}");
        assert_ne!(answer["evidence"]["card_snapshot_id"], extended[0]["id"]);
        assert!(
            streaming["reason"]
                .as_str()
                .unwrap()
                .contains("authenticated extended card"),
            "{streaming:#}"
        );
        agent.stop();
    }
    // Over gRPC too: GetExtendedAgentCard answers the AgentCard message, whose proto3 JSON is
    // the card verified (and its signature checked over that JSON).
    let agent = FakeAgent::start(
        FakeAgentConfig {
            grpc: true,
            streaming: false,
            bearer: Some(TOKEN.into()),
            extended_card: true,
            ..FakeAgentConfig::default()
        },
        Behaviour::Conformant,
    )
    .await
    .unwrap();
    let callee = register(&server, &agent.origin(), json!({})).await;
    set(
        &server,
        &callee,
        "bearer",
        json!({"kind": "bearer", "token": TOKEN}),
    )
    .await;
    let run = probe(&server, &callee, "1.0").await;
    assert_eq!(run["wire"], "grpc-v1", "{run:#}");
    let extended = finding(&run, "PROBE-EXTENDED-CARD");
    assert_eq!(extended["status"], "pass", "{run:#}");
    assert!(
        extended["message"].as_str().unwrap().contains("verified"),
        "{extended:#}"
    );
    assert_eq!(
        run["capabilities"]["streaming"]["status"], "passed",
        "{run:#}"
    );
    let fetched = run["exchanges"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["method"] == "lf.a2a.v1.A2AService/GetExtendedAgentCard")
        .expect("the extended card's call is in the transcript");
    assert_eq!(fetched["grpc"]["status"], "OK", "{fetched:#}");
    assert_eq!(fetched["response"]["capabilities"]["streaming"], true);
    assert!(
        !fetched.to_string().contains(TOKEN),
        "the token is not in the transcript"
    );
    server.stop().await;
}

/// The official Python SDK's extended card, behind a bearer front: the probe fetches it with
/// the token over each binding the SDK serves (JSON-RPC v1.0 and v0.3, HTTP+JSON), verifies it,
/// and keeps it as a snapshot of its own. Over v0.3 the SDK converts the card it signed in its
/// v1.0 form, and the signature no longer verifies: a SHOULD finding, kept as evidence.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_extended_card_is_fetched_on_every_binding() {
    let Some((_agent, front)) = behind_with(
        Sdk::Python,
        Guard::Bearer(TOKEN.into()),
        &bearer_scheme(),
        &["--extended-card"],
    )
    .await
    else {
        return;
    };
    let db = TestDb::sqlite().await;
    let server = TestServer::start(db.target.clone()).await;
    let callee = register_with_token(&server, &front.origin()).await;
    let mut runs = Vec::new();
    for (version, binding) in [("1.0", "jsonrpc"), ("0.3", "jsonrpc"), ("1.0", "http+json")] {
        let (status, queued) = server
            .post(
                &format!("/v1/callees/{callee}/probes"),
                json!({"protocol_version": version, "binding": binding}),
            )
            .await;
        assert_eq!(status, 202, "{queued}");
        let run = crate::probes::wait(&server, queued["id"].as_str().unwrap()).await;
        let extended = finding(&run, "PROBE-EXTENDED-CARD");
        let message = extended["message"].as_str().unwrap();
        if version == "0.3" {
            assert_eq!(extended["status"], "fail", "{extended:#}");
            assert!(message.contains("does not verify"), "{extended:#}");
        } else {
            assert_eq!(
                extended["status"], "pass",
                "{version} over {binding}: {extended:#}"
            );
            assert!(message.contains("verified"), "{extended:#}");
        }
        runs.push((run["id"].clone(), version == "1.0"));
    }
    let (_, cards) = server.get(&format!("/v1/callees/{callee}/cards")).await;
    let kept: Vec<&Value> = cards["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["kind"] == "extended")
        .collect();
    assert_eq!(kept.len(), 3, "{cards:#}");
    for (run, verifies) in &runs {
        let card = kept
            .iter()
            .find(|c| &c["probe_run_id"] == run)
            .unwrap_or_else(|| panic!("no extended card kept for run {run}: {cards:#}"));
        assert_eq!(card["trusted"], *verifies, "{card:#}");
    }
    assert!(!everything_shown(&server, &callee).await.contains(TOKEN));

    // Over gRPC, from the SDK's own servicer (which enforces nothing; the token is presented
    // because the card requires it): the AgentCard message's proto3 JSON verifies.
    let Some(grpc) = SdkAgent::start_with(
        Sdk::Python,
        None,
        &[
            "--grpc-only",
            "--security",
            &bearer_scheme(),
            "--extended-card",
        ],
    )
    .await
    else {
        return;
    };
    let callee = register_with_token(&server, &grpc.origin).await;
    let run = probe(&server, &callee, "1.0").await;
    assert_eq!(run["wire"], "grpc-v1", "{run:#}");
    let extended = finding(&run, "PROBE-EXTENDED-CARD");
    assert_eq!(extended["status"], "pass", "{extended:#}");
    assert!(extended["message"].as_str().unwrap().contains("verified"));
    server.stop().await;
}
