//! The daemon when things go wrong under it (issue 7, the parts that need no VM): its file
//! target deleted, truncated or made read-only while canaries run; its state directory
//! full or read-only (a small tmpfs mounted by the test); and kill -9 at random moments of
//! scheduled runs, twenty times, with the state file carried from one life to the next.
//! The mount tests need root.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use common::daemon::{file_drive, Daemon};
use common::{need_root, Mount};

fn ops(d: &Daemon) -> f64 {
    d.scrape()
        .value(
            "driveprobe_probe_ops_total",
            &[("drive", "a"), ("probe", "rd"), ("op", "read")],
        )
        .unwrap_or(0.0)
}

fn wait_until(what: &str, limit: Duration, d: &Daemon, mut cond: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !cond() {
        assert!(
            t0.elapsed() < limit,
            "waited {limit:?} for {what}; log:\n{}",
            d.log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn a_deleted_or_truncated_file_target_is_made_again_and_the_canary_goes_on() {
    let dir = common::shm_dir("dp-rel-");
    let target = dir.path().join("a.dat");
    let cfg = dir.path().join("d.toml");
    std::fs::write(
        &cfg,
        format!(
            "state_dir = \"{}\"\n\n{}[[probe]]\nname = \"rd\"\nworkload = {{ rate_iops = 200 }}\n",
            dir.path().join("state").display(),
            file_drive("a", &target, "8MiB")
        ),
    )
    .unwrap();
    let d = Daemon::start(&cfg, &[]);
    wait_until("canary I/O", Duration::from_secs(30), &d, || ops(&d) > 50.0);
    let size = 8u64 << 20;
    let ino = |p: &Path| {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(p).map(|m| (m.ino(), m.len())).ok()
    };

    // Deleted: a new file of the configured size appears, and the canary reads it.
    let before = ino(&target).unwrap();
    std::fs::remove_file(&target).unwrap();
    wait_until(
        "the file target made again",
        Duration::from_secs(20),
        &d,
        || ino(&target).is_some_and(|(i, len)| i != before.0 && len == size),
    );
    let o = ops(&d);
    wait_until(
        "canary I/O on the new file",
        Duration::from_secs(10),
        &d,
        || ops(&d) > o + 100.0,
    );

    // Truncated: made again at its size.
    let before = ino(&target).unwrap();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&target)
        .unwrap()
        .set_len(4096)
        .unwrap();
    wait_until(
        "the truncated file target made again",
        Duration::from_secs(20),
        &d,
        || ino(&target).is_some_and(|(i, len)| i != before.0 && len == size),
    );
    let o = ops(&d);
    wait_until(
        "canary I/O after the truncation",
        Duration::from_secs(10),
        &d,
        || ops(&d) > o + 100.0,
    );
    let e = d.scrape();
    assert_eq!(e.value("driveprobe_drive_up", &[("drive", "a")]), Some(1.0));
    let log = d.log();
    assert!(log.contains("deleted, replaced or truncated"), "{log}");
    assert!(log.contains("shorter than its configured size"), "{log}");
    // Reads past the new end of the truncated file are counted as errors, not hidden.
    let errors = e
        .value(
            "driveprobe_probe_errors_total",
            &[("drive", "a"), ("probe", "rd"), ("op", "read")],
        )
        .unwrap();
    println!("read errors counted while the file was truncated: {errors}");
    // The canary looks at the file again after the first interval with errors: about
    // one interval of failed reads at 200 IOPS, not the seconds until the periodic check.
    assert!(errors > 0.0 && errors <= 450.0, "{errors} read errors");
    // Short reads of a truncated file are the host's errors, not the drive's: the status
    // keeps them apart (the health verdict warns on them but does not call the drive
    // failing; see `daemon::health`).
    let (code, _, body) = d.get("/api/v1/drives");
    assert_eq!(code, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    let rd = &v[0]["probes"]["rd"]["read"];
    assert_eq!(rd["errors_total"].as_f64(), Some(errors), "{rd}");
    assert_eq!(rd["device_errors_total"], 0, "{rd}");
    assert_eq!(rd["last_host_error"], "short transfer", "{rd}");
    let (st, _) = d.terminate(Duration::from_secs(5));
    assert!(st.success());
}

/// How many lives the kill -9 test gives the daemon (each ended by SIGKILL).
const LIVES: u32 = 20;

/// A small deterministic generator for the kill moments.
struct Lcg(u64);
impl Lcg {
    fn next_ms(&mut self, max: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % max
    }
}

/// Twenty lives: each makes one new schedule due (its bookkeeping added to the state the
/// last life left, as first seen long ago), starts the daemon, and kills it with SIGKILL
/// at a random moment: before, during or after the run starts. Every life must load the
/// state; a schedule's run is never started twice; runs left running are marked
/// interrupted at the next start; the last start, with nothing due, starts nothing.
#[test]
fn kill_9_at_random_moments_twenty_times_never_repeats_a_run() {
    let dir = common::shm_dir("dp-rel-");
    let state_dir = dir.path().join("state");
    std::fs::create_dir_all(&state_dir).unwrap();
    let state_file = state_dir.join("state.json");
    let cfg = dir.path().join("d.toml");
    let mut rng = Lcg(0x005e_ed0f_d21e);
    let mut killed_running = 0;
    for life in 0..LIVES {
        let mut text = format!(
            "state_dir = \"{}\"\n\n[wear_budget]\nunrated_bytes_per_day = \"1TiB\"\n\n{}\
[[probe]]\nname = \"rd\"\nworkload = {{ rate_iops = 100 }}\n\n",
            state_dir.display(),
            file_drive("a", &dir.path().join("a.dat"), "16MiB")
        );
        for k in 0..=life {
            text.push_str(&format!(
                "[[schedule]]\nname = \"s{k}\"\ndrives = [\"a\"]\nsuite = \"enterprise\"\nscale = \"quick\"\ncron = \"0 0 1 1 *\"\nmax_duration = \"1h\"\n\n"
            ));
        }
        std::fs::write(&cfg, text).unwrap();
        // This life's schedule was first seen long ago: its Jan 1st run is due now.
        let mut state: serde_json::Value = match std::fs::read_to_string(&state_file) {
            Ok(t) => serde_json::from_str(&t).unwrap_or_else(|e| {
                panic!("life {life}: the state file does not parse ({e}):\n{t}")
            }),
            Err(_) => serde_json::json!({ "version": 1 }),
        };
        state["schedules"][format!("s{life}/a")] = serde_json::json!({ "first_seen": 0 });
        std::fs::write(&state_file, state.to_string()).unwrap();

        let mut d = Daemon::start(&cfg, &[]);
        std::thread::sleep(Duration::from_millis(rng.next_ms(3000)));
        let (_, _, runs) = d.get("/api/v1/runs");
        if runs.contains("\"running\"") {
            killed_running += 1;
        }
        d.child.kill().unwrap();
        d.child.wait().unwrap();
    }

    // The last start: it loads the state, marks what was cut short, starts nothing new.
    let d = Daemon::start(&cfg, &[]);
    std::thread::sleep(Duration::from_secs(3));
    let (code, _, body) = d.get("/api/v1/runs");
    assert_eq!(code, 200);
    let runs: Vec<serde_json::Value> = serde_json::from_str(&body).unwrap();
    let mut per_schedule: BTreeMap<String, u32> = BTreeMap::new();
    for r in &runs {
        *per_schedule
            .entry(r["schedule"].as_str().unwrap_or("?").to_string())
            .or_default() += 1;
        assert_ne!(
            r["status"], "running",
            "no run going after the last start: {r}"
        );
    }
    assert!(
        per_schedule.values().all(|&n| n == 1),
        "a schedule ran twice: {per_schedule:?}"
    );
    println!(
        "{LIVES} kills ({killed_running} while a run was going): {} runs recorded, one per schedule at most; statuses: {:?}",
        runs.len(),
        runs.iter()
            .map(|r| r["status"].as_str().unwrap_or("?").to_string())
            .collect::<Vec<_>>()
    );
    // Most lives got their run started before the kill (the start is saved first).
    assert!(
        runs.len() as u32 >= LIVES / 2,
        "{runs:?}\nlog:\n{}",
        d.log()
    );
    let (st, _) = d.terminate(Duration::from_secs(5));
    assert!(st.success());
}

/// How many times each host fault is injected (episodes: fault, assertions, repair).
const STATE_FULL_EPISODES: u32 = 3;
const STATE_READ_ONLY_EPISODES: u32 = 3;
const FILE_READ_ONLY_EPISODES: u32 = 2;

fn counter(d: &Daemon, drive: &str, probe: &str, op: &str) -> f64 {
    d.scrape()
        .value(
            "driveprobe_probe_ops_total",
            &[("drive", drive), ("probe", probe), ("op", op)],
        )
        .unwrap_or(0.0)
}

fn errors(d: &Daemon, drive: &str, probe: &str, op: &str) -> f64 {
    d.scrape()
        .value(
            "driveprobe_probe_errors_total",
            &[("drive", drive), ("probe", probe), ("op", op)],
        )
        .unwrap_or(0.0)
}

/// Lines of the log containing `text`.
fn count(log: &str, text: &str) -> usize {
    log.lines().filter(|l| l.contains(text)).count()
}

/// Two file-target drives in `dir`: `a` with a read canary, `b` with a verifying write
/// canary, and (when `schedule`) a short scheduled suite on `b`.
fn two_canaries(dir: &Path, state: &Path, b_target: &Path, schedule: bool) -> String {
    let mut text = format!(
        "state_dir = \"{}\"\n\n[wear_budget]\nunrated_bytes_per_day = \"1TiB\"\n\n{}{}\
[[probe]]\nname = \"rd\"\ndrives = [\"a\"]\nworkload = {{ rate_iops = 200 }}\n\n\
[[probe]]\nname = \"wr\"\ndrives = [\"b\"]\nworkload = {{ read_pct = 50, rate_iops = 200, verify = true }}\n\n",
        state.display(),
        file_drive("a", &dir.join("a.dat"), "8MiB"),
        file_drive("b", b_target, "8MiB"),
    );
    if schedule {
        text.push_str(
            "[[schedule]]\nname = \"s\"\ndrives = [\"b\"]\nsuite = \"latency\"\nscale = \"quick\"\ncron = \"0 0 1 1 *\"\nmax_duration = \"10s\"\n",
        );
    }
    text
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum StateFault {
    Full,
    ReadOnly,
}

/// Fills the filesystem of `dir` with one file until ENOSPC; returns it.
fn fill(dir: &Path) -> std::path::PathBuf {
    use std::io::Write;
    let p = dir.join("filler");
    let mut f = std::fs::File::create(&p).unwrap();
    let chunk = vec![0x5au8; 4096];
    loop {
        match f.write_all(&chunk) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => break,
            Err(e) => panic!("filling {}: {e}", dir.display()),
        }
    }
    let _ = f.sync_all();
    p
}

/// `mount -o remount,OPTS`, retried while a save holds a file open for writing (EBUSY).
fn remount(m: &Mount, opts: &str) {
    let t0 = Instant::now();
    loop {
        let ok = std::process::Command::new("mount")
            .args(["-o", &format!("remount,{opts}")])
            .arg(m.dir())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if ok {
            return;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "remount,{opts} failed"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn schedule_runs(d: &Daemon) -> Vec<serde_json::Value> {
    let (code, _, body) = d.get("/api/v1/runs");
    assert_eq!(code, 200, "{body}");
    let runs: Vec<serde_json::Value> = serde_json::from_str(&body).unwrap();
    runs.into_iter().filter(|r| r["schedule"] == "s").collect()
}

/// The state directory on a small tmpfs, made full or read-only `episodes` times under a
/// daemon running a read canary and a verifying write canary. During each fault: the
/// canaries go on, /metrics answers, the failure is logged once, state.json keeps its last
/// saved bytes (and parses). In the first fault a scheduled run becomes due (a reload adds
/// its schedule): it does not start while its start cannot be saved, and starts after the
/// repair. After each repair the state is saved again.
fn state_dir_fault(kind: StateFault, episodes: u32) {
    need_root();
    let dir = common::shm_dir("dp-rel-");
    let state = dir.path().join("state");
    let mnt = Mount::virtual_fs("tmpfs", Some("size=256k"), &state);
    let state_file = state.join("state.json");
    // The schedule's bookkeeping says first seen long ago: once the schedule is in the
    // config, its Jan 1st run is due at once.
    std::fs::write(
        &state_file,
        r#"{"version":1,"schedules":{"s/b":{"first_seen":0}}}"#,
    )
    .unwrap();
    let cfg = dir.path().join("d.toml");
    let b = dir.path().join("b.dat");
    std::fs::write(&cfg, two_canaries(dir.path(), &state, &b, false)).unwrap();
    let d = Daemon::start(&cfg, &[("RUST_LOG", "driveprobe=info")]);
    wait_until("I/O on both canaries", Duration::from_secs(30), &d, || {
        counter(&d, "a", "rd", "read") > 50.0 && counter(&d, "b", "wr", "write") > 50.0
    });
    // A save with the canary's written bytes in it (saved every 5 s).
    wait_until(
        "a save of the written bytes",
        Duration::from_secs(15),
        &d,
        || std::fs::read_to_string(&state_file).is_ok_and(|t| t.contains("self_written")),
    );

    const FAIL: &str = "cannot save the state";
    const AGAIN: &str = "the state is saved again";
    let mut injected = 0;
    for episode in 0..episodes {
        let saved = std::fs::read(&state_file).unwrap();
        let filler = match kind {
            StateFault::Full => Some(fill(&state)),
            StateFault::ReadOnly => {
                remount(&mnt, "ro");
                None
            }
        };
        injected += 1;
        if episode == 0 {
            std::fs::write(&cfg, two_canaries(dir.path(), &state, &b, true)).unwrap();
            d.signal("HUP");
            wait_until("the reload", Duration::from_secs(15), &d, || {
                d.log().contains("config reloaded")
            });
        }
        wait_until(
            "the save failure logged",
            Duration::from_secs(15),
            &d,
            || count(&d.log(), FAIL) > episode as usize,
        );
        let (a0, w0) = (
            counter(&d, "a", "rd", "read"),
            counter(&d, "b", "wr", "write"),
        );
        std::thread::sleep(Duration::from_secs(11)); // two more save attempts at least
        let (a1, w1) = (
            counter(&d, "a", "rd", "read"),
            counter(&d, "b", "wr", "write"),
        );
        assert!(
            a1 > a0 + 100.0,
            "{kind:?} {episode}: the read canary stopped: {a0} -> {a1}"
        );
        assert!(
            w1 > w0 + 50.0,
            "{kind:?} {episode}: the write canary stopped: {w0} -> {w1}"
        );
        let log = d.log();
        assert_eq!(
            count(&log, FAIL),
            episode as usize + 1,
            "{kind:?} {episode}: the failure is logged once per episode:\n{log}"
        );
        let now = std::fs::read(&state_file).unwrap();
        assert_eq!(
            now, saved,
            "{kind:?} {episode}: state.json changed while it could not be saved"
        );
        serde_json::from_slice::<serde_json::Value>(&now).expect("state.json parses");
        if episode == 0 {
            assert!(
                schedule_runs(&d).is_empty(),
                "{kind:?}: a run started though its start could not be saved"
            );
        }

        // Repair.
        match filler {
            Some(f) => std::fs::remove_file(f).unwrap(),
            None => remount(&mnt, "rw"),
        }
        wait_until("the state saved again", Duration::from_secs(15), &d, || {
            count(&d.log(), AGAIN) > episode as usize
                && std::fs::read(&state_file).is_ok_and(|t| t != saved)
        });
        let text = std::fs::read_to_string(&state_file).unwrap();
        let doc: serde_json::Value = serde_json::from_str(&text).expect("state.json parses");
        if episode == 0 {
            wait_until("the due run started", Duration::from_secs(15), &d, || {
                !schedule_runs(&d).is_empty()
            });
            // It ends within its max_duration; the write canary then resumes.
            wait_until("the run ended", Duration::from_secs(40), &d, || {
                schedule_runs(&d).iter().all(|r| r["status"] != "running")
            });
            let runs = schedule_runs(&d);
            assert_eq!(runs.len(), 1, "{runs:?}");
            let w = counter(&d, "b", "wr", "write");
            wait_until(
                "the write canary after the run",
                Duration::from_secs(20),
                &d,
                || counter(&d, "b", "wr", "write") > w + 50.0,
            );
        }
        assert!(doc["version"] == 1, "{text}");
    }
    let log = d.log();
    assert!(!log.contains("panicked"), "{log}");
    assert_eq!(count(&log, FAIL), episodes as usize);
    assert_eq!(count(&log, AGAIN), episodes as usize);
    assert_eq!(
        errors(&d, "b", "wr", "read"),
        0.0,
        "verify or read errors on b"
    );
    assert_eq!(errors(&d, "a", "rd", "read"), 0.0);
    let (st, _) = d.terminate(Duration::from_secs(10));
    assert!(st.success());
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&state_file).unwrap()).unwrap();
    let runs = doc["runs"].as_array().unwrap();
    assert_eq!(
        runs.len(),
        1,
        "one run, and no failed starts recorded: {runs:?}"
    );
    println!(
        "state directory {kind:?}: injected {injected} times; each time the canaries went on, \
         the failure was logged once, state.json kept its bytes; the due run waited and then ran once"
    );
}

#[test]
fn a_full_state_directory_loses_nothing_and_delays_only_runs() {
    state_dir_fault(StateFault::Full, STATE_FULL_EPISODES);
}

#[test]
fn a_read_only_state_directory_loses_nothing_and_delays_only_runs() {
    state_dir_fault(StateFault::ReadOnly, STATE_READ_ONLY_EPISODES);
}

/// The write canary's file target made read-only under the daemon (a read-only bind
/// mount over its directory; root ignores mode bits, and the kernel lets an open
/// descriptor go on writing): the write canary stops writing and says why
/// (collector_success 0, the log), the read canary on the other drive goes on without an
/// error, nothing panics; once the mount is writable again the write canary resumes.
#[test]
fn a_file_target_made_read_only_holds_the_write_canary_only() {
    need_root();
    let dir = common::shm_dir("dp-rel-");
    let wdir = dir.path().join("w");
    std::fs::create_dir_all(&wdir).unwrap();
    let state = dir.path().join("state");
    let cfg = dir.path().join("d.toml");
    std::fs::write(
        &cfg,
        two_canaries(dir.path(), &state, &wdir.join("b.dat"), false),
    )
    .unwrap();
    let d = Daemon::start(&cfg, &[("RUST_LOG", "driveprobe=info")]);
    wait_until("I/O on both canaries", Duration::from_secs(30), &d, || {
        counter(&d, "a", "rd", "read") > 50.0 && counter(&d, "b", "wr", "write") > 50.0
    });
    let success = |d: &Daemon| {
        d.scrape().value(
            "driveprobe_collector_success",
            &[("drive", "b"), ("collector", "canary:wr")],
        )
    };
    let mut injected = 0;
    for episode in 0..FILE_READ_ONLY_EPISODES {
        let ro = Mount::bind_read_only(&wdir);
        injected += 1;
        let t0 = Instant::now();
        wait_until(
            "the write canary holds",
            Duration::from_secs(20),
            &d,
            || success(&d) == Some(0.0),
        );
        let held_after = t0.elapsed();
        let (a0, w0) = (
            counter(&d, "a", "rd", "read"),
            counter(&d, "b", "wr", "write"),
        );
        std::thread::sleep(Duration::from_secs(4));
        let (a1, w1) = (
            counter(&d, "a", "rd", "read"),
            counter(&d, "b", "wr", "write"),
        );
        assert!(
            a1 > a0 + 400.0,
            "{episode}: the read canary slowed: {a0} -> {a1}"
        );
        assert_eq!(
            w1, w0,
            "{episode}: the write canary wrote to a read-only file target"
        );
        let (_, _, body) = d.get("/api/v1/drives");
        assert!(
            body.contains("read-only"),
            "{episode}: the reason is not shown: {body}"
        );
        drop(ro);
        let t1 = Instant::now();
        wait_until(
            "the write canary resumes",
            Duration::from_secs(40),
            &d,
            || success(&d) == Some(1.0) && counter(&d, "b", "wr", "write") > w1 + 50.0,
        );
        println!(
            "file target read-only, episode {episode}: held after {held_after:?}, resumed {:?} after the repair",
            t1.elapsed()
        );
    }
    let log = d.log();
    assert!(!log.contains("panicked"), "{log}");
    assert!(log.contains("read-only"), "{log}");
    assert_eq!(
        errors(&d, "a", "rd", "read"),
        0.0,
        "the read canary saw errors"
    );
    assert_eq!(errors(&d, "b", "wr", "read"), 0.0, "verify errors on b");
    assert_eq!(
        d.scrape().value("driveprobe_drive_up", &[("drive", "a")]),
        Some(1.0)
    );
    let (st, _) = d.terminate(Duration::from_secs(10));
    assert!(st.success());
    println!("file target read-only: injected {injected} times; held and resumed each time");
}

/// A folder on the file target's path swapped for a symbolic link while a write canary
/// runs (the real folder renamed away, a link to another folder put in its place): no
/// write lands in the other folder, neither a new file made there nor driveprobe's own
/// file already there, and the canary reports the error (before: only the last
/// component was checked, and the daemon made its file anew through the link).
#[test]
fn a_folder_swapped_for_a_link_while_the_daemon_runs_steers_no_write() {
    let dir = common::shm_dir("dp-rel-");
    let a = dir.path().join("a");
    std::fs::create_dir(&a).unwrap();
    let target = a.join("t.dat");
    let cfg = dir.path().join("d.toml");
    std::fs::write(
        &cfg,
        format!(
            "state_dir = \"{}\"\n\n[wear_budget]\nunrated_bytes_per_day = \"1TiB\"\n\n{}[[probe]]\nname = \"wr\"\nworkload = {{ read_pct = 0, rate_iops = 500 }}\n",
            dir.path().join("state").display(),
            file_drive("a", &target, "8MiB")
        ),
    )
    .unwrap();
    // The other folders: one empty, one holding driveprobe's own file of that name (made
    // by bench, so it carries the mark).
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let owned = dir.path().join("owned");
    std::fs::create_dir(&owned).unwrap();
    let out = std::process::Command::new(common::daemon::BIN)
        .args(["bench", "--rw", "read", "--size", "8m", "--runtime", "1"])
        .arg(owned.join("t.dat"))
        .output()
        .unwrap();
    common::assert_ok(&out, "bench creating a file");
    let owned_sum = common::sha256(&owned.join("t.dat"));

    let d = Daemon::start(&cfg, &[]);
    let writes = |d: &Daemon| counter(d, "a", "wr", "write");
    wait_until("write canary I/O", Duration::from_secs(30), &d, || {
        writes(&d) > 100.0
    });
    for (round, other) in [&empty, &owned].into_iter().enumerate() {
        let failed_before = count(&d.log(), "symbolic link");
        let away = dir.path().join(format!("a.away{round}"));
        std::fs::rename(&a, &away).unwrap();
        std::os::unix::fs::symlink(other, &a).unwrap();
        // The canary notices within its file check, and every reopen is refused.
        wait_until(
            "the canary refusing the link",
            Duration::from_secs(30),
            &d,
            || count(&d.log(), "symbolic link") >= failed_before + 2,
        );
        let e = d.scrape();
        assert_eq!(
            e.value(
                "driveprobe_collector_success",
                &[("drive", "a"), ("collector", "canary:wr")]
            ),
            Some(0.0),
            "{}",
            d.log()
        );
        if round == 0 {
            assert_eq!(
                std::fs::read_dir(&empty).unwrap().count(),
                0,
                "a file was made through the link\n{}",
                d.log()
            );
        } else {
            assert_eq!(
                common::sha256(&owned.join("t.dat")),
                owned_sum,
                "{}",
                d.log()
            );
        }
        // The real folder back: the canary writes again.
        std::fs::remove_file(&a).unwrap();
        std::fs::rename(&away, &a).unwrap();
        let w = writes(&d);
        wait_until(
            "write canary I/O again",
            Duration::from_secs(60),
            &d,
            || writes(&d) > w + 100.0,
        );
    }
    let (st, _) = d.terminate(Duration::from_secs(10));
    assert!(st.success());
    assert_eq!(std::fs::read_dir(&empty).unwrap().count(), 0);
    assert_eq!(common::sha256(&owned.join("t.dat")), owned_sum);
}
