//! One canary probe on one drive: a dedicated thread that runs the probe's rate-limited
//! job in segments, for as long as the daemon runs.
//!
//! Before each segment it checks that the drive is up (its identity resolved), that no
//! scheduled run holds the drive, and, for a probe that writes, that the drive's wear
//! budget for today is not spent. The segment's `on_interval` (once a second) feeds the
//! sliding window, publishes the probe's status, accounts the bytes written, beats the
//! heartbeat, and stops the segment as soon as one of those conditions stops holding, so
//! a pause takes effect within an interval.

use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::config::Probe;
use crate::engine::{self, IntervalDetail, IntervalSummary, RunControl, Stop};
use crate::safety::{self, WriteRequest};
use crate::status::CollectorStatus;
use crate::target::Target;

use super::window::OpWindow;
use super::{now_unix, Ctx, DriveCtl};

/// The longest one engine run of a canary lasts. Conditions are checked every interval,
/// so this only bounds how long one set of engine threads and buffers lives.
pub const SEGMENT: Duration = Duration::from_secs(6 * 3600);
/// How often a running canary checks that its file target is still the file it opened.
const RECHECK_FILE: Duration = Duration::from_secs(5);

pub fn collector_name(probe: &str) -> String {
    format!("canary:{probe}")
}

/// The canary thread's body. Returns when the daemon (or this drive's workers) stop.
pub fn run(ctx: Arc<Ctx>, drive: Arc<DriveCtl>, probe: Probe, beat: Arc<super::Beat>) {
    let window = probe.window.as_secs_f64();
    let mut win_r = OpWindow::new(window);
    let mut win_w = OpWindow::new(window);
    let clock = Instant::now();
    let mut backoff = Duration::from_secs(1);
    let name = drive.cfg.name.clone();
    let collector = collector_name(&probe.name);
    publish(&ctx, &name, &probe, &win_r, &win_w, false);
    while !drive.stopped() {
        beat.beat();
        let now = clock.elapsed().as_secs_f64();
        win_r.expire(now);
        win_w.expire(now);
        if let Some(reason) = hold_reason(&ctx, &drive, &probe) {
            publish(&ctx, &name, &probe, &win_r, &win_w, false);
            tracing::trace!(drive = %name, probe = %probe.name, %reason, "canary holds");
            drive.sleep(Duration::from_secs(1));
            continue;
        }
        let setup = Instant::now();
        let target = match open_target(&drive, &probe) {
            Ok(t) => t,
            Err(e) => {
                set_collector(
                    &ctx,
                    &name,
                    &collector,
                    false,
                    setup.elapsed(),
                    Some(e.clone()),
                );
                publish(&ctx, &name, &probe, &win_r, &win_w, false);
                tracing::warn!(drive = %name, probe = %probe.name, error = %e, "canary cannot start");
                drive.sleep(backoff);
                backoff = (backoff * 2).min(Duration::from_secs(30));
                continue;
            }
        };
        let job = match segment_job(&probe) {
            Ok(j) => j,
            Err(e) => {
                // Config validation made this job; only the stop condition changed.
                tracing::error!(drive = %name, probe = %probe.name, error = %e, "canary job");
                drive.sleep(Duration::from_secs(30));
                continue;
            }
        };
        set_collector(&ctx, &name, &collector, true, setup.elapsed(), None);
        let control = RunControl::new().discarding_intervals();
        let opened = identity_of(target.path());
        let mut last_check = Instant::now();
        // Count this canary active, then look again: a run that took the drive meanwhile
        // (it registers first, then waits for the count to reach zero) is seen here.
        drive.active.fetch_add(1, Ordering::SeqCst);
        if hold_reason(&ctx, &drive, &probe).is_some() {
            drive.active.fetch_sub(1, Ordering::SeqCst);
            continue;
        }
        let mut on_interval = |_: &IntervalSummary, d: &IntervalDetail| {
            beat.beat();
            let t = clock.elapsed().as_secs_f64();
            win_r.add(t, d.read);
            win_w.add(t, d.write);
            if d.write.bytes > 0 {
                let bytes = d.write.bytes as u128;
                ctx.store
                    .update(|s| s.add_self_written(&name, now_unix() as i64, bytes));
            }
            publish(&ctx, &name, &probe, &win_r, &win_w, true);
            if hold_reason(&ctx, &drive, &probe).is_some() {
                control.stop();
            }
            // Checked every few seconds, and at once after an interval with errors (a
            // truncated file fails every read past its new end).
            let errors = d.read.errors + d.write.errors > 0;
            if drive.cfg.file_target.is_some() && (errors || last_check.elapsed() >= RECHECK_FILE) {
                last_check = Instant::now();
                if identity_of(target.path()) != opened {
                    tracing::warn!(drive = %name, probe = %probe.name, "the file target was deleted, replaced or truncated; reopening it");
                    control.stop();
                } else if probe.writes && read_only_now(target.path()) {
                    // The kernel lets an open descriptor go on writing; the operator's
                    // read-only mount is honoured by reopening (which then fails and holds).
                    tracing::warn!(drive = %name, probe = %probe.name, "the file target's filesystem is read-only now; the writing probe stops until it is writable");
                    control.stop();
                }
            }
        };
        let result = engine::run_observed(&job, &target, &control, &mut on_interval);
        drive.active.fetch_sub(1, Ordering::SeqCst);
        drop(target);
        match result {
            Ok(r) => {
                backoff = Duration::from_secs(1);
                if r.verify.mismatches > 0 {
                    // Silent corruption: counted as read errors, and said loudly.
                    for _ in 0..r.verify.mismatches {
                        win_r.add_mismatch();
                    }
                    tracing::error!(drive = %name, probe = %probe.name,
                        mismatches = r.verify.mismatches,
                        first = ?r.verify.first.first(),
                        "canary read back data that differs from what it wrote");
                }
                if let Some(why) = &r.stopped_early {
                    if !control.is_stopped() {
                        tracing::warn!(drive = %name, probe = %probe.name, reason = %why, "canary segment ended early");
                        drive.sleep(backoff);
                    }
                }
            }
            Err(e) => {
                let msg = e.to_string();
                set_collector(
                    &ctx,
                    &name,
                    &collector,
                    false,
                    Duration::ZERO,
                    Some(msg.clone()),
                );
                tracing::warn!(drive = %name, probe = %probe.name, error = %msg, "canary run failed");
                drive.sleep(backoff);
                backoff = (backoff * 2).min(Duration::from_secs(30));
            }
        }
        publish(&ctx, &name, &probe, &win_r, &win_w, false);
    }
    publish(&ctx, &name, &probe, &win_r, &win_w, false);
}

