//! Health polling of one drive: a job of the daemon's health pool (a few threads for
//! every drive; a hung device stalls only its own drive's health, [`super::health_pool`]),
//! reading SMART/Health every `health_interval` at the drive's own slot
//! in the interval, at most a few drives at a time ([`crate::pacing`]), with the sleeping-disk
//! rule (smartctl runs with `--nocheck=standby`; a disk found asleep keeps its last
//! reading and is not woken), the verdict, and the endurance estimate from the samples
//! kept in the state file (one per hour at most, so the rate is drive writes per day
//! over days, not one lifetime average).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::health::endurance::{self, Sample};
use crate::health::model::{PowerState, Verdict};
use crate::health::{self, Assessment, HealthReport, ReadOptions};
use crate::status::{CollectorStatus, HealthState, HealthStatus, ProbeStatus};

use super::health_pool;
use super::identity::{NoDrive, Resolved};
use super::{now_unix, Ctx, DriveCtl};
use crate::condlog::{CondLog, Level};
use crate::pacing;

/// A health sample goes into the state at most this often.
const SAMPLE_EVERY: f64 = 3600.0;
use crate::status::HEALTH_COLLECTOR as COLLECTOR;

/// Starts the drive's health polling in the daemon's health pool ([`super::health_pool`]):
/// its first read at once, or at its slot when a read less than an interval ago (the
/// generation before a reload read it) is fresh. The handle is finished once the drive is
/// stopped and no read of it is going on.
pub fn start(ctx: Arc<Ctx>, drive: Arc<DriveCtl>) -> health_pool::Handle {
    let name = drive.cfg.name.clone();
    let interval = ctx.config.health_interval;
    // Made here, so that /metrics shows the limit from the start.
    let limiter = pacing::ReadLimiter::global();
    let offset = pacing::offset_of(&name, interval);
    let origin = pacing::origin();
    let fresh = ctx
        .shared
        .lock()
        .drives
        .get(&name)
        .and_then(|d| d.collectors.get(COLLECTOR))
        .is_some_and(|c| now_unix() - c.last_unix < interval.as_secs_f64());
    let now = origin.elapsed();
    let due = if fresh {
        origin + pacing::next_slot(now, offset, interval)
    } else {
        Instant::now()
    };
    let shared = ctx.shared.clone();
    let poller = Poller {
        opts: ReadOptions {
            // A drive behind a RAID controller is read with its `-d` type.
            smartctl_type: drive.cfg.smartctl_type.clone(),
            ..ReadOptions::default()
        },
        mark: ErrorMark::default(),
        log: CondLog::new(format!("drive {name}")),
        limiter,
        offset,
        interval,
        origin,
        ctx,
        drive,
    };
    health_pool::Pool::global().add(Box::new(poller), due, &shared)
}

/// One drive's health polling: what it carries from one read to the next.
struct Poller {
    ctx: Arc<Ctx>,
    drive: Arc<DriveCtl>,
    opts: ReadOptions,
    mark: ErrorMark,
    log: CondLog,
    limiter: &'static pacing::ReadLimiter,
    offset: Duration,
    interval: Duration,
    origin: Instant,
}

impl health_pool::Job for Poller {
    fn poll(&mut self) -> Instant {
        let polled = self.origin.elapsed();
        poll_once(
            &self.ctx,
            &self.drive,
            self.limiter,
            &self.opts,
            &mut self.mark,
            &mut self.log,
        );
        let now = self.origin.elapsed();
        let next = pacing::after_poll(polled, self.offset, self.interval).max(pacing::next_slot(
            now,
            self.offset,
            self.interval,
        ));
        self.origin + next
    }

    fn stopped(&self) -> bool {
        self.drive.stopped()
    }

    fn finish(&mut self) {
        // A stop ends no condition (a failing read goes on failing): nothing to log.
        self.log.close();
    }
}

