//! driveprobe: an I/O engine, a drive test protocol, drive health, and a daemon that exports
//! all of it as Prometheus metrics. See ARCHITECTURE.md for the map.
//!
//! This crate is the command line ([`cli`]) over the workspace's crates; it re-exports each
//! of their modules at its path here (`driveprobe::engine`, `driveprobe::daemon`, ...), so
//! the tests and the fuzz targets name one crate. `unsafe` lives only in
//! `driveprobe-sys` ([`sys`]).
#![forbid(unsafe_code)]

pub mod cli;

pub use driveprobe_core::{
    calendar, device, engine, file, fmt, ownmark, process, rng, safety, target, units,
};
pub use driveprobe_daemon::{
    config, daemon, discovery, http, load, logging, metrics, pacing, schedule, statedir, status,
    version,
};
pub use driveprobe_health as health;
pub use driveprobe_protocol as protocol;
pub use driveprobe_protocol::app;
pub use driveprobe_report as report;
pub use driveprobe_sys as sys;
