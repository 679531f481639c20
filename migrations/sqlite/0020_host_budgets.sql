-- Politeness per host across replicas (remote::hosts, storage::hosts). A host is an address
-- cardgate dials. `next_start`: the earliest the next request to it may start;
-- `backoff_until`: the end of the wait its last 429 or 503 with Retry-After asked for.
create table host_budgets (
    host text primary key,
    next_start text not null,
    backoff_until text
);

-- One row per request in flight to a host, from its start until its answer's head. A lease
-- whose holder died lapses at `lease_until`.
create table host_leases (
    id text primary key,
    host text not null,
    lease_until text not null
);
create index host_leases_by_host on host_leases (host, lease_until);
