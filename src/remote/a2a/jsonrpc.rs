//! JSON-RPC 2.0 framing (A2A §9): every operation is a POST of `{jsonrpc, id, method, params}`
//! to the interface URL; the answer is `result` or `error`, in a body or in each SSE frame.

use serde_json::{Value, json};

use super::dialect::Dialect;
use super::{Answer, Op};

/// The method name and request body of `op` as call `id`.
pub(super) fn request(dialect: Dialect, op: &Op, params: Value, id: u32) -> (String, Value) {
    let method = dialect.method(op);
    let body = json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params });
    (method.to_string(), body)
}

/// The A2A result (or error) a JSON-RPC answer carries, whatever its HTTP status.
pub(super) fn answer(status: u16, body: &Value) -> Answer {
    // JSON-RPC 2.0 sends `result` or `error`, never both; some servers send both with the
    // unused one null, so whichever is not null is the answer.
    let present = |key: &str| body.get(key).filter(|v| !v.is_null());
    if let Some(result) = present("result") {
        return Answer::Result(result.clone());
    }
    if let Some(error) = present("error") {
        return Answer::Error {
            code: error.get("code").and_then(Value::as_i64).unwrap_or(0),
            message: error
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("(no message)")
                .to_string(),
        };
    }
    if body.get("raw").is_some() {
        return Answer::Broken(format!("HTTP {status}: the answer is not JSON"));
    }
    if body.get("result").is_some() {
        return Answer::Result(Value::Null);
    }
    Answer::Broken(format!(
        "HTTP {status}: a JSON-RPC answer needs `result` or `error`"
    ))
}

/// Whether an error is `error`, by its code.
pub(super) fn refused_as(error: super::A2aError, code: i64) -> bool {
    code == error.code()
}
