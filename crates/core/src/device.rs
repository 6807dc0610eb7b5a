//! Block device inspection: what a block device is (size, block sizes, identity) and what
//! holds it (mounts, swap, holders), read from sysfs, /proc and udev's database. No writes,
//! ever: every file this module opens is opened read-only.
//!
//! The parsers ([`parse_mountinfo`], [`parse_swaps`], [`parse_udev_properties`]) are pure
//! functions on text. The functions that read the system take their roots from
//! [`SystemPaths`], so tests can point them at a fake sysfs tree; [`inspect`] and [`in_use`]
//! use the real one.
//!
//! # Identity
//!
//! A drive's identity is read for the whole disk (for a partition, from its parent disk):
//!
//! - **serial**: `/sys/class/block/NAME/device/serial` (NVMe, some SCSI), else
//!   `/sys/class/block/NAME/serial` (virtio-blk), else udev's
//!   `E:ID_SERIAL_SHORT=` in `/run/udev/data/bMAJ:MIN`. A **loop device** has no serial;
//!   its serial is defined as `loop:` followed by the canonical path of its backing file
//!   (from `/sys/class/block/loopN/loop/backing_file`), for example
//!   `loop:/var/tmp/scratch.img`. This lets tests and users name a loop device's identity
//!   with `--expect-serial` the same way as a real drive's. If the backing file was deleted
//!   the kernel appends ` (deleted)`, which no canonical path can match.
//! - **wwn**: `/sys/class/block/NAME/wwid` or `.../device/wwid` (NVMe `eui.`, `nguid.`,
//!   SCSI `naa.`), else udev's `E:ID_WWN=`.
//! - **model**: `.../device/model`, else udev's `E:ID_MODEL=`.
//!
//! Every sysfs value is trimmed of surrounding whitespace; empty values count as absent.
//!
//! # Aliases
//!
//! [`alias_set_of_block`] and [`alias_set_of_file`] find every other name of the storage a
//! write would reach (see [`AliasSet`] for the walk), and [`aliases_in_use`] says which of
//! them is mounted, swap or held, which other block device is the same LUN on a second
//! path (the same WWN, or serial when either has no WWN, unless a dm-multipath device
//! holds both), and which loop device's backing cannot be identified. [`in_use`] is both
//! for one block device.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fmt;
use std::fs;
use std::io::{self, Seek, SeekFrom};
use std::os::unix::ffi::OsStringExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

/// Stable identity of a drive, as far as the kernel tells it.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct DeviceIdentity {
    pub serial: Option<String>,
    pub wwn: Option<String>,
    pub model: Option<String>,
}

/// What one block device is.
#[derive(Debug, Clone, serde::Serialize)]
pub struct BlockDeviceInfo {
    /// The path the user gave, canonicalised (`/dev/loop3`).
    pub path: PathBuf,
    /// Kernel name (`loop3`, `nvme0n1`, `sda`).
    pub name: String,
    pub major: u32,
    pub minor: u32,
    pub size_bytes: u64,
    pub logical_block_size: u32,
    pub physical_block_size: u32,
    /// true when this is a partition rather than a whole disk.
    pub is_partition: bool,
    /// Kernel names of the partitions of this device (empty for a partition).
    pub partitions: Vec<String>,
    /// For a partition, the kernel name of its whole disk (`sda` for `sda1`).
    pub parent: Option<String>,
    /// Identity of the whole disk (for a partition, its parent's identity).
    pub identity: DeviceIdentity,
}

impl BlockDeviceInfo {
    /// The device number, as `st_rdev` reports it.
    pub fn rdev(&self) -> u64 {
        rustix::fs::makedev(self.major, self.minor)
    }
}

/// One reason a block device is in use. `device` is the `/dev/NAME` path of the device or
/// partition that is in use.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub enum InUse {
    Mounted {
        device: String,
        mountpoint: PathBuf,
    },
    Swap {
        device: String,
    },
    Holders {
        device: String,
        holders: Vec<String>,
    },
    /// Another block device reports the same WWN (or serial) as `of`: one LUN seen on two
    /// paths, with no dm-multipath device holding both.
    SameIdentity {
        device: String,
        of: String,
        id: String,
    },
    /// A loop device whose backing file cannot be identified (the kernel shows a deleted
    /// or unreachable path and the loop device could not be asked): it may be this storage.
    Unidentified {
        device: String,
        backing: String,
    },
}

impl fmt::Display for InUse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InUse::Mounted { device, mountpoint } => {
                write!(f, "{device} is mounted on {}", mountpoint.display())
            }
            InUse::Swap { device } => write!(f, "{device} is in use as swap"),
            InUse::Holders { device, holders } => write!(
                f,
                "{device} is held by {} (device-mapper, md, LVM or similar)",
                holders.join(", ")
            ),
            InUse::SameIdentity { device, of, id } => write!(
                f,
                "{device} reports the same {id} as {of}: one drive on two paths without \
                 multipath (set up dm-multipath and use its device)"
            ),
            InUse::Unidentified { device, backing } => write!(
                f,
                "{device} is over {backing:?}, which cannot be identified (it may be this \
                 storage; run as root, or detach it)"
            ),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{0}: not a block device")]
    NotBlockDevice(PathBuf),
    #[error("{path}: unexpected content {value:?}")]
    Parse { path: PathBuf, value: String },
    /// The file's filesystem has no block device under it (tmpfs, overlay, a network
    /// filesystem, or an anonymous device that could not be traced to one), so no drive
    /// can be found from the file: the drive must be named by its serial or WWN.
    #[error(
        "{path}: its filesystem ({fs}, device {major}:{minor}) is not on a block device; \
         name the drive by its serial or WWN instead",
        fs = fstype.as_deref().unwrap_or("unknown type")
    )]
    NotOnBlockDevice {
        path: PathBuf,
        /// The filesystem type from the mount table, when the device number is listed there.
        fstype: Option<String>,
        major: u32,
        minor: u32,
    },
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> DeviceError + '_ {
    move |source| DeviceError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Where the system's views of block devices live. [`Default`] is the real system; tests
/// point the fields at fixtures.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SystemPaths {
    /// sysfs root (`/sys`).
    pub sys: PathBuf,
    /// The mount table (`/proc/self/mountinfo`).
    pub mountinfo: PathBuf,
    /// The swap table (`/proc/swaps`).
    pub swaps: PathBuf,
    /// udev's database directory (`/run/udev/data`).
    pub udev_data: PathBuf,
}

impl Default for SystemPaths {
    fn default() -> Self {
        SystemPaths {
            sys: PathBuf::from("/sys"),
            mountinfo: PathBuf::from("/proc/self/mountinfo"),
            swaps: PathBuf::from("/proc/swaps"),
            udev_data: PathBuf::from("/run/udev/data"),
        }
    }
}

/// The SCSI host drivers of RAID controllers (`/sys/class/scsi_host/*/proc_name`): a disk
/// they show is a logical drive, whose physical drives only the controller (and smartctl's
/// `-d megaraid,N` and the like) reaches.
pub const RAID_HOST_DRIVERS: &[&str] = &[
    "megaraid_sas",
    "megaraid",
    "hpsa",
    "cciss",
    "smartpqi",
    "aacraid",
    "arcmsr",
    "3w-9xxx",
    "3w-sas",
    "3w-xxxx",
    "hptiop",
    "sssraid",
    "mpi3mr",
    "ipr",
    "esas2r",
    "pmcraid",
    "stex",
    "mvumi",
];

/// Where a SCSI disk is attached, from sysfs: the driver of its SCSI host and whether it
/// sits behind a USB bridge.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScsiAttachment {
    /// `proc_name` of the disk's SCSI host (`ahci`, `mpt3sas`, `megaraid_sas`...).
    pub host_driver: Option<String>,
    pub usb: bool,
}

/// [`ScsiAttachment`] of the block device `name` (a whole disk).
pub fn scsi_attachment(paths: &SystemPaths, name: &str) -> ScsiAttachment {
    let Ok(real) = fs::canonicalize(paths.class_block(name)) else {
        return ScsiAttachment::default();
    };
    let real = real.to_string_lossy().into_owned();
    let host = real.split('/').find(|c| {
        c.strip_prefix("host")
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    });
    let host_driver =
        host.and_then(|h| read_attr(&paths.sys.join("class/scsi_host").join(h).join("proc_name")));
    ScsiAttachment {
        host_driver,
        usb: real.contains("/usb"),
    }
}

impl SystemPaths {
    fn class_block(&self, name: &str) -> PathBuf {
        self.sys.join("class/block").join(name)
    }

    fn dev_block(&self, major: u32, minor: u32) -> PathBuf {
        self.sys.join(format!("dev/block/{major}:{minor}"))
    }
}

/// Inspects the block device at `path` (symlinks such as `/dev/disk/by-id/...` are
/// followed). Reads only.
pub fn inspect(path: &Path) -> Result<BlockDeviceInfo, DeviceError> {
    inspect_with(path, &SystemPaths::default())
}

/// [`inspect`] with sysfs and udev read from `paths`. `path` itself must be a real block
/// device node.
pub fn inspect_with(path: &Path, paths: &SystemPaths) -> Result<BlockDeviceInfo, DeviceError> {
    let canonical = fs::canonicalize(path).map_err(io_err(path))?;
    let meta = fs::metadata(&canonical).map_err(io_err(&canonical))?;
    if !meta.file_type().is_block_device() {
        return Err(DeviceError::NotBlockDevice(canonical));
    }
    let rdev = meta.rdev();
    let (major, minor) = (rustix::fs::major(rdev), rustix::fs::minor(rdev));

    let dev_dir = paths.dev_block(major, minor);
    let link = fs::read_link(&dev_dir).map_err(io_err(&dev_dir))?;
    let name = file_name_string(&link).ok_or_else(|| DeviceError::Parse {
        path: dev_dir.clone(),
        value: link.display().to_string(),
    })?;
    let is_partition = dev_dir.join("partition").exists();
    let class_dir = paths.class_block(&name);

    let parent = if is_partition {
        let real = fs::canonicalize(&dev_dir).map_err(io_err(&dev_dir))?;
        let parent =
            real.parent()
                .and_then(file_name_string)
                .ok_or_else(|| DeviceError::Parse {
                    path: dev_dir.clone(),
                    value: real.display().to_string(),
                })?;
        Some(parent)
    } else {
        None
    };
    let partitions = if is_partition {
        Vec::new()
    } else {
        list_partitions(&class_dir)?
    };

    let size_bytes = match read_u64(&class_dir.join("size")) {
        Ok(sectors) => sectors * 512,
        Err(_) => size_by_seeking(&canonical)?,
    };

    // Queue limits and identity belong to the whole disk.
    let disk = parent.clone().unwrap_or_else(|| name.clone());
    let disk_dir = paths.class_block(&disk);
    let queue = disk_dir.join("queue");
    let logical_block_size = read_u32(&queue.join("logical_block_size"))?;
    let physical_block_size = read_u32(&queue.join("physical_block_size"))?;
    let (disk_major, disk_minor) = if is_partition {
        read_dev_numbers(&disk_dir.join("dev"))?
    } else {
        (major, minor)
    };
    let identity = read_identity(paths, &disk, disk_major, disk_minor);

    Ok(BlockDeviceInfo {
        path: canonical,
        name,
        major,
        minor,
        size_bytes,
        logical_block_size,
        physical_block_size,
        is_partition,
        partitions,
        parent,
        identity,
    })
}

