//! Presenting credentials to a callee: bearer tokens and API keys (in a header, the query or
//! a cookie, as the card's scheme says), OAuth 2.0 client-credentials tokens (RFC 6749 §4.4),
//! and the TLS client certificate of mutual TLS (carried by the client itself, see
//! [`Outbound::with_identity`]).
//!
//! Tokens are fetched through the same guarded client as everything else (network policy,
//! size cap, deadline), from the token URL the card's scheme names or the one its OpenID
//! Connect discovery document gives; they are cached until shortly before they expire, and
//! dropped on a 401 so that the call is retried once with a fresh one.
//!
//! Everything this module presents is also what it redacts: [`Authenticator::redact`] is
//! applied to every text a probe records or reports.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use reqwest::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, COOKIE, HeaderName, HeaderValue};
use serde_json::Value;
use tokio::time::Instant;
use url::Url;

use super::{Limits, Outbound, Redirects, read_capped};
use crate::domain::card::security::{KeyLocation, SecurityScheme};
use crate::domain::credential::{Credential, SchemeUse, Secret};

/// Bounds of a token or discovery request.
const TOKEN_LIMITS: Limits = Limits {
    max_body: 64 * 1024,
    timeout: Duration::from_secs(10),
};

/// What [`Authenticator::redact`] puts in place of a secret.
pub const REDACTED: &str = "[redacted]";

/// One scheme of the card, with the credential configured for it.
#[derive(Debug, Clone)]
pub struct Presentation {
    pub scheme: SchemeUse,
    pub credential: Credential,
}

/// OAuth 2.0 tokens shared by every probe of a process, by callee, scheme and client.
#[derive(Clone, Default)]
pub struct TokenCache(Arc<Mutex<HashMap<String, Cached>>>);

#[derive(Clone)]
struct Cached {
    token: Secret,
    fresh_until: Instant,
}

impl TokenCache {
    fn get(&self, key: &str, now: Instant) -> Option<Secret> {
        let cache = self.0.lock().unwrap_or_else(|e| e.into_inner());
        cache
            .get(key)
            .filter(|c| c.fresh_until > now)
            .map(|c| c.token.clone())
    }

    fn put(&self, key: String, token: Secret, fresh_until: Instant) {
        let mut cache = self.0.lock().unwrap_or_else(|e| e.into_inner());
        cache.insert(key, Cached { token, fresh_until });
    }

    fn drop_key(&self, key: &str) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).remove(key);
    }
}

/// Until when a token that lives `expires_in` seconds is used: a tenth of its life (a minute
/// at most) before it expires, so that no call goes out with a token about to lapse. A token
/// without `expires_in` is used for a minute.
pub fn fresh_until(issued: Instant, expires_in: Option<u64>) -> Instant {
    let life = Duration::from_secs(expires_in.unwrap_or(60));
    let margin = (life / 10).min(Duration::from_secs(60));
    issued + (life - margin)
}

/// What goes on a request.
enum Part {
    Header(HeaderName, Secret),
    Query(String, Secret),
    Cookie(String, Secret),
    /// `Authorization: Bearer` with a token from the client's authorization server.
    OAuth(OAuthClient),
}

struct OAuthClient {
    /// The token cache's key for this callee, scheme and client.
    cache_key: String,
    endpoint: TokenEndpoint,
    client_id: String,
    client_secret: Secret,
    scopes: Vec<String>,
}

enum TokenEndpoint {
    Url(String),
    /// An OpenID Connect discovery document that names it.
    Discovery(String),
}

/// Presents one alternative of a card's security requirements on every call of a probe.
pub struct Authenticator {
    parts: Vec<Part>,
    identity: Option<Secret>,
    tokens: TokenCache,
    /// Every secret presented so far (tokens join as they are fetched), for [`Self::redact`].
    known: Mutex<Vec<String>>,
}

