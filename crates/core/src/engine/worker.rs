//! One I/O worker: a dedicated OS thread with its own io_uring ring (or plain
//! pread/pwrite), its own generator and its own statistics. Nothing on its hot path
//! allocates, locks or logs; it talks to the collector once per interval.

use std::fs::File;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender};
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use super::allowance::{WriteAllowance, CREDIT_CHUNK};
use super::gen::{Op, OpGen};
use super::job::Arrival;
use super::stats::DirStats;
use super::verify::VerifyState;
use crate::rng::Rng;
use crate::sys::buf::SlotBuffers;
use crate::sys::uring::{Uring, UringFeatures};

pub use crate::sys::now_ns;

/// Nanoseconds this thread has waited, runnable, for a CPU (the second field of
/// `/proc/thread-self/schedstat`); 0 where the kernel does not keep it. Read once per
/// interval, never per I/O.
fn thread_run_delay_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| run_delay_of_schedstat(&s))
        .unwrap_or(0)
}

/// The run delay (nanoseconds waited runnable for a CPU) in a line of
/// `/proc/<pid>/schedstat`: its second field.
pub fn run_delay_of_schedstat(line: &str) -> Option<u64> {
    line.split_whitespace().nth(1)?.parse().ok()
}

/// What a worker hands the collector at the end of each interval.
#[derive(Debug)]
pub struct IntervalStats {
    pub index: u64,
    /// Clock time at the end of the interval (the worker's last completion for a final,
    /// partial interval).
    pub end_ns: u64,
    pub read: DirStats,
    pub write: DirStats,
    /// Trims (`job::Trim`).
    pub trim: DirStats,
    /// Where the slots' time went, and the open loop's schedule.
    pub slots: SlotTime,
}

/// Where an interval's (or, summed, a run's) slot time went, and the open loop's
/// schedule. Closed loop: `in_flight_ns + idle_ns = workers x depth x length`; over a
/// whole run, the latencies' sum + `uncounted_ns` = `in_flight_ns`.
#[derive(Debug, Clone, Copy, Default)]
pub struct SlotTime {
    /// Closed loop: nanoseconds the worker's slots held no I/O between a completion and
    /// the next submission in the same slot (reaping, accounting, building the next I/O,
    /// and any time the thread waited for a CPU meanwhile). With the latencies it accounts
    /// for every slot's time: IOPS x mean latency + idle / seconds = workers x depth.
    pub idle_ns: u64,
    /// Nanoseconds inside the measured window that slots held I/Os which are not in the
    /// latency figures: those that straddle the window's start or end, and failed ones.
    /// Closed loop, over a whole run: latencies + this + `idle_ns` = slots x seconds.
    pub uncounted_ns: u64,
    /// Nanoseconds of I/O in flight in this interval, summed over the slots (an I/O that
    /// spans a boundary is split at it): over the interval, its mean queue depth.
    /// Closed loop: with `idle_ns` it covers every slot's time, so
    /// `in_flight_ns + slot_idle_ns = workers x depth x interval`.
    pub in_flight_ns: u64,
    /// Open loop: I/Os that came due inside the measured window but are in no figure of
    /// it, because the host issued them too late to complete before its end, or not at
    /// all. So `ops + due_missed_ops` = the I/Os the rate asked for, however busy the host.
    pub due_missed_ops: u64,
    /// Open loop: how late, at most, an I/O was issued against its due time (the host's
    /// stall; for I/Os never issued, until the window's end).
    pub issue_late_max_ns: u64,
    /// Nanoseconds the worker thread waited, runnable, for a CPU during this interval (the
    /// run delay of `/proc/thread-self/schedstat`; 0 where the kernel does not keep it):
    /// the part of any lateness or gap that the host, not the target, caused.
    pub run_delay_ns: u64,
}

impl SlotTime {
    /// Adds another worker's (or interval's) figures; the lateness is the larger.
    pub fn merge(&mut self, o: &SlotTime) {
        self.idle_ns += o.idle_ns;
        self.uncounted_ns += o.uncounted_ns;
        self.in_flight_ns += o.in_flight_ns;
        self.due_missed_ops += o.due_missed_ops;
        self.issue_late_max_ns = self.issue_late_max_ns.max(o.issue_late_max_ns);
        self.run_delay_ns += o.run_delay_ns;
    }
}

