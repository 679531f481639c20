//! Where a subject's newest finished probe run stands: the rulebook it was last judged under
//! (its newest re-judgement's, else its own verdict's) and whether it passed there. Read by
//! re-judging, attestations and the console.

use super::ServiceError;
use crate::domain::ids::{CalleeId, ProbeRunId};
use crate::domain::ledger::{EventBody, EventRecord};
use crate::domain::probe::ProbeRun;
use crate::domain::rulebook::Standing;
use crate::domain::version::ProtocolVersion;
use crate::storage::Store;

/// How many of a subject's newest events are searched for a re-judgement already recorded.
const RECENT: u32 = 64;

/// The subject's newest finished run and the rulebook its outcome stands judged under: its
/// newest re-judgement's, else its own verdict's (`None` before rulebooks were versioned).
pub async fn standing(
    store: &Store,
    callee: CalleeId,
    version: ProtocolVersion,
) -> Result<Option<(ProbeRunId, Option<String>)>, ServiceError> {
    let Some(newest) = store.latest_finished_probe(callee, version).await? else {
        return Ok(None);
    };
    let last = last_rejudgement(store, callee, version, newest.id).await?;
    let rulebook = judged_under(last.as_ref(), own_rulebook(&newest)).map(str::to_string);
    Ok(Some((newest.id, rulebook)))
}

/// The rulebook a run's own verdict names (`None` before rulebooks were versioned).
fn own_rulebook(run: &ProbeRun) -> Option<&str> {
    run.judgement().and_then(|j| j.verdict.rulebook.as_deref())
}

/// The rulebook a run stands judged under: its newest re-judgement's (`last`), else its own
/// verdict's (`own`).
pub(super) fn judged_under<'a>(
    last: Option<&'a Standing>,
    own: Option<&'a str>,
) -> Option<&'a str> {
    match last {
        Some(last) => last.rulebook.as_deref(),
        None => own,
    }
}

/// The subject, run and outcome a `rejudged` event records; `None` for any other event.
pub(super) fn rejudgement(
    event: EventRecord,
) -> Option<(CalleeId, ProtocolVersion, ProbeRunId, Standing)> {
    let version = ProtocolVersion::parse_exact(&event.protocol_version).ok()?;
    match EventBody::from_parts(&event.kind, event.data) {
        Ok(EventBody::Rejudged {
            probe_run_id,
            to_rulebook,
            passed_now,
            ..
        }) => Some((
            event.callee_id,
            version,
            probe_run_id,
            Standing {
                rulebook: Some(to_rulebook),
                passed: passed_now,
            },
        )),
        _ => None,
    }
}

/// Where the newest re-judgement of `run` in the subject's recent ledger left it, if there is
/// one (a restart under the same rules then judges nothing twice).
async fn last_rejudgement(
    store: &Store,
    callee: CalleeId,
    version: ProtocolVersion,
    run: ProbeRunId,
) -> Result<Option<Standing>, ServiceError> {
    let recent = store
        .subject_events_before(callee, version, i64::MAX, RECENT)
        .await?;
    Ok(recent
        .into_iter()
        .filter_map(rejudgement)
        .find_map(|(.., of, standing)| (of == run).then_some(standing)))
}
