//! Card discovery end to end: a card server on loopback, cardgate fetching, verifying and
//! recording, and every hostile case refused with a clear reason and nothing stored.

use std::net::IpAddr;

use cardgate::domain::ids::{CalleeId, ProbeRunId};
use cardgate::domain::ledger::{EventBody, NewEvent};
use cardgate::domain::time;
use cardgate::domain::version::ProtocolVersion;
use cardgate::remote::NetworkPolicy;
use serde_json::{Value, json};

use crate::support::cards::{CardServer, Reply, TestKey};
use crate::support::{TestDb, TestServer, error_code, on_both_backends, repo_path, test_settings};

on_both_backends!(
    the_python_sdk_fixture_card_registers_with_both_subjects_verified,
    refresh_transitions_record_the_right_events_and_move_no_gate,
    a_failed_fetch_makes_subjects_untrusted_until_the_card_returns,
    conditional_refresh_gets_304_and_records_nothing_new,
    hostile_card_servers_are_refused_with_clear_reasons_and_bounded,
    private_addresses_are_refused_after_dns_resolution,
    cards_that_do_not_verify_are_refused,
    key_rotation_verifies_with_the_key_the_jku_still_serves,
    unsigned_cards_are_admitted_only_when_the_operator_says_so_and_the_decision_says_so,
    pinning_keys_later_judges_the_same_card_afresh,
);

const CARD: &str = "/.well-known/agent-card.json";

fn fixture(path: &str) -> Vec<u8> {
    std::fs::read(repo_path(&format!(
        "tests/fixtures/a2a-sdk-python-1.3.0/{path}"
    )))
    .unwrap()
}

/// Registers `card_url`, expects 422, and checks that nothing was stored.
async fn refused(server: &TestServer, body: Value) -> String {
    let (status, answer) = server.post("/v1/callees", body.clone()).await;
    assert_eq!(status, 422, "{body}: {answer}");
    assert_eq!(error_code(&answer), "card_unusable");
    let (_, page) = server.get("/v1/callees").await;
    assert_eq!(page["items"], json!([]), "nothing stored after {body}");
    let (_, ledger) = server.get("/v1/ledger").await;
    assert_eq!(ledger["items"], json!([]));
    answer["error"]["message"].as_str().unwrap().to_string()
}

