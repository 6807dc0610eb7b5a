//! The daemon config: the example documents every key the parser takes (and no other),
//! good configs pass `driveprobe check-config`, and every config in the bad-input corpus
//! is refused with exit status 2 and one line `driveprobe: error: FILE:LINE:COLUMN: ...`
//! that contains the `# expect:` text on its first line.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use driveprobe::config::{fio_job_label, raw, Config, ConfigError, Identity};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn example() -> PathBuf {
    root().join("config/driveprobe.example.toml")
}

fn fixtures(kind: &str) -> Vec<PathBuf> {
    let dir = root().join("tests/fixtures/configs").join(kind);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    files.sort();
    files
}

fn check_config(file: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_driveprobe"))
        .arg("check-config")
        .arg(file)
        .output()
        .unwrap()
}

/// Every key of a TOML document as a dotted path; arrays of tables add no index.
fn keys(prefix: &str, table: &toml::Table, out: &mut BTreeSet<String>) {
    for (k, v) in table {
        let path = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        match v {
            toml::Value::Table(t) => keys(&path, t, out),
            toml::Value::Array(items) => {
                for item in items {
                    if let toml::Value::Table(t) = item {
                        keys(&path, t, out);
                    }
                }
            }
            _ => {}
        }
        out.insert(path);
    }
}

#[test]
fn example_parses_and_validates() {
    let c = Config::load(&example()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.drives.len(), 3);
    assert_eq!(c.probes[0].drives, ["db1", "scratch1", "logs1"]);
    assert_eq!(c.schedules[0].suite, "enterprise");
    assert_eq!(c.schedules[0].fio_job, None);
    assert_eq!(c.schedules[0].hist_digits, Some(3));
    assert_eq!(c.schedules[1].hist_digits, None);
    // The fio job schedule: its file taken from the config file's folder.
    assert_eq!(c.schedules[1].suite, "fio-job:nightly-mix");
    assert_eq!(
        c.schedules[1].fio_job.as_deref(),
        Some(root().join("config/fio-jobs/nightly-mix.fio").as_path())
    );
    assert_eq!(
        c.drives[0].identity,
        Some(Identity::Serial("S4XXNF0M123456".into()))
    );
    assert_eq!(c.drives[0].rating.tbw_bytes, Some(3.5e15));
    assert_eq!(c.drives[0].rated.seq_read_bytes_per_second, Some(7e9));
}

#[test]
fn example_documents_exactly_the_keys_the_parser_takes() {
    let text = std::fs::read_to_string(example()).unwrap();
    let table: toml::Table = toml::from_str(&text).unwrap();
    let mut in_example = BTreeSet::new();
    keys("", &table, &mut in_example);
    let known: BTreeSet<String> = raw::KEYS.iter().map(|k| k.to_string()).collect();
    let undocumented: Vec<_> = known.difference(&in_example).collect();
    let unknown: Vec<_> = in_example.difference(&known).collect();
    assert!(
        undocumented.is_empty(),
        "keys the parser takes but the example does not show: {undocumented:?}"
    );
    assert!(
        unknown.is_empty(),
        "keys in the example that raw::KEYS does not list: {unknown:?}"
    );
    // And each key is explained: named in a comment, or its first assignment comes
    // right after a comment.
    let lines: Vec<&str> = text.lines().map(str::trim).collect();
    let is_comment = |l: &str| l.starts_with('#');
    let is_table = |k: &str| raw::KEYS.iter().any(|o| o.starts_with(&format!("{k}.")));
    for key in raw::KEYS {
        let leaf = key.rsplit('.').next().unwrap();
        if is_table(key) {
            continue; // [server], [[drive]], file_target = {..}: explained by their keys
        }
        let named = lines.iter().any(|l| {
            is_comment(l)
                && l.split(|c: char| !(c.is_alphanumeric() || c == '_'))
                    .any(|w| w == leaf)
        });
        let first = lines
            .iter()
            .position(|l| !is_comment(l) && l.starts_with(&format!("{leaf} =")));
        let after_comment = first.is_some_and(|i| i > 0 && is_comment(lines[i - 1]));
        assert!(
            named || after_comment,
            "the example does not explain '{key}' in a comment"
        );
    }
}

#[test]
fn raw_keys_list_every_field_of_the_raw_structs() {
    // serde names every field of a struct when it refuses an unknown key: compare that
    // list, for each table, with raw::KEYS, so a field added to a raw struct without
    // being added to KEYS (and so to the example) fails here.
    for (table, doc) in [
        ("", "bogus = 1\n"),
        ("server", "[server]\nbogus = 1\n"),
        ("wear_budget", "[wear_budget]\nbogus = 1\n"),
        ("drive", "[[drive]]\nbogus = 1\n"),
        (
            "drive.file_target",
            "[[drive]]\nfile_target = { bogus = 1 }\n",
        ),
        ("probe", "[[probe]]\nbogus = 1\n"),
        ("probe.workload", "[[probe]]\nworkload = { bogus = 1 }\n"),
        ("schedule", "[[schedule]]\nbogus = 1\n"),
        ("schedule.window", "[[schedule]]\nwindow = { bogus = 1 }\n"),
        ("selftest", "[[selftest]]\nbogus = 1\n"),
        ("selftest.window", "[[selftest]]\nwindow = { bogus = 1 }\n"),
        ("discovery", "[discovery]\nbogus = 1\n"),
        ("discovery.include", "[discovery.include]\nbogus = 1\n"),
        ("discovery.exclude", "[discovery.exclude]\nbogus = 1\n"),
        ("discovery.canary", "[discovery.canary]\nbogus = 1\n"),
        (
            "discovery.canary.hdd",
            "[discovery.canary.hdd]\nbogus = 1\n",
        ),
        (
            "discovery.canary.ssd",
            "[discovery.canary.ssd]\nbogus = 1\n",
        ),
        (
            "discovery.canary.nvme",
            "[discovery.canary.nvme]\nbogus = 1\n",
        ),
        (
            "discovery.canary.virtual",
            "[discovery.canary.virtual]\nbogus = 1\n",
        ),
    ] {
        let err = toml::from_str::<raw::RawConfig>(doc).unwrap_err();
        let msg = err.message();
        assert!(msg.starts_with("unknown field `bogus`"), "{table}: {msg}");
        let expected = msg.split_once("expected").map_or("", |x| x.1);
        let fields: BTreeSet<String> = expected
            .split('`')
            .skip(1)
            .step_by(2)
            .map(|f| {
                if table.is_empty() {
                    f.to_string()
                } else {
                    format!("{table}.{f}")
                }
            })
            .collect();
        let listed: BTreeSet<String> = raw::KEYS
            .iter()
            .filter(|k| match k.rsplit_once('.') {
                Some((parent, _)) => parent == table,
                None => table.is_empty(),
            })
            .map(|k| k.to_string())
            .collect();
        assert_eq!(
            fields, listed,
            "raw::KEYS and the fields of [{table}] differ"
        );
    }
}

