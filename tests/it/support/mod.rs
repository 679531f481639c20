//! Test harness: fresh databases on both backends, a real cardgate server on a loopback port,
//! and a card server playing the agents.

pub(crate) mod agents;
pub(crate) mod auth_front;
pub(crate) mod cards;
pub(crate) mod gate;
pub(crate) mod proxy;
pub(crate) mod tls;

use std::net::SocketAddr;
use std::path::PathBuf;

use cardgate::app::{App, Settings};
use cardgate::remote::NetworkPolicy;
use cardgate::storage::{DatabaseTarget, PoolSettings, Store};
use sqlx::{AssertSqlSafe, Connection};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// Generates one `#[tokio::test]` per backend for each scenario `async fn name(db: TestDb)`:
/// `name::sqlite` always runs; `name::postgres` runs when `TEST_DATABASE_URL` is set (and
/// `.ci/run` always sets it, so Postgres is mandatory in CI).
macro_rules! on_both_backends {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sqlite() {
                super::$name($crate::support::TestDb::sqlite().await).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn postgres() {
                if let Some(db) = $crate::support::TestDb::postgres().await {
                    super::$name(db).await;
                }
            }
        }
    )*};
}
pub(crate) use on_both_backends;

/// A fresh, migrated database that is removed when dropped.
pub(crate) struct TestDb {
    pub target: DatabaseTarget,
    pub store: Store,
    _cleanup: Cleanup,
}

enum Cleanup {
    Dir(#[allow(dead_code)] tempfile::TempDir),
    Postgres { admin_url: String, name: String },
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        if let Cleanup::Postgres { admin_url, name } = self {
            let _ = std::fs::remove_file(postgres_key_file(name));
            let _ = std::fs::remove_file(postgres_secrets_file(name));
            let (admin_url, name) = (admin_url.clone(), name.clone());
            // Drop runs inside the test's runtime; use a thread with its own.
            let _ = std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                rt.block_on(async {
                    if let Ok(mut conn) = sqlx::PgConnection::connect(&admin_url).await {
                        let sql = format!("drop database if exists \"{name}\" with (force)");
                        let _ = sqlx::query(AssertSqlSafe(sql)).execute(&mut conn).await;
                    }
                });
            })
            .join();
        }
    }
}

impl TestDb {
    pub(crate) async fn sqlite() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let target = DatabaseTarget::Sqlite(dir.path().join("cardgate.db"));
        let store = open(&target).await;
        Self {
            target,
            store,
            _cleanup: Cleanup::Dir(dir),
        }
    }

    /// A new database on the server named by `TEST_DATABASE_URL`, or `None` (with a loud
    /// message) when it is unset.
    pub(crate) async fn postgres() -> Option<Self> {
        let Ok(admin_url) = std::env::var("TEST_DATABASE_URL") else {
            skip(
                "a Postgres test",
                "TEST_DATABASE_URL is unset",
                "CARDGATE_REQUIRE_POSTGRES",
            );
            return None;
        };
        let name = format!("cardgate_t_{}", uuid::Uuid::new_v4().simple());
        let mut conn = sqlx::PgConnection::connect(&admin_url)
            .await
            .expect("TEST_DATABASE_URL is set but Postgres does not answer");
        sqlx::query(AssertSqlSafe(format!("create database \"{name}\"")))
            .execute(&mut conn)
            .await
            .expect("create test database");
        let mut url = url::Url::parse(&admin_url).expect("TEST_DATABASE_URL is a URL");
        url.set_path(&name);
        let target = DatabaseTarget::Postgres(url.to_string());
        let store = open(&target).await;
        Some(Self {
            target,
            store,
            _cleanup: Cleanup::Postgres { admin_url, name },
        })
    }

    /// The URL of the database, for a separate process (`DATABASE_URL`).
    pub(crate) fn url(&self) -> String {
        match &self.target {
            DatabaseTarget::Postgres(url) => url.clone(),
            DatabaseTarget::Sqlite(path) => format!("sqlite://{}", path.display()),
        }
    }

    pub(crate) fn backend(&self) -> &'static str {
        self.store.backend().as_str()
    }

    /// Runs raw SQL on a separate connection, as an attacker with database access would.
    pub(crate) async fn raw(&self, sql: &str) -> Result<u64, sqlx::Error> {
        let sql = AssertSqlSafe(sql.to_string());
        match &self.target {
            DatabaseTarget::Postgres(url) => {
                let mut conn = sqlx::PgConnection::connect(url).await?;
                Ok(sqlx::query(sql).execute(&mut conn).await?.rows_affected())
            }
            DatabaseTarget::Sqlite(path) => {
                let mut conn = sqlx::SqliteConnection::connect(&sqlite_url(path)).await?;
                Ok(sqlx::query(sql).execute(&mut conn).await?.rows_affected())
            }
        }
    }
}

