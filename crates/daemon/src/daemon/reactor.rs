//! The canaries' reactor: one thread and one io_uring issue every rate-limited QD1
//! canary's I/O, so the daemon wakes far fewer times than it does I/Os.
//!
//! Why: a canary on a thread of its own wakes once per I/O, and on a 2-core VM each
//! wake-up costs about 20 us of a core before any work (BENCHMARKS.md, "The canary's own
//! loop"): 256 drives at 5 IOPS were 5% of a core for the wake-ups alone. Here one
//! wake-up issues every I/O due within a small slack ([`MAX_SLACK_NS`], at most 1/20 of
//! the canary's mean gap: the Poisson schedule is a sampling plan, not a contract to the
//! microsecond) and reaps every completion that came together (decision 0011).
//!
//! Three kinds of thread, each doing only what cannot block the others:
//!
//! - **The reactor** submits and reaps, and times each I/O as the canary's own loop does
//!   ([`IoTimes`]): submission to completion less the reactor's wait for a CPU in between
//!   is the drive's service time; how late the I/O was issued, plus that wait, is the
//!   host's stall. The I/O is asynchronous, so a drive that does not answer holds only
//!   its own canary: the others go on, and the hung I/O's time is the drive's when it
//!   completes. The reactor never takes a lock another thread may hold for long, nor
//!   touches a histogram: each I/O is a [`Sample`] in its canary's list for the interval.
//! - **The observer** turns each interval's samples into figures and runs the canary's
//!   `on_interval` (windows, status, holds), for every canary whose interval ended at
//!   that moment: interval boundaries are on one grid for all, so that is one wake-up an
//!   interval. A slow `on_interval` (a lock held by a scrape) delays only figures, never
//!   an I/O's timing: the reactor merges the next interval in until it is taken.
//! - **The canary's own thread** opens the target, waits for its holds, and sleeps while
//!   the segment runs, waking only for the checks that may block (the sleeping-disk
//!   question, the file target's identity) at their own period.
//!
//! `DRIVEPROBE_CANARY_REACTOR=0` in the daemon's environment keeps each canary on its own
//! thread (`canary_io::run_segment`), as does a kernel whose io_uring cannot time a wait.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use crate::engine::gen::OpGen;
use crate::engine::job::Arrival;
use crate::engine::{DirStats, Job, RunControl, Stop};
use crate::sys::shared_ring::SharedRing;
use crate::target::Target;

use super::canary_io::{
    coarse_stall, stamp, Clock, HostClock, Interval, IoTimes, SegmentError, MAX_BACKLOG,
};

/// The most an I/O is issued ahead of its due time to share a wake-up with another.
pub const MAX_SLACK_NS: u64 = 10_000_000;
/// Submissions the ring takes at once (its completion queue holds twice that in flight).
const RING_ENTRIES: u32 = 1024;
/// How long after a run-delay reading the next I/O may reuse it (see `run`).
const MARK_NS: u64 = 20_000;
/// The longest the reactor sleeps with nothing due.
const IDLE_NS: u64 = 1_000_000_000;

/// A canary's interval work, run on the observer thread.
pub type Observer = Box<dyn FnMut(&Interval) + Send>;

/// One I/O's outcome, as the reactor records it.
#[derive(Debug, Clone, Copy)]
struct Sample {
    read: bool,
    len: u32,
    /// The drive's service time and the host's stall (ns), or the error (errno; 0 for a
    /// short transfer).
    outcome: Result<(u64, u64), i32>,
}

/// An interval of one canary, handed from the reactor to the observer.
struct Flush {
    id: u64,
    seconds: f64,
    run_delay_ns: u64,
    samples: Vec<Sample>,
    /// How long the canary's I/O has been in flight at the interval's end (0: none).
    in_flight_ns: u64,
    last: bool,
}

/// What the observer keeps of a canary.
struct Watch {
    observer: Observer,
    read: DirStats,
    write: DirStats,
    stall: DirStats,
    events: mpsc::Sender<Event>,
    control: RunControl,
    /// Set by the reactor when it hands an interval over, cleared once it is observed.
    pending: Arc<AtomicBool>,
}

enum Event {
    /// An interval had I/O errors: the owner may want to look at its target now.
    Errors,
}

/// A canary waiting to join the reactor.
struct NewSlot {
    id: u64,
    file: Arc<std::fs::File>,
    /// Read and written on the reactor's thread (a file in memory).
    sync: bool,
    size: usize,
    gen: OpGen,
    gap: f64,
    poisson: bool,
    interval: u64,
    runtime: u64,
    control: RunControl,
    pending: Arc<AtomicBool>,
}

struct Shared {
    incoming: Mutex<Vec<NewSlot>>,
    watches: Mutex<HashMap<u64, Watch>>,
    next_id: AtomicU64,
    /// False once the reactor or observer thread has ended (it never should).
    alive: AtomicBool,
    /// The reactor's wake-ups and the I/Os it issued (tests compare them).
    wakes: AtomicU64,
    ios: AtomicU64,
    /// Wake-ups that issued at least one I/O.
    issuing_wakes: AtomicU64,
}

