-- Retention (service::retention): a finished run past the newest few of its subject, and cited
-- by no promotion or demotion, loses its transcript (the raw exchanges, up to 2 MiB); its
-- verdict, findings and observed transitions stay, and this says when the transcript went.
alter table probe_runs add column transcript_pruned_at timestamptz;