fn sqlite_url(path: &std::path::Path) -> String {
    format!("sqlite://{}", path.display())
}

async fn open(target: &DatabaseTarget) -> Store {
    let store = Store::connect(target, &PoolSettings::default())
        .await
        .expect("connect");
    store.migrate().await.expect("migrate");
    store
}

/// A cardgate server on a loopback port, talking to a real database.
pub(crate) struct TestServer {
    pub addr: SocketAddr,
    pub client: reqwest::Client,
    stop: Option<oneshot::Sender<()>>,
    handle: Option<JoinHandle<anyhow::Result<()>>>,
}

/// The bootstrap admin credential every test server accepts.
pub(crate) const ADMIN_TOKEN: &str = "cardgate-test-admin-token-0123456789abcdef";

/// A client that sends `token` as its bearer key.
pub(crate) fn client_with(token: &str) -> reqwest::Client {
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert(
        reqwest::header::AUTHORIZATION,
        format!("Bearer {token}").parse().unwrap(),
    );
    reqwest::Client::builder()
        .default_headers(headers)
        .build()
        .unwrap()
}

/// The signing key of a Postgres test database: one per database (replicas of it share it),
/// outside the repository, removed with the database.
pub(crate) fn postgres_key_file(database: &str) -> PathBuf {
    std::env::temp_dir().join(format!("{database}-signing-key.pem"))
}

/// The secrets key of a Postgres test database, likewise.
pub(crate) fn postgres_secrets_file(database: &str) -> PathBuf {
    std::env::temp_dir().join(format!("{database}-secrets-key"))
}

/// Settings for tests: loopback allowed (the agents run there), short fetch deadlines. The
/// signing key sits beside an SQLite file (its default), or in the temp directory.
pub(crate) fn test_settings(target: DatabaseTarget) -> Settings {
    let mut settings = Settings::new(target.clone());
    if let DatabaseTarget::Postgres(url) = &target {
        let name = url::Url::parse(url)
            .unwrap()
            .path()
            .trim_start_matches('/')
            .to_string();
        settings.transparency.signing_key_file = postgres_key_file(&name);
        settings.secrets_key_file = postgres_secrets_file(&name);
    }
    settings.auth = cardgate::http::permissions::AuthSettings {
        rate_per_sec: 10_000.0,
        burst: 10_000.0,
        anonymous_per_sec: 10_000.0,
        anonymous_burst: 10_000.0,
        ..Default::default()
    }
    .with_admin_token(ADMIN_TOKEN);
    let allowed = NetworkPolicy::parse_allowed("127.0.0.0/8,::1/128").unwrap();
    settings.outbound.policy = NetworkPolicy::new(allowed);
    settings.discovery.fetch_timeout = std::time::Duration::from_secs(2);
    settings.probe.deadline = std::time::Duration::from_secs(15);
    settings.probe.push_wait = std::time::Duration::from_secs(5);
    settings.probe.push_backoff = std::time::Duration::from_millis(50);
    settings.probe.poll_interval = std::time::Duration::from_millis(50);
    settings.worker.poll = std::time::Duration::from_millis(100);
    // Tests that are about scheduling turn these on; the rest see no background probes, and
    // no sweep that a wall clock (a refresh every five minutes, a re-probe at 03:00) would
    // drop into the middle of a test.
    settings.cards.probe_on_change = false;
    // Every test agent is on 127.0.0.1, one host to the registry: with the default limits the
    // suite's probes would queue behind each other. The politeness tests set their own.
    settings.hosts = cardgate::domain::politeness::HostLimits::loose(64);
    settings.schedule.refresh = cardgate::runtime::schedule::Schedule::Off;
    settings.schedule.reprobe = cardgate::runtime::schedule::Schedule::Off;
    settings
}

impl TestServer {
    pub(crate) async fn start(target: DatabaseTarget) -> Self {
        Self::start_with(test_settings(target)).await
    }

