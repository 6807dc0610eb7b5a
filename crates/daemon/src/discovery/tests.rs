use std::fs;
use std::path::Path;

use super::*;
use crate::config::{Config, Discovery, Probe};

// A fake sysfs: `devices/...` directories with `class/block` links to them.

/// One block device of the fake tree.
struct Dev<'a> {
    name: &'a str,
    /// Under `sys/devices/`, without the trailing `block/NAME`.
    at: &'a str,
    size_sectors: u64,
    rotational: bool,
    serial: Option<&'a str>,
    wwn: Option<&'a str>,
    model: Option<&'a str>,
}

impl<'a> Dev<'a> {
    fn new(name: &'a str, at: &'a str) -> Dev<'a> {
        Dev {
            name,
            at,
            size_sectors: 2048,
            rotational: false,
            serial: None,
            wwn: None,
            model: None,
        }
    }
    fn serial(mut self, s: &'a str) -> Self {
        self.serial = Some(s);
        self
    }
    fn wwn(mut self, s: &'a str) -> Self {
        self.wwn = Some(s);
        self
    }
    fn model(mut self, s: &'a str) -> Self {
        self.model = Some(s);
        self
    }
    fn rotational(mut self) -> Self {
        self.rotational = true;
        self
    }
    fn size(mut self, sectors: u64) -> Self {
        self.size_sectors = sectors;
        self
    }
}

/// A fake sysfs (and /proc) tree in a temporary folder, and the paths that read it (as
/// `device`'s tests have, in the crate below).
struct FakeSys {
    _dir: tempfile::TempDir,
    paths: SystemPaths,
}

/// Writes `text` at `path`, making its folders.
fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

impl FakeSys {
    fn new() -> FakeSys {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        fs::create_dir_all(root.join("sys/class/block")).unwrap();
        fs::create_dir_all(root.join("udev")).unwrap();
        let paths = SystemPaths {
            sys: root.join("sys"),
            mountinfo: root.join("mountinfo"),
            swaps: root.join("swaps"),
            udev_data: root.join("udev"),
        };
        FakeSys { _dir: dir, paths }
    }

    fn add(&self, d: Dev, minor: u32) -> &Self {
        let dir = self
            .paths
            .sys
            .join("devices")
            .join(d.at)
            .join("block")
            .join(d.name);
        write(&dir.join("dev"), &format!("8:{minor}\n"));
        write(&dir.join("size"), &format!("{}\n", d.size_sectors));
        write(&dir.join("queue/logical_block_size"), "512\n");
        write(&dir.join("queue/physical_block_size"), "4096\n");
        write(
            &dir.join("queue/rotational"),
            if d.rotational { "1\n" } else { "0\n" },
        );
        if let Some(s) = d.serial {
            write(&dir.join("device/serial"), &format!("{s}\n"));
        }
        if let Some(w) = d.wwn {
            write(&dir.join("wwid"), &format!("{w}\n"));
        }
        if let Some(m) = d.model {
            write(&dir.join("device/model"), &format!("{m}\n"));
        }
        std::os::unix::fs::symlink(&dir, self.paths.sys.join("class/block").join(d.name)).unwrap();
        self
    }

    /// A partition `part` of the disk `disk` (already added).
    fn partition(&self, disk: &str, part: &str) -> &Self {
        let disk_dir = fs::canonicalize(self.paths.sys.join("class/block").join(disk)).unwrap();
        let dir = disk_dir.join(part);
        write(&dir.join("dev"), "8:99\n");
        write(&dir.join("size"), "100\n");
        write(&dir.join("partition"), "1\n");
        std::os::unix::fs::symlink(&dir, self.paths.sys.join("class/block").join(part)).unwrap();
        self
    }

    fn attr(&self, name: &str, attr: &str, value: &str) -> &Self {
        write(
            &self.paths.sys.join("class/block").join(name).join(attr),
            value,
        );
        self
    }
}

