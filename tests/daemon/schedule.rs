//! Schedules under restarts: a simulated daemon killed and restarted at random moments
//! over simulated weeks, and the state file under a concurrent reader and under kill -9.
//!
//! The simulated daemon follows the contract of `driveprobe::schedule::plan`: decide,
//! persist, act. Its "disk" is the JSON of the state (what `save_atomic` writes, which is
//! atomic: see the file tests below); a kill loses everything not persisted and the runs
//! going at the time.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use driveprobe::health::endurance::Sample;
use driveprobe::rng::Rng;
use driveprobe::schedule::cron::{CivilTime, MINUTE};
use driveprobe::schedule::plan::{decide, pending_due};
use driveprobe::schedule::state::temp_path;
use driveprobe::schedule::{
    load, plan_all, save_atomic, Bookkeeping, Cron, Decision, RunRecord, RunStatus, Schedule,
    State, Window,
};

const HOUR: i64 = 3600;
const DAY: i64 = 86_400;

fn schedules() -> Vec<Schedule> {
    let s = |name: &str, drive: &str, cron: &str, window: Option<&str>, max: i64| Schedule {
        name: name.into(),
        drive: drive.into(),
        cron: Cron::parse(cron).unwrap(),
        window: window.map(|w| Window::parse(w).unwrap()),
        max_duration: max,
    };
    vec![
        s("nightly", "a", "0 3 * * *", None, 2 * HOUR),
        s(
            "weekly",
            "a",
            "0 3 * * SUN",
            Some("SAT,SUN 01:00-05:00"),
            3 * HOUR,
        ),
        s(
            "noon-at-night",
            "a",
            "0 12 * * *",
            Some("22:00-04:00"),
            HOUR,
        ),
        s(
            "quarter",
            "b",
            "*/15 9-17 * * 1-5",
            Some("MON-FRI 09:00-18:00"),
            10 * 60,
        ),
        s(
            "hourly",
            "c",
            "0 * * * *",
            Some("MON-FRI 22:00-04:00"),
            30 * 60,
        ),
        s("leap", "c", "30 1 29 2 *", None, HOUR),
        s("month-end", "d", "45 23 28-31 * *", None, 20 * 60),
    ]
}

/// A run as it really happened (ground truth, outside the daemon).
#[derive(Debug, Clone)]
struct Actual {
    schedule: usize,
    due: i64,
    started: i64,
    ended: Option<i64>,
    natural_end: i64,
    deadline: i64,
    status: Option<RunStatus>,
}

struct World {
    rng: Rng,
    schedules: Vec<Schedule>,
    /// The state file's content (as a value: it goes through JSON at each restart).
    disk: Option<State>,
    now: i64,
    runs: Vec<Actual>,
    restarts: Vec<i64>,
    /// Chance, in 1/1000, that the daemon is killed around one persist.
    kill_at_persist: u64,
}

/// The daemon's memory; gone at a kill.
struct Daemon {
    state: State,
    /// Index into `World::runs` of each schedule's live run.
    live: Vec<Option<usize>>,
}

enum Killed {
    /// Before the write: nothing persisted.
    Before,
    /// After the write, before acting on it.
    After,
}

impl World {
    fn persist(&mut self, d: &Daemon) -> Result<(), Killed> {
        if self.rng.below(1000) < self.kill_at_persist {
            return Err(Killed::Before);
        }
        self.disk = Some(d.state.clone());
        if self.rng.below(1000) < self.kill_at_persist {
            return Err(Killed::After);
        }
        Ok(())
    }

    /// A random span: mostly short, sometimes days.
    fn span(&mut self, max: i64) -> i64 {
        match self.rng.below(4) {
            0 => self.rng.below(120) as i64,
            1 => self.rng.below(3 * HOUR as u64) as i64,
            _ => self.rng.below(max as u64) as i64,
        }
    }

    fn kill(&mut self, d: &Daemon, at: i64) {
        for i in d.live.iter().flatten() {
            let r = &mut self.runs[*i];
            if r.ended.is_none() {
                r.ended = Some(at);
            }
        }
    }

