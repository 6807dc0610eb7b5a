//! The workload engine: takes a validated [`Job`] and an opened [`Target`], runs it on
//! dedicated worker threads (one io_uring ring each, or psync), and returns interval
//! deltas and totals. It knows nothing of config files, the daemon or Prometheus.

pub mod allowance;
mod cpu;
pub mod gen;
pub mod job;
pub mod stats;
pub mod verify;
mod worker;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::Arc;

use serde::Serialize;

pub use allowance::WriteAllowance;
pub use job::{
    Arrival, BackendChoice, CpuPolicy, Distribution, Job, JobError, JobSpec, Pattern, RateLimit,
    RegionSpec, SizeMix, Stop, Trim,
};
pub use stats::{device_errno, DirStats, DirSummary, IntervalDir, IntervalSummary, LatencySummary};
pub use verify::VerifySummary;
pub use worker::{errno_name, IoErrorRecord};
/// CLOCK_MONOTONIC in ns (the clock of `Uring::wait_until` and the canary's loop), and
/// the run delay in a line of `/proc/<pid>/schedstat`.
pub use worker::{now_ns, run_delay_of_schedstat};

use crate::sys::uring::UringFeatures;
use crate::target::{Region, Target, TargetError};
use gen::{GenError, OpGen};
use verify::VerifyState;
use worker::{IntervalStats, Msg, Shared, SlotTime, StartGate, WorkerOutcome, WorkerSetup};

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("{0}: the job writes but the target was opened read-only (writes need a write permit from the safety gate)")]
    ReadOnlyTarget(std::path::PathBuf),
    #[error(transparent)]
    Target(#[from] TargetError),
    #[error(transparent)]
    Gen(#[from] GenError),
    #[error("io_uring is not available here ({0}): use --ioengine psync")]
    UringUnavailable(#[source] UringUnavailable),
    #[error("verify mode needs every block size to be a multiple of the smallest ({0} bytes)")]
    VerifySizes(u32),
    #[error("verify mode: each worker's share of the region ({part} bytes) must hold twice its queue depth of the largest blocks ({need} bytes): use fewer workers, a lower depth or a bigger region")]
    VerifyRegion { part: u64, need: u64 },
    #[error(
        "verify mode tracks at most 2^31 blocks per worker ({0} asked): verify a smaller region"
    )]
    VerifyTooLarge(u64),
    #[error("the I/O buffers would need {0} bytes (workers x depth x largest block size): lower --numjobs, --iodepth or --bs")]
    BufferMemory(u64),
    #[error("could not start a worker thread: {0}")]
    Spawn(std::io::Error),
    #[error("the run failed: {0}")]
    Failed(String),
}

/// Most memory the I/O buffers of one run may take.
pub const MAX_BUFFER_BYTES: u64 = 8 << 30;

/// Which backend ran the job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Backend {
    IoUring,
    Psync,
}

impl Backend {
    pub fn name(self) -> &'static str {
        match self {
            Backend::IoUring => "io_uring",
            Backend::Psync => "psync",
        }
    }
}

