//! driveprobe's mark on the files it creates, and opening a path without following a
//! symbolic link: what the write gate ([`crate::safety`]) and the targets
//! ([`crate::target`]) both check, below both.

use std::io;
use std::path::Path;

/// The extended attribute that marks a file as driveprobe's own: it holds
/// [`owner_value`], naming the file's inode and birth time when driveprobe created it, so
/// a copy (`cp -a` keeps xattrs), a restore from a backup or another file renamed into its
/// place does not pass for it. Not the device number: that can change at a reboot (NVMe
/// and dm minors follow probe order), and the daemon's own files must stay its own.
///
/// A filesystem that keeps no user xattrs (vfat, some network filesystems, tmpfs before
/// Linux 6.6) cannot hold the mark: driveprobe then refuses to create a file target there
/// ([`TargetError::NoOwnerMark`]) rather than make a file it could not tell from someone
/// else's later. Refusing is the safe side: the alternative, trusting any file at the
/// configured path, is what destroyed users' files.
pub const OWNER_XATTR: &str = "user.driveprobe.owner";

/// The mark's value for the file open at `fd`: its inode number and, where the filesystem
/// keeps one, its birth time (a copy on another filesystem may get the same inode number,
/// not the same birth to the nanosecond).
pub fn owner_value(fd: impl rustix::fd::AsFd) -> io::Result<String> {
    use rustix::fs::{statx, AtFlags, StatxFlags};
    let st = statx(
        fd,
        "",
        AtFlags::EMPTY_PATH,
        StatxFlags::INO | StatxFlags::BTIME,
    )?;
    let born = if st.stx_mask & StatxFlags::BTIME.bits() != 0 {
        format!("{}.{:09}", st.stx_btime.tv_sec, st.stx_btime.tv_nsec)
    } else {
        "-".to_string()
    };
    Ok(format!(
        "driveprobe-file-target v2 ino={} born={born}",
        st.stx_ino
    ))
}

/// Whether the file open at `fd` is a regular file that driveprobe created: it carries
/// the [`OWNER_XATTR`] mark, and the mark names this very file.
pub fn is_own_file(fd: impl rustix::fd::AsFd) -> bool {
    let Ok(st) = rustix::fs::fstat(&fd) else {
        return false;
    };
    if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::RegularFile {
        return false;
    }
    let mut buf = [0u8; 128];
    match (
        rustix::fs::fgetxattr(&fd, OWNER_XATTR, &mut buf[..]),
        owner_value(&fd),
    ) {
        (Ok(n), Ok(want)) => buf[..n] == *want.as_bytes(),
        _ => false,
    }
}

/// Marks the file open at `fd` as driveprobe's own (see [`OWNER_XATTR`]).
pub fn mark_own(fd: impl rustix::fd::AsFd) -> io::Result<()> {
    let value = owner_value(&fd)?;
    rustix::fs::fsetxattr(
        &fd,
        OWNER_XATTR,
        value.as_bytes(),
        rustix::fs::XattrFlags::empty(),
    )?;
    Ok(())
}

/// Opens `path` without following a symbolic link on any component of it, the last one
/// included (`ELOOP` when there is one): `openat2(RESOLVE_NO_SYMLINKS)`, or, on kernels
/// without it (before 5.6) or where a sandbox refuses it, a walk from `/` (or the working
/// directory) one component at a time with `O_NOFOLLOW`. Whoever can rename a folder on
/// the path cannot steer the open elsewhere with a link. `O_CLOEXEC` is always added.
pub fn open_no_symlinks(
    path: &Path,
    flags: rustix::fs::OFlags,
    mode: rustix::fs::Mode,
) -> io::Result<rustix::fd::OwnedFd> {
    use rustix::fs::{openat2, OFlags, ResolveFlags, CWD};
    let flags = flags | OFlags::CLOEXEC;
    match openat2(CWD, path, flags, mode, ResolveFlags::NO_SYMLINKS) {
        Err(e) if e == rustix::io::Errno::NOSYS || e == rustix::io::Errno::PERM => {
            walk_no_symlinks(path, flags, mode)
        }
        r => r.map_err(io::Error::from),
    }
}

/// [`open_no_symlinks`] without openat2: each folder opened with `O_PATH | O_DIRECTORY |
/// O_NOFOLLOW` from the one before, the last component with `O_NOFOLLOW`.
pub(crate) fn walk_no_symlinks(
    path: &Path,
    flags: rustix::fs::OFlags,
    mode: rustix::fs::Mode,
) -> io::Result<rustix::fd::OwnedFd> {
    use rustix::fs::OFlags;
    let (dir, name) = walk_to_parent(path)?;
    rustix::fs::openat(&dir, name.as_os_str(), flags | OFlags::NOFOLLOW, mode)
        .map_err(io::Error::from)
}

/// The folder holding `path`'s last component, opened (`O_PATH`) without following a
/// link on the way, and that component.
pub fn walk_to_parent(path: &Path) -> io::Result<(rustix::fd::OwnedFd, std::ffi::OsString)> {
    use rustix::fs::{openat, statat, AtFlags, FileType, Mode, OFlags, CWD};
    use std::path::Component;
    let dir_flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let start = if path.is_absolute() { "/" } else { "." };
    let mut dir = openat(CWD, start, dir_flags, Mode::empty())?;
    let comps: Vec<Component> = path.components().collect();
    let Some((Component::Normal(last), parents)) = comps.split_last() else {
        return Err(io::Error::from_raw_os_error(libc::EISDIR));
    };
    for c in parents {
        let name = match c {
            Component::Normal(n) => *n,
            Component::ParentDir => std::ffi::OsStr::new(".."),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => continue,
        };
        dir = match openat(&dir, name, dir_flags, Mode::empty()) {
            Ok(d) => d,
            Err(e) if e == rustix::io::Errno::NOTDIR => {
                let st = statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW)?;
                if FileType::from_raw_mode(st.st_mode) == FileType::Symlink {
                    return Err(io::Error::from_raw_os_error(libc::ELOOP));
                }
                return Err(e.into());
            }
            Err(e) => return Err(e.into()),
        };
    }
    Ok((dir, last.to_os_string()))
}

/// The folder holding `path`'s last component, opened without following a link on any
/// component of its path, and that component.
pub fn open_parent(path: &Path) -> io::Result<(rustix::fd::OwnedFd, std::ffi::OsString)> {
    use rustix::fs::{Mode, OFlags};
    let name = match path.file_name() {
        Some(n) => n.to_os_string(),
        None => return Err(io::Error::from_raw_os_error(libc::EISDIR)),
    };
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let dir = open_no_symlinks(parent, OFlags::PATH | OFlags::DIRECTORY, Mode::empty())?;
    Ok((dir, name))
}

/// What a file is, in words, from its `st_mode` (for errors about special files).
pub fn kind_name(mode: rustix::fs::RawMode) -> &'static str {
    use rustix::fs::FileType;
    match FileType::from_raw_mode(mode) {
        FileType::RegularFile => "regular file",
        FileType::Directory => "directory",
        FileType::Symlink => "symbolic link",
        FileType::Fifo => "FIFO (named pipe)",
        FileType::CharacterDevice => "character device",
        FileType::BlockDevice => "block device",
        FileType::Socket => "socket",
        FileType::Unknown => "special file",
    }
}
