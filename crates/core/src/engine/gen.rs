//! Where the next I/O goes, how big it is and which way: a per-worker generator with no
//! allocation and no shared state (the hot path calls [`OpGen::next`] once per I/O).

#[cfg(test)]
use super::job::Pattern;
use super::job::{Distribution, Job, SizeMix, Trim};

use crate::rng::Rng;

/// One I/O to issue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Op {
    pub read: bool,
    /// A trim (discard) of the range, not a write (see `job::Trim`).
    pub trim: bool,
    pub offset: u64,
    pub len: u32,
}

const MAX_ZONES: usize = 16;
const MAX_SIZES: usize = 16;

/// The generator of one worker. Its region is `[start, start + len)`, already aligned.
#[derive(Debug, Clone)]
pub struct OpGen {
    rng: Rng,
    start: u64,
    len: u64,
    align: u64,
    /// I/Os go to a random offset when `rng.below(10_000) < random_threshold`, else to
    /// the next sequential one.
    random_threshold: u64,
    /// Cumulative weights, and sizes, of the transfer size mix.
    size_cum: [u64; MAX_SIZES],
    sizes: [u32; MAX_SIZES],
    n_sizes: usize,
    size_total: u64,
    /// Reads happen when `rng.below(10_000) < read_threshold`.
    read_threshold: u64,
    /// Zones: cumulative access weight (x1e6) and aligned (start, len).
    zone_cum: [u64; MAX_ZONES],
    zone_span: [(u64, u64); MAX_ZONES],
    n_zones: usize,
    /// Next sequential offset (relative to `start`).
    cursor: u64,
    /// fio's random map, when the job asks for it and can have it.
    perm: Option<Permutation>,
    trim: Trim,
    /// trimwrite: the write that follows the trim just returned.
    pending: Option<Op>,
}

/// A permutation of `0..n` walked one value at a time, with O(1) state: a full-period
/// LCG over `0..m` (m the power of two at or above n: a multiplier of 1 mod 4 and an odd
/// increment give period m), each state scrambled by a bijection of `0..m` (an xorshift
/// and an odd multiplier), states that land at or above n skipped (cycle walking; fewer
/// than one skip per value on average). The order repeats after n values.
#[derive(Debug, Clone)]
struct Permutation {
    n: u64,
    mask: u64,
    shift: u32,
    a: u64,
    c: u64,
    mul: u64,
    x: u64,
}

impl Permutation {
    fn new(n: u64, rng: &mut Rng) -> Self {
        let m = n.max(2).next_power_of_two();
        let bits = m.trailing_zeros();
        Permutation {
            n,
            mask: m - 1,
            shift: (bits / 2).max(1),
            a: (rng.next_u64() << 2) | 1,
            c: rng.next_u64() | 1,
            mul: rng.next_u64() | 1,
            x: rng.next_u64() & (m - 1),
        }
    }

