//! The drive test protocol (docs/protocol.md) as suites built on the engine: purge,
//! preconditioning, steady state, thread/queue sweeps, rate curves, and their result
//! document.
#![forbid(unsafe_code)]

pub mod app;

use driveprobe_core::{device, engine, file, process, target, units};
#[cfg(test)]
use driveprobe_core::{rng, safety};
use driveprobe_health as health;
use driveprobe_sys as sys;

pub mod bound;
pub mod fio_job;
pub mod hist;
pub mod merge;
pub mod pts;
pub mod purge;
pub mod qos;
pub mod result;
pub mod steady;
pub mod suite;
pub mod workloads;
