//! One canary probe on one drive: a dedicated thread that runs the probe's rate-limited
//! job in segments, for as long as the daemon runs. A rate-limited QD1 segment's I/O is
//! issued by the reactor every canary shares (`super::reactor`), and this thread sleeps
//! through it, waking only for the checks that may block; other jobs run on the engine.
//!
//! Before each segment it checks that the drive is up (its identity resolved), that no
//! scheduled run holds the drive, and, for a probe that writes, that the drive's wear
//! budget for today is not spent. The segment's `on_interval` (once a second) feeds the
//! sliding window, publishes the probe's status, accounts the bytes written, beats the
//! heartbeat, and stops the segment as soon as one of those conditions stops holding, so
//! a pause takes effect within an interval.

use std::collections::VecDeque;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::config::Probe;
use crate::engine::{self, RunControl, Stop};
use crate::safety::{self, WriteRequest};
use crate::status::{CollectorStatus, CpuWait, ProbeState};
use crate::target::Target;

use super::canary_io;
use super::reactor;
use super::sliding::OpWindow;
use super::standby::StandbyCheck;
use super::{now_unix, Ctx, DriveCtl, OpenError};
use crate::condlog::{CondLog, Level};

/// The longest one engine run of a canary lasts. Conditions are checked every interval,
/// so this only bounds how long one set of engine threads and buffers lives.
pub const SEGMENT: Duration = Duration::from_secs(6 * 3600);
/// How often a running canary checks that its file target is still the file it opened.
const RECHECK_FILE: Duration = Duration::from_secs(5);

pub fn collector_name(probe: &str) -> String {
    format!("{COLLECTOR_PREFIX}{probe}")
}

/// What every canary collector's name starts with.
pub const COLLECTOR_PREFIX: &str = "canary:";

/// The canary thread's body. Returns when the daemon (or this drive's workers) stop.
///
/// The probe's [`ProbeState`] is this thread's alone: it is set here, where each
/// transition happens (a hold seen before or during a segment, a segment started, a
/// failure), and every surface renders it. Nothing else decides whether a probe runs.
pub fn run(ctx: Arc<Ctx>, drive: Arc<DriveCtl>, probe: Probe, beat: Arc<super::Beat>) {
    let name = drive.cfg.name.clone();
    let standby = StandbyCheck::new(probe.job.to_spec().rate.map(|r| r.iops)).class_rotational(
        ctx.config
            .discovered
            .get(&name)
            .map(|d| d.class == crate::config::Class::Hdd),
    );
    let mut c = Canary {
        win: Windows::new(probe.window.as_secs_f64()),
        clock: Instant::now(),
        backoff: Duration::from_secs(1),
        collector: collector_name(&probe.name),
        log: CondLog::new(format!("drive {name}, probe {}", probe.name)),
        state: ProbeState::Starting,
        standby,
        name,
        ctx,
        drive,
        probe,
        beat,
    };
    c.publish();
    while !c.drive.stopped() {
        c.pass();
    }
    // A stop (shutdown, reload) ends no condition: a pause or failure goes on, and the
    // next generation logs it again if it still holds.
    c.log.close();
    c.state = ProbeState::Stopped;
    c.publish();
}

/// A canary's thread: what it watches, and what it carries from one segment to the next.
struct Canary {
    ctx: Arc<Ctx>,
    drive: Arc<DriveCtl>,
    probe: Probe,
    beat: Arc<super::Beat>,
    name: String,
    collector: String,
    win: Windows,
    /// The thread's start: the windows' time axis.
    clock: Instant,
    /// How long to wait after a failure (doubled each time, up to 30 s).
    backoff: Duration,
    log: CondLog,
    state: ProbeState,
    standby: StandbyCheck,
}

impl Canary {
    fn publish(&self) {
        publish(&self.ctx, &self.name, &self.probe, &self.win, &self.state);
    }

    /// One pass of the loop: a hold is waited out, else a segment runs (opened, counted
    /// active, run, and its end judged).
    fn pass(&mut self) {
        self.beat.beat();
        let now = self.clock.elapsed().as_secs_f64();
        self.win.expire(now);
        if let Some(hold) = hold_reason(&self.ctx, &self.drive, &self.probe, &mut self.standby) {
            self.state = hold.state();
            self.publish();
            log_hold(&mut self.log, &self.state);
            self.drive.sleep(Duration::from_secs(1));
            return;
        }
        self.log.ends("hold");
        let Some((target, job)) = self.prepare() else {
            return;
        };
        let control = RunControl::new().discarding_intervals();
        // The file target's identity as opened, taken at once: a file replaced from here
        // on is seen as changed.
        let opened = (identity_of(target.path()), Instant::now());
        // Count this canary active, then look again: a run that took the drive meanwhile
        // (it registers first, then waits for the count to reach zero) is seen here.
        self.drive.active.fetch_add(1, Ordering::SeqCst);
        if hold_reason(&self.ctx, &self.drive, &self.probe, &mut self.standby).is_some() {
            self.drive.active.fetch_sub(1, Ordering::SeqCst);
            return;
        }
        self.state = ProbeState::Running;
        self.publish();
        let result = self.segment(&job, &target, &control, opened);
        self.drive.active.fetch_sub(1, Ordering::SeqCst);
        drop(target);
        self.ended(result, &control);
        self.publish();
    }

