//! Scheduled full-intensity runs: "decide, persist, act" once a second.
//!
//! Each `[[schedule]]` is expanded to one plan per drive (keyed `SCHEDULE/DRIVE` in the
//! state). The pure rules of `crate::schedule::plan` decide; a run's start is persisted
//! (bookkeeping and a `running` record, saved atomically) BEFORE the run starts, so a
//! kill -9 at any moment can lose a run but never repeat one. One run per drive at a
//! time; the drive's canaries pause for it (they see the drive held by [`Runs`]) and the
//! run waits until they have stopped.
//!
//! A due run is decided up front: it starts only when the upper bound of what it writes
//! (`protocol::bound::write_bound`) fits what is left of the drive's wear allowance for
//! scheduled runs over the rolling period (or the schedule's own `wear_budget`). Else it
//! is skipped: its due time is handled (logged once, not retried every second), and the
//! skip with its figures goes to the run index (`skipped`), the status page and
//! `driveprobe_schedule_skipped_total`. An admitted run is stopped midway only for its
//! maximum duration (`timed_out`), a signal (`stopped`), an error (`failed`) or its hard
//! safety limit (`stopped`: it reached `WriteBound::safety_limit`, past which the engine
//! issues no write), and the one
//! [`StopReason`] is recorded in the document, the index, the status page and the gauges.
//! Results go to `STATE_DIR/runs/ID.json`, the index to the state file, the summary to
//! the `driveprobe_run_*` gauges.
//!
//! A schedule with `fio_job = "FILE"` runs `suite::fio_job_suite(FILE, max_duration)` the
//! same way (write gate, canaries stopped, result document, gauges). Its suite label is
//! `fio-job:STEM` (`config::fio_job_label`): in the run index, in the document's `suite`
//! and in the `suite` label of the run gauges, so two job files on one drive keep apart
//! and the run-regression alert compares a job file with its own last run. fio's writes
//! reach the wear budget through `RunControl::add_written` (the `FioJob` step adds the
//! `write.io_bytes` fio reports once it has finished, less what was already counted
//! while it ran), and `account_writes` moves them to the drive like the engine's.
//!
//! [`Runs`] outlives config reloads: a run going on when the config is reloaded goes on.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::condlog::{CondLog, Level};
use crate::config::ScheduleBudget;
use crate::engine::RunControl;
use crate::protocol::bound::{self, StopCell, StopReason, WriteBound};
use crate::protocol::result::{Phase, Round, SuiteResult, WorkloadDesc};
use crate::protocol::suite::{self, SuiteOptions};
use crate::safety;
use crate::schedule::{self as plan_mod, Decision, RunRecord, RunStatus};
use crate::statedir::{Place, StateDir};
use crate::status::{RunLatency, RunPoint, RunSummary};
use crate::target::Target;

use super::{now_unix, Beat, Ctx, DriveCtl, OpenError};

/// Seconds between two identity checks of every drive (a drive that vanishes is down
/// within this; a run re-checks its drive just before it starts).
pub const RESOLVE_EVERY: i64 = 2;

/// One run going on.
#[derive(Debug)]
pub struct RunHandle {
    pub id: String,
    pub key: String,
    pub drive: String,
    pub suite: String,
    pub control: RunControl,
    /// Why it was stopped, set by whoever stops it, before the stop.
    pub stop: StopCell,
    /// The upper bound of its writes it was admitted with.
    pub bound: WriteBound,
    /// Bytes of `control.written_bytes()` already accounted to the drive.
    pub accounted: AtomicU64,
    /// Its safety stop was logged.
    pub limit_logged: AtomicBool,
    pub thread: Mutex<Option<JoinHandle<()>>>,
    /// The wall clock (its record's `started`) and the monotonic clock when it started:
    /// its end is `started` plus the monotonic time since, so a step of the wall clock
    /// during the run never gives an `ended` before `started`, nor a wrong duration.
    pub started: i64,
    pub began: Instant,
}

impl RunHandle {
    /// The wall-clock time of the run's end, if it ends now (see `started`).
    pub fn ended_at(&self) -> i64 {
        ended_from(self.started, self.began.elapsed())
    }
}

/// `started` plus `elapsed` (monotonic), in whole seconds.
pub fn ended_from(started: i64, elapsed: Duration) -> i64 {
    started.saturating_add(elapsed.as_secs().min(i64::MAX as u64) as i64)
}

/// The runs going on, by drive name, and the results not saved yet. Long-lived (across
/// reloads).
#[derive(Debug, Default)]
pub struct Runs {
    active: Mutex<BTreeMap<String, Arc<RunHandle>>>,
    /// The drives' own self-tests going on (`[[selftest]]`), which hold their drives too.
    pub selftests: super::selftest::SelfTests,
    pending: Mutex<Vec<Pending>>,
}

/// A finished run whose result document could not be written: kept in memory and
/// written again on every scheduler tick until it can be.
#[derive(Debug)]
struct Pending {
    id: String,
    drive: String,
    suite: String,
    /// The status the run gets once its document is written.
    status: RunStatus,
    result: SuiteResult,
    why: Option<StopReason>,
    /// Failed writes so far.
    attempts: u64,
}

impl Runs {
    fn pending(&self) -> std::sync::MutexGuard<'_, Vec<Pending>> {
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs whose result document is not written yet.
    pub fn pending_count(&self) -> usize {
        self.pending().len()
    }