async fn the_python_sdk_fixture_card_registers_with_both_subjects_verified(db: TestDb) {
    let agent = CardServer::start().await;
    let served = fixture("signed/python-card.v-1.0.json");
    agent.set(
        CARD,
        Reply::Json {
            body: served.clone(),
            etag: None,
        },
    );
    let jwks: Value = serde_json::from_slice(&fixture("signed/jwks.json")).unwrap();
    let server = TestServer::start(db.target.clone()).await;

    let (status, callee) = server
        .post(
            "/v1/callees",
            json!({"card_url": agent.origin(), "trusted_keys": jwks}),
        )
        .await;
    assert_eq!(status, 201, "{callee}");
    let subjects: Vec<(&str, &str)> = callee["subjects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["protocol_version"].as_str().unwrap(),
                s["gate_state"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(subjects, [("0.3", "card-trusted"), ("1.0", "card-trusted")]);
    let card = &callee["card"];
    assert_eq!(card["trusted"], true);
    assert_eq!(card["signature"]["status"], "verified");
    assert_eq!(card["signature"]["kid"], "peer-card-key-1");
    assert_eq!(card["signature"]["alg"], "ES256");
    assert_eq!(card["signature"]["key_source"], "pinned");
    assert_eq!(card["generation"], "hybrid");
    // The legacy top-level fields of the hybrid card are outside the signature.
    assert_eq!(
        card["uncovered_fields"],
        json!(["preferredTransport", "protocolVersion", "url"])
    );
    assert_eq!(callee["trusted_keys_pinned"], true);

    // The snapshot keeps the bytes exactly as served.
    let id = callee["id"].as_str().unwrap();
    let (_, snapshot) = server
        .get(&format!(
            "/v1/callees/{id}/cards/{}",
            card["id"].as_str().unwrap()
        ))
        .await;
    assert_eq!(
        snapshot["raw_text"].as_str().unwrap().as_bytes(),
        served.as_slice()
    );
    assert_eq!(snapshot["card"]["interfaces"].as_array().unwrap().len(), 2);
    // The fixture's interfaces name port 41243, not this server: not the card's origin.
    assert_eq!(snapshot["card"]["interfaces"][0]["same_origin"], false);

    // The request carried the version header and said who we are.
    let headers = &agent.requests(CARD)[0];
    assert_eq!(headers["a2a-version"], "1.0");
    assert!(
        headers["user-agent"]
            .to_str()
            .unwrap()
            .starts_with("cardgate/")
    );
    server.stop().await;
}

#[tokio::test]
async fn the_fixture_card_also_verifies_through_its_own_jku_when_served_at_its_origin() {
    // The fixture is real SDK traffic, signed over a protected header that names jku
    // http://127.0.0.1:41243/.well-known/jwks.json: the port is part of the signed bytes, so
    // this one test needs that port (required in CI, where nothing else holds it).
    let Some(agent) = CardServer::try_start_on("127.0.0.1:41243").await else {
        crate::support::skip(
            "the fixture's own jku",
            "port 41243 is in use",
            "CARDGATE_REQUIRE_SDK_AGENTS",
        );
        return;
    };
    agent.set(
        CARD,
        Reply::Json {
            body: fixture("signed/python-card.v-none.json"),
            etag: None,
        },
    );
    agent.set(
        "/.well-known/jwks.json",
        Reply::Json {
            body: fixture("signed/jwks.json"),
            etag: None,
        },
    );
    let db = TestDb::sqlite().await;
    let server = TestServer::start(db.target.clone()).await;
    let callee = server.register(&agent.origin()).await;
    assert_eq!(callee["card"]["signature"]["key_source"], "jku");
    assert_eq!(
        callee["card"]["signature"]["jku"],
        "http://127.0.0.1:41243/.well-known/jwks.json"
    );
    server.stop().await;
}

async fn conditional_refresh_gets_304_and_records_nothing_new(db: TestDb) {
    let agent = CardServer::start().await;
    agent.serve_signed_card(CARD, &agent.card("A", &["1.0"], json!({"streaming": true})));
    let server = TestServer::start(db.target.clone()).await;
    let id = server.register(&agent.origin()).await["id"]
        .as_str()
        .unwrap()
        .to_string();

    let (status, refresh) = server
        .post(&format!("/v1/callees/{id}/refresh"), json!({}))
        .await;
    assert_eq!(status, 200, "{refresh}");
    assert_eq!(refresh["status"], "unchanged");
    assert_eq!(refresh["events"], json!([]));
    assert!(refresh["snapshot_id"].is_null());
    let requests = agent.requests(CARD);
    assert_eq!(requests.len(), 2);
    let etag = requests[1]
        .get("if-none-match")
        .expect("a conditional request");
    assert!(etag.to_str().unwrap().starts_with('"'));
    let (_, cards) = server.get(&format!("/v1/callees/{id}/cards")).await;
    assert_eq!(cards["items"].as_array().unwrap().len(), 1);
    let (_, callee) = server.get(&format!("/v1/callees/{id}")).await;
    assert_eq!(callee["last_fetch"]["status"], "unchanged");
    server.stop().await;
}

async fn hostile_card_servers_are_refused_with_clear_reasons_and_bounded(db: TestDb) {
    let agent = CardServer::start().await;
    let elsewhere = CardServer::start().await;
    elsewhere.serve_signed_card(CARD, &elsewhere.card("Elsewhere", &["1.0"], json!({})));
    let server = TestServer::start(db.target.clone()).await;

    // 10 MiB: aborted at the cap, long before the server is done sending.
    agent.set("/huge", Reply::Huge(10 * 1024 * 1024));
    let msg = refused(&server, json!({"card_url": agent.url("/huge")})).await;
    assert!(
        msg.contains("sent more than 524288 bytes; the download was aborted"),
        "{msg}"
    );
    assert!(
        agent.streamed() < 4 * 1024 * 1024,
        "streamed {} bytes",
        agent.streamed()
    );

    agent.set("/slow", Reply::NeverFinishes);
    let msg = refused(&server, json!({"card_url": agent.url("/slow")})).await;
    assert!(msg.contains("did not finish answering within 2 s"), "{msg}");

    agent.set(
        "/metadata",
        Reply::Redirect("http://169.254.169.254/latest/meta-data/".into()),
    );
    let msg = refused(&server, json!({"card_url": agent.url("/metadata")})).await;
    assert!(
        msg.contains("169.254.169.254 is a link-local (169.254.0.0/16) address"),
        "{msg}"
    );

    agent.set("/elsewhere", Reply::Redirect(elsewhere.url(CARD)));
    let msg = refused(&server, json!({"card_url": agent.url("/elsewhere")})).await;
    assert!(msg.contains("on another origin"), "{msg}");

    for n in 0..5 {
        agent.set(
            &format!("/loop{n}"),
            Reply::Redirect(format!("/loop{}", n + 1)),
        );
    }
    let msg = refused(&server, json!({"card_url": agent.url("/loop0")})).await;
    assert!(msg.contains("redirected more than 3 times"), "{msg}");

    agent.set("/broken", Reply::Status(500));
    let msg = refused(&server, json!({"card_url": agent.url("/broken")})).await;
    assert!(msg.contains("answered HTTP 500"), "{msg}");

    let deep = format!("{}1{}", "[".repeat(300), "]".repeat(300));
    agent.set(
        "/deep",
        Reply::Json {
            body: deep.into_bytes(),
            etag: None,
        },
    );
    let msg = refused(&server, json!({"card_url": agent.url("/deep")})).await;
    assert!(
        msg.contains("not valid JSON") && msg.contains("recursion limit"),
        "{msg}"
    );

    // Neither well-known path exists.
    let msg = refused(
        &server,
        json!({"card_url": elsewhere.url("/nothing/here.json")}),
    )
    .await;
    assert!(msg.contains("answered HTTP 404"), "{msg}");
    server.stop().await;
}

async fn private_addresses_are_refused_after_dns_resolution(db: TestDb) {
    let agent = CardServer::start().await;
    agent.serve_signed_card(CARD, &agent.card("A", &["1.0"], json!({})));
    let port = agent.addr.port();

    // Loopback is allowed for the tests, but a name that resolves to a private address is not.
    let mut settings = test_settings(db.target.clone());
    let allowed = NetworkPolicy::parse_allowed("127.0.0.0/8").unwrap();
    settings.outbound.policy = NetworkPolicy::new(allowed)
        .with_override("private.test", vec!["10.0.0.7".parse::<IpAddr>().unwrap()])
        .with_override(
            "mixed.test",
            vec!["10.0.0.8".parse().unwrap(), "127.0.0.1".parse().unwrap()],
        );
    let server = TestServer::start_with(settings).await;
    let msg = refused(
        &server,
        json!({"card_url": format!("http://private.test:{port}/")}),
    )
    .await;
    assert!(
        msg.contains("private.test: resolves only to refused addresses (10.0.0.7 is a private"),
        "{msg}"
    );
    // A name with one allowed address connects to that one only (the refused one is never tried).
    let (status, body) = server
        .post(
            "/v1/callees",
            json!({"card_url": format!("http://mixed.test:{port}/")}),
        )
        .await;
    assert_eq!(
        status, 422,
        "the jku is on 127.0.0.1, another origin than mixed.test: {body}"
    );
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("not on the card's origin"),
        "{body}"
    );
    server.stop().await;

    // With the default policy, loopback itself is refused, by literal and by name.
    let mut settings = test_settings(db.target.clone());
    settings.outbound.policy = NetworkPolicy::default();
    let strict = TestServer::start_with(settings).await;
    let msg = refused(&strict, json!({"card_url": agent.origin()})).await;
    assert!(
        msg.contains("127.0.0.1 is a loopback (127.0.0.0/8) address"),
        "{msg}"
    );
    let msg = refused(
        &strict,
        json!({"card_url": format!("http://localhost:{port}/")}),
    )
    .await;
    assert!(
        msg.contains("localhost: resolves only to refused addresses"),
        "{msg}"
    );
    let msg = refused(
        &strict,
        json!({"card_url": format!("http://[::ffff:127.0.0.1]:{port}/")}),
    )
    .await;
    assert!(msg.contains("is a loopback"), "{msg}");
    strict.stop().await;
}

async fn cards_that_do_not_verify_are_refused(db: TestDb) {
    let agent = CardServer::start().await;
    let other = CardServer::start().await;
    let server = TestServer::start(db.target.clone()).await;
    let card = agent.card("A", &["1.0"], json!({}));

    agent.set_json("/unsigned.json", &card);
    let msg = refused(&server, json!({"card_url": agent.url("/unsigned.json")})).await;
    assert!(msg.contains("the card is unsigned"), "{msg}");

    let mut tampered = agent.serve_signed_card("/tampered.json", &card);
    tampered["name"] = "B".into();
    agent.set_json("/tampered.json", &tampered);
    let msg = refused(&server, json!({"card_url": agent.url("/tampered.json")})).await;
    assert!(
        msg.contains("signature is invalid") && msg.contains("does not verify"),
        "{msg}"
    );

    // jku on another origin (which does serve the key).
    other.set_json("/.well-known/jwks.json", &agent.key.jwks());
    let foreign = cardgate::domain::card::signature::sign_card(
        &card,
        &agent.key.private,
        "ES256",
        &agent.key.kid,
        Some(&other.url("/.well-known/jwks.json")),
    )
    .unwrap();
    agent.set_json("/foreign-jku.json", &foreign);
    let msg = refused(&server, json!({"card_url": agent.url("/foreign-jku.json")})).await;
    assert!(msg.contains("is not on the card's origin"), "{msg}");

    // jku on a private address.
    let private = cardgate::domain::card::signature::sign_card(
        &card,
        &agent.key.private,
        "ES256",
        &agent.key.kid,
        Some("http://169.254.169.254/jwks.json"),
    )
    .unwrap();
    agent.set_json("/private-jku.json", &private);
    let msg = refused(&server, json!({"card_url": agent.url("/private-jku.json")})).await;
    assert!(msg.contains("169.254.169.254 is a link-local"), "{msg}");

    // alg none and HS256 in the protected header.
    for alg in ["none", "HS256"] {
        let mut forged = agent.sign(&card);
        let header =
            json!({"alg": alg, "kid": agent.key.kid, "jku": agent.url("/.well-known/jwks.json")});
        forged["signatures"][0]["protected"] = base64_url(&header.to_string()).into();
        agent.set_json("/forged.json", &forged);
        let msg = refused(&server, json!({"card_url": agent.url("/forged.json")})).await;
        assert!(
            msg.contains(&format!("algorithm `{alg}` is not accepted")),
            "{msg}"
        );
    }

    // A JWKS of private keys is refused at registration.
    let private_keys = json!({"keys": [Value::Object(agent.key.private.as_ref().clone())]});
    let (status, body) = server
        .post(
            "/v1/callees",
            json!({"card_url": agent.url("/unsigned.json"), "trusted_keys": private_keys}),
        )
        .await;
    assert_eq!((status, error_code(&body)), (400, "invalid_body"), "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("unknown field `d`"),
        "{body}"
    );

    // So are keys the schema's constraints rule out: an empty `kid`, a key parameter that is
    // not unpadded base64url. Nothing is stored.
    let public = agent.key.jwks()["keys"][0].clone();
    let mut empty_kid = public.clone();
    empty_kid["kid"] = json!("");
    let mut padded_x = public.clone();
    padded_x["x"] = json!(format!("{}=", public["x"].as_str().unwrap()));
    for (keys, expected) in [
        (vec![empty_kid], "`kid` must be 1 to 100 characters"),
        (vec![padded_x], "keys[0].x is not unpadded base64url"),
        (
            vec![public.clone(); 21],
            "a JWKS holds at most 20 keys, not 21",
        ),
        (
            vec![json!(["EC", "k"])],
            "[0]: expected an object, found an array",
        ),
    ] {
        let (status, body) = server
            .post(
                "/v1/callees",
                json!({"card_url": agent.url("/unsigned.json"), "trusted_keys": {"keys": keys}}),
            )
            .await;
        assert_eq!(status, 400, "{body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains(expected), "{body}");
    }
    let (_, list) = server.get("/v1/callees").await;
    assert!(
        list["items"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| !c["card_url"].as_str().unwrap().ends_with("/unsigned.json")),
        "{list}"
    );
    server.stop().await;
}

async fn key_rotation_verifies_with_the_key_the_jku_still_serves(db: TestDb) {
    let agent = CardServer::start().await;
    let retired = TestKey::generate("retired");
    let card = agent.card("A", &["1.0"], json!({}));
    let jku = agent.url("/.well-known/jwks.json");
    let old = cardgate::domain::card::signature::sign_card(
        &card,
        &retired.private,
        "ES256",
        "retired",
        Some(&jku),
    )
    .unwrap();
    let both = agent.sign(&old);
    agent.set_json("/.well-known/jwks.json", &agent.key.jwks());
    agent.set_json(CARD, &both);
    let server = TestServer::start(db.target.clone()).await;
    let callee = server.register(&agent.origin()).await;
    assert_eq!(callee["card"]["signature"]["index"], 1);
    assert_eq!(callee["card"]["signature"]["kid"], "test-key-1");
    server.stop().await;
}

async fn unsigned_cards_are_admitted_only_when_the_operator_says_so_and_the_decision_says_so(
    db: TestDb,
) {
    let agent = CardServer::start().await;
    // A v0.2 card only at the legacy path.
    agent.set_json(
        "/.well-known/agent.json",
        &json!({"name": "Old", "url": agent.url("/rpc"), "capabilities": {}}),
    );
    let mut settings = test_settings(db.target.clone());
    settings.discovery.require_signed = false;
    let server = TestServer::start_with(settings).await;
    let callee = server.register(&agent.origin()).await;
    assert_eq!(callee["subjects"][0]["protocol_version"], "0.2");
    assert_eq!(callee["card"]["signature"]["status"], "unsigned");
    assert_eq!(callee["card"]["generation"], "v02");
    assert!(
        callee["card"]["url"]
            .as_str()
            .unwrap()
            .ends_with("/.well-known/agent.json")
    );
    let id = callee["id"].as_str().unwrap();
    let (_, decision) = server
        .get(&format!("/v1/trust?callee_id={id}&caller_version=0.2"))
        .await;
    let card_condition = &decision["conditions"][0];
    assert_eq!(card_condition["id"], "card-trusted");
    assert_eq!(card_condition["status"], "pass");
    assert!(
        card_condition["reason"]
            .as_str()
            .unwrap()
            .contains("unsigned"),
        "{card_condition}"
    );
    server.stop().await;
}

/// Marks a subject lifecycle-trusted as a passing probe would (the probe engine is tested on its own).
async fn promote(db: &TestDb, callee_id: &str, version: &str) {
    let event = NewEvent {
        callee_id: CalleeId(callee_id.parse().unwrap()),
        protocol_version: ProtocolVersion::parse_exact(version).unwrap(),
        body: EventBody::Promoted {
            probe_run_id: ProbeRunId::new(),
            probe_started_at: time::now(),
            probe_start_seq: None,
            rulebook: None,
        },
        actor: "test".into(),
    };
    db.store.append(&[event], time::now()).await.unwrap();
}

async fn refresh(server: &TestServer, id: &str) -> (String, Vec<String>) {
    let (status, body) = server
        .post(&format!("/v1/callees/{id}/refresh"), json!({}))
        .await;
    assert_eq!(status, 200, "{body}");
    let events = body["events"]
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
        .collect();
    (body["status"].as_str().unwrap().to_string(), events)
}

async fn gates(server: &TestServer, id: &str) -> Vec<(String, String, bool)> {
    let (_, callee) = server.get(&format!("/v1/callees/{id}")).await;
    callee["subjects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["protocol_version"].as_str().unwrap().to_string(),
                s["gate_state"].as_str().unwrap().to_string(),
                s["withdrawn"].as_bool().unwrap(),
            )
        })
        .collect()
}