    pub(crate) async fn start_with(mut settings: Settings) -> Self {
        // Bind first: the push webhook's public URL is this server's own address.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().unwrap();
        settings.listen = addr;
        if settings.probe.public_url.is_none() {
            settings.probe.public_url = Some(format!("http://{addr}/").parse().unwrap());
        }
        let app = App::build(settings).await.expect("app builds");
        // The decisions load in the background; a test asks as soon as this returns.
        let view = app.services.view.clone();
        for _ in 0..500 {
            if view.is_loaded() {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        assert!(view.is_loaded(), "the read model did not load within 5 s");
        let (stop, stopped) = oneshot::channel::<()>();
        let handle = tokio::spawn(app.serve(listener, async {
            let _ = stopped.await;
        }));
        Self {
            addr,
            client: client_with(ADMIN_TOKEN),
            stop: Some(stop),
            handle: Some(handle),
        }
    }

    pub(crate) fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Graceful stop; waits until the server has closed its database pool.
    pub(crate) async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(handle) = self.handle.take() {
            handle
                .await
                .expect("server task")
                .expect("server stopped cleanly");
        }
    }

    pub(crate) async fn get(&self, path: &str) -> (u16, serde_json::Value) {
        json_of(self.client.get(self.url(path)).send().await.expect("GET")).await
    }

    pub(crate) async fn post(
        &self,
        path: &str,
        body: serde_json::Value,
    ) -> (u16, serde_json::Value) {
        json_of(
            self.client
                .post(self.url(path))
                .json(&body)
                .send()
                .await
                .expect("POST"),
        )
        .await
    }

    pub(crate) async fn put(
        &self,
        path: &str,
        body: serde_json::Value,
    ) -> (u16, serde_json::Value) {
        json_of(
            self.client
                .put(self.url(path))
                .json(&body)
                .send()
                .await
                .expect("PUT"),
        )
        .await
    }

    /// Registers the card at `card_url`, expecting success; returns the callee.
    pub(crate) async fn register(&self, card_url: &str) -> serde_json::Value {
        let (status, body) = self
            .post("/v1/callees", serde_json::json!({ "card_url": card_url }))
            .await;
        assert_eq!(status, 201, "registering {card_url}: {body}");
        body
    }
}

/// Status and JSON body (`Null` if the body is not JSON).
pub(crate) async fn json_of(response: reqwest::Response) -> (u16, serde_json::Value) {
    let status = response.status().as_u16();
    let body = response.bytes().await.expect("body");
    (
        status,
        serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null),
    )
}

/// Asserts the error envelope and returns its code.
#[track_caller]
pub(crate) fn error_code(body: &serde_json::Value) -> &str {
    let error = body
        .get("error")
        .unwrap_or_else(|| panic!("no error envelope in {body}"));
    assert!(
        error["message"].as_str().is_some_and(|m| !m.is_empty()),
        "no message in {body}"
    );
    error["code"]
        .as_str()
        .unwrap_or_else(|| panic!("no code in {body}"))
}

/// A path inside the repository.
pub(crate) fn repo_path(relative: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(relative)
}

/// Every `.rs` file under `dir`, recursively.
pub(crate) fn rust_sources(dir: &std::path::Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Skips the rest of a test whose external part (`what`) is missing, or fails it when the
/// environment variable `required_by` is `1` (`.ci/run` sets every such variable, so nothing
/// CI can provide is ever skipped there). Skips are also appended to
/// `$CARGO_TARGET_TMPDIR/skipped.txt`, which `.ci/run` prints after the tests.
pub(crate) fn skip(what: &str, why: &str, required_by: &str) {
    if matches!(std::env::var(required_by).as_deref(), Ok("1" | "true")) {
        panic!("{what} is required ({required_by}=1): {why}");
    }
    eprintln!("\n===== SKIPPED {what}: {why} =====\n");
    let log = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("skipped.txt");
    if let Ok(mut file) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
    {
        use std::io::Write;
        let _ = writeln!(file, "{what}: {why}");
    }
}

/// Chromium for the browser checks (`CARDGATE_TEST_CHROMIUM`, else a usual path), or `None`
/// with a skip naming `what`. CI installs Debian's `chromium` and requires it
/// (`CARDGATE_REQUIRE_BROWSER=1`).
pub(crate) fn chromium(what: &str) -> Option<PathBuf> {
    let found = std::env::var_os("CARDGATE_TEST_CHROMIUM")
        .map(PathBuf::from)
        .or_else(|| {
            [
                "/usr/bin/chromium",
                "/usr/bin/chromium-browser",
                "/usr/bin/google-chrome",
            ]
            .into_iter()
            .map(PathBuf::from)
            .find(|p| p.exists())
        });
    if found.is_none() {
        skip(
            what,
            "no Chromium (apt-get install chromium)",
            "CARDGATE_REQUIRE_BROWSER",
        );
    }
    found
}

/// The tests' Python (the SDK agent's virtualenv, which also holds the reference libraries
/// some tests check cardgate's output with), or `None` with a skip naming `what`.
pub(crate) fn test_python(what: &str) -> Option<PathBuf> {
    let python = std::env::var_os("CARDGATE_TEST_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_path("tests/agents/python/.venv/bin/python"));
    if python.exists() {
        Some(python)
    } else {
        skip(
            what,
            "no Python virtualenv from tests/agents/python/requirements.txt",
            "CARDGATE_REQUIRE_SDK_AGENTS",
        );
        None
    }
}

/// Runs the `cardgate` binary with `args` and `env`; its exit code and its stdout then stderr.
pub(crate) async fn run_cardgate(args: &[&str], env: &[(&str, &str)]) -> (i32, String) {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_cardgate"))
        .args(args)
        .envs(env.iter().copied())
        .env_remove("DATABASE_URL")
        .output()
        .await
        .expect("cardgate runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().unwrap_or(-1), text)
}