/// Why io_uring cannot be used here: the error of setting up a ring, read.
#[derive(Debug, thiserror::Error)]
pub enum UringUnavailable {
    /// ENOSYS.
    #[error("the kernel has no io_uring")]
    NotInKernel(#[source] std::io::Error),
    /// EPERM.
    #[error("io_uring is disabled (kernel.io_uring_disabled or seccomp)")]
    Disabled(#[source] std::io::Error),
    #[error(transparent)]
    Setup(std::io::Error),
}

/// Tells whether io_uring can be used here; the error says why not.
pub fn probe_io_uring() -> Result<(), UringUnavailable> {
    match io_uring::IoUring::new(2) {
        Ok(_) => Ok(()),
        Err(e) => Err(match e.raw_os_error() {
            Some(libc::ENOSYS) => UringUnavailable::NotInKernel(e),
            Some(libc::EPERM) => UringUnavailable::Disabled(e),
            _ => UringUnavailable::Setup(e),
        }),
    }
}

/// Lets the caller stop a run early (Ctrl-C, daemon shutdown).
#[derive(Debug, Clone, Default)]
pub struct RunControl {
    stop: Arc<AtomicBool>,
    parent: Option<Arc<AtomicBool>>,
    /// Bytes written by every run under this control (children share it), counted by the
    /// collector once per interval: what a caller accounting wear reads while it runs.
    written: Arc<AtomicU64>,
    /// The hard write limit of every run under this control (children share it), taken
    /// from before each write is issued (`allowance`).
    allowance: Arc<WriteAllowance>,
    /// Do not keep the list of intervals in the result (a caller that observes every
    /// interval itself and runs for hours: the daemon's canaries).
    discard_intervals: bool,
}

impl RunControl {
    pub fn new() -> Self {
        Self::default()
    }
    /// A control for one part of a larger run: stopping it stops only the part;
    /// stopping `self` stops the part too.
    pub fn child(&self) -> RunControl {
        RunControl {
            stop: Arc::new(AtomicBool::new(false)),
            parent: Some(self.stop.clone()),
            written: self.written.clone(),
            allowance: self.allowance.clone(),
            discard_intervals: self.discard_intervals,
        }
    }
    /// A control that shares only the written count and the write limit with `self`, not
    /// its stop: for a part that must not be cut short by a stop (a drive's sanitize,
    /// which goes on inside the drive) but must keep to the limit.
    pub fn limit_only(&self) -> RunControl {
        RunControl {
            stop: Arc::new(AtomicBool::new(false)),
            parent: None,
            written: self.written.clone(),
            allowance: self.allowance.clone(),
            discard_intervals: self.discard_intervals,
        }
    }
    /// Holds every run under this control (and its children) to `limit` bytes written:
    /// the engine takes each write's bytes from this limit before it issues the write, so
    /// none is issued past it ([`allowance`]); the run stops when the limit has no room
    /// for its next write, and [`RunControl::write_limit_reached`] is then true.
    pub fn set_write_limit(&self, limit: u64) {
        self.allowance.set_limit(limit);
    }
    /// The write limit, if one was set.
    pub fn write_limit(&self) -> Option<u64> {
        self.allowance.limit()
    }
    /// True once a write found no room under the limit, or writes counted from outside
    /// went past it: the run is stopped.
    pub fn write_limit_reached(&self) -> bool {
        self.allowance.reached()
    }
    /// Bytes taken from the write limit: every write issued under this control (ramps
    /// included, unlike [`RunControl::written_bytes`]), the room the engine's workers
    /// hold while they run, and what was counted from outside. Never more than the
    /// limit but for writes counted from outside.
    pub fn limit_used_bytes(&self) -> u64 {
        self.allowance.used()
    }
    /// Takes room for `bytes` of writes this process is about to issue outside the
    /// engine (a purge's overwrite), from the write limit; false when they do not fit
    /// (the limit is then reached and the run stopped). Count them with
    /// [`RunControl::add_reserved_written`] once written.
    pub fn reserve_write(&self, bytes: u64) -> bool {
        bytes == 0 || self.allowance.reserve(bytes, bytes) == bytes
    }
    /// Counts bytes written whose room was taken by [`RunControl::reserve_write`].
    pub fn add_reserved_written(&self, bytes: u64) {
        self.written.fetch_add(bytes, Ordering::Relaxed);
    }
    /// A control whose runs keep no interval list in their result (`on_interval` still
    /// sees every interval): memory stays flat however long the run. Nor a latency
    /// histogram of the whole run: the result's totals have the counts, mean, minimum and
    /// maximum, and no percentiles (the minimum stands in for them).
    pub fn discarding_intervals(mut self) -> RunControl {
        self.discard_intervals = true;
        self
    }
    /// Bytes written so far by the runs under this control (measured intervals only: I/O
    /// in a ramp is not counted).
    pub fn written_bytes(&self) -> u64 {
        self.written.load(Ordering::Relaxed)
    }
    /// Counts bytes written outside the engine under this control (an application
    /// workload's processes, a user's fio job), so a caller accounting wear sees them.
    /// They are charged to the write limit after the fact: past it, the limit is reached
    /// and the run stopped.
    pub fn add_written(&self, bytes: u64) {
        self.written.fetch_add(bytes, Ordering::Relaxed);
        self.allowance.charge(bytes);
    }
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }
    /// True when the enclosing run (not just this part) was stopped.
    pub fn parent_stopped(&self) -> bool {
        self.parent
            .as_ref()
            .is_some_and(|p| p.load(Ordering::Relaxed))
    }
    /// The flag itself, for a signal handler to set.
    pub fn flag(&self) -> Arc<AtomicBool> {
        self.stop.clone()
    }
    /// True when this run or its enclosing run was stopped, or the write limit reached.
    pub fn is_stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed) || self.parent_stopped() || self.write_limit_reached()
    }
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct ErrorSummary {
    pub count: u64,
    /// The first errors, with their offsets.
    pub first: Vec<IoErrorRecord>,
}

