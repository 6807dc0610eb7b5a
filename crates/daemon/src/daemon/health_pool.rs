//! The health polling of every drive on a few shared threads (issue 33), not a thread per
//! drive: with 2,000 drives the thread per drive was half of the daemon's 4,005 threads,
//! and a process out of threads left drives without a poller.
//!
//! Each drive's polling is a [`Job`] with a due time. A few workers (the number of health
//! reads at once, [`crate::pacing::READS_AT_ONCE`]; fewer while there are fewer drives)
//! take the earliest due job, poll it, and put it back with its next due time. A read that
//! hangs (a device that does not answer, an NVMe ioctl that cannot be killed) holds its
//! worker and its own drive only: once it has held the worker for the lease
//! ([`crate::pacing::LEASE`], as the read's permit), the worker no longer counts and
//! another is started in its place; when the read returns, the extra worker ends. So the
//! pool has `READS_AT_ONCE` workers plus one per read hung now, and a hung drive's next
//! poll waits for its read (never a second read of it at once).
//!
//! A worker that cannot be started (the limit on tasks reached) is recorded on every
//! surface ([`crate::status::Shared::thread_failed`]) and retried at every tick of the
//! control loop ([`Pool::grow`]).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use crate::status::Shared;

/// What the pool's failure to start a worker is recorded as.
pub const WHAT: &str = "health polling";

/// One drive's polling, as the pool runs it.
pub trait Job: Send {
    /// Polls once; when to poll next.
    fn poll(&mut self) -> Instant;
    /// The drive's threads were told to stop: the job leaves the pool.
    fn stopped(&self) -> bool;
    /// Called once when the job leaves the pool.
    fn finish(&mut self) {}
}

/// A job's place in the pool, for whoever stops its drive: finished once the job has left
/// the pool (its drive stopped, and no poll of it going on).
#[derive(Debug)]
pub struct Handle {
    pool: &'static Pool,
    id: u64,
    done: Arc<AtomicBool>,
}

impl Handle {
    pub fn is_finished(&self) -> bool {
        if self.done.load(Ordering::Acquire) {
            return true;
        }
        // A stopped job that is not being polled leaves now (not at its due time).
        let mut g = self.pool.lock();
        Pool::reap_one(&mut g, self.id);
        self.done.load(Ordering::Acquire)
    }
}

struct Slot {
    due: Instant,
    /// None while a worker polls it.
    job: Option<Box<dyn Job>>,
    done: Arc<AtomicBool>,
}

#[derive(Default)]
struct Inner {
    slots: BTreeMap<u64, Slot>,
    /// The jobs not being polled, by due time.
    queue: BTreeSet<(Instant, u64)>,
    next_id: u64,
    /// Worker threads alive (or being started).
    workers: usize,
    /// The jobs being polled now: since when.
    busy: BTreeMap<u64, Instant>,
    /// The most workers alive at once.
    workers_max: usize,
}

impl Inner {
    /// Polls that have held their worker past `lease`: those workers do not count.
    fn hung(&self, now: Instant, lease: Duration) -> usize {
        self.busy
            .values()
            .filter(|&&t| now.saturating_duration_since(t) >= lease)
            .count()
    }

    fn live(&self, now: Instant, lease: Duration) -> usize {
        self.workers - self.hung(now, lease).min(self.workers)
    }
}

/// The pool: its jobs, its workers.
pub struct Pool {
    /// Workers wanted (while there are that many jobs), not counting those hung in a read.
    size: usize,
    lease: Duration,
    thread_name: &'static str,
    inner: Mutex<Inner>,
    cv: Condvar,
    /// Where a worker that cannot start is recorded (the daemon's status).
    shared: Mutex<Option<Arc<Shared>>>,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool").field("size", &self.size).finish()
    }
}

static GLOBAL: OnceLock<Pool> = OnceLock::new();

