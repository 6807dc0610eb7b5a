//! Protocol building blocks that write a whole target: purge (back to a fresh-out-of-box
//! state), fill (every block written once), and workload-independent preconditioning.
//!
//! # Purge
//!
//! Only on a target opened for writing, that is one the safety gate gave a
//! [`WritePermit`](crate::safety::WritePermit) for (for a block device: `--allow-destructive`
//! and a matching identity, not in use). What is done, in order of preference; each step
//! that fails or does not apply falls through to the next, and [`PurgeOutcome::notes`] says
//! why:
//!
//! * **File**: `fallocate(PUNCH_HOLE | KEEP_SIZE)` over the region (the filesystem frees
//!   the blocks), then `fallocate(0)` to allocate them again, so later writes do not pay
//!   for allocation. The file's size is unchanged and the region reads as zeros. Where the
//!   filesystem cannot punch holes, the region is overwritten with zeros instead.
//! * **Block device**, always the whole device:
//!   1. NVMe namespaces (not partitions of them): Sanitize (block erase, else crypto
//!      erase), waiting for it through the Sanitize Status log; else Format NVM with
//!      SES=1 (user data erase), keeping the namespace's LBA format. Both act beyond the
//!      namespace (Sanitize on the whole NVM subsystem, Format on every namespace when the
//!      controller's FNA says so), so they are used only when this namespace is the only
//!      active one of a single-controller subsystem.
//!   2. SCSI disks (`sd`, not partitions of them), see [`scsi`]: an ATA drive (behind
//!      libata, a SAS HBA or a SAT bridge) gets ATA SECURITY ERASE UNIT (enhanced when it
//!      has it) under a password set for the moment and removed after; a SCSI or SAS
//!      drive gets SCSI SANITIZE (block erase, else cryptographic erase).
//!   3. BLKSECDISCARD over the device, then BLKDISCARD.
//!   4. An overwrite of the device with zeros (1 MiB writes, O_DIRECT when the target is).
//!
//! A discard leaves it to the drive what discarded blocks read as; when a sample of them
//! does not read as zeros afterwards, the notes say so.
//!
//! # Fill and precondition
//!
//! [`fill`] writes the whole target once, sequentially in 128 KiB blocks of random data
//! (the protocol's "fill the drive, then test a 25% region"); [`precondition`] writes a
//! region sequentially `passes` times (SNIA PTS: twice the capacity). Both run on the
//! engine.

use std::fmt;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::engine::{
    self, EngineError, IntervalSummary, JobError, JobSpec, Pattern, RegionSpec, RunControl,
    RunResult, SizeMix, Stop,
};
use crate::sys::buf::SlotBuffers;
use crate::sys::{blk, nvme};
use crate::target::{Region, Target, TargetKind};

pub mod scsi;

/// Block size of fill and preconditioning writes.
pub const FILL_BLOCK: u32 = 128 << 10;
/// Queue depth of fill and preconditioning writes.
pub const FILL_DEPTH: u32 = 16;
/// Size of one overwrite write.
const OVERWRITE_CHUNK: usize = 1 << 20;
/// Slowest user-data erase a Format NVM is given time for, in bytes a second: as if the
/// drive overwrote the namespace at the speed of a small drive's worst sustained write
/// (an SSD's erase of NAND blocks is far faster).
const FORMAT_FLOOR_BYTES_PER_S: u64 = 50_000_000;
/// Least and most time a Format NVM is given.
const FORMAT_TIMEOUT_MIN_S: u64 = 60;
const FORMAT_TIMEOUT_MAX_S: u64 = 4 * 3600;

/// The command timeout of a Format NVM of `bytes`. The command is synchronous, and the
/// kernel acts only when it outlives its timeout: it looks for a completion it missed
/// (and finishes the command), else aborts it and resets the controller. So the timeout
/// covers the slowest erase ([`FORMAT_FLOOR_BYTES_PER_S`]), at least the kernel's own
/// admin timeout of a minute, and at most four hours; fitted to the size, a missed
/// completion on a small namespace costs a minute, not hours in an uninterruptible wait.
fn format_timeout_ms(bytes: u64) -> u32 {
    let s = (bytes / FORMAT_FLOOR_BYTES_PER_S).clamp(FORMAT_TIMEOUT_MIN_S, FORMAT_TIMEOUT_MAX_S);
    (s * 1000) as u32
}
/// Longest wait for a sanitize whose duration the drive does not estimate.
const SANITIZE_MAX_WAIT: Duration = Duration::from_secs(24 * 3600);

/// How a purge was done.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PurgeMethod {
    NvmeFormat,
    NvmeSanitize,
    AtaSecurityErase,
    ScsiSanitize,
    BlkSecDiscard,
    BlkDiscard,
    Overwrite,
    PunchHole,
}

impl PurgeMethod {
    pub fn name(self) -> &'static str {
        match self {
            PurgeMethod::NvmeFormat => "nvme-format",
            PurgeMethod::NvmeSanitize => "nvme-sanitize",
            PurgeMethod::AtaSecurityErase => "ata-security-erase",
            PurgeMethod::ScsiSanitize => "scsi-sanitize",
            PurgeMethod::BlkSecDiscard => "blksecdiscard",
            PurgeMethod::BlkDiscard => "blkdiscard",
            PurgeMethod::Overwrite => "overwrite",
            PurgeMethod::PunchHole => "punch-hole",
        }
    }
}

impl fmt::Display for PurgeMethod {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl Serialize for PurgeMethod {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

/// What [`purge`] did.
#[derive(Debug, Clone, Serialize)]
pub struct PurgeOutcome {
    pub method: PurgeMethod,
    /// Bytes purged (the region; the whole device for a block device).
    pub bytes: u64,
    pub seconds: f64,
    /// What was tried and did not work or did not apply, and anything worth knowing about
    /// the method used.
    pub notes: Vec<String>,
}

/// What [`fill`] did.
#[derive(Debug, Clone, Serialize)]
pub struct FillOutcome {
    pub bytes: u64,
    pub seconds: f64,
}

/// What [`precondition`] did.
#[derive(Debug, Clone, Serialize)]
pub struct PreconditionOutcome {
    pub passes: u32,
    pub bytes: u64,
    pub seconds: f64,
}

/// Progress of a fill or preconditioning, after every engine interval.
#[derive(Debug, Clone, Copy)]
pub struct WriteProgress<'a> {
    /// Bytes written so far, of `bytes_total`.
    pub bytes_done: u64,
    pub bytes_total: u64,
    /// The interval just ended (its bandwidth and latency).
    pub interval: &'a IntervalSummary,
}

/// Which whole-target write an error is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Writing {
    Fill,
    Precondition,
}

