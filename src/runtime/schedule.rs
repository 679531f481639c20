//! Periodic work. tokio-cron-scheduler only *calls* [`refresh_sweep`] and [`reprobe_sweep`]
//! (and, on the refresh tick, [`housekeeping::run`](super::housekeeping::run)):
//! plain, idempotent, bounded functions that enqueue jobs (tests call them directly). With
//! several replicas each runs its own scheduler; the queue's dedup keys make the double
//! enqueues no-ops, and workers claim each job once.

use std::fmt;
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use serde::Serialize;
use tokio_cron_scheduler::{Job as CronJob, JobScheduler};
use tracing::Instrument;

use super::housekeeping::{self, HousekeepingSettings};
use crate::domain::job::{self, Job};
use crate::domain::politeness;
use crate::domain::time::Timestamp;
use crate::service::{Queued, ServiceError, Services, probe};

/// The word for a schedule that never fires: its sweep only runs when something calls it.
pub const OFF: &str = "off";

/// When a sweep runs: a 6-field cron expression (seconds first), checked when it is parsed,
/// or never.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Schedule {
    Off,
    Cron(String),
}

impl FromStr for Schedule {
    type Err = String;

    /// [`OFF`] in any case (it is a word, not a cron field), or an expression the scheduler
    /// accepts.
    fn from_str(s: &str) -> Result<Self, String> {
        if s.trim().eq_ignore_ascii_case(OFF) {
            return Ok(Schedule::Off);
        }
        CronJob::new(s, |_, _| {})
            .map(|_| Schedule::Cron(s.to_string()))
            .map_err(|e| format!("`{s}`: {e} (6 fields, seconds first)"))
    }
}

impl Schedule {
    /// How long after `now` this schedule next fires; `None` when it never does.
    pub fn until_next(&self, now: Timestamp) -> Option<Duration> {
        let Schedule::Cron(expression) = self else {
            return None;
        };
        let cron = croner::parser::CronParser::builder()
            .seconds(croner::parser::Seconds::Required)
            .build()
            .parse(expression)
            .ok()?;
        let next = cron.find_next_occurrence(&now, false).ok()?;
        (next - now).to_std().ok()
    }
}

impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Schedule::Off => f.write_str(OFF),
            Schedule::Cron(expression) => f.write_str(expression),
        }
    }
}

/// When periodic work runs.
#[derive(Debug, Clone)]
pub struct ScheduleSettings {
    /// Card refresh sweep (`CARDGATE_REFRESH_SCHEDULE`, default every 5 minutes).
    pub refresh: Schedule,
    /// Re-probe sweep of demoted and stale subjects (`CARDGATE_REPROBE_SCHEDULE`, default daily).
    pub reprobe: Schedule,
    /// Recording a signed checkpoint of the ledger, if it grew (`CARDGATE_CHECKPOINT_SCHEDULE`,
    /// default every minute).
    pub checkpoint: Schedule,
    /// A subject whose newest probe started longer ago than this is re-probed.
    pub stale_after: Duration,
    /// Most refresh jobs one sweep enqueues.
    pub sweep_limit: u32,
}

impl Default for ScheduleSettings {
    fn default() -> Self {
        Self {
            refresh: Schedule::Cron("0 */5 * * * *".into()),
            reprobe: Schedule::Cron("0 0 3 * * *".into()),
            checkpoint: Schedule::Cron("0 * * * * *".into()),
            stale_after: Duration::from_secs(7 * 24 * 3600),
            sweep_limit: 50_000,
        }
    }
}

