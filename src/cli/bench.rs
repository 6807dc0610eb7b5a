//! `driveprobe bench`: one workload from a shell, with fio's option names.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};
use serde::Serialize;

use super::Failure;
use crate::device;
use crate::engine::{
    self, Arrival, BackendChoice, CpuPolicy, DirSummary, Distribution, IntervalSummary, Job,
    JobSpec, Pattern, RateLimit, RegionSpec, RunControl, RunResult, SizeMix, Stop,
};
use crate::protocol::hist::LatencyHist;
use crate::safety::{self, WriteRequest};
use crate::target::{self, Target, TargetKind};
use crate::units::{self, format_size};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
#[allow(clippy::enum_variant_names)] // fio's names
pub enum Rw {
    Read,
    Write,
    Randread,
    Randwrite,
    #[value(alias = "readwrite")]
    Rw,
    Randrw,
    // Trims (discards: a punched hole in a file, BLKDISCARD on a device): sequential,
    // random, and each block trimmed then written, sequentially (docs/fio-options.md).
    // Plain comments, not doc comments: those would turn --help into its long form.
    Trim,
    Randtrim,
    Trimwrite,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    #[value(alias = "normal")]
    Text,
    Json,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum IoEngine {
    Auto,
    #[value(name = "io_uring", alias = "uring")]
    IoUring,
    #[value(alias = "sync", alias = "pvsync")]
    Psync,
    // fio's Linux native AIO: driveprobe runs io_uring (or psync where io_uring is
    // unavailable) and says so in the output (`substitutions`). (A doc comment here would
    // turn `bench --help` into clap's long form.)
    Libaio,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CpusAllowedPolicy {
    Shared,
    Split,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RateProcess {
    Linear,
    Poisson,
}

#[derive(Debug, Args)]
#[command(
    after_help = "Sizes take k/m/g/t (powers of 1024) or KB/MB/GB (powers of 1000); --size and --offset also take a percentage of the target (25%).\n\
A file that does not exist is created and filled to --size; an existing file is never truncated.\n\
Writes to a block device need --allow-destructive and --expect-serial (or --expect-wwn), and are refused when the device or a partition of it is mounted, used as swap or held by md/dm/LVM.\n\
Writes to an existing file that driveprobe did not create (a file it creates carries its user.driveprobe.owner mark) need --allow-destructive too; no symbolic link on the file's path is followed for a write.\n\
fio options: fio's names are taken (--rw, --bs, --iodepth, --numjobs, --runtime, --time_based, --size, --rwmixread, --rate_iops, --direct, --group_reporting, --norandommap, --randrepeat, ...); --ioengine=libaio runs io_uring (psync at queue depth 1 where io_uring is unavailable) and says so. fio options that would change what is measured and that driveprobe does not do (--fsync, --rate, --thinktime, --iodepth_batch*, --zero_buffers, --percentile_list, --loops, --nrfiles, --cpus_allowed, --write_lat_log, ...) are refused, naming the option and why, unless given at fio's default (--fsync=0, --loops=1, --invalidate=1, ...): see docs/fio-options.md.\n\
Exit status: 0 when the run completed without I/O errors or verify mismatches, 1 when it did not, 2 for bad usage."
)]
pub struct BenchArgs {
    /// The file or block device to test.
    #[arg(value_name = "TARGET", required_unless_present_any = ["filename", "list_suites"])]
    pub(super) target: Option<PathBuf>,
    /// The file or block device to test (fio's name for TARGET).
    #[arg(long, value_name = "PATH", conflicts_with = "target")]
    filename: Option<PathBuf>,
    /// Access pattern and direction.
    #[arg(long, value_enum, default_value = "randread", alias = "readwrite")]
    rw: Rw,
    /// Transfer size, or a weighted mix: 4k, or 512:4,4k:67,8k:10,16k:7,32k:3,64k:3.
    #[arg(
        long,
        default_value = "4k",
        value_name = "SIZE|MIX",
        alias = "blocksize"
    )]
    bs: String,
    /// A weighted size mix in fio's form (4k/70:8k/30); overrides --bs.
    #[arg(long, value_name = "MIX")]
    bssplit: Option<String>,
    /// Read share of a mixed workload, percent.
    #[arg(long, value_name = "PCT", alias = "rwmixread")]
    rwmixread: Option<u32>,
    /// Write share of a mixed workload, percent (100 - rwmixread).
    #[arg(long, value_name = "PCT", conflicts_with = "rwmixread")]
    rwmixwrite: Option<u32>,
    /// I/Os in flight per worker.
    #[arg(long, default_value_t = 1, value_name = "N")]
    iodepth: u32,
    /// Number of workers (threads), each with its own queue.
    #[arg(long, default_value_t = 1, value_name = "N")]
    numjobs: u32,
    /// Longest measured run time (10, 10s, 2m): the run ends here or after --io-size bytes (or one pass over the region per worker), whichever comes first; with --time_based it runs this long.
    #[arg(long, value_name = "DURATION")]
    pub(super) runtime: Option<String>,
    /// fio's time_based: run for --runtime, going over the region as often as needed (0,
    /// the default, stops at the size or the runtime, whichever comes first).
    #[arg(
        long = "time-based",
        alias = "time_based",
        hide = true,
        num_args = 0..=1,
        default_missing_value = "1",
        value_name = "0|1"
    )]
    time_based: Option<u8>,
    /// Accepted for fio compatibility: the workers' results are always reported as one
    /// group (per direction and in total).
    #[arg(
        long = "group-reporting",
        alias = "group_reporting",
        hide = true,
        num_args = 0..=1,
        default_missing_value = "1",
        value_name = "0|1"
    )]
    group_reporting: Option<u8>,
    /// fio's norandommap: random offsets drawn independently. Without it each worker's
    /// random offsets visit every block once before any again (fio's random map), with
    /// one --bs, a uniform distribution and only random I/O.
    #[arg(long, hide = true, num_args = 0..=1, default_missing_value = "1", value_name = "0|1")]
    norandommap: Option<u8>,
    /// fio's randrepeat: 1 (the default) repeats the same offsets run after run (the
    /// fixed --seed); 0 draws a new seed for each run.
    #[arg(long, hide = true, value_name = "0|1")]
    randrepeat: Option<u8>,
    /// Accepted for fio compatibility: workers are always threads.
    #[arg(long, hide = true)]
    thread: bool,
    /// Accepted for fio compatibility: the progress bar is drawn only when stderr is a
    /// terminal.
    #[arg(long, hide = true, value_name = "WHEN")]
    eta: Option<String>,
    /// Time run before measuring starts (not counted).
    #[arg(long = "ramp-time", alias = "ramp_time", value_name = "DURATION")]
    ramp_time: Option<String>,
    /// Region length (bytes or % of the target); also the size of a file that is created.
    #[arg(long, value_name = "SIZE|PCT")]
    pub(super) size: Option<String>,
    /// Region start (bytes or % of the target).
    #[arg(long, value_name = "SIZE|PCT")]
    pub(super) offset: Option<String>,
    /// Stop after each worker has moved this many bytes, or at --runtime if sooner (fio's io_size).
    #[arg(
        long = "io-size",
        alias = "io_size",
        alias = "io_limit",
        value_name = "SIZE"
    )]
    io_size: Option<String>,
    /// Rate limit: total IOPS over all workers (open loop; latency counts from the scheduled time).
    #[arg(long = "rate-iops", alias = "rate_iops", value_name = "IOPS")]
    rate_iops: Option<f64>,
    /// Arrivals of a rate-limited run: evenly spaced or Poisson.
    #[arg(
        long = "rate-process",
        alias = "rate_process",
        value_enum,
        default_value = "linear"
    )]
    rate_process: RateProcess,
    /// Share of I/Os at random offsets, the rest sequential (default: 100 for rand*, 0 otherwise).
    #[arg(
        long = "percentage-random",
        alias = "percentage_random",
        value_name = "PCT"
    )]
    percentage_random: Option<u32>,
    /// uniform (or random), or zoned:ACCESS/SIZE:... such as zoned:50/5:30/15:20/80.
    #[arg(
        long = "random-distribution",
        alias = "random_distribution",
        default_value = "uniform"
    )]
    random_distribution: String,
    /// O_DIRECT (the default): bypass the page cache. --direct=0 is --buffered.
    #[arg(long, value_name = "0|1", num_args = 0..=1, default_missing_value = "1")]
    pub(super) direct: Option<u8>,
    /// Go through the page cache.
    #[arg(long, conflicts_with = "direct")]
    pub(super) buffered: bool,
    /// Stamp written blocks with a header (offset, sequence, checksum) and check it on reads;
    /// a job that only writes reads every block back afterwards (fio's verify phase).
    /// A value (crc32c, md5, ...) is accepted for fio compatibility; driveprobe always uses its header.
    #[arg(long, value_name = "KIND", num_args = 0..=1, default_missing_value = "1")]
    verify: Option<String>,
    /// I/O backend.
    #[arg(long, value_enum, default_value = "auto")]
    pub(super) ioengine: IoEngine,
    /// Where the workers run. `split` confines each worker to its own CPUs among those the
    /// process may use: one CPU each with as many workers as CPUs or at --iodepth 1, a
    /// share each with fewer workers. Workers are not confined when they outnumber the
    /// CPUs, when only one CPU is allowed, or when one worker has --iodepth above 1.
    /// `shared` lets every worker run on any allowed CPU (fio's default). The `cpus:` line
    /// of the output says where they ran.
    #[arg(
        long = "cpus-allowed-policy",
        alias = "cpus_allowed_policy",
        value_enum,
        default_value = "split"
    )]
    cpus_allowed_policy: CpusAllowedPolicy,
    /// Result format on stdout.
    #[arg(
        long = "output-format",
        alias = "output_format",
        value_enum,
        default_value = "text"
    )]
    pub(super) output_format: OutputFormat,
    /// Also write the JSON result to this file.
    #[arg(long, value_name = "FILE")]
    pub(super) output: Option<PathBuf>,
    /// Length of each interval snapshot.
    #[arg(
        long,
        default_value = "1s",
        value_name = "DURATION",
        alias = "status-interval"
    )]
    interval: String,
    /// Stop the run after this many I/O errors.
    #[arg(long = "error-limit", default_value_t = 10, value_name = "N")]
    error_limit: u64,
    /// Allow writes to a block device, or to an existing file driveprobe did not create
    /// (their data is destroyed).
    #[arg(long = "allow-destructive")]
    pub(super) allow_destructive: bool,
    /// The serial number the block device must have for writes.
    #[arg(long = "expect-serial", value_name = "SERIAL")]
    pub(super) expect_serial: Option<String>,
    /// The WWN the block device must have for writes.
    #[arg(long = "expect-wwn", value_name = "WWN")]
    pub(super) expect_wwn: Option<String>,
    /// Seed of the offset and data generators (runs with the same seed issue the same I/O).
    #[arg(long, value_name = "N", alias = "randseed")]
    pub(super) seed: Option<u64>,
    /// Run a named suite of the drive test protocol instead of one workload.
    #[arg(long, value_name = "NAME", help_heading = "Suites")]
    pub(super) suite: Option<String>,
    /// Run a fio job file on the target (${TARGET} in it is the target), its jobs ingested
    /// as suite points; --runtime bounds it (default 1h).
    #[arg(
        long = "fio-job",
        value_name = "FILE",
        help_heading = "Suites",
        conflicts_with = "suite"
    )]
    pub(super) fio_job: Option<std::path::PathBuf>,
    /// QoS latency targets for --suite qos (TOML: [[class]] tables of [[class.row]]s with
    /// rw, bs, workers, depth, limits_us = { "99.9" = 500, ... }); default: the embedded
    /// table (docs/protocol.md).
    #[arg(long = "qos-targets", value_name = "FILE", help_heading = "Suites")]
    pub(super) qos_targets: Option<std::path::PathBuf>,
    /// The drive class of the QoS table to qualify against (default: its first).
    #[arg(long = "qos-class", value_name = "NAME", help_heading = "Suites")]
    pub(super) qos_class: Option<String>,
    /// List the suites and what each runs.
    #[arg(long = "list-suites", help_heading = "Suites")]
    pub(super) list_suites: bool,
    /// How long a suite takes: quick (enterprise: about 35 s on a 256 MiB file), standard
    /// or full (hours).
    #[arg(
        long,
        default_value = "standard",
        value_name = "SCALE",
        help_heading = "Suites"
    )]
    pub(super) scale: String,
    /// Length of one round (overrides the scale's).
    #[arg(long = "round-time", value_name = "DURATION", help_heading = "Suites")]
    pub(super) round_time: Option<String>,
    /// Most rounds a steady-state phase takes before giving up (overrides the scale's).
    #[arg(long = "max-rounds", value_name = "N", help_heading = "Suites")]
    pub(super) max_rounds: Option<u32>,
    /// Workload-independent preconditioning passes (overrides the scale's).
    #[arg(
        long = "precondition-passes",
        value_name = "N",
        help_heading = "Suites"
    )]
    pub(super) precondition_passes: Option<u32>,
    /// Rated 4K random read IOPS, to set measured against the datasheet in reports.
    #[arg(long = "rated-read-iops", value_name = "IOPS", help_heading = "Suites")]
    pub(super) rated_read_iops: Option<f64>,
    /// Rated 4K random write IOPS.
    #[arg(
        long = "rated-write-iops",
        value_name = "IOPS",
        help_heading = "Suites"
    )]
    pub(super) rated_write_iops: Option<f64>,
    /// Rated sequential read bandwidth (bytes per second, e.g. 3.2GB).
    #[arg(long = "rated-seq-read", value_name = "SIZE", help_heading = "Suites")]
    pub(super) rated_seq_read: Option<String>,
    /// Rated sequential write bandwidth (bytes per second).
    #[arg(long = "rated-seq-write", value_name = "SIZE", help_heading = "Suites")]
    pub(super) rated_seq_write: Option<String>,
    /// Job name, shown in the output (fio habit).
    #[arg(long, value_name = "NAME")]
    pub(super) name: Option<String>,
    /// Keep the latency histograms of the JSON (a suite's result document, or one run's
    /// `--output-format json`) to N significant digits: 3, the engine's (any percentile
    /// within 0.1%), 2 (1%) or 1 (10%); each digit dropped makes a long run's histograms
    /// 6 to 8 times smaller (BENCHMARKS.md). The figures measured (p50, p99...) stay the
    /// engine's; each histogram states its digits.
    #[arg(long = "hist-digits", value_name = "N", value_parser = clap::value_parser!(u8).range(1..=3))]
    pub(super) hist_digits: Option<u8>,
}

