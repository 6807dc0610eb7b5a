//! Scheduled runs and the wear budget, end to end on the real daemon with file targets in
//! /dev/shm: a run is decided up front (admitted when its write bound fits the scheduled
//! runs' allowance, else skipped and logged once), an admitted run finishes, and a run
//! stopped midway says the true reason. Each outcome is checked on every surface: the
//! result document, /api/v1/runs, the status page and /metrics.

use crate::common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::daemon::{file_drive, seed_due_state, Daemon, Exposition};
use serde_json::Value;

/// A run due since Jan 1st (the schedule was first seen long ago) is due at once.
const DUE_LONG_AGO: &str = "0 0 1 1 *";

/// A config with a 4 KiB read canary (as the built-in config has) on a file-target drive
/// `a` of `size`, one `enterprise` schedule `s` at quick scale, and `extra` (a
/// `[wear_budget]` table, or nothing for the defaults).
fn config(dir: &Path, size: &str, max: &str, extra: &str) -> String {
    config_rated(dir, size, max, extra, "")
}

/// [`config`] with `rated` (datasheet keys) in the drive's table.
fn config_rated(dir: &Path, size: &str, max: &str, extra: &str, rated: &str) -> String {
    format!(
        "state_dir = \"{}\"\ndiscovery.enabled = false\nhealth_interval = \"2s\"\n\n{extra}{}\n{rated}\n\
[[probe]]\nname = \"rd\"\ndrives = [\"*\"]\nworkload = {{ rate_iops = 50 }}\n\n\
[[schedule]]\nname = \"s\"\ndrives = [\"a\"]\nsuite = \"enterprise\"\nscale = \"quick\"\ncron = \"{DUE_LONG_AGO}\"\nmax_duration = \"{max}\"\n",
        dir.join("state").display(),
        file_drive("a", &dir.join("a.dat"), size).trim_end(),
    )
}

fn start(dir: &Path, text: &str) -> Daemon {
    let cfg = dir.join("d.toml");
    std::fs::write(&cfg, text).unwrap();
    seed_due_state(&dir.join("state"), &["s/a"]);
    Daemon::start(&cfg, &[])
}

/// Polls `/api/v1/runs` until a run has started and ended (whatever its status).
fn wait_run_end(d: &Daemon, limit: Duration) -> Value {
    let t0 = Instant::now();
    loop {
        let runs = d.runs();
        if let Some(r) = runs
            .iter()
            .find(|r| r["status"] != "running" && !r["ended"].is_null())
        {
            return r.clone();
        }
        assert!(t0.elapsed() < limit, "no run ended in {limit:?}: {runs:?}");
        std::thread::sleep(Duration::from_millis(250));
    }
}

fn document(run: &Value) -> Value {
    let path = run["result_path"].as_str().expect("a result document");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// The status page's row of run `id`.
fn page_row(d: &Daemon, id: &str) -> String {
    let (code, _, html) = d.get("/");
    assert_eq!(code, 200);
    html.split("<tr class=\"run\">")
        .skip(1)
        .find(|r| r.contains(id))
        .and_then(|r| r.split("</tr>").next())
        .unwrap_or_else(|| panic!("no row for run {id} on the status page:\n{html}"))
        .to_string()
}

/// The page's text for `s` (what `http::status_page` escapes).
fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&#39;")
}

fn gauge(e: &Exposition, name: &str, labels: &[(&str, &str)]) -> f64 {
    e.value(name, labels)
        .unwrap_or_else(|| panic!("no single {name}{labels:?} in:\n{}", e.text))
}

const SUITE: [(&str, &str); 2] = [("drive", "a"), ("suite", "enterprise")];

