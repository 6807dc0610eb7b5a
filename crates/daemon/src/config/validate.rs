//! The second stage: raw document to [`Config`], every value checked, every error placed.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::raw::{self, RawConfig, S};
use super::Class;
use super::{
    default_state_dir, Config, ConfigError, Discovery, DiscoveryFilters, Drive, FileTarget,
    Identity, MaintenanceWindow, Probe, RunsRetention, Schedule, ScheduleBudget, SelfTestKind,
    SelfTestSchedule, Server, TimeOfDay, WearBudget, Weekday, DEFAULT_LISTEN,
};
use crate::engine::{Arrival, CpuPolicy, JobSpec, Pattern, RateLimit, SizeMix, Stop};
use crate::health::endurance::Rating;
use crate::protocol::result::Rated;
use crate::protocol::suite::Scale;
use crate::units;

pub(super) const DEFAULT_HEALTH_INTERVAL: Duration = Duration::from_secs(300);
pub(super) const DEFAULT_PROBE_IOPS: f64 = 50.0;
const DEFAULT_PROBE_WINDOW: Duration = Duration::from_secs(60);
const DEFAULT_SCALE: &str = "standard";

// The sane ranges: every duration, rate and count the config takes has one, so that no
// value can overflow a clock or a counter where it is used (an interval added to an
// `Instant`, a duration in seconds as i64) or make a canary unlimited.
/// `health_interval`: from a second to a day.
pub const HEALTH_INTERVAL_RANGE: (Duration, Duration) =
    (Duration::from_secs(1), Duration::from_secs(86_400));
/// A probe's quantile `window`: from a second to a day.
pub const PROBE_WINDOW_RANGE: (Duration, Duration) =
    (Duration::from_secs(1), Duration::from_secs(86_400));
/// A schedule's `max_duration`: from a second to a week (the longest suite at full scale
/// takes about a day).
pub const MAX_DURATION_RANGE: (Duration, Duration) =
    (Duration::from_secs(1), Duration::from_secs(7 * 86_400));
/// A `[[selftest]]`'s `max_duration` when it gives none: a short test takes minutes
/// (ATA drives say 1-2), an extended one hours (a 14 TB disk says 1,479 minutes, and host
/// I/O makes it longer).
pub const SELFTEST_SHORT_MAX_DURATION: Duration = Duration::from_secs(3600);
pub const SELFTEST_EXTENDED_MAX_DURATION: Duration = Duration::from_secs(3 * 86_400);
/// A probe's `rate_iops`: a canary, from one I/O in 100 s to 100,000 per second.
pub const PROBE_IOPS_RANGE: (f64, f64) = (0.01, 100_000.0);
/// A file target's size, and the unrated wear budget per day: at most 1 PiB.
pub const MAX_TARGET_BYTES: u64 = 1 << 50;
/// `[wear_budget] period`: from a day to 400 days (the days of writes the state keeps,
/// `schedule::state::MAX_DAYS_PER_DRIVE`), in whole days.
pub const WEAR_PERIOD_RANGE: (Duration, Duration) = (
    Duration::from_secs(86_400),
    Duration::from_secs(400 * 86_400),
);
/// A rated endurance or bandwidth in bytes: at most 1 EiB.
pub const MAX_RATED_BYTES: u64 = 1 << 60;
/// `[discovery] rescan_interval`: from a second to a day.
pub const RESCAN_INTERVAL_RANGE: (Duration, Duration) =
    (Duration::from_secs(1), Duration::from_secs(86_400));
/// `[discovery] drop_after`: from a second to 30 days.
pub const DROP_AFTER_RANGE: (Duration, Duration) =
    (Duration::from_secs(1), Duration::from_secs(30 * 86_400));
/// `[discovery] max_drives` at most.
pub const MAX_DISCOVERED: usize = 4096;
/// The most `[[drive]]`, `[[probe]]` or `[[schedule]]` tables one config may have.
pub const MAX_TABLES: usize = 100_000;

/// The prefix of the suite label of a schedule that runs a fio job file.
pub const FIO_JOB_SUITE_PREFIX: &str = "fio-job:";

/// Parses and validates; the first problem found is the error. `base` is the config
/// file's folder: a relative `fio_job` path is taken from there.
pub(super) fn parse(text: &str, file: &str, base: &Path) -> Result<Config, ConfigError> {
    let cx = Cx {
        text,
        file,
        base,
        lines: line_starts(text),
    };
    let raw: RawConfig = toml::from_str(text).map_err(|e| cx.toml(&e))?;
    cx.config(raw)
}

/// What errors need to be placed: the text and its file name; and the file's folder.
struct Cx<'a> {
    text: &'a str,
    file: &'a str,
    base: &'a Path,
    /// Where each line of `text` starts ([`line_starts`]): a position is found in
    /// O(log lines), so placing every table (for the duplicate checks) stays linear.
    lines: Vec<usize>,
}

/// A schedule that runs a fio job file, for the label check across schedules.
struct FioLabel {
    label: String,
    file: PathBuf,
    drives: Vec<String>,
    schedule: String,
    line: usize,
}

type R<T> = Result<T, ConfigError>;

