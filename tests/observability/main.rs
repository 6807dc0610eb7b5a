//! Tier 2 (`scripts/test`): a real Prometheus and node_exporter scraping the daemon, the
//! alert rules under promtool, and a fleet of daemons.

#[path = "../common/mod.rs"]
mod common;
#[path = "../common/dashboards.rs"]
mod dashboards;
#[path = "../common/prometheus.rs"]
mod prometheus;

mod fleet_e2e;
mod prometheus_e2e;
mod prometheus_rules;
