//! `smartctl --json` output (SATA, SAS, NVMe through smartctl) into the health model.
//!
//! - [`parse`] turns the JSON that `smartctl --json` printed (live or saved) into a
//!   [`HealthReport`]. It is pure, walks a [`serde_json::Value`] (smartctl's JSON differs
//!   by version, transport and drive), and never panics: anything missing stays `None`,
//!   anything odd (a wrong type, a negative count, a value out of range) is left `None` and
//!   said once in `notes`. Unknown fields are ignored.
//! - [`ExitStatus`] decodes smartctl's exit status, which is a bit mask, not a yes/no.
//! - [`read_device`] runs smartctl on a device with a time limit, without waking a disk
//!   in standby.
//! - [`parse_scan`] reads `smartctl --scan --json`.
//!
//! # Where each field comes from (first found wins)
//!
//! | field | source |
//! | --- | --- |
//! | temperature | `temperature.current`, NVMe log, Device Statistics, attribute 194, 190 |
//! | power-on time | `power_on_time`, NVMe log, Device Statistics, attribute 9 (unit by name) |
//! | power cycles | `power_cycle_count`, NVMe log, SCSI start-stop cycles, Device Statistics, attribute 12 |
//! | wear | NVMe `percentage_used`, Device Statistics "Percentage Used Endurance Indicator", SCSI Solid State Media log, attributes 177, 233, 231, 202, 169 |
//! | host bytes | NVMe data units (× 512,000), Device Statistics logical sectors (× logical block size), attributes 241/246 and 242 (unit by name), SAS error counter log gigabytes processed |
//! | reallocated | attribute 5, Device Statistics, SAS grown defect list |
//! | media errors | NVMe log, SAS total uncorrected errors, Device Statistics, attribute 187 |
//!
//! ATA attribute raw values can pack several fields into 48 bits (`"2725 (151 234 0)"`,
//! `"32 (Min/Max 24/38)"`): counts are taken from the first number of smartctl's own
//! rendering of the raw value (`raw.string`), which applies the drive database, and from
//! `raw.value` only when there is no rendering.
//!
//! A wear attribute's normalised value counts *down* from 100 as life is used, whatever
//! its name; so `percentage_used_ratio = (100 - value) / 100`. An attribute whose name
//! says "Used" (`Perc_Rated_Life_Used`) holds the percentage used in its raw value, which
//! is read instead, as it can go past 100.

use std::ffi::OsStr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::detail::{
    latest_per_kind, AtaAttribute, DeviceStatistic, Link, NvmeDetail, NvmeErrorEntry, PhyEvent,
    ScsiDetail, ScsiErrorCounters, SelfTest, SelfTestProgress, TemperatureSensor,
    MAX_ATA_ATTRIBUTES, MAX_DEVICE_STATISTICS, MAX_ERROR_ENTRIES, MAX_PHY_EVENTS,
};
use super::model::{CriticalFlags, HealthReport, Identity, PowerState, Source, Transport};

/// The options driveprobe gives smartctl, before the device name.
///
/// - `--json=c`: compact JSON (smartmontools 7.0 or newer).
/// - `--info --health --attributes`: identity, the overall verdict, ATA attributes; for SCSI
///   `--attributes` gives temperature, the grown defect list and start-stop cycles; for
///   NVMe the SMART/Health log.
/// - `--log=error`: ATA error log count, SCSI error counter log (uncorrected errors,
///   gigabytes processed), NVMe error information.
/// - `--log=devstat`: ATA Device Statistics (endurance used, logical sectors written).
/// - `--log=ssd`: the SCSI Solid State Media log (percentage used endurance indicator).
/// - `--log=background`: the SCSI background scan log, where most SAS drives keep their
///   power-on time.
/// - `--log=sataphy`: SATA PHY event counters (ATA only; other drives ignore it).
/// - `--log=selftest`: the self-test log (ATA, SCSI; NVMe with smartctl 7.4 or newer).
/// - `--nocheck=standby`: a disk in STANDBY or SLEEP is not spun up; smartctl exits 2 and
///   says "Device is in STANDBY mode" instead.
pub const SMARTCTL_ARGS: &[&str] = &[
    "--json=c",
    "--info",
    "--health",
    "--attributes",
    "--log=error",
    "--log=devstat",
    "--log=ssd",
    "--log=background",
    "--log=sataphy",
    "--log=selftest",
    "--nocheck=standby",
];

/// Where smartctl is looked for after `PATH` (it lives in sbin, often not on a user's PATH).
const SBIN_DIRS: &[&str] = &["/usr/sbin", "/usr/local/sbin", "/sbin"];

/// The most of smartctl's stdout read (a sane `-x` is under 100 KiB); more is refused as
/// not smartctl's JSON, having cost no more memory than this.
const OUTPUT_CAP: usize = 4 << 20;
/// The most of smartctl's stderr kept (only its first line is ever used).
const STDERR_CAP: usize = 64 << 10;

/// Bytes in one NVMe data unit (1000 × 512 bytes).
const NVME_DATA_UNIT: u128 = 512_000;

#[derive(Debug, thiserror::Error)]
pub enum SmartctlError {
    #[error("smartctl output is not valid JSON ({detail}): give the output of `smartctl --json` (smartmontools 7.0 or newer)")]
    NotJson { detail: String },
    #[error(
        "smartctl output is a JSON {found}, not an object: give the output of `smartctl --json`"
    )]
    NotAnObject { found: &'static str },
    #[error("this is the output of `smartctl --scan` (a list of {}: {names}), not one drive's data: run `smartctl --json=c -x {first}` and give its output", crate::units::count(*count as u64, "device", "devices"))]
    ScanOutput {
        count: usize,
        names: String,
        first: String,
    },
    #[error("smartctl {action} on {dev} failed: {message}")]
    ActionFailed {
        dev: PathBuf,
        action: String,
        message: String,
    },
    #[error("smartctl is not installed: install smartmontools (apt-get install smartmontools)")]
    NotInstalled,
    #[error("cannot run {program}: {source}; check that it is an executable smartctl")]
    Spawn {
        program: PathBuf,
        source: std::io::Error,
    },
    #[error("{dev} does not exist: give a drive's device node, such as /dev/sda")]
    NoDevice { dev: PathBuf },
    #[error("smartctl did not answer within {secs}s on {dev}: the device may be hung")]
    Timeout { dev: PathBuf, secs: f64 },
    #[error("smartctl was killed by signal {signal} while reading {dev}: run `smartctl -a {dev}` by hand to see why")]
    Killed { dev: PathBuf, signal: i32 },
    #[error("smartctl cannot open {dev}: {message} (check the device name, and run as root)")]
    DeviceOpen { dev: PathBuf, message: String },
    #[error("smartctl refused {dev}: {message} (is it a SATA, SAS or NVMe disk? virtio and loop devices have no SMART)")]
    Refused { dev: PathBuf, message: String },
    #[error("smartctl rejected driveprobe's options ({message}): smartmontools 7.0 or newer is needed for --json")]
    TooOld { message: String },
    #[error("smartctl printed no usable output for {dev} (exit status {status}: {meaning}): run `smartctl -a {dev}` by hand to see why")]
    NoOutput {
        dev: PathBuf,
        status: u8,
        meaning: String,
    },
    #[error("smartctl printed {bytes} bytes for {dev}, more than the {cap_mib} MiB its JSON takes (it began: {excerpt:?}): check that the program found as smartctl is smartctl")]
    TooMuchOutput {
        dev: PathBuf,
        bytes: u64,
        cap_mib: usize,
        excerpt: String,
    },
    #[error("reading smartctl's output for {dev} failed: {source}")]
    Io {
        dev: PathBuf,
        source: std::io::Error,
    },
}

// ---------------------------------------------------------------------------------------
// Exit status
// ---------------------------------------------------------------------------------------

/// smartctl's exit status: a bit mask (man smartctl, "EXIT STATUS").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ExitStatus(pub u8);

const EXIT_BITS: [&str; 8] = [
    "command line did not parse",
    "device open failed, or the device is in a low-power mode",
    "a SMART or other command failed, or SMART data had a checksum error",
    "SMART status says DISK FAILING",
    "prefail attributes are at or below threshold",
    "attributes were at or below threshold in the past",
    "the device error log has errors",
    "the self-test log has errors",
];

impl ExitStatus {
    pub fn bits(self) -> u8 {
        self.0
    }
    pub fn is_clean(self) -> bool {
        self.0 == 0
    }
    /// Bit 0.
    pub fn command_line_failed(self) -> bool {
        self.0 & 0x01 != 0
    }
    /// Bit 1 (also a disk in standby under `--nocheck`).
    pub fn device_open_failed(self) -> bool {
        self.0 & 0x02 != 0
    }
    /// Bit 2.
    pub fn command_failed(self) -> bool {
        self.0 & 0x04 != 0
    }
    /// Bit 3.
    pub fn disk_failing(self) -> bool {
        self.0 & 0x08 != 0
    }
    /// Bit 4.
    pub fn prefail_below_threshold(self) -> bool {
        self.0 & 0x10 != 0
    }
    /// Bit 5.
    pub fn below_threshold_in_past(self) -> bool {
        self.0 & 0x20 != 0
    }
    /// Bit 6.
    pub fn error_log_has_errors(self) -> bool {
        self.0 & 0x40 != 0
    }
    /// Bit 7.
    pub fn self_test_log_has_errors(self) -> bool {
        self.0 & 0x80 != 0
    }

    /// The set bits as short English phrases, lowest bit first.
    pub fn phrases(self) -> Vec<&'static str> {
        (0..8)
            .filter(|b| self.0 & (1 << b) != 0)
            .map(|b| EXIT_BITS[b])
            .collect()
    }

    /// The phrases joined, or "no problem" for 0.
    pub fn describe(self) -> String {
        if self.0 == 0 {
            "no problem".to_string()
        } else {
            self.phrases().join("; ")
        }
    }

    /// Applies the status to a parsed report: bit 3 makes `smart_passed` false (the
    /// drive's own verdict, as smartctl saw it); bits 2 and 4-7 become notes. Bits 0 and 1
    /// (nothing was read) are for the runner. Applying twice adds nothing.
    pub fn apply(self, r: &mut HealthReport) {
        if self.disk_failing() {
            if r.smart_passed == Some(true) {
                push_unique(
                    &mut r.notes,
                    "smartctl's exit status says DISK FAILING although smart_status says passed: taken as failing".to_string(),
                );
            }
            r.smart_passed = Some(false);
        }
        for bit in [2usize, 3, 4, 5, 6, 7] {
            if self.0 & (1 << bit) != 0 {
                push_unique(
                    &mut r.notes,
                    format!("smartctl exit status: {}", EXIT_BITS[bit]),
                );
            }
        }
    }
}

/// [`ExitStatus::apply`] as a function.
pub fn apply_exit_status(report: &mut HealthReport, status: ExitStatus) {
    status.apply(report);
}

fn push_unique(notes: &mut Vec<String>, note: String) {
    if !notes.contains(&note) {
        notes.push(note);
    }
}

// ---------------------------------------------------------------------------------------
// Reading JSON values without trusting them
// ---------------------------------------------------------------------------------------

