//! `driveprobe daemon`: the registered drives, their canaries, health polling and
//! scheduled runs, served as Prometheus metrics and a status page.
//!
//! Threads: the main thread runs a small tokio runtime (HTTP, signals, the systemd
//! watchdog); everything that touches a drive runs on dedicated OS threads, one per
//! canary (plus its engine worker), one health poller per drive (a hung device stalls
//! only its own drive), one scheduler, one per scheduled run. They meet in
//! [`crate::status::Shared`] (what is exported) and [`store::Store`] (what survives a
//! restart).
//!
//! A config "generation" is the set of threads made from one config. SIGHUP loads the new
//! config; when it is valid, the old generation stops and a new one starts (runs going on
//! go on: [`scheduler::Runs`] outlives generations); when it is not, the old one keeps
//! running and the failure is exported.

pub mod canary;
pub mod condlog;
pub mod discover;
pub mod health;
pub mod identity;
pub mod pacing;
pub mod scheduler;
pub mod standby;
pub mod store;
pub mod window;

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

/// A failure that stops the daemon before or while it starts. Each is one line.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error("{0}")]
    Config(#[from] ConfigError),
    #[error("state directory {path}: {source}; create it or set state_dir in the config to a writable directory")]
    StateDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{0}; fix or remove the state file")]
    State(#[from] schedule::StateError),
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
    resolved: Mutex<Result<Resolved, String>>,
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
        let resolved = identity::resolve(&cfg);
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
        let r = identity::resolve(&self.cfg);
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
    pub fn resolved(&self) -> Result<Resolved, String> {
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

/// What every thread of one generation shares.
#[derive(Debug)]
pub struct Ctx {
    pub config: Config,
    /// This generation's number: its threads write the status only while it is current.
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
                s.down_reason = r.as_ref().err().cloned();
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
pub fn ensure_file_target(ft: &config::FileTarget) -> Result<(), String> {
    use crate::target::Ensured;
    let what = |e: &dyn std::fmt::Display| format!("file target {}: {e}", ft.path.display());
    match crate::target::ensure_own_file(&ft.path, ft.size) {
        Ok(Ensured::Recreated { was }) => {
            tracing::warn!(path = %ft.path.display(), size = was, configured = ft.size,
                "the file target is shorter than its configured size; created it again");
            Ok(())
        }
        Ok(_) => Ok(()),
        Err(e @ crate::target::TargetError::NotFound(_)) => Err(what(&e)),
        Err(e) => Err(e.to_string()),
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

/// The threads of one config.
struct Generation {
    ctx: Arc<Ctx>,
    threads: Vec<JoinHandle<()>>,
    scheduler_stop: Arc<AtomicBool>,
    beats: Vec<Arc<Beat>>,
}

impl Generation {
    fn start(
        config: Config,
        shared: Arc<Shared>,
        store: Arc<Store>,
        runs: Arc<Runs>,
    ) -> Generation {
        let drives: BTreeMap<String, Arc<DriveCtl>> = config
            .drives
            .iter()
            .map(|d| {
                (
                    d.name.clone(),
                    Arc::new(DriveCtl::new(d.clone(), runs.clone())),
                )
            })
            .collect();
        // Drives and probes no longer configured leave the status (and so every
        // surface); new ones enter it. From here on, the old generation's threads
        // (some may still be going) cannot write it.
        let generation = shared.begin_generation(|s| {
            prune(s, &config);
            // What discovery knows of each drive (None for a listed drive it did not match).
            for d in &config.drives {
                s.drive_entry(&d.name).discovered = config.discovered.get(&d.name).cloned();
            }
        });
        let ctx = Arc::new(Ctx {
            config,
            generation,
            shared,
            store,
            drives,
            runs,
        });
        for d in ctx.drives.values() {
            if let Ok(r) = d.resolved() {
                if let Some(n) = &r.note {
                    tracing::info!(drive = %d.cfg.name, "{n}");
                }
            }
        }
        ctx.refresh_drives(false);
        let mut threads = Vec::new();
        let mut beats = Vec::new();
        let spawn = |name: String, f: Box<dyn FnOnce() + Send>| {
            std::thread::Builder::new().name(name).spawn(f)
        };
        for d in ctx.drives.values() {
            let (c, dd) = (ctx.clone(), d.clone());
            match spawn(
                format!("dp-health-{}", d.cfg.name),
                Box::new(move || health::run(c, dd)),
            ) {
                Ok(h) => threads.push(h),
                Err(e) => {
                    tracing::error!(drive = %d.cfg.name, error = %e, "cannot start the health thread")
                }
            }
            for p in ctx
                .config
                .probes
                .iter()
                .filter(|p| p.drives.contains(&d.cfg.name))
            {
                let beat = Beat::new(format!("canary {} on {}", p.name, d.cfg.name));
                beat.beat();
                beats.push(beat.clone());
                let (c, dd, pp) = (ctx.clone(), d.clone(), p.clone());
                match spawn(
                    format!("dp-canary-{}", d.cfg.name),
                    Box::new(move || canary::run(c, dd, pp, beat)),
                ) {
                    Ok(h) => threads.push(h),
                    Err(e) => {
                        tracing::error!(drive = %d.cfg.name, error = %e, "cannot start a canary thread")
                    }
                }
            }
        }
        let scheduler_stop = Arc::new(AtomicBool::new(false));
        let beat = Beat::new("scheduler".into());
        beat.beat();
        beats.push(beat.clone());
        let (c, s) = (ctx.clone(), scheduler_stop.clone());
        match spawn(
            "dp-scheduler".into(),
            Box::new(move || scheduler::run(c, beat, s)),
        ) {
            Ok(h) => threads.push(h),
            Err(e) => tracing::error!(error = %e, "cannot start the scheduler thread"),
        }
        Generation {
            ctx,
            threads,
            scheduler_stop,
            beats,
        }
    }

    /// Tells every thread to stop and waits for them until `deadline`. Threads still
    /// going then (a device that does not answer) are left behind, detached.
    fn stop(self, deadline: Instant) {
        self.scheduler_stop.store(true, Ordering::Release);
        for d in self.ctx.drives.values() {
            d.request_stop();
        }
        // Health pollers waiting for a read permit see their stop.
        pacing::ReadLimiter::global().wake_all();
        for t in self.threads {
            while !t.is_finished() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
            if t.is_finished() {
                let _ = t.join();
            } else {
                tracing::warn!(thread = ?t.thread().name(), "a thread did not stop in time; leaving it");
            }
        }
    }

    /// The threads that have not beaten for `max`.
    fn stale(&self, max: Duration) -> Vec<String> {
        self.beats
            .iter()
            .filter(|b| b.age() > max)
            .map(|b| b.name.clone())
            .collect()
    }
}

/// Stops `old` (waiting up to 5 s for its threads) and starts a generation on `new`: a
/// reload, and a change of the discovered drives.
async fn swap(
    old: Generation,
    new: Config,
    shared: &Arc<Shared>,
    store: &Arc<Store>,
    runs: &Arc<Runs>,
) -> Generation {
    let deadline = Instant::now() + Duration::from_secs(5);
    let _ = tokio::task::spawn_blocking(move || old.stop(deadline)).await;
    Generation::start(new, shared.clone(), store.clone(), runs.clone())
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
    let mut base = load_config(&opts)?;
    let mut discoverer = discover::Discoverer::new(crate::device::SystemPaths::default());
    let mut last_scan = discoverer.scan(&base.discovery);
    let (config, watch) = crate::discovery::merge(&base, &last_scan);
    if base.discovery.enabled {
        discover::log_watch(&watch);
    }
    let web = match &opts.web_config {
        Some(p) => Some(crate::http::WebConfig::load(p)?),
        None => None,
    };
    let scheme = web.as_ref().map_or("http", |w| w.scheme());
    if let Some(w) = &web {
        tracing::info!(file = %w.path.display(), "web config: {}", w.summary());
        if w.tls.is_none() && w.auth.is_some() {
            tracing::warn!("basic auth without TLS: passwords cross the network in clear text");
        }
    }
    let web = crate::http::WebHandle::new(web);
    std::fs::create_dir_all(&config.state_dir).map_err(|source| DaemonError::StateDir {
        path: config.state_dir.clone(),
        source,
    })?;
    let opened = Store::open(&config.state_dir, now_unix() as i64)?;
    if let Some(w) = &opened.warning {
        tracing::warn!("{w}");
    }
    let store = Arc::new(opened.store);
    let shared = Arc::new(Shared::new(Status {
        started_unix: now_unix(),
        config: ConfigStatus {
            path: opts.config.clone(),
            last_reload_successful: true,
            last_reload_success_unix: now_unix(),
            last_error: None,
        },
        ..Default::default()
    }));

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(DaemonError::Runtime)?;
    // Every address is bound before anything starts: one that cannot be is the whole
    // start's one-line error. The first is the one a reload may move (when no flag pins
    // them); the others (more `--web.listen-address`) stay as they are until the end.
    let metrics_path: Arc<str> = opts
        .telemetry_path
        .as_deref()
        .unwrap_or(crate::http::routes::DEFAULT_TELEMETRY_PATH)
        .into();
    let addrs = if opts.listen.is_empty() {
        vec![config.server.listen]
    } else {
        opts.listen.clone()
    };
    let mut bound_all = Vec::with_capacity(addrs.len());
    for addr in addrs {
        bound_all.push(bind(addr).map_err(|e| match e {
            DaemonError::Listen { addr, source, .. } => DaemonError::Listen {
                addr,
                source,
                from_flag: !opts.listen.is_empty(),
            },
            e => e,
        })?);
    }

    discover::publish_scan(&shared, &base.discovery, &last_scan, discoverer.scans());
    discover::publish_watch(&shared, &base.discovery, &watch);
    let mut last_watch = watch;
    let runs = Arc::new(Runs::default());
    scheduler::recover(&store, now_unix() as i64);
    scheduler::start_cleanup(&config.state_dir, &store, config.runs);
    let mut generation = Generation::start(config, shared.clone(), store.clone(), runs.clone());
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

    // The discovery thread: its scans come to the main loop, which merges and swaps.
    let disc_ctl = discover::Control::new(base.discovery.clone());
    let (disc_tx, mut disc_rx) = tokio::sync::mpsc::unbounded_channel::<crate::discovery::Scan>();
    {
        let (ctl, sh, first) = (disc_ctl.clone(), shared.clone(), last_scan.clone());
        if let Err(e) = std::thread::Builder::new()
            .name("dp-discovery".into())
            .spawn(move || {
                discover::run(
                    discoverer,
                    ctl,
                    first,
                    move |s| disc_tx.send(s).is_ok(),
                    move |d, s, n| discover::publish_scan(&sh, d, s, n),
                )
            })
        {
            tracing::error!(error = %e, "cannot start the discovery thread; drives plugged in later are not seen");
        }
    }

    runtime.block_on(async move {
        // The signal handlers are in place before the daemon says it is there: a reload
        // or a stop sent right after the "listening" line or READY=1 must not meet the
        // default action (the end of the process).
        use tokio::signal::unix::{signal, SignalKind};
        let mut hup = signal(SignalKind::hangup()).map_err(DaemonError::Runtime)?;
        let mut term = signal(SignalKind::terminate()).map_err(DaemonError::Runtime)?;
        let mut int = signal(SignalKind::interrupt()).map_err(DaemonError::Runtime)?;
        let mut http = None;
        let mut pinned = Vec::new();
        for (listener, bound) in bound_all {
            let h = Http::start(listener, bound, &shared, &web, &metrics_path)?;
            if http.is_none() {
                http = Some(h);
            } else {
                pinned.push(h);
            }
        }
        for bound in http.iter().chain(&pinned).map(|h| h.bound) {
            announce(bound, &web);
            tracing::info!(%bound, metrics = %format!("{scheme}://{bound}{metrics_path}"), "driveprobe daemon started");
        }
        notify(&[
            sd_notify::NotifyState::Ready,
            sd_notify::NotifyState::Status(&summary_line(&shared)),
        ]);
        let watchdog = sd_notify::watchdog_enabled();
        let period = watchdog
            .map(|w| (w / 2).max(Duration::from_millis(100)))
            .unwrap_or(Duration::from_secs(5));
        let mut tick = tokio::time::interval(period.min(Duration::from_secs(5)));
        let mut reload: Option<Reload> = None;
        let mut conditions = condlog::CondLog::new("daemon");
        loop {
            tokio::select! {
                _ = tick.tick() => {
                    if http.is_none() {
                        // A move that could not take the old address back left no
                        // listener: bind the configured one again, every tick until it can.
                        let to = generation.ctx.config.server.listen;
                        match Http::open(to, &shared, &web, &metrics_path) {
                            Ok(h) => {
                                announce(h.bound, &web);
                                tracing::info!(bound = %h.bound, "listening again");
                                http = Some(h);
                            }
                            Err(e) => tracing::debug!(error = %e, "still no listener"),
                        }
                    }
                    let stale = generation.stale(Duration::from_secs(15));
                    if stale.is_empty() {
                        conditions.ends("watchdog");
                        if watchdog.is_some() {
                            notify(&[sd_notify::NotifyState::Watchdog]);
                        }
                        notify(&[sd_notify::NotifyState::Status(&summary_line(&shared))]);
                    } else {
                        // Said once while it lasts (and when it ends), not every tick.
                        conditions.holds(
                            "watchdog",
                            condlog::Level::Error,
                            format!("threads stopped beating; withholding the watchdog: {stale:?}"),
                        );
                    }
                }
                _ = hup.recv() => {
                    if reload.is_some() {
                        tracing::warn!("SIGHUP: the last reload is still reading its files; this one is left out");
                        continue;
                    }
                    let mut reloading = vec![sd_notify::NotifyState::Reloading];
                    if let Ok(m) = sd_notify::NotifyState::monotonic_usec_now() {
                        reloading.push(m);
                    }
                    notify(&reloading);
                    tracing::info!("SIGHUP: reloading the config");
                    // The files are read and checked on a thread of their own: this one
                    // serves HTTP and takes SIGTERM, whatever the files do.
                    reload = Some(Reload::start(&opts, RELOAD_TIMEOUT));
                }
                done = Reload::finish(&mut reload) => {
                    reload = None;
                    let (new_web, mut loaded) = match done {
                        Ok(read) => read,
                        Err(e) => (None, Err(e)),
                    };
                    match new_web {
                        Some(Ok(w)) => {
                            tracing::info!("web config reloaded: {}", w.summary());
                            web.set(w);
                        }
                        Some(Err(e)) => tracing::error!("the new web config is refused; the old one stays in force: {e}"),
                        None => {}
                    }
                    // A new listen address is bound before anything changes: if it cannot
                    // be, the whole new config is refused and the old one keeps serving.
                    if let Ok(new) = &loaded {
                        if http.is_none() || new.server.listen != generation.ctx.config.server.listen {
                            let to = new.server.listen;
                            let (now, moved) = match http.take() {
                                Some(h) => h.move_to(to, &shared, &web, &metrics_path).await,
                                None => match Http::open(to, &shared, &web, &metrics_path) {
                                    Ok(h) => (Some(h), Ok(())),
                                    Err(e) => (None, Err(e.to_string())),
                                },
                            };
                            http = now;
                            match moved {
                                Ok(()) => {
                                    let bound = http.as_ref().map(|h| h.bound).unwrap_or(to);
                                    announce(bound, &web);
                                    tracing::info!(%bound, "listening on the new address; the old one is closed");
                                }
                                Err(e) => loaded = Err(e),
                            }
                        }
                    }
                    match loaded {
                        Ok(new) => {
                            // The listed config anew, with discovery's last scan; the
                            // discovery thread rescans at once with the new [discovery].
                            base = new;
                            // The last scan under the new filters: a drive the reload
                            // excludes gets no canary before the rescan.
                            last_scan = crate::discovery::refilter(&last_scan, &base.discovery);
                            let (merged, watch) = crate::discovery::merge(&base, &last_scan);
                            discover::publish_watch(&shared, &base.discovery, &watch);
                            discover::log_watch_change(&last_watch, &watch);
                            last_watch = watch;
                            disc_ctl.set(base.discovery.clone());
                            generation = swap(generation, merged, &shared, &store, &runs).await;
                            let mut s = shared.lock();
                            s.config.last_reload_successful = true;
                            s.config.last_reload_success_unix = now_unix();
                            s.config.last_error = None;
                            drop(s);
                            tracing::info!("config reloaded");
                        }
                        Err(e) => {
                            tracing::error!(error = %e, "the new config is refused; the old one keeps running");
                            let mut s = shared.lock();
                            s.config.last_reload_successful = false;
                            s.config.last_error = Some(e);
                        }
                    }
                    notify(&[sd_notify::NotifyState::Ready, sd_notify::NotifyState::Status(&summary_line(&shared))]);
                }
                Some(scan) = disc_rx.recv() => {
                    last_scan = scan;
                    // Scans that came while the last swap waited for its threads (up to
                    // 5 s, one every 2 s in a hot-plug storm): only the newest counts;
                    // one swap per scan would fall ever further behind.
                    while let Ok(newer) = disc_rx.try_recv() {
                        last_scan = newer;
                    }
                    let (new, watch) = crate::discovery::merge(&base, &last_scan);
                    tracing::info!("discovery: the drives changed; starting on the new set");
                    discover::log_watch_change(&last_watch, &watch);
                    last_watch = watch.clone();
                    discover::publish_watch(&shared, &base.discovery, &watch);
                    generation = swap(generation, new, &shared, &store, &runs).await;
                    notify(&[sd_notify::NotifyState::Status(&summary_line(&shared))]);
                }
                _ = term.recv() => break,
                _ = int.recv() => break,
            }
        }
        disc_ctl.stop();
        notify(&[sd_notify::NotifyState::Stopping, sd_notify::NotifyState::Status("stopping")]);
        tracing::info!("stopping");
        let deadline = Instant::now() + Duration::from_millis(4000);
        for h in http.iter().chain(&pinned) {
            let _ = h.shutdown.send(true);
        }
        runs.stop_all(deadline);
        // The runs have stopped their programs gracefully; whatever child is left (a
        // smartctl on a hung disk, a run that did not stop in time) goes now, with its
        // process group, and no new one starts.
        crate::process::terminate_all(Duration::from_millis(500));
        generation.stop(deadline);
        if let Err(e) = store.save() {
            tracing::error!(error = %e, "cannot save the state at exit");
        }
        for h in http.into_iter().chain(pinned) {
            let _ = tokio::time::timeout(Duration::from_millis(500), h.server).await;
        }
        tracing::info!("stopped");
        Ok(())
    })
}

/// How long a reload may take to read and check its files before it is given up (the
/// old config keeps running).
const RELOAD_TIMEOUT: Duration = Duration::from_secs(10);

/// What a reload read: the web config (when there is a web config file) and the config.
type ReloadRead = (
    Option<Result<crate::http::WebConfig, crate::http::WebConfigError>>,
    Result<Config, String>,
);

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
                (web, load_config(&opts).map_err(|e| e.to_string()))
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
    async fn finish(reload: &mut Option<Reload>) -> Result<ReloadRead, String> {
        let Some(r) = reload else {
            return std::future::pending().await;
        };
        match tokio::time::timeout_at(r.deadline, &mut r.rx).await {
            Ok(Ok(read)) => Ok(read),
            Ok(Err(_)) => Err("the reload could not read the config (its thread did not start or ended early); see the log".into()),
            Err(_) => Err(format!(
                "reading and checking the config files took more than {} s (a file that blocks, such as a FIFO or a hung network filesystem?); the old config keeps running",
                r.limit.as_secs_f64()
            )),
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
    ) -> (Option<Http>, Result<(), String>) {
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
                        Ok(back) => (Some(back), Err(e.to_string())),
                        Err(again) => {
                            tracing::error!(error = %again, "cannot take the old address back: no HTTP until it can be bound again (tried every tick, and at a reload)");
                            (None, Err(e.to_string()))
                        }
                    },
                }
            }
            Err(e) => (Some(self), Err(e.to_string())),
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
fn bind(addr: SocketAddr) -> Result<(std::net::TcpListener, SocketAddr), DaemonError> {
    let err = |source| DaemonError::Listen {
        addr,
        source,
        from_flag: false,
    };
    let listener = std::net::TcpListener::bind(addr).map_err(err)?;
    listener.set_nonblocking(true).map_err(err)?;
    let bound = listener.local_addr().map_err(err)?;
    Ok((listener, bound))
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
        let Some(path) = &r.result_path else { continue };
        let Ok(text) = std::fs::read_to_string(path) else {
            continue;
        };
        let Ok(doc) = serde_json::from_str::<crate::protocol::result::SuiteResult>(&text) else {
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

    /// A reload whose reading never ends is given up at its limit, and the runtime's
    /// thread (HTTP, signals) goes on meanwhile.
    #[test]
    fn a_reload_that_hangs_is_given_up_and_holds_nothing_else() {
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
                    (None, Err("never".into()))
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
            let e = Reload::finish(&mut reload).await.err().unwrap();
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
                || (None, Err("refused".into())),
                Duration::from_secs(5),
            ));
            let (web, config) = Reload::finish(&mut reload).await.unwrap();
            assert!(web.is_none());
            assert_eq!(config.err().as_deref(), Some("refused"));
        });
    }
}
