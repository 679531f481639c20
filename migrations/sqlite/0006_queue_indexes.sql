-- Claiming a job looks for expired leases and for due queued jobs separately, each through its
-- own index, so a claim costs the same with ten jobs queued or ten thousand.
create index jobs_expired_leases on jobs (status, lease_until);
-- Pruning finished jobs by age.
create index jobs_finished on jobs (status, updated_at);
