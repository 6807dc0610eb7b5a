//! Everything else the drive says, beyond the headline figures of [`super::model`]: every
//! ATA SMART attribute, the ATA Device Statistics pages, SATA PHY event counters, the SCSI
//! error counter log and start-stop counts, the NVMe SMART log's counters and temperature
//! sensors, the NVMe error log's recent entries, the link's speed and width, and the
//! self-test logs. Filled by the readers (`smartctl`, `nvme`, `link`); shown in the JSON of
//! `driveprobe health` and the API, and exported as metrics (`metrics.rs`, within the
//! per-drive series budget documented in docs/alerts.md).

use serde::{Deserialize, Serialize};

/// The most ATA attributes kept (the SMART attribute table has 30 slots).
pub const MAX_ATA_ATTRIBUTES: usize = 30;
/// The most Device Statistics entries kept (seven standard pages of a few entries each).
pub const MAX_DEVICE_STATISTICS: usize = 64;
/// The most SATA PHY event counters kept (ATA defines 19 ids; vendors add a few).
pub const MAX_PHY_EVENTS: usize = 32;
/// The most NVMe error log entries kept (the most recent first).
pub const MAX_ERROR_ENTRIES: usize = 16;

/// One ATA SMART attribute, as `smartctl --attributes` shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct AtaAttribute {
    pub id: u8,
    pub name: String,
    /// Normalised value (1-253, higher is better).
    pub value: Option<u8>,
    pub worst: Option<u8>,
    /// The threshold at or below which the attribute has failed (0: never fails).
    pub threshold: Option<u8>,
    /// The raw value, 48 bits, as the drive stores it.
    pub raw: Option<u64>,
    /// smartctl's rendering of the raw value (applies its drive database).
    pub raw_string: Option<String>,
    /// smartctl's flags string (`PO-R--`: P prefailure, O updated online, S speed, R error
    /// rate, C event count, K auto keep).
    pub flags: Option<String>,
    pub prefailure: bool,
    /// value at or below threshold now ("FAILING_NOW").
    pub failed_now: bool,
    /// worst at or below threshold at some time ("In_the_past").
    pub failed_in_past: bool,
}

impl AtaAttribute {
    /// The `attribute` label of the metrics: id and name, `5 Reallocated_Sector_Ct`.
    pub fn label(&self) -> String {
        format!("{} {}", self.id, self.name)
    }
}

/// One entry of the ATA Device Statistics log (`--log=devstat`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct DeviceStatistic {
    pub page: u8,
    pub offset: u16,
    pub name: String,
    /// The value; signed, since temperatures over life may be below zero.
    pub value: i64,
    /// The drive's "monitored condition met" flag for this entry.
    pub condition_met: bool,
}

/// One SATA PHY event counter (`--log=sataphy`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct PhyEvent {
    pub id: u16,
    pub name: String,
    pub value: u64,
    /// The counter reached its maximum and stopped.
    pub overflow: bool,
}

/// One direction of the SCSI error counter log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct ScsiErrorCounters {
    pub corrected_by_ecc_fast: Option<u64>,
    pub corrected_by_ecc_delayed: Option<u64>,
    pub corrected_by_rereads_rewrites: Option<u64>,
    pub total_corrected: Option<u64>,
    pub correction_algorithm_invocations: Option<u64>,
    pub processed_bytes: Option<u128>,
    pub total_uncorrected: Option<u64>,
}

/// SCSI (SAS) logs beyond the headline figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct ScsiDetail {
    pub read: Option<ScsiErrorCounters>,
    pub write: Option<ScsiErrorCounters>,
    pub verify: Option<ScsiErrorCounters>,
    pub grown_defects: Option<u64>,
    pub start_stop_cycles: Option<u64>,
    pub start_stop_cycles_specified: Option<u64>,
    pub load_unload_cycles: Option<u64>,
    pub load_unload_cycles_specified: Option<u64>,
    /// The drive's trip temperature (`temperature.drive_trip`), °C.
    pub drive_trip_celsius: Option<f64>,
    /// The reference temperature (`temperature.reference`... `scsi_temperature`), °C.
    pub reference_celsius: Option<f64>,
}

