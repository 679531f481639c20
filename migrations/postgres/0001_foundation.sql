-- The callees operators registered: one row per card URL.
create table callees (
    id uuid primary key,
    -- Normalized card URL (an origin, the well-known URL or the legacy agent.json URL).
    card_url text not null unique,
    name text,
    created_at timestamptz not null
);

-- Subjects: (callee, Major.Minor). `state` is the subject's ledger events folded (JSON of
-- domain::gate::SubjectState): a cache written in the same transaction as each event, and
-- rebuildable from the ledger.
create table subjects (
    callee_id uuid not null references callees (id),
    protocol_version text not null,
    -- The effective gate (`untrusted`, `card-trusted`, `lifecycle-trusted`, `demoted`).
    gate_state text not null,
    state text not null,
    -- The subject's newest ledger event.
    last_seq bigint not null,
    last_hash text not null,
    -- Where the effective gate last changed (the subject's creation counts as a change).
    last_change_seq bigint not null,
    last_change_at timestamptz not null,
    created_at timestamptz not null,
    primary key (callee_id, protocol_version)
);

-- The append-only ledger. One global hash chain: `prev_hash` is the hash of event seq-1.
create table ledger (
    seq bigint primary key,
    callee_id uuid not null references callees (id),
    protocol_version text not null,
    kind text not null,
    -- The event's fields as JSON.
    data text not null,
    -- Who caused the event: `system` or `key:<name>`.
    actor text not null,
    recorded_at timestamptz not null,
    prev_hash text not null,
    hash text not null unique
);

create index ledger_by_callee on ledger (callee_id, seq);

create function ledger_refuse_change() returns trigger
language plpgsql as $$
begin
    raise exception 'ledger is append-only: % refused', tg_op;
end
$$;

create trigger ledger_no_update_or_delete
    before update or delete on ledger
    for each row execute function ledger_refuse_change();

create trigger ledger_no_truncate
    before truncate on ledger
    for each statement execute function ledger_refuse_change();