/// Every reason the device, or another name of the same storage, is in use: mounted, used
/// as swap, or held (dm, md, LVM...), for every member of its [`AliasSet`] (its
/// partitions, for a partition its whole disk, what is stacked on it, what it is stacked
/// on, loop devices over the same file, the same LUN on another path). Empty when free.
pub fn in_use(info: &BlockDeviceInfo) -> Result<Vec<InUse>, DeviceError> {
    in_use_with(info, &SystemPaths::default())
}

/// [`in_use`] with the tables read from `paths`.
pub fn in_use_with(info: &BlockDeviceInfo, paths: &SystemPaths) -> Result<Vec<InUse>, DeviceError> {
    let set = alias_set_of_block_with(&info.name, paths)?;
    aliases_in_use_with(&set, paths)
}

/// One line of `/proc/self/mountinfo`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountEntry {
    /// Field 3: the device number of the mounted filesystem.
    pub major: u32,
    pub minor: u32,
    /// Field 4: the root of the mount within the filesystem.
    pub root: PathBuf,
    /// Field 5, with octal escapes (`\040`) decoded.
    pub mountpoint: PathBuf,
    /// The filesystem type (first field after the ` - ` separator).
    pub fstype: String,
    /// The mount source (`/dev/sda1`, `tmpfs`...), escapes decoded.
    pub source: String,
}

/// Parses `/proc/self/mountinfo`. Lines that do not parse are skipped.
pub fn parse_mountinfo(text: &str) -> Vec<MountEntry> {
    text.lines().filter_map(parse_mountinfo_line).collect()
}

fn parse_mountinfo_line(line: &str) -> Option<MountEntry> {
    let fields: Vec<&str> = line.split(' ').collect();
    if fields.len() < 7 {
        return None;
    }
    let (major, minor) = parse_dev_numbers(fields[2])?;
    let sep = fields.iter().skip(6).position(|f| *f == "-")? + 6;
    let fstype = unescape(fields.get(sep + 1)?);
    let source = unescape(fields.get(sep + 2).copied().unwrap_or(""));
    Some(MountEntry {
        major,
        minor,
        root: PathBuf::from(OsString::from_vec(unescape_bytes(fields[3]))),
        mountpoint: PathBuf::from(OsString::from_vec(unescape_bytes(fields[4]))),
        fstype,
        source,
    })
}

/// One line of `/proc/swaps`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SwapEntry {
    /// The swap device or file, escapes decoded.
    pub path: PathBuf,
    /// `partition` or `file`.
    pub kind: String,
}

/// Parses `/proc/swaps` (a header line, then one whitespace-separated line per swap area).
pub fn parse_swaps(text: &str) -> Vec<SwapEntry> {
    text.lines()
        .filter(|l| !l.starts_with("Filename"))
        .filter_map(|l| {
            let mut cols = l.split_whitespace();
            let path = cols.next()?;
            let kind = cols.next().unwrap_or("").to_string();
            Some(SwapEntry {
                path: PathBuf::from(OsString::from_vec(unescape_bytes(path))),
                kind,
            })
        })
        .collect()
}

/// Parses a udev database file (`/run/udev/data/bMAJ:MIN`): returns its `E:KEY=VALUE`
/// properties, values trimmed.
pub fn parse_udev_properties(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("E:"))
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.trim().to_string()))
        .collect()
}