/// One entry of the NVMe Error Information log (01h).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct NvmeErrorEntry {
    pub error_count: u64,
    pub submission_queue_id: u16,
    pub command_id: u16,
    /// The status field (bit 0 is the phase tag, as the log page holds it).
    pub status_field: u16,
    pub parameter_error_location: u16,
    pub lba: u64,
    pub nsid: u32,
}

/// The NVMe SMART / Health log's counters beyond the headline figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct NvmeDetail {
    /// Minutes spent at or above the warning composite temperature.
    pub warning_temperature_minutes: Option<u64>,
    /// Minutes spent at or above the critical composite temperature.
    pub critical_temperature_minutes: Option<u64>,
    /// Temperature sensors 1-8, °C (whole degrees); absent sensors are left out.
    pub temperature_sensors: Vec<TemperatureSensor>,
    /// Thermal management temperature 1 and 2: times the controller entered it.
    pub thermal_transitions: [Option<u64>; 2],
    /// Thermal management temperature 1 and 2: seconds spent in it.
    pub thermal_seconds: [Option<u64>; 2],
    /// Controller busy time, minutes.
    pub controller_busy_minutes: Option<u64>,
    pub host_read_commands: Option<u64>,
    pub host_write_commands: Option<u64>,
    /// The error log's most recent entries (highest error count first).
    pub error_log: Vec<NvmeErrorEntry>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct TemperatureSensor {
    /// 1-8.
    pub sensor: u8,
    pub celsius: f64,
}

/// The link between the host and the drive: PCIe for NVMe, SATA for SATA disks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Link {
    /// Per-lane line rate, transfers (bits) per second: PCIe 8 GT/s is 8e9, SATA 6.0 Gb/s
    /// is 6e9.
    pub current_speed_transfers_per_second: Option<f64>,
    pub max_speed_transfers_per_second: Option<f64>,
    /// Lanes (PCIe); SATA is always 1.
    pub current_width: Option<u32>,
    pub max_width: Option<u32>,
    /// Where it was read: `pcie-sysfs` or `smartctl`.
    pub source: String,
}

impl Link {
    /// True when the link trained below what both ends can do.
    pub fn degraded(&self) -> bool {
        let lower = |c: Option<f64>, m: Option<f64>| matches!((c, m), (Some(c), Some(m)) if c < m);
        lower(
            self.current_speed_transfers_per_second,
            self.max_speed_transfers_per_second,
        ) || lower(
            self.current_width.map(f64::from),
            self.max_width.map(f64::from),
        )
    }
}

/// The kind of a self-test, across transports.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct SelfTest {
    /// `short`, `extended`, `conveyance`, `selective`, `vendor`, `unknown`.
    pub kind: String,
    /// The drive's words for it (`Short offline`, `Background long`).
    pub description: String,
    /// `passed`, `failed`, `aborted`, `interrupted`, `in_progress`, `unknown`.
    pub result: String,
    /// The drive's words for the result.
    pub result_description: String,
    /// When it ran, in the drive's power-on hours.
    pub power_on_hours: Option<u64>,
    /// A failed test's first failing LBA.
    pub first_failing_lba: Option<u64>,
}

impl SelfTest {
    pub fn failed(&self) -> bool {
        self.result == "failed"
    }

    /// Finished with a verdict on the media: passed or failed (not aborted, interrupted,
    /// in progress or unknown).
    pub fn conclusive(&self) -> bool {
        matches!(self.result.as_str(), "passed" | "failed")
    }
}

/// A self-test the drive is running now (whoever started it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct SelfTestProgress {
    /// `short`, `extended`, ... as in [`SelfTest::kind`]; `unknown` when the drive does not
    /// say (ATA reports only that a test runs and how much is left).
    pub kind: String,
    /// The share done, 0 to 1; None when the drive does not say (SCSI through smartctl).
    pub done_ratio: Option<f64>,
}

/// Keeps the most recent test of each kind (the logs list newest first) and, behind one
/// that did not finish (aborted, interrupted, in progress), the most recent one that did:
/// a failure is not forgotten because a later test of its kind was stopped or still runs.
/// Only a later pass of the same kind clears it.
pub fn latest_per_kind(all: Vec<SelfTest>) -> Vec<SelfTest> {
    let mut out: Vec<SelfTest> = Vec::new();
    for t in all {
        let mut same = out.iter().filter(|o| o.kind == t.kind);
        match (same.next(), same.next()) {
            (None, _) => out.push(t),
            (Some(newest), None) if !newest.conclusive() && t.conclusive() => out.push(t),
            _ => {}
        }
    }
    out
}

