//! Golden files of the whole `/metrics` payload (without the `process_*` families) for a
//! fixed, rich status, in both formats: a change to a family, a label or a HELP text shows
//! up as a diff in review. The text 0.0.4 output also goes through `promtool check metrics`.
//! Regenerate with `UPDATE_SNAPSHOTS=1 cargo test --profile ci --test cli metrics_golden::`.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use crate::common;
use driveprobe::health::detail::Link;
use driveprobe::health::endurance::{Basis, Endurance};
use driveprobe::health::model::{
    CriticalFlags, HealthReport, Identity, PowerState, Source, Transport, Verdict,
};
use driveprobe::metrics::{render, render_opts, Format};
use driveprobe::status::{
    AppRunPoint, CollectorStatus, ConfigStatus, CpuWait, DriveStatus, HealthState, HealthStatus,
    OpStatus, ProbeState, ProbeStatus, RunLatency, RunPoint, RunSummary, SchedulerStatus,
    SkipStatus, Status, WearStatus, WindowQuantiles, LATENCY_BUCKETS,
};

/// A smartctl fixture parsed, for the detail of issue 20.
fn detail(name: &str) -> HealthReport {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/smartctl")
        .join(name);
    driveprobe::health::smartctl::parse(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

/// Unix seconds of 2026-11-30T06:00:00Z: "now" in the fixed status.
const NOW: f64 = 1_795_932_000.0;

/// The lints promtool may report, each with why it stays. Everything else fails the test.
const ALLOWED_LINTS: &[&str] = &[
    // The metrics contract (docs/decisions/0001-starting-design.md): exact window quantiles are a gauge with a `quantile` label.
    "driveprobe_probe_latency_quantile_seconds non-summary metrics should not have \"quantile\" label",
    // The same shape for the host's part of the canary's latency (issue 21).
    "driveprobe_probe_host_stall_seconds non-summary metrics should not have \"quantile\" label",
];

/// Cumulative bucket counts for `ops` I/Os spread over the bounds from `first` on, with a
/// tail, so that every drive's histogram has a shape of its own.
fn buckets(ops: u64, first: usize) -> Vec<u64> {
    let shares = [0.05, 0.35, 0.80, 0.95, 0.99, 0.999];
    LATENCY_BUCKETS
        .iter()
        .enumerate()
        .map(|(i, _)| match i.checked_sub(first) {
            None => 0,
            Some(k) if k < shares.len() => (ops as f64 * shares[k]) as u64,
            Some(_) => ops,
        })
        .collect()
}

fn op(ops: u64, block: u64, errors: u64, first_bucket: usize, mean: f64) -> OpStatus {
    OpStatus {
        ops_total: ops,
        bytes_total: ops * block,
        errors_total: errors,
        device_errors_total: errors,
        last_host_error: None,
        latency_sum_seconds: ops as f64 * mean,
        buckets: buckets(ops, first_bucket),
        window: Some(WindowQuantiles {
            ops: 3000,
            quantiles: [mean * 0.9, mean * 1.6, mean * 3.1, mean * 7.5],
            max: mean * 21.0,
        }),
    }
}

fn collectors(entries: &[(&str, bool, f64)]) -> BTreeMap<String, CollectorStatus> {
    entries
        .iter()
        .map(|&(name, success, duration)| {
            (
                name.to_string(),
                CollectorStatus {
                    success,
                    duration_seconds: duration,
                    last_unix: NOW - 10.0,
                    error: (!success).then(|| format!("{name} failed")),
                },
            )
        })
        .collect()
}

fn point(workload: &str, threads: u32, depth: u32, iops: f64, block: f64) -> RunPoint {
    let mean = f64::from(threads * depth) / iops;
    RunPoint {
        workload: workload.to_string(),
        threads,
        depth,
        iops,
        bandwidth_bytes_per_second: iops * block,
        latency: RunLatency {
            mean,
            max: mean * 40.0,
            stddev: mean * 0.4,
            p50: mean * 0.9,
            p99: mean * 3.0,
            p99_9: mean * 6.0,
        },
    }
}

/// A healthy NVMe drive with a read canary and a verified-write canary, two suites' runs,
/// a full health reading and an endurance estimate.
fn nvme() -> DriveStatus {
    let identity = Identity {
        model: Some("Samsung SSD 990 PRO 2TB".into()),
        serial: Some("S6Z2NF0W123456A".into()),
        firmware: Some("4B2QJXD7".into()),
        wwn: Some("eui.002538b231a1b2c3".into()),
        transport: Transport::Nvme,
        capacity_bytes: Some(2_000_398_934_016),
        logical_block_size: Some(512),
        rotation_rpm: Some(0),
    };
    let report = HealthReport {
        identity: identity.clone(),
        source: Source::NvmeIoctl,
        power_state: PowerState::Active,
        smart_passed: Some(true),
        temperature_celsius: Some(41.0),
        temperature_warning_celsius: Some(82.0),
        temperature_critical_celsius: Some(85.0),
        available_spare_ratio: Some(1.0),
        available_spare_threshold_ratio: Some(0.1),
        percentage_used_ratio: Some(0.03),
        critical_warning: Some(0),
        critical_flags: Some(CriticalFlags::from_bits(0)),
        media_errors: Some(0),
        error_log_entries: Some(12),
        host_read_bytes: Some(48_123_456_000_000),
        host_written_bytes: Some(61_987_654_144_000),
        media_written_bytes: Some(70_222_333_440_000),
        power_on_seconds: Some(4_321 * 3600),
        power_cycles: Some(87),
        unsafe_shutdowns: Some(5),
        // Issue 20: the NVMe counters, sensors and self-tests of a hand-written smartctl
        // output, and a Gen4 x4 link.
        nvme: detail("detail-nvme.json").nvme,
        self_tests: detail("detail-nvme.json").self_tests,
        link: Some(Link {
            current_speed_transfers_per_second: Some(16e9),
            max_speed_transfers_per_second: Some(16e9),
            current_width: Some(4),
            max_width: Some(4),
            source: "pcie-sysfs".into(),
        }),
        ..Default::default()
    };
    let mut probes = BTreeMap::new();
    probes.insert(
        "canary-4k-read".to_string(),
        common::fixtures::read_canary(op(216_000, 4096, 0, 2, 68e-6), 0.125),
    );
    probes.insert(
        "canary-4k-verify".to_string(),
        common::fixtures::verify_canary(
            ProbeState::Running,
            op(54_000, 4096, 1, 2, 75e-6),
            op(54_000, 4096, 0, 1, 24e-6),
            31.5,
        ),
    );
    let mut last_runs = BTreeMap::new();
    last_runs.insert(
        "latency".to_string(),
        RunSummary {
            id: "20261129T030000Z-db1-latency".into(),
            suite: "latency".into(),
            status: "passed".into(),
            reason: None,
            reason_label: "none".into(),
            written_bytes: 12_884_901_888,
            write_bound_bytes: Some(80_000_000_000),
            started_unix: NOW - 97_200.0,
            duration_seconds: 2_712.5,
            steady_state: Some(true),
            last_success_unix: Some(NOW - 97_200.0),
            points: vec![
                point("4k-randread", 1, 1, 14_250.0, 4096.0),
                point("4k-randwrite", 1, 1, 41_300.0, 4096.0),
                point("8k-70read", 1, 1, 11_800.0, 8192.0),
            ],
            app_points: vec![],
        },
    );
    last_runs.insert(
        "enterprise".to_string(),
        RunSummary {
            id: "20261122T030000Z-db1-enterprise".into(),
            suite: "enterprise".into(),
            status: "timed_out".into(),
            reason: Some("timed out: stopped at its max_duration of 14400 s".into()),
            reason_label: "max_duration".into(),
            written_bytes: 2_400_000_000_000,
            write_bound_bytes: Some(9_000_000_000_000),
            started_unix: NOW - 702_000.0,
            duration_seconds: 14_400.0,
            steady_state: Some(false),
            last_success_unix: Some(NOW - 1_306_800.0),
            points: vec![
                point("4k-randread", 4, 32, 1_150_000.0, 4096.0),
                point("4k-randwrite", 4, 32, 310_000.0, 4096.0),
                point("128k-seqread", 1, 32, 56_000.0, 131_072.0),
                point("128k-seqwrite", 1, 32, 52_000.0, 131_072.0),
            ],
            app_points: vec![],
        },
    );
    let app = |threads: u32, tps: f64, mean: f64, p99: f64| AppRunPoint {
        workload: "oltp_read_write".into(),
        threads,
        ops_per_second: tps,
        latency_mean: mean,
        latency_p99: p99,
    };
    last_runs.insert(
        "oltp".to_string(),
        RunSummary {
            id: "20261129T040000Z-db1-oltp".into(),
            suite: "oltp".into(),
            status: "passed".into(),
            reason: None,
            reason_label: "none".into(),
            written_bytes: 12_884_901_888,
            write_bound_bytes: Some(80_000_000_000),
            started_unix: NOW - 93_600.0,
            duration_seconds: 1_830.0,
            steady_state: None,
            last_success_unix: Some(NOW - 93_600.0),
            points: vec![],
            app_points: vec![
                app(2, 612.5, 0.003_26, 0.006_91),
                app(8, 1_480.25, 0.005_4, 0.014_46),
                app(32, 2_010.0, 0.015_9, 0.046_63),
            ],
        },
    );
    DriveStatus {
        health_detail_metrics_off: false,
        name: "db1".into(),
        up: true,
        down_reason: None,
        device: Some("/dev/nvme0n1".into()),
        target: Some("/srv/db/.driveprobe".into()),
        identity,
        health: Some(HealthStatus {
            report,
            verdict: Verdict::Ok,
            reasons: vec![],
            read_unix: NOW - 42.0,
        }),
        endurance: Some(Endurance {
            rated_bytes: Some(1.2e15),
            rated_drive_writes_per_day: Some(0.33),
            vendor_used_ratio: Some(0.03),
            host_written_ratio: Some(0.051_656_378_453_333),
            used_ratio: Some(0.051_656_378_453_333),
            used_basis: Some(Basis::HostWrites),
            drive_writes_per_day: Some(0.172),
            rate_basis: Some(Basis::History),
            remaining_bytes: Some(1.138e15),
            days_left: Some(3_307.0),
            projected_wearout_unix_seconds: Some(NOW + 3_307.0 * 86_400.0),
            write_amplification: Some(1.133),
            annual_failure_rate: Some(0.0058),
            self_written_bytes: Some(91_268_055_040),
            self_written_share: Some(0.0015),
            notes: vec![],
        }),
        collectors: collectors(&[
            ("canary:canary-4k-read", true, 0.000_9),
            ("health", true, 0.004_25),
            ("run:enterprise", true, 0.0),
        ]),
        probes,
        health_state: HealthState::Read {
            read_unix: NOW - 42.0,
        },
        wear: WearStatus {
            self_written_bytes_total: 91_268_055_040,
            written_today_bytes: 113_246_208,
            budget_bytes_per_day: 33_006_582_411.264,
            exceeded: false,
            runs_period_days: 30,
            runs_budget_bytes: 2.475e14,
            runs_written_bytes: 91_000_000_000,
        },
        last_runs,
        skipped: BTreeMap::from([(
            "weekly-characterisation".to_string(),
            SkipStatus {
                count: 2,
                reason: "wear_budget".into(),
                last_unix: NOW - 3_600.0,
                last_message: "skipped: the wear budget for scheduled runs does not fit it".into(),
            },
        )]),
        discovered: Some(driveprobe::config::Discovered {
            class: driveprobe::config::Class::Nvme,
            transport: driveprobe::config::Transport::Nvme,
            kernel_name: "nvme0n1".into(),
            source: driveprobe::config::Source::Sysfs,
        }),
        load: Some(driveprobe::load::DriveLoad::new(
            "nvme0n1", 1_234_567, 4_321.25, 3,
        )),
        self_test: Default::default(),
    }
}

/// A SATA disk with warnings: reallocated and pending sectors, CRC errors, hot; its canary
/// paused by a scheduled run; an odd model string; the health collector slow.
fn sata() -> DriveStatus {
    let identity = Identity {
        model: Some("WDC WD40EFRX-68N32N0 \"Red\" \\ refurb".into()),
        serial: Some("WD-WCC7K1234567".into()),
        firmware: Some("82.00A82".into()),
        wwn: Some("0x50014ee2b1c2d3e4".into()),
        transport: Transport::Sata,
        capacity_bytes: Some(4_000_787_030_016),
        logical_block_size: Some(512),
        rotation_rpm: Some(5400),
    };
    let report = HealthReport {
        identity: identity.clone(),
        source: Source::Smartctl,
        power_state: PowerState::Active,
        smart_passed: Some(true),
        temperature_celsius: Some(52.0),
        reallocated_sectors: Some(8),
        pending_sectors: Some(2),
        offline_uncorrectable: Some(0),
        crc_errors: Some(3),
        power_on_seconds: Some(38_211 * 3600),
        power_cycles: Some(143),
        host_written_bytes: Some(96_412_345_212_928),
        host_read_bytes: Some(310_555_666_777_088),
        // Issue 20: every attribute of a real 18-attribute disk (smart-ata.json), and the
        // Device Statistics, PHY counters, 1.5 Gb/s link and self-tests of a hand-written
        // one (detail-sata.json).
        ata_attributes: detail("smart-ata.json").ata_attributes,
        ata_device_statistics: detail("detail-sata.json").ata_device_statistics,
        sata_phy_events: detail("detail-sata.json").sata_phy_events,
        link: detail("detail-sata.json").link,
        self_tests: detail("detail-sata.json").self_tests,
        ..Default::default()
    };
    let mut probes = BTreeMap::new();
    let mut read = op(7_200, 65_536, 3, 7, 8.3e-3);
    read.window = None;
    probes.insert(
        "canary-64k-read".to_string(),
        ProbeStatus {
            writes: false,
            window_seconds: 300.0,
            rate_iops: Some(5.0),
            state: ProbeState::Paused {
                reason: "scheduled run 20261130T050000Z-archive1-latency (latency)".into(),
            },
            read,
            write: OpStatus::default(),
            cpu_wait: CpuWait::default(),
            host_stall: None,
        },
    );
    DriveStatus {
        health_detail_metrics_off: false,
        name: "archive1".into(),
        up: true,
        down_reason: None,
        device: Some("/dev/sdb".into()),
        target: Some("/dev/sdb".into()),
        identity,
        health: Some(HealthStatus {
            report,
            verdict: Verdict::Warning,
            reasons: vec![
                "2 sectors pending reallocation".into(),
                "8 reallocated sectors".into(),
            ],
            read_unix: NOW - 300.0,
        }),
        endurance: Some(Endurance {
            drive_writes_per_day: Some(0.0069),
            rate_basis: Some(Basis::Lifetime),
            notes: vec!["no rating".into()],
            ..Default::default()
        }),
        collectors: collectors(&[("health", true, 1.75)]),
        probes,
        health_state: HealthState::Read {
            read_unix: NOW - 300.0,
        },
        wear: WearStatus {
            self_written_bytes_total: 5_368_709_120,
            written_today_bytes: 1_073_807_360,
            budget_bytes_per_day: 1_073_741_824.0,
            exceeded: true,
            runs_period_days: 30,
            runs_budget_bytes: 274_877_906_944.0,
            runs_written_bytes: 0,
        },
        last_runs: BTreeMap::new(),
        skipped: BTreeMap::new(),
        discovered: None,
        load: None,
        self_test: Default::default(),
    }
}

/// A drive that is not there: nothing known but its name.
fn down() -> DriveStatus {
    DriveStatus {
        health_detail_metrics_off: false,
        name: "spare3".into(),
        up: false,
        down_reason: Some("no device with serial ZA1B2C3D is present".into()),
        collectors: collectors(&[("canary:canary-4k-read", false, 0.000_3)]),
        wear: WearStatus {
            budget_bytes_per_day: 1_073_741_824.0,
            ..Default::default()
        },
        ..Default::default()
    }
}

fn rich_status() -> Status {
    let mut drives = BTreeMap::new();
    for d in [nvme(), sata(), down()] {
        drives.insert(d.name.clone(), d);
    }
    let mut next_due = BTreeMap::new();
    next_due.insert("nightly-latency".to_string(), NOW as i64 + 75_600);
    next_due.insert("weekly-characterisation".to_string(), NOW as i64 + 507_600);
    let mut running = BTreeMap::new();
    running.insert(
        "archive-scrub".to_string(),
        "20261130T055500Z-archive1-latency".to_string(),
    );
    Status {
        started_unix: NOW - 86_400.0,
        config: ConfigStatus {
            path: Some("/etc/driveprobe/driveprobe.toml".into()),
            last_reload_successful: false,
            last_reload_success_unix: NOW - 3_600.0,
            last_error: Some("driveprobe.toml:12:9: unknown key".into()),
        },
        drives,
        runs: Vec::new(),
        run_notes: Default::default(),
        scheduler: SchedulerStatus {
            last_tick_unix: NOW - 0.5,
            next_due,
            running,
            held: [(
                "nightly-latency".to_string(),
                driveprobe::status::HeldStatus {
                    reason: "selftest".into(),
                    message: "nightly-latency: due, held".into(),
                    due_unix: NOW as i64 - 41,
                    since_unix: NOW - 40.0,
                },
            )]
            .into(),
            clock: driveprobe::status::ClockStatus {
                steps_total: 2,
                last_step_seconds: -31_536_000.0,
                last_step_unix: NOW - 600.0,
                clamped_total: 1,
            },
        },
        discovery: Some(driveprobe::status::DiscoveryStatus {
            watched: 3,
            skipped: 5,
            merge_skipped: 1,
            scans_total: 12,
            last_scan_unix: NOW - 30.0,
        }),
        state: Default::default(),
        threads: driveprobe::status::ThreadsStatus {
            start_failures_total: 7,
            unstarted: BTreeMap::from([(
                "canary latency on drive archive1".to_string(),
                "Resource temporarily unavailable (os error 11)".to_string(),
            )]),
        },
    }
}

/// The payload with the build's version, git revision and Rust version replaced, so a
/// version bump, a commit or a new compiler is not a diff.
fn rendered(format: Format) -> String {
    use driveprobe::version::{REVISION, RUST_VERSION, VERSION};
    render_opts(&rich_status(), format, false).replace(
        &format!("version=\"{VERSION}\",revision=\"{REVISION}\",rustversion=\"{RUST_VERSION}\""),
        "version=\"VERSION\",revision=\"REVISION\",rustversion=\"RUSTVERSION\"",
    )
}

fn check(got: &str, name: &str) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/snapshots")
        .join(name);
    if std::env::var_os("UPDATE_SNAPSHOTS").is_some() {
        std::fs::write(&path, got).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&path).unwrap_or_default();
    if got != want {
        let first = got
            .lines()
            .zip(want.lines())
            .position(|(g, w)| g != w)
            .unwrap_or_else(|| got.lines().count().min(want.lines().count()));
        panic!(
            "{} differs from the rendered metrics, first at line {}:\n  got:  {:?}\n  want: {:?}\nif the change is meant, run UPDATE_SNAPSHOTS=1 cargo test --profile ci --test cli metrics_golden::\n--- got ---\n{got}",
            path.display(),
            first + 1,
            got.lines().nth(first).unwrap_or("<end>"),
            want.lines().nth(first).unwrap_or("<end>"),
        );
    }
}

#[test]
fn openmetrics_golden() {
    let got = rendered(Format::OpenMetrics);
    assert!(got.ends_with("# EOF\n"));
    check(&got, "metrics.openmetrics.txt");
}

#[test]
fn text004_golden() {
    let got = rendered(Format::Text004);
    assert!(!got.contains("# EOF"));
    check(&got, "metrics.text004.txt");
}

/// Runs promtool with `args` and `input` on stdin; its exit status and everything it said.
fn promtool(args: &[&str], input: &str) -> (std::process::ExitStatus, String) {
    let child = Command::new("promtool")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) => panic!(
            "cannot run promtool ({e}): run scripts/test, which installs it (Debian package prometheus)"
        ),
    };
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status, said)
}