/// fio options `bench` refuses, each with the reason: every one would change what is
/// measured, and driveprobe does not do what it asks, so it is refused rather than
/// ignored. (Options that are neither driveprobe's nor listed here are refused by the
/// argument parser, which names them.) docs/fio-options.md holds the same table, and a
/// test keeps the two in step.
pub const REFUSED_FIO_OPTIONS: &[(&[&str], &str)] = &[
    (
        &["fsync", "fdatasync", "end_fsync", "fsync_on_close", "sync"],
        "driveprobe issues no flushes and no O_SYNC writes, so it would not measure their cost; measure with fio, or use --direct=1 for writes that bypass the page cache",
    ),
    (
        &["rate", "rate_min", "ratemin"],
        "a bandwidth cap is not supported; use --rate_iops (open loop, latency from the scheduled time)",
    ),
    (
        &["thinktime", "thinktime_blocks", "thinktime_spin"],
        "no think time between I/Os; use --rate_iops for an offered load",
    ),
    (
        &[
            "iodepth_batch",
            "iodepth_batch_submit",
            "iodepth_batch_complete",
            "iodepth_batch_complete_min",
            "iodepth_batch_complete_max",
            "iodepth_low",
        ],
        "driveprobe refills each worker's queue as completions arrive, its own way; fio's batching would queue differently",
    ),
    (
        &["hipri", "fixedbufs", "registerfiles", "sqthread_poll", "sqthread_poll_cpu"],
        "io_uring's setup (polled completions, registered buffers and files, a kernel submission thread) is not configurable in driveprobe",
    ),
    (
        &[
            "zero_buffers",
            "buffer_compress_percentage",
            "buffer_compress_chunk",
            "dedupe_percentage",
            "buffer_pattern",
        ],
        "driveprobe writes incompressible random data; other data would measure a drive's compression or deduplication",
    ),
    (
        &["percentile_list", "clat_percentiles", "slat_percentiles"],
        "the latency is always from submission to completion (fio's lat), with fixed percentiles: p50 p90 p99 p99.9 p99.99 in totals, p50 p99 p99.9 per interval",
    ),
    (
        &["loops", "startdelay", "stonewall", "new_group", "wait_for"],
        "a bench run is one job, run once: give a longer --runtime or --io_size, or use --fio-job for several jobs",
    ),
    (
        &["nrfiles", "filesize", "openfiles", "file_service_type", "directory"],
        "a bench run has one target, given by --filename (or TARGET) and --size",
    ),
    (
        &["cpus_allowed", "cpumask", "numa_cpu_nodes", "numa_mem_policy"],
        "workers run on the CPUs the process may use: start driveprobe under taskset or numactl, and see --cpus-allowed-policy",
    ),
    (
        &["bsrange", "blocksize_range", "bs_unaligned", "blockalign", "ba"],
        "sizes come from --bs or --bssplit, aligned to themselves; use --bssplit for a mix",
    ),
    (
        &[
            "write_lat_log",
            "write_bw_log",
            "write_iops_log",
            "write_hist_log",
            "log_avg_msec",
        ],
        "no log files: --output-format=json holds one record per --interval (status-interval) with IOPS, bandwidth and latency",
    ),
    (
        &["invalidate", "pre_read"],
        "driveprobe does not drop or prime the page cache: use --direct=1 (the default) to measure the drive",
    ),
    (
        &["do_verify", "verify_only", "verify_fatal", "verify_backlog", "verify_interval"],
        "--verify checks its own header on every read of a block a --verify run wrote, and a job that only writes reads every block back after its writes (fio's verify phase, do_verify=1); fio's other verify settings are not supported",
    ),
    (
        &["unified_rw_reporting", "minimal", "terse_version"],
        "the output is driveprobe's: per direction and in total, as text or --output-format=json",
    ),
];

