//! Offline verification: `cardgate verify` checks a kept decision receipt or, with
//! `--attestation`, an in-toto attestation (and, with a proof, that its ledger event is in its
//! checkpoint); `cardgate verify-ledger` checks that a later
//! checkpoint extends an earlier one; `cardgate signing-key` shows and rotates the key.
//!
//! Nothing here trusts the registry beyond its published key set: every check is a signature
//! or a hash recomputed locally. Exit code 0: verified; 1: it does not verify; 2: usage or
//! input error.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Subcommand};

use crate::domain::attestation::{self, Envelope};
use crate::domain::checkpoint::Checkpoint;
use crate::domain::merkle;
use crate::domain::receipt::ReceiptPayload;
use crate::domain::signing::{Jwks, PublicKey};
use crate::http::transparency::{
    CheckpointView, ConsistencyProofView, InclusionProofView, decode_all,
};
use crate::service::transparency;

#[derive(Debug, Clone, Args)]
pub struct VerifyArgs {
    /// The receipt: the JSON `GET /v1/trust?...&receipt=true` answered, or the bare JWS.
    #[arg(required_unless_present = "attestation")]
    pub receipt: Option<PathBuf>,
    /// Instead of a receipt: an attestation (the DSSE envelope
    /// `GET /v1/callees/{id}/subjects/{version}/attestation` answered).
    #[arg(long, conflicts_with = "receipt")]
    pub attestation: Option<PathBuf>,
    /// The registry's key set, as served at `/.well-known/jwks.json`.
    #[arg(long)]
    pub jwks: PathBuf,
    /// An inclusion proof of the ledger event in the checkpoint, as served by
    /// `GET /v1/ledger/proof?seq=<seq>&tree_size=<checkpoint.tree_size>` (the receipt's
    /// `evidence.ledger_seq`, or the attestation's `predicate.ledger.seq`).
    #[arg(long)]
    pub proof: Option<PathBuf>,
}

#[derive(Debug, Clone, Args)]
pub struct VerifyLedgerArgs {
    /// The earlier checkpoint, as served by `GET /v1/ledger/checkpoint`.
    #[arg(long)]
    pub from: PathBuf,
    /// The later checkpoint.
    #[arg(long)]
    pub to: PathBuf,
    /// The registry's key set, as served at `/.well-known/jwks.json`.
    #[arg(long)]
    pub jwks: PathBuf,
    /// The consistency proof, as served by `GET /v1/ledger/consistency?first=..&second=..`.
    #[arg(long, conflicts_with = "url")]
    pub proof: Option<PathBuf>,
    /// Instead of `--proof`: fetch the proof from this registry (e.g. `https://cardgate.example`).
    #[arg(long)]
    pub url: Option<url::Url>,
    /// A reader API key for `--url`.
    #[arg(long, env = "CARDGATE_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
}

#[derive(Debug, Clone, Args)]
pub struct SigningKeyArgs {
    #[command(subcommand)]
    pub command: SigningKeyCommand,
    /// The key file (as `serve` uses it).
    #[arg(
        long,
        env = "CARDGATE_SIGNING_KEY_FILE",
        default_value = "./data/signing-key.pem"
    )]
    pub file: PathBuf,
}

#[derive(Debug, Clone, Subcommand)]
pub enum SigningKeyCommand {
    /// Print the public key set (creating the key if the file does not exist).
    Show,
    /// Make a new current key; the old public keys stay listed, so what they signed still
    /// verifies. Restart every replica to sign with the new key.
    Rotate,
}

/// A check that did not pass: exit code 1, not 2.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct Refuted(String);

