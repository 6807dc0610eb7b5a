//! The daemon's control loop as a state machine: what it does on a tick, a SIGHUP, a
//! reload's result, a discovery scan and the stop, apart from signals, sockets and the
//! runtime. [`super::run`] feeds it events; the unit tests below feed it the same with
//! stand-ins for the threads, what outlives them, systemd and the clock.

use std::sync::Arc;
use std::time::{Duration, Instant};

use sd_notify::NotifyState;

use crate::config::{Config, Discovery};
use crate::discovery::{Scan, Watch};
use crate::status::Shared;

use super::discover;
use super::{now_unix, summary_line};
use crate::condlog::{CondLog, Level};

/// A canary silent this long is said to be blocked in an I/O; the scheduler silent this
/// long, wedged (the watchdog is withheld).
pub const STALL: Duration = Duration::from_secs(15);
/// The whole stop: runs and threads are waited for until then.
pub const STOP_WAIT: Duration = Duration::from_millis(4000);
/// The scheduler's share of the stop (it starts runs and self-tests: first to go).
const STOP_SCHEDULER: Duration = Duration::from_millis(1500);
/// The self-tests' share (their aborts are children or admin commands, which must go out
/// before the children left are ended and no new one may start).
const STOP_SELFTESTS: Duration = Duration::from_millis(2500);
/// How long children left after the runs stopped get between SIGTERM and SIGKILL.
const CHILD_GRACE: Duration = Duration::from_millis(500);

/// The threads of one config (a [`super::Generation`]), as the control loop drives them.
pub trait Threads: Send + Sized + 'static {
    /// Starts the threads of drives that waited for their earlier threads to end.
    fn start_waiting(&mut self);
    /// The canaries silent for `max`: blocked in an I/O their drive does not answer.
    fn stalled_canaries(&self, max: Duration) -> Vec<String>;
    /// The threads whose silence for `max` means the daemon itself is wedged.
    fn wedged(&self, max: Duration) -> Vec<String>;
    /// The threads of `new` after these (blocking: threads are stopped and waited for
    /// until `deadline`).
    fn next(self, new: Config, deadline: Instant) -> Self;
    /// Stops the scheduler, waiting for it until `deadline`.
    fn stop_scheduler(&mut self, deadline: Instant);
    /// Stops every thread, waiting for them until `deadline`.
    fn stop(self, deadline: Instant);
}

/// What outlives generations: runs, self-tests, child processes, the saved state.
pub trait Estate {
    fn stop_selftests(&self, deadline: Instant);
    fn stop_runs(&self, deadline: Instant);
    /// Ends every child left (SIGTERM to its group, SIGKILL after `grace`); no new one
    /// starts after.
    fn end_children(&self, grace: Duration);
    fn save(&self);
}