impl IntervalStats {
    /// Empty statistics with histograms of `digits` significant digits.
    pub fn new(digits: u8) -> Box<Self> {
        Box::new(IntervalStats {
            index: 0,
            end_ns: 0,
            read: DirStats::with_digits(digits),
            write: DirStats::with_digits(digits),
            trim: DirStats::with_digits(digits),
            slots: SlotTime::default(),
        })
    }
}

pub enum Msg {
    Interval(usize, Box<IntervalStats>),
    Done(usize),
}

/// One I/O error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct IoErrorRecord {
    pub offset: u64,
    pub len: u32,
    pub op: &'static str,
    /// errno, or 0 for a short transfer.
    pub errno: i32,
    pub message: &'static str,
}

pub const MAX_ERROR_RECORDS: usize = 16;

/// What a worker returns when it ends.
#[derive(Debug, Default)]
pub struct WorkerOutcome {
    pub errors: u64,
    pub error_records: Vec<IoErrorRecord>,
    pub verify: Option<super::verify::VerifySummary>,
    pub uring: Option<UringFeatures>,
    /// A failure that kept the worker from running at all.
    pub fatal: Option<String>,
    /// The CPUs the worker was confined to, if it was.
    pub cpus: Option<Vec<usize>>,
}

/// Shared between workers and the collector; touched only off the hot path (errors,
/// stop requests) or with relaxed loads once per loop.
pub struct Shared {
    pub stop: Arc<AtomicBool>,
    /// The stop flag of an enclosing run (a suite's Ctrl-C), when there is one.
    pub parent_stop: Option<Arc<AtomicBool>>,
    pub errors: AtomicU64,
    pub error_limit: u64,
    /// The run's write limit, when it has one and writes: each write's bytes are taken
    /// from it before the write is issued (`Core::write_room`).
    pub allowance: Option<Arc<WriteAllowance>>,
}

/// Lets every worker set up (rings, buffers) before the clock starts, so the first
/// interval is not short of workers still allocating.
pub struct StartGate {
    state: std::sync::Mutex<GateState>,
    cv: std::sync::Condvar,
    workers: usize,
}

#[derive(Default)]
struct GateState {
    ready: usize,
    t0: Option<u64>,
    aborted: bool,
}

impl Shared {
    #[inline]
    pub fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
            || self
                .parent_stop
                .as_ref()
                .is_some_and(|p| p.load(Ordering::Relaxed))
    }
}