const ATA: &str = "pci0000:00/0000:00:1f.2/ata1/host0/target0:0:0/0:0:0:0";
const ATA2: &str = "pci0000:00/0000:00:1f.2/ata2/host1/target1:0:0/1:0:0:0";
const SAS: &str = "pci0000:00/0000:00:03.0/host2/port-2:0/end_device-2:0/target2:0:0/2:0:0:0";
const SCSI: &str = "pci0000:00/0000:00:04.0/host3/target3:0:0/3:0:0:0";
const USB: &str = "pci0000:00/0000:00:14.0/usb2/2-1/2-1:1.0/host4/target4:0:0/4:0:0:0";
const NVME: &str = "pci0000:00/0000:00:1d.0/0000:3d:00.0/nvme/nvme0";
const VIRTIO: &str = "pci0000:00/0000:00:05.0/virtio2";
const MMC: &str = "platform/fe320000.mmc/mmc_host/mmc1/mmc1:0001";
const XEN: &str = "vbd-51712";
const VIRTUAL: &str = "virtual";

/// The host of the classification test: one of each transport.
fn host() -> FakeSys {
    let f = FakeSys::new();
    f.add(
        Dev::new("sda", ATA)
            .serial("HDD1")
            .model("ST4000NM")
            .rotational(),
        0,
    )
    .add(
        Dev::new("sdb", ATA2)
            .serial("SSD1")
            .wwn("naa.5000000000000001"),
        16,
    )
    .add(Dev::new("sdc", SAS).serial("SAS1").rotational(), 32)
    .add(Dev::new("sdd", SCSI).serial("SCSI1"), 48)
    .add(Dev::new("sde", USB).serial("USB1").rotational(), 64)
    .add(
        Dev::new("nvme0n1", NVME)
            .serial("NV1")
            .wwn("eui.0025385b71b0"),
        1,
    )
    .add(Dev::new("vda", VIRTIO).rotational(), 2)
    .add(Dev::new("mmcblk0", MMC).serial("0x1234"), 3)
    .add(Dev::new("xvda", XEN), 4);
    f
}

fn found<'a>(s: &'a Scan, name: &str) -> &'a Found {
    s.found
        .iter()
        .find(|f| f.kernel_name == name)
        .unwrap_or_else(|| panic!("{name} not found: {s:#?}"))
}

fn skipped<'a>(s: &'a Scan, name: &str) -> &'a str {
    &s.skipped
        .iter()
        .find(|k| k.name == name)
        .unwrap_or_else(|| panic!("{name} not skipped: {s:#?}"))
        .reason
}

#[test]
fn every_transport_is_classified() {
    let f = host();
    let s = scan(&f.paths, &Discovery::default());
    let want = [
        ("sda", Transport::Sata, Class::Hdd),
        ("sdb", Transport::Sata, Class::Ssd),
        ("sdc", Transport::Sas, Class::Hdd),
        ("sdd", Transport::Scsi, Class::Ssd),
        ("sde", Transport::Usb, Class::Hdd),
        ("nvme0n1", Transport::Nvme, Class::Nvme),
        // virtio reports rotational, yet its class is virtual (the host's disk).
        ("vda", Transport::Virtio, Class::Virtual),
        ("mmcblk0", Transport::Mmc, Class::Ssd),
        ("xvda", Transport::Xen, Class::Virtual),
    ];
    for (name, t, c) in want {
        let x = found(&s, name);
        assert_eq!((x.transport, x.class), (t, c), "{name}");
        assert_eq!(x.path, Path::new("/dev").join(name));
        assert_eq!(x.source, Source::Sysfs);
        assert!(!x.health_only());
    }
    assert_eq!(s.found.len(), want.len(), "{s:#?}");
    assert!(s.skipped.is_empty(), "{s:#?}");
    // Natural order: deterministic whatever readdir gives.
    let names: Vec<&str> = s.found.iter().map(|f| f.kernel_name.as_str()).collect();
    assert_eq!(
        names,
        ["mmcblk0", "nvme0n1", "sda", "sdb", "sdc", "sdd", "sde", "vda", "xvda"]
    );
    let a = found(&s, "sda");
    assert_eq!(a.identity.model.as_deref(), Some("ST4000NM"));
    assert_eq!(a.size_bytes, 2048 * 512);
    assert_eq!(a.label(), "HDD1");
    assert_eq!(found(&s, "vda").label(), "vda");
}

