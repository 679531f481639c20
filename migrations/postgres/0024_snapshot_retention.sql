-- Retention of card snapshots (service::retention): a public snapshot past its callee's
-- newest few, cited by no event that started a subject or changed its card's trust, loses its
-- raw bytes (an extended card's snapshot, with its run's transcript). Its sha256, assessment
-- and every event citing it stay; this says when the bytes went.
alter table card_snapshots add column raw_pruned_at timestamptz;

-- An extended card's snapshot goes with its run's transcript: found by run.
create index card_snapshots_extended on card_snapshots (probe_run_id) where kind = 'extended';
