//! Background work, above the services: the cron scheduler that enqueues sweeps (and runs
//! housekeeping), the worker that runs queued jobs, the follower that keeps the read model
//! current, and the ager that lets its track records' old runs go. All call the use cases in [`crate::service`]; `app` starts them.

pub(crate) mod aging;
pub(crate) mod deliveries;
pub(crate) mod feed;
pub mod housekeeping;
pub mod schedule;
pub mod worker;