    /// One life of the daemon, from start to kill.
    fn life(&mut self, kill_at: i64) {
        self.restarts.push(self.now);
        let mut state: State = match &self.disk {
            None => State::default(),
            Some(s) => {
                let json = serde_json::to_string(s).unwrap();
                serde_json::from_str(&json).expect("the state always loads")
            }
        };
        let now = self.now;
        let mut d = Daemon {
            live: vec![None; self.schedules.len()],
            state: State::default(),
        };
        for s in &self.schedules {
            if state.schedule_mut(&s.name, now).recover(now) {
                let id = state
                    .runs
                    .iter()
                    .rev()
                    .find(|r| r.schedule.as_deref() == Some(&s.name))
                    .map(|r| r.id.clone());
                if let Some(r) = id.and_then(|id| state.run_mut(&id)) {
                    r.status = RunStatus::Interrupted;
                    r.ended = Some(now);
                }
            }
        }
        d.state = state;
        if self.persist(&d).is_err() {
            return self.kill(&d, now);
        }
        loop {
            let now = self.now;
            // Runs that ended by themselves.
            for (i, s) in self.schedules.clone().iter().enumerate() {
                let Some(ri) = d.live[i] else { continue };
                if self.runs[ri].natural_end <= now
                    && self.runs[ri].natural_end < self.runs[ri].deadline
                {
                    d.state.schedule_mut(&s.name, now).finish(now);
                    if self.persist(&d).is_err() {
                        return self.kill(&d, now);
                    }
                    self.runs[ri].ended = Some(self.runs[ri].natural_end);
                    self.runs[ri].status = Some(RunStatus::Passed);
                    d.live[i] = None;
                }
            }
            let books: Vec<Bookkeeping> = self
                .schedules
                .iter()
                .map(|s| d.state.schedules[&s.name])
                .collect();
            let decisions = plan_all(&self.schedules, &books, now, &BTreeSet::new());
            let mut wake = kill_at;
            let mut replan = false;
            for (i, dec) in decisions.into_iter().enumerate() {
                let s = self.schedules[i].clone();
                match dec {
                    Decision::Start { due, deadline } => {
                        assert!(d.live[i].is_none());
                        d.state.schedule_mut(&s.name, now).start(due, now);
                        let id = format!("{}-{due}", s.name);
                        d.state.push_run(RunRecord {
                            id,
                            suite: "quick".into(),
                            drive: s.drive.clone(),
                            schedule: Some(s.name.clone()),
                            started: now,
                            ended: None,
                            status: RunStatus::Running,
                            result_path: None,
                            reason: None,
                            write_bound_bytes: None,
                            stop: None,
                            written_bytes: None,
                        });
                        // A short index keeps the simulation fast (the bound is tested
                        // elsewhere).
                        let n = d.state.runs.len();
                        d.state.runs.drain(..n.saturating_sub(32));
                        match self.persist(&d) {
                            Err(Killed::Before) => return self.kill(&d, now),
                            Err(Killed::After) => {
                                // Persisted: it counts as started (and instantly died).
                                self.runs.push(Actual {
                                    schedule: i,
                                    due,
                                    started: now,
                                    ended: Some(now),
                                    natural_end: now,
                                    deadline,
                                    status: None,
                                });
                                return self.kill(&d, now);
                            }
                            Ok(()) => {}
                        }
                        let len = 60 + self.rng.below((s.max_duration * 3 / 2) as u64) as i64;
                        self.runs.push(Actual {
                            schedule: i,
                            due,
                            started: now,
                            ended: None,
                            natural_end: now + len,
                            deadline,
                            status: None,
                        });
                        d.live[i] = Some(self.runs.len() - 1);
                        wake = wake.min((now + len).min(deadline));
                    }
                    Decision::TimedOut { deadline, .. } => {
                        assert_eq!(deadline, now, "stopped exactly at the deadline");
                        d.state.schedule_mut(&s.name, now).finish(now);
                        if self.persist(&d).is_err() {
                            return self.kill(&d, now);
                        }
                        let ri = d.live[i].take().expect("a live run");
                        self.runs[ri].ended = Some(now);
                        self.runs[ri].status = Some(RunStatus::TimedOut);
                        replan = true;
                    }
                    Decision::Running { deadline } => {
                        let ri = d.live[i].expect("a live run");
                        wake = wake
                            .min(deadline)
                            .min(self.runs[ri].natural_end.max(now + 1));
                    }
                    Decision::Wait { until } => {
                        assert!(until > now);
                        wake = wake.min(until);
                    }
                    Decision::DriveBusy { .. } => {} // woken by the run holding the drive
                    Decision::Never => panic!("{} never runs", s.name),
                }
            }
            // A run just stopped may free its drive for another schedule: plan again.
            if replan {
                continue;
            }
            if wake >= kill_at {
                self.now = kill_at;
                return self.kill(&d, kill_at);
            }
            self.now = wake;
        }
    }
}

