//! The `oltp` suite end to end through the real binary: sysbench OLTP on a private MariaDB
//! whose datadir sits beside a file target in a temp dir on a real filesystem (not
//! /dev/shm: InnoDB's O_DIRECT fails on tmpfs). Needs Debian's mariadb-server and sysbench
//! (scripts/test installs them). The written-bytes test runs on ext4 on a loop device over a
//! file in /dev/shm and needs root.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common;

/// A MariaDB and sysbench at a time: the machine has two cores.
static SERIAL: Mutex<()> = Mutex::new(());

fn need_programs() {
    for (p, pkg) in [
        ("/usr/sbin/mariadbd", "mariadb-server"),
        ("/usr/bin/mariadb-install-db", "mariadb-server"),
        ("/usr/bin/sysbench", "sysbench"),
    ] {
        assert!(
            Path::new(p).exists(),
            "needs {p}: apt-get install {pkg} (scripts/test installs it)"
        );
    }
}

/// A temp dir on the disk the target dir is on (never tmpfs).
fn scratch() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("dp-oltp-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap()
}

fn no_server_left(dir: &Path) {
    common::assert_nothing_left_running(&dir.to_string_lossy());
    let datadirs: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.to_string_lossy().contains("driveprobe-oltp-"))
        .collect();
    assert!(datadirs.is_empty(), "datadir left behind: {datadirs:?}");
}

fn bench(target: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_driveprobe"));
    c.arg("bench")
        .arg(target)
        .args([
            "--size=16m",
            "--suite=oltp",
            "--scale=quick",
            "--output-format=json",
        ])
        .stdin(Stdio::null());
    c
}

fn schema_errors(doc: &Value) -> Vec<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/result.schema.json");
    let schema: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let v = jsonschema::validator_for(&schema).unwrap();
    v.iter_errors(doc)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect()
}

