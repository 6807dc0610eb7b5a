//! Steps of the wall clock, as the scheduler sees them (issue 33).
//!
//! The scheduler decides on the wall clock (cron times are wall times). Between two of its
//! passes the wall clock should advance as much as the monotonic clock; when it advances
//! by [`STEP_THRESHOLD_SECONDS`] more or less, it was stepped (by hand, by NTP at boot, by
//! a wrong RTC put right), or the machine was suspended (the monotonic clock stops then).
//! Each step is logged once with its size and counted on the surfaces
//! (`driveprobe_clock_steps_total`, `driveprobe_clock_last_step_seconds`, the status page,
//! `/api/v1/scheduler`).
//!
//! Whatever the watch saw (a step while the daemon was stopped is seen only in the saved
//! times), every pass also [`guard`]s the state against times saved while the clock was
//! ahead: schedule bookkeeping more than `plan::CLOCK_TOLERANCE` ahead is brought back to
//! now, and bytes written on days after today move to today (see
//! `State::redate_future_days`); each is logged when it happens.

use std::time::Instant;

use crate::schedule::plan::{Bookkeeping, CLOCK_TOLERANCE};
use crate::status::ClockStatus;

use super::scheduler::Plan;
use super::Ctx;

/// A difference between the wall clock's advance and the monotonic clock's over one pass
/// of at least this is a step. A pass is about a second; NTP slews at most 0.5 ms/s.
pub const STEP_THRESHOLD_SECONDS: f64 = 2.0;

/// The wall clock and the monotonic clock at the last pass.
#[derive(Debug, Default)]
pub struct ClockWatch {
    last: Option<(f64, Instant)>,
}

impl ClockWatch {
    /// Takes the clocks at a pass; returns the step since the last one (seconds, negative
    /// for a step back), when there was one.
    pub fn observe(&mut self, wall: f64, mono: Instant) -> Option<f64> {
        let step = self.last.map(|(w, m)| {
            let mono_advance = mono.saturating_duration_since(m).as_secs_f64();
            (wall - w) - mono_advance
        });
        self.last = Some((wall, mono));
        step.filter(|s| s.abs() >= STEP_THRESHOLD_SECONDS)
    }
}

/// Logs a step and counts it in the status.
pub fn record_step(ctx: &Ctx, step: f64, now: f64) {
    let seconds = step.round() as i64;
    if step < 0.0 {
        tracing::warn!(
            step_seconds = seconds,
            "the wall clock stepped back {}; saved times ahead of it by more than {} are brought back to now, smaller ones are waited for",
            crate::fmt::span(-step),
            crate::fmt::span(CLOCK_TOLERANCE as f64),
        );
    } else {
        tracing::warn!(
            step_seconds = seconds,
            "the wall clock stepped forward {} (or the machine was suspended): due times passed meanwhile give one run each schedule",
            crate::fmt::span(step),
        );
    }
    let mut s = ctx.shared.lock();
    let c: &mut ClockStatus = &mut s.scheduler.clock;
    c.steps_total += 1;
    c.last_step_seconds = step;
    c.last_step_unix = now;
}

/// Brings the plans' bookkeeping and the days of written bytes back from ahead of `now`
/// (see the module docs), logging each change.
pub fn guard(ctx: &Ctx, plans: &[Plan], now: i64) {
    let needed = {
        let st = ctx.store.lock();
        let limit = now.saturating_add(CLOCK_TOLERANCE);
        let books_ahead = plans.iter().any(|p| {
            st.schedules
                .get(&p.key)
                .is_some_and(|b| latest(b).is_some_and(|t| t > limit))
        });
        let today = crate::schedule::state::utc_day(now);
        let days_ahead = st
            .self_written
            .values()
            .chain(st.run_written.values())
            .any(|d| d.last_key_value().is_some_and(|(k, _)| *k > today));
        books_ahead || days_ahead
    };
    if !needed {
        return;
    }
    let (clamped, moved) = ctx.store.update(|st| {
        let mut clamped = Vec::new();
        for p in plans {
            if let Some(b) = st.schedules.get_mut(&p.key) {
                if let Some(ahead) = b.clamp_future(now, CLOCK_TOLERANCE) {
                    clamped.push((p.key.clone(), ahead));
                }
            }
        }
        (clamped, st.redate_future_days(now))
    });
    for (key, ahead) in &clamped {
        tracing::warn!(
            schedule = %key,
            ahead_seconds = ahead,
            "the schedule's saved times were up to {} ahead of the wall clock (saved while it was ahead); brought back to now, so its next due time runs",
            crate::fmt::span(*ahead as f64),
        );
    }
    if moved > 0 {
        tracing::warn!(
            bytes = moved as u64,
            "bytes written while the wall clock was ahead were dated after today; they count as written today"
        );
    }
    ctx.shared.lock().scheduler.clock.clamped_total += clamped.len() as u64;
    ctx.save_state();
}

/// The latest time saved in `b`.
fn latest(b: &Bookkeeping) -> Option<i64> {
    [b.last_due_handled, b.last_run_started, b.last_run_ended]
        .into_iter()
        .flatten()
        .chain([b.first_seen])
        .max()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_step_is_the_wall_clocks_advance_less_the_monotonic_clocks() {
        let mut w = ClockWatch::default();
        let m0 = Instant::now();
        let wall = 1.8e9;
        assert_eq!(w.observe(wall, m0), None, "nothing to compare with yet");
        // A second on both clocks, then a slow pass of 30 s on both: no step.
        assert_eq!(w.observe(wall + 1.0, m0 + Duration::from_secs(1)), None);
        assert_eq!(w.observe(wall + 31.0, m0 + Duration::from_secs(31)), None);
        // A year ahead in one second of monotonic time.
        let year = 365.0 * 86_400.0;
        let s = w
            .observe(wall + 32.0 + year, m0 + Duration::from_secs(32))
            .unwrap();
        assert!((s - year).abs() < 1e-6, "{s}");
        // And back.
        let s = w
            .observe(wall + 33.0, m0 + Duration::from_secs(33))
            .unwrap();
        assert!((s + year).abs() < 1e-6, "{s}");
        // Under the threshold: slewing, not a step.
        assert_eq!(w.observe(wall + 34.5, m0 + Duration::from_secs(34)), None);
        let s = w
            .observe(wall + 33.0, m0 + Duration::from_secs(35))
            .unwrap();
        assert!((s + 2.5).abs() < 1e-6, "{s}");
    }
}
