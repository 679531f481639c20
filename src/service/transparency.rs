//! Answers a caller can keep and check: signed checkpoints of the ledger's Merkle tree,
//! inclusion and consistency proofs, decision receipts, and the registry's public keys.
//!
//! The signing key is loaded once at start ([`Transparency::load`]); the first start creates
//! it. Everything it signs names the key by `kid`, and `/.well-known/jwks.json` lists the
//! current and every retired key, so what an old key signed still verifies after a rotation.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use anyhow::Context;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde::Serialize;

use super::readmodel::ReadModel;
use super::{ServiceError, key_file};
use crate::domain::checkpoint::{self, Checkpoint};
use crate::domain::merkle::{Hash, Plan, ProofError};
use crate::domain::receipt::{RECEIPT_TYPE, ReceiptCheckpoint, ReceiptPayload};
use crate::domain::signing::{Jwks, KeyRing};
use crate::domain::time::Timestamp;
use crate::storage::{CheckpointRecord, Store};

/// Where the key lives and what the log is called.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransparencySettings {
    /// The Ed25519 key file (PEM), created on first start.
    pub signing_key_file: PathBuf,
    /// The checkpoint origin, which is also the note's key name.
    pub origin: String,
}

impl TransparencySettings {
    /// The key beside the SQLite file (its data directory), or under `./data` for Postgres.
    pub fn default_key_file(database: &crate::storage::DatabaseTarget) -> PathBuf {
        match database {
            crate::storage::DatabaseTarget::Sqlite(path) => path
                .parent()
                .unwrap_or(Path::new("."))
                .join("signing-key.pem"),
            crate::storage::DatabaseTarget::Postgres(_) => PathBuf::from("./data/signing-key.pem"),
        }
    }

    /// The origin when none is configured: the public URL's host and path, so that two
    /// registries do not share one by accident.
    pub fn default_origin(public_url: Option<&url::Url>) -> String {
        public_url
            .and_then(|url| {
                let host = url.host_str()?;
                let port = url.port().map(|p| format!(":{p}")).unwrap_or_default();
                Some(format!(
                    "{host}{port}{}/ledger",
                    url.path().trim_end_matches('/')
                ))
            })
            .unwrap_or_else(|| "cardgate.localhost/ledger".into())
    }
}

/// Reads the key file, or creates it with a new key when it does not exist. Creation is
/// exclusive: replicas starting together on a shared volume end up with the same key.
pub fn load_or_create_key(path: &Path) -> anyhow::Result<KeyRing> {
    key_file::read_or_create(
        path,
        "signing key",
        |text| Ok(KeyRing::from_pem(text)?),
        || Ok(KeyRing::generate()?.to_pem()),
    )
}

/// Replaces the key file's ring with a rotated one (a new current key; the old public keys
/// stay listed). Replicas sign with the new key once restarted.
pub fn rotate_key(path: &Path) -> anyhow::Result<KeyRing> {
    let ring = load_or_create_key(path)?.rotate()?;
    key_file::replace(path, &ring.to_pem())?;
    Ok(ring)
}

/// The signer and what it signs with. Cheap to clone.
#[derive(Clone)]
pub struct Transparency {
    inner: Arc<Inner>,
}

struct Inner {
    ring: KeyRing,
    origin: String,
    /// The newest root computed, by tree size: receipts at the same head reuse it.
    root_cache: Mutex<Option<(u64, Hash)>>,
}

impl std::fmt::Debug for Transparency {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transparency")
            .field("origin", &self.inner.origin)
            .field("ring", &self.inner.ring)
            .finish_non_exhaustive()
    }
}

/// A signed checkpoint, as served and as recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SignedCheckpoint {
    pub tree_size: u64,
    pub root_hash: Hash,
    pub issued_at: Timestamp,
    pub kid: String,
    pub note: String,
}

impl From<CheckpointRecord> for SignedCheckpoint {
    fn from(r: CheckpointRecord) -> Self {
        Self {
            tree_size: r.tree_size,
            root_hash: r.root_hash,
            issued_at: r.issued_at,
            kid: r.kid,
            note: r.note,
        }
    }
}

/// An RFC 9162 inclusion proof.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InclusionProof {
    pub leaf_index: u64,
    pub tree_size: u64,
    pub audit_path: Vec<Hash>,
}

/// An RFC 9162 consistency proof.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsistencyProof {
    pub first: u64,
    pub second: u64,
    pub proof: Vec<Hash>,
}

fn proof_error(e: ProofError) -> ServiceError {
    ServiceError::Invalid(e.to_string())
}

fn ahead(size: u64, head: u64) -> ServiceError {
    ServiceError::Conflict(format!(
        "tree size {size} is ahead of the ledger, which has {head} events"
    ))
}

impl Transparency {
    pub fn new(ring: KeyRing, origin: String) -> anyhow::Result<Self> {
        checkpoint::check_origin(&origin).context("CARDGATE_LEDGER_ORIGIN")?;
        Ok(Self {
            inner: Arc::new(Inner {
                ring,
                origin,
                root_cache: Mutex::new(None),
            }),
        })
    }

    /// Loads (or creates) the key named by `settings`.
    pub fn load(settings: &TransparencySettings) -> anyhow::Result<Self> {
        Self::new(
            load_or_create_key(&settings.signing_key_file)?,
            settings.origin.clone(),
        )
    }

    pub fn origin(&self) -> &str {
        &self.inner.origin
    }

    /// The key ring that signs checkpoints, receipts and attestations.
    pub fn ring(&self) -> &KeyRing {
        &self.inner.ring
    }

    /// The public keys, current first.
    pub fn jwks(&self) -> Jwks {
        Jwks::of(&self.inner.ring)
    }