    /// Opens the target and makes the segment's job; a failure is the probe's state, logged
    /// once, and waited out (None).
    fn prepare(&mut self) -> Option<(Target, engine::Job)> {
        let setup = Instant::now();
        let target = match open_target(&self.drive, &self.probe) {
            Ok(t) => t,
            Err(e) => {
                let e = e.to_string();
                set_collector(
                    &self.ctx,
                    &self.name,
                    &self.collector,
                    false,
                    setup.elapsed(),
                    Some(e.clone()),
                );
                self.state = ProbeState::Failing { reason: e.clone() };
                self.publish();
                self.log.holds(
                    "fail:start",
                    Level::Warn,
                    format!("canary cannot start: {e}"),
                );
                self.drive.sleep(self.backoff);
                self.backoff = (self.backoff * 2).min(Duration::from_secs(30));
                return None;
            }
        };
        self.log.ends("fail:start");
        let job = match segment_job(&self.probe) {
            Ok(j) => j,
            Err(e) => {
                // Config validation made this job; only the stop condition changed.
                self.state = ProbeState::Failing {
                    reason: format!("canary job: {e}"),
                };
                self.publish();
                self.log
                    .holds("fail:job", Level::Error, format!("canary job: {e}"));
                self.drive.sleep(Duration::from_secs(30));
                return None;
            }
        };
        self.log.ends("fail:job");
        set_collector(
            &self.ctx,
            &self.name,
            &self.collector,
            true,
            setup.elapsed(),
            None,
        );
        Some((target, job))
    }

    /// Runs one segment. A rate-limited QD1 probe runs on the reactor shared by every
    /// canary (see `reactor`), or on this thread where the reactor cannot run (see
    /// `canary_io`); others, on the engine's workers.
    /// `opened`: the file target's identity when it was opened, and when that was.
    fn segment(
        &mut self,
        job: &engine::Job,
        target: &Target,
        control: &RunControl,
        (opened, mut last_check): (Option<(u64, u64, u64)>, Instant),
    ) -> Result<Segment, SegmentFailed> {
        let own_loop = canary_io::can_run(job);
        if own_loop {
            if let Some(reactor) = reactor::global().filter(|_| reactor::Reactor::takes(target)) {
                let seg = ReactorSegment {
                    ctx: &self.ctx,
                    drive: &self.drive,
                    probe: &self.probe,
                    beat: &self.beat,
                    clock: self.clock,
                    job,
                    target,
                    opened,
                    control,
                };
                return seg
                    .run(reactor, &mut self.win, &mut self.state, &mut self.standby)
                    .map(|()| Segment::default());
            }
        }
        let threads = job.workers().max(1);
        let Canary {
            ctx,
            drive,
            probe,
            beat,
            name,
            win,
            clock,
            state,
            standby,
            ..
        } = self;
        // One interval's figures, from the engine or the canary's own loop: its length in
        // seconds per thread, the threads' CPU wait, the drive's figures per direction
        // and, from the canary's own loop, the host's stall per I/O.
        let mut observe = |iv: &Figures| {
            beat.beat();
            let t = clock.elapsed().as_secs_f64();
            add_interval(ctx, name, win, t, threads, iv);
            // The transition to a hold happens here, with the status that says so: the
            // probe is never shown running once it has seen it must stop.
            if let Some(hold) = hold_reason(ctx, drive, probe, standby) {
                *state = hold.state();
                control.stop();
            }
            publish(ctx, name, probe, win, state);
            // Checked every few seconds, and at once after an interval with errors (a
            // truncated file fails every read past its new end).
            let errors = iv.read.errors + iv.write.errors > 0;
            if drive.cfg.file_target.is_some() && (errors || last_check.elapsed() >= RECHECK_FILE) {
                last_check = Instant::now();
                if file_target_changed(name, probe, target, opened) {
                    control.stop();
                }
            }
        };
        if own_loop {
            let mut host = canary_io::HostClock::for_this_thread();
            canary_io::run_segment(job, target, control, &mut host, &mut |iv| {
                observe(&Figures {
                    seconds: iv.seconds,
                    run_delay: iv.run_delay_seconds,
                    read: iv.read,
                    write: iv.write,
                    stall: Some(iv.stall),
                })
            })
            .map(|()| Segment::default())
            .map_err(SegmentFailed::Loop)
        } else {
            let mut interval_start = 0.0;
            engine::run_observed(job, target, control, &mut |s, d| {
                let seconds = s.end_seconds - interval_start;
                interval_start = s.end_seconds;
                observe(&Figures {
                    seconds,
                    run_delay: s.run_delay_seconds,
                    read: d.read,
                    write: d.write,
                    stall: None,
                })
            })
            .map(|r| Segment {
                mismatches: r.verify.mismatches,
                first_mismatch: r.verify.first.first().copied(),
                stopped_early: r.stopped_early,
            })
            .map_err(SegmentFailed::Engine)
        }
    }

