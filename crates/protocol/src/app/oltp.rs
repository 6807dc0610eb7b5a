//! The `oltp` workload: sysbench `oltp_read_write` against a private MariaDB whose datadir
//! is on the drive under test.
//!
//! `run` makes `<dir>/driveprobe-oltp-<pid>`, initialises it with `mariadb-install-db`,
//! starts `mariadbd` as a child (its own process group, a [`ChildGuard`]) listening on a
//! Unix socket only, with a small buffer pool and `O_DIRECT` so that the drive (not the
//! page cache) answers, prepares the tables, warms up, then measures one sysbench run per
//! thread count. Every path out (success, failure, a stop through the `RunControl`) kills
//! sysbench, shuts MariaDB down and removes the datadir.
//!
//! If driveprobe itself is killed outright, the kernel kills `mariadbd` and sysbench (their
//! parent death signal, see `sys::proc`), and the datadir (`driveprobe-oltp-<pid>` of a
//! pid that no longer runs, and its socket in the temp dir when it was put there) is
//! removed by the next oltp run in that directory.
//!
//! Every child runs under a metered guard: what MariaDB (and the rest) write to storage
//! is added to the run's `RunControl` about once a second, so the daemon's wear budget
//! counts it (see [`super::IoMeter`]). Whether InnoDB's data files really were opened
//! with `O_DIRECT` is read from the server's open files (`/proc/PID/fdinfo`) and recorded
//! in each point (`AppPoint::direct_io`).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::sysbench::{self, SysbenchParseError};
use super::{find_program, free_bytes, wait, AppPoint, ChildGuard, Waited};
use crate::engine::RunControl;

/// The sysbench test run.
pub const WORKLOAD: &str = "oltp_read_write";

/// The datadir is `<dir>/driveprobe-oltp-<pid>`.
const PREFIX: &str = "driveprobe-oltp-";

#[derive(Debug, thiserror::Error)]
pub enum OltpError {
    #[error("oltp needs {program} (Debian package {package}), and it was not found in PATH or /usr/sbin: install it (apt-get install {package})")]
    Missing {
        program: &'static str,
        package: &'static str,
    },
    #[error("oltp puts its database in {0}, which is not a directory: give a file target on the drive's filesystem")]
    NotADirectory(PathBuf),
    #[error("oltp needs about {need} free in {dir} for its database and the filesystem has {free}: free some space or use a smaller --scale")]
    NoRoom {
        dir: PathBuf,
        need: String,
        free: String,
    },
    #[error("oltp: {what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
    #[error("oltp: mariadb-install-db failed ({status}); its output ends: {tail}")]
    Install { status: String, tail: String },
    #[error("oltp: MariaDB did not start ({why}); its error log ends: {tail}")]
    ServerStart { why: String, tail: String },
    #[error("oltp: sysbench {step} failed ({status}): {reason}")]
    Sysbench {
        step: String,
        status: String,
        reason: String,
    },
    #[error("oltp: sysbench {step} did not finish within {limit_s} s: the drive may be stalled")]
    Timeout { step: String, limit_s: u64 },
    #[error("oltp: sysbench at {threads} threads: {source}")]
    Parse {
        threads: u32,
        source: SysbenchParseError,
    },
    #[error("oltp: MariaDB exited during the run; its error log ends: {tail}")]
    ServerDied { tail: String },
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> OltpError {
    let what = what.into();
    move |source| OltpError::Io { what, source }
}

/// How big and how long.
#[derive(Debug, Clone, PartialEq)]
pub struct OltpOptions {
    pub tables: u32,
    pub table_size: u32,
    /// Unmeasured run at the largest thread count after prepare.
    pub warmup: Duration,
    /// Length of each measured run.
    pub time: Duration,
    /// One measured run per thread count, in order.
    pub threads: Vec<u32>,
    pub buffer_pool_mib: u32,
    pub log_file_mib: u32,
    /// Extra `mariadbd` options (appended last).
    pub server_args: Vec<String>,
    /// Where to look for the programs (`None`: `$PATH`, then `/usr/sbin`, `/usr/local/sbin`,
    /// `/sbin`, where Debian puts `mariadbd`).
    pub search_path: Option<OsString>,
}

impl OltpOptions {
    /// The review's thread counts and the scale's sizes: `quick` (about 15 s here: 4
    /// tables of 20k rows, 2 and 8 threads for 3 s), `standard` (8 x 250k rows, 2..32
    /// threads for 60 s), `full` (16 x 1M rows, 2..32 threads for 300 s). Unknown names
    /// get `standard`.
    pub fn for_scale(scale_name: &str) -> OltpOptions {
        let review = vec![2, 4, 8, 16, 32];
        match scale_name {
            "quick" => OltpOptions {
                tables: 4,
                table_size: 20_000,
                warmup: Duration::from_secs(2),
                time: Duration::from_secs(3),
                threads: vec![2, 8],
                buffer_pool_mib: 16,
                log_file_mib: 16,
                server_args: Vec::new(),
                search_path: None,
            },
            "full" => OltpOptions {
                tables: 16,
                table_size: 1_000_000,
                warmup: Duration::from_secs(120),
                time: Duration::from_secs(300),
                threads: review,
                buffer_pool_mib: 32,
                log_file_mib: 64,
                server_args: Vec::new(),
                search_path: None,
            },
            _ => OltpOptions {
                tables: 8,
                table_size: 250_000,
                warmup: Duration::from_secs(30),
                time: Duration::from_secs(60),
                threads: review,
                buffer_pool_mib: 32,
                log_file_mib: 32,
                server_args: Vec::new(),
                search_path: None,
            },
        }
    }