impl Cx<'_> {
    fn err(&self, span: Range<usize>, message: impl Into<String>) -> ConfigError {
        let (line, column) = self.line_col(span.start);
        ConfigError::Invalid {
            file: self.file.to_string(),
            line,
            column,
            message: one_line(&message.into()),
        }
    }

    /// toml's own errors (syntax, types, unknown and missing keys), with a hint. serde's
    /// messages quote the file (a value, an unknown key's name): they are told by kind
    /// ([`super::redact`]), and the place is the line and column; toml's syntax messages
    /// are its own fixed words and stay as they are.
    fn toml(&self, e: &toml::de::Error) -> ConfigError {
        use super::redact::Problem;
        let msg = match super::redact::serde_problem(e.message(), &known_keys()) {
            Some(p) => {
                let hint = match p {
                    Problem::UnknownKey { .. } | Problem::MisplacedKey(_) => {
                        "remove or rename the key (config/driveprobe.example.toml lists every key)"
                    }
                    Problem::Missing(_) | Problem::MissingUnnamed => {
                        "add it (config/driveprobe.example.toml shows every key)"
                    }
                    Problem::Duplicate => "give each key once per table",
                    _ => "write the value with the expected type (sizes and durations are quoted strings, such as \"4GiB\" or \"60s\")",
                };
                format!("{p}; {hint}")
            }
            None => {
                let msg = one_line(e.message());
                let hint = if msg.starts_with("duplicate key") {
                    "give each key once per table"
                } else {
                    "fix the TOML syntax at this place"
                };
                format!("{msg}; {hint}")
            }
        };
        self.err(e.span().unwrap_or(0..0), msg)
    }

    fn config(&self, raw: RawConfig) -> R<Config> {
        let state_dir = match raw.state_dir {
            Some(s) => self.abs_path(&s, "state_dir")?,
            None => default_state_dir(),
        };
        let health_interval = match raw.health_interval {
            Some(s) => self.duration(&s, "health_interval", HEALTH_INTERVAL_RANGE)?,
            None => DEFAULT_HEALTH_INTERVAL,
        };
        let health_detail_metrics = raw
            .health_detail_metrics
            .map(|b| *b.get_ref())
            .unwrap_or(true);
        let listen = match raw.server.and_then(|s| s.listen) {
            Some(l) => l.get_ref().trim().parse::<SocketAddr>().map_err(|_| {
                self.err(
                    l.span(),
                    format!(
                        "listen address '{}' is not an IP address and port; write one such as \"127.0.0.1:39480\" or \"[::]:39480\"",
                        l.get_ref()
                    ),
                )
            })?,
            None => DEFAULT_LISTEN,
        };
        let wear_budget = self.wear_budget(raw.wear_budget)?;
        for (what, over) in [
            ("drive", raw.drive.get(MAX_TABLES).map(S::span)),
            ("probe", raw.probe.get(MAX_TABLES).map(S::span)),
            ("schedule", raw.schedule.get(MAX_TABLES).map(S::span)),
            ("selftest", raw.selftest.get(MAX_TABLES).map(S::span)),
        ] {
            if let Some(span) = over {
                return Err(self.err(
                    span,
                    format!("more than {MAX_TABLES} [[{what}]] tables; split the fleet over several daemons"),
                ));
            }
        }
        let runs = self.runs(raw.runs)?;

        let mut names = Names::default();
        // Identities and file targets seen so far: two tables must not be one device.
        let mut devices = Names::default();
        let mut drives = Vec::with_capacity(raw.drive.len());
        for d in raw.drive {
            let r = d.get_ref();
            let name_span = r
                .name
                .as_ref()
                .or(r.serial.as_ref())
                .map_or(d.span(), S::span);
            let ids = [("serial", &r.serial), ("wwn", &r.wwn), ("by_id", &r.by_id)];
            let mut keys: Vec<(String, Range<usize>)> = ids
                .into_iter()
                .filter_map(|(k, v)| {
                    v.as_ref()
                        .map(|v| (format!("{k} {}", v.get_ref().trim()), v.span()))
                })
                .collect();
            if let Some(t) = &r.file_target {
                let path = &t.get_ref().path;
                keys.push((format!("file_target path {}", path.get_ref()), path.span()));
            }
            let drive = self.drive(d.into_inner(), name_span.clone())?;
            names.add(self, "drive", "name", &drive.name, name_span)?;
            for (key, span) in keys {
                devices.add(self, "drive", "", &key, span)?;
            }
            drives.push(drive);
        }

        let mut probes = Vec::with_capacity(raw.probe.len());
        let mut probe_names = Names::default();
        for p in raw.probe {
            let (span, name_span) = (p.span(), p.get_ref().name.span());
            let probe = self.probe(p.into_inner(), span, &drives)?;
            probe_names.add(self, "probe", "name", &probe.name, name_span)?;
            probes.push(probe);
        }

        let mut schedules = Vec::with_capacity(raw.schedule.len());
        let mut schedule_names = Names::default();
        let mut fio_labels: Vec<FioLabel> = Vec::new();
        for s in raw.schedule {
            let name_span = s.get_ref().name.span();
            let fio_span = s.get_ref().fio_job.as_ref().map(S::span);
            let schedule = self.schedule(s.into_inner(), &drives)?;
            schedule_names.add(self, "schedule", "name", &schedule.name, name_span)?;
            if let (Some(file), Some(span)) = (&schedule.fio_job, fio_span) {
                self.fio_label(&mut fio_labels, &schedule, file, span)?;
            }
            schedules.push(schedule);
        }

        let mut selftests = Vec::with_capacity(raw.selftest.len());
        let mut selftest_names = Names::default();
        for t in raw.selftest {
            let name_span = t.get_ref().name.span();
            let st = self.selftest(t.into_inner(), &drives)?;
            // One namespace with the schedules: both keep their bookkeeping in the
            // state's `schedules` under NAME/DRIVE.
            if schedules.iter().any(|s: &Schedule| s.name == st.name) {
                return Err(self.err(
                    name_span,
                    format!(
                        "selftest '{}' has the name of a [[schedule]]; give it a name of its own",
                        st.name
                    ),
                ));
            }
            selftest_names.add(self, "selftest", "name", &st.name, name_span)?;
            selftests.push(st);
        }

        let mut discovery = self.discovery(raw.discovery)?;
        // Not root, the raw devices cannot be opened for a canary: health only, of the
        // disks this user may open (as the built-in config does).
        discovery.health_only = !rustix::process::geteuid().is_root();
        Ok(Config {
            server: Server { listen },
            state_dir,
            health_interval,
            health_detail_metrics,
            wear_budget,
            runs,
            drives,
            probes,
            schedules,
            selftests,
            discovery,
            discovered: Default::default(),
            gone: Default::default(),
        })
    }

    /// `[discovery]`: on, every key at its default, when the section is absent (an
    /// empty config file, such as the package's commented one, watches every drive);
    /// `enabled = false` turns it off.
    fn discovery(&self, raw: Option<S<raw::RawDiscovery>>) -> R<Discovery> {
        let Some(raw) = raw else {
            return Ok(Discovery::default());
        };
        let raw = raw.into_inner();
        let mut d = Discovery::default();
        if let Some(e) = &raw.enabled {
            d.enabled = *e.get_ref();
        }
        if let Some(s) = &raw.rescan_interval {
            d.rescan_interval = self.duration(s, "rescan_interval", RESCAN_INTERVAL_RANGE)?;
        }
        if let Some(s) = &raw.drop_after {
            d.drop_after = self.duration(s, "drop_after", DROP_AFTER_RANGE)?;
        }
        if let Some(m) = &raw.max_drives {
            let v = *m.get_ref();
            if !(1..=MAX_DISCOVERED as i64).contains(&v) {
                return Err(self.err(
                    m.span(),
                    format!("max_drives {v} is out of range; give 1 to {MAX_DISCOVERED}"),
                ));
            }
            d.max_drives = v as usize;
        }
        if let Some(b) = &raw.include_loop {
            d.include_loop = *b.get_ref();
        }
        if let Some(b) = &raw.raid {
            d.raid = *b.get_ref();
        }
        let filters = |f: &Option<raw::RawFilters>, table: &str| -> R<DiscoveryFilters> {
            let Some(f) = f else {
                return Ok(DiscoveryFilters::default());
            };
            let re = |s: &Option<S<String>>, key: &str| -> R<Option<regex::Regex>> {
                s.as_ref()
                    .map(|s| {
                        regex::RegexBuilder::new(s.get_ref())
                            .size_limit(1 << 20)
                            .build()
                            .map_err(|e| {
                                self.err(
                                    s.span(),
                                    format!("[discovery.{table}] {key} is not a regular expression ({}); write one such as \"^nvme\"", one_line(&e.to_string())),
                                )
                            })
                    })
                    .transpose()
            };
            Ok(DiscoveryFilters {
                name: re(&f.name, "name")?,
                model: re(&f.model, "model")?,
                serial: re(&f.serial, "serial")?,
                transport: re(&f.transport, "transport")?,
            })
        };
        d.include = filters(&raw.include, "include")?;
        d.exclude = filters(&raw.exclude, "exclude")?;
        if let Some(c) = &raw.canary {
            let classes = [&c.hdd, &c.ssd, &c.nvme, &c.virtual_];
            for (i, (class, given)) in Class::ALL.iter().zip(classes).enumerate() {
                let Some(given) = given else { continue };
                if let Some(r) = &given.rate_iops {
                    let v = *r.get_ref();
                    let (lo, hi) = PROBE_IOPS_RANGE;
                    if !(v.is_finite() && v >= lo && v <= hi) {
                        return Err(self.err(
                            r.span(),
                            format!("[discovery.canary.{}] rate_iops {v} is out of range; give {lo} to {hi}", class.name()),
                        ));
                    }
                    d.canary[i].rate_iops = v;
                }
                if let Some(w) = &given.window {
                    d.canary[i].window = self.duration(w, "window", PROBE_WINDOW_RANGE)?;
                }
            }
        }
        Ok(d)
    }

    fn wear_budget(&self, raw: Option<raw::RawWearBudget>) -> R<WearBudget> {
        let mut w = WearBudget::default();
        let Some(raw) = raw else { return Ok(w) };
        if let Some(s) = raw.share_of_rated_dwpd {
            w.share_of_rated_dwpd = self.fraction(
                &s,
                "share_of_rated_dwpd",
                "0.05 for 5% of the rated drive writes per day",
            )?;
        }
        if let Some(s) = raw.unrated_bytes_per_day {
            w.unrated_bytes_per_day =
                self.size_at_most(&s, "unrated_bytes_per_day", MAX_TARGET_BYTES)?;
        }
        if let Some(s) = raw.period {
            let d = self.duration(&s, "period", WEAR_PERIOD_RANGE)?;
            if d.as_secs() % 86_400 != 0 {
                return Err(self.err(
                    s.span(),
                    format!("period '{}' is not a whole number of days; the writes are kept per UTC day: give days, such as \"30d\"", s.get_ref()),
                ));
            }
            w.period_days = (d.as_secs() / 86_400) as u32;
        }
        if let Some(s) = raw.scheduled_share_of_rated_writes {
            w.scheduled_share_of_rated_writes = self.fraction(
                &s,
                "scheduled_share_of_rated_writes",
                "0.25 for a quarter of the drive's rated writes over the period",
            )?;
        }
        if let Some(s) = raw.scheduled_unrated_bytes {
            w.scheduled_unrated_bytes =
                self.size_at_most(&s, "scheduled_unrated_bytes", MAX_TARGET_BYTES)?;
        }
        Ok(w)
    }

    /// A share: more than 0 and at most 1; `example` completes "such as ...".
    fn fraction(&self, s: &S<f64>, key: &str, example: &str) -> R<f64> {
        let v = *s.get_ref();
        if v > 0.0 && v <= 1.0 {
            return Ok(v);
        }
        Err(self.err(
            s.span(),
            format!("{key} {v} is out of range; give a fraction more than 0 and at most 1, such as {example}"),
        ))
    }

    fn runs(&self, raw: Option<raw::RawRuns>) -> R<RunsRetention> {
        let mut r = RunsRetention::default();
        let Some(raw) = raw else { return Ok(r) };
        if let Some(s) = raw.keep_documents {
            let v = *s.get_ref();
            if !(1..=crate::schedule::state::MAX_RUNS as i64).contains(&v) {
                return Err(self.err(
                    s.span(),
                    format!(
                        "keep_documents {v} is out of range; give a count from 1 to {}",
                        crate::schedule::state::MAX_RUNS
                    ),
                ));
            }
            r.keep_documents = v as usize;
        }
        if let Some(s) = raw.keep_bytes {
            let v = self.size(&s, "keep_bytes")?;
            if v < 1 << 20 {
                return Err(self.err(
                    s.span(),
                    format!("keep_bytes {v} is too small; give at least \"1MiB\" (a result document takes tens of KiB)"),
                ));
            }
            r.keep_bytes = v;
        }
        Ok(r)
    }

    /// One drive; `span` is where to point when the problem is the table as a whole.
    fn drive(&self, d: raw::RawDrive, span: Range<usize>) -> R<Drive> {
        let identity = self.drive_identity(&d)?;
        let name = self.drive_name(&d, span.clone())?;
        let path = d
            .path
            .as_ref()
            .map(|p| self.abs_path(p, "path"))
            .transpose()?;
        let file_target = self.file_target(&d.file_target)?;
        let destructive = d.destructive.as_ref().is_some_and(|s| *s.get_ref());
        let smartctl_type = match &d.smartctl_type {
            None => None,
            Some(t) => Some(
                smartctl_type(t.get_ref())
                    .map_err(|e| self.err(t.span(), format!("smartctl_type {e}")))?,
            ),
        };
        if identity.is_none() && file_target.is_none() {
            return Err(self.err(
                span,
                format!("drive '{name}' has no stable identity; add serial, wwn or by_id (device paths move between boots), or a file_target"),
            ));
        }
        if destructive && !matches!(identity, Some(Identity::Serial(_) | Identity::Wwn(_))) {
            let at = d.destructive.as_ref().map_or(span, |s| s.span());
            return Err(self.err(
                at,
                format!("drive '{name}' is destructive but has no serial or wwn to check the device against before writing; add serial = \"...\" or wwn = \"...\""),
            ));
        }
        let (rating, rated) = self.drive_ratings(&d)?;
        Ok(Drive {
            name,
            identity,
            path,
            destructive,
            file_target,
            rating,
            rated,
            smartctl_type,
        })
    }

    /// A drive's identity: at most one of serial, wwn and by_id, each a single word.
    fn drive_identity(&self, d: &raw::RawDrive) -> R<Option<Identity>> {
        const BY_ID: &str = "/dev/disk/by-id/";
        type Make = fn(String) -> Identity;
        let ids: [(&str, &Option<S<String>>, Make); 3] = [
            ("serial", &d.serial, Identity::Serial),
            ("wwn", &d.wwn, Identity::Wwn),
            ("by_id", &d.by_id, |v| Identity::ById(PathBuf::from(v))),
        ];
        let mut given = ids
            .iter()
            .filter_map(|&(key, v, make)| v.as_ref().map(|v| (key, v, make)));
        let first = given.next();
        if let Some((key, s, _)) = given.next() {
            return Err(self.err(
                s.span(),
                format!("{key} is a second identity for this drive; give only one of serial, wwn and by_id"),
            ));
        }
        let identity = match first {
            None => None,
            Some((key, s, make)) => {
                let v = s.get_ref().trim();
                if v.is_empty() || v.chars().any(char::is_whitespace) {
                    return Err(self.err(
                        s.span(),
                        format!("{key} '{}' is empty or has spaces; copy it from `driveprobe health DEV` or ls -l /dev/disk/by-id", s.get_ref()),
                    ));
                }
                if key == "by_id" {
                    // One link right in the folder: no `..`, `.` or further `/` that
                    // would lead the daemon elsewhere.
                    let link = v.strip_prefix(BY_ID).unwrap_or("");
                    if link.is_empty() || link.contains(['/', '\0']) || link == "." || link == ".."
                    {
                        return Err(self.err(
                            s.span(),
                            format!("by_id '{v}' is not under {BY_ID} as one link; give the full path of one of the links there (no '..' and no further '/')"),
                        ));
                    }
                }
                Some(make(v.to_string()))
            }
        };
        Ok(identity)
    }

    /// A drive's label: its `name`, or else its serial; `span` is the table, for neither.
    fn drive_name(&self, d: &raw::RawDrive, span: Range<usize>) -> R<String> {
        let name = match (&d.name, &d.serial) {
            (Some(n), _) => self.name(n, "drive")?,
            (None, Some(s)) => self.name(s, "drive").map_err(|_| {
                self.err(
                    s.span(),
                    format!("serial '{}' cannot be the drive label (letters, digits, '-', '_', '.', ':' only); add name = \"...\"", s.get_ref()),
                )
            })?,
            (None, None) => {
                return Err(self.err(
                    span,
                    "this drive has no name; add name = \"...\" (the drive label on metrics; the serial is the default)",
                ))
            }
        };
        Ok(name)
    }

    /// A drive's `file_target`: an absolute path driveprobe may own, and a whole-block size.
    fn file_target(&self, t: &Option<S<raw::RawFileTarget>>) -> R<Option<FileTarget>> {
        let file_target = match t {
            None => None,
            Some(t) => {
                let t = t.get_ref();
                let size = self.size_at_most(&t.size, "file_target size", MAX_TARGET_BYTES)?;
                if size % 4096 != 0 {
                    return Err(self.err(
                        t.size.span(),
                        format!("file_target size {size} bytes is not a multiple of 4 KiB (O_DIRECT needs whole blocks); round it, such as \"4GiB\""),
                    ));
                }
                let path = self.abs_path(&t.path, "file_target path")?;
                // An existing file driveprobe did not create, or a link on the way, is
                // refused here too, not only when the daemon opens it.
                if let Err(e) = crate::target::check_own_file_path(&path) {
                    return Err(self.err(t.path.span(), format!("file_target path {e}")));
                }
                Some(FileTarget { path, size })
            }
        };
        Ok(file_target)
    }

    /// A drive's datasheet figures: its endurance rating and its rated performance.
    fn drive_ratings(&self, d: &raw::RawDrive) -> R<(Rating, Rated)> {
        let rating = Rating {
            tbw_bytes: self.rated_size(
                &d.rated_tbw_bytes,
                "rated_tbw_bytes",
                units::Rating::Written,
            )?,
            dwpd: self.rated_positive(&d.rated_dwpd, "rated_dwpd", 1_000.0)?,
            warranty_years: self.rated_positive(&d.warranty_years, "warranty_years", 100.0)?,
            mtbf_hours: self.rated_positive(&d.rated_mtbf_hours, "rated_mtbf_hours", 1e9)?,
        };
        if let (Some(s), None) = (&d.rated_dwpd, rating.warranty_years) {
            return Err(self.err(
                s.span(),
                "rated_dwpd needs warranty_years to give rated bytes; add warranty_years = 5 (or what the datasheet says)",
            ));
        }
        let rated = Rated {
            read_iops_4k: self.rated_positive(&d.rated_read_iops_4k, "rated_read_iops_4k", 1e9)?,
            write_iops_4k: self.rated_positive(
                &d.rated_write_iops_4k,
                "rated_write_iops_4k",
                1e9,
            )?,
            seq_read_bytes_per_second: self.rated_size(
                &d.rated_seq_read_bw,
                "rated_seq_read_bw",
                units::Rating::PerSecond,
            )?,
            seq_write_bytes_per_second: self.rated_size(
                &d.rated_seq_write_bw,
                "rated_seq_write_bw",
                units::Rating::PerSecond,
            )?,
        };
        Ok((rating, rated))
    }

    /// A datasheet number, if given: more than 0 and at most `max`.
    fn rated_positive(&self, s: &Option<S<f64>>, key: &str, max: f64) -> R<Option<f64>> {
        match s {
            None => Ok(None),
            Some(s) if s.get_ref().is_finite() && *s.get_ref() > 0.0 && *s.get_ref() <= max => {
                Ok(Some(*s.get_ref()))
            }
            Some(s) => Err(self.err(
                s.span(),
                format!(
                    "{key} {} must be a number more than 0 and at most {max}; give the datasheet figure",
                    s.get_ref()
                ),
            )),
        }
    }

    /// A datasheet size, if given, in bytes: with its unit, and at most 1 EiB.
    fn rated_size(&self, s: &Option<S<String>>, key: &str, kind: units::Rating) -> R<Option<f64>> {
        // A rating needs its unit: a bare "600" would be 600 bytes.
        s.as_ref()
            .map(|s| {
                if let Err(e) = units::parse_rated_size(s.get_ref(), kind) {
                    return Err(self.err(s.span(), format!("{key}: {e}")));
                }
                self.size_at_most(s, key, MAX_RATED_BYTES).map(|v| v as f64)
            })
            .transpose()
    }

    fn probe(&self, p: raw::RawProbe, span: Range<usize>, drives: &[Drive]) -> R<Probe> {
        let name = self.name(&p.name, "probe")?;
        let window = match &p.window {
            Some(w) => self.duration(w, "window", PROBE_WINDOW_RANGE)?,
            None => DEFAULT_PROBE_WINDOW,
        };
        let wl_span = p.workload.span();
        let w = p.workload.into_inner();
        let pattern = match &w.pattern {
            None => Pattern::Random,
            Some(s) => match s.get_ref().as_str() {
                "random" => Pattern::Random,
                "sequential" => Pattern::Sequential,
                other => {
                    return Err(self.err(
                        s.span(),
                        format!(
                            "pattern '{other}' is not known; give \"random\" or \"sequential\""
                        ),
                    ))
                }
            },
        };
        let sizes = match &w.block_size {
            None => SizeMix::single(4096),
            Some(s) => SizeMix::parse(s.get_ref()),
        }
        .map_err(|e| {
            let at = w.block_size.as_ref().map_or(wl_span.clone(), |s| s.span());
            self.err(
                at,
                format!("block_size: {e}; give a multiple of 512 bytes such as \"4KiB\", or a mix such as \"4k:70,8k:30\""),
            )
        })?;
        let int = |s: &Option<S<i64>>, key: &str, default: u32, lo: u32, hi: u32| -> R<u32> {
            match s {
                None => Ok(default),
                Some(s) => u32::try_from(*s.get_ref())
                    .ok()
                    .filter(|v| (lo..=hi).contains(v))
                    .ok_or_else(|| {
                        self.err(
                            s.span(),
                            format!("{key} {} is out of range; give {lo} to {hi}", s.get_ref()),
                        )
                    }),
            }
        };
        let read_pct = int(&w.read_pct, "read_pct", 100, 0, 100)?;
        let depth = int(&w.depth, "depth", 1, 1, 4096)?;
        let iops = match &w.rate_iops {
            None => DEFAULT_PROBE_IOPS,
            Some(s)
                if s.get_ref().is_finite()
                    && (PROBE_IOPS_RANGE.0..=PROBE_IOPS_RANGE.1).contains(s.get_ref()) =>
            {
                *s.get_ref()
            }
            Some(s) => {
                return Err(self.err(
                    s.span(),
                    format!(
                        "rate_iops {} is out of range (probes are rate limited canaries); give the canary's I/O rate from {} to {}, such as 50",
                        s.get_ref(),
                        PROBE_IOPS_RANGE.0,
                        PROBE_IOPS_RANGE.1
                    ),
                ))
            }
        };
        let arrival = match &w.arrival {
            None => Arrival::Poisson,
            Some(s) => match s.get_ref().as_str() {
                "poisson" => Arrival::Poisson,
                "linear" => Arrival::Linear,
                other => {
                    return Err(self.err(
                        s.span(),
                        format!("arrival '{other}' is not known; give \"poisson\" or \"linear\""),
                    ))
                }
            },
        };
        if w.verify && read_pct == 100 {
            let at = w.read_pct.as_ref().map_or(wl_span.clone(), S::span);
            return Err(self.err(
                at,
                "verify checks data the probe itself wrote, and this probe only reads; give read_pct below 100, or leave verify out",
            ));
        }
        let job = JobSpec {
            pattern,
            sizes,
            read_pct,
            depth,
            workers: 1,
            stop: Stop::Time(window),
            rate: Some(RateLimit { iops, arrival }),
            verify: w.verify,
            // Not confined to a CPU, like the built-in canary (see `canary_job`).
            cpu_policy: CpuPolicy::Shared,
            ..JobSpec::default()
        }
        .validate()
        .map_err(|e| self.err(wl_span.clone(), format!("workload: {e}")))?;
        let writes = job.writes();

        let (drive_names, list_span) = match &p.drives {
            Some(list) => (self.drive_list(list, drives, "probe", &name)?, list.span()),
            None => (drives.iter().map(|d| d.name.clone()).collect(), span),
        };
        // A write refused on drives the probe took by default is the read share's doing.
        let write_span = match (&p.drives, &w.read_pct) {
            (None, Some(r)) => r.span(),
            _ => list_span.clone(),
        };
        let selected: HashSet<&str> = drive_names.iter().map(String::as_str).collect();
        if drive_names.is_empty() {
            return Err(self.err(
                list_span,
                format!("probe '{name}' covers no drive; add a [[drive]] table"),
            ));
        }
        if writes {
            if let Some(d) = drives
                .iter()
                .find(|d| selected.contains(d.name.as_str()) && !d.writable())
            {
                return Err(self.err(
                    write_span,
                    format!(
                        "probe '{name}' writes (read_pct {read_pct}) but drive '{}' has no file_target and is not destructive; make the probe read-only (read_pct = 100), give the drive a file_target, or set destructive = true on it",
                        d.name
                    ),
                ));
            }
        }
        Ok(Probe {
            name,
            drives: drive_names,
            job,
            window,
            writes,
        })
    }

    fn schedule(&self, s: raw::RawSchedule, drives: &[Drive]) -> R<Schedule> {
        let name = self.name(&s.name, "schedule")?;
        let drive_names = self.drive_list(&s.drives, drives, "schedule", &name)?;
        let selected: HashSet<&str> = drive_names.iter().map(String::as_str).collect();
        let runs = self.schedule_runs(&s, &name)?;
        self.schedule_writable(&s, &name, runs, drives, &selected)?;
        let (suite, fio_job) = match runs {
            Ok(f) => {
                if let Some(sc) = &s.scale {
                    return Err(self.err(
                        sc.span(),
                        "scale applies to built-in suites, and this schedule runs a fio job file (its jobs set their own runtime); remove scale",
                    ));
                }
                let targets: Vec<&Drive> = drives
                    .iter()
                    .filter(|d| selected.contains(d.name.as_str()))
                    .collect();
                let path = self.fio_job(f, &targets)?;
                (fio_job_label(&path), Ok(Some(path)))
            }
            Err(suite_s) => {
                let suite = suite_s.get_ref().trim().to_string();
                self.builtin_suite(&suite, suite_s.span(), drives, &drive_names)?;
                (suite, Err(suite_s.span()))
            }
        };
        let scale = match &s.scale {
            None => Scale::named(DEFAULT_SCALE),
            Some(sc) => Scale::named(sc.get_ref().trim()),
        }
        .map_err(|e| {
            let at = s.scale.as_ref().map_or(0..0, |sc| sc.span());
            self.err(at, format!("scale: {e}"))
        })?;
        let fio_job = match fio_job {
            Err(suite_span) => {
                self.suite_qos_fits(&s, &name, &suite, &scale, suite_span)?;
                None
            }
            Ok(f) => f,
        };
        let cron = s.cron.get_ref().trim().to_string();
        crate::schedule::cron::Cron::parse(&cron)
            .map_err(|e| self.err(s.cron.span(), e.to_string()))?;
        let max_duration = self.duration(&s.max_duration, "max_duration", MAX_DURATION_RANGE)?;
        let window = s.window.map(|w| self.window(w.into_inner())).transpose()?;
        let wear_budget = self.schedule_wear_budget(&s.wear_budget)?;
        let hist_digits = self.hist_digits(&s.hist_digits)?;
        Ok(Schedule {
            name,
            drives: drive_names,
            suite,
            fio_job,
            scale,
            cron,
            window,
            max_duration,
            wear_budget,
            hist_digits,
        })
    }

    /// What a schedule runs: a fio job file (`Ok`) or a built-in suite (`Err`), exactly one.
    fn schedule_runs<'s>(
        &self,
        s: &'s raw::RawSchedule,
        name: &str,
    ) -> R<Result<&'s S<String>, &'s S<String>>> {
        let runs = match (&s.suite, &s.fio_job) {
            (Some(_), Some(f)) => {
                return Err(self.err(
                    f.span(),
                    format!("schedule '{name}' gives both suite and fio_job; give one of them: a built-in suite, or a fio job file"),
                ))
            }
            (None, None) => {
                return Err(self.err(
                    s.name.span(),
                    format!("schedule '{name}' says nothing to run; add suite = \"NAME\" (a built-in suite) or fio_job = \"FILE\" (a fio job file)"),
                ))
            }
            (None, Some(f)) => Ok(f),
            (Some(suite), None) => Err(suite),
        };
        Ok(runs)
    }

    /// Refuses a schedule on a selected drive that may not be written.
    fn schedule_writable(
        &self,
        s: &raw::RawSchedule,
        name: &str,
        runs: Result<&S<String>, &S<String>>,
        drives: &[Drive],
        selected: &HashSet<&str>,
    ) -> R<()> {
        // Every suite writes. A fio job file is gated the same way, even one whose jobs
        // all say `rw=read`: fio itself lays out (writes) a file target smaller than a
        // job's `size`, and what a job does (trims, verify phases, `readwrite=`,
        // `rw_sequencer`, options added in later fio versions) is fio's to interpret,
        // not ours. So the target is opened through the write gate (which also makes the
        // run refuse a mounted or held raw device), the canaries pause and fio's writes
        // count against the wear budget, whatever the file says. On a raw device that
        // takes `destructive = true`, which itself needs a serial or wwn to check the
        // device against before writing (see `drive`).
        if let Some(d) = drives
            .iter()
            .find(|d| selected.contains(d.name.as_str()) && !d.writable())
        {
            let what = match runs {
                Ok(_) => "a fio job file, which may write,",
                Err(_) => "a suite, which writes,",
            };
            return Err(self.err(
                s.drives.span(),
                format!(
                    "schedule '{name}' runs {what} on drive '{}', which has no file_target and is not destructive; give the drive a file_target or set destructive = true on it",
                    d.name
                ),
            ));
        }
        Ok(())
    }

    /// Refuses a built-in suite whose QoS table the schedule's scale is too short for.
    fn suite_qos_fits(
        &self,
        s: &raw::RawSchedule,
        name: &str,
        suite: &str,
        scale: &Scale,
        suite_span: Range<usize>,
    ) -> R<()> {
        // A QoS table the scale cannot support fails at every firing: refused here, as
        // the command line refuses it before the target is touched.
        if let Ok(found) = crate::protocol::suite::find(suite) {
            for step in &found.steps {
                if let crate::protocol::suite::Step::Qos(row) = step {
                    crate::protocol::qos::ios_per_probe(row, scale.name).map_err(|e| {
                        let at = s.scale.as_ref().map_or(suite_span.clone(), |sc| sc.span());
                        self.err(
                            at,
                            format!(
                                "schedule '{name}' runs suite '{suite}' at {} scale, too short for its QoS table ({e}); give scale = \"full\"",
                                scale.name
                            ),
                        )
                    })?;
                }
            }
        }
        Ok(())
    }

    /// A schedule's `wear_budget`: the drive's (none given), "unlimited", or a size.
    fn schedule_wear_budget(&self, b: &Option<S<String>>) -> R<ScheduleBudget> {
        let wear_budget = match b {
            None => ScheduleBudget::Drive,
            Some(b) if b.get_ref().trim() == "unlimited" => ScheduleBudget::Unlimited,
            Some(b) => match units::parse_size(b.get_ref()) {
                Ok(v) if v <= MAX_TARGET_BYTES => ScheduleBudget::Bytes(v),
                _ => {
                    return Err(self.err(
                        b.span(),
                        format!(
                            "wear_budget '{}' is neither \"unlimited\" nor a size up to {}; give \"unlimited\" (a burn-in drive: every run is admitted) or the bytes this schedule's runs may write per [wear_budget] period on each drive, such as \"2TB\"",
                            b.get_ref(),
                            human_size(MAX_TARGET_BYTES)
                        ),
                    ))
                }
            },
        };
        Ok(wear_budget)
    }

    /// A schedule's `hist_digits`, if given: the histograms' significant digits, 1 to 3.
    fn hist_digits(&self, d: &Option<S<i64>>) -> R<Option<u8>> {
        let hist_digits = match d {
            None => None,
            Some(d) => {
                let kept = crate::protocol::hist::KEPT_DIGITS;
                match u8::try_from(*d.get_ref()) {
                    Ok(n) if kept.contains(&n) => Some(n),
                    _ => {
                        return Err(self.err(
                            d.span(),
                            format!(
                                "hist_digits {} is not {} to {}; give 3 (the engine's histograms, any percentile within 0.1%), 2 (1%) or 1 (10%), or leave it out",
                                d.get_ref(),
                                kept.start(),
                                kept.end()
                            ),
                        ))
                    }
                }
            }
        };
        Ok(hist_digits)
    }

    fn selftest(&self, t: raw::RawSelfTest, drives: &[Drive]) -> R<SelfTestSchedule> {
        let name = self.name(&t.name, "selftest")?;
        let drive_names = self.drive_list(&t.drives, drives, "selftest", &name)?;
        let kind = SelfTestKind::parse(t.kind.get_ref()).ok_or_else(|| {
            self.err(
                t.kind.span(),
                format!(
                    "selftest '{name}' kind '{}' is not a self-test; give \"short\", \"long\" or \"extended\" (long and extended are the same test)",
                    t.kind.get_ref()
                ),
            )
        })?;
        let cron = t.cron.get_ref().trim().to_string();
        crate::schedule::cron::Cron::parse(&cron)
            .map_err(|e| self.err(t.cron.span(), e.to_string()))?;
        let max_duration = match &t.max_duration {
            Some(m) => self.duration(m, "max_duration", MAX_DURATION_RANGE)?,
            None => match kind {
                SelfTestKind::Short => SELFTEST_SHORT_MAX_DURATION,
                SelfTestKind::Extended => SELFTEST_EXTENDED_MAX_DURATION,
            },
        };
        let window = t.window.map(|w| self.window(w.into_inner())).transpose()?;
        Ok(SelfTestSchedule {
            name,
            drives: drive_names,
            kind,
            cron,
            window,
            max_duration,
        })
    }

    /// A built-in suite: known, and (for an application suite) every drive has a file
    /// target for its data.
    fn builtin_suite(
        &self,
        suite: &str,
        span: Range<usize>,
        drives: &[Drive],
        drive_names: &[String],
    ) -> R<()> {
        let selected: HashSet<&str> = drive_names.iter().map(String::as_str).collect();
        let Ok(found) = crate::protocol::suite::find(suite) else {
            let known: Vec<&str> = crate::protocol::suite::suites()
                .iter()
                .map(|s| s.name)
                .collect();
            return Err(self.err(
                span,
                format!(
                    "no suite named '{suite}'; give one of: {} (or fio_job = \"FILE\" instead of suite, for a fio job file)",
                    known.join(", ")
                ),
            ));
        };
        if let Some(d) = Some(found).filter(|s| s.needs_directory()).and_then(|_| {
            drives
                .iter()
                .find(|d| selected.contains(d.name.as_str()) && d.file_target.is_none())
        }) {
            return Err(self.err(
                span,
                format!(
                    "suite '{suite}' runs an application with its data beside the drive's file_target, and drive '{}' has none; give the drive a file_target",
                    d.name
                ),
            ));
        }
        Ok(())
    }

    /// A fio job file: found (absolute, or relative to the config file's folder),
    /// readable, and through `protocol::fio_job`'s own check with each drive's target put in
    /// (the same check runs again before every run, on the file as it is then).
    fn fio_job(&self, f: &S<String>, drives: &[&Drive]) -> R<PathBuf> {
        let given = f.get_ref().trim();
        if given.is_empty() {
            return Err(self.err(
                f.span(),
                "fio_job is empty; give the path of a fio job file (absolute, or relative to this config file's folder)",
            ));
        }
        let joined = self.base.join(given);
        let path = std::path::absolute(&joined).unwrap_or(joined);
        let text = super::file::read_regular(&path, super::file::MAX_CONFIG_BYTES).map_err(|e| {
            self.err(
                f.span(),
                format!(
                    "fio_job: cannot read {}: {e}; give the path of a readable fio job file (absolute, or relative to this config file's folder)",
                    path.display()
                ),
            )
        })?;
        let label = path.display().to_string();
        for d in drives {
            // A raw device whose path is not known yet (found from its identity at run
            // time) is checked with a stand-in: the job file's rules do not depend on it.
            let target = d
                .file_target
                .as_ref()
                .map(|t| t.path.clone())
                .or_else(|| d.path.clone())
                .unwrap_or_else(|| PathBuf::from("/dev/driveprobe-target"));
            crate::protocol::fio_job::prepare(&text, &label, &target).map_err(|e| {
                let e = e.to_string();
                let advice = if e.contains(';') {
                    ""
                } else {
                    "; fix the job file (driveprobe bench --fio-job FILE TARGET runs it by hand)"
                };
                self.err(f.span(), format!("fio_job: {e}{advice}"))
            })?;
        }
        Ok(path)
    }

    /// Two different job files with one label on one drive would share the run gauges
    /// and be compared with each other by the run-regression alert: refused.
    fn fio_label(
        &self,
        seen: &mut Vec<FioLabel>,
        s: &Schedule,
        file: &Path,
        span: Range<usize>,
    ) -> R<()> {
        let canon = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
        let this = canon(file);
        for o in seen.iter() {
            if o.label == s.suite && o.file != this {
                if let Some(d) = s.drives.iter().find(|d| o.drives.contains(d)) {
                    return Err(self.err(
                        span,
                        format!(
                            "schedule '{}' runs {} on drive '{d}', and schedule '{}' at line {} runs {} there: both would be suite '{}' in the run gauges; rename one of the job files",
                            s.name,
                            this.display(),
                            o.schedule,
                            o.line,
                            o.file.display(),
                            s.suite
                        ),
                    ));
                }
            }
        }
        seen.push(FioLabel {
            label: s.suite.clone(),
            file: this,
            drives: s.drives.clone(),
            schedule: s.name.clone(),
            line: self.line_col(span.start).0,
        });
        Ok(())
    }

    fn window(&self, w: raw::RawWindow) -> R<MaintenanceWindow> {
        let start = self.time_of_day(&w.start, "start")?;
        let end = self.time_of_day(&w.end, "end")?;
        if start == end {
            return Err(self.err(
                w.end.span(),
                "the window ends when it starts; give an end time other than the start (an earlier one runs past midnight)",
            ));
        }
        let days = match &w.days {
            None => Weekday::ALL.to_vec(),
            Some(list) => {
                if list.get_ref().is_empty() {
                    return Err(self.err(list.span(), "days is empty; list days such as [\"SAT\", \"SUN\"], or leave days out for every day"));
                }
                let mut days = Vec::new();
                for d in list.get_ref() {
                    let i = ["MON", "TUE", "WED", "THU", "FRI", "SAT", "SUN"]
                        .iter()
                        .position(|n| n.eq_ignore_ascii_case(d.get_ref().trim()))
                        .ok_or_else(|| {
                            self.err(
                                d.span(),
                                format!(
                                    "'{}' is not a day; give MON, TUE, WED, THU, FRI, SAT or SUN",
                                    d.get_ref()
                                ),
                            )
                        })?;
                    if !days.contains(&Weekday::ALL[i]) {
                        days.push(Weekday::ALL[i]);
                    }
                }
                days
            }
        };
        Ok(MaintenanceWindow { start, end, days })
    }

    fn time_of_day(&self, s: &S<String>, key: &str) -> R<TimeOfDay> {
        let t = s.get_ref().trim();
        let parsed = t.split_once(':').and_then(|(h, m)| {
            let ok = |x: &str| x.len() == 2 && x.bytes().all(|b| b.is_ascii_digit());
            if !(ok(m) && (1..=2).contains(&h.len()) && h.bytes().all(|b| b.is_ascii_digit())) {
                return None;
            }
            let (hour, minute) = (h.parse::<u8>().ok()?, m.parse::<u8>().ok()?);
            (hour < 24 && minute < 60).then_some(TimeOfDay { hour, minute })
        });
        parsed.ok_or_else(|| {
            self.err(s.span(), format!("window {key} '{t}' is not a time of day; write HH:MM, 24-hour, such as \"02:00\""))
        })
    }

    /// Resolves a list of drive names (`"*"` is every drive), refusing unknown ones.
    fn drive_list(
        &self,
        list: &S<Vec<S<String>>>,
        drives: &[Drive],
        what: &str,
        owner: &str,
    ) -> R<Vec<String>> {
        if list.get_ref().is_empty() {
            return Err(self.err(
                list.span(),
                format!(
                    "{what} '{owner}' names no drive; list drive names, or \"*\" for every drive"
                ),
            ));
        }
        if list.get_ref().iter().any(|n| n.get_ref() == "*") {
            return Ok(drives.iter().map(|d| d.name.clone()).collect());
        }
        let known: HashSet<&str> = drives.iter().map(|d| d.name.as_str()).collect();
        let mut listed: HashSet<&str> = HashSet::new();
        let mut out: Vec<String> = Vec::new();
        for n in list.get_ref() {
            let name = n.get_ref();
            if !known.contains(name.as_str()) {
                let known: Vec<&str> = drives.iter().map(|d| d.name.as_str()).collect();
                return Err(self.err(
                    n.span(),
                    format!(
                        "{what} '{owner}' names drive '{name}', which no [[drive]] table defines; give one of: {}",
                        if known.is_empty() { "(none yet: add a [[drive]])".to_string() } else { known.join(", ") }
                    ),
                ));
            }
            if !listed.insert(name.as_str()) {
                return Err(self.err(
                    n.span(),
                    format!("drive '{name}' is listed twice; list it once"),
                ));
            }
            out.push(name.clone());
        }
        Ok(out)
    }

    fn name(&self, s: &S<String>, what: &str) -> R<String> {
        let n = s.get_ref();
        let ok = !n.is_empty()
            && n.len() <= 64
            && n.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.:".contains(c));
        if ok {
            Ok(n.clone())
        } else {
            Err(self.err(
                s.span(),
                format!("{what} name '{n}' is not a short label; use 1 to 64 letters, digits, '-', '_', '.' or ':'"),
            ))
        }
    }

    fn size(&self, s: &S<String>, key: &str) -> R<u64> {
        match units::parse_size(s.get_ref()) {
            Ok(0) => Err(self.err(
                s.span(),
                format!("{key} is 0; give a size more than 0, such as \"4GiB\""),
            )),
            Ok(v) => Ok(v),
            Err(e) => Err(self.err(s.span(), format!("{key}: {e}"))),
        }
    }

    fn duration(&self, s: &S<String>, key: &str, (min, max): (Duration, Duration)) -> R<Duration> {
        match units::parse_duration(s.get_ref()) {
            Ok(d) if d < min => Err(self.err(
                s.span(),
                format!(
                    "{key} '{}' is too short; give at least {}s",
                    s.get_ref(),
                    min.as_secs_f64()
                ),
            )),
            Ok(d) if d > max => Err(self.err(
                s.span(),
                format!(
                    "{key} '{}' is too long; give at most {}",
                    s.get_ref(),
                    human_duration(max)
                ),
            )),
            Ok(d) => Ok(d),
            Err(e) => Err(self.err(s.span(), format!("{key}: {e}"))),
        }
    }

    /// A size (as [`Cx::size`]) of at most `max` bytes.
    fn size_at_most(&self, s: &S<String>, key: &str, max: u64) -> R<u64> {
        let v = self.size(s, key)?;
        if v > max {
            return Err(self.err(
                s.span(),
                format!(
                    "{key} '{}' is too large; give at most {}",
                    s.get_ref(),
                    human_size(max)
                ),
            ));
        }
        Ok(v)
    }

    fn abs_path(&self, s: &S<String>, key: &str) -> R<PathBuf> {
        let p = PathBuf::from(s.get_ref());
        if p.is_absolute() {
            Ok(p)
        } else {
            Err(self.err(
                s.span(),
                format!("{key} '{}' is not an absolute path; write it from /, such as \"/srv/data/.driveprobe\"", s.get_ref()),
            ))
        }
    }
}