#[test]
fn an_unknown_key_is_refused_at_its_position() {
    for (doc, line) in [
        ("bogus = 1\n", 1),
        ("[server]\nbogus = 1\n", 2),
        ("[wear_budget]\nbogus = 1\n", 2),
        ("[[drive]]\nname = \"a\"\nbogus = 1\n", 3),
        ("[[probe]]\nname = \"p\"\nworkload = { bogus = 1 }\n", 3),
    ] {
        let e = Config::parse(doc, "t.toml").unwrap_err().to_string();
        assert!(
            e.starts_with(&format!("t.toml:{line}:"))
                && e.contains("unknown key")
                && !e.contains("bogus"),
            "{doc:?}: {e}"
        );
    }
}

#[test]
fn good_configs_pass_check_config() {
    let files = fixtures("good");
    assert!(files.len() >= 3);
    for f in files.iter().chain([&example()]) {
        let out = check_config(f);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.starts_with(&format!("{}: ok (", f.display())),
            "{}: {stdout}{}",
            f.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// `driveprobe daemon -c FILE`, killed after 20 s: a config it accepted would run on.
fn daemon_with(file: &Path) -> Output {
    use std::process::Stdio;
    use std::time::{Duration, Instant};
    let state = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_driveprobe"))
        .args(["daemon", "-c"])
        .arg(file)
        .args(["--listen", "127.0.0.1:0", "--state-dir"])
        .arg(state.path())
        .env_remove("NOTIFY_SOCKET")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if t0.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    child.wait_with_output().unwrap()
}

/// The refusal of a bad config: exit status 2, nothing on stdout, one line on stderr:
/// `driveprobe: error: FILE:LINE:COLUMN: ...` with the `# expect:` text and advice.
/// Returns the line.
fn assert_refused(f: &Path, how: &str, out: &Output) -> String {
    let text = std::fs::read_to_string(f).unwrap();
    let expect = text
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("# expect: "))
        .unwrap_or_else(|| panic!("{}: first line must be `# expect: ...`", f.display()))
        .trim();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let what = format!("{} ({how})", f.display());
    assert_eq!(out.status.code(), Some(2), "{what}: {stderr}");
    assert!(
        out.stdout.is_empty(),
        "{what}: stdout {}",
        String::from_utf8_lossy(&out.stdout)
    );
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{what}: {stderr}");
    let prefix = format!("driveprobe: error: {}:", f.display());
    let rest = lines[0]
        .strip_prefix(&prefix)
        .unwrap_or_else(|| panic!("{what}: {stderr}"));
    let mut parts = rest.splitn(3, ':');
    let line: usize = parts.next().unwrap().parse().unwrap_or(0);
    let column: usize = parts.next().unwrap_or("").parse().unwrap_or(0);
    assert!(line >= 1 && column >= 1, "{what}: no line:column: {stderr}");
    assert!(
        line <= text.lines().count().max(1),
        "{what}: line {line} is past the end"
    );
    assert!(
        rest.contains(expect),
        "{what}: wanted {expect:?} in {stderr}"
    );
    assert!(
        rest.contains(';') || rest.contains(": give") || rest.contains(": write"),
        "{what}: the message does not say what to do: {stderr}"
    );
    lines[0].to_string()
}

#[test]
fn bad_configs_are_refused_with_position_and_advice() {
    let files = fixtures("bad");
    assert!(files.len() >= 30, "only {} bad configs", files.len());
    for f in &files {
        assert_refused(f, "check-config", &check_config(f));
    }
}

/// The daemon refuses the same configs the same way: exit status 2 and the same line as
/// `check-config` (it never starts on a config check-config refuses).
#[test]
fn the_daemon_refuses_every_bad_config_like_check_config() {
    let files = fixtures("bad");
    let mut kinds = BTreeSet::new();
    for f in &files {
        let by_check = assert_refused(f, "check-config", &check_config(f));
        let by_daemon = assert_refused(f, "daemon -c", &daemon_with(f));
        assert_eq!(by_check, by_daemon, "{}", f.display());
        kinds.insert(
            f.file_stem()
                .unwrap()
                .to_string_lossy()
                .split('_')
                .next()
                .unwrap()
                .to_string(),
        );
    }
    println!(
        "{} bad configs refused by check-config and daemon -c (exit 2, FILE:LINE:COL, advice); name prefixes: {kinds:?}",
        files.len()
    );
}

/// The corpus covers what issue 7 lists, each kind at least once (by file name).
#[test]
fn the_bad_config_corpus_covers_every_kind() {
    let names: Vec<String> = fixtures("bad")
        .iter()
        .map(|f| f.file_stem().unwrap().to_string_lossy().into_owned())
        .collect();
    for (kind, needles) in [
        ("wrong types", &["wrong_type_"][..]),
        ("unknown keys", &["unknown_"][..]),
        (
            "bad sizes",
            &["bad_size", "zero_size", "unaligned_size"][..],
        ),
        ("bad cron expressions", &["cron_"][..]),
        ("duplicate drive names", &["duplicate_drive_name"][..]),
        (
            "fio job files: both or neither of suite and fio_job, a missing or bad file",
            &[
                "fio_job_and_suite",
                "fio_job_neither",
                "fio_job_missing_file",
                "fio_job_other_filename",
                "fio_job_raw_not_destructive",
            ][..],
        ),
        (
            "a probe naming an unknown drive",
            &["probe_unknown_drive"][..],
        ),
        (
            "a write probe on a raw device without destructive",
            &["probe_writes_raw"][..],
        ),
        ("TOML syntax", &["toml_syntax", "unterminated_string"][..]),
        (
            "values past their sane range (issue 16: durations, rates, sizes)",
            &["too_long_", "too_large_", "out_of_range_"][..],
        ),
        ("a by_id that leaves /dev/disk/by-id/", &["by_id_"][..]),
    ] {
        let n = names
            .iter()
            .filter(|n| needles.iter().any(|x| n.starts_with(x)))
            .count();
        assert!(n >= 1, "no bad config for {kind}");
        println!("{kind}: {n}");
    }
}

#[test]
fn positions_point_at_the_value() {
    let doc = "[[drive]]\nname = \"d\"\nserial = \"S\"\n\n[[probe]]\nname = \"p\"\ndrives = [\"d\", \"nope\"]\nworkload = {}\n";
    let e = Config::parse(doc, "x.toml").unwrap_err();
    match &e {
        ConfigError::Invalid { line, column, .. } => assert_eq!((*line, *column), (7, 16)),
        other => panic!("{other}"),
    }
    assert!(e
        .to_string()
        .starts_with("x.toml:7:16: probe 'p' names drive 'nope'"));
}

#[test]
fn unreadable_file_is_refused_with_its_name() {
    let out = check_config(Path::new("/nonexistent/driveprobe.toml"));
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.starts_with("driveprobe: error: /nonexistent/driveprobe.toml: cannot read"));
}