/// Refused fio options given at fio's own default value, which changes nothing: these
/// are accepted (and dropped before parsing), so generated fio lines that spell out
/// defaults run unchanged. Values are compared as written (`--fsync=0`, `--loops 1`).
pub const FIO_DEFAULTS_ACCEPTED: &[(&str, &[&str])] = &[
    ("fsync", &["0"]),
    ("fdatasync", &["0"]),
    ("end_fsync", &["0"]),
    ("fsync_on_close", &["0"]),
    ("sync", &["0", "none"]),
    ("rate", &["0"]),
    ("rate_min", &["0"]),
    ("ratemin", &["0"]),
    ("thinktime", &["0"]),
    ("thinktime_blocks", &["1"]),
    ("thinktime_spin", &["0"]),
    ("iodepth_batch", &["1"]),
    ("iodepth_batch_submit", &["1"]),
    ("iodepth_batch_complete", &["1"]),
    ("iodepth_batch_complete_min", &["1"]),
    ("hipri", &["0"]),
    ("fixedbufs", &["0"]),
    ("registerfiles", &["0"]),
    ("sqthread_poll", &["0"]),
    ("zero_buffers", &["0"]),
    ("buffer_compress_percentage", &["0"]),
    ("dedupe_percentage", &["0"]),
    ("clat_percentiles", &["1"]),
    ("slat_percentiles", &["0"]),
    ("loops", &["1"]),
    ("startdelay", &["0"]),
    ("nrfiles", &["1"]),
    ("bs_unaligned", &["0"]),
    ("log_avg_msec", &["0"]),
    ("invalidate", &["1"]),
    ("pre_read", &["0"]),
    ("do_verify", &["1"]),
    ("verify_only", &["0"]),
    ("unified_rw_reporting", &["0", "none"]),
];