/// Names (or identities) seen so far of one kind, with the line of each.
#[derive(Default)]
struct Names(HashMap<String, usize>);

impl Names {
    /// `what` is the kind of table, `key` the kind of value (empty when `value` says it).
    fn add(
        &mut self,
        cx: &Cx<'_>,
        what: &str,
        key: &str,
        value: &str,
        span: Range<usize>,
    ) -> R<()> {
        let line = cx.line_col(span.start).0;
        let value = if key.is_empty() {
            value.to_string()
        } else {
            format!("{key} '{value}'")
        };
        match self.0.insert(value.clone(), line) {
            Some(first) => Err(cx.err(
                span,
                format!("{what} {value} is already used by the {what} at line {first}; each [[{what}]] needs its own"),
            )),
            None => Ok(()),
        }
    }
}

/// A smartctl `-d TYPE` (`sat`, `megaraid,1`, `sat+megaraid,0`, `cciss,3`), trimmed: the
/// check of `[[drive]] smartctl_type` and of `driveprobe health --device-type`. It is
/// passed to smartctl as one argument, so it must not look like an option or hold spaces.
/// The error reads after the key's name: `'X' is not a smartctl -d type; ...`.
pub fn smartctl_type(t: &str) -> Result<String, BadSmartctlType> {
    let v = t.trim();
    let ok = !v.is_empty()
        && v.len() <= 64
        && v.chars().next().is_some_and(|c| c.is_ascii_alphanumeric())
        && v.chars()
            .all(|c| c.is_ascii_alphanumeric() || ",_+-/".contains(c));
    if ok {
        Ok(v.to_string())
    } else {
        Err(BadSmartctlType(t.to_string()))
    }
}

