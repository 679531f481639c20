//! Executing a claimed probe job: take its run, plan what to probe, drive the cycle and record
//! the outcome in the ledger with the job's completion.

use url::Url;

use crate::domain::card::{CardInterface, NormalizedCard, SnapshotSource};
use crate::domain::gate::ProbeStart;
use crate::domain::ids::JobId;
use crate::domain::job::Job;
use crate::domain::probe::latency::Op;
use crate::domain::probe::track::Contribution;
use crate::domain::probe::{ProbeRun, ProbeScript, RunStatus, outcome};
use crate::domain::time::{self, Timestamp};
use crate::remote::a2a::Wire;
use crate::service::discovery::{self};
use crate::service::{Queued, Services};
use crate::storage::FinishedRun;

use super::credentials;
use super::interface::{CycleInput, CycleOutput, choose_interface, probe_interface};
use super::progress::LogProgress;
use super::push::StoreInbox;
use super::request::queued_run;
/// Executes a claimed probe job held by `owner`: take its run, decide what to probe, drive the
/// cycle, and record the outcome with the job's completion.
pub async fn execute(services: &Services, job: &Job, owner: &str) -> Result<(), anyhow::Error> {
    let Some(run) = take_run(services, job, owner).await? else {
        return Ok(());
    };
    let plan = match plan(services, &run).await? {
        Ok(plan) => plan,
        Err(why) => {
            let now = services.now();
            services.store.abort_probe_run(run.id, &why, now).await?;
            services
                .store
                .finish_job(job.id, owner, Some(&why), now)
                .await?;
            return Ok(());
        }
    };
    let started_at = services.now();
    let head_seq = services
        .store
        .start_probe_run(run.id, &plan.interface.url, plan.wire.as_str(), started_at)
        .await?;
    let start = ProbeStart {
        head_seq: Some(head_seq),
        at: started_at,
    };
    tracing::info!(probe_run.id = %run.id, callee.id = %run.callee_id, version = %run.protocol_version, "probe of {} {} started", run.callee_id, run.protocol_version);

    let credentials = match credentials::for_probe(services, run.callee_id).await {
        Ok(credentials) => credentials,
        Err(e) => {
            // A registry fault (the key file lost or replaced), not the callee's: no verdict.
            tracing::error!(probe_run.id = %run.id, error = ?e, "the callee's credentials cannot be opened");
            let why = "the callee's credentials cannot be opened; see the registry's log";
            let now = services.now();
            services.store.abort_probe_run(run.id, why, now).await?;
            services
                .store
                .finish_job(job.id, owner, Some(why), now)
                .await?;
            return Ok(());
        }
    };
    let (outbound, throttles) = services.outbound.watching_throttles();
    let output = probe_interface(CycleInput {
        outbound: &outbound,
        settings: &services.probe,
        card: &plan.card,
        version: run.protocol_version,
        binding: run.binding,
        script: &plan.script,
        push: plan.push,
        inbox: &StoreInbox(&services.store),
        progress: &LogProgress(run.id),
        credentials: &credentials,
    })
    .await;
    if let Some(until) = throttles.until() {
        return defer(services, &run, (job.id, owner), until).await;
    }
    let output = output.map_err(|e| anyhow::anyhow!(e))?;
    record(services, &run, &start, output, (job.id, owner)).await
}

/// The agent's host asked cardgate to wait (429 or 503 with `Retry-After`) during the run:
/// what the run saw is not the agent's lifecycle, so it is not judged. The run ends aborted
/// (it never promotes nor demotes), saying why, and the job runs again when the host said.
async fn defer(
    services: &Services,
    run: &ProbeRun,
    (job, owner): (JobId, &str),
    until: Timestamp,
) -> Result<(), anyhow::Error> {
    let now = services.now();
    let why = format!(
        "deferred: the agent's host asked cardgate to wait until {} (429 or 503 with \
         Retry-After); the run is not judged, and a fresh one starts then",
        time::format(until)
    );
    tracing::info!(probe_run.id = %run.id, callee.id = %run.callee_id, "probe of {} {} {why}", run.callee_id, run.protocol_version);
    services.store.abort_probe_run(run.id, &why, now).await?;
    services
        .store
        .requeue_job(job, owner, until.max(now), Some(&why), now)
        .await?;
    Ok(())
}

