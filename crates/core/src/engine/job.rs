//! The validated description of one workload. Everything the engine runs is a [`Job`];
//! a `Job` can only be made through [`JobSpec::validate`], so the engine never sees a
//! zero depth, an empty size mix or a zone table that does not add up.

use std::fmt;
use std::time::Duration;

pub use crate::target::RegionSpec;
use serde::Serialize;

use crate::units::{self, format_size};

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum JobError {
    #[error(transparent)]
    Unit(#[from] units::UnitError),
    #[error("{0} significant digits of latency: give 2 or 3")]
    LatencyDigits(u8),
    #[error("'{0}' is not a block size mix: write size:weight pairs separated by commas, such as 512:4,4k:67,8k:29 (or fio's 4k/70:8k/30)")]
    SizeMix(String),
    #[error("'{0}' is not an access distribution: write uniform, or zoned access%/size% pairs such as zoned:50/5:30/15:20/80 (each column adding up to 100)")]
    Distribution(String),
    #[error("read share {0}% is out of range: give 0 to 100")]
    ReadShare(u32),
    #[error("random share {0}% is out of range: give 0 to 100")]
    RandomShare(u32),
    #[error("{what} must be more than 0")]
    Zero { what: &'static str },
    #[error("block size {0} is not a multiple of 512 bytes")]
    BlockSize(u64),
    #[error("rate limit {0} IOPS is not a positive number")]
    Rate(f64),
    #[error("queue depth {0} is too deep: at most 4096 per worker")]
    Depth(u32),
    #[error("{0} workers is too many: at most 1024")]
    Workers(u32),
    #[error("trim jobs (trim, randtrim, trimwrite) neither read nor verify: give no read share and no --verify")]
    TrimMix,
}

/// Random or sequential access.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Pattern {
    Random,
    Sequential,
}

/// Trims (discards) instead of, or before, writes: fio's `trim`, `randtrim` (every I/O a
/// trim, sequential or random) and `trimwrite` (each block trimmed, then written, in
/// sequence). A trim tells the target the blocks' data is no longer wanted: it destroys
/// data exactly like a write, and the write gate treats it as one (a trim job writes).
/// Files are trimmed by punching a hole (`fallocate(PUNCH_HOLE | KEEP_SIZE)`), block
/// devices with BLKDISCARD; both are synchronous calls, made by the psync backend (io_uring
/// has no discard operation for block devices before IORING_OP_URING_CMD's, and fio also
/// issues trims synchronously), so a trim job runs one trim at a time per worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Trim {
    #[default]
    Off,
    /// Every I/O a trim.
    Only,
    /// Each I/O a trim, then a write of the same block.
    ThenWrite,
}

impl Trim {
    pub fn is_off(&self) -> bool {
        *self == Trim::Off
    }
}

/// Transfer sizes with weights. Validated: at least one entry, every size a multiple of
/// 512, every weight positive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SizeMix {
    entries: Vec<(u32, u32)>,
}

impl SizeMix {
    pub fn single(size: u32) -> Result<Self, JobError> {
        Self::new(vec![(size, 1)])
    }

    pub fn new(entries: Vec<(u32, u32)>) -> Result<Self, JobError> {
        if entries.is_empty() {
            return Err(JobError::SizeMix(String::new()));
        }
        for &(size, weight) in &entries {
            if size == 0 || size % 512 != 0 {
                return Err(JobError::BlockSize(size as u64));
            }
            if weight == 0 {
                return Err(JobError::SizeMix(format!("{}:0", format_size(size as u64))));
            }
        }
        Ok(SizeMix { entries })
    }

    /// Parses `4k`, `512:4,4k:67,8k:29` or fio's `4k/70:8k/30`.
    pub fn parse(text: &str) -> Result<Self, JobError> {
        let err = || JobError::SizeMix(text.to_string());
        let t = text.trim();
        let pairs: Vec<&str> = if t.contains(',') {
            t.split(',').collect()
        } else if t.contains('/') {
            t.split(':').collect()
        } else if t.contains(':') {
            vec![t]
        } else {
            let size = parse_block_size(t)?;
            return Self::single(size);
        };
        let mut entries = Vec::new();
        for pair in pairs {
            let (s, w) = pair
                .split_once(':')
                .or_else(|| pair.split_once('/'))
                .ok_or_else(err)?;
            let size = parse_block_size(s)?;
            let weight: u32 = w.trim().trim_end_matches('%').parse().map_err(|_| err())?;
            if weight == 0 {
                continue; // fio allows 0-weight entries; they never happen
            }
            entries.push((size, weight));
        }
        if entries.is_empty() {
            return Err(err());
        }
        Self::new(entries)
    }