/// Decodes the kernel's octal escapes (`\040` space, `\011` tab, `\012` newline, `\134`
/// backslash) as used in mountinfo and /proc/swaps.
fn unescape_bytes(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = u32::from(b[i + 1] - b'0') * 64
                + u32::from(b[i + 2] - b'0') * 8
                + u32::from(b[i + 3] - b'0');
            if let Ok(byte) = u8::try_from(v) {
                out.push(byte);
                i += 4;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    out
}

fn unescape(s: &str) -> String {
    String::from_utf8_lossy(&unescape_bytes(s)).into_owned()
}

fn parse_dev_numbers(s: &str) -> Option<(u32, u32)> {
    let (ma, mi) = s.trim().split_once(':')?;
    Some((ma.parse().ok()?, mi.parse().ok()?))
}

fn read_text(path: &Path) -> Result<String, DeviceError> {
    fs::read_to_string(path).map_err(io_err(path))
}

/// Reads a sysfs attribute, trimmed; `None` when missing, unreadable or empty.
pub fn read_attr(path: &Path) -> Option<String> {
    let s = fs::read_to_string(path).ok()?;
    let s = s.trim();
    (!s.is_empty()).then(|| s.to_string())
}

fn read_u64(path: &Path) -> Result<u64, DeviceError> {
    let text = read_text(path)?;
    text.trim().parse().map_err(|_| DeviceError::Parse {
        path: path.to_path_buf(),
        value: text.trim().to_string(),
    })
}

fn read_u32(path: &Path) -> Result<u32, DeviceError> {
    let v = read_u64(path)?;
    u32::try_from(v).map_err(|_| DeviceError::Parse {
        path: path.to_path_buf(),
        value: v.to_string(),
    })
}

fn read_dev_numbers(path: &Path) -> Result<(u32, u32), DeviceError> {
    let text = read_text(path)?;
    parse_dev_numbers(&text).ok_or_else(|| DeviceError::Parse {
        path: path.to_path_buf(),
        value: text.trim().to_string(),
    })
}

fn file_name_string(path: &Path) -> Option<String> {
    Some(path.file_name()?.to_str()?.to_string())
}

/// `st_rdev` of `path` if it is a block device node.
fn block_rdev_of(path: &Path) -> Option<u64> {
    if !path.is_absolute() {
        return None;
    }
    let meta = fs::metadata(path).ok()?;
    meta.file_type().is_block_device().then(|| meta.rdev())
}

/// Child directories of a disk's sysfs directory that contain a `partition` file.
fn list_partitions(class_dir: &Path) -> Result<Vec<String>, DeviceError> {
    let mut parts = Vec::new();
    for entry in fs::read_dir(class_dir).map_err(io_err(class_dir))? {
        let entry = entry.map_err(io_err(class_dir))?;
        if entry.path().join("partition").is_file() {
            parts.push(entry.file_name().to_string_lossy().into_owned());
        }
    }
    parts.sort();
    Ok(parts)
}

fn size_by_seeking(dev: &Path) -> Result<u64, DeviceError> {
    let mut f = fs::File::open(dev).map_err(io_err(dev))?;
    f.seek(SeekFrom::End(0)).map_err(io_err(dev))
}

/// The unit serial number from a SCSI VPD page 80h (`device/vpd_pg80` in sysfs): what a
/// SATA or SAS disk reports as its serial when udev (`ID_SERIAL_SHORT`) is not there.
pub fn parse_vpd_serial(page: &[u8]) -> Option<String> {
    if page.len() < 4 || page[1] != 0x80 {
        return None;
    }
    let len = u16::from_be_bytes([page[2], page[3]]) as usize;
    let body = page.get(4..4 + len.min(page.len() - 4))?;
    let s: String = String::from_utf8_lossy(body)
        .trim_matches(|c: char| c.is_whitespace() || c == '\0')
        .to_string();
    (!s.is_empty()).then_some(s)
}

fn read_identity(paths: &SystemPaths, disk: &str, major: u32, minor: u32) -> DeviceIdentity {
    let dir = paths.class_block(disk);
    let udev = fs::read_to_string(paths.udev_data.join(format!("b{major}:{minor}")))
        .map(|t| parse_udev_properties(&t))
        .unwrap_or_default();
    let udev_prop = |key: &str| udev.get(key).filter(|v| !v.is_empty()).cloned();

    let loop_serial = || {
        let backing = read_attr(&dir.join("loop/backing_file"))?;
        let canonical = fs::canonicalize(&backing)
            .map(|p| p.display().to_string())
            .unwrap_or(backing);
        Some(format!("loop:{canonical}"))
    };
    // What the drive reports, as every surface shows it: one line, bounded. A loop
    // device's serial is a path of this host, kept whole (two long paths must not meet).
    let drive = |s: Option<String>| s.and_then(|s| crate::fmt::drive_text(&s));
    let serial = drive(
        read_attr(&dir.join("device/serial"))
            // virtio-blk: the disk's own `serial` (udev has it as ID_SERIAL only)
            .or_else(|| read_attr(&dir.join("serial")))
            .or_else(|| udev_prop("ID_SERIAL_SHORT"))
            .or_else(|| {
                fs::read(dir.join("device/vpd_pg80"))
                    .ok()
                    .and_then(|b| parse_vpd_serial(&b))
            }),
    )
    .or_else(|| loop_serial().map(|s| crate::fmt::one_line(&s).into_owned()));
    let wwn = read_attr(&dir.join("wwid"))
        .or_else(|| read_attr(&dir.join("device/wwid")))
        .or_else(|| udev_prop("ID_WWN"));
    let model = read_attr(&dir.join("device/model")).or_else(|| udev_prop("ID_MODEL"));
    DeviceIdentity {
        serial,
        wwn: drive(wwn),
        model: drive(model),
    }
}

/// The drives a file lives on: the block device under its filesystem and the whole disks
/// under that device.
#[derive(Debug, Clone, serde::Serialize)]
pub struct FileDrives {
    /// Kernel name of the block device the file's filesystem is on (`loop3p1`, `dm-0`,
    /// `nvme0n1p2`); for btrfs, the device its mount names as source.
    pub filesystem_device: String,
    /// The whole disks under that device, deduplicated and sorted by name: one for a
    /// partition or a plain disk, every member disk for dm and md (an LVM volume over a
    /// RAID1 of two partitions gives two).
    pub disks: Vec<BlockDeviceInfo>,
    /// The kernel names walked from the filesystem's device down to the disks, depth
    /// first, each once (`dm-0`, `md0`, `sda1`, `sda`, `sdb1`, `sdb`), for logs.
    pub via: Vec<String>,
}

/// Deeper stacks than this are taken for a cycle in sysfs.
const MAX_STACK_DEPTH: usize = 32;

/// This process's mount table, kept open and read again only when the kernel says it
/// changed: it raises POLLPRI on the open `/proc/self/mountinfo` at every mount and
/// unmount in the namespace, so the cache is never older than the last change seen by a
/// poll. The daemon looks up each file target's filesystem every few seconds; with
/// hundreds of drives, reading the table each time was most of its identity refresh.
struct MountCache {
    file: fs::File,
    table: std::sync::Arc<Vec<MountEntry>>,
}

static MOUNT_CACHE: std::sync::Mutex<Option<MountCache>> = std::sync::Mutex::new(None);

/// The mount table at `paths.mountinfo`: cached (see [`MountCache`]) for the real one,
/// read each time for any other (a test's).
fn mount_table(paths: &SystemPaths) -> Option<std::sync::Arc<Vec<MountEntry>>> {
    use rustix::event::{poll, PollFd, PollFlags};
    use std::io::Read;
    let real = Path::new("/proc/self/mountinfo");
    if paths.mountinfo != real {
        let t = fs::read_to_string(&paths.mountinfo).ok()?;
        return Some(std::sync::Arc::new(parse_mountinfo(&t)));
    }
    let mut cache = MOUNT_CACHE.lock().unwrap_or_else(|e| e.into_inner());
    // Taken out while in use: a panic part way (the poll took note of a change, the
    // read did not finish) leaves no cache rather than a stale one.
    if let Some(mut c) = cache.take() {
        let mut fds = [PollFd::new(&c.file, PollFlags::PRI)];
        let zero = rustix::time::Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        match poll(&mut fds, Some(&zero)) {
            Ok(0) => {
                let table = c.table.clone();
                *cache = Some(c);
                return Some(table);
            }
            Ok(_) => {
                // Changed (POLLPRI|POLLERR, and the poll took note): read it again.
                let mut text = String::new();
                let read = c
                    .file
                    .seek(SeekFrom::Start(0))
                    .and_then(|_| c.file.read_to_string(&mut text));
                if read.is_ok() {
                    c.table = std::sync::Arc::new(parse_mountinfo(&text));
                    let table = c.table.clone();
                    *cache = Some(c);
                    return Some(table);
                }
            }
            Err(_) => {}
        }
    }
    // Open first, then read: a change after the open is seen by the next poll.
    let mut file = fs::File::open(real).ok()?;
    let mut text = String::new();
    file.read_to_string(&mut text).ok()?;
    let table = std::sync::Arc::new(parse_mountinfo(&text));
    *cache = Some(MountCache {
        file,
        table: table.clone(),
    });
    Some(table)
}

/// The drives under the file at `path`: from its device number (`st_dev`) through
/// `/sys/dev/block/MAJ:MIN`, up from a partition to its whole disk, and down through the
/// `slaves/` of dm and md devices to every whole disk. A loop device counts as a disk (the
/// drive under its backing file is not followed). A btrfs file's anonymous device number
/// is traced through its mount's source device to every member of the filesystem listed in
/// `/sys/fs/btrfs/UUID/devices/`. A file on a filesystem without a block device (tmpfs,
/// overlay, NFS...) gives [`DeviceError::NotOnBlockDevice`]. Reads only.
pub fn drives_of_file(path: &Path) -> Result<FileDrives, DeviceError> {
    drives_of_file_with(path, &SystemPaths::default())
}

/// [`drives_of_file`] with sysfs, the mount table and udev read from `paths`; `path` itself
/// is a real file whose `st_dev` is looked up there.
pub fn drives_of_file_with(path: &Path, paths: &SystemPaths) -> Result<FileDrives, DeviceError> {
    let meta = fs::metadata(path).map_err(io_err(path))?;
    let dev = meta.dev();
    drives_of_dev_number(path, rustix::fs::major(dev), rustix::fs::minor(dev), paths)
}

/// [`drives_of_file_with`] from the device number `major:minor` of the file at `path`
/// (`path` only names the file in errors).
fn drives_of_dev_number(
    path: &Path,
    major: u32,
    minor: u32,
    paths: &SystemPaths,
) -> Result<FileDrives, DeviceError> {
    let dev_dir = paths.dev_block(major, minor);
    let (filesystem_device, starts) = match fs::read_link(&dev_dir) {
        Ok(link) => {
            let name = file_name_string(&link).ok_or_else(|| DeviceError::Parse {
                path: dev_dir.clone(),
                value: link.display().to_string(),
            })?;
            (name.clone(), vec![name])
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            // An anonymous device (0:N): tmpfs, overlay, a btrfs subvolume...
            let mount = mount_table(paths).and_then(|t| {
                t.iter()
                    .find(|m| m.major == major && m.minor == minor)
                    .cloned()
            });
            let traced = mount
                .as_ref()
                .filter(|m| m.fstype == "btrfs")
                .and_then(|m| btrfs_devices(paths, &m.source));
            match traced {
                Some(found) => found,
                None => {
                    return Err(DeviceError::NotOnBlockDevice {
                        path: path.to_path_buf(),
                        fstype: mount.map(|m| m.fstype),
                        major,
                        minor,
                    })
                }
            }
        }
        Err(e) => return Err(io_err(&dev_dir)(e)),
    };

    let mut via = Vec::new();
    let mut disk_names = std::collections::BTreeSet::new();
    for name in &starts {
        walk_to_disks(paths, name, 0, &mut via, &mut disk_names)?;
    }
    let disks = disk_names
        .iter()
        .map(|name| whole_disk_info(paths, name))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(FileDrives {
        filesystem_device,
        disks,
        via,
    })
}

/// For a btrfs mount whose source is `source` (`/dev/sdb1`): the source's kernel name and
/// every member device of its filesystem, from `/sys/fs/btrfs/*/devices/` (just the source
/// when no such directory lists it). `None` when the source names no block device in sysfs.
fn btrfs_devices(paths: &SystemPaths, source: &str) -> Option<(String, Vec<String>)> {
    let source = Path::new(source);
    if !source.is_absolute() {
        return None;
    }
    // `/dev/mapper/x` and similar are symlinks to the kernel name; in a fake sysfs the
    // node may not exist, so fall back to the name as given.
    let name = fs::canonicalize(source)
        .ok()
        .and_then(|p| file_name_string(&p))
        .or_else(|| file_name_string(source))?;
    if !paths.class_block(&name).exists() {
        return None;
    }
    let mut members = Vec::new();
    if let Ok(fsids) = fs::read_dir(paths.sys.join("fs/btrfs")) {
        for fsid in fsids.flatten() {
            let devices = fsid.path().join("devices");
            let Ok(entries) = fs::read_dir(&devices) else {
                continue;
            };
            let names: Vec<String> = entries
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect();
            if names.contains(&name) {
                members = names;
                break;
            }
        }
    }
    members.sort();
    if members.is_empty() {
        members.push(name.clone());
    }
    Some((name, members))
}

/// Walks from the block device `name` to whole disks: a partition goes up to its disk, a
/// device with `slaves/` entries (dm, md) goes down to each of them, anything else is a
/// disk. Every name walked is recorded once in `via`.
fn walk_to_disks(
    paths: &SystemPaths,
    name: &str,
    depth: usize,
    via: &mut Vec<String>,
    disks: &mut std::collections::BTreeSet<String>,
) -> Result<(), DeviceError> {
    let class_dir = paths.class_block(name);
    if depth > MAX_STACK_DEPTH {
        return Err(DeviceError::Parse {
            path: class_dir,
            value: format!("block device stack deeper than {MAX_STACK_DEPTH}"),
        });
    }
    if via.iter().any(|v| v == name) {
        return Ok(());
    }
    via.push(name.to_string());
    if class_dir.join("partition").exists() {
        let real = fs::canonicalize(&class_dir).map_err(io_err(&class_dir))?;
        let parent =
            real.parent()
                .and_then(file_name_string)
                .ok_or_else(|| DeviceError::Parse {
                    path: class_dir.clone(),
                    value: real.display().to_string(),
                })?;
        return walk_to_disks(paths, &parent, depth + 1, via, disks);
    }
    let slaves_dir = class_dir.join("slaves");
    let mut slaves = Vec::new();
    match fs::read_dir(&slaves_dir) {
        Ok(entries) => {
            for entry in entries {
                let entry = entry.map_err(io_err(&slaves_dir))?;
                slaves.push(entry.file_name().to_string_lossy().into_owned());
            }
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(io_err(&slaves_dir)(e)),
    }
    if slaves.is_empty() {
        if !class_dir.exists() {
            return Err(io_err(&class_dir)(io::ErrorKind::NotFound.into()));
        }
        disks.insert(name.to_string());
        return Ok(());
    }
    slaves.sort();
    for slave in &slaves {
        walk_to_disks(paths, slave, depth + 1, via, disks)?;
    }
    Ok(())
}

/// What [`inspect_with`] reports for the whole disk `name`, read from sysfs alone (the
/// disk is found by kernel name, not opened). `path` is `/dev/NAME`, canonicalised when
/// that node exists with the disk's device number.
pub fn whole_disk_info(paths: &SystemPaths, name: &str) -> Result<BlockDeviceInfo, DeviceError> {
    let class_dir = paths.class_block(name);
    let (major, minor) = read_dev_numbers(&class_dir.join("dev"))?;
    let node = PathBuf::from(format!("/dev/{name}"));
    let path = if block_rdev_of(&node) == Some(rustix::fs::makedev(major, minor)) {
        fs::canonicalize(&node).unwrap_or(node)
    } else {
        node
    };
    let queue = class_dir.join("queue");
    Ok(BlockDeviceInfo {
        path,
        name: name.to_string(),
        major,
        minor,
        size_bytes: read_u64(&class_dir.join("size"))? * 512,
        logical_block_size: read_u32(&queue.join("logical_block_size"))?,
        physical_block_size: read_u32(&queue.join("physical_block_size"))?,
        is_partition: false,
        partitions: list_partitions(&class_dir)?,
        parent: None,
        identity: read_identity(paths, name, major, minor),
    })
}

// ---------------------------------------------------------------------------------------
// Aliases: every other name of the storage a write would reach.
// ---------------------------------------------------------------------------------------

/// A name of storage in the alias graph.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum StorageName {
    /// A block device, by kernel name (`loop3`, `sda1`, `dm-0`).
    Block(String),
    /// A file that is (or may be) the backing file of a loop device, by `(st_dev, st_ino)`.
    File { dev: u64, ino: u64 },
}

/// Where an alias sits relative to the target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AliasSide {
    /// The target itself.
    Target,
    /// Under the target: what it writes into (a partition's disk, dm/md members, a loop
    /// device's backing file or device), and what is under those. The target's own stack
    /// holds these: their holders on that stack are expected.
    Below,
    /// On top of the target, or of something below it: its partitions, holders, loop
    /// devices over it, and what is on those. Their data changes when the target is written.
    Above,
}

/// One name of the storage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Alias {
    pub name: StorageName,
    /// How it is named in messages: `/dev/loop3` for the target, its partitions and its
    /// whole disk; with the relation for the others (`/dev/loop4 (a loop device over
    /// /dev/shm/x/fs.img)`).
    pub label: String,
    pub side: AliasSide,
}

/// Every name of the storage a write to the target would reach: the target first, then
/// what a walk over sysfs finds from it, each once.
///
/// The walk goes **up** (from the target and from every alias) to partitions, holders
/// (`holders/`) and loop devices over a device or file, and **down** from the target and
/// from every alias below it to a partition's whole disk, dm/md members (`slaves/`) and a
/// loop device's backing file or device; from a device or file below, it goes up again
/// (a second loop device over the target's backing file is an alias). It does not go up
/// from a whole disk reached from one of its partitions into the disk's other partitions
/// (they are other storage: partitions do not overlap), nor down from a file to the
/// filesystem it is on (a write to a file goes through that filesystem, which keeps it
/// in the file), nor down from an alias above the target (a dm device over the target
/// and another disk does not make that other disk an alias).
///
/// Loop devices are matched to their backing file by the kernel's own record of its
/// device and inode (LOOP_GET_STATUS64 on the loop device, read-only), not by the path
/// sysfs shows, which may be renamed, deleted (` (deleted)`) or in another mount
/// namespace. Without access to the loop device, the path is stat'ed; a loop device whose
/// backing cannot be identified either way is listed in `unidentified` (a doubt, which
/// the gate refuses).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AliasSet {
    pub members: Vec<Alias>,
    /// Loop devices whose backing is unknown: (kernel name, the path sysfs shows).
    pub unidentified: Vec<(String, String)>,
}

