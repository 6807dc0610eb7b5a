//! What the engine does I/O on: a regular file or a block device, opened read-only unless
//! a [`WritePermit`] for exactly that object is shown (the one gate for writes is
//! `crate::safety`).

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::device::{self, BlockDeviceInfo};
use crate::ownmark::{is_own_file, open_no_symlinks, OWNER_XATTR};
use crate::ownmark::{kind_name, mark_own, open_parent};
use crate::safety::{PermittedObject, WritePermit};
use crate::units::format_size;

#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    #[error("{0}: no such file or device: check the path (a file target is created only when a size is given)")]
    NotFound(PathBuf),
    #[error(
        "{0}: permission denied: run as a user who may open it (block devices usually need root)"
    )]
    PermissionDenied(PathBuf),
    /// Root was refused: not the file's permissions but a sandbox around the process.
    #[error(
        "{0}: permission denied although driveprobe runs as root: likely the driveprobe unit's sandbox (a drive to be written needs DeviceAllow=<its class> rw in a drop-in: `systemctl edit driveprobe`), else an LSM (AppArmor, SELinux) or an NFS root_squash"
    )]
    DeniedBySandbox(PathBuf),
    #[error("{0}: its filesystem is mounted read-only: remount it read-write to write to it (reading needs no change)")]
    ReadOnly(PathBuf),
    #[error("{0}: the filesystem refuses O_DIRECT: pass --buffered to go through the page cache")]
    DirectRefused(PathBuf),
    #[error("{0}: not a regular file or a block device")]
    WrongKind(PathBuf),
    /// A special file (/dev/zero, a FIFO, a socket, a directory) named as a target: never
    /// one, whatever the flags, and never "remove it" (it is not driveprobe's to remove).
    #[error("{path}: is a {kind}, not a regular file{or_block}: a {kind} is never a target; give {give}")]
    SpecialFile {
        path: PathBuf,
        kind: &'static str,
        or_block: &'static str,
        give: &'static str,
    },
    #[error("{path}: the region needs {need} bytes but the target has {have}: give a smaller --size/--offset, or a bigger target")]
    TooSmall { path: PathBuf, need: u64, have: u64 },
    #[error("{path}: block size {bs} is not a multiple of the {what} ({align} bytes): use a block size that is")]
    Misaligned {
        path: PathBuf,
        bs: u64,
        align: u64,
        what: &'static str,
    },
    #[error("{path}: the region offset {offset} is not a multiple of the {what} ({align} bytes)")]
    MisalignedOffset {
        path: PathBuf,
        offset: u64,
        align: u64,
        what: &'static str,
    },
    #[error("{0}: the write permit was issued for another file or device: refusing to write")]
    PermitMismatch(PathBuf),
    #[error("{0}: is a symbolic link now, or a folder on its path is: refusing to write through it; give the file's own path, with no link on the way (see `realpath`)")]
    SymlinkForWrite(PathBuf),
    #[error("{0}: a folder on its path, or the file itself, is a symbolic link: driveprobe does not follow links to a file target; give the real path, with no link on the way (see `realpath`)")]
    SymlinkInPath(PathBuf),
    #[error("{0}: exists and driveprobe did not create it (it lacks driveprobe's {OWNER_XATTR} mark for this very file): driveprobe never reads or writes a file target it did not create; choose a path that does not exist (driveprobe creates the file there), or remove the file")]
    NotOwnFile(PathBuf),
    #[error("{0}: its filesystem keeps no user extended attributes, so driveprobe cannot mark the file as its own (and would refuse it later): put the file target on a filesystem that does, such as ext4, xfs, btrfs or tmpfs")]
    NoOwnerMark(PathBuf),
    #[error("{path}: has {links} hard links now: refusing to write, it would change the file under its other names too; give a file of its own")]
    HardLinked { path: PathBuf, links: u64 },
    #[error("{0}: the region is empty")]
    EmptyRegion(PathBuf),
    #[error(transparent)]
    Device(#[from] device::DeviceError),
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: io::Error },
}

/// The part of the target the job touches, before it is resolved against the target size.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum RegionSpec {
    /// The whole target.
    Whole,
    /// `len` bytes from `offset` (to the end of the target when `len` is None).
    Bytes { offset: u64, len: Option<u64> },
    /// A share of the target, as fractions 0..=1: `start..end`.
    Percent { start: f64, end: f64 },
}

