//! RFC 8785 JSON Canonicalization Scheme (JCS) over `serde_json::Value`.
//!
//! Used for two things that must agree byte for byte with other implementations: the payload an
//! agent card signature covers (A2A §8.4.1, as the official SDKs compute it) and the input of the
//! ledger's hash chain. Strings are written as literal UTF-8 with only `"`, `\` and C0 controls
//! escaped, object keys are sorted by UTF-16 code units, and numbers use the ECMAScript
//! `Number.prototype.toString` form (RFC 8785 §3.2.2.3).

use serde_json::{Map, Number, Value};

/// The largest integer an IEEE double holds exactly; JCS peers (the Python SDK among them)
/// refuse integers beyond it rather than silently rounding.
const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

/// serde_json refuses deeper documents when parsing; values built in code get the same bound.
const MAX_DEPTH: usize = 128;

/// Why a value has no canonical form.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JcsError {
    #[error("integer {0} is outside the range an IEEE double holds exactly (±2^53-1)")]
    IntegerOutOfRange(String),
    #[error("JSON nesting is deeper than {MAX_DEPTH} levels")]
    TooDeep,
}

/// The canonical UTF-8 bytes of `value`.
pub fn canonicalize(value: &Value) -> Result<Vec<u8>, JcsError> {
    let mut out = Vec::with_capacity(256);
    write_value(&mut out, value, 0)?;
    Ok(out)
}

fn write_value(out: &mut Vec<u8>, value: &Value, depth: usize) -> Result<(), JcsError> {
    if depth > MAX_DEPTH {
        return Err(JcsError::TooDeep);
    }
    match value {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(true) => out.extend_from_slice(b"true"),
        Value::Bool(false) => out.extend_from_slice(b"false"),
        Value::Number(n) => write_number(out, n)?,
        Value::String(s) => write_string(out, s),
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_value(out, item, depth + 1)?;
            }
            out.push(b']');
        }
        Value::Object(map) => write_object(out, map, depth)?,
    }
    Ok(())
}

fn write_object(out: &mut Vec<u8>, map: &Map<String, Value>, depth: usize) -> Result<(), JcsError> {
    let mut entries: Vec<(&String, &Value)> = map.iter().collect();
    // RFC 8785 §3.2.3: compare keys as arrays of UTF-16 code units, not as code points.
    entries.sort_by(|(a, _), (b, _)| a.encode_utf16().cmp(b.encode_utf16()));
    out.push(b'{');
    for (i, (key, item)) in entries.into_iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_string(out, key);
        out.push(b':');
        write_value(out, item, depth + 1)?;
    }
    out.push(b'}');
    Ok(())
}

fn write_number(out: &mut Vec<u8>, n: &Number) -> Result<(), JcsError> {
    if let Some(u) = n.as_u64() {
        if u > MAX_SAFE_INTEGER {
            return Err(JcsError::IntegerOutOfRange(u.to_string()));
        }
        out.extend_from_slice(u.to_string().as_bytes());
    } else if let Some(i) = n.as_i64() {
        if i.unsigned_abs() > MAX_SAFE_INTEGER {
            return Err(JcsError::IntegerOutOfRange(i.to_string()));
        }
        out.extend_from_slice(i.to_string().as_bytes());
    } else {
        let f = n
            .as_f64()
            .expect("a serde_json number is u64, i64 or a finite f64");
        let mut buf = ryu_js::Buffer::new();
        out.extend_from_slice(buf.format_finite(f).as_bytes());
    }
    Ok(())
}

fn write_string(out: &mut Vec<u8>, s: &str) {
    out.push(b'"');
    for ch in s.chars() {
        match ch {
            '"' => out.extend_from_slice(b"\\\""),
            '\\' => out.extend_from_slice(b"\\\\"),
            '\u{08}' => out.extend_from_slice(b"\\b"),
            '\t' => out.extend_from_slice(b"\\t"),
            '\n' => out.extend_from_slice(b"\\n"),
            '\u{0C}' => out.extend_from_slice(b"\\f"),
            '\r' => out.extend_from_slice(b"\\r"),
            c if (c as u32) < 0x20 => {
                out.extend_from_slice(format!("\\u{:04x}", c as u32).as_bytes());
            }
            c => {
                let mut buf = [0u8; 4];
                out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            }
        }
    }
    out.push(b'"');
}

#[cfg(test)]
mod tests {
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
}
