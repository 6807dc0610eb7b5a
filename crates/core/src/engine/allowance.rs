//! A run's hard write limit, held where writes are issued: every writer under one
//! [`RunControl`](super::RunControl) (its children too) takes the bytes of a write from
//! one shared [`WriteAllowance`] before it issues the write, and stops when the
//! allowance has no room for it. So the bytes issued never pass the limit, however fast
//! the target: the bound is by construction, not by an observer noticing later.
//!
//! The engine's workers take their room in chunks of [`CREDIT_CHUNK`] (one atomic
//! operation per chunk, none per I/O) and give back what they did not use when they end;
//! a run therefore stops at most `workers x CREDIT_CHUNK` short of its limit, and never
//! past it. Writes made outside this process (an application's or fio's processes) cannot
//! be held back per I/O: they are charged after the fact ([`WriteAllowance::charge`]),
//! and a charge past the limit marks it reached, which stops the run.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// The room an engine worker takes from its run's allowance at a time (or one write's
/// length, when a write is larger).
pub const CREDIT_CHUNK: u64 = 1 << 20;

/// The most bytes the runs under one control may write, and how many they took so far.
#[derive(Debug)]
pub struct WriteAllowance {
    /// `u64::MAX`: no limit.
    limit: AtomicU64,
    /// Bytes taken: issued (or held as a worker's unused room until it ends), and
    /// charged from outside.
    used: AtomicU64,
    /// A write found no room, or a charge went past the limit: the run stops.
    reached: AtomicBool,
}

impl Default for WriteAllowance {
    fn default() -> Self {
        WriteAllowance {
            limit: AtomicU64::new(u64::MAX),
            used: AtomicU64::new(0),
            reached: AtomicBool::new(false),
        }
    }
}

impl WriteAllowance {
    /// The limit, or None when there is none.
    pub fn limit(&self) -> Option<u64> {
        let l = self.limit.load(Ordering::Acquire);
        (l != u64::MAX).then_some(l)
    }

    pub fn set_limit(&self, limit: u64) {
        self.limit.store(limit, Ordering::Release);
    }

    /// Bytes taken so far (what the writers under the control issued, with what they
    /// still hold unused while they run, and what was charged from outside).
    pub fn used(&self) -> u64 {
        self.used.load(Ordering::Acquire)
    }

    /// True once a write found no room, or a charge went past the limit.
    pub fn reached(&self) -> bool {
        self.reached.load(Ordering::Acquire)
    }

    /// Takes room for writes: as much of `want` as is left, and at least `min` (`min <=
    /// want`). 0, and the limit marked reached, when less than `min` is left.
    pub fn reserve(&self, min: u64, want: u64) -> u64 {
        let limit = self.limit.load(Ordering::Acquire);
        let mut cur = self.used.load(Ordering::Acquire);
        loop {
            let left = limit.saturating_sub(cur);
            if left < min || self.reached() {
                self.reached.store(true, Ordering::Release);
                return 0;
            }
            let take = want.max(min).min(left);
            match self.used.compare_exchange_weak(
                cur,
                cur + take,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return take,
                Err(now) => cur = now,
            }
        }
    }

    /// Gives back room taken and not used (a worker that ends holding some).
    pub fn give_back(&self, bytes: u64) {
        self.used.fetch_sub(bytes, Ordering::AcqRel);
    }

    /// Charges bytes already written outside (a program's writes, counted after the
    /// fact); past the limit, marks it reached.
    pub fn charge(&self, bytes: u64) {
        let after = self
            .used
            .fetch_add(bytes, Ordering::AcqRel)
            .saturating_add(bytes);
        if after > self.limit.load(Ordering::Acquire) {
            self.reached.store(true, Ordering::Release);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn room_is_taken_up_to_the_limit_and_never_past_it() {
        let a = WriteAllowance::default();
        assert_eq!(a.limit(), None);
        a.set_limit(10);
        assert_eq!(a.reserve(3, 4), 4);
        assert_eq!(
            a.reserve(3, 8),
            6,
            "what is left, when it holds the minimum"
        );
        assert_eq!(a.used(), 10);
        assert!(!a.reached());
        assert_eq!(a.reserve(1, 1), 0, "no room");
        assert!(a.reached());
        // Once reached, room given back does not start writes again.
        a.give_back(5);
        assert_eq!(a.reserve(1, 1), 0);
        assert_eq!(a.used(), 5);
    }

    #[test]
    fn a_charge_past_the_limit_marks_it_reached() {
        let a = WriteAllowance::default();
        a.charge(u64::MAX / 2);
        assert!(!a.reached(), "no limit");
        let a = WriteAllowance::default();
        a.set_limit(100);
        a.charge(100);
        assert!(!a.reached(), "at the limit is not past it");
        a.charge(1);
        assert!(a.reached());
        assert_eq!(a.used(), 101);
    }

    #[test]
    fn concurrent_takers_together_never_pass_the_limit() {
        let a = std::sync::Arc::new(WriteAllowance::default());
        a.set_limit(1_000_003);
        let got: u64 = std::thread::scope(|s| {
            let hs: Vec<_> = (0..4)
                .map(|_| {
                    let a = a.clone();
                    s.spawn(move || {
                        let mut mine = 0;
                        loop {
                            let g = a.reserve(4096, 65536);
                            if g == 0 {
                                return mine;
                            }
                            mine += g;
                        }
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).sum()
        });
        assert_eq!(got, a.used());
        assert!(got <= 1_000_003 && got > 1_000_003 - 4096, "{got}");
    }
}
