//! NVMe log pages and identify data, parsed from byte slices (pure functions: every
//! parser is tested on captured and hand-built bytes). Offsets follow the NVMe Base
//! Specification 2.0 (SMART / Health Information log, Identify Controller, Identify
//! Namespace, Error Information log) and the OCP Datacenter NVMe SSD Specification
//! (SMART / Health Information Extended log, C0h).

use serde::{Deserialize, Serialize};

use super::detail;
use super::model::{CriticalFlags, HealthReport, Identity, Source, Transport};

/// An NVMe data unit is a thousand 512-byte units.
pub const DATA_UNIT_BYTES: u128 = 512_000;
pub const SMART_LOG_LEN: usize = 512;
pub const IDENTIFY_LEN: usize = 4096;
pub const OCP_C0_LEN: usize = 512;
pub const ERROR_ENTRY_LEN: usize = 64;
/// GUID that identifies the OCP C0h log page (bytes 496..512, little endian).
pub const OCP_C0_GUID: [u8; 16] = [
    0xc5, 0xaf, 0x10, 0x28, 0xea, 0xbf, 0xf2, 0xa4, 0x9c, 0x4f, 0x6f, 0x7c, 0xc9, 0x14, 0xd5, 0xaf,
];

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NvmeParseError {
    #[error("{what}: {got} bytes, expected {want}: the data is truncated or not an NVMe {what}")]
    Length {
        what: &'static str,
        got: usize,
        want: usize,
    },
    #[error("the OCP C0h log page does not carry its GUID: the drive does not implement it")]
    NotOcp,
}

fn u16le(b: &[u8], o: usize) -> u16 {
    u16::from_le_bytes([b[o], b[o + 1]])
}
fn u32le(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes(b[o..o + 4].try_into().expect("4 bytes"))
}
fn u64le(b: &[u8], o: usize) -> u64 {
    u64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes"))
}
fn u128le(b: &[u8], o: usize) -> u128 {
    u128::from_le_bytes(b[o..o + 16].try_into().expect("16 bytes"))
}

fn exact(b: &[u8], want: usize, what: &'static str) -> Result<(), NvmeParseError> {
    // A longer buffer is accepted (some tools pad); a shorter one is not.
    if b.len() < want {
        return Err(NvmeParseError::Length {
            what,
            got: b.len(),
            want,
        });
    }
    Ok(())
}

/// Kelvin to whole degrees Celsius, as smartctl and nvme-cli convert (K - 273: QEMU's
/// 323 K is 50 °C in both), so that a drive read by ioctl and the same drive read through
/// smartctl show one temperature; 0 K means "not reported". Every NVMe temperature
/// (composite, the eight sensors, the warning and critical thresholds) goes through here.
pub fn kelvin(k: u16) -> Option<f64> {
    (k != 0).then_some(f64::from(k) - 273.0)
}

/// The SMART / Health Information log page (02h), every field.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SmartLog {
    pub critical_warning: u8,
    /// Composite temperature, kelvin.
    pub temperature_k: u16,
    pub available_spare_pct: u8,
    pub available_spare_threshold_pct: u8,
    pub percentage_used: u8,
    pub endurance_group_critical_warning: u8,
    pub data_units_read: u128,
    pub data_units_written: u128,
    pub host_read_commands: u128,
    pub host_write_commands: u128,
    pub controller_busy_minutes: u128,
    pub power_cycles: u128,
    pub power_on_hours: u128,
    pub unsafe_shutdowns: u128,
    pub media_errors: u128,
    pub error_log_entries: u128,
    pub warning_temp_minutes: u32,
    pub critical_temp_minutes: u32,
    /// Temperature sensors 1-8, kelvin (0: not implemented).
    pub temp_sensors_k: [u16; 8],
    pub thermal_transitions: [u32; 2],
    pub thermal_seconds: [u32; 2],
}