#[test]
fn a_scheduled_enterprise_run_under_the_default_budget_finishes_and_every_surface_agrees() {
    let dir = common::shm_dir("dp-budget-");
    // The default [wear_budget], an unrated drive, the built-in config's 256 MiB target.
    let d = start(dir.path(), &config(dir.path(), "256MiB", "1h", ""));
    let t0 = Instant::now();
    let run = wait_run_end(&d, Duration::from_secs(600));
    let took = t0.elapsed();
    assert_eq!(run["status"], "passed", "{run}\nlog:\n{}", d.log());
    let id = run["id"].as_str().unwrap();
    assert!(
        run.get("reason").is_none(),
        "a run that passed has no reason: {run}"
    );
    let bound = run["write_bound_bytes"]
        .as_u64()
        .expect("the bound it was admitted with");
    let written = run["written_bytes"].as_u64().expect("what it wrote");
    println!(
        "quick enterprise on an unrated 256 MiB file target, default budget: passed in {:.0} s \
         (run {} s), wrote {written} bytes ({:.2} GiB) against its bound of {bound} bytes \
         ({:.1} GiB, {:.1}x)",
        took.as_secs_f64(),
        run["ended"].as_i64().unwrap() - run["started"].as_i64().unwrap(),
        written as f64 / (1u64 << 30) as f64,
        bound as f64 / (1u64 << 30) as f64,
        bound as f64 / written as f64,
    );
    assert!(
        written >= 256 << 20,
        "at least the preconditioning pass: {written}"
    );
    assert!(written <= bound, "{written} > {bound}");
    // The result document: complete, every step's phase.
    let doc = document(&run);
    assert_eq!(doc["complete"], true);
    assert!(
        doc["incomplete_reason"].is_null(),
        "{}",
        doc["incomplete_reason"]
    );
    assert_eq!(doc["phases"].as_array().unwrap().len(), 10);
    // The status page says passed, with no reason.
    let row = page_row(&d, id);
    assert!(row.contains("class=\"ok\">passed</td>"), "{row}");
    // The gauges say the same.
    let e = d.wait_for("the run's gauges", Duration::from_secs(10), |e| {
        e.value("driveprobe_run_last_passed", &SUITE) == Some(1.0)
    });
    let mut l = SUITE.to_vec();
    l.extend([("status", "passed"), ("reason", "none")]);
    assert_eq!(gauge(&e, "driveprobe_run_last_status", &l), 1.0);
    assert_eq!(
        gauge(&e, "driveprobe_run_written_bytes", &SUITE),
        written as f64
    );
    assert_eq!(
        gauge(&e, "driveprobe_run_write_bound_bytes", &SUITE),
        bound as f64
    );
    let drive = [("drive", "a")];
    assert!(gauge(&e, "driveprobe_wear_budget_runs_used_bytes", &drive) >= written as f64);
    assert_eq!(
        gauge(&e, "driveprobe_wear_budget_runs_bytes", &drive),
        driveprobe::config::DEFAULT_SCHEDULED_UNRATED_BYTES as f64
    );
    assert_eq!(
        gauge(&e, "driveprobe_wear_budget_runs_period_seconds", &drive),
        30.0 * 86_400.0
    );
    // The run's writes are not the canaries': their daily budget is untouched.
    assert_eq!(gauge(&e, "driveprobe_wear_budget_used_bytes", &drive), 0.0);
    assert!(!e.has("driveprobe_schedule_skipped_total"));
    assert!(!d.log().contains("skipped"), "{}", d.log());
    d.terminate(Duration::from_secs(5));
}