impl Pool {
    pub fn new(size: usize, lease: Duration, thread_name: &'static str) -> Pool {
        Pool {
            size: size.max(1),
            lease,
            thread_name,
            inner: Mutex::new(Inner::default()),
            cv: Condvar::new(),
            shared: Mutex::new(None),
        }
    }

    /// The daemon's pool: as many workers as health reads at once, living across
    /// generations (as the read limiter does).
    pub fn global() -> &'static Pool {
        GLOBAL.get_or_init(|| {
            let pool = Pool::new(
                crate::pacing::READS_AT_ONCE,
                crate::pacing::LEASE,
                "dp-health",
            );
            // The drives due and waiting for a worker are waiting for a read.
            crate::pacing::ReadLimiter::global()
                .count_queued_with(Box::new(|| Pool::global().due_now()));
            pool
        })
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds a job, first due at `due`; starts workers as needed (a failure is recorded
    /// in `shared` and retried by [`Pool::grow`]).
    pub fn add(&'static self, job: Box<dyn Job>, due: Instant, shared: &Arc<Shared>) -> Handle {
        *self.shared.lock().unwrap_or_else(|e| e.into_inner()) = Some(shared.clone());
        let done = Arc::new(AtomicBool::new(false));
        let mut g = self.lock();
        let id = g.next_id;
        g.next_id += 1;
        g.slots.insert(
            id,
            Slot {
                due,
                job: Some(job),
                done: done.clone(),
            },
        );
        g.queue.insert((due, id));
        drop(g);
        self.cv.notify_one();
        self.grow();
        Handle {
            pool: self,
            id,
            done,
        }
    }

    /// Jobs due now and waiting for a worker.
    pub fn due_now(&self) -> usize {
        let g = self.lock();
        g.queue.range(..=(Instant::now(), u64::MAX)).count()
    }

    /// Worker threads alive now, and the most at once.
    pub fn workers(&self) -> (usize, usize) {
        let g = self.lock();
        (g.workers, g.workers_max)
    }

    /// Starts workers until as many as wanted are live (not hung in a read): at each
    /// add, when a worker sees one hung, and at every tick of the control loop (which
    /// retries a worker that could not be started).
    pub fn grow(&'static self) {
        loop {
            let mut g = self.lock();
            let want = self.size.min(g.slots.len());
            if g.live(Instant::now(), self.lease) >= want {
                return;
            }
            g.workers += 1;
            g.workers_max = g.workers_max.max(g.workers);
            drop(g);
            let spawned = std::thread::Builder::new()
                .name(self.thread_name.into())
                .spawn(move || self.work());
            let shared = self
                .shared
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone();
            match spawned {
                Ok(_) => {
                    if let Some(s) = shared {
                        s.thread_started(WHAT);
                    }
                }
                Err(e) => {
                    self.lock().workers -= 1;
                    if let Some(s) = shared {
                        s.thread_failed(WHAT, &e);
                    }
                    return;
                }
            }
        }
    }

    /// Takes job `id` out when it is stopped and not being polled.
    fn reap_one(g: &mut Inner, id: u64) {
        let Some(slot) = g.slots.get_mut(&id) else {
            return;
        };
        if !slot.job.as_ref().is_some_and(|j| j.stopped()) {
            return;
        }
        let due = slot.due;
        if let Some(mut slot) = g.slots.remove(&id) {
            g.queue.remove(&(due, id));
            if let Some(j) = slot.job.as_mut() {
                j.finish();
            }
            slot.done.store(true, Ordering::Release);
        }
    }

    /// A worker: polls the earliest due job, until there are more workers than wanted.
    fn work(&'static self) {
        let mut g = self.lock();
        loop {
            let now = Instant::now();
            let live = g.live(now, self.lease);
            let want = self.size.min(g.slots.len());
            if live > self.size {
                // More than wanted (a hung read came back): this one ends; another idle
                // one sees the queue. (Fewer drives keep their workers, `size` at most:
                // a reload that removes and adds drives does not end and start them.)
                g.workers -= 1;
                drop(g);
                self.cv.notify_one();
                return;
            }
            if live < want {
                // A read hangs past its lease: another worker in its place.
                drop(g);
                self.grow();
                g = self.lock();
                continue;
            }
            let first = g.queue.iter().next().copied();
            match first {
                Some((due, id)) if due <= now => {
                    g.queue.remove(&(due, id));
                    g = self.run_one(g, id, now);
                }
                _ => {
                    // Until the next due time, or the first lease to run out.
                    let lease_end = g
                        .busy
                        .values()
                        .map(|&t| t + self.lease)
                        .filter(|&t| t > now)
                        .min();
                    let wake = [first.map(|f| f.0), lease_end].into_iter().flatten().min();
                    g = match wake {
                        Some(w) => {
                            match self.cv.wait_timeout(g, w.saturating_duration_since(now)) {
                                Ok((g, _)) => g,
                                Err(e) => e.into_inner().0,
                            }
                        }
                        None => self.cv.wait(g).unwrap_or_else(|e| e.into_inner()),
                    };
                }
            }
        }
    }

    /// Polls job `id` (taken off the queue) with the lock released; puts it back with its
    /// next due time, or lets it leave when its drive stopped.
    fn run_one<'a>(
        &'a self,
        mut g: MutexGuard<'a, Inner>,
        id: u64,
        now: Instant,
    ) -> MutexGuard<'a, Inner> {
        let Some(mut job) = g.slots.get_mut(&id).and_then(|s| s.job.take()) else {
            return g;
        };
        if job.stopped() {
            job.finish();
            if let Some(s) = g.slots.remove(&id) {
                s.done.store(true, Ordering::Release);
            }
            return g;
        }
        g.busy.insert(id, now);
        drop(g);
        let next = job.poll();
        let mut g = self.lock();
        g.busy.remove(&id);
        if job.stopped() {
            job.finish();
            if let Some(s) = g.slots.remove(&id) {
                s.done.store(true, Ordering::Release);
            }
        } else if let Some(s) = g.slots.get_mut(&id) {
            s.job = Some(job);
            s.due = next;
            g.queue.insert((next, id));
        }
        g
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pacing::tests::wait_until;
    use crate::status::Status;
    use std::sync::atomic::AtomicUsize;

