//! The fio-job workload end to end: the system's fio (Debian's fio) on a user's job file,
//! with the target a file in a temp dir in /dev/shm.

use crate::common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use driveprobe::engine::RunControl;
use driveprobe::protocol::fio_job::{self, FioJobError};
use driveprobe::protocol::result::{DirFigures, Round, WorkloadDesc};
use serde_json::Value;

fn need_fio() {
    assert!(
        std::process::Command::new("fio")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success()),
        "needs fio: apt-get install fio (scripts/test installs it)"
    );
}

fn scratch() -> tempfile::TempDir {
    common::shm_dir("driveprobe-app-fio-")
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/app/fio")
        .join(name)
}

fn job_file(dir: &Path, text: &str) -> PathBuf {
    let p = dir.join("job.fio");
    std::fs::write(&p, text).unwrap();
    p
}

/// Processes that hold `file` open: what a stopped fio would leave behind.
fn holders(file: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(fds) = std::fs::read_dir(e.path().join("fd")) else {
            continue;
        };
        for fd in fds.flatten() {
            if std::fs::read_link(fd.path()).is_ok_and(|l| l == file) {
                out.push(e.file_name().to_string_lossy().to_string());
            }
        }
    }
    out
}

fn nothing_holds(file: &Path) {
    let t0 = Instant::now();
    while !holders(file).is_empty() && t0.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        holders(file).is_empty(),
        "still open by {:?}",
        holders(file)
    );
}

/// fio's figures for one direction, read straight from its JSON.
fn fio_dir(d: &Value) -> DirFigures {
    let pct = |p: &str| d["clat_ns"]["percentile"][p].as_u64().unwrap_or(0);
    DirFigures {
        ops: d["total_ios"].as_u64().unwrap(),
        iops: d["iops"].as_f64().unwrap(),
        bw_bytes: d["bw_bytes"].as_f64().unwrap(),
        lat_mean_ns: d["lat_ns"]["mean"].as_f64().unwrap(),
        lat_stddev_ns: d["lat_ns"]["stddev"].as_f64().unwrap(),
        lat_max_ns: d["lat_ns"]["max"].as_u64().unwrap(),
        lat_p50_ns: pct("50.000000"),
        lat_p99_ns: pct("99.000000"),
        lat_p99_9_ns: pct("99.900000"),
    }
}

#[test]
fn two_jobs_are_both_ingested_with_fio_s_own_numbers() {
    need_fio();
    let dir = scratch();
    let target = dir.path().join("target");
    let run = fio_job::run_detailed(
        &fixture("two-jobs.fio"),
        &target,
        Duration::from_secs(60),
        &RunControl::new(),
    )
    .unwrap();
    // fio ran on the target: it laid out the job's 32 MiB there.
    assert_eq!(std::fs::metadata(&target).unwrap().len(), 32 << 20);
    assert!(run
        .job_text
        .contains(&format!("filename={}", target.display())));
    assert!(!run.job_text.contains("${TARGET}"));
    assert_eq!(run.percentiles_from, ["clat_ns", "clat_ns"]);
    let json: Value = serde_json::from_str(&run.raw_json).unwrap();
    let jobs = json["jobs"].as_array().unwrap();
    assert_eq!(jobs.len(), 2);
    assert_eq!(run.results.len(), 2);
    for ((desc, round), j) in run.results.iter().zip(jobs) {
        let (read, write) = (fio_dir(&j["read"]), fio_dir(&j["write"]));
        eprintln!(
            "{}: fio read {read:?}\n      ours {:?}",
            desc.name, round.read
        );
        eprintln!(
            "{}: fio write {write:?}\n      ours {:?}",
            desc.name, round.write
        );
        assert_eq!(desc.name, j["jobname"].as_str().unwrap());
        assert_eq!(round.read, read);
        assert_eq!(round.write, write);
        assert_eq!(round.iops, read.iops + write.iops);
        assert_eq!(
            round.end_seconds,
            j["job_runtime"].as_f64().unwrap() / 1000.0
        );
        assert_eq!(round.index, 0);
    }
    // Each job in its own direction, at its own size: the figures are not crossed.
    let (r4k, rr) = &run.results[0];
    assert_eq!(
        (
            r4k.rw.as_str(),
            r4k.bs.as_str(),
            r4k.rwmixread,
            r4k.workers,
            r4k.depth
        ),
        ("randread", "4k", 100, 1, 1)
    );
    assert!(rr.read.ops > 1000 && rr.write.ops == 0, "{rr:?}");
    let (w8k, wr) = &run.results[1];
    assert_eq!(
        (
            w8k.rw.as_str(),
            w8k.bs.as_str(),
            w8k.rwmixread,
            w8k.distribution.as_str()
        ),
        ("randwrite", "8k", 0, "uniform")
    );
    assert!(wr.write.ops > 1000 && wr.read.ops == 0, "{wr:?}");
    // Bandwidth is IOPS times the block size; IOPS is ops over about the 2 s asked for.
    assert!((rr.read.bw_bytes / (rr.read.iops * 4096.0) - 1.0).abs() < 0.01);
    assert!((wr.write.bw_bytes / (wr.write.iops * 8192.0) - 1.0).abs() < 0.01);
    let secs = rr.read.ops as f64 / rr.read.iops;
    assert!((1.8..2.5).contains(&secs), "{secs}");
    // Latency order holds.
    for d in [&rr.read, &wr.write] {
        assert!(
            d.lat_p50_ns <= d.lat_p99_ns && d.lat_p99_ns <= d.lat_p99_9_ns,
            "{d:?}"
        );
        assert!(d.lat_p99_9_ns <= d.lat_max_ns + d.lat_max_ns / 50, "{d:?}");
    }
    nothing_holds(&target);
}

