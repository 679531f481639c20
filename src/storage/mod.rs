//! Persistence: the only module with SQL.
//!
//! One [`Store`] fronts two real backends, Postgres (production, several replicas) and an
//! embedded SQLite file (the zero-setup default). Each operation's body is written once and
//! compiled for both pools by [`dispatch!`]; SQL text is shared where the dialects agree (both
//! accept `$n` placeholders) and split by backend only where they do not (locking, upserts).
//! Driver errors are interpreted once, into [`StoreError`].

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{PgPool, SqlitePool};

use crate::domain::gate::GateError;

mod attestations;
mod callees;
mod changes;
mod credentials;
mod hosts;
mod jobs;
mod keys;
mod ledger;
mod lock;
mod merkle;
mod probes;
mod reports;
mod sessions;
mod snapshot_row;
mod snapshots;
mod stats;
mod sweeps;
mod webhooks;

pub use changes::{Change, ChangeSignal, Changed, FeedHead};
pub use merkle::CheckpointRecord;
pub use probes::FinishedRun;
pub use snapshots::RefreshRecord;
pub use stats::Counts;
pub use webhooks::{AttemptRecord, Claimed};

static PG_MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("migrations/postgres");
static SQLITE_MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("migrations/sqlite");

/// Where the data lives, parsed from `DATABASE_URL`.
#[derive(Clone, PartialEq, Eq)]
pub enum DatabaseTarget {
    Postgres(String),
    Sqlite(PathBuf),
}

/// The SQLite file used when `DATABASE_URL` is unset.
pub const DEFAULT_SQLITE_PATH: &str = "./data/cardgate.db";

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unsupported DATABASE_URL `{0}`: use postgres://user@host:port/database (or postgresql://), \
     sqlite://path/to/file.db (or sqlite:path), or leave it unset for {DEFAULT_SQLITE_PATH}"
)]
pub struct UnsupportedDatabaseUrl(String);

impl DatabaseTarget {
    /// Parses `DATABASE_URL`; `None` (or empty) means the default SQLite file.
    pub fn parse(url: Option<&str>) -> Result<Self, UnsupportedDatabaseUrl> {
        let url = url.map(str::trim).filter(|u| !u.is_empty());
        let Some(url) = url else {
            return Ok(Self::Sqlite(PathBuf::from(DEFAULT_SQLITE_PATH)));
        };
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            return Ok(Self::Postgres(url.to_string()));
        }
        let path = url
            .strip_prefix("sqlite://")
            .or_else(|| url.strip_prefix("sqlite:"));
        match path.map(|p| p.split('?').next().unwrap_or(p)) {
            Some(p) if !p.is_empty() => Ok(Self::Sqlite(PathBuf::from(p))),
            _ => Err(UnsupportedDatabaseUrl(redact(url))),
        }
    }
}

/// Shows a URL without its password.
fn redact(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut parsed) if parsed.password().is_some() => {
            let _ = parsed.set_password(Some("****"));
            parsed.to_string()
        }
        _ => url.to_string(),
    }
}

impl std::fmt::Debug for DatabaseTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Postgres(url) => write!(f, "Postgres({})", redact(url)),
            Self::Sqlite(path) => write!(f, "Sqlite({})", path.display()),
        }
    }
}