    /// A fake drive: counts its polls; a poll blocks while `hang` is set.
    struct Fake {
        polls: Arc<AtomicUsize>,
        hang: Arc<AtomicBool>,
        stop: Arc<AtomicBool>,
        every: Duration,
    }

    impl Job for Fake {
        fn poll(&mut self) -> Instant {
            self.polls.fetch_add(1, Ordering::SeqCst);
            while self.hang.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(2));
            }
            Instant::now() + self.every
        }
        fn stopped(&self) -> bool {
            self.stop.load(Ordering::SeqCst)
        }
    }

    struct Drive {
        polls: Arc<AtomicUsize>,
        hang: Arc<AtomicBool>,
        stop: Arc<AtomicBool>,
        handle: Handle,
    }

    fn drives(
        pool: &'static Pool,
        n: usize,
        every: Duration,
        shared: &Arc<Shared>,
        hang: bool,
    ) -> Vec<Drive> {
        (0..n)
            .map(|_| {
                let (polls, hang, stop) = (
                    Arc::new(AtomicUsize::new(0)),
                    Arc::new(AtomicBool::new(hang)),
                    Arc::new(AtomicBool::new(false)),
                );
                let job = Fake {
                    polls: polls.clone(),
                    hang: hang.clone(),
                    stop: stop.clone(),
                    every,
                };
                let handle = pool.add(Box::new(job), Instant::now(), shared);
                Drive {
                    polls,
                    hang,
                    stop,
                    handle,
                }
            })
            .collect()
    }

    /// Issue 33: 64 drives are polled by 4 threads, not 64; one drive whose read hangs
    /// holds its own drive only: past the lease another worker takes its place and every
    /// other drive goes on being polled, the hung drive is never polled twice at once,
    /// and once its read returns the extra worker ends. A stopped drive leaves the pool.
    #[test]
    fn many_drives_share_a_few_threads_and_a_hung_read_holds_only_its_drive() {
        let lease = Duration::from_millis(200);
        let pool: &'static Pool = Box::leak(Box::new(Pool::new(4, lease, "dp-test-pool")));
        let shared = Arc::new(Shared::new(Status::default()));
        let every = Duration::from_millis(20);
        let ds = drives(pool, 64, every, &shared, false);
        wait_until("every drive polled twice", || {
            ds.iter().all(|d| d.polls.load(Ordering::SeqCst) >= 2)
        });
        assert_eq!(pool.workers(), (4, 4), "4 workers for 64 drives");
        // Drive 0's next read hangs.
        ds[0].hang.store(true, Ordering::SeqCst);
        let before = ds[0].polls.load(Ordering::SeqCst);
        wait_until("drive 0's read going", || {
            ds[0].polls.load(Ordering::SeqCst) > before
        });
        let hung_at = Instant::now();
        // Past the lease: a fifth worker, and the others are polled on.
        wait_until("a worker in the hung one's place", || pool.workers().0 == 5);
        assert!(hung_at.elapsed() >= lease / 2, "{:?}", hung_at.elapsed());
        let counts: Vec<usize> = ds.iter().map(|d| d.polls.load(Ordering::SeqCst)).collect();
        wait_until("every other drive polled twice more", || {
            ds.iter()
                .zip(&counts)
                .skip(1)
                .all(|(d, &c)| d.polls.load(Ordering::SeqCst) >= c + 2)
        });
        assert_eq!(
            ds[0].polls.load(Ordering::SeqCst),
            before + 1,
            "the hung drive polled again while its read hangs"
        );
        assert_eq!(pool.workers().0, 5, "one extra worker, not one per poll");
        // The read returns: drive 0 is polled again, and the extra worker ends.
        ds[0].hang.store(false, Ordering::SeqCst);
        wait_until("drive 0 polled again", || {
            ds[0].polls.load(Ordering::SeqCst) >= before + 2
        });
        wait_until("back to 4 workers", || pool.workers().0 == 4);
        assert!(shared.lock().threads.unstarted.is_empty());
        // Stops: a drive stopped leaves at once (no poll of it going), the rest go on.
        ds[1].stop.store(true, Ordering::SeqCst);
        assert!(ds[1].handle.is_finished());
        let n = ds[1].polls.load(Ordering::SeqCst);
        std::thread::sleep(every * 5);
        assert_eq!(
            ds[1].polls.load(Ordering::SeqCst),
            n,
            "a stopped drive polled"
        );
        for d in &ds {
            d.stop.store(true, Ordering::SeqCst);
        }
        wait_until("every drive out", || {
            ds.iter().all(|d| d.handle.is_finished())
        });
        assert_eq!(pool.workers().0, 4, "idle workers stay, 4 at most");
    }

    /// A stopped drive whose read is going on leaves only when the read returns.
    #[test]
    fn a_drive_stopped_in_a_read_leaves_when_the_read_returns() {
        let pool: &'static Pool = Box::leak(Box::new(Pool::new(
            2,
            Duration::from_secs(3600),
            "dp-test-pool",
        )));
        let shared = Arc::new(Shared::new(Status::default()));
        let ds = drives(pool, 1, Duration::from_secs(3600), &shared, true);
        let d = &ds[0];
        wait_until("the read going", || !pool.lock().busy.is_empty());
        d.stop.store(true, Ordering::SeqCst);
        assert!(!d.handle.is_finished(), "left while its read was going on");
        d.hang.store(false, Ordering::SeqCst);
        wait_until("left", || d.handle.is_finished());
    }
}
