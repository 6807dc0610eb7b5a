//! Coordinated omission: in a rate-limited (open-loop) run, latency counts from the time
//! an I/O was scheduled, so a stall cannot hide. The stall here is the whole process
//! being stopped (SIGSTOP) for 300 ms: to the engine it looks exactly like a device that
//! answers nothing for 300 ms.

use crate::common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn a_stall_shows_in_open_loop_latency() {
    let path = format!("/dev/shm/dp-test-co-{}", std::process::id());
    let _ = std::fs::remove_file(&path);
    let child = Command::new(env!("CARGO_BIN_EXE_driveprobe"))
        .args([
            "bench",
            &path,
            "--size=8m",
            "--rw=randread",
            "--iodepth=4",
            "--rate-iops=1000",
            "--runtime=3",
            "--time_based",
            "--output-format=json",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id() as i32;
    // The stall must come during the run, not while the process starts or creates its
    // file (a busy host can take a while for that): wait for the engine's worker thread,
    // which exists only while the run does, then let the schedule go a moment.
    let t0 = Instant::now();
    while common::threads_named(pid, "dp-worker-0").is_empty() {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "the run did not start within 60 s"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(500));
    let stop = Command::new("kill")
        .args(["-STOP", &pid.to_string()])
        .status();
    std::thread::sleep(Duration::from_millis(300));
    let cont = Command::new("kill")
        .args(["-CONT", &pid.to_string()])
        .status();
    let out = child.wait_with_output().unwrap();
    let _ = std::fs::remove_file(&path);
    assert!(stop.unwrap().success() && cont.unwrap().success());
    common::assert_ok(&out, "driveprobe bench");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let read = &v["read"];
    let ops = read["ops"].as_u64().unwrap();
    let max = read["lat_ns"]["max"].as_u64().unwrap();
    let p99 = read["lat_ns"]["percentiles"]["p99"].as_u64().unwrap();
    // The schedule catches up after the stall: 3000 I/Os due in 3 s all the same, each
    // counted or (issued too late to complete in the run, when the host stalled it near
    // the end too) counted as missed.
    let missed = v["due_missed_ops"].as_u64().unwrap();
    assert!(
        (2999..=3001).contains(&(ops + missed)),
        "ops {ops} + missed {missed}"
    );
    // The engine saw the stall as lateness: it issued some I/O at least 250 ms late.
    let late = v["issue_late_max_seconds"].as_f64().unwrap();
    assert!(late >= 0.25, "latest issue {late}s behind");
    assert!(
        ops as f64 >= 3000.0 - 1000.0 * late - 50.0,
        "ops {ops}, late {late}"
    );
    // The I/O due when the stall began waited the whole stall...
    assert!(
        max >= 250_000_000,
        "max latency {max} ns hides the 300 ms stall"
    );
    // ...and so did, in part, the ~300 due during it: 10% of the run, so p99 is deep in it.
    assert!(p99 >= 20_000_000, "p99 {p99} ns hides the stall");
}
