-- What a finished run adds to its subject's track record (domain::probe::track): its trials,
-- its clean trials and its latency samples, a few hundred bytes of JSON, so that the read
-- model folds a window of runs without parsing their observations. Null on runs finished
-- before it was kept: each counts as one trial, clean if it passed, with no latency.
alter table probe_runs add column record text;
-- The window's runs of a subject, by when they finished.
create index probe_runs_finished on probe_runs (callee_id, protocol_version, finished_at)
    where status = 'finished';
