//! The real daemon on file targets in /dev/shm: live metrics, drives that are absent,
//! reloads good and bad, scheduled runs (passed, timed out, stopped by SIGTERM, never
//! repeated after a restart), the wear budget, and the systemd notify protocol seen on a
//! test socket.

use crate::common;

use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::daemon::{file_drive, Daemon, Exposition, BIN};

fn write(path: &Path, text: &str) {
    std::fs::write(path, text).expect("write config");
}

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

fn header(dir: &Path) -> String {
    format!(
        "state_dir = \"{}\"\ndiscovery.enabled = false\nhealth_interval = \"2s\"\n\n",
        dir.join("state").display()
    )
}

fn counter(e: &Exposition, name: &str, labels: &[(&str, &str)]) -> f64 {
    e.value(name, labels)
        .unwrap_or_else(|| panic!("no single {name}{labels:?} in:\n{}", e.text))
}

/// A state file in which `keys` (SCHEDULE/DRIVE) were first seen long ago, so a cron time
/// in the past is due at once.
fn seed_state(dir: &Path, keys: &[&str]) {
    let state = dir.join("state");
    std::fs::create_dir_all(&state).unwrap();
    let schedules: serde_json::Map<String, serde_json::Value> = keys
        .iter()
        .map(|k| (k.to_string(), serde_json::json!({ "first_seen": 0 })))
        .collect();
    let doc = serde_json::json!({ "version": 1, "schedules": schedules });
    std::fs::write(state.join("state.json"), doc.to_string()).unwrap();
}

fn state_json(dir: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(dir.join("state/state.json")).expect("state file");
    serde_json::from_str(&text).expect("state parses")
}

#[test]
fn serves_live_metrics_for_file_target_drives() {
    let dir = common::shm_dir("dp-daemon-");
    let cfg = dir.path().join("d.toml");
    write(
        &cfg,
        &format!(
            "{}{}{}\
[[probe]]\nname = \"rd\"\ndrives = [\"*\"]\nwindow = \"5s\"\nworkload = {{ rate_iops = 200 }}\n\n\
[[probe]]\nname = \"wr\"\ndrives = [\"a\"]\nwindow = \"5s\"\nworkload = {{ read_pct = 50, rate_iops = 100, verify = true }}\n",
            header(dir.path()),
            file_drive("a", &dir.path().join("a.dat"), "16MiB"),
            file_drive("b", &dir.path().join("b.dat"), "16MiB"),
        ),
    );
    let d = Daemon::start(&cfg, &[]);
    // Healthy from its first answer: the scheduler's first pass comes before the
    // "listening on" line (and READY=1).
    let (status, _, body) = d.get("/healthz");
    assert_eq!(status, 200, "{body}");
    let first = d.wait_for("I/O on every probe", Duration::from_secs(30), |e| {
        ["a", "b"].iter().all(|dr| {
            e.value(
                "driveprobe_probe_ops_total",
                &[("drive", dr), ("probe", "rd"), ("op", "read")],
            )
            .is_some_and(|v| v > 0.0)
        }) && e
            .value(
                "driveprobe_probe_ops_total",
                &[("drive", "a"), ("probe", "wr"), ("op", "write")],
            )
            .is_some_and(|v| v > 0.0)
    });
    std::thread::sleep(Duration::from_secs(2));
    let e = d.scrape();

    for dr in ["a", "b"] {
        assert_eq!(counter(&e, "driveprobe_drive_up", &[("drive", dr)]), 1.0);
        assert_eq!(e.find("driveprobe_drive_info", &[("drive", dr)]).len(), 1);
        let l = [("drive", dr), ("probe", "rd"), ("op", "read")];
        let ops0 = counter(&first, "driveprobe_probe_ops_total", &l);
        let ops = counter(&e, "driveprobe_probe_ops_total", &l);
        assert!(ops > ops0, "{dr}: ops did not move ({ops0} -> {ops})");
        assert_eq!(
            counter(&e, "driveprobe_probe_bytes_total", &l),
            ops * 4096.0
        );
        assert_eq!(counter(&e, "driveprobe_probe_errors_total", &l), 0.0);
        // Classic histogram: 19 bounds + Inf, cumulative, Inf == count == ops.
        let mut buckets: Vec<(f64, f64)> = e
            .find("driveprobe_probe_latency_seconds_bucket", &l)
            .iter()
            .map(|s| {
                let le = s.labels["le"].as_str();
                (
                    if le == "+Inf" {
                        f64::INFINITY
                    } else {
                        le.parse().unwrap()
                    },
                    s.value,
                )
            })
            .collect();
        buckets.sort_by(|a, b| a.0.partial_cmp(&b.0).unwrap());
        assert_eq!(buckets.len(), 20);
        assert!(buckets.windows(2).all(|w| w[0].1 <= w[1].1));
        assert_eq!(
            buckets.last().unwrap().1,
            counter(&e, "driveprobe_probe_latency_seconds_count", &l)
        );
        // Window quantiles: ordered, positive, max at quantile 1.
        let q: Vec<f64> = ["0.5", "0.9", "0.99", "0.999", "1"]
            .iter()
            .map(|q| {
                let mut ll = l.to_vec();
                ll.push(("quantile", q));
                counter(&e, "driveprobe_probe_latency_quantile_seconds", &ll)
            })
            .collect();
        assert!(q[0] > 0.0 && q.windows(2).all(|w| w[0] <= w[1]), "{q:?}");
        assert_eq!(
            counter(
                &e,
                "driveprobe_collector_success",
                &[("drive", dr), ("collector", "canary:rd")]
            ),
            1.0
        );
    }
    // The verified write probe: no errors, its bytes counted against the wear budget.
    let w = [("drive", "a"), ("probe", "wr"), ("op", "write")];
    assert_eq!(counter(&e, "driveprobe_probe_errors_total", &w), 0.0);
    assert_eq!(
        counter(
            &e,
            "driveprobe_probe_errors_total",
            &[("drive", "a"), ("probe", "wr"), ("op", "read")]
        ),
        0.0
    );
    let written = counter(&e, "driveprobe_self_written_bytes_total", &[("drive", "a")]);
    assert!(written > 0.0, "self-written bytes");
    assert!(written <= counter(&e, "driveprobe_probe_bytes_total", &w));
    assert_eq!(
        counter(&e, "driveprobe_self_written_bytes_total", &[("drive", "b")]),
        0.0
    );
    assert!(e
        .find(
            "driveprobe_probe_ops_total",
            &[("drive", "b"), ("probe", "wr")]
        )
        .is_empty());
    // Process and build metrics.
    for f in [
        "driveprobe_build_info",
        "process_resident_memory_bytes",
        "process_cpu_seconds_total",
        "process_open_fds",
        "process_start_time_seconds",
    ] {
        assert!(e.has(f), "{f} missing");
    }
    // OpenMetrics when asked.
    let (code, h, body) = d.get_with(
        "/metrics",
        &[("Accept", "application/openmetrics-text; version=1.0.0")],
    );
    assert_eq!(code, 200);
    assert!(
        h["content-type"].starts_with("application/openmetrics-text"),
        "{h:?}"
    );
    assert!(body.trim_end().ends_with("# EOF"));
    // The rest of the API.
    assert_eq!(d.get("/healthz").0, 200);
    let (code, _, body) = d.get("/api/v1/drives");
    assert_eq!(code, 200);
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v.as_array().unwrap().len(), 2);
    let (code, _, page) = d.get("/");
    assert_eq!(code, 200);
    assert!(
        page.contains("a.dat") && page.contains("b.dat"),
        "the page lists both file targets"
    );

    let (st, took) = d.terminate(Duration::from_secs(5));
    assert!(st.success(), "exit status {st:?}");
    println!("SIGTERM to exit: {took:?}");
}

