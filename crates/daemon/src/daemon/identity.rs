//! Which device a configured drive is today. Paths move between boots; the identity
//! (serial, WWN, or a `/dev/disk/by-id/` link) decides. A drive whose identity matches
//! no device, or whose file target is not on the identified drive, is down and gets no
//! I/O. Reads sysfs only.

use std::path::{Path, PathBuf};

use crate::config::{Drive, Identity};
use crate::device::{self, BlockDeviceInfo, DeviceError};

/// Why a drive is down: one line naming what was looked for and what was found. It
/// keeps the error underneath (sysfs, a device lookup) as its source.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    #[error("{} is absent", link.display())]
    LinkAbsent { link: PathBuf, source: DeviceError },
    #[error("{}: {source}", path.display())]
    Inspect { path: PathBuf, source: DeviceError },
    #[error("cannot list /sys/block: {0}")]
    ListBlock(#[source] std::io::Error),
    #[error("no device has {what}{}", hint.as_ref().map(|p| format!(" ({} is absent or is another drive)", p.display())).unwrap_or_default())]
    NoDevice { what: String, hint: Option<PathBuf> },
    #[error("{}: its disk {parent}: {source}", path.display())]
    Disk {
        path: PathBuf,
        parent: String,
        source: DeviceError,
    },
    #[error("file target {}: cannot tell which drive it is on: {source}", file.display())]
    FileDrive { file: PathBuf, source: DeviceError },
    #[error("file target {} is on {on}, not on the drive with {what} ({disk})", file.display())]
    FileElsewhere {
        file: PathBuf,
        on: String,
        what: String,
        disk: String,
    },
    #[error("{} is gone: {source}", path.display())]
    Gone { path: PathBuf, source: DeviceError },
    #[error("{} has size 0 (nothing attached)", path.display())]
    Empty { path: PathBuf },
    #[error("the drive has neither an identity nor a file target")]
    Unnamed,
    #[error("file target directory {} is absent", dir.display())]
    DirAbsent { dir: PathBuf },
}

/// Where a drive is now.
#[derive(Debug, Clone)]
pub struct Resolved {
    /// What probes and runs open: the file target, or the raw device.
    pub target: PathBuf,
    /// The whole disk (`/dev/NAME`) for health and identity, when there is one (a file
    /// target on tmpfs has none).
    pub device: Option<PathBuf>,
    pub device_info: Option<BlockDeviceInfo>,
    /// Something worth a line in the log (several disks under a file target...).
    pub note: Option<String>,
    /// Why `device` is `None`, for a file target with no disk found under it.
    pub no_drive: Option<NoDrive>,
}

/// Why no disk was found under a file target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NoDrive {
    /// The filesystem has no block device at all (tmpfs, a network filesystem...): there
    /// is no health to read, and that is not a fault.
    NotApplicable { fstype: String },
    /// There may well be a disk (ZFS, a fuse filesystem over disks, a lookup that
    /// failed), but it was not found: the health is not read, which is a failure.
    NotFound { reason: String },
}

/// Filesystem types (`/proc/self/mountinfo`'s fstype) that never have a local block
/// device under them: memory filesystems and network or host-shared filesystems. Only
/// these make the health "not applicable"; any other filesystem without a traceable
/// disk (ZFS, bcachefs, mergerfs and other fuse filesystems over disks) has a drive
/// whose health is not being read, which must show as a failure. An overlay is judged
/// by the filesystem of its upper directory (see [`no_drive_of`]).
pub const DISKLESS_FSTYPES: &[&str] = &[
    // memory
    "tmpfs",
    "ramfs",
    "devtmpfs",
    "hugetlbfs",
    // network and host-shared
    "nfs",
    "nfs4",
    "cifs",
    "smb3",
    "9p",
    "virtiofs",
    "ceph",
    "fuse.sshfs",
    "fuse.glusterfs",
    "fuse.s3fs",
    "fuse.rclone",
];