    #[inline]
    fn next(&mut self) -> u64 {
        loop {
            self.x = self.a.wrapping_mul(self.x).wrapping_add(self.c) & self.mask;
            let y = self.x ^ (self.x >> self.shift);
            let y = y.wrapping_mul(self.mul) & self.mask;
            if y < self.n {
                return y;
            }
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GenError {
    #[error("the region ({region} bytes) is smaller than the largest block size ({bs} bytes)")]
    RegionTooSmall { region: u64, bs: u64 },
    #[error("at most {MAX_SIZES} block sizes in a mix")]
    TooManySizes,
    #[error("at most {MAX_ZONES} zones in a distribution")]
    TooManyZones,
}

impl OpGen {
    /// A generator over `[start, start+len)`, offsets aligned to `align`, beginning its
    /// sequential pass at `first` (relative to `start`).
    pub fn new(
        job: &Job,
        start: u64,
        len: u64,
        align: u64,
        first: u64,
        seed: u64,
    ) -> Result<Self, GenError> {
        let mix: &SizeMix = &job.sizes;
        let max_bs = mix.max() as u64;
        if len < max_bs {
            return Err(GenError::RegionTooSmall {
                region: len,
                bs: max_bs,
            });
        }
        if mix.entries().len() > MAX_SIZES {
            return Err(GenError::TooManySizes);
        }
        let mut size_cum = [0u64; MAX_SIZES];
        let mut sizes = [0u32; MAX_SIZES];
        let mut acc = 0;
        for (i, &(s, w)) in mix.entries().iter().enumerate() {
            acc += w as u64;
            size_cum[i] = acc;
            sizes[i] = s;
        }
        let mut zone_cum = [0u64; MAX_ZONES];
        let mut zone_span = [(0u64, 0u64); MAX_ZONES];
        let mut n_zones = 0;
        if let Distribution::Zoned(zones) = &job.distribution {
            if zones.len() > MAX_ZONES {
                return Err(GenError::TooManyZones);
            }
            let units = len / align;
            let mut acc_access = 0u64;
            let mut acc_size = 0.0f64;
            let mut prev_end = 0u64;
            for (i, z) in zones.iter().enumerate() {
                acc_access += (z.access_pct * 1e6).round() as u64;
                acc_size += z.size_pct;
                let end_units = if i + 1 == zones.len() {
                    units
                } else {
                    ((units as f64) * acc_size / 100.0).round() as u64
                };
                let zstart = prev_end * align;
                let zlen = end_units.saturating_sub(prev_end) * align;
                zone_cum[i] = acc_access;
                zone_span[i] = (zstart, zlen);
                prev_end = end_units;
            }
            n_zones = zones.len();
        }
        let mut rng = Rng::new(seed);
        // The map covers fixed-size blocks of uniform, purely random I/O.
        let bs = mix.max() as u64;
        let perm = (job.random_map_applies() && bs % align == 0)
            .then(|| Permutation::new(len / bs, &mut rng));
        Ok(OpGen {
            rng,
            start,
            len,
            align,
            random_threshold: job.random_pct as u64 * 100,
            size_cum,
            sizes,
            n_sizes: mix.entries().len(),
            size_total: acc,
            read_threshold: job.read_pct as u64 * 100,
            zone_cum,
            zone_span,
            n_zones,
            cursor: (first / align * align) % len,
            perm,
            trim: job.trim,
            pending: None,
        })
    }

    /// Whether a trim's bytes count toward a byte-limited run: not in trimwrite, where
    /// (as in fio) the size is covered by the writes, each following its trim.
    pub fn trims_counted(&self) -> bool {
        self.trim != Trim::ThenWrite
    }

    pub fn rng(&mut self) -> &mut Rng {
        &mut self.rng
    }

    #[inline]
    fn next_size(&mut self) -> u32 {
        if self.n_sizes == 1 {
            return self.sizes[0];
        }
        let r = self.rng.below(self.size_total);
        let mut i = 0;
        while i + 1 < self.n_sizes && r >= self.size_cum[i] {
            i += 1;
        }
        self.sizes[i]
    }

    #[inline]
    fn next_dir(&mut self) -> bool {
        match self.read_threshold {
            10_000 => true,
            0 => false,
            t => self.rng.below(10_000) < t,
        }
    }

    /// Uniform aligned offset for a `len`-byte I/O inside `[zstart, zstart+zlen)`, falling
    /// back to the whole region when the zone is smaller than the I/O.
    #[inline]
    fn offset_in(&mut self, zstart: u64, zlen: u64, len: u64) -> u64 {
        let (zstart, zlen) = if zlen >= len {
            (zstart, zlen)
        } else {
            (0, self.len)
        };
        let slots = (zlen - len) / self.align + 1;
        zstart + self.rng.below(slots) * self.align
    }

    /// The next I/O.
    #[inline]
    pub fn next_op(&mut self) -> Op {
        if let Some(op) = self.pending.take() {
            return op;
        }
        let op = self.next_io();
        match self.trim {
            Trim::Off => op,
            Trim::Only => Op { trim: true, ..op },
            Trim::ThenWrite => {
                self.pending = Some(op);
                Op { trim: true, ..op }
            }
        }
    }

    #[inline]
    fn next_io(&mut self) -> Op {
        let len = self.next_size();
        let read = self.next_dir();
        let l = len as u64;
        let random = match self.random_threshold {
            10_000 => true,
            0 => false,
            t => self.rng.below(10_000) < t,
        };
        let rel = match (random, self.perm.as_mut()) {
            (true, Some(p)) => p.next() * l,
            (false, _) => {
                if self.cursor + l > self.len {
                    self.cursor = 0;
                }
                let o = self.cursor;
                self.cursor += l;
                o
            }
            (true, None) if self.n_zones == 0 => self.offset_in(0, self.len, l),
            (true, None) => {
                let r = self.rng.below(self.zone_cum[self.n_zones - 1]);
                let mut i = 0;
                while i + 1 < self.n_zones && r >= self.zone_cum[i] {
                    i += 1;
                }
                let (zs, zl) = self.zone_span[i];
                self.offset_in(zs, zl, l)
            }
        };
        Op {
            read,
            trim: false,
            offset: self.start + rel,
            len,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::job::JobSpec;

    fn job(f: impl FnOnce(&mut JobSpec)) -> Job {
        let mut s = JobSpec::default();
        f(&mut s);
        s.validate().unwrap()
    }

    #[test]
    fn random_map_visits_every_block_once_per_pass() {
        for blocks in [1u64, 2, 3, 7, 64, 1000, 4097] {
            let j = job(|s| {
                s.random_map = true;
                s.read_pct = 0;
            });
            let mut g = OpGen::new(&j, 8192, blocks * 4096, 4096, 0, blocks).unwrap();
            let mut seen = vec![0u32; blocks as usize];
            for _ in 0..2 * blocks {
                let op = g.next_op();
                seen[((op.offset - 8192) / 4096) as usize] += 1;
            }
            assert!(seen.iter().all(|&n| n == 2), "{blocks} blocks: {seen:?}");
        }
        // Without the map, one pass's worth of draws leaves about 1/e untouched.
        let j = job(|s| s.read_pct = 0);
        let mut g = OpGen::new(&j, 0, 1000 * 4096, 4096, 0, 1).unwrap();
        let mut seen = [false; 1000];
        for _ in 0..1000 {
            seen[(g.next_op().offset / 4096) as usize] = true;
        }
        assert!(seen.iter().filter(|&&b| b).count() < 800);
    }

    #[test]
    fn offsets_stay_inside_and_aligned() {
        let j = job(|s| s.sizes = SizeMix::parse("512:4,4k:67,8k:10,64k:19").unwrap());
        let mut g = OpGen::new(&j, 1 << 20, 8 << 20, 512, 0, 1).unwrap();
        for _ in 0..200_000 {
            let op = g.next_op();
            assert!(op.offset >= 1 << 20);
            assert!(op.offset + op.len as u64 <= 9 << 20);
            assert_eq!(op.offset % 512, 0);
        }
    }

    #[test]
    fn read_share_within_a_point() {
        let j = job(|s| s.read_pct = 70);
        let mut g = OpGen::new(&j, 0, 1 << 30, 4096, 0, 7).unwrap();
        let n = 1_000_000;
        let reads = (0..n).filter(|_| g.next_op().read).count();
        let share = reads as f64 / n as f64 * 100.0;
        assert!((share - 70.0).abs() < 1.0, "read share {share}");
    }

    #[test]
    fn size_mix_within_a_point() {
        let j = job(|s| s.sizes = SizeMix::parse("512:4,4k:67,8k:10,16k:7,32k:3,64k:9").unwrap());
        let mut g = OpGen::new(&j, 0, 1 << 30, 512, 0, 9).unwrap();
        let n = 1_000_000;
        let mut counts = std::collections::HashMap::new();
        for _ in 0..n {
            *counts.entry(g.next_op().len).or_insert(0u64) += 1;
        }
        for &(s, w) in j.sizes().entries() {
            let share = counts[&s] as f64 / n as f64 * 100.0;
            assert!((share - w as f64).abs() < 1.0, "size {s}: {share}% vs {w}%");
        }
    }

    #[test]
    fn zoned_distribution_follows_the_table() {
        let j = job(|s| s.distribution = Distribution::parse("zoned:50/5:30/15:20/80").unwrap());
        let len = 1u64 << 30;
        let mut g = OpGen::new(&j, 0, len, 4096, 0, 3).unwrap();
        let n = 1_000_000;
        let mut z = [0u64; 3];
        for _ in 0..n {
            let o = g.next_op().offset;
            let f = o as f64 / len as f64;
            z[if f < 0.05 {
                0
            } else if f < 0.20 {
                1
            } else {
                2
            }] += 1;
        }
        let shares: Vec<f64> = z.iter().map(|&c| c as f64 / n as f64 * 100.0).collect();
        for (got, want) in shares.iter().zip([50.0, 30.0, 20.0]) {
            assert!((got - want).abs() < 1.0, "zones {shares:?}");
        }
    }

    #[test]
    fn trims_come_alone_or_before_their_write() {
        use crate::engine::job::Pattern;
        // trimwrite: each block trimmed, then written, in sequence.
        let j = job(|s| {
            s.read_pct = 0;
            s.pattern = Pattern::Sequential;
            s.trim = Trim::ThenWrite;
        });
        let mut g = OpGen::new(&j, 0, 8 * 4096, 4096, 0, 1).unwrap();
        assert!(!g.trims_counted());
        for k in 0..16u64 {
            let t = g.next_op();
            let w = g.next_op();
            assert!(t.trim && !t.read, "{t:?}");
            assert!(!w.trim && !w.read, "{w:?}");
            assert_eq!((t.offset, t.len), (w.offset, w.len));
            assert_eq!(t.offset, (k % 8) * 4096);
        }
        // randtrim: every I/O a trim, the random map visiting each block once.
        let j = job(|s| {
            s.read_pct = 0;
            s.random_map = true;
            s.trim = Trim::Only;
        });
        let mut g = OpGen::new(&j, 0, 64 * 4096, 4096, 0, 1).unwrap();
        assert!(g.trims_counted());
        let mut seen = [0; 64];
        for _ in 0..64 {
            let op = g.next_op();
            assert!(op.trim && !op.read);
            seen[(op.offset / 4096) as usize] += 1;
        }
        assert!(seen.iter().all(|&n| n == 1));
        // A trim job neither reads nor verifies.
        let mut s = JobSpec {
            trim: Trim::Only,
            read_pct: 50,
            ..JobSpec::default()
        };
        assert!(s.clone().validate().is_err());
        s.read_pct = 0;
        assert_eq!(s.clone().validate().unwrap().rw_name(), "randtrim");
        s.verify = true;
        assert!(s.validate().is_err());
    }

    #[test]
    fn sequential_wraps() {
        let j = job(|s| {
            s.pattern = Pattern::Sequential;
            s.sizes = SizeMix::single(4096).unwrap();
        });
        let mut g = OpGen::new(&j, 0, 3 * 4096, 4096, 4096, 0).unwrap();
        let offs: Vec<u64> = (0..5).map(|_| g.next_op().offset).collect();
        assert_eq!(offs, vec![4096, 8192, 0, 4096, 8192]);
    }

    #[test]
    fn random_share_mixes_sequential_runs_in() {
        let j = job(|s| {
            s.random_pct = Some(25);
            s.sizes = SizeMix::single(4096).unwrap();
        });
        let mut g = OpGen::new(&j, 0, 1 << 30, 4096, 0, 11).unwrap();
        // A sequential op lands right after the previous sequential one; count them.
        let n = 200_000;
        let mut seq = 0;
        let mut cursor = 0u64;
        for _ in 0..n {
            let o = g.next_op().offset;
            if o == cursor {
                seq += 1;
                cursor = o + 4096;
            }
        }
        let share = seq as f64 / n as f64 * 100.0;
        assert!((share - 75.0).abs() < 1.0, "sequential share {share}");
    }

    #[test]
    fn uniform_covers_the_region() {
        let j = job(|_| {});
        let mut g = OpGen::new(&j, 0, 64 * 4096, 4096, 0, 5).unwrap();
        let mut seen = [false; 64];
        for _ in 0..10_000 {
            seen[(g.next_op().offset / 4096) as usize] = true;
        }
        assert!(seen.iter().all(|&s| s));
    }
}
