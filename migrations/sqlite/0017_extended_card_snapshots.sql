-- The authenticated extended card a probe fetched with the callee's credentials is kept as a
-- snapshot of its own (kind `extended`, with the run that fetched it), beside the public
-- card's snapshots (kind `public`). Decisions, refreshes and the read model read public
-- snapshots only.
alter table card_snapshots add column kind text not null default 'public';
alter table card_snapshots add column probe_run_id blob;