/// Why a drive resolved to a file target on a disk-less filesystem has no health.
pub fn not_applicable_reason(target: &std::path::Path, fstype: &str) -> String {
    format!(
        "no drive under the file target {} ({fstype} has no block device): there is no SMART/health data to read",
        target.display()
    )
}

/// The canaries' error counts the last health reading took into account.
#[derive(Debug, Default)]
struct ErrorMark {
    downs: u64,
    /// Per probe, read and write: (all errors, the device's).
    per_probe: BTreeMap<String, [(u64, u64); 2]>,
}

/// What the canaries' errors since the last reading say of the drive.
#[derive(Debug, Default, PartialEq)]
struct CanaryErrors {
    /// The device failed I/O (or returned wrong data): one reason per probe. The drive
    /// is failing.
    device: Vec<String>,
    /// I/O failed for the host's reasons (a full or read-only filesystem, permissions):
    /// one reason per probe. Not the drive's fault, but its canary sees nothing: a warning.
    host: Vec<String>,
}

/// The canaries' I/O errors since the last reading, and moves the mark. Errors across a
/// time the drive went down (removed, replaced) are the drive leaving, not its media:
/// they are not held against the drive that is there.
fn new_canary_errors(
    probes: &BTreeMap<String, ProbeStatus>,
    downs: u64,
    mark: &mut ErrorMark,
) -> CanaryErrors {
    let left = downs != mark.downs;
    mark.downs = downs;
    let plural = |n: u64| if n == 1 { "" } else { "s" };
    let mut out = CanaryErrors::default();
    for (name, p) in probes {
        let dirs = [&p.read, &p.write];
        let now = dirs.map(|d| (d.errors_total, d.device_errors_total));
        let before = mark.per_probe.insert(name.clone(), now).unwrap_or_default();
        if left {
            continue;
        }
        // Per direction: (the device's, the host's) since the last reading.
        let new = [0, 1].map(|i| {
            let device = now[i].1.saturating_sub(before[i].1);
            let all = now[i].0.saturating_sub(before[i].0);
            (device, all.saturating_sub(device))
        });
        let device = new[0].0 + new[1].0;
        let host = new[0].1 + new[1].1;
        if device > 0 {
            out.device.push(format!(
                "canary {name}: {device} I/O error{} since the last health reading",
                plural(device)
            ));
        }
        if host > 0 {
            // A direction's latest host error, from one that had some since the last
            // reading (so not an old one of the other direction).
            let why = [1, 0]
                .into_iter()
                .filter(|&i| new[i].1 > 0)
                .find_map(|i| dirs[i].last_host_error.as_deref())
                .unwrap_or("an error of the host");
            out.host.push(format!(
                "canary {name}: {host} I/O error{} since the last health reading that the \
                 host caused, not the drive (the last: {why}): check the file target's \
                 filesystem and the daemon's log",
                plural(host)
            ));
        }
    }
    out
}

/// Why a discovered drive has no health to read: a virtio, Xen, loop or MMC disk carries
/// no SMART data or NVMe health log (the storage behind it, on its host, has them).
/// Polling it would only fail on every interval.
fn no_health_reader(ctx: &Ctx, name: &str) -> Option<String> {
    use crate::config::Transport;
    let t = ctx.config.discovered.get(name)?.transport;
    matches!(
        t,
        Transport::Virtio | Transport::Xen | Transport::Loop | Transport::Mmc
    )
    .then(|| {
        format!(
            "a {} disk reports no health (no SMART data or NVMe health log); read the \
             health of the storage behind it where it is",
            t.name()
        )
    })
}

