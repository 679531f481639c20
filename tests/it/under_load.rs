//! A conformant agent is never refused on timing. The official SDK agents, probed with an
//! `input-required` turn, get the verdict they get on a quiet machine while a CPU hog runs on
//! every core and every push delivery takes a second to reach cardgate (a slow webhook path),
//! 20 runs in a row: every wait in a cycle ends on evidence, and what cardgate itself cut short
//! is `not-exercised`, never a failure of the agent.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::{Value, json};

use crate::probes::{probe, register};
use crate::support::agents::{Sdk, SdkAgent};
use crate::support::proxy::LaggingProxy;
use crate::support::{TestDb, TestServer, test_settings};

/// How many loaded runs must each match the quiet verdict.
const RUNS: usize = 20;

/// How long every push delivery takes to reach cardgate.
const PUSH_DELAY: Duration = Duration::from_secs(1);

/// A thread spinning on every core until dropped.
struct CpuHog {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl CpuHog {
    fn start() -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let cores = std::thread::available_parallelism().map_or(2, usize::from);
        let threads = (0..cores)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    let mut x: u64 = 1;
                    while !stop.load(Ordering::Relaxed) {
                        x = std::hint::black_box(x.wrapping_mul(6_364_136_223_846_793_005) + 1);
                    }
                })
            })
            .collect();
        Self { stop, threads }
    }
}

impl Drop for CpuHog {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

/// A run's verdict as a comparable value: whether it passed, each finding's status, each
/// capability's outcome.
fn verdict_of(run: &Value) -> (bool, BTreeMap<String, String>) {
    let mut out = BTreeMap::new();
    for f in run["findings"].as_array().into_iter().flatten() {
        out.insert(
            f["code"].as_str().unwrap_or_default().to_string(),
            f["status"].as_str().unwrap_or_default().to_string(),
        );
    }
    for (cap, outcome) in run["capabilities"].as_object().into_iter().flatten() {
        out.insert(
            cap.clone(),
            outcome["status"].as_str().unwrap_or_default().to_string(),
        );
    }
    (run["verdict"]["passed"].as_bool().unwrap_or(false), out)
}

fn script() -> Value {
    json!({"message": "need-input", "follow_ups": ["more"]})
}

/// An SDK agent, its verdict on a quiet machine, and a second registry whose webhook sits
/// behind a front that delays every push delivery.
struct Loaded {
    sdk: Sdk,
    expected: (bool, BTreeMap<String, String>),
    server: TestServer,
    callee: String,
    _agent: SdkAgent,
    _front: LaggingProxy,
    _db: TestDb,
}

async fn quiet_verdict(sdk: Sdk) -> Option<Loaded> {
    let agent = SdkAgent::start(sdk, None).await?;
    let quiet_db = TestDb::sqlite().await;
    let quiet = TestServer::start(quiet_db.target.clone()).await;
    let callee = register(&quiet, &agent.origin, script()).await;
    let expected = verdict_of(&probe(&quiet, &callee, "1.0").await);
    quiet.stop().await;

    let front = LaggingProxy::delaying_requests(PUSH_DELAY).await;
    let db = TestDb::sqlite().await;
    let mut settings = test_settings(db.target.clone());
    settings.probe.public_url = Some(format!("{}/", front.origin()).parse().unwrap());
    let server = TestServer::start_with(settings).await;
    front.forward_to(&server.url(""));
    let callee = register(&server, &agent.origin, script()).await;
    Some(Loaded {
        sdk,
        expected,
        server,
        callee,
        _agent: agent,
        _front: front,
        _db: db,
    })
}

async fn loaded_runs(loaded: &Loaded) {
    for i in 1..=RUNS {
        let run = probe(&loaded.server, &loaded.callee, "1.0").await;
        assert_eq!(
            verdict_of(&run),
            loaded.expected,
            "{:?}, loaded run {i} of {RUNS}: {:#}",
            loaded.sdk,
            run["findings"]
        );
    }
}

// Ignored by the plain `cargo test`: a hog on every core would slow every test running beside
// it. `.ci/run` runs it on its own, after the suite (`cargo test --test it under_load --
// --ignored`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "runs a CPU hog on every core: run alone, as .ci/run does"]
async fn the_sdk_agents_verdicts_do_not_change_under_a_cpu_hog_and_slow_pushes() {
    let mut agents = Vec::new();
    for sdk in [Sdk::Js, Sdk::Python] {
        agents.extend(quiet_verdict(sdk).await);
    }
    // The hog starts once the quiet verdicts are in, and runs through every loaded run.
    let hog = CpuHog::start();
    futures::future::join_all(agents.iter().map(loaded_runs)).await;
    drop(hog);
    for loaded in agents {
        loaded.server.stop().await;
    }
}
