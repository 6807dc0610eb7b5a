//! Discovery: every whole disk the kernel shows, classified, filtered, and merged with the
//! drives the config lists.
//!
//! - [`scan`] reads sysfs (through [`SystemPaths`], so tests use fake trees) with
//!   [`device::whole_disk_info`] for each disk's identity: NVMe namespaces, SCSI/SATA/SAS,
//!   virtio, USB, MMC and Xen disks are kept; partitions, loop (unless `include_loop`),
//!   ram, zram, dm, md, nbd, optical, floppy, mtd and the like, hidden NVMe paths,
//!   zero-size devices and a second path to one drive are skipped, each with a reason.
//! - [`raid_drives`] reads `smartctl --scan-open --json`: drives behind RAID controllers
//!   (megaraid, cciss, aacraid, areca...) become health-only drives with their `-d` type.
//! - [`merge`] makes the effective config: listed `[[drive]]` entries override
//!   discovered ones with the same serial, WWN or device; the rest get a read-only
//!   canary at their class's rate (`[discovery.canary.CLASS]`). Discovered drives are
//!   never written.
//!
//! Reads only.

mod merge;

pub use merge::{merge, Watch, Watched, CANARY};

use std::collections::BTreeMap;
use std::fs;
use std::path::PathBuf;

use serde::Serialize;

use crate::config::{Class, Discovery, DiscoveryFilters, Source, Transport};
use crate::device::{self, DeviceIdentity, SystemPaths};

/// A drive discovery found.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Found {
    /// Kernel name (`sda`, `nvme0n1`); for a drive behind a RAID controller, the
    /// controller's device and the drive's number (`bus/0:megaraid,1`).
    pub kernel_name: String,
    /// What is opened (`/dev/sda`) or given to smartctl (`/dev/bus/0`).
    pub path: PathBuf,
    pub identity: DeviceIdentity,
    pub size_bytes: u64,
    pub class: Class,
    pub transport: Transport,
    pub source: Source,
    /// smartctl's `-d TYPE` (drives behind RAID controllers).
    pub smartctl_type: Option<String>,
}

impl Found {
    /// Health only, no canary: a drive behind a RAID controller has no block device.
    pub fn health_only(&self) -> bool {
        self.smartctl_type.is_some()
    }

    /// The `drive` label: the serial (characters outside the label set as `_`, at most
    /// 64), else the WWN, else the kernel name.
    pub fn label(&self) -> String {
        let raw = self
            .identity
            .serial
            .as_deref()
            .or(self.identity.wwn.as_deref())
            .unwrap_or(&self.kernel_name);
        label_of(raw)
    }
}

/// `raw` in the label set (letters, digits, `-`, `_`, `.`, `:`), at most 64 characters.
pub fn label_of(raw: &str) -> String {
    let s: String = raw
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-_.:".contains(c) {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect();
    if s.is_empty() {
        "_".into()
    } else {
        s
    }
}

/// A block device discovery leaves out, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Skipped {
    pub name: String,
    pub reason: String,
}

/// What one scan found.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Scan {
    pub found: Vec<Found>,
    pub skipped: Vec<Skipped>,
    /// Drives found before and gone since (the daemon keeps them, down, until
    /// `drop_after`), with why.
    #[serde(skip)]
    pub gone: Vec<(Found, String)>,
}

/// Kernel name prefixes of block devices that are not drives, and why.
const NOT_DRIVES: &[(&str, &str)] = &[
    ("ram", "a RAM disk"),
    ("zram", "a compressed RAM disk (zram)"),
    (
        "dm-",
        "a device-mapper device (LVM, crypt, multipath): its disks are scanned",
    ),
    ("md", "an md RAID device: its member disks are scanned"),
    ("nbd", "a network block device (nbd)"),
    ("sr", "an optical drive"),
    ("fd", "a floppy drive"),
    ("mtdblock", "a flash chip (mtd)"),
    ("zd", "a ZFS volume: its pool's disks are scanned"),
    ("rbd", "a Ceph RBD network device"),
    ("drbd", "a DRBD replicated device: its disk is scanned"),
    ("bcache", "a bcache device: its disks are scanned"),
    ("nullb", "a null block device"),
    ("ublkb", "a userspace block device (ublk)"),
    ("pmem", "persistent memory"),
];

