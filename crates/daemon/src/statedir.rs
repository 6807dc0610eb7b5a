//! The state directory, reached only through handles: every file the daemon keeps there
//! (`state.json` and its backup, the result documents under `runs/`, the lock) is opened,
//! created, renamed, listed and deleted relative to a descriptor of its folder, opened
//! once at start, with `O_NOFOLLOW` on the last component. Whoever can write to the folder
//! cannot steer a write or a delete elsewhere with a symbolic link (planted at a temporary
//! file's name, or as `runs` itself), nor make a read block (a FIFO) or run without end
//! (a device): a read takes a regular file only, opened without blocking, up to a size.
//!
//! - A write goes to `.NAME.tmp`, created with `O_CREAT | O_EXCL | O_NOFOLLOW` after
//!   whatever had that name is unlinked (unlinking a link removes the link, never its
//!   target), is fsynced, renamed over `NAME` (a rename replaces a link at `NAME`, never
//!   follows it), and the folder is fsynced.
//! - `runs/` is opened once with `O_DIRECTORY | O_NOFOLLOW`: a link there is refused at
//!   start, and a link planted later is never seen (the handle names the real folder).
//! - One daemon per folder: `driveprobe.lock` is held with `flock` for the life of the
//!   process and names its holder's pid; a second daemon is refused, naming the first.
//! - A folder that other users may write to is reported (it cannot steer a write any
//!   more, but it can still deny service: a file planted at every name the daemon uses).

use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use rustix::fs::{self as rfs, AtFlags, Mode, OFlags};
use rustix::io::Errno;

use driveprobe_core::file::{read_open_regular, FileError};

/// The folder of result documents, inside the state directory.
pub const RUNS_DIR: &str = "runs";
/// The lock file that makes one daemon the owner of the state directory.
pub const LOCK_FILE: &str = "driveprobe.lock";
/// The largest state file read: far more than the bounds of
/// [`crate::schedule::state`] let a state reach (about 180 KiB per drive at most, so
/// 256 drives take 46 MiB).
pub const MAX_STATE_BYTES: u64 = 1 << 30;
/// The largest result document read back (`/runs/ID/report` and the last runs restored
/// at start). A quick `enterprise` run's document is 4.6 MB as the daemon writes it
/// (3-digit histograms, measured); a standard-scale run's, with up to 360 write-saturation rounds, is estimated at 20-40 MB
/// (BENCHMARKS.md, "Result document sizes"). Parsing holds about 12 times the document
/// in memory, for each of the reports drawn at once; a larger document (a full-scale
/// run at 3 digits) is left to `driveprobe report`, which says so.
pub const MAX_DOCUMENT_BYTES: u64 = 32 << 20;

/// Why the state directory cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum StateDirError {
    #[error("state directory {path}: {source}; create it or set state_dir in the config to a writable directory")]
    Open { path: PathBuf, source: io::Error },
    #[error("state directory {path}: {name} is {kind}, not a folder; driveprobe keeps its result documents only in a real folder there: remove it (or move it aside) and start again")]
    RunsNotFolder {
        path: PathBuf,
        name: &'static str,
        kind: &'static str,
    },
    #[error("state directory {path}: cannot take its lock file {LOCK_FILE}: {source}; {fix}")]
    Lock {
        path: PathBuf,
        source: io::Error,
        fix: &'static str,
    },
    #[error("state directory {path} is in use by another driveprobe ({holder}); stop that one, or give this one another state directory (--state-dir, or state_dir in the config)")]
    InUse { path: PathBuf, holder: String },
}

/// Why a file of the state directory was not read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("it is a symbolic link; driveprobe follows none in its state directory")]
    Link,
    #[error("it is larger than {} MiB", .limit >> 20)]
    TooLarge { limit: u64 },
    #[error("it is {0}, not a regular file")]
    NotRegular(&'static str),
    #[error("{0}")]
    File(FileError),
}

/// Which folder of the state directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// The state directory itself.
    Top,
    /// `runs/`, the result documents.
    Runs,
}

/// One result document as listed: its name in `runs/`, modification time and size.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Listed {
    pub modified: (i64, i64),
    pub name: String,
    pub bytes: u64,
}

