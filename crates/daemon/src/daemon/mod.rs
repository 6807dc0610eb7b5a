//! `driveprobe daemon`: the registered drives, their canaries, health polling and
//! scheduled runs, served as Prometheus metrics and a status page.
//!
//! Threads: the main thread runs a small tokio runtime (HTTP, signals, the systemd
//! watchdog); everything that touches a drive runs on dedicated OS threads: one per
//! canary (their I/O on the shared reactor, `reactor`), a few health workers for every
//! drive (`health_pool`: a hung device stalls only its own drive), one scheduler, one per
//! scheduled run. A thread that cannot be started (the limit on tasks reached) is on every
//! surface ([`Shared::thread_failed`]) and retried at every tick. They meet in
//! [`crate::status::Shared`] (what is exported) and [`store::Store`] (what survives a
//! restart).
//!
//! A config "generation" is the set of threads made from one config. SIGHUP loads the new
//! config; when it is valid, the new generation replaces the old one drive by drive: a
//! drive whose slice of the config did not change keeps its threads running, a changed
//! or removed drive's stop, a changed or added drive's start (once no earlier thread of
//! it is left), and the scheduler starts anew (runs going on go on: [`scheduler::Runs`]
//! outlives generations); when it is not valid, the old one keeps running and the
//! failure is exported. A change of the discovered drives swaps the same way.

pub mod canary;
pub mod canary_io;
pub mod clock;
pub mod discover;
pub mod health_poll;
pub mod health_pool;
pub mod identity;
pub mod reactor;
pub mod scheduler;
pub mod selftest;
pub mod sliding;
pub mod standby;
pub mod store;
pub mod supervisor;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::config::{self, Config, ConfigError, Drive};
use crate::schedule;
use crate::status::{ConfigStatus, Shared, Status, WearStatus};

use identity::Resolved;
use scheduler::Runs;
use store::Store;
use supervisor::Supervisor;

