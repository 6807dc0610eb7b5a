//! `driveprobe health` inside a QEMU guest (TCG) with an emulated NVMe and SATA disk:
//! identity, host-written bytes growing under a `driveprobe bench` write, a critical
//! warning set at boot, and one injected through QMP while the guest runs.
//!
//! Three boots (about 10-25 s each under TCG): one for identity and write growth, one
//! with `smart_critical_warning=0x4`, one with runtime injection. Each check first asserts
//! what the guest's own tools (nvme-cli, smartctl) see, then what `driveprobe health` says.
//! Needs the Debian packages scripts/test installs (qemu-system-x86, busybox-static, cpio,
//! kmod, nvme-cli, smartmontools) and, once, the kernel package (`apt-get download`).
//!
//! `capture_fixtures` (ignored) regenerates tests/fixtures/nvme and
//! tests/fixtures/smartctl/qemu-*.json: `cargo test --features system-tests --test vm --
//! --ignored health::capture_fixtures --nocapture`.

use crate::harness;

use std::path::PathBuf;
use std::sync::OnceLock;

use harness::{Vm, VmRun, NVME_QOM, NVME_SERIAL};
use serde_json::{json, Value};

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;
/// An NVMe data unit: 1000 512-byte units.
const DATA_UNIT: u64 = 512_000;

/// Written by the bench in the first boot: 64 MiB, i.e. at least 131 whole data units.
const BENCH_BYTES: u64 = 64 * MIB;
const BENCH_UNITS_MIN: u64 = BENCH_BYTES / DATA_UNIT;

const IDENTITY_AND_WRITE: &str = r#"
. /lib/vm.sh
run health-help driveprobe health --help
runout nvme-id-ctrl nvme id-ctrl /dev/nvme0 -o json
runout smartctl-sda smartctl --json -i /dev/sda
runout smart-before nvme smart-log /dev/nvme0 -o json
runout health-nvme-before driveprobe health /dev/nvme0n1 --json
runout health-sata driveprobe health /dev/sda --json
run bench-write driveprobe bench /dev/nvme0n1 --rw write --bs 1m --io-size 64m --allow-destructive --expect-serial TESTSN01
runout smart-after nvme smart-log /dev/nvme0 -o json
runout health-nvme-after driveprobe health /dev/nvme0n1 --json
run modules cat /proc/modules
run extra-modules sh -c 'modprobe null_blk nr_devices=1 && modprobe scsi_debug dev_size_mb=8 && sleep 1 && ls /dev/nullb0 /sys/bus/pseudo/drivers/scsi_debug'
"#;

const CRITICAL_AT_BOOT: &str = r#"
. /lib/vm.sh
run health-help driveprobe health --help
runout smart nvme smart-log /dev/nvme0 -o json
runout health-nvme driveprobe health /dev/nvme0n1 --json
"#;

const CRITICAL_AT_RUNTIME: &str = r#"
. /lib/vm.sh
run health-help driveprobe health --help
runout smart-1 nvme smart-log /dev/nvme0 -o json
runout health-1 driveprobe health /dev/nvme0n1 --json
ready inject
wait_nvme_cw 600
runout smart-2 nvme smart-log /dev/nvme0 -o json
runout health-2 driveprobe health /dev/nvme0n1 --json
"#;

/// The first boot, shared by the identity and the write-growth tests.
fn identity_and_write_boot() -> &'static VmRun {
    static RUN: OnceLock<Result<VmRun, String>> = OnceLock::new();
    RUN.get_or_init(|| Vm::builder().payload(IDENTITY_AND_WRITE).try_boot())
        .as_ref()
        .unwrap_or_else(|e| panic!("{e}"))
}

/// Fails, with a message that says so, when the binary has no `health` command yet.
fn require_health(run: &VmRun) {
    let s = run.section("health-help");
    assert_eq!(
        s.rc, 0,
        "`driveprobe health` is not in this build (`driveprobe health --help` exited {} in \
         the guest): the health command is not written yet. The guest-side checks before \
         this one passed.\n{}",
        s.rc, s.text
    );
}