impl StartGate {
    pub fn new(workers: usize) -> Self {
        StartGate {
            state: Default::default(),
            cv: Default::default(),
            workers,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, GateState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Workers: wait until everyone is ready; returns the run's start time, or None when
    /// the run was abandoned before it started.
    pub fn wait(&self) -> Option<u64> {
        let mut st = self.lock();
        st.ready += 1;
        self.cv.notify_all();
        while st.t0.is_none() && !st.aborted {
            st = self.cv.wait(st).unwrap_or_else(|p| p.into_inner());
        }
        if st.aborted {
            None
        } else {
            st.t0
        }
    }

    /// Collector: wait until every worker is ready, start the clock, release them.
    pub fn open(&self) -> u64 {
        let mut st = self.lock();
        while st.ready < self.workers {
            st = self.cv.wait(st).unwrap_or_else(|p| p.into_inner());
        }
        let t0 = now_ns();
        st.t0 = Some(t0);
        self.cv.notify_all();
        t0
    }

    /// Collector: give up before the start; waiting workers return at once.
    pub fn abort(&self) {
        self.lock().aborted = true;
        self.cv.notify_all();
    }
}

/// The timeline of a run, in `now_ns` clock time.
#[derive(Debug, Clone, Copy)]
pub struct Timeline {
    /// Measurement starts here (after the ramp).
    pub measure_start: u64,
    /// Time-based runs end here; u64::MAX for byte-limited runs.
    pub end: u64,
    pub interval: u64,
}

pub struct WorkerSetup {
    pub id: usize,
    pub file: Arc<File>,
    /// Whether the first I/O of each refill goes to the kernel before the rest are built
    /// (io_uring; see `run_uring`).
    pub first_early: bool,
    pub gen: OpGen,
    /// Measured bytes this worker issues before it stops (u64::MAX: time based).
    pub byte_budget: u64,
    /// This worker's share of the rate limit, in IOPS.
    pub rate: Option<(f64, Arrival)>,
    pub depth: u32,
    pub max_bs: u32,
    pub verify: Option<VerifyState>,
    /// Ramp length, measured run time (None: byte limited) and interval, in ns.
    pub ramp: u64,
    pub runtime: Option<u64>,
    pub interval: u64,
    pub tx: SyncSender<Msg>,
    pub spare_rx: Receiver<Box<IntervalStats>>,
    /// Significant digits of the latency histograms.
    pub digits: u8,
    /// The target is a block device (trims are BLKDISCARD, not a punched hole).
    pub block_device: bool,
}

#[derive(Clone, Copy, Default)]
struct Slot {
    start: u64,
    offset: u64,
    len: u32,
    read: bool,
    trim: bool,
    seq: u32,
}

/// Per-worker state shared by both backends.
struct Core {
    id: usize,
    gen: OpGen,
    byte_budget: u64,
    issued_bytes: u64,
    rate_gap_ns: f64,
    arrival: Option<Arrival>,
    next_due: f64,
    verify: Option<VerifyState>,
    tl: Timeline,
    next_boundary: u64,
    cur: Box<IntervalStats>,
    tx: SyncSender<Msg>,
    spare_rx: Receiver<Box<IntervalStats>>,
    digits: u8,
    outcome: WorkerOutcome,
    stopping: bool,
    /// This thread's run delay when the current interval began.
    run_delay_mark: u64,
    /// Bytes of writes this worker may still issue: room taken from the run's write
    /// limit and not used yet (given back when it ends).
    write_room: u64,
}

impl Core {
    fn new(s: WorkerSetup, t0: u64) -> Core {
        if s.rate.is_some() {
            // Open loop sleeps between I/Os: wake on time, not up to 50 us late (the
            // default timer slack), or the schedule drifts at high rates.
            let _ = rustix::thread::set_current_timer_slack(std::num::NonZeroU64::new(1));
        }
        let (gap, arrival) = match s.rate {
            Some((iops, arr)) => (1e9 / iops, Some(arr)),
            None => (0.0, None),
        };
        let measure_start = t0 + s.ramp;
        let timeline = Timeline {
            measure_start,
            end: s.runtime.map_or(u64::MAX, |r| measure_start + r),
            interval: s.interval,
        };
        Core {
            id: s.id,
            gen: s.gen,
            byte_budget: s.byte_budget,
            issued_bytes: 0,
            rate_gap_ns: gap,
            arrival,
            next_due: t0 as f64,
            verify: s.verify,
            tl: timeline,
            next_boundary: measure_start + s.interval,
            cur: IntervalStats::new(s.digits),
            tx: s.tx,
            spare_rx: s.spare_rx,
            digits: s.digits,
            outcome: WorkerOutcome::default(),
            stopping: false,
            run_delay_mark: thread_run_delay_ns(),
            write_room: 0,
        }
    }

    #[inline]
    fn advance_due(&mut self) {
        let gap = match self.arrival {
            Some(Arrival::Poisson) => -self.rate_gap_ns * self.gen.rng().unit_open0().ln(),
            _ => self.rate_gap_ns,
        };
        self.next_due += gap;
    }

    /// Where the current interval began.
    #[inline]
    fn seg_start(&self) -> u64 {
        self.next_boundary - self.tl.interval
    }

    /// Sends the current interval(s) up to `now` to the collector. `carry(from, to)` gives
    /// the slots' time between `from` and the boundary `to` that is not accounted yet, as
    /// (in flight, idle): an I/O or a gap that spans a boundary is split at it. The last
    /// interval of a timed run is sent by `finish`, once the I/Os in flight at its end
    /// have completed.
    #[inline]
    fn flush_intervals(&mut self, now: u64, carry: &dyn Fn(u64, u64) -> (u64, u64)) {
        while now >= self.next_boundary && self.next_boundary < self.tl.end {
            let end = self.next_boundary;
            let (busy, idle) = carry(self.seg_start(), end);
            self.cur.slots.in_flight_ns += busy;
            self.cur.slots.idle_ns += idle;
            self.send_interval(end);
            self.next_boundary += self.tl.interval;
        }
    }

    fn send_interval(&mut self, end: u64) {
        let delay = thread_run_delay_ns();
        self.cur.slots.run_delay_ns = delay.saturating_sub(self.run_delay_mark);
        self.run_delay_mark = delay;
        let fresh = match self.spare_rx.recv() {
            Ok(b) => b,
            Err(_) => IntervalStats::new(self.digits), // collector gone: keep going, nobody listens
        };
        let mut full = std::mem::replace(&mut self.cur, fresh);
        full.index = (end - self.tl.measure_start).div_ceil(self.tl.interval) - 1;
        full.end_ns = end;
        let _ = self.tx.send(Msg::Interval(self.id, full));
    }

    /// Decides whether to stop issuing.
    #[inline]
    fn check_stop(&mut self, now: u64, shared: &Shared) {
        if !self.stopping
            && (now >= self.tl.end || self.issued_bytes >= self.byte_budget || shared.stopped())
        {
            self.stopping = true;
        }
    }

    /// Room for a write of `len` bytes under the run's write limit, taken from the
    /// worker's own room, which is refilled a chunk at a time ([`CREDIT_CHUNK`]: one atomic
    /// operation per chunk, none per I/O). False when the limit has no room for it: the
    /// worker stops issuing, and tells the others of its run to stop.
    #[inline]
    fn write_room(&mut self, len: u64, shared: &Shared) -> bool {
        let Some(a) = &shared.allowance else {
            return true;
        };
        if self.write_room < len {
            let need = len - self.write_room;
            let got = a.reserve(need, need.max(CREDIT_CHUNK));
            if got == 0 {
                self.stopping = true;
                shared.stop.store(true, Ordering::Relaxed);
                return false;
            }
            self.write_room += got;
        }
        self.write_room -= len;
        true
    }

    /// Gives the room the worker holds and did not use back to the run's limit, so what
    /// the limit counts is what was issued.
    fn give_back_room(&mut self, shared: &Shared) {
        if let Some(a) = &shared.allowance {
            a.give_back(self.write_room);
        }
        self.write_room = 0;
    }

    /// The next op, avoiding (in verify mode) any block already in flight.
    #[inline]
    fn next_op(&mut self, in_flight: &[Slot], busy: impl Fn(usize) -> bool) -> Op {
        let op = self.gen.next_op();
        if self.verify.is_none() {
            return op;
        }
        let mut op = op;
        for _ in 0..1000 {
            let end = op.offset + op.len as u64;
            let clash = in_flight
                .iter()
                .enumerate()
                .any(|(i, s)| busy(i) && s.offset < end && op.offset < s.offset + s.len as u64);
            if !clash {
                break;
            }
            op = self.gen.next_op();
        }
        op
    }

    /// Fills a write buffer: a verify header per unit, or fresh random words (so no two
    /// writes carry the same data and a deduplicating drive cannot cheat).
    #[inline]
    fn fill_write(rng: &mut Rng, verify: &mut Option<VerifyState>, buf: &mut [u8], op: Op) -> u32 {
        if let Some(v) = verify {
            return v.prepare_write(buf, op.offset);
        }
        for sector in buf.chunks_exact_mut(512) {
            sector[..8].copy_from_slice(&rng.next_u64().to_le_bytes());
        }
        0
    }

    /// Accounts one completion. `buf` is the slot's buffer (for verify).
    #[inline]
    fn complete(&mut self, slot: &Slot, res: i64, now: u64, buf: &[u8], shared: &Shared) {
        let ok = res == slot.len as i64;
        if !ok {
            self.error(slot, res, shared);
        }
        if let (Some(v), false) = (&mut self.verify, slot.trim) {
            if slot.read {
                if ok {
                    v.check_read(&buf[..slot.len as usize], slot.offset);
                }
            } else {
                v.written(slot.offset, slot.len, slot.seq, ok);
            }
        }
        let (from, to) = (self.tl.measure_start, self.tl.end);
        let seg = self.seg_start().max(from);
        self.cur.slots.in_flight_ns += now.min(to).saturating_sub(slot.start.max(seg));
        if ok && slot.start >= from && now <= to {
            let lat = now.saturating_sub(slot.start);
            if slot.trim {
                self.cur.trim.record(lat, slot.len);
            } else if slot.read {
                self.cur.read.record(lat, slot.len);
            } else {
                self.cur.write.record(lat, slot.len);
            }
        } else if slot.start < to && now > from {
            // In flight inside the window, but not in its latency figures.
            self.cur.slots.uncounted_ns += now.min(to) - slot.start.max(from);
            if self.arrival.is_some() && slot.start >= from {
                self.cur.slots.due_missed_ops += 1;
            }
        }
    }

    /// Closed loop: a slot whose last I/O completed (measured) at `done` gets its next
    /// I/O at `start`; the time between is the slot's idle time.
    #[inline]
    fn slot_refilled(&mut self, done: u64, start: u64) {
        let from = self.seg_start().max(self.tl.measure_start);
        self.cur.slots.idle_ns += start.min(self.tl.end).saturating_sub(done.max(from));
    }

    /// Open loop: an I/O due at `due` is issued at `now`.
    #[inline]
    fn issued_late(&mut self, due: u64, now: u64) {
        if due >= self.tl.measure_start {
            let late = now.saturating_sub(due);
            if late > self.cur.slots.issue_late_max_ns {
                self.cur.slots.issue_late_max_ns = late;
            }
        }
    }

    /// Open loop, at the end of a timed run: the I/Os that came due before the end but
    /// were never issued (the host was late), drawn from the same schedule.
    fn count_unissued(&mut self, now: u64) {
        let (from, to) = (self.tl.measure_start, self.tl.end);
        if self.arrival.is_none() || now < to {
            return;
        }
        if (self.next_due as u64) < to {
            let late = to - (self.next_due as u64).max(from);
            self.cur.slots.issue_late_max_ns = self.cur.slots.issue_late_max_ns.max(late);
        }
        while (self.next_due as u64) < to {
            if self.next_due as u64 >= from {
                self.cur.slots.due_missed_ops += 1;
            }
            self.advance_due();
        }
    }

    /// The ring refused a submission or a wait for good: the worker ends, and the run.
    #[cold]
    fn enter_failed(&mut self, e: std::io::Error, shared: &Shared) {
        self.outcome.fatal = Some(format!("io_uring_enter failed: {e}"));
        shared.stop.store(true, Ordering::Relaxed);
    }

    #[cold]
    fn error(&mut self, slot: &Slot, res: i64, shared: &Shared) {
        self.outcome.errors += 1;
        let errno = if res < 0 { (-res) as i32 } else { 0 };
        if slot.trim {
            self.cur.trim.error(errno);
        } else if slot.read {
            self.cur.read.error(errno);
        } else {
            self.cur.write.error(errno);
        }
        if self.outcome.error_records.len() < MAX_ERROR_RECORDS {
            self.outcome.error_records.push(IoErrorRecord {
                offset: slot.offset,
                len: slot.len,
                op: if slot.trim {
                    "trim"
                } else if slot.read {
                    "read"
                } else {
                    "write"
                },
                errno,
                message: errno_name(errno),
            });
        }
        let total = shared.errors.fetch_add(1, Ordering::Relaxed) + 1;
        if total >= shared.error_limit {
            shared.stop.store(true, Ordering::Relaxed);
        }
    }

    /// Sends the final interval; `carry` as for `flush_intervals` (slots left idle by a
    /// stop, closed loop).
    fn finish(mut self, carry: &dyn Fn(u64, u64) -> (u64, u64)) -> WorkerOutcome {
        // The final, partial interval ends now, or at the run's end for a time-based run
        // whose in-flight I/O drained after it.
        let seg_start = self.seg_start();
        let now = now_ns();
        self.count_unissued(now);
        let end = now.min(self.tl.end);
        if end > seg_start {
            let (busy, idle) = carry(seg_start.max(self.tl.measure_start), end);
            self.cur.slots.in_flight_ns += busy;
            self.cur.slots.idle_ns += idle;
            self.send_interval(end);
        }
        let _ = self.tx.send(Msg::Done(self.id));
        self.outcome.verify = self.verify.take().map(|v| v.summary);
        self.outcome
    }
}

/// A failed I/O's errno as the result names it (0: a short transfer). The result's
/// error records also carry the number.
pub fn errno_name(errno: i32) -> &'static str {
    match errno {
        0 => "short transfer",
        libc::EIO => "input/output error (EIO)",
        libc::ENOSPC => "no space left (ENOSPC)",
        libc::EINVAL => "invalid argument (EINVAL)",
        libc::EBADF => "bad file descriptor (EBADF)",
        libc::ENXIO => "no such device (ENXIO)",
        libc::ENODEV => "no such device (ENODEV)",
        libc::EROFS => "read-only (EROFS)",
        libc::EPERM => "operation not permitted (EPERM)",
        libc::EACCES => "permission denied (EACCES)",
        libc::EAGAIN => "try again (EAGAIN)",
        libc::ETIMEDOUT => "timed out (ETIMEDOUT)",
        libc::EILSEQ => "illegal byte sequence (EILSEQ)",
        libc::ENODATA => "no data (ENODATA)",
        libc::EOPNOTSUPP => "not supported (EOPNOTSUPP)",
        libc::ENOLINK => "transport failed (ENOLINK)",
        libc::EREMOTEIO => "target failed (EREMOTEIO)",
        libc::ETIME => "command time limit (ETIME)",
        libc::EBADMSG => "bad message (EBADMSG)",
        libc::EBADE => "reservation conflict (EBADE)",
        libc::EBUSY => "device busy (EBUSY)",
        libc::ENOMEM => "out of memory (ENOMEM)",
        libc::EFBIG => "file too large (EFBIG)",
        _ => "other error (see errno)",
    }
}

/// Runs the io_uring worker loop. `t0` is the run's start (ramp begins).
pub fn run_uring(mut setup: WorkerSetup, gate: &StartGate, shared: &Shared) -> WorkerOutcome {
    let depth = setup.depth;
    let ring = Uring::new(setup.file.clone(), depth, setup.max_bs as usize);
    let ring = match ring {
        Ok(mut r) => {
            for s in 0..depth {
                setup.gen.rng().fill(r.buf_mut(s));
            }
            r
        }
        Err(e) => {
            let _ = gate.wait();
            let _ = setup.tx.send(Msg::Done(setup.id));
            return WorkerOutcome {
                fatal: Some(format!("io_uring setup failed: {e}")),
                ..Default::default()
            };
        }
    };
    let Some(t0) = gate.wait() else {
        return WorkerOutcome::default();
    };
    let first_early = setup.first_early;
    let mut core = Core::new(setup, t0);
    core.outcome.uring = Some(ring.features());
    let mut w = UringLoop {
        slots: vec![Slot::default(); depth as usize],
        free: (0..depth).rev().collect(),
        queued: Vec::with_capacity(depth as usize),
        // A slot is idle from the start of measurement until its first I/O (a worker
        // thread that started late).
        done_at: vec![core.tl.measure_start; depth as usize],
        closed: core.arrival.is_none(),
        first_early,
        core,
        ring,
    };
    let mut now = now_ns();
    loop {
        w.flush(now, None);
        w.core.check_stop(now, shared);
        if !w.core.stopping {
            if let Err(e) = w.refill(now, shared) {
                w.core.enter_failed(e, shared);
                break;
            }
        }
        if w.ring.in_flight() == 0 {
            if w.core.stopping {
                break;
            }
            // Open loop, nothing in flight: sleep until the next I/O is due.
            let wake = (w.core.next_due as u64).min(w.core.next_boundary);
            let now2 = now_ns();
            if wake > now2 {
                std::thread::sleep(Duration::from_nanos(wake - now2));
            }
            now = now_ns();
            continue;
        }
        if let Err(e) = w.ring.wait_until(w.wake(now), now) {
            w.core.enter_failed(e, shared);
            break;
        }
        now = now_ns();
        w.flush(now, None);
        w.reap(now, shared);
    }
    let UringLoop {
        mut core,
        ring,
        slots,
        done_at,
        closed,
        ..
    } = w;
    core.give_back_room(shared);
    let outcome = core.finish(&|a, b| carry(&ring, &slots, &done_at, &[], closed, a, b));
    drop(ring);
    outcome
}

/// An io_uring worker's state between its loop's steps: the ring, its slots and which are
/// free, queued for submission, and when each last completed.
struct UringLoop {
    core: Core,
    ring: Uring,
    slots: Vec<Slot>,
    free: Vec<u32>,
    queued: Vec<u32>,
    /// When each slot's last I/O completed, for its idle time.
    done_at: Vec<u64>,
    /// Closed loop (no arrival process): every free slot is refilled at once.
    closed: bool,
    /// The first I/O of each refill goes to the kernel before the rest are built.
    first_early: bool,
}

/// At an interval boundary: the slots' time since `from` not accounted yet, as (in flight,
/// idle). A slot is in flight from its submission until its completion is reaped; closed
/// loop, a free slot is idle since its last completion. `pending`: slots queued for their
/// next I/O but not stamped yet, still idle.
#[inline]
fn carry(
    ring: &Uring,
    slots: &[Slot],
    done_at: &[u64],
    pending: &[u32],
    closed: bool,
    from: u64,
    to: u64,
) -> (u64, u64) {
    let (mut busy, mut idle) = (0, 0);
    for (i, s) in slots.iter().enumerate() {
        if ring.is_busy(i as u32) && !pending.contains(&(i as u32)) {
            busy += to.saturating_sub(s.start.max(from));
        } else if closed {
            idle += to.saturating_sub(done_at[i].max(from));
        }
    }
    (busy, idle)
}

impl UringLoop {
    /// Cuts the intervals whose boundary `now` has passed; with `pending` (Some(k)), the
    /// slots queued from `k` on are not stamped yet and count as idle.
    #[inline]
    fn flush(&mut self, now: u64, pending: Option<usize>) {
        let UringLoop {
            core,
            ring,
            slots,
            done_at,
            queued,
            closed,
            ..
        } = self;
        let pending: &[u32] = pending.map_or(&[], |k| &queued[k..]);
        core.flush_intervals(now, &|a, b| {
            carry(ring, slots, done_at, pending, *closed, a, b)
        });
    }

