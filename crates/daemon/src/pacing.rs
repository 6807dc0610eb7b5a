//! Health reads across drives: each drive's polls at a slot of its own in the interval
//! (so 256 drives do not all read at once every `health_interval`), and at most a few
//! reads (smartctl runs, NVMe admin ioctls) at a time in the whole process.
//!
//! A read that hangs (a device that does not answer) keeps its permit only for a lease
//! (smartctl's own time limit and a margin): past it, the permit no longer counts, so a
//! hung device stalls its own drive's health and nothing else. An NVMe ioctl cannot be
//! killed; its thread stays in the read, but the other drives go on.

use std::sync::{Condvar, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

/// Health reads at once in the process.
pub const READS_AT_ONCE: usize = 4;
/// How long a read holds its permit at most: smartctl is killed at 30 s
/// (`health::ReadOptions`), then its output is read within the same deadline.
pub const LEASE: Duration = Duration::from_secs(35);

/// What the limiter shows (exported as `driveprobe_health_reads_*`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReadStats {
    pub limit: usize,
    /// Reads holding a permit now (their lease not run out).
    pub in_flight: usize,
    /// Drives waiting for a permit now.
    pub waiting: usize,
    /// The most reads in flight at once since the process started.
    pub in_flight_max: usize,
    /// Reads that outlived their lease (a hung device), since the process started.
    pub overdue_total: u64,
}

#[derive(Debug, Default)]
struct Inner {
    /// The permits given out: (id, the lease's end).
    held: Vec<(u64, Instant)>,
    next_id: u64,
    waiting: usize,
    in_flight_max: usize,
    overdue_total: u64,
}

impl Inner {
    /// Drops the leases run out by `now` (counted overdue), and returns how many hold.
    fn live(&mut self, now: Instant) -> usize {
        let before = self.held.len();
        self.held.retain(|&(_, end)| end > now);
        self.overdue_total += (before - self.held.len()) as u64;
        self.held.len()
    }
}

static GLOBAL: OnceLock<ReadLimiter> = OnceLock::new();

/// How many drives are due for a read and wait for a thread to make it (the health pool's
/// queue), counted with those waiting for a permit.
pub type QueuedCount = Box<dyn Fn() -> usize + Send + Sync>;

/// A counting semaphore whose permits run out after a lease.
pub struct ReadLimiter {
    limit: usize,
    lease: Duration,
    inner: Mutex<Inner>,
    cv: Condvar,
    queued: OnceLock<QueuedCount>,
}

impl std::fmt::Debug for ReadLimiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadLimiter")
            .field("limit", &self.limit)
            .field("lease", &self.lease)
            .finish()
    }
}

/// A read's right to run; released when dropped.
#[derive(Debug)]
pub struct Permit<'a> {
    limiter: &'a ReadLimiter,
    id: u64,
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        let mut g = self.limiter.lock();
        g.held.retain(|&(id, _)| id != self.id);
        drop(g);
        self.limiter.cv.notify_one();
    }
}

impl ReadLimiter {
    pub fn new(limit: usize, lease: Duration) -> ReadLimiter {
        ReadLimiter {
            limit: limit.max(1),
            lease,
            inner: Mutex::new(Inner::default()),
            cv: Condvar::new(),
            queued: OnceLock::new(),
        }
    }

    /// Counts the drives `queued` says are due and wait for a thread as waiting (once).
    pub fn count_queued_with(&self, queued: QueuedCount) {
        let _ = self.queued.set(queued);
    }