/// `v` at `path`, `None` when absent or `null`.
fn at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a Value> {
    let mut cur = v;
    for key in path {
        cur = cur.as_object()?.get(*key)?;
    }
    (!cur.is_null()).then_some(cur)
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn short(v: &Value) -> String {
    let s = v.to_string();
    if s.chars().count() > 40 {
        format!("{}…", s.chars().take(40).collect::<String>())
    } else {
        s
    }
}

/// Collects notes while reading; every accessor returns `None` for absent values silently
/// and for odd ones with a note.
#[derive(Default)]
struct Cx {
    notes: Vec<String>,
}

impl Cx {
    fn note(&mut self, s: String) {
        push_unique(&mut self.notes, s);
    }

    fn odd(&mut self, what: &str, v: &Value, expected: &str) {
        self.note(format!(
            "ignored {what}: expected {expected}, found {}",
            short(v)
        ));
    }

    fn uint(&mut self, v: Option<&Value>, what: &str) -> Option<u64> {
        let v = v?;
        let got = match v {
            Value::Number(n) => n.as_u64().or_else(|| {
                n.as_f64()
                    .filter(|f| f.is_finite() && *f >= 0.0 && f.fract() == 0.0 && *f < 1.8e19)
                    .map(|f| f as u64)
            }),
            Value::String(s) => s.trim().parse::<u64>().ok(),
            _ => None,
        };
        if got.is_none() {
            self.odd(what, v, "a non-negative integer");
        }
        got
    }

    fn big(&mut self, v: Option<&Value>, what: &str) -> Option<u128> {
        let v = v?;
        let got = match v {
            Value::Number(n) => n.as_u64().map(u128::from).or_else(|| {
                n.as_f64()
                    .filter(|f| f.is_finite() && *f >= 0.0 && f.fract() == 0.0 && *f < 3.4e38)
                    .map(|f| f as u128)
            }),
            Value::String(s) => s.trim().parse::<u128>().ok(),
            _ => None,
        };
        if got.is_none() {
            self.odd(what, v, "a non-negative integer");
        }
        got
    }

    fn float(&mut self, v: Option<&Value>, what: &str) -> Option<f64> {
        let v = v?;
        let got = match v {
            Value::Number(n) => n.as_f64(),
            Value::String(s) => s.trim().parse::<f64>().ok(),
            _ => None,
        }
        .filter(|f| f.is_finite());
        if got.is_none() {
            self.odd(what, v, "a number");
        }
        got
    }

    fn text(&mut self, v: Option<&Value>, what: &str) -> Option<String> {
        let v = v?;
        match v {
            Value::String(s) => {
                let t = s.trim();
                (!t.is_empty()).then(|| t.to_string())
            }
            _ => {
                self.odd(what, v, "a string");
                None
            }
        }
    }

    fn flag(&mut self, v: Option<&Value>, what: &str) -> Option<bool> {
        let v = v?;
        let got = v.as_bool();
        if got.is_none() {
            self.odd(what, v, "true or false");
        }
        got
    }

    fn array<'a>(&mut self, v: Option<&'a Value>, what: &str) -> &'a [Value] {
        match v {
            None => &[],
            Some(Value::Array(a)) => a,
            Some(other) => {
                self.odd(what, other, "an array");
                &[]
            }
        }
    }

    /// A temperature in °C, within what a drive can report.
    fn celsius(&mut self, v: Option<&Value>, what: &str) -> Option<f64> {
        let t = self.float(v, what)?;
        if (-60.0..=200.0).contains(&t) {
            Some(t)
        } else {
            self.note(format!(
                "ignored {what}: {t} °C is not a plausible temperature"
            ));
            None
        }
    }

    /// A percentage (0..=255) as a ratio.
    fn percent(&mut self, v: Option<&Value>, what: &str) -> Option<f64> {
        let p = self.uint(v, what)?;
        if p <= 255 {
            Some(p as f64 / 100.0)
        } else {
            self.note(format!("ignored {what}: {p}% is out of range"));
            None
        }
    }
}

fn fill<T>(slot: &mut Option<T>, v: Option<T>) {
    if slot.is_none() {
        *slot = v;
    }
}

// ---------------------------------------------------------------------------------------
// parse
// ---------------------------------------------------------------------------------------

/// Parses `smartctl --json` output into the health model. `source` is
/// [`Source::SmartctlJsonFile`] (the runner sets [`Source::Smartctl`]). The exit status
/// smartctl recorded in the JSON (`smartctl.exit_status`) is applied as by
/// [`ExitStatus::apply`]. A saved output that says the device was in standby gives
/// `power_state = Standby`; otherwise the power state stays unknown.
pub fn parse(json_text: &str) -> Result<HealthReport, SmartctlError> {
    let root: Value = drive_json(json_text).map_err(|e| SmartctlError::NotJson {
        detail: e.to_string(),
    })?;
    parse_clean(&root)
}

/// `smartctl --scan` / `--scan-open` output: a `devices` list and no one device's data
/// (no `device` object), or an argv that says so. Without this it would read as a drive
/// with nothing known ("no health data").
fn scan_output(root: &Value) -> Option<SmartctlError> {
    let devices = root.get("devices")?.as_array()?;
    let scan_argv = at(root, &["smartctl", "argv"])
        .and_then(Value::as_array)
        .is_some_and(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .any(|s| s == "--scan" || s == "--scan-open")
        });
    if root.get("device").is_some() && !scan_argv {
        return None;
    }
    let names: Vec<&str> = devices
        .iter()
        .filter_map(|d| d.get("name").and_then(Value::as_str))
        .collect();
    const SHOWN: usize = 4;
    let mut list = names
        .iter()
        .take(SHOWN)
        .copied()
        .collect::<Vec<_>>()
        .join(", ");
    if names.len() > SHOWN {
        list += &format!(", and {} more", names.len() - SHOWN);
    }
    if list.is_empty() {
        list = "none".into();
    }
    Some(SmartctlError::ScanOutput {
        count: devices.len(),
        names: list,
        // A device behind a RAID controller needs its type (`-d megaraid,0`), as --scan
        // prints it; others are better read with smartctl's own choice (a SATA disk
        // scans as `scsi`, and `-d scsi` would hide its ATA attributes).
        first: devices
            .first()
            .and_then(|d| {
                let name = d.get("name")?.as_str()?;
                Some(match d.get("type").and_then(Value::as_str) {
                    Some(t) if t.contains(',') => format!("-d {t} {name}"),
                    _ => name.to_string(),
                })
            })
            .unwrap_or_else(|| "/dev/sdX".to_string()),
    })
}

/// Every string of smartctl's JSON (what the drive reports: model, serial, firmware,
/// attribute names, messages) as driveprobe keeps a drive's strings
/// ([`fmt::drive_text`](crate::fmt::drive_text): one line, at most
/// [`MAX_DRIVE_TEXT_BYTES`](crate::fmt::MAX_DRIVE_TEXT_BYTES)), in place, before
/// anything reads them: no control character and no megabyte reaches a report, a log
/// line, a label or a page. An empty string stays empty.
fn clean_strings(v: &mut Value) {
    match v {
        Value::String(s) => match crate::fmt::drive_text(s) {
            Some(t) if t == *s => {}
            Some(t) => *s = t,
            None => s.clear(),
        },
        Value::Array(items) => items.iter_mut().for_each(clean_strings),
        Value::Object(map) => map.values_mut().for_each(clean_strings),
        _ => {}
    }
}

/// `text` as JSON, its strings cleaned ([`clean_strings`]).
fn drive_json(text: &str) -> Result<Value, serde_json::Error> {
    let mut v: Value = serde_json::from_str(text)?;
    clean_strings(&mut v);
    Ok(v)
}

/// [`parse`] on an already parsed JSON value (its strings are cleaned first, as
/// [`parse`] cleans them).
pub fn parse_value(root: &Value) -> Result<HealthReport, SmartctlError> {
    let mut root = root.clone();
    clean_strings(&mut root);
    parse_clean(&root)
}

fn parse_clean(root: &Value) -> Result<HealthReport, SmartctlError> {
    if !root.is_object() {
        return Err(SmartctlError::NotAnObject { found: kind(root) });
    }
    if let Some(e) = scan_output(root) {
        return Err(e);
    }
    let mut cx = Cx::default();
    let mut r = HealthReport {
        source: Source::SmartctlJsonFile,
        ..Default::default()
    };

    for m in messages(&mut cx, root) {
        if says_standby(&m.text) {
            r.power_state = PowerState::Standby;
        }
        cx.note(format!("smartctl {}: {}", m.severity, m.text));
    }

    r.identity = identity(&mut cx, root);
    let attrs = ata_attributes(&mut cx, root);
    let stats = device_statistics(&mut cx, root);
    let nvme = at(root, &["nvme_smart_health_information_log"]);
    let lbs = r.identity.logical_block_size;

    // The drive's verdict.
    r.smart_passed = cx.flag(at(root, &["smart_status", "passed"]), "smart_status.passed");

    temperatures(&mut cx, root, nvme, &stats, &attrs, &mut r);

    // Power-on time and power cycles.
    r.power_on_seconds = power_on_seconds(&mut cx, root);
    r.power_cycles = cx.uint(at(root, &["power_cycle_count"]), "power_cycle_count");

    // NVMe (through smartctl).
    if let Some(log) = nvme {
        nvme_log(&mut cx, log, &mut r);
    }

    // SCSI / SAS.
    scsi(&mut cx, root, &mut r);

    // ATA: Device Statistics first, then attributes.
    ata_wear_and_bytes(&mut cx, &stats, &attrs, lbs, &mut r);
    ata_counts(&mut cx, root, &stats, &attrs, &mut r);
    for a in &attrs.0 {
        if let Some(note) = a.failed_note() {
            cx.note(note);
        }
    }
    fill_detail(&mut cx, root, &mut r);

    r.notes = cx.notes;
    if let Some(code) = at(root, &["smartctl", "exit_status"]).and_then(Value::as_u64) {
        match u8::try_from(code) {
            Ok(c) => ExitStatus(c).apply(&mut r),
            Err(_) => push_unique(
                &mut r.notes,
                format!("ignored smartctl.exit_status: {code} is not an exit status"),
            ),
        }
    }
    Ok(r)
}

/// The temperature and its warning and critical thresholds, from the first source that has each.
fn temperatures(
    cx: &mut Cx,
    root: &Value,
    nvme: Option<&Value>,
    stats: &Stats,
    attrs: &Attrs,
    r: &mut HealthReport,
) {
    r.temperature_celsius =
        cx.celsius(at(root, &["temperature", "current"]), "temperature.current");
    if let Some(log) = nvme {
        fill(
            &mut r.temperature_celsius,
            cx.celsius(at(log, &["temperature"]), "NVMe log temperature"),
        );
    }
    fill(
        &mut r.temperature_celsius,
        stats
            .get("Current Temperature")
            .and_then(|t| (t <= 200).then_some(t as f64)),
    );
    for id in [194u8, 190] {
        if r.temperature_celsius.is_none() {
            r.temperature_celsius = attrs.get(id).and_then(|a| a.temperature(cx));
        }
    }
    r.temperature_warning_celsius = cx.celsius(
        at(root, &["nvme_composite_temperature_threshold", "warning"]),
        "nvme_composite_temperature_threshold.warning",
    );
    fill(
        &mut r.temperature_warning_celsius,
        cx.celsius(
            at(root, &["temperature", "op_limit_max"]),
            "temperature.op_limit_max",
        ),
    );
    fill(
        &mut r.temperature_warning_celsius,
        stats
            .get("Specified Maximum Operating Temperature")
            .and_then(|t| (t <= 200).then_some(t as f64)),
    );
    r.temperature_critical_celsius = cx.celsius(
        at(root, &["nvme_composite_temperature_threshold", "critical"]),
        "nvme_composite_temperature_threshold.critical",
    );
    for key in ["critical_limit_max", "limit_max", "drive_trip"] {
        if r.temperature_critical_celsius.is_none() {
            r.temperature_critical_celsius = cx.celsius(
                at(root, &["temperature", key]),
                &format!("temperature.{key}"),
            );
        }
    }
}

/// ATA wear used and host bytes written and read: Device Statistics first, then attributes.
fn ata_wear_and_bytes(
    cx: &mut Cx,
    stats: &Stats,
    attrs: &Attrs,
    lbs: Option<u32>,
    r: &mut HealthReport,
) {
    fill(
        &mut r.percentage_used_ratio,
        stats.get("Percentage Used Endurance Indicator").and_then(|p| {
            if p <= 255 {
                Some(p as f64 / 100.0)
            } else {
                cx.note(format!(
                    "ignored Device Statistics Percentage Used Endurance Indicator: {p}% is out of range"
                ));
                None
            }
        }),
    );
    if r.percentage_used_ratio.is_none() {
        for id in [177u8, 233, 231, 202, 169] {
            if let Some(w) = attrs.get(id).and_then(|a| a.wear_used(cx)) {
                r.percentage_used_ratio = Some(w);
                break;
            }
        }
    }
    if r.host_written_bytes.is_none() {
        r.host_written_bytes = stats
            .get("Logical Sectors Written")
            .and_then(|n| sectors_to_bytes(cx, n, lbs));
    }
    if r.host_read_bytes.is_none() {
        r.host_read_bytes = stats
            .get("Logical Sectors Read")
            .and_then(|n| sectors_to_bytes(cx, n, lbs));
    }
    for id in [241u8, 246] {
        if r.host_written_bytes.is_none() {
            r.host_written_bytes = attrs
                .get(id)
                .filter(|a| a.lname().contains("writ"))
                .and_then(|a| a.host_bytes(cx, lbs));
        }
    }
    if r.host_read_bytes.is_none() {
        r.host_read_bytes = attrs
            .get(242)
            .filter(|a| a.lname().contains("read"))
            .and_then(|a| a.host_bytes(cx, lbs));
    }
}

