//! Scheduled drive self-tests (`[[selftest]]`, issue 20) in the real daemon, against a
//! stand-in smartctl on its PATH that keeps a drive's self-test state in files: it
//! starts a test on `-t`, refuses one while a test runs (as smartctl does without
//! `force`), aborts on `-X`, and prints smartctl JSON (built from the hand-written
//! fixture `selftest-running-sata.json`) for a test running, passed or failed. The drive
//! is a file target on ext4 on a loop device, so its health is read through smartctl.

use crate::common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::daemon::{file_drive, seed_due_state, Daemon};
use serde_json::{json, Value};

/// Due since Jan 1st (first seen long ago in the seeded state): starts at once.
const DUE_LONG_AGO: &str = "0 0 1 1 *";

struct Stand {
    _tools: tempfile::TempDir,
    ctl: PathBuf,
    path_env: String,
}

impl Stand {
    fn new() -> Stand {
        let tools = tempfile::Builder::new()
            .prefix("dp-selftest-tools-")
            .tempdir()
            .unwrap();
        let ctl = tools.path().join("ctl");
        std::fs::create_dir_all(&ctl).unwrap();
        let fixture = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/smartctl/selftest-running-sata.json");
        let running: Value =
            serde_json::from_str(&std::fs::read_to_string(fixture).unwrap()).unwrap();
        let extended_passed = json!({"type": {"value": 2, "string": "Extended offline"},
            "status": {"value": 0, "string": "Completed without error", "passed": true},
            "lifetime_hours": 20870});
        let with = |status: Value, table: Vec<Value>| {
            let mut v = running.clone();
            v["ata_smart_data"]["self_test"]["status"] = status;
            v["ata_smart_self_test_log"]["extended"]["table"] = Value::Array(table);
            v["ata_smart_self_test_log"]["extended"]["count"] = json!(2);
            v
        };
        let idle = with(
            json!({"value": 0, "string": "completed without error", "passed": true}),
            vec![extended_passed.clone()],
        );
        let pass = with(
            json!({"value": 0, "string": "completed without error", "passed": true}),
            vec![
                json!({"type": {"value": 1, "string": "Short offline"},
                    "status": {"value": 0, "string": "Completed without error", "passed": true},
                    "lifetime_hours": 21035}),
                extended_passed.clone(),
            ],
        );
        let fail = with(
            json!({"value": 115, "string": "completed: read failure", "passed": false}),
            vec![
                json!({"type": {"value": 1, "string": "Short offline"},
                    "status": {"value": 115, "string": "Completed: read failure", "remaining_percent": 30, "passed": false},
                    "lifetime_hours": 21035, "lba": 4242}),
                extended_passed,
            ],
        );
        for (name, v) in [
            ("running", &running),
            ("idle", &idle),
            ("done-pass", &pass),
            ("done-fail", &fail),
        ] {
            std::fs::write(ctl.join(format!("{name}.json")), v.to_string()).unwrap();
        }
        std::fs::write(ctl.join("result"), "pass").unwrap();
        let c = ctl.display();
        let script = format!(
            r#"#!/bin/sh
# driveprobe's stand-in smartctl: one drive's self-test state in {c}.
C='{c}'
echo "$@" >> "$C/calls"
case " $* " in
  *" -t "*)
    if [ -e "$C/external" ] || [ -e "$C/running" ]; then
      echo '{{"smartctl":{{"version":[7,4],"messages":[{{"string":"Can'"'"'t start self-test without aborting current test (90% remaining),","severity":"error"}}],"exit_status":4}}}}'
      exit 4
    fi
    echo 2 > "$C/running"; rm -f "$C/done"
    echo '{{"smartctl":{{"version":[7,4],"messages":[{{"string":"Self-test has begun","severity":"information"}}],"exit_status":0}}}}'
    exit 0 ;;
  *" -X "*)
    rm -f "$C/running"; touch "$C/aborted"
    echo '{{"smartctl":{{"version":[7,4],"exit_status":0}}}}'
    exit 0 ;;
esac
if [ -e "$C/external" ]; then exec cat "$C/running.json"; fi
if [ -e "$C/running" ]; then
  n=$(cat "$C/running")
  if [ -e "$C/hold" ]; then exec cat "$C/running.json"; fi
  if [ "$n" -gt 0 ]; then echo $((n - 1)) > "$C/running"; exec cat "$C/running.json"; fi
  rm -f "$C/running"; cp "$C/result" "$C/done"
fi
if [ -e "$C/done" ]; then exec cat "$C/done-$(cat "$C/done").json"; fi
exec cat "$C/idle.json"
"#
        );
        let smartctl = tools.path().join("smartctl");
        std::fs::write(&smartctl, script).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&smartctl, std::fs::Permissions::from_mode(0o755)).unwrap();
        let path_env = format!(
            "{}:{}",
            tools.path().display(),
            std::env::var("PATH").unwrap_or_default()
        );
        Stand {
            _tools: tools,
            ctl,
            path_env,
        }
    }

    fn set(&self, name: &str, on: bool) {
        let p = self.ctl.join(name);
        if on {
            std::fs::write(p, "").unwrap();
        } else {
            let _ = std::fs::remove_file(p);
        }
    }

    fn result(&self, r: &str) {
        std::fs::write(self.ctl.join("result"), r).unwrap();
    }

    /// The smartctl calls that started a test so far.
    fn starts(&self) -> Vec<String> {
        std::fs::read_to_string(self.ctl.join("calls"))
            .unwrap_or_default()
            .lines()
            .filter(|l| l.split_whitespace().any(|a| a == "-t"))
            .map(String::from)
            .collect()
    }

    fn aborted(&self) -> bool {
        self.ctl.join("aborted").exists()
    }
}

