//! The state directory attacked (issue 33): links planted by another user in a
//! world-writable state directory, `runs/` swapped for a link, two daemons on one
//! directory, a damaged state file, and state that is a FIFO, a device or a path outside
//! the directory. Each test failed on the code before the state directory was reached
//! through handles (`crates/daemon/src/statedir.rs`).

use crate::common;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::daemon::{file_drive, Daemon, BIN};
use common::{need_root, sha256};

/// Runs `sh -c script` as the user nobody (the attacker: any local user).
fn as_nobody(script: &str) {
    let out = Command::new("setpriv")
        .args([
            "--reuid=nobody",
            "--regid=nogroup",
            "--clear-groups",
            "sh",
            "-c",
            script,
        ])
        .output()
        .expect("setpriv");
    common::assert_ok(&out, script);
}

/// A config with drive "a" (an 8 MiB file target), a read canary on it and, when
/// `schedule`, a quick latency suite due at once.
fn config(dir: &Path, state: &Path, extra: &str, schedule: bool) -> PathBuf {
    let mut text = format!(
        "state_dir = \"{}\"\ndiscovery.enabled = false\n{extra}\n\
         [wear_budget]\nunrated_bytes_per_day = \"1TiB\"\nscheduled_unrated_bytes = \"1PiB\"\n\n{}\
         [[probe]]\nname = \"rd\"\ndrives = [\"a\"]\nworkload = {{ rate_iops = 50 }}\n\n",
        state.display(),
        file_drive("a", &dir.join("a.dat"), "8MiB"),
    );
    if schedule {
        text.push_str(
            "[[schedule]]\nname = \"s\"\ndrives = [\"a\"]\nsuite = \"latency\"\nscale = \"quick\"\n\
             cron = \"0 0 1 1 *\"\nmax_duration = \"10s\"\n",
        );
    }
    let cfg = dir.join("d.toml");
    std::fs::write(&cfg, text).unwrap();
    cfg
}

