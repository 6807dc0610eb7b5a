//! A QEMU guest (TCG) whose PID 1 is Debian's systemd, for tests that install the
//! driveprobe package and drive it with `systemctl` (tests/vm/systemd.rs). The sibling of
//! [`crate::harness`] (the initramfs guest, whose disks, serials and helpers it shares).
//!
//! - The guest: `tests/vm/build-systemd-guest.sh` lays out a Debian root filesystem with
//!   mmdebstrap, with its own kernel and initramfs, cached under `target/vm-cache` and
//!   rebuilt when the script (its package list included) changes. Each boot takes it with
//!   `snapshot=on`: the guest's writes go to a temporary overlay, the cache stays clean.
//! - Disks: an NVMe ([`NVME_SERIAL`]), an AHCI SATA disk (QEMU's serial `QM00005`) and a
//!   virtio disk ([`VIRTIO_SERIAL`]) over sparse files in the boot's temp dir, besides the
//!   root (a virtio disk with serial [`ROOT_SERIAL`]).
//! - Commands: a virtio-serial port (`org.driveprobe.agent`) joins a Unix socket of the
//!   host to a small agent unit in the guest, which runs one bash script at a time and
//!   answers with its exit status and output ([`RunningGuest::sh`]); the protocol is in the
//!   build script. A command channel rather than a payload on the console: the test acts
//!   between commands (reads /metrics from the host, times a stop), and the console stays
//!   for the kernel's and systemd's messages, which a failure shows.
//! - Files: [`RunningGuest::put`] sends a host file over the same port, raw (the agent
//!   takes exactly its size with `head -c`): a .deb of a few MiB in seconds, with no disk
//!   of its own (an extra disk would be one more drive for the daemon to discover).
//!   QEMU's fw_cfg was tried first: the guest's sysfs reads it a byte at a time through
//!   an I/O port, over 3 minutes for 3 MiB under TCG.
//! - Network: user networking with `restrict=on` (the guest reaches nothing outside), and
//!   one forward from 127.0.0.1 on the host (a free port, [`RunningGuest::host_addr`]) to
//!   the guest's port 39480: the host reads the daemon's /metrics itself.

// Each test crate uses only part of it.
#![allow(dead_code)]

use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::harness::{sparse_image, tail, NVME_SERIAL, QBOOT, QEMU, VIRTIO_SERIAL};

/// The root disk's serial (a virtio disk: `/dev/vda` or `/dev/vdb`).
pub const ROOT_SERIAL: &str = "DPROOT01";
/// The SATA disk's serial (QEMU's default for the first AHCI port).
pub const SATA_SERIAL: &str = "QM00005";
/// The guest port forwarded to the host (driveprobe's default port).
pub const GUEST_PORT: u16 = 39480;
const GIB: u64 = 1 << 30;

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/vm/build-systemd-guest.sh")
}

/// The cached guest: root image, kernel, initramfs, and how long this call spent building.
pub struct GuestImage {
    pub rootfs: PathBuf,
    pub kernel: PathBuf,
    pub initrd: PathBuf,
    pub built: Duration,
}

/// Builds the guest when its cache is stale (minutes), else returns at once.
pub fn image() -> Result<GuestImage, String> {
    let out = Command::new("bash")
        .arg(script())
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {}: {e}", script().display()))?;
    if !out.status.success() {
        return Err(format!(
            "{} failed ({}):\n{}",
            script().display(),
            out.status,
            tail(&String::from_utf8_lossy(&out.stderr), 40)
        ));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let get = |key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(key))
            .map(str::to_string)
            .ok_or_else(|| format!("build-systemd-guest.sh printed no {key}: {text}"))
    };
    Ok(GuestImage {
        rootfs: get("rootfs=")?.into(),
        kernel: get("kernel=")?.into(),
        initrd: get("initrd=")?.into(),
        built: Duration::from_secs(get("built=")?.parse().unwrap_or(0)),
    })
}

pub struct GuestBuilder {
    memory_mib: u32,
    timeout: Duration,
}

pub fn builder() -> GuestBuilder {
    GuestBuilder {
        memory_mib: 1024,
        timeout: Duration::from_secs(1800),
    }
}

impl GuestBuilder {
    pub fn memory_mib(mut self, n: u32) -> Self {
        self.memory_mib = n;
        self
    }
    /// The guest's whole life: QEMU is killed past it (default 1,800 s).
    pub fn timeout(mut self, t: Duration) -> Self {
        self.timeout = t;
        self
    }

