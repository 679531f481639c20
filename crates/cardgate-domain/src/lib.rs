//! The pure domain: no I/O, no clocks, no SQL. Everything here takes values and returns values,
//! with `now` passed in, so every rule of the trust model is unit-testable.

pub mod apikey;
pub mod attestation;
pub mod binding;
pub mod callee;
pub mod capability;
pub mod card;
pub mod checkpoint;
pub mod credential;
pub mod decision;
pub mod demotion;
pub mod gate;
pub mod ids;
pub mod jcs;
pub mod job;
pub mod ledger;
pub mod merkle;
pub mod politeness;
pub mod probe;
pub mod receipt;
pub mod report;
pub mod retention;
pub mod rulebook;
pub mod secrets;
pub mod signing;
pub mod time;
pub mod version;
pub mod webhook;
