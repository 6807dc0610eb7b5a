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
//!   calls [`Bookkeeping::recover`] and marks it "interrupted"; it is not repeated;
//! - the wall clock can step. A saved time ahead of the clock by at most
//!   [`CLOCK_TOLERANCE`] (a small step back) is waited for, so a due time already handled
//!   does not run again (cron's rule for steps back of under 3 hours), and [`decide`]'s
//!   next due time is the first one the schedule will really start, not one it will pass
//!   by. A saved time further ahead was saved while the clock was wrong (an excursion
//!   since corrected): it would hold the schedule until the clock caught up, a year for a
//!   clock that was a year ahead, so [`Bookkeeping::clamp_future`] brings it back to now
//!   (the caller logs it); the next due time after now then runs.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use super::cron::Cron;
use super::window::Window;

/// One scheduled suite on one drive.
/// Seconds a saved time may be ahead of the wall clock and still be waited for (see the
/// module docs): a step back of up to this holds a schedule at most this long, and never
/// repeats a due time it handled; beyond it, saved times are brought back to now.
pub const CLOCK_TOLERANCE: i64 = 3 * 3600;

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

    /// Brings every saved time more than `tolerance` ahead of `now` back to `now` (the
    /// wall clock was ahead when they were saved and has come back). Returns how far the
    /// furthest was ahead, when one was. The due times up to `now` then count as handled
    /// (no catch-up burst for what the excursion ran), and a run marked running gets its
    /// deadline from `now`.
    pub fn clamp_future(&mut self, now: i64, tolerance: i64) -> Option<i64> {
        let limit = now.saturating_add(tolerance.max(0));
        let mut ahead = None;
        let mut clamp = |t: &mut i64| {
            if *t > limit {
                ahead = Some(ahead.unwrap_or(0).max(*t - now));
                *t = now;
            }
        };
        clamp(&mut self.first_seen);
        for t in [
            &mut self.last_due_handled,
            &mut self.last_run_started,
            &mut self.last_run_ended,
        ]
        .into_iter()
        .flatten()
        {
            clamp(t);
        }
        ahead
    }

    /// The saved time ahead of `now` that holds the schedule (a due time handled, or when
    /// it was first seen, after a step back of the clock within the tolerance), if any.
    pub fn held_until(&self, now: i64) -> Option<i64> {
        let t = self
            .last_due_handled
            .unwrap_or(i64::MIN)
            .max(self.first_seen.saturating_sub(1));
        (t > now).then_some(t)
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
    // Nothing pending: the next due time, carried to the window's next opening. After a
    // step back of the clock, due times up to a saved time ahead of it are handled (or
    // before the schedule was seen): the next one after that is the next run.
    let next_due = match s.cron.next_after(b.held_until(now).unwrap_or(now)) {
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

    const DAY: i64 = 86_400;

    /// Issue 33: the wall clock a year ahead, a run there, then the clock back. Before,
    /// the saved times a year ahead held the schedule for a year.
    #[test]
    fn a_year_ahead_excursion_is_clamped_and_the_schedule_runs_again() {
        let s = sched("0 * * * *", None);
        let t0 = t(2026, 11, 30, 1, 30);
        let mut b = Bookkeeping::new(t0);
        let ahead = t0 + 365 * DAY;
        let Decision::Start { due, .. } = decide(&s, &b, ahead, false) else {
            panic!("due a year ahead");
        };
        b.start(due, ahead);
        b.finish(ahead + 60);
        let back = t0 + 120;
        assert_eq!(
            b.clamp_future(back, CLOCK_TOLERANCE),
            Some(ahead + 60 - back)
        );
        assert_eq!(b.clamp_future(back, CLOCK_TOLERANCE), None, "once");
        assert_eq!(b.last_due_handled, Some(back));
        assert_eq!(b.last_run_ended, Some(back));
        // No burst for 01:00, which the run a year ahead stands for; 02:00 starts.
        assert_eq!(
            decide(&s, &b, back, false),
            Decision::Wait {
                until: t(2026, 11, 30, 2, 0)
            }
        );
        assert!(matches!(
            decide(&s, &b, t(2026, 11, 30, 2, 0), false),
            Decision::Start { .. }
        ));
        // A schedule first seen while the clock was ahead, and a run started there.
        let mut seen = Bookkeeping::new(ahead);
        seen.start(ahead, ahead);
        assert!(seen.clamp_future(back, CLOCK_TOLERANCE).is_some());
        assert_eq!(
            decide(&s, &seen, back + 60, false),
            Decision::Running {
                deadline: back + 3600
            },
            "its deadline counts from now, not from a year ahead"
        );
    }

    /// A step back within the tolerance: the due time handled is not run again, and the
    /// next due time said is one the schedule starts at (before, it said 03:00, the due
    /// time handled, and passed it by).
    #[test]
    fn a_small_step_back_neither_repeats_a_run_nor_announces_one_it_passes_by() {
        let s = sched("0 * * * *", None);
        let due = t(2026, 11, 30, 3, 0);
        let mut b = Bookkeeping::new(due - 7200);
        b.start(due, due + 5);
        b.finish(due + 65);
        let back = due + 70 - 3600;
        assert_eq!(b.clamp_future(back, CLOCK_TOLERANCE), None);
        assert_eq!(b.held_until(back), Some(due));
        let next = t(2026, 11, 30, 4, 0);
        let mut said = None;
        for m in 0..(next - back) / 60 {
            let d = decide(&s, &b, back + m * 60, false);
            assert!(!matches!(d, Decision::Start { .. }), "{m} min: {d:?}");
            if let Decision::Wait { until } = d {
                said.get_or_insert(until);
                assert_eq!(until, next, "{m} min");
            }
        }
        assert_eq!(said, Some(next));
        assert!(matches!(
            decide(&s, &b, next, false),
            Decision::Start { due, .. } if due == next
        ));
    }
}