impl Shared {
    fn lock_incoming(&self) -> std::sync::MutexGuard<'_, Vec<NewSlot>> {
        self.incoming.lock().unwrap_or_else(|e| e.into_inner())
    }
    fn lock_watches(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Watch>> {
        self.watches.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Marks the reactor dead when its thread ends, however it ends.
struct AliveGuard(Arc<Shared>);

impl Drop for AliveGuard {
    fn drop(&mut self) {
        self.0.alive.store(false, Ordering::Release);
        // Owners waiting on a segment hear it as the end of their channel.
        self.0.lock_watches().clear();
    }
}

/// Why the reactor cannot start; canaries then run on their own threads.
#[derive(Debug, thiserror::Error)]
pub enum ReactorError {
    #[error("io_uring is not usable here ({0}); each canary runs on its own thread")]
    Ring(std::io::Error),
    #[error("cannot start the reactor's threads: {0}")]
    Thread(std::io::Error),
    #[error("turned off by DRIVEPROBE_CANARY_REACTOR=0")]
    Off,
}

/// The reactor's handle. Its threads live as long as the process.
pub struct Reactor {
    shared: Arc<Shared>,
    thread: std::thread::Thread,
}

/// The process's reactor, started at the first call; `None` where it cannot run (said
/// once in the log), or where its threads have ended.
pub fn global() -> Option<&'static Reactor> {
    static REACTOR: OnceLock<Option<Reactor>> = OnceLock::new();
    REACTOR
        .get_or_init(|| {
            let off = std::env::var("DRIVEPROBE_CANARY_REACTOR").is_ok_and(|v| v == "0");
            let r = if off {
                Err(ReactorError::Off)
            } else {
                Reactor::start()
            };
            match r {
                Ok(r) => {
                    tracing::info!(
                        "canary reactor: one thread and one io_uring issue every rate-limited canary's I/O"
                    );
                    Some(r)
                }
                Err(e) => {
                    tracing::info!("canary reactor: {e}");
                    None
                }
            }
        })
        .as_ref()
        .filter(|r| r.shared.alive.load(Ordering::Acquire))
}

/// A segment running on the reactor, as its owner sees it.
pub struct Segment {
    events: mpsc::Receiver<Event>,
    shared: Arc<Shared>,
}

/// What [`Segment::wait`] saw.
#[derive(Debug, PartialEq, Eq)]
pub enum Wait {
    /// The segment has ended, its last interval observed.
    Done,
    /// An interval had I/O errors.
    Errors,
    /// Nothing happened within the time asked.
    TimedOut,
    /// The reactor's threads are gone; the segment is lost.
    Lost,
}

impl Segment {
    /// Waits up to `timeout` for the segment's end or an event.
    pub fn wait(&self, timeout: Duration) -> Wait {
        match self.events.recv_timeout(timeout) {
            Ok(Event::Errors) => Wait::Errors,
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                if self.shared.alive.load(Ordering::Acquire) {
                    Wait::Done
                } else {
                    Wait::Lost
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if self.shared.alive.load(Ordering::Acquire) {
                    Wait::TimedOut
                } else {
                    Wait::Lost
                }
            }
        }
    }
}

impl Reactor {
    /// Starts a reactor's two threads (tests make their own; the daemon uses [`global`]).
    pub fn start() -> Result<Reactor, ReactorError> {
        let shared = Arc::new(Shared {
            incoming: Mutex::new(Vec::new()),
            watches: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(0),
            alive: AtomicBool::new(true),
            wakes: AtomicU64::new(0),
            ios: AtomicU64::new(0),
            issuing_wakes: AtomicU64::new(0),
        });
        let (flush_tx, flush_rx) = mpsc::channel::<Vec<Flush>>();
        let (ready_tx, ready_rx) = mpsc::sync_channel::<Result<(), std::io::Error>>(1);
        let s = shared.clone();
        let reactor = std::thread::Builder::new()
            .name("dp-reactor".into())
            .spawn(move || {
                // The ring is made on the thread that submits to it (single issuer).
                match SharedRing::new(RING_ENTRIES) {
                    Ok(ring) => {
                        let _ = ready_tx.send(Ok(()));
                        run(s, ring, &flush_tx);
                    }
                    Err(e) => {
                        let _guard = AliveGuard(s);
                        let _ = ready_tx.send(Err(e));
                    }
                }
            })
            .map_err(ReactorError::Thread)?;
        match ready_rx.recv() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(ReactorError::Ring(e)),
            Err(_) => {
                return Err(ReactorError::Ring(std::io::Error::other(
                    "the reactor thread ended at start",
                )))
            }
        }
        let s = shared.clone();
        std::thread::Builder::new()
            .name("dp-reactor-obs".into())
            .spawn(move || {
                let _alive = AliveGuard(s.clone());
                observe(&s, flush_rx);
            })
            .map_err(ReactorError::Thread)?;
        Ok(Reactor {
            thread: reactor.thread().clone(),
            shared,
        })
    }

    /// Runs `job` (a job [`super::canary_io::can_run`] takes) on `target` until its time is
    /// up or `control` is stopped, calling `observer` about once an interval on the
    /// observer thread, the last time for the interval the segment ends on. I/O errors are
    /// counted in the figures, never fatal; an error is returned only when the segment
    /// cannot start.
    pub fn start_segment(
        &self,
        job: &Job,
        target: &Target,
        control: &RunControl,
        observer: Observer,
    ) -> Result<Segment, SegmentError> {
        let rate = job.rate().ok_or(SegmentError::NoRate)?;
        let region = job.resolve_on(target)?;
        let align = target.align().max(job.sizes().min() as u64);
        // The seed the engine gives its first worker: the same offsets as before.
        let seed = job.seed() ^ 0x9e37_79b9_7f4a_7c15;
        let gen = OpGen::new(job, region.start, region.len, align, 0, seed)?;
        let rate = Rate {
            gap: 1e9 / rate.iops,
            poisson: matches!(rate.arrival, Arrival::Poisson),
        };
        let runtime = match job.stop() {
            Stop::Time(d) => d.as_nanos() as u64,
            _ => u64::MAX,
        };
        let place = Place {
            file: target.file().clone(),
            size: job.sizes().max() as usize,
            sync: target.in_memory(),
        };
        Ok(self.join(
            place,
            gen,
            rate,
            job.interval(),
            runtime,
            job.latency_digits(),
            control,
            observer,
        ))
    }

    /// A canary joins with its file and buffer size, offsets, rate, interval, run time (ns),
    /// histogram digits, control and interval work.
    #[allow(clippy::too_many_arguments)]
    fn join(
        &self,
        place: Place,
        gen: OpGen,
        rate: Rate,
        interval: Duration,
        runtime: u64,
        digits: u8,
        control: &RunControl,
        observer: Observer,
    ) -> Segment {
        let id = self.shared.next_id.fetch_add(1, Ordering::Relaxed);
        let pending = Arc::new(AtomicBool::new(false));
        let (events, rx) = mpsc::channel();
        self.shared.lock_watches().insert(
            id,
            Watch {
                observer,
                // A few I/Os an interval: lists, not 37 KB histograms to clear and walk.
                read: DirStats::sparse(digits),
                write: DirStats::sparse(digits),
                stall: DirStats::sparse(digits),
                events,
                control: control.clone(),
                pending: pending.clone(),
            },
        );
        self.shared.lock_incoming().push(NewSlot {
            id,
            file: place.file,
            sync: place.sync,
            size: place.size,
            gen,
            gap: rate.gap,
            poisson: rate.poisson,
            interval: (interval.as_nanos() as u64).max(1_000_000),
            runtime,
            control: control.clone(),
            pending,
        });
        self.thread.unpark();
        Segment {
            events: rx,
            shared: self.shared.clone(),
        }
    }

    /// Whether a canary on `target` runs on the reactor. A file in memory does (its I/O
    /// is done on the reactor's thread: it does not wait for a device; a tmpfs page
    /// swapped out is read back in that call). A block device does. A file does only if
    /// it takes non-blocking reads (ext4, xfs, btrfs): io_uring hands the I/O of one that
    /// does not (FUSE, some network filesystems) to a kernel worker, and that worker's
    /// wait for a CPU would read as the drive's time, so those canaries keep their own
    /// thread. (A bio-based block device that refuses non-blocking I/O, some
    /// device-mapper and md targets, is handed to a worker the same way; the kernel does
    /// not say which do, so they stay on the ring, with that hand-off in their time.)
    pub fn takes(target: &Target) -> bool {
        target.is_block_device() || target.in_memory() || takes_nowait(target)
    }

    /// Wake-ups of the reactor thread, those that issued I/O, and I/Os it issued, so
    /// far.
    pub fn counts(&self) -> (u64, u64, u64) {
        (
            self.shared.wakes.load(Ordering::Relaxed),
            self.shared.issuing_wakes.load(Ordering::Relaxed),
            self.shared.ios.load(Ordering::Relaxed),
        )
    }
}

