//! What a schedule should do now: pure decisions over a schedule, its bookkeeping and the
//! time, so that the daemon's loop is "decide, persist, act".
//!
//! Rules:
//! - a run is due at each cron time (UTC); due times before the schedule was first seen
//!   do not count;
//! - it starts only inside the maintenance window, if there is one: a due time outside it
//!   waits for the next opening;
//! - missed due times (downtime, a closed window, a busy drive, the schedule's own run
//!   still going) collapse into ONE run for the latest of them, never a burst;
//! - a due time recorded as handled never runs again: the caller persists
//!   [`Bookkeeping::start`] (with [`super::state::save_atomic`]) BEFORE starting the run,
//!   so a kill -9 at any moment can lose a run but never repeat one;
//! - one run per drive at a time: a schedule whose drive is busy waits
//!   ([`Decision::DriveBusy`]); [`plan_all`] serialises schedules sharing a drive;
//! - a run past `started + max_duration` is [`Decision::TimedOut`]: the caller stops it,
//!   marks it "timed out" and calls [`Bookkeeping::finish`];
//! - a run found `running` after a restart was interrupted by the restart: the caller
//!   calls [`Bookkeeping::recover`] and marks it "interrupted"; it is not repeated.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use super::cron::Cron;
use super::window::Window;

/// One scheduled suite on one drive.
#[derive(Debug, Clone, PartialEq)]
pub struct Schedule {
    pub name: String,
    pub drive: String,
    pub cron: Cron,
    pub window: Option<Window>,
    /// Seconds a run may take before it is stopped.
    pub max_duration: i64,
}

/// What the daemon remembers about a schedule (persisted in the state file).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Bookkeeping {
    /// When the daemon first saw the schedule: earlier due times are not runs.
    pub first_seen: i64,
    /// The latest due time a run was started for (all earlier ones count as handled).
    pub last_due_handled: Option<i64>,
    pub last_run_started: Option<i64>,
    pub last_run_ended: Option<i64>,
    pub running: bool,
}

impl Bookkeeping {
    pub fn new(now: i64) -> Self {
        Bookkeeping {
            first_seen: now,
            ..Default::default()
        }
    }

    /// Records a run started at `now` for `due`. Persist before starting the run.
    pub fn start(&mut self, due: i64, now: i64) {
        self.last_due_handled = Some(self.last_due_handled.map_or(due, |d| d.max(due)));
        self.last_run_started = Some(now);
        self.running = true;
    }

    /// Records the end of the run (finished, failed, stopped or timed out).
    pub fn finish(&mut self, now: i64) {
        self.running = false;
        self.last_run_ended = Some(now);
    }