    /// Bytes the datadir needs, roughly: the tables (about 300 bytes a row with the
    /// secondary index and free space), the redo log, the system tables.
    pub fn space_needed(&self) -> u64 {
        self.tables as u64 * self.table_size as u64 * 300
            + self.log_file_mib as u64 * (1 << 20)
            + (128 << 20)
    }
}

struct Programs {
    install_db: PathBuf,
    mariadbd: PathBuf,
    sysbench: PathBuf,
}

fn programs(opts: &OltpOptions) -> Result<Programs, OltpError> {
    let s = &opts.search_path;
    let mariadbd =
        find_program(&["mariadbd", "mysqld"], s.as_deref()).ok_or(OltpError::Missing {
            program: "mariadbd",
            package: "mariadb-server",
        })?;
    let install_db = find_program(&["mariadb-install-db", "mysql_install_db"], s.as_deref())
        .ok_or(OltpError::Missing {
            program: "mariadb-install-db",
            package: "mariadb-server",
        })?;
    let sysbench = find_program(&["sysbench"], s.as_deref()).ok_or(OltpError::Missing {
        program: "sysbench",
        package: "sysbench",
    })?;
    Ok(Programs {
        install_db,
        mariadbd,
        sysbench,
    })
}

/// The datadir (and a socket placed outside it when its path would be too long for a
/// Unix socket): removed when dropped, whatever happened.
struct DataDir {
    path: PathBuf,
    socket: PathBuf,
}

impl Drop for DataDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
        let _ = std::fs::remove_file(&self.socket);
    }
}

/// The last lines of a log file, joined with " | " (one line for an error message).
fn tail(path: &Path, lines: usize) -> String {
    // A log can grow without bound: read through a cap, and bound what goes in the error.
    let text = crate::process::read_file_capped(path, 2 * super::OUTPUT_TAIL).unwrap_or_default();
    let v: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let start = v.len().saturating_sub(lines);
    let s = v[start..]
        .iter()
        .map(|l| crate::process::clip(l, super::EXCERPT_BYTES))
        .collect::<Vec<_>>()
        .join(" | ");
    if s.is_empty() {
        "(empty)".to_string()
    } else {
        s
    }
}

fn output_file(path: &Path) -> Result<(Stdio, Stdio), OltpError> {
    let f = std::fs::File::create(path).map_err(io(format!("create {}", path.display())))?;
    let e = f
        .try_clone()
        .map_err(io(format!("open {}", path.display())))?;
    Ok((Stdio::from(f), Stdio::from(e)))
}

/// A running private server.
struct Server {
    guard: ChildGuard,
    log: PathBuf,
}