/// ATA power-on time, power cycles, sector and error counts: Device Statistics, attributes, logs.
fn ata_counts(cx: &mut Cx, root: &Value, stats: &Stats, attrs: &Attrs, r: &mut HealthReport) {
    fill(
        &mut r.power_on_seconds,
        stats
            .get("Power-on Hours")
            .and_then(|h| h.checked_mul(3600)),
    );
    if r.power_on_seconds.is_none() {
        r.power_on_seconds = attrs.get(9).and_then(|a| a.power_on_seconds(cx));
    }
    fill(&mut r.power_cycles, stats.get("Lifetime Power-On Resets"));
    fill(&mut r.power_cycles, attrs.get(12).and_then(|a| a.count()));
    fill(
        &mut r.reallocated_sectors,
        attrs.get(5).and_then(|a| a.count()),
    );
    fill(
        &mut r.reallocated_sectors,
        stats.get("Number of Reallocated Logical Sectors"),
    );
    r.pending_sectors = attrs.get(197).and_then(|a| a.count());
    r.offline_uncorrectable = attrs.get(198).and_then(|a| a.count());
    r.crc_errors = attrs
        .get(199)
        .filter(|a| a.lname().contains("crc"))
        .and_then(|a| a.count());
    fill(
        &mut r.crc_errors,
        stats.get("Number of Interface CRC Errors"),
    );
    fill(
        &mut r.media_errors,
        stats.get("Number of Reported Uncorrectable Errors"),
    );
    fill(
        &mut r.media_errors,
        attrs
            .get(187)
            .filter(|a| a.lname().contains("uncorrect"))
            .and_then(|a| a.count()),
    );
    if r.error_log_entries.is_none() {
        r.error_log_entries = cx.uint(
            at(root, &["ata_smart_error_log", "extended", "count"]),
            "ata_smart_error_log.extended.count",
        );
    }
    if r.error_log_entries.is_none() {
        r.error_log_entries = cx.uint(
            at(root, &["ata_smart_error_log", "summary", "count"]),
            "ata_smart_error_log.summary.count",
        );
    }
}

struct Message {
    severity: String,
    text: String,
}

fn messages(cx: &mut Cx, root: &Value) -> Vec<Message> {
    let mut out = Vec::new();
    for m in cx.array(at(root, &["smartctl", "messages"]), "smartctl.messages") {
        let text = m.get("string").and_then(Value::as_str).map(str::trim);
        let severity = m
            .get("severity")
            .and_then(Value::as_str)
            .unwrap_or("message");
        if let Some(text) = text.filter(|t| !t.is_empty()) {
            out.push(Message {
                severity: severity.to_string(),
                text: text.to_string(),
            });
        }
    }
    out
}

/// smartctl's line for a disk it left asleep: "Device is in STANDBY mode, exit(2)",
/// "Device is in SLEEP mode", "/dev/sda: Device is in STANDBY (OS) mode".
fn says_standby(text: &str) -> bool {
    let l = text.to_ascii_lowercase();
    l.contains("device is in") && (l.contains("standby") || l.contains("sleep"))
}

fn identity(cx: &mut Cx, root: &Value) -> Identity {
    let mut id = Identity {
        model: cx.text(at(root, &["model_name"]), "model_name"),
        serial: cx.text(at(root, &["serial_number"]), "serial_number"),
        firmware: cx.text(at(root, &["firmware_version"]), "firmware_version"),
        ..Default::default()
    };
    fill(
        &mut id.model,
        cx.text(at(root, &["scsi_model_name"]), "scsi_model_name"),
    );
    if id.model.is_none() {
        let vendor = cx
            .text(at(root, &["scsi_vendor"]), "scsi_vendor")
            .or_else(|| cx.text(at(root, &["vendor"]), "vendor"));
        let product = cx
            .text(at(root, &["scsi_product"]), "scsi_product")
            .or_else(|| cx.text(at(root, &["product"]), "product"));
        id.model = match (vendor, product) {
            (Some(v), Some(p)) => Some(format!("{v} {p}")),
            (v, p) => p.or(v),
        };
    }
    for key in ["scsi_revision", "revision"] {
        if id.firmware.is_none() {
            id.firmware = cx.text(at(root, &[key]), key);
        }
    }

    // WWN: ATA NAA/OUI/ID, SCSI logical unit id, NVMe namespace EUI-64.
    if let Some(w) = at(root, &["wwn"]) {
        let naa = cx.uint(at(w, &["naa"]), "wwn.naa");
        let oui = cx.uint(at(w, &["oui"]), "wwn.oui");
        let idv = cx.uint(at(w, &["id"]), "wwn.id");
        if let (Some(naa), Some(oui), Some(idv)) = (naa, oui, idv) {
            id.wwn = format_ata_wwn(naa, oui, idv);
            if id.wwn.is_none() {
                cx.note(format!(
                    "ignored wwn: naa {naa}, oui {oui}, id {idv} do not fit in 64 bits"
                ));
            }
        }
    }
    if id.wwn.is_none() {
        if let Some(lu) = cx.text(at(root, &["logical_unit_id"]), "logical_unit_id") {
            id.wwn = format_hex_id(&lu);
            if id.wwn.is_none() {
                cx.note(format!("ignored logical_unit_id {lu:?}: not a hex id"));
            }
        }
    }
    if id.wwn.is_none() {
        if let Some(ns) = at(root, &["nvme_namespaces"])
            .and_then(Value::as_array)
            .and_then(|a| a.first())
        {
            if let Some(e) = at(ns, &["eui64"]) {
                let oui = cx.uint(at(e, &["oui"]), "eui64.oui");
                let ext = cx.uint(at(e, &["ext_id"]), "eui64.ext_id");
                if let (Some(oui), Some(ext)) = (oui, ext) {
                    id.wwn = format_eui64(oui, ext);
                }
            }
        }
    }

    id.transport = transport(cx, root);

    id.capacity_bytes = cx.uint(at(root, &["user_capacity", "bytes"]), "user_capacity.bytes");
    fill(
        &mut id.capacity_bytes,
        cx.uint(at(root, &["nvme_total_capacity"]), "nvme_total_capacity"),
    );
    let ns0 = at(root, &["nvme_namespaces"])
        .and_then(Value::as_array)
        .and_then(|a| a.first());
    if let Some(ns) = ns0 {
        fill(
            &mut id.capacity_bytes,
            cx.uint(at(ns, &["size", "bytes"]), "nvme_namespaces[0].size.bytes"),
        );
    }
    let lbs = cx
        .uint(at(root, &["logical_block_size"]), "logical_block_size")
        .or_else(|| {
            ns0.and_then(|ns| {
                cx.uint(
                    at(ns, &["formatted_lba_size"]),
                    "nvme_namespaces[0].formatted_lba_size",
                )
            })
        });
    id.logical_block_size = lbs.and_then(|b| match u32::try_from(b) {
        Ok(b) if b > 0 => Some(b),
        _ => {
            cx.note(format!("ignored logical block size {b}: out of range"));
            None
        }
    });
    id.rotation_rpm = cx
        .uint(at(root, &["rotation_rate"]), "rotation_rate")
        .and_then(|r| {
            u32::try_from(r).ok().or_else(|| {
                cx.note(format!("ignored rotation_rate {r}: out of range"));
                None
            })
        });
    if let Some(t) = at(root, &["device_type", "name"]).and_then(Value::as_str) {
        if !t.eq_ignore_ascii_case("disk") {
            cx.note(format!("the device's SCSI type is {t:?}, not a disk"));
        }
    }
    id
}

fn transport(cx: &mut Cx, root: &Value) -> Transport {
    let protocol = cx.text(at(root, &["device", "protocol"]), "device.protocol");
    let dtype = at(root, &["device", "type"])
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_ascii_lowercase();
    let info = at(root, &["device", "info_name"])
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_ascii_lowercase();
    // "usbjmicron", "usbcypress", "usbsunplus", ...: SATA behind a USB bridge;
    // "sntjmicron", "sntasmedia", "sntrealtek": NVMe behind a USB bridge.
    let usb = dtype.starts_with("usb") || dtype.starts_with("snt") || info.contains("[usb");
    match protocol.as_deref().map(str::to_ascii_uppercase).as_deref() {
        Some("ATA") | Some("NVME") if usb => Transport::Usb,
        Some("ATA") => Transport::Sata,
        Some("NVME") => Transport::Nvme,
        Some("SCSI") => {
            let tp = at(root, &["scsi_transport_protocol", "name"])
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_ascii_uppercase();
            if tp.contains("SAS") {
                Transport::Sas
            } else if usb {
                Transport::Usb
            } else {
                Transport::Scsi
            }
        }
        Some(other) => {
            cx.note(format!("unknown device.protocol {other:?}"));
            Transport::Unknown
        }
        None => {
            if at(root, &["nvme_smart_health_information_log"]).is_some() {
                Transport::Nvme
            } else if at(root, &["ata_smart_attributes"]).is_some() {
                Transport::Sata
            } else {
                Transport::Unknown
            }
        }
    }
}

/// An ATA WWN (`wwn {naa, oui, id}` in smartctl's JSON) as `0x` and 16 hex digits:
/// `naa << 60 | oui << 36 | id`. `None` when a part does not fit its field.
pub fn format_ata_wwn(naa: u64, oui: u64, id: u64) -> Option<String> {
    if naa > 0xf || oui > 0xff_ffff || id > 0xf_ffff_ffff {
        return None;
    }
    Some(format!("0x{:016x}", naa << 60 | oui << 36 | id))
}

/// An NVMe namespace EUI-64 (`eui64 {oui, ext_id}`) as `eui.` and 16 hex digits, as sysfs
/// writes it.
pub fn format_eui64(oui: u64, ext_id: u64) -> Option<String> {
    if oui > 0xff_ffff || ext_id > 0xff_ffff_ffff {
        return None;
    }
    Some(format!("eui.{:016x}", oui << 40 | ext_id))
}

/// A SCSI logical unit id (`"0x5000c500a1b2c3d4"`, or bare hex) as lowercase `0x` hex.
fn format_hex_id(s: &str) -> Option<String> {
    let t = s.trim();
    let hex = t
        .strip_prefix("0x")
        .or_else(|| t.strip_prefix("0X"))
        .unwrap_or(t);
    (!hex.is_empty() && hex.len() <= 32 && hex.chars().all(|c| c.is_ascii_hexdigit()))
        .then(|| format!("0x{}", hex.to_ascii_lowercase()))
}

fn power_on_seconds(cx: &mut Cx, root: &Value) -> Option<u64> {
    let hours = cx.uint(at(root, &["power_on_time", "hours"]), "power_on_time.hours")?;
    let minutes = cx
        .uint(
            at(root, &["power_on_time", "minutes"]),
            "power_on_time.minutes",
        )
        .unwrap_or(0);
    let s = hours
        .checked_mul(3600)
        .and_then(|s| s.checked_add(minutes.checked_mul(60)?));
    if s.is_none() {
        cx.note(format!("ignored power_on_time: {hours} hours overflows"));
    }
    s
}

fn nvme_log(cx: &mut Cx, log: &Value, r: &mut HealthReport) {
    const P: &str = "nvme_smart_health_information_log";
    let f = |k: &str| format!("{P}.{k}");
    if let Some(cw) = cx.uint(at(log, &["critical_warning"]), &f("critical_warning")) {
        match u8::try_from(cw) {
            Ok(b) => {
                r.critical_warning = Some(b);
                r.critical_flags = Some(CriticalFlags::from_bits(b));
            }
            Err(_) => cx.note(format!(
                "ignored {}: {cw} is not a byte",
                f("critical_warning")
            )),
        }
    }
    r.available_spare_ratio = cx.percent(at(log, &["available_spare"]), &f("available_spare"));
    r.available_spare_threshold_ratio = cx.percent(
        at(log, &["available_spare_threshold"]),
        &f("available_spare_threshold"),
    );
    r.percentage_used_ratio = cx.percent(at(log, &["percentage_used"]), &f("percentage_used"));
    for (key, slot) in [
        ("data_units_read", &mut r.host_read_bytes),
        ("data_units_written", &mut r.host_written_bytes),
    ] {
        if let Some(units) = cx.big(at(log, &[key]), &f(key)) {
            *slot = units.checked_mul(NVME_DATA_UNIT);
            if slot.is_none() {
                cx.note(format!("ignored {}: {units} units overflow", f(key)));
            }
        }
    }
    fill(
        &mut r.power_cycles,
        cx.uint(at(log, &["power_cycles"]), &f("power_cycles")),
    );
    if r.power_on_seconds.is_none() {
        if let Some(h) = cx.uint(at(log, &["power_on_hours"]), &f("power_on_hours")) {
            r.power_on_seconds = h.checked_mul(3600);
        }
    }
    r.unsafe_shutdowns = cx.uint(at(log, &["unsafe_shutdowns"]), &f("unsafe_shutdowns"));
    r.media_errors = cx.uint(at(log, &["media_errors"]), &f("media_errors"));
    r.error_log_entries = cx.uint(at(log, &["num_err_log_entries"]), &f("num_err_log_entries"));
}

