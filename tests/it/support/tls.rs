//! A TLS front for tests: terminates TLS with a freshly made self-signed certificate for
//! `localhost` and pipes each connection's bytes to a plaintext upstream, as a load balancer in
//! front of an agent behind a private CA does. The certificate's PEM is what an operator puts
//! in `CARDGATE_OUTBOUND_CA_FILE`.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};

pub struct TlsFront {
    /// `https://localhost:<port>`.
    pub origin: String,
    /// The self-signed certificate, PEM: the CA a client must trust to reach the front.
    pub ca_pem: String,
    listener: Option<TcpListener>,
    acceptor: TlsAcceptor,
}

impl TlsFront {
    /// Binds the front's port first, so the upstream can be told its public origin.
    pub async fn bind() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let rcgen::CertifiedKey { cert, signing_key } =
            rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(signing_key.serialize_der()));
        let mut config = ServerConfig::builder_with_provider(Arc::new(
            tokio_rustls::rustls::crypto::aws_lc_rs::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert.der().clone()], key)
        .unwrap();
        // Both protocols the upstream may speak: HTTP/1.1 for cards and JSON-RPC, h2 for gRPC.
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Self {
            origin: format!("https://localhost:{port}"),
            ca_pem: cert.pem(),
            listener: Some(listener),
            acceptor: TlsAcceptor::from(Arc::new(config)),
        }
    }

    /// Starts piping every accepted connection, once decrypted, to `upstream`.
    pub fn forward_to(&mut self, upstream: SocketAddr) {
        let listener = self.listener.take().expect("forwarding starts once");
        let acceptor = self.acceptor.clone();
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    // A client that refuses the certificate ends its handshake here.
                    let Ok(mut tls) = acceptor.accept(socket).await else {
                        return;
                    };
                    let Ok(mut plain) = TcpStream::connect(upstream).await else {
                        return;
                    };
                    let _ = tokio::io::copy_bidirectional(&mut tls, &mut plain).await;
                });
            }
        });
    }
}
