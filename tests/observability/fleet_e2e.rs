//! Issue 21's fleet path, end to end: the shipped rules and the fleet dashboard on a
//! central Prometheus fed by remote write, the way a fleet outgrows one Prometheus.
//!
//! - Three real daemons (`driveprobe daemon`), each watching two raw loop devices over
//!   files in /dev/shm, named `a` and `b` on every daemon (as `nvme0n1` is on every host:
//!   the rules tell drives apart by job, instance and drive). Their model and firmware
//!   come from the daemon's own health reader: `smartctl` on the daemon's PATH is a
//!   stand-in printing real smartctl JSON (an NVMe drive, its serial made the loop
//!   device's), the same model and firmware for all six: one cohort of six, above the
//!   rule's minimum of five. Daemon 0 also has a file target on tmpfs (no model, in no
//!   cohort) with one short scheduled fio job, so the run series the dashboard shows
//!   exist; daemon 2 runs with `health_detail_metrics = false`.
//! - One Prometheus agent per daemon (Debian's prometheus, `--enable-feature=agent`),
//!   scraping it every second, with an external label `site`, remote-writing to
//! - a central Prometheus (`--web.enable-remote-write-receiver`) that scrapes nothing and
//!   evaluates `config/prometheus/driveprobe.rules.yml` every second.
//! - Drive `b` of daemon 0 is made slower by a real mechanism: the block layer's
//!   throttle (cgroup v1 `blkio.throttle.read_bps_device`, or v2 `io.max` where the io
//!   controller is on the unified hierarchy) limits the daemon's reads of that loop
//!   device to 2 KiB a second, so each 4 KiB canary read waits 2 s in the block layer
//!   between submission and completion: the drive's service time rises, as it does on a
//!   drive retrying reads. (The host's kernel has no
//!   device-mapper, so no dm-delay; see docs/fleet.md.)
//! - Drive `a` of daemon 1 is throttled the same way and also busy: a reader outside the
//!   daemon's cgroup (`dd iflag=direct`, unthrottled) does hundreds of I/Os a second on
//!   it. Slow because busy, it must not be an outlier.
//!
//! Then, on the central Prometheus: DriveprobeSiblingOutlier's expression (as Prometheus
//! loaded it, without its 30-minute `for:`; promtool's tests prove the `for:`) returns
//! exactly the slowed drive, evaluation after evaluation, and the alert is pending for it
//! alone; the busy drive's p99 is as far above the median but its load ratio takes it
//! out; every rule is healthy; every panel query of the fleet dashboard returns data;
//! every series of each daemon's scrape reached the central store with its labels and
//! the agent's `site`. The series per drive and per daemon are counted from the daemons'
//! own scrapes and printed (docs/fleet.md's figures).

use crate::common;
use crate::dashboards;
use crate::prometheus;

// tests/common/prometheus.rs reaches the harness's HTTP client as `super::daemon`.
use common::daemon;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use daemon::{Daemon, Exposition};
use prometheus::{yaml_quote, Mode, Prometheus, QueryResult};
use serde_json::Value;

/// The scrape job (the rules find the daemon by a job name containing "driveprobe").
const JOB: &str = "driveprobe";
const RULES: &str = "config/prometheus/driveprobe.rules.yml";
const ALERT: &str = "DriveprobeSiblingOutlier";
/// Daemons, each with the drives [`DRIVES`].
const DAEMONS: usize = 3;
const DRIVES: [&str; 2] = ["a", "b"];
/// The model all of [`DRIVES`] report (the NVMe fixture's): the cohort.
const NVME_MODEL: &str = "INTEL SSDPEKNW010T8";
/// A SATA hard disk (the ATA fixture) on the daemons of [`ATA_ON`], for the series
/// counts: a cohort of two, too small to be compared.
const ATA_DRIVE: &str = "c";
const ATA_ON: [usize; 2] = [0, NO_DETAIL];
/// The canary: a read probe on every drive, this many I/Os a second.
const PROBE: &str = "rd";
const RATE_IOPS: u32 = 20;
/// What the throttle lets the daemon read from a throttled drive, in bytes a second: a
/// 4 KiB canary read waits 2 s in the block layer. A limit on I/Os a second (10, half the
/// canary's rate) made each read wait about 100 ms, which a busy host matches on every
/// loop device (their reads wait for the loop worker's CPU): at a load of 10-27 on 2
/// cores every drive's p99 was 0.8-1.5 s and the slowed one 1.1x the median.
const THROTTLE_READ_BPS: u32 = 2048;
/// The slowed drive (daemon index, drive) and the busy one.
const SLOW: (usize, &str) = (0, "b");
const BUSY: (usize, &str) = (1, "a");
/// The daemon run with `health_detail_metrics = false`.
const NO_DETAIL: usize = 2;
/// Due since January 1st: with the schedule first seen long ago, the run starts at once.
const DUE_LONG_AGO: &str = "0 0 1 1 *";
/// The file target with the scheduled fio job (daemon 0), in no cohort.
const SCRATCH: &str = "scratch";
/// The fleet dashboard.
const FLEET: &str = "driveprobe-fleet";
/// Fleet panels that may rightly be empty, with why.
const MAY_BE_EMPTY: &[(&str, &str)] = &[(
    "driveprobe alerts firing",
    "ALERTS{alertstate=\"firing\"}: every alert has a `for:` of a minute or more \
     (DriveprobeSiblingOutlier 30 minutes), longer than this test; the pending alert is \
     checked, and promtool's tests prove the `for:`",
)];