impl Authenticator {
    /// `cache_scope` names the callee in the token cache. Why it cannot present a scheme,
    /// when it cannot (a kind that does not fit, an OAuth scheme with no token URL).
    pub fn new(
        cache_scope: &str,
        presentations: Vec<Presentation>,
        tokens: TokenCache,
    ) -> Result<Self, String> {
        let mut parts = Vec::new();
        let mut identity = None;
        let mut known = Vec::new();
        for Presentation { scheme, credential } in presentations {
            known.extend(credential.secrets().into_iter().map(str::to_string));
            let fingerprint = credential.fingerprint();
            let name = &scheme.name;
            match (&scheme.scheme, credential) {
                (SecurityScheme::HttpBearer, Credential::Bearer { token }) => {
                    let value = Secret::new(format!("Bearer {}", token.expose()));
                    parts.push(Part::Header(AUTHORIZATION, value));
                }
                (
                    SecurityScheme::ApiKey {
                        location,
                        name: key,
                    },
                    Credential::ApiKey { value },
                ) => {
                    parts.push(match location {
                        KeyLocation::Header => {
                            let header = HeaderName::from_bytes(key.as_bytes()).map_err(|_| {
                                format!("the card's scheme `{name}` names header `{key}`, which is not a valid header name")
                            })?;
                            Part::Header(header, value)
                        }
                        KeyLocation::Query => {
                            known.push(
                                url::form_urlencoded::byte_serialize(value.expose().as_bytes())
                                    .collect(),
                            );
                            Part::Query(key.clone(), value)
                        }
                        KeyLocation::Cookie => Part::Cookie(key.clone(), value),
                    });
                }
                (
                    scheme_kind @ (SecurityScheme::OAuth2 { .. }
                    | SecurityScheme::OpenIdConnect { .. }),
                    Credential::OAuth2ClientCredentials {
                        client_id,
                        client_secret,
                        scopes,
                        token_url,
                    },
                ) => {
                    let endpoint = match (token_url, scheme_kind) {
                        (Some(url), _) => TokenEndpoint::Url(url),
                        (
                            None,
                            SecurityScheme::OAuth2 {
                                token_url: Some(url),
                            },
                        ) => TokenEndpoint::Url(url.clone()),
                        (None, SecurityScheme::OpenIdConnect { discovery_url }) => {
                            TokenEndpoint::Discovery(discovery_url.clone())
                        }
                        _ => {
                            return Err(format!(
                                "the card's scheme `{name}` names no client-credentials token URL, and the credential gives none (`token_url`)"
                            ));
                        }
                    };
                    let mut wanted = scheme.scopes.clone();
                    for extra in scopes.unwrap_or_default() {
                        if !wanted.contains(&extra) {
                            wanted.push(extra);
                        }
                    }
                    let issuer = match &endpoint {
                        TokenEndpoint::Url(url) | TokenEndpoint::Discovery(url) => url.clone(),
                    };
                    parts.push(Part::OAuth(OAuthClient {
                        // Cached for this client, secret, server and scopes only.
                        cache_key: format!(
                            "{cache_scope}/{name}/{client_id}/{fingerprint}/{issuer}/{}",
                            wanted.join(" ")
                        ),
                        endpoint,
                        client_id,
                        client_secret,
                        scopes: wanted,
                    }));
                }
                (SecurityScheme::MutualTls, credential @ Credential::Mtls { .. }) => {
                    identity = credential.identity_pem();
                }
                (scheme_kind, credential) => {
                    return Err(credential
                        .kind()
                        .fits(name, scheme_kind)
                        .err()
                        .unwrap_or_else(|| format!("cannot present scheme `{name}`")));
                }
            }
        }
        Ok(Self {
            parts,
            identity,
            tokens,
            known: Mutex::new(known),
        })
    }

    /// The TLS client certificate and key to connect with, for mutual TLS.
    pub fn identity(&self) -> Option<&Secret> {
        self.identity.as_ref()
    }

