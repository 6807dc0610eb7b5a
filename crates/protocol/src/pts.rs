//! The rest of the SNIA Solid State Storage Performance Test Specification, Enterprise
//! (the v1.1 era tests), as suites: throughput, cross-stimulus recovery (XSR) and host
//! idle recovery (HIR). docs/pts.md says, test by test, what follows the specification
//! and where the project's scaled version departs from it.
//!
//! What follows the specification: the sequence of each test (purge, the
//! workload-independent preconditioning where the test has one, the stimulus and its
//! order), the steady-state rule (`steady::Rule`: a window of 5 rounds, range within 20%
//! of the mean, the least-squares line's excursion within 10%, at most 25 rounds), and the
//! figures each test reports (MB/s per block size in the measurement window; throughput
//! over time across the stimulus changes; IOPS per burst for each idle length).
//!
//! Where it departs: time. A round lasts the scale's round (quick 0.5 s, standard 10 s,
//! full 60 s, the specification's minute), the XSR access groups are so many rounds (the
//! specification's 8 h / 6 h / 8 h only at full scale), and the HIR bursts, idle periods
//! and bursts per state are shrunk at quick and standard scale (full: the specification's
//! 5 s bursts, 5-50 s waits, 360 bursts per state). Thread count and queue depth, which the
//! specification leaves to the operator, are fixed here so documents compare.

use std::time::{Duration, Instant};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::result::{Phase, Round, SteadyState, WorkloadDesc};
use super::steady;
use super::suite::{Runner, Scale, Step, SuiteError};
use super::workloads::Workload;
use crate::engine::{self, Pattern, Stop};

/// A step of the PTS suites.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum PtsStep {
    /// Sequential write and read rounds at one block size (`128k`, `1m`) until the
    /// write throughput is steady.
    Throughput(&'static str),
    /// Sequential 128 KiB writes, random 8 KiB writes, sequential 128 KiB writes again.
    Xsr,
    /// Bursts of random 4 KiB writes separated by idle periods of increasing length.
    Hir,
    /// The threads x queue depth grid on random 8 KiB 65:35, its chosen points'
    /// response-time histograms, and the knee.
    Dirth,
}

impl PtsStep {
    pub fn describe(&self, scale: Option<&Scale>) -> String {
        match self {
            PtsStep::Throughput(bs) => format!(
                "throughput: sequential {bs} write then read, a round each, until the write throughput is steady"
            ),
            PtsStep::Xsr => {
                let n = scale.map_or(XSR_QUICK, xsr_rounds);
                format!(
                    "cross-stimulus recovery: sequential 128k writes ({} rounds), random 8k writes ({}), sequential 128k again ({})",
                    n[0], n[1], n[2]
                )
            }
            PtsStep::Hir => "host idle recovery: random 4k write bursts with idle periods of 1, 2, 3, 5 and 10 bursts' length between them, each state followed by a return to baseline (no idle)".to_string(),
            PtsStep::Dirth => {
                let (t, q) = scale.map_or((DIRTH_THREADS_QUICK, DIRTH_DEPTHS_QUICK), dirth_grid);
                format!(
                    "demand intensity: 8k 65/35 random at threads {t:?} x depth {q:?}, the grid repeated until its highest-IOPS point is steady, then response-time histograms at the minimum, middle and maximum IOPS points"
                )
            }
        }
    }

    /// The longest the step spends writing (for `bound::write_bound`): throughput's write
    /// runs (each a ramp and a round, `max_rounds` of them), XSR's three access groups,
    /// HIR's bursts, DIRTH's runs of the grid and its histogram runs (a mix: see
    /// [`PtsStep::read_pct`]).
    pub fn write_seconds(&self, scale: &Scale) -> f64 {
        match self {
            PtsStep::Throughput(_) => {
                (scale.round + scale.ramp).as_secs_f64() * scale.rule.max_rounds as f64
            }
            PtsStep::Xsr => {
                scale.round.as_secs_f64() * xsr_rounds(scale).iter().sum::<u32>() as f64
            }
            PtsStep::Hir => {
                let t = hir_timing(scale);
                t.burst.as_secs_f64()
                    * (t.bursts_per_state * (2 * HIR_WAITS.len() as u32 + 1)) as f64
            }
            // Each grid point in each run of the grid (at most the rule's round limit),
            // then three histogram runs, each a ramp and a round.
            PtsStep::Dirth => {
                (scale.round + scale.ramp).as_secs_f64() * self.max_rounds(scale) as f64
            }
        }
    }

    /// The share of reads in what the step runs for [`PtsStep::write_seconds`]: DIRTH's
    /// mix; every other stimulus only writes.
    pub fn read_pct(&self) -> u32 {
        match self {
            PtsStep::Dirth => DIRTH_MIX.read_pct,
            _ => 0,
        }
    }

    /// The most rounds (engine runs or intervals) the step may take, for progress.
    pub fn max_rounds(&self, scale: &Scale) -> u32 {
        match self {
            PtsStep::Throughput(_) => 2 * scale.rule.max_rounds as u32,
            PtsStep::Xsr => xsr_rounds(scale).iter().sum(),
            PtsStep::Hir => {
                let t = hir_timing(scale);
                t.bursts_per_state * (2 * HIR_WAITS.len() as u32 + 1)
            }
            PtsStep::Dirth => {
                let (t, q) = dirth_grid(scale);
                (t.len() * q.len() * scale.rule.max_rounds + 3) as u32
            }
        }
    }
}

/// Thread count and queue depth of the sequential stimuli: one worker, so the drive sees
/// one sequential stream, 32 deep.
pub const SEQ_WORKERS: u32 = 1;
pub const SEQ_DEPTH: u32 = 32;

