//! Suites: named sequences of protocol steps, and the runner that executes them on the
//! engine and writes the result document. The daemon's scheduled runs call the same
//! runner.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;

use super::purge;
use super::result::{
    burst_round, CurvePoint, Phase, Rated, Round, SteadyState, SuiteResult, SweepPoint,
    SCHEMA_VERSION,
};
use super::steady::{self, Rule};
use super::workloads::{self as w, Workload};
use crate::engine::{
    self, Arrival, EngineError, JobError, RateLimit, RegionSpec, RunControl, RunResult, Stop,
};
use crate::health::model::Identity;
use crate::target::{Region, Target};

#[derive(Debug, thiserror::Error)]
pub enum SuiteError {
    #[error("no suite named '{0}': see driveprobe bench --list-suites")]
    Unknown(String),
    #[error("'{0}' is not a scale: give quick, standard or full")]
    Scale(String),
    #[error("suite {suite}, {phase}: {source}")]
    Engine {
        suite: String,
        phase: String,
        source: EngineError,
    },
    #[error("suite {suite}, {phase}: {source}")]
    Job {
        suite: String,
        phase: String,
        source: JobError,
    },
    #[error("suite {suite}, {phase}: {source}")]
    Purge {
        suite: String,
        phase: String,
        source: purge::PurgeError,
    },
    #[error("suite {suite}, {phase}: {count} I/O error(s), the first a {first}; check the drive (driveprobe health) and its cabling")]
    Io {
        suite: String,
        phase: String,
        count: u64,
        first: String,
    },
    #[error("suite {0}: the target is read-only, and every suite writes: it needs a write permit")]
    ReadOnly(String),
    #[error("suite {0}: keeping the latency histograms to fewer digits: {1}")]
    Hist(String, super::hist::HistError),
    #[error("suite {suite}: {app} needs a file target's directory for its data, and {target} is a block device: give a file on the drive's filesystem instead")]
    NeedsDirectory {
        suite: String,
        app: &'static str,
        target: String,
    },
    #[error("suite {suite}: {source}")]
    Oltp {
        suite: String,
        source: crate::app::oltp::OltpError,
    },
    #[error("suite {suite}: {source}")]
    Kv {
        suite: String,
        source: crate::app::kv::KvError,
    },
    #[error("suite {0}: {1}")]
    Qos(String, super::qos::QosError),
    #[error("suite {suite}: fio job file: {source}")]
    FioJob {
        suite: String,
        source: crate::fio_job::FioJobError,
    },
}

/// An application workload (`crate::app`), run with its data in the directory of the
/// file target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AppKind {
    /// sysbench `oltp_read_write` on a private MariaDB.
    Oltp,
    /// RocksDB `db_bench`.
    Kv,
}

impl AppKind {
    pub fn name(self) -> &'static str {
        match self {
            AppKind::Oltp => "oltp",
            AppKind::Kv => "kv",
        }
    }
}

/// How long things take: the same suite runs in well under a minute on a small file for
/// tests and demos (quick; BENCHMARKS.md has the measured figure), and for hours on a real
/// drive.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Scale {
    pub name: &'static str,
    /// Length of one measured round.
    #[serde(with = "secs")]
    pub round: Duration,
    /// Unmeasured warm-up before each sweep, curve and matrix point.
    #[serde(with = "secs")]
    pub ramp: Duration,
    /// Steady-state rule (window, tolerances, give-up round count).
    pub rule: Rule,
    /// Workload-independent preconditioning passes over the region (SNIA: 2).
    pub precondition_passes: u32,
    /// Write saturation stops after this many rounds if 4x the region was not written.
    pub wsat_max_rounds: u32,
}

mod secs {
    pub fn serialize<S: serde::Serializer>(
        d: &std::time::Duration,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        s.serialize_f64(d.as_secs_f64())
    }
}

impl Scale {
    pub fn named(name: &str) -> Result<Scale, SuiteError> {
        let rule = Rule::default();
        Ok(match name {
            "quick" => Scale {
                name: "quick",
                round: Duration::from_millis(500),
                ramp: Duration::from_millis(100),
                rule: Rule {
                    max_rounds: 10,
                    ..rule
                },
                precondition_passes: 1,
                wsat_max_rounds: 20,
            },
            "standard" => Scale {
                name: "standard",
                round: Duration::from_secs(10),
                ramp: Duration::from_secs(2),
                rule,
                precondition_passes: 2,
                wsat_max_rounds: 360,
            },
            "full" => Scale {
                name: "full",
                round: Duration::from_secs(60),
                ramp: Duration::from_secs(5),
                rule,
                precondition_passes: 2,
                wsat_max_rounds: 1440,
            },
            other => return Err(SuiteError::Scale(other.to_string())),
        })
    }
}

/// One step of a suite.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    Purge,
    Precondition,
    Fill,
    /// Test only the first share of the target from here on.
    Region(f64),
    SteadyState(Workload),
    Sweep(Workload, &'static [u32], &'static [u32]),
    RateCurve(Workload),
    WriteSaturation(Workload),
    Point(Workload),
    /// An application workload in the target's directory.
    App(AppKind),
    /// A user's fio job file on the target (its jobs become points), with a time limit.
    FioJob(std::path::PathBuf, Duration),
    /// QoS qualification of one row of a latency target table.
    Qos(super::qos::QosRow),
    /// A SNIA PTS test of its own kind (`protocol::pts`).
    Pts(super::pts::PtsStep),
}

