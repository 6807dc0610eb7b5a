//! Child processes: the one way driveprobe runs another program (smartctl, fio, db_bench,
//! mariadbd, sysbench), with one set of rules.
//!
//! - **Its own process group.** A child starts as the leader of a new process group
//!   (`process_group(0)`), so whatever it starts (a shell script's programs, a server's
//!   helpers) can be signalled with it: every kill here is a `killpg`.
//! - **Killed with its group** on a time limit and when its [`Supervised`] handle is
//!   dropped: SIGTERM, then SIGKILL after a grace ([`Supervised::stop`]), or SIGKILL at
//!   once (drop).
//! - **Killed when the daemon stops.** Every live group is in a registry;
//!   [`terminate_all`] (the daemon's SIGTERM path) sends each SIGTERM, waits a grace for
//!   its processes to go, sends SIGKILL to what is left, and refuses new children from
//!   then on. A thread blocked on a hung smartctl therefore does not leave it running
//!   after driveprobe exits.
//! - **Killed when driveprobe dies outright** (SIGKILL, a crash): the child gets SIGKILL as
//!   its parent death signal ([`crate::sys::proc::kill_with_parent`]; see there for what
//!   that covers: the direct child only, and it follows the spawning thread).
//! - **Output read through a cap** ([`read_capped`], [`capture`]): the first `head` bytes
//!   and the last `tail` bytes are kept, the rest counted and dropped, so a child printing
//!   100 MB costs a bounded amount of memory, and what it printed reaches the log and the
//!   result documents only as a bounded excerpt ([`Captured::excerpt`],
//!   [`Captured::tail_text`], [`clip`]).
//! - **One way to wait** ([`wait_until`]): for the child's exit, a deadline or a stop
//!   request, polled with the same backoff (2 ms doubling to 25 ms) by every caller:
//!   [`run`], [`Supervised::stop`], `app::wait` and `app::ChildGuard::stop`.
//! - **When the child exits, its group goes with it**: whatever it left running (a
//!   grandchild holding its pipes, say) is killed before its output is read to the end,
//!   so a finished program never holds its reader until a time limit.
//! - **A group is signalled only while its leader is unreaped.** The group's id is the
//!   leader's pid; once the leader is reaped the number may go to someone else's group.
//!   So the exit is seen without reaping (`waitid(WNOWAIT)`), the group is killed while
//!   the zombie leader still holds the id, and then the leader is reaped and leaves the
//!   registry, in one step ([`Supervised`]).
//!
//! [`run`] puts these together for a program run to completion (smartctl): spawn with
//! stdin closed, both pipes captured through caps, wait up to a time limit, kill the
//! group and reap on the limit (or when the caller's thread unwinds), and return the
//! exit status with both captures.

use std::collections::BTreeSet;
use std::io::Read;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal};

/// The process groups of the children alive now (their leaders' pids).
static LIVE: Mutex<BTreeSet<i32>> = Mutex::new(BTreeSet::new());
/// Set by [`terminate_all`]: no new child starts after it.
static STOPPING: AtomicBool = AtomicBool::new(false);

fn live() -> std::sync::MutexGuard<'static, BTreeSet<i32>> {
    LIVE.lock().unwrap_or_else(|e| e.into_inner())
}

/// A child in its own process group, registered so that [`terminate_all`] can end it.
/// Dropping the handle kills the group (SIGKILL) and reaps the child.
///
/// **The group is signalled only while its leader is unreaped.** The group's id is the
/// leader's pid, and a pid stays taken while its process is running or a zombie: once the
/// leader is reaped (and the rest of the group is gone) the number can go to a new process
/// and so to a new group of someone else's processes, which a `killpg` would then reach
/// (driveprobe runs as root). So the leader's exit is seen without reaping it
/// (`waitid(WNOWAIT)`, [`exited_unreaped`]), the rest of the group is killed while the
/// zombie leader still holds the id, and only then is the leader reaped, under the
/// registry's lock and out of the registry in the same step ([`Supervised::try_wait`]).
/// Every way of reaping here goes through that step.
#[derive(Debug)]
pub struct Supervised {
    child: std::process::Child,
    pgid: i32,
    /// The leader's exit status once it is reaped: from then on its group is not ours
    /// and is never signalled.
    reaped: Option<std::process::ExitStatus>,
}

/// Starts `cmd` as the leader of a new process group, with SIGKILL as its parent death
/// signal, and registers the group. Refused once [`terminate_all`] has run (driveprobe is
/// stopping).
pub fn spawn(cmd: &mut std::process::Command) -> std::io::Result<Supervised> {
    use std::os::unix::process::CommandExt;
    crate::sys::proc::kill_with_parent(cmd.process_group(0));
    // Under the registry's lock, so a stop that is under way either sees this group or
    // has refused it.
    let mut reg = live();
    if STOPPING.load(Ordering::Acquire) {
        return Err(std::io::Error::other(
            "driveprobe is stopping: no new program is started",
        ));
    }
    let child = cmd.spawn()?;
    let pgid = child.id() as i32;
    reg.insert(pgid);
    Ok(Supervised {
        child,
        pgid,
        reaped: None,
    })
}

