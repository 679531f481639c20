//! Command line and environment: every setting is a flag with an environment fallback.

use std::net::SocketAddr;
use std::time::Duration;

use clap::Args;

use crate::app::{Settings, secrets_key_beside};
use crate::domain::callee::Backoff;
use crate::domain::card::CardCaps;
use crate::domain::politeness::HostLimits;
use crate::domain::webhook::RetryPolicy;
use crate::http::HttpLimits;
use crate::http::permissions::AuthSettings;
use crate::remote::a2a::CallLimits;
use crate::remote::{NetworkPolicy, OutboundSettings};
use crate::runtime::housekeeping::HousekeepingSettings;
use crate::runtime::schedule::{Schedule, ScheduleSettings};
use crate::runtime::worker::WorkerSettings;
use crate::service::callees::CardPolicy;
use crate::service::discovery::DiscoverySettings;
use crate::service::probe::ProbeSettings;
use crate::service::transparency::TransparencySettings;
use crate::service::webhooks::WebhookSettings;
use crate::storage::{DatabaseTarget, PoolSettings};
use anyhow::Context;

#[derive(Debug, Clone, Args)]
pub struct DatabaseArgs {
    /// Database: postgres://user@host:port/db, or sqlite://path/to/file.db. Unset: an SQLite file
    /// at ./data/cardgate.db, created on first start.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<String>,

    /// Maximum database connections per process.
    #[arg(long, env = "CARDGATE_DB_MAX_CONNECTIONS", default_value_t = PoolSettings::default().max_connections)]
    pub db_max_connections: u32,
}

impl DatabaseArgs {
    pub fn target(&self) -> anyhow::Result<DatabaseTarget> {
        Ok(DatabaseTarget::parse(self.database_url.as_deref())?)
    }

    pub fn pool(&self) -> PoolSettings {
        PoolSettings {
            max_connections: self.db_max_connections.max(1),
            ..PoolSettings::default()
        }
    }
}

#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// Address to listen on.
    #[arg(long, env = "CARDGATE_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,

    #[command(flatten)]
    pub database: DatabaseArgs,

    /// Largest accepted request body, in bytes.
    #[arg(long, env = "CARDGATE_MAX_BODY_BYTES", default_value_t = HttpLimits::default().body_bytes)]
    pub max_body_bytes: usize,

    /// Longest a request may take before it is answered 503, in seconds.
    #[arg(long, env = "CARDGATE_REQUEST_TIMEOUT_SECS", default_value_t = HttpLimits::default().request_timeout.as_secs())]
    pub request_timeout_secs: u64,

    #[command(flatten)]
    pub outbound: OutboundArgs,

    #[command(flatten)]
    pub hosts: HostArgs,

    #[command(flatten)]
    pub probe: ProbeArgs,

    #[command(flatten)]
    pub schedule: ScheduleArgs,

    #[command(flatten)]
    pub housekeeping: HousekeepingArgs,

    #[command(flatten)]
    pub worker: WorkerArgs,

    #[command(flatten)]
    pub access: AccessArgs,

    #[command(flatten)]
    pub ledger: LedgerArgs,

    #[command(flatten)]
    pub webhooks: WebhookArgs,

    /// `GET /metrics` (Prometheus): `on` or `off`.
    #[arg(long, env = "CARDGATE_METRICS", value_enum, default_value_t = Switch::On, ignore_case = true)]
    pub metrics: Switch,
}

/// Politeness per host: how hard the registry presses one address, across replicas.
#[derive(Debug, Clone, Args)]
pub struct HostArgs {
    /// Requests in flight at once to one host (the address its name resolves to), from a
    /// request's start to its answer's head, counted across every replica.
    #[arg(long, env = "CARDGATE_HOST_CONCURRENCY", default_value_t = HostLimits::default().concurrency)]
    pub host_concurrency: u32,

    /// Least time between two request starts to one host, in milliseconds, across replicas.
    #[arg(long, env = "CARDGATE_HOST_INTERVAL_MS", default_value_t = HostLimits::default().interval.as_millis() as u64)]
    pub host_interval_ms: u64,

