//! Agent cards: parsing every card generation into one normalized view, canonicalizing them as
//! the official SDKs do for signatures, verifying those signatures, and working out what a new
//! card means for a callee's subjects.
//!
//! Everything here works on the raw JSON (`serde_json::Value` parsed from the fetched bytes).
//! Typed A2A models re-serialize cards differently, which would break signatures.

/// A file recorded from the official Python SDK, under the repository's `tests/fixtures/`.
#[cfg(test)]
macro_rules! sdk_fixture {
    ($name:literal) => {
        include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../tests/fixtures/a2a-sdk-python-1.3.0/",
            $name
        ))
    };
}
#[cfg(test)]
pub(crate) use sdk_fixture;

pub mod canonical;
pub mod changes;
pub mod parse;
pub mod refresh;
pub mod security;
pub mod signature;

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use url::Url;

use super::capability::Capability;
use super::version::ProtocolVersion;

pub use parse::{CardError, parse_card};
pub use security::CardSecurity;

/// Which shape the card has (A2A a2a-protocol.md §1.2–1.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Generation {
    /// `supportedInterfaces[]`, versions per interface.
    V1,
    /// v1.0 fields plus legacy top-level `url`/`protocolVersion`/`preferredTransport`, as
    /// a2a-sdk 1.3.0 serves. The interfaces come from `supportedInterfaces`.
    Hybrid,
    /// Top-level `url`, `preferredTransport`, `protocolVersion` 0.3.
    V03,
    /// Top-level `url`, no or a 0.2.x `protocolVersion`.
    V02,
}

/// What one card may hold, in kind. Defaults no real card reaches; each is a bound on work
/// a card makes cardgate do (subjects to probe, signatures to verify, key sets to fetch).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CardCaps {
    pub interfaces: usize,
    pub versions: usize,
    pub skills: usize,
    pub signatures: usize,
}

impl Default for CardCaps {
    fn default() -> Self {
        Self {
            interfaces: 64,
            versions: 32,
            skills: 256,
            signatures: 16,
        }
    }
}

impl CardCaps {
    /// `Err` naming the first cap the card is over.
    pub fn check(&self, raw: &serde_json::Value, card: &NormalizedCard) -> Result<(), String> {
        let signatures = raw
            .get("signatures")
            .and_then(serde_json::Value::as_array)
            .map_or(0, Vec::len);
        let counts = [
            ("interfaces", card.interfaces.len(), self.interfaces),
            (
                "distinct protocol versions",
                card.versions().len(),
                self.versions,
            ),
            ("skills", card.skills.len(), self.skills),
            ("signatures", signatures, self.signatures),
        ];
        match counts.iter().find(|(_, n, cap)| n > cap) {
            Some((what, n, cap)) => Err(format!("{n} {what}, over the cap of {cap}")),
            None => Ok(()),
        }
    }
}

/// One way to reach the agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CardInterface {
    pub url: String,
    /// `JSONRPC`, `HTTP+JSON`, `GRPC` or another binding string.
    pub binding: String,
    pub version: ProtocolVersion,
    pub tenant: Option<String>,
}

/// The capability flags as the card declares them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CardCapabilities {
    pub streaming: bool,
    pub push_notifications: bool,
    /// Declared at all; it only means something for pre-1.0 interfaces.
    pub state_transition_history: bool,
    pub extended_agent_card: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SkillSummary {
    pub id: String,
    pub name: Option<String>,
}

/// One view of any card generation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NormalizedCard {
    pub generation: Generation,
    pub name: String,
    pub description: Option<String>,
    /// The agent's own version string (not the protocol version).
    pub agent_version: Option<String>,
    pub interfaces: Vec<CardInterface>,
    pub capabilities: CardCapabilities,
    pub skills: Vec<SkillSummary>,
    pub default_input_modes: Vec<String>,
    pub default_output_modes: Vec<String>,
    /// Top-level fields the card carries that its generation's model does not know.
    pub legacy_fields: Vec<String>,
    /// Its security schemes and requirements (none on cards stored before they were read).
    #[serde(default, skip_serializing_if = "CardSecurity::is_empty")]
    pub security: CardSecurity,
}

impl NormalizedCard {
    /// The interfaces offered for `version`, in card order.
    pub fn interfaces_for(&self, version: ProtocolVersion) -> Vec<&CardInterface> {
        self.interfaces
            .iter()
            .filter(|i| i.version == version)
            .collect()
    }

