//! What the docs, the help and the errors say agrees with what the code does: one measured
//! figure for a quick-scale suite everywhere, `--cpus-allowed-policy` as `engine::cpu`
//! places the workers, the example config installed the README's way, the busy-port error,
//! and counts of one in the singular.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_driveprobe");

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(root().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// Text with every run of white space (line breaks and indentation included) as one space.
fn flat(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn stdout_of(args: &[&str]) -> String {
    let out = Command::new(BIN).args(args).output().unwrap();
    common::assert_ok(&out, &format!("driveprobe {}", args.join(" ")));
    String::from_utf8(out.stdout).unwrap()
}

// ------------------------------------------------------------------ quick scale

/// The figure BENCHMARKS.md measured: `**about N s**` in its "Quick scale" section.
fn measured_quick_figure() -> String {
    let b = read("BENCHMARKS.md");
    let section = &b[b
        .find("# Quick scale")
        .expect("BENCHMARKS.md has a Quick scale section")..];
    let at = section.find("**about ").expect("a bold 'about N s' figure");
    let figure = &section[at + 2..];
    let figure = &figure[..figure.find("**").unwrap()];
    assert!(
        figure.ends_with(" s") && figure[6..figure.len() - 2].parse::<u32>().is_ok(),
        "{figure:?} is not 'about N s'"
    );
    figure.to_string()
}

#[test]
fn quick_scale_duration_is_one_measured_figure_everywhere() {
    let figure = measured_quick_figure();
    let readme = flat(&read("README.md"));
    let scale = &readme[readme.find("**Scale**").unwrap()..];
    let scale = &scale[..scale.find(" - **").unwrap_or(scale.len())];
    let help = flat(&stdout_of(&["bench", "--help"]));
    let list = flat(&stdout_of(&["bench", "--list-suites"]));
    for (what, text) in [
        ("README.md's Scale", scale),
        ("bench --help", help.as_str()),
        ("bench --list-suites", list.as_str()),
    ] {
        assert!(text.contains(&figure), "{what} does not say {figure:?}");
        for other in ["a minute", "half a minute"] {
            let quick = &text[text.find("quick").unwrap()..];
            let quick = &quick[..quick.len().min(120)];
            assert!(!quick.contains(other), "{what} says {other:?}: {quick}");
        }
    }
}

// ------------------------------------------------------------------ CPU placement

/// `worker_cpus` of a short bench run: per worker, its CPUs, or None when unconfined.
fn placement(dir: &Path, numjobs: usize, iodepth: u32, policy: &str) -> Vec<Option<Vec<u64>>> {
    placement_and_allowed(dir, numjobs, iodepth, policy).0
}

/// [`placement`], and how many CPUs the process may use (`cpus_allowed`).
fn placement_and_allowed(
    dir: &Path,
    numjobs: usize,
    iodepth: u32,
    policy: &str,
) -> (Vec<Option<Vec<u64>>>, usize) {
    let out = Command::new(BIN)
        .arg("bench")
        .arg(dir.join("cpu.dat"))
        .args([
            "--size",
            "4m",
            "--rw",
            "randread",
            "--bs",
            "4k",
            "--runtime",
            "0.2s",
        ])
        .args(["--numjobs", &numjobs.to_string()])
        .args(["--iodepth", &iodepth.to_string()])
        .args(["--cpus-allowed-policy", policy, "--output-format", "json"])
        .output()
        .unwrap();
    common::assert_ok(&out, "driveprobe bench");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let allowed = v["cpus_allowed"].as_array().expect("cpus_allowed").len();
    let workers = v["worker_cpus"]
        .as_array()
        .expect("worker_cpus in bench's JSON")
        .iter()
        .map(|w| {
            w.as_array()
                .map(|c| c.iter().map(|c| c.as_u64().unwrap()).collect())
        })
        .collect();
    (workers, allowed)
}

#[test]
fn cpus_allowed_policy_help_says_what_the_engine_does() {
    let help = flat(&stdout_of(&["bench", "--help"]));
    let at = help.find("--cpus-allowed-policy").unwrap();
    let text = &help[at..at + 700.min(help.len() - at)];
    for claim in [
        "one CPU each with as many workers as CPUs or at --iodepth 1",
        "a share each with fewer workers",
        "not confined when they outnumber the CPUs, when only one CPU is allowed, or when one worker has --iodepth above 1",
        "`shared` lets every worker run on any allowed CPU",
    ] {
        assert!(text.contains(claim), "the help does not say {claim:?}: {text}");
    }
    // The old help said one worker is never confined: at --iodepth 1 it is.
    assert!(!text.contains("never confined"), "{text}");

    // Each claim, as the engine places the workers on this machine.
    let dir = common::shm_dir("docs-cpu");
    let confined_one_each =
        |p: &[Option<Vec<u64>>]| p.iter().all(|c| c.as_ref().is_some_and(|c| c.len() == 1));
    let unconfined = |p: &[Option<Vec<u64>>]| p.iter().all(Option::is_none);
    let (one_shallow, allowed) = placement_and_allowed(dir.path(), 1, 1, "split");
    if allowed >= 2 {
        assert!(confined_one_each(&one_shallow), "one worker at depth 1");
        assert!(
            unconfined(&placement(dir.path(), 1, 4, "split")),
            "one deeper worker"
        );
        assert!(
            confined_one_each(&placement(dir.path(), allowed, 4, "split")),
            "as many workers as CPUs"
        );
        assert!(
            unconfined(&placement(dir.path(), allowed + 1, 1, "split")),
            "more workers than CPUs"
        );
    } else {
        assert!(unconfined(&one_shallow), "one CPU allowed");
    }
    assert!(unconfined(&placement(dir.path(), 2, 1, "shared")), "shared");
}

// ------------------------------------------------------------------ installing

/// The `install` lines of README.md's "Installing" block for other distributions (the
/// binary alone; the package installs its own config) that put files under
/// /etc/driveprobe, with that folder moved to `to`.
fn readme_install_lines(to: &Path) -> Vec<String> {
    let readme = read("README.md");
    let at = readme
        .find("**Other distributions: the binary alone**")
        .expect("README has an Installing step for other distributions");
    let block = &readme[at..];
    let start = block.find("```sh").expect("with a shell block") + 5;
    let block = &block[start..start + block[start..].find("```").unwrap()];
    let lines: Vec<String> = block
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("install ") && l.contains("/etc/driveprobe"))
        .map(|l| l.replace("/etc/driveprobe", &to.display().to_string()))
        .collect();
    assert!(
        !lines.is_empty(),
        "no install line for /etc/driveprobe in:\n{block}"
    );
    lines
}

fn check_config(file: &Path) -> Output {
    Command::new(BIN)
        .arg("check-config")
        .arg(file)
        .output()
        .unwrap()
}

#[test]
fn example_config_installs_as_the_readme_says() {
    let etc = tempfile::tempdir().unwrap();
    for line in readme_install_lines(etc.path()) {
        let out = Command::new("sh")
            .args(["-c", &line])
            .current_dir(root())
            .output()
            .unwrap();
        common::assert_ok(&out, &line);
    }
    let config = etc.path().join("driveprobe.toml");
    let out = check_config(&config);
    common::assert_ok(&out, "check-config on the installed example");

    // Every relative path the example names resolves beside the installed config.
    let text = read("config/driveprobe.example.toml");
    let v: toml::Value = toml::from_str(&text).unwrap();
    for s in v["schedule"].as_array().unwrap() {
        if let Some(job) = s.get("fio_job").and_then(|j| j.as_str()) {
            assert!(
                Path::new(job).is_absolute() || etc.path().join(job).is_file(),
                "{job} is not installed beside the config"
            );
        }
    }

    // The config alone (the README before issue 17) is refused, naming the job file.
    let bare = tempfile::tempdir().unwrap();
    std::fs::copy(
        root().join("config/driveprobe.example.toml"),
        bare.path().join("driveprobe.toml"),
    )
    .unwrap();
    let out = check_config(&bare.path().join("driveprobe.toml"));
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("fio-jobs/nightly-mix.fio"));
}

