//! The daemon's persistent state (schedule bookkeeping, health samples, the run index,
//! self-written bytes) behind one lock, saved atomically, and the wear budget.
//!
//! Writers change the state under the lock and mark it dirty; [`Store::save`] writes the
//! whole file atomically (temp file, fsync, rename). Decisions that must survive a kill
//! (a run is starting) save at once; the rest is saved by the scheduler's tick at most
//! every few seconds. A save that fails (disk full, read-only) leaves the last saved file
//! as it was (the new content goes to a temporary file first), is retried at the next
//! tick, and the daemon goes on. The store logs a failure once per episode (the first
//! failure, then the first success after it, with the count of failed attempts), so a
//! full disk does not flood the log; [`Store::save_failures`] counts every failed save.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use crate::config::{Drive, WearBudget};
use crate::schedule::{self, State, StateError};

pub const STATE_FILE: &str = "state.json";

#[derive(Debug)]
pub struct Store {
    path: PathBuf,
    state: Mutex<State>,
    dirty: AtomicBool,
    /// The last save failed (an episode of failures is going on).
    failing: AtomicBool,
    /// Failed saves since the process started.
    failures: AtomicU64,
    /// Failed saves in the current episode.
    episode_failures: AtomicU64,
}

/// Outcome of opening the state: the store, and a warning when the file could not be
/// used (it is moved aside and the daemon starts with an empty state).
pub struct Opened {
    pub store: Store,
    pub warning: Option<String>,
}

impl Store {
    /// Loads `STATE_FILE` in `dir`. A corrupt or newer file is moved aside (to
    /// `state.json.bad-UNIX`) so the daemon can still run, with a warning saying so; a
    /// file that cannot be read at all is an error.
    pub fn open(dir: &Path, now: i64) -> Result<Opened, StateError> {
        let path = dir.join(STATE_FILE);
        // What a save cut short (a kill, a full disk) may have left.
        let tmp = schedule::state::temp_path(&path);
        if std::fs::symlink_metadata(&tmp).is_ok_and(|m| m.is_file()) {
            match std::fs::remove_file(&tmp) {
                Ok(()) => {
                    tracing::info!(path = %tmp.display(), "removed a temporary file an interrupted save left")
                }
                Err(e) => {
                    tracing::warn!(path = %tmp.display(), error = %e, "cannot remove a temporary file an interrupted save left")
                }
            }
        }
        match schedule::load(&path) {
            Ok(state) => Ok(Opened {
                store: Store::new(path, state),
                warning: None,
            }),
            Err(e @ (StateError::Corrupt { .. } | StateError::Version { .. })) => {
                let aside = dir.join(format!("{STATE_FILE}.bad-{now}"));
                let moved = std::fs::rename(&path, &aside);
                let warning = match moved {
                    Ok(()) => format!(
                        "{e}; moved it to {} and started with an empty state",
                        aside.display()
                    ),
                    Err(m) => {
                        format!("{e}; could not move it aside ({m}); started with an empty state")
                    }
                };
                Ok(Opened {
                    store: Store::new(path, State::default()),
                    warning: Some(warning),
                })
            }
            Err(e) => Err(e),
        }
    }

    pub fn new(path: PathBuf, state: State) -> Self {
        Store {
            path,
            state: Mutex::new(state),
            dirty: AtomicBool::new(false),
            failing: AtomicBool::new(false),
            failures: AtomicU64::new(0),
            episode_failures: AtomicU64::new(0),
        }
    }

    /// Failed saves since the process started.
    pub fn save_failures(&self) -> u64 {
        self.failures.load(Ordering::Acquire)
    }

    /// The last save failed: what is on disk is older than what the daemon knows.
    pub fn save_failing(&self) -> bool {
        self.failing.load(Ordering::Acquire)
    }

    /// The state, locked (a poisoned lock is taken as it is: plain data).
    pub fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Changes the state and marks it for the next save.
    pub fn update<R>(&self, f: impl FnOnce(&mut State) -> R) -> R {
        let r = f(&mut self.lock());
        self.dirty.store(true, Ordering::Release);
        r
    }