fn poll_once(
    ctx: &Ctx,
    drive: &DriveCtl,
    limiter: &pacing::ReadLimiter,
    opts: &ReadOptions,
    mark: &mut ErrorMark,
    log: &mut CondLog,
) {
    let name = drive.cfg.name.as_str();
    if let Some(reason) = no_health_reader(ctx, name) {
        ctx.drive_status(name, |d| {
            d.collectors.remove(COLLECTOR);
            d.health_state = HealthState::NotApplicable { reason };
        });
        return;
    }
    let resolved = drive.resolved();
    let Some(dev) = resolved.as_ref().ok().and_then(|r| r.device.clone()) else {
        record_no_device(ctx, name, resolved.as_ref().ok(), log);
        return;
    };
    // At most a few reads at once in the process; a drive of a generation that stops
    // while it waits reads nothing.
    let Some(permit) = limiter.acquire(&|| drive.stopped()) else {
        return;
    };
    let t0 = Instant::now();
    let read = health::read(&dev, opts);
    let took = t0.elapsed();
    drop(permit);
    let now = now_unix();
    match read {
        Ok(report) => {
            log.ends(COLLECTOR);
            record_reading(ctx, drive, report, took, now, mark);
        }
        // A read cut short by the daemon's stop (its smartctl ended with the rest) is
        // not a failure of the drive: nothing is recorded.
        Err(_) if drive.stopped() || crate::process::stopping() => {}
        Err(e) => {
            let msg = e.to_string();
            log.holds(
                COLLECTOR,
                Level::Warn,
                format!("health read of {} failed: {msg}", dev.display()),
            );
            ctx.drive_status(name, |d| {
                d.health_state = d.health_state.failed(msg.clone(), now);
                d.collectors.insert(
                    COLLECTOR.into(),
                    CollectorStatus {
                        success: false,
                        duration_seconds: took.as_secs_f64(),
                        last_unix: now,
                        error: Some(msg),
                    },
                );
            });
        }
    }
}

/// Records why a drive with no device to read has no health, and logs it.
fn record_no_device(ctx: &Ctx, name: &str, resolved: Option<&Resolved>, log: &mut CondLog) {
    // Down (the state stays what the last attempt found), or a file target with no
    // drive found under it: not applicable on a disk-less filesystem (tmpfs), a
    // failure otherwise (ZFS, a lookup error: a drive whose health goes unread).
    let no_drive = resolved.and_then(|r| {
        r.no_drive.as_ref().map(|n| match n {
            NoDrive::NotApplicable { fstype } => Ok(not_applicable_reason(&r.target, fstype)),
            NoDrive::NotFound { reason } => Err(reason.clone()),
        })
    });
    match &no_drive {
        Some(Ok(_)) => {
            log.ends(COLLECTOR);
        }
        Some(Err(reason)) => {
            log.holds(COLLECTOR, Level::Warn, format!("health not read: {reason}"));
        }
        None => {}
    }
    let now = now_unix();
    ctx.drive_status(name, |d| {
        d.collectors.remove(COLLECTOR);
        match no_drive {
            Some(Ok(reason)) => d.health_state = HealthState::NotApplicable { reason },
            Some(Err(reason)) => d.health_state = d.health_state.failed(reason, now),
            None => {}
        }
    });
}

/// Records a successful reading: its verdict and endurance (a sleeping disk keeps its last).
fn record_reading(
    ctx: &Ctx,
    drive: &DriveCtl,
    report: HealthReport,
    took: Duration,
    now: f64,
    mark: &mut ErrorMark,
) {
    let name = drive.cfg.name.as_str();
    let asleep = report.power_state == PowerState::Standby;
    let history: Vec<Sample> = ctx
        .store
        .lock()
        .health
        .get(name)
        .cloned()
        .unwrap_or_default();
    let self_written = ctx.store.lock().self_written_lifetime(name);
    ctx.drive_status(name, |d| {
        d.collectors.insert(
            COLLECTOR.into(),
            CollectorStatus {
                success: true,
                duration_seconds: took.as_secs_f64(),
                last_unix: now,
                error: None,
            },
        );
        if asleep && d.health.is_some() {
            // Keep the last reading of an awake disk; say it sleeps.
            if let Some(h) = &mut d.health {
                h.report.power_state = PowerState::Standby;
                d.health_state = HealthState::Read {
                    read_unix: h.read_unix,
                };
            }
            return;
        }
        merge_identity(&mut d.identity, &report.identity);
        let mut a = assess_with_canaries(&report, &d.probes, drive.downs(), mark);
        let e = endurance::estimate(
            &report,
            &drive.cfg.rating,
            now,
            &history,
            Some(self_written),
        );
        endurance::assess(&e, &mut a);
        d.endurance = Some(e);
        d.health = Some(HealthStatus {
            verdict: a.verdict,
            reasons: a.reasons,
            report: report.clone(),
            read_unix: now,
        });
        d.health_state = HealthState::Read { read_unix: now };
        d.health_detail_metrics_off = !ctx.config.health_detail_metrics;
    });
    if !asleep {
        store_sample_if_due(ctx, name, &report, &history, now);
    }
}

