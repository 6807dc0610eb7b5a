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
#[derive(Debug)]
pub struct Supervised {
    child: Option<std::process::Child>,
    pgid: i32,
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
        child: Some(child),
        pgid,
    })
}

impl Supervised {
    pub fn id(&self) -> u32 {
        self.pgid as u32
    }

    /// The child, to take its pipes. Reap it through the handle, not through this.
    pub fn child_mut(&mut self) -> &mut std::process::Child {
        self.child
            .as_mut()
            .expect("a Supervised holds its child until dropped")
    }

    /// The child's exit status when it has exited (then reaped), None while it runs. The
    /// rest of its group is ended when the handle is dropped.
    pub fn try_wait(&mut self) -> std::io::Result<Option<std::process::ExitStatus>> {
        self.child_mut().try_wait()
    }

    /// Signals the whole group.
    pub fn signal(&self, sig: Signal) {
        signal_group(self.pgid, sig);
    }

    /// SIGTERM to the group, then SIGKILL if the child has not exited within `grace`;
    /// whatever else is left in the group gets SIGKILL. Returns the child's exit status.
    pub fn stop(mut self, grace: Duration) -> std::io::Result<std::process::ExitStatus> {
        self.signal(Signal::TERM);
        let t0 = Instant::now();
        let mut pause = Duration::from_millis(2);
        loop {
            if let Some(status) = self.try_wait()? {
                self.end();
                return Ok(status);
            }
            if t0.elapsed() >= grace {
                return self.kill_and_reap();
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(20));
        }
    }

    /// Waits for the child to exit by itself, then kills anything left in its group.
    pub fn wait(mut self) -> std::io::Result<std::process::ExitStatus> {
        let status = self.child_mut().wait();
        self.end();
        status
    }

    /// SIGKILL to the group, then reaps the child.
    pub fn kill_and_reap(&mut self) -> std::io::Result<std::process::ExitStatus> {
        self.signal(Signal::KILL);
        let status = self.child_mut().wait();
        self.end();
        status
    }

    /// The child is reaped: SIGKILL to whatever is left of its group, and out of the
    /// registry.
    fn end(&mut self) {
        // Under the registry's lock: a stop under way signals a group only while it is
        // registered.
        let mut reg = live();
        signal_group(self.pgid, Signal::KILL);
        reg.remove(&self.pgid);
        self.child.take();
    }
}

impl Drop for Supervised {
    fn drop(&mut self) {
        if self.child.is_some() {
            let _ = self.kill_and_reap();
        }
    }
}

fn signal_group(pgid: i32, sig: Signal) {
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
                .and_then(|t| crate::app::parse_proc_stat(&t))
                .is_some_and(|s| s.pgrp == pgid && s.state != 'Z' && s.state != 'X')
        })
        .collect()
}

/// Ends every child's process group: SIGTERM to each, up to `grace` for their processes
/// to go, then SIGKILL to each (a group whose leader is still unreaped keeps its id, so
/// the signal cannot reach someone else's processes). From then on no new child starts.
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Command, Stdio};

    fn running(pid: i32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|t| crate::app::parse_proc_stat(&t))
            .is_some_and(|s| s.state != 'Z')
    }

    fn poll(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
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
    fn with_grandchild() -> (Supervised, i32) {
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