pub const SEQ_WRITE_1M: Workload = Workload::new(
    "1m-seqwrite",
    Pattern::Sequential,
    "1m",
    0,
    SEQ_WORKERS,
    SEQ_DEPTH,
);
pub const SEQ_READ_1M: Workload = Workload::new(
    "1m-seqread",
    Pattern::Sequential,
    "1m",
    100,
    SEQ_WORKERS,
    SEQ_DEPTH,
);
pub const SEQ_WRITE_128K: Workload = Workload::new(
    "128k-seqwrite",
    Pattern::Sequential,
    "128k",
    0,
    SEQ_WORKERS,
    SEQ_DEPTH,
);
pub const SEQ_READ_128K: Workload = Workload::new(
    "128k-seqread",
    Pattern::Sequential,
    "128k",
    100,
    SEQ_WORKERS,
    SEQ_DEPTH,
);
/// XSR's random stimulus: 8 KiB random writes at the same 32 outstanding I/Os, so only
/// the access pattern changes at the transitions.
pub const RAND_WRITE_8K: Workload = Workload::new("8k-randwrite", Pattern::Random, "8k", 0, 1, 32);
/// HIR's stimulus: 4 KiB random writes, 4 workers x 8 (32 outstanding).
pub const HIR_WRITE_4K: Workload = Workload::new("4k-randwrite", Pattern::Random, "4k", 0, 4, 8);

/// The steps of the PTS suites, for `suite::build_suites`.
pub fn suite_steps(name: &str) -> Vec<Step> {
    match name {
        // The specification runs each block size as its own test, from a purge.
        "throughput" => vec![
            Step::Purge,
            Step::Precondition,
            Step::Pts(PtsStep::Throughput("1m")),
            Step::Purge,
            Step::Precondition,
            Step::Pts(PtsStep::Throughput("128k")),
        ],
        "xsr" => vec![Step::Purge, Step::Pts(PtsStep::Xsr)],
        // The grid itself is repeated to steady state (on its highest-IOPS point).
        "dirth" => vec![Step::Purge, Step::Precondition, Step::Pts(PtsStep::Dirth)],
        "hir" => vec![
            Step::Purge,
            Step::Precondition,
            Step::SteadyState(HIR_WRITE_4K),
            Step::Pts(PtsStep::Hir),
        ],
        _ => Vec::new(),
    }
}

/// XSR access group lengths in rounds: the specification's 8 h / 6 h / 8 h of one-minute
/// rounds at full scale, the same 4:3:4 proportion shorter at the other scales.
const XSR_QUICK: [u32; 3] = [8, 6, 8];
pub fn xsr_rounds(scale: &Scale) -> [u32; 3] {
    match scale.name {
        "full" => [480, 360, 480],
        "standard" => [48, 36, 48],
        _ => XSR_QUICK,
    }
}

/// HIR's idle periods, in burst lengths (the specification: 5 s bursts, 5, 10, 15, 25
/// and 50 s idle).
pub const HIR_WAITS: [u32; 5] = [1, 2, 3, 5, 10];

/// HIR's timing at a scale.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HirTiming {
    pub burst: Duration,
    pub bursts_per_state: u32,
}

pub fn hir_timing(scale: &Scale) -> HirTiming {
    match scale.name {
        "full" => HirTiming {
            burst: Duration::from_secs(5),
            bursts_per_state: 360,
        },
        "standard" => HirTiming {
            burst: Duration::from_secs(1),
            bursts_per_state: 20,
        },
        _ => HirTiming {
            burst: Duration::from_millis(100),
            bursts_per_state: 3,
        },
    }
}

/// What a PTS test measured (a phase of kind `pts`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "test", rename_all = "snake_case")]
pub enum PtsTest {
    Throughput(ThroughputTest),
    Xsr(XsrTest),
    Hir(HirTest),
    Dirth(DirthTest),
}

impl PtsTest {
    /// What groups the same test across documents in the report (`throughput-1m`).
    pub fn key(&self) -> String {
        match self {
            PtsTest::Throughput(t) => format!("throughput-{}", t.block_size),
            PtsTest::Xsr(_) => "xsr".to_string(),
            PtsTest::Hir(_) => "hir".to_string(),
            PtsTest::Dirth(_) => "dirth".to_string(),
        }
    }

    /// One line for the suite's text summary.
    pub fn summary_line(&self) -> String {
        let mbs = |b: f64| format!("{:.1} MB/s", b / 1e6);
        match self {
            PtsTest::Throughput(t) => format!(
                "throughput {}: write {}, read {} ({} rounds, {})",
                t.block_size,
                mbs(t.write_bytes_per_second),
                mbs(t.read_bytes_per_second),
                t.rounds.len(),
                match t.steady.steady_round {
                    Some(s) => format!("steady at round {}", s + 1),
                    None => "NOT steady".to_string(),
                }
            ),
            PtsTest::Xsr(x) => {
                let segs: Vec<String> = x
                    .segments
                    .iter()
                    .map(|s| {
                        format!(
                            "{} {} ({})",
                            s.workload.name,
                            mbs(s.window_bytes_per_second),
                            s.recovery_seconds.map_or_else(
                                || "never settled".to_string(),
                                |r| format!("settled after {r:.1} s")
                            )
                        )
                    })
                    .collect();
                format!("cross-stimulus recovery: {}", segs.join(", then "))
            }
            PtsTest::Hir(h) => {
                let states: Vec<String> = h
                    .states
                    .iter()
                    .filter(|s| s.wait_seconds > 0.0)
                    .map(|s| {
                        format!(
                            "{:.1} s idle {:.0} IOPS{}",
                            s.wait_seconds,
                            s.mean_iops,
                            s.recovery_ratio
                                .map_or_else(String::new, |r| format!(" (x{r:.2})"))
                        )
                    })
                    .collect();
                format!(
                    "host idle recovery: baseline {:.0} IOPS; {}",
                    h.baseline_iops,
                    states.join(", ")
                )
            }
            PtsTest::Dirth(d) => {
                let at = |k: Option<usize>| {
                    k.and_then(|k| d.points.get(k)).map_or_else(
                        || "-".to_string(),
                        |p| {
                            format!(
                                "{}T{}Q {:.0} IOPS at {:.0} us",
                                p.workers,
                                p.depth,
                                p.round.iops,
                                p.round.lat_mean_ns / 1e3
                            )
                        },
                    )
                };
                format!(
                    "demand intensity: {} points; max {}, knee {}",
                    d.points.len(),
                    at(d.max_point),
                    at(d.knee_point)
                )
            }
        }
    }
}

