//! A TCP gate in front of the test Postgres: a server connects through it, and closing it cuts
//! every connection and refuses new ones, as a database that went away would, without
//! stopping the Postgres the other tests share.

use std::net::SocketAddr;

use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

pub(crate) struct DbGate {
    pub addr: SocketAddr,
    closed: CancellationToken,
}

impl DbGate {
    /// Listens on a loopback port and relays each connection to `upstream`.
    pub(crate) async fn start(upstream: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let closed = CancellationToken::new();
        let token = closed.clone();
        tokio::spawn(async move {
            loop {
                let accepted = tokio::select! {
                    () = token.cancelled() => return,
                    accepted = listener.accept() => accepted,
                };
                let Ok((mut client, _)) = accepted else {
                    continue;
                };
                let token = token.clone();
                tokio::spawn(async move {
                    let Ok(mut server) = TcpStream::connect(upstream).await else {
                        return;
                    };
                    tokio::select! {
                        () = token.cancelled() => {}
                        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                    }
                });
            }
        });
        Self { addr, closed }
    }

    /// Cuts every open connection and stops listening.
    pub(crate) fn close(&self) {
        self.closed.cancel();
    }
}

impl Drop for DbGate {
    fn drop(&mut self) {
        self.closed.cancel();
    }
}
