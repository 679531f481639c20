//! Sends webhook deliveries: whenever the read model applies a change (new events may have
//! queued deliveries) and on a short poll (retries come due), until shutdown.

use tokio_util::sync::CancellationToken;

use crate::service::{Services, webhooks};

/// Runs until `stop` is cancelled. `owner` names this process in delivery leases.
pub async fn run(services: Services, owner: String, stop: CancellationToken) {
    let mut applied = services.view.subscribe();
    loop {
        let sent = match webhooks::deliver_due(&services, &owner).await {
            Ok(sent) => sent,
            Err(e) => {
                tracing::warn!(error = %e, "sending webhook deliveries");
                0
            }
        };
        // A full batch means more may be due right away.
        if sent >= services.webhooks.batch as usize {
            continue;
        }
        tokio::select! {
            () = stop.cancelled() => return,
            _ = applied.changed() => {}
            () = services.deliveries.notified() => {}
            () = tokio::time::sleep(services.webhooks.poll) => {}
        }
    }
}
