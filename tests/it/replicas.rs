//! Several replicas on one Postgres: two `cardgate serve` processes share the queue; 50 callees
//! change version at once; one process is killed mid-run. Every job runs once, and none is lost.

use std::collections::HashMap;
use std::process::Stdio;
use std::time::Duration;

use cardgate::fake_agent::{Behaviour, FakeAgent, FakeAgentConfig};
use cardgate::storage::DatabaseTarget;
use serde_json::{Value, json};
use tokio::process::{Child, Command};

use crate::support::TestDb;
use crate::support::proxy::LaggingProxy;

pub(crate) struct Replica {
    pub(crate) base: String,
    pub(crate) child: Child,
}

/// Starts `cardgate serve` on a port of its own choosing (port 0: no bind-drop-rebind race)
/// and reads the address it bound from its log. Agents reach every replica's webhook through
/// `public_url`: a front the test holds, since the replicas' ports are not known in advance.
pub(crate) async fn spawn_replica(database_url: &str, public_url: &str, log: &str) -> Replica {
    spawn_replica_logging(database_url, public_url, log, "warn,cardgate::app=info").await
}

/// [`spawn_replica`], logging at `rust_log`.
pub(crate) async fn spawn_replica_logging(
    database_url: &str,
    public_url: &str,
    log: &str,
    rust_log: &str,
) -> Replica {
    let url = url::Url::parse(database_url).unwrap();
    let database = url.path().trim_start_matches('/');
    let child = Command::new(env!("CARGO_BIN_EXE_cardgate"))
        .arg("serve")
        .env("DATABASE_URL", database_url)
        .env(
            "CARDGATE_SIGNING_KEY_FILE",
            crate::support::postgres_key_file(database),
        )
        .env(
            "CARDGATE_SECRETS_KEY_FILE",
            crate::support::postgres_secrets_file(database),
        )
        .env("CARDGATE_LISTEN", "127.0.0.1:0")
        .env("CARDGATE_PUBLIC_URL", public_url)
        .env("CARDGATE_ALLOW_NETWORKS", "127.0.0.0/8")
        // Every agent here is on 127.0.0.1, one host: not what these tests are about.
        .env("CARDGATE_HOST_CONCURRENCY", "64")
        .env("CARDGATE_HOST_INTERVAL_MS", "0")
        .env("CARDGATE_REFRESH_SCHEDULE", "*/1 * * * * *")
        .env("CARDGATE_JOB_LEASE_SECS", "3")
        .env("CARDGATE_WORKERS", "8")
        .env("CARDGATE_PUSH_BACKOFF_MS", "50")
        .env("CARDGATE_PROBE_DEADLINE_SECS", "20")
        .env("CARDGATE_ADMIN_TOKEN", crate::support::ADMIN_TOKEN)
        .env("RUST_LOG", rust_log)
        .stdout(Stdio::null())
        .stderr(
            std::fs::File::create(log)
                .map(Stdio::from)
                .unwrap_or(Stdio::null()),
        )
        .kill_on_drop(true)
        .spawn()
        .expect("cardgate starts");
    let client = reqwest::Client::new();
    for _ in 0..300 {
        let bound = std::fs::read_to_string(log).ok().and_then(|text| {
            let at = text.find("listening on http://")? + "listening on ".len();
            let url: String = text[at..]
                .chars()
                .take_while(|c| !c.is_whitespace())
                .collect();
            Some(url)
        });
        if let Some(base) = bound
            && client
                .get(format!("{base}/readyz"))
                .send()
                .await
                .is_ok_and(|r| r.status() == 200)
        {
            return Replica { base, child };
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("a replica did not become ready (log: {log})");
}

/// GETs `url` from a replica as the admin; the JSON answer.
pub(crate) async fn get(url: String) -> Value {
    crate::support::client_with(crate::support::ADMIN_TOKEN)
        .get(url)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// POSTs `body` to `path` on a replica as the admin, expecting success; the JSON answer.
pub(crate) async fn admin_post(base: &str, path: &str, body: Value) -> Value {
    let response = crate::support::client_with(crate::support::ADMIN_TOKEN)
        .post(format!("{base}{path}"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert!(
        response.status().is_success(),
        "{path}: {}",
        response.status()
    );
    response.json().await.unwrap()
}

/// Gate state per (callee, version) as one replica reports it.
async fn gates(base: &str) -> HashMap<(String, String), String> {
    let page = get(format!("{base}/v1/callees?limit=200")).await;
    let mut out = HashMap::new();
    for callee in page["items"].as_array().unwrap() {
        for s in callee["subjects"].as_array().unwrap() {
            out.insert(
                (
                    callee["id"].as_str().unwrap().to_string(),
                    s["protocol_version"].as_str().unwrap().to_string(),
                ),
                s["gate_state"].as_str().unwrap().to_string(),
            );
        }
    }
    out
}

async fn all_trusted(base: &str, version: &str, n: usize) -> bool {
    let g = gates(base).await;
    g.iter()
        .filter(|((_, v), gate)| v == version && *gate == "lifecycle-trusted")
        .count()
        == n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_run_every_job_once_and_lose_none_when_one_dies() {
    let Some(db) = TestDb::postgres().await else {
        return;
    };
    let DatabaseTarget::Postgres(url) = db.target.clone() else {
        unreachable!()
    };
    const N: usize = 50;
    let mut agents = Vec::new();
    for _ in 0..N {
        agents.push(
            FakeAgent::start(FakeAgentConfig::default(), Behaviour::Conformant)
                .await
                .unwrap(),
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let log = |name: &str| dir.path().join(name).display().to_string();
    // The webhook front: deliveries reach replica A, and land in the shared database, so the
    // probes of either replica see them.
    let front = LaggingProxy::start(Duration::ZERO).await;
    let public_url = format!("{}/", front.origin());
    let a = spawn_replica(&url, &public_url, &log("a.log")).await;
    front.forward_to(&a.base);
    let mut b = spawn_replica(&url, &public_url, &log("b.log")).await;

    // Register half through each replica; registration queues each 1.0 probe.
    let client = crate::support::client_with(crate::support::ADMIN_TOKEN);
    for (i, agent) in agents.iter().enumerate() {
        let base = if i % 2 == 0 { &a.base } else { &b.base };
        let r = client
            .post(format!("{base}/v1/callees"))
            .json(&json!({"card_url": agent.origin()}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 201, "{}", r.text().await.unwrap());
    }
    let mut ready = false;
    for _ in 0..600 {
        if all_trusted(&a.base, "1.0", N).await {
            ready = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        ready,
        "not every 1.0 subject was promoted: {:?}",
        get(format!("{}/v1/status", a.base)).await
    );

    // Every card starts offering 1.1. Kill replica B while it holds work.
    for agent in &agents {
        agent.set_versions(vec!["1.0", "1.1"]);
    }
    let b_instance = get(format!("{}/v1/status", b.base)).await["instance"]
        .as_str()
        .unwrap()
        .to_string();
    let mut killed_holding = 0;
    for _ in 0..300 {
        let running = get(format!("{}/v1/jobs?status=running&limit=200", a.base)).await;
        killed_holding = running["items"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|j| j["lease_owner"] == b_instance.as_str())
            .count();
        if killed_holding > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    b.child.start_kill().unwrap();
    let _ = b.child.wait().await;
    assert!(killed_holding > 0, "replica B never held a job to lose");

    let mut done = false;
    for _ in 0..900 {
        if all_trusted(&a.base, "1.1", N).await {
            done = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        done,
        "not every 1.1 subject was promoted after B died: {:?} {:?}",
        get(format!("{}/v1/status", a.base)).await,
        get(format!("{}/v1/jobs?limit=20", a.base)).await
    );
    // Let A drain whatever probe work is left (refreshes keep coming every second).
    for _ in 0..300 {
        let active = get(format!("{}/v1/jobs?status=running&limit=200", a.base)).await;
        let queued = get(format!("{}/v1/jobs?status=queued&limit=200", a.base)).await;
        let probes = |page: &Value| {
            page["items"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|j| j["kind"] == "probe")
                .count()
        };
        if probes(&active) + probes(&queued) == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Every probe ran once to completion; the ledger holds each event once.
    let mut appeared: HashMap<String, usize> = HashMap::new();
    let mut finished: HashMap<(String, String), usize> = HashMap::new();
    let mut promoted: HashMap<(String, String), usize> = HashMap::new();
    let mut after = 0;
    loop {
        let page = get(format!("{}/v1/ledger?after={after}&limit=200", a.base)).await;
        let events = page["items"].as_array().unwrap();
        for e in events {
            let key = (
                e["callee_id"].as_str().unwrap().to_string(),
                e["protocol_version"].as_str().unwrap().to_string(),
            );
            match e["kind"].as_str().unwrap() {
                "version-appeared" if key.1 == "1.1" => {
                    *appeared.entry(key.0.clone()).or_default() += 1
                }
                "probe-finished" => *finished.entry(key).or_default() += 1,
                "promoted" => *promoted.entry(key).or_default() += 1,
                _ => {}
            }
        }
        match page["next"].as_i64() {
            Some(n) => after = n,
            None => break,
        }
    }
    assert_eq!(appeared.len(), N);
    assert!(
        appeared.values().all(|n| *n == 1),
        "version-appeared twice: {appeared:?}"
    );
    assert_eq!(finished.len(), 2 * N, "{finished:?}");
    assert!(
        finished.values().all(|n| *n == 1),
        "a probe finished twice: {finished:?}"
    );
    assert_eq!(promoted.len(), 2 * N);
    assert!(
        promoted.values().all(|n| *n == 1),
        "promoted twice: {promoted:?}"
    );

    let runs = db.store.jobs(None, None, 1000).await.unwrap();
    assert!(
        runs.iter().all(|j| j.status.as_str() != "failed"),
        "no job failed"
    );
    let verify = get(format!("{}/v1/ledger/verify", a.base)).await;
    assert_eq!(verify["ok"], true, "{verify}");
    drop(a);
}

/// Polls `check` every 20 ms until it holds; returns how long that took, or `None` after
/// `within`.
async fn time_until<F, Fut>(within: Duration, mut check: F) -> Option<Duration>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let started = std::time::Instant::now();
    while started.elapsed() < within {
        if check().await {
            return Some(started.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    None
}

/// Replica B's answer about `callee`: HTTP status and gate state, asked with `token`.
async fn gate_on(base: &str, token: &str, callee: &str) -> (u16, Value) {
    let response = crate::support::client_with(token)
        .get(format!(
            "{base}/v1/trust?callee_id={callee}&caller_version=1.0"
        ))
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let body: Value = response.json().await.unwrap_or(Value::Null);
    (status, body["gate_state"].clone())
}

/// Two processes answer from their own memory: what one records, the other reflects within a
/// second (the demotion, a new key, a revoked key), and a listener whose connection the
/// database kills loses nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_reflect_each_others_writes_within_a_second() {
    let Some(db) = TestDb::postgres().await else {
        return;
    };
    let DatabaseTarget::Postgres(url) = db.target.clone() else {
        unreachable!()
    };
    let agent = FakeAgent::start(FakeAgentConfig::default(), Behaviour::Conformant)
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let log = |name: &str| dir.path().join(name).display().to_string();
    let front = LaggingProxy::start(Duration::ZERO).await;
    let public_url = format!("{}/", front.origin());
    let a = spawn_replica(&url, &public_url, &log("a.log")).await;
    front.forward_to(&a.base);
    let b = spawn_replica(&url, &public_url, &log("b.log")).await;
    let admin = crate::support::ADMIN_TOKEN;
    let client = crate::support::client_with(admin);
    // One registry, one signing key: both replicas publish the same key set.
    let keys = |base: &str| {
        let url = format!("{base}/.well-known/jwks.json");
        async move {
            reqwest::get(url)
                .await
                .unwrap()
                .json::<Value>()
                .await
                .unwrap()
        }
    };
    let (keys_a, keys_b) = (keys(&a.base).await, keys(&b.base).await);
    assert_eq!(keys_a, keys_b);
    assert_eq!(keys_a["keys"].as_array().map(Vec::len), Some(1));

    // Registered through A (which queues the probe); B's memory follows to the promotion.
    let created = admin_post(&a.base, "/v1/callees", json!({"card_url": agent.origin()})).await;
    let callee = created["id"].as_str().unwrap().to_string();
    let promoted = time_until(Duration::from_secs(30), || async {
        gate_on(&b.base, admin, &callee).await.1 == "lifecycle-trusted"
    })
    .await;
    assert!(promoted.is_some(), "B never saw the promotion");

    // A demotion recorded through A.
    let report: Value = client
        .post(format!("{}/v1/callees/{callee}/reports", a.base))
        .json(
            &json!({"protocol_version": "1.0", "trigger": "terminal-without-timestamp",
            "evidence": {"observed": [{"state": "TASK_STATE_COMPLETED"}]}}),
        )
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(report["outcome"], "demoted", "{report}");
    let seen = time_until(Duration::from_secs(1), || async {
        gate_on(&b.base, admin, &callee).await.1 == "demoted"
    })
    .await;
    assert!(seen.is_some(), "B did not reflect A's demotion within 1 s");
    eprintln!("demotion reached B in {seen:?}");

    // A key created through A works on B within a second; revoked through A, it fails there
    // within a second.
    let key = admin_post(
        &a.base,
        "/v1/keys",
        json!({"name": "replicated", "role": "reader"}),
    )
    .await;
    let secret = key["key"].as_str().unwrap().to_string();
    let works = time_until(Duration::from_secs(1), || async {
        gate_on(&b.base, &secret, &callee).await.0 == 200
    })
    .await;
    assert!(
        works.is_some(),
        "a key created on A did not work on B within 1 s"
    );
    let revoked = client
        .delete(format!(
            "{}/v1/keys/{}",
            a.base,
            key["id"].as_str().unwrap()
        ))
        .send()
        .await
        .unwrap();
    assert!(revoked.status().is_success());
    let fails = time_until(Duration::from_secs(1), || async {
        gate_on(&b.base, &secret, &callee).await.0 == 401
    })
    .await;
    assert!(
        fails.is_some(),
        "a key revoked on A still worked on B after 1 s"
    );
    eprintln!("key created → usable on B in {works:?}; revoked → refused on B in {fails:?}");

    // The database kills every listening connection; a change made right after is not lost.
    let killed = db
        .raw(
            "select pg_terminate_backend(pid) from pg_stat_activity \
             where datname = current_database() and query ilike 'listen%'",
        )
        .await
        .unwrap();
    assert!(
        killed >= 2,
        "expected both replicas' listeners, killed {killed}"
    );
    let key = admin_post(
        &a.base,
        "/v1/keys",
        json!({"name": "after-the-kill", "role": "reader"}),
    )
    .await;
    let secret = key["key"].as_str().unwrap().to_string();
    let recovered = time_until(Duration::from_secs(5), || async {
        gate_on(&b.base, &secret, &callee).await.0 == 200
    })
    .await;
    assert!(
        recovered.is_some(),
        "a change made while B's listener was down was lost"
    );
    eprintln!("after the listener was killed, B caught up in {recovered:?}");
    drop((a, b));
}
