//! driveprobe: an I/O engine, a drive test protocol, drive health, and a daemon that exports
//! all of it as Prometheus metrics. See ARCHITECTURE.md for the map.
//!
//! `unsafe` lives only in [`sys`] (io_uring submission and ioctls); everything else is
//! compiled with `unsafe_code` denied.
#![deny(unsafe_code)]

pub mod app;
pub mod calendar;
pub mod cli;
pub mod config;
pub mod daemon;
pub mod device;
pub mod discovery;
pub mod engine;
pub mod file;
pub mod fmt;
pub mod health;
pub mod http;
pub mod logging;
pub mod metrics;
pub mod ownmark;
pub mod process;
pub mod protocol;
pub mod report;
pub mod rng;
pub mod safety;
pub mod schedule;
pub mod status;
#[allow(unsafe_code)]
pub mod sys;
pub mod target;
pub mod units;
pub mod version;
