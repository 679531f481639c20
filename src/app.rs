//! Composition: builds the services from the settings, recovers work cut short by the last
//! run, and runs the HTTP API, the scheduler and the worker until shutdown. Nothing else
//! imports this module but `config` and the binary.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context;
use tokio::net::TcpListener;

use crate::domain::politeness::HostLimits;
use crate::domain::time::SystemClock;
use crate::http::{self, ApiContext, ApiState, HttpLimits};
use crate::metrics::Metrics;
use crate::remote::hosts::HostGate;
use crate::remote::presentation::TokenCache;
use crate::remote::{Outbound, OutboundSettings};
use crate::runtime::housekeeping::HousekeepingSettings;
use crate::runtime::schedule::{self, ScheduleSettings, Ticks};
use crate::runtime::worker::{self, WorkerSettings};
use crate::runtime::{aging, deliveries, feed};
use crate::service::Services;
use crate::service::callees::CardPolicy;
use crate::service::credentials::SecretsKey;
use crate::service::discovery::{Discovery, DiscoverySettings};
use crate::service::hosts::StoreHosts;
use crate::service::probe::ProbeSettings;
use crate::service::readmodel::{Answers, DEFAULT_ANSWERS, ReadModel, TrackWindow};
use crate::service::transparency::{Transparency, TransparencySettings};
use crate::service::webhooks::WebhookSettings;
use crate::storage::{Backend, DatabaseTarget, PoolSettings, Store};

/// Everything `cardgate serve` is configured with.
#[derive(Debug, Clone)]
pub struct Settings {
    pub listen: SocketAddr,
    pub database: DatabaseTarget,
    pub pool: PoolSettings,
    pub http: HttpLimits,
    pub auth: http::permissions::AuthSettings,
    pub outbound: OutboundSettings,
    /// Politeness per host (`CARDGATE_HOST_*`).
    pub hosts: HostLimits,
    /// Whether the host limits are kept in the database for every replica together.
    pub hosts_shared: bool,
    pub discovery: DiscoverySettings,
    pub probe: ProbeSettings,
    pub worker: WorkerSettings,
    pub schedule: ScheduleSettings,
    pub housekeeping: HousekeepingSettings,
    pub cards: CardPolicy,
    pub webhooks: WebhookSettings,
    pub transparency: TransparencySettings,
    /// The key ring sealing callees' credentials (`CARDGATE_SECRETS_KEY_FILE`).
    pub secrets_key_file: std::path::PathBuf,
    /// Whether `GET /metrics` answers (`CARDGATE_METRICS`).
    pub metrics: bool,
}

impl Settings {
    /// Defaults for everything but the database.
    pub fn new(database: DatabaseTarget) -> Self {
        let signing_key_file = TransparencySettings::default_key_file(&database);
        Self {
            secrets_key_file: secrets_key_beside(&signing_key_file),
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            database,
            pool: PoolSettings::default(),
            http: HttpLimits::default(),
            auth: http::permissions::AuthSettings::default(),
            outbound: OutboundSettings::default(),
            hosts: HostLimits::default(),
            hosts_shared: true,
            discovery: DiscoverySettings::default(),
            probe: ProbeSettings::default(),
            worker: WorkerSettings::default(),
            schedule: ScheduleSettings::default(),
            housekeeping: HousekeepingSettings::default(),
            cards: CardPolicy::default(),
            webhooks: WebhookSettings::default(),
            transparency: TransparencySettings {
                signing_key_file,
                origin: TransparencySettings::default_origin(None),
            },
            metrics: true,
        }
    }
}

/// The secrets key's default place: beside the signing key, in the same data directory.
pub fn secrets_key_beside(signing_key_file: &std::path::Path) -> std::path::PathBuf {
    signing_key_file
        .parent()
        .unwrap_or(std::path::Path::new("."))
        .join("secrets-key")
}

/// A started (connected, migrated) service that has not begun listening.
pub struct App {
    pub services: Services,
    metrics: Metrics,
    ticks: Arc<Ticks>,
    settings: Settings,
}

