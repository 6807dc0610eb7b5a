//! The SNIA PTS suites (throughput, xsr, hir, dirth) end to end at quick scale through the real
//! binary, on a file in /dev/shm and on a loop device over one: each result document is
//! checked against its JSON Schema, and each test's figures against the engine's raw
//! numbers in the same document (relations, never speeds). Then `driveprobe report`
//! draws their charts, checked in headless Chromium.

use crate::common;

use std::path::Path;
use std::process::Command;
use std::sync::Mutex;
use std::time::Duration;

use serde_json::Value;

/// The suites are CPU-heavy: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

const BIN: &str = env!("CARGO_BIN_EXE_driveprobe");

fn schema() -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/result.schema.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Runs suite `name` on `target` at quick scale (150 ms rounds); the document.
fn run_suite(name: &str, target: &str, extra: &[&str]) -> Value {
    let out = Command::new(BIN)
        .args(["bench", target, "--suite", name, "--scale=quick"])
        .args(["--round-time=150ms", "--output-format=json"])
        .args(extra)
        .output()
        .unwrap();
    common::assert_ok(&out, &format!("suite {name} on {target}"));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let validator = jsonschema::validator_for(&schema()).unwrap();
    let errors: Vec<String> = validator
        .iter_errors(&doc)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(errors.is_empty(), "suite {name}: {errors:#?}");
    assert_eq!(doc["suite"], name);
    assert_eq!(doc["complete"], true, "{doc}");
    doc
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

fn close(a: f64, b: f64, what: &str) {
    assert!(
        (a - b).abs() <= 1e-6 * a.abs().max(b.abs()).max(1.0),
        "{what}: {a} vs {b}"
    );
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len() as f64
}

fn kinds(doc: &Value) -> Vec<String> {
    doc["phases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| match p["kind"].as_str().unwrap() {
            "pts" => format!("pts:{}", p["test"].as_str().unwrap()),
            k => k.to_string(),
        })
        .collect()
}

fn pts<'a>(doc: &'a Value, test: &str) -> Vec<&'a Value> {
    doc["phases"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["kind"] == "pts" && p["test"] == test)
        .collect()
}

/// A round's bandwidth is its IOPS x the block size, in the direction it ran; the other
/// direction did nothing. Returns the round's I/Os.
///
/// A 150 ms round can pass with no I/O completed when the host gives the worker (or a
/// loop device's kernel thread) no CPU for that long, as beside CPU-bound work on two
/// cores: such a round's time is then in flight or idle in its own figures, never lost.
/// Whether the run did I/O at all is its caller's check, over every round.
fn one_direction(r: &Value, dir: &str, bs: f64, what: &str) -> u64 {
    let other = if dir == "read" { "write" } else { "read" };
    assert_eq!(r[other]["ops"], 0, "{what}: {other}s in a {dir} run");
    let ops = r[dir]["ops"].as_u64().unwrap();
    if ops == 0 {
        let accounted = f(&r["in_flight_seconds"])
            + f(&r["slot_idle_seconds"])
            + f(&r["slot_uncounted_seconds"]);
        assert!(
            accounted > 0.0,
            "{what}: no {dir}s, and none of the round's time in flight or idle: {r}"
        );
    }
    close(
        f(&r[dir]["bw_bytes"]),
        f(&r[dir]["iops"]) * bs,
        &format!("{what}: bandwidth = IOPS x {bs}"),
    );
    ops
}

