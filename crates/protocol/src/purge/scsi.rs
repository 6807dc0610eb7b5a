//! Purge of a SCSI disk (`sd`): ATA SECURITY ERASE UNIT for an ATA drive (behind libata,
//! a SAS HBA or a SAT bridge, reached through ATA PASS-THROUGH (16)), SCSI SANITIZE for a
//! SCSI or SAS drive. Both erase the whole logical unit, so they are used only on a whole
//! disk the safety gate gave a write permit for, and never on a RAID controller's logical
//! drive or a disk behind a USB bridge (the caller checks: see `purge::scsi_refusal`).
//!
//! The commands go through [`ScsiDevice`], which the real device implements with SG_IO
//! and the tests with emulated drives that keep the standards' state machines.
//!
//! # ATA SECURITY ERASE
//!
//! The ATA Security feature set erases only a drive with a user password set, so the
//! sequence is the one `hdparm --security-erase` runs: IDENTIFY DEVICE (the feature set is
//! supported; the drive is not frozen, locked, or already protected by a password we do
//! not know; its serial and capacity are those of the disk the gate approved), SECURITY
//! SET PASSWORD (user, level High, [`ERASE_PASSWORD`]) and IDENTIFY again (security now
//! enabled: the command reached the drive), SECURITY ERASE PREPARE and SECURITY ERASE UNIT
//! back to back (enhanced when the drive has it: it also erases the blocks the host cannot
//! address; the pair is sent twice at most, since another command between them makes the
//! drive refuse the erase), then IDENTIFY (a completed erase leaves security disabled).
//! If any step fails after the password was set, SECURITY DISABLE PASSWORD removes it; if
//! even that fails, purge stops with an error saying how to remove it by hand, because a
//! drive left with a password locks at its next power-up.
//!
//! # SCSI SANITIZE
//!
//! SANITIZE with BLOCK ERASE, else CRYPTOGRAPHIC ERASE (REPORT SUPPORTED OPERATION CODES
//! says which the drive has, when it answers it), with IMMED set, then REQUEST SENSE once
//! a second while the drive reports "sanitize in progress" (with its progress); when it no
//! longer does, TEST UNIT READY confirms the drive is ready. OVERWRITE is not used: purge's
//! own overwrite does the same and can be stopped. AUSE is set, so a failed sanitize can
//! be exited (`sg_sanitize --early`).

use std::fs::File;
use std::io;
use std::path::Path;
use std::time::{Duration, Instant};

use super::{PurgeError, PurgeMethod, FORMAT_FLOOR_BYTES_PER_S, SANITIZE_MAX_WAIT};
use crate::engine::RunControl;
use crate::sys::sg::{self, Completion, Data};

/// The user password an ATA SECURITY ERASE sets for the moment of the erase. Printed in
/// every error that could leave it set, with the command that removes it
/// ([`PurgeError::AtaPasswordLeft`] spells it out; a test checks they agree).
pub const ERASE_PASSWORD: &str = "driveprobe";

/// One command at a time to a SCSI device.
pub trait ScsiDevice {
    fn command(&mut self, cdb: &[u8], data: Data<'_>, timeout_ms: u32) -> io::Result<Completion>;
}

impl ScsiDevice for &File {
    fn command(&mut self, cdb: &[u8], data: Data<'_>, timeout_ms: u32) -> io::Result<Completion> {
        sg::command(self, cdb, data, timeout_ms)
    }
}

/// Timeout of the commands that only ask or set state.
const SHORT_TIMEOUT_MS: u32 = 30_000;
/// SCSI status BUSY.
const STATUS_BUSY: u8 = 0x08;

// ------------------------------------------------------------------ sense data

/// Sense key values (SPC).
pub const KEY_NO_SENSE: u8 = 0x0;
pub const KEY_RECOVERED: u8 = 0x1;
pub const KEY_NOT_READY: u8 = 0x2;
pub const KEY_MEDIUM_ERROR: u8 = 0x3;
pub const KEY_ILLEGAL_REQUEST: u8 = 0x5;
pub const KEY_UNIT_ATTENTION: u8 = 0x6;
pub const KEY_ABORTED_COMMAND: u8 = 0xB;

/// What sense data says, from either format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Sense {
    pub key: u8,
    pub asc: u8,
    pub ascq: u8,
    /// Progress of the operation in progress, of 65536 (the sense-key specific field).
    pub progress: Option<u16>,
    /// The ATA Error and Status registers of an ATA Status Return descriptor.
    pub ata: Option<(u8, u8)>,
    /// The fixed format's information field (bytes 3-6) when marked valid: for an ATA
    /// pass-through command, libata puts the Error and Status registers in its first two
    /// bytes.
    pub info: Option<[u8; 4]>,
}

impl Sense {
    /// Parses fixed (70h/71h) or descriptor (72h/73h) format sense data; None for other
    /// response codes or data too short to hold a sense key.
    pub fn parse(s: &[u8]) -> Option<Sense> {
        let code = *s.first()? & 0x7f;
        match code {
            0x70 | 0x71 => {
                if s.len() < 3 {
                    return None;
                }
                let at = |i: usize| s.get(i).copied().unwrap_or(0);
                let mut sense = Sense {
                    key: s[2] & 0x0f,
                    asc: at(12),
                    ascq: at(13),
                    ..Sense::default()
                };
                if s.len() >= 18 && s[15] & 0x80 != 0 {
                    sense.progress = Some(u16::from_be_bytes([s[16], s[17]]));
                }
                if s[0] & 0x80 != 0 && s.len() >= 7 {
                    sense.info = Some([s[3], s[4], s[5], s[6]]);
                }
                Some(sense)
            }
            0x72 | 0x73 => {
                if s.len() < 4 {
                    return None;
                }
                let mut sense = Sense {
                    key: s[1] & 0x0f,
                    asc: s[2],
                    ascq: s[3],
                    ..Sense::default()
                };
                let end = s.len().min(8 + s.get(7).copied().unwrap_or(0) as usize);
                let mut i = 8;
                while i + 2 <= end {
                    let d = &s[i..end.min(i + 2 + s[i + 1] as usize)];
                    match d[0] {
                        0x02 if d.len() >= 7 && d[4] & 0x80 != 0 => {
                            sense.progress = Some(u16::from_be_bytes([d[5], d[6]]));
                        }
                        0x09 if d.len() >= 14 => sense.ata = Some((d[3], d[13])),
                        _ => {}
                    }
                    i += 2 + s[i + 1] as usize;
                }
                Some(sense)
            }
            _ => None,
        }
    }

    /// The ATA Error and Status registers, for the sense of an ATA pass-through command.
    fn ata_registers(&self) -> Option<(u8, u8)> {
        self.ata.or(self.info.map(|i| (i[0], i[1])))
    }

    /// "SANITIZE IN PROGRESS" (04h/1Bh, reported with NOT READY, or NO SENSE to REQUEST
    /// SENSE).
    fn sanitize_in_progress(&self) -> bool {
        self.asc == 0x04 && self.ascq == 0x1B
    }

    /// "SANITIZE COMMAND FAILED" (31h/03h).
    fn sanitize_failed(&self) -> bool {
        self.asc == 0x31 && self.ascq == 0x03
    }

    /// The device does not have the command, or not with these fields.
    fn illegal_request(&self) -> bool {
        self.key == KEY_ILLEGAL_REQUEST
    }

    /// "INVALID COMMAND OPERATION CODE" (20h/00h).
    fn invalid_opcode(&self) -> bool {
        self.key == KEY_ILLEGAL_REQUEST && self.asc == 0x20
    }
}

fn key_name(key: u8) -> &'static str {
    match key {
        0x0 => "NO SENSE",
        0x1 => "RECOVERED ERROR",
        0x2 => "NOT READY",
        0x3 => "MEDIUM ERROR",
        0x4 => "HARDWARE ERROR",
        0x5 => "ILLEGAL REQUEST",
        0x6 => "UNIT ATTENTION",
        0x7 => "DATA PROTECT",
        0xB => "ABORTED COMMAND",
        _ => "other",
    }
}

fn asc_name(asc: u8, ascq: u8) -> Option<&'static str> {
    Some(match (asc, ascq) {
        (0x00, 0x00) => "no additional sense information",
        (0x00, 0x1D) => "ATA pass-through information available",
        (0x04, 0x1B) => "sanitize in progress",
        (0x20, 0x00) => "invalid command operation code",
        (0x24, 0x00) => "invalid field in CDB",
        (0x26, 0x00) => "invalid field in parameter list",
        (0x2C, 0x00) => "command sequence error",
        (0x31, 0x03) => "sanitize command failed",
        (0x3A, _) => "medium not present",
        (0x29, _) => "power on, reset, or bus device reset occurred",
        (0x2A, _) => "parameters changed",
        _ => return None,
    })
}

/// One line for a command that did not end GOOD; `ata`: it was an ATA pass-through.
fn describe_as(c: &Completion, ata: bool) -> String {
    let mut s = if c.host_status != 0 {
        format!(
            "the host adapter reported 0x{:02x}{}",
            c.host_status,
            if c.host_status == 0x03 {
                " (timed out)"
            } else {
                ""
            }
        )
    } else {
        format!("SCSI status 0x{:02x}", c.status)
    };
    if let Some(sense) = Sense::parse(&c.sense) {
        s.push_str(&format!(
            ", sense key {} ({}), ASC/ASCQ {:02X}h/{:02X}h",
            sense.key,
            key_name(sense.key),
            sense.asc,
            sense.ascq
        ));
        if let Some(n) = asc_name(sense.asc, sense.ascq) {
            s.push_str(&format!(" ({n})"));
        }
        let regs = if ata {
            sense.ata_registers()
        } else {
            sense.ata
        };
        if let Some((error, status)) = regs {
            s.push_str(&format!(", ATA status 0x{status:02x} error 0x{error:02x}"));
            if status & 0x01 != 0 && error & 0x04 != 0 {
                s.push_str(" (the drive aborted the command)");
            }
        }
    }
    s
}

