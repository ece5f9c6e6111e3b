//! Subcommand handlers, one module each.

pub mod bench;
pub mod init;
pub mod pins;
pub mod serve;
pub mod serve_experts;