fn runs(d: &Daemon) -> Vec<serde_json::Value> {
    let (code, _, body) = d.get("/api/v1/runs");
    assert_eq!(code, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

fn set_mode(p: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// The review's critical finding: user nobody plants symbolic links at the names of the
/// temporary files (`.state.json.tmp`, its backup's, and `runs/.ID.json.tmp` for every
/// run id of the next two minutes: ids are the start second and the schedule) in a
/// world-writable state directory, pointing at a root-only file. The daemon, as root,
/// saves its state and a run's document through them: the file is unchanged, the state and
/// the document are written as regular files, and the directory is reported as writable
/// by every user (log, page, metric).
#[test]
fn links_planted_in_a_world_writable_state_directory_steer_no_write() {
    need_root();
    let dir = common::shm_dir("dp-statelink-");
    set_mode(dir.path(), 0o755);
    let state = dir.path().join("state");
    std::fs::create_dir(&state).unwrap();
    set_mode(&state, 0o777);
    let victim = dir.path().join("victim");
    std::fs::write(&victim, b"root:only:precious\n").unwrap();
    set_mode(&victim, 0o600);
    let before = sha256(&victim);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let v = victim.display();
    let mut script = format!(
        "cd {} && ln -s {v} .state.json.tmp && ln -s {v} .state.backup.json.tmp && \
         mkdir runs && chmod 777 runs && cd runs",
        state.display()
    );
    for t in now..now + 120 {
        script.push_str(&format!(" && ln -s {v} .{t}-s_a.json.tmp"));
    }
    as_nobody(&script);
    common::daemon::seed_due_state(&state, &["s/a"]);
    let cfg = config(dir.path(), &state, "", true);
    let d = Daemon::start(&cfg, &[("RUST_LOG", "driveprobe=info")]);
    // The run's start is saved (through the planted names) before it runs.
    d.wait_until("the run's end", Duration::from_secs(120), || {
        runs(&d)
            .iter()
            .any(|r| r["status"] != "running" && r["result_path"].is_string())
    });
    let e = d.wait_for("the insecure gauge", Duration::from_secs(10), |e| {
        e.value("driveprobe_state_directory_insecure", &[]) == Some(1.0)
    });
    assert_eq!(e.value("driveprobe_state_ledger_held", &[]), Some(0.0));
    let (_, _, page) = d.get("/");
    assert!(
        page.contains("writable by every user (mode 0777)"),
        "the page does not warn"
    );
    let run = runs(&d).into_iter().find(|r| r["schedule"] == "s").unwrap();
    let (st, _) = d.terminate(Duration::from_secs(30));
    assert!(st.success());
    let log = std::fs::read_to_string(&victim).unwrap();
    assert_eq!(
        sha256(&victim),
        before,
        "the root-only file was overwritten: {log}"
    );
    for f in ["state.json", "state.backup.json"] {
        let m = std::fs::symlink_metadata(state.join(f)).unwrap();
        assert!(m.is_file(), "{f} is not a regular file");
        let text = std::fs::read_to_string(state.join(f)).unwrap();
        assert!(text.contains("\"s/a\""), "{f} was not saved: {text}");
    }
    let doc = PathBuf::from(run["result_path"].as_str().unwrap());
    assert!(std::fs::symlink_metadata(&doc).unwrap().is_file());
    assert!(std::fs::read_to_string(&doc).unwrap().contains("\"suite\""));
    println!(
        "121 links planted by nobody; victim unchanged; run {} saved as a regular file",
        run["id"]
    );
}

/// `runs/` swapped for a link to a folder of someone else's `*.json` files, with a
/// retention of one document: the daemon refuses to start, naming the link, and deletes
/// nothing behind it (the old code followed it and deleted the files by retention).
#[test]
fn runs_as_a_link_is_refused_at_start_and_nothing_behind_it_is_deleted() {
    let dir = common::shm_dir("dp-runslink-");
    let state = dir.path().join("state");
    std::fs::create_dir(&state).unwrap();
    let theirs = dir.path().join("theirs");
    std::fs::create_dir(&theirs).unwrap();
    for i in 0..5 {
        std::fs::write(theirs.join(format!("{i}.json")), format!("{{\"n\":{i}}}")).unwrap();
    }
    std::os::unix::fs::symlink(&theirs, state.join("runs")).unwrap();
    let cfg = config(dir.path(), &state, "\n[runs]\nkeep_documents = 1\n", false);
    let out = Command::new(BIN)
        .args(["daemon", "--listen", "127.0.0.1:0", "--config"])
        .arg(&cfg)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the daemon started: {err}");
    assert!(
        err.contains("runs is a symbolic link, not a folder"),
        "the refusal does not name the link: {err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "not one line: {err}");
    for i in 0..5 {
        assert!(
            theirs.join(format!("{i}.json")).exists(),
            "{i}.json deleted"
        );
    }
}

/// Two daemons on one state directory: the second is refused at once, naming the first's
/// pid; the first goes on serving.
#[test]
fn a_second_daemon_on_one_state_directory_is_refused_naming_the_first() {
    let dir = common::shm_dir("dp-twodaemons-");
    let state = dir.path().join("state");
    let cfg = config(dir.path(), &state, "", false);
    let first = Daemon::start(&cfg, &[]);
    let t0 = Instant::now();
    let mut second = Command::new(BIN)
        .args(["daemon", "--listen", "127.0.0.1:0", "--config"])
        .arg(&cfg)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The old code started a second daemon that ran on: wait a bounded time.
    while second.try_wait().unwrap().is_none() {
        if t0.elapsed() > Duration::from_secs(20) {
            let _ = second.kill();
            let _ = second.wait();
            panic!("a second daemon on the same state directory was still running after 20 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = second.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the second daemon started: {err}");
    assert!(
        err.contains(&format!(
            "is in use by another driveprobe (pid {}",
            first.pid()
        )),
        "the refusal does not name the first daemon: {err}"
    );
    assert!(
        t0.elapsed() < Duration::from_secs(20),
        "refused only after {:?}",
        t0.elapsed()
    );
    let (code, _, _) = first.get("/healthz");
    assert_eq!(code, 200);
    let (st, _) = first.terminate(Duration::from_secs(10));
    assert!(st.success());
    // Once the first is gone, the directory is free.
    let again = Daemon::start(&cfg, &[]);
    let (st, _) = again.terminate(Duration::from_secs(10));
    assert!(st.success());
}

/// The bytes scheduled runs wrote to drive "a" in the state seeded below.
const SPENT: u64 = 40 << 20;

/// A state in which scheduled runs wrote [`SPENT`] bytes to drive "a" today.
fn seed_spent(state: &Path) {
    std::fs::create_dir_all(state).unwrap();
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let day = driveprobe::calendar::ymd(secs);
    let doc = serde_json::json!({
        "version": 1,
        "self_written": {"a": {day.clone(): SPENT}},
        "self_written_lifetime": {"a": SPENT},
        "run_written": {"a": {day: SPENT}},
    });
    std::fs::write(state.join("state.json"), doc.to_string()).unwrap();
}

fn runs_used(d: &Daemon) -> Option<f64> {
    d.scrape()
        .value("driveprobe_wear_budget_runs_used_bytes", &[("drive", "a")])
}

/// The ledger and damage to one file (truncated, `{}`, a newer version, a FIFO): the
/// daemon starts from the second copy with the runs' bytes intact, says so in its log and
/// on its page. With both copies damaged, the ledger is held: the gauge says so, a write
/// canary does not write, a due run does not start, and the files are left as they were.
#[test]
fn damage_to_the_state_file_keeps_the_wear_ledger_or_holds_writes() {
    let dir = common::shm_dir("dp-ledger-");
    let state = dir.path().join("state");
    seed_spent(&state);
    let cfg = config(dir.path(), &state, "", false);
    let d = Daemon::start(&cfg, &[]);
    assert_eq!(runs_used(&d), Some(SPENT as f64));
    d.wait_until("the second copy", Duration::from_secs(20), || {
        state.join("state.backup.json").exists()
    });
    d.terminate(Duration::from_secs(10));
    type Damage = fn(&Path);
    let damages: [(&str, Damage); 4] = [
        ("truncated", |p| std::fs::write(p, b"").unwrap()),
        ("{}", |p| std::fs::write(p, b"{}").unwrap()),
        ("a newer version", |p| {
            std::fs::write(p, b"{\"version\": 7}").unwrap()
        }),
        ("a FIFO", |p| {
            std::fs::remove_file(p).unwrap();
            rustix::fs::mkfifoat(rustix::fs::CWD, p, rustix::fs::Mode::from_raw_mode(0o600))
                .unwrap()
        }),
    ];
    for (what, damage) in damages {
        damage(&state.join("state.json"));
        let d = Daemon::start(&cfg, &[]);
        assert_eq!(
            runs_used(&d),
            Some(SPENT as f64),
            "{what}: the ledger was lost; log:\n{}",
            d.log()
        );
        assert!(
            d.log().contains("started from its copy"),
            "{what}: no warning; log:\n{}",
            d.log()
        );
        let (_, _, page) = d.get("/");
        assert!(
            page.contains("started from its copy"),
            "{what}: the page is silent"
        );
        // The next save makes the first copy whole again.
        d.wait_until("state.json saved again", Duration::from_secs(20), || {
            std::fs::symlink_metadata(state.join("state.json")).is_ok_and(|m| m.is_file())
                && common::run("cat", &[state.join("state.json").to_str().unwrap()])
                    .contains("run_written")
        });
        d.terminate(Duration::from_secs(10));
        println!("{what}: ledger kept ({SPENT} bytes)");
    }
    // Both copies damaged: held. A write canary and a due run would write: neither does.
    std::fs::write(state.join("state.json"), b"{").unwrap();
    std::fs::write(state.join("state.backup.json"), b"").unwrap();
    let text = std::fs::read_to_string(&cfg).unwrap()
        + "[[probe]]\nname = \"wr\"\ndrives = [\"a\"]\nworkload = { read_pct = 0, rate_iops = 100 }\n\n\
           [[schedule]]\nname = \"s\"\ndrives = [\"a\"]\nsuite = \"latency\"\nscale = \"quick\"\n\
           cron = \"* * * * *\"\nmax_duration = \"10s\"\n";
    std::fs::write(&cfg, text).unwrap();
    let d = Daemon::start(&cfg, &[]);
    let e = d.wait_for("the held gauge", Duration::from_secs(10), |e| {
        e.value("driveprobe_state_ledger_held", &[]) == Some(1.0)
    });
    let writes = |e: &common::daemon::Exposition| {
        e.value(
            "driveprobe_probe_ops_total",
            &[("drive", "a"), ("probe", "wr"), ("op", "write")],
        )
        .unwrap_or(0.0)
    };
    assert_eq!(writes(&e), 0.0);
    // Long enough for the canary to have written, and for the every-minute schedule to
    // have come due.
    std::thread::sleep(Duration::from_secs(65));
    let e = d.scrape();
    assert_eq!(
        writes(&e),
        0.0,
        "the write canary wrote while the ledger was held"
    );
    assert!(
        runs(&d).iter().all(|r| r["schedule"] != "s"),
        "a run started while the ledger was held: {:?}",
        runs(&d)
    );
    let log = d.log();
    assert!(log.contains("the wear ledger cannot be read"), "{log}");
    let (_, _, page) = d.get("/");
    assert!(
        page.contains("the wear ledger cannot be read"),
        "the page is silent"
    );
    d.terminate(Duration::from_secs(10));
    assert_eq!(std::fs::read(state.join("state.json")).unwrap(), b"{");
    assert_eq!(std::fs::read(state.join("state.backup.json")).unwrap(), b"");
}

/// State that would block or read without end: `state.json` a FIFO (with no copy, so
/// the ledger is held), and run records whose documents are a FIFO in `runs/`,
/// `/dev/zero`, and a real document outside the state directory. The daemon starts,
/// every report route answers at once without rendering anything outside, and SIGTERM
/// stops it.
#[test]
fn state_that_is_a_fifo_a_device_or_outside_neither_hangs_nor_is_rendered() {
    let dir = common::shm_dir("dp-statefifo-");
    let state = dir.path().join("state");
    std::fs::create_dir_all(state.join("runs")).unwrap();
    let fifo = |p: &Path| {
        rustix::fs::mkfifoat(rustix::fs::CWD, p, rustix::fs::Mode::from_raw_mode(0o600)).unwrap()
    };
    fifo(&state.join("state.json"));
    let cfg = config(dir.path(), &state, "", false);
    let t0 = Instant::now();
    let d = Daemon::start(&cfg, &[]);
    println!("started in {:?} with state.json a FIFO", t0.elapsed());
    assert_eq!(
        d.scrape().value("driveprobe_state_ledger_held", &[]),
        Some(1.0)
    );
    d.terminate(Duration::from_secs(10));

    // Run records pointing at a FIFO, a device and a document outside.
    std::fs::remove_file(state.join("state.json")).unwrap();
    fifo(&state.join("runs/r1.json"));
    let outside = dir.path().join("outside.json");
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/results/enterprise-sata-5100eco.json"),
        &outside,
    )
    .unwrap();
    let rec = |id: &str, path: &Path| {
        serde_json::json!({"id": id, "suite": "latency", "drive": "a", "schedule": "s",
            "started": 1, "ended": 2, "status": "passed", "result_path": path})
    };
    let doc = serde_json::json!({"version": 1, "runs": [
        rec("r1", &state.join("runs/r1.json")),
        rec("r2", Path::new("/dev/zero")),
        rec("r3", &outside),
    ]});
    std::fs::write(state.join("state.json"), doc.to_string()).unwrap();
    let d = Daemon::start(&cfg, &[]);
    for (id, want) in [("r1", 500), ("r2", 404), ("r3", 404)] {
        let t = Instant::now();
        let (code, _, body) = d.get(&format!("/runs/{id}/report"));
        assert_eq!(code, want, "{id}: {body}");
        assert!(
            !body.contains("<svg"),
            "{id}: a report was rendered from outside"
        );
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "{id} took {:?}",
            t.elapsed()
        );
    }
    let (st, took) = d.terminate(Duration::from_secs(10));
    assert!(st.success());
    println!("report routes answered; stopped in {took:?}");
}
