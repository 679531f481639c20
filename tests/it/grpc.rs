//! The gRPC binding (`lf.a2a.v1.A2AService`): the fake agent serving v1.0 over gRPC only,
//! probed through the service on both backends, demoted by its lifecycle misbehaviours with
//! the right trigger, asked for by `binding`, and hostile gRPC peers (an endless stream, a
//! huge message, bytes that are not protobuf, compressed answers and bombs, a server that
//! never answers, a target in a refused network) held to bounds.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::response::IntoResponse;
use cardgate::domain::version::ProtocolVersion;
use cardgate::fake_agent::{Behaviour, FakeAgent, FakeAgentConfig};
use cardgate::remote::a2a::{A2aClient, Answer, CallLimits, Outgoing, Streamed, Wire};
use cardgate::remote::sse::StreamStop;
use cardgate::remote::{NetworkPolicy, Outbound, OutboundSettings};
use serde_json::json;
use tokio::time::Instant;
use url::Url;

use crate::probes::{demotes_and_recovers, events, finding, gate, probe, register, wait};
use crate::support::{TestDb, TestServer, error_code, on_both_backends};

on_both_backends!(
    a_grpc_only_agent_is_promoted_and_its_exchanges_read_like_json_rpc,
    a_binding_is_asked_for_by_name_and_refused_when_the_card_lacks_it,
);

fn grpc_config() -> FakeAgentConfig {
    FakeAgentConfig {
        grpc: true,
        ..FakeAgentConfig::default()
    }
}