/// How a wait ended.
#[derive(Debug)]
pub enum Waited {
    Exited(std::process::ExitStatus),
    /// The stop request came; the child is still running (its handle ends it).
    Stopped,
    /// The deadline passed; the child is still running (its handle ends it).
    TimedOut,
}

/// The first pause of [`wait_until`]'s polling, doubled up to [`POLL_MAX`].
const POLL_MIN: Duration = Duration::from_millis(2);
/// The longest pause between two looks at the child: how late an exit, a stop request
/// or a deadline may be noticed.
pub const POLL_MAX: Duration = Duration::from_millis(25);

/// The one wait of this module: polls `try_wait` (a child's exit; it reaps) until it
/// gives a status, `stopped` says true, or `deadline` passes (None: no deadline). The
/// exit is looked at first, so a child that exited before the deadline is never reported
/// as timed out.
pub fn wait_until(
    mut try_wait: impl FnMut() -> std::io::Result<Option<std::process::ExitStatus>>,
    deadline: Option<Instant>,
    stopped: impl Fn() -> bool,
) -> std::io::Result<Waited> {
    let mut pause = POLL_MIN;
    loop {
        if let Some(status) = try_wait()? {
            return Ok(Waited::Exited(status));
        }
        if stopped() {
            return Ok(Waited::Stopped);
        }
        let now = Instant::now();
        let left = match deadline {
            Some(d) if now >= d => return Ok(Waited::TimedOut),
            Some(d) => d - now,
            None => pause,
        };
        std::thread::sleep(pause.min(left));
        pause = (pause * 2).min(POLL_MAX);
    }
}

/// Where a child of ours is, as `waitid(WEXITED | WNOWAIT)` sees it (nothing is reaped).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Leader {
    Running,
    /// Exited and not reaped: a zombie, whose pid (and so its group's id) is still taken.
    Exited,
    /// Not a child of ours to wait for (already reaped): its pid may be someone else's.
    Reaped,
}

/// Where child `pid` is, without reaping it; `block`: wait until it has exited (or is
/// found reaped).
pub fn leader_state(pid: u32, block: bool) -> std::io::Result<Leader> {
    use rustix::process::{waitid, WaitId, WaitIdOptions};
    let Some(pid) = Pid::from_raw(pid as i32) else {
        return Ok(Leader::Reaped);
    };
    let mut opts = WaitIdOptions::EXITED | WaitIdOptions::NOWAIT;
    if !block {
        opts |= WaitIdOptions::NOHANG;
    }
    loop {
        return match waitid(WaitId::Pid(pid), opts) {
            Ok(Some(_)) => Ok(Leader::Exited),
            Ok(None) => Ok(Leader::Running),
            Err(rustix::io::Errno::INTR) => continue,
            Err(rustix::io::Errno::CHILD) => Ok(Leader::Reaped),
            Err(e) => Err(e.into()),
        };
    }
}

/// True when child `pid` has exited and is not reaped yet (a zombie, whose
/// `/proc/PID/io` can still be read and whose pid still holds its group's id). `block`:
/// wait for it to exit. False on any error (already reaped, not our child).
pub fn exited_unreaped(pid: u32, block: bool) -> bool {
    matches!(leader_state(pid, block), Ok(Leader::Exited))
}

impl Supervised {
    pub fn id(&self) -> u32 {
        self.pgid as u32
    }

    /// The child, to take its pipes. Reap it through the handle, not through this.
    pub fn child_mut(&mut self) -> &mut std::process::Child {
        &mut self.child
    }

    /// The child's exit status when it has exited, None while it runs. When it has
    /// exited, whatever is left of its group is killed (SIGKILL) while the exited leader
    /// still holds the group's id, and then the leader is reaped.
    pub fn try_wait(&mut self) -> std::io::Result<Option<std::process::ExitStatus>> {
        if let Some(status) = self.reaped {
            return Ok(Some(status));
        }
        match leader_state(self.id(), false)? {
            Leader::Running => Ok(None),
            Leader::Exited => self.end_exited().map(Some),
            Leader::Reaped => self.reaped_elsewhere().map(Some),
        }
    }

    /// Signals the whole group, while its leader is unreaped; nothing once it is reaped
    /// (the group's id may be someone else's by then).
    pub fn signal(&self, sig: Signal) {
        if self.reaped.is_none() {
            signal_group(self.pgid, sig);
        }
    }

    /// SIGTERM to the group, then SIGKILL if the child has not exited within `grace`;
    /// whatever else is left in the group gets SIGKILL. Returns the child's exit status.
    pub fn stop(mut self, grace: Duration) -> std::io::Result<std::process::ExitStatus> {
        self.signal(Signal::TERM);
        match wait_until(|| self.try_wait(), Some(Instant::now() + grace), || false)? {
            Waited::Exited(status) => Ok(status),
            Waited::Stopped | Waited::TimedOut => self.kill_and_reap(),
        }
    }

