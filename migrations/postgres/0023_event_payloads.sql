-- An event's webhook body is stored once, not once per subscription: every subscriber gets the
-- same bytes but for `previous_seq`, the body's last field, which each delivery row already
-- holds. At 1,000 subscriptions the per-delivery copies were most of what an append wrote
-- (2,000 bodies of about 1 KB for a probe's two events, inside the ledger's transaction).
create table event_payloads (
    seq bigint primary key,
    -- The body up to `"previous_seq":` (domain::webhook::EventPayload); a delivery's body is
    -- this, its previous_seq (or `null`) and `}}`.
    head text not null
);

-- Null: the body is its event's. A delivery keeps its own body when it has no event (a
-- `subscription.failing`) or when its first attempt set one (a promotion's attestation), so
-- every retry sends the same bytes.
alter table deliveries alter column payload drop not null;

-- Deleting a subscription deletes its deliveries itself, under the ledger lock, so no append
-- can be queueing more for it meanwhile. The foreign key cost a lookup per delivery inside the
-- append (a quarter of its insert at 1,000 subscriptions), and a delete racing an append made
-- the append, and with it the probe's verdict, fail.
alter table deliveries drop constraint deliveries_subscription_id_fkey;
