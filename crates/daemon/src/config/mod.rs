//! The daemon's configuration: a TOML file parsed in two stages. [`raw`] is the document
//! as written (serde, unknown keys refused, spans kept); [`Config`] is what the rest of
//! the program takes, every value checked and every cross-reference (probe to drive,
//! schedule to drive and suite) resolved. Every error carries `FILE:LINE:COLUMN`, what is
//! wrong and what to do, on one line.

pub use driveprobe_core::file;
mod kind;
pub mod raw;
pub mod redact;
mod validate;
pub use kind::{Class, Source, Transport};
pub use validate::{smartctl_type as check_smartctl_type, BadSmartctlType};

pub use validate::{fio_job_label, FIO_JOB_SUITE_PREFIX};

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::engine::{Arrival, CpuPolicy, Job, JobSpec, Pattern, RateLimit, Stop};
use crate::health::endurance::Rating;
use crate::protocol::result::Rated;
use crate::protocol::suite::Scale;

/// Where the daemon listens when the config does not say.
pub const DEFAULT_LISTEN: SocketAddr =
    SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 39480));
/// The size of the built-in config's file target.
pub const DEFAULT_FILE_TARGET_BYTES: u64 = 256 << 20;

/// A refused config. `Invalid` displays as `FILE:LINE:COLUMN: what is wrong; what to do`.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{file}:{line}:{column}: {message}")]
    Invalid {
        file: String,
        line: usize,
        column: usize,
        message: String,
    },
    #[error("{file}: cannot read the config: {source}; check the path and its permissions")]
    Read {
        file: String,
        #[source]
        source: std::io::Error,
    },
    /// Not a regular file, too large, or not text ([`file::read_regular`]).
    #[error("{file}: cannot read the config: {source}")]
    NotAConfig {
        file: String,
        #[source]
        source: file::FileError,
    },
}

/// The validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    pub server: Server,
    /// Where the daemon keeps what must survive a restart (and the built-in file target).
    pub state_dir: PathBuf,
    /// How often drive health is read.
    pub health_interval: Duration,
    /// Export everything the drive says as metrics (every ATA attribute, Device Statistics
    /// entry, PHY counter, SCSI and NVMe counter, self-test); false keeps the headline
    /// `driveprobe_health_*` series only. The JSON has it all either way.
    pub health_detail_metrics: bool,
    pub wear_budget: WearBudget,
    /// How many result documents are kept.
    pub runs: RunsRetention,
    pub drives: Vec<Drive>,
    pub probes: Vec<Probe>,
    pub schedules: Vec<Schedule>,
    /// `[[selftest]]`: the drives' own self-tests, scheduled like `schedules`.
    pub selftests: Vec<SelfTestSchedule>,
    /// `[discovery]`: what the daemon finds by itself.
    pub discovery: Discovery,
    /// The drives discovery put in (or matched to a listed drive), by drive name: empty
    /// in a config as loaded, filled by [`crate::discovery::merge`].
    pub discovered: BTreeMap<String, Discovered>,
    /// Discovered drives that are gone (not yet dropped), by drive name, with why: they
    /// keep their status entry, down, and get no thread.
    pub gone: BTreeMap<String, String>,
}

/// `[discovery]`: every whole disk the kernel shows, and drives behind RAID controllers.
#[derive(Debug, Clone)]
pub struct Discovery {
    pub enabled: bool,
    pub rescan_interval: Duration,
    /// How long a removed drive stays (`driveprobe_drive_up 0`) before it is dropped.
    pub drop_after: Duration,
    pub max_drives: usize,
    pub include_loop: bool,
    /// Drives behind RAID controllers through `smartctl --scan-open` (health only).
    pub raid: bool,
    pub include: DiscoveryFilters,
    pub exclude: DiscoveryFilters,
    /// The canary of each class, in [`Class::ALL`] order (hdd, ssd, nvme, virtual).
    pub canary: [ClassCanary; 4],
    /// Discovered drives get health polling only, no canary, and only those whose device
    /// this user can open are kept (the built-in config when not root).
    pub health_only: bool,
}

