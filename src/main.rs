//! The `cardgate` binary: parses the command line and runs one subcommand.

use std::process::ExitCode;

use anyhow::Context;
use clap::Parser;

use cardgate::app::{self, App};
use cardgate::cli::{Cli, Command};
use cardgate::storage::Store;
use cardgate::{http, telemetry};

/// mimalloc rather than the system allocator: building the read model and answering decisions
/// allocate many small, short-lived values (measured in BENCHMARKS.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    telemetry::init(cli.log_format);
    match run(cli.command).await {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::from(2)
        }
    }
}

async fn run(command: Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::Serve(args) => {
            let app = App::build(args.settings()?).await?;
            let listener = app.bind().await?;
            app.serve(listener, app::shutdown_signal()).await?;
        }
        Command::Migrate(args) => {
            let store = Store::connect(&args.target()?, &args.pool())
                .await
                .context("connecting to the database")?;
            store.migrate().await.context("applying migrations")?;
            println!("migrations applied ({})", store.backend());
        }
        Command::Probe(args) => return Ok(cardgate::cli::probe::run(args).await),
        Command::Keys(args) => cardgate::cli::keys::run(args).await?,
        Command::Verify(args) => return Ok(cardgate::cli::verify::verify_receipt(args)),
        Command::VerifyLedger(args) => return Ok(cardgate::cli::verify::verify_ledger(args).await),
        Command::SigningKey(args) => cardgate::cli::verify::signing_key(args)?,
        Command::SecretsKey(args) => cardgate::cli::keys::secrets_key(args).await?,
        Command::CanITrust(args) => return Ok(cardgate::cli::can_i_trust::run(args).await),
        Command::Policy(args) => return Ok(cardgate::cli::policy::run(args)),
        Command::Rejudge(args) => cardgate::cli::rejudge::run(args).await?,
        Command::Openapi => {
            println!(
                "{}",
                http::openapi()
                    .to_pretty_json()
                    .context("serializing OpenAPI")?
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}