fn header(dir: &Path) -> String {
    format!(
        "state_dir = \"{}\"\ndiscovery.enabled = false\nhealth_interval = \"1s\"\n\n[wear_budget]\nunrated_bytes_per_day = \"1TiB\"\nscheduled_unrated_bytes = \"1PiB\"\n\n",
        dir.join("state").display()
    )
}

fn selftest(name: &str, kind: &str) -> String {
    format!("[[selftest]]\nname = \"{name}\"\ndrives = [\"a\"]\nkind = \"{kind}\"\ncron = \"{DUE_LONG_AGO}\"\nmax_duration = \"10m\"\n\n")
}

fn drive_json(d: &Daemon) -> Value {
    let (code, _, body) = d.get("/api/v1/drives");
    assert_eq!(code, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    v.as_array()
        .unwrap()
        .iter()
        .find(|x| x["name"] == "a")
        .cloned()
        .unwrap()
}

fn wait_api(d: &Daemon, what: &str, limit: Duration, cond: impl Fn(&Value) -> bool) -> Value {
    let t0 = Instant::now();
    loop {
        let v = drive_json(d);
        if cond(&v) {
            return v;
        }
        assert!(
            t0.elapsed() < limit,
            "waited {limit:?} for {what}: {v:#}\nlog:\n{}",
            d.log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

const LIMIT: Duration = Duration::from_secs(60);

/// A due `[[selftest]]` starts the drive's test once, its progress is exported while it
/// runs, and its failure is the last result, a failing verdict and the alert's series.
#[test]
fn a_scheduled_self_test_reports_progress_and_its_failure_fails_the_verdict() {
    common::need_root();
    let shm = common::shm_dir("dp-selftest-");
    let fs = common::LoopExt4::new(shm.path(), 64 << 20);
    let stand = Stand::new();
    stand.result("fail");
    stand.set("hold", true);
    let cfg = shm.path().join("d.toml");
    std::fs::write(
        &cfg,
        format!(
            "{}{}{}",
            header(shm.path()),
            file_drive("a", &fs.dir().join("a.dat"), "4MiB"),
            selftest("st", "short")
        ),
    )
    .unwrap();
    seed_due_state(&shm.path().join("state"), &["st/a"]);
    let d = Daemon::start(&cfg, &[("PATH", &stand.path_env)]);
    d.wait_for("the self-test running, 10% done", LIMIT, |e| {
        e.value("driveprobe_selftest_running", &[("drive", "a")]) == Some(1.0)
            && e.value(
                "driveprobe_selftest_progress_ratio",
                &[("drive", "a"), ("kind", "short")],
            )
            .is_some_and(|v| (v - 0.1).abs() < 1e-9)
    });
    let v = wait_api(&d, "the schedule's test in the API", LIMIT, |v| {
        v["self_test"]["running"]["done_ratio"].as_f64().is_some()
    });
    let r = &v["self_test"]["running"];
    assert_eq!(r["schedule"], "st", "{v:#}");
    assert_eq!(r["kind"], "short", "{v:#}");
    assert!(r["started_unix"].as_f64().is_some(), "{v:#}");
    assert_eq!(stand.starts().len(), 1, "{:?}", stand.starts());
    assert!(
        stand.starts()[0].contains("-t short"),
        "{:?}",
        stand.starts()
    );
    let (_, _, page) = d.get("/");
    assert!(
        page.contains("short self-test running: 10% done (st, started"),
        "{page}"
    );

    stand.set("hold", false);
    let e = d.wait_for("the failed result", LIMIT, |e| {
        e.value(
            "driveprobe_selftest_last_result",
            &[("drive", "a"), ("kind", "short"), ("result", "failed")],
        ) == Some(1.0)
            && e.value("driveprobe_selftest_running", &[("drive", "a")]) == Some(0.0)
    });
    assert!(e
        .value(
            "driveprobe_selftest_last_end_timestamp_seconds",
            &[("drive", "a"), ("kind", "short")]
        )
        .is_some());
    let v = wait_api(&d, "a failing verdict", LIMIT, |v| {
        v["health"]["verdict"] == "failing"
    });
    let last = &v["self_test"]["last"]["short"];
    assert_eq!(last["result"], "failed", "{v:#}");
    assert_eq!(last["first_failing_lba"], 4242, "{v:#}");
    assert!(
        last["message"].as_str().unwrap().contains("read failure"),
        "{v:#}"
    );
    let reasons = v["health"]["reasons"].to_string();
    assert!(
        reasons.contains("latest short self-test failed"),
        "{reasons}"
    );
    d.wait_for("the drive log's failed self-test", LIMIT, |e| {
        e.value(
            "driveprobe_health_self_test_failed",
            &[("drive", "a"), ("kind", "short")],
        ) == Some(1.0)
    });
    let (_, _, page) = d.get("/");
    assert!(
        page.contains("last short self-test (st): <span class=\"bad\">failed</span>"),
        "{page}"
    );
    // Started once: the handled due time is not run again.
    assert_eq!(stand.starts().len(), 1, "{:?}", stand.starts());
    assert!(d.log().contains("self-test failed"), "{}", d.log());
    d.terminate(Duration::from_secs(10));
}

/// A suite never starts on a drive testing itself (a test started by hand, seen in the
/// health reading), a self-test never on a drive busy with a run, and a self-test the
/// daemon runs is aborted when it stops.
#[test]
fn self_tests_and_suites_never_share_a_drive_and_a_test_is_aborted_at_stop() {
    common::need_root();
    let shm = common::shm_dir("dp-selftest-");
    let fs = common::LoopExt4::new(shm.path(), 64 << 20);
    let stand = Stand::new();
    // A test someone started by hand runs when the daemon starts.
    stand.set("external", true);
    let cfg = shm.path().join("d.toml");
    std::fs::write(
        &cfg,
        format!(
            "{}{}[[schedule]]\nname = \"s\"\ndrives = [\"a\"]\nsuite = \"latency\"\nscale = \"quick\"\ncron = \"{DUE_LONG_AGO}\"\nmax_duration = \"10m\"\n\n{}",
            header(shm.path()),
            file_drive("a", &fs.dir().join("a.dat"), "32MiB"),
            selftest("st", "long")
        ),
    )
    .unwrap();
    seed_due_state(&shm.path().join("state"), &["s/a", "st/a"]);
    let d = Daemon::start(&cfg, &[("PATH", &stand.path_env)]);
    d.wait_for("the drive's own test seen running", LIMIT, |e| {
        e.value("driveprobe_selftest_running", &[("drive", "a")]) == Some(1.0)
    });
    // Both are due; neither starts while the drive tests itself. Watched over several
    // health readings and scheduler passes after the test was first seen.
    let seen = Instant::now();
    let mut reads = 0;
    let mut last_read = None;
    while reads < 4 || seen.elapsed() < Duration::from_secs(3) {
        let v = drive_json(&d);
        let read = v["health_state"]["read_unix"].as_f64();
        if read != last_read {
            reads += 1;
            last_read = read;
        }
        assert!(d.runs().is_empty(), "a run started: {:?}", d.runs());
        assert!(stand.starts().is_empty(), "{:?}", stand.starts());
        assert!(seen.elapsed() < LIMIT, "no new health readings: {v:#}");
        std::thread::sleep(Duration::from_millis(200));
    }
    // Held, and saying so where one looks (issue 33: before, the page said "next due
    // 41 s ago" and nothing was logged).
    let (_, _, body) = d.get("/api/v1/scheduler");
    let sched: serde_json::Value = serde_json::from_str(&body).unwrap();
    let held = &sched["held"]["s/a"];
    assert_eq!(held["reason"], "selftest", "{sched:#}");
    let why = held["message"].as_str().unwrap();
    assert!(
        why.contains("s/a") && why.contains("drive a reports a self-test in progress"),
        "{why}"
    );
    let e = d.scrape();
    assert_eq!(
        e.value(
            "driveprobe_schedule_held",
            &[("schedule", "s/a"), ("reason", "selftest")]
        ),
        Some(1.0),
        "{}",
        e.text
    );
    let (_, _, page) = d.get("/");
    let row = page
        .split("<tr class=\"schedule\"><td>s/a</td>")
        .nth(1)
        .and_then(|r| r.split("</tr>").next())
        .unwrap_or_else(|| panic!("no row for s/a:\n{page}"));
    assert!(
        row.contains("held since") && !row.contains(" ago)</span></td>"),
        "{row}"
    );
    let log = d.log();
    assert_eq!(
        log.matches("s/a: due, held: drive a reports a self-test")
            .count(),
        1,
        "logged once when the hold starts:\n{log}"
    );
    // The hand-started test ends: the suite (listed first) takes the drive; the
    // self-test waits for it. (Held: the scheduled test, once started, runs until the
    // daemon stops.)
    stand.set("hold", true);
    stand.set("external", false);
    d.wait_run_status("running", LIMIT);
    let run_started = Instant::now();
    loop {
        assert!(
            run_started.elapsed() < Duration::from_secs(900),
            "the run did not end: {:?}",
            d.runs()
        );
        // The self-tests started so far, then the runs: a start seen while the run is
        // still running after it was seen started during the run (the test may start
        // between the run's end and this look, which is allowed).
        let starts = stand.starts();
        let runs = d.runs();
        let running = runs.iter().any(|r| r["status"] == "running");
        assert!(
            starts.is_empty() || !running,
            "a self-test started during the run: {starts:?}\n{runs:?}"
        );
        if !running {
            assert_eq!(runs[0]["status"], "passed", "{runs:?}\n{}", d.log());
            assert!(
                d.log()
                    .contains("ended: s/a: due, held: drive a reports a self-test"),
                "the hold's end is logged:\n{}",
                d.log()
            );
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    // Then the extended test starts (smartctl's "long"), and the daemon's stop aborts it.
    d.wait_for("the scheduled extended test running", LIMIT, |e| {
        e.value("driveprobe_selftest_running", &[("drive", "a")]) == Some(1.0)
    });
    assert_eq!(stand.starts().len(), 1, "{:?}", stand.starts());
    assert!(
        stand.starts()[0].contains("-t long"),
        "{:?}",
        stand.starts()
    );
    wait_api(&d, "the API's running test", LIMIT, |v| {
        v["self_test"]["running"]["schedule"] == "st"
    });
    let log_before = d.log();
    let (st, _) = d.terminate(Duration::from_secs(10));
    assert!(st.success());
    assert!(stand.aborted(), "smartctl -X was not run:\n{log_before}");
    let calls = std::fs::read_to_string(stand.ctl.join("calls")).unwrap();
    assert!(calls.lines().any(|l| l.contains("-X")), "{calls}");
}