    /// Issues: closed loop keeps every slot busy; open loop issues what is due.
    #[inline]
    fn refill(&mut self, now: u64, shared: &Shared) -> std::io::Result<()> {
        self.queued.clear();
        // How many of `queued` were handed to the kernel already (stamped then).
        let mut early = 0;
        while let Some(&slot) = self.free.last() {
            let start = if self.core.arrival.is_some() {
                if self.core.next_due > now as f64 {
                    break;
                }
                let due = self.core.next_due as u64;
                self.core.issued_late(due, now);
                due
            } else {
                now
            };
            if !self.queue_next(slot, start, shared) {
                break;
            }
            if self.core.issued_bytes >= self.core.byte_budget {
                break;
            }
            // The first I/O of each refill goes to the kernel at once, so a device that
            // has run dry starts on it while the rest are prepared; the rest follow in one
            // call. One call for the whole refill holds the first back until the last is
            // built, and behind the block layer's plug: on a loop device, whose single
            // worker thread then idles, that cost about a tenth of the IOPS
            // (BENCHMARKS.md, job 7). Measured, a refill of one I/O gains from it too
            // (paired runs), so no exception is made for it.
            // On a memory-backed file there is neither a device to keep busy nor a plug:
            // the early call gained nothing there (paired runs), and the rest of the
            // refill waited through it outside any I/O's latency, which took up to 5% off
            // the queue depth Little's law sees on tmpfs (BENCHMARKS.md).
            if self.queued.len() == 1 && self.first_early {
                if self.closed {
                    // A boundary passed while the refill was built is cut first, so the
                    // slot's gap is split at it.
                    let t = now_ns();
                    self.flush(t, Some(0));
                    self.stamp(slot, t);
                }
                self.ring.submit()?;
                early = 1;
            }
        }
        // Closed loop: an I/O's latency starts when it is handed to the kernel, not when
        // the previous one completed (the time spent preparing it is ours).
        if self.closed && self.queued.len() > early {
            let t = now_ns();
            self.flush(t, Some(early));
            for i in early..self.queued.len() {
                let q = self.queued[i];
                self.stamp(q, t);
            }
        }
        Ok(())
    }

