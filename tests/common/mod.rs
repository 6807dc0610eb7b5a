//! Helpers shared by the integration tests that need root: loop devices over files in
//! temp dirs, mounts, checksums. Guards undo what they set up in `Drop`, so a failing
//! test leaves no loop device or mount behind. The machine's own disks are never touched.

// Each test crate compiles this module on its own and uses only part of it.
#![allow(dead_code)]

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

pub mod bench_run;
pub mod daemon;
pub mod fixtures;
pub mod http;
pub mod surfaces;

pub const MIB: u64 = 1 << 20;

pub fn need_root() {
    assert!(
        rustix::process::geteuid().is_root(),
        "needs root: loop devices, mounts and setpriv (run these tests as root)"
    );
}

/// Asserts that a finished command succeeded. On failure the message names what ran,
/// its exit status and its stderr.
#[track_caller]
pub fn assert_ok(out: &std::process::Output, what: &str) {
    assert!(
        out.status.success(),
        "{what}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs `cmd`, asserts it succeeds, returns its stdout.
pub fn run(cmd: &str, args: &[&str]) -> String {
    run_with_stdin(cmd, args, None)
}

/// Runs `cmd` with `stdin` as its input, asserts it succeeds, returns its stdout.
pub fn run_with_stdin(cmd: &str, args: &[&str], stdin: Option<&str>) -> String {
    let mut child = Command::new(cmd)
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {cmd}: {e}"));
    if let Some(input) = stdin {
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
    }
    let out = child.wait_with_output().unwrap();
    assert_ok(&out, &format!("{cmd} {args:?}"));
    String::from_utf8(out.stdout).unwrap()
}

pub fn sync() {
    run("sync", &[]);
}

/// sha256 of a whole file, as `sha256sum` prints it.
pub fn sha256(file: &Path) -> String {
    let out = run("sha256sum", &[file.to_str().unwrap()]);
    out.split_whitespace().next().unwrap().to_string()
}

/// xxh3-128 of a whole file: a fast in-process checksum for before/after comparisons.
pub fn checksum(file: &Path) -> u128 {
    xxhash_rust::xxh3::xxh3_128(&fs::read(file).unwrap())
}

/// A sparse image file of `size` bytes in `dir`.
pub fn image(dir: &Path, name: &str, size: u64) -> PathBuf {
    let p = dir.join(name);
    fs::File::create(&p).unwrap().set_len(size).unwrap();
    p
}

/// An image with a few non-zero marker blocks, so the checksum covers real data.
pub fn marked_image(dir: &Path, name: &str, size: u64) -> PathBuf {
    use std::io::{Seek, SeekFrom};
    let p = image(dir, name, size);
    let mut f = fs::OpenOptions::new().write(true).open(&p).unwrap();
    for off in [0, size / 2, size - 4096] {
        f.seek(SeekFrom::Start(off)).unwrap();
        f.write_all(&[0xA5; 4096]).unwrap();
    }
    p
}

/// Writes an MBR with one Linux partition from 1 MiB to the end of the image `file`.
pub fn partition_image(file: &Path) {
    run_with_stdin(
        "sfdisk",
        &[
            "--quiet",
            "--no-reread",
            "--no-tell-kernel",
            file.to_str().unwrap(),
        ],
        Some("label: dos\nstart=2048, type=83\n"),
    );
}

/// `mkfs.ext4` on `dev` with no lazy init (a background thread would otherwise write to
/// the device after mkfs returns).
pub fn mkfs_ext4(dev: &Path) {
    run(
        "mkfs.ext4",
        &[
            "-q",
            "-F",
            "-E",
            "lazy_itable_init=0,lazy_journal_init=0",
            dev.to_str().unwrap(),
        ],
    );
}

/// `len` bytes of deterministic, incompressible-looking data (xorshift64*).
pub fn pseudo_random(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    let mut v = Vec::with_capacity(len + 8);
    while v.len() < len {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        v.extend_from_slice(&x.wrapping_mul(0x2545_f491_4f6c_dd1d).to_le_bytes());
    }
    v.truncate(len);
    v
}

/// Writes a file of `len` pseudo-random bytes and flushes it to disk.
pub fn random_file(path: &Path, len: u64, seed: u64) {
    let mut f = fs::File::create(path).unwrap();
    f.write_all(&pseudo_random(len as usize, seed)).unwrap();
    f.sync_all().unwrap();
}

/// The serial driveprobe reports for a loop device: `loop:` + its backing file's canonical path.
pub fn loop_serial(backing: &Path) -> String {
    format!("loop:{}", fs::canonicalize(backing).unwrap().display())
}

/// Retries `f` for up to 30 s: after a process that used io_uring exits, the kernel drops
/// the ring's file references asynchronously, so a mount or device can stay busy briefly
/// (longer on a busy host, where the kernel worker that drops them waits for a CPU).
fn retry(mut f: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    loop {
        if f() {
            return true;
        }
        if start.elapsed() > Duration::from_secs(30) {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn quiet(cmd: &str, args: &[&str]) -> bool {
    Command::new(cmd)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// A loop device, detached on drop.
pub struct Loop {
    dev: PathBuf,
}

impl Loop {
    /// `losetup --find --show [extra] FILE`.
    pub fn attach(file: &Path, extra: &[&str]) -> Loop {
        let mut args = vec!["--find", "--show"];
        args.extend_from_slice(extra);
        args.push(file.to_str().unwrap());
        Loop {
            dev: PathBuf::from(run("losetup", &args).trim()),
        }
    }

    pub fn path(&self) -> &Path {
        &self.dev
    }

    pub fn s(&self) -> &str {
        self.dev.to_str().unwrap()
    }

    /// `/dev/loopNpK`, waiting for devtmpfs to create it. A kernel built without partition
    /// table parsers finds no partitions on `--partscan`; then `partx -a` parses the table
    /// in user space and adds them with BLKPG (no writes to the device).
    #[allow(dead_code)] // not every test file that includes this module makes partitions
    pub fn partition(&self, k: u32) -> PathBuf {
        let p = PathBuf::from(format!("{}p{k}", self.s()));
        let start = Instant::now();
        let mut partx_done = false;
        while !p.exists() {
            if !partx_done && start.elapsed() > Duration::from_millis(500) {
                run("partx", &["-a", self.s()]);
                partx_done = true;
            }
            // A give-up time: udev and partx wait for a CPU like anything else.
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "{} did not appear",
                p.display()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        p
    }
}

impl Drop for Loop {
    fn drop(&mut self) {
        if !retry(|| quiet("losetup", &["-d", self.s()])) {
            eprintln!("warning: losetup -d {} failed", self.dev.display());
        }
    }
}

/// A mount, unmounted on drop.
pub struct Mount {
    dir: PathBuf,
}

impl Mount {
    /// Mounts the filesystem on `dev` at `dir` (created if missing).
    pub fn new(dev: &Path, dir: &Path) -> Mount {
        fs::create_dir_all(dir).unwrap();
        run("mount", &[dev.to_str().unwrap(), dir.to_str().unwrap()]);
        Mount {
            dir: dir.to_path_buf(),
        }
    }

    /// Mounts a virtual filesystem (`ramfs`, `tmpfs`) at `dir`, with `-o options` if given.
    pub fn virtual_fs(fstype: &str, options: Option<&str>, dir: &Path) -> Mount {
        fs::create_dir_all(dir).unwrap();
        let mut args = vec!["-t", fstype];
        if let Some(o) = options {
            args.extend(["-o", o]);
        }
        args.extend(["none", dir.to_str().unwrap()]);
        run("mount", &args);
        Mount {
            dir: dir.to_path_buf(),
        }
    }

    /// A read-only bind mount of `dir` over itself: new opens for writing fail with EROFS
    /// (descriptors opened before keep their access, as the kernel has it). Removed on
    /// drop, which makes `dir` writable again.
    pub fn bind_read_only(dir: &Path) -> Mount {
        let d = dir.to_str().unwrap();
        run("mount", &["--bind", d, d]);
        let m = Mount {
            dir: dir.to_path_buf(),
        };
        run("mount", &["-o", "remount,bind,ro", d]);
        m
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// `mount -o remount,OPTIONS DIR`, such as `ro` or `rw`.
    pub fn remount(&self, options: &str) {
        run(
            "mount",
            &[
                "-o",
                &format!("remount,{options}"),
                self.dir.to_str().unwrap(),
            ],
        );
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let dir = self.dir.to_str().unwrap().to_string();
        if !retry(|| quiet("umount", &[&dir])) {
            eprintln!("warning: umount {dir} failed, detaching lazily");
            let _ = Command::new("umount").args(["-l", &dir]).status();
        }
    }
}

/// A swap area on a device, swapped off on drop.
pub struct Swap {
    dev: PathBuf,
}

impl Swap {
    /// `mkswap` then `swapon`.
    pub fn on(dev: &Path) -> Swap {
        run("mkswap", &["-q", dev.to_str().unwrap()]);
        run("swapon", &[dev.to_str().unwrap()]);
        Swap {
            dev: dev.to_path_buf(),
        }
    }
}

impl Drop for Swap {
    fn drop(&mut self) {
        let dev = self.dev.to_str().unwrap().to_string();
        if !retry(|| quiet("swapoff", &[&dev])) {
            eprintln!("warning: swapoff {dev} failed");
        }
    }
}

/// A device-mapper device, removed on drop.
pub struct Dm {
    pub name: String,
}

impl Drop for Dm {
    fn drop(&mut self) {
        if !retry(|| quiet("dmsetup", &["remove", &self.name])) {
            eprintln!("warning: dmsetup remove {} failed", self.name);
        }
    }
}

/// Debian's Chromium, which scripts/test installs (the HTML pages are checked in it).
pub const CHROMIUM: &str = "/usr/bin/chromium";

/// Runs headless Chromium with `args` on `url`, killing it after `limit`.
pub fn chromium(profile: &Path, args: &[&str], url: &str, limit: Duration) -> std::process::Output {
    assert!(
        Path::new(CHROMIUM).exists(),
        "{CHROMIUM} is missing: run scripts/test (it installs Debian's chromium), or apt-get install chromium"
    );
    let mut child = Command::new(CHROMIUM)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .arg(url)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("cannot start chromium");
    let started = Instant::now();
    // Read the pipes on threads so a chatty Chromium cannot block on a full pipe.
    let mut so = child.stdout.take().unwrap();
    let mut se = child.stderr.take().unwrap();
    let t_out = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = std::io::Read::read_to_end(&mut so, &mut v);
        v
    });
    let t_err = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = std::io::Read::read_to_end(&mut se, &mut v);
        v
    });
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("chromium did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    std::process::Output {
        status,
        stdout: t_out.join().unwrap(),
        stderr: t_err.join().unwrap(),
    }
}

/// Asserts that no process mentions `needle` in its command line, waiting up to 30 s for
/// the ones that are ending (a child group killed a moment ago: a killed process with a
/// large address space, a database server, takes a while to be torn down on a busy host).
/// A give-up time: a process that was never stopped is still there after it.
pub fn assert_nothing_left_running(needle: &str) {
    let t0 = std::time::Instant::now();
    let mut left = processes_mentioning(needle);
    while !left.is_empty() && t0.elapsed() < std::time::Duration::from_secs(30) {
        std::thread::sleep(std::time::Duration::from_millis(100));
        left = processes_mentioning(needle);
    }
    assert!(left.is_empty(), "left running: {left:#?}");
}

/// Processes (not zombies, not this test) whose command line mentions `needle`, as
/// `PID: COMMAND LINE`: what a run in the directory `needle` left behind.
pub fn processes_mentioning(needle: &str) -> Vec<String> {
    let mut out = Vec::new();
    let me = std::process::id().to_string();
    for e in fs::read_dir("/proc").unwrap().flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        if !name.bytes().all(|b| b.is_ascii_digit()) || name == me {
            continue;
        }
        let Ok(cmd) = fs::read(e.path().join("cmdline")) else {
            continue;
        };
        let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
        let stat = fs::read_to_string(e.path().join("stat")).unwrap_or_default();
        if stat.contains(") Z ") {
            continue;
        }
        if cmd.contains(needle) {
            out.push(format!("{name}: {cmd}"));
        }
    }
    out
}

/// A temp dir in /dev/shm (tmpfs: never this machine's disks), removed when dropped.
pub fn shm_dir(prefix: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in("/dev/shm")
        .expect("tempdir in /dev/shm")
}

/// ext4 (made by [`mkfs_ext4`]) on a loop device over a sparse image file in `dir` (use
/// /dev/shm), mounted at `dir/mnt`. Fields drop in order: unmount, then detach.
pub struct LoopExt4 {
    mount: Mount,
    lo: Loop,
    img: PathBuf,
}

impl LoopExt4 {
    pub fn new(dir: &Path, size: u64) -> LoopExt4 {
        let img = image(dir, "fs.img", size);
        let lo = Loop::attach(&img, &[]);
        mkfs_ext4(lo.path());
        let mount = Mount::new(lo.path(), &dir.join("mnt"));
        LoopExt4 { mount, lo, img }
    }

    /// Where the filesystem is mounted.
    pub fn dir(&self) -> &Path {
        self.mount.dir()
    }

    /// The loop device under the filesystem.
    pub fn device(&self) -> &Loop {
        &self.lo
    }

    /// The image file behind the loop device.
    pub fn image(&self) -> &Path {
        &self.img
    }

    /// Bytes written to the loop device so far: /sys/block/loopN/stat's sectors written
    /// (the 7th field, in 512-byte units), after writing back what is dirty.
    pub fn device_written(&self) -> u64 {
        sync();
        let name = self
            .lo
            .path()
            .file_name()
            .unwrap()
            .to_string_lossy()
            .to_string();
        let stat = std::fs::read_to_string(format!("/sys/block/{name}/stat")).unwrap();
        let sectors: u64 = stat.split_whitespace().nth(6).unwrap().parse().unwrap();
        sectors * 512
    }
}

/// The calling thread's own `cancelled_write_bytes`: dirty pages it dropped unwritten (by
/// deleting or truncating files).
pub fn thread_cancelled() -> u64 {
    let io = std::fs::read_to_string("/proc/thread-self/io").unwrap();
    io.lines()
        .find_map(|l| l.strip_prefix("cancelled_write_bytes:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap()
}

/// What a run wrote, three ways: what its `RunControl` counted, what reached the loop
/// device under it, and what the run's thread dropped unwritten (dirty pages of files it
/// deleted: counted as written by the program, never reaching the device).
#[derive(Debug)]
pub struct WriteCount {
    pub written: u64,
    pub device: u64,
    pub dropped: u64,
    /// The control's count each time it was seen to grow while the run went on.
    pub seen: Vec<u64>,
}

impl WriteCount {
    /// Counted against the device's count.
    pub fn ratio(&self) -> f64 {
        self.written as f64 / self.device as f64
    }

    /// Counted, less what was dropped unwritten, against the device's count.
    pub fn net_ratio(&self) -> f64 {
        self.written.saturating_sub(self.dropped) as f64 / self.device as f64
    }
}

impl std::fmt::Display for WriteCount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mib = |b: u64| b as f64 / MIB as f64;
        write!(
            f,
            "counted {} bytes ({:.1} MiB), the loop device got {} bytes ({:.1} MiB), ratio {:.3}; dropped unwritten {} bytes ({:.1} MiB), counted less dropped against the device {:.3}; grew {} times while running: {:?}",
            self.written,
            mib(self.written),
            self.device,
            mib(self.device),
            self.ratio(),
            self.dropped,
            mib(self.dropped),
            self.net_ratio(),
            self.seen.len(),
            self.seen
        )
    }
}

/// Runs `run` on a thread of its own, which does its work under `control`, watching
/// `control.written_bytes()` every 100 ms while it runs; then counts what reached `fs`'s
/// device since the start, and what the thread dropped unwritten.
pub fn count_writes<T: Send + 'static>(
    fs: &LoopExt4,
    control: &driveprobe::engine::RunControl,
    run: impl FnOnce() -> T + Send + 'static,
) -> (T, WriteCount) {
    let before = fs.device_written();
    // The thread's own count of cancelled writes (a process's count would also hold its
    // reaped children's).
    let h = std::thread::spawn(move || {
        let c0 = thread_cancelled();
        let r = run();
        (r, thread_cancelled() - c0)
    });
    let mut seen: Vec<u64> = Vec::new();
    while !h.is_finished() {
        let w = control.written_bytes();
        if w > seen.last().copied().unwrap_or(0) {
            seen.push(w);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let (r, dropped) = h.join().unwrap();
    let count = WriteCount {
        written: control.written_bytes(),
        device: fs.device_written() - before,
        dropped,
        seen,
    };
    (r, count)
}

/// The fields of `/proc/PID/stat` of a process, and its name, when it exists.
fn proc_stat(pid: u32) -> Option<(driveprobe::process::ProcStat, String)> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let st = driveprobe::process::parse_proc_stat(&stat)?;
    let (_, rest) = stat.split_once('(')?;
    let (name, _) = rest.rsplit_once(')')?;
    Some((st, name.to_string()))
}

/// True while `pid` runs (it exists and is not a zombie).
pub fn running(pid: u32) -> bool {
    proc_stat(pid).is_some_and(|(st, _)| st.state != 'Z')
}

/// Waits up to `limit` for `pid` to stop running; true when it did.
pub fn ends_within(pid: u32, limit: Duration) -> bool {
    let t0 = Instant::now();
    while running(pid) && t0.elapsed() < limit {
        std::thread::sleep(Duration::from_millis(20));
    }
    !running(pid)
}

/// The pid of a running process whose parent is `ppid` and whose name (comm) is one of
/// `names`.
pub fn child_named(ppid: u32, names: &[&str]) -> Option<u32> {
    fs::read_dir("/proc").unwrap().flatten().find_map(|e| {
        let pid = e.file_name().to_string_lossy().parse::<u32>().ok()?;
        let (st, name) = proc_stat(pid)?;
        (st.ppid == ppid as i32 && st.state != 'Z' && names.contains(&name.as_str())).then_some(pid)
    })
}

/// Waits up to `limit` for `child` to start a process named one of `names`, and returns
/// its pid; fails the test when it does not, or when `child` ends first.
pub fn wait_for_child_named(
    child: &mut std::process::Child,
    names: &[&str],
    limit: Duration,
) -> u32 {
    let t0 = Instant::now();
    loop {
        if let Some(p) = child_named(child.id(), names) {
            return p;
        }
        assert!(
            t0.elapsed() < limit,
            "no {names:?} started under pid {} within {limit:?}",
            child.id()
        );
        assert!(
            child.try_wait().unwrap().is_none(),
            "pid {} ended before starting {names:?}",
            child.id()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The ids of process `pid`'s threads named `name` (their `comm`: the first 15 bytes of
/// the name the thread was given), from /proc/PID/task.
pub fn threads_named(pid: i32, name: &str) -> Vec<u64> {
    let mut v: Vec<u64> = fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| {
            d.flatten()
                .filter_map(|e| {
                    let tid = e.file_name().to_string_lossy().parse::<u64>().ok()?;
                    let comm = fs::read_to_string(e.path().join("comm")).ok()?;
                    (comm.trim_end() == name).then_some(tid)
                })
                .collect()
        })
        .unwrap_or_default();
    v.sort_unstable();
    v
}

/// Pages the kernel has written to swap areas since boot (/proc/vmstat).
pub fn pswpout() -> u64 {
    std::fs::read_to_string("/proc/vmstat")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("pswpout "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// The sysfs directory of the loop device whose backing file is `backing`, if one is.
fn loop_of(backing: &Path) -> Option<PathBuf> {
    let want = fs::canonicalize(backing).ok()?;
    fs::read_dir("/sys/block").ok()?.flatten().find_map(|e| {
        let name = e.file_name().to_string_lossy().into_owned();
        let b = fs::read_to_string(e.path().join("loop/backing_file")).ok()?;
        (name.starts_with("loop") && Path::new(b.trim()) == want).then(|| e.path())
    })
}

/// Sectors written to a block device so far (field 7 of its `stat`), once none of its
/// writes is in flight (waiting up to 5 s): every write submitted before is counted.
fn sectors_written_settled(dev: &Path) -> Option<u64> {
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(5) {
        let inflight = fs::read_to_string(dev.join("inflight")).ok()?;
        if inflight.split_whitespace().nth(1) == Some("0") {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let stat = fs::read_to_string(dev.join("stat")).ok()?;
    stat.split_whitespace().nth(6)?.parse().ok()
}

/// Runs `attempt` between two checksums of `backing`; returns its value and whether the
/// attempt left the file unchanged (by anything but the kernel's swapping).
///
/// On a swap area (`swap`) the kernel itself writes swapped-out pages whenever it
/// reclaims memory. When the file changed, the loop device's own count decides: with no
/// write in flight before or after, the sectors written to it in between must be exactly
/// the kernel's swap-outs (8 per page of `pswpout`; this area is the only one) for the
/// change to be the kernel's alone. Sectors written but no swap-out counted can be one
/// submitted just before the attempt: made again (up to 8 times). No sector written, no
/// swap-out, and the file changed all the same: something wrote the file itself, a change.
pub fn watched<T>(backing: &Path, swap: bool, mut attempt: impl FnMut() -> T) -> (T, bool) {
    if !swap {
        let before = checksum(backing);
        let v = attempt();
        sync();
        return (v, checksum(backing) == before);
    }
    let dev = loop_of(backing);
    let mut tries = 0;
    loop {
        tries += 1;
        let sectors0 = dev.as_deref().and_then(sectors_written_settled);
        let sw0 = pswpout();
        let before = checksum(backing);
        let v = attempt();
        sync();
        let unchanged = checksum(backing) == before;
        let sectors1 = dev.as_deref().and_then(sectors_written_settled);
        let swapped = pswpout() - sw0;
        let written = match (sectors0, sectors1) {
            (Some(a), Some(b)) => b.checked_sub(a),
            _ => None,
        };
        let verdict = match written {
            _ if unchanged => Some(true),
            Some(w) if swapped > 0 && w == swapped * 8 => Some(true),
            Some(0) if swapped == 0 => Some(false),
            // More written than the kernel swapped out (or no count): not known.
            _ if tries >= 8 => Some(false),
            _ => None,
        };
        if let Some(ok) = verdict {
            if tries > 1 || swapped > 0 {
                println!(
                    "swap: attempt made {tries} times; the last: {swapped} pages swapped out, \
                     {written:?} sectors written to the device, file {}",
                    if unchanged { "unchanged" } else { "changed" }
                );
            }
            return (v, ok);
        }
    }
}

/// What a closed-loop run or round says of its slots' time (the engine's accounting).
pub struct SlotTime {
    pub iops: f64,
    /// Mean latency, seconds.
    pub mean_s: f64,
    /// Seconds measured.
    pub secs: f64,
    /// Slot-seconds with an I/O in flight (split at the round's edges).
    pub in_flight_s: f64,
    /// Slot-seconds in flight that no latency figure counts (straddling the run's start
    /// or end, or failed).
    pub uncounted_s: f64,
    /// Slot-seconds idle between a completion and the next submission.
    pub idle_s: f64,
}

/// The slots' time in a closed loop, checked against the configured `slots`, whatever
/// else the machine is doing (a stall moves time from one term to another; it loses none):
/// - every slot at every moment is in flight or idle: `in_flight + idle = slots x secs`
///   (catches a wrong number of workers or slots, a wrong duration);
/// - `whole_run`: Little's law, `IOPS x mean latency x secs = in_flight - uncounted`
///   (catches I/Os lost or counted twice, a wrong mean). A round cut from a longer run
///   counts each I/O's latency in the round it ended in, so it is not checked there.
///
/// Within 1% of `slots`. Returns the queue depth the target saw (in flight / secs), for messages.
pub fn slot_time(t: &SlotTime, slots: f64, whole_run: bool, what: &str) -> f64 {
    assert!(t.secs > 0.0, "{what}: no time measured");
    let depth = t.in_flight_s / t.secs;
    let idle = t.idle_s / t.secs;
    let err = (depth + idle - slots).abs() / slots;
    // A loose floor, not Little's law: however busy the host, a closed loop keeps most
    // of its slots in flight (a worker preempted with I/Os done but not reaped still
    // holds them). A loop that leaves half its slots unused fails it.
    assert!(
        depth > 0.5 * slots,
        "{what}: only {depth:.2} of {slots} slots in flight on average ({idle:.2} idle)"
    );
    assert!(
        err < 0.01,
        "{what}: {depth:.2} slots in flight and {idle:.2} idle over {:.3}s = {:.2}, expected \
         {slots} (error {:.2}%)",
        t.secs,
        depth + idle,
        err * 100.0
    );
    if whole_run {
        let little = t.iops * t.mean_s;
        let counted = (t.in_flight_s - t.uncounted_s) / t.secs;
        let err = (little - counted).abs() / slots;
        assert!(
            err < 0.01,
            "{what}: Little's law: IOPS {:.0} x mean latency {:.6}s = {little:.2}, but the \
             counted I/Os were in flight {counted:.2} on average ({depth:.2} in all, \
             {:.2} uncounted) (error {:.2}%)",
            t.iops,
            t.mean_s,
            t.uncounted_s / t.secs,
            err * 100.0
        );
    }
    depth
}

/// Nanoseconds the threads of process `pid` have waited, runnable, for a CPU (the run
/// delay of `/proc/PID/task/*/schedstat`, summed): what a busy host cost it. Timing bounds
/// in tests add the change of this over what they time, so that they check the code, not
/// the CPU it got. 0 where schedstat is missing.
pub fn run_delay_ns(pid: u32) -> u64 {
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    tasks
        .flatten()
        .filter_map(|t| fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .sum()
}