/// The queued run `job` executes. `None` when the run already finished (the job is closed).
/// A run a stopped worker left behind never promotes: it is aborted and a fresh one replaces it.
async fn take_run(
    services: &Services,
    job: &Job,
    owner: &str,
) -> Result<Option<ProbeRun>, anyhow::Error> {
    let run_id = job
        .probe_run_id
        .ok_or_else(|| anyhow::anyhow!("probe job {} has no probe run", job.id))?;
    let run = services.store.probe_run(run_id).await?;
    match run.status() {
        RunStatus::Queued => Ok(Some(run)),
        RunStatus::Finished => {
            services
                .store
                .finish_job(job.id, owner, None, services.now())
                .await?;
            Ok(None)
        }
        RunStatus::Running | RunStatus::Aborted => {
            let now = services.now();
            services
                .store
                .abort_probe_run(
                    run.id,
                    "cut short: its worker stopped; a fresh run replaces it",
                    now,
                )
                .await?;
            let fresh = ProbeRun {
                binding: run.binding,
                ..queued_run(
                    run.callee_id,
                    run.protocol_version,
                    &run.reason,
                    &run.requested_by,
                    now,
                )
            };
            services.store.insert_probe_run(&fresh).await?;
            services.store.set_job_probe_run(job.id, fresh.id).await?;
            Ok(Some(fresh))
        }
    }
}

/// What one run probes: the newest trusted card, the interface it offers for the run's
/// version, the callee's script and cardgate's webhook.
struct Plan {
    card: NormalizedCard,
    interface: CardInterface,
    wire: Wire,
    script: ProbeScript,
    push: Option<(Url, String)>,
}

/// The plan for `run`, or why there is nothing to probe.
async fn plan(services: &Services, run: &ProbeRun) -> Result<Result<Plan, String>, anyhow::Error> {
    let snapshot = services.store.latest_snapshot(run.callee_id).await?;
    let Some(card) = snapshot
        .filter(|s| s.assessment.trusted)
        .and_then(|s| s.assessment.card)
    else {
        return Ok(Err(
            "the callee's newest card is not trusted; nothing to probe".into(),
        ));
    };
    let (interface, wire) = match choose_interface(&card, run.protocol_version, run.binding) {
        Ok(chosen) => chosen,
        Err(why) => return Ok(Err(why)),
    };
    let script = services
        .store
        .callee(run.callee_id)
        .await?
        .probe_script
        .unwrap_or_default();
    let push = services.probe.public_url.as_ref().and_then(|base| {
        base.join(&format!("v1/hooks/push/{}", run.push_token))
            .ok()
            .map(|url| (url, run.push_token.clone()))
    });
    Ok(Ok(Plan {
        card,
        interface,
        wire,
        script,
        push,
    }))
}

/// Records a finished cycle: the run's evidence, the ledger events its judgement causes for
/// the subject as it stands now, and the job's completion, in one transaction.
async fn record(
    services: &Services,
    run: &ProbeRun,
    start: &ProbeStart,
    output: CycleOutput,
    job: (JobId, &str),
) -> Result<(), anyhow::Error> {
    let judgement = output.judgement;
    // The extended card is a snapshot of its own, tied to this run.
    let extended_card = output.extended_card.map(|fetched| {
        let mut snapshot = discovery::snapshot(
            run.callee_id,
            services.now(),
            &fetched.url,
            &fetched.bytes,
            None,
            None,
            fetched.assessment,
        );
        snapshot.source = SnapshotSource::Extended {
            probe_run_id: run.id,
        };
        snapshot
    });
    let contribution = Contribution::of(&judgement, &output.observations);
    for op in Op::ALL {
        let metrics = services.outbound.metrics();
        metrics.probe_latency(op.as_str(), contribution.samples.get(op));
    }
    let finished = FinishedRun {
        judgement: &judgement,
        observations: &output.observations,
        contribution: &contribution,
        transcript: &output.transcript,
        actor: "probe",
        extended_card: extended_card.as_ref(),
    };
    let appended = services
        .store
        .finish_probe_run(
            run.id,
            Some(job),
            finished,
            |state| outcome::ledger_events(state, run.id, start, &judgement),
            || services.now(),
        )
        .await?;
    // Attested before the read model catches up; the sender is woken as soon as it may send
    // (a promotion's or demotion's delivery waits for its attestation in the claim).
    crate::service::attestations::record(services, &appended).await;
    services.committed(Queued::Nothing).await;
    let kinds: Vec<&str> = appended.iter().map(|(e, _)| e.kind.as_str()).collect();
    tracing::info!(
        probe_run.id = %run.id, passed = judgement.verdict.passed, events = ?kinds,
        "probe of {} {} finished: {}", run.callee_id, run.protocol_version,
        if judgement.verdict.passed { "passed" } else { "not passed" }
    );
    Ok(())
}
