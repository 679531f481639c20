//! Probing subjects: requesting a probe (queued as a job), executing it (choose the interface,
//! run the cycle, judge, record the outcome in the ledger), and receiving push deliveries.

pub mod cycle;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use rand::RngCore;
use serde_json::Value;
use sha2::Digest;
use url::Url;

use super::discovery::{self, Discovery};
use super::require_callee;
use super::{Missing, Queued, ServiceError, Services};
use crate::domain::binding::Binding;
use crate::domain::capability::Capability;
use crate::domain::card::{
    Assessment, CardInterface, CardSecurity, NormalizedCard, SnapshotSource,
};
use crate::domain::credential::{self, AuthPlan, Credential};
use crate::domain::gate::ProbeStart;
use crate::domain::ids::{CalleeId, JobId, ProbeRunId};
use crate::domain::job::{self, Job};
use crate::domain::probe::{
    AccessBlock, ExtendedCard, Judgement, Observations, ProbeRun, ProbeScript, PushDelivery,
    PushReceipt, RunState, RunStatus, checks, outcome,
};
use crate::domain::time::{self, Timestamp};
use crate::domain::version::ProtocolVersion;
use crate::remote::Outbound;
use crate::remote::a2a::{A2aClient, Answer, CallLimits, Exchange, Wire};
use crate::remote::auth::{Authenticator, Presentation, TokenCache, identity_refused};
use crate::storage::{FinishedRun, Store, StoreError};

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
    /// How long a resubscription to the ended lifecycle task is read: a conformant agent
    /// refuses at once, or sends the final task and closes.
    pub resubscribe_wait: Duration,
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
            resubscribe_wait: Duration::from_secs(3),
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
    /// The authenticated extended card as fetched, and how it was judged.
    pub extended_card: Option<FetchedCard>,
}

/// A card fetched during a probe: its bytes (the JSON answered, or the proto3 JSON of the
/// gRPC message) and their assessment.
pub struct FetchedCard {
    pub url: Url,
    pub bytes: Vec<u8>,
    pub assessment: Assessment,
}