/// promtool's linter passes the text 0.0.4 payload, but for [`ALLOWED_LINTS`].
fn assert_promtool_lint_clean(text: &str) {
    let (status, said) = promtool(&["check", "metrics"], text);
    let problems: Vec<&str> = said
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !ALLOWED_LINTS.contains(l))
        .collect();
    // promtool exits 3 for lint problems and 1 for a payload it cannot parse.
    let allowed_exit = status.success() || status.code() == Some(3);
    assert!(
        allowed_exit && problems.is_empty(),
        "promtool check metrics: {status}\n{}\n--- input ---\n{text}",
        problems.join("\n")
    );
}

/// Prometheus's own OpenMetrics parser (promtool's backfill from OpenMetrics, which wants a
/// timestamp on every sample) takes the OpenMetrics payload, every sample of it.
fn assert_prometheus_parses_openmetrics(text: &str) {
    let samples = text.lines().filter(|l| !l.starts_with('#')).count();
    let stamped: String = text
        .lines()
        .map(|l| {
            if l.starts_with('#') {
                format!("{l}\n")
            } else {
                format!("{l} {}\n", NOW as i64)
            }
        })
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("metrics.om");
    std::fs::write(&input, &stamped).unwrap();
    let blocks = dir.path().join("blocks");
    let (status, said) = promtool(
        &[
            "tsdb",
            "create-blocks-from",
            "openmetrics",
            input.to_str().unwrap(),
            blocks.to_str().unwrap(),
        ],
        "",
    );
    assert!(
        status.success(),
        "promtool: {status}\n{said}\n--- input ---\n{stamped}"
    );
    // The block table's NUM SAMPLES column.
    let imported: usize = said
        .lines()
        .skip_while(|l| !l.starts_with("BLOCK ULID"))
        .skip(1)
        .filter_map(|l| l.split_whitespace().nth(4)?.parse::<usize>().ok())
        .sum();
    assert_eq!(imported, samples, "{said}");
}

