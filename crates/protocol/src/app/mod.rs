//! Application workloads: real programs run with their data on the drive under test
//! (a private MariaDB under sysbench OLTP, RocksDB's db_bench, users' own fio job files),
//! their output parsed into one model that suites, result documents, metrics and reports
//! share with the built-in workloads.
//!
//! Runners start their programs as child processes in their own process group, and a
//! [`ChildGuard`] kills the whole group when it is dropped, so that nothing is left
//! running when a run fails, times out or is interrupted. Each child also gets SIGKILL
//! from the kernel when driveprobe itself dies (`sys::proc::kill_with_parent`), which
//! covers a SIGKILL of driveprobe, where no guard is dropped.
//!
//! A guard made by [`ChildGuard::spawn_metered`] also counts what its process group
//! writes to storage into the run's [`RunControl`](crate::engine::RunControl)
//! (`add_written`), about once a second while it runs and once more before the child is
//! reaped, so the daemon's wear budget sees application writes as they happen and can
//! stop a run that spends it. See [`IoMeter`] for what is counted and what is not.

pub mod dbbench;

pub mod kv;
pub mod oltp;
pub mod sysbench;

use schemars::JsonSchema;

use crate::process::parse_proc_stat;
use serde::{Deserialize, Serialize};

/// One reporting interval of an application run (sysbench's `--report-interval`,
/// db_bench's `--stats_interval_seconds`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AppInterval {
    /// Seconds from the start of the measured run to the end of this interval.
    pub end_seconds: f64,
    /// Transactions (sysbench) or operations (db_bench) per second in this interval.
    pub ops_per_second: f64,
    /// Mean latency in this interval, when the program reports it.
    pub lat_mean_ns: Option<f64>,
    /// 99th-percentile latency in this interval, when the program reports it.
    pub lat_p99_ns: Option<f64>,
}

/// One measured run of an application workload at one thread count.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AppPoint {
    /// What ran: `oltp_read_write` (sysbench), `fillrandom`, `readwhilewriting`,
    /// `overwrite` (db_bench phases).
    pub workload: String,
    pub threads: u32,
    /// Measured seconds.
    pub seconds: f64,
    /// Transactions per second (sysbench) or operations per second (db_bench), averaged
    /// over the measured run.
    pub ops_per_second: f64,
    /// Queries per second (sysbench only).
    pub queries_per_second: Option<f64>,
    pub lat_mean_ns: f64,
    /// The 99th percentile over the whole run, as the program reports it.
    pub lat_p99_ns: f64,
    /// The 99th percentiles of the intervals, averaged (the reviews' "average 99th
    /// percentile latency"), when intervals were reported.
    pub lat_p99_avg_ns: Option<f64>,
    pub errors: u64,
    pub reconnects: u64,
    pub intervals: Vec<AppInterval>,
    /// Whether the program's data went to the drive with direct I/O (`O_DIRECT`, past the
    /// page cache). kv: db_bench's direct reads, flushes and compactions were on (its
    /// write-ahead log is buffered either way); false when the filesystem refuses
    /// `O_DIRECT` (ramfs) or it was turned off. oltp: every InnoDB data file (`ibdata1`,
    /// `*.ibd`) the server had open was opened `O_DIRECT`, as its `/proc/PID/fdinfo` says
    /// (MariaDB asks for it, `innodb_flush_method=O_DIRECT`, and quietly opens them
    /// buffered when the filesystem refuses it, as ramfs does). None: not known (no data
    /// file found open; documents written before this field existed).
    #[serde(default)]
    pub direct_io: Option<bool>,
}

