//! `protocol::purge` on the emulated disks of a QEMU guest (TCG): the NVMe (`serial=TESTSN01`),
//! the AHCI SATA disk (`serial=TESTSATA01`) and a `scsi_debug` disk. One boot. Neither QEMU
//! nor `scsi_debug` emulates ATA SECURITY ERASE or SCSI SANITIZE: the test checks that each
//! is asked for through the real pass-through and declined for what the device says.
//!
//! There is no CLI for purge, so this test binary itself runs in the guest: the host copies
//! it in (`/purge-guest`) and the payload runs its `guest_side` test, which is ignored on
//! the host and refuses to run unless it finds itself in the guest (`DRIVEPROBE_VM_GUEST`
//! set, `/payload.sh` present) and the safety gate matches the emulated disks' identities.
//! It prints one `PURGE-RESULT {json}` line per step; the host checks them against what
//! the guest's nvme-cli says the controller supports.
//!
//! `purge_suite_in_the_guest` runs purge through `driveprobe bench --suite`.
//!
//! Needs what `tests/vm/health.rs` needs (qemu-system-x86, busybox-static, cpio, kmod,
//! nvme-cli, smartmontools, the kernel package) and `strip` (binutils) if available.

use crate::harness;

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use harness::{Vm, NVME_SERIAL};
use serde_json::{json, Value};

use driveprobe::device;
use driveprobe::engine::RunControl;
use driveprobe::protocol::purge::{self, PurgeOutcome};
use driveprobe::safety::{self, WriteRequest};
use driveprobe::target::{Region, Target};

const MIB: u64 = 1 << 20;
const NVME_BYTES: u64 = 256 * MIB;
const SATA_BYTES: u64 = 64 * MIB;
const SATA_SERIAL: &str = "TESTSATA01";
/// Written by `driveprobe bench` before the purge.
const BENCH_BYTES: u64 = 16 * MIB;
const GUEST_ENV: &str = "DRIVEPROBE_VM_GUEST";

const PAYLOAD: &str = r#"
. /lib/vm.sh
runout nvme-id-ctrl nvme id-ctrl /dev/nvme0 -o json
runout nvme-id-ns nvme id-ns /dev/nvme0n1 -o json
run sata-wwid cat /sys/block/sda/device/wwid
run bench-nvme driveprobe bench /dev/nvme0n1 --rw write --bs 1m --io-size 16m --allow-destructive --expect-serial TESTSN01
run scsi-debug sh -c 'modprobe scsi_debug dev_size_mb=8 && sleep 1 && grep -l scsi_debug /sys/block/sd*/device/model'
chmod 0755 /purge-guest
run guest env DRIVEPROBE_VM_GUEST=1 /purge-guest --exact purge::guest_side --ignored --nocapture --test-threads=1
"#;

// ---------------------------------------------------------------- guest side

/// 4 KiB blocks that are not all zeros, among `count` blocks spread evenly over the first
/// `len` bytes plus every block of the first `dense` bytes. Buffered reads through a
/// descriptor of our own: they see what any reader of the device would, page cache
/// included.
fn nonzero_blocks(dev: &Path, len: u64, dense: u64, count: u64) -> u64 {
    let f = File::open(dev).unwrap();
    let mut buf = vec![0u8; 4096];
    let mut offsets: Vec<u64> = (0..dense / 4096).map(|i| i * 4096).collect();
    let step = (len / count) / 4096 * 4096;
    offsets.extend((0..count).map(|i| i * step).filter(|&o| o >= dense));
    let mut n = 0;
    for off in offsets {
        f.read_exact_at(&mut buf, off).unwrap();
        if buf.iter().any(|&b| b != 0) {
            n += 1;
        }
    }
    n
}

fn print_result(step: &str, v: Value) {
    println!("PURGE-RESULT {}", json!({ "step": step, "result": v }));
}

fn outcome_json(o: &PurgeOutcome) -> Value {
    serde_json::to_value(o).unwrap()
}

