//! Block device ioctls that purge: discard (BLKDISCARD), secure discard (BLKSECDISCARD) and
//! dropping the page cache (BLKFLSBUF). They act on the whole range given, so callers pass
//! only ranges the safety gate allowed them to destroy, on a descriptor opened for writing.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

/// `_IO(0x12, 119)`: discard `[start, start + len)`; the argument is `u64[2]`.
const BLKDISCARD: libc::c_ulong = 0x1277;
/// `_IO(0x12, 125)`: secure discard `[start, start + len)`; the argument is `u64[2]`.
const BLKSECDISCARD: libc::c_ulong = 0x127D;
/// `_IO(0x12, 97)`: write back and drop the device's page cache.
const BLKFLSBUF: libc::c_ulong = 0x1261;

fn range_ioctl(file: &File, request: libc::c_ulong, start: u64, len: u64) -> io::Result<()> {
    let range: [u64; 2] = [start, len];
    // SAFETY: BLKDISCARD and BLKSECDISCARD read a `u64[2]` (start, length) from the pointer
    // and write nothing back; `range` is a live local array of exactly that type for the
    // whole call. The fd is valid for the borrow of `file`. The kernel checks the range
    // against the device and the open mode (EBADF unless opened for writing).
    let rc = unsafe { libc::ioctl(file.as_raw_fd(), request, range.as_ptr()) };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// BLKDISCARD over `[start, start + len)` (both multiples of the logical block size).
/// The kernel drops the range from the page cache first. EOPNOTSUPP when the device cannot
/// discard.
pub fn discard(file: &File, start: u64, len: u64) -> io::Result<()> {
    range_ioctl(file, BLKDISCARD, start, len)
}

/// BLKSECDISCARD (secure erase) over `[start, start + len)`. EOPNOTSUPP when the device
/// has no secure erase (most do not).
pub fn secure_discard(file: &File, start: u64, len: u64) -> io::Result<()> {
    range_ioctl(file, BLKSECDISCARD, start, len)
}

/// BLKFLSBUF: writes back and invalidates the device's page cache, so that buffered
/// readers do not see data a drive-level erase (NVMe Format/Sanitize) removed. Needs
/// CAP_SYS_ADMIN.
pub fn flush_buffers(file: &File) -> io::Result<()> {
    // SAFETY: BLKFLSBUF takes no argument (the kernel ignores it) and writes no user
    // memory; the fd is valid for the borrow of `file`.
    let rc = unsafe { libc::ioctl(file.as_raw_fd(), BLKFLSBUF, 0) };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_numbers_match_linux_fs_h() {
        // _IO(type, nr) = (type << 8) | nr
        assert_eq!(BLKDISCARD, (0x12 << 8) | 119);
        assert_eq!(BLKSECDISCARD, (0x12 << 8) | 125);
        assert_eq!(BLKFLSBUF, (0x12 << 8) | 97);
    }

    #[test]
    fn regular_files_refuse_block_ioctls() {
        let f = tempfile::tempfile().unwrap();
        // A regular file has no block ioctls: the kernel answers ENOTTY (never touches it).
        let e = discard(&f, 0, 4096).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOTTY), "{e}");
        let e = secure_discard(&f, 0, 4096).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOTTY), "{e}");
    }
}