/// Why a kernel name is not a drive, by name alone.
fn not_a_drive(name: &str, include_loop: bool) -> Option<String> {
    if name.starts_with("loop") && name[4..].chars().all(|c| c.is_ascii_digit()) {
        return (!include_loop).then(|| LOOP_SKIPPED.into());
    }
    NOT_DRIVES
        .iter()
        .find(|(p, _)| {
            name.strip_prefix(p).is_some_and(|rest| {
                p.ends_with('-')
                    || rest.is_empty()
                    || rest.starts_with(|c: char| c.is_ascii_digit())
            })
        })
        .map(|(_, why)| why.to_string())
}

/// The transport, from the kernel name and the device's resolved sysfs path
/// (`/sys/devices/pci0000:00/.../ata1/host0/target0:0:0/0:0:0:0/block/sda`).
pub fn transport_of(name: &str, sysfs_path: &str) -> Transport {
    let has = |s: &str| sysfs_path.contains(s);
    if name.starts_with("loop") {
        Transport::Loop
    } else if name.starts_with("nvme") || has("/nvme/") || has("/nvme-subsystem/") {
        Transport::Nvme
    } else if name.starts_with("vd") || has("/virtio") {
        Transport::Virtio
    } else if name.starts_with("xvd") || has("/xen/") || has("/vbd-") {
        Transport::Xen
    } else if name.starts_with("mmcblk") || has("/mmc_host/") {
        Transport::Mmc
    } else if has("/usb") {
        Transport::Usb
    } else if has("/ata") {
        Transport::Sata
    } else if has("/end_device-") || has("/expander-") || has("/sas_") {
        Transport::Sas
    } else if has("/target") || has("/host") {
        Transport::Scsi
    } else {
        Transport::Unknown
    }
}

/// What a drive says of its medium: the MEDIUM ROTATION RATE of its Block Device
/// Characteristics VPD page (B1h).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rotation {
    /// 0001h: a solid-state medium.
    NonRotating,
    /// The nominal rate in rpm.
    Rpm(u16),
}

/// The rotation rate in a VPD page B1h as the kernel gives it (`device/vpd_pgb1`): None
/// for another page, a short one, "not reported" (0) or a reserved value.
pub fn rotation_of_vpd_b1(page: &[u8]) -> Option<Rotation> {
    if page.len() < 6 || page[1] != 0xB1 {
        return None;
    }
    match u16::from_be_bytes([page[4], page[5]]) {
        1 => Some(Rotation::NonRotating),
        rpm @ 0x0401..=0xFFFE => Some(Rotation::Rpm(rpm)),
        _ => None,
    }
}

/// The class: NVMe; virtual for virtio, Xen, loop and unknown; else hdd or ssd by the
/// drive's own rotation rate when it reports one (a udev rule or a bridge can set the
/// queue's flag either way), by the queue's `rotational` flag when it does not.
pub fn class_of(transport: Transport, rotational: bool, rotation: Option<Rotation>) -> Class {
    match transport {
        Transport::Nvme => Class::Nvme,
        Transport::Virtio | Transport::Xen | Transport::Loop | Transport::Unknown => Class::Virtual,
        _ => match rotation {
            Some(Rotation::Rpm(_)) => Class::Hdd,
            Some(Rotation::NonRotating) => Class::Ssd,
            None if rotational => Class::Hdd,
            None => Class::Ssd,
        },
    }
}