fn simulate(seed: u64, weeks: i64) -> World {
    let mut w = World {
        rng: Rng::new(seed),
        schedules: schedules(),
        disk: None,
        // Around 2027-2028, across the leap day.
        now: CivilTime::new(2027, 12, 1, 0, 0).to_unix() + (seed as i64 % 97) * 3_607,
        runs: Vec::new(),
        restarts: Vec::new(),
        kill_at_persist: 1 + seed % 20,
    };
    let end = w.now + weeks * 7 * DAY;
    while w.now < end {
        let lifetime = 1 + w.span(4 * DAY);
        let kill_at = w.now + lifetime;
        w.life(kill_at);
        let down = w.span(3 * DAY);
        w.now += down;
    }
    w
}

fn check(w: &World) {
    let mut seen = BTreeSet::new();
    let mut by_schedule: BTreeMap<usize, Vec<&Actual>> = BTreeMap::new();
    for r in &w.runs {
        let s = &w.schedules[r.schedule];
        assert!(
            seen.insert((r.schedule, r.due)),
            "{} ran twice for {}",
            s.name,
            r.due
        );
        assert!(s.cron.matches(r.due) && r.due % MINUTE == 0);
        assert!(r.due <= r.started);
        // Always the latest due time: stale missed ones are never run.
        assert_eq!(
            s.cron.prev_at_or_before(r.started),
            Some(r.due),
            "{}",
            s.name
        );
        if let Some(win) = &s.window {
            assert!(
                win.contains(r.started),
                "{} started outside its window",
                s.name
            );
        }
        let ended = r.ended.expect("every run ends");
        assert!(ended <= r.deadline, "{} ran past its deadline", s.name);
        if r.status == Some(RunStatus::TimedOut) {
            assert!(r.natural_end >= r.deadline);
        }
        by_schedule.entry(r.schedule).or_default().push(r);
    }
    for (i, runs) in &by_schedule {
        let s = &w.schedules[*i];
        for pair in runs.windows(2) {
            assert!(
                pair[0].started < pair[1].started,
                "{}: two starts at once",
                s.name
            );
            // No burst: each later run is for a due time after the previous start.
            assert!(pair[1].due > pair[0].started, "{}: catch-up burst", s.name);
            assert!(
                pair[1].started >= pair[0].ended.unwrap(),
                "{}: overlapping runs",
                s.name
            );
        }
        // After each restart, at most one run before the next new due time.
        for &r in &w.restarts {
            let next_due = s.cron.next_after(r).unwrap();
            let n = runs
                .iter()
                .filter(|a| a.started >= r && a.started < next_due)
                .count();
            assert!(n <= 1, "{}: {n} runs after the restart at {r}", s.name);
        }
    }
    // One run per drive at a time.
    let mut by_drive: BTreeMap<&str, Vec<(i64, i64)>> = BTreeMap::new();
    for r in &w.runs {
        by_drive
            .entry(&w.schedules[r.schedule].drive)
            .or_default()
            .push((r.started, r.ended.unwrap()));
    }
    for (drive, mut spans) in by_drive {
        spans.sort();
        for p in spans.windows(2) {
            assert!(p[1].0 >= p[0].1, "two runs on drive {drive}: {p:?}");
        }
    }
}

