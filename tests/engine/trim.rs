//! Trim workloads (`--rw=trim`, `randtrim`, `trimwrite`, fio's meanings) through the real
//! binary: on a tmpfs file a trim punches a hole (the file's allocated blocks drop by what
//! was trimmed), on a loop device over a /dev/shm file BLKDISCARD punches holes in the
//! backing file; the figures against fio's on the same loop device, side by side; and the
//! write gate refuses a trim of a device without a permit, as it refuses a write.

use crate::common;

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_driveprobe");
const MIB: u64 = 1 << 20;

fn blocks(p: &Path) -> u64 {
    std::fs::metadata(p).unwrap().blocks()
}

fn bench(args: &[&str]) -> Output {
    Command::new(BIN)
        .arg("bench")
        .args(args)
        .args(["--output-format=json"])
        .output()
        .unwrap()
}

fn doc(out: &Output, what: &str) -> Value {
    common::assert_ok(out, what);
    serde_json::from_slice(&out.stdout).unwrap()
}

fn ops(d: &Value, dir: &str) -> u64 {
    d[dir]["ops"].as_u64().unwrap_or(0)
}

#[test]
fn trim_punches_holes_in_a_tmpfs_file() {
    let dir = common::shm_dir("dp-test-trim");
    let f = dir.path().join("target");
    let fs = f.to_str().unwrap();
    let write = bench(&[fs, "--size=16m", "--rw=write", "--bs=1m"]);
    doc(&write, "write the file");
    let full = blocks(&f);
    assert!(full * 512 >= 16 * MIB, "{full} blocks after writing 16 MiB");

    // randtrim over the first half: with fio's random map, each 64k block once.
    let d = doc(
        &bench(&[fs, "--size=8m", "--rw=randtrim", "--bs=64k"]),
        "randtrim",
    );
    assert_eq!(d["engine"], "psync");
    assert_eq!(ops(&d, "trim"), 8 * MIB / (64 << 10));
    assert_eq!(d["trim"]["bytes"].as_u64().unwrap(), 8 * MIB);
    assert_eq!((ops(&d, "read"), ops(&d, "write")), (0, 0));
    assert_eq!(ops(&d, "total"), ops(&d, "trim"));
    assert_eq!(
        full - blocks(&f),
        8 * MIB / 512,
        "the trimmed half was freed"
    );
    assert_eq!(std::fs::metadata(&f).unwrap().len(), 16 * MIB, "size kept");
    // Trimmed blocks read as zeros.
    let data = std::fs::read(&f).unwrap();
    assert!(data[..8 << 20].iter().all(|&b| b == 0));
    assert!(data[8 << 20..].iter().any(|&b| b != 0));

    // trim (sequential) over the whole file frees it all.
    let d = doc(
        &bench(&[fs, "--size=16m", "--rw=trim", "--bs=128k"]),
        "trim",
    );
    assert_eq!(ops(&d, "trim"), 16 * MIB / (128 << 10));
    assert_eq!(blocks(&f), 0);

    // trimwrite: each block trimmed then written; the size is covered by the writes.
    let d = doc(
        &bench(&[fs, "--size=16m", "--rw=trimwrite", "--bs=64k"]),
        "trimwrite",
    );
    let n = 16 * MIB / (64 << 10);
    assert_eq!((ops(&d, "trim"), ops(&d, "write")), (n, n));
    assert_eq!(ops(&d, "total"), 2 * n);
    assert!(
        blocks(&f) * 512 >= 16 * MIB,
        "trimwrite rewrote every block"
    );
}

/// fio's JSON for one job: (trim ops, write ops, trim bytes).
fn fio(dev: &str, rw: &str) -> (u64, u64, u64) {
    let out = Command::new("fio")
        .args([
            "--name=t",
            &format!("--filename={dev}"),
            "--size=16m",
            &format!("--rw={rw}"),
            "--bs=64k",
            "--output-format=json",
        ])
        .output()
        .expect("fio (scripts/test installs it)");
    common::assert_ok(&out, "fio");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let j = &v["jobs"][0];
    (
        j["trim"]["total_ios"].as_u64().unwrap(),
        j["write"]["total_ios"].as_u64().unwrap(),
        j["trim"]["io_bytes"].as_u64().unwrap(),
    )
}

#[test]
fn trims_on_a_loop_device_match_fio_and_pass_the_write_gate() {
    common::need_root();
    let dir = common::shm_dir("dp-test-trim-loop");
    let img = dir.path().join("disk.img");
    common::random_file(&img, 32 * MIB, 7);
    let lo = common::Loop::attach(&img, &[]);
    let serial = common::loop_serial(&img);
    let full = blocks(&img);
    assert_eq!(full * 512, 32 * MIB);

    // The write gate: a trim destroys data like a write, so it needs the same permit.
    for rw in ["trim", "randtrim", "trimwrite"] {
        let out = bench(&[lo.s(), "--size=16m", &format!("--rw={rw}"), "--bs=64k"]);
        assert!(!out.status.success(), "{rw} ran without a permit");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("--allow-destructive"), "{rw}: {err}");
        assert_eq!(blocks(&img), full, "{rw} refused, yet the device changed");
    }

    let dp = |rw: &str| {
        doc(
            &bench(&[
                lo.s(),
                "--size=16m",
                &format!("--rw={rw}"),
                "--bs=64k",
                "--allow-destructive",
                "--expect-serial",
                &serial,
            ]),
            rw,
        )
    };
    // randtrim over the first 16 MiB: BLKDISCARD on loop punches holes in the backing
    // file. fio first, then driveprobe on a fresh copy of the data: the same counts and
    // the same blocks freed.
    let (ft, fw, fb) = fio(lo.s(), "randtrim");
    assert_eq!((ft, fw, fb), (256, 0, 16 * MIB));
    let fio_freed = full - blocks(&img);
    assert_eq!(fio_freed * 512, 16 * MIB);
    common::sync();
    let d = dp("trimwrite");
    // trimwrite against fio's: as many trims and writes (each covers the size).
    let (ft, fw, _) = fio(lo.s(), "trimwrite");
    assert_eq!((ops(&d, "trim"), ops(&d, "write")), (ft, fw));
    assert_eq!(ops(&d, "trim"), 256);
    assert_eq!(blocks(&img), full, "trimwrite leaves every block written");
    let d = dp("randtrim");
    assert_eq!(ops(&d, "trim"), ft);
    assert_eq!(d["trim"]["bytes"].as_u64().unwrap(), fb);
    assert_eq!(
        full - blocks(&img),
        fio_freed,
        "the same blocks freed as fio's"
    );
    let d = dp("trim");
    assert_eq!(ops(&d, "trim"), 256);
    drop(lo);
}