#[test]
fn a_slowed_drive_is_the_one_sibling_outlier_on_a_central_prometheus_fed_by_agents() {
    common::need_root();
    let t0 = Instant::now();
    prometheus::binary(); // fails at once, saying "run scripts/test", when it is missing
    need_fio();
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let rules = std::fs::canonicalize(repo.join(RULES)).expect("the rule file");

    let fleet = Fleet::start();
    println!(
        "{} daemons on {} drives, throttle by {} ({:.1?})",
        DAEMONS,
        DAEMONS * DRIVES.len(),
        fleet.throttle_how,
        t0.elapsed()
    );

    // The central store, then one agent per daemon writing to it.
    let central = Prometheus::start_config(
        &format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
             rule_files:\n  - {}\n",
            yaml_quote(&rules.display().to_string())
        ),
        Mode::Server,
        &["--web.enable-remote-write-receiver"],
    );
    let agents: Vec<Prometheus> = fleet
        .daemons
        .iter()
        .enumerate()
        .map(|(i, d)| {
            Prometheus::start_config(
                &format!(
                    "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  \
                     external_labels:\n    site: {}\n\
                     scrape_configs:\n  - job_name: {JOB}\n    static_configs:\n      \
                     - targets: [{}]\n\
                     remote_write:\n  - url: {}\n    queue_config:\n      \
                     batch_send_deadline: 1s\n      min_backoff: 100ms\n      max_backoff: 1s\n",
                    yaml_quote(&site(i)),
                    yaml_quote(&d.addr),
                    yaml_quote(&format!("http://{}/api/v1/write", central.addr)),
                ),
                Mode::Agent,
                &[],
            )
        })
        .collect();
    println!(
        "central at {}, agents at {:?} ({:.1?})",
        central.addr,
        agents.iter().map(|a| &a.addr).collect::<Vec<_>>(),
        t0.elapsed()
    );

    let ready = Duration::from_secs(120);
    let n_cohort = DAEMONS * DRIVES.len();
    let cohort = format!("probe=\"{PROBE}\", model=\"{NVME_MODEL}\"");
    for (what, expr) in [
        (
            "every daemon up on the central store",
            format!("count(up{{job=\"{JOB}\"}} == 1) == {DAEMONS}"),
        ),
        (
            "the cohort's six drives with their model, through the recording rules",
            format!(
                "count(driveprobe:probe_latency_p99_seconds:avg30m_with_model{{{cohort}}}) \
                 == {n_cohort}"
            ),
        ),
        (
            "the busy drive's load",
            format!(
                "driveprobe:drive_load_iops:cohort_ratio{{instance=\"{}\", drive=\"{}\"}}",
                fleet.daemons[BUSY.0].addr, BUSY.1
            ),
        ),
        (
            "the scheduled fio job's run",
            format!(
                "driveprobe_run_last_start_timestamp_seconds{{instance=\"{}\", drive=\"{SCRATCH}\"}}",
                fleet.daemons[0].addr
            ),
        ),
        (
            "the rated endurance of the drives",
            "driveprobe_endurance_projected_wearout_timestamp_seconds".to_string(),
        ),
    ] {
        central.wait_for(what, &expr, ready);
    }
    println!("data on the central store ({:.1?})", t0.elapsed());

    // The alert's expression as the central Prometheus loaded it from the shipped file.
    let alert_expr = loaded_alert_expr(&central, ALERT);
    let slow = fleet.key(SLOW);
    let busy = fleet.key(BUSY);
    let want: BTreeSet<DriveKey> = [slow.clone()].into();

    // Until the expression singles out the slowed drive...
    let found = Instant::now();
    let mut last = BTreeSet::new();
    while found.elapsed() < Duration::from_secs(180) {
        last = drives_of(&query(&central, &alert_expr));
        if last == want {
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    assert_eq!(
        last,
        want,
        "{ALERT}'s expression on the central store: expected exactly the slowed drive\n{}",
        cohort_table(&central)
    );
    println!(
        "{ALERT}'s expression singles out {slow:?} ({:.1?})",
        t0.elapsed()
    );
    // ...and keeps to it, evaluation after evaluation (the rules run every second).
    let hold = Instant::now();
    let mut evaluations = 0;
    while hold.elapsed() < Duration::from_secs(15) {
        let got = drives_of(&query(&central, &alert_expr));
        assert_eq!(
            got,
            want,
            "{ALERT}'s expression changed after {:.1?} of holding\n{}",
            hold.elapsed(),
            cohort_table(&central)
        );
        evaluations += 1;
        std::thread::sleep(Duration::from_millis(500));
    }
    println!("held for {evaluations} queries over 15 s");

    // The relations behind it: the cohort is all six; the slowed and the busy drive are
    // both far above its median, the others near it; the busy one is taken out by its
    // load, which the others do not have.
    let sizes = query(
        &central,
        &format!("driveprobe:probe_latency_p99_seconds:cohort_size{{{cohort}}}"),
    );
    assert_eq!(
        sizes.series.iter().map(|s| s.value).collect::<Vec<f64>>(),
        vec![n_cohort as f64],
        "one cohort of every drive: {sizes:?}"
    );
    let ata = query(
        &central,
        &format!(
            "driveprobe:probe_latency_p99_seconds:cohort_size{{probe=\"{PROBE}\", model!=\"{NVME_MODEL}\"}}"
        ),
    );
    assert_eq!(
        ata.series.iter().map(|s| s.value).collect::<Vec<f64>>(),
        vec![ATA_ON.len() as f64],
        "the SATA disks' cohort: {ata:?}"
    );
    let ratio = threshold(&central, "sibling_outlier_ratio");
    let load_ratio = threshold(&central, "sibling_load_ratio");
    let ratios = by_drive(&query(
        &central,
        &format!("driveprobe:probe_latency_p99_seconds:cohort_ratio{{{cohort}}}"),
    ));
    let loads = by_drive(&query(&central, "driveprobe:drive_load_iops:cohort_ratio"));
    let table = cohort_table(&central);
    for (k, r) in &ratios {
        if *k == slow || *k == busy {
            assert!(
                *r > ratio,
                "{k:?} is throttled: its p99 should be over {ratio}x the median\n{table}"
            );
        } else {
            assert!(
                *r <= ratio,
                "{k:?} is not throttled: its p99 should be within {ratio}x\n{table}"
            );
        }
        let l = loads.get(k).copied().unwrap_or(f64::NAN);
        assert_eq!(
            l > load_ratio,
            *k == busy,
            "{k:?}'s load ratio {l} (only the busy drive is over {load_ratio})\n{table}"
        );
    }
    assert_eq!(ratios.len(), n_cohort, "{table}");
    println!("{table}");

    // The alert itself is pending for the slowed drive alone (its `for:` is 30 minutes).
    let pending = format!("ALERTS{{alertname=\"{ALERT}\", alertstate=\"pending\"}}");
    let p = central.wait_for(
        "the outlier alert pending",
        &pending,
        Duration::from_secs(30),
    );
    assert_eq!(drives_of(&p), want, "{pending}: {p:?}");
    for s in &p.series {
        assert_eq!(
            s.labels.get("site").map(String::as_str),
            Some(site(SLOW.0).as_str()),
            "the agent's external label reached the alert: {s:?}"
        );
    }

    // The per-drive recording rules keep the agents' external label too: an alert on
    // them (DriveprobeProbeErrors reads driveprobe:probe_errors:rate5m) can be routed
    // by site.
    for rec in [
        "driveprobe:probe_latency_seconds:p99_5m",
        "driveprobe:probe_iops:rate5m",
        "driveprobe:probe_errors:rate5m",
        "driveprobe:probe_bytes:rate5m",
    ] {
        let r = central.wait_for(rec, rec, Duration::from_secs(30));
        assert!(
            !r.series.is_empty() && r.series.iter().all(|s| s.labels.contains_key("site")),
            "{rec} lost the agents' `site` label: {r:?}"
        );
    }

    every_rule_healthy(&central);
    fleet_panels_return_data(&central, repo);
    for (i, d) in fleet.daemons.iter().enumerate() {
        every_scraped_series_reaches_the_central_store(&central, d, i);
    }
    series_counts(&fleet, &central);
    store_figures(&central, &agents);

    drop(agents);
    drop(central);
    drop(fleet);
    println!("done in {:.1?}", t0.elapsed());
}

// ---------------------------------------------------------------------------------------
// The fleet
// ---------------------------------------------------------------------------------------

/// The daemons and what they stand on. Fields drop in order: the load, the daemons, then
/// the throttles, the loop devices and the files.
struct Fleet {
    load: Option<Child>,
    daemons: Vec<Daemon>,
    _throttles: Vec<Throttle>,
    throttle_how: &'static str,
    _loops: Vec<common::Loop>,
    _dir: tempfile::TempDir,
}

/// A drive across the fleet: (instance, drive).
type DriveKey = (String, String);

/// The drives of daemon `i`.
fn drives_of_daemon(i: usize) -> Vec<&'static str> {
    let mut v = DRIVES.to_vec();
    if ATA_ON.contains(&i) {
        v.push(ATA_DRIVE);
    }
    v
}

