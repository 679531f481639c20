//! Reading probe runs back.

use crate::domain::ids::{CalleeId, ProbeRunId};
use crate::domain::probe::ProbeRun;
use crate::service::require_callee;
use crate::service::{Missing, ServiceError, Services};
use crate::storage::Store;

/// A run. One seen finished has its outcome in this process's decisions too: the worker that
/// finished it may still be applying it, so the read model catches up first (a caller that
/// watched its probe finish then asks `/v1/trust` and must see the result).
pub async fn get(services: &Services, id: ProbeRunId) -> Result<ProbeRun, ServiceError> {
    let run = services
        .store
        .probe_run(id)
        .await
        .map_err(ServiceError::missing(Missing::ProbeRun(id)))?;
    if run.finished_at().is_some() {
        services.caught_up().await;
    }
    Ok(run)
}

/// A callee's probe runs, newest first, without their heavy evidence.
pub async fn page(
    store: &Store,
    callee_id: CalleeId,
    before: Option<ProbeRunId>,
    limit: u32,
) -> Result<Vec<ProbeRun>, ServiceError> {
    require_callee(store, callee_id).await?;
    Ok(store.probe_runs(callee_id, before, limit).await?)
}
