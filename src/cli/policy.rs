//! `cardgate policy check FILE`: validates an operator policy without starting the service,
//! and prints the rulebook version it gives.

use std::process::ExitCode;

use clap::{Args, Subcommand};

use crate::domain::rulebook::{BlocksBy, Rulebook};

#[derive(Debug, Args)]
pub struct PolicyArgs {
    #[command(subcommand)]
    pub command: PolicyCommand,
}

#[derive(Debug, Subcommand)]
pub enum PolicyCommand {
    /// Check a policy file (TOML). Exit code 0: usable; 2: refused, with the reason.
    Check {
        /// The policy file, as `CARDGATE_POLICY_FILE` would name it.
        file: std::path::PathBuf,
    },
}

/// Runs the subcommand; returns the exit code.
pub fn run(args: PolicyArgs) -> ExitCode {
    match args.command {
        PolicyCommand::Check { file } => match crate::service::policy::read(&file) {
            Ok(policy) => {
                let book = Rulebook::new(policy);
                let by_policy: Vec<String> = book
                    .rules()
                    .iter()
                    .filter(|r| r.blocks_by == Some(BlocksBy::Policy))
                    .map(|r| r.code.to_string())
                    .collect();
                println!("{}: usable", file.display());
                println!("rulebook version: {}", book.version());
                if by_policy.is_empty() {
                    println!("blocks by policy: nothing beyond the trust model");
                } else {
                    println!("blocks by policy: {}", by_policy.join(", "));
                }
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("{e:#}");
                ExitCode::from(2)
            }
        },
    }
}