/// A `smartctl -d` type refused by [`smartctl_type`] (what was given, untrimmed). Its
/// message reads after the key's or option's name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("'{0}' is not a smartctl -d type; give one such as \"sat\" or \"megaraid,1\" (see `smartctl --scan-open`)")]
pub struct BadSmartctlType(pub String);

/// The suite label of a schedule that runs the fio job file `path`:
/// `fio-job:STEM`, the file name without its extension, with any character other than
/// a letter, digit, '-', '_' or '.' written as '_' (a label value stays readable).
pub fn fio_job_label(path: &Path) -> String {
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let clean: String = stem
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("{FIO_JOB_SUITE_PREFIX}{clean}")
}

/// `bytes` as the config would write it: `"1PiB"`, `"4GiB"`, `"4096"`.
fn human_size(bytes: u64) -> String {
    for (unit, shift) in [
        ("PiB", 50),
        ("TiB", 40),
        ("GiB", 30),
        ("MiB", 20),
        ("KiB", 10),
    ] {
        if bytes >= 1 << shift && bytes % (1 << shift) == 0 {
            return format!("\"{}{unit}\"", bytes >> shift);
        }
    }
    format!("\"{bytes}\"")
}

/// `d` as the config would write it: `7d`, `24h`, `90s`.
fn human_duration(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        _ if s % 86_400 == 0 => format!("\"{}d\"", s / 86_400),
        _ if s % 3600 == 0 => format!("\"{}h\"", s / 3600),
        _ => format!("\"{s}s\""),
    }
}