impl Step {
    fn describe(&self) -> String {
        match self {
            Step::Purge => "purge".into(),
            Step::Precondition => "workload-independent preconditioning".into(),
            Step::Fill => "fill the whole target".into(),
            Step::Region(f) => format!("use the first {:.0}% as the test region", f * 100.0),
            Step::SteadyState(w) => {
                format!("{} to steady state at {}x{}", w.name, w.workers, w.depth)
            }
            Step::Sweep(w, ws, ds) => {
                format!("{} sweep, workers {:?} x depth {:?}", w.name, ws, ds)
            }
            Step::RateCurve(w) => format!(
                "{} rate curve, {} outstanding: max rate, then 10%..120%",
                w.name,
                w.workers * w.depth
            ),
            Step::WriteSaturation(w) => format!("{} until 4x the region is written", w.name),
            Step::Point(w) => format!("{} one round at {}x{}", w.name, w.workers, w.depth),
            Step::App(AppKind::Oltp) => "oltp: sysbench oltp_read_write on a private MariaDB in the target's directory, by thread count".into(),
            Step::App(AppKind::Kv) => "kv: RocksDB db_bench (fillrandom, readwhilewriting, overwrite) in the target's directory".into(),
            Step::FioJob(p, _) => format!("the fio job file {}", p.display()),
            Step::Qos(row) => row.describe(),
            Step::Pts(p) => p.describe(None),
        }
    }
}

#[derive(Debug, Clone)]
pub struct Suite {
    pub name: &'static str,
    pub about: &'static str,
    pub steps: Vec<Step>,
}

impl Suite {
    /// The suite runs an application workload, which keeps its data in the directory of
    /// a file target (a raw block device will not do).
    pub fn needs_directory(&self) -> bool {
        self.steps.iter().any(|s| matches!(s, Step::App(_)))
    }

    /// One line per step, for `--list-suites`.
    pub fn describe_steps(&self) -> Vec<String> {
        // Long runs of points are summarised.
        let points = self
            .steps
            .iter()
            .filter(|s| matches!(s, Step::Point(_)))
            .count();
        let mut out: Vec<String> = self
            .steps
            .iter()
            .filter(|s| points <= 4 || !matches!(s, Step::Point(_)))
            .map(Step::describe)
            .collect();
        if points > 4 {
            out.push(format!("{points} one-round points (the matrix)"));
        }
        out
    }
}

const SWEEP: &[u32] = &[2, 4, 8, 16];

/// SNIA IOPS matrix: read/write mixes x transfer sizes.
const SNIA_MIXES: [(u32, &str); 7] = [
    (100, "100-0"),
    (95, "95-5"),
    (65, "65-35"),
    (50, "50-50"),
    (35, "35-65"),
    (5, "5-95"),
    (0, "0-100"),
];
const SNIA_SIZES: [&str; 8] = ["1m", "128k", "64k", "32k", "16k", "8k", "4k", "512"];

fn leak(s: String) -> &'static str {
    // The suite table is built once per process (`suites`): its names live as long as it.
    Box::leak(s.into_boxed_str())
}

fn point(name: String, bs: &'static str, read_pct: u32, workers: u32, depth: u32) -> Step {
    let random = crate::engine::Pattern::Random;
    Step::Point(Workload::new(
        leak(name),
        random,
        bs,
        read_pct,
        workers,
        depth,
    ))
}

/// Every suite driveprobe knows.
pub fn suites() -> &'static [Suite] {
    static SUITES: std::sync::OnceLock<Vec<Suite>> = std::sync::OnceLock::new();
    SUITES.get_or_init(build_suites)
}

