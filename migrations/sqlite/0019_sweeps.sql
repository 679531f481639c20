-- When each scheduled sweep last ran, across replicas: every replica's scheduler fires on the
-- same cron tick, and the first to claim the tick runs the sweep (storage::sweeps).
create table sweeps (
    name text primary key,
    ran_at text not null
);
