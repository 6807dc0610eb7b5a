//! Application workloads: real programs run with their data on the drive under test
//! (a private MariaDB under sysbench OLTP, RocksDB's db_bench, users' own fio job files),
//! their output parsed into one model that suites, result documents, metrics and reports
//! share with the built-in workloads.
//!
//! Runners start their programs as child processes in their own process group, and a
//! [`ChildGuard`] kills the whole group when it is dropped, so that nothing is left
//! running when a run fails, times out or is interrupted.

pub mod dbbench;
pub mod fio_job;
pub mod kv;
pub mod oltp;
pub mod sysbench;

use schemars::JsonSchema;
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
}

/// A child process started in its own process group. Dropping the guard kills the group
/// (SIGKILL) and reaps the child, so a failed or interrupted run leaves nothing behind.
/// Call [`ChildGuard::stop`] first for a graceful end (SIGTERM, then SIGKILL after a
/// grace period).
#[derive(Debug)]
pub struct ChildGuard {
    child: Option<std::process::Child>,
}

impl ChildGuard {
    /// Starts `cmd` in a new process group.
    pub fn spawn(cmd: &mut std::process::Command) -> std::io::Result<ChildGuard> {
        use std::os::unix::process::CommandExt;
        let child = cmd.process_group(0).spawn()?;
        Ok(ChildGuard { child: Some(child) })
    }

    pub fn id(&self) -> u32 {
        self.child.as_ref().map(|c| c.id()).unwrap_or(0)
    }

    /// The child, to take its pipes or poll it.
    pub fn child_mut(&mut self) -> &mut std::process::Child {
        self.child
            .as_mut()
            .expect("a ChildGuard holds its child until dropped")
    }

    /// SIGTERM to the group, then SIGKILL if the child has not exited within `grace`.
    /// Returns the child's exit status.
    pub fn stop(mut self, grace: std::time::Duration) -> std::io::Result<std::process::ExitStatus> {
        let mut child = self.child.take().expect("a ChildGuard holds its child");
        signal_group(child.id(), rustix::process::Signal::TERM);
        let t0 = std::time::Instant::now();
        loop {
            if let Some(status) = child.try_wait()? {
                // Whatever else the group started goes with it.
                signal_group(child.id(), rustix::process::Signal::KILL);
                return Ok(status);
            }
            if t0.elapsed() >= grace {
                signal_group(child.id(), rustix::process::Signal::KILL);
                return child.wait();
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// Waits for the child to exit by itself, then kills anything left in its group.
    pub fn wait(mut self) -> std::io::Result<std::process::ExitStatus> {
        let mut child = self.child.take().expect("a ChildGuard holds its child");
        let status = child.wait();
        signal_group(child.id(), rustix::process::Signal::KILL);
        status
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            signal_group(child.id(), rustix::process::Signal::KILL);
            let _ = child.wait();
        }
    }
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

/// How a [`wait`] ended.
#[derive(Debug)]
pub enum Waited {
    Exited(std::process::ExitStatus),
    /// The run's control was stopped; the child is still running (its guard ends it).
    Stopped,
    /// The limit passed; the child is still running (its guard ends it).
    TimedOut,
}

/// Waits for the child to exit, for `control` to be stopped, or for `limit`, checking
/// every 25 ms.
pub fn wait(
    g: &mut ChildGuard,
    control: &crate::engine::RunControl,
    limit: std::time::Duration,
) -> std::io::Result<Waited> {
    let t0 = std::time::Instant::now();
    loop {
        if let Some(s) = g.child_mut().try_wait()? {
            return Ok(Waited::Exited(s));
        }
        if control.is_stopped() {
            return Ok(Waited::Stopped);
        }
        if t0.elapsed() >= limit {
            return Ok(Waited::TimedOut);
        }
        std::thread::sleep(std::time::Duration::from_millis(25));
    }
}

fn signal_group(pid: u32, sig: rustix::process::Signal) {
    if let Some(pgid) = rustix::process::Pid::from_raw(pid as i32) {
        // The group may be gone already (ESRCH): nothing to do then.
        let _ = rustix::process::kill_process_group(pgid, sig);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
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
}
