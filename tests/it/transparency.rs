//! The verifiable ledger from outside, on both backends: receipts checked with an independent
//! JOSE library (jsonwebtoken), signed notes with aws-lc-rs, proofs by a verifier written here
//! from RFC 9162's recursive definitions (not the iterative algorithm cardgate uses); and every
//! kind of tampering caught by consistency with an earlier checkpoint.

use std::path::Path;

use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use cardgate::domain::ids::SnapshotId;
use cardgate::domain::ledger::{EventBody, EventRecord, NewEvent};
use cardgate::domain::version::ProtocolVersion;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::support::cards::CardServer;
use crate::support::{TestDb, TestServer, error_code, on_both_backends, test_settings};

on_both_backends!(
    receipts_proofs_and_checkpoints_verify_independently,
    verify_under_concurrent_writers_reports_nothing_that_is_not_there,
    a_deleted_tail_is_caught,
    an_edited_event_is_caught_though_the_chain_was_rehashed,
    a_rewritten_suffix_is_caught,
);

// RFC 9162 §2.1, from the definitions.

pub(crate) type Hash = [u8; 32];

fn leaf(data: &[u8]) -> Hash {
    Sha256::new()
        .chain_update([0])
        .chain_update(data)
        .finalize()
        .into()
}

fn node(left: &Hash, right: &Hash) -> Hash {
    Sha256::new()
        .chain_update([1])
        .chain_update(left)
        .chain_update(right)
        .finalize()
        .into()
}

/// The largest power of two smaller than `n`.
fn split(n: u64) -> u64 {
    let mut k = 1;
    while k * 2 < n {
        k *= 2;
    }
    k
}

/// `MTH(D[n])`.
fn mth(leaves: &[Hash]) -> Hash {
    match leaves.len() {
        0 => Sha256::digest([]).into(),
        1 => leaves[0],
        n => {
            let k = split(n as u64) as usize;
            node(&mth(&leaves[..k]), &mth(&leaves[k..]))
        }
    }
}

/// The root an inclusion path leads to, by `PATH(m, D[n])`'s recursion: its last element is
/// the sibling at the top of the tree.
pub(crate) fn root_from_path(index: u64, size: u64, leaf: Hash, path: &[Hash]) -> Option<Hash> {
    if size == 1 {
        return path.is_empty().then_some(leaf);
    }
    let (top, rest) = path.split_last()?;
    let k = split(size);
    if index < k {
        Some(node(&root_from_path(index, k, leaf, rest)?, top))
    } else {
        Some(node(top, &root_from_path(index - k, size - k, leaf, rest)?))
    }
}

/// The (first, second) roots a consistency proof leads to, by `SUBPROOF(m, D[n], b)`'s
/// recursion.
fn roots_from_consistency(
    m: u64,
    n: u64,
    whole: bool,
    first_root: &Hash,
    proof: &[Hash],
) -> Option<(Hash, Hash)> {
    if m == n {
        return if whole {
            proof.is_empty().then_some((*first_root, *first_root))
        } else {
            (proof.len() == 1).then_some((proof[0], proof[0]))
        };
    }
    let (top, rest) = proof.split_last()?;
    let k = split(n);
    if m <= k {
        let (old, new) = roots_from_consistency(m, k, whole, first_root, rest)?;
        Some((old, node(&new, top)))
    } else {
        let (old, new) = roots_from_consistency(m - k, n - k, false, first_root, rest)?;
        Some((node(top, &old), node(top, &new)))
    }
}

fn consistent(
    first: u64,
    second: u64,
    first_root: &Hash,
    second_root: &Hash,
    proof: &[Hash],
) -> bool {
    if first == 0 {
        return proof.is_empty();
    }
    roots_from_consistency(first, second, true, first_root, proof)
        == Some((*first_root, *second_root))
}

fn b64(value: &Value) -> Hash {
    STANDARD
        .decode(value.as_str().unwrap())
        .unwrap()
        .try_into()
        .unwrap()
}

pub(crate) fn b64_all(value: &Value) -> Vec<Hash> {
    value.as_array().unwrap().iter().map(b64).collect()
}

pub(crate) fn event_leaf(hash_hex: &str) -> Hash {
    leaf(&hex::decode(hash_hex).unwrap())
}

