//! What a suite run may write, known before it starts, and why a run ended early.
//!
//! The daemon admits a scheduled run only when [`write_bound`] fits what is left of the
//! drive's wear budget for scheduled runs, so a run that starts is a run that may finish
//! (see `docs/decisions/0002-wear-budget-for-scheduled-runs.md`). A run that was stopped
//! says why with one [`StopReason`], rendered by [`StopReason::describe`] in the result
//! document, the run index, the status page and the run gauges alike.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::suite::{Scale, Step, Suite};

/// The transfer rate (reads and writes together) assumed when the drive's rated
/// sequential bandwidth is not in the config: 16 GiB/s, above what a PCIe 5.0 x4 drive
/// (about 14 GB/s) moves, and above tmpfs on a small host (measured: 11.3 GiB/s of
/// 128 KiB reads on 2 CPUs, `tests/engine/wear_bound.rs`). A faster target should state
/// `rated_seq_read_bw`/`rated_seq_write_bw`.
pub const ASSUMED_BYTES_PER_SECOND: f64 = (16u64 << 30) as f64;

/// Rated figures are typical, not ceilings: the bound takes them with this margin.
pub const RATED_MARGIN: f64 = 1.25;

/// A run is stopped within this long of its `max_duration` (the scheduler's 1 s tick and
/// the engine's interval), so the writes of that much more time are in the bound.
pub const STOP_SLACK: Duration = Duration::from_secs(5);

/// The hard safety limit of a scheduled run: its admitted bound times this, plus
/// [`SAFETY_SLACK_BYTES`]. A run that reaches it had a wrong bound (a drive much faster
/// than assumed), and is stopped there as a safety stop: the engine takes each write's
/// bytes from the limit before it issues the write (`RunControl::set_write_limit`), so
/// the run's own writes never pass it; the writes of programs it runs (applications, fio
/// jobs) are counted after the fact, so those may pass it by what they write in about a
/// second ([`crate::app::METER_INTERVAL`]) and while they exit.
pub const SAFETY_FACTOR: f64 = 1.5;
pub const SAFETY_SLACK_BYTES: u64 = 64 << 20;

/// The most bytes per second a drive transfers (reads and writes together): the larger of
/// its rated sequential read and write bandwidths times [`RATED_MARGIN`], or
/// [`ASSUMED_BYTES_PER_SECOND`] when neither is rated.
pub fn transfer_ceiling(rated: Option<&super::result::Rated>) -> f64 {
    let rated = rated.and_then(|r| {
        let m = r
            .seq_read_bytes_per_second
            .unwrap_or(0.0)
            .max(r.seq_write_bytes_per_second.unwrap_or(0.0));
        (m > 0.0 && m.is_finite()).then_some(m * RATED_MARGIN)
    });
    rated.unwrap_or(ASSUMED_BYTES_PER_SECOND)
}

/// An upper bound of the bytes one run of a suite writes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WriteBound {
    pub bytes: u64,
    /// The transfer rate it assumed (bytes per second).
    pub bytes_per_second: f64,
}

impl WriteBound {
    /// The hard safety limit: past this, the run is stopped ([`StopReason::SafetyLimit`]).
    pub fn safety_limit(&self) -> u64 {
        ((self.bytes as f64 * SAFETY_FACTOR) as u64).saturating_add(SAFETY_SLACK_BYTES)
    }
}

