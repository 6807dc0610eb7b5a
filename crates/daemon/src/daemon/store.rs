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

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::config::{Drive, WearBudget};
use crate::schedule::{self, State, StateError};
use crate::statedir::{Place, StateDir};

pub const STATE_FILE: &str = "state.json";
/// The second copy of [`STATE_FILE`], written after it at every save: what the daemon
/// starts from when the first is damaged (truncated, emptied, not JSON, of a newer
/// version, a FIFO, a link) or missing.
pub const BACKUP_FILE: &str = "state.backup.json";

#[derive(Debug)]
pub struct Store {
    dir: Arc<StateDir>,
    state: Mutex<State>,
    dirty: AtomicBool,
    /// The last save failed (an episode of failures is going on).
    failing: AtomicBool,
    /// Failed saves since the process started.
    failures: AtomicU64,
    /// Failed saves in the current episode.
    episode_failures: AtomicU64,
    /// Why the ledger is held: neither copy of the state could be read at start, so what
    /// driveprobe wrote to each drive is unknown. Nothing is saved (the files stay for the
    /// operator), and nothing that writes to a drive starts.
    held: Option<String>,
}

/// Outcome of opening the state: the store, and a warning when a copy could not be used.
pub struct Opened {
    pub store: Store,
    pub warning: Option<String>,
}

/// What one copy of the state file gave.
enum Copy {
    Missing,
    Good(State),
    Bad(StateError),
}

fn read_copy(dir: &StateDir, name: &str) -> Copy {
    let path = dir.path_of(Place::Top, name);
    match dir.read(Place::Top, name, crate::statedir::MAX_STATE_BYTES) {
        Ok(None) => Copy::Missing,
        Ok(Some(bytes)) => match schedule::decode(&path, &bytes) {
            Ok(s) => Copy::Good(s),
            Err(e) => Copy::Bad(e),
        },
        Err(source) => Copy::Bad(StateError::Unreadable { path, source }),
    }
}

impl Store {
    /// Loads the state from `dir`: [`STATE_FILE`], or its copy [`BACKUP_FILE`] when the
    /// first is damaged or missing (the damaged file is moved aside to
    /// `state.json.bad-UNIX`, and a warning says so). When both are damaged (or the only
    /// one there is), the daemon cannot know what it wrote to each drive: the store is
    /// *held* (see [`Store::held`]) and both files are left as they are.
    pub fn open(dir: Arc<StateDir>, now: i64) -> Opened {
        // What a save cut short (a kill, a full disk) may have left.
        for name in [STATE_FILE, BACKUP_FILE] {
            let tmp = format!(".{name}.tmp");
            match dir.remove(Place::Top, &tmp) {
                Ok(true) => {
                    tracing::info!(path = %dir.path_of(Place::Top, &tmp).display(), "removed a temporary file an interrupted save left")
                }
                Ok(false) => {}
                // A read-only filesystem refuses an unlink before it looks: nothing to do.
                Err(e) if e.raw_os_error() == Some(libc::EROFS) => {}
                Err(e) => {
                    tracing::warn!(path = %dir.path_of(Place::Top, &tmp).display(), error = %e, "cannot remove a temporary file an interrupted save left")
                }
            }
        }
        let (first, second) = (read_copy(&dir, STATE_FILE), read_copy(&dir, BACKUP_FILE));
        // Unless both copies were read, write both at the first save (an upgrade from a
        // daemon that kept one copy gets its second at once).
        let whole = matches!((&first, &second), (Copy::Good(a), Copy::Good(b)) if a == b);
        let backup_damaged = match (&first, &second) {
            (Copy::Good(_), Copy::Bad(e)) => Some(format!(
                "{e}; it is written again from {}",
                dir.path_of(Place::Top, STATE_FILE).display()
            )),
            _ => None,
        };
        let (state, warning, held) = match (first, second) {
            (Copy::Good(s), _) => (s, backup_damaged, None),
            (Copy::Missing, Copy::Missing) => {
                // A first start, or an operator who removed both to start anew; but if a
                // daemon kept documents here, say that the ledger starts from zero.
                let docs = dir.documents().len();
                let warning = (docs > 0).then(|| {
                    format!(
                        "state file {} and its copy are missing although {docs} result documents are in runs/: \
                         started a new, empty state (the drives' wear ledger starts from zero)",
                        dir.path_of(Place::Top, STATE_FILE).display()
                    )
                });
                (State::default(), warning, None)
            }
            (Copy::Missing, Copy::Good(s)) => (
                s,
                Some(format!(
                    "state file {} is missing; started from its copy {} (the wear ledger and the schedules as last saved)",
                    dir.path_of(Place::Top, STATE_FILE).display(),
                    dir.path_of(Place::Top, BACKUP_FILE).display()
                )),
                None,
            ),
            (Copy::Bad(e), Copy::Good(s)) => {
                let aside = format!("{STATE_FILE}.bad-{now}");
                let moved = match dir.rename_aside(Place::Top, STATE_FILE, &aside) {
                    Ok(name) => format!("moved it to {}", dir.path_of(Place::Top, &name).display()),
                    Err(m) => format!("could not move it aside ({m})"),
                };
                (
                    s,
                    Some(format!(
                        "{e}; {moved} and started from its copy {} (the wear ledger and the schedules as last saved)",
                        dir.path_of(Place::Top, BACKUP_FILE).display()
                    )),
                    None,
                )
            }
            (first, second) => {
                let why = |c: Copy, name: &str| match c {
                    Copy::Bad(e) => e.to_string(),
                    _ => format!("{} is missing", dir.path_of(Place::Top, name).display()),
                };
                let held = format!(
                    "the wear ledger cannot be read ({}; {}), so what driveprobe wrote to each drive is unknown: \
                     scheduled runs and write canaries are held and nothing is saved; both files are left as they are. \
                     Repair or restore one of them, or move both aside to start a new ledger (the drives' wear budgets \
                     then start from zero), and restart driveprobe",
                    why(first, STATE_FILE),
                    why(second, BACKUP_FILE)
                );
                (State::default(), None, Some(held))
            }
        };
        let mut store = Store::new(dir, state);
        store.dirty = AtomicBool::new(!whole && held.is_none());
        store.held = held;
        Opened { store, warning }
    }

