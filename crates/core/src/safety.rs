//! The one gate for writes (docs/decisions/0001-starting-design.md, Safety). A
//! [`WritePermit`] can only be made here, and a target can only be opened for writing
//! with one.
//!
//! # Files
//!
//! [`authorize_file_writes`] gives a permit for an existing regular file, naming it by
//! `(st_dev, st_ino)`: the engine keeps every write inside the file. Two ways a write to
//! "the file" could land in another file are refused:
//!
//! - the path is a symbolic link (its last component): the link could name a neighbour,
//!   or be swapped between the check and the open. The user is told to give the file
//!   itself. (A link to a block device never gets here: the caller sends a block device,
//!   link or not, through [`authorize_block_writes`], with all its checks.)
//! - the file has more than one hard link: its data is also another name's data.
//! - a folder on the path is a symbolic link: whoever can rename a folder on the way
//!   could steer root's writes elsewhere. The file is opened with
//!   `openat2(RESOLVE_NO_SYMLINKS)` ([`crate::ownmark::open_no_symlinks`]).
//! - the file backs a loop device, or is a swap area ([`check_file_aliases`]).
//!
//! And one way a write could destroy what driveprobe did not make: the file exists and
//! driveprobe did not create it. Files driveprobe creates carry a mark
//! ([`crate::ownmark::OWNER_XATTR`], naming the file's device and inode); a file without
//! it is refused unless the user allowed it (`bench --allow-destructive`, as for a
//! device). The daemon never allows it.
//!
//! `target::Target::open` checks all of these again on the descriptor it opened (no
//! links on the way, `st_nlink`, the mark), so a swap after this check is caught too.
//!
//! # Block devices
//!
//! Writing to a block device destroys what is on it, so [`authorize_block_writes`] refuses
//! unless all of these hold, checked in this order; the error names the first that fails:
//!
//! 1. the user passed `--allow-destructive` ([`WriteRequest::allow_destructive`]);
//! 2. the user named the drive they mean by serial and/or WWN (`--expect-serial`,
//!    `--expect-wwn`);
//! 3. the device is inspected again now (a stale [`BlockDeviceInfo`] proves nothing): it
//!    must still be the same device number, and every identity the user gave must equal
//!    the device's exactly (loop devices: serial `loop:<canonical backing file>`, see
//!    [`crate::device`]);
//! 4. nothing uses it under any name: no member of its alias set
//!    ([`device::alias_set_of_block`]: its partitions, for a partition its whole disk,
//!    what is stacked on it, what it is stacked on, other loop devices over the same
//!    backing file) is mounted, used as swap, or held by dm/md/LVM other than the
//!    target's own stack; no other block device reports its WWN (or serial) unless a
//!    dm-multipath device holds both; no loop device's backing is unknown
//!    ([`device::aliases_in_use`]);
//! 5. the kernel agrees: an exclusive (`O_EXCL`) read-only open succeeds. The kernel
//!    refuses it with `EBUSY` for a device that is mounted, used as swap, claimed by
//!    dm/md, or opened exclusively by any other program, including claims that no table
//!    in /proc or sysfs shows (an ext4 external journal, another benchmark holding it).
//!    The same is asked of every loop device among the aliases (not of other disks: an
//!    open of a second path of a LUN could hang).
//!
//! Two free loop devices over one file are the same storage, and their serial
//! (`loop:<file>`) names that file: confirming it confirms both, and either may be
//! written. A file that backs a loop device is never a file target, whatever the flags
//! ([`check_file_aliases`]): its data is a block device's, written only through this
//! gate under the loop device's name.
//!
//! Any doubt (an unreadable sysfs or /proc file) is a refusal. The permit names the device
//! by `st_rdev` as seen through the exclusive descriptor. The exclusive claim is released
//! when this function returns; the target should open the device with `O_EXCL` itself so
//! that the claim lasts for the whole run.

use std::fmt;
use std::fs::OpenOptions;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::device::{self, BlockDeviceInfo, DeviceError, InUse};

/// Proof that writes to one target were authorised. Not constructible outside this module.
/// It names the object it was issued for: `target` refuses a permit whose object is not the
/// one it opened (checked with fstat on the opened descriptor).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WritePermit {
    object: PermittedObject,
    /// A file driveprobe did not create may be written (`bench --allow-destructive`).
    foreign_file: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PermittedObject {
    /// A regular file, by (st_dev, st_ino).
    File { dev: u64, ino: u64 },
    /// A block device, by st_rdev.
    Block { rdev: u64 },
}

