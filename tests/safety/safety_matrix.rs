//! The safety gate, proven on real block devices (issue 7): loop devices over files in
//! /dev/shm with a filesystem on them, in every state the gate must refuse (mounted, a
//! mounted partition, swap, a serial or WWN that does not match, no `--allow-destructive`
//! or `destructive = true`), tried through EVERY way driveprobe writes: `bench` write
//! workloads, `bench --suite` for every suite, and the daemon (a write probe and a
//! scheduled suite). The backing file is checksummed before and after each attempt and
//! must not change; a positive control (the one combination that may write) shows the
//! checksum would have caught a write.
//!
//! And file targets: writes stay inside the file (neighbours before and after it in the
//! filesystem's allocation order keep their checksums through write benches, suites with
//! purge and the daemon's write canary); a symbolic link (to a neighbour or to a block
//! device) and a file with a second hard link are refused.
//!
//! Device-mapper and md are absent on this host kernel, so "a device with holders" is
//! proven in the VM harness, not here.
//!
//! Each test prints its part of the matrix (`MATRIX case | path | attempts | refused |
//! unchanged`). Needs root, util-linux, e2fsprogs.

use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::daemon::{file_drive, Daemon, BIN};
use common::{
    checksum, loop_serial, marked_image, mkfs_ext4, need_root, partition_image, random_file, sync,
    Loop, Mount, Swap, MIB,
};

/// Attempts per test (every one refused, every checksum unchanged): RELIABILITY.md gives
/// these figures, and `Tally::finish` checks the matrix really made them.
const MOUNTED_ATTEMPTS: u32 = 170;
const PARTITION_ATTEMPTS: u32 = 338;
const SWAP_ATTEMPTS: u32 = 170;
const FREE_DEVICE_ATTEMPTS: u32 = 153;
const FILE_TARGET_ATTEMPTS: u32 = 23;
const LINK_ATTEMPTS: u32 = 24;

/// One row of the matrix: (case, path) -> attempts, refused, unchanged.
#[derive(Default)]
struct Tally {
    rows: BTreeMap<(String, String), (u32, u32, u32)>,
}

impl Tally {
    fn add(&mut self, case: &str, path: &str, refused: bool, unchanged: bool) {
        let r = self
            .rows
            .entry((case.to_string(), path.to_string()))
            .or_default();
        r.0 += 1;
        r.1 += refused as u32;
        r.2 += unchanged as u32;
    }

    /// Prints the rows and asserts every attempt was refused and left the data unchanged,
    /// and that the matrix has the `expected` number of attempts (the figure RELIABILITY.md
    /// gives, checked there against the test's constant).
    fn finish(&self, expected: u32) {
        let mut total = 0;
        for ((case, path), (n, refused, unchanged)) in &self.rows {
            println!("MATRIX {case} | {path} | {n} | {refused} | {unchanged}");
            total += n;
            assert_eq!(
                (n, n),
                (refused, unchanged),
                "{case} / {path}: not every attempt was refused"
            );
        }
        println!("MATRIX-TOTAL {total}");
        assert_eq!(
            total, expected,
            "the matrix made {total} attempts; the test's constant (and RELIABILITY.md) say {expected}"
        );
    }
}

