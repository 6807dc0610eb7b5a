//! smartctl JSON from real drives (tests/fixtures/smartctl, copied into this repository;
//! see its README for where they come from and their licence) parsed into the health
//! model, with every value read off the files by hand; and `read_device_with` against fake
//! smartctl programs (shell scripts) for the time limit, standby, exit bits and errors.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use driveprobe::health::model::{CriticalFlags, HealthReport, PowerState, Source, Transport};
use driveprobe::health::smartctl::{
    self, parse, parse_scan, read_device_typed_with, read_device_with, ScanEntry, SmartctlError,
};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/smartctl");

fn fixture_path(name: &str) -> PathBuf {
    Path::new(FIXTURES).join(name)
}

fn load(name: &str) -> HealthReport {
    let text = fs::read_to_string(fixture_path(name)).expect("fixture");
    let r = parse(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
    assert_eq!(r.source, Source::SmartctlJsonFile, "{name}");
    assert_eq!(r.power_state, PowerState::Unknown, "{name}");
    r
}

const GIB: u128 = 1 << 30;

#[test]
fn every_fixture_parses() {
    let mut seen = 0;
    for entry in fs::read_dir(FIXTURES).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        if !name.ends_with(".json") {
            continue;
        }
        let text = fs::read_to_string(&path).unwrap();
        if name.starts_with("scan-") {
            assert!(!parse_scan(&text).unwrap().is_empty(), "{name}");
        } else {
            parse(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
        }
        seen += 1;
    }
    assert!(seen >= 10, "only {seen} fixtures in {FIXTURES}");
    assert!(
        fixture_path("README.md").exists(),
        "the README with the licence note"
    );
}

#[test]
fn sata_hdd_wd140edfz() {
    let r = load("smart-ata.json");
    let id = &r.identity;
    assert_eq!(id.model.as_deref(), Some("WDC WD140EDFZ-11A0VA0"));
    assert_eq!(id.serial.as_deref(), Some("9RK1XXXX"));
    assert_eq!(id.firmware.as_deref(), Some("81.00A81"));
    // wwn {naa 5, oui 3274 = 0x000cca, id 10283057623 = 0x264eb01d7}
    assert_eq!(id.wwn.as_deref(), Some("0x5000cca264eb01d7"));
    assert_eq!(id.transport, Transport::Sata);
    assert_eq!(id.capacity_bytes, Some(14_000_519_643_136));
    assert_eq!(id.logical_block_size, Some(512));
    assert_eq!(id.rotation_rpm, Some(5400));

    assert_eq!(r.smart_passed, Some(true));
    assert_eq!(r.temperature_celsius, Some(32.0));
    assert_eq!(r.temperature_warning_celsius, None);
    assert_eq!(r.temperature_critical_celsius, None);
    assert_eq!(r.power_on_seconds, Some(1730 * 3600));
    assert_eq!(r.power_cycles, Some(9));
    assert_eq!(r.reallocated_sectors, Some(0));
    assert_eq!(r.pending_sectors, Some(0));
    assert_eq!(r.offline_uncorrectable, Some(0));
    assert_eq!(r.crc_errors, Some(0));
    assert_eq!(r.error_log_entries, Some(0));
    // A hard disk: no wear, no host byte counters, no 187.
    assert_eq!(r.percentage_used_ratio, None);
    assert_eq!(r.host_written_bytes, None);
    assert_eq!(r.host_read_bytes, None);
    assert_eq!(r.media_errors, None);
    assert_eq!(r.critical_warning, None);
    assert_eq!(r.critical_flags, None);
    assert_eq!(r.available_spare_ratio, None);
    assert_eq!(r.available_spare_threshold_ratio, None);
    assert_eq!(r.unsafe_shutdowns, None);
    assert_eq!(r.media_written_bytes, None);
    assert!(r.notes.is_empty(), "{:?}", r.notes);
}

#[test]
fn sata_ssd_samsung_850_pro() {
    let r = load("smart-ata2.json");
    let id = &r.identity;
    assert_eq!(id.model.as_deref(), Some("X SSD 850 PRO 128GB"));
    assert_eq!(id.serial.as_deref(), Some("S24ZN902000L"));
    assert_eq!(id.firmware.as_deref(), Some("EB6Q"));
    // naa 5, oui 9528 = 0x002538 (Samsung), id 35436182597 = 0x840293c45
    assert_eq!(id.wwn.as_deref(), Some("0x5002538840293c45"));
    assert_eq!(id.transport, Transport::Sata);
    assert_eq!(id.capacity_bytes, Some(128_035_676_160));
    assert_eq!(id.logical_block_size, Some(512));
    assert_eq!(id.rotation_rpm, Some(0));

    assert_eq!(r.smart_passed, Some(true));
    assert_eq!(r.temperature_celsius, Some(32.0));
    assert_eq!(r.power_on_seconds, Some(846 * 3600));
    assert_eq!(r.power_cycles, Some(168));
    assert_eq!(r.reallocated_sectors, Some(0));
    assert_eq!(r.pending_sectors, None, "no attribute 197");
    assert_eq!(r.offline_uncorrectable, None, "no attribute 198");
    assert_eq!(r.crc_errors, Some(0), "199 CRC_Error_Count");
    assert_eq!(r.media_errors, Some(0), "187 Uncorrectable_Error_Cnt");
    // 177 Wear_Leveling_Count normalised 99: 1% used.
    assert_eq!(r.percentage_used_ratio, Some(0.01));
    // 241 Total_LBAs_Written raw 1047174917 LBAs of 512 bytes (about 499 GiB).
    assert_eq!(r.host_written_bytes, Some(1_047_174_917 * 512));
    assert!(r.host_written_bytes.unwrap() / GIB == 499);
    assert_eq!(r.host_read_bytes, None);
    assert_eq!(r.error_log_entries, Some(0));
    assert_eq!(r.critical_warning, None);
    assert_eq!(r.available_spare_ratio, None);
    assert!(r.notes.is_empty(), "{:?}", r.notes);
}

#[test]
fn sat_attributes_only() {
    let r = load("smart-sat.json");
    let id = &r.identity;
    assert_eq!(id.model, None);
    assert_eq!(id.serial, None);
    assert_eq!(id.firmware, None);
    assert_eq!(id.wwn, None);
    assert_eq!(id.transport, Transport::Sata);
    assert_eq!(id.capacity_bytes, None);
    assert_eq!(id.logical_block_size, None);
    assert_eq!(id.rotation_rpm, None);

    assert_eq!(r.smart_passed, None, "smartctl -jA: no health check");
    assert_eq!(r.temperature_celsius, Some(29.0));
    // No power_on_time: attribute 9 Power_On_Hours, raw "2725 (151 234 0)" packs three
    // fields into raw.value 167031278144165; the hours are 2725.
    assert_eq!(r.power_on_seconds, Some(2725 * 3600));
    assert_eq!(r.power_cycles, Some(354));
    assert_eq!(r.reallocated_sectors, Some(0));
    assert_eq!(r.pending_sectors, Some(0));
    assert_eq!(r.offline_uncorrectable, Some(0));
    assert_eq!(r.crc_errors, Some(0));
    assert_eq!(r.media_errors, Some(0), "187 Reported_Uncorrect");
    assert_eq!(r.error_log_entries, None);
    assert_eq!(r.percentage_used_ratio, None);
    assert_eq!(r.host_written_bytes, None);
    assert_eq!(r.host_read_bytes, None);
    assert!(r.notes.is_empty(), "{:?}", r.notes);
}

#[test]
fn failing_hitachi_behind_usb() {
    let r = load("smart-fail2.json");
    let id = &r.identity;
    assert_eq!(id.model.as_deref(), Some("Hitachi HDS721050DLE630"));
    assert_eq!(id.serial.as_deref(), Some("MSK423Y20S3HBC"));
    assert_eq!(id.firmware.as_deref(), Some("MS1OA650"));
    assert_eq!(id.wwn.as_deref(), Some("0x5000cca37fca81a8"));
    assert_eq!(id.transport, Transport::Usb, "device.type usbjmicron");
    assert_eq!(id.capacity_bytes, Some(500_107_862_016));
    assert_eq!(id.logical_block_size, Some(512));
    assert_eq!(id.rotation_rpm, Some(7200));

    assert_eq!(r.smart_passed, Some(false));
    assert_eq!(r.temperature_celsius, Some(25.0));
    assert_eq!(r.power_on_seconds, Some(65592 * 3600));
    assert_eq!(r.power_cycles, Some(86));
    assert_eq!(r.reallocated_sectors, Some(1975));
    assert_eq!(r.pending_sectors, Some(8));
    assert_eq!(r.offline_uncorrectable, Some(0));
    assert_eq!(r.crc_errors, Some(0));
    assert_eq!(r.error_log_entries, Some(56));
    assert_eq!(r.media_errors, None);
    assert_eq!(r.percentage_used_ratio, None);
    assert_eq!(r.host_written_bytes, None);
    // exit_status 216 = bits 3, 4, 6, 7; attribute 5 failing now (normalised 1 <= 5).
    let notes = r.notes.join("\n");
    for want in [
        "DISK FAILING",
        "prefail attributes are at or below threshold",
        "error log has errors",
        "self-test log has errors",
        "attribute 5 Reallocated_Sector_Ct at or below threshold now (normalised 1, threshold 5)",
    ] {
        assert!(notes.contains(want), "{want:?} not in\n{notes}");
    }
    assert_eq!(
        driveprobe::health::assess(&r).verdict,
        driveprobe::health::Verdict::Failing
    );
}

#[test]
fn sata_behind_megaraid() {
    let r = load("smart-megaraid0.json");
    let id = &r.identity;
    assert_eq!(id.model.as_deref(), Some("WD4000FYYX"));
    assert_eq!(id.serial.as_deref(), Some("XXXXXXXXXXXX"));
    assert_eq!(id.firmware.as_deref(), Some("00.0D1K4"));
    // naa 5, oui 5358 = 0x0014ee (WD), id 10217451239 = 0x26101eee7
    assert_eq!(id.wwn.as_deref(), Some("0x50014ee26101eee7"));
    assert_eq!(id.transport, Transport::Sata, "sat+megaraid,0");
    assert_eq!(id.capacity_bytes, Some(4_000_787_030_016));
    assert_eq!(id.logical_block_size, Some(512));
    assert_eq!(id.rotation_rpm, Some(7200));

    assert_eq!(r.smart_passed, Some(true));
    assert_eq!(r.temperature_celsius, Some(36.0));
    assert_eq!(r.power_on_seconds, Some(37787 * 3600));
    assert_eq!(r.power_cycles, Some(70));
    assert_eq!(r.reallocated_sectors, Some(0));
    assert_eq!(r.pending_sectors, Some(0));
    assert_eq!(r.offline_uncorrectable, Some(0));
    assert_eq!(r.crc_errors, Some(0));
    assert_eq!(r.error_log_entries, Some(0));
    // 241 Total_LBAs_Written 2754608750246, 242 Total_LBAs_Read 70057180117 (512-byte LBAs).
    assert_eq!(r.host_written_bytes, Some(2_754_608_750_246 * 512));
    assert_eq!(r.host_read_bytes, Some(70_057_180_117 * 512));
    assert_eq!(r.percentage_used_ratio, None);
    assert_eq!(r.media_errors, None);
    // exit_status 4 and smartctl's own warning.
    let notes = r.notes.join("\n");
    assert!(
        notes.contains("Warning: This result is based on an Attribute check."),
        "{notes}"
    );
    assert!(notes.contains("a SMART or other command failed"), "{notes}");
}

#[test]
fn nvme_intel_660p() {
    let r = load("smart-nvme.json");
    let id = &r.identity;
    assert_eq!(id.model.as_deref(), Some("INTEL SSDPEKNW010T8"));
    assert_eq!(id.serial.as_deref(), Some("BTNH93710FS91P0B"));
    assert_eq!(id.firmware.as_deref(), Some("002C"));
    assert_eq!(id.wwn, None, "no eui64 in the namespace");
    assert_eq!(id.transport, Transport::Nvme);
    assert_eq!(id.capacity_bytes, Some(1_024_209_543_168));
    assert_eq!(id.logical_block_size, Some(512));
    assert_eq!(id.rotation_rpm, None);

    assert_eq!(r.smart_passed, Some(true));
    assert_eq!(r.temperature_celsius, Some(36.0));
    assert_eq!(r.temperature_warning_celsius, None);
    assert_eq!(r.temperature_critical_celsius, None);
    assert_eq!(r.critical_warning, Some(0));
    assert_eq!(r.critical_flags, Some(CriticalFlags::default()));
    assert_eq!(r.available_spare_ratio, Some(1.0));
    assert_eq!(r.available_spare_threshold_ratio, Some(0.1));
    assert_eq!(r.percentage_used_ratio, Some(0.0));
    assert_eq!(r.host_read_bytes, Some(9_511_859 * 512_000));
    assert_eq!(r.host_written_bytes, Some(7_773_431 * 512_000));
    assert_eq!(r.power_cycles, Some(266));
    assert_eq!(r.power_on_seconds, Some(2401 * 3600));
    assert_eq!(r.unsafe_shutdowns, Some(43));
    assert_eq!(r.media_errors, Some(0));
    assert_eq!(r.error_log_entries, Some(0));
    assert_eq!(r.reallocated_sectors, None);
    assert_eq!(r.pending_sectors, None);
    assert_eq!(r.crc_errors, None);
    assert!(r.notes.is_empty(), "{:?}", r.notes);
}

#[test]
fn nvme_corsair_mp510() {
    let r = load("smart-nvme2.json");
    let id = &r.identity;
    assert_eq!(id.model.as_deref(), Some("Force MP510"));
    assert_eq!(id.serial.as_deref(), Some("yes"), "as the file has it");
    assert_eq!(id.firmware.as_deref(), Some("ECFM12.3"));
    // eui64 {oui 6584743 = 0x6479a7, ext_id 171819811633 = 0x2801424331}
    assert_eq!(id.wwn.as_deref(), Some("eui.6479a72801424331"));
    assert_eq!(id.transport, Transport::Nvme);
    assert_eq!(id.capacity_bytes, Some(480_103_981_056));
    assert_eq!(id.logical_block_size, Some(512));

    assert_eq!(r.smart_passed, Some(true));
    assert_eq!(r.temperature_celsius, Some(38.0));
    assert_eq!(r.critical_warning, Some(0));
    assert_eq!(r.available_spare_ratio, Some(1.0));
    assert_eq!(r.available_spare_threshold_ratio, Some(0.05));
    assert_eq!(r.percentage_used_ratio, Some(0.01));
    assert_eq!(r.host_read_bytes, Some(6_932_144 * 512_000));
    assert_eq!(r.host_written_bytes, Some(16_093_122 * 512_000));
    assert_eq!(r.power_cycles, Some(4));
    assert_eq!(r.power_on_seconds, Some(6487 * 3600));
    assert_eq!(r.unsafe_shutdowns, Some(4));
    assert_eq!(r.media_errors, Some(0));
    assert_eq!(r.error_log_entries, Some(8382));
    assert!(r.notes.is_empty(), "{:?}", r.notes);
}

#[test]
fn sas_seagate_st4000nm0043() {
    let r = load("smart-scsi.json");
    let id = &r.identity;
    assert_eq!(id.model.as_deref(), Some("SEAGATE ST4000NM0043"));
    assert_eq!(id.serial.as_deref(), Some("Z1Z5DWJK0000XXXXXXXX"));
    assert_eq!(
        id.firmware.as_deref(),
        Some("MS03"),
        "old smartctl: \"revision\""
    );
    assert_eq!(id.wwn, None, "no logical_unit_id in this output");
    // The file has no scsi_transport_protocol, so SAS cannot be told from other SCSI.
    assert_eq!(id.transport, Transport::Scsi);
    assert_eq!(id.capacity_bytes, Some(4_000_787_030_016));
    assert_eq!(id.logical_block_size, Some(512));
    assert_eq!(id.rotation_rpm, Some(7200));

    assert_eq!(r.smart_passed, Some(true));
    assert_eq!(r.temperature_celsius, Some(34.0));
    assert_eq!(r.temperature_critical_celsius, Some(68.0), "drive_trip");
    assert_eq!(r.temperature_warning_celsius, None);
    assert_eq!(r.power_on_seconds, Some(43549 * 3600 + 33 * 60));
    assert_eq!(r.power_cycles, None, "no start-stop cycle counter");
    assert_eq!(r.reallocated_sectors, Some(56), "grown defect list");
    assert_eq!(r.media_errors, Some(0), "read + write uncorrected");
    // gigabytes_processed is a string with three decimals: 86472.611 GB, 176987.332 GB.
    assert_eq!(r.host_written_bytes, Some(86_472_611_000_000));
    assert_eq!(r.host_read_bytes, Some(176_987_332_000_000));
    assert_eq!(r.percentage_used_ratio, None);
    assert_eq!(r.pending_sectors, None);
    assert_eq!(r.offline_uncorrectable, None);
    assert_eq!(r.crc_errors, None);
    assert_eq!(r.error_log_entries, None);
    assert_eq!(r.critical_warning, None);
    assert_eq!(r.notes.len(), 1, "{:?}", r.notes);
    assert!(r.notes[0].contains("rounded"));
}

#[test]
fn sas_ssd_fields() {
    // The SAS fields the fixtures lack, as smartctl 7.3 names them.
    let r = parse(
        r#"{"device":{"name":"/dev/sdc","type":"scsi","protocol":"SCSI"},
            "scsi_vendor":"HGST","scsi_product":"HUSMM1640ASS204","scsi_revision":"C3C0",
            "logical_unit_id":"0x5000cca04e0b2a10",
            "scsi_transport_protocol":{"name":"SAS (SPL-4)","value":6},
            "scsi_percentage_used_endurance_indicator":4,
            "scsi_start_stop_cycle_counter":{"accumulated_start_stop_cycles":31},
            "scsi_error_counter_log":{"read":{"total_uncorrected_errors":1,"gigabytes_processed":"10.5"},
                                      "write":{"total_uncorrected_errors":2,"gigabytes_processed":"0.250"},
                                      "verify":{"total_uncorrected_errors":3}}}"#,
    )
    .unwrap();
    assert_eq!(r.identity.model.as_deref(), Some("HGST HUSMM1640ASS204"));
    assert_eq!(r.identity.firmware.as_deref(), Some("C3C0"));
    assert_eq!(r.identity.wwn.as_deref(), Some("0x5000cca04e0b2a10"));
    assert_eq!(r.identity.transport, Transport::Sas);
    assert_eq!(r.percentage_used_ratio, Some(0.04));
    assert_eq!(r.power_cycles, Some(31));
    assert_eq!(r.media_errors, Some(6));
    assert_eq!(r.host_read_bytes, Some(10_500_000_000));
    assert_eq!(r.host_written_bytes, Some(250_000_000));
}