#[test]
fn no_prefix_of_the_example_panics() {
    // Every truncation of a valid config (cut keys, strings, tables) and some byte
    // changes: the parser answers Ok or a placed error, never a panic.
    let text = std::fs::read_to_string(example()).unwrap();
    let cuts = (0..=text.len()).filter(|&i| text.is_char_boundary(i));
    for i in cuts {
        if let Err(ConfigError::Invalid { line, column, .. }) = Config::parse(&text[..i], "t") {
            assert!(line >= 1 && column >= 1);
        }
    }
    let bytes = text.as_bytes();
    for (i, repl) in (0..bytes.len())
        .step_by(7)
        .zip([b'0', b'"', b'=', b'[', b'-'].iter().cycle())
    {
        let mut b = bytes.to_vec();
        b[i] = *repl;
        if let Ok(t) = String::from_utf8(b) {
            let _ = Config::parse(&t, "t");
        }
    }
}

#[test]
fn embedded_default() {
    let dir = Path::new("/var/tmp/dp-state");
    // As root: discovery, nothing else (every drive, read-only, at its class's rate).
    let root = Config::embedded_default_for(dir, true);
    assert!(root.discovery.enabled && !root.discovery.health_only);
    assert!(root.drives.is_empty() && root.probes.is_empty());
    // Not root: the file target, and the discovered drives for their health only.
    let c = Config::embedded_default_for(dir, false);
    assert!(c.discovery.enabled && c.discovery.health_only);
    assert_eq!(c.server.listen.to_string(), "127.0.0.1:39480");
    assert_eq!(c.state_dir, dir);
    let d = &c.drives[0];
    assert_eq!(d.name, "default");
    assert!(d.identity.is_none() && !d.destructive);
    let t = d.file_target.as_ref().unwrap();
    assert_eq!(
        (t.path.as_path(), t.size),
        (dir.join("canary.dat").as_path(), 256 << 20)
    );
    let p = &c.probes[0];
    assert_eq!(p.drives, ["default"]);
    assert!(!p.writes);
    assert_eq!(p.job.rw_name(), "randread");
    assert_eq!(p.job.depth(), 1);
    assert_eq!(p.job.rate().map(|r| r.iops), Some(50.0));
    assert!(c.schedules.is_empty());
    assert!(driveprobe::config::default_state_dir().ends_with("driveprobe"));
}

/// A config with one file-target drive ("d") and one schedule with the `fio_job` value
/// `job`, written beside `dir`'s job files.
fn fio_config(job: &str) -> String {
    format!(
        "[[drive]]\nname = \"d\"\nfile_target = {{ path = \"/srv/d/.driveprobe\", size = \"1GiB\" }}\n\
[[schedule]]\nname = \"s\"\ndrives = [\"d\"]\nfio_job = \"{job}\"\ncron = \"0 3 * * *\"\nmax_duration = \"90s\"\n"
    )
}

