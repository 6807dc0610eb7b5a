//! Are the engine's numbers right? Runs on files in /dev/shm (tmpfs) through the library.
//! These check relations that hold on any machine (Little's law, rate, shares, sums), not
//! speeds: the machines are shared and noisy.

use crate::common;

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use driveprobe::engine::{
    self, Arrival, BackendChoice, Job, JobSpec, Pattern, RateLimit, RunControl, RunResult, SizeMix,
    Stop,
};
use driveprobe::safety;
use driveprobe::target::{self, Target};

/// A file in /dev/shm, removed on drop.
struct ShmFile(PathBuf);

impl ShmFile {
    fn new(name: &str, size: u64) -> Self {
        let p = PathBuf::from(format!(
            "/dev/shm/dp-test-{}-{}-{name}",
            std::process::id(),
            rand_tag()
        ));
        let _ = std::fs::remove_file(&p);
        assert!(target::create_file_if_missing(&p, size).unwrap());
        ShmFile(p)
    }
    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for ShmFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn rand_tag() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(0);
    h.finish()
}

fn open(path: &Path, write: bool) -> Target {
    let permit = write.then(|| safety::authorize_file_writes(path, false).unwrap());
    Target::open(path, true, permit.as_ref()).unwrap()
}

fn run(job: &Job, t: &Target) -> RunResult {
    engine::run(job, t, &RunControl::new(), &mut |_| {}).unwrap()
}

fn spec() -> JobSpec {
    JobSpec {
        stop: Stop::Time(Duration::from_secs(2)),
        ..JobSpec::default()
    }
}

fn littles_law(r: &RunResult, in_flight: f64) {
    let t = common::SlotTime {
        iops: r.total.iops,
        mean_s: r.total.lat_ns.mean / 1e9,
        secs: r.runtime_seconds,
        in_flight_s: r.in_flight_seconds,
        uncounted_s: r.slot_uncounted_seconds,
        idle_s: r.slot_idle_seconds,
    };
    let depth = common::slot_time(&t, in_flight, true, "closed loop");
    println!("{in_flight} slots: {depth:.2} in flight on average (the rest: the host's part)");
    // The intervals too, one by one (an I/O spanning a boundary is split at it).
    let mut prev_end = 0.0;
    for i in &r.intervals {
        let t = common::SlotTime {
            secs: i.end_seconds - prev_end,
            in_flight_s: i.in_flight_seconds,
            idle_s: i.slot_idle_seconds,
            ..t
        };
        common::slot_time(
            &t,
            in_flight,
            false,
            &format!("interval ending {}s", i.end_seconds),
        );
        prev_end = i.end_seconds;
    }
}

#[test]
fn closed_loop_obeys_littles_law_io_uring() {
    let f = ShmFile::new("little", 64 << 20);
    let t = open(f.path(), false);
    for (workers, depth) in [(1, 1), (1, 16), (2, 8)] {
        let job = JobSpec {
            workers,
            depth,
            ..spec()
        }
        .validate()
        .unwrap();
        let r = run(&job, &t);
        assert_eq!(r.engine, engine::Backend::IoUring);
        assert!(r.total.ops > 1000, "too few I/Os: {}", r.total.ops);
        littles_law(&r, (workers * depth) as f64);
    }
}

#[test]
fn closed_loop_obeys_littles_law_psync() {
    let f = ShmFile::new("little-psync", 64 << 20);
    let t = open(f.path(), true);
    let job = JobSpec {
        workers: 2,
        depth: 1,
        read_pct: 70,
        backend: BackendChoice::Psync,
        ..spec()
    }
    .validate()
    .unwrap();
    let r = run(&job, &t);
    assert_eq!(r.engine, engine::Backend::Psync);
    littles_law(&r, 2.0);
}

