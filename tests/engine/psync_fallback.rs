//! When io_uring is unavailable (old kernel, or a seccomp filter as in many containers),
//! `bench` falls back to psync, says so, and still measures. The filter here is a real
//! seccomp filter (libseccomp's Python binding, Debian package python3-seccomp) that
//! makes io_uring_setup fail, installed before exec'ing the binary.

use crate::common;

use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

const WRAPPER: &str = r#"
import errno, os, sys, seccomp
f = seccomp.SyscallFilter(seccomp.ALLOW)
f.add_rule(seccomp.ERRNO(getattr(errno, sys.argv[1])), "io_uring_setup")
f.load()
os.execv(sys.argv[2], sys.argv[2:])
"#;

fn run_filtered(errno: &str, extra: &[&str]) -> std::process::Output {
    let python = "/usr/bin/python3";
    let ok = Command::new(python)
        .args(["-c", "import seccomp"])
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    assert!(
        ok,
        "needs Debian's python3-seccomp for /usr/bin/python3 (scripts/test installs it)"
    );
    // One path per call: the tests run in parallel in one process, and several of their
    // calls filter with the same errno, so a path made of the pid and errno alone let one
    // test's clean-up remove the file another's bench had just created.
    static CALLS: AtomicU32 = AtomicU32::new(0);
    let n = CALLS.fetch_add(1, Ordering::Relaxed);
    let path = format!("/dev/shm/dp-test-psync-{}-{errno}-{n}", std::process::id());
    let _ = std::fs::remove_file(&path);
    let out = Command::new(python)
        .args([
            "-c",
            WRAPPER,
            errno,
            env!("CARGO_BIN_EXE_driveprobe"),
            "bench",
            &path,
        ])
        .args([
            "--size=4m",
            "--rw=randread",
            "--runtime=1",
            "--output-format=json",
        ])
        .args(extra)
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&path);
    out
}

#[test]
fn seccomp_without_io_uring_falls_back_to_psync() {
    for (errno, why) in [("ENOSYS", "no io_uring"), ("EPERM", "disabled")] {
        let out = run_filtered(errno, &["--iodepth=4"]);
        common::assert_ok(&out, "driveprobe bench under seccomp");
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["engine"], "psync");
        let note = v["engine_note"].as_str().unwrap();
        assert!(
            note.contains("io_uring unavailable") && note.contains(why),
            "{note}"
        );
        assert!(note.contains("queue depth is 1"), "{note}");
        assert!(v["read"]["ops"].as_u64().unwrap() > 100);
    }
}

#[test]
fn asking_for_io_uring_where_it_is_blocked_is_one_clear_line() {
    let out = run_filtered("EPERM", &["--ioengine=io_uring"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("driveprobe: error: io_uring is not available here"),
        "{err}"
    );
    assert!(err.contains("--ioengine psync"), "{err}");
}

/// `--ioengine=libaio` runs io_uring, or psync where io_uring is blocked: the substitution
/// then names psync and says the queue depth was 1 per worker, not the depth asked (review
/// of issue 17, A2: it said io_uring "keeps the same queue depth" over a psync run).
#[test]
fn libaio_falling_back_to_psync_says_the_depth_was_one() {
    let out = run_filtered("EPERM", &["--ioengine=libaio", "--iodepth=16"]);
    common::assert_ok(&out, "driveprobe bench --ioengine=libaio under seccomp");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["engine"], "psync");
    let sub = &v["substitutions"][0];
    assert_eq!(sub["option"], "ioengine");
    assert_eq!(sub["used"], "psync at queue depth 1");
    let why = sub["why"].as_str().unwrap();
    assert!(why.contains("io_uring is unavailable here"), "{why}");
    assert!(
        why.contains("queue depth was 1 per worker, not 16"),
        "{why}"
    );
    assert!(!why.contains("keeps the same queue depth"), "{why}");
    // At depth 1 nothing is lost, and the why says that instead.
    let out = run_filtered("EPERM", &["--ioengine=libaio"]);
    common::assert_ok(&out, "driveprobe bench --ioengine=libaio under seccomp");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["substitutions"][0]["used"], "psync");
    let why = v["substitutions"][0]["why"].as_str().unwrap();
    assert!(why.contains("at queue depth 1"), "{why}");
}