#[test]
fn a_run_whose_bound_does_not_fit_is_skipped_up_front_logged_once_and_shown_everywhere() {
    let dir = common::shm_dir("dp-budget-");
    let budget = "[wear_budget]\nscheduled_unrated_bytes = \"1GiB\"\n\n";
    let d = start(dir.path(), &config(dir.path(), "32MiB", "1h", budget));
    let run = d.wait_run_status("skipped", Duration::from_secs(20));
    let id = run["id"].as_str().unwrap().to_string();
    let reason = run["reason"].as_str().expect("a reason").to_string();
    let bound = run["write_bound_bytes"].as_u64().unwrap();
    assert!(
        bound > 1 << 30,
        "the quick enterprise bound is over 1 GiB: {bound}"
    );
    // The figures: the bound, what is left, the allowance and its period.
    for want in [
        "wear budget for scheduled runs",
        &format!("({bound} bytes)"),
        "(1073741824 bytes) is left of 1.0 GiB per 30 days",
    ] {
        assert!(reason.contains(want), "{want:?} not in {reason:?}");
    }
    assert!(
        run["result_path"].is_null(),
        "a skipped run has no document"
    );
    assert_eq!(run["started"], run["ended"]);
    // Still skipped, once: no retry every second, no second entry.
    std::thread::sleep(Duration::from_secs(4));
    let runs = d.runs();
    assert_eq!(runs.len(), 1, "{runs:?}");
    let log = d.log();
    let logged = log
        .lines()
        .filter(|l| l.contains("scheduled run skipped"))
        .count();
    assert_eq!(logged, 1, "logged once:\n{log}");
    assert!(log.contains(&format!("{bound} bytes")), "{log}");
    // Skipped, not left waiting for the budget: nothing waits after the skip. (Before it,
    // on a busy host, the scheduler may see the run due before the drive's first health
    // reading and say it waits for that.)
    let after_skip: Vec<&str> = log
        .lines()
        .skip_while(|l| !l.contains("scheduled run skipped"))
        .filter(|l| l.contains("waiting"))
        .collect();
    assert!(after_skip.is_empty(), "{after_skip:?}\n{log}");
    // The status page: the run's row and the drive's wear cell give the same sentence.
    let row = page_row(&d, &id);
    assert!(
        row.contains("skipped") && row.contains(&esc(&reason)),
        "{row}"
    );
    let (_, _, html) = d.get("/");
    assert!(html.contains("s skipped 1x"), "the drive's wear cell");
    // /metrics: counted once, with the reason.
    let e = d.scrape();
    assert_eq!(
        gauge(
            &e,
            "driveprobe_schedule_skipped_total",
            &[("drive", "a"), ("schedule", "s"), ("reason", "wear_budget")]
        ),
        1.0
    );
    assert_eq!(
        gauge(&e, "driveprobe_wear_budget_runs_bytes", &[("drive", "a")]),
        (1u64 << 30) as f64
    );
    assert!(!e.has("driveprobe_run_last_passed"), "no run happened");
    // The state keeps it: a restart does not run it either.
    d.terminate(Duration::from_secs(5));
    let d = Daemon::start(&dir.path().join("d.toml"), &[]);
    std::thread::sleep(Duration::from_secs(3));
    let runs = d.runs();
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(runs[0]["status"], "skipped");
    assert_eq!(runs[0]["reason"].as_str(), Some(reason.as_str()));
    d.terminate(Duration::from_secs(5));
}

/// A run's stop as every surface shows it: (status, reason label, reason text).
fn check_stop(d: &Daemon, run: &Value, status: &str, label: &str, text: &str) {
    let id = run["id"].as_str().unwrap();
    let reason = run["reason"].as_str().expect("a reason");
    assert!(reason.starts_with(text), "{reason:?}");
    let doc = document(run);
    assert_eq!(doc["complete"], false);
    assert_eq!(
        doc["incomplete_reason"].as_str(),
        Some(reason),
        "the document"
    );
    let row = page_row(d, id);
    assert!(row.contains(&esc(reason)), "the status page: {row}");
    assert!(!row.contains("failed: -"), "{row}");
    let (_, _, html) = d.get("/");
    assert!(
        html.contains(&format!("run:enterprise failed:</span> {}", esc(reason))),
        "the drive's collector says the same"
    );
    let (code, _, report) = d.get(&format!("/runs/{id}/report"));
    assert_eq!(code, 200, "{report}");
    assert!(
        report.contains(&format!("incomplete</span>: {}", esc(reason))),
        "the report"
    );
    let e = d.wait_for("the run's gauges", Duration::from_secs(10), |e| {
        e.has("driveprobe_run_last_status")
    });
    let mut l = SUITE.to_vec();
    l.extend([("status", status), ("reason", label)]);
    assert_eq!(
        gauge(&e, "driveprobe_run_last_status", &l),
        1.0,
        "{}",
        e.text
    );
    assert_eq!(gauge(&e, "driveprobe_run_last_passed", &SUITE), 0.0);
}