#[test]
fn a_drive_whose_identity_matches_nothing_is_down_and_gets_no_io() {
    let dir = common::shm_dir("dp-daemon-");
    let cfg = dir.path().join("d.toml");
    write(
        &cfg,
        &format!(
            "{}{}[[drive]]\nname = \"ghost\"\nserial = \"NO-SUCH-SERIAL-4711\"\npath = \"/dev/nonexistent-dp0\"\n\n\
[[probe]]\nname = \"rd\"\ndrives = [\"*\"]\nworkload = {{ rate_iops = 100 }}\n",
            header(dir.path()),
            file_drive("ok", &dir.path().join("ok.dat"), "8MiB"),
        ),
    );
    let d = Daemon::start(&cfg, &[]);
    let e = d.wait_for("the good drive probing", Duration::from_secs(30), |e| {
        e.value(
            "driveprobe_probe_ops_total",
            &[("drive", "ok"), ("op", "read")],
        )
        .is_some_and(|v| v > 20.0)
    });
    assert_eq!(
        counter(&e, "driveprobe_drive_up", &[("drive", "ghost")]),
        0.0
    );
    assert_eq!(counter(&e, "driveprobe_drive_up", &[("drive", "ok")]), 1.0);
    assert_eq!(
        e.find("driveprobe_drive_info", &[("drive", "ghost")]).len(),
        1
    );
    let ghost_ops = e.value(
        "driveprobe_probe_ops_total",
        &[("drive", "ghost"), ("op", "read")],
    );
    assert!(
        ghost_ops.is_none_or(|v| v == 0.0),
        "I/O on an absent drive: {ghost_ops:?}"
    );
    assert_eq!(
        counter(
            &e,
            "driveprobe_probe_running",
            &[("drive", "ghost"), ("probe", "rd")]
        ),
        0.0
    );
    let (_, _, drives) = d.get("/api/v1/drives");
    assert!(
        drives.contains("NO-SUCH-SERIAL-4711"),
        "the reason names the serial: {drives}"
    );
    d.terminate(Duration::from_secs(5));
}

/// `driveprobe_drive_info`'s device and path labels of a drive named by its serial follow
/// it to another device: its loop device is detached and its backing file attached again on
/// another loop device, and the one drive_info series of the drive names the new device
/// (the kernel name, as node_exporter writes it) and path, within the identity re-checks.
#[test]
fn drive_info_device_follows_the_drive_to_another_device() {
    common::need_root();
    let dir = common::shm_dir("dp-daemon-");
    let img = common::image(dir.path(), "m.img", 8 << 20);
    let filler_img = common::image(dir.path(), "filler.img", 1 << 20);
    let first = common::Loop::attach(&img, &[]);
    let first_path = first.s().to_string();
    let kernel_name = |p: &str| p.strip_prefix("/dev/").expect("a /dev path").to_string();
    let cfg = dir.path().join("d.toml");
    // No probe on the moving drive (nothing holds its device open, so it detaches at
    // once); a probe on another drive keeps the daemon busy as usual.
    write(
        &cfg,
        &format!(
            "{}[[drive]]\nname = \"m\"\nserial = \"{}\"\npath = \"{}\"\n\n{}\
[[probe]]\nname = \"rd\"\ndrives = [\"ok\"]\nworkload = {{ rate_iops = 20 }}\n",
            header(dir.path()),
            common::loop_serial(&img),
            first_path,
            file_drive("ok", &dir.path().join("ok.dat"), "8MiB"),
        ),
    );
    let d = Daemon::start(&cfg, &[]);
    // (device, path) of drive m's one drive_info series, and whether it is up.
    let info = |e: &Exposition| -> (String, String, f64) {
        let f = e.find("driveprobe_drive_info", &[("drive", "m")]);
        assert_eq!(f.len(), 1, "one drive_info series per drive:\n{}", e.text);
        (
            f[0].labels.get("device").cloned().unwrap_or_default(),
            f[0].labels.get("path").cloned().unwrap_or_default(),
            e.value("driveprobe_drive_up", &[("drive", "m")])
                .unwrap_or(-1.0),
        )
    };
    let want_first = (kernel_name(&first_path), first_path.clone(), 1.0);
    d.wait_for(
        "drive m on its first device",
        Duration::from_secs(30),
        |e| info(e) == want_first,
    );

    // The move: detach, let a filler take the freed number, attach the image again.
    drop(first);
    let _filler = common::Loop::attach(&filler_img, &[]);
    let second = common::Loop::attach(&img, &[]);
    assert_ne!(second.s(), first_path, "the image is on another device now");
    let want_second = (kernel_name(second.s()), second.s().to_string(), 1.0);
    let e = d.wait_for("drive m on its new device", Duration::from_secs(30), |e| {
        info(e) == want_second
    });
    // The rest of the identity is the drive's, unchanged.
    let f = e.find("driveprobe_drive_info", &[("drive", "m")]);
    assert_eq!(
        f[0].labels.get("serial").map(String::as_str),
        Some(common::loop_serial(&img).as_str())
    );
    // A drive on tmpfs has no disk: its device and path are empty, not made up.
    let ok = e.find("driveprobe_drive_info", &[("drive", "ok")]);
    assert_eq!(ok.len(), 1, "{}", e.text);
    assert_eq!(ok[0].labels.get("device").map(String::as_str), Some(""));
    assert_eq!(ok[0].labels.get("path").map(String::as_str), Some(""));
    d.terminate(Duration::from_secs(5));
}