impl Writing {
    pub fn name(self) -> &'static str {
        match self {
            Writing::Fill => "fill",
            Writing::Precondition => "preconditioning",
        }
    }
}

impl fmt::Display for Writing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum PurgeError {
    #[error("{0}: the target is open read-only: {1} needs write permission from the safety gate (a write permit for this target)")]
    ReadOnly(PathBuf, &'static str),
    #[error("{path}: a block device is purged whole, but the region is bytes {start}..{end} of {size}: purge the whole device")]
    NotWholeDevice {
        path: PathBuf,
        start: u64,
        end: u64,
        size: u64,
    },
    #[error("{path}: the region (bytes {start}..{end}) is empty or reaches past the end of the target ({size} bytes)")]
    BadRegion {
        path: PathBuf,
        start: u64,
        end: u64,
        size: u64,
    },
    #[error("{path}: the region (bytes {start}..{end}) is not aligned to {align} bytes, as O_DIRECT writes need")]
    Misaligned {
        path: PathBuf,
        start: u64,
        end: u64,
        align: u64,
    },
    #[error("{path}: {what} failed: {source}")]
    Io {
        path: PathBuf,
        what: &'static str,
        source: std::io::Error,
    },
    #[error("{path}: overwriting with zeros failed at byte {offset}: {source}{}", tried_suffix(.tried))]
    Overwrite {
        path: PathBuf,
        offset: u64,
        source: std::io::Error,
        tried: Box<str>,
    },
    #[error("{path}: the NVMe sanitize failed (Sanitize Status 0x{sstat:04x}): the drive refuses I/O until a sanitize completes or its failure mode is exited (nvme sanitize --sanact=1)")]
    SanitizeFailed { path: PathBuf, sstat: u16 },
    #[error("{path}: the NVMe sanitize has not finished after {waited_s} s (progress {progress_pct:.1}%): it goes on inside the drive; check `nvme sanitize-log`")]
    SanitizeTimeout {
        path: PathBuf,
        waited_s: u64,
        progress_pct: f64,
    },
    #[error("{path}: cannot follow the NVMe sanitize: reading the Sanitize Status log failed: {source}; it goes on inside the drive, check `nvme sanitize-log`")]
    SanitizeLog {
        path: PathBuf,
        source: nvme::AdminError,
    },
    #[error("{path}: the ATA user password driveprobe set for the erase could not be removed ({why}{}): the drive locks at its next power-up; remove it now with `hdparm --user-master u --security-disable driveprobe {path}`", cause_text(.cause))]
    AtaPasswordLeft {
        path: PathBuf,
        why: Box<str>,
        /// The command's or the IDENTIFY's error, when one failed.
        #[source]
        cause: Option<Box<dyn std::error::Error + Send + Sync>>,
    },
    #[error("{path}: the SCSI sanitize failed (sense 31h/03h): the drive refuses reads and writes until a sanitize completes or it is told to exit failure mode (sg_sanitize --early)")]
    ScsiSanitizeFailed { path: PathBuf },
    #[error("{path}: the SCSI sanitize has not finished after {waited_s} s (progress {progress_pct:.1}%): it goes on inside the drive; follow it with `sg_requests --progress`")]
    ScsiSanitizeTimeout {
        path: PathBuf,
        waited_s: u64,
        progress_pct: f64,
    },
    #[error("{path}: cannot follow the SCSI sanitize: REQUEST SENSE failed ({why}); it goes on inside the drive, follow it with `sg_requests --progress`")]
    ScsiSanitizeLost { path: PathBuf, why: String },
    #[error("{path}: {what} stopped by request after {bytes} bytes")]
    Stopped {
        path: PathBuf,
        what: &'static str,
        bytes: u64,
    },
    #[error("{path}: {what} hit {count} I/O error(s), the first at byte {offset}: {message}")]
    IoErrors {
        path: PathBuf,
        what: Writing,
        count: u64,
        offset: u64,
        message: &'static str,
    },
    #[error("{path}: {what} wrote {wrote} bytes of {want}: {reason}")]
    Short {
        path: PathBuf,
        what: Writing,
        wrote: u64,
        want: u64,
        reason: Box<str>,
    },
    #[error("{path}: {what} needs at least {need} bytes, the region has {have}")]
    TooSmall {
        path: PathBuf,
        what: &'static str,
        need: u64,
        have: u64,
    },
    #[error("preconditioning needs at least one pass")]
    NoPasses,
    #[error(transparent)]
    Job(#[from] JobError),
    #[error(transparent)]
    Engine(Box<EngineError>),
}

/// `: CAUSE` after a reason, when it has one.
fn cause_text(cause: &Option<Box<dyn std::error::Error + Send + Sync>>) -> String {
    cause.as_ref().map_or(String::new(), |c| format!(": {c}"))
}

impl From<EngineError> for PurgeError {
    fn from(e: EngineError) -> Self {
        PurgeError::Engine(Box::new(e))
    }
}

fn tried_suffix(tried: &str) -> String {
    if tried.is_empty() {
        String::new()
    } else {
        format!(" (tried before: {tried})")
    }
}

/// Purges `region` of `target`; see the module documentation. Blocks until done.
pub fn purge(target: &Target, region: Region) -> Result<PurgeOutcome, PurgeError> {
    purge_with(target, region, &RunControl::new())
}

/// [`purge`], stoppable through `control` while it overwrites or waits for a sanitize (a
/// sanitize, once started, goes on inside the drive).
pub fn purge_with(
    target: &Target,
    region: Region,
    control: &RunControl,
) -> Result<PurgeOutcome, PurgeError> {
    let path = target.path().to_path_buf();
    if !target.writable() {
        return Err(PurgeError::ReadOnly(path, "purge"));
    }
    let end = region.start.saturating_add(region.len);
    if region.len == 0 || end > target.size() {
        return Err(PurgeError::BadRegion {
            path,
            start: region.start,
            end,
            size: target.size(),
        });
    }
    let t0 = Instant::now();
    let mut notes = Vec::new();
    let method = match target.kind() {
        TargetKind::File => purge_file(target, region, control, &mut notes)?,
        TargetKind::BlockDevice { device } => {
            if region.start != 0 || region.len != target.size() {
                return Err(PurgeError::NotWholeDevice {
                    path,
                    start: region.start,
                    end,
                    size: target.size(),
                });
            }
            purge_block(target, device, control, &mut notes)?
        }
    };
    Ok(PurgeOutcome {
        method,
        bytes: region.len,
        seconds: t0.elapsed().as_secs_f64(),
        notes,
    })
}

fn purge_file(
    target: &Target,
    region: Region,
    control: &RunControl,
    notes: &mut Vec<String>,
) -> Result<PurgeMethod, PurgeError> {
    use rustix::fs::{fallocate, FallocateFlags};
    use rustix::io::Errno;
    let file: &File = target.file();
    let unsupported = |e: Errno| e == Errno::OPNOTSUPP || e == Errno::NOSYS;
    match fallocate(
        file,
        FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE,
        region.start,
        region.len,
    ) {
        Ok(()) => {}
        Err(e) if unsupported(e) => {
            notes.push(format!(
                "the filesystem cannot punch holes ({}): overwrote the region with zeros instead",
                std::io::Error::from(e)
            ));
            overwrite(target, region, control, notes)?;
            return Ok(PurgeMethod::Overwrite);
        }
        Err(e) => {
            return Err(PurgeError::Io {
                path: target.path().to_path_buf(),
                what: "punching a hole (fallocate PUNCH_HOLE)",
                source: e.into(),
            })
        }
    }
    match fallocate(file, FallocateFlags::empty(), region.start, region.len) {
        Ok(()) => {}
        Err(e) if unsupported(e) => notes.push(format!(
            "the filesystem cannot preallocate ({}): the region stays a hole (reads as zeros), \
             and the first writes to it allocate blocks",
            std::io::Error::from(e)
        )),
        Err(e) => {
            return Err(PurgeError::Io {
                path: target.path().to_path_buf(),
                what: "reallocating the punched region (fallocate)",
                source: e.into(),
            })
        }
    }
    Ok(PurgeMethod::PunchHole)
}

/// Which drive commands a block device takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Family {
    /// An NVMe namespace (`nvme*`).
    Nvme,
    /// A SCSI disk (`sd*`): SCSI, SAS, or ATA behind libata or a SAT bridge.
    Scsi,
    Other,
}

/// Why ATA SECURITY ERASE and SCSI SANITIZE must not be sent to the SCSI disk `device`,
/// if they must not: a RAID controller's logical drive (an erase would reach physical
/// drives that other logical drives may share, as the controller's firmware decides), or
/// a disk behind a USB bridge (which may reset during an erase of hours, leaving the drive
/// locked or half erased, and may pass the command to one drive of a mirror).
fn scsi_refusal(
    device: &crate::device::BlockDeviceInfo,
    paths: &crate::device::SystemPaths,
) -> Option<String> {
    use crate::device::{scsi_attachment, RAID_HOST_DRIVERS};
    let at = scsi_attachment(paths, &device.name);
    let logical_volume = device
        .identity
        .model
        .as_deref()
        .is_some_and(|m| m.to_ascii_lowercase().contains("logical volume"));
    match at.host_driver.as_deref() {
        _ if at.usb => Some("the disk is behind a USB bridge".into()),
        Some(d) if RAID_HOST_DRIVERS.contains(&d) => Some(format!(
            "the disk is a logical drive of a RAID controller (driver {d})"
        )),
        _ if logical_volume => Some("the disk is a RAID logical volume (its model says so)".into()),
        None => Some(
            "sysfs does not say which SCSI host the disk is on, so it may be a RAID \
             controller's logical drive"
                .into(),
        ),
        Some(_) => None,
    }
}

fn purge_block(
    target: &Target,
    device: &crate::device::BlockDeviceInfo,
    control: &RunControl,
    notes: &mut Vec<String>,
) -> Result<PurgeMethod, PurgeError> {
    let file: &File = target.file();
    let size = target.size();
    let family = if device.name.starts_with("nvme") {
        Family::Nvme
    } else if device.name.starts_with("sd") {
        Family::Scsi
    } else {
        Family::Other
    };
    let drive_erase = match (family, device.is_partition) {
        (Family::Nvme, true) => {
            notes.push(
                "a partition of an NVMe namespace: NVMe Format and Sanitize would erase the \
                 whole namespace, so they are not used"
                    .into(),
            );
            None
        }
        (Family::Nvme, false) => purge_nvme(target, control, notes)?,
        (Family::Scsi, true) => {
            notes.push(
                "a partition of a SCSI disk: ATA SECURITY ERASE and SCSI SANITIZE would erase \
                 the whole disk, so they are not used"
                    .into(),
            );
            None
        }
        (Family::Scsi, false) => match scsi_refusal(device, &crate::device::SystemPaths::default())
        {
            Some(why) => {
                notes.push(format!(
                    "ATA SECURITY ERASE and SCSI SANITIZE: {why}: not used"
                ));
                None
            }
            None => {
                let expected = scsi::Expected {
                    serial: device.identity.serial.as_deref(),
                    bytes: size,
                };
                let mut dev = file;
                scsi::purge_sd(
                    &mut dev,
                    &expected,
                    target.path(),
                    control,
                    Duration::from_secs(1),
                    notes,
                )?
            }
        },
        (Family::Other, _) => None,
    };
    if let Some(m) = drive_erase {
        if let Err(e) = blk::flush_buffers(file) {
            notes.push(format!(
                "dropping the page cache (BLKFLSBUF) failed: {e}: buffered readers may see \
                 stale data"
            ));
        }
        return Ok(m);
    }
    match blk::secure_discard(file, 0, size) {
        Ok(()) => {
            check_discarded(target, "BLKSECDISCARD", notes);
            return Ok(PurgeMethod::BlkSecDiscard);
        }
        Err(e) => notes.push(format!("BLKSECDISCARD: {e}")),
    }
    match blk::discard(file, 0, size) {
        Ok(()) => {
            check_discarded(target, "BLKDISCARD", notes);
            return Ok(PurgeMethod::BlkDiscard);
        }
        Err(e) => notes.push(format!("BLKDISCARD: {e}")),
    }
    overwrite(
        target,
        Region {
            start: 0,
            len: size,
        },
        control,
        notes,
    )?;
    Ok(PurgeMethod::Overwrite)
}

/// Reads a few blocks of a discarded device and notes when they are not zeros: the drive
/// unmapped them, but what they read as is up to it.
fn check_discarded(target: &Target, what: &str, notes: &mut Vec<String>) {
    let bs = target.align().max(4096);
    let size = target.size();
    if size < bs {
        return;
    }
    let mut buf = SlotBuffers::new(1, bs as usize);
    let last = (size - bs) / bs * bs;
    let mut nonzero = Vec::new();
    for off in [0, last / 2 / bs * bs, last] {
        let b = &mut buf.slot_mut(0)[..bs as usize];
        match target.file().read_exact_at(b, off) {
            Ok(()) if b.iter().any(|&x| x != 0) => nonzero.push(off),
            Ok(()) => {}
            Err(e) => {
                notes.push(format!("reading back after {what} failed: {e}"));
                return;
            }
        }
    }
    if !nonzero.is_empty() {
        notes.push(format!(
            "after {what}, blocks at bytes {nonzero:?} still read as non-zero data: the device \
             accepted the discard but does not return zeros for discarded blocks (the data may \
             still be there)"
        ));
    }
}

/// Overwrites `region` with zeros, 1 MiB at a time, then flushes.
fn overwrite(
    target: &Target,
    region: Region,
    control: &RunControl,
    notes: &[String],
) -> Result<(), PurgeError> {
    let path = target.path().to_path_buf();
    let align = target.align().max(1);
    let end = region.start + region.len;
    if target.direct() && (region.start % align != 0 || region.len % align != 0) {
        return Err(PurgeError::Misaligned {
            path,
            start: region.start,
            end,
            align,
        });
    }
    let file: &File = target.file();
    let buf = SlotBuffers::new(1, OVERWRITE_CHUNK);
    let zeros = &buf.slot(0)[..OVERWRITE_CHUNK];
    let mut off = region.start;
    while off < end {
        if control.is_stopped() {
            return Err(PurgeError::Stopped {
                path,
                what: "purge (overwrite with zeros)",
                bytes: off - region.start,
            });
        }
        let n = (end - off).min(OVERWRITE_CHUNK as u64) as usize;
        // Within the run's write limit, as the engine's writes are: room first.
        if !control.reserve_write(n as u64) {
            return Err(PurgeError::Stopped {
                path,
                what: "purge (overwrite with zeros)",
                bytes: off - region.start,
            });
        }
        file.write_all_at(&zeros[..n], off)
            .map_err(|source| PurgeError::Overwrite {
                path: path.clone(),
                offset: off,
                source,
                tried: notes.join("; ").into(),
            })?;
        control.add_reserved_written(n as u64);
        off += n as u64;
    }
    file.sync_data().map_err(|source| PurgeError::Io {
        path,
        what: "flushing the overwrite (fdatasync)",
        source,
    })
}

// --- NVMe ---

/// What Identify Controller says about erasing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct NvmeCaps {
    /// Optional Admin Command Support (bytes 256-257); bit 1: Format NVM.
    oacs: u16,
    /// Controller Multi-Path I/O and Namespace Sharing Capabilities (byte 76); bit 1: the
    /// NVM subsystem may have two or more controllers.
    cmic: u8,
    /// Format NVM Attributes (byte 524): bit 0 a format applies to all namespaces, bit 1 a
    /// secure erase applies to all namespaces.
    fna: u8,
    /// Sanitize Capabilities (bytes 328-331): bit 0 crypto erase, 1 block erase,
    /// 2 overwrite.
    sanicap: u32,
}