/// Refuses the fio options of [`REFUSED_FIO_OPTIONS`] before the arguments are parsed,
/// in one line naming the option and why (`--fsync=1`, `--fsync 1`, `--end-fsync`), and
/// returns the arguments without those given at fio's default ([`FIO_DEFAULTS_ACCEPTED`]).
pub fn refuse_fio_options(args: &[std::ffi::OsString]) -> Result<Vec<std::ffi::OsString>, Failure> {
    let mut kept = Vec::with_capacity(args.len());
    let mut i = 0;
    while i < args.len() {
        let raw = &args[i];
        i += 1;
        let Some(arg) = raw.to_str() else {
            kept.push(raw.clone());
            continue;
        };
        if arg == "--" {
            kept.extend(args[i - 1..].iter().cloned());
            break;
        }
        let Some(opt) = arg.strip_prefix("--") else {
            kept.push(raw.clone());
            continue;
        };
        let (name, value) = match opt.split_once('=') {
            Some((n, v)) => (n.replace('-', "_"), Some(v.to_string())),
            None => (opt.replace('-', "_"), None),
        };
        let Some((_, why)) = REFUSED_FIO_OPTIONS
            .iter()
            .find(|(names, _)| names.contains(&name.as_str()))
        else {
            kept.push(raw.clone());
            continue;
        };
        let defaults = FIO_DEFAULTS_ACCEPTED
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| *v)
            .unwrap_or(&[]);
        let is_default = |v: &str| defaults.iter().any(|d| d.eq_ignore_ascii_case(v.trim()));
        match value {
            Some(v) if is_default(&v) => continue,
            // `--loops 1`: the next argument is the value when it is one of the defaults
            // (otherwise it is the target, and the option is a bare flag).
            None if args.get(i).and_then(|n| n.to_str()).is_some_and(is_default) => {
                i += 1;
                continue;
            }
            _ => {}
        }
        let defaults_text = if defaults.is_empty() {
            String::new()
        } else {
            format!(" (--{name}={} is accepted: fio's default)", defaults[0])
        };
        return Err(Failure::usage(format!(
            "--{name}: fio's option is not supported by driveprobe bench: {why}{defaults_text} (see docs/fio-options.md)"
        )));
    }
    Ok(kept)
}

/// Size or percentage, as fio's --size and --offset take.
#[derive(Debug, Clone, Copy)]
pub(super) enum Amount {
    Bytes(u64),
    Fraction(f64),
}

pub(super) fn amount(flag: &str, text: &str) -> Result<Amount, Failure> {
    if text.trim().ends_with('%') {
        units::parse_percent(text)
            .map(Amount::Fraction)
            .map_err(|e| Failure::usage(format!("--{flag}: {e}")))
    } else {
        units::parse_size(text)
            .map(Amount::Bytes)
            .map_err(|e| Failure::usage(format!("--{flag}: {e}")))
    }
}

pub(super) fn duration(flag: &str, text: &str) -> Result<Duration, Failure> {
    units::parse_duration(text).map_err(|e| Failure::usage(format!("--{flag}: {e}")))
}

/// Turns the arguments into a validated job (no I/O, no filesystem access).
fn build_job(a: &BenchArgs) -> Result<(Job, Option<Amount>, Option<Amount>), Failure> {
    let usage = |e: engine::JobError| Failure::usage(e);
    let (pattern, default_read) = pattern_and_default_read(a.rw);
    let trim = trim_mode(a.rw);
    let read_pct = read_share(a, default_read)?;
    let sizes = match &a.bssplit {
        Some(s) => SizeMix::parse(s),
        None => SizeMix::parse(&a.bs),
    }
    .map_err(|e| Failure::usage(format!("--bs: {e}")))?;
    let distribution = Distribution::parse(&a.random_distribution)
        .map_err(|e| Failure::usage(format!("--random-distribution: {e}")))?;
    let size = a.size.as_deref().map(|s| amount("size", s)).transpose()?;
    let offset = a
        .offset
        .as_deref()
        .map(|s| amount("offset", s))
        .transpose()?;
    let region = region_spec(offset, size)?;
    check_switches(a)?;
    let time_based = a.time_based == Some(1);
    let (runtime, stop) = stop_rule(a, time_based)?;
    let direct = direct_io(a)?;
    let verify = match a.verify.as_deref() {
        None | Some("0") | Some("none") => false,
        Some(_) => true,
    };
    let mut spec = JobSpec {
        region,
        pattern,
        random_pct: a.percentage_random,
        sizes,
        read_pct,
        distribution,
        depth: a.iodepth,
        workers: a.numjobs,
        // A placeholder when the stop depends on the region (replaced in `run`).
        stop: stop.unwrap_or(match runtime {
            Some(time) => Stop::TimeOrBytes { time, bytes: 1 },
            None => Stop::Bytes(1),
        }),
        // fio's random map, unless --norandommap.
        random_map: a.norandommap != Some(1),
        trim,
        ramp: a
            .ramp_time
            .as_deref()
            .map(|r| duration("ramp-time", r))
            .transpose()?
            .unwrap_or(Duration::ZERO),
        rate: rate_limit(a),
        direct,
        verify,
        interval: duration("interval", &a.interval)?,
        error_limit: a.error_limit,
        backend: backend_choice(a.ioengine),
        cpu_policy: cpu_policy(a.cpus_allowed_policy),
        ..JobSpec::default()
    };
    if let Some(seed) = seed_override(a)? {
        spec.seed = seed;
    }
    let job = spec.validate().map_err(usage)?;
    refuse_unverifiable_writes(&job, time_based)?;
    Ok((job, size, offset))
}

/// The access pattern of a --rw value, and its read share when --rwmix* are not given.
fn pattern_and_default_read(rw: Rw) -> (Pattern, u32) {
    match rw {
        Rw::Read => (Pattern::Sequential, 100),
        Rw::Write => (Pattern::Sequential, 0),
        Rw::Randread => (Pattern::Random, 100),
        Rw::Randwrite => (Pattern::Random, 0),
        Rw::Rw => (Pattern::Sequential, 50),
        Rw::Randrw => (Pattern::Random, 50),
        Rw::Trim | Rw::Trimwrite => (Pattern::Sequential, 0),
        Rw::Randtrim => (Pattern::Random, 0),
    }
}

/// Whether a --rw value trims, and whether it writes each trimmed block afterwards.
fn trim_mode(rw: Rw) -> engine::Trim {
    match rw {
        Rw::Trim | Rw::Randtrim => engine::Trim::Only,
        Rw::Trimwrite => engine::Trim::ThenWrite,
        _ => engine::Trim::Off,
    }
}

/// The read percentage, from --rwmixread or --rwmixwrite (mixed workloads only).
fn read_share(a: &BenchArgs, default_read: u32) -> Result<u32, Failure> {
    let mixed = matches!(a.rw, Rw::Rw | Rw::Randrw);
    Ok(match (a.rwmixread, a.rwmixwrite) {
        (Some(_), _) | (_, Some(_)) if !mixed => {
            return Err(Failure::usage(
                "--rwmixread/--rwmixwrite only apply to --rw=rw or --rw=randrw",
            ))
        }
        (Some(r), _) => r,
        (None, Some(w)) if w <= 100 => 100 - w,
        (None, Some(w)) => return Err(Failure::usage(engine::JobError::ReadShare(w))),
        (None, None) => default_read,
    })
}