    /// The daemon's one limiter ([`READS_AT_ONCE`], [`LEASE`]): it outlives generations.
    pub fn global() -> &'static ReadLimiter {
        GLOBAL.get_or_init(|| ReadLimiter::new(READS_AT_ONCE, LEASE))
    }

    /// The daemon's limiter once a health poller has started (for `/metrics`).
    pub fn global_if_used() -> Option<&'static ReadLimiter> {
        GLOBAL.get()
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits for a permit; None when `stopped()` turns true first (checked whenever the
    /// waiter wakes: [`ReadLimiter::wake_all`] wakes every waiter).
    pub fn acquire(&self, stopped: &dyn Fn() -> bool) -> Option<Permit<'_>> {
        let mut g = self.lock();
        g.waiting += 1;
        loop {
            let now = Instant::now();
            let live = g.live(now);
            if stopped() {
                g.waiting -= 1;
                drop(g);
                // A release may have woken this waiter alone: pass it on.
                self.cv.notify_one();
                return None;
            }
            if live < self.limit {
                g.waiting -= 1;
                let id = g.next_id;
                g.next_id += 1;
                g.held.push((id, now + self.lease));
                g.in_flight_max = g.in_flight_max.max(g.held.len());
                return Some(Permit { limiter: self, id });
            }
            // Full: until a release, or the first lease runs out.
            let first_end = g.held.iter().map(|&(_, end)| end).min();
            let wait = first_end.map_or(self.lease, |e| e.saturating_duration_since(now));
            g = match self.cv.wait_timeout(g, wait.max(Duration::from_millis(1))) {
                Ok((g, _)) => g,
                Err(e) => e.into_inner().0,
            };
        }
    }

    /// Wakes every waiter (a generation stops: its drives' waiters see `stopped`).
    pub fn wake_all(&self) {
        let _g = self.lock();
        self.cv.notify_all();
    }

    pub fn stats(&self) -> ReadStats {
        // Outside the limiter's lock: the queue has a lock of its own.
        let queued = self.queued.get().map_or(0, |q| q());
        let mut g = self.lock();
        let in_flight = g.live(Instant::now());
        ReadStats {
            limit: self.limit,
            in_flight,
            waiting: g.waiting + queued,
            in_flight_max: g.in_flight_max,
            overdue_total: g.overdue_total,
        }
    }
}

/// Where a drive's polls fall in the interval: a stable offset from its name (FNV-1a,
/// then a 64-bit finalizer: names that differ in one character land far apart),
/// the same in every generation and every run, so a reload or a drive added elsewhere
/// moves no other drive's slot.
pub fn offset_of(name: &str, interval: Duration) -> Duration {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    // murmur3's fmix64.
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^= h >> 33;
    let frac = (h >> 32) as u128;
    Duration::from_nanos(((interval.as_nanos() * frac) >> 32) as u64)
}

/// The process's origin of the slots (the first use).
pub fn origin() -> Instant {
    static O: OnceLock<Instant> = OnceLock::new();
    *O.get_or_init(Instant::now)
}

/// The first of a drive's slots (`origin + offset + k * interval`) at or after
/// `earliest`, as time since `origin`.
pub fn next_slot(since_origin: Duration, offset: Duration, interval: Duration) -> Duration {
    let (t, off, iv) = (
        since_origin.as_nanos(),
        offset.as_nanos(),
        interval.as_nanos().max(1),
    );
    let k = if t <= off { 0 } else { (t - off).div_ceil(iv) };
    Duration::from_nanos((off + k * iv) as u64)
}

