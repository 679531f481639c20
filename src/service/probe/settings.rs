//! How probes run: the deadlines, waits and limits every cycle shares.

use std::sync::Arc;
use std::time::Duration;

use url::Url;

use crate::domain::rulebook::Rulebook;
use crate::remote::a2a::CallLimits;

/// How probes run.
#[derive(Debug, Clone)]
pub struct ProbeSettings {
    /// Where agents can reach cardgate (`CARDGATE_PUBLIC_URL`); the push webhook is
    /// `<public_url>/v1/hooks/push/<token>`. Unset: the push probe cannot run.
    pub public_url: Option<Url>,
    /// Deadline of a whole cycle.
    pub deadline: Duration,
    /// How long the push wait lasts without a delivery: each one that arrives starts it again,
    /// within the cycle's deadline. Tens of seconds: real webhook paths (TLS to another region,
    /// a queue, a busy receiver) are that slow, and push is at-least-once, not prompt.
    pub push_wait: Duration,
    /// Webhook registration attempts, and the first backoff (doubled after each failure).
    pub push_attempts: u32,
    pub push_backoff: Duration,
    pub poll_interval: Duration,
    /// Deliveries one run's webhook accepts (a flood with a valid token stops there).
    pub push_max_deliveries: usize,
    /// How long a resubscription to the ended lifecycle task is read: a conformant agent
    /// refuses at once, or sends the final task and closes.
    pub resubscribe_wait: Duration,
    /// How long a resubscription to a live task is read once the probe has moved the task on
    /// (a follow-up, a cancel): a conformant agent carries the end and closes at once, so only
    /// a stream that does not close waits it out. Generous, so a busy machine changes nothing.
    pub live_resubscribe_wait: Duration,
    pub limits: CallLimits,
    /// Lifecycle tasks a cycle runs at once (`CARDGATE_PROBE_TRIALS`, at least 1): the first
    /// is the whole cycle, the others the lifecycle task alone; the cycle passes only if every
    /// one does (issue 46). They share the transcript budget of [`Self::limits`] equally.
    pub trials: u32,
    /// The days of finished runs a subject's track record covers (`CARDGATE_TRACK_RECORD_DAYS`).
    pub track_record_days: u32,
    /// The rules in force (the trust model's, under the operator's policy): every verdict is
    /// judged under it and names its version.
    pub rulebook: Arc<Rulebook>,
}

impl Default for ProbeSettings {
    fn default() -> Self {
        Self {
            public_url: None,
            deadline: Duration::from_secs(60),
            push_wait: Duration::from_secs(30),
            push_attempts: 3,
            push_backoff: Duration::from_millis(500),
            poll_interval: Duration::from_millis(100),
            push_max_deliveries: 64,
            resubscribe_wait: Duration::from_secs(3),
            live_resubscribe_wait: Duration::from_secs(10),
            limits: CallLimits::default(),
            trials: 3,
            track_record_days: crate::domain::probe::track::DEFAULT_WINDOW_DAYS,
            rulebook: Arc::new(Rulebook::trust_model()),
        }
    }
}