/// One throughput round: a write run then a read run, each one round long.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ThroughputRound {
    pub index: u32,
    pub write: Round,
    pub read: Round,
}

/// The throughput test at one block size.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ThroughputTest {
    /// `1m` or `128k`.
    pub block_size: String,
    pub write_workload: WorkloadDesc,
    pub read_workload: WorkloadDesc,
    pub rounds: Vec<ThroughputRound>,
    /// The rule on the write rounds' throughput (at one block size, IOPS and MB/s are in
    /// proportion, so the rule's ratios are those of MB/s; `window_mean_iops` is the
    /// write IOPS).
    pub steady: SteadyState,
    /// Mean write and read throughput over the measurement window (the last
    /// `steady.window_rounds` rounds, or the last window when never steady), bytes/s.
    pub write_bytes_per_second: f64,
    pub read_bytes_per_second: f64,
}

/// One access group of XSR.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct XsrSegment {
    pub workload: WorkloadDesc,
    /// Seconds from the start of the test to the start of this access group.
    pub start_seconds: f64,
    /// One per interval (`end_seconds` from the start of the access group).
    pub rounds: Vec<Round>,
    /// Mean throughput (bytes/s) and IOPS of the last window of rounds.
    pub window_bytes_per_second: f64,
    pub window_iops: f64,
    /// The first round from which every round to the end of the group is within half
    /// the steady-state range (10%) of the window mean: the drive has settled.
    pub settled_round: Option<u32>,
    /// Seconds from the start of the group to the start of the settled round: how long
    /// the drive took to recover from the change of stimulus.
    pub recovery_seconds: Option<f64>,
}

/// Cross-stimulus recovery.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct XsrTest {
    /// Sequential 128k write, random 8k write, sequential 128k write.
    pub segments: Vec<XsrSegment>,
    /// Settling tolerance as a share of the window mean.
    pub settle_tolerance_ratio: f64,
    pub window_rounds: u32,
}

/// One HIR state: its bursts and the idle time between them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct HirState {
    /// Idle seconds after each burst (0: a return to baseline, bursts back to back).
    pub wait_seconds: f64,
    /// Seconds from the start of the test to the start of each burst.
    pub burst_starts: Vec<f64>,
    /// Each burst's figures.
    pub bursts: Vec<Round>,
    /// Mean IOPS over the bursts.
    pub mean_iops: f64,
    /// Idle states: `mean_iops` over the mean of the return to baseline before it.
    pub recovery_ratio: Option<f64>,
}

/// Host idle recovery.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct HirTest {
    pub workload: WorkloadDesc,
    pub burst_seconds: f64,
    pub bursts_per_state: u32,
    /// Mean IOPS of the first return to baseline (bursts with no idle, after the steady
    /// state): what a saturated drive does without rest.
    pub baseline_iops: f64,
    /// Baseline, then for each idle length: the idle state and a return to baseline.
    pub states: Vec<HirState>,
}

/// The daemon's gauges' view of a test: a workload and the round that stands for it
/// (throughput: the last write and read rounds; XSR: each access group's last round;
/// HIR: the last burst of the first return to baseline).
pub fn status_points(t: &PtsTest) -> Vec<(&WorkloadDesc, &Round)> {
    match t {
        PtsTest::Throughput(t) => t
            .rounds
            .last()
            .map(|r| vec![(&t.write_workload, &r.write), (&t.read_workload, &r.read)])
            .unwrap_or_default(),
        PtsTest::Xsr(x) => x
            .segments
            .iter()
            .filter_map(|s| s.rounds.last().map(|r| (&s.workload, r)))
            .collect(),
        PtsTest::Dirth(d) => d
            .max_point
            .and_then(|k| d.points.get(k))
            .map(|p| vec![(&d.workload, &p.round)])
            .unwrap_or_default(),
        PtsTest::Hir(h) => h
            .states
            .first()
            .and_then(|s| s.bursts.last())
            .map(|r| vec![(&h.workload, r)])
            .unwrap_or_default(),
    }
}

/// DIRTH's mix: random 8 KiB, 65% reads (the specification's).
pub const DIRTH_MIX: Workload = Workload::new("8k-65-35", Pattern::Random, "8k", 65, 1, 1);
const DIRTH_THREADS_QUICK: &[u32] = &[1, 2, 4];
const DIRTH_DEPTHS_QUICK: &[u32] = &[1, 2, 4, 8, 16];

/// DIRTH's grid: threads x queue depths. Full scale: the specification's 1-32 threads x
/// 1-32 deep; standard: up to 16 x 16; quick: up to 4 x 16.
pub fn dirth_grid(scale: &Scale) -> (&'static [u32], &'static [u32]) {
    match scale.name {
        "full" => (&[1, 2, 4, 8, 16, 32], &[1, 2, 4, 6, 8, 16, 32]),
        "standard" => (&[1, 2, 4, 8, 16], &[1, 2, 4, 8, 16]),
        _ => (DIRTH_THREADS_QUICK, DIRTH_DEPTHS_QUICK),
    }
}