/// The drive's own assessment of a reading, with what the canaries' errors since the last say.
fn assess_with_canaries(
    report: &HealthReport,
    probes: &BTreeMap<String, ProbeStatus>,
    downs: u64,
    mark: &mut ErrorMark,
) -> Assessment {
    let mut a = health::assess(report);
    // I/O that fails on the drive is the plainest sign it is failing, whatever
    // its own SMART data says (issue 7): the verdict says so until a reading
    // with no new canary error. Errors the host caused (a full filesystem
    // under a file target, say) only keep the canary from seeing the drive:
    // a warning, not the drive failing.
    let canary = new_canary_errors(probes, downs, mark);
    if !canary.device.is_empty() {
        a.verdict = Verdict::Failing;
        a.reasons.splice(0..0, canary.device);
    } else if !canary.host.is_empty() && a.verdict != Verdict::Failing {
        a.verdict = Verdict::Warning;
    }
    a.reasons.extend(canary.host);
    a
}

/// Keeps an endurance sample of an awake reading, if the last one is an hour old or more.
fn store_sample_if_due(ctx: &Ctx, name: &str, report: &HealthReport, history: &[Sample], now: f64) {
    if let Some(written) = report.host_written_bytes {
        let due = history
            .last()
            .is_none_or(|s| now - s.unix_seconds >= SAMPLE_EVERY);
        if due {
            ctx.store.update(|s| {
                s.push_sample(
                    name,
                    Sample {
                        unix_seconds: now,
                        host_written_bytes: written,
                        percentage_used_ratio: report.percentage_used_ratio,
                    },
                )
            });
        }
    }
}