    /// `request` with the credentials on it. Why not, when a token cannot be had.
    pub async fn authorize(
        &self,
        outbound: &Outbound,
        request: reqwest::RequestBuilder,
    ) -> Result<reqwest::RequestBuilder, String> {
        let (client, request) = request.build_split();
        let mut request = request.map_err(|e| format!("the request cannot be built: {e}"))?;
        let (headers, query) = self.resolve(outbound).await?;
        for (name, value) in headers {
            request.headers_mut().insert(name, header_value(&value)?);
        }
        for (name, value) in query {
            request
                .url_mut()
                .query_pairs_mut()
                .append_pair(name, value.expose());
        }
        Ok(reqwest::RequestBuilder::from_parts(client, request))
    }

    /// The credentials as gRPC metadata (header name, value). An API key in the query has
    /// no place in a gRPC call.
    pub async fn metadata(&self, outbound: &Outbound) -> Result<Vec<(String, Secret)>, String> {
        let (headers, query) = self.resolve(outbound).await?;
        if let Some((name, _)) = query.first() {
            return Err(format!(
                "the card puts API key `{name}` in the query, which a gRPC call does not have"
            ));
        }
        Ok(headers
            .into_iter()
            .map(|(name, value)| (name.as_str().to_string(), value))
            .collect())
    }

    /// What every call carries, whichever binding: headers (the cookies joined into one, an
    /// OAuth token fetched or taken from the cache), and query parameters.
    async fn resolve(
        &self,
        outbound: &Outbound,
    ) -> Result<(Vec<(HeaderName, Secret)>, Vec<(&str, &Secret)>), String> {
        let (mut headers, mut query, mut cookies) = (Vec::new(), Vec::new(), Vec::new());
        for part in &self.parts {
            match part {
                Part::Header(name, value) => headers.push((name.clone(), value.clone())),
                Part::Query(name, value) => query.push((name.as_str(), value)),
                Part::Cookie(name, value) => cookies.push(format!("{name}={}", value.expose())),
                Part::OAuth(client) => {
                    let token = self.token(outbound, client).await?;
                    let value = Secret::new(format!("Bearer {}", token.expose()));
                    headers.push((AUTHORIZATION, value));
                }
            }
        }
        if !cookies.is_empty() {
            headers.push((COOKIE, Secret::new(cookies.join("; "))));
        }
        Ok((headers, query))
    }

    /// After a 401: forgets the cached tokens, and says whether a retry with fresh ones may
    /// succeed (there are OAuth tokens to renew).
    pub fn renew(&self) -> bool {
        let mut any = false;
        for part in &self.parts {
            if let Part::OAuth(client) = part {
                self.tokens.drop_key(&client.cache_key);
                any = true;
            }
        }
        any
    }

    /// `text` with every secret this authenticator presented replaced by [`REDACTED`].
    pub fn redact(&self, text: &str) -> String {
        let known = self.known.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = text.to_string();
        for secret in known.iter().filter(|s| !s.is_empty()) {
            if out.contains(secret.as_str()) {
                out = out.replace(secret.as_str(), REDACTED);
            }
        }
        out
    }

    /// A token for `client`: the cached one while fresh, else a new one.
    async fn token(&self, outbound: &Outbound, client: &OAuthClient) -> Result<Secret, String> {
        if let Some(token) = self.tokens.get(&client.cache_key, Instant::now()) {
            self.remember(token.expose());
            return Ok(token);
        }
        let issued = Instant::now();
        let (token, expires_in) = fetch_token(outbound, client).await?;
        self.remember(token.expose());
        self.tokens.put(
            client.cache_key.clone(),
            token.clone(),
            fresh_until(issued, expires_in),
        );
        Ok(token)
    }

