//! The result document of a suite run (a contract: `driveprobe report` and later tools
//! read it). One JSON document per run, with a `schema_version`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::hist::LatencyHist;
use crate::engine::stats::DirStats;
use crate::engine::{IntervalDetail, IntervalSummary};
use crate::health::model::Identity;

pub const SCHEMA_VERSION: u32 = 1;

/// The JSON Schema of the result document (docs/result.schema.json is this, kept in step
/// by a test).
pub fn json_schema() -> serde_json::Value {
    serde_json::to_value(schemars::schema_for!(SuiteResult)).expect("a schema serializes")
}

/// One direction of one round (or one sweep or curve point).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DirFigures {
    pub ops: u64,
    pub iops: f64,
    pub bw_bytes: f64,
    pub lat_mean_ns: f64,
    pub lat_stddev_ns: f64,
    pub lat_max_ns: u64,
    pub lat_p50_ns: u64,
    pub lat_p99_ns: u64,
    pub lat_p99_9_ns: u64,
}

/// One measured round: the four series the reviews plot (throughput, average latency,
/// maximum latency, latency standard deviation), per direction and combined as the
/// reviews combine them (IOPS added; mean and stddev averaged over the directions that
/// ran, weighted by ops; max the larger).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Round {
    pub index: u32,
    /// Seconds from the start of the phase to the end of this round.
    pub end_seconds: f64,
    pub read: DirFigures,
    pub write: DirFigures,
    pub iops: f64,
    pub lat_mean_ns: f64,
    pub lat_max_ns: u64,
    pub lat_stddev_ns: f64,
    /// Closed loop: seconds the round's I/O slots held no I/O, summed over the slots
    /// (from a completion to the next submission in the same slot: the host's part).
    /// IOPS x mean latency + this / the round's seconds = workers x depth.
    #[serde(default)]
    pub slot_idle_seconds: f64,
    /// Closed loop: seconds the round's slots held I/Os that its latency figures do not
    /// count (straddling the run's start or end, or failed), summed over the slots. Over
    /// a whole run: IOPS x mean latency + (this + `slot_idle_seconds`) / seconds =
    /// workers x depth. A round cut from a longer run attributes each I/O's latency and
    /// each gap to the round in which it ended.
    #[serde(default)]
    pub slot_uncounted_seconds: f64,
    /// Seconds of I/O in flight in the round, summed over the slots (an I/O spanning the
    /// round's edge is split at it): divided by the round's length, the queue depth the
    /// drive really saw. Closed loop: this + `slot_idle_seconds` = workers x depth x the
    /// round's length.
    #[serde(default)]
    pub in_flight_seconds: f64,
    /// Open loop (rate curves): I/Os that came due in the round but are in none of its
    /// figures, because the host issued them too late to complete in it, or never. The
    /// round's ops + this = the I/Os its rate asked for.
    #[serde(default)]
    pub due_missed_ops: u64,
    /// The round's full read latency histogram (absent in documents written before
    /// histograms were kept, and for directions that did no I/O): any percentile can be
    /// read from it, and rounds of several runs merged (docs/decisions/0010).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_lat_hist: Option<LatencyHist>,
    /// The round's full write latency histogram, as `read_lat_hist`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write_lat_hist: Option<LatencyHist>,
}

/// The workload of a phase, in fio's terms.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct WorkloadDesc {
    /// Short name: `4k-randread`, `8k-70-30`, `sql-90-10`...
    pub name: String,
    /// fio's rw name: randread, randwrite, randrw, read, write, rw.
    pub rw: String,
    /// Size or size mix (`4k`, `512:4,4k:67,...`).
    pub bs: String,
    pub rwmixread: u32,
    pub workers: u32,
    pub depth: u32,
    /// Access distribution (`uniform`, `zoned:...`).
    pub distribution: String,
}