impl WritePermit {
    pub fn object(&self) -> PermittedObject {
        self.object
    }
    /// Whether the permit allows writing a regular file without driveprobe's ownership
    /// mark (see [`authorize_file_writes`]).
    pub fn foreign_file_allowed(&self) -> bool {
        self.foreign_file
    }
}

/// What the user asked for when they asked to write to a block device.
#[derive(Debug, Clone, Default)]
pub struct WriteRequest {
    pub allow_destructive: bool,
    pub expect_serial: Option<String>,
    pub expect_wwn: Option<String>,
}

/// The reasons in an [`SafetyError::InUse`], joined for display.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InUseReasons(pub Vec<InUse>);

impl fmt::Display for InUseReasons {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{r}")?;
        }
        Ok(())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SafetyError {
    #[error("cannot use {path} as a write target: {source}; give an existing regular file")]
    FileAccess {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: is a {kind}, not a regular file or a block device: a {kind} is never a target; give a regular file or a block device")]
    NotRegularFile { path: PathBuf, kind: &'static str },
    #[error("{path} is a symbolic link (to {to}): driveprobe writes only to the file it is given, never through a link; give the file's own path")]
    Symlink { path: PathBuf, to: PathBuf },
    #[error("{path} has {links} hard links: writing to it would change the file under its other names too; give a file of its own (one link)")]
    HardLinked { path: PathBuf, links: u64 },
    #[error("{path}: a folder on its path is a symbolic link: driveprobe writes only to a file reached without links; give the real path, with no link on the way (see `realpath`)")]
    SymlinkInPath { path: PathBuf },
    #[error("{path}: permission denied: run as a user who may open it")]
    PermissionDenied { path: PathBuf },
    #[error("{path} exists and driveprobe did not create it: writing would destroy its data; give a path that does not exist (driveprobe creates the file there), or pass --allow-destructive to write into it anyway")]
    NotOwnFile { path: PathBuf },
    #[error("writing to block device {path} destroys its data: pass --allow-destructive and --expect-serial (or --expect-wwn) to confirm")]
    DestructiveNotAllowed { path: PathBuf },
    #[error("writing to block device {path} needs the drive's identity: pass --expect-serial or --expect-wwn naming the drive you mean to overwrite")]
    NoExpectedIdentity { path: PathBuf },
    #[error("{path} has serial {actual:?}, not the expected {expected:?}: this is not the drive you named; check the device path")]
    SerialMismatch {
        path: PathBuf,
        expected: String,
        actual: String,
    },
    #[error("{path} reports no serial, so it cannot be matched to the expected serial {expected:?}; use --expect-wwn if it has a WWN")]
    NoSerial { path: PathBuf, expected: String },
    #[error("{path} has WWN {actual:?}, not the expected {expected:?}: this is not the drive you named; check the device path")]
    WwnMismatch {
        path: PathBuf,
        expected: String,
        actual: String,
    },
    #[error("{path} reports no WWN, so it cannot be matched to the expected WWN {expected:?}; use --expect-serial instead")]
    NoWwn { path: PathBuf, expected: String },
    #[error("{path} is now device {now_major}:{now_minor}, not {was_major}:{was_minor} as inspected: the device changed; inspect it again")]
    DeviceChanged {
        path: PathBuf,
        was_major: u32,
        was_minor: u32,
        now_major: u32,
        now_minor: u32,
    },
    #[error("refusing to write to {path}, it is in use: {reasons}; unmount it, swapoff it or remove its holders first")]
    InUse {
        path: PathBuf,
        reasons: InUseReasons,
    },
    #[error("refusing to write to {path}: it is the backing file of {loops} (loop devices over it, and what is stacked on them): writing it writes their storage; {in_use}; detach them (losetup -d) first, or write the loop device itself, which needs --allow-destructive and --expect-serial loop:<this file>")]
    BacksLoopDevice {
        path: PathBuf,
        loops: String,
        in_use: String,
    },
    #[error("refusing to write to {path}: {alias}, another name of the same storage, is in use by the kernel (exclusive open failed with EBUSY: mounted, swap, claimed by dm/md or opened exclusively by another program); release it first")]
    AliasBusy { path: PathBuf, alias: String },
    #[error("refusing to write to {path}: {alias}, another name of the same storage, changed while it was checked; try again")]
    AliasChanged { path: PathBuf, alias: String },
    #[error("refusing to write to {path}: it is in use by the kernel (exclusive open failed with EBUSY: mounted, swap, claimed by dm/md or opened exclusively by another program); release it first")]
    KernelBusy { path: PathBuf },
    #[error("refusing to write to {path}: exclusive open failed: {source}")]
    Open {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("refusing to write while in doubt: cannot inspect the block device: {0}")]
    Device(#[from] DeviceError),
}

/// Regular files: writes stay inside the file (the engine keeps every I/O inside the
/// region, and the region inside the file), so a regular file of its own (not a symbolic
/// link, no link on the way, one hard link) gets a permit when driveprobe created it
/// (its ownership mark), or when `allow_foreign` (the user's `--allow-destructive`) says
/// a file it did not create may be written.
pub fn authorize_file_writes(path: &Path, allow_foreign: bool) -> Result<WritePermit, SafetyError> {
    let meta = std::fs::symlink_metadata(path).map_err(|source| SafetyError::FileAccess {
        path: path.to_path_buf(),
        source,
    })?;
    if meta.file_type().is_symlink() {
        let to = std::fs::read_link(path).unwrap_or_default();
        return Err(SafetyError::Symlink {
            path: path.to_path_buf(),
            to,
        });
    }
    if !meta.file_type().is_file() {
        use std::os::unix::fs::MetadataExt;
        return Err(SafetyError::NotRegularFile {
            path: path.to_path_buf(),
            kind: crate::ownmark::kind_name(meta.mode()),
        });
    }
    // The file itself, reached without a link on any folder of the path: its mark and
    // identity are read from the descriptor, not from whatever the path names later.
    use rustix::fs::{Mode, OFlags};
    let fd = crate::ownmark::open_no_symlinks(
        path,
        OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY,
        Mode::empty(),
    )
    .map_err(|source| {
        if source.raw_os_error() == Some(libc::ELOOP) {
            SafetyError::SymlinkInPath {
                path: path.to_path_buf(),
            }
        } else if source.kind() == std::io::ErrorKind::PermissionDenied {
            SafetyError::PermissionDenied {
                path: path.to_path_buf(),
            }
        } else {
            SafetyError::FileAccess {
                path: path.to_path_buf(),
                source,
            }
        }
    })?;
    let st = rustix::fs::fstat(&fd).map_err(|e| SafetyError::FileAccess {
        path: path.to_path_buf(),
        source: e.into(),
    })?;
    if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::RegularFile {
        return Err(SafetyError::NotRegularFile {
            path: path.to_path_buf(),
            kind: crate::ownmark::kind_name(st.st_mode),
        });
    }
    if st.st_nlink > 1 {
        return Err(SafetyError::HardLinked {
            path: path.to_path_buf(),
            links: st.st_nlink as u64,
        });
    }
    // Aliases first: no flag allows writing a file another name of which is in use (a
    // loop device's image), so that is the refusal to name.
    check_file_aliases(path, st.st_dev, st.st_ino)?;
    if !allow_foreign && !crate::ownmark::is_own_file(&fd) {
        return Err(SafetyError::NotOwnFile {
            path: path.to_path_buf(),
        });
    }
    Ok(WritePermit {
        object: PermittedObject::File {
            dev: st.st_dev,
            ino: st.st_ino,
        },
        foreign_file: allow_foreign,
    })
}

/// Block devices: see the module documentation for what must hold. Never writes.
pub fn authorize_block_writes(
    info: &BlockDeviceInfo,
    req: &WriteRequest,
) -> Result<WritePermit, SafetyError> {
    let path = info.path.clone();
    if !req.allow_destructive {
        return Err(SafetyError::DestructiveNotAllowed { path });
    }
    if req.expect_serial.is_none() && req.expect_wwn.is_none() {
        return Err(SafetyError::NoExpectedIdentity { path });
    }

    // Identity must match the device as it is now, not as it was when `info` was made.
    let now = device::inspect(&info.path)?;
    if (now.major, now.minor) != (info.major, info.minor) {
        return Err(SafetyError::DeviceChanged {
            path,
            was_major: info.major,
            was_minor: info.minor,
            now_major: now.major,
            now_minor: now.minor,
        });
    }
    if let Some(expected) = &req.expect_serial {
        match &now.identity.serial {
            None => {
                return Err(SafetyError::NoSerial {
                    path,
                    expected: expected.clone(),
                })
            }
            Some(actual) if actual != expected => {
                return Err(SafetyError::SerialMismatch {
                    path,
                    expected: expected.clone(),
                    actual: actual.clone(),
                })
            }
            Some(_) => {}
        }
    }
    if let Some(expected) = &req.expect_wwn {
        match &now.identity.wwn {
            None => {
                return Err(SafetyError::NoWwn {
                    path,
                    expected: expected.clone(),
                })
            }
            Some(actual) if actual != expected => {
                return Err(SafetyError::WwnMismatch {
                    path,
                    expected: expected.clone(),
                    actual: actual.clone(),
                })
            }
            Some(_) => {}
        }
    }

    // Mounted, swap, holders: of the device and of every other name of its storage.
    let aliases = device::alias_set_of_block(&now.name)?;
    let reasons = device::aliases_in_use(&aliases)?;
    if !reasons.is_empty() {
        return Err(SafetyError::InUse {
            path,
            reasons: InUseReasons(reasons),
        });
    }

    // The kernel's word: an exclusive open fails with EBUSY while anything claims it.
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_EXCL | libc::O_CLOEXEC)
        .open(&now.path)
        .map_err(|source| {
            if source.raw_os_error() == Some(libc::EBUSY) {
                SafetyError::KernelBusy { path: path.clone() }
            } else {
                SafetyError::Open {
                    path: path.clone(),
                    source,
                }
            }
        })?;
    let meta = file.metadata().map_err(|source| SafetyError::Open {
        path: path.clone(),
        source,
    })?;
    let rdev = meta.rdev();
    if !meta.file_type().is_block_device() || rdev != info.rdev() {
        return Err(SafetyError::DeviceChanged {
            path,
            was_major: info.major,
            was_minor: info.minor,
            now_major: rustix::fs::major(rdev),
            now_minor: rustix::fs::minor(rdev),
        });
    }
    claim_alias_loops(&path, &aliases)?;
    Ok(WritePermit {
        object: PermittedObject::Block { rdev },
        foreign_file: false,
    })
}

/// The kernel's word on the loop devices among the aliases: an exclusive read-only open of
/// each (released at once) fails with EBUSY while anything claims it, including claims no
/// table shows (an ext4 external journal, another program's `O_EXCL` open). Loop devices
/// only: opening one does no I/O, while opening another path of a LUN could hang on it.
fn claim_alias_loops(path: &Path, aliases: &device::AliasSet) -> Result<(), SafetyError> {
    let paths = device::SystemPaths::default();
    for (label, name, major, minor) in aliases.loops_to_claim(&paths) {
        let node = PathBuf::from(format!("/dev/{name}"));
        let opened = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_EXCL | libc::O_CLOEXEC | libc::O_NONBLOCK)
            .open(&node);
        match opened {
            Ok(f) => {
                let same = f.metadata().is_ok_and(|m| {
                    m.file_type().is_block_device() && m.rdev() == rustix::fs::makedev(major, minor)
                });
                if !same {
                    return Err(SafetyError::AliasChanged {
                        path: path.to_path_buf(),
                        alias: label,
                    });
                }
            }
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                return Err(SafetyError::AliasBusy {
                    path: path.to_path_buf(),
                    alias: label,
                })
            }
            // Detached since the walk: nothing left to claim it.
            Err(e) if e.raw_os_error() == Some(libc::ENXIO) => {}
            Err(source) => return Err(SafetyError::Open { path: node, source }),
        }
    }
    Ok(())
}