    pub fn new(dir: Arc<StateDir>, state: State) -> Self {
        Store {
            dir,
            state: Mutex::new(state),
            dirty: AtomicBool::new(false),
            failing: AtomicBool::new(false),
            failures: AtomicU64::new(0),
            episode_failures: AtomicU64::new(0),
            held: None,
        }
    }

    /// The state directory.
    pub fn dir(&self) -> &Arc<StateDir> {
        &self.dir
    }

    /// Why the ledger is held, when it is: neither copy of the state could be read at
    /// start. Nothing that writes to a drive may start while it is.
    pub fn held(&self) -> Option<&str> {
        self.held.as_deref()
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

    /// Writes both copies: the state file, then its backup.
    fn write(&self, state: &State) -> Result<(), StateError> {
        let bytes = schedule::encode(state);
        for name in [STATE_FILE, BACKUP_FILE] {
            self.dir
                .write_atomic(Place::Top, name, &bytes)
                .map_err(|source| StateError::Io {
                    path: self.dir.path_of(Place::Top, name),
                    source,
                })?;
        }
        Ok(())
    }

    /// Saves now (under the lock, so saves never interleave).
    /// A failure is logged here, once per episode; callers need not log it again.
    pub fn save(&self) -> Result<(), StateError> {
        if let Some(why) = &self.held {
            return Err(StateError::Held(why.clone()));
        }
        let state = self.lock();
        self.dirty.store(false, Ordering::Release);
        let r = self.write(&state);
        match &r {
            Err(e) => {
                self.dirty.store(true, Ordering::Release);
                self.failures.fetch_add(1, Ordering::AcqRel);
                self.episode_failures.fetch_add(1, Ordering::AcqRel);
                if !self.failing.swap(true, Ordering::AcqRel) {
                    tracing::error!(
                        path = %self.dir.path().display(),
                        "cannot save the state: {e}; the last saved copy is kept as it was, \
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
                        path = %self.dir.path().display(),
                        failed_attempts = n,
                        "the state is saved again"
                    );
                }
            }
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

    fn open(dir: &std::path::Path, now: i64) -> Opened {
        Store::open(Arc::new(StateDir::open(dir).unwrap()), now)
    }

    #[test]
    fn a_failed_save_keeps_the_file_counts_and_recovers() {
        let dir = tempfile::tempdir().unwrap();
        let sub = dir.path().join("s");
        std::fs::create_dir(&sub).unwrap();
        let o = open(&sub, 1);
        o.store.update(|s| s.add_self_written("d", 0, 5));
        o.store.save().unwrap();
        let saved = std::fs::read(sub.join(STATE_FILE)).unwrap();
        assert_eq!(std::fs::read(sub.join(BACKUP_FILE)).unwrap(), saved);
        // The state file's place is taken by a directory entry we cannot replace: a
        // directory named like the temporary file makes every save fail, even as root.
        let tmp = schedule::state::temp_path(&sub.join(STATE_FILE));
        std::fs::create_dir(&tmp).unwrap();
        o.store.update(|s| s.add_self_written("d", 0, 7));
        for _ in 0..3 {
            assert!(o.store.save_if_dirty().is_err());
        }
        assert!(o.store.save_failing());
        assert_eq!(o.store.save_failures(), 3);
        assert_eq!(std::fs::read(sub.join(STATE_FILE)).unwrap(), saved);
        std::fs::remove_dir(&tmp).unwrap();
        assert!(o.store.save_if_dirty().unwrap());
        assert!(!o.store.save_failing());
        assert_eq!(o.store.save_failures(), 3);
        drop(o);
        let again = open(&sub, 2);
        assert_eq!(again.store.lock().self_written_lifetime("d"), 12);
    }

    /// The ways one file is damaged that the adversarial review used (truncated, emptied,
    /// `{}`, a newer version, a FIFO, a link to another file), and a missing file: the
    /// ledger comes back whole from the other copy, with a warning.
    #[test]
    fn damage_to_one_copy_keeps_the_wear_ledger() {
        type Damage = fn(&std::path::Path);
        let damages: [(&str, Damage); 7] = [
            ("truncated", |p| std::fs::write(p, b"").unwrap()),
            ("cut short", |p| {
                let b = std::fs::read(p).unwrap();
                std::fs::write(p, &b[..b.len() / 2]).unwrap()
            }),
            ("{}", |p| std::fs::write(p, b"{}").unwrap()),
            ("newer", |p| {
                std::fs::write(p, b"{\"version\": 99}").unwrap()
            }),
            ("fifo", |p| {
                std::fs::remove_file(p).unwrap();
                rustix::fs::mkfifoat(rustix::fs::CWD, p, rustix::fs::Mode::from_raw_mode(0o600))
                    .unwrap()
            }),
            ("link", |p| {
                std::fs::remove_file(p).unwrap();
                std::os::unix::fs::symlink("/etc/hostname", p).unwrap()
            }),
            ("missing", |p| std::fs::remove_file(p).unwrap()),
        ];
        for (what, damage) in damages {
            for name in [STATE_FILE, BACKUP_FILE] {
                let dir = tempfile::tempdir().unwrap();
                let o = open(dir.path(), 1);
                o.store.update(|s| s.add_run_written("d", 100, 40 << 20));
                o.store.save().unwrap();
                drop(o);
                damage(&dir.path().join(name));
                let o = open(dir.path(), 7);
                assert!(o.store.held().is_none(), "{what} {name}");
                assert_eq!(
                    o.store.lock().run_written_in_window("d", 100, 30),
                    40 << 20,
                    "{what} {name}: the ledger was lost"
                );
                if name == STATE_FILE {
                    let w = o.warning.unwrap_or_default();
                    assert!(w.contains(BACKUP_FILE), "{what}: {w}");
                }
                // The next save makes both copies whole again.
                o.store.update(|s| s.add_run_written("d", 100, 1));
                o.store.save().unwrap();
                for n in [STATE_FILE, BACKUP_FILE] {
                    let st = schedule::load(&dir.path().join(n)).unwrap();
                    assert_eq!(st.run_written_in_window("d", 100, 30), (40 << 20) + 1);
                }
            }
        }
    }

    #[test]
    fn with_both_copies_damaged_the_ledger_is_held_and_the_files_kept() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(STATE_FILE), b"{ not json").unwrap();
        let o = open(dir.path(), 1234);
        let why = o.store.held().unwrap().to_string();
        assert!(
            why.contains("corrupt") && why.contains("held") && why.contains("move both aside"),
            "{why}"
        );
        o.store.update(|s| s.add_self_written("d", 0, 5));
        assert!(matches!(o.store.save(), Err(StateError::Held(_))));
        assert_eq!(
            std::fs::read(dir.path().join(STATE_FILE)).unwrap(),
            b"{ not json"
        );
        assert!(!dir.path().join(BACKUP_FILE).exists());
        drop(o);
        std::fs::write(dir.path().join(BACKUP_FILE), b"{\"version\": 2}").unwrap();
        assert!(open(dir.path(), 1235).store.held().is_some());
        // The operator's decision: both moved aside; a new ledger.
        std::fs::remove_file(dir.path().join(STATE_FILE)).unwrap();
        std::fs::remove_file(dir.path().join(BACKUP_FILE)).unwrap();
        let o = open(dir.path(), 1236);
        assert!(o.store.held().is_none() && o.warning.is_none());
        o.store.update(|s| s.add_self_written("d", 0, 5));
        assert!(o.store.save_if_dirty().unwrap());
    }
}