#[test]
fn a_run_stopped_by_sigterm_or_its_max_duration_says_which_on_every_surface() {
    // SIGTERM mid-run: stopped by signal.
    let dir = common::shm_dir("dp-budget-");
    let text = config(dir.path(), "32MiB", "1h", "");
    let d = start(dir.path(), &text);
    d.wait_run_status("running", Duration::from_secs(20));
    std::thread::sleep(Duration::from_secs(2));
    let (st, _) = d.terminate(Duration::from_secs(5));
    assert!(st.success(), "{st:?}");
    // After a restart (the daemon that stopped it is gone): the index, the page and the
    // gauges restored from the document.
    let d = Daemon::start(&dir.path().join("d.toml"), &[]);
    let run = d.wait_run_status("stopped", Duration::from_secs(10));
    check_stop(
        &d,
        &run,
        "stopped",
        "signal",
        "stopped by signal (SIGINT/SIGTERM)",
    );
    assert_eq!(run["stop"]["kind"], "signal");
    d.terminate(Duration::from_secs(5));

    // Its max_duration: timed out.
    let dir = common::shm_dir("dp-budget-");
    let d = start(dir.path(), &config(dir.path(), "32MiB", "3s", ""));
    let run = d.wait_run_status("timed_out", Duration::from_secs(30));
    check_stop(
        &d,
        &run,
        "timed_out",
        "max_duration",
        "timed out: stopped at its max_duration of 3 s",
    );
    assert_eq!(run["stop"]["kind"], "max_duration");
    d.terminate(Duration::from_secs(5));
}

/// A run that reaches its hard safety limit, on the fastest target there is here (a
/// file in /dev/shm) with a drive that claims 1 MB/s: the run issues no write past the
/// limit (not "stopped once noticed": the engine takes each write's bytes from the limit
/// before it issues the write), it stops within a few chunks of the limit, and the stop
/// is a safety stop on every surface. Before, the limit was checked once a tick and a
/// 16 MiB tmpfs target went over 20 times past it (1.23 GB noticed, 2.19 GB written for a
/// limit of 99 MB).
#[test]
fn a_run_at_its_hard_safety_limit_writes_nothing_past_it_and_stops_as_a_safety_stop() {
    // A drive that claims 1 MB/s: the bound (purge, one preconditioning pass, the timed
    // phases at 1.25 MB/s) is about 33 MB on 16 MiB, its safety limit 1.5x that plus
    // 64 MiB; tmpfs moves gigabytes a second, so the write phases reach it at once.
    let dir = common::shm_dir("dp-budget-");
    let rated = "rated_seq_read_bw = \"1MB\"\nrated_seq_write_bw = \"1MB\"\n";
    let d = start(
        dir.path(),
        &config_rated(dir.path(), "16MiB", "1h", "", rated),
    );
    let run = wait_run_end(&d, Duration::from_secs(120));
    assert_eq!(run["status"], "stopped", "{run}\nlog:\n{}", d.log());
    let bound = run["write_bound_bytes"].as_u64().unwrap();
    let written = run["written_bytes"].as_u64().unwrap();
    assert!(bound < 100_000_000, "{bound}");
    let limit = (bound as f64 * 1.5) as u64 + (64 << 20);
    check_stop(&d, &run, "stopped", "safety_limit", "safety stop: wrote ");
    assert_eq!(run["stop"]["kind"], "safety_limit");
    assert_eq!(run["stop"]["bound_bytes"].as_u64(), Some(bound));
    assert_eq!(run["stop"]["limit_bytes"].as_u64(), Some(limit));
    // Every write issued, ramps included (the run index's figure counts measured
    // intervals only, so it is at most this).
    let issued = run["stop"]["written_bytes"].as_u64().unwrap();
    let e = d.scrape();
    let ledger = gauge(
        &e,
        "driveprobe_wear_budget_runs_used_bytes",
        &[("drive", "a")],
    ) as u64;
    println!(
        "hard limit on a 16 MiB tmpfs target rated 1 MB/s: bound {bound} bytes, limit {limit} \
         bytes; issued {issued} bytes (limit - issued = {} bytes), measured {written} bytes, \
         ledger {ledger} bytes; overshoot {} bytes",
        limit as i64 - issued as i64,
        issued.saturating_sub(limit),
    );
    assert!(issued <= limit, "issued {issued} > limit {limit}");
    assert!(written <= issued, "measured {written} > issued {issued}");
    assert!(ledger <= limit, "the drive's ledger: {ledger} > {limit}");
    // Stopped by the limit, not short of it: within a chunk per worker (and a write) of
    // it. The largest phase runs 32 workers; 64 MiB is room for any of them.
    assert!(
        issued > limit - (64 << 20),
        "stopped {} bytes short of the limit",
        limit - issued
    );
    let log = d.log();
    assert_eq!(
        log.lines()
            .filter(|l| l.contains("safety stop of a scheduled run"))
            .count(),
        1,
        "{log}"
    );
    d.terminate(Duration::from_secs(5));
}

