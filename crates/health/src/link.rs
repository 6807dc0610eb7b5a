//! The PCIe link of an NVMe drive, from sysfs: the PCI function under the block device
//! carries `current_link_speed`, `current_link_width`, `max_link_speed` and
//! `max_link_width`. The maximum is the lower of the drive's and the port's above it (a
//! Gen4 drive in a Gen3 slot trains at Gen3 and is not degraded). Paths come from
//! [`SystemPaths`] so that tests use fake trees.

use std::fs;
use std::path::{Path, PathBuf};

use super::detail::{parse_pcie_speed, parse_pcie_width, Link};
use crate::device::SystemPaths;

/// One attribute of `dir`, trimmed (None: absent, unreadable or empty).
fn read(dir: &Path, name: &str) -> Option<String> {
    crate::device::read_attr(&dir.join(name))
}

fn has_link(dir: &Path) -> bool {
    dir.join("current_link_speed").is_file() || dir.join("max_link_speed").is_file()
}

/// The nearest directory at or above `start` (inside the sysfs root) with link attributes.
fn pci_function_above(start: &Path, sys_root: &Path) -> Option<PathBuf> {
    let mut cur = Some(start);
    while let Some(d) = cur {
        if !d.starts_with(sys_root) || d == sys_root {
            return None;
        }
        if has_link(d) {
            return Some(d.to_path_buf());
        }
        cur = d.parent();
    }
    None
}

/// The PCI function of an NVMe namespace or controller (`nvme0n1`, `nvme0`): through the
/// block device's `device` link (the controller, or with native multipath the subsystem,
/// whose first controller is taken), up to the first directory with link attributes.
pub fn pci_function_of(paths: &SystemPaths, kernel_name: &str) -> Option<PathBuf> {
    let root = fs::canonicalize(&paths.sys).ok()?;
    let candidates = [
        paths
            .sys
            .join("class/block")
            .join(kernel_name)
            .join("device"),
        paths
            .sys
            .join("class/nvme")
            .join(kernel_name)
            .join("device"),
    ];
    for c in candidates {
        let Ok(dir) = fs::canonicalize(&c) else {
            continue;
        };
        if let Some(f) = pci_function_above(&dir, &root) {
            return Some(f);
        }
        // A subsystem (native multipath): its controllers are entries `nvmeN`.
        let mut ctrls: Vec<PathBuf> = fs::read_dir(&dir)
            .ok()?
            .flatten()
            .filter(|e| {
                let n = e.file_name().to_string_lossy().into_owned();
                n.len() > 4 && n.starts_with("nvme") && n[4..].chars().all(|c| c.is_ascii_digit())
            })
            .map(|e| e.path())
            .collect();
        ctrls.sort();
        for ctrl in ctrls {
            if let Some(f) = fs::canonicalize(&ctrl)
                .ok()
                .and_then(|d| pci_function_above(&d, &root))
            {
                return Some(f);
            }
        }
    }
    None
}

/// The link of the PCI function `dir`, its maximum capped by the port above it.
pub fn link_of_function(dir: &Path) -> Option<Link> {
    let speed = |d: &Path, n: &str| read(d, n).as_deref().and_then(parse_pcie_speed);
    let width = |d: &Path, n: &str| read(d, n).as_deref().and_then(parse_pcie_width);
    let mut link = Link {
        current_speed_transfers_per_second: speed(dir, "current_link_speed"),
        max_speed_transfers_per_second: speed(dir, "max_link_speed"),
        current_width: width(dir, "current_link_width"),
        max_width: width(dir, "max_link_width"),
        source: "pcie-sysfs".into(),
    };
    if let Some(port) = dir.parent().filter(|p| has_link(p)) {
        if let (Some(m), Some(p)) = (
            link.max_speed_transfers_per_second,
            speed(port, "max_link_speed"),
        ) {
            link.max_speed_transfers_per_second = Some(m.min(p));
        }
        if let (Some(m), Some(p)) = (link.max_width, width(port, "max_link_width")) {
            link.max_width = Some(m.min(p));
        }
    }
    let known = link.current_speed_transfers_per_second.is_some()
        || link.max_speed_transfers_per_second.is_some()
        || link.current_width.is_some()
        || link.max_width.is_some();
    known.then_some(link)
}

/// The PCIe link of an NVMe drive by its kernel name, or `None` when sysfs does not say
/// (not PCIe: NVMe over fabrics, or a virtual device).
pub fn pcie_link(paths: &SystemPaths, kernel_name: &str) -> Option<Link> {
    link_of_function(&pci_function_of(paths, kernel_name)?)
}