fn g(v: &str, gate: &str, withdrawn: bool) -> (String, String, bool) {
    (v.into(), gate.into(), withdrawn)
}

async fn refresh_transitions_record_the_right_events_and_move_no_gate(db: TestDb) {
    let agent = CardServer::start().await;
    agent.serve_signed_card(CARD, &agent.card("A", &["1.0"], json!({"streaming": true})));
    let server = TestServer::start(db.target.clone()).await;
    let id = server.register(&agent.origin()).await["id"]
        .as_str()
        .unwrap()
        .to_string();
    promote(&db, &id, "1.0").await;

    // Republish: skills changed, same versions and interfaces. Kept as a snapshot; nothing a
    // subject depends on moved, so the ledger gets nothing and no gate moves.
    let mut card = agent.card("A", &["1.0"], json!({"streaming": true}));
    card["skills"][0]["name"] = "Echo v2".into();
    agent.serve_signed_card(CARD, &card);
    assert_eq!(refresh(&server, &id).await, ("fetched".into(), vec![]));
    // Republish: the interface moved. Recorded for its subject; still no gate moves.
    card["supportedInterfaces"][0]["tenant"] = "t2".into();
    agent.serve_signed_card(CARD, &card);
    assert_eq!(
        refresh(&server, &id).await,
        ("fetched".into(), vec!["1.0 card-republished".into()])
    );
    assert_eq!(
        gates(&server, &id).await,
        [g("1.0", "lifecycle-trusted", false)]
    );

    // A new version appears: a new card-trusted subject.
    agent.serve_signed_card(
        CARD,
        &agent.card("A", &["1.0", "1.1"], json!({"streaming": true})),
    );
    let (_, events) = refresh(&server, &id).await;
    assert_eq!(events, ["1.0 card-republished", "1.1 version-appeared"]);
    assert_eq!(
        gates(&server, &id).await,
        [
            g("1.0", "lifecycle-trusted", false),
            g("1.1", "card-trusted", false)
        ]
    );

    // A capability advertised for the first time: recorded, unverified until probed.
    agent.serve_signed_card(
        CARD,
        &agent.card(
            "A",
            &["1.0", "1.1"],
            json!({"streaming": true, "pushNotifications": true}),
        ),
    );
    let (_, events) = refresh(&server, &id).await;
    assert_eq!(
        events,
        [
            "1.0 card-republished",
            "1.0 capability-advertised",
            "1.1 card-republished",
            "1.1 capability-advertised"
        ]
    );
    // What a caller is told about it is driven by a real probe in
    // probes::a_capability_advertised_after_the_newest_probe_is_unknown_until_probed.

    // A version is withdrawn.
    agent.serve_signed_card(
        CARD,
        &agent.card(
            "A",
            &["1.0"],
            json!({"streaming": true, "pushNotifications": true}),
        ),
    );
    let (_, events) = refresh(&server, &id).await;
    assert_eq!(events, ["1.1 version-withdrawn"]);
    assert_eq!(
        gates(&server, &id).await,
        [
            g("1.0", "lifecycle-trusted", false),
            g("1.1", "card-trusted", true)
        ]
    );
    let (_, decision) = server
        .get(&format!("/v1/trust?callee_id={id}&caller_version=1.1"))
        .await;
    assert_eq!(
        decision["conditions"][1]["status"], "fail",
        "version-match: {decision}"
    );

    // The signature stops verifying: callers are told untrusted; the gate underneath stays.
    let mut broken = agent.sign(&agent.card(
        "A",
        &["1.0"],
        json!({"streaming": true, "pushNotifications": true}),
    ));
    broken["description"] = "changed after signing".into();
    agent.set_json(CARD, &broken);
    assert_eq!(
        refresh(&server, &id).await,
        ("untrusted".into(), vec!["1.0 card-untrusted".into()])
    );
    assert_eq!(
        gates(&server, &id).await,
        [g("1.0", "untrusted", false), g("1.1", "card-trusted", true)]
    );
    let (_, decision) = server
        .get(&format!("/v1/trust?callee_id={id}&caller_version=1.0"))
        .await;
    assert_eq!(decision["gate_state"], "untrusted");
    assert_eq!(decision["conditions"][0]["status"], "fail");
    // Refreshing the same broken card again does not repeat the event.
    assert_eq!(refresh(&server, &id).await, ("untrusted".into(), vec![]));

    // A good card again restores trust; the promotion was never lost.
    agent.serve_signed_card(
        CARD,
        &agent.card(
            "A",
            &["1.0"],
            json!({"streaming": true, "pushNotifications": true}),
        ),
    );
    let (_, events) = refresh(&server, &id).await;
    assert_eq!(events, ["1.0 card-trust-restored", "1.0 card-republished"]);
    assert_eq!(
        gates(&server, &id).await[0],
        g("1.0", "lifecycle-trusted", false)
    );
    let (_, verify) = server.get("/v1/ledger/verify").await;
    assert_eq!(verify["ok"], true);
    server.stop().await;
}

