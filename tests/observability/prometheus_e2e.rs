//! Issues 6 and 8's proof, end to end: the real daemon on three drives, a real Prometheus
//! (the Debian package) scraping it every second with the project's rule file, then
//!
//! - every panel query of every dashboard in `grafana/` and every recording rule of
//!   `config/prometheus/driveprobe.rules.yml` run through Prometheus's `/api/v1/query`:
//!   each must evaluate, and each must return data unless it is in [`MAY_BE_EMPTY`] with
//!   its reason (the recording rules are read from the file by a small YAML reader, and
//!   checked against what Prometheus itself loaded: same names, same results, all healthy);
//! - the alerts: none pending or firing, but DriveprobeRunRegression (latency) and
//!   DriveprobeAppRegression (oltp) each exactly when the suite's median point fell by the
//!   threshold between its two runs, as the status page showed them;
//! - the rules' previous-run latches ([`LATCHES`]) hold the first run's IOPS (latency) and
//!   TPS (oltp), their ratios are the second run's over them, and the medians theirs;
//! - the status page's JSON (`/api/v1/drives`) against Prometheus for one drive: counters
//!   within the few seconds between the two samplings, the window quantiles among the
//!   values the status page showed, and the gauges that do not move (the last runs' points,
//!   the application points of the last oltp and kv runs among them) exactly;
//! - issue 18's join: a real node_exporter (Debian `prometheus-node-exporter`) on loopback
//!   is scraped too, so the rules that join its `node_disk_io_time_seconds_total` through
//!   `driveprobe_drive_info`'s `device` label return data; the test
//!   `node_exporter_busy_share_joins_the_drive_through_its_device` checks that join on its
//!   own, sample by sample;
//! - the application runs leave nothing: no MariaDB, sysbench or db_bench naming the
//!   drive's directory, no datadir or database in it, once the runs passed and again
//!   after the daemon stopped.
//!
//! The drives (root: loop devices and a mount, like the other loop tests):
//! - `a`: a file target on ext4 on a loop device, with a rating, a read canary, a verified
//!   write canary and the quick-scale runs of [`SCHEDULES`]: `latency` twice, `oltp`
//!   twice (sysbench on a private MariaDB) and `kv` once (RocksDB's db_bench), both with
//!   their databases in the file target's directory on that ext4, one after the other (a
//!   state file in which every schedule was first seen long ago, a cron time in the past);
//!   health from `smartctl`: a stand-in on the daemon's PATH prints an NVMe drive's JSON;
//! - `b`: the raw loop device, named by its serial, read canary only; health: a SATA hard
//!   disk's smartctl JSON (the ATA sector counters);
//! - `c`: a file target on tmpfs (no disk under it, so no health), read canary only.

use crate::common;
use crate::dashboards;
use crate::prometheus;

// tests/common/prometheus.rs reaches the harness's HTTP client as `super::daemon`, as it
// would from inside `common`; this makes the same path resolve at this crate's root.
use common::daemon;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use daemon::{file_drive, Daemon};
use prometheus::{Prometheus, QueryResult};
use serde_json::Value;

/// The scrape job (the rules find the daemon by a job name containing "driveprobe").
const JOB: &str = "driveprobe";
const RULES: &str = "config/prometheus/driveprobe.rules.yml";
/// The scrape job of node_exporter (any name: the rules join it by host and device).
const NODE_JOB: &str = "node";
/// Due since January 1st: with the schedule first seen long ago, the run starts at once.
const DUE_LONG_AGO: &str = "0 0 1 1 *";
/// The drive that has everything: health, a rating, a writing probe and the last run.
const FULL: &str = "a";
/// The canary rate of every probe (I/Os per second).
const RATE_IOPS: f64 = 100.0;
/// The scheduled runs, all on drive a at quick scale, as (schedule, suite). They run in
/// this order (the scheduler takes due schedules in config order, one run per drive at a
/// time). Two runs of a suite give the previous-run latch its data: `latency` for the
/// run rules, `oltp` (the cheaper application suite, about 13 s a run here against 18 s
/// for kv) for the application ones; `kv` once gives its db_bench phases' series.
const SCHEDULES: &[(&str, &str)] = &[
    ("s", "latency"),
    ("s2", "latency"),
    ("o", "oltp"),
    ("o2", "oltp"),
    ("k", "kv"),
];

/// A query that may rightly return no series here. It must still evaluate without error.
struct MayBeEmpty {
    /// `rules`, or the dashboard's name.
    source: &'static str,
    /// The recording rule's name, or the panel's title.
    name: &'static str,
    reason: &'static str,
}

/// Every query allowed to be empty, with why. Anything else that returns nothing fails.
const MAY_BE_EMPTY: &[MayBeEmpty] = &[
    MayBeEmpty {
        source: "driveprobe-fleet",
        name: "driveprobe alerts firing",
        reason: "ALERTS{alertstate=\"firing\"}: every alert has a `for:` of a minute or more, \
                 longer than this test; pending alerts are checked below, and promtool test \
                 rules proves each alert fires",
    },
    MayBeEmpty {
        source: "driveprobe-drive",
        name: "Write amplification",
        reason: "needs the drive's media writes (the OCP C0h log), which only the NVMe ioctl \
                 path reads; smartctl's JSON has no such field, so no drive here has it",
    },
];

// ---------------------------------------------------------------------------------------
// The test
// ---------------------------------------------------------------------------------------

