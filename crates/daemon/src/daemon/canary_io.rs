//! A canary's own I/O loop: the probe's thread sleeps to each I/O's due time and does
//! the pread (or pwrite) itself, and times each I/O twice. Since decision 0011 the
//! daemon's canaries run on the shared reactor (`super::reactor`), which times each I/O
//! the same way ([`IoTimes`]); this loop is where the reactor cannot run (an io_uring
//! without timed waits, or `DRIVEPROBE_CANARY_REACTOR=0`).
//!
//! Why not the engine: the engine hands a run to worker threads and collects their
//! intervals on the calling thread. For a rate-limited QD1 probe that is a second thread
//! per drive (770 threads at 256 drives), a hand-off and a wake-up of the collector each
//! interval, and a wake-up of the worker at each interval boundary, on every drive, for
//! as long as the daemon runs. Here one thread wakes once per I/O, and the interval's
//! work rides on the first I/O after the boundary (or a wake-up half an interval later
//! when none comes).
//!
//! What is measured, per I/O (see [`IoTimes`]): the **drive's service time**, from
//! submission to completion less any time the thread waited for a CPU in between, and
//! the **host's stall**, how late the I/O was issued against its due time plus that
//! wait. The two add up to the latency from the due time. The drive's quantiles come
//! from the service time; the stall is its own family
//! (`driveprobe_probe_host_stall_seconds`), so a busy host does not read as a slow drive.
//!
//! Jobs it runs ([`can_run`]): rate limited, one worker at queue depth 1, no verify, a
//! timed stop. Anything else (a verified write probe, a deeper queue) goes to the
//! engine as before.

use std::fs::File;
use std::os::unix::fs::FileExt;

use crate::engine::gen::OpGen;
use crate::engine::job::Arrival;
use crate::engine::{DirStats, Job, RunControl, Stop};
use crate::sys::buf::SlotBuffers;
use crate::target::Target;

/// The times of one I/O on the loop's clock (ns), and the thread's run delay (ns waited
/// runnable for a CPU, cumulative) read just before the submission and just after the
/// completion.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IoTimes {
    pub due: u64,
    pub issue: u64,
    pub done: u64,
    pub delay_before: u64,
    pub delay_after: u64,
}

impl IoTimes {
    /// Submission to completion.
    fn wall_ns(&self) -> u64 {
        self.done.saturating_sub(self.issue)
    }

    /// Time the thread waited for a CPU between submission and completion: preempted in
    /// the middle of the call, or woken late after the device completed.
    fn waited_inside_ns(&self) -> u64 {
        self.delay_after
            .saturating_sub(self.delay_before)
            .min(self.wall_ns())
    }

    /// The drive's part: submission to completion, less the host's wait inside it.
    pub fn service_ns(&self) -> u64 {
        self.wall_ns() - self.waited_inside_ns()
    }

    /// The host's part: how late the I/O was issued against its due time, plus the
    /// thread's wait for a CPU while it was in flight.
    pub fn host_stall_ns(&self) -> u64 {
        self.issue.saturating_sub(self.due) + self.waited_inside_ns()
    }

    /// From the due time to the completion: what the canary reported as latency before.
    pub fn latency_ns(&self) -> u64 {
        self.done.saturating_sub(self.due)
    }
}

/// A host stall kept to its 4 leading bits (rounded down: within 12.5%, 8 values an
/// octave). The window keeps each interval's distinct values: stalls of a few dozen
/// microseconds, each distinct to the nanosecond, made it hold thousands per drive (11
/// MiB at 256 drives at 50 IOPS); a host's stall needs no finer figure than this.
pub fn coarse_stall(ns: u64) -> u64 {
    let bits = 64 - ns.leading_zeros();
    let shift = bits.saturating_sub(4);
    (ns >> shift) << shift
}

/// Arrivals a canary may issue late, back to back, to catch up after a stall; beyond
/// that the missed ones are dropped. Bounds the I/Os in any window to the rate's share
/// plus this many (and one).
pub(super) const MAX_BACKLOG: f64 = 4.0;