#[test]
fn killed_and_restarted_daemon_never_repeats_or_bursts() {
    let mut total_runs = 0;
    let mut total_restarts = 0;
    let mut per_schedule = vec![0usize; schedules().len()];
    let (mut timeouts, mut catch_ups) = (0, 0);
    for seed in 0..30 {
        let w = simulate(seed, 16);
        check(&w);
        total_runs += w.runs.len();
        total_restarts += w.restarts.len();
        for r in &w.runs {
            per_schedule[r.schedule] += 1;
            timeouts += (r.status == Some(RunStatus::TimedOut)) as usize;
            // Started after a restart for a due time from before it.
            catch_ups += w.restarts.iter().any(|&x| r.due < x && x <= r.started) as usize;
        }
        // The state on disk always loads and the bounds hold.
        let json = serde_json::to_string(&w.disk).unwrap();
        let state: Option<State> = serde_json::from_str(&json).unwrap();
        assert_eq!(state, w.disk);
    }
    eprintln!(
        "{total_runs} runs, {total_restarts} restarts, {timeouts} timeouts, {catch_ups} catch-ups"
    );
    assert!(total_restarts > 30 * 10, "{total_restarts} restarts");
    assert!(total_runs > 1000, "{total_runs} runs");
    assert!(timeouts > 10 && catch_ups > 10);
    // Every schedule ran, leap day included (the weeks cross 2028-02-29 for most seeds).
    assert!(per_schedule.iter().all(|&n| n > 0), "{per_schedule:?}");
}

#[test]
fn a_missed_run_happens_once_at_the_next_window() {
    // Due every day at noon, allowed 22:00-04:00. Last ran for Sunday 2026-11-29; the
    // daemon was down until Thursday 2026-12-03 10:00: one run, for Thursday noon, at 22:00.
    let s = &schedules()[2];
    let t = |d, h| CivilTime::new(2026, 11, d, h, 0).to_unix();
    let mut b = Bookkeeping::new(t(29, 0));
    b.start(t(29, 12), t(29, 22));
    b.finish(t(29, 23));
    let back = CivilTime::new(2026, 12, 3, 10, 0).to_unix();
    assert_eq!(
        decide(s, &b, back, false),
        Decision::Wait {
            until: CivilTime::new(2026, 12, 3, 22, 0).to_unix()
        }
    );
    let open = CivilTime::new(2026, 12, 3, 22, 0).to_unix();
    let d = decide(s, &b, open, false);
    assert_eq!(
        d,
        Decision::Start {
            due: CivilTime::new(2026, 12, 3, 12, 0).to_unix(),
            deadline: open + HOUR
        }
    );
    if let Decision::Start { due, .. } = d {
        b.start(due, open);
        b.finish(open + 600);
    }
    // Nothing more until the next noon's run, in the next window.
    assert_eq!(
        decide(s, &b, open + 601, false),
        Decision::Wait {
            until: CivilTime::new(2026, 12, 4, 22, 0).to_unix()
        }
    );
}

#[test]
fn decisions_at_random_moments_obey_the_rules() {
    let mut rng = Rng::new(11);
    let all = schedules();
    let base = CivilTime::new(2026, 1, 1, 0, 0).to_unix();
    for _ in 0..20_000 {
        let s = &all[rng.below(all.len() as u64) as usize];
        let now = base + rng.below(3 * 365 * DAY as u64) as i64;
        let mut b = Bookkeeping::new(now - rng.below(30 * DAY as u64) as i64);
        if rng.below(2) == 0 {
            b.last_due_handled = s
                .cron
                .prev_at_or_before(now - rng.below(10 * DAY as u64) as i64);
        }
        let busy = rng.below(4) == 0;
        match decide(s, &b, now, busy) {
            Decision::Start { due, deadline } => {
                assert!(!busy);
                assert_eq!(deadline, now + s.max_duration);
                assert_eq!(Some(due), s.cron.prev_at_or_before(now));
                assert!(b.last_due_handled.is_none_or(|h| due > h) && due >= b.first_seen);
                assert!(s.window.is_none_or(|w| w.contains(now)));
                // Once recorded, the same moment gives no second start.
                let mut b2 = b;
                b2.start(due, now);
                b2.finish(now);
                assert!(matches!(decide(s, &b2, now, false), Decision::Wait { .. }));
            }
            Decision::DriveBusy { due } => {
                assert!(busy);
                assert_eq!(pending_due(s, &b, now), Some(due));
            }
            Decision::Wait { until } => {
                assert!(until > now);
                match pending_due(s, &b, now) {
                    // Pending but outside the window: wait for the opening.
                    Some(_) => {
                        let w = s.window.as_ref().unwrap();
                        assert!(!w.contains(now) && w.next_open(now) == Some(until));
                    }
                    None => {
                        let next = s.cron.next_after(now).unwrap();
                        assert!(until >= next);
                        assert!(s.window.is_none_or(|w| w.contains(until)));
                    }
                }
            }
            d => panic!("unexpected {d:?}"),
        }
    }
}