/// The open state directory (see the module's documentation). Dropping it releases the
/// lock.
#[derive(Debug)]
pub struct StateDir {
    path: PathBuf,
    top: OwnedFd,
    /// `runs/`, once opened: at start, or at first use when it could not be made then
    /// (a read-only or full filesystem: the daemon still starts and probes).
    runs: std::sync::OnceLock<OwnedFd>,
    _lock: OwnedFd,
    insecure: Option<String>,
}

impl StateDir {
    /// Opens (creating it when missing) the state directory at `path`, takes its lock and
    /// opens `runs/` (creating it too).
    pub fn open(path: &Path) -> Result<StateDir, StateDirError> {
        let open_err = |source: io::Error| StateDirError::Open {
            path: path.to_path_buf(),
            source,
        };
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(path)
            .map_err(open_err)?;
        let top = rfs::open(path, dir_flags(), Mode::empty()).map_err(|e| open_err(e.into()))?;
        let lock = take_lock(path, &top)?;
        let runs = std::sync::OnceLock::new();
        match open_runs(path, &top) {
            Ok(fd) => {
                let _ = runs.set(fd);
            }
            Err(e @ StateDirError::RunsNotFolder { .. }) => return Err(e),
            Err(e) => tracing::warn!("{e}; result documents wait until it can be made"),
        }
        let insecure = insecure(&top, runs.get())
            .map(|why| format!("the state directory {} {why}", path.display()));
        Ok(StateDir {
            path: path.to_path_buf(),
            top,
            runs,
            _lock: lock,
            insecure,
        })
    }

    /// The path it was opened at (for messages and the documents' paths).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Why other users can write to the folder, when they can (a warning for the log and
    /// the surfaces).
    pub fn insecure(&self) -> Option<&str> {
        self.insecure.as_deref()
    }

    fn fd(&self, place: Place) -> io::Result<&OwnedFd> {
        match place {
            Place::Top => Ok(&self.top),
            Place::Runs => {
                if let Some(fd) = self.runs.get() {
                    return Ok(fd);
                }
                let fd = open_runs(&self.path, &self.top).map_err(io::Error::other)?;
                let _ = self.runs.set(fd);
                Ok(self.runs.get().expect("just set"))
            }
        }
    }

    /// The path of `name` in `place`, for messages and the run index.
    pub fn path_of(&self, place: Place, name: &str) -> PathBuf {
        match place {
            Place::Top => self.path.join(name),
            Place::Runs => self.path.join(RUNS_DIR).join(name),
        }
    }

    /// Writes `bytes` as `name` in `place` atomically (see the module's documentation).
    pub fn write_atomic(&self, place: Place, name: &str, bytes: &[u8]) -> io::Result<()> {
        write_atomic_at(self.fd(place)?, name, bytes)
    }

    /// The regular file `name` in `place`, at most `limit` bytes; `None` when there is
    /// nothing at that name.
    pub fn read(&self, place: Place, name: &str, limit: u64) -> Result<Option<Vec<u8>>, ReadError> {
        let fd = self
            .fd(place)
            .map_err(|e| ReadError::File(FileError::Io(e)))?;
        read_at(fd, name, limit)
    }

