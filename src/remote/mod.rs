//! All outbound HTTP: one guarded client for card fetches, `jku` key sets, probes and push
//! registration alike.
//!
//! Guarantees, whoever named the URL: http(s) only; hosts are resolved by cardgate, every
//! resolved address is checked against the [`NetworkPolicy`], and the connection goes to the
//! checked address (the resolver hands reqwest only those, so there is no DNS-rebinding window);
//! IP-literal hosts are checked before the request; redirects are followed by hand, a few at
//! most, each hop checked again; bodies are read against a byte cap and aborted past it; every
//! request has connect and total deadlines; system proxies are ignored; and every request to
//! an agent's host waits for that host's turn ([`hosts`]), which a `429` or `503` with
//! `Retry-After` puts off.

pub mod a2a;
pub mod grpc_transport;
pub mod hosts;
pub(crate) mod policy;
pub mod presentation;
pub mod sse;

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use reqwest::header::{HeaderMap, LOCATION};
use url::{Host, Url};

pub use policy::NetworkPolicy;

use crate::domain::card::same_origin;
use crate::domain::credential::Secret;
use crate::domain::time::{self, Timestamp};
use crate::metrics::Metrics;
use hosts::HostGate;

/// How the outbound client is built.
#[derive(Debug, Clone)]
pub struct OutboundSettings {
    pub policy: NetworkPolicy,
    /// Certificate authorities (PEM) trusted beside the platform's roots; empty for none.
    pub extra_roots_pem: Vec<u8>,
    pub connect_timeout: Duration,
    /// Backstop for any single request; callers set tighter deadlines per use.
    pub request_timeout: Duration,
    pub max_redirects: usize,
    pub user_agent: String,
}

impl Default for OutboundSettings {
    fn default() -> Self {
        Self {
            policy: NetworkPolicy::default(),
            extra_roots_pem: Vec::new(),
            connect_timeout: Duration::from_secs(3),
            request_timeout: Duration::from_secs(60),
            max_redirects: 3,
            user_agent: format!(
                "cardgate/{} (A2A lifecycle trust registry)",
                env!("CARGO_PKG_VERSION")
            ),
        }
    }
}

/// Why an outbound request did not produce a usable response.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FetchError {
    #[error("{url} uses `{scheme}`; only http and https are fetched")]
    Scheme { url: String, scheme: String },
    #[error(
        "{host}: {reason}; cardgate does not connect to loopback, private, link-local or other \
         non-public addresses unless CARDGATE_ALLOW_NETWORKS allows them"
    )]
    Denied { host: String, reason: String },
    #[error("{host} could not be resolved: {reason}")]
    Resolve { host: String, reason: String },
    #[error("{url} did not finish answering within {secs} s")]
    Timeout { url: String, secs: u64 },
    #[error("{url} sent more than {limit} bytes; the download was aborted")]
    TooLarge { url: String, limit: usize },
    #[error("{url} redirected more than {max} times")]
    TooManyRedirects { url: String, max: usize },
    #[error(
        "{from} redirected to {to}, on another origin; a card is only accepted from its own origin"
    )]
    CrossOriginRedirect { from: String, to: String },
    #[error("{url} answered {status} without a usable Location")]
    BadRedirect { url: String, status: u16 },
    #[error("{url} answered HTTP {status}")]
    Status { url: String, status: u16 },
    #[error("{url}: {reason}")]
    Transport { url: String, reason: String },
    #[error(
        "{url}: its host asked cardgate to wait until {} (429 or 503 with Retry-After); \
         that is not held against the agent",
        time::format(*until)
    )]
    Throttled { url: String, until: Timestamp },
}

/// Whether a request waits for its host's turn (module [`hosts`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pacing {
    Paced,
    /// The operator's own webhook receivers, which the webhook sender paces by itself.
    Unpaced,
}

/// Which redirects a fetch follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Redirects {
    /// None: a 3xx is returned as it is.
    None,
    /// Only to the same origin as the URL first asked for.
    SameOrigin,
}

/// Bounds of one fetch.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_body: usize,
    /// Deadline for the whole exchange: connect, redirects, headers and body.
    pub timeout: Duration,
}

/// A response with its body read in full (within the cap).
#[derive(Debug, Clone)]
pub struct Fetched {
    pub url: Url,
    pub status: u16,
    pub headers: HeaderMap,
    pub body: Bytes,
}

