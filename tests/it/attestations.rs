//! Verdicts that travel: a demotion's attestation is an in-toto Statement v1 in a DSSE
//! envelope that a verifier written from the DSSE specification (Python, with the
//! `cryptography` package) accepts; its subject digest is the sha256 of the card bytes the agent
//! serves; its ledger event has an RFC 9162 inclusion proof in the checkpoint it names; and
//! `cardgate verify --attestation` says the same, and refuses a touched one.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use cardgate::fake_agent::{Behaviour, FakeAgent, FakeAgentConfig};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::probes::{events, probe, register};
use crate::support::{TestDb, TestServer, on_both_backends, run_cardgate, test_python};

on_both_backends!(a_demotion_is_attested_in_a_form_anyone_can_check);

/// DSSE v1 verification as the specification (protocol.md) has it, against a JWK Set of
/// Ed25519 keys; prints the statement when one signature verifies.
const DSSE_VERIFIER: &str = r#"
import base64, json, sys
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

envelope = json.load(open(sys.argv[1]))
jwks = json.load(open(sys.argv[2]))

def pae(payload_type: str, body: bytes) -> bytes:
    t = payload_type.encode()
    return b"DSSEv1 %d %s %d %s" % (len(t), t, len(body), body)

def b64url(s: str) -> bytes:
    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))

body = base64.b64decode(envelope["payload"], validate=True)
message = pae(envelope["payloadType"], body)
keys = {k["kid"]: Ed25519PublicKey.from_public_bytes(b64url(k["x"])) for k in jwks["keys"] if k["crv"] == "Ed25519"}
ok = False
for s in envelope["signatures"]:
    key = keys.get(s["keyid"])
    if key is None:
        continue
    try:
        key.verify(base64.b64decode(s["sig"]), message)
        ok = True
    except Exception:
        pass
if not ok:
    print("REJECTED")
    sys.exit(1)
statement = json.loads(body)
assert envelope["payloadType"] == "application/vnd.in-toto+json"
assert statement["_type"] == "https://in-toto.io/Statement/v1"
print(json.dumps(statement))
"#;

/// The independent verifier's answer: the statement, or `None` when it rejects the envelope.
async fn verified_by_the_reference(envelope: &Value, jwks: &Value) -> Option<Value> {
    let python = test_python("the DSSE reference check")?;
    let dir = tempfile::tempdir().unwrap();
    let (env_path, jwks_path) = (dir.path().join("env.json"), dir.path().join("jwks.json"));
    std::fs::write(&env_path, envelope.to_string()).unwrap();
    std::fs::write(&jwks_path, jwks.to_string()).unwrap();
    let out = tokio::process::Command::new(python)
        .arg("-c")
        .arg(DSSE_VERIFIER)
        .arg(&env_path)
        .arg(&jwks_path)
        .output()
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    if out.status.success() {
        Some(serde_json::from_str(&text).unwrap())
    } else {
        assert!(
            text.contains("REJECTED"),
            "{text} {}",
            String::from_utf8_lossy(&out.stderr)
        );
        None
    }
}