/// Storage failures, interpreted once from driver errors.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("not found")]
    NotFound,
    #[error("conflicts with an existing row: {0}")]
    Conflict(String),
    /// The gate rules refused an event (for example a promotion by a stale probe).
    #[error(transparent)]
    Refused(#[from] GateError),
    #[error("stored data is corrupt: {0}")]
    Corrupt(String),
    /// The database cannot be reached or is overloaded: worth retrying later.
    #[error("the database is unavailable")]
    Unavailable(#[source] sqlx::Error),
    #[error("database error")]
    Backend(#[source] sqlx::Error),
    #[error("migration failed")]
    Migrate(#[from] sqlx::migrate::MigrateError),
}

impl From<sqlx::Error> for StoreError {
    fn from(err: sqlx::Error) -> Self {
        match &err {
            sqlx::Error::RowNotFound => Self::NotFound,
            sqlx::Error::Database(db) if db.is_unique_violation() => {
                Self::Conflict(db.constraint().unwrap_or(db.message()).to_string())
            }
            sqlx::Error::PoolTimedOut
            | sqlx::Error::PoolClosed
            | sqlx::Error::Io(_)
            | sqlx::Error::Tls(_)
            | sqlx::Error::WorkerCrashed => Self::Unavailable(err),
            sqlx::Error::Database(db)
                if unavailable_code(db.code().as_deref()) || ends_the_session(db.as_ref()) =>
            {
                Self::Unavailable(err)
            }
            _ => Self::Backend(err),
        }
    }
}

/// Database error codes that mean "not now" rather than "wrong": Postgres connection
/// exceptions (class 08), shutdown and too-many-connections (57P01–57P03, 53300); SQLite
/// busy and locked (5, 6).
fn unavailable_code(code: Option<&str>) -> bool {
    code.is_some_and(|c| {
        c.starts_with("08") || matches!(c, "57P01" | "57P02" | "57P03" | "53300" | "5" | "6")
    })
}

/// A Postgres error of FATAL or PANIC severity ends the session (the server refuses or drops
/// the connection: shutting down, not accepting connections, out of slots), whatever its code.
fn ends_the_session(db: &dyn sqlx::error::DatabaseError) -> bool {
    use sqlx::postgres::{PgDatabaseError, PgSeverity};
    db.try_downcast_ref::<PgDatabaseError>()
        .is_some_and(|pg| matches!(pg.severity(), PgSeverity::Fatal | PgSeverity::Panic))
}

impl Store {
    /// A keyset page in creation order: the rows `select` names (it ends `where id > $1 order
    /// by id limit $2`) after the cursor `after`. UUID v7 ids sort by creation time, and the
    /// nil UUID sorts first in both backends (uuid on Postgres, big-endian blob on SQLite).
    pub(crate) async fn page_after<R>(
        &self,
        select: &'static str,
        after: Option<uuid::Uuid>,
        limit: u32,
    ) -> Result<Vec<R>, StoreError>
    where
        R: Send
            + Unpin
            + for<'r> sqlx::FromRow<'r, sqlx::postgres::PgRow>
            + for<'r> sqlx::FromRow<'r, sqlx::sqlite::SqliteRow>,
    {
        let after = after.unwrap_or(uuid::Uuid::nil());
        Ok(dispatch!(self, |pool| {
            sqlx::query_as::<_, R>(select)
                .bind(after)
                .bind(i64::from(limit))
                .fetch_all(pool)
                .await
        })?)
    }
}

/// `NotFound` unless a write touched a row (an update or delete by id).
pub(crate) fn touched(rows_affected: u64) -> Result<(), StoreError> {
    if rows_affected == 0 {
        Err(StoreError::NotFound)
    } else {
        Ok(())
    }
}

impl StoreError {
    pub(crate) fn corrupt(what: impl std::fmt::Display) -> Self {
        Self::Corrupt(what.to_string())
    }
}

#[derive(Clone)]
enum Db {
    Postgres(PgPool),
    Sqlite(SqlitePool),
}

/// The database a store runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Postgres,
    /// The embedded file: one process writes at a time.
    Sqlite,
}

impl Backend {
    pub fn as_str(self) -> &'static str {
        match self {
            Backend::Postgres => "postgres",
            Backend::Sqlite => "sqlite",
        }
    }
}

impl std::fmt::Display for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The registry's storage. Cheap to clone (pools are reference-counted).
#[derive(Clone)]
pub struct Store {
    db: Db,
    /// Where this process's webhook sender takes the deliveries its appends queue, once it
    /// has asked for them ([`Store::hand_deliveries_to`]).
    handoff: Arc<OnceLock<webhooks::Handoff>>,
}

/// Runs `$body` with `$pool` bound to the store's pool, once per backend. The body is written
/// once; SQL in it must be valid in both dialects.
macro_rules! dispatch {
    ($store:expr, |$pool:ident| $body:expr) => {
        match &$store.db {
            $crate::storage::Db::Postgres($pool) => $body,
            $crate::storage::Db::Sqlite($pool) => $body,
        }
    };
}
pub(crate) use dispatch;

/// Opening a write transaction differs by backend.
pub(crate) trait BeginWrite {
    type Db: sqlx::Database;
    async fn begin_write(&self) -> Result<sqlx::Transaction<'static, Self::Db>, sqlx::Error>;
}

impl BeginWrite for PgPool {
    type Db = sqlx::Postgres;
    async fn begin_write(&self) -> Result<sqlx::Transaction<'static, Self::Db>, sqlx::Error> {
        self.begin().await
    }
}

