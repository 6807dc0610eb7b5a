//! The wall clock stepping under the daemon (issue 33): a year ahead and back, while it
//! runs (libfaketime changes the process's wall clock through a file it rereads; the
//! monotonic clock stays true) and across a restart (times saved while the clock was
//! ahead). Schedules fire again, bytes written while the clock was ahead still count, a
//! run's `ended` is never before its `started`, and each surface says what happened.

use crate::common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::daemon::{file_drive, Daemon};
use serde_json::Value;

const YEAR: i64 = 365 * 86_400;
/// Bytes written "a year ahead" in the restart test (43 MiB, as the issue saw).
const AHEAD_BYTES: u64 = 43 << 20;
/// libfaketime, from Debian's `faketime` package (scripts/test installs it).
const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// A file-target drive `a` with a read canary and a short `latency` suite due every
/// minute (stopped at 10 s), under a budget that never skips it.
fn config(dir: &Path) -> std::path::PathBuf {
    let text = format!(
        "state_dir = \"{}\"\ndiscovery.enabled = false\nhealth_interval = \"2s\"\n\n\
[wear_budget]\nscheduled_unrated_bytes = \"1PiB\"\n\n{}\n\
[[probe]]\nname = \"rd\"\ndrives = [\"a\"]\nworkload = {{ rate_iops = 50 }}\n\n\
[[schedule]]\nname = \"s\"\ndrives = [\"a\"]\nsuite = \"latency\"\nscale = \"quick\"\ncron = \"* * * * *\"\nmax_duration = \"10s\"\n",
        dir.join("state").display(),
        file_drive("a", &dir.join("a.dat"), "64MiB"),
    );
    let path = dir.join("d.toml");
    std::fs::write(&path, text).unwrap();
    path
}

fn json(d: &Daemon, path: &str) -> Value {
    let (code, _, body) = d.get(path);
    assert_eq!(code, 200, "{path}: {body}");
    serde_json::from_str(&body).unwrap()
}