/// The result of one run: totals per direction and combined, and every interval.
#[derive(Debug, Clone, Serialize)]
pub struct RunResult {
    pub engine: Backend,
    /// Why this backend, or what it could not do (psync runs depth 1 per worker).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub engine_note: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub io_uring: Option<UringFeatures>,
    pub region: Region,
    /// The CPUs the process could use (its affinity: cgroup cpusets, taskset).
    pub cpus_allowed: Vec<usize>,
    /// Where each worker ran, in worker order: the CPUs it was confined to, or null for
    /// a worker free to run on any of `cpus_allowed` (`engine::cpu`: fio's
    /// `cpus_allowed_policy=split`, and a depth-1 worker on a CPU of its own).
    pub worker_cpus: Vec<Option<Vec<usize>>>,
    pub runtime_seconds: f64,
    /// Closed loop: seconds the I/O slots (workers x depth) held no I/O, summed over the
    /// slots: from each completion to the next submission in the same slot. It is the
    /// host's part of the queue (reaping, accounting, building the next I/O, waiting for a
    /// CPU), so that IOPS x mean latency + this / runtime = workers x depth (Little's law
    /// with the queue's gaps counted). 0 for open loop and psync.
    pub slot_idle_seconds: f64,
    /// Closed loop: seconds inside the measured window that slots held I/Os which are not
    /// in the latency figures (they straddle the window's start or end, or failed), summed
    /// over the slots. IOPS x mean latency + (this + `slot_idle_seconds`) / runtime =
    /// workers x depth, exactly.
    pub slot_uncounted_seconds: f64,
    /// Seconds of I/O in flight, summed over the slots: divided by `runtime_seconds`, the
    /// queue depth the target really saw (workers x depth, less the host's gaps). Closed
    /// loop: this + `slot_idle_seconds` = workers x depth x runtime, and this -
    /// `slot_uncounted_seconds` = IOPS x mean latency x runtime.
    pub in_flight_seconds: f64,
    /// Open loop: I/Os that came due inside the measured window but are in no figure,
    /// because the host issued them too late to complete in it, or never: `ops` + this =
    /// the I/Os the rate asked for.
    pub due_missed_ops: u64,
    /// Open loop: how late, at most, an I/O was issued against its due time, in seconds
    /// (the host's stalls; the rate's figures are exact only when this is small).
    pub issue_late_max_seconds: f64,
    /// Seconds the worker threads waited, runnable, for a CPU, summed over the workers
    /// (their run delay; 0 where the kernel does not keep it): how much of any lateness or
    /// idle slot time the host caused.
    pub run_delay_seconds: f64,
    pub read: DirSummary,
    pub write: DirSummary,
    /// Trims (`job::Trim`), when the job made any (fio's `trim` direction).
    #[serde(default, skip_serializing_if = "DirSummary::is_empty")]
    pub trim: DirSummary,
    pub total: DirSummary,
    pub verify: VerifySummary,
    pub errors: ErrorSummary,
    /// Why the run ended before its time or byte count, if it did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stopped_early: Option<String>,
    pub intervals: Vec<IntervalSummary>,
    /// Exact latency distributions, for callers that export or merge them.
    #[serde(skip)]
    pub read_stats: DirStats,
    #[serde(skip)]
    pub write_stats: DirStats,
    #[serde(skip)]
    pub trim_stats: DirStats,
}

