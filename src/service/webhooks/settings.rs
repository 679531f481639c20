//! How webhook deliveries are sent: the retry policy, deadlines and concurrency.

use std::time::Duration;

use crate::domain::webhook::RetryPolicy;
/// How deliveries are sent.
#[derive(Debug, Clone)]
pub struct WebhookSettings {
    pub retry: RetryPolicy,
    /// One attempt's deadline, connection to response headers.
    pub timeout: Duration,
    /// Deliveries claimed per round.
    pub batch: u32,
    /// How often due retries are looked for when nothing new happens.
    pub poll: Duration,
    /// How long the old secret keeps signing after a rotation.
    pub rotation_overlap: Duration,
    /// Attempts in flight at once to one receiver host (per process).
    pub host_concurrency: usize,
    /// How long a receiver must have failed every attempt to be `failing`.
    pub failing_after: Duration,
    /// Sending rounds in flight at once in one process: while one sends, the next claims.
    pub rounds: usize,
}

impl Default for WebhookSettings {
    fn default() -> Self {
        Self {
            retry: RetryPolicy::default(),
            timeout: Duration::from_secs(10),
            batch: 256,
            poll: Duration::from_millis(250),
            rotation_overlap: Duration::from_secs(24 * 3600),
            host_concurrency: 16,
            failing_after: Duration::from_secs(24 * 3600),
            rounds: 2,
        }
    }
}