#[test]
fn scan_outputs() {
    let nvme = parse_scan(&fs::read_to_string(fixture_path("scan-nvme.json")).unwrap()).unwrap();
    assert_eq!(
        nvme,
        vec![ScanEntry {
            name: "/dev/nvme0".into(),
            type_: Some("nvme".into()),
            protocol: Some("NVMe".into()),
        }]
    );
    let mr = parse_scan(&fs::read_to_string(fixture_path("scan-megaraid.json")).unwrap()).unwrap();
    assert_eq!(
        mr,
        vec![
            ScanEntry {
                name: "/dev/bus/0".into(),
                type_: Some("megaraid,0".into()),
                protocol: Some("SCSI".into()),
            },
            ScanEntry {
                name: "/dev/bus/0".into(),
                type_: Some("megaraid,1".into()),
                protocol: Some("SCSI".into()),
            },
        ]
    );
    assert_eq!(parse_scan("{}").unwrap(), vec![]);
    assert_eq!(
        parse_scan(r#"{"devices":[{"type":"sat"},{"name":""},{"name":"/dev/sda"}]}"#).unwrap(),
        vec![ScanEntry {
            name: "/dev/sda".into(),
            type_: None,
            protocol: None
        }]
    );
    assert!(parse_scan("/dev/sda -d sat # /dev/sda [SAT]").is_err());
    assert!(parse_scan("[]").is_err());
}

// ---------------------------------------------------------------------------------------
// Fake smartctl programs
// ---------------------------------------------------------------------------------------

struct Fakes {
    dir: PathBuf,
}

impl Fakes {
    fn prog(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
}

/// Writes every fake program once, before any test starts a process (a script still open
/// for writing in one thread while another forks cannot be executed: ETXTBSY).
fn fakes() -> &'static Fakes {
    static FAKES: OnceLock<Fakes> = OnceLock::new();
    FAKES.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("smartctl-fakes-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let d = dir.display();
        let sat = fixture_path("smart-sat.json");
        let ata = fixture_path("smart-ata.json");
        let scripts: Vec<(&str, String)> = vec![
            // Hangs, with a grandchild holding the output pipe.
            (
                "hang",
                format!("echo $$ > {d}/hang.pid\nsleep 10 &\necho $! > {d}/hang-child.pid\nwait\n"),
            ),
            (
                "standby",
                r#"echo '{"json_format_version":[1,0],"smartctl":{"version":[7,3],"messages":[{"string":"Device is in STANDBY mode, exit(2)","severity":"information"}],"exit_status":2},"device":{"name":"/dev/sdb","info_name":"/dev/sdb [SAT]","type":"sat","protocol":"ATA"}}'
exit 2
"#
                .to_string(),
            ),
            ("failing", format!("cat '{}'\nexit 8\n", sat.display())),
            ("ok", format!("echo \"$@\" > {d}/ok.args\ncat '{}'\nexit 0\n", ata.display())),
            (
                "open-failed",
                r#"echo '{"json_format_version":[1,0],"smartctl":{"version":[7,3],"messages":[{"string":"Smartctl open device: /dev/sdz [SAT] failed: Operation not permitted","severity":"error"}],"exit_status":2}}'
exit 2
"#
                .to_string(),
            ),
            (
                "not-a-disk",
                r#"echo '{"json_format_version":[1,0],"smartctl":{"version":[7,3],"messages":[{"string":"/dev/null: Unable to detect device type","severity":"error"}],"exit_status":1}}'
exit 1
"#
                .to_string(),
            ),
            ("typed", format!("echo \"$@\" > {d}/typed.args\ncat '{}'\nexit 0\n", ata.display())),
            ("garbage", "echo 'smartctl 6.6 <html>'\nexit 0\n".to_string()),
            // `smartctl -t short`: the drive took it (smartctl 7.4's words).
            (
                "test-ok",
                format!(
                    "echo \"$@\" > {d}/test-ok.args\n{}",
                    r#"echo '{"json_format_version":[1,0],"smartctl":{"version":[7,4],"messages":[{"string":"Self-test has begun","severity":"information"}],"exit_status":0}}'
exit 0
"#
                ),
            ),
            // A test already runs: smartctl will not abort it without `force` (bit 2).
            (
                "test-busy",
r#"cat <<'JSON'
{"json_format_version":[1,0],"smartctl":{"version":[7,4],"messages":[{"string":"Can't start self-test without aborting current test (90% remaining),","severity":"error"},{"string":"add '-t force' option to override, or run 'smartctl -X' to abort test.","severity":"error"}],"exit_status":4}}
JSON
exit 4
"#
                .to_string(),
            ),
            ("killed", "kill -9 $$\n".to_string()),
        ];
        for (name, body) in scripts {
            let p = dir.join(name);
            fs::write(&p, format!("#!/bin/sh\n{body}")).unwrap();
            fs::set_permissions(&p, fs::Permissions::from_mode(0o755)).unwrap();
        }
        Fakes { dir }
    })
}

