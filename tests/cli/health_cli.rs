//! `driveprobe health` end to end on saved data (the live devices are in vm_health.rs):
//! NVMe log pages captured from QEMU, smartctl JSON from real drives, and bad input.

use crate::common;

use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::Value;

fn fixture(p: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(p)
        .display()
        .to_string()
}

fn health(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_driveprobe"))
        .arg("health")
        .args(args)
        .output()
        .unwrap()
}

fn json(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

fn one_line_error(out: &Output, status: i32, needle: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(status), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("driveprobe: error: "), "{err}");
    assert!(err.contains(needle), "{err}");
    assert!(!err.contains("panicked"));
}

#[test]
fn nvme_log_with_identify_data_from_qemu() {
    let out = health(&[
        "--from-nvme-log",
        &fixture("nvme/qemu-smart-log-after-64MiB.bin"),
        "--nvme-id-ctrl",
        &fixture("nvme/qemu-id-ctrl.bin"),
        "--nvme-id-ns",
        &fixture("nvme/qemu-id-ns.bin"),
        "--json",
    ]);
    common::assert_ok(&out, "driveprobe health");
    let v = json(&out);
    let h = &v["health"];
    assert_eq!(h["identity"]["serial"], "TESTSN01");
    assert_eq!(h["identity"]["model"], "QEMU NVMe Ctrl");
    assert_eq!(h["identity"]["transport"], "nvme");
    assert_eq!(h["identity"]["capacity_bytes"], 1u64 << 30);
    assert_eq!(h["identity"]["logical_block_size"], 512);
    assert_eq!(h["host_written_bytes"], 132 * 512_000);
    assert_eq!(h["critical_warning"], 0);
    // 323 K is 50 °C, as smartctl says of the same drive (issue 20).
    assert_eq!(h["temperature_celsius"], 50.0);
    assert_eq!(h["temperature_warning_celsius"], 70.0, "343 K");
    assert_eq!(h["temperature_critical_celsius"], 100.0, "373 K");
    assert_eq!(h["source"], "nvme-log-file");
    assert_eq!(v["assessment"]["verdict"], "ok");
}

#[test]
fn nvme_log_with_critical_warning_is_failing_with_status_4() {
    let out = health(&[
        "--from-nvme-log",
        &fixture("nvme/qemu-smart-log-critical-0x4.bin"),
    ]);
    assert_eq!(out.status.code(), Some(4));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("verdict: FAILING"), "{text}");
    assert!(text.contains("reliability degraded"), "{text}");
    // A log page alone does not say who the drive is: unknown, not made up.
    assert!(
        text.contains("unknown model (nvme), serial unknown"),
        "{text}"
    );
}

#[test]
fn smartctl_json_with_a_rating_gives_an_endurance_estimate() {
    let out = health(&[
        "--from-smartctl-json",
        &fixture("smartctl/smart-nvme.json"),
        "--rated-tbw",
        "200TB",
        "--warranty-years",
        "5",
        "--mtbf-hours",
        "1600000",
        "--json",
    ]);
    common::assert_ok(&out, "driveprobe health");
    let v = json(&out);
    let e = &v["endurance"];
    assert_eq!(e["rated_bytes"], 2e14);
    let written = v["health"]["host_written_bytes"].as_f64().unwrap();
    let used = e["used_ratio"].as_f64().unwrap();
    assert!((used - written / 2e14).abs() < 1e-12, "{used}");
    assert_eq!(e["used_basis"], "host_writes");
    assert!(e["projected_wearout_unix_seconds"].as_f64().unwrap() > 1.7e9);
    let afr = e["annual_failure_rate"].as_f64().unwrap();
    assert!((afr - (1.0 - (-8766.0f64 / 1.6e6).exp())).abs() < 1e-12);
}

#[test]
fn failing_sata_drive_exits_4_and_says_why() {
    let out = health(&[
        "--from-smartctl-json",
        &fixture("smartctl/smart-fail2.json"),
    ]);
    assert_eq!(out.status.code(), Some(4));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("SMART self-assessment says FAILED"), "{text}");
}