impl App {
    /// Connects to the database and applies migrations.
    pub async fn build(settings: Settings) -> anyhow::Result<Self> {
        let store = Store::connect(&settings.database, &settings.pool)
            .await
            .with_context(|| format!("connecting to {:?}", settings.database))?;
        store.migrate().await.context("applying migrations")?;
        // A database from before the Merkle tree (or restored without it) grows it now, not
        // on the first append.
        match store.catch_up_tree().await {
            Ok(0) => {}
            Ok(grown) => tracing::info!(leaves = grown, "added the ledger's missing Merkle leaves"),
            // A tree that disagrees with the ledger is evidence, not a reason to stop answering:
            // decisions still serve, appends refuse, and /v1/ledger/verify says what is wrong.
            Err(crate::storage::StoreError::Corrupt(what)) => {
                tracing::error!(%what, "the ledger's Merkle tree disagrees with the ledger; see GET /v1/ledger/verify");
            }
            Err(e) => return Err(e).context("building the ledger's Merkle tree"),
        }
        let transparency =
            Transparency::load(&settings.transparency).context("loading the signing key")?;
        let secrets = SecretsKey::load_or_create(&settings.secrets_key_file)
            .context("loading the secrets key")?;
        let metrics = Metrics::new();
        // Every replica keeps each host's budget in the database, so together they keep it
        // (unless told it is the only one).
        let mut hosts = HostGate::new(settings.hosts, settings.outbound.request_timeout);
        if settings.hosts_shared {
            hosts = hosts.with_shared(Arc::new(StoreHosts(store.clone())));
        }
        let outbound = Outbound::new(settings.outbound.clone())
            .context("building the HTTP client")?
            .with_metrics(metrics.clone())
            .with_hosts(Arc::new(hosts));
        let discovery = Discovery::new(outbound.clone(), settings.discovery.clone());
        // Keys now, callees in the background: the service listens at once, and answers
        // decisions once they are in (`ReadModel::start`).
        let track = TrackWindow {
            days: settings.probe.track_record_days,
            clock: Arc::new(SystemClock),
        };
        let view = ReadModel::start(store.clone(), track)
            .await
            .context("loading the API keys")?;
        let services = Services {
            store,
            clock: Arc::new(SystemClock),
            outbound,
            discovery,
            probe: settings.probe.clone(),
            cards: settings.cards.clone(),
            wake: Arc::new(tokio::sync::Notify::new()),
            deliveries: Arc::new(tokio::sync::Notify::new()),
            view,
            webhooks: settings.webhooks.clone(),
            transparency,
            secrets,
            tokens: TokenCache::default(),
        };
        // Work cut short by a crash or shutdown: probes are aborted (they never promote) and
        // their jobs become claimable again. An SQLite file has one process by design, so
        // everything running is an orphan; on Postgres other replicas may be alive, so only
        // expired leases are.
        let single = services.store.backend() == Backend::Sqlite;
        let now = services.now();
        let aborted = services
            .store
            .abort_orphaned_runs(single, now)
            .await
            .context("recovering probe runs")?;
        let released = services
            .store
            .release_orphaned_jobs(single, now)
            .await
            .context("recovering jobs")?;
        if aborted + released > 0 {
            tracing::info!(
                aborted,
                released,
                "recovered work cut short by the previous run"
            );
        }
        Ok(Self {
            services,
            metrics,
            ticks: Arc::new(Ticks::default()),
            settings,
        })
    }

    /// What the service was built with.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Binds the configured address.
    pub async fn bind(&self) -> anyhow::Result<TcpListener> {
        TcpListener::bind(self.settings.listen)
            .await
            .with_context(|| format!("binding {}", self.settings.listen))
    }

    /// Serves until `shutdown` resolves, then drains in-flight requests and closes the pool.
    pub async fn serve(
        self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<()> {
        let schedule = Arc::new(self.settings.schedule.clone());
        let stop = tokio_util::sync::CancellationToken::new();
        let api = ApiState::new(ApiContext {
            services: self.services.clone(),
            answers: Answers::new(DEFAULT_ANSWERS),
            schedule: schedule.clone(),
            ticks: self.ticks.clone(),
            instance: self.settings.worker.owner.clone(),
            streams: Arc::default(),
            stopping: stop.clone(),
            metrics: self.metrics.clone(),
            metrics_enabled: self.settings.metrics,
        });
        let router = http::router(api, &self.settings.http, &self.settings.auth)?;
        let addr = listener.local_addr()?;
        tracing::info!(%addr, database = %self.services.store.backend(), "cardgate listening on http://{addr}");
        let mut scheduler = schedule::start(
            self.services.clone(),
            schedule,
            Arc::new(self.settings.housekeeping.clone()),
            self.ticks.clone(),
        )
        .await?;
        let worker = tokio::spawn(worker::run(
            self.services.clone(),
            self.settings.worker.clone(),
            stop.clone(),
        ));
        let follower = tokio::spawn(feed::follow(self.services.clone(), stop.clone()));
        let ager = tokio::spawn(aging::run(self.services.clone(), stop.clone()));
        // Verdicts stand on the rules they were judged under: under another rulebook, stored
        // evidence is judged again (in the background: the API serves meanwhile).
        let rejudging = {
            let services = self.services.clone();
            tokio::spawn(async move {
                let book = services.probe.rulebook.clone();
                let started = std::time::Instant::now();
                match crate::service::rulebook::apply(
                    &services.store,
                    &book,
                    "system",
                    services.now(),
                )
                .await
                {
                    Ok(moved) => tracing::info!(
                        rulebook = book.version(),
                        moved = moved.len(),
                        millis = started.elapsed().as_millis(),
                        "stored evidence checked against the rulebook in force"
                    ),
                    Err(e) => {
                        tracing::warn!(error = ?e, "re-judging stored evidence at start failed");
                    }
                }
            })
        };
        let sender = tokio::spawn(deliveries::run(
            self.services.clone(),
            self.settings.worker.owner.clone(),
            stop.clone(),
        ));
        let stopping = stop.clone();
        // The peer address feeds the per-address limit on unauthenticated traffic.
        let router = router.into_make_service_with_connect_info::<std::net::SocketAddr>();
        let served = axum::serve(listener, router)
            .with_graceful_shutdown(async move {
                shutdown.await;
                // Stop taking jobs as soon as shutdown starts, while requests drain.
                stopping.cancel();
            })
            .await
            .context("serving HTTP");
        stop.cancel();
        if let Err(e) = scheduler.shutdown().await {
            tracing::warn!(error = ?e, "stopping the scheduler");
        }
        if let Err(e) = worker.await {
            tracing::error!(error = ?e, "the job worker panicked");
        }
        if let Err(e) = sender.await {
            tracing::error!(error = ?e, "the webhook sender panicked");
        }
        rejudging.abort();
        if let Err(e) = ager.await {
            tracing::error!(error = ?e, "the track-record ager panicked");
        }
        if let Err(e) = follower.await {
            tracing::error!(error = ?e, "the change feed follower panicked");
        }
        served?;
        self.services.store.close().await;
        tracing::info!("cardgate stopped");
        Ok(())
    }
}

/// Resolves on Ctrl-C or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
    tracing::info!("shutdown requested; draining");
}
