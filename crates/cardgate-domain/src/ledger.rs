//! The append-only ledger: event kinds, the hash chain, and chain verification.
//!
//! Every event is about one subject (callee, `Major.Minor`). Events form one global chain:
//! event `n` stores the hash of event `n-1`, and its own hash covers its sequence number, that
//! predecessor hash and every stored field. Editing any stored byte of any event therefore
//! breaks the chain at that event, which [`ChainVerifier`] reports.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::capability::Capability;
use super::demotion::DemotionClass;
use super::ids::{CalleeId, ProbeRunId, ReportId, SnapshotId};
use super::jcs;
use super::time::{self, Timestamp};
use super::version::ProtocolVersion;

/// The `prev_hash` of the first event.
pub const GENESIS_HASH: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// What happened to a subject. Stored as `kind` plus `data` (the variant's fields).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "data", rename_all = "kebab-case")]
pub enum EventBody {
    /// The card offers this version: at registration, or newly on a refresh. Starts the subject
    /// in `card-trusted`.
    VersionAppeared {
        snapshot_id: SnapshotId,
        advertised: Vec<Capability>,
    },
    /// The current card no longer offers this version.
    VersionWithdrawn { snapshot_id: SnapshotId },
    /// The card changed but still offers this version. Moves no gate.
    CardRepublished {
        snapshot_id: SnapshotId,
        sha256: String,
    },
    /// The card advertises a capability for this version that it did not before; unverified
    /// until a probe that starts after this event checks it.
    CapabilityAdvertised {
        capability: Capability,
        snapshot_id: SnapshotId,
    },
    /// The card stopped advertising a capability for this version.
    CapabilityWithdrawn {
        capability: Capability,
        snapshot_id: SnapshotId,
    },
    /// The current card failed to fetch, parse or verify; callers are told `untrusted`.
    CardUntrusted {
        /// The untrusted snapshot; absent when the card could not be fetched at all.
        snapshot_id: Option<SnapshotId>,
        reason: String,
    },
    /// The card verifies again after being untrusted.
    CardTrustRestored { snapshot_id: SnapshotId },
    /// A probe cycle finished, with its verdict.
    ProbeFinished {
        probe_run_id: ProbeRunId,
        started_at: Timestamp,
        /// The ledger head seq when the probe started (absent on events from before it was
        /// recorded).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        start_seq: Option<i64>,
        passed: bool,
        failed_findings: Vec<String>,
        /// Why the cycle could not exercise the callee at all (credentials missing or
        /// refused): nothing it saw counts, for or against.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        not_exercised: Option<String>,
        /// The rulebook version the verdict behind this event was judged under (absent on
        /// events from before rulebooks were versioned, and on report demotions).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        rulebook: Option<String>,
    },
    /// `card-trusted` (or `demoted`) → `lifecycle-trusted`, on a passing probe cycle.
    Promoted {
        probe_run_id: ProbeRunId,
        probe_started_at: Timestamp,
        /// The ledger head seq when the probe started: what freshness is judged by.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        probe_start_seq: Option<i64>,
        /// The rulebook version the verdict behind this event was judged under (absent on
        /// events from before rulebooks were versioned, and on report demotions).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        rulebook: Option<String>,
    },
    /// `lifecycle-trusted` → `demoted`, by a probe finding or a verified caller report.
    Demoted {
        class: DemotionClass,
        probe_run_id: Option<ProbeRunId>,
        report_id: Option<ReportId>,
        reason: String,
        /// The rulebook version the verdict behind this event was judged under (absent on
        /// events from before rulebooks were versioned, and on report demotions).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        rulebook: Option<String>,
    },
    /// A caller reported a violation and its evidence checked out.
    ReportReceived {
        report_id: ReportId,
        trigger: String,
        reporter: String,
    },
    /// The subject's newest finished run was judged again from its stored observations under
    /// another rulebook, and the outcome changed. Moves no gate by itself: a demotion it
    /// causes is its own event, and only a fresh probe promotes.
    Rejudged {
        probe_run_id: ProbeRunId,
        /// The rulebook the run was judged under before (absent: before versioning).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        from_rulebook: Option<String>,
        to_rulebook: String,
        passed_before: bool,
        passed_now: bool,
        /// What now blocks it, one line per finding.
        reasons: Vec<String>,
    },
}

impl EventBody {
    /// Every kind, as stored in `kind`.
    pub const KINDS: [&'static str; 12] = [
        "version-appeared",
        "version-withdrawn",
        "card-republished",
        "capability-advertised",
        "capability-withdrawn",
        "card-untrusted",
        "card-trust-restored",
        "probe-finished",
        "promoted",
        "demoted",
        "report-received",
        "rejudged",
    ];

