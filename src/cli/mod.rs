//! The command line: parses arguments, calls the library, prints results. Every failure
//! is one line on stderr and a non-zero exit status (2 for bad usage, 1 for the rest).

mod bench;
mod health;
mod report;
mod suite;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "driveprobe",
    version,
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

pub fn main() -> ExitCode {
    // Until the daemon exists, a bare `driveprobe` (and `cargo run --release`) shows help.
    if std::env::args_os().len() <= 1 {
        use clap::CommandFactory;
        let _ = Cli::command().print_help();
        println!();
        return ExitCode::SUCCESS;
    }
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let status = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            return ExitCode::from(status);
        }
    };
    let result = match cli.command {
        Command::Bench(args) => bench::run(*args),
        Command::Health(args) => health::run(*args),
        Command::Report(args) => report::run(*args),
    };
    match result {
        Ok(status) => ExitCode::from(status),
        Err(f) => {
            // One line: what went wrong and what to do.
            let msg = f.message.replace('\n', " ");
            eprintln!("driveprobe: error: {msg}");
            ExitCode::from(f.status)
        }
    }
}
