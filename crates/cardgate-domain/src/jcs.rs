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
mod tests;