/// Every event's leaf hash, read through the API.
async fn ledger_leaves(server: &TestServer) -> Vec<Hash> {
    let mut leaves = Vec::new();
    let mut after = 0;
    loop {
        let (status, page) = server
            .get(&format!("/v1/ledger?after={after}&limit=200"))
            .await;
        assert_eq!(status, 200);
        for event in page["items"].as_array().unwrap() {
            leaves.push(event_leaf(event["hash"].as_str().unwrap()));
        }
        match page["next"].as_i64() {
            Some(next) => after = next,
            None => return leaves,
        }
    }
}

/// The key set, fetched without credentials (it is public).
async fn jwks(server: &TestServer) -> Value {
    let response = reqwest::get(server.url("/.well-known/jwks.json"))
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    response.json().await.unwrap()
}

/// Checks a checkpoint's signed note with aws-lc-rs against the key set, computing the C2SP
/// key ID here; returns (origin, size, root) as the note states them.
fn open_note(checkpoint: &Value, jwks: &Value) -> (String, u64, Hash) {
    let note = checkpoint["note"].as_str().unwrap();
    let (body, signature) = note.split_once("\n\n").expect("a blank line");
    let body = format!("{body}\n");
    let lines: Vec<&str> = body.lines().collect();
    assert_eq!(lines.len(), 3, "{note}");
    let (origin, size, root) = (lines[0], lines[1].parse::<u64>().unwrap(), lines[2]);
    let line = signature.strip_suffix('\n').unwrap();
    let rest = line.strip_prefix("\u{2014} ").expect("an em dash");
    let (name, blob) = rest.split_once(' ').unwrap();
    assert_eq!(name, origin);
    let blob = STANDARD.decode(blob).unwrap();
    let key = jwks["keys"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["kid"] == checkpoint["kid"])
        .expect("the checkpoint's kid is in the key set");
    let public = URL_SAFE_NO_PAD.decode(key["x"].as_str().unwrap()).unwrap();
    let key_id = Sha256::new()
        .chain_update(name.as_bytes())
        .chain_update([0x0A, 0x01])
        .chain_update(&public)
        .finalize();
    assert_eq!(blob[..4], key_id[..4], "the C2SP key ID");
    aws_lc_rs::signature::UnparsedPublicKey::new(&aws_lc_rs::signature::ED25519, &public)
        .verify(body.as_bytes(), &blob[4..])
        .expect("the note's Ed25519 signature verifies");
    assert_eq!(checkpoint["tree_size"], size);
    assert_eq!(checkpoint["root_hash"], root);
    (origin.to_string(), size, b64(&json!(root)))
}

/// Checks a receipt with jsonwebtoken (not josekit) against the key set; returns the payload.
fn open_receipt(jws: &str, jwks: &Value) -> Value {
    let header = jsonwebtoken::decode_header(jws).unwrap();
    assert_eq!(header.alg, jsonwebtoken::Algorithm::EdDSA);
    assert_eq!(header.typ.as_deref(), Some("cardgate-receipt+jws"));
    let kid = header.kid.expect("a kid");
    let key = jwks["keys"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["kid"] == kid.as_str())
        .expect("the receipt's kid is in the key set");
    let decoding =
        jsonwebtoken::DecodingKey::from_ed_components(key["x"].as_str().unwrap()).unwrap();
    let mut validation = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::EdDSA);
    validation.required_spec_claims.clear();
    validation.validate_exp = false;
    validation.validate_aud = false;
    jsonwebtoken::decode::<Value>(jws, &decoding, &validation)
        .expect("the receipt's signature verifies")
        .claims
}

/// Registers `n` agents with signed cards (two ledger events each, or so).
async fn register_agents(
    server: &TestServer,
    agents: &CardServer,
    from: usize,
    n: usize,
) -> Vec<String> {
    let mut ids = Vec::new();
    for i in from..from + n {
        let card = agents.card(&format!("Agent {i}"), &["1.0"], json!({"streaming": true}));
        let path = format!("/agents/{i}/agent-card.json");
        agents.serve_signed_card(&path, &card);
        let created = server.register(&agents.url(&path)).await;
        ids.push(created["id"].as_str().unwrap().to_string());
    }
    ids
}