/// The region to run over, from --offset and --size, refusing a mix of bytes and
/// percentages and an empty region.
fn region_spec(offset: Option<Amount>, size: Option<Amount>) -> Result<RegionSpec, Failure> {
    let region = match (offset, size) {
        (None, None) => RegionSpec::Whole,
        (o, s) => match (o.unwrap_or(Amount::Bytes(0)), s) {
            (Amount::Bytes(off), None) => RegionSpec::Bytes {
                offset: off,
                len: None,
            },
            (Amount::Bytes(off), Some(Amount::Bytes(len))) => RegionSpec::Bytes {
                offset: off,
                len: Some(len),
            },
            (Amount::Fraction(o), None) => RegionSpec::Percent { start: o, end: 1.0 },
            (Amount::Fraction(o), Some(Amount::Fraction(s))) => {
                if o + s > 1.0 + 1e-9 {
                    return Err(Failure::usage(
                        "--offset plus --size go past 100% of the target",
                    ));
                }
                RegionSpec::Percent {
                    start: o,
                    end: o + s,
                }
            }
            (Amount::Bytes(0), Some(Amount::Fraction(s))) => {
                RegionSpec::Percent { start: 0.0, end: s }
            }
            _ => {
                return Err(Failure::usage(
                    "--offset and --size must both be bytes or both be percentages",
                ))
            }
        },
    };
    if matches!(size, Some(Amount::Bytes(0)))
        || matches!(size, Some(Amount::Fraction(f)) if f == 0.0)
    {
        return Err(Failure::usage(
            "--size: the region must be more than 0 bytes",
        ));
    }
    Ok(region)
}

/// Refuses fio's on/off switches given anything but 1 or 0.
fn check_switches(a: &BenchArgs) -> Result<(), Failure> {
    for (flag, v) in [
        ("time_based", a.time_based),
        ("group_reporting", a.group_reporting),
        ("norandommap", a.norandommap),
    ] {
        if let Some(v) = v.filter(|&v| v > 1) {
            return Err(Failure::usage(format!("--{flag}={v}: give 1 or 0")));
        }
    }
    Ok(())
}

/// The --runtime, and when the run stops (None when that depends on the region).
fn stop_rule(a: &BenchArgs, time_based: bool) -> Result<(Option<Duration>, Option<Stop>), Failure> {
    if time_based && a.runtime.is_none() {
        return Err(Failure::usage(
            "--time_based needs --runtime: give how long to run, such as --runtime=60",
        ));
    }
    let runtime = a
        .runtime
        .as_deref()
        .map(|r| duration("runtime", r))
        .transpose()?;
    let io_bytes = io_bytes(a)?;
    // As fio: time_based runs for --runtime, going over the region as often as needed;
    // otherwise the run stops after --io_size bytes (or one pass over the region per
    // worker, resolved once the region is), or at --runtime, whichever comes first.
    let stop = match (runtime, io_bytes) {
        (Some(t), _) if time_based => Some(Stop::Time(t)),
        (Some(t), Some(bytes)) => Some(Stop::TimeOrBytes { time: t, bytes }),
        (None, Some(bytes)) => Some(Stop::Bytes(bytes)),
        (_, None) => None,
    };
    Ok((runtime, stop))
}

/// The bytes all workers together move before stopping, from --io-size per worker.
fn io_bytes(a: &BenchArgs) -> Result<Option<u64>, Failure> {
    Ok(match &a.io_size {
        Some(b) => {
            let per_worker =
                units::parse_size(b).map_err(|e| Failure::usage(format!("--io-size: {e}")))?;
            if per_worker == 0 {
                return Err(Failure::usage("--io-size: must be more than 0 bytes"));
            }
            Some(per_worker.saturating_mul(a.numjobs.max(1) as u64))
        }
        None => None,
    })
}

/// Whether the I/O bypasses the page cache, from --direct and --buffered.
fn direct_io(a: &BenchArgs) -> Result<bool, Failure> {
    Ok(match (a.buffered, a.direct) {
        (true, _) => false,
        (false, Some(0)) => false,
        (false, Some(1)) | (false, None) => true,
        (false, Some(v)) => {
            return Err(Failure::usage(format!(
                "--direct={v}: give 1 (O_DIRECT) or 0 (buffered)"
            )))
        }
    })
}

/// The IOPS cap and how I/Os arrive under it, from --rate_iops and --rate_process.
fn rate_limit(a: &BenchArgs) -> Option<RateLimit> {
    a.rate_iops.map(|iops| RateLimit {
        iops,
        arrival: match a.rate_process {
            RateProcess::Linear => Arrival::Linear,
            RateProcess::Poisson => Arrival::Poisson,
        },
    })
}

/// The engine's I/O backend for an --ioengine value.
fn backend_choice(ioengine: IoEngine) -> BackendChoice {
    match ioengine {
        IoEngine::Auto | IoEngine::Libaio => BackendChoice::Auto,
        IoEngine::IoUring => BackendChoice::IoUring,
        IoEngine::Psync => BackendChoice::Psync,
    }
}

/// The engine's CPU placement for a --cpus_allowed_policy value.
fn cpu_policy(policy: CpusAllowedPolicy) -> CpuPolicy {
    match policy {
        CpusAllowedPolicy::Shared => CpuPolicy::Shared,
        CpusAllowedPolicy::Split => CpuPolicy::Split,
    }
}

/// The seed to use instead of the default one, from --seed or --randrepeat=0.
fn seed_override(a: &BenchArgs) -> Result<Option<u64>, Failure> {
    match (a.seed, a.randrepeat) {
        (Some(seed), _) => Ok(Some(seed)),
        (None, Some(0)) => {
            // fio's randrepeat=0: a different sequence each run.
            Ok(Some(
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_nanos() as u64)
                    .unwrap_or(0)
                    ^ u64::from(std::process::id()) << 32,
            ))
        }
        (None, Some(1)) | (None, None) => Ok(None),
        (None, Some(v)) => Err(Failure::usage(format!(
            "--randrepeat={v}: give 1 (repeat the same offsets) or 0 (a new seed each run)"
        ))),
    }
}

/// Refuses a write-only --verify job whose read-back could find blocks never written.
fn refuse_unverifiable_writes(job: &Job, time_based: bool) -> Result<(), Failure> {
    // fio's verify phase reads back what a write-only job wrote: that needs every block
    // written, which a time-based run or independent random offsets do not promise.
    if job.verify() && !job.reads() {
        let unmapped = job.random_pct() > 0 && !job.random_map_applies();
        if time_based || unmapped {
            return Err(Failure::usage(format!(
                "--verify with --rw={} and {}: the read-back after the writes needs each block written once, which {}; \
                 use --rw=randrw --verify instead (each read checks a block the run wrote)",
                job.rw_name(),
                if time_based { "--time_based" } else { "independent random offsets" },
                if time_based {
                    "a time-based run does not promise: drop --time_based (the run stops at --size, or --runtime if sooner)"
                } else {
                    "only fio's random map gives (one --bs, a uniform distribution, all I/O random, no --norandommap)"
                },
            )));
        }
    }
    Ok(())
}

