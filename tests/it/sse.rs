//! The bounded SSE reader against a server that sends exactly the bytes each case needs.

use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::routing::get;
use cardgate::remote::sse::{SseLimits, SseReader, StreamStop};
use futures::StreamExt;
use tokio::time::Instant;

use crate::support::repo_path;

/// Serves `chunks` (with `pause` between them) once, then keeps the connection open if `hold`.
async fn serve(chunks: Vec<Vec<u8>>, pause: Duration, hold: bool) -> reqwest::Response {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = Router::new().route(
        "/",
        get(move || {
            let chunks = chunks.clone();
            async move {
                let body = futures::stream::iter(chunks)
                    .then(move |c| async move {
                        tokio::time::sleep(pause).await;
                        Ok::<_, std::io::Error>(bytes::Bytes::from(c))
                    })
                    .chain(futures::stream::once(async move {
                        if hold {
                            tokio::time::sleep(Duration::from_secs(30)).await;
                        }
                        Ok(bytes::Bytes::new())
                    }));
                (
                    [("content-type", "text/event-stream")],
                    Body::from_stream(body),
                )
            }
        }),
    );
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    reqwest::get(format!("http://{addr}/")).await.unwrap()
}

fn limits() -> SseLimits {
    SseLimits {
        max_event_bytes: 64 * 1024,
        max_events: 100,
        idle: Duration::from_secs(2),
        deadline: Instant::now() + Duration::from_secs(10),
    }
}

async fn drain(mut reader: SseReader) -> (Vec<String>, StreamStop) {
    let mut frames = Vec::new();
    loop {
        match reader.next().await {
            Ok(frame) => frames.push(frame.data),
            Err(end) => return (frames, end),
        }
    }
}

#[tokio::test]
async fn the_sdk_fixture_stream_split_into_tiny_chunks_reads_exactly() {
    let raw = std::fs::read(repo_path(
        "tests/fixtures/a2a-sdk-python-1.3.0/v1/05-stream.sse.txt",
    ))
    .unwrap();
    assert!(
        raw.windows(2).any(|w| w == b"\r\n"),
        "the fixture uses CRLF"
    );
    let expected: Vec<String> = String::from_utf8(raw.clone())
        .unwrap()
        .split("\r\n\r\n")
        .filter(|e| !e.trim().is_empty())
        .map(|e| e.trim_start_matches("data: ").to_string())
        .collect();
    for size in [1, 2, 7, 64, 4096] {
        let chunks = raw.chunks(size).map(<[u8]>::to_vec).collect();
        let (frames, end) = drain(SseReader::new(
            serve(chunks, Duration::ZERO, false).await,
            limits(),
        ))
        .await;
        assert_eq!(end, StreamStop::Closed, "chunk size {size}");
        assert_eq!(frames, expected, "chunk size {size}");
    }
}

#[tokio::test]
async fn multi_line_data_comments_and_event_names() {
    let body = b": keep-alive\nevent: error\ndata: line one\ndata: line two\n\ndata:{\"x\":1}\r\rdata: tail".to_vec();
    let mut reader = SseReader::new(serve(vec![body], Duration::ZERO, false).await, limits());
    let first = reader.next().await.unwrap();
    assert_eq!(
        (first.event.as_deref(), first.data.as_str()),
        (Some("error"), "line one\nline two")
    );
    assert_eq!(reader.next().await.unwrap().data, "{\"x\":1}");
    // A last event without its blank line is kept as evidence.
    assert_eq!(reader.next().await.unwrap().data, "tail");
    assert_eq!(reader.next().await.unwrap_err(), StreamStop::Closed);
}

#[tokio::test]
async fn an_endless_line_is_cut_off_at_the_event_cap() {
    let chunks = vec![b"data: ".to_vec()]
        .into_iter()
        .chain((0..64).map(|_| vec![b'x'; 16 * 1024]))
        .collect();
    let (frames, end) = drain(SseReader::new(
        serve(chunks, Duration::from_millis(1), true).await,
        limits(),
    ))
    .await;
    assert!(frames.is_empty());
    assert_eq!(end, StreamStop::EventTooLarge);
}

#[tokio::test]
async fn silence_ends_the_stream_as_idle_and_counts_are_capped() {
    let (frames, end) = drain(SseReader::new(
        serve(vec![b"data: 1\n\n".to_vec()], Duration::ZERO, true).await,
        SseLimits {
            idle: Duration::from_millis(300),
            ..limits()
        },
    ))
    .await;
    assert_eq!((frames.len(), end), (1, StreamStop::Idle));

    let many = (0..20)
        .map(|i| format!("data: {i}\n\n").into_bytes())
        .collect();
    let (frames, end) = drain(SseReader::new(
        serve(many, Duration::ZERO, false).await,
        SseLimits {
            max_events: 5,
            ..limits()
        },
    ))
    .await;
    assert_eq!((frames.len(), end), (5, StreamStop::TooManyEvents));
}

#[tokio::test]
async fn the_deadline_wins_over_a_trickle() {
    // 100 keep-alives 100 ms apart would last 10 s; ending at `Deadline` (not `Closed`) is
    // the deadline winning, with no wall-clock threshold to flake on.
    let trickle = (0..100).map(|_| b":\n".to_vec()).collect();
    let (_, end) = drain(SseReader::new(
        serve(trickle, Duration::from_millis(100), true).await,
        SseLimits {
            deadline: Instant::now() + Duration::from_millis(500),
            ..limits()
        },
    ))
    .await;
    assert_eq!(end, StreamStop::Deadline);
}
