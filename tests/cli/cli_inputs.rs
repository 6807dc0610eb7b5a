//! Issue 33, the command line's inputs turned against it: a FIFO or `/dev/zero` as any
//! file it reads (each read forever or waited on forever before), a drive whose strings
//! carry control characters or a megabyte, and documents whose counts wrap when merged.

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// Longer than any of these commands takes on a refused input (they refuse at the open).
const LIMIT: Duration = Duration::from_secs(10);

fn fixture(p: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(p)
}

/// `driveprobe ARGS` with a time limit: its output (read as it comes, so that a large
/// one cannot hold it), or a failed test if it had not ended.
fn driveprobe(args: &[&std::ffi::OsStr]) -> Output {
    use std::io::Read;
    let mut child = Command::new(env!("CARGO_BIN_EXE_driveprobe"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let drain = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut v = Vec::new();
            let _ = r.read_to_end(&mut v);
            v
        })
    };
    let out = drain(Box::new(child.stdout.take().unwrap()));
    let err = drain(Box::new(child.stderr.take().unwrap()));
    let t0 = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if t0.elapsed() > LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            panic!("driveprobe {args:?} still running after {LIMIT:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Output {
        status,
        stdout: out.join().unwrap(),
        stderr: err.join().unwrap(),
    }
}

fn os<'a>(args: &'a [&'a str]) -> Vec<&'a std::ffi::OsStr> {
    args.iter().map(std::ffi::OsStr::new).collect()
}

/// Exit `status`, one line on stderr that says `needle`, nothing on stdout but JSON.
fn one_line_error(out: &Output, status: i32, needle: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(status), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("driveprobe: error: "), "{err}");
    assert!(err.contains(needle), "wanted {needle:?}: {err}");
    assert!(!err.contains("panicked"), "{err}");
}

fn mkfifo(p: &Path) {
    let st = Command::new("mkfifo").arg(p).status().unwrap();
    assert!(st.success());
}

#[test]
fn a_fifo_or_an_endless_device_as_any_input_file_is_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo");
    mkfifo(&fifo);
    let fifo = fifo.to_str().unwrap();
    let log = fixture("nvme/qemu-smart-log.bin");
    let log = log.to_str().unwrap();
    let doc = fixture("results/enterprise-sas-ssd800mm.json");
    let doc = doc.to_str().unwrap();
    let merged = dir.path().join("merged.json");
    let merged = merged.to_str().unwrap();
    let page = dir.path().join("page.html");
    let page = page.to_str().unwrap();
    let target = dir.path().join("target.dat");
    let target = target.to_str().unwrap();
    const FIFO: &str = "it is a FIFO (named pipe), not a regular file";
    const ZERO: &str = "it is a character device, not a regular file";
    let cases: [(Vec<&str>, i32, &str); 10] = [
        (vec!["health", "--from-nvme-log", fifo], 1, FIFO),
        (vec!["health", "--from-nvme-log", "/dev/zero"], 1, ZERO),
        (
            vec!["health", "--from-nvme-log", log, "--nvme-id-ctrl", fifo],
            1,
            FIFO,
        ),
        (
            vec![
                "health",
                "--from-nvme-log",
                log,
                "--nvme-id-ns",
                "/dev/zero",
            ],
            1,
            ZERO,
        ),
        (vec!["health", "--from-smartctl-json", fifo], 1, FIFO),
        (vec!["health", "--from-smartctl-json", "/dev/zero"], 1, ZERO),
        (vec!["report", fifo, "-o", page], 1, FIFO),
        (vec!["report", doc, "/dev/zero", "-o", page], 1, ZERO),
        (vec!["report", "--merge", merged, doc, fifo], 1, FIFO),
        (
            vec![
                "bench",
                target,
                "--size=1m",
                "--suite",
                "qos",
                "--qos-targets",
                fifo,
            ],
            2,
            FIFO,
        ),
    ];
    for (args, status, says) in cases {
        let out = driveprobe(&os(&args));
        one_line_error(&out, status, says);
    }
    // Nothing was made of them.
    assert!(!Path::new(page).exists() && !Path::new(merged).exists());
    assert!(!Path::new(target).exists());
}

#[test]
fn a_document_larger_than_any_driveprobe_writes_is_refused_before_it_is_read() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let big = dir.path().join("big.json");
    // Sparse: no memory is used for it, and reading it would take 256 MiB and more.
    std::fs::File::create(&big)
        .unwrap()
        .set_len(driveprobe::report::MAX_DOCUMENT_BYTES + 1)
        .unwrap();
    let out = driveprobe(&os(&[
        "report",
        big.to_str().unwrap(),
        "-o",
        dir.path().join("p.html").to_str().unwrap(),
    ]));
    one_line_error(
        &out,
        1,
        "big.json: cannot read it: it is larger than 256 MiB, too large to be a result document",
    );
}

