//! The kv workload end to end: RocksDB's db_bench (Debian's rocksdb-tools) with its
//! database in a temp dir in /dev/shm. Needs `db_bench`; the ramfs and small-tmpfs tests
//! need root (mounts).

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use driveprobe::app::kv::{self, DirectIo, KvError, KvOptions};
use driveprobe::engine::RunControl;

fn need_db_bench() {
    assert!(
        Path::new("/usr/bin/db_bench").exists()
            || std::process::Command::new("db_bench")
                .arg("--help")
                .output()
                .is_ok(),
        "needs db_bench: apt-get install rocksdb-tools (scripts/test installs it)"
    );
}

fn scratch() -> tempfile::TempDir {
    common::shm_dir("driveprobe-app-kv-")
}

fn db_dirs(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().to_string())
        .filter(|n| n.starts_with("driveprobe-kv-"))
        .collect()
}

/// Nothing running that mentions `dir` (db_bench has it in its --db=), within 5 s.
fn nothing_left_running(dir: &Path) {
    common::assert_nothing_left_running(&dir.to_string_lossy());
}

#[test]
fn quick_scale_measures_every_phase_and_removes_the_database() {
    need_db_bench();
    let dir = scratch();
    let opts = KvOptions::for_scale("quick");
    let t0 = Instant::now();
    let run = kv::run_detailed(dir.path(), &opts, &RunControl::new()).unwrap();
    let took = t0.elapsed();
    assert!(took < Duration::from_secs(60), "quick took {took:?}");
    // Direct I/O exactly when the filesystem takes it (tmpfs does from Linux 6.6 on).
    assert_eq!(
        run.direct_io,
        kv::direct_io_supported(dir.path()).is_ok(),
        "{:?}",
        run.direct_io_note
    );
    assert!(run.db_bench_version.is_some());
    let names: Vec<&str> = run.points.iter().map(|p| p.workload.as_str()).collect();
    assert_eq!(names, ["fillrandom", "readwhilewriting", "overwrite"]);
    for p in &run.points {
        eprintln!(
            "{}: {} threads, {:.2} s, {:.0} ops/s, mean {:.1} us, p99 {:.1} us, {} intervals",
            p.workload,
            p.threads,
            p.seconds,
            p.ops_per_second,
            p.lat_mean_ns / 1e3,
            p.lat_p99_ns / 1e3,
            p.intervals.len()
        );
        assert!(p.ops_per_second > 0.0, "{p:?}");
        assert!(p.lat_mean_ns > 0.0 && p.lat_p99_ns > 0.0, "{p:?}");
        assert_eq!(p.threads, opts.threads);
        assert_eq!(p.errors, 0);
        // Whole-run ops/s over whole-run seconds is what the operations come to.
        assert!(p.seconds > 0.0);
    }
    for p in &run.points[1..] {
        // Measured for the asked time (db_bench's --duration), and an interval a second.
        assert!(
            p.seconds >= opts.measure_seconds as f64 * 0.9,
            "{}: {} s",
            p.workload,
            p.seconds
        );
        // One-second windows up to where every thread's last report reaches (a thread
        // stalled at the end reports less far).
        assert!(!p.intervals.is_empty(), "{}: no intervals", p.workload);
        for (k, i) in p.intervals.iter().enumerate() {
            assert_eq!(i.end_seconds, (k + 1) as f64, "{i:?}");
            assert!(i.end_seconds <= p.seconds + 1.0, "{i:?}");
            assert!(
                i.ops_per_second > 0.0 && i.lat_mean_ns.unwrap() > 0.0,
                "{i:?}"
            );
        }
        // The windows hold no more operations than the run did.
        let in_windows: f64 = p.intervals.iter().map(|i| i.ops_per_second).sum();
        assert!(
            in_windows <= p.ops_per_second * p.seconds * 1.01,
            "{}: {in_windows} vs {}",
            p.workload,
            p.ops_per_second * p.seconds
        );
        // And describe the same run as the summary: their mean rate is within a factor
        // of three of it (a compaction stall makes single windows swing far more).
        let mean = in_windows / p.intervals.len() as f64;
        let ratio = mean / p.ops_per_second;
        assert!(
            (0.33..3.0).contains(&ratio),
            "{}: {mean} vs {}",
            p.workload,
            p.ops_per_second
        );
    }
    assert!(db_dirs(dir.path()).is_empty(), "{:?}", db_dirs(dir.path()));
    nothing_left_running(dir.path());
}

