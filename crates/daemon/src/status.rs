//! What the daemon knows right now, as plain data: the one thing the exporters (`metrics`,
//! `http`) read, and the daemon's workers (canaries, health polling, scheduler) write.
//!
//! Everything here is computed by the writers (window quantiles included), so a reader
//! only copies numbers out: a scrape never does I/O, never waits on a drive, and a failing
//! drive can only change its own entry. [`Shared`] holds the status behind one mutex,
//! held for microseconds by writers and for one encoding pass by a scrape.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};

use serde::Serialize;

use crate::health::endurance::Endurance;
use crate::health::model::{HealthReport, Identity, Verdict};
use crate::load::DriveLoad;
use crate::schedule::RunRecord;

/// Upper bounds (seconds) of the classic latency histogram buckets of the probes: a
/// 1-2.5-5 series from 10 us to 10 s (plus `+Inf`). Fine enough to read p99.9 of a drive
/// from `histogram_quantile` to within the bucket's factor, coarse enough to stay under
/// the series budget per drive; the exact quantiles are the `_quantile_seconds` gauges.
pub const LATENCY_BUCKETS: [f64; 19] = [
    10e-6, 25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3,
    250e-3, 500e-3, 1.0, 2.5, 5.0, 10.0,
];

/// The quantiles kept over each probe's sliding window, with their label values.
pub const WINDOW_QUANTILES: [(&str, f64); 4] = [
    ("0.5", 50.0),
    ("0.9", 90.0),
    ("0.99", 99.0),
    ("0.999", 99.9),
];

/// The name of the health collector (`driveprobe_collector_success{collector="health"}`).
pub const HEALTH_COLLECTOR: &str = "health";

/// The daemon's whole status. Drives are keyed by their name (the `drive` label).
#[derive(Debug, Clone, Default, Serialize)]
pub struct Status {
    /// Unix seconds when the process started.
    pub started_unix: f64,
    pub config: ConfigStatus,
    pub drives: BTreeMap<String, DriveStatus>,
    /// The run results index (oldest first), as kept in the state file.
    pub runs: Vec<RunRecord>,
    /// What the index's status does not say, by run id: "result pending: not saved:
    /// REASON" for a run whose result document could not be written yet.
    pub run_notes: BTreeMap<String, String>,
    /// Drives by the name of the probe or schedule that runs on them now, for the status page.
    pub scheduler: SchedulerStatus,
    /// What discovery found; None while it is off.
    pub discovery: Option<DiscoveryStatus>,
    /// The state directory: what is wrong with it, when something is.
    pub state: StateStatus,
    /// Threads the daemon could not start (a limit on tasks reached), retried.
    pub threads: ThreadsStatus,
}

/// The state directory as the daemon found it at start.
#[derive(Debug, Clone, Default, Serialize)]
pub struct StateStatus {
    pub dir: std::path::PathBuf,
    /// Why users other than driveprobe's may write to it, when they may.
    pub insecure: Option<String>,
    /// The state file was damaged or missing and its copy was used: what happened.
    pub recovered: Option<String>,
    /// Neither copy of the state could be read: why scheduled runs and write canaries
    /// are held.
    pub ledger_held: Option<String>,
}

/// Threads the daemon needs and could not start: the process's or its unit's limit on
/// tasks (`RLIMIT_NPROC`, the cgroup's `pids.max`, systemd's `TasksMax=`) was reached.
/// Each is retried every tick of the control loop; until it starts, every surface says
/// what is missing (`/healthz` 503, `driveprobe_threads_unstarted`, the status page, the
/// drive's probe or health state in `/api/v1/drives`, the log).
#[derive(Debug, Clone, Default, Serialize)]
pub struct ThreadsStatus {
    /// Attempts to start a thread that failed, since the process started.
    pub start_failures_total: u64,
    /// What has no thread now, by what it is (`scheduler`, `health polling`,
    /// `canary rd on drive a`...): the last error.
    pub unstarted: BTreeMap<String, String>,
}

impl ThreadsStatus {
    /// The one line `/healthz` and the status page give while something has no thread.
    pub fn summary(&self) -> Option<String> {
        let (first, err) = self.unstarted.iter().next()?;
        let more = match self.unstarted.len() - 1 {
            0 => String::new(),
            n => format!(" and {n} more"),
        };
        Some(format!(
            "cannot start the threads of {first}{more}: {err} (the limit on tasks, TasksMax= or ulimit -u, is reached?); retried every few seconds"
        ))
    }
}