    /// Saves now (under the lock, so saves never interleave).
    /// A failure is logged here, once per episode; callers need not log it again.
    pub fn save(&self) -> Result<(), StateError> {
        let state = self.lock();
        self.dirty.store(false, Ordering::Release);
        let r = schedule::save_atomic(&self.path, &state);
        match &r {
            Err(e) => {
                self.dirty.store(true, Ordering::Release);
                self.failures.fetch_add(1, Ordering::AcqRel);
                self.episode_failures.fetch_add(1, Ordering::AcqRel);
                if !self.failing.swap(true, Ordering::AcqRel) {
                    tracing::error!(
                        path = %self.path.display(),
                        "cannot save the state: {e}; the last saved file is kept as it was, \
                         probes and metrics go on, scheduled runs do not start until it can be \
                         saved, and saving is retried every few seconds: free space in or make \
                         the state directory writable"
                    );
                }
            }
            Ok(()) => {
                if self.failing.swap(false, Ordering::AcqRel) {
                    let n = self.episode_failures.swap(0, Ordering::AcqRel);
                    tracing::warn!(
                        path = %self.path.display(),
                        failed_attempts = n,
                        "the state is saved again"
                    );
                }
            }
        }
        // A failed save leaves its temporary file (possibly short) behind: remove it (still
        // under the lock), so it does not hold the space that the next save needs.
        if r.is_err() {
            let _ = std::fs::remove_file(schedule::state::temp_path(&self.path));
        }
        drop(state);
        r
    }

    /// Saves when something changed since the last save.
    pub fn save_if_dirty(&self) -> Result<bool, StateError> {
        if self.dirty.load(Ordering::Acquire) {
            self.save().map(|()| true)
        } else {
            Ok(false)
        }
    }
}

/// The bytes the canaries may write to `drive` per UTC day: the configured share of its
/// rated drive writes per day (DWPD x capacity), or the fixed allowance for a drive whose
/// rating or capacity is unknown. Scheduled runs have their own allowance
/// ([`run_budget_bytes`]).
pub fn budget_bytes_per_day(drive: &Drive, capacity: Option<u64>, wb: &WearBudget) -> f64 {
    match (drive.rating.rated_dwpd(capacity), capacity) {
        (Some(dwpd), Some(cap)) if dwpd > 0.0 && cap > 0 => {
            dwpd * cap as f64 * wb.share_of_rated_dwpd
        }
        _ => wb.unrated_bytes_per_day as f64,
    }
}

/// The bytes scheduled runs may write to `drive` over the rolling period
/// (`wb.period_days`): the configured share of its rated writes over the period (DWPD x
/// capacity x days), or the fixed allowance per period for a drive whose rating or
/// capacity is unknown.
pub fn run_budget_bytes(drive: &Drive, capacity: Option<u64>, wb: &WearBudget) -> f64 {
    match (drive.rating.rated_dwpd(capacity), capacity) {
        (Some(dwpd), Some(cap)) if dwpd > 0.0 && cap > 0 => {
            dwpd * cap as f64 * wb.period_days as f64 * wb.scheduled_share_of_rated_writes
        }
        _ => wb.scheduled_unrated_bytes as f64,
    }
}

/// Whether a scheduled run whose writes are bounded by `bound` bytes may start, given the
/// allowance for scheduled runs over the period (`allowance`: None is unlimited) and what
/// scheduled runs wrote in the period so far (`used`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Admission {
    Admit,
    /// Skipped up front: the bound does not fit what is left.
    Skip {
        remaining: f64,
    },
}

