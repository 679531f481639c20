//! The integration suite: one binary, real databases, real HTTP on loopback.

// A test that meets an unexpected error should panic right there.
#![allow(clippy::unwrap_used)]

mod support;

mod access;
mod api;
mod attestations;
mod cli;
mod console;
mod credentials;
mod discovery;
mod docs;
mod events;
mod field_faults;
mod grpc;
mod hostile;
mod layers;
mod libraries;
mod migrations;
mod openapi;
mod operators;
mod politeness;
mod probes;
mod readmodel;
mod replicas;
mod restart;
mod retention;
mod rulebook;
mod schedule;
mod sdk_agents;
mod sse;
mod storage;
mod transparency;
mod trials;
mod under_load;
mod webhooks;