/// Why the filters leave `f` out, if they do. Include: every regex given must match
/// (an absent field does not); exclude: any regex that matches leaves it out.
pub fn filtered_out(
    f: &Found,
    include: &DiscoveryFilters,
    exclude: &DiscoveryFilters,
) -> Option<String> {
    let fields = [
        ("name", Some(f.kernel_name.as_str())),
        ("model", f.identity.model.as_deref()),
        ("serial", f.identity.serial.as_deref()),
        ("transport", Some(f.transport.name())),
    ];
    for ((key, value), re) in fields.iter().zip(include.all()) {
        if let Some(re) = re {
            if !value.is_some_and(|v| re.is_match(v)) {
                return Some(format!(
                    "{key} {:?} does not match [discovery.include] {key} = {:?}",
                    value.unwrap_or(""),
                    re.as_str()
                ));
            }
        }
    }
    for ((key, value), re) in fields.iter().zip(exclude.all()) {
        if let (Some(re), Some(v)) = (re, value) {
            if re.is_match(v) {
                return Some(format!(
                    "{key} {v:?} matches [discovery.exclude] {key} = {:?}",
                    re.as_str()
                ));
            }
        }
    }
    None
}

/// A sort key that puts `sdb` before `sdaa` and `nvme2n1` before `nvme10n1`.
fn natural_key(s: &str) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    let mut text = String::new();
    let mut num: Option<u64> = None;
    for c in s.chars() {
        if let Some(d) = c.to_digit(10) {
            num = Some(num.unwrap_or(0).saturating_mul(10).saturating_add(d as u64));
        } else {
            if let Some(n) = num.take() {
                out.push((std::mem::take(&mut text), n));
            }
            text.push(c);
        }
    }
    out.push((text, num.unwrap_or(0)));
    out
}

