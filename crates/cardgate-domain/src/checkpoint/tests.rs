//! Unit tests of `cardgate_domain::checkpoint`.

use super::*;

fn checkpoint() -> Checkpoint {
    Checkpoint {
        origin: "registry.example/ledger".into(),
        tree_size: 42,
        root_hash: [7; 32],
    }
}

#[test]
fn a_signed_note_has_the_c2sp_shape_and_opens_with_the_key() {
    let ring = KeyRing::generate().unwrap();
    let note = checkpoint().sign(&ring).unwrap();
    let lines: Vec<&str> = note.lines().collect();
    assert_eq!(
        lines[..4],
        [
            "registry.example/ledger",
            "42",
            &STANDARD.encode([7; 32]),
            ""
        ]
    );
    assert!(lines[4].starts_with("\u{2014} registry.example/ledger "));
    assert!(note.ends_with('\n'));
    let sig = STANDARD
        .decode(lines[4].rsplit(' ').next().unwrap())
        .unwrap();
    assert_eq!(sig.len(), 4 + 64);
    assert_eq!(sig[..4], key_id("registry.example/ledger", ring.current()));
    let keys = [ring.current().clone()];
    assert_eq!(Checkpoint::open(&note, &keys).unwrap(), checkpoint());
}

#[test]
fn an_edited_or_foreign_note_is_refused() {
    let ring = KeyRing::generate().unwrap();
    let keys = [ring.current().clone()];
    let note = checkpoint().sign(&ring).unwrap();
    let edited = note.replacen("\n42\n", "\n43\n", 1);
    assert_eq!(
        Checkpoint::open(&edited, &keys),
        Err(NoteError::BadSignature)
    );
    let other = KeyRing::generate().unwrap();
    assert_eq!(
        Checkpoint::open(&note, &[other.current().clone()]),
        Err(NoteError::NoKnownSignature)
    );
    assert!(matches!(
        Checkpoint::open("no blank line", &keys),
        Err(NoteError::Malformed(_))
    ));
}

#[test]
fn origins_are_checked() {
    assert!(check_origin("cardgate.example/ledger").is_ok());
    for bad in ["", "a b", "a+b", "a\nb"] {
        assert!(check_origin(bad).is_err(), "{bad:?}");
    }
}