#[test]
fn oltp_at_quick_scale_measures_two_and_eight_threads_and_leaves_nothing() {
    need_programs();
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let dir = scratch();
    let t0 = Instant::now();
    // A relative target, as a user in that directory would type it: mariadbd changes
    // into its datadir, so every path it is given must be absolute.
    let out = bench(Path::new("./probe.dat"))
        .current_dir(dir.path())
        .output()
        .unwrap();
    let took = t0.elapsed();
    common::assert_ok(&out, "driveprobe bench --suite=oltp");
    assert!(took < Duration::from_secs(90), "quick oltp took {took:?}");
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(schema_errors(&doc), Vec::<String>::new());
    assert_eq!(doc["suite"], "oltp");
    assert_eq!(doc["complete"], true);
    let phases = doc["phases"].as_array().unwrap();
    assert_eq!(phases.len(), 1, "{phases:#?}");
    assert_eq!(phases[0]["kind"], "app");
    assert_eq!(phases[0]["app"], "oltp");
    let points = phases[0]["points"].as_array().unwrap();
    let threads: Vec<u64> = points
        .iter()
        .map(|p| p["threads"].as_u64().unwrap())
        .collect();
    assert_eq!(threads, [2, 8]);
    for p in points {
        let f = |k: &str| p[k].as_f64().unwrap_or(f64::NAN);
        assert_eq!(p["workload"], "oltp_read_write");
        assert!(f("ops_per_second") > 0.0, "{p}");
        assert!(f("queries_per_second") > f("ops_per_second"), "{p}");
        assert!(f("lat_mean_ns") > 0.0, "{p}");
        assert!(f("lat_p99_ns") >= f("lat_mean_ns"), "{p}");
        assert!(f("lat_p99_avg_ns") > 0.0, "{p}");
        assert!(f("seconds") >= 2.5, "{p}");
        // InnoDB's data files were opened O_DIRECT (this filesystem takes it).
        assert_eq!(p["direct_io"], true, "{p}");
        let intervals = p["intervals"].as_array().unwrap();
        assert!(intervals.len() >= 2, "{p}");
        assert!(intervals.iter().all(|i| i["lat_p99_ns"].as_f64().is_some()));
        // The run's TPS is the mean of its seconds, near enough.
        let mean: f64 = intervals
            .iter()
            .map(|i| i["ops_per_second"].as_f64().unwrap())
            .sum::<f64>()
            / intervals.len() as f64;
        assert!(
            (mean - f("ops_per_second")).abs() <= 0.35 * f("ops_per_second"),
            "interval mean {mean} against {}",
            f("ops_per_second")
        );
    }
    eprintln!(
        "oltp quick took {took:.1?}: {}",
        points
            .iter()
            .map(|p| format!(
                "{}T {:.0} TPS avg {:.2} ms p99 {:.2} ms",
                p["threads"],
                p["ops_per_second"].as_f64().unwrap(),
                p["lat_mean_ns"].as_f64().unwrap() / 1e6,
                p["lat_p99_ns"].as_f64().unwrap() / 1e6
            ))
            .collect::<Vec<_>>()
            .join("; ")
    );
    no_server_left(dir.path());

    // The daemon's view of the document (what the driveprobe_app_* gauges say, also after
    // a restart, which summarizes the saved documents again).
    let result: driveprobe::protocol::result::SuiteResult =
        serde_json::from_slice(&out.stdout).unwrap();
    let summary = driveprobe::daemon::scheduler::summarize(
        "run-1",
        &result,
        driveprobe::schedule::state::RunStatus::Passed,
        None,
    );
    assert!(summary.points.is_empty());
    let gauges: Vec<(u32, f64, f64, f64)> = summary
        .app_points
        .iter()
        .map(|p| (p.threads, p.ops_per_second, p.latency_mean, p.latency_p99))
        .collect();
    let want: Vec<(u32, f64, f64, f64)> = points
        .iter()
        .map(|p| {
            (
                p["threads"].as_u64().unwrap() as u32,
                p["ops_per_second"].as_f64().unwrap(),
                p["lat_mean_ns"].as_f64().unwrap() / 1e9,
                p["lat_p99_ns"].as_f64().unwrap() / 1e9,
            )
        })
        .collect();
    assert_eq!(gauges, want);
    assert!(summary
        .app_points
        .iter()
        .all(|p| p.workload == "oltp_read_write"));

    // The HTML report draws the oltp charts from the document.
    let doc_path = dir.path().join("oltp.json");
    std::fs::write(&doc_path, &out.stdout).unwrap();
    let html_path = dir.path().join("report.html");
    let rep = Command::new(env!("CARGO_BIN_EXE_driveprobe"))
        .arg("report")
        .arg(&doc_path)
        .arg("-o")
        .arg(&html_path)
        .output()
        .unwrap();
    common::assert_ok(&rep, "driveprobe report");
    let html = std::fs::read_to_string(&html_path).unwrap();
    for id in [
        "chart-app-oltp-tps",
        "chart-app-oltp-lat-mean",
        "chart-app-oltp-lat-p99",
    ] {
        assert!(html.contains(id), "{id} missing from the report");
    }
}