impl NvmeCaps {
    fn parse(id_ctrl: &[u8]) -> Option<NvmeCaps> {
        if id_ctrl.len() < 4096 {
            return None;
        }
        Some(NvmeCaps {
            oacs: u16::from_le_bytes([id_ctrl[256], id_ctrl[257]]),
            cmic: id_ctrl[76],
            fna: id_ctrl[524],
            sanicap: u32::from_le_bytes(id_ctrl[328..332].try_into().ok()?),
        })
    }
}

/// Sanitize actions (SANACT).
const SANACT_BLOCK_ERASE: u32 = 2;
const SANACT_CRYPTO_ERASE: u32 = 4;
/// Allow Unrestricted Sanitize Exit: after a failure the host may exit failure mode.
const SANITIZE_AUSE: u32 = 1 << 3;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NvmeStep {
    /// Sanitize with this SANACT.
    Sanitize(u32),
    /// Format NVM with SES=1.
    Format,
}

/// Which NVMe erases to try, in order, for namespace `nsid`; `active` is the controller's
/// active namespace list (None when it could not be read). Notes say what is not tried.
fn nvme_plan(caps: &NvmeCaps, active: Option<&[u32]>, nsid: u32) -> (Vec<NvmeStep>, Vec<String>) {
    let mut steps = Vec::new();
    let mut notes = Vec::new();
    let multi_ctrl = caps.cmic & 0b10 != 0;
    // Erases that reach beyond this namespace are safe only when nothing else is there.
    let alone = match active {
        None => Err("the active namespace list could not be read".to_string()),
        Some(_) if multi_ctrl => Err(
            "the NVM subsystem may have other controllers (CMIC bit 1), whose namespaces this \
             host cannot see"
                .to_string(),
        ),
        Some(list) if list != [nsid] => Err(format!(
            "the controller has other active namespaces (active: {list:?}, this one: {nsid})"
        )),
        Some(_) => Ok(()),
    };
    let sanact = if caps.sanicap & 0b10 != 0 {
        Some((SANACT_BLOCK_ERASE, "block erase"))
    } else if caps.sanicap & 0b01 != 0 {
        Some((SANACT_CRYPTO_ERASE, "crypto erase"))
    } else {
        None
    };
    match (sanact, &alone) {
        (None, _) => notes.push(format!(
            "NVMe Sanitize: not supported (SANICAP 0x{:x} has neither block nor crypto erase)",
            caps.sanicap
        )),
        (Some((_, kind)), Err(why)) => notes.push(format!(
            "NVMe Sanitize ({kind}) erases the whole NVM subsystem and {why}: not used"
        )),
        (Some((a, _)), Ok(())) => steps.push(NvmeStep::Sanitize(a)),
    }
    if caps.oacs & 0b10 == 0 {
        notes.push(format!(
            "NVMe Format NVM: not supported (OACS 0x{:x}, bit 1 clear)",
            caps.oacs
        ));
    } else if caps.fna & 0b11 != 0 {
        match &alone {
            Ok(()) => steps.push(NvmeStep::Format),
            Err(why) => notes.push(format!(
                "NVMe Format NVM erases every namespace on this controller (FNA 0x{:x}) and \
                 {why}: not used",
                caps.fna
            )),
        }
    } else {
        steps.push(NvmeStep::Format);
    }
    (steps, notes)
}

