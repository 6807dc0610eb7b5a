//! SCSI commands through the kernel's SG_IO ioctl on a SCSI disk's block device (`sd`):
//! what purge needs to send a SCSI SANITIZE, and ATA commands wrapped in ATA PASS-THROUGH
//! (16) (SAT), which libata and SAT bridges hand to an ATA drive. The caller builds the
//! command (CDB) and reads the sense data; this module only moves the bytes. Commands that
//! write need the descriptor open for writing or CAP_SYS_RAWIO.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

/// `struct sg_io_hdr` from `<scsi/sg.h>`.
#[repr(C)]
struct SgIoHdr {
    interface_id: libc::c_int,
    dxfer_direction: libc::c_int,
    cmd_len: u8,
    mx_sb_len: u8,
    iovec_count: u16,
    dxfer_len: libc::c_uint,
    dxferp: *mut libc::c_void,
    cmdp: *const u8,
    sbp: *mut u8,
    timeout: libc::c_uint,
    flags: libc::c_uint,
    pack_id: libc::c_int,
    usr_ptr: *mut libc::c_void,
    status: u8,
    masked_status: u8,
    msg_status: u8,
    sb_len_wr: u8,
    host_status: u16,
    driver_status: u16,
    resid: libc::c_int,
    duration: libc::c_uint,
    info: libc::c_uint,
}

#[cfg(target_pointer_width = "64")]
const _: () = assert!(std::mem::size_of::<SgIoHdr>() == 88);

/// `SG_IO` from `<scsi/sg.h>`.
const SG_IO: libc::c_ulong = 0x2285;
const SG_DXFER_NONE: libc::c_int = -1;
const SG_DXFER_TO_DEV: libc::c_int = -2;
const SG_DXFER_FROM_DEV: libc::c_int = -3;
/// The most sense data asked for (descriptor format with an ATA Return descriptor fits).
pub const SENSE_LEN: usize = 64;

/// The data phase of a command.
pub enum Data<'a> {
    None,
    /// From the device into this buffer.
    In(&'a mut [u8]),
    /// From this buffer to the device.
    Out(&'a [u8]),
}

/// How the command ended, as the kernel reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Completion {
    /// The SCSI status byte (0 GOOD, 2 CHECK CONDITION, 8 BUSY, ...).
    pub status: u8,
    /// The host adapter's status (0: no error; 3 a time-out, ...).
    pub host_status: u16,
    /// The driver's status (0: no error; 8 sense data in `sense`).
    pub driver_status: u16,
    /// The sense data the device returned (empty when none).
    pub sense: Vec<u8>,
    /// Bytes of the data phase not transferred.
    pub resid: i32,
}

impl Completion {
    /// The command completed with GOOD status and no transport error.
    pub fn is_good(&self) -> bool {
        self.status == 0 && self.host_status == 0 && (self.driver_status & 0x0f) == 0
    }
}

/// Sends `cdb` (6 to 16 bytes) to the SCSI device behind `file` with `data` and waits at
/// most `timeout_ms` for it. Err: the ioctl itself failed (ENOTTY or EINVAL: not a SCSI
/// device; EPERM/EACCES: no privilege for this command). A device's own refusal is an Ok
/// [`Completion`] with its status and sense.
pub fn command(file: &File, cdb: &[u8], data: Data<'_>, timeout_ms: u32) -> io::Result<Completion> {
    if !(6..=16).contains(&cdb.len()) {
        return Err(io::ErrorKind::InvalidInput.into());
    }
    let mut sense = [0u8; SENSE_LEN];
    let (dir, ptr, len) = match data {
        Data::None => (SG_DXFER_NONE, std::ptr::null_mut(), 0usize),
        Data::In(b) => (SG_DXFER_FROM_DEV, b.as_mut_ptr().cast(), b.len()),
        // The kernel only reads a to-device buffer.
        Data::Out(b) => (SG_DXFER_TO_DEV, b.as_ptr() as *mut libc::c_void, b.len()),
    };
    let dxfer_len = libc::c_uint::try_from(len).map_err(|_| io::ErrorKind::InvalidInput)?;
    let mut hdr = SgIoHdr {
        interface_id: b'S' as libc::c_int,
        dxfer_direction: dir,
        cmd_len: cdb.len() as u8,
        mx_sb_len: SENSE_LEN as u8,
        iovec_count: 0,
        dxfer_len,
        dxferp: ptr,
        cmdp: cdb.as_ptr(),
        sbp: sense.as_mut_ptr(),
        timeout: timeout_ms,
        flags: 0,
        pack_id: 0,
        usr_ptr: std::ptr::null_mut(),
        status: 0,
        masked_status: 0,
        msg_status: 0,
        sb_len_wr: 0,
        host_status: 0,
        driver_status: 0,
        resid: 0,
        duration: 0,
        info: 0,
    };
    // SAFETY: `hdr` is a properly laid out `sg_io_hdr` (size asserted above) that lives
    // across the call, and every pointer in it refers to memory borrowed for the whole
    // call: `cmdp` to `cdb` (`cmd_len` bytes, which the kernel only reads), `sbp` to the
    // local `sense` (the kernel writes at most `mx_sb_len` = its length), and `dxferp` to
    // the caller's buffer of `dxfer_len` bytes: mutably borrowed for a from-device
    // transfer, only read by the kernel for a to-device one, null with length 0 for none.
    // SG_IO is synchronous: the kernel is done with all of them when the ioctl returns.
    // The fd is valid for the borrow of `file`.
    let rc = unsafe { libc::ioctl(file.as_raw_fd(), SG_IO, &mut hdr as *mut SgIoHdr) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    let n = (hdr.sb_len_wr as usize).min(SENSE_LEN);
    Ok(Completion {
        status: hdr.status,
        host_status: hdr.host_status,
        driver_status: hdr.driver_status,
        sense: sense[..n].to_vec(),
        resid: hdr.resid,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_number_matches_linux_scsi_sg_h() {
        // <scsi/sg.h>: #define SG_IO 0x2285
        assert_eq!(SG_IO, 0x2285);
    }

    #[test]
    fn a_regular_file_is_not_a_scsi_device_and_says_so() {
        let f = tempfile::tempfile().unwrap();
        // TEST UNIT READY.
        let e = command(&f, &[0u8; 6], Data::None, 1000).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOTTY), "{e}");
    }

    #[test]
    fn a_cdb_of_a_wrong_length_is_refused_before_the_kernel() {
        let f = tempfile::tempfile().unwrap();
        let e = command(&f, &[0u8; 4], Data::None, 1000).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    }
}
