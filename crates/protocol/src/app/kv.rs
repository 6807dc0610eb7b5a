//! The `kv` application workload: RocksDB's `db_bench` (Debian's `rocksdb-tools`) with its
//! database on the drive under test.
//!
//! A fresh database directory `DIR/driveprobe-kv-<pid>-<n>` is loaded with `fillrandom`
//! (the key count set by the scale), then `readwhilewriting` and `overwrite` run for the
//! measured time each on that database (`--use_existing_db=1`). Every phase runs with
//! `--stats_interval_seconds=1 --histogram=1`, compression off and incompressible values
//! (`--compression_type=none --compression_ratio=1`), and with direct I/O for reads,
//! flushes and compactions when the directory's filesystem takes `O_DIRECT` (probed; the
//! result says which). Keys are 20 bytes and values 400, as RocksDB's own
//! `benchmark.sh` has them; the block cache stays at db_bench's 8 MiB, so reads go to
//! the drive.
//!
//! db_bench runs in its own process group under a [`ChildGuard`]: a stop request, a
//! failure or a panic kills the group, and the database directory is removed in every
//! case (a guard's `Drop`). If driveprobe itself is killed outright, the kernel kills
//! db_bench (its parent death signal), and the directory (`driveprobe-kv-<pid>-*` of a
//! pid that no longer runs) is removed at the next start.
//!
//! The guard is metered: what db_bench writes to storage is added to the run's
//! `RunControl` about once a second while it runs (see [`super::IoMeter`]), so the
//! daemon's wear budget counts it. Each point records whether direct I/O was used
//! (`AppPoint::direct_io`).

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::dbbench::{self, DbBenchOutput};
use super::{find_program, free_bytes, AppPoint, ChildGuard, Waited};
use crate::engine::RunControl;

pub const KEY_SIZE: u32 = 20;
pub const VALUE_SIZE: u32 = 400;

#[derive(Debug, thiserror::Error)]
pub enum KvError {
    #[error("db_bench was not found ({0}): install Debian's rocksdb-tools, which provides /usr/bin/db_bench")]
    Missing(String),
    #[error("cannot prepare the database directory in {dir}: {source}")]
    Dir {
        dir: PathBuf,
        source: std::io::Error,
    },
    #[error("{dir} has {free} bytes free, and the kv workload needs about {need}: free some space or run a smaller scale")]
    NoRoom { dir: PathBuf, free: u64, need: u64 },
    #[error("db_bench ran out of room in {dir} during {phase}: {line}")]
    DbBenchNoRoom {
        dir: PathBuf,
        phase: String,
        line: String,
    },
    #[error("cannot start db_bench: {0}")]
    Spawn(std::io::Error),
    #[error("db_bench failed during {phase} ({status}): {line}")]
    DbBench {
        phase: String,
        status: String,
        line: String,
    },
    #[error("cannot read db_bench's output for {phase}: {what}")]
    Parse { phase: String, what: String },
    #[error("db_bench did not finish {phase} within {limit_seconds} s and was killed: is the drive answering?")]
    TimedOut { phase: String, limit_seconds: u64 },
    #[error("the kv run was stopped during {phase}; db_bench was killed and its database removed")]
    Stopped { phase: String },
}

/// Whether db_bench gets direct I/O.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DirectIo {
    /// Direct I/O when the filesystem takes O_DIRECT, buffered otherwise.
    Auto,
    /// Always buffered.
    Off,
}

/// How large and how long.
#[derive(Debug, Clone, PartialEq)]
pub struct KvOptions {
    /// Keys written by the load (`fillrandom`), over a key space of the same size.
    pub keys: u64,
    /// db_bench's `--threads` for every phase (`readwhilewriting` adds its background
    /// writer thread to these readers).
    pub threads: u32,
    /// Seconds of each measured phase (`readwhilewriting`, `overwrite`).
    pub measure_seconds: u64,
    pub direct_io: DirectIo,
    /// The program: `db_bench` (looked up on PATH) or a path.
    pub db_bench: PathBuf,
}

impl KvOptions {
    /// `quick` (200 000 keys, about 84 MB; 2 threads; 5 s per phase: about 15 s here),
    /// `standard` (5 million keys, about 2.1 GB; 4 threads; 60 s), `full` (20 million
    /// keys, about 8.4 GB; 8 threads; 300 s). Any other name gets `standard`.
    pub fn for_scale(scale_name: &str) -> KvOptions {
        let (keys, threads, measure_seconds) = match scale_name {
            "quick" => (200_000, 2, 5),
            "full" => (20_000_000, 8, 300),
            _ => (5_000_000, 4, 60),
        };
        KvOptions {
            keys,
            threads,
            measure_seconds,
            direct_io: DirectIo::Auto,
            db_bench: PathBuf::from("db_bench"),
        }
    }