/// Command dword 10 of a Format NVM that keeps the namespace's LBA format, metadata and
/// protection settings (Identify Namespace FLBAS byte 26, DPS byte 29) and erases user
/// data (SES=1).
fn format_cdw10(id_ns: &[u8]) -> u32 {
    let flbas = id_ns[26] as u32;
    let dps = id_ns[29] as u32;
    let lbaf_lo = flbas & 0xf;
    let mset = (flbas >> 4) & 1;
    let lbaf_hi = (flbas >> 5) & 0b11;
    let pi = dps & 0b111;
    let pil = (dps >> 3) & 1;
    let ses = 1;
    lbaf_lo | (mset << 4) | (pi << 5) | (pil << 8) | (ses << 9) | (lbaf_hi << 12)
}

/// The Sanitize Status log (81h): progress (SPROG, of 65536), status (SSTAT) and the
/// estimated seconds of a block and a crypto erase (None: no estimate).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct SanitizeStatus {
    sprog: u16,
    sstat: u16,
    est_block_erase: Option<u32>,
    est_crypto_erase: Option<u32>,
}

/// SSTAT bits 2:0.
const SSTAT_NEVER: u16 = 0;
const SSTAT_DONE: u16 = 1;
const SSTAT_IN_PROGRESS: u16 = 2;
const SSTAT_FAILED: u16 = 3;
const SSTAT_DONE_NO_DEALLOC: u16 = 4;