/// `GET /v1/ledger/verify` polled while four writers append (registrations, checkpoints every
/// second) judges one state each time: never a problem that is not there.
async fn verify_under_concurrent_writers_reports_nothing_that_is_not_there(db: TestDb) {
    let mut settings = test_settings(db.target.clone());
    settings.schedule.checkpoint = "* * * * * *".parse().unwrap();
    let server = std::sync::Arc::new(TestServer::start_with(settings).await);
    let agents = std::sync::Arc::new(CardServer::start().await);
    let writers: Vec<_> = (0..4)
        .map(|w| {
            let (server, agents) = (server.clone(), agents.clone());
            tokio::spawn(async move { register_agents(&server, &agents, w * 100, 12).await })
        })
        .collect();
    let mut polls = 0;
    let mut heads = Vec::new();
    while !writers.iter().all(|w| w.is_finished()) {
        let (status, verify) = server.get("/v1/ledger/verify").await;
        assert_eq!(status, 200, "{verify}");
        assert_eq!(verify["ok"], true, "poll {polls}: {verify:#}");
        heads.push(verify["head_seq"].as_i64().unwrap());
        polls += 1;
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    for writer in writers {
        assert_eq!(writer.await.unwrap().len(), 12);
    }
    assert!(
        polls >= 3,
        "the writers finished before verify was polled enough ({polls})"
    );
    assert!(heads.windows(2).all(|w| w[0] <= w[1]), "{heads:?}");
    let (_, verify) = server.get("/v1/ledger/verify").await;
    assert_eq!(verify["ok"], true, "{verify:#}");
    assert_eq!(verify["subjects_checked"], 48, "{verify:#}");
}

async fn cardgate(args: &[&str]) -> (i32, String) {
    crate::support::run_cardgate(args, &[]).await
}

fn write(dir: &Path, name: &str, value: &Value) -> String {
    let path = dir.join(name);
    std::fs::write(&path, serde_json::to_vec_pretty(value).unwrap()).unwrap();
    path.display().to_string()
}

async fn receipts_proofs_and_checkpoints_verify_independently(db: TestDb) {
    let server = TestServer::start(db.target.clone()).await;
    let agents = CardServer::start().await;
    let ids = register_agents(&server, &agents, 0, 3).await;
    let keys = jwks(&server).await;
    assert_eq!(keys["keys"][0]["kty"], "OKP");
    assert_eq!(keys["keys"][0]["crv"], "Ed25519");

    // The receipt: the answer itself, signed with a checkpoint that contains its evidence.
    let (status, mut answer) = server
        .get(&format!(
            "/v1/trust?callee_id={}&caller_version=1.0&receipt=true",
            ids[1]
        ))
        .await;
    assert_eq!(status, 200, "{answer}");
    let jws = answer.as_object_mut().unwrap().remove("receipt").unwrap();
    let payload = open_receipt(jws.as_str().unwrap(), &keys);
    assert_eq!(
        payload["decision"], answer,
        "the receipt signs the answer as given"
    );
    assert!(payload["issued_at"].is_string());
    let seq = answer["evidence"]["ledger_seq"].as_u64().unwrap();
    let size = payload["checkpoint"]["tree_size"].as_u64().unwrap();
    assert!(
        seq >= 1 && seq <= size,
        "evidence {seq} in a tree of {size}"
    );
    let root = b64(&payload["checkpoint"]["root_hash"]);
    let leaves = ledger_leaves(&server).await;
    assert_eq!(
        mth(&leaves[..size as usize]),
        root,
        "the receipt's root is the ledger's"
    );

    // The evidence's inclusion proof, checked by this file's verifier.
    let (status, proof) = server
        .get(&format!("/v1/ledger/proof?seq={seq}&tree_size={size}"))
        .await;
    assert_eq!(status, 200, "{proof}");
    assert_eq!(
        (proof["leaf_index"].as_u64(), proof["tree_size"].as_u64()),
        (Some(seq - 1), Some(size))
    );
    let evidence_leaf = event_leaf(answer["evidence"]["ledger_hash"].as_str().unwrap());
    assert_eq!(evidence_leaf, leaves[seq as usize - 1]);
    let path = b64_all(&proof["audit_path"]);
    assert_eq!(
        root_from_path(seq - 1, size, evidence_leaf, &path),
        Some(root)
    );

    // The offline CLI agrees, and refuses an edited answer.
    let dir = tempfile::tempdir().unwrap();
    let mut kept = answer.clone();
    kept["receipt"] = jws.clone();
    let receipt_file = write(dir.path(), "receipt.json", &kept);
    let jwks_file = write(dir.path(), "jwks.json", &keys);
    let proof_file = write(dir.path(), "proof.json", &proof);
    let (code, out) = cardgate(&[
        "verify",
        &receipt_file,
        "--jwks",
        &jwks_file,
        "--proof",
        &proof_file,
    ])
    .await;
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("evidence verified"), "{out}");
    kept["authoritative"] = json!(!answer["authoritative"].as_bool().unwrap());
    let edited = write(dir.path(), "edited.json", &kept);
    let (code, out) = cardgate(&["verify", &edited, "--jwks", &jwks_file]).await;
    assert_eq!(code, 1, "{out}");

    // Checkpoints: signed notes over the whole tree, consistent with each other.
    let (status, first) = server.get("/v1/ledger/checkpoint").await;
    assert_eq!(status, 200, "{first}");
    let (origin, first_size, first_root) = open_note(&first, &keys);
    assert_eq!(
        first_root,
        mth(&ledger_leaves(&server).await[..first_size as usize])
    );
    register_agents(&server, &agents, 3, 2).await;
    // More history, appended in batches of several sizes: each batch grows the tree in its
    // own transaction, completing nodes across batch boundaries.
    let callee = cardgate::domain::ids::CalleeId(ids[0].parse().unwrap());
    for batch in [1, 2, 5, 13, 21] {
        let events: Vec<NewEvent> = (0..batch)
            .map(|n| NewEvent {
                callee_id: callee,
                protocol_version: ProtocolVersion::new(1, 0),
                body: EventBody::CardRepublished {
                    snapshot_id: SnapshotId::new(),
                    sha256: format!("{n:064x}"),
                },
                actor: "system".into(),
            })
            .collect();
        db.store.append(&events, chrono::Utc::now()).await.unwrap();
    }
    let (_, second) = server.get("/v1/ledger/checkpoint").await;
    let (origin2, second_size, second_root) = open_note(&second, &keys);
    assert_eq!(origin, origin2);
    assert!(second_size > first_size);
    let leaves = ledger_leaves(&server).await;
    assert_eq!(second_root, mth(&leaves));

    // Every consistency proof into the newer tree, and every inclusion proof in it.
    for m in 0..=second_size {
        let (status, body) = server
            .get(&format!(
                "/v1/ledger/consistency?first={m}&second={second_size}"
            ))
            .await;
        assert_eq!(status, 200, "{body}");
        let proof = b64_all(&body["proof"]);
        let old = mth(&leaves[..m as usize]);
        assert!(
            consistent(m, second_size, &old, &second_root, &proof),
            "PROOF({m}, D[{second_size}])"
        );
        if m > 0 && m < second_size {
            assert!(!consistent(
                m,
                second_size,
                &leaf(b"forged"),
                &second_root,
                &proof
            ));
        }
    }
    for seq in 1..=second_size {
        let (_, body) = server.get(&format!("/v1/ledger/proof?seq={seq}")).await;
        let path = b64_all(&body["audit_path"]);
        let leaf_hash = leaves[seq as usize - 1];
        assert_eq!(
            root_from_path(seq - 1, second_size, leaf_hash, &path),
            Some(second_root),
            "seq {seq}"
        );
    }
    let (_, consistency) = server
        .get(&format!(
            "/v1/ledger/consistency?first={first_size}&second={second_size}"
        ))
        .await;
    let (code, out) = cardgate(&[
        "verify-ledger",
        "--from",
        &write(dir.path(), "a.json", &first),
        "--to",
        &write(dir.path(), "b.json", &second),
        "--jwks",
        &jwks_file,
        "--proof",
        &write(dir.path(), "c.json", &consistency),
    ])
    .await;
    assert_eq!(code, 0, "{out}");

    // Bad questions get clear answers.
    for (query, status, code) in [
        ("/v1/ledger/proof?seq=0", 400, "invalid_request"),
        (
            &format!("/v1/ledger/proof?seq={}", second_size + 1),
            400,
            "invalid_request",
        ),
        (
            &format!("/v1/ledger/proof?seq=1&tree_size={}", second_size + 5),
            409,
            "conflict",
        ),
        (
            "/v1/ledger/consistency?first=5&second=3",
            400,
            "invalid_request",
        ),
        (
            &format!("/v1/ledger/consistency?first=1&second={}", second_size + 1),
            409,
            "conflict",
        ),
        (
            &format!(
                "/v1/trust?callee_id={}&caller_version=1.0&receipt=yes",
                ids[0]
            ),
            400,
            "invalid_request",
        ),
    ] {
        let (got, body) = server.get(query).await;
        assert_eq!((got, error_code(&body)), (status, code), "{query}: {body}");
    }
    let anonymous = reqwest::get(server.url("/v1/ledger/checkpoint"))
        .await
        .unwrap();
    assert_eq!(anonymous.status(), 401);

    // The whole-ledger check now covers the tree and the subjects' heads.
    let (_, verify) = server.get("/v1/ledger/verify").await;
    assert_eq!(verify["ok"], true, "{verify}");
    assert_eq!(verify["merkle"]["matches"], true);
    assert_eq!(verify["merkle"]["tree_size"], second_size);
    assert!(second_size > 42, "{second_size}");
    assert_eq!(verify["subjects_checked"], 5);

    // The key survives a restart: what it signed still verifies against the new key set.
    server.stop().await;
    let server = TestServer::start(db.target.clone()).await;
    assert_eq!(jwks(&server).await, keys);
    server.stop().await;
}