    /// Every `Major.Minor` offered: one subject each.
    pub fn versions(&self) -> BTreeSet<ProtocolVersion> {
        self.interfaces.iter().map(|i| i.version).collect()
    }

    /// The capabilities the card advertises for `version`, per card generation:
    /// `stateTransitionHistory` exists only before v1.0 (A2A #1396 removed it).
    pub fn advertised_for(&self, version: ProtocolVersion) -> BTreeSet<Capability> {
        let caps = &self.capabilities;
        let mut out = BTreeSet::new();
        if caps.streaming {
            out.insert(Capability::Streaming);
        }
        if caps.push_notifications {
            out.insert(Capability::PushNotifications);
        }
        if caps.state_transition_history && version.is_pre_1_0() {
            out.insert(Capability::StateTransitionHistory);
        }
        out
    }

    /// Advertised capabilities per offered version.
    pub fn advertised(&self) -> BTreeMap<ProtocolVersion, BTreeSet<Capability>> {
        self.versions()
            .into_iter()
            .map(|v| (v, self.advertised_for(v)))
            .collect()
    }
}

/// `scheme://host:port` with the scheme's default port made explicit.
pub fn origin_of(url: &Url) -> Option<(String, String, u16)> {
    Some((
        url.scheme().to_string(),
        url.host_str()?.to_ascii_lowercase(),
        url.port_or_known_default()?,
    ))
}

impl CardInterface {
    /// Where the interface is, as a URL. A gRPC interface may name its target as a bare
    /// `host:port` (the Python SDK's sample publishes one, and the specification's draft after
    /// v1.0 asks for that form); it is read as `https://host:port`, since the specification
    /// requires TLS for gRPC and a plaintext target can say `http://`.
    pub fn location(&self) -> Result<Url, url::ParseError> {
        let bare = !self.url.contains("://");
        if bare && self.binding.eq_ignore_ascii_case("GRPC") {
            Url::parse(&format!("https://{}", self.url))
        } else {
            Url::parse(&self.url)
        }
    }

    /// Whether the interface is on the card's origin (the `same-origin` condition).
    pub fn same_origin_as(&self, card_url: &Url) -> bool {
        self.location()
            .is_ok_and(|at| same_origin(card_url, at.as_str()))
    }
}

/// Same scheme, host and port (the `same-origin` condition).
pub fn same_origin(card_url: &Url, other: &str) -> bool {
    match Url::parse(other) {
        Ok(other) => origin_of(card_url).is_some() && origin_of(card_url) == origin_of(&other),
        Err(_) => false,
    }
}

/// The card's origin as text, e.g. `https://agent.example:443`.
pub fn origin_text(url: &Url) -> String {
    match origin_of(url) {
        Some((scheme, host, port)) => format!("{scheme}://{host}:{port}"),
        None => url.to_string(),
    }
}

/// How one fetched card was judged. Stored with its snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Assessment {
    /// Usable: parsed, and verified (or unsigned and admitted by policy).
    pub trusted: bool,
    /// Why not, when not.
    pub problem: Option<String>,
    /// The normalized card, when it parsed (and until retention pruned the snapshot: it goes
    /// with the raw bytes it was parsed from).
    #[serde(default)]
    pub card: Option<NormalizedCard>,
    pub signature: signature::SignatureVerdict,
    /// Card fields the signature does not cover.
    pub uncovered: Vec<String>,
}

/// One fetch of a callee's card: the raw bytes exactly as served, and their assessment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CardSnapshot {
    pub id: crate::ids::SnapshotId,
    pub callee_id: crate::ids::CalleeId,
    pub fetched_at: crate::time::Timestamp,
    /// The URL the card was finally served from.
    pub url: String,
    pub sha256: String,
    /// Empty once retention pruned it (`raw_pruned_at`).
    pub raw: Vec<u8>,
    pub etag: Option<String>,
    pub last_modified: Option<String>,
    pub assessment: Assessment,
    pub source: SnapshotSource,
    /// When retention dropped the raw bytes (`sha256` still names them).
    pub raw_pruned_at: Option<crate::time::Timestamp>,
}

/// Which card a snapshot holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SnapshotSource {
    /// The public card at the well-known URL: what decisions and refreshes read.
    Public,
    /// The authenticated extended card, fetched with the callee's credentials by this probe
    /// run; it tells what authenticated callers are shown, never what everyone is.
    Extended {
        probe_run_id: crate::ids::ProbeRunId,
    },
}

