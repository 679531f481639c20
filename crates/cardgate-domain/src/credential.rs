//! Credentials cardgate presents to a callee, one per security scheme of its card: their kinds,
//! which kind fits which scheme, which of the card's requirements the configured ones satisfy,
//! and how one is named without being shown (its fingerprint).
//!
//! A secret is a [`Secret`]: its `Debug` prints nothing of it, so it cannot reach a log line
//! through a `{:?}`; it is serialized only to be sealed (`domain::secrets`).

use std::collections::BTreeMap;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::card::CardSecurity;
use super::card::security::SecurityScheme;
use super::ids::CalleeId;
use super::time::Timestamp;

/// A secret value. Never printed; compared and serialized only where it must be.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret([redacted])")
    }
}

/// One scheme's credential, as an operator sets it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Credential {
    /// For an HTTP bearer scheme.
    Bearer { token: Secret },
    /// For an `apiKey` scheme; where it goes and under what name come from the card.
    ApiKey { value: Secret },
    /// For OAuth 2.0 and OpenID Connect schemes: a client of the authorization server.
    #[serde(rename = "oauth2-client-credentials")]
    OAuth2ClientCredentials {
        client_id: String,
        client_secret: Secret,
        /// Asked for besides those the card's requirement lists.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        scopes: Option<Vec<String>>,
        /// Overrides the token URL the card's scheme names (or its discovery document).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        token_url: Option<String>,
    },
    /// For a mutual-TLS scheme: the client certificate (chain) and its private key, PEM.
    Mtls {
        certificate_pem: String,
        private_key_pem: Secret,
    },
}

/// The kind of a credential, as lists name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CredentialKind {
    Bearer,
    ApiKey,
    #[serde(rename = "oauth2-client-credentials")]
    OAuth2ClientCredentials,
    Mtls,
}

impl CredentialKind {
    pub fn as_str(self) -> &'static str {
        match self {
            CredentialKind::Bearer => "bearer",
            CredentialKind::ApiKey => "api-key",
            CredentialKind::OAuth2ClientCredentials => "oauth2-client-credentials",
            CredentialKind::Mtls => "mtls",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        [
            CredentialKind::Bearer,
            CredentialKind::ApiKey,
            CredentialKind::OAuth2ClientCredentials,
            CredentialKind::Mtls,
        ]
        .into_iter()
        .find(|k| k.as_str() == text)
    }

    /// Whether this kind can satisfy `scheme`; why not when it cannot.
    pub fn fits(self, name: &str, scheme: &SecurityScheme) -> Result<(), String> {
        let fits = matches!(
            (self, scheme),
            (CredentialKind::Bearer, SecurityScheme::HttpBearer)
                | (CredentialKind::ApiKey, SecurityScheme::ApiKey { .. })
                | (
                    CredentialKind::OAuth2ClientCredentials,
                    SecurityScheme::OAuth2 { .. } | SecurityScheme::OpenIdConnect { .. }
                )
                | (CredentialKind::Mtls, SecurityScheme::MutualTls)
        );
        if fits {
            return Ok(());
        }
        Err(match scheme {
            SecurityScheme::Unsupported { kind } => {
                format!("the card's scheme `{name}` is {kind}, which cardgate cannot present")
            }
            _ => format!(
                "the card's scheme `{name}` is {}; a `{}` credential does not fit it",
                scheme.kind(),
                self.as_str()
            ),
        })
    }
}

impl Credential {
    pub fn kind(&self) -> CredentialKind {
        match self {
            Credential::Bearer { .. } => CredentialKind::Bearer,
            Credential::ApiKey { .. } => CredentialKind::ApiKey,
            Credential::OAuth2ClientCredentials { .. } => CredentialKind::OAuth2ClientCredentials,
            Credential::Mtls { .. } => CredentialKind::Mtls,
        }
    }