/// `driveprobe health ... --json` output of a section: the document, its `health` and
/// `assessment`.
fn health_doc(run: &VmRun, section: &str) -> Value {
    let s = run.section(section);
    let v = s.json();
    assert!(
        v.get("health").is_some() && v.get("assessment").is_some(),
        "'{section}' (rc {}) has no health/assessment:\n{}",
        s.rc,
        s.text
    );
    v
}

fn u64_of(v: &Value) -> u64 {
    match v {
        Value::Number(n) => n.as_u64().unwrap_or_else(|| panic!("not a u64: {v}")),
        // nvme-cli prints the 128-bit counters as strings
        Value::String(s) => s.parse().unwrap_or_else(|_| panic!("not a u64: {v}")),
        _ => panic!("not a number: {v}"),
    }
}

fn str_of<'a>(v: &'a Value, what: &str) -> &'a str {
    v.as_str()
        .unwrap_or_else(|| panic!("{what} is not a string: {v}"))
}

fn verdict(doc: &Value) -> &str {
    str_of(&doc["assessment"]["verdict"], "assessment.verdict")
}

const FLAGS: [&str; 6] = [
    "spare_low",
    "temperature",
    "reliability_degraded",
    "read_only",
    "volatile_backup_failed",
    "persistent_memory_unreliable",
];

/// critical_flags has exactly the named flags set.
fn assert_flags(doc: &Value, set: &[&str]) {
    let flags = &doc["health"]["critical_flags"];
    for f in FLAGS {
        assert_eq!(
            flags[f].as_bool(),
            Some(set.contains(&f)),
            "critical_flags.{f} in {flags}"
        );
    }
}

#[test]
fn vm_nvme_and_sata_identity() {
    let run = identity_and_write_boot();

    // What the guest's own tools see.
    let ctrl = run.ok_section("nvme-id-ctrl").json();
    assert_eq!(str_of(&ctrl["sn"], "sn").trim(), NVME_SERIAL);
    assert_eq!(str_of(&ctrl["mn"], "mn").trim(), "QEMU NVMe Ctrl");
    let fw = str_of(&ctrl["fr"], "fr").trim().to_string();
    let sda = run.section("smartctl-sda").json();
    assert_eq!(str_of(&sda["model_name"], "model_name"), "QEMU HARDDISK");
    let sda_serial = str_of(&sda["serial_number"], "serial_number").to_string();
    let sda_fw = str_of(&sda["firmware_version"], "firmware_version").to_string();

    require_health(run);

    let nvme = health_doc(run, "health-nvme-before");
    assert!(
        str_of(&nvme["device"], "device").contains("nvme0"),
        "device: {}",
        nvme["device"]
    );
    let id = &nvme["health"]["identity"];
    assert_eq!(id["transport"], "nvme", "{id}");
    assert_eq!(id["serial"], NVME_SERIAL, "{id}");
    assert_eq!(id["model"], "QEMU NVMe Ctrl", "{id}");
    assert_eq!(id["firmware"], json!(fw), "{id}");
    assert_eq!(id["capacity_bytes"], json!(GIB), "{id}");
    // 323 K
    let t = nvme["health"]["temperature_celsius"]
        .as_f64()
        .unwrap_or_else(|| panic!("temperature_celsius: {}", nvme["health"]));
    assert_eq!(
        t, 50.0,
        "temperature_celsius {t}, want 50 (323 K - 273, as smartctl)"
    );
    assert_eq!(nvme["health"]["critical_warning"], json!(0));
    assert_flags(&nvme, &[]);
    assert_eq!(verdict(&nvme), "ok", "{}", nvme["assessment"]);

    let sata = health_doc(run, "health-sata");
    assert!(
        str_of(&sata["device"], "device").contains("sda"),
        "device: {}",
        sata["device"]
    );
    let id = &sata["health"]["identity"];
    assert_eq!(id["transport"], "sata", "{id}");
    assert_eq!(id["model"], "QEMU HARDDISK", "{id}");
    assert_eq!(id["serial"], json!(sda_serial), "{id}");
    assert_eq!(id["firmware"], json!(sda_fw), "{id}");
    assert_eq!(id["capacity_bytes"], json!(GIB), "{id}");
}