/// The guarded client. Cheap to clone.
#[derive(Clone)]
pub struct Outbound {
    client: reqwest::Client,
    policy: Arc<NetworkPolicy>,
    max_redirects: usize,
    connect_timeout: Duration,
    request_timeout: Duration,
    extra_roots_pem: Arc<Vec<u8>>,
    user_agent: String,
    metrics: Metrics,
    /// The TLS client certificate this client presents (mutual TLS), PEM: certificate chain,
    /// then private key. `None` for the shared client.
    identity_pem: Option<Arc<Secret>>,
    /// Each host's turn (`None`: requests go out as they come, as for a webhook receiver).
    hosts: Option<Arc<HostGate>>,
    /// Where a throttling host is noted for whoever is watching (a probe run).
    watch: Option<Arc<ThrottleWatch>>,
}

/// The latest back-off any host asked for while it was watched: a probe run that met one is
/// deferred, not judged.
#[derive(Debug, Default)]
pub struct ThrottleWatch(std::sync::Mutex<Option<Timestamp>>);

impl ThrottleWatch {
    fn note(&self, until: Timestamp) {
        let mut seen = self.0.lock().unwrap_or_else(|e| e.into_inner());
        *seen = (*seen).max(Some(until));
    }

    /// Until when the host asked to be left alone, if it did.
    pub fn until(&self) -> Option<Timestamp> {
        *self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A reqwest client that resolves through the policy, follows no redirect by itself and
/// ignores system proxies.
fn build_client(
    policy: &Arc<NetworkPolicy>,
    extra_roots_pem: &[u8],
    user_agent: &str,
    (connect_timeout, request_timeout): (Duration, Duration),
    identity: Option<reqwest::Identity>,
) -> Result<reqwest::Client, reqwest::Error> {
    let mut builder = reqwest::Client::builder();
    if !extra_roots_pem.is_empty() {
        for cert in reqwest::Certificate::from_pem_bundle(extra_roots_pem)? {
            builder = builder.add_root_certificate(cert);
        }
    }
    if let Some(identity) = identity {
        builder = builder.identity(identity);
    }
    builder
        .user_agent(user_agent)
        .connect_timeout(connect_timeout)
        .timeout(request_timeout)
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .dns_resolver(Arc::new(GuardedResolver {
            policy: policy.clone(),
        }))
        .build()
}

/// A host whose every address the policy refuses.
#[derive(Debug, thiserror::Error)]
#[error("{host} resolves only to refused addresses ({reason})")]
struct DeniedHost {
    host: String,
    reason: String,
}

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct ResolveFailed(String);

/// DNS through the policy: only permitted addresses reach the connector.
struct GuardedResolver {
    policy: Arc<NetworkPolicy>,
}

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let policy = self.policy.clone();
        let host = name.as_str().to_string();
        Box::pin(async move {
            let addrs = permitted_addresses(&policy, &host).await?;
            let addrs: Addrs = Box::new(
                addrs
                    .into_iter()
                    .map(|a| SocketAddr::new(a, 0))
                    .collect::<Vec<_>>()
                    .into_iter(),
            );
            Ok(addrs)
        })
    }
}

/// The addresses of `host` (a name, or an IP literal) that the policy permits; an error naming
/// the refusals when there are none. Every outbound connection, HTTP or gRPC, goes to one of
/// these and nowhere else.
async fn permitted_addresses(
    policy: &NetworkPolicy,
    host: &str,
) -> Result<Vec<IpAddr>, Box<dyn std::error::Error + Send + Sync>> {
    let literal = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .parse::<IpAddr>();
    let addrs: Vec<IpAddr> = match (literal, policy.override_for(host)) {
        (Ok(addr), _) => vec![addr],
        (Err(_), Some(fixed)) => fixed.to_vec(),
        (Err(_), None) => tokio::net::lookup_host((host, 0))
            .await
            .map_err(|e| ResolveFailed(e.to_string()))?
            .map(|sa| sa.ip())
            .collect(),
    };
    let (allowed, refused): (Vec<_>, Vec<_>) = addrs
        .into_iter()
        .map(|a| (a, policy.check(a)))
        .partition(|(_, verdict)| verdict.is_ok());
    if allowed.is_empty() {
        let reason = refused
            .into_iter()
            .filter_map(|(_, v)| v.err())
            .collect::<Vec<_>>();
        let reason = if reason.is_empty() {
            "no addresses".to_string()
        } else {
            reason.join(", ")
        };
        return Err(Box::new(DeniedHost {
            host: host.to_string(),
            reason,
        }));
    }
    Ok(allowed.into_iter().map(|(a, _)| a).collect())
}