    /// Bytes of keys and values the load writes.
    pub fn data_bytes(&self) -> u64 {
        self.keys * (KEY_SIZE + VALUE_SIZE) as u64
    }

    /// Room the run needs: the data four times (write-ahead logs, the tables, the
    /// versions `overwrite` adds before compaction drops them, and the tables again while
    /// a compaction rewrites them) and 256 MiB for memtables, level-0 files and logs.
    /// Measured at quick scale on ext4: 442 MiB at the peak (during `overwrite`) for 84 MB
    /// of data; the earlier `2 x data + 64 MiB` (232 MiB) let a 350 MiB filesystem run out
    /// of room. Quick asks for 592 MiB.
    pub fn space_needed(&self) -> u64 {
        4 * self.data_bytes() + (256 << 20)
    }
}

/// A whole kv run: the phases and how they ran.
#[derive(Debug, Clone, PartialEq)]
pub struct KvRun {
    /// `fillrandom`, `readwhilewriting`, `overwrite`, in that order.
    pub points: Vec<AppPoint>,
    /// True when db_bench ran with `--use_direct_reads` and
    /// `--use_direct_io_for_flush_and_compaction`.
    pub direct_io: bool,
    /// Why direct I/O was not used, when it was not.
    pub direct_io_note: Option<String>,
    /// db_bench's RocksDB version (`7.8.3`).
    pub db_bench_version: Option<String>,
}

/// Runs the kv workload in `dir` (the drive's file target directory). Returns the three
/// phases as [`AppPoint`]s.
pub fn run(dir: &Path, opts: &KvOptions, control: &RunControl) -> Result<Vec<AppPoint>, KvError> {
    run_detailed(dir, opts, control).map(|r| r.points)
}

/// [`run`], with how it ran (direct I/O or not, db_bench's version).
pub fn run_detailed(dir: &Path, opts: &KvOptions, control: &RunControl) -> Result<KvRun, KvError> {
    let program = find_program(&[&opts.db_bench], None)
        .ok_or_else(|| KvError::Missing(format!("no {} on PATH", opts.db_bench.display())))?;
    // Databases of a driveprobe that was killed outright.
    super::remove_stale(dir, PREFIX);
    let free = free_bytes(dir).map_err(|source| KvError::Dir {
        dir: dir.to_path_buf(),
        source,
    })?;
    if let Some(free) = free.filter(|f| *f < opts.space_needed()) {
        return Err(KvError::NoRoom {
            dir: dir.to_path_buf(),
            free,
            need: opts.space_needed(),
        });
    }
    let db = DbDir::create(dir)?;
    let (direct_io, direct_io_note) = match opts.direct_io {
        DirectIo::Off => (false, Some("direct I/O turned off".to_string())),
        DirectIo::Auto => match direct_io_supported(db.path()) {
            Ok(()) => (true, None),
            Err(why) => (false, Some(why.to_string())),
        },
    };
    if let Some(why) = &direct_io_note {
        tracing::info!(dir = %dir.display(), %why, "kv: db_bench runs buffered");
    }
    let mut run = KvRun {
        points: Vec::new(),
        direct_io,
        direct_io_note,
        db_bench_version: None,
    };
    let common = |bench: &str| -> Vec<String> {
        let mut a = vec![
            format!("--benchmarks={bench}"),
            format!("--db={}", db.path().display()),
            format!("--num={}", opts.keys),
            format!("--key_size={KEY_SIZE}"),
            format!("--value_size={VALUE_SIZE}"),
            "--compression_type=none".into(),
            "--compression_ratio=1".into(),
            "--stats_interval_seconds=1".into(),
            "--histogram=1".into(),
            format!("--threads={}", opts.threads.max(1)),
        ];
        if direct_io {
            a.push("--use_direct_reads=1".into());
            a.push("--use_direct_io_for_flush_and_compaction=1".into());
        }
        a
    };
    let threads = opts.threads.max(1);
    // The load: every thread writes its share of the keys.
    let mut fill = common("fillrandom");
    fill.push("--use_existing_db=0".into());
    fill.push(format!("--writes={}", opts.keys.div_ceil(threads as u64)));
    // A generous limit: a drive that stalls for minutes is reported, not waited on forever.
    let fill_limit = Duration::from_secs(600 + opts.keys / 2_000);
    let (p, version) = run_phase(&program, "fillrandom", &fill, fill_limit, &db, control)?;
    run.db_bench_version = version;
    run.points.push(p);
    for bench in ["readwhilewriting", "overwrite"] {
        let mut args = common(bench);
        args.push("--use_existing_db=1".into());
        args.push(format!("--duration={}", opts.measure_seconds.max(1)));
        let limit = Duration::from_secs(2 * opts.measure_seconds + 300);
        let (p, _) = run_phase(&program, bench, &args, limit, &db, control)?;
        run.points.push(p);
    }
    drop(db);
    Ok(run)
}