impl SnapshotSource {
    /// As stored in `kind`.
    pub fn kind(self) -> &'static str {
        match self {
            Self::Public => "public",
            Self::Extended { .. } => "extended",
        }
    }

    /// The probe run that fetched an extended card.
    pub fn probe_run_id(self) -> Option<crate::ids::ProbeRunId> {
        match self {
            Self::Public => None,
            Self::Extended { probe_run_id } => Some(probe_run_id),
        }
    }
}

#[cfg(test)]
mod fuzz {
    //! Property tests: no JSON input makes the parser or the canonicalizer panic, and the
    //! canonical form is a fixed point.

    use proptest::prelude::*;
    use serde_json::{Map, Value, json};

    use super::canonical::canonicalize_card;
    use super::parse_card;
    use super::signature::read_signatures;

    fn any_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|n| json!(n)),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(|f| json!(f)),
            "[a-zA-Z0-9 ./:_-]{0,12}".prop_map(Value::String),
            prop_oneof![Just("1.0"), Just("0.3"), Just("JSONRPC"), Just("")]
                .prop_map(|s| Value::String(s.into())),
        ];
        leaf.prop_recursive(6, 64, 8, |inner| {
            let keys = prop_oneof![
                Just("name".to_string()),
                Just("url".to_string()),
                Just("supportedInterfaces".to_string()),
                Just("protocolVersion".to_string()),
                Just("protocolBinding".to_string()),
                Just("capabilities".to_string()),
                Just("streaming".to_string()),
                Just("skills".to_string()),
                Just("id".to_string()),
                Just("securitySchemes".to_string()),
                Just("type".to_string()),
                Just("security".to_string()),
                Just("signatures".to_string()),
                Just("params".to_string()),
                Just("extensions".to_string()),
                Just("additionalInterfaces".to_string()),
                "[a-z]{1,6}",
            ];
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::vec((keys, inner), 0..6)
                    .prop_map(|kv| Value::Object(kv.into_iter().collect::<Map<_, _>>())),
            ]
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

        #[test]
        fn parsing_and_canonicalizing_never_panic(value in any_json()) {
            let _ = parse_card(&value);
            let _ = read_signatures(&value);
            if let Ok(canonical) = canonicalize_card(&value) {
                let reparsed: Value = serde_json::from_slice(&canonical.payload).expect("canonical output is JSON");
                let again = canonicalize_card(&reparsed).expect("canonical output canonicalizes");
                prop_assert_eq!(again.payload, canonical.payload);
            }
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
            if let Ok(value) = serde_json::from_slice::<Value>(&bytes) {
                let _ = parse_card(&value);
                let _ = canonicalize_card(&value);
            }
        }
    }
}

#[cfg(test)]
mod interface_tests {
    use super::*;

    fn grpc(url: &str) -> CardInterface {
        CardInterface {
            url: url.into(),
            binding: "GRPC".into(),
            version: ProtocolVersion::parse_exact("1.0").expect("version"),
            tenant: None,
        }
    }

    fn card_url(text: &str) -> Url {
        Url::parse(text).expect("url")
    }

    #[test]
    fn grpc_interfaces_compare_scheme_host_and_port() {
        let card = card_url("http://agent.example:8080/.well-known/agent-card.json");
        assert!(grpc("http://agent.example:8080").same_origin_as(&card));
        assert!(grpc("http://AGENT.example:8080/a2a/grpc").same_origin_as(&card));
        assert!(!grpc("http://agent.example:8081").same_origin_as(&card));
        assert!(!grpc("https://agent.example:8080").same_origin_as(&card));
        assert!(!grpc("http://other.example:8080").same_origin_as(&card));
    }

    #[test]
    fn a_bare_grpc_target_is_tls_on_its_port() {
        let at = grpc("agent.example:443").location().expect("parses");
        assert_eq!(at.as_str(), "https://agent.example/");
        assert!(grpc("agent.example:443").same_origin_as(&card_url("https://agent.example/")));
        assert!(
            !grpc("agent.example:8080").same_origin_as(&card_url("http://agent.example:8080/"))
        );
        // Only gRPC targets are read that way.
        let jsonrpc = CardInterface {
            binding: "JSONRPC".into(),
            ..grpc("agent.example:443")
        };
        assert!(!jsonrpc.same_origin_as(&card_url("https://agent.example/")));
    }
}