#[test]
fn what_is_not_a_drive_is_skipped_with_its_reason() {
    let f = FakeSys::new();
    f.add(
        Dev::new("sda", ATA).serial("A").wwn("naa.5000000000000001"),
        0,
    )
    .partition("sda", "sda1")
    // The same LUN on a second path (no multipath): one drive.
    .add(
        Dev::new("sdb", SAS)
            .serial("A2")
            .wwn("naa.5000000000000001"),
        16,
    )
    .add(Dev::new("sdc", ATA2).serial("Z").size(0), 32);
    for (i, name) in [
        "loop0",
        "ram0",
        "zram0",
        "dm-0",
        "md127",
        "nbd0",
        "sr0",
        "fd0",
        "mtdblock0",
        "zd0",
        "rbd0",
        "drbd1",
        "bcache0",
        "nullb0",
        "pmem0",
    ]
    .iter()
    .enumerate()
    {
        f.add(
            Dev::new(name, VIRTUAL).serial(format!("x{i}").leak()),
            100 + i as u32,
        );
    }
    f.add(Dev::new("nvme0c0n1", NVME).serial("NVH"), 200)
        .attr("nvme0c0n1", "hidden", "1\n");
    let s = scan(&f.paths, &Discovery::default());
    let names: Vec<&str> = s.found.iter().map(|f| f.kernel_name.as_str()).collect();
    assert_eq!(names, ["sda"], "{s:#?}");
    for (name, why) in [
        ("sda1", "partition"),
        ("sdb", "the same drive as sda (WWN naa.5000000000000001)"),
        ("sdc", "size 0"),
        ("loop0", "include_loop"),
        ("ram0", "RAM disk"),
        ("zram0", "zram"),
        ("dm-0", "device-mapper"),
        ("md127", "md RAID"),
        ("nbd0", "nbd"),
        ("sr0", "optical"),
        ("fd0", "floppy"),
        ("mtdblock0", "mtd"),
        ("zd0", "ZFS"),
        ("rbd0", "Ceph"),
        ("drbd1", "DRBD"),
        ("bcache0", "bcache"),
        ("nullb0", "null block"),
        ("pmem0", "persistent memory"),
        ("nvme0c0n1", "hidden NVMe path"),
    ] {
        let r = skipped(&s, name);
        assert!(r.contains(why), "{name}: {r}");
    }
    assert_eq!(s.skipped.len(), 19, "{s:#?}");
}

#[test]
fn loop_devices_are_kept_when_asked() {
    let f = FakeSys::new();
    f.add(Dev::new("loop3", VIRTUAL), 3)
        .attr("loop3", "loop/backing_file", "/dev/shm/x/img\n")
        // A loop device with nothing attached.
        .add(Dev::new("loop4", VIRTUAL).size(0), 4);
    let d = Discovery {
        include_loop: true,
        ..Discovery::default()
    };
    let s = scan(&f.paths, &d);
    let l = found(&s, "loop3");
    assert_eq!((l.transport, l.class), (Transport::Loop, Class::Virtual));
    assert_eq!(l.identity.serial.as_deref(), Some("loop:/dev/shm/x/img"));
    assert_eq!(l.label(), "loop:_dev_shm_x_img");
    assert!(skipped(&s, "loop4").contains("size 0"));
}

fn re(s: &str) -> Option<regex::Regex> {
    Some(regex::Regex::new(s).unwrap())
}

#[test]
fn include_and_exclude_filters() {
    let f = host();
    let mut d = Discovery::default();
    d.include.name = re("^(sd|nvme)");
    d.exclude.model = re("^ST4000");
    d.exclude.transport = re("^usb$");
    let s = scan(&f.paths, &d);
    let names: Vec<&str> = s.found.iter().map(|f| f.kernel_name.as_str()).collect();
    assert_eq!(names, ["nvme0n1", "sdb", "sdc", "sdd"]);
    assert!(skipped(&s, "vda").contains("[discovery.include] name"));
    assert!(skipped(&s, "sda").contains("[discovery.exclude] model"));
    assert!(skipped(&s, "sde").contains("[discovery.exclude] transport"));

    // Include on a field a drive does not have: not matched.
    let mut d = Discovery::default();
    d.include.serial = re("^(SSD|NV)");
    let s = scan(&f.paths, &d);
    let names: Vec<&str> = s.found.iter().map(|f| f.kernel_name.as_str()).collect();
    assert_eq!(names, ["nvme0n1", "sdb"]);
    assert!(skipped(&s, "xvda").contains("serial \"\" does not match"));
}

#[test]
fn max_drives_keeps_the_first_in_order() {
    let f = host();
    let mut s = scan(&f.paths, &Discovery::default());
    limit(&mut s, 3);
    let names: Vec<&str> = s.found.iter().map(|f| f.kernel_name.as_str()).collect();
    assert_eq!(names, ["mmcblk0", "nvme0n1", "sda"]);
    assert_eq!(s.skipped.len(), 6);
    assert!(skipped(&s, "xvda").contains("max_drives (3)"));
}

