//! The transcript of a probe's calls: every exchange as it happened, numbered in call order,
//! within a budget of exchanges and bytes (it is stored with the run and shown to every reader),
//! with the secrets the probe handed out scrubbed from it.

use serde::Serialize;
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::domain::time::{self, Timestamp};
use crate::remote::grpc_transport::CallStatus;
use crate::remote::sse::Frame;

/// What the transcript left out once its budget was spent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Omitted {
    pub exchanges: usize,
    pub bodies: usize,
    pub frames: usize,
    pub bytes: usize,
}

/// One exchange, as it happened.
#[derive(Debug, Clone, Serialize)]
pub struct Exchange {
    pub call: u32,
    pub step: String,
    pub method: String,
    pub url: String,
    pub request: Value,
    pub started_at: Timestamp,
    pub elapsed_ms: u64,
    pub status: Option<u16>,
    pub content_type: Option<String>,
    /// The response body: JSON when it parsed, else `{"raw": "<text>"}`.
    pub response: Option<Value>,
    pub frames: Vec<FrameRecord>,
    pub error: Option<String>,
    /// gRPC only: the call's status and the metadata that came with it (headers on success,
    /// trailers on errors); `status` and `content_type` stay empty on this binding.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub grpc: Option<CallStatus>,
}

#[derive(Debug, Clone, Serialize)]
pub struct FrameRecord {
    pub received_at: Timestamp,
    pub event: Option<String>,
    pub data: String,
}

/// How a call ended, as the transcript records it.
#[derive(Debug, Default)]
pub(super) struct Ended {
    pub status: Option<u16>,
    pub content_type: Option<String>,
    pub response: Option<Value>,
    pub error: Option<String>,
}

impl Ended {
    /// A call that produced no answer, for `error`.
    pub(super) fn failed(error: impl Into<String>) -> Self {
        Self {
            error: Some(error.into()),
            ..Self::default()
        }
    }
}

/// The exchanges of one client, numbered in call order.
pub(super) struct Transcript {
    exchanges: Vec<Exchange>,
    /// When each call started, by number, kept past the exchange budget.
    started: Vec<Timestamp>,
    next_call: u32,
    max_exchanges: usize,
    max_bytes: usize,
    kept_bytes: usize,
    omitted: Omitted,
}

impl Transcript {
    pub(super) fn new(max_exchanges: usize, max_bytes: usize) -> Self {
        Self {
            exchanges: Vec::new(),
            started: Vec::new(),
            next_call: 0,
            max_exchanges,
            max_bytes,
            kept_bytes: 0,
            omitted: Omitted::default(),
        }
    }

    /// The number the next call will be given.
    pub(super) fn next_call(&self) -> u32 {
        self.next_call
    }

    /// When call `call` started.
    pub(super) fn started(&self, call: u32) -> Option<Timestamp> {
        self.started.get(call as usize).copied()
    }

    pub(super) fn exchanges(&self) -> &[Exchange] {
        &self.exchanges
    }

    pub(super) fn into_exchanges(self) -> Vec<Exchange> {
        self.exchanges
    }

    pub(super) fn omitted(&self) -> Option<Omitted> {
        (self.omitted != Omitted::default()).then_some(self.omitted)
    }

    /// Numbers a call that never went out (its request could not be built): it keeps its
    /// number so later calls line up with what was attempted.
    pub(super) fn skip(&mut self) -> u32 {
        self.started.push(time::now());
        self.next_call += 1;
        self.next_call - 1
    }

    /// Numbers a new call and records its exchange (within the transcript's budgets).
    pub(super) fn open(
        &mut self,
        step: &str,
        method: String,
        url: String,
        body: Option<&Value>,
    ) -> u32 {
        let call = self.next_call;
        self.next_call += 1;
        self.started.push(time::now());
        if self.exchanges.len() < self.max_exchanges {
            let request = self.within_budget(body.cloned().unwrap_or(Value::Null));
            self.exchanges.push(Exchange {
                call,
                step: step.to_string(),
                method,
                url,
                request,
                started_at: time::now(),
                elapsed_ms: 0,
                status: None,
                content_type: None,
                response: None,
                frames: Vec::new(),
                error: None,
                grpc: None,
            });
        } else {
            self.omitted.exchanges += 1;
        }
        call
    }

    /// Records how call `call`, started at `started`, ended.
    pub(super) fn finish(&mut self, call: u32, started: Instant, ended: Ended) {
        if !self.exchanges.iter().any(|e| e.call == call) {
            return; // an exchange past the count budget
        }
        let response = ended.response.map(|r| self.within_budget(r));
        if let Some(ex) = self.exchange(call) {
            ex.elapsed_ms = started.elapsed().as_millis() as u64;
            ex.status = ended.status;
            ex.content_type = ended.content_type;
            ex.response = response;
            ex.error = ended.error;
        }
    }

    pub(super) fn set_grpc_status(&mut self, call: u32, status: CallStatus) {
        if let Some(ex) = self.exchange(call) {
            ex.grpc = Some(status);
        }
    }

    /// Records a frame of an open stream in its exchange.
    pub(super) fn record_frame(&mut self, call: u32, frame: &Frame) {
        let size = frame.data.len();
        let fits = self.kept_bytes + size <= self.max_bytes;
        if !self.exchanges.iter().any(|e| e.call == call) {
            return;
        }
        if fits {
            self.kept_bytes += size;
            if let Some(ex) = self.exchange(call) {
                ex.frames.push(FrameRecord {
                    received_at: frame.received_at,
                    event: frame.event.clone(),
                    data: frame.data.clone(),
                });
            }
        } else {
            self.omitted.frames += 1;
            self.omitted.bytes += size;
        }
    }

    /// Records how an open stream ended.
    pub(super) fn record_stream_end(&mut self, call: u32, end: &str, started: Instant) {
        if let Some(ex) = self.exchange(call) {
            ex.elapsed_ms = started.elapsed().as_millis() as u64;
            ex.error = Some(format!("stream ended: {end}"));
        }
    }

    /// Replaces `secret` wherever it appears in an exchange's recorded bodies.
    pub(super) fn redact(&mut self, call: u32, secret: &str) {
        let scrub = |v: &mut Value| {
            let text = v.to_string();
            if text.contains(secret)
                && let Ok(clean) = serde_json::from_str(&text.replace(secret, "[redacted]"))
            {
                *v = clean;
            }
        };
        if let Some(ex) = self.exchange(call) {
            scrub(&mut ex.request);
            if let Some(response) = ex.response.as_mut() {
                scrub(response);
            }
        }
    }

    fn exchange(&mut self, call: u32) -> Option<&mut Exchange> {
        self.exchanges.iter_mut().find(|e| e.call == call)
    }

    /// Keeps `value` if the byte budget allows, else a note of its size in its place.
    fn within_budget(&mut self, value: Value) -> Value {
        let size = value.to_string().len();
        if self.kept_bytes + size <= self.max_bytes {
            self.kept_bytes += size;
            return value;
        }
        self.omitted.bodies += 1;
        self.omitted.bytes += size;
        json!({ "omitted": format!("{size} bytes: the transcript's budget was spent") })
    }
}
