-- The change feed: one row per committed write that a decision or an API key lookup depends on
-- (a snapshot, a ledger append, a finished probe, a key created or revoked). Every replica
-- keeps its in-memory read model current by applying the rows after the last one it applied.
-- Rows are written under the ledger's advisory lock, so `seq` order is commit order and a
-- reader that has applied up to `seq` has missed nothing before it. Pruned after a day.
create table changes (
    seq bigint generated always as identity primary key,
    -- The callee whose decisions changed; null when the API keys changed.
    callee_id uuid,
    -- The ledger head seq once the write committed: applying this row reflects every event
    -- up to it.
    ledger_head bigint not null,
    recorded_at timestamptz not null
);

create index changes_by_time on changes (recorded_at);