/// Discovery's last scan.
#[derive(Debug, Clone, Default, Serialize)]
pub struct DiscoveryStatus {
    /// Drives watched (listed and discovered) and block devices skipped, last scan.
    pub watched: usize,
    /// What `driveprobe discover` lists as skipped: the scan's skips and the merge's
    /// (a disk already matched to a listed drive, a label taken), the same count after
    /// a scan and after its merge.
    pub skipped: usize,
    /// Of `skipped`, the merge's: added to each later scan's own until the next merge.
    #[serde(skip)]
    pub merge_skipped: usize,
    pub scans_total: u64,
    /// Unix seconds of the last scan.
    pub last_scan_unix: f64,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct ConfigStatus {
    /// The config file, or None for the built-in config.
    pub path: Option<PathBuf>,
    pub last_reload_successful: bool,
    /// Unix seconds of the last load attempt that succeeded.
    pub last_reload_success_unix: f64,
    /// Why the last reload was refused, if it was.
    pub last_error: Option<String>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct SchedulerStatus {
    /// Unix seconds of the scheduler's last pass.
    pub last_tick_unix: f64,
    /// Next due time (unix seconds) per schedule name, when one is known.
    pub next_due: BTreeMap<String, i64>,
    /// Per schedule name, the run going now (its id).
    pub running: BTreeMap<String, String>,
    /// Per schedule name, why a schedule does not start what `next_due` says: a due run
    /// waiting for its drive (a self-test or another run holds it), or a due time
    /// already handled ahead of a wall clock that stepped back.
    pub held: BTreeMap<String, HeldStatus>,
    /// Steps of the wall clock the scheduler saw.
    pub clock: ClockStatus,
}

/// Why a schedule is held, and since when.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct HeldStatus {
    /// `selftest` (the drive is testing itself), `run` (another run holds the drive) or
    /// `clock` (the wall clock stepped back behind a due time already handled).
    pub reason: String,
    /// One line saying what holds it and what happens next.
    pub message: String,
    /// The due time waiting (for `clock`: the due time already handled), Unix seconds.
    pub due_unix: i64,
    /// Unix seconds of the first pass that saw the hold.
    pub since_unix: f64,
}

/// What the scheduler saw of the wall clock (see `daemon::clock`).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ClockStatus {
    /// Steps seen since the daemon started: the wall clock moved by 2 s or more against
    /// the monotonic clock between two passes.
    pub steps_total: u64,
    /// The last step, in seconds (negative: back); 0 before any.
    pub last_step_seconds: f64,
    /// Unix seconds (after the step) at which it was seen; 0 before any.
    pub last_step_unix: f64,
    /// Schedules whose saved times were brought back from ahead of the wall clock.
    pub clamped_total: u64,
}

/// One registered drive.
#[derive(Debug, Clone, Default, Serialize)]
pub struct DriveStatus {
    pub name: String,
    /// The config's `health_detail_metrics = false`: only the headline health series are
    /// exported (the JSON keeps everything).
    #[serde(skip)]
    pub health_detail_metrics_off: bool,
    /// The identity matched and the device (or file target) is there: probes may run.
    pub up: bool,
    /// Why the drive is not up (absent, identity mismatch...), in one line.
    pub down_reason: Option<String>,
    /// The whole-disk block device the drive is today, when known.
    pub device: Option<PathBuf>,
    /// What probes run on: the file target, or the raw device.
    pub target: Option<PathBuf>,
    /// Model, serial, firmware, transport, capacity (from the health reader or sysfs).
    pub identity: Identity,
    /// The last health reading that succeeded (kept while later reads fail).
    pub health: Option<HealthStatus>,
    /// Where health reading stands now: what the status page, /api/v1/drives and the
    /// `driveprobe_health_state` gauges all say.
    pub health_state: HealthState,
    pub endurance: Option<Endurance>,
    /// Per collector name (`identity`, `health`, `canary`, `run`...).
    pub collectors: BTreeMap<String, CollectorStatus>,
    /// Per probe name.
    pub probes: BTreeMap<String, ProbeStatus>,
    pub wear: WearStatus,
    /// The last finished run of each suite on this drive, by suite name.
    pub last_runs: BTreeMap<String, RunSummary>,
    /// Scheduled runs skipped up front, by schedule name (the config's `[[schedule]]` name).
    pub skipped: BTreeMap<String, SkipStatus>,
    /// What discovery knows of the drive (class, transport, kernel name, source); None
    /// for a listed drive discovery did not match.
    pub discovered: Option<crate::config::Discovered>,
    /// The disk's load by others than the canaries (`/proc/diskstats`); None until the
    /// drive's disk is first known (never for a file target on tmpfs). While the drive is
    /// down the counters stay as they were.
    pub load: Option<DriveLoad>,
    /// The drive's own self-tests: one running now (ours or another's) and the last of
    /// each kind the daemon's `[[selftest]]` schedules ran.
    pub self_test: SelfTestStatus,
}

impl DriveStatus {
    /// The canaries' completed I/Os and their time, over every probe of the drive.
    fn canary_totals(&self) -> (u64, f64) {
        self.probes
            .values()
            .flat_map(|p| [&p.read, &p.write])
            .fold((0, 0.0), |(n, t), o| {
                (n + o.ops_total, t + o.latency_sum_seconds)
            })
    }

    /// Takes a sample of the drive's disk (`device`, a kernel name) into its load, less
    /// what its canaries did ([`DriveLoad::sample`]).
    pub fn sample_load(&mut self, device: &str, disk: crate::load::DiskCounters) {
        let (ios, busy) = self.canary_totals();
        self.load
            .get_or_insert_with(DriveLoad::default)
            .sample(device, disk, ios, busy);
    }
}

/// Self-tests of one drive (issue 20).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SelfTestStatus {
    /// A self-test running now; null when none is known to run.
    pub running: Option<SelfTestRunning>,
    /// The last self-test a `[[selftest]]` schedule ran, by kind (`short`, `extended`).
    pub last: BTreeMap<String, SelfTestOutcome>,
}

