//! The daemon's discovery: a thread that scans the host's disks every `rescan_interval`,
//! and within [`HOTPLUG_POLL`] of a hot-plug (a cheap listing of `/sys/class/block`
//! names and sizes, compared with the last one), and sends the main loop a new scan
//! when the set of drives changed; the main loop merges it with the listed config and
//! starts a new generation, as a SIGHUP reload does.
//!
//! A drive that disappears stays in the scans it sends (so it shows `driveprobe_drive_up
//! 0` with the reason) until `drop_after` has passed; then it is dropped, logged once.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::config::Discovery;
use crate::device::SystemPaths;
use crate::discovery::{self, Found, Scan, Watch};
use crate::status::{DiscoveryStatus, Shared};

use super::now_unix;
use crate::condlog::{CondLog, Level};

/// How often the block devices are listed between scans, for hot-plug.
pub const HOTPLUG_POLL: Duration = Duration::from_secs(2);
/// How often drives behind RAID controllers are looked for again (`smartctl
/// --scan-open` opens every device); a reload looks again at once.
pub const RAID_EVERY: Duration = Duration::from_secs(3600);

/// What discovery knows between scans: the drives present and those gone (since when).
#[derive(Debug)]
pub struct Discoverer {
    paths: SystemPaths,
    present: Vec<Found>,
    /// Since when (and since when in Unix seconds, for the surfaces), by key.
    gone: BTreeMap<String, (Found, Instant, f64)>,
    log: CondLog,
    scans: u64,
    /// The last answer of `smartctl --scan-open` (None: no RAID controller), and when;
    /// read again under each scan's filters.
    raid: Option<(Instant, Result<Option<String>, discovery::RaidScanError>)>,
}

/// The key a drive is known by across scans (the same when it comes back at another
/// kernel name): its WWN, else its serial with its size and model, else its kernel name.
/// Not its label: the namespaces of one NVMe controller share the controller's serial,
/// and USB bridges report one serial on many disks; keyed by it, a removed one was taken
/// for the other, still present, and dropped at once instead of after `drop_after`.
fn key(f: &Found) -> String {
    match (&f.identity.wwn, &f.identity.serial) {
        (Some(w), _) => format!("wwn {w}"),
        (None, Some(s)) => format!(
            "serial {s} {} {:?}",
            f.size_bytes,
            f.identity.model.as_deref().unwrap_or("")
        ),
        (None, None) => format!("name {}", f.kernel_name),
    }
}

impl Discoverer {
    pub fn new(paths: SystemPaths) -> Discoverer {
        Discoverer {
            paths,
            present: Vec::new(),
            gone: BTreeMap::new(),
            log: CondLog::new("discovery"),
            scans: 0,
            raid: None,
        }
    }

    /// Scans now: what the daemon should watch (the drives present, then the drives gone
    /// less than `drop_after` ago).
    pub fn scan(&mut self, d: &Discovery) -> Scan {
        self.scans += 1;
        let mut s = if d.enabled {
            let mut s = discovery::scan(&self.paths, d);
            // smartctl --scan-open opens every device: at most once per RAID_EVERY.
            let stale = self
                .raid
                .as_ref()
                .is_none_or(|(at, _)| at.elapsed() >= RAID_EVERY);
            if d.raid && stale {
                self.raid = Some((Instant::now(), discovery::raid_scan_open(&self.paths)));
            }
            let raid = self
                .raid
                .as_ref()
                .filter(|_| d.raid)
                .map(|(_, r)| discovery::raid_of(r, d));
            // The drives watched now (or gone, not yet dropped) keep their places under
            // max_drives: a new disk does not take one's place because of its name.
            let watched: std::collections::BTreeSet<String> = self
                .present
                .iter()
                .map(key)
                .chain(self.gone.keys().cloned())
                .collect();
            discovery::complete_keeping(&mut s, raid.as_ref(), d, |f| watched.contains(&key(f)));
            s
        } else {
            Scan::default()
        };
        let now = Instant::now();
        let keys: Vec<String> = s.found.iter().map(key).collect();
        for f in std::mem::take(&mut self.present) {
            let k = key(&f);
            // Still there but now left out by the config (a reload's filters,
            // include_loop, max_drives): not gone (down, alerting, for drop_after) but no
            // longer watched. A device skipped for what it is now (size 0: a detached
            // loop device, a pulled medium) is gone.
            let left_out = s
                .skipped
                .iter()
                .any(|x| x.name == f.kernel_name && discovery::left_out_by_config(&x.reason));
            if !keys.contains(&k) && d.enabled && !left_out {
                self.log.holds(
                    &format!("gone:{k}"),
                    Level::Warn,
                    format!(
                        "drive {} ({}) is gone; it stays, down, for {} s before it is dropped",
                        f.label(),
                        f.kernel_name,
                        d.drop_after.as_secs()
                    ),
                );
                self.gone.insert(k, (f, now, now_unix()));
            }
        }
        for k in &keys {
            if self.gone.remove(k).is_some() {
                self.log.ends(&format!("gone:{k}"));
            }
        }
        let dropped: Vec<String> = self
            .gone
            .iter()
            .filter(|(_, (_, since, _))| now.duration_since(*since) >= d.drop_after || !d.enabled)
            .map(|(k, _)| k.clone())
            .collect();
        for k in dropped {
            let label = self
                .gone
                .remove(&k)
                .map(|(f, _, _)| f.label())
                .unwrap_or_default();
            // The condition's end is the one line that says it is dropped.
            self.log.ends(&format!("gone:{k}"));
            tracing::info!(drive = %label, "discovery: a removed drive is dropped, with its series");
        }
        self.present = s.found.clone();
        s.gone = self
            .gone
            .iter()
            .map(|(_, (f, _, since_unix))| {
                // A time, not a countdown: the reason is carried as it is until the next
                // swap, and a countdown in it stood still at the swap's value.
                (
                    f.clone(),
                    format!(
                        "discovered drive {} ({}) is gone; its series are dropped at {}",
                        f.label(),
                        f.kernel_name,
                        crate::fmt::utc(since_unix + d.drop_after.as_secs_f64())
                    ),
                )
            })
            .collect();
        s
    }

