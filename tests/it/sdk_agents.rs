//! Interop with agents built on the official SDKs, as they ship: the Python one (a2a-sdk 1.3.0)
//! and the JS one (@a2a-js/sdk 1.3.0), both answering at once, probed over every version they
//! offer with the default probe script, through the service and through `cardgate probe`,
//! directly and behind a reverse proxy that holds back every stream event, and each serving
//! v1.0 over gRPC only, where it deserves the verdict it gets over JSON-RPC.
//!
//! What each deserves, from its wire behaviour: the JS agent stamps every status, so it is
//! promoted under the strict posture; the Python agent's `submitted` state carries no
//! `status.timestamp`, so it stays `card-trusted` (advisory under strict dedup) and is
//! authoritative for `dedup=none` callers. Neither verdict may change behind the proxy.

use std::time::Duration;

use cardgate::remote::a2a::{Answer, CallLimits};
use serde_json::{Value, json};

use crate::probes::{condition, decision, events, finding, gate, probe, register};
use crate::support::agents::{Sdk, SdkAgent};
use crate::support::proxy::LaggingProxy;
use crate::support::{TestDb, TestServer};

/// How long the proxy holds back each stream event: long enough that every GetTask answer
/// overtakes the stream, as behind a buffering reverse proxy.
const LAG: Duration = Duration::from_millis(150);

/// The agent, directly or behind a lagging proxy; returns it (kept alive) and the origin
/// cardgate is given.
async fn serve(sdk: Sdk, lagging: bool) -> Option<(SdkAgent, Option<LaggingProxy>, String)> {
    if !lagging {
        let agent = SdkAgent::start(sdk, None).await?;
        let origin = agent.origin.clone();
        return Some((agent, None, origin));
    }
    let proxy = LaggingProxy::start(LAG).await;
    let agent = SdkAgent::start(sdk, Some(&proxy.origin())).await?;
    proxy.forward_to(&agent.origin);
    let origin = proxy.origin();
    Some((agent, Some(proxy), origin))
}