/// A self-test running on the drive now.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SelfTestRunning {
    /// `short`, `extended`, or `unknown` (a test the drive runs without saying its kind).
    pub kind: String,
    /// The `[[selftest]]` that started it; null for a test this daemon did not start
    /// (seen in a health reading).
    pub schedule: Option<String>,
    /// When the daemon started it; null for a test it did not start.
    pub started_unix: Option<f64>,
    /// The share done, 0 to 1, as the drive last said; null when it does not say.
    pub done_ratio: Option<f64>,
    /// When the drive last said how far it is.
    pub updated_unix: f64,
}

/// How a scheduled self-test ended.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SelfTestOutcome {
    pub schedule: String,
    /// `passed`, `failed` (the drive's log says so), `aborted` (by the drive, or by the
    /// daemon at stop), `interrupted`, `timed_out` (past `max_duration`), `refused` (the
    /// drive or smartctl would not start it), `unknown` (it ended and the log says nothing).
    pub result: String,
    /// One line: the drive's words for the result, or why it did not start or end.
    pub message: String,
    pub started_unix: f64,
    pub ended_unix: f64,
    /// A failed test's first failing LBA, when the drive says.
    pub first_failing_lba: Option<u64>,
}

impl SelfTestOutcome {
    /// Every result, in the order of the `result` label values.
    pub const RESULTS: [&'static str; 7] = [
        "passed",
        "failed",
        "aborted",
        "interrupted",
        "timed_out",
        "refused",
        "unknown",
    ];
}

/// Where health reading of one drive stands. Set by the drive's health thread only.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum HealthState {
    /// No attempt yet (the daemon just started, or the drive has been down since).
    #[default]
    NotReadYet,
    /// There is no drive to read: a file target on a filesystem with no block device
    /// under it (tmpfs, overlay...).
    NotApplicable { reason: String },
    /// The latest attempts failed (`attempts` in a row since `since_unix`); the last
    /// reading that succeeded, if any, stays in `DriveStatus::health`.
    Failed {
        reason: String,
        attempts: u64,
        since_unix: f64,
    },
    /// The latest attempt succeeded; the reading shown is of `read_unix`.
    Read { read_unix: f64 },
}

impl HealthState {
    /// Every state's name, in the order of the `state` label values.
    pub const NAMES: [&'static str; 4] = ["not_applicable", "not_read_yet", "failed", "read"];

    /// The `state` label value (and the JSON `kind`).
    pub fn name(&self) -> &'static str {
        match self {
            HealthState::NotApplicable { .. } => "not_applicable",
            HealthState::NotReadYet => "not_read_yet",
            HealthState::Failed { .. } => "failed",
            HealthState::Read { .. } => "read",
        }
    }

