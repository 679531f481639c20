//! What a cycle presents to a callee that requires credentials: the opened credentials, how
//! they become an authenticator, the authenticated extended card they unlock, and how a
//! refused client certificate is told apart from an agent that is down.

use std::collections::BTreeMap;

use anyhow::Context;
use std::sync::Arc;

use serde_json::Value;
use sha2::Digest;
use url::Url;

use crate::domain::card::{Assessment, CardSecurity, NormalizedCard};
use crate::domain::credential::{self, AuthPlan, Credential};
use crate::domain::ids::CalleeId;
use crate::domain::probe::{AccessBlock, ExtendedCard};
use crate::remote::Outbound;
use crate::remote::a2a::{A2aClient, Answer, Exchange};
use crate::remote::presentation::{Authenticator, Presentation, TokenCache, identity_refused};
use crate::service::Services;
use crate::service::discovery::Discovery;

/// A card fetched during a probe: its bytes (the JSON answered, or the proto3 JSON of the
/// gRPC message) and their assessment.
pub struct FetchedCard {
    pub url: Url,
    pub bytes: Vec<u8>,
    pub assessment: Assessment,
}

/// The credentials a cycle may present (scheme name → credential), where the tokens it
/// fetches are cached, and how the authenticated extended card they unlock is verified.
#[derive(Clone, Default)]
pub struct Credentials {
    pub configured: BTreeMap<String, Credential>,
    pub tokens: TokenCache,
    /// Names the callee in the token cache.
    pub scope: String,
    /// Verifies an extended card as the public one was; `None`: none is fetched.
    pub cards: Option<CardCheck>,
}

/// How a card fetched during a probe is judged: as discovery judges the public card, with the
/// callee's pinned keys if it has any.
#[derive(Clone)]
pub struct CardCheck {
    pub discovery: Discovery,
    pub trusted_keys: Option<Value>,
}

/// Fetches the authenticated extended card with the credentials, and judges it like the
/// public card: what the cycle makes of it, the card to judge capabilities by when it is
/// trusted, and the card as fetched, to keep.
pub(super) async fn extended_card(
    client: &mut A2aClient,
    check: &CardCheck,
    url: &Url,
) -> (ExtendedCard, Option<NormalizedCard>, Option<FetchedCard>) {
    let refused = |reason: String| (ExtendedCard::Refused { reason }, None, None);
    let value = match client.extended_card("extended card").await.1 {
        Answer::Result(value) => value,
        Answer::Error { code, message } => {
            return refused(format!(
                "GetExtendedAgentCard answered error {code}: {message}"
            ));
        }
        Answer::Broken(why) => return refused(format!("GetExtendedAgentCard: {why}")),
    };
    let bytes = serde_json::to_vec(&value).unwrap_or_default();
    let assessment = check
        .discovery
        .assess(url, &bytes, check.trusted_keys.as_ref())
        .await;
    let outcome = match assessment.card.clone().filter(|_| assessment.trusted) {
        Some(card) => (
            ExtendedCard::Used {
                sha256: hex::encode(sha2::Sha256::digest(&bytes)),
                signature: assessment.signature.status().to_string(),
                card: value,
            },
            Some(card),
        ),
        None => (
            ExtendedCard::Refused {
                reason: format!(
                    "the extended card is not trusted: {}",
                    assessment.problem.clone().unwrap_or_default()
                ),
            },
            None,
        ),
    };
    let fetched = FetchedCard {
        url: url.clone(),
        bytes,
        assessment,
    };
    (outcome.0, outcome.1, Some(fetched))
}

impl Credentials {
    /// How the cycle authenticates to a card with `security`: nothing, an authenticator (and
    /// the client that carries its TLS identity), or why it cannot reach the callee at all.
    pub(super) fn present(
        &self,
        outbound: &Outbound,
        security: &CardSecurity,
    ) -> Result<Option<(Arc<Authenticator>, Outbound, String)>, AccessBlock> {
        let kinds = self
            .configured
            .iter()
            .map(|(name, c)| (name.clone(), c.kind()))
            .collect();
        let plan = credential::plan(security, &kinds);
        let schemes = match &plan {
            AuthPlan::Anonymous => return Ok(None),
            AuthPlan::Missing(reason) => {
                return Err(AccessBlock::Missing {
                    reason: reason.clone(),
                });
            }
            AuthPlan::Present { schemes, .. } => schemes,
        };
        let unusable = |reason: String| AccessBlock::Missing { reason };
        let presentations = schemes
            .iter()
            .map(|scheme| Presentation {
                scheme: scheme.clone(),
                credential: self.configured[&scheme.name].clone(),
            })
            .collect();
        let auth = Authenticator::new(&self.scope, presentations, self.tokens.clone())
            .map_err(unusable)?;
        let outbound = match auth.identity() {
            Some(identity) => outbound.with_identity(identity.clone()).map_err(unusable)?,
            None => outbound.clone(),
        };
        let presented = plan.describe(security).unwrap_or_default();
        Ok(Some((Arc::new(auth), outbound, presented)))
    }
}

/// Why a cycle that presented a TLS client certificate most likely had it refused: no call got
/// an answer, and the connections ended right after the handshake. Under TLS 1.3 a server
/// checks the certificate after the client has finished its handshake, and its alert often
/// loses the race with the connection's reset; either ending counts. (An agent that is down
/// refuses the connection instead, and stays a lifecycle failure.)
pub(super) fn certificate_refused(exchanges: &[Exchange]) -> Option<String> {
    if exchanges.is_empty()
        || exchanges
            .iter()
            .any(|e| e.status.is_some() || e.grpc.is_some())
    {
        return None;
    }
    let ended = |e: &&Exchange| {
        e.error.as_deref().is_some_and(|error| {
            identity_refused(error)
                || ["connection closed", "connection reset", "broken pipe"]
                    .iter()
                    .any(|how| error.contains(how))
        })
    };
    exchanges.iter().find(ended).map(|e| {
        format!(
            "the agent closed every connection that presented the client certificate before answering ({}): it did not accept the certificate",
            e.error.as_deref().unwrap_or_default()
        )
    })
}

/// The callee's credentials, opened, for a probe.
pub async fn for_probe(services: &Services, callee_id: CalleeId) -> anyhow::Result<Credentials> {
    let stored = services.store.credentials(callee_id).await?;
    let mut configured = BTreeMap::new();
    for s in &stored {
        let credential = services
            .secrets
            .open(s)
            .with_context(|| format!("opening the credential for scheme `{}`", s.scheme))?;
        configured.insert(s.scheme.clone(), credential);
    }
    let trusted_keys = services.store.callee(callee_id).await?.trusted_keys;
    Ok(Credentials {
        configured,
        tokens: services.tokens.clone(),
        scope: callee_id.to_string(),
        cards: Some(CardCheck {
            discovery: services.discovery.clone(),
            trusted_keys,
        }),
    })
}