// ------------------------------------------------------------------ a busy port

/// Runs the daemon until it exits (at most 30 s; it must not start).
fn daemon_until_exit(args: &[&str], state: &Path) -> Output {
    let mut child = Command::new(BIN)
        .arg("daemon")
        .args(args)
        .arg("--state-dir")
        .arg(state)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "the daemon started on a busy port: {}",
                String::from_utf8_lossy(&out.stdout)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

#[test]
fn a_busy_port_error_names_daemon_listen_without_a_server_section() {
    // The default address, held here (or already held by something else: busy either way).
    let _holder = std::net::TcpListener::bind(driveprobe::config::DEFAULT_LISTEN);
    let dir = common::shm_dir("docs-port");
    let config = dir.path().join("no-server.toml");
    std::fs::write(
        &config,
        format!(
            "state_dir = \"{}\"\ndiscovery.enabled = false\n\n[[drive]]\nname = \"a\"\nfile_target = {{ path = \"{}\", size = \"4MiB\" }}\n",
            dir.path().join("state").display(),
            dir.path().join("a.dat").display()
        ),
    )
    .unwrap();
    let cfg = config.to_str().unwrap();
    for args in [&["--config", cfg][..], &[][..]] {
        let out = daemon_until_exit(args, &dir.path().join("state"));
        let err = String::from_utf8_lossy(&out.stderr);
        let last = err.trim().lines().last().unwrap_or("");
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(
            last.starts_with("driveprobe: error: cannot listen on 127.0.0.1:39480"),
            "{err}"
        );
        assert!(last.contains("`daemon --listen ADDR`"), "{args:?}: {last}");
    }
}

// ------------------------------------------------------------------ counts of one

#[test]
fn counts_of_one_are_singular() {
    let out = check_config(&root().join("tests/fixtures/configs/good/file_target_only.toml"));
    common::assert_ok(&out, "check-config");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("ok (1 drive, 1 probe, 1 schedule)"), "{text}");

    let mut status = driveprobe::status::Status::default();
    let up = driveprobe::status::DriveStatus {
        up: true,
        ..Default::default()
    };
    status.drives.insert("a".into(), up);
    let page = driveprobe::http::status_page::render(&status, 1.8e9);
    assert!(
        page.contains("<title>driveprobe: 1 drive</title>"),
        "{}",
        &page[..400]
    );
}