/// Where systemd's notifications go.
pub trait Systemd {
    fn notify(&mut self, states: &[NotifyState<'_>]);
}

/// The real systemd: `sd_notify`, which does nothing outside systemd (no NOTIFY_SOCKET).
pub struct SdNotify;

impl Systemd for SdNotify {
    fn notify(&mut self, states: &[NotifyState<'_>]) {
        if let Err(e) = sd_notify::notify(states) {
            tracing::debug!(error = %e, "sd_notify failed");
        }
    }
}

/// The control loop's state between events.
pub struct Supervisor<T: Threads, E: Estate, S: Systemd> {
    /// The config as listed; what runs is it merged with discovery's last scan.
    base: Config,
    last_scan: Scan,
    last_watch: Watch,
    /// None only while a swap is under way (never seen between events).
    threads: Option<T>,
    estate: E,
    systemd: S,
    shared: Arc<Shared>,
    /// Hands discovery a new `[discovery]` (it rescans at once), or `None`: stop.
    discovery: Box<dyn FnMut(Option<Discovery>) + Send>,
    /// Whether systemd waits for watchdog pings.
    watchdog: bool,
    /// A SIGHUP's files are being read.
    reloading: bool,
    conditions: CondLog,
    clock: Box<dyn Fn() -> Instant + Send>,
}

/// The swap to a new generation ended without one: its thread panicked, and the old
/// threads went with it. Nothing sensible is left to run: the daemon stops (systemd
/// starts it anew).
#[derive(Debug, thiserror::Error)]
#[error("the swap to a new config failed ({0}); the daemon stops, to be started anew")]
pub struct SwapFailed(String);

/// What a reload came to (after the listener, if the new config moves it, was bound).
pub type Reloaded = Result<Config, super::ReloadError>;

/// The config as listed, and what discovery's last scan made of it.
pub struct Listed {
    pub base: Config,
    pub last_scan: Scan,
    pub last_watch: Watch,
}

impl<T: Threads, E: Estate, S: Systemd> Supervisor<T, E, S> {
    pub fn new(
        Listed {
            base,
            last_scan,
            last_watch,
        }: Listed,
        threads: T,
        estate: E,
        systemd: S,
        shared: Arc<Shared>,
        discovery: Box<dyn FnMut(Option<Discovery>) + Send>,
        watchdog: bool,
    ) -> Self {
        Supervisor {
            base,
            last_scan,
            last_watch,
            threads: Some(threads),
            estate,
            systemd,
            shared,
            discovery,
            watchdog,
            reloading: false,
            conditions: CondLog::new("daemon"),
            clock: Box::new(Instant::now),
        }
    }

    /// The same, on another clock (tests).
    #[cfg(test)]
    fn with_clock(mut self, clock: Box<dyn Fn() -> Instant + Send>) -> Self {
        self.clock = clock;
        self
    }

    pub fn threads(&self) -> &T {
        self.threads.as_ref().expect("threads between events")
    }

    fn threads_mut(&mut self) -> &mut T {
        self.threads.as_mut().expect("threads between events")
    }

    /// A tick: waiting drives start, a blocked canary is said (the watchdog still goes
    /// out: a restart cannot end an I/O stuck in the kernel), a wedged scheduler withholds
    /// the watchdog, said once while it lasts.
    pub fn tick(&mut self) {
        self.threads_mut().start_waiting();
        let stalled = self.threads().stalled_canaries(STALL);
        if stalled.is_empty() {
            self.conditions.ends("stalled-canaries");
        } else {
            self.conditions.holds(
                "stalled-canaries",
                Level::Error,
                format!("canaries have completed no I/O for {} s or more: their drives do not answer (the watchdog is still sent: a restart cannot end an I/O stuck in the kernel): {stalled:?}", STALL.as_secs()),
            );
        }
        let stale = self.threads().wedged(STALL);
        if stale.is_empty() {
            self.conditions.ends("watchdog");
            if self.watchdog {
                self.systemd.notify(&[NotifyState::Watchdog]);
            }
            let line = summary_line(&self.shared);
            self.systemd.notify(&[NotifyState::Status(&line)]);
        } else {
            self.conditions.holds(
                "watchdog",
                Level::Error,
                format!("threads stopped beating; withholding the watchdog: {stale:?}"),
            );
        }
    }

    /// A SIGHUP: true when a reload is to start (systemd is told); false while the last
    /// one is still reading its files (this one is left out).
    pub fn hup(&mut self) -> bool {
        if self.reloading {
            tracing::warn!(
                "SIGHUP: the last reload is still reading its files; this one is left out"
            );
            return false;
        }
        self.reloading = true;
        let mut reloading = vec![NotifyState::Reloading];
        if let Ok(m) = NotifyState::monotonic_usec_now() {
            reloading.push(m);
        }
        self.systemd.notify(&reloading);
        tracing::info!("SIGHUP: reloading the config");
        true
    }

    /// The listen address of the config in force.
    pub fn listen(&self) -> std::net::SocketAddr {
        self.base.server.listen
    }

    /// A reload's result: a new config swaps in (merged with discovery's last scan under
    /// its filters; discovery rescans at once with its `[discovery]`); a refused one
    /// leaves the old running. Either way it is exported and systemd told.
    pub async fn reloaded(&mut self, loaded: Reloaded) -> Result<(), SwapFailed> {
        self.reloading = false;
        match loaded {
            Ok(new) => {
                self.base = new;
                // The last scan under the new filters: a drive the reload excludes gets
                // no canary before the rescan.
                self.last_scan = crate::discovery::refilter(&self.last_scan, &self.base.discovery);
                let (merged, watch) = crate::discovery::merge(&self.base, &self.last_scan);
                discover::publish_watch(
                    &self.shared,
                    &self.base.discovery,
                    &watch,
                    &self.last_scan,
                );
                discover::log_watch_change(&self.last_watch, &watch);
                self.last_watch = watch;
                (self.discovery)(Some(self.base.discovery.clone()));
                self.swap(merged).await?;
                let mut s = self.shared.lock();
                s.config.last_reload_successful = true;
                s.config.last_reload_success_unix = now_unix();
                s.config.last_error = None;
                drop(s);
                tracing::info!("config reloaded");
            }
            Err(e) => {
                tracing::error!(error = %e, "the new config is refused; the old one keeps running");
                let mut s = self.shared.lock();
                s.config.last_reload_successful = false;
                s.config.last_error = Some(e.to_string());
            }
        }
        let line = summary_line(&self.shared);
        self.systemd
            .notify(&[NotifyState::Ready, NotifyState::Status(&line)]);
        Ok(())
    }

    /// Discovery's scans, oldest first (those that came while the last swap waited for
    /// its threads): only the newest counts; one swap per scan would fall ever further
    /// behind in a hot-plug storm.
    pub async fn scanned(&mut self, scans: Vec<Scan>) -> Result<(), SwapFailed> {
        let Some(scan) = scans.into_iter().last() else {
            return Ok(());
        };
        self.last_scan = scan;
        let (new, watch) = crate::discovery::merge(&self.base, &self.last_scan);
        tracing::info!("discovery: the drives changed; starting on the new set");
        discover::log_watch_change(&self.last_watch, &watch);
        self.last_watch = watch;
        discover::publish_watch(
            &self.shared,
            &self.base.discovery,
            &self.last_watch,
            &self.last_scan,
        );
        self.swap(new).await?;
        let line = summary_line(&self.shared);
        self.systemd.notify(&[NotifyState::Status(&line)]);
        Ok(())
    }

    /// The generation of `new`, off the runtime's thread (threads are waited for).
    async fn swap(&mut self, new: Config) -> Result<(), SwapFailed> {
        let deadline = (self.clock)() + super::SWAP_WAIT;
        let old = self.threads.take().expect("threads between events");
        let next = tokio::task::spawn_blocking(move || old.next(new, deadline))
            .await
            .map_err(|e| SwapFailed(e.to_string()))?;
        self.threads = Some(next);
        Ok(())
    }

    /// The stop, in the order that lets nothing new start while things are stopped:
    /// discovery, then the scheduler (it starts runs and self-tests), the self-tests
    /// (their aborts are children), the runs, the children left, the drives' threads;
    /// then the state is saved.
    pub fn stop(mut self) {
        (self.discovery)(None);
        self.systemd
            .notify(&[NotifyState::Stopping, NotifyState::Status("stopping")]);
        tracing::info!("stopping");
        let start = (self.clock)();
        let deadline = start + STOP_WAIT;
        self.threads_mut().stop_scheduler(start + STOP_SCHEDULER);
        self.estate.stop_selftests((self.clock)() + STOP_SELFTESTS);
        self.estate.stop_runs(deadline);
        self.estate.end_children(CHILD_GRACE);
        if let Some(t) = self.threads.take() {
            t.stop(deadline);
        }
        self.estate.save();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::Status;
    use std::sync::Mutex;

    /// What the stand-ins saw, in order.
    type Journal = Arc<Mutex<Vec<String>>>;

    fn say(j: &Journal, s: impl Into<String>) {
        j.lock().unwrap().push(s.into());
    }

    /// Stand-in threads: silent canaries and a wedged scheduler as the test sets them;
    /// each generation numbered; every call journalled.
    struct Fake {
        journal: Journal,
        number: u32,
        config: Config,
        stalled: Arc<Mutex<Vec<String>>>,
        wedged: Arc<Mutex<Vec<String>>>,
    }

    impl Threads for Fake {
        fn start_waiting(&mut self) {
            say(&self.journal, format!("start_waiting {}", self.number));
        }
        fn stalled_canaries(&self, max: Duration) -> Vec<String> {
            assert_eq!(max, STALL);
            self.stalled.lock().unwrap().clone()
        }
        fn wedged(&self, max: Duration) -> Vec<String> {
            assert_eq!(max, STALL);
            self.wedged.lock().unwrap().clone()
        }
        fn next(self, new: Config, deadline: Instant) -> Self {
            say(
                &self.journal,
                format!(
                    "next {} -> {} drives={:?} wait={:?}",
                    self.number,
                    self.number + 1,
                    new.drives
                        .iter()
                        .map(|d| d.name.clone())
                        .collect::<Vec<_>>(),
                    deadline.duration_since(epoch())
                ),
            );
            Fake {
                number: self.number + 1,
                config: new,
                ..self
            }
        }
        fn stop_scheduler(&mut self, deadline: Instant) {
            say(
                &self.journal,
                format!("stop_scheduler {:?}", deadline.duration_since(epoch())),
            );
        }
        fn stop(self, deadline: Instant) {
            say(
                &self.journal,
                format!(
                    "stop {} {:?}",
                    self.number,
                    deadline.duration_since(epoch())
                ),
            );
        }
    }

    struct FakeEstate(Journal);

    impl Estate for FakeEstate {
        fn stop_selftests(&self, deadline: Instant) {
            say(
                &self.0,
                format!("stop_selftests {:?}", deadline.duration_since(epoch())),
            );
        }
        fn stop_runs(&self, deadline: Instant) {
            say(
                &self.0,
                format!("stop_runs {:?}", deadline.duration_since(epoch())),
            );
        }
        fn end_children(&self, grace: Duration) {
            say(&self.0, format!("end_children {grace:?}"));
        }
        fn save(&self) {
            say(&self.0, "save");
        }
    }

    struct FakeSystemd(Journal);

    impl Systemd for FakeSystemd {
        fn notify(&mut self, states: &[NotifyState<'_>]) {
            let s: Vec<String> = states
                .iter()
                // The monotonic time of a reload is the host's: its presence is checked.
                .map(|s| match s {
                    NotifyState::MonotonicUsec(_) => "MONOTONIC_USEC".to_string(),
                    s => s.to_string(),
                })
                .collect();
            say(&self.0, format!("notify {}", s.join(" ")));
        }
    }

    /// The injected clock's zero.
    fn epoch() -> Instant {
        static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
        *EPOCH.get_or_init(Instant::now)
    }

    struct Rig {
        sup: Supervisor<Fake, FakeEstate, FakeSystemd>,
        journal: Journal,
        stalled: Arc<Mutex<Vec<String>>>,
        wedged: Arc<Mutex<Vec<String>>>,
        /// The injected clock, in milliseconds after [`epoch`].
        now_ms: Arc<std::sync::atomic::AtomicU64>,
    }

    fn config(drives: &[&str]) -> Config {
        let mut c = Config::embedded_default(std::path::Path::new("/nonexistent-state"));
        c.discovery.enabled = false;
        c.probes.clear();
        c.drives = drives
            .iter()
            .map(|n| crate::config::Drive {
                name: n.to_string(),
                identity: None,
                path: None,
                destructive: false,
                file_target: None,
                rating: Default::default(),
                rated: Default::default(),
                smartctl_type: None,
            })
            .collect();
        c
    }

    fn rig(watchdog: bool) -> Rig {
        let journal: Journal = Arc::default();
        let stalled: Arc<Mutex<Vec<String>>> = Arc::default();
        let wedged: Arc<Mutex<Vec<String>>> = Arc::default();
        let now_ms = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let base = config(&["a"]);
        let fake = Fake {
            journal: journal.clone(),
            number: 1,
            config: base.clone(),
            stalled: stalled.clone(),
            wedged: wedged.clone(),
        };
        let j = journal.clone();
        let clock_ms = now_ms.clone();
        let sup = Supervisor::new(
            Listed {
                base,
                last_scan: Scan::default(),
                last_watch: Watch::default(),
            },
            fake,
            FakeEstate(journal.clone()),
            FakeSystemd(journal.clone()),
            Arc::new(Shared::new(Status::default())),
            Box::new(move |d: Option<Discovery>| match d {
                Some(d) => say(&j, format!("discovery set enabled={}", d.enabled)),
                None => say(&j, "discovery stop"),
            }),
            watchdog,
        )
        .with_clock(Box::new(move || {
            epoch() + Duration::from_millis(clock_ms.load(std::sync::atomic::Ordering::SeqCst))
        }));
        Rig {
            sup,
            journal,
            stalled,
            wedged,
            now_ms,
        }
    }

    impl Rig {
        fn take(&self) -> Vec<String> {
            std::mem::take(&mut *self.journal.lock().unwrap())
        }
    }

    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(f)
    }

    #[test]
    fn a_tick_pings_the_watchdog_unless_the_scheduler_is_wedged() {
        let mut r = rig(true);
        r.sup.tick();
        assert_eq!(
            r.take(),
            [
                "start_waiting 1",
                "notify WATCHDOG=1",
                "notify STATUS=0 drives, 0 up, 0 runs going"
            ]
        );
        // A wedged scheduler: no ping, no status, for as long as it lasts.
        *r.wedged.lock().unwrap() = vec!["scheduler".into()];
        r.sup.tick();
        r.sup.tick();
        assert_eq!(r.take(), ["start_waiting 1", "start_waiting 1"]);
        r.wedged.lock().unwrap().clear();
        r.sup.tick();
        assert!(r.take().contains(&"notify WATCHDOG=1".to_string()));
    }

    #[test]
    fn a_blocked_canary_does_not_withhold_the_watchdog() {
        let mut r = rig(true);
        *r.stalled.lock().unwrap() = vec!["canary c on a".into()];
        r.sup.tick();
        assert!(r.take().contains(&"notify WATCHDOG=1".to_string()));
        // Without a watchdog (not under systemd's WatchdogSec), no ping, the status still.
        let mut r = rig(false);
        r.sup.tick();
        assert_eq!(
            r.take(),
            [
                "start_waiting 1",
                "notify STATUS=0 drives, 0 up, 0 runs going"
            ]
        );
    }

    #[test]
    fn a_sighup_while_one_reads_its_files_is_left_out() {
        let mut r = rig(true);
        assert!(r.sup.hup());
        assert_eq!(r.take(), ["notify RELOADING=1 MONOTONIC_USEC"]);
        assert!(!r.sup.hup(), "a second SIGHUP while the first reads");
        assert_eq!(r.take(), Vec::<String>::new());
        block_on(r.sup.reloaded(Err(super::super::ReloadError::Lost))).unwrap();
        r.take();
        assert!(r.sup.hup(), "a SIGHUP after the last reload ended");
    }

    #[test]
    fn a_good_reload_swaps_and_a_refused_one_keeps_the_old() {
        let mut r = rig(true);
        r.now_ms.store(1000, std::sync::atomic::Ordering::SeqCst);
        assert!(r.sup.hup());
        r.take();
        block_on(r.sup.reloaded(Ok(config(&["a", "b"])))).unwrap();
        assert_eq!(
            r.take(),
            [
                "discovery set enabled=false".to_string(),
                format!(
                    "next 1 -> 2 drives=[\"a\", \"b\"] wait={:?}",
                    Duration::from_millis(1000) + super::super::SWAP_WAIT
                ),
                "notify READY=1 STATUS=0 drives, 0 up, 0 runs going".to_string(),
            ]
        );
        assert_eq!(r.sup.threads().number, 2);
        assert!(r.sup.shared.lock().config.last_reload_successful);
        // Refused: no swap, the old threads keep running, the error exported.
        assert!(r.sup.hup());
        r.take();
        block_on(
            r.sup
                .reloaded(Err(super::super::ReloadError::TimedOut { secs: 10.0 })),
        )
        .unwrap();
        assert_eq!(
            r.take(),
            ["notify READY=1 STATUS=0 drives, 0 up, 0 runs going"]
        );
        assert_eq!(r.sup.threads().number, 2);
        assert_eq!(r.sup.threads().config.drives.len(), 2);
        let s = r.sup.shared.lock();
        assert!(!s.config.last_reload_successful);
        assert!(s
            .config
            .last_error
            .as_deref()
            .unwrap_or("")
            .contains("10 s"));
    }

    #[test]
    fn scans_that_queued_during_a_swap_make_one_swap_to_the_newest() {
        let mut r = rig(true);
        let scan = |n: &str| Scan {
            skipped: vec![crate::discovery::Skipped {
                name: n.into(),
                reason: "a partition".into(),
            }],
            ..Scan::default()
        };
        block_on(
            r.sup
                .scanned(vec![scan("first"), scan("second"), scan("third")]),
        )
        .unwrap();
        let j = r.take();
        assert_eq!(
            j.iter().filter(|l| l.starts_with("next ")).count(),
            1,
            "{j:?}"
        );
        assert_eq!(r.sup.threads().number, 2);
        assert_eq!(r.sup.last_scan.skipped[0].name, "third");
        block_on(r.sup.scanned(Vec::new())).unwrap();
        assert_eq!(r.take(), Vec::<String>::new(), "no scan, no swap");
    }

    #[test]
    fn the_stop_ends_what_starts_things_first_and_saves_last() {
        let r = rig(true);
        r.now_ms.store(5000, std::sync::atomic::Ordering::SeqCst);
        let journal = r.journal.clone();
        r.sup.stop();
        let j = std::mem::take(&mut *journal.lock().unwrap());
        let ms = |m: u64| Duration::from_millis(m);
        assert_eq!(
            j,
            [
                "discovery stop".to_string(),
                "notify STOPPING=1 STATUS=stopping".to_string(),
                format!("stop_scheduler {:?}", ms(6500)),
                format!("stop_selftests {:?}", ms(7500)),
                format!("stop_runs {:?}", ms(9000)),
                format!("end_children {:?}", ms(500)),
                format!("stop 1 {:?}", ms(9000)),
                "save".to_string(),
            ]
        );
    }
}