    pub fn entries(&self) -> &[(u32, u32)] {
        &self.entries
    }
    pub fn min(&self) -> u32 {
        self.entries.iter().map(|e| e.0).min().unwrap_or(512)
    }
    pub fn max(&self) -> u32 {
        self.entries.iter().map(|e| e.0).max().unwrap_or(512)
    }
    pub fn total_weight(&self) -> u64 {
        self.entries.iter().map(|e| e.1 as u64).sum()
    }
    /// Mean transfer size, weighted.
    pub fn mean(&self) -> f64 {
        let tw = self.total_weight() as f64;
        self.entries
            .iter()
            .map(|&(s, w)| s as f64 * w as f64 / tw)
            .sum()
    }
}

impl fmt::Display for SizeMix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.entries.len() == 1 {
            return write!(f, "{}", format_size(self.entries[0].0 as u64));
        }
        for (i, (s, w)) in self.entries.iter().enumerate() {
            if i > 0 {
                write!(f, ",")?;
            }
            write!(f, "{}:{}", format_size(*s as u64), w)?;
        }
        Ok(())
    }
}

impl Serialize for SizeMix {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

fn parse_block_size(text: &str) -> Result<u32, JobError> {
    let v = units::parse_size(text)?;
    if v == 0 || v % 512 != 0 || v > (1 << 30) {
        return Err(JobError::BlockSize(v));
    }
    Ok(v as u32)
}

/// One zone of a zoned distribution: `access_pct` of the I/Os go to the next `size_pct`
/// of the region.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Zone {
    pub access_pct: f64,
    pub size_pct: f64,
}

/// Where in the region I/Os land.
#[derive(Debug, Clone, PartialEq)]
pub enum Distribution {
    Uniform,
    Zoned(Vec<Zone>),
}

impl Distribution {
    /// Parses `uniform`, `random` (fio), `zoned:50/5:30/15:20/80` or `50/5:30/15:20/80`.
    pub fn parse(text: &str) -> Result<Self, JobError> {
        let err = || JobError::Distribution(text.to_string());
        let t = text.trim();
        if t == "uniform" || t == "random" {
            return Ok(Distribution::Uniform);
        }
        let body = t.strip_prefix("zoned:").unwrap_or(t);
        let mut zones = Vec::new();
        for z in body.split(':') {
            let (a, s) = z.split_once('/').ok_or_else(err)?;
            let a: f64 = a.trim().parse().map_err(|_| err())?;
            let s: f64 = s.trim().parse().map_err(|_| err())?;
            if !(a >= 0.0 && s > 0.0 && a.is_finite() && s.is_finite()) {
                return Err(err());
            }
            zones.push(Zone {
                access_pct: a,
                size_pct: s,
            });
        }
        let sa: f64 = zones.iter().map(|z| z.access_pct).sum();
        let ss: f64 = zones.iter().map(|z| z.size_pct).sum();
        if zones.is_empty() || (sa - 100.0).abs() > 1e-6 || (ss - 100.0).abs() > 1e-6 {
            return Err(err());
        }
        Ok(Distribution::Zoned(zones))
    }
}

impl fmt::Display for Distribution {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Distribution::Uniform => write!(f, "uniform"),
            Distribution::Zoned(zones) => {
                write!(f, "zoned")?;
                for z in zones {
                    write!(f, ":{}/{}", z.access_pct, z.size_pct)?;
                }
                Ok(())
            }
        }
    }
}

impl Serialize for Distribution {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// Arrival process of a rate-limited (open-loop) job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Arrival {
    /// Evenly spaced (fio's `rate_process=linear`).
    Linear,
    /// Exponential inter-arrival times (fio's `rate_process=poisson`).
    Poisson,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct RateLimit {
    /// Total IOPS over all workers.
    pub iops: f64,
    pub arrival: Arrival,
}

/// When the measured part of a run ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Stop {
    /// After this long (time based: the region is gone over as often as needed).
    Time(#[serde(with = "secs")] Duration),
    /// After this many bytes, over all workers.
    Bytes(u64),
    /// After this many bytes or this long, whichever comes first (fio's size or io_size
    /// with a runtime and without time_based).
    TimeOrBytes {
        #[serde(rename = "seconds", with = "secs")]
        time: Duration,
        bytes: u64,
    },
}

/// Which I/O backend to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum BackendChoice {
    /// io_uring when the kernel allows it, else psync.
    #[default]
    Auto,
    IoUring,
    Psync,
}