#[test]
fn bad_input_is_one_clear_line() {
    let dir = tempfile::tempdir().unwrap();
    let garbage = dir.path().join("garbage.json");
    std::fs::write(&garbage, "this is not json {").unwrap();
    one_line_error(
        &health(&["--from-smartctl-json", garbage.to_str().unwrap()]),
        1,
        "garbage.json",
    );
    let short = dir.path().join("short.bin");
    std::fs::write(&short, [0u8; 100]).unwrap();
    one_line_error(
        &health(&["--from-nvme-log", short.to_str().unwrap()]),
        1,
        "truncated",
    );
    let file = dir.path().join("plain-file");
    std::fs::write(&file, "x").unwrap();
    one_line_error(&health(&[file.to_str().unwrap()]), 1, "not a disk");
    one_line_error(&health(&["/nonexistent/dev"]), 1, "/nonexistent/dev");
    one_line_error(
        &health(&[
            "--from-nvme-log",
            &fixture("nvme/qemu-smart-log.bin"),
            "--rated-dwpd",
            "3",
        ]),
        2,
        "--warranty-years",
    );
    one_line_error(
        &health(&[
            "--from-nvme-log",
            &fixture("nvme/qemu-smart-log.bin"),
            "--rated-tbw",
            "lots",
        ]),
        2,
        "--rated-tbw",
    );
}

#[test]
fn empty_smartctl_document_is_unknown_not_made_up() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.json");
    std::fs::write(&empty, "{}").unwrap();
    let out = health(&["--from-smartctl-json", empty.to_str().unwrap(), "--json"]);
    assert_eq!(out.status.code(), Some(0));
    let v = json(&out);
    assert_eq!(v["assessment"]["verdict"], "unknown");
    assert_eq!(v["health"]["temperature_celsius"], Value::Null);
    assert_eq!(v["health"]["host_written_bytes"], Value::Null);
}

/// Issue 17: a rating without a unit is refused, not read as bytes ("--rated-tbw 150"
/// gave "used 357435705002.7%", verdict OK).
#[test]
fn a_rating_without_a_unit_is_refused() {
    for flag in ["150", "600", "3.5"] {
        let out = health(&[
            "--from-smartctl-json",
            &fixture("smartctl/smart-nvme.json"),
            "--rated-tbw",
            flag,
        ]);
        one_line_error(&out, 2, "--rated-tbw");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("has no unit") && err.contains("600TB"),
            "{err}"
        );
        assert!(out.stdout.is_empty());
    }
}

/// Host writes past the rating: a warning (exit 3) with the reason, and the wear-out date
/// shown as past, not as a date to come.
#[test]
fn host_writes_past_the_rating_are_a_warning_with_a_past_date() {
    // The 660p fixture has written 3.98 TB in 100 days.
    let args = [
        "--from-smartctl-json",
        &fixture("smartctl/smart-nvme.json"),
        "--rated-tbw",
        "1TB",
    ];
    let out = health(&args);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("verdict: WARNING"), "{text}");
    assert!(text.contains("past its rated life"), "{text}");
    let wearout = text
        .lines()
        .find(|l| l.contains("projected wear-out"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        wearout.contains("in the past: passed 75 days ago"),
        "{wearout}"
    );
    let mut json_args = args.to_vec();
    json_args.push("--json");
    let out = health(&json_args);
    assert_eq!(out.status.code(), Some(3));
    let v = json(&out);
    assert_eq!(v["assessment"]["verdict"], "warning");
    let e = &v["endurance"];
    assert!(e["used_ratio"].as_f64().unwrap() > 3.9);
    assert_eq!(e["days_left"], 0.0);
    let at = e["projected_wearout_unix_seconds"].as_f64().unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    // Passed after 25 of its 100 days: 75 days before now.
    assert!(
        (now - at - 75.0 * 86_400.0).abs() < 2.0 * 86_400.0,
        "{at} {now}"
    );
    // A rating it has not reached yet is not a warning.
    let out = health(&[
        "--from-smartctl-json",
        &fixture("smartctl/smart-nvme.json"),
        "--rated-tbw",
        "600TB",
    ]);
    common::assert_ok(&out, "driveprobe health");
}