    /// Longest a request waits for its host's turn, its `Retry-After` included, in seconds.
    /// A host asking for longer defers the card refresh or probe to then instead.
    #[arg(long, env = "CARDGATE_HOST_MAX_WAIT_SECS", default_value_t = HostLimits::default().max_wait.as_secs())]
    pub host_max_wait_secs: u64,

    /// Whether replicas keep the host limits together through the database (`on`: a lease
    /// and a reserved start per request) or each its own (`off`: for a single replica, which
    /// saves the database those statements).
    #[arg(long, env = "CARDGATE_HOST_LIMITS_SHARED", value_enum, default_value_t = Switch::On, ignore_case = true)]
    pub host_limits_shared: Switch,
}

impl HostArgs {
    pub fn limits(&self) -> HostLimits {
        HostLimits {
            // HostGate holds it to at least one.
            concurrency: self.host_concurrency,
            interval: Duration::from_millis(self.host_interval_ms),
            max_wait: Duration::from_secs(self.host_max_wait_secs),
        }
    }
}

/// The verifiable ledger: the key that signs checkpoints and receipts, and the log's name.
#[derive(Debug, Clone, Args)]
pub struct LedgerArgs {
    /// Ed25519 key (PEM) signing checkpoints and decision receipts, created on first start.
    /// Unset: `signing-key.pem` beside the SQLite file, or `./data/signing-key.pem` with
    /// Postgres. Every replica of one registry must use the same file.
    #[arg(long, env = "CARDGATE_SIGNING_KEY_FILE")]
    pub signing_key_file: Option<std::path::PathBuf>,

    /// The checkpoint origin, a schema-less URL naming this registry's log (also the signed
    /// note's key name). Unset: the host and path of CARDGATE_PUBLIC_URL plus `/ledger`, or
    /// `cardgate.localhost/ledger`.
    #[arg(long, env = "CARDGATE_LEDGER_ORIGIN")]
    pub ledger_origin: Option<String>,

    /// AES-256-GCM key ring sealing the credentials presented to callees, created (0600) on
    /// first start. Unset: `secrets-key` beside the signing key. Every replica must use the
    /// same file; `cardgate secrets-key rotate` replaces its key.
    #[arg(long, env = "CARDGATE_SECRETS_KEY_FILE")]
    pub secrets_key_file: Option<std::path::PathBuf>,
}

/// Access control.
#[derive(Clone, Args)]
pub struct AccessArgs {
    /// A bootstrap admin credential (at least 32 characters), accepted as
    /// `Authorization: Bearer <token>`. Never stored. Alternatively create the first admin key
    /// with `cardgate keys create --role admin --name <name>`.
    #[arg(long, env = "CARDGATE_ADMIN_TOKEN", hide_env_values = true)]
    pub admin_token: Option<String>,

    /// Requests per second each key may make on average.
    #[arg(long, env = "CARDGATE_RATE_LIMIT_PER_SEC", default_value_t = AuthSettings::default().rate_per_sec)]
    pub rate_limit_per_sec: f64,

    /// Requests a key may burst above the average.
    #[arg(long, env = "CARDGATE_RATE_LIMIT_BURST", default_value_t = AuthSettings::default().burst)]
    pub rate_limit_burst: f64,

    /// Per client address: failed authentications and requests to `/readyz` and the push
    /// webhook per second (none of it reaches the database past the limit).
    #[arg(long, env = "CARDGATE_ANONYMOUS_RATE_PER_SEC", default_value_t = AuthSettings::default().anonymous_per_sec)]
    pub anonymous_rate_per_sec: f64,

    /// What one client address may burst above that average.
    #[arg(long, env = "CARDGATE_ANONYMOUS_BURST", default_value_t = AuthSettings::default().anonymous_burst)]
    pub anonymous_burst: f64,

    /// Longest accepted query string, in bytes.
    #[arg(long, env = "CARDGATE_MAX_QUERY_BYTES", default_value_t = AuthSettings::default().max_query_bytes)]
    pub max_query_bytes: usize,