fn exit(result: anyhow::Result<String>) -> ExitCode {
    match result {
        Ok(summary) => {
            println!("{summary}");
            ExitCode::SUCCESS
        }
        Err(e) if e.is::<Refuted>() => {
            println!("NOT VERIFIED: {e}");
            ExitCode::from(1)
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn read_json<T: serde::de::DeserializeOwned>(path: &Path, what: &str) -> anyhow::Result<T> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the {what} {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("parsing the {what} {}", path.display()))
}

/// The keys of a key set, each checked to be an Ed25519 key.
fn public_keys(jwks: &Jwks) -> anyhow::Result<Vec<PublicKey>> {
    jwks.keys
        .iter()
        .map(|k| k.public_key())
        .collect::<Result<_, _>>()
        .context("the key set")
}

fn refuted(message: impl Into<String>) -> anyhow::Error {
    Refuted(message.into()).into()
}

pub fn verify_receipt(args: VerifyArgs) -> ExitCode {
    match (&args.attestation, &args.receipt) {
        (Some(attestation), _) => exit(check_attestation(attestation, &args)),
        (None, Some(receipt)) => exit(check_receipt(receipt, &args)),
        (None, None) => exit(Err(anyhow::anyhow!("name a receipt or --attestation"))),
    }
}

/// An attestation: the DSSE signature by a key of the set, the statement's types, the
/// checkpoint note its predicate carries (signed by the same key set, and saying the same tree),
/// and with `--proof` the ledger event's inclusion in that tree.
fn check_attestation(path: &Path, args: &VerifyArgs) -> anyhow::Result<String> {
    let jwks: Jwks = read_json(&args.jwks, "key set")?;
    let envelope: Envelope = read_json(path, "attestation")?;
    let statement = envelope.open(&jwks).map_err(refuted)?;
    let (seq, _, checkpoint) = attestation::ledger_position(&statement).map_err(refuted)?;
    let keys = public_keys(&jwks)?;
    let note = statement.predicate["checkpoint_note"]
        .as_str()
        .ok_or_else(|| refuted("the predicate carries no checkpoint note"))?;
    let signed =
        Checkpoint::open(note, &keys).map_err(|e| refuted(format!("the checkpoint note: {e}")))?;
    if signed.tree_size != checkpoint.tree_size
        || checkpoint.root().map_err(refuted)? != signed.root_hash
        || signed.origin != checkpoint.origin
    {
        return Err(refuted(
            "the checkpoint note says another tree than the predicate",
        ));
    }
    let p = &statement.predicate;
    let mut summary = format!(
        "attestation verified: callee {} protocol {} is {} (issued {} by {}); about {}; \
         ledger event {seq} in checkpoint {} at tree size {}",
        p["callee_id"].as_str().unwrap_or("?"),
        p["protocol_version"].as_str().unwrap_or("?"),
        p["gate_state"].as_str().unwrap_or("?"),
        p["issued_at"].as_str().unwrap_or("?"),
        checkpoint.origin,
        statement
            .subject
            .iter()
            .map(|s| format!("{} (sha256 {})", s.name, s.digest.sha256))
            .collect::<Vec<_>>()
            .join(", "),
        checkpoint.root_hash,
        checkpoint.tree_size,
    );
    if let Some(path) = &args.proof {
        let proof: InclusionProofView = read_json(path, "inclusion proof")?;
        let path_hashes = decode_all(&proof.audit_path).map_err(anyhow::Error::msg)?;
        attestation::check_inclusion(&statement, proof.leaf_index, proof.tree_size, &path_hashes)
            .map_err(refuted)?;
        summary.push_str(&format!(
            "\nevidence verified: ledger event {seq} is in the checkpoint's tree"
        ));
    }
    Ok(summary)
}

fn check_receipt(receipt: &Path, args: &VerifyArgs) -> anyhow::Result<String> {
    let jwks: Jwks = read_json(&args.jwks, "key set")?;
    let text = std::fs::read_to_string(receipt)
        .with_context(|| format!("reading the receipt {}", receipt.display()))?;
    // Either the whole answer (then it must be what was signed) or the bare JWS.
    let (jws, answer) = match serde_json::from_str::<serde_json::Value>(&text) {
        Ok(serde_json::Value::Object(mut answer)) => {
            let jws = answer
                .remove("receipt")
                .and_then(|r| r.as_str().map(str::to_string))
                .context("the answer has no `receipt`: ask with receipt=true")?;
            (jws, Some(serde_json::Value::Object(answer)))
        }
        _ => (text.trim().to_string(), None),
    };
    let payload = ReceiptPayload::open(&jws, &jwks).map_err(refuted)?;
    if let Some(answer) = answer
        && answer != payload.decision
    {
        return Err(refuted(
            "the answer beside the receipt differs from the decision the receipt signs",
        ));
    }
    let decision = &payload.decision;
    let mut summary = format!(
        "receipt verified: issued {} by {}; callee {} caller_version {}: authoritative={}; \
         checkpoint {} at tree size {}",
        crate::domain::time::format(payload.issued_at),
        payload.checkpoint.origin,
        decision["callee_id"].as_str().unwrap_or("?"),
        decision["caller_version"].as_str().unwrap_or("?"),
        decision["authoritative"],
        payload.checkpoint.root_hash,
        payload.checkpoint.tree_size,
    );
    if let Some(path) = &args.proof {
        let proof: InclusionProofView = read_json(path, "inclusion proof")?;
        let path_hashes = decode_all(&proof.audit_path).map_err(anyhow::Error::msg)?;
        payload
            .check_inclusion(proof.leaf_index, proof.tree_size, &path_hashes)
            .map_err(refuted)?;
        let (seq, _) = payload.evidence().expect("checked by check_inclusion");
        summary.push_str(&format!(
            "\nevidence verified: ledger event {seq} is in the checkpoint's tree"
        ));
    }
    Ok(summary)
}

pub async fn verify_ledger(args: VerifyLedgerArgs) -> ExitCode {
    exit(check_ledger(&args).await)
}

/// Opens a checkpoint file: its note must verify, and its fields must say what the note says.
fn open_checkpoint(path: &Path, keys: &[PublicKey]) -> anyhow::Result<Checkpoint> {
    let view: CheckpointView = read_json(path, "checkpoint")?;
    let checkpoint = Checkpoint::open(&view.note, keys)
        .map_err(|e| refuted(format!("{}: {e}", path.display())))?;
    let root = decode_all(std::slice::from_ref(&view.root_hash)).map_err(anyhow::Error::msg)?[0];
    if checkpoint.tree_size != view.tree_size || checkpoint.root_hash != root {
        return Err(refuted(format!(
            "{}: tree_size or root_hash differ from the signed note",
            path.display()
        )));
    }
    Ok(checkpoint)
}

async fn check_ledger(args: &VerifyLedgerArgs) -> anyhow::Result<String> {
    let jwks: Jwks = read_json(&args.jwks, "key set")?;
    let keys = public_keys(&jwks)?;
    let from = open_checkpoint(&args.from, &keys)?;
    let to = open_checkpoint(&args.to, &keys)?;
    if from.origin != to.origin {
        return Err(refuted(format!(
            "the checkpoints are of two logs: {} and {}",
            from.origin, to.origin
        )));
    }
    if from.tree_size > to.tree_size {
        return Err(refuted(format!(
            "the log shrank from {} to {} events",
            from.tree_size, to.tree_size
        )));
    }
    let proof: ConsistencyProofView = match (&args.proof, &args.url) {
        (Some(path), _) => read_json(path, "consistency proof")?,
        (None, Some(url)) => fetch_proof(url, args.api_key.as_deref(), &from, &to).await?,
        (None, None) => anyhow::bail!(
            "pass the consistency proof with --proof, or the registry's address with --url"
        ),
    };
    if (proof.first, proof.second) != (from.tree_size, to.tree_size) {
        return Err(refuted(format!(
            "the proof is from {} to {}, the checkpoints are {} and {}",
            proof.first, proof.second, from.tree_size, to.tree_size
        )));
    }
    let hashes = decode_all(&proof.proof).map_err(anyhow::Error::msg)?;
    merkle::verify_consistency(
        from.tree_size,
        to.tree_size,
        &from.root_hash,
        &to.root_hash,
        &hashes,
    )
    .map_err(|e| {
        refuted(format!(
            "the tree of {} events is not a prefix of the tree of {}: {e}",
            from.tree_size, to.tree_size
        ))
    })?;
    Ok(format!(
        "consistent: {} at {} events extends its checkpoint at {} events",
        to.origin, to.tree_size, from.tree_size
    ))
}

async fn fetch_proof(
    base: &url::Url,
    api_key: Option<&str>,
    from: &Checkpoint,
    to: &Checkpoint,
) -> anyhow::Result<ConsistencyProofView> {
    let mut url = base.join("v1/ledger/consistency")?;
    url.query_pairs_mut()
        .append_pair("first", &from.tree_size.to_string())
        .append_pair("second", &to.tree_size.to_string());
    let mut request = reqwest::Client::new().get(url.clone());
    if let Some(key) = api_key {
        request = request.bearer_auth(key);
    }
    let response = request
        .send()
        .await
        .with_context(|| format!("fetching {url}"))?;
    let status = response.status();
    anyhow::ensure!(status.is_success(), "{url} answered {status}");
    response
        .json()
        .await
        .with_context(|| format!("parsing the proof from {url}"))
}

pub fn signing_key(args: SigningKeyArgs) -> anyhow::Result<()> {
    let ring = match args.command {
        SigningKeyCommand::Show => transparency::load_or_create_key(&args.file)?,
        SigningKeyCommand::Rotate => {
            let ring = transparency::rotate_key(&args.file)?;
            eprintln!(
                "rotated: {} now signs; restart every replica to use it",
                ring.current().kid
            );
            ring
        }
    };
    println!(
        "{}",
        serde_json::to_string_pretty(&Jwks::of(&ring)).context("serializing the key set")?
    );
    Ok(())
}
