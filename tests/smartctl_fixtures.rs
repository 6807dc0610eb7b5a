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