    /// `on`: the transparency surface (checkpoints, inclusion and consistency proofs,
    /// attestations; the key set always is) answers without an API key, limited per client
    /// address, for registries whose agents are public. `off` (the default): a reader key.
    #[arg(long, env = "CARDGATE_PUBLIC_TRANSPARENCY", value_enum, default_value_t = Switch::Off,
          ignore_case = true)]
    pub public_transparency: Switch,

    /// How long an operator console sign-in lasts, in seconds.
    #[arg(long, env = "CARDGATE_CONSOLE_SESSION_SECS",
          default_value_t = AuthSettings::default().console_session.as_secs(),
          value_parser = clap::value_parser!(u64).range(60..=2_592_000))]
    pub console_session_secs: u64,
}

impl std::fmt::Debug for AccessArgs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AccessArgs")
            .field("admin_token", &self.admin_token.as_ref().map(|_| "****"))
            .finish_non_exhaustive()
    }
}

impl AccessArgs {
    pub fn settings(&self) -> anyhow::Result<AuthSettings> {
        anyhow::ensure!(
            self.rate_limit_per_sec > 0.0 && self.rate_limit_burst >= 1.0,
            "CARDGATE_RATE_LIMIT_PER_SEC must be positive and CARDGATE_RATE_LIMIT_BURST at least 1"
        );
        anyhow::ensure!(
            self.anonymous_rate_per_sec > 0.0 && self.anonymous_burst >= 1.0,
            "CARDGATE_ANONYMOUS_RATE_PER_SEC must be positive and CARDGATE_ANONYMOUS_BURST at least 1"
        );
        let mut settings = AuthSettings {
            admin_token_hash: None,
            rate_per_sec: self.rate_limit_per_sec,
            burst: self.rate_limit_burst,
            anonymous_per_sec: self.anonymous_rate_per_sec,
            anonymous_burst: self.anonymous_burst,
            max_query_bytes: self.max_query_bytes.max(64),
            public_transparency: self.public_transparency == Switch::On,
            console_session: Duration::from_secs(self.console_session_secs),
            secure_cookies: false,
        };
        if let Some(token) = self
            .admin_token
            .as_deref()
            .map(str::trim)
            .filter(|t| !t.is_empty())
        {
            anyhow::ensure!(
                token.len() >= 32,
                "CARDGATE_ADMIN_TOKEN must be at least 32 characters"
            );
            settings = settings.with_admin_token(token);
        }
        Ok(settings)
    }
}

/// How cardgate reaches agents (cards, key sets, probes, push registration).
#[derive(Debug, Clone, Args)]
pub struct OutboundArgs {
    /// Networks cardgate may reach although they are loopback, private, link-local or otherwise
    /// non-public: comma-separated CIDRs, e.g. `127.0.0.0/8,::1/128`. Empty: public addresses only.
    #[arg(long, env = "CARDGATE_ALLOW_NETWORKS", default_value = "")]
    pub allow_networks: String,

    /// Require a verified card signature for `card-trusted`. `false` admits unsigned cards (the
    /// decision then says so); an invalid signature is never accepted.
    #[arg(long, env = "CARDGATE_REQUIRE_SIGNED_CARDS", default_value_t = DiscoverySettings::default().require_signed, action = clap::ArgAction::Set)]
    pub require_signed_cards: bool,

    /// Largest card accepted, in bytes; a larger download is aborted.
    #[arg(long, env = "CARDGATE_MAX_CARD_BYTES", default_value_t = DiscoverySettings::default().max_card_bytes)]
    pub max_card_bytes: usize,

    /// Deadline for fetching a card (connect, redirects and body), in seconds.
    #[arg(long, env = "CARDGATE_FETCH_TIMEOUT_SECS", default_value_t = DiscoverySettings::default().fetch_timeout.as_secs())]
    pub fetch_timeout_secs: u64,

    /// Extra certificate authorities (a PEM file) that outbound TLS trusts beside the
    /// platform's roots: for agents behind a private CA, over HTTPS and gRPC alike.
    #[arg(long, env = "CARDGATE_OUTBOUND_CA_FILE", value_name = "PEM")]
    pub outbound_ca_file: Option<std::path::PathBuf>,

