//! Discovery on the host's loop devices, made over files in /dev/shm by these tests. Other
//! loop devices may exist on this machine: every config here has `include_loop = true`
//! and an include filter on the serial (`loop:` + the backing file) that names only the
//! test's own files, so no other device is ever opened. The classification, every skip
//! reason, the filters and max_drives on fake sysfs trees are unit tests in
//! crates/daemon/src/discovery/tests.rs.

use crate::common;

use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

use common::daemon::{Daemon, Exposition, BIN};
use common::{checksum, loop_serial, marked_image, need_root, shm_dir, Loop, MIB};

/// The config: discovery of the loop devices over files in `dir` only, at a virtual
/// class rate of `rate` IOPS, rescanning only every hour (so a hot-plug must be seen by
/// the hot-plug watch), dropping a removed drive after 3 s.
fn config(dir: &Path, rate: f64, extra: &str) -> String {
    let serial = format!("^loop:{}/", regex_escape(&dir.display().to_string()));
    format!(
        "state_dir = \"{state}\"\nhealth_interval = \"1h\"\n{extra}\n\
         [discovery]\nrescan_interval = \"1h\"\ndrop_after = \"3s\"\ninclude_loop = true\nraid = false\n\
         [discovery.include]\nserial = '{serial}'\n\
         [discovery.canary.virtual]\nrate_iops = {rate}\nwindow = \"5s\"\n",
        state = dir.join("state").display(),
    )
}

fn regex_escape(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '/' || c == '_' {
                c.to_string()
            } else {
                format!("\\{c}")
            }
        })
        .collect()
}

/// The `drive` label discovery gives a loop device over `backing`.
fn label(backing: &Path) -> String {
    driveprobe::discovery::label_of(&loop_serial(backing))
}

fn up(e: &Exposition, drive: &str) -> Option<f64> {
    e.value("driveprobe_drive_up", &[("drive", drive)])
}

fn reads(e: &Exposition, drive: &str) -> f64 {
    e.value(
        "driveprobe_probe_latency_seconds_count",
        &[
            ("drive", drive),
            ("probe", "canary-4k-read"),
            ("op", "read"),
        ],
    )
    .unwrap_or(0.0)
}

fn mtime(p: &Path) -> SystemTime {
    std::fs::metadata(p).unwrap().modified().unwrap()
}

#[test]
fn a_loop_device_is_found_read_at_its_class_rate_and_never_written() {
    need_root();
    let dir = shm_dir("dp-disc-");
    let img = marked_image(dir.path(), "a.img", 64 * MIB);
    let (sum, mt) = (checksum(&img), mtime(&img));
    let lo = Loop::attach(&img, &[]);
    let kernel = lo.path().file_name().unwrap().to_str().unwrap().to_string();
    let cfg = dir.path().join("c.toml");
    std::fs::write(&cfg, config(dir.path(), 20.0, "")).unwrap();
    let d = Daemon::start(&cfg, &[]);
    let name = label(&img);
    let e = d.wait_for(
        "the loop device watched and read",
        Duration::from_secs(30),
        |e| up(e, &name) == Some(1.0) && reads(e, &name) >= 20.0,
    );
    assert_eq!(
        e.value(
            "driveprobe_probe_rate_iops",
            &[("drive", &name), ("probe", "canary-4k-read")]
        ),
        Some(20.0)
    );
    assert_eq!(
        e.value(
            "driveprobe_probe_window_seconds",
            &[("drive", &name), ("probe", "canary-4k-read")]
        ),
        Some(5.0)
    );
    assert_eq!(
        e.value(
            "driveprobe_drive_class",
            &[("drive", &name), ("class", "virtual")]
        ),
        Some(1.0)
    );
    assert_eq!(
        e.value("driveprobe_discovery_drives", &[("state", "watched")]),
        Some(1.0)
    );
    assert!(e.value("driveprobe_discovery_scans_total", &[]).unwrap() >= 1.0);
    // Only the test's own loop device: the include filter left every other one out.
    assert_eq!(e.find("driveprobe_drive_up", &[]).len(), 1, "{}", e.text);

    // The rate is the class's: about 20 reads a second, never many more (the canary is
    // rate-limited, Poisson arrivals), over a fixed 15 s: a window that shrank with the
    // count (until 60 more reads, say) would hide a canary at twice the rate. Each reading
    // is as of the first read after the last canary interval's end (or half an interval
    // after it): the reads counted happened within the time between the two readings
    // plus 1.5 s. At most their mean over that and 6 deviations (about 440 for 330
    // expected); twice the rate gives 540 or more.
    let (t0, n0) = (Instant::now(), reads(&e, &name));
    std::thread::sleep(Duration::from_secs(15));
    let e = d.scrape();
    let secs = t0.elapsed().as_secs_f64();
    let (n, most) = (reads(&e, &name) - n0, 20.0 * (secs + 1.5));
    assert!(
        n > 0.0 && n <= most + 6.0 * most.sqrt(),
        "{n} reads in {secs:.1} s at 20 IOPS: at most {:.0} expected",
        most + 6.0 * most.sqrt()
    );

    // /api/v1/drives says where the drive came from.
    let (code, _, body) = d.get("/api/v1/drives");
    assert_eq!(code, 200);
    let drives: serde_json::Value = serde_json::from_str(&body).unwrap();
    let me = drives
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["name"] == name.as_str())
        .unwrap_or_else(|| panic!("{body}"));
    assert_eq!(me["discovered"]["class"], "virtual");
    assert_eq!(me["discovered"]["transport"], "loop");
    assert_eq!(me["discovered"]["kernel_name"], kernel.as_str());
    assert_eq!(me["discovered"]["source"], "sysfs");
    let (status, _) = d.terminate(Duration::from_secs(10));
    assert!(status.success(), "{status:?}");
    drop(lo);
    // Read-only: the backing file is as it was.
    assert_eq!(
        checksum(&img),
        sum,
        "the canary wrote to a discovered drive"
    );
    assert_eq!(mtime(&img), mt, "the backing file was modified");
}

