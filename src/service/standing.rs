//! Where a subject's newest finished probe run stands: the rulebook it was last judged under
//! (its newest re-judgement's, else its own verdict's) and whether it passed there. Read by
//! re-judging, attestations and the console.

use super::ServiceError;
use crate::domain::ids::{CalleeId, ProbeRunId};
use crate::domain::ledger::EventBody;
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
    let rulebook = judged_under(last.as_ref(), &newest).map(str::to_string);
    Ok(Some((newest.id, rulebook)))
}

/// The rulebook `run` stands judged under: its newest re-judgement's (`last`), else its own.
pub(super) fn judged_under<'a>(last: Option<&'a Standing>, run: &'a ProbeRun) -> Option<&'a str> {
    match last {
        Some(last) => last.rulebook.as_deref(),
        None => run.judgement().and_then(|j| j.verdict.rulebook.as_deref()),
    }
}

/// Where the newest re-judgement of `run` in the subject's recent ledger left it, if there is
/// one (a restart under the same rules then judges nothing twice).
pub(super) async fn last_rejudgement(
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
        .find_map(|e| match EventBody::from_parts(&e.kind, e.data) {
            Ok(EventBody::Rejudged {
                probe_run_id,
                to_rulebook,
                passed_now,
                ..
            }) if probe_run_id == run => Some(Standing {
                rulebook: Some(to_rulebook),
                passed: passed_now,
            }),
            _ => None,
        }))
}