async fn a_failed_fetch_makes_subjects_untrusted_until_the_card_returns(db: TestDb) {
    let agent = CardServer::start().await;
    let signed = agent.serve_signed_card(CARD, &agent.card("A", &["1.0"], json!({})));
    let server = TestServer::start(db.target.clone()).await;
    let id = server.register(&agent.origin()).await["id"]
        .as_str()
        .unwrap()
        .to_string();

    agent.set(CARD, Reply::Status(503));
    assert_eq!(
        refresh(&server, &id).await,
        ("failed".into(), vec!["1.0 card-untrusted".into()])
    );
    let (_, callee) = server.get(&format!("/v1/callees/{id}")).await;
    assert_eq!(callee["last_fetch"]["status"], "failed");
    assert!(
        callee["last_fetch"]["error"]
            .as_str()
            .unwrap()
            .contains("503"),
        "{callee}"
    );
    assert_eq!(
        refresh(&server, &id).await,
        ("failed".into(), vec![]),
        "not spammed"
    );

    // The same card is back: a conditional 304 restores trust without a new snapshot.
    agent.set_json(CARD, &signed);
    assert_eq!(
        refresh(&server, &id).await,
        ("unchanged".into(), vec!["1.0 card-trust-restored".into()])
    );
    assert_eq!(gates(&server, &id).await, [g("1.0", "card-trusted", false)]);
    server.stop().await;
}