async fn a_grpc_only_agent_is_promoted_and_its_exchanges_read_like_json_rpc(db: TestDb) {
    let agent = FakeAgent::start(grpc_config(), Behaviour::Conformant)
        .await
        .unwrap();
    let server = TestServer::start(db.target.clone()).await;
    let callee = register(&server, &agent.origin(), json!({"cancel_message": "slow"})).await;
    let (_, detail) = server.get(&format!("/v1/callees/{callee}")).await;
    let snapshot = detail["card"]["id"].as_str().unwrap();
    let (_, card) = server
        .get(&format!("/v1/callees/{callee}/cards/{snapshot}"))
        .await;
    let interface = &card["card"]["interfaces"][0];
    assert_eq!(interface["protocol_binding"], "GRPC", "{card:#}");
    assert_eq!(interface["same_origin"], true, "{card:#}");

    let run = probe(&server, &callee, "1.0").await;
    assert_eq!(run["wire"], "grpc-v1", "{run:#}");
    assert_eq!(run["binding"], serde_json::Value::Null, "cardgate chose");
    assert_eq!(
        run["verdict"]["passed"], true,
        "{:#}",
        run["verdict"]["reasons"]
    );
    assert_eq!(events(&run), ["probe-finished", "promoted"]);
    assert_eq!(gate(&server, &callee, "1.0").await, "lifecycle-trusted");
    for (cap, status) in [("streaming", "passed"), ("pushNotifications", "passed")] {
        assert_eq!(run["capabilities"][cap]["status"], status, "{run:#}");
    }
    assert_eq!(
        finding(&run, "LC-CANCEL")["status"],
        "pass",
        "{:#}",
        finding(&run, "LC-CANCEL")
    );
    assert_eq!(finding(&run, "LC-TIMESTAMP-FORMAT")["status"], "pass");
    // A message to the ended task is refused as gRPC says UnsupportedOperationError.
    let send = finding(&run, "LC-TERMINAL-SEND");
    assert_eq!(send["status"], "pass", "{send:#}");

    // Evidence: each call named by its gRPC method, its messages as proto3 JSON, its status.
    let exchanges = run["exchanges"].as_array().unwrap();
    let send = exchanges
        .iter()
        .find(|e| e["method"] == "lf.a2a.v1.A2AService/SendMessage" && e["step"] == "push")
        .unwrap_or_else(|| panic!("no SendMessage in {exchanges:#?}"));
    assert_eq!(send["grpc"]["status"], "OK", "{send:#}");
    assert_eq!(send["request"]["message"]["role"], "ROLE_USER", "{send:#}");
    assert!(
        send["response"]["task"]["status"]["state"]
            .as_str()
            .unwrap()
            .starts_with("TASK_STATE_"),
        "{send:#}"
    );
    // The webhook's token (in its URL too) never reaches the transcript.
    let push = exchanges
        .iter()
        .find(|e| e["step"] == "push")
        .unwrap_or_else(|| panic!("no push send in {exchanges:#?}"));
    let config = &push["request"]["configuration"]["taskPushNotificationConfig"];
    assert_eq!(config["token"], "[redacted]", "{push:#}");
    assert!(
        config["url"].as_str().unwrap().ends_with("/[redacted]"),
        "{push:#}"
    );
    let stream = exchanges
        .iter()
        .find(|e| e["method"] == "lf.a2a.v1.A2AService/SendStreamingMessage")
        .unwrap();
    let frames = stream["frames"].as_array().unwrap();
    assert!(frames.len() >= 3, "{stream:#}");
    let last: serde_json::Value =
        serde_json::from_str(frames.last().unwrap()["data"].as_str().unwrap()).unwrap();
    assert_eq!(
        last["statusUpdate"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{stream:#}"
    );
    // A proto3 JSON timestamp is `Z`-normalized, whatever library the agent used.
    let at = last["statusUpdate"]["status"]["timestamp"]
        .as_str()
        .unwrap();
    assert!(at.ends_with('Z'), "{at}");
    server.stop().await;
}

async fn a_binding_is_asked_for_by_name_and_refused_when_the_card_lacks_it(db: TestDb) {
    let agent = FakeAgent::start(grpc_config(), Behaviour::Conformant)
        .await
        .unwrap();
    let server = TestServer::start(db.target.clone()).await;
    let callee = register(&server, &agent.origin(), json!({})).await;
    let path = format!("/v1/callees/{callee}/probes");

    let (status, body) = server
        .post(
            &path,
            json!({"protocol_version": "1.0", "binding": "JSONRPC"}),
        )
        .await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(
        body["error"]["message"],
        "the card offers no JSONRPC interface for 1.0 (bindings: GRPC)"
    );
    let (status, body) = server
        .post(&path, json!({"protocol_version": "1.0", "binding": "soap"}))
        .await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body["error"]["message"].as_str().unwrap().contains("GRPC"),
        "{body}"
    );
    assert_eq!(error_code(&body), "invalid_body");

    let (status, queued) = server
        .post(&path, json!({"protocol_version": "1.0", "binding": "grpc"}))
        .await;
    assert_eq!(status, 202, "{queued}");
    assert_eq!(queued["binding"], "GRPC");
    let run = wait(&server, queued["id"].as_str().unwrap()).await;
    assert_eq!(
        (&run["binding"], &run["wire"]),
        (&json!("GRPC"), &json!("grpc-v1"))
    );
    assert_eq!(run["verdict"]["passed"], true, "{run:#}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminal_state_without_timestamp_over_grpc_demotes_with_the_timestamp_class() {
    demotes_and_recovers(
        grpc_config(),
        "1.0",
        json!({}),
        Behaviour::NoTerminalTimestamp,
        "LC-TERMINAL-NO-TIMESTAMP",
        "timestamp",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_terminal_events_over_grpc_demote_with_the_terminal_class() {
    demotes_and_recovers(
        grpc_config(),
        "1.0",
        json!({}),
        Behaviour::TwoTerminalEvents,
        "LC-SINGLE-TERMINAL",
        "terminal",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_after_the_terminal_one_over_grpc_demotes_with_the_terminal_class() {
    demotes_and_recovers(
        grpc_config(),
        "1.0",
        json!({}),
        Behaviour::EventAfterTerminal,
        "LC-NOTHING-AFTER-TERMINAL",
        "terminal",
    )
    .await;
}

// Hostile peers, against the client directly: each bound is asserted by what ended the call.

fn outbound(allow_loopback: bool) -> Outbound {
    let allowed = if allow_loopback {
        NetworkPolicy::parse_allowed("127.0.0.0/8").unwrap()
    } else {
        Vec::new()
    };
    Outbound::new(OutboundSettings {
        policy: NetworkPolicy::new(allowed),
        ..OutboundSettings::default()
    })
    .unwrap()
}

pub(crate) fn client(url: &str, limits: CallLimits, allow_loopback: bool) -> A2aClient {
    A2aClient::new(
        outbound(allow_loopback),
        Url::parse(url).unwrap(),
        Wire::GrpcV1,
        ProtocolVersion::new(1, 0),
        limits,
    )
}

/// A gRPC length-prefixed message: the compressed flag, the length (big-endian), the bytes.
pub(crate) fn frame(compressed: bool, payload: &[u8]) -> Vec<u8> {
    let mut frame = vec![u8::from(compressed)];
    frame.extend_from_slice(&u32::try_from(payload.len()).unwrap().to_be_bytes());
    frame.extend_from_slice(payload);
    frame
}

fn hello() -> Outgoing<'static> {
    Outgoing {
        text: "hello",
        task_id: None,
        context_id: None,
        non_blocking: false,
        webhook: None,
    }
}

/// An A2A error over gRPC is its status code plus the google.rpc.ErrorInfo naming the A2A
/// reason; the transcript keeps both, as JSON-RPC's `error.data` shows them in v1.0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grpc_error_is_recorded_with_its_a2a_reason() {
    let agent = FakeAgent::start(grpc_config(), Behaviour::Conformant)
        .await
        .unwrap();
    let mut client = client(&agent.origin(), CallLimits::default(), true);
    let (_, answer) = client.get_task("get", "no-such-task", None).await;
    let Answer::Error { code, message } = answer else {
        panic!("an error: {answer:?}");
    };
    assert_eq!(code, 5);
    assert_eq!(message, "gRPC NOT_FOUND (TASK_NOT_FOUND): Task not found");
    let recorded = client.transcript()[0].grpc.as_ref().unwrap();
    assert_eq!(recorded.details, [error_info("TASK_NOT_FOUND")]);
}

/// The ErrorInfo detail an A2A error carries, as proto3 JSON.
pub(crate) fn error_info(reason: &str) -> serde_json::Value {
    json!({
        "@type": "type.googleapis.com/google.rpc.ErrorInfo",
        "reason": reason,
        "domain": "a2a-protocol.org",
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endless_grpc_stream_stops_at_the_event_cap() {
    let agent = FakeAgent::start(grpc_config(), Behaviour::EndlessStream)
        .await
        .unwrap();
    let limits = CallLimits {
        max_events: 50,
        ..CallLimits::default()
    };
    let mut client = client(&agent.origin(), limits, true);
    let deadline = Instant::now() + Duration::from_secs(20);
    let Streamed::Events { mut reader, .. } = client.stream("stream", &hello(), deadline).await
    else {
        panic!("the stream opened: {:#?}", client.transcript());
    };
    let mut frames = 0;
    let end = loop {
        match reader.next().await {
            Ok(_) => frames += 1,
            Err(end) => break end,
        }
    };
    assert_eq!((frames, end), (50, StreamStop::TooManyEvents));
    assert!(
        Instant::now() < deadline,
        "the cap, not the deadline, ended it"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grpc_message_past_the_cap_is_refused_before_it_is_read() {
    let config = FakeAgentConfig {
        padding: 4 * 1024 * 1024,
        ..grpc_config()
    };
    let agent = FakeAgent::start(config, Behaviour::Conformant)
        .await
        .unwrap();
    let limits = CallLimits {
        max_body: 64 * 1024,
        max_event_bytes: 64 * 1024,
        ..CallLimits::default()
    };
    let mut client = client(&agent.origin(), limits, true);
    let (_, answer) = client.send("send", &hello()).await;
    let Answer::Error { code, message } = answer else {
        panic!("refused: {answer:?}");
    };
    assert_eq!(code, 11, "OUT_OF_RANGE: {message}");
    assert!(message.contains("too large"), "{message}");
    let recorded = &client.transcript()[0];
    assert_eq!(recorded.grpc.as_ref().unwrap().status, "OUT_OF_RANGE");

    // The stream's first event (the padded task) is past the per-event cap too.
    let deadline = Instant::now() + Duration::from_secs(10);
    let Streamed::Events { mut reader, .. } = client.stream("stream", &hello(), deadline).await
    else {
        panic!("the stream opened");
    };
    assert_eq!(reader.next().await.unwrap_err(), StreamStop::EventTooLarge);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grpc_server_that_never_answers_costs_one_call_timeout() {
    let agent = FakeAgent::start(grpc_config(), Behaviour::SlowAnswers)
        .await
        .unwrap();
    // And a listener that accepts and never speaks HTTP/2 at all.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let silent_origin = format!("http://{}", silent.local_addr().unwrap());
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = silent.accept().await {
            held.push(socket);
        }
    });
    let limits = CallLimits {
        timeout: Duration::from_secs(1),
        ..CallLimits::default()
    };
    for origin in [agent.origin(), silent_origin] {
        let mut client = client(&origin, limits, true);
        let started = Instant::now();
        let (_, answer) = client.get_task("get", "t-1", None).await;
        let Answer::Broken(why) = answer else {
            panic!("{origin}: {answer:?}");
        };
        assert_eq!(why, "no answer within 1 s", "{origin}");
        assert!(started.elapsed() < Duration::from_secs(3), "{origin}");
        let started = Instant::now();
        let opened = client
            .stream("stream", &hello(), Instant::now() + Duration::from_secs(30))
            .await;
        assert!(
            matches!(
                opened,
                Streamed::Plain {
                    answer: Answer::Broken(_),
                    ..
                }
            ),
            "{origin}"
        );
        assert!(started.elapsed() < Duration::from_secs(3), "{origin}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grpc_target_in_a_refused_network_is_never_dialled() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let accepted = Arc::new(AtomicUsize::new(0));
    let counter = accepted.clone();
    tokio::spawn(async move {
        while listener.accept().await.is_ok() {
            counter.fetch_add(1, Ordering::SeqCst);
        }
    });
    for origin in [
        format!("http://127.0.0.1:{port}"),
        format!("http://[::ffff:127.0.0.1]:{port}"),
        format!("http://localhost:{port}"),
    ] {
        let mut client = client(&origin, CallLimits::default(), false);
        let (_, answer) = client.send("send", &hello()).await;
        let why = match answer {
            Answer::Broken(why) | Answer::Error { message: why, .. } => why,
            Answer::Result(r) => panic!("{origin} answered {r}"),
        };
        assert!(why.contains("loopback"), "{origin}: {why}");
    }
    assert_eq!(accepted.load(Ordering::SeqCst), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_https_grpc_interface_is_spoken_to_over_tls_only() {
    // The fake agent speaks plaintext HTTP/2: over `https://` the TLS handshake fails, and
    // nothing is sent in clear in its place.
    let agent = FakeAgent::start(grpc_config(), Behaviour::Conformant)
        .await
        .unwrap();
    let url = agent.origin().replacen("http://", "https://", 1);
    let mut client = client(&url, CallLimits::default(), true);
    let (_, answer) = client.send("send", &hello()).await;
    let why = match answer {
        Answer::Broken(why) | Answer::Error { message: why, .. } => why,
        Answer::Result(r) => panic!("answered in clear: {r}"),
    };
    // rustls's word for a reply that is not a TLS record: the client opened with a handshake.
    assert!(why.contains("InvalidContentType"), "{why}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grpc_peer_behind_tls_is_spoken_to_when_its_ca_is_trusted_and_only_then() {
    let agent = FakeAgent::start(grpc_config(), Behaviour::Conformant)
        .await
        .unwrap();
    let rcgen::CertifiedKey { cert, signing_key } =
        rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!(
        "https://localhost:{}",
        listener.local_addr().unwrap().port()
    );
    let identity = tonic::transport::Identity::from_pem(cert.pem(), signing_key.serialize_pem());
    let server = tonic::transport::Server::builder()
        .tls_config(tonic::transport::ServerTlsConfig::new().identity(identity))
        .unwrap()
        .add_service(agent.grpc_service())
        .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener));
    tokio::spawn(server);

    let outbound = |extra_roots_pem: Vec<u8>| {
        Outbound::new(OutboundSettings {
            policy: NetworkPolicy::new(
                NetworkPolicy::parse_allowed("127.0.0.0/8,::1/128").unwrap(),
            ),
            extra_roots_pem,
            ..OutboundSettings::default()
        })
        .unwrap()
    };
    let connect = |extra: Vec<u8>| {
        A2aClient::new(
            outbound(extra),
            Url::parse(&url).unwrap(),
            Wire::GrpcV1,
            ProtocolVersion::new(1, 0),
            CallLimits::default(),
        )
    };

    // Trusted through CARDGATE_OUTBOUND_CA_FILE's setting: the whole exchange runs over TLS.
    let mut trusting = connect(cert.pem().into_bytes());
    let (_, answer) = trusting.send("send", &hello()).await;
    let Answer::Result(result) = answer else {
        panic!("over TLS: {answer:?}");
    };
    assert_eq!(
        result["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{result:#}"
    );

    // The platform's roots alone do not know the certificate: refused at the handshake.
    let mut doubting = connect(Vec::new());
    let (_, answer) = doubting.send("send", &hello()).await;
    let why = match answer {
        Answer::Broken(why) | Answer::Error { message: why, .. } => why,
        Answer::Result(r) => panic!("an untrusted certificate was accepted: {r}"),
    };
    assert!(why.contains("certificate"), "{why}");
}

/// A peer whose card is real (the fake agent's, signed, naming this peer's origin) but whose
/// every gRPC answer is a well-framed message of bytes that are not protobuf. The probe runs
/// to its end, records each refusal with its gRPC status, counts the stream's message as a
/// malformed frame, and the subject is not promoted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grpc_peer_answering_bytes_that_are_not_protobuf_is_recorded_and_not_promoted() {
    use axum::body::Body;
    use axum::http::{Request, header};

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let origin = format!("http://{}", listener.local_addr().unwrap());
    let behind = FakeAgent::start(
        FakeAgentConfig {
            public_origin: Some(origin.clone()),
            ..grpc_config()
        },
        Behaviour::Conformant,
    )
    .await
    .unwrap();
    let upstream = behind.origin();
    // gRPC framing (uncompressed, 8 bytes) around a field tag with wire type 7, which no
    // protobuf decoder accepts.
    let garbage: &[u8] = &[
        0, 0, 0, 0, 8, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
    ];
    let app = axum::Router::new().fallback(move |request: Request<Body>| {
        let upstream = upstream.clone();
        async move {
            let grpc = request
                .headers()
                .get(header::CONTENT_TYPE)
                .is_some_and(|v| v.as_bytes().starts_with(b"application/grpc"));
            if grpc {
                return ([(header::CONTENT_TYPE, "application/grpc")], garbage).into_response();
            }
            // The card and its key set come from the fake agent, byte for byte.
            let fetched = reqwest::get(format!("{upstream}{}", request.uri()))
                .await
                .unwrap();
            let kind = fetched.headers()[header::CONTENT_TYPE].clone();
            let body = fetched.bytes().await.unwrap();
            ([(header::CONTENT_TYPE, kind)], body).into_response()
        }
    });
    tokio::spawn(async move { axum::serve(listener, app).await });

    let db = TestDb::sqlite().await;
    let server = TestServer::start(db.target.clone()).await;
    let callee = register(&server, &origin, json!({})).await;
    let run = probe(&server, &callee, "1.0").await;
    assert_eq!(run["status"], "finished", "{run:#}");
    assert_eq!(run["wire"], "grpc-v1", "{run:#}");
    assert_eq!(run["verdict"]["passed"], false, "{run:#}");
    assert_eq!(events(&run), ["probe-finished"]);
    assert_eq!(gate(&server, &callee, "1.0").await, "card-trusted");
    // The stream's undecodable message is a malformed frame, as a non-JSON SSE frame is.
    let well_formed = finding(&run, "LC-WELL-FORMED");
    assert_eq!(well_formed["status"], "fail", "{run:#}");
    assert!(
        well_formed["message"]
            .as_str()
            .unwrap()
            .contains("malformed frame"),
        "{well_formed:#}"
    );
    assert_eq!(
        run["capabilities"]["streaming"]["reason"], "stream 0 sent malformed frames",
        "{run:#}"
    );
    let send = run["exchanges"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["method"] == "lf.a2a.v1.A2AService/SendMessage")
        .unwrap_or_else(|| panic!("no SendMessage in {run:#}"));
    assert_eq!(send["grpc"]["status"], "INTERNAL", "{send:#}");
    assert!(
        send["grpc"]["message"].as_str().unwrap().contains("decode"),
        "{send:#}"
    );
    server.stop().await;
}

/// Compressed answers. cardgate offers gzip and deflate and sends its requests plain; a
/// gzipped answer is read like a plain one, but what it decompresses to is held to the
/// message cap (a 1 MiB bomb in a 1 KiB message is refused), an algorithm nobody offered is
/// refused, and so is a message flagged compressed with no encoding named. Every refusal is
/// recorded with its status.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compressed_grpc_answers_are_read_within_the_cap_and_refused_past_it() {
    use axum::body::Body;
    use axum::http::{HeaderName, Request, header};
    use cardgate::remote::grpc_transport::proto::SendMessageResponse;
    use prost::Message as _;

    fn gzip(bytes: &[u8]) -> Vec<u8> {
        use std::io::Write as _;
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        encoder.write_all(bytes).unwrap();
        encoder.finish().unwrap()
    }

    let task: SendMessageResponse = serde_json::from_value(json!({"task": {
        "id": "t-1", "contextId": "c-1",
        "status": {"state": "TASK_STATE_COMPLETED", "timestamp": "2026-12-04T10:00:00Z"}
    }}))
    .unwrap();
    let answer = frame(true, &gzip(&task.encode_to_vec()));
    let bomb = frame(true, &gzip(&vec![0; 1024 * 1024]));
    let offered = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = offered.clone();
    let app = axum::Router::new().fallback(move |request: Request<Body>| {
        let (seen, answer, bomb) = (seen.clone(), answer.clone(), bomb.clone());
        async move {
            let accept = request
                .headers()
                .get("grpc-accept-encoding")
                .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
            seen.lock().unwrap().push(accept);
            let grpc = (header::CONTENT_TYPE, "application/grpc");
            let encoding = HeaderName::from_static("grpc-encoding");
            let path = request.uri().path().to_string();
            if path.ends_with("/SendMessage") {
                ([grpc, (encoding, "gzip")], answer).into_response()
            } else if path.ends_with("/GetTask") {
                ([grpc, (encoding, "gzip")], bomb).into_response()
            } else if path.ends_with("/CancelTask") {
                ([grpc, (encoding, "snappy")], answer).into_response()
            } else {
                // Flagged compressed, with no encoding named.
                ([grpc], answer).into_response()
            }
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let origin = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });

    let mut client = client(&origin, CallLimits::default(), true);
    let (_, answer) = client.send("send", &hello()).await;
    let Answer::Result(result) = answer else {
        panic!("a gzipped answer is read: {answer:?}");
    };
    assert_eq!(result["task"]["status"]["state"], "TASK_STATE_COMPLETED");

    let refused = [
        (client.get_task("get", "t-1", None).await.1, 8, "size limit"),
        (client.cancel("cancel", "t-1").await.1, 12, "`snappy`"),
    ];
    for (answer, want, says) in refused {
        let Answer::Error { code, message } = answer else {
            panic!("refused: {answer:?}");
        };
        assert_eq!(code, want, "{message}");
        assert!(message.contains(says), "{message}");
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    let Streamed::Events { mut reader, .. } = client.stream("stream", &hello(), deadline).await
    else {
        panic!("the stream opened: {:#?}", client.transcript());
    };
    let end = reader.next().await.unwrap_err();
    assert!(
        matches!(&end, StreamStop::Error(why) if why.contains("compressed-flag")),
        "{end:?}"
    );

    let statuses: Vec<&str> = client.transcript()[..3]
        .iter()
        .map(|e| e.grpc.as_ref().unwrap().status.as_str())
        .collect();
    assert_eq!(statuses, ["OK", "RESOURCE_EXHAUSTED", "UNIMPLEMENTED"]);
    let offered = offered.lock().unwrap();
    assert_eq!(offered.len(), 4);
    for accept in offered.iter() {
        let accept = accept.as_deref().unwrap_or_default();
        assert!(
            accept.contains("gzip") && accept.contains("deflate"),
            "{accept}"
        );
    }
}