/// A resolved region: bytes `[start, start + len)` of the target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Region {
    pub start: u64,
    pub len: u64,
}

#[derive(Debug, Clone, serde::Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum TargetKind {
    File,
    BlockDevice { device: BlockDeviceInfo },
}

/// An opened target.
#[derive(Debug, Clone)]
pub struct Target {
    path: PathBuf,
    kind: TargetKind,
    file: Arc<File>,
    size: u64,
    /// Offsets and sizes must be multiples of this (O_DIRECT alignment); 1 when buffered.
    align: u64,
    writable: bool,
    direct: bool,
}

/// An open that failed: `O_DIRECT` refused (EINVAL) is said as such.
fn open_err(path: &Path, direct: bool, e: std::io::Error) -> TargetError {
    if e.raw_os_error() == Some(libc::EINVAL) && direct {
        TargetError::DirectRefused(path.to_path_buf())
    } else {
        io_err(path, e)
    }
}

fn io_err(path: &Path, e: io::Error) -> TargetError {
    match e.kind() {
        io::ErrorKind::NotFound => TargetError::NotFound(path.to_path_buf()),
        io::ErrorKind::PermissionDenied if rustix::process::geteuid().is_root() => {
            TargetError::DeniedBySandbox(path.to_path_buf())
        }
        io::ErrorKind::PermissionDenied => TargetError::PermissionDenied(path.to_path_buf()),
        _ if e.raw_os_error() == Some(libc::EROFS) => TargetError::ReadOnly(path.to_path_buf()),
        _ if e.raw_os_error() == Some(libc::ELOOP) => {
            TargetError::SymlinkInPath(path.to_path_buf())
        }
        _ => TargetError::Io {
            path: path.to_path_buf(),
            source: e,
        },
    }
}

impl Target {
    /// Opens `path` for reading, or for reading and writing when `permit` is given and
    /// names this very object. Writable block devices are opened with O_EXCL, so the kernel
    /// keeps anyone from mounting or claiming them while we run.
    ///
    /// A regular file opened for writing is reached without following a symbolic link on
    /// any component of its path ([`open_no_symlinks`]), and must be driveprobe's own
    /// ([`is_own_file`]) unless the permit allows a file it did not create. A block device
    /// may be named through a link (`/dev/disk/by-id/...`): its permit names the device
    /// itself (`st_rdev`), checked on the opened descriptor. A file only read by `bench` may
    /// be named through a link too: the user named it, and reading destroys nothing.
    pub fn open(
        path: &Path,
        direct: bool,
        permit: Option<&WritePermit>,
    ) -> Result<Target, TargetError> {
        Self::open_checked(path, direct, permit, None)
    }

    /// Opens the daemon's file target: driveprobe's own file (its mark checked on the
    /// opened descriptor, read or write), reached without following a link on any
    /// component, and used only up to `size` bytes (a longer file is touched within its
    /// first `size` bytes only).
    pub fn open_own_file(
        path: &Path,
        direct: bool,
        permit: Option<&WritePermit>,
        size: u64,
    ) -> Result<Target, TargetError> {
        Self::open_checked(path, direct, permit, Some(size))
    }