/// The fastest a SATA disk's host port may run, bits per second: the lower of the port's
/// hardware limit (`hw_sata_spd_limit`) and the limit set on it (`sata_spd_limit`, from
/// `libata.force` or error handling), from the `ata_link` of the `ataN` above the disk.
/// None when the disk is not on a libata port (a SAS HBA, USB) or the port does not say.
pub fn sata_port_limit(paths: &SystemPaths, kernel_name: &str) -> Option<f64> {
    let dev = fs::canonicalize(paths.sys.join("class/block").join(kernel_name)).ok()?;
    let port = dev.ancestors().find(|d| {
        d.file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_prefix("ata"))
            .is_some_and(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()))
    })?;
    let gbps = |v: Option<String>| -> Option<f64> {
        let v = v?;
        let n: f64 = v.trim().strip_suffix("Gbps")?.trim().parse().ok()?;
        (n > 0.0 && n < 1000.0).then_some(n * 1e9)
    };
    // ataN/linkN/ata_link/linkN (and linkN.M behind a port multiplier: the host's link
    // is the one without a dot).
    let links = fs::read_dir(port).ok()?;
    for l in links.flatten() {
        let name = l.file_name().to_string_lossy().into_owned();
        if !name.starts_with("link") || name.contains('.') {
            continue;
        }
        let attrs = l.path().join("ata_link").join(&name);
        let hw = gbps(read(&attrs, "hw_sata_spd_limit"));
        let set = gbps(read(&attrs, "sata_spd_limit"));
        return match (hw, set) {
            (Some(h), Some(s)) => Some(h.min(s)),
            (h, s) => h.or(s),
        };
    }
    None
}

