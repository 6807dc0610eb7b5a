//! The daemon when things go wrong under it (issue 7, the parts that need no VM): its file
//! target deleted or truncated while a canary runs, and kill -9 at random moments of
//! scheduled runs, twenty times, with the state file carried from one life to the next.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use common::daemon::{file_drive, Daemon};

fn shm_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("dp-rel-")
        .tempdir_in("/dev/shm")
        .expect("tempdir in /dev/shm")
}

fn ops(d: &Daemon) -> f64 {
    d.scrape()
        .value(
            "driveprobe_probe_ops_total",
            &[("drive", "a"), ("probe", "rd"), ("op", "read")],
        )
        .unwrap_or(0.0)
}

fn wait_until(what: &str, limit: Duration, d: &Daemon, mut cond: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !cond() {
        assert!(
            t0.elapsed() < limit,
            "waited {limit:?} for {what}; log:\n{}",
            d.log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn a_deleted_or_truncated_file_target_is_made_again_and_the_canary_goes_on() {
    let dir = shm_dir();
    let target = dir.path().join("a.dat");
    let cfg = dir.path().join("d.toml");
    std::fs::write(
        &cfg,
        format!(
            "state_dir = \"{}\"\n\n{}[[probe]]\nname = \"rd\"\nworkload = {{ rate_iops = 200 }}\n",
            dir.path().join("state").display(),
            file_drive("a", &target, "8MiB")
        ),
    )
    .unwrap();
    let d = Daemon::start(&cfg, &[]);
    wait_until("canary I/O", Duration::from_secs(30), &d, || ops(&d) > 50.0);
    let size = 8u64 << 20;
    let ino = |p: &Path| {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(p).map(|m| (m.ino(), m.len())).ok()
    };

    // Deleted: a new file of the configured size appears, and the canary reads it.
    let before = ino(&target).unwrap();
    std::fs::remove_file(&target).unwrap();
    wait_until(
        "the file target made again",
        Duration::from_secs(20),
        &d,
        || ino(&target).is_some_and(|(i, len)| i != before.0 && len == size),
    );
    let o = ops(&d);
    wait_until(
        "canary I/O on the new file",
        Duration::from_secs(10),
        &d,
        || ops(&d) > o + 100.0,
    );

    // Truncated: made again at its size.
    let before = ino(&target).unwrap();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&target)
        .unwrap()
        .set_len(4096)
        .unwrap();
    wait_until(
        "the truncated file target made again",
        Duration::from_secs(20),
        &d,
        || ino(&target).is_some_and(|(i, len)| i != before.0 && len == size),
    );
    let o = ops(&d);
    wait_until(
        "canary I/O after the truncation",
        Duration::from_secs(10),
        &d,
        || ops(&d) > o + 100.0,
    );
    let e = d.scrape();
    assert_eq!(e.value("driveprobe_drive_up", &[("drive", "a")]), Some(1.0));
    let log = d.log();
    assert!(log.contains("deleted, replaced or truncated"), "{log}");
    assert!(log.contains("shorter than its configured size"), "{log}");
    // Reads past the new end of the truncated file are counted as errors, not hidden.
    let errors = e
        .value(
            "driveprobe_probe_errors_total",
            &[("drive", "a"), ("probe", "rd"), ("op", "read")],
        )
        .unwrap();
    println!("read errors counted while the file was truncated: {errors}");
    // The canary looks at the file again after the first interval with errors: about
    // one interval of failed reads at 200 IOPS, not the seconds until the periodic check.
    assert!(errors > 0.0 && errors <= 450.0, "{errors} read errors");
    let (st, _) = d.terminate(Duration::from_secs(5));
    assert!(st.success());
}

/// A small deterministic generator for the kill moments.
struct Lcg(u64);
impl Lcg {
    fn next_ms(&mut self, max: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % max
    }
}

/// Twenty lives: each makes one new schedule due (its bookkeeping added to the state the
/// last life left, as first seen long ago), starts the daemon, and kills it with SIGKILL
/// at a random moment: before, during or after the run starts. Every life must load the
/// state; a schedule's run is never started twice; runs left running are marked
/// interrupted at the next start; the last start, with nothing due, starts nothing.
#[test]
fn kill_9_at_random_moments_twenty_times_never_repeats_a_run() {
    let dir = shm_dir();
    let state_dir = dir.path().join("state");
    std::fs::create_dir_all(&state_dir).unwrap();
    let state_file = state_dir.join("state.json");
    let cfg = dir.path().join("d.toml");
    let mut rng = Lcg(0x005e_ed0f_d21e);
    let mut killed_running = 0;
    for life in 0..20 {
        let mut text = format!(
            "state_dir = \"{}\"\n\n[wear_budget]\nunrated_bytes_per_day = \"1TiB\"\n\n{}\
[[probe]]\nname = \"rd\"\nworkload = {{ rate_iops = 100 }}\n\n",
            state_dir.display(),
            file_drive("a", &dir.path().join("a.dat"), "16MiB")
        );
        for k in 0..=life {
            text.push_str(&format!(
                "[[schedule]]\nname = \"s{k}\"\ndrives = [\"a\"]\nsuite = \"enterprise\"\nscale = \"quick\"\ncron = \"0 0 1 1 *\"\nmax_duration = \"1h\"\n\n"
            ));
        }
        std::fs::write(&cfg, text).unwrap();
        // This life's schedule was first seen long ago: its Jan 1st run is due now.
        let mut state: serde_json::Value = match std::fs::read_to_string(&state_file) {
            Ok(t) => serde_json::from_str(&t).unwrap_or_else(|e| {
                panic!("life {life}: the state file does not parse ({e}):\n{t}")
            }),
            Err(_) => serde_json::json!({ "version": 1 }),
        };
        state["schedules"][format!("s{life}/a")] = serde_json::json!({ "first_seen": 0 });
        std::fs::write(&state_file, state.to_string()).unwrap();

        let mut d = Daemon::start(&cfg, &[]);
        std::thread::sleep(Duration::from_millis(rng.next_ms(3000)));
        let (_, _, runs) = d.get("/api/v1/runs");
        if runs.contains("\"running\"") {
            killed_running += 1;
        }
        d.child.kill().unwrap();
        d.child.wait().unwrap();
    }

    // The last start: it loads the state, marks what was cut short, starts nothing new.
    let d = Daemon::start(&cfg, &[]);
    std::thread::sleep(Duration::from_secs(3));
    let (code, _, body) = d.get("/api/v1/runs");
    assert_eq!(code, 200);
    let runs: Vec<serde_json::Value> = serde_json::from_str(&body).unwrap();
    let mut per_schedule: BTreeMap<String, u32> = BTreeMap::new();
    for r in &runs {
        *per_schedule
            .entry(r["schedule"].as_str().unwrap_or("?").to_string())
            .or_default() += 1;
        assert_ne!(
            r["status"], "running",
            "no run going after the last start: {r}"
        );
    }
    assert!(
        per_schedule.values().all(|&n| n == 1),
        "a schedule ran twice: {per_schedule:?}"
    );
    println!(
        "20 kills ({killed_running} while a run was going): {} runs recorded, one per schedule at most; statuses: {:?}",
        runs.len(),
        runs.iter()
            .map(|r| r["status"].as_str().unwrap_or("?").to_string())
            .collect::<Vec<_>>()
    );
    // Most lives got their run started before the kill (the start is saved first).
    assert!(runs.len() >= 10, "{runs:?}\nlog:\n{}", d.log());
    let (st, _) = d.terminate(Duration::from_secs(5));
    assert!(st.success());
}