impl Outbound {
    pub fn new(settings: OutboundSettings) -> Result<Self, reqwest::Error> {
        let policy = Arc::new(settings.policy);
        let extra_roots_pem = Arc::new(settings.extra_roots_pem);
        let client = build_client(
            &policy,
            &extra_roots_pem,
            &settings.user_agent,
            (settings.connect_timeout, settings.request_timeout),
            None,
        )?;
        Ok(Self {
            client,
            policy,
            max_redirects: settings.max_redirects,
            connect_timeout: settings.connect_timeout,
            request_timeout: settings.request_timeout,
            extra_roots_pem,
            user_agent: settings.user_agent,
            metrics: Metrics::default(),
            identity_pem: None,
            hosts: None,
            watch: None,
        })
    }

    /// Paces every request to an agent's host through `gate` (module [`hosts`]).
    pub fn with_hosts(mut self, gate: Arc<HostGate>) -> Self {
        self.hosts = Some(gate);
        self
    }

    /// The same client, noting in the returned watch any host that asks it to wait.
    pub fn watching_throttles(&self) -> (Self, Arc<ThrottleWatch>) {
        let watch = Arc::new(ThrottleWatch::default());
        let watched = Self {
            watch: Some(watch.clone()),
            ..self.clone()
        };
        (watched, watch)
    }

    /// The address `url`'s host is dialled at, which its turn is kept by; `None` when it does
    /// not resolve (the request then fails as it would have). Remembered by the gate for a
    /// while, so that a request does not pay a DNS lookup of its own beside the connection's.
    async fn host_addr(gate: &HostGate, policy: &NetworkPolicy, url: &Url) -> Option<IpAddr> {
        let host = url.host_str()?;
        if let Some(addr) = gate.remembered(host) {
            return Some(addr);
        }
        let addr = permitted_addresses(policy, host)
            .await
            .ok()?
            .into_iter()
            .min()?;
        gate.remember(host, addr);
        Some(addr)
    }

    /// Waits for a turn at `url`'s host: the permit (held until the answer's head) and the
    /// address it is for; nothing when requests to it are not paced.
    pub(crate) async fn turn(
        &self,
        url: &Url,
    ) -> Result<Option<(hosts::HostPermit, IpAddr)>, FetchError> {
        let Some(gate) = &self.hosts else {
            return Ok(None);
        };
        let Some(addr) = Self::host_addr(gate, &self.policy, url).await else {
            return Ok(None);
        };
        match gate.acquire(addr).await {
            Ok(permit) => Ok(Some((permit, addr))),
            Err(throttled) => {
                self.throttled(throttled.until);
                Err(FetchError::Throttled {
                    url: url.to_string(),
                    until: throttled.until,
                })
            }
        }
    }

