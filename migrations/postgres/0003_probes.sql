-- The probe script per callee (JSON of domain::probe::ProbeScript; null: the defaults).
alter table callees add column probe_script text;

-- One probe cycle against one subject, with everything it observed.
create table probe_runs (
    id uuid primary key,
    callee_id uuid not null references callees (id),
    protocol_version text not null,
    -- `queued`, `running`, `finished` or `aborted`.
    status text not null,
    -- Why it runs: `operator`, `registration`, `version-appeared`, `capability-advertised`,
    -- `schedule` or `cli`.
    reason text not null,
    requested_by text not null,
    created_at timestamptz not null,
    started_at timestamptz,
    finished_at timestamptz,
    -- The interface probed and the wire spoken (`json-rpc-v1`, `json-rpc-v03`, `rest-v1`).
    interface_url text,
    wire text,
    -- The per-run webhook token (the URL path segment and the notification token).
    push_token text not null unique,
    passed boolean,
    -- JSON: domain::probe::Judgement and Observations, and the raw exchanges.
    judgement text,
    observations text,
    transcript text,
    -- Why it aborted or could not run.
    error text,
    -- JSON array of the ledger sequence numbers this run appended.
    ledger_seqs text
);

create index probe_runs_by_subject on probe_runs (callee_id, protocol_version, id);

-- What cardgate's push webhook received, per probe token.
create table push_deliveries (
    id uuid primary key,
    token text not null,
    received_at timestamptz not null,
    -- JSON object of the headers that matter (content type, notification token, authorization
    -- scheme).
    headers text not null,
    body bytea not null
);

create index push_deliveries_by_token on push_deliveries (token, id);

-- The durable work queue. Workers claim jobs with a lease and renew it while working; a job
-- whose lease expired (its worker died) is claimed again.
create table jobs (
    id uuid primary key,
    -- `probe` or `refresh`.
    kind text not null,
    callee_id uuid not null references callees (id),
    protocol_version text,
    reason text not null,
    -- At most one queued or running job per key (the same probe for the same subject is not
    -- queued twice).
    dedup_key text not null,
    -- `queued`, `running`, `done` or `failed`.
    status text not null,
    attempts integer not null default 0,
    run_after timestamptz not null,
    lease_owner text,
    lease_until timestamptz,
    last_error text,
    probe_run_id uuid references probe_runs (id),
    created_at timestamptz not null,
    updated_at timestamptz not null
);

create unique index jobs_one_active_per_key on jobs (dedup_key) where status in ('queued', 'running');
create index jobs_claimable on jobs (status, run_after);