    /// Checks what can be checked without the network; the message never contains a secret.
    pub fn validate(&self) -> Result<(), String> {
        let header_safe = |what: &str, value: &Secret| {
            let v = value.expose();
            if v.is_empty() {
                return Err(format!("`{what}` is empty"));
            }
            if !v.bytes().all(|b| b.is_ascii_graphic() || b == b' ') {
                return Err(format!(
                    "`{what}` must be printable ASCII (it is sent in an HTTP header)"
                ));
            }
            Ok(())
        };
        match self {
            Credential::Bearer { token } => header_safe("token", token),
            Credential::ApiKey { value } => header_safe("value", value),
            Credential::OAuth2ClientCredentials {
                client_id,
                client_secret,
                scopes,
                token_url,
            } => {
                if client_id.is_empty() {
                    return Err("`client_id` is empty".into());
                }
                header_safe("client_secret", client_secret)?;
                if let Some(scopes) = scopes
                    && let Some(bad) = scopes.iter().find(|s| s.is_empty() || s.contains(' '))
                {
                    return Err(format!("scope `{bad}` is empty or contains a space"));
                }
                if let Some(url) = token_url {
                    let parsed = url::Url::parse(url)
                        .map_err(|e| format!("`token_url` is not a URL: {e}"))?;
                    if !matches!(parsed.scheme(), "http" | "https") {
                        return Err("`token_url` must be http or https".into());
                    }
                }
                Ok(())
            }
            Credential::Mtls {
                certificate_pem,
                private_key_pem,
            } => {
                if certificate_der(certificate_pem).is_none() {
                    return Err("`certificate_pem` holds no PEM `CERTIFICATE` block".into());
                }
                if !private_key_pem.expose().contains("PRIVATE KEY-----") {
                    return Err("`private_key_pem` holds no PEM private key block".into());
                }
                Ok(())
            }
        }
    }

    /// A short, stable name of the secret part: `sha256:` and 16 hex digits of the token, key
    /// value or client secret, or of the certificate's DER (what
    /// `openssl x509 -fingerprint -sha256` hashes). Enough to tell two secrets apart, too
    /// little to recover one.
    pub fn fingerprint(&self) -> String {
        let digest = match self {
            Credential::Bearer { token } => Sha256::digest(token.expose().as_bytes()),
            Credential::ApiKey { value } => Sha256::digest(value.expose().as_bytes()),
            Credential::OAuth2ClientCredentials { client_secret, .. } => {
                Sha256::digest(client_secret.expose().as_bytes())
            }
            Credential::Mtls {
                certificate_pem, ..
            } => Sha256::digest(certificate_der(certificate_pem).unwrap_or_default()),
        };
        format!("sha256:{}", &hex::encode(digest)[..16])
    }

    /// For mutual TLS: the certificate chain and its private key, as one PEM text.
    pub fn identity_pem(&self) -> Option<Secret> {
        match self {
            Credential::Mtls {
                certificate_pem,
                private_key_pem,
            } => Some(Secret::new(format!(
                "{}\n{}",
                certificate_pem.trim_end(),
                private_key_pem.expose()
            ))),
            _ => None,
        }
    }

    /// Every secret value in it, for redaction.
    pub fn secrets(&self) -> Vec<&str> {
        match self {
            Credential::Bearer { token } => vec![token.expose()],
            Credential::ApiKey { value } => vec![value.expose()],
            Credential::OAuth2ClientCredentials { client_secret, .. } => {
                vec![client_secret.expose()]
            }
            Credential::Mtls {
                private_key_pem, ..
            } => vec![private_key_pem.expose()],
        }
    }
}

/// The DER of the first `CERTIFICATE` block of a PEM text.
fn certificate_der(pem: &str) -> Option<Vec<u8>> {
    let start = pem.find("-----BEGIN CERTIFICATE-----")? + "-----BEGIN CERTIFICATE-----".len();
    let end = start + pem[start..].find("-----END CERTIFICATE-----")?;
    let body: String = pem[start..end]
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect();
    STANDARD.decode(body).ok().filter(|der| !der.is_empty())
}

/// A credential as stored: sealed, with what listings show of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredCredential {
    pub callee_id: CalleeId,
    /// The card's `securitySchemes` entry it is for.
    pub scheme: String,
    pub kind: CredentialKind,
    /// The credential's JSON, sealed (`domain::secrets`) with [`StoredCredential::context`].
    pub sealed: String,
    pub fingerprint: String,
    pub set_at: Timestamp,
    pub set_by: String,
}

