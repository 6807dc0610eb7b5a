//! `driveprobe check-config FILE`: validates a config without starting anything.

use std::path::PathBuf;

use clap::Args;

use super::Failure;
use crate::config::Config;

#[derive(Debug, Args)]
#[command(
    after_help = "Exit status: 0 when the config is valid, 2 when it is refused (the error names FILE:LINE:COLUMN and what to change)."
)]
pub struct CheckConfigArgs {
    /// The TOML config file (see config/driveprobe.example.toml).
    #[arg(value_name = "FILE")]
    file: PathBuf,
}

pub fn run(args: CheckConfigArgs) -> Result<u8, Failure> {
    let config = Config::load(&args.file).map_err(Failure::usage)?;
    println!(
        "{}: ok ({} drives, {} probes, {} schedules)",
        args.file.display(),
        config.drives.len(),
        config.probes.len(),
        config.schedules.len()
    );
    Ok(0)
}
