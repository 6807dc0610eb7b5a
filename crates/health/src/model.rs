//! One health model across transports (NVMe, SATA, SAS). Every field is an `Option`:
//! unknown is `None`, never a made-up zero. Parsers fill it; [`assess`] gives the verdict.

use crate::units::count;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Transport {
    Nvme,
    Sata,
    Sas,
    Scsi,
    Usb,
    #[default]
    Unknown,
}

impl Transport {
    pub fn name(self) -> &'static str {
        match self {
            Transport::Nvme => "nvme",
            Transport::Sata => "sata",
            Transport::Sas => "sas",
            Transport::Scsi => "scsi",
            Transport::Usb => "usb",
            Transport::Unknown => "unknown",
        }
    }
}

/// Who the drive is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default, JsonSchema)]
pub struct Identity {
    pub model: Option<String>,
    pub serial: Option<String>,
    pub firmware: Option<String>,
    /// WWN / NAA / EUI-64 / NGUID as the drive reports it (lowercase hex, no separators,
    /// with the prefix smartctl and sysfs use, e.g. `0x5000c500a1b2c3d4` or `eui.0025...`).
    pub wwn: Option<String>,
    pub transport: Transport,
    pub capacity_bytes: Option<u64>,
    pub logical_block_size: Option<u32>,
    /// 0 for solid state, else spindle speed.
    pub rotation_rpm: Option<u32>,
}

/// The NVMe critical warning bits (also set from ATA/SCSI data where one maps cleanly).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct CriticalFlags {
    /// Bit 0: available spare below its threshold.
    pub spare_low: bool,
    /// Bit 1: temperature above an over-temperature or below an under-temperature threshold.
    pub temperature: bool,
    /// Bit 2: reliability degraded by media or internal errors.
    pub reliability_degraded: bool,
    /// Bit 3: media placed in read-only mode.
    pub read_only: bool,
    /// Bit 4: volatile memory backup device failed.
    pub volatile_backup_failed: bool,
    /// Bit 5: persistent memory region read-only or unreliable.
    pub persistent_memory_unreliable: bool,
}

impl CriticalFlags {
    pub fn from_bits(b: u8) -> Self {
        CriticalFlags {
            spare_low: b & 0x01 != 0,
            temperature: b & 0x02 != 0,
            reliability_degraded: b & 0x04 != 0,
            read_only: b & 0x08 != 0,
            volatile_backup_failed: b & 0x10 != 0,
            persistent_memory_unreliable: b & 0x20 != 0,
        }
    }

    pub fn any(&self) -> bool {
        self.spare_low
            || self.temperature
            || self.reliability_degraded
            || self.read_only
            || self.volatile_backup_failed
            || self.persistent_memory_unreliable
    }

    /// Names of the flags that are set.
    pub fn names(&self) -> Vec<&'static str> {
        let mut v = Vec::new();
        if self.spare_low {
            v.push("available spare below threshold");
        }
        if self.temperature {
            v.push("temperature out of range");
        }
        if self.reliability_degraded {
            v.push("reliability degraded");
        }
        if self.read_only {
            v.push("media read-only");
        }
        if self.volatile_backup_failed {
            v.push("volatile memory backup failed");
        }
        if self.persistent_memory_unreliable {
            v.push("persistent memory unreliable");
        }
        v
    }
}

/// Whether the drive was awake when read. A sleeping disk is not woken to be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum PowerState {
    Active,
    /// In standby or sleep: not read, so that a poll does not spin it up.
    Standby,
    #[default]
    Unknown,
}

/// Where the data came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Source {
    /// NVMe admin commands through the kernel's ioctl.
    NvmeIoctl,
    /// A saved 512-byte NVMe SMART/Health log page.
    NvmeLogFile,
    /// `smartctl --json` run on the device.
    Smartctl,
    /// Saved `smartctl --json` output.
    SmartctlJsonFile,
    #[default]
    Unknown,
}

