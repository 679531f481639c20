//! Card discovery: fetching a callee's card through the guarded client and judging it
//! (parse, canonicalize, verify). Produces snapshots; what they mean for the ledger is
//! `domain::card::changes`.

use std::collections::HashMap;
use std::time::Duration;

use tokio::time::Instant;

use bytes::Bytes;
use reqwest::header::{
    ACCEPT, ETAG, HeaderMap, HeaderValue, IF_MODIFIED_SINCE, IF_NONE_MATCH, LAST_MODIFIED,
};
use serde_json::Value;
use sha2::{Digest, Sha256};
use url::Url;

use crate::domain::callee::CardUrl;
use crate::domain::card::canonical::canonicalize_card;
use crate::domain::card::signature::{
    self, EntryOutcome, KeySet, KeySource, ProtectedHeader, SignatureVerdict,
};
use crate::domain::card::{Assessment, CardCaps, CardSnapshot, parse_card};
use crate::domain::ids::{CalleeId, SnapshotId};
use crate::domain::time::Timestamp;
use crate::remote::{FetchError, Limits, Outbound, Redirects};

/// The key sets one card's signatures named, fetched or refused, by `jku`.
type KeySets = HashMap<String, Result<KeySet, String>>;

/// The well-known card path (v0.3+, v1.0) and the legacy one (v0.2).
pub const WELL_KNOWN: [&str; 2] = ["/.well-known/agent-card.json", "/.well-known/agent.json"];

#[derive(Debug, Clone)]
pub struct DiscoverySettings {
    /// Only verified cards are trusted (`CARDGATE_REQUIRE_SIGNED_CARDS`, default true).
    pub require_signed: bool,
    pub max_card_bytes: usize,
    pub max_jwks_bytes: usize,
    pub fetch_timeout: Duration,
    /// What one card may hold, in kind: a card over a cap is untrusted, naming the cap.
    pub caps: CardCaps,
    /// Distinct `jku` key sets fetched for one card; all of them share one `fetch_timeout`.
    pub max_key_sets: usize,
}

impl Default for DiscoverySettings {
    fn default() -> Self {
        Self {
            require_signed: true,
            max_card_bytes: 512 * 1024,
            max_jwks_bytes: 64 * 1024,
            fetch_timeout: Duration::from_secs(10),
            caps: CardCaps::default(),
            max_key_sets: 3,
        }
    }
}

/// What the previous fetch left for a conditional request.
#[derive(Debug, Clone)]
pub struct Validators {
    pub url: String,
    pub etag: Option<String>,
    pub last_modified: Option<String>,
}

/// The result of fetching a card.
#[derive(Debug, Clone)]
pub enum Fetch {
    /// 304: the card is as it was.
    NotModified { url: Url },
    Body {
        url: Url,
        etag: Option<String>,
        last_modified: Option<String>,
        bytes: Bytes,
    },
}

#[derive(Clone)]
pub struct Discovery {
    outbound: Outbound,
    settings: DiscoverySettings,
}

impl Discovery {
    pub fn new(outbound: Outbound, settings: DiscoverySettings) -> Self {
        Self { outbound, settings }
    }

    pub fn settings(&self) -> &DiscoverySettings {
        &self.settings
    }

    /// Fetches the card. An origin is tried at the well-known path, then at the legacy one.
    pub async fn fetch(
        &self,
        card_url: &CardUrl,
        previous: Option<&Validators>,
    ) -> Result<Fetch, FetchError> {
        let candidates = candidates(card_url);
        let last = candidates.len() - 1;
        for (i, url) in candidates.into_iter().enumerate() {
            let mut headers = HeaderMap::new();
            // Some agents serve a v0.3 card without it (a2a-js legacyCompat).
            headers.insert("A2A-Version", HeaderValue::from_static("1.0"));
            headers.insert(ACCEPT, HeaderValue::from_static("application/json"));
            if let Some(prev) = previous.filter(|p| p.url == url.as_str()) {
                if let Some(v) = prev
                    .etag
                    .as_deref()
                    .and_then(|e| HeaderValue::from_str(e).ok())
                {
                    headers.insert(IF_NONE_MATCH, v);
                }
                if let Some(v) = prev
                    .last_modified
                    .as_deref()
                    .and_then(|e| HeaderValue::from_str(e).ok())
                {
                    headers.insert(IF_MODIFIED_SINCE, v);
                }
            }
            let limits = Limits {
                max_body: self.settings.max_card_bytes,
                timeout: self.settings.fetch_timeout,
            };
            let fetched = self
                .outbound
                .get(url, headers, Redirects::SameOrigin, limits)
                .await?;
            match fetched.status {
                200..=299 => {
                    let header = |name| {
                        fetched
                            .headers
                            .get(name)
                            .and_then(|v: &HeaderValue| v.to_str().ok())
                            .map(str::to_string)
                    };
                    return Ok(Fetch::Body {
                        etag: header(ETAG),
                        last_modified: header(LAST_MODIFIED),
                        url: fetched.url,
                        bytes: fetched.body,
                    });
                }
                304 => return Ok(Fetch::NotModified { url: fetched.url }),
                404 | 410 if i < last => continue,
                status => {
                    return Err(FetchError::Status {
                        url: fetched.url.to_string(),
                        status,
                    });
                }
            }
        }
        unreachable!("the last candidate always returns")
    }