    /// Judges a segment's end: corruption said loudly, an early end or a failure made the
    /// probe's state and waited out.
    fn ended(&mut self, result: Result<Segment, SegmentFailed>, control: &RunControl) {
        match result {
            Ok(r) => {
                self.backoff = Duration::from_secs(1);
                self.log.ends("fail:run");
                if r.mismatches > 0 {
                    // Silent corruption: counted as read errors, and said loudly.
                    for _ in 0..r.mismatches {
                        self.win.r.add_mismatch();
                    }
                    tracing::error!(drive = %self.name, probe = %self.probe.name,
                        mismatches = r.mismatches,
                        first = ?r.first_mismatch,
                        "canary read back data that differs from what it wrote");
                }
                match &r.stopped_early {
                    Some(why) if !control.is_stopped() => {
                        self.state = ProbeState::Failing {
                            reason: format!("segment ended early: {why}"),
                        };
                        self.publish();
                        self.log.holds(
                            "fail:early",
                            Level::Warn,
                            format!("canary segment ended early: {why}"),
                        );
                        self.drive.sleep(self.backoff);
                    }
                    _ => {
                        self.log.ends("fail:early");
                    }
                }
            }
            Err(e) => {
                let msg = e.to_string();
                set_collector(
                    &self.ctx,
                    &self.name,
                    &self.collector,
                    false,
                    Duration::ZERO,
                    Some(msg.clone()),
                );
                self.state = ProbeState::Failing {
                    reason: msg.clone(),
                };
                self.publish();
                self.log
                    .holds("fail:run", Level::Warn, format!("canary run failed: {msg}"));
                self.drive.sleep(self.backoff);
                self.backoff = (self.backoff * 2).min(Duration::from_secs(30));
            }
        }
    }
}

/// Logs the start of a hold (drive down, paused). A failure episode open before it
/// (`fail:*`, the canary could not start) has not ended: it stays open, and is logged as
/// ended only when the canary gets past it.
fn log_hold(log: &mut CondLog, state: &ProbeState) {
    if let Some(why) = state.reason() {
        log.holds(
            "hold",
            Level::Info,
            format!("canary {}: {why}", state.name()),
        );
    }
}

/// Why a canary may not run now.
#[derive(Debug, Clone, PartialEq)]
enum Hold {
    Stopping,
    Down(String),
    Paused(String),
}

impl Hold {
    fn state(&self) -> ProbeState {
        match self {
            Hold::Stopping => ProbeState::Stopped,
            Hold::Down(reason) => ProbeState::DriveDown {
                reason: reason.clone(),
            },
            Hold::Paused(reason) => ProbeState::Paused {
                reason: reason.clone(),
            },
        }
    }
}

/// Why the canary may not run now, if it may not. A rotational disk is asked last
/// whether it sleeps (see [`super::standby`]): only when nothing else holds the canary.
fn hold_reason(
    ctx: &Ctx,
    drive: &DriveCtl,
    probe: &Probe,
    standby: &mut StandbyCheck,
) -> Option<Hold> {
    let resolved = match unheld(ctx, drive, probe) {
        Ok(r) => r,
        Err(hold) => return Some(hold),
    };
    standby
        .asleep(&drive.cfg.name, resolved.device.as_deref())
        .map(Hold::Paused)
}

/// The holds that are known without asking a device (nothing here blocks): stopping, the
/// drive down, a scheduled run, the wear budget.
fn quick_hold(ctx: &Ctx, drive: &DriveCtl, probe: &Probe) -> Option<Hold> {
    unheld(ctx, drive, probe).err()
}

/// Where the drive is when none of [`quick_hold`]'s holds applies, else that hold.
fn unheld(ctx: &Ctx, drive: &DriveCtl, probe: &Probe) -> Result<super::Resolved, Hold> {
    if drive.stopped() {
        return Err(Hold::Stopping);
    }
    let resolved = drive.resolved().map_err(|e| Hold::Down(e.to_string()))?;
    if let Some(p) = drive.paused() {
        return Err(Hold::Paused(p));
    }
    if probe.writes {
        if let Some(why) = ctx.store.held() {
            return Err(Hold::Paused(format!("held: {why}")));
        }
    }
    if probe.writes && ctx.over_budget(drive) {
        return Err(Hold::Paused(
            "the canaries' wear budget for today is spent".into(),
        ));
    }
    Ok(resolved)
}

/// One interval's figures, from any of the loops.
struct Figures<'a> {
    /// Its length, seconds per thread.
    seconds: f64,
    /// Seconds the threads waited, runnable, for a CPU.
    run_delay: f64,
    read: &'a engine::DirStats,
    write: &'a engine::DirStats,
    /// The host's stall per I/O (the canary's own loop and the reactor time it).
    stall: Option<&'a engine::DirStats>,
}

/// One interval into the windows (at `t` seconds on the canary's clock), and the bytes
/// it wrote into the wear account.
fn add_interval(ctx: &Ctx, name: &str, win: &mut Windows, t: f64, threads: u32, iv: &Figures) {
    win.r.add(t, iv.read);
    win.w.add(t, iv.write);
    if let Some(stall) = iv.stall {
        win.stall.add(t, stall);
    }
    let wall = iv.seconds.max(0.0) * f64::from(threads);
    win.cpu
        .add(t, iv.run_delay, wall, threads, iv.read.ops + iv.write.ops);
    if iv.write.bytes > 0 {
        let bytes = iv.write.bytes as u128;
        ctx.store
            .update(|s| s.add_self_written(name, now_unix() as i64, bytes));
    }
}