/// Time for the loop: the monotonic clock, sleeping to a deadline, and this thread's run
/// delay. Tests inject their own.
pub trait Clock {
    fn now_ns(&mut self) -> u64;
    /// Sleeps until the clock reads `deadline` (or a little after).
    fn sleep_until(&mut self, deadline: u64);
    /// Nanoseconds this thread has waited, runnable, for a CPU since it started; 0 where
    /// the kernel does not say.
    fn run_delay_ns(&mut self) -> u64;
}

/// The host's clock: `CLOCK_MONOTONIC`, `clock_nanosleep` to an absolute deadline (no
/// drift from the time between computing a duration and sleeping it), and the run delay
/// from `/proc/thread-self/schedstat`, kept open and read with one `pread`.
pub struct HostClock {
    schedstat: Option<File>,
}

impl HostClock {
    /// For the calling thread (the schedstat file is this thread's): make it on the
    /// thread that runs the loop.
    pub fn for_this_thread() -> Self {
        // The loop sleeps between I/Os: wake on time, not up to 50 us late (the default
        // timer slack), which would land in every I/O's host stall.
        let _ = rustix::thread::set_current_timer_slack(std::num::NonZeroU64::new(1));
        HostClock {
            schedstat: File::open("/proc/thread-self/schedstat").ok(),
        }
    }
}

impl Clock for HostClock {
    #[inline]
    fn now_ns(&mut self) -> u64 {
        crate::engine::now_ns()
    }

    fn sleep_until(&mut self, deadline: u64) {
        let ts = rustix::time::Timespec {
            tv_sec: (deadline / 1_000_000_000) as i64,
            tv_nsec: (deadline % 1_000_000_000) as _,
        };
        // EINTR: the loop looks at the clock again and sleeps the rest.
        let _ = rustix::thread::clock_nanosleep_absolute(rustix::thread::ClockId::Monotonic, &ts);
    }

    #[inline]
    fn run_delay_ns(&mut self) -> u64 {
        let Some(f) = &self.schedstat else {
            return 0;
        };
        let mut buf = [0u8; 96];
        let n = f.read_at(&mut buf, 0).unwrap_or(0);
        parse_run_delay(&buf[..n]).unwrap_or(0)
    }
}

/// The second field of a schedstat line ("run_ns delay_ns slices").
fn parse_run_delay(line: &[u8]) -> Option<u64> {
    crate::engine::run_delay_of_schedstat(std::str::from_utf8(line).ok()?)
}

/// One interval's figures, handed to the caller at its end.
pub struct Interval<'a> {
    /// How long the interval lasted, seconds.
    pub seconds: f64,
    /// The drive's service times, per direction.
    pub read: &'a DirStats,
    pub write: &'a DirStats,
    /// The host's stall per I/O, both directions.
    pub stall: &'a DirStats,
    /// Seconds the thread waited, runnable, for a CPU in the interval.
    pub run_delay_seconds: f64,
    /// How long an I/O had been in flight at the interval's end (0: none in flight). This
    /// loop's intervals end between I/Os; the reactor's may end while one is out.
    pub in_flight_seconds: f64,
}

/// Whether this loop runs `job` (else the engine does).
pub fn can_run(job: &Job) -> bool {
    job.depth() == 1
        && job.workers() == 1
        && !job.verify()
        && job.rate().is_some()
        && job.ramp().is_zero()
        && matches!(job.stop(), Stop::Time(_))
        && !job.interval().is_zero()
}