fn open_rw(dev: &Path, req: &WriteRequest) -> Target {
    let info = device::inspect(dev).unwrap();
    let permit = safety::authorize_block_writes(&info, req)
        .unwrap_or_else(|e| panic!("the gate refused {}: {e}", dev.display()));
    Target::open(dev, true, Some(&permit)).unwrap()
}

/// Runs inside the guest only (see the module documentation).
#[test]
#[ignore = "runs inside the VM guest: `purge_in_the_guest` boots it"]
fn guest_side() {
    assert!(
        std::env::var_os(GUEST_ENV).is_some() && Path::new("/payload.sh").exists(),
        "guest_side purges the VM's emulated disks and runs only inside the VM guest"
    );
    let control = RunControl::new();

    // NVMe: the bench wrote the first 16 MiB.
    let nvme = Path::new("/dev/nvme0n1");
    let t = open_rw(
        nvme,
        &WriteRequest {
            allow_destructive: true,
            expect_serial: Some(NVME_SERIAL.into()),
            expect_wwn: None,
        },
    );
    let size = t.size();
    let before = nonzero_blocks(nvme, size, BENCH_BYTES, 64);
    let out = purge::purge(
        &t,
        Region {
            start: 0,
            len: size,
        },
    )
    .unwrap();
    let after = nonzero_blocks(nvme, size, BENCH_BYTES, 256);
    print_result(
        "nvme-purge",
        json!({"outcome": outcome_json(&out), "size": size,
               "nonzero_before": before, "nonzero_after": after}),
    );
    let fill = purge::fill(&t, &control).unwrap();
    let zero_after_fill = 256 - nonzero_blocks(nvme, size, 0, 256);
    print_result(
        "nvme-fill",
        json!({"bytes": fill.bytes, "seconds": fill.seconds, "size": size,
               "zero_blocks_after": zero_after_fill}),
    );
    drop(t);

    // SATA: identified by its WWN (the guest has no udev for a serial), which QEMU builds
    // from the serial the host gave.
    let sda = Path::new("/dev/sda");
    let wwn = device::inspect(sda)
        .unwrap()
        .identity
        .wwn
        .expect("/dev/sda has no WWN");
    assert!(
        wwn.contains(SATA_SERIAL),
        "/dev/sda (WWN {wwn:?}) is not the VM's SATA disk"
    );
    let t = open_rw(
        sda,
        &WriteRequest {
            allow_destructive: true,
            expect_serial: None,
            expect_wwn: Some(wwn),
        },
    );
    fill_then_purge("sata-purge", &t, sda, &control);
    drop(t);

    // The kernel's scsi_debug disk: a SCSI (not ATA) logical unit.
    let name = std::fs::read_dir("/sys/block")
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .find(|n| {
            std::fs::read_to_string(format!("/sys/block/{n}/device/model"))
                .is_ok_and(|m| m.trim() == "scsi_debug")
        })
        .expect("no scsi_debug disk in /sys/block");
    let dev = PathBuf::from(format!("/dev/{name}"));
    let info = device::inspect(&dev).unwrap();
    let t = open_rw(
        &dev,
        &WriteRequest {
            allow_destructive: true,
            expect_serial: info.identity.serial.clone(),
            expect_wwn: info.identity.wwn.clone(),
        },
    );
    fill_then_purge("scsi-purge", &t, &dev, &control);
}

/// Fills the whole disk, purges it, and prints what a sample of its blocks read as before
/// and after.
fn fill_then_purge(step: &str, t: &Target, dev: &Path, control: &RunControl) {
    let size = t.size();
    let fill = purge::fill(t, control).unwrap();
    let before = nonzero_blocks(dev, size, 0, 256);
    let out = purge::purge(
        t,
        Region {
            start: 0,
            len: size,
        },
    )
    .unwrap();
    let after = nonzero_blocks(dev, size, 0, 256);
    print_result(
        step,
        json!({"outcome": outcome_json(&out), "size": size, "filled": fill.bytes,
               "nonzero_before": before, "nonzero_after": after}),
    );
}

// ---------------------------------------------------------------- host side