#[test]
fn a_schedule_takes_a_fio_job_file_by_an_absolute_or_relative_path() {
    let good = root().join("tests/fixtures/configs/good");
    let c = Config::load(&good.join("fio_job.toml")).unwrap_or_else(|e| panic!("{e}"));
    let by_name = |n: &str| c.schedules.iter().find(|s| s.name == n).unwrap();
    assert_eq!(by_name("nightly").suite, "latency");
    assert_eq!(by_name("nightly").fio_job, None);
    let mixed = by_name("mixed");
    assert_eq!(mixed.suite, "fio-job:read-write");
    assert_eq!(
        mixed.fio_job.as_deref(),
        Some(good.join("fio/read-write.fio").as_path())
    );
    assert_eq!(mixed.drives, ["a", "b"]);
    assert_eq!(mixed.max_duration.as_secs(), 300);
    let seq = by_name("sequential");
    assert_eq!(seq.suite, "fio-job:seq");
    assert!(seq.fio_job.as_ref().unwrap().is_absolute());
    assert!(seq.fio_job.as_ref().unwrap().ends_with("fio/seq.fio"));
    assert_eq!(seq.drives, ["a", "b", "raw"]);

    // Absolute, from anywhere; and the same text refused once the file says otherwise.
    let dir = tempfile::tempdir().unwrap();
    let job = dir.path().join("My Job (v2).fio");
    std::fs::write(&job, "[r]\nfilename=${TARGET}\nrw=randread\n").unwrap();
    let c = Config::parse(&fio_config(&job.display().to_string()), "x.toml").unwrap();
    assert_eq!(c.schedules[0].suite, "fio-job:My_Job__v2_");
    assert_eq!(c.schedules[0].fio_job.as_deref(), Some(job.as_path()));
    std::fs::write(&job, "[r]\nfilename=/etc/passwd\nrw=randwrite\n").unwrap();
    let e = Config::parse(&fio_config(&job.display().to_string()), "x.toml")
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("x.toml:7:11: fio_job: ") && e.contains("filename=/etc/passwd"),
        "{e}"
    );
    // Relative: from the folder of the config file's name.
    std::fs::write(dir.path().join("rel.fio"), "[w]\nrw=write\n").unwrap();
    let name = dir.path().join("c.toml").display().to_string();
    let c = Config::parse(&fio_config("rel.fio"), &name).unwrap();
    assert_eq!(
        c.schedules[0].fio_job.as_deref(),
        Some(dir.path().join("rel.fio").as_path())
    );
    assert_eq!(fio_job_label(Path::new("/a/b.c/x.y.fio")), "fio-job:x.y");
}

#[test]
fn the_same_stem_is_one_label_only_for_the_same_file_or_other_drives() {
    let dir = tempfile::tempdir().unwrap();
    for sub in ["one", "two"] {
        std::fs::create_dir(dir.path().join(sub)).unwrap();
        std::fs::write(dir.path().join(sub).join("mix.fio"), "[r]\nrw=read\n").unwrap();
    }
    let doc = |a: &str, b: &str, drives_b: &str| {
        format!(
            "[[drive]]\nname = \"d\"\nfile_target = {{ path = \"/srv/d/.driveprobe\", size = \"1GiB\" }}\n\
[[drive]]\nname = \"e\"\nfile_target = {{ path = \"/srv/e/.driveprobe\", size = \"1GiB\" }}\n\
[[schedule]]\nname = \"a\"\ndrives = [\"d\"]\nfio_job = \"{a}\"\ncron = \"0 3 * * *\"\nmax_duration = \"1h\"\n\
[[schedule]]\nname = \"b\"\ndrives = [{drives_b}]\nfio_job = \"{b}\"\ncron = \"0 4 * * *\"\nmax_duration = \"1h\"\n"
        )
    };
    let name = dir.path().join("c.toml").display().to_string();
    // The same file twice on one drive (another time of day): fine, it is one suite.
    Config::parse(&doc("one/mix.fio", "./one/../one/mix.fio", "\"d\""), &name).unwrap();
    // Two files with one stem on different drives: fine.
    Config::parse(&doc("one/mix.fio", "two/mix.fio", "\"e\""), &name).unwrap();
    // On one drive: refused at the second fio_job.
    let e = Config::parse(&doc("one/mix.fio", "two/mix.fio", "\"e\", \"d\""), &name)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains(":16:11: schedule 'b' runs ")
            && e.contains("on drive 'd', and schedule 'a' at line 10 runs ")
            && e.contains("suite 'fio-job:mix'"),
        "{e}"
    );
}