#[test]
fn a_loop_device_plugged_in_appears_and_one_removed_goes_down_then_is_dropped() {
    need_root();
    let dir = shm_dir("dp-disc-");
    let a = marked_image(dir.path(), "a.img", 16 * MIB);
    let b = marked_image(dir.path(), "b.img", 16 * MIB);
    let sum_b = checksum(&b);
    let lo_a = Loop::attach(&a, &[]);
    let cfg = dir.path().join("c.toml");
    std::fs::write(&cfg, config(dir.path(), 5.0, "")).unwrap();
    let d = Daemon::start(&cfg, &[]);
    let (na, nb) = (label(&a), label(&b));
    d.wait_for("a watched", Duration::from_secs(30), |e| {
        up(e, &na) == Some(1.0)
    });
    let e = d.scrape();
    assert_eq!(up(&e, &nb), None);
    let scans = e.value("driveprobe_discovery_scans_total", &[]).unwrap();

    // Plugged in: seen well within the rescan interval (an hour), by the hot-plug watch.
    let t0 = Instant::now();
    let lo_b = Loop::attach(&b, &[]);
    let kb = lo_b
        .path()
        .file_name()
        .unwrap()
        .to_str()
        .unwrap()
        .to_string();
    let e = d.wait_for("b watched and read", Duration::from_secs(30), |e| {
        up(e, &nb) == Some(1.0) && reads(e, &nb) > 0.0
    });
    assert!(t0.elapsed() < Duration::from_secs(30));
    assert!(e.value("driveprobe_discovery_scans_total", &[]).unwrap() > scans);
    assert_eq!(
        e.value("driveprobe_discovery_drives", &[("state", "watched")]),
        Some(2.0)
    );

    // Removed (losetup -d: the kernel detaches it once the canary lets go): down, with a
    // reason, while a stays up; then dropped with its series after drop_after.
    drop(lo_b);
    let e = d.wait_for("b down", Duration::from_secs(30), |e| {
        up(e, &nb) == Some(0.0)
    });
    assert_eq!(up(&e, &na), Some(1.0));
    let (_, _, body) = d.get("/api/v1/drives");
    let drives: serde_json::Value = serde_json::from_str(&body).unwrap();
    let gone = drives
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["name"] == nb.as_str())
        .unwrap_or_else(|| panic!("{body}"));
    assert!(
        gone["down_reason"].as_str().unwrap_or("").contains("gone"),
        "{gone}"
    );
    d.wait_for("b dropped", Duration::from_secs(30), |e| {
        e.find("driveprobe_drive_info", &[("drive", &nb)])
            .is_empty()
            && up(e, &nb).is_none()
    });
    let log = d.log();
    assert_eq!(
        log.matches("a removed drive is dropped").count(),
        1,
        "dropped once: {log}"
    );
    // The kernel did detach it: the canary let go.
    assert!(
        !Path::new(&format!("/sys/class/block/{kb}/loop/backing_file")).exists(),
        "{kb} is still attached"
    );
    drop(d);
    drop(lo_a);
    assert_eq!(checksum(&b), sum_b);
}