    /// Waits for the child's exit, `stopped`, or `deadline`, as [`wait_until`]. When it
    /// exited, whatever else was left in its group has been killed and it is reaped.
    pub fn wait_until(
        &mut self,
        deadline: Option<Instant>,
        stopped: impl Fn() -> bool,
    ) -> std::io::Result<Waited> {
        wait_until(|| self.try_wait(), deadline, stopped)
    }

    /// Waits for the child to exit by itself, kills anything left in its group, reaps.
    pub fn wait(mut self) -> std::io::Result<std::process::ExitStatus> {
        self.wait_exited()
    }

    /// SIGKILL to the group, then waits for the leader to go and reaps it (killing the
    /// group once more first: whatever was started in between).
    pub fn kill_and_reap(&mut self) -> std::io::Result<std::process::ExitStatus> {
        self.signal(Signal::KILL);
        self.wait_exited()
    }

    /// Blocks until the leader has exited (outside the registry's lock: a leader in
    /// uninterruptible sleep may take long), then ends its group and reaps it.
    fn wait_exited(&mut self) -> std::io::Result<std::process::ExitStatus> {
        if let Some(status) = self.reaped {
            return Ok(status);
        }
        loop {
            match leader_state(self.id(), true)? {
                // A blocking waitid returns on the exit only; looked at again regardless.
                Leader::Running => continue,
                Leader::Exited => return self.end_exited(),
                Leader::Reaped => return self.reaped_elsewhere(),
            }
        }
    }

    /// The leader has exited and is not reaped: SIGKILL to what is left of its group
    /// while the zombie leader holds the id, then the reap, out of the registry in the
    /// same step. Under the registry's lock, so [`terminate_all`] never signals a group
    /// whose leader is reaped.
    fn end_exited(&mut self) -> std::io::Result<std::process::ExitStatus> {
        let mut reg = live();
        signal_group(self.pgid, Signal::KILL);
        reg.remove(&self.pgid);
        // A zombie: the reap does not block.
        let status = self.child.wait()?;
        self.reaped = Some(status);
        Ok(status)
    }

    /// The leader was reaped past this handle (through [`Supervised::child_mut`], against
    /// the rules): its group is no longer ours to signal, only to forget.
    fn reaped_elsewhere(&mut self) -> std::io::Result<std::process::ExitStatus> {
        live().remove(&self.pgid);
        let status = self
            .child
            .try_wait()?
            .ok_or_else(|| std::io::Error::other("the child was reaped outside its handle"))?;
        self.reaped = Some(status);
        Ok(status)
    }
}

impl Drop for Supervised {
    fn drop(&mut self) {
        if self.reaped.is_none() {
            let _ = self.kill_and_reap();
        }
    }
}

/// Test-only record of every group signal: the group, the signal, and its leader's state
/// in `/proc` at that moment (None: no process with that pid leads that group, that is,
/// the leader was reaped). Tests of the kill order read it.
#[cfg(any(test, feature = "test-hooks"))]
pub static SIGNALLED: Mutex<Vec<(i32, Signal, Option<char>)>> = Mutex::new(Vec::new());

fn signal_group(pgid: i32, sig: Signal) {
    #[cfg(any(test, feature = "test-hooks"))]
    {
        let leader = std::fs::read_to_string(format!("/proc/{pgid}/stat"))
            .ok()
            .and_then(|t| parse_proc_stat(&t))
            .filter(|s| s.pgrp == pgid)
            .map(|s| s.state);
        SIGNALLED
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((pgid, sig, leader));
    }
    if let Some(p) = Pid::from_raw(pgid) {
        // The group may be gone already (ESRCH): nothing to do then.
        let _ = rustix::process::kill_process_group(p, sig);
    }
}

/// The process groups of driveprobe's children alive now.
pub fn live_groups() -> Vec<i32> {
    live().iter().copied().collect()
}

/// The processes of group `pgid` that are still running (not zombies), from `/proc`.
pub fn running_members(pgid: i32) -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|t| parse_proc_stat(&t))
                .is_some_and(|s| s.pgrp == pgid && s.state != 'Z' && s.state != 'X')
        })
        .collect()
}

/// Whether [`terminate_all`] has run: driveprobe is stopping, and a child that died now
/// was most likely ended by it.
pub fn stopping() -> bool {
    STOPPING.load(Ordering::Acquire)
}

/// Ends every child's process group: SIGTERM to each, up to `grace` for their processes
/// to go, then SIGKILL to each, under the registry's lock. A registered group's leader is
/// unreaped (a leader is reaped and its group unregistered in one step under that lock),
/// so the group still holds its id and the signal cannot reach someone else's processes.
/// From then on no new child starts.
/// Returns how many groups were signalled. The daemon calls it on SIGTERM, after its runs
/// have had their chance to stop their programs gracefully.
pub fn terminate_all(grace: Duration) -> usize {
    let groups: Vec<i32> = {
        let reg = live();
        STOPPING.store(true, Ordering::Release);
        for &g in reg.iter() {
            signal_group(g, Signal::TERM);
        }
        reg.iter().copied().collect()
    };
    if groups.is_empty() {
        return 0;
    }
    tracing::info!(
        groups = groups.len(),
        "stopping the programs driveprobe started"
    );
    let t0 = Instant::now();
    while t0.elapsed() < grace
        && groups
            .iter()
            .any(|&g| live().contains(&g) && !running_members(g).is_empty())
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    let reg = live();
    for &g in groups.iter().filter(|g| reg.contains(g)) {
        signal_group(g, Signal::KILL);
    }
    groups.len()
}