/// Issue 18: `max_drives` counted in kernel-name order, so a disk plugged in under a
/// lower name pushed the last watched drive out (its series and labels moved). The
/// drives already watched keep their places; the new disk is the one over the limit.
#[test]
fn max_drives_keeps_the_drives_already_watched() {
    let f = host();
    let mut d = Discovery {
        max_drives: 2,
        raid: false,
        ..Discovery::default()
    };
    // mmcblk0, first in kernel-name order, is not there yet (left out).
    d.exclude.name = re("^mmcblk0$");
    let mut disc = crate::daemon::discover::Discoverer::new(f.paths.clone());
    let names = |s: &Scan| {
        s.found
            .iter()
            .map(|f| f.kernel_name.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(names(&disc.scan(&d)), ["nvme0n1", "sda"]);
    // It comes: the two watched stay.
    d.exclude.name = None;
    let next = disc.scan(&d);
    assert_eq!(names(&next), ["nvme0n1", "sda"]);
    assert!(skipped(&next, "mmcblk0").contains("max_drives (2)"));
    // A fresh start (nothing watched yet) counts in kernel-name order, as before.
    let mut fresh = crate::daemon::discover::Discoverer::new(f.paths.clone());
    assert_eq!(names(&fresh.scan(&d)), ["mmcblk0", "nvme0n1"]);
}

/// Issue 18: a gone drive's reason said "dropped in N s", computed at the scan and
/// carried unchanged until the next swap: the countdown stood still on every surface.
/// It says when instead, the same at every scan.
#[test]
fn a_gone_drive_says_when_it_is_dropped_not_a_frozen_countdown() {
    let f = host();
    let d = Discovery {
        raid: false,
        ..Discovery::default()
    };
    let mut disc = crate::daemon::discover::Discoverer::new(f.paths.clone());
    disc.scan(&d);
    fs::remove_file(f.paths.sys.join("class/block/sdb")).unwrap();
    let first = disc.scan(&d);
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let later = disc.scan(&d);
    assert_eq!(first.gone.len(), 1, "{first:#?}");
    let why = &first.gone[0].1;
    assert!(
        why.contains("is gone; its series are dropped at 20"),
        "{why}"
    );
    assert!(why.ends_with(" UTC"), "{why}");
    assert_eq!(first.gone, later.gone, "the same a second later");
}

#[test]
fn natural_order() {
    let mut v = vec!["sdaa", "nvme10n1", "sdb", "nvme2n1", "sda"];
    v.sort_by_key(|n| natural_key(n));
    assert_eq!(v, ["nvme2n1", "nvme10n1", "sda", "sdaa", "sdb"]);
}

fn fixture(name: &str) -> String {
    fs::read_to_string(
        Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
            .join("tests/fixtures/smartctl")
            .join(name),
    )
    .unwrap()
}

#[test]
fn raid_drives_come_from_scan_open() {
    let s = raid_drives(&fixture("scan-open-raid.json"), &Discovery::default()).unwrap();
    let got: Vec<(&str, &str, Option<&str>)> = s
        .found
        .iter()
        .map(|f| {
            (
                f.kernel_name.as_str(),
                f.path.to_str().unwrap(),
                f.smartctl_type.as_deref(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("bus/0:sat+megaraid,0", "/dev/bus/0", Some("sat+megaraid,0")),
            ("bus/0:megaraid,1", "/dev/bus/0", Some("megaraid,1")),
            ("sg1:cciss,0", "/dev/sg1", Some("cciss,0")),
        ]
    );
    for f in &s.found {
        assert!(f.health_only());
        assert_eq!((f.transport, f.source), (Transport::Raid, Source::Smartctl));
    }
    assert_eq!(s.found[1].label(), "bus_0:megaraid_1");
    let mut d = Discovery::default();
    d.exclude.name = re("cciss");
    let s = raid_drives(&fixture("scan-open-raid.json"), &d).unwrap();
    assert_eq!(s.found.len(), 2);
    assert!(skipped(&s, "sg1:cciss,0").contains("exclude"));
    assert!(raid_drives("not json", &d).is_err());
}

#[test]
fn labels_stay_in_the_label_set() {
    assert_eq!(label_of("S3Z9NB0K123456 X/Y"), "S3Z9NB0K123456_X_Y");
    assert_eq!(label_of(&"x".repeat(100)).len(), 64);
    assert_eq!(label_of(""), "_");
}

/// The config `text` says, as root reads it: the fake tree's device nodes do not exist,
/// so a user's health-only rule (which keeps only the drives it can open) would find none.
fn config(text: &str) -> Config {
    let mut c = Config::parse(text, "t.toml").unwrap();
    c.discovery.health_only = false;
    c
}

/// The config `text` says, as this user reads it.
fn config_as_this_user(text: &str) -> Config {
    Config::parse(text, "t.toml").unwrap()
}

#[test]
fn listed_drives_override_discovered_ones_and_the_rest_get_class_canaries() {
    let f = host();
    let base = config(
        "[discovery]\n\
         [discovery.canary.hdd]\nrate_iops = 0.5\nwindow = \"20m\"\n\
         [[drive]]\nname = \"boot\"\nserial = \"SSD1\"\nrated_dwpd = 1\nwarranty_years = 5\n\
         [[drive]]\nname = \"elsewhere\"\nwwn = \"0x5000000000000099\"\n\
         [[probe]]\nname = \"fast\"\ndrives = [\"boot\"]\n[probe.workload]\nrate_iops = 100\n",
    );
    let s = scan(&f.paths, &base.discovery);
    let (c, w) = merge(&base, &s);
    // The listed drive keeps its name, rating and probe; the discovered sdb is not added.
    let boot = c.drives.iter().find(|d| d.name == "boot").unwrap();
    assert!(boot.rating.dwpd.is_some());
    assert_eq!(c.discovered["boot"].kernel_name, "sdb");
    assert!(!c.drives.iter().any(|d| d.name == "SSD1"));
    assert!(!c
        .probes
        .iter()
        .any(|p| p.name == CANARY && p.drives.contains(&"boot".to_string())));
    // A listed drive discovery did not find stays, without discovery's fields.
    assert!(c.drives.iter().any(|d| d.name == "elsewhere"));
    assert!(!c.discovered.contains_key("elsewhere"));
    // Every discovered drive: read-only, its class's canary.
    for d in c
        .drives
        .iter()
        .filter(|d| !["boot", "elsewhere"].contains(&d.name.as_str()))
    {
        assert!(
            !d.destructive && d.file_target.is_none() && !d.writable(),
            "{d:?}"
        );
        let class = c.discovered[&d.name].class;
        let p: Vec<&Probe> = c
            .probes
            .iter()
            .filter(|p| p.drives.contains(&d.name))
            .collect();
        assert_eq!(p.len(), 1, "{}", d.name);
        assert_eq!(p[0].name, CANARY);
        assert!(!p[0].writes && !p[0].job.writes());
        let want = base.discovery.canary(class);
        assert_eq!(p[0].job.rate().map(|r| r.iops), Some(want.rate_iops));
        assert_eq!(p[0].window, want.window);
    }
    assert_eq!(base.discovery.canary(Class::Hdd).rate_iops, 0.5);
    assert_eq!(
        base.discovery.canary(Class::Nvme),
        crate::config::DEFAULT_CLASS_CANARY[2]
    );
    // Drives of one class share one probe.
    let hdd = c
        .probes
        .iter()
        .find(|p| p.name == CANARY && p.drives.contains(&"HDD1".to_string()))
        .unwrap();
    assert_eq!(hdd.drives, ["HDD1", "SAS1", "USB1"]);
    let e = w.watched.iter().find(|x| x.name == "boot").unwrap();
    assert_eq!(e.source, "listed+sysfs");
    let e = w.watched.iter().find(|x| x.name == "NV1").unwrap();
    assert_eq!(
        (e.source.as_str(), e.canary_rate_iops),
        ("sysfs", Some(50.0))
    );
    assert_eq!(w.watched.len(), c.drives.len());
}

#[test]
fn discovery_off_and_health_only() {
    let f = host();
    let base = config("[discovery]\nenabled = false\n");
    let (c, w) = merge(&base, &scan(&f.paths, &Discovery::default()));
    assert!(c.drives.is_empty() && w.watched.is_empty() && w.skipped.is_empty());
    // No [discovery] section: on, every key at its default (an empty config watches
    // every drive); health only when not root.
    let empty = config_as_this_user("").discovery;
    assert!(empty.enabled && config("[discovery]\n").discovery.enabled);
    assert_eq!(empty.rescan_interval, Discovery::default().rescan_interval);
    assert_eq!(empty.health_only, !rustix::process::geteuid().is_root());

    let mut base = config("[discovery]\n");
    base.discovery.health_only = true;
    let (c, w) = merge(&base, &scan(&f.paths, &base.discovery));
    assert_eq!(c.drives.len(), 9);
    assert!(c.probes.is_empty());
    assert!(w.watched.iter().all(|x| x.health_only));

    // RAID drives are health-only, with their -d type.
    let base = config("[discovery]\n");
    let r = raid_drives(&fixture("scan-open-raid.json"), &base.discovery).unwrap();
    let (c, _) = merge(&base, &r);
    assert_eq!(c.drives.len(), 3);
    assert!(c.probes.is_empty());
    assert_eq!(c.drives[1].smartctl_type.as_deref(), Some("megaraid,1"));
}

#[test]
fn a_label_taken_falls_back_to_the_kernel_name() {
    let f = host();
    let base = config(
        "[discovery]\n[[drive]]\nname = \"HDD1\"\nfile_target = { path = \"/dev/shm/no-such-dir/x\", size = \"1MiB\" }\n",
    );
    let (c, _) = merge(&base, &scan(&f.paths, &base.discovery));
    assert_eq!(c.discovered["sda"].kernel_name, "sda");
}

#[test]
fn smartctl_scan_open_runs_only_with_a_raid_controller() {
    let f = host();
    let host_dir = |n: &str, driver: &str| {
        write(
            &f.paths
                .sys
                .join("class/scsi_host")
                .join(n)
                .join("proc_name"),
            &format!("{driver}\n"),
        )
    };
    host_dir("host0", "ahci");
    host_dir("host1", "virtio_scsi");
    assert!(raid_controllers(&f.paths).is_empty());
    // No controller: nothing looked for (smartctl is not run), nothing skipped.
    assert_eq!(
        raid_host(&f.paths, &Discovery::default()).unwrap(),
        Scan::default()
    );
    host_dir("host2", "megaraid_sas");
    host_dir("host3", "hpsa");
    assert_eq!(raid_controllers(&f.paths), ["hpsa", "megaraid_sas"]);

    // What a failed RAID scan leaves: one skipped line saying why.
    let mut s = scan(&f.paths, &Discovery::default());
    complete(
        &mut s,
        Some(&Err(RaidScanError::ScanOpen(
            crate::health::smartctl::SmartctlError::NotInstalled.into(),
        ))),
        &Discovery::default(),
    );
    assert!(skipped(&s, "smartctl --scan-open").contains("not installed"));

    // An answer that cannot be read: smartctl's parse error, kept whole.
    let e = raid_of(&Ok(Some("not json".into())), &Discovery::default()).unwrap_err();
    assert!(
        matches!(&e, RaidScanError::Answer(s)
            if matches!(**s, crate::health::smartctl::SmartctlError::NotJson { .. })),
        "{e:?}"
    );
    assert!(
        e.to_string()
            .starts_with("smartctl output is not valid JSON"),
        "{e}"
    );
}

/// A listed drive whose identity is a serial is not the serial-less disk that now sits
/// at its path: its disk was pulled and another (a virtio or Xen disk, a USB stick that
/// reports none) took the kernel name. That disk is watched on its own, and the listed
/// drive does not take its class, kernel name or canary class.
#[test]
fn a_listed_serial_is_not_a_serial_less_disk_at_its_path() {
    let f = host();
    let base = config(
        "[discovery]\n\
         [[drive]]\nname = \"data\"\nserial = \"PULLED-DISK\"\npath = \"/dev/vda\"\n",
    );
    let s = scan(&f.paths, &base.discovery);
    assert!(found(&s, "vda").identity.serial.is_none());
    let (c, w) = merge(&base, &s);
    assert!(
        !c.discovered.contains_key("data"),
        "the listed drive took the serial-less vda: {:?}",
        c.discovered.get("data")
    );
    assert_eq!(c.discovered["vda"].kernel_name, "vda");
    assert!(w.watched.iter().any(|x| x.name == "vda"));
    assert_eq!(
        w.watched.iter().find(|x| x.name == "data").unwrap().source,
        "listed"
    );
}

/// Two different disks with one serial and no WWN (USB bridges that all report
/// "0123456789ABCDEF") are not a second path to one drive: both are watched. A second
/// path has the same size and model too.
#[test]
fn one_serial_on_two_different_disks_is_not_a_second_path() {
    let f = FakeSys::new();
    f.add(
        Dev::new("sda", USB)
            .serial("0123456789ABCDEF")
            .model("Bridge A")
            .size(4096),
        0,
    )
    .add(
        Dev::new(
            "sdb",
            "pci0000:00/0000:00:14.0/usb2/2-2/2-2:1.0/host5/target5:0:0/5:0:0:0",
        )
        .serial("0123456789ABCDEF")
        .model("Bridge A")
        .size(8192),
        16,
    );
    let s = scan(&f.paths, &Discovery::default());
    assert_eq!(s.found.len(), 2, "{:#?}", s.skipped);
    // Same serial, size and model, no WWN: still taken as a second path.
    let f = FakeSys::new();
    f.add(Dev::new("sda", SCSI).serial("LUN1").model("M"), 0)
        .add(Dev::new("sdb", SAS).serial("LUN1").model("M"), 16);
    let s = scan(&f.paths, &Discovery::default());
    assert!(skipped(&s, "sdb").contains("second path"));
}

/// Two namespaces of one NVMe controller share its serial (sysfs `device/serial` is the
/// controller's) but not their WWN. Removing one keeps it, down, until `drop_after`: it
/// is not taken for the other one, still present.
#[test]
fn a_removed_namespace_stays_until_drop_after() {
    let f = FakeSys::new();
    f.add(Dev::new("nvme0n1", NVME).serial("CTRL1").wwn("eui.0001"), 1)
        .add(Dev::new("nvme0n2", NVME).serial("CTRL1").wwn("eui.0002"), 2);
    let d = Discovery {
        drop_after: std::time::Duration::from_secs(3600),
        ..Discovery::default()
    };
    let mut disc = crate::daemon::discover::Discoverer::new(f.paths.clone());
    let s = disc.scan(&d);
    assert_eq!(s.found.len(), 2, "{:#?}", s.skipped);
    fs::remove_file(f.paths.sys.join("class/block/nvme0n2")).unwrap();
    let s = disc.scan(&d);
    assert_eq!(s.found.len(), 1);
    assert_eq!(
        s.gone
            .iter()
            .map(|(g, _)| g.kernel_name.as_str())
            .collect::<Vec<_>>(),
        ["nvme0n2"],
        "the removed namespace was dropped at once"
    );
    // Merged: the present namespace keeps its name, the gone one is down under its own.
    let (c, _) = merge(&config("[discovery]\n"), &s);
    assert_eq!(c.gone.len(), 1);
    assert!(c.drives.iter().any(|x| x.name == "CTRL1"));
}

/// A reload merges the last scan before the discovery thread rescans with the new
/// `[discovery]`: the new filters apply to it at once, so a disk the reload excludes
/// (say, to let it sleep) gets no canary from the old filters meanwhile.
#[test]
fn a_reload_s_filters_apply_to_the_last_scan() {
    let f = host();
    let old = config("[discovery]\n");
    let s = scan(&f.paths, &old.discovery);
    assert!(s.found.iter().any(|x| x.kernel_name == "sda"));
    let new = config("[discovery]\nmax_drives = 5\n[discovery.exclude]\nname = '^sda$'\n");
    let r = refilter(&s, &new.discovery);
    assert!(!r.found.iter().any(|x| x.kernel_name == "sda"));
    assert!(skipped(&r, "sda").contains("[discovery.exclude]"));
    assert_eq!(r.found.len(), 5);
    let (c, _) = merge(&new, &r);
    assert!(!c.discovered.values().any(|d| d.kernel_name == "sda"));
}

/// A drive a reload's filters leave out is no longer watched; it is not a removed
/// drive, kept down (`driveprobe_drive_up 0`, alerting) for `drop_after`.
#[test]
fn a_drive_excluded_by_a_reload_is_not_gone() {
    let f = host();
    let mut disc = crate::daemon::discover::Discoverer::new(f.paths.clone());
    let s = disc.scan(&config("[discovery]\n").discovery);
    assert!(s.found.iter().any(|x| x.kernel_name == "sda"));
    let d = config("[discovery]\n[discovery.exclude]\nname = '^sda$'\n").discovery;
    let s = disc.scan(&d);
    assert!(skipped(&s, "sda").contains("[discovery.exclude]"));
    assert!(s.gone.is_empty(), "{:?}", s.gone);
    // Skipped for what it is now (size 0: a detached loop device, a pulled medium): gone.
    f.attr("sdb", "size", "0\n");
    let s = disc.scan(&d);
    assert_eq!(
        s.gone
            .iter()
            .map(|(g, _)| g.kernel_name.as_str())
            .collect::<Vec<_>>(),
        ["sdb"]
    );
}

/// A VPD page B1h as the kernel shows it: header, then the medium rotation rate.
fn vpd_b1(rate: u16) -> Vec<u8> {
    let mut p = vec![0u8; 64];
    p[1] = 0xB1;
    p[3] = 60;
    p[4..6].copy_from_slice(&rate.to_be_bytes());
    p
}

#[test]
fn the_vpd_rotation_rate_reads_as_smartctl_reads_it() {
    assert_eq!(rotation_of_vpd_b1(&vpd_b1(7200)), Some(Rotation::Rpm(7200)));
    assert_eq!(rotation_of_vpd_b1(&vpd_b1(1)), Some(Rotation::NonRotating));
    // 0: not reported; 2-400h and FFFFh: reserved.
    for r in [0, 2, 0x0400, 0xFFFF] {
        assert_eq!(rotation_of_vpd_b1(&vpd_b1(r)), None, "{r:#x}");
    }
    let mut other = vpd_b1(7200);
    other[1] = 0xB0;
    assert_eq!(rotation_of_vpd_b1(&other), None, "another page");
    assert_eq!(rotation_of_vpd_b1(&vpd_b1(7200)[..5]), None, "short");
    assert_eq!(rotation_of_vpd_b1(&[]), None);
}

/// The drive's own rotation rate wins over the queue's flag, which a udev rule, a USB
/// bridge or a RAID volume can set either way; without one the flag decides.
#[test]
fn a_drive_s_rotation_rate_decides_its_class() {
    let f = FakeSys::new();
    f.add(Dev::new("sda", ATA).serial("SPINS"), 0)
        .add(Dev::new("sdb", ATA2).serial("FLASH").rotational(), 16)
        .add(Dev::new("sdc", SAS).serial("UNSAID").rotational(), 32)
        .add(Dev::new("sdd", SCSI).serial("ODD"), 48)
        .add(Dev::new("vda", VIRTIO), 2);
    let vpd = |name: &str, page: Vec<u8>| {
        let p = f
            .paths
            .sys
            .join("class/block")
            .join(name)
            .join("device/vpd_pgb1");
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, page).unwrap();
    };
    vpd("sda", vpd_b1(5400));
    vpd("sdb", vpd_b1(1));
    vpd("sdc", vpd_b1(0));
    let mut odd = vpd_b1(7200);
    odd[1] = 0x80;
    vpd("sdd", odd);
    vpd("vda", vpd_b1(7200));
    let s = scan(&f.paths, &Discovery::default());
    for (name, class) in [
        ("sda", Class::Hdd),
        ("sdb", Class::Ssd),
        ("sdc", Class::Hdd),
        ("sdd", Class::Ssd),
        // A virtual disk's rate is the emulator's say, not the host's medium.
        ("vda", Class::Virtual),
    ] {
        assert_eq!(found(&s, name).class, class, "{name}");
    }
}

#[test]
fn a_drive_string_from_sysfs_is_one_line_and_bounded() {
    use crate::fmt::MAX_DRIVE_TEXT_BYTES;
    let f = FakeSys::new();
    let huge = "S".repeat(1 << 20);
    let evil = "EVIL\nverdict: OK\x1b[2J\x07\0";
    f.add(Dev::new("sda", ATA).serial(&huge).model(evil).wwn(evil), 0);
    let s = scan(&f.paths, &Discovery::default());
    let a = found(&s, "sda");
    assert_eq!(a.identity.model.as_deref(), Some("EVIL verdict: OK [2J"));
    assert_eq!(a.identity.wwn.as_deref(), Some("EVIL verdict: OK [2J"));
    let serial = a.identity.serial.as_deref().unwrap();
    assert!(serial.len() <= MAX_DRIVE_TEXT_BYTES, "{}", serial.len());
    assert!(
        serial.starts_with("SSSS") && serial.ends_with('…'),
        "{serial}"
    );
    // The drive label (64 of the label set) is made from the bounded serial.
    assert!(a.label().len() <= 64);
}