/// A child process started in its own process group (a [`crate::process::Supervised`]:
/// registered, so the daemon's stop ends it too). Dropping the guard kills the group
/// (SIGKILL) and reaps the child, so a failed or interrupted run leaves nothing behind.
/// Call [`ChildGuard::stop`] first for a graceful end (SIGTERM, then SIGKILL after a
/// grace period).
///
/// The child also gets SIGKILL when the thread that spawned it ends
/// ([`crate::sys::proc::kill_with_parent`]): keep a guard on the thread that made it
/// (the runners do: they spawn, wait and drop on the suite's thread, so the guard kills
/// the group before that thread can end, and the signal only matters when driveprobe
/// dies without dropping anything).
///
/// Reap the child only through the guard ([`ChildGuard::try_wait`], [`wait`],
/// [`ChildGuard::stop`], drop), not through [`ChildGuard::child_mut`]: a metered guard
/// reads the group's last writes before the child is reaped.
#[derive(Debug)]
pub struct ChildGuard {
    child: Option<crate::process::Supervised>,
    metering: Option<Metering>,
}

/// A metered guard's counting: its meter, the control it reports to, and the thread that
/// samples once a second.
#[derive(Debug)]
struct Metering {
    meter: std::sync::Arc<std::sync::Mutex<IoMeter>>,
    control: crate::engine::RunControl,
    /// Dropping it ends the sampler thread.
    stop: Option<std::sync::mpsc::Sender<()>>,
    sampler: Option<std::thread::JoinHandle<()>>,
    /// The last count was taken (the child exited): once it is reaped its pid, and so the
    /// group id, may go to another process, whose writes are not ours.
    done: bool,
}

/// The most of a program's stdout or stderr kept from its start (fio's JSON, db_bench's
/// results and interval lines are there); beyond it only the last [`OUTPUT_TAIL`] bytes
/// are kept and the rest is counted (`process::read_capped`).
pub(crate) const OUTPUT_HEAD: usize = 16 << 20;
/// The most of the end of a program's output kept.
pub(crate) const OUTPUT_TAIL: usize = 64 << 10;
/// The most of one line of a program's output put in an error (a log line, a result
/// document's `incomplete_reason`).
pub(crate) const EXCERPT_BYTES: usize = 512;
/// The most of the end of a program's stderr put in an error beside that line.
pub(crate) const ERROR_TAIL_BYTES: usize = 1024;

/// A failed program's output as one bounded line for its error: stderr's lines joined by
/// ` | ` when it is short; else its first line, cut at [`EXCERPT_BYTES`], and the lines of
/// its last [`ERROR_TAIL_BYTES`]. Stdout's first line when stderr is empty.
pub(crate) fn failure_excerpt(
    stderr: &crate::process::Captured,
    stdout: &crate::process::Captured,
) -> String {
    let one_line = |t: &str| {
        t.lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect::<Vec<_>>()
            .join(" | ")
    };
    let Some(first) = stderr.excerpt(EXCERPT_BYTES) else {
        return stdout
            .excerpt(EXCERPT_BYTES)
            .unwrap_or_else(|| "no output".into());
    };
    if stderr.is_whole() && stderr.total <= ERROR_TAIL_BYTES as u64 {
        return one_line(&String::from_utf8_lossy(&stderr.head));
    }
    format!(
        "{first} ... the end of its output: {}",
        one_line(&stderr.tail_text(ERROR_TAIL_BYTES))
    )
}

/// How often a metered guard counts its group's writes while the child runs.
pub const METER_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);

/// One sample of `meter`, its growth added to `control`.
fn count(meter: &std::sync::Mutex<IoMeter>, control: &crate::engine::RunControl) {
    let delta = meter.lock().unwrap_or_else(|p| p.into_inner()).sample();
    if delta > 0 {
        control.add_written(delta);
    }
}

impl Metering {
    fn sample(&self) {
        if !self.done {
            count(&self.meter, &self.control);
        }
    }

    /// Ends the sampler thread; the caller samples once more.
    fn end_sampler(&mut self) {
        self.stop.take();
        if let Some(t) = self.sampler.take() {
            let _ = t.join();
        }
    }
}

impl ChildGuard {
    /// Starts `cmd` in a new process group, with SIGKILL as its parent death signal.
    pub fn spawn(cmd: &mut std::process::Command) -> std::io::Result<ChildGuard> {
        let child = crate::process::spawn(cmd)?;
        Ok(ChildGuard {
            child: Some(child),
            metering: None,
        })
    }