    fn open_checked(
        path: &Path,
        direct: bool,
        permit: Option<&WritePermit>,
        own_size: Option<u64>,
    ) -> Result<Target, TargetError> {
        let meta = std::fs::metadata(path).map_err(|e| io_err(path, e))?;
        let ft = meta.file_type();
        let is_block = ft.is_block_device() && own_size.is_none();
        if !is_block && !ft.is_file() {
            if own_size.is_some() {
                return Err(special_file_target(path, meta.mode()));
            }
            return Err(TargetError::SpecialFile {
                path: path.to_path_buf(),
                kind: kind_name(meta.mode()),
                or_block: " or a block device",
                give: "a regular file or a block device",
            });
        }
        let file = if is_block {
            let mut flags = 0;
            if direct {
                flags |= libc::O_DIRECT;
            }
            if permit.is_some() {
                flags |= libc::O_EXCL;
            }
            OpenOptions::new()
                .read(true)
                .write(permit.is_some())
                .custom_flags(flags)
                .open(path)
                .map_err(|e| open_err(path, direct, e))?
        } else {
            use rustix::fs::{Mode, OFlags};
            let mut flags = if permit.is_some() {
                OFlags::RDWR
            } else {
                OFlags::RDONLY
            };
            // Non-blocking while it is opened: a FIFO swapped in after the check above
            // does not hang the open (it is refused below as not a regular file).
            flags |= OFlags::NONBLOCK | OFlags::NOCTTY;
            if direct {
                flags |= OFlags::DIRECT;
            }
            let strict = permit.is_some() || own_size.is_some();
            match open_no_symlinks(path, flags, Mode::empty()) {
                Ok(fd) => {
                    let fl = rustix::fs::fcntl_getfl(&fd).map_err(|e| io_err(path, e.into()))?;
                    rustix::fs::fcntl_setfl(&fd, fl - OFlags::NONBLOCK)
                        .map_err(|e| io_err(path, e.into()))?;
                    File::from(fd)
                }
                Err(e) if e.raw_os_error() == Some(libc::ELOOP) && permit.is_some() => {
                    return Err(TargetError::SymlinkForWrite(path.to_path_buf()))
                }
                Err(e) if e.raw_os_error() == Some(libc::ELOOP) && !strict => {
                    // Read-only, named by the user through a link: followed.
                    OpenOptions::new()
                        .read(true)
                        .custom_flags(if direct { libc::O_DIRECT } else { 0 })
                        .open(path)
                        .map_err(|e| open_err(path, direct, e))?
                }
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) && direct => {
                    return Err(TargetError::DirectRefused(path.to_path_buf()))
                }
                Err(e) => return Err(io_err(path, e)),
            }
        };
        // Check what was opened, not what the path named a moment before.
        let opened = file.metadata().map_err(|e| io_err(path, e))?;
        if let Some(p) = permit {
            let ok = match p.object() {
                PermittedObject::File { dev, ino } => {
                    opened.file_type().is_file() && opened.dev() == dev && opened.ino() == ino
                }
                PermittedObject::Block { rdev } => {
                    opened.file_type().is_block_device() && opened.rdev() == rdev
                }
            };
            if !ok {
                return Err(TargetError::PermitMismatch(path.to_path_buf()));
            }
            if opened.file_type().is_file() && opened.nlink() > 1 {
                return Err(TargetError::HardLinked {
                    path: path.to_path_buf(),
                    links: opened.nlink(),
                });
            }
        }
        if is_block {
            if !opened.file_type().is_block_device() {
                return Err(TargetError::WrongKind(path.to_path_buf()));
            }
        } else {
            if !opened.file_type().is_file() {
                if own_size.is_some() {
                    return Err(special_file_target(path, opened.mode()));
                }
                return Err(TargetError::WrongKind(path.to_path_buf()));
            }
            // Driveprobe's own file, checked on the descriptor the I/O will use: the
            // daemon's file target always, a write by bench or a suite unless the user
            // allowed a file driveprobe did not create.
            let need_mark = own_size.is_some() || permit.is_some_and(|p| !p.foreign_file_allowed());
            if need_mark && !is_own_file(&file) {
                return Err(TargetError::NotOwnFile(path.to_path_buf()));
            }
        }
        let (kind, size, align) = if is_block {
            let info = device::inspect(path)?;
            let size = info.size_bytes;
            let align = if direct {
                info.logical_block_size.max(512) as u64
            } else {
                1
            };
            (TargetKind::BlockDevice { device: info }, size, align)
        } else {
            let align = if direct { dio_align(&file, path)? } else { 1 };
            let len = match own_size {
                Some(cap) => opened.len().min(cap),
                None => opened.len(),
            };
            (TargetKind::File, len, align)
        };
        Ok(Target {
            path: path.to_path_buf(),
            kind,
            file: Arc::new(file),
            size,
            align,
            writable: permit.is_some(),
            direct,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
    pub fn kind(&self) -> &TargetKind {
        &self.kind
    }
    pub fn size(&self) -> u64 {
        self.size
    }
    pub fn align(&self) -> u64 {
        self.align
    }
    pub fn writable(&self) -> bool {
        self.writable
    }
    pub fn direct(&self) -> bool {
        self.direct
    }
    pub fn is_block_device(&self) -> bool {
        matches!(self.kind, TargetKind::BlockDevice { .. })
    }
    /// Whether the target is a file on a memory-backed filesystem (tmpfs, ramfs,
    /// hugetlbfs): no device and no block layer behind its I/O.
    pub fn in_memory(&self) -> bool {
        const TMPFS_MAGIC: u64 = 0x0102_1994;
        const RAMFS_MAGIC: u64 = 0x8584_58f6;
        const HUGETLBFS_MAGIC: u64 = 0x9584_58f6;
        !self.is_block_device()
            && rustix::fs::fstatfs(&*self.file).is_ok_and(|s| {
                matches!(s.f_type as u64, TMPFS_MAGIC | RAMFS_MAGIC | HUGETLBFS_MAGIC)
            })
    }
    pub fn file(&self) -> &Arc<File> {
        &self.file
    }

    /// A path that names the very object this target opened (`/proc/PID/fd/N`, a link
    /// the kernel resolves to the open file, not by its path again), for a program that
    /// opens the target itself: a folder on the path swapped for a symbolic link after the
    /// gate's checks cannot steer it elsewhere.
    pub fn opened_path(&self) -> PathBuf {
        use std::os::fd::AsRawFd;
        PathBuf::from(format!(
            "/proc/{}/fd/{}",
            std::process::id(),
            self.file.as_raw_fd()
        ))
    }

    fn align_name(&self) -> &'static str {
        if self.is_block_device() {
            "device's logical block size"
        } else {
            "filesystem's O_DIRECT alignment"
        }
    }

    /// Resolves a job's region against this target and checks its block sizes
    /// (`block_sizes`, bytes) against the alignment O_DIRECT needs.
    pub fn resolve(&self, region: RegionSpec, block_sizes: &[u32]) -> Result<Region, TargetError> {
        let align = self.align.max(1);
        let max_bs = block_sizes.iter().copied().max().unwrap_or(512) as u64;
        for &bs in block_sizes {
            if bs as u64 % align != 0 {
                return Err(TargetError::Misaligned {
                    path: self.path.clone(),
                    bs: bs as u64,
                    align,
                    what: self.align_name(),
                });
            }
        }
        let (start, len) = match region {
            RegionSpec::Whole => (0, self.size),
            RegionSpec::Bytes { offset, len } => {
                let len = match len {
                    Some(l) => l,
                    None => self.size.saturating_sub(offset),
                };
                (offset, len)
            }
            RegionSpec::Percent { start, end } => {
                let s = (self.size as f64 * start) as u64 / align * align;
                let e = (self.size as f64 * end) as u64;
                (s, e.saturating_sub(s))
            }
        };
        if start % align != 0 {
            return Err(TargetError::MisalignedOffset {
                path: self.path.clone(),
                offset: start,
                align,
                what: self.align_name(),
            });
        }
        let need = start.saturating_add(len);
        if need > self.size {
            return Err(TargetError::TooSmall {
                path: self.path.clone(),
                need,
                have: self.size,
            });
        }
        // Whole multiples of the alignment (a partial trailing block cannot be O_DIRECTed).
        let len = len / align * align;
        if len == 0 || len < max_bs {
            return Err(TargetError::TooSmall {
                path: self.path.clone(),
                need: start + max_bs,
                have: self.size,
            });
        }
        Ok(Region { start, len })
    }

    /// A one-line description for humans: `/dev/shm/x (file, 1g, O_DIRECT, read-only)`.
    pub fn describe(&self) -> String {
        format!(
            "{} ({}, {}, {}, {})",
            self.path.display(),
            if self.is_block_device() {
                "block device"
            } else {
                "file"
            },
            format_size(self.size),
            if self.direct { "O_DIRECT" } else { "buffered" },
            if self.writable {
                "read-write"
            } else {
                "read-only"
            }
        )
    }
}

/// O_DIRECT offset alignment of a file, from statx(STATX_DIOALIGN) where the kernel
/// reports it (Linux 6.1+), else 512.
fn dio_align(file: &File, path: &Path) -> Result<u64, TargetError> {
    use rustix::fs::{statx, AtFlags, StatxFlags};
    match statx(file, "", AtFlags::EMPTY_PATH, StatxFlags::DIOALIGN) {
        Ok(st) if st.stx_mask & StatxFlags::DIOALIGN.bits() != 0 => {
            if st.stx_dio_offset_align == 0 {
                Err(TargetError::DirectRefused(path.to_path_buf()))
            } else {
                Ok(st.stx_dio_offset_align as u64)
            }
        }
        _ => Ok(512),
    }
}

/// Creates a file target of `size` bytes when `path` does not exist, and fills it with
/// random (incompressible) data so that reads hit real, allocated blocks rather than
/// holes the filesystem answers with zeros. An existing file is never truncated or
/// written. Returns true when the file was created.
///
/// The file is marked as driveprobe's own ([`OWNER_XATTR`]) before anything is written
/// to it; a filesystem that cannot keep the mark is refused. No symbolic link is
/// followed on the way to it ([`open_no_symlinks`]): the folder is opened once, and the
/// file is made and named inside that very folder.
///
/// The file appears whole or not at all: it is filled under a temporary name in the same
/// directory and then renamed to `path` without replacing anything (`RENAME_NOREPLACE`),
/// so a second thread or process opening `path` meanwhile never sees a short file, nor a
/// file with two links (which the write gate refuses).
pub fn create_file_if_missing(path: &Path, size: u64) -> Result<bool, TargetError> {
    use rustix::fs::{openat, statat, unlinkat, AtFlags, Mode, OFlags};
    use std::io::Write;
    let (dir, name) = open_parent(path).map_err(|e| io_err(path, e))?;
    if statat(&dir, name.as_os_str(), AtFlags::SYMLINK_NOFOLLOW).is_ok() {
        return Ok(false);
    }
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let tmp = format!(
        ".{}.creating-{}-{nanos}",
        name.to_string_lossy(),
        std::process::id()
    );
    let fd = openat(
        &dir,
        tmp.as_str(),
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o666),
    )
    .map_err(|e| io_err(path, e.into()))?;
    let mut f = File::from(fd);
    let mut unmarked = false;
    let result = (|| -> io::Result<()> {
        if let Err(e) = mark_own(&f) {
            if e.raw_os_error() == Some(libc::EOPNOTSUPP) {
                unmarked = true;
            }
            return Err(e);
        }
        // Refuse before writing anything when the filesystem cannot hold the file.
        if let Ok(st) = rustix::fs::fstatvfs(&f) {
            let free = st.f_bavail.saturating_mul(st.f_frsize);
            if size > free {
                return Err(io::Error::new(
                    io::ErrorKind::StorageFull,
                    format!(
                        "the filesystem has {} free, the file needs {}: give a smaller --size",
                        format_size(free),
                        format_size(size)
                    ),
                ));
            }
        }
        match rustix::fs::fallocate(&f, rustix::fs::FallocateFlags::empty(), 0, size) {
            Ok(()) => {}
            // Not supported by this filesystem: the writes below allocate.
            Err(e) if e == rustix::io::Errno::OPNOTSUPP || e == rustix::io::Errno::NOSYS => {}
            Err(e) => return Err(e.into()),
        }
        let mut rng = crate::rng::Rng::new(size ^ 0x5eed);
        // 64 KiB at a time: the daemon makes many file targets at once at its first
        // start (one per canary thread), and a megabyte each, freed at once, left the
        // heap that much larger for good (glibc's mmap threshold rises after the first
        // free of a large block, so the later ones come from the heap).
        let mut chunk = vec![0u8; 64 << 10];
        let mut left = size;
        while left > 0 {
            let n = left.min(chunk.len() as u64) as usize;
            rng.fill(&mut chunk[..n]);
            f.write_all(&chunk[..n])?;
            left -= n as u64;
        }
        f.sync_all()
    })();
    drop(f);
    let linked = result.and_then(|()| publish(&dir, &tmp, &name));
    let _ = unlinkat(&dir, tmp.as_str(), AtFlags::empty());
    match linked {
        Ok(()) => Ok(true),
        Err(_) if unmarked => Err(TargetError::NoOwnerMark(path.to_path_buf())),
        // Someone else created it meanwhile: theirs is whole too.
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(io_err(path, e)),
    }
}

