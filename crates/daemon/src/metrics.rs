//! The only module that knows Prometheus: encodes a [`Status`] as OpenMetrics 1.0.0 or the
//! Prometheus text format 0.0.4, with `prometheus-client`'s encoders.
//!
//! A scrape copies numbers out of the status into a [`Snapshot`] (families of series, owned
//! data), registers it as a [`Collector`] in a fresh registry and encodes that registry.
//! Nothing here does I/O on a drive; the only I/O is reading `/proc/self` for the
//! `process_*` families.
//!
//! Rules the families follow (docs/decisions/0001-starting-design.md, "Metrics"):
//! - the prefix `driveprobe_`, base units (seconds, bytes, celsius, ratios 0-1), counters
//!   end in `_total`, identity on one `driveprobe_drive_info` series;
//! - a series is emitted only when its value is known: a `None` in the status is no series,
//!   never a made-up zero; a family with no series is left out (no HELP without samples);
//! - families come sorted by name; series of a family in the order of the status's maps
//!   (drives, probes, suites, collectors, schedules: BTreeMap order);
//! - no value makes rendering fail or panic: NaN and infinities are encoded as such, u128
//!   counters become f64, and a histogram whose bucket counts are not monotone (or do not
//!   match [`LATENCY_BUCKETS`]) is made monotone and capped at its count;
//! - a label set that repeats within a family (two run points with the same workload,
//!   threads and depth) keeps the last value, so the output never holds duplicate series.
//!
//! `driveprobe_probe_latency_quantile_seconds` is a gauge with a `quantile` label (the
//! metrics contract in docs/decisions/0001-starting-design.md). promtool's linter says
//! "non-summary metrics should not have "quantile" label" about it; that is the one lint
//! the golden test allows.
//!
//! Process families: the standard `process_cpu_seconds_total` (from
//! `CLOCK_PROCESS_CPUTIME_ID`), `process_resident_memory_bytes`,
//! `process_virtual_memory_bytes` (`/proc/self/status`), `process_open_fds`
//! (`/proc/self/fd`), `process_max_fds` (`/proc/self/limits`), `process_start_time_seconds`
//! ([`Status::started_unix`]); and `driveprobe_process_threads` (`/proc/self/status`),
//! prefixed because a thread count is not among the standard process metrics of the
//! Prometheus client library guidelines. Each one is left out when it cannot be read.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::hash::BuildHasherDefault;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};

use crate::health::model::Verdict;
use crate::status::{
    DriveStatus, HealthState, OpStatus, ProbeState, ProbeStatus, RunSummary, Status,
    LATENCY_BUCKETS, WINDOW_QUANTILES,
};

/// The label that names a window quantile on `driveprobe_probe_latency_quantile_seconds`.
pub const QUANTILE_LABEL: &str = "quantile";

/// An exposition format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    OpenMetrics,
    Text004,
}

impl Format {
    /// The format a scraper asked for in its `Accept` header: OpenMetrics when
    /// `application/openmetrics-text` is acceptable (q > 0) and preferred at least as much
    /// as anything else listed, else the text format 0.0.4. Versions are not checked; a
    /// q-value that does not parse counts as 1.
    pub fn negotiate(accept: Option<&str>) -> Format {
        let Some(accept) = accept else {
            return Format::Text004;
        };
        let mut om = 0.0f64;
        let mut other = 0.0f64;
        for range in accept.split(',') {
            let mut parts = range.split(';');
            let media = parts.next().unwrap_or("").trim().to_ascii_lowercase();
            if media.is_empty() {
                continue;
            }
            let mut q = 1.0f64;
            for p in parts {
                if let Some((k, v)) = p.split_once('=') {
                    if k.trim().eq_ignore_ascii_case("q") {
                        q = v.trim().parse::<f64>().unwrap_or(1.0);
                        if !q.is_finite() {
                            q = 1.0;
                        }
                        q = q.clamp(0.0, 1.0);
                    }
                }
            }
            if media == "application/openmetrics-text" {
                om = om.max(q);
            } else {
                other = other.max(q);
            }
        }
        if om > 0.0 && om >= other {
            Format::OpenMetrics
        } else {
            Format::Text004
        }
    }

    pub fn content_type(self) -> &'static str {
        match self {
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
            Format::Text004 => "text/plain; version=0.0.4; charset=utf-8",
        }
    }
}

/// The whole `/metrics` payload for `status`, process metrics included.
pub fn render(status: &Status, format: Format) -> String {
    render_opts(status, format, true)
}

/// The `/metrics` payload for `status`; `process` false leaves out the `process_*`
/// families (and `driveprobe_process_threads`), which change from run to run.
pub fn render_opts(status: &Status, format: Format, process: bool) -> String {
    encode(Snapshot::of(status, process), format)
}

/// What a scrape copied out of the status: taken while the status is locked, encoded
/// ([`Frozen::render`]) after the lock is let go, so that the encoding (most of a
/// scrape's time with hundreds of drives) holds no thread that writes the status.
pub struct Frozen {
    snapshot: Snapshot,
    started_unix: f64,
}

/// The status's numbers, without the process families (read at [`Frozen::render`]).
pub fn freeze(status: &Status) -> Frozen {
    Frozen {
        snapshot: Snapshot::of(status, false),
        started_unix: status.started_unix,
    }
}

impl Frozen {
    /// The whole `/metrics` payload, process metrics included: as [`render`] would have
    /// made it at the moment of the [`freeze`].
    pub fn render(self, format: Format) -> String {
        let mut s = self.snapshot;
        s.process(self.started_unix);
        s.health_reads();
        encode(s, format)
    }
}

fn encode(snapshot: Snapshot, format: Format) -> String {
    // Room for the whole payload at once (about 90 bytes a line), not grown by doubling
    // and copying a megabyte at a time with hundreds of drives.
    let lines: usize = snapshot.families.values().map(|f| f.series.len()).sum();
    let mut out = String::with_capacity(lines * 96 + 4096);
    let mut registry = Registry::default();
    registry.register_collector(Box::new(snapshot));
    // Writing to a String cannot fail, and the collector returns no error of its own.
    let _ = match format {
        Format::OpenMetrics => prometheus_client::encoding::text::encode(&mut out, &registry),
        Format::Text004 => {
            prometheus_client::encoding::prometheus_text::encode(&mut out, &registry)
        }
    };
    out
}

// ---------------------------------------------------------------------------------------
// The snapshot: families of series, copied out of the status.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Gauge,
    Counter,
    Histogram,
    /// A gauge of value 1 whose labels carry the data (`*_info`).
    Info,
}

#[derive(Debug, Clone)]
enum Value {
    Gauge(f64),
    Counter(u64),
    CounterF(f64),
    /// Classic histogram: per-bucket (not cumulative) counts, `+Inf` last.
    Histogram {
        sum: f64,
        count: u64,
        buckets: Vec<(f64, u64)>,
    },
    Info,
}

type Labels = Vec<(&'static str, String)>;

#[derive(Debug, Clone)]
struct Series {
    labels: Labels,
    value: Value,
}

#[derive(Debug)]
struct Family {
    /// The full name of the samples, as exposed in the text format 0.0.4.
    name: &'static str,
    help: &'static str,
    kind: Kind,
    series: Vec<Series>,
    /// Index in `series` by the hash of a label set ([`labels_hash`]), so that a
    /// repeated one replaces the first. Keyed by the hash, not by a copy of the labels:
    /// hashing and cloning every label set with SipHash was a fifth of a scrape's time.
    index: HashMap<u64, usize, BuildHasherDefault<HashIsKey>>,
}

/// FNV-1a over the label names and values (with separators): the labels are the
/// daemon's own, speed matters more here than resistance to crafted collisions, and a
/// collision only costs a scan.
fn labels_hash(labels: &Labels) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |bytes: &[u8]| {
        for &b in bytes {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        h ^= 0xff;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    };
    for (k, v) in labels {
        eat(k.as_bytes());
        eat(v.as_bytes());
    }
    h
}

/// A hasher for keys that are hashes already.
#[derive(Default)]
struct HashIsKey(u64);

impl std::hash::Hasher for HashIsKey {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8) ^ u64::from(b);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = v;
    }
}

impl Family {
    fn push(&mut self, labels: Labels, value: Value) {
        let h = labels_hash(&labels);
        match self.index.get(&h) {
            Some(&i) if self.series[i].labels == labels => self.series[i].value = value,
            Some(_) => {
                // Another label set with the same hash: an equal one is found by a scan.
                match self.series.iter_mut().find(|s| s.labels == labels) {
                    Some(s) => s.value = value,
                    None => self.series.push(Series { labels, value }),
                }
            }
            None => {
                self.index.insert(h, self.series.len());
                self.series.push(Series { labels, value });
            }
        }
    }

    /// The name prometheus-client is given (without the `_total`/`_info` it appends, and
    /// without the unit it appends), and the unit for OpenMetrics' `# UNIT` line.
    fn base_and_unit(&self) -> (&'static str, Option<Unit>) {
        let mut base = self.name;
        match self.kind {
            Kind::Counter => base = base.strip_suffix("_total").unwrap_or(base),
            Kind::Info => return (base.strip_suffix("_info").unwrap_or(base), None),
            Kind::Gauge | Kind::Histogram => {}
        }
        // Longest first: `_bytes_per_second` before `_seconds`.
        for unit in ["bytes_per_second", "seconds", "bytes", "celsius", "ratio"] {
            if let Some(b) = base.strip_suffix(unit).and_then(|b| b.strip_suffix('_')) {
                return (b, Some(Unit::Other(unit.to_string())));
            }
        }
        (base, None)
    }
}

/// Every family of one scrape, by name (so that they come out sorted).
#[derive(Debug, Default)]
struct Snapshot {
    families: BTreeMap<&'static str, Family>,
}

impl Snapshot {
    fn add(
        &mut self,
        name: &'static str,
        kind: Kind,
        help: &'static str,
        labels: Labels,
        value: Value,
    ) {
        let f = self.families.entry(name).or_insert_with(|| Family {
            name,
            help,
            kind,
            series: Vec::new(),
            index: HashMap::default(),
        });
        debug_assert_eq!(f.kind, kind, "{name} is added with two types");
        f.push(labels, value);
    }

    fn gauge(&mut self, name: &'static str, help: &'static str, labels: Labels, v: f64) {
        self.add(name, Kind::Gauge, help, labels, Value::Gauge(v));
    }