/// A failure that stops the daemon before or while it starts. Each is one line.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error("{0}")]
    Config(#[from] ConfigError),
    #[error("{0}")]
    StateDir(#[from] crate::statedir::StateDirError),
    #[error("cannot listen on {addr}: {source}; {}", listen_fix(*from_flag))]
    Listen {
        addr: SocketAddr,
        source: std::io::Error,
        /// The address came from `daemon --web.listen-address`/`--listen` (else from the
        /// config or its default).
        from_flag: bool,
    },
    #[error("cannot start the runtime: {0}")]
    Runtime(std::io::Error),
    #[error("{0}")]
    WebConfig(#[from] crate::http::WebConfigError),
    #[error("{0}")]
    Swap(#[from] supervisor::SwapFailed),
}

/// What to do about an address that cannot be bound. Without `--listen` the address is
/// the config's `[server] listen`, or the default when the config has no `[server]`
/// section (the built-in config has none): both ways out are named.
fn listen_fix(from_flag: bool) -> &'static str {
    if from_flag {
        "give `daemon --listen` a free address (or --web.listen-address, the same flag; or stop what holds the port)"
    } else {
        "give a free address with `daemon --listen ADDR` (or --web.listen-address ADDR) or with `listen` in the config's [server] section (or stop what holds the port)"
    }
}

/// How the daemon was asked to run.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// The config file; None runs the built-in config.
    pub config: Option<PathBuf>,
    /// Override `[server] listen` (`--web.listen-address`, repeatable): the daemon serves
    /// on each, and a reload does not move them. Empty: `[server] listen`.
    pub listen: Vec<SocketAddr>,
    /// Overrides `state_dir` (and, for the built-in config, where its file target lives).
    pub state_dir: Option<PathBuf>,
    /// The web config file (TLS, basic auth; exporter-toolkit's format), reread on SIGHUP.
    /// None serves plain HTTP without auth.
    pub web_config: Option<PathBuf>,
    /// Where the metrics are served (`--web.telemetry-path`, checked by
    /// `http::routes::check_telemetry_path`); None: `/metrics`.
    pub telemetry_path: Option<String>,
}

pub fn now_unix() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// A thread's proof of life, for the watchdog.
#[derive(Debug)]
pub struct Beat {
    pub name: String,
    origin: Instant,
    last_ms: AtomicU64,
}

impl Beat {
    pub fn new(name: String) -> Arc<Beat> {
        let b = Beat {
            name,
            origin: Instant::now(),
            last_ms: AtomicU64::new(0),
        };
        Arc::new(b)
    }
    pub fn beat(&self) {
        self.last_ms
            .store(self.origin.elapsed().as_millis() as u64, Ordering::Release);
    }
    pub fn age(&self) -> Duration {
        let now = self.origin.elapsed().as_millis() as u64;
        Duration::from_millis(now.saturating_sub(self.last_ms.load(Ordering::Acquire)))
    }
}

/// One drive of one generation: its config, where it is now, and its threads' flags.
#[derive(Debug)]
pub struct DriveCtl {
    pub cfg: Drive,
    resolved: Mutex<Result<Resolved, Arc<identity::ResolveError>>>,
    /// Canaries running an engine segment now.
    pub active: AtomicUsize,
    /// How many times the drive went from up to down (it left: removed, replaced...).
    downs: AtomicU64,
    stop: AtomicBool,
    wake: (Mutex<()>, Condvar),
    runs: Arc<Runs>,
}

impl DriveCtl {
    fn new(cfg: Drive, runs: Arc<Runs>) -> Self {
        let resolved = identity::resolve(&cfg).map_err(Arc::new);
        DriveCtl {
            cfg,
            resolved: Mutex::new(resolved),
            active: AtomicUsize::new(0),
            downs: AtomicU64::new(0),
            stop: AtomicBool::new(false),
            wake: (Mutex::new(()), Condvar::new()),
            runs,
        }
    }

    /// Resolves the identity again (now), logging a change of state.
    pub fn refresh_identity(&self) {
        let r = identity::resolve(&self.cfg).map_err(Arc::new);
        let was = std::mem::replace(
            &mut *self.resolved.lock().unwrap_or_else(|e| e.into_inner()),
            r.clone(),
        );
        match (&was, &r) {
            (Ok(_), Err(why)) => {
                self.downs.fetch_add(1, Ordering::AcqRel);
                tracing::warn!(drive = %self.cfg.name, reason = %why, "drive is down; its probes stop")
            }
            (Err(_), Ok(now)) => {
                tracing::info!(drive = %self.cfg.name, target = %now.target.display(), "drive is up")
            }
            _ => {}
        }
    }

    /// How many times the drive has gone down since this generation started.
    pub fn downs(&self) -> u64 {
        self.downs.load(Ordering::Acquire)
    }

    /// Where the drive is, or why it is down.
    pub fn resolved(&self) -> Result<Resolved, Arc<identity::ResolveError>> {
        self.resolved
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Why the canaries must hold (a scheduled run holds the drive).
    pub fn paused(&self) -> Option<String> {
        self.runs
            .on_drive(&self.cfg.name)
            .map(|r| format!("scheduled run {} ({})", r.id, r.suite))
    }

    pub fn stopped(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    fn request_stop(&self) {
        self.stop.store(true, Ordering::Release);
        let _g = self.wake.0.lock().unwrap_or_else(|e| e.into_inner());
        self.wake.1.notify_all();
    }

    /// Sleeps for `d`, or until the drive's threads are told to stop.
    pub fn sleep(&self, d: Duration) {
        let deadline = Instant::now() + d;
        let mut g = self.wake.0.lock().unwrap_or_else(|e| e.into_inner());
        while !self.stopped() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            g = match self.wake.1.wait_timeout(g, left) {
                Ok((g, _)) => g,
                Err(e) => e.into_inner().0,
            };
        }
    }
}

/// What a generation's scheduler shares with its runs (the whole config, every drive),
/// or one drive's threads share (the drive's slice of the config, the drive alone).
#[derive(Debug)]
pub struct Ctx {
    pub config: Config,
    /// The scheduler's generation number, or the drive threads' writer number: they
    /// write the status only while it is current (see [`Shared::drive_of_generation`]).
    pub generation: u64,
    pub shared: Arc<Shared>,
    pub store: Arc<Store>,
    pub drives: BTreeMap<String, Arc<DriveCtl>>,
    pub runs: Arc<Runs>,
}

impl Ctx {
    pub fn state_dir(&self) -> &Path {
        &self.config.state_dir
    }

    /// Runs `f` on drive `name`'s status entry while this generation is current (see
    /// [`Shared::drive_of_generation`]); `None` once a reload replaced it.
    pub fn drive_status<R>(
        &self,
        name: &str,
        f: impl FnOnce(&mut crate::status::DriveStatus) -> R,
    ) -> Option<R> {
        self.shared.drive_of_generation(self.generation, name, f)
    }

    fn capacity(&self, d: &DriveCtl) -> Option<u64> {
        let known = self
            .shared
            .lock()
            .drives
            .get(&d.cfg.name)
            .and_then(|s| s.identity.capacity_bytes);
        known.or_else(|| {
            d.resolved()
                .ok()
                .and_then(|r| r.device_info)
                .map(|i| i.size_bytes)
        })
    }

    /// The drive's wear figures now: the canaries' budget and what they wrote today, the
    /// scheduled runs' allowance and what they wrote over the period.
    pub fn wear(&self, d: &DriveCtl) -> WearStatus {
        let wb = &self.config.wear_budget;
        let cap = self.capacity(d);
        let budget = store::budget_bytes_per_day(&d.cfg, cap, wb);
        let runs_budget = store::run_budget_bytes(&d.cfg, cap, wb);
        let now = now_unix() as i64;
        let st = self.store.lock();
        let today = st.canary_written_on(&d.cfg.name, now);
        WearStatus {
            self_written_bytes_total: st.self_written_lifetime(&d.cfg.name),
            written_today_bytes: today,
            budget_bytes_per_day: budget,
            exceeded: today as f64 >= budget,
            runs_period_days: wb.period_days,
            runs_budget_bytes: runs_budget,
            runs_written_bytes: st.run_written_in_window(&d.cfg.name, now, wb.period_days),
        }
    }

    /// The drive's capacity when known (for a raw device's run bound).
    pub fn capacity_of(&self, d: &DriveCtl) -> Option<u64> {
        self.capacity(d)
    }

    /// The canaries' writes to this drive today reached their budget (scheduled runs have
    /// their own allowance, and never stop the canaries' or are stopped by it).
    pub fn over_budget(&self, d: &DriveCtl) -> bool {
        self.wear(d).exceeded
    }

    /// Publishes up/down and the wear figures of every drive, resolving their identities
    /// again first when `resolve`.
    pub fn refresh_drives(&self, resolve: bool) {
        for d in self.drives.values() {
            if resolve {
                d.refresh_identity();
            }
            let r = d.resolved();
            let wear = self.wear(d);
            // Of this generation only: a scheduler of a config a reload replaced must not
            // write its view of the drive over the new one.
            self.drive_status(&d.cfg.name, |s| {
                s.up = r.is_ok();
                s.down_reason = r.as_ref().err().map(|e| e.to_string());
                if let Ok(res) = &r {
                    s.device = res.device.clone();
                    s.target = Some(res.target.clone());
                    if let Some(info) = &res.device_info {
                        let id = &mut s.identity;
                        if id.serial.is_none() {
                            id.serial = info.identity.serial.clone();
                        }
                        if id.model.is_none() {
                            id.model = info.identity.model.clone();
                        }
                        if id.wwn.is_none() {
                            id.wwn = info.identity.wwn.clone();
                        }
                        id.capacity_bytes = id.capacity_bytes.or(Some(info.size_bytes));
                        id.logical_block_size =
                            id.logical_block_size.or(Some(info.logical_block_size));
                    }
                }
                s.wear = wear;
            });
        }
    }

    /// Adds the disks' load since the last call to every drive whose disk is known
    /// (`load`): one read of `/proc/diskstats` for all of them.
    pub fn sample_load(&self) {
        let Some(stats) = crate::load::read_diskstats() else {
            return;
        };
        for d in self.drives.values() {
            self.drive_status(&d.cfg.name, |s| {
                let dev = s
                    .device
                    .as_deref()
                    .and_then(|p| p.file_name())
                    .and_then(|n| n.to_str());
                match dev.and_then(|n| stats.get_key_value(n)) {
                    Some((name, c)) if s.up => s.sample_load(name, *c),
                    // Down: the counters stay where they were (the series do not
                    // vanish while the drive is gone), and the next disk starts over.
                    _ => {}
                }
            });
        }
    }

    /// Saves the state if it changed; a failure is retried (the store logs it once per
    /// episode).
    pub fn save_state(&self) {
        if let Err(e) = self.store.save_if_dirty() {
            tracing::debug!(error = %e, "cannot save the state; will retry");
        }
    }
}

/// Makes the drive's file target what the config says: created (filled and marked as
/// driveprobe's own) when missing, and created again when driveprobe's own file is
/// shorter than its configured size (truncated under the daemon). Anything else at the
/// path (a file driveprobe did not create, a copy of one, a link, a link on the way) is
/// refused and left untouched: the path is in the config, the file there may not be ours.
pub fn ensure_file_target(ft: &config::FileTarget) -> Result<(), OpenError> {
    use crate::target::Ensured;
    match crate::target::ensure_own_file(&ft.path, ft.size) {
        Ok(Ensured::Recreated { was }) => {
            tracing::warn!(path = %ft.path.display(), size = was, configured = ft.size,
                "the file target is shorter than its configured size; created it again");
            Ok(())
        }
        Ok(_) => Ok(()),
        Err(e @ crate::target::TargetError::NotFound(_)) => Err(OpenError::FileTarget {
            path: ft.path.clone(),
            source: e,
        }),
        Err(e) => Err(OpenError::Target(e)),
    }
}

/// Why a canary or a scheduled run cannot open its drive's target: one line, the error
/// underneath (the identity lookup, the write gate, the open) kept as its source.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// The drive is down (its identity matches no device now).
    #[error("{0}")]
    Down(Arc<identity::ResolveError>),
    #[error("file target {}: {source}", path.display())]
    FileTarget {
        path: PathBuf,
        source: crate::target::TargetError,
    },
    #[error(transparent)]
    Target(#[from] crate::target::TargetError),
    #[error(transparent)]
    Gate(#[from] crate::safety::SafetyError),
    #[error(transparent)]
    Device(#[from] crate::device::DeviceError),
    /// Another disk is at the drive's path now (a swap while it was being opened).
    #[error("{} is no longer this drive (it is at {} now)", path.display(), now.display())]
    Moved { path: PathBuf, now: PathBuf },
}

impl From<Arc<identity::ResolveError>> for OpenError {
    fn from(e: Arc<identity::ResolveError>) -> Self {
        OpenError::Down(e)
    }
}

/// A config window as the scheduler's window.
pub fn window_of(w: &config::MaintenanceWindow) -> schedule::Window {
    use config::Weekday::*;
    let mut bits = 0u8;
    for d in &w.days {
        bits |= 1
            << match d {
                Sun => 0,
                Mon => 1,
                Tue => 2,
                Wed => 3,
                Thu => 4,
                Fri => 5,
                Sat => 6,
            };
    }
    schedule::Window {
        start: (w.start.hour, w.start.minute),
        end: (w.end.hour, w.end.minute),
        days: schedule::Weekdays(bits),
    }
}

/// Removes from `s` the drives `config` does not have, and on each drive the probes
/// (with their canary collectors) `config` does not run on it.
fn prune(s: &mut Status, config: &Config) {
    s.drives.retain(|name, _| {
        config.drives.iter().any(|d| &d.name == name) || config.gone.contains_key(name)
    });
    // A discovered drive that is gone keeps its series, down, until it is dropped.
    for (name, why) in &config.gone {
        if let Some(d) = s.drives.get_mut(name) {
            d.up = false;
            d.down_reason = Some(why.clone());
            for p in d.probes.values_mut() {
                p.state = crate::status::ProbeState::DriveDown {
                    reason: why.clone(),
                };
            }
        }
    }
    for (name, d) in s.drives.iter_mut() {
        if config.gone.contains_key(name) {
            continue;
        }
        let keep = |probe: &str| {
            config
                .probes
                .iter()
                .any(|p| p.name == probe && p.drives.contains(name))
        };
        d.probes.retain(|p, _| keep(p));
        d.collectors
            .retain(|c, _| c.strip_prefix(canary::COLLECTOR_PREFIX).is_none_or(&keep));
    }
}

/// How long a swap waits for the threads it stops (a changed or removed drive's, the
/// scheduler) before it leaves them behind.
const SWAP_WAIT: Duration = Duration::from_secs(5);

/// `full` without its drives, probes, schedules and discovery entries: what every
/// drive's [`slice`] starts from (its global settings; a field added to the config is
/// in it, and compared by [`fingerprint`], without a change here).
fn globals(full: &Config) -> Config {
    // The clone copies the lists only to drop them: once per swap.
    Config {
        drives: Vec::new(),
        probes: Vec::new(),
        schedules: Vec::new(),
        selftests: Vec::new(),
        discovered: BTreeMap::new(),
        gone: BTreeMap::new(),
        ..full.clone()
    }
}

/// What one drive's threads read of `full` (`globals` is [`globals`] of it): its
/// `[[drive]]` or discovered entry, what discovery knows of it, the probes that run on
/// it (each with this drive alone in its `drives`), and the global settings. Its threads
/// get this, not the whole config: what they can read is what [`fingerprint`] compares.
fn slice_of(globals: &Config, full: &Config, d: &Drive) -> Config {
    let mut probes: Vec<config::Probe> = full
        .probes
        .iter()
        .filter(|p| p.drives.contains(&d.name))
        .map(|p| config::Probe {
            drives: vec![d.name.clone()],
            ..p.clone()
        })
        .collect();
    probes.sort_by(|a, b| a.name.cmp(&b.name));
    Config {
        drives: vec![d.clone()],
        probes,
        discovered: full
            .discovered
            .get(&d.name)
            .map(|x| (d.name.clone(), x.clone()))
            .into_iter()
            .collect(),
        ..globals.clone()
    }
}

/// [`slice_of`] for one drive.
#[cfg(test)]
fn slice(full: &Config, d: &Drive) -> Config {
    slice_of(&globals(full), full, d)
}

/// What decides whether a reload (or a change of the discovered drives) changes a drive:
/// two slices ([`slice_of`]) with the same fingerprint run the same threads, so the
/// drive's threads go on. The whole slice is compared, but for what no drive thread
/// reads, set to a fixed value here: a field added to the config is compared (a change
/// restarts the drives: safe) until it is added to this list (see
/// docs/decisions/0005-incremental-generation-swap.md).
fn fingerprint(slice: &Config) -> String {
    let mut c = slice.clone();
    // The HTTP server's.
    c.server.listen = std::net::SocketAddr::from(([0, 0, 0, 0], 0));
    // The store is opened once at start; the scheduler writes documents there.
    c.state_dir = PathBuf::new();
    // The scheduler's (result documents kept; schedules).
    c.runs = config::RunsRetention::default();
    c.schedules.clear();
    // The discovery thread's and the merge's: what it means for this drive is in
    // `drives`, `probes` and `discovered`.
    c.discovery = config::Discovery::default();
    // Gone drives have no threads.
    c.gone.clear();
    // The wear budget holds only probes that write (the scheduler has its own copy).
    if !c.probes.iter().any(|p| p.writes) {
        c.wear_budget = config::WearBudget::default();
    }
    format!("{c:?}")
}

/// What a scheduler that cannot be started is recorded as ([`Shared::thread_failed`]).
const SCHEDULER: &str = "the scheduler";

/// What a canary whose thread cannot be started is recorded as.
fn canary_what(probe: &str, drive: &str) -> String {
    format!("canary {probe} on drive {drive}")
}

/// Starts a thread named `name` running `f`.
fn spawn_thread(
    name: String,
    f: impl FnOnce() + Send + 'static,
) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new().name(name).spawn(f)
}

/// One drive's tasks: its health polling (a job of the health pool) and its canaries'
/// threads, and what they share.
struct DriveThreads {
    /// Their context: the drive's [`slice`] of the config, and their writer number (see
    /// [`Shared::drive_of_generation`]).
    ctx: Arc<Ctx>,
    drive: Arc<DriveCtl>,
    fingerprint: String,
    /// Started (once the earlier tasks it waited for had ended).
    started: bool,
    threads: Vec<Task>,
    beats: Vec<Arc<Beat>>,
    /// The probes whose canary thread could not be started: retried every tick.
    unstarted: Vec<config::Probe>,
    /// Tasks of this drive's previous config (or of a removed drive of the same name)
    /// that did not stop in time: this drive's own start only when they have ended, so
    /// a drive hung in the kernel never has more than one set of threads behind it.
    waiting: Vec<Task>,
}

impl DriveThreads {
    fn new(
        (globals, full): (&Config, &Config),
        d: &Drive,
        shared: &Arc<Shared>,
        store: &Arc<Store>,
        runs: &Arc<Runs>,
    ) -> DriveThreads {
        let config = slice_of(globals, full, d);
        let fingerprint = fingerprint(&config);
        let drive = Arc::new(DriveCtl::new(d.clone(), runs.clone()));
        if let Ok(r) = drive.resolved() {
            if let Some(n) = &r.note {
                tracing::info!(drive = %d.name, "{n}");
            }
        }
        let ctx = Arc::new(Ctx {
            config,
            generation: shared.number(),
            shared: shared.clone(),
            store: store.clone(),
            drives: BTreeMap::from([(d.name.clone(), drive.clone())]),
            runs: runs.clone(),
        });
        DriveThreads {
            ctx,
            drive,
            fingerprint,
            started: false,
            threads: Vec::new(),
            beats: Vec::new(),
            unstarted: Vec::new(),
            waiting: Vec::new(),
        }
    }

    fn name(&self) -> &str {
        &self.drive.cfg.name
    }

    /// Starts the health polling and the canaries.
    fn spawn(&mut self) {
        self.started = true;
        let (c, d) = (self.ctx.clone(), self.drive.clone());
        self.threads.push(Task::Health(health_poll::start(c, d)));
        self.unstarted = self.ctx.config.probes.clone();
        self.start_canaries();
    }

    /// Starts the canaries not started yet; one whose thread cannot be started says so
    /// on every surface (its probe `failing`, [`Shared::thread_failed`]) and stays in
    /// `unstarted`, retried at the next tick.
    fn start_canaries(&mut self) {
        let (ctx, d) = (&self.ctx, &self.drive);
        let mut left = Vec::new();
        for p in std::mem::take(&mut self.unstarted) {
            let what = canary_what(&p.name, &d.cfg.name);
            let beat = Beat::new(format!("canary {} on {}", p.name, d.cfg.name));
            beat.beat();
            let (c, dd, pp, b) = (ctx.clone(), d.clone(), p.clone(), beat.clone());
            match spawn_thread(format!("dp-canary-{}", d.cfg.name), move || {
                canary::run(c, dd, pp, b)
            }) {
                Ok(h) => {
                    ctx.shared.thread_started(&what);
                    self.threads.push(Task::Thread(h));
                    self.beats.push(beat);
                }
                Err(e) => {
                    ctx.shared.thread_failed(&what, &e);
                    let reason = format!(
                        "cannot start its thread: {e} (the limit on tasks, TasksMax= or ulimit -u, is reached?); retried every few seconds"
                    );
                    ctx.drive_status(&d.cfg.name, |s| {
                        let ps = s.probes.entry(p.name.clone()).or_default();
                        ps.writes = p.writes;
                        ps.window_seconds = p.window.as_secs_f64();
                        ps.rate_iops = p.job.rate().map(|r| r.iops);
                        ps.state = crate::status::ProbeState::Failing { reason };
                    });
                    left.push(p);
                }
            }
        }
        self.unstarted = left;
    }

    /// Says on every surface why the drive's threads wait, once, when they begin to.
    fn publish_waiting(&self) {
        let reason = format!(
            "the threads of this drive's previous config did not stop within {} s (a device that does not answer?): its health polling and canaries start again once they have ended",
            SWAP_WAIT.as_secs()
        );
        tracing::warn!(drive = %self.name(), threads = self.waiting.len(), "{reason}");
        let now = now_unix();
        self.ctx.drive_status(self.name(), |s| {
            s.health_state = s.health_state.failed(reason.clone(), now);
            for p in &self.ctx.config.probes {
                let ps = s.probes.entry(p.name.clone()).or_default();
                ps.writes = p.writes;
                ps.window_seconds = p.window.as_secs_f64();
                ps.rate_iops = p.job.rate().map(|r| r.iops);
                ps.state = crate::status::ProbeState::Failing {
                    reason: reason.clone(),
                };
            }
        });
    }

    /// Starts the threads when those it waits for have ended (and retries those that
    /// could not be started); true once they run.
    fn start_when_free(&mut self) -> bool {
        if self.waiting.iter().any(|t| !t.is_finished()) {
            return false;
        }
        let was_waiting = !self.waiting.is_empty();
        for t in self.waiting.drain(..) {
            t.join();
        }
        if self.drive.stopped() {
            return true;
        }
        if !self.started {
            if was_waiting {
                tracing::info!(drive = %self.name(), "the threads of the drive's previous config have ended; its threads start");
            }
            self.spawn();
        } else if !self.unstarted.is_empty() {
            self.start_canaries();
        }
        true
    }

    /// Tells the threads to stop; their handles, to wait for (with those it waited for).
    fn stop(self) -> Vec<Task> {
        self.drive.request_stop();
        for p in &self.unstarted {
            self.ctx
                .shared
                .thread_not_needed(&canary_what(&p.name, self.name()));
        }
        let mut all = self.threads;
        all.extend(self.waiting);
        all
    }
}

/// A drive's thread, or its place in the health pool: what a swap stops and waits for.
#[derive(Debug)]
enum Task {
    Thread(JoinHandle<()>),
    Health(health_pool::Handle),
}

impl Task {
    fn is_finished(&self) -> bool {
        match self {
            Task::Thread(t) => t.is_finished(),
            Task::Health(h) => h.is_finished(),
        }
    }

    /// Joins a finished thread (a health job has nothing to join).
    fn join(self) {
        if let Task::Thread(t) = self {
            let _ = t.join();
        }
    }

    fn name(&self) -> String {
        match self {
            Task::Thread(t) => t.thread().name().unwrap_or("?").to_string(),
            Task::Health(_) => "health polling".to_string(),
        }
    }
}

/// Waits until `deadline` for every thread of `stopping` (by drive name); returns those
/// still going then, by drive name (joined the others).
fn wait_for_threads(
    stopping: BTreeMap<String, Vec<Task>>,
    deadline: Instant,
) -> BTreeMap<String, Vec<Task>> {
    // Health pollers waiting for a read permit see their stop.
    crate::pacing::ReadLimiter::global().wake_all();
    while Instant::now() < deadline && stopping.values().flatten().any(|t: &Task| !t.is_finished())
    {
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut left = BTreeMap::new();
    for (name, threads) in stopping {
        let going: Vec<Task> = threads
            .into_iter()
            .filter_map(|t| {
                if t.is_finished() {
                    t.join();
                    None
                } else {
                    Some(t)
                }
            })
            .collect();
        if !going.is_empty() {
            let names: Vec<_> = going.iter().map(Task::name).collect();
            tracing::warn!(drive = %name, threads = ?names, "threads did not stop in time; leaving them (the drive's new threads, if any, wait for them)");
            left.insert(name, going);
        }
    }
    left
}

/// The threads of one config: per drive, its health poller and canaries (kept across
/// swaps while the drive's config does not change), and the scheduler.
struct Generation {
    /// The whole config and every drive: the scheduler's.
    ctx: Arc<Ctx>,
    drives: BTreeMap<String, DriveThreads>,
    /// Threads of removed drives that did not stop in time, by drive name: a drive of
    /// that name added again starts only once they have ended.
    leftovers: BTreeMap<String, Vec<Task>>,
    /// None when stopped, or when it could not be started (retried every tick).
    scheduler: Option<JoinHandle<()>>,
    scheduler_stop: Arc<AtomicBool>,
    scheduler_beat: Arc<Beat>,
}

impl Generation {
    fn start(
        config: Config,
        shared: Arc<Shared>,
        store: Arc<Store>,
        runs: Arc<Runs>,
    ) -> Generation {
        Generation::next(None, config, shared, store, runs, Instant::now())
    }

    /// The generation of `config`, after `old` (None at start): a drive whose
    /// [`fingerprint`] did not change keeps its threads, running; a changed or removed
    /// drive's threads are stopped (waited for until `deadline`) and a changed or added
    /// drive's started, once no earlier thread of that drive is left. The scheduler is
    /// stopped and started anew (runs going on go on: [`Runs`] outlives generations).
    fn next(
        old: Option<Generation>,
        config: Config,
        shared: Arc<Shared>,
        store: Arc<Store>,
        runs: Arc<Runs>,
        deadline: Instant,
    ) -> Generation {
        let (mut kept, mut stopping, mut leftovers) =
            (BTreeMap::new(), BTreeMap::new(), BTreeMap::new());
        let mut fresh: Vec<DriveThreads> = Vec::new();
        let mut sched = None;
        let globals = globals(&config);
        if let Some(old) = old {
            old.scheduler_stop.store(true, Ordering::Release);
            sched = old.scheduler;
            leftovers = old.leftovers;
            for (name, t) in old.drives {
                let same = config
                    .drives
                    .iter()
                    .find(|d| d.name == name)
                    .is_some_and(|d| {
                        t.drive.cfg == *d
                            && fingerprint(&slice_of(&globals, &config, d)) == t.fingerprint
                    });
                if same {
                    kept.insert(name, t);
                } else {
                    stopping.insert(name, t.stop());
                }
            }
        }
        for d in config.drives.iter().filter(|d| !kept.contains_key(&d.name)) {
            fresh.push(DriveThreads::new(
                (&globals, &config),
                d,
                &shared,
                &store,
                &runs,
            ));
        }
        if let Some(s) = sched {
            stopping
                .entry(String::new())
                .or_default()
                .push(Task::Thread(s));
        }
        for (name, left) in wait_for_threads(stopping, deadline) {
            if !name.is_empty() {
                leftovers.entry(name).or_default().extend(left);
            }
        }
        // Leftovers that have ended since are forgotten.
        leftovers.retain(|_, ts: &mut Vec<Task>| {
            ts.retain(|t| !t.is_finished());
            !ts.is_empty()
        });
        for t in &mut fresh {
            t.waiting = leftovers.remove(t.name()).unwrap_or_default();
        }
        let writers: BTreeMap<String, u64> = kept
            .values()
            .chain(&fresh)
            .map(|t: &DriveThreads| (t.name().to_string(), t.ctx.generation))
            .collect();
        // Drives and probes no longer configured leave the status (and so every
        // surface); new ones enter it. From here on, the threads of removed and changed
        // drives (some may still be going) cannot write it; a kept drive's go on.
        let generation = shared.begin_generation_with(writers, |s| {
            prune(s, &config);
            // What discovery knows of each drive (None for a listed drive it did not match).
            for d in &config.drives {
                s.drive_entry(&d.name).discovered = config.discovered.get(&d.name).cloned();
            }
        });
        let drives: BTreeMap<String, Arc<DriveCtl>> = kept
            .values()
            .chain(&fresh)
            .map(|t| (t.name().to_string(), t.drive.clone()))
            .collect();
        let ctx = Arc::new(Ctx {
            config,
            generation,
            shared,
            store,
            drives,
            runs,
        });
        ctx.refresh_drives(false);
        for mut t in fresh {
            if !t.start_when_free() {
                t.publish_waiting();
            }
            kept.insert(t.name().to_string(), t);
        }
        let beat = Beat::new("scheduler".into());
        beat.beat();
        let mut g = Generation {
            ctx,
            drives: kept,
            leftovers,
            scheduler: None,
            scheduler_stop: Arc::new(AtomicBool::new(false)),
            scheduler_beat: beat,
        };
        g.start_scheduler();
        g
    }

    /// Starts the scheduler's thread; one that cannot be started is recorded on every
    /// surface and tried again at the next tick ([`Generation::start_waiting`]).
    fn start_scheduler(&mut self) {
        let (c, s, b) = (
            self.ctx.clone(),
            self.scheduler_stop.clone(),
            self.scheduler_beat.clone(),
        );
        let shared = &self.ctx.shared;
        match spawn_thread("dp-scheduler".into(), move || scheduler::run(c, b, s)) {
            Ok(h) => {
                shared.thread_started(SCHEDULER);
                self.scheduler = Some(h);
            }
            Err(e) => shared.thread_failed(SCHEDULER, &e),
        }
    }

    /// The scheduler could not be started, and is to run.
    fn scheduler_missing(&self) -> bool {
        self.scheduler.is_none() && !self.scheduler_stop.load(Ordering::Acquire)
    }

    /// Starts the threads of drives that waited for their earlier threads to end, and
    /// forgets the leftovers that have ended (every tick of the main loop).
    /// Also retries the threads that could not be started (the scheduler, a drive's
    /// canaries, the health pool's workers).
    fn start_waiting(&mut self) {
        for t in self.drives.values_mut() {
            if !t.waiting.is_empty() || !t.unstarted.is_empty() {
                t.start_when_free();
            }
        }
        if self.scheduler_missing() {
            self.start_scheduler();
            if self.scheduler.is_some() {
                // Its last beat is from the failure: not a wedged scheduler.
                self.scheduler_beat.beat();
            }
        }
        health_pool::Pool::global().grow();
        self.leftovers.retain(|_, ts| {
            ts.retain(|t| !t.is_finished());
            !ts.is_empty()
        });
    }

    /// Stops the scheduler and waits for it (until `deadline`), so that nothing new
    /// starts while the runs and self-tests are being stopped: a run ended at the stop
    /// frees its drive, and the next tick would otherwise start a self-test there that
    /// nobody aborts.
    fn stop_scheduler(&mut self, deadline: Instant) {
        self.scheduler_stop.store(true, Ordering::Release);
        if let Some(s) = self.scheduler.take() {
            while !s.is_finished() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
            if s.is_finished() {
                let _ = s.join();
            } else {
                self.scheduler = Some(s);
            }
        }
    }

    /// Tells every thread to stop and waits for them until `deadline`. Threads still
    /// going then (a device that does not answer) are left behind, detached.
    fn stop(self, deadline: Instant) {
        self.scheduler_stop.store(true, Ordering::Release);
        let mut stopping: BTreeMap<String, Vec<Task>> = self
            .drives
            .into_iter()
            .map(|(name, t)| (name, t.stop()))
            .collect();
        if let Some(s) = self.scheduler {
            stopping
                .entry(String::new())
                .or_default()
                .push(Task::Thread(s));
        }
        wait_for_threads(stopping, deadline);
    }

    /// The threads whose silence for `max` means the daemon itself is wedged, for the
    /// watchdog: the scheduler. Not the canaries: one blocked in an I/O its drive does not
    /// answer (a failing disk's minutes of retries, a hung controller) is the drive's
    /// fault, a restart cannot end a thread stuck in the kernel, and it would stop the
    /// watch of every other drive on the host ([`Generation::stalled_canaries`] says it).
    /// A scheduler that could not be started is not wedged: it is retried, and every
    /// surface says so (a restart would meet the same limit on tasks).
    fn wedged(&self, max: Duration) -> Vec<String> {
        std::iter::once(&self.scheduler_beat)
            .filter(|_| !self.scheduler_missing())
            .filter(|b| b.age() > max)
            .map(|b| b.name.clone())
            .collect()
    }

    /// The canaries that have not beaten for `max`: blocked in an I/O (or wedged).
    fn stalled_canaries(&self, max: Duration) -> Vec<String> {
        self.drives
            .values()
            .flat_map(|t| &t.beats)
            .filter(|b| b.age() > max)
            .map(|b| b.name.clone())
            .collect()
    }
}

impl supervisor::Threads for Generation {
    fn start_waiting(&mut self) {
        Generation::start_waiting(self)
    }
    fn stalled_canaries(&self, max: Duration) -> Vec<String> {
        Generation::stalled_canaries(self, max)
    }
    fn wedged(&self, max: Duration) -> Vec<String> {
        Generation::wedged(self, max)
    }
    /// Stops what `new` changes of these threads (waiting until `deadline` for those)
    /// and starts the generation of `new`: a reload, and a change of the discovered drives.
    fn next(self, new: Config, deadline: Instant) -> Generation {
        let (shared, store, runs) = (
            self.ctx.shared.clone(),
            self.ctx.store.clone(),
            self.ctx.runs.clone(),
        );
        Generation::next(Some(self), new, shared, store, runs, deadline)
    }
    fn stop_scheduler(&mut self, deadline: Instant) {
        Generation::stop_scheduler(self, deadline)
    }
    fn stop(self, deadline: Instant) {
        Generation::stop(self, deadline)
    }
}

/// What outlives generations: the runs and self-tests, the children, the saved state.
struct Estate {
    runs: Arc<Runs>,
    store: Arc<Store>,
}

impl supervisor::Estate for Estate {
    fn stop_selftests(&self, deadline: Instant) {
        self.runs.selftests.stop_all(deadline);
    }
    fn stop_runs(&self, deadline: Instant) {
        self.runs.stop_all(deadline);
    }
    /// The runs have stopped their programs gracefully; whatever child is left (a
    /// smartctl on a hung disk, a run that did not stop in time) goes now, with its
    /// process group, and no new one starts.
    fn end_children(&self, grace: Duration) {
        crate::process::terminate_all(grace);
    }
    fn save(&self) {
        if self.store.held().is_some() {
            return; // logged at the start; nothing is saved while held
        }
        if let Err(e) = self.store.save() {
            tracing::error!(error = %e, "cannot save the state at exit");
        }
    }
}

fn load_config(opts: &Options) -> Result<Config, ConfigError> {
    let mut c = match &opts.config {
        Some(p) => Config::load(p)?,
        None => Config::embedded_default(
            &opts
                .state_dir
                .clone()
                .unwrap_or_else(config::default_state_dir),
        ),
    };
    if let Some(dir) = &opts.state_dir {
        c.state_dir = dir.clone();
    }
    if let Some(l) = opts.listen.first() {
        c.server.listen = *l;
    }
    Ok(c)
}

/// Waits until the scheduler has made its first pass, or `limit` has passed (false).
fn first_pass_made(shared: &Shared, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if shared.lock().scheduler.last_tick_unix > 0.0 {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn notify(state: &[sd_notify::NotifyState]) {
    // Outside systemd (no NOTIFY_SOCKET) this does nothing.
    if let Err(e) = sd_notify::notify(state) {
        tracing::debug!(error = %e, "sd_notify failed");
    }
}

fn summary_line(shared: &Shared) -> String {
    let s = shared.lock();
    let up = s.drives.values().filter(|d| d.up).count();
    let running = s.scheduler.running.len();
    summary_text(s.drives.len(), up, running)
}

/// The systemd status line: "2 drives, 2 up, 1 run going".
fn summary_text(drives: usize, up: usize, running: usize) -> String {
    format!(
        "{}, {up} up, {} going",
        crate::units::count(drives as u64, "drive", "drives"),
        crate::units::count(running as u64, "run", "runs")
    )
}

/// Runs the daemon until SIGTERM or SIGINT.
pub fn run(opts: Options) -> Result<(), DaemonError> {
    // The config as listed; what the daemon runs is it merged with discovery's last scan.
    let base = load_config(&opts)?;
    let mut discoverer = discover::Discoverer::new(crate::device::SystemPaths::default());
    let last_scan = discoverer.scan(&base.discovery);
    let (config, watch) = crate::discovery::merge(&base, &last_scan);
    if base.discovery.enabled {
        discover::log_watch(&watch);
    }
    let web = load_web(&opts)?;
    let dir = Arc::new(crate::statedir::StateDir::open(&config.state_dir)?);
    if let Some(w) = dir.insecure() {
        tracing::warn!("{w}");
    }
    let opened = Store::open(dir.clone(), now_unix() as i64);
    if let Some(w) = &opened.warning {
        tracing::warn!("{w}");
    }
    if let Some(why) = opened.store.held() {
        tracing::error!("{why}");
    }
    let state_status = crate::status::StateStatus {
        dir: config.state_dir.clone(),
        insecure: dir.insecure().map(str::to_string),
        recovered: opened.warning.clone(),
        ledger_held: opened.store.held().map(str::to_string),
    };
    let store = Arc::new(opened.store);
    let shared = Arc::new(Shared::new(Status {
        started_unix: now_unix(),
        config: ConfigStatus {
            path: opts.config.clone(),
            last_reload_successful: true,
            last_reload_success_unix: now_unix(),
            last_error: None,
        },
        state: state_status,
        ..Default::default()
    }));
    shared.set_state_dir(dir);

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(DaemonError::Runtime)?;
    let metrics_path: Arc<str> = opts
        .telemetry_path
        .as_deref()
        .unwrap_or(crate::http::routes::DEFAULT_TELEMETRY_PATH)
        .into();
    let bound_all = bind_all(&opts, config.server.listen)?;

    discover::publish_scan(&shared, &base.discovery, &last_scan, discoverer.scans());
    discover::publish_watch(&shared, &base.discovery, &watch, &last_scan);
    let runs = Arc::new(Runs::default());
    scheduler::recover(&store, now_unix() as i64);
    scheduler::start_cleanup(&store, config.runs);
    let generation = Generation::start(config, shared.clone(), store.clone(), runs.clone());
    {
        // The run index and last results, from the state, for the exporters.
        let st = store.lock();
        let mut s = shared.lock();
        s.runs = st.runs.clone();
    }
    restore_last_runs(&generation.ctx);
    // Ready (the "listening" line, READY=1) once the scheduler has made its first pass, so
    // /healthz answers 200 from the start; a pass that hangs (a device that does not
    // answer) holds the start back only so long, and /healthz then says why.
    if !first_pass_made(&shared, Duration::from_secs(10)) {
        tracing::warn!("the scheduler has not made its first pass in 10 s; starting anyway");
    }
    let disc_ctl = discover::Control::new(base.discovery.clone());
    let disc_rx = start_discovery(discoverer, &disc_ctl, &last_scan, &shared);
    let started = Started {
        base,
        last_scan,
        last_watch: watch,
        generation,
        estate: Estate { runs, store },
        disc_ctl,
        disc_rx,
    };
    let serving = Serving {
        opts: &opts,
        shared,
        web,
        metrics_path,
        http: None,
        pinned: Vec::new(),
    };
    runtime.block_on(serve(serving, bound_all, started))
}

/// The web config (`--web.config.file`), loaded and checked, in a handle a reload swaps.
fn load_web(opts: &Options) -> Result<crate::http::WebHandle, DaemonError> {
    let web = match &opts.web_config {
        Some(p) => Some(crate::http::WebConfig::load(p)?),
        None => None,
    };
    if let Some(w) = &web {
        tracing::info!(file = %w.path.display(), "web config: {}", w.summary());
        if w.tls.is_none() && w.auth.is_some() {
            tracing::warn!("basic auth without TLS: passwords cross the network in clear text");
        }
    }
    Ok(crate::http::WebHandle::new(web))
}

/// Binds every listen address before anything starts: one that cannot be is the whole
/// start's one-line error. The first is the one a reload may move (when no flag pins
/// them); the others (more `--web.listen-address`) stay as they are until the end.
fn bind_all(
    opts: &Options,
    configured: SocketAddr,
) -> Result<Vec<(std::net::TcpListener, SocketAddr)>, DaemonError> {
    let addrs = if opts.listen.is_empty() {
        vec![configured]
    } else {
        opts.listen.clone()
    };
    addrs
        .into_iter()
        .map(|addr| {
            bind(addr).map_err(|e| match e {
                DaemonError::Listen { addr, source, .. } => DaemonError::Listen {
                    addr,
                    source,
                    from_flag: !opts.listen.is_empty(),
                },
                e => e,
            })
        })
        .collect()
}

/// Starts the discovery thread; its scans come to the main loop, which merges and swaps.
fn start_discovery(
    discoverer: discover::Discoverer,
    ctl: &Arc<discover::Control>,
    first: &crate::discovery::Scan,
    shared: &Arc<Shared>,
) -> tokio::sync::mpsc::UnboundedReceiver<crate::discovery::Scan> {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<crate::discovery::Scan>();
    let (ctl, sh, first) = (ctl.clone(), shared.clone(), first.clone());
    if let Err(e) = std::thread::Builder::new()
        .name("dp-discovery".into())
        .spawn(move || {
            discover::run(
                discoverer,
                ctl,
                first,
                move |s| tx.send(s).is_ok(),
                move |d, s, n| discover::publish_scan(&sh, d, s, n),
            )
        })
    {
        tracing::error!(error = %e, "cannot start the discovery thread; drives plugged in later are not seen");
    }
    rx
}

/// What the control loop takes over once the threads run.
struct Started {
    base: Config,
    last_scan: crate::discovery::Scan,
    last_watch: crate::discovery::Watch,
    generation: Generation,
    estate: Estate,
    disc_ctl: Arc<discover::Control>,
    disc_rx: tokio::sync::mpsc::UnboundedReceiver<crate::discovery::Scan>,
}

/// The daemon's control loop, on the current thread's runtime.
type DaemonSupervisor = Supervisor<Generation, Estate, supervisor::SdNotify>;

/// The HTTP servers and what they serve.
struct Serving<'a> {
    opts: &'a Options,
    shared: Arc<Shared>,
    web: crate::http::WebHandle,
    metrics_path: Arc<str>,
    /// The server on the configured address, which a reload may move (None: a move could
    /// not take the old address back; bound again every tick).
    http: Option<Http>,
    /// The servers on the other `--web.listen-address`es.
    pinned: Vec<Http>,
}

/// Serves until SIGTERM or SIGINT: the servers start on the bound listeners, READY=1 is
/// sent, and the loop hands ticks, SIGHUPs, finished reloads and scans to the supervisor.
async fn serve(
    mut s: Serving<'_>,
    bound_all: Vec<(std::net::TcpListener, SocketAddr)>,
    started: Started,
) -> Result<(), DaemonError> {
    // The signal handlers are in place before the daemon says it is there: a reload or a
    // stop sent right after the "listening" line or READY=1 must not meet the default
    // action (the end of the process).
    use tokio::signal::unix::{signal, SignalKind};
    let mut hup = signal(SignalKind::hangup()).map_err(DaemonError::Runtime)?;
    let mut term = signal(SignalKind::terminate()).map_err(DaemonError::Runtime)?;
    let mut int = signal(SignalKind::interrupt()).map_err(DaemonError::Runtime)?;
    s.start(bound_all)?;
    notify(&[
        sd_notify::NotifyState::Ready,
        sd_notify::NotifyState::Status(&summary_line(&s.shared)),
    ]);
    let watchdog = sd_notify::watchdog_enabled();
    let period = watchdog
        .map(|w| (w / 2).max(Duration::from_millis(100)))
        .unwrap_or(Duration::from_secs(5));
    let mut tick = tokio::time::interval(period.min(Duration::from_secs(5)));
    let mut reload: Option<Reload> = None;
    let Started {
        base,
        last_scan,
        last_watch,
        generation,
        estate,
        disc_ctl,
        mut disc_rx,
    } = started;
    let mut sup = Supervisor::new(
        supervisor::Listed {
            base,
            last_scan,
            last_watch,
        },
        generation,
        estate,
        supervisor::SdNotify,
        s.shared.clone(),
        Box::new(move |d| match d {
            Some(d) => disc_ctl.set(d),
            None => disc_ctl.stop(),
        }),
        watchdog.is_some(),
    );
    loop {
        tokio::select! {
            _ = tick.tick() => {
                s.listen_again(sup.listen());
                sup.tick();
            }
            _ = hup.recv() => {
                if sup.hup() {
                    // The files are read and checked on a thread of their own: this one
                    // serves HTTP and takes SIGTERM, whatever the files do.
                    reload = Some(Reload::start(s.opts, RELOAD_TIMEOUT));
                }
            }
            done = Reload::finish(&mut reload) => {
                reload = None;
                s.reloaded(&mut sup, done).await?;
            }
            Some(scan) = disc_rx.recv() => {
                let mut scans = vec![scan];
                while let Ok(newer) = disc_rx.try_recv() {
                    scans.push(newer);
                }
                sup.scanned(scans).await?;
            }
            _ = term.recv() => break,
            _ = int.recv() => break,
        }
    }
    s.stop(sup).await;
    tracing::info!("stopped");
    Ok(())
}

impl Serving<'_> {
    /// Starts a server on each bound listener and says where it listens.
    fn start(
        &mut self,
        bound_all: Vec<(std::net::TcpListener, SocketAddr)>,
    ) -> Result<(), DaemonError> {
        let scheme = self.web.current().map_or("http", |w| w.scheme());
        for (listener, bound) in bound_all {
            let h = Http::start(listener, bound, &self.shared, &self.web, &self.metrics_path)?;
            if self.http.is_none() {
                self.http = Some(h);
            } else {
                self.pinned.push(h);
            }
        }
        for bound in self.http.iter().chain(&self.pinned).map(|h| h.bound) {
            announce(bound, &self.web);
            let path = &self.metrics_path;
            tracing::info!(%bound, metrics = %format!("{scheme}://{bound}{path}"), "driveprobe daemon started");
        }
        Ok(())
    }

    /// A move that could not take the old address back left no listener: binds the
    /// configured one again (called every tick until it can).
    fn listen_again(&mut self, to: SocketAddr) {
        if self.http.is_some() {
            return;
        }
        match Http::open(to, &self.shared, &self.web, &self.metrics_path) {
            Ok(h) => {
                announce(h.bound, &self.web);
                tracing::info!(bound = %h.bound, "listening again");
                self.http = Some(h);
            }
            Err(e) => tracing::debug!(error = %e, "still no listener"),
        }
    }

    /// A SIGHUP's files are read; both are taken or neither, as `ExecReload=` checks
    /// both: a refused web config refuses the reload (the old config and web config
    /// stay, and `last_reload_successful` says so), a refused config keeps the old web
    /// config too. A new listen address is bound before anything changes, and the
    /// supervisor swaps.
    async fn reloaded(
        &mut self,
        sup: &mut DaemonSupervisor,
        done: Result<ReloadRead, ReloadError>,
    ) -> Result<(), DaemonError> {
        let (new_web, mut loaded) = match done {
            Ok((web, config)) => (web, config.map_err(ReloadError::from)),
            Err(e) => (None, Err(e)),
        };
        let new_web = match new_web.transpose() {
            Ok(w) => w,
            Err(e) => {
                loaded = Err(ReloadError::Web(e));
                None
            }
        };
        // The new web config goes in first (the new address is announced with its
        // scheme), and back out if the new listen address cannot be bound: then the whole
        // new config is refused and the old one keeps serving.
        let old_web = self.web.current();
        let mut summary = None;
        if let (Ok(_), Some(w)) = (&loaded, new_web) {
            summary = Some(w.summary());
            self.web.set(w);
        }
        if let Ok(new) = &loaded {
            if self.http.is_none() || new.server.listen != sup.listen() {
                if let Err(e) = self.move_to(new.server.listen).await {
                    loaded = Err(ReloadError::Listen(e));
                    self.web.restore(old_web);
                }
            }
        }
        if let (Ok(_), Some(summary)) = (&loaded, summary) {
            tracing::info!("web config reloaded: {summary}");
        }
        sup.reloaded(loaded).await?;
        Ok(())
    }

    /// Moves the configured server to `to` (or opens it there, when there is none).
    async fn move_to(&mut self, to: SocketAddr) -> Result<(), DaemonError> {
        let (now, moved) = match self.http.take() {
            Some(h) => {
                h.move_to(to, &self.shared, &self.web, &self.metrics_path)
                    .await
            }
            None => match Http::open(to, &self.shared, &self.web, &self.metrics_path) {
                Ok(h) => (Some(h), Ok(())),
                Err(e) => (None, Err(e)),
            },
        };
        self.http = now;
        moved?;
        let bound = self.http.as_ref().map(|h| h.bound).unwrap_or(to);
        announce(bound, &self.web);
        tracing::info!(%bound, "listening on the new address; the old one is closed");
        Ok(())
    }

    /// The end: the servers stop accepting, the supervisor stops the threads, and
    /// requests in flight get a moment to finish.
    async fn stop(self, sup: DaemonSupervisor) {
        for h in self.http.iter().chain(&self.pinned) {
            let _ = h.shutdown.send(true);
        }
        sup.stop();
        for h in self.http.into_iter().chain(self.pinned) {
            let _ = tokio::time::timeout(Duration::from_millis(500), h.server).await;
        }
    }
}

/// How long a reload may take to read and check its files before it is given up (the
/// old config keeps running).
const RELOAD_TIMEOUT: Duration = Duration::from_secs(10);

/// What a reload read: the web config (when there is a web config file) and the config.
type ReloadRead = (
    Option<Result<crate::http::WebConfig, crate::http::WebConfigError>>,
    Result<Config, ConfigError>,
);

/// Why a SIGHUP left the old config running (logged, and the status's `last_error`).
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    #[error("{0}")]
    Config(#[from] ConfigError),
    /// The web config file is refused: nothing of the reload is taken.
    #[error("the new web config is refused: {0}")]
    Web(crate::http::WebConfigError),
    #[error("the reload could not read the config (its thread did not start or ended early); see the log")]
    Lost,
    #[error("reading and checking the config files took more than {secs} s (a file that blocks, such as a FIFO or a hung network filesystem?); the old config keeps running")]
    TimedOut { secs: f64 },
    /// The new `[server] listen` cannot be bound.
    #[error("{0}")]
    Listen(DaemonError),
}

/// A reload whose files are being read and checked on a thread of its own, so that a
/// file that blocks (a FIFO swapped in, a hung network filesystem) holds neither HTTP
/// nor SIGTERM, which run on the runtime's one thread.
struct Reload {
    rx: tokio::sync::oneshot::Receiver<ReloadRead>,
    deadline: tokio::time::Instant,
    limit: Duration,
}

impl Reload {
    fn start(opts: &Options, limit: Duration) -> Reload {
        let opts = opts.clone();
        Reload::spawn(
            move || {
                let web = opts.web_config.as_deref().map(crate::http::WebConfig::load);
                (web, load_config(&opts))
            },
            limit,
        )
    }

    /// Runs `read` on a new thread.
    fn spawn(read: impl FnOnce() -> ReloadRead + Send + 'static, limit: Duration) -> Reload {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let spawned = std::thread::Builder::new()
            .name("reload".into())
            .spawn(move || {
                let _ = tx.send(read());
            });
        if let Err(e) = spawned {
            tracing::error!(error = %e, "cannot start the reload thread");
        }
        Reload {
            rx,
            deadline: tokio::time::Instant::now() + limit,
            limit,
        }
    }

    /// What the reload read, or why it has nothing: it ran past its time limit (its
    /// thread is left to end on its own), or it could not run. Never ends while there is
    /// no reload.
    async fn finish(reload: &mut Option<Reload>) -> Result<ReloadRead, ReloadError> {
        let Some(r) = reload else {
            return std::future::pending().await;
        };
        match tokio::time::timeout_at(r.deadline, &mut r.rx).await {
            Ok(Ok(read)) => Ok(read),
            Ok(Err(_)) => Err(ReloadError::Lost),
            Err(_) => Err(ReloadError::TimedOut {
                secs: r.limit.as_secs_f64(),
            }),
        }
    }
}

/// The HTTP server on one listener.
struct Http {
    server: tokio::task::JoinHandle<std::io::Result<()>>,
    shutdown: tokio::sync::watch::Sender<bool>,
    bound: SocketAddr,
}

impl Http {
    /// Serves on `listener` (from [`bind`]; `bound` is its address).
    fn start(
        listener: std::net::TcpListener,
        bound: SocketAddr,
        shared: &Arc<Shared>,
        web: &crate::http::WebHandle,
        metrics_path: &Arc<str>,
    ) -> Result<Http, DaemonError> {
        let listener =
            tokio::net::TcpListener::from_std(listener).map_err(|source| DaemonError::Listen {
                addr: bound,
                source,
                from_flag: false,
            })?;
        let (shutdown, rx) = tokio::sync::watch::channel(false);
        let (shared, web, path) = (shared.clone(), web.clone(), metrics_path.clone());
        let server = tokio::spawn(async move {
            crate::http::serve_web_at(listener, shared, rx, web, &path).await
        });
        Ok(Http {
            server,
            shutdown,
            bound,
        })
    }

    /// Binds `addr` and serves on it.
    fn open(
        addr: SocketAddr,
        shared: &Arc<Shared>,
        web: &crate::http::WebHandle,
        metrics_path: &Arc<str>,
    ) -> Result<Http, DaemonError> {
        let (listener, bound) = bind(addr)?;
        Http::start(listener, bound, shared, web, metrics_path)
    }

    /// Stops accepting, and lets requests in flight finish (for a moment).
    async fn stop(self) {
        let _ = self.shutdown.send(true);
        let _ = tokio::time::timeout(Duration::from_secs(2), self.server).await;
    }

    /// Moves the server to `to`: the new address is bound first, then the old listener
    /// is closed. The same port on another address (127.0.0.1:P to 0.0.0.0:P) cannot be
    /// bound while the old listener holds it: then the old one is closed first, and
    /// taken back if the new one still cannot be bound. Returns the server now running
    /// (None only if the old address could not be taken back) and whether it moved.
    async fn move_to(
        self,
        to: SocketAddr,
        shared: &Arc<Shared>,
        web: &crate::http::WebHandle,
        metrics_path: &Arc<str>,
    ) -> (Option<Http>, Result<(), DaemonError>) {
        match Http::open(to, shared, web, metrics_path) {
            Ok(new) => {
                self.stop().await;
                (Some(new), Ok(()))
            }
            Err(DaemonError::Listen { source, .. })
                if source.kind() == std::io::ErrorKind::AddrInUse
                    && to.port() == self.bound.port() =>
            {
                let old = self.bound;
                self.stop().await;
                match Http::open(to, shared, web, metrics_path) {
                    Ok(new) => (Some(new), Ok(())),
                    Err(e) => match Http::open(old, shared, web, metrics_path) {
                        Ok(back) => (Some(back), Err(e)),
                        Err(again) => {
                            tracing::error!(error = %again, "cannot take the old address back: no HTTP until it can be bound again (tried every tick, and at a reload)");
                            (None, Err(e))
                        }
                    },
                }
            }
            Err(e) => (Some(self), Err(e)),
        }
    }
}

/// The "listening on" line, with the scheme of the web config in force (a SIGHUP may
/// have turned TLS on or off).
fn announce(bound: SocketAddr, web: &crate::http::WebHandle) {
    let scheme = web.current().map_or("http", |w| w.scheme());
    // Not `println!`: a closed stdout must not panic the daemon.
    {
        use std::io::Write;
        let _ = writeln!(std::io::stdout(), "listening on {scheme}://{bound}/");
    }
}

/// A non-blocking listener on `addr`, and the address it got (the port, for port 0).
/// `[::]:PORT` (what `:PORT` means) is every interface of both families, as Go exporters
/// bind it, whatever `net.ipv6.bindv6only` says; on a host without IPv6 it is
/// `0.0.0.0:PORT`.
fn bind(addr: SocketAddr) -> Result<(std::net::TcpListener, SocketAddr), DaemonError> {
    let err = |source| DaemonError::Listen {
        addr,
        source,
        from_flag: false,
    };
    let listener = match bind_any(addr) {
        Some(l) => l.map_err(err)?,
        None => std::net::TcpListener::bind(addr).map_err(err)?,
    };
    listener.set_nonblocking(true).map_err(err)?;
    let bound = listener.local_addr().map_err(err)?;
    Ok((listener, bound))
}

/// `[::]:PORT` as one dual-stack socket, or `0.0.0.0:PORT` where the host has no IPv6;
/// None for any other address.
fn bind_any(addr: SocketAddr) -> Option<std::io::Result<std::net::TcpListener>> {
    use socket2::{Domain, Socket, Type};
    if !matches!(addr, SocketAddr::V6(a) if a.ip().is_unspecified() && a.scope_id() == 0) {
        return None;
    }
    let socket = match Socket::new(Domain::IPV6, Type::STREAM, None) {
        Ok(s) => s,
        Err(e) if e.raw_os_error() == Some(libc::EAFNOSUPPORT) => {
            let v4 = SocketAddr::from(([0, 0, 0, 0], addr.port()));
            return Some(std::net::TcpListener::bind(v4));
        }
        Err(e) => return Some(Err(e)),
    };
    let bound = socket
        .set_only_v6(false)
        .and_then(|()| socket.set_reuse_address(true))
        .and_then(|()| socket.bind(&addr.into()))
        .and_then(|()| socket.listen(1024));
    Some(bound.map(|()| socket.into()))
}

/// After a restart: the last run of each suite per drive, from the documents on disk.
fn restore_last_runs(ctx: &Ctx) {
    let runs = ctx.store.lock().runs.clone();
    let mut last: BTreeMap<(String, String), &schedule::RunRecord> = BTreeMap::new();
    for r in &runs {
        if r.ended.is_some() && r.result_path.is_some() {
            last.insert((r.drive.clone(), r.suite.clone()), r);
        }
    }
    for ((drive, suite), r) in last {
        if !ctx.drives.contains_key(&drive) {
            continue;
        }
        let bytes = match scheduler::read_result(ctx.store.dir(), &r.id) {
            Ok(Some(b)) => b,
            Ok(None) => continue,
            Err(e) => {
                tracing::warn!(run = %r.id, error = %e, "cannot read a run's result document");
                continue;
            }
        };
        let Ok(doc) = serde_json::from_slice::<crate::protocol::result::SuiteResult>(&bytes) else {
            continue;
        };
        let success = runs
            .iter()
            .rev()
            .find(|x| {
                x.drive == drive && x.suite == suite && x.status == schedule::RunStatus::Passed
            })
            .map(|x| x.ended.unwrap_or(x.started) as f64);
        let mut summary = scheduler::summarize(&r.id, &doc, r.status, success);
        scheduler::annotate(&mut summary, r);
        ctx.shared.drive(&drive, |d| {
            d.last_runs.insert(suite.clone(), summary);
            // The run's collector, as the run's end left it: the same reason everywhere.
            d.collectors.insert(
                format!("run:{suite}"),
                crate::status::CollectorStatus {
                    success: r.status == schedule::RunStatus::Passed,
                    duration_seconds: 0.0,
                    last_unix: r.ended.unwrap_or(r.started) as f64,
                    error: r.reason.clone(),
                },
            );
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Review of issue 17, C1: the systemd status said "1 drive(s), 1 up, 0 run(s) going".
    /// `:PORT` (`[::]:PORT`) answers on IPv4 and, where the host has it, IPv6 loopback.
    #[test]
    fn every_interface_means_both_families() {
        let (listener, bound) = bind("[::]:0".parse().unwrap()).unwrap();
        listener.set_nonblocking(false).unwrap();
        let port = bound.port();
        // ::1 on `lo` (a container may have IPv6 without it).
        let v6 = std::fs::read_to_string("/proc/net/if_inet6")
            .is_ok_and(|s| s.lines().any(|l| l.starts_with(&format!("{:031}1", 0))));
        let mut targets = vec![SocketAddr::from(([127, 0, 0, 1], port))];
        if v6 {
            targets.push(SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, port)));
        }
        for t in targets {
            let c = std::net::TcpStream::connect_timeout(&t, Duration::from_secs(5));
            assert!(c.is_ok(), "{t}: {c:?}");
            let (_s, from) = listener.accept().unwrap();
            assert_eq!(from.ip().to_canonical(), t.ip(), "{t}");
        }
    }

    #[test]
    fn the_status_line_counts_in_words() {
        assert_eq!(summary_text(1, 1, 0), "1 drive, 1 up, 0 runs going");
        assert_eq!(summary_text(2, 1, 1), "2 drives, 1 up, 1 run going");
    }

    /// Review of issue 17, B4: probes (and their canary collectors) the new config no
    /// longer runs on a drive leave the status, with the drives it no longer has.
    #[test]
    fn a_reload_prunes_drives_and_probes_the_config_dropped() {
        let cfg = |probes: &str| {
            Config::parse(&format!(
                "state_dir = \"/dev/shm/none\"\n\
                 [[drive]]\nname = \"a\"\nfile_target = {{ path = \"/dev/shm/x/a.dat\", size = \"1MiB\" }}\n\
                 {probes}"
                ),
                "t.toml",
            )
            .unwrap()
        };
        let probe = |n: &str| {
            format!(
                "[[probe]]\nname = \"{n}\"\ndrives = [\"a\"]\nworkload = {{ rate_iops = 10 }}\n"
            )
        };
        let mut s = Status::default();
        for d in ["a", "gone"] {
            let e = s.drives.entry(d.into()).or_default();
            for p in ["rd", "rd2"] {
                e.probes.insert(p.into(), Default::default());
                e.collectors
                    .insert(canary::collector_name(p), Default::default());
            }
            e.collectors.insert("health".into(), Default::default());
        }
        prune(&mut s, &cfg(&probe("rd")));
        assert_eq!(s.drives.keys().collect::<Vec<_>>(), ["a"]);
        let a = &s.drives["a"];
        assert_eq!(a.probes.keys().collect::<Vec<_>>(), ["rd"]);
        assert_eq!(
            a.collectors.keys().collect::<Vec<_>>(),
            ["canary:rd", "health"]
        );
    }

    /// Issue 18: what makes a swap stop and start a drive's threads: a change of what they
    /// read (its entry, its probes, the health interval, the wear budget when a probe on
    /// it writes), not another drive's change nor a setting only others read.
    #[test]
    fn a_drive_changes_only_with_what_its_threads_read() {
        let cfg = |b_size: &str, c: bool| {
            let mut t = format!(
                "state_dir = \"/dev/shm/none\"\ndiscovery.enabled = false\nhealth_interval = \"1h\"\n\
                 [[drive]]\nname = \"a\"\nfile_target = {{ path = \"/dev/shm/x/a.dat\", size = \"1MiB\" }}\n\
                 [[drive]]\nname = \"b\"\nfile_target = {{ path = \"/dev/shm/x/b.dat\", size = \"{b_size}\" }}\n"
            );
            if c {
                t += "[[drive]]\nname = \"c\"\nfile_target = { path = \"/dev/shm/x/c.dat\", size = \"1MiB\" }\n";
            }
            t += "[[probe]]\nname = \"rd\"\ndrives = [\"*\"]\nworkload = { rate_iops = 10 }\n";
            Config::parse(&t, "t.toml").unwrap()
        };
        let fp = |c: &Config, n: &str| {
            fingerprint(&slice(c, c.drives.iter().find(|d| d.name == n).unwrap()))
        };
        let base = cfg("1MiB", false);
        // b grows and c comes (the probe on "*" now lists c too): a is the same.
        let next = cfg("2MiB", true);
        assert_eq!(fp(&base, "a"), fp(&next, "a"));
        assert_ne!(fp(&base, "b"), fp(&next, "b"));
        // A probe's drive list is not the drive's (a class canary gains every new disk).
        let mut more = base.clone();
        more.probes[0].drives.push("elsewhere".into());
        assert_eq!(fp(&base, "a"), fp(&more, "a"));
        // Its rate is.
        let mut faster = base.clone();
        faster.probes[0].job = config::canary_job(20.0, faster.probes[0].window);
        assert_ne!(fp(&base, "a"), fp(&faster, "a"));
        // The health interval is every drive's.
        let mut slower = base.clone();
        slower.health_interval = Duration::from_secs(60);
        assert_ne!(fp(&base, "a"), fp(&slower, "a"));
        // What only the HTTP server, the scheduler or discovery read is no drive's.
        let mut other = base.clone();
        other.server.listen = "127.0.0.1:1".parse().unwrap();
        other.runs.keep_documents += 1;
        other.discovery.rescan_interval += Duration::from_secs(1);
        other.state_dir = "/dev/shm/elsewhere".into();
        assert_eq!(fp(&base, "a"), fp(&other, "a"));
        // The wear budget holds writing probes only.
        let mut budget = base.clone();
        budget.wear_budget.unrated_bytes_per_day += 1;
        assert_eq!(fp(&base, "a"), fp(&budget, "a"));
        let (mut w, mut wb) = (base.clone(), budget.clone());
        w.probes[0].writes = true;
        wb.probes[0].writes = true;
        assert_ne!(fp(&w, "a"), fp(&wb, "a"));
        // The slice holds the drive alone, with its probes.
        let s = slice(&next, &next.drives[0]);
        assert_eq!(s.drives.len(), 1);
        assert_eq!(s.probes[0].drives, ["a"]);
    }

    /// A reload whose reading never ends is given up at its limit, and the runtime's
    /// thread (HTTP, signals) goes on meanwhile.
    #[test]
    fn a_reload_that_hangs_is_given_up_and_holds_nothing_else() {
        fn refused(message: &str) -> ConfigError {
            ConfigError::Invalid {
                file: "t.toml".into(),
                line: 1,
                column: 1,
                message: message.into(),
            }
        }
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let (hold_tx, hold_rx) = std::sync::mpsc::channel::<()>();
        rt.block_on(async move {
            let mut reload = Some(Reload::spawn(
                move || {
                    // Blocks until the test ends (a FIFO's open, a hung mount).
                    let _ = hold_rx.recv();
                    (None, Err(refused("never")))
                },
                Duration::from_millis(300),
            ));
            let ticks = tokio::spawn(async {
                let mut n = 0u32;
                loop {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    n += 1;
                    if n == 5 {
                        return n;
                    }
                }
            });
            let e = Reload::finish(&mut reload).await.err().unwrap().to_string();
            assert!(e.contains("took more than 0.3 s"), "{e}");
            // The other task ran while the reload was pending.
            assert!(ticks.is_finished(), "the runtime was held by the reload");
            // No reload: finish never ends.
            let mut none: Option<Reload> = None;
            let waited =
                tokio::time::timeout(Duration::from_millis(50), Reload::finish(&mut none)).await;
            assert!(waited.is_err());
        });
        drop(hold_tx);
        // A reload that reads at once hands over what it read.
        rt.block_on(async {
            let mut reload = Some(Reload::spawn(
                || (None, Err(refused("refused"))),
                Duration::from_secs(5),
            ));
            let (web, config) = Reload::finish(&mut reload).await.unwrap();
            assert!(web.is_none());
            assert_eq!(
                config.err().map(|e| e.to_string()).as_deref(),
                Some("t.toml:1:1: refused")
            );
        });
    }
}