    fn remember(&self, secret: &str) {
        let mut known = self.known.lock().unwrap_or_else(|e| e.into_inner());
        if !known.iter().any(|k| k == secret) {
            known.push(secret.to_string());
        }
    }
}

/// Whether the TLS stack accepts a client certificate and key (PEM); why not, without them.
pub fn check_identity(identity_pem: &Secret) -> Result<(), String> {
    reqwest::Identity::from_pem(identity_pem.expose().as_bytes())
        .map(|_| ())
        .map_err(|_| {
            "the certificate and private key are not a usable TLS client identity (PEM: a certificate chain, then its PKCS#8, PKCS#1 or SEC1 key)".to_string()
        })
}

/// Whether a connection error is the server's TLS alert about the client certificate (one
/// it does not trust, one whose signature does not check, or none where one is required).
/// Asked only of connections that presented a certificate.
pub fn identity_refused(error: &str) -> bool {
    error.contains("alert")
        && ["Certificate", "UnknownCA", "AccessDenied", "DecryptError"]
            .iter()
            .any(|what| error.contains(what))
}

fn header_value(value: &Secret) -> Result<HeaderValue, String> {
    let mut header = HeaderValue::from_str(value.expose())
        .map_err(|_| "a credential cannot be sent as an HTTP header value".to_string())?;
    header.set_sensitive(true);
    Ok(header)
}

/// How the client authenticates to the token endpoint (RFC 6749 §2.3.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ClientAuth {
    Basic,
    Post,
}

/// Asks the authorization server for a client-credentials token: the token and its
/// `expires_in`.
async fn fetch_token(
    outbound: &Outbound,
    client: &OAuthClient,
) -> Result<(Secret, Option<u64>), String> {
    let (token_url, auth) = match &client.endpoint {
        TokenEndpoint::Url(url) => (url.clone(), ClientAuth::Basic),
        TokenEndpoint::Discovery(url) => discover(outbound, url).await?,
    };
    let url = Url::parse(&token_url).map_err(|e| format!("token URL {token_url}: {e}"))?;
    let mut request = outbound
        .client()
        .post(url)
        .header(ACCEPT, "application/json")
        .header(CONTENT_TYPE, "application/x-www-form-urlencoded");
    if auth == ClientAuth::Basic {
        // Each part form-encoded before the base64, as RFC 6749 §2.3.1 says.
        let encode =
            |s: &str| url::form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>();
        let pair = format!(
            "{}:{}",
            encode(&client.client_id),
            encode(client.client_secret.expose())
        );
        let mut value = HeaderValue::from_str(&format!("Basic {}", STANDARD.encode(pair)))
            .map_err(|_| "the client credentials cannot be sent".to_string())?;
        value.set_sensitive(true);
        request = request.header(AUTHORIZATION, value);
    }
    let body = token_form(client, auth);
    let answered = tokio::time::timeout(TOKEN_LIMITS.timeout, async {
        let response = outbound
            .send(request.body(body))
            .await
            .map_err(|e| e.to_string())?;
        let status = response.status().as_u16();
        let bytes = read_capped(response, TOKEN_LIMITS.max_body)
            .await
            .map_err(|e| e.to_string())?;
        Ok::<_, String>((status, bytes))
    })
    .await
    .unwrap_or_else(|_| {
        Err(format!(
            "no answer within {} s",
            TOKEN_LIMITS.timeout.as_secs()
        ))
    });
    let (status, bytes) =
        answered.map_err(|e| format!("the token endpoint {token_url} could not be asked: {e}"))?;
    let json: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    if !(200..300).contains(&status) {
        let error = json
            .get("error")
            .and_then(Value::as_str)
            .unwrap_or("no error code");
        let description = json
            .get("error_description")
            .and_then(Value::as_str)
            .map(|d| format!(" ({})", d.chars().take(200).collect::<String>()))
            .unwrap_or_default();
        return Err(format!(
            "the token endpoint {token_url} refused client `{}`: HTTP {status} {error}{description}",
            client.client_id
        ));
    }
    let token = json
        .get("access_token")
        .and_then(Value::as_str)
        .filter(|t| !t.is_empty())
        .ok_or_else(|| {
            format!("the token endpoint {token_url} answered without an access_token")
        })?;
    let token_type = json
        .get("token_type")
        .and_then(Value::as_str)
        .unwrap_or("Bearer");
    if !token_type.eq_ignore_ascii_case("bearer") {
        return Err(format!(
            "the token endpoint {token_url} issued a `{token_type}` token; cardgate presents bearer tokens only"
        ));
    }
    let expires_in = json.get("expires_in").and_then(Value::as_u64);
    Ok((Secret::new(token), expires_in))
}

