//! Sends webhook deliveries: whenever a use case commits here or the read model applies a
//! change from elsewhere (new events may have queued deliveries), right after a round that
//! sent something (a finished delivery may free the next one about its subject), and on a
//! short poll (retries come due), until shutdown. What this process's own appends queue for
//! healthy receivers is handed straight to it (leased as it is queued) and sent without a
//! claim, each batch as soon as its transaction commits. Several claiming rounds run at once
//! (`WebhookSettings::rounds`): one whose claim came back full lets the next start while it
//! sends, so a burst is claimed, sent and recorded in overlapping steps. About once a second
//! it also tells the subscriptions of receivers that have crossed the failing threshold.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use crate::service::webhooks::Sender;
use crate::service::{Services, webhooks};
use crate::storage::Claimed;

/// Runs until `stop` is cancelled. `owner` names this process in delivery leases.
pub(crate) async fn run(services: Services, owner: String, stop: CancellationToken) {
    let sender = Arc::new(Sender::new(owner, &services.webhooks));
    let rounds = services.webhooks.rounds.max(1);
    // The lease outlives one attempt, as a claimed one's does.
    let handed = services
        .store
        .hand_deliveries_to(sender.owner(), services.webhooks.timeout * 2);
    let handoffs = handed.map(|from| {
        tokio::spawn(take_handoffs(
            services.clone(),
            sender.clone(),
            from,
            stop.clone(),
        ))
    });
    let loops: Vec<_> = (0..rounds)
        .map(|n| {
            tokio::spawn(rounds_loop(
                services.clone(),
                sender.clone(),
                n == 0,
                stop.clone(),
            ))
        })
        .collect();
    for done in futures::future::join_all(loops.into_iter().chain(handoffs)).await {
        if let Err(e) = done {
            tracing::error!(error = ?e, "a webhook sending loop panicked");
        }
    }
}

/// Sends each batch this process's appends hand over as soon as it arrives, batches side by
/// side (a slow receiver in one does not hold the next append's news); at shutdown, waits for
/// the rounds in flight (each ends within the attempt timeout).
async fn take_handoffs(
    services: Services,
    sender: Arc<Sender>,
    mut from: tokio::sync::mpsc::Receiver<Vec<Claimed>>,
    stop: CancellationToken,
) {
    let mut rounds = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            () = stop.cancelled() => break,
            batch = from.recv() => {
                let Some(batch) = batch else { break };
                let (services, sender) = (services.clone(), sender.clone());
                rounds.spawn(async move {
                    if let Err(e) = webhooks::deliver_handed_over(&services, &sender, batch).await {
                        tracing::warn!(error = %e, "sending handed-over webhook deliveries");
                    }
                });
            }
            Some(_) = rounds.join_next(), if !rounds.is_empty() => {}
        }
    }
    while rounds.join_next().await.is_some() {}
}

/// One loop of sending rounds; `announces` says whether this one also tells of failing
/// receivers (one loop per process does).
async fn rounds_loop(
    services: Services,
    sender: Arc<Sender>,
    announces: bool,
    stop: CancellationToken,
) {
    /// How often failing receivers are looked for: a threshold crossed by time passing has no
    /// write to wake anyone.
    const FAILING_CHECK: Duration = Duration::from_secs(1);
    let mut applied = services.view.subscribe();
    let mut checked = Instant::now();
    loop {
        if announces && checked.elapsed() >= FAILING_CHECK {
            checked = Instant::now();
            if let Err(e) = webhooks::announce_failing(&services).await {
                tracing::warn!(error = %e, "announcing failing subscriptions");
            }
        }
        let sent = match webhooks::deliver_due(&services, &sender).await {
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
            () = sender.more.notified() => {}
            () = tokio::time::sleep(services.webhooks.poll) => {}
        }
    }
}