impl StoredCredential {
    /// The associated data a credential is sealed with: the row it belongs to, so that a
    /// sealed value moved to another callee or scheme does not open.
    pub fn context(callee_id: CalleeId, scheme: &str) -> Vec<u8> {
        format!("cardgate-credential\0{callee_id}\0{scheme}").into_bytes()
    }
}

/// One scheme the probe presents, with the scopes the requirement asks of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemeUse {
    pub name: String,
    pub scheme: SecurityScheme,
    pub scopes: Vec<String>,
}

/// How the probe authenticates to a callee.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthPlan {
    /// The card requires nothing and nothing is configured.
    Anonymous,
    /// Present these schemes' credentials: all of the alternative `requirement` (0-based), or,
    /// when the card requires nothing, whatever is configured.
    Present {
        requirement: Option<usize>,
        schemes: Vec<SchemeUse>,
    },
    /// The card requires credentials that are not configured: why, for the verdict.
    Missing(String),
}

impl AuthPlan {
    /// What the probe presented, in words (recorded with the run; names only).
    pub fn describe(&self, security: &CardSecurity) -> Option<String> {
        let AuthPlan::Present {
            requirement,
            schemes,
        } = self
        else {
            return None;
        };
        let names = schemes
            .iter()
            .map(|s| format!("`{}`", s.name))
            .collect::<Vec<_>>()
            .join(" + ");
        Some(match requirement {
            Some(i) => format!(
                "presented {names}, the card's requirement {} of {}",
                i + 1,
                security.requirements.len()
            ),
            None => format!("presented {names}; the card requires no credentials"),
        })
    }
}

/// Which of the card's requirements the configured credentials (scheme name → kind) satisfy:
/// the first alternative whose every scheme has a credential that fits it.
pub fn plan(security: &CardSecurity, configured: &BTreeMap<String, CredentialKind>) -> AuthPlan {
    let usable = |name: &str| -> Option<&SecurityScheme> {
        let scheme = security.schemes.get(name)?;
        configured.get(name)?.fits(name, scheme).ok()?;
        Some(scheme)
    };
    if !security.requires_credentials() {
        let schemes: Vec<SchemeUse> = configured
            .keys()
            .filter_map(|name| {
                usable(name).map(|scheme| SchemeUse {
                    name: name.clone(),
                    scheme: scheme.clone(),
                    scopes: Vec::new(),
                })
            })
            .collect();
        return if schemes.is_empty() {
            AuthPlan::Anonymous
        } else {
            AuthPlan::Present {
                requirement: None,
                schemes,
            }
        };
    }
    for (i, requirement) in security.requirements.iter().enumerate() {
        let schemes: Option<Vec<SchemeUse>> = requirement
            .iter()
            .map(|(name, scopes)| {
                usable(name).map(|scheme| SchemeUse {
                    name: name.clone(),
                    scheme: scheme.clone(),
                    scopes: scopes.clone(),
                })
            })
            .collect();
        if let Some(schemes) = schemes {
            return AuthPlan::Present {
                requirement: Some(i),
                schemes,
            };
        }
    }
    let required = security.describe_requirements();
    let unusable: Vec<String> = security
        .requirements
        .iter()
        .flat_map(|r| r.keys())
        .filter_map(|name| match security.schemes.get(name) {
            None => Some(format!("`{name}` is not among the card's securitySchemes")),
            Some(SecurityScheme::Unsupported { kind }) => {
                Some(format!("`{name}` is {kind}, which cardgate cannot present"))
            }
            Some(_) => None,
        })
        .collect();
    let mut why = if configured.is_empty() {
        format!("the card requires {required}; no credentials are configured")
    } else {
        let have = configured
            .keys()
            .map(|n| format!("`{n}`"))
            .collect::<Vec<_>>()
            .join(", ");
        format!("the card requires {required}; credentials are configured for {have} only")
    };
    if !unusable.is_empty() {
        why.push_str(&format!(" ({})", unusable.join("; ")));
    }
    AuthPlan::Missing(why)
}

#[cfg(test)]
mod tests;
