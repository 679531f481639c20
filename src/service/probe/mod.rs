//! Probing subjects: requesting a probe (queued as a job), executing it (choose the interface,
//! run the cycle, judge, record the outcome in the ledger), and receiving push deliveries.

pub mod cycle;

use std::collections::BTreeSet;
use std::time::Duration;

use rand::RngCore;
use serde_json::Value;
use url::Url;

use super::ServiceError;
use super::callees::not_found;
use crate::domain::capability::Capability;
use crate::domain::card::{CardInterface, NormalizedCard};
use crate::domain::decision::ProbeFacts;
use crate::domain::gate::ProbeStart;
use crate::domain::ids::{CalleeId, JobId, ProbeRunId};
use crate::domain::job::{self, Job, JobKind, JobStatus};
use crate::domain::probe::{
    Judgement, Observations, ProbeRun, ProbeScript, PushReceipt, RunStatus, checks, outcome,
};
use crate::domain::time::Timestamp;
use crate::domain::version::ProtocolVersion;
use crate::remote::Outbound;
use crate::remote::a2a::{A2aClient, CallLimits, Wire};
use crate::storage::{FinishedRun, PushDelivery, Store, StoreError};

use cycle::{Cycle, Target};

/// How probes run.
#[derive(Debug, Clone)]
pub struct ProbeSettings {
    /// Where agents can reach cardgate (`CARDGATE_PUBLIC_URL`); the push webhook is
    /// `<public_url>/v1/hooks/push/<token>`. Unset: the push probe cannot run.
    pub public_url: Option<Url>,
    /// Deadline of a whole cycle.
    pub deadline: Duration,
    /// How long to wait for the terminal push delivery.
    pub push_wait: Duration,
    /// Webhook registration attempts, and the first backoff (doubled after each failure).
    pub push_attempts: u32,
    pub push_backoff: Duration,
    pub poll_interval: Duration,
    /// Deliveries one run's webhook accepts (a flood with a valid token stops there).
    pub push_max_deliveries: usize,
    pub limits: CallLimits,
}

impl Default for ProbeSettings {
    fn default() -> Self {
        Self {
            public_url: None,
            deadline: Duration::from_secs(60),
            push_wait: Duration::from_secs(10),
            push_attempts: 3,
            push_backoff: Duration::from_millis(500),
            poll_interval: Duration::from_millis(100),
            push_max_deliveries: 64,
            limits: CallLimits::default(),
        }
    }
}

/// Where a running probe reports each step (the CLI prints them; the service logs them).
pub trait Progress: Send + Sync {
    fn step(&self, message: &str);
}

/// Logs each step at debug level.
pub struct LogProgress(pub ProbeRunId);

impl Progress for LogProgress {
    fn step(&self, message: &str) {
        tracing::debug!(probe_run.id = %self.0, "{}", message.trim());
    }
}

/// A push delivery as the cycle sees it.
#[derive(Debug, Clone)]
pub struct InboxDelivery {
    /// It carried cardgate's token (`X-A2A-Notification-Token`, or `Authorization: Bearer`).
    pub token_matches: bool,
    pub body: Vec<u8>,
}

/// Where the cycle reads push deliveries for its token.
#[async_trait::async_trait]
pub trait PushInbox: Send + Sync {
    /// The deliveries after the first `skip`, oldest first.
    async fn deliveries(&self, token: &str, skip: usize) -> Vec<InboxDelivery>;
}

/// Deliveries stored by any replica's webhook receiver.
pub struct StoreInbox<'a>(pub &'a Store);

#[async_trait::async_trait]
impl PushInbox for StoreInbox<'_> {
    async fn deliveries(&self, token: &str, skip: usize) -> Vec<InboxDelivery> {
        match self.0.push_deliveries(token, skip).await {
            Ok(list) => list.iter().map(|d| to_inbox(d, token)).collect(),
            Err(e) => {
                tracing::warn!(error = ?e, "reading push deliveries failed");
                Vec::new()
            }
        }
    }
}

pub fn to_inbox(delivery: &PushDelivery, token: &str) -> InboxDelivery {
    let header = |name: &str| delivery.headers.get(name).and_then(Value::as_str);
    let token_matches = header("x-a2a-notification-token") == Some(token)
        || header("authorization").is_some_and(|a| a.strip_prefix("Bearer ") == Some(token));
    InboxDelivery {
        token_matches,
        body: delivery.body.clone(),
    }
}