/// Where the workers may run (fio's `cpus_allowed_policy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum CpuPolicy {
    /// Every worker may run on every CPU the process may run on.
    Shared,
    /// The CPUs the process may run on are split between the workers: with as many
    /// workers as CPUs, or at queue depth 1, each worker gets one (round robin);
    /// with fewer, each gets its own share of them; with more, none is confined. A worker's ring makes its kernel
    /// helper threads (io-wq) on the worker's CPUs, so a worker and the I/O it punts stay
    /// together instead of migrating across each other. One worker with a deeper queue
    /// is not confined. See `engine::cpu`.
    #[default]
    Split,
}

/// Everything a job may say, unvalidated.
#[derive(Debug, Clone)]
pub struct JobSpec {
    pub region: RegionSpec,
    pub pattern: Pattern,
    /// Share of I/Os at random offsets, the rest sequential (fio's percentage_random);
    /// None: 100 for a random pattern, 0 for a sequential one.
    pub random_pct: Option<u32>,
    pub sizes: SizeMix,
    pub read_pct: u32,
    pub distribution: Distribution,
    pub depth: u32,
    pub workers: u32,
    pub stop: Stop,
    pub ramp: Duration,
    pub rate: Option<RateLimit>,
    pub direct: bool,
    pub verify: bool,
    pub interval: Duration,
    pub error_limit: u64,
    pub seed: u64,
    pub backend: BackendChoice,
    /// Significant digits of the latency histograms: 3 (values within 0.1%, 270 KB per
    /// histogram) or 2 (within 1%, 37 KB: for always-on canaries on many drives).
    pub latency_digits: u8,
    pub cpu_policy: CpuPolicy,
    /// fio's random map: each worker's random offsets visit every block of its region
    /// once before any block again (a permutation), when the job has one block size, a
    /// uniform distribution and only random I/O. Off: offsets are drawn independently.
    pub random_map: bool,
    /// Trims instead of (or before) writes; needs a read share of 0 and no verify.
    pub trim: Trim,
}

impl Default for JobSpec {
    fn default() -> Self {
        JobSpec {
            region: RegionSpec::Whole,
            pattern: Pattern::Random,
            random_pct: None,
            sizes: SizeMix {
                entries: vec![(4096, 1)],
            },
            read_pct: 100,
            distribution: Distribution::Uniform,
            depth: 1,
            workers: 1,
            stop: Stop::Time(Duration::from_secs(10)),
            ramp: Duration::ZERO,
            rate: None,
            direct: true,
            verify: false,
            interval: Duration::from_secs(1),
            error_limit: 10,
            seed: 0x6472_6976_6570_726f, // "driveprobe"
            backend: BackendChoice::Auto,
            latency_digits: 3,
            cpu_policy: CpuPolicy::Split,
            random_map: false,
            trim: Trim::Off,
        }
    }
}

/// A validated job. Fields are read-only to the rest of the crate.
#[derive(Debug, Clone, Serialize)]
pub struct Job {
    pub(crate) region: RegionSpec,
    pub(crate) pattern: Pattern,
    #[serde(rename = "percentage_random")]
    pub(crate) random_pct: u32,
    #[serde(rename = "bs")]
    pub(crate) sizes: SizeMix,
    #[serde(rename = "rwmixread")]
    pub(crate) read_pct: u32,
    #[serde(rename = "random_distribution")]
    pub(crate) distribution: Distribution,
    #[serde(rename = "iodepth")]
    pub(crate) depth: u32,
    #[serde(rename = "numjobs")]
    pub(crate) workers: u32,
    pub(crate) stop: Stop,
    #[serde(rename = "ramp_time_seconds", with = "secs")]
    pub(crate) ramp: Duration,
    pub(crate) rate: Option<RateLimit>,
    pub(crate) direct: bool,
    pub(crate) verify: bool,
    #[serde(rename = "interval_seconds", with = "secs")]
    pub(crate) interval: Duration,
    pub(crate) error_limit: u64,
    pub(crate) seed: u64,
    #[serde(skip)]
    pub(crate) backend: BackendChoice,
    #[serde(skip)]
    pub(crate) latency_digits: u8,
    #[serde(rename = "cpus_allowed_policy")]
    pub(crate) cpu_policy: CpuPolicy,
    pub(crate) random_map: bool,
    #[serde(skip_serializing_if = "Trim::is_off")]
    pub(crate) trim: Trim,
}

