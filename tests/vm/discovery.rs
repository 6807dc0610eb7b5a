//! Discovery on the emulated drives of a QEMU guest (issue 18): an NVMe (`TESTSN01`), a
//! solid-state SATA disk (`QM00005`, `rotation_rate=1`), a rotational SATA disk
//! (`HDDSN001`, `rotation_rate=7200`) and a virtio disk (`VIRTSN01`).
//!
//! One boot, two daemons:
//! 1. `driveprobe daemon` with no config, as root: every disk found, named by its serial,
//!    classified (nvme, ssd, hdd, virtual), with its transport and a read-only canary at
//!    its class's rate; `driveprobe discover --json` says the same.
//! 2. A config that only sets `health_interval` and `[discovery] rescan_interval` (the
//!    discovery defaults otherwise): health read on the NVMe and SATA disks, the canaries'
//!    measured rates against their class rates, a virtio disk hot-added through QMP that
//!    appears within the scan under way and the next one, and removed, down
//!    (`driveprobe_drive_up 0`) as soon.
//!
//! Nothing is written to any disk: the disk images on the host have no block allocated
//! after the guest powered off (they are sparse files; any write would allocate one).

use crate::common;
use crate::harness;

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::Duration;

use common::daemon::Exposition;
use harness::{sparse_image, Vm, HDD_SERIAL, NVME_SERIAL, VIRTIO_SERIAL};
use serde_json::Value;

const SATA_SERIAL: &str = "QM00005";
const HOT_SERIAL: &str = "VIRTSN02";
const CANARY: &str = "canary-4k-read";
/// (drive label, model in sysfs, class, transport, class rate in IOPS). The kernel name
/// comes from the guest: the two AHCI ports are probed in parallel, so either SATA disk
/// may be `sda`.
const DRIVES: [(&str, &str, &str, &str, f64); 4] = [
    (NVME_SERIAL, "QEMU NVMe Ctrl", "nvme", "nvme", 50.0),
    (SATA_SERIAL, "QEMU HARDDISK", "ssd", "sata", 20.0),
    (HDD_SERIAL, "QEMU SPINNING DI", "hdd", "sata", 1.0),
    (VIRTIO_SERIAL, "", "virtual", "virtio", 5.0),
];
/// Phase 2's rescan interval.
const RESCAN_SECONDS: u32 = 10;