    /// Removes `name` from `place` (a link is removed, not what it names); false when
    /// nothing had that name.
    pub fn remove(&self, place: Place, name: &str) -> io::Result<bool> {
        match rfs::unlinkat(self.fd(place)?, name, AtFlags::empty()) {
            Ok(()) => Ok(true),
            Err(Errno::NOENT) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// Renames `from` to `to` in `place`, never over an existing name: `to`, else
    /// `to.1`, `to.2`... Returns the name it got.
    pub fn rename_aside(&self, place: Place, from: &str, to: &str) -> io::Result<String> {
        let fd = self.fd(place)?;
        let mut last = None;
        for k in 0..100 {
            let name = if k == 0 {
                to.to_string()
            } else {
                format!("{to}.{k}")
            };
            match rfs::renameat_with(fd, from, fd, name.as_str(), rfs::RenameFlags::NOREPLACE) {
                Ok(()) => {
                    rfs::fsync(fd)?;
                    return Ok(name);
                }
                Err(Errno::EXIST) => last = Some(Errno::EXIST),
                Err(e) => return Err(e.into()),
            }
        }
        Err(last.unwrap_or(Errno::EXIST).into())
    }

    /// What `place` holds: every name, with whether it is a regular file (not followed).
    pub fn names(&self, place: Place) -> io::Result<Vec<(String, bool)>> {
        let fd = self.fd(place)?;
        let dir = rfs::Dir::read_from(fd)?;
        let mut out = Vec::new();
        for e in dir {
            let e = e?;
            let Ok(name) = e.file_name().to_str() else {
                continue;
            };
            if name == "." || name == ".." {
                continue;
            }
            let regular = rfs::statat(fd, name, AtFlags::SYMLINK_NOFOLLOW)
                .is_ok_and(|st| rfs::FileType::from_raw_mode(st.st_mode).is_file());
            out.push((name.to_string(), regular));
        }
        Ok(out)
    }

    /// The result documents in `runs/` (regular files named `*.json`, not hidden), oldest
    /// first.
    pub fn documents(&self) -> Vec<Listed> {
        let Ok(runs) = self.fd(Place::Runs) else {
            return Vec::new();
        };
        let Ok(dir) = rfs::Dir::read_from(runs) else {
            return Vec::new();
        };
        let mut docs: Vec<Listed> = dir
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().to_str().ok()?.to_string();
                if name.starts_with('.') || !name.ends_with(".json") {
                    return None;
                }
                let st = rfs::statat(runs, name.as_str(), AtFlags::SYMLINK_NOFOLLOW).ok()?;
                rfs::FileType::from_raw_mode(st.st_mode)
                    .is_file()
                    .then_some(Listed {
                        modified: (st.st_mtime, st.st_mtime_nsec as i64),
                        name,
                        bytes: st.st_size as u64,
                    })
            })
            .collect();
        docs.sort();
        docs
    }
}

fn dir_flags() -> OFlags {
    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC
}

fn open_runs(path: &Path, top: &OwnedFd) -> Result<OwnedFd, StateDirError> {
    let open = || rfs::openat(top, RUNS_DIR, dir_flags() | OFlags::NOFOLLOW, Mode::empty());
    let fd = match open() {
        Err(Errno::NOENT) => {
            match rfs::mkdirat(top, RUNS_DIR, Mode::from_raw_mode(0o755)) {
                Ok(()) | Err(Errno::EXIST) => {}
                Err(e) => {
                    return Err(StateDirError::Open {
                        path: path.join(RUNS_DIR),
                        source: e.into(),
                    })
                }
            }
            open()
        }
        r => r,
    };
    fd.map_err(|e| match e {
        Errno::LOOP | Errno::NOTDIR => StateDirError::RunsNotFolder {
            path: path.to_path_buf(),
            name: RUNS_DIR,
            kind: rfs::statat(top, RUNS_DIR, AtFlags::SYMLINK_NOFOLLOW)
                .map(|st| article_kind(st.st_mode))
                .unwrap_or("not a folder"),
        },
        e => StateDirError::Open {
            path: path.join(RUNS_DIR),
            source: e.into(),
        },
    })
}

fn article_kind(mode: rfs::RawMode) -> &'static str {
    match rfs::FileType::from_raw_mode(mode) {
        rfs::FileType::Symlink => "a symbolic link",
        rfs::FileType::RegularFile => "a regular file",
        rfs::FileType::Fifo => "a FIFO (named pipe)",
        rfs::FileType::CharacterDevice => "a character device",
        rfs::FileType::BlockDevice => "a block device",
        rfs::FileType::Socket => "a socket",
        _ => "a special file",
    }
}

