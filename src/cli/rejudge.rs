//! `cardgate rejudge`: judges every subject's newest finished run again from its stored
//! observations, run where `serve` runs (same database). `--dry-run` lists the subjects that
//! would move, under the policy given (`--policy FILE`, else `CARDGATE_POLICY_FILE`, else the
//! trust model's rules), and writes nothing.

use clap::Args;

use crate::config::DatabaseArgs;
use crate::domain::time;
use crate::service::{policy, rulebook};
use crate::storage::Store;

#[derive(Debug, Args)]
pub struct RejudgeArgs {
    /// List what would move; write nothing.
    #[arg(long)]
    pub dry_run: bool,

    /// The policy to judge under (TOML), as `CARDGATE_POLICY_FILE` names it.
    #[arg(long, env = "CARDGATE_POLICY_FILE", value_name = "FILE")]
    pub policy: Option<std::path::PathBuf>,

    #[command(flatten)]
    pub database: DatabaseArgs,
}

pub async fn run(args: RejudgeArgs) -> anyhow::Result<()> {
    let book = policy::rulebook(args.policy.as_deref())?;
    let store = Store::connect(&args.database.target()?, &args.database.pool()).await?;
    store.migrate().await?;
    let moves = if args.dry_run {
        rulebook::plan(&store, &book).await?
    } else {
        rulebook::apply(&store, &book, "cli", time::now()).await?
    };
    println!(
        "rulebook {}: {} subject(s) {}",
        book.version(),
        moves.len(),
        if args.dry_run { "would move" } else { "moved" }
    );
    for m in &moves {
        let r = &m.rejudgement;
        let what = match (r.demotes, r.reprobe) {
            (Some(class), _) => format!("demoted ({})", class.as_str()),
            (None, true) => "passes now: a fresh probe is queued".into(),
            (None, false) if r.passed_now => "passes now".into(),
            (None, false) => "fails now".into(),
        };
        println!(
            "{}\t{}\t{}\trun {}\t{what}\t{}",
            m.callee_id.0,
            m.card_url,
            m.protocol_version,
            m.probe_run_id.0,
            r.reasons.join("; ")
        );
    }
    Ok(())
}