/// Whether `fstype` is in [`DISKLESS_FSTYPES`].
pub fn is_diskless_fstype(fstype: &str) -> bool {
    DISKLESS_FSTYPES.contains(&fstype)
}

/// Why no disk was found under `file`, from the lookup's error. `upper_of_overlay`
/// gives the upper directory of the overlay mounted at device `major:minor` (read from
/// the mount table); an overlay is not applicable only when that directory is itself on
/// a disk-less filesystem.
pub fn no_drive_of(
    file: &Path,
    e: &DeviceError,
    upper_of_overlay: &dyn Fn(u32, u32) -> Option<PathBuf>,
) -> NoDrive {
    let not_found = |why: String| {
        NoDrive::NotFound {
        reason: format!(
            "no drive found under the file target {}: {why}; name the drive by its serial or WWN to read its health",
            file.display()
        ),
    }
    };
    match e {
        DeviceError::NotOnBlockDevice {
            fstype: Some(fs),
            major,
            minor,
            ..
        } => {
            if is_diskless_fstype(fs) {
                return NoDrive::NotApplicable { fstype: fs.clone() };
            }
            if fs == "overlay" {
                let upper = upper_of_overlay(*major, *minor);
                let under = upper.as_deref().map(|u| match device::drives_of_file(u) {
                    Err(DeviceError::NotOnBlockDevice {
                        fstype: Some(f), ..
                    }) if is_diskless_fstype(&f) => Ok(f),
                    _ => Err(()),
                });
                return match under {
                    Some(Ok(f)) => NoDrive::NotApplicable {
                        fstype: format!("overlay over {f}"),
                    },
                    _ => not_found(
                        "an overlay whose upper directory is not on a memory or network filesystem"
                            .into(),
                    ),
                };
            }
            not_found(format!(
                "its filesystem ({fs}) has no block device that could be traced"
            ))
        }
        other => not_found(other.to_string()),
    }
}

/// The `upperdir=` of the overlay mounted at `major:minor`, from `/proc/self/mountinfo`.
fn overlay_upper(major: u32, minor: u32) -> Option<PathBuf> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    overlay_upper_in(&text, major, minor)
}

fn overlay_upper_in(mountinfo: &str, major: u32, minor: u32) -> Option<PathBuf> {
    let dev = format!("{major}:{minor}");
    let line = mountinfo
        .lines()
        .find(|l| l.split(' ').nth(2) == Some(dev.as_str()))?;
    let (_, after) = line.split_once(" - ")?;
    let opts = after.split(' ').nth(2)?;
    opts.split(',')
        .find_map(|o| o.strip_prefix("upperdir="))
        .map(PathBuf::from)
}

/// Resolves `d` now. `Err` is the one-line reason the drive is down.
pub fn resolve(d: &Drive) -> Result<Resolved, ResolveError> {
    match &d.identity {
        None if d.file_target.is_none() && d.path.is_some() => resolve_path_only(d),
        None => resolve_file_only(d),
        Some(id) => {
            let info = find_device(id, d.path.as_deref())?;
            let dev_path = PathBuf::from("/dev").join(&info.name);
            let target = match &d.file_target {
                Some(ft) => {
                    check_file_on(&ft.path, &info, id)?;
                    ft.path.clone()
                }
                None => dev_path.clone(),
            };
            Ok(Resolved {
                target,
                device: Some(dev_path),
                device_info: Some(info),
                note: None,
                no_drive: None,
            })
        }
    }
}

fn describe(id: &Identity) -> String {
    match id {
        Identity::Serial(s) => format!("serial {s:?}"),
        Identity::Wwn(w) => format!("WWN {w:?}"),
        Identity::ById(p) => p.display().to_string(),
    }
}