impl AliasSet {
    /// The target and what is below it: the stack a write goes through. Holders on it
    /// are the stack itself.
    fn chain(&self) -> std::collections::BTreeSet<&str> {
        self.members
            .iter()
            .filter(|a| a.side != AliasSide::Above)
            .filter_map(|a| match &a.name {
                StorageName::Block(n) => Some(n.as_str()),
                StorageName::File { .. } => None,
            })
            .collect()
    }

    /// Loop devices in the set other than the target, and partitions of loop devices,
    /// that no dm/md device holds (those are judged by their holders) and that have no
    /// partitions (those are judged instead), with their device numbers: the ones whose exclusive
    /// claims only the kernel knows (an ext4 external journal, another program's `O_EXCL`
    /// open). `(label, kernel name, major, minor)`.
    pub fn loops_to_claim(&self, paths: &SystemPaths) -> Vec<(String, String, u32, u32)> {
        let mut out = Vec::new();
        for a in &self.members {
            let StorageName::Block(name) = &a.name else {
                continue;
            };
            if a.side == AliasSide::Target {
                continue;
            }
            let dir = paths.class_block(name);
            // A loop device, or a partition of one (a mount of it that another mount
            // namespace holds shows only as the kernel's EBUSY).
            let loop_partition = dir.join("partition").exists()
                && std::fs::canonicalize(&dir)
                    .ok()
                    .and_then(|d| d.parent().map(|p| p.join("loop").exists()))
                    .unwrap_or(false);
            // A disk with partitions answers EBUSY while any partition is claimed (a
            // sibling of a partition target, mounted): its partitions in the set are
            // judged instead.
            if !(dir.join("loop").exists() || loop_partition)
                || !dir_names(&dir.join("holders")).is_empty()
                || list_partitions(&dir).map_or(true, |p| !p.is_empty())
            {
                continue;
            }
            if let Ok((ma, mi)) = read_dev_numbers(&dir.join("dev")) {
                out.push((a.label.clone(), name.clone(), ma, mi));
            }
        }
        out
    }

    /// The block devices in the set, as `/dev/NAME`: for a file target, the loop devices
    /// over it and what is stacked on them.
    pub fn block_devices(&self) -> Vec<String> {
        self.members
            .iter()
            .filter_map(|a| match &a.name {
                StorageName::Block(n) => Some(format!("/dev/{n}")),
                StorageName::File { .. } => None,
            })
            .collect()
    }
}

/// What a bound loop device is over.
#[derive(Debug, Clone, PartialEq, Eq)]
enum LoopOver {
    Block(String),
    File { dev: u64, ino: u64 },
    Unknown,
}

#[derive(Debug, Clone)]
struct LoopDev {
    name: String,
    over: LoopOver,
    /// The backing file's path as sysfs shows it (for messages).
    shown: String,
}

