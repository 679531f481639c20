//! Unit tests of `cardgate_domain::attestation`.

use super::*;
use serde_json::json;

#[test]
fn pae_is_the_specifications_encoding() {
    // DSSE protocol.md: PAE("http://example.com/HelloWorld", "hello world").
    assert_eq!(
        pae("http://example.com/HelloWorld", b"hello world"),
        b"DSSEv1 29 http://example.com/HelloWorld 11 hello world".to_vec()
    );
    assert_eq!(pae("", b""), b"DSSEv1 0  0 ".to_vec());
}

fn statement() -> Statement {
    Statement::verdict(
        vec![ResourceDescriptor {
            name: "https://agent.example/.well-known/agent-card.json".into(),
            digest: Digest {
                sha256: "ab".repeat(32),
            },
        }],
        json!({"gate_state": "demoted", "ledger": {"seq": 3, "hash": "00"}}),
    )
}

#[test]
fn a_signed_envelope_opens_with_the_key_set_and_not_when_touched() {
    let ring = KeyRing::generate().unwrap();
    let jwks = Jwks::of(&ring);
    let envelope = statement().sign(&ring).unwrap();
    assert_eq!(envelope.signatures[0].keyid, ring.current().kid);
    assert_eq!(envelope.open(&jwks).unwrap(), statement());

    let mut touched = envelope.clone();
    let mut other = statement();
    other.predicate["gate_state"] = "lifecycle-trusted".into();
    touched.payload = STANDARD.encode(serde_json::to_vec(&other).unwrap());
    assert!(touched.open(&jwks).is_err(), "a changed payload");
    let mut retyped = envelope.clone();
    retyped.payload_type = "application/json".into();
    assert!(retyped.open(&jwks).is_err(), "another payload type");
    let stranger = Jwks::of(&KeyRing::generate().unwrap());
    assert!(envelope.open(&stranger).is_err(), "another registry's keys");
    // After a rotation the old key is still listed, so the envelope still opens.
    let rotated = ring.rotate().unwrap();
    assert!(envelope.open(&Jwks::of(&rotated)).is_ok());
}
