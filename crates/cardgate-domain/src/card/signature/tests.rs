//! Signature verification against the SDK fixture and generated keys.

use josekit::jwk::Jwk;
use serde_json::{Value, json};

use super::*;
use crate::card::canonical::canonicalize_card;

use crate::card::sdk_fixture as fixture;

fn fixture_card() -> Value {
    serde_json::from_str(fixture!("signed/python-card.v-1.0.json")).unwrap()
}

fn fixture_keys() -> KeySet {
    let jwks: Value = serde_json::from_str(fixture!("signed/jwks.json")).unwrap();
    KeySet {
        source: KeySource::Pinned,
        keys: parse_jwks(&jwks).unwrap(),
    }
}

fn check(card: &Value, keys: &KeySet) -> SignatureVerdict {
    let payload = canonicalize_card(card).unwrap().payload;
    let outcomes = read_signatures(card)
        .unwrap()
        .iter()
        .map(|e| (e.index, verify_entry(e, &payload, keys)))
        .collect();
    verdict(outcomes)
}

/// A fresh key pair as (private JWK, public JWKS with that kid).
fn keypair(alg: &str, kid: &str) -> (Jwk, KeySet) {
    let pair: Box<dyn josekit::jwk::KeyPair> = match alg {
        "ES256" => Box::new(josekit::jws::ES256.generate_key_pair().unwrap()),
        "ES384" => Box::new(josekit::jws::ES384.generate_key_pair().unwrap()),
        "EdDSA" => Box::new(
            josekit::jws::EdDSA
                .generate_key_pair(josekit::jwk::alg::ed::EdCurve::Ed25519)
                .unwrap(),
        ),
        "RS256" => Box::new(josekit::jws::RS256.generate_key_pair(2048).unwrap()),
        "PS256" => Box::new(josekit::jws::PS256.generate_key_pair(2048).unwrap()),
        other => panic!("{other}"),
    };
    let mut private = pair.to_jwk_private_key();
    private.set_key_id(kid);
    let mut public = pair.to_jwk_public_key();
    public.set_key_id(kid);
    (
        private,
        KeySet {
            source: KeySource::Pinned,
            keys: vec![public],
        },
    )
}

fn card() -> Value {
    json!({
        "name": "Signed", "description": "d", "version": "1",
        "supportedInterfaces": [{"url": "https://a.example/rpc", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}],
        "capabilities": {"streaming": true}, "defaultInputModes": ["text/plain"], "defaultOutputModes": ["text/plain"],
        "skills": [{"id": "s", "name": "S", "description": "d", "tags": ["t"]}]
    })
}

#[test]
fn the_sdk_signed_fixture_verifies_with_its_key() {
    let verdict = check(&fixture_card(), &fixture_keys());
    assert_eq!(
        verdict,
        SignatureVerdict::Verified {
            index: 0,
            kid: "peer-card-key-1".into(),
            alg: "ES256".into(),
            key_source: KeySource::Pinned
        }
    );
}

#[test]
fn one_changed_byte_in_any_signed_field_fails() {
    let edits: Vec<fn(&mut Value)> = vec![
        |c| c["name"] = "Peer Python Agenu".into(),
        |c| c["description"] = "a2a-sdk 1.3.0 test peer: echo, need-input, slow, fail!".into(),
        |c| c["supportedInterfaces"][0]["url"] = "http://127.0.0.1:41244/a2a/jsonrpc".into(),
        |c| c["supportedInterfaces"][1]["protocolVersion"] = "0.4".into(),
        |c| c["capabilities"]["streaming"] = false.into(),
        |c| c["skills"][0]["tags"][0] = "tesT".into(),
        |c| c["version"] = "1.0.1".into(),
    ];
    for (i, edit) in edits.into_iter().enumerate() {
        let mut card = fixture_card();
        edit(&mut card);
        assert!(
            matches!(
                check(&card, &fixture_keys()),
                SignatureVerdict::Invalid { .. }
            ),
            "edit {i}"
        );
    }
}

#[test]
fn legacy_fields_are_not_covered_so_changing_them_still_verifies() {
    // The hybrid card's top-level `url` is outside the signed form; the snapshot says so.
    let mut card = fixture_card();
    card["url"] = "http://evil.example/".into();
    assert!(matches!(
        check(&card, &fixture_keys()),
        SignatureVerdict::Verified { .. }
    ));
    assert!(
        canonicalize_card(&card)
            .unwrap()
            .uncovered
            .contains(&"url".to_string())
    );
}

#[test]
fn the_served_card_canonicalized_naively_fails() {
    let card = fixture_card();
    let mut naive = card.clone();
    naive.as_object_mut().unwrap().remove("signatures");
    let payload = crate::jcs::canonicalize(&naive).unwrap();
    let entry = &read_signatures(&card).unwrap()[0];
    assert!(matches!(
        verify_entry(entry, &payload, &fixture_keys()),
        EntryOutcome::Invalid(_)
    ));
}

#[test]
fn every_allowed_algorithm_round_trips() {
    for alg in ALLOWED_ALGORITHMS {
        let (private, public) = keypair(alg, "k1");
        let signed = sign_card(&card(), &private, alg, "k1", None).unwrap();
        assert!(
            matches!(check(&signed, &public), SignatureVerdict::Verified { .. }),
            "{alg}"
        );
    }
}