/// The drive's own load (`driveprobe_drive_load_*`, from /proc/diskstats): on a
/// loop-device drive, its canary's reads are not load; 2,000 direct reads of its device by
/// another process are. The canary publishes its count once a second, so a sample may
/// see up to a second of its reads before they are counted: evenly spaced (`linear`) at
/// 50 IOPS, 50 and the few a late canary makes up, which is the tolerance. (Poisson
/// arrivals would put a second's count anywhere from 30 to 80.)
#[test]
fn the_drive_load_counts_others_io_not_the_canary_s() {
    common::need_root();
    let dir = common::shm_dir("dp-daemon-");
    let img = common::image(dir.path(), "l.img", 16 << 20);
    let lo = common::Loop::attach(&img, &[]);
    let cfg = dir.path().join("d.toml");
    write(
        &cfg,
        &format!(
            "{}[[drive]]\nname = \"l\"\nserial = \"{}\"\npath = \"{}\"\n\n\
[[probe]]\nname = \"rd\"\ndrives = [\"l\"]\nworkload = {{ rate_iops = 50, arrival = \"linear\" }}\n",
            header(dir.path()),
            common::loop_serial(&img),
            lo.s(),
        ),
    );
    let d = Daemon::start(&cfg, &[]);
    let l = [("drive", "l")];
    let canary = |e: &Exposition| {
        counter(
            e,
            "driveprobe_probe_ops_total",
            &[("drive", "l"), ("op", "read")],
        )
    };
    let load = |e: &Exposition| e.value("driveprobe_drive_load_ios_total", &l);
    // The canary's series appears with its first published count: until then (a busy host
    // starts the probe late) a scrape has none, and the wait goes on.
    let e1 = d.wait_for("the canary and the load", Duration::from_secs(30), |e| {
        load(e).is_some()
            && e.value(
                "driveprobe_probe_ops_total",
                &[("drive", "l"), ("op", "read")],
            )
            .is_some_and(|c| c >= 20.0)
    });
    let e2 = d.wait_for("100 more canary reads", Duration::from_secs(30), |e| {
        canary(e) >= canary(&e1) + 100.0
    });
    let (quiet, reads) = (
        load(&e2).unwrap() - load(&e1).unwrap(),
        canary(&e2) - canary(&e1),
    );
    const LAG: f64 = 60.0;
    assert!(
        quiet <= LAG,
        "the canary's {reads} reads counted as {quiet} I/Os of load"
    );
    let busy = |e: &Exposition| counter(e, "driveprobe_drive_load_busy_seconds_total", &l);
    assert!(busy(&e2) >= busy(&e1), "a counter went back");

    let dd = std::process::Command::new("dd")
        .args([
            &format!("if={}", lo.s()),
            "of=/dev/null",
            "bs=4k",
            "count=2000",
            "iflag=direct",
        ])
        .output()
        .unwrap();
    common::assert_ok(&dd, "dd");
    let e3 = d.wait_for("the reads of dd as load", Duration::from_secs(30), |e| {
        load(e).unwrap() >= load(&e2).unwrap() + 1_900.0
    });
    // Another scrape after the sample that saw all of dd's reads.
    std::thread::sleep(Duration::from_millis(1_500));
    let e4 = d.scrape();
    let (got, reads) = (
        load(&e4).unwrap() - load(&e2).unwrap(),
        canary(&e4) - canary(&e2),
    );
    assert!(
        (2_000.0 - LAG..=2_000.0 + LAG).contains(&got),
        "2000 reads of dd beside {reads} of the canary gave {got} I/Os of load"
    );
    assert!(busy(&e4) >= busy(&e3));
    d.terminate(Duration::from_secs(5));
}

#[test]
fn sighup_applies_a_good_config_and_keeps_the_old_one_on_a_bad_one() {
    let dir = common::shm_dir("dp-daemon-");
    let cfg = dir.path().join("d.toml");
    let probe = "[[probe]]\nname = \"rd\"\ndrives = [\"*\"]\nworkload = { rate_iops = 100 }\n";
    let a = file_drive("a", &dir.path().join("a.dat"), "8MiB");
    write(&cfg, &format!("{}{a}{probe}", header(dir.path())));
    let d = Daemon::start(&cfg, &[]);
    d.wait_for("drive a probing", Duration::from_secs(30), |e| {
        e.value("driveprobe_probe_ops_total", &[("drive", "a")])
            .is_some_and(|v| v > 0.0)
    });
    // A good config: drive b appears and probes.
    let b = file_drive("b", &dir.path().join("b.dat"), "8MiB");
    write(&cfg, &format!("{}{a}{b}{probe}", header(dir.path())));
    d.signal("HUP");
    let e = d.wait_for(
        "drive b probing after SIGHUP",
        Duration::from_secs(30),
        |e| {
            e.value("driveprobe_probe_ops_total", &[("drive", "b")])
                .is_some_and(|v| v > 0.0)
        },
    );
    assert_eq!(
        counter(&e, "driveprobe_config_last_reload_successful", &[]),
        1.0
    );
    let a_ops = counter(&e, "driveprobe_probe_ops_total", &[("drive", "a")]);
    // A bad config: refused, the old one keeps running.
    write(
        &cfg,
        &format!(
            "{}{a}{b}{probe}\n[[probe]]\nname = \"rd\"\nworkload = {{ rate_iops = -5 }}\n",
            header(dir.path())
        ),
    );
    d.signal("HUP");
    let e = d.wait_for("the refusal exported", Duration::from_secs(15), |e| {
        e.value("driveprobe_config_last_reload_successful", &[]) == Some(0.0)
    });
    assert_eq!(counter(&e, "driveprobe_drive_up", &[("drive", "b")]), 1.0);
    std::thread::sleep(Duration::from_secs(2));
    let e = d.scrape();
    assert!(
        counter(&e, "driveprobe_probe_ops_total", &[("drive", "a")]) > a_ops,
        "probes go on"
    );
    let log = d.log();
    assert!(log.contains("refused"), "the log says why: {log}");
    let (st, _) = d.terminate(Duration::from_secs(5));
    assert!(st.success());
}

/// Review of issue 17, B4: a probe removed from the config stayed on every surface as
/// "stopped" until a restart, and every reload logged "ended:" for holds that went on.
/// After a SIGHUP that removes a probe, it is gone from /metrics, /api/v1/drives and the
/// page; a drive-down hold carried across the reload is not logged as ended.
#[test]
fn sighup_removes_a_dropped_probe_from_every_surface_and_ends_no_hold() {
    let dir = common::shm_dir("dp-daemon-");
    let cfg = dir.path().join("d.toml");
    let a = file_drive("a", &dir.path().join("a.dat"), "8MiB");
    // Its directory does not exist: the drive is down and its probe held.
    let down = file_drive("down", &dir.path().join("no/such/dir/d.dat"), "8MiB");
    let rd = "[[probe]]\nname = \"rd\"\ndrives = [\"*\"]\nworkload = { rate_iops = 100 }\n\n";
    let rd2 = "[[probe]]\nname = \"rd2\"\ndrives = [\"a\"]\nworkload = { rate_iops = 50 }\n\n";
    write(&cfg, &format!("{}{a}{down}{rd}{rd2}", header(dir.path())));
    let d = Daemon::start(&cfg, &[]);
    let rd2_running = |e: &Exposition| {
        e.value(
            "driveprobe_probe_running",
            &[("drive", "a"), ("probe", "rd2")],
        ) == Some(1.0)
    };
    d.wait_for(
        "rd2 running, the down drive held",
        Duration::from_secs(30),
        |e| {
            rd2_running(e)
                && e.value(
                    "driveprobe_probe_state",
                    &[("drive", "down"), ("probe", "rd"), ("state", "drive_down")],
                ) == Some(1.0)
        },
    );
    assert!(
        d.log().contains("probe rd: canary drive_down"),
        "{}",
        d.log()
    );
    // rd2 leaves the config; the down drive and its held probe stay.
    write(&cfg, &format!("{}{a}{down}{rd}", header(dir.path())));
    d.signal("HUP");
    let e = d.wait_for("rd2 gone from /metrics", Duration::from_secs(30), |e| {
        e.value("driveprobe_config_last_reload_successful", &[]) == Some(1.0)
            && e.find("driveprobe_probe_state", &[("probe", "rd2")])
                .is_empty()
    });
    for name in ["driveprobe_probe_running", "driveprobe_probe_ops_total"] {
        assert!(
            e.find(name, &[("probe", "rd2")]).is_empty(),
            "{name} of rd2 after the reload:\n{}",
            e.text
        );
    }
    let (_, _, api) = d.get("/api/v1/drives");
    let v: serde_json::Value = serde_json::from_str(&api).unwrap();
    let a_probes: Vec<&String> = v
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["name"] == "a")
        .unwrap()["probes"]
        .as_object()
        .unwrap()
        .keys()
        .collect();
    assert_eq!(a_probes, ["rd"], "{api}");
    assert!(!api.contains("canary:rd2"), "its collector too: {api}");
    let (_, _, page) = d.get("/");
    assert!(!page.contains("data-probe=\"rd2\""), "{page}");
    let seen = surfaces_agree(&d);
    assert!(seen.iter().all(|(_, p, _)| p == "rd"), "{seen:?}");
    // The hold goes on: the reload did not end it (the new generation logs its start).
    d.wait_for(
        "the down drive's probe held again",
        Duration::from_secs(30),
        |e| {
            e.value(
                "driveprobe_probe_state",
                &[("drive", "down"), ("probe", "rd"), ("state", "drive_down")],
            ) == Some(1.0)
        },
    );
    let log = d.log();
    assert!(!log.contains("ended: canary drive_down"), "{log}");
    assert!(!log.contains("ended:"), "nothing ended: {log}");
    d.terminate(Duration::from_secs(5));
}

