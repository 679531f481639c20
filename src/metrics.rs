//! Prometheus metrics: what this process counts as it works (requests, rate-limit refusals,
//! outbound fetches) and what it reads from the registry's state when scraped (subjects by gate
//! state, jobs, probe runs, queue lag, ledger head). One [`Metrics`] per process, owned by the
//! composition root and handed to the parts that count; no global registry, so two servers in
//! one process (the tests) never mix their figures.
//!
//! A leaf module: it imports nothing from the crate, and everything may import it.

use std::sync::Arc;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// The content type of [`Metrics::render`]'s output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    method: String,
    /// The route template (`/v1/callees/{id}`), never the raw path: bounded cardinality.
    route: String,
    status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteLabels {
    method: String,
    route: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabel {
    kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabel {
    result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct GateLabel {
    gate_state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ClassLabel {
    class: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OperationLabel {
    operation: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct JobLabels {
    kind: String,
    status: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabel {
    outcome: String,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

/// The registry's state as read at scrape time.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    /// (gate state, subjects).
    pub subjects: Vec<(String, i64)>,
    /// (job kind, job status, jobs).
    pub jobs: Vec<(String, String, i64)>,
    /// (outcome: `passed`, `failed`, `aborted`, `running` or `queued`, probe runs).
    pub probe_runs: Vec<(String, i64)>,
    /// How long the oldest due job has waited, in seconds.
    pub queue_lag_seconds: f64,
    /// The ledger's newest seq.
    pub ledger_head: i64,
    /// Webhook subscriptions whose receivers have failed every attempt for the failing
    /// threshold or longer.
    pub failing_subscriptions: i64,
    /// (track-record class, subjects).
    pub track_classes: Vec<(String, i64)>,
}

/// This process's metrics. Cheap to clone.
#[derive(Clone)]
pub struct Metrics {
    inner: Arc<Inner>,
}

struct Inner {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    request_seconds: HistogramFamily<RouteLabels>,
    rate_limited: Family<KindLabel, Counter>,
    outbound: Family<ResultLabel, Counter>,
    subjects: Family<GateLabel, Gauge>,
    jobs: Family<JobLabels, Gauge>,
    probe_runs: Family<OutcomeLabel, Gauge>,
    queue_lag: Gauge<f64, std::sync::atomic::AtomicU64>,
    ledger_head: Gauge,
    failing_subscriptions: Gauge,
    track_classes: Family<ClassLabel, Gauge>,
    probe_latency: HistogramFamily<OperationLabel>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

fn agent_latency_histogram() -> Histogram {
    // 1 ms to ~65 s: an SDK sample answers in milliseconds, an agent on an LLM in seconds.
    Histogram::new(exponential_buckets(0.001, 2.0, 17))
}

fn latency_histogram() -> Histogram {
    // 100 µs to ~6.5 s: a decision from memory sits in the first buckets, a registration
    // (which fetches a card) in the last.
    Histogram::new(exponential_buckets(0.0001, 2.0, 17))
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("cardgate");
        let requests = Family::<RequestLabels, Counter>::default();
        registry.register(
            "http_requests",
            "HTTP requests answered, by method, route template and status",
            requests.clone(),
        );
        let request_seconds: HistogramFamily<RouteLabels> =
            Family::new_with_constructor(latency_histogram);
        registry.register(
            "http_request_duration_seconds",
            "Time to answer an HTTP request, by method and route template",
            request_seconds.clone(),
        );
        let rate_limited = Family::<KindLabel, Counter>::default();
        registry.register(
            "rate_limited",
            "Requests refused 429: `key` (a key over its rate) or `anonymous` (an address over its)",
            rate_limited.clone(),
        );
        let outbound = Family::<ResultLabel, Counter>::default();
        registry.register(
            "outbound_requests",
            "Requests to agents (cards, key sets, probes, push registration) by result",
            outbound.clone(),
        );
        let subjects = Family::<GateLabel, Gauge>::default();
        registry.register("subjects", "Subjects by gate state", subjects.clone());
        let jobs = Family::<JobLabels, Gauge>::default();
        registry.register("jobs", "Jobs in the queue by kind and status", jobs.clone());
        let probe_runs = Family::<OutcomeLabel, Gauge>::default();
        registry.register(
            "probe_runs",
            "Probe runs kept, by outcome",
            probe_runs.clone(),
        );
        let queue_lag = Gauge::<f64, std::sync::atomic::AtomicU64>::default();
        registry.register(
            "queue_lag_seconds",
            "How long the oldest due job has waited for a worker",
            queue_lag.clone(),
        );
        let ledger_head = Gauge::default();
        registry.register(
            "ledger_head_seq",
            "The ledger's newest sequence number",
            ledger_head.clone(),
        );
        let failing_subscriptions = Gauge::default();
        registry.register(
            "webhook_subscriptions_failing",
            "Webhook subscriptions whose receivers have failed every attempt for a day or more",
            failing_subscriptions.clone(),
        );
        let track_classes = Family::<ClassLabel, Gauge>::default();
        registry.register(
            "track_record_subjects",
            "Subjects by track-record class (new, stable, flaky, failing)",
            track_classes.clone(),
        );
        let probe_latency: HistogramFamily<OperationLabel> =
            Family::new_with_constructor(agent_latency_histogram);
        registry.register(
            "probe_latency_seconds",
            "Agents' latency measured by this process's probes, by operation (send, first_event, \
             terminal, push)",
            probe_latency.clone(),
        );
        Self {
            inner: Arc::new(Inner {
                track_classes,
                probe_latency,
                registry,
                requests,
                request_seconds,
                rate_limited,
                outbound,
                subjects,
                jobs,
                probe_runs,
                queue_lag,
                ledger_head,
                failing_subscriptions,
            }),
        }
    }

    /// One answered request.
    pub fn request(&self, method: &str, route: &str, status: u16, seconds: f64) {
        let (method, route) = (method.to_string(), route.to_string());
        self.inner
            .request_seconds
            .get_or_create(&RouteLabels {
                method: method.clone(),
                route: route.clone(),
            })
            .observe(seconds);
        self.inner
            .requests
            .get_or_create(&RequestLabels {
                method,
                route,
                status,
            })
            .inc();
    }

    /// A request refused for its rate: `key` or `anonymous`.
    pub fn rate_limited(&self, kind: &str) {
        self.inner
            .rate_limited
            .get_or_create(&KindLabel { kind: kind.into() })
            .inc();
    }

    /// One outbound request's result: `response`, or why there was none (`refused`, `timeout`,
    /// `transport`, ...).
    pub fn outbound(&self, result: &str) {
        self.inner
            .outbound
            .get_or_create(&ResultLabel {
                result: result.into(),
            })
            .inc();
    }

    /// An agent's latency for `operation` as one probe run measured it, in milliseconds.
    pub fn probe_latency(&self, operation: &str, millis: &[u64]) {
        let histogram = self.inner.probe_latency.get_or_create(&OperationLabel {
            operation: operation.into(),
        });
        for ms in millis {
            histogram.observe(*ms as f64 / 1000.0);
        }
    }

    /// Every metric in the OpenMetrics text format, the scrape-time ones from `snapshot`.
    pub fn render(&self, snapshot: &Snapshot) -> String {
        let inner = &self.inner;
        // A state that disappeared since the last scrape must read 0, not its old value.
        inner.subjects.clear();
        for (gate, n) in &snapshot.subjects {
            inner
                .subjects
                .get_or_create(&GateLabel {
                    gate_state: gate.clone(),
                })
                .set(*n);
        }
        inner.jobs.clear();
        for (kind, status, n) in &snapshot.jobs {
            inner
                .jobs
                .get_or_create(&JobLabels {
                    kind: kind.clone(),
                    status: status.clone(),
                })
                .set(*n);
        }
        inner.probe_runs.clear();
        for (outcome, n) in &snapshot.probe_runs {
            inner
                .probe_runs
                .get_or_create(&OutcomeLabel {
                    outcome: outcome.clone(),
                })
                .set(*n);
        }
        inner.track_classes.clear();
        for (class, n) in &snapshot.track_classes {
            inner
                .track_classes
                .get_or_create(&ClassLabel {
                    class: class.clone(),
                })
                .set(*n);
        }
        inner.queue_lag.set(snapshot.queue_lag_seconds);
        inner.ledger_head.set(snapshot.ledger_head);
        inner
            .failing_subscriptions
            .set(snapshot.failing_subscriptions);
        let mut text = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut text, &inner.registry);
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_the_snapshot_are_rendered_with_their_labels() {
        let metrics = Metrics::new();
        metrics.request("GET", "/v1/trust", 200, 0.0003);
        metrics.request("GET", "/v1/trust", 200, 0.0004);
        metrics.rate_limited("key");
        metrics.outbound("timeout");
        metrics.probe_latency("terminal", &[120, 4000]);
        let text = metrics.render(&Snapshot {
            subjects: vec![("lifecycle-trusted".into(), 3)],
            jobs: vec![("probe".into(), "queued".into(), 2)],
            probe_runs: vec![("passed".into(), 5)],
            queue_lag_seconds: 1.5,
            ledger_head: 42,
            failing_subscriptions: 1,
            track_classes: vec![("flaky".into(), 2)],
        });
        for line in [
            r#"cardgate_http_requests_total{method="GET",route="/v1/trust",status="200"} 2"#,
            r#"cardgate_http_request_duration_seconds_count{method="GET",route="/v1/trust"} 2"#,
            r#"cardgate_rate_limited_total{kind="key"} 1"#,
            r#"cardgate_outbound_requests_total{result="timeout"} 1"#,
            r#"cardgate_subjects{gate_state="lifecycle-trusted"} 3"#,
            r#"cardgate_jobs{kind="probe",status="queued"} 2"#,
            r#"cardgate_probe_runs{outcome="passed"} 5"#,
            "cardgate_queue_lag_seconds 1.5",
            "cardgate_ledger_head_seq 42",
            "cardgate_webhook_subscriptions_failing 1",
            r#"cardgate_track_record_subjects{class="flaky"} 2"#,
            r#"cardgate_probe_latency_seconds_count{operation="terminal"} 2"#,
            r#"cardgate_probe_latency_seconds_sum{operation="terminal"} 4.12"#,
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "{line} missing from\n{text}"
            );
        }
        // A gate state with no subjects left is gone, not stale.
        let text = metrics.render(&Snapshot::default());
        assert!(!text.contains("lifecycle-trusted"), "{text}");
    }
}