    /// Notes what `addr` answered: a back-off it asks for, kept and watched.
    async fn answered(&self, addr: IpAddr, status: u16, headers: &HeaderMap) -> Option<Timestamp> {
        let gate = self.hosts.as_ref()?;
        let retry_after = headers
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok());
        let until = gate.answered(addr, status, retry_after).await?;
        self.throttled(until);
        Some(until)
    }

    /// Notes what the host of `url` answered, for a request that did not wait its turn here
    /// (a gRPC call's HTTP answer).
    pub(crate) async fn answered_at(&self, url: &Url, status: u16, headers: &HeaderMap) {
        if !matches!(status, 429 | 503) {
            return;
        }
        let Some(gate) = &self.hosts else {
            return;
        };
        if let Some(addr) = Self::host_addr(gate, &self.policy, url).await {
            self.answered(addr, status, headers).await;
        }
    }

    fn throttled(&self, until: Timestamp) {
        if let Some(watch) = &self.watch {
            watch.note(until);
        }
    }

    /// The same guarded client, presenting a TLS client certificate (mutual TLS) on every
    /// connection, over HTTP and gRPC alike. `identity_pem` holds the certificate chain and its
    /// private key; why it is unusable when it is (never quoting it).
    pub fn with_identity(&self, identity_pem: Secret) -> Result<Self, String> {
        let identity =
            reqwest::Identity::from_pem(identity_pem.expose().as_bytes()).map_err(|e| {
                format!(
                    "the client certificate or its private key is unusable: {}",
                    innermost(&e)
                )
            })?;
        let client = build_client(
            &self.policy,
            &self.extra_roots_pem,
            &self.user_agent,
            (self.connect_timeout, self.request_timeout),
            Some(identity),
        )
        .map_err(|e| format!("the client certificate cannot be used: {}", innermost(&e)))?;
        Ok(Self {
            client,
            identity_pem: Some(Arc::new(identity_pem)),
            ..self.clone()
        })
    }

    /// Where this client counts: the process's metrics, which probes report to as well.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Counts every request's result in `metrics` (by default, in a registry nobody reads).
    pub fn with_metrics(mut self, metrics: Metrics) -> Self {
        self.metrics = metrics;
        self
    }

    pub fn policy(&self) -> &NetworkPolicy {
        &self.policy
    }

    /// The underlying client, for building requests that are then sent with [`Self::send`].
    pub fn client(&self) -> &reqwest::Client {
        &self.client
    }

    /// Checks what can be checked before connecting: the scheme and an IP-literal host.
    /// (Named hosts are checked by the resolver, address by address.)
    pub fn check_url(&self, url: &Url) -> Result<(), FetchError> {
        if !matches!(url.scheme(), "http" | "https") {
            return Err(FetchError::Scheme {
                url: url.to_string(),
                scheme: url.scheme().to_string(),
            });
        }
        let literal = match url.host() {
            Some(Host::Ipv4(v4)) => Some(IpAddr::V4(v4)),
            Some(Host::Ipv6(v6)) => Some(IpAddr::V6(v6)),
            Some(Host::Domain(_)) => None,
            None => {
                return Err(FetchError::Transport {
                    url: url.to_string(),
                    reason: "the URL has no host".into(),
                });
            }
        };
        if let Some(addr) = literal {
            self.policy
                .check(addr)
                .map_err(|reason| FetchError::Denied {
                    host: addr.to_string(),
                    reason,
                })?;
        }
        Ok(())
    }

    /// Whether plain http to this URL's host is to a network the operator allowed (for `jku`).
    pub fn is_allowed_network(&self, url: &Url) -> bool {
        match url.host() {
            Some(Host::Ipv4(v4)) => self.policy.is_allowed(IpAddr::V4(v4)),
            Some(Host::Ipv6(v6)) => self.policy.is_allowed(IpAddr::V6(v6)),
            Some(Host::Domain(d)) => self
                .policy
                .override_for(d)
                .is_some_and(|addrs| addrs.iter().all(|a| self.policy.is_allowed(*a))),
            None => false,
        }
    }

    /// GET `url`, following redirects per `redirects`, reading the body within `limits`.
    pub async fn get(
        &self,
        url: Url,
        headers: HeaderMap,
        redirects: Redirects,
        limits: Limits,
    ) -> Result<Fetched, FetchError> {
        let first = url.clone();
        let secs = limits.timeout.as_secs().max(1);
        tokio::time::timeout(
            limits.timeout,
            self.get_inner(url, headers, redirects, limits.max_body),
        )
        .await
        .unwrap_or_else(|_| {
            Err(FetchError::Timeout {
                url: first.to_string(),
                secs,
            })
        })
    }

    async fn get_inner(
        &self,
        url: Url,
        headers: HeaderMap,
        redirects: Redirects,
        max_body: usize,
    ) -> Result<Fetched, FetchError> {
        let origin = url.clone();
        let mut current = url;
        let mut hops = 0;
        loop {
            let (response, backoff) = self
                .send_paced(
                    self.client.get(current.clone()).headers(headers.clone()),
                    Pacing::Paced,
                )
                .await?;
            if let Some(until) = backoff {
                return Err(FetchError::Throttled {
                    url: current.to_string(),
                    until,
                });
            }
            let status = response.status();
            if status.is_redirection() && status.as_u16() != 304 && redirects != Redirects::None {
                let next = response
                    .headers()
                    .get(LOCATION)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|loc| current.join(loc).ok())
                    .ok_or_else(|| FetchError::BadRedirect {
                        url: current.to_string(),
                        status: status.as_u16(),
                    })?;
                hops += 1;
                if hops > self.max_redirects {
                    return Err(FetchError::TooManyRedirects {
                        url: origin.to_string(),
                        max: self.max_redirects,
                    });
                }
                // The new target's addresses are checked before its origin: a redirect into the
                // metadata service should be reported as what it is.
                self.check_url(&next)?;
                if !same_origin(&origin, next.as_str()) {
                    return Err(FetchError::CrossOriginRedirect {
                        from: current.to_string(),
                        to: next.to_string(),
                    });
                }
                current = next;
                continue;
            }
            let headers = response.headers().clone();
            let body = read_capped(response, max_body).await?;
            return Ok(Fetched {
                url: current,
                status: status.as_u16(),
                headers,
                body,
            });
        }
    }

    /// Sends a request built on [`Self::client`], after checking its URL and waiting for its
    /// host's turn. No redirects are followed; the response body is left for the caller to
    /// read within its own bounds. A `429` or `503` with `Retry-After` is returned as it came,
    /// and its host left alone until then.
    pub async fn send(
        &self,
        request: reqwest::RequestBuilder,
    ) -> Result<reqwest::Response, FetchError> {
        self.send_paced(request, Pacing::Paced)
            .await
            .map(|(response, _)| response)
    }

    /// [`Self::send`] without waiting for a turn: for the operator's own webhook receivers,
    /// which the webhook sender paces by itself.
    pub async fn send_unpaced(
        &self,
        request: reqwest::RequestBuilder,
    ) -> Result<reqwest::Response, FetchError> {
        self.send_paced(request, Pacing::Unpaced)
            .await
            .map(|(response, _)| response)
    }

    /// Sends as [`Self::send`] does; with the back-off the answer asked for, if it did.
    async fn send_paced(
        &self,
        request: reqwest::RequestBuilder,
        pacing: Pacing,
    ) -> Result<(reqwest::Response, Option<Timestamp>), FetchError> {
        let request = request.build().map_err(|e| FetchError::Transport {
            url: String::new(),
            reason: e.to_string(),
        })?;
        let url = request.url().clone();
        let result = self.execute(&url, request, pacing).await;
        self.metrics.outbound(
            result
                .as_ref()
                .map_or_else(FetchError::kind, |_| "response"),
        );
        result
    }

    async fn execute(
        &self,
        url: &Url,
        request: reqwest::Request,
        pacing: Pacing,
    ) -> Result<(reqwest::Response, Option<Timestamp>), FetchError> {
        self.check_url(url)?;
        let turn = match pacing {
            Pacing::Paced => self.turn(url).await?,
            Pacing::Unpaced => None,
        };
        let response = self
            .client
            .execute(request)
            .await
            .map_err(|e| classify(url, &e))?;
        let backoff = match &turn {
            Some((_, addr)) => {
                self.answered(*addr, response.status().as_u16(), response.headers())
                    .await
            }
            None => None,
        };
        Ok((response, backoff))
    }
}

