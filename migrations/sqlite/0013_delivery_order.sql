-- Deliveries are ordered per (subscription, subject) instead of per subscription: one subject's
-- failing delivery no longer holds another subject's news, and within a subject it holds the
-- later ones for a bounded time only (the hold-back). Each delivery names the seq of the event
-- before it about the same subject in the same subscription, so a receiver can see a gap.
alter table deliveries add column subject text not null default '';
alter table deliveries add column previous_seq bigint;
update deliveries set subject =
    json_extract(payload, '$.data.event.callee_id') || '/' ||
    json_extract(payload, '$.data.event.protocol_version');
create index deliveries_by_subject on deliveries (subject, subscription_id, seq);

-- Since when every attempt to the subscription's receiver has failed (null while the last
-- attempt succeeded): what marks a subscription `failing`.
alter table subscriptions add column failing_since text;
