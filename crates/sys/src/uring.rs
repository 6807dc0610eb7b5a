//! A safe, single-threaded io_uring queue over one file and a fixed set of buffer slots.
//!
//! Soundness rests on three rules that this type enforces itself rather than trusting its
//! caller: the ring owns the buffers and the file (so both outlive every I/O in flight);
//! a slot's buffer can only be borrowed while that slot is idle (the kernel may be writing
//! into it otherwise); and `Drop` waits for every I/O in flight before anything is freed.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::Duration;

use io_uring::{opcode, squeue, types, IoUring};

use super::buf::SlotBuffers;

/// What the kernel gave us when the ring was set up.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct UringFeatures {
    /// The file is registered (IOSQE_FIXED_FILE): no fd lookup per I/O.
    pub fixed_file: bool,
    /// The buffers are registered (READ_FIXED/WRITE_FIXED): no page pinning per I/O.
    pub fixed_buffers: bool,
    /// Waits can time out (IORING_ENTER_EXT_ARG), so a stalled device cannot stall
    /// interval reporting.
    pub ext_arg: bool,
    /// IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN.
    pub defer_taskrun: bool,
}

/// The `user_data` of the ring's own timer (IORING_OP_TIMEOUT); slots use `0..depth`.
const TIMER: u64 = u64::MAX;

pub struct Uring {
    ring: IoUring,
    bufs: SlotBuffers,
    in_flight: Vec<bool>,
    n_in_flight: usize,
    /// Completions of one reap, reused (capacity `depth`: no allocation per reap).
    reaped: Vec<(u32, i32)>,
    features: UringFeatures,
    /// The deadline (CLOCK_MONOTONIC ns) of the timer request in the ring, if one is.
    timer: Option<u64>,
    /// False once the kernel refused a timer request: waits then time out by argument.
    timer_ok: bool,
    /// The timer's deadline as the kernel reads it (boxed: its address must not move).
    timer_ts: Box<types::Timespec>,
    // Declared last so it is dropped last: registered and in-flight I/O refer to it.
    file: Arc<File>,
}

impl Uring {
    /// A ring with `depth` slots of `slot_size` bytes over `file`. Must be created on the
    /// thread that will use it (single issuer).
    pub fn new(file: Arc<File>, depth: u32, slot_size: usize) -> io::Result<Uring> {
        // One entry more than the slots, for the timer.
        let entries = (depth + 1).next_power_of_two();
        let (ring, defer_taskrun) = match IoUring::builder()
            .setup_single_issuer()
            .setup_defer_taskrun()
            .build(entries)
        {
            Ok(r) => (r, true),
            Err(_) => (IoUring::new(entries)?, false),
        };
        let mut features = UringFeatures {
            defer_taskrun,
            ext_arg: ring.params().is_feature_ext_arg(),
            ..Default::default()
        };
        features.fixed_file = ring.submitter().register_files(&[file.as_raw_fd()]).is_ok();
        let mut bufs = SlotBuffers::new(depth as usize, slot_size);
        let iovecs: Vec<libc::iovec> = (0..bufs.slots())
            .map(|i| libc::iovec {
                iov_base: bufs.slot_ptr(i).cast(),
                iov_len: bufs.slot_size(),
            })
            .collect();
        if iovecs.len() <= u16::MAX as usize {
            // SAFETY: every iovec points into `bufs`, which the ring owns and never resizes;
            // the kernel unregisters the buffers when the ring's fd is closed, and `ring` is
            // dropped before `bufs` (field order), after Drop has drained all I/O.
            features.fixed_buffers = unsafe { ring.submitter().register_buffers(&iovecs) }.is_ok();
        }
        Ok(Uring {
            ring,
            in_flight: vec![false; depth as usize],
            n_in_flight: 0,
            reaped: Vec::with_capacity(depth as usize),
            bufs,
            features,
            timer: None,
            timer_ok: true,
            timer_ts: Box::new(types::Timespec::new()),
            file,
        })
    }