/// Whether a file target changed under the canary (said in the log): deleted, replaced
/// or truncated since it was opened (`opened`), or, for a writing probe, its filesystem
/// made read-only. The segment then stops, and the target is opened again.
fn file_target_changed(
    name: &str,
    probe: &Probe,
    target: &Target,
    opened: Option<(u64, u64, u64)>,
) -> bool {
    if identity_of(target.path()) != opened {
        tracing::warn!(drive = %name, probe = %probe.name, "the file target was deleted, replaced or truncated; reopening it");
        return true;
    }
    if probe.writes && read_only_now(target.path()) {
        // The kernel lets an open descriptor go on writing; the operator's read-only
        // mount is honoured by reopening (which then fails and holds).
        tracing::warn!(drive = %name, probe = %probe.name, "the file target's filesystem is read-only now; the writing probe stops until it is writable");
        return true;
    }
    false
}

/// How often at most a canary on the reactor wakes its own thread: to check its file
/// target or ask its disk whether it sleeps, when it has those, and to see the daemon
/// stopping while its segment's I/O is stuck in a drive that does not answer.
const IDLE_CHECK: Duration = Duration::from_secs(5);

/// A segment on the reactor: what it needs of the canary.
struct ReactorSegment<'a> {
    ctx: &'a Arc<Ctx>,
    drive: &'a Arc<DriveCtl>,
    probe: &'a Probe,
    beat: &'a Arc<super::Beat>,
    clock: Instant,
    job: &'a engine::Job,
    target: &'a Target,
    /// The file target's identity when it was opened.
    opened: Option<(u64, u64, u64)>,
    control: &'a RunControl,
}

impl ReactorSegment<'_> {
    /// Runs the segment: its interval work (windows, wear, the holds known without asking
    /// a device, the status) on the reactor's observer thread, and here, at their own
    /// period, the checks that may block (whether a rotational disk sleeps, whether a
    /// file target changed). `win` and `state` are the interval work's while it runs.
    fn run(
        &self,
        reactor: &reactor::Reactor,
        win: &mut Windows,
        state: &mut ProbeState,
        standby: &mut StandbyCheck,
    ) -> Result<(), SegmentFailed> {
        let window = self.probe.window.as_secs_f64();
        let live = Arc::new(Mutex::new((
            std::mem::replace(win, Windows::new(window)),
            state.clone(),
        )));
        let observer: reactor::Observer = {
            let ctx = self.ctx.clone();
            let drive = self.drive.clone();
            let probe = self.probe.clone();
            let beat = self.beat.clone();
            let control = self.control.clone();
            let live = live.clone();
            let clock = self.clock;
            let name = drive.cfg.name.clone();
            Box::new(move |iv: &canary_io::Interval| {
                // An I/O out for a second or more: the canary is not beating (the
                // supervisor says which drives do not answer, as when a canary's own
                // thread was blocked in the call).
                if iv.in_flight_seconds < 1.0 {
                    beat.beat();
                }
                let t = clock.elapsed().as_secs_f64();
                let mut g = live.lock().unwrap_or_else(|e| e.into_inner());
                let (win, state) = &mut *g;
                let figures = Figures {
                    seconds: iv.seconds,
                    run_delay: iv.run_delay_seconds,
                    read: iv.read,
                    write: iv.write,
                    stall: Some(iv.stall),
                };
                add_interval(&ctx, &name, win, t, 1, &figures);
                if let Some(hold) = quick_hold(&ctx, &drive, &probe) {
                    *state = hold.state();
                    control.stop();
                }
                publish(&ctx, &name, &probe, win, state);
            })
        };
        let result = match reactor.start_segment(self.job, self.target, self.control, observer) {
            Err(e) => Err(SegmentFailed::Loop(e)),
            Ok(seg) => self.wait(&seg, &live, standby),
        };
        let mut g = live.lock().unwrap_or_else(|e| e.into_inner());
        let (w, s) = std::mem::replace(&mut *g, (Windows::new(window), ProbeState::Starting));
        *win = w;
        *state = s;
        result
    }

    /// Waits for the segment's end, doing the checks that may block at their period.
    fn wait(
        &self,
        seg: &reactor::Segment,
        live: &Mutex<(Windows, ProbeState)>,
        standby: &mut StandbyCheck,
    ) -> Result<(), SegmentFailed> {
        let name = &self.drive.cfg.name;
        let file = self.drive.cfg.file_target.is_some();
        let mut period = IDLE_CHECK;
        if file {
            period = period.min(RECHECK_FILE);
        }
        if standby.asks() {
            period = period.min(standby.every());
        }
        loop {
            match seg.wait(period) {
                reactor::Wait::Done => return Ok(()),
                reactor::Wait::Lost => {
                    self.control.stop();
                    return Err(SegmentFailed::ReactorLost);
                }
                reactor::Wait::Errors | reactor::Wait::TimedOut => {}
            }
            if self.drive.stopped() {
                // The daemon stops (or reloads): the reactor ends the segment within an
                // interval or so, unless its I/O is stuck in a drive that does not answer;
                // then it ends when that I/O completes, and the generation does not wait.
                self.control.stop();
                for _ in 0..3 {
                    if matches!(
                        seg.wait(Duration::from_secs(1)),
                        reactor::Wait::Done | reactor::Wait::Lost
                    ) {
                        break;
                    }
                }
                return Ok(());
            }
            if standby.asks() {
                let device = self.drive.resolved().ok().and_then(|r| r.device);
                if let Some(why) = standby.asleep(name, device.as_deref()) {
                    live.lock().unwrap_or_else(|e| e.into_inner()).1 =
                        ProbeState::Paused { reason: why };
                    self.control.stop();
                }
            }
            if file && file_target_changed(name, self.probe, self.target, self.opened) {
                self.control.stop();
            }
        }
    }
}

