//! A bounded Server-Sent Events reader that keeps every frame as received.
//!
//! Written here rather than taken from a crate because the registry needs what crates hide:
//! the exact data of each frame with its receive time, a cap on how large one event may grow
//! (a hostile server can send one endless line), an idle timeout, a deadline and a cap on the
//! number of events.

use std::time::Duration;

use bytes::{Buf, BytesMut};
use tokio::time::Instant;

use crate::domain::time::{self, Timestamp};

/// Bounds of one stream.
#[derive(Debug, Clone, Copy)]
pub struct SseLimits {
    pub max_event_bytes: usize,
    pub max_events: usize,
    /// Longest silence tolerated between bytes.
    pub idle: Duration,
    pub deadline: Instant,
}

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub received_at: Timestamp,
    pub event: Option<String>,
    pub data: String,
}

/// Why a stream stopped yielding frames.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamStop {
    Closed,
    Idle,
    Deadline,
    TooManyEvents,
    EventTooLarge,
    /// A message the binding itself could not decode (over gRPC: bytes that are not the
    /// protobuf message the method returns). Over SSE every frame is text and is judged by the
    /// probe instead, so the SSE reader never stops with this.
    Malformed(String),
    Error(String),
}

pub struct SseReader {
    response: reqwest::Response,
    buf: BytesMut,
    data: String,
    event: Option<String>,
    events: usize,
    limits: SseLimits,
    /// Drop a `\n` that completes a `\r\n` split across chunks.
    skip_lf: bool,
}

impl SseReader {
    pub fn new(response: reqwest::Response, limits: SseLimits) -> Self {
        Self {
            response,
            buf: BytesMut::new(),
            data: String::new(),
            event: None,
            events: 0,
            limits,
            skip_lf: false,
        }
    }

    /// The next frame, or why there is none.
    pub async fn next(&mut self) -> Result<Frame, StreamStop> {
        loop {
            while let Some(line) = self.take_line() {
                if let Some(frame) = self.field(&line) {
                    self.events += 1;
                    if self.events > self.limits.max_events {
                        return Err(StreamStop::TooManyEvents);
                    }
                    return Ok(frame);
                }
            }
            if self.buf.len() + self.data.len() > self.limits.max_event_bytes {
                return Err(StreamStop::EventTooLarge);
            }
            let now = Instant::now();
            if now >= self.limits.deadline {
                return Err(StreamStop::Deadline);
            }
            let wait = self.limits.idle.min(self.limits.deadline - now);
            match tokio::time::timeout(wait, self.response.chunk()).await {
                Err(_) if Instant::now() >= self.limits.deadline => {
                    return Err(StreamStop::Deadline);
                }
                Err(_) => return Err(StreamStop::Idle),
                Ok(Err(e)) => return Err(StreamStop::Error(e.to_string())),
                Ok(Ok(None)) => {
                    // A final event without its blank line is still dispatched (as browsers do not,
                    // but the evidence is worth keeping).
                    if !self.buf.is_empty() {
                        let rest = String::from_utf8_lossy(&self.buf.split()).into_owned();
                        self.field(&rest);
                    }
                    if !self.data.is_empty() {
                        self.events += 1;
                        return Ok(self.dispatch());
                    }
                    return Err(StreamStop::Closed);
                }
                Ok(Ok(Some(chunk))) => self.buf.extend_from_slice(&chunk),
            }
        }
    }

    /// One complete line from the buffer (terminated by CRLF, LF or CR).
    fn take_line(&mut self) -> Option<String> {
        if self.skip_lf && self.buf.first() == Some(&b'\n') {
            self.buf.advance(1);
        }
        self.skip_lf = false;
        let end = self.buf.iter().position(|b| *b == b'\n' || *b == b'\r')?;
        let line = self.buf.split_to(end);
        let terminator = self.buf[0];
        self.buf.advance(1);
        if terminator == b'\r' {
            if self.buf.first() == Some(&b'\n') {
                self.buf.advance(1);
            } else if self.buf.is_empty() {
                self.skip_lf = true;
            }
        }
        Some(String::from_utf8_lossy(&line).into_owned())
    }

    /// Applies one line; returns a frame when the line dispatches an event.
    fn field(&mut self, line: &str) -> Option<Frame> {
        if line.is_empty() {
            return (!self.data.is_empty()).then(|| self.dispatch());
        }
        if line.starts_with(':') {
            return None;
        }
        let (name, value) = match line.split_once(':') {
            Some((name, value)) => (name, value.strip_prefix(' ').unwrap_or(value)),
            None => (line, ""),
        };
        match name {
            "data" => {
                if !self.data.is_empty() {
                    self.data.push('\n');
                }
                self.data.push_str(value);
            }
            "event" => self.event = Some(value.to_string()),
            _ => {}
        }
        None
    }

    fn dispatch(&mut self) -> Frame {
        Frame {
            received_at: time::now(),
            event: self.event.take(),
            data: std::mem::take(&mut self.data),
        }
    }
}