    /// Judges fetched card bytes: parse, canonicalize, verify, apply the signature policy.
    pub async fn assess(
        &self,
        url: &Url,
        bytes: &[u8],
        trusted_keys: Option<&Value>,
    ) -> Assessment {
        let untrusted = |problem: String, signature: SignatureVerdict| Assessment {
            trusted: false,
            problem: Some(problem),
            card: None,
            signature,
            uncovered: Vec::new(),
        };
        let value: Value = match serde_json::from_slice(bytes) {
            Ok(v) => v,
            Err(e) => {
                let problem = format!("the card is not valid JSON ({e})");
                return untrusted(
                    problem.clone(),
                    SignatureVerdict::NotChecked { reason: problem },
                );
            }
        };
        let card = match parse_card(&value) {
            Ok(card) => card,
            Err(e) => {
                let problem = format!("the card is malformed: {e}");
                return untrusted(
                    problem.clone(),
                    SignatureVerdict::NotChecked { reason: problem },
                );
            }
        };
        if let Err(over) = self.settings.caps.check(&value, &card) {
            let problem = format!("the card is too large in kind: {over}");
            return untrusted(
                problem.clone(),
                SignatureVerdict::NotChecked { reason: problem },
            );
        }
        let (signature, uncovered) = self.verify(url, &value, trusted_keys).await;
        let problem = match &signature {
            SignatureVerdict::Verified { .. } => None,
            SignatureVerdict::Unsigned if !self.settings.require_signed => None,
            SignatureVerdict::Unsigned => Some(
                "the card is unsigned, and cardgate requires a verified signature \
                 (CARDGATE_REQUIRE_SIGNED_CARDS=false admits unsigned cards)"
                    .to_string(),
            ),
            SignatureVerdict::Invalid { reason } => {
                Some(format!("the card's signature is invalid: {reason}"))
            }
            SignatureVerdict::KeyUnavailable { reason } => {
                Some(format!("no key to verify the card's signature: {reason}"))
            }
            SignatureVerdict::NotChecked { reason } => Some(reason.clone()),
        };
        Assessment {
            trusted: problem.is_none(),
            problem,
            card: Some(card),
            signature,
            uncovered,
        }
    }

    async fn verify(
        &self,
        card_url: &Url,
        card: &Value,
        trusted_keys: Option<&Value>,
    ) -> (SignatureVerdict, Vec<String>) {
        let entries = match signature::read_signatures(card) {
            Ok(entries) => entries,
            Err(reason) => return (SignatureVerdict::Invalid { reason }, Vec::new()),
        };
        let canonical = match canonicalize_card(card) {
            Ok(c) => c,
            Err(e) if entries.is_empty() => {
                return (
                    SignatureVerdict::Unsigned,
                    vec![format!("(no canonical form: {e})")],
                );
            }
            Err(e) => {
                return (
                    SignatureVerdict::Invalid {
                        reason: e.to_string(),
                    },
                    Vec::new(),
                );
            }
        };
        let pinned = match pinned_keys(trusted_keys) {
            Ok(pinned) => pinned,
            Err(verdict) => return (verdict, canonical.uncovered),
        };
        // Every signature may name its own key set: a few distinct ones are fetched, all
        // within one deadline, so a card cannot make cardgate wait on a slow origin per entry.
        let deadline = Instant::now() + self.settings.fetch_timeout;
        let mut key_sets = KeySets::default();
        let mut outcomes = Vec::with_capacity(entries.len());
        for entry in &entries {
            let outcome = match &entry.header {
                Err(reason) => {
                    EntryOutcome::Invalid(format!("signature {}: {reason}", entry.index))
                }
                Ok(header) => {
                    let keys = match &pinned {
                        Some(pinned) => Ok(pinned.clone()),
                        None => {
                            self.keys_named(header, card_url, deadline, &mut key_sets)
                                .await
                        }
                    };
                    match keys {
                        Ok(keys) => signature::verify_entry(entry, &canonical.payload, &keys),
                        Err(reason) => EntryOutcome::KeyUnavailable(format!(
                            "signature {}: {reason}",
                            entry.index
                        )),
                    }
                }
            };
            outcomes.push((entry.index, outcome));
        }
        (signature::verdict(outcomes), canonical.uncovered)
    }

