//! The daemon on real (emulated) drives, inside a QEMU guest: an NVMe found by its serial
//! although the config's path hint names another disk, a SATA disk read through smartctl,
//! and a drive that is not there. Canaries run read-only on the raw devices; health is
//! read by ioctl and smartctl; a critical warning injected through QMP while the daemon
//! runs reaches `/metrics` as the NVMe's critical warning and a failing verdict.

use crate::common;
use crate::harness;

use common::daemon::Exposition;
use harness::{Vm, NVME_QOM};
use serde_json::json;

const PAYLOAD: &str = r#"
. /lib/vm.sh
ip link set lo up 2>/dev/null || ifconfig lo 127.0.0.1 up
mkdir -p /tmp/dp
cat > /tmp/d.toml <<'EOF'
state_dir = "/tmp/dp"
discovery.enabled = false
health_interval = "2s"

[[drive]]
name = "nvme"
serial = "TESTSN01"
# a stale path hint: the serial decides
path = "/dev/sda"

[[drive]]
name = "sata"
serial = "QM00005"

[[drive]]
name = "gone"
serial = "NOT-IN-THIS-VM"

[[probe]]
name = "rd"
drives = ["*"]
workload = { rate_iops = 50 }
EOF
run check driveprobe check-config /tmp/d.toml
driveprobe daemon --config /tmp/d.toml >/tmp/out 2>/tmp/err &
DP=$!
scrape() { wget -q -O - http://127.0.0.1:39480/metrics 2>/dev/null; }
i=0
while [ $i -lt 600 ]; do
  m=$(scrape)
  echo "$m" | grep -q '^driveprobe_health_critical_warning{drive="nvme"}' &&
  echo "$m" | grep -q '^driveprobe_health_temperature_celsius{drive="sata"}' &&
  echo "$m" | grep -q '^driveprobe_probe_ops_total{drive="nvme"[^}]*} [1-9]' &&
  echo "$m" | grep -q '^driveprobe_probe_ops_total{drive="sata"[^}]*} [1-9]' && break
  sleep 0.2; i=$((i + 1))
done
[ $i -lt 600 ] || echo "=== GAVE UP waiting for both drives' health and canary series"
runout metrics-1 scrape
ready inject
wait_nvme_cw 600
i=0
while [ $i -lt 600 ]; do
  scrape | grep -q '^driveprobe_health_critical_warning{drive="nvme"} 4' && break
  sleep 0.2; i=$((i + 1))
done
[ $i -lt 600 ] || echo "=== GAVE UP waiting for the daemon to export the critical warning"
# at least two more canary intervals on every drive
sleep 2.5
runout metrics-2 scrape
kill -TERM $DP
wait $DP
echo "=== DAEMON EXIT $?"
run log cat /tmp/err /tmp/out
"#;

fn v(e: &Exposition, name: &str, labels: &[(&str, &str)]) -> f64 {
    e.value(name, labels)
        .unwrap_or_else(|| panic!("no {name}{labels:?} in:\n{}", e.text))
}

#[test]
fn vm_daemon_on_real_drives_with_a_runtime_critical_warning() {
    let mut vm = Vm::builder()
        .qmp()
        .timeout(std::time::Duration::from_secs(300))
        .payload(PAYLOAD)
        .start();
    vm.wait_for("=== READY inject");
    vm.qmp()
        .qom_set(NVME_QOM, "smart_critical_warning", json!(4))
        .unwrap_or_else(|e| panic!("{e}"));
    let run = vm.finish();
    let log = run.section("log").text.clone();
    assert_eq!(run.ok_section("check").rc, 0);
    let e1 = Exposition::parse(&run.ok_section("metrics-1").text);

    // Found by serial, identity from the NVMe Identify data.
    assert_eq!(
        v(&e1, "driveprobe_drive_up", &[("drive", "nvme")]),
        1.0,
        "log:\n{log}"
    );
    let info = e1.find("driveprobe_drive_info", &[("drive", "nvme")]);
    assert_eq!(info.len(), 1);
    assert_eq!(info[0].labels["serial"], "TESTSN01");
    assert_eq!(info[0].labels["transport"], "nvme");
    assert!(
        info[0].labels["model"].contains("QEMU"),
        "{:?}",
        info[0].labels
    );
    assert!(!info[0].labels["firmware"].is_empty());
    assert_eq!(
        v(
            &e1,
            "driveprobe_collector_success",
            &[("drive", "nvme"), ("collector", "health")]
        ),
        1.0
    );
    assert_eq!(
        v(
            &e1,
            "driveprobe_health_critical_warning",
            &[("drive", "nvme")]
        ),
        0.0
    );
    assert!(
        v(
            &e1,
            "driveprobe_health_temperature_celsius",
            &[("drive", "nvme")]
        ) > 0.0
    );
    assert_eq!(
        v(
            &e1,
            "driveprobe_health_verdict",
            &[("drive", "nvme"), ("verdict", "ok")]
        ),
        1.0
    );
    // The SATA disk through smartctl.
    let sata = e1.find("driveprobe_drive_info", &[("drive", "sata")]);
    assert_eq!(sata[0].labels["transport"], "sata", "{:?}", sata[0].labels);
    assert_eq!(
        v(
            &e1,
            "driveprobe_collector_success",
            &[("drive", "sata"), ("collector", "health")]
        ),
        1.0
    );
    // Read canaries on both raw devices; none on the absent drive. QEMU's AHCI now and
    // then aborts an NCQ read issued beside a SMART command: the guest kernel logs each
    // ("failed command: READ FPDMA QUEUED"), and the SATA canary may count those as errors
    // and no others. The NVMe has none.
    let aborted_reads = run
        .kernel_log
        .lines()
        .filter(|l| l.contains("failed command: READ"))
        .count() as f64;
    for d in ["nvme", "sata"] {
        assert!(
            v(
                &e1,
                "driveprobe_probe_ops_total",
                &[("drive", d), ("op", "read")]
            ) > 0.0
        );
        let errors = v(
            &e1,
            "driveprobe_probe_errors_total",
            &[("drive", d), ("op", "read")],
        );
        let allowed = if d == "sata" { aborted_reads } else { 0.0 };
        assert!(
            errors <= allowed,
            "{errors} read errors on {d}, {allowed} reads the kernel saw aborted; log:\n{log}\nkernel:\n{}",
            run.kernel_log
        );
        assert_eq!(
            v(&e1, "driveprobe_self_written_bytes_total", &[("drive", d)]),
            0.0,
            "read-only"
        );
    }
    assert_eq!(v(&e1, "driveprobe_drive_up", &[("drive", "gone")]), 0.0);
    assert!(e1
        .value(
            "driveprobe_probe_ops_total",
            &[("drive", "gone"), ("op", "read")]
        )
        .is_none_or(|x| x == 0.0));

    // The warning injected while the daemon runs.
    let e2 = Exposition::parse(&run.ok_section("metrics-2").text);
    assert_eq!(
        v(
            &e2,
            "driveprobe_health_critical_warning",
            &[("drive", "nvme")]
        ),
        4.0,
        "log:\n{log}"
    );
    assert_eq!(
        v(
            &e2,
            "driveprobe_health_verdict",
            &[("drive", "nvme"), ("verdict", "failing")]
        ),
        1.0
    );
    assert_eq!(
        v(
            &e2,
            "driveprobe_health_verdict",
            &[("drive", "nvme"), ("verdict", "ok")]
        ),
        0.0
    );
    // The other drives' series went on.
    assert!(
        v(
            &e2,
            "driveprobe_probe_ops_total",
            &[("drive", "sata"), ("op", "read")]
        ) > v(
            &e1,
            "driveprobe_probe_ops_total",
            &[("drive", "sata"), ("op", "read")]
        )
    );
    assert_eq!(
        v(
            &e2,
            "driveprobe_collector_success",
            &[("drive", "sata"), ("collector", "health")]
        ),
        1.0
    );
    let exit = run.lines_starting("=== DAEMON EXIT");
    assert_eq!(exit, vec!["=== DAEMON EXIT 0"], "log:\n{log}");
}

/// A rotational SATA disk and a solid-state one, each listed, each with a 1 IOPS canary.
/// After the canaries ran, the rotational disk is told to spin down (ATA STANDBY
/// IMMEDIATE through `smartctl -s standby,now`), and smartctl is asked, without waking
/// it, whether it sleeps (`smartctl -n standby`: exit 2 when it does).
const STANDBY_PAYLOAD: &str = r#"
. /lib/vm.sh
ip link set lo up 2>/dev/null || ifconfig lo 127.0.0.1 up
wait_dev /dev/sdb
# The two AHCI ports are probed in parallel: either disk may be sda. The rotational one
# is found by its model.
run disks sh -c 'for d in /sys/block/sd*; do echo "$(basename $d) rotational=$(cat $d/queue/rotational) model=$(cat $d/device/model)"; done'
HDD=/dev/$(for d in /sys/block/sd*; do grep -q SPINNING $d/device/model && basename $d; done)
mkdir -p /tmp/dp
cat > /tmp/d.toml <<'EOF2'
state_dir = "/tmp/dp"
discovery.enabled = false
health_interval = "30s"

[[drive]]
name = "hdd"
serial = "HDDSN001"

[[drive]]
name = "ssd"
serial = "QM00005"

[[probe]]
name = "rd"
drives = ["*"]
# Evenly spaced: the window below must hold at least one read of each canary.
workload = { rate_iops = 1, arrival = "linear" }
EOF2
RUST_LOG=driveprobe=info driveprobe daemon --config /tmp/d.toml >/tmp/out 2>/tmp/err &
DP=$!
scrape() { wget -q -O - http://127.0.0.1:39480/metrics 2>/dev/null; }
i=0
while [ $i -lt 600 ]; do
  m=$(scrape)
  echo "$m" | grep -q '^driveprobe_probe_ops_total{drive="hdd"[^}]*op="read"[^}]*} [3-9]' &&
  echo "$m" | grep -q '^driveprobe_probe_ops_total{drive="ssd"[^}]*op="read"[^}]*} [3-9]' && break
  sleep 0.2; i=$((i + 1))
done
[ $i -lt 600 ] || echo "=== GAVE UP waiting for three reads by each canary"
runout metrics-1 scrape
run spin-down smartctl -s standby,now $HDD
run asleep-1 sh -c 'smartctl -n standby -i '$HDD' >/dev/null; echo "smartctl_n_standby_exit=$?"'
# three of the hdd canary's intervals (1 s each): checked at least twice meanwhile
sleep 3.5
run asleep-2 sh -c 'smartctl -n standby -i '$HDD' >/dev/null; echo "smartctl_n_standby_exit=$?"'
runout metrics-2 scrape
kill -TERM $DP
wait $DP
echo "=== DAEMON EXIT $?"
run log cat /tmp/err /tmp/out
"#;

/// smartctl's exit status in a section of [`STANDBY_PAYLOAD`].
fn smartctl_n_exit(s: &harness::Section) -> i32 {
    s.text
        .lines()
        .find_map(|l| l.trim().strip_prefix("smartctl_n_standby_exit="))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no smartctl exit status in:\n{}", s.text))
}

/// Issue 18: a rotational disk's canary asks the disk whether it sleeps (ATA CHECK POWER
/// MODE, through HDIO_DRIVE_CMD) before its I/O, and pauses while it does; a
/// solid-state disk is never asked.
///
/// What the guest can show: the question on an emulated SATA disk, answered "active/idle"
/// without an error, on the rotational disk only, with its canary running. It cannot show
/// a sleeping disk: QEMU's IDE emulation takes STANDBY IMMEDIATE as a no-op and answers
/// CHECK POWER MODE with FFh (active or idle) always, so `smartctl -n standby` never sees
/// it asleep. The test holds the canary's state to what smartctl says: paused with the
/// standby reason when smartctl sees the disk asleep (exit 2), running otherwise. On an
/// emulation that did spin down, the pause would be checked here; the pause itself is
/// checked on decoded answers by the unit tests of `daemon::standby`.
#[test]
fn vm_a_rotational_disk_s_canary_asks_whether_it_sleeps() {
    let run = Vm::builder()
        .sata_rotation_rate(1)
        .sata_hdd(1 << 30)
        .timeout(std::time::Duration::from_secs(300))
        .payload(STANDBY_PAYLOAD)
        .boot();
    let log = run.section("log").text.clone();
    // One solid-state disk (rotation_rate=1), one rotational (rotation_rate=7200).
    let disks = run.ok_section("disks").text.clone();
    let rot = |model: &str| {
        disks
            .lines()
            .find(|l| l.contains(model))
            .and_then(|l| {
                l.split_whitespace()
                    .find_map(|f| f.strip_prefix("rotational="))
            })
            .unwrap_or_else(|| panic!("expected a disk of model {model} in the guest:\n{disks}"))
            .to_string()
    };
    assert_eq!(
        (rot("SPINNING").as_str(), rot("HARDDISK").as_str()),
        ("1", "0"),
        "expected the rotation_rate=7200 disk rotational and the rotation_rate=1 one not:\n{disks}"
    );
    let e1 = Exposition::parse(&run.ok_section("metrics-1").text);
    for d in ["hdd", "ssd"] {
        assert_eq!(
            v(&e1, "driveprobe_probe_running", &[("drive", d)]),
            1.0,
            "expected the {d} canary running before the spin-down; log:\n{log}"
        );
        assert_eq!(
            v(
                &e1,
                "driveprobe_probe_errors_total",
                &[("drive", d), ("op", "read")]
            ),
            0.0
        );
    }
    // The rotational disk was asked, and answered; the solid-state one never.
    let asked: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("asks it whether it sleeps"))
        .collect();
    assert_eq!(
        asked.len(),
        1,
        "expected one 'asks it whether it sleeps' line (the hdd's); log:\n{log}"
    );
    assert!(
        asked[0].contains("drive=\"hdd\"") || asked[0].contains("drive=hdd"),
        "{}",
        asked[0]
    );
    assert!(
        asked[0].contains("mode=\"active/idle\"") || asked[0].contains("mode=active/idle"),
        "expected the emulated disk to answer active/idle: {}",
        asked[0]
    );
    assert!(
        !log.contains("cannot be asked whether it sleeps"),
        "the emulated SATA disk refused CHECK POWER MODE; log:\n{log}"
    );

    // After the spin-down request: the canary's state follows what smartctl sees.
    let e2 = Exposition::parse(&run.ok_section("metrics-2").text);
    let asleep = smartctl_n_exit(run.section("asleep-2")) == 2;
    let paused = v(&e2, "driveprobe_probe_paused", &[("drive", "hdd")]);
    assert_eq!(
        paused,
        if asleep { 1.0 } else { 0.0 },
        "smartctl says the disk {} asleep; expected the hdd canary {}; log:\n{log}",
        if asleep { "is" } else { "is not" },
        if asleep { "paused" } else { "running" }
    );
    if asleep {
        assert!(log.contains("the disk is in standby"), "log:\n{log}");
    } else {
        // What QEMU does (see the doc comment): the canary went on, without errors.
        assert!(
            v(
                &e2,
                "driveprobe_probe_ops_total",
                &[("drive", "hdd"), ("op", "read")]
            ) > v(
                &e1,
                "driveprobe_probe_ops_total",
                &[("drive", "hdd"), ("op", "read")]
            )
        );
        eprintln!(
            "vm standby: QEMU's emulated disk does not sleep (smartctl -n standby exit {}, {})",
            smartctl_n_exit(run.section("asleep-1")),
            smartctl_n_exit(run.section("asleep-2"))
        );
    }
    assert_eq!(
        v(
            &e2,
            "driveprobe_probe_errors_total",
            &[("drive", "hdd"), ("op", "read")]
        ),
        0.0
    );
    assert_eq!(
        run.lines_starting("=== DAEMON EXIT"),
        vec!["=== DAEMON EXIT 0"],
        "log:\n{log}"
    );
}