// ---- the state file ----

/// A state whose parts agree with each other, so that a torn one would show.
fn consistent_state(n: usize) -> State {
    let mut s = State::default();
    for i in 0..n {
        s.schedule_mut(&format!("s{i}"), i as i64)
            .start(i as i64 * 60, i as i64 * 60);
        s.push_sample(
            "nvme0n1",
            Sample {
                unix_seconds: i as f64,
                host_written_bytes: i as u128 * 1_000_000,
                percentage_used_ratio: None,
            },
        );
        s.push_run(RunRecord {
            id: format!("r{i}"),
            suite: "quick".into(),
            drive: "nvme0n1".into(),
            schedule: Some(format!("s{i}")),
            started: i as i64,
            ended: Some(i as i64 + 1),
            status: RunStatus::Passed,
            result_path: Some(PathBuf::from(format!("/var/lib/driveprobe/r{i}.json"))),
            reason: None,
            write_bound_bytes: None,
            stop: None,
            written_bytes: None,
        });
        s.add_self_written("nvme0n1", i as i64 * DAY, 4096);
    }
    s
}

fn assert_consistent(s: &State) -> usize {
    let n = s.schedules.len();
    assert_eq!(s.runs.len(), n);
    assert_eq!(s.health.get("nvme0n1").map_or(0, Vec::len), n);
    assert_eq!(s.self_written_total("nvme0n1"), n as u128 * 4096);
    if n > 0 {
        assert_eq!(s.runs[n - 1].id, format!("r{}", n - 1));
    }
    n
}

#[test]
fn loads_while_another_thread_saves_always_see_a_whole_state() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.json");
    save_atomic(&path, &consistent_state(0)).unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let writer = {
        let (path, done) = (path.clone(), done.clone());
        std::thread::spawn(move || {
            for i in 0..1000 {
                save_atomic(&path, &consistent_state(i % 150)).unwrap();
            }
            done.store(true, Ordering::SeqCst);
        })
    };
    let mut loads = 0;
    let mut sizes = BTreeSet::new();
    while !done.load(Ordering::SeqCst) {
        let s = load(&path).expect("every load succeeds");
        sizes.insert(assert_consistent(&s));
        loads += 1;
    }
    writer.join().unwrap();
    assert_eq!(assert_consistent(&load(&path).unwrap()), 999 % 150);
    assert!(
        loads > 10 && sizes.len() > 2,
        "{loads} loads, {} sizes",
        sizes.len()
    );
}

const CHILD_ENV: &str = "DRIVEPROBE_SCHEDULE_TEST_WRITER";

/// [`state_survives_kill_9`]'s name in this binary, for the child to run it alone.
const KILL_9_TEST: &str = "schedule::state_survives_kill_9";

/// As a child (CHILD_ENV set): a daemon that loads, grows and saves the state forever.
fn writer_forever(path: &Path) -> ! {
    loop {
        let s = load(path).expect("the writer's load");
        let n = assert_consistent(&s);
        save_atomic(path, &consistent_state((n + 1) % 300)).unwrap();
    }
}

#[test]
fn state_survives_kill_9() {
    if let Some(p) = std::env::var_os(CHILD_ENV) {
        writer_forever(Path::new(&p));
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.json");
    let mut rng = Rng::new(5);
    let mut nonempty = 0;
    for _ in 0..20 {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([KILL_9_TEST, "--exact", "--test-threads=1"])
            .env(CHILD_ENV, &path)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(20 + rng.below(150)));
        child.kill().unwrap(); // SIGKILL
        let status = child.wait().unwrap();
        assert!(!status.success(), "the writer is killed, not finished");
        let s = load(&path).unwrap_or_else(|e| panic!("after kill -9: {e}"));
        if assert_consistent(&s) > 0 {
            nonempty += 1;
        }
    }
    assert!(
        nonempty >= 10,
        "the writer rarely got to write ({KILL_9_TEST} in this binary?): {nonempty}"
    );
    // A leftover temporary file does no harm: the next save overwrites it.
    std::fs::write(temp_path(&path), b"{ torn").unwrap();
    save_atomic(&path, &consistent_state(3)).unwrap();
    assert_eq!(assert_consistent(&load(&path).unwrap()), 3);
}