pub fn parse_smart_log(b: &[u8]) -> Result<SmartLog, NvmeParseError> {
    exact(b, SMART_LOG_LEN, "SMART / Health log page")?;
    let mut temp_sensors_k = [0u16; 8];
    for (i, t) in temp_sensors_k.iter_mut().enumerate() {
        *t = u16le(b, 200 + 2 * i);
    }
    Ok(SmartLog {
        critical_warning: b[0],
        temperature_k: u16le(b, 1),
        available_spare_pct: b[3],
        available_spare_threshold_pct: b[4],
        percentage_used: b[5],
        endurance_group_critical_warning: b[6],
        data_units_read: u128le(b, 32),
        data_units_written: u128le(b, 48),
        host_read_commands: u128le(b, 64),
        host_write_commands: u128le(b, 80),
        controller_busy_minutes: u128le(b, 96),
        power_cycles: u128le(b, 112),
        power_on_hours: u128le(b, 128),
        unsafe_shutdowns: u128le(b, 144),
        media_errors: u128le(b, 160),
        error_log_entries: u128le(b, 176),
        warning_temp_minutes: u32le(b, 192),
        critical_temp_minutes: u32le(b, 196),
        temp_sensors_k,
        thermal_transitions: [u32le(b, 216), u32le(b, 220)],
        thermal_seconds: [u32le(b, 224), u32le(b, 228)],
    })
}

/// An ASCII field of identify data (the spec's: printable ASCII, space-padded) as
/// driveprobe keeps a drive's strings ([`fmt::drive_text`](crate::fmt::drive_text)):
/// any other byte is a space.
fn ascii(b: &[u8]) -> Option<String> {
    let s: String = b
        .iter()
        .map(|&c| {
            if c.is_ascii_graphic() || c == b' ' {
                c as char
            } else {
                ' '
            }
        })
        .collect();
    crate::fmt::drive_text(&s)
}

/// The fields of Identify Controller (CNS 01h) that driveprobe uses.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdController {
    pub vendor_id: u16,
    pub serial: Option<String>,
    pub model: Option<String>,
    pub firmware: Option<String>,
    /// Log page attributes (LPA).
    pub log_page_attributes: u8,
    /// Error log page entries (ELPE, 0's based in the page; stored here as a count).
    pub error_log_entries: u32,
    /// Warning and critical composite temperature thresholds, kelvin (0: not reported).
    pub wctemp_k: u16,
    pub cctemp_k: u16,
    /// Total NVM capacity in bytes (0 when not reported).
    pub total_capacity: u128,
    /// Optional Admin Command Support (OACS); bit 4: Device Self-test.
    pub oacs: u16,
    pub namespaces: u32,
}

pub fn parse_id_ctrl(b: &[u8]) -> Result<IdController, NvmeParseError> {
    exact(b, IDENTIFY_LEN, "Identify Controller data")?;
    Ok(IdController {
        vendor_id: u16le(b, 0),
        serial: ascii(&b[4..24]),
        model: ascii(&b[24..64]),
        firmware: ascii(&b[64..72]),
        log_page_attributes: b[261],
        error_log_entries: b[262] as u32 + 1,
        wctemp_k: u16le(b, 266),
        cctemp_k: u16le(b, 268),
        total_capacity: u128le(b, 280),
        oacs: u16le(b, 256),
        namespaces: u32le(b, 516),
    })
}

/// The fields of Identify Namespace (CNS 00h) that driveprobe uses.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdNamespace {
    /// Size in logical blocks.
    pub size_blocks: u64,
    pub capacity_blocks: u64,
    pub used_blocks: u64,
    pub logical_block_size: u32,
    /// `eui.` + 16 hex digits, when set.
    pub eui64: Option<String>,
    /// `nguid.` + 32 hex digits... spelled as the kernel's sysfs `wwid` does (`eui.` + 32).
    pub nguid: Option<String>,
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

