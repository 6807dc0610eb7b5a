//! The daemon's persistent state: schedule bookkeeping, health samples, the run results
//! index and the bytes driveprobe wrote to each drive per day, as one JSON file.
//!
//! Saving is atomic: the JSON goes to `.<name>.tmp` in the same directory, is fsynced,
//! renamed over the file, and the directory is fsynced, never through a link
//! ([`crate::statedir`]). A kill -9 (or power loss) at any moment leaves either the old or
//! the new complete file, never a mix. The daemon keeps a second copy of the file against
//! damage to one ([`crate::daemon::store`]). One writer at a time (the daemon, by the
//! state directory's lock); readers may load concurrently. A file without a `version` is
//! damaged, not empty.
//!
//! Size is bounded: at most [`MAX_SAMPLES_PER_DRIVE`] health samples per drive and
//! [`MAX_RUNS`] runs in the index (oldest dropped), [`MAX_DAYS_PER_DRIVE`] days of
//! self-written bytes per drive.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use thiserror::Error;

use super::plan::Bookkeeping;
use crate::calendar::DAY;
use crate::health::endurance::Sample;

pub const STATE_VERSION: u32 = 1;
/// Health samples kept per drive: hourly samples for about three months, or six-hourly
/// ones for over a year.
pub const MAX_SAMPLES_PER_DRIVE: usize = 2048;
pub const MAX_RUNS: usize = 1000;
pub const MAX_DAYS_PER_DRIVE: usize = 400;

#[derive(Debug, Error)]
pub enum StateError {
    #[error("state file {path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("state file {path} is corrupt: {source}")]
    Corrupt {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("state file {path} has version {found}; this driveprobe reads up to {STATE_VERSION}")]
    Version { path: PathBuf, found: u32 },
    #[error("state file {path} cannot be read: {source}")]
    Unreadable {
        path: PathBuf,
        source: crate::statedir::ReadError,
    },
    /// The wear ledger could not be read at start: nothing is saved (the files are left
    /// for the operator) until the daemon starts on a readable ledger.
    #[error("{0}")]
    Held(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    Running,
    Passed,
    Failed,
    /// Stopped at its maximum duration.
    TimedOut,
    /// Cut short by a daemon restart.
    Interrupted,
    /// Stopped midway with no error: by a signal (the operator, the daemon's stop) or at
    /// its hard safety limit; the record's `reason` says which.
    Stopped,
    /// Not started: skipped up front (its write bound did not fit the wear budget left
    /// for scheduled runs); the record's `reason` has the figures.
    Skipped,
    /// Ended, but its result document could not be written yet (the state directory full
    /// or read-only): the daemon keeps it in memory and retries; the run gets its real
    /// status when the document is written. A daemon that stops before that loses it (the
    /// next start marks the run interrupted).
    Pending,
}

/// One entry of the run results index.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    pub id: String,
    pub suite: String,
    pub drive: String,
    /// The schedule that started it, if any.
    #[serde(default)]
    pub schedule: Option<String>,
    pub started: i64,
    pub ended: Option<i64>,
    pub status: RunStatus,
    /// The result document, when one was written.
    pub result_path: Option<PathBuf>,
    /// Why it did not pass or was skipped (`protocol::bound::StopReason::describe`, or
    /// the skip's figures); None for a run that passed or is going on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The upper bound of its writes it was admitted (or skipped) with, in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write_bound_bytes: Option<u64>,
    /// Why it was stopped midway, typed (`reason` is its text), when it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop: Option<crate::protocol::bound::StopReason>,
    /// The bytes it wrote (the engine's count, with application and fio writes), once ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub written_bytes: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct State {
    pub version: u32,
    /// Per schedule name.
    pub schedules: BTreeMap<String, Bookkeeping>,
    /// Per drive, oldest first.
    pub health: BTreeMap<String, Vec<Sample>>,
    /// Oldest first.
    pub runs: Vec<RunRecord>,
    /// Per drive, per UTC day (`YYYY-MM-DD`), bytes driveprobe wrote.
    pub self_written: BTreeMap<String, BTreeMap<String, u128>>,
    /// Per drive, every byte driveprobe wrote since the state began (the days above are
    /// trimmed; this is not, so the exported counter never goes down).
    pub self_written_lifetime: BTreeMap<String, u128>,
    /// Per drive, per UTC day, the part of `self_written` that scheduled runs wrote (the
    /// rest is the canaries'). A state file from before this split has none: its days'
    /// bytes count as the canaries' (they were counted against one daily budget then),
    /// and the scheduled runs' rolling window starts empty.
    pub run_written: BTreeMap<String, BTreeMap<String, u128>>,
}