    /// Takes the free slot `slot` for the next op, meant to start at `start`, and queues it;
    /// false (nothing queued, the worker stopping) when it is a write the run's write
    /// limit has no room for.
    #[inline]
    fn queue_next(&mut self, slot: u32, start: u64, shared: &Shared) -> bool {
        let core = &mut self.core;
        let ring = &mut self.ring;
        let op = core.next_op(&self.slots, |i| ring.is_busy(i as u32));
        if !op.read && !op.trim && !core.write_room(op.len as u64, shared) {
            return false;
        }
        self.free.pop();
        let seq = if op.read {
            0
        } else {
            Core::fill_write(core.gen.rng(), &mut core.verify, ring.buf_mut(slot), op)
        };
        self.slots[slot as usize] = Slot {
            start,
            offset: op.offset,
            len: op.len,
            read: op.read,
            trim: op.trim,
            seq,
        };
        ring.queue(slot, op.read, op.offset, op.len);
        self.queued.push(slot);
        if start >= core.tl.measure_start {
            core.issued_bytes += op.len as u64;
        }
        if core.arrival.is_some() {
            core.advance_due();
        }
        true
    }

    /// Closed loop: `slot`'s I/O starts at `t`, when it is handed to the kernel.
    #[inline]
    fn stamp(&mut self, slot: u32, t: u64) {
        self.slots[slot as usize].start = t;
        self.core.slot_refilled(self.done_at[slot as usize], t);
    }