pub fn admit(bound: u64, allowance: Option<f64>, used: u128) -> Admission {
    let Some(allowance) = allowance else {
        return Admission::Admit;
    };
    let remaining = (allowance - used as f64).max(0.0);
    if (bound as f64) <= remaining {
        Admission::Admit
    } else {
        Admission::Skip { remaining }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::health::endurance::Rating;

    fn drive(rating: Rating) -> Drive {
        Drive {
            name: "d".into(),
            identity: None,
            path: None,
            destructive: false,
            file_target: None,
            rating,
            rated: Default::default(),
            smartctl_type: None,
        }
    }

    #[test]
    fn budget_is_a_share_of_rated_daily_writes() {
        let wb = WearBudget {
            share_of_rated_dwpd: 0.01,
            unrated_bytes_per_day: 5 << 30,
            period_days: 30,
            scheduled_share_of_rated_writes: 0.1,
            scheduled_unrated_bytes: 7 << 30,
        };
        let d = drive(Rating {
            dwpd: Some(1.0),
            ..Default::default()
        });
        // 1 DWPD of 1 TB: 1% is 10 GB a day.
        assert_eq!(budget_bytes_per_day(&d, Some(1_000_000_000_000), &wb), 1e10);
        // TBW with warranty gives the DWPD.
        let d = drive(Rating {
            tbw_bytes: Some(365e12 * 5.0),
            warranty_years: Some(5.0),
            ..Default::default()
        });
        assert!((budget_bytes_per_day(&d, Some(1_000_000_000_000), &wb) - 1e10).abs() < 1.0);
        // Unknown capacity or rating: the fixed allowance.
        assert_eq!(budget_bytes_per_day(&d, None, &wb), (5u64 << 30) as f64);
        assert_eq!(
            budget_bytes_per_day(&drive(Rating::default()), Some(1 << 40), &wb),
            (5u64 << 30) as f64
        );
        // Scheduled runs: 10% of 30 days of 1 DWPD of 1 TB is 3 TB; unrated, the fixed
        // allowance per period.
        assert!((run_budget_bytes(&d, Some(1_000_000_000_000), &wb) - 3e12).abs() < 1.0);
        assert_eq!(run_budget_bytes(&d, None, &wb), (7u64 << 30) as f64);
    }

    #[test]
    fn a_run_is_admitted_only_when_its_bound_fits_what_is_left() {
        assert_eq!(admit(10, Some(100.0), 90), Admission::Admit);
        assert_eq!(
            admit(11, Some(100.0), 90),
            Admission::Skip { remaining: 10.0 }
        );
        // Over the allowance already: nothing is left, not a negative figure.
        assert_eq!(
            admit(1, Some(100.0), 150),
            Admission::Skip { remaining: 0.0 }
        );
        assert_eq!(admit(0, Some(100.0), 150), Admission::Admit);
        // Unlimited (a burn-in schedule): always.
        assert_eq!(admit(u64::MAX, None, u128::MAX), Admission::Admit);
    }

    #[test]
    fn a_failed_save_keeps_the_file_counts_and_recovers() {
        let dir = tempfile::tempdir().unwrap();
        let sub = dir.path().join("s");
        std::fs::create_dir(&sub).unwrap();
        let o = Store::open(&sub, 1).unwrap();
        o.store.update(|s| s.add_self_written("d", 0, 5));
        o.store.save().unwrap();
        let saved = std::fs::read(sub.join(STATE_FILE)).unwrap();
        // The state file's place is taken by a directory entry we cannot replace: a
        // directory named like the temporary file makes every save fail, even as root.
        std::fs::create_dir(schedule::state::temp_path(&sub.join(STATE_FILE))).unwrap();
        o.store.update(|s| s.add_self_written("d", 0, 7));
        for _ in 0..3 {
            assert!(o.store.save_if_dirty().is_err());
        }
        assert!(o.store.save_failing());
        assert_eq!(o.store.save_failures(), 3);
        assert_eq!(std::fs::read(sub.join(STATE_FILE)).unwrap(), saved);
        std::fs::remove_dir(schedule::state::temp_path(&sub.join(STATE_FILE))).unwrap();
        assert!(o.store.save_if_dirty().unwrap());
        assert!(!o.store.save_failing());
        assert_eq!(o.store.save_failures(), 3);
        let again = Store::open(&sub, 2).unwrap();
        assert_eq!(again.store.lock().self_written_lifetime("d"), 12);
    }

    #[test]
    fn a_corrupt_state_is_moved_aside_with_a_warning() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(STATE_FILE), b"{ not json").unwrap();
        let o = Store::open(dir.path(), 1234).unwrap();
        let w = o.warning.unwrap();
        assert!(w.contains("corrupt") && w.contains("bad-1234"), "{w}");
        assert!(dir.path().join("state.json.bad-1234").exists());
        o.store.update(|s| s.add_self_written("d", 0, 5));
        assert!(o.store.save_if_dirty().unwrap());
        assert!(!o.store.save_if_dirty().unwrap());
        let again = Store::open(dir.path(), 1235).unwrap();
        assert!(again.warning.is_none());
        assert_eq!(again.store.lock().self_written_lifetime("d"), 5);
    }
}