/// Every duration, rate and size has a range: its ends are taken, one step past them is
/// refused at the value, with the range in the message (issue 16: `health_interval` near
/// i64::MAX panicked a thread, a huge `max_duration` wrapped, `rate_iops = 1e308` was an
/// unlimited canary).
#[test]
fn every_duration_rate_and_size_has_a_sane_range() {
    let drive =
        "[[drive]]\nname = \"d\"\nfile_target = { path = \"/srv/d.dat\", size = \"1GiB\" }\n";
    let probe = |w: &str| format!("{drive}[[probe]]\nname = \"p\"\n{w}\n");
    let schedule = |m: &str| {
        format!("{drive}[[schedule]]\nname = \"s\"\ndrives = [\"d\"]\nsuite = \"enterprise\"\ncron = \"0 3 * * *\"\nmax_duration = \"{m}\"\n")
    };
    let rated = |k: &str| format!("[[drive]]\nname = \"d\"\nserial = \"S1\"\n{k}\n");
    let cases: Vec<(String, Option<&str>)> = vec![
        ("health_interval = \"1d\"".into(), None),
        ("health_interval = \"86401s\"".into(), Some("health_interval '86401s' is too long; give at most \"1d\"")),
        ("health_interval = \"9223372036854775807s\"".into(), Some("is too long")),
        ("health_interval = \"106751991167300d\"".into(), Some("is too long")),
        (probe("window = \"1d\"\nworkload = {}"), None),
        (probe("window = \"25h\"\nworkload = {}"), Some("window '25h' is too long; give at most \"1d\"")),
        (schedule("7d"), None),
        (schedule("169h"), Some("max_duration '169h' is too long; give at most \"7d\"")),
        (schedule("9223372036854775807s"), Some("is too long")),
        (probe("workload = { rate_iops = 100000 }"), None),
        (probe("workload = { rate_iops = 0.01 }"), None),
        (probe("workload = { rate_iops = 100001 }"), Some("rate_iops 100001 is out of range")),
        (probe("workload = { rate_iops = 1e308 }"), Some("is out of range")),
        (probe("workload = { rate_iops = 0.001 }"), Some("rate_iops 0.001 is out of range")),
        (probe("workload = { rate_iops = inf }"), Some("is out of range")),
        (probe("workload = { rate_iops = nan }"), Some("is out of range")),
        (probe("workload = { depth = 4097 }"), Some("depth 4097 is out of range")),
        (probe("workload = { depth = 9223372036854775807 }"), Some("is out of range")),
        ("[[drive]]\nname = \"d\"\nfile_target = { path = \"/srv/d.dat\", size = \"1PiB\" }\n".into(), None),
        ("[[drive]]\nname = \"d\"\nfile_target = { path = \"/srv/d.dat\", size = \"1025TiB\" }\n".into(), Some("file_target size '1025TiB' is too large; give at most \"1PiB\"")),
        ("[wear_budget]\nunrated_bytes_per_day = \"1PiB\"\n".into(), None),
        ("[wear_budget]\nunrated_bytes_per_day = \"1025TiB\"\n".into(), Some("is too large")),
        (rated("rated_tbw_bytes = \"1024PiB\""), None),
        (rated("rated_tbw_bytes = \"1025PiB\""), Some("rated_tbw_bytes '1025PiB' is too large; give at most \"1024PiB\"")),
        (rated("rated_seq_read_bw = \"1025PiB\""), Some("is too large")),
        // A rating needs its unit (issue 17): "600" is not 600 bytes.
        (rated("rated_tbw_bytes = \"600\""), Some("rated_tbw_bytes: '600' has no unit")),
        (rated("rated_tbw_bytes = \"3.5\""), Some("has no unit")),
        (rated("rated_seq_write_bw = \"4000\""), Some("rated_seq_write_bw: '4000' has no unit")),
        (rated("rated_tbw_bytes = \"600TB\""), None),
        (rated("rated_tbw_bytes = \"600TiB\""), None),
        // A config from before units were required, in bytes as the key's name says, still
        // reads; a unit typed in the wrong case or a rating of nothing does not.
        (rated("rated_tbw_bytes = \"600000000000000\""), None),
        (rated("rated_seq_read_bw = \"3200000000\""), None),
        (rated("rated_tbw_bytes = \"600tb\""), Some("rated_tbw_bytes: '600tb' is not a rating")),
        (rated("rated_tbw_bytes = \"0TB\""), Some("rated_tbw_bytes: '0TB' is a rating of nothing")),
        (rated("rated_dwpd = 1000\nwarranty_years = 100"), None),
        (rated("rated_dwpd = 1001\nwarranty_years = 5"), Some("rated_dwpd 1001 must be a number more than 0 and at most 1000")),
        (rated("warranty_years = 101"), Some("warranty_years 101 must be")),
        (rated("rated_mtbf_hours = 1e10"), Some("at most 1000000000")),
        (rated("rated_read_iops_4k = 2e9"), Some("at most 1000000000")),
        (rated("rated_write_iops_4k = inf"), Some("at most 1000000000")),
    ];
    for (text, refused) in &cases {
        let got = Config::parse(text, "x.toml");
        match (refused, got) {
            (None, Ok(_)) => {}
            (None, Err(e)) => panic!("{text:?} refused: {e}"),
            (Some(_), Ok(_)) => panic!("{text:?} accepted"),
            (Some(says), Err(e)) => {
                let e = e.to_string();
                assert!(e.contains(says), "{text:?}: wanted {says:?} in {e}");
                assert!(e.starts_with("x.toml:") && !e.contains('\n'), "{e}");
            }
        }
    }
}

/// `by_id` names one link right under /dev/disk/by-id/: `..`, `.` and further `/` are
/// refused (the daemon would open whatever they lead to).
#[test]
fn by_id_is_one_link_under_dev_disk_by_id() {
    let with = |v: &str| {
        Config::parse(
            &format!("[[drive]]\nname = \"d\"\nby_id = \"{v}\"\n"),
            "x.toml",
        )
    };
    for ok in [
        "/dev/disk/by-id/nvme-S4XX_1",
        "/dev/disk/by-id/..x",
        "/dev/disk/by-id/wwn-0x5000c500a1b2c3d4",
    ] {
        with(ok).unwrap_or_else(|e| panic!("{ok}: {e}"));
    }
    for bad in [
        "/dev/disk/by-id/../../sda",
        "/dev/disk/by-id/..",
        "/dev/disk/by-id/.",
        "/dev/disk/by-id/x/y",
        "/dev/disk/by-id/x/../../../sda",
        "/dev/disk/by-id//sda",
        "/dev/disk/by-id/",
        "/dev/sda",
    ] {
        let e = with(bad)
            .err()
            .unwrap_or_else(|| panic!("{bad} accepted"))
            .to_string();
        assert!(e.contains("is not under /dev/disk/by-id/"), "{bad}: {e}");
    }
}