#[test]
fn group_reporting_gives_one_entry_per_group() {
    need_fio();
    let dir = scratch();
    let target = dir.path().join("target");
    let job = job_file(
        dir.path(),
        "[global]\nfilename=${TARGET}\nsize=1m\nioengine=psync\ngroup_reporting\n\
         [a]\nrw=read\nnumjobs=2\n[b]\nrw=write\nbs=8k\n[c]\nstonewall\nrw=randread\n",
    );
    let r = fio_job::run(&job, &target, Duration::from_secs(60), &RunControl::new()).unwrap();
    assert_eq!(r.len(), 2, "{r:?}");
    let (g0, r0) = &r[0];
    assert_eq!(g0.name, "a");
    assert_eq!(
        (g0.rw.as_str(), g0.bs.as_str(), g0.workers),
        ("read+write", "4k+8k", 3)
    );
    // Two readers over 1 MiB in 4 KiB, one writer in 8 KiB: 512 reads, 128 writes.
    assert_eq!((r0.read.ops, r0.write.ops), (512, 128));
    assert_eq!(g0.rwmixread, 80);
    let (g1, r1) = &r[1];
    assert_eq!(
        (g1.name.as_str(), g1.rw.as_str(), g1.workers),
        ("c", "randread", 1)
    );
    assert_eq!(r1.read.ops, 256);
}

#[test]
fn a_job_file_that_names_no_file_runs_on_the_target() {
    need_fio();
    let dir = scratch();
    let target = dir.path().join("t:arget");
    let job = job_file(dir.path(), "[w]\nrw=write\nsize=2m\nioengine=psync\n");
    let run =
        fio_job::run_detailed(&job, &target, Duration::from_secs(60), &RunControl::new()).unwrap();
    assert_eq!(std::fs::metadata(&target).unwrap().len(), 2 << 20);
    assert_eq!(run.results[0].1.write.ops, 512);
    // Nothing appeared elsewhere (fio's default would be w.0.0 in its working directory).
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().to_string())
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
    assert!(!Path::new("w.0.0").exists());
}

#[test]
fn refused_job_files_start_nothing() {
    let dir = scratch();
    let target = dir.path().join("target");
    let victim = dir.path().join("victim");
    std::fs::write(&victim, b"keep me").unwrap();
    for (text, needle) in [
        (
            format!("[bad]\nrw=write\nsize=1m\nfilename={}\n", victim.display()),
            "filename=",
        ),
        (
            "[bad]\nfilename=${TARGET}\nioengine=exec\nprogram=/bin/true\n".into(),
            "ioengine=exec",
        ),
        (
            "[bad]\nfilename=${TARGET}\nexec_postrun=touch /x\n".into(),
            "exec_postrun",
        ),
        (
            "[bad]\nfilename=${TARGET}\nwrite_lat_log=lat\n".into(),
            "write_lat_log",
        ),
        (
            format!("[bad]\ndirectory={}\n", dir.path().display()),
            "directory=",
        ),
    ] {
        let job = job_file(dir.path(), &text);
        let e =
            fio_job::run(&job, &target, Duration::from_secs(10), &RunControl::new()).unwrap_err();
        let msg = e.to_string();
        assert!(matches!(e, FioJobError::Refused(_)), "{msg}");
        assert!(msg.contains("job [bad]") && msg.contains(needle), "{msg}");
        assert!(!msg.contains('\n'), "{msg}");
    }
    assert_eq!(std::fs::read(&victim).unwrap(), b"keep me");
    assert!(!target.exists());
}