/// The text 0.0.4 payload, process families included, through promtool's linter.
#[test]
#[cfg_attr(
    not(feature = "system-tests"),
    ignore = "needs promtool (Debian prometheus): scripts/test runs it"
)]
fn promtool_accepts_text004() {
    let text = render(&rich_status(), Format::Text004);
    assert!(text.contains("\nprocess_cpu_seconds_total "), "{text}");
    assert_promtool_lint_clean(&text);
}

#[test]
#[cfg_attr(
    not(feature = "system-tests"),
    ignore = "needs promtool (Debian prometheus): scripts/test runs it"
)]
fn prometheus_parses_openmetrics() {
    let text = render(&rich_status(), Format::OpenMetrics);
    assert!(text.contains("\nprocess_cpu_seconds_total "), "{text}");
    assert_prometheus_parses_openmetrics(&text);
}

/// NaN, infinities, negative and huge values, names that need escaping: both payloads
/// still parse.
#[test]
#[cfg_attr(
    not(feature = "system-tests"),
    ignore = "needs promtool (Debian prometheus): scripts/test runs it"
)]
fn odd_values_still_parse() {
    let mut s = rich_status();
    let mut d = nvme();
    d.name = "odd \"one\"\\\n".into();
    d.identity.model = Some("line\nbreak \"quoted\" back\\slash\r\t\u{0}".into());
    for p in d.probes.values_mut() {
        for o in [&mut p.read, &mut p.write] {
            o.ops_total = u64::MAX;
            o.bytes_total = u64::MAX;
            o.latency_sum_seconds = f64::NAN;
            o.buckets = vec![u64::MAX, 3, 0];
            o.window = Some(WindowQuantiles {
                ops: 1,
                quantiles: [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -0.0],
                max: f64::MAX,
            });
        }
    }
    if let Some(h) = &mut d.health {
        h.report.temperature_celsius = Some(f64::NAN);
        h.report.available_spare_ratio = Some(f64::INFINITY);
        h.report.percentage_used_ratio = Some(-1.0);
        h.report.critical_warning = Some(u8::MAX);
        h.report.host_written_bytes = Some(u128::MAX);
        h.report.media_errors = Some(u64::MAX);
        h.read_unix = f64::NEG_INFINITY;
    }
    d.wear.self_written_bytes_total = u128::MAX;
    d.wear.budget_bytes_per_day = f64::NAN;
    for r in d.last_runs.values_mut() {
        r.duration_seconds = f64::INFINITY;
        r.status = String::new();
        for p in &mut r.points {
            p.workload = "{}=,\"".into();
            p.iops = f64::NAN;
        }
    }
    s.drives.insert(d.name.clone(), d);
    s.scheduler
        .next_due
        .insert("\u{1F4BE} backup".into(), i64::MIN);
    s.started_unix = f64::NAN;
    assert_promtool_lint_clean(&render(&s, Format::Text004));
    assert_prometheus_parses_openmetrics(&render(&s, Format::OpenMetrics));
}

