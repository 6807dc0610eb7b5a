//! One io_uring shared by many rate-limited probes, each with its own file and buffer
//! (the daemon's canary reactor, `daemon::reactor`).
//!
//! Soundness rests on the rules of [`super::uring`], per slot: the ring owns each slot's
//! buffer and a handle on its file, so both outlive every I/O in flight; a slot's buffer
//! can only be borrowed while the slot is idle; a slot closed while its I/O is in flight
//! is kept (an orphan) until the kernel completes that I/O; and `Drop` waits for every
//! I/O in flight before anything is freed.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::Duration;

use io_uring::{opcode, squeue, types, IoUring};

use super::buf::SlotBuffers;
use super::uring::transient_ok;

struct RingSlot {
    file: Arc<File>,
    buf: SlotBuffers,
    in_flight: bool,
    /// Closed by its owner while an I/O was in flight: freed at that I/O's completion.
    orphan: bool,
}

/// A ring of up to [`SharedRing::capacity`] I/Os in flight, one per slot at most.
pub struct SharedRing {
    ring: IoUring,
    slots: Vec<Option<RingSlot>>,
    free: Vec<u32>,
    n_in_flight: usize,
    /// Completions of one reap, reused.
    reaped: Vec<(u32, i32)>,
    capacity: usize,
}

impl SharedRing {
    /// A ring for `entries` submissions at a time. Must be created on the thread that will
    /// use it (single issuer). Needs timed waits (IORING_ENTER_EXT_ARG, Linux 5.11): a
    /// ring without them is refused (`Unsupported`), and the caller keeps its own loop.
    pub fn new(entries: u32) -> io::Result<SharedRing> {
        let ring = match IoUring::builder()
            .setup_single_issuer()
            .setup_defer_taskrun()
            .build(entries)
        {
            Ok(r) => r,
            Err(_) => IoUring::new(entries)?,
        };
        if !ring.params().is_feature_ext_arg() {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "io_uring without timed waits (Linux 5.11 or later needed)",
            ));
        }
        // The completion queue holds twice the entries; never more in flight than it holds.
        let capacity = ring.params().cq_entries() as usize;
        Ok(SharedRing {
            ring,
            slots: Vec::new(),
            free: Vec::new(),
            n_in_flight: 0,
            reaped: Vec::new(),
            capacity,
        })
    }

    /// I/Os in flight at most.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    pub fn in_flight(&self) -> usize {
        self.n_in_flight
    }

    /// Whether another I/O may be queued now.
    pub fn has_room(&self) -> bool {
        self.n_in_flight < self.capacity
    }

    /// A slot for I/O of up to `size` bytes on `file`.
    pub fn open(&mut self, file: Arc<File>, size: usize) -> u32 {
        let slot = RingSlot {
            file,
            buf: SlotBuffers::new(1, size.max(1)),
            in_flight: false,
            orphan: false,
        };
        match self.free.pop() {
            Some(i) => {
                self.slots[i as usize] = Some(slot);
                i
            }
            None => {
                self.slots.push(Some(slot));
                (self.slots.len() - 1) as u32
            }
        }
    }

    /// Gives the slot back: at once when idle, else at its I/O's completion (which is then
    /// not reported).
    pub fn close(&mut self, slot: u32) {
        let Some(s) = self.slots.get_mut(slot as usize).and_then(Option::as_mut) else {
            return;
        };
        if s.in_flight {
            s.orphan = true;
        } else {
            self.slots[slot as usize] = None;
            self.free.push(slot);
        }
    }

    fn live(&self, slot: u32) -> &RingSlot {
        match self.slots.get(slot as usize).and_then(Option::as_ref) {
            Some(s) if !s.orphan => s,
            _ => panic!("slot {slot} is not open"),
        }
    }

    pub fn is_busy(&self, slot: u32) -> bool {
        self.live(slot).in_flight
    }

    /// The buffer of an idle slot, to fill before a write. Panics if the slot is in flight
    /// (a logic error that would otherwise race with the kernel).
    pub fn buf_mut(&mut self, slot: u32) -> &mut [u8] {
        assert!(!self.live(slot).in_flight, "slot {slot} is in flight");
        let s = self.slots[slot as usize].as_mut().expect("checked above");
        s.buf.slot_mut(0)
    }

    /// Queues one read or write of `len` bytes at `offset` with the slot's buffer and
    /// file. Nothing reaches the kernel until the next submission. Panics if the slot is
    /// in flight, `len` exceeds its buffer, or the ring has no room (see `has_room`).
    pub fn queue(&mut self, slot: u32, read: bool, offset: u64, len: u32) {
        assert!(self.has_room(), "ring full");
        assert!(
            !self.live(slot).in_flight,
            "slot {slot} is already in flight"
        );
        let s = self.slots[slot as usize].as_mut().expect("checked above");
        assert!(
            len as usize <= s.buf.slot_size(),
            "I/O larger than its slot"
        );
        let ptr = s.buf.slot_ptr(0);
        let fd = types::Fd(s.file.as_raw_fd());
        let entry: squeue::Entry = if read {
            opcode::Read::new(fd, ptr, len).offset(offset).build()
        } else {
            opcode::Write::new(fd, ptr, len).offset(offset).build()
        }
        .user_data(slot as u64);
        // SAFETY: the entry's buffer is this slot's (`len` fits, checked above) and its fd
        // is the slot's file; the ring owns both, and neither is freed while the I/O is in
        // flight: `close` keeps an in-flight slot until its completion, and `Drop` waits
        // for every completion. The slot is marked in flight below, so no safe borrow of
        // its buffer exists until the kernel is done with it.
        let pushed = unsafe { self.ring.submission().push(&entry) };
        if pushed.is_err() {
            // The submission queue is full: hand it to the kernel, then push again.
            let _ = self.ring.submit();
            // SAFETY: as above.
            if unsafe { self.ring.submission().push(&entry) }.is_err() {
                panic!("submission queue still full after a submit");
            }
        }
        s.in_flight = true;
        self.n_in_flight += 1;
    }

    /// Hands what is queued to the kernel, without waiting. An I/O that completes in the
    /// call (a page-cache hit) can be reaped at once.
    pub fn submit(&mut self) -> io::Result<()> {
        transient_ok(self.ring.submit())
    }

    /// Submits what is queued and waits up to `timeout` for a completion (none waited for
    /// when nothing is in flight).
    pub fn submit_and_wait(&mut self, timeout: Duration) -> io::Result<()> {
        let res = if self.n_in_flight == 0 {
            self.ring.submit()
        } else {
            let ts = types::Timespec::new()
                .sec(timeout.as_secs())
                .nsec(timeout.subsec_nanos());
            let args = types::SubmitArgs::new().timespec(&ts);
            self.ring.submitter().submit_with_args(1, &args)
        };
        transient_ok(res)
    }

    /// Takes every ready completion, calling `f(slot, result)` for each (the byte count,
    /// or a negated errno) with the slot idle again. An orphan's completion frees it and is
    /// not reported.
    pub fn reap(&mut self, mut f: impl FnMut(u32, i32)) -> usize {
        let mut reaped = std::mem::take(&mut self.reaped);
        reaped.clear();
        {
            let mut cq = self.ring.completion();
            cq.sync();
            reaped.extend(cq.map(|c| (c.user_data() as u32, c.result())));
        }
        // Every slot idle (or freed) before any callback runs, so a callback that panics
        // leaves no slot marked in flight with no I/O behind it.
        let mut n = 0;
        reaped.retain(|&(slot, _)| {
            let Some(s) = self.slots.get_mut(slot as usize).and_then(Option::as_mut) else {
                return false;
            };
            if !s.in_flight {
                return false;
            }
            s.in_flight = false;
            self.n_in_flight -= 1;
            if s.orphan {
                self.slots[slot as usize] = None;
                self.free.push(slot);
                return false;
            }
            true
        });
        for &(slot, res) in &reaped {
            n += 1;
            f(slot, res);
        }
        self.reaped = reaped;
        n
    }
}