#[test]
fn fio_s_own_error_is_one_line() {
    need_fio();
    let dir = scratch();
    let job = job_file(
        dir.path(),
        "[j]\nfilename=${TARGET}\nrw=sideways\nsize=1m\n",
    );
    let e = fio_job::run(
        &job,
        &dir.path().join("t"),
        Duration::from_secs(30),
        &RunControl::new(),
    )
    .unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, FioJobError::Fio { .. }), "{msg}");
    assert!(msg.contains("sideways") && !msg.contains('\n'), "{msg}");
}

#[test]
fn the_time_limit_and_a_stop_end_fio() {
    need_fio();
    let dir = scratch();
    let target = dir.path().join("target");
    let job = job_file(
        dir.path(),
        "[long]\nfilename=${TARGET}\nioengine=psync\nrw=randread\nsize=8m\nruntime=120\ntime_based\nnumjobs=2\n",
    );
    let t0 = Instant::now();
    let e = fio_job::run(&job, &target, Duration::from_secs(2), &RunControl::new()).unwrap_err();
    assert!(
        matches!(
            e,
            FioJobError::TimeLimit {
                limit_seconds: 2,
                ..
            }
        ),
        "{e}"
    );
    assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
    nothing_holds(&target);

    let (control, h) = run_until_fio_opens(&job, &target);
    control.stop();
    let stopped = Instant::now();
    let e = h.join().unwrap().unwrap_err();
    assert!(matches!(e, FioJobError::Stopped { .. }), "{e}");
    assert!(stopped.elapsed() < Duration::from_secs(7));
    nothing_holds(&target);
}

/// The thread a fio job runs on, and what it returns.
type FioThread = std::thread::JoinHandle<Result<Vec<(WorkloadDesc, Round)>, FioJobError>>;