/// The regexes of `[discovery.include]` or `[discovery.exclude]`.
#[derive(Debug, Clone, Default)]
pub struct DiscoveryFilters {
    pub name: Option<regex::Regex>,
    pub model: Option<regex::Regex>,
    pub serial: Option<regex::Regex>,
    pub transport: Option<regex::Regex>,
}

impl DiscoveryFilters {
    /// name, model, serial, transport.
    pub fn all(&self) -> [Option<&regex::Regex>; 4] {
        [
            self.name.as_ref(),
            self.model.as_ref(),
            self.serial.as_ref(),
            self.transport.as_ref(),
        ]
    }
}

/// What a class's canary is set to: 4 KiB random reads, QD1, at `rate_iops`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ClassCanary {
    pub rate_iops: f64,
    pub window: Duration,
}

/// The class defaults: each canary costs its drive about 1% of what it can do, or less.
pub const DEFAULT_CLASS_CANARY: [ClassCanary; 4] = [
    // hdd: a 7,200 rpm disk does 100-200 random IOPS.
    ClassCanary {
        rate_iops: 1.0,
        window: Duration::from_secs(600),
    },
    // ssd (SATA/SAS)
    ClassCanary {
        rate_iops: 20.0,
        window: Duration::from_secs(60),
    },
    // nvme
    ClassCanary {
        rate_iops: 50.0,
        window: Duration::from_secs(60),
    },
    // virtual: the host's disk is shared, and of unknown capability.
    ClassCanary {
        rate_iops: 5.0,
        window: Duration::from_secs(300),
    },
];

impl Discovery {
    pub fn canary(&self, class: Class) -> ClassCanary {
        self.canary[Class::ALL.iter().position(|c| *c == class).unwrap_or(3)]
    }

    /// Discovery turned off (`[discovery] enabled = false`).
    pub fn off() -> Discovery {
        Discovery {
            enabled: false,
            ..Discovery::default()
        }
    }
}

impl Default for Discovery {
    /// `[discovery]` with every key at its default (enabled).
    fn default() -> Self {
        Discovery {
            enabled: true,
            rescan_interval: Duration::from_secs(60),
            drop_after: Duration::from_secs(3600),
            max_drives: 256,
            include_loop: false,
            raid: true,
            include: DiscoveryFilters::default(),
            exclude: DiscoveryFilters::default(),
            canary: DEFAULT_CLASS_CANARY,
            health_only: false,
        }
    }
}

/// What discovery knows of a drive in the effective config.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Discovered {
    pub class: Class,
    pub transport: Transport,
    pub kernel_name: String,
    pub source: Source,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Server {
    pub listen: SocketAddr,
}

/// How much the daemon may write to a drive: two allowances that never stop each other.
///
/// - Canaries (probes that write) get a share of the drive's rated drive writes per UTC
///   day (`share_of_rated_dwpd`), or `unrated_bytes_per_day`; a writing canary over it
///   holds until the next UTC day.
/// - Scheduled runs get a share of the drive's rated writes over a rolling `period`
///   (`scheduled_share_of_rated_writes`), or `scheduled_unrated_bytes` per period. A run is
///   admitted up front only when its write bound fits what is left of it, and otherwise
///   skipped; an admitted run is never stopped by the budget.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WearBudget {
    /// Canaries: share (0..=1, more than 0) of the drive's rated drive writes per day.
    pub share_of_rated_dwpd: f64,
    /// Canaries: bytes per day for a drive whose rating is not known.
    pub unrated_bytes_per_day: u64,
    /// Scheduled runs: the rolling window their allowance is counted over, in whole days.
    pub period_days: u32,
    /// Scheduled runs: share (0..=1, more than 0) of the drive's rated writes over the period.
    pub scheduled_share_of_rated_writes: f64,
    /// Scheduled runs: bytes per period for a drive whose rating is not known.
    pub scheduled_unrated_bytes: u64,
}