impl Drop for SharedRing {
    fn drop(&mut self) {
        // Every I/O in flight must finish before the buffers and files go away. A drive
        // that never answers is waited for 10 s; then the slots are leaked, which is
        // sound (the kernel may still write into them, and they are never freed).
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while self.n_in_flight > 0 {
            if std::time::Instant::now() >= deadline {
                std::mem::forget(std::mem::take(&mut self.slots));
                return;
            }
            let ts = types::Timespec::new().nsec(100_000_000);
            let args = types::SubmitArgs::new().timespec(&ts);
            let _ = self.ring.submitter().submit_with_args(1, &args);
            self.reap(|_, _| {});
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::time::Instant;

    /// A read from an empty pipe stands for a drive that answers nothing: the other
    /// slots' I/O goes on, a wait ends at its timeout, and a slot closed while its read
    /// hangs is freed at the completion without a report.
    #[test]
    fn a_hung_slot_holds_neither_the_others_nor_the_waits() {
        let (rx, mut tx) = std::io::pipe().unwrap();
        let rx = Arc::new(File::from(std::os::fd::OwnedFd::from(rx)));
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, vec![9u8; 8192]).unwrap();
        let file = Arc::new(File::open(&path).unwrap());
        let mut ring = SharedRing::new(8).unwrap();
        let hung = ring.open(rx, 4096);
        let ok = ring.open(file, 4096);
        ring.queue(hung, true, 0, 16);
        let mut got = Vec::new();
        for round in 0..3 {
            ring.queue(ok, true, 4096, 4096);
            let t = Instant::now();
            // Wait until the file read is back (it may complete at submission).
            while ring.is_busy(ok) {
                ring.submit_and_wait(Duration::from_millis(50)).unwrap();
                ring.reap(|slot, res| got.push((round, slot, res)));
                assert!(
                    t.elapsed() < Duration::from_secs(10),
                    "the file read never came"
                );
            }
        }
        assert_eq!(got, vec![(0, ok, 4096), (1, ok, 4096), (2, ok, 4096)]);
        assert!(ring.is_busy(hung));
        // A timed wait with only the hung read in flight ends at its timeout.
        let t = Instant::now();
        ring.submit_and_wait(Duration::from_millis(40)).unwrap();
        assert_eq!(ring.reap(|_, _| {}), 0);
        let took = t.elapsed();
        // Closed while in flight: kept until the read completes, then freed unreported.
        ring.close(hung);
        tx.write_all(&[1u8; 16]).unwrap();
        let t = Instant::now();
        while ring.in_flight() > 0 && t.elapsed() < Duration::from_secs(10) {
            ring.submit_and_wait(Duration::from_millis(50)).unwrap();
            assert_eq!(
                ring.reap(|_, _| {}),
                0,
                "an orphan's completion is not reported"
            );
        }
        assert_eq!(ring.in_flight(), 0);
        assert!(
            took >= Duration::from_millis(35),
            "the wait returned after {took:?}"
        );
        // Its place is taken again.
        let (rx2, _tx2) = std::io::pipe().unwrap();
        let again = ring.open(Arc::new(File::from(std::os::fd::OwnedFd::from(rx2))), 512);
        assert_eq!(again, hung);
        assert!(ring.has_room() && ring.capacity() >= 8);
    }
}