/// The token request's form: the grant, the scopes, and the client's credentials when they
/// go in the body (client_secret_post).
fn token_form(client: &OAuthClient, auth: ClientAuth) -> String {
    let mut form = url::form_urlencoded::Serializer::new(String::new());
    form.append_pair("grant_type", "client_credentials");
    if !client.scopes.is_empty() {
        form.append_pair("scope", &client.scopes.join(" "));
    }
    if auth == ClientAuth::Post {
        form.append_pair("client_id", &client.client_id);
        form.append_pair("client_secret", client.client_secret.expose());
    }
    form.finish()
}

/// The token endpoint an OpenID Connect discovery document names, and how to authenticate
/// to it (client_secret_basic unless the server supports only client_secret_post).
async fn discover(
    outbound: &Outbound,
    discovery_url: &str,
) -> Result<(String, ClientAuth), String> {
    let url = Url::parse(discovery_url)
        .map_err(|e| format!("the discovery URL {discovery_url} is not a URL: {e}"))?;
    let fetched = outbound
        .get(url, Default::default(), Redirects::SameOrigin, TOKEN_LIMITS)
        .await
        .map_err(|e| format!("the OpenID Connect discovery document could not be read: {e}"))?;
    if fetched.status != 200 {
        return Err(format!(
            "the OpenID Connect discovery document {discovery_url} answered HTTP {}",
            fetched.status
        ));
    }
    let doc: Value = serde_json::from_slice(&fetched.body).map_err(|e| {
        format!("the OpenID Connect discovery document {discovery_url} is not JSON: {e}")
    })?;
    let endpoint = doc
        .get("token_endpoint")
        .and_then(Value::as_str)
        .ok_or_else(|| {
            format!("the OpenID Connect discovery document {discovery_url} names no token_endpoint")
        })?;
    let methods: Vec<&str> = doc
        .get("token_endpoint_auth_methods_supported")
        .and_then(Value::as_array)
        .map(|m| m.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let auth = if !methods.is_empty()
        && !methods.contains(&"client_secret_basic")
        && methods.contains(&"client_secret_post")
    {
        ClientAuth::Post
    } else {
        ClientAuth::Basic
    };
    Ok((endpoint.to_string(), auth))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_is_used_until_a_tenth_of_its_life_before_it_expires() {
        let t0 = Instant::now();
        assert_eq!(fresh_until(t0, Some(300)), t0 + Duration::from_secs(270));
        // A long-lived token is renewed a minute early, not a tenth of its life.
        assert_eq!(fresh_until(t0, Some(7200)), t0 + Duration::from_secs(7140));
        assert_eq!(fresh_until(t0, None), t0 + Duration::from_secs(54));
    }

    #[test]
    fn the_cache_forgets_a_stale_or_dropped_token() {
        let cache = TokenCache::default();
        let t0 = Instant::now();
        cache.put("k".into(), Secret::new("t"), t0 + Duration::from_secs(10));
        assert!(cache.get("k", t0).is_some());
        assert!(cache.get("k", t0 + Duration::from_secs(11)).is_none());
        cache.drop_key("k");
        assert!(cache.get("k", t0).is_none());
    }
}