/// Upper edges of the response-time histogram's bins, in nanoseconds: 4 a decade (1,
/// 1.78, 3.16, 5.62, 10...) from 1 us to 10 s; a last bin holds everything above.
pub fn histogram_edges() -> Vec<u64> {
    let mut v = Vec::new();
    let mut e = 1_000.0f64;
    while e <= 10e9 * 1.0001 {
        v.push(e.round() as u64);
        e *= 10f64.powf(0.25);
    }
    v
}

/// A response-time histogram: counts per bin (`upper_ns[k]` the upper edge of bin k, the
/// last bin unbounded above), of every I/O (reads and writes) of one run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ResponseHistogram {
    /// Which point: `min`, `mid` or `max`.
    pub point: String,
    pub workers: u32,
    pub depth: u32,
    /// The histogram run's figures.
    pub round: Round,
    pub upper_ns: Vec<u64>,
    pub counts: Vec<u64>,
}

/// One grid point.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DirthPoint {
    pub workers: u32,
    pub depth: u32,
    pub round: Round,
}

/// Demand intensity / response time histogram.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DirthTest {
    /// The mix (its workers and depth are those of each point).
    pub workload: WorkloadDesc,
    /// Threads-major: every depth of the first thread count, then the next. Each point's
    /// figures are the average of its rounds in the measurement window (the last
    /// `steady.window_rounds` runs of the grid, or every run when there were fewer).
    pub points: Vec<DirthPoint>,
    /// Runs of the whole grid: repeated until the tracked point is steady, or the rule's
    /// round limit (0 in documents written before the grid was repeated).
    #[serde(default)]
    pub grid_rounds: u32,
    /// Index into `points` of the point whose IOPS the steady-state rule is applied to:
    /// the highest-IOPS point of the first run of the grid (the specification's tracking
    /// variable).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tracked_point: Option<usize>,
    /// The tracked point's IOPS in each run of the grid.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tracked_iops: Vec<f64>,
    /// The steady-state rule on `tracked_iops`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steady: Option<SteadyState>,
    /// Indexes into `points`: the lowest demand (fewest threads, shallowest queue), the
    /// point whose IOPS is nearest the middle of the lowest and highest, and the highest
    /// IOPS.
    pub min_point: Option<usize>,
    pub mid_point: Option<usize>,
    pub max_point: Option<usize>,
    /// The knee of the IOPS-response time curve: of the points ordered by outstanding
    /// I/Os, the one farthest below the straight line from the first to the last
    /// (both axes scaled to their range): past it, more demand buys mostly latency.
    pub knee_point: Option<usize>,
    /// At the min, mid and max points, one more run each with its histogram.
    pub histograms: Vec<ResponseHistogram>,
}

/// The knee of a curve of (IOPS, response time) points ordered by demand: the point
/// farthest from the chord between the first and last, both axes normalised to their
/// range, on the side of the chord where the IOPS are higher for the latency.
pub fn knee(curve: &[(f64, f64)]) -> Option<usize> {
    if curve.len() < 3 {
        return None;
    }
    let (xmin, xmax) = curve
        .iter()
        .fold((f64::MAX, f64::MIN), |(a, b), p| (a.min(p.0), b.max(p.0)));
    let (ymin, ymax) = curve
        .iter()
        .fold((f64::MAX, f64::MIN), |(a, b), p| (a.min(p.1), b.max(p.1)));
    let nx = |x: f64| {
        if xmax > xmin {
            (x - xmin) / (xmax - xmin)
        } else {
            0.0
        }
    };
    let ny = |y: f64| {
        if ymax > ymin {
            (y - ymin) / (ymax - ymin)
        } else {
            0.0
        }
    };
    let (x0, y0) = (nx(curve[0].0), ny(curve[0].1));
    let (x1, y1) = (nx(curve[curve.len() - 1].0), ny(curve[curve.len() - 1].1));
    let (dx, dy) = (x1 - x0, y1 - y0);
    let len = (dx * dx + dy * dy).sqrt();
    if len == 0.0 {
        return None;
    }
    curve
        .iter()
        .enumerate()
        .map(|(k, p)| {
            // Positive: the point lies right of / below the chord (more IOPS for its
            // latency than the straight line).
            let (x, y) = (nx(p.0), ny(p.1));
            (k, ((x - x0) * dy - (y - y0) * dx) / len)
        })
        .filter(|&(_, d)| d > 0.0)
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(k, _)| k)
}

/// Counts of `stats`'s latencies in the bins of [`histogram_edges`].
fn bin(stats: &[&crate::engine::DirStats], edges: &[u64]) -> Vec<u64> {
    let mut counts = vec![0u64; edges.len() + 1];
    for s in stats {
        if s.ops == 0 {
            continue;
        }
        for v in s.histogram().iter_recorded() {
            let ns = v.value_iterated_to();
            let k = edges.partition_point(|&e| e < ns);
            counts[k] += v.count_at_value();
        }
    }
    counts
}

/// The settled round of `series` against `mean`: the first from which every value to the
/// end is within `tol` x `mean` of it.
pub fn settled_round(series: &[f64], mean: f64, tol: f64) -> Option<usize> {
    if series.is_empty() || mean <= 0.0 {
        return None;
    }
    let within = |v: f64| (v - mean).abs() <= tol * mean;
    let mut at = series.len();
    while at > 0 && within(series[at - 1]) {
        at -= 1;
    }
    (at < series.len()).then_some(at)
}

fn mean(v: impl Iterator<Item = f64>) -> f64 {
    let (s, n) = v.fold((0.0, 0usize), |(s, n), x| (s + x, n + 1));
    if n == 0 {
        0.0
    } else {
        s / n as f64
    }
}

