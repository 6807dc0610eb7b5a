//! Which device a configured drive is today. Paths move between boots; the identity
//! (serial, WWN, or a `/dev/disk/by-id/` link) decides. A drive whose identity matches
//! no device, or whose file target is not on the identified drive, is down and gets no
//! I/O. Reads sysfs only.

use std::path::{Path, PathBuf};

use crate::config::{Drive, Identity};
use crate::device::{self, BlockDeviceInfo, DeviceError};

/// Where a drive is now.
#[derive(Debug, Clone)]
pub struct Resolved {
    /// What probes and runs open: the file target, or the raw device.
    pub target: PathBuf,
    /// The whole disk (`/dev/NAME`) for health and identity, when there is one (a file
    /// target on tmpfs has none).
    pub device: Option<PathBuf>,
    pub device_info: Option<BlockDeviceInfo>,
    /// Something worth a line in the log (several disks under a file target...).
    pub note: Option<String>,
}

/// Resolves `d` now. `Err` is the one-line reason the drive is down.
pub fn resolve(d: &Drive) -> Result<Resolved, String> {
    match &d.identity {
        None => resolve_file_only(d),
        Some(id) => {
            let info = find_device(id, d.path.as_deref())?;
            let dev_path = PathBuf::from("/dev").join(&info.name);
            let target = match &d.file_target {
                Some(ft) => {
                    check_file_on(&ft.path, &info, id)?;
                    ft.path.clone()
                }
                None => dev_path.clone(),
            };
            Ok(Resolved {
                target,
                device: Some(dev_path),
                device_info: Some(info),
                note: None,
            })
        }
    }
}

fn describe(id: &Identity) -> String {
    match id {
        Identity::Serial(s) => format!("serial {s:?}"),
        Identity::Wwn(w) => format!("WWN {w:?}"),
        Identity::ById(p) => p.display().to_string(),
    }
}

fn matches(id: &Identity, info: &BlockDeviceInfo) -> bool {
    match id {
        Identity::Serial(s) => info.identity.serial.as_deref() == Some(s.as_str()),
        Identity::Wwn(w) => info
            .identity
            .wwn
            .as_deref()
            .is_some_and(|x| normalize_wwn(x) == normalize_wwn(w)),
        Identity::ById(_) => true,
    }
}

/// WWNs are written as `0x5002538e...`, `naa.5002538e...` or `eui.0025...`: compare the
/// hex digits.
fn normalize_wwn(w: &str) -> String {
    let w = w.trim().to_ascii_lowercase();
    let w = w
        .strip_prefix("0x")
        .or_else(|| w.strip_prefix("naa."))
        .or_else(|| w.strip_prefix("eui."))
        .unwrap_or(&w);
    w.to_string()
}

/// The whole disk with identity `id`: at `hint` when it is still there, else wherever it
/// is now.
fn find_device(id: &Identity, hint: Option<&Path>) -> Result<BlockDeviceInfo, String> {
    if let Identity::ById(link) = id {
        let info = device::inspect(link).map_err(|e| match e {
            DeviceError::Io { .. } => format!("{} is absent", link.display()),
            e => format!("{}: {e}", link.display()),
        })?;
        return whole_disk(info);
    }
    if let Some(p) = hint {
        if let Some(info) = device::inspect(p).ok().and_then(|i| whole_disk(i).ok()) {
            if matches(id, &info) {
                return Ok(info);
            }
        }
    }
    let entries =
        std::fs::read_dir("/sys/block").map_err(|e| format!("cannot list /sys/block: {e}"))?;
    let mut names: Vec<String> = entries
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    for name in names {
        let dev = PathBuf::from("/dev").join(&name);
        if let Ok(info) = device::inspect(&dev) {
            if matches(id, &info) {
                return Ok(info);
            }
        }
    }
    Err(match hint {
        Some(p) => format!(
            "no device has {} ({} is absent or is another drive)",
            describe(id),
            p.display()
        ),
        None => format!("no device has {}", describe(id)),
    })
}

/// The whole disk of a device that may be a partition.
fn whole_disk(info: BlockDeviceInfo) -> Result<BlockDeviceInfo, String> {
    match &info.parent {
        Some(parent) => device::inspect(&PathBuf::from("/dev").join(parent))
            .map_err(|e| format!("{}: its disk {parent}: {e}", info.path.display())),
        None => Ok(info),
    }
}

