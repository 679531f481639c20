-- Webhook subscriptions and their outbox. Delivery rows are written in the same transaction as
-- the ledger event that causes them, so a crash can delay a delivery but never lose it.
create table subscriptions (
    id uuid primary key,
    url text not null,
    -- Only events about this callee; null for every callee.
    callee_id uuid references callees (id),
    -- JSON array of event types (`subject.demoted`, ...); null for all.
    events text,
    description text,
    -- `whsec_` + base64 of 32 random bytes; the signing key.
    secret text not null,
    -- The secret before the last rotation: it also signs until `previous_until`.
    previous_secret text,
    previous_until timestamptz,
    -- `active`, or `disabled` (the receiver answered 410 Gone).
    status text not null,
    created_at timestamptz not null
);

create table deliveries (
    -- The `webhook-id` header: the same on every attempt of one delivery.
    id uuid primary key,
    subscription_id uuid not null references subscriptions (id) on delete cascade,
    -- The ledger event announced; a subscription's deliveries go out in this order.
    seq bigint not null,
    event_type text not null,
    -- The exact body sent on every attempt.
    payload text not null,
    -- `pending`, `delivered` or `failed`.
    status text not null,
    attempts integer not null default 0,
    next_attempt_at timestamptz not null,
    lease_owner text,
    lease_until timestamptz,
    last_status_code integer,
    last_error text,
    created_at timestamptz not null,
    finished_at timestamptz
);

create index deliveries_due on deliveries (status, next_attempt_at);
create index deliveries_by_subscription on deliveries (subscription_id, seq);