/// Why the canary may not run now, if it may not.
fn hold_reason(ctx: &Ctx, drive: &DriveCtl, probe: &Probe) -> Option<String> {
    if drive.stopped() {
        return Some("stopping".into());
    }
    if let Err(e) = drive.resolved() {
        return Some(e);
    }
    if let Some(p) = drive.paused() {
        return Some(p);
    }
    if probe.writes && ctx.over_budget(drive) {
        return Some("the canaries' wear budget for today is spent".into());
    }
    None
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
fn open_target(drive: &DriveCtl, probe: &Probe) -> Result<Target, String> {
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
    }
    .map_err(|e| e.to_string())?;
    if drive.cfg.file_target.is_none() && drive.cfg.identity.is_some() {
        // The identity was checked up to a few seconds ago; the device at the path may
        // have been replaced since (another disk hot-plugged where this one was). Check
        // again now that the descriptor is open: a swap after this leaves the descriptor
        // on the old, gone device, never on the new one.
        drive.refresh_identity();
        let now = drive.resolved()?;
        if now.target != path {
            return Err(format!(
                "{} is no longer this drive (it is at {} now)",
                path.display(),
                now.target.display()
            ));
        }
    }
    Ok(target)
}

fn permit_for(drive: &DriveCtl, path: &Path) -> Result<safety::WritePermit, String> {
    if drive.cfg.file_target.is_some() {
        return safety::authorize_file_writes(path, false).map_err(|e| e.to_string());
    }
    let info = crate::device::inspect(path).map_err(|e| e.to_string())?;
    safety::authorize_block_writes(&info, &write_request(drive)).map_err(|e| e.to_string())
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
    ctx.shared.drive(drive, |d| {
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

fn publish(ctx: &Ctx, drive: &str, probe: &Probe, r: &OpWindow, w: &OpWindow, running: bool) {
    let read = r.status();
    let write = w.status();
    ctx.shared.drive(drive, |d| {
        let p = d.probes.entry(probe.name.clone()).or_default();
        p.writes = probe.writes;
        p.window_seconds = probe.window.as_secs_f64();
        p.running = running;
        p.read = read;
        p.write = write;
    });
}
