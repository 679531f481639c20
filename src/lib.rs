//! cardgate: the A2A lifecycle trust registry.
//!
//! Callers ask cardgate, before they rely on an A2A agent's lifecycle semantics, whether they
//! may. It answers from its own evidence (verified cards, real probe tasks) recorded in an
//! append-only, hash-chained ledger.
//!
//! Layers, in dependency order: [`domain`] (pure rules) ← [`storage`] (SQL) and [`remote`]
//! (outbound HTTP) ← [`service`] (use cases) ← [`runtime`] (scheduler, worker) and [`http`]
//! (REST) ← [`app`] (composition) ← [`config`] ← [`cli`] and the binary. No module imports one
//! to its right. [`metrics`] and [`telemetry`] are leaves any layer may use. See `README.md` for
//! the tour.

#![forbid(unsafe_code)]

pub mod app;
pub mod cli;
pub mod config;
pub use cardgate_domain as domain;
#[cfg(feature = "fake-agent")]
pub mod fake_agent;
pub mod http;
pub mod metrics;
pub mod remote;
pub mod runtime;
pub mod service;
pub mod storage;
pub mod telemetry;
