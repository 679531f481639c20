//! The integration suite: one binary, real databases, real HTTP on loopback.

// A test that meets an unexpected error should panic right there.
#![allow(clippy::unwrap_used)]

mod support;

mod api;
mod discovery;
mod openapi;
mod restart;
mod storage;