    /// One attempt failed, for `reason`: counts it into a failure that goes on.
    pub fn failed(&self, reason: String, now: f64) -> HealthState {
        match self {
            HealthState::Failed {
                attempts,
                since_unix,
                ..
            } => HealthState::Failed {
                reason,
                attempts: attempts + 1,
                since_unix: *since_unix,
            },
            _ => HealthState::Failed {
                reason,
                attempts: 1,
                since_unix: now,
            },
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct HealthStatus {
    pub report: HealthReport,
    pub verdict: Verdict,
    pub reasons: Vec<String>,
    /// Unix seconds of the reading.
    pub read_unix: f64,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct CollectorStatus {
    pub success: bool,
    pub duration_seconds: f64,
    /// Unix seconds of the last attempt.
    pub last_unix: f64,
    pub error: Option<String>,
}

/// Where one canary probe stands. Set by the probe's own thread where the transition
/// happens (and by nothing else), so every surface that renders it agrees.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ProbeState {
    /// The thread has not decided yet (the daemon or the drive just started).
    #[default]
    Starting,
    /// Issuing I/O to the drive.
    Running,
    /// Held on purpose: a scheduled run holds the drive, (a probe that writes) the
    /// drive's wear budget is spent, or (a rotational disk) the disk is in standby and the
    /// canary does not wake it (`daemon::standby`).
    Paused { reason: String },
    /// The drive is absent or another drive is at its path.
    DriveDown { reason: String },
    /// It cannot run: its target cannot be opened, or its run failed. Retried.
    Failing { reason: String },
    /// The daemon (or this drive's threads) stopped it.
    Stopped,
}

impl ProbeState {
    /// Every state's name, in the order of the `state` label values.
    pub const NAMES: [&'static str; 6] = [
        "starting",
        "running",
        "paused",
        "drive_down",
        "failing",
        "stopped",
    ];

    /// The `state` label value (and the JSON `kind`).
    pub fn name(&self) -> &'static str {
        match self {
            ProbeState::Starting => "starting",
            ProbeState::Running => "running",
            ProbeState::Paused { .. } => "paused",
            ProbeState::DriveDown { .. } => "drive_down",
            ProbeState::Failing { .. } => "failing",
            ProbeState::Stopped => "stopped",
        }
    }

    pub fn reason(&self) -> Option<&str> {
        match self {
            ProbeState::Paused { reason }
            | ProbeState::DriveDown { reason }
            | ProbeState::Failing { reason } => Some(reason),
            _ => None,
        }
    }

    pub fn is_running(&self) -> bool {
        *self == ProbeState::Running
    }

    pub fn is_paused(&self) -> bool {
        matches!(self, ProbeState::Paused { .. })
    }
}

/// One canary probe on one drive.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ProbeStatus {
    /// The probe writes (verified writes on a file target, or a destructive raw drive).
    pub writes: bool,
    /// Length of the sliding window of the quantiles, in seconds.
    pub window_seconds: f64,
    /// The rate the canary is set to (I/Os per second), when it has one.
    pub rate_iops: Option<f64>,
    /// Where the probe stands: the one state every surface renders.
    pub state: ProbeState,
    pub read: OpStatus,
    pub write: OpStatus,
    /// How long the probe's threads waited for a CPU (the host's part of its latency).
    pub cpu_wait: CpuWait,
    /// The host's stall per I/O over the window (how late each I/O was issued against its
    /// due time, plus the thread's wait for a CPU while it was in flight), beside the
    /// drive's service time in `read` and `write`. None before the first I/O of a window,
    /// and for a probe the engine runs (a verified write probe, a deeper queue).
    pub host_stall: Option<WindowQuantiles>,
}

/// An interval whose share spent waiting for a CPU is below this does not make the
/// host busy, whatever the latency it is compared with.
///
/// Why 2%: a canary is a rate-limited QD1 thread that sleeps between I/Os, and its latency
/// is counted from when each I/O was meant to start, so every millisecond it waits
/// runnable lands in some I/O's latency. 2% of a 1 s interval is 20 ms of waiting: a
/// hundred times an SSD's read, several HDD seeks. Measured on a 2-CPU VM: a canary alone
/// (other compiles running) waits 0.3-0.4% of its time; beside two CPU-bound threads on
/// its CPU, about 3% (canary::tests::a_cpu_hog_on_the_canary_s_cpu_raises_its_cpu_wait).
/// This floor alone is not the attribution (it sits too close to the crowded figure, and
/// one busy interval says nothing of a p99): see [`CPU_WAIT_HOST_SHARE_OF_P99`].
pub const CPU_WAIT_HOST_BUSY_RATIO: f64 = 0.02;

/// The host is named as the cause of a probe's latency figures when the CPU wait per
/// I/O, in the window's intervals that hold its slowest 1% of I/Os, is at least this
/// share of the p99 latency it is to explain.
///
/// Why this test: the sentence explains the p99 shown beside it, so the CPU wait is
/// compared with that figure, not with a fixed share of an interval. Every millisecond
/// a canary waits runnable lands in the latency of the I/Os of that interval, so an
/// interval's wait divided by its I/Os is the CPU's mean part of each of their
/// latencies. Ranking the intervals by that figure and taking the top ones until they
/// hold 1% of the window's I/Os gives the most the CPU can have added to the I/Os at the
/// p99 (as a mean over their intervals). One brief burst of waiting in a window of
/// thousands of I/Os holds fewer than 1% of them and cannot move the p99, and a
/// sustained wait of a few hundred microseconds per I/O beside an HDD's 30 ms p99 does
/// not explain it either: neither names the host. Why a quarter: a smaller part leaves
/// the figure mostly the drive's; from a quarter on, reading the p99 as the drive's
/// alone would mislead.
pub const CPU_WAIT_HOST_SHARE_OF_P99: f64 = 0.25;

/// The time a probe's threads spent runnable but waiting for a CPU
/// (`/proc/thread-self/schedstat`, the engine's `run_delay_seconds`).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct CpuWait {
    /// Since the daemon started, summed over the probe's threads.
    pub seconds_total: f64,
    /// The highest share of an interval's thread time spent waiting, over the intervals
    /// in the latency window (0-1). None before any interval in the window.
    pub window_max_ratio: Option<f64>,
    /// The CPU wait per I/O in the window's intervals that hold its slowest 1% of I/Os
    /// (the most the CPU can have added to the I/Os at the p99), seconds. None before any
    /// I/O in the window.
    pub p99_wait_seconds: Option<f64>,
    /// The p99 latency that wait is compared with (the lower of the probe's read and
    /// write p99 over the window), seconds.
    pub p99_latency_seconds: Option<f64>,
}

impl CpuWait {
    /// The window's latency figures are likely the host's doing (a busy CPU), not the
    /// drive's: some interval waited at least [`CPU_WAIT_HOST_BUSY_RATIO`], and the CPU
    /// wait per I/O at the p99 is at least [`CPU_WAIT_HOST_SHARE_OF_P99`] of the p99.
    pub fn host_busy(&self) -> bool {
        self.host_share_of_p99().is_some()
    }

    /// The share of the p99 the CPU wait accounts for, when it names the host.
    fn host_share_of_p99(&self) -> Option<f64> {
        let floor = self
            .window_max_ratio
            .is_some_and(|r| r >= CPU_WAIT_HOST_BUSY_RATIO);
        let (w, p99) = (self.p99_wait_seconds?, self.p99_latency_seconds?);
        let share = if p99 > 0.0 { w / p99 } else { 0.0 };
        (floor && share >= CPU_WAIT_HOST_SHARE_OF_P99).then_some(share)
    }