    /// Deadline for establishing a connection, in seconds.
    #[arg(long, env = "CARDGATE_CONNECT_TIMEOUT_SECS", default_value_t = OutboundSettings::default().connect_timeout.as_secs())]
    pub connect_timeout_secs: u64,

    /// Redirects followed per fetch (each hop re-checked, same origin only).
    #[arg(long, env = "CARDGATE_MAX_REDIRECTS", default_value_t = OutboundSettings::default().max_redirects)]
    pub max_redirects: usize,

    /// Interfaces one card may list; a card over any cap is untrusted, naming it.
    #[arg(long, env = "CARDGATE_CARD_MAX_INTERFACES", default_value_t = CardCaps::default().interfaces)]
    pub card_max_interfaces: usize,

    /// Distinct protocol versions (subjects) one card may offer.
    #[arg(long, env = "CARDGATE_CARD_MAX_VERSIONS", default_value_t = CardCaps::default().versions)]
    pub card_max_versions: usize,

    /// Skills one card may list.
    #[arg(long, env = "CARDGATE_CARD_MAX_SKILLS", default_value_t = CardCaps::default().skills)]
    pub card_max_skills: usize,

    /// Signatures one card may carry.
    #[arg(long, env = "CARDGATE_CARD_MAX_SIGNATURES", default_value_t = CardCaps::default().signatures)]
    pub card_max_signatures: usize,

    /// Distinct `jku` key sets fetched for one card (all within one fetch timeout).
    #[arg(long, env = "CARDGATE_CARD_MAX_KEY_SETS", default_value_t = DiscoverySettings::default().max_key_sets)]
    pub card_max_key_sets: usize,
}

impl OutboundArgs {
    pub fn outbound(&self) -> anyhow::Result<OutboundSettings> {
        let allowed = NetworkPolicy::parse_allowed(&self.allow_networks)
            .map_err(|e| anyhow::anyhow!("CARDGATE_ALLOW_NETWORKS: {e}"))?;
        let extra_roots = match &self.outbound_ca_file {
            Some(path) => std::fs::read(path).map_err(|e| {
                anyhow::anyhow!("CARDGATE_OUTBOUND_CA_FILE {}: {e}", path.display())
            })?,
            None => Vec::new(),
        };
        Ok(OutboundSettings {
            policy: NetworkPolicy::new(allowed),
            extra_roots_pem: extra_roots,
            connect_timeout: Duration::from_secs(self.connect_timeout_secs.max(1)),
            max_redirects: self.max_redirects,
            ..OutboundSettings::default()
        })
    }

    pub fn discovery(&self) -> DiscoverySettings {
        DiscoverySettings {
            require_signed: self.require_signed_cards,
            max_card_bytes: self.max_card_bytes,
            fetch_timeout: Duration::from_secs(self.fetch_timeout_secs.max(1)),
            caps: CardCaps {
                interfaces: self.card_max_interfaces,
                versions: self.card_max_versions,
                skills: self.card_max_skills,
                signatures: self.card_max_signatures,
            },
            max_key_sets: self.card_max_key_sets,
            ..DiscoverySettings::default()
        }
    }
}

impl ServeArgs {
    pub fn settings(&self) -> anyhow::Result<Settings> {
        Ok(Settings {
            listen: self.listen,
            database: self.database.target()?,
            pool: self.database.pool(),
            http: HttpLimits {
                body_bytes: self.max_body_bytes,
                request_timeout: Duration::from_secs(self.request_timeout_secs.max(1)),
            },
            auth: AuthSettings {
                // Behind HTTPS the console's cookie is never sent over plain HTTP.
                secure_cookies: self
                    .probe
                    .public_url
                    .as_ref()
                    .is_some_and(|u| u.scheme() == "https"),
                ..self.access.settings()?
            },
            outbound: self.outbound.outbound()?,
            hosts: self.hosts.limits(),
            hosts_shared: self.hosts.host_limits_shared == Switch::On,
            discovery: self.outbound.discovery(),
            probe: self.probe.settings()?,
            worker: self.worker.settings(),
            schedule: self.schedule.settings()?,
            housekeeping: self.housekeeping.settings(),
            cards: self.schedule.card_policy(),
            webhooks: self.webhooks.settings(),
            secrets_key_file: self.secrets_key_file()?,
            transparency: self.transparency()?,
            metrics: self.metrics == Switch::On,
        })
    }