/// One line for a SCSI command that did not end GOOD.
pub fn describe(c: &Completion) -> String {
    describe_as(c, false)
}

/// A command that did not end GOOD.
#[derive(Debug, thiserror::Error)]
enum CommandError {
    /// The device (or the host adapter) answered, with something other than GOOD: the
    /// completion keeps the status and the sense data; `ata`: it was an ATA pass-through,
    /// so the sense may carry the ATA registers.
    #[error("{}", describe_as(.completion, *.ata))]
    Refused { completion: Completion, ata: bool },
    /// The command did not reach the device.
    #[error("SG_IO failed: {0}")]
    SgIo(#[source] io::Error),
}

impl CommandError {
    /// The sense data the device returned with its refusal, when it is readable.
    fn sense(&self) -> Option<Sense> {
        match self {
            CommandError::Refused { completion, .. } => Sense::parse(&completion.sense),
            CommandError::SgIo(_) => None,
        }
    }
}

/// The command ended GOOD, or else why not.
fn check(c: io::Result<Completion>, ata: bool) -> Result<Completion, CommandError> {
    match c {
        Ok(c) if c.is_good() => Ok(c),
        Ok(completion) => Err(CommandError::Refused { completion, ata }),
        Err(e) => Err(CommandError::SgIo(e)),
    }
}

/// A refusal worth asking again: a unit attention (a reset, a changed parameter), a busy
/// device, or one becoming ready.
fn transient(c: &Completion) -> bool {
    if c.status == STATUS_BUSY {
        return true;
    }
    Sense::parse(&c.sense).is_some_and(|s| {
        s.key == KEY_UNIT_ATTENTION
            || (s.key == KEY_NOT_READY && s.asc == 0x04 && matches!(s.ascq, 0x01 | 0x11))
    })
}

/// Sends a command, again (up to 3 times in all) while the device answers with a
/// [`transient`] refusal.
fn command_retrying(
    dev: &mut dyn ScsiDevice,
    cdb: &[u8],
    mut data: Data<'_>,
    timeout_ms: u32,
) -> io::Result<Completion> {
    let mut tries = 0;
    loop {
        tries += 1;
        let again = match &mut data {
            Data::None => Data::None,
            Data::In(b) => Data::In(b),
            Data::Out(b) => Data::Out(b),
        };
        let c = dev.command(cdb, again, timeout_ms)?;
        if c.is_good() || !transient(&c) || tries >= 3 {
            return Ok(c);
        }
    }
}

// ------------------------------------------------------------------ ATA

const ATA_IDENTIFY: u8 = 0xEC;
const ATA_SECURITY_SET_PASSWORD: u8 = 0xF1;
const ATA_SECURITY_ERASE_PREPARE: u8 = 0xF3;
const ATA_SECURITY_ERASE_UNIT: u8 = 0xF4;
const ATA_SECURITY_DISABLE_PASSWORD: u8 = 0xF6;

/// The ATA protocol of a pass-through command (SAT's PROTOCOL field).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AtaProtocol {
    NonData = 3,
    PioDataIn = 4,
    PioDataOut = 5,
}

/// ATA PASS-THROUGH (16) of a 28-bit command with no LBA; the data commands move one
/// 512-byte block, its length given in the Count field in blocks.
pub fn ata16(command: u8, protocol: u8) -> [u8; 16] {
    let mut c = [0u8; 16];
    c[0] = 0x85;
    c[1] = protocol << 1;
    // OFF_LINE 0, CK_COND 0, T_TYPE 0, T_DIR (1: from the device), BYT_BLOK 1 (a count
    // of blocks), T_LENGTH 2 (the length is in the Count field).
    c[2] = match protocol {
        p if p == AtaProtocol::PioDataIn as u8 => 0b0000_1110,
        p if p == AtaProtocol::PioDataOut as u8 => 0b0000_0110,
        _ => 0,
    };
    if c[2] != 0 {
        c[6] = 1;
    }
    c[14] = command;
    c
}

/// What IDENTIFY DEVICE says about the drive and its Security feature set.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AtaIdentify {
    /// Words 10-19, trimmed.
    pub serial: Option<String>,
    /// User-addressable bytes: the sector count (words 100-103 with 48-bit addressing,
    /// else 60-61) times the logical sector size (words 117-118 when word 106 says so,
    /// else 512).
    pub capacity: Option<u64>,
    /// Word 82 bit 1 (and word 128 bit 0).
    pub supported: bool,
    /// Word 128: bit 1 a user password is set, 2 locked, 3 frozen, 4 the unlock attempt
    /// count expired, 5 enhanced erase supported.
    pub enabled: bool,
    pub locked: bool,
    pub frozen: bool,
    pub count_expired: bool,
    pub enhanced: bool,
    /// Words 89 and 90: the drive's estimate of a normal and an enhanced erase, minutes.
    pub erase_minutes: Option<u32>,
    pub enhanced_minutes: Option<u32>,
}

/// An erase-time word (ACS-3 7.12.7.41): bit 15 set, bits 14:0 are units of 2 minutes;
/// clear, bits 7:0 are. 0: no estimate; the largest value of each format means "more than"
/// it, with no bound: no estimate either.
fn erase_minutes(w: u16) -> Option<u32> {
    let units = if w & 0x8000 != 0 {
        Some(u32::from(w & 0x7fff)).filter(|&u| u != 0x7fff)
    } else {
        Some(u32::from(w & 0xff)).filter(|&u| u != 0xff)
    };
    units.filter(|&u| u != 0).map(|u| u * 2)
}

/// An ATA string (words of two characters, the first in the high byte), trimmed.
fn ata_string(b: &[u8]) -> Option<String> {
    let s: String = b
        .chunks_exact(2)
        .flat_map(|w| [w[1], w[0]])
        .map(char::from)
        .collect();
    let s = s.trim_matches(|c: char| c == ' ' || c == '\0').to_string();
    (!s.is_empty() && s.chars().all(|c| c.is_ascii_graphic() || c == ' ')).then_some(s)
}

/// Why the data of IDENTIFY DEVICE is not an ATA drive's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdentifyDataError {
    #[error("IDENTIFY DEVICE returned {got} bytes of 512")]
    Short { got: usize },
    #[error("IDENTIFY DEVICE returned only zeros")]
    Zeros,
    #[error("IDENTIFY DEVICE says an ATAPI (packet) device")]
    Atapi,
    #[error("IDENTIFY DEVICE's checksum (word 255) is wrong: the bytes sum to 0x{sum:02x}")]
    Checksum { sum: u8 },
}

/// Parses the 512 bytes of IDENTIFY DEVICE. Err: not the data of an ATA (not ATAPI)
/// device, or its checksum (word 255) is wrong.
pub fn parse_identify(b: &[u8]) -> Result<AtaIdentify, IdentifyDataError> {
    if b.len() < 512 {
        return Err(IdentifyDataError::Short { got: b.len() });
    }
    let w = |i: usize| u16::from_le_bytes([b[2 * i], b[2 * i + 1]]);
    if b[..512].iter().all(|&x| x == 0) {
        return Err(IdentifyDataError::Zeros);
    }
    if w(0) & 0x8000 != 0 {
        return Err(IdentifyDataError::Atapi);
    }
    if w(255) & 0xff == 0xA5 {
        let sum = b[..512].iter().fold(0u8, |a, &x| a.wrapping_add(x));
        if sum != 0 {
            return Err(IdentifyDataError::Checksum { sum });
        }
    }
    let valid = |v: u16| v != 0 && v != 0xffff;
    let w82 = w(82);
    let w83 = w(83);
    let w106 = w(106);
    let w128 = w(128);
    let lba48 = u64::from(w(100))
        | u64::from(w(101)) << 16
        | u64::from(w(102)) << 32
        | u64::from(w(103)) << 48;
    // Word 83: bits 15:14 = 01 say it is valid; bit 10, 48-bit addressing (as libata
    // reads it).
    let sectors = if w83 & 0xc000 == 0x4000 && w83 & 0x0400 != 0 && lba48 != 0 {
        lba48
    } else {
        u64::from(w(60)) | u64::from(w(61)) << 16
    };
    // Word 106: bits 15:14 = 01 say the word is valid; bit 12, the logical sector is
    // longer than 256 words and words 117-118 give it, in words.
    let sector = if w106 & 0xc000 == 0x4000 && w106 & 0x1000 != 0 {
        (u64::from(w(117)) | u64::from(w(118)) << 16) * 2
    } else {
        512
    };
    Ok(AtaIdentify {
        serial: ata_string(&b[20..40]),
        capacity: (sectors > 0 && sector >= 512).then(|| sectors * sector),
        supported: valid(w82) && w82 & 0x0002 != 0 && w128 & 0x0001 != 0,
        enabled: w128 & 0x0002 != 0,
        locked: w128 & 0x0004 != 0,
        frozen: w128 & 0x0008 != 0,
        count_expired: w128 & 0x0010 != 0,
        enhanced: w128 & 0x0020 != 0,
        erase_minutes: erase_minutes(w(89)),
        enhanced_minutes: erase_minutes(w(90)),
    })
}