/// The steady-state rule used, and whether and when it was met.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SteadyState {
    pub window_rounds: u32,
    /// Allowed range (max - min) as a share of the window mean.
    pub max_range_ratio: f64,
    /// Allowed excursion of the least-squares line across the window, as a share of the mean.
    pub max_slope_excursion_ratio: f64,
    pub max_rounds: u32,
    pub attained: bool,
    /// 0-based index of the round that completed the first steady window.
    pub steady_round: Option<u32>,
    /// Figures of the measurement window (the last `window_rounds` rounds).
    pub window_mean_iops: f64,
    pub window_range_ratio: f64,
    pub window_slope_excursion_ratio: f64,
    /// Rounds measured after the steady one to watch steady state hold (the last ones of
    /// the phase's `rounds`; 0 in documents written before, and when never steady).
    #[serde(default)]
    pub watch_rounds: u32,
    /// Set when the drive left steady state in the watch rounds: two rounds in a row each
    /// more than `max_range_ratio` from the window's mean (a garbage-collection cliff).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub left: Option<super::steady::Left>,
}

impl SteadyState {
    /// The document's record of a steady-state search under `rule`: `check` is the
    /// measurement window's figures, `steady_round` the round that completed the first
    /// steady window, and `watch` the rounds measured after it (whether the drive left
    /// steady state is judged on them against the window's mean).
    pub fn from_check(
        rule: &super::steady::Rule,
        check: &super::steady::Check,
        steady_round: Option<u32>,
        watch: &[f64],
    ) -> Self {
        SteadyState {
            window_rounds: rule.window as u32,
            max_range_ratio: rule.max_range,
            max_slope_excursion_ratio: rule.max_excursion,
            max_rounds: rule.max_rounds as u32,
            attained: steady_round.is_some(),
            steady_round,
            window_mean_iops: check.mean,
            window_range_ratio: check.range_ratio,
            window_slope_excursion_ratio: check.excursion_ratio,
            watch_rounds: watch.len() as u32,
            left: steady_round.and_then(|_| super::steady::left_steady(check.mean, watch, rule)),
        }
    }
}

/// One point of a thread/queue sweep.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SweepPoint {
    pub workers: u32,
    pub depth: u32,
    pub round: Round,
}

/// One point of a rate curve.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CurvePoint {
    /// Share of the maximum rate asked for (0.1 ... 1.2).
    pub fraction: f64,
    pub target_iops: f64,
    pub round: Round,
}

/// What a phase did.
// A document type, built once per phase and serialized: the size gap between variants
// costs nothing worth boxing for.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Phase {
    /// Purge: what was done (`nvme-sanitize`, `nvme-format`, `ata-security-erase`,
    /// `scsi-sanitize`, `blksecdiscard`, `blkdiscard`, `overwrite`, `punch-hole`).
    Purge { method: String, seconds: f64 },
    /// Workload-independent preconditioning: sequential 128 KiB writes over the region.
    Precondition {
        passes: u32,
        bytes: u64,
        seconds: f64,
    },
    /// Fill the whole target once (sequential 128 KiB writes).
    Fill { bytes: u64, seconds: f64 },
    /// Precondition to steady state with the measured workload; every round recorded
    /// from burst to steady.
    SteadyState {
        workload: WorkloadDesc,
        steady: SteadyState,
        rounds: Vec<Round>,
        /// The first full round after the workers started (fresh drive): the first
        /// round when it lasts 10 s or more, else the second, whose figures the threads'
        /// start-up does not hold (see [`burst_round`]).
        burst: Round,
        /// Averages over the steady window (or the last window when never steady).
        steady_figures: Round,
    },
    /// The thread/queue matrix, one measured round per point.
    Sweep {
        workload: WorkloadDesc,
        points: Vec<SweepPoint>,
    },
    /// Latency against load: the maximum rate, then fractions of it.
    RateCurve {
        workload: WorkloadDesc,
        max_iops: f64,
        points: Vec<CurvePoint>,
    },
    /// Write saturation: IOPS against time and against bytes written.
    WriteSaturation {
        workload: WorkloadDesc,
        rounds: Vec<Round>,
        /// Cumulative bytes written at the end of each round.
        bytes_written: Vec<u64>,
    },
    /// One measured round of a fixed workload (latency and IOPS matrix points, and
    /// each job of a user's fio job file).
    Point {
        workload: WorkloadDesc,
        round: Round,
    },
    /// QoS qualification of one table row (`--suite qos`): the rates tried with the
    /// open-loop engine, each limit's verdict at each, the highest rate at which all held.
    Qos {
        workload: WorkloadDesc,
        qos: super::qos::QosOutcome,
    },
    /// An application workload run with its data on the drive: `app` is `oltp`
    /// (sysbench OLTP on a private MariaDB: one point per thread count) or `kv`
    /// (RocksDB db_bench: one point per db_bench phase).
    App {
        app: String,
        points: Vec<crate::app::AppPoint>,
    },
    /// A SNIA PTS test with figures of its own (`test`: `throughput`, `xsr`, `hir`;
    /// see `protocol::pts` and docs/pts.md).
    Pts(super::pts::PtsTest),
}

