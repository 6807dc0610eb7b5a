//! `driveprobe bench` run as a child process, and what the tests assert of one run: its
//! exit status, its one-line errors, its JSON. Shared by `tests/cli/bench_cli.rs` (the runs
//! that need no root) and `tests/safety/bench_refusals.rs` (the runs as root).

use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::Value;

pub const BIN: &str = env!("CARGO_BIN_EXE_driveprobe");

/// What one run of the binary did.
pub struct Run {
    args: Vec<String>,
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

/// `driveprobe bench ARGS...`.
pub fn bench(args: &[&str]) -> Run {
    run_cmd(Command::new(BIN), args)
}

/// `driveprobe bench ARGS...` as user and group nobody (65534), without supplementary groups.
pub fn bench_as_nobody(args: &[&str]) -> Run {
    let mut cmd = Command::new("setpriv");
    cmd.args([
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        "--",
        BIN,
    ]);
    run_cmd(cmd, args)
}

pub fn run_cmd(mut cmd: Command, args: &[&str]) -> Run {
    let out = cmd
        .arg("bench")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    let run = Run {
        args: args.iter().map(|s| s.to_string()).collect(),
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    assert!(
        !run.stderr.contains("panicked"),
        "bench {:?} panicked:\n{}",
        run.args,
        run.stderr
    );
    assert!(
        run.code.is_some(),
        "bench {:?} was killed by a signal ({}):\n{}",
        run.args,
        out.status,
        run.stderr
    );
    run
}

impl Run {
    /// Asserts exit status 0.
    pub fn ok(&self) -> &Self {
        assert_eq!(
            self.code,
            Some(0),
            "bench {:?} failed:\n{}",
            self.args,
            self.stderr
        );
        self
    }

    /// Asserts one of `codes`, exactly one `driveprobe: error:` line on stderr that contains
    /// every needle, and no other kind of line on stderr. Returns the error line.
    pub fn fails(&self, codes: &[i32], needles: &[&str]) -> String {
        assert!(
            self.code.is_some_and(|c| codes.contains(&c)),
            "bench {:?}: exit status {:?}, expected one of {codes:?}; stderr:\n{}",
            self.args,
            self.code,
            self.stderr
        );
        let errors: Vec<&str> = self
            .stderr
            .lines()
            .filter(|l| l.starts_with("driveprobe: error:"))
            .collect();
        assert_eq!(
            errors.len(),
            1,
            "bench {:?}: expected exactly one `driveprobe: error:` line, stderr:\n{}",
            self.args,
            self.stderr
        );
        assert!(
            self.stderr.lines().all(|l| l.starts_with("driveprobe: ")),
            "bench {:?}: stray lines on stderr:\n{}",
            self.args,
            self.stderr
        );
        let line = errors[0].to_string();
        for n in needles {
            assert!(
                line.contains(n),
                "bench {:?}: the error should mention {n:?}: {line}",
                self.args
            );
        }
        line
    }

    /// A usage error: status 2 and nothing on stdout.
    pub fn usage_error(&self, needles: &[&str]) -> String {
        let line = self.fails(&[2], needles);
        assert_eq!(self.stdout, "", "bench {:?}: stdout on error", self.args);
        assert_eq!(self.stderr.lines().count(), 1, "{}", self.stderr);
        line
    }

    /// A runtime failure before any I/O: status 1, one line, nothing on stdout.
    pub fn runtime_error(&self, needles: &[&str]) -> String {
        let line = self.fails(&[1], needles);
        assert_eq!(self.stdout, "", "bench {:?}: stdout on error", self.args);
        assert_eq!(self.stderr.lines().count(), 1, "{}", self.stderr);
        line
    }

    /// A usage error reported by clap: status 2, one line, `driveprobe: error:` first, a
    /// usage hint.
    pub fn clap_error(&self, needle: &str) {
        assert_eq!(self.code, Some(2), "bench {:?}: {}", self.args, self.stderr);
        assert_eq!(self.stderr.lines().count(), 1, "{}", self.stderr);
        assert!(
            self.stderr.starts_with("driveprobe: error:") && self.stderr.contains(needle),
            "bench {:?}: unexpected clap error:\n{}",
            self.args,
            self.stderr
        );
        assert!(self.stderr.contains("--help"), "{}", self.stderr);
        assert_eq!(self.stdout, "");
    }

    /// stdout as exactly one JSON document.
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| {
            panic!(
                "bench {:?}: stdout is not one JSON document ({e}):\n{}",
                self.args, self.stdout
            )
        })
    }
}

pub fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

pub fn u64_of(v: &Value, what: &str) -> u64 {
    v.as_u64()
        .unwrap_or_else(|| panic!("{what} is not an unsigned integer: {v}"))
}
