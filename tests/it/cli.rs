//! `cardgate probe`: a real binary against a fake agent on loopback (over JSON-RPC and gRPC,
//! and behind a TLS front with a private CA).

use std::process::Output;

use cardgate::fake_agent::{Behaviour, FakeAgent, FakeAgentConfig};
use serde_json::{Value, json};

use crate::support::tls::TlsFront;

pub(crate) async fn cardgate_probe(args: &[&str]) -> Output {
    cardgate_probe_with(args, &[]).await
}

/// `cardgate probe` with more of its environment set.
pub(crate) async fn cardgate_probe_with(args: &[&str], env: &[(&str, &str)]) -> Output {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_cardgate"))
        .arg("probe")
        .args(args)
        .env("CARDGATE_ALLOW_NETWORKS", "127.0.0.0/8,::1/128")
        .envs(env.iter().copied())
        .env_remove("DATABASE_URL")
        .output()
        .await
        .expect("cardgate runs")
}

/// `cardgate probe … --json`: asserts the exit code and returns the report it printed.
pub(crate) async fn json_report(args: &[&str], exit: i32) -> Value {
    let out = cardgate_probe(args).await;
    assert_eq!(
        out.status.code(),
        Some(exit),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("--json prints JSON")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probe_exits_0_when_the_subject_would_be_promoted_and_prints_a_readable_report() {
    let agent = FakeAgent::start(FakeAgentConfig::default(), Behaviour::Conformant)
        .await
        .unwrap();
    let out = cardgate_probe(&[&agent.origin()]).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("would be PROMOTED to lifecycle-trusted"),
        "{stdout}"
    );
    assert!(stdout.contains("pass LC-FULL-LIFECYCLE"), "{stdout}");
    // Progress is printed step by step on stderr.
    assert!(
        stderr.contains("lifecycle task: streaming send"),
        "{stderr}"
    );
    assert!(stderr.contains("webhook registered"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probe_exits_1_when_not_and_says_why_in_json() {
    let agent = FakeAgent::start(FakeAgentConfig::default(), Behaviour::TwoTerminalEvents)
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let junit = dir.path().join("probe.xml");
    let junit_arg = junit.display().to_string();
    let report = json_report(&[&agent.origin(), "--json", "--junit", &junit_arg], 1).await;
    let subject = &report["subjects"][0];
    assert_eq!(subject["protocol_version"], "1.0");
    assert_eq!(subject["would_promote"], false);
    assert_eq!(subject["verdict"]["triggers"][0][0], "terminal");
    assert_eq!(report["signature"]["status"], "verified");

    // The JUnit file has one case per finding and one per trial, and the failed finding
    // fails its case, as each failed trial does.
    let xml = std::fs::read_to_string(&junit).expect("--junit writes the file");
    let findings = subject["findings"].as_array().unwrap();
    let trials = &subject["trials"];
    let count = trials["count"].as_u64().unwrap() as usize;
    assert_eq!(
        xml.matches("<testcase ").count(),
        findings.len() + count,
        "{xml}"
    );
    let failed = findings.iter().filter(|f| f["status"] == "fail").count();
    assert!(failed >= 1);
    let failed_trials = trials["failed"].as_array().unwrap().len();
    assert_eq!(failed_trials, count, "every trial sends the end twice");
    assert_eq!(
        xml.matches("<failure ").count(),
        failed + failed_trials,
        "{xml}"
    );
    assert!(
        xml.contains(r#"<testcase classname="cardgate.probe.1.0" name="LC-SINGLE-TERMINAL">"#),
        "{xml}"
    );
}

/// `cardgate probe --binding grpc` against the fake agent serving v1.0 over gRPC only: the
/// conformant agent would be promoted, the one that drops the terminal timestamp would not, and
/// the report names the trigger and the binding it was judged on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probe_over_grpc_promotes_the_conformant_agent_and_names_the_trigger_of_a_misbehaving_one()
{
    let grpc = FakeAgentConfig {
        grpc: true,
        ..FakeAgentConfig::default()
    };
    let conformant = FakeAgent::start(grpc.clone(), Behaviour::Conformant)
        .await
        .unwrap();
    let out = cardgate_probe(&[&conformant.origin(), "--binding", "grpc"]).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("would be PROMOTED to lifecycle-trusted"),
        "{stdout}"
    );

    let misbehaving = FakeAgent::start(grpc, Behaviour::NoTerminalTimestamp)
        .await
        .unwrap();
    let report = json_report(&[&misbehaving.origin(), "--binding", "grpc", "--json"], 1).await;
    let subject = &report["subjects"][0];
    assert_eq!(
        (&subject["binding"], &subject["wire"]),
        (&json!("GRPC"), &json!("grpc-v1"))
    );
    assert_eq!(subject["would_promote"], false);
    assert_eq!(
        subject["verdict"]["triggers"][0][0], "timestamp",
        "{subject:#}"
    );
    let failed: Vec<&Value> = subject["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["status"] == "fail")
        .map(|f| &f["code"])
        .collect();
    assert!(
        failed.contains(&&json!("LC-TERMINAL-NO-TIMESTAMP")),
        "{subject:#}"
    );
}

/// An agent behind TLS with a private CA: `cardgate probe` reaches it (the card, its key set,
/// every call) when `CARDGATE_OUTBOUND_CA_FILE` names the CA, and stops at the handshake when
/// it does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probe_reaches_an_agent_behind_a_private_ca_only_when_the_ca_is_trusted() {
    let mut front = TlsFront::bind().await;
    let agent = FakeAgent::start(
        FakeAgentConfig {
            public_origin: Some(front.origin.clone()),
            ..FakeAgentConfig::default()
        },
        Behaviour::Conformant,
    )
    .await
    .unwrap();
    front.forward_to(agent.addr);

    let untrusted = cardgate_probe(&[&front.origin]).await;
    let stderr = String::from_utf8_lossy(&untrusted.stderr);
    assert_eq!(untrusted.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("could not be fetched"), "{stderr}");

    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, &front.ca_pem).unwrap();
    let ca = ca.display().to_string();
    let out = cardgate_probe_with(
        &[&front.origin, "--json"],
        &[("CARDGATE_OUTBOUND_CA_FILE", &ca)],
    )
    .await;
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).expect("--json prints JSON");
    assert_eq!(report["signature"]["status"], "verified", "{report:#}");
    let subject = &report["subjects"][0];
    assert_eq!(subject["would_promote"], true, "{subject:#}");
    assert!(
        subject["interface"]
            .as_str()
            .is_some_and(|u| u.starts_with("https://localhost:")),
        "{subject:#}"
    );
}

#[tokio::test]
async fn probe_exits_2_on_usage_and_fetch_errors() {
    // A listener of our own that hangs up on every connection: a fetch error for sure, with no
    // assumption about what some fixed port has behind it.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let origin = format!("http://{}/", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            drop(socket);
        }
    });
    let unreachable = cardgate_probe(&[&origin]).await;
    assert_eq!(unreachable.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&unreachable.stderr).contains("could not be fetched"));
    let usage = cardgate_probe(&["not a url"]).await;
    assert_eq!(usage.status.code(), Some(2));
    let bad_version = cardgate_probe(&[&origin, "--version", "1"]).await;
    assert_eq!(bad_version.status.code(), Some(2));
}

