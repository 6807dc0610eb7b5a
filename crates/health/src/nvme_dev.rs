//! Reading a live NVMe drive: find the controller of a namespace through sysfs, issue the
//! admin commands (through `sys::nvme`), and hand the bytes to the pure parsers.

use std::fs::File;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

use super::model::{HealthReport, Source};
use super::nvme::{self, IdController, IdNamespace, OcpSmart};
use super::HealthError;
use crate::sys::nvme::{self as ioctl, AdminError, NSID_ALL};

const LID_ERROR: u8 = 0x01;
const LID_SMART: u8 = 0x02;
const LID_OCP_C0: u8 = 0xC0;
const LID_SELF_TEST: u8 = 0x06;
/// OACS bit 4: the controller supports the Device Self-test command (and its log).
const OACS_SELF_TEST: u16 = 0x10;
/// LPA bit 0: the SMART log is available per namespace (we always read it controller-wide).
const CNS_NAMESPACE: u8 = 0x00;
const CNS_CONTROLLER: u8 = 0x01;

/// The kernel name of a block device or character device path (`nvme0n1`, `nvme0`).
fn kernel_name(dev: &Path) -> Option<String> {
    let canon = std::fs::canonicalize(dev).ok()?;
    Some(canon.file_name()?.to_string_lossy().into_owned())
}

/// `nvme0n1` → (`nvme0`, 1) by name; `nvme0c1n1` (a multipath path) → (`nvme1`, 1).
fn split_namespace_name(name: &str) -> Option<(String, u32)> {
    let rest = name.strip_prefix("nvme")?;
    let (ctrl, ns) = rest.split_once('n')?;
    let ctrl = match ctrl.split_once('c') {
        Some((_, c)) => c,
        None => ctrl,
    };
    let ns: u32 = ns.split('p').next()?.parse().ok()?;
    let _: u32 = ctrl.parse().ok()?;
    Some((format!("nvme{ctrl}"), ns))
}

/// Finds the controller character device of an NVMe namespace block device, through
/// `/sys/class/block/NAME/device` (the controller, or with native multipath the
/// subsystem, whose first controller is used), falling back to the name.
pub fn controller_of(dev: &Path) -> Result<(PathBuf, Option<u32>), HealthError> {
    let meta = std::fs::metadata(dev).map_err(|e| HealthError::Open {
        path: dev.to_path_buf(),
        source: e,
    })?;
    let name = kernel_name(dev).unwrap_or_default();
    if meta.file_type().is_char_device() {
        if !name.starts_with("nvme") {
            return Err(HealthError::NotNvme(dev.to_path_buf()));
        }
        return Ok((dev.to_path_buf(), None));
    }
    if !meta.file_type().is_block_device() {
        return Err(HealthError::NotADisk(dev.to_path_buf()));
    }
    let (by_name, nsid) =
        split_namespace_name(&name).ok_or_else(|| HealthError::NotNvme(dev.to_path_buf()))?;
    // The parent device in sysfs: `nvme0` for a plain controller.
    let sys = PathBuf::from("/sys/class/block").join(&name).join("device");
    let mut ctrl = None;
    if let Ok(target) = std::fs::read_link(&sys) {
        if let Some(base) = target.file_name().map(|b| b.to_string_lossy().into_owned()) {
            if base.starts_with("nvme") && !base.starts_with("nvme-subsys") {
                ctrl = Some(base);
            } else if base.starts_with("nvme-subsys") {
                // Native multipath: the subsystem lists its controllers.
                if let Ok(rd) = std::fs::read_dir(sys.canonicalize().unwrap_or(sys.clone())) {
                    let mut names: Vec<String> = rd
                        .flatten()
                        .map(|e| e.file_name().to_string_lossy().into_owned())
                        .filter(|n| {
                            n.starts_with("nvme")
                                && n[4..].chars().all(|c| c.is_ascii_digit())
                                && n.len() > 4
                        })
                        .collect();
                    names.sort();
                    ctrl = names.into_iter().next();
                }
            }
        }
    }
    let ctrl = ctrl.unwrap_or(by_name);
    Ok((PathBuf::from("/dev").join(ctrl), Some(nsid)))
}

fn admin_err(dev: &Path, what: &'static str, e: AdminError) -> HealthError {
    if e.is_permission() {
        HealthError::NeedsCapSysAdmin(dev.to_path_buf())
    } else {
        HealthError::Admin {
            path: dev.to_path_buf(),
            what,
            source: e,
        }
    }
}

