-- When the other subscriptions were told (`subscription.failing`) that this one's receiver is
-- failing; cleared with `failing_since` at its next success, so a receiver that fails again
-- is announced again. Claimed with an UPDATE, so replicas announce each failure once.
alter table subscriptions add column failing_announced_at text;
