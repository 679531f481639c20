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
}

/// The outcome of the newest card fetch.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FetchState {
    pub last_at: Option<Timestamp>,
    pub status: Option<FetchStatus>,
    pub error: Option<String>,
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
}

impl FetchStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Fetched => "fetched",
            Self::Unchanged => "unchanged",
            Self::Untrusted => "untrusted",
            Self::Failed => "failed",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        [
            Self::Fetched,
            Self::Unchanged,
            Self::Untrusted,
            Self::Failed,
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

    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }
}

impl std::fmt::Display for CardUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn card_urls_are_normalized() {
        let table = [
            ("https://Agent.Example", "https://agent.example/"),
            ("https://agent.example:443/", "https://agent.example/"),
            (
                "http://127.0.0.1:8080/.well-known/agent-card.json#x",
                "http://127.0.0.1:8080/.well-known/agent-card.json",
            ),
            (
                "  https://agent.example/.well-known/agent.json ",
                "https://agent.example/.well-known/agent.json",
            ),
        ];
        for (input, expected) in table {
            assert_eq!(CardUrl::parse(input).unwrap().as_str(), expected, "{input}");
        }
    }

    #[test]
    fn bad_card_urls_say_why() {
        assert!(matches!(
            CardUrl::parse("agent.example"),
            Err(CardUrlError::Invalid(_))
        ));
        assert!(matches!(
            CardUrl::parse("ftp://agent.example"),
            Err(CardUrlError::Scheme(_))
        ));
        assert!(matches!(
            CardUrl::parse("file:///etc/passwd"),
            Err(CardUrlError::Scheme(_))
        ));
        assert!(matches!(
            CardUrl::parse("https://u:p@agent.example"),
            Err(CardUrlError::Credentials)
        ));
        let long = format!("https://agent.example/{}", "a".repeat(3000));
        assert!(matches!(
            CardUrl::parse(&long),
            Err(CardUrlError::TooLong { .. })
        ));
    }
}