/// Registers the agent with the default probe script, probes every version its card offers,
/// and checks each verdict against what the SDK's wire behaviour deserves. On SQLite only:
/// what differs between these runs is the agent on the wire; the storage path is the one the
/// fake-agent probe scenarios run on both backends.
async fn probed_through_the_service(sdk: Sdk, lagging: bool) {
    let Some((_agent, _proxy, origin)) = serve(sdk, lagging).await else {
        return;
    };
    let db = TestDb::sqlite().await;
    let server = TestServer::start(db.target.clone()).await;
    let callee = register(&server, &origin, json!({})).await;
    let (_, detail) = server.get(&format!("/v1/callees/{callee}")).await;
    let mut versions: Vec<String> = detail["subjects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["protocol_version"].as_str().unwrap().to_string())
        .collect();
    versions.sort();
    assert_eq!(versions, ["0.3", "1.0"], "{sdk:?}: {detail:#}");
    // Both SDKs sign with their own signer; cardgate's canonicalization verifies either.
    assert_eq!(
        detail["card"]["signature"]["status"], "verified",
        "{sdk:?}: {detail:#}"
    );
    assert_eq!(detail["card"]["signature"]["key_source"], "jku");

    for version in &versions {
        let context = format!("{sdk:?} {version} (lagging proxy: {lagging})");
        let run = probe(&server, &callee, version).await;
        assert_eq!(run["status"], "finished", "{context}: {run:#}");
        let wire = if version == "1.0" {
            "json-rpc-v1"
        } else {
            "json-rpc-v03"
        };
        assert_eq!(run["wire"], wire, "{context}");
        deserved_verdict(&server, &callee, sdk, version, &run, &context).await;
    }
    server.stop().await;
}

/// Checks a finished run of the SDK's agent against what its wire behaviour deserves, and the
/// decisions callers get after it.
async fn deserved_verdict(
    server: &TestServer,
    callee: &str,
    sdk: Sdk,
    version: &str,
    run: &Value,
    context: &str,
) {
    // Nothing fails on how fast the agent is or on which channel answered first.
    for code in [
        "LC-FULL-LIFECYCLE",
        "LC-SINGLE-TERMINAL",
        "LC-NOTHING-AFTER-TERMINAL",
        "LC-TERMINAL-NO-TIMESTAMP",
        "LC-TIMESTAMP-ORDER",
        "LC-GET-AGREES",
        "LC-IDS-CONSISTENT",
    ] {
        assert_eq!(
            finding(run, code)["status"],
            "pass",
            "{context} {code}: {:#}",
            run["findings"]
        );
    }
    for cap in ["streaming", "pushNotifications"] {
        assert_eq!(
            run["capabilities"][cap]["status"], "passed",
            "{context} {cap}: {:#}",
            run["capabilities"]
        );
    }
    let strict_query = format!("caller_version={version}&requires=streaming,pushNotifications");
    let relaxed_query = format!("{strict_query}&dedup=none");
    match sdk {
        Sdk::Js => {
            assert_eq!(finding(run, "LC-TIMESTAMPS")["status"], "pass", "{context}");
            assert_eq!(
                run["verdict"]["passed"], true,
                "{context}: {:#}",
                run["verdict"]
            );
            assert_eq!(events(run), ["probe-finished", "promoted"], "{context}");
            assert_eq!(gate(server, callee, version).await, "lifecycle-trusted");
            let strict = decision(server, callee, &strict_query).await;
            assert_eq!(strict["authoritative"], true, "{context}: {strict:#}");
        }
        Sdk::Python => {
            // What it really does: the submitted state carries no status.timestamp.
            let timestamps = finding(run, "LC-TIMESTAMPS");
            assert_eq!(timestamps["status"], "fail", "{context}");
            let message = timestamps["message"].as_str().unwrap();
            assert!(message.contains("submitted"), "{context}: {message}");
            assert!(!message.contains("completed"), "{context}: {message}");
            assert_eq!(run["verdict"]["passed"], false, "{context}");
            assert_eq!(
                events(run),
                ["probe-finished"],
                "{context}: nothing demotes it"
            );
            assert_eq!(gate(server, callee, version).await, "card-trusted");
            let strict = decision(server, callee, &strict_query).await;
            assert_eq!(strict["authoritative"], false, "{context}: {strict:#}");
            assert_eq!(condition(&strict, "lifecycle-probe")["status"], "fail");
        }
    }
    let relaxed = decision(server, callee, &relaxed_query).await;
    assert_eq!(relaxed["authoritative"], true, "{context}: {relaxed:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_js_sdk_agent_is_promoted_over_every_version_it_offers() {
    probed_through_the_service(Sdk::Js, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_js_sdk_agent_is_promoted_behind_a_lagging_proxy() {
    probed_through_the_service(Sdk::Js, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_agent_is_authoritative_for_dedup_none_over_every_version() {
    probed_through_the_service(Sdk::Python, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_agent_gets_the_same_verdict_behind_a_lagging_proxy() {
    probed_through_the_service(Sdk::Python, true).await;
}

/// `cardgate probe` against the agent: exit code and per-version verdicts, as JSON.
async fn probed_by_the_cli(sdk: Sdk, lagging: bool) {
    let Some((_agent, _proxy, origin)) = serve(sdk, lagging).await else {
        return;
    };
    let context = format!("{sdk:?} (lagging proxy: {lagging})");
    let (exit, report) = cli_report(&origin, &[]).await;
    let expected_exit = if sdk == Sdk::Js { 0 } else { 1 };
    assert_eq!(exit, Some(expected_exit), "{context}: {report:#}");
    let subjects = report["subjects"].as_array().unwrap();
    assert_eq!(subjects.len(), 2, "{context}: {report:#}");
    for subject in subjects {
        judged_as_over_json_rpc(sdk, subject, &context);
    }
}

/// `cardgate probe <origin> --json <args>`: its exit code and its report.
async fn cli_report(origin: &str, args: &[&str]) -> (Option<i32>, Value) {
    let args: Vec<&str> = [origin, "--json"]
        .into_iter()
        .chain(args.iter().copied())
        .collect();
    let out = crate::cli::cardgate_probe(&args).await;
    let report: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    (out.status.code(), report)
}

/// A subject of a `cardgate probe` report, judged as the SDK's agent deserves on any binding:
/// the JS agent would be promoted; the Python one not, as its `submitted` state carries no
/// timestamp. Streaming and push pass on both.
fn judged_as_over_json_rpc(sdk: Sdk, subject: &Value, context: &str) {
    let promoted = sdk == Sdk::Js;
    assert_eq!(subject["would_promote"], promoted, "{context}: {subject:#}");
    for cap in ["streaming", "pushNotifications"] {
        assert_eq!(
            subject["capabilities"][cap]["status"], "passed",
            "{context} {cap}: {subject:#}"
        );
    }
    let untimestamped = subject["verdict"]["untimestamped"].to_string();
    assert_eq!(
        untimestamped.contains("submitted"),
        !promoted,
        "{context}: {subject:#}"
    );
}

/// The SDK's agent serving v1.0 over gRPC only (card and gRPC on one origin): the same
/// executor as over JSON-RPC, so the same verdict, with streaming, push and cancel exercised
/// through `lf.a2a.v1.A2AService`.
async fn probed_over_grpc_through_the_service(sdk: Sdk) {
    let Some(agent) = SdkAgent::start_with(sdk, None, &["--grpc-only"]).await else {
        return;
    };
    let db = TestDb::sqlite().await;
    let server = TestServer::start(db.target.clone()).await;
    // A task each agent lets the probe cancel: the Python one's `slow` works for a while, the
    // JS one's `need-input` waits for input.
    let cancel = match sdk {
        Sdk::Python => "slow",
        Sdk::Js => "need-input",
    };
    let callee = register(&server, &agent.origin, json!({"cancel_message": cancel})).await;
    let (_, detail) = server.get(&format!("/v1/callees/{callee}")).await;
    assert_eq!(
        detail["card"]["signature"]["status"], "verified",
        "{detail:#}"
    );
    assert_eq!(detail["card"]["versions"], json!(["1.0"]), "{detail:#}");

    let run = probe(&server, &callee, "1.0").await;
    let context = format!("{sdk:?} over gRPC");
    let context = context.as_str();
    assert_eq!(run["status"], "finished", "{context}: {run:#}");
    assert_eq!(run["wire"], "grpc-v1", "{context}");
    assert_eq!(finding(&run, "LC-CANCEL")["status"], "pass", "{context}");
    let methods: Vec<&str> = run["exchanges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["method"].as_str().unwrap())
        .collect();
    for method in [
        "SendMessage",
        "SendStreamingMessage",
        "GetTask",
        "CancelTask",
        "CreateTaskPushNotificationConfig",
    ] {
        let full = format!("lf.a2a.v1.A2AService/{method}");
        assert!(methods.contains(&full.as_str()), "{method}: {methods:?}");
    }
    deserved_verdict(&server, &callee, sdk, "1.0", &run, context).await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_agent_over_grpc_only_gets_its_json_rpc_verdict() {
    probed_over_grpc_through_the_service(Sdk::Python).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_js_sdk_agent_over_grpc_only_is_promoted_as_over_json_rpc() {
    probed_over_grpc_through_the_service(Sdk::Js).await;
}

/// The Python SDK's gRPC errors carry the A2A reason in a google.rpc.ErrorInfo detail; the
/// transcript decodes it, so an operator reads `TASK_NOT_FOUND`, not base64.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_agents_grpc_errors_are_recorded_with_their_a2a_reason() {
    let Some(agent) = SdkAgent::start_with(Sdk::Python, None, &["--grpc-only"]).await else {
        return;
    };
    let mut client = crate::grpc::client(&agent.origin, CallLimits::default(), true);
    let (_, answer) = client.get_task("get", "no-such-task", None).await;
    let Answer::Error { code, message } = answer else {
        panic!("an error: {answer:?}");
    };
    assert_eq!(code, 5, "NOT_FOUND: {message}");
    assert!(
        message.starts_with("gRPC NOT_FOUND (TASK_NOT_FOUND): "),
        "{message}"
    );
    let recorded = client.transcript()[0].grpc.as_ref().unwrap();
    assert_eq!(
        recorded.details,
        [crate::grpc::error_info("TASK_NOT_FOUND")]
    );
}

/// `cardgate probe --binding grpc` against each SDK's agent over gRPC only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cardgate_probe_over_grpc_judges_the_sdk_agents_alike() {
    for sdk in [Sdk::Python, Sdk::Js] {
        let Some(agent) = SdkAgent::start_with(sdk, None, &["--grpc-only"]).await else {
            return;
        };
        judged_over_grpc_as_over_json_rpc(sdk, &agent.origin).await;
    }
}

/// `cardgate probe --binding grpc` of the SDK's agent at `origin` (gRPC only, one version):
/// the judgement its JSON-RPC probe gets.
async fn judged_over_grpc_as_over_json_rpc(sdk: Sdk, origin: &str) {
    let (exit, report) = cli_report(origin, &["--binding", "grpc"]).await;
    let promoted = sdk == Sdk::Js;
    assert_eq!(
        exit,
        Some(if promoted { 0 } else { 1 }),
        "{sdk:?}: {report:#}"
    );
    let subject = &report["subjects"][0];
    assert_eq!(
        (&subject["binding"], &subject["wire"]),
        (&json!("GRPC"), &json!("grpc-v1")),
        "{subject:#}"
    );
    judged_as_over_json_rpc(sdk, subject, &format!("{sdk:?} over gRPC"));
}

/// `cardgate probe --binding http+json` against each SDK's agent, which serves HTTP+JSON 1.0
/// beside JSON-RPC: 1.0 over REST gets the judgement JSON-RPC gets; 0.3 over HTTP+JSON, which
/// cardgate does not speak (or the card does not offer), is said so and not judged, so neither
/// run exits 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cardgate_probe_over_http_json_judges_the_sdk_agents_alike() {
    for sdk in [Sdk::Python, Sdk::Js] {
        let Some(agent) = SdkAgent::start(sdk, None).await else {
            return;
        };
        let (exit, report) = cli_report(&agent.origin, &["--binding", "http+json"]).await;
        assert_eq!(exit, Some(1), "{sdk:?}: {report:#}");
        let subject = |version: &str| {
            report["subjects"]
                .as_array()
                .unwrap()
                .iter()
                .find(|s| s["protocol_version"] == version)
                .unwrap_or_else(|| panic!("{sdk:?} {version}: {report:#}"))
                .clone()
        };
        let rest = subject("1.0");
        assert_eq!(
            (&rest["binding"], &rest["wire"]),
            (&json!("HTTP+JSON"), &json!("rest-v1")),
            "{rest:#}"
        );
        judged_as_over_json_rpc(sdk, &rest, &format!("{sdk:?} over HTTP+JSON"));
        // The JS agent offers 0.3 over HTTP+JSON too; the Python one only over JSON-RPC.
        let legacy = subject("0.3");
        assert_eq!(legacy["would_promote"], false, "{legacy:#}");
        let why = match sdk {
            Sdk::Js => "cardgate does not speak HTTP+JSON for 0.3",
            Sdk::Python => "the card offers no HTTP+JSON interface for 0.3 (bindings: JSONRPC)",
        };
        assert_eq!(legacy["error"], why, "{legacy:#}");
    }
}

/// The Python SDK agent with its gRPC server set to gzip, as an operator can set it: it
/// compresses its answers (shown with a raw HTTP/2 call that offers gzip), cardgate reads them,
/// and the probe runs whole and judges it as it judges the agent answering uncompressed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_sdk_agent_set_to_compress_is_judged_as_uncompressed() {
    let Some(agent) = SdkAgent::start_with(
        Sdk::Python,
        None,
        &["--grpc-only", "--grpc-compression", "gzip"],
    )
    .await
    else {
        return;
    };
    let (encoding, flag) = raw_send_accepting_gzip(&agent.origin).await;
    assert_eq!(
        (encoding.as_deref(), flag),
        (Some("gzip"), 1),
        "the agent compresses for a caller that accepts gzip"
    );

    judged_over_grpc_as_over_json_rpc(Sdk::Python, &agent.origin).await;
}

/// One `SendMessage` over HTTP/2 that offers gzip, as a gRPC client built with compression
/// would: the answer's `grpc-encoding` and its first message's compressed flag.
async fn raw_send_accepting_gzip(origin: &str) -> (Option<String>, u8) {
    use cardgate::remote::grpc_transport::proto::SendMessageRequest;
    use prost::Message as _;

    let request: SendMessageRequest = serde_json::from_value(json!({
        "message": {"messageId": "raw-1", "role": "ROLE_USER", "parts": [{"text": "hello"}]}
    }))
    .unwrap();
    let body = crate::grpc::frame(false, &request.encode_to_vec());
    let client = reqwest::Client::builder()
        .http2_prior_knowledge()
        .build()
        .unwrap();
    let answer = client
        .post(format!("{origin}/lf.a2a.v1.A2AService/SendMessage"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .header("a2a-version", "1.0")
        .header("grpc-accept-encoding", "gzip")
        .body(body)
        .send()
        .await
        .unwrap();
    let encoding = answer
        .headers()
        .get("grpc-encoding")
        .map(|v| v.to_str().unwrap().to_string());
    let bytes = answer.bytes().await.unwrap();
    (encoding, bytes.first().copied().unwrap_or(0))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cardgate_probe_promotes_the_js_sdk_agent_directly_and_behind_a_lagging_proxy() {
    probed_by_the_cli(Sdk::Js, false).await;
    probed_by_the_cli(Sdk::Js, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cardgate_probe_judges_the_python_sdk_agent_alike_behind_a_lagging_proxy() {
    probed_by_the_cli(Sdk::Python, false).await;
    probed_by_the_cli(Sdk::Python, true).await;
}

/// No push inbox: the REST probe below registers no webhook.
struct NoInbox;

#[async_trait::async_trait]
impl cardgate::service::probe::PushInbox for NoInbox {
    async fn deliveries(
        &self,
        _token: &str,
        _skip: usize,
    ) -> Vec<cardgate::service::probe::InboxDelivery> {
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
    use cardgate::service::probe::{Credentials, CycleInput, ProbeSettings, probe_interface};

    let Some(agent) = SdkAgent::start(Sdk::Python, None).await else {
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
    let out = probe_interface(CycleInput {
        outbound: &outbound,
        settings: &settings,
        card: &card,
        version: ProtocolVersion::new(1, 0),
        binding: None,
        script: &ProbeScript::default(),
        push: None,
        inbox: &NoInbox,
        progress: &Quiet,
        credentials: &Credentials::default(),
    })
    .await
    .unwrap();
    assert_eq!(out.wire.as_str(), "rest-v1");
    let find = |code: &str| {
        out.judgement
            .findings
            .iter()
            .find(|f| f.code.code() == code)
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
