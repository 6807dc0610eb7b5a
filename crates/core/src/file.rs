//! Reading a file the operator names: the config, the web config, a fio job file, and
//! the command line's inputs (a result document for `report`, a saved smartctl output or
//! NVMe log page for `health`). Only a regular file is read, and at most its use's
//! [`Limit`] of it ([`MAX_CONFIG_BYTES`] for a config). The open itself does not block: a
//! FIFO would hold `open(2)` until a writer came (check-config, a reload or a command
//! would hang), so the file is opened with `O_NONBLOCK` and its type checked on the open
//! descriptor (no window between a check and the open); on a regular file `O_NONBLOCK`
//! changes nothing. A character device such as `/dev/zero` (which never ends) is refused
//! the same way, and a regular file that grows while it is read stops at the cap.

use std::fs::{File, FileType, OpenOptions};
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

/// The largest config (or web config, or fio job file) read: 16 MiB, far more than a
/// config of 100,000 drives takes.
pub const MAX_CONFIG_BYTES: u64 = 16 << 20;

/// What a file is read as, and the most of it that is read: each use has its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit {
    /// The most bytes read; a larger file is refused.
    pub bytes: u64,
    /// What the file is meant to be, as errors name it ("a config").
    pub what: &'static str,
}

impl Limit {
    /// A config, a web config or a fio job file.
    pub const CONFIG: Limit = Limit {
        bytes: MAX_CONFIG_BYTES,
        what: "a config",
    };
}

/// Why a file was not read.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("it is a {0}, not a regular file; give the path of the file itself")]
    NotRegular(&'static str),
    #[error("it is larger than {}, too large to be {what}; give the file itself", crate::fmt::size(*.limit))]
    TooLarge { limit: u64, what: &'static str },
    #[error("it is not UTF-8 text; give a text file")]
    NotText,
}

/// The whole of the regular file `path` as text, if it is at most `limit` bytes (a
/// config: [`Limit::CONFIG`] names it in errors).
pub fn read_regular(path: &Path, limit: u64) -> Result<String, FileError> {
    let limit = Limit {
        bytes: limit,
        ..Limit::CONFIG
    };
    read_regular_text(path, limit)
}

/// The whole of the regular file `path` as text, if it is at most `limit.bytes` long.
pub fn read_regular_text(path: &Path, limit: Limit) -> Result<String, FileError> {
    let bytes = read_regular_bytes(path, limit)?;
    String::from_utf8(bytes).map_err(|_| FileError::NotText)
}

/// The whole of the regular file `path`, if it is at most `limit.bytes` long.
pub fn read_regular_bytes(path: &Path, limit: Limit) -> Result<Vec<u8>, FileError> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)?;
    read_open_regular(file, limit)
}

/// The whole of `file`, already open (with `O_NONBLOCK`, so that opening a FIFO did not
/// block), if it is a regular file of at most `limit.bytes`: also for files found through
/// a directory handle (the daemon's state directory) rather than a path.
pub fn read_open_regular(file: File, limit: Limit) -> Result<Vec<u8>, FileError> {
    let meta = file.metadata()?;
    if !meta.file_type().is_file() {
        return Err(FileError::NotRegular(kind(meta.file_type())));
    }
    let too_large = || FileError::TooLarge {
        limit: limit.bytes,
        what: limit.what,
    };
    if meta.len() > limit.bytes {
        return Err(too_large());
    }
    // Not sized by `st_size` beyond 64 MiB: a sparse file claims what it does not hold.
    let mut buf = Vec::with_capacity(meta.len().min(64 << 20) as usize);
    file.take(limit.bytes.saturating_add(1))
        .read_to_end(&mut buf)?;
    if buf.len() as u64 > limit.bytes {
        return Err(too_large());
    }
    Ok(buf)
}

fn kind(t: FileType) -> &'static str {
    if t.is_dir() {
        "directory"
    } else if t.is_fifo() {
        "FIFO (named pipe)"
    } else if t.is_char_device() {
        "character device"
    } else if t.is_block_device() {
        "block device"
    } else if t.is_socket() {
        "socket"
    } else {
        "special file"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_regular_files_under_the_cap_are_read() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("c.toml");
        std::fs::write(&f, "a = 1\n").unwrap();
        assert_eq!(read_regular(&f, 100).unwrap(), "a = 1\n");
        assert!(matches!(
            read_regular(&f, 3),
            Err(FileError::TooLarge {
                limit: 3,
                what: "a config"
            })
        ));
        // A FIFO with no writer: refused at once (a blocking open would wait forever).
        let fifo = dir.path().join("fifo");
        rustix::fs::mkfifoat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
        )
        .unwrap();
        let e = read_regular(&fifo, 100).unwrap_err().to_string();
        assert!(
            e.starts_with("it is a FIFO (named pipe), not a regular file"),
            "{e}"
        );
        let e = read_regular(Path::new("/dev/zero"), 100).unwrap_err();
        assert!(e.to_string().starts_with("it is a character device"), "{e}");
        let e = read_regular(dir.path(), 100).unwrap_err().to_string();
        assert!(e.starts_with("it is a directory"), "{e}");
        std::fs::write(&f, [0xff, 0xfe]).unwrap();
        assert!(matches!(read_regular(&f, 100), Err(FileError::NotText)));
        assert!(matches!(
            read_regular(&dir.path().join("none"), 100),
            Err(FileError::Io(_))
        ));
    }

    #[test]
    fn bytes_are_read_under_each_uses_limit_and_named_by_it() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("log.bin");
        std::fs::write(&f, vec![0xffu8; 5000]).unwrap();
        let doc = Limit {
            bytes: 4096,
            what: "a result document",
        };
        let e = read_regular_bytes(&f, doc).unwrap_err().to_string();
        assert_eq!(
            e,
            "it is larger than 4 KiB, too large to be a result document; give the file itself"
        );
        let all = Limit { bytes: 5000, ..doc };
        assert_eq!(read_regular_bytes(&f, all).unwrap().len(), 5000);
        // Endless or blocking files: refused at once, whatever the limit.
        let fifo = dir.path().join("fifo");
        rustix::fs::mkfifoat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
        )
        .unwrap();
        for p in [fifo.as_path(), Path::new("/dev/zero")] {
            assert!(matches!(
                read_regular_bytes(p, all),
                Err(FileError::NotRegular(_))
            ));
        }
        assert_eq!(
            read_regular(&f, 4096).unwrap_err().to_string(),
            "it is larger than 4 KiB, too large to be a config; give the file itself"
        );
    }
}