    /// When the next gone drive is to be dropped.
    pub fn next_drop(&self, d: &Discovery) -> Option<Instant> {
        self.gone
            .values()
            .map(|(_, since, _)| *since + d.drop_after)
            .min()
    }

    pub fn scans(&self) -> u64 {
        self.scans
    }
}

/// What the discovery thread shares with the main loop.
#[derive(Debug)]
pub struct Control {
    /// The `[discovery]` in force (a reload changes it).
    pub discovery: Mutex<Discovery>,
    stop: AtomicBool,
    /// Rescan now (a reload).
    poke: (Mutex<bool>, Condvar),
}

impl Control {
    pub fn new(d: Discovery) -> Arc<Control> {
        Arc::new(Control {
            discovery: Mutex::new(d),
            stop: AtomicBool::new(false),
            poke: (Mutex::new(false), Condvar::new()),
        })
    }

    fn current(&self) -> Discovery {
        self.discovery
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// A new `[discovery]` (a reload): rescan now with it.
    pub fn set(&self, d: Discovery) {
        *self.discovery.lock().unwrap_or_else(|e| e.into_inner()) = d;
        self.wake();
    }

    pub fn stop(&self) {
        self.stop.store(true, Ordering::Release);
        self.wake();
    }

    fn wake(&self) {
        *self.poke.0.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.poke.1.notify_all();
    }

    /// Waits up to `d`; true when poked (or stopped).
    fn wait(&self, d: Duration) -> bool {
        let deadline = Instant::now() + d;
        let mut g = self.poke.0.lock().unwrap_or_else(|e| e.into_inner());
        while !*g {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            g = match self.poke.1.wait_timeout(g, left) {
                Ok((g, _)) => g,
                Err(e) => e.into_inner().0,
            };
        }
        *g = false;
        true
    }
}

/// The drives of a scan, as compared between scans: a change starts a new generation.
fn shape(s: &Scan) -> Vec<(String, String, &'static str, bool)> {
    let mut v: Vec<_> = s
        .found
        .iter()
        .map(|f| (key(f), f.kernel_name.clone(), f.class.name(), true))
        .chain(
            s.gone
                .iter()
                .map(|(f, _)| (key(f), f.kernel_name.clone(), f.class.name(), false)),
        )
        .collect();
    v.sort();
    v
}

/// Publishes the figures of a merge of `scan` (what is watched and skipped).
pub fn publish_watch(shared: &Shared, d: &Discovery, watch: &Watch, scan: &Scan) {
    let mut s = shared.lock();
    if !d.enabled {
        s.discovery = None;
        return;
    }
    let st = s.discovery.get_or_insert_with(DiscoveryStatus::default);
    st.watched = watch.watched.len();
    // The merge starts from the scan's skips and adds its own.
    st.merge_skipped = watch.skipped.len().saturating_sub(scan.skipped.len());
    st.skipped = watch.skipped.len();
}

/// Publishes the figures of a scan.
pub fn publish_scan(shared: &Shared, d: &Discovery, scan: &Scan, scans: u64) {
    let mut s = shared.lock();
    if !d.enabled {
        s.discovery = None;
        return;
    }
    let st = s.discovery.get_or_insert_with(DiscoveryStatus::default);
    st.skipped = scan.skipped.len() + st.merge_skipped;
    st.scans_total = scans;
    st.last_scan_unix = now_unix();
}

/// Logs what is watched and skipped at start.
pub fn log_watch(watch: &Watch) {
    log_watch_change(&Watch::default(), watch);
}

/// Logs what changed from `before` to `now`: drives newly watched, no longer watched,
/// and devices newly skipped (with 256 drives, a hot-plug is a few lines, not 256).
pub fn log_watch_change(before: &Watch, now: &Watch) {
    for w in &before.watched {
        if !now.watched.iter().any(|x| x.name == w.name) {
            tracing::info!(drive = %w.name, "no longer watching");
        }
    }
    let watch = now;
    for w in watch.watched.iter().filter(|w| !before.watched.contains(w)) {
        let canary = match w.canary_rate_iops {
            Some(r) => format!("canary {r} IOPS"),
            None if w.health_only => "health only".into(),
            None => "its own probes".into(),
        };
        tracing::info!(
            drive = %w.name,
            device = %w.kernel_name.as_deref().unwrap_or("-"),
            class = %w.class.map_or("-", |c| c.name()),
            transport = %w.transport.map_or("-", |t| t.name()),
            source = %w.source,
            "watching: {canary}"
        );
    }
    for s in watch.skipped.iter().filter(|s| !before.skipped.contains(s)) {
        tracing::info!(device = %s.name, "skipping: {}", s.reason);
    }
}

/// The discovery thread: scans every `rescan_interval`, when the block devices change
/// (checked every [`HOTPLUG_POLL`]), and when poked; sends each scan whose drives differ
/// from the last one sent. `scanned` is told of every scan (for the figures).
pub fn run(
    mut disc: Discoverer,
    ctl: Arc<Control>,
    first: Scan,
    send: impl Fn(Scan) -> bool,
    scanned: impl Fn(&Discovery, &Scan, u64),
) {
    let mut sent = shape(&first);
    let mut print = discovery::fingerprint(&disc.paths);
    let mut last_scan = Instant::now();
    while !ctl.stop.load(Ordering::Acquire) {
        let poked = ctl.wait(HOTPLUG_POLL);
        if ctl.stop.load(Ordering::Acquire) {
            break;
        }
        let d = ctl.current();
        if !d.enabled && !poked && disc.gone.is_empty() {
            // Off (a config without [discovery]): nothing to watch for until a reload.
            continue;
        }
        let now_print = discovery::fingerprint(&disc.paths);
        let plugged = now_print != print;
        let drop_due = disc.next_drop(&d).is_some_and(|t| Instant::now() >= t);
        if !(poked || plugged || drop_due || last_scan.elapsed() >= d.rescan_interval) {
            continue;
        }
        if plugged {
            tracing::debug!("discovery: block devices changed; scanning");
        }
        print = now_print;
        last_scan = Instant::now();
        let s = disc.scan(&d);
        scanned(&d, &s, disc.scans());
        let now = shape(&s);
        if now != sent {
            sent = now;
            if !send(s) {
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::discovery::Skipped;
    use crate::status::Status;

    /// Issue 18: `driveprobe_discovery_drives{state="skipped"}` was the scan's count after
    /// each scan and the merge's after each merge: it flipped between the two.
    #[test]
    fn skipped_is_the_same_count_after_a_scan_and_after_its_merge() {
        let shared = Shared::new(Status::default());
        let d = Discovery::default();
        let skip = |n: &str| Skipped {
            name: n.into(),
            reason: "a partition".into(),
        };
        let scan = Scan {
            skipped: vec![skip("sda1"), skip("sdb1")],
            ..Scan::default()
        };
        // The merge adds one of its own (a disk already matched to a listed drive).
        let watch = Watch {
            skipped: vec![skip("sda1"), skip("sdb1"), skip("sdc")],
            ..Watch::default()
        };
        let skipped = || shared.lock().discovery.as_ref().unwrap().skipped;
        publish_watch(&shared, &d, &watch, &scan);
        assert_eq!(skipped(), 3);
        publish_scan(&shared, &d, &scan, 2);
        assert_eq!(skipped(), 3);
        // A later scan with one more partition: its own skips and the merge's.
        let more = Scan {
            skipped: vec![skip("sda1"), skip("sdb1"), skip("sdb2")],
            ..Scan::default()
        };
        publish_scan(&shared, &d, &more, 3);
        assert_eq!(skipped(), 4);
    }
}
