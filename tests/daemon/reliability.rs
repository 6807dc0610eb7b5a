//! The daemon when things go wrong under it (issue 7, the parts that need no VM): its file
//! target deleted, truncated or made read-only while canaries run; its state directory
//! full or read-only (a small tmpfs mounted by the test); and kill -9 at random moments of
//! scheduled runs, twenty times, with the state file carried from one life to the next.
//! The mount tests need root.

use crate::common;

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

/// A daemon with one read canary at `rate_iops` on drive "a", an 8 MiB file target in a
/// fresh /dev/shm folder, once the canary has done more than `min_ops` I/Os: the folder
/// (removed on drop), the file target, the config and the daemon.
fn read_canary(
    rate_iops: u32,
    min_ops: f64,
) -> (
    tempfile::TempDir,
    std::path::PathBuf,
    std::path::PathBuf,
    Daemon,
) {
    let dir = common::shm_dir("dp-rel-");
    let target = dir.path().join("a.dat");
    let cfg = dir.path().join("d.toml");
    std::fs::write(
        &cfg,
        format!(
            "state_dir = \"{}\"\ndiscovery.enabled = false\n\n{}[[probe]]\nname = \"rd\"\nworkload = {{ rate_iops = {rate_iops} }}\n",
            dir.path().join("state").display(),
            file_drive("a", &target, "8MiB")
        ),
    )
    .unwrap();
    let d = Daemon::start(&cfg, &[]);
    d.wait_until("canary I/O", Duration::from_secs(30), || ops(&d) > min_ops);
    (dir, target, cfg, d)
}

