//! Credentials for callees: setting, listing and removing them (checked against the card's
//! security schemes), sealing them under the secrets key file, opening them for a probe, and
//! rotating that key.
//!
//! The key file is read once at start and again whenever a sealed value names a key it does
//! not hold: a rotation run by another process (or `cardgate secrets-key rotate`) is then
//! picked up without a restart.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use anyhow::Context;

use super::{Missing, ServiceError, Services, key_file, require_callee};
use crate::domain::card::NormalizedCard;
use crate::domain::credential::{Credential, StoredCredential};
use crate::domain::ids::CalleeId;
use crate::domain::secrets::{SealError, SecretsRing};
use crate::domain::time::Timestamp;
use crate::storage::Store;

/// The longest scheme name accepted (a card's `securitySchemes` key).
const MAX_SCHEME_LEN: usize = 128;

/// The secrets key ring and the file it lives in. Cheap to clone.
#[derive(Clone)]
pub struct SecretsKey {
    path: PathBuf,
    ring: Arc<RwLock<Arc<SecretsRing>>>,
}

impl SecretsKey {
    /// Reads the key file, or creates it with a fresh key (0600) when it does not exist.
    /// Creation is exclusive: replicas starting together on a shared volume share one key.
    pub fn load_or_create(path: &Path) -> anyhow::Result<Self> {
        let ring = load_or_create_ring(path)?;
        Ok(Self {
            path: path.to_path_buf(),
            ring: Arc::new(RwLock::new(Arc::new(ring))),
        })
    }

    fn ring(&self) -> Arc<SecretsRing> {
        self.ring.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Seals `credential` for its row.
    pub fn seal(
        &self,
        callee_id: CalleeId,
        scheme: &str,
        credential: &Credential,
    ) -> Result<String, SealError> {
        let plain = serde_json::to_vec(credential).map_err(|_| SealError::BadSealed)?;
        self.ring()
            .seal(&plain, &StoredCredential::context(callee_id, scheme))
    }

    /// Opens a stored credential; a key the ring does not hold makes it read the file again.
    pub fn open(&self, stored: &StoredCredential) -> Result<Credential, SealError> {
        let context = StoredCredential::context(stored.callee_id, &stored.scheme);
        let opened = match self.ring().open(&stored.sealed, &context) {
            Err(SealError::UnknownKey(_)) => {
                self.reload()?;
                self.ring().open(&stored.sealed, &context)
            }
            other => other,
        }?;
        serde_json::from_slice(&opened).map_err(|_| SealError::BadSealed)
    }

    fn reload(&self) -> Result<(), SealError> {
        let text = std::fs::read_to_string(&self.path)
            .map_err(|e| SealError::Malformed(format!("{}: {e}", self.path.display())))?;
        let ring = SecretsRing::from_text(&text)?;
        *self.ring.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(ring);
        Ok(())
    }
}

fn load_or_create_ring(path: &Path) -> anyhow::Result<SecretsRing> {
    key_file::read_or_create(
        path,
        "secrets key",
        |text| Ok(SecretsRing::from_text(text)?),
        || Ok(SecretsRing::generate()?.to_text()),
    )
}

/// What a rotation did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rotated {
    pub kid: String,
    pub resealed: u64,
}

/// Rotates the secrets key: a new key joins the file first (so every process can open what
/// it seals), every credential is re-sealed with it in one transaction, then the old keys
/// leave the file. Interrupted anywhere, nothing is lost: run it again.
pub async fn rotate(store: &Store, path: &Path) -> anyhow::Result<Rotated> {
    let rotated = load_or_create_ring(path)?.rotated()?;
    key_file::replace(path, &rotated.to_text())?;
    let key = SecretsKey::load_or_create(path)?;
    let kid = rotated.current_kid().to_string();
    let stale = store.credentials_not_sealed_with(&kid).await?;
    let mut resealed = Vec::with_capacity(stale.len());
    for stored in stale {
        let credential = key.open(&stored).with_context(|| {
            format!(
                "opening the credential for `{}` of callee {}",
                stored.scheme, stored.callee_id
            )
        })?;
        let sealed = key.seal(stored.callee_id, &stored.scheme, &credential)?;
        resealed.push((stored, sealed));
    }
    let count = store.reseal_credentials(&resealed).await?;
    if !store.credentials_not_sealed_with(&kid).await?.is_empty() {
        anyhow::bail!("credentials were set with the old key during the rotation; run it again");
    }
    key_file::replace(path, &rotated.current_only().to_text())?;
    Ok(Rotated {
        kid,
        resealed: count,
    })
}

/// A credential as listings show it: never the secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CredentialInfo {
    pub scheme: String,
    pub kind: &'static str,
    pub fingerprint: String,
    pub set_at: Timestamp,
    pub set_by: String,
}

impl From<&StoredCredential> for CredentialInfo {
    fn from(c: &StoredCredential) -> Self {
        Self {
            scheme: c.scheme.clone(),
            kind: c.kind.as_str(),
            fingerprint: c.fingerprint.clone(),
            set_at: c.set_at,
            set_by: c.set_by.clone(),
        }
    }
}

/// Checks a credential on its own, then against the scheme of that name on `card`.
pub fn check(card: &NormalizedCard, scheme: &str, credential: &Credential) -> Result<(), String> {
    check_alone(scheme, credential)?;
    fits_card(card, scheme, credential)
}

