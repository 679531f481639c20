//! Webhook subscriptions and their outbox: deliveries queued in the ledger's own transaction,
//! claimed under a lease (one attempt at a time, across replicas), in ledger order per
//! (subscription, subject), a failing one holding the later ones for the hold-back at most
//! (see [`crate::domain::webhook`] for the guarantee).
//! One file per axis: rows, the outbox, the hand-off, subscriptions, claims and attempts,
//! retention.

#[macro_use]
mod rows;
mod claims;
mod handoff;
mod outbox;
mod retention;
mod subscriptions;

pub(crate) use handoff::{Handoff, Lessee};
pub(crate) use outbox::QueueDeliveries;
pub use rows::{AttemptRecord, Claimed};
