//! Probe runs and the push deliveries cardgate's webhook receives for them.
//! One file per concern: rows, queueing, reads, a run's life, push deliveries, retention.

#[macro_use]
mod rows;
mod push;
mod queue;
mod reads;
mod records;
mod retention;
mod runs;

pub(crate) use queue::QueueProbe;
pub use runs::FinishedRun;