#[test]
fn a_deleted_or_truncated_file_target_is_made_again_and_the_canary_goes_on() {
    let (_dir, target, _cfg, d) = read_canary(200, 50.0);
    let size = 8u64 << 20;
    let ino = |p: &Path| {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(p).map(|m| (m.ino(), m.len())).ok()
    };

    // Deleted: a new file of the configured size appears, and the canary reads it.
    let before = ino(&target).unwrap();
    std::fs::remove_file(&target).unwrap();
    d.wait_until(
        "the file target made again",
        Duration::from_secs(20),
        || ino(&target).is_some_and(|(i, len)| i != before.0 && len == size),
    );
    let o = ops(&d);
    d.wait_until(
        "canary I/O on the new file",
        Duration::from_secs(10),
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
    d.wait_until(
        "the truncated file target made again",
        Duration::from_secs(20),
        || ino(&target).is_some_and(|(i, len)| i != before.0 && len == size),
    );
    let o = ops(&d);
    d.wait_until(
        "canary I/O after the truncation",
        Duration::from_secs(10),
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
    // failing; see `daemon::health_poll`).
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
            "state_dir = \"{}\"\ndiscovery.enabled = false\n\n[wear_budget]\nunrated_bytes_per_day = \"1TiB\"\nscheduled_unrated_bytes = \"1PiB\"\n\n{}\
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

    // The last start: it loads the state, marks what was cut short, and starts nothing
    // that ran before. (The last life may have been killed before its run started: the
    // daemon waits for a drive's first health reading, which a busy host delays. That
    // run is due still and may start now, once: the count per schedule below.)
    let last_start = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
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
        assert!(
            r["status"] != "running" || r["started"].as_u64().is_some_and(|t| t >= last_start),
            "a run cut short in an earlier life is still running after the last start: {r}"
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
        "state_dir = \"{}\"\ndiscovery.enabled = false\n\n[wear_budget]\nunrated_bytes_per_day = \"1TiB\"\nscheduled_unrated_bytes = \"1PiB\"\n\n{}{}\
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
    d.wait_until("I/O on both canaries", Duration::from_secs(30), || {
        counter(&d, "a", "rd", "read") > 50.0 && counter(&d, "b", "wr", "write") > 50.0
    });
    // A save with the canary's written bytes in it (saved every 5 s).
    d.wait_until(
        "a save of the written bytes",
        Duration::from_secs(15),
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
            d.wait_until("the reload", Duration::from_secs(15), || {
                d.log().contains("config reloaded")
            });
        }
        d.wait_until("the save failure logged", Duration::from_secs(15), || {
            count(&d.log(), FAIL) > episode as usize
        });
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
        d.wait_until("the state saved again", Duration::from_secs(15), || {
            count(&d.log(), AGAIN) > episode as usize
                && std::fs::read(&state_file).is_ok_and(|t| t != saved)
        });
        let text = std::fs::read_to_string(&state_file).unwrap();
        let doc: serde_json::Value = serde_json::from_str(&text).expect("state.json parses");
        if episode == 0 {
            d.wait_until("the due run started", Duration::from_secs(15), || {
                !schedule_runs(&d).is_empty()
            });
            // It ends within its max_duration; the write canary then resumes.
            d.wait_until("the run ended", Duration::from_secs(40), || {
                schedule_runs(&d).iter().all(|r| r["status"] != "running")
            });
            let runs = schedule_runs(&d);
            assert_eq!(runs.len(), 1, "{runs:?}");
            let w = counter(&d, "b", "wr", "write");
            d.wait_until(
                "the write canary after the run",
                Duration::from_secs(20),
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

/// How many times the result-document tests retry a write (scheduler ticks) before the
/// repair, at least.
const RESULT_RETRIES: usize = 3;

/// A scheduled run that ends while its state directory is full or read-only: its result
/// document is kept in memory and written again every tick; meanwhile the run is
/// `pending` with "result pending: not saved: REASON" in `/api/v1/runs`, on the status
/// page and in the run's gauges (never `passed` without a document), and no temporary
/// file is left; after the repair the document is written, the run gets its real status
/// everywhere, and after a restart (which removes the temporary files an interrupted
/// write left) its gauges are back.
fn result_fault(kind: StateFault) {
    need_root();
    let dir = common::shm_dir("dp-rel-");
    let state = dir.path().join("state");
    let mnt = Mount::virtual_fs("tmpfs", Some("size=512k"), &state);
    std::fs::write(
        state.join("state.json"),
        r#"{"version":1,"schedules":{"s/b":{"first_seen":0}}}"#,
    )
    .unwrap();
    let cfg = dir.path().join("d.toml");
    let b = dir.path().join("b.dat");
    let text = two_canaries(dir.path(), &state, &b, true).replace("\"10s\"", "\"2m\"");
    std::fs::write(&cfg, text).unwrap();
    let d = Daemon::start(&cfg, &[("RUST_LOG", "driveprobe=info")]);
    d.wait_until("the run's start", Duration::from_secs(30), || {
        schedule_runs(&d).iter().any(|r| r["status"] == "running")
    });
    let filler = match kind {
        StateFault::Full => Some(fill(&state)),
        StateFault::ReadOnly => {
            remount(&mnt, "ro");
            None
        }
    };
    let mut run = serde_json::Value::Null;
    d.wait_until("the run's end", Duration::from_secs(120), || {
        run = schedule_runs(&d).pop().unwrap_or_default();
        run["status"] != "running"
    });
    let id = run["id"].as_str().unwrap().to_string();
    const NOT_SAVED: &str = "result pending: not saved: ";
    let gauge = |d: &Daemon| {
        d.scrape().value(
            "driveprobe_run_last_passed",
            &[("drive", "b"), ("suite", "latency")],
        )
    };
    let runs_dir = state.join("runs");
    let temp_files = || -> Vec<String> {
        std::fs::read_dir(&runs_dir)
            .map(|rd| {
                rd.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| n.ends_with(".tmp"))
                    .collect()
            })
            .unwrap_or_default()
    };
    let log_line = "cannot write the result document";
    // A few ticks, each of which tries the write again.
    std::thread::sleep(Duration::from_millis(1100 * RESULT_RETRIES as u64));
    // Every surface says pending, with the reason; nothing says passed.
    let run = schedule_runs(&d).pop().unwrap();
    assert_eq!(run["status"], "pending", "{kind:?}: {run}");
    let note = run["note"].as_str().unwrap_or_default();
    assert!(note.starts_with(NOT_SAVED), "{kind:?}: {run}");
    assert!(
        run["result_path"].is_null() && run["report"].is_null(),
        "{run}"
    );
    let (_, _, page) = d.get("/");
    assert!(
        page.contains(NOT_SAVED),
        "{kind:?}: the status page does not say it"
    );
    let (_, _, drives) = d.get("/api/v1/drives");
    let v: serde_json::Value = serde_json::from_str(&drives).unwrap();
    let last = &v
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["name"] == "b")
        .unwrap()["last_runs"]["latency"];
    assert_eq!(last["status"], "pending", "{kind:?}: {last}");
    assert_eq!(
        gauge(&d),
        Some(0.0),
        "{kind:?}: run_last_passed while pending"
    );
    assert_eq!(count(&d.log(), log_line), 1, "{kind:?}: logged once");
    assert!(
        temp_files().is_empty(),
        "{kind:?}: temporary files left: {:?}",
        temp_files()
    );

    // Repair: the next tick writes it.
    match filler {
        Some(f) => std::fs::remove_file(f).unwrap(),
        None => remount(&mnt, "rw"),
    }
    let mut run = serde_json::Value::Null;
    d.wait_until("the document written", Duration::from_secs(20), || {
        run = schedule_runs(&d).pop().unwrap_or_default();
        run["status"] != "pending"
    });
    assert!(run["note"].is_null(), "{run}");
    let doc = std::path::PathBuf::from(run["result_path"].as_str().expect("a document"));
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&doc).unwrap()).unwrap();
    assert_eq!(v["suite"], "latency");
    let passed = run["status"] == "passed";
    assert_eq!(passed, v["complete"] == true, "{run}");
    assert_eq!(gauge(&d), Some(if passed { 1.0 } else { 0.0 }), "{run}");
    let (_, _, page) = d.get("/");
    assert!(!page.contains(NOT_SAVED));
    assert!(d.log().contains("the result document is saved"));
    let (st, _) = d.terminate(Duration::from_secs(10));
    assert!(st.success());

    // What an interrupted write leaves is removed at the next start; the run's gauges
    // come back from its document.
    let leftovers = [
        runs_dir.join(format!(".{id}.json.tmp")),
        state.join(".state.json.tmp"),
    ];
    for l in &leftovers {
        std::fs::write(l, b"").unwrap();
    }
    let d = Daemon::start(&cfg, &[("RUST_LOG", "driveprobe=info")]);
    for l in &leftovers {
        assert!(!l.exists(), "{} left after the start", l.display());
    }
    assert_eq!(
        gauge(&d),
        Some(if passed { 1.0 } else { 0.0 }),
        "after a restart"
    );
    let run = schedule_runs(&d).pop().unwrap();
    assert_eq!(run["result_path"].as_str(), Some(doc.to_str().unwrap()));
    let (st, _) = d.terminate(Duration::from_secs(10));
    assert!(st.success());
    println!(
        "{kind:?}: the run was pending with \"{note}\", then saved as {}",
        run["status"]
    );
}

#[test]
fn a_result_that_meets_a_full_state_directory_is_kept_and_saved_later() {
    result_fault(StateFault::Full);
}

#[test]
fn a_result_that_meets_a_read_only_state_directory_is_kept_and_saved_later() {
    result_fault(StateFault::ReadOnly);
}

/// How many old result documents the retention test starts with.
const OLD_DOCUMENTS: usize = 12;

/// Result documents beyond `[runs] keep_documents` or `keep_bytes` are deleted (the
/// oldest first) and their runs leave the index, so every listed report has its
/// document.
#[test]
fn old_result_documents_are_deleted_by_count_and_bytes_with_their_runs() {
    let dir = common::shm_dir("dp-rel-");
    let state = dir.path().join("state");
    let runs_dir = state.join("runs");
    std::fs::create_dir_all(&runs_dir).unwrap();
    let mut index = Vec::new();
    for i in 0..OLD_DOCUMENTS {
        let id = format!("{}-s_a", 1000 + i);
        let p = runs_dir.join(format!("{id}.json"));
        // 100 KiB each, older first (mtimes one second apart).
        std::fs::write(&p, format!("{{\"pad\":\"{}\"}}", "x".repeat(100 << 10))).unwrap();
        let t = std::time::SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000 + i as u64);
        std::fs::File::options()
            .write(true)
            .open(&p)
            .unwrap()
            .set_modified(t)
            .unwrap();
        index.push(serde_json::json!({
            "id": id, "suite": "latency", "drive": "a", "schedule": "s",
            "started": 1000 + i, "ended": 1001 + i, "status": "passed",
            "result_path": p,
        }));
    }
    std::fs::write(
        state.join("state.json"),
        serde_json::json!({ "version": 1, "runs": index }).to_string(),
    )
    .unwrap();
    let cfg = dir.path().join("d.toml");
    let config = |keep: &str| {
        format!(
            "state_dir = \"{}\"\ndiscovery.enabled = false\n\n[runs]\n{keep}\n\n{}",
            state.display(),
            file_drive("a", &dir.path().join("a.dat"), "1MiB")
        )
    };
    let listed = |d: &Daemon| -> Vec<String> {
        schedule_runs(d)
            .iter()
            .map(|r| r["id"].as_str().unwrap().to_string())
            .collect()
    };
    let on_disk = || -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(&runs_dir)
            .unwrap()
            .flatten()
            .map(|e| {
                e.file_name()
                    .to_string_lossy()
                    .trim_end_matches(".json")
                    .to_string()
            })
            .collect();
        v.sort();
        v
    };
    let newest = |n: usize| -> Vec<String> {
        (OLD_DOCUMENTS - n..OLD_DOCUMENTS)
            .map(|i| format!("{}-s_a", 1000 + i))
            .collect()
    };

    // By count.
    std::fs::write(&cfg, config("keep_documents = 8")).unwrap();
    let d = Daemon::start(&cfg, &[]);
    assert_eq!(on_disk(), newest(8));
    let mut l = listed(&d);
    l.sort();
    assert_eq!(l, newest(8), "the index in step with the documents");
    let (st, _) = d.terminate(Duration::from_secs(10));
    assert!(st.success());

    // By bytes (1 MiB is the least keep_bytes takes): the eight 100 KiB documents fit.
    std::fs::write(&cfg, config("keep_bytes = \"1MiB\"")).unwrap();
    let d = Daemon::start(&cfg, &[]);
    assert_eq!(on_disk(), newest(8));
    let (st, _) = d.terminate(Duration::from_secs(10));
    assert!(st.success());
    // Bigger documents: 300 KiB each for the newest five.
    for id in newest(5) {
        std::fs::write(runs_dir.join(format!("{id}.json")), "y".repeat(300 << 10)).unwrap();
    }
    let d = Daemon::start(&cfg, &[]);
    // The newest three take 900 KiB; four would take 1.2 MiB.
    assert_eq!(on_disk(), newest(3));
    let mut l = listed(&d);
    l.sort();
    assert_eq!(l, newest(3));
    let (st, _) = d.terminate(Duration::from_secs(10));
    assert!(st.success());
    // The config check refuses what makes no sense.
    for bad in [
        "keep_documents = 0",
        "keep_documents = 100000",
        "keep_bytes = \"1KiB\"",
    ] {
        std::fs::write(&cfg, config(bad)).unwrap();
        let out = std::process::Command::new(common::daemon::BIN)
            .args(["check-config", cfg.to_str().unwrap()])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{bad}");
    }
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
    d.wait_until("I/O on both canaries", Duration::from_secs(30), || {
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
        d.wait_until("the write canary holds", Duration::from_secs(20), || {
            success(&d) == Some(0.0)
        });
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
        d.wait_until("the write canary resumes", Duration::from_secs(40), || {
            success(&d) == Some(1.0) && counter(&d, "b", "wr", "write") > w1 + 50.0
        });
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

/// Writes an executable shell script `name` into `dir`.
fn script(dir: &Path, name: &str, body: &str) {
    use std::os::unix::fs::PermissionsExt;
    let p = dir.join(name);
    std::fs::write(&p, format!("#!/bin/sh\n{body}")).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// `PATH` with `dir` first.
fn path_with(dir: &Path) -> String {
    format!(
        "{}:{}",
        dir.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

/// (pgrp, state) of a process, from /proc; None when it is gone.
fn proc_stat(pid: i32) -> Option<(i32, char)> {
    let t = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = t.rsplit_once(')')?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    Some((f.get(2)?.parse().ok()?, f.first()?.chars().next()?))
}

/// The running (not zombie) processes whose process group is `pgid`.
fn group_members(pgid: i32) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&p| proc_stat(p).is_some_and(|(g, s)| g == pgid && s != 'Z'))
        .collect()
}

/// The pids written one per line to `file`.
fn pids(file: &Path) -> Vec<i32> {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// A smartctl that hangs on a disk, with a grandchild that ignores SIGTERM, under a
/// daemon reading the health of a loop device: SIGTERM to the daemon leaves no process
/// of smartctl's group running (checked in /proc by pid and by process group).
#[test]
fn smartctl_and_its_children_do_not_outlive_the_daemon() {
    need_root();
    let dir = common::shm_dir("dp-rel-");
    let img = common::image(dir.path(), "disk.img", 16 << 20);
    let lo = common::Loop::attach(&img, &[]);
    let tools = dir.path().join("tools");
    std::fs::create_dir(&tools).unwrap();
    let (leaders, grandchildren) = (dir.path().join("leaders"), dir.path().join("gc"));
    script(
        &tools,
        "smartctl",
        &format!(
            "echo $$ >> {}\nsh -c \"trap '' TERM; sleep 600\" &\necho $! >> {}\nsleep 600\n",
            leaders.display(),
            grandchildren.display()
        ),
    );
    let cfg = dir.path().join("d.toml");
    std::fs::write(
        &cfg,
        format!(
            "state_dir = \"{}\"\ndiscovery.enabled = false\nhealth_interval = \"2s\"\n\n[[drive]]\nname = \"a\"\nserial = \"{}\"\npath = \"{}\"\n",
            dir.path().join("state").display(),
            common::loop_serial(&img),
            lo.path().display()
        ),
    )
    .unwrap();
    let d = Daemon::start(&cfg, &[("PATH", &path_with(&tools))]);
    d.wait_until(
        "smartctl and its grandchild",
        Duration::from_secs(30),
        || !pids(&leaders).is_empty() && !pids(&grandchildren).is_empty(),
    );
    let (leader, gc) = (pids(&leaders)[0], pids(&grandchildren)[0]);
    assert_eq!(
        proc_stat(gc).map(|s| s.0),
        Some(leader),
        "the grandchild is in smartctl's group"
    );
    assert!(
        group_members(leader).len() >= 2,
        "{:?}",
        group_members(leader)
    );
    let (st, took) = d.terminate(Duration::from_secs(10));
    assert!(st.success(), "{st}");
    println!("the daemon stopped {took:?} after SIGTERM");
    // Nothing of smartctl's group is left running once the daemon has exited.
    let t0 = Instant::now();
    // A give-up time (a group that outlived the daemon is there still after it).
    while !group_members(leader).is_empty() && t0.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let left = group_members(leader);
    for p in &left {
        let _ = std::process::Command::new("kill")
            .args(["-9", &p.to_string()])
            .status();
    }
    assert!(
        left.is_empty(),
        "smartctl's group outlived the daemon: {left:?}"
    );
    for p in pids(&leaders).iter().chain(&pids(&grandchildren)) {
        assert!(
            proc_stat(*p).is_none_or(|s| s.1 == 'Z'),
            "{p} is still running"
        );
    }
}

/// Drives whose health the daemon reads at once in the test below: twice the limit.
const HEALTH_DRIVES: usize = 8;
/// The daemon's limit on health reads at once (`pacing::READS_AT_ONCE`).
const HEALTH_READS_AT_ONCE: usize = 4;

/// Issue 18: 8 drives whose smartctl hangs until the test lets it go: never more than 4
/// smartctl at once (the others wait, `driveprobe_health_reads_waiting` 4), and once they
/// are let go every drive gets its reading. Before, each drive's thread ran its own
/// smartctl at the same moment: 256 drives, 256 smartctl.
#[test]
fn health_reads_of_many_drives_go_a_few_at_a_time() {
    need_root();
    let dir = common::shm_dir("dp-rel-");
    let tools = dir.path().join("tools");
    std::fs::create_dir(&tools).unwrap();
    let (inside, seen, counts, go) = (
        dir.path().join("in"),
        dir.path().join("seen"),
        dir.path().join("counts"),
        dir.path().join("go"),
    );
    std::fs::create_dir(&inside).unwrap();
    // Each run: enters `in` (a directory per run), writes how many are in, the device it
    // reads, waits for `go`, leaves, and fails the read (no output).
    script(
        &tools,
        "smartctl",
        &format!(
            "mkdir {inside}/$$\nls {inside} | wc -l >> {counts}\nfor a; do d=$a; done\necho $d >> {seen}\n\
             while [ ! -e {go} ]; do sleep 0.05; done\nrmdir {inside}/$$\nexit 2\n",
            inside = inside.display(),
            counts = counts.display(),
            seen = seen.display(),
            go = go.display(),
        ),
    );
    let mut loops = Vec::new();
    let mut cfg = format!(
        "state_dir = \"{}\"\ndiscovery.enabled = false\nhealth_interval = \"1h\"\n\n",
        dir.path().join("state").display()
    );
    for i in 0..HEALTH_DRIVES {
        let img = common::image(dir.path(), &format!("disk{i}.img"), 1 << 20);
        let lo = common::Loop::attach(&img, &[]);
        cfg += &format!(
            "[[drive]]\nname = \"d{i}\"\nserial = \"{}\"\npath = \"{}\"\n\n",
            common::loop_serial(&img),
            lo.path().display()
        );
        loops.push(lo);
    }
    let cfg_path = dir.path().join("d.toml");
    std::fs::write(&cfg_path, cfg).unwrap();
    let d = Daemon::start(&cfg_path, &[("PATH", &path_with(&tools))]);
    let inside_now = || std::fs::read_dir(&inside).unwrap().count();
    let waiting = HEALTH_DRIVES - HEALTH_READS_AT_ONCE;
    // The permits are taken before each smartctl starts: both are waited for.
    d.wait_for(
        "4 smartctl going, 4 drives waiting",
        Duration::from_secs(60),
        |e| {
            e.value("driveprobe_health_reads_in_flight", &[]) == Some(HEALTH_READS_AT_ONCE as f64)
                && e.value("driveprobe_health_reads_waiting", &[]) == Some(waiting as f64)
                && inside_now() >= HEALTH_READS_AT_ONCE
        },
    );
    assert_eq!(
        inside_now(),
        HEALTH_READS_AT_ONCE,
        "smartctl runs going now"
    );
    std::fs::write(&go, "").unwrap();
    d.wait_until("every drive's health read", Duration::from_secs(60), || {
        let e = d.scrape();
        (0..HEALTH_DRIVES).all(|i| {
            e.value(
                "driveprobe_collector_success",
                &[("drive", &format!("d{i}")), ("collector", "health")],
            ) == Some(0.0)
        })
    });
    let read: std::collections::BTreeSet<String> = std::fs::read_to_string(&seen)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    let devices: std::collections::BTreeSet<String> =
        loops.iter().map(|l| l.s().to_string()).collect();
    assert_eq!(read, devices, "every drive's device read");
    let most = std::fs::read_to_string(&counts)
        .unwrap()
        .lines()
        .filter_map(|l| l.trim().parse::<usize>().ok())
        .max();
    assert_eq!(
        most,
        Some(HEALTH_READS_AT_ONCE),
        "smartctl runs at once at most"
    );
    let e = d.scrape();
    assert_eq!(
        e.value("driveprobe_health_reads_in_flight_max", &[]),
        Some(HEALTH_READS_AT_ONCE as f64)
    );
    assert_eq!(
        e.value("driveprobe_health_reads_limit", &[]),
        Some(HEALTH_READS_AT_ONCE as f64)
    );
    let (st, _) = d.terminate(Duration::from_secs(10));
    assert!(st.success(), "{st}");
}

/// Issue 18: a drive whose health read hangs (a smartctl that does not return, as on a
/// disk hung in the kernel) left one thread behind at every swap, and each swap started
/// another that hung the same way. Two SIGHUPs that change the drive (a canary added,
/// then its rate changed) leave the health threads as they were (the pool's worker in the
/// read; issue 33: health polling is a job of a shared pool, not a thread per drive) and
/// start no canary (its probe says why on /metrics: `failing`, "did not stop"), and no
/// second smartctl runs; once the hung read ends, the drive's new threads start within a
/// few seconds, and run.
#[test]
fn a_drive_whose_thread_hangs_is_not_given_a_second_one_at_each_swap() {
    need_root();
    let dir = common::shm_dir("dp-rel-");
    let img = common::image(dir.path(), "disk.img", 16 << 20);
    let lo = common::Loop::attach(&img, &[]);
    let tools = dir.path().join("tools");
    std::fs::create_dir(&tools).unwrap();
    let (calls, go) = (dir.path().join("calls"), dir.path().join("go"));
    // Hangs until `go` exists (well within smartctl's 30 s time limit), then fails.
    script(
        &tools,
        "smartctl",
        &format!(
            "echo $$ >> {}\nwhile [ ! -e {} ]; do sleep 0.05; done\nexit 2\n",
            calls.display(),
            go.display()
        ),
    );
    let cfg = dir.path().join("d.toml");
    let config = |probe: &str| {
        format!(
            "state_dir = \"{}\"\ndiscovery.enabled = false\nhealth_interval = \"1h\"\n\n[[drive]]\nname = \"a\"\nserial = \"{}\"\npath = \"{}\"\n\n{probe}",
            dir.path().join("state").display(),
            common::loop_serial(&img),
            lo.path().display()
        )
    };
    let probe = |rate: u32| {
        format!("[[probe]]\nname = \"rd\"\ndrives = [\"a\"]\nworkload = {{ rate_iops = {rate} }}\n")
    };
    std::fs::write(&cfg, config("")).unwrap();
    let d = Daemon::start(&cfg, &[("PATH", &path_with(&tools))]);
    d.wait_until("the hung smartctl", Duration::from_secs(20), || {
        !pids(&calls).is_empty()
    });
    let threads = |name: &str| common::threads_named(d.pid(), name);
    // The health worker, and the two threads reading smartctl's pipes (they inherit its
    // name, and may start a moment after smartctl): the health threads while the read hangs.
    d.wait_until("smartctl's pipes read", Duration::from_secs(20), || {
        threads("dp-health").len() == 3
    });
    let hung = threads("dp-health");
    assert!(!hung.is_empty());
    let failing = |e: &common::daemon::Exposition| {
        e.value(
            "driveprobe_probe_state",
            &[("drive", "a"), ("probe", "rd"), ("state", "failing")],
        ) == Some(1.0)
    };
    for rate in [5, 7] {
        std::fs::write(&cfg, config(&probe(rate))).unwrap();
        d.signal("HUP");
        let e = d.wait_for("the reload", Duration::from_secs(20), |e| {
            e.value(
                "driveprobe_probe_rate_iops",
                &[("drive", "a"), ("probe", "rd")],
            ) == Some(f64::from(rate))
        });
        assert_eq!(
            e.value("driveprobe_config_last_reload_successful", &[]),
            Some(1.0)
        );
        let (health, canary) = (threads("dp-health"), threads("dp-canary-a"));
        assert_eq!(
            (&health, canary.len()),
            (&hung, 0),
            "after the reload to {rate} IOPS: health {health:?} (hung: {hung:?}), canary {canary:?}\n{}",
            d.log()
        );
        assert_eq!(pids(&calls).len(), 1, "a second smartctl ran");
        assert!(failing(&d.scrape()), "{}", d.scrape().text);
    }
    let (_, _, api) = d.get("/api/v1/drives");
    assert!(api.contains("did not stop within"), "{api}");
    // The hung read ends: the drive's threads start, once.
    std::fs::write(&go, "").unwrap();
    d.wait_for("the canary running", Duration::from_secs(20), |e| {
        e.value(
            "driveprobe_probe_running",
            &[("drive", "a"), ("probe", "rd")],
        ) == Some(1.0)
    });
    d.wait_until("one health thread", Duration::from_secs(20), || {
        threads("dp-health").len() == 1
    });
    assert_eq!(threads("dp-canary-a").len(), 1);
    let log = d.log();
    assert!(log.contains("its threads start"), "{log}");
    let (st, _) = d.terminate(Duration::from_secs(10));
    assert!(st.success(), "{st}");
}

/// How much the stand-in fio prints (on stderr, as one line) before it fails.
const CHATTY_BYTES: u64 = 100_000_000;

/// A scheduled fio job whose fio prints 100 MB on stderr and fails: the daemon's log
/// lines, its memory and the result document stay small (bounds derived from the output's
/// size), the run is `failed` with an excerpt of what fio said, and `driveprobe report`
/// and `/runs/ID/report` take the document.
#[test]
fn a_child_printing_100_mb_leaves_a_bounded_log_and_document() {
    let dir = common::shm_dir("dp-rel-");
    let tools = dir.path().join("tools");
    std::fs::create_dir(&tools).unwrap();
    script(
        &tools,
        "fio",
        &format!(
            "cat > /dev/null\nprintf 'fio: the start of a long complaint ' >&2\nhead -c {CHATTY_BYTES} /dev/zero | tr '\\0' x >&2\nexit 1\n"
        ),
    );
    let job = dir.path().join("chatty.fio");
    std::fs::write(
        &job,
        "[r]\nrw=read\nbs=4k\nioengine=psync\nfilename=${TARGET}\nruntime=1\n",
    )
    .unwrap();
    let state = dir.path().join("state");
    std::fs::create_dir_all(&state).unwrap();
    std::fs::write(
        state.join("state.json"),
        "{\"version\":1,\"schedules\":{\"s/a\":{\"first_seen\":0}}}",
    )
    .unwrap();
    let cfg = dir.path().join("d.toml");
    std::fs::write(
        &cfg,
        format!(
            "state_dir = \"{}\"\ndiscovery.enabled = false\n\n[wear_budget]\nunrated_bytes_per_day = \"1TiB\"\nscheduled_unrated_bytes = \"1PiB\"\n\n{}\
[[schedule]]\nname = \"s\"\ndrives = [\"a\"]\nfio_job = \"{}\"\ncron = \"0 0 1 1 *\"\nmax_duration = \"2m\"\n",
            state.display(),
            file_drive("a", &dir.path().join("a.dat"), "8MiB"),
            job.display()
        ),
    )
    .unwrap();
    let d = Daemon::start(&cfg, &[("PATH", &path_with(&tools))]);
    let hwm = |pid: i32| -> u64 {
        let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        let l = s.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
        l.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap() * 1024
    };
    let before = hwm(d.pid());
    let mut run = serde_json::Value::Null;
    d.wait_until("the run's end", Duration::from_secs(120), || {
        run = schedule_runs(&d).pop().unwrap_or_default();
        run["status"].as_str().is_some_and(|s| s != "running")
    });
    let after = hwm(d.pid());
    assert_eq!(run["status"], "failed", "{run}");
    println!(
        "peak RSS {} KiB before the run, {} KiB after",
        before >> 10,
        after >> 10
    );
    assert!(
        after.saturating_sub(before) < CHATTY_BYTES / 4,
        "the daemon's peak memory grew by {} bytes for {CHATTY_BYTES} bytes of output",
        after - before
    );
    let log = d.log();
    let longest = log.lines().map(str::len).max().unwrap_or(0) as u64;
    println!("the longest log line: {longest} bytes");
    assert!(
        longest < CHATTY_BYTES / 1000,
        "a log line of {longest} bytes"
    );
    assert!(
        log.contains("the start of a long complaint"),
        "{}",
        &log[..log.len().min(4000)]
    );

    let doc = std::path::PathBuf::from(run["result_path"].as_str().expect("a result document"));
    let size = std::fs::metadata(&doc).unwrap().len();
    println!("the result document: {size} bytes");
    assert!(
        size < CHATTY_BYTES / 1000,
        "a result document of {size} bytes"
    );
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&doc).unwrap()).unwrap();
    let reason = v["incomplete_reason"].as_str().unwrap();
    assert!(reason.contains("the start of a long complaint"), "{reason}");
    assert!(
        reason.contains("bytes"),
        "says how much was left out: {reason}"
    );
    let html = dir.path().join("r.html");
    let out = std::process::Command::new(common::daemon::BIN)
        .args([
            "report",
            doc.to_str().unwrap(),
            "-o",
            html.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    common::assert_ok(&out, "driveprobe report");
    let (code, _, body) = d.get(&format!("/runs/{}/report", run["id"].as_str().unwrap()));
    assert_eq!(code, 200, "{}", &body[..body.len().min(2000)]);
    let (st, _) = d.terminate(Duration::from_secs(10));
    assert!(st.success());
}

/// A FIFO put in place of the config file before a SIGHUP (issue 16: the reload read it
/// on the HTTP thread, and /metrics, /healthz and SIGTERM hung): the reload is refused
/// and reported, /metrics and /healthz answer meanwhile, the canary goes on, and SIGTERM
/// still stops the daemon within 5 s.
#[test]
fn a_fifo_swapped_in_for_the_config_before_sighup_holds_neither_http_nor_sigterm() {
    let (dir, _target, cfg, d) = read_canary(100, 10.0);
    let fifo = dir.path().join("fifo");
    let st = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(st.success());
    std::fs::rename(&fifo, &cfg).unwrap();
    d.signal("HUP");
    let e = d.wait_for("the reload refused", Duration::from_secs(15), |e| {
        e.value("driveprobe_config_last_reload_successful", &[]) == Some(0.0)
    });
    assert_eq!(e.value("driveprobe_drive_up", &[("drive", "a")]), Some(1.0));
    // Served while nobody ever writes to the FIFO, each at once.
    for path in ["/metrics", "/healthz"] {
        let t0 = Instant::now();
        let (code, _, body) = common::daemon::try_http_get(&d.addr, path, &[])
            .unwrap_or_else(|e| panic!("{path}: {e}; log:\n{}", d.log()));
        assert_eq!(code, 200, "{path}: {body}");
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "{path} took {:?}",
            t0.elapsed()
        );
    }
    let o = ops(&d);
    d.wait_until(
        "canary I/O after the reload",
        Duration::from_secs(10),
        || ops(&d) > o + 10.0,
    );
    let log = d.log();
    assert!(
        log.contains("FIFO (named pipe), not a regular file"),
        "the log says why: {log}"
    );
    let (st, took) = d.terminate(Duration::from_secs(5));
    assert!(st.success(), "{st:?}");
    println!("stopped {took:?} after SIGTERM");
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
            "state_dir = \"{}\"\ndiscovery.enabled = false\n\n[wear_budget]\nunrated_bytes_per_day = \"1TiB\"\nscheduled_unrated_bytes = \"1PiB\"\n\n{}[[probe]]\nname = \"wr\"\nworkload = {{ read_pct = 0, rate_iops = 500 }}\n",
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
    d.wait_until("write canary I/O", Duration::from_secs(30), || {
        writes(&d) > 100.0
    });
    for (round, other) in [&empty, &owned].into_iter().enumerate() {
        let failed_before = count(&d.log(), "symbolic link");
        let away = dir.path().join(format!("a.away{round}"));
        std::fs::rename(&a, &away).unwrap();
        std::os::unix::fs::symlink(other, &a).unwrap();
        // The canary notices within its file check (logged once when the refusals start,
        // once with their count when they end), and every reopen is refused.
        d.wait_until(
            "the canary refusing the link",
            Duration::from_secs(30),
            || count(&d.log(), "symbolic link") > failed_before,
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
        d.wait_until("write canary I/O again", Duration::from_secs(60), || {
            writes(&d) > w + 100.0
        });
        // The refusals' end is logged, with their count.
        let log = d.log();
        let ended = log
            .lines()
            .filter(|l| l.contains("ended:") && l.contains("symbolic link"))
            .count();
        assert_eq!(ended, round + 1, "the end of refusal {round}:\n{log}");
    }
    let (st, _) = d.terminate(Duration::from_secs(10));
    assert!(st.success());
    assert_eq!(std::fs::read_dir(&empty).unwrap().count(), 0);
    assert_eq!(common::sha256(&owned.join("t.dat")), owned_sum);
}

/// Drives in the thread-limit test below.
const LIMIT_DRIVES: usize = 20;
/// The tasks its daemon may have (RLIMIT_NPROC, for a user of its own): fewer than its 20
/// canaries need.
const LIMIT_TASKS: usize = 12;

/// Issue 33, item 8: at the process's limit on tasks the scheduler never started (`/healthz`
/// "has not run yet") and drives were left without a probe, said only in the log. A daemon
/// with 20 canaried drives under RLIMIT_NPROC 12 (as a user of its own, so only its own
/// threads count): `/healthz` 503 names the threads that cannot start, so do
/// `driveprobe_threads_unstarted`, `driveprobe_thread_start_failures_total`, the status
/// page and each drive's probe (`failing`, in `/metrics` and `/api/v1/drives`); once the
/// limit is raised they are all started by the retries: every canary runs, the scheduler
/// ticks, `/healthz` 200.
#[test]
fn a_thread_that_cannot_start_is_on_every_surface_and_retried() {
    need_root();
    let dir = common::shm_dir("dp-rel-");
    // A user no process of this host runs as.
    let uid = "64123";
    let mut cfg = format!(
        "state_dir = \"{}\"\ndiscovery.enabled = false\n\n",
        dir.path().join("state").display()
    );
    for i in 0..LIMIT_DRIVES {
        cfg += &file_drive(
            &format!("d{i}"),
            &dir.path().join(format!("d{i}.dat")),
            "1MiB",
        );
    }
    cfg += "[[probe]]\nname = \"rd\"\ndrives = [\"*\"]\nworkload = { rate_iops = 1 }\n";
    let cfg_path = dir.path().join("d.toml");
    std::fs::write(&cfg_path, cfg).unwrap();
    let chown = std::process::Command::new("chown")
        .args(["-R", &format!("{uid}:{uid}")])
        .arg(dir.path())
        .status()
        .unwrap();
    assert!(chown.success());
    // The soft limit is the daemon's; the hard one lets the same user raise it later.
    let hard = "65536";
    let setpriv = [
        "setpriv",
        &format!("--reuid={uid}"),
        &format!("--regid={uid}"),
        "--clear-groups",
        "--",
    ];
    let lim = format!("--nproc={LIMIT_TASKS}:{hard}");
    let prefix: Vec<&str> = [&["prlimit", lim.as_str()][..], &setpriv[..]].concat();
    let d = Daemon::start_under(&prefix, &cfg_path, &[]);
    let e = d.wait_for("threads refused", Duration::from_secs(30), |e| {
        e.value("driveprobe_threads_unstarted", &[])
            .is_some_and(|v| v > 0.0)
    });
    let unstarted = e.value("driveprobe_threads_unstarted", &[]).unwrap();
    assert!(
        e.value("driveprobe_thread_start_failures_total", &[])
            .unwrap()
            >= unstarted,
        "{}",
        e.text
    );
    let failing: Vec<String> = (0..LIMIT_DRIVES)
        .map(|i| format!("d{i}"))
        .filter(|n| {
            e.value(
                "driveprobe_probe_state",
                &[("drive", n), ("probe", "rd"), ("state", "failing")],
            ) == Some(1.0)
        })
        .collect();
    assert!(!failing.is_empty(), "no probe says it failed\n{}", e.text);
    let (code, _, body) = d.get("/healthz");
    assert_eq!(code, 503, "{body}");
    assert!(body.contains("cannot start the threads of"), "{body}");
    let (_, _, page) = d.get("/");
    assert!(page.contains("without a thread:"), "{page}");
    let (_, _, api) = d.get("/api/v1/drives");
    assert!(api.contains("cannot start its thread"), "{api}");
    assert!(d.log().contains("cannot start a thread"), "{}", d.log());
    // The limit raised (by the same user: up to its hard limit): the retries start them.
    let pid = d.pid().to_string();
    let raise = std::process::Command::new(setpriv[0])
        .args(&setpriv[1..])
        .args(["prlimit", "--pid", &pid, &format!("--nproc={hard}:{hard}")])
        .status()
        .unwrap();
    assert!(raise.success());
    let e = d.wait_for("every canary running", Duration::from_secs(60), |e| {
        e.value("driveprobe_threads_unstarted", &[]) == Some(0.0)
            && (0..LIMIT_DRIVES).all(|i| {
                e.value(
                    "driveprobe_probe_running",
                    &[("drive", &format!("d{i}")), ("probe", "rd")],
                ) == Some(1.0)
            })
    });
    assert!(
        e.value("driveprobe_scheduler_last_tick_timestamp_seconds", &[])
            .is_some_and(|t| t > 0.0),
        "{}",
        e.text
    );
    d.wait_until("/healthz ok", Duration::from_secs(30), || {
        d.get("/healthz").0 == 200
    });
    let (st, _) = d.terminate(Duration::from_secs(10));
    assert!(st.success(), "{st}");
}