/// Rotation: a new key signs, the old one stays listed, and what it signed still verifies.
/// (SQLite only: the key is a file beside the database, whatever the backend.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_key_keeps_old_receipts_and_attestations_verifiable() {
    let db = TestDb::sqlite().await;
    let key_file = test_settings(db.target.clone())
        .transparency
        .signing_key_file;
    let server = TestServer::start(db.target.clone()).await;
    let agents = CardServer::start().await;
    let ids = register_agents(&server, &agents, 0, 1).await;
    let ask = format!(
        "/v1/trust?callee_id={}&caller_version=1.0&receipt=true",
        ids[0]
    );
    let (_, old_receipt) = server.get(&ask).await;
    let attest = format!("/v1/callees/{}/subjects/1.0/attestation", ids[0]);
    let (status, old_attestation) = server.get(&attest).await;
    assert_eq!(status, 200, "{old_attestation}");
    let old_keys = jwks(&server).await;
    server.stop().await;
    assert!(
        key_file.exists(),
        "the key was created at {}",
        key_file.display()
    );

    let (code, out) = cardgate(&[
        "signing-key",
        "--file",
        &key_file.display().to_string(),
        "rotate",
    ])
    .await;
    assert_eq!(code, 0, "{out}");
    let server = TestServer::start(db.target.clone()).await;
    let keys = jwks(&server).await;
    assert_eq!(keys["keys"].as_array().unwrap().len(), 2);
    assert_ne!(
        keys["keys"][0]["kid"], old_keys["keys"][0]["kid"],
        "a new current key"
    );
    assert_eq!(
        keys["keys"][1], old_keys["keys"][0],
        "the old key is still listed"
    );

    let dir = tempfile::tempdir().unwrap();
    let jwks_file = write(dir.path(), "jwks.json", &keys);
    let (code, out) = cardgate(&[
        "verify",
        &write(dir.path(), "old.json", &old_receipt),
        "--jwks",
        &jwks_file,
    ])
    .await;
    assert_eq!(code, 0, "a receipt from before the rotation: {out}");
    let (code, out) = cardgate(&[
        "verify",
        "--attestation",
        &write(dir.path(), "old-attestation.json", &old_attestation),
        "--jwks",
        &jwks_file,
    ])
    .await;
    assert_eq!(code, 0, "an attestation from before the rotation: {out}");
    let (_, new_attestation) = server.get(&attest).await;
    assert_eq!(
        new_attestation["signatures"][0]["keyid"], keys["keys"][0]["kid"],
        "signed with the new key"
    );
    let (code, out) = cardgate(&[
        "verify",
        "--attestation",
        &write(dir.path(), "new-attestation.json", &new_attestation),
        "--jwks",
        &write(dir.path(), "old-jwks-a.json", &old_keys),
    ])
    .await;
    assert_eq!(code, 1, "the new key is not in the old key set: {out}");
    let (_, new_receipt) = server.get(&ask).await;
    let header = jsonwebtoken::decode_header(new_receipt["receipt"].as_str().unwrap()).unwrap();
    assert_eq!(header.kid.as_deref(), keys["keys"][0]["kid"].as_str());
    open_receipt(new_receipt["receipt"].as_str().unwrap(), &keys);
    // Against the key set from before the rotation, the new receipt does not verify.
    let (code, out) = cardgate(&[
        "verify",
        &write(dir.path(), "new.json", &new_receipt),
        "--jwks",
        &write(dir.path(), "old-jwks.json", &old_keys),
    ])
    .await;
    assert_eq!(code, 1, "{out}");
    server.stop().await;
}