    /// [`ChildGuard::spawn`], and counts what the child's process group writes to
    /// storage into `control` (`add_written`): about once a second on a sampler thread
    /// while it runs, and once more before the child is reaped or killed. See
    /// [`IoMeter`].
    pub fn spawn_metered(
        cmd: &mut std::process::Command,
        control: &crate::engine::RunControl,
    ) -> std::io::Result<ChildGuard> {
        let mut g = ChildGuard::spawn(cmd)?;
        let meter = std::sync::Arc::new(std::sync::Mutex::new(IoMeter::new(g.id())));
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let (m2, c2) = (meter.clone(), control.clone());
        let sampler = std::thread::Builder::new()
            .name("app-io-meter".into())
            .spawn(move || {
                // Until the guard drops the sender.
                while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
                    rx.recv_timeout(METER_INTERVAL)
                {
                    count(&m2, &c2);
                }
            });
        g.metering = Some(Metering {
            meter,
            control: control.clone(),
            stop: Some(tx),
            // Without a sampler thread the guard still counts when the child ends.
            sampler: sampler.ok(),
            done: false,
        });
        Ok(g)
    }

    pub fn id(&self) -> u32 {
        self.child.as_ref().map(|c| c.id()).unwrap_or(0)
    }

    /// The child, to take its pipes. Reap it through the guard, not through this.
    pub fn child_mut(&mut self) -> &mut std::process::Child {
        self.supervised().child_mut()
    }

    fn supervised(&mut self) -> &mut crate::process::Supervised {
        self.child
            .as_mut()
            .expect("a ChildGuard holds its child until dropped")
    }

    /// Bytes the group wrote to storage so far, as counted into the control (0 for a
    /// guard that is not metered).
    pub fn written_bytes(&self) -> u64 {
        self.metering.as_ref().map_or(0, |m| {
            m.meter.lock().unwrap_or_else(|p| p.into_inner()).total()
        })
    }

    /// Counts the group's writes one last time (the sampler ends first). Called while
    /// the child is still unreaped (running or a zombie), whose /proc/PID/io still
    /// holds its counts; after the reap they move to driveprobe's own counters.
    fn final_sample(&mut self) {
        if let Some(m) = self.metering.as_mut() {
            m.end_sampler();
            m.sample();
            m.done = true;
        }
    }

    /// Counts the group's writes now (a metered guard), without ending the sampler.
    fn sample_now(&self) {
        if let Some(m) = self.metering.as_ref() {
            m.sample();
        }
    }

    /// The child's exit status when it has exited (then the rest of its group is killed
    /// and it is reaped), None while it runs. A metered guard counts the group's writes
    /// once more before the reap.
    pub fn try_wait(&mut self) -> std::io::Result<Option<std::process::ExitStatus>> {
        let pid = self.id();
        if self.metering.is_some() && crate::process::exited_unreaped(pid, false) {
            self.final_sample();
        }
        self.supervised().try_wait()
    }

    /// SIGTERM to the group, then SIGKILL if the child has not exited within `grace`.
    /// Returns the child's exit status.
    pub fn stop(mut self, grace: std::time::Duration) -> std::io::Result<std::process::ExitStatus> {
        use crate::process::Waited;
        self.supervised().signal(rustix::process::Signal::TERM);
        let deadline = std::time::Instant::now() + grace;
        match crate::process::wait_until(|| self.try_wait(), Some(deadline), || false)? {
            // Whatever else the group started went with it, before the reap.
            Waited::Exited(status) => Ok(status),
            Waited::Stopped | Waited::TimedOut => self.kill_and_reap(),
        }
    }

    /// Waits for the child to exit by itself, then kills anything left in its group.
    pub fn wait(mut self) -> std::io::Result<std::process::ExitStatus> {
        let pid = self.id();
        if self.metering.is_some() {
            // Blocks until the child has exited, leaving it unreaped for the last count.
            crate::process::exited_unreaped(pid, true);
            self.final_sample();
        }
        // Kills whatever is left of its group, then reaps it.
        self.child
            .take()
            .expect("a ChildGuard holds its child")
            .wait()
    }