    fn secrets_key_file(&self) -> anyhow::Result<std::path::PathBuf> {
        Ok(match &self.ledger.secrets_key_file {
            Some(path) => path.clone(),
            None => secrets_key_beside(&self.transparency()?.signing_key_file),
        })
    }

    fn transparency(&self) -> anyhow::Result<TransparencySettings> {
        let database = self.database.target()?;
        let origin = match &self.ledger.ledger_origin {
            Some(origin) => origin.trim().to_string(),
            None => TransparencySettings::default_origin(self.probe.public_url.as_ref()),
        };
        crate::domain::checkpoint::check_origin(&origin).context("CARDGATE_LEDGER_ORIGIN")?;
        Ok(TransparencySettings {
            signing_key_file: self
                .ledger
                .signing_key_file
                .clone()
                .unwrap_or_else(|| TransparencySettings::default_key_file(&database)),
            origin,
        })
    }
}

/// Periodic work and the queue.
/// A feature switch, as operators write it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Switch {
    On,
    Off,
}

#[derive(Debug, Clone, Args)]
pub struct ScheduleArgs {
    /// When to refresh every callee's card: a 6-field cron expression, seconds first, or
    /// `off`.
    #[arg(
        long,
        env = "CARDGATE_REFRESH_SCHEDULE",
        default_value_t = ScheduleSettings::default().refresh
    )]
    pub refresh_schedule: Schedule,

    /// When to re-probe demoted and stale subjects: a 6-field cron expression, seconds first,
    /// or `off`.
    #[arg(long, env = "CARDGATE_REPROBE_SCHEDULE", default_value_t = ScheduleSettings::default().reprobe)]
    pub reprobe_schedule: Schedule,

    /// When to record a signed checkpoint of the ledger (if it grew): a 6-field cron
    /// expression, seconds first, or `off`.
    #[arg(long, env = "CARDGATE_CHECKPOINT_SCHEDULE", default_value_t = ScheduleSettings::default().checkpoint)]
    pub checkpoint_schedule: Schedule,

    /// A subject whose newest probe is older than this many seconds is re-probed.
    #[arg(long, env = "CARDGATE_PROBE_STALE_AFTER_SECS", default_value_t = ScheduleSettings::default().stale_after.as_secs())]
    pub probe_stale_after_secs: u64,

    /// First backoff after a failed card fetch, in seconds (doubled per failure).
    #[arg(long, env = "CARDGATE_REFRESH_BACKOFF_SECS", default_value_t = Backoff::default().base.as_secs())]
    pub refresh_backoff_secs: u64,

    /// Longest backoff, in seconds.
    #[arg(long, env = "CARDGATE_REFRESH_BACKOFF_MAX_SECS", default_value_t = Backoff::default().cap.as_secs())]
    pub refresh_backoff_max_secs: u64,

    /// Queue probes when registration or a refresh reveals a new version or capability.
    #[arg(long, env = "CARDGATE_PROBE_ON_CHANGE", default_value_t = CardPolicy::default().probe_on_change, action = clap::ArgAction::Set)]
    pub probe_on_change: bool,
}

impl ScheduleArgs {
    pub fn settings(&self) -> anyhow::Result<ScheduleSettings> {
        Ok(ScheduleSettings {
            refresh: self.refresh_schedule.clone(),
            reprobe: self.reprobe_schedule.clone(),
            checkpoint: self.checkpoint_schedule.clone(),
            stale_after: Duration::from_secs(self.probe_stale_after_secs),
            ..ScheduleSettings::default()
        })
    }

