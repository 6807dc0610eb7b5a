//! Any text as a daemon config: a validated config or one `FILE:LINE:COL` error, never a
//! panic (the config is read before anything runs, and again on every SIGHUP).
#![no_main]

use driveprobe::config::{Config, ConfigError};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        match Config::parse(text, "fuzz.toml") {
            Ok(_) => {}
            Err(ConfigError::Invalid { file, line, column, message }) => {
                assert_eq!(file, "fuzz.toml");
                assert!(line >= 1 && column >= 1, "{line}:{column}");
                assert!(!message.is_empty() && !message.contains('\n'), "{message:?}");
            }
            Err(e) => panic!("parse gave a non-location error: {e}"),
        }
    }
});