fn scsi(cx: &mut Cx, root: &Value, r: &mut HealthReport) {
    fill(
        &mut r.reallocated_sectors,
        cx.uint(
            at(root, &["scsi_grown_defect_list"]),
            "scsi_grown_defect_list",
        ),
    );
    if let Some(log) = at(root, &["scsi_error_counter_log"]) {
        let mut uncorrected: Option<u64> = None;
        for dir in ["read", "write", "verify"] {
            let what = format!("scsi_error_counter_log.{dir}.total_uncorrected_errors");
            if let Some(n) = cx.uint(at(log, &[dir, "total_uncorrected_errors"]), &what) {
                uncorrected = Some(uncorrected.unwrap_or(0).saturating_add(n));
            }
        }
        fill(&mut r.media_errors, uncorrected);
        let mut rounded = false;
        for (dir, slot) in [
            ("write", &mut r.host_written_bytes),
            ("read", &mut r.host_read_bytes),
        ] {
            if slot.is_some() {
                continue;
            }
            if let Some(v) = at(log, &[dir, "gigabytes_processed"]) {
                *slot = gigabytes_to_bytes(v);
                if slot.is_some() {
                    rounded = true;
                } else {
                    cx.odd(
                        &format!("scsi_error_counter_log.{dir}.gigabytes_processed"),
                        v,
                        "a decimal number of gigabytes",
                    );
                }
            }
        }
        if rounded {
            cx.note(
                "SAS host bytes come from the error counter log's gigabytes processed, rounded to 1 MB"
                    .to_string(),
            );
        }
    }
    fill(
        &mut r.percentage_used_ratio,
        cx.percent(
            at(root, &["scsi_percentage_used_endurance_indicator"]),
            "scsi_percentage_used_endurance_indicator",
        ),
    );
    fill(
        &mut r.power_cycles,
        cx.uint(
            at(
                root,
                &[
                    "scsi_start_stop_cycle_counter",
                    "accumulated_start_stop_cycles",
                ],
            ),
            "scsi_start_stop_cycle_counter.accumulated_start_stop_cycles",
        ),
    );
}

/// smartctl's `gigabytes_processed` ("176987.332", 10^9 bytes, three decimals) in bytes,
/// read exactly from the decimal text.
fn gigabytes_to_bytes(v: &Value) -> Option<u128> {
    match v {
        Value::String(s) => {
            let s = s.trim();
            let (int, frac) = s.split_once('.').unwrap_or((s, ""));
            if int.is_empty() && frac.is_empty()
                || !int.chars().all(|c| c.is_ascii_digit())
                || !frac.chars().all(|c| c.is_ascii_digit())
            {
                return None;
            }
            let int: u128 = if int.is_empty() { 0 } else { int.parse().ok()? };
            let frac9: String = frac.chars().chain(std::iter::repeat('0')).take(9).collect();
            int.checked_mul(1_000_000_000)?
                .checked_add(frac9.parse::<u128>().ok()?)
        }
        Value::Number(n) => {
            if let Some(u) = n.as_u64() {
                u128::from(u).checked_mul(1_000_000_000)
            } else {
                let f = n.as_f64()? * 1e9;
                (0.0..3.4e38).contains(&f).then(|| f.round() as u128)
            }
        }
        _ => None,
    }
}

fn sectors_to_bytes(cx: &mut Cx, sectors: u64, lbs: Option<u32>) -> Option<u128> {
    let size = lbs.unwrap_or_else(|| {
        cx.note("logical block size unknown: sector counts taken as 512-byte sectors".to_string());
        512
    });
    u128::from(sectors).checked_mul(u128::from(size))
}

// ---- ATA attributes ---------------------------------------------------------------------

struct Attr {
    id: u8,
    name: String,
    value: Option<u64>,
    thresh: Option<u64>,
    raw_value: Option<u64>,
    raw_string: Option<String>,
    when_failed: Option<String>,
}

struct Attrs(Vec<Attr>);

impl Attrs {
    fn get(&self, id: u8) -> Option<&Attr> {
        self.0.iter().find(|a| a.id == id)
    }
}

fn ata_attributes(cx: &mut Cx, root: &Value) -> Attrs {
    let mut out: Vec<Attr> = Vec::new();
    let table = cx.array(
        at(root, &["ata_smart_attributes", "table"]),
        "ata_smart_attributes.table",
    );
    for (i, e) in table.iter().enumerate() {
        let what = format!("ata_smart_attributes.table[{i}]");
        let Some(id) = cx.uint(at(e, &["id"]), &format!("{what}.id")) else {
            continue;
        };
        let Ok(id) = u8::try_from(id) else {
            cx.note(format!("ignored {what}: attribute id {id} is out of range"));
            continue;
        };
        if out.iter().any(|a| a.id == id) {
            cx.note(format!("ignored a second attribute {id}"));
            continue;
        }
        out.push(Attr {
            id,
            name: at(e, &["name"])
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string(),
            value: cx.uint(at(e, &["value"]), &format!("attribute {id} value")),
            thresh: at(e, &["thresh"]).and_then(Value::as_u64),
            raw_value: cx.uint(
                at(e, &["raw", "value"]),
                &format!("attribute {id} raw.value"),
            ),
            raw_string: at(e, &["raw", "string"])
                .and_then(Value::as_str)
                .map(str::to_string),
            when_failed: at(e, &["when_failed"])
                .and_then(Value::as_str)
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_string),
        });
    }
    Attrs(out)
}

/// The first number of a rendered raw value: "1975", "2725 (151 234 0)",
/// "32 (Min/Max 24/38)", "1730h+32m+10.123s", "0x000000000005".
fn leading_number(s: &str) -> Option<u64> {
    let s = s.trim();
    if let Some(hex) = s.strip_prefix("0x") {
        let digits: String = hex.chars().take_while(|c| c.is_ascii_hexdigit()).collect();
        return u64::from_str_radix(&digits, 16).ok();
    }
    let digits: String = s.chars().take_while(|c| c.is_ascii_digit()).collect();
    let rest = &s[digits.len()..];
    if rest.starts_with('.') || rest.starts_with(',') {
        return None; // a fraction or a localised number: not a count
    }
    digits.parse().ok()
}

impl Attr {
    fn lname(&self) -> String {
        self.name.to_ascii_lowercase()
    }

    /// The attribute's count: the first number of smartctl's rendering, else the raw value.
    fn count(&self) -> Option<u64> {
        match &self.raw_string {
            Some(s) => leading_number(s),
            None => self.raw_value,
        }
    }

    fn temperature(&self, cx: &mut Cx) -> Option<f64> {
        let t = match &self.raw_string {
            Some(s) => leading_number(s),
            None => self.raw_value.map(|v| v & 0xff),
        }?;
        if t <= 200 {
            Some(t as f64)
        } else {
            cx.note(format!(
                "ignored attribute {} {}: {t} °C is not a plausible temperature",
                self.id, self.name
            ));
            None
        }
    }

    fn power_on_seconds(&self, cx: &mut Cx) -> Option<u64> {
        let n = self.lname();
        let per_unit: u64 = if n.contains("half_min") {
            30
        } else if n.contains("minute") {
            60
        } else if n.contains("second") || n.ends_with("_sec") {
            1
        } else if n.contains("hour") {
            3600
        } else {
            cx.note(format!(
                "ignored attribute 9 {:?}: its unit is not known",
                self.name
            ));
            return None;
        };
        self.count()?.checked_mul(per_unit)
    }

    /// Share of life used, from a wear attribute.
    fn wear_used(&self, cx: &mut Cx) -> Option<f64> {
        let n = self.lname();
        if !(n.contains("wear") || n.contains("life") || n.contains("endurance")) {
            return None; // the id means something else on this drive
        }
        if n.contains("used") {
            let raw = self.count()?;
            if raw <= 1000 {
                return Some(raw as f64 / 100.0);
            }
            cx.note(format!(
                "ignored attribute {} {}: raw {raw} is not a percentage",
                self.id, self.name
            ));
            return None;
        }
        let v = self.value?;
        if v <= 100 {
            Some((100 - v) as f64 / 100.0)
        } else {
            cx.note(format!(
                "ignored attribute {} {}: normalised value {v} is above 100",
                self.id, self.name
            ));
            None
        }
    }

    /// Host bytes from a "written"/"read" counter, in the unit its name gives.
    fn host_bytes(&self, cx: &mut Cx, lbs: Option<u32>) -> Option<u128> {
        let n = self.lname();
        let raw = u128::from(self.count()?);
        let unit: u128 = if n.contains("32mib") {
            32 << 20
        } else if n.contains("gib") {
            1 << 30
        } else if n.contains("mib") {
            1 << 20
        } else if n.contains("lba") || n.contains("sector") {
            return sectors_to_bytes(cx, u64::try_from(raw).ok()?, lbs);
        } else {
            cx.note(format!(
                "ignored attribute {} {:?}: the unit of its count is not known",
                self.id, self.name
            ));
            return None;
        };
        raw.checked_mul(unit)
    }

    fn failed_note(&self) -> Option<String> {
        let when = self.when_failed.as_deref()?;
        let when = match when {
            "now" => "now",
            "past" => "in the past",
            other => other,
        };
        let detail = match (self.value, self.thresh) {
            (Some(v), Some(t)) => format!(" (normalised {v}, threshold {t})"),
            _ => String::new(),
        };
        Some(format!(
            "attribute {} {} at or below threshold {when}{detail}",
            self.id, self.name
        ))
    }
}

// ---- ATA Device Statistics -----------------------------------------------------------------

struct Stats(Vec<(String, u64)>);

impl Stats {
    fn get(&self, name: &str) -> Option<u64> {
        self.0
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| *v)
    }
}

fn device_statistics(cx: &mut Cx, root: &Value) -> Stats {
    let mut out = Vec::new();
    let pages = cx.array(
        at(root, &["ata_device_statistics", "pages"]),
        "ata_device_statistics.pages",
    );
    for page in pages {
        let table = cx.array(at(page, &["table"]), "ata_device_statistics table");
        for e in table {
            let Some(name) = at(e, &["name"]).and_then(Value::as_str) else {
                continue;
            };
            if at(e, &["flags", "valid"]).and_then(Value::as_bool) == Some(false) {
                continue;
            }
            if let Some(v) = cx.uint(at(e, &["value"]), &format!("Device Statistics {name:?}")) {
                if !out.iter().any(|(n, _): &(String, u64)| n == name) {
                    out.push((name.trim().to_string(), v));
                }
            }
        }
    }
    Stats(out)
}

// ---- Everything else the drive says (issue 20) --------------------------------------------

fn small<T: TryFrom<u64>>(cx: &mut Cx, v: Option<&Value>, what: &str) -> Option<T> {
    let n = cx.uint(v, what)?;
    let got = T::try_from(n).ok();
    if got.is_none() {
        cx.note(format!("ignored {what}: {n} is out of range"));
    }
    got
}

/// Every ATA attribute in full. An entry without a usable id is left out (with a note).
fn ata_attribute_table(cx: &mut Cx, root: &Value) -> Vec<AtaAttribute> {
    let mut out: Vec<AtaAttribute> = Vec::new();
    let table = cx.array(
        at(root, &["ata_smart_attributes", "table"]),
        "ata_smart_attributes.table",
    );
    for (i, e) in table.iter().enumerate() {
        let what = format!("ata_smart_attributes.table[{i}]");
        let Some(id) = small::<u8>(cx, at(e, &["id"]), &format!("{what}.id")) else {
            continue;
        };
        if id == 0 || out.iter().any(|a| a.id == id) || out.len() >= MAX_ATA_ATTRIBUTES {
            continue;
        }
        let name = at(e, &["name"])
            .and_then(Value::as_str)
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .unwrap_or("Unknown_Attribute")
            .to_string();
        // Labelled as `ata_attributes` labels them, so one odd value is one note.
        let value = small::<u8>(cx, at(e, &["value"]), &format!("attribute {id} value"));
        let worst = small::<u8>(cx, at(e, &["worst"]), &format!("{what}.worst"));
        let threshold = small::<u8>(cx, at(e, &["thresh"]), &format!("{what}.thresh"));
        let when = at(e, &["when_failed"])
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_ascii_lowercase();
        let below = |v: Option<u8>| matches!((v, threshold), (Some(v), Some(t)) if t > 0 && v <= t);
        out.push(AtaAttribute {
            id,
            name,
            value,
            worst,
            threshold,
            raw: cx.uint(
                at(e, &["raw", "value"]),
                &format!("attribute {id} raw.value"),
            ),
            raw_string: cx.text(at(e, &["raw", "string"]), &format!("{what}.raw.string")),
            flags: at(e, &["flags", "string"])
                .and_then(Value::as_str)
                .map(|f| f.trim().to_string()),
            prefailure: at(e, &["flags", "prefailure"])
                .and_then(Value::as_bool)
                .unwrap_or(false),
            failed_now: when.contains("now") || below(value),
            failed_in_past: when.contains("past") || below(worst),
        });
    }
    out
}

