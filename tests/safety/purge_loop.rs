//! Purge and fill (`protocol::purge`) on loop devices over files in temp dirs, and on file
//! targets; the write gate refusing a loop device with a mounted filesystem.
//!
//! Needs root (losetup, mount) and util-linux, e2fsprogs. Every test makes its own temp
//! dir and loop device (`losetup --find`); guards detach and unmount in `Drop`. The
//! machine's own disks are never touched.

use crate::common;

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use common::{loop_serial, need_root, random_file, run, sha256, sync, Loop, Mount, MIB};
use driveprobe::device;
use driveprobe::engine::RunControl;
use driveprobe::protocol::purge::{self, PurgeError, PurgeMethod};
use driveprobe::safety::{self, SafetyError, WriteRequest};
use driveprobe::target::{Region, Target};

fn destructive(backing: &Path) -> WriteRequest {
    WriteRequest {
        allow_destructive: true,
        expect_serial: Some(loop_serial(backing)),
        expect_wwn: None,
    }
}

/// The loop device opened read-write (O_DIRECT, O_EXCL) with a permit from the gate.
fn open_rw(lo: &Loop, backing: &Path) -> Target {
    let info = device::inspect(lo.path()).unwrap();
    let permit = safety::authorize_block_writes(&info, &destructive(backing))
        .unwrap_or_else(|e| panic!("the gate refused {}: {e}", lo.s()));
    Target::open(lo.path(), true, Some(&permit)).unwrap()
}

fn whole(t: &Target) -> Region {
    Region {
        start: 0,
        len: t.size(),
    }
}

/// Offsets of the 4 KiB blocks of `data` that are not all zeros.
fn nonzero_blocks(data: &[u8]) -> Vec<usize> {
    data.chunks(4096)
        .enumerate()
        .filter(|(_, c)| c.iter().any(|&b| b != 0))
        .map(|(i, _)| i * 4096)
        .collect()
}

#[test]
fn purge_then_fill_a_loop_device() {
    need_root();
    let dir = tempfile::tempdir().unwrap();
    let backing = dir.path().join("disk.img");
    // Not a whole number of 128 KiB blocks: the fill writes the tail separately.
    let size = 32 * MIB + 64 * 1024;
    random_file(&backing, size, 7);
    let lo = Loop::attach(&backing, &[]);
    let t = open_rw(&lo, &backing);
    assert_eq!(t.size(), size);

    // A block device is purged whole.
    let e = purge::purge(&t, Region { start: 0, len: MIB }).unwrap_err();
    assert!(matches!(e, PurgeError::NotWholeDevice { .. }), "{e}");
    assert!(e.to_string().contains("whole"), "{e}");
    assert_eq!(
        nonzero_blocks(&fs::read(lo.path()).unwrap()).len() as u64,
        size / 4096,
        "a refused purge changed the device"
    );

    let out = purge::purge(&t, whole(&t)).unwrap();
    eprintln!(
        "loop purge: {} in {:.3} s; notes: {:?}",
        out.method, out.seconds, out.notes
    );
    assert!(
        matches!(
            out.method,
            PurgeMethod::BlkDiscard | PurgeMethod::BlkSecDiscard
        ),
        "{out:?}"
    );
    if out.method == PurgeMethod::BlkDiscard {
        assert!(
            out.notes.iter().any(|n| n.starts_with("BLKSECDISCARD: ")),
            "why BLKSECDISCARD was not used should be noted: {out:?}"
        );
    }
    assert_eq!(out.bytes, size);
    let data = fs::read(lo.path()).unwrap();
    assert_eq!(data.len() as u64, size);
    let left = nonzero_blocks(&data);
    assert!(left.is_empty(), "non-zero after purge at {left:?}");
    // The loop driver discards by punching holes in the backing file.
    let allocated = fs::metadata(&backing).unwrap().blocks() * 512;
    assert!(
        allocated < size / 4,
        "the backing file still has {allocated} of {size} bytes allocated"
    );

    let out = purge::fill(&t, &RunControl::new()).unwrap();
    eprintln!("loop fill: {} bytes in {:.3} s", out.bytes, out.seconds);
    assert_eq!(out.bytes, size);
    let data = fs::read(lo.path()).unwrap();
    for (i, block) in data.chunks(128 << 10).enumerate() {
        assert!(
            block.chunks(4096).all(|c| c.iter().any(|&b| b != 0)),
            "128 KiB block {i} has a zero 4 KiB block after the fill"
        );
    }
}