    /// The run holding `drive`, if any.
    pub fn on_drive(&self, drive: &str) -> Option<Arc<RunHandle>> {
        self.lock().get(drive).cloned()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Arc<RunHandle>>> {
        self.active.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn all(&self) -> Vec<Arc<RunHandle>> {
        self.lock().values().cloned().collect()
    }

    /// Stops every run (shutdown) and waits for them until `deadline`.
    pub fn stop_all(&self, deadline: Instant) {
        let all = self.all();
        for r in &all {
            r.stop.set(StopReason::Signal);
            r.control.stop();
        }
        for r in &all {
            while Instant::now() < deadline && self.on_drive(&r.drive).is_some() {
                std::thread::sleep(Duration::from_millis(20));
            }
            let handle = r.thread.lock().unwrap_or_else(|e| e.into_inner()).take();
            if let Some(h) = handle {
                if h.is_finished() {
                    let _ = h.join();
                }
            }
        }
    }
}

/// The per-drive plans of the config's schedules, with their suite and scale.
pub struct Plan {
    pub schedule: plan_mod::Schedule,
    pub key: String,
    pub config_name: String,
    /// The suite label (a built-in suite's name, or `fio-job:STEM`).
    pub suite: String,
    pub scale: suite::Scale,
    /// A fio job file to run instead of a built-in suite, with its wall-clock limit (the
    /// schedule's `max_duration`).
    pub fio_job: Option<(PathBuf, Duration)>,
    /// The schedule's own wear allowance, if it has one.
    pub wear_budget: ScheduleBudget,
    /// A `[[selftest]]`: the drive's own test of this kind instead of a suite (it writes
    /// nothing; `suite` is `selftest:KIND`, for the log).
    pub selftest: Option<crate::config::SelfTestKind>,
    /// The schedule's `hist_digits`: the digits its documents' histograms keep.
    pub hist_digits: Option<u8>,
}

impl Plan {
    /// The run index's record of run `id` of this plan, begun at `now` with `status`
    /// and admitted (or skipped) with `bound`.
    fn record(&self, id: &str, now: i64, status: RunStatus, bound: WriteBound) -> RunRecord {
        RunRecord {
            id: id.to_string(),
            suite: self.suite.clone(),
            drive: self.schedule.drive.clone(),
            schedule: Some(self.config_name.clone()),
            started: now,
            ended: None,
            status,
            result_path: None,
            reason: None,
            write_bound_bytes: Some(bound.bytes),
            stop: None,
            written_bytes: None,
        }
    }
}

pub fn plans(ctx: &Ctx) -> Vec<Plan> {
    let mut out = Vec::new();
    for s in &ctx.config.schedules {
        let Ok(cron) = plan_mod::Cron::parse(&s.cron) else {
            continue; // validated at load; cannot happen
        };
        let window = s.window.as_ref().map(super::window_of);
        for d in &s.drives {
            let key = format!("{}/{}", s.name, d);
            out.push(Plan {
                schedule: plan_mod::Schedule {
                    name: key.clone(),
                    drive: d.clone(),
                    cron: cron.clone(),
                    window,
                    max_duration: s.max_duration.as_secs() as i64,
                },
                key,
                config_name: s.name.clone(),
                suite: s.suite.clone(),
                scale: s.scale,
                fio_job: s.fio_job.clone().map(|f| (f, s.max_duration)),
                wear_budget: s.wear_budget,
                selftest: None,
                hist_digits: s.hist_digits,
            });
        }
    }
    for t in &ctx.config.selftests {
        let Ok(cron) = plan_mod::Cron::parse(&t.cron) else {
            continue; // validated at load; cannot happen
        };
        let window = t.window.as_ref().map(super::window_of);
        for d in &t.drives {
            let key = format!("{}/{}", t.name, d);
            out.push(Plan {
                schedule: plan_mod::Schedule {
                    name: key.clone(),
                    drive: d.clone(),
                    cron: cron.clone(),
                    window,
                    max_duration: t.max_duration.as_secs() as i64,
                },
                key,
                config_name: t.name.clone(),
                suite: format!("selftest:{}", t.kind.name()),
                scale: suite::Scale::named("quick").expect("the default scale exists"),
                fio_job: None,
                wear_budget: ScheduleBudget::Unlimited,
                selftest: Some(t.kind),
                hist_digits: None,
            });
        }
    }
    out
}

/// At start, before any scheduler runs: runs left `running` by a killed daemon are
/// marked interrupted (not repeated).
pub fn recover(store: &super::store::Store, now: i64) {
    store.update(|st| {
        let keys: Vec<String> = st.schedules.keys().cloned().collect();
        for k in keys {
            let b = st.schedules.get_mut(&k).expect("key listed");
            if b.recover(now) {
                tracing::warn!(schedule = %k, "a run was cut short by a restart; marked interrupted, not repeated");
            }
        }
        for r in st.runs.iter_mut().filter(|r| r.status == RunStatus::Running) {
            r.status = RunStatus::Interrupted;
            r.ended = Some(now);
        }
        // Ended, but the daemon stopped before their documents could be written: the
        // documents were only in memory.
        for r in st.runs.iter_mut().filter(|r| r.status == RunStatus::Pending) {
            tracing::warn!(run = %r.id, "the run's result document was never saved (the daemon stopped first); marked interrupted");
            r.status = RunStatus::Interrupted;
        }
    });
    if store.held().is_some() {
        return; // logged at the start; nothing is saved while held
    }
    if let Err(e) = store.save() {
        tracing::error!(error = %e, "cannot save the state");
    }
}

/// The scheduler thread of one config generation.
pub fn run(ctx: Arc<Ctx>, beat: Arc<Beat>, stop: Arc<AtomicBool>) {
    let plans = plans(&ctx);
    let mut last_save = Instant::now();
    let mut log = CondLog::new("scheduler");
    let mut watch = super::clock::ClockWatch::default();
    while !stop.load(Ordering::Acquire) {
        beat.beat();
        let wall = now_unix();
        if let Some(step) = watch.observe(wall, Instant::now()) {
            super::clock::record_step(&ctx, step, wall);
        }
        tick(&ctx, &plans, wall as i64, &mut log);
        if last_save.elapsed() >= Duration::from_secs(5) {
            ctx.save_state();
            last_save = Instant::now();
        }
        // Sleep to the next second, in slices so a stop is seen quickly.
        for _ in 0..10 {
            if stop.load(Ordering::Acquire) {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    // A last attempt at the results still pending (they are lost if the daemon stops).
    retry_pending(&ctx);
    ctx.save_state();
}

/// One pass: write the results still pending, account the writes of running runs,
/// resolve identities, decide and act. `log` holds the conditions that last over ticks (a
/// due run waiting for its drive), so each is logged when it starts and when it ends.
pub fn tick(ctx: &Arc<Ctx>, plans: &[Plan], now: i64, log: &mut CondLog) {
    retry_pending(ctx);
    super::clock::guard(ctx, plans, now);
    for r in ctx.runs.all() {
        account_writes(ctx, &r, now);
    }
    // Identities every few seconds (sysfs and the mount table are read for each drive);
    // the wear figures every tick.
    ctx.refresh_drives(now % RESOLVE_EVERY == 0);
    ctx.sample_load();

    // Held: by a run, by a self-test the daemon follows, or by a self-test the drive's
    // latest health reading shows running (one started by hand): a suite never starts
    // on a drive testing itself, and a self-test never on a drive busy with a run (and
    // neither starts before the drive's first health reading: `unread`).
    let holders = holders(ctx);
    let busy: BTreeSet<String> = holders.keys().cloned().collect();
    let schedules: Vec<plan_mod::Schedule> = plans.iter().map(|p| p.schedule.clone()).collect();
    let books: Vec<plan_mod::Bookkeeping> = ctx.store.update(|st| {
        plans
            .iter()
            .map(|p| *st.schedule_mut(&p.key, now))
            .collect()
    });
    let decisions = plan_mod::plan_all(&schedules, &books, now, &busy);
    let mut next_due = BTreeMap::new();
    let mut running = BTreeMap::new();
    let mut held = BTreeMap::new();
    for ((p, d), b) in plans.iter().zip(decisions).zip(&books) {
        if let Some(h) = hold(p, &d, b, now, &holders) {
            held.insert(p.key.clone(), h);
        }
        match d {
            Decision::Wait { until } => {
                next_due.insert(p.key.clone(), until);
            }
            Decision::Start { due, .. } if p.selftest.is_some() => {
                if !try_start_selftest(ctx, p, due, now, log) {
                    next_due.insert(p.key.clone(), due);
                }
            }
            Decision::Running { .. } if p.selftest.is_some() => {
                if ctx
                    .runs
                    .selftests
                    .on_drive(&p.schedule.drive)
                    .is_none_or(|h| h.key != p.key)
                {
                    // Its thread ended without finishing the books: close them.
                    ctx.store
                        .update(|st| st.schedule_mut(&p.key, now).finish(now));
                }
            }
            Decision::TimedOut { .. } if p.selftest.is_some() => {
                match ctx.runs.selftests.on_drive(&p.schedule.drive) {
                    Some(h) if h.key == p.key => {
                        if h.time_out() {
                            tracing::warn!(selftest = %p.key, "self-test passed its maximum duration; aborting it");
                        }
                    }
                    _ => ctx
                        .store
                        .update(|st| st.schedule_mut(&p.key, now).finish(now)),
                }
            }
            Decision::Start { due, deadline } => {
                if let Some(id) = try_start(ctx, p, due, deadline, now, log) {
                    running.insert(p.key.clone(), id);
                } else {
                    next_due.insert(p.key.clone(), due);
                }
            }
            Decision::DriveBusy { due } => {
                next_due.insert(p.key.clone(), due);
            }
            Decision::Running { .. } => {
                if let Some(r) = ctx
                    .runs
                    .on_drive(&p.schedule.drive)
                    .filter(|r| r.key == p.key)
                {
                    running.insert(p.key.clone(), r.id.clone());
                } else {
                    // Bookkeeping says running but no run exists (its thread ended
                    // without finishing the books): close it.
                    ctx.store
                        .update(|st| st.schedule_mut(&p.key, now).finish(now));
                }
            }
            Decision::TimedOut { .. } => match ctx.runs.on_drive(&p.schedule.drive) {
                Some(r) if r.key == p.key => {
                    let why = StopReason::MaxDuration {
                        limit_seconds: p.schedule.max_duration.max(0) as u64,
                    };
                    if r.stop.set(why) {
                        tracing::warn!(run = %r.id, "run passed its maximum duration; stopping it");
                    }
                    r.control.stop();
                    running.insert(p.key.clone(), r.id.clone());
                }
                _ => ctx
                    .store
                    .update(|st| st.schedule_mut(&p.key, now).finish(now)),
            },
            Decision::Never => {}
        }
    }
    log_holds(plans, &mut held, ctx, log);
    let mut s = ctx.shared.lock();
    s.scheduler.last_tick_unix = now_unix();
    s.scheduler.next_due = next_due;
    s.scheduler.running = running;
    s.scheduler.held = held;
    s.runs = ctx.store.lock().runs.clone();
}

/// What holds each drive busy now: (reason label, what, in words). A run, a self-test
/// the daemon follows, or a self-test the drive's latest health reading shows running
/// (one started by hand).
fn holders(ctx: &Ctx) -> BTreeMap<String, (&'static str, String)> {
    let mut out = BTreeMap::new();
    for (n, d) in &ctx.shared.lock().drives {
        if d.health
            .as_ref()
            .is_some_and(|h| h.report.self_test_running.is_some())
        {
            out.insert(
                n.clone(),
                (
                    "selftest",
                    format!(
                        "drive {n} reports a self-test in progress (one driveprobe did not start)"
                    ),
                ),
            );
        }
    }
    for h in ctx.runs.selftests.all() {
        out.insert(
            h.drive.clone(),
            (
                "selftest",
                format!("drive {} is running self-test {}", h.drive, h.key),
            ),
        );
    }
    for r in ctx.runs.all() {
        out.insert(
            r.drive.clone(),
            (
                "run",
                format!("drive {} is busy with run {}", r.drive, r.id),
            ),
        );
    }
    out
}

/// Why plan `p`, decided `d` on bookkeeping `b`, does not start what it is due for, if
/// it is held (`since_unix` is filled by [`log_holds`]).
fn hold(
    p: &Plan,
    d: &Decision,
    b: &plan_mod::Bookkeeping,
    now: i64,
    holders: &BTreeMap<String, (&'static str, String)>,
) -> Option<crate::status::HeldStatus> {
    let (reason, message, due) = match d {
        Decision::DriveBusy { due } => {
            let (reason, what) = holders.get(&p.schedule.drive).cloned().unwrap_or((
                "run",
                format!(
                    "another schedule's run starts on drive {}",
                    p.schedule.drive
                ),
            ));
            (
                reason,
                format!(
                    "{}: due, held: {what}; it starts when the drive is free",
                    p.key
                ),
                *due,
            )
        }
        Decision::Wait { until } => {
            let handled = b.held_until(now)?;
            (
                "clock",
                format!(
                    "{}: held: the wall clock stepped back behind {}, a due time already handled; the next run is at {}",
                    p.key,
                    crate::fmt::utc(handled as f64),
                    crate::fmt::utc(*until as f64),
                ),
                handled,
            )
        }
        _ => return None,
    };
    Some(crate::status::HeldStatus {
        reason: reason.to_string(),
        message,
        due_unix: due,
        since_unix: 0.0,
    })
}

/// Logs each hold once when it starts and once when it ends (with the schedule and the
/// drive in its line), and dates it from the pass that first saw it.
fn log_holds(
    plans: &[Plan],
    held: &mut BTreeMap<String, crate::status::HeldStatus>,
    ctx: &Ctx,
    log: &mut CondLog,
) {
    let before = ctx.shared.lock().scheduler.held.clone();
    for p in plans {
        let key = format!("held {}", p.key);
        match held.get_mut(&p.key) {
            Some(h) => {
                log.holds(&key, Level::Info, h.message.clone());
                h.since_unix = before
                    .get(&p.key)
                    .filter(|b| b.reason == h.reason && b.due_unix == h.due_unix)
                    .map_or_else(now_unix, |b| b.since_unix);
            }
            None => {
                log.ends(&key);
            }
        }
    }
}

/// Moves the bytes a run wrote since the last tick into the drive's account of scheduled
/// runs, and logs (once) a run that reached its hard safety limit (the wear budget itself
/// never stops an admitted run: it was decided up front). The limit itself is held where
/// writes are issued (`SuiteOptions::bound`), which stops the run and records why.
fn account_writes(ctx: &Ctx, r: &RunHandle, now: i64) {
    let total = r.control.written_bytes();
    let before = r.accounted.swap(total, Ordering::AcqRel);
    if total > before {
        ctx.store
            .update(|st| st.add_run_written(&r.drive, now, (total - before) as u128));
    }
    if r.control.write_limit_reached() && !r.limit_logged.swap(true, Ordering::AcqRel) {
        let why = StopReason::SafetyLimit {
            written_bytes: r.control.limit_used_bytes(),
            bound_bytes: r.bound.bytes,
            limit_bytes: r.bound.safety_limit(),
        };
        tracing::error!(run = %r.id, drive = %r.drive, reason = %why.describe(), "safety stop of a scheduled run");
    }
}

/// The upper bound of what a run of `p` writes on `drive`, and the allowance it must fit:
/// (bound, allowance over the period; None when the schedule is unlimited).
fn bound_and_allowance(ctx: &Ctx, drive: &DriveCtl, p: &Plan) -> (WriteBound, Option<f64>) {
    let suite = match &p.fio_job {
        Some((file, limit)) => Ok(suite::fio_job_suite(file, *limit)),
        None => suite::find(&p.suite),
    };
    let target_bytes = match &drive.cfg.file_target {
        Some(ft) => Some(ft.size),
        None => ctx.capacity_of(drive),
    };
    let max = Duration::from_secs(p.schedule.max_duration.max(0) as u64);
    let rate = bound::transfer_ceiling(Some(&drive.cfg.rated));
    let b = match (suite, target_bytes) {
        (Ok(s), Some(t)) => bound::write_bound(&s, &p.scale, t, rate, Some(max)),
        // Without its size (a raw device not read yet) only the time limit bounds it.
        (Ok(s), None) => bound::write_bound(&s, &p.scale, u64::MAX, rate, Some(max)),
        (Err(_), _) => WriteBound {
            bytes: u64::MAX,
            bytes_per_second: rate,
        },
    };
    let allowance = match p.wear_budget {
        ScheduleBudget::Drive => Some(ctx.wear(drive).runs_budget_bytes),
        ScheduleBudget::Unlimited => None,
        ScheduleBudget::Bytes(n) => Some(n as f64),
    };
    (b, allowance)
}

/// What a skip says, with its figures: the same text in the log, the run index, the
/// status page and the API.
pub fn skip_message(bound: u64, remaining: f64, allowance: f64, period_days: u32) -> String {
    format!(
        "skipped: the wear budget for scheduled runs does not fit it: the run may write up to {} ({bound} bytes), and {} ({} bytes) is left of {} per {period_days} days; raise [wear_budget] scheduled_unrated_bytes or scheduled_share_of_rated_writes, state the drive's rated_seq_write_bw (a tighter bound), or set wear_budget = \"unlimited\" on a burn-in schedule",
        bound::human_bytes(bound as f64),
        bound::human_bytes(remaining),
        remaining as u64,
        bound::human_bytes(allowance),
    )
}

/// Records a due run skipped up front: its due time handled (so it is decided, and
/// logged, once), a `skipped` entry in the run index with the figures, the skip counter.
fn skip(ctx: &Ctx, p: &Plan, due: i64, now: i64, bound: WriteBound, message: String) {
    let id = new_run_id(ctx, now, &p.key);
    tracing::warn!(run = %id, schedule = %p.key, bound_bytes = bound.bytes, "scheduled run {message}");
    ctx.store.update(|st| {
        let b = st.schedule_mut(&p.key, now);
        b.start(due, now);
        b.finish(now);
        st.push_run(RunRecord {
            ended: Some(now),
            reason: Some(message.clone()),
            ..p.record(&id, now, RunStatus::Skipped, bound)
        });
    });
    ctx.save_state();
    ctx.drive_status(&p.schedule.drive, |d| {
        let s = d.skipped.entry(p.config_name.clone()).or_default();
        s.count += 1;
        s.reason = "wear_budget".into();
        s.last_unix = now as f64;
        s.last_message = message;
    });
}

/// True (and logged once) while the drive, up, has no health reading yet (the daemon just
/// started; its health thread reads at once): a self-test started by hand that runs now
/// is only known from that reading, so nothing starts before it.
fn unread(ctx: &Ctx, p: &Plan, log: &mut CondLog) -> bool {
    let key = format!("unread {}", p.key);
    let unread = ctx
        .shared
        .lock()
        .drives
        .get(&p.schedule.drive)
        .is_some_and(|d| d.health_state == crate::status::HealthState::NotReadYet);
    if unread {
        log.holds(
            &key,
            Level::Info,
            format!(
                "{}: due, waiting for the drive's first health reading (a self-test may be running)",
                p.key
            ),
        );
    } else {
        log.ends(&key);
    }
    unread
}

/// Starts a due self-test, after persisting its start (so a kill -9 never repeats one).
/// False when it cannot start now (the drive is down, the state cannot be saved); it
/// stays due.
fn try_start_selftest(ctx: &Arc<Ctx>, p: &Plan, due: i64, now: i64, log: &mut CondLog) -> bool {
    let Some(kind) = p.selftest else {
        return false;
    };
    let Some(drive) = startable_drive(ctx, p, &format!("selftest {}: due", p.key), log) else {
        return false;
    };
    let before = ctx.store.update(|st| {
        let before = *st.schedule_mut(&p.key, now);
        st.schedule_mut(&p.key, now).start(due, now);
        before
    });
    if let Err(e) = ctx.store.save() {
        tracing::debug!(selftest = %p.key, error = %e, "cannot save the state; the self-test does not start");
        ctx.store
            .update(|st| *st.schedule_mut(&p.key, now) = before);
        return false;
    }
    super::selftest::spawn(ctx, drive, &p.key, &p.config_name, kind, now)
}

/// The plan's drive when something due may start on it: known, up (re-resolved now; a
/// drive down is logged once, after `what` ("schedule KEY: run due"), and waited for)
/// and read at least once.
fn startable_drive(ctx: &Ctx, p: &Plan, what: &str, log: &mut CondLog) -> Option<Arc<DriveCtl>> {
    let drive = ctx.drives.get(&p.schedule.drive)?.clone();
    drive.refresh_identity();
    let waiting = format!("down {}", p.key);
    if let Err(why) = drive.resolved() {
        log.holds(
            &waiting,
            Level::Info,
            format!("{what}, but the drive is down ({why}); waiting"),
        );
        return None;
    }
    log.ends(&waiting);
    // Nothing starts while the wear ledger is held: a run's or a self-test's start could
    // not be saved, and a run's writes could not be counted.
    if let Some(why) = ctx.store.held() {
        log.holds(
            &format!("ledger {}", p.key),
            Level::Warn,
            format!("{what}, held: {why}"),
        );
        return None;
    }
    (!unread(ctx, p, log)).then_some(drive)
}

/// Starts a due run, after persisting its start. None when it cannot start now (the
/// drive is down or over budget, or the state cannot be saved); it stays due.
fn try_start(
    ctx: &Arc<Ctx>,
    p: &Plan,
    due: i64,
    deadline: i64,
    now: i64,
    log: &mut CondLog,
) -> Option<String> {
    let drive = startable_drive(ctx, p, &format!("schedule {}: run due", p.key), log)?;
    let (bound, allowance) = bound_and_allowance(ctx, &drive, p);
    let used = ctx.store.lock().run_written_in_window(
        &p.schedule.drive,
        now,
        ctx.config.wear_budget.period_days,
    );
    if let super::store::Admission::Skip { remaining } =
        super::store::admit(bound.bytes, allowance, used)
    {
        let allowance = allowance.unwrap_or(f64::INFINITY);
        let message = skip_message(
            bound.bytes,
            remaining,
            allowance,
            ctx.config.wear_budget.period_days,
        );
        skip(ctx, p, due, now, bound, message);
        return None;
    }
    let id = new_run_id(ctx, now, &p.key);
    let books_before = ctx.store.update(|st| {
        let before = *st.schedule_mut(&p.key, now);
        st.schedule_mut(&p.key, now).start(due, now);
        st.push_run(p.record(&id, now, RunStatus::Running, bound));
        before
    });
    if let Err(e) = ctx.store.save() {
        // Without the start on disk a kill could repeat the run: do not start it. Undo the
        // start, so the run stays due and starts once the state can be saved (the store
        // logs the failure once per episode).
        tracing::debug!(schedule = %p.key, error = %e, "cannot save the state; the run does not start");
        ctx.store.update(|st| {
            *st.schedule_mut(&p.key, now) = books_before;
            st.runs.retain(|r| r.id != id);
        });
        return None;
    }
    tracing::info!(run = %id, schedule = %p.key, suite = %p.suite, deadline, bound_bytes = bound.bytes, "scheduled run starts");
    let handle = Arc::new(RunHandle {
        id: id.clone(),
        key: p.key.clone(),
        drive: p.schedule.drive.clone(),
        suite: p.suite.clone(),
        control: RunControl::new(),
        stop: StopCell::default(),
        bound,
        accounted: AtomicU64::new(0),
        limit_logged: AtomicBool::new(false),
        thread: Mutex::new(None),
        started: now,
        began: Instant::now(),
    });
    ctx.runs.lock().insert(handle.drive.clone(), handle.clone());
    let (c, h, scale, fio_job) = (ctx.clone(), handle.clone(), p.scale, p.fio_job.clone());
    let hist_digits = p.hist_digits;
    let spawned = std::thread::Builder::new()
        .name(format!("dp-run-{}", p.schedule.drive))
        .spawn(move || run_thread(c, drive, h, scale, fio_job, hist_digits));
    match spawned {
        Ok(j) => {
            *handle.thread.lock().unwrap_or_else(|e| e.into_inner()) = Some(j);
            Some(id)
        }
        Err(e) => {
            // Counted with the daemon's other threads that could not start (issue 33).
            ctx.shared.lock().threads.start_failures_total += 1;
            ctx.runs.lock().remove(&handle.drive);
            finish(
                ctx,
                &handle,
                RunStatus::Failed,
                None,
                Some(StopReason::Error {
                    message: format!("cannot start a thread: {e}"),
                }),
            );
            None
        }
    }
}

/// A run id not used before in this state directory: `UNIX-KEY`, with `-2`, `-3`... added
/// when a run of the same second is already indexed or has a document (after the wall
/// clock stepped back, a second comes again: its document must not replace an older one).
fn new_run_id(ctx: &Ctx, now: i64, key: &str) -> String {
    let base = format!("{}-{}", now, sanitize(key));
    let taken = |id: &str| {
        ctx.store.lock().runs.iter().any(|r| r.id == id)
            || ctx
                .store
                .dir()
                .documents()
                .iter()
                .any(|d| d.name == format!("{id}.json"))
    };
    let mut id = base.clone();
    let mut k = 1;
    while taken(&id) {
        k += 1;
        id = format!("{base}-{k}");
    }
    id
}

fn sanitize(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

fn run_thread(
    ctx: Arc<Ctx>,
    drive: Arc<DriveCtl>,
    h: Arc<RunHandle>,
    scale: suite::Scale,
    fio_job: Option<(PathBuf, Duration)>,
    hist_digits: Option<u8>,
) {
    // The canaries see the drive held and stop within an interval; wait for them.
    let t0 = Instant::now();
    while drive.active.load(Ordering::SeqCst) > 0 && t0.elapsed() < Duration::from_secs(15) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let outcome = (|| -> Result<(SuiteResult, Option<StopReason>), RunStartError> {
        if drive.active.load(Ordering::SeqCst) > 0 {
            return Err(RunStartError::CanariesBusy);
        }
        let suite = match &fio_job {
            // The job file is read and checked again by the step itself (it may have
            // changed since the config was loaded); fio's own time limit is the
            // schedule's max_duration, which the scheduler enforces first (timed_out).
            Some((file, limit)) => suite::fio_job_suite(file, *limit),
            None => suite::find(&h.suite)?,
        };
        // Every run goes through the write gate, a fio job file's too (see
        // `config::validate`: we cannot prove a job file only reads).
        let target = open_for_run(&drive)?;
        let identity = ctx
            .shared
            .lock()
            .drives
            .get(&h.drive)
            .map(|d| d.identity.clone());
        let opts = SuiteOptions {
            scale,
            drive: identity,
            rated: Some(drive.cfg.rated.clone()),
            seed: None,
            stop: h.stop.clone(),
            hist_digits,
            // Held to its safety limit where writes are issued; a run that reaches it
            // is recorded as a safety stop by `run_suite` itself.
            bound: Some(h.bound),
        };
        let (mut result, err) =
            suite::run_suite(&suite, &target, &opts, &h.control, &mut suite::Quiet);
        if fio_job.is_some() {
            // `fio-job:STEM`, not the generic `fio-job`: the report groups documents by
            // suite, and two job files are two suites.
            result.suite = h.suite.clone();
        }
        // The same reason the document got (`run_suite` asked the same function).
        let why = suite::stop_reason(&err, &h.control, &h.stop);
        Ok((result, why))
    })();
    account_writes(&ctx, &h, now_unix() as i64);
    let (status, result, why) = match outcome {
        Err(e) => (
            RunStatus::Failed,
            None,
            Some(StopReason::Error {
                message: e.to_string(),
            }),
        ),
        Ok((result, why)) => (status_of(why.as_ref(), result.complete), Some(result), why),
    };
    finish(&ctx, &h, status, result, why);
}

/// A run's status from why it stopped (None: it was not stopped).
pub fn status_of(why: Option<&StopReason>, complete: bool) -> RunStatus {
    match why {
        None if complete => RunStatus::Passed,
        None => RunStatus::Failed,
        Some(StopReason::MaxDuration { .. }) => RunStatus::TimedOut,
        Some(StopReason::Signal | StopReason::SafetyLimit { .. }) => RunStatus::Stopped,
        Some(StopReason::Error { .. }) => RunStatus::Failed,
    }
}

/// Why a scheduled run could not start its suite (the run is `failed` with this line).
#[derive(Debug, thiserror::Error)]
enum RunStartError {
    #[error("the drive's canaries did not stop within 15 s")]
    CanariesBusy,
    #[error(transparent)]
    Suite(#[from] suite::SuiteError),
    #[error(transparent)]
    Open(#[from] OpenError),
}

/// Opens the drive's run target through the write gate (suites write).
fn open_for_run(drive: &DriveCtl) -> Result<Target, OpenError> {
    let r = drive.resolved()?;
    let permit = match &drive.cfg.file_target {
        Some(ft) => {
            super::ensure_file_target(ft)?;
            safety::authorize_file_writes(&ft.path, false)?
        }
        None => {
            let info = crate::device::inspect(&r.target)?;
            safety::authorize_block_writes(&info, &super::canary::write_request(drive))?
        }
    };
    Ok(match &drive.cfg.file_target {
        Some(ft) => Target::open_own_file(&r.target, true, Some(&permit), ft.size),
        None => Target::open(&r.target, true, Some(&permit)),
    }?)
}

/// Records the end of a run: result document, index, bookkeeping, gauges; frees the drive.
/// A document that cannot be written is kept in memory ([`Runs`]) and written again on
/// every tick; until then the run is `pending` everywhere (index, API, status page, the
/// `status` of its gauges), never `passed` without a document.
fn finish(
    ctx: &Ctx,
    h: &RunHandle,
    status: RunStatus,
    result: Option<SuiteResult>,
    why: Option<StopReason>,
) {
    // Not the wall clock now: it may have stepped during the run (see `RunHandle`).
    let now = h.ended_at();
    // Bounded: an error may carry a program's output into the log and the status.
    let why = why.map(|w| match w {
        StopReason::Error { message } => StopReason::Error {
            message: crate::process::clip(&message, suite::REASON_BYTES),
        },
        w => w,
    });
    let error = why.as_ref().map(StopReason::describe);
    let written = h.control.written_bytes();
    let mut shown = status;
    let mut note = None;
    let path = match &result {
        None => None,
        Some(r) => match write_result(ctx.store.dir(), &h.id, r) {
            Ok(p) => Some(p),
            Err(e) => {
                tracing::error!(
                    run = %h.id,
                    error = %e,
                    "cannot write the result document; it is kept in memory and written again every second: free space in or make the state directory writable"
                );
                shown = RunStatus::Pending;
                note = Some(pending_note(&e));
                ctx.runs.pending().push(Pending {
                    id: h.id.clone(),
                    drive: h.drive.clone(),
                    suite: h.suite.clone(),
                    status,
                    result: r.clone(),
                    why: why.clone(),
                    attempts: 1,
                });
                None
            }
        },
    };
    match (&status, &error) {
        (RunStatus::Passed, _) => tracing::info!(run = %h.id, "run passed"),
        (s, e) => {
            tracing::warn!(run = %h.id, status = ?s, reason = e.as_deref().unwrap_or(""), written_bytes = written, bound_bytes = h.bound.bytes, "run ended")
        }
    }
    let (last_success, record) = ctx.store.update(|st| {
        st.schedule_mut(&h.key, now).finish(now);
        if let Some(r) = st.run_mut(&h.id) {
            r.status = shown;
            r.ended = Some(now);
            r.result_path = path.clone();
            r.reason = error.clone();
            r.stop = why.clone();
            r.written_bytes = Some(written);
        }
        let record = st.runs.iter().rev().find(|r| r.id == h.id).cloned();
        (last_success_of(st, &h.drive, &h.suite), record)
    });
    ctx.save_state();
    if path.is_some() {
        prune(ctx);
    }
    if let Some(r) = &result {
        let mut summary = summarize(&h.id, r, shown, last_success);
        if let Some(rec) = &record {
            annotate(&mut summary, rec);
        }
        ctx.shared.drive(&h.drive, |d| {
            d.last_runs.insert(h.suite.clone(), summary);
        });
    }
    ctx.shared.drive(&h.drive, |d| {
        d.collectors.insert(
            format!("run:{}", h.suite),
            crate::status::CollectorStatus {
                success: shown == RunStatus::Passed,
                duration_seconds: 0.0,
                last_unix: now as f64,
                error: note.clone().or_else(|| error.clone()),
            },
        );
    });
    ctx.runs.lock().remove(&h.drive);
    // Publish the run's end and the wear it brought together, now: a pass of the
    // scheduler under way may have taken the wear figures before the run's last bytes
    // were accounted, and would otherwise show the run ended beside the older figures.
    ctx.refresh_drives(false);
    let runs = ctx.store.lock().runs.clone();
    let mut s = ctx.shared.lock();
    s.runs = runs;
    if let Some(n) = note {
        s.run_notes.insert(h.id.clone(), n);
    }
}

/// Unix seconds at which the last passed run of `suite` on `drive` ended.
fn last_success_of(st: &crate::schedule::State, drive: &str, suite: &str) -> Option<f64> {
    st.runs
        .iter()
        .rev()
        .find(|r| r.drive == drive && r.suite == suite && r.status == RunStatus::Passed)
        .map(|r| r.ended.unwrap_or(r.started) as f64)
}

fn pending_note(e: &std::io::Error) -> String {
    format!("result pending: not saved: {e}")
}

/// Writes the result documents still pending; those written get their run's real status
/// everywhere (index, API, status page, gauges).
fn retry_pending(ctx: &Ctx) {
    let taken = std::mem::take(&mut *ctx.runs.pending());
    if taken.is_empty() {
        return;
    }
    let dir = ctx.store.dir();
    let mut again = Vec::new();
    let mut written = Vec::new();
    for mut p in taken {
        match write_result(dir, &p.id, &p.result) {
            Ok(path) => {
                tracing::warn!(run = %p.id, failed_attempts = p.attempts, "the result document is saved");
                written.push((p, path));
            }
            Err(e) => {
                p.attempts += 1;
                ctx.shared
                    .lock()
                    .run_notes
                    .insert(p.id.clone(), pending_note(&e));
                again.push(p);
            }
        }
    }
    // What failed again goes back, ahead of anything a run added meanwhile.
    {
        let mut q = ctx.runs.pending();
        let newer = std::mem::take(&mut *q);
        *q = again;
        q.extend(newer);
    }
    if written.is_empty() {
        return;
    }
    for (p, path) in &written {
        let (last_success, record) = ctx.store.update(|st| {
            if let Some(r) = st.run_mut(&p.id) {
                r.status = p.status;
                r.result_path = Some(path.clone());
            }
            let record = st.runs.iter().rev().find(|r| r.id == p.id).cloned();
            (last_success_of(st, &p.drive, &p.suite), record)
        });
        let mut summary = summarize(&p.id, &p.result, p.status, last_success);
        if let Some(rec) = &record {
            annotate(&mut summary, rec);
        }
        let error = p.why.as_ref().map(StopReason::describe);
        ctx.shared.drive(&p.drive, |d| {
            // Unless a later run of the suite has replaced it.
            if d.last_runs.get(&p.suite).is_none_or(|r| r.id == p.id) {
                d.last_runs.insert(p.suite.clone(), summary);
                d.collectors.insert(
                    format!("run:{}", p.suite),
                    crate::status::CollectorStatus {
                        success: p.status == RunStatus::Passed,
                        duration_seconds: 0.0,
                        last_unix: now_unix(),
                        error: error.clone(),
                    },
                );
            }
        });
    }
    ctx.save_state();
    prune(ctx);
    let runs = ctx.store.lock().runs.clone();
    let mut s = ctx.shared.lock();
    s.runs = runs;
    for (p, _) in &written {
        s.run_notes.remove(&p.id);
    }
}

/// The result documents in the state directory's `runs/` (`ID.json`, regular files, not
/// temporary ones), oldest first: (path, bytes).
fn documents(dir: &StateDir) -> Vec<(PathBuf, u64)> {
    dir.documents()
        .into_iter()
        .map(|d| (dir.path_of(Place::Runs, &d.name), d.bytes))
        .collect()
}

/// Which of `docs` (oldest first) go so that at most `keep.keep_documents` are left and
/// they take at most `keep.keep_bytes`: the oldest first.
pub fn over_retention(docs: &[(PathBuf, u64)], keep: crate::config::RunsRetention) -> usize {
    let mut count = docs.len();
    let mut bytes: u64 = docs.iter().map(|d| d.1).sum();
    let mut drop = 0;
    for (_, n) in docs {
        if count <= keep.keep_documents && bytes <= keep.keep_bytes {
            break;
        }
        count -= 1;
        bytes -= n;
        drop += 1;
    }
    drop
}

/// Applies the retention policy (`[runs]` in the config) to the result documents: the
/// oldest are deleted while there are too many or they take too much, and their runs
/// leave the index (so every run listed with a report has its document). Only regular
/// files in the state directory's own `runs/` are listed or deleted, through its handle.
pub fn prune(ctx: &Ctx) {
    prune_dir(&ctx.store, ctx.config.runs);
}

fn prune_dir(store: &super::store::Store, keep: crate::config::RunsRetention) {
    let dir = store.dir();
    let docs = documents(dir);
    let n = over_retention(&docs, keep);
    if n == 0 {
        return;
    }
    let mut gone = BTreeSet::new();
    for (p, _) in &docs[..n] {
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        match dir.remove(Place::Runs, name) {
            Ok(_) => {
                gone.insert(p.clone());
            }
            Err(e) => {
                tracing::warn!(path = %p.display(), error = %e, "cannot delete an old result document");
            }
        }
    }
    tracing::info!(
        deleted = gone.len(),
        keep_documents = keep.keep_documents,
        keep_bytes = keep.keep_bytes,
        "old result documents deleted (the [runs] retention)"
    );
    let names: BTreeSet<&std::ffi::OsStr> = gone.iter().filter_map(|p| p.file_name()).collect();
    store.update(|st| {
        st.runs.retain(|r| {
            r.result_path
                .as_ref()
                .and_then(|p| p.file_name())
                .is_none_or(|n| !names.contains(n))
        });
    });
}

/// At start: removes what an interrupted write left in `runs/` (temporary files of
/// result documents; a link at such a name is removed, not followed), and applies the
/// retention policy.
pub fn start_cleanup(store: &super::store::Store, keep: crate::config::RunsRetention) {
    let dir = store.dir();
    for (name, _) in dir.names(Place::Runs).unwrap_or_default() {
        if name.starts_with('.') && name.ends_with(".json.tmp") {
            let path = dir.path_of(Place::Runs, &name);
            match dir.remove(Place::Runs, &name) {
                Ok(_) => {
                    tracing::info!(path = %path.display(), "removed a temporary file an interrupted write left")
                }
                Err(err) => {
                    tracing::warn!(path = %path.display(), error = %err, "cannot remove a temporary file an interrupted write left")
                }
            }
        }
    }
    prune_dir(store, keep);
    if let Err(e) = store.save_if_dirty() {
        tracing::debug!(error = %e, "cannot save the state after the cleanup");
    }
}

/// Writes the result document atomically into the state directory's `runs/`, following
/// no link; returns its path.
pub fn write_result(dir: &StateDir, id: &str, r: &SuiteResult) -> std::io::Result<PathBuf> {
    let name = format!("{id}.json");
    let json = serde_json::to_vec(r).map_err(std::io::Error::other)?;
    dir.write_atomic(Place::Runs, &name, &json)?;
    Ok(dir.path_of(Place::Runs, &name))
}

/// The result document of run `id`, read back from the state directory's own `runs/`
/// (whatever path its record names: a record cannot point the daemon at another file),
/// bounded and without blocking.
pub fn read_result(
    dir: &StateDir,
    id: &str,
) -> Result<Option<Vec<u8>>, crate::statedir::ReadError> {
    if !crate::http::routes::valid_run_id(id) {
        return Ok(None);
    }
    dir.read(
        Place::Runs,
        &format!("{id}.json"),
        crate::statedir::MAX_DOCUMENT_BYTES,
    )
}

pub fn status_name(s: RunStatus) -> &'static str {
    match s {
        RunStatus::Running => "running",
        RunStatus::Passed => "passed",
        RunStatus::Failed => "failed",
        RunStatus::TimedOut => "timed_out",
        RunStatus::Interrupted => "interrupted",
        RunStatus::Stopped => "stopped",
        RunStatus::Pending => "pending",
        RunStatus::Skipped => "skipped",
    }
}

/// The gauges' view of a result document: one point per measured workload point.
pub fn summarize(
    id: &str,
    r: &SuiteResult,
    status: RunStatus,
    last_success: Option<f64>,
) -> RunSummary {
    let mut points = Vec::new();
    let mut steady: Option<bool> = None;
    let mut app_points = Vec::new();
    let point =
        |w: &WorkloadDesc, suffix: &str, workers: u32, depth: u32, round: &Round| RunPoint {
            workload: format!("{}{}", w.name, suffix),
            threads: workers,
            depth,
            iops: round.iops,
            bandwidth_bytes_per_second: round.read.bw_bytes + round.write.bw_bytes,
            latency: RunLatency {
                mean: round.lat_mean_ns / 1e9,
                max: round.lat_max_ns as f64 / 1e9,
                stddev: round.lat_stddev_ns / 1e9,
                p50: combined(round, |d| d.lat_p50_ns) / 1e9,
                p99: combined(round, |d| d.lat_p99_ns) / 1e9,
                p99_9: combined(round, |d| d.lat_p99_9_ns) / 1e9,
            },
        };
    for ph in &r.phases {
        match ph {
            Phase::SteadyState {
                workload,
                steady: s,
                steady_figures,
                ..
            } => {
                steady = Some(steady.unwrap_or(true) && s.attained);
                points.push(point(
                    workload,
                    "",
                    workload.workers,
                    workload.depth,
                    steady_figures,
                ));
            }
            Phase::Sweep {
                workload,
                points: ps,
            } => {
                for sp in ps {
                    points.push(point(workload, "", sp.workers, sp.depth, &sp.round));
                }
            }
            Phase::RateCurve {
                workload,
                points: ps,
                ..
            } => {
                for cp in ps {
                    let suffix = format!("@{:.0}%", cp.fraction * 100.0);
                    points.push(point(
                        workload,
                        &suffix,
                        workload.workers,
                        workload.depth,
                        &cp.round,
                    ));
                }
            }
            Phase::Point { workload, round } => {
                points.push(point(workload, "", workload.workers, workload.depth, round));
            }
            Phase::WriteSaturation {
                workload, rounds, ..
            } => {
                if let Some(last) = rounds.last() {
                    points.push(point(workload, "", workload.workers, workload.depth, last));
                }
            }
            Phase::App { points: ps, .. } => {
                for p in ps {
                    app_points.push(crate::status::AppRunPoint {
                        workload: p.workload.clone(),
                        threads: p.threads,
                        ops_per_second: p.ops_per_second,
                        latency_mean: p.lat_mean_ns / 1e9,
                        latency_p99: p.lat_p99_ns / 1e9,
                    });
                }
            }
            // The highest rate at which every QoS limit held, as the row's point.
            Phase::Qos { workload, qos } => {
                let best = qos
                    .probes
                    .iter()
                    .filter(|p| p.pass)
                    .max_by(|a, b| a.target_iops.total_cmp(&b.target_iops));
                if let Some(b) = best {
                    points.push(point(
                        workload,
                        "@qos",
                        workload.workers,
                        workload.depth,
                        &b.round,
                    ));
                }
            }
            Phase::Purge { .. } | Phase::Precondition { .. } | Phase::Fill { .. } => {}
            Phase::Pts(t) => {
                for (w, round) in crate::protocol::pts::status_points(t) {
                    points.push(point(w, "", w.workers, w.depth, round));
                }
            }
        }
    }
    let mut app_seen = BTreeMap::new();
    for p in app_points {
        app_seen.insert((p.workload.clone(), p.threads), p);
    }
    // One series per label set: a later point with the same labels replaces an earlier one.
    let mut seen = BTreeMap::new();
    for p in points {
        seen.insert((p.workload.clone(), p.threads, p.depth), p);
    }
    RunSummary {
        id: id.to_string(),
        suite: r.suite.clone(),
        status: status_name(status).to_string(),
        reason: r.incomplete_reason.clone(),
        reason_label: "none".to_string(),
        written_bytes: 0,
        write_bound_bytes: None,
        started_unix: r.started_unix_seconds,
        duration_seconds: (r.ended_unix_seconds - r.started_unix_seconds).max(0.0),
        steady_state: steady,
        last_success_unix: last_success,
        points: seen.into_values().collect(),
        app_points: app_seen.into_values().collect(),
    }
}

/// Adds what the run index knows of a run (why it stopped, what it wrote, its bound) to
/// its gauges' summary.
pub fn annotate(summary: &mut RunSummary, record: &RunRecord) {
    summary.reason = record.reason.clone();
    summary.reason_label = record
        .stop
        .as_ref()
        .map_or("none", StopReason::label)
        .to_string();
    summary.written_bytes = record.written_bytes.unwrap_or(0);
    summary.write_bound_bytes = record.write_bound_bytes;
}

/// A percentile of a round over both directions: the larger of the directions that ran
/// (the round keeps percentiles per direction only).
fn combined(round: &Round, f: impl Fn(&crate::protocol::result::DirFigures) -> u64) -> f64 {
    let mut v = 0u64;
    if round.read.ops > 0 {
        v = v.max(f(&round.read));
    }
    if round.write.ops > 0 {
        v = v.max(f(&round.write));
    }
    v as f64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::RunsRetention;

    #[test]
    fn a_runs_status_follows_why_it_stopped() {
        let e = StopReason::Error {
            message: "x".into(),
        };
        let safety = StopReason::SafetyLimit {
            written_bytes: 3,
            bound_bytes: 1,
            limit_bytes: 2,
        };
        assert_eq!(status_of(None, true), RunStatus::Passed);
        assert_eq!(status_of(None, false), RunStatus::Failed);
        assert_eq!(status_of(Some(&e), true), RunStatus::Failed);
        assert_eq!(
            status_of(Some(&StopReason::Signal), false),
            RunStatus::Stopped
        );
        assert_eq!(status_of(Some(&safety), false), RunStatus::Stopped);
        assert_eq!(
            status_of(Some(&StopReason::MaxDuration { limit_seconds: 1 }), false),
            RunStatus::TimedOut
        );
        let m = skip_message(333 << 30, 1024.0, 2048.0, 30);
        assert!(m.starts_with("skipped: "), "{m}");
        assert!(
            m.contains("333.0 GiB")
                && m.contains("1.0 KiB (1024 bytes) is left of 2.0 KiB per 30 days"),
            "{m}"
        );
    }

    #[test]
    fn retention_drops_the_oldest_by_count_and_by_bytes() {
        let docs: Vec<(PathBuf, u64)> = (0..10)
            .map(|i| (PathBuf::from(format!("{i}")), 100))
            .collect();
        let keep = |n, b| RunsRetention {
            keep_documents: n,
            keep_bytes: b,
        };
        assert_eq!(over_retention(&docs, keep(10, 1000)), 0);
        assert_eq!(over_retention(&docs, keep(4, 1000)), 6);
        assert_eq!(over_retention(&docs, keep(10, 350)), 7);
        assert_eq!(over_retention(&docs, keep(2, 350)), 8);
        assert_eq!(over_retention(&docs, keep(1, 50)), 10);
        assert_eq!(over_retention(&[], keep(1, 0)), 0);
    }

    #[test]
    fn a_failed_document_write_leaves_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let sd = StateDir::open(dir.path()).unwrap();
        let runs = dir.path().join("runs");
        // The document's place is a non-empty directory: the rename fails.
        std::fs::create_dir(runs.join("r1.json")).unwrap();
        std::fs::write(runs.join("r1.json").join("x"), b"x").unwrap();
        let doc: SuiteResult = serde_json::from_str(include_str!(
            "../../../../tests/fixtures/results/enterprise-sata-5100eco.json"
        ))
        .unwrap();
        assert!(write_result(&sd, "r1", &doc).is_err());
        assert!(!runs.join(".r1.json.tmp").exists());
    }

    fn plan(key: &str, drive: &str) -> Plan {
        Plan {
            schedule: plan_mod::Schedule {
                name: key.into(),
                drive: drive.into(),
                cron: plan_mod::Cron::parse("0 * * * *").unwrap(),
                window: None,
                max_duration: 60,
            },
            key: key.into(),
            config_name: "s".into(),
            suite: "latency".into(),
            scale: suite::Scale::named("quick").unwrap(),
            fio_job: None,
            wear_budget: ScheduleBudget::Unlimited,
            selftest: None,
            hist_digits: None,
        }
    }

    /// Issue 33: a run held by a self-test was held silently. Each hold says what holds
    /// which drive, for which schedule; a wait is a hold only when a step of the clock
    /// makes it one.
    #[test]
    fn a_held_schedule_names_its_drive_what_holds_it_and_why() {
        let p = plan("s/a", "a");
        let b = plan_mod::Bookkeeping::new(0);
        let holders: BTreeMap<String, (&'static str, String)> = [(
            "a".to_string(),
            ("selftest", "drive a is running self-test t/a".to_string()),
        )]
        .into();
        let h = hold(&p, &Decision::DriveBusy { due: 3600 }, &b, 3641, &holders).unwrap();
        assert_eq!((h.reason.as_str(), h.due_unix), ("selftest", 3600));
        assert!(
            h.message
                .starts_with("s/a: due, held: drive a is running self-test t/a"),
            "{}",
            h.message
        );
        // Held in this pass by a schedule before it.
        let h = hold(
            &p,
            &Decision::DriveBusy { due: 3600 },
            &b,
            3641,
            &BTreeMap::new(),
        );
        assert_eq!(h.unwrap().reason, "run");
        // Waiting for its next due time: not held.
        let wait = Decision::Wait { until: 7200 };
        assert_eq!(hold(&p, &wait, &b, 3641, &holders), None);
        // Waiting behind a due time handled before the clock stepped back: held.
        let mut b = b;
        b.start(7200, 7205);
        b.finish(7260);
        let h = hold(&p, &Decision::Wait { until: 10_800 }, &b, 3700, &holders).unwrap();
        assert_eq!((h.reason.as_str(), h.due_unix), ("clock", 7200));
        assert!(h.message.contains("stepped back"), "{}", h.message);
    }

    /// A step of the wall clock during a run gives an `ended` at its start plus the
    /// monotonic time it took, never before `started`.
    #[test]
    fn a_runs_end_counts_from_its_start_on_the_monotonic_clock() {
        assert_eq!(ended_from(1_000, Duration::from_millis(90_500)), 1_090);
        assert_eq!(ended_from(i64::MAX - 1, Duration::from_secs(10)), i64::MAX);
    }
}
