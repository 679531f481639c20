//! Where a running probe reports each step, and how presented secrets stay out of what it
//! reports and records.

use crate::domain::ids::ProbeRunId;
use crate::remote::presentation::Authenticator;

/// Where a running probe reports each step (the CLI prints them; the service logs them).
pub trait Progress: Send + Sync {
    fn step(&self, message: &str);
}

/// Logs each step at debug level.
pub struct LogProgress(pub ProbeRunId);

impl Progress for LogProgress {
    fn step(&self, message: &str) {
        tracing::debug!(probe_run.id = %self.0, "{}", message.trim());
    }
}

/// Reports each step of a further trial, named by its number.
pub(super) struct Trial<'a> {
    pub(super) inner: &'a dyn Progress,
    pub(super) n: u32,
}

impl Progress for Trial<'_> {
    fn step(&self, message: &str) {
        self.inner
            .step(&format!("trial {}: {}", self.n, message.trim_start()));
    }
}

/// Reports each step with the presented secrets redacted.
pub(super) struct Redacting<'a> {
    pub(super) inner: &'a dyn Progress,
    pub(super) auth: &'a Authenticator,
}

impl Progress for Redacting<'_> {
    fn step(&self, message: &str) {
        self.inner.step(&self.auth.redact(message));
    }
}

/// `value`, serialized, with every secret `auth` presented replaced; what a cycle records
/// goes through this, whichever field a secret turned up in (an error naming a URL with an
/// API key in its query, an agent echoing a header).
pub(super) fn redacted<T: serde::Serialize + serde::de::DeserializeOwned>(
    value: T,
    auth: &Authenticator,
) -> T {
    let Ok(text) = serde_json::to_string(&value) else {
        return value;
    };
    let clean = auth.redact(&text);
    if clean == text {
        return value;
    }
    serde_json::from_str(&clean).unwrap_or(value)
}