#[test]
fn a_spent_canary_budget_does_not_hold_or_stop_a_scheduled_run_and_runs_do_not_spend_it() {
    let dir = common::shm_dir("dp-budget-");
    // Today's bytes of a state file from before the split (canaries and runs were one
    // daily count): 10 MiB, over the canaries' 2 MiB. The old daemon held the due run
    // ("waiting", every second) or stopped it once it wrote past the shared budget.
    let state = dir.path().join("state");
    std::fs::create_dir_all(&state).unwrap();
    let today = driveprobe::schedule::state::utc_day(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64,
    );
    let doc = serde_json::json!({
        "version": 1,
        "schedules": { "s/a": { "first_seen": 0 } },
        "self_written": { "a": { today: 10u64 << 20 } },
        "self_written_lifetime": { "a": 10u64 << 20 },
    });
    std::fs::write(state.join("state.json"), doc.to_string()).unwrap();
    let text = config(
        dir.path(),
        "32MiB",
        "1h",
        "[wear_budget]\nunrated_bytes_per_day = \"2MiB\"\n\n",
    )
    .replace(
        "workload = { rate_iops = 50 }",
        "workload = { read_pct = 0, rate_iops = 300 }",
    );
    let cfg = dir.path().join("d.toml");
    std::fs::write(&cfg, text).unwrap();
    let d = Daemon::start(&cfg, &[]);
    let run = wait_run_end(&d, Duration::from_secs(300));
    assert_eq!(run["status"], "passed", "{run}\nlog:\n{}", d.log());
    let written = run["written_bytes"].as_u64().unwrap();
    let e = d.scrape();
    let drive = [("drive", "a")];
    // The canaries' count is the old bytes only: the run's are the runs'.
    assert_eq!(
        gauge(&e, "driveprobe_wear_budget_used_bytes", &drive),
        (10u64 << 20) as f64
    );
    assert_eq!(gauge(&e, "driveprobe_wear_budget_exceeded", &drive), 1.0);
    assert!(gauge(&e, "driveprobe_wear_budget_runs_used_bytes", &drive) >= written as f64);
    assert!(
        gauge(&e, "driveprobe_self_written_bytes_total", &drive) >= (written + (10 << 20)) as f64,
        "nothing of the old state lost"
    );
    // The writing canary still holds for its own budget after the run.
    d.wait_for("the writing canary held", Duration::from_secs(20), |e| {
        e.value(
            "driveprobe_probe_running",
            &[("drive", "a"), ("probe", "rd")],
        ) == Some(0.0)
    });
    // Never held for a budget. (On a busy host the scheduler may see the run due before
    // the drive's first health reading and say it waits for that: not a hold.)
    let log = d.log();
    let held: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("waiting") && !l.contains("first health reading"))
        .collect();
    assert!(held.is_empty(), "{held:?}\n{log}");
    d.terminate(Duration::from_secs(5));
}

/// A due run whose drive is down waits, and says so once when the wait starts, not once a
/// second (issue 17: "run due, but ... waiting" was logged every second).
#[test]
fn a_due_run_waiting_for_its_drive_is_logged_once() {
    let dir = common::shm_dir("dp-budget-");
    // No device has this serial: the drive is down, the run stays due.
    let text = config_rated(
        dir.path(),
        "32MiB",
        "1h",
        "",
        "serial = \"DP-NO-SUCH-SERIAL-17\"",
    );
    let d = start(dir.path(), &text);
    let t0 = Instant::now();
    loop {
        let drives: Value = serde_json::from_str(&d.get("/api/v1/drives").2).unwrap();
        if drives[0]["up"] == false && d.log().contains("run due, but the drive is down") {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "the drive is not down, or the wait is not logged: {drives}\n{}",
            d.log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // Several scheduler ticks later: still logged once, and the run has not started.
    std::thread::sleep(Duration::from_secs(4));
    let log = d.log();
    let waits = log
        .lines()
        .filter(|l| l.contains("run due, but the drive is down"))
        .count();
    assert_eq!(waits, 1, "logged once:\n{log}");
    assert!(d.runs().is_empty(), "{:?}", d.runs());
    d.terminate(Duration::from_secs(5));
}