/// Everything driveprobe knows of one drive's health at one moment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct HealthReport {
    pub identity: Identity,
    pub source: Source,
    pub power_state: PowerState,
    /// The drive's own overall self-assessment (SMART "PASSED").
    pub smart_passed: Option<bool>,
    pub temperature_celsius: Option<f64>,
    pub temperature_warning_celsius: Option<f64>,
    pub temperature_critical_celsius: Option<f64>,
    /// Available spare, 0..1.
    pub available_spare_ratio: Option<f64>,
    /// The spare level below which the drive warns, 0..1.
    pub available_spare_threshold_ratio: Option<f64>,
    /// Vendor's estimate of life used, 0..1 (may exceed 1: NVMe counts up to 2.55).
    pub percentage_used_ratio: Option<f64>,
    /// Raw NVMe critical warning byte (or the equivalent where one maps).
    pub critical_warning: Option<u8>,
    pub critical_flags: Option<CriticalFlags>,
    /// Unrecovered data integrity errors (NVMe media errors; SAS uncorrected errors).
    pub media_errors: Option<u64>,
    /// Entries in the drive's error log over its life.
    pub error_log_entries: Option<u64>,
    pub host_read_bytes: Option<u128>,
    pub host_written_bytes: Option<u128>,
    /// Bytes written to the flash itself (OCP C0h physical media units written), for
    /// write amplification.
    pub media_written_bytes: Option<u128>,
    pub power_on_seconds: Option<u64>,
    pub power_cycles: Option<u64>,
    pub unsafe_shutdowns: Option<u64>,
    /// ATA 5 Reallocated_Sector_Ct, SAS grown defect list.
    pub reallocated_sectors: Option<u64>,
    /// ATA 197 Current_Pending_Sector.
    pub pending_sectors: Option<u64>,
    /// ATA 198 Offline_Uncorrectable.
    pub offline_uncorrectable: Option<u64>,
    /// ATA 199 UDMA_CRC_Error_Count (cabling, not media).
    pub crc_errors: Option<u64>,
    /// Every ATA SMART attribute, in the drive's order (empty for NVMe and SCSI).
    #[serde(default)]
    pub ata_attributes: Vec<super::detail::AtaAttribute>,
    /// Every entry of the ATA Device Statistics log.
    #[serde(default)]
    pub ata_device_statistics: Vec<super::detail::DeviceStatistic>,
    /// SATA PHY event counters.
    #[serde(default)]
    pub sata_phy_events: Vec<super::detail::PhyEvent>,
    /// SCSI error counter log, grown defects, start-stop counts; null when not SCSI.
    #[serde(default)]
    pub scsi: Option<super::detail::ScsiDetail>,
    /// NVMe SMART log counters, temperature sensors, recent error log entries; null when
    /// not NVMe.
    #[serde(default)]
    pub nvme: Option<super::detail::NvmeDetail>,
    /// The link's current and maximum speed and width; null when unknown.
    #[serde(default)]
    pub link: Option<super::detail::Link>,
    /// The latest self-test of each kind from the drive's self-test log, newest first.
    #[serde(default)]
    pub self_tests: Vec<super::detail::SelfTest>,
    /// A self-test running now, with its progress; null when none runs (or unknown).
    #[serde(default)]
    pub self_test_running: Option<super::detail::SelfTestProgress>,
    /// Things the reader noticed while reading (partial data, odd values, exit bits).
    pub notes: Vec<String>,
}

/// The overall verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Ok,
    Warning,
    Failing,
    /// Too little known to say (a sleeping disk, a failed read).
    Unknown,
}