/// Gives `tmp` the name `name` in `dir`, failing with `AlreadyExists` when it exists:
/// `renameat2(RENAME_NOREPLACE)`, or, where the filesystem does not support it, a hard
/// link (the caller removes `tmp`, so the file has two links only for a moment).
fn publish(dir: &rustix::fd::OwnedFd, tmp: &str, name: &std::ffi::OsStr) -> io::Result<()> {
    use rustix::fs::{linkat, renameat_with, AtFlags, RenameFlags};
    match renameat_with(dir, tmp, dir, name, RenameFlags::NOREPLACE) {
        Ok(()) => Ok(()),
        Err(e) if e == rustix::io::Errno::INVAL || e == rustix::io::Errno::NOSYS => {
            linkat(dir, tmp, dir, name, AtFlags::empty()).map_err(io::Error::from)
        }
        Err(e) => Err(e.into()),
    }
}

/// What [`ensure_own_file`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ensured {
    /// Driveprobe's own file was there, at least `size` long.
    Kept,
    Created,
    /// Driveprobe's own file was shorter (`was` bytes; truncated under the daemon): it
    /// was removed and created again.
    Recreated {
        was: u64,
    },
}

/// Makes the daemon's file target at `path` what the config says, never touching a file
/// driveprobe did not create: a missing one is created (and marked); driveprobe's own but
/// shorter than `size` is removed and created again; anything else at `path` (a file
/// without the mark, a copy of one, a directory, a device, a link, or a link on the way)
/// is refused, untouched. Reads go only through descriptors opened without links.
pub fn ensure_own_file(path: &Path, size: u64) -> Result<Ensured, TargetError> {
    use rustix::fs::{fstat, openat, statat, unlinkat, AtFlags, Mode, OFlags};
    let (dir, name) = open_parent(path).map_err(|e| io_err(path, e))?;
    let flags =
        OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let fd = match openat(&dir, name.as_os_str(), flags, Mode::empty()) {
        Ok(fd) => fd,
        Err(e) if e == rustix::io::Errno::NOENT => {
            return create_file_if_missing(path, size).map(|created| {
                if created {
                    Ensured::Created
                } else {
                    Ensured::Kept
                }
            })
        }
        Err(e) if e == rustix::io::Errno::LOOP => {
            return Err(TargetError::SymlinkInPath(path.to_path_buf()))
        }
        // A FIFO with no writer and the like: not driveprobe's.
        Err(e) if e == rustix::io::Errno::NXIO => {
            return Err(TargetError::NotOwnFile(path.to_path_buf()))
        }
        Err(e) => return Err(io_err(path, e.into())),
    };
    let st = fstat(&fd).map_err(|e| io_err(path, e.into()))?;
    if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::RegularFile {
        return Err(special_file_target(path, st.st_mode));
    }
    if !is_own_file(&fd) {
        return Err(TargetError::NotOwnFile(path.to_path_buf()));
    }
    let st = fstat(&fd).map_err(|e| io_err(path, e.into()))?;
    if st.st_size as u64 >= size {
        return Ok(Ensured::Kept);
    }
    // Driveprobe's own, truncated: removed by its name in the folder opened above, and
    // only while that name is still this file.
    let now = statat(&dir, name.as_os_str(), AtFlags::SYMLINK_NOFOLLOW)
        .map_err(|e| io_err(path, e.into()))?;
    if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino) {
        return Err(TargetError::NotOwnFile(path.to_path_buf()));
    }
    unlinkat(&dir, name.as_os_str(), AtFlags::empty()).map_err(|e| io_err(path, e.into()))?;
    create_file_if_missing(path, size)?;
    Ok(Ensured::Recreated {
        was: st.st_size as u64,
    })
}

