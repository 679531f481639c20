//! Unit tests of `cardgate_domain::jcs`.

use super::*;

/// The canonical form as a `String` (JCS output is always valid UTF-8).
fn canonical_string(value: &Value) -> Result<String, JcsError> {
    canonicalize(value).map(|bytes| String::from_utf8(bytes).expect("JCS writes only UTF-8"))
}
use serde_json::json;

fn canon(v: Value) -> String {
    canonical_string(&v).unwrap()
}

#[test]
fn sorts_keys_by_utf16_code_units() {
    // The example of RFC 8785 §3.2.3: U+1F600 is a surrogate pair (0xD83D…), so it sorts
    // before U+FB33 although its code point is larger.
    let v: Value = serde_json::from_str(
        r#"{"\u20ac":"Euro","\r":"CR","\ufb33":"Dalet","1":"One","\ud83d\ude00":"Emoji","\u0080":"Control","\u00f6":"o"}"#,
    )
    .unwrap();
    assert_eq!(
        canon(v),
        "{\"\\r\":\"CR\",\"1\":\"One\",\"\u{80}\":\"Control\",\"\u{f6}\":\"o\",\"\u{20ac}\":\"Euro\",\"\u{1f600}\":\"Emoji\",\"\u{fb33}\":\"Dalet\"}"
    );
}

#[test]
fn numbers_use_ecmascript_form() {
    let cases = [
        (json!(1.0), "1"),
        (json!(1e21), "1e+21"),
        (json!(1e-7), "1e-7"),
        (json!(0.000001), "0.000001"),
        (json!(-0.0), "0"),
        (json!(123456789012345680000.0), "123456789012345680000"),
        (json!(4.5), "4.5"),
        (json!(-12), "-12"),
        (json!(9007199254740991u64), "9007199254740991"),
    ];
    for (value, expected) in cases {
        assert_eq!(canon(value.clone()), expected, "{value}");
    }
}

#[test]
fn integers_beyond_2_53_are_refused() {
    assert!(matches!(
        canonicalize(&json!(9007199254740992u64)),
        Err(JcsError::IntegerOutOfRange(_))
    ));
    assert!(matches!(
        canonicalize(&json!(-9007199254740992i64)),
        Err(JcsError::IntegerOutOfRange(_))
    ));
}

#[test]
fn strings_escape_only_quote_backslash_and_c0() {
    let v = json!({"s": "a\"b\\c\u{1}\n\u{1f}é😀\u{2028}/"});
    assert_eq!(
        canon(v),
        "{\"s\":\"a\\\"b\\\\c\\u0001\\n\\u001fé😀\u{2028}/\"}"
    );
}

#[test]
fn nested_structures_have_no_whitespace() {
    let v = json!({"b": [1, {"z": null, "a": true}], "a": {}});
    assert_eq!(canon(v), r#"{"a":{},"b":[1,{"a":true,"z":null}]}"#);
}

#[test]
fn too_deep_values_are_refused_not_overflowed() {
    let mut v = json!(1);
    for _ in 0..200 {
        v = json!([v]);
    }
    assert_eq!(canonicalize(&v), Err(JcsError::TooDeep));
}
