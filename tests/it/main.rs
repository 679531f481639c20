//! The integration suite: one binary, real databases, real HTTP on loopback.

// A test that meets an unexpected error should panic right there.
#![allow(clippy::unwrap_used)]

mod support;

mod access;
mod api;
mod cli;
mod discovery;
mod openapi;
mod probes;
mod python_sdk;
mod replicas;
mod restart;
mod schedule;
mod sse;
mod storage;
