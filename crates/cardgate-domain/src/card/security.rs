//! What a card says about authentication: its named security schemes and the requirements
//! that combine them, read from either generation's shape (v1.0's proto-JSON oneof wrappers
//! and `securityRequirements`; v0.3's OpenAPI-style `type` and `security`).
//!
//! Read leniently: a scheme cardgate cannot use is kept as [`SecurityScheme::Unsupported`]
//! rather than making the card invalid, since the card is still worth judging; only probing
//! through that scheme is impossible.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Where an API key travels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum KeyLocation {
    Header,
    Query,
    Cookie,
}

/// One entry of the card's `securitySchemes`, as far as a client needs it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum SecurityScheme {
    /// HTTP `Authorization: Bearer <token>`.
    HttpBearer,
    /// An API key in a header, the query or a cookie, under `name`.
    ApiKey { location: KeyLocation, name: String },
    /// OAuth 2.0; the client-credentials flow's token URL when the card names one.
    #[serde(rename = "oauth2")]
    OAuth2 { token_url: Option<String> },
    /// OpenID Connect: the token endpoint comes from the discovery document.
    OpenIdConnect { discovery_url: String },
    /// Mutual TLS: the client presents a certificate.
    MutualTls,
    /// A scheme cardgate cannot present (HTTP basic, digest, an unknown type).
    Unsupported { kind: String },
}

impl SecurityScheme {
    /// The scheme's type as the card spells it, for messages.
    pub fn kind(&self) -> String {
        match self {
            SecurityScheme::HttpBearer => "http bearer".into(),
            SecurityScheme::ApiKey { .. } => "apiKey".into(),
            SecurityScheme::OAuth2 { .. } => "oauth2".into(),
            SecurityScheme::OpenIdConnect { .. } => "openIdConnect".into(),
            SecurityScheme::MutualTls => "mutualTLS".into(),
            SecurityScheme::Unsupported { kind } => kind.clone(),
        }
    }
}

/// One alternative of the card's requirements: every scheme it names, with the scopes each
/// must carry. Any one alternative satisfies the card.
pub type Requirement = BTreeMap<String, Vec<String>>;

/// The card's security declarations.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CardSecurity {
    pub schemes: BTreeMap<String, SecurityScheme>,
    pub requirements: Vec<Requirement>,
}

impl CardSecurity {
    pub fn is_empty(&self) -> bool {
        self.schemes.is_empty() && self.requirements.is_empty()
    }

    /// Whether a caller without credentials is turned away: some requirement is declared and
    /// none of the alternatives is empty (an empty one is OpenAPI's "anonymous is fine").
    pub fn requires_credentials(&self) -> bool {
        !self.requirements.is_empty() && self.requirements.iter().all(|r| !r.is_empty())
    }

    /// The requirements in words: "`a` + `b`, or `c`".
    pub fn describe_requirements(&self) -> String {
        self.requirements
            .iter()
            .map(|r| {
                r.keys()
                    .map(|name| format!("`{name}`"))
                    .collect::<Vec<_>>()
                    .join(" + ")
            })
            .collect::<Vec<_>>()
            .join(", or ")
    }
}

/// The card's security, from whichever fields it carries (v1.0's win on a hybrid card).
pub fn card_security(card: &Map<String, Value>) -> CardSecurity {
    let schemes = card
        .get("securitySchemes")
        .and_then(Value::as_object)
        .map(|schemes| {
            schemes
                .iter()
                .map(|(name, scheme)| (name.clone(), scheme_of(scheme)))
                .collect()
        })
        .unwrap_or_default();
    let requirements = match card.get("securityRequirements").and_then(Value::as_array) {
        Some(list) => list.iter().filter_map(v1_requirement).collect(),
        None => card
            .get("security")
            .and_then(Value::as_array)
            .map(|list| list.iter().filter_map(scope_map).collect())
            .unwrap_or_default(),
    };
    CardSecurity {
        schemes,
        requirements,
    }
}