#[test]
fn vm_host_written_bytes_grow_after_bench_write() {
    let run = identity_and_write_boot();

    // The engine wrote through the safety gate, and the emulated NVMe counted it.
    let bench = run.ok_section("bench-write");
    let before = u64_of(&run.ok_section("smart-before").json()["data_units_written"]);
    let after = u64_of(&run.ok_section("smart-after").json()["data_units_written"]);
    assert!(
        after - before >= BENCH_UNITS_MIN,
        "data_units_written {before} -> {after}: want a growth of at least \
         {BENCH_UNITS_MIN} units for {BENCH_BYTES} bytes\nbench:\n{}",
        bench.text
    );
    // QEMU rounds the 512-byte blocks written up to whole units: 64 MiB is 132 units.
    assert!(after - before <= BENCH_UNITS_MIN + 1, "{before} -> {after}");

    require_health(run);

    let hb = u64_of(&health_doc(run, "health-nvme-before")["health"]["host_written_bytes"]);
    let ha = u64_of(&health_doc(run, "health-nvme-after")["health"]["host_written_bytes"]);
    // Each health read is next to an nvme-cli read with no write between them.
    assert_eq!(
        hb,
        before * DATA_UNIT,
        "host_written_bytes before the bench"
    );
    assert_eq!(ha, after * DATA_UNIT, "host_written_bytes after the bench");
    assert!(
        ha - hb >= BENCH_UNITS_MIN * DATA_UNIT,
        "host_written_bytes {hb} -> {ha}: grew by less than {BENCH_BYTES} bytes in data units"
    );
}

/// The harness itself: the disks, the modules later fault-injection tests need.
#[test]
fn vm_guest_has_disks_and_modules() {
    let run = identity_and_write_boot();
    let devices = run.lines_starting("=== DEVICES");
    assert!(
        devices.len() == 1 && devices[0].contains("nvme0n1") && devices[0].contains("sda"),
        "{devices:?}"
    );
    assert!(
        run.lines_starting("=== MODULE").is_empty(),
        "modules failed to load:\n{}",
        run.tail(60)
    );
    let modules = &run.ok_section("modules").text;
    for m in ["nvme", "ahci", "sd_mod", "dm_mod", "dm_delay", "dm_flakey"] {
        assert!(
            modules.lines().any(|l| l.split(' ').next() == Some(m)),
            "{m} not loaded:\n{modules}"
        );
    }
    run.ok_section("extra-modules");
    assert!(run.elapsed < harness::DEFAULT_TIMEOUT);
}

/// A guest that does not finish is killed at the timeout, and the error says so: where
/// the payload was, how long the console had been silent, and the end of the guest
/// kernel's log (what a hang on an I/O shows first).
#[test]
fn vm_timeout_kills_qemu() {
    let mut vm = Vm::builder()
        .without_driveprobe()
        .payload(". /lib/vm.sh\nrun stuck sleep 600\n")
        .start();
    let pid = vm.pid().expect("QEMU runs");
    vm.wait_for("=== BEGIN stuck");
    vm.give_up_after(std::time::Duration::from_secs(2));
    let err = vm
        .try_finish()
        .expect_err("the guest sleeps past the timeout");
    let first = err.lines().next().unwrap();
    assert!(first.contains("timed out"), "{err}");
    assert!(first.contains("in section stuck"), "{err}");
    assert!(first.contains("console silent for"), "{err}");
    let kernel = err
        .split("--- guest kernel log tail ---\n")
        .nth(1)
        .and_then(|k| k.split("--- console tail ---").next())
        .unwrap_or_default();
    assert!(
        kernel.lines().count() >= 5 && kernel.lines().all(|l| l.starts_with('<')),
        "the guest kernel's log: {err}"
    );
    assert!(
        !std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "QEMU {pid} still there"
    );
}