/// The default period of the scheduled runs' allowance.
pub const DEFAULT_WEAR_PERIOD_DAYS: u32 = 30;
/// The default allowance of scheduled runs on an unrated drive per period: enough for a
/// quick-scale `enterprise` run on the built-in 256 MiB file target at the assumed
/// transfer rate (its bound is about 311 GiB, `protocol::bound`; it writes about 34 GiB,
/// and the period counts what runs wrote), about 17 GiB a day.
pub const DEFAULT_SCHEDULED_UNRATED_BYTES: u64 = 512 << 30;

impl Default for WearBudget {
    fn default() -> Self {
        WearBudget {
            share_of_rated_dwpd: 0.05,
            unrated_bytes_per_day: 1 << 30,
            period_days: DEFAULT_WEAR_PERIOD_DAYS,
            scheduled_share_of_rated_writes: 0.25,
            scheduled_unrated_bytes: DEFAULT_SCHEDULED_UNRATED_BYTES,
        }
    }
}

/// A schedule's own wear allowance, overriding the drive's allowance for scheduled runs
/// (`wear_budget = "unlimited"` or a size on the `[[schedule]]`): for burn-in drives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScheduleBudget {
    /// The drive's allowance for scheduled runs.
    Drive,
    /// No allowance: every run is admitted (the hard safety limit still holds).
    Unlimited,
    /// This many bytes per period instead of the drive's allowance for scheduled runs
    /// (what every scheduled run wrote to the drive in the period counts against it).
    Bytes(u64),
}

/// How many result documents (`STATE_DIR/runs/ID.json`) are kept: the oldest go first
/// when there are more than `keep_documents` or they take more than `keep_bytes`, and
/// their runs leave the index with them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunsRetention {
    pub keep_documents: usize,
    pub keep_bytes: u64,
}

impl Default for RunsRetention {
    fn default() -> Self {
        RunsRetention {
            keep_documents: 200,
            keep_bytes: 1 << 30,
        }
    }
}

/// How a drive is recognised, whatever its path today.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Identity {
    Serial(String),
    Wwn(String),
    /// A `/dev/disk/by-id/` path.
    ById(PathBuf),
}

/// A preallocated file on the drive's filesystem that probes and runs stay inside.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileTarget {
    pub path: PathBuf,
    pub size: u64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Drive {
    /// The `drive` label on every metric.
    pub name: String,
    /// None only for a drive named by its file target alone.
    pub identity: Option<Identity>,
    /// Where the device is today (it may move between boots; the identity decides).
    pub path: Option<PathBuf>,
    /// Writes to the raw device allowed.
    pub destructive: bool,
    pub file_target: Option<FileTarget>,
    pub rating: Rating,
    pub rated: Rated,
    /// smartctl's `-d TYPE` for health reads (`megaraid,1` for a drive behind a RAID
    /// controller, `sat`...). With it and no identity nor file target, the drive is
    /// health-only: `path` is what smartctl is given, and no probe may run on it.
    pub smartctl_type: Option<String>,
}

impl Drive {
    /// True when a workload that writes may run on this drive (on its file target when
    /// it has one, else on the raw device, which `destructive` allows).
    pub fn writable(&self) -> bool {
        self.destructive || self.file_target.is_some()
    }
}

/// A canary: a low, rate-limited workload that runs all the time on the drives it covers.
#[derive(Debug, Clone)]
pub struct Probe {
    pub name: String,
    /// The drives it covers, by name (`"*"` already expanded).
    pub drives: Vec<String>,
    pub job: Job,
    /// The window the latency quantiles are taken over.
    pub window: Duration,
    pub writes: bool,
}