/// The exact statistics of one interval, for callers that keep their own windows or
/// histograms (the daemon's canaries). Borrowed for the duration of the callback.
pub struct IntervalDetail<'a> {
    pub read: &'a DirStats,
    pub write: &'a DirStats,
}

/// Runs `job` on `target`, calling `on_interval` after every interval (on the calling
/// thread). Blocks until the run ends.
pub fn run(
    job: &Job,
    target: &Target,
    control: &RunControl,
    on_interval: &mut dyn FnMut(&IntervalSummary),
) -> Result<RunResult, EngineError> {
    run_observed(job, target, control, &mut |s, _| on_interval(s))
}

/// [`run`], with each interval's exact statistics handed to `on_interval` too.
pub fn run_observed(
    job: &Job,
    target: &Target,
    control: &RunControl,
    on_interval: &mut dyn FnMut(&IntervalSummary, &IntervalDetail),
) -> Result<RunResult, EngineError> {
    if job.writes() && !target.writable() {
        return Err(EngineError::ReadOnlyTarget(target.path().to_path_buf()));
    }
    let region = job.resolve_on(target)?;
    let (backend, note) = choose_backend(job)?;
    let layout = Layout::of(job, target, region, backend)?;
    let shared = Shared {
        stop: control.stop.clone(),
        parent_stop: control.parent.clone(),
        errors: AtomicU64::new(0),
        error_limit: job.error_limit,
        // Only a run with a limit and writes takes room: no atomic on others' path.
        allowance: (job.writes() && control.write_limit().is_some())
            .then(|| control.allowance.clone()),
    };
    let (tx, rx) = sync_channel::<Msg>(job.workers as usize * 4 + 4);
    let (setups, spare_txs) = worker_setups(job, target, control, &layout, tx)?;
    let mut collector = Collector::new(
        job.workers as usize,
        job.interval.as_nanos() as u64,
        control,
        job.latency_digits,
    );
    let cpus_allowed = cpu::allowed();
    let placement = cpu::split(
        &cpus_allowed,
        setups.len(),
        job.depth,
        job.cpu_policy,
        cpu::next_start(),
    );
    let outcomes = run_workers(
        Workers {
            job,
            backend,
            shared: &shared,
            setups,
            placement,
            rx,
            spare_txs,
        },
        &mut collector,
        on_interval,
    )?;
    finish(
        job,
        control,
        (backend, note),
        region,
        cpus_allowed,
        collector,
        outcomes,
    )
}

/// The backend the run uses, and a note for the result when it is not the one asked for
/// or when it changes what the job does (psync runs at queue depth 1).
fn choose_backend(job: &Job) -> Result<(Backend, Option<String>), EngineError> {
    let (backend, mut note) = match job.backend {
        // Trims are synchronous calls (`job::Trim`): the psync backend makes them.
        _ if !job.trim.is_off() => (
            Backend::Psync,
            Some("trims are synchronous (punch hole or BLKDISCARD): psync".to_string()),
        ),
        BackendChoice::Psync => (Backend::Psync, Some("psync chosen".to_string())),
        BackendChoice::IoUring => match probe_io_uring() {
            Ok(()) => (Backend::IoUring, None),
            Err(e) => return Err(EngineError::UringUnavailable(e)),
        },
        BackendChoice::Auto => match probe_io_uring() {
            Ok(()) => (Backend::IoUring, None),
            Err(e) => (Backend::Psync, Some(format!("io_uring unavailable: {e}"))),
        },
    };
    if backend == Backend::Psync && job.depth > 1 {
        let n = note.take().unwrap_or_default();
        note = Some(format!(
            "{n}; psync does one I/O at a time per worker, so the queue depth is 1, not {}",
            job.depth
        ));
    }
    Ok((backend, note))
}

