//! The first stage: the TOML document as written, with the byte span of every value the
//! second stage checks. Unknown keys are refused here (`deny_unknown_fields`), with the
//! position of the key.

use serde::Deserialize;
use toml::Spanned;

/// Every key the config accepts, as a dotted path (`[[drive]]` tables are `drive.`).
/// `config/driveprobe.example.toml` documents exactly these; `tests/cli/config.rs` checks it.
pub const KEYS: &[&str] = &[
    "state_dir",
    "health_interval",
    "health_detail_metrics",
    "server",
    "server.listen",
    "wear_budget",
    "wear_budget.share_of_rated_dwpd",
    "wear_budget.unrated_bytes_per_day",
    "wear_budget.period",
    "wear_budget.scheduled_share_of_rated_writes",
    "wear_budget.scheduled_unrated_bytes",
    "runs",
    "runs.keep_documents",
    "runs.keep_bytes",
    "drive",
    "drive.name",
    "drive.serial",
    "drive.wwn",
    "drive.by_id",
    "drive.path",
    "drive.destructive",
    "drive.file_target",
    "drive.file_target.path",
    "drive.file_target.size",
    "drive.rated_tbw_bytes",
    "drive.rated_dwpd",
    "drive.warranty_years",
    "drive.rated_mtbf_hours",
    "drive.rated_read_iops_4k",
    "drive.rated_write_iops_4k",
    "drive.rated_seq_read_bw",
    "drive.rated_seq_write_bw",
    "drive.smartctl_type",
    "probe",
    "probe.name",
    "probe.drives",
    "probe.window",
    "probe.workload",
    "probe.workload.pattern",
    "probe.workload.block_size",
    "probe.workload.read_pct",
    "probe.workload.depth",
    "probe.workload.rate_iops",
    "probe.workload.arrival",
    "probe.workload.verify",
    "schedule",
    "schedule.name",
    "schedule.drives",
    "schedule.suite",
    "schedule.fio_job",
    "schedule.scale",
    "schedule.cron",
    "schedule.max_duration",
    "schedule.wear_budget",
    "schedule.hist_digits",
    "schedule.window",
    "schedule.window.start",
    "schedule.window.end",
    "schedule.window.days",
    "selftest",
    "selftest.name",
    "selftest.drives",
    "selftest.kind",
    "selftest.cron",
    "selftest.max_duration",
    "selftest.window",
    "selftest.window.start",
    "selftest.window.end",
    "selftest.window.days",
    "discovery",
    "discovery.enabled",
    "discovery.rescan_interval",
    "discovery.drop_after",
    "discovery.max_drives",
    "discovery.include_loop",
    "discovery.raid",
    "discovery.include",
    "discovery.include.name",
    "discovery.include.model",
    "discovery.include.serial",
    "discovery.include.transport",
    "discovery.exclude",
    "discovery.exclude.name",
    "discovery.exclude.model",
    "discovery.exclude.serial",
    "discovery.exclude.transport",
    "discovery.canary",
    "discovery.canary.hdd",
    "discovery.canary.hdd.rate_iops",
    "discovery.canary.hdd.window",
    "discovery.canary.ssd",
    "discovery.canary.ssd.rate_iops",
    "discovery.canary.ssd.window",
    "discovery.canary.nvme",
    "discovery.canary.nvme.rate_iops",
    "discovery.canary.nvme.window",
    "discovery.canary.virtual",
    "discovery.canary.virtual.rate_iops",
    "discovery.canary.virtual.window",
];