const DEV: &str = "/dev/null";
const LONG: Duration = Duration::from_secs(20);

fn gone_or_zombie(pid: &str) -> bool {
    match fs::read_to_string(format!("/proc/{}/stat", pid.trim())) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

#[test]
fn hung_smartctl_is_killed_at_the_time_limit() {
    let f = fakes();
    let start = Instant::now();
    let e =
        read_device_with(&f.prog("hang"), Path::new(DEV), Duration::from_millis(500)).unwrap_err();
    let took = start.elapsed();
    assert!(matches!(e, SmartctlError::Timeout { .. }), "{e}");
    assert_eq!(
        e.to_string(),
        "smartctl did not answer within 0.5s on /dev/null: the device may be hung"
    );
    assert!(took >= Duration::from_millis(500), "{took:?}");
    // Killed and reaped soon after the limit (the margin is for a loaded host).
    assert!(took < Duration::from_secs(5), "{took:?}");
    // The script and the sleep it started are both dead. (On a host so slow that the
    // script was killed before it wrote a pid file, that process never started.)
    for file in ["hang.pid", "hang-child.pid"] {
        let Ok(pid) = fs::read_to_string(f.dir.join(file)) else {
            println!("{file}: not written before the kill");
            continue;
        };
        let deadline = Instant::now() + Duration::from_secs(3);
        while !gone_or_zombie(&pid) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(gone_or_zombie(&pid), "{file} {pid} still running");
    }
}

#[test]
fn standby_disk_is_reported_not_woken() {
    let r = read_device_with(&fakes().prog("standby"), Path::new(DEV), LONG).unwrap();
    assert_eq!(r.power_state, PowerState::Standby);
    assert_eq!(r.source, Source::Smartctl);
    assert_eq!(r.identity.transport, Transport::Sata);
    assert_eq!(r.identity.model, None);
    assert_eq!(
        HealthReport {
            identity: r.identity.clone(),
            notes: r.notes.clone(),
            source: Source::Smartctl,
            power_state: PowerState::Standby,
            ..Default::default()
        },
        r,
        "nothing but identity and a note"
    );
    assert_eq!(
        driveprobe::health::assess(&r).verdict,
        driveprobe::health::Verdict::Unknown
    );
}

#[test]
fn exit_bit_3_means_failing() {
    let r = read_device_with(&fakes().prog("failing"), Path::new(DEV), LONG).unwrap();
    assert_eq!(r.smart_passed, Some(false));
    assert_eq!(r.source, Source::Smartctl);
    assert_eq!(r.power_state, PowerState::Active);
    assert_eq!(
        r.temperature_celsius,
        Some(29.0),
        "the fixture was read too"
    );
    assert!(r.notes.iter().any(|n| n.contains("DISK FAILING")));
}

#[test]
fn healthy_run_and_its_arguments() {
    let f = fakes();
    let r = read_device_with(&f.prog("ok"), Path::new(DEV), LONG).unwrap();
    assert_eq!(r.source, Source::Smartctl);
    assert_eq!(r.power_state, PowerState::Active);
    assert_eq!(r.smart_passed, Some(true));
    assert_eq!(r.identity.serial.as_deref(), Some("9RK1XXXX"));
    let args = fs::read_to_string(f.dir.join("ok.args")).unwrap();
    let args: Vec<&str> = args.split_whitespace().collect();
    assert_eq!(args.last(), Some(&DEV));
    for want in [
        "--json=c",
        "--nocheck=standby",
        "--log=devstat",
        "--log=error",
    ] {
        assert!(args.contains(&want), "{want} not in {args:?}");
    }
    assert_eq!(&args[..args.len() - 1], smartctl::SMARTCTL_ARGS);
}

#[test]
fn open_failure_carries_smartctls_message() {
    let e = read_device_with(&fakes().prog("open-failed"), Path::new(DEV), LONG).unwrap_err();
    assert!(matches!(e, SmartctlError::DeviceOpen { .. }), "{e}");
    let s = e.to_string();
    assert!(
        s.contains("Smartctl open device: /dev/sdz [SAT] failed: Operation not permitted"),
        "{s}"
    );
    assert!(!s.contains('\n'));
}

#[test]
fn not_a_disk_is_refused() {
    let e = read_device_with(&fakes().prog("not-a-disk"), Path::new(DEV), LONG).unwrap_err();
    assert!(matches!(e, SmartctlError::Refused { .. }), "{e}");
    assert!(
        e.to_string().contains("Unable to detect device type"),
        "{e}"
    );
}

#[test]
fn odd_programs_are_clear_errors() {
    let f = fakes();
    let e = read_device_with(&f.prog("garbage"), Path::new(DEV), LONG).unwrap_err();
    assert!(e.to_string().contains("not JSON"), "{e}");
    let e = read_device_with(&f.prog("killed"), Path::new(DEV), LONG).unwrap_err();
    assert!(matches!(e, SmartctlError::Killed { signal: 9, .. }), "{e}");
    // A device that does not exist is not handed to smartctl at all.
    let e = read_device_with(&f.prog("ok"), Path::new("/dev/no-such-disk"), LONG).unwrap_err();
    assert!(matches!(e, SmartctlError::NoDevice { .. }), "{e}");
}

#[test]
fn missing_smartctl_is_one_clear_line() {
    let f = fakes();
    let e = read_device_with(&f.prog("not-there"), Path::new(DEV), LONG).unwrap_err();
    assert!(matches!(e, SmartctlError::NotInstalled), "{e}");
    assert_eq!(
        e.to_string(),
        "smartctl is not installed: install smartmontools (apt-get install smartmontools)"
    );
}

/// A drive behind a RAID controller is read through the controller's device with its
/// `-d` type (from `smartctl --scan-open`), which need not be a node here.
#[test]
fn a_drive_behind_a_raid_controller_is_read_with_its_type() {
    let f = fakes();
    let dev = Path::new("/dev/bus/0");
    let r = read_device_typed_with(&f.prog("typed"), dev, Some("megaraid,1"), LONG).unwrap();
    assert_eq!(r.source, Source::Smartctl);
    let args = fs::read_to_string(f.dir.join("typed.args")).unwrap();
    assert!(
        args.trim_end()
            .ends_with("--nocheck=standby -d megaraid,1 /dev/bus/0"),
        "{args}"
    );
    // Without a type, a device that is not there is refused before smartctl runs.
    assert!(matches!(
        read_device_with(&f.prog("typed"), dev, LONG),
        Err(SmartctlError::NoDevice { .. })
    ));
}

/// Issue 20: the same QEMU NVMe drive read by ioctl (the SMART log bytes) and through
/// smartctl (its JSON, captured in the same boot) shows one temperature: 323 K is 50 °C
/// in both (driveprobe said 49.85 from the bytes, smartctl 50).
#[test]
fn nvme_temperature_by_ioctl_agrees_with_smartctl() {
    use driveprobe::health::nvme;
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/nvme");
    let bytes = fs::read(dir.join("qemu-smart-log-after-64MiB.bin")).unwrap();
    let ctrl = nvme::parse_id_ctrl(&fs::read(dir.join("qemu-id-ctrl.bin")).unwrap()).unwrap();
    let log = nvme::parse_smart_log(&bytes).unwrap();
    assert_eq!(log.temperature_k, 323);
    let ioctl = nvme::report(&log, Some(&ctrl), None, None, Source::NvmeLogFile);
    let json = load("qemu-nvme.json");
    assert_eq!(json.temperature_celsius, Some(50.0));
    assert_eq!(ioctl.temperature_celsius, json.temperature_celsius);
    assert_eq!(ioctl.temperature_warning_celsius, Some(70.0), "343 K");
    assert_eq!(ioctl.temperature_critical_celsius, Some(100.0), "373 K");
    // Whole degrees for every kelvin a drive can report.
    for k in 1..=u16::MAX {
        let c = nvme::kelvin(k).unwrap();
        assert_eq!(c, f64::from(i32::from(k) - 273), "{k} K");
    }
    assert_eq!(nvme::kelvin(0), None, "0 K: not reported");
}

/// Issue 20: everything an ATA drive says, in full: every attribute with its flags and
/// failure state, Device Statistics (a temperature below zero), PHY event counters, the
/// link, the extended self-test log's latest test of each kind.
#[test]
fn sata_detail_in_full() {
    let r = load("detail-sata.json");
    let ids: Vec<u8> = r.ata_attributes.iter().map(|a| a.id).collect();
    assert_eq!(ids, [1, 5, 190, 194, 199]);
    let a5 = &r.ata_attributes[1];
    assert_eq!(a5.label(), "5 Reallocated_Sector_Ct");
    assert_eq!(
        (a5.value, a5.worst, a5.threshold, a5.raw),
        (Some(5), Some(5), Some(5), Some(1912))
    );
    assert_eq!(a5.flags.as_deref(), Some("PO--CK"));
    assert!(a5.prefailure && a5.failed_now && a5.failed_in_past);
    let a190 = &r.ata_attributes[2];
    assert!(!a190.failed_now && a190.failed_in_past, "worst 40 <= 45");
    assert_eq!(a190.raw_string.as_deref(), Some("38 (Min/Max 24/59)"));
    let a194 = &r.ata_attributes[3];
    assert!(
        !a194.failed_now && !a194.failed_in_past,
        "threshold 0 never fails"
    );
    assert!(!r.ata_attributes[0].failed_now && r.ata_attributes[0].prefailure);

    let stats: Vec<(u8, &str, i64)> = r
        .ata_device_statistics
        .iter()
        .map(|s| (s.page, s.name.as_str(), s.value))
        .collect();
    assert_eq!(
        stats,
        [
            (1, "Lifetime Power-On Resets", 77),
            (1, "Power-on Hours", 20112),
            (1, "Logical Sectors Written", 1_000_000),
            (5, "Current Temperature", 38),
            (5, "Lowest Temperature", -5),
            (5, "Highest Temperature", 59),
        ],
        "the invalid entry is left out; a negative temperature is kept"
    );
    assert!(r.ata_device_statistics[5].condition_met);

    let phy: Vec<(u16, u64, bool)> = r
        .sata_phy_events
        .iter()
        .map(|p| (p.id, p.value, p.overflow))
        .collect();
    assert_eq!(phy, [(1, 0, false), (10, 12, false), (11, 65535, true)]);

    let link = r.link.as_ref().expect("interface_speed");
    assert_eq!(link.current_speed_transfers_per_second, Some(1.5e9));
    assert_eq!(link.max_speed_transfers_per_second, Some(6e9));
    assert_eq!((link.current_width, link.max_width), (None, None));
    assert!(link.degraded());

    let tests: Vec<(&str, &str, Option<u64>, Option<u64>)> = r
        .self_tests
        .iter()
        .map(|t| {
            (
                t.kind.as_str(),
                t.result.as_str(),
                t.power_on_hours,
                t.first_failing_lba,
            )
        })
        .collect();
    assert_eq!(
        tests,
        [
            ("extended", "failed", Some(20100), Some(123_456_789)),
            ("short", "passed", Some(20090), None),
        ],
        "the extended log over the standard one; the latest of each kind"
    );
    assert_eq!(r.scsi, None);
    assert_eq!(r.nvme, None);
    // The headline figures still come from the same data.
    assert_eq!(r.reallocated_sectors, Some(1912));
    assert_eq!(r.crc_errors, Some(41));
    assert_eq!(r.power_cycles, Some(77));
}

/// Issue 20: the NVMe counters through smartctl (temperatures already in °C there).
#[test]
fn nvme_detail_through_smartctl() {
    let r = load("detail-nvme.json");
    let n = r.nvme.as_ref().expect("nvme detail");
    assert_eq!(n.warning_temperature_minutes, Some(14));
    assert_eq!(n.critical_temperature_minutes, Some(1));
    let sensors: Vec<(u8, f64)> = n
        .temperature_sensors
        .iter()
        .map(|t| (t.sensor, t.celsius))
        .collect();
    assert_eq!(sensors, [(1, 45.0), (2, 52.0)]);
    assert_eq!(n.thermal_transitions, [Some(9), Some(1)]);
    assert_eq!(n.thermal_seconds, [Some(3600), Some(30)]);
    assert_eq!(n.controller_busy_minutes, Some(77));
    assert_eq!(
        (n.host_read_commands, n.host_write_commands),
        (Some(123_456), Some(654_321))
    );
    let errs: Vec<(u64, u16, u64, u32)> = n
        .error_log
        .iter()
        .map(|e| (e.error_count, e.submission_queue_id, e.lba, e.nsid))
        .collect();
    assert_eq!(
        errs,
        [(5, 0, 4096, u32::MAX), (4, 2, 0, 1)],
        "most recent first"
    );
    let t = &r.self_tests;
    assert_eq!(t.len(), 2);
    assert_eq!(
        (
            t[0].kind.as_str(),
            t[0].result.as_str(),
            t[0].first_failing_lba
        ),
        ("extended", "failed", Some(777))
    );
    assert_eq!(
        (t[1].kind.as_str(), t[1].result.as_str()),
        ("short", "passed")
    );
    assert_eq!(r.link, None, "smartctl does not say an NVMe link");
    assert!(r.ata_attributes.is_empty() && r.scsi.is_none());
    // Real NVMe output without the newer keys: what is there, and nothing made up.
    let old = load("smart-nvme.json");
    let n = old.nvme.as_ref().unwrap();
    assert_eq!(n.controller_busy_minutes, Some(3060));
    assert_eq!(n.host_write_commands, Some(83_170_961));
    assert_eq!(n.thermal_transitions, [None, None]);
    assert!(n.temperature_sensors.is_empty() && n.error_log.is_empty());
    assert!(old.self_tests.is_empty());
}

/// Issue 20: the SCSI error counter log by direction, grown defects, start-stop counts,
/// the trip temperature, self-tests.
#[test]
fn sas_detail_in_full() {
    let r = load("detail-sas.json");
    let s = r.scsi.as_ref().expect("scsi detail");
    let read = s.read.as_ref().unwrap();
    assert_eq!(read.corrected_by_ecc_fast, Some(10));
    assert_eq!(read.corrected_by_ecc_delayed, Some(2));
    assert_eq!(read.corrected_by_rereads_rewrites, Some(1));
    assert_eq!(read.total_corrected, Some(13));
    assert_eq!(read.correction_algorithm_invocations, Some(5));
    assert_eq!(read.total_uncorrected, Some(1));
    assert_eq!(read.processed_bytes, Some(1_234_500_000_000));
    assert_eq!(
        s.write.as_ref().unwrap().processed_bytes,
        Some(99_001_000_000)
    );
    assert_eq!(s.verify.as_ref().unwrap().total_corrected, Some(4));
    assert_eq!(s.grown_defects, Some(3));
    assert_eq!(
        (s.start_stop_cycles, s.start_stop_cycles_specified),
        (Some(88), Some(50_000))
    );
    assert_eq!(
        (s.load_unload_cycles, s.load_unload_cycles_specified),
        (Some(1500), Some(600_000))
    );
    assert_eq!(s.drive_trip_celsius, Some(65.0));
    assert_eq!(r.temperature_celsius, Some(33.0));
    let t: Vec<(&str, &str, Option<u64>, Option<u64>)> = r
        .self_tests
        .iter()
        .map(|t| {
            (
                t.kind.as_str(),
                t.result.as_str(),
                t.power_on_hours,
                t.first_failing_lba,
            )
        })
        .collect();
    assert_eq!(
        t,
        [
            ("extended", "failed", Some(4100), Some(99_999)),
            ("short", "passed", Some(4000), None),
        ]
    );
    // The real SAS drive: its two directions, no start-stop log in that output.
    let real = load("smart-scsi.json");
    let s = real.scsi.as_ref().unwrap();
    assert_eq!(s.read.as_ref().unwrap().total_corrected, Some(300_357_663));
    assert_eq!(s.verify, None);
    assert_eq!(s.grown_defects, Some(56));
    assert_eq!(s.start_stop_cycles, None);
}

/// Issue 20: every attribute of the real ATA drives is kept, none invented.
#[test]
fn real_ata_drives_keep_every_attribute() {
    for name in [
        "smart-ata.json",
        "smart-ata2.json",
        "smart-fail2.json",
        "smart-megaraid0.json",
    ] {
        let text = fs::read_to_string(fixture_path(name)).unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        let table = v["ata_smart_attributes"]["table"].as_array().unwrap();
        let r = load(name);
        assert_eq!(r.ata_attributes.len(), table.len(), "{name}");
        for (a, e) in r.ata_attributes.iter().zip(table) {
            assert_eq!(u64::from(a.id), e["id"].as_u64().unwrap(), "{name}");
            assert_eq!(a.name, e["name"].as_str().unwrap(), "{name}");
            assert_eq!(a.raw, e["raw"]["value"].as_u64(), "{name}");
            assert_eq!(
                a.failed_now,
                e["when_failed"] == "now"
                    || (e["thresh"].as_u64() > Some(0)
                        && e["value"].as_u64() <= e["thresh"].as_u64()),
                "{name} {}",
                a.id
            );
        }
    }
    let failing = load("smart-fail2.json");
    assert!(
        failing
            .ata_attributes
            .iter()
            .any(|a| a.failed_now || a.failed_in_past),
        "the failing drive has an attribute at or below threshold"
    );
    let sata = load("smart-ata.json");
    let link = sata.link.as_ref().unwrap();
    assert_eq!(
        (
            link.current_speed_transfers_per_second,
            link.max_speed_transfers_per_second
        ),
        (Some(6e9), Some(6e9))
    );
    assert!(!link.degraded());
    assert_eq!(sata.self_tests.len(), 2, "{:?}", sata.self_tests);
}

// ---------------------------------------------------------------------------------------
// Self-tests (issue 20)
// ---------------------------------------------------------------------------------------

/// A self-test in progress is read with its kind and share done, from each transport's
/// place in smartctl's JSON (hand-written fixtures, see the README; and one real file).
#[test]
fn self_tests_in_progress_are_read_with_their_progress() {
    let r = load("selftest-running-sata.json");
    let p = r.self_test_running.expect("ATA test in progress");
    assert_eq!(p.kind, "short");
    assert_eq!(p.done_ratio, Some(0.1));
    // The log's in-progress entry is no result.
    assert!(!r.self_tests.iter().any(|t| t.failed()));
    let r = load("selftest-running-nvme.json");
    let p = r.self_test_running.expect("NVMe test in progress");
    assert_eq!(p.kind, "extended");
    assert_eq!(p.done_ratio, Some(0.42));
    let r = load("selftest-running-sas.json");
    let p = r.self_test_running.expect("SCSI test in progress");
    assert_eq!(p.kind, "extended");
    assert_eq!(p.done_ratio, None, "smartctl gives no share done for SCSI");
    // A real WD140EDFZ read while its test had 10% left (status 241), kind not logged.
    let r = load("smart-ata.json");
    let p = r
        .self_test_running
        .expect("the real file's test in progress");
    assert_eq!(p.done_ratio, Some(0.9));
    // Nothing running: the NVMe detail file says "No self-test in progress".
    for name in [
        "detail-nvme.json",
        "detail-sata.json",
        "detail-sas.json",
        "smart-nvme.json",
    ] {
        assert_eq!(load(name).self_test_running, None, "{name}");
    }
}

/// A failed self-test is a failing verdict, naming the kind and the LBA; a later pass of
/// the same kind clears it.
#[test]
fn a_failed_self_test_is_a_failing_verdict_until_the_same_kind_passes() {
    let text = fs::read_to_string(fixture_path("detail-sata.json")).unwrap();
    let r = parse(&text).unwrap();
    let a = driveprobe::health::assess(&r);
    assert_eq!(a.verdict, driveprobe::health::Verdict::Failing, "{a:?}");
    let why = a
        .reasons
        .iter()
        .find(|w| w.contains("self-test"))
        .unwrap_or_else(|| panic!("{a:?}"));
    assert!(
        why.contains("latest extended self-test failed")
            && why.contains("Completed: read failure")
            && why.contains("123456789"),
        "{why}"
    );
    // A newer extended test passed: the failure is history.
    let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let table = v["ata_smart_self_test_log"]["extended"]["table"]
        .as_array_mut()
        .unwrap();
    table.insert(
        0,
        serde_json::json!({"type": {"value": 2, "string": "Extended offline"},
            "status": {"value": 0, "string": "Completed without error", "passed": true},
            "lifetime_hours": 20200}),
    );
    let r = parse(&v.to_string()).unwrap();
    let a = driveprobe::health::assess(&r);
    assert!(!a.reasons.iter().any(|w| w.contains("self-test")), "{a:?}");
}

/// `smartctl -t short` through a fake: the arguments, and a refusal in smartctl's words.
#[test]
fn starting_a_self_test_through_smartctl() {
    let f = fakes();
    smartctl::run_action(
        &f.prog("test-ok"),
        Path::new("/dev/bus/0"),
        Some("megaraid,2"),
        &["-t", "short"],
        LONG,
    )
    .unwrap();
    let args = fs::read_to_string(f.dir.join("test-ok.args")).unwrap();
    assert_eq!(
        args.trim_end(),
        "--json=c -t short -d megaraid,2 /dev/bus/0"
    );
    let e = smartctl::run_action(
        &f.prog("test-busy"),
        Path::new(DEV),
        None,
        &["-t", "long"],
        LONG,
    )
    .unwrap_err();
    assert!(matches!(e, SmartctlError::ActionFailed { .. }), "{e}");
    let s = e.to_string();
    assert!(
        s.starts_with("smartctl -t long on /dev/null failed: Can't start self-test without aborting current test"),
        "{s}"
    );
    assert!(!s.contains('\n'), "{s}");
}