/// Why a canary's segment failed (its probe's state, and logged).
#[derive(Debug, thiserror::Error)]
enum SegmentFailed {
    #[error(transparent)]
    Engine(engine::EngineError),
    /// On the reactor or the canary's own thread.
    #[error(transparent)]
    Loop(canary_io::SegmentError),
    #[error(
        "the canary reactor's threads ended; the next segment runs on the canary's own thread"
    )]
    ReactorLost,
}

/// How a segment ended, from either loop.
#[derive(Debug, Default)]
struct Segment {
    mismatches: u64,
    first_mismatch: Option<crate::engine::verify::Mismatch>,
    stopped_early: Option<String>,
}

/// The probe's sliding windows: the drive's latency per direction, the host's stall per
/// I/O, and CPU wait.
struct Windows {
    r: OpWindow,
    w: OpWindow,
    stall: OpWindow,
    cpu: CpuWaitWindow,
}

impl Windows {
    fn new(window_seconds: f64) -> Self {
        Windows {
            r: OpWindow::new(window_seconds),
            w: OpWindow::new(window_seconds),
            stall: OpWindow::new(window_seconds),
            cpu: CpuWaitWindow::new(window_seconds),
        }
    }

    fn expire(&mut self, now: f64) {
        self.r.expire(now);
        self.w.expire(now);
        self.stall.expire(now);
        self.cpu.expire(now);
    }
}

/// The CPU wait of a probe's threads per interval, over the latency window.
#[derive(Debug)]
pub struct CpuWaitWindow {
    window_seconds: f64,
    /// Per full interval: (seconds on the thread's clock at the interval's end, share of
    /// the interval's thread time spent runnable but waiting for a CPU, seconds waited,
    /// I/Os done).
    intervals: VecDeque<(f64, f64, f64, u64)>,
    seconds_total: f64,
}

impl CpuWaitWindow {
    pub fn new(window_seconds: f64) -> Self {
        CpuWaitWindow {
            window_seconds,
            intervals: VecDeque::new(),
            seconds_total: 0.0,
        }
    }

    /// One interval ending at `t`: `wait` seconds waited for a CPU over `wall` seconds of
    /// thread time (the interval's length times `threads`), while `ops` I/Os were done.
    ///
    /// The wait always counts into the total; the interval into the window only when it
    /// lasted at least half a second per thread: the partial interval a segment ends on
    /// (stopped for a hold) lasts milliseconds, and one wake-up's wait in it would read as
    /// most of it.
    pub fn add(&mut self, t: f64, wait: f64, wall: f64, threads: u32, ops: u64) {
        let wait = if wait.is_finite() { wait.max(0.0) } else { 0.0 };
        self.seconds_total += wait;
        if wall >= 0.5 * f64::from(threads.max(1)) {
            self.intervals
                .push_back((t, (wait / wall).min(1.0), wait.min(wall), ops));
        }
        self.expire(t);
    }

    pub fn expire(&mut self, now: f64) {
        while self
            .intervals
            .front()
            .is_some_and(|&(t, ..)| t <= now - self.window_seconds)
        {
            self.intervals.pop_front();
        }
    }

    /// The CPU wait per I/O at the p99: the intervals ranked by their wait per I/O, the
    /// top ones taken until they hold 1% of the window's I/Os, and the lowest wait per
    /// I/O among them (see [`crate::status::CPU_WAIT_HOST_SHARE_OF_P99`]).
    fn p99_wait(&self) -> Option<f64> {
        let total: u64 = self.intervals.iter().map(|i| i.3).sum();
        if total == 0 {
            return None;
        }
        let mut per_io: Vec<(f64, u64)> = self
            .intervals
            .iter()
            .filter(|i| i.3 > 0)
            .map(|&(_, _, wait, ops)| (wait / ops as f64, ops))
            .collect();
        per_io.sort_by(|a, b| b.0.total_cmp(&a.0));
        let need = (total as f64 * 0.01).ceil().max(1.0) as u64;
        let mut held = 0;
        for (w, ops) in per_io {
            held += ops;
            if held >= need {
                return Some(w);
            }
        }
        None
    }