    /// Counts, kills the group, counts what the killed leader had written (it is a zombie
    /// until reaped), reaps it.
    fn kill_and_reap(&mut self) -> std::io::Result<std::process::ExitStatus> {
        let mut child = self.child.take().expect("a ChildGuard holds its child");
        let pid = child.id();
        self.sample_now();
        child.signal(rustix::process::Signal::KILL);
        if self.metering.is_some() {
            crate::process::exited_unreaped(pid, true);
            self.final_sample();
        }
        child.kill_and_reap()
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if self.child.is_some() {
            let _ = self.kill_and_reap();
        }
        // A child reaped through `child_mut` (not the guard's way) still ends the sampler.
        if let Some(m) = self.metering.as_mut() {
            m.end_sampler();
        }
    }
}

/// Bytes a process group wrote to storage, from the kernel's per-process I/O accounting:
/// `write_bytes - cancelled_write_bytes` of `/proc/PID/io`, summed over every process whose
/// process group is the guard's (`mariadbd` and its helpers, `db_bench`; a client such as
/// sysbench writes only its log).
///
/// What it is and is not:
///
/// - Process-attributed, not the drive's own counter: it counts bytes the processes sent
///   (direct I/O) or dirtied for writeback (buffered I/O, counted when dirtied, and taken
///   back as `cancelled_write_bytes` when a dirty page is truncated before it is written).
///   The filesystem's journal and metadata writes, writeback by other processes and the
///   drive's own write amplification are not in it; the drive's host-writes counter
///   (SMART) is the authority for wear.
/// - Buffered writes are counted when they dirty the page cache. Pages still dirty when
///   the runner removes the database afterwards are dropped unwritten, and stay counted
///   (the cancellation is driveprobe's own, outside the group): an over-count, on the safe
///   side for a wear budget. So do pages a process of the group deletes while still dirty
///   after a sample saw them (an old write-ahead log), as the total only grows (below).
///   kv at quick scale on ext4 on a loop device counted 1.1 to 1.6 times the device's
///   sectors written, and 0.99 to 1.11 times without the runner's dropped pages; on a
///   host busy with builds, where writeback lags, 1.8 and 1.53 (`tests/apps/kv.rs`).
/// - On tmpfs (and ramfs) `write_bytes` stays 0: there is no block device behind it, so
///   nothing wears and nothing is counted.
/// - A process's count includes the children it reaped (the kernel adds them to the
///   reaper). So the group's total is the sum over its live and zombie processes, plus
///   the last count of each process that went away with no parent in the group to inherit
///   its count (the group leader, reaped by driveprobe; an orphan, reaped by init); a
///   process reaped by a parent in the group is not kept, its parent has its bytes. Writes
///   a process makes after the last sample and before it is reaped by an outsider are
///   lost; the guard takes care of the leader by sampling it unreaped.
/// - The total only grows: each sample reports the increase over the largest total seen,
///   and a process's count is the largest seen.
#[derive(Debug)]
pub struct IoMeter {
    pgid: i32,
    seen: std::collections::HashMap<ProcKey, Seen>,
    /// Bytes of processes that went away with no parent in the group.
    gone: u64,
    /// The largest total seen, reported so far.
    reported: u64,
}

/// A process, told apart from a later one with the same pid by its start time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ProcKey {
    pub pid: i32,
    pub start_ticks: u64,
}

#[derive(Debug, Clone, Copy)]
struct Seen {
    bytes: u64,
    parent_in_group: bool,
}

/// One process of the group as a sample found it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcSample {
    pub key: ProcKey,
    pub ppid: i32,
    /// `write_bytes - cancelled_write_bytes` (0 when more was cancelled than written).
    pub bytes: u64,
}

impl IoMeter {
    /// A meter for the process group `pgid` (the group leader's pid).
    pub fn new(pgid: u32) -> IoMeter {
        IoMeter {
            pgid: pgid as i32,
            seen: Default::default(),
            gone: 0,
            reported: 0,
        }
    }

    /// The largest total seen so far: what has been reported.
    pub fn total(&self) -> u64 {
        self.reported
    }

