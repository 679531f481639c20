-- What decisions read of a finished run's judgement (domain::decision::JudgementFacts): a few
-- hundred bytes in the judgement's own JSON shape, so that loading every subject's newest run
-- into the read model does not parse kilobytes of findings per run. Null on runs finished
-- before it was kept; their judgement is read instead (it has the same shape, and more).
alter table probe_runs add column facts text;