/// Rated figures from the datasheet, when the user gave them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Rated {
    pub read_iops_4k: Option<f64>,
    pub write_iops_4k: Option<f64>,
    pub seq_read_bytes_per_second: Option<f64>,
    pub seq_write_bytes_per_second: Option<f64>,
}

/// The whole result of one suite run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SuiteResult {
    pub schema_version: u32,
    pub driveprobe_version: String,
    pub suite: String,
    /// quick, standard or full (or custom).
    pub scale: String,
    pub target: String,
    pub target_bytes: u64,
    /// Identity of the drive, when known.
    pub drive: Option<Identity>,
    pub engine: String,
    pub started_unix_seconds: f64,
    pub ended_unix_seconds: f64,
    /// False when the run was stopped (Ctrl-C) or failed part-way.
    pub complete: bool,
    pub incomplete_reason: Option<String>,
    pub rated: Option<Rated>,
    pub phases: Vec<Phase>,
}

impl SuiteResult {
    /// Keeps every latency histogram of the document (every phase kind's rounds) to
    /// `digits` significant digits (`--hist-digits`; see [`LatencyHist::coarsen`]);
    /// returns how many it coarsened.
    pub fn coarsen_hists(&mut self, digits: u8) -> Result<usize, super::hist::HistError> {
        let form = |e: serde_json::Error| super::hist::HistError::Form(e.to_string());
        let mut v = serde_json::to_value(&*self).map_err(form)?;
        let n = super::hist::coarsen_document(&mut v, digits)?;
        *self = serde_json::from_value(v).map_err(form)?;
        Ok(n)
    }
}

fn dir(d: &crate::engine::IntervalDir) -> DirFigures {
    DirFigures {
        ops: d.ops,
        iops: d.iops,
        bw_bytes: d.bw_bytes,
        lat_mean_ns: d.lat_ns.mean,
        lat_stddev_ns: d.lat_ns.stddev,
        lat_max_ns: d.lat_ns.max,
        lat_p50_ns: d.lat_ns.p50,
        lat_p99_ns: d.lat_ns.p99,
        lat_p99_9_ns: d.lat_ns.p99_9,
    }
}

impl DirFigures {
    /// One direction of a whole run's totals.
    pub fn from_summary(d: &crate::engine::DirSummary) -> DirFigures {
        let p = |k: &str| {
            d.lat_ns
                .percentiles
                .get(&crate::engine::stats::percentile_key(k))
                .copied()
                .unwrap_or(0)
        };
        DirFigures {
            ops: d.ops,
            iops: d.iops,
            bw_bytes: d.bw_bytes,
            lat_mean_ns: d.lat_ns.mean,
            lat_stddev_ns: d.lat_ns.stddev,
            lat_max_ns: d.lat_ns.max,
            lat_p50_ns: p("p50"),
            lat_p99_ns: p("p99"),
            lat_p99_9_ns: p("p99_9"),
        }
    }
}

/// A first round at least this long holds the threads' start-up (milliseconds) as a share
/// too small to see, so it is the burst; a shorter one (quick scale's 0.5 s rounds) is not.
pub const BURST_FIRST_ROUND_MIN_SECONDS: f64 = 10.0;

