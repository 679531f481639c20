//! Subcommands that run without the service: `cardgate probe` and `cardgate keys`.

pub mod keys;
pub mod probe;
