//! `device::drives_of_file` on real filesystems: a file on an ext4 loop device belongs to
//! that loop device, a file on a partition of a loop device belongs to the whole loop disk
//! (through the partition), and a file in /dev/shm (tmpfs) has no drive.
//!
//! Needs root (losetup, mount) and util-linux / e2fsprogs (`losetup`, `sfdisk`, `partx`,
//! `mkfs.ext4`). Loop devices sit over files in temp dirs; the machine's disks are never
//! touched.

use crate::common;

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::{loop_serial, need_root, run, sync, Loop, Mount, MIB};
use driveprobe::device::{self, DeviceError};

/// A sparse image file of `size` bytes.
fn image(dir: &Path, name: &str, size: u64) -> PathBuf {
    let p = dir.join(name);
    fs::File::create(&p).unwrap().set_len(size).unwrap();
    p
}

fn mkfs_ext4(dev: &Path) {
    run(
        "mkfs.ext4",
        &[
            "-q",
            "-E",
            "lazy_itable_init=0,lazy_journal_init=0",
            dev.to_str().unwrap(),
        ],
    );
}

/// Writes an MBR with one Linux partition from 1 MiB to the end of the image file.
fn partition_image(file: &Path) {
    let mut child = Command::new("sfdisk")
        .args(["--quiet", "--no-reread", "--no-tell-kernel"])
        .arg(file)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("cannot run sfdisk");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"label: dos\nstart=2048, type=83\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    common::assert_ok(&out, "sfdisk");
}

fn kernel_name(dev: &Path) -> String {
    let canonical = fs::canonicalize(dev).unwrap();
    canonical.file_name().unwrap().to_str().unwrap().to_string()
}

fn write_file(path: &Path) {
    let mut f = fs::File::create(path).unwrap();
    f.write_all(b"a file target\n").unwrap();
    f.sync_all().unwrap();
}

#[test]
fn file_on_ext4_loop_device_belongs_to_the_loop_device() {
    need_root();
    let dir = tempfile::tempdir().unwrap();
    let backing = image(dir.path(), "disk.img", 32 * MIB);
    let lo = Loop::attach(&backing, &[]);
    mkfs_ext4(lo.path());
    let m = Mount::new(lo.path(), &dir.path().join("mnt"));
    let file = m.dir().join("target.dat");
    write_file(&file);
    sync();

    let name = kernel_name(lo.path());
    let drives = device::drives_of_file(&file).unwrap();
    assert_eq!(drives.filesystem_device, name);
    assert_eq!(drives.via, std::slice::from_ref(&name));
    assert_eq!(drives.disks.len(), 1, "{drives:?}");
    let disk = &drives.disks[0];
    assert_eq!(disk.name, name);
    assert!(!disk.is_partition);
    assert_eq!(disk.size_bytes, 32 * MIB);
    assert_eq!(disk.identity.serial, Some(loop_serial(&backing)));
    // The same as inspecting the device node directly.
    let inspected = device::inspect(lo.path()).unwrap();
    assert_eq!(disk.path, inspected.path);
    assert_eq!((disk.major, disk.minor), (inspected.major, inspected.minor));
    assert_eq!(disk.identity, inspected.identity);
    assert_eq!(disk.logical_block_size, inspected.logical_block_size);

    // A directory on the filesystem resolves the same way.
    let d = device::drives_of_file(m.dir()).unwrap();
    assert_eq!(d.filesystem_device, name);
    drop(m);
}

#[test]
fn file_on_partition_belongs_to_the_whole_loop_disk() {
    need_root();
    let dir = tempfile::tempdir().unwrap();
    let backing = image(dir.path(), "disk.img", 64 * MIB);
    partition_image(&backing);
    let lo = Loop::attach(&backing, &["--partscan"]);
    let p1 = lo.partition(1);
    mkfs_ext4(&p1);
    let m = Mount::new(&p1, &dir.path().join("mnt"));
    let file = m.dir().join("target.dat");
    write_file(&file);
    sync();

    let disk_name = kernel_name(lo.path());
    let part_name = kernel_name(&p1);
    let drives = device::drives_of_file(&file).unwrap();
    assert_eq!(drives.filesystem_device, part_name);
    assert_eq!(drives.via, [part_name.clone(), disk_name.clone()]);
    assert_eq!(drives.disks.len(), 1, "{drives:?}");
    let disk = &drives.disks[0];
    assert_eq!(disk.name, disk_name);
    assert!(!disk.is_partition);
    assert_eq!(disk.partitions, [part_name]);
    assert_eq!(disk.size_bytes, 64 * MIB);
    assert_eq!(disk.identity.serial, Some(loop_serial(&backing)));
    assert_eq!(disk.path, fs::canonicalize(lo.path()).unwrap());
    drop(m);
}

#[test]
fn file_in_dev_shm_has_no_drive() {
    need_root();
    let shm = Path::new("/dev/shm");
    assert!(shm.is_dir(), "this test needs /dev/shm (tmpfs)");
    let dir = tempfile::tempdir_in(shm).unwrap();
    let file = dir.path().join("target.dat");
    write_file(&file);

    let err = device::drives_of_file(&file).unwrap_err();
    match &err {
        DeviceError::NotOnBlockDevice {
            path,
            fstype,
            major,
            ..
        } => {
            assert_eq!(path, &file);
            assert_eq!(fstype.as_deref(), Some("tmpfs"));
            assert_eq!(*major, 0, "tmpfs has an anonymous device number");
        }
        e => panic!("wrong error for a file in /dev/shm: {e:?}"),
    }
    let msg = err.to_string();
    assert!(msg.contains("(tmpfs, device 0:"), "{msg}");
    assert!(msg.contains("is not on a block device"), "{msg}");
    assert!(msg.contains("serial or WWN"), "{msg}");
}
