//! The database a load example runs against: a fresh Postgres database on the server named by
//! `BENCH_DATABASE_URL` (dropped by [`BenchDb::drop_database`]), or an SQLite file in `work`.
//! Shared by the examples with `#[path = "support/bench_db.rs"] mod bench_db;`.

use cardgate::storage::DatabaseTarget;

pub(crate) struct BenchDb {
    pub target: DatabaseTarget,
    /// (admin URL, database name) of a Postgres database this example created.
    postgres: Option<(String, String)>,
}

impl BenchDb {
    /// `prefix` names the Postgres database (`<prefix>_<pid>`).
    pub(crate) async fn open(prefix: &str, work: &std::path::Path) -> anyhow::Result<Self> {
        let Ok(admin) = std::env::var("BENCH_DATABASE_URL") else {
            return Ok(Self {
                target: DatabaseTarget::Sqlite(work.join("bench.db")),
                postgres: None,
            });
        };
        let name = format!("{prefix}_{}", std::process::id());
        let mut conn = <sqlx::PgConnection as sqlx::Connection>::connect(&admin).await?;
        sqlx::query(sqlx::AssertSqlSafe(format!("create database {name}")))
            .execute(&mut conn)
            .await?;
        let url = format!(
            "{}/{name}",
            admin.rsplit_once('/').map_or(admin.as_str(), |p| p.0)
        );
        Ok(Self {
            target: DatabaseTarget::Postgres(url),
            postgres: Some((admin, name)),
        })
    }

    /// Drops the Postgres database this example created (nothing for SQLite: its directory
    /// goes with the example's temporary directory).
    pub(crate) async fn drop_database(self) -> anyhow::Result<()> {
        if let Some((admin, name)) = self.postgres {
            let mut conn = <sqlx::PgConnection as sqlx::Connection>::connect(&admin).await?;
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "drop database if exists {name} with (force)"
            )))
            .execute(&mut conn)
            .await?;
        }
        Ok(())
    }
}
