-- The sender's claim walks the pending deliveries in due order and stops at its batch: an
-- index of the pending ones alone, in that order, is all it reads. The old (status,
-- next_attempt_at) index kept an entry for every delivery ever made, and, on tables whose
-- statistics lag (a queue changes faster than autoanalyze runs), led the planner to probe it
-- once per subscription: 75-97 ms a claim at 1,000 subscriptions, against a few ms now.
drop index deliveries_due;
create index deliveries_pending on deliveries (next_attempt_at, seq) where status = 'pending';