/// How the region is shared among the workers, checked against the buffer memory cap
/// and, in verify mode, against what verification needs.
struct Layout {
    region: Region,
    /// Each worker's part of the region (verify), or the whole region.
    part: u64,
    align: u64,
    min_bs: u64,
    max_bs: u64,
}

impl Layout {
    fn of(
        job: &Job,
        target: &Target,
        region: Region,
        backend: Backend,
    ) -> Result<Layout, EngineError> {
        let workers = job.workers as u64;
        let buffers = workers * job.depth as u64 * job.sizes.max() as u64;
        if buffers > MAX_BUFFER_BYTES {
            return Err(EngineError::BufferMemory(buffers));
        }
        let min_bs = job.sizes.min() as u64;
        let max_bs = job.sizes.max() as u64;
        let align = target.align().max(min_bs);
        if job.verify
            && job
                .sizes
                .entries()
                .iter()
                .any(|&(s, _)| s as u64 % min_bs != 0)
        {
            return Err(EngineError::VerifySizes(min_bs as u32));
        }
        // In verify mode workers own disjoint parts of the region (so no two workers race
        // on a block); otherwise every worker roams the whole region.
        let part = if job.verify {
            region.len / workers / align * align
        } else {
            region.len
        };
        if job.verify {
            let depth = if backend == Backend::Psync {
                1
            } else {
                job.depth as u64
            };
            let need = 2 * depth * max_bs;
            if part < need {
                return Err(EngineError::VerifyRegion { part, need });
            }
            if part / min_bs > (1 << 31) {
                return Err(EngineError::VerifyTooLarge(part / min_bs));
            }
        }
        Ok(Layout {
            region,
            part,
            align,
            min_bs,
            max_bs,
        })
    }
}

/// Where the collector returns a worker's used interval buffer.
type SpareSender = SyncSender<Box<IntervalStats>>;

/// Each worker's setup (its part of the region, generator, byte budget, rate share and
/// spare interval buffers), and the senders that return used buffers to each.
fn worker_setups(
    job: &Job,
    target: &Target,
    control: &RunControl,
    layout: &Layout,
    tx: SyncSender<Msg>,
) -> Result<(Vec<WorkerSetup>, Vec<SpareSender>), EngineError> {
    let workers = job.workers as u64;
    let region = layout.region;
    let (byte_budget, runtime) = match job.stop {
        Stop::Time(d) => (u64::MAX, Some(d.as_nanos() as u64)),
        Stop::Bytes(b) => (b, None),
        Stop::TimeOrBytes { time, bytes } => (bytes, Some(time.as_nanos() as u64)),
    };
    let in_memory = target.in_memory();
    let mut setups = Vec::new();
    let mut spare_txs = Vec::new();
    for i in 0..workers {
        let (start, len, first) = if job.verify {
            (region.start + i * layout.part, layout.part, 0)
        } else {
            // Sequential workers start staggered across the region: separate streams.
            (region.start, region.len, (region.len / workers) * i)
        };
        let gen = OpGen::new(
            job,
            start,
            len,
            layout.align,
            first,
            job.seed ^ (i + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15),
        )?;
        let verify = job
            .verify
            .then(|| VerifyState::new(layout.min_bs, start, len, !job.writes()));
        let (spare_tx, spare_rx) = sync_channel(4);
        // A run that keeps no interval list (a daemon's canary, for hours, at a few I/Os
        // an interval) gets one spare: its buffer comes back long before the next
        // interval ends, and a buffer fewer is a histogram fewer on each of hundreds of
        // drives. Others get two, slack for a collector that falls behind.
        let spares = if control.discard_intervals { 1 } else { 2 };
        for _ in 0..spares {
            let _ = spare_tx.send(IntervalStats::new(job.latency_digits));
        }
        spare_txs.push(spare_tx);
        let share = byte_budget / workers + if i < byte_budget % workers { 1 } else { 0 };
        setups.push(WorkerSetup {
            id: i as usize,
            file: target.file().clone(),
            first_early: !in_memory,
            gen,
            byte_budget: if byte_budget == u64::MAX {
                u64::MAX
            } else {
                share
            },
            rate: job.rate.map(|r| (r.iops / workers as f64, r.arrival)),
            depth: job.depth,
            max_bs: layout.max_bs as u32,
            verify,
            ramp: job.ramp.as_nanos() as u64,
            runtime,
            interval: job.interval.as_nanos() as u64,
            tx: tx.clone(),
            spare_rx,
            digits: job.latency_digits,
            block_device: matches!(target.kind(), crate::target::TargetKind::BlockDevice { .. }),
        });
    }
    Ok((setups, spare_txs))
}