    pub fn card_policy(&self) -> CardPolicy {
        CardPolicy {
            backoff: Backoff {
                base: Duration::from_secs(self.refresh_backoff_secs.max(1)),
                cap: Duration::from_secs(
                    self.refresh_backoff_max_secs
                        .max(self.refresh_backoff_secs.max(1)),
                ),
            },
            probe_on_change: self.probe_on_change,
        }
    }
}

/// Housekeeping: how long finished work is kept before it is pruned.
#[derive(Debug, Clone, Args)]
pub struct HousekeepingArgs {
    /// Finished jobs stay listed in /v1/jobs this many seconds, then housekeeping prunes
    /// them (what they did is in the ledger and the probe runs).
    #[arg(long, env = "CARDGATE_JOB_RETENTION_SECS", default_value_t = HousekeepingSettings::default().job_retention.as_secs())]
    pub job_retention_secs: u64,

    /// Probe transcripts kept per subject: each housekeeping run drops, in bounded batches, the
    /// transcripts of older finished runs that no promotion or demotion cites (their verdicts,
    /// findings and transitions stay). 0 keeps every transcript.
    #[arg(long, env = "CARDGATE_KEEP_TRANSCRIPTS", default_value_t = HousekeepingSettings::default().keep_transcripts)]
    pub keep_transcripts: u32,
    /// Public card snapshots kept whole per callee: older ones lose their raw bytes unless
    /// the ledger cites them as the card a subject started from or whose trust changed (their
    /// hash and assessment stay). 0 keeps every snapshot.
    #[arg(long, env = "CARDGATE_KEEP_SNAPSHOTS", default_value_t = HousekeepingSettings::default().keep_snapshots)]
    pub keep_snapshots: u32,
    /// Days a finished webhook delivery (delivered, or failed for good) stays listed and
    /// retryable; then housekeeping deletes it, and an event's stored body with its last
    /// delivery. Pending deliveries are never pruned. 0 keeps every delivery.
    #[arg(long, env = "CARDGATE_KEEP_DELIVERIES_DAYS", default_value_t = HousekeepingSettings::default().keep_deliveries.as_secs() / 86_400)]
    pub keep_deliveries_days: u64,
}

impl HousekeepingArgs {
    pub fn settings(&self) -> HousekeepingSettings {
        HousekeepingSettings {
            job_retention: Duration::from_secs(self.job_retention_secs),
            keep_transcripts: self.keep_transcripts,
            keep_snapshots: self.keep_snapshots,
            keep_deliveries: Duration::from_secs(self.keep_deliveries_days.saturating_mul(86_400)),
        }
    }
}

/// The job worker: how many jobs this process runs at once, and how long it holds each.
#[derive(Debug, Clone, Args)]
pub struct WorkerArgs {
    /// Jobs (probes, refreshes) this process runs at once.
    #[arg(long, env = "CARDGATE_WORKERS", default_value_t = WorkerSettings::default().concurrency)]
    pub workers: usize,

    /// How long a worker holds a job before another may take it over (renewed while working).
    #[arg(long, env = "CARDGATE_JOB_LEASE_SECS", default_value_t = WorkerSettings::default().lease.as_secs())]
    pub job_lease_secs: u64,
}

impl WorkerArgs {
    pub fn settings(&self) -> WorkerSettings {
        WorkerSettings {
            concurrency: self.workers.max(1),
            lease: Duration::from_secs(self.job_lease_secs.max(1)),
            ..WorkerSettings::default()
        }
    }
}

/// How webhook deliveries are sent and retried (Standard Webhooks defaults).
#[derive(Debug, Clone, Args)]
pub struct WebhookArgs {
    /// Wait before the second attempt of a failed delivery, in seconds (doubled after each
    /// failure, with jitter).
    #[arg(long, env = "CARDGATE_WEBHOOK_RETRY_FIRST_SECS", default_value_t = RetryPolicy::default().first.as_secs())]
    pub webhook_retry_first_secs: u64,

    /// Longest wait between attempts, in seconds (a `Retry-After` is held to it too).
    #[arg(long, env = "CARDGATE_WEBHOOK_RETRY_MAX_SECS", default_value_t = RetryPolicy::default().max.as_secs())]
    pub webhook_retry_max_secs: u64,

