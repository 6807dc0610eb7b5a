//! What the engine does I/O on: a regular file or a block device, opened read-only unless
//! a [`WritePermit`] for exactly that object is shown (DESIGN.md: one gate for writes).

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::device::{self, BlockDeviceInfo};
use crate::engine::job::{Job, RegionSpec};
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
    #[error("{0}: its filesystem is mounted read-only: remount it read-write to write to it (reading needs no change)")]
    ReadOnly(PathBuf),
    #[error("{0}: the filesystem refuses O_DIRECT: pass --buffered to go through the page cache")]
    DirectRefused(PathBuf),
    #[error("{0}: not a regular file or a block device")]
    WrongKind(PathBuf),
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
    #[error("{0}: is a symbolic link now: refusing to write through it; give the file's own path")]
    SymlinkForWrite(PathBuf),
    #[error("{path}: has {links} hard links now: refusing to write, it would change the file under its other names too; give a file of its own")]
    HardLinked { path: PathBuf, links: u64 },
    #[error("{0}: the region is empty")]
    EmptyRegion(PathBuf),
    #[error(transparent)]
    Device(#[from] device::DeviceError),
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: io::Error },
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

fn io_err(path: &Path, e: io::Error) -> TargetError {
    match e.kind() {
        io::ErrorKind::NotFound => TargetError::NotFound(path.to_path_buf()),
        io::ErrorKind::PermissionDenied => TargetError::PermissionDenied(path.to_path_buf()),
        _ if e.raw_os_error() == Some(libc::EROFS) => TargetError::ReadOnly(path.to_path_buf()),
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
    pub fn open(
        path: &Path,
        direct: bool,
        permit: Option<&WritePermit>,
    ) -> Result<Target, TargetError> {
        let meta = std::fs::metadata(path).map_err(|e| io_err(path, e))?;
        let ft = meta.file_type();
        let is_block = ft.is_block_device();
        if !is_block && !ft.is_file() {
            return Err(TargetError::WrongKind(path.to_path_buf()));
        }
        let mut flags = 0;
        if direct {
            flags |= libc::O_DIRECT;
        }
        if is_block && permit.is_some() {
            flags |= libc::O_EXCL;
        }
        let file_permit =
            permit.is_some_and(|p| matches!(p.object(), PermittedObject::File { .. }));
        if file_permit {
            // The permit names a file, not a link to one: a link swapped in after the
            // check is not followed (ELOOP).
            flags |= libc::O_NOFOLLOW;
        }
        let file = OpenOptions::new()
            .read(true)
            .write(permit.is_some())
            .custom_flags(flags)
            .open(path)
            .map_err(|e| {
                if e.raw_os_error() == Some(libc::EINVAL) && direct {
                    TargetError::DirectRefused(path.to_path_buf())
                } else if e.raw_os_error() == Some(libc::ELOOP) && file_permit {
                    TargetError::SymlinkForWrite(path.to_path_buf())
                } else {
                    io_err(path, e)
                }
            })?;
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
            (TargetKind::File, opened.len(), align)
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
    pub(crate) fn file(&self) -> &Arc<File> {
        &self.file
    }

    fn align_name(&self) -> &'static str {
        if self.is_block_device() {
            "device's logical block size"
        } else {
            "filesystem's O_DIRECT alignment"
        }
    }

    /// Resolves the job's region against this target and checks the job's block sizes
    /// against the alignment O_DIRECT needs.
    pub fn resolve(&self, job: &Job) -> Result<Region, TargetError> {
        let align = self.align.max(1);
        for &(bs, _) in job.sizes().entries() {
            if bs as u64 % align != 0 {
                return Err(TargetError::Misaligned {
                    path: self.path.clone(),
                    bs: bs as u64,
                    align,
                    what: self.align_name(),
                });
            }
        }
        let (start, len) = match job.region() {
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
        if len == 0 || len < job.sizes().max() as u64 {
            return Err(TargetError::TooSmall {
                path: self.path.clone(),
                need: start + job.sizes().max() as u64,
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
/// The file appears whole or not at all: it is filled under a temporary name in the same
/// directory and then renamed to `path` without replacing anything (`RENAME_NOREPLACE`),
/// so a second thread or process opening `path` meanwhile never sees a short file, nor a
/// file with two links (which the write gate refuses).
pub fn create_file_if_missing(path: &Path, size: u64) -> Result<bool, TargetError> {
    use std::io::Write;
    if std::fs::symlink_metadata(path).is_ok() {
        return Ok(false);
    }
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "target".into());
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let tmp = path.with_file_name(format!(".{name}.creating-{}-{nanos}", std::process::id()));
    let mut f = match OpenOptions::new().write(true).create_new(true).open(&tmp) {
        Ok(f) => f,
        Err(e) => return Err(io_err(path, e)),
    };
    let result = (|| -> io::Result<()> {
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
        let mut rng = crate::engine::gen::Rng::new(size ^ 0x5eed);
        let mut chunk = vec![0u8; 1 << 20];
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
    let linked = result.and_then(|()| publish(&tmp, path));
    let _ = std::fs::remove_file(&tmp);
    match linked {
        Ok(()) => Ok(true),
        // Someone else created it meanwhile: theirs is whole too.
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(io_err(path, e)),
    }
}

/// Gives `tmp` the name `path`, failing with `AlreadyExists` when `path` exists:
/// `renameat2(RENAME_NOREPLACE)`, or, where the filesystem does not support it, a hard
/// link (the caller removes `tmp`, so the file has two links only for a moment).
fn publish(tmp: &Path, path: &Path) -> io::Result<()> {
    use rustix::fs::{renameat_with, RenameFlags, CWD};
    match renameat_with(CWD, tmp, CWD, path, RenameFlags::NOREPLACE) {
        Ok(()) => Ok(()),
        Err(e) if e == rustix::io::Errno::INVAL || e == rustix::io::Errno::NOSYS => {
            std::fs::hard_link(tmp, path)
        }
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
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
        let permit = safety::authorize_file_writes(&f).unwrap();
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
}
