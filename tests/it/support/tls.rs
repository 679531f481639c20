//! A TLS front for tests: terminates TLS with a freshly made self-signed certificate for
//! `localhost` and pipes each connection's bytes to a plaintext upstream, as a load balancer in
//! front of an agent behind a private CA does. The certificate's PEM is what an operator puts
//! in `CARDGATE_OUTBOUND_CA_FILE`.
//!
//! With [`TlsFront::bind_mutual`] it also asks for a client certificate from a test CA (mutual
//! TLS): a connection that presents one reaches the upstream; one that does not reaches a
//! second upstream instead (a front that serves only the public card), as an mTLS agent whose
//! card stays public is set up.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};

pub(crate) struct TlsFront {
    /// `https://localhost:<port>`.
    pub origin: String,
    /// The self-signed certificate, PEM: the CA a client must trust to reach the front.
    pub ca_pem: String,
    listener: Option<TcpListener>,
    acceptor: TlsAcceptor,
    /// For mutual TLS: the CA that issues client certificates, and one it issued.
    pub client: Option<ClientIdentity>,
}

/// A client certificate a test CA issued, PEM.
pub(crate) struct ClientIdentity {
    pub certificate_pem: String,
    pub private_key_pem: String,
    /// A certificate from another CA, which the front refuses.
    pub stranger_certificate_pem: String,
    pub stranger_private_key_pem: String,
}

impl TlsFront {
    /// Binds the front's port first, so the upstream can be told its public origin.
    pub(crate) async fn bind() -> Self {
        Self::bind_with(false).await
    }

    /// A front that asks for a client certificate (see the module doc).
    pub(crate) async fn bind_mutual() -> Self {
        Self::bind_with(true).await
    }

    async fn bind_with(mutual: bool) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let rcgen::CertifiedKey { cert, signing_key } =
            rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(signing_key.serialize_der()));
        let provider = Arc::new(tokio_rustls::rustls::crypto::aws_lc_rs::default_provider());
        let builder = ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .unwrap();
        let (builder, client) = if mutual {
            let (ca, identity) = client_ca();
            let mut roots = tokio_rustls::rustls::RootCertStore::empty();
            roots.add(ca).unwrap();
            let verifier =
                tokio_rustls::rustls::server::WebPkiClientVerifier::builder_with_provider(
                    Arc::new(roots),
                    provider,
                )
                .allow_unauthenticated()
                .build()
                .unwrap();
            (builder.with_client_cert_verifier(verifier), Some(identity))
        } else {
            (builder.with_no_client_auth(), None)
        };
        let mut config = builder
            .with_single_cert(vec![cert.der().clone()], key)
            .unwrap();
        // Both protocols the upstream may speak: HTTP/1.1 for cards and JSON-RPC, h2 for gRPC.
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Self {
            origin: format!("https://localhost:{port}"),
            ca_pem: cert.pem(),
            listener: Some(listener),
            acceptor: TlsAcceptor::from(Arc::new(config)),
            client,
        }
    }

    /// Starts piping every accepted connection, once decrypted, to `upstream`.
    pub(crate) fn forward_to(&mut self, upstream: SocketAddr) {
        self.forward_split(upstream, upstream);
    }

    /// Pipes connections that presented a client certificate to `authenticated`, the others
    /// to `anonymous`.
    pub(crate) fn forward_split(&mut self, authenticated: SocketAddr, anonymous: SocketAddr) {
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
                    let presented = tls.get_ref().1.peer_certificates().is_some();
                    let upstream = if presented { authenticated } else { anonymous };
                    let Ok(mut plain) = TcpStream::connect(upstream).await else {
                        return;
                    };
                    let _ = tokio::io::copy_bidirectional(&mut tls, &mut plain).await;
                });
            }
        });
    }
}

/// A test CA, and a client certificate it issued (plus one from a CA nobody trusts).
fn client_ca() -> (
    tokio_rustls::rustls::pki_types::CertificateDer<'static>,
    ClientIdentity,
) {
    let issue = |ca_name: &str| {
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(rcgen::DnType::CommonName, ca_name);
        let ca = ca_params.self_signed(&ca_key).unwrap();
        let issuer = rcgen::Issuer::new(ca_params, ca_key);
        let client_key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "cardgate prober");
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
        let client = params.signed_by(&client_key, &issuer).unwrap();
        (ca, client.pem(), client_key.serialize_pem())
    };
    let (ca, certificate_pem, private_key_pem) = issue("cardgate test client CA");
    let (_, stranger_certificate_pem, stranger_private_key_pem) = issue("a CA nobody trusts");
    (
        ca.der().clone(),
        ClientIdentity {
            certificate_pem,
            private_key_pem,
            stranger_certificate_pem,
            stranger_private_key_pem,
        },
    )
}