/// An upper bound of what one run of `suite` at `scale` writes to a target of
/// `target_bytes`, when the target moves at most `bytes_per_second` (reads and writes
/// together; [`transfer_ceiling`]), and the run is stopped at `max_duration` if given.
///
/// Assumptions, step by step (each is a ceiling, never an estimate):
/// - purge: the whole region, as if it fell back to a full overwrite (a file's punched
///   hole and NVMe Format write nothing; the bound does not count on it);
/// - preconditioning: `precondition_passes` x the region; fill: the whole target;
/// - a timed phase writes at most its longest time (steady state: `max_rounds` rounds
///   and the watch rounds after it;
///   sweeps and curves: each point's ramp and round; write saturation: 4x the region
///   plus one round, or its round limit) x the rate x its share of writes
///   (`100 - read_pct`): the ramp's writes are counted, though the engine does not count
///   them as measured;
/// - an application workload or a fio job file has no bound of its own: only the run's
///   `max_duration` bounds it (without one the bound is `u64::MAX`);
/// - the whole run moves at most `(max_duration + STOP_SLACK) x rate`, so the bound is
///   also at most that.
pub fn write_bound(
    suite: &Suite,
    scale: &Scale,
    target_bytes: u64,
    bytes_per_second: f64,
    max_duration: Option<Duration>,
) -> WriteBound {
    let rate = bytes_per_second.max(0.0);
    let whole = target_bytes as f64;
    let mut region = whole;
    let timed = |secs: f64, read_pct: u32| secs * rate * (100 - read_pct.min(100)) as f64 / 100.0;
    let round = scale.round.as_secs_f64();
    let point = round + scale.ramp.as_secs_f64();
    let mut sum = 0.0f64;
    for step in &suite.steps {
        sum += match step {
            Step::Purge => region,
            Step::Precondition => region * scale.precondition_passes as f64,
            Step::Fill => whole,
            Step::Region(f) => {
                region = whole * f;
                0.0
            }
            // Up to `max_rounds`, and the watch rounds after a steady state reached late.
            Step::SteadyState(w) => timed(
                round * (scale.rule.max_rounds + super::steady::WATCH_ROUNDS) as f64,
                w.read_pct,
            ),
            Step::Sweep(w, ws, ds) => timed(point * (ws.len() * ds.len()) as f64, w.read_pct),
            // The max-rate round, then 12 fractions of it.
            Step::RateCurve(w) => timed(point * 13.0, w.read_pct),
            Step::WriteSaturation(w) => {
                let by_time = timed(round * scale.wsat_max_rounds as f64, w.read_pct);
                by_time.min(4.0 * region + timed(round, w.read_pct))
            }
            Step::Point(w) => timed(point, w.read_pct),
            // The max-rate point, then each probe: its I/Os (a little over the I/Os per
            // probe, or one round at the rate when that is more) and its ramp. A row
            // the scale refuses runs nothing.
            Step::Qos(row) => {
                let read_pct = if row.rw == "randread" { 100 } else { 0 };
                let bs = crate::engine::SizeMix::parse(&row.bs)
                    .map_or(f64::INFINITY, |m| f64::from(m.max()));
                let ios = super::qos::ios_per_probe(row, scale.name).unwrap_or(0) as f64;
                let probes = 1.0 + f64::from(super::qos::bisect_steps(scale.name));
                let probe_writes = if read_pct == 100 {
                    0.0
                } else {
                    ios * 1.05 * bs
                };
                timed(point, read_pct) + probes * (probe_writes + timed(point, read_pct))
            }
            Step::App(_) | Step::FioJob(..) => f64::INFINITY,
            // Every PTS stimulus writes only, but DIRTH's mix.
            Step::Pts(p) => timed(p.write_seconds(scale), p.read_pct()),
        };
    }
    let by_time = max_duration.map_or(f64::INFINITY, |d| (d + STOP_SLACK).as_secs_f64() * rate);
    let b = sum.min(by_time).ceil();
    WriteBound {
        bytes: if b.is_finite() && b < u64::MAX as f64 {
            b as u64
        } else {
            u64::MAX
        },
        bytes_per_second: rate,
    }
}

/// A byte count in binary units with one decimal (`155.9 GiB`), for messages.
pub fn human_bytes(b: f64) -> String {
    const UNITS: [(f64, &str); 5] = [
        (1125899906842624.0, "PiB"),
        (1099511627776.0, "TiB"),
        (1073741824.0, "GiB"),
        (1048576.0, "MiB"),
        (1024.0, "KiB"),
    ];
    if !b.is_finite() {
        return "unlimited".into();
    }
    for (m, u) in UNITS {
        if b >= m {
            return format!("{:.1} {u}", b / m);
        }
    }
    format!("{b:.0} B")
}

/// Why a run ended before its last step. One type, rendered by [`StopReason::describe`]
/// everywhere the run is shown; [`StopReason::label`] is its short name (the `reason`
/// label of the run gauges).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum StopReason {
    /// SIGINT or SIGTERM to the process (Ctrl-C, the daemon's stop).
    Signal,
    /// The schedule's `max_duration` passed.
    MaxDuration { limit_seconds: u64 },
    /// The run reached its hard safety limit ([`WriteBound::safety_limit`]): its next
    /// write did not fit under it, or its programs were counted writing past it.
    SafetyLimit {
        written_bytes: u64,
        bound_bytes: u64,
        limit_bytes: u64,
    },
    /// A step failed (I/O errors, an engine or application error).
    Error { message: String },
}

impl StopReason {
    pub fn label(&self) -> &'static str {
        match self {
            StopReason::Signal => "signal",
            StopReason::MaxDuration { .. } => "max_duration",
            StopReason::SafetyLimit { .. } => "safety_limit",
            StopReason::Error { .. } => "error",
        }
    }

    /// The one sentence every surface shows.
    pub fn describe(&self) -> String {
        match self {
            StopReason::Signal => "stopped by signal (SIGINT/SIGTERM)".into(),
            StopReason::MaxDuration { limit_seconds } => {
                format!("timed out: stopped at its max_duration of {limit_seconds} s")
            }
            StopReason::SafetyLimit {
                written_bytes,
                bound_bytes,
                limit_bytes,
            } => format!(
                "safety stop: wrote {} bytes and reached the hard limit of {} bytes ({}x its admitted bound of {} bytes, plus {} MiB)",
                written_bytes,
                limit_bytes,
                SAFETY_FACTOR,
                bound_bytes,
                SAFETY_SLACK_BYTES >> 20
            ),
            StopReason::Error { message } => format!("failed: {message}"),
        }
    }
}