/// The interface to probe for `version`: the one over `wanted` when asked, else the first
/// in [`Binding::PREFERRED`] order that cardgate speaks.
pub fn choose_interface(
    card: &NormalizedCard,
    version: ProtocolVersion,
    wanted: Option<Binding>,
) -> Result<(CardInterface, Wire), String> {
    let offered: Vec<&CardInterface> = card
        .interfaces
        .iter()
        .filter(|i| i.version == version)
        .collect();
    if offered.is_empty() {
        return Err(format!("the card offers no interface for {version}"));
    }
    let bindings = || {
        offered
            .iter()
            .map(|i| i.binding.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let order: &[Binding] = match &wanted {
        Some(b) => std::slice::from_ref(b),
        None => &Binding::PREFERRED,
    };
    for binding in order {
        if let Some(i) = offered.iter().find(|i| binding.names(&i.binding)) {
            match Wire::for_interface(version, *binding) {
                Some(wire) => return Ok(((*i).clone(), wire)),
                None if wanted.is_some() => {
                    return Err(format!("cardgate does not speak {binding} for {version}"));
                }
                None => {}
            }
        }
    }
    Err(match wanted {
        Some(b) => format!(
            "the card offers no {b} interface for {version} (bindings: {})",
            bindings()
        ),
        None => format!(
            "cardgate cannot speak any {version} interface on the card (bindings: {})",
            bindings()
        ),
    })
}

/// The credentials a cycle may present (scheme name → credential), where the tokens it
/// fetches are cached, and how the authenticated extended card they unlock is verified.
#[derive(Clone, Default)]
pub struct Credentials {
    pub configured: BTreeMap<String, Credential>,
    pub tokens: TokenCache,
    /// Names the callee in the token cache.
    pub scope: String,
    /// Verifies an extended card as the public one was; `None`: none is fetched.
    pub cards: Option<CardCheck>,
}

/// How a card fetched during a probe is judged: as discovery judges the public card, with the
/// callee's pinned keys if it has any.
#[derive(Clone)]
pub struct CardCheck {
    pub discovery: Discovery,
    pub trusted_keys: Option<Value>,
}

/// Fetches the authenticated extended card with the credentials, and judges it like the
/// public card: what the cycle makes of it, the card to judge capabilities by when it is
/// trusted, and the card as fetched, to keep.
async fn extended_card(
    client: &mut A2aClient,
    check: &CardCheck,
    url: &Url,
) -> (ExtendedCard, Option<NormalizedCard>, Option<FetchedCard>) {
    let refused = |reason: String| (ExtendedCard::Refused { reason }, None, None);
    let value = match client.extended_card("extended card").await.1 {
        Answer::Result(value) => value,
        Answer::Error { code, message } => {
            return refused(format!(
                "GetExtendedAgentCard answered error {code}: {message}"
            ));
        }
        Answer::Broken(why) => return refused(format!("GetExtendedAgentCard: {why}")),
    };
    let bytes = serde_json::to_vec(&value).unwrap_or_default();
    let assessment = check
        .discovery
        .assess(url, &bytes, check.trusted_keys.as_ref())
        .await;
    let outcome = match assessment.card.clone().filter(|_| assessment.trusted) {
        Some(card) => (
            ExtendedCard::Used {
                sha256: hex::encode(sha2::Sha256::digest(&bytes)),
                signature: assessment.signature.status().to_string(),
                card: value,
            },
            Some(card),
        ),
        None => (
            ExtendedCard::Refused {
                reason: format!(
                    "the extended card is not trusted: {}",
                    assessment.problem.clone().unwrap_or_default()
                ),
            },
            None,
        ),
    };
    let fetched = FetchedCard {
        url: url.clone(),
        bytes,
        assessment,
    };
    (outcome.0, outcome.1, Some(fetched))
}

impl Credentials {
    /// How the cycle authenticates to a card with `security`: nothing, an authenticator (and
    /// the client that carries its TLS identity), or why it cannot reach the callee at all.
    fn present(
        &self,
        outbound: &Outbound,
        security: &CardSecurity,
    ) -> Result<Option<(Arc<Authenticator>, Outbound, String)>, AccessBlock> {
        let kinds = self
            .configured
            .iter()
            .map(|(name, c)| (name.clone(), c.kind()))
            .collect();
        let plan = credential::plan(security, &kinds);
        let schemes = match &plan {
            AuthPlan::Anonymous => return Ok(None),
            AuthPlan::Missing(reason) => {
                return Err(AccessBlock::Missing {
                    reason: reason.clone(),
                });
            }
            AuthPlan::Present { schemes, .. } => schemes,
        };
        let unusable = |reason: String| AccessBlock::Missing { reason };
        let presentations = schemes
            .iter()
            .map(|scheme| Presentation {
                scheme: scheme.clone(),
                credential: self.configured[&scheme.name].clone(),
            })
            .collect();
        let auth = Authenticator::new(&self.scope, presentations, self.tokens.clone())
            .map_err(unusable)?;
        let outbound = match auth.identity() {
            Some(identity) => outbound.with_identity(identity.clone()).map_err(unusable)?,
            None => outbound.clone(),
        };
        let presented = plan.describe(security).unwrap_or_default();
        Ok(Some((Arc::new(auth), outbound, presented)))
    }
}

/// Reports each step with the presented secrets redacted.
struct Redacting<'a> {
    inner: &'a dyn Progress,
    auth: &'a Authenticator,
}

impl Progress for Redacting<'_> {
    fn step(&self, message: &str) {
        self.inner.step(&self.auth.redact(message));
    }
}