    /// When to stop waiting for a completion: never past the next interval boundary or
    /// (open loop, with a free slot) the next due time. Past the end of a timed run the
    /// last boundary waits for the I/Os in flight: wake once an interval meanwhile.
    #[inline]
    fn wake(&self, now: u64) -> u64 {
        let core = &self.core;
        let mut wake = core.next_boundary;
        if wake <= now {
            wake = now + core.tl.interval;
        }
        if core.arrival.is_some() && !self.free.is_empty() && !core.stopping {
            wake = wake.min(core.next_due as u64);
        }
        if !core.stopping && core.tl.end < wake {
            wake = core.tl.end;
        }
        wake
    }

    /// Takes every completion: counted, its slot free again.
    #[inline]
    fn reap(&mut self, now: u64, shared: &Shared) {
        let UringLoop {
            core,
            ring,
            slots,
            free,
            done_at,
            ..
        } = self;
        ring.reap(|ring, slot, res| {
            let s = slots[slot as usize];
            core.complete(&s, res as i64, now, ring.buf(slot), shared);
            done_at[slot as usize] = now;
            free.push(slot);
        });
    }
}

/// One synchronous I/O (a trim, a pread or a pwrite of `buf`): bytes done, or -errno.
#[inline]
fn psync_io(file: &File, block_device: bool, op: Op, buf: &mut [u8]) -> i64 {
    if op.trim {
        return match crate::sys::blk::trim(file, block_device, op.offset, op.len as u64) {
            Ok(()) => op.len as i64,
            Err(e) => -(e.raw_os_error().unwrap_or(libc::EIO) as i64),
        };
    }
    let res = if op.read {
        rustix::io::pread(file, &mut *buf, op.offset)
    } else {
        rustix::io::pwrite(file, buf, op.offset)
    };
    match res {
        Ok(n) => n as i64,
        Err(e) => -(e.raw_os_error() as i64),
    }
}

/// Runs the psync worker loop: one pread/pwrite at a time (depth 1 per worker).
pub fn run_psync(mut setup: WorkerSetup, gate: &StartGate, shared: &Shared) -> WorkerOutcome {
    let mut bufs = SlotBuffers::new(1, setup.max_bs as usize);
    setup.gen.rng().fill(bufs.slot_mut(0));
    let file = setup.file.clone();
    let block_device = setup.block_device;
    let Some(t0) = gate.wait() else {
        return WorkerOutcome::default();
    };
    let mut core = Core::new(setup, t0);
    let closed = core.arrival.is_none();
    // Closed loop, the one slot is idle from the start of measurement until the first
    // I/O (a worker thread that started late), then for no time: the next I/O starts at
    // the last one's completion. Open loop, it waits for its due time (not counted).
    let mut done = core.tl.measure_start;
    let idle = |done: u64, from: u64, to: u64| {
        let idle = if closed {
            to.saturating_sub(done.max(from))
        } else {
            0
        };
        (0, idle)
    };
    let mut now = now_ns();
    loop {
        core.flush_intervals(now, &|a, b| idle(done, a, b));
        core.check_stop(now, shared);
        if core.stopping {
            break;
        }
        let start = if core.arrival.is_some() {
            if core.next_due > now as f64 {
                let wake = (core.next_due as u64).min(core.next_boundary);
                std::thread::sleep(Duration::from_nanos(wake.saturating_sub(now)));
                now = now_ns();
                continue;
            }
            let s = core.next_due as u64;
            core.issued_late(s, now);
            core.advance_due();
            s
        } else {
            core.slot_refilled(done, now);
            now
        };
        let op = core.gen.next_op();
        if !op.read && !op.trim && !core.write_room(op.len as u64, shared) {
            break;
        }
        let buf = &mut bufs.slot_mut(0)[..op.len as usize];
        let seq = if op.read || op.trim {
            0
        } else {
            Core::fill_write(core.gen.rng(), &mut core.verify, buf, op)
        };
        let res = psync_io(&file, block_device, op, buf);
        if start >= core.tl.measure_start && (!op.trim || core.gen.trims_counted()) {
            core.issued_bytes += op.len as u64;
        }
        now = now_ns();
        // The I/O that just completed was in flight across any boundary passed meanwhile.
        core.flush_intervals(now, &|a, b| (b.saturating_sub(start.max(a)), 0));
        let slot = Slot {
            start,
            offset: op.offset,
            len: op.len,
            read: op.read,
            trim: op.trim,
            seq,
        };
        core.complete(&slot, res, now, bufs.slot(0), shared);
        done = now;
    }
    core.give_back_room(shared);
    core.finish(&|a, b| idle(done, a, b))
}