const PAYLOAD: &str = r#"
. /lib/vm.sh
# Kernel messages (QEMU's AHCI now and then aborts an NCQ read) off the console: they would
# land in the middle of a scraped exposition.
dmesg -n 1
ip link set lo up 2>/dev/null || ifconfig lo 127.0.0.1 up
wait_dev /dev/sdb
wait_dev /dev/vda
run disks sh -c 'for d in nvme0n1 sda sdb vda; do echo "$d|$(cat /sys/block/$d/queue/rotational)|$(cat /sys/block/$d/device/model 2>/dev/null)"; done'
scrape() { wget -q -O - http://127.0.0.1:39480/metrics 2>/dev/null; }
api() { wget -q -O - http://127.0.0.1:39480/api/v1/drives 2>/dev/null; }
uptime_s() { cut -d' ' -f1 /proc/uptime; }
# snap: one scrape into /tmp/m, read by val
snap() { scrape > /tmp/m; }
# val NAME LABEL-MATCH...: the value of the first sample of NAME in /tmp/m whose labels
# contain every match
val() {
  _n=$1; shift
  grep "^$_n[{ ]" /tmp/m | {
    while read -r _l; do
      _ok=1
      for _m in "$@"; do case $_l in *"$_m"*) ;; *) _ok=0 ;; esac; done
      # the exposition writes gauges as 1.0: print 1
      [ $_ok = 1 ] && { _v=${_l##* }; echo "${_v%.0}"; break; }
    done
  }
}
metric() { snap; val "$@"; }
# ops_all N: in /tmp/m, every drive's canary has done at least N reads
ops_all() {
  for d in TESTSN01 QM00005 HDDSN001 VIRTSN01; do
    v=$(val driveprobe_probe_ops_total "drive=\"$d\"" 'op="read"')
    [ -n "$v" ] && [ "${v%.*}" -ge "$1" ] || return 1
  done
}
# until_s SECONDS CMD...: run CMD (after a snap) until it succeeds or SECONDS passed
until_s() {
  _lim=$1; shift
  _start=$(cut -d. -f1 /proc/uptime)
  while :; do
    snap; "$@" && return 0
    [ $(( $(cut -d. -f1 /proc/uptime) - _start )) -ge "$_lim" ] && { echo "=== WAIT TIMEOUT $*"; return 1; }
    sleep 0.5
  done
}
health_all() {
  for d in HDDSN001 QM00005 TESTSN01; do
    [ "$(val driveprobe_collector_success "drive=\"$d\"" 'collector="health"')" = 1 ] || return 1
  done
}
up_is() { [ "$(val driveprobe_drive_up "drive=\"$1\"")" = "$2" ]; }
# after_a_scan: returns once a discovery scan has ended since it was called
scans_past() { [ "$(val driveprobe_discovery_scans_total '')" -gt "$1" ]; }
after_a_scan() { _s0=$(metric driveprobe_discovery_scans_total ''); until_s 60 scans_past "$_s0"; }

# 1. No config, as root.
runout discover driveprobe discover --json
driveprobe daemon >/tmp/out1 2>/tmp/err1 &
DP=$!
until_s 180 ops_all 2
runout metrics-1 scrape
runout api-1 api
kill -TERM $DP
wait $DP
echo "=== DAEMON1 EXIT $?"
run log1 cat /tmp/err1 /tmp/out1

# 2. A config with the discovery defaults but a short rescan interval.
mkdir -p /tmp/dp2
cat > /tmp/d2.toml <<'EOF'
state_dir = "/tmp/dp2"
health_interval = "3s"

[discovery]
rescan_interval = "10s"
EOF
run check driveprobe check-config /tmp/d2.toml
driveprobe daemon --config /tmp/d2.toml >/tmp/out2 2>/tmp/err2 &
DP=$!
until_s 180 ops_all 1
until_s 120 health_all
# the canaries' rates, measured over 12 s: each scrape between two readings of the clock
echo "=== RATE-A0 $(uptime_s)"
runout metrics-2a scrape
echo "=== RATE-A1 $(uptime_s)"
sleep 12
echo "=== RATE-B0 $(uptime_s)"
runout metrics-2b scrape
echo "=== RATE-B1 $(uptime_s)"

# A scan under way when the device appears ends after it without it, and would be counted
# against the one that finds it: plug right after a scan ended, the next periodic one is
# a rescan interval away.
after_a_scan
ready hotadd
wait_dev /dev/vdb 600
echo "=== HOTADD-DEV scans=$(metric driveprobe_discovery_scans_total '') t=$(uptime_s)"
until_s 120 up_is VIRTSN02 1
# the count from the scrape that saw it up, not a later one
echo "=== HOTADD-UP scans=$(val driveprobe_discovery_scans_total '') t=$(uptime_s)"
runout metrics-3 scrape
runout api-3 api

after_a_scan
ready hotdel
i=0
while [ $i -lt 600 ] && [ -e /dev/vdb ]; do sleep 0.1; i=$((i + 1)); done
echo "=== HOTDEL-DEV scans=$(metric driveprobe_discovery_scans_total '') t=$(uptime_s) gone=$([ -e /dev/vdb ] && echo no || echo yes)"
until_s 120 up_is VIRTSN02 0
echo "=== HOTDEL-DOWN scans=$(val driveprobe_discovery_scans_total '') t=$(uptime_s)"
runout metrics-4 scrape
kill -TERM $DP
wait $DP
echo "=== DAEMON2 EXIT $?"
run log2 cat /tmp/err2 /tmp/out2
"#;

/// A scraped exposition, without kernel console lines that may have landed in it.
fn expo(text: &str) -> Exposition {
    let kept: Vec<&str> = text
        .lines()
        .filter(|l| !(l.starts_with('[') && l.contains("] ")))
        .collect();
    Exposition::parse(&kept.join("\n"))
}

fn v(e: &Exposition, name: &str, labels: &[(&str, &str)], log: &str) -> f64 {
    e.value(name, labels).unwrap_or_else(|| {
        panic!(
            "expected one {name}{labels:?} in /metrics; the daemon's log:\n{log}\n--- metrics ---\n{}",
            e.text
        )
    })
}

/// `key=value` fields of the console line starting with `prefix`.
fn fields(console: &str, prefix: &str) -> std::collections::BTreeMap<String, String> {
    let line = console
        .lines()
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("expected a console line '{prefix}...'"));
    line[prefix.len()..]
        .split_whitespace()
        .filter_map(|f| f.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn num(m: &std::collections::BTreeMap<String, String>, k: &str, line: &str) -> f64 {
    m.get(k)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("expected a number {k}= on the '{line}' line: {m:?}"))
}

/// Blocks allocated to a disk image (0: never written).
fn allocated(p: &Path) -> u64 {
    std::fs::metadata(p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .blocks()
}

#[test]
fn vm_discovery_finds_classifies_and_follows_every_drive() {
    let mut vm = Vm::builder()
        .qmp()
        .sata_rotation_rate(1)
        .sata_hdd(1 << 30)
        .virtio(1 << 30)
        .timeout(Duration::from_secs(600))
        .payload(PAYLOAD)
        .start();
    let hot = vm.dir().join("hot.img");
    sparse_image(&hot, 256 << 20).unwrap_or_else(|e| panic!("{e}"));
    vm.wait_for("=== READY hotadd");
    vm.qmp()
        .add_virtio("hot0", HOT_SERIAL, &hot, "hotnode0")
        .unwrap_or_else(|e| panic!("{e}"));
    vm.wait_for("=== READY hotdel");
    vm.qmp()
        .remove_virtio("hot0", "hotnode0", Duration::from_secs(60))
        .unwrap_or_else(|e| panic!("{e}"));
    let (run, images) = vm.finish_keeping_disks();

    // The guest sees what the builder asked for; the kernel name of each drive.
    let disks = run.ok_section("disks").text.clone();
    let row = |model: &str| -> (String, String) {
        disks
            .lines()
            .map(|l| l.split('|').map(str::trim).collect::<Vec<_>>())
            .find(|f| f.len() == 3 && (f[2] == model || (model.is_empty() && f[0] == "vda")))
            .map(|f| (f[0].to_string(), f[1].to_string()))
            .unwrap_or_else(|| panic!("expected a disk of model {model:?} in the guest:\n{disks}"))
    };
    let kname = |serial: &str| {
        let (_, model, ..) = DRIVES.iter().find(|d| d.0 == serial).unwrap();
        row(model).0
    };
    for (serial, model, class, ..) in DRIVES {
        let (k, rot) = row(model);
        let want = if class == "hdd" || class == "virtual" {
            "1"
        } else {
            "0"
        };
        assert_eq!(
            rot, want,
            "expected {serial} ({k}) queue/rotational {want} in the guest:\n{disks}"
        );
    }

    // 1. No config.
    let log1 = run.section("log1").text.clone();
    let e1 = expo(&run.ok_section("metrics-1").text);
    for (drive, _, class, transport, rate) in DRIVES {
        let kname = kname(drive);
        let d = [("drive", drive)];
        assert_eq!(
            v(&e1, "driveprobe_drive_up", &d, &log1),
            1.0,
            "expected {drive} ({kname}) up with no config; log:\n{log1}"
        );
        assert_eq!(
            v(
                &e1,
                "driveprobe_drive_class",
                &[("drive", drive), ("class", class)],
                &log1
            ),
            1.0,
            "expected {drive} ({kname}) in class {class}"
        );
        let info = e1.find("driveprobe_drive_info", &d);
        assert_eq!(
            info.len(),
            1,
            "expected one driveprobe_drive_info for {drive}"
        );
        // The health reader's transport, else discovery's (virtio has no health reader).
        let info_transport = transport;
        assert_eq!(
            info[0].labels.get("transport").map(String::as_str),
            Some(info_transport),
            "expected {drive} on transport {transport}: {:?}",
            info[0].labels
        );
        assert_eq!(
            info[0].labels.get("serial").map(String::as_str),
            Some(drive),
            "expected {drive}'s serial label: {:?}",
            info[0].labels
        );
        assert_eq!(
            v(
                &e1,
                "driveprobe_probe_rate_iops",
                &[("drive", drive), ("probe", CANARY)],
                &log1
            ),
            rate,
            "expected {drive}'s canary at the {class} rate"
        );
        assert!(
            v(
                &e1,
                "driveprobe_probe_ops_total",
                &[("drive", drive), ("probe", CANARY), ("op", "read")],
                &log1
            ) >= 2.0,
            "expected {drive}'s canary to have read"
        );
        // QEMU's AHCI emulation now and then aborts an NCQ read issued beside a SMART
        // command (the guest kernel logs "READ FPDMA QUEUED ... ABRT"): not counted
        // against the SATA disks here.
        for op in ["read", "write"]
            .into_iter()
            .filter(|_| transport != "sata")
        {
            if let Some(errors) = e1.value(
                "driveprobe_probe_errors_total",
                &[("drive", drive), ("probe", CANARY), ("op", op)],
            ) {
                assert_eq!(errors, 0.0, "expected no {op} errors on {drive}");
            }
        }
        assert_eq!(
            e1.value(
                "driveprobe_probe_ops_total",
                &[("drive", drive), ("probe", CANARY), ("op", "write")]
            )
            .unwrap_or(0.0),
            0.0,
            "expected no writes by {drive}'s canary"
        );
        assert_eq!(
            e1.value("driveprobe_self_written_bytes_total", &d)
                .unwrap_or(0.0),
            0.0,
            "expected nothing written to {drive}"
        );
    }
    assert_eq!(
        run.lines_starting("=== DAEMON1 EXIT"),
        ["=== DAEMON1 EXIT 0"],
        "expected the no-config daemon to stop cleanly; log:\n{log1}"
    );
    // Only the hdd is asked whether it sleeps (the virtio disk says it rotates in sysfs;
    // its class says not), and it answers.
    let asked: Vec<&str> = log1
        .lines()
        .filter(|l| l.contains("asks it whether it sleeps"))
        .collect();
    assert!(
        asked.len() == 1 && asked[0].contains(HDD_SERIAL) && asked[0].contains("active/idle"),
        "expected one 'asks it whether it sleeps' line, for {HDD_SERIAL}, answered active/idle: {asked:?}"
    );
    // The API says the same, with where each drive was found.
    let api = run.ok_section("api-1").json();
    let entries: Vec<&Value> = match &api {
        Value::Array(a) => a.iter().collect(),
        Value::Object(o) => o
            .get("drives")
            .and_then(Value::as_array)
            .map(|a| a.iter().collect())
            .unwrap_or_default(),
        _ => Vec::new(),
    };
    for (drive, _, class, transport, _) in DRIVES {
        let kname = kname(drive);
        let e = entries
            .iter()
            .find(|e| e["name"] == drive || e["drive"] == drive)
            .unwrap_or_else(|| panic!("expected {drive} in /api/v1/drives: {api}"));
        let d = &e["discovered"];
        assert_eq!(
            (
                d["class"].as_str(),
                d["transport"].as_str(),
                d["kernel_name"].as_str()
            ),
            (Some(class), Some(transport), Some(kname.as_str())),
            "expected {drive}'s discovered entry in /api/v1/drives: {e}"
        );
        // A virtio disk has no health to read: not applicable, not a failure on every
        // poll; the others are read (or not read yet), never not applicable.
        let kind = e["health_state"]["kind"].as_str();
        if transport == "virtio" {
            assert_eq!(
                kind,
                Some("not_applicable"),
                "expected {drive}'s health not applicable: {e}"
            );
        } else {
            assert_ne!(
                kind,
                Some("not_applicable"),
                "expected {drive}'s health applicable: {e}"
            );
        }
    }
    // `driveprobe discover --json` says the same of the four.
    let disc = run.ok_section("discover").json();
    for (drive, _, class, transport, rate) in DRIVES {
        let kname = kname(drive);
        let w = disc["watched"]
            .as_array()
            .and_then(|a| a.iter().find(|w| w["name"] == drive))
            .unwrap_or_else(|| {
                panic!("expected {drive} watched in `driveprobe discover --json`: {disc}")
            });
        assert_eq!(
            (
                w["kernel_name"].as_str(),
                w["class"].as_str(),
                w["transport"].as_str(),
                w["canary_rate_iops"].as_f64()
            ),
            (Some(kname.as_str()), Some(class), Some(transport), Some(rate)),
            "expected `driveprobe discover --json` to say {drive} is {kname}, {class}, {transport}, {rate} IOPS: {w}"
        );
    }

    // 2. Health, measured rates, hot-plug.
    let log2 = run.section("log2").text.clone();
    assert_eq!(
        run.ok_section("check").rc,
        0,
        "expected the phase-2 config to check"
    );
    let a = expo(&run.ok_section("metrics-2a").text);
    let b = expo(&run.ok_section("metrics-2b").text);
    let stamp = |name: &str| -> f64 {
        let tag = format!("=== {name} ");
        run.lines_starting(&tag)
            .first()
            .and_then(|l| l.trim_start_matches(tag.as_str()).trim().parse().ok())
            .unwrap_or_else(|| panic!("expected a `{tag}` line"))
    };
    let (a0, a1, b0, b1) = (
        stamp("RATE-A0"),
        stamp("RATE-A1"),
        stamp("RATE-B0"),
        stamp("RATE-B1"),
    );
    // The counters move once a canary interval (1 s): each scrape sees them as of the
    // last interval's end, up to a second before it was answered.
    let (longest, shortest) = (b1 - a0 + 1.0, (b0 - a1 - 1.0).max(0.0));
    let span = b0 - a0;
    // Each canary's reads and the time it could not issue arrivals, as the daemon
    // measured it: inside its (QD1) reads, and waiting for a CPU. A SATA read the
    // emulated AHCI aborts holds the port through the guest kernel's error handling for
    // seconds; a canary makes up at most a few late arrivals after such a stall.
    let measured: Vec<(f64, f64, f64)> = DRIVES
        .iter()
        .map(|&(drive, ..)| {
            let l = [("drive", drive), ("probe", CANARY), ("op", "read")];
            let ops = v(&b, "driveprobe_probe_ops_total", &l, &log2)
                - v(&a, "driveprobe_probe_ops_total", &l, &log2);
            let delta = |name: &str, labels: &[(&str, &str)]| {
                b.value(name, labels).unwrap_or(0.0) - a.value(name, labels).unwrap_or(0.0)
            };
            let held = delta("driveprobe_probe_latency_seconds_sum", &l)
                + delta(
                    "driveprobe_probe_cpu_wait_seconds_total",
                    &[("drive", drive), ("probe", CANARY)],
                );
            (ops, held, (shortest - held).max(0.0))
        })
        .collect();
    // What the guest could do in this window: the best share of its arrivals a canary
    // issued while free to, among the fast ones (150 arrivals or more: nvme and sata).
    // A host that takes the emulator's CPU away stops the guest's vCPU, which the guest
    // cannot see (TCG reports no steal time); a canary drops the arrivals it missed by
    // more than 4 gaps, so a stall costs the fast canaries alike (the slow ones ride it
    // out), and none may fall behind by more than half of the best.
    let shares: Vec<f64> = DRIVES
        .iter()
        .zip(&measured)
        .filter(|(&(.., rate), &(_, _, free))| rate * free >= 150.0)
        .map(|(&(.., rate), &(ops, _, free))| ops / (rate * free))
        .collect();
    let best = shares.iter().copied().fold(0.0_f64, f64::max).min(1.0);
    // Below half only with the evidence of stalls that drop arrivals: the nvme canary
    // issued an I/O more than 4 of its gaps (80 ms) late in its window.
    let nvme_stall_max = b
        .value(
            "driveprobe_probe_host_stall_seconds",
            &[("drive", NVME_SERIAL), ("probe", CANARY), ("quantile", "1")],
        )
        .unwrap_or(0.0);
    if shares.is_empty() {
        eprintln!("vm discovery: no canary was free for 150 arrivals; no lower rate bound");
    } else {
        assert!(
            best >= 0.5 || (best > 0.0 && nvme_stall_max >= 4.0 / 50.0),
            "the fast canaries issued at most {:.0}% of their arrivals while free to, with \
             no stall of the host to account for it (the nvme canary's longest {nvme_stall_max} \
             s); log:\n{log2}",
            best * 100.0
        );
    }
    for (&(drive, _, class, _, rate), &(ops, held, free)) in DRIVES.iter().zip(&measured) {
        let kname = kname(drive);
        // A counter is published with the first I/O after an interval's end: a canary
        // thread the host stalled publishes late by as much, so the first scrape may see
        // its counters older than a second. The longest stall in the window, as the
        // canary measured it, widens the window the reads can come from.
        let stall = [&a, &b]
            .iter()
            .filter_map(|e| {
                e.value(
                    "driveprobe_probe_host_stall_seconds",
                    &[("drive", drive), ("probe", CANARY), ("quantile", "1")],
                )
            })
            .fold(0.0_f64, f64::max);
        // The canaries' arrivals are Poisson (the default): the count in a window is
        // random around the rate times the window, with a standard deviation of its
        // square root. At most the mean over the longest window the two scrapes can span
        // and 5 deviations, plus the few late arrivals a canary issues after a stall. At
        // least half of the best share of the time it was free: for the fast canaries
        // (150 arrivals or more) the other half is 6 deviations or more; the slow ones
        // (1 and 5 IOPS) are held to 5 deviations below it, and to going on over the
        // whole phase below. Over 12 s, no count tells 1 IOPS from 2: the hdd's rate is
        // the gauge checked above.
        let (most, least) = (rate * (longest + stall), rate * 0.5 * best * free);
        let hi = most + 5.0 * most.sqrt() + 5.0;
        let lo = if rate * free >= 150.0 {
            least - 2.0
        } else {
            least - 5.0 * least.sqrt() - 2.0
        };
        assert!(
            ops <= hi && ops >= lo,
            "expected {drive} ({kname}, {class}) at about {rate} IOPS, Poisson: {ops} reads \
             between scrapes {a0:.1}..{a1:.1} s and {b0:.1}..{b1:.1} s of uptime, outside \
             [{lo:.0}, {hi:.0}]; {held:.2} s of them inside reads or waiting for a CPU, its \
             longest stall {stall:.3} s; the best canary issued {:.0}% of its arrivals",
            best * 100.0
        );
        eprintln!(
            "vm discovery: {drive} ({class}) {:.2} IOPS measured, {rate} set, \
             {held:.2} s held",
            ops / span
        );
        if class != "virtual" {
            assert_eq!(
                v(
                    &b,
                    "driveprobe_collector_success",
                    &[("drive", drive), ("collector", "health")],
                    &log2
                ),
                1.0,
                "expected {drive}'s health read; log:\n{log2}"
            );
        }
    }
    // The hot-added disk: up within two scans of its device node appearing.
    let dev = fields(&run.console, "=== HOTADD-DEV ");
    let upf = fields(&run.console, "=== HOTADD-UP ");
    let e3 = expo(&run.ok_section("metrics-3").text);
    assert_eq!(
        e3.value("driveprobe_drive_up", &[("drive", HOT_SERIAL)]),
        Some(1.0),
        "expected the hot-added virtio disk {HOT_SERIAL} up; log:\n{log2}"
    );
    assert_eq!(
        e3.value(
            "driveprobe_drive_class",
            &[("drive", HOT_SERIAL), ("class", "virtual")]
        ),
        Some(1.0),
        "expected the hot-added disk in class virtual"
    );
    let scans = num(&upf, "scans", "HOTADD-UP") - num(&dev, "scans", "HOTADD-DEV");
    let took = num(&upf, "t", "HOTADD-UP") - num(&dev, "t", "HOTADD-DEV");
    eprintln!("vm discovery: hot-added disk up after {scans} scans, {took:.1} s");
    // A scan may be under way when the device appears (the host's QMP hot-add can take
    // longer than a rescan interval under load): it ends without the disk, and the next
    // one, the hot-plug watch's, finds it. Two scans, never a third.
    assert!(
        scans <= 2.0,
        "expected the hot-added disk up within the scan under way when its device appeared \
         and the next one, took {scans} scans ({took:.1} s, rescan every {RESCAN_SECONDS} s)"
    );
    // Removed: down within two scans, its series kept (drop_after is 1 h).
    let gone = fields(&run.console, "=== HOTDEL-DEV ");
    assert_eq!(
        gone.get("gone").map(String::as_str),
        Some("yes"),
        "expected /dev/vdb gone from the guest after device_del"
    );
    let down = fields(&run.console, "=== HOTDEL-DOWN ");
    let e4 = expo(&run.ok_section("metrics-4").text);
    assert_eq!(
        e4.value("driveprobe_drive_up", &[("drive", HOT_SERIAL)]),
        Some(0.0),
        "expected the removed disk {HOT_SERIAL} at driveprobe_drive_up 0; log:\n{log2}"
    );
    let scans = num(&down, "scans", "HOTDEL-DOWN") - num(&gone, "scans", "HOTDEL-DEV");
    assert!(
        scans <= 2.0,
        "expected the removed disk down within the scan under way when it went and the next \
         one, took {scans} scans"
    );
    for (drive, .., rate) in DRIVES {
        assert_eq!(
            e4.value("driveprobe_drive_up", &[("drive", drive)]),
            Some(1.0),
            "expected {drive} still up after the hot-plug"
        );
        // Every canary went on through the hot-plug: from the first rate scrape to this
        // one, 20 s or more even at 1 IOPS (no read in that time: e^-20).
        let l = [("drive", drive), ("probe", CANARY), ("op", "read")];
        let t4 = num(&down, "t", "HOTDEL-DOWN");
        if (t4 - a1) * rate >= 20.0 {
            assert!(
                v(&e4, "driveprobe_probe_ops_total", &l, &log2)
                    > v(&a, "driveprobe_probe_ops_total", &l, &log2),
                "expected {drive}'s canary to go on over {:.0} s of phase 2; log:\n{log2}",
                t4 - a1
            );
        }
    }
    assert_eq!(
        run.lines_starting("=== DAEMON2 EXIT"),
        ["=== DAEMON2 EXIT 0"],
        "log:\n{log2}"
    );

    // Nothing was written to any disk: no block allocated in any sparse image.
    for img in ["nvme.img", "sata.img", "hdd.img", "virtio.img", "hot.img"] {
        let p = images.path().join(img);
        assert_eq!(
            allocated(&p),
            0,
            "expected {img} untouched (sparse, no block allocated): something wrote to it"
        );
    }
}

/// BENCHMARKS.md: what the class-default canaries cost the guest's emulated drives
/// (`scripts/bench-canary-cost` on each disk, in the guest). Ignored: it measures, it does
/// not test. `cargo test --profile ci --features system-tests --test vm discovery:: -- --ignored --nocapture`.
#[test]
#[ignore]
fn measure_canary_cost_in_the_guest() {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/bench-canary-cost");
    let secs = std::env::var("CANARY_SECONDS").unwrap_or_else(|_| "30".into());
    let payload = format!(
        ". /lib/vm.sh\nwait_dev /dev/sdb\nwait_dev /dev/vda\nfor d in nvme0n1 sda sdb vda; do \
         run cost-$d env CANARY_SECONDS={secs} MAX_SECONDS=10 DRIVEPROBE=driveprobe \
         sh /bench-canary-cost /dev/$d; done\n"
    );
    let run = Vm::builder()
        .sata_rotation_rate(1)
        .sata_hdd(1 << 30)
        .virtio(1 << 30)
        .file(&script, "/bench-canary-cost")
        .timeout(Duration::from_secs(1800))
        .payload(&payload)
        .boot();
    for d in ["nvme0n1", "sda", "sdb", "vda"] {
        println!("{}", run.ok_section(&format!("cost-{d}")).text);
    }
}