/// `value`, serialized, with every secret `auth` presented replaced; what a cycle records
/// goes through this, whichever field a secret turned up in (an error naming a URL with an
/// API key in its query, an agent echoing a header).
fn redacted<T: serde::Serialize + serde::de::DeserializeOwned>(
    value: T,
    auth: &Authenticator,
) -> T {
    let Ok(text) = serde_json::to_string(&value) else {
        return value;
    };
    let clean = auth.redact(&text);
    if clean == text {
        return value;
    }
    serde_json::from_str(&clean).unwrap_or(value)
}

/// Why a cycle that presented a TLS client certificate most likely had it refused: no call got
/// an answer, and the connections ended right after the handshake. Under TLS 1.3 a server
/// checks the certificate after the client has finished its handshake, and its alert often
/// loses the race with the connection's reset; either ending counts. (An agent that is down
/// refuses the connection instead, and stays a lifecycle failure.)
fn certificate_refused(exchanges: &[Exchange]) -> Option<String> {
    if exchanges.is_empty()
        || exchanges
            .iter()
            .any(|e| e.status.is_some() || e.grpc.is_some())
    {
        return None;
    }
    let ended = |e: &&Exchange| {
        e.error.as_deref().is_some_and(|error| {
            identity_refused(error)
                || ["connection closed", "connection reset", "broken pipe"]
                    .iter()
                    .any(|how| error.contains(how))
        })
    };
    exchanges.iter().find(ended).map(|e| {
        format!(
            "the agent closed every connection that presented the client certificate before answering ({}): it did not accept the certificate",
            e.error.as_deref().unwrap_or_default()
        )
    })
}

