//! The workloads the suites run: the review protocol's synthetic profiles, and our own
//! approximations of the database and VDI mixes the lab never published (see
//! docs/workloads.md for each one's reasoning and sources).

use crate::engine::{Distribution, JobError, JobSpec, Pattern, SizeMix};

use super::result::WorkloadDesc;

/// One workload: what to issue, and how many I/Os to keep outstanding.
#[derive(Debug, Clone, PartialEq)]
pub struct Workload {
    pub name: &'static str,
    pub pattern: Pattern,
    /// Share of random I/O for mixed profiles (None: all random or all sequential).
    pub random_pct: Option<u32>,
    pub bs: &'static str,
    pub read_pct: u32,
    pub distribution: &'static str,
    pub workers: u32,
    pub depth: u32,
}

impl Workload {
    pub const fn new(
        name: &'static str,
        pattern: Pattern,
        bs: &'static str,
        read_pct: u32,
        workers: u32,
        depth: u32,
    ) -> Self {
        Workload {
            name,
            pattern,
            random_pct: None,
            bs,
            read_pct,
            distribution: "uniform",
            workers,
            depth,
        }
    }

    pub fn with(&self, workers: u32, depth: u32) -> Workload {
        Workload {
            workers,
            depth,
            ..self.clone()
        }
    }

    /// The job spec (region and stop are set by the runner).
    pub fn spec(&self) -> Result<JobSpec, JobError> {
        Ok(JobSpec {
            pattern: self.pattern,
            random_pct: self.random_pct,
            sizes: SizeMix::parse(self.bs)?,
            read_pct: self.read_pct,
            distribution: Distribution::parse(self.distribution)?,
            workers: self.workers,
            depth: self.depth,
            ..JobSpec::default()
        })
    }

    pub fn desc(&self) -> WorkloadDesc {
        WorkloadDesc {
            name: self.name.to_string(),
            rw: crate::engine::job::rw_name(self.pattern, self.read_pct).to_string(),
            bs: self.bs.to_string(),
            rwmixread: self.read_pct,
            workers: self.workers,
            depth: self.depth,
            distribution: self.distribution.to_string(),
        }
    }
}

use Pattern::{Random, Sequential};

// The review protocol's profiles at 16 threads x 16 outstanding I/Os (docs/protocol.md,
// "Synthetic workloads").
pub const RAND_READ_4K: Workload = Workload::new("4k-randread", Random, "4k", 100, 16, 16);
pub const RAND_WRITE_4K: Workload = Workload::new("4k-randwrite", Random, "4k", 0, 16, 16);
pub const MIX_70_30_8K: Workload = Workload::new("8k-70-30", Random, "8k", 70, 16, 16);
pub const RAND_READ_8K: Workload = Workload::new("8k-randread", Random, "8k", 100, 16, 16);
pub const RAND_WRITE_8K: Workload = Workload::new("8k-randwrite", Random, "8k", 0, 16, 16);
pub const SEQ_READ_128K: Workload = Workload::new("128k-seqread", Sequential, "128k", 100, 16, 16);
pub const SEQ_WRITE_128K: Workload = Workload::new("128k-seqwrite", Sequential, "128k", 0, 16, 16);

/// The vdbench-style curve workloads (docs/protocol.md, "Curve workloads"), outstanding
/// I/Os as workers x depth.
pub const CURVE_4K_READ: Workload = Workload::new("4k-randread", Random, "4k", 100, 8, 16);
pub const CURVE_4K_WRITE: Workload = Workload::new("4k-randwrite", Random, "4k", 0, 4, 16);
pub const CURVE_64K_READ: Workload = Workload::new("64k-seqread", Sequential, "64k", 100, 1, 16);
pub const CURVE_64K_WRITE: Workload = Workload::new("64k-seqwrite", Sequential, "64k", 0, 1, 8);

/// Our database and VDI approximations (docs/workloads.md). Each keeps 32 I/Os
/// outstanding (4 workers x 8).
const fn app(
    name: &'static str,
    bs: &'static str,
    read_pct: u32,
    random_pct: u32,
    distribution: &'static str,
) -> Workload {
    Workload {
        name,
        pattern: Random,
        random_pct: Some(random_pct),
        bs,
        read_pct,
        distribution,
        workers: 4,
        depth: 8,
    }
}