/// A registry with some history and a checkpoint of it (taken by a caller, and recorded by the
/// scheduler), then stopped: ready for an attacker with database access.
struct Tampered {
    agents: CardServer,
    keys: Value,
    before: Value,
    dir: tempfile::TempDir,
}

async fn history(db: &TestDb) -> Tampered {
    // The scheduler records a checkpoint every second here (every minute by default).
    let mut settings = test_settings(db.target.clone());
    settings.schedule.checkpoint = "* * * * * *".parse().unwrap();
    let server = TestServer::start_with(settings).await;
    let agents = CardServer::start().await;
    register_agents(&server, &agents, 0, 3).await;
    let (_, before) = server.get("/v1/ledger/checkpoint").await;
    let keys = jwks(&server).await;
    let mut recorded = Value::Null;
    for _ in 0..50 {
        let (status, page) = server.get("/v1/ledger/checkpoints").await;
        assert_eq!(status, 200, "{page}");
        if let Some(last) = page["items"].as_array().and_then(|c| c.last())
            && last["tree_size"] == before["tree_size"]
        {
            recorded = last.clone();
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(
        recorded["root_hash"], before["root_hash"],
        "the scheduler recorded it"
    );
    open_note(&recorded, &keys);
    let (_, verify) = server.get("/v1/ledger/verify").await;
    assert_eq!(verify["ok"], true, "{verify}");
    assert!(
        verify["checkpoints_checked"].as_u64() >= Some(1),
        "{verify}"
    );
    server.stop().await;
    Tampered {
        agents,
        keys,
        before,
        dir: tempfile::tempdir().unwrap(),
    }
}

/// The attacker lifts the ledger's guards and removes the Merkle tree (cardgate rebuilds it
/// from the chain at start, so the tree agrees with whatever the chain now says).
async fn lift_guards(db: &TestDb) {
    let drops: &[&str] = if db.backend() == "postgres" {
        &["drop trigger ledger_no_update_or_delete on ledger"]
    } else {
        &[
            "drop trigger ledger_no_update",
            "drop trigger ledger_no_delete",
        ]
    };
    for sql in drops {
        db.raw(sql).await.unwrap();
    }
    db.raw("delete from merkle_nodes").await.unwrap();
}

impl Tampered {
    /// The later checkpoint, and whether `cardgate verify-ledger` accepts it after the earlier
    /// one (with the registry's own consistency proof, when it gives one).
    async fn check(&self, server: &TestServer) -> (Value, i32, String) {
        let (_, after) = server.get("/v1/ledger/checkpoint").await;
        open_note(&after, &self.keys);
        let (first, second) = (
            self.before["tree_size"].as_u64().unwrap(),
            after["tree_size"].as_u64().unwrap(),
        );
        let dir = self.dir.path();
        let mut args = vec![
            "verify-ledger".to_string(),
            "--from".into(),
            write(dir, "a.json", &self.before),
            "--to".into(),
            write(dir, "b.json", &after),
            "--jwks".into(),
            write(dir, "jwks.json", &self.keys),
        ];
        let (status, proof) = server
            .get(&format!(
                "/v1/ledger/consistency?first={first}&second={second}"
            ))
            .await;
        if status == 200 {
            // This file's verifier agrees with the CLI that the proof does not hold.
            let hashes = b64_all(&proof["proof"]);
            assert!(!consistent(
                first,
                second,
                &b64(&self.before["root_hash"]),
                &b64(&after["root_hash"]),
                &hashes
            ));
            args.extend(["--proof".into(), write(dir, "c.json", &proof)]);
        } else {
            args.extend([
                "--proof".into(),
                write(
                    dir,
                    "c.json",
                    &json!({"first": first, "second": second, "proof": []}),
                ),
            ]);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (code, out) = cardgate(&args).await;
        (after, code, out)
    }

    /// `/v1/ledger/verify`: the chain alone passes (the attacker kept it consistent), but the
    /// recorded checkpoint does not.
    async fn verify_reports(&self, server: &TestServer, expect: &str) {
        let (_, verify) = server.get("/v1/ledger/verify").await;
        assert_eq!(
            verify["first_broken"],
            Value::Null,
            "the chain was kept consistent: {verify}"
        );
        assert_eq!(verify["ok"], false, "{verify}");
        let problems = verify["problems"].to_string();
        assert!(problems.contains(expect), "{problems}");
    }
}

async fn a_deleted_tail_is_caught(db: TestDb) {
    let t = history(&db).await;
    let size = t.before["tree_size"].as_u64().unwrap();
    lift_guards(&db).await;
    db.raw(&format!("delete from ledger where seq > {}", size - 2))
        .await
        .unwrap();

    let server = TestServer::start(db.target.clone()).await;
    let (after, code, out) = t.check(&server).await;
    assert_eq!(after["tree_size"], size - 2);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("shrank"), "{out}");
    let (status, _) = server
        .get(&format!(
            "/v1/ledger/consistency?first={size}&second={}",
            size - 2
        ))
        .await;
    // The old size is now beyond the ledger: a conflict with what it holds.
    assert_eq!(status, 409);
    t.verify_reports(&server, "its tail is missing").await;
    server.stop().await;
}

async fn an_edited_event_is_caught_though_the_chain_was_rehashed(db: TestDb) {
    let t = history(&db).await;
    lift_guards(&db).await;
    // Edit event 2 and re-seal it and every event after it: the chain verifies again.
    let mut events: Vec<EventRecord> = db.store.ledger(None, 0, 10_000).await.unwrap();
    events[1].actor = "key:forger".into();
    let mut prev = events[0].hash.clone();
    for event in &mut events[1..] {
        event.prev_hash = prev;
        event.hash = event.compute_hash().unwrap();
        prev = event.hash.clone();
        db.raw(&format!(
            "update ledger set actor = '{}', prev_hash = '{}', hash = '{}' where seq = {}",
            event.actor, event.prev_hash, event.hash, event.seq
        ))
        .await
        .unwrap();
    }

    let server = TestServer::start(db.target.clone()).await;
    let (after, code, out) = t.check(&server).await;
    assert_eq!(
        after["tree_size"], t.before["tree_size"],
        "same size, other history"
    );
    assert_ne!(after["root_hash"], t.before["root_hash"]);
    assert_eq!(code, 1, "{out}");
    t.verify_reports(&server, "were changed since").await;
    server.stop().await;
}

async fn a_rewritten_suffix_is_caught(db: TestDb) {
    let t = history(&db).await;
    let size = t.before["tree_size"].as_u64().unwrap();
    lift_guards(&db).await;
    db.raw(&format!("delete from ledger where seq >= {}", size - 1))
        .await
        .unwrap();

    // New history grows past the old checkpoint: a longer tree, but not an extension.
    let server = TestServer::start(db.target.clone()).await;
    register_agents(&server, &t.agents, 10, 4).await;
    let (after, code, out) = t.check(&server).await;
    assert!(after["tree_size"].as_u64().unwrap() > size);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("not a prefix"), "{out}");
    t.verify_reports(&server, "were changed since").await;
    server.stop().await;
}