/// Takes the lock file: created (0600, `O_EXCL`) when missing; when there, used only if it
/// is a regular file of driveprobe's own user with one link (never a link, nor another
/// user's file, nor a hard link to a file elsewhere: it is written). It is held with an
/// exclusive `flock` on a read-only descriptor while the returned descriptor is open (a
/// descriptor open for writing would keep the filesystem from being remounted read-only),
/// and names this process's pid and start, written through a second descriptor that must
/// name the same file. When it cannot be made (a read-only filesystem), the folder itself
/// is locked and no pid is written.
fn take_lock(path: &Path, top: &OwnedFd) -> Result<OwnedFd, StateDirError> {
    let lock_err = |source: io::Error, fix: &'static str| StateDirError::Lock {
        path: path.to_path_buf(),
        source,
        fix,
    };
    let base = OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY;
    let mode = Mode::from_raw_mode(0o600);
    let opened = match rfs::openat(
        top,
        LOCK_FILE,
        base | OFlags::RDONLY | OFlags::CREATE | OFlags::EXCL,
        mode,
    ) {
        Err(Errno::EXIST) => rfs::openat(top, LOCK_FILE, base | OFlags::RDONLY, mode),
        // Nothing there, and nothing can be made: lock the folder itself.
        Err(Errno::ROFS) => rfs::openat(top, ".", dir_flags(), Mode::empty()),
        r => r,
    };
    let fd = opened.map_err(|e| match e {
        Errno::LOOP => lock_err(e.into(), "it is a symbolic link: remove it"),
        _ => lock_err(e.into(), "check the state directory's permissions"),
    })?;
    let st = rfs::fstat(&fd).map_err(|e| lock_err(e.into(), "check the state directory"))?;
    let kind = rfs::FileType::from_raw_mode(st.st_mode);
    let me = rustix::process::geteuid().as_raw();
    if kind.is_file() && (st.st_uid != me || st.st_nlink != 1) {
        return Err(lock_err(
            io::Error::other(format!(
                "it is not driveprobe's own (owner uid {}, {} links; driveprobe runs as uid {me})",
                st.st_uid, st.st_nlink
            )),
            "remove it (another user may have planted it)",
        ));
    }
    if !kind.is_file() && !kind.is_dir() {
        return Err(lock_err(
            io::Error::other(format!(
                "it is {}, not a regular file",
                article_kind(st.st_mode)
            )),
            "remove it",
        ));
    }
    match rfs::flock(&fd, rfs::FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => {}
        Err(Errno::WOULDBLOCK) => {
            let mut buf = [0u8; 128];
            let n = if kind.is_file() {
                rustix::io::pread(&fd, &mut buf[..], 0).unwrap_or(0)
            } else {
                0
            };
            let text: String = String::from_utf8_lossy(&buf[..n])
                .chars()
                .filter(|c| !c.is_control())
                .collect();
            let holder = if text.trim().is_empty() {
                "its lock is held".to_string()
            } else {
                text.trim().to_string()
            };
            return Err(StateDirError::InUse {
                path: path.to_path_buf(),
                holder,
            });
        }
        Err(e) => return Err(lock_err(e.into(), "check the state directory")),
    }
    if kind.is_file() {
        let _ = rfs::fchmod(&fd, mode);
        write_holder(top, &st);
    }
    Ok(fd)
}

/// Best effort: the lock is what matters, the pid only names its holder. Written only
/// when the name still holds the file that was checked and locked (`st`).
fn write_holder(top: &OwnedFd, st: &rfs::Stat) {
    let flags =
        OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY;
    let Ok(w) = rfs::openat(top, LOCK_FILE, flags, Mode::empty()) else {
        return;
    };
    match rfs::fstat(&w) {
        Ok(now) if now.st_dev == st.st_dev && now.st_ino == st.st_ino && now.st_nlink == 1 => {}
        _ => return,
    }
    let me = format!(
        "pid {}, started {}\n",
        std::process::id(),
        driveprobe_core::fmt::utc(crate::daemon::now_unix())
    );
    let _ = rfs::ftruncate(&w, 0);
    let _ = rustix::io::pwrite(&w, me.as_bytes(), 0);
}

/// Why other users than the daemon's may write to the folder open at `top` (or to `runs/`
/// in it), if they may.
fn insecure(top: &OwnedFd, runs: Option<&OwnedFd>) -> Option<String> {
    let me = rustix::process::geteuid().as_raw();
    let my_group = rustix::process::getegid().as_raw();
    for (fd, what) in [(Some(top), "is"), (runs, "has runs/, which is")] {
        let Some(st) = fd.and_then(|fd| rfs::fstat(fd).ok()) else {
            continue;
        };
        let mode = st.st_mode & 0o7777;
        if mode & 0o002 != 0 {
            return Some(format!(
                "{what} writable by every user (mode {mode:04o}): anyone on the host can plant files there; \
                 driveprobe follows no link there, but make it writable by its own user only \
                 (chmod 0700, owned by that user)"
            ));
        }
        if mode & 0o020 != 0 && st.st_gid != my_group && st.st_gid != 0 {
            return Some(format!(
                "{what} writable by group gid {} (mode {mode:04o}), whose members can plant files there; \
                 make it writable by driveprobe's own user only (chmod 0700)",
                st.st_gid
            ));
        }
        if st.st_uid != me && st.st_uid != 0 {
            return Some(format!(
                "{what} owned by another user (uid {}) who can plant files there; make it owned by \
                 driveprobe's own user (uid {me}) or root",
                st.st_uid
            ));
        }
    }
    None
}