/// The erase to run: enhanced or not, and its command timeout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AtaErase {
    pub enhanced: bool,
    pub estimate_minutes: Option<u32>,
    pub timeout_ms: u32,
}

/// Least and most time a SECURITY ERASE UNIT is given.
const ATA_ERASE_MIN: Duration = Duration::from_secs(10 * 60);
const ATA_ERASE_MAX: Duration = Duration::from_secs(7 * 24 * 3600);

/// What the disk the safety gate approved is: the ATA drive answering must be it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Expected<'a> {
    pub serial: Option<&'a str>,
    pub bytes: u64,
}

/// A serial as udev writes `ID_SERIAL_SHORT` (where the gate's identity of a disk may come
/// from): trimmed, each run of whitespace one `_`, and any character but ASCII letters,
/// digits and `#+-.:=@_` a `_`; so the ATA string and the disk's serial compare equal
/// however each was read.
fn udev_serial(s: &str) -> String {
    let mut out = String::new();
    let mut space = false;
    for c in s.trim().chars() {
        if c.is_whitespace() {
            space = true;
            continue;
        }
        if std::mem::take(&mut space) {
            out.push('_');
        }
        out.push(if c.is_ascii_alphanumeric() || "#+-.:=@_".contains(c) {
            c
        } else {
            '_'
        });
    }
    out
}

/// Why the ATA Security erase is not used on a drive.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AtaPlanError {
    #[error("the drive does not support the Security feature set (IDENTIFY word 82 bit 1 clear)")]
    NotSupported,
    #[error("the drive is locked by a password this host does not know")]
    Locked,
    #[error(
        "a user password is already set on the drive: driveprobe erases only a drive whose \
         security it set itself"
    )]
    PasswordSet,
    #[error(
        "the drive's security is frozen (usually by the firmware at boot): suspending and \
         resuming the host, or unplugging and plugging the drive, unfreezes it"
    )]
    Frozen,
    #[error("the drive's password attempt count has expired: power-cycle it")]
    CountExpired,
    #[error("the disk's serial is not known, so the ATA drive answering cannot be tied to it")]
    SerialUnknown,
    /// `got`: the serial in IDENTIFY DEVICE, None when it has none.
    #[error(
        "the ATA drive answering has serial {}, the disk the safety gate approved {want:?}",
        quoted_or_none(.got.as_deref())
    )]
    SerialMismatch { want: String, got: Option<String> },
    /// `got`: the capacity from IDENTIFY DEVICE, None when it gives none.
    #[error(
        "the ATA drive answering has {}, the disk the safety gate approved {want} bytes",
        bytes_or_unknown(*.got)
    )]
    CapacityMismatch { want: u64, got: Option<u64> },
}

fn quoted_or_none(s: Option<&str>) -> String {
    s.map_or("none".to_string(), |s| format!("{s:?}"))
}

fn bytes_or_unknown(n: Option<u64>) -> String {
    n.map_or("no capacity in its IDENTIFY DEVICE data".to_string(), |n| {
        format!("{n} bytes")
    })
}

/// Whether and how to erase, or why not.
pub fn ata_plan(id: &AtaIdentify, expected: &Expected<'_>) -> Result<AtaErase, AtaPlanError> {
    if !id.supported {
        return Err(AtaPlanError::NotSupported);
    }
    if id.locked {
        return Err(AtaPlanError::Locked);
    }
    if id.enabled {
        return Err(AtaPlanError::PasswordSet);
    }
    if id.frozen {
        return Err(AtaPlanError::Frozen);
    }
    if id.count_expired {
        return Err(AtaPlanError::CountExpired);
    }
    // The drive answering the pass-through must be the disk the gate approved, not a
    // member of an enclosure's mirror or a drive the bridge picked.
    match (expected.serial, id.serial.as_deref()) {
        (Some(want), Some(got)) if udev_serial(want) == udev_serial(got) => {}
        (None, _) => return Err(AtaPlanError::SerialUnknown),
        (Some(want), got) => {
            return Err(AtaPlanError::SerialMismatch {
                want: want.to_string(),
                got: got.map(str::to_string),
            })
        }
    }
    if id.capacity != Some(expected.bytes) {
        return Err(AtaPlanError::CapacityMismatch {
            want: expected.bytes,
            got: id.capacity,
        });
    }
    let (enhanced, est) = if id.enhanced {
        (true, id.enhanced_minutes)
    } else {
        (false, id.erase_minutes)
    };
    // Twice the drive's estimate; without one, as long as writing the whole disk at the
    // slowest speed purge allows for takes.
    let timeout = match est {
        Some(m) => Duration::from_secs(u64::from(m) * 60 * 2),
        None => Duration::from_secs(expected.bytes / FORMAT_FLOOR_BYTES_PER_S),
    }
    .clamp(ATA_ERASE_MIN, ATA_ERASE_MAX);
    Ok(AtaErase {
        enhanced,
        estimate_minutes: est,
        timeout_ms: timeout.as_millis() as u32,
    })
}

/// The 512-byte data block of the security commands: word 0 (bit 0: 0 = the user
/// password; bit 1 on SECURITY ERASE UNIT: enhanced; bit 8 on SET PASSWORD: level, 0 =
/// High), words 1-16 the password.
pub fn password_block(enhanced: bool) -> [u8; 512] {
    let mut b = [0u8; 512];
    if enhanced {
        b[0] = 0x02;
    }
    b[2..2 + ERASE_PASSWORD.len()].copy_from_slice(ERASE_PASSWORD.as_bytes());
    b
}

