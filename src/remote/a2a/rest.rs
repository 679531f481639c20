//! HTTP+JSON framing (A2A §11): one route per operation under the interface URL, the A2A
//! object as the body, errors as an HTTP status with a `google.rpc.Status`-shaped body.

use reqwest::Method;
use serde_json::{Value, json};

use super::{Answer, Op};

/// Method, path and body of `op` (A2A §11.3).
pub(super) fn route(op: &Op, params: Value) -> (Method, String, Option<Value>) {
    match op {
        Op::Send => (Method::POST, "/message:send".into(), Some(params)),
        Op::Stream => (Method::POST, "/message:stream".into(), Some(params)),
        Op::Get(id, history) => {
            let query = history
                .map(|n| format!("?historyLength={n}"))
                .unwrap_or_default();
            (Method::GET, format!("/tasks/{}{query}", encode(id)), None)
        }
        Op::Cancel(id) => (
            Method::POST,
            format!("/tasks/{}:cancel", encode(id)),
            Some(json!({})),
        ),
        Op::SetPush(id) => (
            Method::POST,
            format!("/tasks/{}/pushNotificationConfigs", encode(id)),
            Some(params),
        ),
        // As the proto routes it; both SDKs accept GET and POST.
        Op::Subscribe(id) => (
            Method::GET,
            format!("/tasks/{}:subscribe", encode(id)),
            None,
        ),
        Op::ExtendedCard => (Method::GET, "/extendedAgentCard".into(), None),
    }
}

/// The A2A result of a 2xx answer, or the error a non-2xx one says.
pub(super) fn answer(status: u16, body: &Value) -> Answer {
    if (200..300).contains(&status) {
        return Answer::Result(body.clone());
    }
    // The A2A reason beside the status, as for gRPC: 400 alone does not say what was refused
    // (google.rpc.Status with an ErrorInfo detail, §11.6).
    let reason = body
        .pointer("/error/details")
        .and_then(Value::as_array)
        .and_then(|details| {
            details
                .iter()
                .find_map(|d| d.get("reason").and_then(Value::as_str))
        })
        .map(|r| format!(" ({r})"))
        .unwrap_or_default();
    Answer::Error {
        code: i64::from(status),
        message: body
            .pointer("/error/message")
            .and_then(Value::as_str)
            .map_or_else(
                || format!("HTTP {status}{reason}"),
                |m| format!("HTTP {status}{reason}: {m}"),
            ),
    }
}

/// Whether an error is `error`: 400 with its reason.
pub(super) fn refused_as(error: super::A2aError, code: i64, message: &str) -> bool {
    code == 400 && message.contains(error.reason())
}

fn encode(segment: &str) -> String {
    url::form_urlencoded::byte_serialize(segment.as_bytes()).collect()
}
