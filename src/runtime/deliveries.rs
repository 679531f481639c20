//! Sends webhook deliveries: whenever a use case commits here or the read model applies a
//! change from elsewhere (new events may have queued deliveries), right after a round that
//! sent something (a finished delivery may free the next one about its subject), and on a
//! short poll (retries come due), until shutdown. About once a second it also tells the
//! subscriptions of receivers that have crossed the failing threshold.

use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use crate::service::{Services, webhooks};

/// Runs until `stop` is cancelled. `owner` names this process in delivery leases.
pub async fn run(services: Services, owner: String, stop: CancellationToken) {
    /// How often failing receivers are looked for: a threshold crossed by time passing has no
    /// write to wake anyone.
    const FAILING_CHECK: Duration = Duration::from_secs(1);
    let mut applied = services.view.subscribe();
    let mut checked = Instant::now();
    loop {
        if checked.elapsed() >= FAILING_CHECK {
            checked = Instant::now();
            if let Err(e) = webhooks::announce_failing(&services).await {
                tracing::warn!(error = %e, "announcing failing subscriptions");
            }
        }
        let sent = match webhooks::deliver_due(&services, &owner).await {
            Ok(sent) => sent,
            Err(e) => {
                tracing::warn!(error = %e, "sending webhook deliveries");
                0
            }
        };
        // More may be due right away: a full batch left some behind, and a finished delivery
        // frees the next one about its subject. An empty round ends the run.
        if sent > 0 {
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
