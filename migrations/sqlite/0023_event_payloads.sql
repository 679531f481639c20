-- An event's webhook body is stored once, not once per subscription: every subscriber gets the
-- same bytes but for `previous_seq`, the body's last field, which each delivery row already
-- holds. At 1,000 subscriptions the per-delivery copies were most of what an append wrote
-- (2,000 bodies of about 1 KB for a probe's two events, inside the ledger's transaction).
create table event_payloads (
    seq integer primary key,
    -- The body up to `"previous_seq":` (domain::webhook::EventPayload); a delivery's body is
    -- this, its previous_seq (or `null`) and `}}`.
    head text not null
);

-- SQLite cannot alter a column or drop a constraint: the table is rebuilt, with `payload`
-- nullable (null: the body is its event's; a delivery keeps its own body when it has no
-- event, a `subscription.failing`, or when its first attempt set one, a promotion's
-- attestation) and without the foreign key to `subscriptions` (deleting a subscription
-- deletes its deliveries itself, under the ledger lock).
create table deliveries_rebuilt (
    -- The `webhook-id` header: the same on every attempt of one delivery.
    id blob primary key,
    subscription_id blob not null,
    -- The ledger event announced; a subscription's deliveries go out in this order.
    seq integer not null,
    event_type text not null,
    payload text,
    -- `pending`, `delivered` or `failed`.
    status text not null,
    attempts integer not null default 0,
    next_attempt_at text not null,
    lease_owner text,
    lease_until text,
    last_status_code integer,
    last_error text,
    created_at text not null,
    finished_at text,
    subject text not null default '',
    previous_seq bigint
);
insert into deliveries_rebuilt (id, subscription_id, seq, event_type, payload, status, attempts,
    next_attempt_at, lease_owner, lease_until, last_status_code, last_error, created_at,
    finished_at, subject, previous_seq)
select id, subscription_id, seq, event_type, payload, status, attempts, next_attempt_at,
    lease_owner, lease_until, last_status_code, last_error, created_at, finished_at, subject,
    previous_seq
from deliveries;
drop table deliveries;
alter table deliveries_rebuilt rename to deliveries;
create index deliveries_by_subscription on deliveries (subscription_id, seq);
create index deliveries_by_subject on deliveries (subject, subscription_id, seq);
create index deliveries_pending on deliveries (next_attempt_at, seq) where status = 'pending';