/// Every valid Device Statistics entry, signed (temperatures can be below zero).
fn ata_devstat_table(cx: &mut Cx, root: &Value) -> Vec<DeviceStatistic> {
    let mut out = Vec::new();
    let pages = cx.array(
        at(root, &["ata_device_statistics", "pages"]),
        "ata_device_statistics.pages",
    );
    for page in pages {
        let Some(number) = at(page, &["number"])
            .and_then(Value::as_u64)
            .and_then(|n| u8::try_from(n).ok())
        else {
            continue;
        };
        let table = cx.array(at(page, &["table"]), "ata_device_statistics table");
        for e in table {
            if out.len() >= MAX_DEVICE_STATISTICS {
                return out;
            }
            let Some(name) = at(e, &["name"]).and_then(Value::as_str).map(str::trim) else {
                continue;
            };
            if name.is_empty() || at(e, &["flags", "valid"]).and_then(Value::as_bool) == Some(false)
            {
                continue;
            }
            let Some(value) = at(e, &["value"]).and_then(Value::as_i64) else {
                continue;
            };
            let offset = at(e, &["offset"])
                .and_then(Value::as_u64)
                .and_then(|o| u16::try_from(o).ok())
                .unwrap_or(0);
            out.push(DeviceStatistic {
                page: number,
                offset,
                name: name.to_string(),
                value,
                condition_met: at(e, &["flags", "monitored_condition_met"])
                    .and_then(Value::as_bool)
                    .unwrap_or(false),
            });
        }
    }
    out
}

fn sata_phy(cx: &mut Cx, root: &Value) -> Vec<PhyEvent> {
    let mut out: Vec<PhyEvent> = Vec::new();
    let table = cx.array(
        at(root, &["sata_phy_event_counters", "table"]),
        "sata_phy_event_counters.table",
    );
    for e in table {
        let (Some(id), Some(value)) = (
            at(e, &["id"])
                .and_then(Value::as_u64)
                .and_then(|i| u16::try_from(i).ok()),
            at(e, &["value"]).and_then(Value::as_u64),
        ) else {
            continue;
        };
        if out.iter().any(|p| p.id == id) || out.len() >= MAX_PHY_EVENTS {
            continue;
        }
        out.push(PhyEvent {
            id,
            name: at(e, &["name"])
                .and_then(Value::as_str)
                .map(|n| n.trim().to_string())
                .unwrap_or_default(),
            value,
            overflow: at(e, &["overflow"])
                .and_then(Value::as_bool)
                .unwrap_or(false),
        });
    }
    out
}

fn scsi_detail(cx: &mut Cx, root: &Value) -> Option<ScsiDetail> {
    let mut d = ScsiDetail::default();
    let mut any = false;
    if let Some(log) = at(root, &["scsi_error_counter_log"]) {
        for (dir, slot) in [
            ("read", &mut d.read),
            ("write", &mut d.write),
            ("verify", &mut d.verify),
        ] {
            let Some(c) = at(log, &[dir]) else { continue };
            let f = |k: &str| format!("scsi_error_counter_log.{dir}.{k}");
            let mut u = |k: &str| cx.uint(at(c, &[k]), &f(k));
            *slot = Some(ScsiErrorCounters {
                corrected_by_ecc_fast: u("errors_corrected_by_eccfast"),
                corrected_by_ecc_delayed: u("errors_corrected_by_eccdelayed"),
                corrected_by_rereads_rewrites: u("errors_corrected_by_rereads_rewrites"),
                total_corrected: u("total_errors_corrected"),
                correction_algorithm_invocations: u("correction_algorithm_invocations"),
                total_uncorrected: u("total_uncorrected_errors"),
                processed_bytes: at(c, &["gigabytes_processed"]).and_then(gigabytes_to_bytes),
            });
            any = true;
        }
    }
    d.grown_defects = cx.uint(
        at(root, &["scsi_grown_defect_list"]),
        "scsi_grown_defect_list",
    );
    if let Some(ss) = at(root, &["scsi_start_stop_cycle_counter"]) {
        const P: &str = "scsi_start_stop_cycle_counter";
        let mut u = |k: &str| cx.uint(at(ss, &[k]), &format!("{P}.{k}"));
        d.start_stop_cycles = u("accumulated_start_stop_cycles");
        d.start_stop_cycles_specified = u("specified_cycle_count_over_device_lifetime");
        d.load_unload_cycles = u("accumulated_load_unload_cycles");
        d.load_unload_cycles_specified = u("specified_load_unload_count_over_device_lifetime");
        any = true;
    }
    let scsi = at(root, &["device", "protocol"])
        .and_then(Value::as_str)
        .is_some_and(|p| p.eq_ignore_ascii_case("SCSI"));
    if scsi || any || d.grown_defects.is_some() {
        d.drive_trip_celsius = cx.celsius(
            at(root, &["temperature", "drive_trip"]),
            "temperature.drive_trip",
        );
        d.reference_celsius = cx.celsius(
            at(root, &["temperature", "reference"]),
            "temperature.reference",
        );
    }
    (any || d.grown_defects.is_some() || d.drive_trip_celsius.is_some() || scsi).then_some(d)
}

/// NVMe counters as smartctl prints them (temperatures already in °C).
fn nvme_detail(cx: &mut Cx, log: &Value, root: &Value) -> NvmeDetail {
    const P: &str = "nvme_smart_health_information_log";
    let u = |cx: &mut Cx, k: &str| cx.uint(at(log, &[k]), &format!("{P}.{k}"));
    let mut d = NvmeDetail {
        warning_temperature_minutes: u(cx, "warning_temp_time"),
        critical_temperature_minutes: u(cx, "critical_comp_time"),
        thermal_transitions: [
            u(cx, "thermal_temp1_transition_count"),
            u(cx, "thermal_temp2_transition_count"),
        ],
        thermal_seconds: [
            u(cx, "thermal_temp1_total_time"),
            u(cx, "thermal_temp2_total_time"),
        ],
        controller_busy_minutes: u(cx, "controller_busy_time"),
        host_read_commands: u(cx, "host_reads"),
        host_write_commands: u(cx, "host_writes"),
        ..Default::default()
    };
    let sensors = cx.array(
        at(log, &["temperature_sensors"]),
        "nvme_smart_health_information_log.temperature_sensors",
    );
    for (i, t) in sensors.iter().enumerate().take(8) {
        if let Some(c) = cx.celsius(Some(t), &format!("{P}.temperature_sensors[{i}]")) {
            d.temperature_sensors.push(TemperatureSensor {
                sensor: i as u8 + 1,
                celsius: c,
            });
        }
    }
    let entries = cx.array(
        at(root, &["nvme_error_information_log", "table"]),
        "nvme_error_information_log.table",
    );
    for e in entries {
        let n = |k: &[&str]| at(e, k).and_then(Value::as_u64);
        let Some(count) = n(&["error_count"]).filter(|&c| c > 0) else {
            continue;
        };
        let u16_ = |k: &[&str]| n(k).and_then(|v| u16::try_from(v).ok()).unwrap_or(0);
        d.error_log.push(NvmeErrorEntry {
            error_count: count,
            submission_queue_id: u16_(&["submission_queue_id"]),
            command_id: u16_(&["command_id"]),
            status_field: u16_(&["status_field", "value"]),
            parameter_error_location: u16_(&["parm_error_location"]),
            lba: n(&["lba", "value"]).unwrap_or(0),
            nsid: n(&["nsid"])
                .and_then(|v| u32::try_from(v).ok())
                .unwrap_or(0),
        });
    }
    d.error_log
        .sort_by_key(|e| std::cmp::Reverse(e.error_count));
    d.error_log.truncate(MAX_ERROR_ENTRIES);
    d
}

/// SATA `interface_speed` {max, current} {units_per_second, bits_per_unit}.
fn link_of(_cx: &mut Cx, root: &Value) -> Option<Link> {
    let speed = |which: &str| {
        let s = at(root, &["interface_speed", which])?;
        let units = at(s, &["units_per_second"]).and_then(Value::as_u64)?;
        let bits = at(s, &["bits_per_unit"]).and_then(Value::as_u64)?;
        let v = units as f64 * bits as f64;
        (v > 0.0 && v < 1e12).then_some(v)
    };
    let (current, max) = (speed("current"), speed("max"));
    if current.is_none() && max.is_none() {
        return None;
    }
    Some(Link {
        current_speed_transfers_per_second: current,
        max_speed_transfers_per_second: max,
        current_width: None,
        max_width: None,
        source: "smartctl".into(),
    })
}

fn ata_test_kind(code: u64) -> &'static str {
    match code & 0x7f {
        1 => "short",
        2 => "extended",
        3 => "conveyance",
        4 => "selective",
        0x40..=0x7e => "vendor",
        _ => "unknown",
    }
}

/// The ATA, NVMe and SCSI self-test logs as smartctl prints them, newest first.
fn self_test_log(cx: &mut Cx, root: &Value) -> Vec<SelfTest> {
    let mut all = Vec::new();
    // ATA: the extended log when there is one (it holds more), else the standard one.
    for log in ["extended", "standard"] {
        let table = cx.array(
            at(root, &["ata_smart_self_test_log", log, "table"]),
            "ata_smart_self_test_log table",
        );
        if table.is_empty() {
            continue;
        }
        for e in table {
            let code = at(e, &["type", "value"])
                .and_then(Value::as_u64)
                .unwrap_or(0);
            let status = at(e, &["status", "value"]).and_then(Value::as_u64);
            let passed = at(e, &["status", "passed"]).and_then(Value::as_bool);
            let result = match (status.map(|s| s >> 4), passed) {
                (Some(15), _) => "in_progress",
                (Some(1), _) => "aborted",
                (Some(2), _) => "interrupted",
                (_, Some(true)) | (Some(0), None) => "passed",
                (_, Some(false)) | (Some(3..=8), None) => "failed",
                _ => "unknown",
            };
            all.push(SelfTest {
                kind: ata_test_kind(code).into(),
                description: text_at(e, &["type", "string"]),
                result: result.into(),
                result_description: text_at(e, &["status", "string"]),
                power_on_hours: at(e, &["lifetime_hours"]).and_then(Value::as_u64),
                first_failing_lba: (result == "failed")
                    .then(|| {
                        at(e, &["lba"])
                            .or_else(|| at(e, &["lba_of_first_error"]))
                            .and_then(Value::as_u64)
                    })
                    .flatten(),
            });
        }
        break;
    }
    // NVMe (smartctl 7.4 and newer).
    let table = cx.array(
        at(root, &["nvme_self_test_log", "table"]),
        "nvme_self_test_log.table",
    );
    for e in table {
        let code = at(e, &["self_test_code", "value"])
            .and_then(Value::as_u64)
            .unwrap_or(0);
        let res = at(e, &["self_test_result", "value"])
            .and_then(Value::as_u64)
            .unwrap_or(0xf);
        if res == 0xf {
            continue; // an unused entry
        }
        let result = nvme_result(res as u8);
        all.push(SelfTest {
            kind: nvme_kind(code as u8).into(),
            description: text_at(e, &["self_test_code", "string"]),
            result: result.into(),
            result_description: text_at(e, &["self_test_result", "string"]),
            power_on_hours: at(e, &["power_on_hours"]).and_then(Value::as_u64),
            first_failing_lba: (result == "failed")
                .then(|| at(e, &["lba"]).and_then(Value::as_u64))
                .flatten(),
        });
    }
    // SCSI: scsi_self_test_0 .. scsi_self_test_19.
    for i in 0..20 {
        let Some(e) = at(root, &[&format!("scsi_self_test_{i}")]) else {
            continue;
        };
        let code = at(e, &["code", "value"])
            .and_then(Value::as_u64)
            .unwrap_or(0);
        let res = at(e, &["result", "value"])
            .and_then(Value::as_u64)
            .unwrap_or(99);
        let result = match res {
            0 => "passed",
            1 => "aborted",
            2 => "interrupted",
            3..=7 => "failed",
            15 => "in_progress",
            _ => "unknown",
        };
        all.push(SelfTest {
            kind: match code {
                1 | 5 => "short",
                2 | 6 => "extended",
                _ => "unknown",
            }
            .into(),
            description: text_at(e, &["code", "string"]),
            result: result.into(),
            result_description: text_at(e, &["result", "string"]),
            power_on_hours: at(e, &["power_on_time", "hours"]).and_then(Value::as_u64),
            first_failing_lba: (result == "failed")
                .then(|| at(e, &["lba_first_failure", "value"]).and_then(Value::as_u64))
                .flatten(),
        });
    }
    latest_per_kind(all)
}