/// A config of `n` drives (each with a serial and a file target), a write probe on every
/// drive by `"*"`, a read probe that lists every drive by name, and a suite on every
/// drive: each cross-check sees every drive.
fn fleet(n: usize) -> String {
    let mut t = String::with_capacity(n * 160);
    for i in 0..n {
        t.push_str(&format!(
            "[[drive]]\nname = \"d{i}\"\nserial = \"S{i:08}\"\nfile_target = {{ path = \"/srv/d{i}.dat\", size = \"1GiB\" }}\n\n"
        ));
    }
    t.push_str("[[probe]]\nname = \"w\"\ndrives = [\"*\"]\nworkload = { read_pct = 50 }\n\n");
    t.push_str("[[probe]]\nname = \"r\"\ndrives = [");
    for i in 0..n {
        t.push_str(&format!("\"d{i}\","));
    }
    t.push_str("]\nworkload = {}\n\n");
    t.push_str("[[schedule]]\nname = \"s\"\ndrives = [\"*\"]\nsuite = \"enterprise\"\ncron = \"0 3 * * *\"\nmax_duration = \"4h\"\n");
    t
}

/// The fastest of three validations of `text` (the least disturbed by other work on the
/// machine).
/// The least CPU time this thread spent parsing `text`, of five parses. CPU time, not
/// wall time: on a busy host a parse preempted for a moment would look slow (a ratio of
/// wall times failed once at a load of 20 on 2 cores).
fn fastest_parse(text: &str) -> std::time::Duration {
    fn cpu() -> std::time::Duration {
        let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
        std::time::Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
    }
    (0..5)
        .map(|_| {
            let t0 = cpu();
            let c = Config::parse(text, "fleet.toml").unwrap_or_else(|e| panic!("{e}"));
            let took = cpu() - t0;
            assert!(!c.drives.is_empty());
            took
        })
        .min()
        .unwrap()
}

/// Validation is linear in the number of drives (issue 16: 20,000 drives took 32 s, the
/// time growing with the square of the count). A relation, not a speed: ten times the
/// drives may take at most 30 times as long (linear is about 10; quadratic 100).
#[test]
fn validation_time_grows_linearly_with_the_drives() {
    const SMALL: usize = 2_000;
    const LARGE: usize = 20_000;
    let (small, large) = (fleet(SMALL), fleet(LARGE));
    let c = Config::parse(&large, "fleet.toml").unwrap();
    assert_eq!(c.drives.len(), LARGE);
    assert_eq!(c.probes[1].drives.len(), LARGE);
    assert_eq!(c.schedules[0].drives.len(), LARGE);
    // A duplicate serial at the very end is still found, at its line.
    let dup = format!("{large}\n[[drive]]\nname = \"last\"\nserial = \"S00000007\"\n");
    let e = Config::parse(&dup, "fleet.toml").unwrap_err().to_string();
    assert!(
        e.contains("drive serial S00000007 is already used by the drive at line 38"),
        "{e}"
    );
    let (t_small, t_large) = (fastest_parse(&small), fastest_parse(&large));
    let ratio = t_large.as_secs_f64() / t_small.as_secs_f64().max(1e-6);
    println!("{SMALL} drives: {t_small:?}; {LARGE} drives: {t_large:?}; ratio {ratio:.1}");
    assert!(
        ratio < 30.0,
        "{LARGE} drives took {ratio:.1} times as long as {SMALL} ({t_small:?}, {t_large:?}): not linear"
    );
}

/// `check-config FILE` with a time limit: the output, or None if it had not ended.
fn check_config_within(file: &Path, extra: &[&str], limit: std::time::Duration) -> Option<Output> {
    use std::process::Stdio;
    let mut child = Command::new(env!("CARGO_BIN_EXE_driveprobe"))
        .arg("check-config")
        .arg(file)
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        if t0.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    Some(child.wait_with_output().unwrap())
}

fn mkfifo(p: &Path) {
    let st = Command::new("mkfifo").arg(p).status().unwrap();
    assert!(st.success());
}

/// A config (or web config, or fio job file) that is not a regular file, or is larger
/// than 16 MiB, is refused at once with one line (issue 16: a FIFO hung check-config;
/// /dev/zero had no size cap).
#[test]
fn a_fifo_a_device_or_a_huge_file_is_no_config() {
    let dir = tempfile::tempdir().unwrap();
    let limit = std::time::Duration::from_secs(10);
    let refused = |file: &Path, extra: &[&str], says: &str| {
        let out = check_config_within(file, extra, limit).unwrap_or_else(|| {
            panic!(
                "check-config {} {extra:?} still running after {limit:?}",
                file.display()
            )
        });
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{}: {stderr}", file.display());
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(stderr.starts_with("driveprobe: error: "), "{stderr}");
        assert!(stderr.contains(says), "wanted {says:?}: {stderr}");
    };
    let fifo = dir.path().join("fifo.toml");
    mkfifo(&fifo);
    refused(&fifo, &[], "fifo.toml: cannot read the config: it is a FIFO (named pipe), not a regular file; give the path of the file itself");
    refused(
        Path::new("/dev/zero"),
        &[],
        "/dev/zero: cannot read the config: it is a character device",
    );
    refused(dir.path(), &[], "it is a directory");
    // 17 MiB of comments: a valid TOML document, refused for its size before it is read.
    let big = dir.path().join("big.toml");
    let line = format!("# {}\n", "x".repeat(1021));
    std::fs::write(&big, line.repeat(17 << 10)).unwrap();
    refused(
        &big,
        &[],
        "big.toml: cannot read the config: it is larger than 16 MiB",
    );
    // Just under the cap: read (and found to hold no drive).
    std::fs::write(&big, line.repeat((16 << 10) - 1)).unwrap();
    let out = check_config_within(&big, &[], limit).unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The web config file.
    let good = dir.path().join("good.toml");
    std::fs::write(&good, "").unwrap();
    let web_fifo = dir.path().join("web.yml");
    mkfifo(&web_fifo);
    let w = web_fifo.to_str().unwrap();
    refused(
        &good,
        &["--web-config-file", w],
        "it is a FIFO (named pipe), not a regular file",
    );
    refused(
        &good,
        &["--web-config-file", "/dev/zero"],
        "it is a character device",
    );
    // A fio job file named by the config.
    let job = dir.path().join("job.fio");
    mkfifo(&job);
    let cfg = dir.path().join("fio.toml");
    std::fs::write(
        &cfg,
        format!(
            "[[drive]]\nname = \"d\"\nfile_target = {{ path = \"{}\", size = \"1MiB\" }}\n\n[[schedule]]\nname = \"s\"\ndrives = [\"d\"]\nfio_job = \"{}\"\ncron = \"0 3 * * *\"\nmax_duration = \"1h\"\n",
            dir.path().join("d.dat").display(),
            job.display()
        ),
    )
    .unwrap();
    refused(&cfg, &[], "fio_job: cannot read");
}