fn site(i: usize) -> String {
    format!("site-{i}")
}

impl Fleet {
    fn start() -> Fleet {
        let dir = common::shm_dir("dp-fleet-");
        let d = dir.path();
        let fixture =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/smartctl/smart-nvme.json");
        let nvme: Value =
            serde_json::from_str(&std::fs::read_to_string(&fixture).expect("NVMe fixture"))
                .expect("NVMe fixture parses");

        // Six loop devices over sparse files, and the smartctl stand-in's answer for each.
        let mut loops = Vec::new();
        let mut cases = String::new();
        let ata: Value = serde_json::from_str(
            &std::fs::read_to_string(fixture.with_file_name("smart-ata.json"))
                .expect("ATA fixture"),
        )
        .expect("ATA fixture parses");
        assert_eq!(nvme["model_name"], NVME_MODEL, "{}", fixture.display());
        for i in 0..DAEMONS {
            for drive in drives_of_daemon(i) {
                let img = d.join(format!("{i}{drive}.img"));
                std::fs::File::create(&img)
                    .and_then(|f| f.set_len(16 << 20))
                    .expect("sparse image");
                let lo = common::Loop::attach(&img, &[]);
                let mut json = if drive == ATA_DRIVE {
                    ata.clone()
                } else {
                    nvme.clone()
                };
                json["serial_number"] = Value::from(common::loop_serial(&img));
                let out = d.join(format!("{i}{drive}.json"));
                std::fs::write(&out, json.to_string()).unwrap();
                let _ = writeln!(cases, "  {}) exec cat '{}' ;;", lo.s(), out.display());
                loops.push((i, drive, img, lo));
            }
        }
        let tools = d.join("tools");
        std::fs::create_dir_all(&tools).unwrap();
        let smartctl = tools.join("smartctl");
        std::fs::write(
            &smartctl,
            format!(
                "#!/bin/sh\n# driveprobe runs `smartctl OPTIONS... DEVICE`: the device comes last.\n\
                 for arg in \"$@\"; do dev=$arg; done\ncase \"$dev\" in\n{cases}esac\n\
                 echo \"smartctl stand-in: no data for $dev\" >&2\nexit 2\n"
            ),
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&smartctl, std::fs::Permissions::from_mode(0o755)).unwrap();
        let path = format!(
            "{}:{}",
            tools.display(),
            std::env::var("PATH").unwrap_or_default()
        );

        // A short fio job on daemon 0's scratch file target: the run series.
        let job = d.join("short.fio");
        std::fs::write(
            &job,
            "[rd]\nrw=randread\nbs=4k\nioengine=psync\nfilename=${TARGET}\nruntime=1\n\
             time_based\nrate_iops=200\n",
        )
        .unwrap();

        let mut daemons = Vec::new();
        for i in 0..DAEMONS {
            let state = d.join(format!("state{i}"));
            let mut cfg = format!(
                "state_dir = \"{}\"\ndiscovery.enabled = false\nhealth_interval = \"2s\"\n",
                state.display()
            );
            if i == NO_DETAIL {
                cfg.push_str("health_detail_metrics = false\n");
            }
            cfg.push_str(
                "\n[wear_budget]\nunrated_bytes_per_day = \"1TiB\"\n\
                 scheduled_unrated_bytes = \"1PiB\"\n\n",
            );
            for (_, drive, img, lo) in loops.iter().filter(|l| l.0 == i) {
                let _ = write!(
                    cfg,
                    "[[drive]]\nname = \"{drive}\"\nserial = \"{}\"\npath = \"{}\"\n\
                     rated_tbw_bytes = \"200TB\"\nwarranty_years = 5\n\n",
                    common::loop_serial(img),
                    lo.s()
                );
            }
            if i == 0 {
                cfg.push_str(&daemon::file_drive(
                    SCRATCH,
                    &d.join("scratch.dat"),
                    "16MiB",
                ));
            }
            let _ = write!(
                cfg,
                "[[probe]]\nname = \"{PROBE}\"\ndrives = [\"*\"]\nwindow = \"5s\"\n\
                 workload = {{ rate_iops = {RATE_IOPS} }}\n\n"
            );
            if i == 0 {
                let _ = write!(
                    cfg,
                    "[[schedule]]\nname = \"f\"\ndrives = [\"{SCRATCH}\"]\nfio_job = \"{}\"\n\
                     cron = \"{DUE_LONG_AGO}\"\nmax_duration = \"2m\"\n\n",
                    job.display()
                );
                daemon::seed_due_state(&state, &[&format!("f/{SCRATCH}")]);
            }
            let file = d.join(format!("d{i}.toml"));
            std::fs::write(&file, &cfg).unwrap();
            common::run(daemon::BIN, &["check-config", file.to_str().unwrap()]);
            daemons.push(Daemon::start(&file, &[("PATH", &path)]));
        }

        // The slowed and the busy drive: the daemon's reads of them throttled.
        let dev_of = |(i, drive): (usize, &str)| -> &common::Loop {
            &loops
                .iter()
                .find(|l| l.0 == i && l.1 == drive)
                .expect("a drive of the fleet")
                .3
        };
        let mut throttles = Vec::new();
        let mut how = "";
        for (k, which) in [SLOW, BUSY].into_iter().enumerate() {
            let t = Throttle::new(
                &format!("dp-fleet-{}-{k}", std::process::id()),
                dev_of(which).path(),
                THROTTLE_READ_BPS,
            );
            t.add(daemons[which.0].pid());
            how = t.how;
            throttles.push(t);
        }
        // The busy drive's other load: direct reads outside the daemon's cgroup.
        let load = Command::new("sh")
            .arg("-c")
            .arg(format!(
                "while :; do dd if='{}' of=/dev/null bs=4k count=100 iflag=direct status=none; \
                 sleep 0.25; done",
                dev_of(BUSY).s()
            ))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the busy drive's reader");

        Fleet {
            load: Some(load),
            daemons,
            _throttles: throttles,
            throttle_how: how,
            _loops: loops.into_iter().map(|l| l.3).collect(),
            _dir: dir,
        }
    }

