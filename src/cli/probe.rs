//! `cardgate probe <card-url>`: discovery and one probe cycle per subject, with no database and
//! no server; a temporary webhook receiver stands in for the service's. Progress goes to
//! stderr as it happens; the report (or `--json`) to stdout. Exit code 0 when every probed
//! subject would be promoted, 1 when not, 2 on usage or fetch errors.

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use clap::Args;
use serde_json::{Value, json};

use super::{junit, trials};
use crate::config::{OutboundArgs, with_trailing_slash};
use crate::domain::binding::Binding;
use crate::domain::callee::CardUrl;
use crate::domain::capability::CapabilityOutcome;
use crate::domain::card::{Assessment, NormalizedCard};
use crate::domain::credential::Credential;
use crate::domain::probe::PushDelivery;
use crate::domain::probe::{Finding, FindingStatus, ProbeScript};
use crate::domain::time;
use crate::domain::version::ProtocolVersion;
use crate::remote::Outbound;
use crate::service::credentials;
use crate::service::discovery::{Discovery, Fetch};
use crate::service::probe::{self, InboxDelivery, ProbeSettings, Progress, PushInbox};

/// One version's probe: its cycle, or why it could not run.
type Report = Result<probe::CycleOutput, String>;

#[derive(Debug, Clone, Args)]
pub struct ProbeArgs {
    /// The agent's card URL: an origin, its well-known card URL, or the legacy agent.json URL.
    pub card_url: String,

    /// Probe only this `Major.Minor` (default: every version the card offers).
    #[arg(long = "version", value_name = "MAJOR.MINOR")]
    pub protocol_version: Option<String>,

    /// Probe over this binding (`jsonrpc`, `http+json` or `grpc`) instead of the one cardgate
    /// prefers when a version is offered over several (JSON-RPC first).
    #[arg(long, value_name = "BINDING")]
    pub binding: Option<Binding>,

    /// Print the report as JSON on stdout.
    #[arg(long)]
    pub json: bool,

    /// Also write JUnit XML to this file: one test case per finding of each subject.
    #[arg(long, value_name = "FILE")]
    pub junit: Option<std::path::PathBuf>,

    /// The first message of the lifecycle task.
    #[arg(long)]
    pub message: Option<String>,

    /// A follow-up text for `input-required` turns (repeat for several).
    #[arg(long = "follow-up")]
    pub follow_ups: Vec<String>,

    /// The first message of the push task (default: the lifecycle message).
    #[arg(long)]
    pub push_message: Option<String>,

    /// Also start a task with this text and cancel it.
    #[arg(long)]
    pub cancel_message: Option<String>,

    /// Credentials for the card's security schemes: a JSON file mapping each scheme name to a
    /// credential as `PUT /v1/callees/{id}/credentials/{scheme}` takes it, e.g.
    /// `{"bearer": {"kind": "bearer", "token": "…"}}`. Keep it private: it holds secrets.
    #[arg(long, value_name = "FILE")]
    pub credentials: Option<std::path::PathBuf>,

    /// A JWKS file to pin instead of fetching the card's `jku`.
    #[arg(long, value_name = "FILE")]
    pub trusted_keys: Option<std::path::PathBuf>,

    /// Deadline of each probe cycle, in seconds.
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub deadline_secs: u64,

    /// Seconds of quiet the wait for the push task's terminal delivery lasts: each delivery
    /// that arrives starts it again, within the cycle's deadline.
    #[arg(long, env = "CARDGATE_PUSH_WAIT_SECS",
          default_value_t = ProbeSettings::default().push_wait.as_secs(),
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub push_wait_secs: u64,

    /// Lifecycle tasks each cycle runs at once: the first is the whole cycle, the others the
    /// lifecycle task alone; the cycle passes only if every trial passes.
    #[arg(long, env = "CARDGATE_PROBE_TRIALS",
          default_value_t = ProbeSettings::default().trials,
          value_parser = clap::value_parser!(u32).range(1..=16))]
    pub trials: u32,

    /// Where the temporary push webhook listens.
    #[arg(long, default_value = "127.0.0.1:0")]
    pub webhook_listen: SocketAddr,

    /// The URL agents use to reach the webhook (default: the listen address).
    #[arg(long)]
    pub public_url: Option<url::Url>,

    #[command(flatten)]
    pub outbound: OutboundArgs,
}

/// Prints each step as it happens.
struct Stderr;

impl Progress for Stderr {
    fn step(&self, message: &str) {
        let mut err = std::io::stderr().lock();
        let _ = writeln!(err, "{message}");
    }
}

/// The temporary webhook's deliveries, by token.
#[derive(Clone, Default)]
struct MemoryInbox(Arc<Mutex<HashMap<String, Vec<PushDelivery>>>>);