/// A character device, a FIFO or a directory as a daemon file target is refused by
/// `check-config` with one line naming what it is, and never with advice to remove it
/// (issue 16: /dev/zero was "a file driveprobe did not create; remove the file").
#[test]
fn a_special_file_is_never_a_file_target() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo.dat");
    mkfifo(&fifo);
    let limit = std::time::Duration::from_secs(10);
    for (target, kind) in [
        (Path::new("/dev/zero"), "character device"),
        (Path::new("/dev/null"), "character device"),
        (fifo.as_path(), "FIFO (named pipe)"),
        (dir.path(), "directory"),
    ] {
        let cfg = dir.path().join("special.toml");
        std::fs::write(
            &cfg,
            format!(
                "[[drive]]\nname = \"d\"\nfile_target = {{ path = \"{}\", size = \"1MiB\" }}\n",
                target.display()
            ),
        )
        .unwrap();
        let out = check_config_within(&cfg, &[], limit)
            .unwrap_or_else(|| panic!("check-config with {} still running", target.display()));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{}: {stderr}", target.display());
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(stderr.starts_with("driveprobe: error: "), "{stderr}");
        let says = format!("{}: is a {kind}, not a regular file", target.display());
        assert!(stderr.contains(&says), "wanted {says:?}: {stderr}");
        assert!(!stderr.contains("remove"), "{stderr}");
    }
}

/// `rated_tbw_bytes = "600"` passed check-config as 600 bytes (issue 17): refused in one
/// line at the value, naming the units a rating takes.
#[test]
fn check_config_refuses_a_rating_without_a_unit() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("rated.toml");
    std::fs::write(
        &f,
        "[[drive]]\nname = \"d\"\nfile_target = { path = \"/srv/d.dat\", size = \"1GiB\" }\nrated_tbw_bytes = \"600\"\n",
    )
    .unwrap();
    let out = check_config(&f);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("rated.toml:4:"), "{err}");
    assert!(
        err.contains("'600' has no unit") && err.contains("600TB"),
        "{err}"
    );
}

#[test]
fn the_wear_budget_keys_are_read_with_their_defaults_and_schedule_overrides() {
    use driveprobe::config::{ScheduleBudget, DEFAULT_SCHEDULED_UNRATED_BYTES};
    let c = Config::parse("", "x.toml").unwrap();
    let w = c.wear_budget;
    assert_eq!(w.period_days, 30);
    assert_eq!(w.scheduled_unrated_bytes, DEFAULT_SCHEDULED_UNRATED_BYTES);
    assert_eq!(w.scheduled_share_of_rated_writes, 0.25);
    // The canaries' keys keep their meaning and defaults.
    assert_eq!(
        (w.share_of_rated_dwpd, w.unrated_bytes_per_day),
        (0.05, 1 << 30)
    );
    let text = "[wear_budget]\nperiod = \"7d\"\nscheduled_share_of_rated_writes = 0.5\n\
                scheduled_unrated_bytes = \"1TiB\"\nunrated_bytes_per_day = \"2GiB\"\n\n\
                [[drive]]\nname = \"a\"\nfile_target = { path = \"/srv/a.dat\", size = \"1GiB\" }\n\n\
                [[schedule]]\nname = \"u\"\ndrives = [\"a\"]\nsuite = \"latency\"\ncron = \"0 3 * * *\"\nmax_duration = \"1h\"\nwear_budget = \"unlimited\"\n\n\
                [[schedule]]\nname = \"b\"\ndrives = [\"a\"]\nsuite = \"latency\"\ncron = \"0 4 * * *\"\nmax_duration = \"1h\"\nwear_budget = \"3TB\"\n\n\
                [[schedule]]\nname = \"d\"\ndrives = [\"a\"]\nsuite = \"latency\"\ncron = \"0 5 * * *\"\nmax_duration = \"1h\"\n";
    let c = Config::parse(text, "x.toml").unwrap();
    let w = c.wear_budget;
    assert_eq!(w.period_days, 7);
    assert_eq!(w.scheduled_share_of_rated_writes, 0.5);
    assert_eq!(w.scheduled_unrated_bytes, 1 << 40);
    assert_eq!(w.unrated_bytes_per_day, 2 << 30);
    let budgets: Vec<ScheduleBudget> = c.schedules.iter().map(|s| s.wear_budget).collect();
    assert_eq!(
        budgets,
        [
            ScheduleBudget::Unlimited,
            ScheduleBudget::Bytes(3_000_000_000_000),
            ScheduleBudget::Drive
        ]
    );
    for (doc, want) in [
        ("[wear_budget]\nperiod = \"1d\"\n", None),
        ("[wear_budget]\nperiod = \"400d\"\n", None),
        ("[wear_budget]\nperiod = \"12h\"\n", Some("is too short")),
        ("[wear_budget]\nperiod = \"30d1s\"\n", Some("period")),
        (
            "[wear_budget]\nscheduled_share_of_rated_writes = 1.5\n",
            Some("is out of range"),
        ),
        (
            "[wear_budget]\nscheduled_share_of_rated_writes = nan\n",
            Some("is out of range"),
        ),
        ("[wear_budget]\nscheduled_unrated_bytes = \"1PiB\"\n", None),
        (
            "[wear_budget]\nscheduled_unrated_bytes = \"1025TiB\"\n",
            Some("is too large"),
        ),
        (
            "[wear_budget]\nscheduled_unrated_bytes = \"0\"\n",
            Some("is 0"),
        ),
    ] {
        match (Config::parse(doc, "x.toml"), want) {
            (Ok(_), None) => {}
            (Err(e), Some(w)) => {
                let e = e.to_string();
                assert!(e.contains(w) && e.starts_with("x.toml:2:"), "{doc:?}: {e}");
            }
            (got, want) => panic!("{doc:?}: got {got:?}, wanted {want:?}"),
        }
    }
}