impl JobSpec {
    pub fn validate(self) -> Result<Job, JobError> {
        if self.read_pct > 100 {
            return Err(JobError::ReadShare(self.read_pct));
        }
        let random_pct = match (self.random_pct, self.pattern) {
            (Some(r), _) if r > 100 => return Err(JobError::RandomShare(r)),
            (Some(r), _) => r,
            (None, Pattern::Random) => 100,
            (None, Pattern::Sequential) => 0,
        };
        if self.depth == 0 {
            return Err(JobError::Zero {
                what: "queue depth (--iodepth)",
            });
        }
        if self.depth > 4096 {
            return Err(JobError::Depth(self.depth));
        }
        if self.workers == 0 {
            return Err(JobError::Zero {
                what: "number of workers (--numjobs)",
            });
        }
        if self.workers > 1024 {
            return Err(JobError::Workers(self.workers));
        }
        if !self.trim.is_off() && (self.read_pct != 0 || self.verify) {
            return Err(JobError::TrimMix);
        }
        if self.interval.is_zero() {
            return Err(JobError::Zero { what: "interval" });
        }
        if self.error_limit == 0 {
            return Err(JobError::Zero {
                what: "error limit",
            });
        }
        if !(2..=3).contains(&self.latency_digits) {
            return Err(JobError::LatencyDigits(self.latency_digits));
        }
        if let Some(r) = self.rate {
            if !(r.iops.is_finite() && r.iops > 0.0) {
                return Err(JobError::Rate(r.iops));
            }
        }
        match self.stop {
            Stop::Time(d) if d.is_zero() => return Err(JobError::Zero { what: "run time" }),
            Stop::Bytes(0) | Stop::TimeOrBytes { bytes: 0, .. } => {
                return Err(JobError::Zero { what: "byte count" })
            }
            Stop::TimeOrBytes { time, .. } if time.is_zero() => {
                return Err(JobError::Zero { what: "run time" })
            }
            _ => {}
        }
        Ok(Job {
            region: self.region,
            pattern: self.pattern,
            random_pct,
            sizes: self.sizes,
            read_pct: self.read_pct,
            distribution: self.distribution,
            depth: self.depth,
            workers: self.workers,
            stop: self.stop,
            ramp: self.ramp,
            rate: self.rate,
            direct: self.direct,
            verify: self.verify,
            interval: self.interval,
            error_limit: self.error_limit,
            seed: self.seed,
            backend: self.backend,
            latency_digits: self.latency_digits,
            cpu_policy: self.cpu_policy,
            random_map: self.random_map,
            trim: self.trim,
        })
    }
}

impl Job {
    /// The spec this job was validated from, to change and validate again.
    pub fn to_spec(&self) -> JobSpec {
        JobSpec {
            region: self.region,
            pattern: self.pattern,
            random_pct: Some(self.random_pct),
            sizes: self.sizes.clone(),
            read_pct: self.read_pct,
            distribution: self.distribution.clone(),
            depth: self.depth,
            workers: self.workers,
            stop: self.stop,
            ramp: self.ramp,
            rate: self.rate,
            direct: self.direct,
            verify: self.verify,
            interval: self.interval,
            error_limit: self.error_limit,
            seed: self.seed,
            backend: self.backend,
            latency_digits: self.latency_digits,
            cpu_policy: self.cpu_policy,
            random_map: self.random_map,
            trim: self.trim,
        }
    }

    /// True when the job writes at all.
    pub fn writes(&self) -> bool {
        self.read_pct < 100
    }
    /// True when the job reads at all.
    pub fn reads(&self) -> bool {
        self.read_pct > 0
    }
    /// True when the random offsets follow fio's random map (see [`JobSpec::random_map`]):
    /// asked for, one block size, a uniform distribution, only random I/O.
    pub fn random_map_applies(&self) -> bool {
        self.random_map
            && self.sizes.entries().len() == 1
            && matches!(self.distribution, Distribution::Uniform)
            && self.random_pct == 100
    }
    pub fn depth(&self) -> u32 {
        self.depth
    }
    pub fn workers(&self) -> u32 {
        self.workers
    }
    pub fn stop(&self) -> Stop {
        self.stop
    }
    pub fn ramp(&self) -> Duration {
        self.ramp
    }
    pub fn sizes(&self) -> &SizeMix {
        &self.sizes
    }
    pub fn read_pct(&self) -> u32 {
        self.read_pct
    }
    pub fn pattern(&self) -> Pattern {
        self.pattern
    }
    pub fn random_pct(&self) -> u32 {
        self.random_pct
    }
    pub fn rate(&self) -> Option<RateLimit> {
        self.rate
    }
    pub fn direct(&self) -> bool {
        self.direct
    }
    /// The seed of the job's generator (offsets and write data).
    pub fn seed(&self) -> u64 {
        self.seed
    }
    /// Significant digits of the job's latency histograms.
    pub fn latency_digits(&self) -> u8 {
        self.latency_digits
    }
    pub fn verify(&self) -> bool {
        self.verify
    }
    /// Resolves this job's region on `target` and checks its block sizes against the
    /// target's O_DIRECT alignment ([`crate::target::Target::resolve`]).
    pub fn resolve_on(
        &self,
        target: &crate::target::Target,
    ) -> Result<crate::target::Region, crate::target::TargetError> {
        let sizes: Vec<u32> = self.sizes.entries().iter().map(|e| e.0).collect();
        target.resolve(self.region, &sizes)
    }
    pub fn region(&self) -> RegionSpec {
        self.region
    }
    pub fn interval(&self) -> Duration {
        self.interval
    }
    /// fio's `rw` name for this job.
    pub fn rw_name(&self) -> &'static str {
        match (self.trim, self.pattern) {
            (Trim::Only, Pattern::Sequential) => "trim",
            (Trim::Only, Pattern::Random) => "randtrim",
            (Trim::ThenWrite, _) => "trimwrite",
            (Trim::Off, _) => rw_name(self.pattern, self.read_pct),
        }
    }
    pub fn trim(&self) -> Trim {
        self.trim
    }
}