async fn a_demotion_is_attested_in_a_form_anyone_can_check(db: TestDb) {
    let agent = FakeAgent::start(FakeAgentConfig::default(), Behaviour::Conformant)
        .await
        .unwrap();
    let server = TestServer::start(db.target.clone()).await;
    let receiver = crate::webhooks::Receiver::start(vec![204]).await;
    let (status, _) = server
        .post(
            "/v1/subscriptions",
            json!({"url": receiver.url, "events": ["subject.demoted"]}),
        )
        .await;
    assert_eq!(status, 201);
    let callee = register(&server, &agent.origin(), json!({})).await;
    assert_eq!(
        events(&probe(&server, &callee, "1.0").await),
        ["probe-finished", "promoted"]
    );
    agent.set_behaviour(Behaviour::NoTerminalTimestamp);
    let run = probe(&server, &callee, "1.0").await;
    assert_eq!(events(&run), ["probe-finished", "demoted"]);

    // The demotion's webhook carries its attestation, resting on that very event.
    let demoted = crate::webhooks::wait_for(&receiver, |b| b["type"] == "subject.demoted").await;
    let body = demoted.json();
    let pushed: Value = serde_json::from_slice(
        &STANDARD
            .decode(body["data"]["attestation"]["payload"].as_str().unwrap())
            .unwrap(),
    )
    .unwrap();
    assert_eq!(
        pushed["predicate"]["ledger"]["seq"], body["data"]["event"]["seq"],
        "{body:#}"
    );
    assert_eq!(pushed["predicate"]["gate_state"], "demoted");
    let parsed: cardgate::http::subscriptions::WebhookPayload =
        serde_json::from_value(body.clone()).unwrap_or_else(|e| panic!("{e}: {body}"));
    assert!(parsed.data.event().unwrap().attestation.is_some());

    // The event stream carries it too.
    let stream = server
        .client
        .get(server.url(&format!("/v1/events?callee_id={callee}&types=demoted")))
        .send()
        .await
        .unwrap();
    let mut reader = cardgate::remote::sse::SseReader::new(
        stream,
        cardgate::remote::sse::SseLimits {
            max_event_bytes: 256 * 1024,
            max_events: 10,
            idle: std::time::Duration::from_secs(10),
            deadline: tokio::time::Instant::now() + std::time::Duration::from_secs(20),
        },
    );
    let frame = reader.next().await.expect("the demotion");
    let streamed: Value = serde_json::from_str(&frame.data).unwrap();
    assert_eq!(streamed["kind"], "demoted");
    assert_eq!(
        streamed["attestation"], body["data"]["attestation"],
        "the same kept attestation: {streamed:#}"
    );

    let (status, envelope) = server
        .get(&format!("/v1/callees/{callee}/subjects/1.0/attestation"))
        .await;
    assert_eq!(status, 200, "{envelope}");
    let (_, jwks) = server.get("/.well-known/jwks.json").await;
    let statement: Value = serde_json::from_slice(
        &STANDARD
            .decode(envelope["payload"].as_str().unwrap())
            .unwrap(),
    )
    .unwrap();
    let predicate = &statement["predicate"];
    assert_eq!(
        statement["predicateType"],
        "https://cardgate.dev/attestation/trust-verdict/v1"
    );
    assert_eq!(predicate["gate_state"], "demoted", "{predicate:#}");
    assert_eq!(predicate["demotion_classes"], json!(["timestamp"]));
    assert_eq!(predicate["ledger"]["kind"], "demoted");
    assert_eq!(predicate["probe_run"]["id"], run["id"]);
    // It names the rules: those in force, and those the run's findings were judged under.
    let (_, book) = server.get("/v1/rulebook").await;
    assert_eq!(predicate["rulebook"], book["version"], "{predicate:#}");
    assert_eq!(predicate["probe_run"]["rulebook"], book["version"]);
    // The predicate has exactly the fields its published schema requires.
    let schema: Value = serde_json::from_str(
        &std::fs::read_to_string(crate::support::repo_path(
            "docs/attestation/trust-verdict-v1.schema.json",
        ))
        .unwrap(),
    )
    .unwrap();
    let mut required: Vec<&str> = schema["required"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k.as_str().unwrap())
        .collect();
    let mut present: Vec<&str> = predicate
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    required.sort_unstable();
    present.sort_unstable();
    assert_eq!(present, required);
    assert!(
        predicate["findings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["code"] == "LC-TERMINAL-NO-TIMESTAMP" && f["status"] == "fail"),
        "{predicate:#}"
    );
    let postures: Vec<(&Value, &Value)> = predicate["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| (&d["posture"]["dedup"], &d["authoritative"]))
        .collect();
    assert_eq!(
        postures,
        [
            (&json!("timestamp"), &json!(false)),
            (&json!("none"), &json!(true))
        ]
    );

    // The subject: the card bytes the agent serves, by their sha256.
    let served = reqwest::get(format!("{}/.well-known/agent-card.json", agent.origin()))
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    let card = &statement["subject"][0];
    assert_eq!(
        card["digest"]["sha256"],
        hex::encode(Sha256::digest(&served)),
        "{statement:#}"
    );
    assert!(
        card["name"]
            .as_str()
            .unwrap()
            .ends_with("/.well-known/agent-card.json")
    );
    assert!(
        statement["subject"][1]["name"]
            .as_str()
            .unwrap()
            .contains(run["id"].as_str().unwrap())
    );

    // An independent DSSE verifier accepts it and reads the same statement.
    if let Some(read) = verified_by_the_reference(&envelope, &jwks).await {
        assert_eq!(read, statement);
        let mut touched = envelope.clone();
        let mut other = statement.clone();
        other["predicate"]["gate_state"] = "lifecycle-trusted".into();
        touched["payload"] = STANDARD.encode(other.to_string()).into();
        assert_eq!(verified_by_the_reference(&touched, &jwks).await, None);
    }

    // The ledger event is in the checkpoint the predicate names (RFC 9162 inclusion proof).
    let (seq, size) = (
        predicate["ledger"]["seq"].as_u64().unwrap(),
        predicate["checkpoint"]["tree_size"].as_u64().unwrap(),
    );
    let (status, proof) = server
        .get(&format!("/v1/ledger/proof?seq={seq}&tree_size={size}"))
        .await;
    assert_eq!(status, 200, "{proof}");
    let root = crate::transparency::root_from_path(
        seq - 1,
        size,
        crate::transparency::event_leaf(predicate["ledger"]["hash"].as_str().unwrap()),
        &crate::transparency::b64_all(&proof["audit_path"]),
    );
    assert_eq!(
        root.map(|r| STANDARD.encode(r)).as_deref(),
        predicate["checkpoint"]["root_hash"].as_str()
    );

    // The CLI checks all of it offline, and refuses a touched envelope.
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, value: &Value| {
        let path = dir.path().join(name);
        std::fs::write(&path, value.to_string()).unwrap();
        path.to_string_lossy().to_string()
    };
    let (env_file, jwks_file, proof_file) = (
        write("a.json", &envelope),
        write("jwks.json", &jwks),
        write("p.json", &proof),
    );
    let (code, text) = run_cardgate(
        &[
            "verify",
            "--attestation",
            &env_file,
            "--jwks",
            &jwks_file,
            "--proof",
            &proof_file,
        ],
        &[],
    )
    .await;
    assert_eq!(code, 0, "{text}");
    assert!(
        text.contains("is demoted") && text.contains("evidence verified"),
        "{text}"
    );
    let mut touched = envelope.clone();
    touched["signatures"][0]["sig"] = STANDARD.encode([0u8; 64]).into();
    let bad = write("bad.json", &touched);
    let (code, text) = run_cardgate(
        &["verify", "--attestation", &bad, "--jwks", &jwks_file],
        &[],
    )
    .await;
    assert_eq!(code, 1, "{text}");

    let (status, missing) = server
        .get(&format!("/v1/callees/{callee}/subjects/0.3/attestation"))
        .await;
    assert_eq!(status, 404, "{missing}");

    // One kept for the promotion and one for the demotion, in ledger order, each resting on
    // its own event; paged by seq.
    let (status, page) = server
        .get(&format!("/v1/attestations?callee_id={callee}"))
        .await;
    assert_eq!(status, 200, "{page}");
    let items = page["items"].as_array().unwrap();
    let kinds: Vec<&str> = items.iter().map(|a| a["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["promoted", "demoted"], "{page:#}");
    for item in items {
        let kept = verified_by_the_reference(&item["envelope"], &jwks).await;
        let kept = kept.unwrap_or_else(|| {
            serde_json::from_slice(
                &STANDARD
                    .decode(item["envelope"]["payload"].as_str().unwrap())
                    .unwrap(),
            )
            .unwrap()
        });
        assert_eq!(kept["predicate"]["ledger"]["seq"], item["seq"], "{kept:#}");
        assert_eq!(kept["predicate"]["ledger"]["kind"], item["kind"]);
    }
    let demotion_seq = items[1]["seq"].as_i64().unwrap();
    assert_eq!(
        demotion_seq as u64, seq,
        "the demotion is the last gate change"
    );
    let (_, rest) = server
        .get(&format!(
            "/v1/attestations?after={}&limit=1",
            items[0]["seq"]
        ))
        .await;
    assert_eq!(rest["items"][0]["seq"], demotion_seq, "{rest:#}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_public_switch_opens_the_transparency_surface_limited_per_address() {
    let agent = FakeAgent::start(FakeAgentConfig::default(), Behaviour::Conformant)
        .await
        .unwrap();
    for public in [false, true] {
        let db = TestDb::sqlite().await;
        let mut settings = crate::support::test_settings(db.target.clone());
        settings.auth.public_transparency = public;
        settings.auth.anonymous_burst = 12.0;
        settings.auth.anonymous_per_sec = 0.01;
        let server = TestServer::start_with(settings).await;
        let callee = register(&server, &agent.origin(), json!({})).await;
        probe(&server, &callee, "1.0").await;
        let (_, head) = server.get("/v1/ledger/checkpoint").await;
        let size = head["tree_size"].as_u64().unwrap();
        let paths = [
            "/v1/ledger/checkpoint".to_string(),
            "/v1/attestations".to_string(),
            "/v1/ledger/checkpoints".to_string(),
            format!("/v1/ledger/proof?seq=1&tree_size={size}"),
            format!("/v1/ledger/consistency?first=1&second={size}"),
            format!("/v1/callees/{callee}/subjects/1.0/attestation"),
        ];
        let anonymous = reqwest::Client::new();
        for path in &paths {
            let status = anonymous
                .get(server.url(path))
                .send()
                .await
                .unwrap()
                .status();
            let expected = if public { 200 } else { 401 };
            assert_eq!(status.as_u16(), expected, "public={public} {path}");
        }
        // What stays private stays private.
        let status = anonymous
            .get(server.url(&format!("/v1/callees/{callee}")))
            .send()
            .await
            .unwrap()
            .status();
        assert_eq!(status.as_u16(), 401, "public={public}");
        if public {
            // All of it verifies with what anyone can fetch: the envelope, the key set and
            // the inclusion proof of the event it rests on.
            let anon_json = |path: String| {
                let anonymous = anonymous.clone();
                let url = server.url(&path);
                async move {
                    let r = anonymous.get(url).send().await.unwrap();
                    assert_eq!(r.status().as_u16(), 200, "{path}");
                    r.json::<Value>().await.unwrap()
                }
            };
            let envelope =
                anon_json(format!("/v1/callees/{callee}/subjects/1.0/attestation")).await;
            let jwks = anon_json("/.well-known/jwks.json".into()).await;
            let statement: Value = serde_json::from_slice(
                &STANDARD
                    .decode(envelope["payload"].as_str().unwrap())
                    .unwrap(),
            )
            .unwrap();
            let p = &statement["predicate"];
            let proof = anon_json(format!(
                "/v1/ledger/proof?seq={}&tree_size={}",
                p["ledger"]["seq"], p["checkpoint"]["tree_size"]
            ))
            .await;
            let dir = tempfile::tempdir().unwrap();
            let write = |name: &str, value: &Value| {
                let path = dir.path().join(name);
                std::fs::write(&path, value.to_string()).unwrap();
                path.to_string_lossy().to_string()
            };
            let (code, text) = run_cardgate(
                &[
                    "verify",
                    "--attestation",
                    &write("a.json", &envelope),
                    "--jwks",
                    &write("j.json", &jwks),
                    "--proof",
                    &write("p.json", &proof),
                ],
                &[],
            )
            .await;
            assert_eq!(code, 0, "{text}");
            // Past the per-address budget: 429 before any lookup.
            let mut statuses = Vec::new();
            for _ in 0..10 {
                let r = anonymous.get(server.url(&paths[0])).send().await.unwrap();
                statuses.push(r.status().as_u16());
            }
            assert!(statuses.contains(&429), "{statuses:?}");
        }
        server.stop().await;
    }
}