/// Where a canary's I/O goes: its file, the largest I/O, and whether it is done on the
/// reactor's thread (a file in memory).
struct Place {
    file: Arc<std::fs::File>,
    size: usize,
    sync: bool,
}

/// A canary's schedule: the mean gap between I/Os (ns), Poisson or even.
#[derive(Debug, Clone, Copy)]
struct Rate {
    gap: f64,
    poisson: bool,
}

/// One I/O in flight.
#[derive(Debug, Clone, Copy)]
struct Flight {
    /// Its due time, or the wake-up it was issued at if that was planned earlier (an
    /// I/O issued early within its slack shares the planned wake-up's lateness).
    due: u64,
    issue: u64,
    /// The reactor's wait for a CPU inside the submission.
    submit_waited: u64,
    read: bool,
    len: u32,
}

/// A canary in the reactor.
struct Slot {
    id: u64,
    gen: OpGen,
    gap: f64,
    poisson: bool,
    slack: u64,
    /// A file in memory: read and written on the reactor's thread (see `Reactor::takes`).
    sync: Option<Arc<std::fs::File>>,
    next_due: f64,
    interval: u64,
    boundary: u64,
    end: u64,
    last_end: u64,
    delay_mark: u64,
    control: RunControl,
    samples: Vec<Sample>,
    pending: Arc<AtomicBool>,
    flight: Option<Flight>,
    /// Stopped (or its time is up) with an I/O in flight: no new I/O, and the segment
    /// ends when that one completes, so its time is in the figures and the drive is not
    /// let go while the canary's I/O is still in it.
    stopping: bool,
}