impl BeginWrite for SqlitePool {
    type Db = sqlx::Sqlite;
    async fn begin_write(&self) -> Result<sqlx::Transaction<'static, Self::Db>, sqlx::Error> {
        // IMMEDIATE takes the write lock up front. A deferred transaction that reads and then
        // writes can deadlock against another one doing the same, which busy_timeout can't fix.
        self.begin_with("BEGIN IMMEDIATE").await
    }
}

/// Pool sizes and timeouts.
#[derive(Debug, Clone)]
pub struct PoolSettings {
    pub max_connections: u32,
    pub acquire_timeout: Duration,
}

impl Default for PoolSettings {
    fn default() -> Self {
        Self {
            max_connections: 16,
            acquire_timeout: Duration::from_secs(5),
        }
    }
}

impl Store {
    /// Connects (creating the SQLite file and its directory if needed). Does not migrate.
    pub async fn connect(
        target: &DatabaseTarget,
        settings: &PoolSettings,
    ) -> Result<Self, StoreError> {
        let db = match target {
            DatabaseTarget::Postgres(url) => {
                let options = PgConnectOptions::from_str(url)?;
                let pool = PgPoolOptions::new()
                    .max_connections(settings.max_connections)
                    .acquire_timeout(settings.acquire_timeout)
                    .connect_with(options)
                    .await?;
                Db::Postgres(pool)
            }
            DatabaseTarget::Sqlite(path) => Db::Sqlite(open_sqlite(path, settings).await?),
        };
        Ok(Self {
            db,
            handoff: Arc::default(),
        })
    }

    /// Applies the embedded migrations for this backend.
    pub async fn migrate(&self) -> Result<(), StoreError> {
        match &self.db {
            Db::Postgres(pool) => PG_MIGRATOR.run(pool).await?,
            Db::Sqlite(pool) => SQLITE_MIGRATOR.run(pool).await?,
        }
        Ok(())
    }

    pub fn backend(&self) -> Backend {
        match self.db {
            Db::Postgres(_) => Backend::Postgres,
            Db::Sqlite(_) => Backend::Sqlite,
        }
    }

    /// A round trip to the database (readiness).
    pub async fn ping(&self) -> Result<(), StoreError> {
        dispatch!(self, |pool| sqlx::query("select 1")
            .execute(pool)
            .await
            .map(drop))?;
        Ok(())
    }

    /// Closes the pools, waiting for connections in use.
    pub async fn close(&self) {
        dispatch!(self, |pool| pool.close().await)
    }
}

async fn open_sqlite(path: &Path, settings: &PoolSettings) -> Result<SqlitePool, StoreError> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| StoreError::Backend(sqlx::Error::Io(e)))?;
    }
    let options = SqliteConnectOptions::new()
        .filename(path)
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Normal)
        .foreign_keys(true)
        .busy_timeout(Duration::from_secs(10));
    Ok(SqlitePoolOptions::new()
        .max_connections(settings.max_connections.min(8))
        .acquire_timeout(settings.acquire_timeout)
        .connect_with(options)
        .await?)
}

#[cfg(test)]
mod tests;