    pub fn features(&self) -> UringFeatures {
        self.features
    }

    pub fn in_flight(&self) -> usize {
        self.n_in_flight
    }

    pub fn is_busy(&self, slot: u32) -> bool {
        self.in_flight[slot as usize]
    }

    /// The buffer of an idle slot. Panics if the slot is in flight (a logic error that
    /// would otherwise race with the kernel).
    pub fn buf(&self, slot: u32) -> &[u8] {
        assert!(!self.in_flight[slot as usize], "slot {slot} is in flight");
        self.bufs.slot(slot as usize)
    }

    /// The buffer of an idle slot, to fill before a write.
    pub fn buf_mut(&mut self, slot: u32) -> &mut [u8] {
        assert!(!self.in_flight[slot as usize], "slot {slot} is in flight");
        self.bufs.slot_mut(slot as usize)
    }

    /// Queues one read or write of `len` bytes at `offset` using slot `slot`'s buffer.
    /// Nothing reaches the kernel until the next [`Uring::submit_and_wait`].
    pub fn queue(&mut self, slot: u32, read: bool, offset: u64, len: u32) {
        let i = slot as usize;
        assert!(!self.in_flight[i], "slot {slot} is already in flight");
        assert!(
            len as usize <= self.bufs.slot_size(),
            "I/O larger than its slot"
        );
        let ptr = self.bufs.slot_ptr(i);
        let entry = match (read, self.features.fixed_file, self.features.fixed_buffers) {
            (true, true, true) => opcode::ReadFixed::new(types::Fixed(0), ptr, len, slot as u16)
                .offset(offset)
                .build(),
            (false, true, true) => opcode::WriteFixed::new(types::Fixed(0), ptr, len, slot as u16)
                .offset(offset)
                .build(),
            (true, true, false) => opcode::Read::new(types::Fixed(0), ptr, len)
                .offset(offset)
                .build(),
            (false, true, false) => opcode::Write::new(types::Fixed(0), ptr, len)
                .offset(offset)
                .build(),
            (true, false, true) => {
                opcode::ReadFixed::new(types::Fd(self.file.as_raw_fd()), ptr, len, slot as u16)
                    .offset(offset)
                    .build()
            }
            (false, false, true) => {
                opcode::WriteFixed::new(types::Fd(self.file.as_raw_fd()), ptr, len, slot as u16)
                    .offset(offset)
                    .build()
            }
            (true, false, false) => opcode::Read::new(types::Fd(self.file.as_raw_fd()), ptr, len)
                .offset(offset)
                .build(),
            (false, false, false) => opcode::Write::new(types::Fd(self.file.as_raw_fd()), ptr, len)
                .offset(offset)
                .build(),
        };
        let entry: squeue::Entry = entry.user_data(slot as u64);
        // The SQ has at least `depth` entries and at most `depth` slots exist, so there is
        // always room for an idle slot's entry once the previous batch was submitted.
        let mut sq = self.ring.submission();
        // SAFETY: the entry's buffer is slot `i` of `self.bufs` (`len` fits in it, checked
        // above) and its fd is `self.file` (or its registered copy); both are owned by
        // `self` and outlive the I/O, because `Drop` waits for every I/O in flight. The slot
        // is marked in flight below, so no safe borrow of its buffer exists until the
        // kernel completes it.
        let pushed = unsafe { sq.push(&entry) };
        drop(sq);
        if pushed.is_err() {
            // Cannot happen (see above); submit what is queued and retry once.
            let _ = self.ring.submit();
            let mut sq = self.ring.submission();
            // SAFETY: as above.
            unsafe { sq.push(&entry) }.expect("submission queue has room after submit");
        }
        self.in_flight[i] = true;
        self.n_in_flight += 1;
    }

    /// Hands what is queued to the kernel now, without waiting.
    pub fn submit(&mut self) -> io::Result<()> {
        transient_ok(self.ring.submit())
    }