/// Names of the entries of a directory (sorted); empty when it is missing or unreadable.
fn dir_names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .map(|it| {
            it.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// Names of the entries of a directory that must be readable (sorted); a missing one is
/// empty.
fn dir_names_checked(dir: &Path) -> Result<Vec<String>, DeviceError> {
    match fs::read_dir(dir) {
        Ok(it) => {
            let mut v = Vec::new();
            for e in it {
                let e = e.map_err(io_err(dir))?;
                v.push(e.file_name().to_string_lossy().into_owned());
            }
            v.sort();
            Ok(v)
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(io_err(dir)(e)),
    }
}

/// The kernel name of the block device `rdev`, from `/sys/dev/block/MAJ:MIN`.
fn name_of_rdev(paths: &SystemPaths, rdev: u64) -> Option<String> {
    let link =
        fs::read_link(paths.dev_block(rustix::fs::major(rdev), rustix::fs::minor(rdev))).ok()?;
    file_name_string(&link)
}

/// What asking a loop device gave.
enum LoopStatus {
    Asked(crate::sys::blk::LoopBacking),
    /// ENXIO: no longer bound (detached since sysfs was read).
    Unbound,
    /// No node for it here, no access, or the node is another device.
    CannotAsk,
}

/// The kernel's record of what loop device `name` is over, asked through `/dev/NAME` when
/// that node is the device sysfs describes.
fn loop_status(paths: &SystemPaths, name: &str) -> LoopStatus {
    use std::os::unix::fs::OpenOptionsExt;
    let Ok((ma, mi)) = read_dev_numbers(&paths.class_block(name).join("dev")) else {
        return LoopStatus::CannotAsk;
    };
    let node = PathBuf::from(format!("/dev/{name}"));
    if block_rdev_of(&node) != Some(rustix::fs::makedev(ma, mi)) {
        return LoopStatus::CannotAsk;
    }
    let Ok(f) = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(&node)
    else {
        return LoopStatus::CannotAsk;
    };
    // The node could have been replaced between the check and the open.
    match f.metadata() {
        Ok(m) if m.file_type().is_block_device() && m.rdev() == rustix::fs::makedev(ma, mi) => {}
        _ => return LoopStatus::CannotAsk,
    }
    match crate::sys::blk::loop_backing(&f) {
        Ok(b) => LoopStatus::Asked(b),
        Err(e) if e.raw_os_error() == Some(libc::ENXIO) => LoopStatus::Unbound,
        Err(_) => LoopStatus::CannotAsk,
    }
}

/// What loop device `name` (whose sysfs `loop/backing_file` reads `shown`) is over;
/// `None` when it turns out to be detached meanwhile.
fn resolve_loop(paths: &SystemPaths, name: &str, shown: &str) -> Option<LoopOver> {
    match loop_status(paths, name) {
        LoopStatus::Asked(b) => {
            return Some(if b.rdev != 0 {
                name_of_rdev(paths, b.rdev).map_or(LoopOver::Unknown, LoopOver::Block)
            } else {
                LoopOver::File {
                    dev: b.dev,
                    ino: b.ino,
                }
            })
        }
        LoopStatus::Unbound => return None,
        LoopStatus::CannotAsk => {}
    }
    let over = resolve_loop_path(paths, shown);
    // Detached while the path was looked at (its file then removed): no longer a loop.
    if over == LoopOver::Unknown
        && read_attr(&paths.class_block(name).join("loop/backing_file")).is_none()
    {
        return None;
    }
    Some(over)
}

/// What the path sysfs shows for a loop device's backing file names, when the loop device
/// itself cannot be asked.
fn resolve_loop_path(paths: &SystemPaths, shown: &str) -> LoopOver {
    // A deleted file has no name left to stat (and a file named "x (deleted)" cannot be
    // told from it).
    if shown.ends_with(" (deleted)") {
        return LoopOver::Unknown;
    }
    let path = Path::new(shown);
    match fs::metadata(path) {
        Ok(m) if m.file_type().is_block_device() => {
            name_of_rdev(paths, m.rdev()).map_or(LoopOver::Unknown, LoopOver::Block)
        }
        Ok(m) => LoopOver::File {
            dev: m.dev(),
            ino: m.ino(),
        },
        // A device node missing from this /dev (a fake sysfs in tests, a container):
        // named by its kernel name when sysfs has it.
        Err(e) if e.kind() == io::ErrorKind::NotFound => match shown.strip_prefix("/dev/") {
            Some(n) if !n.contains('/') && paths.class_block(n).exists() => {
                LoopOver::Block(n.to_string())
            }
            _ => LoopOver::Unknown,
        },
        Err(_) => LoopOver::Unknown,
    }
}

/// Every bound loop device (one with `loop/backing_file` in sysfs) and what it is over.
fn loop_devices(paths: &SystemPaths) -> Result<Vec<LoopDev>, DeviceError> {
    let class = paths.sys.join("class/block");
    let mut out = Vec::new();
    for name in dir_names_checked(&class)? {
        let Some(shown) = read_attr(&paths.class_block(&name).join("loop/backing_file")) else {
            continue;
        };
        if let Some(over) = resolve_loop(paths, &name, &shown) {
            out.push(LoopDev { name, over, shown });
        }
    }
    Ok(out)
}

/// The whole disk of partition `name` (its parent directory in sysfs).
fn parent_disk(paths: &SystemPaths, name: &str) -> Result<Option<String>, DeviceError> {
    let class_dir = paths.class_block(name);
    if !class_dir.join("partition").exists() {
        return Ok(None);
    }
    let real = fs::canonicalize(&class_dir).map_err(io_err(&class_dir))?;
    real.parent()
        .and_then(file_name_string)
        .map(Some)
        .ok_or_else(|| DeviceError::Parse {
            path: class_dir,
            value: real.display().to_string(),
        })
}

/// The [`AliasSet`] of the block device with kernel name `name`.
pub fn alias_set_of_block(name: &str) -> Result<AliasSet, DeviceError> {
    alias_set_of_block_with(name, &SystemPaths::default())
}

/// [`alias_set_of_block`] with sysfs read from `paths`.
pub fn alias_set_of_block_with(name: &str, paths: &SystemPaths) -> Result<AliasSet, DeviceError> {
    let loops = loop_devices(paths)?;
    alias_walk(
        StorageName::Block(name.to_string()),
        format!("/dev/{name}"),
        &loops,
        paths,
    )
}

/// The [`AliasSet`] of a regular file with `(st_dev, st_ino)` = `(dev, ino)`, named
/// `label` in messages: the loop devices over it and what is stacked on those.
pub fn alias_set_of_file(dev: u64, ino: u64, label: &str) -> Result<AliasSet, DeviceError> {
    alias_set_of_file_with(dev, ino, label, &SystemPaths::default())
}

/// [`alias_set_of_file`] with sysfs read from `paths`.
pub fn alias_set_of_file_with(
    dev: u64,
    ino: u64,
    label: &str,
    paths: &SystemPaths,
) -> Result<AliasSet, DeviceError> {
    let loops = loop_devices(paths)?;
    alias_walk(
        StorageName::File { dev, ino },
        label.to_string(),
        &loops,
        paths,
    )
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Walk {
    /// The target: up and down.
    Both,
    /// Above: up only.
    Up,
    /// Below: down, and up again.
    Down,
    /// The whole disk of a partition below: down, and up to holders and loop devices but
    /// not to its other partitions.
    DownFromPartition,
}

fn alias_walk(
    target: StorageName,
    target_label: String,
    loops: &[LoopDev],
    paths: &SystemPaths,
) -> Result<AliasSet, DeviceError> {
    let dev_label = |n: &str| format!("/dev/{n}");
    let mut members: Vec<Alias> = Vec::new();
    let mut unidentified = Vec::new();
    let mut queue = std::collections::VecDeque::new();
    queue.push_back((target, target_label, Walk::Both, 0usize));
    while let Some((node, label, how, depth)) = queue.pop_front() {
        if members.iter().any(|m| m.name == node) {
            continue;
        }
        if depth > MAX_STACK_DEPTH {
            return Err(DeviceError::Parse {
                path: paths.sys.join("class/block"),
                value: format!("block device stack deeper than {MAX_STACK_DEPTH}"),
            });
        }
        let side = match how {
            Walk::Both => AliasSide::Target,
            Walk::Up => AliasSide::Above,
            Walk::Down | Walk::DownFromPartition => AliasSide::Below,
        };
        let is_target = how == Walk::Both;
        let here = match &node {
            StorageName::Block(n) => dev_label(n),
            StorageName::File { .. } => label.clone(),
        };
        members.push(Alias {
            name: node.clone(),
            label: label.clone(),
            side,
        });
        let d = depth + 1;
        let going_down = how != Walk::Up;

        // Up (always): partitions, holders, loop devices over it.
        {
            let loops_over: Vec<&LoopDev> = loops
                .iter()
                .filter(|l| match (&l.over, &node) {
                    (LoopOver::Block(b), StorageName::Block(n)) => b == n,
                    (LoopOver::File { dev, ino }, StorageName::File { dev: d2, ino: i2 }) => {
                        dev == d2 && ino == i2
                    }
                    _ => false,
                })
                .collect();
            if let StorageName::Block(n) = &node {
                let class_dir = paths.class_block(n);
                if how != Walk::DownFromPartition && !class_dir.join("partition").exists() {
                    for p in list_partitions(&class_dir)? {
                        let l = if is_target {
                            dev_label(&p)
                        } else {
                            format!("/dev/{p} (a partition of {here})")
                        };
                        queue.push_back((StorageName::Block(p), l, Walk::Up, d));
                    }
                }
                for h in dir_names_checked(&class_dir.join("holders"))? {
                    // A holder sysfs does not describe is judged as a holder alone.
                    if paths.class_block(&h).exists() {
                        let l = format!("/dev/{h} (over {here})");
                        queue.push_back((StorageName::Block(h), l, Walk::Up, d));
                    }
                }
            }
            for l in loops_over {
                let what = match &node {
                    StorageName::Block(_) => here.clone(),
                    StorageName::File { .. } => l.shown.clone(),
                };
                let lab = format!("/dev/{} (a loop device over {what})", l.name);
                queue.push_back((StorageName::Block(l.name.clone()), lab, Walk::Up, d));
            }
        }

        // Down: a partition's disk, dm/md members, a loop device's backing.
        if going_down {
            if let StorageName::Block(n) = &node {
                if let Some(disk) = parent_disk(paths, n)? {
                    let l = if is_target {
                        dev_label(&disk)
                    } else {
                        format!("/dev/{disk} (the disk of {here})")
                    };
                    queue.push_back((StorageName::Block(disk), l, Walk::DownFromPartition, d));
                }
                for sl in dir_names_checked(&paths.class_block(n).join("slaves"))? {
                    let l = format!("/dev/{sl} (under {here})");
                    queue.push_back((StorageName::Block(sl), l, Walk::Down, d));
                }
                if let Some(l) = loops.iter().find(|l| &l.name == n) {
                    match &l.over {
                        LoopOver::Block(b) => queue.push_back((
                            StorageName::Block(b.clone()),
                            format!("/dev/{b} (the backing device of {here})"),
                            Walk::Down,
                            d,
                        )),
                        LoopOver::File { dev, ino } => queue.push_back((
                            StorageName::File {
                                dev: *dev,
                                ino: *ino,
                            },
                            format!("{} (the backing file of {here})", l.shown),
                            Walk::Down,
                            d,
                        )),
                        LoopOver::Unknown => unidentified.push((l.name.clone(), l.shown.clone())),
                    }
                }
            }
        }
    }
    // A loop device over something unknown could be over any of these.
    for l in loops {
        if l.over == LoopOver::Unknown && !unidentified.iter().any(|(n, _)| n == &l.name) {
            unidentified.push((l.name.clone(), l.shown.clone()));
        }
    }
    Ok(AliasSet {
        members,
        unidentified,
    })
}

/// Every reason a member of `set` is in use (see [`in_use`]).
pub fn aliases_in_use(set: &AliasSet) -> Result<Vec<InUse>, DeviceError> {
    aliases_in_use_with(set, &SystemPaths::default())
}

/// [`aliases_in_use`] with the tables read from `paths`.
pub fn aliases_in_use_with(set: &AliasSet, paths: &SystemPaths) -> Result<Vec<InUse>, DeviceError> {
    // (label, kernel name, major, minor) of every block device in the set.
    let mut blocks = Vec::new();
    let mut files = Vec::new();
    for a in &set.members {
        match &a.name {
            StorageName::Block(n) => {
                let (ma, mi) = read_dev_numbers(&paths.class_block(n).join("dev"))?;
                blocks.push((a.label.clone(), n.clone(), ma, mi));
            }
            StorageName::File { dev, ino } => files.push((a.label.clone(), *dev, *ino)),
        }
    }
    let mut reasons = Vec::new();

    let mountinfo = read_text(&paths.mountinfo)?;
    for entry in parse_mountinfo(&mountinfo) {
        let source_rdev = block_rdev_of(Path::new(&entry.source));
        for (label, _, ma, mi) in &blocks {
            let by_number = entry.major == *ma && entry.minor == *mi;
            // btrfs (and others) report an anonymous 0:N device in field 3: match the
            // mount source too.
            let by_source = source_rdev == Some(rustix::fs::makedev(*ma, *mi));
            if by_number || by_source {
                reasons.push(InUse::Mounted {
                    device: label.clone(),
                    mountpoint: entry.mountpoint.clone(),
                });
            }
        }
    }

    let swaps = read_text(&paths.swaps)?;
    for entry in parse_swaps(&swaps) {
        let meta = entry
            .path
            .is_absolute()
            .then(|| fs::metadata(&entry.path).ok())
            .flatten();
        let rdev = meta
            .as_ref()
            .filter(|m| m.file_type().is_block_device())
            .map(|m| m.rdev());
        let base = entry
            .path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned());
        for (label, name, ma, mi) in &blocks {
            let by_number = rdev == Some(rustix::fs::makedev(*ma, *mi));
            let by_name = base.as_deref() == Some(name.as_str());
            if by_number || by_name {
                reasons.push(InUse::Swap {
                    device: label.clone(),
                });
            }
        }
        if let Some(m) = meta.as_ref().filter(|m| m.file_type().is_file()) {
            for (label, dev, ino) in &files {
                if m.dev() == *dev && m.ino() == *ino {
                    reasons.push(InUse::Swap {
                        device: label.clone(),
                    });
                }
            }
        }
    }

    // Holders, but not the target's own stack (a dm member is held by its dm device).
    let chain = set.chain();
    for (label, name, _, _) in &blocks {
        let dir = paths.class_block(name).join("holders");
        let holders: Vec<String> = dir_names_checked(&dir)?
            .into_iter()
            .filter(|h| !chain.contains(h.as_str()))
            .collect();
        if !holders.is_empty() {
            reasons.push(InUse::Holders {
                device: label.clone(),
                holders,
            });
        }
    }

    reasons.extend(same_identity(&blocks, paths));

    for (name, backing) in &set.unidentified {
        reasons.push(InUse::Unidentified {
            device: format!("/dev/{name}"),
            backing: backing.clone(),
        });
    }

    reasons.dedup();
    Ok(reasons)
}

/// A whole disk at the bottom of a stack, with an identity of its own: not a partition,
/// not a loop device (its `loop:` serial is made up; loop devices are matched by their
/// backing file), not dm/md (no `slaves/`), not a hidden NVMe path device.
fn is_leaf_disk(paths: &SystemPaths, name: &str) -> bool {
    let dir = paths.class_block(name);
    !dir.join("partition").exists()
        && !dir.join("loop").exists()
        && !name.starts_with("loop")
        && dir_names(&dir.join("slaves")).is_empty()
        && read_attr(&dir.join("hidden")).as_deref() != Some("1")
}

/// One LUN: the same WWN; or, when either has none, the same serial. (NVMe namespaces of
/// one controller share its serial but each has its own WWN.)
fn same_lun(a: &DeviceIdentity, b: &DeviceIdentity) -> Option<String> {
    match (&a.wwn, &b.wwn) {
        (Some(x), Some(y)) => (x == y).then(|| format!("WWN {x}")),
        _ => match (&a.serial, &b.serial) {
            (Some(x), Some(y)) if x == y => Some(format!("serial {x}")),
            _ => None,
        },
    }
}

/// Whether a dm-multipath device (`dm/uuid` starting with `mpath-`) holds both.
fn multipath_holds_both(paths: &SystemPaths, a: &str, b: &str) -> bool {
    let ha = dir_names(&paths.class_block(a).join("holders"));
    let hb = dir_names(&paths.class_block(b).join("holders"));
    ha.iter().filter(|h| hb.contains(h)).any(|h| {
        read_attr(&paths.class_block(h).join("dm/uuid")).is_some_and(|u| u.starts_with("mpath-"))
    })
}

/// The same LUN seen through another block device (a second path without multipath): for
/// every whole disk in the set, every other disk on the system with the same WWN or
/// serial that no dm-multipath device holds together with it.
fn same_identity(blocks: &[(String, String, u32, u32)], paths: &SystemPaths) -> Vec<InUse> {
    let leaves: Vec<&(String, String, u32, u32)> = blocks
        .iter()
        .filter(|(_, n, _, _)| is_leaf_disk(paths, n))
        .collect();
    if leaves.is_empty() {
        return Vec::new();
    }
    let mut others = Vec::new();
    for name in dir_names(&paths.sys.join("class/block")) {
        if !is_leaf_disk(paths, &name) {
            continue;
        }
        let Ok((ma, mi)) = read_dev_numbers(&paths.class_block(&name).join("dev")) else {
            continue;
        };
        let id = read_identity(paths, &name, ma, mi);
        if id.serial.is_some() || id.wwn.is_some() {
            others.push((name, id));
        }
    }
    let mut out = Vec::new();
    for (label, name, ma, mi) in leaves {
        let id = read_identity(paths, name, *ma, *mi);
        for (other, oid) in others.iter().filter(|(o, _)| o != name) {
            if let Some(what) = same_lun(&id, oid) {
                if !multipath_holds_both(paths, name, other) {
                    out.push(InUse::SameIdentity {
                        device: format!("/dev/{other}"),
                        of: label.clone(),
                        id: what,
                    });
                }
            }
        }
    }
    out
}

/// WWNs are written as `0x5002538e...`, `naa.5002538e...` or `eui.0025...`: compare the
/// hex digits.
pub fn normalize_wwn(w: &str) -> String {
    let w = w.trim().to_ascii_lowercase();
    let w = w
        .strip_prefix("0x")
        .or_else(|| w.strip_prefix("naa."))
        .or_else(|| w.strip_prefix("eui."))
        .unwrap_or(&w);
    w.to_string()
}

#[cfg(test)]
mod tests {

    #[test]
    fn vpd_page_80_gives_the_serial() {
        let mut p = vec![0x00, 0x80, 0x00, 0x14];
        p.extend_from_slice(b"QM00005             ");
        assert_eq!(parse_vpd_serial(&p).as_deref(), Some("QM00005"));
        assert_eq!(parse_vpd_serial(&[0, 0x83, 0, 2, b'a', b'b']), None);
        assert_eq!(
            parse_vpd_serial(&[0, 0x80, 0, 40, b'x']).as_deref(),
            Some("x")
        );
        assert_eq!(parse_vpd_serial(&[0, 0x80, 0, 4, b' ', 0, b' ', 0]), None);
        assert_eq!(parse_vpd_serial(&[]), None);
    }

    use super::*;

    /// The cached mount table is the same until a mount or an unmount, then the new one
    /// (needs root: it mounts a tmpfs on a temporary directory).
    #[test]
    #[cfg_attr(
        not(feature = "system-tests"),
        ignore = "needs root (mounts a tmpfs): scripts/test runs it"
    )]
    fn the_mount_table_is_read_again_when_and_only_when_it_changes() {
        let paths = SystemPaths::default();
        // Unchanged: the same table, not read again (another process's mount may come
        // between two reads: a few tries).
        let same = (0..5).any(|_| {
            let a = mount_table(&paths).unwrap();
            let b = mount_table(&paths).unwrap();
            std::sync::Arc::ptr_eq(&a, &b)
        });
        assert!(same, "the mount table was read again with no change");
        let dir = tempfile::tempdir().unwrap();
        let at = fs::canonicalize(dir.path()).unwrap();
        let has = |t: &[MountEntry]| t.iter().any(|m| m.mountpoint == at);
        let before = mount_table(&paths).unwrap();
        assert!(!has(&before));
        let mount = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=1m", "dp-test"])
            .arg(&at)
            .status()
            .unwrap();
        assert!(mount.success(), "mount -t tmpfs needs root");
        struct Unmount<'a>(&'a Path);
        impl Drop for Unmount<'_> {
            fn drop(&mut self) {
                let _ = std::process::Command::new("umount").arg(self.0).status();
            }
        }
        let guard = Unmount(&at);
        let mounted = mount_table(&paths).unwrap();
        drop(guard);
        assert!(has(&mounted), "the new mount is not in the table");
        assert!(
            !has(&mount_table(&paths).unwrap()),
            "the unmount is not seen"
        );
    }

    const MOUNTINFO: &str = "\
22 27 0:21 / /proc rw,relatime - proc proc rw
27 1 254:1 / / rw,relatime shared:1 - ext4 /dev/vda1 rw
101 27 7:3 / /mnt/with\\040space\\011tab rw,relatime shared:55 master:2 - ext4 /dev/loop3 rw
102 27 259:4 /sub /mnt/back\\134slash rw - xfs /dev/loop3p1 rw,attr2
103 27 0:55 / /mnt/btrfs rw - btrfs /dev/loop9 rw
garbage line
";

    #[test]
    fn mountinfo_fields_and_escapes() {
        let m = parse_mountinfo(MOUNTINFO);
        assert_eq!(m.len(), 5);
        assert_eq!((m[1].major, m[1].minor), (254, 1));
        assert_eq!(m[1].mountpoint, PathBuf::from("/"));
        assert_eq!(m[1].source, "/dev/vda1");
        assert_eq!((m[2].major, m[2].minor), (7, 3));
        assert_eq!(m[2].mountpoint, PathBuf::from("/mnt/with space\ttab"));
        assert_eq!(m[2].fstype, "ext4");
        assert_eq!(m[2].source, "/dev/loop3");
        assert_eq!(m[3].root, PathBuf::from("/sub"));
        assert_eq!(m[3].mountpoint, PathBuf::from("/mnt/back\\slash"));
        assert_eq!(m[3].fstype, "xfs");
        assert_eq!(m[4].source, "/dev/loop9");
    }

    #[test]
    fn unescape_leaves_non_octal_alone() {
        assert_eq!(unescape("a\\x40b\\"), "a\\x40b\\");
        assert_eq!(unescape("\\040\\04"), " \\04");
    }

    #[test]
    fn swaps_parsing() {
        let text = "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n\
                    /dev/loop5                              partition\t65532\t\t0\t\t-2\n\
                    /var/swap\\040file                        file\t\t1024\t\t0\t\t-3\n";
        let s = parse_swaps(text);
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].path, PathBuf::from("/dev/loop5"));
        assert_eq!(s[0].kind, "partition");
        assert_eq!(s[1].path, PathBuf::from("/var/swap file"));
        assert_eq!(s[1].kind, "file");
        assert!(parse_swaps("Filename Type Size Used Priority\n").is_empty());
    }

    #[test]
    fn udev_properties() {
        let text = "S:disk/by-id/nvme-Samsung_SSD_980_S4XXNF0M123456\n\
                    I:1234567\n\
                    E:ID_SERIAL_SHORT=S4XXNF0M123456 \n\
                    E:ID_WWN=eui.002538b111b2c3d4\n\
                    E:ID_MODEL=Samsung SSD 980\n\
                    E:EMPTY=\n\
                    G:systemd\n";
        let p = parse_udev_properties(text);
        assert_eq!(p["ID_SERIAL_SHORT"], "S4XXNF0M123456");
        assert_eq!(p["ID_WWN"], "eui.002538b111b2c3d4");
        assert_eq!(p["ID_MODEL"], "Samsung SSD 980");
        assert_eq!(p["EMPTY"], "");
        assert!(!p.contains_key("I"));
    }

    #[test]
    fn in_use_display() {
        let m = InUse::Mounted {
            device: "/dev/loop3p1".into(),
            mountpoint: "/mnt/x".into(),
        };
        assert_eq!(m.to_string(), "/dev/loop3p1 is mounted on /mnt/x");
        let h = InUse::Holders {
            device: "/dev/sda".into(),
            holders: vec!["dm-0".into(), "md0".into()],
        };
        assert!(h.to_string().starts_with("/dev/sda is held by dm-0, md0"));
    }

    /// A fake sysfs (and /proc) tree in a temporary folder, and the paths that read it.
    /// Also the tree of `discovery`'s tests.
    struct FakeSys {
        _dir: tempfile::TempDir,
        paths: SystemPaths,
    }

    /// Writes `text` at `path`, making its folders.
    fn write(path: &Path, text: &str) {
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, text).unwrap();
    }

    /// Disk `fakedisk` (7:200) with partition `fakedisk1` (259:200) and `fakedisk2`
    /// (259:201).
    fn fake_sys(mountinfo: &str, swaps: &str) -> FakeSys {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let disk = root.join("sys/devices/virtual/block/fakedisk");
        write(&disk.join("dev"), "7:200\n");
        fs::create_dir_all(disk.join("holders")).unwrap();
        for (i, p) in ["fakedisk1", "fakedisk2"].iter().enumerate() {
            write(&disk.join(p).join("dev"), &format!("259:{}\n", 200 + i));
            write(&disk.join(p).join("partition"), &format!("{}\n", i + 1));
            fs::create_dir_all(disk.join(p).join("holders")).unwrap();
        }
        write(&disk.join("device/serial"), "  SER123  \n");
        write(&disk.join("wwid"), "naa.5000c500a1b2c3d4\n");
        write(&disk.join("device/model"), "FAKE MODEL    \n");
        let class = root.join("sys/class/block");
        fs::create_dir_all(&class).unwrap();
        std::os::unix::fs::symlink(&disk, class.join("fakedisk")).unwrap();
        for p in ["fakedisk1", "fakedisk2"] {
            std::os::unix::fs::symlink(disk.join(p), class.join(p)).unwrap();
        }
        write(&root.join("mountinfo"), mountinfo);
        write(&root.join("swaps"), swaps);
        fs::create_dir_all(root.join("udev")).unwrap();
        let paths = SystemPaths {
            sys: root.join("sys"),
            mountinfo: root.join("mountinfo"),
            swaps: root.join("swaps"),
            udev_data: root.join("udev"),
        };
        FakeSys { _dir: dir, paths }
    }

    fn fake_info(fake: &FakeSys) -> BlockDeviceInfo {
        let identity = read_identity(&fake.paths, "fakedisk", 7, 200);
        BlockDeviceInfo {
            path: "/dev/fakedisk".into(),
            name: "fakedisk".into(),
            major: 7,
            minor: 200,
            size_bytes: 0,
            logical_block_size: 512,
            physical_block_size: 512,
            is_partition: false,
            partitions: list_partitions(&fake.paths.class_block("fakedisk")).unwrap(),
            parent: None,
            identity,
        }
    }

    #[test]
    fn fake_sysfs_identity_and_partitions() {
        let fake = fake_sys("", "Filename Type\n");
        let info = fake_info(&fake);
        assert_eq!(info.partitions, ["fakedisk1", "fakedisk2"]);
        assert_eq!(info.identity.serial.as_deref(), Some("SER123"));
        assert_eq!(info.identity.wwn.as_deref(), Some("naa.5000c500a1b2c3d4"));
        assert_eq!(info.identity.model.as_deref(), Some("FAKE MODEL"));
        assert_eq!(in_use_with(&info, &fake.paths).unwrap(), []);
    }

    #[test]
    fn udev_identity_fallback() {
        let fake = fake_sys("", "");
        let disk = fake.paths.sys.join("class/block/fakedisk");
        fs::remove_file(disk.join("device/serial")).unwrap();
        fs::remove_file(disk.join("wwid")).unwrap();
        write(
            &fake.paths.udev_data.join("b7:200"),
            "E:ID_SERIAL_SHORT=UDEVSER\nE:ID_WWN=0x5000c500a1b2c3d4\n",
        );
        let id = read_identity(&fake.paths, "fakedisk", 7, 200);
        assert_eq!(id.serial.as_deref(), Some("UDEVSER"));
        assert_eq!(id.wwn.as_deref(), Some("0x5000c500a1b2c3d4"));
    }

    /// Issue 18: a virtio disk's serial is its own `serial` attribute (udev names it
    /// ID_SERIAL, not ID_SERIAL_SHORT): without it discovery named virtio disks by their
    /// kernel name, which hot-plug reuses.
    #[test]
    fn a_virtio_disk_s_serial_is_its_serial_attribute() {
        let fake = fake_sys("", "");
        let disk = fake.paths.sys.join("class/block/fakedisk");
        fs::remove_file(disk.join("device/serial")).unwrap();
        write(&disk.join("serial"), "VIRTSN01\n");
        write(
            &fake.paths.udev_data.join("b7:200"),
            "E:ID_SERIAL=VIRTSN01\n",
        );
        let id = read_identity(&fake.paths, "fakedisk", 7, 200);
        assert_eq!(id.serial.as_deref(), Some("VIRTSN01"));
    }

    #[test]
    fn fake_sysfs_partition_mounted_swap_and_held() {
        let mountinfo = "40 1 259:201 / /mnt/a\\040b rw - ext4 /dev/fakedisk2 rw\n";
        let swaps = "Filename Type Size Used Priority\n/dev/fakedisk1 partition 100 0 -2\n";
        let fake = fake_sys(mountinfo, swaps);
        let holder = fake.paths.sys.join("class/block/fakedisk1/holders/dm-7");
        fs::create_dir_all(holder).unwrap();
        let info = fake_info(&fake);
        let reasons = in_use_with(&info, &fake.paths).unwrap();
        assert_eq!(
            reasons,
            [
                InUse::Mounted {
                    device: "/dev/fakedisk2".into(),
                    mountpoint: "/mnt/a b".into()
                },
                InUse::Swap {
                    device: "/dev/fakedisk1".into()
                },
                InUse::Holders {
                    device: "/dev/fakedisk1".into(),
                    holders: vec!["dm-7".into()]
                },
            ]
        );
    }

    #[test]
    fn fake_sysfs_partition_sees_parent_holders() {
        let fake = fake_sys("", "");
        fs::create_dir_all(fake.paths.sys.join("class/block/fakedisk/holders/dm-1")).unwrap();
        let mut info = fake_info(&fake);
        info.name = "fakedisk1".into();
        info.major = 259;
        info.minor = 200;
        info.is_partition = true;
        info.partitions.clear();
        info.parent = Some("fakedisk".into());
        let reasons = in_use_with(&info, &fake.paths).unwrap();
        assert_eq!(
            reasons,
            [InUse::Holders {
                device: "/dev/fakedisk".into(),
                holders: vec!["dm-1".into()]
            }]
        );
    }

    #[test]
    fn inspect_refuses_non_block() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("plain");
        fs::write(&f, b"x").unwrap();
        assert!(matches!(inspect(&f), Err(DeviceError::NotBlockDevice(_))));
        assert!(matches!(
            inspect(&dir.path().join("missing")),
            Err(DeviceError::Io { .. })
        ));
    }

    /// A fake sysfs for [`drives_of_file`]: block devices under `sys/devices/...` with
    /// `dev`, `size` and queue files, `class/block/NAME` and `dev/block/MAJ:MIN` links.
    struct FakeStack {
        dir: tempfile::TempDir,
        paths: SystemPaths,
    }

    impl FakeStack {
        fn new(mountinfo: &str) -> FakeStack {
            let dir = tempfile::tempdir().unwrap();
            let root = dir.path();
            fs::create_dir_all(root.join("sys/class/block")).unwrap();
            fs::create_dir_all(root.join("sys/dev/block")).unwrap();
            fs::create_dir_all(root.join("udev")).unwrap();
            write(&root.join("mountinfo"), mountinfo);
            let paths = SystemPaths {
                sys: root.join("sys"),
                mountinfo: root.join("mountinfo"),
                swaps: root.join("swaps"),
                udev_data: root.join("udev"),
            };
            FakeStack { dir, paths }
        }

        /// Adds a device at `sys/devices/REL` (REL ends with its kernel name).
        fn add(&self, rel: &str, dev: &str, partition: bool) -> PathBuf {
            let sys = &self.paths.sys;
            let d = sys.join("devices").join(rel);
            let name = d.file_name().unwrap().to_str().unwrap().to_string();
            write(&d.join("dev"), &format!("{dev}\n"));
            write(&d.join("size"), "2048\n");
            fs::create_dir_all(d.join("holders")).unwrap();
            if partition {
                write(&d.join("partition"), "1\n");
            } else {
                write(&d.join("queue/logical_block_size"), "512\n");
                write(&d.join("queue/physical_block_size"), "4096\n");
                fs::create_dir_all(d.join("slaves")).unwrap();
            }
            std::os::unix::fs::symlink(&d, sys.join("class/block").join(&name)).unwrap();
            std::os::unix::fs::symlink(&d, sys.join("dev/block").join(dev)).unwrap();
            d
        }

        /// Makes `lower` (a kernel name) a slave of `upper`, and `upper` its holder.
        fn stack(&self, upper: &str, lower: &str) {
            let class = self.paths.sys.join("class/block");
            let up = fs::canonicalize(class.join(upper)).unwrap();
            let low = fs::canonicalize(class.join(lower)).unwrap();
            std::os::unix::fs::symlink(&low, up.join("slaves").join(lower)).unwrap();
            std::os::unix::fs::symlink(&up, low.join("holders").join(upper)).unwrap();
        }

        fn drives(&self, major: u32, minor: u32) -> Result<FileDrives, DeviceError> {
            drives_of_dev_number(Path::new("/data/file"), major, minor, &self.paths)
        }
    }

    fn disk_names(d: &FileDrives) -> Vec<&str> {
        d.disks.iter().map(|i| i.name.as_str()).collect()
    }

    #[test]
    fn file_on_partition_belongs_to_its_disk() {
        let fake = FakeStack::new("");
        let sda = fake.add("pci0000:00/ata1/block/sda", "8:0", false);
        write(&sda.join("device/serial"), "SATA-SER\n");
        write(&sda.join("device/model"), "FAKE SATA\n");
        fake.add("pci0000:00/ata1/block/sda/sda1", "8:1", true);
        fake.add("pci0000:00/ata1/block/sda/sda2", "8:2", true);
        let d = fake.drives(8, 2).unwrap();
        assert_eq!(d.filesystem_device, "sda2");
        assert_eq!(d.via, ["sda2", "sda"]);
        assert_eq!(disk_names(&d), ["sda"]);
        let disk = &d.disks[0];
        assert_eq!((disk.major, disk.minor), (8, 0));
        assert!(!disk.is_partition);
        assert_eq!(disk.partitions, ["sda1", "sda2"]);
        assert_eq!(disk.size_bytes, 2048 * 512);
        assert_eq!(
            (disk.logical_block_size, disk.physical_block_size),
            (512, 4096)
        );
        assert_eq!(disk.identity.serial.as_deref(), Some("SATA-SER"));
        assert_eq!(disk.identity.model.as_deref(), Some("FAKE SATA"));
    }

    #[test]
    fn file_on_plain_disk_belongs_to_it() {
        let fake = FakeStack::new("");
        let nvme = fake.add("pci0000:00/nvme/nvme0/nvme0n1", "259:0", false);
        write(&nvme.join("wwid"), "eui.0025388b91b2c3d4\n");
        let d = fake.drives(259, 0).unwrap();
        assert_eq!(d.filesystem_device, "nvme0n1");
        assert_eq!(d.via, ["nvme0n1"]);
        assert_eq!(disk_names(&d), ["nvme0n1"]);
        assert!(d.disks[0].partitions.is_empty());
        assert_eq!(
            d.disks[0].identity.wwn.as_deref(),
            Some("eui.0025388b91b2c3d4")
        );
    }

    #[test]
    fn file_on_lvm_over_raid1_belongs_to_both_disks() {
        // dm-0 (LVM) over md0 (RAID1) over sdb1 and sda1; sdc is unrelated.
        let fake = FakeStack::new("");
        for (disk, major_minor) in [("sdb", 16), ("sda", 0), ("sdc", 32)] {
            fake.add(
                &format!("pci0000:00/ata/block/{disk}"),
                &format!("8:{major_minor}"),
                false,
            );
            fake.add(
                &format!("pci0000:00/ata/block/{disk}/{disk}1"),
                &format!("8:{}", major_minor + 1),
                true,
            );
        }
        fake.add("virtual/block/md0", "9:0", false);
        fake.add("virtual/block/dm-0", "253:0", false);
        fake.stack("md0", "sdb1");
        fake.stack("md0", "sda1");
        fake.stack("dm-0", "md0");
        let d = fake.drives(253, 0).unwrap();
        assert_eq!(d.filesystem_device, "dm-0");
        assert_eq!(d.via, ["dm-0", "md0", "sda1", "sda", "sdb1", "sdb"]);
        assert_eq!(disk_names(&d), ["sda", "sdb"]);
        assert!(d.disks.iter().all(|i| !i.is_partition));

        // dm over two partitions of one disk: the disk once.
        fake.add("pci0000:00/ata/block/sdc/sdc2", "8:34", true);
        fake.add("virtual/block/dm-1", "253:1", false);
        fake.stack("dm-1", "sdc1");
        fake.stack("dm-1", "sdc2");
        let d = fake.drives(253, 1).unwrap();
        assert_eq!(d.via, ["dm-1", "sdc1", "sdc", "sdc2"]);
        assert_eq!(disk_names(&d), ["sdc"]);
    }

    #[test]
    fn file_on_anonymous_device_is_not_on_a_block_device() {
        let fake = FakeStack::new(
            "25 24 0:23 / /dev/shm rw,relatime - tmpfs tmpfs rw\n\
             26 1 0:40 / /merged rw - overlay overlay rw,lowerdir=/a,upperdir=/b\n",
        );
        fake.add("pci0000:00/ata/block/sda", "8:0", false);
        let err = fake.drives(0, 23).unwrap_err();
        assert!(
            matches!(&err, DeviceError::NotOnBlockDevice { fstype: Some(t), major: 0, minor: 23, .. } if t == "tmpfs"),
            "{err:?}"
        );
        let msg = err.to_string();
        assert!(msg.starts_with("/data/file: its filesystem (tmpfs, device 0:23)"));
        assert!(msg.contains("not on a block device"), "{msg}");
        assert!(msg.contains("serial or WWN"), "{msg}");
        let err = fake.drives(0, 40).unwrap_err();
        assert!(err.to_string().contains("(overlay, device 0:40)"), "{err}");
        let err = fake.drives(0, 99).unwrap_err();
        assert!(
            err.to_string().contains("(unknown type, device 0:99)"),
            "{err}"
        );
    }

    #[test]
    fn file_on_btrfs_belongs_to_every_member_disk() {
        // btrfs over sda1 and sdb (device numbers of btrfs files are anonymous).
        let fake = FakeStack::new(
            "40 1 0:55 / /pool rw - btrfs /dev/sda1 rw\n\
             41 1 0:56 /sub /snap rw - btrfs /dev/nonexistent9 rw\n",
        );
        fake.add("pci0000:00/ata/block/sda", "8:0", false);
        fake.add("pci0000:00/ata/block/sda/sda1", "8:1", true);
        fake.add("pci0000:00/ata/block/sdb", "8:16", false);
        let devices = fake
            .paths
            .sys
            .join("fs/btrfs/0b3c5c5e-5a1f-4d0e-9a59-5b0c1d2e3f40/devices");
        fs::create_dir_all(&devices).unwrap();
        for name in ["sdb", "sda1"] {
            let target = fake.paths.sys.join("class/block").join(name);
            std::os::unix::fs::symlink(target, devices.join(name)).unwrap();
        }
        let d = fake.drives(0, 55).unwrap();
        assert_eq!(d.filesystem_device, "sda1");
        assert_eq!(d.via, ["sda1", "sda", "sdb"]);
        assert_eq!(disk_names(&d), ["sda", "sdb"]);
        // A btrfs whose source is not in sysfs: the clear error, naming btrfs.
        let err = fake.drives(0, 56).unwrap_err();
        assert!(err.to_string().contains("(btrfs, device 0:56)"), "{err}");
    }

    #[test]
    fn drives_of_file_with_stats_the_file() {
        let fake = FakeStack::new("");
        let f = fake.dir.path().join("plain");
        fs::write(&f, b"x").unwrap();
        // The fake sysfs has no device for this file's st_dev, nor a mount table entry.
        let err = drives_of_file_with(&f, &fake.paths).unwrap_err();
        assert!(
            matches!(&err, DeviceError::NotOnBlockDevice { fstype: None, .. }),
            "{err:?}"
        );
        assert!(matches!(
            drives_of_file_with(&fake.dir.path().join("missing"), &fake.paths),
            Err(DeviceError::Io { .. })
        ));
    }

    // ---- aliases (fake sysfs) ----

    impl FakeStack {
        /// A bound loop device `name` over `backing` (the path sysfs would show).
        fn add_loop(&self, name: &str, dev: &str, backing: &str) {
            let d = self.add(&format!("virtual/block/{name}"), dev, false);
            write(&d.join("loop/backing_file"), &format!("{backing}\n"));
        }

        fn reasons(&self, name: &str) -> Vec<InUse> {
            let set = alias_set_of_block_with(name, &self.paths).unwrap();
            aliases_in_use_with(&set, &self.paths).unwrap()
        }

        fn set_mounts(&self, mountinfo: &str, swaps: &str) {
            write(&self.paths.mountinfo, mountinfo);
            write(&self.paths.swaps, swaps);
        }
    }

    fn mounted(device: &str, at: &str) -> InUse {
        InUse::Mounted {
            device: device.into(),
            mountpoint: at.into(),
        }
    }

    fn names(set: &AliasSet) -> Vec<String> {
        set.members
            .iter()
            .map(|a| match &a.name {
                StorageName::Block(n) => n.clone(),
                StorageName::File { .. } => "<file>".into(),
            })
            .collect()
    }

    #[test]
    fn alias_loops_over_one_file_and_stacked_loops() {
        // fakeloop0 over img (mounted), fakeloop1 over img too, fakeloop2 over fakeloop0,
        // fakeloop3 over fakeloop2; fakeloop4 over another file.
        let fake = FakeStack::new("");
        let img = fake.dir.path().join("fs.img");
        let other = fake.dir.path().join("other.img");
        fs::write(&img, b"x").unwrap();
        fs::write(&other, b"y").unwrap();
        let img_s = img.to_str().unwrap();
        fake.add_loop("fakeloop0", "7:100", img_s);
        fake.add_loop("fakeloop1", "7:101", img_s);
        fake.add_loop("fakeloop2", "7:102", "/dev/fakeloop0");
        fake.add_loop("fakeloop3", "7:103", "/dev/fakeloop2");
        fake.add_loop("fakeloop4", "7:104", other.to_str().unwrap());
        fake.set_mounts("40 1 7:100 / /mnt/fs rw - ext4 /dev/fakeloop0 rw\n", "");

        // The mounted one itself: plain, as before.
        assert_eq!(
            fake.reasons("fakeloop0"),
            [mounted("/dev/fakeloop0", "/mnt/fs")]
        );
        // A second loop device over the same file: down to the file, up to fakeloop0.
        let set = alias_set_of_block_with("fakeloop1", &fake.paths).unwrap();
        assert_eq!(
            names(&set),
            ["fakeloop1", "<file>", "fakeloop0", "fakeloop2", "fakeloop3"]
        );
        assert_eq!(
            fake.reasons("fakeloop1"),
            [mounted(
                &format!("/dev/fakeloop0 (a loop device over {img_s})"),
                "/mnt/fs"
            )]
        );
        // Stacked on the mounted one (and two levels up): down to fakeloop0.
        assert_eq!(
            fake.reasons("fakeloop2"),
            [mounted(
                "/dev/fakeloop0 (the backing device of /dev/fakeloop2)",
                "/mnt/fs"
            )]
        );
        assert_eq!(
            fake.reasons("fakeloop3"),
            [mounted(
                "/dev/fakeloop0 (the backing device of /dev/fakeloop2)",
                "/mnt/fs"
            )]
        );
        // The file: every loop device over it and what is on them.
        let meta = fs::metadata(&img).unwrap();
        let set = alias_set_of_file_with(meta.dev(), meta.ino(), img_s, &fake.paths).unwrap();
        assert_eq!(
            set.block_devices(),
            [
                "/dev/fakeloop0",
                "/dev/fakeloop1",
                "/dev/fakeloop2",
                "/dev/fakeloop3"
            ]
        );
        assert_eq!(
            aliases_in_use_with(&set, &fake.paths).unwrap(),
            [mounted(
                &format!("/dev/fakeloop0 (a loop device over {img_s})"),
                "/mnt/fs"
            )]
        );
        // Another file's loop device is no alias.
        assert_eq!(fake.reasons("fakeloop4"), []);
        assert_eq!(
            names(&alias_set_of_block_with("fakeloop4", &fake.paths).unwrap()),
            ["fakeloop4", "<file>"]
        );

        // Up from the target: fakeloop2 (stacked on fakeloop0) mounted makes fakeloop0 busy.
        fake.set_mounts("41 1 7:102 / /mnt/up rw - ext4 /dev/fakeloop2 rw\n", "");
        assert_eq!(
            fake.reasons("fakeloop1"),
            [mounted(
                "/dev/fakeloop2 (a loop device over /dev/fakeloop0)",
                "/mnt/up"
            )]
        );
        // And swap on one of them counts as well.
        fake.set_mounts(
            "",
            "Filename Type Size Used Priority\n/dev/fakeloop3 partition 100 0 -2\n",
        );
        assert_eq!(
            fake.reasons("fakeloop0"),
            [InUse::Swap {
                device: "/dev/fakeloop3 (a loop device over /dev/fakeloop2)".into()
            }]
        );
    }

    #[test]
    fn alias_a_swap_file_and_a_deleted_backing_file() {
        let fake = FakeStack::new("");
        let img = fake.dir.path().join("swapfile");
        fs::write(&img, b"x").unwrap();
        let meta = fs::metadata(&img).unwrap();
        fake.set_mounts(
            "",
            &format!(
                "Filename Type Size Used Priority\n{} file 100 0 -2\n",
                img.display()
            ),
        );
        let label = img.to_str().unwrap();
        let set = alias_set_of_file_with(meta.dev(), meta.ino(), label, &fake.paths).unwrap();
        assert_eq!(
            aliases_in_use_with(&set, &fake.paths).unwrap(),
            [InUse::Swap {
                device: label.into()
            }]
        );
        // A loop device whose backing file was deleted and that cannot be asked: a doubt,
        // in every set.
        fake.set_mounts("", "");
        fake.add_loop("fakeloop9", "7:109", "/gone/fs.img (deleted)");
        fake.add("pci0000:00/ata/block/sdz", "8:240", false);
        let r = fake.reasons("sdz");
        assert_eq!(
            r,
            [InUse::Unidentified {
                device: "/dev/fakeloop9".into(),
                backing: "/gone/fs.img (deleted)".into()
            }]
        );
        assert!(
            r[0].to_string().contains("cannot be identified"),
            "{}",
            r[0]
        );
    }

    #[test]
    fn alias_dm_and_md_members_and_holders() {
        // dm-0 and dm-1 (two LVs) over sda1; md0 over sdb1 and sdc1; dm-2 over md0.
        let fake = FakeStack::new("");
        for (disk, mm) in [("sda", 0), ("sdb", 16), ("sdc", 32)] {
            fake.add(
                &format!("pci0000:00/ata/block/{disk}"),
                &format!("8:{mm}"),
                false,
            );
            fake.add(
                &format!("pci0000:00/ata/block/{disk}/{disk}1"),
                &format!("8:{}", mm + 1),
                true,
            );
        }
        fake.add("virtual/block/dm-0", "253:0", false);
        fake.add("virtual/block/dm-1", "253:1", false);
        fake.add("virtual/block/md0", "9:0", false);
        fake.add("virtual/block/dm-2", "253:2", false);
        fake.stack("dm-0", "sda1");
        fake.stack("dm-1", "sda1");
        fake.stack("md0", "sdb1");
        fake.stack("md0", "sdc1");
        fake.stack("dm-2", "md0");
        fake.set_mounts("", "");

        // The whole stack under dm-2 is its own: nothing in use.
        assert_eq!(fake.reasons("dm-2"), []);
        let set = alias_set_of_block_with("dm-2", &fake.paths).unwrap();
        assert_eq!(
            names(&set),
            ["dm-2", "md0", "sdb1", "sdc1", "sdb", "sdc"],
            "{set:?}"
        );
        // A member of md0: held, and what holds it is named, up the stack.
        assert_eq!(
            fake.reasons("sdb"),
            [
                InUse::Holders {
                    device: "/dev/sdb1".into(),
                    holders: vec!["md0".into()]
                },
                InUse::Holders {
                    device: "/dev/md0 (over /dev/sdb1)".into(),
                    holders: vec!["dm-2".into()]
                }
            ]
        );
        // md0 mounted through dm-2: writing a member names the mount too.
        fake.set_mounts("40 1 253:2 / /data rw - xfs /dev/dm-2 rw\n", "");
        let r = fake.reasons("sdc1");
        assert!(
            r.contains(&mounted("/dev/dm-2 (over /dev/md0)", "/data")),
            "{r:?}"
        );
        assert!(r.contains(&InUse::Holders {
            device: "/dev/sdc1".into(),
            holders: vec!["md0".into()]
        }));
        // An LV whose PV also holds another LV: the other is named (its extents are
        // unknown from sysfs, so it is taken as the same storage).
        fake.set_mounts("40 1 253:1 / /home rw - ext4 /dev/dm-1 rw\n", "");
        let r = fake.reasons("dm-0");
        assert_eq!(
            r,
            [
                mounted("/dev/dm-1 (over /dev/sda1)", "/home"),
                InUse::Holders {
                    device: "/dev/sda1 (under /dev/dm-0)".into(),
                    holders: vec!["dm-1".into()]
                },
            ]
        );
        // Partitions do not overlap: sda1's stack is not an alias of a free sibling.
        fake.add("pci0000:00/ata/block/sda/sda2", "8:2", true);
        assert_eq!(fake.reasons("sda2"), []);
    }

    #[test]
    fn alias_one_lun_on_two_paths() {
        let fake = FakeStack::new("");
        let sda = fake.add("pci0000:00/host0/block/sda", "8:0", false);
        let sdb = fake.add("pci0000:00/host1/block/sdb", "8:16", false);
        let sdc = fake.add("pci0000:00/host1/block/sdc", "8:32", false);
        for d in [&sda, &sdb] {
            write(&d.join("wwid"), "naa.600a098038303053453f463045727a6b\n");
            write(&d.join("device/serial"), "LUN-1\n");
        }
        write(&sdc.join("wwid"), "naa.600a098038303053453f463045727a6c\n");
        // Two NVMe namespaces: one controller serial, a WWN each.
        for (i, ns) in ["nvme0n1", "nvme0n2"].iter().enumerate() {
            let d = fake.add(
                &format!("pci0000:00/nvme/nvme0/{ns}"),
                &format!("259:{i}"),
                false,
            );
            write(&d.join("device/serial"), "CTRL-SER\n");
            write(&d.join("wwid"), &format!("eui.00000000000000{i:02}\n"));
        }
        fake.set_mounts("", "");
        let want = InUse::SameIdentity {
            device: "/dev/sdb".into(),
            of: "/dev/sda".into(),
            id: "WWN naa.600a098038303053453f463045727a6b".into(),
        };
        assert_eq!(fake.reasons("sda"), std::slice::from_ref(&want));
        assert!(want.to_string().contains("without multipath"), "{want}");
        assert_eq!(fake.reasons("sdc"), []);
        assert_eq!(fake.reasons("nvme0n1"), []);
        // Without WWNs the serial decides.
        fs::remove_file(sda.join("wwid")).unwrap();
        fs::remove_file(sdb.join("wwid")).unwrap();
        assert!(matches!(
            &fake.reasons("sdb")[..],
            [InUse::SameIdentity { device, id, .. }] if device == "/dev/sda" && id == "serial LUN-1"
        ));

        // dm-multipath over both: the paths are its members; it may be written, they not.
        let mp = fake.add("virtual/block/dm-5", "253:5", false);
        write(
            &mp.join("dm/uuid"),
            "mpath-3600a098038303053453f463045727a6b\n",
        );
        fake.stack("dm-5", "sda");
        fake.stack("dm-5", "sdb");
        assert_eq!(fake.reasons("dm-5"), []);
        assert_eq!(
            fake.reasons("sda"),
            [InUse::Holders {
                device: "/dev/sda".into(),
                holders: vec!["dm-5".into()]
            }]
        );
        // A dm device that is not multipath does not make two paths one.
        write(&mp.join("dm/uuid"), "LVM-abc\n");
        let r = fake.reasons("dm-5");
        assert!(
            r.iter().any(|x| matches!(x, InUse::SameIdentity { .. })),
            "{r:?}"
        );
    }
}