#[test]
fn vm_critical_warning_at_boot_is_failing() {
    let run = Vm::builder()
        .nvme_extra(",smart_critical_warning=0x4")
        .payload(CRITICAL_AT_BOOT)
        .boot();
    let smart = run.ok_section("smart").json();
    assert_eq!(smart["critical_warning"], json!(4), "nvme-cli: {smart}");

    require_health(&run);

    let doc = health_doc(&run, "health-nvme");
    assert_eq!(
        doc["health"]["critical_warning"],
        json!(4),
        "{}",
        doc["health"]
    );
    assert_flags(&doc, &["reliability_degraded"]);
    assert_eq!(verdict(&doc), "failing", "{}", doc["assessment"]);
    let reasons = doc["assessment"]["reasons"]
        .as_array()
        .unwrap_or_else(|| panic!("assessment.reasons: {}", doc["assessment"]));
    assert!(!reasons.is_empty(), "a failing verdict with no reason");
}

#[test]
fn vm_critical_warning_injected_at_runtime() {
    let mut vm = Vm::builder().qmp().payload(CRITICAL_AT_RUNTIME).start();
    vm.wait_for("=== READY inject");
    let q = vm.qmp();
    let cw = |q: &mut harness::Qmp| {
        q.qom_get(NVME_QOM, "smart_critical_warning")
            .unwrap_or_else(|e| panic!("{e}"))
    };
    assert_eq!(cw(q), json!(0));
    q.qom_set(NVME_QOM, "smart_critical_warning", json!(4))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(cw(q), json!(4));
    let run = vm.finish();

    let saw = run.lines_starting("=== SAW critical_warning=");
    assert_eq!(
        saw.len(),
        1,
        "the guest did not see the warning:\n{}",
        run.tail(40)
    );
    let s1 = run.ok_section("smart-1").json();
    let s2 = run.ok_section("smart-2").json();
    assert_eq!(s1["critical_warning"], json!(0));
    assert_eq!(s2["critical_warning"], json!(4));

    require_health(&run);

    let first = health_doc(&run, "health-1");
    assert_eq!(first["health"]["critical_warning"], json!(0));
    assert_flags(&first, &[]);
    assert_eq!(verdict(&first), "ok", "{}", first["assessment"]);

    let second = health_doc(&run, "health-2");
    assert_eq!(second["health"]["critical_warning"], json!(4));
    assert_flags(&second, &["reliability_degraded"]);
    assert_eq!(verdict(&second), "failing", "{}", second["assessment"]);
}

// ---- fixtures -------------------------------------------------------------------------

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

fn le(b: &[u8], at: usize, len: usize) -> u128 {
    b[at..at + len]
        .iter()
        .rev()
        .fold(0u128, |acc, &x| (acc << 8) | u128::from(x))
}