impl Slot {
    /// Records the completion of the I/O in flight at `done`, with the ring's result
    /// `res`, the reactor having waited `waited` ns for a CPU since it was woken.
    fn complete(&mut self, res: i32, done: u64, waited: u64) {
        let Some(f) = self.flight.take() else { return };
        let t = IoTimes {
            due: f.due,
            issue: f.issue,
            done,
            delay_before: 0,
            delay_after: f.submit_waited + waited,
        };
        let outcome = if res == f.len as i32 {
            Ok((t.service_ns(), coarse_stall(t.host_stall_ns())))
        } else if res >= 0 {
            Err(0)
        } else {
            Err(-res)
        };
        self.samples.push(Sample {
            read: f.read,
            len: f.len,
            outcome,
        });
        // Far behind (the drive or the host stalled): the arrivals missed are not made up
        // in a burst on a drive that may be sick; the schedule starts again from now.
        if self.next_due + MAX_BACKLOG * self.gap < done as f64 {
            self.next_due = done as f64;
        }
    }

    /// The interval so far, handed over (or kept growing while the last is not observed).
    fn flush(&mut self, now: u64, delay: u64, last: bool, out: &mut Vec<Flush>) {
        if !last && self.pending.load(Ordering::Acquire) {
            return;
        }
        self.pending.store(true, Ordering::Release);
        out.push(Flush {
            id: self.id,
            seconds: now.saturating_sub(self.last_end) as f64 / 1e9,
            run_delay_ns: delay.saturating_sub(self.delay_mark),
            samples: std::mem::replace(&mut self.samples, Vec::with_capacity(8)),
            in_flight_ns: self.flight.map_or(0, |f| now.saturating_sub(f.issue)),
            last,
        });
        self.last_end = now;
        self.delay_mark = delay;
    }

    /// The next I/O: its due time (against the planned wake-up `planned`) and the op, the
    /// schedule moved on.
    fn next(&mut self, planned: u64) -> (u64, crate::engine::gen::Op) {
        let due = (self.next_due.max(0.0) as u64).min(planned);
        self.next_due += if self.poisson {
            -self.gap * self.gen.rng().unit_open0().ln()
        } else {
            self.gap
        };
        (due, self.gen.next_op())
    }
}

/// Whether the target's file answers a non-blocking read (`RWF_NOWAIT`): anything but
/// "not supported" is a yes (EAGAIN: it would have blocked, so it does take them).
fn takes_nowait(target: &Target) -> bool {
    let len = (target.align().max(512) as usize).min(4096);
    let mut buf = crate::sys::buf::SlotBuffers::new(1, 4096);
    let mut iov = [std::io::IoSliceMut::new(&mut buf.slot_mut(0)[..len])];
    let r = rustix::io::preadv2(
        &**target.file(),
        &mut iov,
        0,
        rustix::io::ReadWriteFlags::NOWAIT,
    );
    !matches!(r, Err(e) if e == rustix::io::Errno::OPNOTSUPP)
}

/// The first boundary of an `interval` grid after `now`.
fn next_boundary(now: u64, interval: u64) -> u64 {
    (now / interval + 1) * interval
}

/// The reactor's loop. Returns only when the observer is gone.
fn run(shared: Arc<Shared>, mut ring: SharedRing, flushes: &mpsc::Sender<Vec<Flush>>) {
    // A local, dropped before the ring (a parameter, dropped after every local): the
    // reactor is known dead before the ring's drop waits for I/O a hung drive may never
    // complete.
    let _alive = AliveGuard(shared.clone());
    let mut clock = HostClock::for_this_thread();
    let mut r = ReactorLoop {
        // The wake-up the last sleep was planned for, and the run delay when it began.
        planned: clock.now_ns(),
        slept_delay: clock.run_delay_ns(),
        clock,
        ring: &mut ring,
        slots: Vec::new(),
        batch: Vec::new(),
        early: Vec::new(),
    };
    loop {
        shared.wakes.fetch_add(1, Ordering::Relaxed);
        let now = r.clock.now_ns();
        let delay = r.clock.run_delay_ns();
        r.reap_woken(now, delay);
        admit(&shared, r.ring, &mut r.slots, now, delay);
        r.ends_and_boundaries(now, delay);
        if !r.batch.is_empty() && flushes.send(std::mem::take(&mut r.batch)).is_err() {
            return;
        }
        let issued = r.issue_due(now);
        shared.ios.fetch_add(issued, Ordering::Relaxed);
        if issued > 0 {
            shared.issuing_wakes.fetch_add(1, Ordering::Relaxed);
        }
        r.sleep();
    }
}

/// The reactor's state between wake-ups.
struct ReactorLoop<'a> {
    clock: HostClock,
    ring: &'a mut SharedRing,
    /// Indexed by the ring's slot.
    slots: Vec<Option<Slot>>,
    /// Intervals flushed on this wake-up, for the observer.
    batch: Vec<Flush>,
    /// The wake-up the last sleep was planned for, and the run delay when it began.
    planned: u64,
    slept_delay: u64,
    /// Completions of other canaries taken while submitting one.
    early: Vec<(u32, i32, u64)>,
}