/// The burst of a steady-state phase's rounds: the first full round after the workers
/// started, what the drive does fresh after the purge. The first round also holds the
/// threads' start-up: with rounds of [`BURST_FIRST_ROUND_MIN_SECONDS`] or more that is
/// lost in the round and the first round is the burst (a full-scale round is a minute,
/// and its fresh-drive figure is what the burst is for); with shorter rounds it is a
/// visible share, so the burst is the second round (or the first, when it is the only
/// one).
pub fn burst_round(rounds: &[Round]) -> Option<&Round> {
    let first = rounds.first()?;
    if first.end_seconds >= BURST_FIRST_ROUND_MIN_SECONDS {
        return Some(first);
    }
    rounds.get(1).or(Some(first))
}

impl Round {
    /// A round from its two directions, combined as the reviews combine them.
    pub fn from_dirs(index: u32, end_seconds: f64, read: DirFigures, write: DirFigures) -> Round {
        let ops = read.ops + write.ops;
        let weighted = |r: f64, w: f64| {
            if ops == 0 {
                0.0
            } else {
                (r * read.ops as f64 + w * write.ops as f64) / ops as f64
            }
        };
        Round {
            index,
            end_seconds,
            iops: read.iops + write.iops,
            lat_mean_ns: weighted(read.lat_mean_ns, write.lat_mean_ns),
            lat_stddev_ns: weighted(read.lat_stddev_ns, write.lat_stddev_ns),
            lat_max_ns: read.lat_max_ns.max(write.lat_max_ns),
            slot_idle_seconds: 0.0,
            slot_uncounted_seconds: 0.0,
            in_flight_seconds: 0.0,
            due_missed_ops: 0,
            read_lat_hist: None,
            write_lat_hist: None,
            read,
            write,
        }
    }

    /// A round from one engine interval and its exact statistics (histograms kept).
    pub fn from_interval_detail(
        index: u32,
        end_seconds: f64,
        i: &IntervalSummary,
        d: &IntervalDetail,
    ) -> Round {
        Round {
            read_lat_hist: kept_hist(d.read),
            write_lat_hist: kept_hist(d.write),
            ..Round::from_interval(index, end_seconds, i)
        }
    }

    /// Each direction's histogram over all of `rounds` (None for a direction no round
    /// kept one for): a phase's whole distribution, or a window's.
    pub fn merged_hists(rounds: &[Round]) -> (Option<LatencyHist>, Option<LatencyHist>) {
        let merge = |f: &dyn Fn(&Round) -> Option<&LatencyHist>| {
            let hs: Vec<&LatencyHist> = rounds.iter().filter_map(f).collect();
            if hs.is_empty() {
                return None;
            }
            // Histograms this process wrote, or checked when it read them (merge).
            LatencyHist::merge(hs).ok()
        };
        (
            merge(&|r| r.read_lat_hist.as_ref()),
            merge(&|r| r.write_lat_hist.as_ref()),
        )
    }

    /// A round from one engine interval.
    pub fn from_interval(index: u32, end_seconds: f64, i: &IntervalSummary) -> Round {
        Round {
            slot_idle_seconds: i.slot_idle_seconds,
            slot_uncounted_seconds: i.slot_uncounted_seconds,
            in_flight_seconds: i.in_flight_seconds,
            due_missed_ops: i.due_missed_ops,
            ..Round::from_dirs(index, end_seconds, dir(&i.read), dir(&i.write))
        }
    }

    /// A round from a whole (one-round) run's totals.
    pub fn from_result(index: u32, r: &crate::engine::RunResult) -> Round {
        Round {
            slot_idle_seconds: r.slot_idle_seconds,
            slot_uncounted_seconds: r.slot_uncounted_seconds,
            in_flight_seconds: r.in_flight_seconds,
            due_missed_ops: r.due_missed_ops,
            read_lat_hist: kept_hist(&r.read_stats),
            write_lat_hist: kept_hist(&r.write_stats),
            ..Round::from_dirs(
                index,
                r.runtime_seconds,
                DirFigures::from_summary(&r.read),
                DirFigures::from_summary(&r.write),
            )
        }
    }