    /// The plain sentence the status page shows when the host is busy.
    pub fn sentence(&self) -> Option<String> {
        let share = self.host_share_of_p99()?;
        let ms = |s: f64| crate::fmt::latency(s * 1e9);
        Some(format!(
            "host CPU busy: at its p99 the probe waited about {} per I/O for a CPU, {:.0}% of its p99 latency ({}), so its latency figures are likely the host's, not the drive's",
            ms(self.p99_wait_seconds.unwrap_or(0.0)),
            (share * 100.0).min(100.0),
            ms(self.p99_latency_seconds.unwrap_or(0.0)),
        ))
    }
}

/// Counters and latency of one direction (`op` label) of one probe.
#[derive(Debug, Clone, Default, Serialize)]
pub struct OpStatus {
    pub ops_total: u64,
    pub bytes_total: u64,
    pub errors_total: u64,
    /// Of `errors_total`, those the device failed (EIO, a medium or transport error, a
    /// timeout, the device gone: `engine::device_errno`) and verify mismatches. The rest
    /// are the host's: a full or read-only filesystem, permissions, a truncated file.
    pub device_errors_total: u64,
    /// The latest error that was not the device's, by name ("no space left (ENOSPC)").
    pub last_host_error: Option<String>,
    /// Sum of the latencies of `ops_total` I/Os, seconds (the histogram's `_sum`).
    pub latency_sum_seconds: f64,
    /// Cumulative counts per [`LATENCY_BUCKETS`] bound (same length); `+Inf` is `ops_total`.
    pub buckets: Vec<u64>,
    /// Exact quantiles over the last window; None before any I/O in the window.
    pub window: Option<WindowQuantiles>,
}

/// Quantiles over a probe's sliding window, seconds (HDR precision: within 1% for the
/// daemon's canaries, whose histograms keep 2 significant digits).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WindowQuantiles {
    /// I/Os in the window.
    pub ops: u64,
    /// In the order of [`WINDOW_QUANTILES`].
    pub quantiles: [f64; 4],
    pub max: f64,
}

/// In JSON (`/api/v1/drives`) the quantiles are labelled, in the key style of the bench
/// output and the result documents: `{"ops": N, "quantiles": {"p50": s, "p90": s,
/// "p99": s, "p99_9": s}, "max": s}` (issue 17: a bare array said nothing of which was
/// which).
impl Serialize for WindowQuantiles {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{SerializeMap, SerializeStruct};
        struct Labelled<'a>(&'a [f64; 4]);
        impl Serialize for Labelled<'_> {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                let mut m = s.serialize_map(Some(WINDOW_QUANTILES.len()))?;
                for ((_, pct), v) in WINDOW_QUANTILES.iter().zip(self.0) {
                    m.serialize_entry(&crate::engine::stats::percentile_key(&pct.to_string()), v)?;
                }
                m.end()
            }
        }
        let mut st = s.serialize_struct("WindowQuantiles", 3)?;
        st.serialize_field("ops", &self.ops)?;
        st.serialize_field("quantiles", &Labelled(&self.quantiles))?;
        st.serialize_field("max", &self.max)?;
        st.end()
    }
}

/// Bytes driveprobe itself wrote to a drive, against its two wear allowances: the
/// canaries' per UTC day, and the scheduled runs' over a rolling period.
#[derive(Debug, Clone, Default, Serialize)]
pub struct WearStatus {
    /// Since the state file began (survives restarts), canaries and runs.
    pub self_written_bytes_total: u128,
    /// By the canaries on the current UTC day.
    pub written_today_bytes: u128,
    /// The canaries' budget per UTC day.
    pub budget_bytes_per_day: f64,
    /// The canaries are over their budget today: writing canaries hold.
    pub exceeded: bool,
    /// The scheduled runs' rolling period, in days.
    pub runs_period_days: u32,
    /// The scheduled runs' allowance over the period (a schedule may override it).
    pub runs_budget_bytes: f64,
    /// What scheduled runs wrote over the period so far.
    pub runs_written_bytes: u128,
}

/// Scheduled runs of one schedule on one drive that were skipped up front.
#[derive(Debug, Clone, Default, Serialize)]
pub struct SkipStatus {
    /// Since the daemon started.
    pub count: u64,
    /// Short name of the reason (the `reason` label): `wear_budget`.
    pub reason: String,
    /// The last skip: when (unix seconds) and why, with its figures.
    pub last_unix: f64,
    pub last_message: String,
}

/// The last finished run of one suite on one drive: what the `driveprobe_run_*` gauges say.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RunSummary {
    pub id: String,
    pub suite: String,
    /// `passed`, `failed`, `timed_out`, `interrupted`, `stopped`, or `pending` while its
    /// result document is not saved.
    pub status: String,
    pub started_unix: f64,
    pub duration_seconds: f64,
    /// Every steady-state phase of the run reached steady state (None: it had none).
    pub steady_state: Option<bool>,
    /// Unix seconds of the last run of this suite on this drive that passed.
    pub last_success_unix: Option<f64>,
    /// Why it did not pass (`protocol::bound::StopReason::describe`); None when it passed.
    pub reason: Option<String>,
    /// Short name of that reason (`signal`, `max_duration`, `safety_limit`, `error`), or
    /// `none`: the `reason` label of `driveprobe_run_last_status`.
    pub reason_label: String,
    /// What it wrote, and the upper bound it was admitted with, in bytes.
    pub written_bytes: u64,
    pub write_bound_bytes: Option<u64>,
    /// Measured points (steady state figures, sweep points, curve points...).
    pub points: Vec<RunPoint>,
    /// Application workload points (oltp by thread count, kv by db_bench phase): the
    /// `driveprobe_app_*` gauges.
    pub app_points: Vec<AppRunPoint>,
}

