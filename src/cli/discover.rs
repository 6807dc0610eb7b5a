//! `driveprobe discover [--config FILE] [--json]`: what the daemon would watch on this
//! host with that config (or the built-in one), and what it skips and why.

use std::path::PathBuf;

use clap::Args;

use super::Failure;
use crate::config::{self, Config};
use crate::discovery::{self, Watch};

#[derive(Debug, Args)]
#[command(
    after_help = "Reads sysfs (and runs `smartctl --scan-open` for drives behind RAID controllers when [discovery] raid is on); opens no drive, writes nothing.\n\nExit status: 0, or 2 when the config is refused."
)]
pub struct DiscoverArgs {
    /// The daemon's config file; without it, the built-in config (as root: every drive,
    /// read-only; not root: a file target in the state directory).
    #[arg(long, short = 'c', value_name = "FILE")]
    config: Option<PathBuf>,
    /// Print JSON: {"watched": [...], "skipped": [...]}.
    #[arg(long)]
    json: bool,
}

pub fn run(args: DiscoverArgs) -> Result<u8, Failure> {
    let base = match &args.config {
        Some(p) => Config::load(p).map_err(Failure::usage)?,
        None => Config::embedded_default(&config::default_state_dir()),
    };
    let (_, watch) = discovery::on_host(&base);
    super::emit(&watch, None, args.json, || {
        text(&watch, base.discovery.enabled)
    })?;
    Ok(0)
}

/// The table of watched drives, then the skipped devices with their reasons.
pub fn text(w: &Watch, enabled: bool) -> String {
    let mut out = String::new();
    if !enabled {
        out.push_str("discovery is off ([discovery] enabled = false, or no [discovery] section in the config)\n");
    }
    out.push_str(&format!(
        "watching {}:\n",
        crate::units::count(w.watched.len() as u64, "drive", "drives")
    ));
    let rows: Vec<[String; 6]> = w
        .watched
        .iter()
        .map(|x| {
            [
                x.name.clone(),
                x.kernel_name.clone().unwrap_or_else(|| "-".into()),
                x.class.map_or("-", |c| c.name()).to_string(),
                x.transport.map_or("-", |t| t.name()).to_string(),
                match (x.canary_rate_iops, x.canary_window_seconds) {
                    (Some(r), Some(win)) => format!("{r} IOPS/{win}s window"),
                    _ if x.health_only => "health only".into(),
                    _ => "its own probes".into(),
                },
                x.source.clone(),
            ]
        })
        .collect();
    let head = ["DRIVE", "DEVICE", "CLASS", "TRANSPORT", "CANARY", "SOURCE"].map(String::from);
    let mut widths = head.clone().map(|h| h.len());
    for r in &rows {
        for (i, c) in r.iter().enumerate() {
            widths[i] = widths[i].max(c.len());
        }
    }
    for r in std::iter::once(&head).chain(rows.iter()) {
        let line: Vec<String> = r
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{c:<w$}", w = widths[i]))
            .collect();
        out.push_str(&format!("  {}\n", line.join("  ").trim_end()));
    }
    if !w.skipped.is_empty() {
        out.push_str(&format!("skipping {}:\n", w.skipped.len()));
        for s in &w.skipped {
            out.push_str(&format!("  {}: {}\n", s.name, s.reason));
        }
    }
    out
}