    /// The key set a signature's header names by `jku`, fetched once per card and at most
    /// `max_key_sets` distinct ones.
    async fn keys_named(
        &self,
        header: &ProtectedHeader,
        card_url: &Url,
        deadline: Instant,
        key_sets: &mut KeySets,
    ) -> Result<KeySet, String> {
        let Some(jku) = &header.jku else {
            return Err(
                "no trusted_keys are pinned for this callee and the signature names no jku".into(),
            );
        };
        if !key_sets.contains_key(jku) {
            let fetched = if key_sets.len() >= self.settings.max_key_sets {
                Err(format!(
                    "the card names more than {} distinct jku key sets; the rest are not fetched",
                    self.settings.max_key_sets
                ))
            } else {
                self.fetch_jwks(jku, card_url, deadline).await
            };
            key_sets.insert(jku.clone(), fetched);
        }
        key_sets[jku].clone()
    }

    /// Fetches a `jku` key set: only on the card's origin, through the guarded client.
    async fn fetch_jwks(
        &self,
        jku: &str,
        card_url: &Url,
        deadline: Instant,
    ) -> Result<KeySet, String> {
        let timeout = deadline.saturating_duration_since(Instant::now());
        if timeout.is_zero() {
            return Err(format!(
                "jku {jku}: the card's key sets took longer than {} s in all",
                self.settings.fetch_timeout.as_secs()
            ));
        }
        // A literal non-public address is named as such before the https and origin rules.
        if let Ok(url) = Url::parse(jku) {
            self.outbound
                .check_url(&url)
                .map_err(|e| format!("jku {jku}: {e}"))?;
        }
        let url = signature::jku_allowed(jku, card_url, |u| self.outbound.is_allowed_network(u))?;
        let mut headers = HeaderMap::new();
        headers.insert(ACCEPT, HeaderValue::from_static("application/json"));
        let limits = Limits {
            max_body: self.settings.max_jwks_bytes,
            timeout,
        };
        let fetched = self
            .outbound
            .get(url.clone(), headers, Redirects::SameOrigin, limits)
            .await
            .map_err(|e| format!("jku {jku}: {e}"))?;
        if fetched.status != 200 {
            return Err(format!("jku {jku} answered HTTP {}", fetched.status));
        }
        let value: Value = serde_json::from_slice(&fetched.body)
            .map_err(|e| format!("jku {jku} is not JSON: {e}"))?;
        let keys = signature::parse_jwks(&value).map_err(|e| format!("jku {jku}: {e}"))?;
        Ok(KeySet {
            source: KeySource::Jku {
                url: url.to_string(),
            },
            keys,
        })
    }
}

/// The URLs to try for a card URL: an origin means the well-known paths.
fn candidates(card_url: &CardUrl) -> Vec<Url> {
    let url = card_url.as_url();
    if url.path() == "/" && url.query().is_none() {
        WELL_KNOWN
            .iter()
            .map(|path| url.join(path).expect("a well-known path joins any origin"))
            .collect()
    } else {
        vec![url.clone()]
    }
}

/// A snapshot of fetched bytes and their assessment.
pub fn snapshot(
    callee_id: CalleeId,
    now: Timestamp,
    url: &Url,
    bytes: &[u8],
    etag: Option<String>,
    last_modified: Option<String>,
    assessment: Assessment,
) -> CardSnapshot {
    CardSnapshot {
        id: SnapshotId::new(),
        callee_id,
        fetched_at: now,
        url: url.to_string(),
        sha256: sha256_hex(bytes),
        raw: bytes.to_vec(),
        etag,
        last_modified,
        assessment,
        source: crate::domain::card::SnapshotSource::Public,
        raw_pruned_at: None,
    }
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// The callee's pinned key set, if it has one; a pinned set that does not parse leaves every
/// signature without a key.
fn pinned_keys(trusted_keys: Option<&Value>) -> Result<Option<KeySet>, SignatureVerdict> {
    match trusted_keys.map(signature::parse_jwks) {
        None => Ok(None),
        Some(Ok(keys)) => Ok(Some(KeySet {
            source: KeySource::Pinned,
            keys,
        })),
        Some(Err(reason)) => Err(SignatureVerdict::KeyUnavailable {
            reason: format!("trusted_keys: {reason}"),
        }),
    }
}