#[async_trait::async_trait]
impl PushInbox for MemoryInbox {
    async fn deliveries(&self, token: &str, skip: usize) -> Vec<InboxDelivery> {
        let all = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        all.get(token)
            .map(|list| {
                list.iter()
                    .skip(skip)
                    .map(|d| probe::to_inbox(d, token))
                    .collect()
            })
            .unwrap_or_default()
    }
}

async fn receive(
    State(inbox): State<MemoryInbox>,
    Path(token): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    let delivery = PushDelivery {
        received_at: time::now(),
        headers: crate::http::hooks::delivery_headers(&headers, &token),
        body: body.to_vec(),
    };
    let mut all = inbox
        .0
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    // The same bounds as the service's webhook: a flood with a valid token stops at the cap.
    let defaults = ProbeSettings::default();
    match all.get_mut(&token) {
        Some(_) if delivery.body.len() > defaults.limits.max_body => StatusCode::PAYLOAD_TOO_LARGE,
        Some(list) if list.len() >= defaults.push_max_deliveries => StatusCode::TOO_MANY_REQUESTS,
        Some(list) => {
            list.push(delivery);
            StatusCode::NO_CONTENT
        }
        None => StatusCode::NOT_FOUND,
    }
}

/// The `--credentials` file, read and checked against the card's schemes.
fn credentials_of(
    args: &ProbeArgs,
    outbound: &Outbound,
    card: &NormalizedCard,
) -> Result<probe::Credentials, String> {
    let Some(path) = &args.credentials else {
        return Ok(probe::Credentials::default());
    };
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("--credentials {}: {e}", path.display()))?;
    // serde's messages name fields and types, never the values read.
    let configured: BTreeMap<String, Credential> = serde_json::from_str(&text).map_err(|e| {
        format!(
            "--credentials {}: not a map of scheme names to credentials: {e}",
            path.display()
        )
    })?;
    for (scheme, credential) in &configured {
        credentials::check(card, scheme, credential)
            .map_err(|e| format!("--credentials, scheme `{scheme}`: {e}"))?;
    }
    Ok(probe::Credentials {
        configured,
        scope: "cli".into(),
        tokens: Default::default(),
        // An extended card is judged as the public card was: same discovery, same pins.
        cards: Some(probe::CardCheck {
            discovery: Discovery::new(outbound.clone(), args.outbound.discovery()),
            trusted_keys: read_keys(args)?,
        }),
    })
}

/// Runs the command; the exit code follows the module doc.
pub async fn run(args: ProbeArgs) -> ExitCode {
    match run_inner(args).await {
        Ok(code) => code,
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::from(2)
        }
    }
}