/// Issue 20: `health_detail_metrics` is on unless the config turns it off, and takes only
/// true or false.
#[test]
fn health_detail_metrics_defaults_on_and_takes_a_boolean() {
    let parse = |t: &str| Config::parse(t, "x.toml");
    assert!(parse("").unwrap().health_detail_metrics);
    assert!(
        parse("health_detail_metrics = true")
            .unwrap()
            .health_detail_metrics
    );
    assert!(
        !parse("health_detail_metrics = false")
            .unwrap()
            .health_detail_metrics
    );
    let e = parse("health_detail_metrics = \"no\"")
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("x.toml:1:"), "{e}");
}

/// `[[selftest]]` (issue 20): kinds (long is extended), the default maximum duration of
/// each kind, `*` for every drive, and a raw drive that is not destructive is fine (a
/// self-test writes nothing).
#[test]
fn selftests_take_their_kind_and_default_max_duration() {
    use driveprobe::config::SelfTestKind;
    use std::time::Duration;
    let c = Config::load(&root().join("tests/fixtures/configs/good/selftests.toml")).unwrap();
    assert_eq!(c.selftests.len(), 2);
    let daily = &c.selftests[0];
    assert_eq!(daily.kind, SelfTestKind::Short);
    assert_eq!(daily.drives, ["a", "r"]);
    assert_eq!(daily.max_duration, Duration::from_secs(3600));
    assert!(daily.window.is_none());
    let monthly = &c.selftests[1];
    assert_eq!(monthly.kind, SelfTestKind::Extended);
    assert_eq!(monthly.max_duration, Duration::from_secs(2 * 86_400));
    assert!(monthly.window.is_some());
    // Without max_duration, an extended test gets three days.
    let text = std::fs::read_to_string(root().join("tests/fixtures/configs/good/selftests.toml"))
        .unwrap()
        .replace("max_duration = \"2d\"\n", "");
    let c = Config::parse(&text, "selftests.toml").unwrap();
    assert_eq!(c.selftests[1].max_duration, Duration::from_secs(3 * 86_400));
}

/// A refused config never repeats what the file holds (issue 33): serde's messages quote
/// values ("invalid type: string ...") and unknown keys' names, and the file may be a
/// symlink to someone else's secrets. `check-config` and `daemon -c` name the file, the
/// line and column, and the kind of problem; the secret is in neither's output.
#[test]
fn a_refused_config_never_repeats_its_content() {
    let dir = tempfile::tempdir().unwrap();
    let shadow = dir.path().join("shadow");
    std::fs::write(
        &shadow,
        "root:$6$SECRETHASHroot$Fv0tq1aX:19000:0:99999:7:::\n\
         daemon:*:19000:0:99999:7:::\n",
    )
    .unwrap();
    let linked = dir.path().join("linked.toml");
    std::os::unix::fs::symlink(&shadow, &linked).unwrap();
    let mut cases = vec![(linked, 1)];
    for (i, (text, line)) in [
        // A secret as a value of the wrong type, in every table that has typed keys.
        ("health_detail_metrics = \"SECRETpw\"\n", 1),
        ("[[drive]]\nname = \"d\"\nrated_dwpd = \"SECRETpw\"\n", 3),
        ("[runs]\nkeep_documents = \"SECRETpw\"\n", 2),
        ("[discovery]\nenabled = 'SECRETpw'\n", 2),
        (
            "[[probe]]\nname = \"p\"\nworkload = { depth = \"SECRETpw\" }\n",
            3,
        ),
        ("state_dir = { SECRETpw = 1 }\n", 1),
        // A secret as an unknown key's name, and as its value.
        ("SECRETkey = 1\n", 1),
        ("[server]\nSECRETkey = \"x\"\n", 2),
        ("password = \"SECRETpw\"\n", 1),
        // A TOML syntax error on a secret.
        ("token = SECRETpw\n", 1),
        ("SECRET pw\n", 1),
    ]
    .into_iter()
    .enumerate()
    {
        let f = dir.path().join(format!("c{i}.toml"));
        std::fs::write(&f, text).unwrap();
        cases.push((f, line));
    }
    for (f, line) in &cases {
        for (how, out) in [
            ("check-config", check_config(f)),
            ("daemon -c", daemon_with(f)),
        ] {
            let stderr = String::from_utf8_lossy(&out.stderr);
            let what = format!("{} ({how})", f.display());
            assert_eq!(out.status.code(), Some(2), "{what}: {stderr}");
            assert!(!stderr.contains("SECRET"), "{what}: {stderr}");
            let place = format!("driveprobe: error: {}:{line}:", f.display());
            assert!(
                stderr.starts_with(&place),
                "{what}: no {place:?} in {stderr}"
            );
            assert_eq!(stderr.lines().count(), 1, "{what}: {stderr}");
            println!("{what}: {}", stderr.trim_end());
        }
    }
}
