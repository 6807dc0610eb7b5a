//! Boots a QEMU guest (TCG: KVM does not work on these machines) with an emulated NVMe
//! (`serial=TESTSN01`, QOM path `/machine/peripheral/nvme0`) and an AHCI SATA disk, both
//! over sparse files in a temp dir, and runs a payload script in it. Options add a virtio
//! disk ([`VmBuilder::virtio`], `/dev/vda`), a rotational SATA disk
//! ([`VmBuilder::sata_hdd`], `/dev/sdb`), and set the first SATA disk's rotation rate
//! ([`VmBuilder::sata_rotation_rate`]); [`Qmp::add_virtio`] and [`Qmp::remove_virtio`]
//! hot-plug virtio disks while the guest runs. The kernel and the
//! base initramfs come from `tests/vm/build-initramfs.sh` (cached in `$DRIVEPROBE_VM_CACHE`,
//! default `target/vm-cache`); each boot appends a small cpio archive with the driveprobe
//! that Cargo built for the tests and the payload.
//!
//! Payloads are `sh` scripts; `. /lib/vm.sh` gives them `run NAME CMD...` (output framed
//! by `=== BEGIN NAME` / `=== END NAME rc=N`), `runhex NAME CMD...` (stdout hex-dumped),
//! `ready NAME` (prints `=== READY NAME` for [`RunningVm::wait_for`]), `wait_nvme_cw` and
//! `wait_dev PATH`. Modules: nvme, ahci, sd_mod, dm_mod, dm_delay, dm_flakey, virtio_pci,
//! virtio_blk are loaded before the payload;
//! `modprobe null_blk` and `modprobe scsi_debug` work in it.
//!
//! ```ignore
//! let run = Vm::builder()
//!     .nvme_extra(",smart_critical_warning=0x4")
//!     .payload(". /lib/vm.sh\nrun log nvme smart-log /dev/nvme0 -o json\n")
//!     .boot();
//! let log = run.ok_section("log").json();
//! ```
//!
//! Nothing here touches a disk of the host: the guest's disks are sparse files.

// Each test crate uses only part of it.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

pub const QEMU: &str = "qemu-system-x86_64";
pub const QBOOT: &str = "/usr/share/qemu/qboot.rom";
/// The NVMe's QOM path, for `qom-set` / `qom-get`.
pub const NVME_QOM: &str = "/machine/peripheral/nvme0";
pub const NVME_SERIAL: &str = "TESTSN01";
/// The virtio disk's serial ([`VmBuilder::virtio`]; `/sys/block/vda/serial`).
pub const VIRTIO_SERIAL: &str = "VIRTSN01";
/// The rotational SATA disk's serial and model ([`VmBuilder::sata_hdd`]).
pub const HDD_SERIAL: &str = "HDDSN001";
pub const HDD_MODEL: &str = "QEMU SPINNING DISK";
/// A boot's give-up time unless the test sets its own: a loaded host slows the emulated
/// CPU several times over, and a guest that hangs still fails after it.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);
const GIB: u64 = 1 << 30;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn script() -> PathBuf {
    repo().join("tests/vm/build-initramfs.sh")
}

/// (kernel, base initramfs), built once per cache (the script keeps a stamp and a lock).
fn base() -> Result<(PathBuf, PathBuf), String> {
    static BASE: OnceLock<Result<(PathBuf, PathBuf), String>> = OnceLock::new();
    BASE.get_or_init(|| {
        let out = Command::new("bash")
            .arg(script())
            .arg("base")
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("cannot run {}: {e}", script().display()))?;
        if !out.status.success() {
            return Err(format!(
                "{} base failed ({}):\n{}",
                script().display(),
                out.status,
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        let text = String::from_utf8_lossy(&out.stdout);
        let get = |key: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(key))
                .map(PathBuf::from)
                .ok_or_else(|| format!("build-initramfs.sh printed no {key}: {text}"))
        };
        Ok((get("kernel=")?, get("initramfs=")?))
    })
    .clone()
}

fn have_qemu() -> Result<(), String> {
    let ok = Command::new(QEMU)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok || !Path::new(QBOOT).exists() {
        return Err(format!(
            "{QEMU} or {QBOOT} missing: install the Debian packages qemu-system-x86 \
             busybox-static cpio kmod nvme-cli smartmontools (scripts/test does)"
        ));
    }
    Ok(())
}