    /// Submits what is queued and waits for a completion, or until `deadline` (an absolute
    /// CLOCK_MONOTONIC time in ns, as `now_ns`) at the latest; it may return earlier.
    ///
    /// The deadline is kept by a timer request in the ring (IORING_OP_TIMEOUT), armed once
    /// and kept across waits while it still falls no later than the deadline asked, so a
    /// closed loop waits on its interval boundary with one timer per interval. A timed
    /// wait (IORING_ENTER_EXT_ARG) arms and cancels a kernel timer on every call, which on
    /// this VM cost the loop-device job about 6% of its IOPS (BENCHMARKS.md, job 7). A
    /// deadline earlier than the timer's (an open loop's next due I/O, the run's end) is
    /// waited for by argument.
    pub fn wait_until(&mut self, deadline: u64, now: u64) -> io::Result<()> {
        if self.timer_ok && self.features.ext_arg {
            if self.timer.is_none() {
                self.arm_timer(deadline);
            }
            if self.timer.is_some_and(|t| t <= deadline) {
                return self.submit_and_wait(1, None);
            }
        }
        let timeout = Duration::from_nanos(deadline.saturating_sub(now).max(1000));
        self.submit_and_wait(1, Some(timeout))
    }

    fn arm_timer(&mut self, deadline: u64) {
        *self.timer_ts = types::Timespec::new()
            .sec(deadline / 1_000_000_000)
            .nsec((deadline % 1_000_000_000) as u32);
        let entry = opcode::Timeout::new(&*self.timer_ts)
            .flags(types::TimeoutFlags::ABS)
            .build()
            .user_data(TIMER);
        // SAFETY: the entry points at `self.timer_ts`, boxed (its address never changes)
        // and owned by `self`, so it outlives the request: the kernel copies it when it
        // prepares the request, at the next submission, and `Drop` drains the ring first.
        // A second timer queued before that submission reads the same (newer) deadline.
        if unsafe { self.ring.submission().push(&entry) }.is_ok() {
            self.timer = Some(deadline);
        }
    }

    /// Submits what is queued and waits until at least `want` completions are ready, or
    /// until `timeout` passes (when the kernel supports timed waits).
    pub fn submit_and_wait(&mut self, want: usize, timeout: Option<Duration>) -> io::Result<()> {
        let want = want.min(self.n_in_flight);
        let res = match timeout {
            Some(t) if self.features.ext_arg && want > 0 => {
                let ts = types::Timespec::new()
                    .sec(t.as_secs())
                    .nsec(t.subsec_nanos());
                let args = types::SubmitArgs::new().timespec(&ts);
                self.ring.submitter().submit_with_args(want, &args)
            }
            _ => self.ring.submit_and_wait(want),
        };
        transient_ok(res)
    }

    /// Takes every ready completion, calling `f(slot, result)` for each (result is the
    /// byte count, or a negated errno). The slot is idle again when `f` runs.
    #[inline]
    pub fn reap(&mut self, mut f: impl FnMut(&mut Self, u32, i32)) -> usize {
        // Take the whole batch in one pass over the ring (one head update), then hand
        // each completion out with the slot already idle.
        let mut reaped = std::mem::take(&mut self.reaped);
        reaped.clear();
        {
            let mut cq = self.ring.completion();
            cq.sync();
            for cqe in cq {
                if cqe.user_data() == TIMER {
                    // -ETIME: it fired. Anything else but a cancel means the kernel does
                    // not take timer requests: waits time out by argument from now on.
                    let res = cqe.result();
                    if res != -libc::ETIME && res != -libc::ECANCELED {
                        self.timer_ok = false;
                    }
                    self.timer = None;
                } else {
                    reaped.push((cqe.user_data() as u32, cqe.result()));
                }
            }
        }
        for &(slot, _) in &reaped {
            self.in_flight[slot as usize] = false;
        }
        self.n_in_flight -= reaped.len();
        for &(slot, res) in &reaped {
            f(self, slot, res);
        }
        let n = reaped.len();
        self.reaped = reaped;
        n
    }
}