/// What [`run_workers`] starts and feeds.
struct Workers<'a> {
    job: &'a Job,
    backend: Backend,
    shared: &'a Shared,
    setups: Vec<WorkerSetup>,
    /// The CPUs of each worker, in setup order (None: not confined).
    placement: Vec<Option<Vec<usize>>>,
    rx: Receiver<Msg>,
    spare_txs: Vec<SpareSender>,
}

/// Runs one thread per worker, opens the start gate, and collects intervals until every
/// worker is done; each worker's outcome, in setup order.
fn run_workers(
    w: Workers<'_>,
    collector: &mut Collector,
    on_interval: &mut dyn FnMut(&IntervalSummary, &IntervalDetail),
) -> Result<Vec<WorkerOutcome>, EngineError> {
    let gate = StartGate::new(w.job.workers as usize);
    let mut placement = w.placement.into_iter();
    let backend = w.backend;
    std::thread::scope(|scope| {
        let mut handles = Vec::new();
        for setup in w.setups {
            let shared = w.shared;
            let gate = &gate;
            let cpus = placement.next().flatten();
            let h = std::thread::Builder::new()
                .name(format!("dp-worker-{}", setup.id))
                .spawn_scoped(scope, move || {
                    // Before the ring exists: its kernel helpers are made on these CPUs.
                    let confined = cpus.filter(|c| cpu::confine(c));
                    let mut outcome = match backend {
                        Backend::IoUring => worker::run_uring(setup, gate, shared),
                        Backend::Psync => worker::run_psync(setup, gate, shared),
                    };
                    outcome.cpus = confined;
                    outcome
                });
            match h {
                Ok(h) => handles.push(h),
                Err(e) => {
                    // Cannot start everyone: tell the started ones to stop, and let the
                    // gate go (the missing workers never arrive, so do not wait on it).
                    gate.abort();
                    return Err(EngineError::Spawn(e));
                }
            }
        }
        let t0 = gate.open();
        collector.measure_start = t0 + w.job.ramp.as_nanos() as u64;
        for msg in w.rx.iter() {
            match msg {
                Msg::Interval(i, mut b) => {
                    collector.add(i, &b, on_interval);
                    b.read.reset();
                    b.write.reset();
                    b.trim.reset();
                    b.slots = SlotTime::default();
                    let _ = w.spare_txs[i].try_send(b);
                }
                Msg::Done(i) => collector.done(i, on_interval),
            }
        }
        Ok(handles
            .into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| WorkerOutcome {
                    fatal: Some("a worker thread panicked".into()),
                    ..Default::default()
                })
            })
            .collect())
    })
}