    /// Age past which a delivery that never succeeded is given up (`failed`), in seconds.
    #[arg(long, env = "CARDGATE_WEBHOOK_GIVE_UP_SECS", default_value_t = RetryPolicy::default().give_up_after.as_secs())]
    pub webhook_give_up_secs: u64,

    /// How long a failing delivery holds the later ones about its subject, in seconds; past
    /// it they go out, carrying `previous_seq` so the receiver sees the gap.
    #[arg(long, env = "CARDGATE_WEBHOOK_HOLD_BACK_SECS", default_value_t = RetryPolicy::default().hold_back.as_secs())]
    pub webhook_hold_back_secs: u64,

    /// One attempt's deadline, connection to response headers, in seconds.
    #[arg(long, env = "CARDGATE_WEBHOOK_TIMEOUT_SECS", default_value_t = WebhookSettings::default().timeout.as_secs())]
    pub webhook_timeout_secs: u64,

    /// Attempts in flight at once to one receiver host, per process.
    #[arg(long, env = "CARDGATE_WEBHOOK_HOST_CONCURRENCY", default_value_t = WebhookSettings::default().host_concurrency as u32,
          value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub webhook_host_concurrency: u32,

    /// Sending rounds in flight at once per process: while one sends, the next claims.
    #[arg(long, env = "CARDGATE_WEBHOOK_ROUNDS", default_value_t = WebhookSettings::default().rounds as u32,
          value_parser = clap::value_parser!(u32).range(1..=16))]
    pub webhook_rounds: u32,

    /// How often due retries are looked for when nothing new happens, in milliseconds.
    #[arg(long, env = "CARDGATE_WEBHOOK_POLL_MS", default_value_t = WebhookSettings::default().poll.as_millis() as u64)]
    pub webhook_poll_ms: u64,

    /// How long a receiver must have failed every attempt to be `failing`, in seconds.
    #[arg(long, env = "CARDGATE_WEBHOOK_FAILING_AFTER_SECS", default_value_t = WebhookSettings::default().failing_after.as_secs())]
    pub webhook_failing_after_secs: u64,
}

impl WebhookArgs {
    pub fn settings(&self) -> WebhookSettings {
        WebhookSettings {
            retry: RetryPolicy {
                first: Duration::from_secs(self.webhook_retry_first_secs.max(1)),
                max: Duration::from_secs(self.webhook_retry_max_secs.max(1)),
                give_up_after: Duration::from_secs(self.webhook_give_up_secs.max(1)),
                hold_back: Duration::from_secs(self.webhook_hold_back_secs),
            },
            timeout: Duration::from_secs(self.webhook_timeout_secs.max(1)),
            host_concurrency: self.webhook_host_concurrency.max(1) as usize,
            poll: Duration::from_millis(self.webhook_poll_ms.max(10)),
            failing_after: Duration::from_secs(self.webhook_failing_after_secs.max(1)),
            rounds: self.webhook_rounds.max(1) as usize,
            ..WebhookSettings::default()
        }
    }
}

/// How probes run.
#[derive(Debug, Clone, Args)]
pub struct ProbeArgs {
    /// The URL at which agents can reach this cardgate, for push notifications: the webhook is
    /// `<url>/v1/hooks/push/<token>`. Unset: push capability probes are not exercised.
    #[arg(long, env = "CARDGATE_PUBLIC_URL")]
    pub public_url: Option<url::Url>,

    /// The operator's policy (TOML): rules whose failure blocks promotion beyond what the
    /// trust model asks, e.g. `[rules."LC-CANCEL"] blocks = true`. Checked at start: a policy
    /// that unblocks what the trust model requires is refused.
    #[arg(long, env = "CARDGATE_POLICY_FILE", value_name = "FILE")]
    pub policy_file: Option<std::path::PathBuf>,

    /// Deadline of one probe cycle, in seconds.
    #[arg(long, env = "CARDGATE_PROBE_DEADLINE_SECS", default_value_t = ProbeSettings::default().deadline.as_secs())]
    pub probe_deadline_secs: u64,