#[test]
fn rate_limit_holds_500_iops_within_2_percent() {
    let f = ShmFile::new("rate", 16 << 20);
    let t = open(f.path(), false);
    let job = JobSpec {
        depth: 4,
        stop: Stop::Time(Duration::from_secs(5)),
        rate: Some(RateLimit {
            iops: 500.0,
            arrival: Arrival::Linear,
        }),
        ..spec()
    }
    .validate()
    .unwrap();
    let r = run(&job, &t);
    // The I/Os the schedule made due: those counted, and those the host issued too late
    // to count or never (an I/O due every 2 ms: 2500 in 5 s, within one).
    let due = r.total.ops + r.due_missed_ops;
    assert!(
        due.abs_diff(2500) <= 1,
        "{} I/Os counted + {} missed = {due}, 2500 due in 5 s at 500 IOPS",
        r.total.ops,
        r.due_missed_ops
    );
    // What the host delivered: all of it but what a stall at the end can take (within 2%
    // on a host that kept up). The lateness allowed is only what the workers' measured
    // wait for a CPU explains: a limiter that bunches its I/Os is late on an idle host.
    let late = r.issue_late_max_seconds.min(r.run_delay_seconds);
    let err = (r.total.iops - 500.0).abs() / 500.0;
    assert!(
        err < 0.02 + late / 5.0,
        "rate {} IOPS, 500 asked (lateness the host explains: {late:.3}s)",
        r.total.iops
    );
    assert_eq!(r.intervals.len(), 5);
    // Each second on its own: a host stall of d s just before a boundary moves d x 500 of
    // its I/Os into the next second (the limiter catches up, as it must), so each second
    // may be off by 10% plus what the longest measured stall explains; a limiter that
    // bunches its I/Os still fails it.
    let mut ops = 0;
    for i in &r.intervals {
        ops += i.read.ops;
        let e = (i.read.iops - 500.0).abs() / 500.0;
        assert!(
            e < 0.10 + late,
            "interval at {}s: {} IOPS (lateness the host explains: {late:.3}s)",
            i.end_seconds,
            i.read.iops
        );
    }
    assert_eq!(ops, r.total.ops, "the intervals add up to the total");
}

#[test]
fn poisson_rate_averages_to_the_limit() {
    let f = ShmFile::new("poisson", 16 << 20);
    let t = open(f.path(), false);
    let job = JobSpec {
        depth: 8,
        workers: 2,
        stop: Stop::Time(Duration::from_secs(3)),
        rate: Some(RateLimit {
            iops: 2000.0,
            arrival: Arrival::Poisson,
        }),
        ..spec()
    }
    .validate()
    .unwrap();
    let r = run(&job, &t);
    // 6000 expected arrivals: the Poisson standard deviation is 77 (1.3%); within 6 of
    // them (7.7%), a rate limiter that works is refused about twice in 10^9 runs. Counted: those completed
    // in the window, and those the host issued too late or never.
    let due = (r.total.ops + r.due_missed_ops) as f64;
    assert!(
        (due - 6000.0).abs() <= 6.0 * 6000f64.sqrt(),
        "{} I/Os counted + {} missed = {due}, 6000 expected",
        r.total.ops,
        r.due_missed_ops
    );
}

#[test]
fn read_share_and_mean_size_follow_the_job() {
    let f = ShmFile::new("mix", 64 << 20);
    let t = open(f.path(), true);
    let sizes = SizeMix::parse("4k:67,8k:10,16k:7,32k:3,64k:13").unwrap();
    let mean = sizes.mean();
    let job = JobSpec {
        read_pct: 70,
        depth: 8,
        sizes,
        ..spec()
    }
    .validate()
    .unwrap();
    let r = run(&job, &t);
    let share = r.read.ops as f64 / r.total.ops as f64 * 100.0;
    assert!((share - 70.0).abs() < 1.0, "read share {share:.2}%");
    let got = r.total.bytes as f64 / r.total.ops as f64;
    assert!(
        (got - mean).abs() / mean < 0.02,
        "mean size {got} vs {mean}"
    );
}

#[test]
fn intervals_are_deltas_that_add_up_to_the_totals() {
    let f = ShmFile::new("intervals", 16 << 20);
    let t = open(f.path(), true);
    let job = JobSpec {
        read_pct: 50,
        depth: 4,
        stop: Stop::Time(Duration::from_millis(2500)),
        interval: Duration::from_millis(500),
        ramp: Duration::from_millis(300),
        ..spec()
    }
    .validate()
    .unwrap();
    let mut seen = Vec::new();
    let r = engine::run(&job, &t, &RunControl::new(), &mut |i| seen.push(i.clone())).unwrap();
    assert_eq!(seen, r.intervals);
    assert_eq!(r.intervals.len(), 5);
    let reads: u64 = r.intervals.iter().map(|i| i.read.ops).sum();
    let writes: u64 = r.intervals.iter().map(|i| i.write.ops).sum();
    assert_eq!(reads, r.read.ops);
    assert_eq!(writes, r.write.ops);
    for (k, i) in r.intervals.iter().enumerate() {
        assert!((i.end_seconds - 0.5 * (k + 1) as f64).abs() < 1e-6);
        assert!(i.read.ops > 0 && i.write.ops > 0);
    }
    assert!((r.runtime_seconds - 2.5).abs() < 1e-6);
}

#[test]
fn byte_limited_run_moves_exactly_its_bytes() {
    let f = ShmFile::new("bytes", 16 << 20);
    let t = open(f.path(), false);
    let job = JobSpec {
        pattern: Pattern::Sequential,
        sizes: SizeMix::single(65536).unwrap(),
        depth: 4,
        workers: 2,
        stop: Stop::Bytes(32 << 20),
        ..spec()
    }
    .validate()
    .unwrap();
    let r = run(&job, &t);
    assert_eq!(r.total.bytes, 32 << 20);
    assert_eq!(r.total.ops, 512);
    assert!(r.stopped_early.is_none());
}