async fn run_inner(args: ProbeArgs) -> Result<ExitCode, String> {
    let card_url = CardUrl::parse(&args.card_url).map_err(|e| e.to_string())?;
    let only = args
        .protocol_version
        .as_deref()
        .map(|v| ProtocolVersion::parse_exact(v).map_err(|e| format!("--version: {e}")))
        .transpose()?;
    let script = script_of(&args);
    script.validate()?;
    let outbound = Outbound::new(args.outbound.outbound().map_err(|e| e.to_string())?)
        .map_err(|e| e.to_string())?;
    let (url, assessment) = fetch_card(&args, &outbound, &card_url).await?;
    let Some(card) = assessment.card.clone().filter(|_| assessment.trusted) else {
        let problem = assessment.problem.clone().unwrap_or_default();
        report_untrusted(&args, url.as_str(), &problem);
        return Ok(ExitCode::from(1));
    };
    let versions = versions_to_probe(&card, only)?;
    let credentials = credentials_of(&args, &outbound, &card)?;

    let webhook = Webhook::serve(&args).await?;
    let settings = ProbeSettings {
        public_url: Some(webhook.base.clone()),
        deadline: std::time::Duration::from_secs(args.deadline_secs),
        push_wait: std::time::Duration::from_secs(args.push_wait_secs),
        trials: args.trials,
        ..ProbeSettings::default()
    };
    let mut reports = Vec::new();
    for version in versions {
        let push = webhook.open();
        eprintln!();
        let report = probe::probe_interface(probe::CycleInput {
            outbound: &outbound,
            settings: &settings,
            card: &card,
            version,
            binding: args.binding,
            script: &script,
            push,
            inbox: &webhook.inbox,
            progress: &Stderr,
            credentials: &credentials,
        })
        .await;
        if let Err(why) = &report {
            eprintln!("  cannot probe {version}: {why}");
        }
        reports.push((version, report));
    }
    webhook.server.abort();

    if args.json {
        print_json(url.as_str(), &assessment, &reports);
    } else {
        print_report(url.as_str(), assessment.signature.status(), &reports);
    }
    if let Some(path) = &args.junit {
        let xml = junit::render("cardgate probe", &junit_cases(&reports));
        std::fs::write(path, xml).map_err(|e| format!("writing {}: {e}", path.display()))?;
    }
    let all_pass = reports
        .iter()
        .all(|(_, r)| r.as_ref().is_ok_and(|o| o.judgement.verdict.passed));
    Ok(if all_pass {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// The versions the card offers, or only `only`; an error when that leaves none.
fn versions_to_probe(
    card: &NormalizedCard,
    only: Option<ProtocolVersion>,
) -> Result<Vec<ProtocolVersion>, String> {
    let versions: Vec<ProtocolVersion> = card
        .versions()
        .into_iter()
        .filter(|v| only.is_none_or(|o| o == *v))
        .collect();
    if versions.is_empty() {
        return Err(format!(
            "the card offers no {}",
            only.map(|v| v.to_string()).unwrap_or_default()
        ));
    }
    Ok(versions)
}

/// Fetches the card at `card_url` and judges it, with the keys `--trusted-keys` pins.
async fn fetch_card(
    args: &ProbeArgs,
    outbound: &Outbound,
    card_url: &CardUrl,
) -> Result<(url::Url, Assessment), String> {
    let trusted_keys = read_keys(args)?;
    let discovery = Discovery::new(outbound.clone(), args.outbound.discovery());
    eprintln!("fetching the card at {card_url}");
    let fetched = discovery
        .fetch(card_url, None)
        .await
        .map_err(|e| format!("the card could not be fetched: {e}"))?;
    let Fetch::Body { url, bytes, .. } = fetched else {
        return Err("the card server answered 304 to an unconditional request".into());
    };
    let assessment = discovery.assess(&url, &bytes, trusted_keys.as_ref()).await;
    eprintln!(
        "card from {url}: signature {}",
        assessment.signature.status()
    );
    Ok((url, assessment))
}

/// The probe script from the flags, the defaults where a flag is absent.
fn script_of(args: &ProbeArgs) -> ProbeScript {
    let defaults = ProbeScript::default();
    ProbeScript {
        message: args.message.clone().unwrap_or(defaults.message),
        follow_ups: if args.follow_ups.is_empty() {
            defaults.follow_ups
        } else {
            args.follow_ups.clone()
        },
        push_message: args.push_message.clone(),
        cancel_message: args.cancel_message.clone(),
    }
}

/// The JWKS file named by `--trusted-keys`, if any.
fn read_keys(args: &ProbeArgs) -> Result<Option<Value>, String> {
    let Some(path) = &args.trusted_keys else {
        return Ok(None);
    };
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|e| format!("{}: {e}", path.display()))
}

/// The push webhook this command serves while it probes, and where agents reach it.
struct Webhook {
    inbox: MemoryInbox,
    base: url::Url,
    server: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Webhook {
    async fn serve(args: &ProbeArgs) -> Result<Self, String> {
        let inbox = MemoryInbox::default();
        let listener = tokio::net::TcpListener::bind(args.webhook_listen)
            .await
            .map_err(|e| format!("webhook listener: {e}"))?;
        let local = listener.local_addr().map_err(|e| e.to_string())?;
        let router = Router::new()
            .route("/v1/hooks/push/{token}", post(receive))
            .with_state(inbox.clone());
        let server = tokio::spawn(async move { axum::serve(listener, router).await });
        let base = match &args.public_url {
            Some(url) => with_trailing_slash(url.clone()),
            None => url::Url::parse(&format!("http://{local}/")).map_err(|e| e.to_string())?,
        };
        Ok(Self {
            inbox,
            base,
            server,
        })
    }

    /// A fresh token's webhook URL, ready to take deliveries.
    fn open(&self) -> Option<(url::Url, String)> {
        let token = probe::new_token();
        self.inbox
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(token.clone(), Vec::new());
        self.base
            .join(&format!("v1/hooks/push/{token}"))
            .ok()
            .map(|u| (u, token))
    }
}

/// One case per finding of each subject: a failed finding fails, a finding the probe could not
/// exercise is skipped; a subject that could not be probed is one failed case.
fn junit_cases(reports: &[(ProtocolVersion, Report)]) -> Vec<junit::Case> {
    let mut cases = Vec::new();
    for (version, report) in reports {
        let classname = format!("cardgate.probe.{version}");
        if let Ok(o) = report {
            cases.extend(trials::trial_cases(*version, &o.judgement));
        }
        match report {
            Ok(o) => cases.extend(o.judgement.findings.iter().map(|f| junit::Case {
                classname: classname.clone(),
                name: f.code.to_string(),
                outcome: match f.status {
                    FindingStatus::Pass => junit::Outcome::Passed,
                    FindingStatus::Fail => junit::Outcome::Failed {
                        message: format!("{} [source: {}]", f.message, f.code.source()),
                    },
                    FindingStatus::NotExercised => junit::Outcome::Skipped {
                        message: f.message.clone(),
                    },
                },
            })),
            Err(why) => cases.push(junit::Case {
                classname,
                name: "probe".into(),
                outcome: junit::Outcome::Failed {
                    message: why.clone(),
                },
            }),
        }
    }
    cases
}

/// A finding as the JSON report gives it: with the source its rule enforces.
fn finding_json(f: &Finding) -> Value {
    let mut out = json!(f);
    out["source"] = f.code.source().into();
    out
}

/// The `--json` report.
fn print_json(url: &str, assessment: &Assessment, reports: &[(ProtocolVersion, Report)]) {
    let subjects: Vec<Value> = reports
        .iter()
        .map(|(version, report)| match report {
            Ok(o) => json!({
                "protocol_version": version.to_string(),
                "interface": o.interface.url, "binding": o.interface.binding, "wire": o.wire.as_str(),
                "would_promote": o.judgement.verdict.passed,
                "verdict": o.judgement.verdict,
                "trials": trials::trials_json(&o.judgement),
                "latency": trials::latency_json(&o.observations),
                "capabilities": o.judgement.capabilities,
                "findings": o.judgement.findings.iter().map(finding_json).collect::<Vec<_>>(),
                "transitions": o.observations.transitions,
            }),
            Err(why) => json!({"protocol_version": version.to_string(), "would_promote": false, "error": why}),
        })
        .collect();
    let out = json!({
        "card_url": url, "signature": assessment.signature, "uncovered_fields": assessment.uncovered,
        "subjects": subjects,
    });
    println!("{}", serde_json::to_string_pretty(&out).unwrap_or_default());
}

fn report_untrusted(args: &ProbeArgs, url: &str, problem: &str) {
    if args.json {
        println!(
            "{}",
            json!({"card_url": url, "trusted": false, "problem": problem, "subjects": []})
        );
    } else {
        println!(
            "\n{url}\n  the card is not trusted: {problem}\n  nothing was probed; no subject would be promoted"
        );
    }
}

fn print_report(url: &str, signature: &str, reports: &[(ProtocolVersion, Report)]) {
    println!("\ncardgate probe report for {url}");
    println!("card signature: {signature}");
    for (version, report) in reports {
        println!();
        let o = match report {
            Ok(o) => o,
            Err(why) => {
                println!("A2A {version}: not probed: {why}");
                continue;
            }
        };
        let verdict = if o.judgement.verdict.passed {
            "would be PROMOTED to lifecycle-trusted"
        } else {
            "would NOT be promoted"
        };
        println!(
            "A2A {version} via {} ({}): {verdict}",
            o.interface.url,
            o.wire.as_str()
        );
        trials::print(&o.judgement, &o.observations);
        println!("  transitions:");
        for t in &o.observations.transitions {
            println!(
                "    {:<9} {:<8} {:<15} {}",
                format!("{:?}", t.role).to_lowercase(),
                t.source.to_string(),
                t.state.to_string(),
                t.timestamp.as_deref().unwrap_or("(no status.timestamp)")
            );
        }
        println!("  capabilities:");
        for (cap, outcome) in &o.judgement.capabilities {
            let text = match outcome {
                CapabilityOutcome::Passed => "passed".to_string(),
                CapabilityOutcome::Failed { reason } => format!("FAILED: {reason}"),
                CapabilityOutcome::NotAdvertised => "not advertised".to_string(),
                CapabilityOutcome::NotExercised { reason } => format!("not exercised: {reason}"),
            };
            println!("    {:<24} {text}", cap.as_str());
        }
        println!("  findings:");
        for f in &o.judgement.findings {
            let mark = match f.status {
                FindingStatus::Pass => "pass",
                FindingStatus::Fail => "FAIL",
                FindingStatus::NotExercised => "n/e ",
            };
            let trigger = f
                .trigger
                .map(|t| format!(" [demotes: {}]", t.as_str()))
                .unwrap_or_default();
            println!("    {mark} {:<26} {}{trigger}", f.code, f.message);
            if f.status == FindingStatus::Fail {
                println!("         {:<26} source: {}", "", f.code.source());
            }
        }
        if !o.judgement.verdict.reasons.is_empty() {
            println!("  why not promoted:");
            for r in &o.judgement.verdict.reasons {
                println!("    - {r}");
            }
        }
    }
}
