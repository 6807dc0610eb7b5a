//! Every suite end to end at quick scale (with short rounds) on a file in /dev/shm,
//! through the real binary: the result document is checked against its JSON Schema,
//! every closed-loop point obeys Little's law, and each suite has the phases it promises.

use crate::common;

use std::process::{Command, Output};
use std::sync::Mutex;

use serde_json::Value;

/// The suites are CPU-heavy (up to 256 I/Os in flight): one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

struct Scratch(String);
impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn schema() -> Value {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/result.schema.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn run_suite(name: &str, extra: &[&str]) -> (Value, Output) {
    let round = extra
        .iter()
        .find(|a| a.starts_with("--round-time"))
        .copied()
        .unwrap_or("--round-time=150ms");
    let extra: Vec<&str> = extra
        .iter()
        .copied()
        .filter(|a| !a.starts_with("--round-time"))
        .collect();
    let _guard = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let f = Scratch(format!(
        "/dev/shm/dp-test-suite-{}-{name}",
        std::process::id()
    ));
    let out = Command::new(env!("CARGO_BIN_EXE_driveprobe"))
        .args([
            "bench",
            &f.0,
            "--size=64m",
            "--suite",
            name,
            "--scale=quick",
        ])
        .args([round, "--output-format=json"])
        .args(&extra)
        .output()
        .unwrap();
    common::assert_ok(&out, &format!("suite {name}"));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let validator = jsonschema::validator_for(&schema()).unwrap();
    let errors: Vec<String> = validator
        .iter_errors(&doc)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(
        errors.is_empty(),
        "suite {name} result breaks its schema: {errors:#?}"
    );
    assert_eq!(doc["schema_version"], 1);
    assert_eq!(doc["suite"], name);
    assert_eq!(doc["complete"], true);
    assert_eq!(doc["engine"], "io_uring");
    (doc, out)
}

/// The slots' time of a round (`common::slot_time`): it holds whatever else the machine
/// is doing. How full the engine kept the queue on tmpfs is a benchmark figure
/// (BENCHMARKS.md), not a test: it depends on the CPU the run got. `secs`: the round's
/// length; `whole_run`: the round was a run of its own (then Little's law holds exactly).
fn slots(round: &Value, in_flight: f64, secs: f64, whole_run: bool, what: &str) {
    let f = |k: &str| round[k].as_f64().unwrap();
    let t = common::SlotTime {
        iops: f("iops"),
        mean_s: f("lat_mean_ns") / 1e9,
        secs,
        in_flight_s: f("in_flight_seconds"),
        uncounted_s: f("slot_uncounted_seconds"),
        idle_s: f("slot_idle_seconds"),
    };
    common::slot_time(&t, in_flight, whole_run, what);
}

/// A point measured as one run of its own: its slots' time and Little's law.
fn little(round: &Value, in_flight: f64, what: &str) {
    // A point's round is its whole run: it ends at the run's measured seconds.
    slots(
        round,
        in_flight,
        round["end_seconds"].as_f64().unwrap(),
        true,
        what,
    );
}

/// The rounds of one continuous run (a steady-state phase): each round's slots' time.
/// Little's law is checked on the points, each a run of its own: a round counts each
/// I/O's latency in the round it ended in, so an I/O in flight at its edge (long, when the
/// host stalls the worker there) moves latency from one round to the next.
fn little_over_rounds(rounds: &[Value], in_flight: f64, what: &str) {
    let mut prev_end = 0.0;
    for r in rounds {
        let end = r["end_seconds"].as_f64().unwrap();
        slots(
            r,
            in_flight,
            end - prev_end,
            false,
            &format!("{what} round {}", r["index"]),
        );
        prev_end = end;
    }
}

fn phases<'a>(doc: &'a Value, kind: &str) -> Vec<&'a Value> {
    doc["phases"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["kind"] == kind)
        .collect()
}

