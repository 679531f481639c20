//! The ledger's Merkle tree and its recorded checkpoints: growing the tree in the append
//! transaction, reading the nodes a root or proof needs, and the checkpoint log.
//!
//! The tree is a pure function of the chain hashes, so it can always be (re)built from the
//! ledger: a database from before the tree existed grows its missing leaves on the first
//! append or at start ([`Store::catch_up_tree`]).

use std::collections::HashMap;

use chrono::{DateTime, Utc};

use super::lock::LockLedger;
use super::{BeginWrite, Store, StoreError, dispatch};
use crate::domain::ledger::EventRecord;
use crate::domain::merkle::{self, Frontier, Hash, NodeId};
use crate::domain::time::Timestamp;

/// Ledger rows read per round trip while catching the tree up.
const CATCH_UP_PAGE: i64 = 5000;
/// Node ids per lookup statement (two binds each).
const NODES_PER_READ: usize = 500;

fn to_hash(bytes: Vec<u8>) -> Result<Hash, StoreError> {
    bytes
        .try_into()
        .map_err(|_| StoreError::corrupt("a Merkle node hash is not 32 bytes"))
}

fn leaf_of(seq: i64, chain_hash: &str) -> Result<Hash, StoreError> {
    merkle::event_leaf(chain_hash)
        .map_err(|e| StoreError::corrupt(format!("event {seq} has a malformed hash: {e}")))
}

/// A recorded checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointRecord {
    pub tree_size: u64,
    pub root_hash: Hash,
    pub issued_at: Timestamp,
    pub kid: String,
    pub note: String,
}

#[derive(sqlx::FromRow)]
struct CheckpointRow {
    tree_size: i64,
    root_hash: Vec<u8>,
    issued_at: DateTime<Utc>,
    kid: String,
    note: String,
}

impl TryFrom<CheckpointRow> for CheckpointRecord {
    type Error = StoreError;
    fn try_from(row: CheckpointRow) -> Result<Self, StoreError> {
        Ok(Self {
            tree_size: row.tree_size as u64,
            root_hash: to_hash(row.root_hash)?,
            issued_at: row.issued_at,
            kid: row.kid,
            note: row.note,
        })
    }
}

/// Reading the tree, on any connection: in the append transaction, or on its own (nodes never
/// change once written, so a read outside a transaction needs no snapshot).
pub(crate) trait ReadTree {
    /// Leaves in the tree.
    async fn tree_size(&mut self) -> Result<u64, StoreError>;

    /// The stored nodes among `ids`.
    async fn read_nodes(&mut self, ids: &[NodeId]) -> Result<HashMap<NodeId, Hash>, StoreError>;
}

/// Growing the tree inside an open write transaction (which holds the ledger lock).
pub(crate) trait GrowTree: ReadTree {
    /// Adds the leaves of events `tree_size + 1 ..= upto`, read from the ledger (a database
    /// from before the tree existed); returns the frontier at `upto`.
    async fn extend_tree(&mut self, upto: u64) -> Result<Frontier, StoreError>;

    /// Adds the leaves of `appended` (the events just inserted, in seq order), first adding
    /// any leaves of older events the tree lacks.
    async fn grow_tree(&mut self, appended: &[EventRecord]) -> Result<(), StoreError>;
}

macro_rules! impl_read_tree {
    ($conn:ty, $db:ty) => {
        impl ReadTree for $conn {
            async fn tree_size(&mut self) -> Result<u64, StoreError> {
                let (size,): (i64,) = sqlx::query_as(
                    "select coalesce(max(idx) + 1, 0) from merkle_nodes where level = 0",
                )
                .fetch_one(&mut **self)
                .await?;
                Ok(size as u64)
            }

            async fn read_nodes(
                &mut self,
                ids: &[NodeId],
            ) -> Result<HashMap<NodeId, Hash>, StoreError> {
                let mut nodes = HashMap::with_capacity(ids.len());
                for chunk in ids.chunks(NODES_PER_READ) {
                    let mut select = sqlx::QueryBuilder::<$db>::new(
                        "select level, idx, hash from merkle_nodes where ",
                    );
                    for (i, id) in chunk.iter().enumerate() {
                        if i > 0 {
                            select.push(" or ");
                        }
                        select
                            .push("(level = ")
                            .push_bind(i16::from(id.level))
                            .push(" and idx = ")
                            .push_bind(id.index as i64)
                            .push(")");
                    }
                    let rows: Vec<(i16, i64, Vec<u8>)> =
                        select.build_query_as().fetch_all(&mut **self).await?;
                    for (level, idx, hash) in rows {
                        let id = NodeId {
                            level: level as u8,
                            index: idx as u64,
                        };
                        nodes.insert(id, to_hash(hash)?);
                    }
                }
                Ok(nodes)
            }
        }
    };
}