/// Every whole disk under `paths.sys`, classified and filtered by `d` (the RAID scan is
/// [`raid_drives`]; `max_drives` is applied by [`limit`]).
pub fn scan(paths: &SystemPaths, d: &Discovery) -> Scan {
    let class_block = paths.sys.join("class/block");
    let mut names: Vec<String> = fs::read_dir(&class_block)
        .map(|it| {
            it.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort_by_key(|n| natural_key(n));
    let mut out = Scan::default();
    // The first drive seen with each WWN (else serial): a second path to one drive.
    let mut seen: BTreeMap<String, String> = BTreeMap::new();
    for name in names {
        let dir = class_block.join(&name);
        let skip = |out: &mut Scan, reason: String| {
            out.skipped.push(Skipped {
                name: name.clone(),
                reason,
            })
        };
        if dir.join("partition").exists() {
            skip(&mut out, "a partition: its whole disk is scanned".into());
            continue;
        }
        if let Some(why) = not_a_drive(&name, d.include_loop) {
            skip(&mut out, why);
            continue;
        }
        if device::read_attr(&dir.join("loop/autoclear")).as_deref() == Some("1") {
            // `losetup -d` on a loop device someone holds open only marks it so; a
            // canary holding it would keep it attached for ever.
            skip(
                &mut out,
                "a loop device set to detach when closed (autoclear): watching it would keep it attached".into(),
            );
            continue;
        }
        if device::read_attr(&dir.join("hidden")).as_deref() == Some("1") {
            skip(
                &mut out,
                "a hidden NVMe path: its multipath namespace is scanned".into(),
            );
            continue;
        }
        match device::read_attr(&dir.join("size")).map(|s| s.parse::<u64>()) {
            Some(Ok(0)) => {
                skip(
                    &mut out,
                    "size 0 (no medium, or nothing attached to it)".into(),
                );
                continue;
            }
            Some(Ok(_)) => {}
            _ => {
                skip(&mut out, "no readable size in sysfs".into());
                continue;
            }
        }
        let info = match device::whole_disk_info(paths, &name) {
            Ok(i) => i,
            Err(e) => {
                skip(&mut out, format!("cannot read it from sysfs: {e}"));
                continue;
            }
        };
        let real = fs::canonicalize(&dir)
            .map(|p| p.display().to_string())
            .unwrap_or_default();
        let transport = transport_of(&name, &real);
        let rotational = device::read_attr(&dir.join("queue/rotational")).as_deref() == Some("1");
        let rotation = fs::read(dir.join("device/vpd_pgb1"))
            .ok()
            .and_then(|p| rotation_of_vpd_b1(&p));
        let found = Found {
            kernel_name: name.clone(),
            path: PathBuf::from("/dev").join(&name),
            identity: info.identity.clone(),
            size_bytes: info.size_bytes,
            class: class_of(transport, rotational, rotation),
            transport,
            source: Source::Sysfs,
            smartctl_type: None,
        };
        if let Some(why) = filtered_out(&found, &d.include, &d.exclude) {
            skip(&mut out, why);
            continue;
        }
        let key = found
            .identity
            .wwn
            .as_ref()
            .map(|w| format!("WWN {w}"))
            .or_else(|| {
                // Without a WWN, a serial alone does not make two disks one: USB bridges
                // and cheap drives report one serial on many disks. A second path to a
                // drive has its size and model too.
                found.identity.serial.as_ref().map(|s| {
                    format!(
                        "serial {s}, {} bytes, model {:?}",
                        found.size_bytes,
                        found.identity.model.as_deref().unwrap_or("")
                    )
                })
            });
        if let Some(key) = key {
            if let Some(first) = seen.get(&key) {
                skip(
                    &mut out,
                    format!("the same drive as {first} ({key}): a second path to it"),
                );
                continue;
            }
            seen.insert(key, name.clone());
        }
        out.found.push(found);
    }
    out
}

/// The `-d` types of RAID controllers whose drives smartctl reaches.
const RAID_TYPES: &[&str] = &[
    "megaraid", "cciss", "aacraid", "areca", "3ware", "hpt", "sssraid", "jmb39x",
];

/// The drives behind RAID controllers in `smartctl --scan-open --json` output, filtered
/// by `d` (their transport is `raid`, their class `hdd` unless known otherwise: a RAID
/// member's canary would go through the controller's volume, so they get none).
pub fn raid_drives(
    scan_open_json: &str,
    d: &Discovery,
) -> Result<Scan, crate::health::smartctl::SmartctlError> {
    let entries = crate::health::smartctl::parse_scan(scan_open_json)?;
    let mut out = Scan::default();
    for e in entries {
        let Some(t) = e.type_.as_deref() else {
            continue;
        };
        let base = t.split(',').next().unwrap_or(t);
        // `sat+megaraid,0`: a SATA drive behind a MegaRAID controller.
        if !base.split('+').any(|p| RAID_TYPES.contains(&p)) {
            continue;
        }
        let dev = e.name.strip_prefix("/dev/").unwrap_or(&e.name);
        let found = Found {
            kernel_name: format!("{dev}:{t}"),
            path: PathBuf::from(&e.name),
            identity: DeviceIdentity::default(),
            size_bytes: 0,
            class: Class::Hdd,
            transport: Transport::Raid,
            source: Source::Smartctl,
            smartctl_type: Some(t.to_string()),
        };
        match filtered_out(&found, &d.include, &d.exclude) {
            Some(why) => out.skipped.push(Skipped {
                name: found.kernel_name,
                reason: why,
            }),
            None => out.found.push(found),
        }
    }
    Ok(out)
}

/// Why a loop device is skipped (unless `include_loop`).
const LOOP_SKIPPED: &str =
    "a loop device (set include_loop = true in [discovery] to watch loop devices)";
/// Why a drive behind a RAID controller is skipped with `raid = false`.
const RAID_OFF: &str = "behind a RAID controller, and raid = false in [discovery]";

/// A skip reason that comes from `[discovery]` (filters, `include_loop`, `raid`,
/// `max_drives`), not from what the device is.
pub fn left_out_by_config(reason: &str) -> bool {
    reason.contains("[discovery.include]")
        || reason.contains("[discovery.exclude]")
        || reason == LOOP_SKIPPED
        || reason == RAID_OFF
        || reason.starts_with("over max_drives")
}

/// The scan `s` under a new `[discovery]` (a reload), until the discovery thread has
/// rescanned with it: what the new filters, `include_loop`, `raid` or `max_drives` leave
/// out is not watched meanwhile (a disk excluded to keep it asleep is not read by a
/// canary started on the old filters).
pub fn refilter(s: &Scan, d: &Discovery) -> Scan {
    let mut out = s.clone();
    for f in std::mem::take(&mut out.found) {
        let why = if f.transport == Transport::Loop && !d.include_loop {
            Some(LOOP_SKIPPED.to_string())
        } else if f.source == Source::Smartctl && !d.raid {
            Some(RAID_OFF.to_string())
        } else {
            filtered_out(&f, &d.include, &d.exclude)
        };
        match why {
            Some(reason) => out.skipped.push(Skipped {
                name: f.kernel_name,
                reason,
            }),
            None => out.found.push(f),
        }
    }
    limit(&mut out, d.max_drives);
    out
}

/// Keeps the first `max` drives (in the scan's order) and skips the rest with a reason.
pub fn limit(scan: &mut Scan, max: usize) {
    limit_keeping(scan, max, |_| false);
}

/// [`limit`], the drives already `watched` first: a disk plugged in that sorts before
/// them does not push one of them out (its series and labels would move to another
/// disk); it is the one over `max_drives`. The drives kept stay in the scan's order.
pub fn limit_keeping(scan: &mut Scan, max: usize, watched: impl Fn(&Found) -> bool) {
    if scan.found.len() <= max {
        return;
    }
    let mut order: Vec<usize> = (0..scan.found.len()).collect();
    // Stable: watched first, each part in the scan's order.
    order.sort_by_key(|&i| !watched(&scan.found[i]));
    let keep: std::collections::BTreeSet<usize> = order[..max].iter().copied().collect();
    for (i, f) in std::mem::take(&mut scan.found).into_iter().enumerate() {
        if keep.contains(&i) {
            scan.found.push(f);
        } else {
            scan.skipped.push(Skipped {
                name: f.kernel_name,
                reason: format!("over max_drives ({max}) in [discovery]"),
            });
        }
    }
}

/// The RAID controller drivers present, from sysfs: `smartctl --scan-open` (which opens
/// every device) runs only when there is one.
pub fn raid_controllers(paths: &SystemPaths) -> Vec<String> {
    let dir = paths.sys.join("class/scsi_host");
    let mut v: Vec<String> = fs::read_dir(&dir)
        .map(|it| {
            it.flatten()
                .filter_map(|e| device::read_attr(&dir.join(e.file_name()).join("proc_name")))
                .filter(|n| crate::device::RAID_HOST_DRIVERS.contains(&n.as_str()))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v.dedup();
    v
}

/// Why the drives behind RAID controllers were not looked for. Cloned with the daemon's
/// kept `smartctl --scan-open` answer into each scan, so the smartctl error is shared.
#[derive(Debug, Clone, thiserror::Error)]
pub enum RaidScanError {
    /// `smartctl --scan-open` did not run, or failed.
    #[error(transparent)]
    ScanOpen(std::sync::Arc<crate::health::smartctl::SmartctlError>),
    /// Its answer could not be read.
    #[error(transparent)]
    Answer(std::sync::Arc<crate::health::smartctl::SmartctlError>),
}

/// The drives behind the host's RAID controllers: none without a controller, else
/// `smartctl --scan-open` read by [`raid_drives`]. `Err` says why they were not looked for.
pub fn raid_host(paths: &SystemPaths, d: &Discovery) -> Result<Scan, RaidScanError> {
    raid_of(&raid_scan_open(paths), d)
}

/// What `smartctl --scan-open` says on this host: `None` without a RAID controller (it is
/// not run), its JSON text otherwise. Kept by the daemon and read again with each config's
/// filters ([`raid_of`]), so a reload does not open every device again.
pub fn raid_scan_open(paths: &SystemPaths) -> Result<Option<String>, RaidScanError> {
    if raid_controllers(paths).is_empty() {
        return Ok(None);
    }
    crate::health::smartctl::scan_open(std::time::Duration::from_secs(30))
        .map(Some)
        .map_err(|e| RaidScanError::ScanOpen(e.into()))
}

/// The RAID drives of a kept `smartctl --scan-open` answer, under `d`'s filters.
pub fn raid_of(
    scan_open: &Result<Option<String>, RaidScanError>,
    d: &Discovery,
) -> Result<Scan, RaidScanError> {
    match scan_open {
        Ok(None) => Ok(Scan::default()),
        Ok(Some(text)) => raid_drives(text, d).map_err(|e| RaidScanError::Answer(e.into())),
        Err(e) => Err(e.clone()),
    }
}

/// A scan of sysfs completed: the RAID drives (when looked for), the health-only rule,
/// then `max_drives`.
pub fn complete(s: &mut Scan, raid: Option<&Result<Scan, RaidScanError>>, d: &Discovery) {
    complete_keeping(s, raid, d, |_| false);
}

/// [`complete`], keeping the drives already `watched` first under `max_drives` (see
/// [`limit_keeping`]).
pub fn complete_keeping(
    s: &mut Scan,
    raid: Option<&Result<Scan, RaidScanError>>,
    d: &Discovery,
    watched: impl Fn(&Found) -> bool,
) {
    match raid {
        Some(Ok(r)) => {
            s.found.extend(r.found.iter().cloned());
            s.skipped.extend(r.skipped.iter().cloned());
        }
        Some(Err(e)) => s.skipped.push(Skipped {
            name: "smartctl --scan-open".into(),
            reason: format!("drives behind RAID controllers not looked for: {e}"),
        }),
        None => {}
    }
    if d.health_only {
        // Not root: only the drives this user can open, for whatever health they give.
        let (keep, cannot): (Vec<Found>, Vec<Found>) =
            std::mem::take(&mut s.found).into_iter().partition(|f| {
                f.smartctl_type.is_none()
                    && rustix::fs::access(&f.path, rustix::fs::Access::READ_OK).is_ok()
            });
        s.found = keep;
        s.skipped.extend(cannot.into_iter().map(|f| Skipped {
            reason: format!(
                "{} cannot be opened by this user (run as root to watch it)",
                f.path.display()
            ),
            name: f.kernel_name,
        }));
    }
    limit_keeping(s, d.max_drives, watched);
}

/// A whole scan of the host: sysfs, then (when `raid`) the drives behind RAID
/// controllers, the health-only rule and `max_drives`.
pub fn scan_host(paths: &SystemPaths, d: &Discovery) -> Scan {
    let mut s = scan(paths, d);
    let raid = d.raid.then(|| raid_host(paths, d));
    complete(&mut s, raid.as_ref(), d);
    s
}

/// The effective config of `base` on this host now, and what it watches and skips.
pub fn on_host(base: &crate::config::Config) -> (crate::config::Config, Watch) {
    let s = if base.discovery.enabled {
        scan_host(&SystemPaths::default(), &base.discovery)
    } else {
        Scan::default()
    };
    merge(base, &s)
}

/// A cheap fingerprint of the block devices (names and sizes): a change means a disk came,
/// went, or had a medium or loop backing attached; polled between rescans for hot-plug.
pub fn fingerprint(paths: &SystemPaths) -> Vec<(String, Option<String>)> {
    let class_block = paths.sys.join("class/block");
    let mut v: Vec<(String, Option<String>)> = fs::read_dir(&class_block)
        .map(|it| {
            it.flatten()
                .map(|e| {
                    let n = e.file_name().to_string_lossy().into_owned();
                    let dir = class_block.join(&n);
                    let mut size = device::read_attr(&dir.join("size"));
                    if n.starts_with("loop") {
                        // A detach asked for while the device is open.
                        if let (Some(s), Some(a)) =
                            (&mut size, device::read_attr(&dir.join("loop/autoclear")))
                        {
                            s.push_str(&format!(" autoclear={a}"));
                        }
                    }
                    (n, size)
                })
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

#[cfg(test)]
mod tests;