/// The last run of each sweep in this process, for `/v1/status` and `/readyz`.
#[derive(Debug, Default)]
pub struct Ticks {
    pub refresh: Mutex<Option<Tick>>,
    pub reprobe: Mutex<Option<Tick>>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Tick {
    pub at: Timestamp,
    pub enqueued: usize,
    pub error: Option<String>,
}

impl Ticks {
    pub fn last_refresh(&self) -> Option<Tick> {
        self.refresh
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    pub fn last_reprobe(&self) -> Option<Tick> {
        self.reprobe
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

/// The share of the time until the next refresh sweep its jobs are spread over; the rest is
/// slack for the last of them to finish before the next sweep looks.
const SPREAD_SHARE: f64 = 0.8;

/// Enqueues a refresh job for every callee whose card is due (not in backoff). Idempotent: a
/// callee with a refresh already queued or running is skipped by the queue's dedup key.
pub async fn refresh_sweep(
    services: &Services,
    settings: &ScheduleSettings,
) -> anyhow::Result<usize> {
    let now = services.now();
    let due = services
        .store
        .due_for_refresh(now, settings.sweep_limit)
        .await
        .context("listing due callees")?;
    let mut enqueued = 0;
    // The jobs are due one after another over most of the time until the next sweep, so that
    // a provider hosting thousands of the agents is not asked for all their cards at once.
    let window = settings
        .refresh
        .until_next(now)
        .map_or(Duration::ZERO, |d| d.mul_f64(SPREAD_SHARE));
    // One transaction per batch: a sweep over many callees is a handful of commits.
    for (b, batch) in due.chunks(1000).enumerate() {
        let jobs: Vec<Job> = batch
            .iter()
            .enumerate()
            .map(|(i, callee)| Job {
                run_after: politeness::spread(now, window, b * 1000 + i, due.len()),
                ..job::refresh_job(*callee, "schedule", now)
            })
            .collect();
        enqueued += usize::try_from(services.store.enqueue_many(&jobs).await?).unwrap_or(0);
    }
    if enqueued > 0 {
        services.committed(Queued::Jobs).await;
    }
    Ok(enqueued)
}

/// Claims the sweep `name` for this tick across replicas: `true` if this process should run it.
/// Every replica's scheduler fires at the same whole second of the cron expression (seconds
/// are its finest field), so a claim made since that second began means another replica has
/// it. Clocks apart by more than the time between a tick and its claim could let two replicas
/// both sweep: harmless, as every sweep only queues what is not queued already.
pub async fn claim(services: &Services, name: &str) -> Result<bool, ServiceError> {
    use chrono::SubsecRound;
    let now = services.now();
    Ok(services
        .store
        .claim_sweep(name, now, now.trunc_subsecs(0))
        .await?)
}

/// Callees read per page of the re-probe sweep.
const REPROBE_PAGE: u32 = 1_000;

/// Enqueues a probe for every live subject that is demoted, never probed, or whose newest probe
/// is older than `stale_after` (only a fresh passing probe re-promotes a demoted subject). The
/// probes are due one after another over most of the time until the next re-probe sweep, the
/// demoted first: a daily sweep over a million weekly-stale subjects queues some 140,000
/// probes, which should reach their agents' hosts over the day, not at 03:00.
pub async fn reprobe_sweep(
    services: &Services,
    settings: &ScheduleSettings,
) -> anyhow::Result<usize> {
    let now = services.now();
    let stale_before =
        now - chrono::Duration::from_std(settings.stale_after).unwrap_or(chrono::Duration::MAX);
    let store = &services.store;
    let (mut demoted, mut stale) = (Vec::new(), Vec::new());
    let mut after = None;
    // A page of callees costs three queries whatever its size: their ids, their subjects and
    // their newest probe runs' starts. Only due subjects cost more (one enqueue each).
    loop {
        let page = store.callee_ids(after, REPROBE_PAGE).await?;
        let (Some(&first), Some(&last)) = (page.first(), page.last()) else {
            break;
        };
        after = Some(last);
        let (subjects, starts) = tokio::try_join!(
            store.subjects_between(first, last),
            store.newest_probe_starts(first, last),
        )?;
        let starts: std::collections::HashMap<_, _> = starts
            .into_iter()
            .map(|(callee, version, at)| ((callee, version), at))
            .collect();
        for subject in subjects {
            if subject.state.withdrawn || subject.state.card_untrusted.is_some() {
                continue;
            }
            let key = (subject.callee_id, subject.protocol_version);
            if subject.state.gate.is_demoted() {
                demoted.push(key);
            } else if starts.get(&key).is_none_or(|at| *at < stale_before) {
                stale.push(key);
            }
        }
    }
    let window = settings
        .reprobe
        .until_next(now)
        .map_or(Duration::ZERO, |d| d.mul_f64(SPREAD_SHARE));
    let count = demoted.len() + stale.len();
    let due = demoted
        .iter()
        .map(|key| (key, "schedule: demoted"))
        .chain(stale.iter().map(|key| (key, "schedule: stale")));
    let mut enqueued = 0;
    for (index, (&(callee, version), reason)) in due.enumerate() {
        let run_after = politeness::spread(now, window, index, count);
        match probe::enqueue_probe_after(store, callee, version, reason, now, run_after).await {
            Ok(_) => enqueued += 1,
            Err(ServiceError::Conflict(_)) => {}
            Err(e) => {
                return Err(anyhow::Error::new(e)
                    .context(format!("queueing a probe of {callee} {version}")));
            }
        }
    }
    if enqueued > 0 {
        services.committed(Queued::Jobs).await;
    }
    Ok(enqueued)
}

/// Records a signed checkpoint of the ledger if it grew since the last one. With several
/// replicas each may try; the first recording of a size wins, the rest are no-ops.
pub async fn checkpoint_tick(services: &Services) -> Result<Option<u64>, ServiceError> {
    services
        .transparency
        .record(&services.store, services.now())
        .await
}

/// Starts the cron scheduler. Each tick's outcome is kept in `ticks` and logged.
pub async fn start(
    services: Services,
    settings: Arc<ScheduleSettings>,
    housekeeping: Arc<HousekeepingSettings>,
    ticks: Arc<Ticks>,
) -> anyhow::Result<JobScheduler> {
    let scheduler = JobScheduler::new()
        .await
        .context("creating the scheduler")?;
    for (name, schedule) in [
        ("refresh", settings.refresh.clone()),
        ("reprobe", settings.reprobe.clone()),
    ] {
        let Schedule::Cron(expression) = schedule else {
            tracing::info!(sweep = name, "the {name} sweep is off");
            continue;
        };
        let (services, settings, ticks) = (services.clone(), settings.clone(), ticks.clone());
        let housekeeping = housekeeping.clone();
        let job = CronJob::new_async(expression.as_str(), move |_id, _scheduler| {
            let (services, settings, ticks) = (services.clone(), settings.clone(), ticks.clone());
            let housekeeping = housekeeping.clone();
            let span = tracing::info_span!("sweep", sweep = name);
            Box::pin(
                async move {
                    // Every replica's scheduler fires on this tick; the first to claim it
                    // sweeps, the others leave it (their last tick stays as it was).
                    match claim(&services, name).await {
                        Ok(true) => {}
                        Ok(false) => {
                            tracing::info!(sweep = name, "another replica ran this {name} sweep");
                            return;
                        }
                        Err(e) => tracing::warn!(sweep = name, error = %e, "claiming the {name} sweep; running it anyway"),
                    }
                    let result = match name {
                        // Housekeeping runs on the refresh sweep's tick, before it, as it
                        // always has: a failing prune fails the tick.
                        "refresh" => match housekeeping::run(&services, &housekeeping).await {
                            Ok(()) => refresh_sweep(&services, &settings).await,
                            Err(e) => Err(e),
                        },
                        _ => reprobe_sweep(&services, &settings).await,
                    };
                    let tick = Tick {
                        at: services.now(),
                        enqueued: *result.as_ref().unwrap_or(&0),
                        error: result.as_ref().err().map(|e| format!("{e:#}")),
                    };
                    match &tick.error {
                        None => tracing::info!(
                            sweep = name,
                            enqueued = tick.enqueued,
                            "{name} sweep enqueued {} jobs",
                            tick.enqueued
                        ),
                        Some(e) => tracing::error!(sweep = name, error = %e, "{name} sweep failed"),
                    }
                    let slot = if name == "refresh" {
                        &ticks.refresh
                    } else {
                        &ticks.reprobe
                    };
                    *slot
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(tick);
                }
                .instrument(span),
            )
        })
        .with_context(|| format!("{name} schedule `{expression}` (6 fields, seconds first)"))?;
        scheduler.add(job).await.context("adding a scheduled job")?;
    }
    match &settings.checkpoint {
        Schedule::Off => tracing::info!("recording checkpoints on a schedule is off"),
        Schedule::Cron(expression) => add_checkpoints(&scheduler, services, expression).await?,
    }
    scheduler.start().await.context("starting the scheduler")?;
    Ok(scheduler)
}

/// Records a checkpoint of the ledger on `expression`'s schedule.
async fn add_checkpoints(
    scheduler: &JobScheduler,
    checkpoints: Services,
    expression: &str,
) -> anyhow::Result<()> {
    let job = CronJob::new_async(expression, move |_id, _scheduler| {
        let services = checkpoints.clone();
        Box::pin(
            async move {
                match checkpoint_tick(&services).await {
                    Ok(Some(size)) => tracing::debug!(tree_size = size, "recorded a checkpoint"),
                    Ok(None) => {}
                    // Debug: an internal error's cause is in its source chain, not its text.
                    Err(e) => tracing::error!(error = ?e, "recording a checkpoint failed"),
                }
            }
            .instrument(tracing::info_span!("sweep", sweep = "checkpoint")),
        )
    })
    .with_context(|| format!("checkpoint schedule `{expression}` (6 fields, seconds first)"))?;
    scheduler.add(job).await.context("adding a scheduled job")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_time_until_a_schedule_next_fires_bounds_a_sweeps_spread() {
        let at = chrono::DateTime::parse_from_rfc3339("2026-12-05T12:01:30Z")
            .unwrap()
            .with_timezone(&chrono::Utc);
        let every_five = Schedule::Cron("0 */5 * * * *".into());
        assert_eq!(every_five.until_next(at), Some(Duration::from_secs(210)));
        let every_second = Schedule::Cron("* * * * * *".into());
        assert_eq!(every_second.until_next(at), Some(Duration::from_secs(1)));
        assert_eq!(Schedule::Off.until_next(at), None);
    }

    #[test]
    fn a_schedule_is_six_cron_fields_or_off() {
        let parse = |s: &str| s.parse::<Schedule>();
        assert!(parse("0 */5 * * * *").is_ok());
        assert_eq!(parse(OFF), Ok(Schedule::Off));
        let five_fields = parse("*/5 * * * *").unwrap_err();
        assert!(
            five_fields.contains("6 fields, seconds first"),
            "{five_fields}"
        );
        assert!(parse("never").is_err());
        assert!(parse("OFF") == Ok(Schedule::Off) && parse(" off ") == Ok(Schedule::Off));
        assert!(parse("of").is_err());
        assert_eq!(parse("0 */5 * * * *").unwrap().to_string(), "0 */5 * * * *");
    }
}