impl Server {
    /// Checks the server is still there.
    fn alive(&mut self) -> Result<(), OltpError> {
        match self.guard.try_wait() {
            Ok(None) => Ok(()),
            _ => Err(OltpError::ServerDied {
                tail: tail(&self.log, 8),
            }),
        }
    }

    /// A clean shutdown (SIGTERM: InnoDB flushes and exits), SIGKILL after a grace.
    fn shutdown(self) {
        let _ = self.guard.stop(Duration::from_secs(60));
    }
}

/// Runs the `oltp` workload with its datadir under `dir` (a directory on the drive under
/// test). Returns one point per thread count measured; when `control` is stopped, the
/// points measured so far (the run cut short is dropped). Nothing is left running and
/// the datadir is removed on every path out.
pub fn run(
    dir: &Path,
    opts: &OltpOptions,
    control: &RunControl,
) -> Result<Vec<AppPoint>, OltpError> {
    run_observed(dir, opts, control, &mut |_| {})
}

/// [`run`], telling `on_event` what it is doing (`prepare`, `warm-up`, `2 threads`...).
pub fn run_observed(
    dir: &Path,
    opts: &OltpOptions,
    control: &RunControl,
    on_event: &mut dyn FnMut(&str),
) -> Result<Vec<AppPoint>, OltpError> {
    let progs = programs(opts)?;
    let absolute = absolute_dir(dir)?;
    let dir = absolute.as_path();
    // Datadirs (and sockets) of a driveprobe that was killed outright.
    super::remove_stale(dir, PREFIX);
    super::remove_stale(&std::env::temp_dir(), PREFIX);
    if control.is_stopped() {
        return Ok(Vec::new());
    }
    check_room(dir, opts)?;
    let datadir = make_datadir(dir)?;
    let root = rustix::process::geteuid().is_root();

    // The system tables.
    on_event("initialise the datadir");
    if !install_system_tables(&progs, &datadir, opts, control, root)? {
        return Ok(Vec::new());
    }

    // The server.
    on_event("start MariaDB");
    let server = spawn_server(&progs, &datadir, opts, control, root)?;
    let Some(mut server) = await_socket(server, &datadir.socket, control)? else {
        return Ok(Vec::new());
    };

    let direct_io = innodb_direct_io(server.guard.id(), &datadir.path);
    let result = measure(&progs, &datadir, &mut server, opts, control, on_event);
    server.shutdown();
    drop(datadir);
    result.map(|mut points| {
        for p in &mut points {
            p.direct_io = direct_io;
        }
        points
    })
}

/// Checks that `dir` is a directory and returns its absolute path.
fn absolute_dir(dir: &Path) -> Result<PathBuf, OltpError> {
    if !dir.is_dir() {
        return Err(OltpError::NotADirectory(dir.to_path_buf()));
    }
    // mariadbd changes into its datadir before it opens the paths it is given (socket,
    // pid file, error log), so a relative directory would point elsewhere.
    std::path::absolute(dir).map_err(|_| OltpError::NotADirectory(dir.to_path_buf()))
}

/// Fails when the filesystem of `dir` has too little free space for the database.
fn check_room(dir: &Path, opts: &OltpOptions) -> Result<(), OltpError> {
    let need = opts.space_needed();
    if let Some(free) = free_bytes(dir).ok().flatten() {
        if free < need {
            return Err(OltpError::NoRoom {
                dir: dir.to_path_buf(),
                need: crate::units::format_size(need),
                free: crate::units::format_size(free),
            });
        }
    }
    Ok(())
}

/// Creates this process's empty datadir under `dir` and picks its socket path.
fn make_datadir(dir: &Path) -> Result<DataDir, OltpError> {
    let path = dir.join(format!("{PREFIX}{}", std::process::id()));
    // A leftover of an earlier run of this pid (a kill -9) is ours to remove.
    if path.exists() {
        std::fs::remove_dir_all(&path).map_err(io(format!("remove {}", path.display())))?;
    }
    std::fs::create_dir(&path).map_err(io(format!("create {}", path.display())))?;
    let mut socket = path.join("mysqld.sock");
    if socket.as_os_str().len() > 100 {
        socket = std::env::temp_dir().join(format!("{PREFIX}{}.sock", std::process::id()));
    }
    Ok(DataDir { path, socket })
}