impl Default for State {
    fn default() -> Self {
        State {
            version: STATE_VERSION,
            schedules: BTreeMap::new(),
            health: BTreeMap::new(),
            runs: Vec::new(),
            self_written: BTreeMap::new(),
            self_written_lifetime: BTreeMap::new(),
            run_written: BTreeMap::new(),
        }
    }
}

/// `YYYY-MM-DD` of the UTC day containing `t`.
pub fn utc_day(t: i64) -> String {
    crate::calendar::ymd(t)
}

impl State {
    /// The bookkeeping of a schedule, created as first seen at `now` when new.
    pub fn schedule_mut(&mut self, name: &str, now: i64) -> &mut Bookkeeping {
        self.schedules
            .entry(name.to_string())
            .or_insert_with(|| Bookkeeping::new(now))
    }

    /// Appends a health sample, dropping the oldest beyond the bound.
    pub fn push_sample(&mut self, drive: &str, s: Sample) {
        let v = self.health.entry(drive.to_string()).or_default();
        v.push(s);
        trim_front(v, MAX_SAMPLES_PER_DRIVE);
    }

    /// Appends a run, dropping the oldest beyond the bound.
    pub fn push_run(&mut self, r: RunRecord) {
        self.runs.push(r);
        trim_front(&mut self.runs, MAX_RUNS);
    }

    pub fn run_mut(&mut self, id: &str) -> Option<&mut RunRecord> {
        self.runs.iter_mut().rev().find(|r| r.id == id)
    }

    /// Adds bytes written to `drive` on the UTC day of `t`.
    pub fn add_self_written(&mut self, drive: &str, t: i64, bytes: u128) {
        *self
            .self_written_lifetime
            .entry(drive.to_string())
            .or_default() += bytes;
        let days = self.self_written.entry(drive.to_string()).or_default();
        *days.entry(utc_day(t)).or_default() += bytes;
        while days.len() > MAX_DAYS_PER_DRIVE {
            days.pop_first();
        }
    }

    /// Adds bytes a scheduled run wrote to `drive` on the UTC day of `t` (counted in
    /// `self_written` too).
    pub fn add_run_written(&mut self, drive: &str, t: i64, bytes: u128) {
        self.add_self_written(drive, t, bytes);
        let days = self.run_written.entry(drive.to_string()).or_default();
        *days.entry(utc_day(t)).or_default() += bytes;
        while days.len() > MAX_DAYS_PER_DRIVE {
            days.pop_first();
        }
    }

    /// Bytes scheduled runs wrote to `drive` over the rolling window of `days` UTC days
    /// that ends with the day of `t` (today and the `days - 1` before it). Days after
    /// today count too: they were written while the wall clock was ahead, and bytes
    /// written are written whatever the clock said ([`State::redate_future_days`] brings
    /// them back to today).
    pub fn run_written_in_window(&self, drive: &str, t: i64, days: u32) -> u128 {
        let Some(kept) = self.run_written.get(drive) else {
            return 0;
        };
        let first = utc_day(t - (days.max(1) as i64 - 1) * DAY);
        kept.range(first..).map(|(_, b)| *b).sum()
    }