pub struct Vm;

impl Vm {
    pub fn builder() -> VmBuilder {
        VmBuilder {
            nvme_extra: String::new(),
            payload: None,
            timeout: DEFAULT_TIMEOUT,
            qmp: false,
            binary: Some(PathBuf::from(env!("CARGO_BIN_EXE_driveprobe"))),
            files: Vec::new(),
            nvme_bytes: GIB,
            sata_bytes: GIB,
            memory_mib: 512,
            qemu_args: Vec::new(),
            virtio_bytes: None,
            hdd_bytes: None,
            sata_rotation_rate: None,
        }
    }
}

#[derive(Clone)]
pub struct VmBuilder {
    nvme_extra: String,
    payload: Option<String>,
    timeout: Duration,
    qmp: bool,
    binary: Option<PathBuf>,
    files: Vec<(PathBuf, String)>,
    nvme_bytes: u64,
    sata_bytes: u64,
    memory_mib: u32,
    qemu_args: Vec<String>,
    virtio_bytes: Option<u64>,
    hdd_bytes: Option<u64>,
    sata_rotation_rate: Option<u16>,
}

impl VmBuilder {
    /// Appended to `-device nvme,id=nvme0,serial=TESTSN01,drive=...`, e.g.
    /// `",smart_critical_warning=0x4"`.
    pub fn nvme_extra(mut self, s: &str) -> Self {
        self.nvme_extra = s.to_string();
        self
    }
    /// The script `/init` runs (with `sh`) once the disks are up.
    pub fn payload(mut self, script: &str) -> Self {
        self.payload = Some(script.to_string());
        self
    }
    /// Whole boot, power-off included (default 300 s). QEMU is killed past it.
    pub fn timeout(mut self, t: Duration) -> Self {
        self.timeout = t;
        self
    }
    /// A QMP socket, for [`RunningVm::qmp`] while the guest runs (use [`VmBuilder::start`]).
    pub fn qmp(mut self) -> Self {
        self.qmp = true;
        self
    }
    /// Boot without the driveprobe binary in the guest.
    pub fn without_driveprobe(mut self) -> Self {
        self.binary = None;
        self
    }
    /// A host file copied into the guest at `dest`.
    pub fn file(mut self, src: impl Into<PathBuf>, dest: &str) -> Self {
        self.files.push((src.into(), dest.to_string()));
        self
    }
    pub fn nvme_bytes(mut self, n: u64) -> Self {
        self.nvme_bytes = n;
        self
    }
    pub fn sata_bytes(mut self, n: u64) -> Self {
        self.sata_bytes = n;
        self
    }
    pub fn memory_mib(mut self, n: u32) -> Self {
        self.memory_mib = n;
        self
    }
    /// A virtio disk (`virtio-blk-pci`, id `virtio0`, serial [`VIRTIO_SERIAL`]) of `bytes`
    /// over `virtio.img`: `/dev/vda` in the guest.
    pub fn virtio(mut self, bytes: u64) -> Self {
        self.virtio_bytes = Some(bytes);
        self
    }
    /// A second SATA disk, rotational (`ide-hd,rotation_rate=7200`: sysfs
    /// `queue/rotational` 1 in the guest), serial [`HDD_SERIAL`], model [`HDD_MODEL`], of
    /// `bytes` over `hdd.img`, on the AHCI controller's second port: `/dev/sdb`.
    pub fn sata_hdd(mut self, bytes: u64) -> Self {
        self.hdd_bytes = Some(bytes);
        self
    }
    /// The first SATA disk's `rotation_rate` (1: a solid-state disk, `queue/rotational` 0
    /// in the guest; unset, QEMU reports none and Linux takes the disk as rotational).
    pub fn sata_rotation_rate(mut self, rpm: u16) -> Self {
        self.sata_rotation_rate = Some(rpm);
        self
    }
    /// Extra QEMU arguments (more devices, ...).
    pub fn qemu_arg(mut self, a: &str) -> Self {
        self.qemu_args.push(a.to_string());
        self
    }

    /// Boots, runs the payload, waits for power-off. Panics (with the console tail) when
    /// QEMU fails, the guest does not finish, or the timeout passes.
    pub fn boot(self) -> VmRun {
        self.try_boot().unwrap_or_else(|e| panic!("{e}"))
    }

    pub fn try_boot(self) -> Result<VmRun, String> {
        self.try_start()?.try_finish()
    }

