//! Bad input to the health parsers: random bytes, truncations and mutations of real
//! data. Each gives a value or an error, never a panic. (The cargo-fuzz targets in
//! fuzz/ explore further; this runs on every `cargo test`.)

use driveprobe::health::model::{assess, Source};
use driveprobe::health::{nvme, smartctl};
use driveprobe::rng::Rng;

fn nvme_all(data: &[u8]) {
    let ctrl = nvme::parse_id_ctrl(data).ok();
    let ns = nvme::parse_id_ns(data).ok();
    let ocp = nvme::parse_ocp_c0(data).ok();
    let _ = nvme::parse_error_log(data);
    let _ = nvme::parse_error_entries(data);
    let _ = nvme::parse_self_test_log(data);
    if let Ok(s) = nvme::parse_smart_log(data) {
        let r = nvme::report(
            &s,
            ctrl.as_ref(),
            ns.as_ref(),
            ocp.as_ref(),
            Source::NvmeLogFile,
        );
        let _ = assess(&r);
    }
}

#[test]
fn nvme_parsers_survive_random_and_truncated_bytes() {
    let mut rng = Rng::new(1);
    for len in [0usize, 1, 63, 64, 511, 512, 513, 563, 564, 4095, 4096, 8192] {
        for _ in 0..200 {
            let mut b = vec![0u8; len];
            rng.fill(&mut b);
            nvme_all(&b);
        }
    }
    let mut all_ones = vec![0xffu8; 4096];
    nvme_all(&all_ones);
    all_ones[25] = 63; // 64 LBA formats claimed
    all_ones[26] = 0xff;
    nvme_all(&all_ones);
}

fn fixtures() -> Vec<String> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/smartctl");
    let mut v: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
        .map(|e| std::fs::read_to_string(e.path()).unwrap())
        .collect();
    v.sort();
    assert!(v.len() >= 10, "fixtures missing in {}", dir.display());
    v
}

#[test]
fn smartctl_parser_survives_garbage_truncation_and_mutation() {
    let mut rng = Rng::new(2);
    for text in [
        "",
        "{",
        "[]",
        "null",
        "42",
        "\"x\"",
        "{}",
        "{\"ata_smart_attributes\": 5}",
        "{\"nvme_smart_health_information_log\": {\"data_units_written\": -1}}",
        "{\"user_capacity\": {\"bytes\": 1e400}}",
        "{\"temperature\": {\"current\": \"hot\"}}",
        // Issue 20's sections with wrong types, odd ranges and huge numbers.
        "{\"ata_smart_attributes\": {\"table\": [{\"id\": 300}, {\"id\": 5, \"value\": -1, \"worst\": 1e300, \"raw\": {\"value\": \"x\"}}, {\"id\": 5}, 7]}}",
        "{\"ata_device_statistics\": {\"pages\": [{\"number\": 999, \"table\": []}, {\"number\": 1, \"table\": [{\"name\": 5, \"value\": -9223372036854775808}, {\"name\": \"x\", \"value\": 1e40}]}]}}",
        "{\"sata_phy_event_counters\": {\"table\": [{\"id\": 70000, \"value\": 1}, {\"id\": 1, \"value\": -1}, null]}}",
        "{\"scsi_error_counter_log\": {\"read\": {\"gigabytes_processed\": \"1e999\"}, \"verify\": 3}, \"scsi_start_stop_cycle_counter\": []}",
        "{\"nvme_smart_health_information_log\": {\"temperature_sensors\": [1e9, -300, \"x\", 40, 40, 40, 40, 40, 40, 40, 40]}, \"nvme_error_information_log\": {\"table\": [{\"error_count\": 1, \"nsid\": 1e30, \"lba\": 5}]}}",
        "{\"interface_speed\": {\"current\": {\"units_per_second\": 18446744073709551615, \"bits_per_unit\": 18446744073709551615}, \"max\": \"fast\"}}",
        "{\"ata_smart_self_test_log\": {\"extended\": {\"table\": [{\"type\": {\"value\": -1}, \"status\": {\"value\": 1e20}}]}}, \"nvme_self_test_log\": {\"table\": [{}]}, \"scsi_self_test_0\": 1}",
    ] {
        if let Ok(r) = smartctl::parse(text) {
            let _ = assess(&r);
        }
    }
    for text in fixtures() {
        // every prefix length class, and random byte mutations that keep UTF-8
        for cut in (0..text.len()).step_by((text.len() / 50).max(1)) {
            if text.is_char_boundary(cut) {
                let _ = smartctl::parse(&text[..cut]);
            }
        }
        let bytes = text.as_bytes();
        for _ in 0..200 {
            let mut m = bytes.to_vec();
            for _ in 0..4 {
                let i = rng.below(m.len() as u64) as usize;
                m[i] = b"0123456789{}[]\",:-. aez"[rng.below(23) as usize];
            }
            if let Ok(s) = String::from_utf8(m) {
                if let Ok(r) = smartctl::parse(&s) {
                    let _ = assess(&r);
                }
            }
        }
    }
}
