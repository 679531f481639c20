//! Follows the change feed: whenever the store signals that changes were committed (by another
//! replica, the CLI, or this process), the read model catches up. A lost signal connection is
//! opened again and followed by a catch-up, so no change is lost, only delayed.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::service::Services;
use crate::storage::ChangeSignal;

/// The pause before watching again after the database could not be reached.
const RETRY: Duration = Duration::from_secs(1);

/// Runs until `stop` is cancelled.
pub(crate) async fn follow(services: Services, stop: CancellationToken) {
    let mut signal: Option<ChangeSignal> = None;
    loop {
        let Some(watching) = signal.as_mut() else {
            match services.store.watch_changes().await {
                Ok(fresh) => {
                    signal = Some(fresh);
                    // Whatever was committed while nobody watched is applied now.
                    services.view.sync().await;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot watch the change feed; retrying");
                    if pause(&stop).await {
                        return;
                    }
                }
            }
            continue;
        };
        tokio::select! {
            () = stop.cancelled() => return,
            changed = watching.changed() => match changed {
                Ok(()) => services.view.sync().await,
                Err(e) => {
                    // Start over on a fresh connection rather than trust this one's state.
                    tracing::warn!(error = %e, "lost the change feed; watching it again");
                    signal = None;
                    if pause(&stop).await {
                        return;
                    }
                }
            },
        }
    }
}

/// Waits [`RETRY`]; true if `stop` was cancelled meanwhile.
async fn pause(stop: &CancellationToken) -> bool {
    tokio::select! {
        () = stop.cancelled() => true,
        () = tokio::time::sleep(RETRY) => false,
    }
}