/// Runs `mariadb-install-db` to create the system tables; `Ok(false)`: stopped.
fn install_system_tables(
    progs: &Programs,
    datadir: &DataDir,
    opts: &OltpOptions,
    control: &RunControl,
    root: bool,
) -> Result<bool, OltpError> {
    let install_log = datadir.path.join("install.log");
    let (out, err) = output_file(&install_log)?;
    let mut cmd = Command::new(&progs.install_db);
    cmd.arg("--no-defaults")
        .arg(format!("--datadir={}", datadir.path.display()))
        .arg("--auth-root-authentication-method=normal")
        .arg("--skip-test-db")
        .arg(format!("--innodb-log-file-size={}M", opts.log_file_mib))
        .arg(format!(
            "--innodb-buffer-pool-size={}M",
            opts.buffer_pool_mib
        ))
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err);
    if root {
        cmd.arg("--user=root");
    }
    let mut g =
        ChildGuard::spawn_metered(&mut cmd, control).map_err(io("start mariadb-install-db"))?;
    match wait(&mut g, control, Duration::from_secs(300)).map_err(io("mariadb-install-db"))? {
        Waited::Exited(s) if s.success() => {}
        Waited::Exited(s) => {
            return Err(OltpError::Install {
                status: s.to_string(),
                tail: tail(&install_log, 6),
            })
        }
        Waited::Stopped => return Ok(false),
        Waited::TimedOut => {
            return Err(OltpError::Install {
                status: "no end within 300 s".into(),
                tail: tail(&install_log, 6),
            })
        }
    }
    drop(g);
    Ok(true)
}