/// How much of a [`run`] program's output is kept, and how long it may take.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// From the start and from the end of stdout ([`read_capped`]'s `head` and `tail`).
    pub stdout: (usize, usize),
    /// From the start and from the end of stderr.
    pub stderr: (usize, usize),
    /// From the start until the program has exited and both pipes are read.
    pub timeout: Duration,
}

/// What a program [`run`] to its end left: its exit status and both captures.
#[derive(Debug)]
pub struct Output {
    pub status: std::process::ExitStatus,
    pub stdout: Captured,
    pub stderr: Captured,
}

/// Why [`run`] has no output.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The program could not start (`NotFound`: it is not installed; or driveprobe is
    /// stopping).
    #[error("cannot start it: {0}")]
    Spawn(#[source] std::io::Error),
    #[error("cannot wait for it: {0}")]
    Wait(#[source] std::io::Error),
    #[error("cannot read its output: {0}")]
    Read(#[source] std::io::Error),
    /// It ran past the time limit, or its output did not end within it; its group was
    /// killed and it was reaped.
    #[error("it did not finish within {} s; it was killed", .0.as_secs_f64())]
    TimedOut(Duration),
}

/// Runs `cmd` to its end under the module's rules: stdin closed, stdout and stderr read
/// through their caps on threads of their own, the exit waited for until
/// `limits.timeout`, then the rest of the group killed and the pipes read to their end
/// within the same limit. On the limit the group is killed and the child reaped. The
/// caller's `cmd` keeps its arguments and environment; its stdio is set here.
pub fn run(cmd: &mut std::process::Command, limits: &Limits) -> Result<Output, RunError> {
    use std::process::Stdio;
    use std::sync::mpsc;
    let deadline = Instant::now() + limits.timeout;
    let mut child = spawn(
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
    )
    .map_err(RunError::Spawn)?;
    // Both pipes read through a cap on threads of their own; each sends what it kept.
    let (tx, rx) = mpsc::channel();
    let out = child.child_mut().stdout.take();
    let err = child.child_mut().stderr.take();
    for (is_stdout, pipe, (head, tail)) in [
        (
            true,
            out.map(|p| Box::new(p) as Box<dyn Read + Send>),
            limits.stdout,
        ),
        (
            false,
            err.map(|p| Box::new(p) as Box<dyn Read + Send>),
            limits.stderr,
        ),
    ] {
        let Some(pipe) = pipe else { continue };
        let tx = tx.clone();
        std::thread::spawn(move || {
            let _ = tx.send((is_stdout, read_capped(pipe, head, tail)));
        });
    }
    drop(tx);

    let status = match child
        .wait_until(Some(deadline), || false)
        .map_err(RunError::Wait)?
    {
        Waited::Exited(s) => s,
        // Dropping the handle kills the group and reaps the child.
        Waited::Stopped | Waited::TimedOut => return Err(RunError::TimedOut(limits.timeout)),
    };
    // The group is gone (`wait_until` killed what the child left), so the pipes end
    // unless a process that left the group holds them: the same deadline, and a moment
    // past it for output that is already there.
    let (mut stdout, mut stderr) = (Captured::default(), Captured::default());
    loop {
        let left = deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(100));
        match rx.recv_timeout(left) {
            Ok((true, r)) => stdout = r.map_err(RunError::Read)?,
            Ok((false, r)) => stderr = r.map_err(RunError::Read)?,
            Err(mpsc::RecvTimeoutError::Timeout) => return Err(RunError::TimedOut(limits.timeout)),
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    drop(child);
    Ok(Output {
        status,
        stdout,
        stderr,
    })
}

/// What a child printed on one stream, read through a cap: the first bytes (up to the
/// head cap), the last bytes (up to the tail cap), and how many were read in all.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Captured {
    pub head: Vec<u8>,
    pub tail: Vec<u8>,
    /// Bytes read in all.
    pub total: u64,
}

/// Reads `r` to its end, keeping the first `head` bytes and the last `tail` bytes of the
/// rest; the bytes between are counted and dropped. Memory: `head + tail` plus one read
/// buffer, whatever the stream's length.
pub fn read_capped(mut r: impl Read, head: usize, tail: usize) -> std::io::Result<Captured> {
    let mut out = Captured::default();
    let mut ring = std::collections::VecDeque::<u8>::with_capacity(tail.min(1 << 20));
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let n = match r.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        out.total += n as u64;
        let mut chunk = &buf[..n];
        let room = head - out.head.len().min(head);
        if room > 0 {
            let k = room.min(chunk.len());
            out.head.extend_from_slice(&chunk[..k]);
            chunk = &chunk[k..];
        }
        if tail == 0 || chunk.is_empty() {
            continue;
        }
        if chunk.len() >= tail {
            ring.clear();
            ring.extend(&chunk[chunk.len() - tail..]);
        } else {
            let over = (ring.len() + chunk.len()).saturating_sub(tail);
            ring.drain(..over);
            ring.extend(chunk);
        }
    }
    out.tail = ring.into();
    Ok(out)
}

/// Reads a child's pipe through [`read_capped`] on a thread of its own (so a chatty child
/// never blocks on a full pipe). A read error ends the capture with what was read.
pub fn capture<R: Read + Send + 'static>(
    r: Option<R>,
    head: usize,
    tail: usize,
) -> std::thread::JoinHandle<Captured> {
    std::thread::spawn(move || match r {
        Some(r) => read_capped(r, head, tail).unwrap_or_default(),
        None => Captured::default(),
    })
}

