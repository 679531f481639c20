//! Ages the read model's track records: a record is folded when its subject changes, but runs
//! also leave the window as time passes. Once a minute, the records whose oldest counted run
//! has left the window are folded again, so a subject nobody probes lets go of old runs.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::service::Services;

/// How often the records are looked over: a walk of the model in memory, cheap even at a
/// million subjects, and a reload only for the callees that aged.
const EVERY: Duration = Duration::from_secs(60);

/// Runs until `stop` is cancelled.
pub(crate) async fn run(services: Services, stop: CancellationToken) {
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(EVERY) => {}
        }
        match services.view.refold_aged().await {
            Ok(0) => {}
            Ok(callees) => tracing::debug!(callees, "folded aged track records again"),
            // The next look tries again; until then the records keep the runs they had.
            Err(e) => tracing::warn!(error = %e, "folding aged track records again"),
        }
    }
}