/// `smartctl --scan` and `--scan-open` output is named as such, with the command to run.
#[test]
fn scan_output_says_what_to_run_instead() {
    for (file, run) in [
        ("smartctl/scan-nvme.json", "smartctl --json=c -x /dev/nvme0"),
        (
            "smartctl/scan-megaraid.json",
            "smartctl --json=c -x -d megaraid,0 /dev/bus/0",
        ),
        (
            "smartctl/scan-open-sda.json",
            "smartctl --json=c -x /dev/sda",
        ),
    ] {
        let out = health(&["--from-smartctl-json", &fixture(file)]);
        one_line_error(&out, 1, "output of `smartctl --scan`");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(run), "{err}");
        assert!(!err.contains("no health data"), "{err}");
    }
}

/// The reader's notes print under the SMART data they are about, the estimate's under
/// endurance.
#[test]
fn notes_print_under_their_own_section() {
    // 56 grown defects: a warning.
    let out = health(&["--from-smartctl-json", &fixture("smartctl/smart-scsi.json")]);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    let endurance = lines.iter().position(|l| *l == "endurance:").unwrap();
    let smart_note = lines
        .iter()
        .position(|l| l.contains("note: SAS host bytes"))
        .unwrap_or_else(|| panic!("{text}"));
    let rating_note = lines
        .iter()
        .position(|l| l.contains("note: no rating"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(smart_note < endurance && endurance < rating_note, "{text}");
}

/// `--json` prints a JSON error object on stdout when there is no reading (stdout was
/// empty), beside the one line on stderr and the exit status.
#[test]
fn json_error_object_when_the_drive_cannot_be_read() {
    let scan = fixture("smartctl/scan-nvme.json");
    for (args, status, needle) in [
        (vec!["/nonexistent/dev", "--json"], 1, "/nonexistent/dev"),
        (
            vec!["--from-smartctl-json", scan.as_str(), "--json"],
            1,
            "smartctl --scan",
        ),
    ] {
        let out = health(&args);
        one_line_error(&out, status, needle);
        let v = json(&out);
        assert!(v["error"].as_str().unwrap().contains(needle), "{v}");
        assert_eq!(v["exit_status"], status);
        assert!(v["device"].is_string(), "{v}");
        assert!(v.get("health").is_none());
    }
}

/// Review of issue 17, C2: `driveprobe health --json /nonexistent | true` panicked
/// ("failed printing to stdout: Broken pipe"). Every subcommand that prints ends quietly
/// on a closed stdout, with the status it has with an open one.
#[test]
fn a_closed_stdout_is_quiet_and_keeps_the_status() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("d.toml");
    std::fs::write(&cfg, "").unwrap();
    let scsi = fixture("smartctl/smart-scsi.json");
    let cfg = cfg.to_str().unwrap();
    let cases: [&[&str]; 6] = [
        &["health", "--json", "/nonexistent"],
        &["health", "--from-smartctl-json", &scsi],
        &["health", "--from-smartctl-json", &scsi, "--json"],
        &["health", "/nonexistent"],
        &["bench", "--list-suites"],
        &["check-config", cfg],
    ];
    for args in cases {
        let open = Command::new(env!("CARGO_BIN_EXE_driveprobe"))
            .args(args)
            .output()
            .unwrap();
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let closed = Command::new(env!("CARGO_BIN_EXE_driveprobe"))
            .args(args)
            .stdout(writer)
            .stderr(std::process::Stdio::piped())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&closed.stderr);
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert!(!err.contains("Broken pipe"), "{args:?}: {err}");
        assert_eq!(closed.status.code(), open.status.code(), "{args:?}: {err}");
        assert_eq!(
            String::from_utf8_lossy(&open.stderr),
            err,
            "{args:?}: the same stderr"
        );
    }
}