fn text_at(v: &Value, path: &[&str]) -> String {
    at(v, path)
        .and_then(Value::as_str)
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// The NVMe Device Self-test Code (bits 7:4 of a result's first byte, or smartctl's
/// `self_test_code.value`).
pub fn nvme_kind(code: u8) -> &'static str {
    match code {
        1 => "short",
        2 => "extended",
        0xe => "vendor",
        _ => "unknown",
    }
}

/// The NVMe Self-test Result (bits 3:0).
pub fn nvme_result(res: u8) -> &'static str {
    match res {
        0 => "passed",
        1 | 3 | 4 | 8 | 9 => "aborted",
        2 => "interrupted",
        5..=7 => "failed",
        _ => "unknown",
    }
}

/// Fills the detail fields of a report from smartctl's JSON.
fn fill_detail(cx: &mut Cx, root: &Value, r: &mut HealthReport) {
    r.ata_attributes = ata_attribute_table(cx, root);
    r.ata_device_statistics = ata_devstat_table(cx, root);
    r.sata_phy_events = sata_phy(cx, root);
    r.scsi = scsi_detail(cx, root);
    if let Some(log) = at(root, &["nvme_smart_health_information_log"]) {
        r.nvme = Some(nvme_detail(cx, log, root));
    }
    r.link = link_of(cx, root);
    r.self_tests = self_test_log(cx, root);
    r.self_test_running = self_test_running(root, &r.self_tests);
}

/// The self-test running now, from smartctl's JSON: ATA's self-test execution status
/// (`ata_smart_data.self_test.status`: value 0xF_ in progress, `remaining_percent`), NVMe's
/// current operation and completion (`nvme_self_test_log`), SCSI's newest log entry with
/// result 15 (in progress; smartctl gives no share done). `log` is the parsed self-test
/// log, which names the kind of an ATA test in progress when the drive logs it.
pub fn self_test_running(root: &Value, log: &[SelfTest]) -> Option<SelfTestProgress> {
    if let Some(st) = at(root, &["ata_smart_data", "self_test", "status"]) {
        let value = st.get("value").and_then(Value::as_u64).unwrap_or(0);
        if value >> 4 == 15 {
            let remaining = st
                .get("remaining_percent")
                .and_then(Value::as_u64)
                .unwrap_or((value & 0x0f) * 10)
                .min(100);
            let kind = log
                .iter()
                .find(|t| t.result == "in_progress")
                .map_or("unknown", |t| t.kind.as_str());
            return Some(SelfTestProgress {
                kind: kind.into(),
                done_ratio: Some((100 - remaining) as f64 / 100.0),
            });
        }
    }
    if let Some(op) = at(
        root,
        &["nvme_self_test_log", "current_self_test_operation", "value"],
    )
    .and_then(Value::as_u64)
    .filter(|&v| v != 0)
    {
        let pct = at(
            root,
            &["nvme_self_test_log", "current_self_test_completion_percent"],
        )
        .and_then(Value::as_u64);
        return Some(SelfTestProgress {
            kind: nvme_kind((op & 0x0f) as u8).into(),
            done_ratio: pct.map(|p| p.min(100) as f64 / 100.0),
        });
    }
    if at(root, &["scsi_self_test_0"]).is_some() {
        if let Some(t) = log.iter().find(|t| t.result == "in_progress") {
            return Some(SelfTestProgress {
                kind: t.kind.clone(),
                done_ratio: None,
            });
        }
    }
    None
}

/// Runs `smartctl --json=c ACTION... [-d TYPE] DEV` for a command that changes no data
/// (`-t short`, `-t long`, `-X`), killed after `timeout`. Ok when smartctl says the drive
/// took it; else smartctl's or the drive's words (a test already running, no self-test
/// support, a device that cannot be opened).
pub fn run_action(
    program: &Path,
    dev: &Path,
    dev_type: Option<&str>,
    action: &[&str],
    timeout: Duration,
) -> Result<(), SmartctlError> {
    let mut args: Vec<&OsStr> = vec![OsStr::new("--json=c")];
    args.extend(action.iter().map(OsStr::new));
    if let Some(t) = dev_type {
        args.push(OsStr::new("-d"));
        args.push(OsStr::new(t));
    }
    args.push(dev.as_os_str());
    let out = run_with_timeout(program, &args, dev, timeout)?;
    action_outcome(dev, &action.join(" "), out.status, &out.stdout, &out.stderr)
}

/// Whether an action smartctl ran was done: exit bits 0-2 clear. Pure, for tests.
pub fn action_outcome(
    dev: &Path,
    action: &str,
    status: ExitStatus,
    stdout: &[u8],
    stderr: &[u8],
) -> Result<(), SmartctlError> {
    if !(status.command_line_failed() || status.device_open_failed() || status.command_failed()) {
        return Ok(());
    }
    let text = String::from_utf8_lossy(stdout);
    let mut cx = Cx::default();
    let from_json = drive_json(&text).ok().map(|root| {
        messages(&mut cx, &root)
            .into_iter()
            .map(|m| m.text)
            .filter(|t| !t.is_empty())
            .collect::<Vec<_>>()
            .join("; ")
    });
    let message = from_json
        .filter(|m| !m.is_empty())
        .or_else(|| first_line(stderr))
        .or_else(|| first_line(stdout))
        .unwrap_or_else(|| status.describe());
    Err(SmartctlError::ActionFailed {
        dev: dev.to_path_buf(),
        action: action.to_string(),
        message: crate::process::clip(&message, 400),
    })
}

// ---------------------------------------------------------------------------------------
// smartctl --scan
// ---------------------------------------------------------------------------------------

/// One device from `smartctl --scan --json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScanEntry {
    /// The device to give smartctl (`/dev/sda`, `/dev/bus/0`).
    pub name: String,
    /// The `-d` type (`sat`, `nvme`, `megaraid,1`).
    #[serde(rename = "type")]
    pub type_: Option<String>,
    /// `ATA`, `SCSI` or `NVMe`.
    pub protocol: Option<String>,
}

/// Parses `smartctl --scan --json`. Entries without a name are skipped.
pub fn parse_scan(text: &str) -> Result<Vec<ScanEntry>, SmartctlError> {
    let root: Value = serde_json::from_str(text).map_err(|e| SmartctlError::NotJson {
        detail: e.to_string(),
    })?;
    if !root.is_object() {
        return Err(SmartctlError::NotAnObject { found: kind(&root) });
    }
    let devices = at(&root, &["devices"])
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    let s = |e: &Value, k: &str| {
        at(e, &[k])
            .and_then(Value::as_str)
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
    };
    Ok(devices
        .iter()
        .filter_map(|e| {
            Some(ScanEntry {
                name: s(e, "name")?,
                type_: s(e, "type"),
                protocol: s(e, "protocol"),
            })
        })
        .collect())
}

// ---------------------------------------------------------------------------------------
// Running smartctl
// ---------------------------------------------------------------------------------------

/// Finds `smartctl` on `PATH`, then in the sbin directories.
pub fn find_smartctl() -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    dirs.extend(SBIN_DIRS.iter().map(PathBuf::from));
    find_program_in(OsStr::new("smartctl"), &dirs)
}

/// The first executable file called `name` in `dirs`.
pub fn find_program_in(name: &OsStr, dirs: &[PathBuf]) -> Option<PathBuf> {
    dirs.iter()
        .filter(|d| !d.as_os_str().is_empty())
        .map(|d| d.join(name))
        .find(|p| {
            std::fs::metadata(p)
                .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
                .unwrap_or(false)
        })
}

/// Reads `dev` through the `smartctl` found by [`find_smartctl`]; see [`read_device_with`].
pub fn read_device(dev: &Path, timeout: Duration) -> Result<HealthReport, SmartctlError> {
    let program = find_smartctl().ok_or(SmartctlError::NotInstalled)?;
    read_device_with(&program, dev, timeout)
}

/// Runs `program` (a smartctl) with [`SMARTCTL_ARGS`] on `dev`, killing it (and anything
/// it started) after `timeout`.
///
/// - A disk in standby is not woken: the report has `power_state = Standby`, the identity
///   smartctl printed (usually only the transport), and nothing else.
/// - A device smartctl cannot open, or will not read, is an error carrying smartctl's own
///   message, unless some data came out anyway (then a report with notes).
/// - Otherwise the parsed report, with the exit status applied, `source = Smartctl` and
///   `power_state = Active`.
pub fn read_device_with(
    program: &Path,
    dev: &Path,
    timeout: Duration,
) -> Result<HealthReport, SmartctlError> {
    read_device_typed_with(program, dev, None, timeout)
}

/// [`read_device_with`] with smartctl's `-d TYPE` (`megaraid,1`, `cciss,0`, `sat`...):
/// a drive behind a RAID controller is reached through the controller's device, which
/// need not be a node here (smartctl maps `/dev/bus/0` itself), so it is not checked.
pub fn read_device_typed_with(
    program: &Path,
    dev: &Path,
    dev_type: Option<&str>,
    timeout: Duration,
) -> Result<HealthReport, SmartctlError> {
    if dev_type.is_none() && std::fs::symlink_metadata(dev).is_err() {
        return Err(SmartctlError::NoDevice {
            dev: dev.to_path_buf(),
        });
    }
    let mut args: Vec<&OsStr> = SMARTCTL_ARGS.iter().map(OsStr::new).collect();
    if let Some(t) = dev_type {
        args.push(OsStr::new("-d"));
        args.push(OsStr::new(t));
    }
    args.push(dev.as_os_str());
    let out = run_with_timeout(program, &args, dev, timeout)?;
    interpret(dev, out.status, &out.stdout, &out.stderr)
}