/// Runs db_bench once, reads its output into a point.
fn run_phase(
    program: &Path,
    phase: &str,
    args: &[String],
    limit: Duration,
    db: &DbDir,
    control: &RunControl,
) -> Result<(AppPoint, Option<String>), KvError> {
    if control.is_stopped() {
        return Err(KvError::Stopped {
            phase: phase.to_string(),
        });
    }
    let mut guard = ChildGuard::spawn_metered(
        Command::new(program)
            .args(args)
            .current_dir(db.path())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
        control,
    )
    .map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            KvError::Missing(format!("{}: {e}", program.display()))
        } else {
            KvError::Spawn(e)
        }
    })?;
    // Through a cap: db_bench's results are on stdout, its interval lines on stderr.
    let out_reader = reader(guard.child_mut().stdout.take());
    let err_reader = reader(guard.child_mut().stderr.take());
    let t0 = Instant::now();
    let status = match super::wait(&mut guard, control, limit).map_err(KvError::Spawn)? {
        Waited::Exited(s) => s,
        Waited::Stopped => {
            let _ = guard.stop(Duration::from_secs(2));
            return Err(KvError::Stopped {
                phase: phase.to_string(),
            });
        }
        Waited::TimedOut => {
            let _ = guard.stop(Duration::from_secs(2));
            return Err(KvError::TimedOut {
                phase: phase.to_string(),
                limit_seconds: limit.as_secs(),
            });
        }
    };
    let wall = t0.elapsed().as_secs_f64();
    // Whatever else the group started goes with it, and the pipes close.
    drop(guard);
    let stdout = out_reader.join().unwrap_or_default();
    let stderr = err_reader.join().unwrap_or_default();
    let text = format!("{stdout}\n{stderr}");
    let parsed = dbbench::parse(&text).map_err(|e| KvError::Parse {
        phase: phase.to_string(),
        what: e.to_string(),
    })?;
    if !status.success() || !parsed.errors.is_empty() || parsed.benchmark(phase).is_none() {
        return Err(failure(
            phase,
            &status.to_string(),
            &parsed,
            &text,
            db.path(),
        ));
    }
    let point = point(phase, args, &parsed, wall)?;
    Ok((point, parsed.version))
}

fn failure(phase: &str, status: &str, parsed: &DbBenchOutput, text: &str, dir: &Path) -> KvError {
    // db_bench built with assertions aborts on the write after a failed one, so the
    // last line is then an assertion: look for the cause in the whole output.
    if let Some(line) = text
        .lines()
        .map(str::trim)
        .find(|l| l.contains("No space left"))
    {
        return KvError::DbBenchNoRoom {
            dir: dir.to_path_buf(),
            phase: phase.to_string(),
            line: crate::process::clip(line, super::EXCERPT_BYTES),
        };
    }
    let line = parsed
        .errors
        .first()
        .cloned()
        .or_else(|| {
            text.lines()
                .map(str::trim)
                .rfind(|l| !l.is_empty() && !l.contains(" ... thread "))
                .map(str::to_string)
        })
        .unwrap_or_else(|| "no output".into());
    let line = crate::process::clip(&line, super::EXCERPT_BYTES);
    if parsed.benchmark(phase).is_none() && parsed.errors.is_empty() && status == "exit status: 0" {
        KvError::Parse {
            phase: phase.to_string(),
            what: format!("no result line; the last line was: {line}"),
        }
    } else {
        KvError::DbBench {
            phase: phase.to_string(),
            status: status.to_string(),
            line,
        }
    }
}

