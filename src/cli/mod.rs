//! The command line: the `cardgate` parser and its subcommands. `serve` and `migrate` take
//! their flag groups from [`crate::config`]; the others run without the service.

pub mod can_i_trust;
pub(crate) mod junit;
pub mod keys;
pub mod policy;
pub mod probe;
pub mod rejudge;
mod trials;
pub mod verify;

use clap::{Parser, Subcommand};

use crate::config::{DatabaseArgs, ServeArgs};
use crate::telemetry::LogFormat;

#[derive(Debug, Parser)]
#[command(
    name = "cardgate",
    version,
    about = "A2A lifecycle trust registry",
    long_about = "cardgate registers A2A agents (callees), verifies their agent cards, probes their \
                  real task lifecycles, and tells callers whether they may rely on lifecycle \
                  semantics, from an append-only, hash-chained ledger."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,

    /// Log output format.
    #[arg(long, env = "CARDGATE_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text, global = true)]
    pub log_format: LogFormat,
}

// Parsed once at start and consumed at once: the size of the largest variant costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the registry service (HTTP API, Swagger UI at /docs).
    Serve(ServeArgs),
    /// Apply database migrations and exit.
    Migrate(DatabaseArgs),
    /// Print the OpenAPI document and exit.
    Openapi,
    /// Discover an agent and run one probe cycle per protocol version, without a database or
    /// server. Exit code 0: every subject would be promoted; 1: not; 2: usage or fetch error.
    Probe(probe::ProbeArgs),
    /// Manage API keys in the database (create the first admin key here).
    Keys(keys::KeysArgs),
    /// Verify a kept decision receipt offline, and with `--proof` that its evidence is in its
    /// checkpoint. Exit code 0: verified; 1: not; 2: usage or input error.
    Verify(verify::VerifyArgs),
    /// Verify offline that a later checkpoint extends an earlier one (nothing in the ledger
    /// was removed or rewritten between them). Exit code 0: consistent; 1: not; 2: error.
    VerifyLedger(verify::VerifyLedgerArgs),
    /// Show or rotate the key that signs checkpoints and receipts.
    SigningKey(verify::SigningKeyArgs),
    /// Rotate the key that seals the credentials presented to callees.
    SecretsKey(keys::SecretsKeyArgs),
    /// The CI gate: may a caller rely on this agent's lifecycle semantics? Asks a running
    /// registry; exit code 0: authoritative; 1: advisory; 2: no answer.
    CanITrust(can_i_trust::CanITrustArgs),
    /// Check an operator policy file without starting the service (`policy check FILE`).
    Policy(policy::PolicyArgs),
    /// Judge every subject's newest finished run again from its stored observations, under
    /// the policy given; `--dry-run` lists what would move and writes nothing.
    Rejudge(rejudge::RejudgeArgs),
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::DatabaseTarget;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn serve_defaults_to_loopback_and_the_sqlite_file() {
        let cli = Cli::try_parse_from(["cardgate", "serve"]).unwrap();
        let Command::Serve(args) = cli.command else {
            panic!("not serve")
        };
        let settings = args.settings().unwrap();
        assert_eq!(settings.listen, "127.0.0.1:8080".parse().unwrap());
        // DATABASE_URL may be set in the environment running the tests; only check the flag path.
        if std::env::var_os("DATABASE_URL").is_none() {
            assert_eq!(
                settings.database,
                DatabaseTarget::Sqlite("./data/cardgate.db".into())
            );
        }
    }

    /// Each default is written once, in its settings' `Default`; the flags take it from there.
    /// Parsing no flags must therefore give exactly the defaults the service is built with.
    #[test]
    fn serve_without_flags_runs_on_the_settings_defaults() {
        let cli = Cli::try_parse_from(["cardgate", "serve"]).unwrap();
        let Command::Serve(args) = cli.command else {
            panic!("not serve")
        };
        let parsed = args.settings().unwrap();
        let defaults = crate::app::Settings::new(parsed.database.clone());
        // Environment variables a developer set would show up as differences; CI sets none.
        let with_auth = std::env::var_os("CARDGATE_ADMIN_TOKEN").is_none();
        let groups = |s: &crate::app::Settings| {
            let mut groups = vec![
                ("http", format!("{:?}", s.http)),
                ("pool", format!("{:?}", s.pool)),
                ("discovery", format!("{:?}", s.discovery)),
                ("probe", format!("{:?}", s.probe)),
                ("schedule", format!("{:?}", s.schedule)),
                ("cards", format!("{:?}", s.cards)),
                (
                    "worker",
                    format!("{:?}", (s.worker.lease, s.worker.concurrency)),
                ),
            ];
            if with_auth {
                groups.push(("auth", format!("{:?}", s.auth)));
            }
            groups
        };
        for ((what, parsed), (_, default)) in groups(&parsed).into_iter().zip(groups(&defaults)) {
            assert_eq!(parsed, default, "{what}");
        }
    }
}