/// Issue 18: a hot-plugged disk swapped the whole generation: every drive's canary and
/// health poller stopped and started again (on a 256-drive host, 768 threads for one
/// disk). A loop device plugged in beside a watched one leaves the watched one's threads
/// running (the same thread ids; its read count goes on, not from 0), and the health
/// pool's worker (issue 33: one per drive up to 4, shared) with it.
#[test]
fn a_hot_added_drive_does_not_restart_the_others() {
    need_root();
    let dir = shm_dir("dp-disc-");
    let a = marked_image(dir.path(), "a.img", 16 * MIB);
    let b = marked_image(dir.path(), "b.img", 16 * MIB);
    let lo_a = Loop::attach(&a, &[]);
    let cfg = dir.path().join("c.toml");
    std::fs::write(&cfg, config(dir.path(), 20.0, "")).unwrap();
    let d = Daemon::start(&cfg, &[]);
    let (na, nb) = (label(&a), label(&b));
    d.wait_for("a read", Duration::from_secs(30), |e| reads(e, &na) > 0.0);
    // Thread names are cut to 15 bytes: every loop drive's are the same.
    let (canary, health) = ("dp-canary-loop:", "dp-health");
    let (canary_a, health_a) = (
        common::threads_named(d.pid(), canary),
        common::threads_named(d.pid(), health),
    );
    assert_eq!(
        (canary_a.len(), health_a.len()),
        (1, 1),
        "{canary_a:?} {health_a:?}"
    );
    let before = reads(&d.scrape(), &na);
    let lo_b = Loop::attach(&b, &[]);
    let e = d.wait_for("b watched and read", Duration::from_secs(30), |e| {
        reads(e, &nb) > 0.0
    });
    assert!(
        reads(&e, &na) >= before,
        "a's canary started again: {before} reads, then {}",
        reads(&e, &na)
    );
    let (canaries, healths) = (
        common::threads_named(d.pid(), canary),
        common::threads_named(d.pid(), health),
    );
    assert_eq!(
        (canaries.len(), healths.len()),
        (2, 2),
        "{canaries:?} {healths:?}"
    );
    assert!(
        canaries.contains(&canary_a[0]) && healths.contains(&health_a[0]),
        "a's threads {canary_a:?} {health_a:?} were replaced: {canaries:?} {healths:?}\n{}",
        d.log()
    );
    let (status, _) = d.terminate(Duration::from_secs(10));
    assert!(status.success(), "{status:?}");
    drop(lo_b);
    drop(lo_a);
}

#[test]
fn a_listed_drive_overrides_the_discovered_one() {
    need_root();
    let dir = shm_dir("dp-disc-");
    let img = marked_image(dir.path(), "a.img", 16 * MIB);
    let lo = Loop::attach(&img, &[]);
    let kernel = lo.path().file_name().unwrap().to_str().unwrap().to_string();
    let listed = format!(
        "[[drive]]\nname = \"mine\"\nserial = \"{}\"\n",
        loop_serial(&img)
    );
    let cfg = dir.path().join("c.toml");
    std::fs::write(&cfg, config(dir.path(), 5.0, &listed)).unwrap();
    // The CLI says the same as the daemon will do.
    let out = std::process::Command::new(BIN)
        .args(["discover", "--json", "--config"])
        .arg(&cfg)
        .output()
        .unwrap();
    common::assert_ok(&out, "driveprobe discover");
    let w: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let watched = w["watched"].as_array().unwrap();
    assert_eq!(watched.len(), 1, "{w}");
    assert_eq!(watched[0]["name"], "mine");
    assert_eq!(watched[0]["source"], "listed+sysfs");
    assert_eq!(watched[0]["kernel_name"], kernel.as_str());
    assert_eq!(watched[0]["canary_rate_iops"], 5.0);

    let d = Daemon::start(&cfg, &[]);
    let e = d.wait_for("mine watched and read", Duration::from_secs(30), |e| {
        up(e, "mine") == Some(1.0) && reads(e, "mine") > 0.0
    });
    assert_eq!(up(&e, &label(&img)), None, "discovered twice: {}", e.text);
    assert_eq!(
        e.value(
            "driveprobe_drive_class",
            &[("drive", "mine"), ("class", "virtual")]
        ),
        Some(1.0)
    );
    let (_, _, body) = d.get("/api/v1/drives");
    let drives: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(drives.as_array().unwrap().len(), 1, "{body}");
    assert_eq!(drives[0]["discovered"]["kernel_name"], kernel.as_str());
}