    /// Attempts at registering the push webhook before the `push` demotion trigger fires.
    #[arg(long, env = "CARDGATE_PUSH_ATTEMPTS", default_value_t = ProbeSettings::default().push_attempts)]
    pub push_attempts: u32,

    /// Backoff before the second registration attempt, in milliseconds (doubled each time).
    #[arg(long, env = "CARDGATE_PUSH_BACKOFF_MS",
          default_value_t = ProbeSettings::default().push_backoff.as_millis() as u64)]
    pub push_backoff_ms: u64,

    /// Seconds of quiet the wait for the terminal push delivery lasts: each delivery that
    /// arrives starts it again, within the cycle's deadline.
    #[arg(long, env = "CARDGATE_PUSH_WAIT_SECS", default_value_t = ProbeSettings::default().push_wait.as_secs())]
    pub push_wait_secs: u64,

    /// Lifecycle tasks each probe cycle runs at once: the first is the whole cycle, the others
    /// the lifecycle task alone; a cycle passes only if every trial passes.
    #[arg(long, env = "CARDGATE_PROBE_TRIALS", default_value_t = ProbeSettings::default().trials,
          value_parser = clap::value_parser!(u32).range(1..=16))]
    pub probe_trials: u32,

    /// Days of finished runs a subject's track record covers (runs, trials, clean rate, class,
    /// latency).
    #[arg(long, env = "CARDGATE_TRACK_RECORD_DAYS", default_value_t = ProbeSettings::default().track_record_days,
          value_parser = clap::value_parser!(u32).range(1..=3650))]
    pub track_record_days: u32,

    /// Push deliveries one probe run's webhook accepts; later ones are refused (429).
    #[arg(long, env = "CARDGATE_PUSH_MAX_DELIVERIES",
          default_value_t = ProbeSettings::default().push_max_deliveries as u32,
          value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub push_max_deliveries: u32,

    /// Exchanges one probe run's transcript keeps; later ones are counted, not stored.
    #[arg(long, env = "CARDGATE_TRANSCRIPT_MAX_EXCHANGES",
          default_value_t = CallLimits::default().transcript_exchanges as u32,
          value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub transcript_max_exchanges: u32,

    /// Bytes of request, response and event bodies one transcript keeps; past it, bodies are
    /// replaced by their size.
    #[arg(long, env = "CARDGATE_TRANSCRIPT_MAX_BYTES", default_value_t = CallLimits::default().transcript_bytes)]
    pub transcript_max_bytes: usize,
}

impl ProbeArgs {
    pub fn settings(&self) -> anyhow::Result<ProbeSettings> {
        if let Some(url) = &self.public_url {
            anyhow::ensure!(
                matches!(url.scheme(), "http" | "https"),
                "CARDGATE_PUBLIC_URL must be an http(s) URL"
            );
        }
        let rulebook = crate::service::policy::rulebook(self.policy_file.as_deref())?;
        Ok(ProbeSettings {
            rulebook: std::sync::Arc::new(rulebook),
            public_url: self.public_url.clone().map(with_trailing_slash),
            deadline: Duration::from_secs(self.probe_deadline_secs.max(1)),
            push_attempts: self.push_attempts.max(1),
            push_backoff: Duration::from_millis(self.push_backoff_ms),
            push_wait: Duration::from_secs(self.push_wait_secs.max(1)),
            push_max_deliveries: self.push_max_deliveries as usize,
            trials: self.probe_trials,
            track_record_days: self.track_record_days,
            limits: CallLimits {
                transcript_exchanges: self.transcript_max_exchanges as usize,
                transcript_bytes: self.transcript_max_bytes,
                ..CallLimits::default()
            },
            ..ProbeSettings::default()
        })
    }
}

/// `Url::join` replaces the last path segment unless the base ends with a slash.
pub fn with_trailing_slash(mut url: url::Url) -> url::Url {
    if !url.path().ends_with('/') {
        let path = format!("{}/", url.path());
        url.set_path(&path);
    }
    url
}