    /// The root of the tree of `size` leaves (which must not exceed the tree).
    pub async fn root(&self, store: &Store, size: u64) -> Result<Hash, ServiceError> {
        let cached = *self
            .inner
            .root_cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((_, root)) = cached.filter(|(at, _)| *at == size) {
            return Ok(root);
        }
        let plan = Plan::root(size);
        let nodes = store
            .merkle_nodes(&plan.nodes().into_iter().collect::<Vec<_>>())
            .await?;
        let root = plan
            .resolve(&nodes)
            .map_err(|e| ServiceError::Internal(e.into()))?[0];
        let mut cache = self
            .inner
            .root_cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if cache.is_none_or(|(at, _)| at < size) {
            *cache = Some((size, root));
        }
        Ok(root)
    }

    /// Signs the tree at `size` now.
    pub async fn sign_at(
        &self,
        store: &Store,
        size: u64,
        now: Timestamp,
    ) -> Result<SignedCheckpoint, ServiceError> {
        let root_hash = self.root(store, size).await?;
        let note = Checkpoint {
            origin: self.inner.origin.clone(),
            tree_size: size,
            root_hash,
        }
        .sign(&self.inner.ring)
        .map_err(|e| ServiceError::Internal(e.into()))?;
        Ok(SignedCheckpoint {
            tree_size: size,
            root_hash,
            issued_at: now,
            kid: self.inner.ring.current().kid.clone(),
            note,
        })
    }

    /// A checkpoint of the whole tree as it is now.
    pub async fn checkpoint(
        &self,
        store: &Store,
        now: Timestamp,
    ) -> Result<SignedCheckpoint, ServiceError> {
        let size = store.tree_size().await?;
        self.sign_at(store, size, now).await
    }

    /// Records a checkpoint of the tree now, unless one of this size is recorded already.
    /// Returns the recorded size, if it recorded one.
    pub async fn record(&self, store: &Store, now: Timestamp) -> Result<Option<u64>, ServiceError> {
        let size = store.tree_size().await?;
        if size == 0 || size <= store.last_checkpoint_size().await? {
            return Ok(None);
        }
        let signed = self.sign_at(store, size, now).await?;
        store
            .record_checkpoint(&CheckpointRecord {
                tree_size: signed.tree_size,
                root_hash: signed.root_hash,
                issued_at: signed.issued_at,
                kid: signed.kid,
                note: signed.note,
            })
            .await?;
        Ok(Some(size))
    }

    /// The inclusion proof of event `seq` in the tree of `tree_size` leaves (default: the
    /// whole tree now).
    pub async fn inclusion(
        &self,
        store: &Store,
        seq: u64,
        tree_size: Option<u64>,
    ) -> Result<InclusionProof, ServiceError> {
        let head = store.tree_size().await?;
        let size = tree_size.unwrap_or(head);
        if size > head {
            return Err(ahead(size, head));
        }
        if seq == 0 || seq > size {
            return Err(ServiceError::Invalid(format!(
                "seq {seq} is not in a tree of {size} events (seqs 1 to {size})"
            )));
        }
        let plan = Plan::inclusion(seq - 1, size).map_err(proof_error)?;
        let audit_path = self.resolve(store, &plan).await?;
        Ok(InclusionProof {
            leaf_index: seq - 1,
            tree_size: size,
            audit_path,
        })
    }

    /// The consistency proof from the tree of `first` leaves to that of `second` (default:
    /// the whole tree now).
    pub async fn consistency(
        &self,
        store: &Store,
        first: u64,
        second: Option<u64>,
    ) -> Result<ConsistencyProof, ServiceError> {
        let head = store.tree_size().await?;
        let second = second.unwrap_or(head);
        for size in [first, second] {
            if size > head {
                return Err(ahead(size, head));
            }
        }
        let plan = Plan::consistency(first, second).map_err(proof_error)?;
        let proof = self.resolve(store, &plan).await?;
        Ok(ConsistencyProof {
            first,
            second,
            proof,
        })
    }

    async fn resolve(&self, store: &Store, plan: &Plan) -> Result<Vec<Hash>, ServiceError> {
        let ids: Vec<_> = plan.nodes().into_iter().collect();
        let nodes = store.merkle_nodes(&ids).await?;
        plan.resolve(&nodes)
            .map_err(|e| ServiceError::Internal(e.into()))
    }

    /// A receipt for `decision` (as served): a compact JWS over it, `issued_at`, and the
    /// checkpoint of the tree this replica's read model reflects, which contains the
    /// decision's evidence.
    pub async fn receipt(
        &self,
        store: &Store,
        view: &ReadModel,
        decision: serde_json::Value,
        now: Timestamp,
    ) -> Result<String, ServiceError> {
        let size = u64::try_from(view.applied().ledger_seq).unwrap_or(0);
        let root = self.root(store, size).await?;
        let payload = ReceiptPayload {
            decision,
            issued_at: now,
            checkpoint: ReceiptCheckpoint {
                origin: self.inner.origin.clone(),
                tree_size: size,
                root_hash: STANDARD.encode(root),
            },
        };
        let bytes = serde_json::to_vec(&payload).map_err(|e| ServiceError::Internal(e.into()))?;
        self.inner
            .ring
            .sign_jws(RECEIPT_TYPE, &bytes)
            .map_err(|e| ServiceError::Internal(e.into()))
    }
}

/// Recorded checkpoints after `after`, smallest first.
pub async fn recorded(
    store: &Store,
    after: u64,
    limit: u32,
) -> Result<Vec<SignedCheckpoint>, ServiceError> {
    Ok(store
        .checkpoints(after, limit)
        .await?
        .into_iter()
        .map(Into::into)
        .collect())
}
