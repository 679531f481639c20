//! The A2A protocol bindings a card can offer an interface over, as cards name them, and the
//! order cardgate prefers them in when a version is offered over several.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// A binding cardgate can probe. Read from any case and the short forms [`FromStr`] takes;
/// written as cards write it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String")]
pub enum Binding {
    #[serde(rename = "JSONRPC")]
    JsonRpc,
    #[serde(rename = "HTTP+JSON")]
    HttpJson,
    #[serde(rename = "GRPC")]
    Grpc,
}

impl Binding {
    /// The order a version's interfaces are tried in when no binding is asked for: the one a
    /// caller is most likely to use first (the SDKs list JSON-RPC first, and it is the only
    /// binding every version has).
    pub const PREFERRED: [Binding; 3] = [Binding::JsonRpc, Binding::HttpJson, Binding::Grpc];

    /// The name as a card's `protocolBinding` (v1.0) or `transport` (v0.3) writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Binding::JsonRpc => "JSONRPC",
            Binding::HttpJson => "HTTP+JSON",
            Binding::Grpc => "GRPC",
        }
    }

    /// Whether a card's binding string names this binding (cards vary in case).
    pub fn names(self, card_binding: &str) -> bool {
        card_binding.eq_ignore_ascii_case(self.as_str())
    }
}

impl fmt::Display for Binding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl TryFrom<String> for Binding {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        s.parse()
    }
}

impl FromStr for Binding {
    type Err = String;

    /// The card's names, in any case, plus the short forms a person types (`grpc`, `rest`).
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_uppercase().as_str() {
            "JSONRPC" | "JSON-RPC" => Ok(Binding::JsonRpc),
            "HTTP+JSON" | "REST" | "HTTP-JSON" => Ok(Binding::HttpJson),
            "GRPC" => Ok(Binding::Grpc),
            _ => Err(format!(
                "`{s}` is not a binding cardgate probes (JSONRPC, HTTP+JSON or GRPC)"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_card_names_and_short_forms() {
        assert_eq!("grpc".parse(), Ok(Binding::Grpc));
        assert_eq!("GRPC".parse(), Ok(Binding::Grpc));
        assert_eq!("http+json".parse(), Ok(Binding::HttpJson));
        assert_eq!("rest".parse(), Ok(Binding::HttpJson));
        assert_eq!("JSONRPC".parse(), Ok(Binding::JsonRpc));
        assert!("soap".parse::<Binding>().unwrap_err().contains("GRPC"));
    }

    #[test]
    fn names_card_bindings_in_any_case() {
        assert!(Binding::Grpc.names("grpc"));
        assert!(!Binding::Grpc.names("JSONRPC"));
    }
}
