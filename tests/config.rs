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
            e.starts_with(&format!("t.toml:{line}:")) && e.contains("unknown field `bogus`"),
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
    let c = Config::embedded_default(dir);
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