fn check_steady(p: &Value) {
    let wl = &p["workload"];
    let in_flight = (wl["workers"].as_u64().unwrap() * wl["depth"].as_u64().unwrap()) as f64;
    let rounds = p["rounds"].as_array().unwrap();
    assert!(rounds.len() >= 5, "{}: {} rounds", wl["name"], rounds.len());
    little_over_rounds(rounds, in_flight, wl["name"].as_str().unwrap());
    let s = &p["steady"];
    if s["attained"] == true {
        let at = s["steady_round"].as_u64().unwrap() as usize;
        // Issue 23: the watch rounds follow the steady round, and whether the drive
        // left steady state in them is the rule's verdict on their IOPS.
        let watch = driveprobe::protocol::steady::WATCH_ROUNDS;
        assert_eq!(s["watch_rounds"].as_u64(), Some(watch as u64));
        assert_eq!(
            at + 1 + watch,
            rounds.len(),
            "a steady phase ends its watch rounds after its steady round"
        );
        assert!(s["window_range_ratio"].as_f64().unwrap() <= 0.20);
        assert!(s["window_slope_excursion_ratio"].as_f64().unwrap() <= 0.10);
        let iops: Vec<f64> = rounds.iter().map(|r| r["iops"].as_f64().unwrap()).collect();
        let window = &iops[at + 1 - 5..=at];
        let mean = window.iter().sum::<f64>() / 5.0;
        assert!((s["window_mean_iops"].as_f64().unwrap() - mean).abs() <= 1e-9 * mean);
        let rule = driveprobe::protocol::steady::Rule::default();
        let left = driveprobe::protocol::steady::left_steady(mean, &iops[at + 1..], &rule);
        assert_eq!(
            s.get("left").cloned().unwrap_or(Value::Null),
            serde_json::to_value(left).unwrap(),
            "{}",
            wl["name"]
        );
    }
    // The burst is the first full round after the start: at quick scale's 0.5 s rounds,
    // round 1 also holds the threads' start-up, so it is round 2.
    assert!(rounds[0]["end_seconds"].as_f64().unwrap() < 10.0);
    assert_eq!(p["burst"], rounds[1]);
}

#[test]
fn enterprise_suite() {
    let (doc, _) = run_suite("enterprise", &[]);
    let kinds: Vec<&str> = doc["phases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds[0], "purge");
    assert_eq!(kinds[1], "precondition");
    let steady = phases(&doc, "steady_state");
    let names: Vec<&str> = steady
        .iter()
        .map(|p| p["workload"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "4k-randread",
            "4k-randwrite",
            "8k-70-30",
            "8k-randread",
            "8k-randwrite",
            "128k-seqread",
            "128k-seqwrite"
        ]
    );
    for p in &steady {
        assert_eq!(p["workload"]["workers"], 16);
        assert_eq!(p["workload"]["depth"], 16);
        check_steady(p);
    }
    let sweep = phases(&doc, "sweep");
    let points = sweep[0]["points"].as_array().unwrap();
    assert_eq!(points.len(), 16);
    for pt in points {
        let n = (pt["workers"].as_u64().unwrap() * pt["depth"].as_u64().unwrap()) as f64;
        little(
            &pt["round"],
            n,
            &format!("{}T{}Q", pt["workers"], pt["depth"]),
        );
        let r = pt["round"]["read"]["ops"].as_f64().unwrap();
        let w = pt["round"]["write"]["ops"].as_f64().unwrap();
        assert!(
            (r / (r + w) - 0.70).abs() < 0.03,
            "70/30 mix: {}",
            r / (r + w)
        );
    }
}

#[test]
fn curves_suite() {
    let (doc, _) = run_suite("curves", &["--round-time=100ms"]);
    assert_eq!(phases(&doc, "fill").len(), 1);
    let curves = phases(&doc, "rate_curve");
    assert_eq!(curves.len(), 16);
    // Every point's schedule, at every fraction (above the maximum too: I/Os wait for a
    // free slot and are issued late, their latency counted from their due time): the I/Os
    // counted plus those the host issued too late to count or never are the I/Os the rate
    // made due in the round, within one per worker. What the host delivered depends on
    // the CPU the round got (100 ms rounds: one stall of 10 ms is 10%): printed, not
    // checked.
    let mut points = 0;
    let mut short = Vec::new();
    for c in &curves {
        let max = c["max_iops"].as_f64().unwrap();
        assert!(max > 0.0);
        let workers = c["workload"]["workers"].as_f64().unwrap();
        let pts = c["points"].as_array().unwrap();
        assert_eq!(pts.len(), 12);
        for p in pts {
            let r = &p["round"];
            let want = p["target_iops"].as_f64().unwrap();
            let secs = r["end_seconds"].as_f64().unwrap();
            let ops = r["read"]["ops"].as_f64().unwrap() + r["write"]["ops"].as_f64().unwrap();
            let missed = r["due_missed_ops"].as_f64().unwrap();
            let due = want * secs;
            assert!(
                (ops + missed - due).abs() <= workers + 1.0 + 0.005 * due,
                "{} at {}: {ops} counted + {missed} missed, {due:.0} due",
                c["workload"]["name"],
                p["fraction"]
            );
            points += 1;
            if p["fraction"].as_f64().unwrap() <= 0.3 && missed > 0.1 * due {
                short.push(format!("{}: {ops} of {due:.0}", c["workload"]["name"]));
            }
        }
    }
    assert_eq!(points, 16 * 12);
    if !short.is_empty() {
        println!(
            "points at or below 30% of the maximum that the host delivered short:\n{}",
            short.join("\n")
        );
    }
}

#[test]
fn snia_iops_suite() {
    // 300 ms rounds: the 1 MiB points take ~7 ms an I/O, and Little's law needs rounds
    // long against the latency (100 ms rounds failed it now and then).
    let (doc, _) = run_suite("snia-iops", &["--round-time=300ms"]);
    check_steady(phases(&doc, "steady_state")[0]);
    let points = phases(&doc, "point");
    assert_eq!(points.len(), 56);
    for p in points {
        let n = (p["workload"]["workers"].as_u64().unwrap()
            * p["workload"]["depth"].as_u64().unwrap()) as f64;
        little(&p["round"], n, p["workload"]["name"].as_str().unwrap());
    }
}

#[test]
fn latency_suite() {
    // 300 ms rounds, as for snia-iops: at depth 1 a host stall between two I/Os comes
    // straight off Little's law, and a short round has no time to even it out.
    let (doc, _) = run_suite("latency", &["--round-time=300ms"]);
    let points = phases(&doc, "point");
    assert_eq!(points.len(), 9);
    for p in points {
        assert_eq!(p["workload"]["workers"], 1);
        assert_eq!(p["workload"]["depth"], 1);
        little(&p["round"], 1.0, p["workload"]["name"].as_str().unwrap());
    }
}

#[test]
fn wsat_suite_writes_four_times_the_region() {
    let (doc, _) = run_suite("wsat", &[]);
    let w = phases(&doc, "write_saturation")[0];
    let written = w["bytes_written"].as_array().unwrap();
    let last = written.last().unwrap().as_u64().unwrap();
    assert!(last >= 4 * (64 << 20), "wrote {last}");
    assert_eq!(written.len(), w["rounds"].as_array().unwrap().len());
}

#[test]
fn jesd219_suite() {
    let (doc, _) = run_suite("jesd219", &[]);
    let p = phases(&doc, "steady_state")[0];
    assert_eq!(p["workload"]["distribution"], "zoned:50/5:30/15:20/80");
    check_steady(p);
}

#[test]
fn stopping_a_suite_still_writes_the_result_marked_incomplete() {
    let _guard = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let f = Scratch(format!(
        "/dev/shm/dp-test-suite-{}-stop",
        std::process::id()
    ));
    let out_file = format!("{}.json", f.0);
    let child = Command::new(env!("CARGO_BIN_EXE_driveprobe"))
        .args([
            "bench",
            &f.0,
            "--size=64m",
            "--suite=enterprise",
            "--scale=standard",
        ])
        .args(["--output", &out_file])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_secs(3));
    let t = std::time::Instant::now();
    assert!(Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap()
        .success());
    let out = child.wait_with_output().unwrap();
    let took = t.elapsed();
    let _ = std::fs::remove_file(&out_file);
    // Within 5 s, as the daemon stops a run (the margin is for a loaded host).
    assert!(took.as_secs_f64() < 5.0, "took {took:?} to stop");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("incomplete"), "{err}");
}