fn build_suites() -> Vec<Suite> {
    let mut snia = vec![
        Step::Purge,
        Step::Precondition,
        Step::SteadyState(w::RAND_WRITE_4K.with(4, 16)),
    ];
    for bs in SNIA_SIZES {
        for (r, mix) in SNIA_MIXES {
            snia.push(point(format!("{bs}-{mix}"), bs, r, 4, 16));
        }
    }
    let mut latency = vec![
        Step::Purge,
        Step::Precondition,
        Step::SteadyState(w::RAND_WRITE_4K.with(1, 1)),
    ];
    for bs in ["512", "4k", "8k"] {
        for (r, mix) in [(100, "100-0"), (65, "65-35"), (0, "0-100")] {
            latency.push(point(format!("{bs}-{mix}-qd1"), bs, r, 1, 1));
        }
    }
    let mut curves = vec![
        Step::Fill,
        Step::Region(0.25),
        Step::RateCurve(w::CURVE_4K_READ),
        Step::RateCurve(w::CURVE_4K_WRITE),
        Step::RateCurve(w::CURVE_64K_READ),
        Step::RateCurve(w::CURVE_64K_WRITE),
    ];
    curves.extend(w::APP_MIXES.iter().cloned().map(Step::RateCurve));
    let enterprise = vec![
        Step::Purge,
        Step::Precondition,
        Step::SteadyState(w::RAND_READ_4K),
        Step::SteadyState(w::RAND_WRITE_4K),
        Step::SteadyState(w::MIX_70_30_8K),
        Step::SteadyState(w::RAND_READ_8K),
        Step::SteadyState(w::RAND_WRITE_8K),
        Step::SteadyState(w::SEQ_READ_128K),
        Step::SteadyState(w::SEQ_WRITE_128K),
        Step::Sweep(w::MIX_70_30_8K, SWEEP, SWEEP),
    ];
    let mut review = enterprise.clone();
    review.extend([Step::App(AppKind::Oltp), Step::App(AppKind::Kv)]);
    let qos = qos_suite(&super::qos::QosTable::default_table(), None)
        .expect("the default table's first class exists");
    vec![
        Suite {
            name: "enterprise",
            about: "the review protocol: purge, precondition, seven profiles to steady state at 16x16 (burst and steady figures), then the 2T2Q-16T16Q sweep of 8K 70/30",
            steps: enterprise,
        },
        Suite {
            name: "curves",
            about: "vdbench-style: fill, then on the first 25%, latency against load (max rate, then 10%..120% of it) for 4K/64K read and write and our SQL, Oracle and VDI approximations",
            steps: curves,
        },
        Suite {
            name: "snia-iops",
            about: "the SNIA IOPS matrix: 7 read/write mixes x 8 sizes (1M..512B), after steady state on 4K random write",
            steps: snia,
        },
        Suite {
            name: "latency",
            about: "the SNIA latency test at 1 worker x QD1: 512B, 4K, 8K x 100/0, 65/35, 0/100",
            steps: latency,
        },
        Suite {
            name: "wsat",
            about: "write saturation: 4K random write from purged until 4x the region is written (or the scale's time limit)",
            steps: vec![Step::Purge, Step::WriteSaturation(w::RAND_WRITE_4K.with(4, 16))],
        },
        Suite {
            name: "oltp",
            about: "sysbench OLTP read/write on a private MariaDB with its datadir beside the file target: TPS, average and 99th-percentile latency at 2..32 threads (quick: 2 and 8)",
            steps: vec![Step::App(AppKind::Oltp)],
        },
        Suite {
            name: "kv",
            about: "RocksDB db_bench with its database beside the file target: fillrandom, then readwhilewriting and overwrite, latency interval by interval",
            steps: vec![Step::App(AppKind::Kv)],
        },
        Suite {
            name: "review",
            about: "the whole review: enterprise, then oltp and kv (needs a file target)",
            steps: review,
        },
        Suite {
            name: "jesd219",
            about: "the JEDEC JESD219 enterprise endurance workload (its size mix and 50/5:30/15:20/80 skew), to steady state",
            steps: vec![
                Step::Purge,
                Step::Precondition,
                Step::SteadyState(w::JESD219),
            ],
        },
        qos,
        Suite {
            name: "throughput",
            about: "SNIA PTS throughput: for 1M, then 128K, purge, precondition, sequential write and read rounds until the write MB/s is steady",
            steps: super::pts::suite_steps("throughput"),
        },
        Suite {
            name: "xsr",
            about: "SNIA PTS cross-stimulus recovery: sequential 128K writes, random 8K writes, sequential 128K again; throughput over time and the time to settle after each change",
            steps: super::pts::suite_steps("xsr"),
        },
        Suite {
            name: "hir",
            about: "SNIA PTS host idle recovery: 4K random write to steady state, then write bursts with idle periods of increasing length, each followed by a return to baseline",
            steps: super::pts::suite_steps("hir"),
        },
        Suite {
            name: "dirth",
            about: "SNIA PTS demand intensity / response time histogram: the threads x queue depth grid of 8K 65/35 random, repeated until its highest-IOPS point is steady, the knee, and response-time histograms at the min, mid and max IOPS points",
            steps: super::pts::suite_steps("dirth"),
        },
    ]
}

/// The QoS qualification suite for one class of a target table (the first when `class`
/// is None): workload-independent preconditioning (reads then hit written blocks), then
/// each row's search.
pub fn qos_suite(
    table: &super::qos::QosTable,
    class: Option<&str>,
) -> Result<Suite, super::qos::QosError> {
    let c = table.class(class)?;
    let mut steps = vec![Step::Precondition];
    steps.extend(c.rows.iter().cloned().map(Step::Qos));
    Ok(Suite {
        name: "qos",
        about: "latency QoS qualification: per row of a target table (default: driveprobe's datacenter class; --qos-targets, --qos-class), the highest open-loop IOPS at which every percentile limit holds, pass or fail",
        steps,
    })
}

/// A one-step suite that runs a user's fio job file on the target (`driveprobe bench
/// --fio-job FILE`): its jobs are ingested as points, like built-in workloads.
pub fn fio_job_suite(job_file: &std::path::Path, time_limit: Duration) -> Suite {
    Suite {
        name: "fio-job",
        about: "a user's fio job file on the target",
        steps: vec![Step::FioJob(job_file.to_path_buf(), time_limit)],
    }
}

pub fn find(name: &str) -> Result<Suite, SuiteError> {
    suites()
        .iter()
        .find(|s| s.name == name)
        .cloned()
        .ok_or_else(|| SuiteError::Unknown(name.to_string()))
}

/// What the runner tells its caller as it goes (progress bars, logs).
pub trait Observer {
    /// A phase begins; `max_rounds` is how many rounds it may take at most.
    fn phase(&mut self, index: usize, total: usize, what: &str, max_rounds: u32);
    /// A round ended; `steady` has the current window's figures in steady-state phases.
    fn round(&mut self, round: &Round, steady: Option<&steady::Check>);
    /// What an application workload is doing now (`prepare`, `8 threads`...).
    fn note(&mut self, _what: &str) {}
}

/// An observer that says nothing.
pub struct Quiet;
impl Observer for Quiet {
    fn phase(&mut self, _: usize, _: usize, _: &str, _: u32) {}
    fn round(&mut self, _: &Round, _: Option<&steady::Check>) {}
}