/// Where the workers ran, in a line: "0,1 allowed; worker 0 on 0, worker 1 on 1".
fn cpus_text(allowed: &[usize], workers: &[Option<Vec<usize>>]) -> String {
    let list = |c: &[usize]| {
        c.iter()
            .map(|c| c.to_string())
            .collect::<Vec<_>>()
            .join(",")
    };
    let placed: Vec<String> = workers
        .iter()
        .enumerate()
        .filter_map(|(w, c)| c.as_ref().map(|c| format!("worker {w} on {}", list(c))))
        .collect();
    let how = if placed.is_empty() {
        "workers not confined".to_string()
    } else if placed.len() < workers.len() {
        format!("{} (the others not confined)", placed.join(", "))
    } else {
        placed.join(", ")
    };
    format!("{} allowed; {how}", list(allowed))
}

/// What `bench --output-format json` prints (a contract: later tools read it).
#[derive(Serialize)]
struct BenchReport<'a> {
    driveprobe_version: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<&'a str>,
    target: String,
    target_info: TargetInfo<'a>,
    workload: Workload<'a>,
    /// fio options given that driveprobe carried out another way (empty when none).
    substitutions: Vec<Substitution>,
    /// A write-only --verify job's read-back pass (fio's verify phase); its checks are in
    /// `verify`.
    #[serde(skip_serializing_if = "Option::is_none")]
    verify_read_back: Option<&'a ReadBack>,
    #[serde(flatten)]
    result: &'a RunResult,
    /// Each direction's full latency histogram, as a result document's rounds keep them
    /// (`protocol::hist`, docs/decisions/0010; absent for a direction with no I/O): any
    /// percentile can be read later, and runs merged with `report --merge`.
    #[serde(skip_serializing_if = "Option::is_none")]
    read_lat_hist: Option<LatencyHist>,
    #[serde(skip_serializing_if = "Option::is_none")]
    write_lat_hist: Option<LatencyHist>,
    #[serde(skip_serializing_if = "Option::is_none")]
    trim_lat_hist: Option<LatencyHist>,
}

/// The histogram bench's JSON keeps of one direction (none when it did no I/O), to
/// `digits` significant digits when given.
fn kept_hist(d: &engine::DirStats, digits: Option<u8>) -> Result<Option<LatencyHist>, Failure> {
    if d.ops == 0 {
        return Ok(None);
    }
    let h = LatencyHist::from_histogram(d.histogram());
    match digits {
        Some(n) => h.coarsen(n).map(Some).map_err(Failure::runtime),
        None => Ok(Some(h)),
    }
}

/// The read-back pass after a write-only --verify job.
#[derive(Debug, Serialize)]
struct ReadBack {
    /// Whether the writes covered the region, so that it was read back.
    done: bool,
    bytes: u64,
    runtime_seconds: f64,
    /// Why there was no read-back, when there was none.
    #[serde(skip_serializing_if = "Option::is_none")]
    skipped: Option<String>,
}

/// fio's verify phase: after a write-only --verify job that wrote each block of every
/// worker's part, one sequential pass reads it all back and checks every header (the
/// result's `verify` then holds these checks). A write pass that ended early (at
/// --runtime, a signal or errors) is not read back: blocks it never wrote would be
/// reported as mismatches, so the run says why instead, and checks nothing.
fn read_back(
    job: &Job,
    target: &Target,
    control: &RunControl,
    result: &mut RunResult,
) -> Result<Option<ReadBack>, Failure> {
    let workers = job.workers() as u64;
    let align = target.align().max(job.sizes().min() as u64);
    let part = result.region.len / workers / align * align;
    let covered = part * workers;
    if result.stopped_early.is_some() || result.write.bytes < covered {
        return Ok(Some(ReadBack {
            done: false,
            bytes: 0,
            runtime_seconds: 0.0,
            skipped: Some(format!(
                "the writes ended after {} of the {} to cover, so nothing was read back",
                format_size(result.write.bytes),
                format_size(covered)
            )),
        }));
    }
    let mut spec = job.to_spec();
    spec.read_pct = 100;
    spec.pattern = Pattern::Sequential;
    spec.random_pct = Some(0);
    spec.stop = Stop::Bytes(covered);
    spec.ramp = Duration::ZERO;
    spec.rate = None;
    let read_job = spec.validate().map_err(Failure::usage)?;
    let r = engine::run(&read_job, target, control, &mut |_| {}).map_err(Failure::runtime)?;
    result.verify = r.verify;
    result.errors.count += r.errors.count;
    result.errors.first.extend(r.errors.first);
    Ok(Some(ReadBack {
        done: true,
        bytes: r.read.bytes,
        runtime_seconds: r.runtime_seconds,
        skipped: None,
    }))
}

/// The job as run, with fio's `rw` name for its pattern and read share.
#[derive(Serialize)]
struct Workload<'a> {
    rw: &'static str,
    #[serde(flatten)]
    job: &'a Job,
}

/// An option given in fio's terms that ran another way: what was asked, what ran, why.
#[derive(Debug, Serialize)]
pub(super) struct Substitution {
    pub option: &'static str,
    pub given: String,
    pub used: String,
    pub why: String,
}

/// The substitutions a run made, known once the engine has said which backend ran.
fn substitutions(a: &BenchArgs, r: &RunResult, job: &Job) -> Vec<Substitution> {
    // Why the engine fell back ("io_uring unavailable: ..."), without the depth remark.
    let reason = |r: &RunResult| {
        r.engine_note
            .as_deref()
            .and_then(|n| n.split("; ").next())
            .unwrap_or("no reason given")
            .to_string()
    };
    let mut out = Vec::new();
    if a.ioengine == IoEngine::Libaio {
        let buffered = if job.direct() {
            ""
        } else {
            " (fio's libaio without O_DIRECT blocks in each submission, so fio would have measured less concurrency)"
        };
        let (used, why) = match r.engine {
            engine::Backend::IoUring => (
                "io_uring".to_string(),
                format!("driveprobe has no libaio engine; io_uring is the kernel's other asynchronous interface and keeps the same queue depth per worker{buffered}"),
            ),
            engine::Backend::Psync if job.depth() > 1 => (
                "psync at queue depth 1".to_string(),
                format!(
                    "driveprobe has no libaio engine and io_uring is unavailable here ({}); psync does one I/O at a time per worker, so the queue depth was 1 per worker, not {}",
                    reason(r),
                    job.depth()
                ),
            ),
            engine::Backend::Psync => (
                "psync".to_string(),
                format!(
                    "driveprobe has no libaio engine and io_uring is unavailable here ({}); at queue depth 1, psync issues the same I/O one at a time",
                    r.engine_note.as_deref().unwrap_or("no reason given")
                ),
            ),
        };
        out.push(Substitution {
            option: "ioengine",
            given: "libaio".into(),
            used,
            why,
        });
    }
    if a.norandommap != Some(1)
        && job.random_pct() > 0
        && !job.random_map_applies()
        && !matches!(job.stop(), Stop::Time(_))
    {
        out.push(Substitution {
            option: "norandommap",
            given: "0".into(),
            used: "independent random offsets".into(),
            why: "driveprobe's random map covers one --bs with a uniform distribution and only random I/O; this job's offsets are drawn independently, so one pass by size leaves about a third of the blocks untouched".into(),
        });
    }
    if let Some(kind) = a
        .verify
        .as_deref()
        .filter(|v| !matches!(*v, "0" | "1" | "none" | "driveprobe"))
    {
        out.push(Substitution {
            option: "verify",
            given: kind.to_string(),
            used: "driveprobe".into(),
            why: "driveprobe checks its own block header (offset, sequence number, xxh3 checksum) whatever the kind asked".into(),
        });
    }
    out
}

