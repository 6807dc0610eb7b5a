//! NVMe log pages and identify data, parsed from byte slices (pure functions: every
//! parser is tested on captured and hand-built bytes). Offsets follow the NVMe Base
//! Specification 2.0 (SMART / Health Information log, Identify Controller, Identify
//! Namespace, Error Information log) and the OCP Datacenter NVMe SSD Specification
//! (SMART / Health Information Extended log, C0h).

use serde::{Deserialize, Serialize};

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

/// Kelvin to Celsius; 0 K means "not reported".
pub fn kelvin(k: u16) -> Option<f64> {
    (k != 0).then_some(k as f64 - 273.15)
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
    let s = s.trim().to_string();
    (!s.is_empty()).then_some(s)
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
        b[1..3].copy_from_slice(&318u16.to_le_bytes()); // 44.85 C
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
        assert!((r.temperature_celsius.unwrap() - 44.85).abs() < 1e-9);
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
        assert!((kelvin(id.wctemp_k).unwrap() - 69.85).abs() < 1e-9);

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
    }
}