    /// The window's figures, the CPU wait at the p99 compared with `p99_latency`.
    pub fn status(&self, p99_latency: Option<f64>) -> CpuWait {
        CpuWait {
            seconds_total: self.seconds_total,
            window_max_ratio: self.intervals.iter().map(|i| i.1).reduce(f64::max),
            p99_wait_seconds: self.p99_wait(),
            p99_latency_seconds: p99_latency,
        }
    }
}

/// The probe's job, run for one segment, never stopped by its errors (they are counted).
/// At queue depth 1 it runs on psync: a rate-limited QD1 probe gains nothing from a ring,
/// and a blocking pread costs fewer wake-ups per I/O than a submission and a completion.
fn segment_job(probe: &Probe) -> Result<engine::Job, engine::JobError> {
    let mut spec = probe.job.to_spec();
    spec.stop = Stop::Time(SEGMENT);
    spec.error_limit = u64::MAX;
    spec.ramp = Duration::ZERO;
    if spec.depth == 1 {
        spec.backend = engine::BackendChoice::Psync;
    }
    // Quantiles within 1% (2 significant digits): a canary's histograms are 37 KB
    // instead of 270 KB, on every drive, for as long as the daemon runs.
    spec.latency_digits = 2;
    spec.validate()
}

/// (device, inode, size) of a path now, if it exists: a change means the file was
/// deleted, replaced or truncated.
fn identity_of(path: &Path) -> Option<(u64, u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path)
        .ok()
        .map(|m| (m.dev(), m.ino(), m.len()))
}

/// The filesystem `path` is reached through is mounted read-only now.
fn read_only_now(path: &Path) -> bool {
    rustix::fs::statvfs(path)
        .is_ok_and(|st| st.f_flag.contains(rustix::fs::StatVfsMountFlags::RDONLY))
}

/// Opens what the probe runs on, through the write gate when it writes.
fn open_target(drive: &DriveCtl, probe: &Probe) -> Result<Target, OpenError> {
    let resolved = drive.resolved()?;
    let path = resolved.target.as_path();
    if let Some(ft) = &drive.cfg.file_target {
        // The daemon owns its file target: a missing or truncated one is made again; a
        // file it did not create is refused, untouched.
        super::ensure_file_target(ft)?;
    }
    let permit = if probe.writes {
        Some(permit_for(drive, path)?)
    } else {
        None
    };
    let target = match &drive.cfg.file_target {
        // Driveprobe's own file (its mark, checked again on this descriptor), reached
        // without a link on the way, used within its configured size.
        Some(ft) => Target::open_own_file(path, true, permit.as_ref(), ft.size),
        None => Target::open(path, true, permit.as_ref()),
    }?;
    if drive.cfg.file_target.is_none() && drive.cfg.identity.is_some() {
        // The identity was checked up to a few seconds ago; the device at the path may
        // have been replaced since (another disk hot-plugged where this one was). Check
        // again now that the descriptor is open: a swap after this leaves the descriptor
        // on the old, gone device, never on the new one.
        drive.refresh_identity();
        let now = drive.resolved()?;
        if now.target != path {
            return Err(OpenError::Moved {
                path: path.to_path_buf(),
                now: now.target,
            });
        }
    }
    Ok(target)
}

fn permit_for(drive: &DriveCtl, path: &Path) -> Result<safety::WritePermit, OpenError> {
    if drive.cfg.file_target.is_some() {
        return Ok(safety::authorize_file_writes(path, false)?);
    }
    let info = crate::device::inspect(path)?;
    Ok(safety::authorize_block_writes(
        &info,
        &write_request(drive),
    )?)
}

/// What the safety gate is asked for a raw device of this drive.
pub fn write_request(drive: &DriveCtl) -> WriteRequest {
    use crate::config::Identity;
    let (serial, wwn) = match &drive.cfg.identity {
        Some(Identity::Serial(s)) => (Some(s.clone()), None),
        Some(Identity::Wwn(w)) => (None, Some(w.clone())),
        // A by-id link names the device; the gate still wants a serial or WWN: take the
        // one the device reports now (the link resolved to it a moment ago).
        Some(Identity::ById(_)) | None => {
            let id = drive
                .resolved()
                .ok()
                .and_then(|r| r.device_info)
                .map(|i| i.identity)
                .unwrap_or_default();
            let wwn = if id.serial.is_none() { id.wwn } else { None };
            (id.serial, wwn)
        }
    };
    WriteRequest {
        allow_destructive: drive.cfg.destructive,
        expect_serial: serial,
        expect_wwn: wwn,
    }
}

fn set_collector(
    ctx: &Ctx,
    drive: &str,
    name: &str,
    success: bool,
    took: Duration,
    error: Option<String>,
) {
    ctx.drive_status(drive, |d| {
        d.collectors.insert(
            name.to_string(),
            CollectorStatus {
                success,
                duration_seconds: took.as_secs_f64(),
                last_unix: now_unix(),
                error,
            },
        );
    });
}

/// The index of the p99 in [`crate::status::WINDOW_QUANTILES`].
const P99: usize = 2;