/// The run's result from the workers' outcomes and the collector's totals: errors and
/// verification merged, why it stopped early, if it did.
fn finish(
    job: &Job,
    control: &RunControl,
    (backend, note): (Backend, Option<String>),
    region: Region,
    cpus_allowed: Vec<usize>,
    collector: Collector,
    outcomes: Vec<WorkerOutcome>,
) -> Result<RunResult, EngineError> {
    let fatal: Vec<String> = outcomes.iter().filter_map(|o| o.fatal.clone()).collect();
    if fatal.len() == outcomes.len() {
        return Err(EngineError::Failed(fatal[0].clone()));
    }
    let mut errors = ErrorSummary::default();
    let mut verify = VerifySummary::default();
    let mut io_uring = None;
    let worker_cpus = outcomes.iter().map(|o| o.cpus.clone()).collect();
    for o in outcomes {
        errors.count += o.errors;
        errors.first.extend(o.error_records);
        if let Some(v) = o.verify {
            verify.merge(v);
        }
        io_uring = io_uring.or(o.uring);
    }
    errors.first.sort_by_key(|e| e.offset);
    errors.first.truncate(worker::MAX_ERROR_RECORDS);
    let stopped_early = if !fatal.is_empty() {
        Some(format!("{} worker(s) failed: {}", fatal.len(), fatal[0]))
    } else if errors.count >= job.error_limit {
        Some(format!(
            "error limit reached: {} I/O errors (limit {})",
            errors.count, job.error_limit
        ))
    } else if control.write_limit_reached() {
        Some(format!(
            "stopped at its write limit of {} bytes: its next write did not fit",
            control.write_limit().unwrap_or(u64::MAX)
        ))
    } else if control.is_stopped() {
        Some("stopped by request".to_string())
    } else {
        None
    };
    let runtime_seconds = collector.last_end.saturating_sub(collector.measure_start) as f64 / 1e9;
    let mut both = collector.total_read.clone();
    both.merge(&collector.total_write);
    both.merge(&collector.total_trim);
    Ok(RunResult {
        engine: backend,
        engine_note: note,
        io_uring,
        region,
        cpus_allowed,
        worker_cpus,
        runtime_seconds,
        slot_idle_seconds: ns_to_s(collector.total_slots.idle_ns),
        slot_uncounted_seconds: ns_to_s(collector.total_slots.uncounted_ns),
        in_flight_seconds: ns_to_s(collector.total_slots.in_flight_ns),
        due_missed_ops: collector.total_slots.due_missed_ops,
        issue_late_max_seconds: ns_to_s(collector.total_slots.issue_late_max_ns),
        run_delay_seconds: ns_to_s(collector.total_slots.run_delay_ns),
        read: collector.total_read.summary(runtime_seconds),
        write: collector.total_write.summary(runtime_seconds),
        trim: collector.total_trim.summary(runtime_seconds),
        total: both.summary(runtime_seconds),
        verify,
        errors,
        stopped_early,
        intervals: collector.intervals,
        read_stats: collector.total_read,
        write_stats: collector.total_write,
        trim_stats: collector.total_trim,
    })
}

/// Nanoseconds as seconds.
fn ns_to_s(ns: u64) -> f64 {
    ns as f64 / 1e9
}

type Emit<'a> = dyn FnMut(&IntervalSummary, &IntervalDetail) + 'a;

/// Merges the workers' intervals: interval k is complete when every worker has sent it
/// or has finished.
struct Collector {
    workers: usize,
    interval: u64,
    measure_start: u64,
    last_index: Vec<Option<u64>>,
    done: Vec<bool>,
    pending: BTreeMap<u64, Box<IntervalStats>>,
    total_read: DirStats,
    total_write: DirStats,
    total_trim: DirStats,
    total_slots: SlotTime,
    intervals: Vec<IntervalSummary>,
    last_end: u64,
    written: Arc<AtomicU64>,
    discard_intervals: bool,
    /// Significant digits of the histograms.
    digits: u8,
    /// Emptied merged intervals, for reuse (boxed as the pending map holds them).
    #[allow(clippy::vec_box)]
    spare: Vec<Box<IntervalStats>>,
}

impl Collector {
    fn new(workers: usize, interval: u64, control: &RunControl, digits: u8) -> Self {
        Collector {
            digits,
            written: control.written.clone(),
            discard_intervals: control.discard_intervals,
            spare: Vec::new(),
            workers,
            interval,
            measure_start: 0,
            last_index: vec![None; workers],
            done: vec![false; workers],
            pending: BTreeMap::new(),
            total_read: DirStats::with_digits(digits),
            total_write: DirStats::with_digits(digits),
            total_trim: DirStats::with_digits(digits),
            total_slots: SlotTime::default(),
            intervals: Vec::new(),
            last_end: 0,
        }
    }