/// The error for a daemon file target that names something other than a regular file.
fn special_file_target(path: &Path, mode: rustix::fs::RawMode) -> TargetError {
    TargetError::SpecialFile {
        path: path.to_path_buf(),
        kind: kind_name(mode),
        or_block: "",
        give: "a path that does not exist (driveprobe creates its file there), or a [[drive]] with a device",
    }
}

/// For `check-config`: refuses a file target path that names something driveprobe did
/// not create, or that has a symbolic link on the way. A path that does not exist yet
/// (the daemon creates it) is fine; so is one this user may not look at (the daemon, as
/// root, checks again before every open).
pub fn check_own_file_path(path: &Path) -> Result<(), TargetError> {
    use rustix::fs::{Mode, OFlags};
    let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY;
    match open_no_symlinks(path, flags, Mode::empty()) {
        Ok(fd) => {
            let st = rustix::fs::fstat(&fd).map_err(|e| io_err(path, e.into()))?;
            if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::RegularFile
            {
                Err(special_file_target(path, st.st_mode))
            } else if is_own_file(&fd) {
                Ok(())
            } else {
                Err(TargetError::NotOwnFile(path.to_path_buf()))
            }
        }
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            Err(TargetError::SymlinkInPath(path.to_path_buf()))
        }
        Err(e) if e.raw_os_error() == Some(libc::ENXIO) => {
            Err(TargetError::NotOwnFile(path.to_path_buf()))
        }
        Err(_) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Denied to root is a sandbox (the unit's DeviceAllow=, an LSM), not permissions:
    /// the error says how to allow it under the unit instead of "run as root".
    #[test]
    fn permission_denied_to_root_names_the_sandbox() {
        let e = io_err(
            Path::new("/dev/sdz"),
            io::Error::from(io::ErrorKind::PermissionDenied),
        );
        let root = rustix::process::geteuid().is_root();
        assert_eq!(matches!(e, TargetError::DeniedBySandbox(_)), root, "{e}");
        let msg = e.to_string();
        if root {
            assert!(
                msg.contains("DeviceAllow=") && !msg.contains("need root"),
                "{msg}"
            );
        } else {
            assert!(msg.contains("need root"), "{msg}");
        }
    }
    use crate::safety;

    #[test]
    fn files_in_memory_are_told_from_files_on_a_device() {
        // The oracle is coreutils' `stat -f`, which names the filesystem's type.
        let mut seen = Vec::new();
        for dir in ["/dev/shm".into(), "/var/tmp".into(), std::env::temp_dir()] {
            let out = std::process::Command::new("stat")
                .args(["-f", "-c", "%T"])
                .arg(&dir)
                .output()
                .unwrap();
            let fs = String::from_utf8(out.stdout).unwrap().trim().to_string();
            let d = tempfile::tempdir_in(&dir).unwrap();
            let p = d.path().join("t.dat");
            create_file_if_missing(&p, 64 << 10).unwrap();
            let t = Target::open(&p, false, None).unwrap();
            let expect = matches!(fs.as_str(), "tmpfs" | "ramfs" | "hugetlbfs");
            assert_eq!(t.in_memory(), expect, "{} on {fs}", dir.display());
            seen.push(expect);
        }
        assert!(seen[0], "/dev/shm is tmpfs");
    }

    #[test]
    fn a_created_file_has_one_link_and_an_existing_one_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.dat");
        assert!(create_file_if_missing(&p, 64 << 10).unwrap());
        let m = std::fs::metadata(&p).unwrap();
        assert_eq!((m.len(), m.nlink()), (64 << 10, 1));
        let before = std::fs::read(&p).unwrap();
        assert!(!create_file_if_missing(&p, 128 << 10).unwrap());
        assert_eq!(std::fs::read(&p).unwrap(), before);
        // No temporary file left behind.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn a_file_permit_does_not_follow_a_link_or_write_a_second_name() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("f");
        let other = dir.path().join("other");
        std::fs::write(&f, vec![1u8; 8192]).unwrap();
        std::fs::write(&other, vec![2u8; 8192]).unwrap();
        let permit = safety::authorize_file_writes(&f, true).unwrap();
        assert!(Target::open(&f, false, Some(&permit)).unwrap().writable());

        // A link to the permitted file itself, swapped in after the check: not followed.
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&f, &link).unwrap();
        let e = Target::open(&link, false, Some(&permit)).unwrap_err();
        assert!(matches!(e, TargetError::SymlinkForWrite(_)), "{e}");
        // A link to another file: refused too, and `other` is opened read-only at most.
        let link2 = dir.path().join("link2");
        std::os::unix::fs::symlink(&other, &link2).unwrap();
        assert!(Target::open(&link2, false, Some(&permit)).is_err());
        assert!(!Target::open(&link2, false, None).unwrap().writable());

        // A second name made after the permit: refused at open.
        std::fs::hard_link(&f, dir.path().join("twin")).unwrap();
        let e = Target::open(&f, false, Some(&permit)).unwrap_err();
        assert!(matches!(e, TargetError::HardLinked { links: 2, .. }), "{e}");
        assert_eq!(std::fs::read(&other).unwrap(), vec![2u8; 8192]);
    }

    #[test]
    fn a_created_file_is_marked_and_a_copy_of_it_is_not_its_own() {
        let dir = tempfile::tempdir_in("/dev/shm").unwrap();
        let p = dir.path().join("t.dat");
        assert!(create_file_if_missing(&p, 64 << 10).unwrap());
        assert!(is_own_file(File::open(&p).unwrap()));
        // The mark names the inode (and birth time), not the device number, which may
        // change at a reboot: the daemon's file stays its own.
        let mut buf = [0u8; 128];
        let n = rustix::fs::getxattr(&p, OWNER_XATTR, &mut buf[..]).unwrap();
        let mark = std::str::from_utf8(&buf[..n]).unwrap();
        {
            use std::os::unix::fs::MetadataExt;
            let ino = std::fs::metadata(&p).unwrap().ino();
            assert!(mark.contains(&format!(" ino={ino} ")), "{mark}");
            assert!(!mark.contains("dev="), "{mark}");
        }
        // A copy with its xattrs (cp -a): the mark names another inode.
        let copy = dir.path().join("copy.dat");
        std::fs::copy(&p, &copy).unwrap();
        let mut buf = [0u8; 128];
        let n = rustix::fs::getxattr(&p, OWNER_XATTR, &mut buf[..]).unwrap();
        rustix::fs::setxattr(
            &copy,
            OWNER_XATTR,
            &buf[..n],
            rustix::fs::XattrFlags::empty(),
        )
        .unwrap();
        assert!(!is_own_file(File::open(&copy).unwrap()));
        // Someone's file, and a forged mark of the wrong shape.
        let theirs = dir.path().join("theirs.txt");
        std::fs::write(&theirs, b"data\n").unwrap();
        assert!(!is_own_file(File::open(&theirs).unwrap()));
        rustix::fs::setxattr(
            &theirs,
            OWNER_XATTR,
            b"yes",
            rustix::fs::XattrFlags::empty(),
        )
        .unwrap();
        assert!(!is_own_file(File::open(&theirs).unwrap()));
        // The daemon's view: the copy and someone's file are refused, untouched.
        for q in [&copy, &theirs] {
            let before = std::fs::read(q).unwrap();
            let e = ensure_own_file(q, 1 << 20).unwrap_err();
            assert!(matches!(e, TargetError::NotOwnFile(_)), "{e}");
            let e = Target::open_own_file(q, false, None, 1 << 20).unwrap_err();
            assert!(matches!(e, TargetError::NotOwnFile(_)), "{e}");
            assert_eq!(std::fs::read(q).unwrap(), before);
        }
        // Its own file, truncated: made again at its size; longer: used within `size`.
        std::fs::OpenOptions::new()
            .write(true)
            .open(&p)
            .unwrap()
            .set_len(4096)
            .unwrap();
        assert_eq!(
            ensure_own_file(&p, 64 << 10).unwrap(),
            Ensured::Recreated { was: 4096 }
        );
        assert_eq!(ensure_own_file(&p, 32 << 10).unwrap(), Ensured::Kept);
        let t = Target::open_own_file(&p, false, None, 32 << 10).unwrap();
        assert_eq!(t.size(), 32 << 10);
    }

    #[test]
    fn no_link_is_followed_on_the_way_with_openat2_or_the_walk() {
        use rustix::fs::{Mode, OFlags};
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real");
        std::fs::create_dir_all(real.join("sub")).unwrap();
        std::fs::write(real.join("sub/f"), b"x").unwrap();
        std::os::unix::fs::symlink(&real, dir.path().join("via")).unwrap();
        std::os::unix::fs::symlink(real.join("sub/f"), real.join("sub/last")).unwrap();
        let ok = real.join("sub/../sub/f");
        for open in [open_no_symlinks, crate::ownmark::walk_no_symlinks] {
            assert!(open(&ok, OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty()).is_ok());
            for bad in [dir.path().join("via/sub/f"), real.join("sub/last")] {
                let e = open(&bad, OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty()).unwrap_err();
                assert_eq!(e.raw_os_error(), Some(libc::ELOOP), "{}", bad.display());
            }
        }
        // Nothing is created behind a linked folder.
        let e = create_file_if_missing(&dir.path().join("via/new.dat"), 4096).unwrap_err();
        assert!(matches!(e, TargetError::SymlinkInPath(_)), "{e}");
        assert!(!real.join("new.dat").exists());
        assert!(matches!(
            check_own_file_path(&dir.path().join("via/new.dat")),
            Err(TargetError::SymlinkInPath(_))
        ));
        assert!(check_own_file_path(&real.join("new.dat")).is_ok());
    }
}
