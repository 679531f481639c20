//! `cardgate can-i-trust`: the CI gate. Asks a running registry whether a caller may rely on an
//! agent's lifecycle semantics, prints every condition with its reason, and exits 0 when the
//! answer is authoritative, 1 when it is advisory, 2 when there is no answer (bad arguments,
//! the registry unreachable or refusing). `--junit` writes one test case per condition.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;
use serde_json::Value;

use super::junit::{self, Case, Outcome};

#[derive(Debug, Clone, Args)]
pub struct CanITrustArgs {
    /// The registry, e.g. `https://cardgate.example`.
    #[arg(long, env = "CARDGATE_URL")]
    pub server: url::Url,
    /// The agent: its callee id, or the card URL it was registered with.
    #[arg(long)]
    pub callee: String,
    /// The A2A version the caller implements, `Major.Minor`.
    #[arg(long)]
    pub caller_version: String,
    /// `none` if the caller does not deduplicate terminal events by `status.timestamp`.
    #[arg(long, value_parser = ["timestamp", "none"])]
    pub dedup: Option<String>,
    /// Optional capabilities the caller depends on, comma-separated.
    #[arg(long)]
    pub requires: Option<String>,
    /// Print the registry's whole answer as JSON.
    #[arg(long)]
    pub json: bool,
    /// Also write the conditions as JUnit XML to this file.
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,
    /// A reader API key.
    #[arg(long, env = "CARDGATE_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
}

pub async fn run(args: CanITrustArgs) -> ExitCode {
    match ask(&args).await {
        Ok(authoritative) if authoritative => ExitCode::SUCCESS,
        Ok(_) => ExitCode::from(1),
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

async fn ask(args: &CanITrustArgs) -> anyhow::Result<bool> {
    let mut url = args.server.join("v1/trust").context("--server")?;
    {
        let mut query = url.query_pairs_mut();
        match uuid::Uuid::parse_str(&args.callee) {
            Ok(id) => query.append_pair("callee_id", &id.to_string()),
            Err(_) => query.append_pair("card_url", &args.callee),
        };
        query.append_pair("caller_version", &args.caller_version);
        if let Some(dedup) = &args.dedup {
            query.append_pair("dedup", dedup);
        }
        if let Some(requires) = &args.requires {
            query.append_pair("requires", requires);
        }
    }
    let mut request = reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(30))
        .build()?
        .get(url.clone());
    if let Some(key) = &args.api_key {
        request = request.bearer_auth(key);
    }
    let response = request
        .send()
        .await
        .with_context(|| format!("asking {}", args.server))?;
    let status = response.status();
    let body: Value = response
        .json()
        .await
        .with_context(|| format!("{url} answered {status} without JSON"))?;
    if !status.is_success() {
        let message = body["error"]["message"].as_str().unwrap_or("no message");
        anyhow::bail!("the registry answered {status}: {message}");
    }
    let authoritative = body["authoritative"]
        .as_bool()
        .context("the answer has no `authoritative`")?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&body)?);
    } else {
        print_text(args, &body, authoritative);
    }
    if let Some(path) = &args.junit {
        let xml = junit::render("cardgate can-i-trust", &cases(&body));
        std::fs::write(path, xml).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(authoritative)
}

fn conditions(body: &Value) -> &[Value] {
    body["conditions"].as_array().map_or(&[], Vec::as_slice)
}

fn print_text(args: &CanITrustArgs, body: &Value, authoritative: bool) {
    let verdict = if authoritative {
        "AUTHORITATIVE: lifecycle semantics may be relied on"
    } else {
        "ADVISORY: do not derive lifecycle semantics from this agent's card"
    };
    println!(
        "{} for A2A {} ({}): {verdict}",
        args.callee,
        args.caller_version,
        body["gate_state"].as_str().unwrap_or("no subject")
    );
    for c in conditions(body) {
        let mark = match c["status"].as_str() {
            Some("pass") => "pass   ",
            Some("fail") => "FAIL   ",
            _ => "unknown",
        };
        println!(
            "  {mark} {:<32} {}",
            c["id"].as_str().unwrap_or("?"),
            c["reason"].as_str().unwrap_or("")
        );
    }
}

/// One case per condition: a pass passes; a failure and an unknown (which never counts as a
/// pass) fail.
fn cases(body: &Value) -> Vec<Case> {
    let classname = format!(
        "cardgate.trust.{}.{}",
        body["callee_id"].as_str().unwrap_or("callee"),
        body["caller_version"].as_str().unwrap_or("version")
    );
    conditions(body)
        .iter()
        .map(|c| {
            let reason = c["reason"].as_str().unwrap_or("").to_string();
            Case {
                classname: classname.clone(),
                name: c["id"].as_str().unwrap_or("?").to_string(),
                outcome: match c["status"].as_str() {
                    Some("pass") => Outcome::Passed,
                    Some("fail") => Outcome::Failed { message: reason },
                    _ => Outcome::Failed {
                        message: format!("unknown: {reason}"),
                    },
                },
            }
        })
        .collect()
}
