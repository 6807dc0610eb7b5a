//! `driveprobe daemon`: runs the daemon (see `crate::daemon`). A bare `driveprobe` does the
//! same with the built-in config.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Args;

use super::Failure;
use crate::daemon::{self, DaemonError, Options};

#[derive(Debug, Args, Default)]
#[command(
    after_help = "Without --config it runs the built-in config: a 256 MiB file target in the state directory ($XDG_STATE_HOME/driveprobe, or /var/lib/driveprobe as root) with one 4 KiB random-read canary at 50 IOPS, listening on 127.0.0.1:39480.\n\nSignals: SIGHUP reloads the config and the web config (a bad one is refused and the old one keeps running; a new [server] listen is bound, then the old address closed); SIGTERM and SIGINT stop within 5 seconds, saving the state.\n\nLogs go to stderr; set RUST_LOG (for example RUST_LOG=driveprobe=debug) for more or less.\n\nExit status: 0 after a clean stop, 2 for a refused config or web config, 1 for anything else that stops it from starting."
)]
pub struct DaemonArgs {
    /// The TOML config file (see config/driveprobe.example.toml; check it with
    /// `driveprobe check-config`).
    #[arg(long, short = 'c', value_name = "FILE")]
    config: Option<PathBuf>,
    /// Listen on this address instead of the config's [server] listen (port 0 picks a free
    /// port; the address is printed).
    #[arg(long, value_name = "ADDR")]
    listen: Option<SocketAddr>,
    /// Keep state (and the built-in config's file target) here instead of the config's
    /// state_dir.
    #[arg(long, value_name = "DIR")]
    state_dir: Option<PathBuf>,
    /// TLS and basic auth from this web config file, in the YAML format Prometheus
    /// exporters share (tls_server_config, basic_auth_users, http_server_config); reread
    /// on SIGHUP. Without it: plain HTTP, no auth.
    #[arg(
        long = "web-config-file",
        visible_alias = "web.config.file",
        value_name = "FILE"
    )]
    web_config_file: Option<PathBuf>,
}

pub fn run(args: DaemonArgs) -> Result<u8, Failure> {
    init_logging();
    let opts = Options {
        config: args.config,
        listen: args.listen,
        state_dir: args.state_dir,
        web_config: args.web_config_file,
    };
    match daemon::run(opts) {
        Ok(()) => Ok(0),
        Err(e @ (DaemonError::Config(_) | DaemonError::WebConfig(_))) => Err(Failure::usage(e)),
        Err(e) => Err(Failure::runtime(e)),
    }
}

fn init_logging() {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    // Under systemd the journal stamps the time; elsewhere we do.
    let journald = std::env::var_os("JOURNAL_STREAM").is_some();
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_target(false);
    let _ = if journald {
        builder.without_time().try_init()
    } else {
        builder.try_init()
    };
}
