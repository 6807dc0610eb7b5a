//! ATA CHECK POWER MODE through the kernel's HDIO_DRIVE_CMD ioctl (what `hdparm -C` does):
//! whether a disk behind libata (SATA, PATA; also SATA disks on a SAS HBA driven by libsas)
//! is spun down, asked without waking it. Needs CAP_SYS_ADMIN and CAP_SYS_RAWIO; a disk
//! that is not behind libata (NVMe, virtio, SCSI/SAS, USB) refuses the ioctl (ENOTTY or
//! EINVAL).
//!
//! CHECK POWER MODE is a non-data command that the drive answers from its interface: the
//! ATA standard has a drive in Standby answer it without spinning up, and libata issues it
//! as an ATA PASS-THROUGH with only the registers coming back (no media access, no retry
//! that would reset the link). `smartctl -n standby` asks the same (and exits 2 when the
//! disk sleeps), at the cost of a process each time.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

/// `HDIO_DRIVE_CMD` from `<linux/hdreg.h>`: `args[0]` command, `args[1]` sector number,
/// `args[2]` feature, `args[3]` sector count (data sectors to read; 0 for a non-data
/// command). On return `args[0]` is the status, `args[1]` the error and `args[2]` the
/// sector count register.
const HDIO_DRIVE_CMD: libc::c_ulong = 0x031f;
/// CHECK POWER MODE (ACS: E5h).
pub const ATA_CHECK_POWER_MODE: u8 = 0xE5;

/// The drive's power mode, from the Count register CHECK POWER MODE returns (ACS-3 7.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PowerMode {
    /// 00h Standby_z, 01h Standby_y, or 40h (obsolete NV cache mode, spindle spun down):
    /// the platters are not turning; a read spins them up.
    Standby,
    /// 80h-83h Idle, Idle_a, Idle_b, Idle_c: spinning (at most slower, heads unloaded).
    Idle,
    /// FFh Active or Idle; 41h (obsolete NV cache mode, spindle up).
    Active,
    /// Any other value (reserved): not taken as asleep.
    Unknown(u8),
}

impl PowerMode {
    /// Decodes the Count register.
    pub fn from_count(count: u8) -> PowerMode {
        match count {
            0x00 | 0x01 | 0x40 => PowerMode::Standby,
            0x80..=0x83 => PowerMode::Idle,
            0xFF | 0x41 => PowerMode::Active,
            v => PowerMode::Unknown(v),
        }
    }

    /// A read would spin the disk up.
    pub fn is_standby(self) -> bool {
        self == PowerMode::Standby
    }

    pub fn name(self) -> &'static str {
        match self {
            PowerMode::Standby => "standby",
            PowerMode::Idle => "idle",
            PowerMode::Active => "active/idle",
            PowerMode::Unknown(_) => "unknown",
        }
    }
}

/// Issues CHECK POWER MODE on `file` (the whole disk, opened read-only; `O_NONBLOCK` is
/// fine) and decodes the answer. ENOTTY or EINVAL: the disk is not behind libata; EACCES
/// or EPERM: no CAP_SYS_ADMIN/CAP_SYS_RAWIO; EIO: the drive aborted the command.
pub fn check_power_mode(file: &File) -> io::Result<PowerMode> {
    let mut args: [u8; 4] = [ATA_CHECK_POWER_MODE, 0, 0, 0];
    // SAFETY: HDIO_DRIVE_CMD reads 4 bytes (command, sector, feature, count) through the
    // pointer and, for a count of 0 (no data phase), writes back exactly those 4 bytes
    // (status, error, count, sector); `args` is a live local `[u8; 4]` for the whole call.
    // A driver that does not know the ioctl fails it without touching the memory. The fd
    // is valid for the borrow of `file`.
    let rc = unsafe { libc::ioctl(file.as_raw_fd(), HDIO_DRIVE_CMD, args.as_mut_ptr()) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(PowerMode::from_count(args[2]))
}

/// The error means "this disk cannot be asked" (not behind libata, or no privilege), as
/// opposed to a drive that failed the command once.
pub fn is_unsupported(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ENOTTY | libc::EINVAL | libc::EOPNOTSUPP | libc::EACCES | libc::EPERM)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_number_matches_linux_hdreg_h() {
        assert_eq!(HDIO_DRIVE_CMD, 0x031f);
    }

    /// The Count register values of ACS-3 table 7.3 (and hdparm's decoding of the
    /// obsolete NV cache ones): only the standby values read as asleep.
    #[test]
    fn power_modes_decode_like_the_standard() {
        for c in [0x00, 0x01, 0x40] {
            assert_eq!(PowerMode::from_count(c), PowerMode::Standby, "{c:#x}");
            assert!(PowerMode::from_count(c).is_standby());
        }
        for c in [0x80, 0x81, 0x82, 0x83] {
            assert_eq!(PowerMode::from_count(c), PowerMode::Idle, "{c:#x}");
        }
        assert_eq!(PowerMode::from_count(0xFF), PowerMode::Active);
        assert_eq!(PowerMode::from_count(0x41), PowerMode::Active);
        assert_eq!(PowerMode::from_count(0x02), PowerMode::Unknown(0x02));
        for c in 0..=255u8 {
            assert_eq!(
                PowerMode::from_count(c).is_standby(),
                matches!(c, 0x00 | 0x01 | 0x40),
                "{c:#x}"
            );
        }
        assert_eq!(PowerMode::Active.name(), "active/idle");
    }

    #[test]
    fn a_file_cannot_be_asked_and_says_so() {
        let f = tempfile::tempfile().unwrap();
        let e = check_power_mode(&f).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOTTY), "{e}");
        assert!(is_unsupported(&e));
        assert!(!is_unsupported(&io::Error::from_raw_os_error(libc::EIO)));
    }
}