impl SanitizeStatus {
    fn parse(log: &[u8]) -> Option<SanitizeStatus> {
        if log.len() < 20 {
            return None;
        }
        let u32_at = |o: usize| u32::from_le_bytes(log[o..o + 4].try_into().unwrap());
        let est = |v: u32| (v != u32::MAX).then_some(v);
        Some(SanitizeStatus {
            sprog: u16::from_le_bytes([log[0], log[1]]),
            sstat: u16::from_le_bytes([log[2], log[3]]),
            est_block_erase: est(u32_at(12)),
            est_crypto_erase: est(u32_at(16)),
        })
    }
    fn state(&self) -> u16 {
        self.sstat & 0b111
    }
}

fn read_sanitize_status(file: &File) -> Result<SanitizeStatus, nvme::AdminError> {
    // 512 bytes since NVMe 2.0, 32 before; reading past a log's end may be refused.
    let log = match nvme::get_log_page(file, 0x81, nvme::NSID_ALL, 512) {
        Ok(l) => l,
        Err(nvme::AdminError::Status(_)) => nvme::get_log_page(file, 0x81, nvme::NSID_ALL, 32)?,
        Err(e) => return Err(e),
    };
    SanitizeStatus::parse(&log)
        .ok_or_else(|| nvme::AdminError::Os(std::io::ErrorKind::InvalidData.into()))
}

/// Tries NVMe Sanitize and Format NVM. Ok(None): neither applied or worked (see notes).
fn purge_nvme(
    target: &Target,
    control: &RunControl,
    notes: &mut Vec<String>,
) -> Result<Option<PurgeMethod>, PurgeError> {
    let file: &File = target.file();
    let nsid = match nvme::namespace_id(file) {
        Ok(n) => n,
        Err(e) => {
            notes.push(format!("NVMe: cannot get the namespace id: {e}"));
            return Ok(None);
        }
    };
    let caps = match nvme::identify(file, 1, 0).map(|b| NvmeCaps::parse(&b)) {
        Ok(Some(c)) => c,
        Ok(None) => {
            notes.push("NVMe: Identify Controller returned too little data".into());
            return Ok(None);
        }
        Err(e) => {
            notes.push(format!("NVMe: Identify Controller failed: {e}"));
            return Ok(None);
        }
    };
    let active = match nvme::identify(file, 2, 0) {
        Ok(b) => Some(
            b.chunks_exact(4)
                .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
                .take_while(|&n| n != 0)
                .collect::<Vec<_>>(),
        ),
        Err(e) => {
            notes.push(format!(
                "NVMe: reading the active namespace list failed: {e}"
            ));
            None
        }
    };
    let (steps, plan_notes) = nvme_plan(&caps, active.as_deref(), nsid);
    notes.extend(plan_notes);
    for step in steps {
        match step {
            NvmeStep::Sanitize(sanact) => {
                let cdw10 = sanact | SANITIZE_AUSE;
                match nvme::sanitize(file, cdw10, 0) {
                    Ok(()) => {
                        wait_sanitize(target, sanact, control)?;
                        notes.push(format!(
                            "NVMe Sanitize ({}) of the NVM subsystem (namespace {nsid} is its only one)",
                            if sanact == SANACT_BLOCK_ERASE {
                                "block erase"
                            } else {
                                "crypto erase"
                            }
                        ));
                        return Ok(Some(PurgeMethod::NvmeSanitize));
                    }
                    Err(e) => notes.push(format!("NVMe Sanitize: {e}")),
                }
            }
            NvmeStep::Format => {
                let id_ns = match nvme::identify(file, 0, nsid) {
                    Ok(b) => b,
                    Err(e) => {
                        notes.push(format!(
                            "NVMe Format NVM: not used, Identify Namespace failed ({e}) so the \
                             LBA format to keep is unknown"
                        ));
                        continue;
                    }
                };
                let cdw10 = format_cdw10(&id_ns);
                let timeout_ms = format_timeout_ms(target.size());
                match nvme::format_nvm(file, nsid, cdw10, timeout_ms) {
                    Ok(()) => {
                        notes.push(format!(
                            "NVMe Format NVM of namespace {nsid} with SES=1 (user data erase), \
                             LBA format {} kept (CDW10 0x{cdw10:x})",
                            (cdw10 & 0xf) | ((cdw10 >> 12 & 0b11) << 4)
                        ));
                        return Ok(Some(PurgeMethod::NvmeFormat));
                    }
                    Err(e) => notes.push(format!("NVMe Format NVM (SES=1): {e}")),
                }
            }
        }
    }
    Ok(None)
}