#[test]
fn sigterm_in_the_middle_stops_mariadb_and_removes_the_datadir() {
    need_programs();
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let dir = scratch();
    let mut child = bench(&dir.path().join("probe.dat"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until sysbench is measuring (a run log exists in the datadir).
    let t0 = Instant::now();
    let measuring = loop {
        let found = std::fs::read_dir(dir.path())
            .unwrap()
            .flatten()
            .filter(|e| {
                e.file_name()
                    .to_string_lossy()
                    .starts_with("driveprobe-oltp-")
            })
            .any(|e| e.path().join("run-2.log").exists());
        if found {
            break true;
        }
        if t0.elapsed() > Duration::from_secs(60) || child.try_wait().unwrap().is_some() {
            break false;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(measuring, "the oltp run never reached its measured runs");
    let needle = dir.path().to_string_lossy().to_string();
    assert!(
        common::processes_mentioning(&needle)
            .iter()
            .any(|p| p.contains("mariadbd") || p.contains("mysqld")),
        "no mariadbd running mid-run"
    );
    let pid = child.id().to_string();
    let kill = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    assert!(kill.success());
    let t1 = Instant::now();
    let out = child.wait_with_output().unwrap();
    assert!(
        t1.elapsed() < Duration::from_secs(60),
        "took {:?} to stop",
        t1.elapsed()
    );
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["complete"], false);
    assert!(doc["incomplete_reason"]
        .as_str()
        .unwrap()
        .contains("stopped"));
    assert_eq!(schema_errors(&doc), Vec::<String>::new());
    no_server_left(dir.path());
}

#[test]
fn a_raw_block_device_target_is_one_clear_line_and_starts_nothing() {
    common::need_root();
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let dir = scratch();
    let backing = dir.path().join("disk.img");
    std::fs::File::create(&backing)
        .unwrap()
        .set_len(64 * common::MIB)
        .unwrap();
    let lo = common::Loop::attach(&backing, &[]);
    let serial = common::loop_serial(&backing);
    let out = Command::new(env!("CARGO_BIN_EXE_driveprobe"))
        .args(["bench", lo.s(), "--suite=review", "--scale=quick"])
        .arg("--output-format=json")
        .args(["--allow-destructive", "--expect-serial", &serial])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(
        err.contains("needs a file target's directory") && err.contains(lo.s()),
        "{err}"
    );
    // Refused before anything ran: the enterprise part of review did not start either.
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["complete"], false);
    assert_eq!(doc["phases"].as_array().unwrap().len(), 0);
    no_server_left(dir.path());
    assert!(common::processes_mentioning("driveprobe-oltp-").is_empty());
}

#[test]
fn mariadb_dies_with_a_driveprobe_that_is_sigkilled_and_its_datadir_is_swept_later() {
    need_programs();
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let dir = scratch();
    let mut child = bench(&dir.path().join("probe.dat"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let server =
        common::wait_for_child_named(&mut child, &["mariadbd", "mysqld"], Duration::from_secs(60));
    // Let it come up and take writes.
    std::thread::sleep(Duration::from_secs(2));
    let datadir = dir.path().join(format!("driveprobe-oltp-{}", child.id()));
    assert!(datadir.is_dir(), "no datadir {}", datadir.display());
    // SIGKILL: no guard is dropped, nothing of driveprobe's runs. Only the kernel's parent
    // death signal can end the server.
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(
        common::ends_within(server, Duration::from_secs(30)),
        "mariadbd {server} outlived the driveprobe that started it"
    );
    common::assert_nothing_left_running(&dir.path().to_string_lossy());
    // The killed run's datadir stays until the next oltp run in this directory, which
    // removes it (its pid is gone) even when it is stopped before it starts anything.
    assert!(datadir.is_dir());
    let stopped = driveprobe::engine::RunControl::new();
    stopped.stop();
    let points = driveprobe::app::oltp::run(
        dir.path(),
        &driveprobe::app::oltp::OltpOptions::for_scale("quick"),
        &stopped,
    )
    .unwrap();
    assert!(points.is_empty());
    assert!(!datadir.exists(), "the stale datadir was not removed");
    no_server_left(dir.path());
}

#[test]
fn mariadb_writes_are_counted_while_it_runs() {
    common::need_root();
    need_programs();
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let shm = common::shm_dir("driveprobe-app-oltp-");
    let fs = common::LoopExt4::new(shm.path(), 1 << 30);
    let dir = fs.dir().to_path_buf();
    let opts = driveprobe::app::oltp::OltpOptions {
        warmup: Duration::ZERO,
        threads: vec![4],
        ..driveprobe::app::oltp::OltpOptions::for_scale("quick")
    };
    let control = driveprobe::engine::RunControl::new();
    let c2 = control.clone();
    let (points, count) = common::count_writes(&fs, &control, move || {
        driveprobe::app::oltp::run(&dir, &opts, &c2)
    });
    let points = points.unwrap();
    eprintln!("oltp on ext4/loop: {count}");
    assert_eq!(points.len(), 1);
    assert_eq!(points[0].direct_io, Some(true), "ext4 takes O_DIRECT");
    // Counted as it ran (about once a second), not only at the end.
    assert!(count.seen.len() >= 3, "{count}");
    // InnoDB writes its data files with O_DIRECT: the count is what reached the device
    // less the filesystem's journal and metadata (0.94 to 0.97 of it in runs here).
    // Bounds: 0.75 to 1.25.
    assert!((0.75..=1.25).contains(&count.net_ratio()), "{count}");
    no_server_left(fs.dir());
}