/// Runs the fio job `job` on `target` on a thread of its own, with a 300 s limit, and
/// returns once fio holds the target open: its control (to stop it) and its thread.
fn run_until_fio_opens(job: &Path, target: &Path) -> (RunControl, FioThread) {
    let control = RunControl::new();
    let c2 = control.clone();
    let (j2, t2) = (job.to_path_buf(), target.to_path_buf());
    let h = std::thread::spawn(move || fio_job::run(&j2, &t2, Duration::from_secs(300), &c2));
    let t0 = Instant::now();
    while holders(target).is_empty() {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "fio never opened the target"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    (control, h)
}

/// A writing fio job cut short (by its time limit, a schedule's `max_duration`, or a
/// stop) on a tmpfs file, where the kernel counts no storage writes for the process
/// meter: what it wrote is still counted, from the JSON fio prints when it is stopped.
/// Before, such a run counted 0 bytes.
#[test]
fn a_writing_fio_job_cut_short_on_tmpfs_still_counts_what_it_wrote() {
    need_fio();
    let dir = scratch();
    let target = dir.path().join("target");
    let job = job_file(
        dir.path(),
        "[w]\nfilename=${TARGET}\nioengine=psync\nrw=randwrite\nsize=8m\nruntime=120\ntime_based\n",
    );
    let control = RunControl::new();
    let e = fio_job::run(&job, &target, Duration::from_secs(2), &control).unwrap_err();
    assert!(matches!(e, FioJobError::TimeLimit { .. }), "{e}");
    let timed_out = control.written_bytes();
    println!("fio randwrite on tmpfs, stopped at its 2 s time limit: {timed_out} bytes counted");
    assert!(timed_out >= 8 << 20, "{timed_out} bytes counted");

    let (control, h) = run_until_fio_opens(&job, &target);
    std::thread::sleep(Duration::from_millis(500));
    control.stop();
    let e = h.join().unwrap().unwrap_err();
    assert!(matches!(e, FioJobError::Stopped { .. }), "{e}");
    let stopped = control.written_bytes();
    println!("fio randwrite on tmpfs, stopped: {stopped} bytes counted");
    assert!(stopped > 0, "{stopped} bytes counted");
    nothing_holds(&target);
}

#[test]
fn bench_fio_job_names_its_document_as_a_schedule_of_the_file_does() {
    need_fio();
    let dir = scratch();
    let target = dir.path().join("target");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_driveprobe"))
        .arg("bench")
        .arg(&target)
        .args(["--size=32m", "--output-format=json", "--fio-job"])
        .arg(fixture("two-jobs.fio"))
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    common::assert_ok(&out, "driveprobe bench --fio-job");
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    // `config::fio_job_label`: what a `[[schedule]]` with `fio_job` calls its runs.
    assert_eq!(doc["suite"], "fio-job:two-jobs");
    assert_eq!(doc["complete"], true);
    let phases = doc["phases"].as_array().unwrap();
    assert_eq!(phases.len(), 2, "one point per job: {phases:#?}");
    assert!(phases.iter().all(|p| p["kind"] == "point"));
    nothing_holds(&target);
}

/// Every spelling that makes fio grow a file (issue 16: `fileoffset=`, fio's alias of
/// `offset`, got through): fio itself, given the job on a copy of the target, grows the
/// copy (so the spelling is real and does what is feared); through driveprobe the same
/// job is refused before fio runs, and the target keeps its length and bytes.
#[test]
fn every_spelling_that_grows_a_file_target_is_refused_before_fio_runs() {
    need_fio();
    let dir = scratch();
    let target = dir.path().join("target");
    let copy = dir.path().join("copy");
    let data = common::pseudo_random(1 << 20, 16);
    std::fs::write(&target, &data).unwrap();
    for opts in [
        "fileoffset=1m\nsize=256k",
        "offset=1m\nsize=256k",
        "fileoffset=768k\nsize=512k",
        "size=2m",
        "filesize=2m",
        "file_append=1\nsize=256k",
        "numjobs=2\noffset_increment=1m\nsize=256k",
        "numjobs=2\nfileoffset=512k\noffset_increment=512k\nsize=512k",
    ] {
        let text =
            format!("[grow]\nfilename=${{TARGET}}\nioengine=psync\nrw=write\nbs=64k\n{opts}\n");
        // fio alone, on a copy.
        std::fs::write(&copy, &data).unwrap();
        let by_fio = common::run_with_stdin(
            "fio",
            &["--output-format=terse", "-"],
            Some(&text.replace("${TARGET}", copy.to_str().unwrap())),
        );
        let grown = std::fs::metadata(&copy).unwrap().len();
        assert!(
            grown > 1 << 20,
            "{opts:?}: fio did not grow the copy ({grown}): {by_fio}"
        );
        // Through driveprobe.
        let job = job_file(dir.path(), &text);
        let e =
            fio_job::run(&job, &target, Duration::from_secs(30), &RunControl::new()).unwrap_err();
        assert!(matches!(e, FioJobError::Refused(_)), "{opts:?}: {e}");
        assert!(e.to_string().contains("grow"), "{e}");
        assert_eq!(
            std::fs::metadata(&target).unwrap().len(),
            1 << 20,
            "{opts:?}"
        );
    }
    assert!(
        std::fs::read(&target).unwrap() == data,
        "the target's bytes changed"
    );
}

/// A fio job run as a suite reaches the file the gate checked and the run holds open, not
/// whatever its path names by the time fio opens it (issue 16: fio was given the path,
/// and followed a folder swapped for a symbolic link after the checks). A stand-in fio
/// swaps the target's folder for a link to a decoy folder, then writes to the file its
/// job names: the bytes land in the file driveprobe made, and nothing in the decoy.
#[test]
fn a_fio_job_reaches_the_checked_file_not_a_swapped_path() {
    use std::os::unix::fs::PermissionsExt;
    let dir = common::shm_dir("dp-fiojob-");
    let (real, moved, decoy) = (
        dir.path().join("real"),
        dir.path().join("moved"),
        dir.path().join("decoy"),
    );
    std::fs::create_dir(&real).unwrap();
    std::fs::create_dir(&decoy).unwrap();
    let tools = dir.path().join("tools");
    std::fs::create_dir(&tools).unwrap();
    let fake = tools.join("fio");
    std::fs::write(
        &fake,
        format!(
            "#!/bin/sh\n[ \"$1\" = --version ] && {{ echo fio-3.33; exit 0; }}\n\
             f=$(sed -n 's/^filename=//p' | head -n 1)\n\
             mv {real} {moved} && ln -s {decoy} {real}\n\
             printf SWAPPED | dd of=\"$f\" bs=7 count=1 conv=notrunc 2>/dev/null\n\
             echo '{{}}'\n",
            real = real.display(),
            moved = moved.display(),
            decoy = decoy.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let job = job_file(
        dir.path(),
        "[w]\nrw=write\nbs=4k\nsize=4k\nfilename=${TARGET}\n",
    );
    let path = format!(
        "{}:{}",
        tools.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    // The stand-in prints no fio results, so the run itself fails: what matters is where
    // its write went.
    let _ = std::process::Command::new(env!("CARGO_BIN_EXE_driveprobe"))
        .arg("bench")
        .arg(real.join("t.dat"))
        .args(["--size=1m", "--output-format=json", "--fio-job"])
        .arg(&job)
        .env("PATH", path)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(
        std::fs::symlink_metadata(&real).is_ok_and(|m| m.file_type().is_symlink()),
        "the stand-in fio did not run"
    );
    assert!(
        !decoy.join("t.dat").exists(),
        "fio's write followed the swapped folder into the decoy"
    );
    let head = std::fs::read(moved.join("t.dat")).unwrap();
    assert_eq!(
        &head[..7],
        b"SWAPPED",
        "the write did not reach the checked file"
    );
}
