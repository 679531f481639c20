//! Background work, above the services: the cron scheduler that enqueues sweeps and the worker
//! that runs queued jobs. Both call the use cases in [`crate::service`]; `app` starts them.

pub mod schedule;
pub mod worker;
