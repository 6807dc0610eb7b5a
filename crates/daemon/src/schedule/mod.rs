//! Schedules (issue 5): cron expressions, maintenance windows, the decision of what to run
//! when, and the daemon's persistent state. Time-zone free: every time is unix seconds and
//! evaluated in UTC (cron and windows alike; write local schedules in UTC). `cron`,
//! `window` and `plan` are pure; `state` reads and saves the state file.

pub mod cron;
pub mod plan;
pub mod state;
pub mod window;

pub use cron::{CivilTime, Cron, CronError};
pub use plan::{deadline, decide, plan_all, Bookkeeping, Decision, Schedule};
pub use state::{decode, encode, load, save_atomic, RunRecord, RunStatus, State, StateError};
pub use window::{Weekdays, Window, WindowError};