/// Reads a body chunk by chunk and gives up, dropping the connection, past `max` bytes.
pub async fn read_capped(mut response: reqwest::Response, max: usize) -> Result<Bytes, FetchError> {
    let url = response.url().to_string();
    if response
        .content_length()
        .is_some_and(|len| len > max as u64)
    {
        return Err(FetchError::TooLarge { url, limit: max });
    }
    let mut body = BytesMut::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| classify_str(&url, &e))? {
        if body.len() + chunk.len() > max {
            return Err(FetchError::TooLarge { url, limit: max });
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body.freeze())
}

/// Turns a reqwest error into the reason a person needs.
fn classify(url: &Url, err: &reqwest::Error) -> FetchError {
    classify_str(url.as_str(), err)
}

fn classify_str(url: &str, err: &reqwest::Error) -> FetchError {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = source {
        if let Some(denied) = e.downcast_ref::<DeniedHost>() {
            return FetchError::Denied {
                host: denied.host.clone(),
                reason: format!("resolves only to refused addresses ({})", denied.reason),
            };
        }
        if let Some(failed) = e.downcast_ref::<ResolveFailed>() {
            let host = Url::parse(url)
                .ok()
                .and_then(|u| u.host_str().map(str::to_string))
                .unwrap_or_default();
            return FetchError::Resolve {
                host,
                reason: failed.0.clone(),
            };
        }
        source = e.source();
    }
    let reason = if err.is_timeout() {
        "timed out".to_string()
    } else if err.is_connect() {
        format!("could not connect ({})", innermost(err))
    } else {
        innermost(err)
    };
    FetchError::Transport {
        url: url.to_string(),
        reason,
    }
}

fn innermost(err: &(dyn std::error::Error + 'static)) -> String {
    let mut current = err;
    while let Some(next) = current.source() {
        current = next;
    }
    current.to_string()
}

impl FetchError {
    /// A short, bounded name for the failure (a metrics label).
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Scheme { .. } => "scheme",
            Self::Denied { .. } => "refused",
            Self::Resolve { .. } => "resolve",
            Self::Timeout { .. } => "timeout",
            Self::TooLarge { .. } => "too-large",
            Self::TooManyRedirects { .. }
            | Self::CrossOriginRedirect { .. }
            | Self::BadRedirect { .. } => "redirect",
            Self::Status { .. } => "status",
            Self::Transport { .. } => "transport",
            Self::Throttled { .. } => "throttled",
        }
    }
}
