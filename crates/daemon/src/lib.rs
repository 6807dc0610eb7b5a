//! driveprobe-daemon: the long-running side. The config ([`config`]), finding drives
//! ([`discovery`]), the control loop and its canaries ([`daemon`]), schedules
//! ([`schedule`]), what it knows ([`status`]), what it exports ([`metrics`]), the HTTP
//! server ([`http`]), logging and build facts. The only crate with tokio and hyper.
#![forbid(unsafe_code)]

pub mod condlog;
pub mod config;
pub mod daemon;
pub mod discovery;
pub mod http;
pub mod load;
pub mod logging;
pub mod metrics;
pub mod pacing;
pub mod schedule;
pub mod statedir;
pub mod status;
pub mod version;

use driveprobe_core::{calendar, device, engine, fmt, process, safety, target, units};
use driveprobe_health as health;
use driveprobe_protocol as protocol;
use driveprobe_report as report;
use driveprobe_sys as sys;