/// SQL Server OLTP: 8 KiB pages, some 64 KiB read-ahead extents, a 20% hot set.
const SQL_BS: &str = "8k:85,64k:10,512:5";
const SQL_ZONES: &str = "zoned:60/20:40/80";
pub const SQL: Workload = app("sql", SQL_BS, 95, 90, SQL_ZONES);
pub const SQL_90_10: Workload = app("sql-90-10", SQL_BS, 90, 90, SQL_ZONES);
pub const SQL_80_20: Workload = app("sql-80-20", SQL_BS, 80, 90, SQL_ZONES);
/// Oracle OLTP: 8 KiB blocks, 16 KiB and 128 KiB multiblock reads, redo writes.
const ORA_BS: &str = "8k:75,16k:10,128k:10,512:5";
const ORA_ZONES: &str = "zoned:70/20:30/80";
pub const ORACLE: Workload = app("oracle", ORA_BS, 95, 85, ORA_ZONES);
pub const ORACLE_90_10: Workload = app("oracle-90-10", ORA_BS, 90, 85, ORA_ZONES);
pub const ORACLE_80_20: Workload = app("oracle-80-20", ORA_BS, 80, 85, ORA_ZONES);
/// VDI: full clones spread over the whole region; linked clones read a shared replica
/// (a hot 10%) and write to their own deltas.
pub const VDI_FULL_BOOT: Workload = app(
    "vdi-full-boot",
    "4k:60,8k:15,16k:10,32k:10,64k:5",
    90,
    70,
    "uniform",
);
pub const VDI_FULL_LOGIN: Workload = app(
    "vdi-full-initial-login",
    "4k:55,8k:20,16k:10,32k:10,64k:5",
    40,
    80,
    "uniform",
);
pub const VDI_FULL_MONDAY: Workload = app(
    "vdi-full-monday-login",
    "4k:55,8k:20,16k:10,32k:10,64k:5",
    60,
    75,
    "uniform",
);
pub const VDI_LINKED_BOOT: Workload = app(
    "vdi-linked-boot",
    "4k:60,8k:15,16k:10,32k:10,64k:5",
    90,
    70,
    "zoned:80/10:20/90",
);
pub const VDI_LINKED_LOGIN: Workload = app(
    "vdi-linked-initial-login",
    "4k:55,8k:20,16k:10,32k:10,64k:5",
    40,
    80,
    "zoned:60/10:40/90",
);
pub const VDI_LINKED_MONDAY: Workload = app(
    "vdi-linked-monday-login",
    "4k:55,8k:20,16k:10,32k:10,64k:5",
    60,
    75,
    "zoned:70/10:30/90",
);

/// JESD219 enterprise endurance workload: the standard's transfer size mix and its
/// 50/5:30/15:20/80 access skew, 100% random writes.
pub const JESD219: Workload = Workload {
    name: "jesd219",
    pattern: Random,
    random_pct: None,
    bs: "512:4,1k:1,1536:1,2k:1,2560:1,3k:1,3584:1,4k:67,8k:10,16k:7,32k:3,64k:3",
    read_pct: 0,
    distribution: "zoned:50/5:30/15:20/80",
    workers: 4,
    depth: 8,
};

/// Every application mix of the `curves` suite, in order.
pub const APP_MIXES: [Workload; 12] = [
    SQL,
    SQL_90_10,
    SQL_80_20,
    ORACLE,
    ORACLE_90_10,
    ORACLE_80_20,
    VDI_FULL_BOOT,
    VDI_FULL_LOGIN,
    VDI_FULL_MONDAY,
    VDI_LINKED_BOOT,
    VDI_LINKED_LOGIN,
    VDI_LINKED_MONDAY,
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_workload_makes_a_valid_job() {
        let all = [
            RAND_READ_4K,
            RAND_WRITE_4K,
            MIX_70_30_8K,
            RAND_READ_8K,
            RAND_WRITE_8K,
            SEQ_READ_128K,
            SEQ_WRITE_128K,
            CURVE_4K_READ,
            CURVE_4K_WRITE,
            CURVE_64K_READ,
            CURVE_64K_WRITE,
            JESD219,
        ];
        for w in all.iter().chain(APP_MIXES.iter()) {
            let spec = w.spec().unwrap_or_else(|e| panic!("{}: {e}", w.name));
            spec.validate()
                .unwrap_or_else(|e| panic!("{}: {e}", w.name));
        }
        assert_eq!(CURVE_4K_READ.workers * CURVE_4K_READ.depth, 128);
        assert_eq!(CURVE_4K_WRITE.workers * CURVE_4K_WRITE.depth, 64);
        assert_eq!(CURVE_64K_READ.workers * CURVE_64K_READ.depth, 16);
        assert_eq!(CURVE_64K_WRITE.workers * CURVE_64K_WRITE.depth, 8);
        // JESD219's mix adds up to 100.
        assert_eq!(JESD219.spec().unwrap().sizes.total_weight(), 100);
    }
}