impl Runner<'_> {
    pub(super) fn pts(&mut self, step: &PtsStep) -> Result<Phase, SuiteError> {
        Ok(Phase::Pts(match step {
            PtsStep::Throughput(bs) => PtsTest::Throughput(self.pts_throughput(bs)?),
            PtsStep::Xsr => PtsTest::Xsr(self.pts_xsr()?),
            PtsStep::Hir => PtsTest::Hir(self.pts_hir()?),
            PtsStep::Dirth => PtsTest::Dirth(self.pts_dirth()?),
        }))
    }

    fn pts_throughput(&mut self, bs: &str) -> Result<ThroughputTest, SuiteError> {
        let (w, r) = match bs {
            "1m" => (SEQ_WRITE_1M, SEQ_READ_1M),
            _ => (SEQ_WRITE_128K, SEQ_READ_128K),
        };
        let rule = self.opts.scale.rule;
        let mut rounds: Vec<ThroughputRound> = Vec::new();
        let mut steady_round = None;
        for i in 0..rule.max_rounds as u32 {
            if self.control.is_stopped() {
                break;
            }
            let write = self.one_round(&w, i, None)?;
            let read = self.one_round(&r, i, None)?;
            rounds.push(ThroughputRound {
                index: i,
                write,
                read,
            });
            let n = rounds.len();
            if n >= rule.window {
                let series: Vec<f64> = rounds[n - rule.window..]
                    .iter()
                    .map(|r| r.write.write.bw_bytes)
                    .collect();
                if steady::check(&series, &rule).steady {
                    steady_round = Some(i);
                    break;
                }
            }
        }
        let n = rounds.len();
        let window = &rounds[n - rule.window.min(n)..];
        let iops: Vec<f64> = window.iter().map(|r| r.write.iops).collect();
        let check = steady::check(&iops, &rule);
        Ok(ThroughputTest {
            block_size: bs.to_string(),
            write_workload: w.desc(),
            read_workload: r.desc(),
            // The specification's throughput test stops at steady state: no rounds are
            // run past it to watch for a drive leaving it.
            steady: SteadyState::from_check(&rule, &check, steady_round, &[]),
            write_bytes_per_second: mean(window.iter().map(|r| r.write.write.bw_bytes)),
            read_bytes_per_second: mean(window.iter().map(|r| r.read.read.bw_bytes)),
            rounds,
        })
    }

    /// Runs `wl` for `n` rounds as one engine run, a round per interval.
    fn pts_rounds(&mut self, wl: &Workload, n: u32) -> Result<Vec<Round>, SuiteError> {
        let scale = self.opts.scale;
        let job = self.job(wl, wl.name, Stop::Time(scale.round * n), Duration::ZERO)?;
        let control = self.control.child();
        let mut rounds: Vec<Round> = Vec::new();
        {
            let observer = &mut *self.observer;
            let mut on_interval = |i: &engine::IntervalSummary| {
                let r = Round::from_interval(rounds.len() as u32, i.end_seconds, i);
                observer.round(&r, None);
                rounds.push(r);
            };
            let r = super::suite::run_engine(
                self.suite,
                self.target,
                wl.name,
                &job,
                &control,
                &mut on_interval,
            )?;
            self.engine_name
                .get_or_insert_with(|| r.engine.name().to_string());
        }
        // A last interval cut short by the run's end (or a stop) is not a whole round.
        if let Some(last) = rounds.last() {
            let want = scale.round.as_secs_f64() * rounds.len() as f64;
            if rounds.len() > 1 && (last.end_seconds - want).abs() > scale.round.as_secs_f64() * 0.5
            {
                rounds.pop();
            }
        }
        Ok(rounds)
    }

    fn pts_xsr(&mut self) -> Result<XsrTest, SuiteError> {
        let scale = self.opts.scale;
        let rule = scale.rule;
        let tol = rule.max_range / 2.0;
        let lens = xsr_rounds(&scale);
        let started = Instant::now();
        let mut segments = Vec::new();
        for (wl, n) in [SEQ_WRITE_128K, RAND_WRITE_8K, SEQ_WRITE_128K]
            .iter()
            .zip(lens)
        {
            if self.control.is_stopped() {
                break;
            }
            let start_seconds = started.elapsed().as_secs_f64();
            let rounds = self.pts_rounds(wl, n)?;
            let k = rounds.len();
            let window = &rounds[k - rule.window.min(k)..];
            let window_iops = mean(window.iter().map(|r| r.iops));
            let window_bytes_per_second = mean(window.iter().map(|r| r.write.bw_bytes));
            let series: Vec<f64> = rounds.iter().map(|r| r.iops).collect();
            let settled = settled_round(&series, window_iops, tol);
            segments.push(XsrSegment {
                workload: wl.desc(),
                start_seconds,
                window_bytes_per_second,
                window_iops,
                settled_round: settled.map(|s| s as u32),
                recovery_seconds: settled.map(|s| {
                    if s == 0 {
                        0.0
                    } else {
                        rounds[s - 1].end_seconds
                    }
                }),
                rounds,
            });
        }
        Ok(XsrTest {
            segments,
            settle_tolerance_ratio: tol,
            window_rounds: rule.window as u32,
        })
    }

    fn pts_dirth(&mut self) -> Result<DirthTest, SuiteError> {
        let (threads, depths) = dirth_grid(&self.opts.scale);
        let rule = self.opts.scale.rule;
        let grid: Vec<(u32, u32)> = threads
            .iter()
            .flat_map(|&t| depths.iter().map(move |&q| (t, q)))
            .collect();
        // Each point's round in each whole run of the grid.
        let mut runs: Vec<Vec<Round>> = Vec::new();
        let mut tracked = None;
        let mut tracked_iops = Vec::new();
        let mut steady_round = None;
        // The points a stop left of the first run, when it cut that short.
        let mut partial = Vec::new();
        for g in 0..rule.max_rounds {
            let mut run = Vec::with_capacity(grid.len());
            for &(t, q) in &grid {
                if self.control.is_stopped() {
                    break;
                }
                let index = (g * grid.len() + run.len()) as u32;
                run.push(self.one_round(&DIRTH_MIX.with(t, q), index, None)?);
            }
            // A run of the grid a stop cut short (before a point, or inside the last one)
            // is not a whole one: not counted, its points kept only when there is no
            // whole run.
            if self.control.is_stopped() {
                // The round the stop cut short measured part of a round: not a point.
                let full = self.opts.scale.round.as_secs_f64() * 0.99;
                if run.last().is_some_and(|r| r.end_seconds < full) {
                    run.pop();
                }
                if runs.is_empty() {
                    partial = run;
                }
                break;
            }
            let k = *tracked.get_or_insert_with(|| {
                (0..run.len())
                    .max_by(|&a, &b| run[a].iops.total_cmp(&run[b].iops))
                    .unwrap_or(0)
            });
            tracked_iops.push(run[k].iops);
            runs.push(run);
            let m = tracked_iops.len();
            if m >= rule.window && steady::check(&tracked_iops[m - rule.window..], &rule).steady {
                steady_round = Some(g as u32);
                break;
            }
        }
        let n = runs.len();
        let window = rule.window.min(n);
        let steady = (n > 0).then(|| {
            let check = steady::check(&tracked_iops[n - window..], &rule);
            SteadyState::from_check(&rule, &check, steady_round, &[])
        });
        let point = |&(t, q): &(u32, u32), round| DirthPoint {
            workers: t,
            depth: q,
            round,
        };
        // Each point's figures: its average over the window's runs; with no whole run,
        // what the cut-short first run measured.
        let points: Vec<DirthPoint> = if n == 0 {
            grid.iter()
                .zip(partial)
                .map(|(tq, r)| point(tq, r))
                .collect()
        } else {
            grid.iter()
                .enumerate()
                .map(|(k, tq)| {
                    let window_rounds: Vec<Round> =
                        runs[n - window..].iter().map(|r| r[k].clone()).collect();
                    let mut round = Round::average(&window_rounds);
                    round.index = k as u32;
                    point(tq, round)
                })
                .collect()
        };
        let by_iops = |a: &&DirthPoint, b: &&DirthPoint| a.round.iops.total_cmp(&b.round.iops);
        let idx =
            |p: Option<&DirthPoint>| p.and_then(|p| points.iter().position(|q| std::ptr::eq(q, p)));
        let max_point = idx(points.iter().max_by(by_iops));
        let min_point = idx(points
            .iter()
            .min_by_key(|p| (p.workers as u64 * p.depth as u64, p.workers)));
        let mid_point = match (min_point, max_point) {
            (Some(a), Some(b)) => {
                let target = (points[a].round.iops + points[b].round.iops) / 2.0;
                idx(points.iter().min_by(|x, y| {
                    (x.round.iops - target)
                        .abs()
                        .total_cmp(&(y.round.iops - target).abs())
                }))
            }
            _ => None,
        };
        // The curve: points ordered by outstanding I/Os (then threads).
        let mut order: Vec<usize> = (0..points.len()).collect();
        order.sort_by_key(|&k| (points[k].workers * points[k].depth, points[k].workers));
        let curve: Vec<(f64, f64)> = order
            .iter()
            .map(|&k| (points[k].round.iops, points[k].round.lat_mean_ns))
            .collect();
        let knee_point = knee(&curve).map(|k| order[k]);
        let edges = histogram_edges();
        let mut histograms = Vec::new();
        for (name, at) in [("min", min_point), ("mid", mid_point), ("max", max_point)] {
            let Some(k) = at else { continue };
            if self.control.is_stopped() {
                break;
            }
            let (t, q) = (points[k].workers, points[k].depth);
            let wl = DIRTH_MIX.with(t, q);
            let scale = self.opts.scale;
            let job = self.job(&wl, wl.name, Stop::Time(scale.round), scale.ramp)?;
            let control = self.control.child();
            let r = self.run(&job, wl.name, &control, &mut |_| {})?;
            let round = Round::from_result(histograms.len() as u32, &r);
            self.observer.round(&round, None);
            histograms.push(ResponseHistogram {
                point: name.to_string(),
                workers: t,
                depth: q,
                counts: bin(&[&r.read_stats, &r.write_stats], &edges),
                upper_ns: edges.clone(),
                round,
            });
        }
        Ok(DirthTest {
            workload: DIRTH_MIX.desc(),
            points,
            grid_rounds: n as u32,
            // Set by the first whole run of the grid, so only when there is one.
            tracked_point: tracked,
            tracked_iops,
            steady,
            min_point,
            mid_point,
            max_point,
            knee_point,
            histograms,
        })
    }

    /// Sleeps `d`, waking early when the run is stopped.
    fn pts_idle(&self, d: Duration) {
        let until = Instant::now() + d;
        loop {
            let now = Instant::now();
            if now >= until || self.control.is_stopped() {
                return;
            }
            std::thread::sleep((until - now).min(Duration::from_millis(50)));
        }
    }

    fn pts_hir(&mut self) -> Result<HirTest, SuiteError> {
        let t = hir_timing(&self.opts.scale);
        let wl = HIR_WRITE_4K;
        let job = self.job(&wl, wl.name, Stop::Time(t.burst), Duration::ZERO)?;
        let mut job_spec = job.to_spec();
        // One interval per burst: the burst's figures are its whole run.
        job_spec.interval = t.burst;
        let job = job_spec.validate().map_err(|e| self.job_err(wl.name, e))?;
        let started = Instant::now();
        let mut states: Vec<HirState> = Vec::new();
        let mut order = vec![Duration::ZERO];
        for w in HIR_WAITS {
            order.push(t.burst * w);
            order.push(Duration::ZERO);
        }
        for wait in order {
            if self.control.is_stopped() {
                break;
            }
            let mut bursts = Vec::new();
            let mut burst_starts = Vec::new();
            for b in 0..t.bursts_per_state {
                if self.control.is_stopped() {
                    break;
                }
                burst_starts.push(started.elapsed().as_secs_f64());
                let control = self.control.child();
                let r = self.run(&job, wl.name, &control, &mut |_| {})?;
                let round = Round::from_result(b, &r);
                self.observer.round(&round, None);
                bursts.push(round);
                if !wait.is_zero() {
                    self.pts_idle(wait);
                }
            }
            let mean_iops = mean(bursts.iter().map(|r| r.iops));
            let recovery_ratio = (!wait.is_zero())
                .then(|| {
                    states
                        .iter()
                        .rev()
                        .find(|s| s.wait_seconds == 0.0)
                        .map(|b| b.mean_iops)
                })
                .flatten()
                .filter(|&b| b > 0.0)
                .map(|b| mean_iops / b);
            states.push(HirState {
                wait_seconds: wait.as_secs_f64(),
                burst_starts,
                bursts,
                mean_iops,
                recovery_ratio,
            });
        }
        Ok(HirTest {
            workload: wl.desc(),
            burst_seconds: t.burst.as_secs_f64(),
            bursts_per_state: t.bursts_per_state,
            baseline_iops: states.first().map_or(0.0, |s| s.mean_iops),
            states,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settled_is_the_start_of_the_last_run_within_tolerance() {
        // A dip after the change of stimulus, then flat at 100.
        let s = [300.0, 150.0, 60.0, 95.0, 104.0, 100.0, 98.0];
        assert_eq!(settled_round(&s, 100.0, 0.1), Some(3));
        // Already settled from the first round.
        assert_eq!(settled_round(&[100.0, 101.0], 100.0, 0.1), Some(0));
        // The last round out of tolerance: never settled.
        assert_eq!(settled_round(&[100.0, 100.0, 130.0], 100.0, 0.1), None);
        assert_eq!(settled_round(&[], 100.0, 0.1), None);
    }

    #[test]
    fn knee_is_where_latency_starts_to_buy_little() {
        // IOPS rise with demand, then flatten while latency climbs.
        let c = [
            (10.0, 100.0),
            (20.0, 100.0),
            (40.0, 110.0),
            (60.0, 130.0),
            (65.0, 300.0),
            (66.0, 700.0),
        ];
        assert_eq!(knee(&c), Some(3));
        // A straight line has no knee; nor have two points.
        assert_eq!(knee(&[(1.0, 1.0), (2.0, 2.0), (3.0, 3.0)]), None);
        assert_eq!(knee(&c[..2]), None);
    }

    #[test]
    fn histogram_bins_cover_1us_to_10s_four_a_decade() {
        let e = histogram_edges();
        assert_eq!(e.first(), Some(&1_000));
        assert_eq!(e.last(), Some(&10_000_000_000));
        assert_eq!(e.len(), 7 * 4 + 1);
        let mut s = crate::engine::DirStats::with_digits(3);
        for ns in [500, 1_000, 1_001, 2_000_000, 20_000_000_000] {
            s.record(ns, 4096);
        }
        let c = bin(&[&s], &e);
        assert_eq!(c.iter().sum::<u64>(), 5);
        assert_eq!(c[0], 2, "up to 1 us");
        assert_eq!(c[1], 1);
        assert_eq!(c[e.len()], 1, "above 10 s");
    }

    #[test]
    fn scales_keep_the_specifications_proportions() {
        for name in ["quick", "standard", "full"] {
            let s = Scale::named(name).unwrap();
            let x = xsr_rounds(&s);
            assert_eq!(x[0], x[2]);
            assert_eq!(x[0] * 3, x[1] * 4, "{name}: 8 h : 6 h");
        }
        let full = Scale::named("full").unwrap();
        // The specification's lengths at full scale: 8 h of one-minute rounds, 5 s bursts.
        assert_eq!(xsr_rounds(&full)[0] as u64 * full.round.as_secs(), 8 * 3600);
        assert_eq!(hir_timing(&full).burst, Duration::from_secs(5));
        assert_eq!(
            HIR_WAITS.map(|w| (hir_timing(&full).burst * w).as_secs()),
            [5, 10, 15, 25, 50]
        );
    }

    /// Stops the run after `after` rounds of the suite's phase `phase` (or, with
    /// `after_ms`, that long after the phase begins, from another thread, as a signal
    /// would: inside a round), and keeps every round of that phase it saw.
    struct StopAfter {
        phase: usize,
        after: usize,
        after_ms: Option<u64>,
        at: usize,
        seen: Vec<Round>,
        control: crate::engine::RunControl,
    }

    impl super::super::suite::Observer for StopAfter {
        fn phase(&mut self, index: usize, _: usize, _: &str, _: u32) {
            self.at = index;
            if let (true, Some(ms)) = (index == self.phase, self.after_ms) {
                let c = self.control.clone();
                std::thread::spawn(move || {
                    std::thread::sleep(Duration::from_millis(ms));
                    c.stop();
                });
            }
        }
        fn round(&mut self, round: &Round, _: Option<&steady::Check>) {
            if self.at == self.phase {
                self.seen.push(round.clone());
                if self.seen.len() == self.after {
                    self.control.stop();
                }
            }
        }
    }

    /// Runs `dirth` on a small file with 30 ms rounds, stopped after `after` rounds of its
    /// grid; returns the document's DIRTH test and the rounds the grid ran.
    fn stopped_dirth(
        after: usize,
        after_ms: Option<u64>,
    ) -> (serde_json::Value, Vec<Round>, serde_json::Value) {
        use super::super::suite::{self, SuiteOptions};
        let dir = if std::path::Path::new("/dev/shm").is_dir() {
            tempfile::tempdir_in("/dev/shm").unwrap()
        } else {
            tempfile::tempdir().unwrap()
        };
        let path = dir.path().join("dirth");
        std::fs::write(&path, vec![0u8; 8 << 20]).unwrap();
        let permit = crate::safety::authorize_file_writes(&path, true).unwrap();
        let target = crate::target::Target::open(&path, true, Some(&permit)).unwrap();
        let mut scale = Scale::named("quick").unwrap();
        scale.round = Duration::from_millis(30);
        scale.ramp = Duration::ZERO;
        let opts = SuiteOptions {
            seed: Some(7),
            ..SuiteOptions::at(scale)
        };
        let control = crate::engine::RunControl::new();
        let mut obs = StopAfter {
            phase: 2,
            after,
            after_ms,
            at: 0,
            seen: Vec::new(),
            control: control.clone(),
        };
        let s = suite::find("dirth").unwrap();
        assert!(matches!(s.steps[2], Step::Pts(PtsStep::Dirth)));
        let (doc, err) = suite::run_suite(&s, &target, &opts, &control, &mut obs);
        assert!(err.is_none(), "{err:?}");
        let doc = serde_json::to_value(&doc).unwrap();
        assert_eq!(doc["complete"], false, "a stopped run is not complete");
        let dirth = doc["phases"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["test"] == "dirth")
            .unwrap_or_else(|| panic!("no dirth phase: {}", doc["incomplete_reason"]))
            .clone();
        (dirth, obs.seen, doc)
    }

    #[test]
    fn a_dirth_stopped_in_its_second_run_keeps_the_first_whole() {
        let grid = DIRTH_THREADS_QUICK.len() * DIRTH_DEPTHS_QUICK.len();
        let (d, seen, _) = stopped_dirth(grid + 3, None);
        assert_eq!(
            seen.len(),
            grid + 3,
            "the stop came after the round that asked it"
        );
        assert_eq!(d["grid_rounds"], 1);
        let tracked = d["tracked_point"].as_u64().unwrap() as usize;
        // The tracked point is the first run's highest, and its one figure is that run's.
        let first = &seen[..grid];
        let best = (0..grid)
            .max_by(|&a, &b| first[a].iops.total_cmp(&first[b].iops))
            .unwrap();
        assert_eq!(tracked, best);
        assert_eq!(d["tracked_iops"].as_array().unwrap().len(), 1);
        // Every point is the first run's round: the cut-short second run is not in it.
        let points = d["points"].as_array().unwrap();
        assert_eq!(points.len(), grid);
        for (k, p) in points.iter().enumerate() {
            let iops = p["round"]["iops"].as_f64().unwrap();
            assert!(
                (iops - first[k].iops).abs() <= 1e-9 * first[k].iops.max(1.0),
                "point {k}: {iops} against the first run's {}",
                first[k].iops
            );
        }
        // One run is not a window of five: not steady.
        assert_eq!(d["steady"]["attained"], false, "{}", d["steady"]);
    }

    #[test]
    fn a_dirth_stopped_in_its_first_run_keeps_the_points_it_measured() {
        let (d, seen, doc) = stopped_dirth(4, None);
        assert_eq!(seen.len(), 4);
        assert_eq!(d["grid_rounds"], 0);
        assert!(d["tracked_point"].is_null(), "{}", d["tracked_point"]);
        assert_eq!(d["tracked_iops"].as_array().map_or(0, |a| a.len()), 0);
        assert!(d["steady"].is_null(), "{}", d["steady"]);
        let points = d["points"].as_array().unwrap();
        let want: Vec<(u64, u64)> = DIRTH_DEPTHS_QUICK[..4]
            .iter()
            .map(|&q| (1, q as u64))
            .collect();
        let got: Vec<(u64, u64)> = points
            .iter()
            .map(|p| (p["workers"].as_u64().unwrap(), p["depth"].as_u64().unwrap()))
            .collect();
        assert_eq!(got, want);
        for (p, r) in points.iter().zip(&seen) {
            assert_eq!(p["round"]["iops"].as_f64().unwrap(), r.iops);
        }
        // No histogram is measured after a stop.
        assert_eq!(d["histograms"].as_array().map_or(0, |a| a.len()), 0);
        let why = &doc["incomplete_reason"];
        assert!(why.as_str().is_some_and(|r| !r.is_empty()), "{why}");
    }

    #[test]
    fn a_dirth_stopped_inside_a_round_keeps_only_whole_rounds() {
        // 30 ms rounds: 70 ms into the grid is inside its third round, on a quiet host
        // (on a loaded one the stop may land elsewhere; what is kept must be whole).
        let (d, seen, _) = stopped_dirth(usize::MAX, Some(70));
        let round = 0.030 * 0.99;
        if d["grid_rounds"] == 0 {
            let points = d["points"].as_array().unwrap();
            assert!(
                points.len() + 1 >= seen.len() && points.len() <= seen.len(),
                "{} points of {} rounds",
                points.len(),
                seen.len()
            );
            for (p, r) in points.iter().zip(&seen) {
                let secs = p["round"]["end_seconds"].as_f64().unwrap();
                assert!(secs >= round, "a point of {secs} s");
                assert_eq!(p["round"]["iops"].as_f64().unwrap(), r.iops);
            }
            // The round the stop cut, if it cut one, is not a point.
            if let Some(last) = seen.last().filter(|r| r.end_seconds < round) {
                assert_eq!(points.len(), seen.len() - 1, "{}", last.end_seconds);
            }
        }
    }
}