/// The headers of a delivery worth keeping as evidence.
pub fn delivery_headers(headers: &axum::http::HeaderMap) -> Value {
    let mut kept = serde_json::Map::new();
    for name in [
        "content-type",
        "x-a2a-notification-token",
        "authorization",
        "user-agent",
        "a2a-version",
    ] {
        if let Some(v) = headers.get(name).and_then(|v| v.to_str().ok()) {
            kept.insert(name.into(), v.into());
        }
    }
    Value::Object(kept)
}

/// The outcome of a cycle against one interface.
pub struct CycleOutput {
    pub interface: CardInterface,
    pub wire: Wire,
    pub observations: Observations,
    pub judgement: Judgement,
    pub transcript: Value,
}

/// The interface to probe for `version`: the first one whose binding cardgate speaks
/// (JSON-RPC preferred, as the SDKs list it first).
pub fn choose_interface(
    card: &NormalizedCard,
    version: ProtocolVersion,
) -> Result<(CardInterface, Wire), String> {
    let offered: Vec<&CardInterface> = card
        .interfaces
        .iter()
        .filter(|i| i.version == version)
        .collect();
    if offered.is_empty() {
        return Err(format!("the card offers no interface for {version}"));
    }
    let speakable = |binding: &str| {
        offered
            .iter()
            .find(|i| i.binding.eq_ignore_ascii_case(binding))
    };
    for binding in ["JSONRPC", "HTTP+JSON"] {
        if let Some(i) = speakable(binding) {
            if let Some(wire) = Wire::for_interface(version, &i.binding) {
                return Ok(((*i).clone(), wire));
            }
        }
    }
    let bindings: Vec<&str> = offered.iter().map(|i| i.binding.as_str()).collect();
    Err(format!(
        "cardgate cannot speak any {version} interface on the card (bindings: {})",
        bindings.join(", ")
    ))
}

/// Runs one cycle: the part shared by the service and `cardgate probe`.
#[allow(clippy::too_many_arguments)]
pub async fn probe_interface(
    outbound: &Outbound,
    settings: &ProbeSettings,
    card: &NormalizedCard,
    version: ProtocolVersion,
    script: &ProbeScript,
    push: Option<(Url, String)>,
    inbox: &dyn PushInbox,
    progress: &dyn Progress,
) -> Result<CycleOutput, String> {
    let (interface, wire) = choose_interface(card, version)?;
    let url =
        Url::parse(&interface.url).map_err(|e| format!("interface URL {}: {e}", interface.url))?;
    progress.step(&format!(
        "probing {version} at {} ({wire:?})",
        interface.url
    ));
    let advertised: BTreeSet<Capability> = card.advertised_for(version);
    let mut client = A2aClient::new(outbound.clone(), url, wire, version, settings.limits);
    let target = Target {
        advertised: &advertised,
        script,
        push,
    };
    let mut observations = Cycle::new(&mut client, settings, progress)
        .run(&target, inbox)
        .await;
    observations.transcript_omitted = client.omitted().map(|o| {
        format!(
            "{} exchanges, {} bodies and {} stream events ({} bytes) were left out of the transcript",
            o.exchanges, o.bodies, o.frames, o.bytes
        )
    });
    let judgement = checks::evaluate(&observations, version, &advertised);
    let transcript = serde_json::to_value(client.transcript()).unwrap_or(Value::Null);
    Ok(CycleOutput {
        interface,
        wire,
        observations,
        judgement,
        transcript,
    })
}

/// A fresh random token for a run's webhook.
pub fn new_token() -> String {
    let mut bytes = [0u8; 24];
    rand::rng().fill_bytes(&mut bytes);
    hex::encode(bytes)
}

/// Queues a probe of a subject. `version`: required when the callee offers several.
pub async fn request(
    store: &Store,
    callee_id: CalleeId,
    version: Option<ProtocolVersion>,
    reason: &str,
    actor: &str,
    now: Timestamp,
) -> Result<ProbeRun, ServiceError> {
    store
        .callee(callee_id)
        .await
        .map_err(|e| not_found(e, callee_id))?;
    let subjects = store.subjects(callee_id).await?;
    let live: Vec<_> = subjects.iter().filter(|s| !s.state.withdrawn).collect();
    let subject = match version {
        Some(v) => subjects
            .iter()
            .find(|s| s.protocol_version == v)
            .ok_or_else(|| {
                let offered: Vec<String> = live
                    .iter()
                    .map(|s| s.protocol_version.to_string())
                    .collect();
                ServiceError::NotFound(format!(
                    "the callee has no subject {v} (it offers {})",
                    offered.join(", ")
                ))
            })?,
        None => match live.as_slice() {
            [only] => only,
            _ => {
                let offered: Vec<String> = live
                    .iter()
                    .map(|s| s.protocol_version.to_string())
                    .collect();
                return Err(ServiceError::Invalid(format!(
                    "protocol_version is required: the callee offers {}",
                    offered.join(", ")
                )));
            }
        },
    };
    if subject.state.withdrawn {
        return Err(ServiceError::Conflict(format!(
            "the card no longer offers {}",
            subject.protocol_version
        )));
    }
    if let Some(reason) = &subject.state.card_untrusted {
        return Err(ServiceError::Conflict(format!(
            "the callee's card is untrusted ({reason}); refresh it first"
        )));
    }
    enqueue_probe(
        store,
        callee_id,
        subject.protocol_version,
        reason,
        actor,
        now,
    )
    .await
}