/// A file target must live on the identified disk.
fn check_file_on(file: &Path, disk: &BlockDeviceInfo, id: &Identity) -> Result<(), String> {
    let probe = existing_ancestor(file);
    let drives = device::drives_of_file(&probe).map_err(|e| {
        format!(
            "file target {}: cannot tell which drive it is on: {e}",
            file.display()
        )
    })?;
    if drives.disks.iter().any(|d| d.name == disk.name) {
        Ok(())
    } else {
        let on: Vec<&str> = drives.disks.iter().map(|d| d.name.as_str()).collect();
        Err(format!(
            "file target {} is on {}, not on the drive with {} ({})",
            file.display(),
            on.join(", "),
            describe(id),
            disk.name
        ))
    }
}

/// The file, or its closest existing ancestor directory (a file target not created yet).
fn existing_ancestor(p: &Path) -> PathBuf {
    let mut cur = p.to_path_buf();
    loop {
        if cur.exists() {
            return cur;
        }
        match cur.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => cur = parent.to_path_buf(),
            _ => return PathBuf::from("/"),
        }
    }
}

fn resolve_file_only(d: &Drive) -> Result<Resolved, String> {
    let ft = d
        .file_target
        .as_ref()
        .ok_or_else(|| "the drive has neither an identity nor a file target".to_string())?;
    let dir = ft.path.parent().unwrap_or(Path::new("/"));
    if !dir.is_dir() {
        return Err(format!("file target directory {} is absent", dir.display()));
    }
    let (device, device_info, note) = match device::drives_of_file(&existing_ancestor(&ft.path)) {
        Ok(mut fd) if !fd.disks.is_empty() => {
            let note = (fd.disks.len() > 1).then(|| {
                let names: Vec<&str> = fd.disks.iter().map(|d| d.name.as_str()).collect();
                format!(
                    "file target {} spans {} disks ({}); health is read from {}",
                    ft.path.display(),
                    fd.disks.len(),
                    names.join(", "),
                    names[0]
                )
            });
            let first = fd.disks.remove(0);
            (
                Some(PathBuf::from("/dev").join(&first.name)),
                Some(first),
                note,
            )
        }
        // tmpfs, overlay, NFS: no drive to read health from; probes still run.
        _ => (None, None, None),
    };
    Ok(Resolved {
        target: ft.path.clone(),
        device,
        device_info,
        note,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wwns_compare_by_their_digits() {
        assert_eq!(normalize_wwn("0x5002538E40A1B2C3"), "5002538e40a1b2c3");
        assert_eq!(normalize_wwn("naa.5002538e40a1b2c3"), "5002538e40a1b2c3");
        assert_eq!(normalize_wwn(" eui.0025385B71B0"), "0025385b71b0");
    }

    #[test]
    fn a_file_target_on_tmpfs_has_no_device_but_is_up() {
        let dir = tempfile::tempdir_in("/dev/shm").unwrap();
        let d = Drive {
            name: "t".into(),
            identity: None,
            path: None,
            destructive: false,
            file_target: Some(crate::config::FileTarget {
                path: dir.path().join("x.dat"),
                size: 1 << 20,
            }),
            rating: Default::default(),
            rated: Default::default(),
        };
        let r = resolve(&d).unwrap();
        assert_eq!(r.target, dir.path().join("x.dat"));
        assert!(r.device.is_none());
        let gone = Drive {
            file_target: Some(crate::config::FileTarget {
                path: dir.path().join("no/such/dir/x.dat"),
                size: 1 << 20,
            }),
            ..d
        };
        let e = resolve(&gone).unwrap_err();
        assert!(e.contains("absent"), "{e}");
    }

    #[test]
    fn an_unknown_serial_is_down_with_a_reason() {
        let d = Drive {
            name: "x".into(),
            identity: Some(Identity::Serial("NO-SUCH-SERIAL-42".into())),
            path: Some("/dev/nonexistent0".into()),
            destructive: false,
            file_target: None,
            rating: Default::default(),
            rated: Default::default(),
        };
        let e = resolve(&d).unwrap_err();
        assert!(e.contains("NO-SUCH-SERIAL-42"), "{e}");
    }
}