/// The run delay (schedstat) read after one I/O is the one before the next (a read of
/// /proc/thread-self/schedstat costs microseconds; one per I/O, not two), when the next
/// is issued within MARK_NS of it: a preemption in between would show as a longer gap on
/// the clock, and then it is read again.
#[derive(Default)]
struct DelayMark(Option<(u64, u64)>);

impl DelayMark {
    /// The run delay before an I/O is issued.
    #[inline]
    fn before(&self, clock: &mut HostClock) -> u64 {
        let pre = clock.now_ns();
        match self.0 {
            Some((d, at)) if pre.saturating_sub(at) < MARK_NS => d,
            _ => clock.run_delay_ns(),
        }
    }

    /// The run delay once an I/O is issued, kept for the next.
    #[inline]
    fn after(&mut self, clock: &mut HostClock) -> u64 {
        let d1 = clock.run_delay_ns();
        self.0 = Some((d1, clock.now_ns()));
        d1
    }
}

impl ReactorLoop<'_> {
    /// What completed while the reactor slept: its wait for a CPU since it was woken is
    /// the host's.
    fn reap_woken(&mut self, now: u64, delay: u64) {
        let woken_late = delay.saturating_sub(self.slept_delay);
        let slots = &mut self.slots;
        self.ring.reap(|r, res| {
            if let Some(Some(s)) = slots.get_mut(r as usize) {
                s.complete(res, now, woken_late);
            }
        });
    }

    /// Ends and interval boundaries: a stopped segment ends once its I/O is back.
    fn ends_and_boundaries(&mut self, now: u64, delay: u64) {
        for (r, entry) in self.slots.iter_mut().enumerate() {
            let Some(s) = entry else { continue };
            if s.control.is_stopped() || now >= s.end {
                s.stopping = true;
            }
            if s.stopping && s.flight.is_none() {
                s.flush(now, delay, true, &mut self.batch);
                self.ring.close(r as u32);
                *entry = None;
                continue;
            }
            if now >= s.boundary {
                s.flush(now, delay, false, &mut self.batch);
                s.boundary = next_boundary(now, s.interval);
            }
        }
    }

    /// Every idle canary's I/O due within its slack, each submitted and timed alone (one
    /// system call each, all on this one wake-up). Returns how many were issued.
    fn issue_due(&mut self, now: u64) -> u64 {
        let mut issued = 0;
        self.early.clear();
        let mut mark = DelayMark::default();
        for r in 0..self.slots.len() {
            let Some(s) = &self.slots[r] else { continue };
            if s.stopping || s.flight.is_some() || s.next_due > (now + s.slack) as f64 {
                continue;
            }
            if s.sync.is_none() && !self.ring.has_room() {
                continue;
            }
            issued += 1;
            self.issue(r, &mut mark);
        }
        for (r, res, done) in self.early.drain(..) {
            if let Some(Some(s)) = self.slots.get_mut(r as usize) {
                s.complete(res, done, 0);
            }
        }
        issued
    }

    /// Issues slot `r`'s next I/O: a file in memory is read or written here (the call
    /// cannot hang, and io_uring would hand it to a kernel worker, a wake-up per I/O);
    /// other I/O goes to the ring, and completes now if it completed at submission.
    #[inline]
    fn issue(&mut self, r: usize, mark: &mut DelayMark) {
        let ReactorLoop {
            clock,
            ring,
            slots,
            planned,
            early,
            ..
        } = self;
        let Some(s) = slots[r].as_mut() else { return };
        let (due, op) = s.next(*planned);
        let buf = &mut ring.buf_mut(r as u32)[..op.len as usize];
        if !op.read {
            stamp(buf, &mut s.gen);
        }
        if let Some(file) = &s.sync {
            let d0 = mark.before(clock);
            let issue = clock.now_ns();
            let res = if op.read {
                rustix::io::pread(&**file, buf, op.offset)
            } else {
                rustix::io::pwrite(&**file, buf, op.offset)
            };
            let done = clock.now_ns();
            let waited = mark.after(clock).saturating_sub(d0);
            s.flight = Some(Flight {
                due,
                issue,
                submit_waited: 0,
                read: op.read,
                len: op.len,
            });
            let res = match res {
                Ok(n) => n as i32,
                Err(e) => -e.raw_os_error(),
            };
            s.complete(res, done, waited);
            return;
        }
        ring.queue(r as u32, op.read, op.offset, op.len);
        let d0 = mark.before(clock);
        let issue = clock.now_ns();
        if let Err(e) = ring.submit() {
            tracing::warn!("canary reactor: submission failed: {e}");
        }
        let done = clock.now_ns();
        let d1 = mark.after(clock);
        s.flight = Some(Flight {
            due,
            issue,
            submit_waited: d1.saturating_sub(d0),
            read: op.read,
            len: op.len,
        });
        // Completed at submission (a page-cache hit): done now. Another canary's
        // completion taken here came while this thread ran: its wait is in its service
        // time, at most this loop's few microseconds.
        ring.reap(|r2, res| {
            if r2 as usize == r {
                s.complete(res, done, 0);
            } else {
                early.push((r2, res, done));
            }
        });
    }

    /// When to wake: the next due I/O or boundary, at most IDLE_NS away.
    fn deadline(&self, now: u64) -> u64 {
        let mut deadline = now + IDLE_NS;
        for s in self.slots.iter().flatten() {
            deadline = deadline.min(s.boundary);
            if s.stopping {
                // Waiting for its last I/O: the completion wakes the reactor, or it came
                // during this wake-up's submissions and the slot ends now.
                if s.flight.is_none() {
                    deadline = now;
                }
                continue;
            }
            deadline = deadline.min(s.end);
            if s.flight.is_none() {
                let due = s.next_due.max(0.0) as u64;
                // Due but the ring is full: look again in a millisecond.
                let full = s.sync.is_none() && !self.ring.has_room();
                deadline = deadline.min(due.max(now + 1_000_000 * u64::from(full)));
            }
        }
        deadline
    }

    /// Sleeps to the next due I/O or boundary, or the first completion.
    fn sleep(&mut self) {
        let now = self.clock.now_ns();
        let deadline = self.deadline(now);
        if deadline <= now {
            self.planned = now;
            self.slept_delay = self.clock.run_delay_ns();
            return;
        }
        self.planned = deadline;
        self.slept_delay = self.clock.run_delay_ns();
        let wait = Duration::from_nanos(deadline - now);
        if self.ring.in_flight() > 0 {
            if let Err(e) = self.ring.submit_and_wait(wait) {
                tracing::warn!("canary reactor: wait failed: {e}");
                std::thread::sleep(wait.min(Duration::from_millis(10)));
            }
        } else {
            // A canary joining wakes this (unpark).
            std::thread::park_timeout(wait);
        }
    }
}