#[test]
fn every_dashboard_query_and_recording_rule_returns_data_and_matches_the_status_page() {
    common::need_root();
    let t0 = Instant::now();
    prometheus::binary(); // fails at once, saying "run scripts/test", when it is missing
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let rules_path = repo.join(RULES);
    let rules_text = std::fs::read_to_string(&rules_path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", rules_path.display()));
    let rules = parse_rules(&rules_text)
        .unwrap_or_else(|e| panic!("{}: cannot read the rules: {e}", rules_path.display()));
    let recording: Vec<&RuleDef> = rules.iter().filter(|r| r.record.is_some()).collect();
    assert!(!recording.is_empty(), "{RULES} has no recording rules");
    let panels = dashboards::panel_queries(repo);
    assert!(!panels.is_empty(), "the dashboards have no panel queries");

    let mut rig = Rig::start();
    // node_exporter on the same host, for the rules that join its disk statistics.
    let node = prometheus::NodeExporter::start();
    let prom = Prometheus::start_jobs(
        &[(JOB, &rig.daemon().addr), (NODE_JOB, &node.addr)],
        &[&rules_path],
    );
    println!(
        "daemon at {}, Prometheus at {} ({:.1?})",
        rig.daemon().addr,
        prom.addr,
        t0.elapsed()
    );

    // Data, the run finished, its results scraped, the canary back, a few more scrapes.
    let ready = Duration::from_secs(45);
    prom.wait_for(
        "Prometheus scraping the daemon",
        &format!("up{{job=\"{JOB}\"}} == 1"),
        ready,
    );
    prom.wait_for(
        "canary I/O in Prometheus",
        &format!("driveprobe_probe_ops_total{{job=\"{JOB}\"}} > 0"),
        ready,
    );
    let runs = rig.wait_runs_passed(Duration::from_secs(300));
    println!(
        "the scheduled runs {:?} passed ({:.1?})",
        runs.ids,
        t0.elapsed()
    );
    // Each application run stopped what it started: no MariaDB, sysbench or db_bench in
    // the drive's directory, and no datadir or database left there.
    rig.nothing_left_of_the_app_runs();
    let (first_latency, first_oltp) = (&runs.first["latency"], &runs.first["oltp"]);
    let started = |run: &Value| run["started_unix"].as_f64().unwrap_or(0.0);
    for (what, expr) in [
        (
            "the run's results",
            format!("driveprobe_run_iops{{job=\"{JOB}\", drive=\"{FULL}\", suite=\"latency\"}}"),
        ),
        (
            "the second run's results",
            format!(
                "driveprobe_run_last_start_timestamp_seconds{{job=\"{JOB}\", drive=\"{FULL}\", suite=\"latency\"}} > {}",
                started(first_latency)
            ),
        ),
        (
            "the IOPS of the run before the last (a recording rule's latch)",
            format!("driveprobe:run_iops:previous_run{{job=\"{JOB}\", drive=\"{FULL}\"}}"),
        ),
        (
            "the second oltp run's results",
            format!(
                "driveprobe_run_last_start_timestamp_seconds{{job=\"{JOB}\", drive=\"{FULL}\", suite=\"oltp\"}} > {}",
                started(first_oltp)
            ),
        ),
        (
            "the TPS of the oltp run before the last (the application latch)",
            format!(
                "driveprobe:app_tps:previous_run{{job=\"{JOB}\", drive=\"{FULL}\", suite=\"oltp\"}}"
            ),
        ),
        (
            "the kv run's results",
            format!(
                "driveprobe_app_transactions_per_second{{job=\"{JOB}\", drive=\"{FULL}\", suite=\"kv\"}}"
            ),
        ),
        (
            "the canary of drive a running again",
            format!("driveprobe_probe_running{{job=\"{JOB}\", drive=\"{FULL}\"}} == 1"),
        ),
        (
            "the canary window of drive a again",
            format!(
                "driveprobe_probe_latency_quantile_seconds{{job=\"{JOB}\", drive=\"{FULL}\", probe=\"wr\", op=\"write\"}}"
            ),
        ),
        (
            "NVMe health (drive a)",
            format!(
                "driveprobe_health_temperature_warning_celsius{{job=\"{JOB}\", drive=\"{FULL}\"}}"
            ),
        ),
        (
            "ATA health (drive b)",
            format!("driveprobe_health_pending_sectors{{job=\"{JOB}\", drive=\"b\"}}"),
        ),
    ] {
        prom.wait_for(what, &expr, ready);
    }
    std::thread::sleep(Duration::from_secs(3));
    let rules_api = prom.wait_rules_evaluated(Duration::from_secs(20));
    println!("data in, rules evaluated ({:.1?})", t0.elapsed());

    let mut failures = Vec::new();
    check_rules_loaded(&prom, &recording, &rules, &rules_api, &mut failures);
    let t_queries = Instant::now();
    run_every_query(&prom, &recording, &panels, &mut failures);
    println!(
        "{} queries in {:.1?} ({:.1?})",
        recording.len() + panels.len(),
        t_queries.elapsed(),
        t0.elapsed()
    );
    variables_list_what_ran(&prom, repo, &mut failures);
    alerts_match_the_drives(rig.daemon(), &prom, &runs.first, &mut failures);
    for latch in LATCHES {
        previous_run_latch_holds_the_first_run(
            &prom,
            latch,
            &runs.first[latch.suite],
            &mut failures,
        );
    }
    status_page_matches_prometheus(rig.daemon(), &prom, &mut failures);
    println!("status page against Prometheus ({:.1?})", t0.elapsed());

    // (On a panic, Rig and Prometheus print their logs as they drop.)
    assert!(
        failures.is_empty(),
        "{} problem(s):\n\n{}\n",
        failures.len(),
        failures.join("\n\n")
    );
    drop(prom);
    let (st, _) = rig
        .daemon
        .take()
        .expect("daemon")
        .terminate(Duration::from_secs(10));
    assert!(
        st.success(),
        "the daemon's exit status after SIGTERM: {st:?}"
    );
    rig.nothing_left_of_the_app_runs();
    println!("done in {:.1?}", t0.elapsed());
}

/// Issue 18's join, on its own: the daemon on a raw loop device over /dev/shm (named by its
/// serial, a read canary), a real node_exporter and a real Prometheus on loopback with the
/// shipped rules. `driveprobe_drive_info` names the loop device as node_exporter does; the
/// recorded busy share of the drive's disk carries the drive, that device and the host, and
/// its every sample is what Prometheus computes from node_exporter's own counter for that
/// device at the sample's time; the canary's p99 is recorded beside it with the same
/// device.
#[test]
fn node_exporter_busy_share_joins_the_drive_through_its_device() {
    common::need_root();
    let t0 = Instant::now();
    prometheus::binary();
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let rules_path = repo.join(RULES);
    let dir = common::shm_dir("dp-e2e-join-");
    let d = dir.path();
    let img = d.join("j.img");
    sparse_file(&img, 64 << 20);
    let lp = common::Loop::attach(&img, &[]);
    let kname = lp
        .path()
        .file_name()
        .and_then(|n| n.to_str())
        .expect("loop device name")
        .to_string();
    let cfg = d.join("driveprobe.toml");
    std::fs::write(
        &cfg,
        format!(
            "state_dir = \"{state}\"\ndiscovery.enabled = false\nhealth_interval = \"2s\"\n\n\
             [[drive]]\nname = \"j\"\nserial = \"{serial}\"\npath = \"{dev}\"\n\n\
             [[probe]]\nname = \"rd\"\ndrives = [\"j\"]\nwindow = \"5s\"\n\
             workload = {{ rate_iops = 200 }}\n",
            state = d.join("state").display(),
            serial = common::loop_serial(&img),
            dev = lp.s(),
        ),
    )
    .unwrap();
    let daemon = Daemon::start(&cfg, &[]);
    let node = prometheus::NodeExporter::start();
    let prom = Prometheus::start_jobs(
        &[(JOB, &daemon.addr), (NODE_JOB, &node.addr)],
        &[&rules_path],
    );
    let limit = Duration::from_secs(60);

    // The drive's identity names its disk as node_exporter does: no /dev/, no partition.
    let info = prom.wait_for(
        "drive_info with its device",
        &format!("driveprobe_drive_info{{job=\"{JOB}\", drive=\"j\", device=\"{kname}\"}}"),
        limit,
    );
    assert_eq!(info.series.len(), 1, "{info:?}");
    assert_eq!(info.series[0].labels["path"], lp.s(), "{info:?}");
    assert_eq!(
        info.series[0].labels["serial"],
        common::loop_serial(&img),
        "{info:?}"
    );
    prom.wait_for(
        "node_exporter's counter for the drive's device",
        &format!("node_disk_io_time_seconds_total{{job=\"{NODE_JOB}\", device=\"{kname}\"}}"),
        limit,
    );

    // The busy share, once the canary has kept the disk busy: one series with the drive's
    // labels, its device and the host both targets share.
    let busy_sel = "driveprobe:drive_busy:ratio_rate5m{drive=\"j\"}";
    let busy = prom.wait_for(
        "the busy share of drive j's disk",
        &format!("{busy_sel} > 0"),
        limit,
    );
    assert_eq!(busy.series.len(), 1, "{busy:?}");
    let l = &busy.series[0].labels;
    for (k, v) in [
        ("job", JOB),
        ("instance", daemon.addr.as_str()),
        ("drive", "j"),
        ("device", kname.as_str()),
        ("host", "127.0.0.1"),
    ] {
        assert_eq!(l.get(k).map(String::as_str), Some(v), "{k}: {l:?}");
    }
    assert!(
        busy.series[0].value > 0.0 && busy.series[0].value <= 1.0,
        "a busy share is a ratio 0-1: {busy:?}"
    );
    let p99 = prom.wait_for(
        "the canary's p99 beside it",
        "driveprobe:probe_latency_p99_seconds:with_device{drive=\"j\"}",
        limit,
    );
    assert_eq!(p99.series.len(), 1, "{p99:?}");
    let l = &p99.series[0].labels;
    for (k, v) in [
        ("drive", "j"),
        ("probe", "rd"),
        ("op", "read"),
        ("device", kname.as_str()),
        ("host", "127.0.0.1"),
    ] {
        assert_eq!(l.get(k).map(String::as_str), Some(v), "{k}: {l:?}");
    }
    assert!(!l.contains_key("quantile"), "{l:?}");

    // Let a few more evaluations land, then check against the sources, at times a few
    // seconds past so that every scrape before them is stored.
    std::thread::sleep(Duration::from_secs(8));
    let node_rate = format!(
        "rate(node_disk_io_time_seconds_total{{job=\"{NODE_JOB}\", device=\"{kname}\"}}[5m])"
    );
    let p99_source = format!(
        "driveprobe_probe_latency_quantile_seconds{{job=\"{JOB}\", drive=\"j\", quantile=\"0.99\"}}"
    );
    // The rule's expression, as the file has it, evaluated by Prometheus: exactly node_exporter's
    // rate for the drive's device, at every time checked.
    let rules_text = std::fs::read_to_string(&rules_path).expect("the rules file");
    let rule = parse_rules(&rules_text)
        .expect("the rules file parses")
        .into_iter()
        .find(|r| r.record.as_deref() == Some("driveprobe:drive_busy:ratio_rate5m"))
        .expect("the rules file records driveprobe:drive_busy:ratio_rate5m");
    let now = now_unix();
    for back in [3.0, 4.5, 6.0] {
        let t = now - back;
        let of = |expr: &str| -> BTreeMap<String, f64> {
            prom.query_at(expr, Some(t))
                .unwrap_or_else(|e| panic!("{expr} at {t}: {e}"))
                .series
                .into_iter()
                .filter(|x| x.labels.get("drive").is_none_or(|d| d == "j"))
                .map(|x| (x.labels.get("device").cloned().unwrap_or_default(), x.value))
                .collect()
        };
        let joined = of(&rule.expr);
        let source = of(&node_rate);
        assert_eq!(joined.len(), 1, "the rule's expression at {t}: {joined:?}");
        assert_eq!(source.len(), 1, "{node_rate} at {t}: {source:?}");
        let (jv, sv) = (joined[&kname], source[&kname]);
        assert!(
            jv > 0.0 && same_f64(jv, sv),
            "at {t}: the rule's expression gives {jv}, node_exporter's rate for {kname} {sv}"
        );
    }
    // The recorded samples: Prometheus's own evaluations of the rule. An evaluation can
    // miss a scrape that started before it but was stored just after it (a later query sees
    // it), so a recorded busy share is node_exporter's rate over the samples stored before
    // it, all of them or all but the newest; and a recorded p99 is one of the source's
    // samples of the few seconds before it.
    recorded_samples_match(&prom, busy_sel, &node_rate, Recorded::Rate5m);
    recorded_samples_match(
        &prom,
        "driveprobe:probe_latency_p99_seconds:with_device{drive=\"j\"}",
        &p99_source,
        Recorded::GaugeSample,
    );
    drop(prom);
    drop(node);
    let (st, _) = daemon.terminate(Duration::from_secs(10));
    assert!(
        st.success(),
        "the daemon's exit status after SIGTERM: {st:?}"
    );
    println!("done in {:.1?}", t0.elapsed());
}

/// How a recorded sample relates to its source series.
enum Recorded {
    /// A 5-minute rate (`source` is `rate(SELECTOR[5m])`): computed from the counter's
    /// samples in the 5 minutes before it, either the rate of all of them (what a query at
    /// that time gives) or of all but the newest; the newest checked one above 0.
    Rate5m,
    /// A gauge: one of the source's own sample values from the 5 s before it.
    GaugeSample,
}

/// Every sample of the recording `recorded` (one series) in the last 20 s but the newest
/// 2 s relates to `source` (one series) as `how` says, and there are at least three.
fn recorded_samples_match(prom: &Prometheus, recorded: &str, source: &str, how: Recorded) {
    let raw = prom
        .samples(&format!("{recorded}[20s]"))
        .unwrap_or_else(|e| panic!("{recorded}: {e}"));
    assert_eq!(raw.len(), 1, "{recorded}: one series expected: {raw:?}");
    let newest = raw[0].1.last().map(|p| p.0).unwrap_or(0.0);
    let checked: Vec<(f64, f64)> = raw[0]
        .1
        .iter()
        .copied()
        .filter(|p| p.0 < newest - 2.0)
        .collect();
    assert!(
        checked.len() >= 3,
        "{recorded}: too few samples to check: {raw:?}"
    );
    // The oldest samples can be from before the canary's first I/Os reached node_exporter's
    // counter (a rate of 0 there is right); the caller saw the recording above 0 well before
    // the newest checked sample, so that one must be.
    let (_, last_checked) = checked[checked.len() - 1];
    if matches!(how, Recorded::Rate5m) {
        assert!(
            last_checked > 0.0,
            "{recorded}: the newest checked sample is {last_checked}: {raw:?}"
        );
    }
    for (t, v) in checked {
        match how {
            Recorded::Rate5m => {
                let q = prom
                    .query_at(source, Some(t))
                    .unwrap_or_else(|e| panic!("{source} at {t}: {e}"));
                assert_eq!(q.series.len(), 1, "{source} at {t}: {q:?}");
                let want = q.series[0].value;
                let selector = source
                    .strip_prefix("rate(")
                    .and_then(|r| r.strip_suffix("[5m])"))
                    .expect("a rate(SELECTOR[5m])");
                let counter = prom
                    .samples(&format!("{selector}[5m] @ {t:.3}"))
                    .unwrap_or_else(|e| panic!("{selector} before {t}: {e}"));
                assert_eq!(counter.len(), 1, "{selector} before {t}: {counter:?}");
                let pts = &counter[0].1;
                let all = extrapolated_rate(pts, t - 300.0, t);
                // The reading of Prometheus's rate() below is checked against Prometheus.
                assert!(
                    all.is_some_and(|a| same_f64(a, want)),
                    "{source} at {t}: Prometheus says {want}, its samples give {all:?}: {pts:?}"
                );
                let but_newest = extrapolated_rate(&pts[..pts.len() - 1], t - 300.0, t);
                assert!(
                    same_f64(v, want) || but_newest.is_some_and(|b| same_f64(v, b)),
                    "{recorded} at {t} is {v}; {source} there is {want}, or {but_newest:?} \
                     without the newest sample"
                );
            }
            Recorded::GaugeSample => {
                let src = prom
                    .samples(&format!("{source}[5s] @ {t:.3}"))
                    .unwrap_or_else(|e| panic!("{source} before {t}: {e}"));
                assert_eq!(src.len(), 1, "{source} before {t}: {src:?}");
                assert!(
                    src[0].1.iter().any(|&(_, s)| same_f64(s, v)),
                    "{recorded} at {t} is {v}, none of {source}'s samples before it: {src:?}"
                );
            }
        }
    }
}

/// Prometheus's `rate()` (2.42, `extrapolatedRate` in promql/functions.go) of the counter
/// samples `pts` (unix seconds, value) selected by a range from `start` to `end`: the
/// increase, counter resets included, extrapolated toward the range's ends (the whole way
/// when within 1.1 average intervals, else half an interval, and never below a counter
/// value of zero), over the range's seconds. `None` with fewer than two samples.
fn extrapolated_rate(pts: &[(f64, f64)], start: f64, end: f64) -> Option<f64> {
    if pts.len() < 2 {
        return None;
    }
    // Prometheus keeps milliseconds as integers: durations from them, as it computes them.
    let ms = |t: f64| (t * 1000.0).round() as i64;
    let secs = |a: f64, b: f64| (ms(a) - ms(b)) as f64 / 1000.0;
    let (first, last) = (pts[0], pts[pts.len() - 1]);
    let mut increase = last.1 - first.1;
    for w in pts.windows(2) {
        if w[1].1 < w[0].1 {
            increase += w[0].1;
        }
    }
    let mut to_start = secs(first.0, start);
    let to_end = secs(end, last.0);
    let sampled = secs(last.0, first.0);
    let average = sampled / (pts.len() - 1) as f64;
    if increase > 0.0 && first.1 >= 0.0 {
        let to_zero = sampled * (first.1 / increase);
        if to_zero < to_start {
            to_start = to_zero;
        }
    }
    let threshold = average * 1.1;
    let mut interval = sampled;
    interval += if to_start < threshold {
        to_start
    } else {
        average / 2.0
    };
    interval += if to_end < threshold {
        to_end
    } else {
        average / 2.0
    };
    Some(increase * (interval / sampled) / secs(end, start))
}

// ---------------------------------------------------------------------------------------
// The drives and the daemon
// ---------------------------------------------------------------------------------------

/// The daemon and what its drives stand on. Fields drop in order: the daemon first, then
/// the mount, the loop devices and the files.
struct Rig {
    daemon: Option<Daemon>,
    /// Drive a's directory (its filesystem's root), where the application runs put their
    /// databases.
    app_dir: PathBuf,
    _mount: common::Mount,
    _loops: Vec<common::Loop>,
    _dir: tempfile::TempDir,
    _tools: tempfile::TempDir,
}

impl Drop for Rig {
    fn drop(&mut self) {
        if let (true, Some(d)) = (std::thread::panicking(), &self.daemon) {
            let log = d.log();
            let lines: Vec<&str> = log.lines().collect();
            eprintln!(
                "----- the daemon's log (last {} of {} lines) -----\n{}\n----- end of the daemon's log -----",
                lines.len().min(80),
                lines.len(),
                lines[lines.len().saturating_sub(80)..].join("\n")
            );
        }
    }
}

impl Rig {
    fn start() -> Rig {
        need_app_programs();
        let dir = tempfile::Builder::new()
            .prefix("dp-e2e-")
            .tempdir_in("/dev/shm")
            .expect("temp dir in /dev/shm");
        let d = dir.path();

        // a: ext4 on a loop device (room for the 32 MiB target and the free space the
        // quick kv run asks for, 232 MiB); b: a raw loop device.
        let a_img = d.join("a.img");
        // Sparse: only what is written takes memory. kv at quick scale asks for 592 MiB
        // free and used 442 MiB at its peak (`KvOptions::space_needed`).
        sparse_file(&a_img, 1 << 30);
        common::run("mkfs.ext4", &["-q", "-F", a_img.to_str().unwrap()]);
        let loop_a = common::Loop::attach(&a_img, &[]);
        let mount = common::Mount::new(loop_a.path(), &d.join("a-fs"));
        let b_img = d.join("b.img");
        sparse_file(&b_img, 16 << 20);
        let loop_b = common::Loop::attach(&b_img, &[]);

        // The smartctl the daemon finds first on its PATH: real smartctl JSON, per device.
        let tools = tempfile::Builder::new()
            .prefix("dp-e2e-tools-")
            .tempdir()
            .expect("temp dir for the smartctl stand-in");
        let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/smartctl");
        let mut nvme: Value = serde_json::from_str(
            &std::fs::read_to_string(fixtures.join("smart-nvme.json")).expect("NVMe fixture"),
        )
        .expect("NVMe fixture parses");
        // The fixture is smartctl 7.1's; 7.2 and later also print the composite temperature
        // thresholds of Identify Controller (WCTEMP, CCTEMP), as here.
        nvme["nvme_composite_temperature_threshold"] =
            serde_json::json!({ "warning": 70, "critical": 80 });
        let nvme_json = tools.path().join("nvme.json");
        std::fs::write(&nvme_json, nvme.to_string()).unwrap();
        let ata_json = fixtures.join("smart-ata.json");
        let script = format!(
            "#!/bin/sh\n# driveprobe runs `smartctl OPTIONS... DEVICE`: the device comes last.\n\
             for arg in \"$@\"; do dev=$arg; done\n\
             case \"$dev\" in\n  {}) exec cat '{}' ;;\n  {}) exec cat '{}' ;;\nesac\n\
             echo \"smartctl stand-in: no data for $dev\" >&2\nexit 2\n",
            loop_a.s(),
            nvme_json.display(),
            loop_b.s(),
            ata_json.display()
        );
        let smartctl = tools.path().join("smartctl");
        std::fs::write(&smartctl, script).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&smartctl, std::fs::Permissions::from_mode(0o755)).unwrap();

        let cfg = d.join("driveprobe.toml");
        let config = format!(
            "state_dir = \"{state}\"\ndiscovery.enabled = false\nhealth_interval = \"2s\"\n\n\
             [wear_budget]\nshare_of_rated_dwpd = 1.0\nunrated_bytes_per_day = \"1TiB\"\nscheduled_unrated_bytes = \"1PiB\"\n\n\
             [[drive]]\nname = \"{FULL}\"\nfile_target = {{ path = \"{a_dat}\", size = \"32MiB\" }}\n\
             rated_tbw_bytes = \"200TB\"\nwarranty_years = 5\nrated_mtbf_hours = 1600000\n\n\
             [[drive]]\nname = \"b\"\nserial = \"{b_serial}\"\npath = \"{b_dev}\"\n\n\
             {c}\
             [[probe]]\nname = \"rd\"\ndrives = [\"*\"]\nwindow = \"10s\"\n\
             workload = {{ rate_iops = {rate} }}\n\n\
             [[probe]]\nname = \"wr\"\ndrives = [\"{FULL}\"]\nwindow = \"10s\"\n\
             workload = {{ read_pct = 50, rate_iops = {rate}, verify = true }}\n\n\
             {schedules}",
            state = d.join("state").display(),
            a_dat = mount.dir().join("a.dat").display(),
            b_serial = common::loop_serial(&b_img),
            b_dev = loop_b.s(),
            c = file_drive("c", &d.join("c.dat"), "16MiB"),
            rate = RATE_IOPS,
            schedules = SCHEDULES
                .iter()
                .map(|(name, suite)| format!(
                    "[[schedule]]\nname = \"{name}\"\ndrives = [\"{FULL}\"]\nsuite = \"{suite}\"\n\
                     scale = \"quick\"\ncron = \"{DUE_LONG_AGO}\"\nmax_duration = \"5m\"\n\
                     wear_budget = \"unlimited\"\n\n"
                ))
                .collect::<String>(),
        );
        std::fs::write(&cfg, &config).unwrap();
        // The schedules were first seen long ago: their past cron time is due now.
        std::fs::create_dir_all(d.join("state")).unwrap();
        let seen: serde_json::Map<String, Value> = SCHEDULES
            .iter()
            .map(|(name, _)| {
                (
                    format!("{name}/{FULL}"),
                    serde_json::json!({ "first_seen": 0 }),
                )
            })
            .collect();
        std::fs::write(
            d.join("state/state.json"),
            serde_json::json!({ "version": 1, "schedules": seen }).to_string(),
        )
        .unwrap();

        let path = format!(
            "{}:{}",
            tools.path().display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let daemon = Daemon::start(&cfg, &[("PATH", &path)]);
        Rig {
            daemon: Some(daemon),
            app_dir: mount.dir().to_path_buf(),
            _mount: mount,
            _loops: vec![loop_a, loop_b],
            _dir: dir,
            _tools: tools,
        }
    }

    fn daemon(&self) -> &Daemon {
        self.daemon.as_ref().expect("the daemon runs")
    }

    /// The runs, newest first (`/api/v1/runs`).
    fn runs(&self) -> Vec<Value> {
        let (code, _, body) = self.daemon().get("/api/v1/runs");
        assert_eq!(code, 200, "/api/v1/runs: {body}");
        let runs: Value = serde_json::from_str(&body).expect("/api/v1/runs is JSON");
        runs.as_array().cloned().unwrap_or_default()
    }

    /// Waits for every scheduled run of [`SCHEDULES`] to pass (one after the other: one
    /// drive runs one thing at a time), and fails at once if one ends any other way.
    /// Returns, for each suite scheduled twice, the status page's summary of its first
    /// run, taken while that was the drive's last run of the suite.
    fn wait_runs_passed(&self, limit: Duration) -> RunsPassed {
        let d = self.daemon();
        let t0 = Instant::now();
        let mut twice: BTreeSet<&str> = BTreeSet::new();
        for (i, (_, suite)) in SCHEDULES.iter().enumerate() {
            if SCHEDULES[..i].iter().any(|(_, s)| s == suite) {
                twice.insert(suite);
            }
        }
        let mut first: BTreeMap<String, Value> = BTreeMap::new();
        loop {
            let runs = self.runs();
            if let Some(r) = runs
                .iter()
                .find(|r| r["status"] != "running" && r["status"] != "passed")
            {
                panic!(
                    "a scheduled run ended {}: {r}\nlog:\n{}",
                    r["status"],
                    d.log()
                );
            }
            let passed: Vec<&Value> = runs.iter().filter(|r| r["status"] == "passed").collect();
            for suite in &twice {
                let of_suite: Vec<&&Value> =
                    passed.iter().filter(|r| r["suite"] == *suite).collect();
                if !first.contains_key(*suite) && of_suite.len() == 1 {
                    let summary = drive_json(d, FULL)["last_runs"][*suite].clone();
                    if summary["id"] == of_suite[0]["id"] {
                        first.insert(suite.to_string(), summary);
                    }
                }
            }
            if passed.len() >= SCHEDULES.len() {
                if let Some(s) = twice.iter().find(|s| !first.contains_key(**s)) {
                    panic!(
                        "the second {s} run finished before the status page showed the first \
                         as the last run (polled every 250 ms): {runs:?}"
                    );
                }
                return RunsPassed {
                    first,
                    ids: passed
                        .iter()
                        .rev()
                        .map(|r| r["id"].as_str().unwrap_or("?").to_string())
                        .collect(),
                };
            }
            assert!(
                t0.elapsed() < limit,
                "the {} scheduled quick runs did not pass within {limit:?}; runs: \
                 {runs:?}\nlog:\n{}",
                SCHEDULES.len(),
                d.log()
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// No process mentions drive a's directory (MariaDB's and sysbench's command lines
    /// name the datadir and its socket, db_bench's its `--db=`), and no datadir or
    /// database is left in it.
    fn nothing_left_of_the_app_runs(&self) {
        common::assert_nothing_left_running(&self.app_dir.to_string_lossy());
        let left: Vec<String> = std::fs::read_dir(&self.app_dir)
            .unwrap_or_else(|e| panic!("cannot list {}: {e}", self.app_dir.display()))
            .flatten()
            .map(|e| e.file_name().to_string_lossy().to_string())
            .filter(|n| n.starts_with("driveprobe-oltp-") || n.starts_with("driveprobe-kv-"))
            .collect();
        assert!(
            left.is_empty(),
            "the application runs left these in {}: {left:?}",
            self.app_dir.display()
        );
    }
}

/// What [`Rig::wait_runs_passed`] saw.
struct RunsPassed {
    /// Per suite scheduled twice: the status page's summary of its first run.
    first: BTreeMap<String, Value>,
    /// Every run that passed, oldest first.
    ids: Vec<String>,
}

/// The programs the application suites run (Debian mariadb-server, sysbench,
/// rocksdb-tools), checked before anything is set up.
fn need_app_programs() {
    let path = std::env::var("PATH").unwrap_or_default();
    let dirs: Vec<&str> = path.split(':').chain(["/usr/sbin", "/usr/bin"]).collect();
    let missing: Vec<String> = [
        ("mariadbd", "mariadb-server"),
        ("mariadb-install-db", "mariadb-server"),
        ("sysbench", "sysbench"),
        ("db_bench", "rocksdb-tools"),
    ]
    .iter()
    .filter(|(p, _)| !dirs.iter().any(|d| Path::new(d).join(p).is_file()))
    .map(|(p, pkg)| format!("{p} (apt-get install {pkg})"))
    .collect();
    assert!(
        missing.is_empty(),
        "the scheduled oltp and kv runs need {}: scripts/test installs them",
        missing.join(", ")
    );
}

fn sparse_file(path: &Path, len: u64) {
    std::fs::File::create(path)
        .and_then(|f| f.set_len(len))
        .unwrap_or_else(|e| panic!("cannot create {}: {e}", path.display()));
}

fn now_unix() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

// ---------------------------------------------------------------------------------------
// Every query
// ---------------------------------------------------------------------------------------

/// One query to run: where it comes from, its name there, the expression.
struct Query<'a> {
    source: &'a str,
    name: &'a str,
    expr: &'a str,
}

fn allowed(source: &str, name: &str) -> Option<&'static MayBeEmpty> {
    MAY_BE_EMPTY
        .iter()
        .find(|m| m.source == source && m.name == name)
}

/// Series count of a result, NaN-only results counting as none (a panel shows nothing).
fn data_count(r: &QueryResult) -> usize {
    r.series.iter().filter(|s| !s.value.is_nan()).count()
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Each dashboard variable (`label_values(SELECTOR, LABEL)`) offers a value for what the
/// test ran: the drive, and for `suite` every suite and application workload, whose
/// panels it filters (a variable read from a metric that only suites publish would leave
/// the application runs out of the list).
fn variables_list_what_ran(prom: &Prometheus, repo: &Path, failures: &mut Vec<String>) {
    let expect: &[(&str, &[&str])] = &[
        ("job", &[JOB]),
        ("drive", &[FULL, "b"]),
        ("suite", &["latency", "oltp", "kv"]),
    ];
    let vars = dashboards::variable_queries(repo);
    for (dash, var, query) in &vars {
        let Some((selector, label)) = query
            .trim()
            .strip_prefix("label_values(")
            .and_then(|q| q.strip_suffix(')'))
            .and_then(|q| q.rsplit_once(','))
        else {
            failures.push(format!(
                "{dash}: variable {var}: not label_values(...): {query}"
            ));
            continue;
        };
        let (selector, label) = (selector.trim(), label.trim());
        let values: BTreeSet<String> = match prom.query(&format!("count by ({label}) ({selector})"))
        {
            Ok(r) => r
                .series
                .iter()
                .filter_map(|s| s.labels.get(label).cloned())
                .collect(),
            Err(e) => {
                failures.push(format!("{dash}: variable {var}: {e}"));
                continue;
            }
        };
        let want = expect
            .iter()
            .find(|(n, _)| n == var)
            .map_or(&[][..], |(_, w)| *w);
        if values.is_empty() {
            failures.push(format!("{dash}: variable {var} offers nothing: {query}"));
        }
        for w in want {
            if !values.contains(*w) {
                failures.push(format!(
                    "{dash}: variable {var} does not offer {w:?} (it offers {values:?}): {query}"
                ));
            }
        }
    }
    for (name, _) in expect {
        if !vars.iter().any(|(_, v, _)| v == name) {
            failures.push(format!("no dashboard has the variable {name} any more"));
        }
    }
}

fn run_every_query(
    prom: &Prometheus,
    recording: &[&RuleDef],
    panels: &[(String, String, String)],
    failures: &mut Vec<String>,
) {
    let mut queries: Vec<Query> = recording
        .iter()
        .map(|r| Query {
            source: "rules",
            name: r.record.as_deref().unwrap(),
            expr: &r.expr,
        })
        .collect();
    queries.extend(panels.iter().map(|(d, t, e)| Query {
        source: d,
        name: t,
        expr: e,
    }));
    for m in MAY_BE_EMPTY {
        if !queries
            .iter()
            .any(|q| q.source == m.source && q.name == m.name)
        {
            failures.push(format!(
                "MAY_BE_EMPTY names {} / {:?}, which is no query any more: remove it",
                m.source, m.name
            ));
        }
    }

    // Everything once; what came back empty again for a few seconds (a rule evaluated a
    // moment later, a scrape that was late), so that only a lasting gap fails.
    let mut results: Vec<Result<QueryResult, String>> =
        queries.iter().map(|q| prom.query(q.expr)).collect();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let pending: Vec<usize> = (0..queries.len())
            .filter(|&i| {
                allowed(queries[i].source, queries[i].name).is_none()
                    && results[i].as_ref().is_ok_and(|r| data_count(r) == 0)
            })
            .collect();
        if pending.is_empty() || Instant::now() > deadline {
            break;
        }
        std::thread::sleep(Duration::from_secs(1));
        for i in pending {
            results[i] = prom.query(queries[i].expr);
        }
    }

    let mut table = String::new();
    let _ = writeln!(
        table,
        "{:<7} {:>6}  {:<17} {:<52} expr",
        "result", "series", "source", "recording rule / panel"
    );
    let mut notes = Vec::new();
    for (q, r) in queries.iter().zip(&results) {
        let allow = allowed(q.source, q.name);
        let (status, count) = match r {
            Err(_) => ("ERROR", String::from("-")),
            Ok(r) => {
                let n = data_count(r);
                let status = match (n, allow) {
                    (0, Some(_)) => "allowed",
                    (0, None) if r.series.is_empty() => "EMPTY",
                    (0, None) => "NaN",
                    _ => "ok",
                };
                (status, n.to_string())
            }
        };
        let _ = writeln!(
            table,
            "{status:<7} {count:>6}  {:<17} {:<52} {}",
            q.source,
            q.name,
            one_line(q.expr)
        );
        let place = if q.source == "rules" {
            format!("recording rule {}", q.name)
        } else {
            format!("dashboard {}, panel {:?}", q.source, q.name)
        };
        match r {
            Err(e) => failures.push(format!(
                "{place}: the query does not evaluate: {e}\n    {}",
                one_line(q.expr)
            )),
            Ok(r) => {
                if !r.warnings.is_empty() {
                    notes.push(format!("{place}: Prometheus warns: {:?}", r.warnings));
                }
                match (data_count(r), allow) {
                    (0, None) if r.series.is_empty() => failures.push(format!(
                        "{place}: no data (and it is not in MAY_BE_EMPTY)\n    {}",
                        one_line(q.expr)
                    )),
                    (0, None) => failures.push(format!(
                        "{place}: only NaN ({} series; and it is not in MAY_BE_EMPTY)\n    {}",
                        r.series.len(),
                        one_line(q.expr)
                    )),
                    (n, Some(m)) if n > 0 => notes.push(format!(
                        "{place}: has data ({n} series) though MAY_BE_EMPTY allows none ({})",
                        m.reason
                    )),
                    _ => {}
                }
            }
        }
    }
    println!("\n{table}");
    println!("allowed to be empty:");
    for m in MAY_BE_EMPTY {
        println!("  {} / {}: {}", m.source, m.name, m.reason);
    }
    for n in notes {
        println!("note: {n}");
    }
    println!();
}

// ---------------------------------------------------------------------------------------
// The rule file against what Prometheus loaded
// ---------------------------------------------------------------------------------------

impl Prometheus {
    /// `/api/v1/rules` once every rule has been evaluated at least once.
    fn wait_rules_evaluated(&self, limit: Duration) -> Value {
        let t0 = Instant::now();
        loop {
            let v = self.api("/api/v1/rules").expect("/api/v1/rules");
            let never: Vec<String> = v["data"]["groups"]
                .as_array()
                .into_iter()
                .flatten()
                .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
                .filter(|r| {
                    r["lastEvaluation"]
                        .as_str()
                        .is_none_or(|t| t.starts_with("0001-"))
                })
                .map(|r| r["name"].as_str().unwrap_or("?").to_string())
                .collect();
            if v["status"] == "success" && never.is_empty() {
                return v;
            }
            assert!(
                t0.elapsed() < limit,
                "rules never evaluated after {limit:?}: {never:?}\n{v}"
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}

/// The rules Prometheus loaded are the rules this test read from the file: the same
/// groups and names, every rule healthy, and each recording rule's expression as read
/// here gives the same result as Prometheus's own parse of it (checks the YAML reader).
fn check_rules_loaded(
    prom: &Prometheus,
    recording: &[&RuleDef],
    all: &[RuleDef],
    api: &Value,
    failures: &mut Vec<String>,
) {
    let mut loaded: BTreeMap<(String, String), (String, String)> = BTreeMap::new();
    for g in api["data"]["groups"].as_array().into_iter().flatten() {
        let group = g["name"].as_str().unwrap_or("").to_string();
        for r in g["rules"].as_array().into_iter().flatten() {
            let name = r["name"].as_str().unwrap_or("").to_string();
            if r["health"] != "ok" {
                failures.push(format!(
                    "rule {name} (group {group}) is unhealthy in Prometheus: {} {}",
                    r["health"], r["lastError"]
                ));
            }
            loaded.insert(
                (group.clone(), name),
                (
                    r["type"].as_str().unwrap_or("").to_string(),
                    r["query"].as_str().unwrap_or("").to_string(),
                ),
            );
        }
    }
    let read: BTreeSet<(String, String)> = all
        .iter()
        .map(|r| {
            (
                r.group.clone(),
                r.record.clone().or_else(|| r.alert.clone()).unwrap(),
            )
        })
        .collect();
    let keys: BTreeSet<(String, String)> = loaded.keys().cloned().collect();
    if read != keys {
        failures.push(format!(
            "the rules read from {RULES} and the rules Prometheus loaded differ:\n  \
             only read here: {:?}\n  only in Prometheus: {:?}",
            read.difference(&keys).collect::<Vec<_>>(),
            keys.difference(&read).collect::<Vec<_>>()
        ));
    }
    let at = now_unix() - 1.0;
    for r in recording {
        let name = r.record.clone().unwrap();
        let Some((kind, query)) = loaded.get(&(r.group.clone(), name.clone())) else {
            continue;
        };
        if kind != "recording" {
            failures.push(format!("{name}: Prometheus has it as a {kind} rule"));
            continue;
        }
        let ours = prom.query_at(&r.expr, Some(at));
        let theirs = prom.query_at(query, Some(at));
        let same = match (&ours, &theirs) {
            (Ok(a), Ok(b)) => same_result(a, b),
            (Err(a), Err(b)) => a == b,
            _ => false,
        };
        if !same {
            failures.push(format!(
                "recording rule {name} (line {}): the expression read here and Prometheus's \
                 own give different results (a YAML reading error?)\n  read here: {}\n  \
                 Prometheus: {}\n  {ours:?}\n  {theirs:?}",
                r.line,
                one_line(&r.expr),
                query
            ));
        }
    }
}

fn same_result(a: &QueryResult, b: &QueryResult) -> bool {
    let key = |r: &QueryResult| {
        let mut v: Vec<(String, u64)> = r
            .series
            .iter()
            .map(|s| (format!("{:?}", s.labels), s.value.to_bits()))
            .collect();
        v.sort();
        v
    };
    a.result_type == b.result_type && key(a) == key(b)
}

// ---------------------------------------------------------------------------------------
// Alerts and the previous-run latches
// ---------------------------------------------------------------------------------------

/// A previous-run latch of the rule file: a suite's points in the last run, the rules'
/// copy of the run before, the ratio, its median, and the alert on that median.
struct Latch {
    /// The suite run twice.
    suite: &'static str,
    /// The daemon's gauge of the last run's points.
    last: &'static str,
    /// The recording rules.
    previous: &'static str,
    ratio: &'static str,
    median: &'static str,
    alert: &'static str,
    /// The status page's list of points in a run summary, and the figure the gauge holds.
    points: &'static str,
    value: &'static str,
}

const LATCHES: &[Latch] = &[
    Latch {
        suite: "latency",
        last: "driveprobe_run_iops",
        previous: "driveprobe:run_iops:previous_run",
        ratio: "driveprobe:run_iops:ratio_previous_run",
        median: "driveprobe:run_iops:ratio_previous_run:median",
        alert: "DriveprobeRunRegression",
        points: "points",
        value: "iops",
    },
    Latch {
        suite: "oltp",
        last: "driveprobe_app_transactions_per_second",
        previous: "driveprobe:app_tps:previous_run",
        ratio: "driveprobe:app_tps:ratio_previous_run",
        median: "driveprobe:app_tps:ratio_previous_run:median",
        alert: "DriveprobeAppRegression",
        points: "app_points",
        value: "ops_per_second",
    },
];

/// A point's labels as one key: `workload T<threads>`, and ` QD<depth>` for a run point
/// (application points have no depth).
fn point_key(workload: &str, threads: &str, depth: Option<&str>) -> String {
    match depth {
        Some(q) => format!("{workload} T{threads} QD{q}"),
        None => format!("{workload} T{threads}"),
    }
}

/// A run summary's points (the status page's JSON), by [`point_key`].
fn summary_points(run: &Value, latch: &Latch) -> BTreeMap<String, f64> {
    run[latch.points]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| {
            let depth = p.get("depth").map(|d| d.to_string());
            Some((
                point_key(
                    p["workload"].as_str()?,
                    &p["threads"].to_string(),
                    depth.as_deref(),
                ),
                p[latch.value].as_f64()?,
            ))
        })
        .collect()
}

/// An instant query's series on drive a for the latch's suite, by [`point_key`].
fn prom_points(prom: &Prometheus, metric: &str, latch: &Latch) -> BTreeMap<String, f64> {
    let expr = format!(
        "{metric}{{job=\"{JOB}\", drive=\"{FULL}\", suite=\"{}\"}}",
        latch.suite
    );
    prom.query(&expr)
        .map(|r| {
            r.series
                .iter()
                .map(|s| {
                    let l = |k: &str| s.labels.get(k).cloned().unwrap_or_default();
                    let depth = s.labels.get("depth").map(String::as_str);
                    (point_key(&l("workload"), &l("threads"), depth), s.value)
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The median of the points' ratios last over first, as PromQL's `quantile(0.5, ...)`
/// computes it (linear interpolation between the two middle ratios of an even count).
fn median_ratio(first: &BTreeMap<String, f64>, last: &BTreeMap<String, f64>) -> f64 {
    let mut ratios: Vec<f64> = last
        .iter()
        .filter_map(|(k, l)| first.get(k).map(|f| l / f))
        .collect();
    ratios.sort_by(|a, b| a.total_cmp(b));
    if ratios.is_empty() {
        return f64::NAN;
    }
    let rank = 0.5 * (ratios.len() - 1) as f64;
    let (lo, hi) = (rank.floor() as usize, rank.ceil() as usize);
    ratios[lo] + (ratios[hi] - ratios[lo]) * (rank - lo as f64)
}

/// Healthy drives, a daemon that is up: no driveprobe alert may be pending or firing (a
/// pending one would fire after its `for:`), except a latch's regression alert
/// (DriveprobeRunRegression, DriveprobeAppRegression) exactly when the median of the
/// points' ratios (second run over first) fell below the threshold, as the status page
/// showed the two runs. (Quick runs of a few seconds a point on a shared machine do
/// differ that much from run to run.)
fn alerts_match_the_drives(
    d: &Daemon,
    prom: &Prometheus,
    first_runs: &BTreeMap<String, Value>,
    failures: &mut Vec<String>,
) {
    let threshold = match prom.query("driveprobe:threshold:run_regression_ratio") {
        Ok(r) if r.series.len() == 1 => r.series[0].value,
        other => {
            failures.push(format!(
                "driveprobe:threshold:run_regression_ratio should be one series: {other:?}"
            ));
            return;
        }
    };
    let drive = drive_json(d, FULL);
    let mut expected = BTreeSet::new();
    let mut why = Vec::new();
    for latch in LATCHES {
        let first = summary_points(&first_runs[latch.suite], latch);
        let last = summary_points(&drive["last_runs"][latch.suite], latch);
        let median = median_ratio(&first, &last);
        if median < threshold {
            expected.insert((latch.alert.to_string(), latch.suite.to_string()));
        }
        why.push(format!(
            "{} {}: median point ratio {median} (first run {first:?}, second run {last:?})",
            latch.alert, latch.suite
        ));
    }
    let mut regressions = BTreeSet::new();
    match prom.query("ALERTS{alertname=~\"Driveprobe.*\"}") {
        Ok(r) => {
            for s in r.series {
                let l = |k: &str| s.labels.get(k).cloned().unwrap_or_default();
                let latch_alert = LATCHES.iter().any(|x| x.alert == l("alertname"));
                if latch_alert && l("drive") == FULL {
                    regressions.insert((l("alertname"), l("suite")));
                } else {
                    failures.push(format!(
                        "alert {} is {} on healthy drives: {:?}",
                        l("alertname"),
                        l("alertstate"),
                        s.labels
                    ));
                }
            }
        }
        Err(e) => failures.push(format!("ALERTS: {e}")),
    }
    if regressions != expected {
        failures.push(format!(
            "pending or firing: {regressions:?}; the status page's runs say {expected:?} \
             (threshold {threshold}):\n  {}",
            why.join("\n  ")
        ));
    } else {
        println!(
            "no alert pending or firing but the regression alerts where expected: \
             {expected:?} (threshold {threshold}):\n  {}",
            why.join("\n  ")
        );
    }
}

/// The latch's `previous_run` holds exactly the first run's figure of every point (as the
/// status page showed them while it was the last run), `ratio_previous_run` is the second
/// run's over those, and the median rule is their median.
fn previous_run_latch_holds_the_first_run(
    prom: &Prometheus,
    latch: &Latch,
    first_run: &Value,
    failures: &mut Vec<String>,
) {
    let first = summary_points(first_run, latch);
    let previous = prom_points(prom, latch.previous, latch);
    let last = prom_points(prom, latch.last, latch);
    let ratio = prom_points(prom, latch.ratio, latch);
    if first.is_empty() || previous.len() != first.len() {
        failures.push(format!(
            "{} has {} points, the first {} run had {}: previous_run {previous:?}, first run \
             {first:?}",
            latch.previous,
            previous.len(),
            latch.suite,
            first.len()
        ));
        return;
    }
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * a.abs().max(b.abs());
    let mut bad = Vec::new();
    for (k, f) in &first {
        let p = previous.get(k).copied();
        let want_ratio = last.get(k).map(|l| l / f);
        let r = ratio.get(k).copied();
        let ratio_ok = matches!((want_ratio, r), (Some(w), Some(r)) if close(w, r));
        if !p.is_some_and(|p| same_f64(p, *f)) || !ratio_ok {
            bad.push(format!(
                "{k}: first run {f}, previous_run {p:?}; last run {:?}, ratio {r:?} (want \
                 {want_ratio:?})",
                last.get(k)
            ));
        }
    }
    let want_median = median_ratio(&first, &last);
    let expr = format!(
        "{}{{job=\"{JOB}\", drive=\"{FULL}\", suite=\"{}\"}}",
        latch.median, latch.suite
    );
    match prom.query(&expr) {
        Ok(r) if r.series.len() == 1 && close(r.series[0].value, want_median) => {}
        other => bad.push(format!(
            "{expr}: want one series of {want_median} (the median of the ratios), got \
             {other:?}"
        )),
    }
    if bad.is_empty() {
        println!(
            "{} holds the first {} run's figures of all {} points; {} is the second run's \
             over them, {} their median {want_median}",
            latch.previous,
            latch.suite,
            first.len(),
            latch.ratio,
            latch.median
        );
    } else {
        failures.push(format!(
            "the previous-run latch {} does not hold the first {} run:\n  {}",
            latch.previous,
            latch.suite,
            bad.join("\n  ")
        ));
    }
}

// ---------------------------------------------------------------------------------------
// The status page against Prometheus
// ---------------------------------------------------------------------------------------

fn drive_json(d: &Daemon, name: &str) -> Value {
    let (code, _, body) = d.get("/api/v1/drives");
    assert_eq!(code, 200, "/api/v1/drives: {body}");
    let v: Value = serde_json::from_str(&body).expect("/api/v1/drives is JSON");
    v.as_array()
        .and_then(|a| a.iter().find(|x| x["name"] == name))
        .cloned()
        .unwrap_or_else(|| panic!("no drive {name} in /api/v1/drives: {body}"))
}

/// Equal as the same f64: both sides print shortest round-trip decimals, but serde_json
/// (without its float_roundtrip feature) may read the daemon's JSON one ulp off.
fn same_f64(a: f64, b: f64) -> bool {
    a == b || (a - b).abs() <= 4.0 * f64::EPSILON * a.abs().max(b.abs())
}

/// The one series of an instant query, or a failure.
fn one_value(prom: &Prometheus, expr: &str, failures: &mut Vec<String>) -> Option<Series1> {
    match prom.query(expr) {
        Ok(r) if r.series.len() == 1 => Some(Series1 {
            labels: r.series[0].labels.clone(),
            value: r.series[0].value,
        }),
        other => {
            failures.push(format!(
                "status page vs Prometheus: {expr} should be one series: {other:?}"
            ));
            None
        }
    }
}

/// `expr` is one series whose value is `json` (the status page's figure for `what`).
fn exact_match(
    prom: &Prometheus,
    compared: &mut Vec<String>,
    what: &str,
    json: Option<f64>,
    expr: String,
    failures: &mut Vec<String>,
) {
    let Some(p) = one_value(prom, &expr, failures) else {
        return;
    };
    match json {
        Some(j) if same_f64(j, p.value) => compared.push(format!("{what}: {j}")),
        _ => failures.push(format!(
            "status page vs Prometheus, drive {FULL}, {what}: the status page says {json:?}, \
             Prometheus {} ({expr})",
            p.value
        )),
    }
}

struct Series1 {
    labels: BTreeMap<String, String>,
    value: f64,
}

fn status_page_matches_prometheus(d: &Daemon, prom: &Prometheus, failures: &mut Vec<String>) {
    let sel =
        |metric: &str, extra: &str| format!("{metric}{{job=\"{JOB}\", drive=\"{FULL}\"{extra}}}");
    let mut compared = Vec::new();

    // Gauges that do not move: exactly equal.
    let j = drive_json(d, FULL);
    exact_match(
        prom,
        &mut compared,
        "drive up",
        j["up"].as_bool().map(|b| if b { 1.0 } else { 0.0 }),
        sel("driveprobe_drive_up", ""),
        failures,
    );
    exact_match(
        prom,
        &mut compared,
        "wear budget per day",
        j["wear"]["budget_bytes_per_day"].as_f64(),
        sel("driveprobe_wear_budget_bytes", ""),
        failures,
    );
    exact_match(
        prom,
        &mut compared,
        "canary rd running",
        j["probes"]["rd"]["state"]["kind"]
            .as_str()
            .map(|k| if k == "running" { 1.0 } else { 0.0 }),
        sel("driveprobe_probe_running", ", probe=\"rd\""),
        failures,
    );
    exact_match(
        prom,
        &mut compared,
        "temperature",
        j["health"]["report"]["temperature_celsius"].as_f64(),
        sel("driveprobe_health_temperature_celsius", ""),
        failures,
    );
    if let Some(v) = j["health"]["verdict"].as_str() {
        exact_match(
            prom,
            &mut compared,
            &format!("health verdict {v}"),
            Some(1.0),
            sel("driveprobe_health_verdict", &format!(", verdict=\"{v}\"")),
            failures,
        );
    } else {
        failures.push(format!(
            "the status page has no health verdict for {FULL}: {j}"
        ));
    }
    exact_match(
        prom,
        &mut compared,
        "endurance used",
        j["endurance"]["used_ratio"].as_f64(),
        sel("driveprobe_endurance_used_ratio", ""),
        failures,
    );
    exact_match(
        prom,
        &mut compared,
        "drive writes per day",
        j["endurance"]["drive_writes_per_day"].as_f64(),
        sel("driveprobe_endurance_drive_writes_per_day", ""),
        failures,
    );
    exact_match(
        prom,
        &mut compared,
        "rated drive writes per day",
        j["endurance"]["rated_drive_writes_per_day"].as_f64(),
        sel("driveprobe_endurance_rated_drive_writes_per_day", ""),
        failures,
    );
    // The identity, as drive_info's labels.
    if let Some(info) = one_value(prom, &sel("driveprobe_drive_info", ""), failures) {
        let id = &j["identity"];
        for (label, json) in [
            ("model", id["model"].as_str().map(String::from)),
            ("serial", id["serial"].as_str().map(String::from)),
            ("firmware", id["firmware"].as_str().map(String::from)),
            // The disk under the file target: /dev/loopN as the status page's device,
            // loopN as node_exporter names it.
            ("path", j["device"].as_str().map(String::from)),
            (
                "device",
                j["device"]
                    .as_str()
                    .and_then(|d| d.strip_prefix("/dev/"))
                    .map(String::from),
            ),
        ] {
            let json = json.unwrap_or_default();
            let label_value = info.labels.get(label).cloned().unwrap_or_default();
            if json != label_value || json.is_empty() {
                failures.push(format!(
                    "status page vs Prometheus, drive {FULL}: identity {label} is {json:?} on \
                     the status page, {label_value:?} on driveprobe_drive_info (empty counts as wrong: \
                     the health data gives every one)"
                ));
            } else {
                compared.push(format!("{label}: {json}"));
            }
        }
    }

    exact_match(
        prom,
        &mut compared,
        "capacity",
        j["identity"]["capacity_bytes"].as_f64(),
        sel("driveprobe_drive_capacity_bytes", ""),
        failures,
    );

    // The last run: its summary and every point.
    let run = &j["last_runs"]["latency"];
    if run.is_null() {
        failures.push(format!(
            "the status page has no last latency run for {FULL}: {j}"
        ));
    } else {
        let ds = ", suite=\"latency\"";
        exact_match(
            prom,
            &mut compared,
            "run passed",
            Some(if run["status"] == "passed" { 1.0 } else { 0.0 }),
            sel("driveprobe_run_last_passed", ds),
            failures,
        );
        exact_match(
            prom,
            &mut compared,
            "run duration",
            run["duration_seconds"].as_f64(),
            sel("driveprobe_run_duration_seconds", ds),
            failures,
        );
        exact_match(
            prom,
            &mut compared,
            "run start",
            run["started_unix"].as_f64(),
            sel("driveprobe_run_last_start_timestamp_seconds", ds),
            failures,
        );
        exact_match(
            prom,
            &mut compared,
            "run steady state",
            run["steady_state"]
                .as_bool()
                .map(|b| if b { 1.0 } else { 0.0 }),
            sel("driveprobe_run_steady_state", ds),
            failures,
        );
        let points = run["points"].as_array().cloned().unwrap_or_default();
        if points.is_empty() {
            failures.push(format!(
                "the last latency run of {FULL} has no points: {run}"
            ));
        }
        let by_point = |metric: &str, extra: &str| -> BTreeMap<(String, String, String), f64> {
            prom.query(&sel(metric, &format!("{ds}{extra}")))
                .map(|r| {
                    r.series
                        .iter()
                        .map(|s| {
                            (
                                (
                                    s.labels["workload"].clone(),
                                    s.labels["threads"].clone(),
                                    s.labels["depth"].clone(),
                                ),
                                s.value,
                            )
                        })
                        .collect()
                })
                .unwrap_or_default()
        };
        let iops = by_point("driveprobe_run_iops", "");
        let bw = by_point("driveprobe_run_bandwidth_bytes_per_second", "");
        let p99 = by_point("driveprobe_run_latency_seconds", ", stat=\"p99\"");
        if iops.len() != points.len() {
            failures.push(format!(
                "the status page shows {} points of the last run, Prometheus has \
                 driveprobe_run_iops for {}",
                points.len(),
                iops.len()
            ));
        }
        let mut matched = 0;
        for p in &points {
            let key = (
                p["workload"].as_str().unwrap_or("").to_string(),
                p["threads"].to_string(),
                p["depth"].to_string(),
            );
            for (what, json, prom_map) in [
                ("iops", p["iops"].as_f64(), &iops),
                ("bandwidth", p["bandwidth_bytes_per_second"].as_f64(), &bw),
                ("p99", p["latency"]["p99"].as_f64(), &p99),
            ] {
                match (json, prom_map.get(&key)) {
                    (Some(a), Some(&b)) if same_f64(a, b) => matched += 1,
                    (a, b) => failures.push(format!(
                        "status page vs Prometheus, drive {FULL}, run point {key:?} {what}: \
                         the status page says {a:?}, Prometheus {b:?}"
                    )),
                }
            }
        }
        compared.push(format!(
            "last run: {} points x (iops, bandwidth, p99), {matched} equal",
            points.len()
        ));
    }

    // The last application runs: their summary and every point.
    for suite in ["oltp", "kv"] {
        let run = &j["last_runs"][suite];
        let points = run["app_points"].as_array().cloned().unwrap_or_default();
        if points.is_empty() {
            failures.push(format!(
                "the status page has no last {suite} run with application points for {FULL}: {run}"
            ));
            continue;
        }
        let ds = format!(", suite=\"{suite}\"");
        exact_match(
            prom,
            &mut compared,
            &format!("{suite} run start"),
            run["started_unix"].as_f64(),
            sel("driveprobe_run_last_start_timestamp_seconds", &ds),
            failures,
        );
        exact_match(
            prom,
            &mut compared,
            &format!("{suite} run passed"),
            Some(if run["status"] == "passed" { 1.0 } else { 0.0 }),
            sel("driveprobe_run_last_passed", &ds),
            failures,
        );
        let by_point = |metric: &str, extra: &str| -> BTreeMap<(String, String), f64> {
            prom.query(&sel(metric, &format!("{ds}{extra}")))
                .map(|r| {
                    r.series
                        .iter()
                        .map(|s| {
                            let l = |k: &str| s.labels.get(k).cloned().unwrap_or_default();
                            ((l("workload"), l("threads")), s.value)
                        })
                        .collect()
                })
                .unwrap_or_default()
        };
        let tps = by_point("driveprobe_app_transactions_per_second", "");
        let mean = by_point("driveprobe_app_latency_seconds", ", stat=\"mean\"");
        let p99 = by_point("driveprobe_app_latency_seconds", ", stat=\"p99\"");
        if tps.len() != points.len() {
            failures.push(format!(
                "the status page shows {} points of the last {suite} run, Prometheus has \
                 driveprobe_app_transactions_per_second for {}: {tps:?}",
                points.len(),
                tps.len()
            ));
        }
        let mut matched = 0;
        for p in &points {
            let key = (
                p["workload"].as_str().unwrap_or("").to_string(),
                p["threads"].to_string(),
            );
            for (what, json, prom_map) in [
                ("TPS", p["ops_per_second"].as_f64(), &tps),
                ("mean latency", p["latency_mean"].as_f64(), &mean),
                ("p99 latency", p["latency_p99"].as_f64(), &p99),
            ] {
                match (json, prom_map.get(&key)) {
                    (Some(a), Some(&b)) if same_f64(a, b) && a > 0.0 => matched += 1,
                    (a, b) => failures.push(format!(
                        "status page vs Prometheus, drive {FULL}, {suite} point {key:?} {what}: \
                         the status page says {a:?}, Prometheus {b:?} (both must be > 0)"
                    )),
                }
            }
        }
        compared.push(format!(
            "last {suite} run: {} points x (TPS, mean, p99), {matched} equal",
            points.len()
        ));
    }

    // Counters: Prometheus's last sample lies between the status page before it (less what
    // the counter can grow in the time between the scrape and that reading) and after it.
    for (what, metric, extra, path, max_rate) in [
        (
            "canary rd read ops",
            "driveprobe_probe_ops_total",
            ", probe=\"rd\", op=\"read\"",
            &["probes", "rd", "read", "ops_total"][..],
            2.0 * RATE_IOPS,
        ),
        (
            "canary rd read bytes",
            "driveprobe_probe_bytes_total",
            ", probe=\"rd\", op=\"read\"",
            &["probes", "rd", "read", "bytes_total"][..],
            2.0 * RATE_IOPS * 4096.0,
        ),
        (
            "canary wr write ops",
            "driveprobe_probe_ops_total",
            ", probe=\"wr\", op=\"write\"",
            &["probes", "wr", "write", "ops_total"][..],
            2.0 * RATE_IOPS,
        ),
        (
            "bytes driveprobe wrote",
            "driveprobe_self_written_bytes_total",
            "",
            &["wear", "self_written_bytes_total"][..],
            2.0 * RATE_IOPS * 4096.0,
        ),
    ] {
        let get = |j: &Value| path.iter().fold(j, |v, k| &v[*k]).as_f64();
        let before = drive_json(d, FULL);
        let t_before = now_unix();
        let expr = format!("{}[10s]", sel(metric, extra));
        let samples = prom.samples(&expr);
        let after = drive_json(d, FULL);
        let last = match &samples {
            Ok(s) if s.len() == 1 && !s[0].1.is_empty() => *s[0].1.last().unwrap(),
            other => {
                failures.push(format!(
                    "status page vs Prometheus: {expr} should be one series: {other:?}"
                ));
                continue;
            }
        };
        let (ts, v) = last;
        let (Some(b), Some(a)) = (get(&before), get(&after)) else {
            failures.push(format!(
                "the status page has no {} for drive {FULL}: {before}",
                path.join(".")
            ));
            continue;
        };
        let age = t_before - ts;
        let low = b - max_rate * (age.max(0.0) + 1.0);
        if !(v > 0.0 && v >= low && v <= a && age < 10.0) {
            failures.push(format!(
                "status page vs Prometheus, drive {FULL}, {what}: Prometheus has {v} (scraped \
                 {age:.2} s before the status page read {b}, then {a}); expected within \
                 [{low}, {a}], from a scrape less than 10 s old"
            ));
        } else {
            compared.push(format!(
                "{what}: Prometheus {v}, status page {b} .. {a} ({age:.2} s later)"
            ));
        }
    }

    // The window quantiles move every second: every value Prometheus scraped over a few
    // seconds must be one the status page showed around that time.
    window_quantiles_match(d, prom, failures, &mut compared);

    println!("status page and Prometheus agree on drive {FULL}:");
    for c in compared {
        println!("  {c}");
    }
}

fn window_quantiles_match(
    d: &Daemon,
    prom: &Prometheus,
    failures: &mut Vec<String>,
    compared: &mut Vec<String>,
) {
    // The Prometheus label, and the key of /api/v1/drives' labelled window quantiles.
    const QUANTILES: [(&str, Option<&str>); 5] = [
        ("0.5", Some("p50")),
        ("0.9", Some("p90")),
        ("0.99", Some("p99")),
        ("0.999", Some("p99_9")),
        ("1", None),
    ];
    // The status page every 50 ms for 5 s: (time, [p50, p90, p99, p99.9, max]).
    let mut seen: Vec<(f64, [f64; 5])> = Vec::new();
    let t_end = Instant::now() + Duration::from_secs(5);
    while Instant::now() < t_end {
        let j = drive_json(d, FULL);
        let t = now_unix();
        let w = &j["probes"]["rd"]["read"]["window"];
        if let Some(q) = w["quantiles"].as_object() {
            let mut v = [f64::NAN; 5];
            for (i, (_, idx)) in QUANTILES.iter().enumerate() {
                v[i] = match idx {
                    Some(k) => q.get(*k).and_then(Value::as_f64).unwrap_or(f64::NAN),
                    None => w["max"].as_f64().unwrap_or(f64::NAN),
                };
            }
            seen.push((t, v));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    if seen.len() < 10 {
        failures.push(format!(
            "the status page showed the canary window of drive {FULL} only {} times in 5 s",
            seen.len()
        ));
        return;
    }
    let (first, last) = (seen[0].0, seen[seen.len() - 1].0);
    // Let Prometheus scrape past the end of the polling.
    std::thread::sleep(Duration::from_millis(1500));
    for (i, (q, _)) in QUANTILES.iter().enumerate() {
        let expr = format!(
            "driveprobe_probe_latency_quantile_seconds{{job=\"{JOB}\", drive=\"{FULL}\", probe=\"rd\", op=\"read\", quantile=\"{q}\"}}[12s]"
        );
        let samples = match prom.samples(&expr) {
            Ok(s) if s.len() == 1 => s[0].1.clone(),
            other => {
                failures.push(format!("{expr} should be one series: {other:?}"));
                continue;
            }
        };
        let inside: Vec<(f64, f64)> = samples
            .into_iter()
            .filter(|(ts, _)| *ts >= first + 1.0 && *ts <= last - 0.2)
            .collect();
        if inside.len() < 2 {
            failures.push(format!(
                "Prometheus scraped quantile {q} of drive {FULL} only {} times in the 5 s the \
                 status page was read",
                inside.len()
            ));
            continue;
        }
        let mut exact = 0;
        for (ts, v) in &inside {
            let near: Vec<&(f64, [f64; 5])> =
                seen.iter().filter(|(t, _)| (t - ts).abs() <= 1.5).collect();
            if near.iter().any(|(_, vals)| same_f64(vals[i], *v)) {
                exact += 1;
                continue;
            }
            // The value may have lived between two readings only when the reader stalled.
            let max_gap = near.windows(2).map(|w| w[1].0 - w[0].0).fold(0.0, f64::max);
            let lo = near.iter().map(|(_, x)| x[i]).fold(f64::INFINITY, f64::min);
            let hi = near
                .iter()
                .map(|(_, x)| x[i])
                .fold(f64::NEG_INFINITY, f64::max);
            if !(max_gap > 0.5 && *v >= lo && *v <= hi) {
                failures.push(format!(
                    "status page vs Prometheus, drive {FULL}, window quantile {q}: Prometheus \
                     scraped {v} at {ts:.3}, a value the status page never showed within 1.5 s \
                     of it (it showed {:?})",
                    near.iter()
                        .map(|(t, x)| (format!("{t:.3}"), x[i]))
                        .collect::<Vec<_>>()
                ));
            }
        }
        compared.push(format!(
            "window quantile {q}: {exact} of {} scraped values shown by the status page",
            inside.len()
        ));
    }
}

// ---------------------------------------------------------------------------------------
// The rule file, read
// ---------------------------------------------------------------------------------------

/// One rule of a Prometheus rule file.
#[derive(Debug, Clone, PartialEq)]
struct RuleDef {
    group: String,
    record: Option<String>,
    alert: Option<String>,
    expr: String,
    /// 1-based line of the rule's first line.
    line: usize,
}

/// Reads the rules of a Prometheus rule file: `groups:` of `name:` and `rules:`, each rule
/// a mapping with `record:` or `alert:` and `expr:`. This is the block-style YAML such
/// files are written in, with plain, quoted and block (`|`, `>`, with chomping) scalars
/// and comments; flow collections, anchors and tags are refused rather than guessed at.
fn parse_rules(text: &str) -> Result<Vec<RuleDef>, String> {
    let lines: Vec<&str> = text.lines().collect();
    let mut rules: Vec<RuleDef> = Vec::new();
    let mut group = String::new();
    // The indent of the `rules:` key we are under, and of its items' dashes.
    let mut rules_key: Option<usize> = None;
    let mut item_dash: Option<usize> = None;
    // The current rule: its keys' indent, and what it has so far.
    let mut current: Option<(usize, RuleDef)> = None;
    let mut i = 0;

    fn finish(
        current: &mut Option<(usize, RuleDef)>,
        out: &mut Vec<RuleDef>,
    ) -> Result<(), String> {
        if let Some((_, r)) = current.take() {
            let at = r.line;
            match (&r.record, &r.alert) {
                (Some(_), None) | (None, Some(_)) => {}
                _ => {
                    return Err(format!(
                        "line {at}: a rule needs exactly one of record: and alert:"
                    ))
                }
            }
            if r.expr.trim().is_empty() {
                return Err(format!("line {at}: the rule has no expr:"));
            }
            out.push(r);
        }
        Ok(())
    }

    while i < lines.len() {
        let raw = lines[i];
        if raw[..raw.len() - raw.trim_start().len()].contains('\t') {
            return Err(format!("line {}: a tab in the indentation", i + 1));
        }
        let trimmed = raw.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            i += 1;
            continue;
        }
        if trimmed == "---" || trimmed == "..." {
            i += 1;
            continue;
        }
        let indent = raw.len() - raw.trim_start_matches(' ').len();
        let mut content = &raw[indent..];
        let mut key_indent = indent;

        if let Some(k) = rules_key {
            let is_item = content.starts_with("- ") || content == "-";
            if indent < k || (indent == k && !is_item) {
                finish(&mut current, &mut rules)?;
                rules_key = None;
                item_dash = None;
            }
        }
        if content.starts_with("- ") || content == "-" {
            let after = &content[1..];
            let pad = after.len() - after.trim_start_matches(' ').len();
            key_indent = indent + 1 + pad;
            content = after.trim_start_matches(' ');
            if rules_key.is_some() && item_dash.is_none_or(|d| d == indent) {
                item_dash = Some(indent);
                finish(&mut current, &mut rules)?;
                current = Some((
                    key_indent,
                    RuleDef {
                        group: group.clone(),
                        record: None,
                        alert: None,
                        expr: String::new(),
                        line: i + 1,
                    },
                ));
            }
            if content.is_empty() {
                i += 1;
                continue;
            }
        }
        let Some((key, rest)) = split_key(content) else {
            return Err(format!("line {}: not a `key: value` line: {raw:?}", i + 1));
        };
        let (value, next) = read_scalar(&lines, i, key_indent, rest)?;
        match key {
            "rules" => {
                rules_key = Some(key_indent);
                item_dash = None;
            }
            "name" if rules_key.is_none() => group = value.clone(),
            _ => {}
        }
        if let Some((k, r)) = &mut current {
            if *k == key_indent {
                match key {
                    "record" => r.record = Some(value),
                    "alert" => r.alert = Some(value),
                    "expr" => r.expr = value,
                    _ => {}
                }
            }
        }
        i = next;
    }
    finish(&mut current, &mut rules)?;
    Ok(rules)
}

/// `key: rest` (a plain key of letters, digits, `_`, `-` and `.`), or None.
fn split_key(content: &str) -> Option<(&str, &str)> {
    let colon = content.find(':')?;
    let key = &content[..colon];
    let rest = &content[colon + 1..];
    let ok_key = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    (ok_key && (rest.is_empty() || rest.starts_with(' '))).then(|| (key, rest.trim_start()))
}

/// The scalar value of a key at `key_indent` on line `i` whose text after the colon is
/// `rest`, and the next line to read. An empty value (a nested mapping or list follows)
/// reads as "".
fn read_scalar(
    lines: &[&str],
    i: usize,
    key_indent: usize,
    rest: &str,
) -> Result<(String, usize), String> {
    let indent_of = |l: &str| l.len() - l.trim_start_matches(' ').len();
    let err = |what: &str| Err(format!("line {}: {what}", i + 1));
    if rest.is_empty() || rest.starts_with('#') {
        return Ok((String::new(), i + 1));
    }
    match rest.as_bytes()[0] {
        b'|' | b'>' => {
            let header = rest.split(" #").next().unwrap_or("").trim();
            let folded = header.starts_with('>');
            let mut explicit = None;
            let mut keep = false;
            for c in header[1..].chars() {
                match c {
                    '-' => {}
                    '+' => keep = true,
                    d if d.is_ascii_digit() => {
                        explicit = Some(key_indent + (d as usize - '0' as usize))
                    }
                    _ => return err("a bad block scalar header"),
                }
            }
            let mut j = i + 1;
            let mut body: Vec<&str> = Vec::new();
            let mut block_indent = explicit;
            while j < lines.len() {
                let l = lines[j];
                if l.trim().is_empty() {
                    body.push("");
                    j += 1;
                    continue;
                }
                let ind = indent_of(l);
                if ind <= key_indent {
                    break;
                }
                let bi = *block_indent.get_or_insert(ind);
                if ind < bi {
                    return Err(format!("line {}: less indented than its block", j + 1));
                }
                body.push(&l[bi..]);
                j += 1;
            }
            while body.last() == Some(&"") {
                body.pop();
            }
            let mut out = String::new();
            if folded {
                // Lines fold into spaces; empty lines and more-indented lines keep breaks.
                let mut prev_plain = false;
                for l in &body {
                    if l.is_empty() {
                        out.push('\n');
                        prev_plain = false;
                    } else if l.starts_with(' ') {
                        if !out.is_empty() && !out.ends_with('\n') {
                            out.push('\n');
                        }
                        out.push_str(l);
                        out.push('\n');
                        prev_plain = false;
                    } else {
                        if prev_plain {
                            out.push(' ');
                        }
                        out.push_str(l);
                        prev_plain = true;
                    }
                }
            } else {
                out = body.join("\n");
            }
            if keep {
                out.push('\n');
            }
            Ok((out, j))
        }
        b'\'' | b'"' => {
            let quote = rest.as_bytes()[0] as char;
            let mut out = String::new();
            let mut j = i;
            let mut text = &rest[1..];
            loop {
                let mut chars = text.char_indices().peekable();
                let mut closed = None;
                let mut escaped_newline = false;
                while let Some((k, c)) = chars.next() {
                    if c == quote {
                        if quote == '\'' && chars.peek().map(|p| p.1) == Some('\'') {
                            chars.next();
                            out.push('\'');
                            continue;
                        }
                        closed = Some(k + 1);
                        break;
                    }
                    if quote == '"' && c == '\\' {
                        match chars.next() {
                            Some((_, 'n')) => out.push('\n'),
                            Some((_, 't')) => out.push('\t'),
                            Some((_, '"')) => out.push('"'),
                            Some((_, '\\')) => out.push('\\'),
                            Some((_, '/')) => out.push('/'),
                            Some((_, ' ')) => out.push(' '),
                            None => escaped_newline = true,
                            Some((_, other)) => {
                                return Err(format!(
                                    "line {}: an escape \\{other} this reader does not know",
                                    j + 1
                                ))
                            }
                        }
                        continue;
                    }
                    out.push(c);
                }
                if let Some(end) = closed {
                    let tail = text[end..].trim();
                    if !(tail.is_empty() || tail.starts_with('#')) {
                        return Err(format!("line {}: text after a closing quote", j + 1));
                    }
                    return Ok((out, j + 1));
                }
                // Continues on the next line: the break folds into a space (an empty line
                // into a newline), the next line's leading spaces are dropped.
                j += 1;
                if j >= lines.len() {
                    return err("an unclosed quoted scalar");
                }
                if !escaped_newline {
                    let trimmed_len = out.trim_end_matches(' ').len();
                    out.truncate(trimmed_len);
                    if lines[j].trim().is_empty() {
                        out.push('\n');
                        text = "";
                        continue;
                    }
                    if !out.ends_with('\n') {
                        out.push(' ');
                    }
                }
                text = lines[j].trim_start();
            }
        }
        b'{' | b'[' | b'&' | b'*' | b'!' => {
            err("flow collections, anchors, aliases and tags are not read here")
        }
        _ => {
            // A plain scalar: ends at " #"; continues on more-indented lines.
            let strip = |s: &str| -> String {
                match s.find(" #") {
                    Some(k) => s[..k].trim_end().to_string(),
                    None => s.trim_end().to_string(),
                }
            };
            let mut out = strip(rest);
            let mut j = i + 1;
            while j < lines.len() {
                let l = lines[j];
                let t = l.trim();
                if t.is_empty() {
                    // An empty line inside a plain scalar is a newline, if it goes on.
                    let more = lines[j..]
                        .iter()
                        .find(|x| !x.trim().is_empty())
                        .is_some_and(|x| indent_of(x) > key_indent && !x.trim().starts_with('#'));
                    if !more {
                        break;
                    }
                    out.push('\n');
                    j += 1;
                    continue;
                }
                if indent_of(l) <= key_indent || t.starts_with('#') {
                    break;
                }
                if !out.ends_with('\n') {
                    out.push(' ');
                }
                out.push_str(&strip(t));
                j += 1;
            }
            Ok((out, j))
        }
    }
}

#[test]
fn the_rule_reader_reads_block_plain_and_quoted_scalars() {
    let text = r#"# comment
groups:
  - name: first
    interval: 30s
    rules:
      # a comment between rules
      - record: a:b:c
        expr: |
          sum by (x) (
            rate(m[5m])
          )

        labels:
          team: storage
      - record: "quoted:name"
        expr: vector(1) # a comment
      - alert: Foo
        expr: >-
          up
          == 0
        for: 5m
        annotations:
          description: |
            expr: not this one
            - record: nor this
  - name: second
    rules:
    - record: d:e
      expr: 'a{x=''y''} or
        b'
    - expr: "c{l=\"v\"}"
      record: f:g
    - record: h
      expr: plain
        continued
"#;
    let r = parse_rules(text).unwrap();
    let got: Vec<(&str, Option<&str>, Option<&str>, &str)> = r
        .iter()
        .map(|r| {
            (
                r.group.as_str(),
                r.record.as_deref(),
                r.alert.as_deref(),
                r.expr.as_str(),
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![
            (
                "first",
                Some("a:b:c"),
                None,
                "sum by (x) (\n  rate(m[5m])\n)"
            ),
            ("first", Some("quoted:name"), None, "vector(1)"),
            ("first", None, Some("Foo"), "up == 0"),
            ("second", Some("d:e"), None, "a{x='y'} or b"),
            ("second", Some("f:g"), None, "c{l=\"v\"}"),
            ("second", Some("h"), None, "plain continued"),
        ]
    );
    assert_eq!(r[0].line, 7);
    assert!(parse_rules("groups:\n  - name: g\n    rules:\n      - record: x\n").is_err());
    assert!(
        parse_rules("groups:\n  - name: g\n    rules:\n      - {record: x, expr: y}\n").is_err()
    );
}