/// Creates the queued run and its job; `Conflict` naming the active run if there is one.
pub async fn enqueue_probe(
    store: &Store,
    callee_id: CalleeId,
    version: ProtocolVersion,
    reason: &str,
    actor: &str,
    now: Timestamp,
) -> Result<ProbeRun, ServiceError> {
    let (run, job) = probe_request(callee_id, version, reason, actor, now);
    match store.request_probe(&run, &job).await {
        Ok(()) => Ok(run),
        Err(StoreError::Conflict(_)) => {
            let active = store
                .active_job(&job.dedup_key)
                .await?
                .and_then(|j| j.probe_run_id);
            Err(ServiceError::Conflict(match active {
                Some(id) => format!("probe run {id} is already queued or running for {version}"),
                None => format!("a probe is already queued or running for {version}"),
            }))
        }
        Err(e) => Err(e.into()),
    }
}

/// A queued probe run of the subject and the job that will carry it out.
pub fn probe_request(
    callee_id: CalleeId,
    version: ProtocolVersion,
    reason: &str,
    actor: &str,
    now: Timestamp,
) -> (ProbeRun, Job) {
    let run = queued_run(callee_id, version, reason, actor, now);
    let job = Job {
        id: JobId::new(),
        kind: JobKind::Probe,
        callee_id,
        protocol_version: Some(version),
        reason: reason.to_string(),
        dedup_key: job::probe_key(callee_id, version),
        status: JobStatus::Queued,
        attempts: 0,
        run_after: now,
        lease_owner: None,
        lease_until: None,
        last_error: None,
        probe_run_id: Some(run.id),
        created_at: now,
        updated_at: now,
    };
    (run, job)
}

fn queued_run(
    callee_id: CalleeId,
    version: ProtocolVersion,
    reason: &str,
    actor: &str,
    now: Timestamp,
) -> ProbeRun {
    ProbeRun {
        id: ProbeRunId::new(),
        callee_id,
        protocol_version: version,
        status: RunStatus::Queued,
        reason: reason.to_string(),
        requested_by: actor.to_string(),
        created_at: now,
        started_at: None,
        finished_at: None,
        interface_url: None,
        wire: None,
        push_token: new_token(),
        passed: None,
        judgement: None,
        observations: None,
        transcript: None,
        error: None,
        ledger_seqs: Vec::new(),
        start_seq: None,
    }
}

/// Everything executing a probe job needs.
pub struct ProbeContext<'a> {
    pub store: &'a Store,
    pub outbound: &'a Outbound,
    pub settings: &'a ProbeSettings,
    pub now: &'a (dyn Fn() -> Timestamp + Send + Sync),
}