/// Everything a suite run needs besides the target.
#[derive(Debug, Clone)]
pub struct SuiteOptions {
    pub scale: Scale,
    pub drive: Option<Identity>,
    pub rated: Option<Rated>,
    /// Seed of the generators (runs with the same seed issue the same I/O).
    pub seed: Option<u64>,
    /// Why the run was stopped, recorded by whoever stopped it (empty: the signal
    /// handler, which only sets the control's flag).
    pub stop: super::bound::StopCell,
    /// Significant digits to keep the document's latency histograms to
    /// ([`super::hist::KEPT_DIGITS`]; None: the engine's 3). The figures stay the engine's.
    pub hist_digits: Option<u8>,
    /// The upper bound of the run's writes it was admitted with (the daemon's scheduled
    /// runs): the run is held to its hard safety limit ([`WriteBound::safety_limit`],
    /// `RunControl::set_write_limit`): no write is issued past it, and a run that reaches
    /// it is stopped with [`StopReason::SafetyLimit`](super::bound::StopReason).
    pub bound: Option<super::bound::WriteBound>,
}

impl SuiteOptions {
    /// Options at `scale` with nothing else given: no drive identity or rating, a random
    /// seed, no recorded stop, the engine's histogram digits.
    pub fn at(scale: Scale) -> SuiteOptions {
        SuiteOptions {
            scale,
            drive: None,
            rated: None,
            seed: None,
            stop: Default::default(),
            hist_digits: None,
            bound: None,
        }
    }
}

fn now_unix() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// `engine::run`, its error named by suite and phase.
pub(super) fn run_engine(
    suite: &Suite,
    target: &Target,
    phase: &str,
    job: &engine::Job,
    control: &RunControl,
    on_interval: &mut dyn FnMut(&engine::IntervalSummary),
) -> Result<RunResult, SuiteError> {
    run_engine_observed(suite, target, phase, job, control, &mut |i, _| {
        on_interval(i)
    })
}

/// [`run_engine`], with each interval's exact statistics (its histograms) handed on too.
pub(crate) fn run_engine_observed(
    suite: &Suite,
    target: &Target,
    phase: &str,
    job: &engine::Job,
    control: &RunControl,
    on_interval: &mut dyn FnMut(&engine::IntervalSummary, &engine::IntervalDetail),
) -> Result<RunResult, SuiteError> {
    let r = engine::run_observed(job, target, control, on_interval).map_err(|e| {
        SuiteError::Engine {
            suite: suite.name.to_string(),
            phase: phase.to_string(),
            source: e,
        }
    })?;
    // Figures measured while I/Os failed (a failing or removed drive) are not the drive's:
    // the phase fails, so the document is incomplete and the run is not passed.
    if r.errors.count > 0 {
        return Err(SuiteError::Io {
            suite: suite.name.to_string(),
            phase: phase.to_string(),
            count: r.errors.count,
            first: r
                .errors
                .first
                .first()
                .map(|e| format!("{} at byte {}: {}", e.op, e.offset, e.message))
                .unwrap_or_else(|| "short transfer".into()),
        });
    }
    Ok(r)
}

pub(super) struct Runner<'a> {
    pub(super) suite: &'a Suite,
    pub(super) target: &'a Target,
    pub(super) opts: &'a SuiteOptions,
    pub(super) control: &'a RunControl,
    pub(super) observer: &'a mut dyn Observer,
    pub(super) region: RegionSpec,
    pub(super) engine_name: Option<String>,
}