    fn key(&self, (i, drive): (usize, &str)) -> DriveKey {
        (self.daemons[i].addr.clone(), drive.to_string())
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        if let Some(mut l) = self.load.take() {
            let _ = l.kill();
            let _ = l.wait();
        }
        if std::thread::panicking() {
            for (i, d) in self.daemons.iter().enumerate() {
                let log = d.log();
                let lines: Vec<&str> = log.lines().collect();
                eprintln!(
                    "----- daemon {i}'s log (last {} of {} lines) -----\n{}\n----- end -----",
                    lines.len().min(40),
                    lines.len(),
                    lines[lines.len().saturating_sub(40)..].join("\n")
                );
            }
        }
        // The daemons go before the throttles (a cgroup with tasks cannot be removed).
        self.daemons.clear();
    }
}

/// The block layer's throttle on one device's reads, for the processes put in its
/// cgroup: cgroup v1's blkio controller, or v2's io controller. Removed on drop (the
/// processes in it must have exited, or are moved back to the root first).
struct Throttle {
    dir: PathBuf,
    root: PathBuf,
    how: &'static str,
}

const BLKIO_V1: &str = "/sys/fs/cgroup/blkio";
const UNIFIED: [&str; 2] = ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"];

impl Throttle {
    fn new(name: &str, dev: &Path, read_bps: u32) -> Throttle {
        let majmin = std::fs::read_to_string(
            Path::new("/sys/class/block")
                .join(dev.file_name().expect("a device name"))
                .join("dev"),
        )
        .expect("the device's major:minor in sysfs")
        .trim()
        .to_string();
        let v1 = Path::new(BLKIO_V1);
        if v1.join("blkio.throttle.read_bps_device").is_file() {
            let dir = v1.join(name);
            std::fs::create_dir(&dir).expect("a blkio cgroup");
            let t = Throttle {
                dir,
                root: v1.to_path_buf(),
                how: "cgroup v1 blkio.throttle.read_bps_device",
            };
            write(
                &t.dir.join("blkio.throttle.read_bps_device"),
                &format!("{majmin} {read_bps}"),
            );
            return t;
        }
        let root = UNIFIED
            .iter()
            .map(Path::new)
            .find(|r| {
                std::fs::read_to_string(r.join("cgroup.controllers"))
                    .is_ok_and(|c| c.split_whitespace().any(|x| x == "io"))
            })
            .unwrap_or_else(|| {
                panic!(
                    "no block I/O throttle on this host: neither cgroup v1's blkio \
                     controller ({BLKIO_V1}) nor the io controller of cgroup v2"
                )
            });
        write(&root.join("cgroup.subtree_control"), "+io");
        let dir = root.join(name);
        std::fs::create_dir(&dir).expect("an io cgroup");
        let t = Throttle {
            dir,
            root: root.to_path_buf(),
            how: "cgroup v2 io.max rbps",
        };
        write(&t.dir.join("io.max"), &format!("{majmin} rbps={read_bps}"));
        t
    }