    fn add(&mut self, w: usize, b: &IntervalStats, emit: &mut Emit) {
        if self.workers == 1 && self.pending.is_empty() {
            // One worker: its interval is the whole interval, emitted as it came, with no
            // copy into an aggregate (a histogram fewer per direction, kept all along, in
            // each of a daemon's canaries; and a walk over its counts fewer per interval).
            self.last_index[w] = Some(b.index);
            self.emit_interval(b, emit);
            return;
        }
        let (spare, digits) = (&mut self.spare, self.digits);
        let agg = self.pending.entry(b.index).or_insert_with(|| {
            // Reuse a merged interval already emitted: no large allocation per interval.
            let mut n = spare.pop().unwrap_or_else(|| IntervalStats::new(digits));
            n.index = b.index;
            n
        });
        agg.read.merge(&b.read);
        agg.write.merge(&b.write);
        agg.trim.merge(&b.trim);
        agg.slots.merge(&b.slots);
        agg.end_ns = agg.end_ns.max(b.end_ns);
        self.last_index[w] = Some(b.index);
        self.flush(emit);
    }

    fn done(&mut self, w: usize, emit: &mut Emit) {
        self.done[w] = true;
        self.flush(emit);
    }

    fn flush(&mut self, emit: &mut Emit) {
        while let Some((&k, _)) = self.pending.iter().next() {
            let ready = (0..self.workers)
                .all(|w| self.done[w] || self.last_index[w].is_some_and(|i| i >= k));
            if !ready {
                break;
            }
            let agg = self.pending.remove(&k).expect("present");
            self.emit_interval(&agg, emit);
            let mut agg = agg;
            agg.read.reset();
            agg.write.reset();
            agg.trim.reset();
            agg.slots = SlotTime::default();
            agg.end_ns = 0;
            if self.spare.len() < 2 {
                self.spare.push(agg);
            }
        }
    }

    /// Emits one whole interval (all workers' parts merged) and counts it into the totals.
    fn emit_interval(&mut self, agg: &IntervalStats, emit: &mut Emit) {
        let start = self.measure_start + agg.index * self.interval;
        let secs = agg.end_ns.saturating_sub(start) as f64 / 1e9;
        let summary = IntervalSummary {
            end_seconds: agg.end_ns.saturating_sub(self.measure_start) as f64 / 1e9,
            read: agg.read.interval_summary(secs),
            write: agg.write.interval_summary(secs),
            trim: agg.trim.interval_summary(secs),
            slot_idle_seconds: ns_to_s(agg.slots.idle_ns),
            slot_uncounted_seconds: ns_to_s(agg.slots.uncounted_ns),
            in_flight_seconds: ns_to_s(agg.slots.in_flight_ns),
            due_missed_ops: agg.slots.due_missed_ops,
            issue_late_max_seconds: ns_to_s(agg.slots.issue_late_max_ns),
            run_delay_seconds: ns_to_s(agg.slots.run_delay_ns),
        };
        self.total_slots.merge(&agg.slots);
        if self.discard_intervals {
            // No latency histogram of the whole run either (its caller reads latencies
            // from the intervals): one histogram fewer per canary.
            self.total_read.merge_counts(&agg.read);
            self.total_write.merge_counts(&agg.write);
            self.total_trim.merge_counts(&agg.trim);
        } else {
            self.total_read.merge(&agg.read);
            self.total_write.merge(&agg.write);
            self.total_trim.merge(&agg.trim);
        }
        self.last_end = self.last_end.max(agg.end_ns);
        self.written.fetch_add(agg.write.bytes, Ordering::Relaxed);
        emit(
            &summary,
            &IntervalDetail {
                read: &agg.read,
                write: &agg.write,
            },
        );
        if !self.discard_intervals {
            self.intervals.push(summary);
        }
    }
}