/// An `io_uring_enter` result with the outcomes that lose nothing taken as success: a
/// timed wait that timed out (ETIME), a signal (EINTR), a full completion queue or no
/// memory for the moment (EBUSY, EAGAIN). Queued entries stay queued and go with the
/// next call.
pub(super) fn transient_ok(res: io::Result<usize>) -> io::Result<()> {
    match res {
        Ok(_) => Ok(()),
        Err(e) => match e.raw_os_error() {
            Some(libc::ETIME | libc::EINTR | libc::EBUSY | libc::EAGAIN) => Ok(()),
            _ => Err(e),
        },
    }
}

impl Drop for Uring {
    fn drop(&mut self) {
        // Every I/O in flight must finish before the buffers and file go away.
        let mut tries = 0u32;
        while self.n_in_flight > 0 {
            if self.ring.submit_and_wait(1).is_err() {
                tries += 1;
                if tries > 1_000_000 {
                    // The kernel refuses to wait: leaking is the only sound choice left.
                    std::mem::forget(std::mem::replace(&mut self.bufs, SlotBuffers::new(0, 0)));
                    return;
                }
            }
            self.reap(|_, _, _| {});
        }
        // Release the registered file now: the kernel drops a ring's resources
        // asynchronously after close, which would keep a filesystem busy (umount fails)
        // for a moment after the run.
        if self.features.fixed_file {
            let _ = self.ring.submitter().unregister_files();
        }
        if self.features.fixed_buffers {
            let _ = self.ring.submitter().unregister_buffers();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::now_ns;
    use std::io::Write;
    use std::time::Instant;

    /// A read from an empty pipe stands for a device that answers nothing: the waits must
    /// still end at their deadlines, through the ring's timer or by argument.
    #[test]
    fn a_wait_ends_at_its_deadline_while_an_io_hangs() {
        let (rx, mut tx) = std::io::pipe().unwrap();
        let rx = Arc::new(File::from(std::os::fd::OwnedFd::from(rx)));
        let mut ring = Uring::new(rx, 2, 4096).unwrap();
        ring.queue(0, true, 0, 16);
        let mut waits = Vec::new();
        let mut wait = |ring: &mut Uring, ms: u64| {
            let t = Instant::now();
            ring.wait_until(now_ns() + ms * 1_000_000, now_ns())
                .unwrap();
            let took = t.elapsed();
            let done = ring.reap(|_, _, _| {});
            waits.push((ms, took, done, ring.timer));
        };
        // The first wait arms the timer; the second arms the next one.
        wait(&mut ring, 60);
        wait(&mut ring, 40);
        // A timer armed for later than the deadline asked: that wait goes by argument.
        ring.arm_timer(now_ns() + 10_000_000_000);
        wait(&mut ring, 20);
        let timer_ok = ring.timer_ok;
        // Let the read complete (before any assertion: a ring cannot be dropped while an
        // I/O is in flight, so a failed assertion would otherwise hang the test).
        tx.write_all(&[7u8; 16]).unwrap();
        let mut got = Vec::new();
        for _ in 0..100 {
            ring.wait_until(now_ns() + 50_000_000, now_ns()).unwrap();
            ring.reap(|r, slot, res| got.push((slot, res, r.buf(slot)[0])));
            if !got.is_empty() {
                break;
            }
        }
        assert_eq!(got, vec![(0, 16, 7)]);
        assert!(timer_ok, "the kernel refused the timer request");
        for (i, &(ms, took, done, timer)) in waits.iter().enumerate() {
            assert_eq!(done, 0, "wait {i}: the read cannot have completed");
            assert!(
                took >= Duration::from_millis(ms - 5) && took < Duration::from_millis(ms + 1_000),
                "wait {i}: returned after {took:?}, deadline {ms} ms"
            );
            if i < 2 {
                assert_eq!(timer, None, "wait {i} ended by its timer, reaped");
            } else {
                assert!(timer.is_some(), "wait {i}: the later timer stays armed");
            }
        }
    }
}
