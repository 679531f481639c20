-- Scheduling: consecutive fetch failures and when the callee may be fetched again (exponential
-- backoff), and a generation counter that makes concurrent refreshes of one callee safe (the
-- second to commit sees it changed and re-decides).
alter table callees add column fetch_failures integer not null default 0;
alter table callees add column next_fetch_at text;
alter table callees add column refresh_generation integer not null default 0;

-- Callers' violation reports, kept whether or not they moved a gate.
create table reports (
    id blob primary key,
    callee_id blob not null references callees (id),
    protocol_version text not null,
    -- `terminal-without-timestamp`, `history-not-incremented`, `push-registration-failed` or
    -- `duplicate-terminal`.
    trigger text not null,
    -- The demotion class the trigger belongs to.
    class text not null,
    -- The observed status objects or HTTP outcomes, as the caller sent them (JSON).
    evidence text not null,
    -- What the evidence check established.
    finding text not null,
    reporter text not null,
    -- `demoted` (the report moved the gate) or `recorded`.
    outcome text not null,
    created_at text not null
);

create index reports_by_callee on reports (callee_id, id);
