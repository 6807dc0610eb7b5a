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

/// A trim of `[start, start + len)` (the engine's `trim` workloads): BLKDISCARD on a
/// block device, a punched hole (`fallocate(PUNCH_HOLE | KEEP_SIZE)`) in a file, whose
/// filesystem frees the range's blocks (reads then return zeros, the size is kept).
/// EOPNOTSUPP where neither is supported.
pub fn trim(file: &File, block_device: bool, start: u64, len: u64) -> io::Result<()> {
    if block_device {
        discard(file, start, len)
    } else {
        use rustix::fs::FallocateFlags;
        rustix::fs::fallocate(
            file,
            FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE,
            start,
            len,
        )
        .map_err(io::Error::from)
    }
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

/// `LOOP_GET_STATUS64` from `<linux/loop.h>`: reads a loop device's `struct loop_info64`.
const LOOP_GET_STATUS64: libc::c_ulong = 0x4C05;

/// `struct loop_info64` from `<linux/loop.h>` (232 bytes). Only the first three fields
/// are read; the rest is there for the layout the kernel writes.
#[repr(C)]
#[allow(dead_code)]
struct LoopInfo64 {
    lo_device: u64,
    lo_inode: u64,
    lo_rdevice: u64,
    lo_offset: u64,
    lo_sizelimit: u64,
    lo_number: u32,
    lo_encrypt_type: u32,
    lo_encrypt_key_size: u32,
    lo_flags: u32,
    lo_file_name: [u8; 64],
    lo_crypt_name: [u8; 64],
    lo_encrypt_key: [u8; 32],
    lo_init: [u64; 2],
}

/// What a bound loop device is over, as the kernel recorded it when the backing file was
/// attached: the backing inode's `st_dev` and `st_ino`, and its `st_rdev` (non-zero when
/// the backing file is a block device node). Device numbers are decoded to `makedev`'s
/// encoding. Unlike the path in sysfs, this names the inode even when it was deleted or
/// renamed, or lives in another mount namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoopBacking {
    pub dev: u64,
    pub ino: u64,
    pub rdev: u64,
}

/// The kernel's `huge_encode_dev` (12-bit major, 20-bit minor) back to `makedev`'s form.
fn decode_huge_dev(v: u64) -> u64 {
    let major = ((v & 0xfff00) >> 8) as u32;
    let minor = ((v & 0xff) | ((v >> 12) & 0xfff00)) as u32;
    rustix::fs::makedev(major, minor)
}

/// LOOP_GET_STATUS64 on an open loop device (read-only is enough; nothing is changed).
/// ENXIO when the loop device is not bound to a file.
pub fn loop_backing(file: &File) -> io::Result<LoopBacking> {
    let mut info = std::mem::MaybeUninit::<LoopInfo64>::zeroed();
    // SAFETY: LOOP_GET_STATUS64 writes one `struct loop_info64` through the pointer and
    // reads nothing from it; `info` is a live, zeroed `LoopInfo64` with exactly that C
    // layout (repr(C), 232 bytes) for the whole call. The fd is valid for the borrow of
    // `file`.
    let rc = unsafe { libc::ioctl(file.as_raw_fd(), LOOP_GET_STATUS64, info.as_mut_ptr()) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: every field is a plain integer or byte array, valid for any bit pattern, and
    // the memory was zeroed before the kernel filled it.
    let info = unsafe { info.assume_init() };
    Ok(LoopBacking {
        dev: decode_huge_dev(info.lo_device),
        ino: info.lo_inode,
        rdev: decode_huge_dev(info.lo_rdevice),
    })
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
        assert_eq!(LOOP_GET_STATUS64, (0x4C << 8) | 5);
        assert_eq!(std::mem::size_of::<LoopInfo64>(), 232);
    }

    #[test]
    fn huge_dev_numbers_decode_like_makedev() {
        // new_encode_dev(MKDEV(7, 3)) = 0x703; MKDEV(259, 300): minor spills above bit 20.
        assert_eq!(decode_huge_dev(0x703), rustix::fs::makedev(7, 3));
        let enc = (300 & 0xff) | (259 << 8) | ((300 & !0xff) << 12);
        assert_eq!(decode_huge_dev(enc), rustix::fs::makedev(259, 300));
        assert_eq!(decode_huge_dev(0x17), rustix::fs::makedev(0, 0x17));
    }

    #[test]
    fn regular_files_have_no_loop_status() {
        let f = tempfile::tempfile().unwrap();
        let e = loop_backing(&f).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOTTY), "{e}");
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
