//! Running a drive's own self-test (issue 20): start one, abort one. ATA and SCSI drives
//! (and anything with a `smartctl -d` type) through `smartctl -t short|long` and `-X`
//! (SCSI: smartctl's `-t short|long` are the background tests); NVMe through the Device
//! Self-test admin command (14h: code 1 short, 2 extended, 0xF abort). Neither changes
//! data. Progress and results are read back by the health reader (`self_test_running`,
//! `self_tests` of [`super::HealthReport`]).

use std::path::Path;
use std::time::Duration;

use super::{smartctl, HealthError, ReadOptions};

/// Which self-test: `short` (minutes) or `extended` (smartctl's `long`; hours on a disk).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    Short,
    Extended,
}

impl Kind {
    /// Parses a config's `kind`: `short`, `long` or `extended` (the same test).
    pub fn parse(s: &str) -> Option<Kind> {
        match s.trim() {
            "short" => Some(Kind::Short),
            "long" | "extended" => Some(Kind::Extended),
            _ => None,
        }
    }

    /// The name in the self-test logs (`detail::SelfTest::kind`) and the `kind` label.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Short => "short",
            Kind::Extended => "extended",
        }
    }

    fn smartctl_arg(self) -> &'static str {
        match self {
            Kind::Short => "short",
            Kind::Extended => "long",
        }
    }

    fn nvme_code(self) -> u8 {
        match self {
            Kind::Short => 1,
            Kind::Extended => 2,
        }
    }
}

/// NVMe Self-test Code 0xF: abort the test running.
const NVME_ABORT: u8 = 0x0f;

/// How a self-test reaches the drive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// The NVMe admin command, by ioctl.
    NvmeIoctl,
    /// smartctl (`-t`, `-X`).
    Smartctl,
}

#[derive(Debug, thiserror::Error)]
pub enum SelfTestError {
    #[error(transparent)]
    Nvme(#[from] HealthError),
    #[error(transparent)]
    Smartctl(#[from] smartctl::SmartctlError),
}

impl SelfTestError {
    /// The controller answered Invalid Command Opcode (status 0x1, with or without DNR):
    /// an emulator or firmware that lists the command but does not do it.
    pub fn invalid_opcode(&self) -> bool {
        matches!(
            self,
            SelfTestError::Nvme(HealthError::Admin {
                source: crate::sys::nvme::AdminError::Status(s),
                ..
            }) if s & 0x7ff == 0x001
        )
    }
}

/// The path `dev` takes with `opts` (the same choice as [`super::read`]).
pub fn path_of(dev: &Path, opts: &ReadOptions) -> Route {
    if opts.smartctl_type.is_none() && !opts.nvme_via_smartctl && super::is_nvme(dev) {
        Route::NvmeIoctl
    } else {
        Route::Smartctl
    }
}

fn smartctl_action(
    dev: &Path,
    opts: &ReadOptions,
    action: &[&str],
    timeout: Duration,
) -> Result<(), SelfTestError> {
    let program = smartctl::find_smartctl().ok_or(smartctl::SmartctlError::NotInstalled)?;
    Ok(smartctl::run_action(
        &program,
        dev,
        opts.smartctl_type.as_deref(),
        action,
        timeout,
    )?)
}

/// Starts a `kind` self-test on `dev`. The drive refuses while another runs (smartctl
/// without `force`; NVMe status 0x11D), and that is an error here: a test is never
/// aborted to start another.
pub fn start(dev: &Path, opts: &ReadOptions, kind: Kind) -> Result<(), SelfTestError> {
    match path_of(dev, opts) {
        Route::NvmeIoctl => Ok(super::nvme_dev::device_self_test(dev, kind.nvme_code())?),
        Route::Smartctl => smartctl_action(
            dev,
            opts,
            &["-t", kind.smartctl_arg()],
            opts.smartctl_timeout,
        ),
    }
}

/// Aborts the self-test running on `dev` (NVMe code 0xF; `smartctl -X`).
pub fn abort(dev: &Path, opts: &ReadOptions) -> Result<(), SelfTestError> {
    match path_of(dev, opts) {
        Route::NvmeIoctl => Ok(super::nvme_dev::device_self_test(dev, NVME_ABORT)?),
        Route::Smartctl => smartctl_action(dev, opts, &["-X"], opts.smartctl_timeout),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds() {
        assert_eq!(Kind::parse("short"), Some(Kind::Short));
        assert_eq!(Kind::parse("long"), Some(Kind::Extended));
        assert_eq!(Kind::parse("extended"), Some(Kind::Extended));
        assert_eq!(Kind::parse("conveyance"), None);
        assert_eq!(Kind::Extended.smartctl_arg(), "long");
        assert_eq!(Kind::Extended.nvme_code(), 2);
    }

    #[test]
    fn invalid_opcode_is_recognised_with_and_without_dnr() {
        for (status, want) in [(0x1, true), (0x4001, true), (0x11d, false), (0x2, false)] {
            let e = SelfTestError::Nvme(HealthError::Admin {
                path: "/dev/nvme0".into(),
                what: "Device Self-test",
                source: crate::sys::nvme::AdminError::Status(status),
            });
            assert_eq!(e.invalid_opcode(), want, "{status:#x}");
        }
    }
}