/// Parses a Linux PCIe link speed as sysfs writes it (`8.0 GT/s PCIe`, `2.5 GT/s`,
/// `16.0 GT/s PCIe`; older kernels `5 GT/s`) into transfers per second. `Unknown` and
/// anything else is `None`.
pub fn parse_pcie_speed(s: &str) -> Option<f64> {
    let t = s.trim();
    let num = t.split_whitespace().next()?;
    let unit = t.split_whitespace().nth(1)?;
    if !unit.eq_ignore_ascii_case("GT/s") {
        return None;
    }
    let v: f64 = num.parse().ok()?;
    (v.is_finite() && v > 0.0 && v < 1000.0).then_some(v * 1e9)
}

/// Parses a PCIe link width (`4`, `x4`); 0 and garbage are `None`.
pub fn parse_pcie_width(s: &str) -> Option<u32> {
    let t = s.trim();
    let t = t.strip_prefix('x').unwrap_or(t);
    t.parse::<u32>().ok().filter(|&w| (1..=64).contains(&w))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn test(kind: &str, result: &str, hours: u64) -> SelfTest {
        SelfTest {
            kind: kind.into(),
            result: result.into(),
            power_on_hours: Some(hours),
            first_failing_lba: (result == "failed").then_some(4242),
            ..Default::default()
        }
    }

    /// A failed extended test is not forgotten behind a later extended test that was
    /// aborted (the daemon's own abort at max_duration or at stop) or still runs; a later
    /// pass clears it; a short pass does not.
    #[test]
    fn a_failure_stays_until_a_later_test_of_its_kind_passes() {
        let report = |log: Vec<SelfTest>| crate::model::HealthReport {
            self_tests: latest_per_kind(log),
            ..Default::default()
        };
        let failing = |log: Vec<SelfTest>| {
            crate::model::assess(&report(log))
                .reasons
                .iter()
                .any(|w| w.contains("extended self-test failed"))
        };
        for later in ["aborted", "interrupted", "in_progress", "unknown"] {
            let log = vec![
                test("extended", later, 300),
                test("short", "passed", 250),
                test("extended", "failed", 200),
                test("extended", "passed", 100),
            ];
            let kept = latest_per_kind(log.clone());
            assert_eq!(
                kept.iter()
                    .map(|t| (t.kind.as_str(), t.result.as_str()))
                    .collect::<Vec<_>>(),
                [
                    ("extended", later),
                    ("short", "passed"),
                    ("extended", "failed")
                ]
            );
            assert!(failing(log), "behind {later}");
        }
        assert!(!failing(vec![
            test("extended", "passed", 300),
            test("extended", "failed", 200)
        ]));
        assert!(failing(vec![
            test("short", "passed", 300),
            test("extended", "failed", 200)
        ]));
    }

    #[test]
    fn pcie_sysfs_strings() {
        assert_eq!(parse_pcie_speed("8.0 GT/s PCIe\n"), Some(8e9));
        assert_eq!(parse_pcie_speed("2.5 GT/s"), Some(2.5e9));
        assert_eq!(parse_pcie_speed("16.0 GT/s PCIe"), Some(16e9));
        assert_eq!(parse_pcie_speed("Unknown"), None);
        assert_eq!(parse_pcie_speed("Unknown speed"), None);
        assert_eq!(parse_pcie_speed(""), None);
        assert_eq!(parse_pcie_speed("NaN GT/s"), None);
        assert_eq!(parse_pcie_width("4\n"), Some(4));
        assert_eq!(parse_pcie_width("x16"), Some(16));
        assert_eq!(parse_pcie_width("0"), None);
        assert_eq!(parse_pcie_width("255"), None);
    }

    #[test]
    fn degraded_needs_both_ends() {
        let mut l = Link {
            current_speed_transfers_per_second: Some(2.5e9),
            max_speed_transfers_per_second: Some(8e9),
            ..Default::default()
        };
        assert!(l.degraded());
        l.max_speed_transfers_per_second = None;
        assert!(!l.degraded(), "unknown maximum: not degraded");
        l.current_width = Some(2);
        l.max_width = Some(4);
        assert!(l.degraded());
        l.current_width = Some(4);
        assert!(!l.degraded());
    }
}
