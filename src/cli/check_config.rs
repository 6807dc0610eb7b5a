//! `driveprobe check-config [FILE] [--web-config-file WEB]`: validates a config, a web
//! config, or both, without starting anything.

use std::path::PathBuf;

use clap::Args;

use super::Failure;
use crate::config::Config;
use crate::http::WebConfig;
use crate::units::count;

#[derive(Debug, Args)]
#[command(
    after_help = "Give the config FILE, the web config with --web-config-file, or both (as the daemon is started; systemd's ExecReload= runs it before SIGHUP).\n\nExit status: 0 when what was given is valid, 2 when it is refused (the error names FILE:LINE:COLUMN, or the web config file, and what to change)."
)]
pub struct CheckConfigArgs {
    /// The TOML config file (every key in driveprobe.toml(5)).
    #[arg(value_name = "FILE", required_unless_present = "web_config_file")]
    file: Option<PathBuf>,
    /// The web config file (TLS, basic auth) as `driveprobe daemon --web-config-file`
    /// reads it: its certificate and key are loaded, its password hashes read.
    #[arg(
        long = "web-config-file",
        visible_alias = "web.config.file",
        value_name = "WEB"
    )]
    web_config_file: Option<PathBuf>,
}

pub fn run(args: CheckConfigArgs) -> Result<u8, Failure> {
    if let Some(file) = &args.file {
        let config = Config::load(file).map_err(Failure::usage)?;
        super::out(&format!(
            "{}: ok ({}, {}, {})\n",
            file.display(),
            count(config.drives.len() as u64, "drive", "drives"),
            count(config.probes.len() as u64, "probe", "probes"),
            count(config.schedules.len() as u64, "schedule", "schedules")
        ))?;
    }
    if let Some(web) = &args.web_config_file {
        let w = WebConfig::load(web).map_err(Failure::usage)?;
        super::out(&format!("{}: ok ({})\n", web.display(), w.summary()))?;
    }
    Ok(0)
}
