//! `--help` snapshots: a change to the command line shows up as a diff in review.
//! Regenerate with `UPDATE_SNAPSHOTS=1 cargo test --test cli cli_help::`.

use crate::common;

use std::path::PathBuf;
use std::process::Command;

fn check(args: &[&str], name: &str) {
    let out = Command::new(env!("CARGO_BIN_EXE_driveprobe"))
        .args(args)
        .env("COLUMNS", "100")
        .output()
        .unwrap();
    common::assert_ok(&out, &format!("driveprobe {args:?}"));
    let got = String::from_utf8(out.stdout).unwrap();
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/snapshots")
        .join(name);
    if std::env::var_os("UPDATE_SNAPSHOTS").is_some() {
        std::fs::write(&path, &got).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        got == want,
        "{} differs from `driveprobe {}`; if the change is meant, run UPDATE_SNAPSHOTS=1 cargo test --test cli cli_help::\n--- got ---\n{got}",
        path.display(),
        args.join(" ")
    );
}

#[test]
fn top_level_help() {
    check(&["--help"], "help.txt");
}

#[test]
fn bench_help() {
    check(&["bench", "--help"], "bench-help.txt");
}

#[test]
fn daemon_help() {
    check(&["daemon", "--help"], "daemon-help.txt");
}

#[test]
fn discover_help() {
    check(&["discover", "--help"], "discover-help.txt");
}

#[test]
fn health_help() {
    check(&["health", "--help"], "health-help.txt");
}