fn matches(id: &Identity, info: &BlockDeviceInfo) -> bool {
    match id {
        Identity::Serial(s) => info.identity.serial.as_deref() == Some(s.as_str()),
        Identity::Wwn(w) => info
            .identity
            .wwn
            .as_deref()
            .is_some_and(|x| normalize_wwn(x) == normalize_wwn(w)),
        Identity::ById(_) => true,
    }
}

use crate::device::normalize_wwn;

/// The whole disk with identity `id`: at `hint` when it is still there, else wherever it
/// is now.
fn find_device(id: &Identity, hint: Option<&Path>) -> Result<BlockDeviceInfo, ResolveError> {
    if let Identity::ById(link) = id {
        let info = device::inspect(link).map_err(|e| match e {
            e @ DeviceError::Io { .. } => ResolveError::LinkAbsent {
                link: link.clone(),
                source: e,
            },
            e => ResolveError::Inspect {
                path: link.clone(),
                source: e,
            },
        })?;
        return whole_disk(info);
    }
    if let Some(p) = hint {
        if let Some(info) = device::inspect(p).ok().and_then(|i| whole_disk(i).ok()) {
            if matches(id, &info) {
                return Ok(info);
            }
        }
    }
    let entries = std::fs::read_dir("/sys/block").map_err(ResolveError::ListBlock)?;
    let mut names: Vec<String> = entries
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    for name in names {
        let dev = PathBuf::from("/dev").join(&name);
        if let Ok(info) = device::inspect(&dev) {
            if matches(id, &info) {
                return Ok(info);
            }
        }
    }
    Err(ResolveError::NoDevice {
        what: describe(id),
        hint: hint.map(Path::to_path_buf),
    })
}

/// The whole disk of a device that may be a partition.
fn whole_disk(info: BlockDeviceInfo) -> Result<BlockDeviceInfo, ResolveError> {
    match &info.parent {
        Some(parent) => {
            device::inspect(&PathBuf::from("/dev").join(parent)).map_err(|e| ResolveError::Disk {
                path: info.path.clone(),
                parent: parent.clone(),
                source: e,
            })
        }
        None => Ok(info),
    }
}

/// A file target must live on the identified disk.
fn check_file_on(file: &Path, disk: &BlockDeviceInfo, id: &Identity) -> Result<(), ResolveError> {
    let probe = existing_ancestor(file);
    let drives = device::drives_of_file(&probe).map_err(|e| ResolveError::FileDrive {
        file: file.to_path_buf(),
        source: e,
    })?;
    if drives.disks.iter().any(|d| d.name == disk.name) {
        Ok(())
    } else {
        let on: Vec<&str> = drives.disks.iter().map(|d| d.name.as_str()).collect();
        Err(ResolveError::FileElsewhere {
            file: file.to_path_buf(),
            on: on.join(", "),
            what: describe(id),
            disk: disk.name.clone(),
        })
    }
}

/// The file, or its closest existing ancestor directory (a file target not created yet).
fn existing_ancestor(p: &Path) -> PathBuf {
    let mut cur = p.to_path_buf();
    loop {
        if cur.exists() {
            return cur;
        }
        match cur.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => cur = parent.to_path_buf(),
            _ => return PathBuf::from("/"),
        }
    }
}

/// A discovered drive with neither serial nor WWN (a virtio disk without one), or one
/// behind a RAID controller (health only, through smartctl's `-d` type: its path need
/// not be a node here): it is at its path.
fn resolve_path_only(d: &Drive) -> Result<Resolved, ResolveError> {
    let path = d.path.clone().unwrap_or_default();
    if d.smartctl_type.is_some() {
        return Ok(Resolved {
            target: path.clone(),
            device: Some(path),
            device_info: None,
            note: None,
            no_drive: None,
        });
    }
    let info = device::inspect(&path).map_err(|e| ResolveError::Gone {
        path: path.clone(),
        source: e,
    })?;
    if info.size_bytes == 0 {
        return Err(ResolveError::Empty { path });
    }
    Ok(Resolved {
        target: path.clone(),
        device: Some(path),
        device_info: Some(info),
        note: None,
        no_drive: None,
    })
}