#[test]
fn a_reload_applies_the_new_discovery_section() {
    need_root();
    let dir = shm_dir("dp-disc-");
    let img = marked_image(dir.path(), "a.img", 16 * MIB);
    let _lo = Loop::attach(&img, &[]);
    let name = label(&img);
    let cfg = dir.path().join("c.toml");
    // First a filter that matches none of the test's devices.
    let none = config(dir.path(), 5.0, "").replace(
        "[discovery.include]\nserial = '^loop:",
        "[discovery.include]\nserial = '^loop:/no-such-dir",
    );
    std::fs::write(&cfg, &none).unwrap();
    let d = Daemon::start(&cfg, &[]);
    let e = d.wait_for("a first scan", Duration::from_secs(30), |e| {
        e.value("driveprobe_discovery_scans_total", &[]).is_some()
    });
    assert_eq!(up(&e, &name), None);
    assert!(d.log().contains("skipping"), "{}", d.log());

    // SIGHUP with the filter that names the test's files: the drive comes.
    std::fs::write(&cfg, config(dir.path(), 5.0, "")).unwrap();
    d.signal("HUP");
    d.wait_for("the drive after the reload", Duration::from_secs(30), |e| {
        up(e, &name) == Some(1.0)
    });
    assert!(d.log().contains("watching"), "{}", d.log());

    // SIGHUP with discovery off: the discovered drive goes, and with it the figures.
    std::fs::write(
        &cfg,
        config(dir.path(), 5.0, "").replace("[discovery]\n", "[discovery]\nenabled = false\n"),
    )
    .unwrap();
    d.signal("HUP");
    d.wait_for(
        "no drive once discovery is off",
        Duration::from_secs(30),
        |e| up(e, &name).is_none() && !e.has("driveprobe_discovery_scans_total"),
    );
}

/// A listed drive identified by a `/dev/disk/by-id/` link to a partition (`...-part1`)
/// is its whole disk's drive, as the daemon resolves it: discovery does not add the disk
/// a second time (two canaries and two sets of series for one disk). The link lives in
/// the test's directory (the config check wants it under /dev/disk/by-id; the merge
/// takes the drive as given).
#[test]
fn a_by_id_link_to_a_partition_overrides_its_disk() {
    need_root();
    let dir = shm_dir("dp-disc-byid-");
    let img = common::image(dir.path(), "byid.img", 8 * MIB);
    let mut child = std::process::Command::new("sfdisk")
        .args(["--quiet", "--no-reread", "--no-tell-kernel"])
        .arg(&img)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("cannot run sfdisk");
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"label: dos\nstart=2048, type=83\n")
        .unwrap();
    assert!(child.wait().unwrap().success());
    let lo = Loop::attach(&img, &["--partscan"]);
    let part = lo.partition(1);
    let link = dir.path().join("ata-TEST_BYID-part1");
    std::os::unix::fs::symlink(&part, &link).unwrap();
    let mut base = driveprobe::config::Config::parse(
        &config(
            dir.path(),
            5.0,
            "[[drive]]\nname = \"listed\"\nby_id = \"/dev/disk/by-id/placeholder\"\n",
        ),
        "t.toml",
    )
    .unwrap();
    base.drives[0].identity = Some(driveprobe::config::Identity::ById(link.clone()));
    let scan =
        driveprobe::discovery::scan(&driveprobe::device::SystemPaths::default(), &base.discovery);
    let disk = lo.path().file_name().unwrap().to_str().unwrap().to_string();
    assert!(
        scan.found.iter().any(|f| f.kernel_name == disk),
        "{:#?}",
        scan
    );
    let (c, w) = driveprobe::discovery::merge(&base, &scan);
    assert_eq!(
        c.discovered.get("listed").map(|d| d.kernel_name.as_str()),
        Some(disk.as_str()),
        "the listed by-id drive did not override its disk: {w:#?}"
    );
    assert_eq!(c.drives.len(), 1, "the disk is watched twice: {w:#?}");
}