    /// Reads /proc and returns how much the group's total grew since the last sample.
    pub fn sample(&mut self) -> u64 {
        let procs = scan_group(self.pgid);
        self.account(&procs)
    }

    /// The pure part of [`IoMeter::sample`]: takes the group's processes as one scan found
    /// them and returns the growth of the total.
    pub fn account(&mut self, procs: &[ProcSample]) -> u64 {
        let pids: std::collections::HashSet<i32> = procs.iter().map(|p| p.key.pid).collect();
        let now: std::collections::HashSet<ProcKey> = procs.iter().map(|p| p.key).collect();
        // Processes gone since the last scan: keep the count of those no parent of the
        // group inherited.
        let gone: Vec<ProcKey> = self
            .seen
            .keys()
            .filter(|k| !now.contains(k))
            .copied()
            .collect();
        for k in gone {
            if let Some(s) = self.seen.remove(&k) {
                if !s.parent_in_group {
                    self.gone = self.gone.saturating_add(s.bytes);
                }
            }
        }
        for p in procs {
            let s = self.seen.entry(p.key).or_insert(Seen {
                bytes: 0,
                parent_in_group: false,
            });
            s.bytes = s.bytes.max(p.bytes);
            s.parent_in_group = pids.contains(&p.ppid);
        }
        let total = self
            .seen
            .values()
            .fold(self.gone, |t, s| t.saturating_add(s.bytes));
        let delta = total.saturating_sub(self.reported);
        self.reported = self.reported.max(total);
        delta
    }
}

/// The processes (live or zombie) of process group `pgid`, with their write counts. A
/// process that ends during the scan is left out.
fn scan_group(pgid: i32) -> Vec<ProcSample> {
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in dir.flatten() {
        let name = e.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let Some(st) = parse_proc_stat(&stat) else {
            continue;
        };
        if st.pgrp != pgid {
            continue;
        }
        let Some(bytes) = std::fs::read_to_string(format!("/proc/{pid}/io"))
            .ok()
            .and_then(|t| parse_proc_io(&t))
        else {
            continue;
        };
        out.push(ProcSample {
            key: ProcKey {
                pid,
                start_ticks: st.start_ticks,
            },
            ppid: st.ppid,
            bytes,
        });
    }
    out
}

/// `write_bytes - cancelled_write_bytes` from the text of `/proc/PID/io` (0 when more was
/// cancelled than written); None when `write_bytes` is not there.
pub fn parse_proc_io(text: &str) -> Option<u64> {
    let field = |name: &str| {
        text.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            (k.trim() == name).then(|| v.trim().parse::<u64>().ok())?
        })
    };
    let written = field("write_bytes")?;
    let cancelled = field("cancelled_write_bytes").unwrap_or(0);
    Some(written.saturating_sub(cancelled))
}

/// Removes what a driveprobe that was killed outright left in `dir`: entries named
/// `<prefix><pid>` (optionally followed by `-...` or `.`...) whose pid is not running
/// (no `/proc/<pid>`) and is not ours. A pid that is running, whatever runs it, keeps
/// its entry. Directories go with everything in them; other entries (a socket) are
/// unlinked.
pub(crate) fn remove_stale(dir: &std::path::Path, prefix: &str) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(prefix))
            .and_then(stale_pid)
        else {
            continue;
        };
        if pid == std::process::id() || std::path::Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        let Ok(t) = e.file_type() else {
            continue;
        };
        tracing::info!(path = %e.path().display(), "removing what an earlier run left");
        let r = if t.is_dir() {
            std::fs::remove_dir_all(e.path())
        } else {
            std::fs::remove_file(e.path())
        };
        if let Err(err) = r {
            tracing::warn!(path = %e.path().display(), error = %err, "cannot remove what an earlier run left");
        }
    }
}