#[test]
fn none_and_hmac_and_missing_kid_are_refused() {
    let (private, public) = keypair("ES256", "k1");
    let signed = sign_card(&card(), &private, "ES256", "k1", None).unwrap();
    let with_header = |header: Value| {
        let mut card = signed.clone();
        card["signatures"][0]["protected"] = URL_SAFE_NO_PAD.encode(header.to_string()).into();
        card
    };
    let cases = [
        (
            with_header(json!({"alg": "none", "kid": "k1"})),
            "algorithm `none` is not accepted",
        ),
        (
            with_header(json!({"alg": "HS256", "kid": "k1"})),
            "algorithm `HS256` is not accepted",
        ),
        (with_header(json!({"alg": "ES256"})), "no `kid`"),
        (with_header(json!({"kid": "k1"})), "no `alg`"),
    ];
    for (card, expected) in cases {
        match check(&card, &public) {
            SignatureVerdict::Invalid { reason } => assert!(reason.contains(expected), "{reason}"),
            other => panic!("{expected}: {other:?}"),
        }
    }

    // A real HS256 signature, made with a shared secret, is refused the same way.
    let secret = Jwk::from_bytes(
        br#"{"kty":"oct","k":"c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0LXNlY3JldA","kid":"k1"}"#,
    )
    .unwrap();
    let hmac_signed = sign_card(&card(), &secret, "HS256", "k1", None).unwrap();
    assert!(matches!(
        check(&hmac_signed, &public),
        SignatureVerdict::Invalid { .. }
    ));
}

#[test]
fn key_rotation_verifies_with_the_known_key() {
    let (old, _) = keypair("ES256", "retired");
    let (current, public) = keypair("ES256", "current");
    let signed = sign_card(&card(), &old, "ES256", "retired", None).unwrap();
    let signed = sign_card(&signed, &current, "ES256", "current", None).unwrap();
    match check(&signed, &public) {
        SignatureVerdict::Verified { index, kid, .. } => {
            assert_eq!((index, kid.as_str()), (1, "current"))
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn an_unknown_kid_alone_is_key_unavailable_and_a_wrong_key_is_invalid() {
    let (signer, _) = keypair("ES256", "k1");
    let (_, other_public) = keypair("ES256", "k1");
    let (_, unrelated) = keypair("ES256", "other");
    let signed = sign_card(&card(), &signer, "ES256", "k1", None).unwrap();
    assert!(matches!(
        check(&signed, &unrelated),
        SignatureVerdict::KeyUnavailable { .. }
    ));
    assert!(matches!(
        check(&signed, &other_public),
        SignatureVerdict::Invalid { .. }
    ));
    assert_eq!(check(&card(), &unrelated), SignatureVerdict::Unsigned);
}

#[test]
fn a_key_for_another_algorithm_is_not_used() {
    let (signer, mut public) = keypair("ES256", "k1");
    public.keys[0].set_algorithm("ES384");
    let signed = sign_card(&card(), &signer, "ES256", "k1", None).unwrap();
    match check(&signed, &public) {
        SignatureVerdict::Invalid { reason } => {
            assert!(reason.contains("is for ES384"), "{reason}")
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn jku_must_be_https_and_on_the_cards_origin() {
    let card_url = Url::parse("https://agent.example/.well-known/agent-card.json").unwrap();
    let never = |_: &Url| false;
    assert!(jku_allowed("https://agent.example/jwks.json", &card_url, never).is_ok());
    let refused = [
        ("https://evil.example/jwks.json", "not on the card's origin"),
        (
            "https://agent.example:8443/jwks.json",
            "not on the card's origin",
        ),
        ("http://agent.example/jwks.json", "not https"),
        ("file:///etc/jwks.json", "not https"),
        ("not a url", "not a URL"),
    ];
    for (jku, expected) in refused {
        let err = jku_allowed(jku, &card_url, never).unwrap_err();
        assert!(err.contains(expected), "{jku}: {err}");
    }
    let loopback = Url::parse("http://127.0.0.1:9000/.well-known/agent-card.json").unwrap();
    assert!(jku_allowed("http://127.0.0.1:9000/jwks.json", &loopback, |_| true).is_ok());
}

#[test]
fn jwks_with_private_or_symmetric_keys_are_refused() {
    let (private, _) = keypair("ES256", "k1");
    let private_jwks = json!({"keys": [Value::Object(private.as_ref().clone())]});
    assert!(
        parse_jwks(&private_jwks)
            .unwrap_err()
            .contains("private key material")
    );
    let oct = json!({"keys": [{"kty": "oct", "k": "AA", "kid": "s"}]});
    assert!(parse_jwks(&oct).unwrap_err().contains("symmetric"));
    assert!(
        parse_jwks(&json!({"keys": [{"kty": "EC"}]}))
            .unwrap_err()
            .contains("no `kid`")
    );
    assert!(parse_jwks(&json!([1])).is_err());
}

#[test]
fn jwks_with_malformed_key_parameters_are_refused() {
    let jwks: Value = serde_json::from_str(fixture!("signed/jwks.json")).unwrap();
    let good = jwks["keys"][0].clone();
    assert!(good.get("x").is_some(), "the fixture key is an EC key");
    assert!(parse_jwks(&json!({"keys": [good]})).is_ok());
    // Padded, standard alphabet, non-canonical trailing bits, empty, not a string.
    for bad in [
        json!("AQAB="),
        json!("a+b/"),
        json!("AB"),
        json!(""),
        json!(65537),
    ] {
        let mut key = good.clone();
        key["x"] = bad.clone();
        let err = parse_jwks(&json!({"keys": [key]})).unwrap_err();
        assert!(
            err.contains("keys[0].x is not unpadded base64url"),
            "{bad}: {err}"
        );
    }
}
