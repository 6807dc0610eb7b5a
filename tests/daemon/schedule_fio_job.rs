//! A user's fio job file scheduled by the daemon (`fio_job = "FILE"` on a `[[schedule]]`):
//! the real daemon, a file-target drive in /dev/shm, the system's fio. Two schedules on
//! one drive, two different job files, both due at once: each run passes, its result
//! document holds every job of its file, the run gauges carry its own `fio-job:STEM`
//! suite label with the document's figures, and fio's writes reach the drive's
//! self-written bytes and wear budget.
//!
//! Needs fio (Debian's `fio`; `scripts/test` installs it).

use crate::common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::daemon::{file_drive, Daemon, Exposition};
use driveprobe::protocol::result::{Phase, Round, SuiteResult};

/// A read job and a write job at the same time (fixed block sizes, so bytes = ops x bs).
const MIX: &str = "; two jobs at once on the drive's target
[global]
ioengine=psync
filename=${TARGET}
runtime=2
time_based
[rd4k]
rw=randread
bs=4k
[wr8k]
rw=randwrite
bs=8k
";

/// A second job file for the same drive: one sequential writer.
const SEQ: &str = "[seqw64k]
rw=write
bs=64k
ioengine=psync
filename=${TARGET}
runtime=1
time_based
";

/// The run index (`/api/v1/runs`) once no run is `running` and `n` runs are listed.
fn finished_runs(d: &Daemon, n: usize, limit: Duration) -> Vec<serde_json::Value> {
    let t0 = Instant::now();
    loop {
        let (code, _, body) = d.get("/api/v1/runs");
        assert_eq!(code, 200, "{body}");
        let v: Vec<serde_json::Value> = serde_json::from_str(&body).expect("runs JSON");
        if v.len() >= n && v.iter().all(|r| r["status"] != "running") {
            return v;
        }
        assert!(
            t0.elapsed() < limit,
            "not {n} finished runs after {limit:?}: {body}\nlog:\n{}",
            d.log()
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

fn gauge(e: &Exposition, name: &str, labels: &[(&str, &str)]) -> f64 {
    e.value(name, labels)
        .unwrap_or_else(|| panic!("no single {name}{labels:?} in:\n{}", e.text))
}

/// Two figures that must be the same number (the gauge is the document's value, once
/// through the text exposition).
fn same(what: &str, gauge: f64, doc: f64) {
    assert!(
        (gauge - doc).abs() <= doc.abs() * 1e-12,
        "{what}: gauge {gauge}, document {doc}"
    );
}

/// The larger percentile of the directions that ran, in seconds (as the gauges take it).
fn p99(r: &Round) -> f64 {
    let mut v = 0u64;
    for d in [&r.read, &r.write] {
        if d.ops > 0 {
            v = v.max(d.lat_p99_ns);
        }
    }
    v as f64 / 1e9
}

fn need_fio() {
    let fio = std::process::Command::new("fio").arg("--version").output();
    let needs = "needs fio: apt-get install fio (scripts/test installs it)";
    assert!(fio.is_ok_and(|o| o.status.success()), "{needs}");
}

/// Writes the job files `jobs` (schedule name, job text) into `dir`, a config with one
/// file-target drive "a" (`target`, 32 MiB, a read-only canary) and one schedule per job
/// file, and a state in which every schedule is due at once; checks the config with
/// `driveprobe check-config`. Returns the config's path.
fn fio_daemon_config(dir: &Path, target: &Path, jobs: &[(&str, &str)]) -> PathBuf {
    let state = dir.join("state");
    let mut schedules = String::new();
    let mut seen = Vec::new();
    for (name, text) in jobs {
        let file = dir.join(format!("{name}.fio"));
        std::fs::write(&file, text).unwrap();
        // Cron "0 0 1 1 *" with the schedule first seen at time 0 (the seeded state):
        // due since January 1st, so every one starts at once, one after the other (one
        // run per drive).
        schedules.push_str(&format!(
            "[[schedule]]\nname = \"{name}\"\ndrives = [\"a\"]\nfio_job = \"{}\"\ncron = \"0 0 1 1 *\"\nmax_duration = \"2m\"\n\n",
            file.display()
        ));
        seen.push(format!("\"{name}/a\":{{\"first_seen\":0}}"));
    }
    let cfg = dir.join("d.toml");
    std::fs::write(
        &cfg,
        format!(
            "state_dir = \"{}\"\ndiscovery.enabled = false\nhealth_interval = \"2s\"\n\n[wear_budget]\nunrated_bytes_per_day = \"1TiB\"\nscheduled_unrated_bytes = \"1PiB\"\n\n{}\
[[probe]]\nname = \"rd\"\nworkload = {{ rate_iops = 100 }}\n\n{schedules}",
            state.display(),
            file_drive("a", target, "32MiB"),
        ),
    )
    .unwrap();
    std::fs::create_dir_all(&state).unwrap();
    std::fs::write(
        state.join("state.json"),
        format!("{{\"version\":1,\"schedules\":{{{}}}}}", seen.join(",")),
    )
    .unwrap();
    // The config check accepts it (exit 0), as the daemon will.
    common::run(
        common::daemon::BIN,
        &["check-config", cfg.to_str().unwrap()],
    );
    cfg
}

#[test]
fn scheduled_fio_job_files_run_export_their_own_suite_and_count_their_writes() {
    need_fio();
    let dir = common::shm_dir("dp-fio-sched-");
    let state = dir.path().join("state");
    let cfg = fio_daemon_config(
        dir.path(),
        &dir.path().join("a.dat"),
        &[("mix", MIX), ("seq", SEQ)],
    );
    let d = Daemon::start(&cfg, &[]);
    let runs = finished_runs(&d, 2, Duration::from_secs(120));
    assert_eq!(runs.len(), 2, "{runs:?}");
    let e = d.wait_for("both runs' gauges", Duration::from_secs(15), |e| {
        ["fio-job:mix", "fio-job:seq"].iter().all(|s| {
            e.value(
                "driveprobe_run_last_passed",
                &[("drive", "a"), ("suite", s)],
            ) == Some(1.0)
        })
    });

    let mut fio_written = 0u64;
    for (suite, jobs) in [
        ("fio-job:mix", &["rd4k", "wr8k"][..]),
        ("fio-job:seq", &["seqw64k"][..]),
    ] {
        let run = runs
            .iter()
            .find(|r| r["suite"] == suite)
            .unwrap_or_else(|| panic!("no run of {suite}: {runs:?}"));
        assert_eq!(run["status"], "passed", "{run}\nlog:\n{}", d.log());
        let id = run["id"].as_str().unwrap();
        let doc: SuiteResult = serde_json::from_str(
            &std::fs::read_to_string(state.join(format!("runs/{id}.json"))).expect("runs/ID.json"),
        )
        .expect("a result document");
        assert!(doc.complete, "{:?}", doc.incomplete_reason);
        assert_eq!(doc.suite, suite);
        assert_eq!(doc.engine, "fio");
        let points: Vec<_> = doc
            .phases
            .iter()
            .map(|p| match p {
                Phase::Point { workload, round } => (workload, round),
                other => panic!("{suite}: not a point: {other:?}"),
            })
            .collect();
        let names: Vec<&str> = points.iter().map(|(w, _)| w.name.as_str()).collect();
        assert_eq!(names, jobs, "{suite}: every job of the file, in order");
        for (w, round) in &points {
            let l = [
                ("drive", "a"),
                ("suite", suite),
                ("workload", w.name.as_str()),
                ("threads", &w.workers.to_string()),
                ("depth", &w.depth.to_string()),
            ];
            assert!(round.iops > 0.0, "{suite} {}: {round:?}", w.name);
            same(
                &format!("{suite} {} iops", w.name),
                gauge(&e, "driveprobe_run_iops", &l),
                round.iops,
            );
            same(
                &format!("{suite} {} bandwidth", w.name),
                gauge(&e, "driveprobe_run_bandwidth_bytes_per_second", &l),
                round.read.bw_bytes + round.write.bw_bytes,
            );
            let stat = |s: &'static str| {
                let mut ls = l.to_vec();
                ls.push(("stat", s));
                gauge(&e, "driveprobe_run_latency_seconds", &ls)
            };
            same("mean latency", stat("mean"), round.lat_mean_ns / 1e9);
            same("max latency", stat("max"), round.lat_max_ns as f64 / 1e9);
            same("p99 latency", stat("p99"), p99(round));
            // Fixed block sizes: the bytes fio wrote are its write ops x the size.
            let bs: u64 = match w.name.as_str() {
                "rd4k" => 4096,
                "wr8k" => 8192,
                _ => 65536,
            };
            if w.name.starts_with("rd") {
                assert!(round.read.ops > 0 && round.write.ops == 0, "{round:?}");
            } else {
                assert!(round.write.ops > 0 && round.read.ops == 0, "{round:?}");
            }
            fio_written += round.write.ops * bs;
        }
        // Only this run's points under its label: the other file's jobs are not mixed in.
        assert_eq!(
            e.find("driveprobe_run_iops", &[("drive", "a"), ("suite", suite)])
                .len(),
            jobs.len()
        );
    }
    // The canary only reads: every byte driveprobe wrote to the drive is fio's.
    let written = gauge(&e, "driveprobe_self_written_bytes_total", &[("drive", "a")]);
    // fio's writes count against the scheduled runs' allowance, not the canaries'.
    let used = gauge(
        &e,
        "driveprobe_wear_budget_runs_used_bytes",
        &[("drive", "a")],
    );
    println!(
        "fio wrote {fio_written} bytes (write ops x block size); self-written {written}, budget used {used}"
    );
    assert!(fio_written > 0);
    assert!(
        written >= fio_written as f64,
        "self-written {written} < fio's {fio_written}"
    );
    assert!(
        used >= fio_written as f64,
        "budget used {used} < fio's {fio_written}"
    );
    let (st, _) = d.terminate(Duration::from_secs(10));
    assert!(st.success());
}

/// On a filesystem over a block device, fio's writes are counted while it runs (its
/// process group is metered: `write_bytes` of `/proc/PID/io`) and topped up to what fio
/// reports at its end. Counted once: the drive's self-written bytes come to fio's
/// figure, not twice it. Needs root (a loop device and ext4 over a file in /dev/shm).
#[test]
fn on_a_block_device_fio_writes_are_counted_once() {
    common::need_root();
    need_fio();
    let dir = common::shm_dir("dp-fio-sched-ext4-");
    let img = common::image(dir.path(), "disk.img", 128 * common::MIB);
    let lo = common::Loop::attach(&img, &[]);
    common::mkfs_ext4(lo.path());
    let mnt = common::Mount::new(lo.path(), &dir.path().join("mnt"));
    // Direct I/O: every byte fio writes goes to the device while it runs.
    let job = "[seqw]\nrw=write\nbs=64k\nioengine=psync\ndirect=1\nfilename=${TARGET}\nruntime=2\ntime_based\n";
    let cfg = fio_daemon_config(dir.path(), &mnt.dir().join("a.dat"), &[("w", job)]);
    let d = Daemon::start(&cfg, &[]);
    let runs = finished_runs(&d, 1, Duration::from_secs(120));
    assert_eq!(runs[0]["status"], "passed", "{runs:?}\nlog:\n{}", d.log());
    let id = runs[0]["id"].as_str().unwrap();
    let doc: SuiteResult = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join(format!("state/runs/{id}.json"))).unwrap(),
    )
    .unwrap();
    let Phase::Point { round, .. } = &doc.phases[0] else {
        panic!("{:?}", doc.phases)
    };
    let fio_written = (round.write.ops * 65536) as f64;
    let e = d.wait_for("the run's gauges", Duration::from_secs(15), |e| {
        e.has("driveprobe_run_iops")
    });
    let written = gauge(&e, "driveprobe_self_written_bytes_total", &[("drive", "a")]);
    println!("ext4 on a loop device: fio wrote {fio_written} bytes; self-written {written}");
    assert!(fio_written > 0.0);
    assert!(
        written >= fio_written && written < fio_written * 1.25,
        "self-written {written}, fio's {fio_written}: counted once, not twice"
    );
    d.terminate(Duration::from_secs(10));
    drop(mnt);
    drop(lo);
}
