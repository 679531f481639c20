-- The change feed: one row per committed write that a decision or an API key lookup depends on
-- (a snapshot, a ledger append, a finished probe, a key created or revoked). The process keeps
-- its in-memory read model current by applying the rows after the last one it applied; other
-- processes on the same file (the CLI) are seen by polling for a higher `seq`. Writers are
-- serialized (BEGIN IMMEDIATE), so `seq` order is commit order. Pruned after a day.
create table changes (
    seq integer primary key autoincrement,
    -- The callee whose decisions changed; null when the API keys changed.
    callee_id blob,
    -- The ledger head seq once the write committed.
    ledger_head integer not null,
    recorded_at text not null
);

create index changes_by_time on changes (recorded_at);