    /// The average of several rounds (steady window figures); max is the largest.
    pub fn average(rounds: &[Round]) -> Round {
        let n = rounds.len().max(1) as f64;
        // The window's histogram is the union of its rounds' (not an average).
        let (read_hist, write_hist) = Round::merged_hists(rounds);
        let avg_dir = |f: &dyn Fn(&Round) -> &DirFigures| DirFigures {
            ops: rounds.iter().map(|r| f(r).ops).sum(),
            iops: rounds.iter().map(|r| f(r).iops).sum::<f64>() / n,
            bw_bytes: rounds.iter().map(|r| f(r).bw_bytes).sum::<f64>() / n,
            lat_mean_ns: rounds.iter().map(|r| f(r).lat_mean_ns).sum::<f64>() / n,
            lat_stddev_ns: rounds.iter().map(|r| f(r).lat_stddev_ns).sum::<f64>() / n,
            lat_max_ns: rounds.iter().map(|r| f(r).lat_max_ns).max().unwrap_or(0),
            lat_p50_ns: (rounds.iter().map(|r| f(r).lat_p50_ns as f64).sum::<f64>() / n) as u64,
            lat_p99_ns: (rounds.iter().map(|r| f(r).lat_p99_ns as f64).sum::<f64>() / n) as u64,
            lat_p99_9_ns: (rounds.iter().map(|r| f(r).lat_p99_9_ns as f64).sum::<f64>() / n) as u64,
        };
        Round {
            index: rounds.last().map_or(0, |r| r.index),
            end_seconds: rounds.last().map_or(0.0, |r| r.end_seconds),
            read: avg_dir(&|r| &r.read),
            write: avg_dir(&|r| &r.write),
            iops: rounds.iter().map(|r| r.iops).sum::<f64>() / n,
            lat_mean_ns: rounds.iter().map(|r| r.lat_mean_ns).sum::<f64>() / n,
            lat_max_ns: rounds.iter().map(|r| r.lat_max_ns).max().unwrap_or(0),
            lat_stddev_ns: rounds.iter().map(|r| r.lat_stddev_ns).sum::<f64>() / n,
            slot_idle_seconds: rounds.iter().map(|r| r.slot_idle_seconds).sum::<f64>() / n,
            slot_uncounted_seconds: rounds.iter().map(|r| r.slot_uncounted_seconds).sum::<f64>()
                / n,
            in_flight_seconds: rounds.iter().map(|r| r.in_flight_seconds).sum::<f64>() / n,
            due_missed_ops: rounds.iter().map(|r| r.due_missed_ops).sum::<u64>() / n as u64,
            read_lat_hist: read_hist,
            write_lat_hist: write_hist,
        }
    }
}

/// The histogram a document keeps of one direction: none when it did no I/O.
fn kept_hist(d: &DirStats) -> Option<LatencyHist> {
    (d.ops > 0).then(|| LatencyHist::from_histogram(d.histogram()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn burst_is_the_first_full_round() {
        // Rounds of `len` seconds each.
        let r = |i: u32, len: f64| Round {
            index: i,
            end_seconds: len * (i + 1) as f64,
            ..Round::default()
        };
        assert_eq!(burst_round(&[]), None);
        // Quick scale's 0.5 s rounds: the first holds the start-up, the burst is the second.
        assert_eq!(burst_round(&[r(0, 0.5)]).map(|r| r.index), Some(0));
        let quick = [r(0, 0.5), r(1, 0.5), r(2, 0.5)];
        assert_eq!(burst_round(&quick).map(|r| r.index), Some(1));
        // Full scale's minute rounds: the first is the fresh drive's burst.
        let full = [r(0, 60.0), r(1, 60.0), r(2, 60.0)];
        assert_eq!(burst_round(&full).map(|r| r.index), Some(0));
        let edge = [r(0, 9.99), r(1, 9.99)];
        assert_eq!(burst_round(&edge).map(|r| r.index), Some(1));
    }
}