#[test]
fn series_per_drive_stay_under_budget() {
    let text = rendered(Format::Text004);
    let status = rich_status();
    for drive in status.drives.keys() {
        let needle = format!("drive=\"{drive}\"");
        let n = text
            .lines()
            .filter(|l| !l.starts_with('#') && l.contains(&needle))
            .count();
        println!("series for drive {drive}: {n}");
        assert!(n > 0, "no series for {drive}");
        assert!(
            n < 400,
            "{n} series for drive {drive}: over the budget of 400"
        );
    }
}

#[test]
fn absent_and_down_drive() {
    let text = rendered(Format::Text004);
    let down: Vec<&str> = text
        .lines()
        .filter(|l| !l.starts_with('#') && l.contains("drive=\"spare3\""))
        .collect();
    let names: Vec<&str> = down.iter().map(|l| l.split('{').next().unwrap()).collect();
    assert_eq!(
        names,
        [
            "driveprobe_collector_duration_seconds",
            "driveprobe_collector_success",
            "driveprobe_drive_info",
            "driveprobe_drive_up",
            // One per state: never read (the drive has been down since the start).
            "driveprobe_health_state",
            "driveprobe_health_state",
            "driveprobe_health_state",
            "driveprobe_health_state",
            "driveprobe_self_written_bytes_total",
            "driveprobe_wear_budget_bytes",
            "driveprobe_wear_budget_exceeded",
            "driveprobe_wear_budget_runs_bytes",
            "driveprobe_wear_budget_runs_period_seconds",
            "driveprobe_wear_budget_runs_used_bytes",
            "driveprobe_wear_budget_used_bytes",
        ],
        "{}",
        down.join("\n")
    );
    assert!(text.contains("driveprobe_drive_up{drive=\"spare3\"} 0.0\n"));
    assert!(text.contains("driveprobe_health_state{drive=\"spare3\",state=\"not_read_yet\"} 1.0\n"));
}