/// A regular file's other names as storage: the loop devices over it (matched by device
/// and inode) and what is stacked on them, and the file as a swap area. A file that backs
/// a loop device is refused whatever the flags: writing it writes that block device, which
/// must go through [`authorize_block_writes`] by its own name with all its checks (even a
/// free loop device: its data is the file's, and the block gate is where the user confirms
/// with `--allow-destructive` and its serial `loop:<file>` that it may be destroyed).
pub fn check_file_aliases(path: &Path, dev: u64, ino: u64) -> Result<(), SafetyError> {
    let label = path.display().to_string();
    let aliases = device::alias_set_of_file(dev, ino, &label)?;
    let reasons = device::aliases_in_use(&aliases)?;
    let loops = aliases.block_devices();
    if !loops.is_empty() {
        let in_use = if reasons.is_empty() {
            "none of them is in use now".to_string()
        } else {
            InUseReasons(reasons).to_string()
        };
        return Err(SafetyError::BacksLoopDevice {
            path: path.to_path_buf(),
            loops: loops.join(", "),
            in_use,
        });
    }
    if !reasons.is_empty() {
        return Err(SafetyError::InUse {
            path: path.to_path_buf(),
            reasons: InUseReasons(reasons),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::DeviceIdentity;

    fn info(path: &str) -> BlockDeviceInfo {
        BlockDeviceInfo {
            path: path.into(),
            name: "loop99".into(),
            major: 7,
            minor: 99,
            size_bytes: 1 << 20,
            logical_block_size: 512,
            physical_block_size: 512,
            is_partition: false,
            partitions: vec![],
            parent: None,
            identity: DeviceIdentity::default(),
        }
    }

    #[test]
    fn file_permit_names_dev_and_inode() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("target");
        std::fs::write(&f, b"data").unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&f, &link).unwrap();
        let meta = std::fs::metadata(&f).unwrap();
        let want = PermittedObject::File {
            dev: meta.dev(),
            ino: meta.ino(),
        };
        assert_eq!(authorize_file_writes(&f, true).unwrap().object(), want);
        // Not through a symbolic link: it could name another file than the user meant.
        let err = authorize_file_writes(&link, true).unwrap_err();
        assert!(matches!(err, SafetyError::Symlink { .. }), "{err}");
        assert!(err.to_string().contains("symbolic link"), "{err}");
        // Not a file with a second name: writes would show under that name too.
        let twin = dir.path().join("twin");
        std::fs::hard_link(&f, &twin).unwrap();
        let err = authorize_file_writes(&f, true).unwrap_err();
        assert!(
            matches!(err, SafetyError::HardLinked { links: 2, .. }),
            "{err}"
        );
        std::fs::remove_file(&twin).unwrap();
        assert_eq!(authorize_file_writes(&f, true).unwrap().object(), want);
    }

    #[test]
    fn file_permit_refuses_dirs_missing_and_devices() {
        let dir = tempfile::tempdir().unwrap();
        assert!(matches!(
            authorize_file_writes(dir.path(), true),
            Err(SafetyError::NotRegularFile { .. })
        ));
        assert!(matches!(
            authorize_file_writes(&dir.path().join("nope"), true),
            Err(SafetyError::FileAccess { .. })
        ));
        assert!(matches!(
            authorize_file_writes(Path::new("/dev/null"), true),
            Err(SafetyError::NotRegularFile { .. })
        ));
    }

    #[test]
    fn block_refuses_without_allow_destructive_first() {
        let req = WriteRequest {
            allow_destructive: false,
            expect_serial: Some("x".into()),
            expect_wwn: None,
        };
        let err = authorize_block_writes(&info("/dev/loop99"), &req).unwrap_err();
        assert!(matches!(err, SafetyError::DestructiveNotAllowed { .. }));
        assert_eq!(
            err.to_string(),
            "writing to block device /dev/loop99 destroys its data: pass --allow-destructive \
             and --expect-serial (or --expect-wwn) to confirm"
        );
    }

    #[test]
    fn block_refuses_without_expected_identity() {
        let req = WriteRequest {
            allow_destructive: true,
            ..Default::default()
        };
        let err = authorize_block_writes(&info("/dev/loop99"), &req).unwrap_err();
        assert!(matches!(err, SafetyError::NoExpectedIdentity { .. }));
    }

    #[test]
    fn block_refuses_when_device_cannot_be_inspected() {
        let req = WriteRequest {
            allow_destructive: true,
            expect_serial: Some("x".into()),
            expect_wwn: None,
        };
        let err = authorize_block_writes(&info("/nonexistent/dev"), &req).unwrap_err();
        assert!(matches!(err, SafetyError::Device(_)), "{err}");
    }

    #[test]
    fn in_use_reasons_display() {
        let r = InUseReasons(vec![
            InUse::Mounted {
                device: "/dev/loop3p1".into(),
                mountpoint: "/mnt/x".into(),
            },
            InUse::Swap {
                device: "/dev/loop3p2".into(),
            },
        ]);
        assert_eq!(
            r.to_string(),
            "/dev/loop3p1 is mounted on /mnt/x; /dev/loop3p2 is in use as swap"
        );
    }

    #[test]
    fn file_permit_needs_driveprobes_mark_unless_allowed_and_no_linked_folder() {
        let dir = tempfile::tempdir().unwrap();
        let theirs = dir.path().join("theirs");
        std::fs::write(&theirs, b"data").unwrap();
        let err = authorize_file_writes(&theirs, false).unwrap_err();
        assert!(matches!(err, SafetyError::NotOwnFile { .. }), "{err}");
        assert!(err.to_string().contains("--allow-destructive"), "{err}");
        assert!(authorize_file_writes(&theirs, true)
            .unwrap()
            .foreign_file_allowed());
        let own = dir.path().join("own");
        crate::target::create_file_if_missing(&own, 4096).unwrap();
        assert!(authorize_file_writes(&own, false).is_ok());
        // Through a linked folder: refused, allowed or not.
        std::os::unix::fs::symlink(dir.path(), dir.path().join("via")).unwrap();
        for allow in [false, true] {
            let err = authorize_file_writes(&dir.path().join("via/own"), allow).unwrap_err();
            assert!(matches!(err, SafetyError::SymlinkInPath { .. }), "{err}");
        }
    }
}