/// Why a canary's own loop cannot start.
#[derive(Debug, thiserror::Error)]
pub enum SegmentError {
    /// [`can_run`] was not asked first: only a rate-limited job runs here.
    #[error("the canary loop needs a rate (a rate-limited QD1 probe)")]
    NoRate,
    #[error(transparent)]
    Region(#[from] crate::target::TargetError),
    #[error(transparent)]
    Gen(#[from] crate::engine::gen::GenError),
}

/// Runs `job` on `target` on the calling thread until its time is up or `control` is
/// stopped (checked at each wake-up: at least every interval and a half), calling
/// `on_interval` about once an interval. I/O errors are counted in the figures, never
/// fatal; an error is returned only when the loop cannot start.
pub fn run_segment(
    job: &Job,
    target: &Target,
    control: &RunControl,
    clock: &mut dyn Clock,
    on_interval: &mut dyn FnMut(&Interval),
) -> Result<(), SegmentError> {
    let rate = job.rate().ok_or(SegmentError::NoRate)?;
    let (mut gen, mut bufs) = generator(job, target)?;
    let file = target.file().clone();
    let gap = 1e9 / rate.iops;
    let interval = job.interval().as_nanos() as u64;
    // With no I/O due soon after a boundary, the interval's work waits this long for one
    // (a wake-up of its own otherwise): most intervals ride on an I/O's wake-up.
    let grace = interval / 2;
    let runtime = match job.stop() {
        Stop::Time(d) => d.as_nanos() as u64,
        _ => u64::MAX,
    };

    let t0 = clock.now_ns();
    let end = t0.saturating_add(runtime);
    let mut next_due = t0 as f64;
    let mut boundary = t0 + interval;
    let mut last_end = t0;
    let mut delay_mark = clock.run_delay_ns();
    let mut tally = Tally::new(job.latency_digits());
    let mut flush = |now: u64, delay: u64, f: &mut Tally| {
        on_interval(&Interval {
            seconds: now.saturating_sub(last_end) as f64 / 1e9,
            read: &f.read,
            write: &f.write,
            stall: &f.stall,
            run_delay_seconds: delay.saturating_sub(delay_mark) as f64 / 1e9,
            in_flight_seconds: 0.0,
        });
        last_end = now;
        delay_mark = delay;
        f.reset();
    };
    let mut now = t0;
    loop {
        if control.is_stopped() || now >= end {
            break;
        }
        if next_due <= now as f64 {
            let due = next_due as u64;
            next_due += match rate.arrival {
                Arrival::Poisson => -gap * gen.rng().unit_open0().ln(),
                _ => gap,
            };
            now = one_io(&mut gen, bufs.slot_mut(0), &file, clock, due, &mut tally);
            // Far behind (the drive or the host stalled): the arrivals missed are not made
            // up in a burst on a drive that may be sick; the I/O just done carries the
            // stall in its figures, and the schedule starts again from now.
            if next_due + MAX_BACKLOG * gap < now as f64 {
                next_due = now as f64;
            }
        }
        if now >= boundary {
            flush(now, clock.run_delay_ns(), &mut tally);
            // The next boundary on the grid (several, after a long stall).
            while boundary <= now {
                boundary += interval;
            }
            continue;
        }
        let wake = (next_due.max(0.0) as u64).min(boundary + grace).min(end);
        if wake > now {
            clock.sleep_until(wake);
        }
        now = clock.now_ns();
    }
    // The partial interval the segment ends on.
    let delay = clock.run_delay_ns();
    flush(now, delay, &mut tally);
    Ok(())
}

/// The segment's op generator, seeded as the engine seeds its first worker (the same
/// offsets as before), and its buffer, filled with random data.
fn generator(job: &Job, target: &Target) -> Result<(OpGen, SlotBuffers), SegmentError> {
    let region = job.resolve_on(target)?;
    let align = target.align().max(job.sizes().min() as u64);
    let seed = job.seed() ^ 0x9e37_79b9_7f4a_7c15;
    let mut gen = OpGen::new(job, region.start, region.len, align, 0, seed)?;
    let mut bufs = SlotBuffers::new(1, job.sizes().max() as usize);
    gen.rng().fill(bufs.slot_mut(0));
    Ok((gen, bufs))
}

/// Fresh random words in each sector of a write's buffer: no two writes alike (no dedup).
pub(crate) fn stamp(buf: &mut [u8], gen: &mut OpGen) {
    for sector in buf.chunks_exact_mut(512) {
        sector[..8].copy_from_slice(&gen.rng().next_u64().to_le_bytes());
    }
}

/// The generator's next I/O, meant to start at `due`, done in `buf` and counted in
/// `tally`; returns when it completed.
#[inline]
fn one_io(
    gen: &mut OpGen,
    buf: &mut [u8],
    file: &std::fs::File,
    clock: &mut dyn Clock,
    due: u64,
    tally: &mut Tally,
) -> u64 {
    let op = gen.next_op();
    let buf = &mut buf[..op.len as usize];
    if !op.read {
        stamp(buf, gen);
    }
    let (res, t) = timed_io(file, op, buf, clock, due);
    tally.record(op, res, &t);
    t.done
}

/// One synchronous I/O meant to start at `due`, and its times on `clock`.
#[inline]
fn timed_io(
    file: &std::fs::File,
    op: crate::engine::gen::Op,
    buf: &mut [u8],
    clock: &mut dyn Clock,
    due: u64,
) -> (rustix::io::Result<usize>, IoTimes) {
    let delay_before = clock.run_delay_ns();
    let issue = clock.now_ns();
    let res = if op.read {
        rustix::io::pread(file, buf, op.offset)
    } else {
        rustix::io::pwrite(file, buf, op.offset)
    };
    let done = clock.now_ns();
    let t = IoTimes {
        due,
        issue,
        done,
        delay_before,
        delay_after: clock.run_delay_ns(),
    };
    (res, t)
}

/// An interval's figures on the canary's own loop: the drive's per direction, and the
/// host's stall per I/O.
struct Tally {
    read: DirStats,
    write: DirStats,
    stall: DirStats,
}

impl Tally {
    fn new(digits: u8) -> Tally {
        Tally {
            read: DirStats::with_digits(digits),
            write: DirStats::with_digits(digits),
            stall: DirStats::with_digits(digits),
        }
    }

    /// Counts one I/O: its service time and host stall when whole, else an error.
    #[inline]
    fn record(&mut self, op: crate::engine::gen::Op, res: rustix::io::Result<usize>, t: &IoTimes) {
        let dir = if op.read {
            &mut self.read
        } else {
            &mut self.write
        };
        match res {
            Ok(n) if n == op.len as usize => {
                dir.record(t.service_ns(), op.len);
                self.stall.record(coarse_stall(t.host_stall_ns()), op.len);
            }
            Ok(_) => dir.error(0),
            Err(e) => dir.error(e.raw_os_error()),
        }
    }

    fn reset(&mut self) {
        self.read.reset();
        self.write.reset();
        self.stall.reset();
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn service_and_host_stall_add_up_to_the_latency_from_the_due_time() {
        // Issued 300 us late, 40 us in the call of which 25 us waiting for a CPU.
        let t = IoTimes {
            due: 1_000_000,
            issue: 1_300_000,
            done: 1_340_000,
            delay_before: 5_000,
            delay_after: 30_000,
        };
        assert_eq!(t.service_ns(), 15_000);
        assert_eq!(t.host_stall_ns(), 325_000);
        assert_eq!(t.service_ns() + t.host_stall_ns(), t.latency_ns());
        assert!(t.service_ns() <= t.latency_ns());
        // A run delay read that exceeds the call (two clocks) never makes a service time
        // below zero, and the sum still holds.
        let odd = IoTimes {
            delay_after: 90_000,
            ..t
        };
        assert_eq!(odd.service_ns(), 0);
        assert_eq!(odd.service_ns() + odd.host_stall_ns(), odd.latency_ns());
        // Issued early (a clock read before the due one): no negative stall.
        let early = IoTimes {
            issue: 999_000,
            ..t
        };
        assert_eq!(early.host_stall_ns(), 25_000);
        assert!(early.service_ns() <= early.latency_ns() + 1_000);
        // The stall is kept within 12.5% below, 8 values an octave.
        for v in [0u64, 1, 15, 16, 17, 999, 65_432, 5_220_000, u64::MAX] {
            let c = coarse_stall(v);
            assert!(c <= v && (v - c) as f64 <= v as f64 / 8.0, "{v} -> {c}");
        }
        let octave: std::collections::BTreeSet<u64> =
            (1 << 16..1 << 17).map(coarse_stall).collect();
        assert_eq!(octave.len(), 8);
        assert_eq!(parse_run_delay(b"123 456 7\n"), Some(456));
        assert_eq!(parse_run_delay(b""), None);
    }

    /// A clock that wakes every sleeper `late` ns after its deadline and moves `step` ns
    /// at each reading; inside each I/O (a reading of the run delay, then two of the
    /// clock) the thread waits `in_io` ns for a CPU, which the clock and the run delay
    /// both see.
    #[derive(Default)]
    struct FakeClock {
        now: u64,
        late: u64,
        step: u64,
        in_io: u64,
        delay: u64,
        /// 1: the run delay was just read; 2: then the clock (a submission).
        state: u8,
        reads: u64,
        sleeps: u64,
        /// (n, ns): the n-th sleep wakes `ns` later still (a host that stalled once).
        hiccup: (u64, u64),
    }

    impl Clock for FakeClock {
        fn now_ns(&mut self) -> u64 {
            self.state = match self.state {
                1 => 2,
                2 => {
                    self.now += self.in_io;
                    self.delay += self.in_io;
                    0
                }
                _ => 0,
            };
            self.now += self.step;
            self.now
        }
        fn sleep_until(&mut self, deadline: u64) {
            self.state = 0;
            self.sleeps += 1;
            self.now = self.now.max(deadline + self.late);
            if self.sleeps == self.hiccup.0 {
                self.now += self.hiccup.1;
            }
        }
        fn run_delay_ns(&mut self) -> u64 {
            self.state = 1;
            self.reads += 1;
            self.delay
        }
    }

    fn canary_job(iops: f64, seconds: u64) -> Job {
        canary_job_with(iops, seconds as f64, None, Arrival::Linear)
    }

    /// A canary's job (rate limited, QD1, psync, 2-digit histograms) for `seconds`, with
    /// an interval other than the default when given (the reactor's tests too).
    pub(crate) fn canary_job_with(
        iops: f64,
        seconds: f64,
        interval: Option<std::time::Duration>,
        arrival: Arrival,
    ) -> Job {
        let mut spec = crate::engine::JobSpec {
            rate: Some(crate::engine::RateLimit { iops, arrival }),
            stop: Stop::Time(std::time::Duration::from_secs_f64(seconds)),
            direct: false,
            backend: crate::engine::BackendChoice::Psync,
            latency_digits: 2,
            ..Default::default()
        };
        if let Some(interval) = interval {
            spec.interval = interval;
        }
        spec.validate().unwrap()
    }

    /// A file of `bytes` zeros on tmpfs, named after `prefix` (the folder goes with the
    /// first value).
    pub(crate) fn shm_file(prefix: &str, bytes: usize) -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::Builder::new()
            .prefix(prefix)
            .tempdir_in("/dev/shm")
            .unwrap();
        let path = dir.path().join("t.dat");
        std::fs::write(&path, vec![0u8; bytes]).unwrap();
        (dir, path)
    }

    /// A 1 MiB file target on tmpfs (the folder goes with the first value).
    fn shm_target() -> (tempfile::TempDir, Target) {
        let (dir, path) = shm_file("dp-canary-io-", 1 << 20);
        let target = Target::open(&path, false, None).unwrap();
        (dir, target)
    }

    /// A canary woken 3 s late (at 10 IOPS: 30 arrivals missed) issues at most the
    /// backlog's few late, not a burst of 30 on a drive that may be what stalled; the
    /// late I/O carries the stall as the host's.
    #[test]
    fn a_long_stall_is_not_made_up_in_a_burst() {
        let (_dir, target) = shm_target();
        let job = canary_job(10.0, 20);
        let mut clock = FakeClock {
            now: 1_000_000_000,
            step: 10_000,
            hiccup: (50, 3_000_000_000),
            ..Default::default()
        };
        let mut seen = Vec::new();
        run_segment(&job, &target, &RunControl::new(), &mut clock, &mut |iv| {
            seen.push((iv.read.ops, iv.stall.max_ns()));
        })
        .unwrap();
        let most = seen.iter().map(|s| s.0).max().unwrap();
        assert!(
            most <= 10 + MAX_BACKLOG as u64 + 1,
            "{most} I/Os in one interval at 10 IOPS after a stall: {seen:?}"
        );
        let ops: u64 = seen.iter().map(|s| s.0).sum();
        assert!((165..=180).contains(&ops), "{ops} I/Os: {seen:?}");
        let stall = seen.iter().map(|s| s.1).max().unwrap();
        assert!(stall >= coarse_stall(3_000_000_000), "{seen:?}");
    }

    /// Issue 21: on an injected clock that wakes the canary 200 us late and keeps it
    /// waiting for a CPU inside each I/O, the drive's figures are the I/O's own time and
    /// the host's are the lateness and the wait; issue 18: the interval's work rides on
    /// the I/Os' wake-ups (about one wake-up per I/O, not one more per interval).
    #[test]
    fn a_late_host_shows_in_the_stall_not_in_the_service_time() {
        let (_dir, target) = shm_target();
        let job = canary_job(10.0, 20);
        let mut clock = FakeClock {
            now: 1_000_000_000,
            late: 200_000,
            step: 10_000,
            ..Default::default()
        };
        let run = |clock: &mut FakeClock| {
            let mut seen = Vec::new();
            let control = RunControl::new();
            run_segment(&job, &target, &control, clock, &mut |iv| {
                seen.push((
                    iv.seconds,
                    iv.read.ops,
                    iv.read.max_ns(),
                    iv.stall.min_ns(),
                    iv.stall.max_ns(),
                ));
            })
            .unwrap();
            seen
        };
        let seen = run(&mut clock);
        let ops: u64 = seen.iter().map(|s| s.1).sum();
        assert!((199..=201).contains(&ops), "{ops} I/Os in 20 s at 10 IOPS");
        assert!((19..=21).contains(&seen.len()), "{} intervals", seen.len());
        // One clock step between submission and completion: the service time.
        for &(secs, n, service_max, _, stall_max) in &seen {
            assert!((0.9..=1.6).contains(&secs) || n == 0, "{seen:?}");
            if n > 0 {
                assert!(service_max <= 10_100, "{seen:?}");
                assert!(
                    (coarse_stall(200_000)..300_000).contains(&stall_max),
                    "{seen:?}"
                );
            }
        }
        // Woken 200 us late, plus the reads of the clock before the submission (all but
        // the first I/O, issued at the start without a sleep).
        assert!(
            seen[1..].iter().all(|s| s.3 >= coarse_stall(200_000)),
            "{seen:?}"
        );
        // A wake-up per I/O, give or take the ones an interval with no I/O near needs.
        assert!(
            clock.sleeps <= ops + 5,
            "{} sleeps for {ops} I/Os",
            clock.sleeps
        );

        // The same with 5 ms of waiting for a CPU inside each I/O: the host's part.
        let mut busy = FakeClock {
            now: 1_000_000_000,
            late: 200_000,
            step: 10_000,
            in_io: 5_000_000,
            ..Default::default()
        };
        let seen = run(&mut busy);
        assert!(seen.iter().map(|s| s.1).sum::<u64>() >= 190, "{seen:?}");
        for &(_, n, service_max, _, stall_max) in &seen {
            if n > 0 {
                assert!(service_max <= 10_100, "{seen:?}");
                assert!(stall_max >= coarse_stall(5_200_000), "{seen:?}");
            }
        }
        assert!(
            seen[1..].iter().all(|s| s.3 >= coarse_stall(5_200_000)),
            "{seen:?}"
        );
        assert!(
            busy.reads > 2 * ops,
            "the run delay is read around each I/O"
        );
    }

    /// What one 3 s canary at 200 IOPS pinned beside busy threads measured (this loop's
    /// and the reactor's CPU-hog tests).
    pub(crate) struct Pinned {
        pub(crate) service_p50: u64,
        pub(crate) stall_p50: u64,
        /// Sums over the run, ns.
        pub(crate) service_sum: u128,
        pub(crate) stall_sum: u128,
        /// The I/O thread's wait for a CPU over the run, from the kernel (schedstat),
        /// where the test can read it (its own thread).
        pub(crate) run_delay: Option<u64>,
    }

    impl Pinned {
        /// The figures of a run's merged service times and stalls.
        pub(crate) fn of(service: &DirStats, stall: &DirStats, run_delay: Option<u64>) -> Self {
            assert!(service.ops > 300, "{} I/Os in 3 s at 200 IOPS", service.ops);
            Pinned {
                service_p50: service.percentile_ns(50.0),
                stall_p50: stall.percentile_ns(50.0),
                service_sum: service.sum_ns(),
                stall_sum: stall.sum_ns(),
                run_delay,
            }
        }

        pub(crate) fn describe(&self) -> String {
            let waited = self.run_delay.map_or(String::new(), |d| {
                format!(", waited for a CPU (schedstat) {} us", d / 1000)
            });
            format!(
                "service p50 {} ns, host stall p50 {} ns; sums: service {} us, host stall {} us{waited}",
                self.service_p50,
                self.stall_p50,
                self.service_sum / 1000,
                self.stall_sum / 1000,
            )
        }
    }

    fn pinned_run(path: &std::path::Path, cpu: usize, hogs: usize) -> Pinned {
        let path = path.to_path_buf();
        crate::daemon::canary::tests::beside_cpu_hogs(cpu, hogs, move || {
            let job = canary_job(200.0, 3);
            let target = Target::open(&path, false, None).unwrap();
            let mut service = DirStats::with_digits(2);
            let mut stall = DirStats::with_digits(2);
            let mut clock = HostClock::for_this_thread();
            let d0 = clock.run_delay_ns();
            run_segment(&job, &target, &RunControl::new(), &mut clock, &mut |iv| {
                service.merge(iv.read);
                stall.merge(iv.stall);
            })
            .unwrap();
            let run_delay = clock.run_delay_ns().saturating_sub(d0);
            Pinned::of(&service, &stall, Some(run_delay))
        })
    }

    /// Issue 21: CPU hogs on the canary's CPU raised its latency as if the drive were
    /// slow. Now the host's stall rises beside them, and the drive's service time stays
    /// below it: the wait is the host's.
    #[test]
    fn cpu_hogs_raise_the_host_stall_not_the_service_time() {
        let (_dir, path) = shm_file("dp-canary-io-hog-", 4 << 20);
        let cpu = crate::daemon::canary::tests::first_allowed_cpu();
        // Within one run, not against a run "alone": on a shared machine the run alone
        // may wait for a CPU as much as the crowded one (issue 22). The kernel's count of
        // the thread's wait for a CPU is the reference the figures are checked against.
        let alone = pinned_run(&path, cpu, 0);
        let crowded = pinned_run(&path, cpu, 3);
        let figures = Pinned::describe;
        eprintln!(
            "alone: {}\nbeside three hogs: {}",
            figures(&alone),
            figures(&crowded)
        );
        assert!(
            crowded.run_delay.unwrap_or(0) > 0,
            "three hogs on its CPU and the canary never waited: {}",
            figures(&crowded)
        );
        // The CPU wait lands in the host's stall (at least half of it: the stall is
        // rounded down to an eighth, and a little waiting happens between I/Os), and not
        // in the drive's service time.
        assert!(
            crowded.stall_sum * 2 >= crowded.run_delay.unwrap_or(0) as u128,
            "the host stall misses the CPU wait: {}",
            figures(&crowded)
        );
        // A tmpfs read takes microseconds; waiting for a hog's time slice, milliseconds.
        assert!(
            crowded.service_p50 < crowded.stall_p50,
            "beside three hogs the service time p50 is not below the host stall p50: {}",
            figures(&crowded)
        );
        assert!(
            crowded.service_sum < crowded.stall_sum,
            "beside three hogs the service time took more than the host stall: {}",
            figures(&crowded)
        );
    }
}