/// Review of issue 17, C1: "a list of 2 device(s)", "? (unknown)".
#[test]
fn counts_and_unknowns_are_spelled_one_way() {
    for (file, devices) in [
        ("smartctl/scan-nvme.json", "a list of 1 device:"),
        ("smartctl/scan-megaraid.json", "a list of 2 devices:"),
    ] {
        let out = health(&["--from-smartctl-json", &fixture(file)]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(devices), "{err}");
        assert!(!err.contains("(s)"), "{err}");
    }
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.json");
    std::fs::write(&empty, "{}").unwrap();
    let out = health(&["--from-smartctl-json", empty.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&out.stdout);
    let first = text.lines().next().unwrap();
    assert!(!first.contains('?'), "{first}");
    assert!(first.contains("unknown model, serial unknown"), "{first}");
}

/// Issue 20: `driveprobe health` shows the link, the latest self-tests and the attributes
/// at or below threshold, and its JSON holds every attribute.
#[test]
fn text_and_json_show_the_link_self_tests_and_every_attribute() {
    let f = fixture("smartctl/detail-sata.json");
    let out = health(&["--from-smartctl-json", &f]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("link                   1.5 Gb/s, DEGRADED (maximum 6.0 Gb/s)"),
        "{text}"
    );
    assert!(
        text.contains("extended self-test     failed at 20100 h, first failing LBA 123456789"),
        "{text}"
    );
    assert!(
        text.contains("short self-test        passed at 20090 h"),
        "{text}"
    );
    assert!(
        text.contains(
            "ATA attributes         5, at or below threshold: 5 Reallocated_Sector_Ct (now), 190 Airflow_Temperature_Cel (in the past)"
        ),
        "{text}"
    );
    let v = json(&health(&["--from-smartctl-json", &f, "--json"]));
    let attrs = v["health"]["ata_attributes"].as_array().unwrap();
    assert_eq!(attrs.len(), 5);
    assert_eq!(attrs[1]["name"], "Reallocated_Sector_Ct");
    assert_eq!(attrs[1]["failed_now"], true);
    assert_eq!(v["health"]["link"]["max_speed_transfers_per_second"], 6e9);
    assert_eq!(v["health"]["ata_device_statistics"][4]["value"], -5);
}

/// `--device-type` takes what a `[[drive]]`'s smartctl_type takes (the same check), and
/// refuses the rest as bad usage before anything runs.
#[test]
fn device_type_is_checked_like_smartctl_type() {
    for bad in ["-d sat", "megaraid 1", "", "sat;reboot"] {
        let out = health(&["/dev/null", &format!("--device-type={bad}")]);
        assert_eq!(out.status.code(), Some(2), "{bad:?}: {out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("--device-type '") && err.contains("is not a smartctl -d type"),
            "{bad:?}: {err}"
        );
        assert_eq!(err.lines().count(), 1, "{err}");
    }
    // It needs a device (not saved JSON).
    let out = health(&[
        "--from-smartctl-json",
        &fixture("smartctl/smart-ata.json"),
        "--device-type",
        "sat",
    ]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
}

/// A valid `--device-type` reaches smartctl as `-d TYPE` before the device, and the
/// device need not be a node here (smartctl maps `/dev/bus/0` itself).
#[test]
fn device_type_is_passed_to_smartctl() {
    let tools = tempfile::Builder::new()
        .prefix("dp-health-cli-")
        .tempdir()
        .unwrap();
    let args = tools.path().join("args");
    let script = format!(
        "#!/bin/sh\necho \"$@\" > '{}'\nexec cat '{}'\n",
        args.display(),
        fixture("smartctl/smart-megaraid0.json")
    );
    let smartctl = tools.path().join("smartctl");
    std::fs::write(&smartctl, script).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&smartctl, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!(
        "{}:{}",
        tools.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new(env!("CARGO_BIN_EXE_driveprobe"))
        .args([
            "health",
            "/dev/bus/0",
            "--device-type",
            " sat+megaraid,0 ",
            "--json",
        ])
        .env("PATH", path)
        .output()
        .unwrap();
    let v = json(&out);
    assert_eq!(v["device"], "/dev/bus/0", "{v}");
    let args = std::fs::read_to_string(&args).unwrap();
    assert!(
        args.trim_end().ends_with("-d sat+megaraid,0 /dev/bus/0"),
        "{args}"
    );
}
