//! Subcommands that run without the service: `cardgate probe`.

pub mod probe;
