//! `driveprobe daemon`: runs the daemon (see `crate::daemon`). A bare `driveprobe` does the
//! same with the built-in config.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Args;

use super::Failure;
use crate::daemon::{self, DaemonError, Options};
use crate::logging::{LogFormat, LogLevel};

#[derive(Debug, Args, Default)]
#[command(
    after_help = "Without --config it runs the built-in config. As root: every whole disk the host shows, read-only, each with health polling and a 4 KiB random-read canary at its class's rate (state in /var/lib/driveprobe). Not root: a 256 MiB file target in the state directory ($XDG_STATE_HOME/driveprobe) with one 4 KiB random-read canary at 50 IOPS, and the health of the disks it may open. It listens on 127.0.0.1:39480.\n\nSignals: SIGHUP reloads the config and the web config (a bad one is refused and the old one keeps running; a new [server] listen is bound, then the old address closed); SIGTERM and SIGINT stop within 5 seconds, saving the state.\n\nLogs go to stderr; set RUST_LOG (for example RUST_LOG=driveprobe=debug) for more or less.\n\nThe canaries' I/O is issued by one shared thread (the reactor); DRIVEPROBE_CANARY_REACTOR=0 in the environment gives each canary its own thread instead (more CPU; to tell whether the reactor is at fault).\n\nExit status: 0 after a clean stop, 2 for a refused config or web config, 1 for anything else that stops it from starting."
)]
pub struct DaemonArgs {
    /// The TOML config file (every key in driveprobe.toml(5); the package's is
    /// /etc/driveprobe/driveprobe.toml; check it with `driveprobe check-config`).
    #[arg(long, short = 'c', value_name = "FILE")]
    config: Option<PathBuf>,
    /// Listen on this address instead of the config's [server] listen; repeatable: the
    /// daemon serves on every address given, all bound before it says it is ready (`:PORT`
    /// and `[::]:PORT` are every interface, IPv6 and IPv4; port 0 picks a free port; each
    /// address is printed).
    /// `--listen` is the same flag: given together, the addresses of both are served.
    /// While one is given, a SIGHUP does not move the listeners.
    #[arg(
        long = "web.listen-address",
        visible_alias = "listen",
        value_name = "ADDR",
        value_parser = parse_listen_address
    )]
    listen: Vec<SocketAddr>,
    /// Serve the metrics at this path instead of /metrics (which then answers 404); the
    /// status page, /healthz, /api/v1/ and /runs/ stay where they are, and a path among
    /// them is refused.
    #[arg(long = "web.telemetry-path", value_name = "PATH")]
    telemetry_path: Option<String>,
    /// Log only this level and more severe: debug, info, warn or error. Given, it wins
    /// over RUST_LOG; without it RUST_LOG's directives apply (RUST_LOG=driveprobe=debug);
    /// without both, info.
    #[arg(long = "log.level", value_enum, value_name = "LEVEL")]
    log_level: Option<LogLevel>,
    /// The format of the log lines on stderr: logfmt (ts=... level=... msg=... key=value)
    /// or json (one object per line). When stderr is the systemd journal, each line
    /// starts with its priority (<3> error, <4> warn, <6> info, <7> debug).
    #[arg(
        long = "log.format",
        value_enum,
        value_name = "FORMAT",
        default_value_t
    )]
    log_format: LogFormat,
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
    if let Some(p) = &args.telemetry_path {
        crate::http::routes::check_telemetry_path(p).map_err(Failure::usage)?;
    }
    crate::logging::init(args.log_level, args.log_format);
    let opts = Options {
        config: args.config,
        listen: args.listen,
        state_dir: args.state_dir,
        web_config: args.web_config_file,
        telemetry_path: args.telemetry_path,
    };
    match daemon::run(opts) {
        Ok(()) => Ok(0),
        Err(e @ (DaemonError::Config(_) | DaemonError::WebConfig(_))) => Err(Failure::usage(e)),
        Err(e) => Err(Failure::runtime(e)),
    }
}

/// An address as `--web.listen-address` takes it: `HOST:PORT`, `[V6]:PORT`, or `:PORT`
/// for every interface (as other exporters write it): `[::]:PORT`, which the daemon binds
/// for both families.
fn parse_listen_address(s: &str) -> Result<SocketAddr, BadListenAddress> {
    let full;
    let a = match s.strip_prefix(':') {
        Some(port) if !port.is_empty() => {
            full = format!("[::]:{port}");
            &full
        }
        _ => s,
    };
    a.parse().map_err(BadListenAddress)
}

/// What `--web.listen-address` refuses (clap prints it after the value).
#[derive(Debug, thiserror::Error)]
#[error("not an address: expected HOST:PORT (127.0.0.1:39480, [::1]:39480) or :PORT")]
pub struct BadListenAddress(#[source] std::net::AddrParseError);

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Wrap {
        #[command(flatten)]
        d: DaemonArgs,
    }

    #[test]
    fn listen_addresses_add_up_across_both_spellings() {
        assert_eq!(
            parse_listen_address(":9100").unwrap().to_string(),
            "[::]:9100"
        );
        assert_eq!(
            parse_listen_address("[::1]:1").unwrap().to_string(),
            "[::1]:1"
        );
        for bad in [":", "", "host", "1.2.3.4", ":x", "localhost:80"] {
            let e = parse_listen_address(bad).unwrap_err();
            // The parser's own error is kept as the source.
            let source = std::error::Error::source(&e).expect("a source");
            assert!(source.is::<std::net::AddrParseError>(), "{bad}: {source}");
            assert!(e.to_string().starts_with("not an address: "), "{e}");
        }
        let w = Wrap::try_parse_from([
            "x",
            "--listen",
            "127.0.0.1:1",
            "--web.listen-address",
            ":2",
            "--listen=127.0.0.1:3",
        ])
        .unwrap();
        let got: Vec<String> = w.d.listen.iter().map(|a| a.to_string()).collect();
        assert_eq!(got, ["127.0.0.1:1", "[::]:2", "127.0.0.1:3"]);
        assert_eq!(w.d.log_format, LogFormat::Logfmt);
        assert_eq!(w.d.log_level, None);
    }
}
