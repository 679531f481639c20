//! `cardgate keys`: API key management straight against the database (how the first admin key
//! is made when no `CARDGATE_ADMIN_TOKEN` is configured); `cardgate secrets-key rotate`: a new
//! key for the credentials sealed in that database.

use clap::{Args, Subcommand, ValueEnum};

use crate::config::DatabaseArgs;
use crate::domain::apikey::Role;
use crate::domain::ids::ApiKeyId;
use crate::domain::time;
use crate::service::credentials;
use crate::service::keys;
use crate::service::transparency::TransparencySettings;
use crate::storage::Store;

#[derive(Debug, Clone, Args)]
pub struct KeysArgs {
    #[command(subcommand)]
    pub command: KeysCommand,

    #[command(flatten)]
    pub database: DatabaseArgs,
}

#[derive(Debug, Clone, Subcommand)]
pub enum KeysCommand {
    /// Create a key and print it (the only time it is shown).
    Create {
        #[arg(long, value_enum)]
        role: RoleArg,
        /// Who or what uses the key.
        #[arg(long)]
        name: String,
    },
    /// List keys (never their secrets).
    List,
    /// Revoke a key by id.
    Revoke { id: uuid::Uuid },
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum RoleArg {
    Reader,
    Reporter,
    Admin,
}

impl From<RoleArg> for Role {
    fn from(r: RoleArg) -> Self {
        match r {
            RoleArg::Reader => Role::Reader,
            RoleArg::Reporter => Role::Reporter,
            RoleArg::Admin => Role::Admin,
        }
    }
}

#[derive(Debug, Clone, Args)]
pub struct SecretsKeyArgs {
    #[command(subcommand)]
    pub command: SecretsKeyCommand,

    /// The key file (as `serve` uses it). Unset: `secrets-key` beside the signing key's
    /// default place for the database.
    #[arg(long, env = "CARDGATE_SECRETS_KEY_FILE")]
    pub file: Option<std::path::PathBuf>,

    #[command(flatten)]
    pub database: DatabaseArgs,
}

#[derive(Debug, Clone, Subcommand)]
pub enum SecretsKeyCommand {
    /// Make a new key and re-seal every stored credential with it, in one transaction; the
    /// old key then leaves the file. Running replicas pick the new key up by themselves.
    Rotate,
}

pub async fn secrets_key(args: SecretsKeyArgs) -> anyhow::Result<()> {
    let database = args.database.target()?;
    let path = args.file.unwrap_or_else(|| {
        crate::app::secrets_key_beside(&TransparencySettings::default_key_file(&database))
    });
    let store = Store::connect(&database, &args.database.pool()).await?;
    store.migrate().await?;
    match args.command {
        SecretsKeyCommand::Rotate => {
            let rotated = credentials::rotate(&store, &path).await?;
            println!(
                "rotated {}: key {} now seals; {} credential(s) re-sealed",
                path.display(),
                rotated.kid,
                rotated.resealed
            );
        }
    }
    store.close().await;
    Ok(())
}

pub async fn run(args: KeysArgs) -> anyhow::Result<()> {
    let store = Store::connect(&args.database.target()?, &args.database.pool()).await?;
    store.migrate().await?;
    match args.command {
        KeysCommand::Create { role, name } => {
            let (key, secret) =
                keys::create(&store, None, &name, role.into(), "cli", time::now()).await?;
            eprintln!(
                "created {} key `{}` ({}); it is shown once:",
                key.role, key.name, key.id
            );
            println!("{}", secret.0);
        }
        KeysCommand::List => {
            for key in store.keys(None, u32::MAX).await? {
                let state = key.revoked_at.map_or_else(
                    || "live".to_string(),
                    |at| format!("revoked {}", time::format(at)),
                );
                println!(
                    "{}  {:<8}  {:<12}  {}  {state}",
                    key.id,
                    key.role.as_str(),
                    key.prefix,
                    key.name
                );
            }
        }
        KeysCommand::Revoke { id } => {
            keys::revoke(&store, None, ApiKeyId(id), "cli", time::now()).await?;
            println!("revoked {id}");
        }
    }
    store.close().await;
    Ok(())
}
