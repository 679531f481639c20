-- Card discovery: the operator's pinned keys, and the outcome of the newest fetch, per callee.
alter table callees add column trusted_keys text;
alter table callees add column last_fetch_at timestamptz;
-- `fetched`, `unchanged`, `untrusted` or `failed`.
alter table callees add column last_fetch_status text;
alter table callees add column last_fetch_error text;

-- Every card body fetched, kept byte for byte as served (evidence), with how it was judged.
create table card_snapshots (
    id uuid primary key,
    callee_id uuid not null references callees (id),
    fetched_at timestamptz not null,
    -- The URL the card was finally served from (after same-origin redirects).
    url text not null,
    sha256 text not null,
    raw bytea not null,
    etag text,
    last_modified text,
    trusted boolean not null,
    -- JSON of domain::card::Assessment: parsed view, signature verdict, uncovered fields.
    assessment text not null
);

create index card_snapshots_by_callee on card_snapshots (callee_id, id);
