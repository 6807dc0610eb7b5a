//! The daemon on real (emulated) drives, inside a QEMU guest: an NVMe found by its serial
//! although the config's path hint names another disk, a SATA disk read through smartctl,
//! and a drive that is not there. Canaries run read-only on the raw devices; health is
//! read by ioctl and smartctl; a critical warning injected through QMP while the daemon
//! runs reaches `/metrics` as the NVMe's critical warning and a failing verdict.

mod common;
#[path = "vm/harness.rs"]
mod harness;

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
runout metrics-1 scrape
ready inject
wait_nvme_cw 600
i=0
while [ $i -lt 600 ]; do
  scrape | grep -q '^driveprobe_health_critical_warning{drive="nvme"} 4' && break
  sleep 0.2; i=$((i + 1))
done
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
    // Read canaries on both raw devices; none on the absent drive.
    for d in ["nvme", "sata"] {
        assert!(
            v(
                &e1,
                "driveprobe_probe_ops_total",
                &[("drive", d), ("op", "read")]
            ) > 0.0
        );
        assert_eq!(
            v(
                &e1,
                "driveprobe_probe_errors_total",
                &[("drive", d), ("op", "read")]
            ),
            0.0
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