    /// Starts QEMU and returns while the guest runs.
    pub fn start(self) -> RunningVm {
        self.try_start().unwrap_or_else(|e| panic!("{e}"))
    }

    pub fn try_start(self) -> Result<RunningVm, String> {
        have_qemu()?;
        let (kernel, base_initrd) = base()?;
        // DRIVEPROBE_VM_KEEP=1 keeps the temp dir (console, disks, initrd) for a look.
        let mut dir = tempfile::Builder::new()
            .prefix("driveprobe-vm.")
            .tempdir()
            .map_err(|e| format!("tempdir: {e}"))?;
        dir.disable_cleanup(std::env::var_os("DRIVEPROBE_VM_KEEP").is_some());
        let d = dir.path();

        // The per-boot archive: driveprobe, the payload, extra files.
        let mut args: Vec<String> = vec!["overlay".into(), path_str(&d.join("overlay.cpio"))];
        if let Some(bin) = &self.binary {
            args.extend(["--bin".into(), path_str(bin)]);
        }
        if let Some(p) = &self.payload {
            let pf = d.join("payload.sh");
            fs::write(&pf, p).map_err(|e| format!("write payload: {e}"))?;
            args.extend(["--payload".into(), path_str(&pf)]);
        }
        for (src, dest) in &self.files {
            args.extend(["--file".into(), format!("{}:{dest}", src.display())]);
        }
        let out = Command::new("bash")
            .arg(script())
            .args(&args)
            .env("TMPDIR", d)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("cannot run {}: {e}", script().display()))?;
        if !out.status.success() {
            return Err(format!(
                "build-initramfs.sh overlay failed: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        let initrd = d.join("initrd");
        {
            let mut f = fs::File::create(&initrd).map_err(|e| format!("initrd: {e}"))?;
            for part in [base_initrd.clone(), d.join("overlay.cpio")] {
                let bytes = fs::read(&part).map_err(|e| format!("{}: {e}", part.display()))?;
                f.write_all(&bytes).map_err(|e| format!("initrd: {e}"))?;
            }
        }
        // Sparse backing files, new for each boot (never a block device of the host).
        let nvme_img = d.join("nvme.img");
        let sata_img = d.join("sata.img");
        let virtio_img = d.join("virtio.img");
        let hdd_img = d.join("hdd.img");
        let mut images = vec![(&nvme_img, self.nvme_bytes), (&sata_img, self.sata_bytes)];
        if let Some(n) = self.virtio_bytes {
            images.push((&virtio_img, n));
        }
        if let Some(n) = self.hdd_bytes {
            images.push((&hdd_img, n));
        }
        for (p, n) in images {
            sparse_image(p, n)?;
        }

        let console = d.join("console.log");
        let stderr = d.join("qemu.stderr");
        let qmp_sock = d.join("qmp.sock");
        let kmsg = d.join("kmsg.log");
        let mut cmd = Command::new(QEMU);
        cmd.args([
            "-accel",
            "tcg",
            "-cpu",
            "max",
            "-smp",
            "1",
            "-nographic",
            "-no-reboot",
        ])
        .args(["-m", &self.memory_mib.to_string()])
        .args(["-bios", QBOOT, "-net", "none"])
        .args(["-kernel", &path_str(&kernel), "-initrd", &path_str(&initrd)])
        .args(["-append", "console=ttyS0 quiet loglevel=1 panic=-1"])
        // The serial console (ttyS0) is parsed, so the kernel prints only alerts there;
        // its whole log goes to a second port (ttyS1, the guest's /init copies
        // /proc/kmsg to it) and is shown when a boot fails: a guest that hangs on an I/O
        // says which (the kernel's timeouts and resets).
        .args(["-serial", "mon:stdio", "-serial"])
        .arg(format!("file:{}", kmsg.display()))
        .arg("-drive")
        .arg(format!(
            "file={},if=none,id=nv0,format=raw",
            nvme_img.display()
        ))
        .arg("-device")
        .arg(format!(
            "nvme,id=nvme0,serial={NVME_SERIAL},drive=nv0{}",
            self.nvme_extra
        ))
        // Not id=sd0: the pc machine has an implicit SD-card drive with that id.
        .arg("-drive")
        .arg(format!(
            "file={},if=none,id=sata0,format=raw",
            sata_img.display()
        ))
        .args(["-device", "ahci,id=ahci", "-device"])
        .arg(match self.sata_rotation_rate {
            Some(r) => format!("ide-hd,drive=sata0,bus=ahci.0,rotation_rate={r}"),
            None => "ide-hd,drive=sata0,bus=ahci.0".to_string(),
        });
        if self.hdd_bytes.is_some() {
            cmd.arg("-drive")
                .arg(format!(
                    "file={},if=none,id=hdd0,format=raw",
                    hdd_img.display()
                ))
                .arg("-device")
                .arg(format!(
                    "ide-hd,drive=hdd0,bus=ahci.1,rotation_rate=7200,serial={HDD_SERIAL},model={HDD_MODEL}"
                ));
        }
        if self.virtio_bytes.is_some() {
            cmd.arg("-drive")
                .arg(format!(
                    "file={},if=none,id=vd0,format=raw",
                    virtio_img.display()
                ))
                .arg("-device")
                .arg(format!(
                    "virtio-blk-pci,id=virtio0,drive=vd0,serial={VIRTIO_SERIAL}"
                ));
        }
        if self.qmp {
            cmd.arg("-qmp")
                .arg(format!("unix:{},server=on,wait=off", qmp_sock.display()));
        }
        cmd.args(&self.qemu_args);
        let out_f = fs::File::create(&console).map_err(|e| format!("console: {e}"))?;
        let err_f = fs::File::create(&stderr).map_err(|e| format!("stderr: {e}"))?;
        let child = cmd
            .stdin(Stdio::null())
            .stdout(out_f)
            .stderr(err_f)
            .spawn()
            .map_err(|e| format!("cannot start {QEMU}: {e}"))?;
        let started = Instant::now();
        Ok(RunningVm {
            child: Some(child),
            dir,
            console,
            kmsg,
            stderr,
            qmp_sock: self.qmp.then_some(qmp_sock),
            qmp: None,
            started,
            deadline: started + self.timeout,
            timeout: self.timeout,
        })
    }
}

/// A new sparse file of `bytes` (a guest disk; never a block device of the host).
pub fn sparse_image(p: &Path, bytes: u64) -> Result<(), String> {
    fs::File::create(p)
        .and_then(|f| f.set_len(bytes))
        .map_err(|e| format!("{}: {e}", p.display()))
}

fn path_str(p: &Path) -> String {
    p.to_str().expect("UTF-8 path").to_string()
}

/// A guest that is running. Dropping it kills QEMU.
pub struct RunningVm {
    child: Option<Child>,
    dir: tempfile::TempDir,
    console: PathBuf,
    /// The guest kernel's log (its second serial port).
    kmsg: PathBuf,
    stderr: PathBuf,
    qmp_sock: Option<PathBuf>,
    qmp: Option<Qmp>,
    started: Instant,
    deadline: Instant,
    timeout: Duration,
}

impl RunningVm {
    /// The serial console so far (`\r` removed).
    pub fn console(&self) -> String {
        fs::read(&self.console)
            .map(|b| String::from_utf8_lossy(&b).replace('\r', ""))
            .unwrap_or_default()
    }

    /// The guest kernel's log so far (`\r` removed).
    pub fn kernel_log(&self) -> String {
        fs::read(&self.kmsg)
            .map(|b| String::from_utf8_lossy(&b).replace('\r', ""))
            .unwrap_or_default()
    }

    /// QEMU's process id (None once it has exited and been reaped).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The failure's first line says where the guest was and whether it was still
    /// printing: the section begun and not ended, and how long the console had been
    /// silent. A guest that hangs and one that is only slow look alike in a tail that a
    /// CI summary cuts to its first lines; the end of the kernel's log comes next, for
    /// the same reason.
    fn failure(&self, what: &str) -> String {
        let stderr = fs::read_to_string(&self.stderr).unwrap_or_default();
        let console = self.console();
        let silent = match fs::metadata(&self.console).and_then(|m| m.modified()) {
            _ if console.is_empty() => "nothing on the console".to_string(),
            Ok(t) => format!(
                "console silent for {:.1} s",
                t.elapsed().unwrap_or_default().as_secs_f64()
            ),
            Err(e) => format!("console's time unknown: {e}"),
        };
        format!(
            "VM: {what} ({:.1} s after start; {}; {silent})\n--- guest kernel log tail ---\n{}--- console tail ---\n{}--- qemu stderr ---\n{}",
            self.started.elapsed().as_secs_f64(),
            where_in_payload(&console),
            tail(&self.kernel_log(), 8),
            tail(&console, 40),
            stderr,
        )
    }

    /// Gives up `d` from now instead of at the boot's timeout (for a test of the give-up).
    pub fn give_up_after(&mut self, d: Duration) {
        self.deadline = Instant::now() + d;
        self.timeout = self.deadline - self.started;
    }

    /// Waits until a console line contains `needle` (e.g. `=== READY inject`).
    pub fn wait_for(&mut self, needle: &str) {
        self.try_wait_for(needle).unwrap_or_else(|e| panic!("{e}"))
    }

    pub fn try_wait_for(&mut self, needle: &str) -> Result<(), String> {
        loop {
            if self.console().lines().any(|l| l.contains(needle)) {
                return Ok(());
            }
            if let Some(st) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                return Err(self.failure(&format!("QEMU exited ({st}) before '{needle}'")));
            }
            if Instant::now() >= self.deadline {
                self.kill();
                return Err(self.failure(&format!(
                    "timed out after {:?} waiting for '{needle}'",
                    self.timeout
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The QMP connection (capabilities negotiated). Needs [`VmBuilder::qmp`].
    pub fn qmp(&mut self) -> &mut Qmp {
        if self.qmp.is_none() {
            let sock = self
                .qmp_sock
                .clone()
                .unwrap_or_else(|| panic!("VM: no QMP socket: build it with .qmp()"));
            let q = Qmp::connect(&sock, Duration::from_secs(10))
                .unwrap_or_else(|e| panic!("{}", self.failure(&e)));
            self.qmp = Some(q);
        }
        self.qmp.as_mut().unwrap()
    }

    fn kill(&mut self) {
        if let Some(c) = self.child.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
        self.child = None;
    }

    /// Waits for power-off; panics on failure with the console tail.
    pub fn finish(self) -> VmRun {
        self.try_finish().unwrap_or_else(|e| panic!("{e}"))
    }

    /// As [`RunningVm::finish`], and hands over the boot's temp dir (the guest's disk
    /// images, `nvme.img` and `sata.img`), for checks on the disks after power-off; the
    /// dir is removed when the returned `TempDir` is dropped.
    pub fn finish_keeping_disks(mut self) -> (VmRun, tempfile::TempDir) {
        let empty = tempfile::Builder::new()
            .prefix("driveprobe-vm-done.")
            .tempdir()
            .expect("tempdir");
        let run = self.finish_ref().unwrap_or_else(|e| panic!("{e}"));
        (run, std::mem::replace(&mut self.dir, empty))
    }

    pub fn try_finish(mut self) -> Result<VmRun, String> {
        self.finish_ref()
    }

    fn finish_ref(&mut self) -> Result<VmRun, String> {
        // QMP first: QEMU waits for nobody on it, but close it before the end.
        self.qmp = None;
        let status = loop {
            let c = self.child.as_mut().expect("QEMU child");
            match c.try_wait() {
                Ok(Some(st)) => break st,
                Ok(None) => {}
                Err(e) => return Err(self.failure(&format!("wait for QEMU: {e}"))),
            }
            if Instant::now() >= self.deadline {
                self.kill();
                return Err(
                    self.failure(&format!("timed out after {:?}: QEMU killed", self.timeout))
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        self.child = None;
        let elapsed = self.started.elapsed();
        if !status.success() {
            return Err(self.failure(&format!("QEMU exited with {status}")));
        }
        let console = self.console();
        // Shown with the output of a failing test (cargo captures it otherwise).
        eprintln!(
            "VM: QEMU exited after {:.1} s (temp dir {}, kept with DRIVEPROBE_VM_KEEP=1)",
            elapsed.as_secs_f64(),
            self.dir.path().display()
        );
        if !console.lines().any(|l| l.starts_with("=== GUEST DONE")) {
            return Err(self.failure("the guest did not reach '=== GUEST DONE'"));
        }
        // A payload's wait that ran out says so ("=== GAVE UP waiting for ..."): fail on
        // it, rather than on whatever the payload read next.
        if let Some(l) = console.lines().find(|l| l.starts_with("=== GAVE UP")) {
            return Err(self.failure(&format!("the guest {}", &l[4..].to_lowercase())));
        }
        Ok(VmRun {
            sections: parse_sections(&console),
            console,
            elapsed,
            kernel_log: self.kernel_log(),
        })
    }
}

impl Drop for RunningVm {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Where the guest's payload was: inside the section it began last (`=== BEGIN name`
/// without its `=== END`), or after the one it ended last (`runout` prints a section
/// only once its command is done). An END marker may follow output that had no final
/// newline on the same line, as [`parse_sections`] allows.
fn where_in_payload(console: &str) -> String {
    let last = console.lines().rev().find_map(|l| {
        if let Some(name) = l.strip_prefix("=== BEGIN ") {
            return Some(format!("in section {}", name.trim()));
        }
        let end = &l[l.find("=== END ")? + 8..];
        let name = end.rsplit_once(" rc=").map_or(end, |(n, _)| n);
        Some(format!("after section {}", name.trim()))
    });
    last.unwrap_or_else(|| "before any section".to_string())
}

/// Last `n` lines of `text`.
pub fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let mut s = lines[lines.len().saturating_sub(n)..].join("\n");
    s.push('\n');
    s
}

/// A finished boot.
#[derive(Debug, Clone)]
pub struct VmRun {
    /// The whole serial console (`\r` removed).
    pub console: String,
    /// Framed sections by name (a name used twice keeps the last).
    pub sections: BTreeMap<String, Section>,
    /// From QEMU's start to its exit.
    pub elapsed: Duration,
    /// The guest kernel's log (its second serial port, `<level>[time] text` lines).
    pub kernel_log: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Section {
    pub name: String,
    pub rc: i32,
    pub text: String,
}

fn parse_sections(console: &str) -> BTreeMap<String, Section> {
    let mut out = BTreeMap::new();
    let mut cur: Option<(String, String)> = None;
    for line in console.lines() {
        // Output without a final newline puts the END marker at the end of its last line.
        let (line, text_before) = match line.find("=== END ") {
            Some(i) if i > 0 => (&line[i..], Some(&line[..i])),
            _ => (line, None),
        };
        if let (Some(t), Some((_, text))) = (text_before, cur.as_mut()) {
            text.push_str(t);
            text.push('\n');
        }
        if let Some(name) = line.strip_prefix("=== BEGIN ") {
            cur = Some((name.trim().to_string(), String::new()));
        } else if let Some(rest) = line.strip_prefix("=== END ") {
            let (name, rc) = match rest.rsplit_once(" rc=") {
                Some((n, rc)) => (n.trim(), rc.trim().parse().unwrap_or(-1)),
                None => (rest.trim(), -1),
            };
            if let Some((cname, text)) = cur.take() {
                if cname == name {
                    out.insert(
                        cname.clone(),
                        Section {
                            name: cname,
                            rc,
                            text,
                        },
                    );
                }
            }
        } else if let Some((_, text)) = cur.as_mut() {
            text.push_str(line);
            text.push('\n');
        }
    }
    out
}

impl VmRun {
    pub fn tail(&self, n: usize) -> String {
        tail(&self.console, n)
    }

    /// The section, or a panic with the console tail.
    pub fn section(&self, name: &str) -> &Section {
        self.sections.get(name).unwrap_or_else(|| {
            panic!(
                "VM: no section '{name}' on the console (have: {:?})\n--- console tail ---\n{}",
                self.sections.keys().collect::<Vec<_>>(),
                self.tail(60)
            )
        })
    }

    /// The section, which must have exited 0.
    pub fn ok_section(&self, name: &str) -> &Section {
        let s = self.section(name);
        assert_eq!(
            s.rc, 0,
            "VM: '{name}' exited {} in the guest:\n{}",
            s.rc, s.text
        );
        s
    }

    /// Lines starting with `prefix` (e.g. `=== SAW`).
    pub fn lines_starting(&self, prefix: &str) -> Vec<&str> {
        self.console
            .lines()
            .filter(|l| l.starts_with(prefix))
            .collect()
    }
}

impl Section {
    /// The text as JSON (panics with the text when it is not).
    pub fn json(&self) -> Value {
        // Skip anything before the document (a kernel message, a warning on stderr) and
        // after it.
        let start = self.text.find(['{', '[']).unwrap_or(0);
        let mut docs = serde_json::Deserializer::from_str(&self.text[start..]).into_iter::<Value>();
        match docs.next() {
            Some(Ok(v)) => v,
            Some(Err(e)) => panic!(
                "VM: section '{}' is not JSON ({e}):\n{}",
                self.name, self.text
            ),
            None => panic!("VM: section '{}' is empty", self.name),
        }
    }

    /// Bytes of a `runhex` section (`xxd -p` lines).
    pub fn hex(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for line in self.text.lines().map(str::trim) {
            if line.is_empty()
                || line.len() % 2 != 0
                || !line.bytes().all(|b| b.is_ascii_hexdigit())
            {
                // a kernel message in the middle of the dump would corrupt it: refuse
                assert!(
                    line.is_empty(),
                    "VM: section '{}' has a line that is not hex: {line:?}",
                    self.name
                );
                continue;
            }
            for i in (0..line.len()).step_by(2) {
                out.push(u8::from_str_radix(&line[i..i + 2], 16).unwrap());
            }
        }
        out
    }
}

/// A minimal QMP client over the Unix socket: greeting, `qmp_capabilities`, then commands.
pub struct Qmp {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
    /// Events seen while waiting for replies.
    pub events: Vec<Value>,
    /// The start of a message whose end has not arrived yet (a read timed out mid-line).
    partial: String,
}

impl Qmp {
    pub fn connect(sock: &Path, wait: Duration) -> Result<Qmp, String> {
        let until = Instant::now() + wait;
        let stream = loop {
            match UnixStream::connect(sock) {
                Ok(s) => break s,
                Err(e) if Instant::now() >= until => {
                    return Err(format!("QMP connect {}: {e}", sock.display()))
                }
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        };
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .map_err(|e| e.to_string())?;
        let writer = stream.try_clone().map_err(|e| e.to_string())?;
        let mut q = Qmp {
            reader: BufReader::new(stream),
            writer,
            events: Vec::new(),
            partial: String::new(),
        };
        let greeting = q.read()?;
        if greeting.get("QMP").is_none() {
            return Err(format!("QMP: unexpected greeting {greeting}"));
        }
        q.execute("qmp_capabilities", Value::Null)?;
        Ok(q)
    }

    fn read(&mut self) -> Result<Value, String> {
        self.read_within()?
            .ok_or_else(|| "QMP read: no message within the socket's timeout".into())
    }

    /// The next message, or None when the socket's read timeout passed first (what was
    /// read of a message so far is kept for the next call).
    fn read_within(&mut self) -> Result<Option<Value>, String> {
        match self.reader.read_line(&mut self.partial) {
            Ok(0) => Err("QMP: connection closed".into()),
            Ok(_) => {
                let line = std::mem::take(&mut self.partial);
                serde_json::from_str(&line)
                    .map(Some)
                    .map_err(|e| format!("QMP: bad JSON {line:?}: {e}"))
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                Ok(None)
            }
            Err(e) => Err(format!("QMP read: {e}")),
        }
    }

    /// Runs a command; its `return` value, or its `error` as Err.
    pub fn execute(&mut self, command: &str, arguments: Value) -> Result<Value, String> {
        let mut msg = json!({ "execute": command });
        if !arguments.is_null() {
            msg["arguments"] = arguments;
        }
        let mut text = msg.to_string();
        text.push('\n');
        self.writer
            .write_all(text.as_bytes())
            .map_err(|e| format!("QMP write: {e}"))?;
        loop {
            let m = self.read()?;
            if m.get("event").is_some() {
                self.events.push(m);
                continue;
            }
            if let Some(r) = m.get("return") {
                return Ok(r.clone());
            }
            if let Some(e) = m.get("error") {
                return Err(format!("QMP {command}: {e}"));
            }
            return Err(format!("QMP {command}: unexpected reply {m}"));
        }
    }

    pub fn qom_set(&mut self, path: &str, property: &str, value: Value) -> Result<(), String> {
        self.execute(
            "qom-set",
            json!({ "path": path, "property": property, "value": value }),
        )
        .map(|_| ())
    }

    pub fn qom_get(&mut self, path: &str, property: &str) -> Result<Value, String> {
        self.execute("qom-get", json!({ "path": path, "property": property }))
    }

    /// Waits (up to `limit`) for an event named `name`, seen before or arriving now, and
    /// takes it out of [`Qmp::events`].
    pub fn wait_event(&mut self, name: &str, limit: Duration) -> Result<Value, String> {
        let until = Instant::now() + limit;
        loop {
            if let Some(i) = self.events.iter().position(|e| e["event"] == name) {
                return Ok(self.events.remove(i));
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(format!("QMP: no {name} event within {limit:?}"));
            }
            // Wait no longer than what is left. (`writer` is a clone of the same socket:
            // the timeout is the socket's.)
            let _ = self
                .writer
                .set_read_timeout(Some(left.max(Duration::from_millis(10))));
            let m = self.read_within();
            let _ = self.writer.set_read_timeout(Some(Duration::from_secs(30)));
            if let Some(m) = m? {
                if m.get("event").is_some() {
                    self.events.push(m);
                }
            }
        }
    }

    /// Hot-unplugs device `id` and waits until the guest has let it go (`DEVICE_DELETED`:
    /// a PCI device leaves only when the guest's ACPI hotplug driver releases it). A
    /// `-drive` backend goes with its device.
    ///
    /// The request is repeated every `limit / 4` while the guest has not let go: an ACPI
    /// hotplug request that arrives while the guest is busy with the previous one can be
    /// missed by it, and repeating `device_del` re-sends the request (the PIIX4 hotplug
    /// controller keeps the device, and QEMU accepts the repeat).
    pub fn device_del(&mut self, id: &str, limit: Duration) -> Result<(), String> {
        self.events.retain(|e| e["event"] != "DEVICE_DELETED");
        let started = Instant::now();
        let until = started + limit;
        let mut requests = 0;
        loop {
            let asked = self.execute("device_del", json!({ "id": id }));
            if let Some(i) = self
                .events
                .iter()
                .position(|e| e["event"] == "DEVICE_DELETED" && e["data"]["device"] == id)
            {
                self.events.remove(i);
                return Ok(());
            }
            // A repeat may be refused (an unplug already pending); the first may not.
            if requests == 0 {
                asked?;
            }
            requests += 1;
            let next = (Instant::now() + limit / 4).min(until);
            loop {
                let left = next.saturating_duration_since(Instant::now());
                match self.wait_event("DEVICE_DELETED", left) {
                    Ok(e) if e["data"]["device"] == id => return Ok(()),
                    Ok(_) => continue,
                    Err(_) if Instant::now() < until => break,
                    Err(_) => {
                        return Err(format!(
                            "QMP: the guest did not release {id} within {limit:?} \
                             ({requests} device_del requests)"
                        ))
                    }
                }
            }
        }
    }

    /// Hot-plugs a virtio disk (`virtio-blk-pci`) `id` with `serial` over the raw image
    /// `file`, on a new block node `node` (node names are not reused). The guest sees it
    /// through ACPI PCI hotplug (`virtio_blk` is loaded at boot): a new `/dev/vdX`.
    pub fn add_virtio(
        &mut self,
        id: &str,
        serial: &str,
        file: &Path,
        node: &str,
    ) -> Result<(), String> {
        self.add_disk("virtio-blk-pci", id, serial, file, node)
    }

    /// Hot-unplugs the virtio disk `id` added by [`Qmp::add_virtio`] (waits until the
    /// guest let it go, see [`Qmp::device_del`]), then deletes its block node `node`
    /// (a `blockdev-add` node does not go with its device).
    pub fn remove_virtio(&mut self, id: &str, node: &str, limit: Duration) -> Result<(), String> {
        self.device_del(id, limit)?;
        self.execute("blockdev-del", json!({ "node-name": node }))
            .map(|_| ())
    }

    /// Hot-plugs an NVMe controller `id` with `serial` over the raw image `file` (a new
    /// block node `node` each time: node names are not reused).
    pub fn add_nvme(
        &mut self,
        id: &str,
        serial: &str,
        file: &Path,
        node: &str,
    ) -> Result<(), String> {
        self.add_disk("nvme", id, serial, file, node)
    }

    /// A new raw block node `node` over `file`, then a device of QEMU type `driver` on it.
    fn add_disk(
        &mut self,
        driver: &str,
        id: &str,
        serial: &str,
        file: &Path,
        node: &str,
    ) -> Result<(), String> {
        self.execute(
            "blockdev-add",
            json!({
                "driver": "raw",
                "node-name": node,
                "file": { "driver": "file", "filename": path_str(file) },
            }),
        )?;
        self.execute(
            "device_add",
            json!({ "driver": driver, "id": id, "serial": serial, "drive": node }),
        )
        .map(|_| ())
    }
}
