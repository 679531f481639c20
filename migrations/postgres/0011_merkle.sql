-- The Merkle tree over the ledger (RFC 9162): the hash of every perfect subtree, written in the
-- same transaction as the events that complete it. Node (level, idx) covers the leaves
-- idx * 2^level .. (idx + 1) * 2^level - 1; leaf i is the event with seq i + 1. A node never
-- changes once written, so roots and proofs of any past tree size read O(log n) rows.
create table merkle_nodes (
    level smallint not null,
    idx bigint not null,
    hash bytea not null,
    primary key (level, idx)
);

-- Checkpoints recorded for later audit: each is a signed note (c2sp.org/tlog-checkpoint) over
-- the tree at `tree_size`. An auditor compares an old one with the tree today.
create table checkpoints (
    tree_size bigint primary key,
    root_hash bytea not null,
    issued_at timestamptz not null,
    kid text not null,
    note text not null
);