/// Polls `/api/v1/runs` until `pred` holds for some run; returns it.
fn wait_run(d: &Daemon, what: &str, limit: Duration, pred: impl Fn(&Value) -> bool) -> Value {
    let t0 = Instant::now();
    loop {
        let runs = d.runs();
        if let Some(r) = runs.iter().find(|r| pred(r)) {
            return r.clone();
        }
        assert!(
            t0.elapsed() < limit,
            "no run {what} within {limit:?}: {runs:?}\nlog:\n{}",
            d.log()
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

fn ended(r: &Value) -> bool {
    r["status"] != "running" && !r["ended"].is_null()
}

/// The wall clock a year ahead while a run starts, then back while it goes on. Before,
/// no run fired again (the saved times a year ahead held the schedule for a year) while
/// the page and `driveprobe_schedule_next_run_timestamp_seconds` said "next due in 53 s",
/// the run ended "before" it started, and its bytes written while the clock was ahead
/// fell out of the wear window.
#[test]
fn a_clock_a_year_ahead_and_back_during_a_run_silences_nothing() {
    assert!(
        Path::new(LIBFAKETIME).exists(),
        "{LIBFAKETIME} is missing: apt-get install faketime"
    );
    let dir = common::shm_dir("dp-clock-");
    let cfg = config(dir.path());
    common::daemon::seed_due_state(&dir.path().join("state"), &["s/a"]);
    let offset = dir.path().join("faketime");
    std::fs::write(&offset, "+365d\n").unwrap();
    let d = Daemon::start(
        &cfg,
        &[
            ("LD_PRELOAD", LIBFAKETIME),
            ("FAKETIME_TIMESTAMP_FILE", offset.to_str().unwrap()),
            ("FAKETIME_NO_CACHE", "1"),
            // The step is seen against the monotonic clock, which must stay true.
            ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
        ],
    );
    let first = d.wait_run_status("running", Duration::from_secs(60));
    let started = first["started"].as_i64().unwrap();
    assert!(
        started > now() + YEAR - 3600,
        "the daemon's clock is a year ahead (libfaketime works on it): {first}"
    );
    // Back to the true time while the run goes on.
    std::fs::write(&offset, "+0\n").unwrap();
    let id = first["id"].as_str().unwrap().to_string();
    let first = wait_run(&d, "ended", Duration::from_secs(60), |r| {
        r["id"] == id.as_str() && ended(r)
    });
    let end = first["ended"].as_i64().unwrap();
    assert!(
        end >= started && end - started < 120,
        "ended {end} against started {started}: {first}"
    );
    // The next minute's due time fires a run, dated now.
    let t_back = now();
    let second = wait_run(
        &d,
        "after the clock came back",
        Duration::from_secs(150),
        |r| r["id"] != id.as_str() && r["started"].as_i64().is_some_and(|s| s < now() + 60),
    );
    let s2 = second["started"].as_i64().unwrap();
    assert!(
        (t_back - 5..=t_back + 70).contains(&s2),
        "the run after the step started at {s2}, the clock came back at {t_back}: {second}"
    );
    // Every surface saw the step.
    let e = d.scrape();
    assert!(
        e.value("driveprobe_clock_steps_total", &[]).unwrap() >= 1.0,
        "{}",
        e.text
    );
    let step = e.value("driveprobe_clock_last_step_seconds", &[]).unwrap();
    assert!(
        (step + YEAR as f64).abs() < 3600.0,
        "the last step is about a year back: {step}"
    );
    let sched = json(&d, "/api/v1/scheduler");
    assert!(
        sched["clock"]["steps_total"].as_u64().unwrap() >= 1,
        "{sched}"
    );
    assert!(
        sched["clock"]["clamped_total"].as_u64().unwrap() >= 1,
        "{sched}"
    );
    let (_, _, page) = d.get("/");
    assert!(page.contains("The wall clock stepped back"), "{page}");
    let log = d.log();
    assert!(
        log.contains("the wall clock stepped back") && log.contains("brought back to now"),
        "{log}"
    );
    // What the first run wrote, partly while the clock was a year ahead, still counts.
    let first = wait_run(&d, "first, again", Duration::from_secs(5), |r| {
        r["id"] == id.as_str()
    });
    let written = first["written_bytes"].as_u64().unwrap_or(0);
    let wear = &json(&d, "/api/v1/drives")[0]["wear"];
    assert!(
        wear["runs_written_bytes"].as_u64().unwrap() >= written,
        "the window has {wear} of a run that wrote {written}"
    );
    println!(
        "clock step {step:.0} s seen; first run {id} started {started}, ended {end} ({} s), wrote {written} bytes; next run at {s2} ({} s after the clock came back)",
        end - started,
        s2 - t_back
    );
}

/// A state saved while the clock was a year ahead, then a restart at the true time.
/// Before, the schedule stayed silent for the year, and the 43 MiB written "a year
/// ahead" were left out of the wear window.
#[test]
fn a_state_saved_a_year_ahead_is_brought_back_at_start() {
    let dir = common::shm_dir("dp-clock-");
    let cfg = config(dir.path());
    let state = dir.path().join("state");
    std::fs::create_dir_all(&state).unwrap();
    let ahead = now() + YEAR;
    let day = {
        // `YYYY-MM-DD` of `ahead`, as the state keeps days (UTC).
        let out = std::process::Command::new("date")
            .args(["-u", "-d", &format!("@{ahead}"), "+%Y-%m-%d"])
            .output()
            .unwrap();
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    };
    let doc = serde_json::json!({
        "version": 1,
        "schedules": {"s/a": {
            "first_seen": 0,
            "last_due_handled": ahead - ahead % 60,
            "last_run_started": ahead,
            "last_run_ended": ahead + 30,
            "running": false,
        }},
        "self_written": {"a": {day.clone(): AHEAD_BYTES}},
        "run_written": {"a": {day: AHEAD_BYTES}},
    });
    std::fs::write(state.join("state.json"), doc.to_string()).unwrap();
    let t0 = now();
    let d = Daemon::start(&cfg, &[]);
    let run = wait_run(&d, "started", Duration::from_secs(150), |r| {
        r["started"].as_i64().is_some_and(|s| s >= t0 - 5)
    });
    let s = run["started"].as_i64().unwrap();
    assert!(
        s <= t0 + 70,
        "started at {s}, a minute after {t0} at most: {run}"
    );
    let wear = &json(&d, "/api/v1/drives")[0]["wear"];
    assert!(
        wear["runs_written_bytes"].as_u64().unwrap() >= AHEAD_BYTES,
        "the bytes written a year ahead count: {wear}"
    );
    let sched = json(&d, "/api/v1/scheduler");
    assert!(
        sched["clock"]["clamped_total"].as_u64().unwrap() >= 1,
        "{sched}"
    );
    let log = d.log();
    assert!(
        log.contains("brought back to now") && log.contains("count as written today"),
        "{log}"
    );
    // Saved again with the times brought back.
    let saved: Value =
        serde_json::from_str(&std::fs::read_to_string(state.join("state.json")).unwrap()).unwrap();
    let b = &saved["schedules"]["s/a"];
    assert!(
        b["last_due_handled"].as_i64().unwrap() < now() + 3600,
        "{b}"
    );
}