impl Runner<'_> {
    pub(super) fn job(
        &self,
        wl: &Workload,
        phase: &str,
        stop: Stop,
        ramp: Duration,
    ) -> Result<engine::Job, SuiteError> {
        let mut spec = wl.spec().map_err(|e| self.job_err(phase, e))?;
        spec.region = self.region;
        spec.stop = stop;
        spec.ramp = ramp;
        spec.interval = self.opts.scale.round;
        if let Some(seed) = self.opts.seed {
            spec.seed = seed;
        }
        // Transfer sizes below the target's O_DIRECT alignment cannot be issued: drop
        // them from a mix (JESD219's 512 B entries on a 4Kn drive), keep the rest.
        let align = self.target.align() as u32;
        if align > 512 {
            let kept: Vec<(u32, u32)> = spec
                .sizes
                .entries()
                .iter()
                .copied()
                .filter(|&(s, _)| s % align == 0)
                .collect();
            if !kept.is_empty() && kept.len() < spec.sizes.entries().len() {
                spec.sizes =
                    crate::engine::SizeMix::new(kept).map_err(|e| self.job_err(phase, e))?;
            }
        }
        spec.validate().map_err(|e| self.job_err(phase, e))
    }

    pub(super) fn job_err(&self, phase: &str, e: JobError) -> SuiteError {
        SuiteError::Job {
            suite: self.suite.name.to_string(),
            phase: phase.to_string(),
            source: e,
        }
    }

    pub(super) fn run(
        &mut self,
        job: &engine::Job,
        phase: &str,
        control: &RunControl,
        on_interval: &mut dyn FnMut(&engine::IntervalSummary),
    ) -> Result<RunResult, SuiteError> {
        let r = run_engine(self.suite, self.target, phase, job, control, on_interval)?;
        self.engine_name
            .get_or_insert_with(|| r.engine.name().to_string());
        Ok(r)
    }

    fn resolved_region(&self) -> Region {
        let probe = engine::JobSpec {
            region: self.region,
            sizes: crate::engine::SizeMix::single(self.target.align().max(512) as u32)
                .unwrap_or_else(|_| crate::engine::SizeMix::single(4096).expect("4k is valid")),
            ..engine::JobSpec::default()
        }
        .validate()
        .expect("a probe job is valid");
        probe.resolve_on(self.target).unwrap_or(Region {
            start: 0,
            len: self.target.size(),
        })
    }

    /// A steady-state phase; None when it was stopped before its first whole round (a
    /// stop in its first interval, as at a write limit on a fast target): a phase
    /// without a round has no figures, and would put NaN (null) in the document.
    fn steady_state(&mut self, wl: &Workload) -> Result<Option<Phase>, SuiteError> {
        let scale = self.opts.scale;
        let rule = scale.rule;
        let job = self.job(
            wl,
            wl.name,
            // Room for the watch rounds after a steady state reached at the last round.
            Stop::Time(scale.round * (rule.max_rounds + steady::WATCH_ROUNDS) as u32),
            Duration::ZERO,
        )?;
        let phase_control = self.control.child();
        let mut rounds: Vec<Round> = Vec::new();
        let mut steady_round = None;
        {
            let observer = &mut *self.observer;
            let pc = phase_control.clone();
            let mut on_interval = |i: &engine::IntervalSummary, d: &engine::IntervalDetail| {
                let r = Round::from_interval_detail(rounds.len() as u32, i.end_seconds, i, d);
                rounds.push(r);
                let series: Vec<f64> = rounds.iter().map(|r| r.iops).collect();
                let n = series.len();
                let check =
                    (n >= rule.window).then(|| steady::check(&series[n - rule.window..], &rule));
                observer.round(rounds.last().expect("just pushed"), check.as_ref());
                if check.is_some_and(|c| c.steady) && steady_round.is_none() {
                    steady_round = Some(n as u32 - 1);
                }
                // Steady: a few more rounds to watch it hold; never steady: the limit.
                let done = match steady_round {
                    Some(s) => n >= s as usize + 1 + steady::WATCH_ROUNDS,
                    None => n >= rule.max_rounds,
                };
                if done {
                    pc.stop();
                }
            };
            let target = self.target;
            let r = run_engine_observed(
                self.suite,
                target,
                wl.name,
                &job,
                &phase_control,
                &mut on_interval,
            )?;
            self.engine_name
                .get_or_insert_with(|| r.engine.name().to_string());
        }
        // A round cut short by the stop is not a whole round: drop it.
        rounds.truncate(match steady_round {
            Some(s) => s as usize + 1 + steady::WATCH_ROUNDS,
            None => rule.max_rounds,
        });
        if let Some(last) = rounds.last() {
            let want = scale.round.as_secs_f64() * rounds.len() as f64;
            if (last.end_seconds - want).abs() > scale.round.as_secs_f64() * 0.5 {
                rounds.pop();
            }
        }
        if rounds.is_empty() {
            return Ok(None);
        }
        // The window ends at the steady round (the watch rounds follow it), else at the
        // last round.
        let n = match steady_round {
            Some(s) => (s as usize + 1).min(rounds.len()),
            None => rounds.len(),
        };
        let window = rule.window.min(n);
        let iops: Vec<f64> = rounds.iter().map(|r| r.iops).collect();
        let check = steady::check(&iops[n - window..n], &rule);
        let steady_figures = Round::average(&rounds[n - window..n]);
        let watch = &iops[n..];
        Ok(Some(Phase::SteadyState {
            workload: wl.desc(),
            steady: SteadyState::from_check(&rule, &check, steady_round, watch),
            burst: burst_round(&rounds).cloned().unwrap_or_default(),
            steady_figures,
            rounds,
        }))
    }

    /// One measured round of `wl` (after the scale's ramp), optionally rate limited.
    pub(super) fn one_round(
        &mut self,
        wl: &Workload,
        index: u32,
        rate: Option<f64>,
    ) -> Result<Round, SuiteError> {
        let scale = self.opts.scale;
        let mut job = self.job(wl, wl.name, Stop::Time(scale.round), scale.ramp)?;
        if let Some(iops) = rate {
            let mut spec = job.to_spec();
            spec.rate = Some(RateLimit {
                iops: iops.max(1.0),
                arrival: Arrival::Linear,
            });
            job = spec.validate().map_err(|e| self.job_err(wl.name, e))?;
        }
        let control = self.control.child();
        let r = self.run(&job, wl.name, &control, &mut |_| {})?;
        let round = Round::from_result(index, &r);
        self.observer.round(&round, None);
        Ok(round)
    }

    fn sweep(&mut self, wl: &Workload, ws: &[u32], ds: &[u32]) -> Result<Phase, SuiteError> {
        let mut points = Vec::new();
        for &workers in ws {
            for &depth in ds {
                if self.control.is_stopped() {
                    break;
                }
                let round = self.one_round(&wl.with(workers, depth), points.len() as u32, None)?;
                points.push(SweepPoint {
                    workers,
                    depth,
                    round,
                });
            }
        }
        Ok(Phase::Sweep {
            workload: wl.desc(),
            points,
        })
    }

    fn rate_curve(&mut self, wl: &Workload) -> Result<Phase, SuiteError> {
        let max = self.one_round(wl, 0, None)?;
        let max_iops = max.iops;
        let mut points = Vec::new();
        let fractions = (1..=12).map(|i| i as f64 / 10.0);
        for (i, f) in fractions.enumerate() {
            if self.control.is_stopped() {
                break;
            }
            let target_iops = max_iops * f;
            let round = self.one_round(wl, i as u32 + 1, Some(target_iops))?;
            points.push(CurvePoint {
                fraction: f,
                target_iops,
                round,
            });
        }
        Ok(Phase::RateCurve {
            workload: wl.desc(),
            max_iops,
            points,
        })
    }

    fn write_saturation(&mut self, wl: &Workload) -> Result<Phase, SuiteError> {
        let scale = self.opts.scale;
        let region = self.resolved_region();
        let goal = region.len.saturating_mul(4);
        let job = self.job(
            wl,
            wl.name,
            Stop::Time(scale.round * scale.wsat_max_rounds),
            Duration::ZERO,
        )?;
        let control = self.control.child();
        let mut rounds = Vec::new();
        let mut bytes_written = Vec::new();
        let mut total = 0u64;
        {
            let observer = &mut *self.observer;
            let c = control.clone();
            let mut on_interval = |i: &engine::IntervalSummary, d: &engine::IntervalDetail| {
                total += i.write.bytes;
                let r = Round::from_interval_detail(rounds.len() as u32, i.end_seconds, i, d);
                observer.round(&r, None);
                rounds.push(r);
                bytes_written.push(total);
                if total >= goal {
                    c.stop();
                }
            };
            let r = run_engine_observed(
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
        Ok(Phase::WriteSaturation {
            workload: wl.desc(),
            rounds,
            bytes_written,
        })
    }

    fn purge_err(&self, phase: &str, e: purge::PurgeError) -> SuiteError {
        SuiteError::Purge {
            suite: self.suite.name.to_string(),
            phase: phase.to_string(),
            source: e,
        }
    }

    /// The directory an application workload keeps its data in: the file target's.
    fn app_dir(&self, app: &'static str) -> Result<std::path::PathBuf, SuiteError> {
        match self.target.kind() {
            crate::target::TargetKind::File => {
                let p = self.target.path();
                Ok(match p.parent() {
                    Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
                    _ => std::path::PathBuf::from("."),
                })
            }
            crate::target::TargetKind::BlockDevice { .. } => Err(SuiteError::NeedsDirectory {
                suite: self.suite.name.to_string(),
                app,
                target: self.target.path().display().to_string(),
            }),
        }
    }

    fn app(&mut self, kind: AppKind) -> Result<Phase, SuiteError> {
        let dir = self.app_dir(kind.name())?;
        let suite = self.suite.name.to_string();
        let scale = self.opts.scale.name;
        let points = match kind {
            AppKind::Oltp => {
                let o = crate::app::oltp::OltpOptions::for_scale(scale);
                let observer = &mut *self.observer;
                crate::app::oltp::run_observed(&dir, &o, self.control, &mut |e| observer.note(e))
                    .map_err(|source| SuiteError::Oltp { suite, source })?
            }
            AppKind::Kv => {
                let o = crate::app::kv::KvOptions::for_scale(scale);
                crate::app::kv::run(&dir, &o, self.control)
                    .map_err(|source| SuiteError::Kv { suite, source })?
            }
        };
        self.engine_name.get_or_insert_with(|| {
            match kind {
                AppKind::Oltp => "sysbench+mariadb",
                AppKind::Kv => "db_bench",
            }
            .to_string()
        });
        Ok(Phase::App {
            app: kind.name().to_string(),
            points,
        })
    }

    /// One QoS row: the closed-loop maximum, then the bisection on the open-loop rate.
    fn qos(&mut self, row: &super::qos::QosRow) -> Result<Phase, SuiteError> {
        use super::qos;
        let scale = self.opts.scale;
        let ios = qos::ios_per_probe(row, scale.name)
            .map_err(|e| SuiteError::Qos(self.suite.name.to_string(), e))?;
        let wl = row.workload();
        let max = self.one_round(&wl, 0, None)?;
        let steps = qos::bisect_steps(scale.name);
        let round_s = scale.round.as_secs_f64();
        self.observer.note(&format!(
            "{}: {} I/Os a probe, about {:.0} s for up to {} probes from {:.0} IOPS",
            row.name,
            ios,
            qos::estimate_seconds(ios, max.iops, steps, round_s),
            steps + 1,
            max.iops
        ));
        let mut index = 1;
        let probes = qos::search(max.iops, steps, &mut |rate| {
            if self.control.is_stopped() {
                return Ok(None);
            }
            let secs = qos::probe_seconds(ios, rate, round_s);
            let mut spec = self
                .job(
                    &wl,
                    wl.name,
                    Stop::Time(Duration::from_secs_f64(secs)),
                    scale.ramp,
                )?
                .to_spec();
            spec.rate = Some(RateLimit {
                iops: rate.max(1.0),
                arrival: Arrival::Linear,
            });
            let job = spec.validate().map_err(|e| self.job_err(wl.name, e))?;
            let control = self.control.child();
            let r = self.run(&job, wl.name, &control, &mut |_| {})?;
            if control.is_stopped() {
                return Ok(None);
            }
            let round = Round::from_result(index, &r);
            index += 1;
            self.observer.round(&round, None);
            // The engine's own figures, from its statistics of both directions.
            let mut all = r.read_stats.clone();
            all.merge(&r.write_stats);
            let measured: Vec<u64> = row
                .limits
                .iter()
                .map(|l| all.percentile_ns(l.percentile))
                .collect();
            Ok(Some(qos::judge(row, rate, ios, round, &measured)))
        })?;
        Ok(Phase::Qos {
            workload: wl.desc(),
            qos: qos::conclude(row, ios, max.iops, probes),
        })
    }

    fn fio_job(
        &mut self,
        job: &std::path::Path,
        limit: Duration,
    ) -> Result<Vec<Phase>, SuiteError> {
        // fio opens the target itself: through the object the gate checked and this run
        // holds open, never by its path again (a folder on the path swapped for a link
        // meanwhile must not steer fio's writes).
        let via = self.target.opened_path();
        let run =
            crate::fio_job::run_detailed(job, &via, limit, self.control).map_err(|source| {
                SuiteError::FioJob {
                    suite: self.suite.name.to_string(),
                    source,
                }
            })?;
        // fio's writes are counted under the control by `run_detailed` (what fio reports
        // having written, finished or stopped), so a caller accounting wear sees them.
        self.engine_name.get_or_insert_with(|| "fio".to_string());
        Ok(run
            .results
            .into_iter()
            .map(|(workload, round)| {
                self.observer.round(&round, None);
                Phase::Point { workload, round }
            })
            .collect())
    }

    fn step(&mut self, step: &Step) -> Result<Option<Phase>, SuiteError> {
        Ok(Some(match step {
            Step::Purge => {
                let region = self.resolved_region();
                // An overwrite (where nothing better erases) keeps to the write limit; a
                // sanitize, once started, is not cut short by a stop.
                let o = purge::purge_with(self.target, region, &self.control.limit_only())
                    .map_err(|e| self.purge_err("purge", e))?;
                Phase::Purge {
                    method: o.method.name().to_string(),
                    seconds: o.seconds,
                }
            }
            Step::Precondition if self.opts.scale.precondition_passes == 0 => return Ok(None),
            Step::Precondition => {
                let region = self.resolved_region();
                let o = purge::precondition(
                    self.target,
                    region,
                    self.opts.scale.precondition_passes,
                    self.control,
                )
                .map_err(|e| self.purge_err("precondition", e))?;
                Phase::Precondition {
                    passes: o.passes,
                    bytes: o.bytes,
                    seconds: o.seconds,
                }
            }
            Step::Fill => {
                let o = purge::fill(self.target, self.control)
                    .map_err(|e| self.purge_err("fill", e))?;
                Phase::Fill {
                    bytes: o.bytes,
                    seconds: o.seconds,
                }
            }
            Step::Region(f) => {
                self.region = RegionSpec::Percent {
                    start: 0.0,
                    end: *f,
                };
                return Ok(None);
            }
            Step::SteadyState(wl) => match self.steady_state(wl)? {
                Some(p) => p,
                None => return Ok(None),
            },
            Step::Sweep(wl, ws, ds) => self.sweep(wl, ws, ds)?,
            Step::RateCurve(wl) => self.rate_curve(wl)?,
            Step::WriteSaturation(wl) => self.write_saturation(wl)?,
            Step::Point(wl) => Phase::Point {
                workload: wl.desc(),
                round: self.one_round(wl, 0, None)?,
            },
            Step::App(kind) => self.app(*kind)?,
            Step::Qos(row) => self.qos(row)?,
            Step::Pts(p) => self.pts(p)?,
            // Several phases: handled by `run_suite`.
            Step::FioJob(..) => return Ok(None),
        }))
    }
}

/// The most of an error's text kept in a document's `incomplete_reason`.
pub const REASON_BYTES: usize = 4096;

/// Why a run that ended this way did not finish, if it did not: the reason its stopper
/// recorded when it was stopped (an error after a stop is the stop's doing: an
/// application cut short), else its error (bounded: an error may carry a program's
/// output), else a signal (the only stopper that records none). None: it finished.
pub fn stop_reason(
    error: &Option<SuiteError>,
    control: &RunControl,
    stop: &super::bound::StopCell,
) -> Option<super::bound::StopReason> {
    use super::bound::StopReason;
    if control.is_stopped() {
        if let Some(why) = stop.get() {
            return Some(why);
        }
    }
    if let Some(e) = error {
        return Some(StopReason::Error {
            message: crate::process::clip(&e.to_string(), REASON_BYTES),
        });
    }
    control
        .is_stopped()
        .then(|| stop.get().unwrap_or(StopReason::Signal))
}

/// Records a run that reached its hard safety limit as a safety stop (unless another
/// reason stopped it first), with the bytes it wrote under the limit: every write it
/// issued, ramps included, and what its programs were counted writing.
fn record_limit_stop(control: &RunControl, opts: &SuiteOptions) {
    if let (true, Some(b)) = (control.write_limit_reached(), opts.bound) {
        opts.stop.set(super::bound::StopReason::SafetyLimit {
            written_bytes: control.limit_used_bytes(),
            bound_bytes: b.bytes,
            limit_bytes: b.safety_limit(),
        });
    }
}

/// Runs `suite` on `target`. Always returns a result document: when a phase fails or
/// the run is stopped, the document holds what was done and says why it is incomplete;
/// the error, if any, comes with it.
pub fn run_suite(
    suite: &Suite,
    target: &Target,
    opts: &SuiteOptions,
    control: &RunControl,
    observer: &mut dyn Observer,
) -> (SuiteResult, Option<SuiteError>) {
    let started = now_unix();
    let mut result = SuiteResult {
        schema_version: SCHEMA_VERSION,
        driveprobe_version: env!("CARGO_PKG_VERSION").to_string(),
        suite: suite.name.to_string(),
        scale: opts.scale.name.to_string(),
        target: target.path().display().to_string(),
        target_bytes: target.size(),
        drive: opts.drive.clone(),
        engine: String::new(),
        started_unix_seconds: started,
        ended_unix_seconds: started,
        complete: false,
        incomplete_reason: None,
        rated: opts.rated.clone(),
        phases: Vec::new(),
    };
    if !target.writable() {
        let e = SuiteError::ReadOnly(suite.name.to_string());
        result.incomplete_reason = Some(e.to_string());
        return (result, Some(e));
    }
    let mut runner = Runner {
        suite,
        target,
        opts,
        control,
        observer,
        region: RegionSpec::Whole,
        engine_name: None,
    };
    // An application step on a raw device would fail only when it is reached (after
    // hours of `enterprise` in `review`): refuse at once.
    for step in &suite.steps {
        if let Step::App(kind) = step {
            if let Err(e) = runner.app_dir(kind.name()) {
                result.incomplete_reason = Some(e.to_string());
                return (result, Some(e));
            }
        }
    }
    // A QoS row the scale cannot support would fail only when reached: refuse at once.
    for step in &suite.steps {
        if let Step::Qos(row) = step {
            if let Err(e) = super::qos::ios_per_probe(row, opts.scale.name) {
                let e = SuiteError::Qos(suite.name.to_string(), e);
                result.incomplete_reason = Some(e.to_string());
                return (result, Some(e));
            }
        }
    }
    if let Some(b) = opts.bound {
        control.set_write_limit(b.safety_limit());
    }
    let mut error = None;
    let total = suite.steps.len();
    for (i, step) in suite.steps.iter().enumerate() {
        if control.is_stopped() {
            break;
        }
        let max_rounds = match step {
            Step::SteadyState(_) => (opts.scale.rule.max_rounds + steady::WATCH_ROUNDS) as u32,
            Step::Sweep(_, ws, ds) => (ws.len() * ds.len()) as u32,
            Step::RateCurve(_) => 13,
            Step::WriteSaturation(_) => opts.scale.wsat_max_rounds,
            Step::Point(_) => 1,
            Step::FioJob(..) => 1,
            Step::Qos(_) => 2 + super::qos::bisect_steps(opts.scale.name),
            Step::Pts(p) => p.max_rounds(&opts.scale),
            _ => 0,
        };
        runner.observer.phase(
            i,
            total,
            &match step {
                Step::Pts(p) => p.describe(Some(&opts.scale)),
                _ => step.describe(),
            },
            max_rounds,
        );
        let stepped = match step {
            Step::FioJob(job, limit) => runner.fio_job(job, *limit).map(|ps| {
                result.phases.extend(ps);
                None
            }),
            _ => runner.step(step),
        };
        match stepped {
            Ok(Some(p)) => result.phases.push(p),
            Ok(None) => {}
            Err(e) => {
                error = Some(e);
                break;
            }
        }
    }
    result.engine = runner.engine_name.unwrap_or_default();
    if let Some(digits) = opts.hist_digits {
        if let Err(e) = result.coarsen_hists(digits) {
            error.get_or_insert(SuiteError::Hist(suite.name.to_string(), e));
        }
    }
    result.ended_unix_seconds = now_unix();
    record_limit_stop(control, opts);
    if let Some(why) = stop_reason(&error, control, &opts.stop) {
        result.incomplete_reason = Some(why.describe());
    } else {
        result.complete = true;
    }
    (result, error)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_suite_is_listed_with_steps() {
        let names: Vec<&str> = suites().iter().map(|s| s.name).collect();
        assert_eq!(
            names,
            [
                "enterprise",
                "curves",
                "snia-iops",
                "latency",
                "wsat",
                "oltp",
                "kv",
                "review",
                "jesd219",
                "qos",
                "throughput",
                "xsr",
                "hir",
                "dirth"
            ]
        );
        for s in suites() {
            assert!(!s.describe_steps().is_empty());
        }
        let snia = find("snia-iops").unwrap();
        assert_eq!(
            snia.steps
                .iter()
                .filter(|s| matches!(s, Step::Point(_)))
                .count(),
            56
        );
        let curves = find("curves").unwrap();
        assert_eq!(
            curves
                .steps
                .iter()
                .filter(|s| matches!(s, Step::RateCurve(_)))
                .count(),
            16
        );
        assert!(find("nope").is_err());
        let review = find("review").unwrap();
        let enterprise = find("enterprise").unwrap();
        assert_eq!(review.steps[..enterprise.steps.len()], enterprise.steps[..]);
        assert_eq!(
            review.steps[enterprise.steps.len()..],
            [Step::App(AppKind::Oltp), Step::App(AppKind::Kv)]
        );
        assert_eq!(find("oltp").unwrap().steps, [Step::App(AppKind::Oltp)]);
        assert!(Scale::named("huge").is_err());
    }

    #[test]
    fn the_stop_reason_is_the_recorded_one_then_the_error_then_a_signal() {
        use crate::bound::{StopCell, StopReason};
        let control = RunControl::new();
        let cell = StopCell::default();
        assert_eq!(stop_reason(&None, &control, &cell), None, "it finished");
        let err = Some(SuiteError::Scale("x".into()));
        assert!(matches!(
            stop_reason(&err, &control, &cell),
            Some(StopReason::Error { message }) if message.contains("'x' is not a scale")
        ));
        control.stop();
        // Stopped with no reason recorded: only the signal handler stops that way.
        assert_eq!(
            stop_reason(&None, &control, &cell),
            Some(StopReason::Signal)
        );
        // A recorded reason wins over an error that the stop caused.
        let t = StopReason::MaxDuration { limit_seconds: 3 };
        cell.set(t.clone());
        assert_eq!(stop_reason(&err, &control, &cell), Some(t));
    }
}