impl Verdict {
    pub fn name(self) -> &'static str {
        match self {
            Verdict::Ok => "ok",
            Verdict::Warning => "warning",
            Verdict::Failing => "failing",
            Verdict::Unknown => "unknown",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Assessment {
    pub verdict: Verdict,
    /// Why, one line each, worst first.
    pub reasons: Vec<String>,
}

/// Warn when the vendor's wear estimate passes this share of life.
pub const WEAR_WARNING_RATIO: f64 = 0.80;
/// Warn when spare is within this share above its threshold.
pub const SPARE_MARGIN_RATIO: f64 = 0.10;

/// The verdict from the report alone (endurance projections are separate).
pub fn assess(r: &HealthReport) -> Assessment {
    let mut failing = Vec::new();
    let mut warning = Vec::new();
    if r.smart_passed == Some(false) {
        failing.push("the drive's SMART self-assessment says FAILED".to_string());
    }
    // The latest test of each kind: a later pass of the same kind clears a failure, a
    // pass of another kind does not (a short test reads far less of the media).
    for t in r.self_tests.iter().filter(|t| t.failed()) {
        let mut why = format!("the latest {} self-test failed", t.kind);
        if !t.result_description.is_empty() {
            why.push_str(&format!(" ({})", t.result_description));
        }
        if let Some(lba) = t.first_failing_lba {
            why.push_str(&format!(", first failing LBA {lba}"));
        }
        if let Some(h) = t.power_on_hours {
            why.push_str(&format!(", at {h} power-on hours"));
        }
        failing.push(why);
    }
    if let Some(f) = r.critical_flags {
        if f.reliability_degraded {
            failing.push("critical warning: reliability degraded".to_string());
        }
        if f.read_only {
            failing.push("critical warning: media is read-only".to_string());
        }
        if f.volatile_backup_failed {
            failing.push("critical warning: volatile memory backup failed".to_string());
        }
        if f.persistent_memory_unreliable {
            failing.push("critical warning: persistent memory unreliable".to_string());
        }
        if f.spare_low {
            failing.push("critical warning: available spare below threshold".to_string());
        }
        if f.temperature {
            warning.push("critical warning: temperature out of range".to_string());
        }
    }
    if let (Some(s), Some(t)) = (r.available_spare_ratio, r.available_spare_threshold_ratio) {
        if s < t && !r.critical_flags.is_some_and(|f| f.spare_low) {
            failing.push(format!(
                "available spare {:.0}% is below its threshold {:.0}%",
                s * 100.0,
                t * 100.0
            ));
        } else if s >= t && s < t + SPARE_MARGIN_RATIO && t > 0.0 {
            warning.push(format!(
                "available spare {:.0}% is close to its threshold {:.0}%",
                s * 100.0,
                t * 100.0
            ));
        }
    }
    if let Some(u) = r.percentage_used_ratio {
        if u >= 1.0 {
            warning.push(format!(
                "the vendor's wear estimate is {:.0}%: past its rated life",
                u * 100.0
            ));
        } else if u >= WEAR_WARNING_RATIO {
            warning.push(format!("the vendor's wear estimate is {:.0}%", u * 100.0));
        }
    }
    if let (Some(t), Some(c)) = (r.temperature_celsius, r.temperature_critical_celsius) {
        if t >= c {
            warning.push(format!(
                "temperature {t:.0} °C at or above critical {c:.0} °C"
            ));
        }
    } else if let (Some(t), Some(w)) = (r.temperature_celsius, r.temperature_warning_celsius) {
        if t >= w {
            warning.push(format!(
                "temperature {t:.0} °C at or above warning {w:.0} °C"
            ));
        }
    }
    if r.media_errors.is_some_and(|m| m > 0) {
        warning.push(count(
            r.media_errors.unwrap_or(0),
            "unrecovered media error",
            "unrecovered media errors",
        ));
    }
    if let Some(p) = r.pending_sectors.filter(|&p| p > 0) {
        warning.push(format!(
            "{} pending reallocation",
            count(p, "sector", "sectors")
        ));
    }
    if let Some(o) = r.offline_uncorrectable.filter(|&o| o > 0) {
        warning.push(count(
            o,
            "offline uncorrectable sector",
            "offline uncorrectable sectors",
        ));
    }
    if let Some(re) = r.reallocated_sectors.filter(|&x| x > 0) {
        warning.push(count(re, "reallocated sector", "reallocated sectors"));
    }
    let known = r.smart_passed.is_some()
        || r.critical_warning.is_some()
        || r.percentage_used_ratio.is_some()
        || r.reallocated_sectors.is_some();
    let (verdict, mut reasons) = if !failing.is_empty() {
        (Verdict::Failing, failing)
    } else if !warning.is_empty() {
        (Verdict::Warning, Vec::new())
    } else if r.power_state == PowerState::Standby {
        (
            Verdict::Unknown,
            vec!["the drive is in standby and was not woken".to_string()],
        )
    } else if !known {
        (
            Verdict::Unknown,
            vec!["no health data could be read".to_string()],
        )
    } else {
        (Verdict::Ok, Vec::new())
    };
    reasons.extend(warning);
    Assessment { verdict, reasons }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 17 / review C1: "1 reallocated sectors", "1 unrecovered media errors".
    #[test]
    fn counted_reasons_agree_with_their_numbers() {
        let one = HealthReport {
            media_errors: Some(1),
            pending_sectors: Some(1),
            offline_uncorrectable: Some(1),
            reallocated_sectors: Some(1),
            ..Default::default()
        };
        assert_eq!(
            assess(&one).reasons,
            [
                "1 unrecovered media error",
                "1 sector pending reallocation",
                "1 offline uncorrectable sector",
                "1 reallocated sector"
            ]
        );
        let two = HealthReport {
            media_errors: Some(2),
            pending_sectors: Some(2),
            offline_uncorrectable: Some(2),
            reallocated_sectors: Some(2),
            ..Default::default()
        };
        assert_eq!(
            assess(&two).reasons,
            [
                "2 unrecovered media errors",
                "2 sectors pending reallocation",
                "2 offline uncorrectable sectors",
                "2 reallocated sectors"
            ]
        );
    }

    #[test]
    fn verdicts() {
        let mut r = HealthReport {
            smart_passed: Some(true),
            critical_warning: Some(0),
            critical_flags: Some(CriticalFlags::from_bits(0)),
            available_spare_ratio: Some(1.0),
            available_spare_threshold_ratio: Some(0.1),
            percentage_used_ratio: Some(0.03),
            ..Default::default()
        };
        assert_eq!(assess(&r).verdict, Verdict::Ok);
        r.critical_flags = Some(CriticalFlags::from_bits(0x04));
        let a = assess(&r);
        assert_eq!(a.verdict, Verdict::Failing);
        assert!(a.reasons[0].contains("reliability"));
        r.critical_flags = Some(CriticalFlags::from_bits(0));
        r.percentage_used_ratio = Some(0.85);
        assert_eq!(assess(&r).verdict, Verdict::Warning);
        r.available_spare_ratio = Some(0.05);
        assert_eq!(assess(&r).verdict, Verdict::Failing);
        let sleeping = HealthReport {
            power_state: PowerState::Standby,
            ..Default::default()
        };
        assert_eq!(assess(&sleeping).verdict, Verdict::Unknown);
        assert_eq!(assess(&HealthReport::default()).verdict, Verdict::Unknown);
    }

    #[test]
    fn critical_bits() {
        let f = CriticalFlags::from_bits(0x3f);
        assert_eq!(f.names().len(), 6);
        assert!(!CriticalFlags::from_bits(0).any());
    }
}