pub fn parse_id_ns(b: &[u8]) -> Result<IdNamespace, NvmeParseError> {
    exact(b, IDENTIFY_LEN, "Identify Namespace data")?;
    let nlbaf = b[25] as usize + 1;
    let flbas = b[26];
    // Format index: bits 3:0, plus bits 6:5 as the upper bits when more than 16 formats.
    let mut idx = (flbas & 0x0f) as usize;
    if nlbaf > 16 {
        idx |= (((flbas >> 5) & 0x03) as usize) << 4;
    }
    let lbads = if idx < 64 { b[128 + 4 * idx + 2] } else { 0 };
    let logical_block_size = if (9..=20).contains(&lbads) {
        1u32 << lbads
    } else {
        512
    };
    let nguid = &b[104..120];
    let eui = &b[120..128];
    Ok(IdNamespace {
        size_blocks: u64le(b, 0),
        capacity_blocks: u64le(b, 8),
        used_blocks: u64le(b, 16),
        logical_block_size,
        eui64: eui
            .iter()
            .any(|&x| x != 0)
            .then(|| format!("eui.{}", hex(eui))),
        nguid: nguid
            .iter()
            .any(|&x| x != 0)
            .then(|| format!("eui.{}", hex(nguid))),
    })
}

/// The OCP C0h (SMART / Health Information Extended) fields driveprobe uses.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OcpSmart {
    /// Bytes written to the media (NAND), for write amplification.
    pub physical_media_written_bytes: u128,
    pub physical_media_read_bytes: u128,
    pub log_page_version: u16,
}

pub fn parse_ocp_c0(b: &[u8]) -> Result<OcpSmart, NvmeParseError> {
    exact(b, OCP_C0_LEN, "OCP C0h log page")?;
    if b[496..512] != OCP_C0_GUID {
        return Err(NvmeParseError::NotOcp);
    }
    Ok(OcpSmart {
        physical_media_written_bytes: u128le(b, 0),
        physical_media_read_bytes: u128le(b, 16),
        log_page_version: u16le(b, 494),
    })
}

/// Counts the valid entries of an Error Information log (01h): entries whose error count
/// is non-zero. Returns (valid entries, highest error count seen).
pub fn parse_error_log(b: &[u8]) -> (u32, u64) {
    let mut n = 0;
    let mut highest = 0;
    for e in b.chunks_exact(ERROR_ENTRY_LEN) {
        let count = u64le(e, 0);
        if count != 0 {
            n += 1;
            highest = highest.max(count);
        }
    }
    (n, highest)
}

/// The valid entries of an Error Information log (01h) in full, highest error count (most
/// recent) first, at most [`detail::MAX_ERROR_ENTRIES`].
pub fn parse_error_entries(b: &[u8]) -> Vec<detail::NvmeErrorEntry> {
    let mut v: Vec<detail::NvmeErrorEntry> = b
        .chunks_exact(ERROR_ENTRY_LEN)
        .filter(|e| u64le(e, 0) != 0)
        .map(|e| detail::NvmeErrorEntry {
            error_count: u64le(e, 0),
            submission_queue_id: u16le(e, 8),
            command_id: u16le(e, 10),
            status_field: u16le(e, 12),
            parameter_error_location: u16le(e, 14),
            lba: u64le(e, 16),
            nsid: u32le(e, 24),
        })
        .collect();
    v.sort_by_key(|e| std::cmp::Reverse(e.error_count));
    v.truncate(detail::MAX_ERROR_ENTRIES);
    v
}

/// The SMART log's counters beyond the headline figures, temperatures in whole °C.
pub fn detail_of(smart: &SmartLog) -> detail::NvmeDetail {
    detail::NvmeDetail {
        warning_temperature_minutes: Some(u64::from(smart.warning_temp_minutes)),
        critical_temperature_minutes: Some(u64::from(smart.critical_temp_minutes)),
        temperature_sensors: smart
            .temp_sensors_k
            .iter()
            .enumerate()
            .filter_map(|(i, &k)| {
                Some(detail::TemperatureSensor {
                    sensor: i as u8 + 1,
                    celsius: kelvin(k)?,
                })
            })
            .collect(),
        thermal_transitions: smart.thermal_transitions.map(|v| Some(u64::from(v))),
        thermal_seconds: smart.thermal_seconds.map(|v| Some(u64::from(v))),
        controller_busy_minutes: Some(sat_u64(smart.controller_busy_minutes)),
        host_read_commands: Some(sat_u64(smart.host_read_commands)),
        host_write_commands: Some(sat_u64(smart.host_write_commands)),
        error_log: Vec::new(),
    }
}