/// Checks a credential (already checked on its own) against the card's scheme of that name.
fn fits_card(card: &NormalizedCard, scheme: &str, credential: &Credential) -> Result<(), String> {
    let declared = &card.security.schemes;
    let Some(found) = declared.get(scheme) else {
        let names = declared
            .keys()
            .map(|n| format!("`{n}`"))
            .collect::<Vec<_>>()
            .join(", ");
        return Err(if names.is_empty() {
            format!("the card declares no security schemes, so none is called `{scheme}`")
        } else {
            format!("the card declares no security scheme `{scheme}` (it declares {names})")
        });
    };
    credential.kind().fits(scheme, found)?;
    if let (
        crate::domain::card::security::SecurityScheme::OAuth2 { token_url: None },
        Credential::OAuth2ClientCredentials {
            token_url: None, ..
        },
    ) = (found, credential)
    {
        return Err(format!(
            "the card's scheme `{scheme}` names no client-credentials token URL; give `token_url`"
        ));
    }
    Ok(())
}

/// What can be checked without the card.
fn check_alone(scheme: &str, credential: &Credential) -> Result<(), String> {
    if scheme.is_empty() || scheme.len() > MAX_SCHEME_LEN {
        return Err(format!("a scheme name is 1 to {MAX_SCHEME_LEN} bytes long"));
    }
    credential.validate()?;
    if let Some(identity) = credential.identity_pem() {
        // The TLS stack must accept the pair, or every probe would fail on it.
        crate::remote::presentation::check_identity(&identity)?;
    }
    Ok(())
}

/// Checks a registration's credentials before anything is fetched.
pub fn check_all_alone(credentials: &BTreeMap<String, Credential>) -> Result<(), ServiceError> {
    for (scheme, credential) in credentials {
        check_alone(scheme, credential)
            .map_err(|e| ServiceError::Invalid(format!("credentials.{scheme}: {e}")))?;
    }
    Ok(())
}

/// Seals a registration's credentials (checked on their own by [`check_all_alone`]) for the
/// new callee, checked against its first card.
pub fn seal_all(
    services: &Services,
    callee_id: CalleeId,
    card: &NormalizedCard,
    credentials: &BTreeMap<String, Credential>,
    actor: &str,
    now: Timestamp,
) -> Result<Vec<StoredCredential>, ServiceError> {
    credentials
        .iter()
        .map(|(scheme, credential)| {
            fits_card(card, scheme, credential)
                .map_err(|e| ServiceError::Mismatch(format!("credentials.{scheme}: {e}")))?;
            stored(services, callee_id, scheme, credential, actor, now)
        })
        .collect()
}

fn stored(
    services: &Services,
    callee_id: CalleeId,
    scheme: &str,
    credential: &Credential,
    actor: &str,
    now: Timestamp,
) -> Result<StoredCredential, ServiceError> {
    let sealed = services
        .secrets
        .seal(callee_id, scheme, credential)
        .map_err(|e| ServiceError::Internal(anyhow::anyhow!("sealing a credential: {e}")))?;
    Ok(StoredCredential {
        callee_id,
        scheme: scheme.to_string(),
        kind: credential.kind(),
        sealed,
        fingerprint: credential.fingerprint(),
        set_at: now,
        set_by: actor.to_string(),
    })
}

/// Sets the credential for one of the callee's card's schemes.
pub async fn put(
    services: &Services,
    callee_id: CalleeId,
    scheme: &str,
    credential: Credential,
    actor: &str,
) -> Result<CredentialInfo, ServiceError> {
    require_callee(&services.store, callee_id).await?;
    check_alone(scheme, &credential).map_err(ServiceError::Invalid)?;
    let card = services
        .store
        .latest_snapshot(callee_id)
        .await?
        .and_then(|s| s.assessment.card)
        .ok_or_else(|| {
            ServiceError::Conflict(
                "the callee has no readable card to check the scheme against; refresh it first"
                    .into(),
            )
        })?;
    fits_card(&card, scheme, &credential).map_err(ServiceError::Mismatch)?;
    let record = stored(
        services,
        callee_id,
        scheme,
        &credential,
        actor,
        services.now(),
    )?;
    services.store.put_credential(&record).await?;
    tracing::info!(callee.id = %callee_id, scheme, kind = record.kind.as_str(), fingerprint = %record.fingerprint, actor, "credential set");
    Ok(CredentialInfo::from(&record))
}

/// Removes one scheme's credential.
pub async fn delete(
    services: &Services,
    callee_id: CalleeId,
    scheme: &str,
    actor: &str,
) -> Result<(), ServiceError> {
    require_callee(&services.store, callee_id).await?;
    services
        .store
        .delete_credential(callee_id, scheme)
        .await
        .map_err(ServiceError::missing(Missing::Credential {
            callee: callee_id,
            scheme: scheme.to_string(),
        }))?;
    tracing::info!(callee.id = %callee_id, scheme, actor, "credential removed");
    Ok(())
}

/// What is set for a callee, without the secrets.
pub async fn list(
    services: &Services,
    callee_id: CalleeId,
) -> Result<Vec<CredentialInfo>, ServiceError> {
    require_callee(&services.store, callee_id).await?;
    let stored = services.store.credentials(callee_id).await?;
    Ok(stored.iter().map(CredentialInfo::from).collect())
}