/// This test binary, without debug info, in `dir`.
fn guest_binary(dir: &Path) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let out = dir.join("purge-guest");
    let stripped = Command::new("strip")
        .arg("--strip-debug")
        .arg("-o")
        .arg(&out)
        .arg(&exe)
        .status()
        .is_ok_and(|s| s.success());
    if !stripped {
        std::fs::copy(&exe, &out).unwrap();
    }
    out
}

fn results(text: &str) -> Vec<Value> {
    text.lines()
        // libtest prints `test purge::guest_side ... ` without a newline before the first one.
        .filter_map(|l| l.find("PURGE-RESULT ").map(|i| &l[i + 13..]))
        .map(|j| serde_json::from_str(j).unwrap_or_else(|e| panic!("{e}: {j}")))
        .collect()
}

fn step<'a>(all: &'a [Value], name: &str) -> &'a Value {
    &all.iter()
        .find(|v| v["step"] == name)
        .unwrap_or_else(|| panic!("no PURGE-RESULT for {name}: {all:?}"))["result"]
}

fn u64_of(v: &Value) -> u64 {
    match v {
        Value::Number(n) => n.as_u64().unwrap_or_else(|| panic!("not a u64: {v}")),
        Value::String(s) => s.parse().unwrap_or_else(|_| panic!("not a u64: {v}")),
        _ => panic!("not a number: {v}"),
    }
}

#[test]
fn purge_in_the_guest() {
    let dir = tempfile::tempdir().unwrap();
    let bin = guest_binary(dir.path());
    let run = Vm::builder()
        .nvme_bytes(NVME_BYTES)
        .sata_bytes(SATA_BYTES)
        .qemu_arg("-global")
        .qemu_arg(&format!("ide-hd.serial={SATA_SERIAL}"))
        .file(&bin, "/purge-guest")
        .timeout(Duration::from_secs(300))
        .payload(PAYLOAD)
        .boot();

    // What the controller says it can do, as the guest's nvme-cli reads it.
    let id = run.ok_section("nvme-id-ctrl").json();
    let oacs = u64_of(&id["oacs"]);
    let sanicap = u64_of(&id["sanicap"]);
    let fna = u64_of(&id["fna"]);
    eprintln!(
        "QEMU NVMe (fr {}): OACS 0x{oacs:x} (Format NVM: {}), SANICAP 0x{sanicap:x}, FNA 0x{fna:x}",
        id["fr"],
        oacs & 2 != 0
    );
    eprintln!("SATA wwid: {}", run.ok_section("sata-wwid").text.trim());
    run.ok_section("bench-nvme");
    let guest = run.section("guest");
    eprintln!("--- guest_side ---\n{}", guest.text);
    assert_eq!(
        guest.rc, 0,
        "guest_side failed in the guest:\n{}",
        guest.text
    );
    let all = results(&guest.text);
    // A command the guest kernel timed out (a completion it missed under TCG, found when
    // the timeout fired) is QEMU's or the host's, not the purge's: shown, not failed on.
    // The Format NVM's timeout is a minute at this size, so such a miss costs a minute.
    for l in run
        .kernel_log
        .lines()
        .filter(|l| l.contains("nvme") && l.contains("timeout"))
    {
        eprintln!("guest kernel: {l}");
    }

    let nv = step(&all, "nvme-purge");
    let method = nv["outcome"]["method"].as_str().unwrap();
    let expected = if sanicap & 0b11 != 0 {
        "nvme-sanitize"
    } else if oacs & 0b10 != 0 {
        "nvme-format"
    } else {
        "blkdiscard"
    };
    assert_eq!(method, expected, "{nv}");
    assert_eq!(u64_of(&nv["size"]), NVME_BYTES);
    assert_eq!(u64_of(&nv["outcome"]["bytes"]), NVME_BYTES);
    assert_eq!(
        u64_of(&nv["nonzero_before"]),
        BENCH_BYTES / 4096,
        "the bench should have written the first 16 MiB: {nv}"
    );
    assert_eq!(
        u64_of(&nv["nonzero_after"]),
        0,
        "the NVMe still reads non-zero data after the purge: {nv}"
    );

    let fill = step(&all, "nvme-fill");
    assert_eq!(u64_of(&fill["bytes"]), NVME_BYTES, "{fill}");
    assert_eq!(u64_of(&fill["zero_blocks_after"]), 0, "{fill}");

    let sata = step(&all, "sata-purge");
    let method = sata["outcome"]["method"].as_str().unwrap();
    assert!(
        ["blksecdiscard", "blkdiscard", "overwrite"].contains(&method),
        "{sata}"
    );
    assert_eq!(u64_of(&sata["filled"]), SATA_BYTES, "{sata}");
    assert_eq!(u64_of(&sata["nonzero_before"]), 256, "{sata}");
    if u64_of(&sata["nonzero_after"]) > 0 {
        // A discard the drive accepted but that leaves the data readable must be noted.
        let notes = sata["outcome"]["notes"].to_string();
        assert!(notes.contains("still read as non-zero"), "{sata}");
    }
    // The ATA erase was asked for through the pass-through, and libata brought QEMU's
    // IDENTIFY DEVICE back: its AHCI disk has no Security feature set.
    let notes = sata["outcome"]["notes"].to_string();
    assert!(
        notes.contains(
            "ATA SECURITY ERASE: the drive does not support the Security feature set (IDENTIFY \
             word 82 bit 1 clear): not used"
        ),
        "{sata}"
    );

    // scsi_debug is SCSI, not ATA: SANITIZE is asked about, and it has none.
    let scsi = step(&all, "scsi-purge");
    let notes = scsi["outcome"]["notes"].to_string();
    assert!(!notes.contains("ATA SECURITY ERASE"), "{scsi}");
    assert!(
        notes.contains("SCSI SANITIZE (block erase): not supported")
            || notes.contains("SCSI SANITIZE (block erase): SCSI status"),
        "{scsi}"
    );
    assert!(
        ["blksecdiscard", "blkdiscard", "overwrite"]
            .contains(&scsi["outcome"]["method"].as_str().unwrap()),
        "{scsi}"
    );
    assert_eq!(u64_of(&scsi["filled"]), u64_of(&scsi["size"]), "{scsi}");
    assert_eq!(u64_of(&scsi["nonzero_before"]), 256, "{scsi}");
    assert_eq!(u64_of(&scsi["nonzero_after"]), 0, "{scsi}");
}