/// Runs `driveprobe ARGS`, killed after `limit` (a refusal is immediate; a write that
/// was not refused would run on, and the checksum would show it).
fn driveprobe(args: &[String], limit: Duration) -> Output {
    let mut child = Command::new(BIN)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run driveprobe");
    let t0 = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if t0.elapsed() > limit {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

/// The CLI's refusal: a non-zero exit, nothing on stdout, one line on stderr. Returns it.
fn one_line_refusal(out: &Output, what: &str) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stderr.lines().collect();
    assert!(
        !out.status.success() && out.status.code().is_some(),
        "{what}: not refused ({:?}): {stderr}",
        out.status
    );
    assert!(out.stdout.is_empty(), "{what}: stdout: {:?}", out.stdout);
    assert_eq!(lines.len(), 1, "{what}: not one line: {stderr}");
    assert!(
        lines[0].starts_with("driveprobe: error: "),
        "{what}: {stderr}"
    );
    lines[0].to_string()
}

/// The suites, from `driveprobe bench --list-suites` (every one writes: purge or fill).
fn suites() -> Vec<String> {
    let out = driveprobe(
        &["bench".into(), "--list-suites".into()],
        Duration::from_secs(10),
    );
    assert!(out.status.success());
    let names: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .take_while(|l| !l.starts_with("Scales"))
        .filter(|l| !l.is_empty() && !l.starts_with(' '))
        .map(str::to_string)
        .collect();
    assert!(names.len() >= 6, "{names:?}");
    names
}

/// The suites that run an application (a database) whose files live beside the file
/// target, by design, rather than in it (their `--list-suites` line says so).
fn beside_the_target_suites() -> Vec<String> {
    let out = driveprobe(
        &["bench".into(), "--list-suites".into()],
        Duration::from_secs(10),
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let lines: Vec<&str> = text.lines().collect();
    lines
        .windows(2)
        .filter(|w| !w[0].starts_with(' ') && w[1].contains("beside the file target"))
        .map(|w| w[0].to_string())
        .collect()
}

const WORKLOADS: [&str; 4] = ["randwrite", "write", "randrw", "rw"];

/// What `cli_attempts` tries against a block device: the write workloads and the trims
/// (fio's `trim`, `randtrim`, `trimwrite`), which destroy data as writes do (BLKDISCARD)
/// and so must meet the same gate, refused alike on a mounted, partitioned, swap or
/// unpermitted device. (The file cases keep `WORKLOADS`: a trim there is a punched hole,
/// and `tests/engine/trim.rs` checks the gate refuses all three on files and devices.)
const DEVICE_WORKLOADS: [&str; 7] = [
    "randwrite",
    "write",
    "randrw",
    "rw",
    "trim",
    "randtrim",
    "trimwrite",
];

/// What a suite needs besides its name to run at quick scale: `qos` with the embedded
/// table is refused there before the gate (p99.9999 needs more I/Os than quick scale
/// runs), so it gets a table of one writing row that quick scale supports.
/// The table is written into `dir` (the test's own temporary directory, removed with it).
fn suite_extra(suite: &str, dir: &Path) -> Vec<String> {
    if suite != "qos" {
        return Vec::new();
    }
    let path = dir.join("dp-safety-qos.toml");
    std::fs::write(
        &path,
        "[[class]]\nname = \"matrix\"\nabout = \"one writing row, quick scale\"\n\n\
         [[class.row]]\nname = \"4k-randwrite-qd1\"\nrw = \"randwrite\"\nbs = \"4k\"\n\
         workers = 1\ndepth = 1\nlimits_us = { \"99\" = 100000 }\n",
    )
    .unwrap();
    vec!["--qos-targets".into(), path.display().to_string()]
}

/// The flag combinations tried against a device whose serial is `right`; the one that may
/// write (allow + right serial) is left out unless `with_permitted`.
fn flag_sets(right: &str, with_permitted: bool) -> Vec<(&'static str, Vec<String>)> {
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    let mut v = vec![
        ("no flags", vec![]),
        ("allow only", s(&["--allow-destructive"])),
        (
            "allow, wrong serial",
            s(&[
                "--allow-destructive",
                "--expect-serial",
                "loop:/not/this/one",
            ]),
        ),
        (
            "allow, wrong wwn",
            s(&[
                "--allow-destructive",
                "--expect-wwn",
                "naa.5000c500a1b2c3d4",
            ]),
        ),
        (
            "allow, right serial, wrong wwn",
            s(&[
                "--allow-destructive",
                "--expect-serial",
                right,
                "--expect-wwn",
                "0x5000c500a1b2c3d4",
            ]),
        ),
        ("right serial, no allow", s(&["--expect-serial", right])),
        (
            "right serial, wrong case",
            s(&[
                "--allow-destructive",
                "--expect-serial",
                &right.to_uppercase(),
            ]),
        ),
    ];
    if with_permitted {
        v.push((
            "allow, right serial",
            s(&["--allow-destructive", "--expect-serial", right]),
        ));
    }
    v
}

/// Every CLI way to write, with every flag set, against `dev`; each must be refused in one
/// line and leave `backing` unchanged.
/// What the gate says when it refuses a block device, one of these.
const GATE_MESSAGES: [&str; 7] = [
    "pass --allow-destructive",
    "needs the drive's identity",
    "not the expected",
    "reports no WWN",
    "is mounted on",
    "in use as swap",
    "in use by the kernel",
];

fn cli_attempts(
    tally: &mut Tally,
    case: &str,
    dev: &Path,
    backing: &Path,
    flags: &[(&'static str, Vec<String>)],
    in_use: Option<&str>,
    swap: bool,
) {
    let dev = dev.to_str().unwrap().to_string();
    let mut paths: Vec<(String, Vec<String>)> = DEVICE_WORKLOADS
        .iter()
        .map(|w| {
            (
                format!("bench {w}"),
                vec![
                    "bench".into(),
                    "--rw".into(),
                    w.to_string(),
                    "--runtime".into(),
                    "1s".into(),
                ],
            )
        })
        .collect();
    for s in suites() {
        let mut args: Vec<String> = vec![
            "bench".into(),
            "--suite".into(),
            s.clone(),
            "--scale".into(),
            "quick".into(),
        ];
        args.extend(suite_extra(
            &s,
            backing.parent().expect("the backing file's directory"),
        ));
        paths.push((format!("suite {s}"), args));
    }
    for (path, base) in &paths {
        for (fname, f) in flags {
            let mut args = base.clone();
            args.extend(f.iter().cloned());
            args.push(dev.clone());
            let (out, unchanged) =
                common::watched(backing, swap, || driveprobe(&args, Duration::from_secs(30)));
            let what = format!("{case}: {path} [{fname}]");
            let line = one_line_refusal(&out, &what);
            assert!(
                GATE_MESSAGES.iter().any(|m| line.contains(m)),
                "{what}: not the gate's refusal: {line}"
            );
            if *fname == "allow, right serial" {
                // The only combination the flags allow: refused for the use alone.
                let m = in_use.expect("a permitted combination on a free device");
                assert!(line.contains(m), "{what}: {line}");
            }
            assert!(unchanged, "{what}: the backing file changed");
            tally.add(case, path, true, unchanged);
        }
    }
}

/// A daemon config with one raw drive: a write probe on it and a scheduled write suite
/// due at once (its state seeded as first seen long ago).
fn daemon_config(dir: &Path, dev: &Path, identity: &str, destructive: bool) -> PathBuf {
    let state = dir.join("state");
    let _ = std::fs::remove_dir_all(&state);
    std::fs::create_dir_all(&state).unwrap();
    std::fs::write(
        state.join("state.json"),
        r#"{"version":1,"schedules":{"s/d":{"first_seen":0}}}"#,
    )
    .unwrap();
    let cfg = dir.join("d.toml");
    let destructive = if destructive {
        "destructive = true\n"
    } else {
        ""
    };
    std::fs::write(
        &cfg,
        format!(
            "state_dir = \"{}\"\ndiscovery.enabled = false\nhealth_interval = \"1s\"\n\n[wear_budget]\nunrated_bytes_per_day = \"1TiB\"\nscheduled_unrated_bytes = \"1PiB\"\n\n\
[[drive]]\nname = \"d\"\n{identity}\npath = \"{}\"\n{destructive}\n\
[[probe]]\nname = \"wr\"\ndrives = [\"d\"]\nworkload = {{ read_pct = 0, rate_iops = 500, verify = false }}\n\n\
[[schedule]]\nname = \"s\"\ndrives = [\"d\"]\nsuite = \"enterprise\"\nscale = \"quick\"\ncron = \"0 0 1 1 *\"\nmax_duration = \"1m\"\n",
            state.display(),
            dev.display(),
        ),
    )
    .unwrap();
    cfg
}

fn runs(d: &Daemon) -> Vec<serde_json::Value> {
    let (code, _, body) = d.get("/api/v1/runs");
    assert_eq!(code, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

fn write_ops(d: &Daemon) -> f64 {
    d.scrape()
        .value(
            "driveprobe_probe_ops_total",
            &[("drive", "d"), ("probe", "wr"), ("op", "write")],
        )
        .unwrap_or(0.0)
}

/// The daemon on a raw drive whose identity matches but whose device is in use: the
/// write probe never writes (its collector fails), the scheduled run is recorded failed,
/// and the backing file is unchanged.
fn daemon_in_use(
    tally: &mut Tally,
    case: &str,
    dir: &Path,
    dev: &Path,
    backing: &Path,
    swap: bool,
) {
    let ((ops, r, log), unchanged) = common::watched(backing, swap, || {
        let cfg = daemon_config(
            dir,
            dev,
            &format!("serial = \"{}\"", loop_serial(backing)),
            true,
        );
        let d = Daemon::start(&cfg, &[]);
        let t0 = Instant::now();
        loop {
            let r = runs(&d);
            let e = d.scrape();
            let refused_probe = e.value(
                "driveprobe_collector_success",
                &[("drive", "d"), ("collector", "canary:wr")],
            ) == Some(0.0);
            let failed_run = r.iter().any(|x| x["status"] == "failed");
            if refused_probe && failed_run && t0.elapsed() > Duration::from_secs(4) {
                break;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "{case}: the daemon's refusal did not show; runs {r:?}\n{}\nlog:\n{}",
                e.text,
                d.log()
            );
            std::thread::sleep(Duration::from_millis(250));
        }
        let ops = write_ops(&d);
        let r = runs(&d);
        let log = d.log();
        let (st, _) = d.terminate(Duration::from_secs(10));
        assert!(st.success());
        (ops, r, log)
    });
    assert_eq!(ops, 0.0, "{case}: the write probe wrote");
    assert!(
        r.iter()
            .all(|x| x["status"] != "passed" && x["status"] != "running"),
        "{case}: {r:?}"
    );
    assert!(log.contains("refusing to write"), "{case}: {log}");
    assert!(unchanged, "{case}: the daemon changed the backing file");
    tally.add(case, "daemon write probe", ops == 0.0, unchanged);
    tally.add(case, "daemon scheduled suite", true, unchanged);
}

/// The daemon on a raw drive whose configured identity does not match the device at its
/// path: the drive is down (drive_up 0), nothing writes, no run starts.
fn daemon_wrong_identity(tally: &mut Tally, case: &str, dir: &Path, dev: &Path, backing: &Path) {
    for identity in [
        "serial = \"loop:/not/this/one\"".to_string(),
        "wwn = \"naa.5000c500a1b2c3d4\"".to_string(),
    ] {
        let cfg = daemon_config(dir, dev, &identity, true);
        let before = checksum(backing);
        let d = Daemon::start(&cfg, &[]);
        d.wait_for("drive_up 0", Duration::from_secs(20), |e| {
            e.value("driveprobe_drive_up", &[("drive", "d")]) == Some(0.0)
        });
        std::thread::sleep(Duration::from_secs(4));
        let e = d.scrape();
        assert_eq!(e.value("driveprobe_drive_up", &[("drive", "d")]), Some(0.0));
        let ops = write_ops(&d);
        let r = runs(&d);
        let (st, _) = d.terminate(Duration::from_secs(10));
        assert!(st.success());
        sync();
        let unchanged = checksum(backing) == before;
        assert_eq!(ops, 0.0, "{case} {identity}: wrote");
        assert!(r.is_empty(), "{case} {identity}: a run started: {r:?}");
        assert!(unchanged, "{case} {identity}: backing changed");
        tally.add(case, "daemon write probe", true, unchanged);
        tally.add(case, "daemon scheduled suite", true, unchanged);
    }
}

/// A config naming a raw device without `destructive = true`: refused by check-config and
/// by the daemon, exit status 2, one line naming the file and position.
fn daemon_not_destructive(tally: &mut Tally, case: &str, dir: &Path, dev: &Path, backing: &Path) {
    let cfg = daemon_config(
        dir,
        dev,
        &format!("serial = \"{}\"", loop_serial(backing)),
        false,
    );
    let cfg_s = cfg.to_str().unwrap().to_string();
    for (path, args) in [
        (
            "daemon write probe",
            vec!["check-config".to_string(), cfg_s.clone()],
        ),
        (
            "daemon scheduled suite",
            vec![
                "daemon".to_string(),
                "-c".into(),
                cfg_s.clone(),
                "--listen".into(),
                "127.0.0.1:0".into(),
            ],
        ),
    ] {
        let before = checksum(backing);
        let out = driveprobe(&args, Duration::from_secs(20));
        let line = one_line_refusal(&out, &format!("{case}: {args:?}"));
        assert_eq!(out.status.code(), Some(2), "{line}");
        assert!(line.contains(&format!("{cfg_s}:")), "{line}");
        assert!(line.contains("destructive = true"), "{line}");
        let unchanged = checksum(backing) == before;
        assert!(unchanged);
        tally.add(case, path, true, unchanged);
    }
}

/// A loop device over a 64 MiB file in `dir` with ext4 on it (no lazy init).
fn ext4_loop(dir: &Path, name: &str) -> (PathBuf, Loop) {
    let file = marked_image(dir, name, 64 * MIB);
    let lo = Loop::attach(&file, &[]);
    mkfs_ext4(lo.path());
    sync();
    (file, lo)
}

#[test]
fn a_mounted_device_is_never_written() {
    need_root();
    let dir = common::shm_dir("dp-safety-");
    let (file, lo) = ext4_loop(dir.path(), "disk.img");
    let _m = Mount::new(lo.path(), &dir.path().join("mnt"));
    sync();
    let mut t = Tally::default();
    let case = "mounted";
    let serial = loop_serial(&file);
    cli_attempts(
        &mut t,
        case,
        lo.path(),
        &file,
        &flag_sets(&serial, true),
        Some("is mounted on"),
        false,
    );
    daemon_in_use(&mut t, case, dir.path(), lo.path(), &file, false);
    t.finish(MOUNTED_ATTEMPTS);
}

#[test]
fn a_device_with_a_mounted_partition_is_never_written() {
    need_root();
    let dir = common::shm_dir("dp-safety-");
    let file = marked_image(dir.path(), "disk.img", 64 * MIB);
    partition_image(&file);
    let lo = Loop::attach(&file, &["--partscan"]);
    let p1 = lo.partition(1);
    mkfs_ext4(&p1);
    let _m = Mount::new(&p1, &dir.path().join("mnt"));
    sync();
    let mut t = Tally::default();
    let serial = loop_serial(&file);
    let expect = Some("is mounted on");
    cli_attempts(
        &mut t,
        "partition mounted: the disk",
        lo.path(),
        &file,
        &flag_sets(&serial, true),
        expect,
        false,
    );
    cli_attempts(
        &mut t,
        "partition mounted: the partition",
        &p1,
        &file,
        &flag_sets(&serial, true),
        expect,
        false,
    );
    daemon_in_use(
        &mut t,
        "partition mounted: the disk",
        dir.path(),
        lo.path(),
        &file,
        false,
    );
    t.finish(PARTITION_ATTEMPTS);
}

/// Pages the kernel has put in the swap area on `dev` (from /proc/swaps), in KiB.
fn swap_used(dev: &Path) -> u64 {
    let text = std::fs::read_to_string("/proc/swaps").unwrap();
    text.lines()
        .find(|l| l.split_whitespace().next() == dev.to_str())
        .and_then(|l| l.split_whitespace().nth(3))
        .and_then(|u| u.parse().ok())
        .unwrap_or(0)
}

#[test]
fn a_swap_device_is_never_written() {
    need_root();
    let dir = common::shm_dir("dp-safety-");
    let file = marked_image(dir.path(), "disk.img", 64 * MIB);
    let lo = Loop::attach(&file, &[]);
    let _s = Swap::on(lo.path());
    sync();
    let mut t = Tally::default();
    let serial = loop_serial(&file);
    cli_attempts(
        &mut t,
        "swap",
        lo.path(),
        &file,
        &flag_sets(&serial, true),
        Some("in use as swap"),
        true,
    );
    daemon_in_use(&mut t, "swap", dir.path(), lo.path(), &file, true);
    println!(
        "swap: the kernel had {} KiB in the swap area at the end",
        swap_used(lo.path())
    );
    t.finish(SWAP_ATTEMPTS);
}

/// A free device with a filesystem: only `--allow-destructive` with its own serial may
/// write. Every other combination is refused, through the CLI and the daemon; then the
/// permitted one writes, and the checksum shows it (the control).
#[test]
fn a_free_device_is_written_only_with_allow_destructive_and_its_serial() {
    need_root();
    let dir = common::shm_dir("dp-safety-");
    let (file, lo) = ext4_loop(dir.path(), "disk.img");
    let serial = loop_serial(&file);
    let mut t = Tally::default();
    cli_attempts(
        &mut t,
        "free: wrong identity or no allow",
        lo.path(),
        &file,
        &flag_sets(&serial, false),
        None,
        false,
    );
    daemon_wrong_identity(
        &mut t,
        "free: wrong identity or no allow",
        dir.path(),
        lo.path(),
        &file,
    );
    daemon_not_destructive(
        &mut t,
        "free: wrong identity or no allow",
        dir.path(),
        lo.path(),
        &file,
    );
    t.finish(FREE_DEVICE_ATTEMPTS);

    // The control: the permitted combination writes, and the checksum sees it.
    let before = checksum(&file);
    let out = driveprobe(
        &[
            "bench".into(),
            "--rw".into(),
            "randwrite".into(),
            "--io-size".into(),
            "1m".into(),
            "--allow-destructive".into(),
            "--expect-serial".into(),
            serial.clone(),
            lo.s().into(),
        ],
        Duration::from_secs(30),
    );
    common::assert_ok(&out, "driveprobe bench");
    sync();
    assert_ne!(
        checksum(&file),
        before,
        "the control run did not change the file"
    );
    // And the daemon with the right identity and destructive = true writes too.
    let cfg = daemon_config(
        dir.path(),
        lo.path(),
        &format!("serial = \"{serial}\""),
        true,
    );
    // The canary alone (no run due), so its write counter shows the writes.
    std::fs::remove_file(dir.path().join("state/state.json")).unwrap();
    let _ = std::fs::remove_file(dir.path().join("state/state.backup.json"));
    let before = checksum(&file);
    let d = Daemon::start(&cfg, &[]);
    d.wait_for("write ops", Duration::from_secs(30), |_| {
        write_ops(&d) > 0.0
    });
    let (st, _) = d.terminate(Duration::from_secs(10));
    assert!(st.success());
    sync();
    assert_ne!(
        checksum(&file),
        before,
        "the daemon's control did not write"
    );
    println!(
        "CONTROL free device, allow + right serial: bench and daemon wrote (checksums changed)"
    );
}

/// The first physical block of `file` (filefrag -v), for the allocation order.
fn first_physical_block(file: &Path) -> u64 {
    let out = common::run("filefrag", &["-v", file.to_str().unwrap()]);
    // "   0:        0..    1023:      34816..     35839:   1024:"
    let line = out
        .lines()
        .find(|l| l.trim_start().starts_with("0:"))
        .unwrap_or_else(|| panic!("no extent for {}: {out}", file.display()));
    let phys = line.split(':').nth(2).unwrap().trim();
    phys.split("..").next().unwrap().trim().parse().unwrap()
}

/// Files on an ext4 filesystem (a loop device in /dev/shm): a neighbour written before
/// the target and one after it, so they sit on either side of it on the device.
struct FileSetup {
    // Dropped in this order: unmount, detach, then remove the directory.
    mnt: Mount,
    _lo: Loop,
    target: PathBuf,
    neighbours: Vec<PathBuf>,
    _dir: tempfile::TempDir,
}

fn file_setup() -> FileSetup {
    let dir = common::shm_dir("dp-safety-");
    let img = common::image(dir.path(), "fs.img", 256 * MIB);
    let lo = Loop::attach(&img, &[]);
    mkfs_ext4(lo.path());
    let mnt = Mount::new(lo.path(), &dir.path().join("mnt"));
    // Three files of the same size; the one in the middle of the device is the target,
    // so it has a neighbour on each side. All three are made by driveprobe (so that they
    // are allocated alike); the target keeps driveprobe's ownership mark, the neighbours
    // lose it: they are someone else's files.
    let mut files: Vec<(u64, PathBuf)> = (0..3)
        .map(|i| {
            let p = mnt.dir().join(format!("f{i}.dat"));
            assert!(driveprobe::target::create_file_if_missing(&p, 32 * MIB).unwrap());
            sync();
            (first_physical_block(&p), p)
        })
        .collect();
    files.sort();
    assert!(
        files[0].0 < files[1].0 && files[1].0 < files[2].0,
        "allocation: {files:?}"
    );
    for (_, p) in [&files[0], &files[2]] {
        rustix::fs::removexattr(p, driveprobe::ownmark::OWNER_XATTR).unwrap();
    }
    let target = files[1].1.clone();
    println!(
        "file target {} at block {}, neighbours at blocks {} and {}",
        target.display(),
        files[1].0,
        files[0].0,
        files[2].0
    );
    FileSetup {
        _dir: dir,
        mnt,
        _lo: lo,
        target,
        neighbours: vec![files[0].1.clone(), files[2].1.clone()],
    }
}

impl FileSetup {
    fn sums(&self) -> Vec<u128> {
        sync();
        self.neighbours.iter().map(|p| checksum(p)).collect()
    }
}

#[test]
fn a_file_target_never_writes_outside_its_file() {
    need_root();
    let fs = file_setup();
    let tgt = fs.target.to_str().unwrap().to_string();
    let mut t = Tally::default();
    let case = "file target: neighbours";
    let mut target_changed = 0;

    // Write benches, and attempts to reach past the end of the file.
    for w in WORKLOADS {
        let before = fs.sums();
        let t0 = checksum(&fs.target);
        let out = driveprobe(
            &[
                "bench".into(),
                "--rw".into(),
                w.into(),
                "--runtime".into(),
                "1s".into(),
                "--iodepth".into(),
                "8".into(),
                tgt.clone(),
            ],
            Duration::from_secs(30),
        );
        common::assert_ok(&out, "driveprobe bench");
        let unchanged = fs.sums() == before;
        target_changed += (checksum(&fs.target) != t0) as u32;
        assert!(unchanged, "bench {w} changed a neighbour");
        // "refused" here means: kept inside the file.
        t.add(case, &format!("bench {w}"), true, unchanged);
    }
    assert_eq!(
        target_changed,
        WORKLOADS.len() as u32,
        "the benches did not write"
    );
    for (offset, size) in [("31m", "2m"), ("0", "33m"), ("32m", "4k")] {
        let before = fs.sums();
        let out = driveprobe(
            &[
                "bench".into(),
                "--rw".into(),
                "write".into(),
                "--offset".into(),
                offset.into(),
                "--size".into(),
                size.into(),
                tgt.clone(),
            ],
            Duration::from_secs(30),
        );
        let line = one_line_refusal(&out, &format!("offset {offset} size {size}"));
        assert!(line.contains("the region needs"), "{line}");
        let unchanged = fs.sums() == before;
        assert!(unchanged);
        t.add(case, "bench past the end", true, unchanged);
    }

    // Suites: each purges (a punched hole on a file) and writes. The application suites
    // keep a database beside the target (their design): they too must leave the
    // neighbours alone, but need not write the target itself.
    let beside = beside_the_target_suites();
    for s in suites() {
        let before = fs.sums();
        let t0 = checksum(&fs.target);
        let mut args: Vec<String> = vec![
            "bench".into(),
            "--suite".into(),
            s.clone(),
            "--scale".into(),
            "quick".into(),
            "--round-time".into(),
            "200ms".into(),
            "--max-rounds".into(),
            "5".into(),
            "--precondition-passes".into(),
            "1".into(),
            "--output".into(),
            fs.mnt
                .dir()
                .join("..")
                .join(format!("{s}.json"))
                .to_str()
                .unwrap()
                .into(),
        ];
        args.extend(suite_extra(&s, &fs.mnt.dir().join("..")));
        args.push(tgt.clone());
        let out = driveprobe(&args, Duration::from_secs(300));
        assert!(
            out.status.code().is_some(),
            "suite {s} did not finish: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let unchanged = fs.sums() == before;
        assert!(unchanged, "suite {s} changed a neighbour");
        // It did write (purge and fill): the target changed.
        if !beside.contains(&s) {
            assert_ne!(
                checksum(&fs.target),
                t0,
                "suite {s} did not write: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        t.add(case, &format!("suite {s}"), true, unchanged);
    }

    // The daemon: a write canary with verify, and a scheduled suite, on the file target.
    let state = fs.mnt.dir().join("..").join("state");
    std::fs::create_dir_all(&state).unwrap();
    std::fs::write(
        state.join("state.json"),
        r#"{"version":1,"schedules":{"s/f":{"first_seen":0}}}"#,
    )
    .unwrap();
    let cfg = fs.mnt.dir().join("..").join("d.toml");
    std::fs::write(
        &cfg,
        format!(
            "state_dir = \"{}\"\ndiscovery.enabled = false\n\n[wear_budget]\nunrated_bytes_per_day = \"1TiB\"\nscheduled_unrated_bytes = \"1PiB\"\n\n{}\
[[probe]]\nname = \"wr\"\ndrives = [\"f\"]\nworkload = {{ read_pct = 50, rate_iops = 1000, depth = 4, verify = true }}\n\n\
[[schedule]]\nname = \"s\"\ndrives = [\"f\"]\nsuite = \"latency\"\nscale = \"quick\"\ncron = \"0 0 1 1 *\"\nmax_duration = \"20s\"\n",
            state.display(),
            file_drive("f", &fs.target, "32MiB"),
        ),
    )
    .unwrap();
    let before = fs.sums();
    let target_before = checksum(&fs.target);
    let d = Daemon::start(&cfg, &[]);
    // The scheduled run goes first (it holds the drive), then the canary writes.
    let t0 = Instant::now();
    while !runs(&d).iter().any(|r| r["status"] != "running") {
        assert!(t0.elapsed() < Duration::from_secs(90), "{}", d.log());
        std::thread::sleep(Duration::from_millis(500));
    }
    d.wait_for("write canary I/O", Duration::from_secs(30), |e| {
        e.value(
            "driveprobe_probe_ops_total",
            &[("drive", "f"), ("probe", "wr"), ("op", "write")],
        )
        .is_some_and(|v| v > 100.0)
    });
    let e = d.scrape();
    let (st, _) = d.terminate(Duration::from_secs(10));
    assert!(st.success());
    let unchanged = fs.sums() == before;
    assert!(unchanged, "the daemon changed a neighbour");
    assert_ne!(
        checksum(&fs.target),
        target_before,
        "the daemon did not write its target"
    );
    assert_eq!(
        e.value(
            "driveprobe_probe_errors_total",
            &[("drive", "f"), ("probe", "wr"), ("op", "read")]
        ),
        Some(0.0),
        "verify or read errors on the canary"
    );
    t.add(case, "daemon write canary", true, unchanged);
    t.add(case, "daemon scheduled suite", true, unchanged);
    t.finish(FILE_TARGET_ATTEMPTS);
}

/// Symbolic links and hard links: the CLI refuses to write through a link to a file (to
/// a neighbour or to itself) and to a file with a second name; a link to a block device
/// goes through the block gate with all its checks; the daemon (and check-config) refuses
/// a file target that is a link or a file it did not create.
#[test]
fn links_are_not_a_way_around_the_gate() {
    need_root();
    let fs = file_setup();
    let dir = fs.mnt.dir().to_path_buf();
    let neighbour = fs.neighbours[0].clone();
    let mut t = Tally::default();

    let to_neighbour = dir.join("link-to-neighbour.dat");
    std::os::unix::fs::symlink(&neighbour, &to_neighbour).unwrap();
    let to_target = dir.join("link-to-target.dat");
    std::os::unix::fs::symlink(&fs.target, &to_target).unwrap();
    let twin = dir.join("twin.dat");
    std::fs::hard_link(&fs.neighbours[1], &twin).unwrap();
    // A link to a free block device with a filesystem (in /dev/shm, not on the ext4).
    let devdir = common::shm_dir("dp-safety-");
    let (backing, lo) = ext4_loop(devdir.path(), "dev.img");
    let to_dev = dir.join("link-to-dev.dat");
    std::os::unix::fs::symlink(lo.path(), &to_dev).unwrap();

    let all = |fs: &FileSetup| {
        let mut v = fs.sums();
        v.push(checksum(&fs.target));
        v.push(checksum(&backing));
        v
    };
    for (case, path, expect) in [
        ("symlink to a neighbour", &to_neighbour, "symbolic link"),
        ("symlink to the target", &to_target, "symbolic link"),
        ("hard link to a neighbour", &twin, "hard links"),
        ("symlink to a block device", &to_dev, "--allow-destructive"),
    ] {
        for w in WORKLOADS {
            let before = all(&fs);
            let out = driveprobe(
                &[
                    "bench".into(),
                    "--rw".into(),
                    w.into(),
                    "--runtime".into(),
                    "1s".into(),
                    path.to_str().unwrap().into(),
                ],
                Duration::from_secs(30),
            );
            let line = one_line_refusal(&out, &format!("{case}: bench {w}"));
            assert!(line.contains(expect), "{case}: {line}");
            let unchanged = all(&fs) == before;
            assert!(unchanged, "{case}: bench {w} changed a file");
            t.add(case, &format!("bench {w}"), true, unchanged);
        }
        // A suite through the link.
        let before = all(&fs);
        let out = driveprobe(
            &[
                "bench".into(),
                "--suite".into(),
                "latency".into(),
                "--scale".into(),
                "quick".into(),
                path.to_str().unwrap().into(),
            ],
            Duration::from_secs(60),
        );
        let line = one_line_refusal(&out, &format!("{case}: suite"));
        assert!(line.contains(expect), "{case}: {line}");
        let unchanged = all(&fs) == before;
        assert!(unchanged);
        t.add(case, "suite latency", true, unchanged);
    }
    // A link to a block device, with the block gate's flags but the device in use: still
    // the block gate's answer (here, a wrong serial).
    let before = all(&fs);
    let out = driveprobe(
        &[
            "bench".into(),
            "--rw".into(),
            "randwrite".into(),
            "--allow-destructive".into(),
            "--expect-serial".into(),
            "loop:/not/this/one".into(),
            to_dev.to_str().unwrap().into(),
        ],
        Duration::from_secs(30),
    );
    let line = one_line_refusal(&out, "link to dev, wrong serial");
    assert!(line.contains("not the expected"), "{line}");
    let unchanged = all(&fs) == before;
    assert!(unchanged);
    t.add(
        "symlink to a block device",
        "bench randwrite (allow, wrong serial)",
        true,
        unchanged,
    );

    // The daemon: a file target that is a link or has a second name (someone else's file)
    // is refused at config time, and the daemon does not start on it.
    for (case, path, needle) in [
        ("symlink to a neighbour", &to_neighbour, "symbolic link"),
        ("symlink to a block device", &to_dev, "symbolic link"),
        ("hard link to a neighbour", &twin, "did not create"),
    ] {
        let state = dir
            .join("..")
            .join(format!("state-{}", case.replace(' ', "-")));
        let cfg = dir.join("..").join("links.toml");
        std::fs::write(
            &cfg,
            format!(
                "state_dir = \"{}\"\ndiscovery.enabled = false\n\n{}[[probe]]\nname = \"wr\"\ndrives = [\"f\"]\nworkload = {{ read_pct = 0, rate_iops = 500 }}\n",
                state.display(),
                file_drive("f", path, "32MiB"),
            ),
        )
        .unwrap();
        let before = all(&fs);
        check_config_refuses(&cfg, needle);
        daemon_refuses_to_start(&cfg, needle);
        let unchanged = all(&fs) == before;
        assert!(unchanged, "{case}: the daemon changed a file");
        t.add(case, "daemon write canary", true, unchanged);
    }
    t.finish(LINK_ATTEMPTS);
}

// ---------------------------------------------------------------------------------------
// Ownership and paths (issue 16, items 1 and 3): driveprobe reads and writes only file
// targets it created (its `user.driveprobe.owner` mark), never past the configured size,
// and reaches them without following a symbolic link on any folder of the path.

fn s(p: &Path) -> String {
    p.to_str().unwrap().to_string()
}

/// A copy of some text (/etc/passwd, repeated) of `len` bytes: someone's file.
fn text_copy(path: &Path, len: usize) {
    let text =
        std::fs::read("/etc/passwd").unwrap_or_else(|_| b"root:x:0:0::/root:/bin/sh\n".to_vec());
    let mut v = Vec::with_capacity(len);
    while v.len() < len {
        v.extend_from_slice(&text);
    }
    v.truncate(len);
    std::fs::write(path, v).unwrap();
}

/// A daemon config with one file-target drive and one probe (`read_pct`).
fn own_config(dir: &Path, name: &str, target: &Path, size: &str, read_pct: u32) -> PathBuf {
    let cfg = dir.join(format!("{name}.toml"));
    std::fs::write(
        &cfg,
        format!(
            "state_dir = \"{}\"\ndiscovery.enabled = false\n\n[wear_budget]\nunrated_bytes_per_day = \"1TiB\"\nscheduled_unrated_bytes = \"1PiB\"\n\n{}\
[[probe]]\nname = \"p\"\ndrives = [\"f\"]\nworkload = {{ read_pct = {read_pct}, rate_iops = 2000, depth = 4 }}\n",
            dir.join(format!("state-{name}")).display(),
            file_drive("f", target, size),
        ),
    )
    .unwrap();
    cfg
}

/// `driveprobe check-config CFG`: refused, with `needle` in what it says.
fn check_config_refuses(cfg: &Path, needle: &str) -> String {
    let out = driveprobe(&["check-config".into(), s(cfg)], Duration::from_secs(20));
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(
        !out.status.success(),
        "check-config accepted {}: {}",
        cfg.display(),
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(stderr.contains(needle), "{stderr}");
    stderr
}

/// `driveprobe daemon --config CFG`: refuses to start (exits, not 0), saying `needle`.
fn daemon_refuses_to_start(cfg: &Path, needle: &str) {
    let out = driveprobe(
        &[
            "daemon".into(),
            "--config".into(),
            s(cfg),
            "--listen".into(),
            "127.0.0.1:0".into(),
        ],
        Duration::from_secs(20),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.code().is_some_and(|c| c != 0),
        "the daemon started on {} ({:?}): {stderr}",
        cfg.display(),
        out.status
    );
    assert!(stderr.contains(needle), "{stderr}");
}

fn collector_failed(e: &common::daemon::Exposition) -> bool {
    e.value(
        "driveprobe_collector_success",
        &[("drive", "f"), ("collector", "canary:p")],
    ) == Some(0.0)
}

/// An existing file driveprobe did not create (a copy of some text, shorter than the
/// configured size) is never changed: check-config refuses it, the daemon refuses to start
/// on it, a daemon probe (read or write) that finds it swapped in for its own file refuses
/// it and leaves it as it is (before: deleted and created again with random data, even
/// for a read-only probe), and `bench` writes it only with --allow-destructive.
#[test]
fn an_existing_file_driveprobe_did_not_create_is_never_changed() {
    let dir = common::shm_dir("dp-own-");
    let theirs = dir.path().join("theirs.txt");
    text_copy(&theirs, 4 * MIB as usize);
    let sum = common::sha256(&theirs);

    for (probe, read_pct) in [("read", 100), ("write", 0)] {
        // At config time and at start.
        let cfg = own_config(dir.path(), probe, &theirs, "8MiB", read_pct);
        let line = check_config_refuses(&cfg, "did not create");
        assert!(line.contains(theirs.to_str().unwrap()), "{line}");
        assert!(line.contains("remove the file"), "{line}");
        daemon_refuses_to_start(&cfg, "did not create");
        assert_eq!(common::sha256(&theirs), sum, "{probe}: config time");

        // Swapped in for the daemon's own file while it runs.
        let path = dir.path().join(format!("{probe}.dat"));
        let cfg = own_config(dir.path(), probe, &path, "8MiB", read_pct);
        let d = Daemon::start(&cfg, &[]);
        let op = if read_pct == 100 { "read" } else { "write" };
        d.wait_for("canary I/O", Duration::from_secs(30), |e| {
            e.value(
                "driveprobe_probe_ops_total",
                &[("drive", "f"), ("probe", "p"), ("op", op)],
            )
            .is_some_and(|v| v > 100.0)
        });
        let copy = dir.path().join(format!("{probe}.copy"));
        std::fs::copy(&theirs, &copy).unwrap();
        std::fs::rename(&copy, &path).unwrap();
        d.wait_for(
            "the canary refusing the file",
            Duration::from_secs(30),
            collector_failed,
        );
        // Refused again at the next attempt (the canary retries with a backoff).
        let t0 = Instant::now();
        while d.log().matches("did not create").count() < 2 {
            assert!(t0.elapsed() < Duration::from_secs(30), "{}", d.log());
            std::thread::sleep(Duration::from_millis(100));
        }
        let log = d.log();
        let (st, _) = d.terminate(Duration::from_secs(10));
        assert!(st.success());
        assert_eq!(
            common::sha256(&path),
            sum,
            "{probe} probe changed the file\n{log}"
        );
        assert!(!log.contains("shorter than its configured size"), "{log}");
    }

    // bench: a write needs --allow-destructive; a read is fine.
    for args in [
        vec!["--rw", "write", "--runtime", "1"],
        vec!["--rw", "randrw", "--runtime", "1"],
        vec!["--rw", "write", "--size", "1m", "--runtime", "1"],
        vec!["--suite", "latency", "--scale", "quick"],
    ] {
        let mut a: Vec<String> = vec!["bench".into()];
        a.extend(args.iter().map(|x| x.to_string()));
        a.push(s(&theirs));
        let out = driveprobe(&a, Duration::from_secs(60));
        let line = one_line_refusal(&out, &format!("bench {args:?}"));
        assert!(line.contains("--allow-destructive"), "{line}");
        assert!(line.contains("did not create"), "{line}");
        assert_eq!(common::sha256(&theirs), sum, "bench {args:?}");
    }
    let out = driveprobe(
        &[
            "bench".into(),
            "--rw".into(),
            "randread".into(),
            "--runtime".into(),
            "1".into(),
            s(&theirs),
        ],
        Duration::from_secs(30),
    );
    common::assert_ok(&out, "a read bench of someone's file");
    assert_eq!(common::sha256(&theirs), sum, "a read bench");
    // The control: allowed, it is written (the checksum would show a write).
    let out = driveprobe(
        &[
            "bench".into(),
            "--rw".into(),
            "write".into(),
            "--allow-destructive".into(),
            "--runtime".into(),
            "1".into(),
            s(&theirs),
        ],
        Duration::from_secs(30),
    );
    common::assert_ok(&out, "bench --allow-destructive");
    assert_ne!(
        common::sha256(&theirs),
        sum,
        "--allow-destructive did not write"
    );
}

/// The sha256 of bytes `[from, ..)` of `path`.
fn tail_sum(path: &Path, from: u64) -> String {
    let v = std::fs::read(path).unwrap();
    let d = ring::digest::digest(&ring::digest::SHA256, &v[from as usize..]);
    d.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

/// A file longer than the configured size (driveprobe's own, made at 16 MiB, now
/// configured at 8 MiB) is written only within its first 8 MiB by the daemon's write
/// canary (before: over the whole file), and by a write bench of `--size 8m`.
#[test]
fn a_file_longer_than_its_size_is_written_only_within_it() {
    let dir = common::shm_dir("dp-own-");
    let path = dir.path().join("long.dat");
    let out = driveprobe(
        &[
            "bench".into(),
            "--rw".into(),
            "read".into(),
            "--size".into(),
            "16m".into(),
            "--runtime".into(),
            "1".into(),
            s(&path),
        ],
        Duration::from_secs(60),
    );
    common::assert_ok(&out, "bench creating the file");
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 16 * MIB);
    let (head, tail) = (tail_sum(&path, 0), tail_sum(&path, 8 * MIB));

    let cfg = own_config(dir.path(), "long", &path, "8MiB", 0);
    let d = Daemon::start(&cfg, &[]);
    // 8 MiB is 2048 blocks of 4 KiB: 6000 random writes over 16 MiB would all but surely
    // reach the second half.
    d.wait_for("write canary I/O", Duration::from_secs(60), |e| {
        e.value(
            "driveprobe_probe_ops_total",
            &[("drive", "f"), ("probe", "p"), ("op", "write")],
        )
        .is_some_and(|v| v > 6000.0)
    });
    let (st, _) = d.terminate(Duration::from_secs(10));
    assert!(st.success());
    assert_ne!(tail_sum(&path, 0), head, "the canary did not write");
    assert_eq!(
        tail_sum(&path, 8 * MIB),
        tail,
        "the canary wrote past its size"
    );
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 16 * MIB);

    let out = driveprobe(
        &[
            "bench".into(),
            "--rw".into(),
            "randwrite".into(),
            "--size".into(),
            "8m".into(),
            "--runtime".into(),
            "1".into(),
            s(&path),
        ],
        Duration::from_secs(30),
    );
    common::assert_ok(&out, "a write bench of --size 8m");
    assert_eq!(
        tail_sum(&path, 8 * MIB),
        tail,
        "the bench wrote past its size"
    );
}

/// A symbolic link to a folder in the middle of a file target's path is refused at
/// config time (check-config and the daemon's start) and by `bench`, whether the file
/// behind it is missing (it would be created through the link) or driveprobe's own.
#[test]
fn a_symlinked_folder_on_the_path_is_refused() {
    let dir = common::shm_dir("dp-own-");
    let real = dir.path().join("real");
    std::fs::create_dir(&real).unwrap();
    let via = dir.path().join("via");
    std::os::unix::fs::symlink(&real, &via).unwrap();

    // Missing behind the link.
    let cfg = own_config(dir.path(), "via", &via.join("t.dat"), "8MiB", 0);
    check_config_refuses(&cfg, "symbolic link");
    daemon_refuses_to_start(&cfg, "symbolic link");
    let out = driveprobe(
        &[
            "bench".into(),
            "--rw".into(),
            "write".into(),
            "--size".into(),
            "1m".into(),
            "--runtime".into(),
            "1".into(),
            s(&via.join("t.dat")),
        ],
        Duration::from_secs(30),
    );
    // bench says it is creating the file, then refuses: the error is the last line.
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.code().is_some_and(|c| c != 0), "{stderr}");
    let line = stderr.lines().last().unwrap_or_default();
    assert!(line.starts_with("driveprobe: error: "), "{stderr}");
    assert!(line.contains("symbolic link"), "{line}");
    assert_eq!(
        std::fs::read_dir(&real).unwrap().count(),
        0,
        "a file was made through the link"
    );

    // Driveprobe's own file behind the link.
    let own = real.join("own.dat");
    let out = driveprobe(
        &[
            "bench".into(),
            "--rw".into(),
            "read".into(),
            "--size".into(),
            "1m".into(),
            "--runtime".into(),
            "1".into(),
            s(&own),
        ],
        Duration::from_secs(30),
    );
    common::assert_ok(&out, "bench creating the file");
    let sum = common::sha256(&own);
    let cfg = own_config(dir.path(), "via-own", &via.join("own.dat"), "1MiB", 0);
    check_config_refuses(&cfg, "symbolic link");
    for args in [
        vec!["--rw", "write", "--runtime", "1"],
        vec!["--rw", "write", "--allow-destructive", "--runtime", "1"],
        vec!["--suite", "latency", "--scale", "quick"],
    ] {
        let mut a: Vec<String> = vec!["bench".into()];
        a.extend(args.iter().map(|x| x.to_string()));
        a.push(s(&via.join("own.dat")));
        let out = driveprobe(&a, Duration::from_secs(60));
        let line = one_line_refusal(&out, &format!("bench {args:?}"));
        assert!(line.contains("symbolic link"), "{line}");
        assert_eq!(common::sha256(&own), sum, "bench {args:?}");
    }
}

/// Attempts of `a_mounted_filesystem_is_never_written_through_another_name`.
const ALIAS_ATTEMPTS: u32 = 23;

/// `driveprobe bench` with `args` then `target`; must be refused in one line containing
/// every one of `expect`, and leave `backing` unchanged. Counted in `t`.
fn refused_bench(
    t: &mut Tally,
    case: &str,
    path: &str,
    args: &[String],
    target: &Path,
    backing: &Path,
    expect: &[String],
) {
    let mut a: Vec<String> = vec!["bench".into()];
    a.extend(args.iter().cloned());
    a.push(target.to_str().unwrap().into());
    let before = checksum(backing);
    let out = driveprobe(&a, Duration::from_secs(30));
    sync();
    let what = format!("{case}: {path}");
    let line = one_line_refusal(&out, &what);
    for e in expect {
        assert!(
            line.contains(e.as_str()),
            "{what}: {line}\n(expected {e:?})"
        );
    }
    let unchanged = checksum(backing) == before;
    assert!(unchanged, "{what}: the image file changed");
    t.add(case, path, true, unchanged);
}

/// Issue 16, item 2: ext4 on a loop device over an image in /dev/shm, mounted; then the
/// same storage under three other names, each tried through `bench` (every write
/// workload, a suite) and a daemon write canary: the image file itself (with and without
/// `--allow-destructive`), a second loop device over the same file, and a loop device
/// stacked on the mounted one (with `--allow-destructive` and each one's own serial, so
/// only the alias check stands in the way). Every attempt is refused naming the mount, the
/// image's SHA-256 is the same at the end, and `e2fsck -fn` finds the filesystem clean
/// after it is unmounted. The control: a loop device over a file inside the mounted
/// filesystem is other storage, and is written.
#[test]
fn a_mounted_filesystem_is_never_written_through_another_name() {
    need_root();
    let dir = common::shm_dir("dp-alias-");
    let (file, lo) = ext4_loop(dir.path(), "fs.img");
    let mnt = Mount::new(lo.path(), &dir.path().join("mnt"));
    random_file(&mnt.dir().join("data.bin"), 4 * MIB, 16);
    sync();
    let second = Loop::attach(&file, &[]);
    let stacked = Loop::attach(lo.path(), &[]);
    let sha_before = common::sha256(&file);
    let mounted_on = format!("{} (", lo.s());
    let mount_line = format!("is mounted on {}", mnt.dir().display());
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<String>>();
    let mut t = Tally::default();

    let names: [(&str, &Path, Vec<String>, Vec<String>); 4] = [
        (
            "the image file, no flags",
            &file,
            vec![],
            vec![format!("backing file of {}", lo.s()), mount_line.clone()],
        ),
        (
            "the image file, --allow-destructive",
            &file,
            s(&["--allow-destructive"]),
            vec![format!("backing file of {}", lo.s()), mount_line.clone()],
        ),
        (
            "a second loop over the file",
            second.path(),
            s(&[
                "--allow-destructive",
                "--expect-serial",
                &loop_serial(&file),
            ]),
            vec![mounted_on.clone(), mount_line.clone()],
        ),
        (
            "a loop stacked on the mounted loop",
            stacked.path(),
            s(&[
                "--allow-destructive",
                "--expect-serial",
                &format!("loop:{}", lo.s()),
            ]),
            vec![mounted_on.clone(), mount_line.clone()],
        ),
    ];
    for (case, target, flags, expect) in &names {
        for w in WORKLOADS {
            let mut args = s(&["--rw", w, "--runtime", "1s"]);
            args.extend(flags.iter().cloned());
            refused_bench(
                &mut t,
                case,
                &format!("bench {w}"),
                &args,
                target,
                &file,
                expect,
            );
        }
        let mut args = s(&["--suite", "latency", "--scale", "quick"]);
        args.extend(flags.iter().cloned());
        refused_bench(&mut t, case, "suite latency", &args, target, &file, expect);
    }

    // The daemon: the image as a file target of exactly its size is refused at start (a
    // file driveprobe did not create, checked before any write); a write canary on each
    // loop device, as raw drives with their serials and destructive = true.
    let img_cfg = dir.path().join("img.toml");
    std::fs::write(
        &img_cfg,
        format!(
            "state_dir = \"{}\"\ndiscovery.enabled = false\n\n{}[[probe]]\nname = \"wr\"\ndrives = [\"img\"]\nworkload = {{ read_pct = 0, rate_iops = 500, verify = false }}\n",
            dir.path().join("state-img").display(),
            file_drive("img", &file, "64MiB"),
        ),
    )
    .unwrap();
    let before = checksum(&file);
    daemon_refuses_to_start(&img_cfg, "did not create it");
    sync();
    t.add(
        "img",
        "daemon write canary",
        true,
        checksum(&file) == before,
    );
    let state = dir.path().join("state");
    std::fs::create_dir_all(&state).unwrap();
    let cfg = dir.path().join("d.toml");
    std::fs::write(
        &cfg,
        format!(
            "state_dir = \"{}\"\ndiscovery.enabled = false\nhealth_interval = \"1s\"\n\n[wear_budget]\nunrated_bytes_per_day = \"1TiB\"\nscheduled_unrated_bytes = \"1PiB\"\n\n\
[[drive]]\nname = \"second\"\nserial = \"{}\"\npath = \"{}\"\ndestructive = true\n\n\
[[drive]]\nname = \"stacked\"\nserial = \"loop:{}\"\npath = \"{}\"\ndestructive = true\n\n\
[[probe]]\nname = \"wr\"\ndrives = [\"second\", \"stacked\"]\nworkload = {{ read_pct = 0, rate_iops = 500, verify = false }}\n",
            state.display(),
            loop_serial(&file),
            second.s(),
            lo.s(),
            stacked.s(),
        ),
    )
    .unwrap();
    let before = checksum(&file);
    let d = Daemon::start(&cfg, &[]);
    let drives = ["second", "stacked"];
    d.wait_for("every write canary refused", Duration::from_secs(30), |e| {
        drives.iter().all(|dr| {
            e.value(
                "driveprobe_collector_success",
                &[("drive", dr), ("collector", "canary:wr")],
            ) == Some(0.0)
        })
    });
    let e = d.scrape();
    let log = d.log();
    let (st, _) = d.terminate(Duration::from_secs(10));
    assert!(st.success());
    sync();
    let unchanged = checksum(&file) == before;
    for dr in drives {
        let ops = e
            .value(
                "driveprobe_probe_ops_total",
                &[("drive", dr), ("probe", "wr"), ("op", "write")],
            )
            .unwrap_or(0.0);
        assert_eq!(ops, 0.0, "{dr}: the daemon wrote\n{log}");
        assert!(unchanged, "{dr}: the daemon changed the image\n{log}");
        t.add(dr, "daemon write canary", ops == 0.0, unchanged);
    }
    assert!(log.contains(&mount_line), "{log}");
    t.finish(ALIAS_ATTEMPTS);
    assert_eq!(
        common::sha256(&file),
        sha_before,
        "the image's SHA-256 changed"
    );

    // The control: a loop device over a file inside the mounted filesystem is written.
    let inner = common::image(mnt.dir(), "inner.img", 8 * MIB);
    sync();
    let ilo = Loop::attach(&inner, &[]);
    let inner_before = checksum(&inner);
    let out = driveprobe(
        &s(&[
            "bench",
            "--rw",
            "randwrite",
            "--io-size",
            "1m",
            "--allow-destructive",
            "--expect-serial",
            &loop_serial(&inner),
            ilo.s(),
        ]),
        Duration::from_secs(30),
    );
    common::assert_ok(
        &out,
        "bench on a loop over a file in the mounted filesystem",
    );
    drop(ilo);
    sync();
    assert_ne!(checksum(&inner), inner_before, "the control did not write");

    drop(stacked);
    drop(second);
    drop(mnt);
    let fsck = Command::new("e2fsck")
        .args(["-fn", file.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        fsck.status.success(),
        "e2fsck -fn: {}\n{}{}",
        fsck.status,
        String::from_utf8_lossy(&fsck.stdout),
        String::from_utf8_lossy(&fsck.stderr)
    );
    println!("ALIAS image SHA-256 unchanged ({sha_before}); e2fsck -fn clean; control written");
}