/// One measured application workload point of a run.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct AppRunPoint {
    /// `oltp_read_write`, or the db_bench phase (`readwhilewriting`...).
    pub workload: String,
    pub threads: u32,
    /// Transactions (sysbench) or operations (db_bench) per second.
    pub ops_per_second: f64,
    /// Seconds.
    pub latency_mean: f64,
    /// Seconds: the p99 over the whole run.
    pub latency_p99: f64,
}

/// One measured workload point of a run.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct RunPoint {
    /// Workload name, with the curve fraction for rate-curve points (`4k-randread@50%`).
    pub workload: String,
    pub threads: u32,
    pub depth: u32,
    pub iops: f64,
    pub bandwidth_bytes_per_second: f64,
    /// Seconds.
    pub latency: RunLatency,
}

/// Latency of a run point, seconds (the `stat` label values).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct RunLatency {
    pub mean: f64,
    pub max: f64,
    pub stddev: f64,
    pub p50: f64,
    pub p99: f64,
    pub p99_9: f64,
}

/// The status shared between the daemon's writers and the exporters.
#[derive(Debug, Default)]
pub struct Shared {
    status: Mutex<Status>,
    /// The config generation whose threads may write drive entries (see
    /// [`Shared::drive_of_generation`]). Changed and read with `status` locked.
    generation: std::sync::atomic::AtomicU64,
    /// Where generation and writer numbers come from (one counter: never the same twice).
    numbers: std::sync::atomic::AtomicU64,
    /// Per drive, the number of the one set of threads (its health poller and canaries)
    /// that may write its entry besides the current generation's scheduler. A swap keeps
    /// an unchanged drive's number, gives a changed or added drive a new one, and drops a
    /// removed drive's. Changed and read with `status` locked.
    writers: Mutex<BTreeMap<String, u64>>,
    /// The state directory, once the daemon has opened it: where `/runs/ID/report` reads
    /// result documents from (through its handle, never a path a record names).
    state_dir: std::sync::OnceLock<std::sync::Arc<crate::statedir::StateDir>>,
}

impl Shared {
    pub fn new(status: Status) -> Self {
        Shared {
            status: Mutex::new(status),
            ..Default::default()
        }
    }

    /// Sets the state directory (once; later calls change nothing).
    pub fn set_state_dir(&self, dir: std::sync::Arc<crate::statedir::StateDir>) {
        let _ = self.state_dir.set(dir);
    }

    /// The state directory, once set.
    pub fn state_dir(&self) -> Option<&std::sync::Arc<crate::statedir::StateDir>> {
        self.state_dir.get()
    }

    /// A number never given before, for one drive's threads (see [`Shared::writers`]).
    pub fn number(&self) -> u64 {
        self.numbers
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst)
            + 1
    }

    /// Makes a new generation current, with the status locked (so no writer of the old
    /// one is half-way through), runs `f` on the status (to prune what the new config
    /// no longer has), and returns the new generation's number.
    pub fn begin_generation(&self, f: impl FnOnce(&mut Status)) -> u64 {
        self.begin_generation_with(BTreeMap::new(), f)
    }

    /// [`Shared::begin_generation`], with the drives' writers from now on (drive name to
    /// the number of its threads, from [`Shared::number`]): a drive's threads whose
    /// number is not there any more (the drive was removed or changed) write nothing.
    pub fn begin_generation_with(
        &self,
        writers: BTreeMap<String, u64>,
        f: impl FnOnce(&mut Status),
    ) -> u64 {
        let mut s = self.lock();
        let g = self.number();
        self.generation
            .store(g, std::sync::atomic::Ordering::SeqCst);
        *self.writers.lock().unwrap_or_else(|e| e.into_inner()) = writers;
        f(&mut s);
        g
    }

    /// [`Shared::drive`] for a thread of generation (or drive writer number) `generation`:
    /// `None`, and nothing written, once a newer generation has started without giving
    /// that number the drive. A thread a reload left behind (a device that did not answer
    /// in time) cannot overwrite its successor's entry, nor bring back a drive or probe
    /// the new config removed.
    pub fn drive_of_generation<R>(
        &self,
        generation: u64,
        name: &str,
        f: impl FnOnce(&mut DriveStatus) -> R,
    ) -> Option<R> {
        let mut s = self.lock();
        let current = self.generation.load(std::sync::atomic::Ordering::SeqCst) == generation
            || self
                .writers
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(name)
                == Some(&generation);
        if !current {
            return None;
        }
        Some(f(s.drive_entry(name)))
    }

    /// The status, locked. A writer that panicked while holding the lock left plain data
    /// behind (no invariant spans two fields), so a poisoned lock is used as it is.
    pub fn lock(&self) -> MutexGuard<'_, Status> {
        self.status.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records that the thread of `what` could not start (`error`): counted, shown on every
    /// surface until [`Shared::thread_started`]; logged when the failure begins.
    pub fn thread_failed(&self, what: &str, error: &std::io::Error) {
        let mut s = self.lock();
        s.threads.start_failures_total += 1;
        let first = s
            .threads
            .unstarted
            .insert(what.to_string(), error.to_string())
            .is_none();
        drop(s);
        if first {
            tracing::error!(thread = what, error = %error, "cannot start a thread (the limit on tasks reached?); it is retried, and the failure shown on /healthz, /metrics and the status page until it starts");
        } else {
            tracing::debug!(thread = what, error = %error, "still cannot start a thread");
        }
    }

    /// Records that the thread of `what` runs (after a failure: logged, and off the surfaces).
    pub fn thread_started(&self, what: &str) {
        let mut s = self.lock();
        if s.threads.unstarted.is_empty() {
            return;
        }
        let was = s.threads.unstarted.remove(what).is_some();
        drop(s);
        if was {
            tracing::info!(thread = what, "the thread started after all");
        }
    }

    /// Forgets a failure of what no longer needs a thread (its drive or probe was removed).
    pub fn thread_not_needed(&self, what: &str) {
        self.lock().threads.unstarted.remove(what);
    }

    /// Runs `f` on one drive's entry, creating it when missing.
    pub fn drive<R>(&self, name: &str, f: impl FnOnce(&mut DriveStatus) -> R) -> R {
        f(self.lock().drive_entry(name))
    }
}