impl Captured {
    /// Bytes read but not kept.
    pub fn dropped(&self) -> u64 {
        self.total - (self.head.len() + self.tail.len()) as u64
    }

    /// Everything was kept: `head` followed by `tail` is the whole stream.
    pub fn is_whole(&self) -> bool {
        self.dropped() == 0
    }

    /// The whole stream when it was kept whole.
    pub fn whole(&self) -> Option<Vec<u8>> {
        self.is_whole()
            .then(|| [&self.head[..], &self.tail[..]].concat())
    }

    /// The stream as text: the head, a line saying how much was left out, the tail.
    pub fn text(&self) -> String {
        let mut s = String::from_utf8_lossy(&self.head).into_owned();
        if self.dropped() > 0 {
            s.push_str(&format!("\n[... {} bytes left out ...]\n", self.dropped()));
        }
        s.push_str(&String::from_utf8_lossy(&self.tail));
        s
    }

    /// A one-line excerpt for a log or an error: the first non-empty line, at most `max`
    /// bytes of it, saying how much more there was. None for an empty stream.
    pub fn excerpt(&self, max: usize) -> Option<String> {
        let text = String::from_utf8_lossy(&self.head);
        let (at, line) = text
            .split('\n')
            .scan(0usize, |pos, l| {
                let at = *pos;
                *pos += l.len() + 1;
                Some((at, l))
            })
            .find(|(_, l)| !l.trim().is_empty())?;
        let line = line.trim_end_matches('\r');
        let shown = clip_plain(line.trim_start(), max);
        let more = self.total.saturating_sub((at + shown.len()) as u64);
        Some(
            if shown.len() < line.trim_start().len() || self.dropped() > 0 {
                format!("{shown} [... {more} more bytes of output]")
            } else {
                shown.to_string()
            },
        )
    }

    /// At most `max` bytes of the end of the stream, as text (from a line start when one
    /// is near), saying how much came before.
    pub fn tail_text(&self, max: usize) -> String {
        let all: Vec<u8> = if self.tail.is_empty() {
            self.head.clone()
        } else if self.dropped() == 0 {
            [&self.head[..], &self.tail[..]].concat()
        } else {
            self.tail.clone()
        };
        let start = all.len().saturating_sub(max);
        let mut slice = &all[start..];
        if start > 0 {
            if let Some(nl) = slice.iter().position(|&b| b == b'\n') {
                if nl < slice.len() / 2 {
                    slice = &slice[nl + 1..];
                }
            }
        }
        let before = self.total - slice.len() as u64;
        let text = String::from_utf8_lossy(slice);
        if before > 0 {
            format!("[... {before} bytes before] {}", text.trim_end())
        } else {
            text.trim_end().to_string()
        }
    }
}

/// The longest prefix of `s` of at most `max` bytes that ends on a character boundary.
fn clip_plain(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// `s` cut to at most about `max` bytes (on a character boundary), saying how many bytes
/// were left out: for messages that may carry a program's output into a log line or a
/// result document.
pub fn clip(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let head = clip_plain(s, max);
    format!("{head} [... {} bytes left out]", s.len() - head.len())
}

/// Reads at most `cap` bytes of the file at `path` as text (a program's log that may have
/// grown without bound), saying how much was left out.
pub fn read_file_capped(path: &std::path::Path, cap: usize) -> std::io::Result<String> {
    let f = std::fs::File::open(path)?;
    let c = read_capped(f, cap / 2, cap / 2)?;
    Ok(c.text())
}

/// The fields of `/proc/PID/stat` the meter needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcStat {
    pub state: char,
    pub ppid: i32,
    pub pgrp: i32,
    /// Field 22, `starttime`, in clock ticks after boot.
    pub start_ticks: u64,
}