/// The Device Self-test log page (06h): 4 bytes of current operation, then 20 results of
/// 28 bytes, newest first.
pub const SELF_TEST_LOG_LEN: usize = 564;

/// The latest self-test of each kind, and the kind and % done of one running now.
pub type SelfTestLog = (Vec<detail::SelfTest>, Option<(String, u8)>);

/// The Device Self-test log (06h): the latest test of each kind, newest first. Unused
/// entries (result 0xF) are skipped; the failing LBA is kept only for a failed test whose
/// entry says it is valid. Also says whether a test runs now (its kind and % done).
pub fn parse_self_test_log(b: &[u8]) -> Result<SelfTestLog, NvmeParseError> {
    exact(b, SELF_TEST_LOG_LEN, "Device Self-test log page")?;
    let running = match b[0] & 0x0f {
        0 => None,
        code => Some((
            super::smartctl::nvme_kind(code).to_string(),
            (b[1] & 0x7f).min(100),
        )),
    };
    let mut all = Vec::new();
    for e in b[4..SELF_TEST_LOG_LEN].chunks_exact(28) {
        let res = e[0] & 0x0f;
        if res == 0x0f {
            continue;
        }
        let code = e[0] >> 4;
        let result = super::smartctl::nvme_result(res);
        let flba_valid = e[2] & 0x02 != 0;
        all.push(detail::SelfTest {
            kind: super::smartctl::nvme_kind(code).into(),
            description: match code {
                1 => "Short".into(),
                2 => "Extended".into(),
                0xe => "Vendor specific".into(),
                c => format!("code {c:#x}"),
            },
            result: result.into(),
            result_description: match res {
                0 => "Completed without error".into(),
                1 => "Aborted: Device Self-test command".into(),
                2 => "Aborted: controller reset".into(),
                3 => "Aborted: namespace removed".into(),
                4 => "Aborted: Format NVM command".into(),
                5 => "Fatal or unknown test error".into(),
                6 => "Completed: failed segment unknown".into(),
                7 => format!("Completed: segment {} failed", e[1]),
                8 => "Aborted: unknown reason".into(),
                9 => "Aborted: sanitize".into(),
                r => format!("result {r:#x}"),
            },
            power_on_hours: Some(u64le(e, 4)),
            first_failing_lba: (result == "failed" && flba_valid).then(|| u64le(e, 16)),
        });
    }
    Ok((detail::latest_per_kind(all), running))
}

fn sat_u64(v: u128) -> u64 {
    u64::try_from(v).unwrap_or(u64::MAX)
}

