-- The callees operators registered: one row per card URL.
create table callees (
    id blob primary key,
    -- Normalized card URL (an origin, the well-known URL or the legacy agent.json URL).
    card_url text not null unique,
    name text,
    created_at text not null
);

-- Subjects: (callee, Major.Minor). `state` is the subject's ledger events folded (JSON of
-- domain::gate::SubjectState): a cache written in the same transaction as each event, and
-- rebuildable from the ledger.
create table subjects (
    callee_id blob not null references callees (id),
    protocol_version text not null,
    -- The effective gate (`untrusted`, `card-trusted`, `lifecycle-trusted`, `demoted`).
    gate_state text not null,
    state text not null,
    -- The subject's newest ledger event.
    last_seq integer not null,
    last_hash text not null,
    -- Where the effective gate last changed (the subject's creation counts as a change).
    last_change_seq integer not null,
    last_change_at text not null,
    created_at text not null,
    primary key (callee_id, protocol_version)
);

-- The append-only ledger. One global hash chain: `prev_hash` is the hash of event seq-1.
create table ledger (
    seq integer primary key,
    callee_id blob not null references callees (id),
    protocol_version text not null,
    kind text not null,
    -- The event's fields as JSON.
    data text not null,
    -- Who caused the event: `system` or `key:<name>`.
    actor text not null,
    recorded_at text not null,
    prev_hash text not null,
    hash text not null unique
);

create index ledger_by_callee on ledger (callee_id, seq);

create trigger ledger_no_update before update on ledger
begin
    select raise(abort, 'ledger is append-only: UPDATE refused');
end;

create trigger ledger_no_delete before delete on ledger
begin
    select raise(abort, 'ledger is append-only: DELETE refused');
end;