/// Polls the Sanitize Status log until the sanitize just started is done.
fn wait_sanitize(target: &Target, sanact: u32, control: &RunControl) -> Result<(), PurgeError> {
    let path = target.path().to_path_buf();
    let file: &File = target.file();
    let t0 = Instant::now();
    let mut seen_running = false;
    let mut limit = SANITIZE_MAX_WAIT;
    let mut log_errors = 0;
    loop {
        std::thread::sleep(Duration::from_millis(if seen_running { 1000 } else { 200 }));
        let st = match read_sanitize_status(file) {
            Ok(s) => s,
            Err(source) => {
                log_errors += 1;
                if log_errors >= 5 {
                    return Err(PurgeError::SanitizeLog { path, source });
                }
                continue;
            }
        };
        let est = if sanact == SANACT_BLOCK_ERASE {
            st.est_block_erase
        } else {
            st.est_crypto_erase
        };
        if let Some(s) = est {
            limit = Duration::from_secs((s as u64 * 3).max(600)).min(SANITIZE_MAX_WAIT);
        }
        match st.state() {
            SSTAT_IN_PROGRESS => seen_running = true,
            // The log may still show an earlier sanitize for a moment after the command
            // completes: trust "done" once this one was seen running, or after a while.
            SSTAT_DONE | SSTAT_DONE_NO_DEALLOC
                if seen_running || t0.elapsed() > Duration::from_secs(3) =>
            {
                return Ok(())
            }
            SSTAT_FAILED if seen_running || t0.elapsed() > Duration::from_secs(3) => {
                return Err(PurgeError::SanitizeFailed {
                    path,
                    sstat: st.sstat,
                })
            }
            SSTAT_NEVER if t0.elapsed() > Duration::from_secs(30) => {
                return Err(PurgeError::SanitizeTimeout {
                    path,
                    waited_s: t0.elapsed().as_secs(),
                    progress_pct: 0.0,
                })
            }
            _ => {}
        }
        let waited = t0.elapsed();
        if waited > limit {
            return Err(PurgeError::SanitizeTimeout {
                path,
                waited_s: waited.as_secs(),
                progress_pct: st.sprog as f64 / 655.36,
            });
        }
        if control.is_stopped() {
            return Err(PurgeError::Stopped {
                path,
                what: "waiting for the NVMe sanitize (it goes on inside the drive)",
                bytes: 0,
            });
        }
    }
}

// --- Fill and precondition ---

/// One sequential write pass job over `region` of `bs`-byte blocks, `bytes` in all.
fn seq_write_job(
    target: &Target,
    region: RegionSpec,
    bs: u32,
    depth: u32,
    bytes: u64,
) -> Result<engine::Job, PurgeError> {
    Ok(JobSpec {
        region,
        pattern: Pattern::Sequential,
        sizes: SizeMix::single(bs)?,
        read_pct: 0,
        depth,
        workers: 1,
        stop: Stop::Bytes(bytes),
        direct: target.direct(),
        ..JobSpec::default()
    }
    .validate()?)
}

/// Runs a write job and checks it wrote `want` bytes; `done` is what earlier runs of the
/// same operation wrote, `total` all the operation will write (for progress).
#[allow(clippy::too_many_arguments)]
fn run_writes(
    target: &Target,
    job: &engine::Job,
    control: &RunControl,
    what: Writing,
    want: u64,
    done: u64,
    total: u64,
    on_progress: &mut dyn FnMut(&WriteProgress),
) -> Result<RunResult, PurgeError> {
    let path = target.path().to_path_buf();
    let mut so_far = done;
    let result = engine::run(job, target, control, &mut |iv| {
        so_far += iv.write.bytes;
        on_progress(&WriteProgress {
            bytes_done: so_far,
            bytes_total: total,
            interval: iv,
        });
    })?;
    let wrote = result.write.bytes;
    if result.errors.count > 0 {
        let first = result.errors.first.first();
        return Err(PurgeError::IoErrors {
            path,
            what,
            count: result.errors.count,
            offset: first.map_or(0, |e| e.offset),
            message: first.map_or("", |e| e.message),
        });
    }
    if control.is_stopped() && wrote < want {
        return Err(PurgeError::Stopped {
            path,
            what: what.name(),
            bytes: done + wrote,
        });
    }
    if wrote != want {
        return Err(PurgeError::Short {
            path,
            what,
            wrote,
            want,
            reason: result
                .stopped_early
                .unwrap_or_else(|| "the engine stopped short".into())
                .into(),
        });
    }
    Ok(result)
}

/// Writes the whole target once: sequential 128 KiB writes of random data at queue depth
/// 16, then the tail that is not a whole 128 KiB block (in one smaller write). Needs a
/// writable target.
pub fn fill(target: &Target, control: &RunControl) -> Result<FillOutcome, PurgeError> {
    fill_with_progress(target, control, &mut |_| {})
}

/// [`fill`], calling `on_progress` after every engine interval.
pub fn fill_with_progress(
    target: &Target,
    control: &RunControl,
    on_progress: &mut dyn FnMut(&WriteProgress),
) -> Result<FillOutcome, PurgeError> {
    let path = target.path().to_path_buf();
    if !target.writable() {
        return Err(PurgeError::ReadOnly(path, "fill"));
    }
    // O_DIRECT cannot write a partial block; SizeMix wants multiples of 512.
    let unit = target.align().max(512);
    let total = target.size() / unit * unit;
    let bs = FILL_BLOCK as u64;
    let main = total / bs * bs;
    let tail = total - main;
    if total == 0 {
        return Err(PurgeError::TooSmall {
            path,
            what: "fill",
            need: unit,
            have: target.size(),
        });
    }
    let t0 = Instant::now();
    let mut done = 0;
    if main > 0 {
        let job = seq_write_job(target, RegionSpec::Whole, FILL_BLOCK, FILL_DEPTH, main)?;
        run_writes(
            target,
            &job,
            control,
            Writing::Fill,
            main,
            0,
            total,
            on_progress,
        )?;
        done = main;
    }
    if tail > 0 {
        let region = RegionSpec::Bytes {
            offset: main,
            len: Some(tail),
        };
        let job = seq_write_job(target, region, tail as u32, 1, tail)?;
        run_writes(
            target,
            &job,
            control,
            Writing::Fill,
            tail,
            done,
            total,
            on_progress,
        )?;
        done += tail;
    }
    Ok(FillOutcome {
        bytes: done,
        seconds: t0.elapsed().as_secs_f64(),
    })
}

/// Workload-independent preconditioning: sequential 128 KiB writes over `region`, `passes`
/// times over (SNIA PTS asks for twice the capacity: 2 passes over the whole target). A
/// tail of the region smaller than 128 KiB is not written. One engine run; the
/// sequential stream wraps to the region's start after each pass.
pub fn precondition(
    target: &Target,
    region: Region,
    passes: u32,
    control: &RunControl,
) -> Result<PreconditionOutcome, PurgeError> {
    precondition_with_progress(target, region, passes, control, &mut |_| {})
}