/// Builds the transport-neutral report from what was read. Every argument but the
/// SMART log may be missing (a saved log page alone gives a partial report).
pub fn report(
    smart: &SmartLog,
    ctrl: Option<&IdController>,
    ns: Option<&IdNamespace>,
    ocp: Option<&OcpSmart>,
    source: Source,
) -> HealthReport {
    let mut r = HealthReport {
        source,
        identity: Identity {
            transport: Transport::Nvme,
            rotation_rpm: Some(0),
            ..Default::default()
        },
        ..Default::default()
    };
    if let Some(c) = ctrl {
        r.identity.model = c.model.clone();
        r.identity.serial = c.serial.clone();
        r.identity.firmware = c.firmware.clone();
        r.temperature_warning_celsius = kelvin(c.wctemp_k);
        r.temperature_critical_celsius = kelvin(c.cctemp_k);
        if c.total_capacity > 0 {
            r.identity.capacity_bytes = Some(sat_u64(c.total_capacity));
        }
    }
    if let Some(n) = ns {
        r.identity.logical_block_size = Some(n.logical_block_size);
        r.identity.capacity_bytes = Some(n.size_blocks.saturating_mul(n.logical_block_size as u64));
        r.identity.wwn = n.nguid.clone().or_else(|| n.eui64.clone());
    }
    r.critical_warning = Some(smart.critical_warning);
    r.critical_flags = Some(CriticalFlags::from_bits(smart.critical_warning));
    r.temperature_celsius = kelvin(smart.temperature_k);
    r.available_spare_ratio = Some(smart.available_spare_pct as f64 / 100.0);
    r.available_spare_threshold_ratio = Some(smart.available_spare_threshold_pct as f64 / 100.0);
    r.percentage_used_ratio = Some(smart.percentage_used as f64 / 100.0);
    r.host_read_bytes = Some(smart.data_units_read.saturating_mul(DATA_UNIT_BYTES));
    r.host_written_bytes = Some(smart.data_units_written.saturating_mul(DATA_UNIT_BYTES));
    r.power_on_seconds = Some(sat_u64(smart.power_on_hours).saturating_mul(3600));
    r.power_cycles = Some(sat_u64(smart.power_cycles));
    r.unsafe_shutdowns = Some(sat_u64(smart.unsafe_shutdowns));
    r.media_errors = Some(sat_u64(smart.media_errors));
    r.error_log_entries = Some(sat_u64(smart.error_log_entries));
    r.nvme = Some(detail_of(smart));
    if smart.available_spare_threshold_pct > 100 || smart.available_spare_pct > 100 {
        r.notes.push(format!(
            "spare {}% / threshold {}%: outside 0-100, the drive reports odd values",
            smart.available_spare_pct, smart.available_spare_threshold_pct
        ));
    }
    if let Some(o) = ocp {
        r.media_written_bytes = Some(o.physical_media_written_bytes);
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A hand-built SMART log with edge values.
    fn smart_bytes() -> Vec<u8> {
        let mut b = vec![0u8; 512];
        b[0] = 0x3f; // every critical bit
        b[1..3].copy_from_slice(&318u16.to_le_bytes()); // 45 C, as smartctl says
        b[3] = 5; // spare 5%
        b[4] = 10; // threshold 10%
        b[5] = 255; // percentage used saturates at 255
                    // data units written above 2^64
        let big: u128 = (1u128 << 70) + 12345;
        b[48..64].copy_from_slice(&big.to_le_bytes());
        b[32..48].copy_from_slice(&7u128.to_le_bytes());
        b[112..128].copy_from_slice(&42u128.to_le_bytes());
        b[128..144].copy_from_slice(&10_000u128.to_le_bytes());
        b[144..160].copy_from_slice(&3u128.to_le_bytes());
        b[160..176].copy_from_slice(&u128::MAX.to_le_bytes());
        b[176..192].copy_from_slice(&9u128.to_le_bytes());
        b[200..202].copy_from_slice(&300u16.to_le_bytes());
        b[64..80].copy_from_slice(&4u128.to_le_bytes());
        b[80..96].copy_from_slice(&5u128.to_le_bytes());
        b[96..112].copy_from_slice(&(1u128 << 64).to_le_bytes());
        b[192..196].copy_from_slice(&7u32.to_le_bytes());
        b[196..200].copy_from_slice(&2u32.to_le_bytes());
        b[216..220].copy_from_slice(&11u32.to_le_bytes());
        b[220..224].copy_from_slice(&1u32.to_le_bytes());
        b[224..228].copy_from_slice(&600u32.to_le_bytes());
        b[228..232].copy_from_slice(&5u32.to_le_bytes());
        b
    }

    #[test]
    fn smart_log_edge_values() {
        let s = parse_smart_log(&smart_bytes()).unwrap();
        assert_eq!(s.critical_warning, 0x3f);
        assert_eq!(s.temperature_k, 318);
        assert_eq!(s.data_units_written, (1u128 << 70) + 12345);
        assert_eq!(s.media_errors, u128::MAX);
        assert_eq!(s.temp_sensors_k[0], 300);
        let r = report(&s, None, None, None, Source::NvmeLogFile);
        assert_eq!(r.temperature_celsius, Some(45.0));
        let d = r.nvme.as_ref().unwrap();
        assert_eq!(
            d.temperature_sensors,
            [detail::TemperatureSensor {
                sensor: 1,
                celsius: 27.0
            }],
            "300 K is 27 °C; sensors at 0 K are absent"
        );
        assert_eq!(d.warning_temperature_minutes, Some(7));
        assert_eq!(d.critical_temperature_minutes, Some(2));
        assert_eq!(d.thermal_transitions, [Some(11), Some(1)]);
        assert_eq!(d.thermal_seconds, [Some(600), Some(5)]);
        assert_eq!(d.controller_busy_minutes, Some(u64::MAX), "saturates");
        assert_eq!(d.host_read_commands, Some(4));
        assert_eq!(d.host_write_commands, Some(5));
        assert_eq!(
            r.host_written_bytes,
            Some(((1u128 << 70) + 12345) * 512_000)
        );
        assert_eq!(r.host_read_bytes, Some(7 * 512_000));
        assert_eq!(r.media_errors, Some(u64::MAX));
        assert_eq!(r.power_on_seconds, Some(36_000_000));
        assert_eq!(r.percentage_used_ratio, Some(2.55));
        let f = r.critical_flags.unwrap();
        assert!(f.spare_low && f.temperature && f.reliability_degraded && f.read_only);
        assert!(f.volatile_backup_failed && f.persistent_memory_unreliable);
        let a = super::super::model::assess(&r);
        assert_eq!(a.verdict, super::super::model::Verdict::Failing);
        // Identity is unknown from a log page alone: None, not empty strings.
        assert_eq!(r.identity.serial, None);
        assert_eq!(r.identity.capacity_bytes, None);
    }

    /// A Device Self-test log: an extended test that failed in segment 3 at LBA 0x1000
    /// (newest), a short test that passed, an older short test that failed, unused
    /// entries; an extended test running, 40% done.
    #[test]
    fn self_test_log() {
        let mut b = vec![0u8; SELF_TEST_LOG_LEN];
        b[0] = 0x2;
        b[1] = 40;
        let mut entry = |i: usize, code: u8, res: u8, seg: u8, poh: u64, lba: Option<u64>| {
            let e = &mut b[4 + 28 * i..4 + 28 * (i + 1)];
            e[0] = code << 4 | res;
            e[1] = seg;
            e[4..12].copy_from_slice(&poh.to_le_bytes());
            if let Some(l) = lba {
                e[2] = 0x02;
                e[16..24].copy_from_slice(&l.to_le_bytes());
            }
        };
        entry(0, 2, 7, 3, 1200, Some(0x1000));
        entry(1, 1, 0, 0, 1100, None);
        entry(2, 1, 7, 1, 900, Some(7));
        for i in 3..20 {
            entry(i, 0, 0xf, 0, 0, None);
        }
        let (tests, running) = parse_self_test_log(&b).unwrap();
        assert_eq!(running, Some(("extended".to_string(), 40)));
        assert_eq!(tests.len(), 2, "the latest of each kind: {tests:?}");
        assert_eq!(tests[0].kind, "extended");
        assert!(tests[0].failed());
        assert_eq!(tests[0].power_on_hours, Some(1200));
        assert_eq!(tests[0].first_failing_lba, Some(0x1000));
        assert_eq!(tests[0].result_description, "Completed: segment 3 failed");
        assert_eq!(tests[1].kind, "short");
        assert_eq!(tests[1].result, "passed");
        assert_eq!(tests[1].first_failing_lba, None);
        assert!(parse_self_test_log(&b[..563]).is_err());
        // A log with nothing in it: no tests, none running.
        let mut empty = vec![0u8; SELF_TEST_LOG_LEN];
        for e in empty[4..].chunks_exact_mut(28) {
            e[0] = 0x0f;
        }
        assert_eq!(parse_self_test_log(&empty).unwrap(), (vec![], None));
    }

    #[test]
    fn truncated_and_oversized_pages() {
        assert!(matches!(
            parse_smart_log(&[0u8; 511]),
            Err(NvmeParseError::Length { got: 511, .. })
        ));
        assert!(parse_smart_log(&[]).is_err());
        assert!(parse_smart_log(&[0u8; 4096]).is_ok());
        assert!(parse_id_ctrl(&[0u8; 100]).is_err());
        assert!(parse_id_ns(&[0u8; 4095]).is_err());
        assert_eq!(parse_ocp_c0(&[0u8; 512]), Err(NvmeParseError::NotOcp));
    }

    #[test]
    fn identify_fields() {
        let mut c = vec![0u8; 4096];
        c[4..24].copy_from_slice(b"SN123               ");
        c[24..64].copy_from_slice(&{
            let mut m = [b' '; 40];
            m[..12].copy_from_slice(b"Example NVMe");
            m
        });
        c[64..72].copy_from_slice(b"FW1.0   ");
        c[262] = 63;
        c[266..268].copy_from_slice(&343u16.to_le_bytes());
        c[268..270].copy_from_slice(&353u16.to_le_bytes());
        let id = parse_id_ctrl(&c).unwrap();
        assert_eq!(id.serial.as_deref(), Some("SN123"));
        assert_eq!(id.model.as_deref(), Some("Example NVMe"));
        assert_eq!(id.firmware.as_deref(), Some("FW1.0"));
        assert_eq!(id.error_log_entries, 64);
        assert_eq!(kelvin(id.wctemp_k), Some(70.0));

        let mut n = vec![0u8; 4096];
        n[0..8].copy_from_slice(&1000u64.to_le_bytes());
        n[25] = 1; // two formats
        n[26] = 1; // using format 1
        n[128 + 2] = 9;
        n[132 + 2] = 12;
        n[120..128].copy_from_slice(&[0x00, 0x25, 0x38, 0, 0, 0, 0, 1]);
        let ns = parse_id_ns(&n).unwrap();
        assert_eq!(ns.logical_block_size, 4096);
        assert_eq!(ns.eui64.as_deref(), Some("eui.0025380000000001"));
        assert_eq!(ns.nguid, None);
    }

    #[test]
    fn ocp_and_error_log() {
        let mut b = vec![0u8; 512];
        b[0..16].copy_from_slice(&5_000_000u128.to_le_bytes());
        b[494..496].copy_from_slice(&3u16.to_le_bytes());
        b[496..512].copy_from_slice(&OCP_C0_GUID);
        let o = parse_ocp_c0(&b).unwrap();
        assert_eq!(o.physical_media_written_bytes, 5_000_000);
        assert_eq!(o.log_page_version, 3);

        let mut e = vec![0u8; 64 * 4];
        e[0..8].copy_from_slice(&17u64.to_le_bytes());
        e[64..72].copy_from_slice(&16u64.to_le_bytes());
        assert_eq!(parse_error_log(&e), (2, 17));
        e[8..10].copy_from_slice(&3u16.to_le_bytes());
        e[12..14].copy_from_slice(&0x4004u16.to_le_bytes());
        e[16..24].copy_from_slice(&0x1234u64.to_le_bytes());
        e[24..28].copy_from_slice(&1u32.to_le_bytes());
        let entries = parse_error_entries(&e);
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[0].error_count, 17, "most recent first");
        assert_eq!(entries[0].submission_queue_id, 3);
        assert_eq!(entries[0].status_field, 0x4004);
        assert_eq!(entries[0].lba, 0x1234);
        assert_eq!(entries[0].nsid, 1);
        assert_eq!(entries[1].error_count, 16);
        assert!(
            parse_error_entries(&[0u8; 63]).is_empty(),
            "a partial entry is not one"
        );
    }
}