#[test]
fn verify_finds_no_mismatch_when_nothing_is_wrong() {
    let f = ShmFile::new("verify-clean", 8 << 20);
    let t = open(f.path(), true);
    let job = JobSpec {
        read_pct: 50,
        depth: 8,
        workers: 2,
        verify: true,
        sizes: SizeMix::parse("4k:50,16k:50").unwrap(),
        ..spec()
    }
    .validate()
    .unwrap();
    let r = run(&job, &t);
    assert!(r.verify.checked > 1000, "checked {}", r.verify.checked);
    assert_eq!(r.verify.mismatches, 0, "{:?}", r.verify.first);
}

#[test]
fn verify_catches_blocks_corrupted_behind_its_back() {
    let f = ShmFile::new("verify-corrupt", 1 << 20);
    let t = open(f.path(), true);
    let job = JobSpec {
        read_pct: 80,
        depth: 4,
        verify: true,
        stop: Stop::Time(Duration::from_secs(3)),
        ..spec()
    }
    .validate()
    .unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let path = f.path().to_path_buf();
    let d2 = done.clone();
    // After a second (every block has been written by then), damage one byte of a block
    // every 20 ms through another descriptor.
    let corrupter = std::thread::spawn(move || {
        let file = OpenOptions::new().write(true).open(&path).unwrap();
        std::thread::sleep(Duration::from_secs(1));
        let mut n = 0u64;
        while !d2.load(Ordering::Relaxed) {
            let block = (n * 37) % 256;
            file.write_all_at(&[0xA5], block * 4096 + 1000).unwrap();
            n += 1;
            std::thread::sleep(Duration::from_millis(20));
        }
        n
    });
    let r = run(&job, &t);
    done.store(true, Ordering::Relaxed);
    let damaged = corrupter.join().unwrap();
    assert!(damaged > 10);
    assert!(r.verify.mismatches > 0, "no mismatch found: {:?}", r.verify);
    for m in &r.verify.first {
        assert_eq!(m.offset % 4096, 0);
        assert_eq!(m.kind, engine::verify::MismatchKind::Checksum, "{m:?}");
    }
}

#[test]
fn io_errors_are_counted_with_offsets_and_stop_at_the_limit() {
    let f = ShmFile::new("errors", 4 << 20);
    let t = open(f.path(), false);
    let job = JobSpec {
        depth: 2,
        error_limit: 25,
        stop: Stop::Time(Duration::from_secs(5)),
        ..spec()
    }
    .validate()
    .unwrap();
    let path = f.path().to_path_buf();
    // Shrink the file under the run: reads past the new end come back short.
    let shrinker = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        let file = OpenOptions::new().write(true).open(&path).unwrap();
        file.set_len(64 << 10).unwrap();
    });
    let r = run(&job, &t);
    shrinker.join().unwrap();
    assert!(r.errors.count >= 25, "errors {}", r.errors.count);
    assert!(
        r.runtime_seconds < 4.0,
        "should stop early, ran {}",
        r.runtime_seconds
    );
    let why = r.stopped_early.expect("stopped early");
    assert!(why.contains("error limit"), "{why}");
    assert!(!r.errors.first.is_empty());
    for e in &r.errors.first {
        assert!(e.offset >= 64 << 10, "{e:?}");
        assert_eq!(e.op, "read");
    }
}

#[test]
fn write_job_on_read_only_target_is_refused() {
    let f = ShmFile::new("ro", 1 << 20);
    let t = open(f.path(), false);
    let job = JobSpec {
        read_pct: 0,
        ..spec()
    }
    .validate()
    .unwrap();
    let e = engine::run(&job, &t, &RunControl::new(), &mut |_| {}).unwrap_err();
    assert!(e.to_string().contains("read-only"), "{e}");
}

#[test]
fn external_stop_ends_the_run_early() {
    let f = ShmFile::new("stop", 4 << 20);
    let t = open(f.path(), false);
    let job = JobSpec {
        stop: Stop::Time(Duration::from_secs(30)),
        ..spec()
    }
    .validate()
    .unwrap();
    let control = RunControl::new();
    let c2 = control.clone();
    let stopper = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(500));
        c2.stop();
    });
    let r = engine::run(&job, &t, &control, &mut |_| {}).unwrap();
    stopper.join().unwrap();
    assert!(r.runtime_seconds < 2.0);
    assert_eq!(r.stopped_early.as_deref(), Some("stopped by request"));
    assert!(r.total.ops > 0);
}