/// Parses `/proc/PID/stat`. The command name (field 2) is in parentheses and may hold
/// spaces and parentheses itself, so the fields are counted from the last `)`.
pub fn parse_proc_stat(text: &str) -> Option<ProcStat> {
    let (_, rest) = text.rsplit_once(')')?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    // After the name: state (3), ppid (4), pgrp (5), ..., starttime (22).
    Some(ProcStat {
        state: f.first()?.chars().next()?,
        ppid: f.get(1)?.parse().ok()?,
        pgrp: f.get(2)?.parse().ok()?,
        start_ticks: f.get(19)?.parse().ok()?,
    })
}

/// Helpers for the tests of process groups, here and in the crates that wrap
/// [`Supervised`] (the application guard): children that leave a grandchild behind, and
/// the check of [`SIGNALLED`]. Built for this crate's tests and with the `test-hooks`
/// feature, which only dev-dependencies turn on.
#[cfg(any(test, feature = "test-hooks"))]
pub mod testing {
    use super::*;
    use std::process::{Command, Stdio};

    pub fn running(pid: i32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|t| parse_proc_stat(&t))
            .is_some_and(|s| s.state != 'Z')
    }

    pub fn poll(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
        let t0 = Instant::now();
        while t0.elapsed() < limit {
            if cond() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        cond()
    }

    /// A shell that starts a grandchild ignoring SIGTERM and prints its pid.
    pub fn with_grandchild() -> (Supervised, i32) {
        let mut s = spawn(
            Command::new("sh")
                .args(["-c", "sh -c \"trap '' TERM; sleep 600\" & echo $!; wait"])
                .stdout(Stdio::piped()),
        )
        .unwrap();
        let mut line = String::new();
        use std::io::BufRead;
        std::io::BufReader::new(s.child_mut().stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let gc: i32 = line.trim().parse().unwrap();
        assert!(poll(Duration::from_secs(5), || running(gc)));
        (s, gc)
    }

    /// A shell that starts a grandchild, prints its pid and exits at once, leaving it in
    /// its group; the command, to spawn as the caller likes.
    pub fn leaves_a_grandchild() -> Command {
        let mut c = Command::new("sh");
        c.args(["-c", "sleep 600 & echo $!"]).stdout(Stdio::piped());
        c
    }

    pub fn first_pid(out: std::process::ChildStdout) -> i32 {
        let mut line = String::new();
        use std::io::BufRead;
        std::io::BufReader::new(out).read_line(&mut line).unwrap();
        line.trim().parse().unwrap()
    }

    /// Every signal sent to group `pgid` found its leader unreaped in `/proc` (running or
    /// a zombie: the id was still the group's), and once the leader had exited (a zombie)
    /// the group got SIGKILL. Fails on a kill after the reap.
    pub fn assert_signalled_before_the_reap(pgid: i32, what: &str) {
        let sigs: Vec<(Signal, Option<char>)> = SIGNALLED
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter(|(g, _, _)| *g == pgid)
            .map(|&(_, sig, leader)| (sig, leader))
            .collect();
        assert!(
            sigs.iter().all(|(_, leader)| leader.is_some()),
            "{what}: group {pgid} signalled after its leader was reaped: {sigs:?}"
        );
        assert!(
            sigs.iter()
                .any(|(sig, leader)| *sig == Signal::KILL && *leader == Some('Z')),
            "{what}: group {pgid} not killed while its exited leader held the id: {sigs:?}"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::testing::*;
    use super::*;

    #[test]
    fn proc_stat_fields_are_counted_from_the_last_parenthesis() {
        let text = "4242 (db (bench) x) S 4200 4242 4200 0 -1 4194560 1 0 0 0 5 6 0 0 20 0 9 0 123456 1000 100 18446744073709551615\n";
        assert_eq!(
            parse_proc_stat(text),
            Some(ProcStat {
                state: 'S',
                ppid: 4200,
                pgrp: 4242,
                start_ticks: 123456
            })
        );
        let zombie = "77 (mariadbd) Z 1 77 77 0 -1 4227340 0 0 0 0 0 0 0 0 20 0 1 0 99 0 0\n";
        assert_eq!(parse_proc_stat(zombie).unwrap().state, 'Z');
        assert_eq!(parse_proc_stat("77 (x) S 1 2\n"), None);
        assert_eq!(parse_proc_stat("no parenthesis"), None);
        // This process, read for real.
        let me = parse_proc_stat(&std::fs::read_to_string("/proc/self/stat").unwrap()).unwrap();
        assert_eq!(me.pgrp, rustix::process::getpgrp().as_raw_nonzero().get());
        assert!(me.start_ticks > 0);
    }
    use std::process::{Command, Stdio};

    #[test]
    fn every_way_out_kills_the_group_before_the_leader_is_reaped() {
        // try_wait: the exit seen, the group killed, the leader reaped and unregistered
        // (so terminate_all, which signals registered groups, never finds it reaped).
        let mut s = spawn(&mut leaves_a_grandchild()).unwrap();
        let (pg, gc) = (s.pgid, first_pid(s.child_mut().stdout.take().unwrap()));
        let st = loop {
            if let Some(st) = s.try_wait().unwrap() {
                break st;
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        assert!(st.success(), "{st}");
        assert!(!live_groups().contains(&pg));
        assert!(poll(Duration::from_secs(10), || !running(gc)));
        drop(s);
        assert_signalled_before_the_reap(pg, "try_wait, then drop");

        // wait: blocks for the exit.
        let mut s = spawn(&mut leaves_a_grandchild()).unwrap();
        let (pg, gc) = (s.pgid, first_pid(s.child_mut().stdout.take().unwrap()));
        assert!(s.wait().unwrap().success());
        assert!(poll(Duration::from_secs(10), || !running(gc)));
        assert_signalled_before_the_reap(pg, "wait");

        // stop: the leader goes on SIGTERM, its grandchild ignores it.
        let (s, gc) = with_grandchild();
        let pg = s.pgid;
        s.stop(Duration::from_secs(30)).unwrap();
        assert!(poll(Duration::from_secs(10), || !running(gc)));
        assert_signalled_before_the_reap(pg, "stop");

        // drop of a running child: SIGKILL, then the reap.
        let (s, gc) = with_grandchild();
        let pg = s.pgid;
        drop(s);
        assert!(poll(Duration::from_secs(10), || !running(gc)));
        assert_signalled_before_the_reap(pg, "drop");

        // run: the shell prints its own pid (the group's) and its grandchild's, exits.
        let limits = Limits {
            stdout: (1024, 0),
            stderr: (1024, 0),
            timeout: Duration::from_secs(600),
        };
        let out = run(
            Command::new("sh").args(["-c", "echo $$; sleep 600 & echo $!; exit 3"]),
            &limits,
        )
        .unwrap();
        assert_eq!(out.status.code(), Some(3));
        let pids: Vec<i32> = String::from_utf8_lossy(&out.stdout.whole().unwrap())
            .split_whitespace()
            .map(|p| p.parse().unwrap())
            .collect();
        assert!(poll(Duration::from_secs(10), || !running(pids[1])));
        assert_signalled_before_the_reap(pids[0], "run");
    }

    #[test]
    fn stop_and_drop_end_the_whole_group() {
        let (s, gc) = with_grandchild();
        let pg = s.pgid;
        assert!(live_groups().contains(&pg));
        s.stop(Duration::from_millis(200)).unwrap();
        assert!(poll(Duration::from_secs(5), || !running(gc)));
        assert!(running_members(pg).is_empty());
        assert!(!live_groups().contains(&pg));

        let (s, gc) = with_grandchild();
        drop(s);
        assert!(poll(Duration::from_secs(5), || !running(gc)));
    }

    /// A shell ignoring SIGTERM whose grandchild, also ignoring it, holds the shell's
    /// stdout and stderr; the grandchild's pid goes to `pidfile`.
    fn stubborn(pidfile: &std::path::Path) -> Command {
        let mut c = Command::new("sh");
        c.args([
            "-c",
            "trap '' TERM; sh -c \"trap '' TERM; sleep 600\" & echo $! > \"$1\"; wait",
            "sh",
        ])
        .arg(pidfile);
        c
    }

    fn pid_in(file: &std::path::Path) -> i32 {
        let mut pid = None;
        assert!(poll(Duration::from_secs(10), || {
            pid = std::fs::read_to_string(file)
                .ok()
                .and_then(|s| s.trim().parse().ok());
            pid.is_some()
        }));
        pid.unwrap()
    }

    #[test]
    fn run_kills_the_whole_group_at_the_time_limit() {
        let dir = tempfile::tempdir().unwrap();
        let pidfile = dir.path().join("gc");
        let limits = Limits {
            stdout: (1024, 0),
            stderr: (1024, 0),
            timeout: Duration::from_millis(300),
        };
        let t0 = Instant::now();
        let e = run(&mut stubborn(&pidfile), &limits).unwrap_err();
        assert!(matches!(e, RunError::TimedOut(_)), "{e}");
        assert!(t0.elapsed() >= limits.timeout);
        let gc = pid_in(&pidfile);
        // Killed with its group (SIGKILL: it ignores SIGTERM), and reaped by init.
        assert!(poll(Duration::from_secs(10), || !running(gc)));
        assert!(e.to_string().contains("did not finish within 0.3 s"), "{e}");
    }

    #[test]
    fn run_ends_when_the_child_exits_though_a_grandchild_holds_its_pipes() {
        // The shell exits at once with status 3; its `sleep` keeps both pipes open. The
        // group goes when the shell exits, so the output ends then, not at the limit
        // (a minute: far more than a shell needs to start, print and exit).
        let limits = Limits {
            stdout: (1024, 0),
            stderr: (1024, 0),
            timeout: Duration::from_secs(60),
        };
        let out = run(
            Command::new("sh").args(["-c", "sleep 600 & echo $!; echo oops >&2; exit 3"]),
            &limits,
        )
        .unwrap();
        assert_eq!(out.status.code(), Some(3));
        assert_eq!(out.stderr.whole().unwrap(), b"oops\n");
        let gc: i32 = String::from_utf8_lossy(&out.stdout.head)
            .trim()
            .parse()
            .unwrap();
        assert!(poll(Duration::from_secs(10), || !running(gc)));
    }

    #[test]
    fn run_caps_the_output_and_gives_the_status() {
        let limits = Limits {
            stdout: (10, 5),
            stderr: (0, 0),
            timeout: Duration::from_secs(600),
        };
        let out = run(
            Command::new("sh").args(["-c", "seq 1 1000; echo hidden >&2"]),
            &limits,
        )
        .unwrap();
        assert!(out.status.success());
        assert_eq!(out.stdout.head, b"1\n2\n3\n4\n5\n");
        assert_eq!(out.stdout.tail, b"1000\n");
        assert_eq!(out.stderr.total, 7);
        assert!(out.stderr.head.is_empty());
        let e = run(&mut Command::new("/nonexistent/driveprobe-test"), &limits).unwrap_err();
        assert!(
            matches!(&e, RunError::Spawn(io) if io.kind() == std::io::ErrorKind::NotFound),
            "{e}"
        );
    }

    #[test]
    fn dropping_the_handle_ends_a_group_that_ignores_sigterm_and_holds_the_pipe() {
        let dir = tempfile::tempdir().unwrap();
        let pidfile = dir.path().join("gc");
        let mut s = spawn(stubborn(&pidfile).stdout(Stdio::piped())).unwrap();
        let gc = pid_in(&pidfile);
        // A reader of the pipe the grandchild holds: it ends only when every writer has.
        let pipe = s.child_mut().stdout.take().unwrap();
        let reader = capture(Some(pipe), 1024, 0);
        let (pg, leader) = (s.pgid, s.id() as i32);
        assert!(running(gc) && running(leader));
        drop(s);
        assert!(poll(Duration::from_secs(10), || reader.is_finished()));
        assert!(poll(Duration::from_secs(10), || !running(gc)));
        assert!(!running(leader));
        assert!(!live_groups().contains(&pg));
    }

    #[test]
    fn wait_until_reports_exit_stop_and_deadline() {
        let mut s = spawn(Command::new("sleep").arg("600")).unwrap();
        let w = s.wait_until(None, || true).unwrap();
        assert!(matches!(w, Waited::Stopped), "{w:?}");
        let t0 = Instant::now();
        let w = s
            .wait_until(Some(Instant::now() + Duration::from_millis(50)), || false)
            .unwrap();
        assert!(matches!(w, Waited::TimedOut), "{w:?}");
        assert!(t0.elapsed() >= Duration::from_millis(50));
        drop(s);
        // An exit wins over a stop request and a deadline already past.
        let mut s = spawn(&mut Command::new("true")).unwrap();
        let pid = s.id() as i32;
        assert!(poll(Duration::from_secs(10), || !running(pid)));
        let w = s.wait_until(Some(Instant::now()), || true).unwrap();
        assert!(matches!(w, Waited::Exited(st) if st.success()), "{w:?}");
    }

    #[test]
    fn the_cap_keeps_a_head_and_a_tail_and_counts_the_rest() {
        let data: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        let c = read_capped(&data[..], 1000, 500).unwrap();
        assert_eq!(c.total, 100_000);
        assert_eq!(c.head, data[..1000]);
        assert_eq!(c.tail, data[100_000 - 500..]);
        assert_eq!(c.dropped(), 98_500);
        assert!(c.whole().is_none());
        // Short: whole, in order.
        let c = read_capped(&data[..1200], 1000, 500).unwrap();
        assert_eq!(c.whole().unwrap(), data[..1200]);
        let c = read_capped(&data[..700], 1000, 500).unwrap();
        assert_eq!(c.whole().unwrap(), data[..700]);
        assert!(c.tail.is_empty());
        // No tail kept.
        let c = read_capped(&data[..], 10, 0).unwrap();
        assert_eq!((c.head.len(), c.dropped()), (10, 99_990));
    }

    #[test]
    fn excerpts_and_tails_are_bounded() {
        let mut big = b"\n\n  first line ".to_vec();
        big.extend(std::iter::repeat_n(b'x', 1 << 20));
        big.extend(b"\nlast line\n");
        let c = read_capped(&big[..], 4096, 4096).unwrap();
        let e = c.excerpt(100).unwrap();
        assert!(e.starts_with("first line xxx"), "{e}");
        assert!(e.len() < 200, "{e}");
        assert!(e.contains("more bytes of output"), "{e}");
        let t = c.tail_text(64);
        assert!(t.ends_with("last line"), "{t}");
        assert!(t.len() < 120, "{t}");
        assert!(t.starts_with("[... "), "{t}");
        let small = read_capped(&b"oops\n"[..], 4096, 4096).unwrap();
        assert_eq!(small.excerpt(100).as_deref(), Some("oops"));
        assert_eq!(small.tail_text(100), "oops");
        assert_eq!(read_capped(&b"  \n"[..], 10, 10).unwrap().excerpt(10), None);
        assert_eq!(clip("abc", 5), "abc");
        assert_eq!(clip("abcdef", 3), "abc [... 3 bytes left out]");
        assert_eq!(clip("ééé", 3), "é [... 4 bytes left out]");
    }
}