fn publish(ctx: &Ctx, drive: &str, probe: &Probe, win: &Windows, state: &ProbeState) {
    let read = win.r.status();
    let write = win.w.status();
    // The lower p99 of the two directions: a CPU wait that explains it is named.
    let p99 = [&read, &write]
        .iter()
        .filter_map(|o| o.window.as_ref().filter(|w| w.ops > 0))
        .map(|w| w.quantiles[P99])
        .reduce(f64::min);
    let cpu_wait = win.cpu.status(p99);
    let host_stall = win.stall.quantiles();
    ctx.drive_status(drive, |d| {
        let p = d.probes.entry(probe.name.clone()).or_default();
        p.writes = probe.writes;
        p.window_seconds = probe.window.as_secs_f64();
        p.rate_iops = probe.job.rate().map(|r| r.iops);
        p.state = state.clone();
        p.read = read;
        p.write = write;
        p.cpu_wait = cpu_wait;
        p.host_stall = host_stall;
    });
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::status::{CPU_WAIT_HOST_BUSY_RATIO, CPU_WAIT_HOST_SHARE_OF_P99};
    use std::sync::atomic::AtomicBool;

    #[test]
    fn the_cpu_wait_of_the_window_is_its_worst_interval() {
        let mut w = CpuWaitWindow::new(60.0);
        assert_eq!(w.status(None).window_max_ratio, None);
        w.add(1.0, 0.001, 1.0, 1, 100);
        w.add(2.0, 0.41, 1.0, 1, 100);
        // Two threads: 0.2 s of waiting over 2 s of thread time.
        w.add(3.0, 0.2, 2.0, 2, 100);
        let s = w.status(Some(0.005));
        assert_eq!(s.window_max_ratio, Some(0.41));
        assert!((s.seconds_total - 0.611).abs() < 1e-9);
        // 300 I/Os: the 3 at the p99 lie in the worst interval, 4.1 ms each.
        assert!(
            (s.p99_wait_seconds.unwrap() - 0.0041).abs() < 1e-12,
            "{s:?}"
        );
        assert!(s.host_busy());
        // The few milliseconds a stopped segment ends on: their wait is counted, their
        // share is not.
        w.add(3.01, 0.008, 0.01, 1, 1);
        assert_eq!(w.status(None).window_max_ratio, Some(0.41));
        assert!((w.status(None).seconds_total - 0.619).abs() < 1e-9);
        let sentence = s.sentence().unwrap();
        assert!(
            sentence.starts_with(
                "host CPU busy: at its p99 the probe waited about 4.10 ms per I/O for a CPU, 82% of its p99 latency (5.00 ms)"
            ),
            "{sentence}"
        );
        // Past the window, the busy interval is forgotten; the total stays.
        w.expire(62.5);
        assert_eq!(w.status(None).window_max_ratio, Some(0.1));
        w.expire(64.0);
        assert_eq!(w.status(None).window_max_ratio, None);
        assert_eq!(w.status(None).p99_wait_seconds, None);
        assert!((w.status(None).seconds_total - 0.619).abs() < 1e-9);
    }

    /// A 60 s window of 1 s intervals of 100 I/Os each, waiting `wait(i)` seconds in
    /// interval `i`, compared with a p99 of `p99` seconds.
    fn window_of(wait: impl Fn(usize) -> f64, p99: f64) -> CpuWait {
        let mut w = CpuWaitWindow::new(60.0);
        for i in 0..60 {
            w.add(1.0 + i as f64, wait(i), 1.0, 1, 100);
        }
        w.status(Some(p99))
    }

    /// Review of issue 17, B5: one interval over 2% anywhere in the window named the host
    /// as the cause of the drive's p99. The host is named when its wait can explain the
    /// p99 shown, not otherwise.
    #[test]
    fn the_host_is_named_only_when_its_wait_explains_the_p99() {
        // Host busy, drive fine: 100 ms of waiting every second (1 ms per I/O) beside an
        // SSD whose p99 rose to 1.5 ms: the host.
        let host = window_of(|_| 0.1, 1.5e-3);
        assert!(host.host_busy(), "{host:?}");
        assert!(host.sentence().unwrap().contains("67% of its p99 latency"));
        // Drive slow, CPU wait brief: an HDD at 30 ms p99, 3 ms of waiting a second and
        // once 25 ms (2.5%, over the old 2% mark): the drive's p99, the host not named.
        let drive = window_of(|i| if i == 30 { 0.025 } else { 0.003 }, 30e-3);
        assert_eq!(drive.window_max_ratio, Some(0.025));
        assert!(!drive.host_busy(), "{drive:?}");
        assert!(drive.sentence().is_none());
        // A sustained wait that is still small beside the p99: not named either.
        assert!(!window_of(|_| 0.05, 30e-3).host_busy());
        // The same brief burst beside a p99 it can explain: named. At the threshold.
        let at = |share: f64| window_of(|_| 0.1, 1e-3 / share);
        assert!(at(CPU_WAIT_HOST_SHARE_OF_P99 * 1.01).host_busy());
        assert!(!at(CPU_WAIT_HOST_SHARE_OF_P99 * 0.99).host_busy());
        // An idle host's wake-ups (0.4%) never name it, even beside a fast SSD's p99.
        let idle = window_of(|_| 0.004, 50e-6);
        assert!(idle.window_max_ratio.unwrap() < CPU_WAIT_HOST_BUSY_RATIO);
        assert!(!idle.host_busy());
        assert!(!CpuWait::default().host_busy());
        // A figure out of range (a clock step) is clamped, never more than the interval.
        let mut w = CpuWaitWindow::new(10.0);
        w.add(1.0, 5.0, 1.0, 1, 10);
        w.add(2.0, f64::NAN, 1.0, 1, 10);
        assert_eq!(w.status(None).window_max_ratio, Some(1.0));
        assert_eq!(crate::status::WINDOW_QUANTILES[P99].1, 99.0);
    }

    /// Review of issue 17: a hold (drive down, paused) starting logged "ended: canary
    /// cannot start" although the failure went on.
    #[test]
    fn a_hold_does_not_end_a_failure_episode() {
        let mut log = CondLog::new("drive a, probe rd");
        log.holds("fail:start", Level::Warn, "canary cannot start: refused");
        log_hold(
            &mut log,
            &ProbeState::Paused {
                reason: "wear budget".into(),
            },
        );
        assert!(log.is_open("fail:start"));
        assert!(log.is_open("hold"));
        // A stop ends nothing: the open conditions are closed without an "ended" line.
        assert_eq!(log.close(), ["fail:start", "hold"]);
        assert!(!log.is_open("hold"));
    }

    pub(crate) fn first_allowed_cpu() -> usize {
        let set = rustix::thread::sched_getaffinity(None).unwrap();
        (0..rustix::thread::CpuSet::MAX_CPU)
            .find(|&c| set.is_set(c))
            .unwrap()
    }

    pub(crate) fn pin(cpu: usize) {
        let mut set = rustix::thread::CpuSet::new();
        set.set(cpu);
        rustix::thread::sched_setaffinity(None, &set).unwrap();
    }

    /// `f`'s result, run on a thread pinned to `cpu` beside `hogs` threads spinning on
    /// the same CPU (always runnable, so `f`'s thread waits for the CPU at each wake-up).
    pub(crate) fn beside_cpu_hogs<T: Send + 'static>(
        cpu: usize,
        hogs: usize,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> T {
        let stop = Arc::new(AtomicBool::new(false));
        let spinners: Vec<_> = (0..hogs)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    pin(cpu);
                    let mut x = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
                    }
                })
            })
            .collect();
        let measured = std::thread::spawn(move || {
            pin(cpu);
            f()
        })
        .join();
        stop.store(true, Ordering::Relaxed);
        for s in spinners {
            s.join().unwrap();
        }
        measured.unwrap_or_else(|p| std::panic::resume_unwind(p))
    }

    /// A canary's job (rate limited, QD1, psync) for 3 s on `path`, from a thread pinned
    /// to `cpu` (its worker inherits that), beside `hogs` threads spinning on the same
    /// CPU: the share of the worker's time it waited for a CPU.
    fn canary_cpu_wait(path: &Path, cpu: usize, hogs: usize) -> f64 {
        let path = path.to_path_buf();
        beside_cpu_hogs(cpu, hogs, move || {
            let spec = engine::JobSpec {
                rate: Some(engine::RateLimit {
                    iops: 200.0,
                    arrival: engine::Arrival::Linear,
                }),
                stop: Stop::Time(Duration::from_secs(3)),
                direct: false,
                backend: engine::BackendChoice::Psync,
                ..Default::default()
            };
            let job = spec.validate().unwrap();
            let target = Target::open(&path, false, None).unwrap();
            let mut win = CpuWaitWindow::new(60.0);
            let mut start = 0.0;
            let control = RunControl::new().discarding_intervals();
            engine::run_observed(&job, &target, &control, &mut |s, _| {
                win.add(
                    s.end_seconds,
                    s.run_delay_seconds,
                    s.end_seconds - start,
                    1,
                    0,
                );
                start = s.end_seconds;
            })
            .unwrap();
            win.status(None).seconds_total / start
        })
    }

    /// Issue 17: a canary's latency on an idle drive rose with the host's CPUs busy. Its
    /// CPU wait says so: pinned beside CPU hogs, the canary waits more than alone.
    #[test]
    fn a_cpu_hog_on_the_canary_s_cpu_raises_its_cpu_wait() {
        let dir = tempfile::Builder::new()
            .prefix("dp-cpuwait-")
            .tempdir_in("/dev/shm")
            .unwrap();
        let path = dir.path().join("t.dat");
        std::fs::write(&path, vec![0u8; 4 << 20]).unwrap();
        let cpu = first_allowed_cpu();
        // Not compared with a run alone: on a shared machine (CI runs two test binaries at
        // a time on two CPUs) the run alone may wait for a CPU as much (issue 22). Three
        // threads always runnable on its CPU make the canary's worker wait at each
        // wake-up: a wait that reaches the figure shows it is wired to the kernel's count.
        let alone = canary_cpu_wait(&path, cpu, 0);
        let crowded = canary_cpu_wait(&path, cpu, 3);
        eprintln!("cpu wait: alone {alone:.4}, beside three hogs {crowded:.4}");
        assert!(
            crowded > 0.0 && crowded.is_finite(),
            "beside three hogs on its CPU the canary's CPU wait share is {crowded} (alone {alone})"
        );
    }
}
