//! The pure domain: no I/O, no clocks, no SQL. Everything here takes values and returns values,
//! with `now` passed in, so every rule of the trust model is unit-testable.

pub mod apikey;
pub(crate) mod attestation;
pub(crate) mod binding;
pub mod callee;
pub mod capability;
pub mod card;
pub(crate) mod checkpoint;
pub mod credential;
pub mod decision;
pub mod demotion;
pub mod gate;
pub mod ids;
pub(crate) mod jcs;
pub mod job;
pub mod ledger;
pub(crate) mod merkle;
pub mod politeness;
pub mod probe;
pub(crate) mod receipt;
pub(crate) mod report;
pub mod retention;
pub mod secrets;
pub(crate) mod signing;
pub mod time;
pub mod version;
pub mod webhook;
