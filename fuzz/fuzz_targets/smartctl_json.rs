//! Any text as smartctl JSON: a report or an error, never a panic.
#![no_main]

use driveprobe::health::model::assess;
use driveprobe::health::smartctl;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(r) = smartctl::parse(text) {
            let _ = assess(&r);
        }
        let _ = smartctl::parse_scan(text);
    }
});