fn check_throughput(doc: &Value) {
    assert_eq!(
        kinds(doc),
        [
            "purge",
            "precondition",
            "pts:throughput",
            "purge",
            "precondition",
            "pts:throughput"
        ]
    );
    for (t, bs, name) in [
        (pts(doc, "throughput")[0], 1048576.0, "1m"),
        (pts(doc, "throughput")[1], 131072.0, "128k"),
    ] {
        assert_eq!(t["block_size"], name);
        assert_eq!(t["write_workload"]["rw"], "write");
        assert_eq!(t["read_workload"]["rw"], "read");
        let rounds = t["rounds"].as_array().unwrap();
        let s = &t["steady"];
        let window = s["window_rounds"].as_u64().unwrap() as usize;
        assert!(
            rounds.len() >= window.min(10),
            "{name}: {} rounds",
            rounds.len()
        );
        assert!(rounds.len() <= s["max_rounds"].as_u64().unwrap() as usize);
        let (mut writes, mut reads) = (0, 0);
        for (k, r) in rounds.iter().enumerate() {
            assert_eq!(r["index"], k);
            writes += one_direction(&r["write"], "write", bs, name);
            reads += one_direction(&r["read"], "read", bs, name);
        }
        assert!(
            writes > 0 && reads > 0,
            "{name}: {writes} writes, {reads} reads"
        );
        if s["attained"] == true {
            assert_eq!(
                s["steady_round"].as_u64().unwrap() as usize + 1,
                rounds.len()
            );
            assert!(f(&s["window_range_ratio"]) <= f(&s["max_range_ratio"]));
            assert!(f(&s["window_slope_excursion_ratio"]) <= f(&s["max_slope_excursion_ratio"]));
        } else {
            assert_eq!(rounds.len(), s["max_rounds"].as_u64().unwrap() as usize);
        }
        // The figures are the means of the measurement window's rounds.
        let w = &rounds[rounds.len() - window.min(rounds.len())..];
        let wr: Vec<f64> = w
            .iter()
            .map(|r| f(&r["write"]["write"]["bw_bytes"]))
            .collect();
        let rd: Vec<f64> = w
            .iter()
            .map(|r| f(&r["read"]["read"]["bw_bytes"]))
            .collect();
        close(f(&t["write_bytes_per_second"]), mean(&wr), "write MB/s");
        close(f(&t["read_bytes_per_second"]), mean(&rd), "read MB/s");
        let wi: Vec<f64> = w.iter().map(|r| f(&r["write"]["iops"])).collect();
        close(f(&s["window_mean_iops"]), mean(&wi), "window IOPS");
    }
}