/// The canaries that asked to join, given their ring slots.
fn admit(
    shared: &Shared,
    ring: &mut SharedRing,
    slots: &mut Vec<Option<Slot>>,
    now: u64,
    delay: u64,
) {
    for n in shared.lock_incoming().drain(..) {
        let r = ring.open(n.file.clone(), n.size);
        let mut gen = n.gen;
        gen.rng().fill(ring.buf_mut(r));
        let slot = Slot {
            id: n.id,
            gen,
            gap: n.gap,
            poisson: n.poisson,
            slack: ((n.gap / 20.0) as u64).min(MAX_SLACK_NS),
            sync: n.sync.then_some(n.file),
            next_due: now as f64,
            interval: n.interval,
            boundary: next_boundary(now, n.interval),
            end: now.saturating_add(n.runtime),
            last_end: now,
            delay_mark: delay,
            control: n.control,
            samples: Vec::with_capacity(8),
            pending: n.pending,
            flight: None,
            stopping: false,
        };
        if slots.len() <= r as usize {
            slots.resize_with(r as usize + 1, || None);
        }
        slots[r as usize] = Some(slot);
    }
}

/// The observer's loop: each batch of intervals into figures and `on_interval` calls.
fn observe(shared: &Shared, flushes: mpsc::Receiver<Vec<Flush>>) {
    for batch in flushes {
        for f in batch {
            // Out of the map while it runs: a canary joining meanwhile is not held.
            let Some(mut w) = shared.lock_watches().remove(&f.id) else {
                continue;
            };
            w.read.reset();
            w.write.reset();
            w.stall.reset();
            for s in &f.samples {
                let dir = if s.read { &mut w.read } else { &mut w.write };
                match s.outcome {
                    Ok((service, stall)) => {
                        dir.record(service, s.len);
                        w.stall.record(stall, s.len);
                    }
                    Err(errno) => dir.error(errno),
                }
            }
            let iv = Interval {
                seconds: f.seconds,
                read: &w.read,
                write: &w.write,
                stall: &w.stall,
                run_delay_seconds: f.run_delay_ns as f64 / 1e9,
                in_flight_seconds: f.in_flight_ns as f64 / 1e9,
            };
            let observer = &mut w.observer;
            let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| observer(&iv)));
            if ran.is_err() {
                tracing::error!("a canary's interval work panicked; that canary's segment ends");
                w.control.stop();
                continue;
            }
            if f.last {
                // Dropping the watch closes the owner's channel: that is its `Done`.
                continue;
            }
            if w.read.errors + w.write.errors > 0 {
                let _ = w.events.send(Event::Errors);
            }
            w.pending.store(false, Ordering::Release);
            shared.lock_watches().insert(f.id, w);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::daemon::canary_io::tests::Pinned;
    use std::io::Write;
    use std::time::Instant;

    fn canary_job(iops: f64, seconds: f64, interval_ms: u64, arrival: Arrival) -> Job {
        let interval = Some(Duration::from_millis(interval_ms));
        crate::daemon::canary_io::tests::canary_job_with(iops, seconds, interval, arrival)
    }

    /// A 1 MiB file on tmpfs (the folder goes with the first value).
    fn shm_file() -> (tempfile::TempDir, std::path::PathBuf) {
        crate::daemon::canary_io::tests::shm_file("dp-reactor-", 1 << 20)
    }

    /// What an observer saw of one interval.
    #[derive(Debug, Clone, Copy)]
    struct Seen {
        seconds: f64,
        ops: u64,
        errors: u64,
        service_max_ns: u64,
        stall_max_ns: u64,
    }

    type Log = Arc<Mutex<Vec<Seen>>>;

    fn recorder() -> (Log, Observer) {
        let log: Log = Arc::default();
        let l = log.clone();
        let observer: Observer = Box::new(move |iv: &Interval| {
            l.lock().unwrap().push(Seen {
                seconds: iv.seconds,
                ops: iv.read.ops + iv.write.ops,
                errors: iv.read.errors + iv.write.errors,
                service_max_ns: if iv.read.ops > 0 {
                    iv.read.percentile_ns(100.0)
                } else {
                    0
                },
                stall_max_ns: if iv.stall.ops > 0 {
                    iv.stall.percentile_ns(100.0)
                } else {
                    0
                },
            })
        });
        (log, observer)
    }

    fn wait_done(seg: &Segment) {
        let t = Instant::now();
        loop {
            match seg.wait(Duration::from_secs(1)) {
                Wait::Done => return,
                Wait::Lost => panic!("the reactor's threads ended"),
                Wait::Errors | Wait::TimedOut => {}
            }
            assert!(
                t.elapsed() < Duration::from_secs(60),
                "the segment never ended"
            );
        }
    }

    /// 64 canaries at 5 IOPS (Poisson) on one reactor: each keeps its rate, every one
    /// gets its intervals and its last, and the reactor wakes fewer times than it does
    /// I/Os (decision 0011: at most 10 ms early, I/Os due together share a wake-up). Once
    /// through the ring, once on the reactor's thread (a file in memory).
    #[test]
    fn canaries_keep_their_rates_and_share_wake_ups() {
        for sync in [false, true] {
            rates_and_wake_ups(sync);
        }
    }

    fn rates_and_wake_ups(sync: bool) {
        let (_dir, path) = shm_file();
        let reactor = Reactor::start().unwrap();
        let job = canary_job(5.0, 3.0, 500, Arrival::Poisson);
        let t0 = Instant::now();
        let mut canaries = Vec::new();
        for i in 0..64 {
            let file = Arc::new(std::fs::File::open(&path).unwrap());
            let gen = OpGen::new(&job, 0, 1 << 20, 4096, 0, i).unwrap();
            let (log, observer) = recorder();
            let place = Place {
                file,
                size: 4096,
                sync,
            };
            let rate = Rate {
                gap: 2e8,
                poisson: true,
            };
            let seg = reactor.join(
                place,
                gen,
                rate,
                job.interval(),
                3_000_000_000,
                2,
                &RunControl::new(),
                observer,
            );
            canaries.push((log, seg));
        }
        for (_, seg) in &canaries {
            wait_done(seg);
        }
        let elapsed = t0.elapsed().as_secs_f64();
        let (wakes, issuing, ios) = reactor.counts();
        let mut total = 0;
        for (i, (log, _)) in canaries.iter().enumerate() {
            let log = log.lock().unwrap();
            let ops: u64 = log.iter().map(|s| s.ops).sum();
            let errors: u64 = log.iter().map(|s| s.errors).sum();
            let seconds: f64 = log.iter().map(|s| s.seconds).sum();
            assert_eq!(errors, 0, "sync {sync}, canary {i}");
            // Its 3 s, cut into intervals on the 500 ms grid (the first and last partial).
            assert!(
                (3.0..3.0 + 1.5).contains(&seconds),
                "sync {sync}, canary {i}: {seconds} s"
            );
            assert!(
                (6..=9).contains(&log.len()),
                "sync {sync}, canary {i}: {} intervals",
                log.len()
            );
            total += ops;
        }
        // 64 x 5 IOPS x 3 s = 960 on average (sd 31); a backlog of 4 at most is made up
        // after a stall, so never more than the rate over the time taken plus that.
        let most = 64.0 * 5.0 * elapsed + 64.0 * (MAX_BACKLOG + 1.0) + 160.0;
        assert!(
            (total as f64) > 0.5 * 960.0 && (total as f64) < most,
            "sync {sync}: {total} I/Os from 64 canaries at 5 IOPS in {elapsed:.2} s"
        );
        assert_eq!(
            ios, total,
            "sync {sync}: every I/O issued is in the figures"
        );
        // I/Os due together are issued on one wake-up: fewer than half as many
        // wake-ups issue I/O as there are I/Os (at 64 x 5 IOPS with a 10 ms slack, about a
        // quarter; a loaded host, waking later, coalesces more). Done on the reactor's
        // thread an I/O needs no other wake-up; through the ring its completion may.
        assert!(
            issuing * 2 < ios,
            "sync {sync}: {issuing} wake-ups issued {ios} I/Os: due I/Os are not sharing wake-ups"
        );
        if sync {
            assert!(wakes * 2 < ios, "sync: {wakes} wake-ups for {ios} I/Os");
        }
    }

    /// A drive that does not answer (a read from an empty pipe) holds only its own
    /// canary: the other canary's intervals keep their I/Os, the hung one's intervals
    /// keep coming, and when the read completes its time is the drive's (service), not
    /// the host's. A segment whose time is up while its read hangs ends when the read
    /// completes, with that read in its figures.
    #[test]
    fn a_hung_drive_holds_only_its_own_canary() {
        let (_dir, path) = shm_file();
        let reactor = Reactor::start().unwrap();
        // Even arrivals at 100 IOPS: 10 I/Os in every 100 ms interval.
        let job = canary_job(100.0, 1.5, 100, Arrival::Linear);
        let target = Target::open(&path, false, None).unwrap();
        let (good_log, observer) = recorder();
        let good = reactor
            .start_segment(&job, &target, &RunControl::new(), observer)
            .unwrap();
        let (rx, mut tx) = std::io::pipe().unwrap();
        let rx = Arc::new(std::fs::File::from(std::os::fd::OwnedFd::from(rx)));
        let gen = OpGen::new(&job, 0, 1 << 20, 4096, 0, 7).unwrap();
        let (hung_log, observer) = recorder();
        let rate = Rate {
            gap: 1e7,
            poisson: false,
        };
        let place = Place {
            file: rx,
            size: 4096,
            sync: false,
        };
        let hung = reactor.join(
            place,
            gen,
            rate,
            job.interval(),
            1_500_000_000,
            2,
            &RunControl::new(),
            observer,
        );
        std::thread::sleep(Duration::from_millis(600));
        let before = hung_log.lock().unwrap().len();
        // The drive answers the first read (4096 bytes), then hangs on the next.
        tx.write_all(&[5u8; 4096]).unwrap();
        wait_done(&good);
        // Its time is up, but its second read is still in the drive: the segment ends when
        // that read does (its time in the figures, the drive not let go before).
        std::thread::sleep(Duration::from_millis(300));
        let (wakes_before, ..) = reactor.counts();
        let still = hung.wait(Duration::from_millis(700));
        let (wakes_after, ..) = reactor.counts();
        // The drive answers at last: end of file, a short read.
        drop(tx);
        let t = Instant::now();
        wait_done(&hung);
        let hung_end = t.elapsed();
        let good_log = good_log.lock().unwrap().clone();
        let hung_log = hung_log.lock().unwrap().clone();
        let full: Vec<&Seen> = good_log.iter().filter(|s| s.seconds > 0.09).collect();
        assert!(full.len() >= 10, "{good_log:?}");
        assert!(
            full.iter().all(|s| s.ops >= 5),
            "the other canary lost I/Os while one drive hung: {good_log:?}"
        );
        assert!(
            before >= 4,
            "the hung canary's intervals stopped: {hung_log:?}"
        );
        let done: Vec<&Seen> = hung_log.iter().filter(|s| s.ops > 0).collect();
        assert_eq!(done.len(), 1, "{hung_log:?}");
        assert!(
            done[0].service_max_ns >= 550_000_000,
            "the hang is the drive's service time: {hung_log:?}"
        );
        assert!(
            done[0].stall_max_ns < done[0].service_max_ns / 2,
            "the hang read as the host's stall: {hung_log:?}"
        );
        assert_eq!(still, Wait::TimedOut, "ended with its read in the drive");
        // Waiting for that read is a sleep, not a spin: nothing else is due.
        assert!(
            wakes_after - wakes_before < 20,
            "{} wake-ups in 700 ms with one stopped canary waiting for its read",
            wakes_after - wakes_before
        );
        let errors: u64 = hung_log.iter().map(|s| s.errors).sum();
        assert_eq!(
            errors, 1,
            "the late short read is in the figures: {hung_log:?}"
        );
        assert!(
            hung_end < Duration::from_secs(5),
            "the segment ended {hung_end:?} after its last read completed"
        );
    }

    /// A canary at 200 IOPS for 3 s on the reactor, every thread of it pinned to `cpu`
    /// (threads inherit the affinity of the thread that starts them), beside `hogs`.
    fn pinned_run(path: &std::path::Path, cpu: usize, hogs: usize) -> Pinned {
        let path = path.to_path_buf();
        crate::daemon::canary::tests::beside_cpu_hogs(cpu, hogs, move || {
            let reactor = Reactor::start().unwrap();
            let job = canary_job(200.0, 3.0, 1000, Arrival::Linear);
            let target = Target::open(&path, false, None).unwrap();
            let figures = Arc::new(Mutex::new((
                DirStats::with_digits(2),
                DirStats::with_digits(2),
            )));
            let f = figures.clone();
            let seg = reactor
                .start_segment(
                    &job,
                    &target,
                    &RunControl::new(),
                    Box::new(move |iv: &Interval| {
                        let mut f = f.lock().unwrap();
                        f.0.merge(iv.read);
                        f.1.merge(iv.stall);
                    }),
                )
                .unwrap();
            wait_done(&seg);
            let f = figures.lock().unwrap();
            // The reactor's thread is not this one: its run delay is not read here.
            Pinned::of(&f.0, &f.1, None)
        })
    }

    /// Issue 21's split holds on the reactor: CPU hogs on its CPU raise the host's stall,
    /// and the drive's service time stays below it (a tmpfs read takes microseconds;
    /// waiting for a hog's time slice, milliseconds).
    #[test]
    fn cpu_hogs_raise_the_host_stall_not_the_service_time() {
        let (_dir, path) = shm_file();
        let cpu = crate::daemon::canary::tests::first_allowed_cpu();
        let crowded = pinned_run(&path, cpu, 3);
        let figures = crowded.describe();
        eprintln!("beside three hogs: {figures}");
        // Sums, not medians: an I/O issued within its slack before its due time has no
        // stall, so half of them may show none even beside the hogs.
        assert!(
            crowded.service_sum < crowded.stall_sum,
            "beside three hogs the service time took more than the host stall: {figures}"
        );
    }
}
