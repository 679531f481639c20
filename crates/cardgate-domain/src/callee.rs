//! Callees: the agents operators register, known by their card URL.

use serde_json::Value;
use url::Url;

use super::ids::CalleeId;
use super::time::Timestamp;

/// A registered callee.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Callee {
    pub id: CalleeId,
    pub card_url: CardUrl,
    pub name: Option<String>,
    pub created_at: Timestamp,
    /// The operator's pinned JWKS; when set, only these keys verify the card.
    pub trusted_keys: Option<Value>,
    /// What the probe says to this callee (defaults when unset).
    pub probe_script: Option<super::probe::ProbeScript>,
    pub fetch: FetchState,
    /// Bumped by every recorded refresh; a refresh decided on an older generation retries.
    pub refresh_generation: i64,
}

/// The outcome of the newest card fetch.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FetchState {
    pub last_at: Option<Timestamp>,
    pub status: Option<FetchStatus>,
    pub error: Option<String>,
    /// Consecutive fetches that gave no trusted card (failed, or untrusted).
    pub failures: i32,
    /// Not fetched again on schedule before this (exponential backoff after failures).
    pub next_at: Option<Timestamp>,
}

impl FetchState {
    /// The state after a fetch attempt at `now` with outcome `status`.
    pub fn after(
        &self,
        status: FetchStatus,
        error: Option<String>,
        backoff: &Backoff,
        now: Timestamp,
    ) -> Self {
        // An untrusted card backs off like an unreachable one: refetching it every sweep
        // costs a hostile origin nothing and cardgate a fetch, a parse and key fetches.
        let failures = match status {
            FetchStatus::Failed | FetchStatus::Untrusted => self.failures.saturating_add(1),
            FetchStatus::Fetched | FetchStatus::Unchanged => 0,
            // Neither a failure nor a success: the count stands as it was.
            FetchStatus::Deferred => self.failures,
        };
        Self {
            last_at: Some(now),
            status: Some(status),
            error,
            failures,
            next_at: (failures > 0).then(|| now + backoff.delay(failures)),
        }
    }

    /// The state after a fetch the host deferred to `until` at `now`: asked again then, with
    /// its failures neither counted nor forgiven.
    pub fn deferred(&self, error: Option<String>, until: Timestamp, now: Timestamp) -> Self {
        Self {
            last_at: Some(now),
            status: Some(FetchStatus::Deferred),
            error,
            failures: self.failures,
            next_at: Some(until),
        }
    }
}

/// Exponential backoff for unreachable callees: `base`, doubled per consecutive failure, at
/// most `cap`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    pub base: std::time::Duration,
    pub cap: std::time::Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Self {
            base: std::time::Duration::from_secs(60),
            cap: std::time::Duration::from_secs(6 * 3600),
        }
    }
}

impl Backoff {
    pub fn delay(&self, failures: i32) -> chrono::Duration {
        let exponent = u32::try_from(failures.max(1) - 1).unwrap_or(0).min(30);
        let delay = self.base.saturating_mul(1u32 << exponent).min(self.cap);
        chrono::Duration::from_std(delay).unwrap_or(chrono::Duration::MAX)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FetchStatus {
    /// A new snapshot was recorded and trusted.
    Fetched,
    /// 304, or the same bytes as the newest snapshot.
    Unchanged,
    /// Fetched, but it did not parse or verify.
    Untrusted,
    /// Not fetched (network, HTTP status, limits).
    Failed,
    /// Not fetched: the host asked cardgate to wait (429 or 503 with `Retry-After`). Not the
    /// agent's failure: the card's trust stands, and the fetch is tried again then.
    Deferred,
}

impl FetchStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Fetched => "fetched",
            Self::Unchanged => "unchanged",
            Self::Untrusted => "untrusted",
            Self::Failed => "failed",
            Self::Deferred => "deferred",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        [
            Self::Fetched,
            Self::Unchanged,
            Self::Untrusted,
            Self::Failed,
            Self::Deferred,
        ]
        .into_iter()
        .find(|v| v.as_str() == s)
    }
}

/// Where a callee's card is: an origin, its well-known card URL, or the legacy `agent.json`.
/// Parsed and normalized, so one card has one spelling (and duplicates are caught).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CardUrl(Url);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CardUrlError {
    #[error("card_url is not an absolute URL: {0}")]
    Invalid(String),
    #[error("card_url must use http or https, not `{0}`")]
    Scheme(String),
    #[error("card_url must name a host")]
    NoHost,
    #[error("card_url must not carry credentials")]
    Credentials,
    #[error("card_url is longer than {max} bytes")]
    TooLong { max: usize },
}

impl CardUrl {
    pub const MAX_LEN: usize = 2048;

    pub fn parse(input: &str) -> Result<Self, CardUrlError> {
        let input = input.trim();
        if input.len() > Self::MAX_LEN {
            return Err(CardUrlError::TooLong { max: Self::MAX_LEN });
        }
        let mut url = Url::parse(input).map_err(|e| CardUrlError::Invalid(e.to_string()))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(CardUrlError::Scheme(url.scheme().to_string()));
        }
        if url.host_str().is_none_or(str::is_empty) {
            return Err(CardUrlError::NoHost);
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(CardUrlError::Credentials);
        }
        url.set_fragment(None);
        Ok(Self(url))
    }

    pub fn as_url(&self) -> &Url {
        &self.0
    }

    /// The other spellings of the same card: an origin (`https://a/`) is fetched at its
    /// well-known card URLs, so a caller who names either finds a callee registered by the
    /// other. Empty for a card URL elsewhere on its host.
    pub fn equivalents(&self) -> Vec<String> {
        const WELL_KNOWN: [&str; 2] = ["/.well-known/agent-card.json", "/.well-known/agent.json"];
        if self.0.query().is_some() {
            return Vec::new();
        }
        let path = self.0.path();
        let spelled = |path: &str| {
            let mut url = self.0.clone();
            url.set_path(path);
            url.to_string()
        };
        if path == "/" {
            WELL_KNOWN.iter().map(|p| spelled(p)).collect()
        } else if WELL_KNOWN.contains(&path) {
            std::iter::once(spelled("/"))
                .chain(
                    WELL_KNOWN
                        .iter()
                        .filter(|p| **p != path)
                        .map(|p| spelled(p)),
                )
                .collect()
        } else {
            Vec::new()
        }
    }

    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }
}

impl std::fmt::Display for CardUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0.as_str())
    }
}

/// What a search of callees asks for; `None` matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CalleeFilter {
    /// A substring of the name or card URL, compared without case.
    pub text: Option<String>,
    /// A subject in this effective gate.
    pub gate: Option<super::gate::EffectiveGate>,
}

#[cfg(test)]
mod tests;
