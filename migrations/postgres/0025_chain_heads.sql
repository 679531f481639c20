-- Where each subject's chain of deliveries stands, without reading its deliveries. A new
-- delivery names as `previous_seq` the newest earlier event about its subject of a type its
-- subscription asks for, announced since the subscription was created: the newest announced
-- seq per (subject, event type), and the ledger's head when the subscription was created,
-- say it. The append used to aggregate the subject's every delivery instead: 36 ms for a
-- subject with 100 events and 1,000 subscriptions, growing with its history.
create table subject_announcements (
    subject text not null,
    event_type text not null,
    last_seq bigint not null,
    primary key (subject, event_type)
);
insert into subject_announcements (subject, event_type, last_seq)
    select subject, event_type, max(seq) from deliveries where seq > 0
    group by subject, event_type;

-- The ledger's head when the subscription was created (for those from before: just before
-- its first delivery, or the head now).
alter table subscriptions add column created_seq bigint not null default 0;
update subscriptions s set created_seq = coalesce(
    (select min(d.seq) - 1 from deliveries d where d.subscription_id = s.id and d.seq > 0),
    (select coalesce(max(seq), 0) from ledger));

-- Whether a subject's chain in a subscription still has a delivery pending: only the pending
-- ones are read.
create index deliveries_pending_by_subject on deliveries (subject) where status = 'pending';