/// [`precondition`], calling `on_progress` after every engine interval.
pub fn precondition_with_progress(
    target: &Target,
    region: Region,
    passes: u32,
    control: &RunControl,
    on_progress: &mut dyn FnMut(&WriteProgress),
) -> Result<PreconditionOutcome, PurgeError> {
    let path = target.path().to_path_buf();
    if !target.writable() {
        return Err(PurgeError::ReadOnly(path, "preconditioning"));
    }
    if passes == 0 {
        return Err(PurgeError::NoPasses);
    }
    let bs = FILL_BLOCK as u64;
    let per_pass = region.len / bs * bs;
    if per_pass == 0 {
        return Err(PurgeError::TooSmall {
            path,
            what: "preconditioning",
            need: bs,
            have: region.len,
        });
    }
    let total = per_pass * passes as u64;
    let spec = RegionSpec::Bytes {
        offset: region.start,
        len: Some(per_pass),
    };
    let t0 = Instant::now();
    let job = seq_write_job(target, spec, FILL_BLOCK, FILL_DEPTH, total)?;
    run_writes(
        target,
        &job,
        control,
        Writing::Precondition,
        total,
        0,
        total,
        on_progress,
    )?;
    Ok(PreconditionOutcome {
        passes,
        bytes: total,
        seconds: t0.elapsed().as_secs_f64(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_format_s_timeout_fits_the_namespace() {
        const GB: u64 = 1_000_000_000;
        // A small namespace: the kernel's own admin timeout, not hours.
        assert_eq!(format_timeout_ms(256 << 20), 60_000);
        // 128 GB at 50 MB/s: about 43 minutes.
        assert_eq!(format_timeout_ms(128 * GB), 2_560_000);
        // Large drives: four hours, no more.
        assert_eq!(format_timeout_ms(8_000 * GB), 4 * 3600 * 1000);
        assert_eq!(format_timeout_ms(u64::MAX), 4 * 3600 * 1000);
        // Grows with the size in between.
        assert!(format_timeout_ms(256 * GB) > format_timeout_ms(128 * GB));
    }
    use crate::safety;
    use std::io::Write;

    const QEMU_ID_CTRL: &[u8] = include_bytes!("../../../tests/fixtures/nvme/qemu-id-ctrl.bin");
    const QEMU_ID_NS: &[u8] = include_bytes!("../../../tests/fixtures/nvme/qemu-id-ns.bin");

    /// A fake sysfs with disk `sdz` on SCSI host 3 of `driver`, under `via` (a path
    /// fragment such as `usb1/1-1/`).
    fn fake_sys(
        driver: Option<&str>,
        via: &str,
    ) -> (tempfile::TempDir, crate::device::SystemPaths) {
        let dir = tempfile::tempdir().unwrap();
        let sys = dir.path().join("sys");
        let host = if driver.is_some() {
            "host3/target3:0:0/3:0:0:0/"
        } else {
            ""
        };
        let dev = sys.join(format!("devices/pci0000:00/{via}{host}block/sdz"));
        std::fs::create_dir_all(&dev).unwrap();
        std::fs::create_dir_all(sys.join("class/block")).unwrap();
        std::os::unix::fs::symlink(&dev, sys.join("class/block/sdz")).unwrap();
        if let Some(d) = driver {
            let h = sys.join("class/scsi_host/host3");
            std::fs::create_dir_all(&h).unwrap();
            std::fs::write(h.join("proc_name"), format!("{d}\n")).unwrap();
        }
        let paths = crate::device::SystemPaths {
            sys,
            ..Default::default()
        };
        (dir, paths)
    }

    #[test]
    fn drive_erases_are_not_sent_to_raid_volumes_usb_bridges_or_the_unknown() {
        let disk = |model: &str| crate::device::BlockDeviceInfo {
            path: "/dev/sdz".into(),
            name: "sdz".into(),
            major: 8,
            minor: 400,
            size_bytes: 1 << 30,
            logical_block_size: 512,
            physical_block_size: 4096,
            is_partition: false,
            partitions: Vec::new(),
            parent: None,
            identity: crate::device::DeviceIdentity {
                model: Some(model.into()),
                ..Default::default()
            },
        };
        let (_d, ahci) = fake_sys(Some("ahci"), "");
        assert_eq!(scsi_refusal(&disk("WDC WD80EFAX"), &ahci), None);
        let (_d, sas) = fake_sys(Some("mpt3sas"), "");
        assert_eq!(scsi_refusal(&disk("ST8000NM0075"), &sas), None);
        // An IR volume of the same HBA driver says so in its model.
        assert!(scsi_refusal(&disk("Logical Volume"), &sas)
            .unwrap()
            .contains("logical volume"));
        for raid in ["megaraid_sas", "mpi3mr", "hpsa", "smartpqi"] {
            let (_d, p) = fake_sys(Some(raid), "");
            let why = scsi_refusal(&disk("PERC H755"), &p).unwrap();
            assert!(why.contains(raid), "{why}");
        }
        let (_d, usb) = fake_sys(Some("usb-storage"), "usb1/1-1/1-1:1.0/");
        assert!(scsi_refusal(&disk("ASM1153E"), &usb)
            .unwrap()
            .contains("USB"));
        let (_d, none) = fake_sys(None, "");
        assert!(scsi_refusal(&disk("X"), &none)
            .unwrap()
            .contains("does not say"));
    }

    #[test]
    fn method_names() {
        let all = [
            (PurgeMethod::NvmeFormat, "nvme-format"),
            (PurgeMethod::NvmeSanitize, "nvme-sanitize"),
            (PurgeMethod::AtaSecurityErase, "ata-security-erase"),
            (PurgeMethod::ScsiSanitize, "scsi-sanitize"),
            (PurgeMethod::BlkSecDiscard, "blksecdiscard"),
            (PurgeMethod::BlkDiscard, "blkdiscard"),
            (PurgeMethod::Overwrite, "overwrite"),
            (PurgeMethod::PunchHole, "punch-hole"),
        ];
        for (m, n) in all {
            assert_eq!(m.name(), n);
            assert_eq!(m.to_string(), n);
            assert_eq!(serde_json::to_value(m).unwrap(), n);
        }
    }

    #[test]
    fn qemu_nvme_gets_format_not_sanitize() {
        let caps = NvmeCaps::parse(QEMU_ID_CTRL).unwrap();
        assert_eq!(caps.oacs, 0x10a);
        assert_eq!(caps.sanicap, 0);
        assert_eq!(caps.fna, 0);
        assert_eq!(caps.cmic, 0);
        let (steps, notes) = nvme_plan(&caps, Some(&[1]), 1);
        assert_eq!(steps, vec![NvmeStep::Format]);
        assert!(notes[0].contains("Sanitize: not supported"), "{notes:?}");
        // Format of one namespace (FNA 0) does not care about other namespaces.
        let (steps, _) = nvme_plan(&caps, Some(&[1, 2]), 1);
        assert_eq!(steps, vec![NvmeStep::Format]);
        assert_eq!(nvme_plan(&caps, None, 1).0, vec![NvmeStep::Format]);
    }

    #[test]
    fn device_wide_erases_only_for_a_lone_namespace() {
        let caps = NvmeCaps {
            oacs: 0b10,
            cmic: 0,
            fna: 0b011,
            sanicap: 0b111,
        };
        let (steps, notes) = nvme_plan(&caps, Some(&[1]), 1);
        assert_eq!(
            steps,
            vec![NvmeStep::Sanitize(SANACT_BLOCK_ERASE), NvmeStep::Format]
        );
        assert!(notes.is_empty(), "{notes:?}");
        for (active, c) in [
            (Some(&[1u32, 2][..]), 0),
            (None, 0),
            (Some(&[1u32][..]), 0b10),
        ] {
            let caps = NvmeCaps { cmic: c, ..caps };
            let (steps, notes) = nvme_plan(&caps, active, 1);
            assert!(steps.is_empty(), "{active:?} cmic {c}: {steps:?}");
            assert_eq!(notes.len(), 2, "{notes:?}");
            assert!(notes.iter().all(|n| n.ends_with("not used")), "{notes:?}");
        }
        // Crypto erase when there is no block erase; nothing without Format support.
        let caps = NvmeCaps {
            oacs: 0,
            cmic: 0,
            fna: 0,
            sanicap: 0b001,
        };
        let (steps, notes) = nvme_plan(&caps, Some(&[7]), 7);
        assert_eq!(steps, vec![NvmeStep::Sanitize(SANACT_CRYPTO_ERASE)]);
        assert!(notes[0].contains("Format NVM: not supported"), "{notes:?}");
    }

    #[test]
    fn format_keeps_the_lba_format() {
        // QEMU's namespace: LBA format 0, no metadata, no protection -> only SES=1.
        assert_eq!(format_cdw10(QEMU_ID_NS), 1 << 9);
        let mut ns = vec![0u8; 4096];
        ns[26] = 0b0101_0011; // LBAF 3 | extended metadata | LBAF upper bits 0b10
        ns[29] = 0b1010; // PI type 2, PI in the first bytes
        let c = format_cdw10(&ns);
        assert_eq!(c & 0xf, 3);
        assert_eq!((c >> 4) & 1, 1);
        assert_eq!((c >> 5) & 7, 2);
        assert_eq!((c >> 8) & 1, 1);
        assert_eq!((c >> 9) & 7, 1);
        assert_eq!((c >> 12) & 3, 0b10);
    }

    #[test]
    fn sanitize_status_log() {
        let mut log = vec![0u8; 512];
        log[0..2].copy_from_slice(&0x8000u16.to_le_bytes());
        log[2..4].copy_from_slice(&(0x100u16 | SSTAT_IN_PROGRESS).to_le_bytes());
        log[12..16].copy_from_slice(&42u32.to_le_bytes());
        log[16..20].copy_from_slice(&u32::MAX.to_le_bytes());
        let s = SanitizeStatus::parse(&log).unwrap();
        assert_eq!(s.state(), SSTAT_IN_PROGRESS);
        assert_eq!(s.sprog, 0x8000);
        assert_eq!(s.est_block_erase, Some(42));
        assert_eq!(s.est_crypto_erase, None);
        assert!(SanitizeStatus::parse(&log[..16]).is_none());
    }

    fn random_file(path: &std::path::Path, len: usize, seed: u64) {
        let mut data = vec![0u8; len];
        crate::rng::Rng::new(seed).fill(&mut data);
        let mut f = std::fs::File::create(path).unwrap();
        f.write_all(&data).unwrap();
        f.sync_all().unwrap();
    }

    fn open_rw(path: &std::path::Path) -> Target {
        let permit = safety::authorize_file_writes(path, true).unwrap();
        Target::open(path, true, Some(&permit)).unwrap()
    }

    #[test]
    fn file_purge_punches_the_region_only() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t");
        random_file(&p, 4 << 20, 1);
        let before = std::fs::read(&p).unwrap();
        let t = open_rw(&p);
        let region = Region {
            start: 1 << 20,
            len: 2 << 20,
        };
        let out = purge(&t, region).unwrap();
        assert!(
            matches!(out.method, PurgeMethod::PunchHole | PurgeMethod::Overwrite),
            "{out:?}"
        );
        assert_eq!(out.bytes, 2 << 20);
        let after = std::fs::read(&p).unwrap();
        assert_eq!(after.len(), before.len());
        assert_eq!(after[..1 << 20], before[..1 << 20]);
        assert!(after[1 << 20..3 << 20].iter().all(|&b| b == 0));
        assert_eq!(after[3 << 20..], before[3 << 20..]);
    }

    #[test]
    fn refusals() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t");
        random_file(&p, 1 << 20, 2);
        let ro = Target::open(&p, false, None).unwrap();
        let whole = Region {
            start: 0,
            len: 1 << 20,
        };
        let e = purge(&ro, whole).unwrap_err();
        assert!(matches!(e, PurgeError::ReadOnly(..)), "{e}");
        assert!(e.to_string().contains("write permission"), "{e}");
        let e = fill(&ro, &RunControl::new()).unwrap_err();
        assert!(matches!(e, PurgeError::ReadOnly(..)), "{e}");
        let rw = open_rw(&p);
        let e = purge(
            &rw,
            Region {
                start: 4096,
                len: 1 << 20,
            },
        )
        .unwrap_err();
        assert!(matches!(e, PurgeError::BadRegion { .. }), "{e}");
        let e = precondition(&rw, whole, 0, &RunControl::new()).unwrap_err();
        assert!(matches!(e, PurgeError::NoPasses), "{e}");
    }

    #[test]
    fn fill_and_precondition_write_every_block() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t");
        // 1 MiB + 3 x 4 KiB: the tail is not a whole 128 KiB block.
        let size = (1 << 20) + 3 * 4096;
        std::fs::File::create(&p)
            .unwrap()
            .set_len(size as u64)
            .unwrap();
        let t = open_rw(&p);
        let mut last = 0;
        let out =
            fill_with_progress(&t, &RunControl::new(), &mut |pr| last = pr.bytes_done).unwrap();
        assert_eq!(out.bytes, size as u64);
        let data = std::fs::read(&p).unwrap();
        for (i, block) in data.chunks(4096).enumerate() {
            assert!(block.iter().any(|&b| b != 0), "block {i} is all zeros");
        }
        assert!(last <= size as u64);

        let region = Region {
            start: 0,
            len: 1 << 20,
        };
        let out = precondition(&t, region, 2, &RunControl::new()).unwrap();
        assert_eq!(out.passes, 2);
        assert_eq!(out.bytes, 2 << 20);
    }
}
