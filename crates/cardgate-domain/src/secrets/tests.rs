//! Unit tests of `cardgate_domain::secrets`.

use super::*;

#[test]
fn a_sealed_value_opens_only_with_its_key_and_its_context() {
    let ring = SecretsRing::generate().unwrap();
    let sealed = ring.seal(b"top secret", b"callee-1/bearer").unwrap();
    assert!(!sealed.contains("top secret"));
    assert_eq!(SecretsRing::kid_of(&sealed), Some(ring.current_kid()));
    assert_eq!(
        ring.open(&sealed, b"callee-1/bearer").unwrap(),
        b"top secret"
    );
    assert_eq!(
        ring.open(&sealed, b"callee-2/bearer"),
        Err(SealError::Unopenable)
    );
    let other = SecretsRing::generate().unwrap();
    assert!(matches!(
        other.open(&sealed, b"callee-1/bearer"),
        Err(SealError::UnknownKey(_))
    ));
    // Two seals of one value differ (fresh nonces).
    assert_ne!(
        sealed,
        ring.seal(b"top secret", b"callee-1/bearer").unwrap()
    );
}

#[test]
fn a_rotated_ring_opens_old_values_and_seals_new_ones_with_the_new_key() {
    let ring = SecretsRing::generate().unwrap();
    let old = ring.seal(b"x", b"c").unwrap();
    let rotated = SecretsRing::from_text(&ring.rotated().unwrap().to_text()).unwrap();
    assert_eq!(rotated.kids().len(), 2);
    assert_eq!(rotated.open(&old, b"c").unwrap(), b"x");
    let new = rotated.seal(b"y", b"c").unwrap();
    assert_ne!(SecretsRing::kid_of(&new), SecretsRing::kid_of(&old));
    let only = rotated.current_only();
    assert_eq!(only.open(&new, b"c").unwrap(), b"y");
    assert!(only.open(&old, b"c").is_err());
}

#[test]
fn a_malformed_ring_is_refused() {
    assert_eq!(
        SecretsRing::from_text("# nothing\n").err(),
        Some(SealError::Empty)
    );
    assert!(matches!(
        SecretsRing::from_text("abc notbase64"),
        Err(SealError::Malformed(_))
    ));
    let text = SecretsRing::generate().unwrap().to_text();
    let tampered = text.replacen(char::is_alphanumeric, "0", 1);
    let _ = SecretsRing::from_text(&tampered); // either refused or a different, valid name
}
