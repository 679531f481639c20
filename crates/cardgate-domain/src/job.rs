//! Jobs of the durable work queue: what to do, for whom, and where each stands.

use serde::{Deserialize, Serialize};

use super::ids::{CalleeId, JobId, ProbeRunId};
use super::time::Timestamp;
use super::version::ProtocolVersion;

/// Claims of one job before it is given up: a job whose worker stopped (crashed, killed) this
/// many times without an outcome is failed with the reason, not claimed forever.
pub const MAX_ATTEMPTS: i32 = 5;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum JobKind {
    /// Run a probe cycle against a subject (the job carries its probe run).
    Probe,
    /// Fetch the callee's card again.
    Refresh,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum JobStatus {
    Queued,
    Running,
    Done,
    Failed,
}

macro_rules! text_enum {
    ($ty:ident { $($variant:ident => $text:literal),* $(,)? }) => {
        impl $ty {
            pub fn as_str(self) -> &'static str {
                match self { $(Self::$variant => $text),* }
            }
            pub fn parse(s: &str) -> Option<Self> {
                match s { $($text => Some(Self::$variant),)* _ => None }
            }
        }
    };
}

text_enum!(JobKind { Probe => "probe", Refresh => "refresh" });
text_enum!(JobStatus { Queued => "queued", Running => "running", Done => "done", Failed => "failed" });

/// One job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Job {
    pub id: JobId,
    pub kind: JobKind,
    pub callee_id: CalleeId,
    pub protocol_version: Option<ProtocolVersion>,
    pub reason: String,
    pub dedup_key: String,
    pub status: JobStatus,
    pub attempts: i32,
    pub run_after: Timestamp,
    pub lease_owner: Option<String>,
    pub lease_until: Option<Timestamp>,
    pub last_error: Option<String>,
    pub probe_run_id: Option<ProbeRunId>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

/// The dedup key of a probe job: one active probe per subject.
pub fn probe_key(callee_id: CalleeId, version: ProtocolVersion) -> String {
    format!("probe:{callee_id}:{version}")
}

/// The dedup key of a refresh job: one active refresh per callee.
pub fn refresh_key(callee_id: CalleeId) -> String {
    format!("refresh:{callee_id}")
}

/// A refresh of `callee`'s card, due now.
pub fn refresh_job(callee: CalleeId, reason: &str, now: Timestamp) -> Job {
    Job::queued(JobKind::Refresh, callee, None, reason, now)
}

/// A probe of one subject, due now, that executes the queued run `run`.
pub fn probe_job(
    callee: CalleeId,
    version: ProtocolVersion,
    run: ProbeRunId,
    reason: &str,
    now: Timestamp,
) -> Job {
    Job {
        probe_run_id: Some(run),
        ..Job::queued(JobKind::Probe, callee, Some(version), reason, now)
    }
}

impl Job {
    /// A job of `kind`, queued and due at `now`, with the dedup key of its kind.
    fn queued(
        kind: JobKind,
        callee_id: CalleeId,
        protocol_version: Option<ProtocolVersion>,
        reason: &str,
        now: Timestamp,
    ) -> Self {
        let dedup_key = match (kind, protocol_version) {
            (JobKind::Probe, Some(version)) => probe_key(callee_id, version),
            _ => refresh_key(callee_id),
        };
        Job {
            id: JobId::new(),
            kind,
            callee_id,
            protocol_version,
            reason: reason.to_string(),
            dedup_key,
            status: JobStatus::Queued,
            attempts: 0,
            run_after: now,
            lease_owner: None,
            lease_until: None,
            last_error: None,
            probe_run_id: None,
            created_at: now,
            updated_at: now,
        }
    }
}

/// Counts of the queue by status, and the oldest job that is due but not yet claimed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueStats {
    pub queued: i64,
    pub running: i64,
    pub failed: i64,
    pub oldest_due: Option<Timestamp>,
}
