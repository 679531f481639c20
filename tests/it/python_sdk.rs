//! Interop with an agent built on the official Python SDK (a2a-sdk 1.3.0): what it really does,
//! probed over v1.0 and v0.3.
//!
//! The agent runs from a virtualenv: `CARDGATE_TEST_PYTHON` names its python, else
//! `tests/agents/python/.venv/bin/python` is used (see tests/agents/python/README.md). Without
//! either the test is skipped loudly, unless `CARDGATE_REQUIRE_PYTHON_AGENT=1` (set by `.ci/run`),
//! which makes it fail instead.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::probes::{decision, events, finding, gate, probe, register};
use crate::support::{TestDb, TestServer, repo_path};

struct PythonAgent {
    origin: String,
    _child: Child,
}

fn python() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("CARDGATE_TEST_PYTHON") {
        return Some(PathBuf::from(path));
    }
    let venv = repo_path("tests/agents/python/.venv/bin/python");
    venv.exists().then_some(venv)
}

impl PythonAgent {
    async fn start() -> Option<Self> {
        let Some(python) = python() else {
            let msg = "the Python SDK agent's virtualenv is missing (set CARDGATE_TEST_PYTHON or see tests/agents/python/README.md)";
            if std::env::var("CARDGATE_REQUIRE_PYTHON_AGENT").as_deref() == Ok("1") {
                panic!("{msg}");
            }
            eprintln!("\n=====\nSKIPPED: {msg}\n=====\n");
            return None;
        };
        let mut child = Command::new(&python)
            .arg(repo_path("tests/agents/python/agent.py"))
            .args(["--host", "127.0.0.1", "--port", "0", "--slow-seconds", "2"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", python.display()));
        let stdout = child.stdout.take().unwrap();
        let mut lines = BufReader::new(stdout).lines();
        let ready = tokio::time::timeout(Duration::from_secs(60), async {
            while let Some(line) = lines.next_line().await.unwrap() {
                if let Some(origin) = line.strip_prefix("READY ") {
                    return Some(origin.trim().to_string());
                }
            }
            None
        })
        .await
        .expect("the Python agent did not start within 60 s")
        .expect("the Python agent exited before it was ready");
        Some(Self {
            origin: ready,
            _child: child,
        })
    }
}

/// The probe as any operator would leave it: the default script, nothing shaped for this agent.
fn script() -> Value {
    json!({})
}

fn condition<'a>(decision: &'a Value, id: &str) -> &'a Value {
    decision["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == id)
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_agent_is_probed_over_v1_and_v03_and_shows_what_it_really_does() {
    let Some(agent) = PythonAgent::start().await else {
        return;
    };
    let db = TestDb::sqlite().await;
    let server = TestServer::start(db.target.clone()).await;
    let callee = register(&server, &agent.origin, script()).await;
    let (_, detail) = server.get(&format!("/v1/callees/{callee}")).await;
    assert_eq!(
        detail["card"]["signature"]["status"], "verified",
        "{detail:#}"
    );
    assert_eq!(detail["card"]["signature"]["key_source"], "jku");

    for (version, wire) in [("1.0", "json-rpc-v1"), ("0.3", "json-rpc-v03")] {
        let run = probe(&server, &callee, version).await;
        assert_eq!(run["status"], "finished", "{version}: {run:#}");
        assert_eq!(run["wire"], wire);
        // A full lifecycle, streamed and pushed.
        assert_eq!(
            finding(&run, "LC-FULL-LIFECYCLE")["status"],
            "pass",
            "{version}: {:#}",
            run["findings"]
        );
        assert_eq!(
            run["capabilities"]["streaming"]["status"], "passed",
            "{version}: {:#}",
            run["capabilities"]
        );
        assert_eq!(
            run["capabilities"]["pushNotifications"]["status"], "passed",
            "{version}: {:#}",
            run["capabilities"]
        );
        assert_eq!(finding(&run, "LC-SINGLE-TERMINAL")["status"], "pass");
        assert_eq!(finding(&run, "LC-TERMINAL-NO-TIMESTAMP")["status"], "pass");
        // What it really does: the submitted state carries no status.timestamp.
        let timestamps = finding(&run, "LC-TIMESTAMPS");
        assert_eq!(timestamps["status"], "fail", "{version}");
        let message = timestamps["message"].as_str().unwrap();
        assert!(message.contains("submitted"), "{version}: {message}");
        assert!(!message.contains("completed"), "{version}: {message}");
        // So it is not promoted under the strict posture, and nothing demotes it.
        assert_eq!(run["verdict"]["passed"], false);
        assert_eq!(events(&run), ["probe-finished"], "{version}");
        assert_eq!(gate(&server, &callee, version).await, "card-trusted");

        let strict = decision(
            &server,
            &callee,
            &format!("caller_version={version}&requires=streaming,pushNotifications"),
        )
        .await;
        assert_eq!(strict["authoritative"], false, "{version}: {strict:#}");
        assert_eq!(condition(&strict, "lifecycle-probe")["status"], "fail");
        let relaxed = decision(
            &server,
            &callee,
            &format!("caller_version={version}&dedup=none&requires=streaming,pushNotifications"),
        )
        .await;
        assert_eq!(relaxed["authoritative"], true, "{version}: {relaxed:#}");
        assert_eq!(relaxed["gate_state"], "card-trusted");
    }
    server.stop().await;
}

/// No push inbox: the REST probe below registers no webhook.
struct NoInbox;

#[async_trait::async_trait]
impl cardgate::service::probe::PushInbox for NoInbox {
    async fn deliveries(&self, _token: &str) -> Vec<cardgate::service::probe::InboxDelivery> {
        Vec::new()
    }
}

struct Quiet;

impl cardgate::service::probe::Progress for Quiet {
    fn step(&self, _message: &str) {}
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_http_json_binding_is_spoken_where_a_card_offers_only_that() {
    use cardgate::domain::card::parse_card;
    use cardgate::domain::probe::ProbeScript;
    use cardgate::domain::version::ProtocolVersion;
    use cardgate::remote::{NetworkPolicy, Outbound, OutboundSettings};
    use cardgate::service::probe::{ProbeSettings, probe_interface};

    let Some(agent) = PythonAgent::start().await else {
        return;
    };
    let card: Value = reqwest::Client::new()
        .get(format!("{}/.well-known/agent-card.json", agent.origin))
        .header("A2A-Version", "1.0")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let mut card = parse_card(&card).unwrap();
    card.interfaces.retain(|i| i.binding == "HTTP+JSON");
    assert_eq!(card.interfaces.len(), 1, "the agent offers HTTP+JSON 1.0");

    let policy = NetworkPolicy::new(NetworkPolicy::parse_allowed("127.0.0.0/8").unwrap());
    let outbound = Outbound::new(OutboundSettings {
        policy,
        ..OutboundSettings::default()
    })
    .unwrap();
    let settings = ProbeSettings::default();
    let out = probe_interface(
        &outbound,
        &settings,
        &card,
        ProtocolVersion::new(1, 0),
        &ProbeScript::default(),
        None,
        &NoInbox,
        &Quiet,
    )
    .await
    .unwrap();
    assert_eq!(out.wire.as_str(), "rest-v1");
    let find = |code: &str| {
        out.judgement
            .findings
            .iter()
            .find(|f| f.code == code)
            .unwrap()
    };
    assert_eq!(
        serde_json::to_value(find("LC-FULL-LIFECYCLE").status).unwrap(),
        "pass",
        "{:#?}",
        out.judgement.findings
    );
    assert_eq!(
        serde_json::to_value(find("CAP-STREAMING").status).unwrap(),
        "pass",
        "{:#?}",
        out.judgement.findings
    );
    assert_eq!(
        serde_json::to_value(find("LC-GET-AGREES").status).unwrap(),
        "pass"
    );
    let methods: Vec<&str> = out
        .transcript
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["method"].as_str().unwrap())
        .collect();
    assert!(
        methods.contains(&"POST /message:stream")
            && methods.iter().any(|m| m.starts_with("GET /tasks/")),
        "{methods:?}"
    );
}