/// Issue 20: `health_detail_metrics = false` drops everything else the drive says and
/// keeps the headline health series and the link (the link alert reads it).
#[test]
fn detail_metrics_opt_out_keeps_the_headline_and_the_link() {
    let families = |s: &Status, drive: &str| -> BTreeMap<String, usize> {
        let needle = format!("drive=\"{drive}\"");
        let mut m = BTreeMap::new();
        for l in render(s, Format::Text004).lines() {
            if !l.starts_with('#') && l.contains(&needle) {
                *m.entry(l.split('{').next().unwrap().to_string())
                    .or_default() += 1;
            }
        }
        m
    };
    let mut s = rich_status();
    let on_sata = families(&s, "archive1");
    let on_nvme = families(&s, "db1");
    assert_eq!(on_sata["driveprobe_health_ata_attribute_value"], 18);
    assert_eq!(on_sata["driveprobe_health_ata_attribute_raw"], 18);
    assert_eq!(on_sata["driveprobe_health_ata_attributes_failed"], 2);
    assert_eq!(on_sata["driveprobe_health_ata_device_statistic"], 6);
    assert_eq!(on_sata["driveprobe_health_sata_phy_events_total"], 3);
    assert_eq!(on_sata["driveprobe_health_self_test_failed"], 2);
    assert_eq!(on_sata["driveprobe_link_speed_transfers_per_second"], 1);
    assert!(
        !on_sata.contains_key("driveprobe_link_width_lanes"),
        "SATA has no width"
    );
    assert_eq!(
        on_nvme["driveprobe_health_nvme_temperature_sensor_celsius"],
        2
    );
    assert_eq!(
        on_nvme["driveprobe_health_nvme_thermal_transitions_total"],
        2
    );
    assert_eq!(on_nvme["driveprobe_health_nvme_host_commands_total"], 2);
    assert_eq!(on_nvme["driveprobe_link_max_width_lanes"], 1);
    for d in s.drives.values_mut() {
        d.health_detail_metrics_off = true;
    }
    for (drive, on) in [("archive1", on_sata), ("db1", on_nvme)] {
        let off = families(&s, drive);
        let dropped: Vec<&String> = on.keys().filter(|k| !off.contains_key(*k)).collect();
        assert!(!dropped.is_empty());
        for name in &dropped {
            assert!(
                name.starts_with("driveprobe_health_ata_")
                    || name.starts_with("driveprobe_health_sata_")
                    || name.starts_with("driveprobe_health_nvme_")
                    || name.starts_with("driveprobe_health_scsi_")
                    || name.starts_with("driveprobe_health_self_test_"),
                "{drive}: {name} is not detail"
            );
        }
        for (name, n) in &off {
            assert_eq!(on.get(name), Some(n), "{drive}: {name}");
        }
        assert!(off.contains_key("driveprobe_link_speed_transfers_per_second"));
        assert!(off.contains_key("driveprobe_health_temperature_celsius"));
    }
}