#[derive(Serialize)]
struct TargetInfo<'a> {
    #[serde(flatten)]
    kind: &'a TargetKind,
    size_bytes: u64,
    direct: bool,
    writable: bool,
    alignment_bytes: u64,
}

/// The target path, created when missing and its size is known, then opened through the
/// one gate for writes: read-only unless `writes`, and then only with a permit.
pub(super) fn prepare_target(
    a: &BenchArgs,
    size: Option<Amount>,
    offset: Option<Amount>,
    writes: bool,
    direct: bool,
) -> Result<Target, Failure> {
    let path = a
        .target
        .clone()
        .or_else(|| a.filename.clone())
        .ok_or_else(|| Failure::usage("give a target: a file or block device"))?;
    // A missing file target is created when its size is known.
    let exists = std::fs::symlink_metadata(&path).is_ok();
    if !exists {
        let total = match (size, offset) {
            (Some(Amount::Bytes(s)), None) => s,
            (Some(Amount::Bytes(s)), Some(Amount::Bytes(o))) => {
                s.checked_add(o).ok_or_else(|| {
                    Failure::usage("--size plus --offset is more bytes than a file can hold")
                })?
            }
            (Some(_), _) | (None, Some(_)) => {
                return Err(Failure::usage(format!(
                "{}: does not exist: give --size in bytes (not %) to create a file of that size",
                path.display()
            )))
            }
            (None, None) => {
                return Err(Failure::runtime(target::TargetError::NotFound(
                    path.clone(),
                )))
            }
        };
        if !a.output_format_is_json() {
            eprintln!(
                "driveprobe: creating {} ({}) and filling it with random data",
                path.display(),
                format_size(total)
            );
        }
        target::create_file_if_missing(&path, total).map_err(Failure::runtime)?;
    }

    // The one gate for writes.
    let meta = std::fs::metadata(&path)
        .map_err(|_| Failure::runtime(target::TargetError::NotFound(path.clone())))?;
    let permit = if writes {
        if std::os::unix::fs::FileTypeExt::is_block_device(&meta.file_type()) {
            let info = device::inspect(&path).map_err(Failure::runtime)?;
            let req = WriteRequest {
                allow_destructive: a.allow_destructive,
                expect_serial: a.expect_serial.clone(),
                expect_wwn: a.expect_wwn.clone(),
            };
            Some(safety::authorize_block_writes(&info, &req).map_err(Failure::runtime)?)
        } else {
            // A file driveprobe did not create is the user's data: --allow-destructive,
            // as for a device.
            Some(
                safety::authorize_file_writes(&path, a.allow_destructive)
                    .map_err(Failure::runtime)?,
            )
        }
    } else {
        None
    };
    Target::open(&path, direct, permit.as_ref()).map_err(Failure::runtime)
}

/// Stops the run on SIGINT and SIGTERM (the result is still written).
pub(super) fn stop_on_signals() -> RunControl {
    let control = RunControl::new();
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        let _ = signal_hook::flag::register(sig, control.flag());
    }
    control
}

pub fn run(a: BenchArgs) -> Result<u8, Failure> {
    if a.list_suites {
        super::out(&super::suite::list())?;
        return Ok(0);
    }
    if a.suite.is_some() || a.fio_job.is_some() {
        return super::suite::run(&a);
    }
    let (job, size, offset) = build_job(&a)?;
    let target = prepare_target(&a, size, offset, job.writes(), job.direct())?;
    let path = target.path().to_path_buf();

    // Without time_based or --io-size: one pass over the region per worker (as fio
    // does), or --runtime if that comes first.
    let job = if a.time_based != Some(1) && a.io_size.is_none() {
        let region = job.resolve_on(&target).map_err(Failure::runtime)?;
        let bytes = region.len * job.workers() as u64;
        let mut spec = job.to_spec();
        spec.stop = match job.stop() {
            Stop::Time(time) | Stop::TimeOrBytes { time, .. } => Stop::TimeOrBytes { time, bytes },
            Stop::Bytes(_) => Stop::Bytes(bytes),
        };
        spec.validate().map_err(Failure::usage)?
    } else {
        job
    };

    let control = stop_on_signals();
    let progress = Progress::new(&job);
    let mut on_interval = |i: &IntervalSummary| progress.update(i);
    let result = engine::run(&job, &target, &control, &mut on_interval);
    progress.finish();
    let mut result = result.map_err(Failure::runtime)?;
    let read_back = if job.verify() && !job.reads() {
        read_back(&job, &target, &control, &mut result)?
    } else {
        None
    };

    let report = BenchReport {
        driveprobe_version: env!("CARGO_PKG_VERSION"),
        name: a.name.as_deref(),
        target: path.display().to_string(),
        target_info: TargetInfo {
            kind: target.kind(),
            size_bytes: target.size(),
            direct: target.direct(),
            writable: target.writable(),
            alignment_bytes: target.align(),
        },
        workload: Workload {
            rw: job.rw_name(),
            job: &job,
        },
        substitutions: substitutions(&a, &result, &job),
        verify_read_back: read_back.as_ref(),
        result: &result,
        read_lat_hist: kept_hist(&result.read_stats, a.hist_digits)?,
        write_lat_hist: kept_hist(&result.write_stats, a.hist_digits)?,
        trim_lat_hist: kept_hist(&result.trim_stats, a.hist_digits)?,
    };
    super::emit(
        &report,
        a.output.as_deref(),
        a.output_format == OutputFormat::Json,
        || {
            text_report(
                &target,
                &job,
                &result,
                a.name.as_deref(),
                &report.substitutions,
                read_back.as_ref(),
            )
        },
    )?;
    let clean = result.errors.count == 0 && result.verify.mismatches == 0;
    if !clean {
        eprintln!(
            "driveprobe: the run saw {} and {}: see the result",
            units::count(result.errors.count, "I/O error", "I/O errors"),
            units::count(
                result.verify.mismatches,
                "verify mismatch",
                "verify mismatches"
            )
        );
    }
    // A verify run that checked nothing proved nothing: not a success.
    if job.verify() && result.verify.checked == 0 {
        eprintln!(
            "driveprobe: --verify checked no block (no read landed on a block the run had written): give a longer run or a smaller region"
        );
        return Ok(1);
    }
    Ok(if clean { 0 } else { 1 })
}

impl BenchArgs {
    fn output_format_is_json(&self) -> bool {
        self.output_format == OutputFormat::Json
    }
}

/// A progress bar on stderr, drawn only when stderr is a terminal.
struct Progress {
    bar: Option<indicatif::ProgressBar>,
}