#[test]
fn a_stop_mid_run_kills_db_bench_and_removes_the_database() {
    need_db_bench();
    let dir = scratch();
    let path = dir.path().to_path_buf();
    let control = RunControl::new();
    let c2 = control.clone();
    let opts = KvOptions {
        measure_seconds: 60,
        ..KvOptions::for_scale("quick")
    };
    let h = std::thread::spawn(move || kv::run(&path, &opts, &c2));
    // Wait for db_bench to be running on the database, then give it a moment.
    let needle = dir.path().to_string_lossy().to_string();
    let t0 = Instant::now();
    while common::processes_mentioning(&needle).is_empty() {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "db_bench never started"
        );
        assert!(!h.is_finished(), "the run ended before db_bench started");
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(
        db_dirs(dir.path()).len(),
        1,
        "the database exists while it runs"
    );
    let stopped_at = Instant::now();
    control.stop();
    let r = h.join().unwrap();
    let took = stopped_at.elapsed();
    match r {
        Err(e @ KvError::Stopped { .. }) => {
            assert!(e.to_string().contains("stopped"), "{e}");
        }
        other => panic!("not stopped: {other:?}"),
    }
    assert!(took < Duration::from_secs(5), "stopping took {took:?}");
    nothing_left_running(dir.path());
    assert!(db_dirs(dir.path()).is_empty(), "{:?}", db_dirs(dir.path()));
}

#[test]
fn missing_db_bench_is_one_clear_line_and_creates_nothing() {
    let dir = scratch();
    let opts = KvOptions {
        db_bench: "/nonexistent/db_bench".into(),
        ..KvOptions::for_scale("quick")
    };
    let e = kv::run(dir.path(), &opts, &RunControl::new()).unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, KvError::Missing(_)), "{msg}");
    assert!(
        msg.contains("rocksdb-tools") && !msg.contains('\n'),
        "{msg}"
    );
    assert!(db_dirs(dir.path()).is_empty());
}

#[test]
fn a_stale_database_of_a_dead_process_is_removed() {
    // A pid that cannot be running: above the kernel's maximum.
    let dir = scratch();
    let stale = dir.path().join("driveprobe-kv-4194305-0");
    std::fs::create_dir(&stale).unwrap();
    std::fs::write(stale.join("000004.log"), b"x").unwrap();
    let live = dir
        .path()
        .join(format!("driveprobe-kv-{}-77", std::process::id()));
    std::fs::create_dir(&live).unwrap();
    // The run fails (no db_bench) after the sweep; the live one is ours and stays.
    let opts = KvOptions {
        db_bench: "/nonexistent/db_bench".into(),
        ..KvOptions::for_scale("quick")
    };
    let _ = kv::run(dir.path(), &opts, &RunControl::new());
    // Missing db_bench is found before anything else is touched.
    assert!(stale.exists());
    need_db_bench();
    let tiny = KvOptions {
        keys: 2_000,
        threads: 1,
        measure_seconds: 1,
        ..KvOptions::for_scale("quick")
    };
    kv::run(dir.path(), &tiny, &RunControl::new()).unwrap();
    assert!(!stale.exists());
    assert!(live.exists());
}

#[test]
fn without_o_direct_it_runs_buffered_and_says_so() {
    common::need_root();
    need_db_bench();
    let dir = scratch();
    let mnt = dir.path().join("ramfs");
    // ramfs has no direct I/O at all (tmpfs has it from Linux 6.6 on).
    let m = common::Mount::virtual_fs("ramfs", None, &mnt);
    assert!(kv::direct_io_supported(m.dir()).is_err());
    let opts = KvOptions {
        keys: 20_000,
        threads: 1,
        measure_seconds: 2,
        ..KvOptions::for_scale("quick")
    };
    let run = kv::run_detailed(m.dir(), &opts, &RunControl::new()).unwrap();
    assert!(!run.direct_io);
    let note = run.direct_io_note.unwrap();
    assert!(note.contains("O_DIRECT"), "{note}");
    assert_eq!(run.points.len(), 3);
    assert!(run.points.iter().all(|p| p.ops_per_second > 0.0));
    // And turned off on request, on a filesystem that has it.
    let off = KvOptions {
        direct_io: DirectIo::Off,
        ..opts
    };
    let run = kv::run_detailed(dir.path(), &off, &RunControl::new()).unwrap();
    assert!(!run.direct_io);
    assert!(db_dirs(m.dir()).is_empty() && db_dirs(dir.path()).is_empty());
}

#[test]
fn a_drive_without_room_is_refused_before_db_bench_starts() {
    common::need_root();
    need_db_bench();
    let dir = scratch();
    let mnt = dir.path().join("small");
    let m = common::Mount::virtual_fs("tmpfs", Some("size=16m"), &mnt);
    let e = kv::run(m.dir(), &KvOptions::for_scale("quick"), &RunControl::new()).unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, KvError::NoRoom { .. }), "{msg}");
    assert!(
        msg.contains("free") && msg.contains("smaller scale"),
        "{msg}"
    );
    assert!(db_dirs(m.dir()).is_empty());
}