    /// Starts QEMU on the cached image and waits until the agent answers (the guest's
    /// systemd is then up to multi-user.target or on its way).
    pub fn start(self, img: &GuestImage) -> Result<RunningGuest, String> {
        for (p, what) in [(QEMU, "qemu-system-x86"), (QBOOT, "qemu-system-data")] {
            if Command::new("sh")
                .arg("-c")
                .arg(format!("command -v {p} || test -f {p}"))
                .stdout(Stdio::null())
                .status()
                .map_or(true, |s| !s.success())
            {
                return Err(format!(
                    "{p} missing: apt-get install {what} (scripts/test does)"
                ));
            }
        }
        let mut dir = tempfile::Builder::new()
            .prefix("driveprobe-systemd-vm.")
            .tempdir()
            .map_err(|e| format!("tempdir: {e}"))?;
        dir.disable_cleanup(std::env::var_os("DRIVEPROBE_VM_KEEP").is_some());
        let d = dir.path().to_path_buf();
        let nvme = d.join("nvme.img");
        let sata = d.join("sata.img");
        let virtio = d.join("virtio.img");
        for p in [&nvme, &sata, &virtio] {
            sparse_image(p, GIB)?;
        }
        let port = free_port()?;
        let agent_sock = d.join("agent.sock");
        let console = d.join("console.log");
        let stderr = d.join("qemu.stderr");
        let mut cmd = Command::new(QEMU);
        cmd.args(["-accel", "tcg", "-cpu", "max", "-smp", "1"])
            .args(["-m", &self.memory_mib.to_string()])
            .args(["-nographic", "-no-reboot", "-bios", QBOOT])
            .args(["-kernel", &path_str(&img.kernel), "-initrd", &path_str(&img.initrd)])
            .args([
                "-append",
                // no_timer_check: a host busy with builds can starve the emulated CPU during
                // the kernel's check of the IO-APIC timer, which then panics the boot.
                "console=ttyS0 root=LABEL=dpguest-root rw panic=-1 quiet systemd.show_status=0 no_timer_check",
            ])
            .arg("-drive")
            .arg(format!(
                "file={},if=none,id=root0,format=raw,snapshot=on",
                img.rootfs.display()
            ))
            .args(["-device"])
            .arg(format!("virtio-blk-pci,drive=root0,serial={ROOT_SERIAL}"))
            .arg("-drive")
            .arg(format!("file={},if=none,id=nv0,format=raw", nvme.display()))
            .arg("-device")
            .arg(format!("nvme,id=nvme0,serial={NVME_SERIAL},drive=nv0"))
            .arg("-drive")
            .arg(format!("file={},if=none,id=sata0,format=raw", sata.display()))
            .args(["-device", "ahci,id=ahci", "-device", "ide-hd,drive=sata0,bus=ahci.0"])
            .arg("-drive")
            .arg(format!("file={},if=none,id=vd0,format=raw", virtio.display()))
            .arg("-device")
            .arg(format!(
                "virtio-blk-pci,id=virtio0,drive=vd0,serial={VIRTIO_SERIAL}"
            ))
            .arg("-netdev")
            .arg(format!(
                "user,id=n0,restrict=on,hostfwd=tcp:127.0.0.1:{port}-:{GUEST_PORT}"
            ))
            .args(["-device", "virtio-net-pci,netdev=n0"])
            .arg("-chardev")
            .arg(format!(
                "socket,id=agent,path={},server=on,wait=off",
                agent_sock.display()
            ))
            .args([
                "-device",
                "virtio-serial-pci",
                "-device",
                "virtserialport,chardev=agent,name=org.driveprobe.agent",
            ]);
        let out_f = fs::File::create(&console).map_err(|e| format!("console: {e}"))?;
        let err_f = fs::File::create(&stderr).map_err(|e| format!("stderr: {e}"))?;
        let child = cmd
            .stdin(Stdio::null())
            .stdout(out_f)
            .stderr(err_f)
            .spawn()
            .map_err(|e| format!("cannot start {QEMU}: {e}"))?;
        let started = Instant::now();
        let mut g = RunningGuest {
            child: Some(child),
            dir,
            console,
            stderr,
            port,
            agent: None,
            partial: String::new(),
            next_id: 1,
            started,
            deadline: started + self.timeout,
            booted: Duration::ZERO,
        };
        g.connect(&agent_sock)?;
        g.booted = started.elapsed();
        Ok(g)
    }
}

