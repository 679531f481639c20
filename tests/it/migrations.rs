//! The two migration directories cannot drift: both backends, migrated from scratch, have the
//! same tables, the same columns in each (names and nullability; types differ by dialect on
//! purpose, see migrations/README.md) and the same named indexes, and each directory holds the
//! same steps by number and name.

use std::collections::{BTreeMap, BTreeSet};

use sqlx::{AssertSqlSafe, Connection, Row};

use crate::support::{TestDb, repo_path};

/// What a migrated database holds, as both dialects can say it.
#[derive(Debug, PartialEq, Eq)]
struct Schema {
    /// Table → column → nullable.
    tables: BTreeMap<String, BTreeMap<String, bool>>,
    /// Index name → its table (the ones a migration names; not those a key makes).
    indexes: BTreeMap<String, String>,
}

async fn sqlite_schema(db: &TestDb) -> Schema {
    let cardgate::storage::DatabaseTarget::Sqlite(path) = &db.target else {
        unreachable!()
    };
    let mut conn = sqlx::SqliteConnection::connect(&format!("sqlite://{}", path.display()))
        .await
        .unwrap();
    let mut tables = BTreeMap::new();
    let names: Vec<String> = sqlx::query(
        "select name from sqlite_master where type = 'table' \
         and name not like 'sqlite_%' and name <> '_sqlx_migrations'",
    )
    .fetch_all(&mut conn)
    .await
    .unwrap()
    .iter()
    .map(|r| r.get(0))
    .collect();
    for table in names {
        let columns = sqlx::query(AssertSqlSafe(format!("pragma table_info(\"{table}\")")))
            .fetch_all(&mut conn)
            .await
            .unwrap()
            .iter()
            // A primary key column is not null on Postgres whatever it says; say so here too.
            .map(|r| {
                let name: String = r.get("name");
                let notnull: i64 = r.get("notnull");
                let pk: i64 = r.get("pk");
                (name, notnull == 0 && pk == 0)
            })
            .collect();
        tables.insert(table, columns);
    }
    let indexes = sqlx::query(
        "select name, tbl_name from sqlite_master where type = 'index' and sql is not null",
    )
    .fetch_all(&mut conn)
    .await
    .unwrap()
    .iter()
    .map(|r| (r.get(0), r.get(1)))
    .collect();
    Schema { tables, indexes }
}

async fn postgres_schema(db: &TestDb) -> Schema {
    let cardgate::storage::DatabaseTarget::Postgres(url) = &db.target else {
        unreachable!()
    };
    let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
    let mut tables: BTreeMap<String, BTreeMap<String, bool>> = BTreeMap::new();
    let rows = sqlx::query(
        "select c.table_name::text, c.column_name::text, c.is_nullable = 'YES' \
         from information_schema.columns c join information_schema.tables t \
           on t.table_schema = c.table_schema and t.table_name = c.table_name \
         where c.table_schema = 'public' and t.table_type = 'BASE TABLE' \
           and c.table_name <> '_sqlx_migrations'",
    )
    .fetch_all(&mut conn)
    .await
    .unwrap();
    for r in rows {
        tables
            .entry(r.get(0))
            .or_default()
            .insert(r.get(1), r.get(2));
    }
    // Indexes that back a primary key or a unique constraint are the key's, not a migration's.
    let indexes = sqlx::query(
        "select i.indexname::text, i.tablename::text from pg_indexes i \
         where i.schemaname = 'public' and i.tablename <> '_sqlx_migrations' \
           and not exists (select 1 from pg_constraint k \
                           where k.conname = i.indexname and k.contype in ('p', 'u'))",
    )
    .fetch_all(&mut conn)
    .await
    .unwrap()
    .iter()
    .map(|r| (r.get(0), r.get(1)))
    .collect();
    Schema { tables, indexes }
}

/// What differs between two maps, one line each.
fn differences<V: PartialEq + std::fmt::Debug>(
    what: &str,
    sqlite: &BTreeMap<String, V>,
    postgres: &BTreeMap<String, V>,
) -> Vec<String> {
    let keys: BTreeSet<&String> = sqlite.keys().chain(postgres.keys()).collect();
    keys.into_iter()
        .filter_map(|k| match (sqlite.get(k), postgres.get(k)) {
            (Some(a), Some(b)) if a == b => None,
            (a, b) => Some(format!("{what} {k}: sqlite {a:?}, postgres {b:?}")),
        })
        .collect()
}

#[tokio::test]
async fn both_backends_migrate_to_the_same_schema() {
    let Some(postgres) = TestDb::postgres().await else {
        return;
    };
    let sqlite = TestDb::sqlite().await;
    let (a, b) = (
        sqlite_schema(&sqlite).await,
        postgres_schema(&postgres).await,
    );
    assert!(
        a.tables.len() > 10,
        "only {} tables on SQLite",
        a.tables.len()
    );
    let mut drift = differences("index", &a.indexes, &b.indexes);
    let names = |s: &Schema| s.tables.keys().cloned().map(|k| (k, ())).collect();
    drift.extend(differences("table", &names(&a), &names(&b)));
    for (table, columns) in &a.tables {
        if let Some(other) = b.tables.get(table) {
            drift.extend(differences(&format!("column {table}."), columns, other));
        }
    }
    assert!(
        drift.is_empty(),
        "the migrations drift apart:\n{}",
        drift.join("\n")
    );
}

#[test]
fn each_step_is_in_both_directories() {
    let steps = |backend: &str| -> BTreeSet<String> {
        std::fs::read_dir(repo_path("migrations").join(backend))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
            .filter(|name| name.ends_with(".sql"))
            .collect()
    };
    let (postgres, sqlite) = (steps("postgres"), steps("sqlite"));
    assert!(postgres.len() > 20);
    assert_eq!(
        postgres.symmetric_difference(&sqlite).collect::<Vec<_>>(),
        Vec::<&String>::new(),
        "a migration in one directory only"
    );
}