#[test]
fn unknown_suite_and_bad_scale_are_usage_errors() {
    for args in [
        &["--suite=nope"][..],
        &["--suite=enterprise", "--scale=huge"][..],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_driveprobe"))
            .args(["bench", "/dev/shm/does-not-matter", "--size=1m"])
            .args(args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2));
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.lines().count(), 1, "{err}");
    }
    let list = Command::new(env!("CARGO_BIN_EXE_driveprobe"))
        .args(["bench", "--list-suites"])
        .output()
        .unwrap();
    assert!(list.status.success());
    let text = String::from_utf8_lossy(&list.stdout);
    for s in [
        "enterprise",
        "curves",
        "snia-iops",
        "latency",
        "wsat",
        "jesd219",
        "oltp",
        "kv",
        "review",
        "throughput",
        "xsr",
        "hir",
        "dirth",
    ] {
        assert!(text.contains(s), "{text}");
    }
}

#[test]
fn the_schema_file_is_up_to_date() {
    let want = driveprobe::protocol::result::json_schema();
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/result.schema.json");
    if std::env::var_os("UPDATE_SNAPSHOTS").is_some() {
        std::fs::write(&path, serde_json::to_string_pretty(&want).unwrap() + "\n").unwrap();
    }
    assert_eq!(
        schema(),
        want,
        "docs/result.schema.json is stale: run UPDATE_SNAPSHOTS=1 cargo test --features system-tests --test engine suites::the_schema"
    );
}
