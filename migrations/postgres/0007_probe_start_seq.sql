-- The ledger head seq a probe run saw when it started: every event up to it was committed
-- before the run began. Re-promotion and "advertised since the newest probe" are decided by it,
-- never by comparing two machines' clocks. Null on runs from before it was recorded.
alter table probe_runs add column start_seq bigint;