/// Runs one cycle: the part shared by the service and `cardgate probe`.
#[allow(clippy::too_many_arguments)]
pub async fn probe_interface(
    outbound: &Outbound,
    settings: &ProbeSettings,
    card: &NormalizedCard,
    version: ProtocolVersion,
    binding: Option<Binding>,
    script: &ProbeScript,
    push: Option<(Url, String)>,
    inbox: &dyn PushInbox,
    progress: &dyn Progress,
    credentials: &Credentials,
) -> Result<CycleOutput, String> {
    let (interface, wire) = choose_interface(card, version, binding)?;
    let url = interface
        .location()
        .map_err(|e| format!("interface URL {}: {e}", interface.url))?;
    let advertised: BTreeSet<Capability> = card.advertised_for(version);
    let presented = match credentials.present(outbound, &card.security) {
        Ok(presented) => presented,
        Err(block) => {
            // Nothing is sent: a call without the credentials the card requires proves
            // nothing about the lifecycle (docs/trust-model.md, "Gate states").
            progress.step(&format!(
                "not probing {version} at {}: {}",
                interface.url,
                block.reason()
            ));
            let mut observations = Observations::default();
            observations.access.blocked = Some(block);
            let judgement = checks::evaluate(&observations, version, &advertised);
            return Ok(CycleOutput {
                interface,
                wire,
                observations,
                judgement,
                transcript: Value::Array(Vec::new()),
                extended_card: None,
            });
        }
    };
    progress.step(&format!(
        "probing {version} at {} over {} ({}){}",
        interface.url,
        interface.binding,
        wire.as_str(),
        presented
            .as_ref()
            .map(|(_, _, how)| format!(": {how}"))
            .unwrap_or_default()
    ));
    let (mut client, auth, presented) = match presented {
        None => (
            A2aClient::new(
                outbound.clone(),
                url.clone(),
                wire,
                version,
                settings.limits,
            ),
            None,
            None,
        ),
        Some((auth, outbound, how)) => (
            A2aClient::new(outbound, url.clone(), wire, version, settings.limits)
                .with_auth(auth.clone()),
            Some(auth),
            Some(how),
        ),
    };
    // The extended card, for authenticated callers only: fetched when credentials are
    // presented, and judged by in place of the public card's capabilities.
    let mut advertised = advertised;
    let mut extended = None;
    let mut fetched_card = None;
    if card.capabilities.extended_agent_card {
        extended = Some(match (&auth, &credentials.cards) {
            (Some(_), Some(check)) => {
                let (outcome, card, fetched) = extended_card(&mut client, check, &url).await;
                if let Some(card) = card {
                    advertised = card.advertised_for(version);
                }
                fetched_card = fetched;
                outcome
            }
            _ => ExtendedCard::Skipped {
                reason: "the card offers an extended card to authenticated callers, and no credentials are presented".into(),
            },
        });
    }
    let target = Target {
        advertised: &advertised,
        script,
        push,
    };
    let redacting;
    let progress: &dyn Progress = match &auth {
        Some(auth) => {
            redacting = Redacting {
                inner: progress,
                auth,
            };
            &redacting
        }
        None => progress,
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
    observations.access.presented = presented;
    observations.extended_card = extended;
    let refused = client.refused().map(str::to_string).or_else(|| {
        auth.as_ref()
            .filter(|a| a.identity().is_some())
            .and_then(|_| certificate_refused(client.transcript()))
    });
    if let Some(reason) = refused {
        progress.step(&format!("  ! credentials refused: {reason}"));
        observations.access.blocked = Some(AccessBlock::Refused { reason });
    }
    let mut transcript = serde_json::to_value(client.transcript()).unwrap_or(Value::Null);
    if let Some(auth) = &auth {
        observations = redacted(observations, auth);
        transcript = redacted(transcript, auth);
    }
    let judgement = checks::evaluate(&observations, version, &advertised);
    Ok(CycleOutput {
        interface,
        wire,
        observations,
        judgement,
        transcript,
        extended_card: fetched_card,
    })
}

/// A fresh random token for a run's webhook.
pub fn new_token() -> String {
    let mut bytes = [0u8; 24];
    rand::rng().fill_bytes(&mut bytes);
    hex::encode(bytes)
}

/// Queues a probe of a subject. `version`: required when the callee offers several;
/// `binding`: probe the interface over that binding instead of the preferred one.
#[allow(clippy::too_many_arguments)]
pub async fn request(
    services: &Services,
    callee_id: CalleeId,
    version: Option<ProtocolVersion>,
    binding: Option<Binding>,
    reason: &str,
    actor: &str,
    now: Timestamp,
) -> Result<ProbeRun, ServiceError> {
    let store = &services.store;
    require_callee(store, callee_id).await?;
    let subjects = store.subjects(callee_id).await?;
    let live: Vec<_> = subjects.iter().filter(|s| !s.state.withdrawn).collect();
    let subject = match version {
        Some(v) => subjects
            .iter()
            .find(|s| s.protocol_version == v)
            .ok_or_else(|| {
                ServiceError::NotFound(Missing::Subject {
                    callee: callee_id,
                    version: v,
                    offered: live.iter().map(|s| s.protocol_version).collect(),
                })
            })?,
        // Unnamed: the newest version the card offers, the one a new caller would speak.
        None => live
            .iter()
            .max_by_key(|s| s.protocol_version)
            .copied()
            .ok_or_else(|| {
                ServiceError::Conflict("the card offers no protocol version to probe".into())
            })?,
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
    let version = subject.protocol_version;
    if let Some(wanted) = binding {
        // Refused now rather than queued to fail: the newest card must offer it.
        let card = store
            .latest_snapshot(callee_id)
            .await?
            .filter(|s| s.assessment.trusted)
            .and_then(|s| s.assessment.card);
        if let Some(card) = card {
            choose_interface(&card, version, Some(wanted)).map_err(ServiceError::Conflict)?;
        }
    }
    let (mut run, job) = probe_request(callee_id, version, reason, actor, now);
    run.binding = binding;
    let run = enqueue(store, run, job).await?;
    services.committed(Queued::Jobs).await;
    Ok(run)
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
    enqueue(store, run, job).await
}

/// As [`enqueue_probe`], with the job due at `run_after` rather than now (a sweep spreads its
/// probes over its interval).
pub async fn enqueue_probe_after(
    store: &Store,
    callee_id: CalleeId,
    version: ProtocolVersion,
    reason: &str,
    now: Timestamp,
    run_after: Timestamp,
) -> Result<ProbeRun, ServiceError> {
    let (run, mut job) = probe_request(callee_id, version, reason, "scheduler", now);
    job.run_after = run_after;
    enqueue(store, run, job).await
}

async fn enqueue(store: &Store, run: ProbeRun, job: Job) -> Result<ProbeRun, ServiceError> {
    let version = run.protocol_version;
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
    let job = job::probe_job(callee_id, version, run.id, reason, now);
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
        reason: reason.to_string(),
        requested_by: actor.to_string(),
        created_at: now,
        push_token: new_token(),
        binding: None,
        state: RunState::Queued,
        ledger_seqs: Vec::new(),
    }
}

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

    let credentials = match super::credentials::for_probe(services, run.callee_id).await {
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
    let output = probe_interface(
        &outbound,
        &services.probe,
        &plan.card,
        run.protocol_version,
        run.binding,
        &plan.script,
        plan.push,
        &StoreInbox(&services.store),
        &LogProgress(run.id),
        &credentials,
    )
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
    let finished = FinishedRun {
        judgement: &judgement,
        observations: &output.observations,
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
    super::attestations::record(services, &appended).await;
    services.committed(Queued::Nothing).await;
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

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::domain::card::parse_card;

    fn card(interfaces: serde_json::Value) -> NormalizedCard {
        parse_card(&json!({
            "name": "a", "description": "d", "version": "1", "capabilities": {},
            "defaultInputModes": ["text/plain"], "defaultOutputModes": ["text/plain"], "skills": [],
            "supportedInterfaces": interfaces,
        }))
        .expect("a v1.0 card")
    }

    const V1: &str = "1.0";

    fn v1() -> ProtocolVersion {
        ProtocolVersion::parse_exact(V1).expect("version")
    }

    #[test]
    fn json_rpc_is_preferred_and_grpc_is_probed_when_it_is_all_there_is() {
        let both = card(json!([
            {"url": "http://a/grpc", "protocolBinding": "GRPC", "protocolVersion": V1},
            {"url": "http://a/rpc", "protocolBinding": "JSONRPC", "protocolVersion": V1},
        ]));
        let (chosen, wire) = choose_interface(&both, v1(), None).expect("chosen");
        assert_eq!(
            (chosen.binding.as_str(), wire),
            ("JSONRPC", Wire::JsonRpcV1)
        );

        let only_grpc = card(json!([
            {"url": "http://a:50051", "protocolBinding": "GRPC", "protocolVersion": V1},
        ]));
        let (chosen, wire) = choose_interface(&only_grpc, v1(), None).expect("chosen");
        assert_eq!(
            (chosen.url.as_str(), wire),
            ("http://a:50051", Wire::GrpcV1)
        );
    }

    #[test]
    fn an_asked_for_binding_is_probed_or_refused_by_name() {
        let both = card(json!([
            {"url": "http://a/rpc", "protocolBinding": "JSONRPC", "protocolVersion": V1},
            {"url": "http://a/grpc", "protocolBinding": "grpc", "protocolVersion": V1},
        ]));
        let (chosen, wire) = choose_interface(&both, v1(), Some(Binding::Grpc)).expect("chosen");
        assert_eq!((chosen.url.as_str(), wire), ("http://a/grpc", Wire::GrpcV1));

        let why = choose_interface(&both, v1(), Some(Binding::HttpJson)).expect_err("not offered");
        assert_eq!(
            why,
            "the card offers no HTTP+JSON interface for 1.0 (bindings: JSONRPC, grpc)"
        );
    }
}