/// A SATA link as smartctl reads it from the drive, whose maximum is what the drive can
/// do: capped by its libata host port when that says (a 6 Gb/s drive on a 3 Gb/s port
/// is not degraded). Behind a SAS HBA or a USB bridge the port is not libata's and the
/// drive's own maximum stays: those negotiate the drive's full speed.
pub fn cap_sata_link(link: &mut Link, port_limit: Option<f64>) {
    if let (Some(m), Some(p)) = (link.max_speed_transfers_per_second, port_limit) {
        link.max_speed_transfers_per_second = Some(m.min(p));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    struct Tree(PathBuf);
    impl Drop for Tree {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    fn write(p: &Path, s: &str) {
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, s).unwrap();
    }

    /// A fake sysfs: a root port (Gen3 x4) with an NVMe drive (Gen4 x4 capable) trained at
    /// `speed` and `width`, `nvme0n1` through its controller, `nvme1n1` through a
    /// multipath subsystem.
    fn tree(tag: &str, speed: &str, width: &str) -> (Tree, SystemPaths) {
        let root = std::env::temp_dir().join(format!("dp-link-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        let sys = root.join("sys");
        let port = sys.join("devices/pci0000:00/0000:00:01.1");
        write(&port.join("max_link_speed"), "8.0 GT/s PCIe\n");
        write(&port.join("max_link_width"), "4\n");
        write(&port.join("current_link_speed"), &format!("{speed}\n"));
        write(&port.join("current_link_width"), &format!("{width}\n"));
        let func = port.join("0000:01:00.0");
        write(&func.join("max_link_speed"), "16.0 GT/s PCIe\n");
        write(&func.join("max_link_width"), "4\n");
        write(&func.join("current_link_speed"), &format!("{speed}\n"));
        write(&func.join("current_link_width"), &format!("{width}\n"));
        let ctrl = func.join("nvme/nvme0");
        fs::create_dir_all(ctrl.join("nvme0n1")).unwrap();
        fs::create_dir_all(sys.join("class/block")).unwrap();
        symlink(&ctrl, ctrl.join("nvme0n1/device")).unwrap();
        symlink(ctrl.join("nvme0n1"), sys.join("class/block/nvme0n1")).unwrap();
        let subsys = sys.join("devices/virtual/nvme-subsystem/nvme-subsys1");
        fs::create_dir_all(subsys.join("nvme1n1")).unwrap();
        symlink(&ctrl, subsys.join("nvme0")).unwrap();
        symlink(&subsys, subsys.join("nvme1n1/device")).unwrap();
        symlink(subsys.join("nvme1n1"), sys.join("class/block/nvme1n1")).unwrap();
        let paths = SystemPaths {
            sys,
            ..SystemPaths::default()
        };
        (Tree(root), paths)
    }

    #[test]
    fn full_speed_is_not_degraded_and_the_port_caps_the_maximum() {
        let (_t, paths) = tree("full", "8.0 GT/s PCIe", "4");
        let l = pcie_link(&paths, "nvme0n1").expect("a link");
        assert_eq!(l.current_speed_transfers_per_second, Some(8e9));
        assert_eq!(
            l.max_speed_transfers_per_second,
            Some(8e9),
            "a Gen4 drive under a Gen3 port: Gen3 is its maximum"
        );
        assert_eq!((l.current_width, l.max_width), (Some(4), Some(4)));
        assert!(!l.degraded());
        assert_eq!(
            pcie_link(&paths, "nvme1n1"),
            Some(l),
            "through the subsystem"
        );
    }

    #[test]
    fn a_slow_or_narrow_link_is_degraded() {
        let (_t, paths) = tree("slow", "2.5 GT/s PCIe", "4");
        let l = pcie_link(&paths, "nvme0n1").unwrap();
        assert_eq!(l.current_speed_transfers_per_second, Some(2.5e9));
        assert!(l.degraded());
        let (_t2, paths) = tree("narrow", "8.0 GT/s PCIe", "2");
        let l = pcie_link(&paths, "nvme0n1").unwrap();
        assert_eq!((l.current_width, l.max_width), (Some(2), Some(4)));
        assert!(l.degraded());
    }

    /// A SATA disk on `ata3`, whose port can do `hw` and is set to `set`.
    fn sata_tree(tag: &str, hw: &str, set: &str) -> (Tree, SystemPaths) {
        let root = std::env::temp_dir().join(format!("dp-sata-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        let sys = root.join("sys");
        let port = sys.join("devices/pci0000:00/0000:00:1f.2/ata3");
        let attrs = port.join("link3/ata_link/link3");
        write(&attrs.join("hw_sata_spd_limit"), &format!("{hw}\n"));
        write(&attrs.join("sata_spd_limit"), &format!("{set}\n"));
        let disk = port.join("host2/target2:0:0/2:0:0:0/block/sdc");
        fs::create_dir_all(&disk).unwrap();
        fs::create_dir_all(sys.join("class/block")).unwrap();
        symlink(&disk, sys.join("class/block/sdc")).unwrap();
        let paths = SystemPaths {
            sys,
            ..SystemPaths::default()
        };
        (Tree(root), paths)
    }

    fn sata(current: f64, max: f64) -> Link {
        Link {
            current_speed_transfers_per_second: Some(current),
            max_speed_transfers_per_second: Some(max),
            current_width: None,
            max_width: None,
            source: "smartctl".into(),
        }
    }

    /// A 6 Gb/s drive on a 3 Gb/s port runs at 3 and is not degraded; on a 6 Gb/s port
    /// at 3 it is. A port set lower (libata.force) is its limit; with no libata port the
    /// drive's own maximum stays.
    #[test]
    fn a_sata_drive_s_maximum_is_capped_by_its_port() {
        let (_t, paths) = sata_tree("3g", "3.0 Gbps", "<unknown>");
        assert_eq!(sata_port_limit(&paths, "sdc"), Some(3e9));
        let mut l = sata(3e9, 6e9);
        cap_sata_link(&mut l, sata_port_limit(&paths, "sdc"));
        assert_eq!(l.max_speed_transfers_per_second, Some(3e9));
        assert!(!l.degraded());

        let (_t, paths) = sata_tree("6g", "6.0 Gbps", "<unknown>");
        let mut l = sata(3e9, 6e9);
        cap_sata_link(&mut l, sata_port_limit(&paths, "sdc"));
        assert!(l.degraded(), "{l:?}");

        let (_t, paths) = sata_tree("forced", "6.0 Gbps", "1.5 Gbps");
        assert_eq!(sata_port_limit(&paths, "sdc"), Some(1.5e9));

        assert_eq!(sata_port_limit(&paths, "nope"), None);
        let mut l = sata(3e9, 6e9);
        cap_sata_link(&mut l, None);
        assert_eq!(l.max_speed_transfers_per_second, Some(6e9));
    }

    #[test]
    fn no_pci_function_is_no_link() {
        let (_t, paths) = tree("none", "8.0 GT/s PCIe", "4");
        assert_eq!(pcie_link(&paths, "sda"), None);
        let empty = SystemPaths {
            sys: PathBuf::from("/nonexistent-dp-sys"),
            ..SystemPaths::default()
        };
        assert_eq!(pcie_link(&empty, "nvme0n1"), None);
    }
}