    /// After the wall clock came back from ahead: bytes recorded on days after the UTC
    /// day of `t` (scheduled runs' and all of driveprobe's) move to that day, where they
    /// were really written, so they count in today's budgets and leave the rolling window
    /// when today does, not a year later. Returns the bytes moved (of `self_written`).
    pub fn redate_future_days(&mut self, t: i64) -> u128 {
        let today = utc_day(t);
        let mut moved = 0;
        for (i, per_drive) in [&mut self.self_written, &mut self.run_written]
            .into_iter()
            .enumerate()
        {
            for days in per_drive.values_mut() {
                if days.last_key_value().is_none_or(|(last, _)| *last <= today) {
                    continue;
                }
                let mut later = days.split_off(&today);
                // `split_off` keeps today with the later days: put it back.
                let kept = later.remove(&today).unwrap_or(0);
                let bytes: u128 = later.values().sum();
                days.insert(today.clone(), kept + bytes);
                if i == 0 {
                    moved += bytes;
                }
            }
        }
        moved
    }

    /// Bytes the canaries wrote to `drive` on the UTC day of `t`: what driveprobe wrote
    /// that day less the scheduled runs' part.
    pub fn canary_written_on(&self, drive: &str, t: i64) -> u128 {
        let runs = self
            .run_written
            .get(drive)
            .and_then(|d| d.get(&utc_day(t)))
            .copied()
            .unwrap_or(0);
        self.self_written_on(drive, t).saturating_sub(runs)
    }

    /// All bytes driveprobe wrote to `drive` over the days kept.
    pub fn self_written_total(&self, drive: &str) -> u128 {
        self.self_written.get(drive).map_or(0, |d| d.values().sum())
    }

    /// Every byte driveprobe wrote to `drive` (never decreases; a state file from before
    /// this count existed starts it from the days kept).
    pub fn self_written_lifetime(&self, drive: &str) -> u128 {
        let days = self.self_written_total(drive);
        self.self_written_lifetime
            .get(drive)
            .copied()
            .unwrap_or(0)
            .max(days)
    }

    /// Bytes driveprobe wrote to `drive` on the UTC day of `t`.
    pub fn self_written_on(&self, drive: &str, t: i64) -> u128 {
        self.self_written
            .get(drive)
            .and_then(|d| d.get(&utc_day(t)))
            .copied()
            .unwrap_or(0)
    }

    /// Applies the size bounds (after loading a file written with larger ones).
    pub fn trim(&mut self) {
        for v in self.health.values_mut() {
            trim_front(v, MAX_SAMPLES_PER_DRIVE);
        }
        trim_front(&mut self.runs, MAX_RUNS);
        for days in self
            .self_written
            .values_mut()
            .chain(self.run_written.values_mut())
        {
            while days.len() > MAX_DAYS_PER_DRIVE {
                days.pop_first();
            }
        }
    }
}

fn trim_front<T>(v: &mut Vec<T>, max: usize) {
    if v.len() > max {
        v.drain(..v.len() - max);
    }
}

/// The temporary file [`save_atomic`] writes before the rename.
pub fn temp_path(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "state".into());
    path.with_file_name(format!(".{name}.tmp"))
}

/// The state as the file holds it (compact JSON and a newline).
pub fn encode(state: &State) -> Vec<u8> {
    let mut v = serde_json::to_vec(state).expect("the state is plain data: it always serializes");
    v.push(b'\n');
    v
}

/// The version every state file names: a file without one (`{}`, or something else's
/// JSON) is not a state that lost its fields but a damaged file.
#[derive(Deserialize)]
struct Header {
    version: u32,
}

/// The state a file's bytes hold; `path` names it in errors.
pub fn decode(path: &Path, bytes: &[u8]) -> Result<State, StateError> {
    let corrupt = |source| StateError::Corrupt {
        path: path.to_path_buf(),
        source,
    };
    let header: Header = serde_json::from_slice(bytes).map_err(corrupt)?;
    if header.version > STATE_VERSION {
        return Err(StateError::Version {
            path: path.to_path_buf(),
            found: header.version,
        });
    }
    let mut state: State = serde_json::from_slice(bytes).map_err(corrupt)?;
    state.trim();
    Ok(state)
}

