//! Tier 1, what `cargo test` runs without root or services: the command line and its
//! help, the config, the documents agreeing with the code, the parsers, the HTML reports,
//! the metrics goldens and the dashboards. Nothing here needs root: such tests go in the
//! binaries of feature `system-tests` (`bench` as root is in `tests/safety`). A test here
//! that needs a program from the system (promtool, Chromium) is ignored by plain
//! `cargo test`, with the reason, and runs under `scripts/test` (feature `system-tests`).

#[path = "../common/mod.rs"]
mod common;
#[path = "../common/dashboards.rs"]
mod dashboards;

mod bench_cli;
mod cli_help;
mod cli_inputs;
mod config;
mod dashboards_lint;
mod docs_agree;
mod health_cli;
mod metrics_golden;
mod parsers_bad_input;
mod reliability_doc;
mod repo_stands_alone;
mod report_html;
mod smartctl_fixtures;