fn check_xsr(doc: &Value) {
    assert_eq!(kinds(doc), ["purge", "pts:xsr"]);
    let x = pts(doc, "xsr")[0];
    let segs = x["segments"].as_array().unwrap();
    let names: Vec<&str> = segs
        .iter()
        .map(|s| s["workload"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["128k-seqwrite", "8k-randwrite", "128k-seqwrite"]);
    let tol = f(&x["settle_tolerance_ratio"]);
    let window = x["window_rounds"].as_u64().unwrap() as usize;
    let mut prev_start = -1.0;
    for (s, (want, bs)) in segs.iter().zip([(8, 131072.0), (6, 8192.0), (8, 131072.0)]) {
        let rounds = s["rounds"].as_array().unwrap();
        // A last interval cut short is dropped: all the promised rounds, or one fewer.
        assert!(
            rounds.len() == want || rounds.len() + 1 == want,
            "{} rounds, {want} promised",
            rounds.len()
        );
        // Access groups follow each other, each after the last ended.
        let start = f(&s["start_seconds"]);
        assert!(start > prev_start);
        prev_start = start + f(&rounds.last().unwrap()["end_seconds"]);
        let iops: Vec<f64> = rounds.iter().map(|r| f(&r["iops"])).collect();
        let mut writes = 0;
        for r in rounds {
            writes += one_direction(r, "write", bs, "xsr");
        }
        assert!(writes > 0, "xsr: no writes in {} rounds", rounds.len());
        let w = &rounds[rounds.len() - window.min(rounds.len())..];
        let wi: Vec<f64> = w.iter().map(|r| f(&r["iops"])).collect();
        let wb: Vec<f64> = w.iter().map(|r| f(&r["write"]["bw_bytes"])).collect();
        let m = f(&s["window_iops"]);
        close(m, mean(&wi), "window IOPS");
        close(f(&s["window_bytes_per_second"]), mean(&wb), "window MB/s");
        match s["settled_round"].as_u64() {
            Some(k) => {
                let k = k as usize;
                assert!(iops[k..].iter().all(|v| (v - m).abs() <= tol * m));
                if k > 0 {
                    assert!((iops[k - 1] - m).abs() > tol * m);
                    close(
                        f(&s["recovery_seconds"]),
                        f(&rounds[k - 1]["end_seconds"]),
                        "recovery time",
                    );
                } else {
                    assert_eq!(f(&s["recovery_seconds"]), 0.0);
                }
            }
            None => {
                assert!((iops.last().unwrap() - m).abs() > tol * m);
                assert!(s["recovery_seconds"].is_null());
            }
        }
    }
}

fn check_hir(doc: &Value) {
    assert_eq!(
        kinds(doc),
        ["purge", "precondition", "steady_state", "pts:hir"]
    );
    let h = pts(doc, "hir")[0];
    let burst = f(&h["burst_seconds"]);
    let per = h["bursts_per_state"].as_u64().unwrap() as usize;
    let states = h["states"].as_array().unwrap();
    let waits: Vec<f64> = states.iter().map(|s| f(&s["wait_seconds"])).collect();
    let mut want = vec![0.0];
    for k in [1.0, 2.0, 3.0, 5.0, 10.0] {
        want.extend([burst * k, 0.0]);
    }
    assert_eq!(waits.len(), want.len());
    for (a, b) in waits.iter().zip(&want) {
        close(*a, *b, "wait");
    }
    close(
        f(&h["baseline_iops"]),
        f(&states[0]["mean_iops"]),
        "baseline",
    );
    let mut last_start = -1.0;
    let mut baseline = None;
    for s in states {
        let bursts = s["bursts"].as_array().unwrap();
        let starts: Vec<f64> = s["burst_starts"]
            .as_array()
            .unwrap()
            .iter()
            .map(f)
            .collect();
        assert_eq!(bursts.len(), per);
        assert_eq!(starts.len(), per);
        let wait = f(&s["wait_seconds"]);
        let mut writes = 0;
        for (k, b) in bursts.iter().enumerate() {
            writes += one_direction(b, "write", 4096.0, "hir burst");
            // A burst is one engine run of the burst's length.
            assert!(f(&b["end_seconds"]) >= burst * 0.999, "{b}");
            // Each burst starts after the one before it ran and the idle period passed.
            assert!(starts[k] > last_start);
            if k > 0 {
                assert!(
                    starts[k] - starts[k - 1] >= burst + wait,
                    "bursts {} s apart, burst {burst} s + idle {wait} s",
                    starts[k] - starts[k - 1]
                );
            }
            last_start = starts[k];
        }
        assert!(writes > 0, "hir: no writes in {} bursts", bursts.len());
        let iops: Vec<f64> = bursts.iter().map(|b| f(&b["iops"])).collect();
        close(f(&s["mean_iops"]), mean(&iops), "state mean");
        if wait == 0.0 {
            assert!(s["recovery_ratio"].is_null());
            baseline = Some(mean(&iops));
        } else {
            close(
                f(&s["recovery_ratio"]),
                mean(&iops) / baseline.unwrap(),
                "recovery ratio",
            );
        }
    }
}

fn check_dirth(doc: &Value) {
    assert_eq!(kinds(doc), ["purge", "precondition", "pts:dirth"]);
    let d = pts(doc, "dirth")[0];
    let points = d["points"].as_array().unwrap();
    // The grid runs until its tracked point is steady (the rule's window of 5 on its IOPS),
    // or the quick scale's limit of 10 runs.
    let runs = d["grid_rounds"].as_u64().unwrap() as usize;
    let tracked_iops: Vec<f64> = d["tracked_iops"]
        .as_array()
        .unwrap()
        .iter()
        .map(f)
        .collect();
    assert_eq!(tracked_iops.len(), runs);
    let st = &d["steady"];
    assert_eq!(st["window_rounds"], 5);
    assert_eq!(st["max_rounds"], 10);
    match st["steady_round"].as_u64() {
        Some(r) => {
            assert_eq!(st["attained"], true);
            assert!(
                runs >= 5 && r as usize == runs - 1,
                "{st} after {runs} runs"
            );
            assert!(f(&st["window_range_ratio"]) <= 0.2, "{st}");
            assert!(f(&st["window_slope_excursion_ratio"]) <= 0.1, "{st}");
        }
        None => {
            assert_eq!(st["attained"], false);
            assert_eq!(
                runs, 10,
                "stopped before the limit without steady state: {st}"
            );
        }
    }
    // Each point is its average over the window; the tracked point's is the window's mean
    // of the tracked series, as the rule saw it.
    let window = &tracked_iops[runs - runs.min(5)..];
    let k = d["tracked_point"].as_u64().unwrap() as usize;
    close(f(&st["window_mean_iops"]), mean(window), "window mean");
    close(
        f(&points[k]["round"]["iops"]),
        mean(window),
        "the tracked point's IOPS",
    );
    let grid: Vec<(u64, u64)> = points
        .iter()
        .map(|p| (p["workers"].as_u64().unwrap(), p["depth"].as_u64().unwrap()))
        .collect();
    let mut want = Vec::new();
    for t in [1, 2, 4] {
        for q in [1, 2, 4, 8, 16] {
            want.push((t, q));
        }
    }
    assert_eq!(grid, want, "threads-major grid");
    let iops: Vec<f64> = points.iter().map(|p| f(&p["round"]["iops"])).collect();
    for p in points {
        let r = f(&p["round"]["read"]["ops"]);
        let w = f(&p["round"]["write"]["ops"]);
        assert!(
            (r / (r + w) - 0.65).abs() < 0.05,
            "read share {}",
            r / (r + w)
        );
    }
    let at = |k: &str| d[k].as_u64().unwrap() as usize;
    assert_eq!(at("min_point"), 0, "1T1Q is the lowest demand");
    let max = at("max_point");
    assert!(iops.iter().all(|&v| v <= iops[max]));
    let mid = at("mid_point");
    let half = (iops[0] + iops[max]) / 2.0;
    assert!(iops
        .iter()
        .all(|&v| (iops[mid] - half).abs() <= (v - half).abs()));
    // The knee from the document's own points.
    let mut order: Vec<usize> = (0..points.len()).collect();
    order.sort_by_key(|&k| (grid[k].0 * grid[k].1, grid[k].0));
    let curve: Vec<(f64, f64)> = order
        .iter()
        .map(|&k| (iops[k], f(&points[k]["round"]["lat_mean_ns"])))
        .collect();
    let knee = driveprobe::protocol::pts::knee(&curve).map(|k| order[k]);
    assert_eq!(d["knee_point"].as_u64().map(|k| k as usize), knee);
    // A histogram run at each chosen point: its counts are its I/Os, and its maximum
    // latency lies in its highest bin with a count.
    let hs = d["histograms"].as_array().unwrap();
    let edges = driveprobe::protocol::pts::histogram_edges();
    for (h, (name, k)) in hs.iter().zip([("min", 0), ("mid", mid), ("max", max)]) {
        assert_eq!(h["point"], name);
        assert_eq!(
            (h["workers"].as_u64().unwrap(), h["depth"].as_u64().unwrap()),
            grid[k]
        );
        let upper: Vec<u64> = h["upper_ns"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap())
            .collect();
        assert_eq!(upper, edges);
        let counts: Vec<u64> = h["counts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap())
            .collect();
        assert_eq!(counts.len(), edges.len() + 1);
        let r = &h["round"];
        let ops = r["read"]["ops"].as_u64().unwrap() + r["write"]["ops"].as_u64().unwrap();
        assert!(ops > 0);
        assert_eq!(counts.iter().sum::<u64>(), ops, "{name}: counts = I/Os");
        let top = counts.iter().rposition(|&c| c > 0).unwrap();
        let max_ns = r["lat_max_ns"].as_u64().unwrap() as f64;
        if top < edges.len() {
            assert!(
                edges[top] as f64 >= max_ns,
                "{name}: max {max_ns} above bin {top}"
            );
        }
        if top > 0 {
            assert!(
                edges[top - 1] as f64 <= max_ns * 1.001,
                "{name}: max {max_ns} below bin {top}"
            );
        }
    }
}

struct Scratch(String);
impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn on_file(name: &str) -> Value {
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let f = Scratch(format!(
        "/dev/shm/dp-test-pts-{}-{name}",
        std::process::id()
    ));
    run_suite(name, &f.0, &["--size=64m"])
}

fn on_loop(name: &str) -> Value {
    common::need_root();
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let dir = common::shm_dir("dp-test-pts-loop");
    let img = dir.path().join("disk.img");
    std::fs::File::create(&img)
        .unwrap()
        .set_len(64 << 20)
        .unwrap();
    let lo = common::Loop::attach(&img, &[]);
    let serial = common::loop_serial(&img);
    let doc = run_suite(
        name,
        lo.s(),
        &["--allow-destructive", "--expect-serial", &serial],
    );
    drop(lo);
    doc
}

#[test]
fn throughput_on_a_tmpfs_file_and_a_loop_device() {
    check_throughput(&on_file("throughput"));
    check_throughput(&on_loop("throughput"));
}

#[test]
fn xsr_on_a_tmpfs_file_and_a_loop_device() {
    check_xsr(&on_file("xsr"));
    check_xsr(&on_loop("xsr"));
}

#[test]
fn hir_on_a_tmpfs_file_and_a_loop_device() {
    check_hir(&on_file("hir"));
    check_hir(&on_loop("hir"));
}

#[test]
fn dirth_on_a_tmpfs_file_and_a_loop_device() {
    check_dirth(&on_file("dirth"));
    check_dirth(&on_loop("dirth"));
}

#[test]
fn report_draws_the_pts_charts_in_chromium() {
    let dir = tempfile::tempdir().unwrap();
    let mut files = Vec::new();
    let mut dirth = Value::Null;
    for name in ["throughput", "xsr", "hir", "dirth"] {
        let doc = on_file(name);
        let p = dir.path().join(format!("{name}.json"));
        std::fs::write(&p, serde_json::to_vec(&doc).unwrap()).unwrap();
        files.push(p);
        if name == "dirth" {
            dirth = doc;
        }
    }
    let page = dir.path().join("pts.html");
    let out = Command::new(BIN)
        .arg("report")
        .args(&files)
        .arg("-o")
        .arg(&page)
        .output()
        .unwrap();
    common::assert_ok(&out, "driveprobe report");
    let html = std::fs::read_to_string(&page).unwrap();
    let ids = [
        "chart-pts-throughput-1m-write",
        "chart-pts-throughput-1m-read",
        "chart-pts-throughput-128k-write",
        "chart-pts-throughput-128k-read",
        "chart-pts-xsr-bw",
        "chart-pts-xsr-iops",
        "chart-pts-hir-bursts",
        "chart-pts-hir-recovery",
        "chart-pts-dirth-variation",
        "chart-pts-dirth-intensity",
        "chart-pts-dirth-histogram-min",
        "chart-pts-dirth-histogram-mid",
        "chart-pts-dirth-histogram-max",
    ];
    for id in ids {
        assert!(html.contains(&format!(r#"id="{id}""#)), "no chart {id}");
    }
    // The grid's runs and its tracked point, as the document has them.
    let d = pts(&dirth, "dirth")[0];
    let runs = d["grid_rounds"].as_u64().unwrap();
    let tracked = &d["points"][d["tracked_point"].as_u64().unwrap() as usize];
    let line = format!(
        "{runs} {} of the grid; tracked point {} x {}, ",
        if runs == 1 { "run" } else { "runs" },
        tracked["workers"],
        tracked["depth"]
    );
    assert!(html.contains(&line), "no '{line}' in the page");
    let url = format!("file://{}", page.display());
    let profile = tempfile::tempdir().unwrap();
    let dom = common::chromium(
        profile.path(),
        &["--dump-dom"],
        &url,
        Duration::from_secs(120),
    );
    common::assert_ok(&dom, "chromium --dump-dom");
    let dom = String::from_utf8_lossy(&dom.stdout);
    for id in ids {
        assert!(
            dom.contains(&format!(r#"id="{id}""#)),
            "chart {id} not in the DOM"
        );
    }
    // A marker per round: the DOM holds as many as the page.
    assert_eq!(
        dom.matches(r#"<circle class="pt"#).count(),
        html.matches(r#"<circle class="pt"#).count()
    );
    assert!(html.matches(r#"<circle class="pt"#).count() > 40);
    // The sections' text: steady state and recovery.
    assert!(html.contains("Throughput: sequential 1m"));
    assert!(html.contains("Cross-stimulus recovery"));
    assert!(html.contains("Host idle recovery"));
    assert!(html.contains("Demand intensity / response time histogram"));
}