impl Cx<'_> {
    /// 1-based line and column (in characters) of a byte offset, as [`line_col`].
    fn line_col(&self, offset: usize) -> (usize, usize) {
        line_col_at(self.text, &self.lines, offset)
    }
}

/// The byte offset where each line of `text` starts.
fn line_starts(text: &str) -> Vec<usize> {
    std::iter::once(0)
        .chain(text.match_indices('\n').map(|(i, _)| i + 1))
        .collect()
}

/// [`line_col`] with the line starts of `text` known: a binary search, and a count of
/// characters on the one line.
fn line_col_at(text: &str, starts: &[usize], offset: usize) -> (usize, usize) {
    let mut o = offset.min(text.len());
    while !text.is_char_boundary(o) {
        o -= 1;
    }
    let line = starts.partition_point(|&s| s <= o).max(1);
    let start = starts[line - 1];
    (line, text[start..o].chars().count() + 1)
}

/// 1-based line and column (in characters) of a byte offset.
#[cfg(test)]
fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let mut o = offset.min(text.len());
    while !text.is_char_boundary(o) {
        o -= 1;
    }
    let before = &text[..o];
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    (
        before.matches('\n').count() + 1,
        before[line_start..].chars().count() + 1,
    )
}

/// Every key name the config defines (the last part of each of [`super::raw::KEYS`]).
fn known_keys() -> Vec<&'static str> {
    super::raw::KEYS
        .iter()
        .map(|k| k.rsplit_once('.').map_or(*k, |(_, leaf)| leaf))
        .collect()
}

fn one_line(s: &str) -> String {
    s.split('\n')
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions() {
        assert_eq!(line_col("ab\ncd", 0), (1, 1));
        assert_eq!(line_col("ab\ncd", 4), (2, 2));
        assert_eq!(line_col("é\nx", 1), (1, 1));
        assert_eq!(line_col("", 99), (1, 1));
        for text in ["ab\ncd", "é\nx", "", "\n\n", "a\n\nbé\n"] {
            let starts = line_starts(text);
            for o in 0..text.len() + 2 {
                assert_eq!(
                    line_col_at(text, &starts, o),
                    line_col(text, o),
                    "{text:?} {o}"
                );
            }
        }
    }
}
