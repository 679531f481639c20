-- A signed attestation (an in-toto statement in a DSSE envelope) for every promotion and
-- demotion, made just after the event is appended; kept and listed, like checkpoints.
create table attestations (
    id blob primary key,
    callee_id blob not null references callees (id) on delete cascade,
    protocol_version text not null,
    -- The promotion or demotion attested.
    seq integer not null unique,
    kind text not null,
    -- The DSSE envelope, as served.
    envelope text not null,
    created_at text not null
);

create index attestations_by_callee on attestations (callee_id, seq);