pub type S<T> = Spanned<T>;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    pub state_dir: Option<S<String>>,
    pub health_interval: Option<S<String>>,
    pub health_detail_metrics: Option<S<bool>>,
    pub server: Option<RawServer>,
    pub wear_budget: Option<RawWearBudget>,
    pub runs: Option<RawRuns>,
    #[serde(default)]
    pub drive: Vec<S<RawDrive>>,
    #[serde(default)]
    pub probe: Vec<S<RawProbe>>,
    #[serde(default)]
    pub schedule: Vec<S<RawSchedule>>,
    #[serde(default)]
    pub selftest: Vec<S<RawSelfTest>>,
    pub discovery: Option<S<RawDiscovery>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawDiscovery {
    pub enabled: Option<S<bool>>,
    pub rescan_interval: Option<S<String>>,
    pub drop_after: Option<S<String>>,
    pub max_drives: Option<S<i64>>,
    pub include_loop: Option<S<bool>>,
    pub raid: Option<S<bool>>,
    pub include: Option<RawFilters>,
    pub exclude: Option<RawFilters>,
    pub canary: Option<RawClassCanaries>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawFilters {
    pub name: Option<S<String>>,
    pub model: Option<S<String>>,
    pub serial: Option<S<String>>,
    pub transport: Option<S<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawClassCanaries {
    pub hdd: Option<RawClassCanary>,
    pub ssd: Option<RawClassCanary>,
    pub nvme: Option<RawClassCanary>,
    #[serde(rename = "virtual")]
    pub virtual_: Option<RawClassCanary>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawClassCanary {
    pub rate_iops: Option<S<f64>>,
    pub window: Option<S<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawServer {
    pub listen: Option<S<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawWearBudget {
    pub share_of_rated_dwpd: Option<S<f64>>,
    pub unrated_bytes_per_day: Option<S<String>>,
    pub period: Option<S<String>>,
    pub scheduled_share_of_rated_writes: Option<S<f64>>,
    pub scheduled_unrated_bytes: Option<S<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRuns {
    pub keep_documents: Option<S<i64>>,
    pub keep_bytes: Option<S<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawDrive {
    pub name: Option<S<String>>,
    pub serial: Option<S<String>>,
    pub wwn: Option<S<String>>,
    pub by_id: Option<S<String>>,
    pub path: Option<S<String>>,
    pub destructive: Option<S<bool>>,
    pub file_target: Option<S<RawFileTarget>>,
    pub rated_tbw_bytes: Option<S<String>>,
    pub rated_dwpd: Option<S<f64>>,
    pub warranty_years: Option<S<f64>>,
    pub rated_mtbf_hours: Option<S<f64>>,
    pub rated_read_iops_4k: Option<S<f64>>,
    pub rated_write_iops_4k: Option<S<f64>>,
    pub rated_seq_read_bw: Option<S<String>>,
    pub rated_seq_write_bw: Option<S<String>>,
    pub smartctl_type: Option<S<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawFileTarget {
    pub path: S<String>,
    pub size: S<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawProbe {
    pub name: S<String>,
    pub drives: Option<S<Vec<S<String>>>>,
    pub window: Option<S<String>>,
    pub workload: S<RawWorkload>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawWorkload {
    pub pattern: Option<S<String>>,
    pub block_size: Option<S<String>>,
    pub read_pct: Option<S<i64>>,
    pub depth: Option<S<i64>>,
    pub rate_iops: Option<S<f64>>,
    pub arrival: Option<S<String>>,
    #[serde(default)]
    pub verify: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSchedule {
    pub name: S<String>,
    pub drives: S<Vec<S<String>>>,
    /// A built-in suite; exactly one of `suite` and `fio_job` (checked in `validate`).
    pub suite: Option<S<String>>,
    /// A user's fio job file (absolute, or relative to the config file's folder).
    pub fio_job: Option<S<String>>,
    pub scale: Option<S<String>>,
    pub cron: S<String>,
    pub max_duration: S<String>,
    pub window: Option<S<RawWindow>>,
    /// `"unlimited"` or a size per period: the schedule's own wear allowance.
    pub wear_budget: Option<S<String>>,
    /// Significant digits the run documents' latency histograms keep (1 to 3).
    pub hist_digits: Option<S<i64>>,
}

/// `[[selftest]]`: the drive's own self-test, on a cron like a schedule.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSelfTest {
    pub name: S<String>,
    pub drives: S<Vec<S<String>>>,
    pub kind: S<String>,
    pub cron: S<String>,
    pub max_duration: Option<S<String>>,
    pub window: Option<S<RawWindow>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawWindow {
    pub start: S<String>,
    pub end: S<String>,
    pub days: Option<S<Vec<S<String>>>>,
}
