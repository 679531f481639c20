//! Hostile input: what an agent, or whoever registers one, can make cardgate reach or spend.
//! Each test names the attack and asserts the bound cardgate now meets.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use cardgate::remote::{Limits, NetworkPolicy, Outbound, OutboundSettings, Redirects};
use reqwest::header::HeaderMap;

/// A listener on 127.0.0.1 that counts the connections it accepts.
async fn counting_listener() -> (u16, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            drop(socket);
        }
    });
    (port, accepted)
}

async fn fetch(outbound: &Outbound, url: &str) -> Result<(), String> {
    let url = url::Url::parse(url).map_err(|e| format!("not a URL: {e}"))?;
    let limits = Limits {
        max_body: 1024,
        timeout: Duration::from_secs(2),
    };
    outbound
        .get(url, HeaderMap::new(), Redirects::None, limits)
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_literal_form_of_a_local_address_reaches_a_listener_on_loopback() {
    let (port, accepted) = counting_listener().await;
    let outbound = Outbound::new(OutboundSettings::default()).unwrap();
    let forms = [
        "127.0.0.1",
        "127.1",
        "127.0.1",
        "2130706433",
        "0x7f000001",
        "0x7f.0.0.1",
        "0177.0.0.1",
        "0177.1",
        "017700000001",
        "0",
        "0.0.0.0",
        "0x0",
        "127.0.0.1.",
        "localhost",
        "LOCALHOST",
        "localhost.",
        "[::1]",
        "[::]",
        "[0:0:0:0:0:0:0:1]",
        "[::ffff:127.0.0.1]",
        "[::ffff:7f00:1]",
        "[0:0:0:0:0:ffff:127.0.0.1]",
        "[::ffff:0.0.0.0]",
        "[::ffff:0:0]",
        "[::ffff:0:127.0.0.1]",
        "[::127.0.0.1]",
        "[::0.0.0.0]",
        "[64:ff9b::127.0.0.1]",
        "[64:ff9b::7f00:1]",
        "[2002:7f00:1::]",
        "[2001:0:1:2::80ff:fffe]",
        "[fe80::1%25lo]",
        "[fe80::1]",
    ];
    let mut reached = Vec::new();
    for form in forms {
        let url = format!("http://{form}:{port}/.well-known/agent-card.json");
        let before = accepted.load(Ordering::SeqCst);
        let result = fetch(&outbound, &url).await;
        assert!(result.is_err(), "{url} was fetched");
        if accepted.load(Ordering::SeqCst) != before {
            reached.push(format!("{url}: {result:?}"));
        }
    }
    assert!(
        reached.is_empty(),
        "these reached the loopback listener:\n{}",
        reached.join("\n")
    );

    // The control: the same listener is reachable when the operator allows loopback, so the
    // count above could have moved.
    let allowing = Outbound::new(OutboundSettings {
        policy: NetworkPolicy::new(NetworkPolicy::parse_allowed("127.0.0.0/8").unwrap()),
        ..OutboundSettings::default()
    })
    .unwrap();
    let _ = fetch(&allowing, &format!("http://127.0.0.1:{port}/")).await;
    assert_eq!(accepted.load(Ordering::SeqCst), 1);
}
