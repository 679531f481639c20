//! Unit tests of `cardgate_domain::signing`.

use super::*;

#[test]
fn a_ring_round_trips_through_its_pem_and_keeps_retired_keys() {
    let ring = KeyRing::generate().unwrap();
    let again = KeyRing::from_pem(&ring.to_pem()).unwrap();
    assert_eq!(again.current(), ring.current());
    let rotated = ring.rotate().unwrap();
    assert_ne!(rotated.current(), ring.current());
    let reread = KeyRing::from_pem(&rotated.to_pem()).unwrap();
    let kids: Vec<_> = reread.public_keys().map(|k| k.kid.clone()).collect();
    assert_eq!(
        kids,
        [rotated.current().kid.clone(), ring.current().kid.clone()]
    );
}

#[test]
fn signatures_verify_by_the_published_key_only() {
    let ring = KeyRing::generate().unwrap();
    let sig = ring.sign(b"hello").unwrap();
    assert!(ring.current().verify(b"hello", &sig));
    assert!(!ring.current().verify(b"hellO", &sig));
    let other = KeyRing::generate().unwrap();
    assert!(!other.current().verify(b"hello", &sig));
}

#[test]
fn a_jws_verifies_against_the_key_set_and_not_after_an_edit() {
    let ring = KeyRing::generate().unwrap();
    let jws = ring.sign_jws("test", br#"{"a":1}"#).unwrap();
    let jwks = Jwks::of(&ring);
    let (typ, payload) = verify_jws(&jws, &jwks).unwrap();
    assert_eq!(
        (typ.as_deref(), payload.as_slice()),
        (Some("test"), &br#"{"a":1}"#[..])
    );
    let mut parts: Vec<&str> = jws.split('.').collect();
    let forged = URL_SAFE_NO_PAD.encode(br#"{"a":2}"#);
    parts[1] = &forged;
    assert!(verify_jws(&parts.join("."), &jwks).is_err());
    assert!(verify_jws(&jws, &Jwks::of(&KeyRing::generate().unwrap())).is_err());
}

#[test]
fn the_kid_is_the_rfc_7638_thumbprint() {
    // RFC 8037 appendix A.3: the thumbprint of its Ed25519 example key.
    let x = URL_SAFE_NO_PAD
        .decode("11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo")
        .unwrap();
    let key = PublicKey::from_raw(x.try_into().unwrap());
    assert_eq!(key.kid, "kPrK_qmxVWaYVA9wwBF6Iuo3vVzz7TxHCTwXBygrS4k");
}

#[test]
fn malformed_key_files_are_refused_with_a_reason() {
    assert!(matches!(KeyRing::from_pem(""), Err(KeyError::NoPrivateKey)));
    let rotated = KeyRing::generate().unwrap().rotate().unwrap();
    // Without its private block, the file starts with the retired public key.
    let public_only: String = rotated.to_pem().split_inclusive('\n').skip(3).collect();
    assert!(public_only.starts_with("-----BEGIN PUBLIC KEY-----"));
    assert!(matches!(
        KeyRing::from_pem(&public_only),
        Err(KeyError::NoPrivateKey)
    ));
    assert!(matches!(
        KeyRing::from_pem("-----BEGIN PRIVATE KEY-----\nAAAA\n"),
        Err(KeyError::Pem(_))
    ));
}