    /// Moves process `pid` (all its threads; the threads it starts later follow).
    fn add(&self, pid: i32) {
        write(&self.dir.join("cgroup.procs"), &pid.to_string());
    }
}

impl Drop for Throttle {
    fn drop(&mut self) {
        let start = Instant::now();
        loop {
            for pid in std::fs::read_to_string(self.dir.join("cgroup.procs"))
                .unwrap_or_default()
                .lines()
            {
                let _ = std::fs::write(self.root.join("cgroup.procs"), pid);
            }
            if std::fs::remove_dir(&self.dir).is_ok() || start.elapsed() > Duration::from_secs(10) {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        if self.dir.exists() {
            eprintln!("warning: cannot remove the cgroup {}", self.dir.display());
        }
    }
}

fn write(path: &Path, text: &str) {
    std::fs::write(path, text)
        .unwrap_or_else(|e| panic!("write {text:?} to {}: {e}", path.display()));
}

fn need_fio() {
    let ok = Command::new("fio")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        ok,
        "needs fio: apt-get install fio (scripts/test installs it)"
    );
}

// ---------------------------------------------------------------------------------------
// Queries
// ---------------------------------------------------------------------------------------

fn query(p: &Prometheus, expr: &str) -> QueryResult {
    p.query(expr)
        .unwrap_or_else(|e| panic!("{expr}: {e}\nlog:\n{}", p.log()))
}

/// The (instance, drive) of every series of a result.
fn drives_of(r: &QueryResult) -> BTreeSet<DriveKey> {
    r.series
        .iter()
        .map(|s| {
            (
                s.labels.get("instance").cloned().unwrap_or_default(),
                s.labels.get("drive").cloned().unwrap_or_default(),
            )
        })
        .collect()
}

/// (instance, drive) -> value; panics on two series of one drive.
fn by_drive(r: &QueryResult) -> BTreeMap<DriveKey, f64> {
    let mut out = BTreeMap::new();
    for s in &r.series {
        let k = (
            s.labels.get("instance").cloned().unwrap_or_default(),
            s.labels.get("drive").cloned().unwrap_or_default(),
        );
        assert!(
            out.insert(k.clone(), s.value).is_none(),
            "two series of {k:?}: {r:?}"
        );
    }
    out
}

fn threshold(p: &Prometheus, name: &str) -> f64 {
    let r = query(p, &format!("driveprobe:threshold:{name}"));
    assert_eq!(r.series.len(), 1, "driveprobe:threshold:{name}: {r:?}");
    r.series[0].value
}

/// The cohort as the central store sees it, for the failure messages and the log.
fn cohort_table(p: &Prometheus) -> String {
    let p99 = by_drive(&query(
        p,
        &format!("driveprobe:probe_latency_p99_seconds:avg30m_with_model{{probe=\"{PROBE}\"}}"),
    ));
    let ratio = by_drive(&query(
        p,
        &format!("driveprobe:probe_latency_p99_seconds:cohort_ratio{{probe=\"{PROBE}\"}}"),
    ));
    let load = by_drive(&query(p, "driveprobe:drive_load_iops:rate30m"));
    let load_ratio = by_drive(&query(p, "driveprobe:drive_load_iops:cohort_ratio"));
    let mut t = format!(
        "{:<22} {:<6} {:>12} {:>10} {:>10} {:>10}\n",
        "instance", "drive", "p99 avg (s)", "/ median", "load IOPS", "/ median"
    );
    for (k, v) in &p99 {
        let g = |m: &BTreeMap<DriveKey, f64>| m.get(k).copied().unwrap_or(f64::NAN);
        let _ = writeln!(
            t,
            "{:<22} {:<6} {:>12.6} {:>10.2} {:>10.1} {:>10.2}",
            k.0,
            k.1,
            v,
            g(&ratio),
            g(&load),
            g(&load_ratio)
        );
    }
    t
}

/// The expression of alert `name` as Prometheus loaded it (`/api/v1/rules`).
fn loaded_alert_expr(p: &Prometheus, name: &str) -> String {
    let v = p.api("/api/v1/rules?type=alert").expect("/api/v1/rules");
    v["data"]["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
        .find(|r| r["name"] == name)
        .and_then(|r| r["query"].as_str().map(String::from))
        .unwrap_or_else(|| panic!("the central Prometheus has no alert {name}: {v}"))
}

/// Every rule the central store evaluates is healthy: no join of the fleet's series
/// fails (a many-to-many match would be an error here, not an empty result).
fn every_rule_healthy(p: &Prometheus) {
    let t0 = Instant::now();
    loop {
        let v = p.api("/api/v1/rules").expect("/api/v1/rules");
        let rules: Vec<Value> = v["data"]["groups"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
            .collect();
        assert!(!rules.is_empty(), "no rules loaded: {v}");
        let bad: Vec<String> = rules
            .iter()
            .filter(|r| r["health"] != "ok")
            .map(|r| format!("{}: {} {}", r["name"], r["health"], r["lastError"]))
            .collect();
        if bad.is_empty() {
            return;
        }
        // "unknown" until a rule's first evaluation.
        assert!(
            t0.elapsed() < Duration::from_secs(20) && bad.iter().all(|b| b.contains("\"unknown\"")),
            "rules not healthy on the central store:\n{}",
            bad.join("\n")
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// Every panel query of the fleet dashboard returns data (not only NaN) on the central
/// store, but those of [`MAY_BE_EMPTY`]; each must evaluate.
fn fleet_panels_return_data(p: &Prometheus, repo: &Path) {
    let panels: Vec<(String, String, String)> = dashboards::panel_queries(repo)
        .into_iter()
        .filter(|(d, _, _)| d == FLEET)
        .collect();
    assert!(
        !panels.is_empty(),
        "the fleet dashboard has no panel queries"
    );
    for (title, _) in MAY_BE_EMPTY {
        assert!(
            panels.iter().any(|(_, t, _)| t == title),
            "MAY_BE_EMPTY names {title:?}, which is no fleet panel any more"
        );
    }
    let data = |r: &QueryResult| r.series.iter().filter(|s| !s.value.is_nan()).count();
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut failures = Vec::new();
    for (_, title, expr) in &panels {
        if MAY_BE_EMPTY.iter().any(|(t, _)| t == title) {
            if let Err(e) = p.query(expr) {
                failures.push(format!(
                    "panel {title:?}: does not evaluate: {e}\n    {expr}"
                ));
            }
            continue;
        }
        loop {
            match p.query(expr) {
                Err(e) => {
                    failures.push(format!(
                        "panel {title:?}: does not evaluate: {e}\n    {expr}"
                    ));
                    break;
                }
                Ok(r) if data(&r) > 0 => {
                    println!("ok {:>3}  {title}: {}", data(&r), one_line(expr));
                    break;
                }
                Ok(r) if Instant::now() > deadline => {
                    failures.push(format!(
                        "panel {title:?}: no data on the central store ({} series)\n    {expr}",
                        r.series.len()
                    ));
                    break;
                }
                Ok(_) => std::thread::sleep(Duration::from_secs(1)),
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} fleet panel(s) fail on the central store:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// A series of a scrape: its name and labels (job, instance and the agent's site added
/// as the central store holds them).
type SeriesId = BTreeMap<String, String>;

/// The Accept header Prometheus 2.42 scrapes with: OpenMetrics first. The daemon then
/// writes `le` in OpenMetrics' canonical form (`le="1.0"`, where the text format has
/// `le="1"`), so a comparison with the central store must scrape the same way.
const PROMETHEUS_ACCEPT: &str = "application/openmetrics-text;version=1.0.0,\
     application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";

/// A scrape of the daemon as Prometheus makes it.
fn scrape_as_prometheus(d: &Daemon) -> Exposition {
    let (code, _, body) = d.get_with("/metrics", &[("Accept", PROMETHEUS_ACCEPT)]);
    assert_eq!(code, 200, "/metrics: {body}");
    Exposition::parse(&body)
}

/// The series of a scrape as the central store holds them: labels with an empty value
/// dropped (Prometheus does not store them: `device=""` of a drive that is down is no
/// label), job, instance and the agent's `site` added.
fn ids_of_scrape(e: &Exposition, instance: &str, i: usize) -> BTreeSet<SeriesId> {
    e.samples
        .iter()
        .map(|s| {
            let mut l: SeriesId = s
                .labels
                .iter()
                .filter(|(_, v)| !v.is_empty())
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            l.insert("__name__".into(), s.name.clone());
            l.insert("job".into(), JOB.into());
            l.insert("instance".into(), instance.into());
            l.insert("site".into(), site(i));
            l
        })
        .collect()
}

fn now_unix() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// The series of `instance` the central store saw in the last minute.
fn central_ids(p: &Prometheus, instance: &str) -> BTreeSet<SeriesId> {
    let now = now_unix();
    let path = format!(
        "/api/v1/series?match[]={}&start={:.3}&end={:.3}",
        prometheus::urlencode(&format!("{{instance=\"{instance}\"}}")),
        now - 60.0,
        now
    );
    let v = p.api(&path).expect("/api/v1/series");
    assert_eq!(v["status"], "success", "{path}: {v}");
    v["data"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|s| {
            s.as_object()
                .into_iter()
                .flatten()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                .collect()
        })
        .collect()
}

/// Every series of a scrape of the daemon reaches the central store through the agent,
/// every label intact and the agent's `site` added: nothing the rules join on is lost.
fn every_scraped_series_reaches_the_central_store(p: &Prometheus, d: &Daemon, i: usize) {
    let scraped = ids_of_scrape(&scrape_as_prometheus(d), &d.addr, i);
    let t0 = Instant::now();
    loop {
        let central = central_ids(p, &d.addr);
        let missing: Vec<&SeriesId> = scraped.difference(&central).collect();
        if missing.is_empty() {
            println!(
                "daemon {i}: the {} series of its scrape are on the central store ({} there \
                 for its instance)",
                scraped.len(),
                central.len()
            );
            return;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "daemon {i}: {} of {} scraped series never reached the central store, such as \
             {:?}",
            missing.len(),
            scraped.len(),
            &missing[..missing.len().min(5)]
        );
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// The samples of family-less lines `name{...} value` of a Prometheus's own /metrics whose
/// name is `name`, summed (Prometheus's exposition has comments and `NaN`, no more).
fn own_metric(p: &Prometheus, name: &str) -> Option<f64> {
    let (code, _, body) = daemon::http_get(&p.addr, "/metrics", &[]);
    assert_eq!(code, 200, "{}/metrics: {body}", p.addr);
    let mut sum = None;
    for line in body.lines().filter(|l| !l.starts_with('#')) {
        let (series, value) = line.rsplit_once(' ').unwrap_or((line, ""));
        let n = series.split('{').next().unwrap_or("");
        if n == name {
            *sum.get_or_insert(0.0) += value.parse::<f64>().unwrap_or(f64::NAN);
        }
    }
    sum
}

/// What the central store and the agents hold and send, printed for docs/fleet.md: the
/// recording rules' series per drive and in all, the central head's series, and the
/// bytes each agent sent per sample.
fn store_figures(central: &Prometheus, agents: &[Prometheus]) {
    let per_drive = query(
        central,
        "count by (instance, drive) ({__name__=~\"driveprobe:.+\", drive!=\"\"})",
    );
    let mut out = String::from("recording-rule series on the central store per drive:\n");
    for s in &per_drive.series {
        let _ = writeln!(
            out,
            "  {} {}: {}",
            s.labels.get("instance").map_or("", String::as_str),
            s.labels.get("drive").map_or("", String::as_str),
            s.value
        );
    }
    for (what, sel) in [
        ("an NVMe drive", "drive=\"a\", site=\"site-2\""),
        ("a SATA disk", "drive=\"c\", site=\"site-2\""),
        ("a file target on tmpfs", "drive=\"scratch\""),
    ] {
        let names = query(
            central,
            &format!("count by (__name__) ({{__name__=~\"driveprobe:.+\", {sel}}})"),
        );
        let _ = writeln!(out, "  {what} ({sel}):");
        for s in &names.series {
            let _ = writeln!(
                out,
                "    {} {}",
                s.labels.get("__name__").map_or("", String::as_str),
                s.value
            );
        }
    }
    let all = query(central, "count({__name__=~\"driveprobe:.+\"})");
    let no_drive = query(central, "count({__name__=~\"driveprobe:.+\", drive=\"\"})");
    let _ = writeln!(
        out,
        "recording-rule series in all: {:?}, of them without a drive label: {:?}",
        all.series.first().map(|s| s.value),
        no_drive.series.first().map(|s| s.value)
    );
    let _ = writeln!(
        out,
        "central head series: {:?}",
        own_metric(central, "prometheus_tsdb_head_series")
    );
    for (i, a) in agents.iter().enumerate() {
        let bytes = own_metric(a, "prometheus_remote_storage_bytes_total");
        let samples = own_metric(a, "prometheus_remote_storage_samples_total");
        let _ = writeln!(
            out,
            "agent {i}: sent {samples:?} samples in {bytes:?} bytes ({:.2} bytes a sample)",
            bytes.unwrap_or(f64::NAN) / samples.unwrap_or(f64::NAN)
        );
    }
    println!("{out}");
}

/// The series per drive and per daemon, from the daemons' own scrapes: printed for
/// docs/fleet.md, and the relations that must hold checked.
fn series_counts(fleet: &Fleet, central: &Prometheus) {
    let mut out = String::from(
        "\nseries per scrape (daemon, drive: series with that drive label; daemon: without)\n",
    );
    let mut per_drive: BTreeMap<(usize, String), usize> = BTreeMap::new();
    let mut per_probe: BTreeMap<(usize, String), usize> = BTreeMap::new();
    for (i, d) in fleet.daemons.iter().enumerate() {
        // A scrape once the health of every drive has been read (collector series).
        let e = d.wait_for("every drive's health read", Duration::from_secs(30), |e| {
            drives_of_daemon(i).iter().all(|drv| {
                e.value("driveprobe_health_temperature_celsius", &[("drive", drv)])
                    .is_some()
            })
        });
        let mut host = 0;
        for s in &e.samples {
            match s.labels.get("drive") {
                Some(drv) => {
                    *per_drive.entry((i, drv.clone())).or_default() += 1;
                    if s.labels.contains_key("probe") {
                        *per_probe.entry((i, drv.clone())).or_default() += 1;
                    }
                }
                None => host += 1,
            }
        }
        let central_n = central_ids(central, &d.addr).len();
        let _ = writeln!(
            out,
            "daemon {i} ({}): {} samples in the scrape, {host} without a drive label; \
             {central_n} series of its instance on the central store",
            if i == NO_DETAIL {
                "health_detail_metrics = false"
            } else {
                "default: health_detail_metrics = true"
            },
            e.samples.len()
        );
        for ((j, drv), n) in per_drive.iter().filter(|((j, _), _)| *j == i) {
            let _ = writeln!(
                out,
                "  drive {drv}: {n} series, {} of them the canary's (probe {PROBE})",
                per_probe.get(&(*j, drv.clone())).copied().unwrap_or(0)
            );
        }
    }
    println!("{out}");
    // Same drives, same canary: the detail is what `health_detail_metrics` adds, and it
    // adds some on an NVMe drive; every drive stays within the documented budget of 400.
    for drive in ["a", ATA_DRIVE] {
        let on = per_drive[&(0, drive.to_string())];
        let off = per_drive[&(NO_DETAIL, drive.to_string())];
        assert!(
            on > off,
            "drive {drive}: health_detail_metrics on ({on} series) should add series to \
             off ({off})"
        );
    }
    for ((i, drv), n) in &per_drive {
        assert!(
            *n <= 400,
            "daemon {i} drive {drv}: {n} series, over the budget of 400"
        );
    }
}