macro_rules! impl_grow_tree {
    ($db:ty) => {
        impl GrowTree for sqlx::Transaction<'static, $db> {
            async fn extend_tree(&mut self, upto: u64) -> Result<Frontier, StoreError> {
                let size = self.tree_size().await?;
                if size > upto {
                    return Err(StoreError::corrupt(format!(
                        "the Merkle tree has {size} leaves but the ledger only {upto} events"
                    )));
                }
                let known = self.read_nodes(&Frontier::nodes(size)).await?;
                let mut frontier = Frontier::load(size, &known).map_err(StoreError::corrupt)?;
                while frontier.size() < upto {
                    let rows: Vec<(i64, String)> = sqlx::query_as(
                        "select seq, hash from ledger where seq > $1 and seq <= $2 \
                         order by seq limit $3",
                    )
                    .bind(frontier.size() as i64)
                    .bind(upto as i64)
                    .bind(CATCH_UP_PAGE)
                    .fetch_all(&mut **self)
                    .await?;
                    let mut created = Vec::new();
                    for (seq, hash) in rows {
                        if seq as u64 != frontier.size() + 1 {
                            break;
                        }
                        created.extend(frontier.push(leaf_of(seq, &hash)?));
                    }
                    if created.is_empty() {
                        return Err(StoreError::corrupt(format!(
                            "the ledger has no event {}",
                            frontier.size() + 1
                        )));
                    }
                    self.write_nodes(&created).await?;
                }
                Ok(frontier)
            }

            async fn grow_tree(&mut self, appended: &[EventRecord]) -> Result<(), StoreError> {
                let Some(first) = appended.first() else {
                    return Ok(());
                };
                let mut frontier = self.extend_tree((first.seq - 1) as u64).await?;
                let mut created = Vec::new();
                for event in appended {
                    created.extend(frontier.push(leaf_of(event.seq, &event.hash)?));
                }
                self.write_nodes(&created).await
            }
        }

        impl WriteNodes for sqlx::Transaction<'static, $db> {
            async fn write_nodes(&mut self, nodes: &[(NodeId, Hash)]) -> Result<(), StoreError> {
                // Three binds a row keeps a chunk well within SQLite's 32,766.
                for chunk in nodes.chunks(1000) {
                    let mut insert = sqlx::QueryBuilder::<$db>::new(
                        "insert into merkle_nodes (level, idx, hash) ",
                    );
                    insert.push_values(chunk, |mut row, (id, hash)| {
                        row.push_bind(i16::from(id.level))
                            .push_bind(id.index as i64)
                            .push_bind(hash.to_vec());
                    });
                    insert.build().execute(&mut **self).await?;
                }
                Ok(())
            }
        }
    };
}

trait WriteNodes {
    async fn write_nodes(&mut self, nodes: &[(NodeId, Hash)]) -> Result<(), StoreError>;
}

impl_read_tree!(sqlx::Transaction<'static, sqlx::Postgres>, sqlx::Postgres);
impl_read_tree!(sqlx::Transaction<'static, sqlx::Sqlite>, sqlx::Sqlite);
impl_read_tree!(sqlx::pool::PoolConnection<sqlx::Postgres>, sqlx::Postgres);
impl_read_tree!(sqlx::pool::PoolConnection<sqlx::Sqlite>, sqlx::Sqlite);
impl_grow_tree!(sqlx::Postgres);
impl_grow_tree!(sqlx::Sqlite);

impl Store {
    /// Leaves in the tree.
    pub async fn tree_size(&self) -> Result<u64, StoreError> {
        dispatch!(self, |pool| pool.acquire().await?.tree_size().await)
    }

    /// The stored nodes among `ids`. Nodes never change once written, so no snapshot is
    /// needed as long as every id lies within a tree size already read.
    pub async fn merkle_nodes(&self, ids: &[NodeId]) -> Result<HashMap<NodeId, Hash>, StoreError> {
        dispatch!(self, |pool| pool.acquire().await?.read_nodes(ids).await)
    }

    /// Adds the leaves the tree lacks for events already in the ledger (a database from
    /// before the tree existed); returns how many it added.
    pub async fn catch_up_tree(&self) -> Result<u64, StoreError> {
        dispatch!(self, |pool| {
            let mut tx = pool.begin_write().await?;
            tx.lock_ledger().await?;
            let before = tx.tree_size().await?;
            let (head,): (i64,) = sqlx::query_as("select coalesce(max(seq), 0) from ledger")
                .fetch_one(&mut *tx)
                .await?;
            let head = head as u64;
            if head <= before {
                return Ok(0);
            }
            tx.extend_tree(head).await?;
            tx.commit().await?;
            Ok(head - before)
        })
    }

    /// Records a checkpoint; one already recorded at that size is kept.
    pub async fn record_checkpoint(&self, checkpoint: &CheckpointRecord) -> Result<(), StoreError> {
        dispatch!(self, |pool| {
            sqlx::query(
                "insert into checkpoints (tree_size, root_hash, issued_at, kid, note) \
                 values ($1, $2, $3, $4, $5) on conflict (tree_size) do nothing",
            )
            .bind(checkpoint.tree_size as i64)
            .bind(checkpoint.root_hash.to_vec())
            .bind(checkpoint.issued_at)
            .bind(&checkpoint.kid)
            .bind(&checkpoint.note)
            .execute(pool)
            .await
            .map(drop)
        })?;
        Ok(())
    }

    /// Recorded checkpoints with a tree size above `after`, smallest first.
    pub async fn checkpoints(
        &self,
        after: u64,
        limit: u32,
    ) -> Result<Vec<CheckpointRecord>, StoreError> {
        let rows: Vec<CheckpointRow> = dispatch!(self, |pool| {
            sqlx::query_as(
                "select tree_size, root_hash, issued_at, kid, note from checkpoints \
                 where tree_size > $1 order by tree_size limit $2",
            )
            .bind(after as i64)
            .bind(i64::from(limit))
            .fetch_all(pool)
            .await
        })?;
        rows.into_iter().map(TryInto::try_into).collect()
    }

    /// The largest recorded tree size (0 when none is recorded).
    pub async fn last_checkpoint_size(&self) -> Result<u64, StoreError> {
        let (size,): (i64,) = dispatch!(self, |pool| {
            sqlx::query_as("select coalesce(max(tree_size), 0) from checkpoints")
                .fetch_one(pool)
                .await
        })?;
        Ok(size as u64)
    }
}