/// Writes `bytes` as `name` in the folder open at `dir`, atomically and without following
/// a link (see the module's documentation). A failure leaves no temporary file.
pub fn write_atomic_at(dir: impl AsFd, name: &str, bytes: &[u8]) -> io::Result<()> {
    let dir = dir.as_fd();
    let tmp = format!(".{name}.tmp");
    match rfs::unlinkat(dir, tmp.as_str(), AtFlags::empty()) {
        Ok(()) | Err(Errno::NOENT) => {}
        Err(e) => return Err(e.into()),
    }
    let fd = rfs::openat(
        dir,
        tmp.as_str(),
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o644),
    )?;
    let mut f = File::from(fd);
    let written = (|| -> io::Result<()> {
        f.write_all(bytes)?;
        f.sync_all()?;
        rfs::renameat(dir, tmp.as_str(), dir, name)?;
        rfs::fsync(dir)?;
        Ok(())
    })();
    if written.is_err() {
        // A short temporary file would hold the space the next attempt needs.
        let _ = rfs::unlinkat(dir, tmp.as_str(), AtFlags::empty());
    }
    written
}

/// The regular file `name` in the folder open at `dir`, at most `limit` bytes, opened
/// without following a link and without blocking; `None` when nothing has that name.
pub fn read_at(dir: impl AsFd, name: &str, limit: u64) -> Result<Option<Vec<u8>>, ReadError> {
    let fd = match rfs::openat(
        dir.as_fd(),
        name,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        Err(Errno::NOENT) => return Ok(None),
        Err(Errno::LOOP) => return Err(ReadError::Link),
        Err(e) => return Err(ReadError::File(FileError::Io(e.into()))),
    };
    let st = rfs::fstat(&fd).map_err(|e| ReadError::File(FileError::Io(e.into())))?;
    if !rfs::FileType::from_raw_mode(st.st_mode).is_file() {
        return Err(ReadError::NotRegular(article_kind(st.st_mode)));
    }
    let limit = driveprobe_core::file::Limit {
        bytes: limit,
        what: "a file of driveprobe's state",
    };
    match read_open_regular(File::from(fd), limit) {
        Ok(b) => Ok(Some(b)),
        Err(FileError::TooLarge { limit, .. }) => Err(ReadError::TooLarge { limit }),
        Err(e) => Err(ReadError::File(e)),
    }
}