/// Writes the init file and starts `mariadbd` on the datadir, listening on its socket only.
fn spawn_server(
    progs: &Programs,
    datadir: &DataDir,
    opts: &OltpOptions,
    control: &RunControl,
    root: bool,
) -> Result<Server, OltpError> {
    let init = datadir.path.join("init.sql");
    std::fs::write(&init, "CREATE DATABASE IF NOT EXISTS sbtest;\n")
        .map_err(io(format!("write {}", init.display())))?;
    let log = datadir.path.join("error.log");
    let mut cmd = Command::new(&progs.mariadbd);
    cmd.arg("--no-defaults")
        .arg(format!("--datadir={}", datadir.path.display()))
        .arg(format!("--socket={}", datadir.socket.display()))
        .arg(format!(
            "--pid-file={}",
            datadir.path.join("mysqld.pid").display()
        ))
        .arg(format!("--log-error={}", log.display()))
        .arg(format!("--init-file={}", init.display()))
        .arg("--skip-networking")
        .arg("--skip-log-bin")
        .arg("--innodb-flush-method=O_DIRECT")
        .arg(format!(
            "--innodb-buffer-pool-size={}M",
            opts.buffer_pool_mib
        ))
        .arg(format!("--innodb-log-file-size={}M", opts.log_file_mib))
        .arg("--max-connections=200")
        .args(&opts.server_args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    if root {
        cmd.arg("--user=root");
    }
    let guard = ChildGuard::spawn_metered(&mut cmd, control).map_err(io("start mariadbd"))?;
    Ok(Server { guard, log })
}

/// Waits up to 120 s for the server to accept connections on `socket`; `Ok(None)`: stopped
/// (the server is then shut down).
fn await_socket(
    mut server: Server,
    socket: &Path,
    control: &RunControl,
) -> Result<Option<Server>, OltpError> {
    let t0 = Instant::now();
    loop {
        if let Ok(Some(s)) = server.guard.try_wait() {
            return Err(OltpError::ServerStart {
                why: format!("mariadbd exited, {s}"),
                tail: tail(&server.log, 6),
            });
        }
        if std::os::unix::net::UnixStream::connect(socket).is_ok() {
            return Ok(Some(server));
        }
        if control.is_stopped() {
            server.shutdown();
            return Ok(None);
        }
        if t0.elapsed() > Duration::from_secs(120) {
            let tail = tail(&server.log, 6);
            drop(server);
            return Err(OltpError::ServerStart {
                why: "no socket within 120 s".into(),
                tail,
            });
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Whether the server `pid` has InnoDB's data files (`ibdata1`, `*.ibd`) under `datadir`
/// open with `O_DIRECT`, from `/proc/PID/fd` and `fdinfo`: Some(true) when every one is,
/// Some(false) when one is not (MariaDB opens them buffered without a word when the
/// filesystem refuses `O_DIRECT`, as ramfs does), None when none is found or /proc cannot
/// be read.
fn innodb_direct_io(pid: u32, datadir: &Path) -> Option<bool> {
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?;
    let mut found = Vec::new();
    for e in fds.flatten() {
        let Ok(target) = std::fs::read_link(e.path()) else {
            continue;
        };
        let data = target.starts_with(datadir)
            && (target.file_name().is_some_and(|n| n == "ibdata1")
                || target.extension().is_some_and(|x| x == "ibd"));
        if !data {
            continue;
        }
        let info = std::fs::read_to_string(format!(
            "/proc/{pid}/fdinfo/{}",
            e.file_name().to_string_lossy()
        ));
        if let Some(flags) = info.ok().as_deref().and_then(fdinfo_flags) {
            found.push(flags & libc::O_DIRECT as u32 != 0);
        }
    }
    (!found.is_empty()).then(|| found.iter().all(|d| *d))
}

/// The `flags:` line of `/proc/PID/fdinfo/FD` (octal), the descriptor's open flags.
fn fdinfo_flags(text: &str) -> Option<u32> {
    text.lines()
        .find_map(|l| l.strip_prefix("flags:"))
        .and_then(|v| u32::from_str_radix(v.trim(), 8).ok())
}

fn sysbench_cmd(progs: &Programs, datadir: &DataDir, opts: &OltpOptions) -> Command {
    let mut cmd = Command::new(&progs.sysbench);
    cmd.arg(WORKLOAD)
        .arg("--db-driver=mysql")
        .arg(format!("--mysql-socket={}", datadir.socket.display()))
        .arg("--mysql-user=root")
        .arg("--mysql-db=sbtest")
        .arg(format!("--tables={}", opts.tables))
        .arg(format!("--table-size={}", opts.table_size))
        .stdin(Stdio::null());
    cmd
}

/// Runs one sysbench command to its end; returns its output. `Ok(None)`: stopped.
fn sysbench_step(
    mut cmd: Command,
    step: &str,
    out_path: &Path,
    limit: Duration,
    server: &mut Server,
    control: &RunControl,
) -> Result<Option<String>, OltpError> {
    let (out, err) = output_file(out_path)?;
    cmd.stdout(out).stderr(err);
    let mut g = ChildGuard::spawn_metered(&mut cmd, control).map_err(io("start sysbench"))?;
    let waited = wait(&mut g, control, limit).map_err(io("sysbench"))?;
    drop(g);
    let text = crate::process::read_file_capped(out_path, super::OUTPUT_HEAD).unwrap_or_default();
    match waited {
        Waited::Stopped => Ok(None),
        Waited::TimedOut => Err(OltpError::Timeout {
            step: step.to_string(),
            limit_s: limit.as_secs(),
        }),
        Waited::Exited(s) if s.success() => Ok(Some(text)),
        Waited::Exited(s) => {
            server.alive()?;
            let fatal = sysbench::fatal_lines(&text);
            let reason = match fatal.iter().find(|l| l.contains("error ")) {
                Some(l) => l.clone(),
                None => fatal.last().cloned().unwrap_or_else(|| {
                    text.lines()
                        .rev()
                        .find(|l| !l.trim().is_empty())
                        .unwrap_or("no output")
                        .trim()
                        .to_string()
                }),
            };
            Err(OltpError::Sysbench {
                step: step.to_string(),
                status: s.to_string(),
                reason: crate::process::clip(&reason, super::EXCERPT_BYTES),
            })
        }
    }
}

fn measure(
    progs: &Programs,
    datadir: &DataDir,
    server: &mut Server,
    opts: &OltpOptions,
    control: &RunControl,
    on_event: &mut dyn FnMut(&str),
) -> Result<Vec<AppPoint>, OltpError> {
    // Prepare: loading is bound by the drive too; allow generously for slow drives.
    on_event(&format!(
        "prepare {} tables of {} rows",
        opts.tables, opts.table_size
    ));
    let rows = opts.tables as u64 * opts.table_size as u64;
    let limit = Duration::from_secs(120 + rows / 2_000);
    let mut cmd = sysbench_cmd(progs, datadir, opts);
    cmd.arg(format!("--threads={}", opts.tables.clamp(1, 4)))
        .arg("prepare");
    let prep = datadir.path.join("prepare.log");
    if sysbench_step(cmd, "prepare", &prep, limit, server, control)?.is_none() {
        return Ok(Vec::new());
    }
    let max_threads = opts.threads.iter().copied().max().unwrap_or(1).max(1);
    let margin = Duration::from_secs(120);
    if !opts.warmup.is_zero() {
        on_event(&format!("warm-up at {max_threads} threads"));
        let mut cmd = sysbench_cmd(progs, datadir, opts);
        cmd.arg(format!("--threads={max_threads}"))
            .arg(format!("--time={}", opts.warmup.as_secs().max(1)))
            .arg("run");
        let log = datadir.path.join("warmup.log");
        if sysbench_step(cmd, "warm-up", &log, opts.warmup + margin, server, control)?.is_none() {
            return Ok(Vec::new());
        }
    }
    let mut points = Vec::new();
    for &threads in &opts.threads {
        if control.is_stopped() {
            break;
        }
        on_event(&format!("{threads} threads"));
        let mut cmd = sysbench_cmd(progs, datadir, opts);
        cmd.arg(format!("--threads={threads}"))
            .arg(format!("--time={}", opts.time.as_secs().max(1)))
            .arg("--percentile=99")
            .arg("--report-interval=1")
            .arg("run");
        let log = datadir.path.join(format!("run-{threads}.log"));
        let step = format!("run at {threads} threads");
        let Some(text) = sysbench_step(cmd, &step, &log, opts.time + margin, server, control)?
        else {
            break;
        };
        let run = sysbench::parse(&text).map_err(|source| OltpError::Parse { threads, source })?;
        points.push(run.to_point(WORKLOAD, threads));
    }
    Ok(points)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scales_grow_and_quick_uses_two_and_eight_threads() {
        let q = OltpOptions::for_scale("quick");
        let s = OltpOptions::for_scale("standard");
        let f = OltpOptions::for_scale("full");
        assert_eq!(q.threads, [2, 8]);
        assert_eq!(s.threads, [2, 4, 8, 16, 32]);
        assert!(q.space_needed() < s.space_needed() && s.space_needed() < f.space_needed());
        assert!(q.time < s.time && s.time < f.time);
        assert_eq!(OltpOptions::for_scale("nope"), s);
    }

    #[test]
    fn missing_programs_are_one_clear_line_and_leave_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let mut o = OltpOptions::for_scale("quick");
        o.search_path = Some(dir.path().as_os_str().to_owned());
        let e = run(dir.path(), &o, &RunControl::new()).unwrap_err();
        let msg = e.to_string();
        assert!(
            matches!(
                e,
                OltpError::Missing {
                    program: "mariadbd",
                    ..
                }
            ),
            "{msg}"
        );
        assert!(msg.contains("apt-get install mariadb-server"), "{msg}");
        assert!(!msg.contains('\n'));
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    fn need_programs() {
        for (p, pkg) in [("mariadbd", "mariadb-server"), ("sysbench", "sysbench")] {
            assert!(
                find_program(&[p], None).is_some(),
                "needs {p}: apt-get install {pkg} (scripts/test installs it)"
            );
        }
    }

    /// A temp dir on a real filesystem (InnoDB's O_DIRECT fails on tmpfs).
    fn disk_dir() -> tempfile::TempDir {
        const TMPFS_MAGIC: u64 = 0x0102_1994;
        let tmp = std::env::temp_dir();
        let on_tmpfs = rustix::fs::statfs(&tmp).is_ok_and(|s| s.f_type as u64 == TMPFS_MAGIC);
        let base = if on_tmpfs {
            std::path::PathBuf::from("/var/tmp")
        } else {
            tmp
        };
        tempfile::Builder::new()
            .prefix("dp-oltp-unit-")
            .tempdir_in(base)
            .unwrap()
    }

    #[test]
    #[cfg_attr(
        not(feature = "system-tests"),
        ignore = "needs sysbench and MariaDB: scripts/test runs it"
    )]
    fn a_server_that_will_not_start_shows_its_error_log_and_leaves_nothing() {
        need_programs();
        let dir = disk_dir();
        let mut o = OltpOptions::for_scale("quick");
        o.server_args = vec!["--no-such-option-for-driveprobe".into()];
        let e = run(dir.path(), &o, &RunControl::new()).unwrap_err();
        let msg = e.to_string();
        assert!(matches!(e, OltpError::ServerStart { .. }), "{msg}");
        assert!(msg.contains("unknown option"), "{msg}");
        assert!(!msg.contains('\n'), "{msg}");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    #[cfg_attr(
        not(feature = "system-tests"),
        ignore = "needs sysbench and MariaDB: scripts/test runs it"
    )]
    fn a_stop_before_the_run_starts_nothing_and_leaves_nothing() {
        need_programs();
        let dir = disk_dir();
        let c = RunControl::new();
        c.stop();
        let points = run(dir.path(), &OltpOptions::for_scale("quick"), &c).unwrap();
        assert!(points.is_empty());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    #[cfg_attr(
        not(feature = "system-tests"),
        ignore = "needs sysbench and MariaDB: scripts/test runs it"
    )]
    fn a_directory_without_room_is_refused_before_anything_starts() {
        need_programs();
        let dir = tempfile::tempdir().unwrap();
        let mut o = OltpOptions::for_scale("quick");
        // More rows than any test machine has room for.
        o.table_size = u32::MAX;
        o.tables = 1 << 20;
        let e = run(dir.path(), &o, &RunControl::new()).unwrap_err();
        assert!(matches!(e, OltpError::NoRoom { .. }), "{e}");
        assert!(e.to_string().contains("free"));
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    #[cfg_attr(
        not(feature = "system-tests"),
        ignore = "needs sysbench and MariaDB: scripts/test runs it"
    )]
    fn a_file_is_not_a_directory() {
        need_programs();
        let f = tempfile::NamedTempFile::new().unwrap();
        let e = run(
            f.path(),
            &OltpOptions::for_scale("quick"),
            &RunControl::new(),
        )
        .unwrap_err();
        assert!(matches!(e, OltpError::NotADirectory(_)), "{e}");
    }

    #[test]
    fn fdinfo_flags_are_octal() {
        // ibdata1 of a server on tmpfs (O_DIRECT) and on ramfs (refused, opened buffered).
        let direct = fdinfo_flags("pos:\t0\nflags:\t02140002\nmnt_id:\t28\nino:\t5\n").unwrap();
        let buffered = fdinfo_flags("pos:\t0\nflags:\t02100002\nmnt_id:\t28\n").unwrap();
        assert_ne!(direct & libc::O_DIRECT as u32, 0);
        assert_eq!(buffered & libc::O_DIRECT as u32, 0);
        assert_eq!(fdinfo_flags("pos: 0\n"), None);
        // Our own descriptors, read for real: a file opened with O_DIRECT says so.
        use std::os::fd::AsRawFd;
        use std::os::unix::fs::OpenOptionsExt;
        let f = std::fs::File::open("/proc/self/stat").unwrap();
        let flags = fdinfo_flags(
            &std::fs::read_to_string(format!("/proc/self/fdinfo/{}", f.as_raw_fd())).unwrap(),
        )
        .unwrap();
        assert_eq!(flags & libc::O_DIRECT as u32, 0);
        let dir = tempfile::tempdir_in("/dev/shm").unwrap();
        if let Ok(d) = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .custom_flags(libc::O_DIRECT)
            .open(dir.path().join("x"))
        {
            let flags = fdinfo_flags(
                &std::fs::read_to_string(format!("/proc/self/fdinfo/{}", d.as_raw_fd())).unwrap(),
            )
            .unwrap();
            assert_ne!(flags & libc::O_DIRECT as u32, 0);
        }
    }

    #[test]
    fn log_tails_are_one_line() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("log");
        std::fs::write(&p, "a\n\nb\nc\nd\n").unwrap();
        assert_eq!(tail(&p, 2), "c | d");
        assert_eq!(tail(&dir.path().join("none"), 2), "(empty)");
    }
}