    /// After a restart: a run still marked running was cut short by the restart. Ends it
    /// at `now` and returns true (the caller marks it "interrupted"); it is not repeated.
    pub fn recover(&mut self, now: i64) -> bool {
        let was = self.running;
        if was {
            self.finish(now);
        }
        was
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Nothing to do before `until` (the next due time or window opening).
    Wait { until: i64 },
    /// Nothing will ever be due (a window with no weekdays, or a cron with no future time).
    Never,
    /// Start a run for `due` now; stop it at `deadline`.
    Start { due: i64, deadline: i64 },
    /// A run for `due` may start, but the drive is busy: ask again when it frees.
    DriveBusy { due: i64 },
    /// The schedule's run is going; it must end by `deadline`.
    Running { deadline: i64 },
    /// The run passed its deadline: stop it and mark it timed out.
    TimedOut { started: i64, deadline: i64 },
}

/// When a run started at `started` must be stopped.
pub fn deadline(started: i64, max_duration: i64) -> i64 {
    started.saturating_add(max_duration.max(0))
}

/// The latest due time at or before `now` not yet handled, if any.
pub fn pending_due(s: &Schedule, b: &Bookkeeping, now: i64) -> Option<i64> {
    let due = s.cron.prev_at_or_before(now)?;
    let floor = b.last_due_handled.unwrap_or(i64::MIN);
    (due > floor && due >= b.first_seen).then_some(due)
}

/// The decision for one schedule at `now`. `drive_busy`: another run holds the drive.
pub fn decide(s: &Schedule, b: &Bookkeeping, now: i64, drive_busy: bool) -> Decision {
    if b.running {
        let started = b.last_run_started.unwrap_or(now);
        let deadline = deadline(started, s.max_duration);
        return if now >= deadline {
            Decision::TimedOut { started, deadline }
        } else {
            Decision::Running { deadline }
        };
    }
    if let Some(due) = pending_due(s, b, now) {
        let open = match &s.window {
            None => Some(now),
            Some(w) => w.next_open(now),
        };
        return match open {
            None => Decision::Never,
            Some(t) if t > now => Decision::Wait { until: t },
            Some(_) if drive_busy => Decision::DriveBusy { due },
            Some(_) => Decision::Start {
                due,
                deadline: deadline(now, s.max_duration),
            },
        };
    }
    // Nothing pending: the next due time, carried to the window's next opening.
    let next_due = match s.cron.next_after(now) {
        Some(d) => d,
        None => return Decision::Never,
    };
    let next = match &s.window {
        None => Some(next_due),
        Some(w) => w.next_open(next_due),
    };
    next.map_or(Decision::Never, |until| Decision::Wait { until })
}

/// Decisions for all schedules at `now`, in order. `busy` holds the drives running
/// something outside these schedules; a schedule given [`Decision::Start`] (or found
/// running) makes its drive busy for the schedules after it, so one drive never gets two
/// runs. `books` must hold one entry per schedule, in the same order.
pub fn plan_all(
    schedules: &[Schedule],
    books: &[Bookkeeping],
    now: i64,
    busy: &BTreeSet<String>,
) -> Vec<Decision> {
    assert_eq!(schedules.len(), books.len(), "one bookkeeping per schedule");
    let mut busy = busy.clone();
    // Runs already going hold their drives first.
    for (s, b) in schedules.iter().zip(books) {
        if b.running {
            busy.insert(s.drive.clone());
        }
    }
    schedules
        .iter()
        .zip(books)
        .map(|(s, b)| {
            let d = decide(s, b, now, !b.running && busy.contains(&s.drive));
            if let Decision::Start { .. } = d {
                busy.insert(s.drive.clone());
            }
            d
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::cron::CivilTime;
    use super::*;

    fn t(y: i64, mo: u32, d: u32, h: u32, mi: u32) -> i64 {
        CivilTime::new(y, mo, d, h, mi).to_unix()
    }

    fn sched(cron: &str, window: Option<&str>) -> Schedule {
        Schedule {
            name: "s".into(),
            drive: "nvme0n1".into(),
            cron: Cron::parse(cron).unwrap(),
            window: window.map(|w| Window::parse(w).unwrap()),
            max_duration: 3600,
        }
    }

    #[test]
    fn waits_then_starts_then_times_out() {
        let s = sched("0 3 * * *", None);
        let now = t(2026, 11, 30, 1, 0);
        let mut b = Bookkeeping::new(now);
        assert_eq!(
            decide(&s, &b, now, false),
            Decision::Wait {
                until: t(2026, 11, 30, 3, 0)
            }
        );
        let at = t(2026, 11, 30, 3, 0);
        let d = decide(&s, &b, at + 5, false);
        assert_eq!(
            d,
            Decision::Start {
                due: at,
                deadline: at + 5 + 3600
            }
        );
        assert_eq!(
            decide(&s, &b, at + 5, true),
            Decision::DriveBusy { due: at }
        );
        b.start(at, at + 5);
        assert_eq!(
            decide(&s, &b, at + 100, false),
            Decision::Running {
                deadline: at + 3605
            }
        );
        assert_eq!(
            decide(&s, &b, at + 3605, false),
            Decision::TimedOut {
                started: at + 5,
                deadline: at + 3605
            }
        );
        b.finish(at + 3606);
        assert_eq!(
            decide(&s, &b, at + 3607, false),
            Decision::Wait {
                until: t(2026, 12, 1, 3, 0)
            }
        );
    }

    #[test]
    fn nothing_before_first_seen() {
        let s = sched("0 3 * * *", None);
        let now = t(2026, 11, 30, 12, 0);
        let b = Bookkeeping::new(now);
        assert_eq!(
            decide(&s, &b, now, false),
            Decision::Wait {
                until: t(2026, 12, 1, 3, 0)
            }
        );
        // Seen exactly at a due time: that one counts.
        let b = Bookkeeping::new(t(2026, 11, 30, 3, 0));
        assert!(matches!(
            decide(&s, &b, t(2026, 11, 30, 3, 0), false),
            Decision::Start { .. }
        ));
    }

    #[test]
    fn downtime_gives_one_catch_up_for_the_latest_due() {
        let s = sched("0 * * * *", None);
        let mut b = Bookkeeping::new(t(2026, 11, 1, 0, 0));
        b.start(t(2026, 11, 1, 0, 0), t(2026, 11, 1, 0, 0));
        b.finish(t(2026, 11, 1, 0, 30));
        // Down for days: one run, for 2026-11-05 07:00.
        let now = t(2026, 11, 5, 7, 42);
        let d = decide(&s, &b, now, false);
        assert_eq!(
            d,
            Decision::Start {
                due: t(2026, 11, 5, 7, 0),
                deadline: now + 3600
            }
        );
        b.start(t(2026, 11, 5, 7, 0), now);
        b.finish(now + 60);
        assert_eq!(
            decide(&s, &b, now + 61, false),
            Decision::Wait {
                until: t(2026, 11, 5, 8, 0)
            }
        );
    }

    #[test]
    fn due_outside_window_waits_for_the_opening() {
        // Due at noon on weekdays, allowed only in MON-FRI 22:00-04:00.
        let s = sched("0 12 * * 1-5", Some("MON-FRI 22:00-04:00"));
        let b = Bookkeeping::new(t(2026, 11, 30, 0, 0));
        assert_eq!(
            decide(&s, &b, t(2026, 11, 30, 1, 0), false),
            Decision::Wait {
                until: t(2026, 11, 30, 22, 0)
            }
        );
        assert_eq!(
            decide(&s, &b, t(2026, 11, 30, 12, 30), false),
            Decision::Wait {
                until: t(2026, 11, 30, 22, 0)
            }
        );
        assert!(matches!(
            decide(&s, &b, t(2026, 12, 1, 3, 0), false),
            Decision::Start { due, .. } if due == t(2026, 11, 30, 12, 0)
        ));
        // Friday noon is carried over the weekend's missing window to Friday night.
        let b = Bookkeeping {
            last_due_handled: Some(t(2026, 12, 3, 12, 0)),
            ..b
        };
        assert_eq!(
            decide(&s, &b, t(2026, 12, 4, 12, 0), false),
            Decision::Wait {
                until: t(2026, 12, 4, 22, 0)
            }
        );
        assert_eq!(
            decide(&s, &b, t(2026, 12, 5, 4, 0), false),
            Decision::Wait {
                until: t(2026, 12, 7, 22, 0)
            }
        );
    }

    #[test]
    fn one_run_per_drive() {
        let a = sched("0 3 * * *", None);
        let mut c = sched("0 3 * * *", None);
        c.name = "c".into();
        let mut other = sched("0 3 * * *", None);
        other.name = "o".into();
        other.drive = "sda".into();
        let b = Bookkeeping::new(t(2026, 11, 30, 0, 0));
        let now = t(2026, 11, 30, 3, 0);
        let ds = plan_all(
            &[a.clone(), c.clone(), other.clone()],
            &[b, b, b],
            now,
            &BTreeSet::new(),
        );
        assert!(matches!(ds[0], Decision::Start { .. }));
        assert_eq!(ds[1], Decision::DriveBusy { due: now });
        assert!(matches!(ds[2], Decision::Start { .. }));
        let mut running = b;
        running.start(now, now);
        let ds = plan_all(&[c, a], &[b, running], now + 60, &BTreeSet::new());
        assert_eq!(ds[0], Decision::DriveBusy { due: now });
        assert!(matches!(ds[1], Decision::Running { .. }));
        let busy: BTreeSet<String> = ["sda".to_string()].into();
        let ds = plan_all(&[other], &[b], now, &busy);
        assert_eq!(ds[0], Decision::DriveBusy { due: now });
    }

    #[test]
    fn recover_marks_the_interrupted_run_handled() {
        let s = sched("0 3 * * *", None);
        let now = t(2026, 11, 30, 3, 0);
        let mut b = Bookkeeping::new(now);
        b.start(now, now);
        assert!(b.recover(now + 10));
        assert!(!b.recover(now + 11));
        assert_eq!(
            decide(&s, &b, now + 20, false),
            Decision::Wait {
                until: t(2026, 12, 1, 3, 0)
            }
        );
    }
}
