//! The command line: parses arguments, calls the library, prints results. Every failure
//! is one line on stderr and a non-zero exit status (2 for bad usage, 1 for the rest).

pub mod bench;
mod check_config;
mod daemon;
mod discover;
mod generate;
mod health;
mod report;
mod suite;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "driveprobe",
    version = crate::version::LONG,
    about = "Drive latency canaries, the enterprise drive test protocol and drive health, as Prometheus metrics",
    long_about = None
)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run one workload on a file or block device and report IOPS, bandwidth and latency
    /// (fio's option names).
    Bench(Box<bench::BenchArgs>),
    /// Read one drive's health (NVMe by ioctl, SATA/SAS through smartctl): verdict,
    /// SMART data and an endurance estimate.
    Health(Box<health::HealthArgs>),
    /// Write one self-contained HTML page with the charts of one or more suite result
    /// documents (several are compared side by side).
    Report(Box<report::ReportArgs>),
    /// Check a daemon config file without starting anything: ok, or what is wrong at
    /// FILE:LINE:COLUMN.
    CheckConfig(check_config::CheckConfigArgs),
    /// Show what the daemon would watch on this host (every whole disk, filtered by the
    /// config's [discovery]) and what it skips, and why.
    Discover(discover::DiscoverArgs),
    /// Run the daemon: canary probes, health polling and scheduled runs on the configured
    /// drives, served as Prometheus metrics and a status page (the default command).
    Daemon(daemon::DaemonArgs),
    /// Write the man pages or the shell completions into a directory (for packagers:
    /// scripts/package).
    #[command(hide = true)]
    Generate(generate::GenerateArgs),
}

/// An error with the exit status it deserves.
#[derive(Debug)]
pub struct Failure {
    pub status: u8,
    pub message: String,
}

impl Failure {
    pub fn usage(message: impl std::fmt::Display) -> Self {
        Failure {
            status: 2,
            message: message.to_string(),
        }
    }
    pub fn runtime(message: impl std::fmt::Display) -> Self {
        Failure {
            status: 1,
            message: message.to_string(),
        }
    }
}

/// Writes a result: the JSON document to `--output FILE` when given, then either the
/// JSON or the text to stdout (a closed pipe is not an error).
pub(crate) fn emit<T: serde::Serialize>(
    doc: &T,
    output: Option<&std::path::Path>,
    json_on_stdout: bool,
    text: impl FnOnce() -> String,
) -> Result<(), Failure> {
    let json = serde_json::to_string_pretty(doc)
        .map_err(|e| Failure::runtime(format!("could not encode the result: {e}")))?;
    if let Some(out) = output {
        std::fs::write(out, format!("{json}\n")).map_err(|e| {
            Failure::runtime(format!("{}: cannot write the result: {e}", out.display()))
        })?;
    }
    if json_on_stdout {
        out(&format!("{json}\n"))
    } else {
        out(&text())
    }
}

/// Writes `text` to stdout, as every subcommand prints its result. A closed pipe
/// (`driveprobe health --json DEV | head -0`) is not an error: the reader left, as with
/// `cat` or `ls`, the command ends quietly with the status of what it did (never a
/// panic, as `print!` gives). Any other write error is one line and status 1.
pub(crate) fn out(text: &str) -> Result<(), Failure> {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(Failure::runtime(format!("cannot write to stdout: {e}")))
        }
        _ => Ok(()),
    }
}

/// clap's usage error (several lines: the error, possible values or a tip, the usage, a
/// pointer to --help) as the one line every other failure is, `driveprobe: error: ...`,
/// its parts joined by `; `.
fn one_line_usage_error(rendered: &str) -> String {
    let parts: Vec<&str> = rendered
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    format!("driveprobe: {}", parts.join("; "))
}

pub fn main() -> ExitCode {
    // A bare `driveprobe` (and `cargo run --release`) runs the daemon on the built-in config.
    // fio options `bench` refuses are named with the reason, before clap would call
    // them merely unknown.
    // Those given at fio's default value are dropped instead: they change nothing.
    let mut args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if args.get(1).is_some_and(|a| a == "bench") {
        match bench::refuse_fio_options(&args[2..]) {
            Ok(kept) => {
                args.truncate(2);
                args.extend(kept);
            }
            Err(f) => {
                eprintln!("driveprobe: error: {}", f.message);
                return ExitCode::from(f.status);
            }
        }
    }
    let parsed = if args.len() <= 1 {
        Ok(Cli {
            command: Command::Daemon(daemon::DaemonArgs::default()),
        })
    } else {
        Cli::try_parse_from(&args)
    };
    let cli = match parsed {
        Ok(c) => c,
        // --help and --version print as clap writes them; a usage error is one line.
        Err(e) if !e.use_stderr() => {
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("{}", one_line_usage_error(&e.render().to_string()));
            return ExitCode::from(2);
        }
    };
    let result = match cli.command {
        Command::Bench(args) => bench::run(*args),
        Command::Health(args) => health::run(*args),
        Command::Report(args) => report::run(*args),
        Command::CheckConfig(args) => check_config::run(args),
        Command::Discover(args) => discover::run(args),
        Command::Daemon(args) => daemon::run(args),
        Command::Generate(args) => generate::run(args),
    };
    match result {
        Ok(status) => ExitCode::from(status),
        Err(f) => {
            // One line: what went wrong and what to do (no control character from a
            // drive's or a file's text can break it or drive the terminal).
            let msg = crate::fmt::one_line(&f.message);
            eprintln!("driveprobe: error: {msg}");
            ExitCode::from(f.status)
        }
    }
}