/// The captured NVMe data (no boot) holds what tests/fixtures/nvme/README.md says.
#[test]
fn nvme_fixtures_hold_what_their_readme_says() {
    let dir = fixtures().join("nvme");
    let read = |name: &str| std::fs::read(dir.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
    let fresh = read("qemu-smart-log.bin");
    let after = read("qemu-smart-log-after-64MiB.bin");
    let crit = read("qemu-smart-log-critical-0x4.bin");
    let ctrl = read("qemu-id-ctrl.bin");
    let ns = read("qemu-id-ns.bin");
    for (b, n) in [
        (&fresh, 512),
        (&after, 512),
        (&crit, 512),
        (&ctrl, 4096),
        (&ns, 4096),
    ] {
        assert_eq!(b.len(), n);
    }
    // SMART / Health log: critical warning (0), composite temperature in K (1..3),
    // data units written (48..64).
    assert_eq!(fresh[0], 0);
    assert_eq!(crit[0], 0x04);
    assert_eq!(le(&fresh, 1, 2), 323);
    let w0 = le(&fresh, 48, 16);
    let w1 = le(&after, 48, 16);
    assert_eq!(w0, 0);
    assert_eq!(w1 - w0, 132, "64 MiB is 131.07 data units, rounded up");
    // Identify Controller: serial 4..24, model 24..64 (space padded ASCII).
    assert_eq!(
        String::from_utf8_lossy(&ctrl[4..24]).trim_end(),
        NVME_SERIAL
    );
    assert_eq!(
        String::from_utf8_lossy(&ctrl[24..64]).trim_end(),
        "QEMU NVMe Ctrl"
    );
    // Identify Namespace: size in blocks (0..8), 1 GiB of 512-byte blocks.
    assert_eq!(le(&ns, 0, 8), u128::from(GIB / 512));
}

/// Regenerates the fixtures (two boots). Run by hand; see tests/fixtures/nvme/README.md.
#[test]
#[ignore = "regenerates tests/fixtures/{nvme,smartctl}: run by hand"]
fn capture_fixtures() {
    const PLAIN: &str = r#"
. /lib/vm.sh
runhex smart-log nvme smart-log -b /dev/nvme0
run smart-log-text nvme smart-log /dev/nvme0
runhex id-ctrl nvme id-ctrl -b /dev/nvme0
run id-ctrl-text nvme id-ctrl /dev/nvme0
runhex id-ns nvme id-ns -b /dev/nvme0n1
run id-ns-text nvme id-ns /dev/nvme0n1
run dd dd if=/dev/zero of=/dev/nvme0n1 bs=1M count=64 oflag=direct
runhex smart-log-after nvme smart-log -b /dev/nvme0
run smart-log-after-text nvme smart-log /dev/nvme0
runout smartctl-sata smartctl --json -a /dev/sda
runout smartctl-nvme smartctl --json -a /dev/nvme0
"#;
    const CRITICAL: &str = r#"
. /lib/vm.sh
runhex smart-log nvme smart-log -b /dev/nvme0
run smart-log-text nvme smart-log /dev/nvme0
"#;
    let plain = Vm::builder().without_driveprobe().payload(PLAIN).boot();
    let crit = Vm::builder()
        .without_driveprobe()
        .nvme_extra(",smart_critical_warning=0x4")
        .payload(CRITICAL)
        .boot();
    let nvme = fixtures().join("nvme");
    let smartctl = fixtures().join("smartctl");
    std::fs::create_dir_all(&nvme).unwrap();
    std::fs::create_dir_all(&smartctl).unwrap();
    let save_bin = |run: &VmRun, section: &str, len: usize, file: &str| {
        let b = run.ok_section(section).hex();
        assert_eq!(b.len(), len, "{section}");
        std::fs::write(nvme.join(file), b).unwrap();
    };
    save_bin(&plain, "smart-log", 512, "qemu-smart-log.bin");
    save_bin(
        &plain,
        "smart-log-after",
        512,
        "qemu-smart-log-after-64MiB.bin",
    );
    save_bin(&crit, "smart-log", 512, "qemu-smart-log-critical-0x4.bin");
    save_bin(&plain, "id-ctrl", 4096, "qemu-id-ctrl.bin");
    save_bin(&plain, "id-ns", 4096, "qemu-id-ns.bin");
    for (section, file) in [
        ("smartctl-sata", "qemu-sata.json"),
        ("smartctl-nvme", "qemu-nvme.json"),
    ] {
        // smartctl's exit status is a bit mask; the JSON says what it means. Saved as
        // smartctl printed it.
        let s = plain.section(section);
        s.json();
        std::fs::write(smartctl.join(file), &s.text).unwrap();
    }
    for (run, name) in [
        (&plain, "smart-log-text"),
        (&plain, "smart-log-after-text"),
        (&plain, "id-ctrl-text"),
        (&plain, "id-ns-text"),
        (&crit, "smart-log-text"),
    ] {
        println!("==== {name}\n{}", run.ok_section(name).text);
    }
    println!(
        "boots: {:.1} s and {:.1} s",
        plain.elapsed.as_secs_f64(),
        crit.elapsed.as_secs_f64()
    );
}