/// When a drive polls next, as time since `origin`: after a poll started at `polled`, its
/// first slot at least half an interval later (so the first poll, made at once when the
/// drive starts, is not followed by a second one moments after).
pub fn after_poll(polled: Duration, offset: Duration, interval: Duration) -> Duration {
    next_slot(polled + interval / 2, offset, interval)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::Arc;

    /// Polls `cond` every 2 ms until it holds, failing the test after 30 s.
    pub(crate) fn wait_until(what: &str, cond: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !cond() {
            assert!(Instant::now() < deadline, "timed out waiting for: {what}");
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// 32 drives read at once through a limit of 4, each read (a fake reader) held until
    /// the test lets it go: never more than 4 in flight, the others wait, and every
    /// drive gets its read.
    #[test]
    fn at_most_the_limit_read_at_once_and_every_drive_reads() {
        let limiter = Arc::new(ReadLimiter::new(4, Duration::from_secs(3600)));
        let in_read = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let done = Arc::new(AtomicUsize::new(0));
        let go = Arc::new(AtomicBool::new(false));
        let threads: Vec<_> = (0..32)
            .map(|_| {
                let (l, in_read, most, done, go) = (
                    limiter.clone(),
                    in_read.clone(),
                    most.clone(),
                    done.clone(),
                    go.clone(),
                );
                std::thread::spawn(move || {
                    let permit = l.acquire(&|| false).expect("not stopped");
                    let n = in_read.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(n, Ordering::SeqCst);
                    // The fake reader: blocks until the test lets reads finish.
                    while !go.load(Ordering::SeqCst) {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    in_read.fetch_sub(1, Ordering::SeqCst);
                    drop(permit);
                    done.fetch_add(1, Ordering::SeqCst);
                })
            })
            .collect();
        wait_until("4 reads in flight and 28 waiting", || {
            let s = limiter.stats();
            s.in_flight == 4 && s.waiting == 28
        });
        assert_eq!(in_read.load(Ordering::SeqCst), 4);
        go.store(true, Ordering::SeqCst);
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(done.load(Ordering::SeqCst), 32);
        assert_eq!(most.load(Ordering::SeqCst), 4);
        let s = limiter.stats();
        assert_eq!((s.in_flight, s.waiting, s.in_flight_max), (0, 0, 4));
        assert_eq!(s.overdue_total, 0);
    }

    /// A read that never returns (a hung device) holds its permit only for the lease:
    /// then the next drive reads, and the hung one is counted overdue.
    #[test]
    fn a_hung_read_does_not_hold_its_permit_past_the_lease() {
        let limiter = ReadLimiter::new(1, Duration::from_millis(20));
        let hung = limiter.acquire(&|| false).unwrap();
        // The only permit is out, and never given back while this waits.
        let next = limiter.acquire(&|| false);
        assert!(next.is_some());
        assert_eq!(limiter.stats().overdue_total, 1);
        drop(next);
        // The hung read returns at last: nothing counts twice.
        drop(hung);
        let s = limiter.stats();
        assert_eq!((s.in_flight, s.waiting, s.overdue_total), (0, 0, 1));
    }

    /// A drive waiting for a permit stops when its generation stops.
    #[test]
    fn a_waiter_stops_when_told() {
        let limiter = Arc::new(ReadLimiter::new(1, Duration::from_secs(3600)));
        let held = limiter.acquire(&|| false).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let (l, s) = (limiter.clone(), stop.clone());
        let waiter = std::thread::spawn(move || l.acquire(&|| s.load(Ordering::SeqCst)).is_none());
        wait_until("one waiter", || limiter.stats().waiting == 1);
        stop.store(true, Ordering::SeqCst);
        limiter.wake_all();
        assert!(
            waiter.join().unwrap(),
            "the waiter got a permit after its stop"
        );
        assert_eq!(limiter.stats().waiting, 0);
        drop(held);
    }

    /// Every drive's slots fall once in every interval, wherever it starts: over any
    /// interval all 256 drives are polled, each exactly once.
    #[test]
    fn every_drive_polls_once_per_interval() {
        let iv = Duration::from_secs(300);
        let names: Vec<String> = (0..256).map(|i| format!("bench-{i:02}")).collect();
        for start in [0u64, 1, 299, 300, 12_345, 86_400] {
            let start = Duration::from_secs(start) + Duration::from_millis(7);
            for n in &names {
                let off = offset_of(n, iv);
                assert!(off < iv);
                assert_eq!(off, offset_of(n, iv), "stable");
                let s = next_slot(start, off, iv);
                assert!(s >= start && s < start + iv, "{n}: {s:?} from {start:?}");
                // The one after is a whole interval later.
                let s2 = next_slot(s + Duration::from_nanos(1), off, iv);
                assert_eq!(s2, s + iv);
                // After a poll at the slot, the next poll is the next slot.
                assert_eq!(after_poll(s, off, iv), s + iv);
                // After a first poll at any time: between half and one and a half
                // intervals later.
                let a = after_poll(start, off, iv);
                assert!(a >= start + iv / 2 && a < start + iv / 2 + iv, "{a:?}");
            }
        }
    }

    /// The slots spread: no tenth of the interval holds more than twice its share of the
    /// drives (names as discovery and the bench make them).
    #[test]
    fn slots_spread_over_the_interval() {
        let iv = Duration::from_secs(300);
        for names in [
            (0..256)
                .map(|i| format!("bench-{i:02}"))
                .collect::<Vec<_>>(),
            (0..256).map(|i| format!("S4EVNX0R{i:06}")).collect(),
            (0..64)
                .map(|i| {
                    format!("sd{}", (b'a' + (i % 26) as u8) as char) + &"a".repeat(i as usize / 26)
                })
                .collect(),
        ] {
            let mut tenths = [0usize; 10];
            for n in &names {
                tenths[(offset_of(n, iv).as_nanos() * 10 / iv.as_nanos()) as usize] += 1;
            }
            let share = names.len() / 10;
            assert!(
                tenths.iter().all(|&c| c <= 2 * share + 2),
                "{tenths:?} for {}..",
                names[0]
            );
        }
    }
}