/// A full-intensity suite run, on a cron schedule.
#[derive(Debug, Clone)]
pub struct Schedule {
    pub name: String,
    pub drives: Vec<String>,
    /// The run's suite label (in the run index, `runs/ID.json` and the `suite` label of
    /// the run gauges): a suite name that [`crate::protocol::suite::find`] knows, or
    /// `fio-job:STEM` for a fio job file (see [`Schedule::fio_job`]).
    pub suite: String,
    /// A user's fio job file (absolute; checked by `protocol::fio_job::prepare` when the
    /// config was loaded, and again before each run). When set, the run is
    /// `suite::fio_job_suite(path, max_duration)` and `suite` is its label.
    pub fio_job: Option<PathBuf>,
    /// Quick, standard or full (built-in suites; a fio job file sets its own runtimes).
    pub scale: Scale,
    /// Five-field cron expression, checked by [`crate::schedule::cron::Cron::parse`] (evaluated in UTC).
    pub cron: String,
    pub window: Option<MaintenanceWindow>,
    pub max_duration: Duration,
    /// `wear_budget` on the schedule: its own allowance, instead of the drive's.
    pub wear_budget: ScheduleBudget,
    /// `hist_digits`: the significant digits its result documents' latency histograms
    /// keep (None: the engine's 3; `protocol::hist::KEPT_DIGITS`).
    pub hist_digits: Option<u8>,
}

pub use crate::health::selftest::Kind as SelfTestKind;

/// One `[[selftest]]`: a drive self-test of `kind` on `drives` at each `cron` time (UTC),
/// inside `window` if given, through the schedules' rules (`schedule::plan`).
#[derive(Debug, Clone)]
pub struct SelfTestSchedule {
    pub name: String,
    pub drives: Vec<String>,
    pub kind: SelfTestKind,
    pub cron: String,
    pub window: Option<MaintenanceWindow>,
    /// Past this the test is aborted (when the drive can abort one) and marked timed out.
    pub max_duration: Duration,
}

/// When a scheduled run may happen: from `start` to `end` (past midnight when `end` is
/// earlier) on `days` (the day the window starts).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MaintenanceWindow {
    pub start: TimeOfDay,
    pub end: TimeOfDay,
    pub days: Vec<Weekday>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct TimeOfDay {
    pub hour: u8,
    pub minute: u8,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Weekday {
    Mon,
    Tue,
    Wed,
    Thu,
    Fri,
    Sat,
    Sun,
}

impl Weekday {
    pub const ALL: [Weekday; 7] = [
        Weekday::Mon,
        Weekday::Tue,
        Weekday::Wed,
        Weekday::Thu,
        Weekday::Fri,
        Weekday::Sat,
        Weekday::Sun,
    ];
}

impl Config {
    /// Reads and validates a config file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let file = path.display().to_string();
        let text = file::read_regular(path, file::MAX_CONFIG_BYTES).map_err(|e| match e {
            file::FileError::Io(source) => ConfigError::Read {
                file: file.clone(),
                source,
            },
            source => ConfigError::NotAConfig {
                file: file.clone(),
                source,
            },
        })?;
        validate::parse(&text, &file, path.parent().unwrap_or(Path::new("")))
    }

    /// Parses and validates config text; `name` is the file name errors carry, and its
    /// folder is where a relative `fio_job` path is taken from.
    pub fn parse(text: &str, name: &str) -> Result<Config, ConfigError> {
        validate::parse(
            text,
            name,
            Path::new(name).parent().unwrap_or(Path::new("")),
        )
    }

    /// The config `driveprobe daemon` runs without one, listening on 127.0.0.1:39480:
    /// as root, discovery with its defaults (every whole disk, a read-only canary at its
    /// class's rate, no file target); not root, a 256 MiB file target in `state_dir`
    /// (drive "default") with one read-only 4 KiB random-read canary at 50 IOPS, QD1,
    /// plus the discovered drives this user can open, for their health only.
    pub fn embedded_default(state_dir: &Path) -> Config {
        Config::embedded_default_for(state_dir, rustix::process::geteuid().is_root())
    }

    /// [`Config::embedded_default`] as root (`root`) or not.
    pub fn embedded_default_for(state_dir: &Path, root: bool) -> Config {
        let window = Duration::from_secs(60);
        let mut c = Config {
            server: Server {
                listen: DEFAULT_LISTEN,
            },
            state_dir: state_dir.to_path_buf(),
            health_interval: validate::DEFAULT_HEALTH_INTERVAL,
            health_detail_metrics: true,
            wear_budget: WearBudget::default(),
            runs: RunsRetention::default(),
            drives: Vec::new(),
            probes: Vec::new(),
            schedules: Vec::new(),
            selftests: Vec::new(),
            discovery: Discovery::default(),
            discovered: BTreeMap::new(),
            gone: BTreeMap::new(),
        };
        if !root {
            c.drives.push(Drive {
                name: "default".into(),
                identity: None,
                path: None,
                destructive: false,
                file_target: Some(FileTarget {
                    path: state_dir.join("canary.dat"),
                    size: DEFAULT_FILE_TARGET_BYTES,
                }),
                rating: Rating::default(),
                rated: Rated::default(),
                smartctl_type: None,
            });
            c.probes.push(Probe {
                name: "canary-4k-read".into(),
                drives: vec!["default".into()],
                job: canary_job(validate::DEFAULT_PROBE_IOPS, window),
                window,
                writes: false,
            });
            c.discovery.health_only = true;
            c.discovery.raid = false;
        }
        c
    }
}

