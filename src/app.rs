//! The running service: shared state, startup (connect, migrate) and the serve loop with
//! graceful shutdown.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context;
use tokio::net::TcpListener;

use crate::domain::time::{self, Timestamp};
use crate::http::{self, HttpLimits};
use crate::remote::{Outbound, OutboundSettings};
use crate::service::discovery::{Discovery, DiscoverySettings};
use crate::service::probe::ProbeSettings;
use crate::service::schedule::{self, ScheduleSettings, Ticks};
use crate::service::worker::{self, WorkerSettings};
use crate::storage::{DatabaseTarget, PoolSettings, Store};

/// Where "now" comes from. Services read it here so tests can hold time still.
pub trait Clock: Send + Sync + 'static {
    fn now(&self) -> Timestamp;
}

/// The wall clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        time::now()
    }
}

/// What handlers and jobs share. Cheap to clone.
#[derive(Clone)]
pub struct AppState {
    pub store: Store,
    pub clock: Arc<dyn Clock>,
    /// The one guarded client for everything cardgate fetches.
    pub outbound: Outbound,
    pub discovery: Discovery,
    pub probe: ProbeSettings,
    pub schedule: Arc<ScheduleSettings>,
    /// Wakes the job worker when a job is enqueued.
    pub wake: Arc<tokio::sync::Notify>,
    /// The scheduler's last ticks in this process.
    pub ticks: Arc<Ticks>,
    /// This process's name in job leases.
    pub instance: String,
}

impl AppState {
    pub fn now(&self) -> Timestamp {
        self.clock.now()
    }
}

/// Everything `cardgate serve` is configured with.
#[derive(Debug, Clone)]
pub struct Settings {
    pub listen: SocketAddr,
    pub database: DatabaseTarget,
    pub pool: PoolSettings,
    pub http: HttpLimits,
    pub auth: http::auth::AuthSettings,
    pub outbound: OutboundSettings,
    pub discovery: DiscoverySettings,
    pub probe: ProbeSettings,
    pub worker: WorkerSettings,
    pub schedule: ScheduleSettings,
}

impl Settings {
    /// Defaults for everything but the database.
    pub fn new(database: DatabaseTarget) -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            database,
            pool: PoolSettings::default(),
            http: HttpLimits::default(),
            auth: http::auth::AuthSettings::default(),
            outbound: OutboundSettings::default(),
            discovery: DiscoverySettings::default(),
            probe: ProbeSettings::default(),
            worker: WorkerSettings::default(),
            schedule: ScheduleSettings::default(),
        }
    }
}

/// A started (connected, migrated) service that has not begun listening.
pub struct App {
    pub state: AppState,
    settings: Settings,
}

impl App {
    /// Connects to the database and applies migrations.
    pub async fn build(settings: Settings) -> anyhow::Result<Self> {
        let store = Store::connect(&settings.database, &settings.pool)
            .await
            .with_context(|| format!("connecting to {:?}", settings.database))?;
        store.migrate().await.context("applying migrations")?;
        let outbound =
            Outbound::new(settings.outbound.clone()).context("building the HTTP client")?;
        let discovery = Discovery::new(outbound.clone(), settings.discovery.clone());
        let state = AppState {
            store,
            clock: Arc::new(SystemClock),
            outbound,
            discovery,
            probe: settings.probe.clone(),
            schedule: Arc::new(settings.schedule.clone()),
            wake: Arc::new(tokio::sync::Notify::new()),
            ticks: Arc::new(Ticks::default()),
            instance: settings.worker.owner.clone(),
        };
        // Work cut short by a crash or shutdown: probes are aborted (they never promote) and
        // their jobs become claimable again. An SQLite file has one process by design, so
        // everything running is an orphan; on Postgres other replicas may be alive, so only
        // expired leases are.
        let single = state.store.backend() == "sqlite";
        let now = state.now();
        let aborted = state
            .store
            .abort_orphaned_runs(single, now)
            .await
            .context("recovering probe runs")?;
        let released = state
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
        Ok(Self { state, settings })
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
        let router = http::router(self.state.clone(), &self.settings.http, &self.settings.auth)?;
        let addr = listener.local_addr()?;
        tracing::info!(%addr, database = self.state.store.backend(), "cardgate listening on http://{addr}");
        let mut scheduler = schedule::start(self.state.clone(), self.state.ticks.clone()).await?;
        let stop = tokio_util::sync::CancellationToken::new();
        let worker = tokio::spawn(worker::run(
            self.state.clone(),
            self.settings.worker.clone(),
            self.state.wake.clone(),
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
        served?;
        self.state.store.close().await;
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