/// Writes `state` to `path` atomically, following no link in its folder (temp file,
/// fsync, rename, fsync of the folder: [`crate::statedir::write_atomic_at`]).
pub fn save_atomic(path: &Path, state: &State) -> Result<(), StateError> {
    let io = |source| StateError::Io {
        path: path.to_path_buf(),
        source,
    };
    let (dir, name) = crate::statedir::open_parent(path).map_err(io)?;
    crate::statedir::write_atomic_at(&dir, &name, &encode(state)).map_err(io)
}

/// Reads the state at `path` (a regular file, at most
/// [`crate::statedir::MAX_STATE_BYTES`], not through a link). A missing file is an empty
/// state; an unreadable, corrupt or newer file is an error naming it.
pub fn load(path: &Path) -> Result<State, StateError> {
    let io = |source| StateError::Io {
        path: path.to_path_buf(),
        source,
    };
    let (dir, name) = crate::statedir::open_parent(path).map_err(io)?;
    match crate::statedir::read_at(&dir, &name, crate::statedir::MAX_STATE_BYTES) {
        Ok(None) => Ok(State::default()),
        Ok(Some(bytes)) => decode(path, &bytes),
        Err(e) => Err(StateError::Unreadable {
            path: path.to_path_buf(),
            source: e,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn sample(t: f64) -> Sample {
        Sample {
            unix_seconds: t,
            host_written_bytes: u128::MAX - 5,
            percentage_used_ratio: Some(0.03),
        }
    }

    #[test]
    fn round_trip_and_bounds() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        assert_eq!(load(&path).unwrap(), State::default());
        let mut s = State::default();
        s.schedule_mut("nightly", 100).start(60, 100);
        for i in 0..MAX_SAMPLES_PER_DRIVE + 10 {
            s.push_sample("nvme0n1", sample(i as f64));
        }
        assert_eq!(s.health["nvme0n1"].len(), MAX_SAMPLES_PER_DRIVE);
        assert_eq!(s.health["nvme0n1"][0].unix_seconds, 10.0);
        for i in 0..MAX_RUNS + 3 {
            s.push_run(RunRecord {
                id: format!("r{i}"),
                suite: "quick".into(),
                drive: "nvme0n1".into(),
                schedule: Some("nightly".into()),
                started: i as i64,
                ended: None,
                status: RunStatus::Running,
                result_path: None,
                reason: None,
                write_bound_bytes: None,
                stop: None,
                written_bytes: None,
            });
        }
        assert_eq!(s.runs.len(), MAX_RUNS);
        assert_eq!(s.runs[0].id, "r3");
        s.run_mut("r5").unwrap().status = RunStatus::TimedOut;
        for d in 0..MAX_DAYS_PER_DRIVE as i64 + 2 {
            s.add_self_written("nvme0n1", d * DAY + 5, 1 << 40);
        }
        s.add_self_written("nvme0n1", (MAX_DAYS_PER_DRIVE as i64 + 1) * DAY, 1);
        assert_eq!(s.self_written["nvme0n1"].len(), MAX_DAYS_PER_DRIVE);
        assert_eq!(
            s.self_written_total("nvme0n1"),
            (MAX_DAYS_PER_DRIVE as u128) * (1 << 40) + 1
        );
        assert!(s.self_written["nvme0n1"].contains_key("1971-02-06"));
        save_atomic(&path, &s).unwrap();
        assert!(!temp_path(&path).exists());
        assert_eq!(load(&path).unwrap(), s);
    }

    #[test]
    fn corrupt_and_newer_files_are_errors_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        fs::write(&path, b"{\"version\": 1, \"schedules\": {").unwrap();
        let e = load(&path).unwrap_err().to_string();
        assert!(e.contains("state.json") && e.contains("corrupt"), "{e}");
        assert!(!e.contains('\n'));
        fs::write(&path, b"{\"version\": 99}").unwrap();
        let e = load(&path).unwrap_err().to_string();
        assert!(e.contains("version 99"), "{e}");
        // No version: a damaged file (emptied, or another program's JSON), not an empty
        // state that would reset the wear ledger.
        for bad in [&b"{}"[..], b"", b"[]", b"{\"runs\": []}"] {
            fs::write(&path, bad).unwrap();
            let e = load(&path).unwrap_err().to_string();
            assert!(e.contains("corrupt"), "{e}");
        }
        // Missing fields default; unknown ones are ignored (older and newer daemons).
        fs::write(&path, b"{\"version\": 1, \"later\": true}").unwrap();
        assert_eq!(load(&path).unwrap(), State::default());
    }

    #[test]
    fn the_runs_window_sums_the_last_days_and_canaries_get_the_rest() {
        let mut s = State::default();
        let day0 = 20_000 * DAY; // 2024-10-04
                                 // A run's bytes on each of 40 days, and a canary's on the last day.
        for d in 0..40 {
            s.add_run_written("a", day0 + d * DAY + 100, 10);
        }
        s.add_self_written("a", day0 + 39 * DAY + 5, 3);
        let today = day0 + 39 * DAY + 86_000;
        assert_eq!(s.run_written_in_window("a", today, 30), 300);
        assert_eq!(s.run_written_in_window("a", today, 1), 10);
        assert_eq!(s.run_written_in_window("a", today, 400), 400);
        // The window moves with the day: tomorrow drops the oldest day of it.
        assert_eq!(s.run_written_in_window("a", today + DAY, 30), 290);
        assert_eq!(s.run_written_in_window("b", today, 30), 0);
        assert_eq!(s.canary_written_on("a", today), 3);
        assert_eq!(s.self_written_on("a", today), 13);
        assert_eq!(s.self_written_lifetime("a"), 403);
    }

    #[test]
    fn a_state_from_before_the_split_keeps_its_bytes_as_the_canaries() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        let t = 20_000 * DAY + 50;
        let day = utc_day(t);
        // The shape of a version-1 file before `run_written` and the run `reason`.
        let old = serde_json::json!({
            "version": 1,
            "runs": [{"id": "r1", "suite": "latency", "drive": "a", "schedule": "s",
                      "started": 1, "ended": 2, "status": "stopped", "result_path": null}],
            "self_written": {"a": {day.clone(): 1000}},
            "self_written_lifetime": {"a": 5000},
        });
        fs::write(&path, old.to_string()).unwrap();
        let s = load(&path).unwrap();
        assert_eq!(s.self_written_lifetime("a"), 5000);
        assert_eq!(s.canary_written_on("a", t), 1000);
        assert_eq!(s.run_written_in_window("a", t, 30), 0);
        assert_eq!(s.runs[0].reason, None);
        assert_eq!(s.runs[0].status, RunStatus::Stopped);
        // Saved again, nothing is lost.
        save_atomic(&path, &s).unwrap();
        assert_eq!(load(&path).unwrap(), s);
    }

    #[test]
    fn utc_days() {
        assert_eq!(utc_day(0), "1970-01-01");
        assert_eq!(utc_day(-1), "1969-12-31");
        assert_eq!(utc_day(1_795_996_800), "2026-11-30");
    }

    /// Issue 33: bytes written while the clock was a year ahead, then the clock back.
    /// Before, the window left out the days after today: 43 MiB of a 40 MiB allowance
    /// used, and the window said a fraction of it.
    #[test]
    fn bytes_written_while_the_clock_was_ahead_still_count() {
        let mut s = State::default();
        let today = 20_000 * DAY + 3600;
        s.add_run_written("a", today - DAY, 3);
        s.add_run_written("a", today + 365 * DAY, 40);
        s.add_run_written("a", today + 366 * DAY, 2);
        s.add_self_written("a", today + 365 * DAY, 5);
        assert_eq!(s.run_written_in_window("a", today, 30), 45);
        assert_eq!(s.redate_future_days(today), 47);
        assert_eq!(s.redate_future_days(today), 0, "once");
        assert_eq!(s.run_written_in_window("a", today, 30), 45);
        assert_eq!(s.run_written_in_window("a", today, 1), 42);
        assert_eq!(s.canary_written_on("a", today), 5);
        assert_eq!(s.self_written_on("a", today), 47);
        assert_eq!(s.self_written_lifetime("a"), 50);
        // They leave the window when today does.
        assert_eq!(s.run_written_in_window("a", today + 30 * DAY, 30), 0);
    }
}