/// Fills what the health reader knows into the drive's identity (sysfs gave a first guess).
fn merge_identity(into: &mut health::Identity, from: &health::Identity) {
    let keep = |a: &mut Option<String>, b: &Option<String>| {
        if b.is_some() {
            a.clone_from(b);
        }
    };
    keep(&mut into.model, &from.model);
    keep(&mut into.serial, &from.serial);
    keep(&mut into.firmware, &from.firmware);
    keep(&mut into.wwn, &from.wwn);
    if from.transport != health::Transport::Unknown {
        into.transport = from.transport;
    }
    into.capacity_bytes = from.capacity_bytes.or(into.capacity_bytes);
    into.logical_block_size = from.logical_block_size.or(into.logical_block_size);
    into.rotation_rpm = from.rotation_rpm.or(into.rotation_rpm);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A probe: its name, read's and write's (errors, the device's), and read's and
    /// write's last host error.
    type Fixture<'a> = (&'a str, (u64, u64), (u64, u64), [Option<&'a str>; 2]);

    fn probes(fixtures: &[Fixture]) -> BTreeMap<String, ProbeStatus> {
        fixtures
            .iter()
            .map(|&(n, r, w, host)| {
                let mut p = ProbeStatus::default();
                (p.read.errors_total, p.read.device_errors_total) = r;
                (p.write.errors_total, p.write.device_errors_total) = w;
                p.read.last_host_error = host[0].map(str::to_string);
                p.write.last_host_error = host[1].map(str::to_string);
                (n.to_string(), p)
            })
            .collect()
    }

    fn device(r: &[&str]) -> CanaryErrors {
        CanaryErrors {
            device: r.iter().map(|s| s.to_string()).collect(),
            host: Vec::new(),
        }
    }

    #[test]
    fn canary_errors_count_once_and_not_across_a_removal() {
        let mut mark = ErrorMark::default();
        let mut seen = |p: &[Fixture], downs| new_canary_errors(&probes(p), downs, &mut mark);
        assert_eq!(seen(&[("rd", (0, 0), (0, 0), [None; 2])], 0), device(&[]));
        assert_eq!(
            seen(
                &[
                    ("rd", (3, 3), (1, 1), [None; 2]),
                    ("wr", (0, 0), (0, 0), [None; 2])
                ],
                0
            ),
            device(&["canary rd: 4 I/O errors since the last health reading"])
        );
        // The same counts at the next reading: nothing new, the verdict recovers.
        assert_eq!(
            seen(
                &[
                    ("rd", (3, 3), (1, 1), [None; 2]),
                    ("wr", (0, 0), (0, 0), [None; 2])
                ],
                0
            ),
            device(&[])
        );
        assert_eq!(
            seen(
                &[
                    ("rd", (3, 3), (1, 1), [None; 2]),
                    ("wr", (0, 0), (1, 1), [None; 2])
                ],
                0
            ),
            device(&["canary wr: 1 I/O error since the last health reading"])
        );
        // Errors while the drive went away (removed and back): not the drive's.
        assert_eq!(
            seen(
                &[
                    ("rd", (90, 90), (1, 1), [None; 2]),
                    ("wr", (0, 0), (1, 1), [None; 2])
                ],
                1
            ),
            device(&[])
        );
        assert_eq!(
            seen(
                &[
                    ("rd", (91, 91), (1, 1), [None; 2]),
                    ("wr", (0, 0), (1, 1), [None; 2])
                ],
                1
            )
            .device
            .len(),
            1
        );
    }

    #[test]
    fn errors_the_host_caused_are_a_warning_not_the_drive_failing() {
        let mut mark = ErrorMark::default();
        let enospc = Some("no space left (ENOSPC)");
        // A full filesystem under the file target: 5 write errors, none the device's.
        let r = new_canary_errors(
            &probes(&[("wr", (0, 0), (5, 0), [None, enospc])]),
            0,
            &mut mark,
        );
        assert!(r.device.is_empty(), "{r:?}");
        assert_eq!(r.host.len(), 1);
        assert!(
            r.host[0].starts_with("canary wr: 5 I/O errors since the last health reading that the host caused, not the drive (the last: no space left (ENOSPC))"),
            "{}",
            r.host[0]
        );
        // Then the device fails too: 2 more, both the device's, counted apart.
        let r = new_canary_errors(
            &probes(&[("wr", (0, 0), (7, 2), [None, enospc])]),
            0,
            &mut mark,
        );
        assert_eq!(
            r,
            device(&["canary wr: 2 I/O errors since the last health reading"])
        );
        // Both at once.
        let r = new_canary_errors(
            &probes(&[("wr", (1, 1), (10, 2), [None, enospc])]),
            0,
            &mut mark,
        );
        assert_eq!(
            r.device,
            vec!["canary wr: 1 I/O error since the last health reading"]
        );
        assert_eq!(r.host.len(), 1);
        assert!(
            r.host[0].starts_with("canary wr: 3 I/O errors"),
            "{}",
            r.host[0]
        );
        // New host errors on the read side only: named by read's last, not by the old
        // ENOSPC of the write side.
        let eacces = Some("permission denied (EACCES)");
        let r = new_canary_errors(
            &probes(&[("wr", (3, 1), (10, 2), [eacces, enospc])]),
            0,
            &mut mark,
        );
        assert!(r.device.is_empty(), "{r:?}");
        assert!(
            r.host[0].contains("2 I/O errors")
                && r.host[0].contains("(the last: permission denied (EACCES))"),
            "{}",
            r.host[0]
        );
    }
}