/// Reads identify data, the SMART log, the error log count and (when the drive has it)
/// the OCP C0h log from a live NVMe drive.
pub fn read_device(dev: &Path) -> Result<HealthReport, HealthError> {
    let (ctrl_path, nsid_by_name) = controller_of(dev)?;
    let ctrl = File::open(&ctrl_path).map_err(|e| {
        if matches!(e.raw_os_error(), Some(libc::EACCES) | Some(libc::EPERM)) {
            HealthError::NeedsCapSysAdmin(ctrl_path.clone())
        } else {
            HealthError::Open {
                path: ctrl_path.clone(),
                source: e,
            }
        }
    })?;
    // The namespace id from the block device itself when we can open it.
    let nsid = std::fs::File::open(dev)
        .ok()
        .and_then(|f| ioctl::namespace_id(&f).ok())
        .or(nsid_by_name)
        .unwrap_or(1);

    let id_ctrl_bytes = ioctl::identify(&ctrl, CNS_CONTROLLER, 0)
        .map_err(|e| admin_err(&ctrl_path, "Identify Controller", e))?;
    let id_ctrl: IdController = nvme::parse_id_ctrl(&id_ctrl_bytes)?;
    let smart_bytes = ioctl::get_log_page(&ctrl, LID_SMART, NSID_ALL, nvme::SMART_LOG_LEN)
        .map_err(|e| admin_err(&ctrl_path, "Get Log Page (SMART / Health)", e))?;
    let smart = nvme::parse_smart_log(&smart_bytes)?;
    let mut notes = Vec::new();
    let id_ns: Option<IdNamespace> = match ioctl::identify(&ctrl, CNS_NAMESPACE, nsid) {
        Ok(b) => nvme::parse_id_ns(&b).ok(),
        Err(e) => {
            notes.push(format!("Identify Namespace {nsid} failed: {e}"));
            None
        }
    };
    let ocp: Option<OcpSmart> = ioctl::get_log_page(&ctrl, LID_OCP_C0, NSID_ALL, nvme::OCP_C0_LEN)
        .ok()
        .and_then(|b| nvme::parse_ocp_c0(&b).ok());
    let entries = id_ctrl.error_log_entries.clamp(1, 256) as usize;
    let mut error_entries = Vec::new();
    match ioctl::get_log_page(&ctrl, LID_ERROR, NSID_ALL, entries * nvme::ERROR_ENTRY_LEN) {
        Ok(b) => {
            let (valid, _) = nvme::parse_error_log(&b);
            error_entries = nvme::parse_error_entries(&b);
            if valid > 0 {
                notes.push(format!(
                    "the error information log holds {valid} entries (of {entries})"
                ));
            }
        }
        Err(e) => notes.push(format!("Get Log Page (Error Information) failed: {e}")),
    }
    let mut r = nvme::report(
        &smart,
        Some(&id_ctrl),
        id_ns.as_ref(),
        ocp.as_ref(),
        Source::NvmeIoctl,
    );
    r.power_state = super::model::PowerState::Active;
    if let Some(d) = &mut r.nvme {
        d.error_log = error_entries;
    }
    if id_ctrl.oacs & OACS_SELF_TEST != 0 {
        match ioctl::get_log_page(&ctrl, LID_SELF_TEST, NSID_ALL, nvme::SELF_TEST_LOG_LEN)
            .map_err(|e| e.to_string())
            .and_then(|b| nvme::parse_self_test_log(&b).map_err(|e| e.to_string()))
        {
            Ok((tests, running)) => {
                r.self_tests = tests;
                r.self_test_running = running.map(|(kind, pct)| super::detail::SelfTestProgress {
                    kind,
                    done_ratio: Some(f64::from(pct) / 100.0),
                });
            }
            Err(e) => r
                .notes
                .push(format!("Get Log Page (Device Self-test) failed: {e}")),
        }
    }
    r.notes.extend(notes);
    Ok(r)
}

/// Device Self-test (14h) with Self-test Code `stc` (1 short, 2 extended, 0xF abort) on
/// `dev`'s controller and, when `dev` is a namespace, that namespace only (its NSID: the
/// other namespaces may be other drives, another tenant's, or in a run); on the
/// controller's own device, every namespace (FFFFFFFFh). Sent after checking the
/// controller supports the command (OACS bit 4). The test runs on in the drive; its
/// progress is in log 06h.
pub fn device_self_test(dev: &Path, stc: u8) -> Result<(), HealthError> {
    let (ctrl_path, nsid) = controller_of(dev)?;
    let nsid = self_test_nsid(nsid);
    let ctrl = File::open(&ctrl_path).map_err(|e| {
        if matches!(e.raw_os_error(), Some(libc::EACCES) | Some(libc::EPERM)) {
            HealthError::NeedsCapSysAdmin(ctrl_path.clone())
        } else {
            HealthError::Open {
                path: ctrl_path.clone(),
                source: e,
            }
        }
    })?;
    let id = ioctl::identify(&ctrl, CNS_CONTROLLER, 0)
        .map_err(|e| admin_err(&ctrl_path, "Identify Controller", e))?;
    let id = nvme::parse_id_ctrl(&id)?;
    if id.oacs & OACS_SELF_TEST == 0 {
        return Err(HealthError::NoSelfTest(ctrl_path));
    }
    ioctl::device_self_test(&ctrl, nsid, stc)
        .map_err(|e| admin_err(&ctrl_path, "Device Self-test", e))
}

/// The NSID a self-test names: the namespace's, or all of them on a controller device.
fn self_test_nsid(namespace: Option<u32>) -> u32 {
    namespace.unwrap_or(NSID_ALL)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A self-test on nvme0n1 names namespace 1 only, never every namespace of the
    /// controller (nvme0n2 may be another drive in a run).
    #[test]
    fn a_namespace_s_self_test_names_that_namespace() {
        assert_eq!(self_test_nsid(Some(1)), 1);
        assert_eq!(self_test_nsid(Some(2)), 2);
        assert_eq!(self_test_nsid(None), NSID_ALL);
    }

    #[test]
    fn namespace_names() {
        assert_eq!(split_namespace_name("nvme0n1"), Some(("nvme0".into(), 1)));
        assert_eq!(split_namespace_name("nvme12n3"), Some(("nvme12".into(), 3)));
        assert_eq!(split_namespace_name("nvme0c1n1"), Some(("nvme1".into(), 1)));
        assert_eq!(split_namespace_name("nvme0n1p2"), Some(("nvme0".into(), 1)));
        assert_eq!(split_namespace_name("sda"), None);
        assert_eq!(split_namespace_name("nvme0"), None);
    }

    #[test]
    fn a_regular_file_is_not_a_disk() {
        let f = std::env::temp_dir().join(format!("dp-notdisk-{}", std::process::id()));
        std::fs::write(&f, b"x").unwrap();
        let e = controller_of(&f).unwrap_err();
        let _ = std::fs::remove_file(&f);
        assert!(matches!(e, HealthError::NotADisk(_)), "{e}");
    }
}