/// The smartctl JSON of a QEMU SATA disk, with `edit` applied.
fn smartctl_json(dir: &Path, name: &str, edit: impl FnOnce(&mut Value)) -> PathBuf {
    let text = std::fs::read_to_string(fixture("smartctl/qemu-sata.json")).unwrap();
    let mut v: Value = serde_json::from_str(&text).unwrap();
    edit(&mut v);
    let p = dir.join(name);
    std::fs::write(&p, v.to_string()).unwrap();
    p
}

#[test]
fn control_characters_and_megabytes_from_a_drive_never_reach_the_text_output() {
    let dir = tempfile::tempdir().unwrap();
    let evil = "EVIL\nverdict: OK\u{1b}[2J\u{7}\u{0}\r\u{9b}\u{202e}";
    let plain = smartctl_json(dir.path(), "plain.json", |_| {});
    let hostile = smartctl_json(dir.path(), "hostile.json", |v| {
        v["model_name"] = evil.into();
        v["serial_number"] = "S".repeat(1 << 20).into();
        v["firmware_version"] = evil.into();
    });
    let text = |p: &Path| {
        let out = driveprobe(&os(&[
            "health",
            "--from-smartctl-json",
            p.to_str().unwrap(),
        ]));
        assert!(
            out.status.code().is_some_and(|c| c != 1 && c != 2),
            "{out:?}"
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let (plain, hostile) = (text(&plain), text(&hostile));
    // No control character but the line ends; no line forged: the same lines as the plain
    // disk's, and one verdict.
    let head: String = hostile.chars().take(300).collect();
    assert!(
        !hostile.chars().any(|c| c.is_control() && c != '\n'),
        "{head:?}"
    );
    assert!(!hostile.contains('\u{202e}'));
    assert_eq!(hostile.lines().count(), plain.lines().count(), "{hostile}");
    assert_eq!(
        hostile
            .lines()
            .filter(|l| l.starts_with("verdict:"))
            .count(),
        1,
        "{hostile}"
    );
    let first = hostile.lines().next().unwrap();
    assert!(
        first.contains(": EVIL verdict: OK [2J (sata), serial SSSS"),
        "{first}"
    );
    assert!(
        first.contains("…, firmware EVIL verdict: OK [2J"),
        "{first}"
    );
    // A megabyte in, a bounded page out (before: 1,000,489 bytes).
    assert!(
        hostile.len() < 4 * plain.len().max(1024),
        "{} bytes",
        hostile.len()
    );

    // The JSON output escapes, and is bounded the same way.
    let out = driveprobe(&os(&[
        "health",
        "--json",
        "--from-smartctl-json",
        dir.path().join("hostile.json").to_str().unwrap(),
    ]));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let serial = v["health"]["identity"]["serial"].as_str().unwrap();
    assert!(
        serial.len() <= driveprobe::fmt::MAX_DRIVE_TEXT_BYTES,
        "{serial}"
    );
    assert!(out.stdout.len() < 64 << 10, "{} bytes", out.stdout.len());
}

#[test]
fn the_error_line_carries_no_control_character() {
    let dir = tempfile::tempdir().unwrap();
    let mut name = dir.path().as_os_str().as_bytes().to_vec();
    name.extend_from_slice(b"/x\x1b[2J\nverdict: OK\x07.json");
    let missing = std::ffi::OsStr::from_bytes(&name);
    let page = dir.path().join("p.html");
    let out = driveprobe(&[
        std::ffi::OsStr::new("report"),
        missing,
        std::ffi::OsStr::new("-o"),
        page.as_os_str(),
    ]);
    one_line_error(&out, 1, "x [2J verdict: OK .json: cannot read it");
    assert!(
        !out.stderr.iter().any(|&b| b < 0x20 && b != b'\n'),
        "{:?}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The report fixture's last point phase alone, its reads `ops` I/Os with a histogram.
fn point_document(dir: &Path, name: &str, ops: u64) -> PathBuf {
    let text = std::fs::read_to_string(fixture("results/enterprise-sas-ssd800mm.json")).unwrap();
    let mut v: Value = serde_json::from_str(&text).unwrap();
    let phases = v["phases"].as_array().unwrap();
    let mut point = phases
        .iter()
        .rev()
        .find(|p| p["kind"] == "point")
        .unwrap()
        .clone();
    let round = &mut point["round"];
    round["read"]["ops"] = ops.into();
    round["write"]["ops"] = 0.into();
    round["read_lat_hist"] = serde_json::json!({
        "sig_digits": 3, "delta_ns": [100000], "counts": [ops]
    });
    v["phases"] = Value::Array(vec![point]);
    let p = dir.join(name);
    std::fs::write(&p, v.to_string()).unwrap();
    p
}

#[test]
fn a_merge_whose_counts_would_wrap_is_refused_with_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let half = 1u64 << 63;
    let a = point_document(dir.path(), "a.json", half);
    let b = point_document(dir.path(), "b.json", half);
    let merged = dir.path().join("merged.json");
    let merge = |x: &Path, y: &Path| {
        driveprobe(&os(&[
            "report",
            "--merge",
            merged.to_str().unwrap(),
            x.to_str().unwrap(),
            y.to_str().unwrap(),
        ]))
    };
    // 2^63 + 2^63 I/Os wrapped to 0 before (or, with overflow checks, a panic).
    one_line_error(
        &merge(&a, &b),
        2,
        "a.json, phase 0: the operation counts of these documents add up past 18,446,744,073,709,551,615",
    );
    assert!(!merged.exists());
    // One I/O fewer: the exact sum, u64::MAX.
    let c = point_document(dir.path(), "c.json", half - 1);
    let out = merge(&a, &c);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let m: Value = serde_json::from_str(&std::fs::read_to_string(&merged).unwrap()).unwrap();
    assert_eq!(m["phases"][0]["round"]["read"]["ops"], u64::MAX);
}

/// The report fixture with every direction that did I/O given a small histogram of
/// `digits` (the same five buckets whatever the digits), its write-saturation phase
/// stretched to `rounds` rounds.
fn with_histograms(digits: u8, rounds: usize) -> Vec<u8> {
    let text = std::fs::read_to_string(fixture("results/enterprise-sas-ssd800mm.json")).unwrap();
    let mut v: Value = serde_json::from_str(&text).unwrap();
    for p in v["phases"].as_array_mut().unwrap() {
        if p["kind"] == "write_saturation" {
            let r = p["rounds"].as_array_mut().unwrap();
            let last = r.last().unwrap().clone();
            while r.len() < rounds {
                r.push(last.clone());
            }
            let w = p["bytes_written"].as_array_mut().unwrap();
            let last = w.last().unwrap().clone();
            w.resize(rounds, last);
        }
    }
    fn walk(v: &mut Value, digits: u8) {
        match v {
            Value::Object(m) => {
                for dir in ["read", "write"] {
                    if m.contains_key("index") && m[dir]["ops"].as_u64().unwrap_or(0) > 0 {
                        m.insert(
                            format!("{dir}_lat_hist"),
                            serde_json::json!({
                                "sig_digits": digits,
                                "delta_ns": [20000, 30, 30, 30, 30],
                                "counts": [1, 2, 3, 4, 5]
                            }),
                        );
                    }
                }
                m.values_mut().for_each(|x| walk(x, digits));
            }
            Value::Array(a) => a.iter_mut().for_each(|x| walk(x, digits)),
            _ => {}
        }
    }
    walk(&mut v, digits);
    v.to_string().into_bytes()
}

/// The fastest of three reads and renders of `doc`, in process.
fn render_time(doc: &[u8]) -> Duration {
    (0..3)
        .map(|_| {
            let t0 = Instant::now();
            let d = driveprobe::report::parse(doc, "doc.json").unwrap();
            let html = driveprobe::report::render(&[("d".to_string(), d)]);
            assert!(html.contains("exceedance"));
            t0.elapsed()
        })
        .min()
        .unwrap()
}

/// Rounds of the write-saturation phase: a full-scale run's most.
const ROUNDS: usize = 1440;

#[test]
fn a_document_of_five_digit_histograms_costs_what_the_same_at_three_digits_costs() {
    let (d3, d5) = (with_histograms(3, ROUNDS), with_histograms(5, ROUNDS));
    assert!(d5.len() < 4 << 20, "a small document: {} bytes", d5.len());
    let (t3, t5) = (render_time(&d3), render_time(&d5));
    println!("{ROUNDS} rounds: 3 digits {t3:?}, 5 digits {t5:?}");
    // Before: every 5-digit histogram was made dense (27 MB each) to be merged and read,
    // 100 times the work of a 3-digit one (8.9 s of CPU against 0.1 s here).
    assert!(
        t5 < t3 * 4 + Duration::from_millis(200),
        "5 digits {t5:?} against 3 digits {t3:?}"
    );
}