/// fio's `rw` name for a pattern and read share.
pub fn rw_name(pattern: Pattern, read_pct: u32) -> &'static str {
    match (pattern, read_pct) {
        (Pattern::Random, 100) => "randread",
        (Pattern::Random, 0) => "randwrite",
        (Pattern::Random, _) => "randrw",
        (Pattern::Sequential, 100) => "read",
        (Pattern::Sequential, 0) => "write",
        (Pattern::Sequential, _) => "rw",
    }
}

mod secs {
    use serde::Serializer;
    use std::time::Duration;
    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(d.as_secs_f64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_mixes() {
        let m = SizeMix::parse("512:4,4k:67,8k:10,16k:7,32k:3,64k:3").unwrap();
        assert_eq!(m.entries().len(), 6);
        assert_eq!(m.min(), 512);
        assert_eq!(m.max(), 65536);
        assert_eq!(m.total_weight(), 94);
        assert_eq!(m.to_string(), "512:4,4k:67,8k:10,16k:7,32k:3,64k:3");
        let f = SizeMix::parse("4k/70:8k/30").unwrap();
        assert_eq!(f.entries(), &[(4096, 70), (8192, 30)]);
        assert_eq!(SizeMix::parse("128k").unwrap().entries(), &[(131072, 1)]);
        assert_eq!(SizeMix::parse("8k:1").unwrap().entries(), &[(8192, 1)]);
        for bad in ["", "4k:x", "1000", "4k:0", "4k,8k", "zz"] {
            assert!(SizeMix::parse(bad).is_err(), "{bad:?} should be refused");
        }
    }

    #[test]
    fn distributions() {
        let d = Distribution::parse("zoned:50/5:30/15:20/80").unwrap();
        assert_eq!(d.to_string(), "zoned:50/5:30/15:20/80");
        assert_eq!(Distribution::parse("50/5:30/15:20/80").unwrap(), d);
        assert_eq!(
            Distribution::parse("random").unwrap(),
            Distribution::Uniform
        );
        for bad in [
            "zoned:50/5",
            "zoned:50/5:60/95",
            "zipf:1.2",
            "zoned:",
            "x/y",
        ] {
            assert!(
                Distribution::parse(bad).is_err(),
                "{bad:?} should be refused"
            );
        }
    }

    #[test]
    fn latency_digits_are_2_or_3() {
        for (d, ok) in [(1, false), (2, true), (3, true), (4, false)] {
            let spec = JobSpec {
                latency_digits: d,
                ..JobSpec::default()
            };
            assert_eq!(spec.validate().is_ok(), ok, "{d} digits");
        }
        let job = JobSpec {
            latency_digits: 2,
            ..JobSpec::default()
        }
        .validate()
        .unwrap();
        assert_eq!(job.to_spec().latency_digits, 2);
    }

    #[test]
    fn validation() {
        let ok = JobSpec::default().validate().unwrap();
        assert_eq!(ok.rw_name(), "randread");
        let bad = JobSpec {
            depth: 0,
            ..JobSpec::default()
        };
        assert!(bad.validate().is_err());
        let bad = JobSpec {
            read_pct: 101,
            ..JobSpec::default()
        };
        assert!(bad.validate().is_err());
        let bad = JobSpec {
            rate: Some(RateLimit {
                iops: 0.0,
                arrival: Arrival::Linear,
            }),
            ..JobSpec::default()
        };
        assert!(bad.validate().is_err());
    }
}
