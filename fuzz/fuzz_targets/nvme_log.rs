//! Any bytes as an NVMe SMART log, Identify Controller, Identify Namespace, OCP C0h page,
//! error log or Device Self-test log: parsers return a value or an error, never panic.
#![no_main]

use driveprobe::health::model::{assess, Source};
use driveprobe::health::nvme;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let ctrl = nvme::parse_id_ctrl(data).ok();
    let ns = nvme::parse_id_ns(data).ok();
    let ocp = nvme::parse_ocp_c0(data).ok();
    let _ = nvme::parse_error_log(data);
    let _ = nvme::parse_error_entries(data);
    let _ = nvme::parse_self_test_log(data);
    if let Ok(s) = nvme::parse_smart_log(data) {
        let r = nvme::report(&s, ctrl.as_ref(), ns.as_ref(), ocp.as_ref(), Source::NvmeLogFile);
        let _ = assess(&r);
    }
});