/// Why IDENTIFY DEVICE through the pass-through gave no ATA data.
#[derive(Debug, thiserror::Error)]
enum IdentifyError {
    /// The device answered with data that is not an ATA drive's: not an ATA drive.
    #[error(transparent)]
    NotAtaData(#[from] IdentifyDataError),
    /// The device refused the pass-through (ILLEGAL REQUEST): not an ATA drive.
    #[error(transparent)]
    NoPassThrough(CommandError),
    /// Any other failure: the device could not be asked.
    #[error(transparent)]
    Failed(CommandError),
}

fn ata_identify(dev: &mut dyn ScsiDevice) -> Result<AtaIdentify, IdentifyError> {
    let mut buf = [0u8; 512];
    let cdb = ata16(ATA_IDENTIFY, AtaProtocol::PioDataIn as u8);
    match check(
        command_retrying(dev, &cdb, Data::In(&mut buf), SHORT_TIMEOUT_MS),
        true,
    ) {
        Ok(_) => Ok(parse_identify(&buf)?),
        Err(e) if e.sense().is_some_and(|s| s.illegal_request()) => {
            Err(IdentifyError::NoPassThrough(e))
        }
        Err(e) => Err(IdentifyError::Failed(e)),
    }
}

fn ata_out(
    dev: &mut dyn ScsiDevice,
    cmd: u8,
    block: &[u8],
    timeout_ms: u32,
) -> Result<(), CommandError> {
    check(
        dev.command(
            &ata16(cmd, AtaProtocol::PioDataOut as u8),
            Data::Out(block),
            timeout_ms,
        ),
        true,
    )
    .map(|_| ())
}

/// Removes the password purge set, after a failed step; checks with IDENTIFY.
fn remove_password(dev: &mut dyn ScsiDevice, path: &Path, after: &str) -> Result<(), PurgeError> {
    // Asked again after a unit attention (a reset during the failed step).
    let block = password_block(false);
    let disable = check(
        command_retrying(
            dev,
            &ata16(ATA_SECURITY_DISABLE_PASSWORD, AtaProtocol::PioDataOut as u8),
            Data::Out(&block),
            SHORT_TIMEOUT_MS,
        ),
        true,
    )
    .map(|_| ());
    let now = ata_identify(dev);
    if now.as_ref().map_or(true, |id| id.enabled) {
        type Cause = Box<dyn std::error::Error + Send + Sync>;
        let (why, cause): (&str, Option<Cause>) = match (disable, now) {
            (Err(e), _) => ("SECURITY DISABLE PASSWORD failed", Some(Box::new(e))),
            (Ok(()), Err(e)) => (
                "SECURITY DISABLE PASSWORD reported success, but the IDENTIFY DEVICE that \
                 checks it failed",
                Some(Box::new(e)),
            ),
            (Ok(()), Ok(_)) => ("IDENTIFY still shows it set", None),
        };
        return Err(PurgeError::AtaPasswordLeft {
            path: path.to_path_buf(),
            why: format!("after {after}: {why}").into(),
            cause,
        });
    }
    Ok(())
}

/// How the erase pair failed: the one-line reason, and whether the drive aborted a
/// command (ATA status ERR with ABRT): what it does when another command came between
/// PREPARE and UNIT, so the pair may be sent again. A time-out or a transport error is
/// not sent again (an erase of hours may be running).
struct EraseFailure {
    why: String,
    aborted: bool,
}

fn ata_aborted(c: &Completion) -> bool {
    Sense::parse(&c.sense)
        .and_then(|s| s.ata_registers())
        .is_some_and(|(error, status)| status & 0x01 != 0 && error & 0x04 != 0)
}

/// One command of the erase pair, its failure named `what`.
fn erase_step(
    dev: &mut dyn ScsiDevice,
    cdb: &[u8],
    data: Data<'_>,
    timeout_ms: u32,
    what: &str,
) -> Result<(), EraseFailure> {
    match dev.command(cdb, data, timeout_ms) {
        Ok(c) if c.is_good() => Ok(()),
        Ok(c) => Err(EraseFailure {
            why: format!("{what}: {}", describe_as(&c, true)),
            aborted: ata_aborted(&c),
        }),
        Err(e) => Err(EraseFailure {
            why: format!("{what}: SG_IO failed: {e}"),
            aborted: false,
        }),
    }
}

/// SECURITY ERASE PREPARE and SECURITY ERASE UNIT, back to back.
fn erase_pair(dev: &mut dyn ScsiDevice, plan: &AtaErase) -> Result<(), EraseFailure> {
    erase_step(
        dev,
        &ata16(ATA_SECURITY_ERASE_PREPARE, AtaProtocol::NonData as u8),
        Data::None,
        SHORT_TIMEOUT_MS,
        "ATA SECURITY ERASE PREPARE",
    )?;
    let kind = if plan.enhanced { "enhanced" } else { "normal" };
    erase_step(
        dev,
        &ata16(ATA_SECURITY_ERASE_UNIT, AtaProtocol::PioDataOut as u8),
        Data::Out(&password_block(plan.enhanced)),
        plan.timeout_ms,
        &format!("ATA SECURITY ERASE UNIT ({kind})"),
    )
}

/// Runs the ATA Security erase on an ATA drive. Ok(None): it does not apply or failed
/// without harm (see the notes); Err: it could not clean up after itself.
pub fn purge_ata(
    dev: &mut dyn ScsiDevice,
    id: &AtaIdentify,
    expected: &Expected<'_>,
    path: &Path,
    control: &RunControl,
    notes: &mut Vec<String>,
) -> Result<Option<PurgeMethod>, PurgeError> {
    let plan = match ata_plan(id, expected) {
        Ok(p) => p,
        Err(why) => {
            notes.push(format!("ATA SECURITY ERASE: {why}: not used"));
            return Ok(None);
        }
    };
    if control.is_stopped() {
        return Err(PurgeError::Stopped {
            path: path.to_path_buf(),
            what: "purge (before an ATA SECURITY ERASE)",
            bytes: 0,
        });
    }
    tracing::warn!(
        target = %path.display(),
        password = ERASE_PASSWORD,
        "setting an ATA user password for a security erase; should this process die before \
         it ends, remove it with `hdparm --user-master u --security-disable {ERASE_PASSWORD} {}`",
        path.display()
    );
    let set = ata_out(
        dev,
        ATA_SECURITY_SET_PASSWORD,
        &password_block(false),
        SHORT_TIMEOUT_MS,
    );
    // The password must now be set: a bridge that answers GOOD without passing the
    // command on would otherwise have purge report an erase that never ran.
    match (set, ata_identify(dev)) {
        (Ok(()), Ok(now)) if now.enabled && !now.locked => {}
        (Ok(()), Ok(now)) if now.enabled => {
            remove_password(
                dev,
                path,
                "a SECURITY SET PASSWORD that left the drive locked",
            )?;
            notes.push(
                "ATA SECURITY SET PASSWORD: the drive is locked after it; the password was \
                 removed and the erase not used"
                    .into(),
            );
            return Ok(None);
        }
        (Ok(()), Ok(_)) => {
            notes.push(
                "ATA SECURITY SET PASSWORD: the device reported success but IDENTIFY shows no \
                 password set (the command did not reach the drive): erase not used"
                    .into(),
            );
            return Ok(None);
        }
        (set, now) => {
            // One of the two failed: the arms above took both succeeding.
            let why = match (set, &now) {
                (Err(e), _) => e.to_string(),
                (Ok(()), Err(e)) => e.to_string(),
                (Ok(()), Ok(_)) => String::new(),
            };
            notes.push(format!("ATA SECURITY SET PASSWORD: {why}"));
            if now.map_or(true, |n| n.enabled) {
                remove_password(
                    dev,
                    path,
                    "a failed SECURITY SET PASSWORD (it may or may not be set)",
                )?;
            }
            return Ok(None);
        }
    }
    let t0 = Instant::now();
    // Another command between PREPARE and UNIT (smartd, a power-mode check) makes the
    // drive refuse the erase: once more.
    let erased = match erase_pair(dev, &plan) {
        Err(first) if first.aborted && !control.is_stopped() => {
            notes.push(format!("{} (sent again)", first.why));
            erase_pair(dev, &plan)
        }
        r => r,
    };
    if let Err(EraseFailure { why: e, .. }) = erased {
        notes.push(e.clone());
        remove_password(dev, path, &e)?;
        notes.push(
            "the password driveprobe set for the erase was removed (SECURITY DISABLE PASSWORD)"
                .into(),
        );
        return Ok(None);
    }
    // A completed erase leaves the Security feature set disabled: a password still set
    // means it did not run.
    match ata_identify(dev) {
        Ok(after) if !after.enabled => {}
        Ok(_) => {
            remove_password(dev, path, "an erase that left the password set")?;
            notes.push(
                "ATA SECURITY ERASE UNIT: the device reported success but the password is still \
                 set, so the erase did not run; the password was removed"
                    .into(),
            );
            return Ok(None);
        }
        Err(e) => {
            return Err(PurgeError::AtaPasswordLeft {
                path: path.to_path_buf(),
                why: "after the erase, IDENTIFY DEVICE failed".into(),
                cause: Some(Box::new(e)),
            })
        }
    }
    notes.push(format!(
        "ATA SECURITY ERASE UNIT ({}) in {:.0} s (the drive estimates {}; allowed {} min)",
        if plan.enhanced { "enhanced" } else { "normal" },
        t0.elapsed().as_secs_f64(),
        plan.estimate_minutes
            .map_or("nothing".to_string(), |m| format!("{m} min")),
        plan.timeout_ms / 60_000
    ));
    Ok(Some(PurgeMethod::AtaSecurityErase))
}

// ------------------------------------------------------------------ SCSI SANITIZE

const SANITIZE: u8 = 0x48;
const SA_BLOCK_ERASE: u8 = 0x02;
const SA_CRYPTO_ERASE: u8 = 0x03;

/// SANITIZE (10) with IMMED and AUSE, no parameter list.
pub fn sanitize_cdb(service_action: u8) -> [u8; 10] {
    let mut c = [0u8; 10];
    c[0] = SANITIZE;
    c[1] = 0x80 | 0x20 | (service_action & 0x1f);
    c
}

/// REPORT SUPPORTED OPERATION CODES for one opcode and service action (reporting
/// options 011b).
pub fn rsoc_cdb(opcode: u8, service_action: u16, alloc: u32) -> [u8; 12] {
    let mut c = [0u8; 12];
    c[0] = 0xA3;
    c[1] = 0x0C;
    c[2] = 0x03;
    c[3] = opcode;
    c[4..6].copy_from_slice(&service_action.to_be_bytes());
    c[6..10].copy_from_slice(&alloc.to_be_bytes());
    c
}

/// Whether the drive has SANITIZE with `sa`: Some(yes or no) from its answer to REPORT
/// SUPPORTED OPERATION CODES, None when it does not answer that.
fn sanitize_supported(dev: &mut dyn ScsiDevice, sa: u8) -> Option<bool> {
    let mut buf = [0u8; 32];
    let c = command_retrying(
        dev,
        &rsoc_cdb(SANITIZE, sa.into(), buf.len() as u32),
        Data::In(&mut buf),
        SHORT_TIMEOUT_MS,
    );
    match c {
        Ok(c) if c.is_good() => match buf[1] & 0b111 {
            0b011 | 0b101 => Some(true),
            0b001 => Some(false),
            _ => None,
        },
        _ => None,
    }
}

/// Runs SCSI SANITIZE. Ok(None): not supported or refused (see the notes).
pub fn purge_scsi(
    dev: &mut dyn ScsiDevice,
    path: &Path,
    control: &RunControl,
    poll: Duration,
    notes: &mut Vec<String>,
) -> Result<Option<PurgeMethod>, PurgeError> {
    for (sa, name) in [
        (SA_BLOCK_ERASE, "block erase"),
        (SA_CRYPTO_ERASE, "cryptographic erase"),
    ] {
        if sanitize_supported(dev, sa) == Some(false) {
            notes.push(format!(
                "SCSI SANITIZE ({name}): not supported (REPORT SUPPORTED OPERATION CODES)"
            ));
            continue;
        }
        if control.is_stopped() {
            return Err(PurgeError::Stopped {
                path: path.to_path_buf(),
                what: "purge (before a SCSI SANITIZE)",
                bytes: 0,
            });
        }
        let c = match command_retrying(dev, &sanitize_cdb(sa), Data::None, SHORT_TIMEOUT_MS) {
            Ok(c) => c,
            Err(e) => {
                notes.push(format!("SCSI SANITIZE ({name}): SG_IO failed: {e}"));
                return Ok(None);
            }
        };
        if !c.is_good() {
            notes.push(format!("SCSI SANITIZE ({name}): {}", describe(&c)));
            if Sense::parse(&c.sense).is_some_and(|s| s.invalid_opcode()) {
                break;
            }
            continue;
        }
        let t0 = Instant::now();
        wait_scsi_sanitize(dev, path, control, poll)?;
        notes.push(format!(
            "SCSI SANITIZE ({name}) of the logical unit in {:.0} s",
            t0.elapsed().as_secs_f64()
        ));
        return Ok(Some(PurgeMethod::ScsiSanitize));
    }
    notes.push(
        "SCSI SANITIZE (overwrite): not used, purge's own overwrite does the same and can be \
         stopped"
            .into(),
    );
    Ok(None)
}

/// REQUEST SENSE in fixed format; TEST UNIT READY.
const REQUEST_SENSE: [u8; 6] = [0x03, 0, 0, 0, 252, 0];
const TEST_UNIT_READY: [u8; 6] = [0; 6];
/// Polls in a row that may fail (REQUEST SENSE refused, NOT READY for another reason)
/// before the wait gives up.
const SANITIZE_POLL_FAILURES: u32 = 30;

/// What one poll of a sanitize found.
#[derive(Debug, PartialEq, Eq)]
enum Poll {
    Running(Option<u16>),
    Done,
    Failed,
    /// Not known this time (a unit attention, a refusal): the reason.
    Unclear(String),
}

/// One poll: REQUEST SENSE, and TEST UNIT READY to confirm a sanitize seems over.
fn poll_sanitize(dev: &mut dyn ScsiDevice) -> Poll {
    let mut buf = [0u8; 252];
    let sense = match check(
        dev.command(&REQUEST_SENSE, Data::In(&mut buf), SHORT_TIMEOUT_MS),
        false,
    ) {
        Ok(c) => {
            let n = (buf.len() as i64 - i64::from(c.resid)).clamp(0, buf.len() as i64);
            Sense::parse(&buf[..n as usize])
        }
        Err(e) => return Poll::Unclear(format!("REQUEST SENSE: {e}")),
    };
    let judge = |s: &Sense| {
        if s.sanitize_in_progress() {
            Some(Poll::Running(s.progress))
        } else if s.sanitize_failed() {
            Some(Poll::Failed)
        } else {
            None
        }
    };
    if let Some(s) = sense {
        if let Some(p) = judge(&s) {
            return p;
        }
        if s.key == KEY_UNIT_ATTENTION || s.key == KEY_NOT_READY {
            return Poll::Unclear(format!(
                "REQUEST SENSE: sense key {} ({}), ASC/ASCQ {:02X}h/{:02X}h",
                s.key,
                key_name(s.key),
                s.asc,
                s.ascq
            ));
        }
    }
    // Nothing pending: the drive must now take a command.
    match dev.command(&TEST_UNIT_READY, Data::None, SHORT_TIMEOUT_MS) {
        Ok(c) if c.is_good() => Poll::Done,
        Ok(c) => Sense::parse(&c.sense)
            .and_then(|s| judge(&s))
            .unwrap_or_else(|| Poll::Unclear(format!("TEST UNIT READY: {}", describe(&c)))),
        Err(e) => Poll::Unclear(format!("TEST UNIT READY: SG_IO failed: {e}")),
    }
}

/// Polls until the sanitize just started is over.
fn wait_scsi_sanitize(
    dev: &mut dyn ScsiDevice,
    path: &Path,
    control: &RunControl,
    poll: Duration,
) -> Result<(), PurgeError> {
    let t0 = Instant::now();
    let mut unclear = 0;
    let mut progress = 0u16;
    loop {
        match poll_sanitize(dev) {
            Poll::Running(p) => {
                unclear = 0;
                progress = p.unwrap_or(progress);
            }
            Poll::Done => return Ok(()),
            Poll::Failed => {
                return Err(PurgeError::ScsiSanitizeFailed {
                    path: path.to_path_buf(),
                })
            }
            Poll::Unclear(why) => {
                unclear += 1;
                if unclear >= SANITIZE_POLL_FAILURES {
                    return Err(PurgeError::ScsiSanitizeLost {
                        path: path.to_path_buf(),
                        why: format!("{unclear} polls in a row, the last: {why}"),
                    });
                }
            }
        }
        let waited = t0.elapsed();
        if waited > SANITIZE_MAX_WAIT {
            return Err(PurgeError::ScsiSanitizeTimeout {
                path: path.to_path_buf(),
                waited_s: waited.as_secs(),
                progress_pct: f64::from(progress) / 655.36,
            });
        }
        if control.is_stopped() {
            return Err(PurgeError::Stopped {
                path: path.to_path_buf(),
                what: "waiting for the SCSI sanitize (it goes on inside the drive)",
                bytes: 0,
            });
        }
        std::thread::sleep(poll);
    }
}

/// Purges the SCSI disk: ATA SECURITY ERASE when it is an ATA drive (it answers ATA
/// IDENTIFY DEVICE through the pass-through), else SCSI SANITIZE when the device refused
/// the pass-through as a command it does not have. Any other failure to ask tries neither.
pub fn purge_sd(
    dev: &mut dyn ScsiDevice,
    expected: &Expected<'_>,
    path: &Path,
    control: &RunControl,
    poll: Duration,
    notes: &mut Vec<String>,
) -> Result<Option<PurgeMethod>, PurgeError> {
    match ata_identify(dev) {
        Ok(id) => purge_ata(dev, &id, expected, path, control, notes),
        Err(IdentifyError::NotAtaData(_) | IdentifyError::NoPassThrough(_)) => {
            purge_scsi(dev, path, control, poll, notes)
        }
        Err(IdentifyError::Failed(why)) => {
            notes.push(format!(
                "ATA IDENTIFY DEVICE through the pass-through: {why}: ATA SECURITY ERASE and \
                 SCSI SANITIZE not tried"
            ));
            Ok(None)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    const SERIAL: &str = "WD-WX12345678";
    /// 1,000,215,216 sectors of 512 bytes: a "500 GB" drive.
    const SECTORS: u64 = 976_773_168;
    const BYTES: u64 = SECTORS * 512;

    fn path() -> PathBuf {
        PathBuf::from("/dev/sdz")
    }

    fn expected() -> Expected<'static> {
        Expected {
            serial: Some(SERIAL),
            bytes: BYTES,
        }
    }

    fn good() -> Completion {
        Completion {
            status: 0,
            host_status: 0,
            driver_status: 0,
            sense: Vec::new(),
            resid: 0,
        }
    }

    fn check_condition(sense: Vec<u8>) -> Completion {
        Completion {
            status: 0x02,
            driver_status: 0x08,
            sense,
            ..good()
        }
    }

    /// Fixed-format sense data.
    fn fixed(key: u8, asc: u8, ascq: u8, progress: Option<u16>) -> Vec<u8> {
        let mut s = vec![0u8; 18];
        s[0] = 0x70;
        s[2] = key;
        s[7] = 10;
        s[12] = asc;
        s[13] = ascq;
        if let Some(p) = progress {
            s[15] = 0x80;
            s[16..18].copy_from_slice(&p.to_be_bytes());
        }
        s
    }

    /// What libata returns for an ATA pass-through command the drive aborted, in its
    /// default fixed format (D_SENSE=0): ABORTED COMMAND, the information field valid with
    /// the Error (ABRT) and Status (DRDY, DSC, ERR) registers.
    fn ata_aborted() -> Completion {
        let mut s = fixed(KEY_ABORTED_COMMAND, 0, 0, None);
        s[0] |= 0x80;
        s[3] = 0x04;
        s[4] = 0x51;
        check_condition(s)
    }

    /// The same in descriptor format (D_SENSE=1): an ATA Status Return descriptor.
    fn ata_aborted_descriptor() -> Completion {
        let mut s = vec![0u8; 22];
        s[0] = 0x72;
        s[1] = KEY_ABORTED_COMMAND;
        s[7] = 14;
        s[8] = 0x09;
        s[9] = 0x0c;
        s[11] = 0x04;
        s[21] = 0x51;
        check_condition(s)
    }

    fn invalid_opcode() -> Completion {
        check_condition(fixed(KEY_ILLEGAL_REQUEST, 0x20, 0, None))
    }

    fn unit_attention() -> Completion {
        check_condition(fixed(KEY_UNIT_ATTENTION, 0x29, 0x00, None))
    }

    /// An ATA drive's Security feature set, as ACS-3 has it (states SEC1 to SEC6, without
    /// the master password), behind an emulated SAT layer.
    #[derive(Default)]
    struct AtaDrive {
        supported: bool,
        enhanced_supported: bool,
        frozen: bool,
        locked: bool,
        password: Option<Vec<u8>>,
        prepared: bool,
        erased: Option<&'static str>,
        /// ERASE UNIT aborts this many times (0: none; u32::MAX: always).
        erase_aborts: u32,
        fail_disable: bool,
        /// A bridge that answers GOOD to SET PASSWORD and ERASE UNIT without passing
        /// them on.
        drops_writes: bool,
        /// The next command gets a unit attention (a reset happened).
        pending_attention: bool,
        serial: &'static str,
        log: Vec<&'static str>,
    }

    impl AtaDrive {
        fn identify(&self) -> [u8; 512] {
            let mut w = [0u16; 256];
            w[0] = 0x0040;
            for (i, pair) in format!("{:<20}", self.serial)
                .as_bytes()
                .chunks(2)
                .enumerate()
            {
                w[10 + i] = u16::from(pair[0]) << 8 | u16::from(pair[1]);
            }
            w[60] = 0xffff;
            w[61] = 0x0fff;
            w[82] = 0x4000 | if self.supported { 0x0002 } else { 0 };
            w[83] = 0x4000 | 0x0400;
            for i in 0..4 {
                w[100 + i] = (SECTORS >> (16 * i)) as u16;
            }
            w[106] = 0x4000;
            if self.supported {
                w[128] = 0x0001
                    | if self.password.is_some() { 0x0002 } else { 0 }
                    | if self.locked { 0x0004 } else { 0 }
                    | if self.frozen { 0x0008 } else { 0 }
                    | if self.enhanced_supported { 0x0020 } else { 0 };
                w[89] = 0x8000 | 30; // 60 minutes, extended format
                w[90] = 2; // 4 minutes, old format
            }
            let mut b = [0u8; 512];
            for (i, v) in w.iter().enumerate() {
                b[2 * i..2 * i + 2].copy_from_slice(&v.to_le_bytes());
            }
            b[510] = 0xA5;
            let sum = b[..511].iter().fold(0u8, |a, &x| a.wrapping_add(x));
            b[511] = 0u8.wrapping_sub(sum);
            b
        }
    }

    impl ScsiDevice for AtaDrive {
        fn command(&mut self, cdb: &[u8], data: Data<'_>, _: u32) -> io::Result<Completion> {
            if cdb[0] != 0x85 {
                return Ok(invalid_opcode());
            }
            if std::mem::take(&mut self.pending_attention) {
                self.log.push("unit-attention");
                return Ok(unit_attention());
            }
            let protocol = (cdb[1] >> 1) & 0x0f;
            let cmd = cdb[14];
            let prepared = std::mem::take(&mut self.prepared);
            let ok = match (cmd, data) {
                (ATA_IDENTIFY, Data::In(buf)) => {
                    assert_eq!((protocol, cdb[2], cdb[6]), (4, 0x0e, 1));
                    self.log.push("identify");
                    buf.copy_from_slice(&self.identify());
                    true
                }
                (ATA_SECURITY_SET_PASSWORD, Data::Out(b)) => {
                    assert_eq!((protocol, cdb[2], cdb[6]), (5, 0x06, 1));
                    self.log.push("set-password");
                    if self.drops_writes {
                        return Ok(good());
                    }
                    // Word 0: bit 0 the user password, bit 8 level High.
                    let ok = self.supported
                        && !self.frozen
                        && !self.locked
                        && b[0] & 1 == 0
                        && b[1] & 1 == 0;
                    if ok {
                        self.password = Some(b[2..34].to_vec());
                    }
                    ok
                }
                (ATA_SECURITY_ERASE_PREPARE, Data::None) => {
                    assert_eq!((protocol, cdb[2]), (3, 0));
                    self.log.push("erase-prepare");
                    self.prepared = self.supported && !self.frozen;
                    self.prepared
                }
                (ATA_SECURITY_ERASE_UNIT, Data::Out(b)) => {
                    self.log.push("erase-unit");
                    if self.drops_writes {
                        return Ok(good());
                    }
                    let enhanced = b[0] & 0x02 != 0;
                    let aborts = self.erase_aborts > 0;
                    self.erase_aborts = self.erase_aborts.saturating_sub(1);
                    let ok = prepared
                        && !aborts
                        && (!enhanced || self.enhanced_supported)
                        && self.password.as_deref() == Some(&b[2..34]);
                    if ok {
                        self.erased = Some(if enhanced { "enhanced" } else { "normal" });
                        self.password = None;
                        self.locked = false;
                    }
                    ok
                }
                (ATA_SECURITY_DISABLE_PASSWORD, Data::Out(b)) => {
                    self.log.push("disable-password");
                    let ok = !self.fail_disable
                        && !self.locked
                        && self.password.as_deref() == Some(&b[2..34]);
                    if ok {
                        self.password = None;
                    }
                    ok
                }
                _ => panic!("unexpected ATA command 0x{cmd:02x}"),
            };
            Ok(if ok { good() } else { ata_aborted() })
        }
    }

    fn ata_drive() -> AtaDrive {
        AtaDrive {
            supported: true,
            enhanced_supported: true,
            serial: SERIAL,
            ..AtaDrive::default()
        }
    }

    fn run(dev: &mut dyn ScsiDevice) -> (Result<Option<PurgeMethod>, PurgeError>, Vec<String>) {
        run_with(dev, &expected())
    }

    /// [`purge_sd`] on `dev` as the disk `expected`; its outcome and notes.
    fn run_with(
        dev: &mut dyn ScsiDevice,
        expected: &Expected<'_>,
    ) -> (Result<Option<PurgeMethod>, PurgeError>, Vec<String>) {
        let mut notes = Vec::new();
        let r = purge_sd(
            dev,
            expected,
            &path(),
            &RunControl::new(),
            Duration::ZERO,
            &mut notes,
        );
        (r, notes)
    }

    const SEQUENCE: [&str; 6] = [
        "identify",
        "set-password",
        "identify",
        "erase-prepare",
        "erase-unit",
        "identify",
    ];

    #[test]
    fn an_ata_drive_is_erased_under_a_password_that_is_gone_after() {
        let mut d = ata_drive();
        let (r, notes) = run(&mut d);
        assert_eq!(r.unwrap(), Some(PurgeMethod::AtaSecurityErase), "{notes:?}");
        assert_eq!(d.erased, Some("enhanced"));
        assert!(d.password.is_none());
        assert_eq!(d.log, SEQUENCE);
        assert!(
            notes[0].contains("(enhanced)") && notes[0].contains("estimates 4 min"),
            "{notes:?}"
        );

        let mut d = AtaDrive {
            enhanced_supported: false,
            ..ata_drive()
        };
        let (r, notes) = run(&mut d);
        assert_eq!(r.unwrap(), Some(PurgeMethod::AtaSecurityErase));
        assert_eq!(d.erased, Some("normal"));
        assert!(
            notes[0].contains("estimates 60 min") && notes[0].contains("allowed 120 min"),
            "{notes:?}"
        );
    }

    #[test]
    fn a_drive_that_cannot_be_erased_safely_is_not_touched() {
        for (d, why) in [
            (
                AtaDrive {
                    serial: SERIAL,
                    ..AtaDrive::default()
                },
                "does not support the Security feature set",
            ),
            (
                AtaDrive {
                    frozen: true,
                    ..ata_drive()
                },
                "frozen",
            ),
            (
                AtaDrive {
                    password: Some(b"someone else's".to_vec()),
                    ..ata_drive()
                },
                "already set",
            ),
            (
                AtaDrive {
                    password: Some(vec![1]),
                    locked: true,
                    ..ata_drive()
                },
                "locked",
            ),
            // A mirror's member behind an enclosure, or any drive but the one approved.
            (
                AtaDrive {
                    serial: "OTHER-DRIVE",
                    ..ata_drive()
                },
                "serial \"OTHER-DRIVE\"",
            ),
        ] {
            let mut d = d;
            let before = d.password.clone();
            let (r, notes) = run(&mut d);
            assert_eq!(r.unwrap(), None);
            assert!(
                notes.len() == 1 && notes[0].contains(why),
                "{why}: {notes:?}"
            );
            assert_eq!(d.log, ["identify"], "{why}: only asked");
            assert_eq!(d.password, before);
            assert!(d.erased.is_none());
        }
        // The disk's own size and serial must be known and agree.
        let mut d = ata_drive();
        let other_size = Expected {
            serial: Some(SERIAL),
            bytes: BYTES / 2,
        };
        let (r, notes) = run_with(&mut d, &other_size);
        assert_eq!(r.unwrap(), None);
        assert!(notes[0].contains("bytes"), "{notes:?}");
        let no_serial = Expected {
            serial: None,
            bytes: BYTES,
        };
        let (r, notes) = run_with(&mut d, &no_serial);
        assert_eq!(r.unwrap(), None);
        assert!(notes[0].contains("serial is not known"), "{notes:?}");
        assert!(d.erased.is_none() && d.password.is_none());
    }

    #[test]
    fn the_serial_compares_as_udev_writes_it() {
        assert_eq!(udev_serial("  AB12 CD34  "), "AB12_CD34");
        assert_eq!(udev_serial("AB12  CD/34"), "AB12_CD_34");
        let mut d = AtaDrive {
            serial: "AB12 CD34",
            ..ata_drive()
        };
        let udev = Expected {
            serial: Some("AB12_CD34"),
            bytes: BYTES,
        };
        let (r, notes) = run_with(&mut d, &udev);
        assert_eq!(r.unwrap(), Some(PurgeMethod::AtaSecurityErase), "{notes:?}");
    }

    #[test]
    fn a_timed_out_erase_is_not_sent_again() {
        struct TimesOut(AtaDrive);
        impl ScsiDevice for TimesOut {
            fn command(&mut self, cdb: &[u8], data: Data<'_>, t: u32) -> io::Result<Completion> {
                if cdb[0] == 0x85 && cdb[14] == ATA_SECURITY_ERASE_UNIT {
                    self.0.log.push("erase-unit");
                    self.0.prepared = false;
                    return Ok(Completion {
                        host_status: 0x03,
                        ..good()
                    });
                }
                self.0.command(cdb, data, t)
            }
        }
        let mut d = TimesOut(ata_drive());
        let (r, notes) = run(&mut d);
        assert_eq!(r.unwrap(), None);
        assert_eq!(
            d.0.log.iter().filter(|&&c| c == "erase-unit").count(),
            1,
            "{notes:?}"
        );
        assert!(
            notes[0].contains("timed out") && !notes[0].contains("sent again"),
            "{notes:?}"
        );
        assert!(d.0.password.is_none(), "the password is removed after it");
    }

    #[test]
    fn a_failed_erase_removes_the_password_and_lets_purge_go_on() {
        let mut d = AtaDrive {
            erase_aborts: u32::MAX,
            ..ata_drive()
        };
        let (r, notes) = run(&mut d);
        assert_eq!(r.unwrap(), None);
        assert!(d.password.is_none() && d.erased.is_none());
        assert_eq!(
            d.log,
            [
                "identify",
                "set-password",
                "identify",
                "erase-prepare",
                "erase-unit",
                "erase-prepare",
                "erase-unit",
                "disable-password",
                "identify"
            ]
        );
        assert!(
            notes[0].contains("ERASE UNIT (enhanced)")
                && notes[0].contains("ATA status 0x51 error 0x04 (the drive aborted the command)")
                && notes[0].contains("sent again"),
            "{notes:?}"
        );
        assert!(notes.last().unwrap().contains("was removed"), "{notes:?}");

        // One refusal (a command came between PREPARE and UNIT): the pair again erases.
        let mut d = AtaDrive {
            erase_aborts: 1,
            ..ata_drive()
        };
        let (r, notes) = run(&mut d);
        assert_eq!(r.unwrap(), Some(PurgeMethod::AtaSecurityErase), "{notes:?}");
        assert_eq!(d.erased, Some("enhanced"));
    }

    #[test]
    fn a_bridge_that_drops_the_commands_is_not_taken_at_its_word() {
        let mut d = AtaDrive {
            drops_writes: true,
            ..ata_drive()
        };
        let (r, notes) = run(&mut d);
        assert_eq!(r.unwrap(), None);
        assert_eq!(d.log, ["identify", "set-password", "identify"]);
        assert!(notes[0].contains("did not reach the drive"), "{notes:?}");

        // The password reached the drive but the erase did not: not an erase.
        struct EraseDropped(AtaDrive);
        impl ScsiDevice for EraseDropped {
            fn command(&mut self, cdb: &[u8], data: Data<'_>, t: u32) -> io::Result<Completion> {
                if cdb[0] == 0x85 && cdb[14] == ATA_SECURITY_ERASE_UNIT {
                    self.0.log.push("erase-unit");
                    return Ok(good());
                }
                self.0.command(cdb, data, t)
            }
        }
        let mut d = EraseDropped(ata_drive());
        let (r, notes) = run(&mut d);
        assert_eq!(r.unwrap(), None);
        assert!(d.0.password.is_none() && d.0.erased.is_none());
        assert_eq!(&d.0.log[..6], SEQUENCE);
        assert_eq!(&d.0.log[6..], ["disable-password", "identify"]);
        assert!(notes[0].contains("the erase did not run"), "{notes:?}");
    }

    #[test]
    fn a_unit_attention_is_asked_again_not_taken_for_a_scsi_drive() {
        let mut d = AtaDrive {
            pending_attention: true,
            ..ata_drive()
        };
        let (r, notes) = run(&mut d);
        assert_eq!(r.unwrap(), Some(PurgeMethod::AtaSecurityErase), "{notes:?}");
        assert_eq!(d.log[..2], ["unit-attention", "identify"]);
    }

    #[test]
    fn a_password_that_cannot_be_removed_stops_purge_with_the_way_to_remove_it() {
        let mut d = AtaDrive {
            erase_aborts: u32::MAX,
            fail_disable: true,
            ..ata_drive()
        };
        let (r, _) = run(&mut d);
        let err = r.unwrap_err();
        let e = err.to_string();
        assert!(d.password.is_some());
        assert!(
            e.contains(&format!(
                "hdparm --user-master u --security-disable {ERASE_PASSWORD} /dev/sdz"
            )) && e.contains("locks at its next power-up")
                && e.contains("SECURITY DISABLE PASSWORD failed: "),
            "{e}"
        );
        // The refusal the drive gave is kept as the source, not only as text.
        let source = std::error::Error::source(&err).map(|s| s.to_string());
        assert!(
            source.is_some_and(|s| e.contains(&s)),
            "{e}: expected the drive's refusal as the source"
        );
    }

    /// A SCSI drive with SANITIZE (SBC-4 4.11): `support` is what it answers to REPORT
    /// SUPPORTED OPERATION CODES per service action (None: it does not have that command).
    /// While a sanitize runs, REQUEST SENSE gives NOT READY 04h/1Bh with the progress and
    /// TEST UNIT READY the same as a CHECK CONDITION; after a failed one, MEDIUM ERROR
    /// 31h/03h to every medium command, and REQUEST SENSE may say nothing.
    struct ScsiDrive {
        support: Option<[bool; 2]>,
        has_sanitize: bool,
        polls_left: u32,
        fail: bool,
        /// REQUEST SENSE first reports a unit attention (the sanitize changed the medium).
        attention_first: bool,
        /// REQUEST SENSE answers NO SENSE even while the sanitize runs; only TEST UNIT
        /// READY tells.
        quiet_sense: bool,
        started: Vec<u8>,
        polls: u32,
        turs: u32,
    }

    impl ScsiDrive {
        fn state(&mut self) -> Vec<u8> {
            if self.polls_left > 0 {
                self.polls_left -= 1;
                fixed(
                    KEY_NOT_READY,
                    0x04,
                    0x1B,
                    Some((65536 / (self.polls_left + 2)) as u16),
                )
            } else if self.fail {
                fixed(KEY_MEDIUM_ERROR, 0x31, 0x03, None)
            } else {
                fixed(KEY_NO_SENSE, 0, 0, None)
            }
        }
    }

    impl ScsiDevice for ScsiDrive {
        fn command(&mut self, cdb: &[u8], data: Data<'_>, _: u32) -> io::Result<Completion> {
            match (cdb[0], data) {
                (0xA3, Data::In(buf)) => {
                    assert_eq!((cdb[1], cdb[2], cdb[3]), (0x0c, 0x03, SANITIZE));
                    let Some(s) = self.support else {
                        return Ok(invalid_opcode());
                    };
                    let sa = u16::from_be_bytes([cdb[4], cdb[5]]);
                    buf[1] = if s[(sa - 2) as usize] { 0b011 } else { 0b001 };
                    Ok(good())
                }
                (SANITIZE, Data::None) => {
                    if !self.has_sanitize {
                        return Ok(invalid_opcode());
                    }
                    assert_eq!(cdb[1] & 0xe0, 0xa0, "IMMED and AUSE");
                    let sa = cdb[1] & 0x1f;
                    if self.support.is_some_and(|s| !s[(sa - 2) as usize]) {
                        return Ok(check_condition(fixed(KEY_ILLEGAL_REQUEST, 0x24, 0, None)));
                    }
                    self.started.push(sa);
                    Ok(good())
                }
                (0x03, Data::In(buf)) => {
                    self.polls += 1;
                    let s = if std::mem::take(&mut self.attention_first) {
                        fixed(KEY_UNIT_ATTENTION, 0x2A, 0x09, None)
                    } else if self.quiet_sense {
                        fixed(KEY_NO_SENSE, 0, 0, None)
                    } else {
                        self.state()
                    };
                    buf[..s.len()].copy_from_slice(&s);
                    Ok(Completion {
                        resid: (buf.len() - s.len()) as i32,
                        ..good()
                    })
                }
                (0x00, Data::None) => {
                    self.turs += 1;
                    let s = self.state();
                    Ok(if s[2] == KEY_NO_SENSE {
                        good()
                    } else {
                        check_condition(s)
                    })
                }
                (0x85, _) => Ok(invalid_opcode()),
                (op, _) => panic!("unexpected opcode 0x{op:02x}"),
            }
        }
    }

    fn scsi_drive() -> ScsiDrive {
        ScsiDrive {
            support: Some([true, true]),
            has_sanitize: true,
            polls_left: 3,
            fail: false,
            attention_first: false,
            quiet_sense: false,
            started: Vec::new(),
            polls: 0,
            turs: 0,
        }
    }

    fn run_scsi(
        d: &mut ScsiDrive,
        control: &RunControl,
    ) -> (Result<Option<PurgeMethod>, PurgeError>, Vec<String>) {
        let mut notes = Vec::new();
        let r = purge_scsi(d, &path(), control, Duration::ZERO, &mut notes);
        (r, notes)
    }

    #[test]
    fn a_scsi_drive_is_sanitized_and_followed_to_the_end() {
        let mut d = scsi_drive();
        let (r, notes) = run(&mut d);
        assert_eq!(r.unwrap(), Some(PurgeMethod::ScsiSanitize), "{notes:?}");
        assert_eq!(d.started, [SA_BLOCK_ERASE]);
        assert_eq!(
            (d.polls, d.turs),
            (4, 1),
            "three polls in progress, one done, confirmed"
        );
        assert!(notes[0].contains("block erase"), "{notes:?}");

        // Block erase not offered: cryptographic erase.
        let mut d = ScsiDrive {
            support: Some([false, true]),
            ..scsi_drive()
        };
        let (r, notes) = run_scsi(&mut d, &RunControl::new());
        assert_eq!(r.unwrap(), Some(PurgeMethod::ScsiSanitize));
        assert_eq!(d.started, [SA_CRYPTO_ERASE]);
        assert!(
            notes[0].contains("(block erase): not supported"),
            "{notes:?}"
        );

        // A unit attention first is not the end; nor is a REQUEST SENSE that says
        // nothing while TEST UNIT READY says the sanitize runs.
        for mut d in [
            ScsiDrive {
                attention_first: true,
                ..scsi_drive()
            },
            ScsiDrive {
                quiet_sense: true,
                ..scsi_drive()
            },
        ] {
            let (r, notes) = run_scsi(&mut d, &RunControl::new());
            assert_eq!(r.unwrap(), Some(PurgeMethod::ScsiSanitize), "{notes:?}");
            assert_eq!(d.polls_left, 0, "waited to the end");
        }
    }

    #[test]
    fn a_scsi_drive_without_sanitize_is_left_to_the_next_method() {
        // No REPORT SUPPORTED OPERATION CODES either: SANITIZE is tried, once.
        let mut d = ScsiDrive {
            support: None,
            has_sanitize: false,
            ..scsi_drive()
        };
        let (r, notes) = run_scsi(&mut d, &RunControl::new());
        assert_eq!(r.unwrap(), None);
        assert!(d.started.is_empty());
        assert_eq!(notes.len(), 2, "{notes:?}");
        assert!(
            notes[0].contains("invalid command operation code"),
            "{notes:?}"
        );
        // Said to support neither: not sent at all.
        let mut d = ScsiDrive {
            support: Some([false, false]),
            ..scsi_drive()
        };
        let (r, notes) = run_scsi(&mut d, &RunControl::new());
        assert_eq!(r.unwrap(), None);
        assert!(d.started.is_empty());
        assert_eq!(notes.len(), 3, "{notes:?}");
    }

    #[test]
    fn a_failed_or_stopped_sanitize_says_so() {
        // Failed, whether REQUEST SENSE says it or only TEST UNIT READY.
        for quiet_sense in [false, true] {
            let mut d = ScsiDrive {
                fail: true,
                quiet_sense,
                ..scsi_drive()
            };
            let e = run_scsi(&mut d, &RunControl::new()).0.unwrap_err();
            assert!(matches!(e, PurgeError::ScsiSanitizeFailed { .. }), "{e}");
            assert!(e.to_string().contains("sg_sanitize --early"), "{e}");
        }

        let control = RunControl::new();
        control.stop();
        let mut d = scsi_drive();
        let e = run_scsi(&mut d, &control).0.unwrap_err();
        assert!(matches!(e, PurgeError::Stopped { .. }), "{e}");
        assert!(d.started.is_empty(), "a stopped purge starts nothing");
    }

    #[test]
    fn a_file_is_not_a_scsi_device() {
        let f = tempfile::tempfile().unwrap();
        let mut dev = &f;
        let (r, notes) = run(&mut dev);
        assert_eq!(r.unwrap(), None);
        assert!(
            notes[0].contains("SG_IO failed") && notes[0].contains("not tried"),
            "{notes:?}"
        );
    }

    #[test]
    fn sense_data_reads_in_both_formats() {
        let s = Sense::parse(&fixed(KEY_NOT_READY, 0x04, 0x1B, Some(0x8000))).unwrap();
        assert!(s.sanitize_in_progress());
        assert_eq!(s.progress, Some(0x8000));
        for c in [ata_aborted(), ata_aborted_descriptor()] {
            let s = Sense::parse(&c.sense).unwrap();
            assert_eq!((s.key, s.asc, s.ascq), (KEY_ABORTED_COMMAND, 0, 0));
            assert_eq!(s.ata_registers(), Some((0x04, 0x51)));
            assert!(describe_as(&c, true)
                .contains("ATA status 0x51 error 0x04 (the drive aborted the command)"));
        }
        // The fixed format's information field is an LBA for a SCSI command.
        assert!(!describe(&ata_aborted()).contains("ATA status"));
        // Descriptor format with a progress descriptor.
        let mut d = vec![
            0x72,
            KEY_NOT_READY,
            0x04,
            0x1B,
            0,
            0,
            0,
            8,
            0x02,
            0x06,
            0,
            0,
            0x80,
            0x40,
            0x00,
            0,
        ];
        let s = Sense::parse(&d).unwrap();
        assert_eq!(s.progress, Some(0x4000));
        // A descriptor length past the data is cut, not read past.
        d[9] = 0xff;
        assert!(Sense::parse(&d).is_some());
        assert_eq!(Sense::parse(&[0x70, 0]), None);
        assert_eq!(Sense::parse(&[0x00; 18]), None);
        let timed_out = Completion {
            host_status: 3,
            ..good()
        };
        assert!(describe(&timed_out).contains("timed out"));
    }

    #[test]
    fn identify_data_is_checked_before_it_is_believed() {
        let d = ata_drive();
        let mut b = d.identify();
        let id = parse_identify(&b).unwrap();
        assert!(id.supported && id.enhanced && !id.enabled && !id.frozen);
        assert_eq!((id.erase_minutes, id.enhanced_minutes), (Some(60), Some(4)));
        assert_eq!(id.serial.as_deref(), Some(SERIAL));
        assert_eq!(id.capacity, Some(BYTES));
        b[100] ^= 1;
        let e = parse_identify(&b).unwrap_err();
        assert!(matches!(e, IdentifyDataError::Checksum { .. }), "{e}");
        assert!(e.to_string().contains("checksum"), "{e}");
        let e = parse_identify(&[0u8; 512]).unwrap_err();
        assert_eq!(e, IdentifyDataError::Zeros);
        assert!(e.to_string().contains("zeros"), "{e}");
        let mut atapi = [0u8; 512];
        atapi[1] = 0x85;
        let e = parse_identify(&atapi).unwrap_err();
        assert_eq!(e, IdentifyDataError::Atapi);
        assert!(e.to_string().contains("ATAPI"), "{e}");
        assert_eq!(
            parse_identify(&b[..100]).unwrap_err().to_string(),
            "IDENTIFY DEVICE returned 100 bytes of 512"
        );
        // "More than 508 minutes" and its extended form bound nothing.
        assert_eq!(erase_minutes(0x00ff), None);
        assert_eq!(erase_minutes(0xffff), None);
        assert_eq!(erase_minutes(0x00fe), Some(508));
        assert_eq!(erase_minutes(0x8000), None);
        assert_eq!(erase_minutes(0), None);
        // The timeout: twice the estimate, at least 10 minutes; with none, the disk
        // written at 50 MB/s (a 20 TB disk: 111 hours), at most 7 days.
        let id = AtaIdentify {
            supported: true,
            serial: Some(SERIAL.into()),
            capacity: Some(BYTES),
            ..Default::default()
        };
        let p = ata_plan(
            &AtaIdentify {
                erase_minutes: Some(2),
                ..id.clone()
            },
            &expected(),
        )
        .unwrap();
        assert_eq!(p.timeout_ms, 600_000);
        let big = 20_000_000_000_000;
        let p = ata_plan(
            &AtaIdentify {
                capacity: Some(big),
                ..id.clone()
            },
            &Expected {
                serial: Some(SERIAL),
                bytes: big,
            },
        )
        .unwrap();
        assert_eq!(p.timeout_ms, 400_000 * 1000);
        // A 4 KiB-sector drive: words 117-118 give the sector in words.
        let mut b = d.identify();
        b[212] = 0x00;
        b[213] = 0x50; // word 106: valid, logical sector > 256 words
        b[234] = 0x00;
        b[235] = 0x08; // words 117-118: 2048 words
        b[510] = 0; // no checksum
        assert_eq!(parse_identify(&b).unwrap().capacity, Some(SECTORS * 4096));
    }

    #[test]
    fn the_errors_read_as_one_line_and_keep_their_source() {
        let e = AtaPlanError::CapacityMismatch {
            want: 1000,
            got: Some(500),
        };
        assert_eq!(
            e.to_string(),
            "the ATA drive answering has 500 bytes, the disk the safety gate approved 1000 bytes"
        );
        let e = AtaPlanError::SerialMismatch {
            want: "A1".into(),
            got: None,
        };
        assert_eq!(
            e.to_string(),
            "the ATA drive answering has serial none, the disk the safety gate approved \"A1\""
        );
        let e = check(Err(io::Error::from_raw_os_error(libc::ENOTTY)), true).unwrap_err();
        assert!(e.to_string().starts_with("SG_IO failed: "), "{e}");
        assert!(std::error::Error::source(&e).is_some(), "{e:?}");
        let e = check(Ok(ata_aborted()), true).unwrap_err();
        assert!(e.sense().is_some_and(|s| s.key == KEY_ABORTED_COMMAND));
        assert!(
            e.to_string()
                .contains("ATA status 0x51 error 0x04 (the drive aborted the command)"),
            "{e}"
        );
    }

    #[test]
    fn the_pass_through_commands_are_laid_out_as_sat_has_them() {
        let c = ata16(ATA_IDENTIFY, AtaProtocol::PioDataIn as u8);
        assert_eq!(
            c,
            [0x85, 0x08, 0x0e, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0xEC, 0]
        );
        let c = ata16(ATA_SECURITY_ERASE_PREPARE, AtaProtocol::NonData as u8);
        assert_eq!(c, [0x85, 0x06, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xF3, 0]);
        let c = ata16(ATA_SECURITY_ERASE_UNIT, AtaProtocol::PioDataOut as u8);
        assert_eq!(
            c,
            [0x85, 0x0a, 0x06, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0xF4, 0]
        );
        assert_eq!(
            sanitize_cdb(SA_BLOCK_ERASE),
            [0x48, 0xa2, 0, 0, 0, 0, 0, 0, 0, 0]
        );
        let b = password_block(true);
        assert_eq!(&b[..12], b"\x02\x00driveprobe");
    }
}