/// Issue 20: a SAS drive's error counters by direction, defects and start-stop counts.
#[test]
#[cfg_attr(
    not(feature = "system-tests"),
    ignore = "needs promtool (Debian prometheus): scripts/test runs it"
)]
fn sas_detail_series() {
    let mut s = rich_status();
    let d = s.drives.get_mut("archive1").unwrap();
    let h = d.health.as_mut().unwrap();
    h.report = detail("detail-sas.json");
    let text = render(&s, Format::Text004);
    for want in [
        "driveprobe_health_scsi_corrected_errors_total{drive=\"archive1\",direction=\"read\"} 13\n",
        "driveprobe_health_scsi_corrected_errors_total{drive=\"archive1\",direction=\"verify\"} 4\n",
        "driveprobe_health_scsi_uncorrected_errors_total{drive=\"archive1\",direction=\"read\"} 1\n",
        "driveprobe_health_scsi_processed_bytes_total{drive=\"archive1\",direction=\"write\"} 99001000000",
        "driveprobe_health_scsi_grown_defects{drive=\"archive1\"} 3.0\n",
        "driveprobe_health_scsi_start_stop_cycles_total{drive=\"archive1\"} 88\n",
        "driveprobe_health_scsi_load_unload_cycles_rated{drive=\"archive1\"} 600000.0\n",
        "driveprobe_health_self_test_failed{drive=\"archive1\",kind=\"extended\"} 1.0\n",
        "driveprobe_health_self_test_first_failing_lba{drive=\"archive1\",kind=\"extended\"} 99999.0\n",
        "driveprobe_health_self_test_failed{drive=\"archive1\",kind=\"short\"} 0.0\n",
    ] {
        assert!(text.contains(want), "no {want:?} in\n{text}");
    }
    assert!(!text.contains(
        "driveprobe_health_self_test_first_failing_lba{drive=\"archive1\",kind=\"short\"}"
    ));
    assert_promtool_lint_clean(&text);
}