/// Where whoever stops a run puts why, before it stops it (the first reason wins).
/// Shared by clones. A run stopped with no reason recorded was stopped by the signal
/// handler, which sets only the control's flag (it cannot take a lock).
#[derive(Debug, Clone, Default)]
pub struct StopCell(std::sync::Arc<std::sync::Mutex<Option<StopReason>>>);

impl StopCell {
    /// Records `why` unless a reason is already there; true when it was recorded.
    pub fn set(&self, why: StopReason) -> bool {
        let mut g = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if g.is_some() {
            return false;
        }
        *g = Some(why);
        true
    }

    pub fn get(&self) -> Option<StopReason> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::suite::{find, Scale};

    const MIB: u64 = 1 << 20;

    #[test]
    fn the_bound_adds_the_steps_and_the_time_limit_caps_it() {
        let quick = Scale::named("quick").unwrap();
        let rate = 1e9;
        // wsat: purge (the region) + min(4x the region + one round, 20 rounds) at 100% writes.
        let wsat = find("wsat").unwrap();
        let b = write_bound(&wsat, &quick, 64 * MIB, rate, None);
        let want = 64.0 * MIB as f64 + (4.0 * 64.0 * MIB as f64 + 0.5 * rate);
        assert_eq!(b.bytes, want.ceil() as u64);
        // A tiny region: 20 rounds of 0.5 s at 1 GB/s are less than 4x 1 TiB.
        let big = write_bound(&wsat, &quick, 1 << 40, rate, None);
        assert_eq!(big.bytes, ((1u64 << 40) as f64 + 20.0 * 0.5 * rate) as u64);
        // max_duration caps everything: 10 s + the stop slack at 1 GB/s.
        let capped = write_bound(&wsat, &quick, 1 << 40, rate, Some(Duration::from_secs(10)));
        assert_eq!(capped.bytes, (15.0 * rate) as u64);
        // enterprise: purge + 1 pass + 7 steady phases of 10 rounds and the watch rounds
        // after them, at their write shares (0, 100, 30, 0, 100, 0, 100 %) + 16 sweep
        // points of 0.6 s at 30 %.
        let ent = find("enterprise").unwrap();
        let b = write_bound(&ent, &quick, 256 * MIB, rate, None);
        let steady_seconds = 0.5 * (10 + crate::steady::WATCH_ROUNDS) as f64;
        let phases = steady_seconds * rate * (1.0 + 0.3 + 1.0 + 1.0) + 16.0 * 0.6 * rate * 0.3;
        let want = 2.0 * 256.0 * MIB as f64 + phases;
        assert!((b.bytes as f64 - want).abs() < 2.0, "{} vs {want}", b.bytes);
        // Standard scale writes more than quick; the application suites need a time limit.
        let std_ = Scale::named("standard").unwrap();
        assert!(write_bound(&ent, &std_, 256 * MIB, rate, None).bytes > b.bytes);
        let oltp = find("oltp").unwrap();
        assert_eq!(write_bound(&oltp, &quick, MIB, rate, None).bytes, u64::MAX);
        assert_eq!(
            write_bound(&oltp, &quick, MIB, rate, Some(Duration::from_secs(60))).bytes,
            (65.0 * rate) as u64
        );
        // A read-only phase writes nothing: a read-only point suite has no timed writes.
        assert!(b.safety_limit() > b.bytes + SAFETY_SLACK_BYTES);
    }

    #[test]
    fn the_transfer_ceiling_is_the_rating_with_a_margin_or_the_assumed_rate() {
        use crate::result::Rated;
        assert_eq!(transfer_ceiling(None), ASSUMED_BYTES_PER_SECOND);
        assert_eq!(
            transfer_ceiling(Some(&Rated::default())),
            ASSUMED_BYTES_PER_SECOND
        );
        let r = Rated {
            seq_read_bytes_per_second: Some(7e9),
            seq_write_bytes_per_second: Some(4e9),
            ..Default::default()
        };
        assert_eq!(transfer_ceiling(Some(&r)), 7e9 * RATED_MARGIN);
    }

    #[test]
    fn stop_reasons_say_what_stopped_the_run() {
        assert_eq!(
            StopReason::Signal.describe(),
            "stopped by signal (SIGINT/SIGTERM)"
        );
        let t = StopReason::MaxDuration { limit_seconds: 3 };
        assert!(t.describe().starts_with("timed out"));
        assert_eq!(t.label(), "max_duration");
        let s = StopReason::SafetyLimit {
            written_bytes: 10,
            bound_bytes: 1,
            limit_bytes: 5,
        };
        assert!(s.describe().starts_with("safety stop"), "{}", s.describe());
        let cell = StopCell::default();
        assert!(cell.clone().set(t.clone()));
        assert!(!cell.set(StopReason::Signal), "the first reason wins");
        assert_eq!(cell.get(), Some(t));
    }
}