/// The one thread named `name` in the daemon (its id); fails the test when there is not
/// exactly one.
fn one_thread(d: &Daemon, name: &str) -> u64 {
    let t = common::threads_named(d.pid(), name);
    assert_eq!(t.len(), 1, "threads named {name}: {t:?}\n{}", d.log());
    t[0]
}

/// Issue 18: a reload stopped and started every thread of every drive (768 threads on a
/// 256-drive host for one change). A SIGHUP that changes drive b and adds drive c keeps
/// drive a's canary thread running (the same thread; the canary's counts go on, not
/// reset), replaces b's, and keeps the health pool's workers (issue 33: a few for every
/// drive, not one per drive).
#[test]
fn sighup_that_changes_one_drive_keeps_the_others_threads_running() {
    let dir = common::shm_dir("dp-daemon-");
    let cfg = dir.path().join("d.toml");
    let probe = "[[probe]]\nname = \"rd\"\ndrives = [\"*\"]\nworkload = { rate_iops = 100 }\n";
    let a = file_drive("a", &dir.path().join("a.dat"), "8MiB");
    let b = file_drive("b", &dir.path().join("b.dat"), "8MiB");
    write(&cfg, &format!("{}{a}{b}{probe}", header(dir.path())));
    let d = Daemon::start(&cfg, &[]);
    let ops = |e: &Exposition, drive: &str| {
        e.value(
            "driveprobe_probe_ops_total",
            &[("drive", drive), ("probe", "rd"), ("op", "read")],
        )
    };
    d.wait_for("a and b probing", Duration::from_secs(30), |e| {
        ops(e, "a").is_some_and(|v| v > 0.0) && ops(e, "b").is_some_and(|v| v > 0.0)
    });
    let canary_a = one_thread(&d, "dp-canary-a");
    let health = common::threads_named(d.pid(), "dp-health");
    assert!(!health.is_empty() && health.len() <= 2, "{health:?}");
    let canary_b = one_thread(&d, "dp-canary-b");
    // b's file target grows; c is new.
    let b2 = file_drive("b", &dir.path().join("b.dat"), "16MiB");
    let c = file_drive("c", &dir.path().join("c.dat"), "8MiB");
    let before = ops(&d.scrape(), "a").unwrap();
    write(&cfg, &format!("{}{a}{b2}{c}{probe}", header(dir.path())));
    d.signal("HUP");
    let e = d.wait_for("c probing after SIGHUP", Duration::from_secs(30), |e| {
        e.value("driveprobe_config_last_reload_successful", &[]) == Some(1.0)
            && ops(e, "c").is_some_and(|v| v > 0.0)
    });
    assert!(d.log().contains("config reloaded"), "{}", d.log());
    // a's series went on: a restart would have begun them again from 0.
    let after = ops(&e, "a").unwrap();
    assert!(
        after >= before,
        "a's canary started again: {before} then {after}"
    );
    assert_eq!(one_thread(&d, "dp-canary-a"), canary_a, "a's canary thread");
    let health_now = common::threads_named(d.pid(), "dp-health");
    assert!(
        health.iter().all(|t| health_now.contains(t)) && health_now.len() <= 3,
        "the health workers {health:?} were replaced: {health_now:?}"
    );
    let e = d.wait_for("b probing again", Duration::from_secs(30), |e| {
        ops(e, "b").is_some_and(|v| v > 0.0)
    });
    assert_ne!(
        one_thread(&d, "dp-canary-b"),
        canary_b,
        "b changed: its canary is new"
    );
    assert_eq!(
        e.value(
            "driveprobe_probe_running",
            &[("drive", "a"), ("probe", "rd")]
        ),
        Some(1.0)
    );
    let (st, _) = d.terminate(Duration::from_secs(5));
    assert!(st.success());
}