/// One phase's point from db_bench's output.
pub fn point(
    phase: &str,
    args: &[String],
    parsed: &DbBenchOutput,
    wall_seconds: f64,
) -> Result<AppPoint, KvError> {
    let perr = |what: &str| KvError::Parse {
        phase: phase.to_string(),
        what: what.to_string(),
    };
    let b = parsed
        .benchmark(phase)
        .ok_or_else(|| perr("no result line"))?;
    let h = b
        .main_histogram()
        .ok_or_else(|| perr("no latency histogram (db_bench needs --histogram=1)"))?;
    let p99 = h
        .p99_us()
        .ok_or_else(|| perr("no latency percentiles (this db_bench is too old to print P99)"))?;
    let threads = args
        .iter()
        .find_map(|a| a.strip_prefix("--threads="))
        .and_then(|t| t.parse().ok())
        .unwrap_or(1);
    let interval = args
        .iter()
        .find_map(|a| a.strip_prefix("--stats_interval_seconds="))
        .and_then(|t| t.parse().ok())
        .unwrap_or(1.0);
    let intervals = dbbench::combine_intervals(
        &parsed.intervals,
        dbbench::has_background_writer(phase),
        interval,
    );
    Ok(AppPoint {
        workload: phase.to_string(),
        threads,
        seconds: b.seconds.unwrap_or(wall_seconds),
        ops_per_second: b.ops_per_second,
        queries_per_second: None,
        // The histogram's average is the time each operation took; db_bench's own
        // micros/op is the same figure computed from thread time (older versions: wall
        // time over operations, which is not a latency). Use it only without a histogram.
        lat_mean_ns: if h.count > 0 {
            h.average_us * 1000.0
        } else {
            b.micros_per_op * 1000.0
        },
        lat_p99_ns: p99 * 1000.0,
        // db_bench prints no percentile per interval.
        lat_p99_avg_ns: None,
        errors: 0,
        reconnects: 0,
        intervals,
        direct_io: Some(args.iter().any(|a| a == "--use_direct_reads=1")),
    })
}

/// Reads a child's pipe to its end on a thread (so a chatty child never blocks on a full
/// pipe), through the cap of [`crate::process::capture`] (the first
/// [`super::OUTPUT_HEAD`] and last [`super::OUTPUT_TAIL`] bytes), as text.
pub(crate) fn reader<R: Read + Send + 'static>(r: Option<R>) -> std::thread::JoinHandle<String> {
    let c = crate::process::capture(r, super::OUTPUT_HEAD, super::OUTPUT_TAIL);
    std::thread::spawn(move || c.join().unwrap_or_default().text())
}

const PREFIX: &str = "driveprobe-kv-";

/// The database directory: created empty, removed with everything in it when dropped.
#[derive(Debug)]
struct DbDir {
    path: PathBuf,
}

impl DbDir {
    fn create(parent: &Path) -> Result<DbDir, KvError> {
        let pid = std::process::id();
        let mut n = 0u32;
        loop {
            let path = parent.join(format!("{PREFIX}{pid}-{n}"));
            match std::fs::create_dir(&path) {
                Ok(()) => return Ok(DbDir { path }),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && n < 1000 => n += 1,
                Err(source) => {
                    return Err(KvError::Dir {
                        dir: parent.to_path_buf(),
                        source,
                    })
                }
            }
        }
    }
    fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for DbDir {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir_all(&self.path) {
            if e.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!(dir = %self.path.display(), error = %e, "kv: cannot remove the database directory");
            }
        }
    }
}

/// Why a directory's filesystem takes no direct I/O ([`direct_io_supported`]).
#[derive(Debug, thiserror::Error)]
pub enum NoDirectIo {
    /// statx says so (its direct I/O alignment is 0).
    #[error("{}: the filesystem does not do direct I/O", .dir.display())]
    NotSupported { dir: PathBuf },
    /// A file cannot be opened with O_DIRECT.
    #[error("{}: the filesystem refuses O_DIRECT ({source})", .dir.display())]
    Refused {
        dir: PathBuf,
        source: std::io::Error,
    },
}

