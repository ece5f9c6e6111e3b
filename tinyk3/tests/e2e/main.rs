//! End-to-end tests of the real `tinyk3` binary over real files and loopback ports.

mod checkpoint;
mod common;
mod exit_codes;
mod far_protocol;
mod heat;
mod identical;
mod parts;