/// `cardgate keys` writes the same database a running server reads from memory: the server
/// sees the CLI's key within a second (SQLite: the change feed is polled), and its revocation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_made_and_revoked_by_the_cli_reaches_a_running_server_within_a_second() {
    let db = crate::support::TestDb::sqlite().await;
    let server = crate::support::TestServer::start(db.target.clone()).await;
    let cardgate::storage::DatabaseTarget::Sqlite(path) = &db.target else {
        unreachable!()
    };
    let keys = |args: &[&str]| {
        tokio::process::Command::new(env!("CARGO_BIN_EXE_cardgate"))
            .arg("keys")
            .args(args)
            .env("DATABASE_URL", format!("sqlite://{}", path.display()))
            .output()
    };
    let created = keys(&["create", "--role", "reader", "--name", "from-cli"])
        .await
        .unwrap();
    assert!(created.status.success(), "{created:?}");
    let secret = String::from_utf8(created.stdout)
        .unwrap()
        .trim()
        .to_string();
    let status = |secret: String| {
        let url = server.url("/v1/callees");
        async move {
            crate::support::client_with(&secret)
                .get(url)
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        }
    };
    let mut seen = None;
    for tick in 0..50 {
        if status(secret.clone()).await == 200 {
            seen = Some(tick * 20);
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(
        seen.is_some_and(|ms| ms <= 1000),
        "the CLI's key never worked: {seen:?}"
    );

    let listed = keys(&["list"]).await.unwrap();
    let listing = String::from_utf8(listed.stdout).unwrap();
    let id = listing
        .lines()
        .find(|l| l.contains("from-cli"))
        .and_then(|l| l.split_whitespace().next())
        .unwrap_or_else(|| panic!("no from-cli key in {listing}"))
        .to_string();
    let revoked = keys(&["revoke", &id]).await.unwrap();
    assert!(revoked.status.success(), "{revoked:?}");
    let mut refused = false;
    for _ in 0..50 {
        if status(secret.clone()).await == 401 {
            refused = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(
        refused,
        "the CLI's revocation did not reach the server within a second"
    );
    server.stop().await;
}
