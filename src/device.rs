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
//! - **serial**: `/sys/class/block/NAME/device/serial` (NVMe, some SCSI), else udev's
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

/// Every reason the device, any of its partitions, or (for a partition) its whole disk is
/// in use: mounted, used as swap, or held (dm, md, LVM...). Empty when free.
pub fn in_use(info: &BlockDeviceInfo) -> Result<Vec<InUse>, DeviceError> {
    in_use_with(info, &SystemPaths::default())
}

/// [`in_use`] with the tables read from `paths`.
pub fn in_use_with(info: &BlockDeviceInfo, paths: &SystemPaths) -> Result<Vec<InUse>, DeviceError> {
    // (kernel name, major, minor) of everything whose use makes this device busy.
    let mut targets = vec![(info.name.clone(), info.major, info.minor)];
    for part in &info.partitions {
        let (ma, mi) = read_dev_numbers(&paths.class_block(part).join("dev"))?;
        targets.push((part.clone(), ma, mi));
    }
    if let Some(parent) = &info.parent {
        let (ma, mi) = read_dev_numbers(&paths.class_block(parent).join("dev"))?;
        targets.push((parent.clone(), ma, mi));
    }
    let dev_path = |name: &str| format!("/dev/{name}");

    let mut reasons = Vec::new();

    let mountinfo = read_text(&paths.mountinfo)?;
    for entry in parse_mountinfo(&mountinfo) {
        let source_rdev = block_rdev_of(Path::new(&entry.source));
        for (name, ma, mi) in &targets {
            let by_number = entry.major == *ma && entry.minor == *mi;
            // btrfs (and others) report an anonymous 0:N device in field 3: match the
            // mount source too.
            let by_source = source_rdev == Some(rustix::fs::makedev(*ma, *mi));
            if by_number || by_source {
                reasons.push(InUse::Mounted {
                    device: dev_path(name),
                    mountpoint: entry.mountpoint.clone(),
                });
            }
        }
    }

    let swaps = read_text(&paths.swaps)?;
    for entry in parse_swaps(&swaps) {
        let rdev = block_rdev_of(&entry.path);
        let base = entry
            .path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned());
        for (name, ma, mi) in &targets {
            let by_number = rdev == Some(rustix::fs::makedev(*ma, *mi));
            let by_name = base.as_deref() == Some(name.as_str());
            if by_number || by_name {
                reasons.push(InUse::Swap {
                    device: dev_path(name),
                });
            }
        }
    }

    for (name, _, _) in &targets {
        let dir = paths.class_block(name).join("holders");
        let mut holders = Vec::new();
        for entry in fs::read_dir(&dir).map_err(io_err(&dir))? {
            let entry = entry.map_err(io_err(&dir))?;
            holders.push(entry.file_name().to_string_lossy().into_owned());
        }
        if !holders.is_empty() {
            holders.sort();
            reasons.push(InUse::Holders {
                device: dev_path(name),
                holders,
            });
        }
    }

    reasons.dedup();
    Ok(reasons)
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
fn read_attr(path: &Path) -> Option<String> {
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
    let serial = read_attr(&dir.join("device/serial"))
        .or_else(|| udev_prop("ID_SERIAL_SHORT"))
        .or_else(|| {
            fs::read(dir.join("device/vpd_pg80"))
                .ok()
                .and_then(|b| parse_vpd_serial(&b))
        })
        .or_else(loop_serial);
    let wwn = read_attr(&dir.join("wwid"))
        .or_else(|| read_attr(&dir.join("device/wwid")))
        .or_else(|| udev_prop("ID_WWN"));
    let model = read_attr(&dir.join("device/model")).or_else(|| udev_prop("ID_MODEL"));
    DeviceIdentity { serial, wwn, model }
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
            let mount = fs::read_to_string(&paths.mountinfo).ok().and_then(|t| {
                parse_mountinfo(&t)
                    .into_iter()
                    .find(|m| m.major == major && m.minor == minor)
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
fn whole_disk_info(paths: &SystemPaths, name: &str) -> Result<BlockDeviceInfo, DeviceError> {
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

    /// A fake sysfs: disk `fakedisk` (7:200) with partition `fakedisk1` (259:200) and
    /// `fakedisk2` (259:201).
    struct FakeSys {
        _dir: tempfile::TempDir,
        paths: SystemPaths,
    }

    fn write(path: &Path, text: &str) {
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, text).unwrap();
    }

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
}
