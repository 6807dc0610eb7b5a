//! Drive health: NVMe SMART/Health and identify data by ioctl, SATA and SAS SMART through
//! `smartctl --json`, read into one model ([`model::HealthReport`]), with a verdict
//! ([`model::assess`]) and an endurance estimate ([`endurance::estimate`]). Parsers are
//! pure functions over bytes or text; the only ioctls are in `sys::nvme`.
#![forbid(unsafe_code)]

use driveprobe_core::{device, fmt, process, units};
use driveprobe_sys as sys;

pub mod detail;
pub mod endurance;
pub mod link;
pub mod model;
pub mod nvme;
mod nvme_dev;
pub mod selftest;
pub mod smartctl;

use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use model::{assess, Assessment, HealthReport, Identity, Transport, Verdict};
pub use nvme_dev::controller_of;

#[derive(Debug, thiserror::Error)]
pub enum HealthError {
    #[error("{0}: reading NVMe health needs CAP_SYS_ADMIN: run as root, or give the service CAP_SYS_ADMIN")]
    NeedsCapSysAdmin(PathBuf),
    #[error("{0}: not an NVMe device")]
    NotNvme(PathBuf),
    #[error("{0}: not a disk: give a block device such as /dev/nvme0n1 or /dev/sda")]
    NotADisk(PathBuf),
    #[error("{path}: {source}")]
    Open {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {what} failed: {source}")]
    Admin {
        path: PathBuf,
        what: &'static str,
        source: crate::sys::nvme::AdminError,
    },
    #[error("{0}: the controller does not support Device Self-test (Identify Controller OACS bit 4 is clear)")]
    NoSelfTest(PathBuf),
    #[error(transparent)]
    NvmeParse(#[from] nvme::NvmeParseError),
    #[error(transparent)]
    Smartctl(#[from] smartctl::SmartctlError),
}

/// How to read a live device.
#[derive(Debug, Clone)]
pub struct ReadOptions {
    /// smartctl is killed after this long (a hung device must not hang the reader).
    pub smartctl_timeout: Duration,
    /// Read NVMe drives through smartctl instead of the admin ioctl.
    pub nvme_via_smartctl: bool,
    /// smartctl's `-d TYPE` (a drive behind a RAID controller: `megaraid,1`): the drive
    /// is read through smartctl with it, whatever `dev` is.
    pub smartctl_type: Option<String>,
}

impl Default for ReadOptions {
    fn default() -> Self {
        ReadOptions {
            smartctl_timeout: Duration::from_secs(30),
            nvme_via_smartctl: false,
            smartctl_type: None,
        }
    }
}

/// True when `dev` names an NVMe namespace or controller.
pub fn is_nvme(dev: &Path) -> bool {
    std::fs::canonicalize(dev)
        .ok()
        .and_then(|p| {
            p.file_name()
                .map(|n| n.to_string_lossy().starts_with("nvme"))
        })
        .unwrap_or(false)
}

/// Reads a live device: NVMe by ioctl, everything else through smartctl.
pub fn read(dev: &Path, opts: &ReadOptions) -> Result<HealthReport, HealthError> {
    if let Some(t) = &opts.smartctl_type {
        let program = smartctl::find_smartctl().ok_or(smartctl::SmartctlError::NotInstalled)?;
        return Ok(smartctl::read_device_typed_with(
            &program,
            dev,
            Some(t),
            opts.smartctl_timeout,
        )?);
    }
    let meta = std::fs::metadata(dev).map_err(|e| HealthError::Open {
        path: dev.to_path_buf(),
        source: e,
    })?;
    let ft = meta.file_type();
    if !ft.is_block_device() && !ft.is_char_device() {
        return Err(HealthError::NotADisk(dev.to_path_buf()));
    }
    let nvme = is_nvme(dev);
    let mut r = if nvme && !opts.nvme_via_smartctl {
        nvme_dev::read_device(dev)?
    } else {
        smartctl::read_device(dev, opts.smartctl_timeout)?
    };
    let name = std::fs::canonicalize(dev)
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()));
    let paths = crate::device::SystemPaths::default();
    if let Some(name) = name {
        if nvme && r.link.is_none() {
            r.link = link::pcie_link(&paths, &name);
        } else if let Some(l) = r.link.as_mut().filter(|l| l.source == "smartctl") {
            link::cap_sata_link(l, link::sata_port_limit(&paths, &name));
        }
    }
    Ok(r)
}