/// Ok when a file in `dir` can be opened with O_DIRECT (and statx does not say the
/// filesystem refuses direct I/O); else why not.
pub fn direct_io_supported(dir: &Path) -> Result<(), NoDirectIo> {
    use std::os::unix::fs::OpenOptionsExt;
    let probe = dir.join(".driveprobe-odirect-probe");
    let r = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .custom_flags(libc::O_DIRECT)
        .open(&probe);
    let result = match r {
        Ok(f) => {
            use rustix::fs::{statx, AtFlags, StatxFlags};
            match statx(&f, "", AtFlags::EMPTY_PATH, StatxFlags::DIOALIGN) {
                Ok(st)
                    if st.stx_mask & StatxFlags::DIOALIGN.bits() != 0
                        && st.stx_dio_offset_align == 0 =>
                {
                    Err(NoDirectIo::NotSupported {
                        dir: dir.to_path_buf(),
                    })
                }
                _ => Ok(()),
            }
        }
        Err(source) => Err(NoDirectIo::Refused {
            dir: dir.to_path_buf(),
            source,
        }),
    };
    let _ = std::fs::remove_file(&probe);
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_o_direct_keeps_the_open_error() {
        let dir = tempfile::tempdir().unwrap();
        let gone = dir.path().join("gone");
        let e = direct_io_supported(&gone).unwrap_err();
        let NoDirectIo::Refused { source, .. } = &e else {
            panic!("{e:?}");
        };
        assert_eq!(source.kind(), std::io::ErrorKind::NotFound);
        let source = std::error::Error::source(&e).expect("a source");
        assert!(source.is::<std::io::Error>(), "{source}");
        assert_eq!(
            e.to_string(),
            format!(
                "{}: the filesystem refuses O_DIRECT ({source})",
                gone.display()
            )
        );
    }

    #[test]
    fn scales() {
        let q = KvOptions::for_scale("quick");
        let s = KvOptions::for_scale("standard");
        let f = KvOptions::for_scale("full");
        assert!(q.keys < s.keys && s.keys < f.keys);
        assert!(q.measure_seconds < s.measure_seconds && s.measure_seconds < f.measure_seconds);
        assert_eq!(KvOptions::for_scale("anything"), s);
        assert_eq!(q.data_bytes(), 200_000 * 420);
        assert!(q.space_needed() > 2 * q.data_bytes());
    }

    #[test]
    fn failure_names_the_no_space_line() {
        let text = "put error: IO error: No space left on device: While appending to file: /x/000004.log: No space left on device\n";
        let parsed = dbbench::parse(text).unwrap();
        let e = failure(
            "fillrandom",
            "exit status: 1",
            &parsed,
            text,
            Path::new("/x"),
        );
        assert!(matches!(e, KvError::DbBenchNoRoom { .. }), "{e}");
        assert!(e.to_string().contains("No space left on device"), "{e}");
        let parsed = dbbench::parse(
            "Invalid argument: /x/db: does not exist (create_if_missing is false)\n",
        )
        .unwrap();
        let e = failure("overwrite", "exit status: 1", &parsed, "", Path::new("/x"));
        assert!(e.to_string().contains("does not exist"), "{e}");
        // An assertion-enabled db_bench aborts on the write after the failed one: the
        // cause is still found and named.
        let text = "put error: IO error: No space left on device: While pwrite to file at offset 7340032: /x/000033.sst: No space left on device
                    db_bench: ./file/writable_file_writer.h:312: rocksdb::IOStatus rocksdb::WritableFileWriter::AssertFalseAndGetStatusForPrevError(): Assertion `sync_without_flush_called_' failed.
";
        let parsed = dbbench::parse(text).unwrap();
        let e = failure(
            "overwrite",
            "signal: 6 (SIGABRT)",
            &parsed,
            text,
            Path::new("/x"),
        );
        assert!(matches!(e, KvError::DbBenchNoRoom { .. }), "{e}");
        assert!(e.to_string().contains("000033.sst: No space left"), "{e}");
    }

    #[test]
    fn a_point_from_a_captured_run() {
        let dir = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
            .join("tests/fixtures/app/db_bench");
        let text = std::fs::read_to_string(dir.join("7.8.3-readwhilewriting.stdout")).unwrap()
            + &std::fs::read_to_string(dir.join("7.8.3-readwhilewriting.stderr")).unwrap();
        let parsed = dbbench::parse(&text).unwrap();
        let p = point(
            "readwhilewriting",
            &["--threads=2".to_string()],
            &parsed,
            99.0,
        )
        .unwrap();
        let b = parsed.benchmark("readwhilewriting").unwrap();
        let h = b.main_histogram().unwrap();
        assert_eq!(p.threads, 2);
        assert_eq!(p.ops_per_second, b.ops_per_second);
        assert_eq!(p.seconds, b.seconds.unwrap());
        assert_eq!(p.lat_mean_ns, h.average_us * 1000.0);
        assert_eq!(p.lat_p99_ns, h.p99_us().unwrap() * 1000.0);
        assert!(!p.intervals.is_empty());
        assert_eq!(p.direct_io, Some(false));
        let direct = [
            "--threads=2".to_string(),
            "--use_direct_reads=1".to_string(),
        ];
        let p = point("readwhilewriting", &direct, &parsed, 99.0).unwrap();
        assert_eq!(p.direct_io, Some(true));
        assert!(point("overwrite", &[], &parsed, 1.0).is_err());
    }
}