fn resolve_file_only(d: &Drive) -> Result<Resolved, ResolveError> {
    let ft = d.file_target.as_ref().ok_or(ResolveError::Unnamed)?;
    let dir = ft.path.parent().unwrap_or(Path::new("/"));
    if !dir.is_dir() {
        return Err(ResolveError::DirAbsent {
            dir: dir.to_path_buf(),
        });
    }
    let at = existing_ancestor(&ft.path);
    let (device, device_info, note, no_drive) = match device::drives_of_file(&at) {
        Ok(mut fd) if !fd.disks.is_empty() => {
            let note = (fd.disks.len() > 1).then(|| {
                let names: Vec<&str> = fd.disks.iter().map(|d| d.name.as_str()).collect();
                format!(
                    "file target {} spans {} disks ({}); health is read from {}",
                    ft.path.display(),
                    fd.disks.len(),
                    names.join(", "),
                    names[0]
                )
            });
            let first = fd.disks.remove(0);
            (
                Some(PathBuf::from("/dev").join(&first.name)),
                Some(first),
                note,
                None,
            )
        }
        // No drive to read health from (probes still run): not applicable only for a
        // filesystem known to have none (tmpfs, NFS...), a failure otherwise.
        Ok(_) => (
            None,
            None,
            None,
            Some(NoDrive::NotFound {
                reason: format!(
                    "no drive found under the file target {}: the lookup found no whole disk",
                    ft.path.display()
                ),
            }),
        ),
        Err(e) => (
            None,
            None,
            None,
            Some(no_drive_of(&ft.path, &e, &overlay_upper)),
        ),
    };
    Ok(Resolved {
        target: ft.path.clone(),
        device,
        device_info,
        note,
        no_drive,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_drive_gone_from_its_path_keeps_the_lookup_error() {
        use std::error::Error as _;
        let d = Drive {
            name: "t".into(),
            identity: None,
            path: Some(PathBuf::from("/dev/driveprobe-no-such-disk")),
            destructive: false,
            file_target: None,
            rating: Default::default(),
            rated: Default::default(),
            smartctl_type: None,
        };
        let e = resolve(&d).unwrap_err();
        assert!(matches!(e, ResolveError::Gone { .. }), "{e:?}");
        let under = e.source().expect("the device lookup's error is kept");
        assert!(e.to_string().ends_with(&under.to_string()), "{e}");
        assert!(e
            .to_string()
            .starts_with("/dev/driveprobe-no-such-disk is gone: "));
    }

    #[test]
    fn wwns_compare_by_their_digits() {
        assert_eq!(normalize_wwn("0x5002538E40A1B2C3"), "5002538e40a1b2c3");
        assert_eq!(normalize_wwn("naa.5002538e40a1b2c3"), "5002538e40a1b2c3");
        assert_eq!(normalize_wwn(" eui.0025385B71B0"), "0025385b71b0");
    }

    #[test]
    fn a_file_target_on_tmpfs_has_no_device_but_is_up() {
        let dir = tempfile::tempdir_in("/dev/shm").unwrap();
        let d = Drive {
            name: "t".into(),
            identity: None,
            path: None,
            destructive: false,
            file_target: Some(crate::config::FileTarget {
                path: dir.path().join("x.dat"),
                size: 1 << 20,
            }),
            rating: Default::default(),
            rated: Default::default(),
            smartctl_type: None,
        };
        let r = resolve(&d).unwrap();
        assert_eq!(r.target, dir.path().join("x.dat"));
        assert!(r.device.is_none());
        assert_eq!(
            r.no_drive,
            Some(NoDrive::NotApplicable {
                fstype: "tmpfs".into()
            })
        );
        let gone = Drive {
            file_target: Some(crate::config::FileTarget {
                path: dir.path().join("no/such/dir/x.dat"),
                size: 1 << 20,
            }),
            ..d
        };
        let e = resolve(&gone).unwrap_err().to_string();
        assert!(e.contains("absent"), "{e}");
    }

    fn not_on_block_device(fstype: Option<&str>) -> DeviceError {
        DeviceError::NotOnBlockDevice {
            path: "/x".into(),
            fstype: fstype.map(String::from),
            major: 0,
            minor: 42,
        }
    }

    /// Review of issue 17, A5: every lookup outcome but a disk was "not applicable", so a
    /// file target on ZFS (or a failed lookup) hid a health that was never read.
    #[test]
    fn only_diskless_filesystems_make_health_not_applicable() {
        let f = Path::new("/pool/x.dat");
        let no_upper = |_: u32, _: u32| None;
        for fs in [
            "tmpfs",
            "ramfs",
            "nfs4",
            "cifs",
            "9p",
            "virtiofs",
            "fuse.sshfs",
        ] {
            assert_eq!(
                no_drive_of(f, &not_on_block_device(Some(fs)), &no_upper),
                NoDrive::NotApplicable { fstype: fs.into() },
                "{fs}"
            );
        }
        for fs in [Some("zfs"), Some("bcachefs"), Some("fuse.mergerfs"), None] {
            match no_drive_of(f, &not_on_block_device(fs), &no_upper) {
                NoDrive::NotFound { reason } => {
                    assert!(reason.contains("/pool/x.dat"), "{reason}");
                    if let Some(fs) = fs {
                        assert!(reason.contains(fs), "{reason}");
                    }
                }
                other => panic!("{fs:?}: {other:?}"),
            }
        }
        let io = DeviceError::Io {
            path: "/sys/dev/block/8:0".into(),
            source: std::io::Error::from(std::io::ErrorKind::PermissionDenied),
        };
        match no_drive_of(f, &io, &no_upper) {
            NoDrive::NotFound { reason } => {
                assert!(reason.contains("/sys/dev/block/8:0"), "{reason}")
            }
            other => panic!("{other:?}"),
        }
        // An overlay: judged by its upper directory (a real tmpfs one here; a disk-backed
        // or unknown one is not found).
        let shm = tempfile::tempdir_in("/dev/shm").unwrap();
        let upper = shm.path().to_path_buf();
        let on_tmpfs = move |_: u32, _: u32| Some(upper.clone());
        assert_eq!(
            no_drive_of(f, &not_on_block_device(Some("overlay")), &on_tmpfs),
            NoDrive::NotApplicable {
                fstype: "overlay over tmpfs".into()
            }
        );
        assert!(matches!(
            no_drive_of(f, &not_on_block_device(Some("overlay")), &no_upper),
            NoDrive::NotFound { .. }
        ));
    }

    #[test]
    fn an_overlays_upper_directory_comes_from_the_mount_table() {
        let mi = "30 1 0:31 / / rw,relatime - overlay overlay rw,lowerdir=/l1:/l2,upperdir=/var/lib/up,workdir=/var/lib/work\n\
                  31 30 0:32 / /dev/shm rw - tmpfs shm rw,size=65536k\n";
        assert_eq!(
            overlay_upper_in(mi, 0, 31),
            Some(PathBuf::from("/var/lib/up"))
        );
        assert_eq!(overlay_upper_in(mi, 0, 32), None);
    }

    #[test]
    fn an_unknown_serial_is_down_with_a_reason() {
        let d = Drive {
            name: "x".into(),
            identity: Some(Identity::Serial("NO-SUCH-SERIAL-42".into())),
            path: Some("/dev/nonexistent0".into()),
            destructive: false,
            file_target: None,
            rating: Default::default(),
            rated: Default::default(),
            smartctl_type: None,
        };
        let e = resolve(&d).unwrap_err().to_string();
        assert!(e.contains("NO-SUCH-SERIAL-42"), "{e}");
    }
}
