//! NVMe admin commands through the kernel's passthrough ioctl (NVME_IOCTL_ADMIN_CMD).
//! Reads (Identify, Get Log Page), Device Self-test (starts or aborts the drive's own
//! test; it changes no data), and the purge commands. The caller needs CAP_SYS_ADMIN.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

/// `struct nvme_passthru_cmd` from `<linux/nvme_ioctl.h>` (72 bytes).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
struct PassthruCmd {
    opcode: u8,
    flags: u8,
    rsvd1: u16,
    nsid: u32,
    cdw2: u32,
    cdw3: u32,
    metadata: u64,
    addr: u64,
    metadata_len: u32,
    data_len: u32,
    cdw10: u32,
    cdw11: u32,
    cdw12: u32,
    cdw13: u32,
    cdw14: u32,
    cdw15: u32,
    timeout_ms: u32,
    result: u32,
}

const _: () = assert!(std::mem::size_of::<PassthruCmd>() == 72);

/// `_IOWR('N', 0x41, struct nvme_admin_cmd)`.
const NVME_IOCTL_ADMIN_CMD: libc::c_ulong = 0xC048_4E41;
/// `_IO('N', 0x40)`: the namespace id of a namespace block device.
const NVME_IOCTL_ID: libc::c_ulong = 0x0000_4E40;

const OPC_GET_LOG_PAGE: u8 = 0x02;
const OPC_IDENTIFY: u8 = 0x06;
pub const NSID_ALL: u32 = 0xFFFF_FFFF;

/// How an admin command failed.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    /// The ioctl itself failed (errno): EACCES/EPERM mean no CAP_SYS_ADMIN.
    #[error("{0}")]
    Os(io::Error),
    /// The controller completed the command with a non-zero status.
    #[error("the controller answered status 0x{0:x}")]
    Status(i32),
}

impl AdminError {
    pub fn is_permission(&self) -> bool {
        matches!(self, AdminError::Os(e) if matches!(e.raw_os_error(), Some(libc::EACCES) | Some(libc::EPERM)))
    }
}

/// Issues one admin command; `buf` receives the data of a command that returns some
/// (None for a command that transfers none).
fn admin(
    file: &File,
    mut cmd: PassthruCmd,
    buf: Option<&mut [u8]>,
    timeout_ms: u32,
) -> Result<u32, AdminError> {
    match buf {
        Some(buf) => {
            cmd.addr = buf.as_mut_ptr() as u64;
            cmd.data_len = u32::try_from(buf.len())
                .map_err(|_| AdminError::Os(io::ErrorKind::InvalidInput.into()))?;
        }
        None => {
            cmd.addr = 0;
            cmd.data_len = 0;
        }
    }
    cmd.timeout_ms = timeout_ms;
    // SAFETY: `cmd` is a properly laid out `nvme_passthru_cmd` (size asserted above) that
    // lives across the call. With a buffer, `addr`/`data_len` describe it and it is
    // borrowed mutably for the whole call, so the kernel writes at most `buf.len()` bytes
    // into memory we own; the data-returning commands issued here (Identify, Get Log Page)
    // only transfer from the controller to the host. Without one, `addr` and `data_len`
    // are 0 and the kernel maps no user memory, writing only `cmd.result`. The fd is valid
    // for the borrow of `file`.
    let rc = unsafe {
        libc::ioctl(
            file.as_raw_fd(),
            NVME_IOCTL_ADMIN_CMD,
            &mut cmd as *mut PassthruCmd,
        )
    };
    if rc < 0 {
        return Err(AdminError::Os(io::Error::last_os_error()));
    }
    if rc > 0 {
        return Err(AdminError::Status(rc));
    }
    Ok(cmd.result)
}

/// Timeout of the read-only admin commands.
const READ_TIMEOUT_MS: u32 = 10_000;

/// Identify (CNS `cns`) into a 4096-byte buffer.
pub fn identify(file: &File, cns: u8, nsid: u32) -> Result<Vec<u8>, AdminError> {
    let mut buf = vec![0u8; 4096];
    let cmd = PassthruCmd {
        opcode: OPC_IDENTIFY,
        nsid,
        cdw10: cns as u32,
        ..Default::default()
    };
    admin(file, cmd, Some(&mut buf), READ_TIMEOUT_MS)?;
    Ok(buf)
}

/// Get Log Page `lid` of `len` bytes (a multiple of 4).
pub fn get_log_page(file: &File, lid: u8, nsid: u32, len: usize) -> Result<Vec<u8>, AdminError> {
    let mut buf = vec![0u8; len];
    let numd = (len / 4).saturating_sub(1) as u32;
    let cmd = PassthruCmd {
        opcode: OPC_GET_LOG_PAGE,
        nsid,
        cdw10: (lid as u32) | ((numd & 0xffff) << 16),
        cdw11: numd >> 16,
        ..Default::default()
    };
    admin(file, cmd, Some(&mut buf), READ_TIMEOUT_MS)?;
    Ok(buf)
}

/// The namespace id of an open namespace block device.
pub fn namespace_id(file: &File) -> io::Result<u32> {
    // SAFETY: NVME_IOCTL_ID takes no argument and returns the namespace id (or -1 with
    // errno); the fd is valid for the borrow of `file`.
    let rc = unsafe { libc::ioctl(file.as_raw_fd(), NVME_IOCTL_ID) };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc as u32)
    }
}

const OPC_DEVICE_SELF_TEST: u8 = 0x14;

/// Device Self-test (opcode 14h) with Self-test Code `stc` (1 short, 2 extended, 0xF
/// abort) on namespace `nsid` (`NSID_ALL`: every namespace). Returns when the controller
/// has accepted it; the test runs on in the background (poll log page 06h).
pub fn device_self_test(file: &File, nsid: u32, stc: u8) -> Result<(), AdminError> {
    let cmd = PassthruCmd {
        opcode: OPC_DEVICE_SELF_TEST,
        nsid,
        cdw10: u32::from(stc & 0x0f),
        ..Default::default()
    };
    admin(file, cmd, None, READ_TIMEOUT_MS).map(|_| ())
}

// --- Purge: Format NVM and Sanitize (these destroy data; see `protocol::purge`). ---

const OPC_FORMAT_NVM: u8 = 0x80;
const OPC_SANITIZE: u8 = 0x84;

/// Format NVM (opcode 80h) of namespace `nsid` with command dword 10 `cdw10` (LBAF, MSET,
/// PI, PIL, SES, LBAFU). Destroys the namespace's data (or, when the controller's FNA says
/// so, every namespace's). Blocks until the controller completes it or `timeout_ms` passes.
pub fn format_nvm(file: &File, nsid: u32, cdw10: u32, timeout_ms: u32) -> Result<(), AdminError> {
    let cmd = PassthruCmd {
        opcode: OPC_FORMAT_NVM,
        nsid,
        cdw10,
        ..Default::default()
    };
    admin(file, cmd, None, timeout_ms).map(|_| ())
}

/// Sanitize (opcode 84h) with command dword 10 `cdw10` (SANACT, AUSE, OWPASS, OIPBP, NDAS)
/// and 11 `cdw11` (overwrite pattern). Acts on the whole NVM subsystem. Returns when the
/// controller has accepted it; the operation runs on in the background (poll the Sanitize
/// Status log, 81h).
pub fn sanitize(file: &File, cdw10: u32, cdw11: u32) -> Result<(), AdminError> {
    let cmd = PassthruCmd {
        opcode: OPC_SANITIZE,
        cdw10,
        cdw11,
        ..Default::default()
    };
    admin(file, cmd, None, 60_000).map(|_| ())
}