fn base64_url(text: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(text)
}

async fn pinning_keys_later_judges_the_same_card_afresh(db: TestDb) {
    let agent = CardServer::start().await;
    agent.serve_signed_card(CARD, &agent.card("A", &["1.0"], json!({})));
    let server = TestServer::start(db.target.clone()).await;
    let id = server.register(&agent.origin()).await["id"]
        .as_str()
        .unwrap()
        .to_string();

    // Pin a key the card was not signed with: the same bytes no longer verify.
    let other = TestKey::generate("other");
    let (status, outcome) = server
        .put(
            &format!("/v1/callees/{id}/trusted-keys"),
            json!({"trusted_keys": other.jwks()}),
        )
        .await;
    assert_eq!(status, 200, "{outcome}");
    assert_eq!(outcome["status"], "untrusted");
    assert!(
        outcome["error"]
            .as_str()
            .unwrap()
            .contains("no key with kid `test-key-1` in pinned trusted_keys"),
        "{outcome}"
    );
    assert_eq!(outcome["events"][0]["kind"], "card-untrusted");

    // Pin the right key: verified with the pinned key, trust restored.
    let (_, outcome) = server
        .put(
            &format!("/v1/callees/{id}/trusted-keys"),
            json!({"trusted_keys": agent.key.jwks()}),
        )
        .await;
    assert_eq!(outcome["status"], "fetched", "{outcome}");
    assert_eq!(outcome["events"][0]["kind"], "card-trust-restored");
    let (_, callee) = server.get(&format!("/v1/callees/{id}")).await;
    assert_eq!(callee["card"]["signature"]["key_source"], "pinned");
    assert_eq!(callee["trusted_keys_pinned"], true);

    // Clearing the pin goes back to the jku.
    let (_, outcome) = server
        .put(
            &format!("/v1/callees/{id}/trusted-keys"),
            json!({"trusted_keys": null}),
        )
        .await;
    assert_eq!(outcome["status"], "fetched");
    let (_, callee) = server.get(&format!("/v1/callees/{id}")).await;
    assert_eq!(callee["card"]["signature"]["key_source"], "jku");

    let (status, body) = server
        .put(
            &format!("/v1/callees/{id}/trusted-keys"),
            json!({"trusted_keys": {"keys": 5}}),
        )
        .await;
    assert_eq!((status, error_code(&body)), (400, "invalid_body"));
    server.stop().await;
}