/// A free port on loopback (bound, then let go: another process could take it meanwhile,
/// which the test would see as a bind failure).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[test]
fn sighup_moves_the_listener_to_a_new_address_or_keeps_the_old_one() {
    let dir = common::shm_dir("dp-daemon-");
    let cfg = dir.path().join("d.toml");
    let a = file_drive("a", &dir.path().join("a.dat"), "8MiB");
    let with_listen = |port: u16| {
        format!(
            "{}[server]\nlisten = \"127.0.0.1:{port}\"\n\n{a}",
            header(dir.path())
        )
    };
    let first = free_port();
    write(&cfg, &with_listen(first));
    let d = Daemon::start_on_config_listen(&cfg, &[]);
    let old = format!("127.0.0.1:{first}");
    assert_eq!(d.addr, old);
    let metrics = |addr: &str| common::daemon::http_get(addr, "/metrics", &[]);
    assert_eq!(metrics(&old).0, 200);

    // A new address: served after SIGHUP, and the old one closed.
    let second = free_port();
    let new = format!("127.0.0.1:{second}");
    write(&cfg, &with_listen(second));
    d.signal("HUP");
    let t0 = Instant::now();
    while std::net::TcpStream::connect(&new).is_err() {
        assert!(
            t0.elapsed() < Duration::from_secs(15),
            "nothing listens on {new}; log:\n{}",
            d.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let (code, _, body) = metrics(&new);
    assert_eq!(code, 200);
    let e = Exposition::parse(&body);
    assert_eq!(
        counter(&e, "driveprobe_config_last_reload_successful", &[]),
        1.0
    );
    let t0 = Instant::now();
    while std::net::TcpStream::connect(&old).is_ok() {
        assert!(t0.elapsed() < Duration::from_secs(5), "{old} still accepts");
        std::thread::sleep(Duration::from_millis(100));
    }
    let reloaded = |want: f64, what: &str| {
        let t0 = Instant::now();
        loop {
            // The listener may be between two sockets for a moment (a refused move that
            // let the port go first): a failed connection is tried again.
            if let Ok((200, _, body)) = common::daemon::try_http_get(&new, "/metrics", &[]) {
                let e = Exposition::parse(&body);
                if e.value("driveprobe_config_last_reload_successful", &[]) == Some(want) {
                    return e;
                }
            }
            assert!(
                t0.elapsed() < Duration::from_secs(15),
                "{what}; log:\n{}",
                d.log()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    };

    // The same port on all addresses (127.0.0.1:P to 0.0.0.0:P): the old listener holds
    // the port, so it is let go first. While another socket holds 127.0.0.2:P, the new
    // address cannot be bound either: the old one is taken back and the config refused.
    let wild = |port: u16| {
        format!(
            "{}[server]\nlisten = \"0.0.0.0:{port}\"\n\n{a}",
            header(dir.path())
        )
    };
    let holder = std::net::TcpListener::bind(format!("127.0.0.2:{second}")).unwrap();
    write(&cfg, &wild(second));
    d.signal("HUP");
    reloaded(
        0.0,
        "the wildcard move refused while 127.0.0.2 holds the port",
    );
    assert_eq!(metrics(&new).0, 200, "serving on {new} again");
    drop(holder);
    d.signal("HUP");
    reloaded(1.0, "the wildcard move after the port is free");
    assert_eq!(metrics(&new).0, 200, "0.0.0.0:{second} serves loopback too");
    let log = d.log();
    assert!(
        log.contains(&format!("bound=0.0.0.0:{second}")),
        "the log names the new address: {log}"
    );

    // An address that is taken: the whole new config is refused, the listener stays.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let taken_port = taken.local_addr().unwrap().port();
    let b = file_drive("b", &dir.path().join("b.dat"), "8MiB");
    // (From 0.0.0.0:P to 127.0.0.1:Q: another port, so nothing is let go first.)
    write(&cfg, &format!("{}{b}", with_listen(taken_port)));
    d.signal("HUP");
    let e = reloaded(0.0, "no refusal of a taken port");
    assert_eq!(
        e.value("driveprobe_drive_up", &[("drive", "b")]),
        None,
        "drive b was not added"
    );
    let (_, _, page) = common::daemon::http_get(&new, "/", &[]);
    assert!(
        page.contains(&format!("cannot listen on 127.0.0.1:{taken_port}")),
        "the status page names the address refused: {page}"
    );
    drop(taken);
    let (st, _) = d.terminate(Duration::from_secs(5));
    assert!(st.success());
}

/// A run due since Jan 1st (the schedule was first seen long ago) starts at once.
const DUE_LONG_AGO: &str = "0 0 1 1 *";

fn run_config(dir: &Path, suite: &str, max: &str) -> String {
    format!(
        "{}[wear_budget]\nunrated_bytes_per_day = \"1TiB\"\n\n{}[[probe]]\nname = \"rd\"\ndrives = [\"*\"]\nworkload = {{ rate_iops = 100 }}\n\n\
[[schedule]]\nname = \"s\"\ndrives = [\"a\"]\nsuite = \"{suite}\"\nscale = \"quick\"\ncron = \"{DUE_LONG_AGO}\"\nmax_duration = \"{max}\"\n",
        header(dir),
        file_drive("a", &dir.join("a.dat"), "32MiB"),
    )
}

fn runs(d: &Daemon) -> Vec<serde_json::Value> {
    let (code, _, body) = d.get("/api/v1/runs");
    assert_eq!(code, 200, "{body}");
    serde_json::from_str::<serde_json::Value>(&body)
        .unwrap()
        .as_array()
        .unwrap()
        .clone()
}

fn wait_run_status(d: &Daemon, want: &str, limit: Duration) -> serde_json::Value {
    let t0 = Instant::now();
    loop {
        let r = runs(d);
        if let Some(x) = r.iter().find(|x| x["status"] == want) {
            return x.clone();
        }
        assert!(
            t0.elapsed() < limit,
            "no run became {want} in {limit:?}: {r:?}\nlog:\n{}",
            d.log()
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

#[test]
fn a_scheduled_run_pauses_the_canary_exports_its_results_and_is_not_repeated_after_restart() {
    let dir = common::shm_dir("dp-daemon-");
    let cfg = dir.path().join("d.toml");
    write(&cfg, &run_config(dir.path(), "latency", "10m"));
    seed_state(dir.path(), &["s/a"]);
    let d = Daemon::start(&cfg, &[]);
    wait_run_status(&d, "running", Duration::from_secs(20));
    let e = d.wait_for(
        "the canary paused for the run",
        Duration::from_secs(10),
        |e| {
            e.value("driveprobe_probe_paused", &[("drive", "a")]) == Some(1.0)
                && e.value(
                    "driveprobe_probe_running",
                    &[("drive", "a"), ("probe", "rd")],
                ) == Some(0.0)
        },
    );
    let paused_ops = counter(&e, "driveprobe_probe_ops_total", &[("drive", "a")]);
    std::thread::sleep(Duration::from_secs(1));
    let e = d.scrape();
    let still = runs(&d).iter().any(|r| r["status"] == "running");
    if still {
        // Still the same run (a quick latency suite takes longer than this): no canary I/O.
        assert_eq!(
            counter(&e, "driveprobe_probe_ops_total", &[("drive", "a")]),
            paused_ops,
            "no canary I/O during the run"
        );
    }
    let run = wait_run_status(&d, "passed", Duration::from_secs(180));
    let id = run["id"].as_str().unwrap().to_string();
    let e = d.wait_for(
        "run gauges and the canary back",
        Duration::from_secs(20),
        |e| {
            e.has("driveprobe_run_iops")
                && e.value(
                    "driveprobe_probe_running",
                    &[("drive", "a"), ("probe", "rd")],
                ) == Some(1.0)
        },
    );
    let points = e.find(
        "driveprobe_run_iops",
        &[("drive", "a"), ("suite", "latency")],
    );
    assert!(
        points.len() >= 9,
        "the latency matrix has 9 points: {}",
        points.len()
    );
    assert!(points.iter().all(|p| p.value > 0.0));
    assert_eq!(
        counter(
            &e,
            "driveprobe_run_last_passed",
            &[("drive", "a"), ("suite", "latency")]
        ),
        1.0
    );
    assert!(
        counter(
            &e,
            "driveprobe_run_duration_seconds",
            &[("drive", "a"), ("suite", "latency")]
        ) > 1.0
    );
    assert!(!e
        .find(
            "driveprobe_run_latency_seconds",
            &[("drive", "a"), ("stat", "p99")]
        )
        .is_empty());
    assert!(
        counter(&e, "driveprobe_self_written_bytes_total", &[("drive", "a")])
            >= (32u64 << 20) as f64,
        "the run's writes (purge fill and preconditioning) are accounted"
    );
    let (code, h, html) = d.get(&format!("/runs/{id}/report"));
    assert_eq!(code, 200);
    assert!(h["content-type"].starts_with("text/html"));
    assert!(html.contains("<svg"), "the report has charts");
    assert!(dir.path().join(format!("state/runs/{id}.json")).exists());
    d.terminate(Duration::from_secs(5));

    // Restart: the results are back, the run is not repeated.
    let d = Daemon::start(&cfg, &[]);
    let e = d.wait_for("run gauges restored", Duration::from_secs(15), |e| {
        e.has("driveprobe_run_iops")
    });
    assert_eq!(
        counter(
            &e,
            "driveprobe_run_last_passed",
            &[("drive", "a"), ("suite", "latency")]
        ),
        1.0
    );
    std::thread::sleep(Duration::from_secs(3));
    let r = runs(&d);
    assert_eq!(r.len(), 1, "no second run: {r:?}");
    d.terminate(Duration::from_secs(5));
}

#[test]
fn a_run_past_its_maximum_duration_is_stopped_and_marked_timed_out() {
    let dir = common::shm_dir("dp-daemon-");
    let cfg = dir.path().join("d.toml");
    write(&cfg, &run_config(dir.path(), "enterprise", "3s"));
    seed_state(dir.path(), &["s/a"]);
    let d = Daemon::start(&cfg, &[]);
    let run = wait_run_status(&d, "timed_out", Duration::from_secs(30));
    let dur = run["ended"].as_i64().unwrap() - run["started"].as_i64().unwrap();
    assert!(
        (3..=8).contains(&dur),
        "stopped about at its maximum duration: {dur} s"
    );
    d.wait_for("the canary resumes", Duration::from_secs(10), |e| {
        e.value(
            "driveprobe_probe_running",
            &[("drive", "a"), ("probe", "rd")],
        ) == Some(1.0)
    });
    let st = state_json(dir.path());
    assert_eq!(st["schedules"]["s/a"]["running"], false);
    d.terminate(Duration::from_secs(5));
}

#[test]
fn sigterm_mid_run_stops_within_5_s_marks_the_run_and_a_restart_does_not_repeat_it() {
    let dir = common::shm_dir("dp-daemon-");
    let cfg = dir.path().join("d.toml");
    write(&cfg, &run_config(dir.path(), "enterprise", "1h"));
    seed_state(dir.path(), &["s/a"]);
    let d = Daemon::start(&cfg, &[]);
    wait_run_status(&d, "running", Duration::from_secs(20));
    std::thread::sleep(Duration::from_secs(2));
    let (st, took) = d.terminate(Duration::from_secs(5));
    assert!(st.success(), "{st:?}");
    println!("SIGTERM mid-run to exit: {took:?}");
    let s = state_json(dir.path());
    let runs_ = s["runs"].as_array().unwrap();
    assert_eq!(runs_.len(), 1);
    assert_eq!(runs_[0]["status"], "stopped");
    assert_eq!(s["schedules"]["s/a"]["running"], false);
    let handled = s["schedules"]["s/a"]["last_due_handled"].as_i64().unwrap();
    assert!(handled <= now());

    let d = Daemon::start(&cfg, &[]);
    std::thread::sleep(Duration::from_secs(4));
    let r = runs(&d);
    assert_eq!(r.len(), 1, "the stopped run is not started again: {r:?}");
    d.terminate(Duration::from_secs(5));
}

#[test]
fn kill_9_mid_run_leaves_it_interrupted_and_not_repeated() {
    let dir = common::shm_dir("dp-daemon-");
    let cfg = dir.path().join("d.toml");
    write(&cfg, &run_config(dir.path(), "enterprise", "1h"));
    seed_state(dir.path(), &["s/a"]);
    let mut d = Daemon::start(&cfg, &[]);
    wait_run_status(&d, "running", Duration::from_secs(20));
    d.child.kill().unwrap();
    d.child.wait().unwrap();
    let d = Daemon::start(&cfg, &[]);
    let r = wait_run_status(&d, "interrupted", Duration::from_secs(10));
    assert!(r["ended"].is_i64());
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(runs(&d).len(), 1, "not repeated");
    d.terminate(Duration::from_secs(5));
}

#[test]
fn the_wear_budget_pauses_writing_probes_and_says_so() {
    let dir = common::shm_dir("dp-daemon-");
    let cfg = dir.path().join("d.toml");
    write(
        &cfg,
        &format!(
            "{}[wear_budget]\nunrated_bytes_per_day = \"2MiB\"\n\n{}\
[[probe]]\nname = \"wr\"\ndrives = [\"a\"]\nworkload = {{ read_pct = 0, rate_iops = 300 }}\n",
            header(dir.path()),
            file_drive("a", &dir.path().join("a.dat"), "8MiB"),
        ),
    );
    let d = Daemon::start(&cfg, &[]);
    let e = d.wait_for("the budget spent", Duration::from_secs(30), |e| {
        e.value("driveprobe_wear_budget_exceeded", &[("drive", "a")]) == Some(1.0)
    });
    assert_eq!(
        counter(&e, "driveprobe_wear_budget_bytes", &[("drive", "a")]),
        (2u64 << 20) as f64
    );
    let e = d.wait_for("the writing probe held", Duration::from_secs(30), |e| {
        e.value(
            "driveprobe_probe_running",
            &[("drive", "a"), ("probe", "wr")],
        ) == Some(0.0)
    });
    assert_eq!(
        counter(&e, "driveprobe_probe_paused", &[("drive", "a")]),
        1.0
    );
    let ops = counter(
        &e,
        "driveprobe_probe_ops_total",
        &[("drive", "a"), ("op", "write")],
    );
    std::thread::sleep(Duration::from_secs(3));
    let e = d.scrape();
    assert_eq!(
        counter(
            &e,
            "driveprobe_probe_ops_total",
            &[("drive", "a"), ("op", "write")]
        ),
        ops,
        "no writes over budget"
    );
    let spent = counter(&e, "driveprobe_self_written_bytes_total", &[("drive", "a")]);
    // A few intervals (1 s at 300 x 4 KiB) past the budget at most: the budget is checked
    // once an interval, and on a loaded host that check may come late while the rate
    // limiter catches up. That writing stops at all is the check above.
    assert!(
        spent >= (2u64 << 20) as f64 && spent <= (2u64 << 20) as f64 + 300.0 * 4096.0 * 3.0,
        "{spent}"
    );
    d.terminate(Duration::from_secs(5));
}

/// The status page, /api/v1/drives and /metrics of a live daemon, checked to agree.
///
/// The three are read one after the other, so a state that changes between them (a probe
/// starting, a hold) would fail the check with no fault: the API is read before and after
/// the page and the metrics, and the three are compared only when the states it gives
/// did not change meanwhile (a consistent snapshot), else read again (bounded).
fn surfaces_agree(d: &Daemon) -> Vec<(String, String, String)> {
    let states = |api: &str| -> Vec<String> {
        let v: serde_json::Value = serde_json::from_str(api).unwrap();
        v.as_array()
            .unwrap()
            .iter()
            .map(|d| {
                let probes: Vec<String> = d["probes"]
                    .as_object()
                    .unwrap()
                    .iter()
                    .map(|(n, p)| format!("{n}={}", p["state"]))
                    .collect();
                format!(
                    "{} health={}/{} {probes:?}",
                    d["name"], d["health_state"]["kind"], d["health_state"]["reason"]
                )
            })
            .collect()
    };
    let mut last = Vec::new();
    for _ in 0..20 {
        let (code, _, before) = d.get("/api/v1/drives");
        assert_eq!(code, 200);
        let (code, _, page) = d.get("/");
        assert_eq!(code, 200);
        let e = d.scrape();
        let (code, _, api) = d.get("/api/v1/drives");
        assert_eq!(code, 200);
        if states(&before) == states(&api) {
            let drives: serde_json::Value = serde_json::from_str(&api).unwrap();
            return common::surfaces::assert_agree(&page, &drives, &e, true);
        }
        last = [states(&before), states(&api)].concat();
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("no consistent snapshot in 20 reads; the states kept changing: {last:?}")
}

/// Issue 17: with the wear budget spent, `driveprobe_probe_paused 1` (the drive's) stood
/// beside `driveprobe_probe_running 1` of a read-only probe whose ops kept rising, and the
/// page showed "paused" over it. The budget holds only probes that write; each probe's
/// one state says which is held.
#[test]
fn a_read_probe_is_never_shown_paused_while_a_writing_probe_beside_it_is() {
    let dir = common::shm_dir("dp-daemon-");
    let cfg = dir.path().join("d.toml");
    write(
        &cfg,
        &format!(
            "{}[wear_budget]\nunrated_bytes_per_day = \"1MiB\"\n\n{}\
[[probe]]\nname = \"wr\"\ndrives = [\"a\"]\nworkload = {{ read_pct = 0, rate_iops = 300 }}\n\n\
[[probe]]\nname = \"rd\"\ndrives = [\"a\"]\nworkload = {{ rate_iops = 100 }}\n",
            header(dir.path()),
            file_drive("a", &dir.path().join("a.dat"), "8MiB"),
        ),
    );
    let d = Daemon::start(&cfg, &[]);
    let rd = [("drive", "a"), ("probe", "rd")];
    let e = d.wait_for("the writing probe held", Duration::from_secs(30), |e| {
        e.value("driveprobe_wear_budget_exceeded", &[("drive", "a")]) == Some(1.0)
            && e.value(
                "driveprobe_probe_running",
                &[("drive", "a"), ("probe", "wr")],
            ) == Some(0.0)
    });
    let ops = counter(
        &e,
        "driveprobe_probe_ops_total",
        &[("drive", "a"), ("op", "read"), ("probe", "rd")],
    );
    let e = d.wait_for("the read probe going on", Duration::from_secs(10), |e| {
        e.value(
            "driveprobe_probe_ops_total",
            &[("drive", "a"), ("op", "read"), ("probe", "rd")],
        )
        .is_some_and(|v| v > ops)
    });
    // Its I/O goes on: it runs, and no paused series that covers it says otherwise.
    assert_eq!(
        counter(&e, "driveprobe_probe_running", &rd),
        1.0,
        "{}",
        e.text
    );
    let paused_over_rd: Vec<_> = e
        .find("driveprobe_probe_paused", &[("drive", "a")])
        .into_iter()
        .filter(|s| s.labels.get("probe").is_none_or(|p| p == "rd") && s.value == 1.0)
        .collect();
    assert!(
        paused_over_rd.is_empty(),
        "paused and running at once: {paused_over_rd:?}"
    );
    assert_eq!(
        counter(
            &e,
            "driveprobe_probe_paused",
            &[("drive", "a"), ("probe", "wr")]
        ),
        1.0
    );
    let seen = surfaces_agree(&d);
    let states: Vec<(&str, &str)> = seen
        .iter()
        .map(|(_, p, k)| (p.as_str(), k.as_str()))
        .collect();
    assert_eq!(states, [("rd", "running"), ("wr", "paused")]);
    // A file target on tmpfs has no drive under it: health is not applicable, not "not read
    // yet" forever.
    let (_, _, page) = d.get("/");
    let a = common::surfaces::drive_section(&page, "a");
    assert!(a.contains("data-health=\"not_applicable\""), "{a}");
    // The hold is logged when it starts, not every second.
    let log = d.log();
    assert_eq!(log.matches("probe wr: canary paused").count(), 1, "{log}");
    d.terminate(Duration::from_secs(5));
}

/// Issue 17: a condition seen on every attempt is logged once when it starts and once when
/// it ends, with the count.
#[test]
fn a_canary_that_cannot_start_is_logged_once_then_its_end_with_the_count() {
    let dir = common::shm_dir("dp-daemon-");
    let cfg = dir.path().join("d.toml");
    let target = dir.path().join("a.dat");
    write(
        &cfg,
        &format!(
            "{}{}[[probe]]\nname = \"rd\"\ndrives = [\"a\"]\nworkload = {{ rate_iops = 50 }}\n",
            header(dir.path()),
            file_drive("a", &target, "4MiB"),
        ),
    );
    let d = Daemon::start(&cfg, &[]);
    let running = |e: &Exposition| {
        e.value(
            "driveprobe_probe_running",
            &[("drive", "a"), ("probe", "rd")],
        ) == Some(1.0)
    };
    d.wait_for("the probe running", Duration::from_secs(30), running);
    // Replaced by a file driveprobe did not create: refused, untouched, on every attempt.
    std::fs::remove_file(&target).unwrap();
    write(&target, "not driveprobe's");
    // Three attempts, seen as three distinct times of the canary's collector.
    let mut attempts = std::collections::BTreeSet::new();
    let t0 = Instant::now();
    while attempts.len() < 3 {
        let (_, _, api) = d.get("/api/v1/drives");
        let v: serde_json::Value = serde_json::from_str(&api).unwrap();
        let c = &v[0]["collectors"]["canary:rd"];
        if c["success"] == false {
            attempts.insert(c["last_unix"].to_string());
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "{v}\n{}", d.log());
        std::thread::sleep(Duration::from_millis(100));
    }
    let log = d.log();
    assert_eq!(log.matches("canary cannot start").count(), 1, "{log}");
    let seen = surfaces_agree(&d);
    assert_eq!(seen[0].2, "failing");
    // The operator removes the file: the daemon makes its own, the probe runs, and the
    // end of the condition is logged with how often it was seen.
    std::fs::remove_file(&target).unwrap();
    d.wait_for("the probe running again", Duration::from_secs(60), running);
    let log = d.log();
    let ended = log
        .lines()
        .find(|l| l.contains("ended: canary cannot start"))
        .unwrap_or_else(|| panic!("no end logged:\n{log}"));
    let n: u64 = ended
        .split("repeated ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count in {ended}"));
    assert!(n >= 3, "{ended}");
    assert_eq!(log.matches("canary cannot start").count(), 2, "{log}");
    d.terminate(Duration::from_secs(5));
}

/// Issue 17: health showed "not read yet" beside "health failed: smartctl refused ...",
/// and "no readings yet" after nine attempts. A drive whose reads fail says failed, with
/// the reason and the count, the same on every surface, and the log says it once.
#[test]
fn a_health_read_that_keeps_failing_says_failed_with_its_reason_everywhere() {
    common::need_root();
    let shm = common::shm_dir("dp-daemon-");
    // ext4 on a loop device: the file target has a drive under it, which has no SMART.
    let fs = common::LoopExt4::new(shm.path(), 64 << 20);
    let cfg = shm.path().join("d.toml");
    write(
        &cfg,
        &format!(
            "{}{}",
            header(shm.path()),
            file_drive("a", &fs.dir().join("a.dat"), "4MiB"),
        ),
    );
    let d = Daemon::start(&cfg, &[]);
    let t0 = Instant::now();
    let state = loop {
        let (_, _, api) = d.get("/api/v1/drives");
        let v: serde_json::Value = serde_json::from_str(&api).unwrap();
        let hs = v[0]["health_state"].clone();
        if hs["kind"] == "failed" && hs["attempts"].as_u64().unwrap_or(0) >= 3 {
            break hs;
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "{v}\n{}", d.log());
        std::thread::sleep(Duration::from_millis(200));
    };
    let reason = state["reason"].as_str().unwrap();
    assert!(reason.contains("smartctl refused"), "{state}");
    let log = d.log();
    assert_eq!(log.matches("health read of").count(), 1, "{log}");
    surfaces_agree(&d);
    let (_, _, page) = d.get("/");
    assert!(
        !page.contains("not read yet") && !page.contains("no readings yet"),
        "{page}"
    );
    assert!(page.contains("1 read failed"), "{page}");
    d.terminate(Duration::from_secs(5));
}

#[test]
fn speaks_the_systemd_notify_protocol() {
    let dir = common::shm_dir("dp-daemon-");
    let sock_path = dir.path().join("notify.sock");
    let sock = UnixDatagram::bind(&sock_path).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let cfg = dir.path().join("d.toml");
    write(
        &cfg,
        &format!(
            "{}{}[[probe]]\nname = \"rd\"\nworkload = {{ rate_iops = 50 }}\n",
            header(dir.path()),
            file_drive("a", &dir.path().join("a.dat"), "8MiB")
        ),
    );
    let d = Daemon::start(
        &cfg,
        &[
            ("NOTIFY_SOCKET", sock_path.to_str().unwrap()),
            ("WATCHDOG_USEC", "1000000"),
        ],
    );
    let recv = |want: &str| -> Vec<String> {
        let mut seen = Vec::new();
        let t0 = Instant::now();
        let mut buf = [0u8; 4096];
        while t0.elapsed() < Duration::from_secs(30) {
            let n = sock.recv(&mut buf).expect("a notify message");
            let msg = String::from_utf8_lossy(&buf[..n]).into_owned();
            let done = msg.lines().any(|l| l == want);
            seen.push(msg);
            if done {
                return seen;
            }
        }
        panic!("never saw {want}: {seen:?}");
    };
    let first = recv("READY=1");
    assert!(first.last().unwrap().contains("STATUS="), "{first:?}");
    assert_eq!(d.get("/healthz").0, 200, "healthy once ready");
    recv("WATCHDOG=1");
    // At half the period (500 ms): each gap within the period systemd allows, and the
    // median of five near half of it (a stalled host may delay one ping, not all). What
    // a busy host made the daemon and this test wait for a CPU meanwhile (their run
    // delay) is added to both bounds: the test checks the pinger, not the CPU it got.
    let delay = || common::run_delay_ns(d.pid() as u32) + common::run_delay_ns(std::process::id());
    let delay0 = delay();
    let mut gaps = Vec::new();
    for _ in 0..5 {
        let t0 = Instant::now();
        recv("WATCHDOG=1");
        gaps.push(t0.elapsed());
    }
    let stalled = Duration::from_nanos(delay().saturating_sub(delay0));
    gaps.sort();
    assert!(
        gaps[4] < Duration::from_millis(1000) + stalled
            && gaps[2] < Duration::from_millis(750) + stalled,
        "watchdog at half the period: {gaps:?}, run delay meanwhile {stalled:?}"
    );
    d.signal("HUP");
    let reload = recv("RELOADING=1");
    assert!(
        reload.last().unwrap().contains("MONOTONIC_USEC="),
        "{reload:?}"
    );
    recv("READY=1");
    let pid = d.pid();
    let child = std::thread::spawn(move || d.terminate(Duration::from_secs(5)));
    recv("STOPPING=1");
    let (st, _) = child.join().unwrap();
    assert!(st.success());
    let _ = pid;
}

#[test]
fn refuses_a_bad_config_and_a_busy_port_in_one_line() {
    let dir = common::shm_dir("dp-daemon-");
    let cfg = dir.path().join("bad.toml");
    write(&cfg, "[server]\nlisten = 12\n");
    let out = std::process::Command::new(BIN)
        .args(["daemon", "--config"])
        .arg(&cfg)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bad.toml:2:"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");

    let holder = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = holder.local_addr().unwrap().to_string();
    let good = dir.path().join("good.toml");
    write(
        &good,
        &format!(
            "{}{}",
            header(dir.path()),
            file_drive("a", &dir.path().join("a.dat"), "4MiB")
        ),
    );
    let out = std::process::Command::new(BIN)
        .args(["daemon", "--config"])
        .arg(&good)
        .args(["--listen", &addr])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    let last = err.trim().lines().last().unwrap_or("");
    assert!(
        last.starts_with("driveprobe: error: cannot listen on")
            && last.contains("give `daemon --listen` a free address"),
        "{err}"
    );
}

/// `driveprobe` with no arguments (what `cargo run --release` runs) is the daemon on the
/// built-in config: a 256 MiB file target in $XDG_STATE_HOME/driveprobe, one canary, on
/// 127.0.0.1:39480. Run as an unprivileged user (as root the state would go to
/// /var/lib/driveprobe, on this machine's disk), with its state in /dev/shm.
#[test]
fn the_bare_command_runs_the_built_in_config() {
    use std::io::{BufRead, BufReader};
    use std::os::unix::fs::PermissionsExt;
    let dir = common::shm_dir("dp-daemon-");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let xdg = dir.path().join("xdg");
    let mut child = std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(BIN)
        .env("XDG_STATE_HOME", &xdg)
        .env("HOME", dir.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("setpriv (util-linux; scripts/test installs it)");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let cleanup = |c: &mut std::process::Child| {
        let _ = c.kill();
        let _ = c.wait();
    };
    if line.trim() != "listening on http://127.0.0.1:39480/" {
        cleanup(&mut child);
        panic!("unexpected first line {line:?}");
    }
    let t0 = Instant::now();
    let ok = loop {
        let (code, _, body) = common::daemon::http_get("127.0.0.1:39480", "/metrics", &[]);
        let e = Exposition::parse(&body);
        if code == 200
            && e.value(
                "driveprobe_probe_ops_total",
                &[
                    ("drive", "default"),
                    ("probe", "canary-4k-read"),
                    ("op", "read"),
                ],
            )
            .is_some_and(|v| v > 0.0)
        {
            break true;
        }
        if t0.elapsed() > Duration::from_secs(60) {
            break false;
        }
        std::thread::sleep(Duration::from_millis(250));
    };
    let target = xdg.join("driveprobe/canary.dat");
    let size = std::fs::metadata(&target).map(|m| m.len()).ok();
    std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    let st = child.wait().unwrap();
    assert!(ok, "no canary I/O on the built-in config within 60 s");
    assert_eq!(size, Some(256 << 20), "{}", target.display());
    assert!(st.success(), "{st:?}");
    println!("live metrics {:?} after start", t0.elapsed());
}