/// The built-in canary: 4 KiB random reads, QD1, at `iops`.
pub fn canary_job(iops: f64, window: Duration) -> Job {
    let spec = JobSpec {
        pattern: Pattern::Random,
        read_pct: 100,
        depth: 1,
        workers: 1,
        stop: Stop::Time(window),
        rate: Some(RateLimit {
            iops,
            arrival: Arrival::Poisson,
        }),
        // A canary is not confined to a CPU: its latency must not depend on how busy one
        // CPU is (a suite on another drive), and it waits between I/Os anyway.
        cpu_policy: CpuPolicy::Shared,
        ..JobSpec::default()
    };
    // Fixed values, valid (a unit test checks): no input reaches this.
    spec.validate().expect("the built-in canary job is valid")
}

/// The state directory when the config names none: `/var/lib/driveprobe` as root, else
/// `$XDG_STATE_HOME/driveprobe`, else `~/.local/state/driveprobe` (else a directory
/// under the system temporary directory, when not even `$HOME` is set).
pub fn default_state_dir() -> PathBuf {
    if rustix::process::geteuid().is_root() {
        return PathBuf::from("/var/lib/driveprobe");
    }
    let abs = |k: &str| {
        std::env::var_os(k)
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
    };
    if let Some(x) = abs("XDG_STATE_HOME") {
        return x.join("driveprobe");
    }
    if let Some(h) = abs("HOME") {
        return h.join(".local/state/driveprobe");
    }
    std::env::temp_dir().join("driveprobe")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_default_is_what_it_says() {
        let root = Config::embedded_default_for(Path::new("/tmp/dp"), true);
        assert!(root.drives.is_empty() && root.probes.is_empty());
        assert!(root.discovery.enabled && !root.discovery.health_only);
        let c = Config::embedded_default_for(Path::new("/tmp/dp"), false);
        assert!(c.discovery.enabled && c.discovery.health_only);
        assert_eq!(c.server.listen.to_string(), "127.0.0.1:39480");
        assert_eq!(c.drives.len(), 1);
        let t = c.drives[0].file_target.as_ref().unwrap();
        assert_eq!(t.path, Path::new("/tmp/dp/canary.dat"));
        assert_eq!(t.size, 256 << 20);
        let p = &c.probes[0];
        assert!(!p.writes && !p.job.writes());
        assert_eq!(p.job.depth(), 1);
        assert_eq!(p.job.sizes().entries(), &[(4096, 1)]);
        assert_eq!(p.job.rate().map(|r| r.iops), Some(50.0));
    }
}