#[test]
fn purge_overwrites_when_the_device_cannot_discard() {
    need_root();
    let dir = tempfile::tempdir().unwrap();
    // ramfs has no fallocate, so a loop device over a file on it cannot discard.
    let m = Mount::virtual_fs("ramfs", None, &dir.path().join("ramfs"));
    let backing = m.dir().join("disk.img");
    let size = 8 * MIB;
    random_file(&backing, size, 9);
    let lo = Loop::attach(&backing, &[]);
    let t = open_rw(&lo, &backing);
    let out = purge::purge(&t, whole(&t)).unwrap();
    eprintln!(
        "loop over ramfs purge: {}; notes: {:?}",
        out.method, out.notes
    );
    assert_eq!(out.method, PurgeMethod::Overwrite, "{out:?}");
    for what in ["BLKSECDISCARD: ", "BLKDISCARD: "] {
        assert!(
            out.notes.iter().any(|n| n.starts_with(what)),
            "{what} not noted: {out:?}"
        );
    }
    let left = nonzero_blocks(&fs::read(lo.path()).unwrap());
    assert!(left.is_empty(), "non-zero after the overwrite at {left:?}");
    drop(t);
    drop(lo);
    assert!(nonzero_blocks(&fs::read(&backing).unwrap()).is_empty());
}

#[test]
fn purge_of_a_file_target_punches_and_reallocates() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("target.bin");
    let neighbour = dir.path().join("neighbour.bin");
    let size = 8 * MIB;
    random_file(&file, size, 1);
    random_file(&neighbour, 4 * MIB, 2);
    let before = sha256(&neighbour);

    // Not driveprobe's file: allowed, as `bench --allow-destructive` would.
    let permit = safety::authorize_file_writes(&file, true).unwrap();
    let t = Target::open(&file, true, Some(&permit)).unwrap();
    let out = purge::purge(&t, whole(&t)).unwrap();
    eprintln!("file purge: {}; notes: {:?}", out.method, out.notes);
    assert_eq!(
        out.method,
        PurgeMethod::PunchHole,
        "the temp dir's filesystem should punch holes: {out:?}"
    );
    assert!(out.notes.is_empty(), "{out:?}");
    drop(t);

    let meta = fs::metadata(&file).unwrap();
    assert_eq!(meta.len(), size, "the file size changed");
    // Reallocated: the blocks are there again (unwritten extents), not a hole.
    assert!(
        meta.blocks() * 512 >= size,
        "only {} of {size} bytes allocated after the purge",
        meta.blocks() * 512
    );
    let left = nonzero_blocks(&fs::read(&file).unwrap());
    assert!(left.is_empty(), "non-zero after purge at {left:?}");
    assert_eq!(sha256(&neighbour), before, "the neighbour file changed");
}

#[test]
fn mounted_loop_device_gets_no_permit_and_read_only_purge_fails() {
    need_root();
    let dir = tempfile::tempdir().unwrap();
    let backing = dir.path().join("disk.img");
    fs::File::create(&backing)
        .unwrap()
        .set_len(64 * MIB)
        .unwrap();
    let lo = Loop::attach(&backing, &[]);
    // No lazy init: a background thread would otherwise write to the device while mounted.
    run(
        "mkfs.ext4",
        &["-q", "-E", "lazy_itable_init=0,lazy_journal_init=0", lo.s()],
    );
    let m = Mount::new(lo.path(), &dir.path().join("mnt"));
    random_file(&m.dir().join("data"), MIB, 3);
    sync();
    let before = sha256(&backing);

    let info = device::inspect(lo.path()).unwrap();
    let err = safety::authorize_block_writes(&info, &destructive(&backing))
        .expect_err("the gate must refuse a mounted device");
    eprintln!("refused as expected: {err}");
    assert!(
        matches!(
            err,
            SafetyError::InUse { .. } | SafetyError::KernelBusy { .. }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("mounted"), "{err}");

    // Without a permit the target is read-only, and purge and fill refuse it.
    let t = Target::open(lo.path(), true, None).unwrap();
    assert!(!t.writable());
    let e = purge::purge(&t, whole(&t)).unwrap_err();
    assert!(matches!(e, PurgeError::ReadOnly(..)), "{e}");
    assert!(e.to_string().contains("write permission"), "{e}");
    let e = purge::fill(&t, &RunControl::new()).unwrap_err();
    assert!(matches!(e, PurgeError::ReadOnly(..)), "{e}");
    drop(t);

    sync();
    assert_eq!(sha256(&backing), before, "the backing file changed");
}
