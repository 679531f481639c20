//! Callers' violation reports: check the evidence, record the report and its reporter, and
//! demote a `lifecycle-trusted` subject (a `card-trusted` one is recorded without a gate move).

use serde_json::Value;

use super::require_callee;
use super::{Missing, Queued, ServiceError, Services};
use crate::domain::ids::{CalleeId, ReportId};
use crate::domain::report::{self, Report, ReportOutcome, Trigger};
use crate::domain::time::Timestamp;
use crate::domain::version::ProtocolVersion;
use crate::storage::Store;

pub(crate) const MAX_EVIDENCE_BYTES: usize = 32 * 1024;

/// Checks and records a report. Returns it with the seq of the last ledger event it appended
/// (none when it moved no gate): what a caller passes as `min_seq` to read its effect back.
pub(crate) async fn submit(
    services: &Services,
    callee_id: CalleeId,
    version: ProtocolVersion,
    trigger: Trigger,
    evidence: Value,
    reporter: &str,
    now: Timestamp,
) -> Result<(Report, Option<i64>), ServiceError> {
    let store = &services.store;
    require_callee(store, callee_id).await?;
    if store.subject(callee_id, version).await?.is_none() {
        return Err(ServiceError::NotFound(no_subject(callee_id, version)));
    }
    if evidence.to_string().len() > MAX_EVIDENCE_BYTES {
        return Err(ServiceError::Invalid(format!(
            "evidence is larger than {MAX_EVIDENCE_BYTES} bytes"
        )));
    }
    let finding = report::check(trigger, &evidence).map_err(|why| {
        ServiceError::Invalid(format!(
            "the evidence does not show {}: {why}",
            trigger.as_str()
        ))
    })?;
    let draft = Report {
        id: ReportId::new(),
        callee_id,
        protocol_version: version,
        trigger,
        class: trigger.class(),
        evidence,
        finding,
        reporter: reporter.to_string(),
        // The policy decides under the ledger lock; the store records its outcome.
        outcome: ReportOutcome::Recorded,
        created_at: now,
    };
    let (stored, appended) = store
        .record_report(&draft, now)
        .await
        .map_err(ServiceError::missing(no_subject(callee_id, version)))?;
    super::attestations::record(services, &appended).await;
    services.committed(Queued::Nothing).await;
    Ok((stored, appended.last().map(|(event, _)| event.seq)))
}

fn no_subject(callee: CalleeId, version: ProtocolVersion) -> Missing {
    Missing::Subject {
        callee,
        version,
        offered: Vec::new(),
    }
}

/// A callee's reports, newest first.
pub(crate) async fn page(
    store: &Store,
    callee_id: CalleeId,
    before: Option<ReportId>,
    limit: u32,
) -> Result<Vec<Report>, ServiceError> {
    require_callee(store, callee_id).await?;
    Ok(store.reports(callee_id, before, limit).await?)
}