/// Runs `smartctl --scan-open --json=c` (each device opened to learn its type: this is
/// how drives behind RAID controllers are found), killed after `timeout`; its stdout.
pub fn scan_open(timeout: Duration) -> Result<String, SmartctlError> {
    let program = find_smartctl().ok_or(SmartctlError::NotInstalled)?;
    let args = [OsStr::new("--scan-open"), OsStr::new("--json=c")];
    let out = run_with_timeout(&program, &args, Path::new("--scan-open"), timeout)?;
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

struct RunOutput {
    status: ExitStatus,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
}

/// Runs `program` with `args` under the one child supervisor (`process::run`: its own
/// process group, killed whole at the time limit, when dropped and when the daemon
/// stops; output read through caps); `dev` names what is read, in errors.
fn run_with_timeout(
    program: &Path,
    args: &[&OsStr],
    dev: &Path,
    timeout: Duration,
) -> Result<RunOutput, SmartctlError> {
    let limits = crate::process::Limits {
        stdout: (OUTPUT_CAP, 0),
        stderr: (STDERR_CAP, 0),
        timeout,
    };
    let out = crate::process::run(Command::new(program).args(args), &limits).map_err(|e| {
        use crate::process::RunError;
        match e {
            RunError::Spawn(e) if e.kind() == std::io::ErrorKind::NotFound => {
                SmartctlError::NotInstalled
            }
            RunError::Spawn(source) => SmartctlError::Spawn {
                program: program.to_path_buf(),
                source,
            },
            RunError::Wait(source) | RunError::Read(source) => SmartctlError::Io {
                dev: dev.to_path_buf(),
                source,
            },
            RunError::TimedOut(_) => SmartctlError::Timeout {
                dev: dev.to_path_buf(),
                secs: timeout.as_secs_f64(),
            },
        }
    })?;
    let (status, stdout, stderr) = (out.status, out.stdout, out.stderr);
    if stdout.dropped() > 0 {
        return Err(SmartctlError::TooMuchOutput {
            dev: dev.to_path_buf(),
            bytes: stdout.total,
            cap_mib: OUTPUT_CAP >> 20,
            excerpt: stdout.excerpt(200).unwrap_or_default(),
        });
    }

    let code = match status.code() {
        Some(c) => c,
        None => {
            use std::os::unix::process::ExitStatusExt;
            return Err(SmartctlError::Killed {
                dev: dev.to_path_buf(),
                signal: status.signal().unwrap_or(0),
            });
        }
    };
    Ok(RunOutput {
        status: ExitStatus((code & 0xff) as u8),
        stdout: stdout.head,
        stderr: stderr.head,
    })
}

fn first_line(bytes: &[u8]) -> Option<String> {
    String::from_utf8_lossy(bytes)
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .map(|l| l.chars().take(300).collect())
}

fn has_data(r: &HealthReport) -> bool {
    r.identity.model.is_some()
        || r.identity.serial.is_some()
        || r.smart_passed.is_some()
        || r.temperature_celsius.is_some()
        || r.power_on_seconds.is_some()
        || r.percentage_used_ratio.is_some()
        || r.critical_warning.is_some()
        || r.reallocated_sectors.is_some()
}

/// Turns what smartctl printed and its exit status into a report or an error.
fn interpret(
    dev: &Path,
    status: ExitStatus,
    stdout: &[u8],
    stderr: &[u8],
) -> Result<HealthReport, SmartctlError> {
    let text = String::from_utf8_lossy(stdout);
    let root: Option<Value> = drive_json(&text).ok().filter(Value::is_object);

    let Some(root) = root else {
        // Not JSON: a smartctl older than 7.0, a crash, or something that is not smartctl.
        let all = format!("{text}\n{}", String::from_utf8_lossy(stderr));
        if all.lines().any(says_standby) {
            return Ok(standby_report(dev, Identity::default()));
        }
        let message = first_line(stderr).or_else(|| first_line(stdout));
        return Err(
            match (
                status.command_line_failed(),
                status.device_open_failed(),
                message,
            ) {
                (true, _, Some(m)) => SmartctlError::TooOld { message: m },
                (false, true, Some(m)) => SmartctlError::DeviceOpen {
                    dev: dev.to_path_buf(),
                    message: m,
                },
                _ => SmartctlError::NoOutput {
                    dev: dev.to_path_buf(),
                    status: status.0,
                    meaning: if text.trim().is_empty() {
                        format!("{}; it printed nothing", status.describe())
                    } else {
                        format!("{}; its output is not JSON", status.describe())
                    },
                },
            },
        );
    };

    let mut report = parse_clean(&root)?;
    if report.power_state == PowerState::Standby {
        return Ok(standby_report(dev, report.identity));
    }
    if (status.command_line_failed() || status.device_open_failed()) && !has_data(&report) {
        let mut cx = Cx::default();
        let msgs = messages(&mut cx, &root);
        // "/dev/sda: Unable to detect device type": the error names the device already.
        let prefix = format!("{}: ", dev.display());
        let msgs: Vec<Message> = msgs
            .into_iter()
            .map(|m| Message {
                text: m.text.strip_prefix(&prefix).unwrap_or(&m.text).to_string(),
                severity: m.severity,
            })
            .collect();
        let errors: Vec<&str> = msgs
            .iter()
            .filter(|m| m.severity == "error")
            .map(|m| m.text.as_str())
            .collect();
        let message = if !errors.is_empty() {
            errors.join("; ")
        } else if !msgs.is_empty() {
            msgs.iter()
                .map(|m| m.text.as_str())
                .collect::<Vec<_>>()
                .join("; ")
        } else {
            first_line(stderr).unwrap_or_else(|| status.describe())
        };
        return Err(if status.command_line_failed() {
            SmartctlError::Refused {
                dev: dev.to_path_buf(),
                message,
            }
        } else {
            SmartctlError::DeviceOpen {
                dev: dev.to_path_buf(),
                message,
            }
        });
    }
    if status.command_line_failed() || status.device_open_failed() {
        push_unique(
            &mut report.notes,
            format!(
                "partial data: smartctl exit status {} ({})",
                status.0,
                status.describe()
            ),
        );
    }
    status.apply(&mut report);
    report.source = Source::Smartctl;
    report.power_state = PowerState::Active;
    Ok(report)
}

fn standby_report(dev: &Path, identity: Identity) -> HealthReport {
    HealthReport {
        identity,
        source: Source::Smartctl,
        power_state: PowerState::Standby,
        notes: vec![format!(
            "{} is in standby: not read, so as not to spin it up",
            dev.display()
        )],
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(text: &str) -> HealthReport {
        parse(text).unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    /// Every string of `v`, however deep.
    fn strings(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::String(s) => out.push(s.clone()),
            Value::Array(a) => a.iter().for_each(|x| strings(x, out)),
            Value::Object(m) => m.values().for_each(|x| strings(x, out)),
            _ => {}
        }
    }

    #[test]
    fn strings_a_drive_reports_reach_the_report_as_one_bounded_line() {
        use crate::fmt::MAX_DRIVE_TEXT_BYTES;
        let evil = r"EVIL\nverdict: OK\u001b[2J\u0007\u0000\r\u009b\u202e";
        let huge = "S".repeat(1 << 20);
        let text = format!(
            r#"{{"device": {{"protocol": "ATA"}},
              "model_name": "{evil}", "serial_number": "{huge}", "firmware_version": "{evil}",
              "smartctl": {{"messages": [{{"string": "{evil}{huge}", "severity": "warning"}}]}},
              "smart_status": {{"passed": true}},
              "ata_smart_attributes": {{"table": [
                {{"id": 5, "name": "{evil}", "value": 100, "worst": 100, "thresh": 10,
                  "flags": {{"string": "{evil}"}}, "raw": {{"value": 0, "string": "0{evil}"}}}}]}},
              "ata_device_statistics": {{"pages": [{{"number": 1, "table": [
                {{"name": "{huge}", "value": 3, "offset": 8, "flags": {{"valid": true}}}}]}}]}}}}"#
        );
        let r = p(&text);
        assert_eq!(r.identity.model.as_deref(), Some("EVIL verdict: OK [2J"));
        let serial = r.identity.serial.as_deref().unwrap();
        assert!(
            serial.len() <= MAX_DRIVE_TEXT_BYTES && serial.ends_with('…'),
            "{serial}"
        );
        assert_eq!(r.ata_attributes[0].name, "EVIL verdict: OK [2J");
        let json = serde_json::to_value(&r).unwrap();
        let mut all = Vec::new();
        strings(&json, &mut all);
        for s in &all {
            assert!(!s.chars().any(char::is_control), "{s:?}");
            assert!(!s.contains('\u{202e}'), "{s:?}");
            // A note says what it ignored in a sentence around at most one such string.
            assert!(
                s.len() <= 2 * MAX_DRIVE_TEXT_BYTES,
                "{} bytes: {s}",
                s.len()
            );
        }
        // Megabytes in, a few kB out: no surface that shows the report can grow with them.
        assert!(
            json.to_string().len() < 16 << 10,
            "{}",
            json.to_string().len()
        );
    }

    #[test]
    fn exit_status_bits() {
        assert!(ExitStatus(0).phrases().is_empty());
        assert_eq!(ExitStatus(0).describe(), "no problem");
        let s = ExitStatus(216); // smart-fail2.json: bits 3, 4, 6, 7
        assert!(s.disk_failing() && s.prefail_below_threshold());
        assert!(s.error_log_has_errors() && s.self_test_log_has_errors());
        assert!(!s.command_line_failed() && !s.device_open_failed() && !s.command_failed());
        assert!(!s.below_threshold_in_past());
        assert_eq!(
            s.phrases(),
            vec![
                "SMART status says DISK FAILING",
                "prefail attributes are at or below threshold",
                "the device error log has errors",
                "the self-test log has errors",
            ]
        );
        assert_eq!(ExitStatus(0xff).phrases().len(), 8);
        assert_eq!(ExitStatus(1).phrases(), vec!["command line did not parse"]);
        assert!(ExitStatus(2).phrases()[0].contains("open failed"));
        assert!(ExitStatus(4).phrases()[0].contains("command failed"));
        assert!(ExitStatus(32).below_threshold_in_past());
    }

    #[test]
    fn exit_status_applied() {
        let mut r = HealthReport::default();
        ExitStatus(8).apply(&mut r);
        assert_eq!(r.smart_passed, Some(false));
        let mut r = HealthReport {
            smart_passed: Some(true),
            ..Default::default()
        };
        ExitStatus(0x40 | 0x20).apply(&mut r);
        assert_eq!(r.smart_passed, Some(true));
        assert_eq!(r.notes.len(), 2);
        ExitStatus(0x40 | 0x20).apply(&mut r);
        assert_eq!(r.notes.len(), 2, "applying twice adds nothing");
        ExitStatus(8).apply(&mut r);
        assert_eq!(r.smart_passed, Some(false));
        assert!(r.notes.iter().any(|n| n.contains("although")));
        // Bits 0 and 1 are for the runner.
        let mut r = HealthReport::default();
        ExitStatus(3).apply(&mut r);
        assert_eq!(r, HealthReport::default());
    }

    #[test]
    fn wwn_formatting() {
        assert_eq!(
            format_ata_wwn(5, 0x0014ee, 0x26101eee7).as_deref(),
            Some("0x50014ee26101eee7")
        );
        assert_eq!(
            format_ata_wwn(5, 3274, 10283057623).as_deref(),
            Some("0x5000cca264eb01d7")
        );
        assert_eq!(
            format_ata_wwn(0, 0, 0).as_deref(),
            Some("0x0000000000000000")
        );
        assert_eq!(
            format_ata_wwn(0xf, 0xff_ffff, 0xf_ffff_ffff).as_deref(),
            Some("0xffffffffffffffff")
        );
        assert_eq!(format_ata_wwn(16, 0, 0), None);
        assert_eq!(format_ata_wwn(5, 1 << 24, 0), None);
        assert_eq!(format_ata_wwn(5, 0, 1 << 36), None);
        assert_eq!(
            format_eui64(6584743, 171819811633).as_deref(),
            Some("eui.6479a72801424331")
        );
        assert_eq!(format_eui64(1 << 24, 0), None);
        assert_eq!(
            format_hex_id("0x5000C500A1B2C3D4").as_deref(),
            Some("0x5000c500a1b2c3d4")
        );
        assert_eq!(format_hex_id("zz"), None);
        let r = p(r#"{"wwn": {"naa": 5, "oui": 3274, "id": 10283057623}}"#);
        assert_eq!(r.identity.wwn.as_deref(), Some("0x5000cca264eb01d7"));
        let r = p(r#"{"wwn": {"naa": 99, "oui": 3274, "id": 1}}"#);
        assert_eq!(r.identity.wwn, None);
        assert!(!r.notes.is_empty());
        let r = p(r#"{"logical_unit_id": "0x5000C5009ED24C1B"}"#);
        assert_eq!(r.identity.wwn.as_deref(), Some("0x5000c5009ed24c1b"));
    }

    #[test]
    fn empty_object_is_all_none() {
        let r = p("{}");
        assert_eq!(
            r,
            HealthReport {
                source: Source::SmartctlJsonFile,
                ..Default::default()
            }
        );
        // Only the smartctl header: still nothing.
        let r = p(
            r#"{"json_format_version":[1,0],"smartctl":{"version":[7,3],"exit_status":0},
               "local_time":{"time_t":1796014106}}"#,
        );
        assert_eq!(
            r,
            HealthReport {
                source: Source::SmartctlJsonFile,
                ..Default::default()
            }
        );
    }

    #[test]
    fn garbage_is_an_error() {
        for bad in [
            "",
            "garbage",
            "{",
            "{\"a\":",
            "\u{0}\u{1}",
            "smartctl 7.3 2022-02-28",
        ] {
            let e = parse(bad).unwrap_err();
            assert!(matches!(e, SmartctlError::NotJson { .. }), "{bad:?}: {e}");
            assert!(!e.to_string().contains('\n'));
        }
        for (bad, found) in [
            ("[]", "array"),
            ("[{}]", "array"),
            ("null", "null"),
            ("42", "number"),
            ("\"x\"", "string"),
            ("true", "boolean"),
        ] {
            let e = parse(bad).unwrap_err();
            assert!(e.to_string().contains(found), "{bad}: {e}");
        }
        // Deep nesting is refused by serde_json's recursion limit, not a stack overflow.
        let deep = "[".repeat(100_000);
        assert!(parse(&deep).is_err());
    }

    #[test]
    fn wrong_types_are_notes_not_panics() {
        let r = p(r#"{
            "model_name": 5, "serial_number": ["x"], "firmware_version": {},
            "wwn": "abc", "user_capacity": {"bytes": "lots"}, "logical_block_size": -512,
            "rotation_rate": 1.5, "device": {"protocol": 7, "type": null},
            "smart_status": {"passed": "yes"}, "temperature": {"current": "hot"},
            "power_on_time": {"hours": []}, "power_cycle_count": {"n": 1},
            "ata_smart_attributes": {"table": "none"},
            "ata_device_statistics": {"pages": [1, "x", {"table": 3}]},
            "nvme_smart_health_information_log": [1, 2],
            "scsi_error_counter_log": {"read": {"gigabytes_processed": "1.2.3", "total_uncorrected_errors": -1}},
            "smartctl": {"messages": "oops", "exit_status": "two"}
        }"#);
        assert_eq!(r.identity.model, None);
        assert_eq!(r.identity.serial, None);
        assert_eq!(r.identity.capacity_bytes, None);
        assert_eq!(r.identity.logical_block_size, None);
        assert_eq!(r.identity.rotation_rpm, None);
        assert_eq!(r.smart_passed, None);
        assert_eq!(r.temperature_celsius, None);
        assert_eq!(r.power_on_seconds, None);
        assert_eq!(r.power_cycles, None);
        assert_eq!(r.media_errors, None);
        assert_eq!(r.host_read_bytes, None);
        assert!(r.notes.len() >= 8, "{:#?}", r.notes);

        // Attribute entries of every wrong shape.
        let r = p(r#"{"ata_smart_attributes": {"table": [
            null, 1, "x", {}, {"id": "five"}, {"id": 300}, {"id": -5},
            {"id": 5, "raw": "7"}, {"id": 197, "raw": {"value": "x", "string": 3}},
            {"id": 194, "raw": {"value": 1e300}}, {"id": 9, "name": "Power_On_Hours", "raw": {"string": "-3"}},
            {"id": 177, "name": "Wear_Leveling_Count", "value": -4},
            {"id": 241, "name": "Total_LBAs_Written", "raw": {"value": 18446744073709551615}}
        ]}}"#);
        assert_eq!(r.reallocated_sectors, None);
        assert_eq!(r.pending_sectors, None);
        assert_eq!(r.temperature_celsius, None);
        assert_eq!(r.power_on_seconds, None);
        assert_eq!(r.percentage_used_ratio, None);
        assert_eq!(
            r.host_written_bytes,
            Some(u128::from(u64::MAX) * 512),
            "no block size: 512 assumed, and said"
        );
        assert!(r.notes.iter().any(|n| n.contains("512-byte")));
    }

    #[test]
    fn huge_and_negative_numbers() {
        let r = p(r#"{
            "power_on_time": {"hours": 18446744073709551615},
            "power_cycle_count": 18446744073709551615,
            "temperature": {"current": -300},
            "user_capacity": {"bytes": 1e30},
            "logical_block_size": 4294967296,
            "nvme_smart_health_information_log": {
                "critical_warning": 256, "available_spare": -1, "percentage_used": 100000,
                "data_units_written": 340282366920938463463374607431768211455,
                "data_units_read": "340282366920938463463374607431768211455",
                "power_on_hours": -1, "media_errors": 1e300
            }
        }"#);
        assert_eq!(r.power_on_seconds, None);
        assert_eq!(r.power_cycles, Some(u64::MAX));
        assert_eq!(r.temperature_celsius, None);
        assert_eq!(r.identity.capacity_bytes, None);
        assert_eq!(r.identity.logical_block_size, None);
        assert_eq!(r.critical_warning, None);
        assert_eq!(r.critical_flags, None);
        assert_eq!(r.available_spare_ratio, None);
        assert_eq!(r.percentage_used_ratio, None);
        assert_eq!(r.host_written_bytes, None);
        assert_eq!(r.host_read_bytes, None);
        assert_eq!(r.media_errors, None);
        assert!(r.notes.len() >= 6, "{:#?}", r.notes);
        // Beyond f64: serde_json refuses the document (a clear error, not a panic).
        let e = parse(r#"{"power_cycle_count": 1e400}"#).unwrap_err();
        assert!(e.to_string().contains("out of range"), "{e}");
        // Negative in places that hold signed values.
        let r = p(r#"{"temperature": {"current": -5}, "smartctl": {"exit_status": -1}}"#);
        assert_eq!(r.temperature_celsius, Some(-5.0));
        assert!(r.notes.is_empty());
        let r = p(r#"{"smartctl": {"exit_status": 4096}}"#);
        assert_eq!(r.notes.len(), 1);
    }

    #[test]
    fn packed_raw_values() {
        assert_eq!(leading_number("1975"), Some(1975));
        assert_eq!(leading_number("2725 (151 234 0)"), Some(2725));
        assert_eq!(leading_number(" 32 (Min/Max 24/38)"), Some(32));
        assert_eq!(leading_number("1730h+32m+10.123s"), Some(1730));
        assert_eq!(leading_number("0x00000000000a"), Some(10));
        assert_eq!(leading_number("12.5"), None);
        assert_eq!(leading_number(""), None);
        assert_eq!(leading_number("-3"), None);
        assert_eq!(leading_number("99999999999999999999999"), None);
        // Without a rendering, the temperature is the raw value's low byte.
        let r = p(
            r#"{"ata_smart_attributes":{"table":[{"id":194,"name":"Temperature_Celsius","raw":{"value":77309411357}}]}}"#,
        );
        assert_eq!(r.temperature_celsius, Some(29.0));
    }

    #[test]
    fn wear_attribute_names() {
        let one = |id: u8, name: &str, value: u64, raw: u64| {
            p(&format!(
                r#"{{"ata_smart_attributes":{{"table":[{{"id":{id},"name":"{name}","value":{value},"raw":{{"value":{raw},"string":"{raw}"}}}}]}}}}"#
            ))
            .percentage_used_ratio
        };
        assert_eq!(one(177, "Wear_Leveling_Count", 99, 5), Some(0.01));
        assert_eq!(one(233, "Media_Wearout_Indicator", 15, 0), Some(0.85));
        assert_eq!(one(231, "SSD_Life_Left", 100, 0), Some(0.0));
        assert_eq!(one(202, "Percent_Lifetime_Remain", 97, 3), Some(0.03));
        assert_eq!(one(202, "Perc_Rated_Life_Used", 97, 3), Some(0.03));
        assert_eq!(one(202, "Percent_Lifetime_Used", 0, 120), Some(1.2));
        assert_eq!(one(169, "Remaining_Lifetime_Perc", 90, 90), Some(0.1));
        // Same ids, other meanings: not wear.
        assert_eq!(one(202, "Data_Address_Mark_Errs", 100, 0), None);
        assert_eq!(one(231, "Temperature_Celsius", 70, 30), None);
        assert_eq!(one(233, "Total_NAND_Writes_GiB", 100, 5000), None);
        assert_eq!(one(177, "Wear_Leveling_Count", 200, 5), None);
    }

    #[test]
    fn host_write_units() {
        let one = |id: u8, name: &str, raw: u64, lbs: &str| {
            p(&format!(
                r#"{{{lbs}"ata_smart_attributes":{{"table":[{{"id":{id},"name":"{name}","value":100,"raw":{{"value":{raw},"string":"{raw}"}}}}]}}}}"#
            ))
            .host_written_bytes
        };
        let b4k = r#""logical_block_size": 4096,"#;
        assert_eq!(one(241, "Total_LBAs_Written", 10, b4k), Some(40960));
        assert_eq!(
            one(241, "Host_Writes_32MiB", 10, b4k),
            Some(10 * 32 * 1024 * 1024)
        );
        assert_eq!(one(241, "Host_Writes_GiB", 2, b4k), Some(2 << 30));
        assert_eq!(one(241, "Host_Writes_MiB", 2, b4k), Some(2 << 20));
        assert_eq!(
            one(
                246,
                "Total_LBAs_Written",
                3,
                r#""logical_block_size": 512,"#
            ),
            Some(1536)
        );
        assert_eq!(one(241, "Unknown_Attribute", 3, b4k), None);
        assert_eq!(one(246, "Total_Host_Sector_Read", 3, b4k), None);
        // Device Statistics win over attributes.
        let r = p(r#"{"logical_block_size": 512,
            "ata_smart_attributes":{"table":[
              {"id":241,"name":"Total_LBAs_Written","value":100,"raw":{"value":1,"string":"1"}},
              {"id":177,"name":"Wear_Leveling_Count","value":90,"raw":{"value":1,"string":"1"}}]},
            "ata_device_statistics":{"pages":[
              {"number":1,"table":[{"offset":24,"name":"Logical Sectors Written","size":6,"value":1000,"flags":{"valid":true}},
                                   {"offset":40,"name":"Logical Sectors Read","size":6,"value":7,"flags":{"valid":false}}]},
              {"number":7,"table":[{"offset":8,"name":"Percentage Used Endurance Indicator","size":1,"value":3}]}]}}"#);
        assert_eq!(r.host_written_bytes, Some(512_000));
        assert_eq!(r.host_read_bytes, None, "an invalid statistic is not read");
        assert_eq!(r.percentage_used_ratio, Some(0.03));
    }

    #[test]
    fn sas_gigabytes() {
        assert_eq!(
            gigabytes_to_bytes(&Value::from("176987.332")),
            Some(176_987_332_000_000)
        );
        assert_eq!(gigabytes_to_bytes(&Value::from("0.001")), Some(1_000_000));
        assert_eq!(gigabytes_to_bytes(&Value::from("5")), Some(5_000_000_000));
        assert_eq!(gigabytes_to_bytes(&Value::from(1.5)), Some(1_500_000_000));
        assert_eq!(gigabytes_to_bytes(&Value::from(-1.5)), None);
        assert_eq!(gigabytes_to_bytes(&Value::from("-1")), None);
        assert_eq!(gigabytes_to_bytes(&Value::from(".")), None);
        assert_eq!(gigabytes_to_bytes(&Value::from("1e5")), None);
        assert_eq!(gigabytes_to_bytes(&Value::from("9".repeat(60))), None);
    }

    #[test]
    fn transports() {
        let t = |dev: &str, extra: &str| {
            p(&format!(r#"{{"device": {dev}{extra}}}"#))
                .identity
                .transport
        };
        assert_eq!(t(r#"{"type":"sat","protocol":"ATA"}"#, ""), Transport::Sata);
        assert_eq!(
            t(r#"{"type":"usbjmicron","protocol":"ATA"}"#, ""),
            Transport::Usb
        );
        assert_eq!(
            t(r#"{"type":"sntjmicron","protocol":"NVMe"}"#, ""),
            Transport::Usb
        );
        assert_eq!(
            t(r#"{"type":"nvme","protocol":"NVMe"}"#, ""),
            Transport::Nvme
        );
        assert_eq!(
            t(r#"{"type":"scsi","protocol":"SCSI"}"#, ""),
            Transport::Scsi
        );
        assert_eq!(
            t(
                r#"{"type":"scsi","protocol":"SCSI"}"#,
                r#","scsi_transport_protocol":{"name":"SAS (SPL-4)","value":6}"#
            ),
            Transport::Sas
        );
        assert_eq!(
            t(r#"{"protocol":"Carrier pigeon"}"#, ""),
            Transport::Unknown
        );
    }

    #[test]
    fn standby_message_in_saved_output() {
        let r = p(
            r#"{"smartctl":{"messages":[{"string":"Device is in STANDBY mode, exit(2)","severity":"information"}],"exit_status":2},
                    "device":{"name":"/dev/sdb","type":"sat","protocol":"ATA"}}"#,
        );
        assert_eq!(r.power_state, PowerState::Standby);
        assert_eq!(r.identity.transport, Transport::Sata);
        assert!(says_standby(
            "/dev/sda: Device is in STANDBY (OS) mode, exit(2)"
        ));
        assert!(says_standby("Device is in SLEEP mode, exit(2)"));
        assert!(!says_standby("Device is in ACTIVE or IDLE mode"));
    }

    #[test]
    fn program_lookup() {
        let dir = tempfile::tempdir().unwrap();
        let exe = dir.path().join("smartctl");
        std::fs::write(&exe, "#!/bin/sh\n").unwrap();
        let dirs = vec![
            PathBuf::new(),
            dir.path().join("nope"),
            dir.path().to_path_buf(),
        ];
        assert_eq!(
            find_program_in(OsStr::new("smartctl"), &dirs),
            None,
            "not executable"
        );
        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(find_program_in(OsStr::new("smartctl"), &dirs), Some(exe));
        assert_eq!(find_program_in(OsStr::new("smartctl"), &[]), None);
    }

    #[test]
    fn interpret_without_json() {
        let dev = Path::new("/dev/sdz");
        let e = interpret(
            dev,
            ExitStatus(1),
            b"",
            b"=======> UNRECOGNIZED OPTION: json=c\n",
        )
        .unwrap_err();
        assert!(matches!(e, SmartctlError::TooOld { .. }), "{e}");
        assert!(e.to_string().contains("UNRECOGNIZED OPTION"));
        let e = interpret(dev, ExitStatus(0), b"", b"").unwrap_err();
        assert!(e.to_string().contains("printed nothing"), "{e}");
        let e = interpret(dev, ExitStatus(0), b"hello", b"").unwrap_err();
        assert!(e.to_string().contains("not JSON"), "{e}");
        let r = interpret(
            dev,
            ExitStatus(2),
            b"Device is in STANDBY mode, exit(2)\n",
            b"",
        )
        .unwrap();
        assert_eq!(r.power_state, PowerState::Standby);
        // An open failure with some data anyway: a partial report.
        let r = interpret(
            dev,
            ExitStatus(2),
            br#"{"model_name":"X","smartctl":{"messages":[{"string":"Read Device Identity failed","severity":"error"}]}}"#,
            b"",
        )
        .unwrap();
        assert_eq!(r.identity.model.as_deref(), Some("X"));
        assert!(r.notes.iter().any(|n| n.starts_with("partial data")));
    }
}