/// A v1.0 `SecurityRequirement`: `{"schemes": {"name": {"list": [scopes]}}}`.
fn v1_requirement(value: &Value) -> Option<Requirement> {
    scope_map(value.get("schemes")?)
}

/// `{"name": scopes}`, where scopes is a list (v0.3) or a `StringList` (v1.0), whose empty
/// form SDK canonicalization may have erased to `{}`.
fn scope_map(value: &Value) -> Option<Requirement> {
    let map = value.as_object()?;
    Some(
        map.iter()
            .map(|(name, scopes)| {
                let list = scopes
                    .get("list")
                    .unwrap_or(scopes)
                    .as_array()
                    .map(|l| {
                        l.iter()
                            .filter_map(Value::as_str)
                            .map(str::to_string)
                            .collect()
                    })
                    .unwrap_or_default();
                (name.clone(), list)
            })
            .collect(),
    )
}

fn scheme_of(value: &Value) -> SecurityScheme {
    let text = |v: &Value, key: &str| v.get(key).and_then(Value::as_str).map(str::to_string);
    // v1.0: a oneof wrapper object.
    if let Some(http) = value.get("httpAuthSecurityScheme") {
        return http_scheme(text(http, "scheme").unwrap_or_default());
    }
    if let Some(key) = value.get("apiKeySecurityScheme") {
        return api_key(text(key, "location"), text(key, "name"));
    }
    if let Some(oauth) = value.get("oauth2SecurityScheme") {
        return oauth2(oauth);
    }
    if let Some(oidc) = value.get("openIdConnectSecurityScheme") {
        return open_id(text(oidc, "openIdConnectUrl"));
    }
    if value.get("mtlsSecurityScheme").is_some() {
        return SecurityScheme::MutualTls;
    }
    // v0.3: OpenAPI's `type` discriminator.
    match value.get("type").and_then(Value::as_str) {
        Some("http") => http_scheme(text(value, "scheme").unwrap_or_default()),
        Some("apiKey") => api_key(text(value, "in"), text(value, "name")),
        Some("oauth2") => oauth2(value),
        Some("openIdConnect") => open_id(text(value, "openIdConnectUrl")),
        Some("mutualTLS") => SecurityScheme::MutualTls,
        Some(other) => SecurityScheme::Unsupported { kind: other.into() },
        None => SecurityScheme::Unsupported {
            kind: "a scheme of no known type".into(),
        },
    }
}

fn http_scheme(scheme: String) -> SecurityScheme {
    if scheme.eq_ignore_ascii_case("bearer") {
        SecurityScheme::HttpBearer
    } else {
        SecurityScheme::Unsupported {
            kind: format!("http {scheme}"),
        }
    }
}

fn api_key(location: Option<String>, name: Option<String>) -> SecurityScheme {
    let location = match location.as_deref().map(str::to_ascii_lowercase).as_deref() {
        Some("header") => KeyLocation::Header,
        Some("query") => KeyLocation::Query,
        Some("cookie") => KeyLocation::Cookie,
        _ => {
            return SecurityScheme::Unsupported {
                kind: "apiKey without a location".into(),
            };
        }
    };
    match name.filter(|n| !n.is_empty()) {
        Some(name) => SecurityScheme::ApiKey { location, name },
        None => SecurityScheme::Unsupported {
            kind: "apiKey without a name".into(),
        },
    }
}

fn oauth2(scheme: &Value) -> SecurityScheme {
    let token_url = scheme
        .get("flows")
        .and_then(|f| f.get("clientCredentials"))
        .and_then(|c| c.get("tokenUrl"))
        .and_then(Value::as_str)
        .map(str::to_string);
    SecurityScheme::OAuth2 { token_url }
}

fn open_id(url: Option<String>) -> SecurityScheme {
    match url {
        Some(discovery_url) => SecurityScheme::OpenIdConnect { discovery_url },
        None => SecurityScheme::Unsupported {
            kind: "openIdConnect without openIdConnectUrl".into(),
        },
    }
}

#[cfg(test)]
mod tests;