    pub fn kind(&self) -> &'static str {
        match self {
            EventBody::VersionAppeared { .. } => "version-appeared",
            EventBody::VersionWithdrawn { .. } => "version-withdrawn",
            EventBody::CardRepublished { .. } => "card-republished",
            EventBody::CapabilityAdvertised { .. } => "capability-advertised",
            EventBody::CapabilityWithdrawn { .. } => "capability-withdrawn",
            EventBody::CardUntrusted { .. } => "card-untrusted",
            EventBody::CardTrustRestored { .. } => "card-trust-restored",
            EventBody::ProbeFinished { .. } => "probe-finished",
            EventBody::Promoted { .. } => "promoted",
            EventBody::Demoted { .. } => "demoted",
            EventBody::ReportReceived { .. } => "report-received",
            EventBody::Rejudged { .. } => "rejudged",
        }
    }

    /// The variant's fields as JSON (the `data` column).
    pub fn data(&self) -> Value {
        let mut tagged = serde_json::to_value(self).expect("event bodies serialize");
        tagged
            .get_mut("data")
            .map(Value::take)
            .unwrap_or(Value::Null)
    }

    /// Rebuilds a body from its stored `kind` and `data`.
    pub fn from_parts(kind: &str, data: Value) -> Result<Self, serde_json::Error> {
        serde_json::from_value(serde_json::json!({ "kind": kind, "data": data }))
    }
}

/// An event to append; the store assigns sequence, time and hashes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewEvent {
    pub callee_id: CalleeId,
    pub protocol_version: ProtocolVersion,
    pub body: EventBody,
    /// Who caused it: `system`, or `key:<name>` for an API key.
    pub actor: String,
}

/// An event exactly as stored. Verification works on this untyped form so that tampering
/// which breaks the typed shape is still reported as a broken link, not a parse failure.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EventRecord {
    pub seq: i64,
    pub callee_id: CalleeId,
    pub protocol_version: String,
    pub kind: String,
    pub data: Value,
    pub actor: String,
    pub recorded_at: Timestamp,
    pub prev_hash: String,
    pub hash: String,
}

impl EventRecord {
    /// Seals `event` as number `seq` after the event whose hash is `prev_hash`.
    pub fn seal(event: &NewEvent, seq: i64, prev_hash: &str, recorded_at: Timestamp) -> Self {
        let mut record = Self {
            seq,
            callee_id: event.callee_id,
            protocol_version: event.protocol_version.to_string(),
            kind: event.body.kind().to_string(),
            data: event.body.data(),
            actor: event.actor.clone(),
            recorded_at: time::to_stored_precision(recorded_at),
            prev_hash: prev_hash.to_string(),
            hash: String::new(),
        };
        record.hash = record
            .compute_hash()
            .expect("event bodies hold no numbers beyond JCS range");
        record
    }

    /// sha256 over the RFC 8785 form of every stored field but `hash` itself.
    pub fn compute_hash(&self) -> Result<String, jcs::JcsError> {
        let input = serde_json::json!({
            "seq": self.seq,
            "prev_hash": self.prev_hash,
            "callee_id": self.callee_id.to_string(),
            "protocol_version": self.protocol_version,
            "kind": self.kind,
            "data": self.data,
            "actor": self.actor,
            "recorded_at": time::format(self.recorded_at),
        });
        Ok(hex::encode(Sha256::digest(jcs::canonicalize(&input)?)))
    }

    /// The typed body, if the stored kind and data still make one.
    pub fn body(&self) -> Result<EventBody, serde_json::Error> {
        EventBody::from_parts(&self.kind, self.data.clone())
    }
}

/// Where and why the chain is broken.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BrokenLink {
    pub seq: i64,
    pub reason: String,
}

/// Checks a ledger read in sequence order, one event at a time, in constant memory.
#[derive(Debug)]
pub struct ChainVerifier {
    next_seq: i64,
    prev_hash: String,
    checked: u64,
}

impl Default for ChainVerifier {
    fn default() -> Self {
        Self {
            next_seq: 1,
            prev_hash: GENESIS_HASH.to_string(),
            checked: 0,
        }
    }
}

impl ChainVerifier {
    /// Checks the next event; the first failure is the broken link.
    pub fn check(&mut self, event: &EventRecord) -> Result<(), BrokenLink> {
        let broken = |reason: String| BrokenLink {
            seq: event.seq,
            reason,
        };
        if event.seq != self.next_seq {
            return Err(broken(format!(
                "expected sequence number {}, found {} (an event is missing or out of order)",
                self.next_seq, event.seq
            )));
        }
        if event.prev_hash != self.prev_hash {
            return Err(broken(format!(
                "prev_hash {} does not match the hash of event {} ({})",
                event.prev_hash,
                event.seq - 1,
                self.prev_hash
            )));
        }
        let recomputed = event
            .compute_hash()
            .map_err(|e| broken(format!("event contents cannot be canonicalized: {e}")))?;
        if recomputed != event.hash {
            return Err(broken(format!(
                "stored hash {} does not match the event's contents (recomputed {recomputed})",
                event.hash
            )));
        }
        self.next_seq += 1;
        self.prev_hash = event.hash.clone();
        self.checked += 1;
        Ok(())
    }

    /// Events checked so far.
    pub fn checked(&self) -> u64 {
        self.checked
    }

    /// Sequence number and hash of the last good event (0 and the genesis hash if none).
    pub fn head(&self) -> (i64, &str) {
        (self.next_seq - 1, &self.prev_hash)
    }
}

#[cfg(test)]
mod tests;
