-- Finished deliveries are pruned after their retention (service::retention): found by when
-- they finished, through an index of the finished ones only, so an append (whose deliveries
-- are all pending) does not maintain it.
create index deliveries_finished on deliveries (finished_at) where status <> 'pending';

-- An event's stored body goes with its last delivery: each counts the deliveries that still
-- name its seq (set by the append that queues them, lowered as they are deleted), so nothing
-- has to search the deliveries by seq.
alter table event_payloads add column deliveries bigint not null default 0;
update event_payloads ep set deliveries = c.n
    from (select seq, count(*) as n from deliveries group by seq) as c
    where c.seq = ep.seq;
-- Bodies whose every delivery went with a deleted subscription.
delete from event_payloads where deliveries = 0;
