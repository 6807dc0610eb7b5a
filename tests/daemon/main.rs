//! Tier 2 (`scripts/test`): the daemon as a process (canaries, schedules, wear budget,
//! exporter, HTTP API and its attacks, discovery) and the reliability proofs.

#[path = "../common/mod.rs"]
mod common;
#[path = "../common/prometheus.rs"]
mod prometheus;

mod clock;
mod daemon;
mod daemon_budget;
mod daemon_selftest;
mod discovery;
mod exporter;
mod file_drive;
mod http_api;
mod http_load;
mod http_security;
mod reliability;
mod schedule;
mod schedule_fio_job;
mod state_attacks;