impl Status {
    /// Drive `name`'s entry, created when missing.
    pub fn drive_entry(&mut self, name: &str) -> &mut DriveStatus {
        self.drives
            .entry(name.to_string())
            .or_insert_with(|| DriveStatus {
                name: name.to_string(),
                ..Default::default()
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Review of issue 17, B4: a thread of the old config, left behind by a reload,
    /// published `Stopped` over its successor's entry.
    #[test]
    fn a_thread_of_an_old_generation_cannot_write_the_status() {
        let shared = Shared::new(Status::default());
        let old = shared.begin_generation(|_| {});
        assert_eq!(
            shared.drive_of_generation(old, "a", |d| d.up = true),
            Some(())
        );
        let new = shared.begin_generation(|s| s.drives.retain(|n, _| n == "a"));
        assert!(new > old);
        assert_eq!(shared.drive_of_generation(old, "a", |d| d.up = false), None);
        assert_eq!(shared.drive_of_generation(old, "gone", |_| ()), None);
        let s = shared.lock();
        assert!(s.drives["a"].up, "the old generation's write was dropped");
        assert!(!s.drives.contains_key("gone"));
    }

    /// Issue 18: the swap keeps an unchanged drive's threads; its writer number stays
    /// the drive's, a changed drive's old threads and a removed drive's write nothing.
    #[test]
    fn a_drive_s_threads_write_its_entry_only_while_the_drive_is_theirs() {
        let shared = Shared::new(Status::default());
        let (a, b) = (shared.number(), shared.number());
        let writers = |v: &[(&str, u64)]| {
            v.iter()
                .map(|(n, w)| (n.to_string(), *w))
                .collect::<BTreeMap<_, _>>()
        };
        let g1 = shared.begin_generation_with(writers(&[("a", a), ("b", b)]), |_| {});
        assert!(shared.drive_of_generation(a, "a", |_| ()).is_some());
        assert!(
            shared.drive_of_generation(a, "b", |_| ()).is_none(),
            "not a's"
        );
        assert!(
            shared.drive_of_generation(g1, "b", |_| ()).is_some(),
            "the scheduler"
        );
        // b changed: its new threads get a new number; a keeps its own.
        let b2 = shared.number();
        let g2 = shared.begin_generation_with(writers(&[("a", a), ("b", b2)]), |_| {});
        assert!(shared.drive_of_generation(a, "a", |_| ()).is_some());
        assert!(shared.drive_of_generation(b, "b", |_| ()).is_none());
        assert!(shared.drive_of_generation(b2, "b", |_| ()).is_some());
        assert!(shared.drive_of_generation(g1, "a", |_| ()).is_none());
        assert!(g2 > g1 && b2 > b);
        // a removed: its threads, still going, cannot bring it back.
        shared.begin_generation_with(writers(&[("b", b2)]), |s| s.drives.retain(|n, _| n == "b"));
        assert!(shared
            .drive_of_generation(a, "a", |d| d.up = true)
            .is_none());
        assert!(!shared.lock().drives.contains_key("a"));
    }

    #[test]
    fn failed_health_reads_count_in_a_row_from_their_first() {
        let f = HealthState::NotReadYet.failed("a".into(), 10.0);
        let f = f.failed("b".into(), 20.0).failed("c".into(), 30.0);
        assert_eq!(
            f,
            HealthState::Failed {
                reason: "c".into(),
                attempts: 3,
                since_unix: 10.0
            }
        );
        // A reading in between starts the count again.
        let f = HealthState::Read { read_unix: 40.0 }.failed("d".into(), 50.0);
        assert_eq!(
            f,
            HealthState::Failed {
                reason: "d".into(),
                attempts: 1,
                since_unix: 50.0
            }
        );
    }

    #[test]
    fn states_serialize_with_their_kind_and_reason() {
        let v = serde_json::to_value(ProbeState::Paused {
            reason: "scheduled run r (latency)".into(),
        })
        .unwrap();
        assert_eq!(
            v,
            serde_json::json!({"kind": "paused", "reason": "scheduled run r (latency)"})
        );
        assert_eq!(
            serde_json::to_value(ProbeState::Running).unwrap(),
            serde_json::json!({"kind": "running"})
        );
        for s in [
            ProbeState::Starting,
            ProbeState::Running,
            ProbeState::Stopped,
            ProbeState::Paused { reason: "".into() },
            ProbeState::DriveDown { reason: "".into() },
            ProbeState::Failing { reason: "".into() },
        ] {
            let v = serde_json::to_value(&s).unwrap();
            assert_eq!(v["kind"], s.name());
            assert!(ProbeState::NAMES.contains(&s.name()));
        }
        let v = serde_json::to_value(HealthState::NotApplicable {
            reason: "tmpfs".into(),
        })
        .unwrap();
        assert_eq!(
            v,
            serde_json::json!({"kind": "not_applicable", "reason": "tmpfs"})
        );
    }

    // A drive's load, less its canaries' I/O (`sample_load` over `load::DriveLoad`).
    use crate::load::DiskCounters;

    fn drive_with_canary(ops: u64, secs: f64) -> DriveStatus {
        let mut s = DriveStatus::default();
        let p = ProbeStatus {
            read: OpStatus {
                ops_total: ops,
                latency_sum_seconds: secs,
                ..OpStatus::default()
            },
            ..ProbeStatus::default()
        };
        s.probes.insert("canary-4k-read".into(), p);
        s
    }

    /// The canary's read counters of `s`.
    fn canary(s: &mut DriveStatus) -> &mut OpStatus {
        &mut s.probes.get_mut("canary-4k-read").unwrap().read
    }

    fn disk(ios: u64, ticks: u64) -> DiskCounters {
        DiskCounters {
            ios,
            in_flight: 1,
            io_ticks_ms: ticks,
        }
    }

    /// The canaries' own I/O and time are taken out; the first sample adds nothing.
    #[test]
    fn the_canaries_own_io_is_not_the_drive_s_load() {
        let mut s = drive_with_canary(100, 0.010);
        s.sample_load("sda", disk(1_000, 5_000));
        assert_eq!(s.load.as_ref().unwrap().others_ios_total, 0);
        // 60 I/Os of the canary's (6 ms) and 440 of others; 2 s busy in all.
        canary(&mut s).ops_total = 160;
        canary(&mut s).latency_sum_seconds = 0.016;
        s.sample_load("sda", disk(1_500, 7_000));
        let l = s.load.as_ref().unwrap();
        assert_eq!(l.others_ios_total, 440);
        assert!((l.others_busy_seconds_total - 1.994).abs() < 1e-9, "{l:?}");
        assert_eq!(l.in_flight, 1);
        // Only the canary: nothing is added, even if its time exceeds the disk's ticks
        // (ticks are whole milliseconds; its latency includes the host's part).
        canary(&mut s).ops_total = 170;
        canary(&mut s).latency_sum_seconds = 0.030;
        s.sample_load("sda", disk(1_510, 7_010));
        let l = s.load.as_ref().unwrap();
        assert_eq!(l.others_ios_total, 440);
        assert!((l.others_busy_seconds_total - 1.994).abs() < 1e-9, "{l:?}");
    }

    /// A canary publishes its counts once an interval: a sample that sees its I/Os on the
    /// disk before they are counted overstates the load once, by at most that lag, and
    /// the catch-up is not lost nor counted twice.
    #[test]
    fn a_canary_s_count_that_lags_is_not_load_for_long() {
        let mut s = drive_with_canary(0, 0.0);
        s.sample_load("sda", disk(0, 0));
        // 50 canary I/Os on the disk, not yet published.
        s.sample_load("sda", disk(50, 5));
        assert_eq!(s.load.as_ref().unwrap().others_ios_total, 50);
        // Published with the next 50; the disk saw 50 more.
        canary(&mut s).ops_total = 100;
        s.sample_load("sda", disk(100, 10));
        assert_eq!(s.load.as_ref().unwrap().others_ios_total, 50);
        // 1,000 I/Os of others: 1,000 over the true count of 0, not 1,050.
        s.sample_load("sda", disk(1_100, 1_010));
        assert_eq!(s.load.as_ref().unwrap().others_ios_total, 1_000);
    }

    /// The counters never go back: a disk that moved to another name, or counters that
    /// restarted (another disk under the same name), start over from the new sample.
    #[test]
    fn a_moved_or_replaced_disk_starts_over_and_never_goes_back() {
        let mut s = drive_with_canary(0, 0.0);
        s.sample_load("sda", disk(100, 100));
        s.sample_load("sda", disk(300, 1_100));
        let before = s.load.clone().unwrap();
        assert_eq!(before.others_ios_total, 200);
        // Replaced under the same name: its counters start low.
        s.sample_load("sda", disk(5, 10));
        assert_eq!(s.load.as_ref().unwrap().others_ios_total, 200);
        s.sample_load("sda", disk(55, 510));
        assert_eq!(s.load.as_ref().unwrap().others_ios_total, 250);
        // Moved to sdb, whose counters are higher: nothing from the jump.
        s.sample_load("sdb", disk(90_000, 900_000));
        let l = s.load.as_ref().unwrap();
        assert_eq!((l.device.as_str(), l.others_ios_total), ("sdb", 250));
        assert!((l.others_busy_seconds_total - 1.5).abs() < 1e-9, "{l:?}");
    }
}