/// Opens the folder holding `path` (following links on the way: the path is the
/// operator's) for [`write_atomic_at`] and [`read_at`], and the file's name in it.
pub fn open_parent(path: &Path) -> io::Result<(OwnedFd, String)> {
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| io::Error::from_raw_os_error(libc::EISDIR))?
        .to_string();
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    Ok((rfs::open(parent, dir_flags(), Mode::empty())?, name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn a_link_at_the_temporary_name_is_replaced_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, b"precious").unwrap();
        let sd = StateDir::open(&dir.path().join("s")).unwrap();
        symlink(&victim, dir.path().join("s/.state.json.tmp")).unwrap();
        symlink(&victim, dir.path().join("s/runs/.r1.json.tmp")).unwrap();
        sd.write_atomic(Place::Top, "state.json", b"{}").unwrap();
        sd.write_atomic(Place::Runs, "r1.json", b"[]").unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        assert_eq!(
            std::fs::read(dir.path().join("s/state.json")).unwrap(),
            b"{}"
        );
        assert_eq!(
            std::fs::read(dir.path().join("s/runs/r1.json")).unwrap(),
            b"[]"
        );
        // A link at the name itself is replaced by the file, its target untouched.
        std::fs::remove_file(dir.path().join("s/state.json")).unwrap();
        symlink(&victim, dir.path().join("s/state.json")).unwrap();
        assert!(matches!(
            sd.read(Place::Top, "state.json", 100),
            Err(ReadError::Link)
        ));
        sd.write_atomic(Place::Top, "state.json", b"{1}").unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        assert!(!std::fs::symlink_metadata(dir.path().join("s/state.json"))
            .unwrap()
            .is_symlink());
    }

    #[test]
    fn reads_take_regular_files_only_up_to_a_size_and_never_block() {
        let dir = tempfile::tempdir().unwrap();
        let sd = StateDir::open(dir.path()).unwrap();
        assert!(sd.read(Place::Top, "none", 10).unwrap().is_none());
        rfs::mkfifoat(&sd.top, "fifo", Mode::from_raw_mode(0o600)).unwrap();
        let e = sd.read(Place::Top, "fifo", 10).unwrap_err().to_string();
        assert!(e.contains("FIFO"), "{e}");
        symlink("/dev/zero", dir.path().join("zero")).unwrap();
        assert!(matches!(
            sd.read(Place::Top, "zero", 10),
            Err(ReadError::Link)
        ));
        std::fs::write(dir.path().join("big"), [b'x'; 11]).unwrap();
        assert!(matches!(
            sd.read(Place::Top, "big", 10),
            Err(ReadError::TooLarge { limit: 10 })
        ));
        assert_eq!(sd.read(Place::Top, "big", 11).unwrap().unwrap().len(), 11);
    }

    #[test]
    fn runs_as_a_link_is_refused_and_the_lock_has_one_owner() {
        let dir = tempfile::tempdir().unwrap();
        let elsewhere = dir.path().join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        std::fs::write(elsewhere.join("theirs.json"), b"x").unwrap();
        let s = dir.path().join("s");
        std::fs::create_dir(&s).unwrap();
        symlink(&elsewhere, s.join(RUNS_DIR)).unwrap();
        let e = StateDir::open(&s).unwrap_err().to_string();
        assert!(e.contains("runs is a symbolic link"), "{e}");
        std::fs::remove_file(s.join(RUNS_DIR)).unwrap();
        let first = StateDir::open(&s).unwrap();
        let e = StateDir::open(&s).unwrap_err().to_string();
        assert!(
            e.contains("in use by another driveprobe (pid ")
                && e.contains(&std::process::id().to_string()),
            "{e}"
        );
        drop(first);
        StateDir::open(&s).unwrap();
        assert_eq!(std::fs::read(elsewhere.join("theirs.json")).unwrap(), b"x");
    }

    #[test]
    fn a_lock_file_that_is_not_driveprobes_own_is_refused_and_untouched() {
        let dir = tempfile::tempdir().unwrap();
        let s = dir.path().join("s");
        std::fs::create_dir(&s).unwrap();
        let precious = dir.path().join("precious");
        std::fs::write(&precious, b"root:secret\n").unwrap();
        // A hard link to another file (same filesystem): two links.
        std::fs::hard_link(&precious, s.join(LOCK_FILE)).unwrap();
        let e = StateDir::open(&s).unwrap_err().to_string();
        assert!(
            e.contains("is not driveprobe's own") && e.contains("2 links"),
            "{e}"
        );
        assert_eq!(std::fs::read(&precious).unwrap(), b"root:secret\n");
        std::fs::remove_file(s.join(LOCK_FILE)).unwrap();
        // A symbolic link.
        symlink(&precious, s.join(LOCK_FILE)).unwrap();
        let e = StateDir::open(&s).unwrap_err().to_string();
        assert!(e.contains("symbolic link"), "{e}");
        assert_eq!(std::fs::read(&precious).unwrap(), b"root:secret\n");
        std::fs::remove_file(s.join(LOCK_FILE)).unwrap();
        // Another user's file.
        std::fs::write(s.join(LOCK_FILE), b"").unwrap();
        rustix::fs::chown(
            s.join(LOCK_FILE),
            Some(rustix::fs::Uid::from_raw(65534)),
            None,
        )
        .unwrap();
        let e = StateDir::open(&s).unwrap_err().to_string();
        assert!(e.contains("owner uid 65534"), "{e}");
        std::fs::remove_file(s.join(LOCK_FILE)).unwrap();
        // Its own, made 0600.
        let _sd = StateDir::open(&s).unwrap();
        use std::os::unix::fs::PermissionsExt;
        let m = std::fs::metadata(s.join(LOCK_FILE)).unwrap();
        assert_eq!(m.permissions().mode() & 0o777, 0o600);
    }

    #[test]
    fn a_folder_others_may_write_to_is_reported() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
        let sd = StateDir::open(dir.path()).unwrap();
        let w = sd.insecure().unwrap();
        assert!(w.contains("is writable by every user (mode 1777)"), "{w}");
        drop(sd);
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(StateDir::open(dir.path()).unwrap().insecure().is_none());
    }
}
