//! The job worker: claims jobs from the durable queue with a lease, renews the lease while it
//! works, and runs a bounded number of jobs at once. On shutdown it stops claiming, cuts running
//! probes short (they are aborted and never promote) and puts their jobs back in the queue, so
//! another replica (or the next start) takes them.

use std::sync::Arc;

use anyhow::Context;
use std::time::Duration;

use tokio::sync::{Notify, Semaphore};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::domain::job::{Job, JobKind, MAX_ATTEMPTS};
use crate::service::Services;
use crate::service::callees::{self, Revalidate};
use crate::service::probe;

/// How the worker runs.
#[derive(Debug, Clone)]
pub struct WorkerSettings {
    /// This process's name in leases.
    pub owner: String,
    pub lease: Duration,
    /// Jobs run at once by this process.
    pub concurrency: usize,
    /// How often to look for due jobs when nothing wakes the worker.
    pub poll: Duration,
}

impl Default for WorkerSettings {
    fn default() -> Self {
        Self {
            owner: format!(
                "cardgate-{}",
                &uuid::Uuid::new_v4().simple().to_string()[..8]
            ),
            lease: Duration::from_secs(30),
            concurrency: 8,
            poll: Duration::from_secs(1),
        }
    }
}

/// Runs until `shutdown` is cancelled, then drains.
pub async fn run(services: Services, settings: WorkerSettings, shutdown: CancellationToken) {
    let wake: Arc<Notify> = services.wake.clone();
    let permits = Arc::new(Semaphore::new(settings.concurrency.max(1)));
    let mut running = JoinSet::new();
    loop {
        let permit = tokio::select! {
            () = shutdown.cancelled() => break,
            permit = permits.clone().acquire_owned() => permit.expect("the semaphore is never closed"),
        };
        let now = services.now();
        let lease_until = now + chrono::Duration::from_std(settings.lease).unwrap_or_default();
        match services
            .store
            .claim_job(&settings.owner, lease_until, now)
            .await
        {
            Ok(Some(job)) => {
                let (services, settings, shutdown) =
                    (services.clone(), settings.clone(), shutdown.clone());
                // Everything the job logs, down to the probe's calls, carries which job it was.
                let span = tracing::info_span!("job", job.id = %job.id, kind = job.kind.as_str(),
                    callee.id = %job.callee_id, attempt = job.attempts);
                running.spawn(
                    async move {
                        run_job(&services, &settings, &job, &shutdown).await;
                        drop(permit);
                    }
                    .instrument(span),
                );
                continue;
            }
            Ok(None) => drop(permit),
            Err(e) => {
                drop(permit);
                tracing::warn!(error = ?e, "claiming a job failed");
            }
        }
        // Reap finished tasks so the set does not grow.
        while running.try_join_next().is_some() {}
        tokio::select! {
            () = shutdown.cancelled() => break,
            () = wake.notified() => {}
            () = tokio::time::sleep(settings.poll) => {}
        }
    }
    tracing::info!(
        jobs = running.len(),
        "worker stopping; cutting running jobs short"
    );
    while running.join_next().await.is_some() {}
}

/// Runs one job while renewing its lease; on shutdown cuts it short and requeues it.
async fn run_job(
    services: &Services,
    settings: &WorkerSettings,
    job: &Job,
    shutdown: &CancellationToken,
) {
    let owner = settings.owner.as_str();
    if job.attempts > MAX_ATTEMPTS {
        // Claimed again after its worker stopped each time: the job itself may be what kills
        // workers, so it stops here, with the reason recorded.
        let why = format!(
            "gave up after {MAX_ATTEMPTS} attempts: each ended without an outcome (the worker stopped)"
        );
        tracing::error!(job.id = %job.id, "job {}: {why}", job.id);
        end_job(services, job, owner, &why, why.clone()).await;
        return;
    }
    tracing::info!("job {} started", job.id);
    let outcome = tokio::select! {
        result = execute(services, job, owner) => Some(result),
        why = keep_lease(services, settings, job) => {
            tracing::warn!(job.id = %job.id, "job {} stopped: {why}", job.id);
            None
        }
        () = shutdown.cancelled() => None,
    };
    match outcome {
        Some(Ok(())) => {}
        Some(Err(e)) => {
            tracing::error!(job.id = %job.id, error = ?e, "job {} failed", job.id);
            // A failed job's run ends with it: it never promotes, and never stays `running`.
            let why = format!("the probe job failed: {e:#}");
            end_job(services, job, owner, &why, format!("{e:#}")).await;
        }
        None => {
            // Cut short: a probe that did not finish never promotes.
            let now = services.now();
            if let Some(run) = job.probe_run_id {
                let why = "cut short: cardgate shut down while the probe ran";
                logged(
                    services.store.abort_probe_run(run, why, now).await,
                    "aborting the probe run of a job cut short",
                );
            }
            logged(
                services
                    .store
                    .requeue_job(job.id, owner, now, Some("cut short by shutdown"), now)
                    .await,
                "requeueing a job cut short",
            );
        }
    }
}

/// Renews `job`'s lease every third of its length; returns only when the lease is lost.
async fn keep_lease(services: &Services, settings: &WorkerSettings, job: &Job) -> &'static str {
    let owner = settings.owner.as_str();
    let mut tick = tokio::time::interval(settings.lease / 3);
    tick.tick().await;
    loop {
        tick.tick().await;
        let now = services.now();
        let until = now + chrono::Duration::from_std(settings.lease).unwrap_or_default();
        match services.store.renew_lease(job.id, owner, until, now).await {
            Ok(true) => {}
            Ok(false) => return "the lease was lost",
            Err(e) => tracing::warn!(error = ?e, job.id = %job.id, "renewing a lease failed"),
        }
    }
}

/// Ends a job without an outcome: its probe run, if any, is aborted with `run_why` (it never
/// promotes), and the job finishes failed with `job_error`. Best effort: a lease lost
/// meanwhile means another worker owns the job now, and a store that fails here leaves the
/// job to its lease's expiry (logged, so the operator sees why it ran again).
async fn end_job(services: &Services, job: &Job, owner: &str, run_why: &str, job_error: String) {
    let now = services.now();
    if let Some(run) = job.probe_run_id {
        logged(
            services.store.abort_probe_run(run, run_why, now).await,
            "aborting the probe run of a failed job",
        );
    }
    logged(
        services
            .store
            .finish_job(job.id, owner, Some(&job_error), now)
            .await,
        "finishing a failed job",
    );
}

/// Logs a store write that failed where nothing more can be done about it.
fn logged<T, E: std::error::Error>(result: Result<T, E>, what: &str) {
    if let Err(e) = result {
        tracing::warn!(error = %e, source = ?e.source(), "{what} failed");
    }
}

async fn execute(services: &Services, job: &Job, owner: &str) -> anyhow::Result<()> {
    match job.kind {
        JobKind::Probe => probe::execute(services, job, owner).await,
        JobKind::Refresh => {
            // A failed fetch is an outcome (recorded, backed off), not a failed job; the job
            // completes in the transaction that records it.
            callees::refresh(
                services,
                job.callee_id,
                Revalidate::IfChanged,
                "scheduler",
                Some((job.id, owner)),
            )
            .await
            .map(drop)
            .context("refreshing the card")
        }
    }
}