/// A port on 127.0.0.1 nobody listens on now (QEMU binds it for the forward).
fn free_port() -> Result<u16, String> {
    let l = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("bind: {e}"))?;
    l.local_addr()
        .map(|a| a.port())
        .map_err(|e| format!("local_addr: {e}"))
}

fn path_str(p: &Path) -> String {
    p.to_str().expect("UTF-8 path").to_string()
}

/// What a script run in the guest did.
#[derive(Debug, Clone)]
pub struct Output {
    pub rc: i32,
    /// stdout and stderr, interleaved as written.
    pub out: String,
}

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Standard base64 with padding (what coreutils' `base64 -d` reads).
pub fn b64_encode(data: &[u8]) -> String {
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for c in data.chunks(3) {
        let n = (u32::from(c[0]) << 16)
            | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
            | u32::from(*c.get(2).unwrap_or(&0));
        for i in 0..4 {
            if i <= c.len() {
                out.push(B64[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Decodes what `base64 -w0` writes; None on a character outside the alphabet.
pub fn b64_decode(text: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(text.len() / 4 * 3);
    let (mut acc, mut bits) = (0u32, 0);
    for b in text.bytes().filter(|b| *b != b'=') {
        let v = B64.iter().position(|x| *x == b)? as u32;
        acc = (acc << 6) | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Some(out)
}

/// Parses the agent's `END ID RC BASE64` line.
pub fn parse_end(line: &str) -> Result<(u64, Output), String> {
    let mut it = line.trim_end().splitn(4, ' ');
    let bad = || format!("agent: unexpected line {line:?}");
    if it.next() != Some("END") {
        return Err(bad());
    }
    let id = it.next().and_then(|s| s.parse().ok()).ok_or_else(bad)?;
    let rc = it.next().and_then(|s| s.parse().ok()).ok_or_else(bad)?;
    let out = b64_decode(it.next().unwrap_or(""))
        .ok_or_else(|| format!("agent: output of {id} is not base64: {line:?}"))?;
    Ok((
        id,
        Output {
            rc,
            out: String::from_utf8_lossy(&out).into_owned(),
        },
    ))
}

/// A booted guest. Dropping it kills QEMU.
pub struct RunningGuest {
    child: Option<Child>,
    dir: tempfile::TempDir,
    console: PathBuf,
    stderr: PathBuf,
    port: u16,
    agent: Option<(BufReader<UnixStream>, UnixStream)>,
    /// The start of an agent line whose end has not arrived yet.
    partial: String,
    next_id: u64,
    started: Instant,
    deadline: Instant,
    /// From QEMU's start to the agent's first answer.
    pub booted: Duration,
}

impl RunningGuest {
    /// `127.0.0.1:PORT`: the guest's port 39480 seen from the host.
    pub fn host_addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The serial console so far (`\r` removed).
    pub fn console(&self) -> String {
        fs::read(&self.console)
            .map(|b| String::from_utf8_lossy(&b).replace('\r', ""))
            .unwrap_or_default()
    }

    /// An error message with QEMU's stderr and the console's tail.
    pub fn failure(&self, what: &str) -> String {
        format!(
            "systemd guest: {what} ({:.1} s after start; temp dir {}, kept with \
             DRIVEPROBE_VM_KEEP=1)\n--- qemu stderr ---\n{}--- console tail ---\n{}",
            self.started.elapsed().as_secs_f64(),
            self.dir.path().display(),
            fs::read_to_string(&self.stderr).unwrap_or_default(),
            tail(&self.console(), 60)
        )
    }

    fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    /// Connects to the agent's socket and waits for its READY line.
    fn connect(&mut self, sock: &Path) -> Result<(), String> {
        let stream = loop {
            match UnixStream::connect(sock) {
                Ok(s) => break s,
                Err(e) => {
                    if let Some(st) = self.exited() {
                        return Err(self.failure(&format!("QEMU exited ({st})")));
                    }
                    if self.started.elapsed() > Duration::from_secs(20) {
                        return Err(self.failure(&format!("agent socket: {e}")));
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
        };
        let writer = stream.try_clone().map_err(|e| e.to_string())?;
        self.agent = Some((BufReader::new(stream), writer));
        // The boot: QEMU's firmware, the kernel, the initramfs, systemd up to the agent.
        let limit =
            Duration::from_secs(300).min(self.deadline.saturating_duration_since(Instant::now()));
        self.read_line_until(limit, |l| l.trim_end() == "READY")
            .map(|_| ())
    }

    /// Reads the agent's lines until one satisfies `want` (or `limit` passes).
    fn read_line_until(
        &mut self,
        limit: Duration,
        want: impl Fn(&str) -> bool,
    ) -> Result<String, String> {
        let until = Instant::now() + limit;
        loop {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(self.failure(&format!("no answer from the agent within {limit:?}")));
            }
            let (reader, _) = self.agent.as_mut().expect("agent connected");
            let _ = reader
                .get_ref()
                .set_read_timeout(Some(left.min(Duration::from_secs(1))));
            match reader.read_line(&mut self.partial) {
                Ok(0) => return Err(self.failure("the agent's socket closed")),
                Ok(_) => {
                    let line = std::mem::take(&mut self.partial);
                    if want(&line) {
                        return Ok(line);
                    }
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    // what arrived of a line so far stays in self.partial
                    if let Some(st) = self.exited() {
                        return Err(self.failure(&format!("QEMU exited ({st})")));
                    }
                }
                Err(e) => return Err(self.failure(&format!("agent read: {e}"))),
            }
        }
    }

    /// Runs `script` with bash in the guest (as root, from the agent unit: not in a login
    /// session), waiting at most `limit` for it to finish.
    pub fn try_sh(&mut self, script: &str, limit: Duration) -> Result<Output, String> {
        let id = self.next_id;
        self.next_id += 1;
        let b64 = b64_encode(script.as_bytes());
        let (_, writer) = self.agent.as_mut().expect("agent connected");
        writer
            .write_all(format!("RUN {id} {b64}\n").as_bytes())
            .map_err(|e| format!("agent write: {e}"))?;
        let prefix = format!("END {id} ");
        let line = self.read_line_until(limit, |l| l.starts_with(&prefix))?;
        parse_end(&line).map(|(_, o)| o)
    }

    /// Copies the host file `src` to `dest` in the guest (a path without spaces).
    pub fn put(&mut self, src: &Path, dest: &str) -> Result<(), String> {
        assert!(
            !dest.contains(char::is_whitespace),
            "guest path with a space: {dest:?}"
        );
        let data = fs::read(src).map_err(|e| format!("{}: {e}", src.display()))?;
        let id = self.next_id;
        self.next_id += 1;
        let (_, writer) = self.agent.as_mut().expect("agent connected");
        writer
            .write_all(format!("PUT {id} {} {dest}\n", data.len()).as_bytes())
            .and_then(|()| writer.write_all(&data))
            .map_err(|e| format!("agent write: {e}"))?;
        let prefix = format!("END {id} ");
        let line = self.read_line_until(Duration::from_secs(120), |l| l.starts_with(&prefix))?;
        let (_, o) = parse_end(&line)?;
        if o.rc != 0 {
            return Err(self.failure(&format!("writing {dest} in the guest failed: {}", o.out)));
        }
        Ok(())
    }

    /// [`RunningGuest::try_sh`] with a 300 s limit (a give-up time: a loaded host slows
    /// an emulated CPU several times over); panics (console tail) when the agent does not
    /// answer.
    pub fn sh(&mut self, script: &str) -> Output {
        self.try_sh(script, Duration::from_secs(300))
            .unwrap_or_else(|e| panic!("{e}\n--- script ---\n{script}"))
    }

    /// [`RunningGuest::sh`], which must exit 0; its output.
    pub fn ok(&mut self, script: &str) -> String {
        let o = self.sh(script);
        assert_eq!(
            o.rc, 0,
            "guest script exited {}:\n--- script ---\n{script}\n--- output ---\n{}",
            o.rc, o.out
        );
        o.out
    }

    /// Powers the guest off (`systemctl poweroff`) and waits for QEMU to exit.
    pub fn poweroff(mut self, limit: Duration) -> Result<Duration, String> {
        let t0 = Instant::now();
        let _ = self.try_sh("systemctl --no-block poweroff", Duration::from_secs(30));
        loop {
            if self.exited().is_some() {
                self.child = None;
                return Ok(t0.elapsed());
            }
            if t0.elapsed() > limit {
                return Err(self.failure(&format!("no power-off within {limit:?}")));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for RunningGuest {
    fn drop(&mut self) {
        if let Some(c) = self.child.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