/// Purge through the suite runner: the `jesd219` suite purges first (NVMe Format on
/// QEMU's NVMe), then writes to steady state; run at a tiny scale.
#[test]
fn purge_suite_in_the_guest() {
    let run = Vm::builder()
        .nvme_bytes(NVME_BYTES)
        .timeout(Duration::from_secs(600))
        .payload(
            r#"
. /lib/vm.sh
run bench-nvme driveprobe bench /dev/nvme0n1 --rw write --bs 1m --io-size 16m --allow-destructive --expect-serial TESTSN01
runout suite driveprobe bench /dev/nvme0n1 --suite jesd219 --scale quick --precondition-passes 0 --round-time 200ms --max-rounds 5 --allow-destructive --expect-serial TESTSN01 --output-format json
run refused driveprobe bench /dev/nvme0n1 --suite jesd219 --scale quick --allow-destructive --expect-serial WRONG
"#,
        )
        .boot();
    run.ok_section("bench-nvme");
    let suite = run.ok_section("suite");
    let start = suite.text.find('{').expect("JSON result");
    let doc: Value = serde_json::from_str(&suite.text[start..]).unwrap();
    assert_eq!(doc["suite"], "jesd219");
    assert_eq!(doc["complete"], true, "{doc}");
    assert_eq!(doc["phases"][0]["kind"], "purge");
    assert_eq!(doc["phases"][0]["method"], "nvme-format", "{doc}");
    assert_eq!(doc["drive"]["serial"], NVME_SERIAL);
    let refused = run.section("refused");
    assert_ne!(
        refused.rc, 0,
        "a wrong serial must be refused: {}",
        refused.text
    );
    assert!(refused.text.contains("TESTSN01"), "{}", refused.text);
}