    fn gauge_opt<T: Into<Num>>(
        &mut self,
        name: &'static str,
        help: &'static str,
        labels: &[(&'static str, String)],
        v: Option<T>,
    ) {
        if let Some(v) = v {
            self.gauge(name, help, labels.to_vec(), v.into().0);
        }
    }

    fn counter(&mut self, name: &'static str, help: &'static str, labels: Labels, v: u64) {
        self.add(name, Kind::Counter, help, labels, Value::Counter(v));
    }

    fn counter_opt(
        &mut self,
        name: &'static str,
        help: &'static str,
        labels: &[(&'static str, String)],
        v: Option<u64>,
    ) {
        if let Some(v) = v {
            self.counter(name, help, labels.to_vec(), v);
        }
    }

    fn counter_u128(&mut self, name: &'static str, help: &'static str, labels: Labels, v: u128) {
        self.add(name, Kind::Counter, help, labels, Value::CounterF(v as f64));
    }

    fn of(status: &Status, process: bool) -> Snapshot {
        let mut s = Snapshot::default();
        s.global(status);
        for (name, d) in &status.drives {
            s.drive(name, d);
        }
        if process {
            s.process(status.started_unix);
            s.health_reads();
        }
        s
    }

    fn global(&mut self, status: &Status) {
        self.add(
            "driveprobe_build_info",
            Kind::Info,
            "The driveprobe build: always 1, with the version, the git revision and the Rust version as labels.",
            vec![
                ("version", crate::version::VERSION.to_string()),
                ("revision", crate::version::REVISION.to_string()),
                ("rustversion", crate::version::RUST_VERSION.to_string()),
            ],
            Value::Info,
        );
        self.gauge(
            "driveprobe_config_last_reload_successful",
            "1 when the last attempt to load the config files (the config and the web config) succeeded, 0 when either was refused (the daemon keeps running on the config and web config it had).",
            vec![],
            bool01(status.config.last_reload_successful),
        );
        self.gauge(
            "driveprobe_state_ledger_held",
            "1 when neither copy of the state file could be read at start: what driveprobe wrote to each drive is unknown, so scheduled runs and write canaries are held and nothing is saved until the operator repairs or moves the files and restarts; 0 otherwise.",
            vec![],
            bool01(status.state.ledger_held.is_some()),
        );
        self.gauge(
            "driveprobe_state_directory_insecure",
            "1 when users other than driveprobe's own may write to its state directory (writable by every user, or owned by another user); 0 otherwise.",
            vec![],
            bool01(status.state.insecure.is_some()),
        );
        self.gauge(
            "driveprobe_config_last_reload_success_timestamp_seconds",
            "Unix time of the last config load that succeeded.",
            vec![],
            status.config.last_reload_success_unix,
        );
        self.gauge(
            "driveprobe_scheduler_last_tick_timestamp_seconds",
            "Unix time of the scheduler's last pass; alert when time() minus this grows: the scheduler is stuck.",
            vec![],
            status.scheduler.last_tick_unix,
        );
        self.counter(
            "driveprobe_thread_start_failures_total",
            "Attempts to start a thread (the scheduler, health polling, a canary) that failed: the limit on tasks (TasksMax=, ulimit -u) reached. Each is retried.",
            vec![],
            status.threads.start_failures_total,
        );
        self.gauge(
            "driveprobe_threads_unstarted",
            "What has no thread now because one could not be started (the scheduler, health polling, a canary each count 1); the status page and /healthz name them. Not 0: drives are not watched as configured.",
            vec![],
            status.threads.unstarted.len() as f64,
        );
        for (schedule, due) in &status.scheduler.next_due {
            self.gauge(
                "driveprobe_schedule_next_run_timestamp_seconds",
                "Unix time at which the schedule is next due to start a run.",
                vec![("schedule", schedule.clone())],
                *due as f64,
            );
        }
        let mut running: BTreeMap<&str, bool> = BTreeMap::new();
        for schedule in status.scheduler.next_due.keys() {
            running.insert(schedule, false);
        }
        for schedule in status.scheduler.running.keys() {
            running.insert(schedule, true);
        }
        for (schedule, on) in running {
            self.gauge(
                "driveprobe_schedule_running",
                "1 while a run started by the schedule is going, else 0.",
                vec![("schedule", schedule.to_string())],
                bool01(on),
            );
        }
        for (schedule, h) in &status.scheduler.held {
            self.gauge(
                "driveprobe_schedule_held",
                "1 while the schedule does not start what it is due for, by reason: selftest (the drive is testing itself), run (another run holds the drive), clock (the wall clock stepped back behind a due time already handled). The status page and /api/v1/scheduler say more.",
                vec![
                    ("schedule", schedule.clone()),
                    ("reason", h.reason.clone()),
                ],
                1.0,
            );
        }
        let clock = &status.scheduler.clock;
        self.counter(
            "driveprobe_clock_steps_total",
            "Steps of the wall clock the scheduler saw: it moved 2 s or more against the monotonic clock between two passes (set by hand or by NTP, or a suspend).",
            vec![],
            clock.steps_total,
        );
        self.gauge(
            "driveprobe_clock_last_step_seconds",
            "The last step of the wall clock the scheduler saw, in seconds (negative: back); 0 before any.",
            vec![],
            clock.last_step_seconds,
        );
        if let Some(d) = &status.discovery {
            for (state, n) in [("watched", d.watched), ("skipped", d.skipped)] {
                self.gauge(
                    "driveprobe_discovery_drives",
                    "Drives discovery's last scan left the daemon watching (listed and discovered), and block devices it skipped (partitions, loop, dm, filtered out...: `driveprobe discover` says why).",
                    vec![("state", state.to_string())],
                    n as f64,
                );
            }
            self.counter(
                "driveprobe_discovery_scans_total",
                "Scans of the host's disks discovery has made (periodic, and on hot-plug).",
                vec![],
                d.scans_total,
            );
            self.gauge(
                "driveprobe_discovery_last_scan_timestamp_seconds",
                "Unix time of discovery's last scan.",
                vec![],
                d.last_scan_unix,
            );
        }
    }

    fn drive(&mut self, name: &str, d: &DriveStatus) {
        self.drive_info(name, d);
        self.drive_states(name, d);
        for (probe, p) in &d.probes {
            self.probe(name, probe, p);
        }
        for (suite, r) in &d.last_runs {
            self.run(name, suite, r);
        }
        if let Some(h) = &d.health {
            self.health(name, h);
            self.link(name, &h.report);
            if !d.health_detail_metrics_off {
                self.health_detail(name, &h.report);
            }
        }
        self.drive_endurance(name, d);
        self.drive_wear(name, d);
        self.self_test(name, d);
        self.drive_collectors(name, d);
    }

    /// The drive's identity (info and capacity) and its disk's load by others.
    fn drive_info(&mut self, name: &str, d: &DriveStatus) {
        let drive = || vec![("drive", name.to_string())];
        let id = &d.identity;
        let (device, path) = device_labels(d);
        self.add(
            "driveprobe_drive_info",
            Kind::Info,
            "The drive's identity, always 1, one series per drive: device (the kernel name, as node_exporter's device label: sda, nvme0n1; for a file target the whole disk under its filesystem; it follows the drive when it moves), serial, wwn, model, firmware, transport and path (the /dev path today) as labels, empty when unknown (device and path are empty while the drive is down). Join on the drive label to add them to other series, on device to join node_exporter's node_disk_* series.",
            vec![
                ("drive", name.to_string()),
                ("device", device),
                ("serial", id.serial.clone().unwrap_or_default()),
                ("wwn", id.wwn.clone().unwrap_or_default()),
                ("model", id.model.clone().unwrap_or_default()),
                ("firmware", id.firmware.clone().unwrap_or_default()),
                ("transport", transport_label(d).to_string()),
                ("path", path),
            ],
            Value::Info,
        );
        self.gauge_opt(
            "driveprobe_drive_capacity_bytes",
            "The drive's capacity in bytes (from the health reader or sysfs).",
            &drive(),
            id.capacity_bytes.map(|c| c as f64),
        );
        if let Some(l) = &d.load {
            self.counter(
                "driveprobe_drive_load_ios_total",
                "I/Os completed on the drive's disk (reads, writes, discards; /proc/diskstats) by others than driveprobe's canaries: the drive's own load, to tell a slow drive from a busy one. Counted from when the daemon started watching the disk.",
                drive(),
                l.others_ios_total,
            );
            self.add(
                "driveprobe_drive_load_busy_seconds_total",
                Kind::Counter,
                "Time the drive's disk was busy (at least one I/O in flight; /proc/diskstats io_ticks) with others' I/O, the canaries' own I/O time taken out; its rate is the busy share, 0 to 1.",
                drive(),
                Value::CounterF(l.others_busy_seconds_total),
            );
            self.gauge(
                "driveprobe_drive_load_in_flight",
                "I/Os in flight on the drive's disk at the last sample (once a second), the canaries' included.",
                drive(),
                l.in_flight as f64,
            );
        }
    }

    /// Whether the drive is up, its discovered class and its health state.
    fn drive_states(&mut self, name: &str, d: &DriveStatus) {
        let drive = || vec![("drive", name.to_string())];
        self.gauge(
            "driveprobe_drive_up",
            "1 when the drive is present and its identity matched, so probes may run on it; 0 when it is absent or another drive is at its path (see the status page for why).",
            drive(),
            bool01(d.up),
        );
        if let Some(x) = &d.discovered {
            self.gauge(
                "driveprobe_drive_class",
                "The drive's class, always 1, for a drive discovery found: hdd (rotational), ssd (SATA/SAS/SCSI, not rotational), nvme, virtual (virtio, Xen, loop, unknown). Its canary's default rate comes from it.",
                vec![
                    ("drive", name.to_string()),
                    ("class", x.class.name().to_string()),
                ],
                1.0,
            );
        }
        for state in HealthState::NAMES {
            self.gauge(
                "driveprobe_health_state",
                "Where health reading of the drive stands, 1 for the current state, 0 for the others: read (the latest attempt succeeded; its figures are the driveprobe_health_* series), failed (the latest attempts failed: see the status page for why; the series keep the last reading), not_read_yet (no attempt yet), not_applicable (a file target with no drive under it, such as tmpfs: nothing to read).",
                vec![("drive", name.to_string()), ("state", state.to_string())],
                bool01(d.health_state.name() == state),
            );
        }
    }

    /// The drive's endurance estimate, when there is one.
    fn drive_endurance(&mut self, name: &str, d: &DriveStatus) {
        let drive = || vec![("drive", name.to_string())];
        if let Some(e) = &d.endurance {
            let l = drive();
            self.gauge_opt(
                "driveprobe_endurance_used_ratio",
                "Share of the drive's rated endurance used, 0-1 (may pass 1): the larger of the vendor's estimate and host bytes written over rated bytes.",
                &l,
                e.used_ratio,
            );
            self.gauge_opt(
                "driveprobe_endurance_projected_wearout_timestamp_seconds",
                "Unix time at which the drive reaches its rated endurance at the observed write rate.",
                &l,
                e.projected_wearout_unix_seconds,
            );
            self.gauge_opt(
                "driveprobe_endurance_drive_writes_per_day",
                "Observed drive writes per day: host bytes written per day over the drive's capacity (from the daemon's history when it spans a day, else lifetime averages).",
                &l,
                e.drive_writes_per_day,
            );
            self.gauge_opt(
                "driveprobe_endurance_rated_drive_writes_per_day",
                "Rated drive writes per day over the warranty, from the datasheet figures in the config. Compare with driveprobe_endurance_drive_writes_per_day.",
                &l,
                e.rated_drive_writes_per_day,
            );
            self.gauge_opt(
                "driveprobe_endurance_write_amplification_ratio",
                "Bytes written to the flash over bytes written by the host (1 is ideal; only drives that report media writes, such as the OCP C0h log).",
                &l,
                e.write_amplification,
            );
        }
    }

    /// What driveprobe wrote to the drive, its wear budgets, and runs skipped for them.
    fn drive_wear(&mut self, name: &str, d: &DriveStatus) {
        let drive = || vec![("drive", name.to_string())];
        let w = &d.wear;
        self.counter_u128(
            "driveprobe_self_written_bytes_total",
            "Bytes driveprobe itself wrote to the drive (probes and runs), since its state file began.",
            drive(),
            w.self_written_bytes_total,
        );
        self.gauge(
            "driveprobe_wear_budget_bytes",
            "Bytes driveprobe's canaries may write to the drive per UTC day (their wear budget; scheduled runs have their own, driveprobe_wear_budget_runs_bytes).",
            drive(),
            w.budget_bytes_per_day,
        );
        self.gauge(
            "driveprobe_wear_budget_used_bytes",
            "Bytes driveprobe's canaries wrote to the drive on the current UTC day, against driveprobe_wear_budget_bytes.",
            drive(),
            w.written_today_bytes as f64,
        );
        self.gauge(
            "driveprobe_wear_budget_exceeded",
            "1 when the canaries' writes today are over their wear budget, so writing canaries on the drive hold until the next UTC day, else 0 (scheduled runs are not affected).",
            drive(),
            bool01(w.exceeded),
        );
        self.gauge(
            "driveprobe_wear_budget_runs_bytes",
            "Bytes scheduled runs may write to the drive over the rolling period driveprobe_wear_budget_runs_period_seconds; a run starts only when its write bound fits what is left (a schedule may have its own wear_budget).",
            drive(),
            w.runs_budget_bytes,
        );
        self.gauge(
            "driveprobe_wear_budget_runs_used_bytes",
            "Bytes scheduled runs wrote to the drive over the rolling period, against driveprobe_wear_budget_runs_bytes.",
            drive(),
            w.runs_written_bytes as f64,
        );
        self.gauge(
            "driveprobe_wear_budget_runs_period_seconds",
            "The rolling period of the scheduled runs' wear budget, in seconds (whole UTC days).",
            drive(),
            w.runs_period_days as f64 * 86_400.0,
        );
        for (schedule, sk) in &d.skipped {
            self.counter(
                "driveprobe_schedule_skipped_total",
                "Scheduled runs on the drive skipped up front since the daemon started, by schedule and reason (wear_budget: the run's write bound did not fit the wear budget left for scheduled runs; the run list says the figures).",
                vec![
                    ("drive", name.to_string()),
                    ("schedule", schedule.clone()),
                    ("reason", sk.reason.clone()),
                ],
                sk.count,
            );
        }
    }

    /// Each collector's last attempt on the drive: success and duration.
    fn drive_collectors(&mut self, name: &str, d: &DriveStatus) {
        for (collector, c) in &d.collectors {
            let l = vec![
                ("drive", name.to_string()),
                ("collector", collector.clone()),
            ];
            self.gauge(
                "driveprobe_collector_success",
                "1 when the collector's last attempt on the drive succeeded, 0 when it failed (its series for the drive keep their last values or are absent).",
                l.clone(),
                bool01(c.success),
            );
            self.gauge(
                "driveprobe_collector_duration_seconds",
                "How long the collector's last attempt on the drive took, in seconds.",
                l,
                c.duration_seconds,
            );
        }
    }

    fn probe(&mut self, drive: &str, probe: &str, p: &ProbeStatus) {
        let l = || vec![("drive", drive.to_string()), ("probe", probe.to_string())];
        self.gauge_opt(
            "driveprobe_probe_rate_iops",
            "The I/Os per second the canary probe is set to (its class default for a discovered drive, or the config's rate_iops).",
            &l(),
            p.rate_iops,
        );
        self.gauge(
            "driveprobe_probe_window_seconds",
            "The window the canary probe's latency quantiles are taken over, in seconds.",
            l(),
            p.window_seconds,
        );
        // All three from the probe's one state: running and paused are never both 1.
        self.gauge(
            "driveprobe_probe_running",
            "1 while the canary probe is issuing I/O to the drive, else 0 (driveprobe_probe_state says why not).",
            l(),
            bool01(p.state.is_running()),
        );
        self.gauge(
            "driveprobe_probe_paused",
            "1 while the canary probe is held on purpose (a scheduled run holds the drive; a rotational disk is in standby and is not woken; or, for a probe that writes, the drive's wear budget is spent), else 0. Never 1 with driveprobe_probe_running.",
            l(),
            bool01(p.state.is_paused()),
        );
        for state in ProbeState::NAMES {
            let mut sl = l();
            sl.push(("state", state.to_string()));
            self.gauge(
                "driveprobe_probe_state",
                "The canary probe's state, 1 for the current one, 0 for the others: starting, running, paused (held on purpose), drive_down, failing (its target cannot be opened or its run failed; retried), stopped.",
                sl,
                bool01(p.state.name() == state),
            );
        }
        self.add(
            "driveprobe_probe_cpu_wait_seconds_total",
            Kind::Counter,
            "Seconds the canary probe's threads spent runnable but waiting for a CPU (from /proc/thread-self/schedstat), summed over its threads. Its rate is the share of the time the host's CPUs kept the probe waiting; that wait counts into the probe's latency.",
            l(),
            Value::CounterF(p.cpu_wait.seconds_total),
        );
        self.gauge_opt(
            "driveprobe_probe_cpu_wait_ratio",
            "The highest share of an interval (1 s) that the canary probe's threads spent waiting for a CPU, over the intervals in its latency window, 0-1. From 0.02 on, and when the wait per I/O in the intervals holding the slowest 1% of I/Os is at least a quarter of the p99 latency, the status page says the latency figures are likely the host's, not the drive's.",
            &l(),
            p.cpu_wait.window_max_ratio,
        );
        if let Some(w) = &p.host_stall {
            self.window_quantiles(
                "driveprobe_probe_host_stall_seconds",
                "The host's part of the canary probe's I/Os, quantiles over its sliding window, in seconds (quantile 1 is the window's maximum): how late each I/O was issued against its due time plus the time its thread waited for a CPU while it was in flight. The drive's own part is driveprobe_probe_latency_quantile_seconds. Absent before the first I/O of a window.",
                &l(),
                w,
            );
        }
        self.op(drive, probe, "read", &p.read);
        if p.writes {
            self.op(drive, probe, "write", &p.write);
        }
    }

    /// One gauge per quantile of a sliding window, `quantile="1"` its maximum.
    fn window_quantiles(
        &mut self,
        name: &'static str,
        help: &'static str,
        labels: &[(&'static str, String)],
        w: &crate::status::WindowQuantiles,
    ) {
        let quantiles = WINDOW_QUANTILES
            .iter()
            .map(|(q, _)| *q)
            .zip(w.quantiles)
            .chain(std::iter::once(("1", w.max)));
        for (q, v) in quantiles {
            let mut lq = labels.to_vec();
            lq.push((QUANTILE_LABEL, q.to_string()));
            self.gauge(name, help, lq, v);
        }
    }

    fn op(&mut self, drive: &str, probe: &str, op: &'static str, o: &OpStatus) {
        let l = vec![
            ("drive", drive.to_string()),
            ("probe", probe.to_string()),
            ("op", op.to_string()),
        ];
        self.add(
            "driveprobe_probe_latency_seconds",
            Kind::Histogram,
            "Latency of the canary probe's I/Os, in seconds: the drive's service time (submission to completion, less the time the thread waited for a CPU meanwhile; a probe the engine runs, a verified write probe or a deeper queue, counts from when each I/O was meant to start). The host's part is driveprobe_probe_host_stall_seconds. Use histogram_quantile over rate() of the buckets; the exact recent quantiles are driveprobe_probe_latency_quantile_seconds.",
            l.clone(),
            histogram(o),
        );
        if let Some(w) = &o.window {
            self.window_quantiles(
                "driveprobe_probe_latency_quantile_seconds",
                "Exact latency quantiles of the canary probe's I/Os over its sliding window, in seconds (quantile 1 is the window's maximum). Absent before the first I/O of a window.",
                &l,
                w,
            );
        }
        self.counter(
            "driveprobe_probe_ops_total",
            "I/Os the canary probe completed on the drive.",
            l.clone(),
            o.ops_total,
        );
        self.counter(
            "driveprobe_probe_bytes_total",
            "Bytes the canary probe transferred to or from the drive.",
            l.clone(),
            o.bytes_total,
        );
        self.counter(
            "driveprobe_probe_errors_total",
            "I/Os of the canary probe that failed (an error from the drive, or a verify mismatch).",
            l,
            o.errors_total,
        );
    }

    fn run(&mut self, drive: &str, suite: &str, r: &RunSummary) {
        let ds = || vec![("drive", drive.to_string()), ("suite", suite.to_string())];
        for p in &r.points {
            let l = vec![
                ("drive", drive.to_string()),
                ("suite", suite.to_string()),
                ("workload", p.workload.clone()),
                ("threads", p.threads.to_string()),
                ("depth", p.depth.to_string()),
            ];
            self.gauge(
                "driveprobe_run_iops",
                "I/Os per second of a measured point of the suite's last finished run on the drive.",
                l.clone(),
                p.iops,
            );
            self.gauge(
                "driveprobe_run_bandwidth_bytes_per_second",
                "Bytes per second of a measured point of the suite's last finished run on the drive.",
                l.clone(),
                p.bandwidth_bytes_per_second,
            );
            let lat = &p.latency;
            for (stat, v) in [
                ("mean", lat.mean),
                ("max", lat.max),
                ("stddev", lat.stddev),
                ("p50", lat.p50),
                ("p99", lat.p99),
                ("p99_9", lat.p99_9),
            ] {
                let mut ls = l.clone();
                ls.push(("stat", stat.to_string()));
                self.gauge(
                    "driveprobe_run_latency_seconds",
                    "Latency of a measured point of the suite's last finished run on the drive, in seconds; stat is mean, max, stddev, p50, p99 or p99_9.",
                    ls,
                    v,
                );
            }
        }
        for p in &r.app_points {
            let l = vec![
                ("drive", drive.to_string()),
                ("suite", suite.to_string()),
                ("workload", p.workload.clone()),
                ("threads", p.threads.to_string()),
            ];
            self.gauge(
                "driveprobe_app_transactions_per_second",
                "Transactions per second (sysbench OLTP) or operations per second (db_bench phase) of an application workload point of the suite's last finished run on the drive.",
                l.clone(),
                p.ops_per_second,
            );
            for (stat, v) in [("mean", p.latency_mean), ("p99", p.latency_p99)] {
                let mut ls = l.clone();
                ls.push(("stat", stat.to_string()));
                self.gauge(
                    "driveprobe_app_latency_seconds",
                    "Latency of an application workload point (a transaction, or a db_bench operation) of the suite's last finished run on the drive, in seconds; stat is mean or p99.",
                    ls,
                    v,
                );
            }
        }
        self.gauge_opt(
            "driveprobe_run_steady_state",
            "1 when every steady-state phase of the suite's last run reached steady state by the SNIA rule, 0 when one gave up. Absent for suites without one.",
            &ds(),
            r.steady_state.map(bool01),
        );
        self.gauge_opt(
            "driveprobe_run_last_success_timestamp_seconds",
            "Unix time at which the last run of the suite on the drive that passed ended.",
            &ds(),
            r.last_success_unix,
        );
        self.gauge(
            "driveprobe_run_duration_seconds",
            "How long the suite's last finished run on the drive took, in seconds.",
            ds(),
            r.duration_seconds,
        );
        self.gauge(
            "driveprobe_run_last_start_timestamp_seconds",
            "Unix time at which the suite's last finished run on the drive started.",
            ds(),
            r.started_unix,
        );
        self.gauge(
            "driveprobe_run_last_passed",
            "1 when the suite's last finished run on the drive passed, 0 when it failed, timed out, was interrupted or stopped.",
            ds(),
            bool01(r.status == "passed"),
        );
        let mut ls = ds();
        ls.push(("status", r.status.clone()));
        let label = if r.reason_label.is_empty() {
            "none"
        } else {
            r.reason_label.as_str()
        };
        ls.push(("reason", label.to_string()));
        self.gauge(
            "driveprobe_run_last_status",
            "Always 1: the status of the suite's last finished run on the drive (passed, failed, timed_out, stopped, interrupted, pending) and why it stopped (reason: none, signal, max_duration, safety_limit, error) as labels; the run list has the sentence.",
            ls,
            1.0,
        );
        self.gauge(
            "driveprobe_run_written_bytes",
            "Bytes the suite's last finished run wrote to the drive.",
            ds(),
            r.written_bytes as f64,
        );
        self.gauge_opt(
            "driveprobe_run_write_bound_bytes",
            "The upper bound of the bytes the suite's last finished run could write, that it was admitted with (against the scheduled runs' wear budget).",
            &ds(),
            r.write_bound_bytes.map(|b| b as f64),
        );
    }

    fn health(&mut self, drive: &str, h: &crate::status::HealthStatus) {
        let l = vec![("drive", drive.to_string())];
        let r = &h.report;
        self.gauge_opt(
            "driveprobe_health_temperature_celsius",
            "The drive's composite temperature, in degrees Celsius.",
            &l,
            r.temperature_celsius,
        );
        self.gauge_opt(
            "driveprobe_health_temperature_warning_celsius",
            "The drive's warning temperature threshold, in degrees Celsius.",
            &l,
            r.temperature_warning_celsius,
        );
        self.gauge_opt(
            "driveprobe_health_temperature_critical_celsius",
            "The drive's critical temperature threshold, in degrees Celsius.",
            &l,
            r.temperature_critical_celsius,
        );
        self.gauge_opt(
            "driveprobe_health_available_spare_ratio",
            "Spare capacity left for worn-out blocks, 0-1 (1 is all of it).",
            &l,
            r.available_spare_ratio,
        );
        self.gauge_opt(
            "driveprobe_health_available_spare_threshold_ratio",
            "The spare level below which the drive itself raises a critical warning, 0-1.",
            &l,
            r.available_spare_threshold_ratio,
        );
        self.gauge_opt(
            "driveprobe_health_percentage_used_ratio",
            "The vendor's estimate of the drive's life used, 0-1; it may pass 1 (NVMe counts up to 2.55).",
            &l,
            r.percentage_used_ratio,
        );
        self.gauge_opt(
            "driveprobe_health_critical_warning",
            "The NVMe critical warning bit field as a number, 0 when nothing is wrong. Bits: 1 spare low, 2 temperature, 4 reliability degraded, 8 read-only, 16 volatile backup failed, 32 persistent memory unreliable.",
            &l,
            r.critical_warning,
        );
        self.gauge_opt(
            "driveprobe_health_smart_passed",
            "1 when the drive's own SMART overall self-assessment passes, 0 when it says FAILED.",
            &l,
            r.smart_passed.map(bool01),
        );
        self.counter_opt(
            "driveprobe_health_media_errors_total",
            "Unrecovered data integrity errors over the drive's life (NVMe media errors, SAS uncorrected errors).",
            &l,
            r.media_errors,
        );
        self.counter_opt(
            "driveprobe_health_error_log_entries_total",
            "Entries in the drive's error log over its life.",
            &l,
            r.error_log_entries,
        );
        self.counter_opt(
            "driveprobe_health_power_on_seconds_total",
            "Time the drive has been powered on over its life, in seconds.",
            &l,
            r.power_on_seconds,
        );
        self.counter_opt(
            "driveprobe_health_power_cycles_total",
            "Power cycles over the drive's life.",
            &l,
            r.power_cycles,
        );
        for (name, help, v) in [
            (
                "driveprobe_health_host_written_bytes_total",
                "Bytes the host wrote to the drive over its life (as the drive counts them; NVMe in units of 512000 bytes).",
                r.host_written_bytes,
            ),
            (
                "driveprobe_health_host_read_bytes_total",
                "Bytes the host read from the drive over its life (as the drive counts them; NVMe in units of 512000 bytes).",
                r.host_read_bytes,
            ),
            (
                "driveprobe_health_media_written_bytes_total",
                "Bytes the drive wrote to its flash over its life (OCP C0h physical media units written), for write amplification.",
                r.media_written_bytes,
            ),
        ] {
            if let Some(v) = v {
                self.counter_u128(name, help, l.clone(), v);
            }
        }
        self.counter_opt(
            "driveprobe_health_unsafe_shutdowns_total",
            "Power losses without a clean shutdown over the drive's life.",
            &l,
            r.unsafe_shutdowns,
        );
        self.counter_opt(
            "driveprobe_health_crc_errors_total",
            "Interface CRC errors (ATA attribute 199): cabling or backplane trouble, not media.",
            &l,
            r.crc_errors,
        );
        self.gauge_opt(
            "driveprobe_health_reallocated_sectors",
            "Sectors the drive has remapped to spares (ATA attribute 5; SAS grown defect list).",
            &l,
            r.reallocated_sectors.map(|v| v as f64),
        );
        self.gauge_opt(
            "driveprobe_health_pending_sectors",
            "Sectors waiting to be remapped after a read failed (ATA attribute 197).",
            &l,
            r.pending_sectors.map(|v| v as f64),
        );
        self.gauge_opt(
            "driveprobe_health_offline_uncorrectable",
            "Sectors found uncorrectable by the drive's offline scan (ATA attribute 198).",
            &l,
            r.offline_uncorrectable.map(|v| v as f64),
        );
        for v in [
            Verdict::Ok,
            Verdict::Warning,
            Verdict::Failing,
            Verdict::Unknown,
        ] {
            self.gauge(
                "driveprobe_health_verdict",
                "driveprobe's health verdict on the drive, as a state set: 1 on the series of the current verdict (ok, warning, failing or unknown), 0 on the others. The reasons are on the status page.",
                vec![("drive", drive.to_string()), ("verdict", v.name().to_string())],
                bool01(h.verdict == v),
            );
        }
        self.gauge(
            "driveprobe_health_read_timestamp_seconds",
            "Unix time of the health reading the driveprobe_health_* series come from.",
            l,
            h.read_unix,
        );
    }

    /// The link's speed and width (issue 20), whatever `health_detail_metrics` says: the
    /// `DriveprobeLinkDegraded` alert compares them.
    fn link(&mut self, drive: &str, r: &crate::health::HealthReport) {
        let Some(link) = &r.link else { return };
        let l = vec![("drive", drive.to_string())];
        self.gauge_opt(
            "driveprobe_link_speed_transfers_per_second",
            "The speed the drive's link trained at, per lane, in transfers per second (a bit each): PCIe 8 GT/s is 8e9 (NVMe, from sysfs), SATA 6.0 Gb/s is 6e9 (from smartctl).",
            &l,
            link.current_speed_transfers_per_second,
        );
        self.gauge_opt(
            "driveprobe_link_max_speed_transfers_per_second",
            "The most the drive's link can run at, per lane, in transfers per second: the lower of the drive's and (PCIe) its port's maximum.",
            &l,
            link.max_speed_transfers_per_second,
        );
        self.gauge_opt(
            "driveprobe_link_width_lanes",
            "The lanes the drive's PCIe link trained with.",
            &l,
            link.current_width.map(f64::from),
        );
        self.gauge_opt(
            "driveprobe_link_max_width_lanes",
            "The most lanes the drive's PCIe link can use: the lower of the drive's and its port's maximum.",
            &l,
            link.max_width.map(f64::from),
        );
    }

    /// Everything else the drive says (issue 20): off with `health_detail_metrics = false`.
    /// At most 30 ATA attributes x 4 + 2 failing counts, 64 Device Statistics entries, 32
    /// PHY counters, 6 self-test kinds x 3, SCSI 17, NVMe 17 series per drive: 236 for a
    /// SATA drive at the most (the budget in docs/alerts.md, "Series per drive").
    fn health_detail(&mut self, drive: &str, r: &crate::health::HealthReport) {
        self.health_detail_ata(drive, r);
        self.health_detail_scsi(drive, r);
        self.health_detail_nvme(drive, r);
        self.health_detail_self_tests(drive, r);
    }

    /// The ATA attributes, failing counts, Device Statistics and SATA PHY counters.
    fn health_detail_ata(&mut self, drive: &str, r: &crate::health::HealthReport) {
        for a in &r.ata_attributes {
            let al = vec![("drive", drive.to_string()), ("attribute", a.label())];
            for (name, help, v) in [
                (
                    "driveprobe_health_ata_attribute_value",
                    "An ATA SMART attribute's normalised value (1-253, higher is better); the attribute label is its id and name.",
                    a.value,
                ),
                (
                    "driveprobe_health_ata_attribute_worst",
                    "An ATA SMART attribute's worst normalised value over the drive's life.",
                    a.worst,
                ),
                (
                    "driveprobe_health_ata_attribute_threshold",
                    "An ATA SMART attribute's threshold: at or below it the attribute has failed (0: it never fails).",
                    a.threshold,
                ),
            ] {
                self.gauge_opt(name, help, &al, v.map(f64::from));
            }
            self.gauge_opt(
                "driveprobe_health_ata_attribute_raw",
                "An ATA SMART attribute's raw value (48 bits; some pack several fields: see the JSON's raw_string).",
                &al,
                a.raw.map(|v| v as f64),
            );
        }
        if !r.ata_attributes.is_empty() {
            for (when, n) in [
                (
                    "now",
                    r.ata_attributes.iter().filter(|a| a.failed_now).count(),
                ),
                (
                    "past",
                    r.ata_attributes.iter().filter(|a| a.failed_in_past).count(),
                ),
            ] {
                self.gauge(
                    "driveprobe_health_ata_attributes_failed",
                    "ATA SMART attributes at or below their threshold: now (value), or at some time in the past (worst). Which ones: the JSON's ata_attributes.",
                    vec![("drive", drive.to_string()), ("when", when.to_string())],
                    n as f64,
                );
            }
        }
        for s in &r.ata_device_statistics {
            self.gauge(
                "driveprobe_health_ata_device_statistic",
                "An entry of the ATA Device Statistics log, by page number and name (counts, temperatures in °C, percentages as the drive gives them).",
                vec![
                    ("drive", drive.to_string()),
                    ("page", s.page.to_string()),
                    ("statistic", s.name.clone()),
                ],
                s.value as f64,
            );
        }
        for p in &r.sata_phy_events {
            self.counter(
                "driveprobe_health_sata_phy_events_total",
                "A SATA PHY event counter (the drive resets them at power on), by id and name.",
                vec![
                    ("drive", drive.to_string()),
                    ("event", format!("{} {}", p.id, p.name)),
                ],
                p.value,
            );
        }
    }

    /// The SCSI error counter log, grown defects and start-stop and load-unload cycles.
    fn health_detail_scsi(&mut self, drive: &str, r: &crate::health::HealthReport) {
        let l = vec![("drive", drive.to_string())];
        if let Some(s) = &r.scsi {
            for (dir, c) in [
                ("read", &s.read),
                ("write", &s.write),
                ("verify", &s.verify),
            ] {
                let Some(c) = c else { continue };
                let dl = vec![("drive", drive.to_string()), ("direction", dir.to_string())];
                self.counter_opt(
                    "driveprobe_health_scsi_corrected_errors_total",
                    "Errors the SCSI drive corrected, by direction (read, write, verify), from its error counter log.",
                    &dl,
                    c.total_corrected,
                );
                self.counter_opt(
                    "driveprobe_health_scsi_uncorrected_errors_total",
                    "Errors the SCSI drive could not correct, by direction, from its error counter log.",
                    &dl,
                    c.total_uncorrected,
                );
                self.counter_opt(
                    "driveprobe_health_scsi_correction_algorithm_invocations_total",
                    "Times the SCSI drive ran its correction algorithm, by direction.",
                    &dl,
                    c.correction_algorithm_invocations,
                );
                if let Some(b) = c.processed_bytes {
                    self.counter_u128(
                        "driveprobe_health_scsi_processed_bytes_total",
                        "Bytes the SCSI drive processed, by direction, from its error counter log.",
                        dl.clone(),
                        b,
                    );
                }
            }
            self.gauge_opt(
                "driveprobe_health_scsi_grown_defects",
                "Entries in the SCSI drive's grown defect list.",
                &l,
                s.grown_defects.map(|v| v as f64),
            );
            self.counter_opt(
                "driveprobe_health_scsi_start_stop_cycles_total",
                "Start-stop cycles over the SCSI drive's life.",
                &l,
                s.start_stop_cycles,
            );
            self.gauge_opt(
                "driveprobe_health_scsi_start_stop_cycles_rated",
                "Start-stop cycles the SCSI drive is specified for over its life.",
                &l,
                s.start_stop_cycles_specified.map(|v| v as f64),
            );
            self.counter_opt(
                "driveprobe_health_scsi_load_unload_cycles_total",
                "Load-unload cycles over the SCSI drive's life.",
                &l,
                s.load_unload_cycles,
            );
            self.gauge_opt(
                "driveprobe_health_scsi_load_unload_cycles_rated",
                "Load-unload cycles the SCSI drive is specified for over its life.",
                &l,
                s.load_unload_cycles_specified.map(|v| v as f64),
            );
        }
    }

    /// The NVMe temperature times, sensors, thermal management, busy time and commands.
    fn health_detail_nvme(&mut self, drive: &str, r: &crate::health::HealthReport) {
        let l = vec![("drive", drive.to_string())];
        if let Some(n) = &r.nvme {
            self.counter_opt(
                "driveprobe_health_nvme_warning_temperature_seconds_total",
                "Time the NVMe drive's composite temperature was at or above its warning threshold, in seconds (the drive counts minutes).",
                &l,
                n.warning_temperature_minutes.map(|m| m.saturating_mul(60)),
            );
            self.counter_opt(
                "driveprobe_health_nvme_critical_temperature_seconds_total",
                "Time the NVMe drive's composite temperature was at or above its critical threshold, in seconds (the drive counts minutes).",
                &l,
                n.critical_temperature_minutes.map(|m| m.saturating_mul(60)),
            );
            for t in &n.temperature_sensors {
                self.gauge(
                    "driveprobe_health_nvme_temperature_sensor_celsius",
                    "An NVMe temperature sensor (1-8), in whole degrees Celsius (kelvin - 273, as smartctl).",
                    vec![
                        ("drive", drive.to_string()),
                        ("sensor", t.sensor.to_string()),
                    ],
                    t.celsius,
                );
            }
            for (i, (tr, secs)) in n
                .thermal_transitions
                .iter()
                .zip(n.thermal_seconds.iter())
                .enumerate()
            {
                let tl = vec![("drive", drive.to_string()), ("level", (i + 1).to_string())];
                self.counter_opt(
                    "driveprobe_health_nvme_thermal_transitions_total",
                    "Times the NVMe controller entered thermal management temperature 1 or 2 (level) to cool down.",
                    &tl,
                    *tr,
                );
                self.counter_opt(
                    "driveprobe_health_nvme_thermal_seconds_total",
                    "Seconds the NVMe controller spent in thermal management temperature 1 or 2 (level).",
                    &tl,
                    *secs,
                );
            }
            self.counter_opt(
                "driveprobe_health_nvme_controller_busy_seconds_total",
                "Time the NVMe controller was busy with I/O commands, in seconds (the drive counts minutes).",
                &l,
                n.controller_busy_minutes.map(|m| m.saturating_mul(60)),
            );
            for (dir, v) in [
                ("read", n.host_read_commands),
                ("write", n.host_write_commands),
            ] {
                self.counter_opt(
                    "driveprobe_health_nvme_host_commands_total",
                    "Read or write commands the NVMe controller completed (direction).",
                    &[("drive", drive.to_string()), ("direction", dir.to_string())],
                    v,
                );
            }
        }
    }

    /// The latest self-test of each kind: failed, when it ran, its first failing LBA.
    fn health_detail_self_tests(&mut self, drive: &str, r: &crate::health::HealthReport) {
        // The newest test of each kind first; behind one that did not finish, the newest
        // that did (`detail::latest_per_kind`): one series per kind.
        for (i, t) in r.self_tests.iter().enumerate() {
            if r.self_tests[..i].iter().any(|o| o.kind == t.kind) {
                continue;
            }
            let finished = r
                .self_tests
                .iter()
                .find(|o| o.kind == t.kind && o.conclusive());
            let tl = vec![("drive", drive.to_string()), ("kind", t.kind.clone())];
            self.gauge(
                "driveprobe_health_self_test_failed",
                "1 when the drive's latest finished self-test of this kind (short, extended, conveyance, selective, vendor) failed, else 0: a later test of the kind aborted, interrupted or still running does not clear it, a later pass does.",
                tl.clone(),
                bool01(finished.is_some_and(|f| f.failed())),
            );
            self.gauge_opt(
                "driveprobe_health_self_test_power_on_seconds",
                "When the drive's latest self-test of this kind ran, in the drive's power-on time (seconds; the drive counts hours), to compare with driveprobe_health_power_on_seconds_total.",
                &tl,
                t.power_on_hours.map(|h| h as f64 * 3600.0),
            );
            self.gauge_opt(
                "driveprobe_health_self_test_first_failing_lba",
                "The first failing LBA of the drive's latest finished self-test of this kind, when it failed and the drive says where.",
                &tl,
                finished.and_then(|f| f.first_failing_lba).map(|v| v as f64),
            );
        }
    }

    /// The drive's self-test now (ours, or one the latest health reading says runs) and
    /// the last one each `[[selftest]]` kind ran. Always exported (not detail).
    fn self_test(&mut self, name: &str, d: &DriveStatus) {
        if !d.up && d.self_test.running.is_none() && d.self_test.last.is_empty() {
            return;
        }
        let drive = || vec![("drive", name.to_string())];
        let from_health = d
            .health
            .as_ref()
            .and_then(|h| h.report.self_test_running.as_ref());
        let (running, kind, done) = match (&d.self_test.running, from_health) {
            (Some(r), _) => (true, r.kind.clone(), r.done_ratio),
            (None, Some(p)) => (true, p.kind.clone(), p.done_ratio),
            (None, None) => (false, String::new(), None),
        };
        let known =
            d.self_test.running.is_some() || d.health.is_some() || !d.self_test.last.is_empty();
        if known {
            self.gauge(
                "driveprobe_selftest_running",
                "1 while the drive runs a self-test (one a [[selftest]] started, or one the latest health reading shows), else 0.",
                drive(),
                bool01(running),
            );
        }
        if running {
            let mut l = drive();
            l.push(("kind", kind));
            self.gauge_opt(
                "driveprobe_selftest_progress_ratio",
                "The share of the running self-test done, 0-1, as the drive last said (absent when the drive does not say: SCSI through smartctl).",
                &l,
                done,
            );
        }
        for (kind, o) in &d.self_test.last {
            let kl = || vec![("drive", name.to_string()), ("kind", kind.clone())];
            let mut ls = kl();
            ls.push(("result", o.result.clone()));
            self.gauge(
                "driveprobe_selftest_last_result",
                "Always 1: the result of the last self-test of this kind a [[selftest]] ran on the drive (passed, failed, aborted, interrupted, timed_out, refused, unknown) as a label; the status API has the drive's words.",
                ls,
                1.0,
            );
            self.gauge(
                "driveprobe_selftest_last_end_timestamp_seconds",
                "Unix time at which the last self-test of this kind a [[selftest]] ran on the drive ended.",
                kl(),
                o.ended_unix,
            );
        }
    }

    fn process(&mut self, started_unix: f64) {
        let cpu = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
        self.add(
            "process_cpu_seconds_total",
            Kind::Counter,
            "Total user and system CPU time spent in seconds.",
            vec![],
            Value::CounterF(cpu.tv_sec as f64 + cpu.tv_nsec as f64 / 1e9),
        );
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        let kib = |key| proc_status_value(&status, key).map(|v| v as f64 * 1024.0);
        self.gauge_opt(
            "process_resident_memory_bytes",
            "Resident memory size in bytes.",
            &[],
            kib("VmRSS"),
        );
        self.gauge_opt(
            "process_virtual_memory_bytes",
            "Virtual memory size in bytes.",
            &[],
            kib("VmSize"),
        );
        self.gauge_opt(
            "driveprobe_process_threads",
            "Number of OS threads in the driveprobe process.",
            &[],
            proc_status_value(&status, "Threads").map(|v| v as f64),
        );
        let fds = std::fs::read_dir("/proc/self/fd")
            .ok()
            .map(|d| d.filter(|e| e.is_ok()).count() as f64);
        self.gauge_opt(
            "process_open_fds",
            "Number of open file descriptors.",
            &[],
            fds,
        );
        let max = std::fs::read_to_string("/proc/self/limits")
            .ok()
            .and_then(|t| max_open_files(&t));
        self.gauge_opt(
            "process_max_fds",
            "Maximum number of open file descriptors.",
            &[],
            max.map(|v| v as f64),
        );
        self.gauge(
            "process_start_time_seconds",
            "Start time of the process since unix epoch in seconds.",
            vec![],
            started_unix,
        );
    }
}

impl Snapshot {
    /// The daemon's health read limiter ([`crate::pacing`]), when it runs.
    fn health_reads(&mut self) {
        let Some(l) = crate::pacing::ReadLimiter::global_if_used() else {
            return;
        };
        let st = l.stats();
        let g = |s: &mut Self, name, help, v: usize| s.gauge(name, help, vec![], v as f64);
        g(
            self,
            "driveprobe_health_reads_limit",
            "Health reads (smartctl runs, NVMe admin reads) the daemon makes at once at most.",
            st.limit,
        );
        g(
            self,
            "driveprobe_health_reads_in_flight",
            "Health reads going on now.",
            st.in_flight,
        );
        g(
            self,
            "driveprobe_health_reads_waiting",
            "Drives whose health read waits for one of the driveprobe_health_reads_limit places.",
            st.waiting,
        );
        g(
            self,
            "driveprobe_health_reads_in_flight_max",
            "The most health reads that went on at once since the daemon started.",
            st.in_flight_max,
        );
        self.counter(
            "driveprobe_health_reads_overdue_total",
            "Health reads that outlived their time limit (a device that does not answer): their place went to the next drive.",
            vec![],
            st.overdue_total,
        );
    }
}

/// A number a gauge can take.
struct Num(f64);

impl From<f64> for Num {
    fn from(v: f64) -> Self {
        Num(v)
    }
}

impl From<u8> for Num {
    fn from(v: u8) -> Self {
        Num(f64::from(v))
    }
}

/// The drive's transport: what its health reader says, else what discovery found
/// (virtio, xen, loop and mmc disks have no health reader to say it).
fn transport_label(d: &DriveStatus) -> &'static str {
    match (d.identity.transport, &d.discovered) {
        (crate::health::model::Transport::Unknown, Some(x)) => x.transport.name(),
        (t, _) => t.name(),
    }
}

/// The `device` and `path` labels of `driveprobe_drive_info`: the kernel name of the whole
/// disk the drive is today (`sda`, `nvme0n1`, as node_exporter's `device` label) and its
/// `/dev` path; both empty when none is known or the drive is down (the last disk it was
/// on may be another drive's by now).
fn device_labels(d: &DriveStatus) -> (String, String) {
    match d.device.as_deref().filter(|_| d.up) {
        Some(dev) => (
            dev.file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            dev.display().to_string(),
        ),
        None => (String::new(), String::new()),
    }
}

fn bool01(b: bool) -> f64 {
    if b {
        1.0
    } else {
        0.0
    }
}

/// The histogram of one op: per-bucket counts from the cumulative ones in the status,
/// made monotone and capped at `ops_total` whatever the writer left (a missing bound
/// repeats the one before it).
fn histogram(o: &OpStatus) -> Value {
    let count = o.ops_total;
    let mut buckets = Vec::with_capacity(LATENCY_BUCKETS.len() + 1);
    let mut prev = 0u64;
    for (i, bound) in LATENCY_BUCKETS.iter().enumerate() {
        let cum = o.buckets.get(i).copied().unwrap_or(prev).clamp(prev, count);
        buckets.push((*bound, cum - prev));
        prev = cum;
    }
    buckets.push((f64::INFINITY, count - prev));
    Value::Histogram {
        sum: o.latency_sum_seconds,
        count,
        buckets,
    }
}

/// A `Key:   123 kB` value of `/proc/self/status` (the number only).
fn proc_status_value(status: &str, key: &str) -> Option<u64> {
    status.lines().find_map(|line| {
        let (k, rest) = line.split_once(':')?;
        if k != key {
            return None;
        }
        rest.split_whitespace().next()?.parse().ok()
    })
}

/// The soft limit of `Max open files` in `/proc/self/limits` (None when unlimited).
fn max_open_files(limits: &str) -> Option<u64> {
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line["Max open files".len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

impl Collector for Snapshot {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), fmt::Error> {
        for f in self.families.values() {
            if f.series.is_empty() {
                continue;
            }
            let (base, unit) = f.base_and_unit();
            let metric_type = match f.kind {
                Kind::Gauge => MetricType::Gauge,
                Kind::Counter => MetricType::Counter,
                Kind::Histogram => MetricType::Histogram,
                Kind::Info => MetricType::Info,
            };
            let mut m = encoder.encode_descriptor(base, f.help, unit.as_ref(), metric_type)?;
            for s in &f.series {
                if let Value::Info = s.value {
                    m.encode_info(&s.labels)?;
                    continue;
                }
                let mut e = m.encode_family(&s.labels)?;
                match &s.value {
                    Value::Gauge(v) => e.encode_gauge(v)?,
                    Value::Counter(v) => e.encode_counter::<NoLabelSet, u64, f64>(v, None)?,
                    Value::CounterF(v) => e.encode_counter::<NoLabelSet, f64, f64>(v, None)?,
                    Value::Histogram {
                        sum,
                        count,
                        buckets,
                    } => e.encode_histogram::<NoLabelSet>(*sum, *count, buckets, None)?,
                    Value::Info => {}
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::health::endurance::Endurance;
    use crate::health::model::{HealthReport, Identity, Transport};
    use crate::status::{HealthStatus, WindowQuantiles};

    const PROMETHEUS_ACCEPT: &str = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";

    fn samples(out: &str) -> Vec<&str> {
        out.lines().filter(|l| !l.starts_with('#')).collect()
    }

    fn drive<'a>(status: &'a mut Status, name: &str) -> &'a mut DriveStatus {
        status.drives.entry(name.to_string()).or_default()
    }

    #[test]
    fn negotiation() {
        use Format::*;
        assert_eq!(Format::negotiate(None), Text004);
        assert_eq!(Format::negotiate(Some("")), Text004);
        assert_eq!(Format::negotiate(Some("*/*")), Text004);
        assert_eq!(Format::negotiate(Some("text/plain")), Text004);
        assert_eq!(Format::negotiate(Some(PROMETHEUS_ACCEPT)), OpenMetrics);
        // Prometheus 3 (escaping parameters, every entry with a q).
        assert_eq!(
            Format::negotiate(Some("application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6,application/openmetrics-text;version=0.0.1;q=0.5,text/plain;version=1.0.0;escaping=allow-utf-8;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2")),
            OpenMetrics
        );
        // Prometheus told to scrape the text format only.
        assert_eq!(
            Format::negotiate(Some("text/plain;version=0.0.4;q=0.5,*/*;q=0.1")),
            Text004
        );
        assert_eq!(
            Format::negotiate(Some("Application/OpenMetrics-Text; version=1.0.0")),
            OpenMetrics
        );
        assert_eq!(
            Format::negotiate(Some("application/openmetrics-text;q=0")),
            Text004
        );
        assert_eq!(
            Format::negotiate(Some(
                "text/plain;q=1,application/openmetrics-text;version=1.0.0;q=0.5"
            )),
            Text004
        );
        assert_eq!(
            Format::negotiate(Some("application/openmetrics-text;q=bogus, , ;;,")),
            OpenMetrics
        );
        assert!(OpenMetrics
            .content_type()
            .starts_with("application/openmetrics-text"));
        assert!(Text004.content_type().contains("version=0.0.4"));
    }

    #[test]
    fn empty_status_renders_in_both_formats() {
        let s = Status::default();
        let om = render_opts(&s, Format::OpenMetrics, false);
        assert!(om.ends_with("# EOF\n"), "{om}");
        assert!(om.contains("driveprobe_build_info{version=\""), "{om}");
        let t = render_opts(&s, Format::Text004, false);
        assert!(!t.contains("# EOF"));
        assert!(!t.contains("process_"), "{t}");
        assert!(!t.contains("drive=\""), "{t}");
    }

    #[test]
    fn down_drive_has_info_and_up() {
        let mut s = Status::default();
        let d = drive(&mut s, "gone");
        d.up = false;
        d.down_reason = Some("absent".into());
        let t = render_opts(&s, Format::Text004, false);
        assert!(
            t.contains("driveprobe_drive_info{drive=\"gone\",device=\"\",serial=\"\",wwn=\"\",model=\"\",firmware=\"\",transport=\"unknown\",path=\"\"} 1\n"),
            "{t}"
        );
        assert!(
            t.contains("driveprobe_drive_up{drive=\"gone\"} 0.0\n"),
            "{t}"
        );
        // Health was never read: it says so, and has no figures.
        assert!(
            t.contains("driveprobe_health_state{drive=\"gone\",state=\"not_read_yet\"} 1.0\n"),
            "{t}"
        );
        assert!(
            t.contains("driveprobe_health_state{drive=\"gone\",state=\"read\"} 0.0\n"),
            "{t}"
        );
        // Nothing known: no health figures, endurance, run or probe series.
        for absent in [
            "health_temp",
            "endurance_",
            "run_",
            "latency",
            "collector_",
            "driveprobe_probe_",
        ] {
            assert!(!t.contains(absent), "{absent} in\n{t}");
        }
    }

    fn probe_status() -> ProbeStatus {
        let mut read = OpStatus {
            ops_total: 100,
            bytes_total: 409_600,
            errors_total: 1,
            device_errors_total: 1,
            last_host_error: None,
            latency_sum_seconds: 0.01,
            buckets: vec![0; LATENCY_BUCKETS.len()],
            window: Some(WindowQuantiles {
                ops: 50,
                quantiles: [80e-6, 120e-6, 300e-6, 900e-6],
                max: 1.5e-3,
            }),
        };
        for (i, b) in read.buckets.iter_mut().enumerate() {
            *b = [0, 0, 10, 60, 90, 98, 99, 100][i.min(7)];
        }
        ProbeStatus {
            writes: false,
            window_seconds: 60.0,
            rate_iops: Some(50.0),
            state: ProbeState::Running,
            read,
            write: OpStatus::default(),
            cpu_wait: Default::default(),
            host_stall: Some(WindowQuantiles {
                ops: 50,
                quantiles: [40e-6, 60e-6, 2e-3, 4e-3],
                max: 5e-3,
            }),
        }
    }

    #[test]
    fn running_and_paused_come_from_the_one_state_and_are_never_both_1() {
        let states = [
            ProbeState::Starting,
            ProbeState::Running,
            ProbeState::Paused {
                reason: "scheduled run r1 (latency)".into(),
            },
            ProbeState::DriveDown {
                reason: "absent".into(),
            },
            ProbeState::Failing {
                reason: "ENOSPC".into(),
            },
            ProbeState::Stopped,
        ];
        for st in states {
            let mut s = Status::default();
            let mut p = probe_status();
            p.state = st.clone();
            drive(&mut s, "d").probes.insert("c".into(), p);
            let t = render_opts(&s, Format::Text004, false);
            let value = |series: &str| -> f64 {
                let line = t
                    .lines()
                    .find(|l| l.starts_with(series))
                    .unwrap_or_else(|| panic!("no {series} in\n{t}"));
                line.rsplit(' ').next().unwrap().parse().unwrap()
            };
            let l = "{drive=\"d\",probe=\"c\"";
            let running = value(&format!("driveprobe_probe_running{l}}}"));
            let paused = value(&format!("driveprobe_probe_paused{l}}}"));
            assert!(running + paused <= 1.0, "{st:?}:\n{t}");
            assert_eq!(running == 1.0, st == ProbeState::Running, "{st:?}");
            assert_eq!(paused == 1.0, st.is_paused(), "{st:?}");
            // Exactly one state series is 1, the probe's.
            for name in ProbeState::NAMES {
                let v = value(&format!(
                    "driveprobe_probe_state{{drive=\"d\",probe=\"c\",state=\"{name}\"}}"
                ));
                assert_eq!(v == 1.0, name == st.name(), "{st:?} {name}");
            }
        }
    }

    #[test]
    fn health_state_is_one_hot() {
        let cases = [
            HealthState::NotReadYet,
            HealthState::NotApplicable {
                reason: "tmpfs".into(),
            },
            HealthState::NotReadYet.failed("smartctl refused /dev/vda".into(), 5.0),
            HealthState::Read { read_unix: 3.0 },
        ];
        for st in cases {
            let mut s = Status::default();
            drive(&mut s, "d").health_state = st.clone();
            let t = render_opts(&s, Format::Text004, false);
            for name in HealthState::NAMES {
                let want = if name == st.name() { "1.0" } else { "0.0" };
                let line =
                    format!("driveprobe_health_state{{drive=\"d\",state=\"{name}\"}} {want}\n");
                assert!(t.contains(&line), "{st:?}: no {line} in\n{t}");
            }
        }
    }

    #[test]
    fn cpu_wait_is_exported_when_known() {
        let mut s = Status::default();
        let mut p = probe_status();
        p.cpu_wait = crate::status::CpuWait {
            seconds_total: 2.5,
            window_max_ratio: Some(0.41),
            p99_wait_seconds: Some(4.1e-3),
            p99_latency_seconds: Some(5e-3),
        };
        drive(&mut s, "d").probes.insert("c".into(), p);
        let t = render_opts(&s, Format::Text004, false);
        assert!(
            t.contains("driveprobe_probe_cpu_wait_seconds_total{drive=\"d\",probe=\"c\"} 2.5\n"),
            "{t}"
        );
        assert!(
            t.contains("driveprobe_probe_cpu_wait_ratio{drive=\"d\",probe=\"c\"} 0.41\n"),
            "{t}"
        );
    }

    #[test]
    fn quantile_labels_and_histogram() {
        let mut s = Status::default();
        drive(&mut s, "d").probes.insert("c".into(), probe_status());
        for format in [Format::Text004, Format::OpenMetrics] {
            let out = render_opts(&s, format, false);
            let qs: Vec<&str> = samples(&out)
                .into_iter()
                .filter(|l| l.starts_with("driveprobe_probe_latency_quantile_seconds{"))
                .collect();
            assert_eq!(qs.len(), 5, "{out}");
            for (line, q) in qs.iter().zip(["0.5", "0.9", "0.99", "0.999", "1"]) {
                assert!(
                    line.contains(&format!(",quantile=\"{q}\"}}")),
                    "{line} has no quantile {q}"
                );
            }
            assert!(qs[4].ends_with(" 0.0015"), "{}", qs[4]);
            // Issue 21: the host's stall, in the same shape, per probe (no `op`).
            let hs: Vec<&str> = samples(&out)
                .into_iter()
                .filter(|l| l.starts_with("driveprobe_probe_host_stall_seconds{"))
                .collect();
            assert_eq!(hs.len(), 5, "{out}");
            assert_eq!(
                hs[2],
                "driveprobe_probe_host_stall_seconds{drive=\"d\",probe=\"c\",quantile=\"0.99\"} 0.002"
            );
            assert!(hs[4].ends_with(" 0.005"), "{}", hs[4]);
            // Buckets: one per bound and +Inf, cumulative, monotone, +Inf = _count.
            let buckets: Vec<u64> = samples(&out)
                .into_iter()
                .filter(|l| l.starts_with("driveprobe_probe_latency_seconds_bucket{"))
                .map(|l| l.rsplit(' ').next().unwrap().parse().unwrap())
                .collect();
            assert_eq!(buckets.len(), LATENCY_BUCKETS.len() + 1, "{out}");
            assert!(buckets.windows(2).all(|w| w[0] <= w[1]), "{buckets:?}");
            assert_eq!(*buckets.last().unwrap(), 100);
            assert!(out.contains("le=\"+Inf\""), "{out}");
            assert!(out.contains("driveprobe_probe_latency_seconds_count{drive=\"d\",probe=\"c\",op=\"read\"} 100\n"), "{out}");
            // A read-only probe has no write series.
            assert!(!out.contains("op=\"write\""), "{out}");
        }
    }

    #[test]
    fn odd_histograms_stay_monotone_and_do_not_panic() {
        let mut s = Status::default();
        let mut p = probe_status();
        p.writes = true;
        // Decreasing, above the count, too short; and an empty one with a count.
        p.read.buckets = vec![5, 3, 200, 7];
        p.read.ops_total = 10;
        p.read.latency_sum_seconds = f64::NAN;
        p.write.buckets = vec![];
        p.write.ops_total = u64::MAX;
        p.write.window = Some(WindowQuantiles {
            ops: 1,
            quantiles: [f64::INFINITY, f64::NEG_INFINITY, f64::NAN, -1.0],
            max: f64::MAX,
        });
        drive(&mut s, "d").probes.insert("c".into(), p);
        for format in [Format::Text004, Format::OpenMetrics] {
            let out = render_opts(&s, format, false);
            for op in ["read", "write"] {
                let buckets: Vec<u64> = samples(&out)
                    .into_iter()
                    .filter(|l| {
                        l.starts_with("driveprobe_probe_latency_seconds_bucket{")
                            && l.contains(&format!("op=\"{op}\""))
                    })
                    .map(|l| l.rsplit(' ').next().unwrap().parse().unwrap())
                    .collect();
                assert_eq!(buckets.len(), LATENCY_BUCKETS.len() + 1, "{out}");
                assert!(
                    buckets.windows(2).all(|w| w[0] <= w[1]),
                    "{op}: {buckets:?}"
                );
            }
        }
    }

    #[test]
    fn absent_values_have_no_series() {
        let mut s = Status::default();
        let d = drive(&mut s, "d");
        d.health = Some(HealthStatus {
            report: HealthReport {
                temperature_celsius: Some(40.0),
                ..Default::default()
            },
            verdict: Verdict::Unknown,
            reasons: vec![],
            read_unix: 1.0,
        });
        d.endurance = Some(Endurance::default());
        d.last_runs.insert(
            "latency".into(),
            RunSummary {
                status: "failed".into(),
                ..Default::default()
            },
        );
        let t = render_opts(&s, Format::Text004, false);
        assert!(t.contains("driveprobe_health_temperature_celsius{drive=\"d\"} 40.0\n"));
        for absent in [
            "driveprobe_health_temperature_warning_celsius",
            "driveprobe_health_smart_passed",
            "driveprobe_health_media_errors_total",
            "driveprobe_health_host_written_bytes_total",
            "driveprobe_endurance_",
            "driveprobe_run_steady_state",
            "driveprobe_run_last_success_timestamp_seconds",
            "driveprobe_run_iops",
            "driveprobe_probe_latency_quantile_seconds",
        ] {
            assert!(!t.contains(absent), "{absent} in\n{t}");
        }
        assert!(t.contains("driveprobe_run_last_passed{drive=\"d\",suite=\"latency\"} 0.0\n"));
        // The verdict is a state set: every state, 1 on the current one.
        for (v, n) in [("ok", 0), ("warning", 0), ("failing", 0), ("unknown", 1)] {
            assert!(
                t.contains(&format!(
                    "driveprobe_health_verdict{{drive=\"d\",verdict=\"{v}\"}} {n}.0\n"
                )),
                "{v}: {t}"
            );
        }
    }

    /// The one `driveprobe_drive_info` line of drive `name` in `t`.
    fn info_line<'a>(t: &'a str, name: &str) -> &'a str {
        let mut lines = t
            .lines()
            .filter(|l| l.starts_with(&format!("driveprobe_drive_info{{drive=\"{name}\",")));
        let line = lines
            .next()
            .unwrap_or_else(|| panic!("no drive_info of {name}: {t}"));
        assert!(
            lines.next().is_none(),
            "two drive_info series of {name}: {t}"
        );
        line
    }

    #[test]
    fn drive_info_names_the_device_as_node_exporter_does_and_follows_it() {
        let mut s = Status::default();
        let d = drive(&mut s, "db");
        d.up = true;
        d.device = Some("/dev/nvme0n1".into());
        d.identity = Identity {
            model: Some("M".into()),
            serial: Some("S1".into()),
            firmware: Some("F1".into()),
            wwn: Some("eui.0025385b71b0b3a8".into()),
            transport: Transport::Nvme,
            capacity_bytes: Some(2_000_398_934_016),
            ..Default::default()
        };
        let t = render_opts(&s, Format::Text004, false);
        assert_eq!(
            info_line(&t, "db"),
            "driveprobe_drive_info{drive=\"db\",device=\"nvme0n1\",serial=\"S1\",wwn=\"eui.0025385b71b0b3a8\",model=\"M\",firmware=\"F1\",transport=\"nvme\",path=\"/dev/nvme0n1\"} 1"
        );
        assert!(
            t.contains("driveprobe_drive_capacity_bytes{drive=\"db\"} 2000398934016"),
            "{t}"
        );
        // The drive moved (resolved again by its identity): the same one series, with the
        // new device and path and nothing else changed.
        let d = drive(&mut s, "db");
        d.device = Some("/dev/nvme1n1".into());
        let moved = render_opts(&s, Format::Text004, false);
        assert_eq!(
            info_line(&moved, "db"),
            "driveprobe_drive_info{drive=\"db\",device=\"nvme1n1\",serial=\"S1\",wwn=\"eui.0025385b71b0b3a8\",model=\"M\",firmware=\"F1\",transport=\"nvme\",path=\"/dev/nvme1n1\"} 1"
        );
        // Down: the last device may be another drive's now, so device and path are
        // empty (still one series), and the capacity stays known.
        let d = drive(&mut s, "db");
        d.up = false;
        let down = render_opts(&s, Format::Text004, false);
        assert!(
            info_line(&down, "db").contains("device=\"\",")
                && info_line(&down, "db").contains("path=\"\"}"),
            "{down}"
        );
        assert!(
            down.contains("driveprobe_drive_capacity_bytes{drive=\"db\"} 2000398934016"),
            "{down}"
        );
        // No capacity known: no capacity series (never a made-up zero).
        let d = drive(&mut s, "db");
        d.identity.capacity_bytes = None;
        let t = render_opts(&s, Format::Text004, false);
        assert!(!t.contains("driveprobe_drive_capacity_bytes"), "{t}");
    }

    #[test]
    fn odd_label_values_are_escaped() {
        let mut s = Status::default();
        let d = drive(&mut s, "we\"ird\\drive\nname");
        d.identity = Identity {
            model: Some("Samsung \"EVO\" C:\\ 9\nline two ünïcode".into()),
            serial: Some("}{,=".into()),
            transport: Transport::Sata,
            capacity_bytes: Some(512),
            ..Default::default()
        };
        for format in [Format::Text004, Format::OpenMetrics] {
            let out = render_opts(&s, format, false);
            assert!(
                out.contains("model=\"Samsung \\\"EVO\\\" C:\\\\ 9\\nline two ünïcode\""),
                "{out}"
            );
            assert!(out.contains("drive=\"we\\\"ird\\\\drive\\nname\""), "{out}");
            assert!(out.contains("serial=\"}{,=\""), "{out}");
            assert!(!out.contains("capacity_bytes=\""), "{out}");
            assert!(
                out.contains(
                    "driveprobe_drive_capacity_bytes{drive=\"we\\\"ird\\\\drive\\nname\"} 512"
                ),
                "{out}"
            );
            // No raw newline inside a sample: every line is a comment or starts with a name.
            for line in out.lines() {
                assert!(
                    line.starts_with('#')
                        || line.starts_with("driveprobe_")
                        || line.starts_with("process_"),
                    "{line:?}"
                );
            }
        }
    }

    #[test]
    fn duplicate_run_points_keep_one_series() {
        let mut s = Status::default();
        let point = crate::status::RunPoint {
            workload: "4k-randread".into(),
            threads: 1,
            depth: 32,
            iops: 1.0,
            ..Default::default()
        };
        let mut later = point.clone();
        later.iops = 2.0;
        drive(&mut s, "d").last_runs.insert(
            "curves".into(),
            RunSummary {
                points: vec![point, later],
                ..Default::default()
            },
        );
        let t = render_opts(&s, Format::Text004, false);
        let iops: Vec<&str> = samples(&t)
            .into_iter()
            .filter(|l| l.starts_with("driveprobe_run_iops{"))
            .collect();
        assert_eq!(iops.len(), 1, "{t}");
        assert!(iops[0].ends_with(" 2.0"));
    }

    #[test]
    fn families_are_sorted_and_help_is_plain() {
        let mut s = Status::default();
        drive(&mut s, "d").probes.insert("c".into(), probe_status());
        s.scheduler.next_due.insert("weekly".into(), 1_700_000_000);
        s.scheduler.running.insert("nightly".into(), "run-1".into());
        let t = render(&s, Format::Text004);
        let names: Vec<&str> = t
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .map(|l| l.split(' ').next().unwrap())
            .collect();
        let mut sorted = names.clone();
        sorted.sort();
        assert_eq!(names, sorted);
        for l in t.lines().filter(|l| l.starts_with("# HELP ")) {
            // OpenMetrics does not escape HELP for us: keep it free of what would need it.
            assert!(!l.contains('"') && !l.contains('\\'), "{l}");
            assert!(l.len() > "# HELP ".len() + 30, "{l}");
        }
        assert!(t.contains("driveprobe_schedule_running{schedule=\"nightly\"} 1.0\n"));
        assert!(t.contains("driveprobe_schedule_running{schedule=\"weekly\"} 0.0\n"));
        assert!(t.contains(
            "driveprobe_schedule_next_run_timestamp_seconds{schedule=\"weekly\"} 1700000000.0\n"
        ));
        // Process families are read from /proc at render time.
        assert!(t.contains("\nprocess_cpu_seconds_total "), "{t}");
        assert!(t.contains("\nprocess_resident_memory_bytes "), "{t}");
        assert!(t.contains("\nprocess_open_fds "), "{t}");
        assert!(t.contains("\ndriveprobe_process_threads "), "{t}");
    }

    #[test]
    fn openmetrics_units_and_types() {
        let mut s = Status::default();
        drive(&mut s, "d").probes.insert("c".into(), probe_status());
        let om = render_opts(&s, Format::OpenMetrics, false);
        assert!(om.contains("# TYPE driveprobe_probe_ops counter\n"), "{om}");
        assert!(om.contains("driveprobe_probe_ops_total{"), "{om}");
        assert!(
            om.contains("# UNIT driveprobe_probe_latency_seconds seconds\n"),
            "{om}"
        );
        assert!(om.contains("# TYPE driveprobe_drive info\n"), "{om}");
        assert!(om.contains("# UNIT driveprobe_probe_bytes bytes\n"), "{om}");
        assert!(om.ends_with("# EOF\n"));
    }

    #[test]
    fn proc_parsers() {
        let status = "Name:\tdriveprobe\nVmSize:\t  123456 kB\nVmRSS:\t    2048 kB\nThreads:\t7\n";
        assert_eq!(proc_status_value(status, "VmRSS"), Some(2048));
        assert_eq!(proc_status_value(status, "Threads"), Some(7));
        assert_eq!(proc_status_value(status, "VmSwap"), None);
        assert_eq!(proc_status_value("", "VmRSS"), None);
        let limits = "Limit                     Soft Limit           Hard Limit           Units     \nMax open files            1024                 524288               files     \n";
        assert_eq!(max_open_files(limits), Some(1024));
        assert_eq!(
            max_open_files(
                "Max open files            unlimited            unlimited            files\n"
            ),
            None
        );
        assert_eq!(max_open_files(""), None);
    }
}