/// The pid at the start of `rest` (what follows the prefix): digits, then the end, a `-`
/// or a `.`.
fn stale_pid(rest: &str) -> Option<u32> {
    let end = rest.find(['-', '.']).unwrap_or(rest.len());
    let digits = &rest[..end];
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The first of `names` that is a file: a name with a `/` is taken as a path; the others
/// are looked up in `search` (a PATH-like list) or, without it, in PATH and then the
/// sbin directories (servers such as `mariadbd` live there, off a user's PATH).
pub(crate) fn find_program<S: AsRef<std::ffi::OsStr>>(
    names: &[S],
    search: Option<&std::ffi::OsStr>,
) -> Option<std::path::PathBuf> {
    use std::path::{Path, PathBuf};
    let dirs: Vec<PathBuf> = match search {
        Some(p) => std::env::split_paths(p).collect(),
        None => {
            let mut d: Vec<PathBuf> = std::env::var_os("PATH")
                .map(|p| std::env::split_paths(&p).collect())
                .unwrap_or_default();
            d.extend(["/usr/sbin", "/usr/local/sbin", "/sbin"].map(PathBuf::from));
            d
        }
    };
    names.iter().find_map(|name| {
        let name = Path::new(name.as_ref());
        if name.components().count() > 1 {
            return name.is_file().then(|| name.to_path_buf());
        }
        dirs.iter().map(|d| d.join(name)).find(|p| p.is_file())
    })
}

/// Bytes free for an unprivileged writer in `dir`'s filesystem; None when the filesystem
/// has no size (ramfs and some FUSE filesystems report no blocks at all).
pub(crate) fn free_bytes(dir: &std::path::Path) -> std::io::Result<Option<u64>> {
    let st = rustix::fs::statvfs(dir).map_err(std::io::Error::from)?;
    Ok((st.f_blocks > 0).then(|| st.f_bavail.saturating_mul(st.f_frsize)))
}

/// How a [`wait`] ended (`Stopped`: the run's control was stopped).
pub use crate::process::Waited;

/// Waits for the child to exit, for `control` to be stopped, or for `limit`, by the one
/// wait of [`crate::process::wait_until`] (the guard's `try_wait`, so a metered guard
/// counts before the reap).
pub fn wait(
    g: &mut ChildGuard,
    control: &crate::engine::RunControl,
    limit: std::time::Duration,
) -> std::io::Result<Waited> {
    let deadline = std::time::Instant::now() + limit;
    crate::process::wait_until(|| g.try_wait(), Some(deadline), || control.is_stopped())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The application guard ends its group as [`crate::process::Supervised`] does: every
    /// signal before the leader is reaped, SIGKILL while the exited leader holds the id.
    #[test]
    fn the_guard_kills_the_group_before_the_leader_is_reaped() {
        use driveprobe_core::process::testing::*;
        use std::process::Stdio;
        // The application guard, metered (its last count needs the zombie too): wait and
        // stop.
        let control = crate::engine::RunControl::new();
        let mut g = ChildGuard::spawn_metered(&mut leaves_a_grandchild(), &control).unwrap();
        let (pg, gc) = (
            g.id() as i32,
            first_pid(g.child_mut().stdout.take().unwrap()),
        );
        assert!(g.wait().unwrap().success());
        assert!(poll(Duration::from_secs(10), || !running(gc)));
        assert_signalled_before_the_reap(pg, "ChildGuard::wait");
        let mut g = ChildGuard::spawn_metered(
            Command::new("sh")
                .args(["-c", "sh -c \"trap '' TERM; sleep 600\" & echo $!; wait"])
                .stdout(Stdio::piped()),
            &control,
        )
        .unwrap();
        let (pg, gc) = (
            g.id() as i32,
            first_pid(g.child_mut().stdout.take().unwrap()),
        );
        assert!(poll(Duration::from_secs(5), || running(gc)));
        g.stop(Duration::from_secs(30)).unwrap();
        assert!(poll(Duration::from_secs(10), || !running(gc)));
        assert_signalled_before_the_reap(pg, "ChildGuard::stop");
    }
    use std::process::Command;
    use std::time::Duration;

    fn alive(pid: u32) -> bool {
        std::path::Path::new(&format!("/proc/{pid}")).exists()
            && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .map(|s| s.contains(") Z "))
                .unwrap_or(true)
    }

    #[test]
    fn dropping_the_guard_kills_the_whole_group() {
        // sh starts a grandchild and prints its pid; both must be gone after the drop.
        let mut g = ChildGuard::spawn(
            Command::new("sh")
                .args(["-c", "sleep 600 & echo $!; wait"])
                .stdout(std::process::Stdio::piped()),
        )
        .unwrap();
        let mut line = String::new();
        use std::io::BufRead;
        std::io::BufReader::new(g.child_mut().stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let grandchild: u32 = line.trim().parse().unwrap();
        assert!(alive(grandchild));
        drop(g);
        let t0 = std::time::Instant::now();
        while alive(grandchild) && t0.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(
            !alive(grandchild),
            "the grandchild {grandchild} outlived the guard"
        );
    }

    #[test]
    fn stop_ends_a_child_that_ignores_sigterm() {
        let g =
            ChildGuard::spawn(Command::new("sh").args(["-c", "trap '' TERM; sleep 600"])).unwrap();
        let t0 = std::time::Instant::now();
        let status = g.stop(Duration::from_millis(300)).unwrap();
        assert!(!status.success());
        assert!(t0.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn proc_io_gives_written_minus_cancelled() {
        let text = "rchar: 323934931\nwchar: 323929600\nsyscr: 632687\nsyscw: 632675\nread_bytes: 4096\nwrite_bytes: 323932160\ncancelled_write_bytes: 1000\n";
        assert_eq!(parse_proc_io(text), Some(323_931_160));
        // More cancelled than written (it truncated pages another process dirtied).
        assert_eq!(
            parse_proc_io("write_bytes: 10\ncancelled_write_bytes: 4096\n"),
            Some(0)
        );
        // No cancelled line: all of it.
        assert_eq!(parse_proc_io("write_bytes: 8192\n"), Some(8192));
        // wchar is not write_bytes, and a missing or broken write_bytes is None.
        assert_eq!(parse_proc_io("wchar: 5\ncancelled_write_bytes: 0\n"), None);
        assert_eq!(parse_proc_io("write_bytes: lots\n"), None);
        assert_eq!(parse_proc_io(""), None);
    }

    fn p(pid: i32, start: u64, ppid: i32, bytes: u64) -> ProcSample {
        ProcSample {
            key: ProcKey {
                pid,
                start_ticks: start,
            },
            ppid,
            bytes,
        }
    }

    #[test]
    fn the_meter_counts_each_byte_once_as_children_are_reaped() {
        // 100 is the leader (its parent, 1, is driveprobe: not in the group).
        let mut m = IoMeter::new(100);
        assert_eq!(m.account(&[p(100, 1, 1, 1000)]), 1000);
        // A child appears and writes.
        assert_eq!(m.account(&[p(100, 1, 1, 1500), p(101, 2, 100, 300)]), 800);
        // The leader reaps it: its 400 move into the leader's count, and are not counted
        // twice.
        assert_eq!(m.account(&[p(100, 1, 1, 1500 + 400)]), 100);
        assert_eq!(m.total(), 1900);
        // A scan that missed the child's count (reaped between the reads): nothing goes
        // back, nothing is reported twice.
        assert_eq!(m.account(&[p(100, 1, 1, 1900), p(102, 5, 100, 50)]), 50);
        assert_eq!(m.account(&[p(100, 1, 1, 1900)]), 0);
        assert_eq!(m.account(&[p(100, 1, 1, 1950)]), 0);
        assert_eq!(m.total(), 1950);
        // An orphan (its parent gone, reparented to init) keeps its count when it goes.
        assert_eq!(m.account(&[p(100, 1, 1, 1950), p(103, 6, 1, 500)]), 500);
        // The leader ends (driveprobe reaps it): its last count stays.
        assert_eq!(m.account(&[p(103, 6, 1, 600)]), 100);
        assert_eq!(m.account(&[]), 0);
        assert_eq!(m.total(), 2550);
        // A new process with a reused pid is another process.
        assert_eq!(m.account(&[p(103, 9, 1, 10)]), 10);
        // A count that shrinks (cancelled writes) keeps the largest seen.
        assert_eq!(m.account(&[p(103, 9, 1, 5)]), 0);
        assert_eq!(m.total(), 2560);
    }

    #[test]
    fn a_metered_guard_reads_its_group_and_reports_into_the_control() {
        // On tmpfs (or any filesystem here) a shell writing nothing to a block device
        // counts 0 or a little; what is proven here is the plumbing: the meter finds the
        // group, and waiting through the guard keeps the count it had before the reap.
        let control = crate::engine::RunControl::new();
        let mut g =
            ChildGuard::spawn_metered(Command::new("sh").args(["-c", "sleep 0.3"]), &control)
                .unwrap();
        let pgid = g.id() as i32;
        let found = scan_group(pgid);
        assert!(
            found.iter().any(|s| s.key.pid == pgid),
            "the leader is in its group: {found:?}"
        );
        let st = loop {
            if let Some(st) = g.try_wait().unwrap() {
                break st;
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        assert!(st.success());
        assert_eq!(g.written_bytes(), control.written_bytes());
        drop(g);
    }

    #[test]
    fn a_killed_metered_child_is_reaped_by_the_drop() {
        let control = crate::engine::RunControl::new();
        let g = ChildGuard::spawn_metered(Command::new("sleep").arg("600"), &control).unwrap();
        let pid = g.id();
        let t0 = std::time::Instant::now();
        drop(g);
        assert!(t0.elapsed() < Duration::from_secs(5));
        // Reaped: no zombie left under our pid.
        assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists());
    }

    #[test]
    fn a_point_from_an_older_document_has_no_direct_io() {
        let old = r#"{"workload":"overwrite","threads":2,"seconds":5.0,"ops_per_second":9.0,
            "queries_per_second":null,"lat_mean_ns":1.0,"lat_p99_ns":2.0,"lat_p99_avg_ns":null,
            "errors":0,"reconnects":0,"intervals":[]}"#;
        let p: AppPoint = serde_json::from_str(old).unwrap();
        assert_eq!(p.direct_io, None);
        let mut q = p.clone();
        q.direct_io = Some(true);
        let back: AppPoint = serde_json::from_str(&serde_json::to_string(&q).unwrap()).unwrap();
        assert_eq!(back, q);
    }

    #[test]
    fn stale_names_give_their_pid() {
        assert_eq!(stale_pid("123"), Some(123));
        assert_eq!(stale_pid("123-0"), Some(123));
        assert_eq!(stale_pid("123.sock"), Some(123));
        assert_eq!(stale_pid(""), None);
        assert_eq!(stale_pid("-1"), None);
        assert_eq!(stale_pid("12a"), None);
        assert_eq!(stale_pid("x-123"), None);
    }

    #[test]
    fn only_the_leftovers_of_dead_processes_are_removed() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        // 4194305 is above the kernel's largest pid: never running.
        let dead_dir = d.join("driveprobe-test-4194305");
        let dead_sock = d.join("driveprobe-test-4194305.sock");
        let dead_n = d.join("driveprobe-test-4194305-3");
        let mine = d.join(format!("driveprobe-test-{}", std::process::id()));
        // pid 1 is always running.
        let live = d.join("driveprobe-test-1-0");
        let other = d.join("driveprobe-other-4194305");
        let odd = d.join("driveprobe-test-x4194305");
        for p in [&dead_dir, &dead_n, &mine, &live, &other, &odd] {
            std::fs::create_dir(p).unwrap();
            std::fs::write(p.join("data"), b"x").unwrap();
        }
        std::fs::write(&dead_sock, b"").unwrap();
        remove_stale(d, "driveprobe-test-");
        for p in [&dead_dir, &dead_sock, &dead_n] {
            assert!(!p.exists(), "{} was left", p.display());
        }
        for p in [&mine, &live, &other, &odd] {
            assert!(p.exists(), "{} was removed", p.display());
        }
        // A missing directory is nothing to do.
        remove_stale(&d.join("none"), "driveprobe-test-");
    }
}