impl Progress {
    fn new(job: &Job) -> Self {
        if !std::io::stderr().is_terminal() {
            return Progress { bar: None };
        }
        let (len, style) = match job.stop() {
            Stop::Time(d) => (
                d.as_secs_f64().ceil() as u64,
                "{spinner} [{bar:30}] {pos}/{len}s {msg}",
            ),
            Stop::Bytes(b) | Stop::TimeOrBytes { bytes: b, .. } => {
                (b, "{spinner} [{bar:30}] {bytes}/{total_bytes} {msg}")
            }
        };
        let bar = indicatif::ProgressBar::with_draw_target(
            Some(len),
            indicatif::ProgressDrawTarget::stderr(),
        );
        if let Ok(s) = indicatif::ProgressStyle::with_template(style) {
            bar.set_style(s.progress_chars("=> "));
        }
        bar.set_message(if job.ramp().is_zero() {
            "starting".to_string()
        } else {
            format!("ramping {:.0}s", job.ramp().as_secs_f64())
        });
        bar.enable_steady_tick(Duration::from_millis(200));
        Progress { bar: Some(bar) }
    }

    fn update(&self, i: &IntervalSummary) {
        let Some(bar) = &self.bar else { return };
        let iops = i.read.iops + i.write.iops + i.trim.iops;
        let bytes = i.read.bytes + i.write.bytes + i.trim.bytes;
        let p99 = i.read.lat_ns.p99.max(i.write.lat_ns.p99);
        if matches!(bar.length(), Some(l) if l > 1_000_000) {
            bar.inc(bytes);
        } else {
            bar.set_position(i.end_seconds.floor() as u64);
        }
        bar.set_message(format!(
            "{} IOPS, {}/s, p99 {}",
            human_count(iops),
            human_bytes(i.read.bw_bytes + i.write.bw_bytes),
            human_ns(p99 as f64)
        ));
    }

    fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

fn human_count(v: f64) -> String {
    if v >= 1e6 {
        format!("{:.2}M", v / 1e6)
    } else if v >= 1e3 {
        format!("{:.1}k", v / 1e3)
    } else {
        format!("{v:.0}")
    }
}

fn human_bytes(v: f64) -> String {
    const U: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = v;
    let mut i = 0;
    while v >= 1024.0 && i + 1 < U.len() {
        v /= 1024.0;
        i += 1;
    }
    format!("{v:.1}{}", U[i])
}

fn human_ns(ns: f64) -> String {
    if ns >= 1e9 {
        format!("{:.2}s", ns / 1e9)
    } else if ns >= 1e6 {
        format!("{:.2}ms", ns / 1e6)
    } else if ns >= 1e3 {
        format!("{:.1}us", ns / 1e3)
    } else {
        format!("{ns:.0}ns")
    }
}

fn dir_text(out: &mut String, name: &str, d: &DirSummary, secs: f64) {
    use std::fmt::Write as _;
    if d.ops == 0 {
        return;
    }
    let _ = writeln!(
        out,
        "  {name}: IOPS={}, BW={}/s ({} in {:.1}s, {} I/Os)",
        human_count(d.iops),
        human_bytes(d.bw_bytes),
        human_bytes(d.bytes as f64),
        secs,
        d.ops
    );
    let l = &d.lat_ns;
    let _ = writeln!(
        out,
        "    lat: min={} avg={} stdev={} max={}",
        human_ns(l.min as f64),
        human_ns(l.mean),
        human_ns(l.stddev),
        human_ns(l.max as f64)
    );
    let pct: Vec<String> = l
        .percentiles
        .iter()
        .map(|(k, v)| format!("{}={}", k.replace('_', "."), human_ns(*v as f64)))
        .collect();
    let _ = writeln!(out, "    percentiles: {}", pct.join(" "));
}

fn text_report(
    target: &Target,
    job: &Job,
    r: &RunResult,
    name: Option<&str>,
    subs: &[Substitution],
    read_back: Option<&ReadBack>,
) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{}: rw={} bs={} iodepth={} numjobs={}{}{} on {}",
        name.unwrap_or("driveprobe bench"),
        job.rw_name(),
        job.sizes(),
        job.depth(),
        job.workers(),
        if job.read_pct() > 0 && job.read_pct() < 100 {
            format!(" rwmixread={}", job.read_pct())
        } else {
            String::new()
        },
        job.rate()
            .map(|r| format!(" rate_iops={}", r.iops))
            .unwrap_or_default(),
        target.describe()
    );
    let _ = writeln!(
        out,
        "  engine: {}{}",
        r.engine.name(),
        r.engine_note
            .as_deref()
            .map(|n| format!(" ({n})"))
            .unwrap_or_default()
    );
    for s in subs {
        let _ = writeln!(
            out,
            "  substituted: --{}={} ran as {} ({})",
            s.option, s.given, s.used, s.why
        );
    }
    let _ = writeln!(
        out,
        "  cpus: {}",
        cpus_text(&r.cpus_allowed, &r.worker_cpus)
    );
    dir_text(&mut out, "read", &r.read, r.runtime_seconds);
    dir_text(&mut out, "write", &r.write, r.runtime_seconds);
    if r.trim.ops > 0 {
        dir_text(&mut out, "trim", &r.trim, r.runtime_seconds);
    }
    if (r.read.ops > 0) as u8 + (r.write.ops > 0) as u8 + (r.trim.ops > 0) as u8 > 1 {
        dir_text(&mut out, "total", &r.total, r.runtime_seconds);
    }
    if job.verify() {
        let _ = writeln!(
            out,
            "  verify: {} checked, {}{}",
            units::count(r.verify.checked, "block", "blocks"),
            units::count(r.verify.mismatches, "mismatch", "mismatches"),
            match read_back {
                Some(ReadBack {
                    done: true,
                    bytes,
                    runtime_seconds,
                    ..
                }) => format!(
                    " (read back after the writes: {} in {runtime_seconds:.1}s)",
                    human_bytes(*bytes as f64)
                ),
                Some(ReadBack {
                    skipped: Some(why), ..
                }) => format!(" ({why})"),
                _ => String::new(),
            }
        );
        if r.verify.mismatches > 0
            && r.verify.mismatches == r.verify.checked
            && r.verify
                .first
                .iter()
                .all(|m| m.kind == crate::engine::verify::MismatchKind::NoHeader)
        {
            let _ = writeln!(
                out,
                "    no block read had a driveprobe verify header: was this region written by a --verify run?"
            );
        }
        for m in &r.verify.first {
            let _ = writeln!(
                out,
                "    mismatch at offset {} ({:?}, expected seq {}, found {})",
                m.offset, m.kind, m.expected_seq, m.found_seq
            );
        }
    }
    if r.errors.count > 0 {
        let _ = writeln!(
            out,
            "  errors: {}",
            units::count(r.errors.count, "I/O error", "I/O errors")
        );
        for e in &r.errors.first {
            let _ = writeln!(
                out,
                "    {} of {} bytes at offset {}: {}",
                e.op, e.len, e.offset, e.message
            );
        }
    }
    if let Some(s) = &r.stopped_early {
        let _ = writeln!(out, "  stopped early: {s}");
    }
    out
}