/// Executes a claimed probe job held by `owner`.
pub async fn execute(ctx: &ProbeContext<'_>, job: &Job, owner: &str) -> Result<(), anyhow::Error> {
    let run_id = job
        .probe_run_id
        .ok_or_else(|| anyhow::anyhow!("probe job {} has no probe run", job.id))?;
    let mut run = ctx.store.probe_run(run_id).await?;
    match run.status {
        RunStatus::Finished => {
            ctx.store
                .finish_job(job.id, owner, None, (ctx.now)())
                .await?;
            return Ok(());
        }
        RunStatus::Queued => {}
        // Its worker died, or shutdown cut it short: that run never promotes; start afresh.
        RunStatus::Running | RunStatus::Aborted => {
            ctx.store
                .abort_probe_run(
                    run.id,
                    "cut short: its worker stopped; a fresh run replaces it",
                    (ctx.now)(),
                )
                .await?;
            let fresh = queued_run(
                run.callee_id,
                run.protocol_version,
                &run.reason,
                &run.requested_by,
                (ctx.now)(),
            );
            ctx.store.insert_probe_run(&fresh).await?;
            ctx.store.set_job_probe_run(job.id, fresh.id).await?;
            run = fresh;
        }
    }
    let snapshot = ctx.store.latest_snapshot(run.callee_id).await?;
    let Some(card) = snapshot
        .as_ref()
        .filter(|s| s.assessment.trusted)
        .and_then(|s| s.assessment.card.clone())
    else {
        let why = "the callee's newest card is not trusted; nothing to probe";
        ctx.store.abort_probe_run(run.id, why, (ctx.now)()).await?;
        ctx.store
            .finish_job(job.id, owner, Some(why), (ctx.now)())
            .await?;
        return Ok(());
    };
    let script = ctx
        .store
        .callee(run.callee_id)
        .await?
        .probe_script
        .unwrap_or_default();
    let push = ctx.settings.public_url.as_ref().and_then(|base| {
        base.join(&format!("v1/hooks/push/{}", run.push_token))
            .ok()
            .map(|url| (url, run.push_token.clone()))
    });
    let (interface, wire) = match choose_interface(&card, run.protocol_version) {
        Ok(chosen) => chosen,
        Err(why) => {
            ctx.store.abort_probe_run(run.id, &why, (ctx.now)()).await?;
            ctx.store
                .finish_job(job.id, owner, Some(&why), (ctx.now)())
                .await?;
            return Ok(());
        }
    };
    let started_at = (ctx.now)();
    let head_seq = ctx
        .store
        .start_probe_run(run.id, &interface.url, wire.as_str(), started_at)
        .await?;
    let start = ProbeStart {
        head_seq: Some(head_seq),
        at: started_at,
    };
    tracing::info!(probe_run.id = %run.id, callee.id = %run.callee_id, version = %run.protocol_version, "probe of {} {} started", run.callee_id, run.protocol_version);

    let inbox = StoreInbox(ctx.store);
    let output = probe_interface(
        ctx.outbound,
        ctx.settings,
        &card,
        run.protocol_version,
        &script,
        push,
        &inbox,
        &LogProgress(run.id),
    )
    .await
    .map_err(|e| anyhow::anyhow!(e))?;

    let judgement = output.judgement;
    let finished = FinishedRun {
        passed: judgement.verdict.passed,
        judgement: &judgement,
        observations: &output.observations,
        transcript: &output.transcript,
        actor: "probe",
    };
    let appended = ctx
        .store
        .finish_probe_run(
            run.id,
            Some((job.id, owner)),
            finished,
            |state| outcome::ledger_events(state, run.id, &start, &judgement),
            (ctx.now)(),
        )
        .await?;
    let kinds: Vec<&str> = appended.iter().map(|(e, _)| e.kind.as_str()).collect();
    tracing::info!(
        probe_run.id = %run.id, passed = judgement.verdict.passed, events = ?kinds,
        "probe of {} {} finished: {}", run.callee_id, run.protocol_version,
        if judgement.verdict.passed { "passed" } else { "not passed" }
    );
    Ok(())
}

/// Stores a webhook delivery for the running probe that owns `token`.
pub async fn receive_push(
    store: &Store,
    settings: &ProbeSettings,
    token: &str,
    headers: Value,
    body: Vec<u8>,
    now: Timestamp,
) -> Result<PushReceipt, ServiceError> {
    if body.len() > settings.limits.max_body {
        return Err(ServiceError::TooLarge(format!(
            "a push delivery may carry at most {} bytes",
            settings.limits.max_body
        )));
    }
    let delivery = PushDelivery {
        received_at: now,
        headers,
        body,
    };
    Ok(store
        .record_push_delivery(token, &delivery, settings.push_max_deliveries)
        .await?)
}

/// What decisions read from a finished run.
pub fn facts(run: &ProbeRun) -> Option<ProbeFacts> {
    let judgement = run.judgement.as_ref()?;
    Some(ProbeFacts {
        probe_run_id: run.id,
        start: ProbeStart {
            head_seq: run.start_seq,
            at: run.started_at?,
        },
        lifecycle: judgement.verdict.lifecycle.clone(),
        untimestamped: judgement.verdict.untimestamped.clone(),
        capabilities: judgement.capabilities.clone(),
    })
}

pub async fn get(store: &Store, id: ProbeRunId) -> Result<ProbeRun, ServiceError> {
    store.probe_run(id).await.map_err(|e| match e {
        StoreError::NotFound => ServiceError::NotFound(format!("no probe run with id {id}")),
        other => other.into(),
    })
}
